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
  for (int i = get_global_id(0) * 16, end = IMIN(i + 16, n); i < end; i++)
    STORE1(LOAD1(src_index[i], src), dst_index[i], dst);
}

// The same copy into a float buffer: runtime conv weights in the kernels' order (weights are
// float at either precision, see WLOAD4).
__kernel void copy_pairs_to_float(__global const FLT* src, __global float* dst, __global const int* dst_index,
                                  __global const int* src_index, int n) {
  for (int i = get_global_id(0) * 16, end = IMIN(i + 16, n); i < end; i++)
    dst[dst_index[i]] = LOAD1(src_index[i], src);
}

// The same copy when whole float4 slices move (indices count slices): a quarter of the index
// traffic, one vector per element.
__kernel void copy_slices(__global const FLT* src, __global FLT* dst, __global const int* dst_index,
                          __global const int* src_index, int n) {
  for (int i = get_global_id(0) * 16, end = IMIN(i + 16, n); i < end; i++)
    STORE4(LOAD4(src_index[i], src), dst_index[i], dst);
}
