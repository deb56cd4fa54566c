// DEPTHWISE_CONV_2D: output channel o reads input channel o / multiplier; weights [kh][kw][Cp].
__kernel void depthwise_conv2d(__global const FLT* src, __global const FLT* wt, __global const FLT* bias,
                               __global FLT* dst, int4 sd, int sc, int4 dd, int dc, int2 kernel_size, int2 stride,
                               int2 dilation, int2 pad, int multiplier, int act) {
  int x = get_global_id(0), y = get_global_id(1), z = get_global_id(2);
  int b = z / dd.w, s = z % dd.w;
  if (x >= dd.z || y >= dd.y || b >= dd.x) return;
  float4 acc = LOAD4(s, bias);
  for (int ky = 0; ky < kernel_size.y; ky++) {
    int iy = y * stride.y - pad.y + ky * dilation.y;
    if (iy < 0 || iy >= sd.y) continue;
    for (int kx = 0; kx < kernel_size.x; kx++) {
      int ix = x * stride.x - pad.x + kx * dilation.x;
      if (ix < 0 || ix >= sd.z) continue;
      float4 w = LOAD4((ky * kernel_size.x + kx) * dd.w + s, wt);
      if (multiplier == 1) {
        acc += LOAD4(slice_index(sd, b, iy, ix, s), src) * w;
      } else {
        int o = s * 4;
        float4 v = (float4)(o < dc ? read1(src, sd, b, iy, ix, o / multiplier) : 0.0f,
                            o + 1 < dc ? read1(src, sd, b, iy, ix, (o + 1) / multiplier) : 0.0f,
                            o + 2 < dc ? read1(src, sd, b, iy, ix, (o + 2) / multiplier) : 0.0f,
                            o + 3 < dc ? read1(src, sd, b, iy, ix, (o + 3) / multiplier) : 0.0f);
        acc += v * w;
      }
    }
  }
  STORE4(mask_lanes(activate(acc, act), s, dc), slice_index(dd, b, y, x, s), dst);
}

// TRANSPOSE_CONV and Convolution2DTransposeBias: weights as CONV_2D's with one output slice
// per group, [So][kh][kw][Si * 4 inputs][4 outputs], so each input scalar meets a float4 of
// weights (per output channel, with a dot product each, selfie_segmentation's 128x128x16 ->
// 256x256x1 upsampling took 0.8 ms). Output (y, x) takes kernel row ky where (y + pad - ky) is
// a multiple of the stride: those rows are walked directly, every stride-th from the first; the
// first row and column and their input positions are worked out once per item and stepped from
// column to column, not divided out per column.
__kernel void transpose_conv(__global const FLT* src, __global const FLT* wt, __global const FLT* bias,
                             __global FLT* dst, int4 sd, int sc, int4 dd, int dc, int2 kernel_size, int2 stride,
                             int2 pad, EPILOGUE_ARGS) {
  int first = get_global_id(0) * 8, y = get_global_id(1), z = get_global_id(2);
  int b = z / dd.w, s = z % dd.w;
  if (first >= dd.z || y >= dd.y || b >= dd.x) return;
  float4 bv = LOAD4(s, bias);
  int ky0 = (y + pad.y) % stride.y, iy0 = (y + pad.y - ky0) / stride.y;
  int kx0 = (first + pad.x) % stride.x, ix0 = (first + pad.x - kx0) / stride.x;
  for (int x = first; x < first + 8 && x < dd.z; x++) {  // 8 output columns per work item
    float4 acc = bv;
    for (int ky = ky0, iy = iy0; ky < kernel_size.y; ky += stride.y, iy--) {
      if (iy < 0 || iy >= sd.y) continue;
      for (int kx = kx0, ix = ix0; kx < kernel_size.x; kx += stride.x, ix--) {
        if (ix < 0 || ix >= sd.z) continue;
        int wi = ((s * kernel_size.y + ky) * kernel_size.x + kx) * sd.w * 4;
        for (int is = 0; is < sd.w; is++, wi += 4) {
          float4 v = LOAD4(slice_index(sd, b, iy, ix, is), src);
          acc += v.x * LOAD4(wi, wt) + v.y * LOAD4(wi + 1, wt) + v.z * LOAD4(wi + 2, wt) + v.w * LOAD4(wi + 3, wt);
        }
      }
    }
    int at = slice_index(dd, b, y, x, s);
    STORE4(mask_lanes(FINISH(acc, s, at), s, dc), at, dst);  // activation and fused steps: ACT, E1, E2
    if (++kx0 == stride.x) {  // the next column: its first kernel column and input column
      kx0 = 0;
      ix0++;
    }
  }
}

// BATCH_MATMUL, and FULLY_CONNECTED whose weights are a runtime tensor (the delegate makes it
// a CONVOLUTION_2D with runtime weights, model_builder.cc): [B, H, M, K] x [B, H, K, N] stored
// as BHWC (B, H, M, K), batch dims of 1 broadcast; adj_x / adj_y read an operand as [.., K, M]
// / [.., N, K]. One output slice of N per item: without adj_y, a row of B is one slice load.
// Bias per N and a fused activation (act as ActivationFunctionType).
__kernel void batch_matmul(__global const FLT* a, __global const FLT* bm, __global const FLT* bias,
                           __global FLT* dst, int4 ad, int4 bd, int4 dd, int dc, int k_size, int adj_x, int adj_y,
                           int act) {
  int m = get_global_id(0), h = get_global_id(1), z = get_global_id(2);
  int b = z / dd.w, s = z % dd.w;
  if (m >= dd.z || h >= dd.y || b >= dd.x) return;
  int ab = ad.x == 1 ? 0 : b, ah = ad.y == 1 ? 0 : h, bb = bd.x == 1 ? 0 : b, bh = bd.y == 1 ? 0 : h;
  int n0 = s * 4, last = dc - 1;  // lanes past N read row N - 1 and are masked at the store
  int n1 = min(n0 + 1, last), n2 = min(n0 + 2, last), n3 = min(n0 + 3, last);
  float4 acc = LOAD4(s, bias);
  for (int k = 0; k < k_size; k++) {
    float va = adj_x ? read1(a, ad, ab, ah, k, m) : read1(a, ad, ab, ah, m, k);
    float4 vb = adj_y ? (float4)(read1(bm, bd, bb, bh, n0, k), read1(bm, bd, bb, bh, n1, k),
                                 read1(bm, bd, bb, bh, n2, k), read1(bm, bd, bb, bh, n3, k))
                      : LOAD4(slice_index(bd, bb, bh, k, s), bm);
    acc += va * vb;
  }
  STORE4(mask_lanes(activate(acc, act), s, dc), slice_index(dd, b, h, m, s), dst);
}

// LSTM, basic kernel (TFLite's LstmCell): `gates` holds FC([input, previous activation]) as
// [B, 4 * units], in the order input gate, cell candidate, forget gate, output gate.
inline float sigmoid1(float v) { return 1.0f / (1.0f + exp(-v)); }
__kernel void lstm_cell(__global const FLT* gates, __global const FLT* prev_state, __global FLT* activ,
                        __global FLT* state, int4 gd, int4 sd, int units) {
  int s = get_global_id(0), b = get_global_id(1);
  if (s >= sd.w || b >= sd.x) return;
  float st[4], out[4];
  for (int l = 0; l < 4; l++) {
    int c = s * 4 + l;
    st[l] = 0.0f;
    out[l] = 0.0f;
    if (c >= units) continue;
    float in_gate = sigmoid1(read1(gates, gd, b, 0, 0, c));
    float candidate = tanh(read1(gates, gd, b, 0, 0, units + c));
    float forget = sigmoid1(read1(gates, gd, b, 0, 0, 2 * units + c));
    float out_gate = sigmoid1(read1(gates, gd, b, 0, 0, 3 * units + c));
    st[l] = in_gate * candidate + forget * read1(prev_state, sd, b, 0, 0, c);
    out[l] = out_gate * tanh(st[l]);
  }
  STORE4((float4)(st[0], st[1], st[2], st[3]), slice_index(sd, b, 0, 0, s), state);
  STORE4((float4)(out[0], out[1], out[2], out[3]), slice_index(sd, b, 0, 0, s), activ);
}
