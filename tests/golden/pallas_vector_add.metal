[[kernel]] void pallas_vector_add(
  const device float* in0 [[buffer(0)]],
  const device float* in1 [[buffer(1)]],
  const device int32_t* in2 [[buffer(2)]],
  device float* out3 [[buffer(3)]],
  uint3 thread_position_in_threadgroup [[thread_position_in_threadgroup]],
  uint3 threadgroup_position_in_grid [[threadgroup_position_in_grid]]) {
    const int off0 = (((int)threadgroup_position_in_grid.x) * 256);
    for (int s1 = 0; s1 < 1; s1++) {
        const int e2 = ((s1 * 256) + ((int)thread_position_in_threadgroup.x));
        if ((e2 < 256)) {
            const int ad3 = metal::max(metal::min((off0 + e2), 999), 0);
            const float ld4 = in0[ad3];
            const int x5 = as_type<int>((as_type<uint>(((int)threadgroup_position_in_grid.x)) * 256u));
            const int ld6 = in2[e2];
            const int x7 = as_type<int>((as_type<uint>(x5) + as_type<uint>(ld6)));
            const bool x8 = (x7 < 1000);
            const float mv9 = ((x8 && (true && (((off0 + e2) >= 0) && ((off0 + e2) < 1000)))) ? ld4 : 0.0f);
            const float ld10 = in1[ad3];
            const float mv11 = ((x8 && (true && (((off0 + e2) >= 0) && ((off0 + e2) < 1000)))) ? ld10 : 0.0f);
            const float x12 = (mv9 + mv11);
            const bool ok13 = (true && (((off0 + e2) >= 0) && ((off0 + e2) < 1000)));
            if (ok13) {
                out3[(off0 + e2)] = x12;
            }
        }
    }
    metal::threadgroup_barrier(metal::mem_flags::mem_device | metal::mem_flags::mem_threadgroup);
}
