#!/usr/bin/env bash
# The venv of tests/test_explorer.py: Model Explorer (ai-edge-model-explorer, pinned) and gpulint from this
# checkout (editable), apart from .venv because Model Explorer is an optional extra of gpulint's.
#
#   tests/explorer/setup.sh [VENV]      default VENV: .explorer-venv at the repository root
#
# A stamp file makes a second run instant. Exit 0 when ready, 3 when it cannot be set up here (the tests
# then skip and say why).
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
VENV=${1:-$REPO/.explorer-venv}
PY=${EXPLORER_PYTHON:-$(command -v python3.11 || command -v python3)}
PINS="ai-edge-model-explorer==0.1.34"
STAMP="$VENV/.explorer-ready"

note() { echo "note: $*; the Model Explorer tests will skip" >&2; exit 3; }

[ -n "$PY" ] || note "no python3 to make the Model Explorer venv with"
if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$PINS" ]; then
  [ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV" || note "could not create the venv $VENV"
  # (pip's warnings about this machine's unused find-links folders are not ours to show)
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check $PINS -e "$REPO" \
    2> >(grep -v "is ignored: it is neither" >&2) || note "pip could not install $PINS and gpulint into $VENV"
  "$VENV/bin/python" -c "import model_explorer, gpulint.explorer.main" 2>/dev/null \
    || note "the Model Explorer venv $VENV does not import model_explorer and gpulint.explorer.main"
  echo "$PINS" > "$STAMP"
  echo "Model Explorer venv ready: $VENV" >&2
fi
