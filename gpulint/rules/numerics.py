"""What overflows or loses everything in half precision, as the delegate computes F16: the
analysis behind the GPU7xx rules, whose detectors are in detectors/f16.py.

With precision loss allowed (the Android default) the delegate picks CalculationsPrecision::F16
(cl/api.cc GetPrecision; the OpenGL backend declares `mediump`, gl/compiler/shader_codegen.cc):
elementwise ops compute and store in half (tasks/elementwise.cc: `$0 = $1 * $1`, `exp($1)`,
`rsqrt($1)` on FLT4 values, a scalar operand passed as `half(scalar)`). Reductions accumulate in
float but store their result in half (tasks/reduce.cc GetAccumType). SOFTMAX computes in float and
subtracts the maximum (tasks/softmax.cc, softmax1x1.cc), and the LayerNorm chain the OpenCL
backend fuses (MEAN -> SUB -> SQUARE -> MEAN -> ADD eps -> RSQRT -> MUL) computes in float too
(tasks/mean_stddev_normalization.cc TryMeanStdDevNormalization): neither is flagged.

To stay quiet where nothing can go wrong, each tensor gets an interval of the values it can hold,
forward in op order (a TFLite subgraph is topologically sorted): bounded activations, constants,
max-subtraction and z-scores bound it; convs, dense layers and graph inputs do not.
"""

from __future__ import annotations

import math

from gpulint.rules.signature import Graph, OpSignature, TensorSpec

HALF_MAX = 65504.0  # the largest finite half; above it a half result is Inf
HALF_MIN_NORMAL = 2.0**-14  # 6.1e-5: below it a half is subnormal (flushed to 0 by many GPUs' half ALUs)
HALF_MIN_SUBNORMAL = 2.0**-24  # 6.0e-8: below half of it a value rounds to 0 in half
SQUARE_LIMIT = math.sqrt(HALF_MAX)  # 255.9: x*x overflows above it
EXP_LIMIT = math.log(HALF_MAX)  # 11.09: exp(x) overflows above it
# A SUM of N squares overflows once their RMS exceeds sqrt(65504 / N): at N = 256 an RMS of 16,
# ordinary for an activation no normalisation or bounded activation has scaled. Below 256 values
# it takes an RMS above 16, and a MEAN (which divides before the half store) overflows only
# where the square itself does: such small reductions (a few channels, a pooling window) are
# left alone rather than flag every norm of a handful of values.
MIN_REDUCED = 256
MAX_CONST_READ = 4096  # constants are read for their range only when small: lint time must not grow with weights
F16_WORDS = "when the delegate computes in F16 (the Android default: precision loss allowed)"

INF = math.inf
Interval = tuple[float, float]
ANY: Interval = (-INF, INF)
# Ops that move or pick values without computing new ones: their output lies in their input's range.
PASS_THROUGH = {
    "RESHAPE",
    "SQUEEZE",
    "EXPAND_DIMS",
    "TRANSPOSE",
    "SLICE",
    "STRIDED_SLICE",
    "GATHER",
    "SPACE_TO_DEPTH",
    "DEPTH_TO_SPACE",
    "MAX_POOL_2D",
    "AVERAGE_POOL_2D",
    "RESIZE_NEAREST_NEIGHBOR",
    "RESIZE_BILINEAR",
    "MEAN",
    "REDUCE_MAX",
    "REDUCE_MIN",
    "TILE",
    "BROADCAST_TO",
    "SPLIT",
    "SPLIT_V",
    "UNPACK",
    "DEQUANTIZE",
    "QUANTIZE",
    "CAST",
}
BOUNDED = {
    "LOGISTIC": (0.0, 1.0),
    "TANH": (-1.0, 1.0),
    "RELU6": (0.0, 6.0),
    "RELU_N1_TO_1": (-1.0, 1.0),
    "RELU_0_TO_1": (0.0, 1.0),
    "SOFTMAX": (0.0, 1.0),
    "L2_NORMALIZATION": (-1.0, 1.0),
}
FUSED = {"RELU": (0.0, INF), "RELU6": (0.0, 6.0), "RELU_N1_TO_1": (-1.0, 1.0), "TANH": (-1.0, 1.0)}
REDUCERS = ("SUM", "MEAN")


def _mul(a: Interval, b: Interval) -> Interval:
    # inf * 0 is a corner where one factor is exactly 0: the product there is 0.
    corners = [0.0 if math.isnan(x * y) else x * y for x in a for y in b]
    return min(corners), max(corners)


def _clip(v: Interval, to: Interval) -> Interval:
    return min(max(v[0], to[0]), to[1]), min(max(v[1], to[0]), to[1])


class Ranges:
    """Each tensor's interval, computed once per subgraph in op order."""

    def __init__(self, graph: Graph, sigs: list[OpSignature]) -> None:
        self.graph = graph
        self.sigs = sigs
        self.of: dict[int, Interval] = {}
        for s in sigs:
            out = self._op(s)
            act = s.options.get("fused_activation_function")
            if isinstance(act, str) and act in FUSED:
                out = _clip(out, FUSED[act])
            for t in s.outputs:
                self.of[t.index] = out

    def get(self, s: OpSignature, t: TensorSpec | None) -> Interval:
        if t is None or t.omitted:
            return ANY
        if t.index in self.of:
            return self.of[t.index]
        if t.is_const and t.elements <= MAX_CONST_READ:
            values = s.const_values(t)
            if values:
                self.of[t.index] = (float(min(values)), float(max(values)))
                return self.of[t.index]
        return ANY

    def _op(self, s: OpSignature) -> Interval:
        a = self.get(s, s.input(0))
        b = self.get(s, s.input(1)) if len(s.inputs) > 1 else ANY
        op = s.op
        if op in BOUNDED:
            return BOUNDED[op]
        if op in PASS_THROUGH:
            return a
        if op == "CONCATENATION":
            got = [self.get(s, t) for t in s.inputs]
            return min(g[0] for g in got), max(g[1] for g in got)
        if op == "RELU":
            return max(a[0], 0.0), max(a[1], 0.0)
        if op == "HARD_SWISH":  # x * relu6(x + 3) / 6: at least -0.375, at most max(x, 0)
            return -0.375, max(a[1], 0.0)
        if op == "NEG":
            return -a[1], -a[0]
        if op == "ABS":
            return 0.0, max(abs(a[0]), abs(a[1]))
        if op == "EXP":
            return math.exp(min(a[0], 700)), math.exp(min(a[1], 700))
        if op == "ADD":
            return a[0] + b[0], a[1] + b[1]
        if op == "SUB":
            if self._is_max_of(s, s.input(1), s.input(0)):
                return -INF, 0.0  # x - max(x): the softmax shift
            return a[0] - b[1], a[1] - b[0]
        if op == "MUL":
            z = self._z_score(s)
            return z if z is not None else _mul(a, b)
        if op == "DIV":
            z = self._z_score(s)
            return z if z is not None else ANY
        if op == "MINIMUM":
            return min(a[0], b[0]), min(a[1], b[1])
        if op == "MAXIMUM":
            return max(a[0], b[0]), max(a[1], b[1])
        if op == "SQUARE":
            return 0.0, max(a[0] ** 2, a[1] ** 2)
        return ANY

    def source(self, t: TensorSpec | None) -> OpSignature | None:
        """The op that computes `t`, looking through ops that only move values."""
        for _ in range(16):
            if t is None or t.omitted:
                return None
            p = self.graph.producer.get(t.index)
            if p is None:
                return None
            s = self.sigs[p]
            if s.op not in ("RESHAPE", "SQUEEZE", "EXPAND_DIMS", "TRANSPOSE", "BROADCAST_TO", "TILE"):
                return s
            t = s.input(0)
        return None

    def _is_max_of(self, s: OpSignature, m: TensorSpec | None, x: TensorSpec | None) -> bool:
        p = self.source(m)
        return p is not None and p.op == "REDUCE_MAX" and x is not None and p.inputs[0].index == x.index

    def _z_score(self, s: OpSignature) -> Interval | None:
        """(x - mean(x)) * rsqrt(v) or (x - mean(x)) / sqrt(v): a z-score of N values lies within
        +-sqrt(N - 1), whatever the values."""
        scale = "RSQRT" if s.op == "MUL" else "SQRT"
        pairs = [(s.input(0), s.input(1))] + ([(s.input(1), s.input(0))] if s.op == "MUL" else [])
        for diff, by in pairs:
            d, r = self.source(diff), self.source(by)
            if d is None or r is None or r.op != scale or d.op != "SUB":
                continue
            mean = self.source(d.input(1))
            if mean is not None and mean.op == "MEAN":
                n = reduced_count(mean)
                bound = math.sqrt(max(n - 1, 1)) if n else INF
                return -bound, bound
        return None


def reduced_count(s: OpSignature) -> int | None:
    """How many values a SUM/MEAN/REDUCE_* folds into each output value."""
    x = s.input(0)
    axes = s.const_values(s.inputs[1]) if len(s.inputs) > 1 and not s.inputs[1].omitted else None
    if x is None or axes is None:
        return None
    n = 1
    for a in {int(a) % max(x.rank, 1) for a in axes}:
        if a < x.rank:
            n *= max(x.shape[a], 1)
    return n


def fused_layernorms(sigs: list[OpSignature]) -> set[int]:
    """Ops the OpenCL backend fuses into MeanStdDevNormalization (computed in float), matched as
    TryMeanStdDevNormalization does: each step the single reader of the one before."""
    out: set[int] = set()

    def single(s: OpSignature, op: str) -> OpSignature | None:
        readers = s.consumers(s.outputs[0]) if s.outputs else []
        return readers[0] if len(readers) == 1 and readers[0].op == op else None

    def channels_mean(s: OpSignature) -> bool:
        x = s.input(0)
        axes = s.const_values(s.inputs[1]) if len(s.inputs) > 1 else None
        return x is not None and axes is not None and {int(a) % max(x.rank, 1) for a in axes} == {x.rank - 1}

    for m1 in sigs:
        if m1.op != "MEAN" or not channels_mean(m1) or not m1.outputs:
            continue
        sub = single(m1, "SUB")
        if sub is None or sub.input(1) is None or sub.inputs[1].index != m1.outputs[0].index:
            continue
        if sub.input(0) is None or sub.inputs[0].index != m1.inputs[0].index:
            continue
        readers = sub.consumers(sub.outputs[0])
        sq = next((r for r in readers if r.op == "SQUARE"), None)
        mul = next((r for r in readers if r.op == "MUL"), None)
        if len(readers) != 2 or sq is None or mul is None:
            continue
        m2 = single(sq, "MEAN")
        add = single(m2, "ADD") if m2 is not None and channels_mean(m2) else None
        if add is None or not any(t.is_const and t.elements == 1 for t in add.inputs):
            continue
        rsqrt = single(add, "RSQRT")
        if rsqrt is None or single(rsqrt, "MUL") is not mul:
            continue
        out |= {m1.index, sub.index, sq.index, m2.index, add.index, rsqrt.index, mul.index}  # type: ignore[union-attr]
    return out


def square_of(s: OpSignature) -> TensorSpec | None:
    """The tensor an op squares: SQUARE(x), MUL(x, x), POW(x, 2), SQUARED_DIFFERENCE(x, y) (x - y)."""
    if s.op in ("SQUARE", "SQUARED_DIFFERENCE"):
        return s.input(0)
    if s.op == "MUL" and s.input(0) is not None and s.input(1) is not None and s.inputs[0].index == s.inputs[1].index:
        return s.input(0)
    if s.op == "POW" and s.input(1) is not None and s.const_values(s.inputs[1]) == [2.0]:
        return s.input(0)
    return None
