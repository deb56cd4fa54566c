"""The child process of the litert-gpu engine: `python -m gpulint.engines.litert_child MODEL F32`.

It compiles MODEL once with LiteRT's `CompiledModel` API, GPU then CPU (the GPU accelerator of
the ai-edge-litert wheel: ML Drift on WebGPU/Dawn), with `enforce_f32` when F32 is "1", and
answers one line on stdout per line on stdin:
- at start, "@@COMPILED <json>": the signature's input and output names, or "@@ERROR <text>";
- for each "IN.npz OUT.npz" line: the inputs (arr_0.. in the signature's input order) written,
  the model run, its outputs saved in the signature's output order; "@@DONE" or "@@ERROR <text>".
The accelerator logs to fd 2, which the parent keeps in a file and reads (placement, the adapter,
refusals). A crash of the accelerator (some graphs abort it) ends this process only.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import numpy as np


def _answer(line: str) -> None:
    sys.stdout.write(line.replace("\n", " ") + "\n")
    sys.stdout.flush()


def _error(e: BaseException) -> str:
    return " ".join(str(e).split())[:2000] or type(e).__name__


def main(model_path: str, enforce_f32: bool) -> None:
    from ai_edge_litert.compiled_model import CompiledModel
    from ai_edge_litert.hardware_accelerator import HardwareAccelerator
    from ai_edge_litert.options import GpuOptions, Options

    accel = HardwareAccelerator.GPU | HardwareAccelerator.CPU
    try:
        options = Options(accel, gpu_options=GpuOptions(enforce_f32=enforce_f32))
        model = CompiledModel.from_file(model_path, options=options)
        key = next(iter(model.get_signature_list()))
        sig = model.get_signature_by_index(0)
    except Exception as e:
        _answer(f"@@ERROR {_error(e)}")
        return
    _answer("@@COMPILED " + json.dumps({"signature": key, "inputs": sig["inputs"], "outputs": sig["outputs"]}))
    shapes: list[Any] | None = None
    for line in sys.stdin:
        src, dst = line.split()
        try:
            with np.load(src) as z:
                feed = [z[f"arr_{i}"] for i in range(len(z.files))]
            details = model.get_input_tensor_details(key)
            for i, (name, x) in enumerate(zip(sig["inputs"], feed, strict=True)):
                if list(details[name]["shape"]) != list(x.shape):
                    model.resize_input_tensor(i, list(x.shape), 0)
                    shapes = None
            ins, outs = model.create_input_buffers(0), model.create_output_buffers(0)
            for buf, x in zip(ins, feed, strict=True):
                buf.write(np.ascontiguousarray(x))
            model.run_by_index(0, ins, outs)
            if shapes is None:
                out_details = model.get_output_tensor_details(key)
                shapes = [(out_details[n]["shape"], np.dtype(out_details[n]["dtype"])) for n in sig["outputs"]]
            got = []
            for buf, (shape, dtype) in zip(outs, shapes, strict=True):
                size = int(np.prod(shape)) if len(shape) else 1
                got.append(np.asarray(buf.read(size, dtype), dtype).reshape(shape))
            np.savez(dst, *got)
            _answer("@@DONE")
        except Exception as e:
            _answer(f"@@ERROR {_error(e)}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] == "1")
