// RESIZE_BILINEAR / RESIZE_NEAREST_NEIGHBOR with TFLite's align_corners / half_pixel_centers.
// A work item takes 8 output columns of one row in 4 slices: the source columns and weights,
// worked out once, serve all 4. Worked out per slice they cost more than the loads and blends:
// pose_detection's 7x7x1152 -> 14x14 resize took 0.41 ms that way, 0.22 ms this way.
__kernel void resize(__global const FLT* src, __global FLT* dst, int4 sd, int4 dd, int dc, float2 scale,
                     int bilinear, int align_corners, int half_pixel) {
  int first = get_global_id(0) * 8, y = get_global_id(1), z = get_global_id(2);
  int groups = (dd.w + 3) / 4, b = z / groups, s0 = z % groups * 4;
  if (first >= dd.z || y >= dd.y || b >= dd.x) return;
  int n = IMIN(8, dd.z - first), x0[8], x1[8];
  float dx[8];
  float fy = half_pixel ? ((float)y + 0.5f) * scale.y - (bilinear ? 0.5f : 0.0f) : (float)y * scale.y;
  int y0, y1;
  float dy = 0.0f;
  if (bilinear) {
    dy = fy < 0.0f ? 0.0f : fy - floor(fy);
    y0 = IMAX((int)floor(fy), 0), y1 = IMIN((int)ceil(fy), sd.y - 1);
  } else {
    y0 = y1 = IMAX(IMIN(align_corners ? (int)round(fy) : (int)floor(fy), sd.y - 1), 0);
  }
  for (int k = 0; k < 8; k++) {
    int x = first + IMIN(k, n - 1);
    if (bilinear) {
      float fx = half_pixel ? ((float)x + 0.5f) * scale.x - 0.5f : (float)x * scale.x;
      dx[k] = fx < 0.0f ? 0.0f : fx - floor(fx);
      x0[k] = IMAX((int)floor(fx), 0), x1[k] = IMIN((int)ceil(fx), sd.z - 1);
    } else {
      float fx = half_pixel ? ((float)x + 0.5f) * scale.x : (float)x * scale.x;
      x0[k] = x1[k] = IMAX(IMIN(align_corners ? (int)round(fx) : (int)floor(fx), sd.z - 1), 0);
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
      float4 top = MIX(LOAD4(row0 + x0[k], src), LOAD4(row0 + x1[k], src), dx[k]);
      float4 bottom = MIX(LOAD4(row1 + x0[k], src), LOAD4(row1 + x1[k], src), dx[k]);
      STORE4(mask_lanes(MIX(top, bottom, dy), s, dc), out + k, dst);
    }
  }
}
