"""The litert-gpu engine: the model run by LiteRT's own GPU accelerator, the `CompiledModel` GPU
path phones get with LiteRT 2.x (ML Drift; in the ai-edge-litert wheel on WebGPU through Dawn:
Vulkan on a workstation's GPU, Mesa's lavapipe on a machine without one).

The accelerator runs in a child process (litert_child.py): it aborts the process on some graphs,
and that must end one verification with a sentence, not gpulint. Precision, from ML Drift's
source and measured (docs/guides/engines.md, "LiteRT's GPU accelerator"): `enforce_f32` computes in
float (gpulint's fp32); its default computes in half, products and the conv/FC sums included
(the delegate's F16, gpulint's fp16), with MEAN and SOFTMAX in float. It has no F32_F16 mode.

What ran where comes from the accelerator's log, the only place it says so: "N operations will
run on the GPU, and the remaining M operations will run on the CPU", the unsupported-op list, or
the interpreter's refusal of the whole graph (a dynamic-sized tensor). The log names no op
indices: the partitions shown are check's plan for `--target litert-gpu` where the counts agree,
and where they do not the run says so (the count in the log wins).
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
from pathlib import Path

import numpy as np

from gpulint.cache import cache_dir
from gpulint.engines.base import ChildProcess, EngineError, EngineUnavailable, part_json, plan_parts
from gpulint.model.ir import Model
from gpulint.text import clean

NAME = "litert-gpu"
TARGET = "litert-gpu"  # check's rules for this runtime
# A step (compile, one run) may take this long: the first run on lavapipe compiles every shader,
# 8-65 s a model with an empty Mesa cache, 113 s measured under load. A hang ends here.
STEP_LIMIT = 300.0
PRECISIONS = {"fp32": True, "fp16": False}  # gpulint's name -> enforce_f32
CHILD = "gpulint.engines.litert_child"  # the module the child runs (a test puts a crashing one here)

RE_SUMMARY = re.compile(
    r"(?:(\d+) operations will run on the GPU, and the remaining (\d+) operations"
    r"|No operations will run on the GPU, and all (\d+) operations)"
)
RE_ADAPTER = re.compile(r"Selected adapter: (.*?), arch=.*?vendor=(\S*?), backend=(\w+)")
UNSUPPORTED = "Following operations are not supported by GPU delegate"
REFUSAL = "Attempting to use a delegate that only supports static-sized tensors"
NO_ADAPTER = ("Failed to initialize WebGPU environment", "No adapters found", "VK_ERROR_INCOMPATIBLE_DRIVER")


def mesa_cache() -> Path:
    """Mesa's shader cache, inside gpulint's cache folder: a CI job that keeps one folder keeps
    both (the first run of a model on lavapipe is mostly shader compilation)."""
    return cache_dir() / "mesa"


class LiteRtGpuEngine:
    """`LiteRtGpuEngine(model, path, precision).run(inputs)` -> the outputs of the main subgraph."""

    name = NAME

    def __init__(self, model: Model, path: Path, precision: str) -> None:
        if precision not in PRECISIONS:
            raise EngineError(
                f"LiteRT's GPU accelerator has no {precision} mode: it computes in float with enforce_f32 "
                "(--precision fp32) and in half otherwise (--precision fp16)"
            )
        self.model = model
        self.precision = precision
        self.warnings: list[str] = []
        env = dict(os.environ)
        env.setdefault("MESA_SHADER_CACHE_DIR", str(mesa_cache()))
        argv = [sys.executable, "-m", CHILD, str(path), "1" if PRECISIONS[precision] else "0"]
        self._child = ChildProcess(argv, env, "LiteRT's GPU accelerator", STEP_LIMIT, "gpulint-litert-")
        self._runs = 0
        try:
            answer = self._child.answer("compile")
            if not answer.startswith("@@COMPILED "):
                raise self._failure(answer)
            self._signature = json.loads(answer.removeprefix("@@COMPILED "))
            self._placement()
        except BaseException:
            self.close()
            raise

    # What the accelerator said about itself and the graph -------------------------------------

    def log(self) -> str:
        return self._child.log()

    def info(self) -> dict[str, str]:
        found = RE_ADAPTER.search(self.log())
        name = found.group(1) if found else "WebGPU adapter (not named in the log)"
        driver = f"WebGPU on {found.group(3)} ({found.group(2)})" if found else "WebGPU"
        mode = "enforce_f32" if PRECISIONS[self.precision] else "its default half precision"
        return {
            "name": clean(name, 200) or "?",
            "driver": clean(driver, 200) or "?",
            "why": f"LiteRT's GPU accelerator (ai-edge-litert {_litert_version()}, ML Drift), {mode}",
        }

    def _placement(self) -> None:
        log = self.log()
        total = len(self.model.subgraphs[0].operators)
        plan, plan_gpu = plan_parts(self.model, TARGET, {"litert_version": installed_release()})
        # Ops in no partition of check's plan: constants the delegate folds (a DEQUANTIZE of fp16
        # weights). The accelerator's summary line does not count them; where it takes the whole
        # graph it writes no summary, and they are part of the whole.
        loose = total - sum(len(ops) for _, ops in plan)
        if REFUSAL in log:
            taken: int | None = 0
            self.warnings.append(
                "the interpreter refused the accelerator for the whole graph (a dynamic-sized tensor): "
                "every op ran on the CPU"
            )
        elif (m := RE_SUMMARY.search(log)) is not None:
            taken = int(m.group(1)) if m.group(1) is not None else 0
        else:
            taken = None  # no summary: the accelerator took the whole graph
        self.unsupported = _unsupported(log)
        self.gpu_op_count = total if taken is None else taken
        where = f"LiteRT GPU accelerator: {self.info()['name']}"
        agrees = len(plan_gpu) + loose == total if taken is None else taken == len(plan_gpu)
        self.disagreement: str | None = None  # the warning below, where the log and check's plan differ
        if agrees:
            self.parts = [part_json(self.model, kind, ops, where if kind == "gpu" else CPU_WHERE) for kind, ops in plan]
            self.gpu_ops = set(range(total)) if taken is None else set(plan_gpu)
            return
        shown = "the whole graph" if taken is None else f"{taken} of {total - loose} ops"
        if not taken:  # the whole graph one way or the other: every index is known
            kind = "gpu" if taken is None else "cpu"
            self.parts = [part_json(self.model, kind, list(range(total)), where if kind == "gpu" else CPU_WHERE)]
            self.gpu_ops = set(range(total)) if taken is None else set()
        else:  # the log names no indices: the counts alone
            refused = f"{total - loose - taken} ops"
            refused += f" (refused: {'; '.join(self.unsupported)})" if self.unsupported else ""
            self.parts = [
                {"kind": "gpu", "ran_on": where, "ops": [], "op_count": taken, "summary": f"{taken} ops"},
                {"kind": "cpu", "ran_on": CPU_WHERE, "ops": [], "op_count": total - loose - taken, "summary": refused},
            ]
            self.gpu_ops = set(plan_gpu)
        why = f" (it refused: {'; '.join(self.unsupported)})" if self.unsupported else ""
        self.disagreement = (
            f"the accelerator took {shown} where `gpulint check --target {TARGET}` plans {len(plan_gpu)}: its "
            f"log is right about this run{why}"
        )
        self.warnings.append(self.disagreement)

    # Running ------------------------------------------------------------------------------------

    def run(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        src, dst = self._child.folder / f"in{self._runs}.npz", self._child.folder / f"out{self._runs}.npz"
        self._runs += 1
        order = self._input_order()
        np.savez(src, *[np.ascontiguousarray(inputs[i]) for i in order])
        answer = self._child.ask(f"{src} {dst}", "run")
        if answer != "@@DONE":
            raise self._failure(answer)
        with np.load(dst) as z:
            got = [z[f"arr_{i}"] for i in range(len(z.files))]
        return [got[i] for i in self._output_order()]

    def _input_order(self) -> list[int]:
        """For each of the signature's inputs, the position of its tensor among the subgraph's inputs."""
        return _positions(self.model, self._signature["inputs"], "inputs")

    def _output_order(self) -> list[int]:
        """For each of the subgraph's outputs, its position among the signature's outputs."""
        sig_pos = _positions(self.model, self._signature["outputs"], "outputs")
        return [sig_pos.index(k) for k in range(len(sig_pos))]

    def _failure(self, answer: str) -> Exception:
        """The sentence for a child that answered an error, or ended."""
        log = self.log()
        if any(words in log for words in NO_ADAPTER):
            return EngineUnavailable(
                "LiteRT's GPU accelerator found no WebGPU adapter: it needs a Vulkan driver (a GPU's, or Mesa >= 24 "
                "lavapipe on a machine without one: `make oracle-webgpu`); --engine opencl runs without one"
            )
        if answer.startswith("@@ERROR "):
            words = re.sub(r"(ERROR|WARNING): \[[^\]]*\]|└", " ", answer.removeprefix("@@ERROR "))
            words = " ".join(words.split()) or "no message"
            if REFUSAL in log:  # CompiledModel has no CPU fallback for a graph the interpreter refuses
                words += (
                    ": the interpreter refused the accelerator for the whole graph (a dynamic-sized tensor), which "
                    "fails the compile; `gpulint fix --input-shape` makes the shapes static"
                )
            return EngineError(f"LiteRT's GPU accelerator failed: {clean(words, 600)}")
        code = self._child.proc.wait()
        if code < 0:
            last = _last_error(log)
            return EngineError(
                f"LiteRT's GPU accelerator crashed ({signal.Signals(-code).name})" + (f": {last}" if last else "")
            )
        return EngineError(f"LiteRT's GPU accelerator ended (exit {code}): {_last_error(log) or 'no message'}")

    def close(self) -> None:
        self._child.close()


CPU_WHERE = "LiteRT CPU (the accelerator's fallback)"


def _positions(model: Model, names: list[str], which: str) -> list[int]:
    """The position among the subgraph's inputs (or outputs) of each signature name: through the
    model's signature def where it has one, else by tensor name (LiteRT's placeholder signature)."""
    sg = model.subgraphs[0]
    listed = sg.inputs if which == "inputs" else sg.outputs
    by_key: dict[str, int] = {}
    for sd in model.signature_defs or []:
        if sd.subgraph_index == 0:
            for tm in sd.inputs if which == "inputs" else sd.outputs:
                if tm.name is not None:
                    by_key[tm.name] = tm.tensor_index
    by_name = {sg.tensors[t].name: t for t in listed}
    out = []
    for name in names:
        t = by_key.get(name, by_name.get(name))
        if t is None or t not in listed:
            raise EngineError(f"the accelerator's signature names {which[:-1]} {name!r}, which the model does not list")
        out.append(listed.index(t))
    if sorted(out) != list(range(len(listed))):
        raise EngineError(f"the accelerator's signature does not list the model's {which} one to one")
    return out


def _unsupported(log: str) -> list[str]:
    """ "OP: reason" lines of the accelerator's unsupported-op list."""
    lines = log.splitlines()
    out: list[str] = []
    for i, line in enumerate(lines):
        if UNSUPPORTED in line:
            for nxt in lines[i + 1 :]:
                if RE_SUMMARY.search(nxt) or re.match(r"^(INFO|ERROR|WARNING|VERBOSE): |^[IWEF]\d{4} ", nxt):
                    break
                if nxt.strip():
                    out.append(clean(nxt.strip(), 300) or "?")
    return list(dict.fromkeys(out))


def _last_error(log: str) -> str:
    """The accelerator's last error line (its own words), if it wrote one."""
    for line in reversed(log.splitlines()):
        s = line.strip()
        if re.match(r"^(E\d{4}|F\d{4}|ERROR:|Check failed|terminate called|RuntimeError)", s) or "Check failed" in s:
            return clean(re.sub(r"^[EF]\d{4} [\d:. ]+\d+ ", "", s), 300) or ""
    return ""


def _litert_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    for dist in ("ai-edge-litert", "ai-edge-litert-nightly"):  # the nightly installs the same module
        try:
            return version(dist)
        except PackageNotFoundError:
            continue
    return "?"


def installed_release() -> str:
    """The litert-gpu release check models for the ai-edge-litert here: its major.minor where
    `--litert-version` has it, else the default (2.3)."""
    from gpulint.settings import LITERT_VERSIONS

    release = ".".join(_litert_version().split(".")[:2])
    return release if release in LITERT_VERSIONS else LITERT_VERSIONS[0]
