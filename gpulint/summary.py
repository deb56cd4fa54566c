"""`gpulint inspect`: what a model holds, as data (JSON) and as text.

Everything here that comes from the model (names, descriptions, metadata keys) is untrusted:
it is cut to a bounded length and stripped of control characters before it is shown.
"""

from __future__ import annotations

import ast
import io
import json
import zipfile
import zlib
from collections import Counter
from typing import Any

from gpulint.model.ir import Model, Quantization, Tensor
from gpulint.text import clean

SHOW_SCALES = 4
SHOW_MEMBERS = 20
MAX_METADATA_JSON = 1 << 20  # a metadata.json bigger than this is not read (a zip bomb stays packed)


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


def describe_appended(data: bytes | memoryview) -> dict[str, Any] | None:
    """What another tool appended after the model: its size, and for a zip its member names
    (TFLite Support's associated files) and the keys of a metadata.json (Ultralytics)."""
    if not len(data):
        return None
    out: dict[str, Any] = {"bytes": len(data), "zip": None, "metadata_json_keys": None}
    try:
        with zipfile.ZipFile(io.BytesIO(bytes(data))) as z:
            infos = z.infolist()
            out["zip"] = [clean(i.filename) for i in infos[:SHOW_MEMBERS]]
            out["zip_members"] = len(infos)
            meta = next((i for i in infos if i.filename == "metadata.json"), None)
            if meta is not None and meta.file_size <= MAX_METADATA_JSON:
                out["metadata_json_keys"] = _keys(z.read(meta))
    except (
        zipfile.BadZipFile,
        zipfile.LargeZipFile,
        zlib.error,  # a member whose deflate stream is damaged
        OSError,
        EOFError,
        ValueError,
        RuntimeError,
        NotImplementedError,
    ):
        pass  # not a zip (or one this zipfile cannot read): its size is all that is shown
    return out


def _keys(text: bytes) -> list[str] | None:
    """The top-level keys of a metadata.json: JSON, or the Python literal older Ultralytics wrote."""
    try:
        value = json.loads(text)
    except ValueError:
        try:
            value = ast.literal_eval(text.decode("utf-8", "replace"))
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            return None
    if not isinstance(value, dict):
        return None
    return [clean(str(k), 60) or "" for k in list(value)[:SHOW_MEMBERS]]


def appended_text(info: dict[str, Any]) -> str:
    """ "1,234 bytes (a zip: metadata.json; metadata.json keys: task, imgsz)"."""
    text = f"{info['bytes']:,} bytes"
    if info["zip"] is not None:
        names = ", ".join(info["zip"]) or "no members"
        more = info["zip_members"] - len(info["zip"])
        text += f" (a zip: {names}{f' and {more} more' if more > 0 else ''}"
        if info["metadata_json_keys"] is not None:
            text += "; metadata.json keys: " + ", ".join(info["metadata_json_keys"])
        text += ")"
    return text


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
        "appended": describe_appended(model.appended),
    }


def _by_count(item: tuple[tuple[str, int], int]) -> tuple[int, str, int]:
    (name, version), count = item
    return (-count, name, version)


MAX_DIMS_SHOWN = 8  # a damaged file's shape can be a million dims long: one line, not megabytes


def _dims(dims: list[int]) -> str:
    if len(dims) <= MAX_DIMS_SHOWN:
        return "[" + ", ".join(map(str, dims)) + "]"
    return "[" + ", ".join(map(str, dims[:MAX_DIMS_SHOWN])) + f", ...] (rank {len(dims)})"


def _shape(t: dict[str, Any]) -> str:
    s = _dims(t["shape"])
    sig = t["shape_signature"]
    if sig is not None and sig != t["shape"]:
        s += " signature " + _dims(sig)
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
    if s["appended"]:
        lines.append(f"  appended after the model: {appended_text(s['appended'])} (gpulint fix keeps them)")
    for u in s["unknown_fields"]:
        lines.append(f"  warning: {u} (gpulint fix would drop it)")
    return "\n".join(lines)
