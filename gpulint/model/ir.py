"""The in-memory model: one dataclass per schema table, with the schema's field names.

Cross references stay indices, as in the file (operator -> opcode_index, tensor -> buffer,
operator inputs/outputs -> tensor indices, -1 for an omitted optional input), so a round
trip keeps every table in its place. Enums the IR shows as names (`"FLOAT32"`, `"SAME"`);
a value the installed schema does not know stays a bare int, so it is kept, not lost.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gpulint.model import schema

if TYPE_CHECKING:
    import numpy as np

# numpy is imported where values are, not here: `gpulint check` on a model whose result is cached
# never needs it (about 50-75 ms of a start, #40). TensorType name -> numpy dtype code, for the
# types whose bytes numpy can view directly.
_DTYPE_CODES = {
    "FLOAT32": "<f4",
    "FLOAT16": "<f2",
    "FLOAT64": "<f8",
    "INT32": "<i4",
    "UINT8": "u1",
    "INT64": "<i8",
    "BOOL": "?",
    "INT16": "<i2",
    "COMPLEX64": "<c8",
    "INT8": "i1",
    "COMPLEX128": "<c16",
    "UINT64": "<u8",
    "UINT32": "<u4",
    "UINT16": "<u2",
}


class _NumpyDtypes(Mapping[str, "np.dtype"]):
    """NUMPY_DTYPES: a mapping whose numpy dtypes are made (numpy imported) on first look-up."""

    _dtypes: dict[str, np.dtype] | None = None

    def _load(self) -> dict[str, np.dtype]:
        if self._dtypes is None:
            import numpy as np

            self._dtypes = {name: np.dtype(code) for name, code in _DTYPE_CODES.items()}
        return self._dtypes

    def __getitem__(self, name: str) -> np.dtype:
        return self._load()[name]

    def get(self, name: str, default: Any = None) -> Any:
        return self._load().get(name, default)

    def __contains__(self, name: object) -> bool:
        return name in _DTYPE_CODES

    def __iter__(self) -> Iterator[str]:
        return iter(_DTYPE_CODES)

    def __len__(self) -> int:
        return len(_DTYPE_CODES)


NUMPY_DTYPES: Mapping[str, np.dtype] = _NumpyDtypes()

CUSTOM = schema.enum_members("BuiltinOperator")["CUSTOM"]
# Codes above 127 do not fit the deprecated int8 field, which then holds this placeholder.
PLACEHOLDER_FOR_GREATER_OP_CODES = 127


@dataclass
class Options:
    """A builtin options table: its schema type name and its fields by snake_case name."""

    type: str
    values: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, type: str, /, **values: Any) -> Options:
        """An options table with every field: the given values over the schema's defaults.

        Floats are rounded to float32, as the file stores them, so a built model compares
        equal to the same model read back.
        """
        fields = {f.name: f for f in schema.fields(type)}
        unknown = sorted(set(values) - set(fields))
        if unknown:
            raise ValueError(f"{type} has no field {', '.join(unknown)}; its fields: {', '.join(fields)}")
        out: dict[str, Any] = {}
        for name, f in fields.items():
            v = values.get(name, f.default)
            if f.scalar == "Bool" and v is not None and f.kind == "scalar":
                v = bool(v)
            elif f.scalar in ("Float32",) and v is not None:
                import numpy as np

                v = [float(x) for x in np.float32(v).ravel()] if f.kind == "vector" else float(np.float32(v))
            enum = schema.enum_of(type, f)
            if enum and v is not None:
                v = schema.enum_name(enum, schema.enum_value(enum, v))
            out[name] = v
        return cls(type, out)

    def __getitem__(self, key: str) -> Any:
        return self.values[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)


@dataclass
class OperatorCode:
    builtin_code: int = 0
    custom_code: str | None = None
    version: int = 1
    deprecated_builtin_code: int = 0

    @property
    def code(self) -> int:
        # What the runtime uses: the larger of the two fields (schema.fbs, "builtin_code").
        return max(self.builtin_code, self.deprecated_builtin_code)

    @property
    def name(self) -> str:
        """`"CONV_2D"`, a custom op's custom code, or `"BUILTIN_<n>"` for an unknown code."""
        if self.code == CUSTOM:
            return self.custom_code if self.custom_code is not None else "CUSTOM"
        name = schema.enum_name("BuiltinOperator", self.code)
        return name if isinstance(name, str) else f"BUILTIN_{name}"

    @property
    def is_custom(self) -> bool:
        return self.code == CUSTOM

    @classmethod
    def of(cls, name: str, version: int = 1) -> OperatorCode:
        """An operator code for a builtin op name, or for a custom op by its custom code."""
        members = schema.enum_members("BuiltinOperator")
        if name in members and name != "CUSTOM":
            code = members[name]
            return cls(code, None, version, min(code, PLACEHOLDER_FOR_GREATER_OP_CODES))
        return cls(CUSTOM, name, version, CUSTOM)


@dataclass(eq=False)
class IndexVector:
    """A SparseIndexVector union member: its type (`"Int32Vector"`, ...) and its values.

    The values are as many as a sparse tensor's nonzeros, so a read keeps them as a read-only
    numpy view of the file rather than a list.
    """

    type: str
    values: np.ndarray

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, IndexVector):
            return NotImplemented
        import numpy as np

        return self.type == other.type and np.array_equal(self.values, other.values)


@dataclass
class DimensionMetadata:
    format: str | int = "DENSE"
    dense_size: int = 0
    array_segments: IndexVector | None = None
    array_indices: IndexVector | None = None


@dataclass
class Sparsity:
    traversal_order: list[int] | None = None
    block_map: list[int] | None = None
    dim_metadata: list[DimensionMetadata] | None = None


@dataclass
class Quantization:
    min: list[float] | None = None
    max: list[float] | None = None
    scale: list[float] | None = None
    zero_point: list[int] | None = None
    custom: bytes | None = None  # the CustomQuantization details union member
    quantized_dimension: int = 0

    @property
    def per_channel(self) -> bool:
        return self.scale is not None and len(self.scale) > 1


@dataclass
class VariantSubType:
    shape: list[int] | None = None
    type: str | int = "FLOAT32"
    has_rank: bool = False


@dataclass
class Tensor:
    name: str | None
    shape: list[int]
    type: str | int = "FLOAT32"
    buffer: int = 0
    quantization: Quantization | None = None
    is_variable: bool = False
    sparsity: Sparsity | None = None
    shape_signature: list[int] | None = None
    has_rank: bool = False
    variant_tensors: list[VariantSubType] | None = None

    @property
    def is_dynamic(self) -> bool:
        return self.shape_signature is not None and -1 in self.shape_signature


@dataclass
class Operator:
    opcode_index: int
    inputs: list[int]
    outputs: list[int]
    builtin_options: Options | None = None
    custom_options: bytes | memoryview | None = None
    custom_options_format: int = 0
    mutating_variable_inputs: list[bool] | None = None
    intermediates: list[int] | None = None
    builtin_options_2: Options | None = None
    debug_metadata_index: int = -1


@dataclass
class Subgraph:
    tensors: list[Tensor] = field(default_factory=list)
    inputs: list[int] = field(default_factory=list)
    outputs: list[int] = field(default_factory=list)
    operators: list[Operator] = field(default_factory=list)
    name: str | None = None
    debug_metadata_index: int = -1


@dataclass
class Buffer:
    """Bytes of a constant. Read from a file, a zero-copy view of its mmap."""

    data: bytes | memoryview = b""
    # The file holds a data vector of length 0: a zero-element constant, as converters write the
    # shape operand of a RESHAPE to a scalar. TFLite reads such a tensor as constant (kTfLiteMmapRo:
    # interpreter_builder.cc ParseTensors takes any data vector, empty or not), where a buffer with
    # no data vector leaves the tensor to the arena, like a computed one.
    empty_data: bool = False


@dataclass
class Metadata:
    name: str | None
    buffer: int


@dataclass
class TensorMap:
    name: str | None
    tensor_index: int


@dataclass
class SignatureDef:
    inputs: list[TensorMap] = field(default_factory=list)
    outputs: list[TensorMap] = field(default_factory=list)
    signature_key: str | None = None
    subgraph_index: int = 0


@dataclass
class Model:
    version: int = 3
    operator_codes: list[OperatorCode] = field(default_factory=list)
    subgraphs: list[Subgraph] = field(default_factory=list)
    description: str | None = None
    buffers: list[Buffer] = field(default_factory=list)
    metadata_buffer: list[int] | None = None
    metadata: list[Metadata] | None = None
    signature_defs: list[SignatureDef] | None = None
    # Bytes another tool appended after the model (Ultralytics' metadata zip, TFLite Support's
    # associated files): not the schema's, but the user's; `write` puts them back after the model.
    appended: bytes | memoryview = b""
    # What the file held that the installed schema does not know, one line each. Writing such
    # a model would drop it, so `write` refuses unless told the loss is accepted.
    unknown: list[str] = field(default_factory=list, compare=False)

    def opcode(self, op: Operator) -> OperatorCode:
        return self.operator_codes[op.opcode_index]

    def op_name(self, op: Operator) -> str:
        return self.opcode(op).name

    def operators(self) -> Iterator[tuple[int, int, Operator]]:
        """Every operator as (subgraph index, operator index, operator)."""
        for si, sg in enumerate(self.subgraphs):
            for oi, op in enumerate(sg.operators):
                yield si, oi, op

    def opcode_index(self, name: str, version: int = 1) -> int:
        """Index of the operator code for (name, version), added to the table if new."""
        wanted = OperatorCode.of(name, version)
        for i, oc in enumerate(self.operator_codes):
            if (oc.code, oc.custom_code, oc.version) == (wanted.code, wanted.custom_code, version):
                return i
        self.operator_codes.append(wanted)
        return len(self.operator_codes) - 1

    def is_constant(self, tensor: Tensor) -> bool:
        """Whether the interpreter reads `tensor` as a constant: its buffer (not the sentinel 0)
        has a data vector, possibly an empty one."""
        if tensor.buffer <= 0 or tensor.buffer >= len(self.buffers):
            return False
        buf = self.buffers[tensor.buffer]
        return len(buf.data) > 0 or buf.empty_data

    def tensor_data(self, tensor: Tensor) -> np.ndarray | None:
        """A constant tensor's values as a read-only numpy view, or None if it has no data.

        A zero-element constant (an empty data vector) is an empty array of its shape. Sparse
        tensors and types numpy cannot view (INT4, STRING, ...) come back as raw uint8.
        """
        import numpy as np

        data = self.buffers[tensor.buffer].data if 0 <= tensor.buffer < len(self.buffers) else b""
        if not len(data):
            if not self.is_constant(tensor) or 0 not in tensor.shape:
                return None
            dtype = NUMPY_DTYPES.get(tensor.type) if isinstance(tensor.type, str) else None
            return np.zeros([max(d, 0) for d in tensor.shape], dtype if dtype is not None else np.uint8)
        dtype = NUMPY_DTYPES.get(tensor.type) if isinstance(tensor.type, str) else None
        if dtype is None or tensor.sparsity is not None or len(data) % dtype.itemsize:
            return np.frombuffer(data, np.uint8)
        arr = np.frombuffer(data, dtype)
        if int(np.prod(tensor.shape, dtype=np.int64)) == arr.size:
            arr = arr.reshape(tensor.shape)
        return arr


def clone(model: Model) -> Model:
    """A deep copy that shares the (never mutated) constant bytes."""
    memo: dict[int, object] = {id(b.data): b.data for b in model.buffers}
    memo[id(model.appended)] = model.appended
    for sg in model.subgraphs:
        for op in sg.operators:
            if op.custom_options is not None:
                memo[id(op.custom_options)] = op.custom_options
    return copy.deepcopy(model, memo)
