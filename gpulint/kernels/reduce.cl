// MEAN / SUM / REDUCE_MAX / REDUCE_MIN / REDUCE_PROD over any of B, H, W, C (flags in `axes`):
// one item per output (a GPU uses reduce_wg below when C is kept).
__kernel void reduce(__global const FLT* src, __global FLT* dst, int4 sd, int sc, int4 dd, int dc, int4 axes,
                     int op) {
  int x = get_global_id(0), y = get_global_id(1), z = get_global_id(2);
  int b = z / dd.w, s = z % dd.w;
  if (x >= dd.z || y >= dd.y || b >= dd.x) return;
  int nb = axes.x ? sd.x : 1, nh = axes.y ? sd.y : 1, nw = axes.z ? sd.z : 1, nc = axes.w ? sc : 1;
  float r[4];
  for (int l = 0; l < 4; l++) {
    int c = s * 4 + l;
    if (c >= dc) { r[l] = 0.0f; continue; }
    float acc = op == REDUCE_MAX ? -INFINITY : (op == REDUCE_MIN ? INFINITY : (op == REDUCE_PROD ? 1.0f : 0.0f));
    for (int ib = 0; ib < nb; ib++)
      for (int ih = 0; ih < nh; ih++)
        for (int iw = 0; iw < nw; iw++)
          for (int ic = 0; ic < nc; ic++) {
            float v = read1(src, sd, axes.x ? ib : b, axes.y ? ih : y, axes.z ? iw : x, axes.w ? ic : c);
            acc = op == REDUCE_MAX ? MAX_NAN(acc, v)
                                   : (op == REDUCE_MIN ? MIN_NAN(acc, v) : (op == REDUCE_PROD ? acc * v : acc + v));
          }
    r[l] = op == REDUCE_MEAN ? acc / (float)(nb * nh * nw * nc) : acc;
  }
  STORE4((float4)(r[0], r[1], r[2], r[3]), slice_index(dd, b, y, x, s), dst);
}

// SOFTMAX over the channels of each (b, y, x), a slice at a time: the maximum, the sum of
// exp((v - max) * beta) slice by slice (lanes past c count neither), then each slice's share.
// Reading one lane at a time took PoCL 17 ms on YOLOv8's [1, 4, 8400, 16] DFL softmax.
__kernel void softmax(__global const FLT* src, __global FLT* dst, int4 d, int c, float beta) {
  int x = get_global_id(0), y = get_global_id(1), b = get_global_id(2);
  if (x >= d.z || y >= d.y || b >= d.x) return;
  float4 m4 = (float4)(-INFINITY);
  for (int s = 0; s < d.w; s++) {
    float4 v = LOAD4(slice_index(d, b, y, x, s), src);
    m4 = LANES_INSIDE(s, c) ? MAX_NAN(m4, v) : m4;
  }
  float m = MAX_NAN(MAX_NAN(m4.x, m4.y), MAX_NAN(m4.z, m4.w));
  float sum = 0.0f;
  for (int s = 0; s < d.w; s++)
    sum += dot(mask_lanes(exp((LOAD4(slice_index(d, b, y, x, s), src) - m) * beta), s, c), (float4)(1.0f));
  for (int s = 0; s < d.w; s++) {
    int idx = slice_index(d, b, y, x, s);
    float4 v = (LOAD4(idx, src) - m) * beta;
    STORE4(mask_lanes(exp(v) / sum, s, c), idx, dst);
  }
}

// CUMSUM along one of B, H, W, C (axis 0..3), with TFLite's exclusive and reverse; summed in
// index order, as the interpreter sums.
__kernel void cumsum(__global const FLT* src, __global FLT* dst, int4 d, int c, int axis, int exclusive,
                     int reverse) {
  int x = get_global_id(0), y = get_global_id(1), z = get_global_id(2);
  int b = z / d.w, s = z % d.w;
  if (x >= d.z || y >= d.y || b >= d.x) return;
  int n = axis == 0 ? d.x : (axis == 1 ? d.y : (axis == 2 ? d.z : c));
  float r[4];
  for (int l = 0; l < 4; l++) {
    int ch = s * 4 + l;
    if (ch >= c) { r[l] = 0.0f; continue; }
    int pos = axis == 0 ? b : (axis == 1 ? y : (axis == 2 ? x : ch));
    int lo = reverse ? pos + exclusive : 0;
    int hi = reverse ? n : pos + 1 - exclusive;
    float acc = 0.0f;
    for (int i = lo; i < hi; i++)
      acc += read1(src, d, axis == 0 ? i : b, axis == 1 ? i : y, axis == 2 ? i : x, axis == 3 ? i : ch);
    r[l] = acc;
  }
  STORE4((float4)(r[0], r[1], r[2], r[3]), slice_index(d, b, y, x, s), dst);
}

// The same reductions over B, H and W (the channels kept) on a GPU, a float4 per cell and one work
// group per output slice: its items split the cells, then halve in local memory, as the
// delegate's tasks/reduce.cc does for a large extent.
__kernel void reduce_wg(__global const FLT* src, __global FLT* dst, int4 sd, int4 dd, int dc, int4 axes, int op,
                        __local float4* part) {
  int lid = get_local_id(0), n = get_local_size(0);
  int x = get_group_id(0), y = get_global_id(1), z = get_global_id(2);
  int b = z / dd.w, s = z % dd.w;
  int nh = axes.y ? sd.y : 1, nw = axes.z ? sd.z : 1, cells = (axes.x ? sd.x : 1) * nh * nw;
  float4 acc = op == REDUCE_MAX ? (float4)(-INFINITY)
               : (op == REDUCE_MIN ? (float4)(INFINITY) : (float4)(op == REDUCE_PROD ? 1.0f : 0.0f));
  // (ib, ih, iw) of cell i, stepped by n as a mixed-radix sum: no division per cell.
  int dw = n % nw, dh = (n / nw) % nh, db = n / (nw * nh);
  int iw = lid % nw, ih = (lid / nw) % nh, ib = lid / (nw * nh);
  for (int i = lid; i < cells; i += n) {
    float4 v = LOAD4(slice_index(sd, axes.x ? ib : b, axes.y ? ih : y, axes.z ? iw : x, s), src);
    acc = op == REDUCE_MAX ? MAX_NAN(acc, v)
                           : (op == REDUCE_MIN ? MIN_NAN(acc, v) : (op == REDUCE_PROD ? acc * v : acc + v));
    iw += dw;
    if (iw >= nw) { iw -= nw; ih++; }
    ih += dh;
    if (ih >= nh) { ih -= nh; ib++; }
    ib += db;
  }
  part[lid] = acc;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int k = n / 2; k > 0; k >>= 1) {
    if (lid < k) {
      float4 a = part[lid], v = part[lid + k];
      part[lid] = op == REDUCE_MAX ? MAX_NAN(a, v)
                                   : (op == REDUCE_MIN ? MIN_NAN(a, v) : (op == REDUCE_PROD ? a * v : a + v));
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if (lid == 0) {
    float4 r = op == REDUCE_MEAN ? part[0] / (float)cells : part[0];
    STORE4(mask_lanes(r, s, dc), slice_index(dd, b, y, x, s), dst);
  }
}
