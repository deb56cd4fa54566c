"""Where the delegate puts one op, and why: the decision chain, read from the target pack.

`Placer.place` follows the delegate's decision chain (shared/research/gpu_delegate_rules.md §1):
parser exists -> quantized-models flag -> CheckMaxSupportedOpVersion -> per-op compat checks
-> tensor type/rank gate; ops that pass are then held to the [Parse] constraints, which make
the delegate fail at init rather than fall back, and to each backend's kernels.
`check_partition` then holds each backend to its checks over the whole delegated partition.
The codes they give (GPU101-108, GPU201, GPU203) are the rules.yaml entries with
`found_by: target-pack`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpulint.rules import checks, pack
from gpulint.rules.pack import Target
from gpulint.rules.partition import SubgraphPlan, refresh_verdict
from gpulint.rules.placement import MAX_NAME, Placement
from gpulint.rules.prepare import persistent_tensors
from gpulint.rules.signature import Graph, OpSignature, TensorSpec
from gpulint.text import clean


class Placer:
    def __init__(
        self, target: Target, quantized: bool, backends: list[pack.Backend], targets: Mapping[str, Target]
    ) -> None:
        self.target = target
        self.quantized = quantized
        self.backends = backends
        mp, classic = targets.get("mediapipe"), targets.get("classic")
        added = set(mp.custom_ops) - set(classic.custom_ops) if mp is not None and classic is not None else set()
        self.mediapipe_only = added - set(target.custom_ops)  # for GPU103 rather than GPU102
        self._persistent: dict[int, tuple[Graph, frozenset[int]]] = {}  # id(graph) -> (graph, tensors)
        # LiteRT 2.4's CompiledModel binds a signature's inputs and outputs before the delegate
        # chooses ops: they are not arena tensors, so the tensor gate skips their type
        # (litert-gpu.yaml `releases`, measured).
        self.boundary_unchecked = release(target) >= (2, 4)

    def place(self, sig: OpSignature) -> Placement:
        p = Placement(sig.graph.index, sig.index, clean(sig.op, MAX_NAME) or "", sig.version, "gpu")
        if sig.index in sig.graph.folded_fp16:
            p.folded = True
            p.reasons.append("fp16 constant DEQUANTIZE: folded into its consumers (FP16GraphPartitionHelper)")
            return p
        support = (self.target.custom_ops if sig.is_custom else self.target.ops).get(sig.op)
        if support is None:
            # Unknown custom ops get UnimplementedOperationParser(name), whose reason is the name.
            if sig.is_custom and sig.op in self.mediapipe_only:
                return self._cpu(p, "GPU103", sig.op, op=sig.op)
            if sig.is_custom:
                return self._cpu(p, "GPU102", sig.op, op=sig.op, target=self.target.name)
            return self._cpu(p, "GPU101", "Operation is not supported.", op=sig.op)
        if support.quantized_only and not self.quantized:
            return self._cpu(p, "GPU105", "Operation is not supported.", op=sig.op)
        if support.max_version is not None and sig.version > support.max_version:
            reason = f"Max version supported: {support.max_version}. Requested version {sig.version}."
            return self._cpu(p, "GPU104", reason, op=sig.op, version=sig.version, max_version=support.max_version)
        for call in support.checks:
            refused = checks.run(call.name, sig, dict(call.params))
            if refused:
                return self._cpu(p, "GPU106", refused, op=sig.op, reason=refused)
        gate = self._tensor_gate(sig, support)
        if gate is not None:
            code, values = gate
            return self._cpu(p, code, "OP is supported, but tensor type/shape isn't compatible.", op=sig.op, **values)
        if self.boundary_unchecked and (t := _uncompilable_boundary(sig)) is not None:
            words = (
                f"Failed to initialize kernel: the {t.dtype} tensor `{t.name}` is a signature input or output, "
                "whose type this release no longer checks, and the GPU compile has no such type"
            )
            p.placement = "init-failure"
            p.reasons.append(words)
            p.codes.append(("GPU201", {"op": sig.op, "reason": words}))
            return p
        for call in support.init_checks:
            failure = checks.run(call.name, sig, dict(call.params))
            if failure:
                p.placement = "init-failure"
                p.reasons.append(failure)
                p.codes.append(("GPU201", {"op": sig.op, "reason": failure}))
                return p
        for backend in self.backends:
            failure = self._backend_failure(sig, backend)
            if failure:
                p.backend_failures[backend.name] = failure
                p.placement = "init-failure"
                p.reasons.append(f"{backend.title}: {failure}")
                p.codes.append(("GPU203", {"op": sig.op, "backend": backend.title, "reason": failure}))
        if sig.op == "DEQUANTIZE" and sig.inputs and sig.inputs[0].is_const:
            p.folded = True
            p.reasons.append("constant DEQUANTIZE: dequantized once when the delegate initializes")
        return p

    @staticmethod
    def _backend_failure(sig: OpSignature, backend: pack.Backend) -> str | None:
        if sig.op in backend.no_kernel:
            return f"No shader implementation for {backend.no_kernel[sig.op]}"
        for call in backend.init_checks.get(sig.op, []):
            failure = checks.run(call.name, sig, dict(call.params))
            if failure:
                return failure
        return None

    def _cpu(self, p: Placement, code: str, reason: str, /, **values: Any) -> Placement:
        p.placement = "cpu"
        p.reasons.append(reason)
        p.codes.append((code, values))
        return p

    def _persistent_tensors(self, graph: Graph) -> frozenset[int]:
        held = self._persistent.get(id(graph))
        if held is None or held[0] is not graph:
            held = self._persistent[id(graph)] = (graph, persistent_tensors(graph))
        return held[1]

    def _tensor_gate(self, sig: OpSignature, support: pack.OpSupport) -> tuple[str, dict[str, Any]] | None:
        """builder IsAllAllowedTensors (3055-3077; mdb 6734-6762): rank < 5 everywhere, and the
        allowed types on the tensors of the arena (kTfLiteArenaRw). A tensor computed at Prepare
        (kTfLitePersistentRo, prepare.py) is not one, whatever its type: an INT32 MUL on SHAPE's
        output passes the gate (and then fails the OpenGL delegate's init as a partition input)."""
        if not self.target.tensor_gate:
            return None
        for t in (*sig.inputs, *sig.outputs):
            if not t.omitted and t.rank > self.target.max_rank:
                return "GPU108", {"tensor": t.name, "rank": t.rank}
        base = list(self.target.runtime_types) + (list(self.target.quantized_types) if self.quantized else [])
        persistent = self._persistent_tensors(sig.graph)
        for tensors, extra in ((sig.inputs, support.extra_input_types), (sig.outputs, support.extra_output_types)):
            allowed = list(dict.fromkeys(base + list(extra)))  # INT8 is both quantized and an int type
            for t in tensors:
                if self.boundary_unchecked and (t.is_graph_input or t.is_graph_output):
                    continue
                if t.runtime and t.index not in persistent and t.dtype not in allowed:
                    return "GPU107", {"tensor": t.name, "dtype": t.dtype, "allowed": "/".join(allowed)}
        return None

    def check_partition(
        self, graph: Graph, plan: SubgraphPlan, placed: list[Placement]
    ) -> list[tuple[str, dict[str, Any], int | None, str | None]]:
        """Each backend's checks over the whole delegated partition (its values, its inputs and
        outputs): (code, values, op index, op) for each failure, which the placements and the
        plan now record, and the plan's verdict redone."""
        out: list[tuple[str, dict[str, Any], int | None, str | None]] = []
        for backend in self.backends:
            for name in backend.graph_checks:
                hit = checks.GRAPH_CHECKS[name](graph, plan.delegated)
                if hit is None:
                    continue
                index, failure = hit
                p = next((q for q in placed if q.index == index), None)
                plan.backend_failures.setdefault(backend.name, f"{failure} (at `{p.op if p else '?'}`, op {index})")
                if p is not None:
                    p.backend_failures.setdefault(backend.name, failure)
                    p.placement = "init-failure"
                    p.reasons.append(f"{backend.title}: {failure}")
                values = {"op": p.op if p else "", "backend": backend.title, "reason": failure}
                out.append(("GPU203", values, index, p.op if p else None))
        for backend in self.backends:
            failing = [p for p in placed if p.index in plan.delegated and backend.name in p.backend_failures]
            if failing and backend.name not in plan.backend_failures:
                f = failing[0]
                plan.backend_failures[backend.name] = f"{f.backend_failures[backend.name]} (at `{f.op}`, op {f.index})"
        refresh_verdict(plan, placed, {b.name: b.title for b in self.backends})
        return out


# What the GPU compile cannot hold, where LiteRT 2.4 lets it through at the boundary: measured for
# INT64 ("Failed to initialize kernel"; INT32 and BOOL there compile and run). Other types (FLOAT64,
# UINT64, STRING) were not measured and are not assumed.
UNCOMPILABLE = ("INT64",)


def release(target: Target) -> tuple[int, ...]:
    """The LiteRT release a target models, from its `litert_version` setting; () for other targets."""
    version = str(target.settings.get("litert_version", ""))
    return tuple(int(x) for x in version.split(".") if x.isdigit())


def _uncompilable_boundary(sig: OpSignature) -> TensorSpec | None:
    return next(
        (
            t
            for t in (*sig.inputs, *sig.outputs)
            if t.runtime and (t.is_graph_input or t.is_graph_output) and t.dtype in UNCOMPILABLE
        ),
        None,
    )
