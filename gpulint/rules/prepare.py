"""Which tensor the interpreter leaves dynamic-sized after Prepare, and so refuses the GPU delegate.

A delegate without kTfLiteDelegateFlagsAllowDynamicTensors (the GPU delegate, and LiteRT's GPU
accelerator) makes Subgraph::ModifyGraphWithDelegate prepare every op in execution order first
(tflite/core/subgraph.cc 2525-2552, PrepareOpsStartingAt 1527-1569). Preparing stops at the first
op that leaves an output dynamic-sized (or returns kTfLiteOutputShapeNotKnown), and the
interpreter then refuses the delegate for the whole graph: "Attempting to use a delegate that only
supports static-sized tensors with a graph that has dynamic-sized tensors (tensor#N is a
dynamic-sized tensor)." The interpreter applies a delegate subgraph by subgraph and stops at the
first that fails (tflite/core/interpreter.cc 414-450), so the first refused subgraph decides.

Each kernel's Prepare decides whether its outputs are dynamic: when an operand that sizes them is
neither constant (kTfLiteMmapRo: a buffer with data) nor persistent (kTfLitePersistentRo: computed
at Prepare, like SHAPE of a static tensor). A few kernels compute their output at Prepare when all
their operands are known, which keeps a chain of shape arithmetic static. The tables below are
those Prepare functions, from google-ai-edge/LiteRT@f67457790c9c tflite/kernels/*.cc.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpulint.model.ir import Model
from gpulint.rules.signature import Graph
from gpulint.text import clean

# op -> the inputs whose values size its outputs: unless each is constant or persistent, the
# outputs are dynamic (SetTensorToDynamic in the kernel's Prepare).
SIZED_BY: dict[str, tuple[int, ...]] = {
    "ARG_MAX": (1,),  # arg_min_max.cc 136-139
    "ARG_MIN": (1,),
    "BATCH_TO_SPACE_ND": (1, 2),  # batch_to_space_nd.cc 120-122
    "BROADCAST_TO": (1,),  # broadcast_to.cc 97-101
    "CONV_3D_TRANSPOSE": (0,),  # conv3d_transpose.cc 219-220
    "EXPAND_DIMS": (1,),  # expand_dims.cc 92-98
    "FILL": (0,),  # fill.cc 104-107
    "MEAN": (1,),  # reduce.cc 440-441 (PrepareSimple, every reduction)
    "MIRROR_PAD": (1,),  # mirror_pad.cc 393-394
    "MULTINOMIAL": (0, 1),  # random_ops.cc 217-219
    "NON_MAX_SUPPRESSION_V4": (2,),  # non_max_suppression.cc 104, 160-183
    "NON_MAX_SUPPRESSION_V5": (2,),
    "ONE_HOT": (1,),  # one_hot.cc 161-162
    "PAD": (1,),  # pad.cc 405-426
    "PADV2": (1,),
    "RANDOM_STANDARD_NORMAL": (0,),  # random_ops.cc 188-189
    "RANDOM_UNIFORM": (0,),
    "RANGE": (0, 1, 2),  # range.cc 166-177
    "REDUCE_ALL": (1,),
    "REDUCE_ANY": (1,),
    "REDUCE_MAX": (1,),
    "REDUCE_MIN": (1,),
    "REDUCE_PROD": (1,),
    "RESIZE_BILINEAR": (1,),  # resize_bilinear.cc 84-85
    "RESIZE_NEAREST_NEIGHBOR": (1,),  # resize_nearest_neighbor.cc 80-81
    "RFFT2D": (1,),  # rfft2d.cc 233-239
    "SCATTER_ND": (2,),  # scatter_nd.cc 108-124
    "SEGMENT_SUM": (0, 1),  # segment_sum.cc 126-128
    "SPACE_TO_BATCH_ND": (1, 2),  # space_to_batch_nd.cc 121-123
    "SPARSE_TO_DENSE": (1,),  # sparse_to_dense.cc 193-194
    "SPLIT": (0,),  # split.cc 104-109 (the axis is SPLIT's first input)
    "SPLIT_V": (1, 2),  # split_v.cc 161-167
    "SUM": (1,),
    "TILE": (1,),  # tile.cc 325-334
    "TRANSPOSE": (1,),  # transpose.cc 84-85
    "UNSORTED_SEGMENT_MAX": (1, 2),  # unsorted_segment.cc 138-140
    "UNSORTED_SEGMENT_MIN": (1, 2),
    "UNSORTED_SEGMENT_PROD": (1, 2),
    "UNSORTED_SEGMENT_SUM": (1, 2),
    "WHERE": (0,),  # where.cc 67-68
}

# op -> the inputs that, when all constant or persistent, make it compute its output at Prepare
# (SetTensorToPersistentRo); None means every input.
PERSISTS: dict[str, tuple[int, ...] | None] = {
    "SHAPE": (),  # shape.cc 62-66: the input's shape is always known at Prepare
    "RANK": (),  # rank.cc 44
    "BROADCAST_ARGS": (0, 1),  # broadcast_args.cc 65-67
    "CONCATENATION": None,  # concatenation.cc 160-182, 250-251
    "GATHER": (0, 1),  # gather.cc 139-142
    "MUL": (0, 1),  # mul.cc 131-133
    "RANGE": (0, 1, 2),  # range.cc 166-169
    "RESHAPE": (0,),  # reshape.cc 136-139 (when its shape is known)
    "STRIDED_SLICE": (0, 1, 2),  # strided_slice.cc 335-338
    "TILE": (0, 1),  # tile.cc 325-327
}

# The interpreter's own words.
MESSAGE = (
    "Attempting to use a delegate that only supports static-sized tensors with a graph that has "
    "dynamic-sized tensors (tensor#{index} is a dynamic-sized tensor)."
)


@dataclass(frozen=True)
class Refusal:
    """The first op whose Prepare leaves a tensor dynamic-sized, in the first subgraph that has one."""

    subgraph: int
    op_index: int
    op: str
    tensor: str  # the dynamic tensor's name
    tensor_index: int  # as the interpreter prints it: -1 when Prepare returned kTfLiteOutputShapeNotKnown
    why: str  # what in the op's operands makes it so

    @property
    def message(self) -> str:
        return MESSAGE.format(index=self.tensor_index)


class _Prepared:
    """One subgraph prepared in execution order, as far as its first dynamic-sized output."""

    def __init__(self, model: Model, index: int, depth: int = 0, graph: Graph | None = None) -> None:
        self.model = model
        self.graph = graph or Graph.of(model, index)
        self.depth = depth
        self.persistent: set[int] = set()
        self.refusal = self._run()

    def known(self, t: int) -> bool:
        """IsConstantOrPersistentTensor; an omitted input (-1) sizes nothing."""
        return t < 0 or self.graph.has_data(t) or t in self.persistent

    def _name(self, t: int) -> str:
        return clean(self.graph.subgraph.tensors[t].name or f"tensor {t}", 80) or f"tensor {t}"

    def _operand(self, t: int, what: str) -> str:
        """Why operand `t` is not known at Prepare: who computes it."""
        p = self.graph.producer.get(t)
        if p is None and t in self.graph.graph_inputs:
            return f"its {what} `{self._name(t)}` is a graph input"
        if p is None:  # no op writes it and its buffer has no data vector: the arena's, not a constant
            return f"its {what} `{self._name(t)}` has no data in the file and no op computes it"
        op = self.model.op_name(self.graph.subgraph.operators[p])
        return f"its {what} `{self._name(t)}` is computed at run time by {op} (op {p})"

    def _run(self) -> Refusal | None:
        sg = self.graph.subgraph
        for oi, op in enumerate(sg.operators):
            name = self.model.op_name(op)
            found = self._dynamic(oi, name, list(op.inputs), list(op.outputs))
            if found is not None:
                tensor, why = found
                shown = self._name(tensor) if tensor >= 0 else self._name(op.outputs[0])
                return Refusal(self.graph.index, oi, name, shown, tensor, why)
            if self._persists(name, list(op.inputs)):
                self.persistent.update(op.outputs)
        return None

    def _persists(self, name: str, ins: list[int]) -> bool:
        if name not in PERSISTS:
            return False
        which = PERSISTS[name]
        operands = ins if which is None else [ins[i] for i in which if i < len(ins)]
        # RESHAPE and TILE persist only once their output shape is known too (reshape.cc 136, tile.cc 325).
        sized = ins[1:2] if name in ("RESHAPE", "TILE") else []
        return all(self.known(t) for t in operands + sized)

    def _signature_dynamic(self, t: int) -> bool:
        """HasUnspecifiedDimension: a -1 in the tensor's shape_signature."""
        return t >= 0 and self.graph.subgraph.tensors[t].is_dynamic

    def _dynamic(self, oi: int, name: str, ins: list[int], outs: list[int]) -> tuple[int, str] | None:
        """(the dynamic tensor as the interpreter numbers it, why), or None if Prepare keeps it static."""
        first = outs[0] if outs else -1

        def need(i: int, what: str, const_only: bool = False) -> str | None:
            t = ins[i] if i < len(ins) else -1
            ok = (t < 0 or self.graph.has_data(t)) if const_only else self.known(t)
            return None if ok else self._operand(t, what)

        if name == "RESHAPE":  # reshape.cc 136-154: kTfLiteOutputShapeNotKnown, so tensor#-1
            why = need(1, "shape operand") if len(ins) >= 2 else None
            return (-1, why) if why else None
        if name == "STRIDED_SLICE":  # strided_slice.cc 327-333
            offset = bool(self._options(oi).get("offset"))
            why = need(3, "strides operand") or (None if offset else need(1, "begin operand") or need(2, "end operand"))
            return (first, why) if why else None
        if name == "SLICE":  # slice.cc 148-157: a fully known output shape in the file settles it
            if not self._signature_dynamic(first) and outs and self.graph.subgraph.tensors[first].shape:
                return None
            why = need(1, "begin operand") or need(2, "size operand")
            if why is None and self._signature_dynamic(ins[0]):
                why = f"its input `{self._name(ins[0])}` has an unknown dimension (-1 in its shape signature)"
            return (first, why) if why else None
        if name == "TOPK_V2":  # topk_v2.cc 275-285
            why = need(1, "k operand")
            if why is None and self._signature_dynamic(ins[0]):
                why = f"its input `{self._name(ins[0])}` has an unknown dimension (-1 in its shape signature)"
            return (first, why) if why else None
        if name == "TRANSPOSE_CONV":  # transpose_conv.cc 401-403: IsConstantTensor, persistent is not enough
            why = need(0, "output_shape operand", const_only=True)
            return (first, why) if why else None
        if name in ("PAD", "PADV2") and ins and self.graph.subgraph.tensors[ins[0]].shape == []:
            return first, "its input is a scalar (pad.cc 424-426)"
        if name == "UNIQUE":  # unique.cc 78
            return first, "its output's size depends on the values of its input"
        if name in ("WHILE", "IF"):
            return self._control_flow(oi, name, first)
        for i in SIZED_BY.get(name, ()):
            why = need(i, f"operand {i}")
            if why:
                return first, why
        return None

    def _options(self, oi: int) -> dict[str, object]:
        opts = self.graph.subgraph.operators[oi].builtin_options
        return opts.values if opts is not None else {}

    def _control_flow(self, oi: int, name: str, first: int) -> tuple[int, str] | None:
        """while.cc 159-200 and if.cc 100-138: a called subgraph with a dynamic tensor, or a loop body
        whose output shapes differ from its input shapes, makes every output dynamic."""
        opts = self._options(oi)
        keys = ("body_subgraph_index",) if name == "WHILE" else ("then_subgraph_index", "else_subgraph_index")
        called = [v for k in keys if isinstance(v := opts.get(k), int) and 0 <= v < len(self.model.subgraphs)]
        if self.depth > 8:  # a call cycle: the interpreter would not get this far either
            return None
        bodies = [_Prepared(self.model, i, self.depth + 1) for i in called]
        for body in bodies:
            if body.refusal is not None:
                r = body.refusal
                return first, (
                    f"subgraph {r.subgraph} has a dynamic-sized tensor `{r.tensor}` ({r.op}, op {r.op_index}: {r.why})"
                )
        if name == "WHILE" and bodies:
            sg = bodies[0].graph.subgraph
            for i, o in zip(sg.inputs, sg.outputs, strict=False):
                a, b = sg.tensors[i].shape, sg.tensors[o].shape
                if a != b and (a[:1] or [0])[0] + (b[:1] or [0])[0] != 1:
                    return (
                        first,
                        f"its body (subgraph {called[0]}) changes the shape of loop variable `{self._name(i)}`",
                    )
        if name == "IF" and len(bodies) == 2:
            a_sg, b_sg = bodies[0].graph.subgraph, bodies[1].graph.subgraph
            for x, y in zip(a_sg.outputs, b_sg.outputs, strict=False):
                if a_sg.tensors[x].shape != b_sg.tensors[y].shape:
                    return first, "its two branches give outputs of different shapes"
        return None


def persistent_tensors(graph: Graph) -> frozenset[int]:
    """The tensors the interpreter computes at Prepare (kTfLitePersistentRo: SHAPE of a static
    tensor and the shape arithmetic on it) before a static-shapes delegate partitions the graph,
    as far as Prepare gets."""
    return frozenset(_Prepared(graph.model, graph.index, graph=graph).persistent)


def find_refusal(model: Model, graphs: list[Graph] | None = None) -> Refusal | None:
    """The interpreter's refusal of a static-shapes-only delegate, if it refuses one (`graphs`:
    each subgraph's Graph, when the caller has them already)."""
    for si in range(len(model.subgraphs)):
        refusal = _Prepared(model, si, graph=graphs[si] if graphs else None).refusal
        if refusal is not None:
            return refusal
    return None
