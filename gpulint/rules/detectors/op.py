"""Rules about one op at a time (scope `op`): layout, reshuffles, sub-byte weights, control flow."""

from __future__ import annotations

from collections.abc import Iterator

from gpulint.rules.detectors.registry import Hit, SubgraphView, detector
from gpulint.rules.detectors.subgraph import atrous_chains
from gpulint.rules.placement import MAX_NAME
from gpulint.rules.signature import OpSignature
from gpulint.text import clean

RESHUFFLE = {
    "SPACE_TO_DEPTH": "depth",
    "DEPTH_TO_SPACE": "depth",
    "SPACE_TO_BATCH_ND": "batch",
    "BATCH_TO_SPACE_ND": "batch",
}
SUB_BYTE = ("INT4", "INT2", "UINT4")
CONTROL_FLOW = {
    "WHILE": ("cond_subgraph_index", "body_subgraph_index"),
    "IF": ("then_subgraph_index", "else_subgraph_index"),
    "CALL_ONCE": ("init_subgraph_index",),
    "CALL": ("subgraph",),
}


@detector("GPU401", "op")
def reshuffle_op(v: SubgraphView, sig: OpSignature) -> Iterator[Hit]:
    in_atrous = sig.op in RESHUFFLE and any(sig.index in ops for ops, _, _ in v.memo(atrous_chains))
    if sig.op in RESHUFFLE and v.on_gpu(sig) and not in_atrous:  # GPU402 names the atrous ones
        yield Hit({"op": sig.op, "where": RESHUFFLE[sig.op]}, sig.index, sig.op)


# What LiteRT's accelerator's tensor gate lets TILE read and write (litert-gpu.yaml TILE: the runtime
# and quantized types, IsIntSupportedOp's int types; no BOOL output)
TILE_TYPES = ("FLOAT32", "FLOAT16", "INT8", "UINT8", "INT16", "INT32")


@detector("GPU404", "op")
def broadcast_to_on_cpu(v: SubgraphView, sig: OpSignature) -> Iterator[Hit]:
    from gpulint.passes.broadcast_to import left_alone

    # LiteRT's accelerator (the runtime of #9191 and PR#9557's lowering): on the classic delegate a
    # TILE along dim 0 changes the batch, which its OpenGL backend fails the whole graph on.
    if v.target.name != "litert-gpu" or sig.op != "BROADCAST_TO" or v.on_gpu(sig) or len(sig.inputs) < 2:
        return
    x, out = sig.inputs[0], sig.outputs[0] if sig.outputs else None
    shape = sig.const_values(sig.inputs[1])
    if out is None or shape is None or out.is_dynamic or x.dtype not in TILE_TYPES:
        return
    if left_alone(list(x.shape), [int(d) for d in shape]) is None:
        yield Hit(
            {"index": sig.index, "tensor": x.name, "shape": list(x.shape), "out": list(out.shape)}, sig.index, sig.op
        )


@detector("GPU403", "op")
def channel_moving_reshape(v: SubgraphView, sig: OpSignature) -> Iterator[Hit]:
    if v.on_gpu(sig) and (moved := channel_move(sig)) is not None:
        yield Hit({"op": sig.op, "src": moved[0], "dst": moved[1]}, sig.index, sig.op)


def channel_move(sig: OpSignature) -> tuple[str, str] | None:
    """A RESHAPE or TRANSPOSE that cannot keep the 4-channel slice layout: (src, dst) dims."""
    if sig.op not in ("RESHAPE", "TRANSPOSE") or not sig.inputs or not sig.outputs:
        return None
    x, y = sig.inputs[0], sig.outputs[0]
    if sig.op == "TRANSPOSE":
        perm = sig.const_values(sig.inputs[1]) if len(sig.inputs) > 1 else None
        if perm and perm[-1] != len(perm) - 1:
            return f"perm {perm}", f"{list(y.shape)}"
        return None
    if x.channels is not None and y.channels is not None and x.channels != y.channels:
        return str(list(x.shape)), str(list(y.shape))
    return None


@detector("GPU301", "op")
def channels_not_multiple_of_4(v: SubgraphView, sig: OpSignature) -> Iterator[Hit]:
    if not v.on_gpu(sig):
        return
    odd = [t for t in sig.outputs if t.channels and t.channels % 4 and t.dtype in ("FLOAT32", "FLOAT16")]
    if odd:
        shown = ", ".join(f"`{clean(t.name, MAX_NAME)}` ({slice_waste(t.channels or 1)})" for t in odd)
        # The rule's fix, pad-channels, only where that pass grows every one of these tensors (not
        # a model output, an fp16 tensor, a region through an op it does not carry channels through).
        padded = v.memo(pad_channels_reach)
        fix = all(t.index in padded for t in odd)
        yield Hit({"op": sig.op, "tensors": shown}, sig.index, sig.op, [t.name for t in odd], fix)


def pad_channels_reach(v: SubgraphView) -> set[int]:
    """The tensors of the subgraph that `gpulint fix --passes pad-channels` would pad."""
    from gpulint.passes.pad_channels import padded_tensors  # the passes only where a GPU301 is found

    return padded_tensors(v.graph.model, v.graph.subgraph)


def slice_waste(channels: int) -> str:
    """C channels stored as ceil(C/4) slices of 4: "C=6, 1.33x memory"."""
    return f"C={channels}, {4 * -(-channels // 4) / channels:.2f}x memory"


@detector("GPU503", "op")
def int4_weights(v: SubgraphView, sig: OpSignature) -> Iterator[Hit]:
    t = next((t for t in sig.inputs if t.is_const and t.dtype in SUB_BYTE), None)
    if t is not None:
        yield Hit({"op": sig.op, "dtype": t.dtype, "tensor": t.name}, sig.index, sig.op)


@detector("GPU505", "op")
def control_flow(v: SubgraphView, sig: OpSignature) -> Iterator[Hit]:
    if sig.op in CONTROL_FLOW:
        called = [sig.options.get(k) for k in CONTROL_FLOW[sig.op] if sig.options.get(k) is not None]
        per = "iteration" if sig.op == "WHILE" else "call"
        yield Hit({"op": sig.op, "subgraphs": ", ".join(map(str, called)), "per": per}, sig.index, sig.op)
