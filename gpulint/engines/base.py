"""What every engine is: a module that runs a model on given inputs at a precision and says what
ran where. verify, bench and bisect take an engine; the comparator and the partition plan stay one
each (gpulint.compare, check's plan through partitioned.main_plan)."""

from __future__ import annotations

import selectors
import subprocess
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from gpulint.model.ir import Model
from gpulint.partitioned import main_plan, ops_summary, plan_groups


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


def plan_parts(
    model: Model, target: str, settings: Mapping[str, Any] | None = None
) -> tuple[list[tuple[str, list[int]]], list[int]]:
    """check's partition plan of the main subgraph for `target` (with its `settings`), as (kind, ops)
    in order (adjacent CPU partitions together), and the delegated ops."""
    plan = main_plan(model, target, settings)
    groups = plan_groups(plan, len(model.subgraphs[0].operators))
    return groups, sorted(i for p in plan.partitions if p.delegated for i in p.ops)


def part_json(model: Model, kind: str, ops: list[int], ran_on: str) -> dict[str, Any]:
    return {"kind": kind, "ran_on": ran_on, "ops": list(ops), "summary": ops_summary(model, ops)}


def gpu_op_count(parts: list[dict[str, Any]]) -> int:
    """How many ops ran on the GPU side, from an engine's parts."""
    return sum(int(p.get("op_count", len(p["ops"]))) for p in parts if p["kind"] == "gpu")


class ChildProcess:
    """An engine's child process (the GL delegate's, the accelerator's: either may abort its process,
    which must end one verification with a sentence, not gpulint): its temporary folder, its stderr
    in a log file there, the line protocol (a request on stdin, an answer starting "@@" on stdout),
    and a hang past `limit` seconds a step killed. `who` names it in messages."""

    def __init__(self, argv: list[str], env: dict[str, str], who: str, limit: float, prefix: str) -> None:
        self.who, self.limit = who, limit
        self._tmp = tempfile.TemporaryDirectory(prefix=prefix)
        self.folder = Path(self._tmp.name)
        self._log_path = self.folder / "log.txt"
        self._log = self._log_path.open("w+b")
        try:
            self.proc = subprocess.Popen(
                argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log, text=True, env=env
            )
        except OSError:
            self._log.close()
            self._tmp.cleanup()
            raise

    def log(self) -> str:
        return self._log_path.read_bytes().decode(errors="replace")

    def ask(self, request: str, step: str) -> str:
        """Send one request line; the answer to it."""
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(request + "\n")
            self.proc.stdin.flush()
        except OSError:
            pass  # the child is gone: the answer is "" and the engine says how it ended
        return self.answer(step)

    def answer(self, step: str) -> str:
        """The child's next protocol line, or "" at its end (a crash); a hang past the limit kills it:
        "`who` did not finish its `step` within ..."."""
        assert self.proc.stdout is not None
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        deadline = time.monotonic() + self.limit
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                self.proc.kill()
                raise EngineError(f"{self.who} did not finish its {step} within {self.limit:.0f} s")
            if sel.select(timeout=min(left, 5.0)):
                line = self.proc.stdout.readline()
                if line.startswith("@@") or not line:
                    return line.rstrip("\n")

    def close(self) -> None:
        """End the child (its stdin closed, killed if it does not end in 30 s) and remove the folder."""
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            try:
                self.proc.stdin.close()
                self.proc.wait(timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._log.close()
        self._tmp.cleanup()
