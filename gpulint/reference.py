"""The reference: the LiteRT CPU interpreter, run in a child process.

The interpreter is not hardened against malformed files (some crash it with SIGSEGV), so it
never runs in gpulint's own process: a child loads the model, feeds the inputs from an .npz,
and writes the outputs to another. A crash or a refusal comes back as ReferenceError.
"""

from __future__ import annotations

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
from typing import Any

import numpy as np

from gpulint.model.ir import NUMPY_DTYPES, Model, Operator, Subgraph, Tensor
from gpulint.text import clean


class ReferenceError(RuntimeError):
    """The interpreter refused or crashed on the model."""


def random_inputs(model: Model, seed: int = 0, distribution: str = "uniform") -> list[np.ndarray]:
    """Seeded inputs for the main subgraph: uniform [-1, 1) or standard normal floats, quantized
    through the input's scale for quantized inputs, other integers inside the range the graph
    implies (integer_range)."""
    rng = np.random.default_rng(seed)
    sg = model.subgraphs[0]
    out = []
    for i in sg.inputs:
        t = sg.tensors[i]
        shape = [d if d > 0 else 1 for d in t.shape]
        dtype = NUMPY_DTYPES.get(t.type) if isinstance(t.type, str) else None
        if dtype is None:
            raise ReferenceError(f"input {t.name!r} has type {t.type}, which gpulint cannot generate")
        if dtype.kind == "f":
            values = rng.standard_normal(shape) if distribution == "normal" else rng.uniform(-1, 1, shape)
            out.append(values.astype(dtype))
        elif dtype.kind == "b":
            out.append(rng.integers(0, 2, shape).astype(dtype))
        elif t.quantization is not None and t.quantization.scale and len(t.quantization.scale) == 1:
            # A quantized input: the float distribution, quantized as the model's own quantizer
            # would, so activations stay inside the ranges it was calibrated for.
            q, info = t.quantization, np.iinfo(dtype)
            assert q.scale is not None
            values = rng.standard_normal(shape) if distribution == "normal" else rng.uniform(-1, 1, shape)
            zp = q.zero_point[0] if q.zero_point else 0
            out.append(np.clip(np.round(values / q.scale[0]) + zp, info.min, info.max).astype(dtype))
        else:
            r = integer_range(model, i)
            out.append(rng.integers(r.low, r.high + 1, shape).astype(dtype))
    return out


# -- integer inputs: the range the graph implies --------------------------------------------------

# Ops that hand an integer tensor on with its values unchanged: op -> the input slot that carries
# the values (None: every input, as CONCATENATION and PACK). A CAST keeps the values too.
PASS_THROUGH: dict[str, int | None] = {
    "RESHAPE": 0,
    "SQUEEZE": 0,
    "EXPAND_DIMS": 0,
    "CAST": 0,
    "TRANSPOSE": 0,
    "SLICE": 0,
    "STRIDED_SLICE": 0,
    "TILE": 0,
    "BROADCAST_TO": 0,
    "UNPACK": 0,
    "SPLIT": 1,
    "SPLIT_V": 0,
    "CONCATENATION": None,
    "PACK": None,
}
UNKNOWN_HIGH = 3  # an integer input no op bounds: small non-negative values, safe as indices and counts


@dataclass
class IntRange:
    low: int
    high: int  # inclusive
    source: str  # what implies the range; "" where nothing does


def integer_range(model: Model, input_tensor: int) -> IntRange:
    """The values an integer input of the main subgraph may take, from the ops that read it
    (through ops that pass values on unchanged): indices into a GATHER / GATHER_ND /
    EMBEDDING_LOOKUP table lie in [0, rows), ONE_HOT indices in [0, depth). The kernels reject
    an index out of range (gather.cc, embedding_lookup.cc in LiteRT's tflite/kernels), so random
    values outside it make the reference fail before anything is compared."""
    sg = model.subgraphs[0]
    readers: dict[int, list[tuple[int, int]]] = {}
    for oi, op in enumerate(sg.operators):
        for slot, t in enumerate(op.inputs):
            readers.setdefault(t, []).append((oi, slot))
    bounds: list[tuple[int, str]] = []
    seen, todo = {input_tensor}, [input_tensor]
    while todo:
        t = todo.pop()
        for oi, slot in readers.get(t, []):
            op = sg.operators[oi]
            name = model.op_name(op)
            if name in PASS_THROUGH and PASS_THROUGH[name] in (None, slot):
                for out in op.outputs:
                    if out >= 0 and out not in seen:
                        seen.add(out)
                        todo.append(out)
                continue
            bound = _index_bound(model, op, name, slot)
            if bound is not None:
                bounds.append((bound[0], f"{bound[1]} (op {oi})"))
    bounds = [b for b in bounds if b[0] > 0]
    if not bounds:
        return IntRange(0, UNKNOWN_HIGH, "")
    n, why = min(bounds)
    return IntRange(0, n - 1, why)


def _index_bound(model: Model, op: Any, name: str, slot: int) -> tuple[int, str] | None:
    """How many values an op's input `slot` may index, and what says so; None: not an index."""
    sg = model.subgraphs[0]

    def shape(k: int) -> list[int]:
        return sg.tensors[op.inputs[k]].shape if len(op.inputs) > k and op.inputs[k] >= 0 else []

    opts = op.builtin_options.values if op.builtin_options is not None else {}
    if name == "GATHER" and slot == 1 and shape(0):
        axis = int(opts.get("axis", 0) or 0)
        axis += len(shape(0)) if axis < 0 else 0
        if 0 <= axis < len(shape(0)):
            return shape(0)[axis], f"indices into GATHER's table of {shape(0)[axis]} along axis {axis}"
    if name == "EMBEDDING_LOOKUP" and slot == 0 and shape(1):
        return shape(1)[0], f"ids into EMBEDDING_LOOKUP's table of {shape(1)[0]} rows"
    if name == "GATHER_ND" and slot == 1 and shape(0) and shape(1) and shape(1)[-1] > 0:
        dims = shape(0)[: shape(1)[-1]]
        return min(dims), f"indices into GATHER_ND's table of shape {shape(0)}"
    if name == "ONE_HOT" and slot == 0 and len(op.inputs) > 1:
        depth = model.tensor_data(sg.tensors[op.inputs[1]])
        if depth is not None and np.asarray(depth).size == 1:
            return int(np.asarray(depth).ravel()[0]), f"ONE_HOT indices of depth {int(np.asarray(depth).ravel()[0])}"
    return None


def integer_inputs(model: Model) -> list[dict[str, Any]]:
    """For each integer input random_inputs draws (not quantized, not bool): its range and why,
    or a note that nothing in the graph says, pointing at --inputs."""
    sg = model.subgraphs[0]
    out = []
    for i in sg.inputs:
        t = sg.tensors[i]
        dtype = NUMPY_DTYPES.get(t.type) if isinstance(t.type, str) else None
        if dtype is None or dtype.kind not in "iu":
            continue
        if t.quantization is not None and t.quantization.scale and len(t.quantization.scale) == 1:
            continue
        r = integer_range(model, i)
        note = r.source or "no op of the model says what range it takes; give real values with --inputs FILE.npz"
        out.append({"input": clean(t.name, 200), "low": r.low, "high": r.high, "source": r.source, "note": note})
    return out


def adapt_inputs(inputs: list[np.ndarray], model: Model, seed: int) -> list[np.ndarray]:
    """Inputs for a model whose inputs grew channels (rgba-input): the extra lanes are noise.
    Returns `inputs` itself when nothing grew."""
    rng = np.random.default_rng(seed + 1000)
    sg = model.subgraphs[0]
    out = []
    for x, t in zip(inputs, sg.inputs, strict=True):
        want = sg.tensors[t].shape
        if len(want) == x.ndim and want[-1] > x.shape[-1]:
            extra = rng.uniform(-1, 1, (*x.shape[:-1], want[-1] - x.shape[-1])).astype(x.dtype)
            x = np.concatenate([x, extra], axis=-1)
        out.append(x)
    return inputs if all(a is b for a, b in zip(out, inputs, strict=True)) else out


# -- dynamic-range (hybrid) models -----------------------------------------------------------

QUANTIZED_WEIGHTS = ("INT8", "UINT8", "INT16")


def hybrid_ops(model: Model) -> list[int]:
    """Ops of the main subgraph that LiteRT runs with hybrid kernels: a float activation in, a
    quantized constant (a dynamic-range int8 weight) beside it, a float result. Those kernels
    quantize the activation to int8 on the fly; the GPU delegate dequantizes the weight once and
    computes in float."""
    sg = model.subgraphs[0]
    found = []
    for index, op in enumerate(sg.operators):
        if model.op_name(op) in ("DEQUANTIZE", "QUANTIZE"):
            continue
        ins = [sg.tensors[t] for t in op.inputs if t >= 0]
        consts = [t for t in ins if model.tensor_data(t) is not None]
        runtime = [t for t in ins if model.tensor_data(t) is None]
        quantized = [
            t for t in consts if t.type in QUANTIZED_WEIGHTS and t.quantization is not None and t.quantization.scale
        ]
        outs = [sg.tensors[t].type for t in op.outputs if t >= 0]
        if quantized and any(t.type == "FLOAT32" for t in runtime) and outs and all(o == "FLOAT32" for o in outs):
            found.append(index)
    return found


def float_twin(model: Model, ops: Sequence[int] | None = None) -> Model:
    """`model` with the quantized constant weights of its hybrid ops (or of `ops`, those of them
    the delegate runs) dequantized to float32 (per tensor or per channel, as the delegate
    dequantizes them): the same graph, computed in float where the GPU computes it. Changes
    `model` in place and returns it; tensor names stay, so intermediates still match."""
    sg = model.subgraphs[0]
    made: dict[int, int] = {}
    for index in hybrid_ops(model) if ops is None else ops:
        op = sg.operators[index]
        for k, t in enumerate(op.inputs):
            tensor = sg.tensors[t] if t >= 0 else None
            if tensor is None or tensor.type not in QUANTIZED_WEIGHTS or model.tensor_data(tensor) is None:
                continue
            op.inputs[k] = _dequantized_const(model, sg, t, made)
    return model


def _dequantized_const(model: Model, sg: Subgraph, t: int, made: dict[int, int]) -> int:
    """The float32 copy of quantized constant `t`, made once per tensor (`made`); `t` itself
    where it cannot be dequantized."""
    from gpulint.passes.edit import add_const, dequantize

    if t not in made:
        value = dequantize(model, sg.tensors[t])
        if value is None:
            return t
        made[t] = add_const(model, sg, f"{sg.tensors[t].name}/dequantized", value)
    return made[t]


# -- full-int8 models ----------------------------------------------------------------------------

INT8_ACTIVATIONS = ("INT8", "UINT8")  # the types the delegate's PopulateQuantParams reads (model_builder_helper.cc)
QUANTIZED_CONSTANTS = ("INT8", "UINT8", "INT16", "INT32")  # weights and biases the delegate dequantizes once


def _int8_activation(model: Model, t: int) -> bool:
    """A runtime int8/uint8 tensor with one scale: a value the delegate holds in float and
    rounds to its grid."""
    if t < 0:
        return False
    tensor = model.subgraphs[0].tensors[t]
    q = tensor.quantization
    return (
        tensor.type in INT8_ACTIVATIONS
        and model.tensor_data(tensor) is None
        and q is not None
        and q.scale is not None
        and len(q.scale) == 1
    )


def int8_ops(model: Model) -> list[int]:
    """Ops of the main subgraph that LiteRT runs with integer kernels: an int8/uint8 activation
    in or out. A DEQUANTIZE (exact) and a QUANTIZE of a float tensor (the rounding itself) are
    not among them: the interpreter and the delegate do the same there."""
    sg = model.subgraphs[0]
    found = []
    for index, op in enumerate(sg.operators):
        name = model.op_name(op)
        reads = any(_int8_activation(model, t) for t in op.inputs)
        writes = any(_int8_activation(model, t) for t in op.outputs)
        if name == "DEQUANTIZE" or (name == "QUANTIZE" and not reads):
            continue
        if reads or writes:
            found.append(index)
    return found


def fake_quant_twin(model: Model, ops: Sequence[int] | None = None) -> Model:
    """`model` with its int8 ops (or those of `ops` that are int8 ops: the ones the delegate
    runs) computed as the GPU delegate computes them: in float, on weights and biases
    dequantized once, each int8 result rounded to its tensor's grid and clamped to its range.

    The delegate's graph builder gives every int8 runtime tensor a float value with its
    quantization parameters, and its add_quant_adjustments transformation puts a
    QUANTIZE_AND_DEQUANTIZE after every op that writes one (tensorflow/lite/delegates/gpu/
    common/transformations/add_quant_adjustments.cc; the kernel clamps to [min, max] and rounds,
    tasks/quantize_and_dequantize.cc). Here each such op writes a float tensor that a QUANTIZE
    rounds into the original int8 tensor (name, scale and zero point kept, so intermediates
    still match by name), and an op computed in float reads an int8 tensor through a
    DEQUANTIZE. Ops left out keep their integer kernels and read and write the int8 tensors
    as before, as a CPU partition does beside the delegate. The rounding differs from the
    delegate's only on exact halves (the interpreter's QUANTIZE rounds them away from zero,
    the delegate's kernel up). Changes `model` in place and returns it."""
    sg = model.subgraphs[0]
    chosen = set(int8_ops(model))
    if ops is not None:
        chosen &= set(ops)
    if not chosen:
        return model
    to_float = model.opcode_index("DEQUANTIZE", 2)  # version 2: int8 input (op_version.cc)
    to_int8 = model.opcode_index("QUANTIZE", 2)

    def float_tensor(t: int, suffix: str) -> int:
        old = sg.tensors[t]
        signature = list(old.shape_signature) if old.shape_signature is not None else None
        sg.tensors.append(Tensor(f"{old.name}/{suffix}", list(old.shape), "FLOAT32", shape_signature=signature))
        return len(sg.tensors) - 1

    as_float: dict[int, int] = {}  # int8 activation -> its DEQUANTIZE, made once before its first float reader
    consts: dict[int, int] = {}  # quantized constant -> its dequantized float32 copy (shared constants stay)
    order: list[Operator] = []
    for index, op in enumerate(sg.operators):
        if index not in chosen:
            order.append(op)
            continue
        for k, t in enumerate(op.inputs):
            if t < 0:
                continue
            tensor = sg.tensors[t]
            if _int8_activation(model, t):
                if t not in as_float:
                    as_float[t] = float_tensor(t, "dequantized")
                    order.append(Operator(to_float, [t], [as_float[t]]))
                op.inputs[k] = as_float[t]
            elif tensor.type in QUANTIZED_CONSTANTS and model.tensor_data(tensor) is not None:
                op.inputs[k] = _dequantized_const(model, sg, t, consts)
        order.append(op)
        if model.op_name(op) == "QUANTIZE":  # a requantization: now a rounding of the float value
            continue
        for k, t in enumerate(op.outputs):
            if _int8_activation(model, t):
                computed = float_tensor(t, "float")
                op.outputs[k] = computed
                order.append(Operator(to_int8, [computed], [t]))
    sg.operators = order
    return model


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


BUILTIN_PROBE = "XNNPACK vs builtin kernels"  # the second CPU opinion, where the builtin kernels run the model
ALL_TENSORS = "--all-tensors"  # marks the next model as one whose every tensor is saved
NOISE = "--noise"  # marks the next model as one to run twice: XNNPACK, then a second opinion
NUDGED = "--nudged"  # marks the next model as one to run on the inputs moved one ulp each
FLAGS = (ALL_TENSORS, NOISE, NUDGED)


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
        _spawn([str(src), *args], limit, names)


def _spawn(args: list[str], limit: float, names: str) -> None:
    """`python -m gpulint.reference ARGS` under the memory and time limits; a hang, a crash or a
    refusal becomes a ReferenceError."""
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


def _child(src: str, args: list[str]) -> None:
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    inputs = _load_inputs(src)
    flags: set[str] = set()
    rest = iter(args)
    for a in rest:
        if a in FLAGS:
            flags.add(a)
            continue
        model_path, dst = a, next(rest)
        every, noise = ALL_TENSORS in flags, NOISE in flags
        feed = _nudged(inputs) if NUDGED in flags else inputs
        flags = set()
        it = _fed(Interpreter(model_path=model_path, experimental_preserve_all_tensors=every), feed)
        it.invoke()
        if every:
            np.savez(dst, **_all_tensors(it))  # type: ignore[arg-type]
            continue
        np.savez(dst, *[it.get_tensor(d["index"]) for d in it.get_output_details()])
        if not noise:
            continue
        second = str(Path(dst).with_suffix(".second.npz"))
        try:
            builtin = OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES
            it = _fed(Interpreter(model_path=model_path, experimental_op_resolver_type=builtin), inputs)
            probe = BUILTIN_PROBE
        except (RuntimeError, ValueError) as e:
            it = _fed(Interpreter(model_path=model_path), _nudged(inputs))
            why = str(e).strip().splitlines()[0][:120] if str(e).strip() else type(e).__name__
            probe = f"XNNPACK vs XNNPACK on inputs one ulp away (builtin kernels refuse the model: {why})"
        it.invoke()
        np.savez(second, *[it.get_tensor(d["index"]) for d in it.get_output_details()], probe=np.array(probe))


def _nudged(inputs: list[np.ndarray]) -> list[np.ndarray]:
    """Float inputs moved one ulp up or down (seeded), the rest as they are."""
    rng = np.random.default_rng(0)
    out = []
    for x in inputs:
        if x.dtype.kind == "f":
            x = np.nextafter(x, np.where(rng.random(x.shape) < 0.5, -np.inf, np.inf).astype(x.dtype))
        out.append(x)
    return out


def _load_inputs(src: str) -> list[np.ndarray]:
    with np.load(src) as z:
        return [z[f"arr_{i}"] for i in range(len(z.files))]


def _fed(it: Any, inputs: list[np.ndarray]) -> Any:
    """The interpreter with its inputs resized where their shapes differ, allocated and set."""
    details = it.get_input_details()
    for d, x in zip(details, inputs, strict=True):
        if list(d["shape"]) != list(x.shape):
            it.resize_tensor_input(d["index"], list(x.shape))
    it.allocate_tensors()
    for d, x in zip(details, inputs, strict=True):
        it.set_tensor(d["index"], x)
    return it


def _all_tensors(it: Any) -> dict[str, np.ndarray]:
    saved: dict[str, np.ndarray] = {}
    for d in it.get_tensor_details():
        try:
            value = it.get_tensor(d["index"])
        except ValueError:  # a tensor with no data (freed or never allocated)
            continue
        if d["name"] not in saved:
            saved[d["name"]] = value
    return saved


def time_invoke(model_path: str | os.PathLike[str], inputs: list[np.ndarray], runs: int, threads: int) -> list[float]:
    """Seconds per warm `invoke()` of the interpreter (after WARM_S of untimed runs), in a child."""
    with tempfile.TemporaryDirectory(prefix="gpulint-ref-") as tmp:
        src, dst = Path(tmp, "in.npz"), Path(tmp, "times.npy")
        np.savez(src, *inputs)
        limit = time_limit([model_path]) * (runs + 1)
        _spawn([TIME, str(runs), str(threads), str(src), str(model_path), str(dst)], limit, str(model_path))
        return [float(t) for t in np.load(dst)]


TIME = "--time"
WARM_S = 0.3  # seconds of untimed invokes before timing


def _time_child(runs: int, threads: int, src: str, model_path: str, dst: str) -> None:
    import time

    from ai_edge_litert.interpreter import Interpreter

    it = _fed(Interpreter(model_path=model_path, num_threads=threads), _load_inputs(src))
    warm = time.perf_counter() + WARM_S  # as long as the executor's warm-up in gpulint.bench
    it.invoke()
    while time.perf_counter() < warm:
        it.invoke()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        it.invoke()
        times.append(time.perf_counter() - start)
    np.save(dst, np.array(times))


if __name__ == "__main__":
    if sys.argv[1] == TIME:
        _time_child(int(sys.argv[2]), int(sys.argv[3]), *sys.argv[4:7])
    else:
        _child(sys.argv[1], sys.argv[2:])
