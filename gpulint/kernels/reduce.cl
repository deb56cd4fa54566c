// AVERAGE_POOL_2D / MAX_POOL_2D: padding cells do not count (TFLite's average divides by the
// cells inside the input). 8 output columns per work item.
__kernel void pool2d(__global const FLT* src, __global FLT* dst, int4 sd, int4 dd, int dc, int2 kernel_size,
                     int2 stride, int2 pad, int is_max, int act) {
  int x0 = get_global_id(0) * 8, y = get_global_id(1), z = get_global_id(2);
  int b = z / dd.w, s = z % dd.w;
  if (x0 >= dd.z || y >= dd.y || b >= dd.x) return;
  for (int x = x0; x < x0 + 8 && x < dd.z; x++) {
    float4 acc = is_max ? (float4)(-INFINITY) : (float4)(0.0f);
    int count = 0;
    for (int ky = 0; ky < kernel_size.y; ky++) {
      int iy = y * stride.y - pad.y + ky;
      if (iy < 0 || iy >= sd.y) continue;
      for (int kx = 0; kx < kernel_size.x; kx++) {
        int ix = x * stride.x - pad.x + kx;
        if (ix < 0 || ix >= sd.z) continue;
        float4 v = LOAD4(slice_index(sd, b, iy, ix, s), src);
        acc = is_max ? MAX_NAN(acc, v) : acc + v;
        count++;
      }
    }
    if (!is_max) acc /= (float)max(count, 1);
    STORE4(mask_lanes(activate(acc, act), s, dc), slice_index(dd, b, y, x, s), dst);
  }
}

// MEAN / SUM / REDUCE_MAX / REDUCE_MIN / REDUCE_PROD over any of B, H, W, C (flags in `axes`).
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
            acc = op == REDUCE_MAX ? MAX_NAN(acc, v) : (op == REDUCE_MIN ? MIN_NAN(acc, v) : (op == REDUCE_PROD ? acc * v : acc + v));
          }
    r[l] = op == REDUCE_MEAN ? acc / (float)(nb * nh * nw * nc) : acc;
  }
  STORE4((float4)(r[0], r[1], r[2], r[3]), slice_index(dd, b, y, x, s), dst);
}

// SOFTMAX over the channels of each (b, y, x).
__kernel void softmax(__global const FLT* src, __global FLT* dst, int4 d, int c, float beta) {
  int x = get_global_id(0), y = get_global_id(1), b = get_global_id(2);
  if (x >= d.z || y >= d.y || b >= d.x) return;
  float m = -INFINITY;
  for (int i = 0; i < c; i++) m = MAX_NAN(m, read1(src, d, b, y, x, i));
  float sum = 0.0f;
  for (int i = 0; i < c; i++) sum += exp((read1(src, d, b, y, x, i) - m) * beta);
  for (int s = 0; s < d.w; s++) {
    int idx = slice_index(d, b, y, x, s);
    float4 v = (LOAD4(idx, src) - m) * beta;
    STORE4(mask_lanes(exp(v) / sum, s, c), idx, dst);
  }
}

// RESIZE_BILINEAR / RESIZE_NEAREST_NEIGHBOR with TFLite's align_corners / half_pixel_centers.
// A work item takes 8 output columns of one row in 4 slices: the source columns and weights,
// worked out once, serve all 4. Worked out per slice they cost more than the loads and blends:
// pose_detection's 7x7x1152 -> 14x14 resize took 0.41 ms that way, 0.22 ms this way.
__kernel void resize(__global const FLT* src, __global FLT* dst, int4 sd, int4 dd, int dc, float2 scale,
                     int bilinear, int align_corners, int half_pixel) {
  int first = get_global_id(0) * 8, y = get_global_id(1), z = get_global_id(2);
  int groups = (dd.w + 3) / 4, b = z / groups, s0 = z % groups * 4;
  if (first >= dd.z || y >= dd.y || b >= dd.x) return;
  int n = min(8, dd.z - first), x0[8], x1[8];
  float dx[8];
  float fy = half_pixel ? ((float)y + 0.5f) * scale.y - (bilinear ? 0.5f : 0.0f) : (float)y * scale.y;
  int y0, y1;
  float dy = 0.0f;
  if (bilinear) {
    dy = fy < 0.0f ? 0.0f : fy - floor(fy);
    y0 = max((int)floor(fy), 0), y1 = min((int)ceil(fy), sd.y - 1);
  } else {
    y0 = y1 = max(min(align_corners ? (int)round(fy) : (int)floor(fy), sd.y - 1), 0);
  }
  for (int k = 0; k < 8; k++) {
    int x = first + min(k, n - 1);
    if (bilinear) {
      float fx = half_pixel ? ((float)x + 0.5f) * scale.x - 0.5f : (float)x * scale.x;
      dx[k] = fx < 0.0f ? 0.0f : fx - floor(fx);
      x0[k] = max((int)floor(fx), 0), x1[k] = min((int)ceil(fx), sd.z - 1);
    } else {
      float fx = half_pixel ? ((float)x + 0.5f) * scale.x : (float)x * scale.x;
      x0[k] = x1[k] = max(min(align_corners ? (int)round(fx) : (int)floor(fx), sd.z - 1), 0);
      dx[k] = 0.0f;
    }
  }
  for (int s = s0; s < s0 + 4 && s < dd.w; s++) {
    int plane = (b * sd.w + s) * sd.y, out = slice_index(dd, b, y, first, s);
    int row0 = (plane + y0) * sd.z, row1 = (plane + y1) * sd.z;
    if (!bilinear) {
      for (int k = 0; k < n; k++) STORE4(mask_lanes(LOAD4(row0 + x0[k], src), s, dc), out + k, dst);
      continue;
    }
    for (int k = 0; k < n; k++) {
      float4 top = mix(LOAD4(row0 + x0[k], src), LOAD4(row0 + x1[k], src), dx[k]);
      float4 bottom = mix(LOAD4(row1 + x0[k], src), LOAD4(row1 + x1[k], src), dx[k]);
      STORE4(mask_lanes(mix(top, bottom, dy), s, dc), out + k, dst);
    }
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
