// TRANSPOSE_CONV and Convolution2DTransposeBias: weights as CONV_2D's with one output slice
// per group, [So][kh][kw][Si * 4 inputs][4 outputs], so each input scalar meets a float4 of
// weights (per output channel, with a dot product each, selfie_segmentation's 128x128x16 ->
// 256x256x1 upsampling took 0.8 ms). Output (y, x) takes kernel row ky where (y + pad - ky) is
// a multiple of the stride: those rows are walked directly, every stride-th from the first; the
// first row and column and their input positions are worked out once per item and stepped from
// column to column, not divided out per column. As ConvolutionTransposed sums: from zero, the
// bias added to the sum made a half at the end; at F16 (HALF_ACCUM) each multiply-add a half, at
// F32_F16 (HALF_MATH alone) an input slice's four products summed in half, then added to a
// float sum (R += TO_ACCUM_TYPE(S.x * f0 + S.y * f1 + S.z * f2 + S.w * f3)).
__kernel void transpose_conv(__global const FLT* src, __global const float* wt, __global const FLT* bias,
                             __global FLT* dst, int4 sd, int sc, int4 dd, int dc, int2 kernel_size, int2 stride,
                             int2 pad, EPILOGUE_ARGS) {
  int first = get_global_id(0) * 8, y = get_global_id(1), z = get_global_id(2);
  int b = z / dd.w, s = z % dd.w;
  if (first >= dd.z || y >= dd.y || b >= dd.x) return;
  float4 bv = LOAD4(s, bias);
  int ky0 = (y + pad.y) % stride.y, iy0 = (y + pad.y - ky0) / stride.y;
  int kx0 = (first + pad.x) % stride.x, ix0 = (first + pad.x - kx0) / stride.x;
  for (int x = first; x < first + 8 && x < dd.z; x++) {  // 8 output columns per work item
    float4 acc = HALF_MATH ? (float4)(0.0f) : bv;
    for (int ky = ky0, iy = iy0; ky < kernel_size.y; ky += stride.y, iy--) {
      if (iy < 0 || iy >= sd.y) continue;
      for (int kx = kx0, ix = ix0; kx < kernel_size.x; kx += stride.x, ix--) {
        if (ix < 0 || ix >= sd.z) continue;
        int wi = ((s * kernel_size.y + ky) * kernel_size.x + kx) * sd.w * 4;
        for (int is = 0; is < sd.w; is++, wi += 4) {
          float4 v = LOAD4(slice_index(sd, b, iy, ix, is), src);
#if HALF_ACCUM
          acc = RA4(acc + v.x * WLOAD4(wi, wt));
          acc = RA4(acc + v.y * WLOAD4(wi + 1, wt));
          acc = RA4(acc + v.z * WLOAD4(wi + 2, wt));
          acc = RA4(acc + v.w * WLOAD4(wi + 3, wt));
#elif HALF_MATH
          float4 part = RH4(v.x * WLOAD4(wi, wt));
          part = RH4(part + v.y * WLOAD4(wi + 1, wt));
          part = RH4(part + v.z * WLOAD4(wi + 2, wt));
          acc += RH4(part + v.w * WLOAD4(wi + 3, wt));
#else
          acc += v.x * WLOAD4(wi, wt) + v.y * WLOAD4(wi + 1, wt) + v.z * WLOAD4(wi + 2, wt) + v.w * WLOAD4(wi + 3, wt);
#endif
        }
      }
    }
    int at = slice_index(dd, b, y, x, s);
    acc = HALF_MATH ? RH4(TO_FLT4(acc) + bv) : acc;
    STORE4(mask_lanes(FINISH(acc, s, at), s, dc), at, dst);  // activation and fused steps: ACT, E1, E2
    if (++kx0 == stride.x) {  // the next column: its first kernel column and input column
      kx0 = 0;
      ix0++;
    }
  }
}
