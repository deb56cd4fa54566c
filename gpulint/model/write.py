"""Write the IR as a .tflite file with `flatbuffers.Builder` and the `tflite` builder functions.

Every table goes through one generic helper, `_Writer.table`, which walks the fields that
`schema.fields` found in the generated module and calls that module's `<T>Add<Field>`; options
tables need no case of their own. Constant buffers are 16-byte aligned, as the converter
writes them. A model whose constants do not fit a flatbuffer's 2 GiB is written the way the
converter writes large models: buffers after the flatbuffer, found by Buffer.offset/size.
Bytes another tool appended after the model (`Model.appended`) follow it, 16-byte aligned.
Files are written atomically: a temporary file beside the target, then a rename.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Iterable
from typing import Any

from gpulint.atomic import write_atomic
from gpulint.model import schema
from gpulint.model.ir import (
    DimensionMetadata,
    IndexVector,
    Model,
    Operator,
    Options,
    Quantization,
    SignatureDef,
    Sparsity,
    Subgraph,
    Tensor,
    TensorMap,
)
from gpulint.model.read import FILE_IDENTIFIER

ALIGN = 16
# Leave room under flatbuffers' 2 GiB limit for the tables around the constants.
INLINE_LIMIT = 2**31 - 2**26


class LossyWriteError(ValueError):
    """Writing would drop data the installed schema does not know."""


def write(
    model: Model,
    path: str | os.PathLike[str],
    *,
    allow_loss: bool = False,
    external_buffers: bool | None = None,
) -> None:
    """Write `model` to `path` atomically.

    `external_buffers`: store constants after the flatbuffer (None: only when they would not
    fit inside it). Raises LossyWriteError if the model was read from a file with fields this
    schema does not know, unless `allow_loss`.
    """
    head, tail = serialize(model, allow_loss=allow_loss, external_buffers=external_buffers)
    if len(model.appended):
        # Aligned, so a reader finds them where the model's padding ends (read.appended).
        end = len(head) + sum(len(t) for t in tail)
        tail += [b"\0" * (-end % ALIGN), model.appended]
    write_atomic(path, [head, *tail])


def to_bytes(model: Model, *, allow_loss: bool = False) -> bytes:
    """The model as one flatbuffer in memory (constants inline)."""
    head, _ = serialize(model, allow_loss=allow_loss, external_buffers=False)
    return bytes(head)


def serialize(
    model: Model, *, allow_loss: bool = False, external_buffers: bool | None = None
) -> tuple[bytearray, list[bytes | memoryview]]:
    """The flatbuffer, and the pieces that follow it in the file (padding and external data)."""
    if model.unknown and not allow_loss:
        raise LossyWriteError(
            "the file uses fields the installed schema does not know; writing would drop: "
            + "; ".join(model.unknown[:5])
            + (f" (and {len(model.unknown) - 5} more)" if len(model.unknown) > 5 else "")
        )
    data_bytes = sum(len(b.data) for b in model.buffers)
    if external_buffers is None:
        external_buffers = data_bytes > INLINE_LIMIT
    writer = _Writer(model, external_buffers, 1024 + (0 if external_buffers else data_bytes))
    head = writer.finish()
    if not external_buffers:
        return head, []
    return head, _place_external(model, head)


def _place_external(model: Model, head: bytearray) -> list[bytes | memoryview]:
    """Lay the constants out after the flatbuffer and patch each Buffer.offset to its place."""
    fb = schema.table_class("Model").GetRootAs(head, 0)  # type: ignore[attr-defined]
    tail: list[bytes | memoryview] = []
    pos = len(head)
    for i, buf in enumerate(model.buffers):
        if not len(buf.data):
            continue
        pad = -pos % ALIGN
        tail.append(b"\0" * pad)
        pos += pad
        entry = fb.Buffers(i)
        field = entry._tab.Offset(6)  # Buffer.offset, written as placeholder 1 below
        struct.pack_into("<Q", head, entry._tab.Pos + field, pos)
        tail.append(buf.data)
        pos += len(buf.data)
    return tail


class _Writer:
    def __init__(self, model: Model, external: bool, size_hint: int) -> None:
        self.model = model
        self.external = external
        import flatbuffers  # here: its number_types imports numpy, which reading never needs

        self.b = flatbuffers.Builder(min(size_hint, 2**31 - 1))

    # -- generic pieces -------------------------------------------------------------------

    def table(self, table: str, values: dict[str, Any]) -> int:
        """Build one table: create its vectors and strings, then Start, Add each field, End.

        `values` holds, by schema field name: plain values for scalars, lists for scalar
        vectors, str for strings, and already-built offsets (ints) for tables, unions and any
        vector built by the caller. None (or a missing key) leaves the field out.
        """
        b = self.b
        mod = schema.module(table)
        resolved: list[tuple[Callable[..., None], Any]] = []
        for f in schema.fields(table):
            v = values.get(f.name)
            if v is None:
                continue
            if isinstance(v, int) and f.kind != "scalar":
                pass  # an offset the caller built
            elif f.kind == "vector":
                import numpy as np

                v = b.CreateNumpyVector(np.asarray(v, dtype=f.numpy_dtype))
            elif f.kind == "string":
                v = b.CreateString(v.encode("utf-8", "surrogateescape"))
            elif f.kind == "strings":
                v = self.offsets(mod, table, f.camel, [b.CreateString(s.encode("utf-8", "surrogateescape")) for s in v])
            elif f.kind == "tables":
                v = self.offsets(mod, table, f.camel, v)
            resolved.append((getattr(mod, f"{table}Add{f.camel}"), v))
        getattr(mod, f"{table}Start")(b)
        for add, v in resolved:
            add(b, v)
        end: int = getattr(mod, f"{table}End")(b)
        return end

    def offsets(self, mod: Any, table: str, camel: str, offs: list[int]) -> int:
        getattr(mod, f"{table}Start{camel}Vector")(self.b, len(offs))
        for off in reversed(offs):
            self.b.PrependUOffsetTRelative(off)
        end: int = self.b.EndVector()
        return end

    def aligned_bytes(self, data: bytes | memoryview) -> int:
        """A [ubyte] vector whose first byte is 16-byte aligned in the file."""
        b, n = self.b, len(data)
        b.StartVector(1, n, ALIGN)
        b.head = b.Head() - n
        b.Bytes[b.head : b.head + n] = data
        end: int = b.EndVector()
        return end

    def each(self, items: Iterable[Any], build: Callable[[Any], int]) -> list[int]:
        return [build(x) for x in items]

    # -- tables ---------------------------------------------------------------------------

    def finish(self) -> bytearray:
        m = self.model
        codes = self.each(
            m.operator_codes,
            lambda oc: self.table(
                "OperatorCode",
                {
                    "deprecated_builtin_code": oc.deprecated_builtin_code,
                    "custom_code": oc.custom_code,
                    "version": oc.version,
                    "builtin_code": oc.builtin_code,
                },
            ),
        )
        subgraphs = self.each(m.subgraphs, self.subgraph)
        buffers = self.each(m.buffers, self.buffer)
        metadata = None
        if m.metadata is not None:
            metadata = self.each(m.metadata, lambda md: self.table("Metadata", {"name": md.name, "buffer": md.buffer}))
        signatures = None
        if m.signature_defs is not None:
            signatures = self.each(m.signature_defs, self.signature_def)
        root = self.table(
            "Model",
            {
                "version": m.version,
                "operator_codes": codes,
                "subgraphs": subgraphs,
                "description": m.description,
                "buffers": buffers,
                "metadata_buffer": m.metadata_buffer,
                "metadata": metadata,
                "signature_defs": signatures,
            },
        )
        self.b.Finish(root, file_identifier=FILE_IDENTIFIER)
        return bytearray(self.b.Output())

    def buffer(self, buf: Any) -> int:
        if not len(buf.data):
            # An empty data vector is kept: it makes the tensor a constant to the interpreter.
            return self.table("Buffer", {"data": self.aligned_bytes(b"")} if buf.empty_data else {})
        if self.external:
            # offset 1 is the converter's placeholder; _place_external patches the real one.
            return self.table("Buffer", {"offset": 1, "size": len(buf.data)})
        return self.table("Buffer", {"data": self.aligned_bytes(buf.data)})

    def subgraph(self, sg: Subgraph) -> int:
        return self.table(
            "SubGraph",
            {
                "tensors": self.each(sg.tensors, self.tensor),
                "inputs": sg.inputs,
                "outputs": sg.outputs,
                "operators": self.each(sg.operators, self.operator),
                "name": sg.name,
                "debug_metadata_index": sg.debug_metadata_index,
            },
        )

    def tensor(self, t: Tensor) -> int:
        variants = None
        if t.variant_tensors is not None:
            variants = [
                self.table(
                    "VariantSubType",
                    {"shape": v.shape, "type": schema.enum_value("TensorType", v.type), "has_rank": v.has_rank},
                )
                for v in t.variant_tensors
            ]
        return self.table(
            "Tensor",
            {
                "shape": t.shape,
                "type": schema.enum_value("TensorType", t.type),
                "buffer": t.buffer,
                "name": t.name,
                "quantization": self.quantization(t.quantization) if t.quantization else None,
                "is_variable": t.is_variable,
                "sparsity": self.sparsity(t.sparsity) if t.sparsity else None,
                "shape_signature": t.shape_signature,
                "has_rank": t.has_rank,
                "variant_tensors": variants,
            },
        )

    def quantization(self, q: Quantization) -> int:
        details = None
        if q.custom is not None:  # schema.fbs: custom:[ubyte] (force_align: 16)
            details = self.table("CustomQuantization", {"custom": self.aligned_bytes(q.custom)})
        return self.table(
            "QuantizationParameters",
            {
                "min": q.min,
                "max": q.max,
                "scale": q.scale,
                "zero_point": q.zero_point,
                "details_type": schema.enum_members("QuantizationDetails")["CustomQuantization"]
                if details is not None
                else None,
                "details": details,
                "quantized_dimension": q.quantized_dimension,
            },
        )

    def sparsity(self, s: Sparsity) -> int:
        dims = None if s.dim_metadata is None else self.each(s.dim_metadata, self.dimension)
        return self.table(
            "SparsityParameters",
            {"traversal_order": s.traversal_order, "block_map": s.block_map, "dim_metadata": dims},
        )

    def dimension(self, d: DimensionMetadata) -> int:
        def union(v: IndexVector | None) -> tuple[int | None, int | None]:
            if v is None:
                return None, None
            return schema.enum_value("SparseIndexVector", v.type), self.table(v.type, {"values": v.values})

        seg_type, seg = union(d.array_segments)
        idx_type, idx = union(d.array_indices)
        return self.table(
            "DimensionMetadata",
            {
                "format": schema.enum_value("DimensionType", d.format),
                "dense_size": d.dense_size,
                "array_segments_type": seg_type,
                "array_segments": seg,
                "array_indices_type": idx_type,
                "array_indices": idx,
            },
        )

    def options(self, union: str, opts: Options | None) -> tuple[int | None, int | None]:
        if opts is None:
            return None, None
        values = {}
        for f in schema.fields(opts.type):
            v = opts.values.get(f.name)
            enum = schema.enum_of(opts.type, f)
            values[f.name] = schema.enum_value(enum, v) if enum and v is not None else v
        return schema.enum_value(union, opts.type), self.table(opts.type, values)

    def operator(self, op: Operator) -> int:
        opt_type, opt = self.options("BuiltinOptions", op.builtin_options)
        opt2_type, opt2 = self.options("BuiltinOptions2", op.builtin_options_2)
        custom = None
        if op.custom_options is not None:
            custom = self.b.CreateByteVector(bytes(op.custom_options))
        return self.table(
            "Operator",
            {
                "opcode_index": op.opcode_index,
                "inputs": op.inputs,
                "outputs": op.outputs,
                "builtin_options_type": opt_type,
                "builtin_options": opt,
                "custom_options": custom,
                "custom_options_format": op.custom_options_format,
                "mutating_variable_inputs": op.mutating_variable_inputs,
                "intermediates": op.intermediates,
                "builtin_options2_type": opt2_type,
                "builtin_options2": opt2,
                "debug_metadata_index": op.debug_metadata_index,
            },
        )

    def signature_def(self, sd: SignatureDef) -> int:
        def maps(items: list[TensorMap]) -> list[int]:
            return [self.table("TensorMap", {"name": tm.name, "tensor_index": tm.tensor_index}) for tm in items]

        return self.table(
            "SignatureDef",
            {
                "inputs": maps(sd.inputs),
                "outputs": maps(sd.outputs),
                "signature_key": sd.signature_key,
                "subgraph_index": sd.subgraph_index,
            },
        )
