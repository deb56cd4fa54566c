"""Fold an atrous convolution written as three ops back into one dilated convolution.

    BATCH_TO_SPACE_ND(CONV_2D(SPACE_TO_BATCH_ND(x, b, pads)), b, crops) -> CONV_2D(x, dilation=b)
    (the same with DEPTHWISE_CONV_2D)

Per spatial dimension, with block b, STB paddings (pt, pb), the inner conv's own padding
(it, ib) on each phase grid (0 for VALID, SAME's split of k-1 otherwise), kernel k and BTS
crops (ct, cb): output o reads input o - (pt + it*b - ct) + j*b for tap j, so the fold is a
conv with dilation b and front padding pad = pt + it*b - ct; the back padding follows from
the output length. That is TFLite's VALID when both are 0 and SAME when they are the split
of (k-1)*b that ComputePaddingHeightWidth makes; anything else would need an explicit PAD,
and the pattern is left as it is, with the reason.
"""

from __future__ import annotations

from gpulint.model.ir import Model, Subgraph
from gpulint.passes import Pass, PassOptions, PassResult
from gpulint.passes.edit import const_value, consumers, only_reader, prune

CONVS = ("CONV_2D", "DEPTHWISE_CONV_2D")


def _padding(pads: list[int], kernel: int, block: int, inner: str, crops: list[int], size: int, out: int) -> str | None:
    """'VALID' or 'SAME' for one spatial dimension, or None if neither."""
    it = 0 if inner == "VALID" else (kernel - 1) // 2
    front = pads[0] + it * block - crops[0]
    back = out - size - front + (kernel - 1) * block
    if front == 0 and back == 0:
        return "VALID"
    total = (kernel - 1) * block
    if out == size and front == total // 2 and back == total - total // 2:
        return "SAME"
    return None


def _fold(model: Model, sg: Subgraph, si: int, s2b_i: int, readers: dict[int, list[int]]) -> tuple[str, bool]:
    """Fold the pattern starting at SPACE_TO_BATCH_ND op `s2b_i`: (what happened, folded?)."""
    s2b = sg.operators[s2b_i]
    where = f"subgraph {si} op {s2b_i}"
    if len(s2b.inputs) < 3 or len(s2b.outputs) != 1:
        return f"{where}: SPACE_TO_BATCH_ND without block shape and paddings", False
    conv_i = only_reader(sg, s2b.outputs[0], readers)
    if conv_i is None or model.op_name(sg.operators[conv_i]) not in CONVS:
        return f"{where}: SPACE_TO_BATCH_ND is not read by exactly one conv", False
    conv = sg.operators[conv_i]
    b2s_i = only_reader(sg, conv.outputs[0], readers)
    if b2s_i is None or model.op_name(sg.operators[b2s_i]) != "BATCH_TO_SPACE_ND":
        return f"{where}: the conv (op {conv_i}) is not read by exactly one BATCH_TO_SPACE_ND", False
    b2s = sg.operators[b2s_i]
    block = const_value(model, sg, s2b.inputs[1])
    block_out = const_value(model, sg, b2s.inputs[1])
    pads = const_value(model, sg, s2b.inputs[2])
    crops = const_value(model, sg, b2s.inputs[2])
    if block is None or block_out is None or pads is None or crops is None:
        return f"{where}: block shape, paddings or crops are not constant", False
    if block.tolist() != block_out.tolist() or block.size != 2 or pads.shape != (2, 2) or crops.shape != (2, 2):
        return f"{where}: block shapes differ or are not 2-D", False
    opts = conv.builtin_options
    if opts is None:
        return f"{where}: conv without options", False
    if (opts["stride_h"], opts["stride_w"], opts["dilation_h_factor"], opts["dilation_w_factor"]) != (1, 1, 1, 1):
        return f"{where}: the inner conv is strided or already dilated", False
    x = sg.tensors[s2b.inputs[0]]
    w = sg.tensors[conv.inputs[1]]
    y = sg.tensors[b2s.outputs[0]]
    if x.is_dynamic or len(x.shape) != 4 or len(y.shape) != 4 or len(w.shape) != 4:
        return f"{where}: shapes are not static 4-D", False
    kernel = (w.shape[1], w.shape[2])
    paddings = set()
    for d in range(2):
        p = _padding(
            pads[d].tolist(),
            kernel[d],
            int(block[d]),
            opts["padding"],
            crops[d].tolist(),
            x.shape[1 + d],
            y.shape[1 + d],
        )
        paddings.add(p)
    if None in paddings or len(paddings) != 1:
        return (
            f"{where}: paddings {pads.tolist()} and crops {crops.tolist()} are neither SAME nor VALID "
            f"for a {kernel[0]}x{kernel[1]} kernel with dilation {block.tolist()}"
        ), False
    (padding,) = paddings
    opts.values.update(padding=padding, dilation_h_factor=int(block[0]), dilation_w_factor=int(block[1]))
    name = model.op_name(conv)
    if name == "DEPTHWISE_CONV_2D":  # dilation needs DEPTHWISE_CONV_2D v2 (op_version.cc)
        conv.opcode_index = model.opcode_index(name, max(2, model.opcode(conv).version))
    conv.inputs = [s2b.inputs[0], *conv.inputs[1:]]
    conv.outputs = list(b2s.outputs)
    sg.operators = [op for i, op in enumerate(sg.operators) if i not in (s2b_i, b2s_i)]
    return (
        f"subgraph {si}: folded SPACE_TO_BATCH_ND -> {name} -> BATCH_TO_SPACE_ND (ops {s2b_i}, {conv_i}, "
        f"{b2s_i}) into {name} with dilation {block.tolist()}, padding {padding}"
    ), True


def run(model: Model, options: PassOptions) -> PassResult:
    changes: list[str] = []
    skipped: list[str] = []
    for si, sg in enumerate(model.subgraphs):
        tried: set[int] = set()
        while True:
            readers = consumers(sg)
            todo = [
                i
                for i, op in enumerate(sg.operators)
                if model.op_name(op) == "SPACE_TO_BATCH_ND" and id(op) not in tried
            ]
            if not todo:
                break
            tried.add(id(sg.operators[todo[0]]))
            message, folded = _fold(model, sg, si, todo[0], readers)
            if folded:
                changes.append(message)
            else:
                skipped.append(message)
    if changes:
        prune(model)
    return PassResult(changes, skipped)


PASS = Pass("fold-atrous", True, "fold SPACE_TO_BATCH_ND -> conv -> BATCH_TO_SPACE_ND into a dilated conv", run)
