"""Fold DEQUANTIZE of a constant into a float32 constant.

    DEQUANTIZE(const fp16 | int8 | uint8 | int16, per-tensor or per-channel) -> const float32

The DEQUANTIZE's output tensor keeps its index and name and gets the float32 values, so its
readers do not change; the quantized buffer is dropped when nothing else uses it.

Which constants `gpulint fix` folds by default (the executor folds all of them, PassOptions()):
- fp16: kept (`--keep-fp16`, the default; `--fold-fp16` folds them). Every GPU delegate target
  folds them itself: FP16GraphPartitionHelper points the ops it delegates at the fp16 constant
  (tflite/delegates/utils.cc; the check engine models it in rules/partition.py). Folding them
  here only doubles those weights on disk; fp16 -> fp32 is exact, so values are the same.
- int8 / uint8 / int16: folded. The delegate has a DEQUANTIZE parser only with the quantized-
  models flag, and even then a constant one becomes a CONSTANT node whose output its readers
  take as a run-time tensor (tflite/delegates/gpu/common/model_builder.cc
  DequantizeOperationParser): a conv's weights become a second run-time input, which the
  OpenGL backend fails to build ("Batch size mismatch", `gpulint check`). float32 constants
  work on every backend, at 4x the bytes of int8.
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
