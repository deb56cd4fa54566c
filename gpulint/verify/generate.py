"""`verify --generate N`: a decoder's generation, step by step, on an engine and on the CPU
interpreter side by side (issue #47).

An LLM export (litert-torch's generative converter, LiteRT-LM's models) has a `prefill_*` and a
`decode` signature over an external KV cache: inputs `tokens`, `input_pos` and one `kv_cache_*`
per layer and kind, outputs `logits` (decode; prefill's too where it has them) and the same
`kv_cache_*` names, updated. The prompt is the prefill length plus one seeded token ids inside the
vocabulary; prefill takes all but the last, then each decode step takes one token at the next
position. Each side carries its own KV cache from its own previous step (the engine's cache is what
the engine computed), and both are fed the CPU's greedy token, so every step's logits compare like
with like. A step agrees when both pick the same token, or when the CPU's logits for the two picks
are within the engine's precision (the executor's per-element tolerance, compare.EXECUTOR_VS_CPU,
without the noise multiple): a near tie that half precision may break either way is not a FAIL.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from gpulint import compare, reference
from gpulint.engines import Engine, EngineError, gpu_op_count, open_engine
from gpulint.executor import Device
from gpulint.model import write
from gpulint.model.ir import NUMPY_DTYPES, Model
from gpulint.model.signatures import as_main, keys
from gpulint.reference.inputs import integer_range
from gpulint.verify.request import Request


class GenerationError(ValueError):
    """The model is no decoder this driver can run (no prefill/decode signatures, no logits)."""


@dataclass
class Step:
    step: int  # 0: prefill (where it outputs logits), then 1..N the decode steps
    position: int  # of the token fed (decode) or of the last prompt token (prefill)
    fed: int  # the token fed at this step (decode), the last prompt token (prefill)
    cpu_next: int
    engine_next: int
    agrees: bool
    tie: bool  # different picks, but within the engine's precision on the CPU's logits
    metrics: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "position": self.position,
            "fed": self.fed,
            "cpu_next": self.cpu_next,
            "engine_next": self.engine_next,
            "agrees": self.agrees,
            "tie": self.tie,
            "max_abs_error": self.metrics.get("max_abs_error"),
            "cosine_similarity": self.metrics.get("cosine_similarity"),
        }


@dataclass
class Generation:
    model: str
    candidate: str
    engine: str
    precision: str
    prefill: str
    decode: str
    prompt: list[int]
    steps: list[Step] = field(default_factory=list)
    error: str | None = None  # the engine died or failed at `error_step`
    error_step: int | None = None
    placement: dict[str, str] = field(default_factory=dict)  # signature -> what ran on the GPU side

    @property
    def status(self) -> str:
        if self.error is not None:
            return "ERROR"
        return "PASS" if all(s.agrees or s.tie for s in self.steps) else "FAIL"

    def agreement(self) -> str:
        """ "tokens 1-8 agree", or "tokens 1-16 agree, the 17th differs"."""
        decode = [s for s in self.steps if s.step > 0]
        first_bad = next((i for i, s in enumerate(decode) if not (s.agrees or s.tie)), None)
        if first_bad is None:
            return f"tokens 1-{len(decode)} agree" if decode else "no token generated"
        head = f"tokens 1-{first_bad} agree, " if first_bad else ""
        return f"{head}token {first_bad + 1} differs"

    def to_json(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "candidate": self.candidate,
            "engine": self.engine,
            "precision": self.precision,
            "status": self.status,
            "signatures": {"prefill": self.prefill, "decode": self.decode},
            "prompt": self.prompt,
            "agreement": self.agreement(),
            "steps": [s.to_json() for s in self.steps],
            "error": self.error,
            "error_step": self.error_step,
            "placement": self.placement,
        }

    def text(self) -> str:
        lines = [
            f"{self.model}: {self.status} generation on {self.engine} at {compare.precision_text(self.precision)} "
            f"against the LiteRT CPU interpreter ({self.prefill} then {self.decode}, prompt of {len(self.prompt)} "
            f"tokens): {self.agreement()}"
        ]
        lines += [f"  {key}: {where}" for key, where in self.placement.items()]
        lines.append("  step  pos  fed     cpu  engine  max abs logits  cosine")
        for s in self.steps:
            mark = "" if s.agrees else (" (a tie within precision)" if s.tie else " DIFFERS")
            err, cos = s.metrics.get("max_abs_error"), s.metrics.get("cosine_similarity")
            lines.append(
                f"  {s.step:>4} {s.position:>4} {s.fed:>5} {s.cpu_next:>6} {s.engine_next:>7}"
                f"  {_num(err):>14}  {_num(cos, 6):>8}{mark}"
            )
        if self.error is not None:
            lines.append(f"  the engine failed at step {self.error_step}: {self.error}")
        return "\n".join(lines)


def _num(x: float | None, digits: int = 3) -> str:
    return "-" if x is None else f"{x:.{digits}g}" if digits == 3 else f"{x:.{digits}f}"


@dataclass(frozen=True)
class Interface:
    """One signature of a decoder as this driver feeds it: the subgraph's input and output names."""

    key: str
    inputs: list[str]
    outputs: list[str]
    shapes: dict[str, list[int]]
    dtypes: dict[str, np.dtype]
    tensors: dict[str, int]  # input name -> its tensor in the signature's subgraph

    @classmethod
    def of(cls, model: Model, key: str) -> Interface:
        main = as_main(model, key).subgraphs[0]
        names = _names(model, key)
        ins = [names.get(t, main.tensors[t].name or f"input{i}") for i, t in enumerate(main.inputs)]
        outs = [names.get(t, main.tensors[t].name or f"output{i}") for i, t in enumerate(main.outputs)]
        shapes, dtypes = {}, {}
        for name, t in zip(ins, main.inputs, strict=True):
            tensor = main.tensors[t]
            dtype = NUMPY_DTYPES.get(tensor.type) if isinstance(tensor.type, str) else None
            if dtype is None:
                raise GenerationError(f"signature {key!r}: input {name!r} has type {tensor.type}")
            shapes[name], dtypes[name] = [max(d, 1) for d in tensor.shape], dtype
        return cls(key, ins, outs, shapes, dtypes, dict(zip(ins, main.inputs, strict=True)))

    def role(self, name: str) -> str:
        low = name.lower()
        if low.startswith("kv_cache") or "cache" in low:
            return "cache"
        if "token" in low:
            return "tokens"
        if "pos" in low:
            return "positions"
        if "mask" in low:
            return "mask"
        if "logits" in low:
            return "logits"
        return "other"


def _names(model: Model, key: str) -> dict[int, str]:
    """Tensor index -> the signature's own name for it (the names a user and LiteRT-LM use)."""
    sig = next(s for s in model.signature_defs or [] if s.signature_key == key)
    return {m.tensor_index: m.name for m in sig.inputs + sig.outputs if m.name is not None}


def pick_signatures(model: Model) -> tuple[str, str]:
    """The prefill and decode signatures: `decode`, and the longest `prefill*`."""
    found = keys(model)
    decode = next((k for k in found if k == "decode"), None) or next((k for k in found if "decode" in k), None)
    prefills = [k for k in found if k.startswith("prefill")]
    if decode is None or not prefills:
        there = ", ".join(found) or "none"
        raise GenerationError(f"--generate needs a prefill and a decode signature (this model's signatures: {there})")
    return max(prefills, key=lambda k: (len(k), k)), decode


class Side:
    """One side of the generation: the CPU interpreter on a model, or an engine on it, per signature."""

    def __init__(self, model: Model, keys_: tuple[str, str], tmp: str, label: str) -> None:
        self.model = model
        self.paths: dict[str, Path] = {}
        self.models: dict[str, Model] = {}
        for key in keys_:
            self.models[key] = as_main(model, key)
            self.paths[key] = Path(tmp, f"{label}-{key}.tflite")
            write(self.models[key], self.paths[key])  # a model the schema cannot write whole is an error

    def cpu(self, key: str, inputs: list[np.ndarray]) -> list[np.ndarray]:
        return reference.run(self.paths[key], inputs)


def generate(req: Request, original: Model, candidate: Model, device: Device | None, steps: int) -> Generation:
    prefill, decode = pick_signatures(original)
    pre, dec = Interface.of(original, prefill), Interface.of(original, decode)
    if "logits" not in [dec.role(n) for n in dec.outputs]:
        raise GenerationError(f"signature {decode!r} has no logits output (its outputs: {', '.join(dec.outputs)})")
    tokens_in = next((n for n in pre.inputs if pre.role(n) == "tokens"), None)
    if tokens_in is None:
        raise GenerationError(f"signature {prefill!r} has no tokens input (its inputs: {', '.join(pre.inputs)})")
    rng = np.random.default_rng(req.seed)
    prefill_len = pre.shapes[tokens_in][-1]
    vocab = _vocabulary(original, pre, tokens_in)
    prompt = [int(x) for x in rng.integers(0, vocab, prefill_len + 1)]
    cache_len = _cache_length(dec)
    if prefill_len + steps > cache_len:
        raise GenerationError(
            f"--generate {steps} after a prompt of {prefill_len + 1} tokens needs {prefill_len + steps} cache "
            f"positions; the KV cache holds {cache_len}"
        )
    result = Generation(
        str(req.model_path),
        str(req.candidate_path or req.model_path),
        req.engine,
        req.precision,
        prefill,
        decode,
        prompt,
    )
    with tempfile.TemporaryDirectory(prefix="gpulint-generate-") as tmp:
        cpu = Side(original, (prefill, decode), tmp, "original")
        eng = cpu if candidate is original else Side(candidate, (prefill, decode), tmp, "candidate")
        engines: dict[str, Engine] = {}
        try:
            for key in (prefill, decode):
                engines[key] = open_engine(
                    req.engine, eng.models[key], eng.paths[key], req.precision, req.target, device
                )
                ran, total = gpu_op_count(engines[key].parts), len(eng.models[key].subgraphs[0].operators)
                result.placement[key] = f"{ran} of {total} ops on the engine's GPU side"
            _run(result, pre, dec, cpu, engines, prompt, steps, req.precision)
        except EngineError as e:
            result.error, result.error_step = str(e), len(result.steps)
        finally:
            for opened in engines.values():
                opened.close()
    return result


def _run(
    result: Generation,
    pre: Interface,
    dec: Interface,
    cpu: Side,
    engines: dict[str, Engine],
    prompt: list[int],
    steps: int,
    precision: str,
) -> None:
    n = len(prompt) - 1
    feed = _feed(pre, prompt[:n], list(range(n)), None)
    cpu_out = dict(zip(pre.outputs, cpu.cpu(pre.key, [feed[k] for k in pre.inputs]), strict=True))
    result.error_step = 0
    eng_out = dict(zip(pre.outputs, engines[pre.key].run([feed[k] for k in pre.inputs]), strict=True))
    result.error_step = None
    logits = [k for k in pre.outputs if pre.role(k) == "logits"]
    if logits:
        result.steps.append(_step(0, n - 1, prompt[n - 1], cpu_out[logits[0]], eng_out[logits[0]], precision))
    token, pos = prompt[n], n
    for i in range(1, steps + 1):
        cpu_feed = _feed(dec, [token], [pos], cpu_out)
        eng_feed = _feed(dec, [token], [pos], eng_out)
        cpu_out = dict(zip(dec.outputs, cpu.cpu(dec.key, [cpu_feed[k] for k in dec.inputs]), strict=True))
        result.error_step = i
        eng_out = dict(zip(dec.outputs, engines[dec.key].run([eng_feed[k] for k in dec.inputs]), strict=True))
        result.error_step = None
        key = next(k for k in dec.outputs if dec.role(k) == "logits")
        step = _step(i, pos, token, cpu_out[key], eng_out[key], precision)
        result.steps.append(step)
        token, pos = step.cpu_next, pos + 1


def _step(i: int, pos: int, fed: int, ref: np.ndarray, got: np.ndarray, precision: str) -> Step:
    """The last position's logits of both sides: the greedy picks and whether they agree."""
    r = np.asarray(ref, np.float64).reshape(-1, np.asarray(ref).shape[-1])[-1]
    g = np.asarray(got, np.float64).reshape(-1, np.asarray(got).shape[-1])[-1]
    cpu_next, eng_next = int(np.argmax(r)), int(np.argmax(g))
    policy = compare.EXECUTOR_VS_CPU
    within = policy.atol_floor.get(precision, 1e-5) + policy.rtol.get(precision, 1e-5) * float(np.max(np.abs(r)))
    tie = cpu_next != eng_next and bool(np.isfinite(g).all()) and float(r[cpu_next] - r[eng_next]) <= within
    return Step(i, pos, fed, cpu_next, eng_next, cpu_next == eng_next, tie, compare.metrics(r, g))


def _feed(
    sig: Interface, tokens: list[int], positions: list[int], previous: dict[str, np.ndarray] | None
) -> dict[str, np.ndarray]:
    """A signature's inputs: tokens and positions (left-aligned, the rest zero), each KV cache from
    the previous step's output of the same name (zeros at the start), a causal mask."""
    out: dict[str, np.ndarray] = {}
    for name in sig.inputs:
        shape, dtype, role = sig.shapes[name], sig.dtypes[name], sig.role(name)
        x = np.zeros(shape, dtype)
        if role == "tokens":
            flat = x.reshape(-1)
            flat[: len(tokens)] = tokens[: flat.size]
        elif role == "positions":
            flat = x.reshape(-1)
            flat[: len(positions)] = positions[: flat.size]
        elif role == "cache" and previous is not None and name in previous:
            x = np.asarray(previous[name]).astype(dtype).reshape(shape)
        elif role == "mask":
            # [.., rows, cache]: row r sees cache positions up to positions[r]
            rows = shape[-2] if len(shape) >= 2 else 1
            cols = np.arange(shape[-1])
            mask = np.full((rows, shape[-1]), -np.inf if dtype.kind == "f" else 0, np.float64)
            for r in range(min(rows, len(positions))):
                mask[r, cols <= positions[r]] = 0
            x = np.broadcast_to(mask, shape).astype(dtype)
        out[name] = x
    return out


def _vocabulary(model: Model, sig: Interface, tokens_in: str) -> int:
    """How many token ids the embedding reads (the graph's own bound on the tokens input)."""
    key = sig.key
    r = integer_range(as_main(model, key), sig.tensors[tokens_in])
    if not r.source:
        raise GenerationError(f"nothing in signature {key!r} says how many token ids {tokens_in!r} takes")
    return r.high + 1


def _cache_length(sig: Interface) -> int:
    """The KV cache's positions: the largest dimension of a cache input but its last (the head size)."""
    caches = [sig.shapes[n] for n in sig.inputs if sig.role(n) == "cache"]
    if not caches:
        raise GenerationError(f"signature {sig.key!r} has no KV cache input (its inputs: {', '.join(sig.inputs)})")
    return max(max(s[:-1] or [1]) for s in caches)
