// Elementwise ops work on whole float4 slices. A work item takes 8 adjacent columns of one
// slice: one item per slice cost PoCL more in per-item overhead than the arithmetic itself.
STEP_INLINE float4 unary4(float4 x, int op, float p) {
  switch (op) {
    case UNARY_RELU: return CLAMP_NAN(x, 0.0f, INFINITY);
    case UNARY_RELU6: return CLAMP_NAN(x, 0.0f, 6.0f);
    case UNARY_RELU_N1_TO_1: return CLAMP_NAN(x, -1.0f, 1.0f);
    case UNARY_RELU_0_TO_1: return CLAMP_NAN(x, 0.0f, 1.0f);
    case UNARY_LOGISTIC: return RH4(1.0f / (1.0f + exp(-x)));
    case UNARY_TANH: return RH4(tanh(x));
    case UNARY_EXP: return RH4(exp(x));
    case UNARY_NEG: return -x;
    case UNARY_RSQRT: return RH4(rsqrt(x));
    case UNARY_SQRT: return RH4(sqrt(x));
    case UNARY_ABS: return fabs(x);
    case UNARY_SQUARE: return RH4(x * x);
#if HALF_MATH
    // The delegate's forms (tasks/elementwise.cc), each step a half, its constants halves.
    case UNARY_HARD_SWISH: return RH4(x * CLAMP_NAN(RH4(RH4(x * RH(0.16666667f)) + 0.5f), 0.0f, 1.0f));
    case UNARY_GELU: return RH4(0.5f * x * RH4(erfc(RH4(x * RH(-0.70710678118654752f)))));
    case UNARY_ELU: return x < 0.0f ? RH4(expm1(x)) : x;
#else
    case UNARY_HARD_SWISH: return x * CLAMP_NAN(x + 3.0f, 0.0f, 6.0f) / 6.0f;
    case UNARY_GELU: return 0.5f * x * (1.0f + erf(x * 0.70710678118654752f));  // exact
    case UNARY_ELU: return x < 0.0f ? exp(x) - 1.0f : x;
#endif
    case UNARY_GELU_APPROXIMATE:
      return RH4(RH4(0.5f * x) * RH4(1.0f + RH4(tanh(RH4(RH(0.7978845608028654f) * RH4(x + RH4(RH4(RH4(RH(0.044715f) * x) * x) * x)))))));
    case UNARY_LEAKY_RELU: return x < 0.0f ? RH4(RH(p) * x) : x;
    case UNARY_LOG: return RH4(log(x));
    case UNARY_SIN: return RH4(sin(x));
    case UNARY_COS: return RH4(cos(x));
    case UNARY_FLOOR: return floor(x);
    case UNARY_SIGN: return x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : 0.0f);
    // BOOL and INT32 tensors are floats holding 0/1 and whole numbers.
    case UNARY_LOGICAL_NOT: return x == 0.0f ? 1.0f : 0.0f;
    case CAST_TO_INT32: return trunc(x);  // C's conversion
    case CAST_TO_BOOL: return x != 0.0f ? 1.0f : 0.0f;
    default: return x;  // CAST_TO_FLOAT32
  }
}

STEP_INLINE float4 binary4(float4 a, float4 b, int op) {
  switch (op) {
    case BINARY_ADD: return RH4(a + b);
    case BINARY_SUB: return RH4(a - b);
    case BINARY_MUL: return RH4(a * b);
    case BINARY_DIV: return RH4(a / b);
    case BINARY_MAXIMUM: return MAX_NAN(a, b);
    case BINARY_MINIMUM: return MIN_NAN(a, b);
    case BINARY_SQUARED_DIFFERENCE: return RH4(RH4(a - b) * RH4(a - b));
    case BINARY_POW: return RH4(pow(a, b));
    case BINARY_FLOOR_DIV: return floor(RH4(a / b));
    case BINARY_FLOOR_MOD: return RH4(a - RH4(floor(RH4(a / b)) * b));
    case BINARY_PRELU: return a >= 0.0f ? a : RH4(a * b);  // b = alpha
    // Comparisons and logical ops give BOOL as 0/1.
    case BINARY_EQUAL: return a == b ? 1.0f : 0.0f;
    case BINARY_NOT_EQUAL: return a != b ? 1.0f : 0.0f;
    case BINARY_LESS: return a < b ? 1.0f : 0.0f;
    case BINARY_LESS_EQUAL: return a <= b ? 1.0f : 0.0f;
    case BINARY_GREATER: return a > b ? 1.0f : 0.0f;
    case BINARY_GREATER_EQUAL: return a >= b ? 1.0f : 0.0f;
    case BINARY_LOGICAL_AND: return a != 0.0f && b != 0.0f ? 1.0f : 0.0f;
    case BINARY_LOGICAL_OR: return a != 0.0f || b != 0.0f ? 1.0f : 0.0f;
    default: return a;
  }
}

// QUANTIZE_AND_DEQUANTIZE as the GPU delegate computes an int8 tensor in float
// (tensorflow/lite/delegates/gpu/common/tasks/quantize_and_dequantize.cc): clamp to [min, max],
// round to the grid of `scale` from min, back to float; q = (min, max, scale, -) of the int8
// tensor (prepare.add_quant_adjustments). In half (fp16, fp32-fp16) its code runs on FLT4: its
// input is a half (what the op it is linked to computed, or the tensor it reads), min, max and
// scale are halves (AddHalf; a scale below the smallest normal half floored at half(0.000062f)
// first: the same number, as rounding to half keeps order), and each step's result is a half
// (RH). So a value whose quotient is near a midpoint takes the next grid point, as on the GPU
// (the quotient, up to 255, is a half 0.125 apart above 128). Rounding a unary or binary op's
// float result, not its half, put yolo11n-pose int8's output 6 steps from the same run with the
// rounding as a launch of its own (#22). A NaN stays NaN (the delegate's min/max would make it a
// bound).
STEP_INLINE float4 quantize4(float4 x, float4 q) {
  float scale = sizeof(FLT) == 2 ? MAX_NAN(q.z, 6.198883056640625e-05f) : q.z;
  float4 v = RH4(x);
  float4 clamped = CLAMP_NAN(v, q.x, q.y);
  float4 k = round(RH4(RH4(clamped - q.x) / scale));
  return RH4(RH4(k * scale) + q.x);
}

// Elementwise ops fused into the kernel that produces their input (conv, depthwise), as the
// delegate links them: up to two steps after the producer's own activation. A step is
// e = (op, form, swap, act): form FORM_NONE (no step), FORM_UNARY (op is a UNARY_*),
// FORM_QUANTIZE (quantize4, its operand the 4 values q), or a binary op (BINARY_*) whose
// operand is FORM_CHANNEL (per channel: slice s), FORM_TENSOR (shaped like the output: float4
// index i) or FORM_SCALAR; swap puts the operand first; act is the binary op's fused activation.
// FORM_GATE: the binary op of v and a unary op of v (SiLU), swap = 2 x the unary op's code, + 1
// when the unary op's result is the first operand; p is the unary op's parameter.
// FORM_PADDED: a FORM_TENSOR operand that holds only the first p channels (batch 1, so index i
// is the same in both), zero after them: a channel PAD's input, the PAD merged away.
// FORM_AFFINE: a 1x1 depthwise conv (a batch norm a converter left standing), v * w + b per
// channel, its operand the p slices of w then those of b, act its own activation; rounded as
// depthwise.cl.j2 rounds a 1x1 window (the product a half, then the sum with the bias).
// The steps are compiled in: the host puts `#define ACT a`, `#define E1 (int4)(...)` and
// `#define E2 (int4)(...)` (the producer's activation and the two steps) ahead of each
// `_fused` program of conv.cl.j2, whose kernels take the steps' runtime arguments: a scalar
// parameter and an operand buffer each. Passed as arguments, the codes cost those kernels
// 2-3x (the switches run at every store).
#define EPILOGUE_ARGS float p1, __global const FLT* o1, float p2, __global const FLT* o2
#define FINISH(v, s, i) epilogue(epilogue(activate((v), ACT), E1, p1, o1, (s), (i)), E2, p2, o2, (s), (i))
// The activations that are clamps (NONE, RELU, RELU_N1_TO_1, RELU6) as bounds.
inline float2 clamp_bounds(int act) {
  return (float2)(act == ACT_RELU || act == ACT_RELU6 ? 0.0f : (act == ACT_RELU_N1_TO_1 ? -1.0f : -INFINITY),
                  act == ACT_RELU6 ? 6.0f : (act == ACT_RELU_N1_TO_1 ? 1.0f : INFINITY));
}
STEP_INLINE float4 epilogue(float4 v, int4 e, float p, __global const FLT* o, int s, int i) {
  if (e.y == FORM_NONE) return v;
  if (e.y == FORM_UNARY) return unary4(v, e.x, p);
  if (e.y == FORM_QUANTIZE) return quantize4(v, LOAD4(0, o));
  if (e.y == FORM_AFFINE) return activate(RH4(RH4(v * LOAD4(s, o)) + LOAD4(s + (int)p, o)), e.w);
  if (e.y == FORM_GATE) {
    float4 g = unary4(v, e.z >> 1, p);
    return activate(e.z & 1 ? binary4(g, v, e.x) : binary4(v, g, e.x), e.w);
  }
  float4 u = e.y == FORM_CHANNEL ? LOAD4(s, o)
           : e.y == FORM_TENSOR ? LOAD4(i, o)
           : e.y == FORM_PADDED ? (s * 4 < (int)p ? mask_lanes(LOAD4(i, o), s, (int)p) : (float4)(0.0f))
                                : (float4)(LOAD1(0, o));
  return activate(e.z ? binary4(u, v, e.x) : binary4(v, u, e.x), e.w);
}

// UNARY and BINARY kernels: the op (OP) and the binary op's activation (ACT) are compiled in
// by the host's #defines, as for fused convs: with them as arguments, ADD and MUL on
// 128x128x16 took PoCL 0.13 ms, against 0.09 (LOGISTIC, bound by its exp, did not change).
// Their results go through FINISH too: up to two elementwise ops after them (E1, E2: the
// rounding of an int8 result to its grid, a PRELU after an ADD) run in their kernel, as the
// delegate links an elementwise op into the one before it. A unary op's ACT is NONE.
__kernel void unary(__global const FLT* src, __global FLT* dst, int4 d, int c, float p, EPILOGUE_ARGS) {
  int x0 = get_global_id(0) * 8, y = get_global_id(1), z = get_global_id(2);
  int b = z / d.w, s = z % d.w;
  if (x0 >= d.z || y >= d.y || b >= d.x) return;
  int row = slice_index(d, b, y, 0, s);
  for (int x = x0; x < x0 + 8 && x < d.z; x++) {
    STORE4(mask_lanes(FINISH(unary4(LOAD4(row + x, src), OP, p), s, row + x), s, c), row + x, dst);
  }
}

// Slice s of an operand at (b, y, x) under numpy broadcasting in BHWC: a size-1 dimension is
// read at 0, and a 1-channel operand is one scalar spread over the 4 lanes.
inline float4 operand4(__global const FLT* t, int4 d, int c, int b, int y, int x, int s) {
  b = d.x == 1 ? 0 : b;
  y = d.y == 1 ? 0 : y;
  x = d.z == 1 ? 0 : x;
  return c == 1 ? (float4)(LOAD1(slice_index(d, b, y, x, 0) * 4, t)) : LOAD4(slice_index(d, b, y, x, s), t);
}

__kernel void binary(__global const FLT* a, __global const FLT* bt, __global FLT* dst, int4 ad, int ac, int4 bd,
                     int bc, int4 dd, int dc, EPILOGUE_ARGS) {
  int x0 = get_global_id(0) * 8, y = get_global_id(1), z = get_global_id(2);
  int b = z / dd.w, s = z % dd.w;
  if (x0 >= dd.z || y >= dd.y || b >= dd.x) return;
  int row = slice_index(dd, b, y, 0, s);
  for (int x = x0; x < x0 + 8 && x < dd.z; x++) {
    float4 r = binary4(operand4(a, ad, ac, b, y, x, s), operand4(bt, bd, bc, b, y, x, s), OP);
    STORE4(mask_lanes(FINISH(r, s, row + x), s, dc), row + x, dst);
  }
}

// QUANTIZE_AND_DEQUANTIZE on its own (after an op whose kernel does not round); q as in quantize4.
__kernel void quantize_dequantize(__global const FLT* src, __global FLT* dst, int4 d, int c, __global const FLT* q) {
  int x0 = get_global_id(0) * 8, y = get_global_id(1), z = get_global_id(2);
  int b = z / d.w, s = z % d.w;
  if (x0 >= d.z || y >= d.y || b >= d.x) return;
  int row = slice_index(d, b, y, 0, s);
  float4 grid = LOAD4(0, q);
  for (int x = x0; x < x0 + 8 && x < d.z; x++) STORE4(mask_lanes(quantize4(LOAD4(row + x, src), grid), s, c), row + x, dst);
}
