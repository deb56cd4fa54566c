inline float unary_op(float x, int op, float p) {
  switch (op) {
    case 0: return fmax(x, 0.0f);                         // RELU
    case 1: return clamp(x, 0.0f, 6.0f);                  // RELU6
    case 2: return clamp(x, -1.0f, 1.0f);                 // RELU_N1_TO_1
    case 3: return clamp(x, 0.0f, 1.0f);                  // RELU_0_TO_1
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
    default: return x;
  }
}

inline float binary_op(float a, float b, int op) {
  switch (op) {
    case 0: return a + b;
    case 1: return a - b;
    case 2: return a * b;
    case 3: return a / b;
    case 4: return fmax(a, b);
    case 5: return fmin(a, b);
    case 6: return (a - b) * (a - b);                     // SQUARED_DIFFERENCE
    case 7: return pow(a, b);
    case 8: return floor(a / b);                          // FLOOR_DIV
    case 9: return a - floor(a / b) * b;                  // FLOOR_MOD
    case 10: return a >= 0.0f ? a : a * b;                // PRELU (b = alpha)
    default: return a;
  }
}

__kernel void unary(__global const FLT* src, __global FLT* dst, int4 d, int c, int op, float p) {
  int x = get_global_id(0), y = get_global_id(1), z = get_global_id(2);
  int b = z / d.w, s = z % d.w;
  if (x >= d.z || y >= d.y || b >= d.x) return;
  int i = slice_index(d, b, y, x, s);
  float4 v = LOAD4(i, src);
  float4 r = (float4)(unary_op(v.x, op, p), unary_op(v.y, op, p), unary_op(v.z, op, p), unary_op(v.w, op, p));
  STORE4(mask_lanes(r, s, c), i, dst);
}

// Binary ops with numpy broadcasting in BHWC: a size-1 dimension of an input is read at 0.
__kernel void binary(__global const FLT* a, __global const FLT* bt, __global FLT* dst, int4 ad, int ac, int4 bd,
                     int bc, int4 dd, int dc, int op, int act) {
  int x = get_global_id(0), y = get_global_id(1), z = get_global_id(2);
  int b = z / dd.w, s = z % dd.w;
  if (x >= dd.z || y >= dd.y || b >= dd.x) return;
  float r[4];
  for (int l = 0; l < 4; l++) {
    int c = s * 4 + l;
    if (c >= dc) { r[l] = 0.0f; continue; }
    float va = read1(a, ad, ad.x == 1 ? 0 : b, ad.y == 1 ? 0 : y, ad.z == 1 ? 0 : x, ac == 1 ? 0 : c);
    float vb = read1(bt, bd, bd.x == 1 ? 0 : b, bd.y == 1 ? 0 : y, bd.z == 1 ? 0 : x, bc == 1 ? 0 : c);
    r[l] = binary_op(va, vb, op);
  }
  STORE4(mask_lanes(activate((float4)(r[0], r[1], r[2], r[3]), act), s, dc), slice_index(dd, b, y, x, s), dst);
}

// Data movement (RESHAPE, TRANSPOSE, PAD, SLICE, CONCATENATION, DEPTH_TO_SPACE, ...): the host
// computes, once, which source element each destination element is; the kernel copies.
__kernel void copy_pairs(__global const FLT* src, __global FLT* dst, __global const int* dst_index,
                         __global const int* src_index, int n) {
  int i = get_global_id(0);
  if (i < n) STORE1(LOAD1(src_index[i], src), dst_index[i], dst);
}

__kernel void fill(__global FLT* dst, float value, int n) {
  int i = get_global_id(0);
  if (i < n) STORE1(value, i, dst);
}
