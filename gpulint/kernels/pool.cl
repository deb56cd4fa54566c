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
    if (!is_max) acc /= (float)IMAX(count, 1);
    STORE4(mask_lanes(activate(acc, act), s, dc), slice_index(dd, b, y, x, s), dst);
  }
}
