"""Graph outputs that the GPU runtimes' fusion passes lose: a tensor the model hands back that is also
read, once, inside the graph, by an op the runtime merges into the one that makes it. Merged, the
value is never written, and the graph output holds zeros, stale memory or an operand.

- The classic delegate (gl/compiler/fuse_inline.cc FuseAutoOutputWithInline and fuse_auto_input.cc
  FuseAutoInput) merges a one-consumer value's producer and consumer into one shader and checks
  consumers, never graph outputs (TF#44802: zeros). Before that, the common transformations
  (common/transformations/model_transformations.cc: merge_convolution_with_mul / _with_add) fold a
  constant MUL or ADD into the conv before it, and the conv's output, a graph output, is gone: the
  OpenGL delegate fails at init, "Output tensor is not found in the graph." (gl_delegate.cc 226).
- LiteRT's accelerator (ML Drift, whose fusion is closed source) on two measured shapes: an ADD of two
  runtime tensors read by a reduction returns its first operand (google-ai-edge/LiteRT#8599), and a
  conv read only by a constant MUL or ADD leaves its output unwritten.

Measured on the GL delegate of mediapipe 1.2.2 (llvmpipe) and ai-edge-litert 2.3.0's accelerator
(lavapipe): tests/test_output_fusion.py. The `output-copy` pass gives each such output a copy op of
its own, so the value has two readers and nothing merges it away.
"""

from __future__ import annotations

from typing import Any

from gpulint.rules.checks.registry import graph_check
from gpulint.rules.signature import Graph, OpSignature

CONVS = ("CONV_2D", "DEPTHWISE_CONV_2D")
# GL shaders whose output the inline fusion takes (measured as producers: ADD and both convs)
GL_PRODUCERS = ("ADD", *CONVS)
# GL shaders with an AUTO input, which FuseAutoInput / FuseAutoOutputWithInline merge into their
# producer: the elementwise ops (gl/kernels/elementwise.cc, relu.cc, add.cc, mul.cc). Measured as the
# reader: RELU, TANH, MUL and ADD with a constant, MUL with a runtime operand.
GL_INLINE = (
    "ADD", "SUB", "MUL", "DIV", "RELU", "RELU6", "RELU_N1_TO_1", "TANH", "LOGISTIC", "ABS", "ELU",
    "EXP", "HARD_SWISH", "LOG", "NEG", "RSQRT", "SIN", "COS", "SQRT", "SQUARE",
)  # fmt: skip
MD_REDUCTIONS = ("SUM", "MEAN", "REDUCE_MAX")  # LiteRT#8599, measured on 2.3 (others not)


def only_reader(graph: Graph, t: int) -> OpSignature | None:
    readers = graph.consumers.get(t, [])
    return graph.signature(readers[0]) if len(readers) == 1 else None


def _float_output(sig: OpSignature) -> int | None:
    """The op's one output where it is a FLOAT32 graph output, else None (what was measured)."""
    if len(sig.outputs) != 1 or not sig.outputs[0].is_graph_output or sig.outputs[0].dtype != "FLOAT32":
        return None
    return sig.outputs[0].index


def _with_linear_const(reader: OpSignature, t: int) -> bool:
    """MUL/ADD of `t` and a scalar or per-channel constant: what merge_convolution_with_mul/_add fold."""
    if reader.op not in ("MUL", "ADD") or len(reader.inputs) != 2:
        return False
    other = next((x for x in reader.inputs if x.index != t), None)
    return other is not None and other.is_const and all(d == 1 for d in other.shape[:-1])


def gl_merged_into_conv(graph: Graph, sig: OpSignature) -> OpSignature | None:
    """The constant MUL/ADD the common transformations fold into this conv, taking its graph output."""
    t = _float_output(sig)
    if sig.op not in CONVS or t is None:
        return None
    reader = only_reader(graph, t)
    return reader if reader is not None and _with_linear_const(reader, t) else None


def gl_fused_output(graph: Graph, sig: OpSignature) -> OpSignature | None:
    """The reader the GL compiler merges this op's graph output into (the output then stays zeros)."""
    t = _float_output(sig)
    if sig.op not in GL_PRODUCERS or t is None or gl_merged_into_conv(graph, sig) is not None:
        return None
    reader = only_reader(graph, t)
    if reader is None or reader.op not in GL_INLINE or sum(x.index == t for x in reader.inputs) != 1:
        return None
    # FuseAutoInput skips a merge that would read one value twice (a diamond): measured exact.
    made_from = {x.index for x in sig.runtime_inputs}
    if any(x.index in made_from for x in reader.runtime_inputs if x.index != t):
        return None
    return reader


def md_fused_output(graph: Graph, sig: OpSignature) -> OpSignature | None:
    """The reader LiteRT's accelerator loses this op's graph output to (measured shapes only)."""
    t = _float_output(sig)
    if t is None:
        return None
    reader = only_reader(graph, t)
    if reader is None:
        return None
    runtime = sig.runtime_inputs
    two_runtime = sig.op == "ADD" and len(runtime) == 2 and runtime[0].index != runtime[1].index
    if two_runtime and reader.op in MD_REDUCTIONS:
        return reader
    if sig.op in CONVS and reader.op in ("MUL", "ADD") and len(reader.runtime_inputs) == 1:
        return reader
    return None


def lost_output(graph: Graph, sig: OpSignature) -> OpSignature | None:
    """Any runtime's: the `output-copy` pass rewrites these."""
    return gl_merged_into_conv(graph, sig) or gl_fused_output(graph, sig) or md_fused_output(graph, sig)


@graph_check
def gl_merged_graph_output(graph: Any, delegated: set[int]) -> tuple[int | None, str] | None:
    """common/transformations merge_convolution_with_mul / _with_add fold a constant MUL or ADD into the
    conv before it (BuildFinalModel, every backend); where the conv's output is a graph output the
    OpenGL delegate then cannot bind it: "Output tensor is not found in the graph." (gl_delegate.cc 226;
    measured here). The OpenCL backend was not measured."""
    for n in sorted(delegated):
        reader = gl_merged_into_conv(graph, graph.signature(n))
        if reader is not None and reader.index in delegated:
            return n, "Output tensor is not found in the graph."
    return None
