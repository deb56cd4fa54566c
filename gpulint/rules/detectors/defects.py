"""Known runtime defects (GPU8xx): ops a named runtime takes onto the GPU and computes wrong.

Each rule is one defect of one runtime, measured here or reported in a public thread that its
rules.yaml entry links, with the versions the measurement or the thread names. They apply to the
target that models that runtime (`litert-gpu`, LiteRT's GPU accelerator; the classic delegate's
OpenGL ES backend for GPU806) and only to ops it puts on the GPU: an op on the CPU computes right.
"""

from __future__ import annotations

from collections.abc import Iterator

from gpulint.rules.detectors.registry import Hit, SubgraphView, detector
from gpulint.rules.signature import Graph, OpSignature, TensorSpec

LITERT_GPU = "litert-gpu"
QUANTIZED_WEIGHTS = ("INT8", "UINT8", "INT4")


def _litert(v: SubgraphView) -> bool:
    return v.target.name == LITERT_GPU


def _on_gl(v: SubgraphView, sig: OpSignature) -> bool:
    """The op runs on the classic delegate's (or MediaPipe's build's) OpenGL backend: that backend is
    checked, the op is placed on the GPU, not folded, and OpenGL builds it (GPU806, GPU807, GPU811, GPU812)."""
    if "opengl" not in v.backend_names or v.target.name not in ("classic", "mediapipe"):
        return False
    p = v.placed[sig.index]
    return p.placement == "gpu" and not p.folded and "opengl" not in p.backend_failures


def _densified(sig: OpSignature, t: TensorSpec) -> OpSignature | None:
    """The DENSIFY that makes `t` on the CPU, directly or through a DEQUANTIZE of its output."""
    p = sig.producer(t)
    if p is not None and p.op == "DEQUANTIZE" and p.inputs:
        p = p.producer(p.inputs[0])
    return p if p is not None and p.op == "DENSIFY" else None


@detector("GPU801", "subgraph")
def litert_densify_fallback(v: SubgraphView, g: Graph) -> Iterator[Hit]:
    if not _litert(v):
        return
    readers: list[tuple[OpSignature, TensorSpec]] = []
    chains: set[int] = set()
    for sig in v.sigs:
        if not v.on_gpu(sig):
            continue
        for t in sig.present_inputs:
            if (d := _densified(sig, t)) is not None and not v.on_gpu(d):
                readers.append((sig, t))
                chains.add(d.index)
    if readers:
        first, t = readers[0]
        yield Hit(
            {"op": first.op, "index": first.index, "tensor": t.name, "densify": len(chains), "readers": len(readers)},
            first.index,
            first.op,
            [t.name],
        )


def _padded_axes(sig: OpSignature) -> list[int]:
    pads = sig.input(1)
    values = sig.const_values(pads) if pads is not None else None
    if values is None or len(values) != 2 * sig.inputs[0].rank:
        return []
    return [axis for axis in range(len(values) // 2) if values[2 * axis] or values[2 * axis + 1]]


@detector("GPU802", "op")
def litert_rank3_pad(v: SubgraphView, sig: OpSignature) -> Iterator[Hit]:
    if not (_litert(v) and sig.op in ("PAD", "PADV2") and v.on_gpu(sig) and sig.inputs and sig.inputs[0].rank == 3):
        return
    # Measured on LiteRT 2.3 (WebGPU): wrong wherever dim 0 of the input or the output is above
    # 1, on any padded axis; right with dim 0 of 1 (#9272's innermost [1, 6144, 32] case).
    x, axes = sig.inputs[0], _padded_axes(sig)
    if axes and (x.shape[0] > 1 or 0 in axes):
        yield Hit({"op": sig.op, "axes": axes, "shape": list(x.shape), "tensor": x.name}, sig.index, sig.op)


@detector("GPU803", "op")
def litert_mixed_rank_broadcast(v: SubgraphView, sig: OpSignature) -> Iterator[Hit]:
    if not (_litert(v) and sig.op in ("ADD", "MUL") and v.on_gpu(sig)):
        return
    ins = sig.present_inputs
    if len(ins) != 2 or not all(t.runtime for t in ins) or ins[0].rank == ins[1].rank:
        return
    low = min(ins, key=lambda t: t.rank)
    if low.elements > 1:
        a, b = ins
        yield Hit(
            {"op": sig.op, "a": a.describe(), "b": b.describe(), "tensor": low.name},
            sig.index,
            sig.op,
            [a.name, b.name],
        )


@detector("GPU804", "op")
def litert_rank3_batch_matmul(v: SubgraphView, sig: OpSignature) -> Iterator[Hit]:
    if not (_litert(v) and sig.op == "BATCH_MATMUL" and v.on_gpu(sig) and len(sig.present_inputs) == 2):
        return
    a, b = sig.present_inputs
    if a.rank == 3 and b.rank == 3 and max(a.shape[0], b.shape[0]) >= 2:
        yield Hit(
            {
                "op": sig.op,
                "a": a.describe(),
                "b": b.describe(),
                "batch": max(a.shape[0], b.shape[0]),
                "tensor": a.name,
            },
            sig.index,
            sig.op,
            [a.name, b.name],
        )


@detector("GPU805", "op")
def litert_drq_fully_connected_add(v: SubgraphView, sig: OpSignature) -> Iterator[Hit]:
    # The op runs on the GPU on some backend checked: with every backend it is an init failure on
    # OpenCL and Metal (md_drq_fully_connected_batch, GPU203) and still built on WebGPU.
    p = v.placed[sig.index]
    some = p.placement == "init-failure" and 0 < len(p.backend_failures) < v.backends
    if not (_litert(v) and sig.op == "FULLY_CONNECTED" and (v.on_gpu(sig) or some) and sig.outputs):
        return
    x, w = sig.input(0), sig.input(1)
    if x is None or w is None or not x.runtime or x.dtype != "FLOAT32" or x.rank != 3:
        return
    if w.dtype not in QUANTIZED_WEIGHTS or not w.is_const:
        return
    adds = [c for c in sig.consumers(sig.outputs[0]) if c.op == "ADD" and v.on_gpu(c)]
    if adds:
        yield Hit(
            {"op": sig.op, "shape": list(x.shape), "weights": w.dtype, "add": adds[0].index, "tensor": w.name},
            sig.index,
            sig.op,
        )


@detector("GPU806", "op")
def gl_grouped_1x1_conv(v: SubgraphView, sig: OpSignature) -> Iterator[Hit]:
    # The classic delegate (and MediaPipe's build of it) with its OpenGL backend checked: the 1x1
    # shader takes a grouped 1x1 conv (gl.gl_conv_groups lets it initialize) and ignores the groups.
    from gpulint.rules.checks.gl import grouped_1x1_groups

    if sig.op != "CONV_2D" or not _on_gl(v, sig):
        return
    if (groups := grouped_1x1_groups(sig)) and (w := sig.input(1)) is not None:
        yield Hit({"op": sig.op, "index": sig.index, "groups": groups, "tensor": w.name}, sig.index, sig.op)


# The OpenGL backend's shaders for an elementwise op with one constant operand (gl/kernels/add.cc,
# mul.cc, elementwise.cc) read the runtime operand at the output's coordinates and size the work
# by the runtime operand, so a runtime operand the constant broadcasts is read as 0 past its own
# shape (SUB, DIV, ...) or the output past it is never written (ADD, MUL).
GL_CONSTANT_BROADCAST_OPS = ("ADD", "MUL", "SUB", "DIV", "MINIMUM", "MAXIMUM", "SQUARED_DIFFERENCE", "POW")


def gl_broadcast_axes(sig: OpSignature) -> tuple[TensorSpec, TensorSpec, list[str]] | None:
    """(runtime, constant, the axes of the delegate's BHWC the constant broadcasts the runtime
    operand along) when `sig` is such an op, else None. Also the pass's condition (tile-broadcast)."""
    if sig.op not in GL_CONSTANT_BROADCAST_OPS or not sig.outputs or len(sig.present_inputs) != 2:
        return None
    rt = [t for t in sig.present_inputs if t.runtime]
    const = [t for t in sig.present_inputs if t.is_const]
    if len(rt) != 1 or len(const) != 1 or const[0].elements < 2:  # a one-element constant is a uniform
        return None
    x, out = rt[0].bhwc, sig.outputs[0].bhwc
    axes = [name for name, a, b in zip("HWC", x[1:], out[1:], strict=True) if a < b]
    return (rt[0], const[0], axes) if axes else None


@detector("GPU807", "op")
def gl_constant_broadcast(v: SubgraphView, sig: OpSignature) -> Iterator[Hit]:
    if not _on_gl(v, sig):
        return
    if (found := gl_broadcast_axes(sig)) is not None:
        x, c, axes = found
        yield Hit(
            {
                "op": sig.op,
                "index": sig.index,
                "tensor": x.name,
                "runtime": x.describe(),
                "const": c.describe(),
                "out": sig.outputs[0].describe(),
                "axes": "".join(axes),
            },
            sig.index,
            sig.op,
            [x.name],
        )


FLOAT_TYPES = ("FLOAT32", "FLOAT16")


@detector("GPU808", "op")
def litert_low_rank_constant_operand(v: SubgraphView, sig: OpSignature) -> Iterator[Hit]:
    from gpulint.passes.rank4 import CONST_LAYOUT_OPS, misread_constant

    if not (_litert(v) and sig.op in CONST_LAYOUT_OPS and v.on_gpu(sig) and len(sig.present_inputs) == 2):
        return
    rt = [t for t in sig.present_inputs if t.runtime]
    const = [t for t in sig.present_inputs if t.is_const]
    if len(rt) != 1 or len(const) != 1:
        return
    x, c = rt[0], const[0]
    if c.dtype not in FLOAT_TYPES and misread_constant(list(c.shape), x.rank):
        yield Hit(
            {"op": sig.op, "const": c.describe(), "runtime": x.describe(), "tensor": c.name},
            sig.index,
            sig.op,
            [c.name],
        )


@detector("GPU809", "op")
def litert_dequantized_fully_connected(v: SubgraphView, sig: OpSignature) -> Iterator[Hit]:
    if not (_litert(v) and sig.op == "FULLY_CONNECTED" and v.on_gpu(sig)):
        return
    w = sig.input(1)
    p = sig.producer(w) if w is not None else None
    if p is None or p.op != "DEQUANTIZE" or not p.inputs:
        return
    q = p.inputs[0]
    if q.is_const and q.dtype in QUANTIZED_WEIGHTS:
        yield Hit({"op": sig.op, "index": sig.index, "weights": q.describe(), "tensor": q.name}, sig.index, sig.op)


@detector("GPU810", "op")
def litert_lost_graph_output(v: SubgraphView, sig: OpSignature) -> Iterator[Hit]:
    from gpulint.rules.checks.fusion import md_fused_output

    if not (_litert(v) and v.on_gpu(sig)):
        return
    reader = md_fused_output(sig.graph, sig)
    if reader is not None and {sig.index, reader.index} <= set(v.plan.delegated_nodes):  # one partition
        yield _lost_output(sig, reader)


@detector("GPU811", "op")
def gl_lost_graph_output(v: SubgraphView, sig: OpSignature) -> Iterator[Hit]:
    from gpulint.rules.checks.fusion import gl_fused_output

    if not _on_gl(v, sig):
        return
    reader = gl_fused_output(sig.graph, sig)
    if reader is not None and {sig.index, reader.index} <= set(v.plan.delegated_nodes):  # one partition
        yield _lost_output(sig, reader)


def _lost_output(sig: OpSignature, reader: OpSignature) -> Hit:
    out = sig.outputs[0]
    values = {"op": sig.op, "index": sig.index, "tensor": out.name, "reader": reader.op, "reader_index": reader.index}
    return Hit(values, sig.index, sig.op, [out.name])


@detector("GPU812", "op")
def gl_batched_conv(v: SubgraphView, sig: OpSignature) -> Iterator[Hit]:
    if sig.op != "CONV_2D" or not sig.outputs or not _on_gl(v, sig):
        return
    out = sig.outputs[0]
    if out.rank == 4 and out.shape[0] > 1 and sig.index in v.plan.delegated_nodes:
        yield Hit({"op": sig.op, "index": sig.index, "batch": out.shape[0], "tensor": out.name}, sig.index, sig.op)
