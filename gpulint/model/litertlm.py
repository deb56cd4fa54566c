"""LiteRT-LM bundles (`.litertlm`): the TFLite models inside them, read in place.

A bundle is the magic `LITERTLM`, its version (three little-endian uint32), at byte 24 the end of
its header (uint64), and from byte 32 the header: a flatbuffer (LiteRT-LM's
schema/core/litertlm_header_schema.fbs) whose `section_metadata.objects` list each section's
byte range, data type and key/value items (a TFLite model's `model_type`: `tf_lite_prefill_decode`,
`tf_lite_embedder`, ...). The sections follow the header, each at its own offset. Only the fields
read here are decoded, with flatbuffers' generic Table accessors (LiteRT-LM's Python package is not a
dependency of gpulint).

A member model is named `BUNDLE#N`, N its section index, wherever gpulint takes a model path.
"""

from __future__ import annotations

import mmap
import os
import struct
from dataclasses import dataclass

from flatbuffers import number_types as nt
from flatbuffers.table import Table

from gpulint.model.errors import ModelError

MAGIC = b"LITERTLM"
HEADER_BEGIN = 32
TFLITE_MODEL = 3  # AnySectionDataType.TFLiteModel
STRING_VALUE = 9  # VData.StringValue
SUFFIX = ".litertlm"


@dataclass(frozen=True)
class Section:
    index: int
    begin: int
    end: int
    data_type: int
    model_type: str | None  # the section's `model_type` item, where it has one


def is_bundle(path: str | os.PathLike[str]) -> bool:
    return str(path).lower().endswith(SUFFIX)


def sections(data: bytes | mmap.mmap, what: str = "the bundle") -> list[Section]:
    """Every section of a bundle's bytes; ModelError where the header is not a bundle's."""
    if bytes(data[:8]) != MAGIC:
        raise ModelError(f"{what} does not start with LiteRT-LM's magic {MAGIC.decode()}")
    if len(data) < HEADER_BEGIN:
        raise ModelError(f"{what} ends inside its header ({len(data)} bytes)")
    (end,) = struct.unpack_from("<Q", data, 24)
    if not HEADER_BEGIN < end <= len(data):
        raise ModelError(f"{what}'s header ends at byte {end}, outside the file's {len(data)} bytes")
    header = bytearray(data[HEADER_BEGIN:end])
    try:
        root = Table(header, struct.unpack_from("<I", header, 0)[0])  # a flatbuffer starts with its root's offset
        meta = _child(root, 6)
        out = []
        for i, obj in enumerate(_tables(meta, 4) if meta is not None else []):
            begin, stop = _scalar(obj, 6, nt.Uint64Flags), _scalar(obj, 8, nt.Uint64Flags)
            out.append(Section(i, begin, stop, _scalar(obj, 10, nt.Uint8Flags), _model_type(obj)))
    except (IndexError, struct.error, ValueError) as e:
        raise ModelError(f"{what}'s header is not a LiteRT-LM header flatbuffer ({e})") from None
    for s in out:
        if not 0 <= s.begin <= s.end <= len(data):
            raise ModelError(f"{what}'s section {s.index} spans bytes {s.begin}..{s.end}, outside the file")
    return out


def models(path: str | os.PathLike[str]) -> list[Section]:
    """The TFLite model sections of the bundle at `path`."""
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        return [s for s in sections(m, str(path)) if s.data_type == TFLITE_MODEL]


def member(path: str) -> tuple[str, int] | None:
    """(bundle, section index) for a `BUNDLE#N` name, else None."""
    bundle, sep, index = path.rpartition("#")
    if not sep or not is_bundle(bundle) or not index.isdigit():
        return None
    return bundle, int(index)


def member_bytes(bundle: str, index: int) -> bytes:
    """The bytes of the bundle's TFLite model in section `index`."""
    found = models(bundle)
    hit = next((s for s in found if s.index == index), None)
    if hit is None:
        there = ", ".join(str(s.index) for s in found) or "none"
        raise ModelError(f"section {index} of {bundle} is no TFLite model (its TFLite sections: {there})")
    return _read(bundle, hit)


def model_bytes(path: str | os.PathLike[str]) -> bytes | None:
    """The TFLite model's bytes where `path` names one inside a bundle (`BUNDLE#N`, or a bundle of
    one model), for a runtime that opens files; None for any other path."""
    found = _section_of(path)
    return None if found is None else _read(*found)


def model_size(path: str | os.PathLike[str]) -> int:
    """The bytes of the model at `path`: a file's size, or its section's inside a bundle."""
    found = _section_of(path)
    return os.path.getsize(path) if found is None else found[1].end - found[1].begin


def _section_of(path: str | os.PathLike[str]) -> tuple[str, Section] | None:
    """(bundle, section) of the TFLite model `path` names inside a bundle; None for any other path."""
    named = member(str(path)) if not os.path.exists(path) else None
    if named is None and not (is_bundle(path) and os.path.isfile(path)):
        return None
    bundle = named[0] if named is not None else str(path)
    found = models(bundle)
    if named is not None:
        hit = next((s for s in found if s.index == named[1]), None)
    else:
        hit = found[0] if len(found) == 1 else None
    if hit is None:
        there = ", ".join(f"{bundle}#{s.index}" for s in found) or "none"
        raise ModelError(f"{path} names no single TFLite model of the bundle (its models: {there})")
    return bundle, hit


def _read(bundle: str, section: Section) -> bytes:
    with open(bundle, "rb") as f:
        f.seek(section.begin)
        return f.read(section.end - section.begin)


def _child(t: Table, slot: int) -> Table | None:
    o = t.Offset(slot)
    return None if o == 0 else Table(t.Bytes, t.Indirect(o + t.Pos))


def _tables(t: Table, slot: int) -> list[Table]:
    o = t.Offset(slot)
    if o == 0:
        return []
    start, n = t.Vector(o), t.VectorLen(o)
    return [Table(t.Bytes, t.Indirect(start + 4 * i)) for i in range(n)]


def _scalar(t: Table, slot: int, flags: type) -> int:
    o = t.Offset(slot)
    return int(t.Get(flags, o + t.Pos)) if o else 0


def _model_type(obj: Table) -> str | None:
    for kv in _tables(obj, 4):
        key_at = kv.Offset(4)
        if not key_at or kv.String(key_at + kv.Pos) != b"model_type" or _scalar(kv, 6, nt.Uint8Flags) != STRING_VALUE:
            continue
        value_at = kv.Offset(8)
        if value_at:
            value = Table(kv.Bytes, 0)
            kv.Union(value, value_at)
            text_at = value.Offset(4)
            if text_at:
                return bytes(value.String(text_at + value.Pos)).decode("utf-8", "replace")
    return None
