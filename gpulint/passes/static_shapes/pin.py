"""The interface: `--input-shape NAME=D1,D2,...` read and checked against the model, and the
main subgraph's inputs pinned to it (every -1 to 1 by default)."""

from __future__ import annotations

from gpulint.model.ir import Model, Subgraph

InputShapes = tuple[tuple[str, tuple[int, ...]], ...]


def parse_input_shape(text: str) -> tuple[str, tuple[int, ...]]:
    """`NAME=1,224,224,3` (or `NAME=` for a scalar) -> (name, shape). ValueError says what is wrong."""
    name, sep, dims = text.rpartition("=")
    if not sep or not name:
        raise ValueError(f"--input-shape {text!r}: expected NAME=D1,D2,... (e.g. input=1,224,224,3)")
    try:
        shape = tuple(int(d) for d in dims.replace("x", ",").split(",") if d.strip())
    except ValueError:
        raise ValueError(f"--input-shape {text!r}: dimensions must be integers") from None
    if any(d < 1 for d in shape):
        raise ValueError(f"--input-shape {text!r}: every dimension must be at least 1")
    return name, shape


def bad_input_shapes(model: Model, shapes: InputShapes) -> str | None:
    """Why `shapes` do not fit the model's inputs (an unknown name, a wrong rank), or None."""
    sg = model.subgraphs[0] if model.subgraphs else Subgraph()
    by_name = {sg.tensors[i].name: sg.tensors[i] for i in sg.inputs}
    for name, shape in shapes:
        t = by_name.get(name)
        if t is None:
            return f"--input-shape: the model has no input `{name}` (inputs: {', '.join(map(str, by_name))})"
        declared = t.shape_signature if t.shape_signature is not None else t.shape
        if len(declared) != len(shape):
            return f"--input-shape: input `{name}` has rank {len(declared)} ({declared}), not {len(shape)}"
        fixed = [(i, d) for i, d in enumerate(declared) if d > 0 and d != shape[i]]
        if fixed:
            return f"--input-shape: input `{name}` is {declared}: dimension {fixed[0][0]} is fixed at {fixed[0][1]}"
    return None


def dims(shape: list[int] | tuple[int, ...]) -> str:
    return "[" + ",".join(map(str, shape)) + "]"


def pin_inputs(model: Model, input_shapes: InputShapes) -> list[str]:
    """Set the main subgraph's input shapes and signatures; one line per input that changed."""
    given = dict(input_shapes)
    sg = model.subgraphs[0]
    lines = []
    for i in sg.inputs:
        t = sg.tensors[i]
        declared = list(t.shape_signature if t.shape_signature is not None else t.shape)
        if t.name in given:
            shape, how = list(given[t.name]), "--input-shape"
        else:
            shape = [d if d > 0 else 1 for d in declared]
            how = "by default every -1 becomes 1; choose with --input-shape"
        if shape == declared and shape == t.shape:
            continue
        t.shape = list(shape)
        t.shape_signature = list(shape)
        lines.append(f"pinned input `{t.name}` {dims(declared)} -> {dims(shape)} ({how})")
    return lines
