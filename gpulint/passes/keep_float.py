"""keep-in-float: what is left past half's range once the half-precision passes have run, and the
user's two ways to keep it in float (issue #39's fallback). Not a rewrite: neither GPU runtime has
a per-op precision, so the choice is the runtime's, and this says what each costs.

- the whole graph in float: the classic delegate's `is_precision_loss_allowed = 0` (or
  `inference_priority1 = MAX_PRECISION`, `TfLiteGpuDelegateOptionsV2`,
  tensorflow/lite/delegates/gpu/delegate_options.cc); LiteRT's GPU accelerator's precision FP32
  (`LiteRtSetGpuAcceleratorCompilationOptionsPrecision`, litert/c/options/litert_gpu_options.h:
  one precision for the compiled graph; no option there names an op). `gpulint verify
  --precision fp32` runs it that way on both engines.
- the op on the CPU: the graph splits around it, and the classic delegate takes only its
  `max_delegated_partitions` largest GPU subsets (default 1): the cost is the ops that leave the
  GPU with it, which check's partitioner counts here. LiteRT's accelerator has no option to leave
  one op out.

An op counts when its result on the calibration inputs (`fix --inputs`, the CPU interpreter, in
float) passes 65504 while none of the float values it reads does: the first op of each chain to
leave half's range. Kept in float with it must be every op downstream that still makes a value past
the range, and every op that reads one (a GPU op would read it in half: Inf), until the chain is
back in range: for attention, Q.K^T's BATCH_MATMUL, its scale's MUL and the SOFTMAX.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gpulint.model.ir import Model
from gpulint.rules.numerics import HALF_MAX


@dataclass
class Overflow:
    op: int  # in the main subgraph
    name: str  # the op's name, e.g. BATCH_MATMUL
    tensor: str  # its output that left half's range
    value: float  # the largest |value| it reached on the calibration inputs
    chain: list[int]  # the ops to keep in float with it: itself, what still overflows after it, their readers
    names: list[str]  # the chain's op names
    gpu_ops: tuple[int, int, int] | None = None  # classic plan: GPU ops now, with the chain on the CPU, all ops

    def describe(self) -> str:
        head = f"{self.name} (op {self.op}) reaches {self.value:.3g} in `{self.tensor}`, past half's 65504"
        if len(self.chain) > 1:
            rest = ", ".join(f"{n} (op {i})" for i, n in zip(self.chain[1:], self.names[1:], strict=True))
            head += f", and {rest} after it {'reads' if len(self.chain) == 2 else 'read or make'} such values"
        whole = (
            "keep the whole graph in float (classic delegate: is_precision_loss_allowed = 0; LiteRT's "
            "accelerator: precision FP32; check with gpulint verify --precision fp32)"
        )
        if self.gpu_ops is None:
            cpu = "or run these ops on the CPU (the classic delegate does not take them now)"
        else:
            now, after, total = self.gpu_ops
            cpu = (
                f"or run {'these ops' if len(self.chain) > 1 else 'this op'} on the CPU (classic delegate, one GPU "
                f"partition: {after} of {total} ops on the "
                f"GPU instead of {now}; LiteRT's accelerator has no per-op option)"
            )
        return f"{head}; no pass keeps it in half: {whole}, {cpu}"


def first_overflows(model: Model, tensors: dict[str, np.ndarray], limit: float = HALF_MAX) -> list[Overflow]:
    """The ops of the main subgraph whose float result passes `limit` (half's range) while their
    float inputs do not."""
    sg = model.subgraphs[0]

    def peak(t: int) -> float | None:
        v = tensors.get(sg.tensors[t].name or "") if t >= 0 else None
        if v is None or v.dtype != np.float32 or v.size == 0:
            return None
        finite = v[np.isfinite(v)]
        return float(np.max(np.abs(finite), initial=0.0)) if finite.size == v.size else float("inf")

    readers: dict[int, list[int]] = {}
    for oi, op in enumerate(sg.operators):
        for t in op.inputs:
            if t >= 0:
                readers.setdefault(t, []).append(oi)

    def over(t: int) -> bool:
        p = peak(t)
        return p is not None and p > limit

    found = []
    for oi, op in enumerate(sg.operators):
        outs = [t for t in op.outputs if over(t)]
        if not outs or any(over(t) for t in op.inputs):
            continue
        chain, todo = {oi}, list(outs)
        while todo:  # every reader of a value past the range, and on through what they make past it
            for r in readers.get(todo.pop(), []):
                if r not in chain:
                    chain.add(r)
                    todo += [t for t in sg.operators[r].outputs if over(t)]
        t = max(outs, key=lambda x: peak(x) or 0.0)
        ordered = sorted(chain)
        names = [model.op_name(sg.operators[i]) for i in ordered]
        found.append(Overflow(oi, model.op_name(op), sg.tensors[t].name or "?", peak(t) or 0.0, ordered, names))
    return found


def cpu_cost(model: Model, ops: list[int]) -> tuple[int, int, int] | None:
    """Classic delegate, its default one partition: ops on the GPU now, with `ops` on the CPU, and in all;
    None where check's plan does not put them on the GPU."""
    from gpulint.rules import pack
    from gpulint.rules.engine import Linter
    from gpulint.rules.partition import split
    from gpulint.rules.signature import Graph

    targets = pack.load_targets()
    plan = Linter(targets["classic"], targets=targets).lint(model).plans[0]  # check's plan of the main subgraph
    if not set(ops) & plan.delegated:
        return None
    nodes = sorted(plan.delegated | set(plan.cpu_ops))
    parts = split(Graph.of(model, 0), nodes, plan.delegated - set(ops))
    largest = max((len(p.ops) for p in parts if p.kind == "gpu"), default=0)
    return len(plan.delegated), largest, len(nodes)


def peaks(model: Model, input_sets: list[list[np.ndarray]]) -> dict[str, np.ndarray]:
    """Each float32 tensor's largest |value| over every input set on the CPU interpreter, as a
    one-value array (Inf where a value was NaN/Inf): what first_overflows reads, for several sets."""
    from gpulint import reference
    from gpulint.model.write import write

    out: dict[str, np.ndarray] = {}
    with tempfile.TemporaryDirectory(prefix="gpulint-keep-float-") as tmp:
        path = Path(tmp, "m.tflite")
        write(model, path, allow_loss=True)
        for inputs in input_sets:
            for name, v in reference.run_all_tensors(path, inputs).items():
                if v.dtype != np.float32 or v.size == 0:
                    continue
                top = float(np.max(np.abs(v))) if np.all(np.isfinite(v)) else float("inf")
                out[name] = np.array([max(top, float(out[name][0]) if name in out else 0.0)], np.float32)
    return out


# The half-precision passes, in the pipeline's order: what a value past half's range may be fixed by.
HALF_PASSES = ("scale-logits", "scaled-variance", "split-reduction", "stable-softmax")


def fixing_passes(
    model: Model, found: list[tuple[Overflow, float]], input_sets: list[list[np.ndarray]]
) -> dict[int, str]:
    """For each (overflow, the limit it passed), by op: the first half-precision pass after which,
    on the same inputs and calibrated by them, its tensor stays below that limit and nothing new
    passes it: measured, not guessed from the chain's shape. One no pass fixes is left out."""
    from gpulint.model.ir import clone
    from gpulint.passes import PassOptions, registry

    tensors = peaks(model, input_sets)
    calibration = tuple((n, float(v[0])) for n, v in tensors.items() if np.isfinite(v[0]))
    limits = sorted({limit for _, limit in found})
    before = {limit: {o.tensor for o in first_overflows(model, tensors, limit)} for limit in limits}
    out: dict[int, str] = {}
    for name in HALF_PASSES:
        todo = [(o, limit) for o, limit in found if o.op not in out]
        rewritten = clone(model)
        if not todo or not registry()[name].run(rewritten, PassOptions(calibration=calibration)).changes:
            continue
        now = peaks(rewritten, input_sets)
        after = {limit: {o.tensor for o in first_overflows(rewritten, now, limit)} for limit in limits}
        for o, limit in todo:
            if o.tensor not in after[limit] and after[limit] <= before[limit]:
                out[o.op] = name
    return out


def overflows(model: Model, inputs: list[np.ndarray]) -> list[Overflow]:
    """What is past half's range in `model` on `inputs`, with the cost of each op on the CPU."""
    from gpulint import reference
    from gpulint.model.write import write

    with tempfile.TemporaryDirectory(prefix="gpulint-keep-float-") as tmp:
        path = Path(tmp, "m.tflite")
        write(model, path)
        tensors = reference.run_all_tensors(path, inputs)
    found = first_overflows(model, tensors)
    for o in found:
        o.gpu_ops = cpu_cost(model, o.chain)
    return found
