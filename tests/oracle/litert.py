"""LiteRT's GPU accelerator as a test oracle: what it does with a .tflite.

`litert_oracle(paths)` compiles every file with LiteRT's `CompiledModel` API (GPU, then CPU) in
a child process of the oracle venv (`make oracle-webgpu`; tests/oracle/setup.sh --webgpu), which
loads the WebGPU accelerator of ai-edge-litert==2.3.0 (ML Drift on Dawn) on Mesa's lavapipe
Vulkan, and returns per file how the compile ended, how many nodes the accelerator took, and its
own words. The accelerator's log is all there is to read: it names no node indices and no
partition count, so the comparison is on the count of delegated nodes ("N operations will run
on the GPU") and on the unsupported-op list. Answers are cached on disk by the file's sha256 and
the harness's own hash, beside the GL oracle's.

`unavailable()` says why the oracle cannot run here (None when it can); the tests skip with it.
The child is tests/oracle/litert_child.py; both were adapted from ../shared/oracle/litert_gpu.py.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gpulint.model import read
from oracle import CACHE, VENV, cached, run_child, split_log

HERE = Path(__file__).resolve().parent
CHILD = HERE / "litert_child.py"
PINS = "ai-edge-litert==2.3.0"  # the accelerator whose log lines the parser below reads
# LiteRT 2.4's accelerator (check's `--litert-version 2.4`), in a venv of its own beside the oracle's
# (tests/oracle/setup_litert24.sh, run by `make oracle-webgpu`); its log reads like 2.3's.
NIGHTLY_PINS = "ai-edge-litert-nightly==2.4.0.dev20261026"
NIGHTLY_VENV = Path(os.environ.get("GPULINT_ORACLE_LITERT24_VENV", VENV.parent / ".oracle-litert24-venv"))
STAMP = ".oracle-webgpu-ready"  # written by setup.sh --webgpu once Mesa >= 24 is there

# The interpreter itself cannot build or prepare the model (no kernel for an op version, a CPU
# kernel's own Prepare check, an unresolved custom op): the accelerator's answer is unknown.
NOT_BUILT = (
    "Didn't find op for builtin opcode",
    "Encountered unresolved custom op",
    "Failed to build TFL interpreter",
)
RE_NODE_PREPARE = re.compile(r"Node number \d+ \((.+?)\) failed to prepare")
DELEGATE_NODE = "LITERT_WEBGPU"  # the accelerator's kernel node (delegate_webgpu.cc 593)
REFUSAL = "Attempting to use a delegate that only supports static-sized tensors"
UNSUPPORTED = "Following operations are not supported by GPU delegate"
RE_SUMMARY = re.compile(
    r"^\s*(?:(\d+) operations will run on the GPU, and the remaining (\d+) operations"
    r"|No operations will run on the GPU, and all (\d+) operations)"
)
RE_LOG_HEAD = re.compile(r"^(INFO|ERROR|WARNING|VERBOSE): |^[IWEF]\d{4} ")


@dataclass
class LiteRtResult:
    """What LiteRT's GPU accelerator did with one model (its primary subgraph)."""

    path: str
    # ok (compiled with the accelerator) | refused (the interpreter refused the delegate: a
    # dynamic-sized tensor) | init-failure (the compile failed otherwise) | crash | error
    outcome: str
    delegated: int | None = None  # nodes the accelerator took; None when it could not be read
    total: int | None = None  # nodes of the primary subgraph, from the log's summary when it has one
    # (taken, nodes) of every subgraph the accelerator did not take whole, in log order, one entry
    # per subgraph (a loop body logs its summary each time it is prepared: repeats merged).
    summaries: list[tuple[int, int]] = field(default_factory=list)
    unsupported: list[str] = field(default_factory=list)  # "OP: reason", as the accelerator logged them
    fully_accelerated: bool | None = None
    ran: str | None = None  # with GPULINT_ORACLE_INVOKE=1: "ok" or "error: ..."
    errors: list[str] = field(default_factory=list)
    log: str = ""

    @property
    def words(self) -> str:
        parts = []
        if self.unsupported:
            parts.append("unsupported: " + "; ".join(self.unsupported))
        if self.errors:
            parts.append("errors: " + " | ".join(self.errors))
        return "\n".join(parts) or "(the accelerator said nothing)"


def unavailable(venv: Path = VENV, pins: str = PINS) -> str | None:
    """Why the LiteRT oracle (of `venv`, with `pins`) cannot run here, or None."""
    py = venv / "bin" / "python"
    if not py.exists() or not (venv / STAMP).exists():
        return (
            f"LiteRT's WebGPU accelerator is not set up in {venv}: `make oracle-webgpu` sets it up (root with "
            f"apt-get: Mesa >= 24 lavapipe from bookworm-backports; pip: {pins})"
        )
    return None


def _harness_key(pins: str) -> str:
    h = hashlib.sha256(pins.encode())
    h.update(os.environ.get("GPULINT_ORACLE_INVOKE", "0").encode())
    for f in (CHILD, Path(__file__)):
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


def litert_oracle(
    paths: Sequence[str | Path], cache: Path | None = CACHE, venv: Path = VENV, pins: str = PINS
) -> dict[str, LiteRtResult]:
    """Each file through LiteRT's GPU accelerator (the release `pins` installed in `venv`), keyed by
    the path as given (str)."""
    why = unavailable(venv, pins)
    if why:
        raise RuntimeError(why)
    folder = cache / f"litert-{_harness_key(pins)}" if cache is not None else None
    return cached(paths, folder, lambda todo: _run_child(todo, venv), LiteRtResult)


def _run_child(paths: list[str], venv: Path = VENV) -> dict[str, LiteRtResult]:
    """One child over `paths`: what it answered, and the model it died on (if any) as a crash."""
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    run = run_child(CHILD, paths, env, venv)
    if not run.started:
        why = f"the LiteRT oracle child did not start (exit status {run.rc}): {run.stderr.strip()[-2000:]}"
        return {p: LiteRtResult(p, "error", errors=[why], log=run.stderr[-4000:]) for p in paths}
    logs = split_log(run.stderr)
    out: dict[str, LiteRtResult] = {}
    for n, path in enumerate(paths):
        if n in run.answers:
            out[path] = parse(path, run.answers[n], logs.get(n, ""))
            continue
        out[path] = LiteRtResult(
            path, "crash", errors=[f"the accelerator's process died on this model ({run.death()})"]
        )
        break
    return out


def parse(path: str, child: dict[str, Any], log: str) -> LiteRtResult:
    """The child's answer and the model's part of the log, in the oracle's terms."""
    res = LiteRtResult(path, "ok", log=log, fully_accelerated=child.get("fully_accelerated"), ran=child.get("ran"))
    lines = log.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if UNSUPPORTED in line:
            i += 1
            while i < len(lines) and not RE_SUMMARY.match(lines[i]) and not RE_LOG_HEAD.match(lines[i]):
                if lines[i].strip():
                    res.unsupported.append(lines[i].strip())
                i += 1
            continue
        if (m := RE_SUMMARY.match(line)) is not None:
            summary = (0, int(m[3])) if m[3] is not None else (int(m[1]), int(m[1]) + int(m[2]))
            if not res.summaries or res.summaries[-1] != summary:
                res.summaries.append(summary)
        i += 1
    # The interpreter hands the delegate its subgraphs in index order (tflite/core/interpreter.cc,
    # ModifyGraphWithDelegateImpl), so the first summary is the primary subgraph's, unless the
    # primary was taken whole (no summary): then the first one counts another subgraph's nodes.
    primary_nodes = len(read(path).subgraphs[0].operators)
    if res.summaries and res.summaries[0][1] == primary_nodes:
        res.delegated, res.total = res.summaries[0]
    if REFUSAL in log:
        res.outcome = "refused"
        res.delegated = 0
        res.errors.append(next(x for x in lines if REFUSAL in x).split(": ", 1)[-1])
    elif not child.get("compiled") and (
        any(x in log for x in NOT_BUILT) or any(m[1] != DELEGATE_NODE for m in RE_NODE_PREPARE.finditer(log))
    ):
        res.outcome = "error"
        words = [
            x for x in lines if any(w in x for w in NOT_BUILT) or RE_NODE_PREPARE.search(x) or "tflite/kernels" in x
        ]
        res.errors.append("the interpreter cannot build or prepare this model on the CPU: " + " | ".join(words[:3]))
    elif not child.get("compiled") and not child.get("once_flags"):
        res.outcome = "error"  # a refusal logs once per process: without the flags it cannot be told apart
        res.errors.append("harness: the compile failed and the refusal log's once-flags were not found")
    elif not child.get("compiled"):
        res.outcome = "init-failure"
        res.errors.append(str(child.get("error", "the compile failed")))
        res.errors += [x.split("] ", 1)[-1] for x in lines if x.startswith("ERROR: ") and UNSUPPORTED not in x][:5]
    if res.total is None:
        res.total = primary_nodes
    if res.delegated is None and res.outcome in ("ok", "init-failure"):
        # No summary: the accelerator took every node (it logs only when some stay on the CPU,
        # before it builds them: an init failure logs it too).
        res.delegated = res.total
    return res


if __name__ == "__main__":  # cd tests && python -m oracle.litert MODEL... : print the answers
    for r in litert_oracle(sys.argv[1:], cache=None).values():
        print(json.dumps({k: v for k, v in asdict(r).items() if k != "log"}))
