"""A generated grid of one-op models for the differential tests (tests/test_oracle_fidelity.py).

Ops x versions x ranks x dtypes x constant/runtime operands x broadcast shapes, a few hundred
models in all, each built with gpulint.model.build. The cases lean on what the delegate's
backends decide differently: broadcasts, batch != 1, runtime weights, integer casts, grouped
convolutions, and the ops the OpenGL backend has no shader for. A case whose model the
interpreter itself rejects is not an error here: the oracle says it cannot decide it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from flatbuffers import flexbuffers

from gpulint.model import Model
from gpulint.model.build import ModelBuilder, SubgraphBuilder
from gpulint.model.ir import Operator, Options

NP = {"FLOAT32": np.float32, "FLOAT16": np.float16, "INT32": np.int32, "BOOL": np.bool_, "INT64": np.int64}
SHORT = {"FLOAT32": "f32", "FLOAT16": "f16", "INT32": "i32", "BOOL": "bool", "INT64": "i64"}


@dataclass(frozen=True)
class Operand:
    shape: tuple[int, ...]
    dtype: str = "FLOAT32"
    const: bool = False
    value: Any = None  # for constants: the array (else ones of shape)

    def tag(self) -> str:
        return ("c" if self.const else "") + SHORT[self.dtype] + "[" + ",".join(map(str, self.shape)) + "]"


@dataclass(frozen=True)
class Case:
    id: str
    op: str
    inputs: tuple[Operand, ...]
    outputs: tuple[tuple[tuple[int, ...], str], ...]  # (shape, dtype) of each output
    options: tuple[tuple[str, Any], ...] = ()
    version: int = 1
    make: Callable[[], Model] | None = None  # a model of several ops, or quantized ones

    def build(self) -> Model:
        if self.make is not None:
            return self.make()
        mb = ModelBuilder()
        g = mb.subgraph("main")
        ins = []
        for i, o in enumerate(self.inputs):
            if o.const:
                value = o.value if o.value is not None else np.ones(o.shape, NP[o.dtype])
                ins.append(g.const(f"c{i}", np.asarray(value, NP[o.dtype]).reshape(o.shape), o.dtype))
            else:
                ins.append(g.input(f"in{i}", list(o.shape), o.dtype))
        outs = [g.tensor(f"out{i}", list(s), d) for i, (s, d) in enumerate(self.outputs)]
        g.op(self.op, ins, out=outs, options=dict(self.options) or None, version=self.version)
        g.output(*outs)
        return mb.build()


def case(
    op: str,
    inputs: Sequence[Operand],
    out: Sequence[int] | Sequence[tuple[Sequence[int], str]],
    out_dtype: str = "FLOAT32",
    version: int = 1,
    note: str = "",
    **options: Any,
) -> Case:
    several = bool(out) and isinstance(out[0], tuple)
    outputs = tuple((tuple(s), d) for s, d in out) if several else ((tuple(out), out_dtype),)  # type: ignore[misc,arg-type]
    tag = "-".join(o.tag() for o in inputs)
    opts = "".join(f"-{k}={v}" for k, v in sorted(options.items()) if k not in QUIET_OPTIONS)
    cid = f"{op}-v{version}-{tag}{opts}" + (f"-{note}" if note else "")
    return Case(cid, op, tuple(inputs), outputs, tuple(sorted(options.items())), version)


QUIET_OPTIONS = {"padding", "stride_w", "stride_h", "filter_width", "filter_height", "beta", "in_data_type"}


def rt(*shape: int, dtype: str = "FLOAT32") -> Operand:
    return Operand(tuple(shape), dtype)


def cst(*shape: int, dtype: str = "FLOAT32", value: Any = None) -> Operand:
    return Operand(tuple(shape), dtype, True, value)


BINARY = ["ADD", "SUB", "MUL", "DIV", "MAXIMUM", "MINIMUM", "SQUARED_DIFFERENCE", "POW"]
BROADCASTS: list[tuple[tuple[int, ...], tuple[int, ...]]] = [
    ((1, 8, 8, 4), (1, 8, 8, 4)),
    ((1, 8, 8, 4), (4,)),
    ((1, 8, 8, 4), (1, 1, 1, 4)),
    ((1, 8, 8, 4), (1, 8, 8, 1)),
    ((1, 8, 1, 4), (1, 1, 8, 4)),
    ((1, 8, 8, 4), ()),
    ((1, 1, 1, 4), (1, 8, 8, 4)),
    ((2, 8, 8, 4), (2, 8, 8, 4)),
    ((8, 4), (8, 4)),
    ((2, 8, 4), (4,)),
    ((1, 8, 4), (1, 1, 4)),
]
UNARY = [
    "ABS",
    "EXP",
    "LOGISTIC",
    "TANH",
    "RELU",
    "RELU6",
    "SQRT",
    "RSQRT",
    "NEG",
    "SQUARE",
    "HARD_SWISH",
    "LOG",
    "SIN",
    "COS",
    "FLOOR",
    "ELU",
    "GELU",
    "ROUND",
    "SIGN",
    "CEIL",
]
UNARY_SHAPES = [(1, 8, 8, 4), (2, 8, 8, 4), (8, 4), (1, 8, 4), (4,)]


def cases() -> list[Case]:
    out: list[Case] = []
    # binary elementwise: broadcast shapes x constant / runtime second operand x dtype
    for op in BINARY:
        for a, b in BROADCASTS:
            shape = tuple(np.broadcast_shapes(a, b))
            for const in (False, True):
                second = cst(*b) if const else rt(*b)
                out.append(case(op, [rt(*a), second], shape))
    for op in ("ADD", "SUB", "MUL"):
        for a, b in BROADCASTS[:3]:
            for const in (False, True):
                second = cst(*b, dtype="INT32") if const else rt(*b, dtype="INT32")
                out.append(case(op, [rt(*a, dtype="INT32"), second], a, "INT32"))
    # versions around the delegate's maxima
    for op, versions in {"ADD": (1, 2, 3, 4, 5), "MUL": (1, 2, 3, 4, 5, 6), "SUB": (1, 2, 3, 4, 5)}.items():
        for v in versions:
            out.append(case(op, [rt(1, 8, 8, 4), rt(1, 8, 8, 4)], (1, 8, 8, 4), version=v))
    for op, versions in {"LOGISTIC": (1, 2, 3), "TANH": (1, 2, 3), "ABS": (1, 2, 3, 4), "RELU": (1, 2, 3)}.items():
        for v in versions:
            out.append(case(op, [rt(1, 8, 8, 4)], (1, 8, 8, 4), version=v))
    # unary elementwise over ranks and batch
    for op in UNARY:
        for s in UNARY_SHAPES:
            out.append(case(op, [rt(*s)], s))
    out += conv_cases() + shape_cases()
    seen: set[str] = set()
    unique = []
    for c in out:
        if c.id not in seen:
            seen.add(c.id)
            unique.append(c)
    return unique


def conv_cases() -> list[Case]:
    out: list[Case] = []
    same = dict(padding="SAME", stride_w=1, stride_h=1)
    for batch in (1, 2):
        for cin in (3, 4, 8):
            for wconst in (True, False):
                w = cst(8, 3, 3, cin) if wconst else rt(8, 3, 3, cin)
                out.append(case("CONV_2D", [rt(batch, 8, 8, cin), w, cst(8)], (batch, 8, 8, 8), **same))
        # grouped convolution: 8 input channels, filters of 4 (2 groups)
        out.append(
            case("CONV_2D", [rt(batch, 8, 8, 8), cst(8, 3, 3, 4), cst(8)], (batch, 8, 8, 8), note="grouped", **same)
        )
        out.append(
            case(
                "DEPTHWISE_CONV_2D",
                [rt(batch, 8, 8, 8), cst(1, 3, 3, 8), cst(8)],
                (batch, 8, 8, 8),
                depth_multiplier=1,
                **same,
            )
        )
        out.append(
            case(
                "DEPTHWISE_CONV_2D",
                [rt(batch, 8, 8, 4), cst(1, 3, 3, 8), cst(8)],
                (batch, 8, 8, 8),
                version=2,
                depth_multiplier=2,
                **same,
            )
        )
        for pool in ("MAX_POOL_2D", "AVERAGE_POOL_2D"):
            out.append(
                case(
                    pool,
                    [rt(batch, 8, 8, 4)],
                    (batch, 4, 4, 4),
                    padding="VALID",
                    stride_w=2,
                    stride_h=2,
                    filter_width=2,
                    filter_height=2,
                )
            )
    for v in (1, 2, 3, 4, 5):
        out.append(case("CONV_2D", [rt(1, 8, 8, 4), cst(8, 3, 3, 4), cst(8)], (1, 8, 8, 8), version=v, **same))
    for shape, outshape in (((1, 16), (1, 8)), ((2, 16), (2, 8)), ((1, 4, 16), (4, 8))):
        for wconst in (True, False):
            w = cst(8, 16) if wconst else rt(8, 16)
            out.append(case("FULLY_CONNECTED", [rt(*shape), w, cst(8)], outshape))
    out.append(case("FULLY_CONNECTED", [rt(1, 4, 16), cst(8, 16), cst(8)], (1, 4, 8), keep_num_dims=True))
    for v in (1, 2, 3, 4, 5, 6, 7, 8, 9, 10):
        out.append(case("FULLY_CONNECTED", [rt(1, 16), cst(8, 16), cst(8)], (1, 8), version=v))
    return out


def shape_cases() -> list[Case]:
    out: list[Case] = []
    x = rt(1, 8, 8, 4)
    out.append(case("RESHAPE", [x, cst(3, dtype="INT32", value=[1, 64, 4])], (1, 64, 4)))
    out.append(case("RESHAPE", [x, rt(3, dtype="INT32")], (1, 64, 4), note="runtime-shape"))
    out.append(case("RESHAPE", [x], (1, 64, 4), new_shape=[1, 64, 4]))
    out.append(case("RESHAPE", [rt(2, 8, 8, 4), cst(2, dtype="INT32", value=[2, 256])], (2, 256)))
    for perm, shape in (([0, 2, 1, 3], (1, 8, 8, 4)), ([0, 3, 1, 2], (1, 4, 8, 8)), ([0, 2, 1], (1, 4, 8))):
        src = x if len(perm) == 4 else rt(1, 8, 4)
        note = "perm=" + "".join(map(str, perm))
        out.append(case("TRANSPOSE", [src, cst(len(perm), dtype="INT32", value=perm)], shape, note=note))
    for axis, b, shape in (
        (3, (1, 8, 8, 4), (1, 8, 8, 8)),
        (1, (1, 8, 8, 4), (1, 16, 8, 4)),
        (0, (1, 8, 8, 4), (2, 8, 8, 4)),
    ):
        out.append(case("CONCATENATION", [x, rt(*b)], shape, axis=axis))
        out.append(case("CONCATENATION", [x, cst(*b)], shape, axis=axis))
        # All zeros: MakePaddingFromZerosConcat turns the concat into a PAD unless on the batch axis.
        out.append(case("CONCATENATION", [x, cst(*b, value=np.zeros(b))], shape, axis=axis, note="zeros"))
    zeros = cst(1, 8, 8, 4, value=np.zeros((1, 8, 8, 4)))
    out.append(case("CONCATENATION", [zeros, x], (1, 8, 8, 8), axis=3, note="zeros-first"))
    out.append(case("CONCATENATION", [x, zeros, x], (1, 8, 8, 12), axis=3, note="zeros-of-three"))
    for s in ((1, 10), (2, 10), (1, 8, 8, 4), (1, 4, 10)):
        out.append(case("SOFTMAX", [rt(*s)], s, beta=1.0))
    out.append(case("MEAN", [x, cst(2, dtype="INT32", value=[1, 2])], (1, 1, 1, 4), keep_dims=True))
    out.append(case("MEAN", [x, cst(2, dtype="INT32", value=[1, 2])], (1, 4), keep_dims=False))
    out.append(case("MEAN", [x, cst(1, dtype="INT32", value=[3])], (1, 8, 8, 1), keep_dims=True))
    pads = [[0, 0], [1, 1], [1, 1], [0, 0]]
    out.append(case("PAD", [x, cst(4, 2, dtype="INT32", value=pads)], (1, 10, 10, 4)))
    out.append(case("PAD", [x, rt(4, 2, dtype="INT32")], (1, 10, 10, 4), note="runtime-pads"))
    pads_c = [[0, 0], [0, 0], [0, 0], [0, 4]]
    out.append(case("PAD", [x, cst(4, 2, dtype="INT32", value=pads_c)], (1, 8, 8, 8), note="channels"))
    for name in ("PAD", "MIRROR_PAD"):  # 3x2 paddings: the builder pads the batch by 1 (GL refuses)
        extra = {"mode": "REFLECT"} if name == "MIRROR_PAD" else {}
        rows3 = [[0, 0], [1, 1], [0, 0]]
        out.append(case(name, [rt(1, 8, 4), cst(3, 2, dtype="INT32", value=rows3)], (1, 10, 4), note="rank3", **extra))
    out.append(
        case(
            "SLICE",
            [x, cst(4, dtype="INT32", value=[0, 1, 1, 0]), cst(4, dtype="INT32", value=[1, 4, 4, 4])],
            (1, 4, 4, 4),
        )
    )
    out.append(
        case(
            "STRIDED_SLICE",
            [
                x,
                cst(4, dtype="INT32", value=[0, 0, 0, 0]),
                cst(4, dtype="INT32", value=[1, 8, 8, 4]),
                cst(4, dtype="INT32", value=[1, 2, 2, 1]),
            ],
            (1, 4, 4, 4),
        )
    )
    for axis, idx, shape in ((0, [0], (1, 8, 8, 4)), (1, [0, 2, 4], (1, 3, 8, 4)), (3, [0, 1], (1, 8, 8, 2))):
        out.append(case("GATHER", [x, cst(len(idx), dtype="INT32", value=idx)], shape, axis=axis))
    out.append(case("GATHER", [rt(10, 4), cst(3, dtype="INT32", value=[1, 2, 3])], (3, 4), axis=0))
    out.append(case("BATCH_MATMUL", [rt(1, 8, 16), rt(1, 16, 8)], (1, 8, 8)))
    out.append(case("BATCH_MATMUL", [rt(1, 8, 16), cst(1, 16, 8)], (1, 8, 8)))
    out.append(case("BATCH_MATMUL", [rt(1, 8, 16), cst(16, 8)], (1, 8, 8)))  # a 1x1 conv in the builder
    out.append(case("BATCH_MATMUL", [rt(2, 8, 16), rt(2, 16, 8)], (2, 8, 8)))
    for src, dst in (("FLOAT32", "INT32"), ("INT32", "FLOAT32"), ("BOOL", "FLOAT32"), ("FLOAT32", "BOOL")):
        out.append(case("CAST", [rt(1, 8, 8, 4, dtype=src)], (1, 8, 8, 4), dst, in_data_type=src, out_data_type=dst))
    out.append(case("CUMSUM", [rt(1, 8, 8, 4), cst(dtype="INT32", value=2)], (1, 8, 8, 4)))
    out.append(case("CUMSUM", [rt(1, 8, 4), cst(dtype="INT32", value=1)], (1, 8, 4)))
    out.append(case("SPLIT", [cst(dtype="INT32", value=3), x], [((1, 8, 8, 2), "FLOAT32")] * 2, num_splits=2))
    out.append(case("PACK", [rt(1, 8, 4), rt(1, 8, 4)], (1, 2, 8, 4), values_count=2, axis=1))
    out.append(case("PACK", [rt(1, 8, 4), cst(1, 8, 4)], (1, 2, 8, 4), values_count=2, axis=1))
    out.append(case("TILE", [x, cst(4, dtype="INT32", value=[1, 2, 1, 1])], (1, 16, 8, 4)))
    out.append(case("RESIZE_BILINEAR", [x, cst(2, dtype="INT32", value=[16, 16])], (1, 16, 16, 4)))
    out.append(case("RESIZE_NEAREST_NEIGHBOR", [x, cst(2, dtype="INT32", value=[16, 16])], (1, 16, 16, 4)))
    out.append(case("SPACE_TO_DEPTH", [x], (1, 4, 4, 16), block_size=2))
    out.append(case("DEPTH_TO_SPACE", [x], (1, 16, 16, 1), block_size=2))
    out.append(case("LEAKY_RELU", [x], (1, 8, 8, 4), alpha=0.1))
    out.append(case("PRELU", [x, cst(1, 1, 4)], (1, 8, 8, 4)))
    out.append(case("PRELU", [x, rt(1, 1, 4)], (1, 8, 8, 4)))
    out.append(case("REDUCE_MAX", [x, cst(1, dtype="INT32", value=[3])], (1, 8, 8, 1), keep_dims=True))
    out.append(case("SUM", [x, cst(1, dtype="INT32", value=[3])], (1, 8, 8, 1), keep_dims=True))
    out.append(case("ARG_MAX", [x, cst(1, dtype="INT32", value=[3])], (1, 8, 8), "INT32", output_type="INT32"))
    out.append(case("SELECT_V2", [rt(1, 8, 8, 4, dtype="BOOL"), x, rt(1, 8, 8, 4)], (1, 8, 8, 4)))
    out.append(case("LESS", [x, rt(1, 8, 8, 4)], (1, 8, 8, 4), "BOOL"))
    return out + issue_38_cases()


def issue_38_cases() -> list[Case]:
    """Both sides of the conditions of issue #38 that a one-op model can show."""
    out: list[Case] = []
    x = rt(1, 8, 8, 4)
    # compat has no case for RELU_0_TO_1 or BITWISE_XOR; the accelerator's parsers call it
    out.append(case("RELU_0_TO_1", [x], (1, 8, 8, 4)))
    out.append(case("RELU_N1_TO_1", [x], (1, 8, 8, 4)))
    i32 = rt(1, 8, 8, 4, dtype="INT32")
    out.append(case("BITWISE_XOR", [i32, rt(1, 8, 8, 4, dtype="INT32")], (1, 8, 8, 4), "INT32"))
    # EMBEDDING_LOOKUP: an fp16 table has no quantization params
    for dtype in ("FLOAT32", "FLOAT16"):
        out.append(case("EMBEDDING_LOOKUP", [rt(4, dtype="INT32"), cst(16, 8, dtype=dtype)], (4, 8)))
    # SELECT_V2: a condition with a batch into an output of batch 1
    for cond, shape in (((8, 8), (1, 2, 8, 8)), ((1, 1, 8, 8), (1, 2, 8, 8)), ((8, 8), (2, 8, 8))):
        out.append(case("SELECT_V2", [cst(*cond, dtype="BOOL"), rt(*shape), rt(*shape)], shape))
    # DYNAMIC_UPDATE_SLICE: compat's start-index type
    for start in ("INT32", "INT64"):
        out.append(case("DYNAMIC_UPDATE_SLICE", [x, rt(1, 2, 2, 4), rt(4, dtype=start)], (1, 8, 8, 4)))
    # MEAN on the OpenGL backend: {HEIGHT, WIDTH} of a 4-D input only
    out.append(case("MEAN", [rt(1, 8, 4), cst(2, dtype="INT32", value=[1, 2])], (1, 1, 1), keep_dims=True))
    out.append(case("MEAN", [x, cst(1, dtype="INT32", value=[1])], (1, 1, 8, 4), keep_dims=True, note="axis1"))
    return out + issue_38_graphs()


def graph(cid: str, build: Callable[[SubgraphBuilder], int]) -> Case:
    def make() -> Model:
        mb = ModelBuilder()
        g = mb.subgraph("main")
        g.output(build(g))
        return mb.build()

    return Case(cid, "", (), (), make=make)


def dequantized(shape: tuple[int, ...], reader: str) -> Callable[[SubgraphBuilder], int]:
    """An int8 weight behind a constant DEQUANTIZE, read by FULLY_CONNECTED or ADD."""

    def build(g: SubgraphBuilder) -> int:
        w = g.op("DEQUANTIZE", [g.const("w", np.ones(shape, np.int8), quant=(0.02, 0))], list(shape))
        if reader == "FULLY_CONNECTED":
            return g.op(reader, [g.input("x", [1, shape[-1]]), w, -1], [1, shape[0]])
        return g.op(reader, [g.input("x", list(shape)), w], list(shape))

    return build


def same_twice(op: str) -> Callable[[SubgraphBuilder], int]:
    def build(g: SubgraphBuilder) -> int:
        x = g.input("x", [1, 8, 8])
        if op == "SELECT_V2":
            return g.op(op, [g.input("c", [1, 8, 8], "BOOL"), x, x], [1, 8, 8])
        return g.op(op, [x, x], [1, 8, 8])

    return build


def computed_size(shape_first: bool) -> Callable[[SubgraphBuilder], int]:
    """RESIZE_BILINEAR to SHAPE -> STRIDED_SLICE -> MUL of its input (U^2-Net's exports)."""

    def build(g: SubgraphBuilder) -> int:
        x = g.input("x", [1, 8, 8, 4])
        y = x if shape_first else g.op("RELU", [x], [1, 8, 8, 4])
        s = g.op("SHAPE", [y], [4], dtype="INT32", options=dict(out_type="INT32"))
        ends = [g.const(n, np.array([v], np.int32)) for n, v in (("b", 1), ("e", 3), ("s", 1))]
        hw = g.op("STRIDED_SLICE", [s, *ends], [2], dtype="INT32")
        size = g.op("MUL", [hw, g.const("two", np.array([2, 2], np.int32))], [2], dtype="INT32")
        return g.op("RELU", [g.op("RESIZE_BILINEAR", [y, size], [1, 16, 16, 4])], [1, 16, 16, 4])

    return build


def landmarks(source: str, post: bool, channels: int = 2, readers: int = 1) -> Callable[[SubgraphBuilder], int]:
    """MediaPipe's TransformLandmarks (version 2, as MediaPipe registers it) on landmarks from `source`
    (reshape, relu or input: a graph input), with or without a RESHAPE after it: its V2-to-V1
    transformation needs a RESHAPE on each side (face_landmark_with_attention's shape)."""

    def build(g: SubgraphBuilder) -> int:
        n = 8
        m = g.input("m", [1, 4, 4])
        if source == "reshape":
            flat = g.input("x", [1, n * channels])
            pts = g.op("RESHAPE", [flat, g.const("s1", np.array([1, n, channels], np.int32))], [1, n, channels])
        elif source == "relu":
            pts = g.op("RELU", [g.input("x", [1, n, channels])], [1, n, channels])
        else:
            pts = g.input("x", [1, n, channels])
        out = g.op("TransformLandmarks", [pts, m], [1, n, channels], custom_options=b"", version=2)
        for _ in range(readers - 1):
            g.output(g.op("ABS", [out], [1, n, channels]))
        if not post:
            return out
        return g.op("RESHAPE", [out, g.const("s2", np.array([1, n * channels], np.int32))], [1, n * channels])

    return build


def bilinear(matrix: tuple[int, ...], sized: bool) -> Callable[[SubgraphBuilder], int]:
    """MediaPipe's TransformTensorBilinear version 2: its output size comes from the custom options."""

    def build(g: SubgraphBuilder) -> int:
        x, m = g.input("x", [1, 16, 16, 4]), g.input("m", list(matrix))
        opts = flexbuffers.Dumps({"output_height": 8, "output_width": 8}) if sized else b""
        return g.op("TransformTensorBilinear", [x, m], [1, 8, 8, 4], custom_options=bytes(opts), version=2)

    return build


def matrix_options() -> bytes:
    """Landmarks2TransformMatrix version 2's options, as MediaPipe's face models carry them (subset_idxs
    a typed vector, which its parser reads with AsTypedVector)."""
    b = flexbuffers.Builder()
    with b.Map():
        for key, value in (("left_rotation_idx", 0), ("output_height", 16), ("output_width", 16)):
            b.Int(key, value)
        b.Int("right_rotation_idx", 5)
        b.Float("scale_x", 1.5)
        b.Float("scale_y", 1.5)
        b.Key("subset_idxs")
        b.TypedVectorFromElements(list(range(8)))
        b.Float("target_rotation_radians", 0.0)
    return bytes(b.Finish())


def landmarks_matrix(chain: str) -> Callable[[SubgraphBuilder], int]:
    """Landmarks2TransformMatrix version 2 after `chain`: input (a graph input), relu, reshape, and
    -mul for a MUL by a scalar before the op (face_landmark_with_attention: RESHAPE -> MUL -> op)."""

    def build(g: SubgraphBuilder) -> int:
        n = 8
        if chain.startswith("reshape"):
            flat = g.input("x", [1, n * 3])
            x = g.op("RESHAPE", [flat, g.const("s", np.array([1, n, 3], np.int32))], [1, n, 3])
        elif chain.startswith("relu"):
            x = g.op("RELU", [g.input("x", [1, n, 3])], [1, n, 3])
        else:
            x = g.input("x", [1, n, 3])
        if chain.endswith("mul"):
            x = g.op("MUL", [x, g.const("k", np.array([2.0], np.float32))], [1, n, 3])
        return g.op("Landmarks2TransformMatrix", [x], [1, 4, 4], custom_options=matrix_options(), version=2)

    return build


def depthwise(multiplier: int, weights: str) -> Callable[[SubgraphBuilder], int]:
    """DEPTHWISE_CONV_2D with a depth multiplier and weights that are const (float), f16 (an fp16
    DEQUANTIZE, folded into a constant), int8 (an int8 DEQUANTIZE: runtime weights) or input."""

    def build(g: SubgraphBuilder) -> int:
        cin = 8 // multiplier
        x, shape = g.input("x", [1, 8, 8, cin]), [1, 3, 3, 8]
        if weights == "const":
            w = g.const("w", np.full(shape, 0.02, np.float32))
        elif weights == "input":
            w = g.input("w", shape)
        elif weights == "f16":
            w = g.op("DEQUANTIZE", [g.const("w", np.full(shape, 0.02, np.float16))], shape)
        else:
            w = g.op("DEQUANTIZE", [g.const("w", np.ones(shape, np.int8), quant=(0.02, 0))], shape)
        opts = dict(padding="SAME", stride_w=1, stride_h=1, depth_multiplier=multiplier)
        return g.op("DEPTHWISE_CONV_2D", [x, w, g.const("b", np.zeros(8, np.float32))], [1, 8, 8, 8], options=opts)

    return build


def pack_twice(shape: tuple[int, ...], axis: int) -> Callable[[SubgraphBuilder], int]:
    """PACK(x, x): the same value twice unless the builder puts a RESHAPE copy before it."""

    def build(g: SubgraphBuilder) -> int:
        x = g.input("x", list(shape))
        out = list(shape)
        out.insert(axis, 2)
        return g.op("PACK", [x, x], out, options=dict(axis=axis, values_count=2))

    return build


def grouped_conv(kernel: int, stride: int) -> Callable[[SubgraphBuilder], int]:
    """CONV_2D of 16 channels in 2 groups of 8 (one grouped CONVOLUTION_2D in the builder)."""

    def build(g: SubgraphBuilder) -> int:
        x = g.input("x", [1, 8, 8, 16])
        w = g.const("w", np.full((16, kernel, kernel, 8), 0.01, np.float32))
        out = (8 - kernel) // stride + 1
        opts = dict(padding="VALID", stride_w=stride, stride_h=stride)
        return g.op("CONV_2D", [x, w, g.const("b", np.zeros(16, np.float32))], [1, out, out, 16], options=opts)

    return build


def issue_38_graphs() -> list[Case]:
    """Both sides of the conditions of issue #38 that need several ops or quantized constants."""
    out = [
        graph(f"DEQUANTIZE-i8{list(shape)}-{reader}".replace(" ", ""), dequantized(shape, reader))
        for shape, reader in (
            ((8, 16), "FULLY_CONNECTED"),
            ((1, 16), "FULLY_CONNECTED"),
            ((2, 4, 8), "ADD"),
            ((2, 4, 4, 8), "ADD"),
        )
    ]
    out += [graph(f"{op}-same-tensor-twice", same_twice(op)) for op in ("BATCH_MATMUL", "SELECT_V2", "ADD")]
    out += [graph(f"RESIZE_BILINEAR-computed-size-{w}", computed_size(w == "first")) for w in ("first", "after-relu")]
    for source, post, channels, readers in (
        ("reshape", 1, 2, 1),
        ("reshape", 1, 3, 1),
        ("reshape", 1, 4, 1),
        ("relu", 1, 2, 1),
        ("reshape", 0, 2, 1),
        ("reshape", 1, 2, 2),
    ):
        cid = f"TransformLandmarks-v2-{source}-post{post}-c{channels}-readers{readers}"
        out.append(graph(cid, landmarks(source, bool(post), channels, readers)))
    for matrix, sized in (((1, 4, 4), True), ((1, 4, 4), False), ((1, 16), True)):
        out.append(
            graph(
                f"TransformTensorBilinear-v2-m{list(matrix)}-sized{int(sized)}".replace(" ", ""),
                bilinear(matrix, sized),
            )
        )
    for chain in ("reshape-mul", "relu-mul", "reshape", "relu"):
        out.append(graph(f"Landmarks2TransformMatrix-v2-{chain}", landmarks_matrix(chain)))
    # runtime weights with a multiplier kill both delegates' processes (test_oracle_*: the deaths)
    for multiplier, weights in ((1, "int8"), (1, "input"), (2, "const"), (2, "f16")):
        out.append(graph(f"DEPTHWISE_CONV_2D-multiplier{multiplier}-{weights}-weights", depthwise(multiplier, weights)))
    # failures in the classic builder's Parse (every backend): constant operands of rank 2 and 3
    # (the grid's concats are 4-D), PACK(x, x) where no RESHAPE copy comes between (its [1, 8, 4]
    # case kills the accelerator: test_oracle_litert's deaths)
    for rank in (2, 3):
        shape = (1, 4) if rank == 2 else (1, 8, 4)
        for zero in (True, False):
            c = cst(*shape, value=np.zeros(shape) if zero else None)
            both = (*shape[:-1], 2 * shape[-1])
            out.append(case("CONCATENATION", [rt(*shape), c], both, axis=rank - 1, note=f"zero{int(zero)}"))
    out.append(graph("PACK-same-tensor-twice-[8,4]-axis0", pack_twice((8, 4), 0)))
    out.append(graph("PACK-same-tensor-twice-[1,8,4]-axis1", pack_twice((1, 8, 4), 1)))
    # OpenGL's 1x1 shader takes a grouped 1x1 conv at stride 1 (and computes it wrong: GPU806)
    for kernel, stride in ((1, 1), (1, 2), (3, 1)):
        out.append(graph(f"CONV_2D-2-groups-{kernel}x{kernel}-stride{stride}", grouped_conv(kernel, stride)))
    return out + issue_47_graphs() + issue_49_graphs()


def issue_47_graphs() -> list[Case]:
    """A RESHAPE to a scalar whose shape operand is a zero-element INT32 tensor, as converters
    write it (BirdNET, litert-torch's LLM exports): with an empty data vector the interpreter reads
    it as a constant and the graph is not refused; with no data vector it is the arena's, the
    RESHAPE's output shape is unknown at Prepare and the whole graph is refused."""
    out = [
        graph(f"RESHAPE-scalar-shape-operand-{v}", scalar_reshape(v == "empty-vector"))
        for v in ("empty-vector", "no-vector")
    ]
    # STABLEHLO_COMPOSITE: the classic delegate takes none; the accelerator refuses these by name or
    # operand (the ones it takes kill it: test_oracle_litert's deaths)
    for name, kinds, eps in (
        ("odml.foo", "rc", True),
        ("odml.l2_norm", "r", True),
        ("odml.rms_norm", "rr", True),
        ("odml.group_norm", "rcc", False),
    ):
        out.append(graph(f"STABLEHLO_COMPOSITE-{name}-{kinds}-eps{int(eps)}", composite(name, kinds, eps)))
    # the embedding table: a constant builds, an fp16 one behind a DEQUANTIZE is refused (the int8 one
    # and a graph input kill the accelerator: test_oracle_litert's deaths)
    out += [graph(f"EMBEDDING_LOOKUP-{kind}-table", embedding(kind)) for kind in ("const", "dequant-fp16")]
    # a BOOL TILE inside the graph (from a comparison) and at its input: LiteRT 2.3 refuses both (#49)
    out += [graph(f"TILE-bool-{where}", bool_tile(where == "internal")) for where in ("internal", "input")]
    return out


def bool_tile(internal: bool) -> Callable[[SubgraphBuilder], int]:
    def build(g: SubgraphBuilder) -> int:
        x = g.input("x", [1, 2, 2, 4])
        if internal:
            b = g.op("LESS", [x, g.const("z", np.zeros((1, 2, 2, 4), np.float32))], [1, 2, 2, 4], dtype="BOOL")
        else:
            b = g.input("b", [1, 2, 2, 4], "BOOL")
        t = g.op("TILE", [b, g.const("m", np.array([1, 2, 2, 1], np.int32))], [1, 4, 4, 4], dtype="BOOL")
        one, zero = (
            g.const("one", np.ones((1, 4, 4, 4), np.float32)),
            g.const("zero", np.zeros((1, 4, 4, 4), np.float32)),
        )
        return g.op("SELECT_V2", [t, one, zero], [1, 4, 4, 4])

    return build


def embedding(table: str) -> Callable[[SubgraphBuilder], int]:
    """EMBEDDING_LOOKUP of 6 ids in a [100, 24] table that is a constant, a DEQUANTIZE of an int8 or
    an fp16 constant (weight-only int8 and fp16 exports), or a graph input."""

    def build(g: SubgraphBuilder) -> int:
        ids = g.input("ids", [6], "INT32")
        if table == "dequant-int8":
            t = g.op("DEQUANTIZE", [g.const("w", np.ones((100, 24), np.int8), quant=(0.02, 0))], [100, 24])
        elif table == "dequant-fp16":
            t = g.op("DEQUANTIZE", [g.const("w", np.ones((100, 24), np.float16))], [100, 24])
        elif table == "input":
            t = g.input("table", [100, 24])
        else:
            t = g.const("w", np.ones((100, 24), np.float32))
        return g.op("RELU", [g.op("EMBEDDING_LOOKUP", [ids, t], [6, 24])], [6, 24])

    return build


COMPOSITE_SHAPES = {
    "odml.scaled_dot_product_attention": [(1, 8, 3, 16), (1, 16, 3, 16), (1, 16, 3, 16), (1, 1, 8, 16)],
    "odml.group_norm": [(1, 8, 8, 16), (16,), (16,)],
}


def composite(name: str, kinds: str, epsilon: bool) -> Callable[[SubgraphBuilder], int]:
    """One STABLEHLO_COMPOSITE `name` over operands of `kinds` (r runtime, c constant), its
    decomposition (a subgraph of its own) a MUL of its first operand by 1, and an epsilon attribute
    or none."""

    def build(g: SubgraphBuilder) -> int:
        shapes = COMPOSITE_SHAPES.get(name, [(1, 8, 16), (16,), (16,)])[: len(kinds)]
        ins = [
            g.const(f"c{i}", np.ones(s, np.float32)) if k == "c" else g.input(f"x{i}", list(s))
            for i, (s, k) in enumerate(zip(shapes, kinds, strict=True))
        ]
        out = g.tensor("y", list(shapes[0]))
        body = g.mb.subgraph(f"{name}.impl")
        args = [body.input(f"a{i}", list(s)) for i, s in enumerate(shapes)]
        body.output(body.op("MUL", [args[0], body.const("one", np.array(1.0, np.float32))], list(shapes[0])))
        attributes = list(flexbuffers.Dumps({"epsilon": 1e-6})) if epsilon else []
        options = Options.of(
            "StableHLOCompositeOptions",
            name=name,
            decomposition_subgraph_index=len(g.mb.model.subgraphs) - 1,
            composite_attributes=attributes,
        )
        opcode = g.mb.model.opcode_index("STABLEHLO_COMPOSITE")
        g.sg.operators.append(Operator(opcode, ins, [out], builtin_options_2=options))
        return out

    return build


def scalar_reshape(vector: bool) -> Callable[[SubgraphBuilder], int]:
    def build(g: SubgraphBuilder) -> int:
        x = g.input("x", [1, 8, 8, 4])
        shape = g.tensor("scalar_shape", [0], "INT32", buffer=g.mb.buffer(b"", constant=vector))
        s = g.op("RESHAPE", [g.input("pos", [1]), shape], [], options=dict(new_shape=[]))
        return g.op("RELU", [g.op("MUL", [x, s], [1, 8, 8, 4])], [1, 8, 8, 4])

    return build


def issue_49_graphs() -> list[Case]:
    """Issue #49: elementwise ops whose constant operand broadcasts the runtime one (GPU807: the
    OpenGL backend initializes them and computes them wrong; SUB with a constant that is neither a
    vector nor one element fails to initialize there), the TILE that tile-broadcast puts before
    them, and BROADCAST_TO with the RESHAPE + TILE that broadcast-to-tile makes of it."""
    c48 = cst(48, value=0.5 + 0.1 * np.arange(48))
    out = [
        case("ADD", [rt(1, 1), c48], (1, 48), note="gl-broadcast"),
        case("ADD", [c48, rt(1, 1)], (1, 48), note="gl-broadcast"),
        case("MUL", [rt(1, 1, 1, 1), c48], (1, 1, 1, 48), note="gl-broadcast"),
        case("SUB", [rt(1, 1, 1, 1), cst(1, 4, 4, 48)], (1, 4, 4, 48), note="gl-broadcast"),
        case("ADD", [rt(1, 48), c48], (1, 48), note="gl-broadcast-near-miss"),
        case("BROADCAST_TO", [rt(1, 1, 8), cst(3, dtype="INT32", value=[1, 4, 8])], (1, 4, 8), version=2),
        case("TILE", [rt(1, 1, 8), cst(3, dtype="INT32", value=[1, 4, 1])], (1, 4, 8)),
    ]
    return [*out, graph("ADD-tiled-runtime-operand", tiled_add)]


def tiled_add(g: SubgraphBuilder) -> int:
    x = g.op("TILE", [g.input("x", [1, 1]), g.const("m", np.array([1, 48], np.int32))], [1, 48])
    return g.op("ADD", [x, g.const("c", np.arange(48, dtype=np.float32))], [1, 48])
