"""Grow inner tensors to a multiple of 4 channels, as the GPU stores them anyway.

    CONV_2D(C out) -> per-channel ops -> CONV_2D / FULLY_CONNECTED
        => CONV_2D(Cp out, zero filters) -> per-channel ops on Cp -> consumers with zero weights

A region starts at a CONV_2D whose output has C channels, C % 4 != 0, and grows through ops
that work channel by channel (activations, DEPTHWISE_CONV_2D with multiplier 1, pooling,
resizing, MEAN over space, elementwise ops with other region tensors or per-channel
constants) to the ops that mix channels: CONV_2D and FULLY_CONNECTED readers, whose weights
get zeros for the new input channels. Every tensor in the region gets Cp = 4*ceil(C/4)
channels: the new filters are zero, so whatever per-channel ops make of them, the consumers
multiply them by zero weights and the outputs do not change.

A region is left alone, with the reason, when it touches a model input or output, a tensor
that is not float32, weights that are not float32 constants, or an op that is not listed
here (CONCATENATION, RESHAPE, SOFTMAX, ...; and DIV, LOG, RSQRT, POW, which could turn the
padded lanes into inf or NaN, which zero weights would not cancel).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from gpulint.model.ir import Model, Subgraph
from gpulint.passes import Pass, PassOptions, PassResult
from gpulint.passes.edit import add_const, const_value, consumers, pad_axis, producers, prune

UNARY = {
    "RELU",
    "RELU6",
    "RELU_N1_TO_1",
    "RELU_0_TO_1",
    "LOGISTIC",
    "TANH",
    "HARD_SWISH",
    "LEAKY_RELU",
    "ABS",
    "NEG",
    "EXP",
    "SQUARE",
    "ELU",
    "GELU",
    "FLOOR",
    "SIGN",
    "SIN",
    "COS",
    "AVERAGE_POOL_2D",
    "MAX_POOL_2D",
    "RESIZE_BILINEAR",
    "RESIZE_NEAREST_NEIGHBOR",
}
BINARY = {"ADD", "SUB", "MUL", "MAXIMUM", "MINIMUM", "SQUARED_DIFFERENCE"}


class Abort(Exception):
    """The region cannot be padded; the message says why."""


class Region:
    def __init__(self, model: Model, sg: Subgraph, channels: int) -> None:
        self.model, self.sg, self.channels = model, sg, channels
        self.tensors: set[int] = set()
        self.producers: set[int] = set()  # CONV_2D ops writing into the region
        self.per_channel: set[int] = set()  # ops inside the region
        self.mixers: set[int] = set()  # CONV_2D / FULLY_CONNECTED reading the region
        self.readers = consumers(sg)
        self.made_by = producers(sg)

    def name(self, oi: int) -> str:
        return self.model.op_name(self.sg.operators[oi])

    def float_const(self, t: int, what: str) -> np.ndarray:
        value = const_value(self.model, self.sg, t)
        if value is None or self.sg.tensors[t].type != "FLOAT32":
            raise Abort(f"{what} is not a float32 constant")
        return value

    def add(self, t: int) -> None:
        if t in self.tensors:
            return
        tensor = self.sg.tensors[t]
        if tensor.type != "FLOAT32" or not tensor.shape or tensor.shape[-1] != self.channels or tensor.is_dynamic:
            raise Abort(f"`{tensor.name}` is not a float32 tensor with {self.channels} channels last")
        if t in self.sg.inputs or t in self.sg.outputs:
            raise Abort(f"`{tensor.name}` is a model input or output")
        self.tensors.add(t)
        p = self.made_by.get(t)
        if p is None:
            raise Abort(f"`{tensor.name}` has no producer")
        self.visit(p, writes=t)
        for r in self.readers.get(t, []):
            self.visit(r, reads=t)

    def visit(self, oi: int, writes: int | None = None, reads: int | None = None) -> None:
        op = self.sg.operators[oi]
        name = self.name(oi)
        if name == "CONV_2D" and writes is not None and op.outputs == [writes]:
            if op.inputs[0] == writes:
                raise Abort("a conv reads its own output")
            self.float_const(op.inputs[1], f"the weights of CONV_2D op {oi}")
            self.producers.add(oi)
            if reads is None:
                return
        if name in ("CONV_2D", "FULLY_CONNECTED") and reads is not None and writes is None:
            if op.inputs[0] != reads or reads in op.inputs[1:]:
                raise Abort(f"{name} op {oi} reads the region as weights")
            w = self.float_const(op.inputs[1], f"the weights of {name} op {oi}")
            if w.shape[-1] != self.channels:
                raise Abort(f"{name} op {oi} does not read the channels as its last weight dimension")
            self.mixers.add(oi)
            return
        if oi in self.per_channel:
            return
        if name in UNARY or name in BINARY or name in ("DEPTHWISE_CONV_2D", "PRELU", "MEAN"):
            self.per_channel.add(oi)
            self.check_per_channel(oi, name)
            for t in op.inputs:
                if t >= 0 and const_value(self.model, self.sg, t) is None:
                    self.add(t)
            for t in op.outputs:
                self.add(t)
            return
        raise Abort(f"{name} op {oi} is not one the pass carries channels through")

    def check_per_channel(self, oi: int, name: str) -> None:
        op = self.sg.operators[oi]
        if name == "DEPTHWISE_CONV_2D":
            if op.builtin_options is None or op.builtin_options["depth_multiplier"] != 1:
                raise Abort(f"DEPTHWISE_CONV_2D op {oi} has a depth multiplier")
            self.float_const(op.inputs[1], f"the weights of DEPTHWISE_CONV_2D op {oi}")
        if name == "MEAN":
            axes = const_value(self.model, self.sg, op.inputs[1])
            rank = len(self.sg.tensors[op.inputs[0]].shape)
            if axes is None or any(int(a) % rank == rank - 1 for a in axes.ravel()):
                raise Abort(f"MEAN op {oi} reduces over the channels")
        for t in op.inputs[1:] if name != "DEPTHWISE_CONV_2D" else []:
            if t >= 0 and (value := const_value(self.model, self.sg, t)) is not None:
                if self.sg.tensors[t].type not in ("FLOAT32", "INT32") and name != "MEAN":
                    raise Abort(f"{name} op {oi} has a constant that is not float32")
                if name != "MEAN" and value.ndim and value.shape[-1] not in (1, self.channels):
                    raise Abort(f"{name} op {oi} has a constant that is neither per channel nor broadcast")


def _apply(region: Region, padded: int) -> None:
    model, sg, c = region.model, region.sg, region.channels

    def repad(oi: int, index: int, axis: int) -> None:
        op = sg.operators[oi]
        t = op.inputs[index]
        if t < 0:
            return
        value = const_value(model, sg, t)
        if value is None or sg.tensors[t].type != "FLOAT32" or not value.ndim or value.shape[axis] != c:
            return  # not a per-channel float constant (axes, sizes and broadcast scalars stay)
        op.inputs[index] = add_const(
            model, sg, f"{sg.tensors[t].name}/padded", pad_axis(value, axis, padded), sg.tensors[t].quantization
        )

    for t in region.tensors:
        tensor = sg.tensors[t]
        tensor.shape = [*tensor.shape[:-1], padded]
        if tensor.shape_signature is not None:
            tensor.shape_signature = [*tensor.shape_signature[:-1], padded]
    for oi in region.producers:
        repad(oi, 1, 0)  # [C, kh, kw, I]: zero filters
        repad(oi, 2, 0)  # bias
    for oi in region.per_channel:
        for i in range(1, len(sg.operators[oi].inputs)):
            repad(oi, i, -1)  # depthwise weights [1, kh, kw, C], bias [C], per-channel constants, PReLU alpha
    for oi in region.mixers:
        repad(oi, 1, -1)  # [O, ..., C]: zero weights for the new input channels


def regions(model: Model, sg: Subgraph) -> Iterator[tuple[int, Region, str | None]]:
    """Each region of `sg` the pass looks at, from its seed (a CONV_2D output whose channels are
    not a multiple of 4): (seed, region, None) where it pads the region, (seed, region, why) where
    it leaves it alone. Nothing is changed here; `run` pads each region as it is given one."""
    done: set[int] = set()
    while True:
        seed = next(
            (
                op.outputs[0]
                for op in sg.operators
                if model.op_name(op) == "CONV_2D"
                and len(op.outputs) == 1
                and op.outputs[0] not in done
                and sg.tensors[op.outputs[0]].shape
                and sg.tensors[op.outputs[0]].shape[-1] % 4
            ),
            None,
        )
        if seed is None:
            return
        region = Region(model, sg, sg.tensors[seed].shape[-1])
        try:
            region.add(seed)
        except Abort as e:
            done.add(seed)
            done.update(region.tensors)
            yield seed, region, str(e)
            continue
        done.update(region.tensors)
        yield seed, region, None


def padded_tensors(model: Model, sg: Subgraph) -> set[int]:
    """The tensors of `sg` the pass would grow to a multiple of 4 channels (GPU301 offers the pass
    for these only: a model output, for one, it never changes)."""
    return {t for _, region, why in regions(model, sg) if why is None for t in region.tensors}


def run(model: Model, options: PassOptions) -> PassResult:
    result = PassResult()
    for si, sg in enumerate(model.subgraphs):
        for seed, region, why in regions(model, sg):
            tensor = sg.tensors[seed]
            channels = region.channels
            if why is not None:
                result.skipped.append(f"subgraph {si}: `{tensor.name}` keeps {channels} channels: {why}")
                continue
            padded = 4 * -(-channels // 4)
            _apply(region, padded)
            n, m = len(region.tensors), len(region.mixers)
            result.changes.append(
                f"subgraph {si}: {n} tensor{'s' * (n != 1)} from {channels} to {padded} channels (starting at "
                f"`{tensor.name}`; {m} consumer{'s get' if m != 1 else ' gets'} zero weights)"
            )
    if result.changes:
        prune(model)
    return result


PASS = Pass("pad-channels", True, "grow inner tensors to a multiple of 4 channels with zero filters and weights", run)
