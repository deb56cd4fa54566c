"""The LiteRT oracle's child: LiteRT's GPU accelerator on many .tflite files, one process.

Runs in the oracle venv (`make oracle-webgpu`: ai-edge-litert==2.3.0 and Mesa >= 24 lavapipe),
never in ours, and is started by tests/oracle/litert.py; it imports nothing from gpulint or the
tests. Adapted from ../shared/oracle/litert_gpu.py (one model per process): it compiles each model
with the public `CompiledModel` API, GPU then CPU, which loads the WebGPU accelerator
(libLiteRtWebGpuAccelerator.so: ML Drift on Dawn) on Mesa's lavapipe Vulkan. One LiteRT
environment serves every model (creating the WebGPU device once).

Protocol (as tests/oracle/gl_child.py's): model paths come one a line on stdin. For each, the
child writes to fd 2 (where the C++ code logs) "@@ORACLE BEGIN <n>" and "@@ORACLE END <n>" around
that model's work, and to stdout one line "@@ORACLE RESULT <n> <json>". A model that kills the
process leaves a BEGIN without an END; the parent records it as a crash and goes on in a new child.

With GPULINT_ORACLE_INVOKE=1 each model is also run once on zero inputs (shader compilation on
lavapipe: seconds a model); without it, only compiled.
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
import traceback

# The interpreter logs its refusal of a delegate ("Attempting to use a delegate that only supports
# static-sized tensors ...") once per process (TFLITE_LOG_PROD_ONCE: a function-local static bool
# and its guard). Zeroing both before each model makes it log for every model. They are local
# symbols of the wheel's libpywrap_litert_common.so, found with `nm`; without them a refusal reads
# as a failed compile with no words (the parent says so).
ONCE = (
    "_ZGVZN6tflite8Subgraph27ModifyGraphWithDelegateImplEP14TfLiteDelegateE8s_logged",
    "_ZZN6tflite8Subgraph27ModifyGraphWithDelegateImplEP14TfLiteDelegateE8s_logged",
)
COMMON = "libpywrap_litert_common.so"


def _fd2(text: str) -> None:
    sys.stderr.flush()
    os.write(2, text.encode())


def _once_flags() -> list[int]:
    """The run-time addresses of the refusal log's once-flags (empty when they cannot be found)."""
    import ai_edge_litert

    so = os.path.join(os.path.dirname(ai_edge_litert.__file__), COMMON)
    base = None
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 6 and parts[5] == os.path.realpath(so) and int(parts[2], 16) == 0:
                base = int(parts[0].split("-")[0], 16)
                break
    if base is None:
        return []
    try:
        out = subprocess.run(["nm", so], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return []
    offsets = {p[2]: int(p[0], 16) for p in (x.split() for x in out.splitlines()) if len(p) == 3 and p[2] in ONCE}
    return [base + offsets[s] for s in ONCE if s in offsets]


def main() -> None:
    from ai_edge_litert import compiled_model as cm
    from ai_edge_litert.hardware_accelerator import HardwareAccelerator as HA

    invoke = os.environ.get("GPULINT_ORACLE_INVOKE") == "1"
    env = cm._create_default_environment()  # one WebGPU device for every model
    flags = _once_flags()
    _fd2(f"@@ORACLE READY once-flags={len(flags)}\n")
    for n, line in enumerate(sys.stdin):
        path = line.rstrip("\n")
        if not path:
            continue
        _fd2(f"@@ORACLE BEGIN {n}\n")
        res: dict[str, object] = {"compiled": False, "once_flags": len(flags)}
        for addr in flags:
            ctypes.c_uint8.from_address(addr).value = 0
        try:
            model = cm.CompiledModel.from_file(path, hardware_accel=HA.GPU | HA.CPU, environment=env)
            res["compiled"] = True
            res["fully_accelerated"] = bool(model.is_fully_accelerated())
            if invoke:
                try:
                    ins, outs = model.create_input_buffers(0), model.create_output_buffers(0)
                    model.run_by_index(0, ins, outs)
                    res["ran"] = "ok"
                except Exception as e:  # the run failed, the compile did not
                    res["ran"] = "error: " + " ".join(str(e).split())[:400]
            model.close()
            del model
        except Exception as e:
            res["error"] = " ".join(str(e).split())[:600]
        except BaseException:
            res["error"] = traceback.format_exc()[-600:]
        _fd2(f"@@ORACLE END {n}\n")
        sys.stdout.write(f"@@ORACLE RESULT {n} {json.dumps(res)}\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
