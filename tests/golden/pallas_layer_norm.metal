[[kernel]] void pallas_layer_norm(
  const device float* in0 [[buffer(0)]],
  const device float* in1 [[buffer(1)]],
  const device float* in2 [[buffer(2)]],
  device float* out3 [[buffer(3)]],
  uint3 thread_position_in_threadgroup [[thread_position_in_threadgroup]],
  uint3 threadgroup_position_in_grid [[threadgroup_position_in_grid]]) {
    threadgroup float red1[8];
    threadgroup float part2[32];
    threadgroup float red17[8];
    threadgroup float part18[32];
    const int off0 = (((int)threadgroup_position_in_grid.x) * 8);
    for (int s3 = 0; s3 < 1; s3++) {
        const int e4 = ((s3 * 256) + ((int)thread_position_in_threadgroup.x));
        if ((e4 < 32)) {
            const int ix5 = (e4 / 4);
            const int ix6 = (e4 % 4);
            float acc7 = 0.0f;
            for (int k8 = ix6; k8 < 48; k8 += 4) {
                const int ad9 = (((off0 + ix5) * 48) + k8);
                const float ld10 = in0[ad9];
                acc7 = (acc7 + ld10);
            }
            part2[((ix5 * 4) + ix6)] = acc7;
        }
    }
    metal::threadgroup_barrier(metal::mem_flags::mem_threadgroup);
    for (int s11 = 0; s11 < 1; s11++) {
        const int e12 = ((s11 * 256) + ((int)thread_position_in_threadgroup.x));
        if ((e12 < 8)) {
            const int pb13 = (e12 * 4);
            float acc14 = 0.0f;
            for (int l15 = 0; l15 < 4; l15++) {
                const float pv16 = part2[(pb13 + l15)];
                acc14 = (acc14 + pv16);
            }
            red1[e12] = acc14;
        }
    }
    metal::threadgroup_barrier(metal::mem_flags::mem_threadgroup);
    for (int s19 = 0; s19 < 1; s19++) {
        const int e20 = ((s19 * 256) + ((int)thread_position_in_threadgroup.x));
        if ((e20 < 32)) {
            const int ix21 = (e20 / 4);
            const int ix22 = (e20 % 4);
            float acc23 = 0.0f;
            for (int k24 = ix22; k24 < 48; k24 += 4) {
                const int ad25 = (((off0 + ix21) * 48) + k24);
                const float ld26 = in0[ad25];
                const float lv27 = red1[ix21];
                const float x28 = (lv27 / 48.0f);
                const float x29 = (ld26 - x28);
                const float lv30 = red1[ix21];
                const float x31 = (lv30 / 48.0f);
                const float x32 = (ld26 - x31);
                const float x33 = (x29 * x32);
                acc23 = (acc23 + x33);
            }
            part18[((ix21 * 4) + ix22)] = acc23;
        }
    }
    metal::threadgroup_barrier(metal::mem_flags::mem_threadgroup);
    for (int s34 = 0; s34 < 1; s34++) {
        const int e35 = ((s34 * 256) + ((int)thread_position_in_threadgroup.x));
        if ((e35 < 8)) {
            const int pb36 = (e35 * 4);
            float acc37 = 0.0f;
            for (int l38 = 0; l38 < 4; l38++) {
                const float pv39 = part18[(pb36 + l38)];
                acc37 = (acc37 + pv39);
            }
            red17[e35] = acc37;
        }
    }
    metal::threadgroup_barrier(metal::mem_flags::mem_threadgroup);
    for (int s40 = 0; s40 < 2; s40++) {
        const int e41 = ((s40 * 256) + ((int)thread_position_in_threadgroup.x));
        if ((e41 < 384)) {
            const int ix42 = (e41 / 48);
            const int ix43 = (e41 % 48);
            const int ad44 = (((off0 + ix42) * 48) + ix43);
            const float ld45 = in0[ad44];
            const float lv46 = red1[ix42];
            const float x47 = (lv46 / 48.0f);
            const float x48 = (ld45 - x47);
            const float lv49 = red17[ix42];
            const float x50 = (lv49 / 48.0f);
            const float x51 = (x50 + 1e-05f);
            const float x52 = metal::rsqrt(x51);
            const float x53 = (x48 * x52);
            const float ld54 = in1[ix43];
            const float x55 = (x53 * ld54);
            const float ld56 = in2[ix43];
            const float x57 = (x55 + ld56);
            out3[(((off0 + ix42) * 48) + ix43)] = x57;
        }
    }
    metal::threadgroup_barrier(metal::mem_flags::mem_device | metal::mem_flags::mem_threadgroup);
}
