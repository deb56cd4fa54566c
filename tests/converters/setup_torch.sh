#!/usr/bin/env bash
# Builds the PyTorch corpus of issue #15 (`make converters`, run by `make test`): torch.nn models converted by
# litert-torch (float, fp16 weights, weight-only int8, dynamic-range int8, PT2E int8), in a venv of its own
# (torch and litert-torch's converter stack are a few GB that gpulint's venv must not carry).
#
#   tests/converters/setup_torch.sh [VENV [CACHE]]     default .torch-venv .converter-cache/torch
#
# torch 2.13.0: a CPU wheel that pip takes from this machine kind's disk (a plain `torch` pulls a CUDA build of
# several GB); litert-torch 0.10 asks for torch<2.15 and brings ai-edge-quantizer, torchao and the LiteRT
# converter. A stamp file makes a second run instant; the corpus is cached by key (package versions +
# torch_build.py) under CACHE, so it is built once. Exit 0 when ready, 3 when it cannot be set up here (the
# tests then skip and say why).
set -uo pipefail
cd "$(dirname "$0")/../.."
VENV=${1:-.torch-venv}
CACHE=${2:-.converter-cache/torch}
PY=${TORCH_PYTHON:-$(command -v python3.11 || command -v python3)}
PINS="torch==2.13.0 litert-torch==0.10.0"
STAMP="$VENV/.torch-ready"

note() { echo "note: $*; the PyTorch corpus tests will skip" >&2; exit 3; }

[ -n "$PY" ] || note "no python3 to make the PyTorch venv with"
if [ "$(cat "$STAMP" 2>/dev/null)" != "$PINS" ]; then
  start=$SECONDS
  echo "setting up the PyTorch converter venv $VENV ($PINS)" >&2
  [ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV" || note "could not create the venv $VENV"
  # (pip's warnings about this machine's unused find-links folders are not ours to show)
  "$VENV/bin/python" -m pip install --quiet --upgrade pip 2>&1 | grep -v "^WARNING: Location" >&2
  # shellcheck disable=SC2086
  "$VENV/bin/python" -m pip install --quiet $PINS 2>&1 | grep -v "^WARNING: Location" >&2
  "$VENV/bin/python" -c "import torch, litert_torch" >/dev/null 2>&1 || note "torch/litert-torch did not install in $VENV"
  echo "$PINS" > "$STAMP"
  echo "PyTorch venv ready in $((SECONDS - start)) s" >&2
fi

mkdir -p "$CACHE" || note "cannot write $CACHE"
start=$SECONDS
# The converters print their progress on both streams; the build's own lines ("name: ok (s)") go to the log.
if ! out=$("$VENV/bin/python" tests/converters/torch_build.py "$CACHE" 2> "$CACHE/build.log"); then
  tail -5 "$CACHE/build.log" >&2
  note "the corpus build failed (log: $CACHE/build.log)"
fi
folder=$(echo "$out" | tail -n1)  # the script's last line
failed=$(grep -cE '^[a-z0-9]+_[a-z0-9]+\.tflite: [A-Za-z]+Error' "$CACHE/build.log")
echo "PyTorch corpus ready in $folder ($((SECONDS - start)) s; models the converter refused: ${failed:-0})" >&2

# The half-precision corpus of issue #39 (tests/converters/torch_half_build.py, float32 only, a few seconds),
# beside the main one: CACHE-half (.converter-cache/torch-half by default).
HALF="${CACHE%/}-half"
half_note() { echo "note: $*; the half-precision corpus tests (tests/test_half_corpus.py) will skip" >&2; exit 3; }
mkdir -p "$HALF" || half_note "cannot write $HALF"
if ! out=$("$VENV/bin/python" tests/converters/torch_half_build.py "$HALF" 2> "$HALF/build.log"); then
  tail -5 "$HALF/build.log" >&2
  half_note "the half-precision corpus build failed (log: $HALF/build.log)"
fi
echo "PyTorch half-precision corpus ready in $(echo "$out" | tail -n1)" >&2

# torchvision's own architectures of issue #49 (tests/converters/torchvision_build.py: EfficientNet-B0, ResNet-18,
# a U-Net, ViT-small in float, fp16 weights, weight-only int8 and dynamic-range int8; about 4 minutes on 2 cores),
# beside the main corpus: .converter-cache/torchvision by default (CACHE-vision for another CACHE). torchvision
# 0.28.0 is the release for torch 2.13.0, installed --no-deps: its requirements would replace the CPU torch wheel.
# Its C++ ops need the CUDA build and stay unloaded; the build imports torchvision.models without them.
case "${CACHE%/}" in
  */torch | torch) VISION="${CACHE%/}vision" ;;  # .converter-cache/torch -> .converter-cache/torchvision
  *) VISION="${CACHE%/}-vision" ;;
esac
vision_note() { echo "note: $*; the torchvision corpus tests (tests/test_corpus_torchvision.py) will skip" >&2; exit 3; }
TV_PIN="torchvision==0.28.0"
if [ "$("$VENV/bin/python" -c 'from importlib import metadata; print(metadata.version("torchvision"))' 2>/dev/null)" != "${TV_PIN#*==}" ]; then
  "$VENV/bin/python" -m pip install --quiet --no-deps "$TV_PIN" 2>&1 | grep -v "^WARNING: Location" >&2
fi
mkdir -p "$VISION" || vision_note "cannot write $VISION"
start=$SECONDS
if ! out=$("$VENV/bin/python" tests/converters/torchvision_build.py "$VISION" 2> "$VISION/build.log"); then
  tail -5 "$VISION/build.log" >&2
  vision_note "the torchvision corpus build failed (log: $VISION/build.log)"
fi
failed=$(grep -cE '^[a-z0-9_]+\.tflite: [A-Za-z]+Error' "$VISION/build.log")
echo "torchvision corpus ready in $(echo "$out" | tail -n1) ($((SECONDS - start)) s; models the converter refused: ${failed:-0})" >&2
