"""STABLEHLO_COMPOSITE on LiteRT's GPU accelerator: the high-level ops (`odml.*`) that litert-torch's
generative exports mark in their graphs, each with a decomposition subgraph the CPU runs.

ML Drift's delegate takes a composite whole by its name (ml_drift_delegate's CompositeOptions:
odml.rms_norm, odml.group_norm, which it reads as LayerNorm or GroupNorm, and
odml.scaled_dot_product_attention); any other name stays on the CPU, listed as
"STABLEHLO_COMPOSITE: <name>". Measured on ai-edge-litert 2.3.0's accelerator (WebGPU on Mesa
lavapipe, float and half alike), one composite in a model of its own:
- odml.l2_norm, odml.layer_norm, odml.gelu, any other name: refused by name;
- odml.rms_norm whose scale is not a constant: refused, "src has no data." (CheckPopulateTensor);
- odml.group_norm without an epsilon attribute: refused, "LayerNorm is missing epsilon."
  (support_layer_norm.cc);
- odml.rms_norm with a constant scale, odml.group_norm with its epsilon, and
  odml.scaled_dot_product_attention with any operands: taken, and the process then dies compiling
  the graph (SIGSEGV, no CPU fallback), whatever the decomposition holds. Every decoder and encoder
  of the generative corpus has one of these, so LiteRT 2.3's accelerator dies on all of them. What
  a phone's OpenCL or Metal build of the accelerator does with them is not measured here.
"""

from __future__ import annotations

from typing import Any

from flatbuffers import flexbuffers

from gpulint.rules.checks.registry import check
from gpulint.rules.signature import OpSignature

TAKEN_WHOLE = ("odml.rms_norm", "odml.group_norm", "odml.scaled_dot_product_attention")


def composite(sig: OpSignature) -> tuple[str, dict[str, Any]]:
    """The composite's name and its attributes (a flexbuffer map; empty where it has none or they
    do not decode)."""
    opts = sig.operator.builtin_options_2
    values = opts.values if opts is not None else {}
    name = str(values.get("name") or "")
    raw = values.get("composite_attributes") or []
    try:
        attributes = flexbuffers.Loads(bytes(raw)) if raw else {}
    except Exception:  # a malformed flexbuffer: the delegate reads no attribute from it either
        attributes = {}
    return name, attributes if isinstance(attributes, dict) else {}


@check
def md_composite(sig: OpSignature) -> str | None:
    """Which composites the accelerator takes (module docstring)."""
    name, attributes = composite(sig)
    if name not in TAKEN_WHOLE:
        return name or "a composite with no name"
    scale = sig.input(1)
    if name == "odml.rms_norm" and scale is not None and not scale.is_const:
        return "src has no data."
    if name == "odml.group_norm" and "epsilon" not in attributes:
        return "LayerNorm is missing epsilon."
    return None


@check
def md_composite_dies(sig: OpSignature) -> str | None:
    """A composite the accelerator takes kills its process (module docstring)."""
    if md_composite(sig) is not None:
        return None
    name, _ = composite(sig)
    return (
        f"the accelerator takes `{name}` whole, and its process dies compiling the graph (SIGSEGV, no CPU "
        "fallback; measured on ai-edge-litert 2.3.0); `gpulint fix --passes inline-composites` runs its "
        "decomposition in its place"
    )
