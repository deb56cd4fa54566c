#!/usr/bin/env bash
# LiteRT 2.4's GPU accelerator as a second LiteRT oracle (`make oracle-webgpu`, run by `make test`):
# the pinned nightly wheel in a venv of its own, on the Mesa lavapipe that `setup.sh --webgpu` set up
# for 2.3 (so it runs only after that one is ready). tests/test_litert_versions.py holds
# `check --target litert-gpu --litert-version 2.4` to it, and skips saying why where it is missing.
#
#   tests/oracle/setup_litert24.sh VENV ORACLE_VENV     e.g. .oracle-litert24-venv .oracle-venv
#
# Exit 0 when ready, 3 when it cannot be set up here.
set -uo pipefail
VENV=${1:?usage: setup_litert24.sh VENV ORACLE_VENV}
ORACLE_VENV=${2:?usage: setup_litert24.sh VENV ORACLE_VENV}
PY=${ORACLE_PYTHON:-$(command -v python3.11 || command -v python3)}
PINS="ai-edge-litert-nightly==2.4.0.dev20261026 numpy"   # tests/oracle/litert.py NIGHTLY_PINS
STAMP="$VENV/.oracle-ready"
note() { echo "note: $*; the LiteRT 2.4 oracle tests will skip" >&2; exit 3; }

[ -f "$ORACLE_VENV/.oracle-webgpu-ready" ] || note "LiteRT 2.3's WebGPU oracle ($ORACLE_VENV) is not ready, so Mesa's lavapipe is not either"
[ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$PINS" ] && exit 0
[ -n "$PY" ] || note "no python3 to make the venv with"
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV" || note "could not create the venv $VENV"
echo "setting up LiteRT 2.4's accelerator in $VENV ($PINS)" >&2
"$VENV/bin/python" -m pip install -q --disable-pip-version-check $PINS 2> >(grep -v "is ignored: it is neither" >&2) \
  || note "pip could not install $PINS into $VENV"
"$VENV/bin/python" -c "import ai_edge_litert, numpy" || note "the venv $VENV does not import ai_edge_litert"
echo "$PINS" > "$STAMP"
touch "$VENV/.oracle-webgpu-ready"
echo "LiteRT 2.4 oracle ready: $VENV" >&2
