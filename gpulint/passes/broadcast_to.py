"""BROADCAST_TO as TILE, with a RESHAPE in front where it adds dims (GPU404, LiteRT#9191).

    BROADCAST_TO(x: [1, 4, 1, 64], shape=[1, 4, 8, 64])  =>  TILE(x, [1, 1, 8, 1])
    BROADCAST_TO(x: [64], shape=[2, 4, 64])              =>  TILE(RESHAPE(x, [1, 1, 64]), [2, 4, 1])

Neither GPU runtime has a BROADCAST_TO parser (the classic builder and ML Drift's NewOperationParser
have no case for it: "Operation is not supported."), so a `Tensor.expand` on a runtime tensor (GQA's
repeat_kv) splits the graph, and under CompiledModel with the GPU alone fails the compile; both take
TILE, the lowering the maintainers chose (google-ai-edge/LiteRT PR#9557). TILE and RESHAPE copy, so
the result is the same bits. Opt-in: only where the target takes the TILE (rank 4 at most, its type)
does it move work to the GPU. Left alone: a shape computed at run time, rank 5, and a vector input
(lifted on the GPU, it would read as a batch).
"""

from __future__ import annotations

from gpulint.model.ir import Model
from gpulint.passes import Pass, PassOptions, PassResult
from gpulint.passes.edit import const_value
from gpulint.passes.layout import lifted, like, reshape_op, tile_op
from gpulint.passes.tile_broadcast import static_where_tiled


def tiled_form(x_shape: list[int], target: list[int]) -> list[int] | None:
    """`x_shape` lifted to the target's rank, where numpy's broadcast reaches `target` from it; else None."""
    if len(x_shape) > len(target):
        return None
    up = lifted(x_shape, len(target))
    return up if all(a in (1, b) for a, b in zip(up, target, strict=True)) else None


def left_alone(x_shape: list[int], target: list[int]) -> str | None:
    """Why the pass leaves a BROADCAST_TO of `x_shape` to `target` as it is (None: it rewrites it)."""
    if any(d <= 0 for d in (*x_shape, *target)):
        return f"{x_shape} -> {target} has an empty or unknown dim"
    if tiled_form(x_shape, target) is None:
        return f"{x_shape} does not broadcast to {target} as written"
    if len(target) > 4:
        return f"rank {len(target)}: no GPU runtime takes a TILE above rank 4 either"
    if len(x_shape) == 1 and len(target) > 1:
        # Lifted by a RESHAPE on the GPU, the vector enters the graph as a batch of its length:
        # the classic OpenGL backend's batch check fails the whole delegate (measured in check's plan).
        return f"its input is a vector ({x_shape}), which would enter the GPU graph as a batch of {x_shape[0]}"
    return None


def run(model: Model, options: PassOptions) -> PassResult:
    result = PassResult()
    for si, sg in enumerate(model.subgraphs):
        for op in [o for o in sg.operators if model.op_name(o) == "BROADCAST_TO"]:
            if len(op.inputs) < 2 or len(op.outputs) != 1 or min(op.inputs) < 0:
                continue
            x, out = sg.tensors[op.inputs[0]], sg.tensors[op.outputs[0]]
            shape = const_value(model, sg, op.inputs[1])
            name = f"subgraph {si}: `{out.name}`"
            if shape is None:
                result.skipped.append(f"{name}: its shape is computed at run time")
                continue
            target = [int(v) for v in shape.reshape(-1)]
            up = tiled_form(list(x.shape), target)
            why = left_alone(list(x.shape), target) if target == list(out.shape) else "its output is not that shape"
            if up is None or why is not None:
                result.skipped.append(f"{name}: {why}")
                continue
            if not static_where_tiled(x, out):
                result.skipped.append(f"{name}: a dim it is broadcast along is only known at run time")
                continue
            new = []
            src = op.inputs[0]
            if len(x.shape) < len(target):
                y = like(sg, src, up, "lifted")
                new.append(reshape_op(model, sg, src, y))
                src = y
            new.append(
                tile_op(model, sg, src, op.outputs[0]) if up != target else reshape_op(model, sg, src, op.outputs[0])
            )
            i = next(i for i, o in enumerate(sg.operators) if o is op)
            sg.operators[i : i + 1] = new
            result.changes.append(
                f"{name}: BROADCAST_TO {list(x.shape)} -> {target} as {' + '.join(model.op_name(o) for o in new)}"
            )
    return result


PASS = Pass(
    "broadcast-to",
    True,
    "write BROADCAST_TO, which no GPU runtime parses, as TILE (a RESHAPE first where it adds dims) (GPU404)",
    run,
    opt_in=True,
    preserves="the interface; every output exactly (TILE and RESHAPE copy)",
)
