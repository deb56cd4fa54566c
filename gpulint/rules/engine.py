"""Decide, op by op, what the GPU delegate does with a model, and say why.

`place` follows the delegate's decision chain (shared/research/gpu_delegate_rules.md §1):
parser exists -> quantized-models flag -> CheckMaxSupportedOpVersion -> per-op compat checks
-> tensor type/rank gate; ops that pass are then held to the [Parse] constraints, which make
the delegate fail at init rather than fall back. `lint` adds the layout, performance,
quantization and control-flow rules, and the partition plan.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpulint.model.ir import Model
from gpulint.passes import rgba_input
from gpulint.rules import checks, numerics, pack
from gpulint.rules.pack import Rule, Target
from gpulint.rules.partition import SubgraphPlan, plan_subgraph, refresh_verdict
from gpulint.rules.placement import Placement
from gpulint.rules.prepare import Refusal, find_refusal
from gpulint.rules.signature import Graph, OpSignature
from gpulint.text import clean

MAX_NAME = 80  # the longest model-provided name quoted in a message
MAX_REASON = 400

CONTROL_FLOW = {
    "WHILE": ("cond_subgraph_index", "body_subgraph_index"),
    "IF": ("then_subgraph_index", "else_subgraph_index"),
    "CALL_ONCE": ("init_subgraph_index",),
    "CALL": ("subgraph",),
}
RESHUFFLE = {
    "SPACE_TO_DEPTH": "depth",
    "DEPTH_TO_SPACE": "depth",
    "SPACE_TO_BATCH_ND": "batch",
    "BATCH_TO_SPACE_ND": "batch",
}
SUB_BYTE = ("INT4", "INT2", "UINT4")
PARTITION_CODES = ("GPU109", "GPU601", "GPU602")


@dataclass
class Finding:
    code: str
    name: str
    severity: str
    message: str
    subgraph: int | None = None
    op_index: int | None = None
    op: str | None = None
    tensors: list[str] = field(default_factory=list)
    fix: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "name": self.name,
            "severity": self.severity,
            "message": self.message,
            "subgraph": self.subgraph,
            "index": self.op_index,
            "op": self.op,
            "tensors": self.tensors,
            "fix": self.fix,
        }


@dataclass
class LintResult:
    findings: list[Finding]
    ops: list[Placement]
    plans: list[SubgraphPlan]
    verdict: str
    reason: str
    backends: dict[str, dict[str, str]] = field(default_factory=dict)  # backend -> {init, reason}
    refusal: Refusal | None = None


class Linter:
    def __init__(
        self,
        target: Target,
        quantized: bool = True,
        rules: dict[str, Rule] | None = None,
        targets: Mapping[str, Target] | None = None,
        backends: tuple[str, ...] | None = None,
    ) -> None:
        self.target = target
        self.quantized = quantized
        names = tuple(target.backends) if backends is None else backends
        self.backends = [target.backends[b] for b in names if b in target.backends]
        self.rules = rules or pack.builtin_rules()
        all_targets = targets or pack.load_targets()
        mp, classic = all_targets.get("mediapipe"), all_targets.get("classic")
        added = set(mp.custom_ops) - set(classic.custom_ops) if mp is not None and classic is not None else set()
        self.mediapipe_only = added - set(target.custom_ops)  # for GPU103 rather than GPU102

    # -- one op ---------------------------------------------------------------------------------

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

    def _tensor_gate(self, sig: OpSignature, support: pack.OpSupport) -> tuple[str, dict[str, Any]] | None:
        """builder IsAllAllowedTensors: rank < 5 everywhere, allowed types on runtime tensors."""
        if not self.target.tensor_gate:
            return None
        for t in (*sig.inputs, *sig.outputs):
            if not t.omitted and t.rank > self.target.max_rank:
                return "GPU108", {"tensor": t.name, "rank": t.rank}
        base = list(self.target.runtime_types) + (list(self.target.quantized_types) if self.quantized else [])
        for tensors, extra in ((sig.inputs, support.extra_input_types), (sig.outputs, support.extra_output_types)):
            allowed = base + list(extra)
            for t in tensors:
                if t.runtime and t.dtype not in allowed:
                    return "GPU107", {"tensor": t.name, "dtype": t.dtype, "allowed": "/".join(allowed)}
        return None

    # -- one model -------------------------------------------------------------------------------

    def lint(self, model: Model, graphs: list[Graph] | None = None) -> LintResult:
        """`graphs`: the model's Graphs, when several targets check the same model (they hold
        nothing target-specific, and their op signatures are cached)."""
        findings: list[Finding] = []
        placements: list[Placement] = []
        plans: list[SubgraphPlan] = []
        if graphs is None:
            graphs = [Graph.of(model, si) for si in range(len(model.subgraphs))]
        for graph in graphs:
            si = graph.index
            sigs = graph.signatures()
            placed = [self.place(s) for s in sigs]
            plan = plan_subgraph(graph, sigs, placed, self.target.max_partitions, self.target.min_partition_nodes)
            plans.append(plan)
            small = {
                n for part in plan.gpu_partitions if len(part.ops) < self.target.min_partition_nodes for n in part.ops
            }
            for p in placed:
                if p.placement != "cpu" and not p.folded and p.index not in plan.delegated:
                    # Supported, but cut off from the delegated partition: it runs on the CPU,
                    # and an init-time constraint it breaks never comes into play.
                    p.placement = "cpu"
                    p.reasons = [
                        f"in a partition smaller than the delegate's minimum of {self.target.min_partition_nodes} nodes"
                        if p.index in small
                        else "outside the delegated partition"
                    ]
                    p.codes = [("GPU109", {"op": p.op})]
                    p.backend_failures = {}
            placements.extend(placed)
            for p in placed:
                for code, values in p.codes:
                    findings.append(self.finding(code, values, si, p.index, p.op))
            findings.extend(self._partition_checks(graph, plan, placed))
            findings.extend(self._op_rules(graph, sigs, placed, plan))
            findings.extend(self._numerics_rules(graph, sigs, placed))
            findings.extend(self._subgraph_rules(graph, plan))
        findings.extend(self._model_rules(model, graphs))
        if self.target.device_gate and not self.target.settings.get("all_devices"):
            findings.append(self.finding("GPU110", {"target": self.target.name, "gate": self.target.device_gate}))
        refusal = find_refusal(model, graphs)
        if refusal is not None:
            # Partition findings describe a split that never happens once the graph is refused.
            findings = [f for f in findings if f.code not in PARTITION_CODES]
            findings.append(self._refuse(refusal, placements, plans))
        verdict, reason = model_verdict(plans)
        outcomes = self._backend_outcomes(plans)
        if verdict == "init-failure" and outcomes:
            reason = self._init_failure_reason(outcomes)
        return LintResult(findings, placements, plans, verdict, reason, outcomes, refusal)

    def _partition_checks(self, graph: Graph, plan: SubgraphPlan, placed: list[Placement]) -> list[Finding]:
        """Each backend's checks over the whole delegated partition (its values, its inputs and outputs)."""
        out: list[Finding] = []
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
                out.append(self.finding("GPU203", values, graph.index, index, p.op if p else None))
        for backend in self.backends:
            failing = [p for p in placed if p.index in plan.delegated and backend.name in p.backend_failures]
            if failing and backend.name not in plan.backend_failures:
                f = failing[0]
                plan.backend_failures[backend.name] = f"{f.backend_failures[backend.name]} (at `{f.op}`, op {f.index})"
        refresh_verdict(plan, placed, {b.name: b.title for b in self.backends})
        return out

    def _refuse(self, refusal: Refusal, placements: list[Placement], plans: list[SubgraphPlan]) -> Finding:
        """The interpreter refuses the delegate for the whole graph: nothing is delegated."""
        words = f"the interpreter refuses the GPU delegate for the whole graph: {refusal.message}"
        for p in placements:
            if p.placement in ("gpu", "init-failure") and not p.folded:
                p.placement = "refused"
                p.reasons.append(words)
            elif p.placement == "cpu" and p.codes and p.codes[0][0] == "GPU109":
                p.reasons = [words]  # "outside the delegated partition" of a partition never made
        for plan in plans:
            for part in plan.partitions:
                part.delegated = False
            plan.cpu_ops = sorted(plan.delegated | set(plan.cpu_ops))
            plan.delegated = set()
            plan.delegated_nodes = set()
            plan.final_partitions = 0
            plan.cpu_subsets = 0
            plan.gpu_macs = 0
            plan.transfers = []
            plan.verdict = "refused"
            plan.reason = (
                f"`{refusal.tensor}` is dynamic-sized after Prepare ({refusal.op}, op {refusal.op_index} of "
                f"subgraph {refusal.subgraph}: {refusal.why}); nothing runs on the GPU"
            )
        values = {
            "tensor": refusal.tensor,
            "op": refusal.op,
            "index": refusal.op_index,
            "subgraph": refusal.subgraph,
            "why": refusal.why,
            "words": refusal.message,
        }
        return self.finding("GPU202", values, refusal.subgraph, refusal.op_index, refusal.op, [refusal.tensor])

    def _backend_outcomes(self, plans: list[SubgraphPlan]) -> dict[str, dict[str, str]]:
        """Each backend's init outcome. The interpreter hands the delegate its subgraphs in index
        order and stops at the first that fails (core/interpreter.cc 433-450), so a backend's
        failure is its first failing subgraph's, whether common to every backend or its own."""
        out: dict[str, dict[str, str]] = {}
        for backend in self.backends:
            if any(p.verdict == "refused" for p in plans):
                out[backend.name] = {"init": "refused", "reason": plans[0].reason}
                continue
            out[backend.name] = {"init": "ok", "reason": ""}
            for p in plans:
                why = p.common_failure or p.backend_failures.get(backend.name, "")
                if why:
                    where = f"subgraph {p.subgraph}, " if p.subgraph else ""
                    out[backend.name] = {"init": "init-failure", "reason": where + why}
                    break
        return out

    def _init_failure_reason(self, outcomes: dict[str, dict[str, str]]) -> str:
        titles = {b.name: b.title for b in self.backends}
        failing = {b: o["reason"] for b, o in outcomes.items() if o["init"] == "init-failure"}
        ok = [titles[b] for b, o in outcomes.items() if o["init"] == "ok"]
        if len(set(failing.values())) == 1 and not ok:
            return f"the delegate fails to initialize on {next(iter(failing.values()))}"
        fails = "; ".join(f"on the {titles[b]}: {why}" for b, why in failing.items())
        return (f"initializes on the {' and '.join(ok)} but fails " if ok else "fails to initialize ") + fails

    def finding(
        self,
        code: str,
        values: dict[str, Any],
        subgraph: int | None = None,
        index: int | None = None,
        op: str | None = None,
        tensors: list[str] | None = None,
    ) -> Finding:
        rule = self.rules[code]
        names = tensors if tensors is not None else [v for k, v in values.items() if k == "tensor"]
        # Names come from the model: bounded and printable before they reach a message.
        shown = {
            k: clean(v, MAX_NAME if k in ("tensor", "op") else MAX_REASON) if isinstance(v, str) else v
            for k, v in values.items()
        }
        return Finding(code, rule.name, rule.severity, rule.render(**shown), subgraph, index, op, names, rule.fix_pass)

    def _op_rules(
        self, graph: Graph, sigs: list[OpSignature], placed: list[Placement], plan: SubgraphPlan
    ) -> list[Finding]:
        out: list[Finding] = []
        si = graph.index
        atrous = find_atrous(sigs)
        for ops, conv, dilation in atrous:
            out.append(
                self.finding(
                    "GPU402",
                    {"conv": conv, "ops": ", ".join(map(str, ops)), "dilation": dilation},
                    si,
                    ops[0],
                    "SPACE_TO_BATCH_ND",
                )
            )
        in_atrous = {i for ops, _, _ in atrous for i in ops}
        for sig, p in zip(sigs, placed, strict=True):
            on_gpu = p.placement == "gpu" and not p.folded
            if on_gpu and sig.op in RESHUFFLE and sig.index not in in_atrous:
                out.append(self.finding("GPU401", {"op": sig.op, "where": RESHUFFLE[sig.op]}, si, sig.index, sig.op))
            if on_gpu and (moved := channel_move(sig)) is not None:
                out.append(
                    self.finding("GPU403", {"op": sig.op, "src": moved[0], "dst": moved[1]}, si, sig.index, sig.op)
                )
            if on_gpu:
                odd = [t for t in sig.outputs if t.channels and t.channels % 4 and t.dtype in ("FLOAT32", "FLOAT16")]
                if odd:
                    shown = ", ".join(f"`{clean(t.name, MAX_NAME)}` ({slice_waste(t.channels or 1)})" for t in odd)
                    out.append(
                        self.finding(
                            "GPU301", {"op": sig.op, "tensors": shown}, si, sig.index, sig.op, [t.name for t in odd]
                        )
                    )
            for t in sig.inputs:
                if t.is_const and t.dtype in SUB_BYTE:
                    out.append(
                        self.finding(
                            "GPU503", {"op": sig.op, "dtype": t.dtype, "tensor": t.name}, si, sig.index, sig.op
                        )
                    )
                    break
            if sig.op in CONTROL_FLOW:
                called = [sig.options.get(k) for k in CONTROL_FLOW[sig.op] if sig.options.get(k) is not None]
                per = "iteration" if sig.op == "WHILE" else "call"
                out.append(
                    self.finding(
                        "GPU505",
                        {"op": sig.op, "subgraphs": ", ".join(map(str, called)), "per": per},
                        si,
                        sig.index,
                        sig.op,
                    )
                )
        return out

    def _numerics_rules(self, graph: Graph, sigs: list[OpSignature], placed: list[Placement]) -> list[Finding]:
        """GPU7xx: half-precision overflow patterns, on ops the delegate's F16 kernels run (Core ML's
        are not the delegate's kernels)."""
        if self.target.name == "coreml":
            return []
        # An op one backend cannot build still runs on the GPU through the other (OpenCL on most phones).
        on_gpu = {
            p.index
            for p in placed
            if not p.folded
            and (p.placement == "gpu" or (p.backend_failures and len(p.backend_failures) < len(self.backends)))
        }
        hits = numerics.find(graph, sigs, on_gpu)
        return [self.finding(h.code, h.values, graph.index, h.index, h.op, h.tensors) for h in hits]

    def _subgraph_rules(self, graph: Graph, plan: SubgraphPlan) -> list[Finding]:
        out: list[Finding] = []
        si = graph.index
        if plan.delegated_partitions and plan.cpu_subsets:
            # What runs: the partitions the delegate takes, and the CPU subsets between them; a
            # supported partition it does not take runs on the CPU too (GPU109 names its ops).
            gpu, cpu = len(plan.delegated_partitions), plan.cpu_subsets
            out.append(
                self.finding(
                    "GPU601",
                    {
                        "subgraph": si,
                        "partitions": f"{gpu} delegated GPU partition{'s' * (gpu > 1)} and "
                        f"{cpu} CPU partition{'s' * (cpu > 1)}",
                        "transfers": len(plan.transfers),
                    },
                    si,
                )
            )
        if plan.verdict == "not-worth-it":
            out.append(self.finding("GPU602", {"subgraph": si, "reason": plan.reason}, si))
        if si == 0:
            for t in (graph.spec(i) for i in graph.subgraph.inputs):
                if t.rank == 4 and t.shape[3] == 3 and t.dtype in ("FLOAT32", "FLOAT16", "UINT8", "INT8"):
                    found = self.finding("GPU302", {"tensor": t.name, "shape": list(t.shape)}, si)
                    if rgba_input.refusal(graph.model, graph.subgraph, t.index):
                        found.fix = None  # offered only where the pass would apply: one predicate for both
                    out.append(found)
                if t.is_dynamic:
                    sig_shape = graph.subgraph.tensors[t.index].shape_signature
                    out.append(self.finding("GPU504", {"tensor": t.name, "signature": sig_shape}, si))
        return out

    def _model_rules(self, model: Model, graphs: list[Graph]) -> list[Finding]:
        counts: dict[str, int] = {}
        for graph in graphs:
            for i, t in enumerate(graph.subgraph.tensors):
                if t.type in ("INT8", "UINT8", "INT16") and not graph.is_const(i):
                    counts[str(t.type)] = counts.get(str(t.type), 0) + 1
        out = []
        q = {k: v for k, v in counts.items() if k != "INT16"}
        if q:
            flag = "" if self.quantized else " (and with --no-quantized the delegate refuses them)"
            out.append(self.finding("GPU501", {"count": sum(q.values()), "dtypes": "/".join(sorted(q)), "flag": flag}))
        if counts.get("INT16"):
            out.append(self.finding("GPU502", {"count": counts["INT16"]}))
        return out


def slice_waste(channels: int) -> str:
    """C channels stored as ceil(C/4) slices of 4: "C=6, 1.33x memory"."""
    return f"C={channels}, {4 * -(-channels // 4) / channels:.2f}x memory"


def find_atrous(sigs: list[OpSignature]) -> list[tuple[list[int], str, int | list[int]]]:
    """SPACE_TO_BATCH_ND -> CONV_2D / DEPTHWISE_CONV_2D -> BATCH_TO_SPACE_ND chains, each op the
    only reader of the one before, with equal block shapes: (op indices, conv op, dilation)."""
    out = []
    for s in sigs:
        if s.op != "SPACE_TO_BATCH_ND" or not s.outputs:
            continue
        readers = s.consumers(s.outputs[0])
        if len(readers) != 1 or readers[0].op not in ("CONV_2D", "DEPTHWISE_CONV_2D") or not readers[0].outputs:
            continue
        conv = readers[0]
        after = conv.consumers(conv.outputs[0])
        if len(after) != 1 or after[0].op != "BATCH_TO_SPACE_ND":
            continue
        b2s = after[0]
        block_in = s.const_values(s.inputs[1]) if len(s.inputs) > 1 else None
        block_out = b2s.const_values(b2s.inputs[1]) if len(b2s.inputs) > 1 else None
        if not block_in or block_in != block_out:
            continue
        dilation: int | list[int] = int(block_in[0]) if len(set(block_in)) == 1 else [int(b) for b in block_in]
        out.append(([s.index, conv.index, b2s.index], conv.op, dilation))
    return out


def channel_move(sig: OpSignature) -> tuple[str, str] | None:
    """A RESHAPE or TRANSPOSE that cannot keep the 4-channel slice layout: (src, dst) dims."""
    if sig.op not in ("RESHAPE", "TRANSPOSE") or not sig.inputs or not sig.outputs:
        return None
    x, y = sig.inputs[0], sig.outputs[0]
    if sig.op == "TRANSPOSE":
        perm = sig.const_values(sig.inputs[1]) if len(sig.inputs) > 1 else None
        if perm and perm[-1] != len(perm) - 1:
            return f"perm {perm}", f"{list(y.shape)}"
        return None
    if x.channels is not None and y.channels is not None and x.channels != y.channels:
        return str(list(x.shape)), str(list(y.shape))
    return None


VERDICT_ORDER = ("ready", "partial", "not-worth-it", "init-failure", "refused")


def model_verdict(plans: list[SubgraphPlan]) -> tuple[str, str]:
    """The model's verdict from its subgraphs' (the main one first)."""
    active = [p for p in plans if p.op_count]
    if not active:
        return "ready", "the model has no ops"
    refused = [p for p in active if p.verdict == "refused"]
    if refused:
        return "refused", "the interpreter refuses the GPU delegate for the whole graph: " + refused[0].reason
    failing = [p for p in active if p.verdict == "init-failure"]
    if failing:
        return "init-failure", failing[0].reason
    if all(p.verdict == "ready" for p in active):
        n = sum(p.op_count for p in active)
        return "ready", f"all {n} ops run on the GPU in one partition per subgraph"
    total = sum(p.total_macs for p in active)
    gpu = sum(p.gpu_macs for p in active)
    share = gpu / total if total else 0.0
    cpu_ops = sum(len(p.cpu_ops) for p in active)
    transfers = sum(len(p.transfers) for p in active)
    if share < 0.5:
        return "not-worth-it", (
            f"only {share:.0%} of the estimated MACs run on the GPU; {cpu_ops} ops on the CPU, "
            f"{transfers} CPU<->GPU transfers"
        )
    return "partial", (
        f"{share:.0%} of the estimated MACs run on the GPU; {cpu_ops} ops on the CPU, {transfers} CPU<->GPU transfers"
    )
