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

from gpulint.model.ir import Model
from gpulint.passes import Pass, PassOptions, PassResult
from gpulint.passes.edit import dequantize, prune, set_const


def run(model: Model, options: PassOptions) -> PassResult:
    changes: list[str] = []
    for si, sg in enumerate(model.subgraphs):
        keep = []
        for oi, op in enumerate(sg.operators):
            if model.op_name(op) != "DEQUANTIZE" or not op.inputs or op.inputs[0] < 0 or len(op.outputs) != 1:
                keep.append(op)
                continue
            src, out = sg.tensors[op.inputs[0]], op.outputs[0]
            if options.keep_fp16 and src.type == "FLOAT16":
                keep.append(op)
                continue
            values = dequantize(model, src)
            if values is None or out in sg.outputs or sg.tensors[out].type != "FLOAT32":
                keep.append(op)
                continue
            set_const(model, sg, out, values.reshape(sg.tensors[out].shape))
            sg.tensors[out].quantization = None
            changes.append(f"subgraph {si}: folded DEQUANTIZE (op {oi}) of {src.type} constant `{src.name}`")
        sg.operators = keep
    if changes:
        prune(model)
    return PassResult(changes)


PASS = Pass("dequantize-constants", True, "fold DEQUANTIZE of fp16/int8 constant weights into float32 constants", run)
