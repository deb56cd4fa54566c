"""The numbers the host and the kernels share, written once.

The host passes these as kernel arguments or compiles them in (`#define OP 12`); program.py
renders every table into the kernels' prelude as `#define UNARY_HARD_SWISH 12`,
`#define FORM_CHANNEL 2`, ..., so elementwise.cl's `case UNARY_HARD_SWISH:` is the number the
host sends by construction.
"""

from __future__ import annotations

from typing import Any

# unary4() in elementwise.cl: one op per code.
UNARY = {
    "RELU": 0,
    "RELU6": 1,
    "RELU_N1_TO_1": 2,
    "RELU_0_TO_1": 3,
    "LOGISTIC": 4,
    "TANH": 5,
    "EXP": 6,
    "NEG": 7,
    "RSQRT": 8,
    "SQRT": 9,
    "ABS": 10,
    "SQUARE": 11,
    "HARD_SWISH": 12,
    "GELU": 13,
    "ELU": 15,
    "LEAKY_RELU": 16,
    "LOG": 17,
    "SIN": 18,
    "COS": 19,
    "FLOOR": 20,
    "SIGN": 21,
    "LOGICAL_NOT": 22,
}
GELU_APPROXIMATE = 14  # GELU with `approximate` set: the tanh form
# BOOL and INT32 tensors live in float buffers like every other tensor (exact below 2^24); CAST
# converts between them by value. Codes continue UNARY's in the same kernel; -1, FLOAT32, is
# unary4's default: a float holds any value as it is.
CAST = {"FLOAT32": -1, "INT32": 23, "BOOL": 24}
# binary4() in elementwise.cl.
BINARY = {
    "ADD": 0,
    "SUB": 1,
    "MUL": 2,
    "DIV": 3,
    "MAXIMUM": 4,
    "MINIMUM": 5,
    "SQUARED_DIFFERENCE": 6,
    "POW": 7,
    "FLOOR_DIV": 8,
    "FLOOR_MOD": 9,
    "PRELU": 10,
    "EQUAL": 11,
    "NOT_EQUAL": 12,
    "LESS": 13,
    "LESS_EQUAL": 14,
    "GREATER": 15,
    "GREATER_EQUAL": 16,
    "LOGICAL_AND": 17,
    "LOGICAL_OR": 18,
}
# The reduce kernel (reduce.cl).
REDUCE = {"MEAN": 0, "SUM": 1, "REDUCE_MAX": 2, "REDUCE_MIN": 3, "REDUCE_PROD": 4}
# Fused activations as models number them (the schema's ActivationFunctionType; 6 is the C
# API's kTfLiteActSigmoid, which the schema lacks but an options field can carry), read by
# activate() in the prelude.
ACTIVATION = {"NONE": 0, "RELU": 1, "RELU_N1_TO_1": 2, "RELU6": 3, "TANH": 4, "SIGMOID": 6}
# How an epilogue step of a fused kernel gets its operand (epilogue() in elementwise.cl): none
# (an unused step), a unary op, a binary op whose other operand is per channel, a tensor of the
# output's shape, or one scalar, or the delegate's QUANTIZE_AND_DEQUANTIZE, whose operand holds
# (min, max, scale) (prepare.add_quant_adjustments); PADDED: a tensor of the output's shape but
# for fewer channels, zeros after them (a channel PAD's input, the PAD merged: fusion.py);
# AFFINE: a 1x1 depthwise conv, its operand the per-channel weights then the bias.
FORM = {
    "NONE": 0,
    "UNARY": 1,
    "CHANNEL": 2,
    "TENSOR": 3,
    "SCALAR": 4,
    "QUANTIZE": 5,
    "GATE": 6,
    "PADDED": 7,
    "AFFINE": 8,
}

_TABLES = (
    ("UNARY", dict(sorted({**UNARY, "GELU_APPROXIMATE": GELU_APPROXIMATE}.items(), key=lambda item: item[1]))),
    ("CAST_TO", CAST),
    ("BINARY", BINARY),
    ("REDUCE", REDUCE),
    ("ACT", ACTIVATION),
    ("FORM", FORM),
)


def unary_code(name: str, opts: dict[str, Any]) -> int:
    """The unary4 code of unary op `name` with options `opts`."""
    return GELU_APPROXIMATE if name == "GELU" and opts.get("approximate") else UNARY[name]


def defines() -> str:
    """Every table as C #defines, `<TABLE>_<NAME> <code>` (REDUCE_MAX, not REDUCE_REDUCE_MAX)."""
    lines = []
    for prefix, table in _TABLES:
        for name, code in table.items():
            macro = name if name.startswith(prefix + "_") else f"{prefix}_{name}"
            lines.append(f"#define {macro} {code if code >= 0 else f'({code})'}")
    return "\n".join(lines) + "\n"
