"""A read-only view of the prepared model's main subgraph, as lowering and fusion planning
read it: op names and options, tensor shapes, constants (int8 weights of hybrid ops as the
delegate dequantizes them), and which op makes and which ops read each tensor."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from gpulint.executor.errors import ExecutorError
from gpulint.model import schema
from gpulint.model.ir import Model, Operator
from gpulint.passes.edit import dequantize


@dataclass(frozen=True)
class OpView:
    """Op `index` of the subgraph with its name, options and fused activation (as a number)."""

    index: int
    op: Operator
    name: str
    opts: dict[str, Any]
    act: int

    @property
    def inputs(self) -> list[int]:
        return self.op.inputs

    @property
    def outputs(self) -> list[int]:
        return self.op.outputs


class GraphView:
    """The main subgraph of `model`, which nothing changes while the view is in use."""

    def __init__(self, model: Model) -> None:
        self.model = model
        self.sg = model.subgraphs[0]
        self.readers, self.producer = links(model)

    def name(self, op: Operator) -> str:
        return self.model.op_name(op)

    def op(self, oi: int) -> OpView:
        """Op `oi` as lowering reads it. A fused activation that is no member of the schema's
        enum is a ValueError, as before any lowering."""
        op = self.sg.operators[oi]
        opts = op.builtin_options.values if op.builtin_options is not None else {}
        act = schema.enum_value("ActivationFunctionType", opts.get("fused_activation_function", "NONE"))
        return OpView(oi, op, self.name(op), opts, act)

    def shape(self, t: int) -> list[int]:
        return self.sg.tensors[t].shape

    def type(self, t: int) -> str:
        return str(self.sg.tensors[t].type)

    def const(self, t: int) -> np.ndarray | None:
        return None if t < 0 else self.model.tensor_data(self.sg.tensors[t])

    def float_const(self, t: int) -> np.ndarray | None:
        """A constant as float: int8 weights of hybrid (dynamic-range) ops scaled as the delegate
        dequantizes them once at init."""
        if t < 0:
            return None
        tensor = self.sg.tensors[t]
        if tensor.type in ("INT8", "UINT8", "INT16") and tensor.quantization is not None and tensor.quantization.scale:
            return dequantize(self.model, tensor)
        value = self.const(t)
        if value is not None and list(value.shape) != [max(d, 0) for d in tensor.shape]:
            # raw bytes (model.tensor_data): INT4 and other types numpy cannot view, sparse data
            raise ExecutorError(
                f"its constant `{tensor.name}` ({tensor.type}) is stored in a form the executor cannot read"
            )
        return None if value is None else value.astype(np.float32)


def links(model: Model) -> tuple[dict[int, list[int]], dict[int, int]]:
    """For the main subgraph's operators as they stand: the ops reading each tensor, in order,
    and the op making it."""
    readers: dict[int, list[int]] = {}
    produced_by: dict[int, int] = {}
    for oi, op in enumerate(model.subgraphs[0].operators):
        for t in op.inputs:
            if t >= 0:
                readers.setdefault(t, []).append(oi)
        for t in op.outputs:
            produced_by[t] = oi
    return readers, produced_by
