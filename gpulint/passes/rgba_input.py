"""Give a 3-channel image input a 4th channel that the model ignores (unsafe: new interface).

    input [N, H, W, 3] -> [PAD (spatial only) ->] CONV_2D(weights [O, kh, kw, 3])
        => input [N, H, W, 4] -> [PAD ->] CONV_2D(weights [O, kh, kw, 4], the 4th input channel all zero)

A camera frame or GPU texture is RGBA; with a 3-channel input the app (or the delegate)
repacks every frame. The pass applies when every reader of the input is a CONV_2D reading it
as its input 0 with constant weights (float32, or a DEQUANTIZE of a constant), or a PAD that
pads only batch and space and whose readers are such convs: litert-torch writes a conv's
padding as an explicit PAD before it. The app must then feed 4 channels; whatever the 4th
holds does not change the outputs.

`refusal` is the one predicate: the pass applies exactly where it returns None, and GPU302
offers this pass as its fix only there.
"""

from __future__ import annotations

import numpy as np

from gpulint.model.ir import Model, Operator, Subgraph, Tensor
from gpulint.passes import Pass, PassOptions, PassResult
from gpulint.passes.edit import add_const, const_value, consumers, dequantize, new_op, pad_axis, producers, prune

PADS = ("PAD", "PADV2")


def refusal(model: Model, sg: Subgraph, t: int) -> str | None:
    """Why input `t` cannot become 4 channels, or None when the pass would do it."""
    x = sg.tensors[t]
    if len(x.shape) != 4 or x.shape[3] != 3:
        return "it is not [N, H, W, 3]"
    if x.type != "FLOAT32":
        return f"it is {x.type}; the pass widens float32 inputs"
    if t in sg.outputs:
        return "it is also a model output"
    readers, made_by = consumers(sg), producers(sg)
    convs, _ = _convs(model, sg, t, readers)
    if isinstance(convs, str):
        return convs
    for oi in convs:
        why = _weights_refusal(model, sg, sg.operators[oi].inputs[1], made_by)
        if why:
            return f"`CONV_2D` (op {oi}) {why}"
    return None


def _convs(model: Model, sg: Subgraph, t: int, readers: dict[int, list[int]]) -> tuple[list[int] | str, list[int]]:
    """The CONV_2Ds that read `t` as their input 0, directly or behind a spatial PAD, and the
    PADs; or why some reader is neither."""
    convs: list[int] = []
    pads: list[int] = []
    if not readers.get(t):
        return "nothing reads it", pads
    for oi in readers[t]:
        op = sg.operators[oi]
        name = model.op_name(op)
        if op.inputs[0] != t or t in op.inputs[1:]:
            return f"`{name}` (op {oi}) reads it other than as its input 0", pads
        if name == "CONV_2D":
            convs.append(oi)
            continue
        if name not in PADS:
            return f"`{name}` (op {oi}) reads it; the pass widens the input of CONV_2D (or of a PAD before one)", pads
        why = _pad_refusal(model, sg, op)
        if why:
            return f"`{name}` (op {oi}) {why}", pads
        y = op.outputs[0]
        after = readers.get(y, [])
        if y in sg.outputs or not after:
            return f"`{name}` (op {oi}) output is a model output or unread", pads
        for ci in after:
            conv = sg.operators[ci]
            if model.op_name(conv) != "CONV_2D" or conv.inputs[0] != y or y in conv.inputs[1:]:
                return f"`{model.op_name(conv)}` (op {ci}) reads the PAD's output; only a CONV_2D may", pads
            convs.append(ci)
        pads.append(oi)
    return convs, pads


def _pad_refusal(model: Model, sg: Subgraph, op: Operator) -> str | None:
    paddings = const_value(model, sg, op.inputs[1]) if len(op.inputs) > 1 else None
    if paddings is None or paddings.shape != (4, 2):
        return "has no constant [4, 2] paddings"
    if paddings[3].any():
        return "pads the channels"
    return None


def _weights_refusal(model: Model, sg: Subgraph, w: int, made_by: dict[int, int]) -> str | None:
    if w < 0:
        return "has no weights"
    if sg.tensors[w].type == "FLOAT32" and const_value(model, sg, w) is not None:
        return None
    p = made_by.get(w)
    if p is not None and model.op_name(sg.operators[p]) == "DEQUANTIZE":
        src = sg.operators[p].inputs[0]
        if src >= 0 and dequantize(model, sg.tensors[src]) is not None:
            return None
    return "weights are not a float32 constant or a DEQUANTIZE of one"


def run(model: Model, options: PassOptions) -> PassResult:
    result = PassResult()
    sg = model.subgraphs[0] if model.subgraphs else None
    if sg is None:
        return result
    for t in list(sg.inputs):
        x = sg.tensors[t]
        if len(x.shape) != 4 or x.shape[3] != 3:
            continue
        why = refusal(model, sg, t)
        if why:
            result.skipped.append(f"input `{x.name}` stays 3 channels: {why}")
            continue
        convs, pads = _convs(model, sg, t, consumers(sg))
        assert not isinstance(convs, str)
        for oi in pads:
            y = sg.tensors[sg.operators[oi].outputs[0]]
            y.shape = [*y.shape[:3], 4]
            if y.shape_signature is not None:
                y.shape_signature = [*y.shape_signature[:3], 4]
        _widen_weights(model, sg, convs)
        x.shape = [*x.shape[:3], 4]
        if x.shape_signature is not None:
            x.shape_signature = [*x.shape_signature[:3], 4]
        n = len(convs)
        behind = f" (behind {len(pads)} PAD)" if pads else ""
        readers = "the CONV_2D that reads it ignores" if n == 1 else f"the {n} CONV_2D ops that read it ignore"
        result.changes.append(f"input `{x.name}` is now 4 channels (RGBA); {readers} the 4th{behind}")
    if result.changes:
        prune(model)
    return result


def _widen_weights(model: Model, sg: Subgraph, convs: list[int]) -> None:
    """Each conv gets weights with a zero 4th input channel. fp16 weights stay fp16 behind a new
    DEQUANTIZE (the delegate folds those); other quantized ones become float32."""
    made_by = producers(sg)
    before: dict[int, Operator] = {}  # conv index -> a DEQUANTIZE to insert before it
    replaced: set[int] = set()  # the DEQUANTIZE ops whose weights a conv read
    for oi in convs:
        conv = sg.operators[oi]
        w = conv.inputs[1]
        name = sg.tensors[w].name
        p = made_by.get(w)
        src = sg.tensors[sg.operators[p].inputs[0]] if p is not None else None
        if p is not None:
            replaced.add(id(sg.operators[p]))
        if p is not None and src is not None and src.type == "FLOAT16":
            half = model.tensor_data(src)
            assert half is not None
            c = add_const(model, sg, f"{src.name}/rgba", pad_axis(np.asarray(half, np.float16), 3, 4))
            sg.tensors.append(Tensor(f"{name}/rgba", [*sg.tensors[w].shape[:3], 4], "FLOAT32"))
            version = model.opcode(sg.operators[p]).version
            before[oi] = new_op(model, "DEQUANTIZE", [c], [len(sg.tensors) - 1], version=version)
            conv.inputs[1] = len(sg.tensors) - 1
            continue
        values = const_value(model, sg, w) if src is None else dequantize(model, src)
        assert values is not None
        conv.inputs[1] = add_const(model, sg, f"{name}/rgba", pad_axis(values.astype(np.float32), 3, 4))
    ops = []
    for oi, op in enumerate(sg.operators):
        if oi in before:
            ops.append(before[oi])
        ops.append(op)
    # The DEQUANTIZEs whose weights no op reads any more go.
    read = {i for op in ops for i in op.inputs}
    sg.operators = [op for op in ops if id(op) not in replaced or any(o in read or o in sg.outputs for o in op.outputs)]


PASS = Pass("rgba-input", False, "give a 3-channel image input a 4th channel the first convs ignore", run)
