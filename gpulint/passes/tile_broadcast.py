"""TILE the runtime operand of an elementwise op that a constant broadcasts (GPU807).

    ADD(x: [1, 1], c: [48])  =>  ADD(TILE(x, [1, 48]): [1, 48], c)

(with a RESHAPE to the output's rank first where x has fewer dims). TILE copies, so the result
is the same bits. Why: the classic delegate's OpenGL backend reads the runtime operand of ADD,
MUL, SUB, DIV, MINIMUM, MAXIMUM, SQUARED_DIFFERENCE and POW only within its own shape when the
other operand is a constant, and computes every output past it wrong; with the runtime operand
already the output's shape the same shaders are exact (measured on the GL delegate, both operand
orders). Opt-in: it adds a copy the size of the output, which backends without the defect pay.
"""

from __future__ import annotations

from gpulint.model.ir import Model, Tensor
from gpulint.passes import Pass, PassOptions, PassResult
from gpulint.passes.layout import lifted, like, place, reshape_input, tile_op
from gpulint.rules.signature import Graph


def static_where_tiled(x: Tensor, out: Tensor) -> bool:
    """Whether every dim TILE repeats, and every dim of a `x` that needs a RESHAPE, is static: a
    dynamic batch that is not broadcast is repeated once, whatever its size."""
    xs, os_ = x.shape_signature or x.shape, out.shape_signature or out.shape
    if len(xs) > len(os_) or (len(xs) < len(os_) and -1 in xs):
        return False
    xs = lifted(list(xs), len(os_))
    full = lifted(list(x.shape), len(os_))
    return all(a != -1 and b != -1 for a, b, s, d in zip(xs, os_, full, out.shape, strict=True) if s != d)


def run(model: Model, options: PassOptions) -> PassResult:
    from gpulint.rules.detectors.defects import gl_broadcast_axes

    result = PassResult()
    for si, sg in enumerate(model.subgraphs):
        graph = Graph.of(model, si)
        found = [(sig.operator, hit) for sig in graph.signatures() if (hit := gl_broadcast_axes(sig)) is not None]
        for op, (x, _, axes) in found:
            out = sg.tensors[op.outputs[0]]
            if not static_where_tiled(sg.tensors[x.index], out):
                result.skipped.append(f"`{x.name}`: a dim it is broadcast along is only known at run time")
                continue
            slot = op.inputs.index(x.index)
            before = []
            if x.rank < len(out.shape):
                before.append(reshape_input(model, sg, op, slot, lifted(list(x.shape), len(out.shape)), "lifted"))
            src = op.inputs[slot]
            tiled = like(sg, src, list(out.shape), "tiled", out.shape_signature)
            before.append(tile_op(model, sg, src, tiled))
            op.inputs[slot] = tiled
            place(sg, op, before)
            result.changes.append(
                f"subgraph {si}: `{x.name}` {list(x.shape)} tiled to {list(out.shape)} for `{model.op_name(op)}` "
                f"(the constant broadcast it along {''.join(axes)})"
            )
    return result


PASS = Pass(
    "tile-broadcast",
    True,
    "TILE the runtime operand of an elementwise op a constant broadcasts to the output's shape, which "
    "the OpenGL backend computes right (GPU807)",
    run,
    opt_in=True,
    preserves="the interface; every output exactly (TILE copies)",
)
