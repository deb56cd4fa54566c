"""The real GPU delegate as a test oracle: what Google's delegate does with a .tflite.

`gl_oracle(paths)` runs every file through the classic TFLite GPU delegate (OpenGL ES backend,
from the mediapipe==1.2.2 wheel, on Mesa's software GL) in a child process of the oracle venv
(`make oracle`; tests/oracle/setup.sh) and returns, per file, the node indices it delegated,
its partition count, how ModifyGraphWithDelegate ended and the delegate's own words. Results
are cached on disk by the file's sha256 (and the harness's own hash), so a warm run reads JSON.

`unavailable()` says why the oracle cannot run here (None when it can); the tests skip with it.
The child is tests/oracle/gl_child.py; both were adapted from ../shared/oracle/gl_delegate.py.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
VENV = Path(os.environ.get("GPULINT_ORACLE_VENV", REPO / ".oracle-venv"))
CACHE = Path(os.environ.get("GPULINT_ORACLE_CACHE", REPO / ".oracle-cache"))
CHILD = HERE / "gl_child.py"
PINS = "mediapipe==1.2.2"  # what gl_child.py's symbol names and struct offsets were read from
STAMP = ".oracle-ready"  # written by setup.sh when the venv imports
CHILD_TIMEOUT_BASE = 60.0  # seconds for a child to start, plus this much a model
CHILD_TIMEOUT_PER_MODEL = 30.0

REFUSAL = "Attempting to use a delegate that only supports static-sized tensors"
RE_REPLACING = re.compile(
    r"Replacing (\d+) out of (\d+) node\(s\) with delegate \(TfLiteGpuDelegate\) node, "
    r"yielding (\d+) partitions for subgraph (\d+)"
)
RE_RUN_SUMMARY = re.compile(r"^\s*(\d+ operations will run on the GPU|No operations will run on the GPU)")
LOG_NOISE = ("ATTENTION: default value of option force_gl_renderer",)
R = TypeVar("R")  # one harness's answer type


@dataclass
class OracleResult:
    """What the real delegate did with one model (primary subgraph = "0")."""

    path: str
    # ok | init-failure (delegated, then the backend failed to build: kTfLiteDelegateError)
    # | refused (the interpreter refused the delegate: a dynamic-sized tensor)
    # | crash (the child died or hung on this model) | error (the harness could not ask)
    outcome: str
    status: str = ""  # ModifyGraphWithDelegate's TfLiteStatus, by name
    # node indices per subgraph that the delegate took (on init-failure: that it asked for)
    delegated: dict[str, list[int]] = field(default_factory=dict)
    # per subgraph, the "yielding P partitions" of the delegate's log (GPU and CPU subsets)
    partitions: dict[str, int] = field(default_factory=dict)
    total_nodes: list[int] = field(default_factory=list)
    unsupported: dict[str, list[str]] = field(default_factory=dict)  # "OP: reason", per subgraph
    errors: list[str] = field(default_factory=list)  # init-failure / refusal / harness words
    log: str = ""  # this model's part of the delegate's log

    @property
    def words(self) -> str:
        """The delegate's own words, for an assertion message."""
        parts = []
        for sub, lines in sorted(self.unsupported.items()):
            if lines:
                parts.append(f"unsupported (subgraph {sub}): " + "; ".join(lines))
        if self.errors:
            parts.append("errors: " + " | ".join(self.errors))
        return "\n".join(parts) or "(the delegate said nothing)"

    def primary(self) -> set[int]:
        return set(self.delegated.get("0", []))


def unavailable() -> str | None:
    """Why the oracle cannot run here, or None."""
    py = VENV / "bin" / "python"
    if not py.exists():
        return (
            f"the oracle venv {VENV} is missing: `make oracle` makes it (root with apt-get for the "
            f"Mesa/EGL packages; pip for {PINS})"
        )
    if not (VENV / STAMP).exists():
        return f"the oracle venv {VENV} is not ready (no {STAMP}): run `make oracle`"
    if shutil.which("nm") is None:
        return "the oracle needs `nm` (binutils) to find the delegate's symbols: run `make oracle`"
    return None


def _harness_key() -> str:
    """Changes when the child, this client or the pins change, so cached answers are redone."""
    h = hashlib.sha256(PINS.encode())
    for f in (CHILD, Path(__file__)):
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def gl_oracle(paths: Sequence[str | Path], cache: Path | None = CACHE) -> dict[str, OracleResult]:
    """Each file through the real GL delegate, keyed by the path as given (str)."""
    why = unavailable()
    if why:
        raise RuntimeError(why)
    folder = cache / f"gl-{_harness_key()}" if cache is not None else None
    return cached(paths, folder, _run_child, OracleResult)


def cached(
    paths: Sequence[str | Path], folder: Path | None, run: Callable[[list[str]], dict[str, R]], load: Callable[..., R]
) -> dict[str, R]:
    """Each file's answer, keyed by the path as given: from `folder`/<sha256>.json when there,
    else from `run` (one child for every model; a new one after a model that kills it), and
    stored unless the harness could not ask (outcome "error")."""
    out: dict[str, R] = {}
    todo: list[tuple[str, str]] = []  # (path, sha)
    for p in paths:
        key, sha = str(p), _sha256(Path(p))
        hit = folder / f"{sha}.json" if folder is not None else None
        if hit is not None and hit.exists():
            out[key] = load(**{**json.loads(hit.read_text()), "path": key})
        else:
            todo.append((key, sha))
    fresh: dict[str, R] = {}
    rest = [p for p, _ in todo]
    while rest:
        fresh.update(run(rest))
        rest = [p for p in rest if p not in fresh]
    for key, sha in todo:
        res = fresh[key]
        out[key] = res
        if folder is not None and getattr(res, "outcome", "") != "error":
            folder.mkdir(parents=True, exist_ok=True)
            tmp = folder / f".{sha}.{os.getpid()}.tmp"
            tmp.write_text(json.dumps(asdict(res)))  # type: ignore[call-overload]
            tmp.replace(folder / f"{sha}.json")
    return out


@dataclass
class ChildRun:
    """One oracle child over a batch of models: its answers by model number, its fd 2, how it ended."""

    answers: dict[int, dict[str, Any]]
    stderr: str
    rc: int | None  # None: it hung and was killed
    wall: float

    @property
    def started(self) -> bool:
        return "@@ORACLE READY" in self.stderr

    def death(self) -> str:
        """How the child ended, for the model it died on."""
        if self.rc is None:
            return f"timed out after {self.wall:.0f} s"
        return f"killed by {signal.Signals(-self.rc).name}" if self.rc < 0 else f"exit status {self.rc}"


def run_child(child: Path, paths: list[str], env: dict[str, str], venv: Path | None = None) -> ChildRun:
    """`child` in the oracle venv (or `venv`), fed the model paths on stdin; it answers `@@ORACLE
    RESULT n json` on stdout and marks each model's log with `@@ORACLE BEGIN/END n` on fd 2."""
    timeout = CHILD_TIMEOUT_BASE + CHILD_TIMEOUT_PER_MODEL * len(paths)
    with tempfile.TemporaryDirectory(prefix="gpulint-oracle-") as tmp:
        fin, fout, ferr = (Path(tmp) / n for n in ("in", "out", "err"))
        fin.write_text("".join(os.path.abspath(p) + "\n" for p in paths))
        with open(fin) as i, open(fout, "w") as o, open(ferr, "w") as e:
            python = (venv or VENV) / "bin" / "python"
            proc = subprocess.Popen([str(python), str(child)], stdin=i, stdout=o, stderr=e, env=env)
            t0 = time.monotonic()
            rc: int | None
            try:
                rc = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                rc = None
        wall = time.monotonic() - t0
        stdout, stderr = fout.read_text(errors="replace"), ferr.read_text(errors="replace")
    answers: dict[int, dict[str, Any]] = {}
    for line in stdout.splitlines():
        if line.startswith("@@ORACLE RESULT "):
            _, _, n, payload = line.split(" ", 3)
            answers[int(n)] = json.loads(payload)
    return ChildRun(answers, stderr, rc, wall)


def _run_child(paths: list[str]) -> dict[str, OracleResult]:
    """Run one child over `paths`; return what it answered, and the model it died on (if any)
    as a crash. The caller runs the rest in a new child."""
    env = dict(os.environ)
    env.setdefault("EGL_PLATFORM", "surfaceless")
    env.setdefault("force_gl_renderer", "renamed-llvmpipe")  # only for MediaPipe's own GL check
    env.pop("PYTHONPATH", None)
    run = run_child(CHILD, paths, env)
    if not run.started:
        why = f"the oracle child did not start (exit status {run.rc}): {run.stderr.strip()[-2000:]}"
        return {p: OracleResult(p, "error", errors=[why], log=run.stderr[-4000:]) for p in paths}
    logs = split_log(run.stderr, LOG_NOISE)
    out: dict[str, OracleResult] = {}
    for n, path in enumerate(paths):
        if n in run.answers:
            out[path] = _result(path, run.answers[n], logs.get(n, ""))
            continue
        # the first model without an answer: it began it and died (or hung), or died before it
        how = run.death()
        last = [line for line in logs.get(n, "").splitlines() if not line.startswith("@@")][-1:]
        if last:
            how += f", after: {last[0][:200]}"
        out[path] = OracleResult(
            path, "crash", errors=[f"the delegate's process died on this model ({how})"], log=logs.get(n, "")
        )
        break
    return out


def split_log(stderr: str, noise: tuple[str, ...] = ()) -> dict[int, str]:
    """The child's fd 2, cut into each model's part by its BEGIN/END markers (lines starting
    with `noise` dropped)."""
    logs: dict[int, list[str]] = {}
    current: int | None = None
    for line in stderr.splitlines():
        if line.startswith("@@ORACLE BEGIN "):
            current = int(line.split()[2])
            logs[current] = []
        elif line.startswith("@@ORACLE END "):
            current = None
        elif current is not None and not (noise and line.startswith(noise)):
            logs[current].append(line)
    return {n: "\n".join(lines) for n, lines in logs.items()}


def _result(path: str, child: dict, log: str) -> OracleResult:
    if "modify_status" not in child:
        why = child.get("error") or child.get("outcome") or "no answer"
        return OracleResult(path, "error", errors=[f"harness: {why}"], log=log)
    status = child["modify_status"]
    errors: list[str] = []
    unsupported: dict[str, list[str]] = {}
    partitions: dict[str, int] = {}
    sub = "?"
    lines = log.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("@@ORACLE PREPARE subgraph "):
            sub = line.split()[-1]
            unsupported.setdefault(sub, [])
        elif "Following operations are not supported by GPU delegate" in line:
            i += 1
            while i < len(lines) and not RE_RUN_SUMMARY.match(lines[i]) and not lines[i].startswith("@@"):
                if lines[i].strip():
                    unsupported.setdefault(sub, []).append(lines[i].strip())
                i += 1
            continue
        elif (m := RE_REPLACING.search(line)) is not None:
            partitions[m[4]] = int(m[3])
        elif line.startswith(("ERROR: ", "WARNING: ")):
            text = line.split(": ", 1)[1]
            while i + 1 < len(lines) and lines[i + 1].startswith("  "):  # continuation lines
                i += 1
                text += " " + lines[i].strip()
            errors.append(text[:600])
        i += 1
    asked = {k: sorted(n for part in v for n in part) for k, v in child.get("asked", {}).items()}
    final = {k: sorted(n for part in v for n in part) for k, v in child.get("final", {}).items()}
    if status == "kTfLiteOk":
        outcome, delegated = "ok", final
    elif status == "kTfLiteDelegateError":
        outcome, delegated = "init-failure", asked
    elif status == "kTfLiteApplicationError" and (REFUSAL in log or not asked):
        # the interpreter checks for dynamic-sized tensors before it calls the delegate's Prepare
        outcome, delegated = "refused", {}
        if REFUSAL not in log:
            errors.append(f"{REFUSAL} (kTfLiteApplicationError before the delegate's Prepare)")
    else:
        outcome, delegated = "error", final
        errors.append(f"harness: ModifyGraphWithDelegate returned {status}")
    for k, nodes in asked.items():  # the log's count is the harness's own check on what it read
        if k in partitions and outcome != "refused":
            m = [x for x in RE_REPLACING.finditer(log) if x[4] == k]
            if m and int(m[0][1]) != len(nodes):
                outcome = "error"
                errors.append(f"harness: log says {m[0][1]} nodes replaced in subgraph {k}, read {len(nodes)}")
    return OracleResult(
        path,
        outcome,
        status=status,
        delegated={k: v for k, v in delegated.items()},
        partitions=partitions,
        total_nodes=child.get("total_nodes", []),
        unsupported=unsupported,
        errors=errors,
        log=log,
    )


if __name__ == "__main__":  # python tests/oracle/__init__.py MODEL... : print the answers
    for r in gl_oracle(sys.argv[1:], cache=None).values():
        print(json.dumps({k: v for k, v in asdict(r).items() if k != "log"}))
