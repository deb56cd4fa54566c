"""A model's signatures (an LLM export has at least `prefill_N` and `decode`), and a model with
one signature's subgraph made the main one, so that everything that runs or partitions "the main
subgraph" (the executor, the partitioned runner, random inputs, the CPU reference) runs that
signature. The subgraphs are only reordered: every subgraph stays, and every reference to a
subgraph index (WHILE, IF, CALL_ONCE, STABLEHLO_COMPOSITE and the StableHLO control flow, the
signature defs) follows the move."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from gpulint.model.errors import ModelError
from gpulint.model.ir import Model, Options, clone


def keys(model: Model) -> list[str]:
    """The signature keys, in file order (None keys, which the interpreter rejects, left out)."""
    return [s.signature_key for s in model.signature_defs or [] if s.signature_key is not None]


def subgraph_of(model: Model, key: str) -> int:
    """The subgraph index of signature `key`; a ModelError naming the signatures there are."""
    for s in model.signature_defs or []:
        if s.signature_key == key:
            if not 0 <= s.subgraph_index < len(model.subgraphs):
                raise ModelError(f"signature {key!r} names subgraph {s.subgraph_index}, which the model does not have")
            return s.subgraph_index
    there = ", ".join(repr(k) for k in keys(model)) or "none"
    raise ModelError(f"the model has no signature {key!r} (its signatures: {there})")


def as_main(model: Model, key: str) -> Model:
    """A copy of `model` whose subgraph 0 is signature `key`'s (swapped with the old subgraph 0), and
    whose first signature def is `key`."""
    k = subgraph_of(model, key)
    out = clone(model)
    # The signature first too: runtimes that run "signature 0" (LiteRT's CompiledModel) run it.
    sigs = out.signature_defs or []
    sigs.sort(key=lambda s: s.signature_key != key)
    if k == 0:
        return out
    out.subgraphs[0], out.subgraphs[k] = out.subgraphs[k], out.subgraphs[0]
    _renumber_all(out, {0: k, k: 0})
    return out


def subgraphs_of(model: Model, key: str) -> list[int]:
    """Signature `key`'s subgraph, then every subgraph its ops call, directly or through others."""
    first = subgraph_of(model, key)
    out, todo = [first], [first]
    while todo:
        for op in model.subgraphs[todo.pop()].operators:
            for called in _called(op.builtin_options) + _called(op.builtin_options_2):
                if 0 <= called < len(model.subgraphs) and called not in out:
                    out.append(called)
                    todo.append(called)
    return out


def by_signature(model: Model) -> dict[str, list[int]]:
    """Each signature's subgraphs (subgraphs_of), in file order; a signature naming no subgraph of
    the model is left out (the interpreter rejects such a file before any delegate sees it)."""
    out = {}
    for key in keys(model):
        with contextlib.suppress(ModelError):
            out[key] = subgraphs_of(model, key)
    return out


def drop_subgraphs(model: Model) -> int:
    """Drop the subgraphs nothing calls and no signature names (subgraph 0, the interpreter's
    primary, stays), renumbering every reference; how many were dropped."""
    named = {s.subgraph_index for s in model.signature_defs or []}
    called = {
        c
        for sg in model.subgraphs
        for op in sg.operators
        for o in (op.builtin_options, op.builtin_options_2)
        for c in _called(o)
    }
    keep = [i for i in range(len(model.subgraphs)) if i == 0 or i in named or i in called]
    if len(keep) == len(model.subgraphs):
        return 0
    new_index = {old: new for new, old in enumerate(keep)}
    dropped = len(model.subgraphs) - len(keep)
    model.subgraphs = [model.subgraphs[i] for i in keep]
    _renumber_all(model, new_index)
    return dropped


def _renumber_all(model: Model, new_index: dict[int, int]) -> None:
    """Every subgraph reference (op options, signature defs) through `new_index` (old -> new)."""
    for sg in model.subgraphs:
        for op in sg.operators:
            for opts in (op.builtin_options, op.builtin_options_2):
                _renumber(opts, new_index)
    for s in model.signature_defs or []:
        s.subgraph_index = new_index.get(s.subgraph_index, s.subgraph_index)


def _references(opts: Options | None) -> Iterator[tuple[str, int | list[int]]]:
    """The options fields that name subgraphs, with their values (an index, or a list of them)."""
    for name, value in (opts.values if opts is not None else {}).items():
        if (name.endswith("subgraph_index") or name == "subgraph") and isinstance(value, int):
            yield name, value
        elif name.endswith("subgraph_indices") and isinstance(value, list):
            yield name, [v for v in value if isinstance(v, int)]


def _called(opts: Options | None) -> list[int]:
    return [v for _, value in _references(opts) for v in (value if isinstance(value, list) else [value])]


def _renumber(opts: Options | None, new_index: dict[int, int]) -> None:
    for name, value in list(_references(opts)):
        assert opts is not None
        opts.values[name] = (
            [new_index.get(v, v) for v in value] if isinstance(value, list) else new_index.get(value, value)
        )
