[[kernel]] void pallas_quantized_matvec(
  const device float* in0 [[buffer(0)]],
  const device uint32_t* in1 [[buffer(1)]],
  const device float* in2 [[buffer(2)]],
  const device float* in3 [[buffer(3)]],
  device float* out4 [[buffer(4)]],
  uint3 thread_position_in_threadgroup [[thread_position_in_threadgroup]],
  uint3 threadgroup_position_in_grid [[threadgroup_position_in_grid]]) {
    threadgroup float red1[8];
    threadgroup float part2[256];
    const int off0 = (((int)threadgroup_position_in_grid.x) * 8);
    const int ix3 = (((int)thread_position_in_threadgroup.x) / 32);
    const int ix4 = (((int)thread_position_in_threadgroup.x) % 32);
    float acc5 = 0.0f;
    for (int k6 = ix4; k6 < 256; k6 += 32) {
        const int ri7 = (k6 / 8);
        const int ad8 = (((off0 + ix3) * 32) + ri7);
        const uint ld9 = in1[ad8];
        const uint x10 = (((uint)((k6 % 8))) * 4u);
        const bool v11 = (x10 < 32u);
        const uint v12 = (v11 ? (ld9 >> ((uint)((v11 ? x10 : 0u)))) : 0u);
        const uint x13 = (v12 & 15u);
        const float x14 = ((float)(x13));
        const int ri15 = (k6 / 64);
        const int ad16 = (((off0 + ix3) * 4) + ri15);
        const float ld17 = in2[ad16];
        const float x18 = (x14 * ld17);
        const float ld19 = in3[ad16];
        const float x20 = (x18 + ld19);
        const float ld21 = in0[k6];
        const float x22 = (x20 * ld21);
        acc5 = (acc5 + x22);
    }
    part2[((ix3 * 32) + ix4)] = acc5;
    metal::threadgroup_barrier(metal::mem_flags::mem_threadgroup);
    if ((((int)thread_position_in_threadgroup.x) < 8)) {
        const int pb23 = (((int)thread_position_in_threadgroup.x) * 32);
        float acc24 = 0.0f;
        for (int l25 = 0; l25 < 32; l25++) {
            const float pv26 = part2[(pb23 + l25)];
            acc24 = (acc24 + pv26);
        }
        red1[((int)thread_position_in_threadgroup.x)] = acc24;
    }
    metal::threadgroup_barrier(metal::mem_flags::mem_threadgroup);
    if ((((int)thread_position_in_threadgroup.x) < 8)) {
        const float lv27 = red1[((int)thread_position_in_threadgroup.x)];
        out4[(off0 + ((int)thread_position_in_threadgroup.x))] = lv27;
    }
}
