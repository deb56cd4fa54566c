"""Lint one model for one target: place every op, plan the partitions, run the detectors.

`Linter.lint` runs the steps in order, each subgraph in turn: the placer puts every op
(placer.py, from the target pack), the partition planner splits the subgraph (partition.py)
and cuts off supported ops outside the delegated partition (GPU109), the placer holds the
delegated partition to each backend's graph checks, then the registered detectors run scope
by scope (detectors/); the
model's detectors and the interpreter's refusal (GPU202, prepare.py) come last, then the verdict.
Every finding's words are its rule's message template (rules.yaml) filled with the values seen.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpulint.model.ir import Model
from gpulint.rules import detectors, pack
from gpulint.rules.detectors import Hit, ModelView, SubgraphView
from gpulint.rules.pack import Rule, Target
from gpulint.rules.partition import SubgraphPlan, plan_subgraph
from gpulint.rules.placement import MAX_NAME, MAX_REASON, Placement
from gpulint.rules.placer import Placer
from gpulint.rules.prepare import Refusal, find_refusal
from gpulint.rules.signature import Graph, OpSignature
from gpulint.text import clean

# The codes the engine's own steps give (rules.yaml: `found_by: partition` and `refusal`).
CUT_OFF = "GPU109"
REFUSED = "GPU202"


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
        self.placer = Placer(target, quantized, self.backends, targets or pack.load_targets())

    def place(self, sig: OpSignature) -> Placement:
        return self.placer.place(sig)

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
            self._cut_off(plan, placed)
            placements.extend(placed)
            for p in placed:
                for code, values in p.codes:
                    findings.append(self.finding(code, values, si, p.index, p.op))
            for code, values, index, op in self.placer.check_partition(graph, plan, placed):
                findings.append(self.finding(code, values, si, index, op))
            names = tuple(b.name for b in self.backends)
            view = SubgraphView(graph, sigs, placed, plan, self.target, len(self.backends), names)
            for scope, items in view.scopes():
                findings.extend(self._detect(scope, view, items, si))
        whole = ModelView(model, graphs, self.target, self.quantized)
        for scope, items in whole.scopes():
            findings.extend(self._detect(scope, whole, items, None))
        refusal = find_refusal(model, graphs)
        if refusal is not None:
            # Partition findings describe a split that never happens once the graph is refused, and
            # a runtime defect a GPU computation that never happens.
            defects = {code for code, rule in self.rules.items() if rule.category == "runtime-defect"}
            split = {CUT_OFF, *(d.code for d in detectors.in_scope("plan")), *defects}
            findings = [f for f in findings if f.code not in split]
            findings.append(self._refuse(refusal, placements, plans))
        verdict, reason = model_verdict(plans)
        outcomes = self._backend_outcomes(plans)
        if verdict == "init-failure" and outcomes:
            reason = self._init_failure_reason(outcomes)
        return LintResult(findings, placements, plans, verdict, reason, outcomes, refusal)

    def _cut_off(self, plan: SubgraphPlan, placed: list[Placement]) -> None:
        """Supported, but cut off from the delegated partition: such an op runs on the CPU, and
        an init-time constraint it breaks never comes into play."""
        least = self.target.min_partition_nodes
        small = {n for part in plan.gpu_partitions if len(part.ops) < least for n in part.ops}
        for p in placed:
            if p.placement != "cpu" and not p.folded and p.index not in plan.delegated:
                p.placement = "cpu"
                p.reasons = [
                    f"in a partition smaller than the delegate's minimum of {least} nodes"
                    if p.index in small
                    else "outside the delegated partition"
                ]
                p.codes = [(CUT_OFF, {"op": p.op})]
                p.backend_failures = {}

    def _detect(
        self, scope: str, view: SubgraphView | ModelView, items: Sequence[Any], si: int | None
    ) -> list[Finding]:
        """The findings of one scope's detectors: for each item, each detector in turn."""
        out: list[Finding] = []
        found = detectors.in_scope(scope)
        for item in items:
            for d in found:
                for hit in d.find(view, item):
                    out.append(self._found(d.code, hit, si))
        return out

    def _found(self, code: str, hit: Hit, si: int | None) -> Finding:
        f = self.finding(code, hit.values, si, hit.op_index, hit.op, hit.tensors)
        if not hit.fix:
            f.fix = None
        return f

    def _refuse(self, refusal: Refusal, placements: list[Placement], plans: list[SubgraphPlan]) -> Finding:
        """The interpreter refuses the delegate for the whole graph: nothing is delegated.

        Every op the delegate supports is `refused`, with the refusal as its reason; an op it does
        not support stays `cpu` with its own. An op cut off from the delegated partition is one
        the delegate supports in a partition never made: `refused` as well, where it was `cpu`
        with the same reason as its `refused` neighbours (#40 item 6)."""
        words = f"the interpreter refuses the GPU delegate for the whole graph: {refusal.message}"
        for p in placements:
            if p.folded:
                continue
            if p.placement in ("gpu", "init-failure"):
                p.placement = "refused"
                p.reasons.append(words)
            elif p.placement == "cpu" and p.codes and p.codes[0][0] == CUT_OFF:
                p.placement = "refused"
                p.reasons = [words]  # not "outside the delegated partition": no partition is made
                p.codes = []
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
        return self.finding(REFUSED, values, refusal.subgraph, refusal.op_index, refusal.op, [refusal.tensor])

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
