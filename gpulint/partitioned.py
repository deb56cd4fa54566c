"""Run a model the way the GPU delegate would: the delegated partition on the OpenCL executor,
every other op on the LiteRT CPU interpreter.

Each partition is cut out of the main subgraph as a model of its own (the IR writer makes the
CPU ones into files for the interpreter), and the partitions run in the delegate's order with
tensors handed over by index, as the runtime hands them between delegate and interpreter.

An op the delegate would run but the executor has no lowering for runs on the interpreter
instead, with a warning: its GPU partition is split around it (ops keep their order, so every
piece still reads only what earlier pieces made). The run then checks less of the GPU side,
and says so, rather than checking nothing.
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from gpulint import reference
from gpulint.executor import Device, DeviceError, Executor, ExecutorError, Unlowered
from gpulint.model.ir import Model, clone
from gpulint.model.write import write
from gpulint.passes.edit import prune
from gpulint.rules import pack
from gpulint.rules.engine import Linter
from gpulint.rules.partition import SubgraphPlan
from gpulint.text import clean


def main_plan(model: Model, target: str, settings: Mapping[str, Any] | None = None) -> SubgraphPlan:
    """check's plan of the main subgraph for `target` (with its `settings`, e.g. the LiteRT release):
    which ops the delegate takes, in which partitions."""
    targets = pack.load_targets()
    if target not in targets:
        raise ValueError(f"unknown target {target!r} (known: {', '.join(sorted(targets))})")
    chosen = pack.configure(targets[target], settings) if settings else targets[target]
    return Linter(chosen, targets=targets).lint(model).plans[0]


@dataclass
class Part:
    kind: str  # "gpu": the OpenCL executor runs it; "cpu": the LiteRT interpreter
    ops: list[int]  # op indices in the main subgraph, in execution order
    inputs: list[int]  # tensor indices it reads from outside
    outputs: list[int]  # tensor indices it hands on
    model: Model
    executor: Executor | None = None
    path: Path | None = None
    moved: list[str] = field(default_factory=list)  # why ops the delegate would run are here instead

    def describe(self, model: Model) -> str:
        moved = f"; moved from the GPU side, the executor cannot run {'; '.join(self.moved)}" if self.moved else ""
        return ops_summary(model, self.ops) + moved


def ops_summary(model: Model, ops: list[int]) -> str:
    """ "3 ops (CONV_2D, ADD)": how many, and which kinds in order of first use."""
    names = [model.op_name(model.subgraphs[0].operators[i]) for i in ops]
    shown = ", ".join(dict.fromkeys(clean(n, 60) or "?" for n in names))  # custom op names are model text
    return f"{len(ops)} ops ({shown})"


@dataclass
class PartitionedRunner:
    """`PartitionedRunner(model, device).run(inputs)` -> outputs of the main subgraph."""

    model: Model
    device: Device
    precision: str = "fp32"
    target: str = "classic"
    keep_intermediates: bool = False  # for bisecting: every tensor of the executor kept readable
    parts: list[Part] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # ops moved to the CPU side, and why

    def __post_init__(self) -> None:
        if self.model.unknown:
            # Each part is written as a model of its own, which would drop what the schema does not know
            # (int4 blockwise quantization, say): the parts would compute something else.
            raise ExecutorError(
                "the model uses fields the installed schema does not know, which cutting it into partitions would "
                f"drop: {'; '.join(self.model.unknown[:2])}"
                + (f" (and {len(self.model.unknown) - 2} more)" if len(self.model.unknown) > 2 else "")
            )
        plan = main_plan(self.model, self.target)
        self._tmp = tempfile.TemporaryDirectory(prefix="gpulint-parts-")
        n_ops = len(self.model.subgraphs[0].operators)
        placed = {i for p in plan.partitions for i in p.ops}
        loose = [i for i in range(n_ops) if i not in placed]  # fp16 DEQUANTIZEs the delegate folds away
        built: list[Part] = []
        moved: dict[int, str] = {}  # op -> why the executor cannot run it
        pending = plan_groups(plan, n_ops)
        while pending:
            kind, ops = pending.pop(0)
            part = _cut(self.model, ops, loose, kind)
            if kind == "gpu":
                try:
                    part.executor = Executor(part.model, self.device, self.precision, self.keep_intermediates)
                except DeviceError:
                    raise
                except ExecutorError as e:
                    out = self._unlowered(ops, e)
                    moved.update(out)
                    pending[:0] = _split(ops, set(out))
                    continue
            built.append(part)
        for part in _merge_cpu(built, self.model, loose):
            part.moved = [moved[i] for i in part.ops if i in moved]
            if part.kind == "cpu":
                part.path = Path(self._tmp.name, f"part{len(self.parts)}.tflite")
                write(part.model, part.path, allow_loss=True)
            self.parts.append(part)
        self.warnings = [
            f"op {i} {moved[i]}: runs on the LiteRT CPU interpreter here, though the delegate runs it on the GPU"
            for i in sorted(moved)
        ]

    def _unlowered(self, ops: list[int], error: ExecutorError) -> dict[int, str]:
        """The ops of GPU partition `ops` the executor could not lower, each with its reason;
        every op of the partition where the error names none of them."""
        sg = self.model.subgraphs[0]
        named = {}
        if isinstance(error, Unlowered):
            for outputs, name, reason in error.ops:
                i = next(
                    (i for i in ops if [sg.tensors[t].name or "" for t in sg.operators[i].outputs] == outputs), None
                )
                if i is None:
                    break
                named[i] = f"{name} ({reason})" if reason != name else name
            else:
                return named
        return {i: f"{self.model.op_name(sg.operators[i])} ({error})" for i in ops}

    @property
    def whole_on_gpu(self) -> bool:
        return len(self.parts) == 1 and self.parts[0].kind == "gpu"

    def run(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        return self.outputs(self.tensors(inputs))

    def outputs(self, values: dict[int, np.ndarray]) -> list[np.ndarray]:
        """The graph's outputs from one run's tensors (`tensors`)."""
        return [values[t] if t in values else self._unmade(t) for t in self.model.subgraphs[0].outputs]

    def _unmade(self, t: int) -> np.ndarray:
        """A graph output no part makes: a constant's value, as the interpreter gives it back."""
        tensor = self.model.subgraphs[0].tensors[t]
        value = self.model.tensor_data(tensor)
        if value is None:
            raise ExecutorError(f"output `{clean(tensor.name, 80)}` is neither computed by an op nor a constant")
        return np.array(value)

    def tensors(self, inputs: list[np.ndarray]) -> dict[int, np.ndarray]:
        """One run: the graph inputs and every tensor a part hands on, by index."""
        sg = self.model.subgraphs[0]
        values: dict[int, np.ndarray] = dict(zip(sg.inputs, inputs, strict=True))
        for part in self.parts:
            feed = [values[t] for t in part.inputs]
            if part.executor is not None:
                got = part.executor.run(feed)
            else:
                assert part.path is not None
                got = reference.run(part.path, feed)
            values.update(zip(part.outputs, got, strict=True))
        return values

    def close(self) -> None:
        self._tmp.cleanup()


def plan_groups(plan: SubgraphPlan, n_ops: int) -> list[tuple[str, list[int]]]:
    """check's partitions as (kind, ops) in run order, adjacent CPU ones as one interpreter run;
    every op on the CPU where the plan has no partition."""
    if not plan.partitions:
        return [("cpu", list(range(n_ops)))] if n_ops else []
    return _merge_neighbours([("gpu" if p.delegated else "cpu", sorted(p.ops)) for p in plan.partitions])


def _merge_neighbours(groups: list[tuple[str, list[int]]]) -> list[tuple[str, list[int]]]:
    """Adjacent CPU partitions become one interpreter run: the interpreter has no partition
    boundary between them either."""
    out: list[tuple[str, list[int]]] = []
    for kind, ops in groups:
        if out and out[-1][0] == kind == "cpu":
            out[-1] = (kind, out[-1][1] + ops)
        else:
            out.append((kind, ops))
    return out


def _split(ops: list[int], out: set[int]) -> list[tuple[str, list[int]]]:
    """A GPU partition's ops as runs in their order: those in `out` on the CPU, the rest on the GPU."""
    runs: list[tuple[str, list[int]]] = []
    for i in sorted(ops):
        kind = "cpu" if i in out else "gpu"
        if runs and runs[-1][0] == kind:
            runs[-1][1].append(i)
        else:
            runs.append((kind, [i]))
    return runs


def _merge_cpu(parts: list[Part], model: Model, loose: list[int]) -> list[Part]:
    """Adjacent CPU parts (an op moved off the GPU next to a CPU partition) as one."""
    out: list[Part] = []
    for part in parts:
        if out and out[-1].kind == part.kind == "cpu":
            out[-1] = _cut(model, out[-1].ops + part.ops, loose, "cpu")
        else:
            out.append(part)
    return out


def _cut(model: Model, ops: list[int], loose: list[int], kind: str) -> Part:
    """The ops as a model of their own, reading what they need from outside as inputs."""
    sg = model.subgraphs[0]
    members = set(ops)
    reads = {t for i in ops for t in sg.operators[i].inputs}
    for i in loose:  # a folded constant op goes with each partition that reads it
        if reads & set(sg.operators[i].outputs):
            members.add(i)
    order = sorted(members)
    produced = {t for i in order for t in sg.operators[i].outputs}
    # What a part can be handed: a graph input or what another part makes. Any other tensor it
    # reads (a constant, an empty one included, or one nothing writes) stays in the part as it is.
    handed = set(sg.inputs) | {t for op in sg.operators for t in op.outputs}
    inputs: list[int] = []
    for i in order:
        for t in sg.operators[i].inputs:
            if t < 0 or t in produced or t in inputs or sg.tensors[t].is_variable:
                continue
            if t in handed and not model.is_constant(sg.tensors[t]):
                inputs.append(t)
    read_outside = {t for j, op in enumerate(sg.operators) if j not in members for t in op.inputs}
    outputs = [t for i in order for t in sg.operators[i].outputs if t in read_outside or t in sg.outputs]
    sub = clone(model)
    ssg = sub.subgraphs[0]
    ssg.operators = [ssg.operators[i] for i in order]
    ssg.inputs, ssg.outputs = list(inputs), list(outputs)
    sub.signature_defs = []
    prune(sub)
    return Part(kind, [i for i in ops], inputs, outputs, sub)
