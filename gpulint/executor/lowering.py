"""Lowering: every op of the prepared model becomes launches, once, in op order.

Graph inputs first: each arrives as the caller gives it (float, BHWC) in a buffer of its own,
and a kernel puts it in slices, unless its one reader is a conv that can read it as given
(`read_as_given`: a first layer of up to 4 channels). Then each op through ops.LOWER, except
those that run inside another op's kernel (the fusion plan) and the int8 interface's
DEQUANTIZE / QUANTIZE (the host converts those); after each op the buffers it read last go
back to the pool. An op the executor cannot run is collected, not fatal, so that one
Unlowered names them all.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gpulint.executor import movement
from gpulint.executor.context import LowerContext
from gpulint.executor.errors import DeviceError, ExecutorError, Unlowered
from gpulint.executor.launch import Launch
from gpulint.executor.ops import LOWER
from gpulint.executor.prepare import Prepared, source_name


@dataclass
class Lowered:
    input_launches: list[Launch] = field(default_factory=list)  # raw input -> slices, run first
    launches: list[Launch] = field(default_factory=list)
    raw_inputs: dict[int, Any] = field(default_factory=dict)  # graph input -> its buffer as given (float, BHWC)


# Operands a lowering reads by position (weights, axes, the second operand): an op written with
# fewer (a damaged file) is one the executor cannot lower, not an IndexError.
MIN_INPUTS = {
    "CONV_2D": 2,
    "DEPTHWISE_CONV_2D": 2,
    "TRANSPOSE_CONV": 3,
    "FULLY_CONNECTED": 2,
    "BATCH_MATMUL": 2,
    "SUM": 2,
    "MEAN": 2,
    "REDUCE_MAX": 2,
    "REDUCE_MIN": 2,
    "REDUCE_PROD": 2,
    "ARG_MAX": 2,
    "ARG_MIN": 2,
}


def lower(prepared: Prepared, cx: LowerContext) -> Lowered:
    sg = cx.view.sg
    done = Lowered()
    for t in sg.inputs:
        target = prepared.edges_in.get(t, (t, None))[0]
        if read_as_given(cx, target):
            done.raw_inputs[target] = cx.given[target] = raw_buffer(cx, target)
        else:
            input_launch(cx, target, done)
    missing: dict[str, str] = {}
    unlowered: list[tuple[list[str], str, str]] = []  # (output names, op, reason) per op
    absorbed = cx.plan.absorbed
    for oi, op in enumerate(sg.operators):
        name = cx.view.name(op)
        if name == "DEQUANTIZE" and op.inputs[0] in prepared.edges_in:
            continue
        if name == "QUANTIZE" and op.outputs and op.outputs[0] in prepared.edges_out:
            continue
        if oi in absorbed:  # runs inside its producer's kernel
            cx.buffers.release_after(oi)
            continue
        try:
            if not op.outputs:  # a malformed op (a damaged file): nothing to compute into
                raise ExecutorError(f"{name} has no output")
            if len(op.inputs) < MIN_INPUTS.get(name, 1) or op.inputs[0] < 0:  # a damaged file, too
                raise ExecutorError(f"{name} with {len(op.inputs)} input(s)")
            this = cx.view.op(oi)  # its options and activation: a bad activation is a ValueError, not a gap
            lowering = LOWER.get(name)
            if lowering is None:
                raise ExecutorError(name)
            done.launches += lowering(cx, this)
        except DeviceError as e:  # not a gap in the executor: the device refused
            raise DeviceError(f"op {oi} {name}: {e}") from None
        except MemoryError:  # host arrays for buffers the device would take but this process cannot hold
            raise DeviceError(f"op {oi} {name}: the host has no memory left for its buffers") from None
        except (movement.Unsupported, ExecutorError) as e:
            missing.setdefault(name, str(e))
            unlowered.append(([source_name(cx.view.model, cx.view.readers, t) for t in op.outputs], name, str(e)))
        cx.buffers.release_after(oi)
    if missing:
        items = "; ".join(f"{k} ({v})" if v != k else k for k, v in sorted(missing.items()))
        raise Unlowered(f"the executor cannot run: {items}", unlowered)
    return done


def raw_buffer(cx: LowerContext, t: int) -> Any:
    """Graph input `t`'s own buffer, which the host writes as the caller gives it."""
    try:
        return cx.buffers.raw(4 * int(np.prod(cx.shape(t))))
    except DeviceError as e:
        raise DeviceError(f"input {cx.view.sg.tensors[t].name}: {e}") from None


def input_launch(cx: LowerContext, t: int, done: Lowered) -> None:
    """Graph input `t`'s own buffer and the kernel that puts it in slices, as the delegate
    converts its inputs on the GPU. On the host (pad, transpose, convert, copy) that took
    0.3 ms of a 1.9 ms hand_recrop run. Its launch is op -1 in the timings."""
    raw = done.raw_inputs[t] = raw_buffer(cx, t)
    try:
        done.input_launches.append(cx.input_slices(t, raw))
    except DeviceError as e:
        raise DeviceError(f"input {cx.view.sg.tensors[t].name}: {e}") from None


def read_as_given(cx: LowerContext, t: int) -> bool:
    """May graph input `t` reach its reader as the caller gives it? When its one reader is a
    CONV_2D (directly or through a PAD merged into it) that is not grouped, it has 4 channels or
    fewer (one slice, whose missing lanes the conv skips) and tensors are float: conv_o's `_raw`
    kernels read it so. The conv converts it itself where its kernel cannot (ops/conv.py)."""
    view = cx.view
    shape = cx.shape(t)
    if cx.half or len(shape) != 4 or shape[3] > 4 or t in view.sg.outputs:
        return False
    readers = view.readers.get(t, [])
    if len(readers) != 1:
        return False
    (ri,) = readers
    merged = [ci for ci, (pad_op, _, _) in cx.plan.pad_merges.items() if pad_op == ri]
    reader = merged[0] if merged else ri
    op = view.sg.operators[reader]
    if view.name(op) != "CONV_2D" or not (merged or op.inputs[0] == t):
        return False
    filter_shape = cx.shape(op.inputs[1])  # not grouped: a grouped conv may run as a depthwise one
    return len(filter_shape) == 4 and filter_shape[3] == shape[3]
