[[kernel]] void pallas_quantized_matvec(
  const device float* in0 [[buffer(0)]],
  const device uint32_t* in1 [[buffer(1)]],
  const device float* in2 [[buffer(2)]],
  const device float* in3 [[buffer(3)]],
  const device uint32_t* in4 [[buffer(4)]],
  device float* out5 [[buffer(5)]],
  uint3 thread_position_in_threadgroup [[thread_position_in_threadgroup]],
  uint3 threadgroup_position_in_grid [[threadgroup_position_in_grid]]) {
    threadgroup float red1[8];
    threadgroup float part2[256];
    const int off0 = (((int)threadgroup_position_in_grid.x) * 8);
    for (int s3 = 0; s3 < 1; s3++) {
        const int e4 = ((s3 * 256) + ((int)thread_position_in_threadgroup.x));
        if ((e4 < 256)) {
            const int ix5 = (e4 / 32);
            const int ix6 = (e4 % 32);
            float acc7 = 0.0f;
            for (int k8 = ix6; k8 < 256; k8 += 32) {
                const int ri9 = (((ix5 * 32) + ((((k8 / 64) * 64) + (k8 % 64)) / 8)) / 32);
                const int ri10 = (((ix5 * 32) + ((((k8 / 64) * 64) + (k8 % 64)) / 8)) % 32);
                const int ad11 = (((off0 + ri9) * 32) + ri10);
                const uint ld12 = in1[ad11];
                const int ri13 = ((((k8 / 64) * 64) + (k8 % 64)) % 8);
                const uint ld14 = in4[ri13];
                const uint x15 = (ld14 * 4u);
                const bool v16 = (x15 < 32u);
                const uint v17 = (v16 ? (ld12 >> ((uint)((v16 ? x15 : 0u)))) : 0u);
                const uint x18 = (v17 & 15u);
                const float x19 = ((float)(x18));
                const int ri20 = (((ix5 * 4) + (k8 / 64)) / 4);
                const int ri21 = (((ix5 * 4) + (k8 / 64)) % 4);
                const int ad22 = (((off0 + ri20) * 4) + ri21);
                const float ld23 = in2[ad22];
                const float x24 = (x19 * ld23);
                const float ld25 = in3[ad22];
                const float x26 = (x24 + ld25);
                const float ld27 = in0[k8];
                const float x28 = (x26 * ld27);
                acc7 = (acc7 + x28);
            }
            part2[((ix5 * 32) + ix6)] = acc7;
        }
    }
    metal::threadgroup_barrier(metal::mem_flags::mem_threadgroup);
    for (int s29 = 0; s29 < 1; s29++) {
        const int e30 = ((s29 * 256) + ((int)thread_position_in_threadgroup.x));
        if ((e30 < 8)) {
            const int pb31 = (e30 * 32);
            float acc32 = 0.0f;
            for (int l33 = 0; l33 < 32; l33++) {
                const float pv34 = part2[(pb31 + l33)];
                acc32 = (acc32 + pv34);
            }
            red1[e30] = acc32;
        }
    }
    metal::threadgroup_barrier(metal::mem_flags::mem_threadgroup);
    for (int s35 = 0; s35 < 1; s35++) {
        const int e36 = ((s35 * 256) + ((int)thread_position_in_threadgroup.x));
        if ((e36 < 8)) {
            const float lv37 = red1[e36];
            out5[(off0 + e36)] = lv37;
        }
    }
    metal::threadgroup_barrier(metal::mem_flags::mem_device | metal::mem_flags::mem_threadgroup);
}
