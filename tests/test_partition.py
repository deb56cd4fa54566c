"""How constant DEQUANTIZEs take part in the split (FP16GraphPartitionHelper, tflite/delegates/utils.cc).

The oracle holds these on real models (pose_detection, deeplab_like_65_f16, placements rows
184/185); here small built models pin each branch of the helper so they run anywhere.
"""

from __future__ import annotations

import numpy as np

from gpulint.model import Model
from gpulint.model.build import ModelBuilder, SubgraphBuilder
from gpulint.rules import pack
from gpulint.rules.engine import Linter, LintResult

TARGETS = pack.load_targets()


def lint(model: Model, quantized: bool = False) -> LintResult:
    return Linter(TARGETS["classic"], quantized).lint(model)


def conv(g: SubgraphBuilder, x: int, w: int) -> int:
    opts = dict(padding="SAME", stride_w=1, stride_h=1)
    return g.op("CONV_2D", [x, w, -1], [1, 8, 8, 4], out_name=f"conv{len(g.sg.tensors)}", options=opts)


def fp16_weights(g: SubgraphBuilder) -> int:
    w = g.const(f"w16_{len(g.sg.tensors)}", np.ones((4, 3, 3, 4), np.float16))
    return g.op("DEQUANTIZE", [w], [4, 3, 3, 4], out_name=f"w{len(g.sg.tensors)}")


def model(build) -> Model:  # type: ignore[no-untyped-def]
    mb = ModelBuilder()
    g = mb.subgraph("main")
    g.output(build(g))
    return mb.build()


def test_whole_graph_supported_takes_the_fp16_dequantizes_too() -> None:
    # "Scenario 1: Full Delegation": every node but the fp16 DEQUANTIZEs is supported.
    r = lint(model(lambda g: conv(g, g.input("x", [1, 8, 8, 4]), fp16_weights(g))))
    plan = r.plans[0]
    assert plan.delegated_nodes == {0, 1} and plan.delegated == {1}
    assert plan.final_partitions == 1 and r.verdict == "ready"
    assert r.ops[0].folded and r.ops[0].placement == "gpu"


def test_partial_graph_leaves_fp16_dequantizes_on_the_cpu_and_they_split_the_graph() -> None:
    # "Scenario 2": the DEQUANTIZE is a CPU node of the split, so the PAD that is ready before it
    # forms its own subset, and the largest subset is the two convs after REVERSE_V2.
    def build(g: SubgraphBuilder) -> int:
        x = g.input("x", [1, 8, 8, 4])
        padded = g.op("PAD", [x, g.const("p", np.zeros((4, 2), np.int32))], [1, 8, 8, 4], out_name="pad")
        a = conv(g, padded, fp16_weights(g))
        cut = g.op("REVERSE_V2", [a, g.const("axis", np.array([3], np.int32))], [1, 8, 8, 4], out_name="cut")
        w = g.const("w32", np.ones((4, 3, 3, 4), np.float32))
        return conv(g, conv(g, cut, w), w)

    r = lint(model(build))
    plan = r.plans[0]
    ops = {p.index: p for p in r.ops}
    assert [ops[i].op for i in sorted(plan.delegated_nodes)] == ["CONV_2D", "CONV_2D"]
    assert ops[1].op == "DEQUANTIZE" and ops[1].placement == "cpu" and ops[1].folded
    assert "left on the CPU" in ops[1].reasons[0]
    assert ops[0].op == "PAD" and ops[0].placement == "cpu"  # a subset of its own, not delegated
    # Taken nodes read nothing from the DEQUANTIZEs once re-pointed: CPU [0-3], GPU [4-5].
    assert plan.final_partitions == 2


def test_int8_constant_dequantize_is_a_node_of_its_partition() -> None:
    # Quantized ops on: a constant int8 DEQUANTIZE is a supported node, computed once at init, and
    # its output does not cross into the partition that reads it.
    def build(g: SubgraphBuilder) -> int:
        q = g.const("w8", np.ones((4, 3, 3, 4), np.int8), dtype="INT8", quant=(0.1, 0))
        w = g.op("DEQUANTIZE", [q], [4, 3, 3, 4], out_name="w")
        return conv(g, g.input("x", [1, 8, 8, 4]), w)

    r = lint(model(build), quantized=True)
    plan = r.plans[0]
    assert plan.delegated_nodes == {0, 1} and plan.final_partitions == 1
    assert [t.direction for t in plan.transfers] == ["to-gpu", "to-cpu"]  # the input and the output only
