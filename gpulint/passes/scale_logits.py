"""scale-logits: an attention's 1/sqrt(d) applied to the query before Q.K^T instead of after it.

    s = BATCH_MATMUL(q, k); MUL(s, c)       ->  BATCH_MATMUL(MUL(q, c), k)
                            (or DIV(s, c))       (c -> 1 / c)

Keras' MultiHeadAttention as the TFLite converter writes it, and attention spelled out in PyTorch
(`q @ k.transpose(-2, -1) / math.sqrt(d)`), scale the logits after the product. In half the
product is stored before the scale: it overflows sqrt(d) times sooner than the logits SOFTMAX
reads (the TF corpus's transformer_block on inputs in +-300: Q.K^T 4.6e5, the scaled logits 1.3e5).
Scaling q first, every value stored is at most the logits' size. In exact arithmetic
(q c) k = (q k) c; in float the rounding of one product moves (proven on the CPU interpreter to
fp32 rounding). Logits that are themselves past 65504 stay so: `fix --inputs` then names the ops
to keep in float (keep_float).

Only where the MUL / DIV by a one-value float constant is the product's one reader and the product
no model output; the model's outputs keep their tensors and names.
"""

from __future__ import annotations

import numpy as np

from gpulint.model.ir import Model, Operator, Subgraph
from gpulint.passes import Pass, PassOptions, PassResult
from gpulint.passes.edit import add_const, const_value, consumers, only_reader, prune
from gpulint.passes.half import Magnitudes, binary, insert_before, is_float, new_tensor


def _scale(model: Model, sg: Subgraph, bmm: Operator) -> tuple[Operator, float] | None:
    """The MUL or DIV by a one-value float constant that alone reads the product, as a factor."""
    r = only_reader(sg, bmm.outputs[0], consumers(sg))
    if r is None:
        return None
    op = sg.operators[r]
    name = model.op_name(op)
    if name not in ("MUL", "DIV") or len(op.inputs) != 2 or len(op.outputs) != 1:
        return None
    opts = op.builtin_options
    if opts is not None and opts.values.get("fused_activation_function") not in (None, "NONE"):
        return None
    other = [t for t in op.inputs if t != bmm.outputs[0]]
    if len(other) != 1 or (name == "DIV" and op.inputs[0] != bmm.outputs[0]):
        return None
    value = const_value(model, sg, other[0])
    if value is None or value.size != 1 or value.dtype != np.float32 or float(value.ravel()[0]) == 0.0:
        return None
    c = float(value.ravel()[0])
    return op, (c if name == "MUL" else 1.0 / c)


def run(model: Model, options: PassOptions) -> PassResult:
    changes: list[str] = []
    for si, sg in enumerate(model.subgraphs):
        mags = Magnitudes(model, si, options)
        for bmm in [op for op in sg.operators if model.op_name(op) == "BATCH_MATMUL"]:
            if len(bmm.inputs) != 2 or len(bmm.outputs) != 1 or min(bmm.inputs) < 0:
                continue
            q, s = bmm.inputs[0], bmm.outputs[0]
            if not is_float(sg, q, bmm.inputs[1], s) or s in sg.outputs:
                continue
            found = _scale(model, sg, bmm)
            if found is None:
                continue
            mul, c = found
            seen, after = mags.of(s), mags.of(mul.outputs[0])
            scaled = new_tensor(sg, sg.tensors[q], "scaled")
            factor = add_const(model, sg, f"{sg.tensors[q].name}/logit_scale", np.array([c], np.float32))
            insert_before(sg, bmm, [binary(model, "MUL", q, factor, scaled)])
            bmm.inputs = [scaled, bmm.inputs[1]]
            bmm.outputs = [mul.outputs[0]]
            sg.operators.remove(mul)
            sizes = ""
            if seen is not None and after is not None:
                sizes = f" (the product reached {seen[0]:.3g}, the logits {after[0]:.3g} {seen[1]})"
            oi = sg.operators.index(bmm)
            changes.append(
                f"subgraph {si}: BATCH_MATMUL (op {oi}) now reads `{sg.tensors[q].name}` x{c:.3g}, the scale its "
                f"reader {model.op_name(mul)} applied to the product{sizes}"
            )
    if changes:
        prune(model)
    return PassResult(changes, [])


PASS = Pass(
    "scale-logits",
    True,
    "apply an attention's scale to the query before BATCH_MATMUL instead of to the product after it",
    run,
    opt_in=True,
    preserves="the interface; every output within fp32 rounding (exact in exact arithmetic)",
)
