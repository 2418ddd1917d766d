[[kernel]] void pallas_matmul(
  const device float* in0 [[buffer(0)]],
  const device float* in1 [[buffer(1)]],
  device float* out2 [[buffer(2)]],
  uint3 thread_position_in_threadgroup [[thread_position_in_threadgroup]],
  uint3 threadgroup_position_in_grid [[threadgroup_position_in_grid]]) {
    threadgroup float ta9[256];
    threadgroup float tb14[256];
    threadgroup float dot19[256];
    const int pid0 = (((int)threadgroup_position_in_grid.x) / 2);
    const int pid1 = (((int)threadgroup_position_in_grid.x) % 2);
    for (int step2 = 0; step2 < 3; step2++) {
        const int off3 = (pid0 * 16);
        const int off4 = (step2 * 16);
        const int off5 = (pid1 * 16);
        const bool x6 = (step2 == 0);
        if (x6) {
            const int ix7 = (((int)thread_position_in_threadgroup.x) / 16);
            const int ix8 = (((int)thread_position_in_threadgroup.x) % 16);
            out2[(((off3 + ix7) * 32) + (off5 + ix8))] = 0.0f;
        }
        metal::threadgroup_barrier(metal::mem_flags::mem_device | metal::mem_flags::mem_threadgroup);
        const int ix10 = (((int)thread_position_in_threadgroup.x) / 16);
        const int ix11 = (((int)thread_position_in_threadgroup.x) % 16);
        const int ad12 = (((off3 + ix10) * 48) + (off4 + ix11));
        const float ld13 = in0[ad12];
        ta9[((ix10 * 16) + ix11)] = ld13;
        const int ix15 = (((int)thread_position_in_threadgroup.x) / 16);
        const int ix16 = (((int)thread_position_in_threadgroup.x) % 16);
        const int ad17 = (((off4 + ix15) * 32) + (off5 + ix16));
        const float ld18 = in1[ad17];
        tb14[((ix15 * 16) + ix16)] = ld18;
        metal::threadgroup_barrier(metal::mem_flags::mem_threadgroup);
        const int ix20 = (((int)thread_position_in_threadgroup.x) / 16);
        const int ix21 = (((int)thread_position_in_threadgroup.x) % 16);
        float acc22 = 0.0f;
        for (int k23 = 0; k23 < 16; k23++) {
            const float lv24 = ta9[((ix20 * 16) + k23)];
            const float lv25 = tb14[((k23 * 16) + ix21)];
            acc22 = (acc22 + (lv24 * lv25));
        }
        dot19[((ix20 * 16) + ix21)] = acc22;
        metal::threadgroup_barrier(metal::mem_flags::mem_threadgroup);
        const int ix26 = (((int)thread_position_in_threadgroup.x) / 16);
        const int ix27 = (((int)thread_position_in_threadgroup.x) % 16);
        const int ad28 = (((off3 + ix26) * 32) + (off5 + ix27));
        const float ld29 = out2[ad28];
        const float lv30 = dot19[((ix26 * 16) + ix27)];
        const float x31 = (ld29 + lv30);
        out2[(((off3 + ix26) * 32) + (off5 + ix27))] = x31;
        metal::threadgroup_barrier(metal::mem_flags::mem_device | metal::mem_flags::mem_threadgroup);
    }
}
