// Elementwise ops work on whole float4 slices. A work item takes 8 adjacent columns of one
// slice: one item per slice cost PoCL more in per-item overhead than the arithmetic itself.
STEP_INLINE float4 unary4(float4 x, int op, float p) {
  switch (op) {
    case 0: return KEEP_NAN(fmax(x, 0.0f), x);            // RELU
    case 1: return KEEP_NAN(clamp(x, 0.0f, 6.0f), x);     // RELU6
    case 2: return KEEP_NAN(clamp(x, -1.0f, 1.0f), x);    // RELU_N1_TO_1
    case 3: return KEEP_NAN(clamp(x, 0.0f, 1.0f), x);     // RELU_0_TO_1
    case 4: return 1.0f / (1.0f + exp(-x));               // LOGISTIC
    case 5: return tanh(x);                               // TANH
    case 6: return exp(x);                                // EXP
    case 7: return -x;                                    // NEG
    case 8: return rsqrt(x);                              // RSQRT
    case 9: return sqrt(x);                               // SQRT
    case 10: return fabs(x);                              // ABS
    case 11: return x * x;                                // SQUARE
    case 12: return x * clamp(x + 3.0f, 0.0f, 6.0f) / 6.0f;  // HARD_SWISH
    case 13: return 0.5f * x * (1.0f + erf(x * 0.70710678118654752f));  // GELU (exact)
    case 14: return 0.5f * x * (1.0f + tanh(0.7978845608028654f * (x + 0.044715f * x * x * x)));  // GELU approximate
    case 15: return x < 0.0f ? exp(x) - 1.0f : x;         // ELU
    case 16: return x < 0.0f ? p * x : x;                 // LEAKY_RELU
    case 17: return log(x);                               // LOG
    case 18: return sin(x);                               // SIN
    case 19: return cos(x);                               // COS
    case 20: return floor(x);                             // FLOOR
    case 21: return x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : 0.0f);  // SIGN
    // BOOL and INT32 tensors are floats holding 0/1 and whole numbers.
    case 22: return x == 0.0f ? 1.0f : 0.0f;              // LOGICAL_NOT
    case 23: return trunc(x);                             // CAST to INT32 (C's conversion)
    case 24: return x != 0.0f ? 1.0f : 0.0f;              // CAST to BOOL
    default: return x;                                    // CAST to FLOAT32
  }
}

STEP_INLINE float4 binary4(float4 a, float4 b, int op) {
  switch (op) {
    case 0: return a + b;
    case 1: return a - b;
    case 2: return a * b;
    case 3: return a / b;
    case 4: return MAX_NAN(a, b);
    case 5: return MIN_NAN(a, b);
    case 6: return (a - b) * (a - b);                     // SQUARED_DIFFERENCE
    case 7: return pow(a, b);
    case 8: return floor(a / b);                          // FLOOR_DIV
    case 9: return a - floor(a / b) * b;                  // FLOOR_MOD
    case 10: return a >= 0.0f ? a : a * b;                // PRELU (b = alpha)
    case 11: return a == b ? 1.0f : 0.0f;                 // EQUAL, and the rest give BOOL as 0/1
    case 12: return a != b ? 1.0f : 0.0f;
    case 13: return a < b ? 1.0f : 0.0f;
    case 14: return a <= b ? 1.0f : 0.0f;
    case 15: return a > b ? 1.0f : 0.0f;
    case 16: return a >= b ? 1.0f : 0.0f;
    case 17: return a != 0.0f && b != 0.0f ? 1.0f : 0.0f;  // LOGICAL_AND
    case 18: return a != 0.0f || b != 0.0f ? 1.0f : 0.0f;  // LOGICAL_OR
    default: return a;
  }
}

// Elementwise ops fused into the kernel that produces their input (conv, depthwise), as the
// delegate links them: up to two steps after the producer's own activation. A step is
// e = (op, form, swap, act): form 0 none, 1 unary op, 2-4 binary op with an operand that is
// per channel (slice s), a tensor shaped like the output (float4 index i) or one scalar;
// swap puts the operand first; act is the binary op's fused activation.
// The steps are compiled in: the host puts `#define ACT a`, `#define E1 (int4)(...)` and
// `#define E2 (int4)(...)` (the producer's activation and the two steps) ahead of each
// `_fused` program of conv.cl.j2, whose kernels take the steps' runtime arguments: a scalar
// parameter and an operand buffer each. Passed as arguments, the codes cost those kernels
// 2-3x (the switches run at every store).
#define EPILOGUE_ARGS float p1, __global const FLT* o1, float p2, __global const FLT* o2
#define FINISH(v, s, i) epilogue(epilogue(activate((v), ACT), E1, p1, o1, (s), (i)), E2, p2, o2, (s), (i))
// The activations that are clamps (NONE, RELU, RELU_N1_TO_1, RELU6) as bounds.
inline float2 clamp_bounds(int act) {
  return (float2)(act == 1 || act == 3 ? 0.0f : (act == 2 ? -1.0f : -INFINITY),
                  act == 3 ? 6.0f : (act == 2 ? 1.0f : INFINITY));
}
STEP_INLINE float4 epilogue(float4 v, int4 e, float p, __global const FLT* o, int s, int i) {
  if (e.y == 0) return v;
  if (e.y == 1) return unary4(v, e.x, p);
  float4 u = e.y == 2 ? LOAD4(s, o) : (e.y == 3 ? LOAD4(i, o) : (float4)(LOAD1(0, o)));
  return activate(e.z ? binary4(u, v, e.x) : binary4(v, u, e.x), e.w);
}

// UNARY and BINARY kernels: the op (OP) and the binary op's activation (ACT) are compiled in
// by the host's #defines, as for fused convs: with them as arguments, ADD and MUL on
// 128x128x16 took PoCL 0.13 ms, against 0.09 (LOGISTIC, bound by its exp, did not change).
__kernel void unary(__global const FLT* src, __global FLT* dst, int4 d, int c, float p) {
  int x0 = get_global_id(0) * 8, y = get_global_id(1), z = get_global_id(2);
  int b = z / d.w, s = z % d.w;
  if (x0 >= d.z || y >= d.y || b >= d.x) return;
  int row = slice_index(d, b, y, 0, s);
  for (int x = x0; x < x0 + 8 && x < d.z; x++) STORE4(mask_lanes(unary4(LOAD4(row + x, src), OP, p), s, c), row + x, dst);
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
                     int bc, int4 dd, int dc) {
  int x0 = get_global_id(0) * 8, y = get_global_id(1), z = get_global_id(2);
  int b = z / dd.w, s = z % dd.w;
  if (x0 >= dd.z || y >= dd.y || b >= dd.x) return;
  int row = slice_index(dd, b, y, 0, s);
  for (int x = x0; x < x0 + 8 && x < dd.z; x++) {
    float4 r = binary4(operand4(a, ad, ac, b, y, x, s), operand4(bt, bd, bc, b, y, x, s), OP);
    STORE4(mask_lanes(activate(r, ACT), s, dc), row + x, dst);
  }
}

// A graph input as the caller gives it (float, BHWC, C channels) into slices, padding lanes
// zeroed: one work item per 8 columns of one slice.
__kernel void input_to_slices(__global const float* src, __global FLT* dst, int4 d, int c) {
  int x0 = get_global_id(0) * 8, y = get_global_id(1), z = get_global_id(2);
  int b = z / d.w, s = z % d.w, lanes = c - s * 4;
  if (x0 >= d.z || y >= d.y || b >= d.x) return;
  int row = slice_index(d, b, y, 0, s);
  for (int x = x0; x < x0 + 8 && x < d.z; x++) {
    __global const float* p = src + ((b * d.y + y) * d.z + x) * c + s * 4;
    STORE4((float4)(p[0], lanes > 1 ? p[1] : 0.0f, lanes > 2 ? p[2] : 0.0f, lanes > 3 ? p[3] : 0.0f), row + x, dst);
  }
}

// Data movement (RESHAPE, TRANSPOSE, PAD, SLICE, CONCATENATION, DEPTH_TO_SPACE, ...): the host
// computes, once, which source element each destination element is; the kernel copies, 16
// elements per work item.
__kernel void copy_pairs(__global const FLT* src, __global FLT* dst, __global const int* dst_index,
                         __global const int* src_index, int n) {
  for (int i = get_global_id(0) * 16, end = min(i + 16, n); i < end; i++)
    STORE1(LOAD1(src_index[i], src), dst_index[i], dst);
}

// The same copy when whole float4 slices move (indices count slices): a quarter of the index
// traffic, one vector per element.
__kernel void copy_slices(__global const FLT* src, __global FLT* dst, __global const int* dst_index,
                          __global const int* src_index, int n) {
  for (int i = get_global_id(0) * 16, end = min(i + 16, n); i < end; i++)
    STORE4(LOAD4(src_index[i], src), dst_index[i], dst);
}
