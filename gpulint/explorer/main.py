"""The gpulint node data provider for Model Explorer (loaded as `--extensions=gpulint.explorer`).

Model Explorer imports `<module>.main` of each extension module named, and registers every
`NodeDataProvider` subclass it defines. `run` gets the path of the model the UI shows and the id
of the graph on screen; it checks the model as `gpulint check` does (the configuration file found
from the model's folder up, the target chosen in the run dialog) and returns that graph's node
data: `gpulint.report.node_data`, the file `gpulint report --node-data` writes, with ops the
delegate refuses outright in their own colour.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from model_explorer import (  # type: ignore[import-not-found]
    NodeDataProvider,
    NodeDataProviderFilter,
    NodeDataProviderMetadata,
    NodeDataProviderResult,
)
from model_explorer.config_editor import (  # type: ignore[import-not-found]
    DropDownConfigEditor,
    OptionItem,
    SlideToggleConfigEditor,
)
from model_explorer.node_data_builder import (  # type: ignore[import-not-found]
    GraphNodeData,
    NodeDataResult,
    ThresholdItem,
)
from model_explorer.node_data_provider import GetConfigEditorsResult  # type: ignore[import-not-found]

from gpulint.check import check_model
from gpulint.model import ModelError, read
from gpulint.report import PLACEMENT_COLORS, node_data
from gpulint.rules import pack
from gpulint.rules.loader import PackError
from gpulint.settings import Overrides, SettingsError, resolve

FROM_CONFIG = ""  # the target option that leaves the configuration file's (or the default) target


def graph_node_data(path: str, graph_id: str, target: str = FROM_CONFIG, quantized: bool | None = None) -> Any:
    """The node data of graph `graph_id` of the model at `path` (a GraphNodeData), or a string: why not."""
    try:
        settings = resolve(Overrides(target=target or None, quantized=quantized), cwd=Path(path).resolve().parent)
    except (SettingsError, PackError) as e:
        return f"gpulint: {e}"
    try:
        model = read(path)
    except ModelError as e:
        return f"gpulint: {path}: {e}"
    result = check_model(model, path, settings)
    if result.error is not None:
        return f"gpulint: {path}: {result.error}"
    graphs = node_data(model, result)
    names = list(graphs)
    if graph_id not in graphs:
        return f"gpulint: graph {graph_id!r} is not a subgraph of {path} (its subgraphs: {', '.join(names)})"
    si = names.index(graph_id)
    graph = graphs[graph_id]
    refused = set()  # the delegate's outright refusals: CPU's value, their own colour (as in the report)
    sg = model.subgraphs[si]
    for p in result.ops:
        if p.subgraph == si and p.placement == "refused" and not p.folded and sg.operators[p.index].outputs:
            out = sg.operators[p.index].outputs[0]
            refused.add(sg.tensors[out].name or str(out))
    return GraphNodeData(
        name=f"{graph['name']} · {settings.target}",
        results={
            key: NodeDataResult(value=r["value"], bgColor=PLACEMENT_COLORS["refused"] if key in refused else None)
            for key, r in graph["results"].items()
        },
        thresholds=[ThresholdItem(value=t["value"], bgColor=t["bgColor"]) for t in graph["thresholds"]],
    )


class GpulintNodeDataProvider(NodeDataProvider):  # type: ignore[misc]
    """Colours a TFLite model's ops by where gpulint says the GPU delegate runs them."""

    metadata = NodeDataProviderMetadata(
        id="gpulint",
        name="gpulint",
        description="GPU delegate placement per op (gpulint check): green GPU, orange init failure, "
        "red CPU, dark red refused by the delegate.",
        icon="memory",
        filter=NodeDataProviderFilter(modelFileExts=["tflite"]),
    )

    def get_config_editors(self, provider_id: str) -> Any:
        targets = list(pack.load_targets())
        return GetConfigEditorsResult(
            configEditors=[
                DropDownConfigEditor(
                    id="target",
                    label="Target",
                    help="The GPU delegate to check against (gpulint check --target).",
                    defaultValue=FROM_CONFIG,
                    options=[OptionItem(value=FROM_CONFIG, label="from gpulint.toml (or classic)")]
                    + [OptionItem(value=t, label=t) for t in targets],
                ),
                SlideToggleConfigEditor(
                    id="no_quantized",
                    label="Quantized models off",
                    help="The delegate's quantized-models flag off (gpulint check --no-quantized).",
                    defaultValue=False,
                ),
            ]
        )

    def run(
        self, provider_id: str, model_path: str, graph_id: str, config_values: dict[str, Any], graph: Any = None
    ) -> Any:
        target = str(config_values.get("target") or FROM_CONFIG)
        quantized = False if config_values.get("no_quantized") else None
        data = graph_node_data(model_path, graph_id, target, quantized)
        if isinstance(data, str):
            return NodeDataProviderResult(error=data)
        return NodeDataProviderResult(result=data)
