"""The detector registry: a rule that code must decide is one function, registered under its code.

A rule is its entry in rules.yaml (message, docs, fix) plus, where the entry says
`found_by: detector`, one function registered with `@detector("GPU403", "op")` in the module of
its scope. The engine runs the detectors scope by scope and turns each Hit into a finding with
the rule's message: it knows scopes, not rule codes. catalog.py checks that both sides match.

Scopes, in the order the engine runs them, which is the order of the findings they give. A
detector is called with the view and one item of its scope:
- subgraph: the subgraph's Graph, once: patterns over several ops (detectors/subgraph.py)
- op: each op, in order (detectors/op.py)
- f16-op: each op the delegate computes with its F16 kernels, but the LayerNorm chains the
  OpenCL backend fuses and computes in float, in order (detectors/f16.py)
- plan: the subgraph's partition plan, once (detectors/subgraph.py)
- input: each input tensor of the main subgraph (detectors/model.py)
- model: the model, once, after every subgraph (detectors/model.py)
For one item, detectors run in the order they are registered.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any, NamedTuple, Protocol, TypeVar

from gpulint.model.ir import Model
from gpulint.rules import numerics
from gpulint.rules.partition import SubgraphPlan
from gpulint.rules.placement import Placement
from gpulint.rules.signature import Graph, OpSignature

SUBGRAPH_SCOPES = ("subgraph", "op", "f16-op", "plan", "input")
MODEL_SCOPES = ("model",)
SCOPES = (*SUBGRAPH_SCOPES, *MODEL_SCOPES)


class TargetFacts(Protocol):
    """What detectors read of the target (a pack.Target, not imported: the catalog imports the registry)."""

    @property
    def name(self) -> str: ...
    @property
    def device_gate(self) -> str: ...
    @property
    def runtime(self) -> str: ...
    @property
    def settings(self) -> dict[str, Any]: ...


class Hit(NamedTuple):  # a NamedTuple, not a dataclass: cheaper to import, and a check pays each import
    """One finding of a detector's rule: the values its message template names."""

    values: dict[str, Any]
    op_index: int | None = None  # the op it is about
    op: str | None = None
    tensors: list[str] | None = None  # the tensors it names (default: values["tensor"])
    fix: bool = True  # False where the rule's fix pass would not apply, so none is offered


T = TypeVar("T")


@dataclass
class SubgraphView:
    """What a subgraph's detectors read: its ops, where each was placed, its partition plan."""

    graph: Graph
    sigs: list[OpSignature]
    placed: list[Placement]  # by op index
    plan: SubgraphPlan
    target: TargetFacts
    backends: int  # how many of the delegate's backends are checked
    backend_names: tuple[str, ...] = ()  # which (opencl, opengl, ...)
    _memo: dict[Callable[..., Any], Any] = field(default_factory=dict, repr=False)

    def on_gpu(self, sig: OpSignature) -> bool:
        p = self.placed[sig.index]
        return p.placement == "gpu" and not p.folded

    def memo(self, fn: Callable[[SubgraphView], T]) -> T:
        """fn(self), computed once: an analysis several detectors read (the atrous chains)."""
        if fn not in self._memo:
            self._memo[fn] = fn(self)
        result: T = self._memo[fn]
        return result

    def scopes(self) -> Iterator[tuple[str, Sequence[Any]]]:
        yield "subgraph", (self.graph,)
        yield "op", self.sigs
        yield "f16-op", self._f16_scope()
        yield "plan", (self.plan,)
        yield "input", [self.graph.spec(i) for i in self.graph.subgraph.inputs] if self.graph.index == 0 else ()

    def _f16_scope(self) -> list[OpSignature]:
        f16 = self.memo(f16_ops)
        if not f16:
            return []
        # The LayerNorm chains the OpenCL backend fuses compute in float.
        fused = numerics.fused_layernorms(self.sigs)
        return [s for s in self.sigs if s.index in f16 and s.index not in fused and s.outputs]


def f16_ops(v: SubgraphView) -> set[int]:
    """The ops the delegate's F16 kernels compute: those on the GPU on at least one backend (an
    op one backend cannot build still runs on the GPU through the other, OpenCL on most phones).
    Core ML runs its own kernels, not the delegate's: none there."""
    if v.target.name == "coreml":
        return set()
    return {
        p.index
        for p in v.placed
        if not p.folded and (p.placement == "gpu" or (p.backend_failures and len(p.backend_failures) < v.backends))
    }


@dataclass
class ModelView:
    """What the model's detectors read: the model, its subgraphs, the target and its flags."""

    model: Model
    graphs: list[Graph]
    target: TargetFacts
    quantized: bool  # the delegate's quantized-models flag
    _memo: dict[Callable[..., Any], Any] = field(default_factory=dict, repr=False)

    def memo(self, fn: Callable[[ModelView], T]) -> T:
        """fn(self), computed once: an analysis several detectors read."""
        if fn not in self._memo:
            self._memo[fn] = fn(self)
        result: T = self._memo[fn]
        return result

    def scopes(self) -> Iterator[tuple[str, Sequence[Any]]]:
        yield "model", (self.model,)


Find = Callable[[Any, Any], Iterator[Hit]]
F = TypeVar("F", bound=Find)


class Detector(NamedTuple):
    code: str
    scope: str
    find: Find

    @property
    def where(self) -> str:
        return f"{self.find.__module__}.{self.find.__name__}"


DETECTORS: dict[str, Detector] = {}


def detector(code: str, scope: str) -> Callable[[F], F]:
    """Register `fn(view, item) -> Iterator[Hit]` as the detector of rule `code` in `scope`."""
    if scope not in SCOPES:
        raise ValueError(f"detector for {code}: scope `{scope}` is not one of {', '.join(SCOPES)}")

    def register(fn: F) -> F:
        if code in DETECTORS:
            raise ValueError(f"{code} has two detectors: {DETECTORS[code].where} and {fn.__module__}.{fn.__name__}")
        DETECTORS[code] = Detector(code, scope, fn)
        in_scope.cache_clear()
        return fn

    return register


@cache
def in_scope(scope: str) -> tuple[Detector, ...]:
    """The detectors of one scope, in the order they were registered."""
    return tuple(d for d in DETECTORS.values() if d.scope == scope)
