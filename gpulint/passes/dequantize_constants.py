"""Fold DEQUANTIZE of a constant into a float32 constant.

    DEQUANTIZE(const fp16 | int8 | uint8 | int16, per-tensor or per-channel) -> const float32

The DEQUANTIZE's output tensor keeps its index and name and gets the float32 values, so its
readers do not change; the quantized buffer is dropped when nothing else uses it.

Trade-off (`--keep-fp16`): fp16 weights take half the bytes of float32 and the GPU delegate
folds fp16 DEQUANTIZE itself, so for a GPU-only app keeping them costs nothing at run time;
folding them doubles those weights on disk but leaves a graph with no DEQUANTIZE ops, which
every runtime and tool reads the same way. Values are identical either way: fp16 -> fp32 is
exact.
"""

from __future__ import annotations

import numpy as np

from gpulint.model.ir import Model, Subgraph, Tensor
from gpulint.passes import Pass, PassOptions, PassResult
from gpulint.passes.edit import dequantize, fold_constant_ops


def run(model: Model, options: PassOptions) -> PassResult:
    def fold(sg: Subgraph, src: Tensor, out: Tensor) -> np.ndarray | None:
        if (options.keep_fp16 and src.type == "FLOAT16") or out.type != "FLOAT32":
            return None
        return dequantize(model, src)

    return PassResult(*fold_constant_ops(model, "DEQUANTIZE", fold))


PASS = Pass("dequantize-constants", True, "fold DEQUANTIZE of fp16/int8 constant weights into float32 constants", run)
