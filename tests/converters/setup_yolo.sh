#!/usr/bin/env bash
# Builds the YOLO corpus of issue #22 (`make converters`, run by `make test`): Ultralytics -> ONNX -> onnx2tf ->
# TFLite, in a venv of its own (torch, tensorflow and onnx2tf pin numpy/protobuf versions that are not ours).
#
#   tests/converters/setup_yolo.sh VENV CACHE            the test corpus (tests/test_corpus_yolo.py), imgsz 160
#   tests/converters/setup_yolo.sh VENV CACHE --bench    YOLOv8n and YOLO11n detect at 640 (bench/bench_yolo.py)
#
# The pins are what Ultralytics 8.4.190's TensorFlow exporter asks for (ultralytics/utils/export/tensorflow.py:
# tensorflow<=2.19 on Python 3.11, onnx2tf>=1.26.3,<1.29 installed --no-deps, tf_keras<=2.19, sng4onnx,
# onnx_graphsurgeon, ai-edge-litert, onnx, onnxslim, onnxruntime; numpy<2 from its export-tensorflow extra).
# torch: Ultralytics needs torchvision, and PyPI's torchvision does not load beside a CPU-only torch, so the
# matching pair is taken (on this machine's kind both lie on disk, pip takes them from there).
# A stamp file makes a second run instant; the corpus is cached by key (package versions + yolo_build.py)
# under CACHE, so it is built once. Exit 0 when ready, 3 when it cannot be set up here (the tests then skip
# and say why).
set -uo pipefail
VENV=${1:?usage: setup_yolo.sh VENV CACHE [--bench]}
CACHE=${2:?usage: setup_yolo.sh VENV CACHE [--bench]}
BENCH=${3:-}
HERE=$(cd "$(dirname "$0")" && pwd)
PY=${YOLO_PYTHON:-$(command -v python3.11 || command -v python3)}
case "$(uname -m)" in
  aarch64) TORCH="torch==2.9.1 torchvision==0.24.1" ;;
  *) TORCH="torch==2.14.1 torchvision==0.29.1" ;;
esac
PINS="$TORCH ultralytics==8.4.190 tensorflow==2.19.0 tf_keras==2.19.0 sng4onnx==2.0.1 onnx_graphsurgeon==0.6.1
  ai-edge-litert==2.3.0 onnx==1.22.0 onnxslim==0.1.98 onnxruntime==1.32.0 protobuf==5.29.6 numpy==1.26.4"
NODEPS="onnx2tf==1.28.8"
STAMP="$VENV/.yolo-ready"
export YOLO_CONFIG_DIR=${YOLO_CONFIG_DIR:-$VENV/ultralytics-config}  # Ultralytics' settings file, not in ~/.config
WANT="$(echo $PINS $NODEPS)"

note() { echo "note: $*; the YOLO corpus tests will skip" >&2; exit 3; }

[ -n "$PY" ] || note "no python3 to make the YOLO venv with"
if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$WANT" ]; then
  start=$SECONDS
  [ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV" || note "could not create the venv $VENV"
  echo "setting up the YOLO converter venv $VENV (several GB: torch, tensorflow)" >&2
  # (pip's warnings about this machine's unused find-links folders are not ours to show)
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check $PINS 2> >(grep -v "is ignored: it is neither" >&2) \
    || note "pip could not install the YOLO toolchain into $VENV"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-deps $NODEPS \
    2> >(grep -v "is ignored: it is neither" >&2) || note "pip could not install $NODEPS into $VENV"
  "$VENV/bin/python" -c "import ultralytics, onnx2tf, tensorflow, torchvision" 2>/dev/null \
    || note "the YOLO venv $VENV does not import"
  echo "$WANT" > "$STAMP"
  echo "YOLO venv ready in $((SECONDS - start)) s" >&2
fi

mkdir -p "$CACHE" || note "cannot create $CACHE"
start=$SECONDS
"$VENV/bin/python" "$HERE/yolo_build.py" "$CACHE" $BENCH >"$CACHE/build.log" 2>&1 \
  || { tail -20 "$CACHE/build.log" >&2; note "the YOLO export failed (log: $CACHE/build.log)"; }
out=$(tail -n 1 "$CACHE/build.log")  # yolo_build.py's last line: the corpus folder
echo "YOLO corpus ready in $out ($((SECONDS - start)) s)" >&2
