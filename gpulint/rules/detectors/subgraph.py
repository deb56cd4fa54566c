"""Rules over a whole subgraph: op patterns (scope `subgraph`) and its partition plan (scope `plan`)."""

from __future__ import annotations

from collections.abc import Iterator

from gpulint.rules.detectors.registry import Hit, SubgraphView, detector
from gpulint.rules.partition import SubgraphPlan
from gpulint.rules.signature import Graph

Atrous = tuple[list[int], str, int | list[int]]  # (op indices, conv op, dilation)


def atrous_chains(v: SubgraphView) -> list[Atrous]:
    """SPACE_TO_BATCH_ND -> CONV_2D / DEPTHWISE_CONV_2D -> BATCH_TO_SPACE_ND chains, each op the
    only reader of the one before, with equal block shapes. Read with `v.memo`: GPU401 leaves
    their reshuffles to GPU402."""
    out: list[Atrous] = []
    for s in v.sigs:
        if s.op != "SPACE_TO_BATCH_ND" or not s.outputs:
            continue
        readers = s.consumers(s.outputs[0])
        if len(readers) != 1 or readers[0].op not in ("CONV_2D", "DEPTHWISE_CONV_2D") or not readers[0].outputs:
            continue
        conv = readers[0]
        after = conv.consumers(conv.outputs[0])
        if len(after) != 1 or after[0].op != "BATCH_TO_SPACE_ND":
            continue
        b2s = after[0]
        block_in = s.const_values(s.inputs[1]) if len(s.inputs) > 1 else None
        block_out = b2s.const_values(b2s.inputs[1]) if len(b2s.inputs) > 1 else None
        if not block_in or block_in != block_out:
            continue
        dilation: int | list[int] = int(block_in[0]) if len(set(block_in)) == 1 else [int(b) for b in block_in]
        out.append(([s.index, conv.index, b2s.index], conv.op, dilation))
    return out


@detector("GPU402", "subgraph")
def atrous_pattern(v: SubgraphView, _: Graph) -> Iterator[Hit]:
    for ops, conv, dilation in v.memo(atrous_chains):
        values = {"conv": conv, "ops": ", ".join(map(str, ops)), "dilation": dilation}
        yield Hit(values, ops[0], "SPACE_TO_BATCH_ND")


@detector("GPU601", "plan")
def split_graph(v: SubgraphView, plan: SubgraphPlan) -> Iterator[Hit]:
    if plan.delegated_partitions and plan.cpu_subsets:
        # What runs: the partitions the delegate takes, and the CPU subsets between them; a
        # supported partition it does not take runs on the CPU too (GPU109 names its ops).
        gpu, cpu = len(plan.delegated_partitions), plan.cpu_subsets
        partitions = f"{gpu} delegated GPU partition{'s' * (gpu > 1)} and {cpu} CPU partition{'s' * (cpu > 1)}"
        yield Hit({"subgraph": v.graph.index, "partitions": partitions, "transfers": len(plan.transfers)})


@detector("GPU602", "plan")
def not_worth_delegating(v: SubgraphView, plan: SubgraphPlan) -> Iterator[Hit]:
    if plan.verdict == "not-worth-it":
        yield Hit({"subgraph": v.graph.index, "reason": plan.reason})
