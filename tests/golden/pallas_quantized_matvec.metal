[[kernel]] void pallas_quantized_matvec(
  const device float* in0 [[buffer(0)]],
  const device uint32_t* in1 [[buffer(1)]],
  const device float* in2 [[buffer(2)]],
  const device float* in3 [[buffer(3)]],
  device float* out4 [[buffer(4)]],
  uint3 thread_position_in_threadgroup [[thread_position_in_threadgroup]]) {
    threadgroup float red0[32];
    threadgroup float part1[256];
    const int ix2 = (((int)thread_position_in_threadgroup.x) / 8);
    const int ix3 = (((int)thread_position_in_threadgroup.x) % 8);
    float acc4 = 0.0f;
    for (int k5 = ix3; k5 < 256; k5 += 8) {
        const int ri6 = (k5 / 8);
        const int ad7 = ((ix2 * 32) + ri6);
        const uint ld8 = in1[ad7];
        const uint x9 = (((uint)((k5 % 8))) * 4u);
        const bool v10 = (x9 < 32u);
        const uint v11 = (v10 ? (ld8 >> ((uint)((v10 ? x9 : 0u)))) : 0u);
        const uint x12 = (v11 & 15u);
        const float x13 = ((float)(((int)(x12))));
        const int ri14 = (k5 / 64);
        const int ad15 = ((ix2 * 4) + ri14);
        const float ld16 = in2[ad15];
        const float x17 = (x13 * ld16);
        const float ld18 = in3[ad15];
        const float x19 = (x17 + ld18);
        const float ld20 = in0[k5];
        const float x21 = (x19 * ld20);
        acc4 = (acc4 + x21);
    }
    part1[((ix2 * 8) + ix3)] = acc4;
    metal::threadgroup_barrier(metal::mem_flags::mem_threadgroup);
    if ((((int)thread_position_in_threadgroup.x) < 32)) {
        const int pb22 = (((int)thread_position_in_threadgroup.x) * 8);
        float acc23 = 0.0f;
        for (int l24 = 0; l24 < 8; l24++) {
            const float pv25 = part1[(pb22 + l24)];
            acc23 = (acc23 + pv25);
        }
        red0[((int)thread_position_in_threadgroup.x)] = acc23;
    }
    metal::threadgroup_barrier(metal::mem_flags::mem_threadgroup);
    if ((((int)thread_position_in_threadgroup.x) < 32)) {
        const float lv26 = red0[((int)thread_position_in_threadgroup.x)];
        out4[((int)thread_position_in_threadgroup.x)] = lv26;
    }
}
