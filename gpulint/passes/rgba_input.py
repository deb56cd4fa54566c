"""Give a 3-channel image input a 4th channel that the model ignores (unsafe: new interface).

    input [N, H, W, 3] -> CONV_2D(weights [O, kh, kw, 3])
        => input [N, H, W, 4] -> CONV_2D(weights [O, kh, kw, 4], the 4th input channel all zero)

A camera frame or GPU texture is RGBA; with a 3-channel input the app (or the delegate)
repacks every frame. The pass applies when every reader of the input is a CONV_2D reading it
as its input 0 with float32 constant weights. The app must then feed 4 channels; whatever
the 4th holds does not change the outputs.
"""

from __future__ import annotations

from gpulint.model.ir import Model
from gpulint.passes import Pass, PassOptions, PassResult
from gpulint.passes.edit import add_const, const_value, consumers, pad_axis, prune


def run(model: Model, options: PassOptions) -> PassResult:
    result = PassResult()
    sg = model.subgraphs[0] if model.subgraphs else None
    if sg is None:
        return result
    readers = consumers(sg)
    for t in sg.inputs:
        x = sg.tensors[t]
        if len(x.shape) != 4 or x.shape[3] != 3 or x.type != "FLOAT32":
            continue
        ops = readers.get(t, [])
        bad = [
            oi
            for oi in ops
            if model.op_name(sg.operators[oi]) != "CONV_2D"
            or sg.operators[oi].inputs[0] != t
            or t in sg.operators[oi].inputs[1:]
            or const_value(model, sg, sg.operators[oi].inputs[1]) is None
            or sg.tensors[sg.operators[oi].inputs[1]].type != "FLOAT32"
        ]
        if not ops or bad or t in sg.outputs:
            result.skipped.append(
                f"input `{x.name}` stays 3 channels: not every reader is a CONV_2D with float32 weights"
            )
            continue
        for oi in ops:
            op = sg.operators[oi]
            w = const_value(model, sg, op.inputs[1])
            assert w is not None
            op.inputs[1] = add_const(model, sg, f"{sg.tensors[op.inputs[1]].name}/rgba", pad_axis(w, 3, 4))
        x.shape = [*x.shape[:3], 4]
        if x.shape_signature is not None:
            x.shape_signature = [*x.shape_signature[:3], 4]
        result.changes.append(f"input `{x.name}` is now 4 channels (RGBA); {len(ops)} CONV_2D ignore the 4th")
    if result.changes:
        prune(model)
    return result


PASS = Pass("rgba-input", False, "give a 3-channel image input a 4th channel the first convs ignore", run)
