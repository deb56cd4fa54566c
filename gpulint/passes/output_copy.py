"""Give a graph output that is also read inside the graph a copy of its own (GPU810, GPU811).

    y = ADD(x, s) -> returned, and SUM(y)   =>   y' = ADD(x, s); SUM(y'); y = MUL(y', 1.0) -> returned

Both GPU runtimes merge an op into the one that feeds it when that value has one reader, and
neither asks whether the value is also a graph output: the classic OpenGL compiler then never
writes it (zeros), a constant MUL/ADD folded into a conv takes the conv's output with it (init
failure), and LiteRT's accelerator hands back another value (google-ai-edge/LiteRT#8599). With the
copy, the computed value has two readers, so nothing merges it away, and the returned tensor keeps
its name and index. MUL by 1.0 is exact in float (NaN, inf and -0 included). Opt-in: it adds an op
per such output; only the outputs gpulint.rules.checks.fusion finds are copied.
"""

from __future__ import annotations

import numpy as np

from gpulint.model.ir import Model
from gpulint.passes import Pass, PassOptions, PassResult
from gpulint.passes.edit import add_const, new_op
from gpulint.passes.layout import like
from gpulint.rules.signature import Graph


def run(model: Model, options: PassOptions) -> PassResult:
    from gpulint.rules.checks.fusion import lost_output

    result = PassResult()
    for si, sg in enumerate(model.subgraphs):
        graph = Graph.of(model, si)
        found = [(sig, reader) for sig in graph.signatures() if (reader := lost_output(graph, sig)) is not None]
        for sig, reader in found:
            out = sig.operator.outputs[0]
            computed = like(sg, out, list(sg.tensors[out].shape), "computed", sg.tensors[out].shape_signature)
            sig.operator.outputs[0] = computed
            for op in sg.operators:
                op.inputs = [computed if t == out else t for t in op.inputs]
            one = add_const(model, sg, f"{sg.tensors[out].name}/one", np.ones([1], np.float32))
            copy = new_op(model, "MUL", [computed, one], [out], {"fused_activation_function": "NONE"}, "MulOptions")
            i = next(i for i, o in enumerate(sg.operators) if o is sig.operator)
            sg.operators.insert(i + 1, copy)
            result.changes.append(
                f"subgraph {si}: graph output `{sg.tensors[out].name}` of `{sig.op}` (op {sig.index}) copied, "
                f"so `{reader.op}` (op {reader.index}) and the output no longer share it"
            )
    return result


PASS = Pass(
    "output-copy",
    True,
    "copy a graph output that one op inside the graph also reads, which the GPU runtimes' fusion loses "
    "(GPU810, GPU811)",
    run,
    opt_in=True,
    preserves="the interface; every output exactly (a MUL by 1.0)",
)
