[[kernel]] void pallas_softmax_backward(
  const device float* in0 [[buffer(0)]],
  const device float* in1 [[buffer(1)]],
  device float* out2 [[buffer(2)]],
  uint3 thread_position_in_threadgroup [[thread_position_in_threadgroup]],
  uint3 threadgroup_position_in_grid [[threadgroup_position_in_grid]]) {
    threadgroup float red1[4];
    threadgroup float part2[16];
    const int off0 = (((int)threadgroup_position_in_grid.x) * 4);
    for (int s3 = 0; s3 < 1; s3++) {
        const int e4 = ((s3 * 256) + ((int)thread_position_in_threadgroup.x));
        if ((e4 < 16)) {
            const int ix5 = (e4 / 4);
            const int ix6 = (e4 % 4);
            float acc7 = 0.0f;
            for (int k8 = ix6; k8 < 40; k8 += 4) {
                const int ad9 = (((off0 + ix5) * 40) + k8);
                const float ld10 = in1[ad9];
                const float ld11 = in0[ad9];
                const float x12 = (ld10 * ld11);
                acc7 = (acc7 + x12);
            }
            part2[((ix5 * 4) + ix6)] = acc7;
        }
    }
    metal::threadgroup_barrier(metal::mem_flags::mem_threadgroup);
    for (int s13 = 0; s13 < 1; s13++) {
        const int e14 = ((s13 * 256) + ((int)thread_position_in_threadgroup.x));
        if ((e14 < 4)) {
            const int pb15 = (e14 * 4);
            float acc16 = 0.0f;
            for (int l17 = 0; l17 < 4; l17++) {
                const float pv18 = part2[(pb15 + l17)];
                acc16 = (acc16 + pv18);
            }
            red1[e14] = acc16;
        }
    }
    metal::threadgroup_barrier(metal::mem_flags::mem_threadgroup);
    for (int s19 = 0; s19 < 1; s19++) {
        const int e20 = ((s19 * 256) + ((int)thread_position_in_threadgroup.x));
        if ((e20 < 160)) {
            const int ix21 = (e20 / 40);
            const int ix22 = (e20 % 40);
            const int ad23 = (((off0 + ix21) * 40) + ix22);
            const float ld24 = in0[ad23];
            const float ld25 = in1[ad23];
            const float lv26 = red1[ix21];
            const float x27 = (ld25 - lv26);
            const float x28 = (ld24 * x27);
            out2[(((off0 + ix21) * 40) + ix22)] = x28;
        }
    }
    metal::threadgroup_barrier(metal::mem_flags::mem_device | metal::mem_flags::mem_threadgroup);
}
