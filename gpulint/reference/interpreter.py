"""The parent's side of the child process: a model run on the LiteRT interpreter in a child
under memory and time limits (outputs, every tensor, a second CPU opinion), and a crash or
refusal turned into one ReferenceError sentence."""

from __future__ import annotations

import importlib.util
import os
import re
import resource
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gpulint.reference.child import ALL_TENSORS, FLAGS, NOISE, NUDGED
from gpulint.reference.errors import ReferenceError
from gpulint.text import clean

# The child gets at most this much address space: a model that claims huge tensors fails to
# allocate there instead of taking the machine's memory (pose_detection runs in well under it).
CHILD_MEMORY = 1 << 30


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (CHILD_MEMORY, CHILD_MEMORY))


def time_limit(model_paths: Sequence[str | os.PathLike[str]]) -> float:
    """Seconds a run may take: 5 plus 1 per MB of model. The corpus runs in under 0.5 s; a
    hostile file (a WHILE loop that never ends) is stopped instead of hanging gpulint."""
    size = sum(os.path.getsize(p) for p in model_paths if os.path.exists(p))
    return 5.0 + size / 1e6


def run(model_path: str | os.PathLike[str], inputs: list[np.ndarray], timeout: float | None = None) -> list[np.ndarray]:
    """Outputs of the main subgraph, in order, from the LiteRT CPU interpreter."""
    return run_models([model_path], inputs, timeout)[0]


def run_all_tensors(
    model_path: str | os.PathLike[str], inputs: list[np.ndarray], timeout: float | None = None
) -> dict[str, np.ndarray]:
    """Every tensor the interpreter holds after one run, by name (for bisecting a divergence)."""
    with tempfile.TemporaryDirectory(prefix="gpulint-ref-") as tmp:
        dst = Path(tmp, "all.npz")
        _child_run([ALL_TENSORS, model_path], [dst], inputs, timeout)
        with np.load(dst) as z:
            return {k: z[k] for k in z.files}


def run_all_tensors_with_noise(
    model_path: str | os.PathLike[str], inputs: list[np.ndarray], timeout: float | None = None
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Every tensor after one run, and every tensor after a run on the inputs moved one ulp each
    (one child). The interpreter keeps its tensors only on its builtin kernels, so the second
    CPU opinion for intermediates is the nudge: a rounding-sized change at the input, grown
    through the network as its own rounding is (see run_with_noise)."""
    with tempfile.TemporaryDirectory(prefix="gpulint-ref-") as tmp:
        dsts = [Path(tmp, "all.npz"), Path(tmp, "nudged.npz")]
        _child_run([ALL_TENSORS, model_path, ALL_TENSORS, NUDGED, model_path], dsts, inputs, timeout)
        loaded = []
        for dst in dsts:
            with np.load(dst) as z:
                loaded.append({k: z[k] for k in z.files})
        return loaded[0], loaded[1]


def run_models(
    model_paths: Sequence[str | os.PathLike[str]], inputs: list[np.ndarray], timeout: float | None = None
) -> list[list[np.ndarray]]:
    """Run several models on the same inputs in one child process (one interpreter start)."""
    with tempfile.TemporaryDirectory(prefix="gpulint-ref-") as tmp:
        dsts = [Path(tmp, f"out{i}.npz") for i in range(len(model_paths))]
        _child_run(list(model_paths), dsts, inputs, timeout)
        return [_outputs(dst) for dst in dsts]


@dataclass
class Noisy:
    """A model's outputs on XNNPACK, and a second CPU opinion on the same inputs."""

    outputs: list[np.ndarray]
    second: list[np.ndarray]
    probe: str  # how the second opinion was made


def run_with_noise(
    model_paths: Sequence[str | os.PathLike[str]], inputs: list[np.ndarray], timeout: float | None = None
) -> list[Noisy]:
    """Each model on XNNPACK (the interpreter's default) and on its builtin kernels, in one
    child process. Where the builtin kernels refuse a model (a custom op only XNNPACK has, as
    selfie_segmentation's Convolution2DTransposeBias), the second opinion is XNNPACK on the
    inputs moved by one ulp each: a rounding-sized change at the input, amplified by the
    network as its own rounding is."""
    with tempfile.TemporaryDirectory(prefix="gpulint-ref-") as tmp:
        dsts = [Path(tmp, f"out{i}.npz") for i in range(len(model_paths))]
        args: list[str | os.PathLike[str]] = []
        for path in model_paths:
            args += [NOISE, path]
        _child_run(args, dsts, inputs, timeout)
        out = []
        for dst in dsts:
            second = dst.with_suffix(".second.npz")
            with np.load(second) as z:
                probe = str(z["probe"])
            out.append(Noisy(_outputs(dst), _outputs(second), probe))
        return out


def _outputs(dst: Path) -> list[np.ndarray]:
    with np.load(dst) as z:
        return [z[f"arr_{i}"] for i in range(len([k for k in z.files if k.startswith("arr_")]))]


def _child_run(
    model_args: Sequence[str | os.PathLike[str]], dsts: list[Path], inputs: list[np.ndarray], timeout: float | None
) -> None:
    """`model_args`: model paths, each optionally preceded by flags (ALL_TENSORS, NOISE, NUDGED)."""
    model_paths = [m for m in model_args if m not in FLAGS]
    limit = timeout if timeout is not None else time_limit(model_paths)
    names = ", ".join(dict.fromkeys(map(str, model_paths)))
    with tempfile.TemporaryDirectory(prefix="gpulint-ref-") as tmp:
        src = Path(tmp, "in.npz")
        np.savez(src, *inputs)
        args: list[str] = []
        out = iter(dsts)
        for a in model_args:
            args += [str(a)] if a in FLAGS else [str(a), str(next(out))]
        spawn([str(src), *args], limit, names)


# `pip install gpulint` leaves the runtime out; its `verify` extra (pyproject.toml) brings it.
NO_RUNTIME = "the LiteRT CPU interpreter is not installed (ai-edge-litert): pip install 'gpulint[verify]'"


def runtime_installed() -> bool:
    """Whether this Python has ai-edge-litert, looked up without importing it."""
    try:
        return importlib.util.find_spec("ai_edge_litert") is not None
    except (ImportError, ValueError):
        return False


def spawn(args: list[str], limit: float, names: str) -> None:
    """`python -m gpulint.reference ARGS` under the memory and time limits; a hang, a crash or a
    refusal becomes a ReferenceError, and so does a light install without the interpreter."""
    if not runtime_installed():
        raise ReferenceError(NO_RUNTIME)
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "gpulint.reference", *args],
            capture_output=True,
            text=True,
            timeout=limit,
            preexec_fn=_limit_memory if sys.platform == "linux" else None,
        )
    except subprocess.TimeoutExpired:
        raise ReferenceError(f"the LiteRT interpreter did not finish {names} within {limit:.0f} s") from None
    if proc.returncode < 0:
        raise ReferenceError(f"the LiteRT interpreter crashed ({signal.Signals(-proc.returncode).name}) on {names}")
    if proc.returncode != 0:
        raise ReferenceError(f"the LiteRT interpreter cannot run {names}: {interpreter_message(proc.stderr)}")


# LiteRT's error reporter appends each message to the last without a separator: a kernel's check
# ("gather.cc:166 cond was not true."), its own text, then "Node number N (OP) failed to invoke.".
_NODE = re.compile(r"Node number (\d+) \(([^)]*)\) failed to (\w+)\.?")
_CHECK = re.compile(r"(\S+\.cc:\d+) (.*?) was not true\.")
_SEE = re.compile(r"See instructions: \S+")


def interpreter_message(stderr: str) -> str:
    """One sentence from the child's stderr: the last exception's text (all its lines), split
    where LiteRT ran its messages together. "GATHER (node 0) failed to invoke: gather index out
    of bounds (gather.cc:166: indices_has_only_positive_elements)"."""
    lines = [ln.rstrip() for ln in stderr.strip().splitlines() if ln.strip()]
    start = max((k for k, ln in enumerate(lines) if re.match(r"^[A-Za-z_.]*(Error|Exception)\b", ln)), default=None)
    text = " ".join(lines[start:] if start is not None else lines[-1:]) or "?"
    text = re.sub(r"^[A-Za-z_.]*(Error|Exception): ", "", text)
    text = _SEE.sub("", text)
    node = _NODE.search(text)
    if node is not None:
        text = (text[: node.start()] + " " + text[node.end() :]).strip()
    check = _CHECK.search(text)
    where = ""
    if check is not None:
        where = f"{check.group(1)}: {check.group(2)}"
        text = (text[: check.start()] + " " + text[check.end() :]).strip()
    text = re.sub(r"\s+", " ", text).strip().rstrip(".")
    text = text or (f"check failed at {where}" if where else "")
    if where and not text.startswith("check failed"):
        text += f" ({where})"
    if node is not None:
        text = f"{node.group(2)} (node {node.group(1)}) failed to {node.group(3)}" + (f": {text}" if text else "")
    return clean(text, 600) or "?"
