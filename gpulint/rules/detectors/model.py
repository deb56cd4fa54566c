"""Rules about the model's interface (scope `input`: the main subgraph's inputs) and the model as
a whole (scope `model`: its tensor types, the target's device gate and the runtime it models)."""

from __future__ import annotations

from collections.abc import Iterator

from gpulint.model.ir import Model
from gpulint.rules.detectors.registry import Hit, ModelView, SubgraphView, detector
from gpulint.rules.signature import TensorSpec


@detector("GPU302", "input")
def rgb_input(v: SubgraphView, t: TensorSpec) -> Iterator[Hit]:
    if t.rank == 4 and t.shape[3] == 3 and t.dtype in ("FLOAT32", "FLOAT16", "UINT8", "INT8"):
        # The fix is offered only where the pass would apply: one predicate for both. The pass (and
        # the model editing it pulls in) is imported only for a model with an RGB input.
        from gpulint.passes import rgba_input

        fixable = not rgba_input.refusal(v.graph.model, v.graph.subgraph, t.index)
        yield Hit({"tensor": t.name, "shape": list(t.shape)}, fix=fixable)


@detector("GPU504", "input")
def dynamic_shape(v: SubgraphView, t: TensorSpec) -> Iterator[Hit]:
    if t.is_dynamic:
        yield Hit({"tensor": t.name, "signature": v.graph.subgraph.tensors[t.index].shape_signature})


def _runtime_types(m: ModelView) -> dict[str, int]:
    """How many runtime tensors of each 8- or 16-bit integer type the model has."""
    counts: dict[str, int] = {}
    for graph in m.graphs:
        for i, t in enumerate(graph.subgraph.tensors):
            if t.type in ("INT8", "UINT8", "INT16") and not graph.is_const(i):
                counts[str(t.type)] = counts.get(str(t.type), 0) + 1
    return counts


@detector("GPU501", "model")
def quantized_model(m: ModelView, _: Model) -> Iterator[Hit]:
    q = {k: n for k, n in m.memo(_runtime_types).items() if k != "INT16"}
    if q:
        flag = "" if m.quantized else " (and with --no-quantized the delegate refuses them)"
        yield Hit({"count": sum(q.values()), "dtypes": "/".join(sorted(q)), "flag": flag})


@detector("GPU502", "model")
def int16_activations(m: ModelView, _: Model) -> Iterator[Hit]:
    if n := m.memo(_runtime_types).get("INT16"):
        yield Hit({"count": n})


@detector("GPU110", "model")
def delegate_device_gate(m: ModelView, _: Model) -> Iterator[Hit]:
    if m.target.device_gate and not m.target.settings.get("all_devices"):
        yield Hit({"target": m.target.name, "gate": m.target.device_gate})


@detector("GPU111", "model")
def target_runtime(m: ModelView, _: Model) -> Iterator[Hit]:
    if m.target.runtime:
        yield Hit({"target": m.target.name, "runtime": m.target.runtime})
