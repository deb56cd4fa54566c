"""What every engine is: a module that runs a model on given inputs at a precision and says what
ran where. verify, bench and bisect take an engine; the comparator and the partition plan stay one
each (gpulint.compare, check's plan through partitioned.main_plan)."""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from gpulint.model.ir import Model
from gpulint.partitioned import main_plan
from gpulint.text import clean


class EngineError(RuntimeError):
    """The engine could not run the model (a crash, a refusal, a mode it does not have)."""


class EngineUnavailable(EngineError):
    """The engine cannot run on this machine at all (no adapter, no driver)."""


class Engine(Protocol):
    name: str  # "opencl" | "litert-gpu"
    precision: str
    warnings: list[str]  # ops that ran elsewhere than the plan says, and why
    parts: list[dict[str, Any]]  # {kind, ran_on, ops, summary[, op_count]}, in run order
    gpu_ops: set[int]  # the main subgraph's ops that ran on the GPU side

    def info(self) -> dict[str, str]:
        """name, driver, and why this device ran the model"""
        ...

    def run(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        """The main subgraph's outputs, in order."""
        ...

    def close(self) -> None: ...


def plan_parts(model: Model, target: str) -> tuple[list[tuple[str, list[int]]], list[int]]:
    """check's partition plan of the main subgraph for `target`, as (kind, ops) in order (adjacent
    CPU partitions together), and the delegated ops."""
    plan = main_plan(model, target)
    groups: list[tuple[str, list[int]]] = []
    for p in plan.partitions:
        kind = "gpu" if p.delegated else "cpu"
        if groups and groups[-1][0] == kind == "cpu":  # one interpreter run, as partitioned.py runs them
            groups[-1][1].extend(sorted(p.ops))
        else:
            groups.append((kind, sorted(p.ops)))
    if not groups and model.subgraphs[0].operators:
        groups = [("cpu", list(range(len(model.subgraphs[0].operators))))]
    return groups, sorted(i for p in plan.partitions if p.delegated for i in p.ops)


def part_json(model: Model, kind: str, ops: list[int], ran_on: str) -> dict[str, Any]:
    names = [model.op_name(model.subgraphs[0].operators[i]) for i in ops]
    shown = ", ".join(dict.fromkeys(clean(n, 60) or "?" for n in names))  # custom op names are model text
    return {"kind": kind, "ran_on": ran_on, "ops": list(ops), "summary": f"{len(ops)} ops ({shown})"}


def gpu_op_count(parts: list[dict[str, Any]]) -> int:
    """How many ops ran on the GPU side, from an engine's parts."""
    return sum(int(p.get("op_count", len(p["ops"]))) for p in parts if p["kind"] == "gpu")
