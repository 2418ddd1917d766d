[[kernel]] void pallas_softmax_backward(
  const device float* in0 [[buffer(0)]],
  const device float* in1 [[buffer(1)]],
  device float* out2 [[buffer(2)]],
  uint3 thread_position_in_threadgroup [[thread_position_in_threadgroup]],
  uint3 threadgroup_position_in_grid [[threadgroup_position_in_grid]]) {
    threadgroup float red1[4];
    threadgroup float part2[16];
    const int off0 = (((int)threadgroup_position_in_grid.x) * 4);
    if ((((int)thread_position_in_threadgroup.x) < 16)) {
        const int ix3 = (((int)thread_position_in_threadgroup.x) / 4);
        const int ix4 = (((int)thread_position_in_threadgroup.x) % 4);
        float acc5 = 0.0f;
        for (int k6 = ix4; k6 < 40; k6 += 4) {
            const int ad7 = (((off0 + ix3) * 40) + k6);
            const float ld8 = in1[ad7];
            const float ld9 = in0[ad7];
            const float x10 = (ld8 * ld9);
            acc5 = (acc5 + x10);
        }
        part2[((ix3 * 4) + ix4)] = acc5;
    }
    metal::threadgroup_barrier(metal::mem_flags::mem_threadgroup);
    if ((((int)thread_position_in_threadgroup.x) < 4)) {
        const int pb11 = (((int)thread_position_in_threadgroup.x) * 4);
        float acc12 = 0.0f;
        for (int l13 = 0; l13 < 4; l13++) {
            const float pv14 = part2[(pb11 + l13)];
            acc12 = (acc12 + pv14);
        }
        red1[((int)thread_position_in_threadgroup.x)] = acc12;
    }
    metal::threadgroup_barrier(metal::mem_flags::mem_threadgroup);
    if ((((int)thread_position_in_threadgroup.x) < 160)) {
        const int ix15 = (((int)thread_position_in_threadgroup.x) / 40);
        const int ix16 = (((int)thread_position_in_threadgroup.x) % 40);
        const int ad17 = (((off0 + ix15) * 40) + ix16);
        const float ld18 = in0[ad17];
        const float ld19 = in1[ad17];
        const float lv20 = red1[ix15];
        const float x21 = (ld19 - lv20);
        const float x22 = (ld18 * x21);
        out2[(((off0 + ix15) * 40) + ix16)] = x22;
    }
}
