"""Read a .tflite file into the IR, with the field layout the `tflite` package generates.

The file is mapped, not read: constant buffers become memoryviews of the mapping, so reading
costs time in proportion to the number of tables, not to the bytes of weights. Flatbuffers
readers do no verification, so everything that indexes the file is bounded here: vector
lengths are charged against a budget proportional to the file size (a length that claims
gigabytes, or tables that share one huge vector, end the read instead of a long loop), and
every cross reference is checked once the tables are read.
"""

from __future__ import annotations

import mmap
import os
import struct
from functools import cache
from pathlib import Path
from typing import Any

from gpulint.model import schema
from gpulint.model.errors import ModelError
from gpulint.model.ir import (
    Buffer,
    DimensionMetadata,
    IndexVector,
    Metadata,
    Model,
    Operator,
    OperatorCode,
    Options,
    Quantization,
    SignatureDef,
    Sparsity,
    Subgraph,
    Tensor,
    TensorMap,
    VariantSubType,
)

FILE_IDENTIFIER = b"TFL3"
TABLE_COST = 4  # the smallest table: its 4-byte offset to a (shared) vtable
# numpy's largest ndim: a tensor of more dims cannot be an array here, and TFLite's kernels stop
# at 6-8. A damaged file's shape vector can be a million long, and every element count, MAC and
# byte estimate multiplies it out.
MAX_RANK = 64


def read(path: str | os.PathLike[str]) -> Model:
    """Read a .tflite file, or a TFLite model inside a LiteRT-LM bundle (`BUNDLE#N`, or the bundle
    itself where it holds one). Raises ModelError with a one-line reason for anything malformed."""
    from gpulint.model import litertlm  # it reads with this module's errors

    p = Path(path)
    try:
        st = p.stat()
    except FileNotFoundError:
        named = litertlm.member(str(path))
        if named is not None and Path(named[0]).is_file():
            return read_buffer(litertlm.member_bytes(*named))
        raise ModelError("no such file") from None
    except OSError as e:
        raise ModelError(e.strerror or str(e)) from None
    if p.is_dir():
        raise ModelError("is a directory, not a .tflite file")
    if not p.is_file():
        raise ModelError("is not a regular file")
    if st.st_size == 0:
        raise ModelError("empty file")
    try:
        with open(p, "rb") as f:
            mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except OSError as e:
        raise ModelError(e.strerror or str(e)) from None
    if mm[:8] == litertlm.MAGIC:
        found = litertlm.models(p)
        if len(found) != 1:
            there = ", ".join(f"{p}#{s.index}" for s in found) or "none"
            raise ModelError(f"a LiteRT-LM bundle of {len(found)} TFLite models: name one (its models: {there})")
        return read_buffer(litertlm.member_bytes(str(p), found[0].index))
    return read_buffer(mm)


def read_buffer(buf: bytes | bytearray | mmap.mmap) -> Model:
    """Read a model from bytes in memory (or an mmap). Constant data stays views of `buf`."""
    size = len(buf)
    if size < 8:
        raise ModelError(f"too small to be a TFLite model ({size} bytes)")
    ident = bytes(buf[4:8])
    if ident != FILE_IDENTIFIER:
        raise ModelError(f"not a TFLite model: file identifier is {ident!r}, expected b'TFL3'")
    root = struct.unpack_from("<I", buf, 0)[0]
    if root + 4 > size:
        raise ModelError(f"corrupt flatbuffer: root table offset {root} is past the end ({size} bytes)")
    reader = _Reader(buf)
    try:
        model = reader.model()
    except ModelError:
        raise
    except (struct.error, IndexError, ValueError, OverflowError, TypeError, MemoryError) as e:
        raise ModelError(f"corrupt flatbuffer while reading {reader.where}: {e}") from None
    _check_references(model)
    model.appended = appended(buf, reader.end)
    return model


def appended(buf: bytes | bytearray | mmap.mmap, end: int) -> bytes | memoryview:
    """The bytes another tool appended after the model, which ends at `end`.

    A flatbuffer has no length field: the model ends with the last byte any of its tables,
    vtables, vectors or strings covers, or with the last constant stored after the flatbuffer
    at a Buffer.offset (schema.fbs, Buffer) or a large_custom_options_offset. Zero bytes after
    that are padding: builders pad to the largest alignment (16, Buffer.data's force_align) and
    the converter writes 16 zeros after external buffers and then aligns to 16
    (tflite/converter/flatbuffer_export.cc AppendBufferData). What follows is someone else's
    data: Ultralytics appends a zip with metadata.json, TFLite Support a zip of associated files.
    """
    size = len(buf)
    if end >= size:
        return b""
    import numpy as np

    tail = np.frombuffer(buf, np.uint8, size - end, end)
    nonzero = np.flatnonzero(tail[:4096])
    if not len(nonzero):
        nonzero = np.flatnonzero(tail)
        if not len(nonzero):
            return b""
    return memoryview(buf)[end + int(nonzero[0]) :]


_FMT = {
    "Bool": "?",
    "Int8": "b",
    "Uint8": "B",
    "Int16": "h",
    "Uint16": "H",
    "Int32": "i",
    "Uint32": "I",
    "Int64": "q",
    "Uint64": "Q",
    "Float32": "f",
    "Float64": "d",
}
# [ubyte] fields kept as zero-copy views rather than lists of ints.
_RAW_BYTES = {("Buffer", "data"), ("Operator", "custom_options"), ("CustomQuantization", "custom")}
# Vectors as long as a sparse tensor's nonzeros, kept as read-only numpy views.
_ARRAYS = {("Int32Vector", "values"), ("Uint16Vector", "values"), ("Uint8Vector", "values")}


@cache
def _layout(table: str) -> tuple[tuple[str, int, str, str, Any, int], ...]:
    """(name, slot, kind, struct format, default, element size) per field of a table."""
    out = []
    for f in schema.fields(table):
        fmt = _FMT.get(f.scalar or "", "")
        kind = "bytes" if (table, f.name) in _RAW_BYTES else "array" if (table, f.name) in _ARRAYS else f.kind
        default = f.default
        if f.scalar == "Bool" and default is not None:
            default = bool(default)
        out.append((f.name, f.slot, kind, fmt, default, struct.calcsize("<" + fmt) if fmt else 4))
    return tuple(out)


@cache
def _known_slots(table: str) -> tuple[bool, ...]:
    slots = {f.slot for f in schema.fields(table)}
    return tuple(i in slots for i in range(schema.field_count(table)))


class _Reader:
    """Reads tables field by field with the layout that `schema` reflects from `tflite`.

    The generated accessors would give the same values (a test holds them to it), but each
    call wraps the file in a new memoryview and costs ~3 us here, which made pose_detection
    (291 ops) take ~60 ms; locating fields through the vtable once per table and unpacking
    each with one struct call takes a quarter of that.
    """

    def __init__(self, buf: Any) -> None:
        self.buf = buf
        self.view = memoryview(buf)
        self.size = len(buf)
        # Work is charged in units that each stand for at least one byte of a well-formed file
        # (a vector element; a table, TABLE_COST, is at least that many bytes), so a file that
        # stores each thing once spends at most its size. Twice that leaves room for sharing;
        # a hostile file (one huge vector, every entry pointing at the same table) hits it
        # after O(size) work instead of looping for minutes.
        self.budget = 2 * self.size + 4096
        self.where = "the model table"
        self.unknown: list[str] = []
        self.end = 8  # past the last byte the model covers: the root offset and file identifier so far

    # -- bounds ---------------------------------------------------------------------------

    def corrupt(self, what: str) -> ModelError:
        return ModelError(f"corrupt flatbuffer: {self.where}: {what}")

    def charge(self, n: int, what: str) -> int:
        self.budget -= n
        if n > self.size:
            raise self.corrupt(f"{what} claims {n} elements, more than a {self.size}-byte file can hold")
        if self.budget < 0:
            raise self.corrupt(f"{what}: the tables and vectors read so far add up to more than the file can hold")
        return n

    def span(self, start: int, n: int, what: str) -> memoryview:
        if start < 0 or n < 0 or start + n > self.size:
            raise self.corrupt(f"{what} at bytes {start}..{start + n} is outside the file ({self.size} bytes)")
        if start + n > self.end:
            self.end = start + n
        return self.view[start : start + n]

    def u32(self, pos: int) -> int:
        if not 0 <= pos <= self.size - 4:
            raise self.corrupt(f"offset at byte {pos} is outside the file ({self.size} bytes)")
        v: int = _U32.unpack_from(self.buf, pos)[0]
        return v

    def text(self, pos: int) -> str:
        """The string at `pos`; bytes that are not UTF-8 survive a round trip as surrogates."""
        n = self.charge(self.u32(pos), "string")
        return bytes(self.span(pos + 4, n, "string")).decode("utf-8", "surrogateescape")

    # -- the generic table reader --------------------------------------------------------

    def table(self, pos: int, table: str) -> dict[str, Any]:
        """Every field of the table at `pos`: defaults for absent ones, offsets of sub-tables."""
        buf, size = self.buf, self.size
        self.charge(TABLE_COST, f"{table} table")
        if not 0 <= pos <= size - 4:
            raise self.corrupt(f"{table} table at byte {pos} is outside the file ({size} bytes)")
        vtable = pos - _I32.unpack_from(buf, pos)[0]
        if not 0 <= vtable <= size - 4:
            raise self.corrupt(f"{table} vtable at byte {vtable} is outside the file ({size} bytes)")
        vsize, tsize = _U16X2.unpack_from(buf, vtable)
        nslots = max(0, (vsize - 4) // 2)
        if vtable + 4 + 2 * nslots > size:
            raise self.corrupt(f"{table} vtable at byte {vtable} runs past the end of the file")
        # The vtable holds the table's inline size: both count toward where the model ends.
        end = vtable + 4 + 2 * nslots if vtable > pos else min(pos + tsize, size)
        if end > self.end:
            self.end = end
        slots = struct.unpack_from(f"<{nslots}H", buf, vtable + 4)
        known = _known_slots(table)
        if nslots > len(known) or not all(known[:nslots]):
            for slot, off in enumerate(slots):
                if off and (slot >= len(known) or not known[slot]):
                    self.unknown.append(f"{self.where}: {table} field #{slot} is not in the installed schema")
        out: dict[str, Any] = {}
        for name, slot, kind, fmt, default, width in _layout(table):
            off = slots[slot] if slot < nslots else 0
            if not off:
                out[name] = default
                continue
            p = pos + off
            if kind == "scalar":
                if p + width > size:
                    raise self.corrupt(f"{table}.{name} is outside the file")
                out[name] = struct.unpack_from("<" + fmt, buf, p)[0]
                continue
            q = p + self.u32(p)  # uoffset to the vector, string or table
            if kind in ("table", "union"):
                out[name] = q
                continue
            if kind == "string":
                out[name] = self.text(q)
                continue
            n = self.u32(q)
            if kind == "bytes":
                out[name] = self.span(q + 4, n, f"{table}.{name}")
            elif kind == "array":
                self.span(q + 4, n * width, f"{table}.{name}")
                import numpy as np  # sparse tensors' index vectors only: most reads never import numpy

                out[name] = np.frombuffer(buf, "<" + fmt, n, q + 4)
            elif kind == "vector":
                self.charge(n, f"{table}.{name}")
                self.span(q + 4, n * width, f"{table}.{name}")
                out[name] = list(struct.unpack_from(f"<{n}{fmt}", buf, q + 4))
            elif kind in ("tables", "strings"):
                self.charge(n, f"{table}.{name}")
                self.span(q + 4, 4 * n, f"{table}.{name}")
                elems = [q + 4 + 4 * j + u for j, u in enumerate(struct.unpack_from(f"<{n}I", buf, q + 4))]
                if kind == "strings":
                    out[name] = [self.text(e) for e in elems]
                else:
                    out[name] = elems
            else:
                raise NotImplementedError(f"{table}.{name}: {kind} fields are not supported")
        return out

    def tables(self, positions: list[int] | None, table: str, what: str, build: Any) -> list[Any]:
        out = []
        for i, pos in enumerate(positions or []):
            self.where = f"{what} {i}"
            out.append(build(self.table(pos, table)))
        return out

    # -- the IR ---------------------------------------------------------------------------

    def model(self) -> Model:
        d = self.table(self.u32(0), "Model")
        model = Model(version=d["version"], description=d["description"], metadata_buffer=d["metadata_buffer"])
        model.operator_codes = self.tables(d["operator_codes"], "OperatorCode", "operator code", self.operator_code)
        model.buffers = self.tables(d["buffers"], "Buffer", "buffer", self.buffer)
        model.subgraphs = []
        for i, pos in enumerate(d["subgraphs"] or []):
            self.where = f"subgraph {i}"
            model.subgraphs.append(self.subgraph(self.table(pos, "SubGraph"), i))
        if d["metadata"] is not None:
            model.metadata = self.tables(d["metadata"], "Metadata", "metadata", self.metadata)
        if d["signature_defs"] is not None:
            model.signature_defs = self.tables(d["signature_defs"], "SignatureDef", "signature def", self.signature_def)
        model.unknown = self.unknown
        return model

    def metadata(self, d: dict[str, Any]) -> Metadata:
        return Metadata(d["name"], d["buffer"])

    def operator_code(self, d: dict[str, Any]) -> OperatorCode:
        return OperatorCode(d["builtin_code"], d["custom_code"], d["version"], d["deprecated_builtin_code"])

    def buffer(self, d: dict[str, Any]) -> Buffer:
        if d["offset"] > 1:  # data stored after the flatbuffer (files over 2 GiB), schema.fbs "offset"
            return Buffer(self.span(d["offset"], d["size"], "buffer data"), empty_data=not d["size"])
        data = d["data"]
        return Buffer(b"", empty_data=True) if data is not None and not len(data) else Buffer(data or b"")

    def subgraph(self, d: dict[str, Any], index: int) -> Subgraph:
        sg = Subgraph(
            inputs=d["inputs"] or [],
            outputs=d["outputs"] or [],
            name=d["name"],
            debug_metadata_index=d["debug_metadata_index"],
        )
        sg.tensors = self.tables(d["tensors"], "Tensor", f"subgraph {index} tensor", self.tensor)
        sg.operators = self.tables(d["operators"], "Operator", f"subgraph {index} operator", self.operator)
        return sg

    def tensor(self, d: dict[str, Any]) -> Tensor:
        variants = None
        if d["variant_tensors"] is not None:
            variants = []
            for pos in d["variant_tensors"]:
                v = self.table(pos, "VariantSubType")
                variants.append(VariantSubType(v["shape"], schema.enum_name("TensorType", v["type"]), v["has_rank"]))
        q, s = d["quantization"], d["sparsity"]
        return Tensor(
            name=d["name"],
            shape=d["shape"] or [],
            type=schema.enum_name("TensorType", d["type"]),
            buffer=d["buffer"],
            quantization=self.quantization(self.table(q, "QuantizationParameters")) if q is not None else None,
            is_variable=d["is_variable"],
            sparsity=self.sparsity(self.table(s, "SparsityParameters")) if s is not None else None,
            shape_signature=d["shape_signature"],
            has_rank=d["has_rank"],
            variant_tensors=variants,
        )

    def quantization(self, d: dict[str, Any]) -> Quantization:
        custom = None
        if d["details_type"] == _DETAILS["CustomQuantization"] and d["details"] is not None:
            custom = bytes(self.table(d["details"], "CustomQuantization")["custom"] or b"")
        elif d["details_type"] != _DETAILS["NONE"]:
            self.unknown.append(
                f"{self.where}: quantization details type {d['details_type']} is not in the installed schema"
            )
        return Quantization(d["min"], d["max"], d["scale"], d["zero_point"], custom, d["quantized_dimension"])

    def sparsity(self, d: dict[str, Any]) -> Sparsity:
        dims = None
        if d["dim_metadata"] is not None:
            dims = [self.dimension(self.table(pos, "DimensionMetadata")) for pos in d["dim_metadata"]]
        return Sparsity(d["traversal_order"], d["block_map"], dims)

    def dimension(self, d: dict[str, Any]) -> DimensionMetadata:
        return DimensionMetadata(
            format=schema.enum_name("DimensionType", d["format"]),
            dense_size=d["dense_size"],
            array_segments=self.index_vector(d["array_segments_type"], d["array_segments"]),
            array_indices=self.index_vector(d["array_indices_type"], d["array_indices"]),
        )

    def index_vector(self, kind: int, pos: int | None) -> IndexVector | None:
        if kind == 0 or pos is None:
            return None
        name = schema.enum_name("SparseIndexVector", kind)
        if not isinstance(name, str):
            self.unknown.append(f"{self.where}: sparse index vector type {kind} is not in the installed schema")
            return None
        values = self.table(pos, name)["values"]
        if values is None:
            import numpy as np

            values = np.zeros(0, _INDEX_DTYPES[name])
        return IndexVector(name, values)

    def operator(self, d: dict[str, Any]) -> Operator:
        custom = d["custom_options"]
        if d["large_custom_options_offset"] > 1:  # stored after the flatbuffer, like large buffers
            custom = self.span(d["large_custom_options_offset"], d["large_custom_options_size"], "custom options")
        elif custom is not None:
            custom = bytes(custom)
        return Operator(
            opcode_index=d["opcode_index"],
            inputs=d["inputs"] or [],
            outputs=d["outputs"] or [],
            builtin_options=self.options("BuiltinOptions", d["builtin_options_type"], d["builtin_options"]),
            custom_options=custom,
            custom_options_format=d["custom_options_format"],
            mutating_variable_inputs=d["mutating_variable_inputs"],
            intermediates=d["intermediates"],
            builtin_options_2=self.options("BuiltinOptions2", d["builtin_options2_type"], d["builtin_options2"]),
            debug_metadata_index=d["debug_metadata_index"],
        )

    def options(self, union: str, kind: int, pos: int | None) -> Options | None:
        """Any options table, with enum fields shown by name."""
        if kind == 0 or pos is None:
            return None
        table = schema.enum_name(union, kind)
        if not isinstance(table, str):
            self.unknown.append(f"{self.where}: {union} type {kind} is not in the installed schema")
            return None
        values = self.table(pos, table)
        for name, enum in _enum_fields(table):
            values[name] = schema.enum_name(enum, values[name])
        return Options(table, values)

    def signature_def(self, d: dict[str, Any]) -> SignatureDef:
        def maps(positions: list[int] | None) -> list[TensorMap]:
            out = []
            for pos in positions or []:
                m = self.table(pos, "TensorMap")
                out.append(TensorMap(m["name"], m["tensor_index"]))
            return out

        return SignatureDef(maps(d["inputs"]), maps(d["outputs"]), d["signature_key"], d["subgraph_index"])


@cache
def _enum_fields(table: str) -> tuple[tuple[str, str], ...]:
    return tuple((f.name, e) for f in schema.fields(table) if (e := schema.enum_of(table, f)))


_DETAILS = schema.enum_members("QuantizationDetails")
_INDEX_DTYPES = {"Int32Vector": "<i4", "Uint16Vector": "<u2", "Uint8Vector": "u1"}
_U16X2 = struct.Struct("<HH")
_U32 = struct.Struct("<I")
_I32 = struct.Struct("<i")


def _check_references(model: Model) -> None:
    """Every index in the file points at something that exists."""
    nbuf, ncodes, nsub = len(model.buffers), len(model.operator_codes), len(model.subgraphs)
    if not nsub:
        raise ModelError("the model has no subgraphs (the interpreter refuses it too)")

    def bad(where: str, what: str, index: int, count: int, of: str) -> ModelError:
        return ModelError(f"{where}: {what} {index} is out of range (there are {count} {of})")

    for si, sg in enumerate(model.subgraphs):
        nt_ = len(sg.tensors)
        for ti, t in enumerate(sg.tensors):
            if t.buffer >= nbuf:
                raise bad(f"subgraph {si} tensor {ti}", "buffer index", t.buffer, nbuf, "buffers")
            rank = max(len(t.shape), len(t.shape_signature or []))
            if rank > MAX_RANK:
                raise ModelError(f"subgraph {si} tensor {ti}: rank {rank}, past the {MAX_RANK} dims gpulint reads")
        for name, idx in (("input", sg.inputs), ("output", sg.outputs)):
            for i in idx:
                if not 0 <= i < nt_:
                    raise bad(f"subgraph {si}", f"{name} tensor index", i, nt_, "tensors")
        for oi, op in enumerate(sg.operators):
            where = f"subgraph {si} operator {oi}"
            if op.opcode_index >= ncodes:
                raise bad(where, "opcode index", op.opcode_index, ncodes, "operator codes")
            for i in op.inputs + (op.intermediates or []):
                if not -1 <= i < nt_:
                    raise bad(f"{where} ({model.op_name(op)})", "input tensor index", i, nt_, "tensors")
            for i in op.outputs:
                if not 0 <= i < nt_:
                    raise bad(f"{where} ({model.op_name(op)})", "output tensor index", i, nt_, "tensors")
    for i, md in enumerate(model.metadata or []):
        if md.buffer >= nbuf:
            raise bad(f"metadata {i}", "buffer index", md.buffer, nbuf, "buffers")
    for i, sd in enumerate(model.signature_defs or []):
        if sd.subgraph_index >= nsub:
            raise bad(f"signature def {i}", "subgraph index", sd.subgraph_index, nsub, "subgraphs")
        ntens = len(model.subgraphs[sd.subgraph_index].tensors)
        for tm in sd.inputs + sd.outputs:
            if tm.tensor_index >= ntens:
                raise bad(f"signature def {i}", "tensor index", tm.tensor_index, ntens, "tensors")
