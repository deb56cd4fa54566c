"""What runs in the child process (`python -m gpulint.reference`): the models of one request
loaded, fed and invoked, their outputs (or every tensor, or a second CPU opinion) saved to .npz
files. The flags below are the child's command line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

BUILTIN_PROBE = "XNNPACK vs builtin kernels"  # the second CPU opinion, where the builtin kernels run the model
ALL_TENSORS = "--all-tensors"  # marks the next model as one whose every tensor is saved
NOISE = "--noise"  # marks the next model as one to run twice: XNNPACK, then a second opinion
NUDGED = "--nudged"  # marks the next model as one to run on the inputs moved one ulp each
FLAGS = (ALL_TENSORS, NOISE, NUDGED)


def interpreter(model_path: str, **options: Any) -> Any:
    """LiteRT's interpreter on the model at `model_path`: a file, or a model inside a LiteRT-LM
    bundle (`BUNDLE#N`), which it is handed as bytes."""
    from ai_edge_litert.interpreter import Interpreter

    from gpulint.model.litertlm import model_bytes

    content = model_bytes(model_path)
    if content is not None:
        return Interpreter(model_content=content, **options)
    return Interpreter(model_path=model_path, **options)


def child_main(src: str, args: list[str]) -> None:
    from ai_edge_litert.interpreter import OpResolverType

    inputs = load_inputs(src)
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
        it = fed(interpreter(model_path, experimental_preserve_all_tensors=every), feed)
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
            it = fed(interpreter(model_path, experimental_op_resolver_type=builtin), inputs)
            probe = BUILTIN_PROBE
        except (RuntimeError, ValueError) as e:
            it = fed(interpreter(model_path), _nudged(inputs))
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


def load_inputs(src: str) -> list[np.ndarray]:
    with np.load(src) as z:
        return [z[f"arr_{i}"] for i in range(len(z.files))]


def fed(it: Any, inputs: list[np.ndarray]) -> Any:
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
