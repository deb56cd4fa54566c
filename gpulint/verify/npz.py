"""The .npz files verify reads and writes: the inputs given (--inputs) and a saved run of the
original on the CPU (--save-reference, --reference)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np

from gpulint.model.ir import NUMPY_DTYPES, Model
from gpulint.verify.request import VerifyError


def load_inputs(path: Path, model: Model) -> list[np.ndarray]:
    """Inputs from an .npz: keyed by input tensor name, or arr_0, arr_1, ... in order."""
    sg = model.subgraphs[0]
    names = [sg.tensors[t].name for t in sg.inputs]
    try:
        with np.load(path, allow_pickle=False) as z:
            data = {k: z[k] for k in z.files}
    except (OSError, ValueError) as e:
        raise VerifyError(f"{path}: not a readable .npz file ({e})") from None
    out = []
    for i, (name, t) in enumerate(zip(names, sg.inputs, strict=True)):
        value = data.get(name, data.get(f"arr_{i}"))
        if value is None:
            raise VerifyError(f"{path}: no array for input {name!r} (keys: {', '.join(sorted(data)) or 'none'})")
        ttype = sg.tensors[t].type
        dtype = NUMPY_DTYPES.get(ttype) if isinstance(ttype, str) else None
        want = [d if d > 0 else value.shape[k] for k, d in enumerate(sg.tensors[t].shape)] if value.ndim else []
        if list(value.shape) != want:
            raise VerifyError(f"{path}: input {name!r} is {list(value.shape)}, the model takes {sg.tensors[t].shape}")
        out.append(value.astype(dtype) if dtype is not None else value)
    return out


def save_reference(path: Path, inputs: list[list[np.ndarray]], outputs: list[list[np.ndarray]]) -> None:
    from gpulint.atomic import write_atomic

    arrays = {f"run{r}_input{i}": x for r, xs in enumerate(inputs) for i, x in enumerate(xs)}
    arrays |= {f"run{r}_output{i}": y for r, ys in enumerate(outputs) for i, y in enumerate(ys)}
    fd, tmp = tempfile.mkstemp(suffix=".npz")
    os.close(fd)
    try:
        np.savez(tmp, **arrays)  # type: ignore[arg-type]
        write_atomic(path, [Path(tmp).read_bytes()])
    except OSError as e:
        raise VerifyError(f"{path}: cannot write the reference ({e.strerror or e})") from None
    finally:
        os.unlink(tmp)


def load_reference(path: Path) -> tuple[list[list[np.ndarray]], list[list[np.ndarray]]]:
    try:
        with np.load(path, allow_pickle=False) as z:
            data = {k: z[k] for k in z.files}
    except (OSError, ValueError) as e:
        raise VerifyError(f"{path}: not a readable reference file ({e})") from None
    runs = sorted({int(k[3:].split("_")[0]) for k in data if k.startswith("run") and "_" in k})
    if not runs:
        raise VerifyError(f"{path}: no runs in it (written by `gpulint verify --save-reference`?)")

    def arrays(r: int, kind: str) -> list[np.ndarray]:
        count = len([k for k in data if k.startswith(f"run{r}_{kind}")])
        return [data[f"run{r}_{kind}{i}"] for i in range(count)]

    return [arrays(r, "input") for r in runs], [arrays(r, "output") for r in runs]
