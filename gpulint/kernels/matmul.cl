// BATCH_MATMUL, and FULLY_CONNECTED whose weights are a runtime tensor (the delegate makes it
// a CONVOLUTION_2D with runtime weights, model_builder.cc): [B, H, M, K] x [B, H, K, N] stored
// as BHWC (B, H, M, K), batch dims of 1 broadcast; adj_x / adj_y read an operand as [.., K, M]
// / [.., N, K]. One output slice of N per item: without adj_y, a row of B is one slice load.
// Bias per N and a fused activation (act as ActivationFunctionType). The delegate runs both as
// ConvGeneric with runtime weights (selectors/operation_selector.cc), and so do its sums here:
// from zero, the bias added to the sum made a half at the end (conv.cl.j2). At F16 (HALF_ACCUM)
// the sums are halves, one rounding per multiply-add (MAC); at F32_F16 (HALF_MATH alone) each 4
// k's products are summed in half (PART), that sum added to a float one.
#define MAC(acc, x, y) ((acc) = RA4((acc) + (x) * (y)))
// Step j of the half sum `part` of k = 4 * ks + j (products x * y): the first product, or one more.
#define PART(part, j, x, y) ((part) = (j) == 0 ? RH4((x) * (y)) : RH4((part) + (x) * (y)))
__kernel void batch_matmul(__global const FLT* a, __global const FLT* bm, __global const FLT* bias,
                           __global FLT* dst, int4 ad, int4 bd, int4 dd, int dc, int k_size, int adj_x, int adj_y,
                           int act) {
  int m = get_global_id(0), h = get_global_id(1), z = get_global_id(2);
  int b = z / dd.w, s = z % dd.w;
  if (m >= dd.z || h >= dd.y || b >= dd.x) return;
  int ab = ad.x == 1 ? 0 : b, ah = ad.y == 1 ? 0 : h, bb = bd.x == 1 ? 0 : b, bh = bd.y == 1 ? 0 : h;
  int n0 = s * 4, last = dc - 1;  // lanes past N read row N - 1 and are masked at the store
  int n1 = IMIN(n0 + 1, last), n2 = IMIN(n0 + 2, last), n3 = IMIN(n0 + 3, last);
  float4 acc = HALF_MATH ? (float4)(0.0f) : LOAD4(s, bias);
  if (!adj_x) {
    // A's row m runs along K, its channels: a slice of A per 4 k. With adj_y B's rows n0..n3 do
    // too (a slice of each, lane products summed at the end, not per slice: a dot per slice cost
    // PoCL its horizontal adds); past K both sides' padding lanes are zero (see mask_lanes), so
    // their products are. Without adj_y each k's row of B is one slice. Read one lane at a
    // time, YOLO11's attention (FULLY_CONNECTED [1, 400, 32] x [400, 32]) took PoCL 8-15 ms.
    float4 p0 = (float4)(0.0f), p1 = p0, p2 = p0, p3 = p0;
    for (int ks = 0; ks * 4 < k_size; ks++) {
      float4 va = LOAD4(slice_index(ad, ab, ah, m, ks), a);
#if HALF_MATH && !HALF_ACCUM
      // F32_F16: this slice's four products per n in half, then the float sum (B's rows n0..n3
      // with adj_y, turned so that a float4 holds one k's four n).
      float4 part, b0, b1, b2, b3;
      if (adj_y) {
        float4 r0 = LOAD4(slice_index(bd, bb, bh, n0, ks), bm), r1 = LOAD4(slice_index(bd, bb, bh, n1, ks), bm);
        float4 r2 = LOAD4(slice_index(bd, bb, bh, n2, ks), bm), r3 = LOAD4(slice_index(bd, bb, bh, n3, ks), bm);
        b0 = (float4)(r0.x, r1.x, r2.x, r3.x), b1 = (float4)(r0.y, r1.y, r2.y, r3.y);
        b2 = (float4)(r0.z, r1.z, r2.z, r3.z), b3 = (float4)(r0.w, r1.w, r2.w, r3.w);
      } else {
        int k = ks * 4;  // rows past K are not read: their lanes of A are zero, and so their products
        b0 = LOAD4(slice_index(bd, bb, bh, k, s), bm);
        b1 = k + 1 < k_size ? LOAD4(slice_index(bd, bb, bh, k + 1, s), bm) : (float4)(0.0f);
        b2 = k + 2 < k_size ? LOAD4(slice_index(bd, bb, bh, k + 2, s), bm) : (float4)(0.0f);
        b3 = k + 3 < k_size ? LOAD4(slice_index(bd, bb, bh, k + 3, s), bm) : (float4)(0.0f);
      }
      PART(part, 0, va.x, b0);
      PART(part, 1, va.y, b1);
      PART(part, 2, va.z, b2);
      acc += PART(part, 3, va.w, b3);
#else
      if (adj_y) {
        MAC(p0, va, LOAD4(slice_index(bd, bb, bh, n0, ks), bm));
        MAC(p1, va, LOAD4(slice_index(bd, bb, bh, n1, ks), bm));
        MAC(p2, va, LOAD4(slice_index(bd, bb, bh, n2, ks), bm));
        MAC(p3, va, LOAD4(slice_index(bd, bb, bh, n3, ks), bm));
      } else {
        int k = ks * 4;
        MAC(acc, va.x, LOAD4(slice_index(bd, bb, bh, k, s), bm));
        if (k + 1 < k_size) MAC(acc, va.y, LOAD4(slice_index(bd, bb, bh, k + 1, s), bm));
        if (k + 2 < k_size) MAC(acc, va.z, LOAD4(slice_index(bd, bb, bh, k + 2, s), bm));
        if (k + 3 < k_size) MAC(acc, va.w, LOAD4(slice_index(bd, bb, bh, k + 3, s), bm));
      }
#endif
    }
#if HALF_ACCUM
    // The lanes' sums in half, x + y, then + z, then + w.
    float4 x = (float4)(p0.x, p1.x, p2.x, p3.x), y = (float4)(p0.y, p1.y, p2.y, p3.y);
    float4 zz = (float4)(p0.z, p1.z, p2.z, p3.z), w = (float4)(p0.w, p1.w, p2.w, p3.w);
    acc = RH4(acc + RH4(RH4(RH4(x + y) + zz) + w));
#elif !HALF_MATH
    float4 ones = (float4)(1.0f);
    acc += (float4)(dot(p0, ones), dot(p1, ones), dot(p2, ones), dot(p3, ones));
#endif
  } else {
    float4 part = (float4)(0.0f);
    for (int k = 0; k < k_size; k++) {
      float va = read1(a, ad, ab, ah, k, m);
      float4 vb = adj_y ? (float4)(read1(bm, bd, bb, bh, n0, k), read1(bm, bd, bb, bh, n1, k),
                                   read1(bm, bd, bb, bh, n2, k), read1(bm, bd, bb, bh, n3, k))
                        : LOAD4(slice_index(bd, bb, bh, k, s), bm);
#if HALF_MATH && !HALF_ACCUM
      PART(part, k & 3, va, vb);  // F32_F16: A's slices run along K, four k to a half sum
      if ((k & 3) == 3 || k == k_size - 1) acc += part;
#else
      MAC(acc, va, vb);
#endif
    }
  }
  acc = HALF_MATH ? RH4(TO_FLT4(acc) + LOAD4(s, bias)) : acc;
  STORE4(mask_lanes(activate(acc, act), s, dc), slice_index(dd, b, h, m, s), dst);
}
