[[kernel]] void pallas_vector_add(
  const device float* in0 [[buffer(0)]],
  const device float* in1 [[buffer(1)]],
  device float* out2 [[buffer(2)]],
  uint3 thread_position_in_threadgroup [[thread_position_in_threadgroup]],
  uint3 threadgroup_position_in_grid [[threadgroup_position_in_grid]]) {
    const int off0 = (((int)threadgroup_position_in_grid.x) * 256);
    const int ad1 = metal::max(metal::min((off0 + ((int)thread_position_in_threadgroup.x)), 999), 0);
    const float ld2 = in0[ad1];
    const int x3 = as_type<int>((as_type<uint>(((int)threadgroup_position_in_grid.x)) * 256u));
    const int x4 = as_type<int>((as_type<uint>(x3) + as_type<uint>(((int)thread_position_in_threadgroup.x))));
    const bool x5 = (x4 < 1000);
    const float mv6 = ((x5 && (true && (((off0 + ((int)thread_position_in_threadgroup.x)) >= 0) && ((off0 + ((int)thread_position_in_threadgroup.x)) < 1000)))) ? ld2 : 0.0f);
    const float ld7 = in1[ad1];
    const float mv8 = ((x5 && (true && (((off0 + ((int)thread_position_in_threadgroup.x)) >= 0) && ((off0 + ((int)thread_position_in_threadgroup.x)) < 1000)))) ? ld7 : 0.0f);
    const float x9 = (mv6 + mv8);
    const bool ok10 = (true && (((off0 + ((int)thread_position_in_threadgroup.x)) >= 0) && ((off0 + ((int)thread_position_in_threadgroup.x)) < 1000)));
    if (ok10) {
        out2[(off0 + ((int)thread_position_in_threadgroup.x))] = x9;
    }
}
