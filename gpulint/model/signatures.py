"""A model's signatures (an LLM export has at least `prefill_N` and `decode`), and a model with
one signature's subgraph made the main one, so that everything that runs or partitions "the main
subgraph" (the executor, the partitioned runner, random inputs, the CPU reference) runs that
signature. The subgraphs are only reordered: every subgraph stays, and every reference to a
subgraph index (WHILE, IF, CALL_ONCE, STABLEHLO_COMPOSITE and the StableHLO control flow, the
signature defs) follows the move."""

from __future__ import annotations

from gpulint.model.ir import Model, Options, clone
from gpulint.model.read import ModelError


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
    new_index = {0: k, k: 0}
    out.subgraphs[0], out.subgraphs[k] = out.subgraphs[k], out.subgraphs[0]
    for sg in out.subgraphs:
        for op in sg.operators:
            for opts in (op.builtin_options, op.builtin_options_2):
                _renumber(opts, new_index)
    for s in out.signature_defs or []:
        s.subgraph_index = new_index.get(s.subgraph_index, s.subgraph_index)
    return out


def _renumber(opts: Options | None, new_index: dict[int, int]) -> None:
    if opts is None:
        return
    for name, value in opts.values.items():
        if name.endswith("subgraph_index") or name == "subgraph":
            if isinstance(value, int):
                opts.values[name] = new_index.get(value, value)
        elif name.endswith("subgraph_indices") and isinstance(value, list):
            opts.values[name] = [new_index.get(v, v) if isinstance(v, int) else v for v in value]
