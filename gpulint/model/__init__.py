"""The model IR and its .tflite reader and writer: `read(path) -> Model`, `write(model, path)`."""

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
from gpulint.model.read import read, read_buffer
from gpulint.model.write import LossyWriteError, to_bytes, write

__all__ = [
    "Buffer",
    "DimensionMetadata",
    "IndexVector",
    "LossyWriteError",
    "Metadata",
    "Model",
    "ModelError",
    "Operator",
    "OperatorCode",
    "Options",
    "Quantization",
    "SignatureDef",
    "Sparsity",
    "Subgraph",
    "Tensor",
    "TensorMap",
    "VariantSubType",
    "read",
    "read_buffer",
    "to_bytes",
    "write",
]
