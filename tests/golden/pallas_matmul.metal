[[kernel]] void pallas_matmul(
  const device float* in0 [[buffer(0)]],
  const device float* in1 [[buffer(1)]],
  device float* out2 [[buffer(2)]],
  uint3 thread_position_in_threadgroup [[thread_position_in_threadgroup]],
  uint3 threadgroup_position_in_grid [[threadgroup_position_in_grid]]) {
    threadgroup float ta11[256];
    threadgroup float tb18[256];
    threadgroup float dot25[256];
    const int pid0 = (((int)threadgroup_position_in_grid.x) / 6);
    const int pid1 = ((((int)threadgroup_position_in_grid.x) / 3) % 2);
    const int pid2 = (((int)threadgroup_position_in_grid.x) % 3);
    const int off3 = (pid0 * 16);
    const int off4 = (pid2 * 16);
    const int off5 = (pid1 * 16);
    const bool x6 = (pid2 == 0);
    if (x6) {
        for (int s7 = 0; s7 < 1; s7++) {
            const int e8 = ((s7 * 256) + ((int)thread_position_in_threadgroup.x));
            if ((e8 < 256)) {
                const int ix9 = (e8 / 16);
                const int ix10 = (e8 % 16);
                out2[(((off3 + ix9) * 32) + (off5 + ix10))] = 0.0f;
            }
        }
        metal::threadgroup_barrier(metal::mem_flags::mem_device | metal::mem_flags::mem_threadgroup);
    }
    metal::threadgroup_barrier(metal::mem_flags::mem_device | metal::mem_flags::mem_threadgroup);
    for (int s12 = 0; s12 < 1; s12++) {
        const int e13 = ((s12 * 256) + ((int)thread_position_in_threadgroup.x));
        if ((e13 < 256)) {
            const int ix14 = (e13 / 16);
            const int ix15 = (e13 % 16);
            const int ad16 = (((off3 + ix14) * 48) + (off4 + ix15));
            const float ld17 = in0[ad16];
            ta11[((ix14 * 16) + ix15)] = ld17;
        }
    }
    metal::threadgroup_barrier(metal::mem_flags::mem_threadgroup);
    for (int s19 = 0; s19 < 1; s19++) {
        const int e20 = ((s19 * 256) + ((int)thread_position_in_threadgroup.x));
        if ((e20 < 256)) {
            const int ix21 = (e20 / 16);
            const int ix22 = (e20 % 16);
            const int ad23 = (((off4 + ix21) * 32) + (off5 + ix22));
            const float ld24 = in1[ad23];
            tb18[((ix21 * 16) + ix22)] = ld24;
        }
    }
    metal::threadgroup_barrier(metal::mem_flags::mem_threadgroup);
    for (int s26 = 0; s26 < 1; s26++) {
        const int e27 = ((s26 * 256) + ((int)thread_position_in_threadgroup.x));
        if ((e27 < 256)) {
            const int ix28 = (e27 / 16);
            const int ix29 = (e27 % 16);
            float acc30 = 0.0f;
            for (int k31 = 0; k31 < 16; k31++) {
                const float lv32 = ta11[((ix28 * 16) + k31)];
                const float lv33 = tb18[((k31 * 16) + ix29)];
                acc30 = (acc30 + (lv32 * lv33));
            }
            dot25[((ix28 * 16) + ix29)] = acc30;
        }
    }
    metal::threadgroup_barrier(metal::mem_flags::mem_threadgroup);
    for (int s34 = 0; s34 < 1; s34++) {
        const int e35 = ((s34 * 256) + ((int)thread_position_in_threadgroup.x));
        if ((e35 < 256)) {
            const int ix36 = (e35 / 16);
            const int ix37 = (e35 % 16);
            const int ad38 = (((off3 + ix36) * 32) + (off5 + ix37));
            const float ld39 = out2[ad38];
            const float lv40 = dot25[((ix36 * 16) + ix37)];
            const float x41 = (ld39 + lv40);
            out2[(((off3 + ix36) * 32) + (off5 + ix37))] = x41;
        }
    }
    metal::threadgroup_barrier(metal::mem_flags::mem_device | metal::mem_flags::mem_threadgroup);
}
