"""What the executor cannot read is said, not misread (the generative corpus's int4 exports, issue #47):
a constant stored as raw bytes (INT4) is an op the executor cannot lower, named, and a model whose
fields the installed schema does not know is not cut into partitions, which would drop them."""

from __future__ import annotations

import pytest
from helpers import conv_model, opencl_device

from gpulint.executor import ExecutorError
from gpulint.executor.graph import GraphView
from gpulint.model.build import ModelBuilder
from gpulint.partitioned import PartitionedRunner


def test_a_raw_int4_constant_is_refused_by_name() -> None:
    mb = ModelBuilder()
    g = mb.subgraph("main")
    x = g.input("x", [1, 8])
    w = g.const("w_int4", bytes(16), dtype="INT4", shape=[4, 8], quant=(0.1, 0))
    g.output(g.op("FULLY_CONNECTED", [x, w, -1], [1, 4]))
    view = GraphView(mb.build())
    with pytest.raises(
        ExecutorError, match=r"its constant `w_int4` \(INT4\) is stored in a form the executor cannot read"
    ):
        view.float_const(w)


def test_a_model_with_unknown_fields_is_not_partitioned() -> None:
    device, why = opencl_device()
    if device is None:
        pytest.skip(why)
    model = conv_model()
    model.unknown = ["subgraph 0 tensor 1: quantization details type 2 is not in the installed schema"]
    with pytest.raises(ExecutorError, match="cutting it into partitions would drop: subgraph 0 tensor 1: quantization"):
        PartitionedRunner(model, device)
