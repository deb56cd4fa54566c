"""`gpulint inspect`: what a model holds, as data (JSON) and as text.

Everything here that comes from the model (names, descriptions, metadata keys) is untrusted:
it is cut to a bounded length and stripped of control characters before it is shown.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from gpulint.model.ir import Model, Quantization, Tensor
from gpulint.text import clean

SHOW_SCALES = 4


def _quant(q: Quantization | None) -> dict[str, Any] | None:
    if q is None or (not q.scale and not q.zero_point and not q.min and not q.max and q.custom is None):
        return None
    out: dict[str, Any] = {}
    if q.scale:
        out["channels" if q.per_channel else "scale"] = len(q.scale) if q.per_channel else q.scale[0]
        if q.per_channel:
            out["axis"] = q.quantized_dimension
            out["scales"] = q.scale[:SHOW_SCALES]
    if q.zero_point:
        out["zero_point"] = q.zero_point[0] if len(q.zero_point) == 1 else q.zero_point[:SHOW_SCALES]
    if q.min and q.max:
        out["range"] = [q.min[0], q.max[0]] if len(q.min) == 1 else f"{len(q.min)} per-channel ranges"
    if q.custom is not None:
        out["custom_bytes"] = len(q.custom)
    return out


def _tensor(index: int, t: Tensor) -> dict[str, Any]:
    return {
        "index": index,
        "name": clean(t.name),
        "dtype": t.type,
        "shape": t.shape,
        "shape_signature": t.shape_signature,
        "quantization": _quant(t.quantization),
    }


def summarize(model: Model, path: str, size: int) -> dict[str, Any]:
    ops: Counter[tuple[str, int]] = Counter()
    custom: Counter[tuple[str, int]] = Counter()
    subgraphs = []
    for si, sg in enumerate(model.subgraphs):
        sg_ops: Counter[str] = Counter()
        for op in sg.operators:
            oc = model.opcode(op)
            ops[(oc.name, oc.version)] += 1
            sg_ops[oc.name] += 1
            if oc.is_custom:
                custom[(oc.name, oc.version)] += 1
        subgraphs.append(
            {
                "index": si,
                "name": clean(sg.name),
                "ops": len(sg.operators),
                "tensors": len(sg.tensors),
                "inputs": [_tensor(i, sg.tensors[i]) for i in sg.inputs],
                "outputs": [_tensor(i, sg.tensors[i]) for i in sg.outputs],
                "dynamic_inputs": [clean(sg.tensors[i].name) for i in sg.inputs if sg.tensors[i].is_dynamic],
            }
        )

    weights: dict[str, dict[str, int]] = {}
    seen: set[int] = set()
    for sg in model.subgraphs:
        for t in sg.tensors:
            if t.buffer in seen or not len(model.buffers[t.buffer].data):
                continue
            seen.add(t.buffer)
            kind = str(t.type) + (" (sparse)" if t.sparsity is not None else "")
            w = weights.setdefault(kind, {"tensors": 0, "bytes": 0})
            w["tensors"] += 1
            w["bytes"] += len(model.buffers[t.buffer].data)

    return {
        "path": path,
        "bytes": size,
        "schema_version": model.version,
        "description": clean(model.description),
        "subgraphs": subgraphs,
        "ops": [{"op": clean(n), "version": v, "count": c} for (n, v), c in sorted(ops.items(), key=_by_count)],
        "custom_ops": [
            {"op": clean(n), "version": v, "count": c} for (n, v), c in sorted(custom.items(), key=_by_count)
        ],
        "weights": dict(sorted(weights.items(), key=lambda kv: -kv[1]["bytes"])),
        "weight_bytes": sum(w["bytes"] for w in weights.values()),
        "metadata": [
            {"name": clean(md.name), "bytes": len(model.buffers[md.buffer].data)} for md in model.metadata or []
        ],
        "signatures": [
            {
                "key": clean(sd.signature_key),
                "subgraph": sd.subgraph_index,
                "inputs": [clean(tm.name) for tm in sd.inputs],
                "outputs": [clean(tm.name) for tm in sd.outputs],
            }
            for sd in model.signature_defs or []
        ],
        "unknown_fields": [clean(u) for u in model.unknown],
    }


def _by_count(item: tuple[tuple[str, int], int]) -> tuple[int, str, int]:
    (name, version), count = item
    return (-count, name, version)


def _shape(t: dict[str, Any]) -> str:
    s = "[" + ", ".join(map(str, t["shape"])) + "]"
    sig = t["shape_signature"]
    if sig is not None and sig != t["shape"]:
        s += " signature [" + ", ".join(map(str, sig)) + "]"
    return s


def _quant_text(q: dict[str, Any] | None) -> str:
    if q is None:
        return ""
    if "channels" in q:
        return f"  per-channel ({q['channels']} scales, axis {q['axis']})"
    parts = []
    if "scale" in q:
        parts.append(f"scale {q['scale']:.6g}")
    if "zero_point" in q:
        parts.append(f"zero point {q['zero_point']}")
    return "  " + ", ".join(parts) if parts else ""


def render_text(s: dict[str, Any]) -> str:
    lines = [f"{s['path']}: {s['bytes']:,} bytes, TFLite schema v{s['schema_version']}"]
    if s["description"]:
        lines.append(f"  description: {s['description']}")
    for sg in s["subgraphs"]:
        name = f' "{sg["name"]}"' if sg["name"] else ""
        lines.append(f"  subgraph {sg['index']}{name}: {sg['ops']} ops, {sg['tensors']} tensors")
        for role in ("inputs", "outputs"):
            for t in sg[role]:
                name = t["name"] or "<unnamed>"
                lines.append(f"    {role[:-1]:<6} {name}  {t['dtype']}  {_shape(t)}{_quant_text(t['quantization'])}")
        if sg["dynamic_inputs"]:
            lines.append(f"    dynamic inputs (shape signature with -1): {', '.join(sg['dynamic_inputs'])}")
    lines.append("  ops:")
    width = max((len(f"{o['op']} v{o['version']}") for o in s["ops"]), default=0)
    for o in s["ops"]:
        lines.append(f"    {o['op'] + ' v' + str(o['version']):<{width}}  {o['count']:>4}")
    if s["weights"]:
        parts = [f"{k} {v['bytes']:,} B in {v['tensors']} tensors" for k, v in s["weights"].items()]
        lines.append(f"  weights: {s['weight_bytes']:,} bytes: " + "; ".join(parts))
    else:
        lines.append("  weights: none")
    if s["custom_ops"]:
        lines.append("  custom ops: " + ", ".join(f"{o['op']} v{o['version']} x{o['count']}" for o in s["custom_ops"]))
    if s["metadata"]:
        lines.append("  metadata: " + ", ".join(f"{m['name']} ({m['bytes']:,} B)" for m in s["metadata"]))
    for sd in s["signatures"]:
        lines.append(
            f"  signature {sd['key']}: subgraph {sd['subgraph']}, inputs {', '.join(map(str, sd['inputs']))}; "
            f"outputs {', '.join(map(str, sd['outputs']))}"
        )
    for u in s["unknown_fields"]:
        lines.append(f"  warning: {u} (gpulint fix would drop it)")
    return "\n".join(lines)
