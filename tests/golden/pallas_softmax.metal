[[kernel]] void pallas_softmax(
  const device float* in0 [[buffer(0)]],
  device float* out1 [[buffer(1)]],
  uint3 thread_position_in_threadgroup [[thread_position_in_threadgroup]],
  uint3 threadgroup_position_in_grid [[threadgroup_position_in_grid]]) {
    threadgroup float red1[4];
    threadgroup float part2[16];
    threadgroup float red17[4];
    threadgroup float part18[16];
    const int off0 = (((int)threadgroup_position_in_grid.x) * 4);
    for (int s3 = 0; s3 < 1; s3++) {
        const int e4 = ((s3 * 256) + ((int)thread_position_in_threadgroup.x));
        if ((e4 < 16)) {
            const int ix5 = (e4 / 4);
            const int ix6 = (e4 % 4);
            float acc7 = (-(float)INFINITY);
            for (int k8 = ix6; k8 < 40; k8 += 4) {
                const int ad9 = (((off0 + ix5) * 40) + k8);
                const float ld10 = in0[ad9];
                acc7 = ((((acc7 > ld10) && (!((as_type<uint>(ld10) & 2147483647u) > 2139095040u))) || ((as_type<uint>(acc7) & 2147483647u) > 2139095040u)) ? acc7 : ld10);
            }
            part2[((ix5 * 4) + ix6)] = acc7;
        }
    }
    metal::threadgroup_barrier(metal::mem_flags::mem_threadgroup);
    for (int s11 = 0; s11 < 1; s11++) {
        const int e12 = ((s11 * 256) + ((int)thread_position_in_threadgroup.x));
        if ((e12 < 4)) {
            const int pb13 = (e12 * 4);
            float acc14 = (-(float)INFINITY);
            for (int l15 = 0; l15 < 4; l15++) {
                const float pv16 = part2[(pb13 + l15)];
                acc14 = ((((acc14 > pv16) && (!((as_type<uint>(pv16) & 2147483647u) > 2139095040u))) || ((as_type<uint>(acc14) & 2147483647u) > 2139095040u)) ? acc14 : pv16);
            }
            red1[e12] = acc14;
        }
    }
    metal::threadgroup_barrier(metal::mem_flags::mem_threadgroup);
    for (int s19 = 0; s19 < 1; s19++) {
        const int e20 = ((s19 * 256) + ((int)thread_position_in_threadgroup.x));
        if ((e20 < 16)) {
            const int ix21 = (e20 / 4);
            const int ix22 = (e20 % 4);
            float acc23 = 0.0f;
            for (int k24 = ix22; k24 < 40; k24 += 4) {
                const int ad25 = (((off0 + ix21) * 40) + k24);
                const float ld26 = in0[ad25];
                const float lv27 = red1[ix21];
                const float x28 = (ld26 - lv27);
                const float x29 = metal::exp(x28);
                acc23 = (acc23 + x29);
            }
            part18[((ix21 * 4) + ix22)] = acc23;
        }
    }
    metal::threadgroup_barrier(metal::mem_flags::mem_threadgroup);
    for (int s30 = 0; s30 < 1; s30++) {
        const int e31 = ((s30 * 256) + ((int)thread_position_in_threadgroup.x));
        if ((e31 < 4)) {
            const int pb32 = (e31 * 4);
            float acc33 = 0.0f;
            for (int l34 = 0; l34 < 4; l34++) {
                const float pv35 = part18[(pb32 + l34)];
                acc33 = (acc33 + pv35);
            }
            red17[e31] = acc33;
        }
    }
    metal::threadgroup_barrier(metal::mem_flags::mem_threadgroup);
    for (int s36 = 0; s36 < 1; s36++) {
        const int e37 = ((s36 * 256) + ((int)thread_position_in_threadgroup.x));
        if ((e37 < 160)) {
            const int ix38 = (e37 / 40);
            const int ix39 = (e37 % 40);
            const int ad40 = (((off0 + ix38) * 40) + ix39);
            const float ld41 = in0[ad40];
            const float lv42 = red1[ix38];
            const float x43 = (ld41 - lv42);
            const float x44 = metal::exp(x43);
            const float lv45 = red17[ix38];
            const float x46 = (x44 / lv45);
            out1[(((off0 + ix38) * 40) + ix39)] = x46;
        }
    }
    metal::threadgroup_barrier(metal::mem_flags::mem_device | metal::mem_flags::mem_threadgroup);
}
