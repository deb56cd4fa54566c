#!/usr/bin/env bash
# The executor on a lent NVIDIA machine (the `device` tool): nothing can be fetched there, so the
# Python packages gpulint needs travel as wheels in .whl/ and the corpus in .devmodels/ (both in
# .git/info/exclude; see README "On a real GPU"). Writes what it measures under $OUT.
#   usage (on the device machine, repo root): bash bench/on_gpu.sh [probe|bench|profile|launches|tests|all]
set -u
what=${1:-all}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  || { echo "wheel install failed"; exit 1; }
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 GPULINT_CORPUS=$PWD/.devmodels
# The NVIDIA driver's OpenCL library is mounted, its ICD file is not: write one for pyopencl's loader.
lib=$(ls /usr/local/nvidia/lib64/libnvidia-opencl.so.1 /usr/lib/x86_64-linux-gnu/libnvidia-opencl.so.1 2>/dev/null | head -1)
mkdir -p /etc/OpenCL/vendors && [ -n "$lib" ] && echo "$lib" > /etc/OpenCL/vendors/nvidia.icd
echo "NVIDIA OpenCL library: ${lib:-none found}"
if [[ $what == probe || $what == all ]]; then
  python3 - <<'PY' 2>&1 | tee "$OUT/probe.txt"
import os, pyopencl as cl
print("cores", os.cpu_count())
for p in cl.get_platforms():
    for d in p.get_devices():
        print(p.name, "|", d.name, "|", d.driver_version, "| CUs", d.max_compute_units,
              "| wg", d.max_work_group_size, "| local", d.local_mem_size,
              "| fp16" if "cl_khr_fp16" in d.extensions else "| no fp16")
PY
fi
if [[ $what == bench || $what == all ]]; then
  python3 bench/bench_executor.py --corpus .devmodels --runs 20 2>&1 | tee "$OUT/bench.txt"
fi
if [[ $what == profile || $what == all ]]; then  # per-op kernel times, one JSON object per line
  for p in fp32 fp16; do for m in .devmodels/mediapipe/*.tflite; do
    python3 -m gpulint bench "$m" --precision $p --no-start --format json | tr -d '\n'; echo
  done; done > "$OUT/profile.jsonl"
fi
if [[ $what == launches || $what == all ]]; then  # run vs enqueue loop vs kernels, per model
  python3 bench/launch_cost.py 300 .devmodels/mediapipe/*.tflite 2>&1 | tee "$OUT/launches.txt"
fi
if [[ $what == tests || $what == all ]]; then
  timeout ${TEST_LIMIT:-300} python3 -m pytest -q --maxfail=40 -p no:cacheprovider -n 8 ${TESTS:-tests/test_executor.py tests/test_kernels.py tests/test_verify.py tests/test_large_buffers.py tests/test_partitioned.py tests/test_bench.py} 2>&1 | tail -80 | tee "$OUT/tests.txt"
fi
