"""The gl engine: the model run by the classic TFLite GPU delegate itself, `TfLiteGpuDelegate`
(the OpenGL ES compute-shader backend), as statically linked into the mediapipe wheel
(`pip install 'gpulint[gl]'`, pinned: gl_child.PIN). The GL is the machine's: a GPU driver's on a
workstation, Mesa's llvmpipe on a machine without one. This is the real runtime; the opencl
engine is gpulint's model of the same delegate.

The delegate runs in a child process (gl_child.py) started with the Python that has the wheel:
$GPULINT_GL_PYTHON, else this one. It drives the library through ctypes on non-exported symbols,
so a crash there (one MediaPipe custom op segfaults it) ends one verification with a sentence,
never gpulint. Precision: fp32 is the delegate's default (no precision loss); fp16 sets
`precision_loss_allowed`, which stores tensors in half and lets shaders compute in mediump (half
on a phone's GPU; llvmpipe computes mediump in float). It has no separate F32_F16 mode.

What ran where is the delegate's own execution plan, read after ModifyGraphWithDelegate: the
nodes its kernel replaced. The rest ran on the wheel's TFLite CPU kernels.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np

from gpulint.cache import cache_dir
from gpulint.engines.base import ChildProcess, EngineError, EngineUnavailable, part_json, plan_parts
from gpulint.engines.gl_child import PIN
from gpulint.model.ir import Model
from gpulint.text import clean

NAME = "gl"
PYTHON_ENV = "GPULINT_GL_PYTHON"  # the Python whose site-packages hold mediapipe==PIN
EXTRA = f"pip install 'gpulint[gl]' (mediapipe=={PIN})"
CHILD = Path(__file__).with_name("gl_child.py")  # run by path: the wheel's Python need not have gpulint
# A step may take this long: the first run compiles every shader on llvmpipe (up to ~30 s a model
# cold, seconds with a warm Mesa cache). A hang ends here.
STEP_LIMIT = 300.0
PRECISIONS = {"fp32": False, "fp16": True}  # gpulint's name -> precision_loss_allowed
UNSUPPORTED = "Following operations are not supported by GPU delegate"
REFUSAL = "Attempting to use a delegate that only supports static-sized tensors"
CPU_WHERE = "TFLite CPU kernels (the mediapipe wheel's interpreter)"


def python() -> str:
    return os.environ.get(PYTHON_ENV) or sys.executable


def installed() -> bool:
    """Whether the Python the engine runs has the pinned mediapipe wheel (its metadata, nothing imported)."""
    ask = "import importlib.metadata as m; print(m.version('mediapipe'))"
    try:
        out = subprocess.run([python(), "-c", ask], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return False
    return out.returncode == 0 and out.stdout.strip() == PIN


class GlEngine:
    """`GlEngine(model, path, precision, target).run(inputs)` -> the main subgraph's outputs."""

    name = NAME

    def __init__(self, model: Model, path: Path, precision: str, target: str) -> None:
        if precision not in PRECISIONS:
            raise EngineError(
                f"the GL delegate has no {precision} mode: it computes in float by default (--precision fp32) "
                "and stores in half with precision loss allowed (--precision fp16)"
            )
        self.model, self.precision, self.target = model, precision, target
        self.warnings: list[str] = []
        env = dict(os.environ)
        env.setdefault("EGL_PLATFORM", "surfaceless")  # no display needed
        env.setdefault("MESA_SHADER_CACHE_DIR", str(cache_dir() / "mesa"))
        env.pop("PYTHONPATH", None)  # the wheel's Python, with nothing of ours on its path
        symbols = cache_dir() / "gl-symbols.json"
        argv = [python(), str(CHILD), str(path), "1" if PRECISIONS[precision] else "0", str(symbols)]
        try:
            self._child = ChildProcess(argv, env, "the GL delegate", STEP_LIMIT, "gpulint-gl-")
        except OSError as e:
            raise EngineUnavailable(f"the gl engine cannot start {python()} ({e.strerror}): {EXTRA}") from None
        self._runs = 0
        try:
            answer = self._child.answer("start")
            if not answer.startswith("@@READY "):
                raise self._failure(answer)
            self.ready = json.loads(answer.removeprefix("@@READY "))
            self._placement()
        except BaseException:
            self.close()
            raise

    def log(self) -> str:
        return self._child.log()

    def info(self) -> dict[str, str]:
        renderer = self.ready.get("renderer") or "OpenGL ES (no context: the delegate took no op)"
        mode = "precision loss allowed" if PRECISIONS[self.precision] else "its default, no precision loss"
        return {
            "name": clean(renderer, 200) or "?",
            "driver": clean(self.ready.get("version") or "OpenGL ES through EGL", 200) or "?",
            "why": f"the classic TFLite GPU delegate's OpenGL backend (mediapipe {PIN} wheel), {mode}",
        }

    def _placement(self) -> None:
        total = len(self.model.subgraphs[0].operators)
        taken = sorted(int(i) for i in self.ready["delegated"] if 0 <= int(i) < total)
        self.gpu_ops = set(taken)
        where = f"GL delegate: {self.info()['name']}"
        self.parts = [
            part_json(self.model, kind, ops, where if kind == "gpu" else CPU_WHERE) for kind, ops in _runs(taken, total)
        ]
        log, status = self.log(), self.ready["modify_status"]
        said = _said(log)
        if status != "kTfLiteOk":
            what = (
                "the interpreter refused the delegate for the whole graph (a dynamic-sized tensor)"
                if REFUSAL in log
                else f"the delegate failed to initialize ({status}{': ' + said if said else ''})"
            )
            self.warnings.append(f"{what}: every op ran on the CPU")
            return
        plan, plan_gpu = plan_parts(self.model, self.target)
        # Ops in no partition of check's plan are constants the delegate folds into its own (a
        # DEQUANTIZE of fp16 weights): the delegate lists them among the nodes it replaced.
        loose = set(range(total)) - {i for _, ops in plan for i in ops}
        if set(plan_gpu) != self.gpu_ops - loose:
            refused = _unsupported(log)
            why = f" (it refused: {'; '.join(refused)})" if refused else ""
            self.warnings.append(
                f"the delegate took {len(taken)} of {total} ops where `gpulint check --target {self.target}` "
                f"plans {len(plan_gpu)}: its execution plan is right about this run{why}"
            )

    def run(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        src = self._child.folder / f"in{self._runs}.npz"
        np.savez(src, *[np.ascontiguousarray(x) for x in inputs])
        got = self._invoke(src)
        if self._runs == 1 and self.gpu_ops:
            self._repeat(src, got)
        return got

    def _repeat(self, src: Path, first: list[np.ndarray]) -> None:
        """The first inputs once more: on BirdNET's metadata model the delegate gives other numbers
        for the same inputs on each Invoke (the same sequence in every process and with one llvmpipe
        thread, so state it carries from one Invoke into the next, not a race), and a verification
        judged on one run would not show it. The first run is the one judged."""
        again = self._invoke(src)
        differ = sum(_differ(a, b) for a, b in zip(first, again, strict=True))
        if differ:
            total = sum(a.size for a in first)
            self.warnings.append(
                f"the same inputs run twice gave {differ} of {total} output values different: the delegate "
                "carries state from one run into the next (seen where it broadcasts a runtime tensor against a "
                "constant wrongly); the first run is judged"
            )

    def _invoke(self, src: Path) -> list[np.ndarray]:
        dst = self._child.folder / f"out{self._runs}.npz"
        self._runs += 1
        answer = self._child.ask(f"{src} {dst}", "run")
        if answer != "@@DONE":
            raise self._failure(answer)
        with np.load(dst) as z:
            return [z[f"arr_{i}"] for i in range(len(z.files))]

    def _failure(self, answer: str) -> Exception:
        """The sentence for a child that answered an error, or ended."""
        if answer.startswith("@@MISSING "):
            return EngineUnavailable(f"the gl engine needs mediapipe=={PIN}: {answer.removeprefix('@@MISSING ')}; "
                                     f"{EXTRA}, or set {PYTHON_ENV} to a Python that has it")  # fmt: skip
        if answer.startswith("@@ERROR "):
            said = _said(self.log())
            words = clean(answer.removeprefix("@@ERROR "), 600) or "no message"
            return EngineError(f"the GL delegate failed: {words}" + (f" ({said})" if said else ""))
        code = self._child.proc.wait()
        said = _said(self.log())
        if code < 0:
            return EngineError(
                f"the GL delegate crashed ({signal.Signals(-code).name})" + (f": {said}" if said else "")
            )
        if code > 0 and "Traceback" in self.log():  # the Python itself could not run the child (no numpy)
            last = self.log().strip().splitlines()[-1:]
            return EngineUnavailable(f"the gl engine's Python {python()} failed: {clean(' '.join(last), 300)}; {EXTRA}")
        return EngineError(f"the GL delegate ended (exit {code}): {said or 'no message'}")

    def close(self) -> None:
        self._child.close()


def _differ(a: np.ndarray, b: np.ndarray) -> int:
    """How many values of two runs' output differ (NaN and NaN are the same)."""
    same = a == b
    if a.dtype.kind == "f":
        same |= np.isnan(a) & np.isnan(b)
    return int(np.sum(~same))


def _runs(taken: list[int], total: int) -> list[tuple[str, list[int]]]:
    """The ops in order, cut where they change side: [("gpu", [0, 1]), ("cpu", [2]), ...]."""
    out: list[tuple[str, list[int]]] = []
    on = set(taken)
    for i in range(total):
        kind = "gpu" if i in on else "cpu"
        if out and out[-1][0] == kind:
            out[-1][1].append(i)
        else:
            out.append((kind, [i]))
    return out


def _unsupported(log: str) -> list[str]:
    """ "OP: reason" lines of the delegate's unsupported-op list."""
    lines = log.splitlines()
    out: list[str] = []
    for i, line in enumerate(lines):
        if UNSUPPORTED in line:
            for nxt in lines[i + 1 :]:
                if re.match(
                    r"^\s*(\d+ operations will run|No operations will run)|^(INFO|ERROR|WARNING|VERBOSE): ", nxt
                ):
                    break
                if nxt.strip():
                    out.append(clean(nxt.strip(), 300) or "?")
    return list(dict.fromkeys(out))


def _said(log: str) -> str:
    """The delegate's last error line, in its own words."""
    for line in reversed(log.splitlines()):
        if line.startswith("ERROR: ") and UNSUPPORTED not in line:
            return clean(line.removeprefix("ERROR: "), 300) or ""
    return ""
