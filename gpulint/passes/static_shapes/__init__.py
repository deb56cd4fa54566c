"""Make a graph the interpreter refuses for the GPU delegate static: pin the inputs, fold the shape math.

A delegate that supports only static-sized tensors is refused for the whole graph when any op's
Prepare leaves a tensor dynamic-sized (gpulint/rules/prepare.py models which). Converter outputs
do that in two ways this pass undoes:

- A dynamic batch (shape_signature -1) with RESHAPE targets computed at run time:
  SHAPE -> STRIDED_SLICE -> PACK -> RESHAPE (also through CONCATENATION, GATHER, CAST, arithmetic).
  The inputs are pinned (`--input-shape NAME=1,224,224,3`; by default every -1 becomes 1, and the
  pass says so), the graph runs once on the LiteRT interpreter at those shapes, and every tensor
  whose value follows from shapes alone (SHAPE/RANK of a tensor whose shape does not depend on
  data, and the pure ops over such values and constants) becomes a constant with the value the
  interpreter computed. Every tensor of the main subgraph gets the shape the interpreter gave it
  (shape and shape_signature).
- A TensorList write in a loop body, lowered by the converter to
  CONCATENATION(SLICE(x, 0, [i, -1..]), y, SLICE(x, [i + n, 0..], -1)): two slices whose sizes
  follow the loop counter, so dynamic-sized on every iteration. It becomes
  DYNAMIC_UPDATE_SLICE(x, y, [.., i, ..]), whose output has x's shape at Prepare. The two agree
  for every i the original accepts (0 <= i <= len - n); for any other i the original fails at
  run time (SLICE's bounds check) where DYNAMIC_UPDATE_SLICE clamps.

The result must leave the interpreter nothing to refuse (find_refusal is None); otherwise the
model is left as it was and the pass says which op still makes a dynamic-sized tensor and why.
Sizes that depend on data (UNIQUE, WHERE, a NON_MAX_SUPPRESSION whose max_output_size is computed)
cannot be pinned by any input shape, and are reported as such.

Called subgraphs (WHILE/IF bodies): the TensorList rewrite applies in any of them. Shape
arithmetic is folded in a subgraph the main subgraph calls (once): it runs alone on the interpreter,
as a model of its own, on the operands the main subgraph's run passed it (a loop body: its first
iteration). Only values that follow from those shapes are folded, and a loop body whose loop
variables change shape is refused anyway, so what the first iteration gave holds for every one.
A subgraph called from another called subgraph, or from two ops, keeps its shape arithmetic (the
interpreter's Python API shows only the main subgraph's tensors, so there would be no values to
fold to), and a model it leaves refused is left alone, saying so.

Safety: with every input shape static or pinned to the shape the model already declares, outputs
are the same bits; pinning a -1 changes the interface (the model then takes only that shape),
which is what the pass is for, and fix runs it by default only when the graph is refused.

The pass is this file: pin the inputs (pin.py), fold the shape arithmetic (shape_math.py),
rewrite the TensorList writes (list_writes.py), then ask find_refusal whether anything is left.
"""

from __future__ import annotations

import dataclasses

from gpulint import reference
from gpulint.model.ir import Model
from gpulint.passes import Pass, PassOptions, PassResult
from gpulint.passes.static_shapes import list_writes, pin, shape_math
from gpulint.rules.prepare import Refusal, find_refusal

# Ops whose output sizes depend on the values of their input, whatever the input shapes.
DATA_DEPENDENT = {
    "UNIQUE": "its output's size is the number of distinct values in its input",
    "WHERE": "its output's size is the number of true elements of its input",
    "NON_MAX_SUPPRESSION_V4": "its outputs are as long as its max_output_size operand, computed here",
    "NON_MAX_SUPPRESSION_V5": "its outputs are as long as its max_output_size operand, computed here",
}


def _why_left(refusal: Refusal) -> str:
    """What still makes the interpreter refuse the delegate, and whether pinning could ever help."""
    text = (
        f"{refusal.op} (op {refusal.op_index} of subgraph {refusal.subgraph}) still makes `{refusal.tensor}` "
        f"dynamic-sized: {refusal.why}"
    )
    culprits = [refusal.op] + [dd for dd in DATA_DEPENDENT if f"by {dd} " in refusal.why]
    for dd in culprits:
        if dd in DATA_DEPENDENT:
            return f"{text}; {dd}: {DATA_DEPENDENT[dd]}, which depends on the data, so no input shape makes it static"
    if refusal.subgraph != 0 or "subgraph" in refusal.why:
        return (
            f"{text}; in called subgraphs only shape arithmetic that follows from the shapes the main "
            "subgraph passes in is folded (not in a subgraph called from another one, or called twice)"
        )
    return text


def run(model: Model, options: PassOptions) -> PassResult:
    from gpulint.model.ir import clone

    if not model.subgraphs:
        return PassResult()
    refusal = find_refusal(model)
    if refusal is None and not options.pin_shapes and not options.input_shapes:
        return PassResult()  # not refused: the interface stays as it is unless asked
    candidate = clone(model)
    changes = [f"subgraph 0: {line}" for line in pin.pin_inputs(candidate, options.input_shapes)]
    if refusal is None and not changes and not options.pin_shapes:
        return PassResult()
    callees = [k for k in shape_math.callees(candidate) if shape_math.has_shape_work(candidate, k)]
    skipped: list[str] = []
    if changes or callees or shape_math.has_shape_work(candidate, 0):
        try:
            values = shape_math.probe(candidate)
        except reference.ReferenceError as e:
            why = f"left the model as it is: the interpreter cannot run it at the pinned shapes ({e})"
            return PassResult([], [why])
        changes += shape_math.fold(candidate, values)
        if callees:
            folded, skipped = shape_math.fold_callees(candidate, values)
            changes += folded
    written, not_written = list_writes.rewrite(candidate)
    changes += written
    skipped += not_written
    after = find_refusal(candidate)
    if after is not None:
        return PassResult([], [f"left the model as it is: {_why_left(after)}", *skipped])
    if not changes:
        return PassResult([], skipped)
    for f in dataclasses.fields(Model):
        setattr(model, f.name, getattr(candidate, f.name))
    return PassResult(changes, skipped)


PASS = Pass(
    "static-shapes",
    True,
    "pin dynamic input dims (--input-shape), fold shape arithmetic into constants, TensorList writes -> "
    "DYNAMIC_UPDATE_SLICE, so the interpreter does not refuse the delegate",
    run,
)
