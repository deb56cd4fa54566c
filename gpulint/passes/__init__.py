"""Rewrite passes: one module per pass, each declaring whether it is safe.

A pass changes the IR in place and returns a PassResult: one line per change it made (none
when it found nothing to do, so the pipeline can run passes to a fixed point) and one per
candidate it left alone, with the reason. Safe passes keep the model's interface and its outputs within fp32 rounding;
unsafe ones change the interface or the precision and run only with --unsafe-fixes. Opt-in
passes are safe (held to the same fp32 proof) but run only when named (--passes) or with
--unsafe-fixes: the half-precision passes, which add ops whose gain shows only in half.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from gpulint.model.ir import Model


@dataclass(frozen=True)
class PassOptions:
    # dequantize-constants: leave fp16 constants behind their DEQUANTIZE. Off here, because the
    # executor needs float32 constants; `gpulint fix` turns it on by default (--fold-fp16 not).
    keep_fp16: bool = False
    # static-shapes: input name -> the shape to pin it to (`--input-shape NAME=1,224,224,3`).
    input_shapes: tuple[tuple[str, tuple[int, ...]], ...] = ()
    # static-shapes: pin -1 input dims even when the interpreter does not refuse the graph
    # (by default the pass leaves the interface alone unless the graph is refused).
    pin_shapes: bool = False
    # The half-precision passes: tensor name -> the largest |value| it held on the calibration
    # inputs (`gpulint fix --inputs X.npz`, measured on the CPU interpreter).
    calibration: tuple[tuple[str, float], ...] = ()


@dataclass
class PassResult:
    changes: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Pass:
    name: str
    safe: bool
    summary: str
    run: Callable[[Model, PassOptions], PassResult]
    opt_in: bool = False  # safe, but run only when named or with --unsafe-fixes
    preserves: str = ""  # what the rewritten model keeps (default: by `safe`, see `preserved`)


def preserved(p: Pass) -> str:
    """What a pass keeps of the model, for `fix --help`, the pass list and docs/commands/fix.md."""
    if p.preserves:
        return p.preserves
    if p.safe:
        return "the interface; every output within fp32 rounding"
    return "what the model computes; not its interface or its precision"


def registry() -> dict[str, Pass]:
    """Every pass, in the order the pipeline runs them."""
    from gpulint.passes import (
        broadcast_to,
        dense_grouped_conv,
        densify_constants,
        dequantize_constants,
        fold_atrous,
        fuse_activations,
        inline_composites,
        output_copy,
        pad_channels,
        quantized_to_float,
        rank4,
        remove_identity,
        rgba_input,
        scale_logits,
        scaled_variance,
        split_reduction,
        stable_softmax,
        static_shapes,
        tile_broadcast,
    )

    passes = [
        static_shapes.PASS,
        inline_composites.PASS,
        densify_constants.PASS,
        dequantize_constants.PASS,
        remove_identity.PASS,
        fold_atrous.PASS,
        dense_grouped_conv.PASS,
        tile_broadcast.PASS,
        broadcast_to.PASS,
        output_copy.PASS,
        rank4.PASS,
        fuse_activations.PASS,
        pad_channels.PASS,
        rgba_input.PASS,
        quantized_to_float.PASS,
        stable_softmax.PASS,
        scaled_variance.PASS,
        split_reduction.PASS,
        scale_logits.PASS,
    ]
    return {p.name: p for p in passes}
