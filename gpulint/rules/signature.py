"""What a check sees of an op: its signature, as the delegate's OpSignature has it, plus the graph.

`TensorSpec.is_const` follows op_signature.cc (a buffer index other than 0 with a data vector, an
empty one included: a zero-element constant), and a
"runtime" tensor is one that is neither constant nor omitted (-1), as compat's
GetNumberOfRuntimeInputs counts them. One exception mirrors the delegate: the output of a
DEQUANTIZE of a constant FLOAT16 tensor reads as a constant, because FP16GraphPartitionHelper
re-points that DEQUANTIZE's consumers at the fp16 constant before checking them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from gpulint.model.ir import Model, Operator, Quantization, Subgraph

OMITTED = "NONE"


@dataclass(frozen=True)
class TensorSpec:
    index: int  # -1 for an omitted optional input
    name: str
    dtype: str  # TensorType name; "NONE" for an omitted input
    shape: tuple[int, ...]
    is_const: bool
    is_dynamic: bool = False
    quant: Quantization | None = None
    sparse: bool = False
    is_graph_input: bool = False
    is_graph_output: bool = False

    @property
    def omitted(self) -> bool:
        return self.index < 0

    @property
    def runtime(self) -> bool:
        return not self.omitted and not self.is_const

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def bhwc(self) -> tuple[int, ...]:
        """The delegate's BHWC of this shape (model_builder_helper.cc ExtractTensorShape: B, BC, BWC, BHWC)."""
        s = self.shape
        if not s:
            return (1, 1, 1, 1)
        if len(s) == 1:
            return (s[0], 1, 1, 1)
        if len(s) == 2:
            return (s[0], 1, 1, s[1])
        if len(s) == 3:
            return (s[0], 1, s[1], s[2])
        return tuple(s)

    @property
    def channels(self) -> int | None:
        """The C of the delegate's layout: BHWC, BWC, BC (the last dim for ranks 2-4)."""
        return self.shape[-1] if 2 <= self.rank <= 4 else None

    @property
    def elements(self) -> int:
        n = 1
        for d in self.shape:
            n *= max(d, 1)
        return n

    def describe(self) -> str:
        return f"{self.dtype}[{','.join(map(str, self.shape))}]"


@dataclass
class Graph:
    """One subgraph's producers and consumers, and which tensors read as constants."""

    model: Model
    index: int
    subgraph: Subgraph
    producer: dict[int, int] = field(default_factory=dict)
    consumers: dict[int, list[int]] = field(default_factory=dict)
    folded_fp16: set[int] = field(default_factory=set)  # DEQUANTIZE ops of fp16 constants
    _signatures: dict[int, OpSignature] = field(default_factory=dict, repr=False)  # checks ask for neighbours often

    @classmethod
    def of(cls, model: Model, index: int) -> Graph:
        sg = model.subgraphs[index]
        g = cls(model, index, sg)
        for oi, op in enumerate(sg.operators):
            for t in op.outputs:
                g.producer[t] = oi
            for t in op.inputs:
                if t >= 0:
                    g.consumers.setdefault(t, []).append(oi)
        for oi, op in enumerate(sg.operators):
            if model.op_name(op) == "DEQUANTIZE" and op.inputs and op.inputs[0] >= 0:
                src = sg.tensors[op.inputs[0]]
                if src.type == "FLOAT16" and g.has_data(op.inputs[0]):
                    g.folded_fp16.add(oi)
        return g

    def has_data(self, t: int) -> bool:
        return self.model.is_constant(self.subgraph.tensors[t])

    def is_const(self, t: int) -> bool:
        if self.has_data(t):
            return True
        p = self.producer.get(t)
        return p is not None and p in self.folded_fp16

    @cached_property
    def graph_inputs(self) -> set[int]:
        return set(self.subgraph.inputs)

    @cached_property
    def graph_outputs(self) -> set[int]:
        return set(self.subgraph.outputs)

    def spec(self, t: int) -> TensorSpec:
        if t < 0:
            return TensorSpec(t, "", OMITTED, (), False)
        tensor = self.subgraph.tensors[t]
        return TensorSpec(
            index=t,
            name=tensor.name or f"tensor {t}",
            dtype=str(tensor.type),
            shape=tuple(tensor.shape),
            is_const=self.is_const(t),
            is_dynamic=tensor.is_dynamic,
            quant=tensor.quantization,
            sparse=tensor.sparsity is not None,
            is_graph_input=t in self.graph_inputs,
            is_graph_output=t in self.graph_outputs,
        )

    def signature(self, index: int) -> OpSignature:
        if index in self._signatures:
            return self._signatures[index]
        op = self.subgraph.operators[index]
        code = self.model.opcode(op)
        sig = self._signatures[index] = OpSignature(
            graph=self,
            index=index,
            operator=op,
            op=code.name,
            version=code.version,
            is_custom=code.is_custom,
            inputs=[self.spec(t) for t in op.inputs],
            outputs=[self.spec(t) for t in op.outputs],
        )
        return sig

    def signatures(self) -> list[OpSignature]:
        return [self.signature(i) for i in range(len(self.subgraph.operators))]


@dataclass
class OpSignature:
    graph: Graph
    index: int
    operator: Operator
    op: str
    version: int
    is_custom: bool
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]

    @property
    def options(self) -> dict[str, Any]:
        opts = self.operator.builtin_options
        return opts.values if opts is not None else {}

    @property
    def has_options(self) -> bool:
        return self.operator.builtin_options is not None

    @property
    def runtime_inputs(self) -> list[TensorSpec]:
        return [t for t in self.inputs if t.runtime]

    @property
    def const_inputs(self) -> list[TensorSpec]:
        return [t for t in self.inputs if not t.omitted and t.is_const]

    @property
    def present_inputs(self) -> list[TensorSpec]:
        return [t for t in self.inputs if not t.omitted]

    def input(self, i: int) -> TensorSpec | None:
        return self.inputs[i] if i < len(self.inputs) and not self.inputs[i].omitted else None

    def producer(self, t: TensorSpec) -> OpSignature | None:
        p = self.graph.producer.get(t.index)
        return None if p is None else self.graph.signature(p)

    def consumers(self, t: TensorSpec) -> list[OpSignature]:
        return [self.graph.signature(c) for c in self.graph.consumers.get(t.index, [])]

    def const_values(self, t: TensorSpec) -> list[int | float] | None:
        """A constant tensor's values as a flat list (None if it has no data here)."""
        if not t.is_const or not self.graph.has_data(t.index):
            return None
        arr = self.graph.model.tensor_data(self.graph.subgraph.tensors[t.index])
        return None if arr is None else arr.ravel().tolist()
