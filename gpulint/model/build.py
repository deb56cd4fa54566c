"""A small API to make models, for tests and the demo.

    mb = ModelBuilder()
    g = mb.subgraph("main")
    x = g.input("image", [1, 32, 32, 3])
    w = g.const("w", np.ones((8, 3, 3, 3), np.float32))
    y = g.op("CONV_2D", [x, w, -1], [1, 32, 32, 8],
             options=dict(padding="SAME", stride_w=1, stride_h=1, fused_activation_function="RELU"))
    g.output(y)
    model = mb.build()

Tensors are named by their subgraph index, as in the file. An op's options table is picked from
its name (`CONV_2D` -> `Conv2DOptions`) and filled with the schema's defaults for whatever is
not given; constants get buffers of their own, with the array's bytes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from gpulint.model import schema
from gpulint.model.ir import (
    NUMPY_DTYPES,
    Buffer,
    Metadata,
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

# Ops whose options table is not named after the op.
_OPTIONS_BY_OP = {
    "AVERAGE_POOL_2D": "Pool2DOptions",
    "MAX_POOL_2D": "Pool2DOptions",
    "L2_POOL_2D": "Pool2DOptions",
    "L2_NORMALIZATION": "L2NormOptions",
    "MEAN": "ReducerOptions",
    "SUM": "ReducerOptions",
    "REDUCE_PROD": "ReducerOptions",
    "REDUCE_MAX": "ReducerOptions",
    "REDUCE_MIN": "ReducerOptions",
    "REDUCE_ANY": "ReducerOptions",
    "REDUCE_ALL": "ReducerOptions",
    "LSH_PROJECTION": "LSHProjectionOptions",
    "UNIDIRECTIONAL_SEQUENCE_RNN": "SequenceRNNOptions",
    "BIDIRECTIONAL_SEQUENCE_RNN": "BidirectionalSequenceRNNOptions",
    "RNN": "RNNOptions",
}

# numpy dtype -> TensorType name, for constants given as arrays.
DTYPES = {dtype: name for name, dtype in NUMPY_DTYPES.items()}


def options_table_for(op: str) -> str | None:
    """The options table an op's builtin options use, or None if it has none."""
    if op in _OPTIONS_BY_OP:
        return _OPTIONS_BY_OP[op]
    key = op.replace("_", "").lower()
    for name in schema.options_types():
        if name[: -len("Options")].lower() == key:
            return name
    return None


QuantArg = Quantization | tuple[float | Sequence[float], int | Sequence[int]] | None


def quantization(q: QuantArg, dim: int = 0) -> Quantization | None:
    """A Quantization from (scale, zero_point): scalars for per-tensor, lists per channel."""
    if q is None or isinstance(q, Quantization):
        return q
    scale, zp = q
    scales = [float(x) for x in np.asarray(scale, np.float32).ravel()]
    zps = [int(x) for x in np.atleast_1d(zp)]
    return Quantization(scale=scales, zero_point=zps, quantized_dimension=dim)


class SubgraphBuilder:
    def __init__(self, model: ModelBuilder, subgraph: Subgraph) -> None:
        self.mb = model
        self.sg = subgraph

    def tensor(
        self,
        name: str,
        shape: Sequence[int],
        dtype: str = "FLOAT32",
        *,
        quant: QuantArg = None,
        buffer: int = 0,
        shape_signature: Sequence[int] | None = None,
        sparsity: Sparsity | None = None,
        is_variable: bool = False,
    ) -> int:
        self.sg.tensors.append(
            Tensor(
                name=name,
                shape=[int(d) for d in shape],
                type=dtype,
                buffer=buffer,
                quantization=quantization(quant),
                is_variable=is_variable,
                sparsity=sparsity,
                shape_signature=None if shape_signature is None else [int(d) for d in shape_signature],
            )
        )
        return len(self.sg.tensors) - 1

    def input(self, name: str, shape: Sequence[int], dtype: str = "FLOAT32", **kw: Any) -> int:
        t = self.tensor(name, shape, dtype, **kw)
        self.sg.inputs.append(t)
        return t

    def const(
        self,
        name: str,
        value: Any,
        dtype: str | None = None,
        *,
        quant: QuantArg = None,
        quant_dim: int = 0,
        shape: Sequence[int] | None = None,
        sparsity: Sparsity | None = None,
    ) -> int:
        """A constant tensor holding `value` (its dtype picks the tensor type unless given).

        For types numpy has no dtype for (INT4), pass raw bytes with `dtype` and `shape`.
        """
        if isinstance(value, bytes | bytearray):
            if dtype is None or shape is None:
                raise ValueError("raw bytes need dtype= and shape=")
            data, tshape = bytes(value), list(shape)
        else:
            arr = np.asarray(value)
            if arr.dtype == np.float64:
                arr = arr.astype(np.float32)
            if arr.dtype == np.int64 and dtype != "INT64":
                arr = arr.astype(np.int32)
            dtype = dtype or DTYPES[arr.dtype]
            data = np.ascontiguousarray(arr).tobytes()
            tshape = list(shape) if shape is not None else list(arr.shape)
        q = quantization(quant, quant_dim)
        return self.tensor(name, tshape, dtype, quant=q, buffer=self.mb.buffer(data, constant=True), sparsity=sparsity)

    def op(
        self,
        name: str,
        inputs: Sequence[int],
        shape: Sequence[int] | None = None,
        *,
        shapes: Sequence[Sequence[int]] | None = None,
        out: Sequence[int] | None = None,
        dtype: str = "FLOAT32",
        quant: QuantArg = None,
        options: dict[str, Any] | None = None,
        options_type: str | None = None,
        version: int = 1,
        custom_options: bytes | None = None,
        out_name: str | None = None,
    ) -> Any:
        """Add an op with one new output of `shape`, new outputs of `shapes`, or `out` tensors.

        Returns the output tensor index, or a list of them for several outputs. The options
        table is the op's own (or `options_type`), filled with defaults where not given.
        """
        n = len(self.sg.operators)
        if out is not None:
            out_idx = [int(i) for i in out]
        else:
            all_shapes = [shape] if shape is not None else list(shapes or [])
            base = out_name or f"{name.lower()}_{n}"
            out_idx = [
                self.tensor(base if len(all_shapes) == 1 else f"{base}:{i}", s, dtype, quant=quant)
                for i, s in enumerate(all_shapes)
            ]
        opts = None
        otype = options_type or options_table_for(name)
        if options is not None or (otype and custom_options is None):
            if otype is None:
                raise ValueError(f"{name} has no options table; pass options_type=")
            opts = Options.of(otype, **(options or {}))
        self.sg.operators.append(
            Operator(
                opcode_index=self.mb.model.opcode_index(name, version),
                inputs=[int(i) for i in inputs],
                outputs=out_idx,
                builtin_options=opts,
                custom_options=custom_options,
            )
        )
        return out_idx[0] if len(out_idx) == 1 else out_idx

    def output(self, *tensors: int) -> None:
        self.sg.outputs.extend(tensors)


class ModelBuilder:
    def __init__(self, description: str | None = "gpulint.model.build") -> None:
        # Buffer 0 is the empty sentinel every converter writes.
        self.model = Model(version=3, description=description, buffers=[Buffer(b"")])

    def subgraph(self, name: str | None = None) -> SubgraphBuilder:
        sg = Subgraph(name=name)
        self.model.subgraphs.append(sg)
        return SubgraphBuilder(self, sg)

    def buffer(self, data: bytes, constant: bool = False) -> int:
        """A new buffer; `constant` keeps an empty one a (zero-element) constant, as converters write it."""
        self.model.buffers.append(Buffer(data, empty_data=constant and not data))
        return len(self.model.buffers) - 1

    def metadata(self, name: str, data: bytes) -> None:
        if self.model.metadata is None:
            self.model.metadata = []
        self.model.metadata.append(Metadata(name, self.buffer(data)))

    def signature(
        self, key: str, subgraph: int = 0, inputs: dict[str, int] | None = None, outputs: dict[str, int] | None = None
    ) -> None:
        if self.model.signature_defs is None:
            self.model.signature_defs = []
        self.model.signature_defs.append(
            SignatureDef(
                inputs=[TensorMap(k, v) for k, v in (inputs or {}).items()],
                outputs=[TensorMap(k, v) for k, v in (outputs or {}).items()],
                signature_key=key,
                subgraph_index=subgraph,
            )
        )

    def build(self) -> Model:
        return self.model
