#!/usr/bin/env bash
# Builds the generative corpus of issue #47 (`make converters`, run by `make test`): litert-torch's generative
# examples (litert_torch.generative.examples.*) with their fake (tiny) configs and random weights, converted
# with prefill and decode signatures and an external KV cache, in several quantization recipes, plus .litertlm
# bundles made by litert-torch's own LiteRT-LM builder (tests/converters/generative_build.py).
#
#   tests/converters/setup_generative.sh [VENV [CACHE]]     default .generative-venv .converter-cache/generative
#
# A venv of its own: litert_torch.generative imports TensorFlow (its LoRA module reads the TFLite schema from
# tensorflow.lite.python), which the PyTorch corpus's venv does not carry. tensorflow-cpu 2.21 accepts
# protobuf 6.31-7.x and litert-lm-builder takes any protobuf, so one venv serves the conversion and the bundles
# (protobuf 7.36 here; TensorFlow 2.19's protobuf<6 pin would not have). torch 2.13.0 is a CPU wheel that pip
# takes from this machine kind's disk (a plain `torch` pulls a CUDA build of several GB). A stamp file makes a
# second run instant; the corpus is cached by key (package versions + generative_build.py) under CACHE, so it
# is built once. Exit 0 when ready, 3 when it cannot be set up here (the tests then skip and say why).
set -uo pipefail
cd "$(dirname "$0")/../.."
VENV=${1:-.generative-venv}
CACHE=${2:-.converter-cache/generative}
PY=${GENERATIVE_PYTHON:-$(command -v python3.11 || command -v python3)}
PINS="torch==2.13.0 litert-torch==0.10.0 tensorflow-cpu==2.21.0"
STAMP="$VENV/.generative-ready"

note() { echo "note: $*; the generative corpus tests will skip" >&2; exit 3; }

[ -n "$PY" ] || note "no python3 to make the generative venv with"
if [ "$(cat "$STAMP" 2>/dev/null)" != "$PINS" ]; then
  start=$SECONDS
  echo "setting up the generative converter venv $VENV ($PINS)" >&2
  [ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV" || note "could not create the venv $VENV"
  # (pip's warnings about this machine's unused find-links folders are not ours to show)
  "$VENV/bin/python" -m pip install --quiet --upgrade pip 2>&1 | grep -v "^WARNING: Location" >&2
  # shellcheck disable=SC2086
  "$VENV/bin/python" -m pip install --quiet $PINS 2>&1 | grep -v "^WARNING: Location" >&2
  "$VENV/bin/python" -c "import litert_torch.generative.utilities.converter, litert_lm_builder" >/dev/null 2>&1 \
    || note "litert-torch's generative converter or the LiteRT-LM builder does not import in $VENV"
  echo "$PINS" > "$STAMP"
  echo "generative venv ready in $((SECONDS - start)) s" >&2
fi

mkdir -p "$CACHE" || note "cannot write $CACHE"
start=$SECONDS
# The converters print their progress on both streams; the build's own lines ("name: ok (s)") go to the log.
if ! out=$("$VENV/bin/python" tests/converters/generative_build.py "$CACHE" 2> "$CACHE/build.log"); then
  tail -5 "$CACHE/build.log" >&2
  note "the corpus build failed (log: $CACHE/build.log)"
fi
folder=$(echo "$out" | tail -n1)  # the script's last line
failed=$(grep -c '"error":' "$folder/manifest.json")
echo "generative corpus ready in $folder ($((SECONDS - start)) s; models the converter refused: ${failed:-0})" >&2
