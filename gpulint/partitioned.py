"""Run a model the way the GPU delegate would: the delegated partition on the OpenCL executor,
every other op on the LiteRT CPU interpreter.

Each partition is cut out of the main subgraph as a model of its own (the IR writer makes the
CPU ones into files for the interpreter), and the partitions run in the delegate's order with
tensors handed over by index, as the runtime hands them between delegate and interpreter.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from gpulint import reference
from gpulint.executor import Device, Executor
from gpulint.fix import clone
from gpulint.model.ir import Model
from gpulint.model.write import write
from gpulint.passes.edit import prune
from gpulint.rules import pack
from gpulint.rules.engine import Linter
from gpulint.text import clean


@dataclass
class Part:
    kind: str  # "gpu": the OpenCL executor runs it; "cpu": the LiteRT interpreter
    ops: list[int]  # op indices in the main subgraph, in execution order
    inputs: list[int]  # tensor indices it reads from outside
    outputs: list[int]  # tensor indices it hands on
    model: Model
    executor: Executor | None = None
    path: Path | None = None

    def describe(self, model: Model) -> str:
        names = [model.op_name(model.subgraphs[0].operators[i]) for i in self.ops]
        shown = ", ".join(dict.fromkeys(clean(n, 60) or "?" for n in names))  # custom op names are model text
        return f"{len(self.ops)} ops ({shown})"


@dataclass
class PartitionedRunner:
    """`PartitionedRunner(model, device).run(inputs)` -> outputs of the main subgraph."""

    model: Model
    device: Device
    precision: str = "fp32"
    target: str = "classic"
    keep_intermediates: bool = False  # for bisecting: every tensor of the executor kept readable
    parts: list[Part] = field(default_factory=list)

    def __post_init__(self) -> None:
        targets = pack.load_targets()
        if self.target not in targets:
            raise ValueError(f"unknown target {self.target!r} (known: {', '.join(sorted(targets))})")
        plan = Linter(targets[self.target], targets=targets).lint(self.model).plans[0]
        self._tmp = tempfile.TemporaryDirectory(prefix="gpulint-parts-")
        n_ops = len(self.model.subgraphs[0].operators)
        placed = {i for p in plan.partitions for i in p.ops}
        loose = [i for i in range(n_ops) if i not in placed]  # fp16 DEQUANTIZEs the delegate folds away
        if not plan.partitions:
            groups = [("cpu", list(range(n_ops)))] if n_ops else []
        else:
            groups = [("gpu" if p.delegated else "cpu", sorted(p.ops)) for p in plan.partitions]
        groups = _merge_neighbours(groups)
        for kind, ops in groups:
            part = _cut(self.model, ops, loose, kind)
            if kind == "gpu":
                part.executor = Executor(part.model, self.device, self.precision, self.keep_intermediates)
            else:
                part.path = Path(self._tmp.name, f"part{len(self.parts)}.tflite")
                write(part.model, part.path, allow_loss=True)
            self.parts.append(part)

    @property
    def whole_on_gpu(self) -> bool:
        return len(self.parts) == 1 and self.parts[0].kind == "gpu"

    def run(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
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
        return [values[t] for t in sg.outputs]

    def close(self) -> None:
        self._tmp.cleanup()


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
    inputs: list[int] = []
    for i in order:
        for t in sg.operators[i].inputs:
            tensor = sg.tensors[t] if t >= 0 else None
            if tensor is None or t in produced or t in inputs or tensor.is_variable:
                continue
            if model.tensor_data(tensor) is None:
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
