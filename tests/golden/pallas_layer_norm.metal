[[kernel]] void pallas_layer_norm(
  const device float* in0 [[buffer(0)]],
  const device float* in1 [[buffer(1)]],
  const device float* in2 [[buffer(2)]],
  device float* out3 [[buffer(3)]],
  uint3 thread_position_in_threadgroup [[thread_position_in_threadgroup]],
  uint3 threadgroup_position_in_grid [[threadgroup_position_in_grid]]) {
    threadgroup float red1[8];
    threadgroup float part2[32];
    threadgroup float red13[8];
    threadgroup float part14[32];
    const int off0 = (((int)threadgroup_position_in_grid.x) * 8);
    if ((((int)thread_position_in_threadgroup.x) < 32)) {
        const int ix3 = (((int)thread_position_in_threadgroup.x) / 4);
        const int ix4 = (((int)thread_position_in_threadgroup.x) % 4);
        float acc5 = 0.0f;
        for (int k6 = ix4; k6 < 48; k6 += 4) {
            const int ad7 = (((off0 + ix3) * 48) + k6);
            const float ld8 = in0[ad7];
            acc5 = (acc5 + ld8);
        }
        part2[((ix3 * 4) + ix4)] = acc5;
    }
    metal::threadgroup_barrier(metal::mem_flags::mem_threadgroup);
    if ((((int)thread_position_in_threadgroup.x) < 8)) {
        const int pb9 = (((int)thread_position_in_threadgroup.x) * 4);
        float acc10 = 0.0f;
        for (int l11 = 0; l11 < 4; l11++) {
            const float pv12 = part2[(pb9 + l11)];
            acc10 = (acc10 + pv12);
        }
        red1[((int)thread_position_in_threadgroup.x)] = acc10;
    }
    metal::threadgroup_barrier(metal::mem_flags::mem_threadgroup);
    if ((((int)thread_position_in_threadgroup.x) < 32)) {
        const int ix15 = (((int)thread_position_in_threadgroup.x) / 4);
        const int ix16 = (((int)thread_position_in_threadgroup.x) % 4);
        float acc17 = 0.0f;
        for (int k18 = ix16; k18 < 48; k18 += 4) {
            const int ad19 = (((off0 + ix15) * 48) + k18);
            const float ld20 = in0[ad19];
            const float lv21 = red1[ix15];
            const float x22 = (lv21 / 48.0f);
            const float x23 = (ld20 - x22);
            const float lv24 = red1[ix15];
            const float x25 = (lv24 / 48.0f);
            const float x26 = (ld20 - x25);
            const float x27 = (x23 * x26);
            acc17 = (acc17 + x27);
        }
        part14[((ix15 * 4) + ix16)] = acc17;
    }
    metal::threadgroup_barrier(metal::mem_flags::mem_threadgroup);
    if ((((int)thread_position_in_threadgroup.x) < 8)) {
        const int pb28 = (((int)thread_position_in_threadgroup.x) * 4);
        float acc29 = 0.0f;
        for (int l30 = 0; l30 < 4; l30++) {
            const float pv31 = part14[(pb28 + l30)];
            acc29 = (acc29 + pv31);
        }
        red13[((int)thread_position_in_threadgroup.x)] = acc29;
    }
    metal::threadgroup_barrier(metal::mem_flags::mem_threadgroup);
    for (int s32 = 0; s32 < 2; s32++) {
        const int e33 = ((s32 * 256) + ((int)thread_position_in_threadgroup.x));
        if ((e33 < 384)) {
            const int ix34 = (e33 / 48);
            const int ix35 = (e33 % 48);
            const int ad36 = (((off0 + ix34) * 48) + ix35);
            const float ld37 = in0[ad36];
            const float lv38 = red1[ix34];
            const float x39 = (lv38 / 48.0f);
            const float x40 = (ld37 - x39);
            const float lv41 = red13[ix34];
            const float x42 = (lv41 / 48.0f);
            const float x43 = (x42 + 1e-05f);
            const float x44 = metal::rsqrt(x43);
            const float x45 = (x40 * x44);
            const float ld46 = in1[ix35];
            const float x47 = (x45 * ld46);
            const float ld48 = in2[ix35];
            const float x49 = (x47 + ld48);
            out3[(((off0 + ix34) * 48) + ix35)] = x49;
        }
    }
}
