"""What runs inside another op's kernel, decided before any buffer exists (pure: a FusionPlan).

- Epilogues: up to two elementwise steps after a CONV_2D, DEPTHWISE_CONV_2D (multiplier 1),
  transposed conv, unary or binary op run in that kernel's epilogue, as the delegate's OpenCL
  backend links them (GPUOperation::AddOperation); the rounding of an int8 result to its grid
  (QUANTIZE_AND_DEQUANTIZE, an elementwise op there too) is one of them. A gate, a binary op
  of a value and a unary op of the same value (SiLU: MUL(x, LOGISTIC(x))), is one step, as the
  delegate first merges the two (gpu_model.cc MergeElementwiseNodes, TYPE_1/TYPE_2).
  A 1x1 depthwise conv (multiplier 1: a per-channel scale and shift, the batch norm a converter
  leaves after an activation) is a step too (FORM AFFINE), computed as its own kernel computes
  it, so fused or not its output is the same: one launch and one pass over the tensor fewer.
- PAD merges: a zero PAD of H and W read only by a conv becomes the conv's padding, as the
  delegate merges them (merge_padding_with.cc): no copy, no padded buffer. A zero PAD that
  appends channels, read only by a binary op fused into an epilogue, becomes that step's
  operand as the PAD's input (FORM PADDED), as the delegate merges such a PAD into the ADD
  after it (MergePaddingWithAdd): the blocks of BlazeFace-like models widen their residual so.

Both decide kernel arguments, not the graph: the prepared model keeps its ops, and lowering
skips the absorbed ones.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gpulint.executor import layout
from gpulint.executor.graph import GraphView
from gpulint.executor.opcodes import ACTIVATION, BINARY, FORM, UNARY, unary_code
from gpulint.executor.prepare import QUANTIZE_AND_DEQUANTIZE, adjustment
from gpulint.model import schema
from gpulint.model.ir import Operator

TRANSPOSED = ("TRANSPOSE_CONV", "Convolution2DTransposeBias")
NO_STEP = (0, FORM["NONE"], 0, ACTIVATION["NONE"])  # (op, form, swap, act) of an unused step


@dataclass
class FusionPlan:
    chains: dict[int, list[int]] = field(default_factory=dict)  # producer op -> the ops fused into it, in order
    # fused op -> the FORM of its step; a gate's unary op has none (the binary op's GATE step runs it)
    forms: dict[int, int] = field(default_factory=dict)
    pad_merges: dict[int, tuple[int, int, int]] = field(default_factory=dict)  # conv -> (PAD op, top, left)
    padded_operands: dict[int, int] = field(default_factory=dict)  # fused binary op -> the channel PAD it reads

    @property
    def absorbed(self) -> set[int]:
        """The ops that run inside another op's kernel."""
        chained = {oi for chain in self.chains.values() for oi in chain}
        return chained | {pad for pad, _, _ in self.pad_merges.values()} | set(self.padded_operands.values())


@dataclass(frozen=True)
class FusedStep:
    """One fused op as its producer's kernel runs it: `code` (op, form, swap, act; see
    elementwise.cl), a unary op's parameter, and a binary op's operand: a runtime tensor, or
    a constant as floats padded to whole slices (a QUANTIZE_AND_DEQUANTIZE's: its grid, q)."""

    code: tuple[int, int, int, int]
    param: float
    operand: int | np.ndarray | None


@dataclass
class Epilogue:
    """The fused steps of a `_fused` conv kernel: each step's code, compiled into the kernel's
    program, and the steps' EPILOGUE_ARGS."""

    codes: list[tuple[int, int, int, int]]
    args: list[Any]

    def defines(self, act: int) -> str:
        """The program's ACT (the conv's own activation), E1 and E2, unused steps as NO_STEP."""
        e1, e2 = [*self.codes, NO_STEP, NO_STEP][:2]
        return f"#define ACT {act}\n#define E1 (int4){e1}\n#define E2 (int4){e2}\n"


def plan(view: GraphView) -> FusionPlan:
    chains, forms, padded = plan_epilogues(view)
    return FusionPlan(chains, forms, plan_pad_merges(view), padded)


def depthwise_conv(view: GraphView, op: Operator) -> bool:
    """A CONV_2D with one input channel per group (groups = input channels, a [O, kh, kw, 1]
    filter, as YOLO11 exports its positional conv)."""
    if len(op.inputs) < 2 or min(op.inputs[:2]) < 0:  # a damaged file's conv: not this form
        return False
    w_shape, c = view.shape(op.inputs[1]), (view.shape(op.inputs[0]) or [1])[-1]
    return len(w_shape) == 4 and w_shape[3] == 1 and c > 1


def plan_epilogues(view: GraphView) -> tuple[dict[int, list[int]], dict[int, int], dict[int, int]]:
    """Elementwise ops that can run in the epilogue of the CONV_2D, DEPTHWISE_CONV_2D
    (multiplier 1), transposed conv, unary or binary op producing their input (one not itself
    run in another's): up to two in a chain, each the only reader of the tensor before it,
    which is not a graph output. A binary op qualifies
    when its other operand is a constant scalar or per-channel vector, or a runtime tensor of
    the output's shape that exists before the producer runs (or that tensor but for channels a
    PAD appended: the PAD is merged, FusionPlan.padded_operands)."""
    sg, readers = view.sg, view.readers
    chains: dict[int, list[int]] = {}
    forms: dict[int, int] = {}
    padded: dict[int, int] = {}
    absorbed: set[int] = set()  # ops run in an earlier op's kernel: no kernel of their own
    for oi, op in enumerate(sg.operators):
        name = view.name(op)
        elementwise = name in UNARY or name in BINARY
        if name not in ("CONV_2D", "DEPTHWISE_CONV_2D", *TRANSPOSED) and not elementwise:
            continue
        if len(op.outputs) != 1 or oi in absorbed:
            continue
        depthwise = name == "DEPTHWISE_CONV_2D" or (name == "CONV_2D" and depthwise_conv(view, op))
        if depthwise and view.shape(op.inputs[0])[-1:] != view.shape(op.outputs[0])[-1:]:
            continue  # a depthwise multiplier's kernel has no epilogue
        chain: list[int] = []
        t, steps = op.outputs[0], 0
        while steps < 2 and t not in sg.outputs:
            gate = gate_ops(view, t)
            if gate is not None:
                unary, binary = gate
                forms[binary] = FORM["GATE"]
                chain += [unary, binary]
                absorbed |= {unary, binary}
                t, steps = sg.operators[binary].outputs[0], steps + 1
                continue
            if len(readers.get(t, [])) != 1:
                break
            ri = readers[t][0]
            step = sg.operators[ri]
            if step.inputs.count(t) != 1 or len(step.outputs) != 1 or view.shape(step.outputs[0]) != view.shape(t):
                break
            form = step_form(view, step, t, oi)
            if form is None or (steps == 1 and rounded_after(view, step)):
                break  # as the last step, an op whose int8 result is rounded would leave that rounding a launch
            if form == FORM["PADDED"]:
                padded[ri] = view.producer[step.inputs[1] if step.inputs[0] == t else step.inputs[0]]
            forms[ri] = form
            chain.append(ri)
            absorbed.add(ri)
            t, steps = step.outputs[0], steps + 1
        if chain:
            chains[oi] = chain
    return chains, forms, padded


def rounded_after(view: GraphView, op: Operator) -> bool:
    """Whether `op`'s result is read only by the rounding of an int8 result (which runs in op's
    own kernel when op is not fused into another)."""
    after = view.readers.get(op.outputs[0], [])
    return len(after) == 1 and view.name(view.sg.operators[after[0]]) == QUANTIZE_AND_DEQUANTIZE


def gate_ops(view: GraphView, t: int) -> tuple[int, int] | None:
    """(unary op, binary op) when `t` is read by exactly those two, the unary op's result only by
    the binary op, which combines it with `t` itself, all of one shape: x * LOGISTIC(x)."""
    sg, readers = view.sg, view.readers.get(t, [])
    if len(readers) != 2:
        return None
    for ui, bi in (readers, readers[::-1]):
        u, b = sg.operators[ui], sg.operators[bi]
        if view.name(u) not in UNARY or u.inputs != [t] or len(u.outputs) != 1 or len(b.outputs) != 1:
            continue
        g = u.outputs[0]
        if view.name(b) not in BINARY or sorted(b.inputs) != sorted([t, g]) or g in sg.outputs:
            continue
        if view.readers.get(g) == [bi] and view.shape(g) == view.shape(t) == view.shape(b.outputs[0]):
            return ui, bi
    return None


def step_form(view: GraphView, step: Operator, t: int, producer: int) -> int | None:
    """How `step`, reading `t`, fits an epilogue (a FORM), or None when it does not."""
    name = view.name(step)
    if name == QUANTIZE_AND_DEQUANTIZE and len(step.inputs) == 1:
        return FORM["QUANTIZE"]
    if name == "DEPTHWISE_CONV_2D":
        return FORM["AFFINE"] if affine(view, step, t) is not None else None
    if name in UNARY and len(step.inputs) == 1:
        return FORM["UNARY"]
    if name not in BINARY or len(step.inputs) != 2:
        return None
    other = step.inputs[1] if step.inputs[0] == t else step.inputs[0]
    value = view.float_const(other)
    if value is not None:
        if value.size == 1:
            return FORM["SCALAR"]
        channels = view.shape(t)[-1] if view.shape(t) else 1
        return FORM["CHANNEL"] if value.size == channels and value.shape[-1:] == (channels,) else None
    ready = other in view.sg.inputs or view.producer.get(other, len(view.sg.operators)) < producer
    if not ready:
        return None
    if view.shape(other) == view.shape(t):
        return FORM["PADDED"] if channel_pad(view, other) is not None else FORM["TENSOR"]
    # a runtime per-channel operand (squeeze-and-excite's scales) of a batch-1 output
    per_channel = layout.bhwc(view.shape(other)) == (1, 1, 1, layout.bhwc(view.shape(t))[3])
    return FORM["CHANNEL"] if per_channel and layout.bhwc(view.shape(t))[0] == 1 else None


def affine(view: GraphView, op: Operator, t: int) -> tuple[np.ndarray, np.ndarray] | None:
    """A DEPTHWISE_CONV_2D reading `t` with a constant 1x1 window and bias, one output channel
    per input channel: its per-channel (weights, bias). The caller has checked that its output
    is shaped as `t` (so its stride does not matter)."""
    if op.inputs[0] != t or len(op.inputs) < 2:
        return None
    w = view.float_const(op.inputs[1])
    channels = (view.shape(t) or [1])[-1]
    if w is None or w.shape != (1, 1, 1, channels):
        return None
    b = view.float_const(op.inputs[2]) if len(op.inputs) > 2 else None  # TFLite requires the bias
    if b is None or b.size != channels:
        return None
    return w.reshape(channels), b.reshape(channels)


def channel_pad(view: GraphView, t: int) -> int | None:
    """The PAD op making `t` when it only appends zero channels to a batch-1 tensor and only one
    op reads `t` (a fused step, which then reads the PAD's input instead: FORM PADDED)."""
    sg, pi = view.sg, view.producer.get(t)
    if pi is None or t in sg.outputs or len(view.readers.get(t, [])) != 1:
        return None
    op = sg.operators[pi]
    pads, shape = zero_pads(view, op), view.shape(op.inputs[0])
    if pads is None or pads.shape != (4, 2) or len(shape) != 4 or shape[0] != 1:
        return None
    if pads[:-1].any() or pads[-1][0] != 0 or pads[-1][1] <= 0:
        return None
    return pi


def zero_pads(view: GraphView, op: Operator) -> np.ndarray | None:
    """A PAD or PADV2 op's constant paddings ([rank, 2]) when it pads with zeros, else None."""
    if view.name(op) not in ("PAD", "PADV2") or len(op.inputs) < 2:
        return None
    pads = view.const(op.inputs[1])
    fill = view.float_const(op.inputs[2]) if len(op.inputs) > 2 else None
    return None if pads is None or (fill is not None and fill.any()) else np.asarray(pads)


def fused_steps(view: GraphView, plan: FusionPlan, oi: int) -> tuple[int, list[FusedStep]]:
    """The tensor op `oi`'s kernel writes (the last fused op's output) and the steps it runs."""
    t, steps, gate = view.sg.operators[oi].outputs[0], [], None
    for ri in plan.chains.get(oi, []):
        step = view.sg.operators[ri]
        name = view.name(step)
        form = plan.forms.get(ri)
        opts = step.builtin_options.values if step.builtin_options is not None else {}
        if form is None:  # a gate's unary op: the GATE step after it runs it
            gate = step
            continue
        if form == FORM["GATE"]:
            assert gate is not None
            gate_opts = gate.builtin_options.values if gate.builtin_options is not None else {}
            act = schema.enum_value("ActivationFunctionType", opts.get("fused_activation_function", "NONE"))
            # swap: 2 x the gate's unary code, + 1 when the gate comes first (LOGISTIC(x) * x)
            swap = 2 * unary_code(view.name(gate), gate_opts) + int(step.inputs[0] != t)
            steps.append(FusedStep((BINARY[name], form, swap, act), gate_opts.get("alpha", 0.0), None))
        elif form == FORM["UNARY"]:
            steps.append(FusedStep((unary_code(name, opts), form, 0, 0), opts.get("alpha", 0.0), None))
        elif form == FORM["QUANTIZE"]:
            steps.append(FusedStep((0, form, 0, 0), 0.0, adjustment(step)))
        elif form == FORM["AFFINE"]:
            found = affine(view, step, t)
            assert found is not None
            act = schema.enum_value("ActivationFunctionType", opts.get("fused_activation_function", "NONE"))
            size = layout.slices(found[0].size) * 4  # w's slices then b's
            packed = np.zeros(2 * size, np.float32)
            packed[: found[0].size], packed[size : size + found[1].size] = found
            steps.append(FusedStep((0, form, 0, act), float(size // 4), packed))
        else:
            other = step.inputs[1] if step.inputs[0] == t else step.inputs[0]
            act = schema.enum_value("ActivationFunctionType", opts.get("fused_activation_function", "NONE"))
            value = view.float_const(other)
            operand: int | np.ndarray = other  # a runtime tensor: in the output's layout, or per channel
            param = 0.0
            if value is not None:
                operand = np.zeros(max(4, layout.slices(value.size) * 4), np.float32)
                operand[: value.size] = value.ravel()
            elif form == FORM["PADDED"]:  # the PAD's input, and how many channels it has
                operand = view.sg.operators[plan.padded_operands[ri]].inputs[0]
                param = float(view.shape(operand)[-1])
            steps.append(FusedStep((BINARY[name], form, int(step.inputs[0] != t), act), param, operand))
        t = step.outputs[0]
    return t, steps


def plan_pad_merges(view: GraphView) -> dict[int, tuple[int, int, int]]:
    """A zero PAD of H and W read only by a CONV_2D or DEPTHWISE_CONV_2D: conv -> (the PAD,
    its top and left padding). The conv then reads the PAD's input (see context.window_input)."""
    sg = view.sg
    merges: dict[int, tuple[int, int, int]] = {}
    for oi, op in enumerate(sg.operators):
        if view.name(op) not in ("CONV_2D", "DEPTHWISE_CONV_2D"):
            continue
        x = op.inputs[0]
        pi = view.producer.get(x)
        if pi is None or x in sg.outputs or view.readers.get(x) != [oi]:
            continue
        pads = zero_pads(view, sg.operators[pi])
        if pads is None or pads.shape != (4, 2) or pads[0].any() or pads[3].any() or (pads < 0).any():
            continue
        merges[oi] = (pi, int(pads[1][0]), int(pads[2][0]))
    return merges
