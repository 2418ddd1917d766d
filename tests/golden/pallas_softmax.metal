[[kernel]] void pallas_softmax(
  const device float* in0 [[buffer(0)]],
  device float* out1 [[buffer(1)]],
  uint3 thread_position_in_threadgroup [[thread_position_in_threadgroup]],
  uint3 threadgroup_position_in_grid [[threadgroup_position_in_grid]]) {
    threadgroup float red1[4];
    threadgroup float part2[16];
    threadgroup float red13[4];
    threadgroup float part14[16];
    const int off0 = (((int)threadgroup_position_in_grid.x) * 4);
    if ((((int)thread_position_in_threadgroup.x) < 16)) {
        const int ix3 = (((int)thread_position_in_threadgroup.x) / 4);
        const int ix4 = (((int)thread_position_in_threadgroup.x) % 4);
        float acc5 = (-(float)INFINITY);
        for (int k6 = ix4; k6 < 40; k6 += 4) {
            const int ad7 = (((off0 + ix3) * 40) + k6);
            const float ld8 = in0[ad7];
            acc5 = ((((acc5 > ld8) && (!((as_type<uint>(ld8) & 2147483647u) > 2139095040u))) || ((as_type<uint>(acc5) & 2147483647u) > 2139095040u)) ? acc5 : ld8);
        }
        part2[((ix3 * 4) + ix4)] = acc5;
    }
    metal::threadgroup_barrier(metal::mem_flags::mem_threadgroup);
    if ((((int)thread_position_in_threadgroup.x) < 4)) {
        const int pb9 = (((int)thread_position_in_threadgroup.x) * 4);
        float acc10 = (-(float)INFINITY);
        for (int l11 = 0; l11 < 4; l11++) {
            const float pv12 = part2[(pb9 + l11)];
            acc10 = ((((acc10 > pv12) && (!((as_type<uint>(pv12) & 2147483647u) > 2139095040u))) || ((as_type<uint>(acc10) & 2147483647u) > 2139095040u)) ? acc10 : pv12);
        }
        red1[((int)thread_position_in_threadgroup.x)] = acc10;
    }
    metal::threadgroup_barrier(metal::mem_flags::mem_threadgroup);
    if ((((int)thread_position_in_threadgroup.x) < 16)) {
        const int ix15 = (((int)thread_position_in_threadgroup.x) / 4);
        const int ix16 = (((int)thread_position_in_threadgroup.x) % 4);
        float acc17 = 0.0f;
        for (int k18 = ix16; k18 < 40; k18 += 4) {
            const int ad19 = (((off0 + ix15) * 40) + k18);
            const float ld20 = in0[ad19];
            const float lv21 = red1[ix15];
            const float x22 = (ld20 - lv21);
            const float x23 = metal::exp(x22);
            acc17 = (acc17 + x23);
        }
        part14[((ix15 * 4) + ix16)] = acc17;
    }
    metal::threadgroup_barrier(metal::mem_flags::mem_threadgroup);
    if ((((int)thread_position_in_threadgroup.x) < 4)) {
        const int pb24 = (((int)thread_position_in_threadgroup.x) * 4);
        float acc25 = 0.0f;
        for (int l26 = 0; l26 < 4; l26++) {
            const float pv27 = part14[(pb24 + l26)];
            acc25 = (acc25 + pv27);
        }
        red13[((int)thread_position_in_threadgroup.x)] = acc25;
    }
    metal::threadgroup_barrier(metal::mem_flags::mem_threadgroup);
    if ((((int)thread_position_in_threadgroup.x) < 160)) {
        const int ix28 = (((int)thread_position_in_threadgroup.x) / 40);
        const int ix29 = (((int)thread_position_in_threadgroup.x) % 40);
        const int ad30 = (((off0 + ix28) * 40) + ix29);
        const float ld31 = in0[ad30];
        const float lv32 = red1[ix28];
        const float x33 = (ld31 - lv32);
        const float x34 = metal::exp(x33);
        const float lv35 = red13[ix28];
        const float x36 = (x34 / lv35);
        out1[(((off0 + ix28) * 40) + ix29)] = x36;
    }
}
