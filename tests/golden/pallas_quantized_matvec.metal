[[kernel]] void pallas_quantized_matvec(
  const device float* in0 [[buffer(0)]],
  const device uint32_t* in1 [[buffer(1)]],
  const device float* in2 [[buffer(2)]],
  const device float* in3 [[buffer(3)]],
  device float* out4 [[buffer(4)]],
  uint3 thread_position_in_threadgroup [[thread_position_in_threadgroup]],
  uint3 threadgroup_position_in_grid [[threadgroup_position_in_grid]]) {
    threadgroup float red1[8];
    threadgroup float part2[256];
    const int off0 = (((int)threadgroup_position_in_grid.x) * 8);
    const int ix3 = (((int)thread_position_in_threadgroup.x) / 32);
    const int ix4 = (((int)thread_position_in_threadgroup.x) % 32);
    float acc5 = 0.0f;
    for (int t6 = 0; t6 < 1; t6++) {
        const int ri7 = (((t6 * 4) * 8) + ix4);
        const int ad8 = (((off0 + ix3) * 32) + ri7);
        const uint ld9 = in1[ad8];
        const uint x10 = (((uint)(0)) * 4u);
        const bool v11 = (x10 < 32u);
        const uint v12 = (v11 ? (ld9 >> ((uint)((v11 ? x10 : 0u)))) : 0u);
        const uint x13 = (v12 & 15u);
        const float x14 = ((float)(x13));
        const int ri15 = ((t6 * 4) + ((ix4 * 8) / 64));
        const int ad16 = (((off0 + ix3) * 4) + ri15);
        const float ld17 = in2[ad16];
        const float x18 = (x14 * ld17);
        const float ld19 = in3[ad16];
        const float x20 = (x18 + ld19);
        const int ri21 = ((t6 * 256) + (ix4 * 8));
        const float ld22 = in0[ri21];
        const float x23 = (x20 * ld22);
        acc5 = (acc5 + x23);
        const uint x24 = (((uint)(1)) * 4u);
        const bool v25 = (x24 < 32u);
        const uint v26 = (v25 ? (ld9 >> ((uint)((v25 ? x24 : 0u)))) : 0u);
        const uint x27 = (v26 & 15u);
        const float x28 = ((float)(x27));
        const float x29 = (x28 * ld17);
        const float x30 = (x29 + ld19);
        const int ri31 = (((t6 * 256) + (ix4 * 8)) + 1);
        const float ld32 = in0[ri31];
        const float x33 = (x30 * ld32);
        acc5 = (acc5 + x33);
        const uint x34 = (((uint)(2)) * 4u);
        const bool v35 = (x34 < 32u);
        const uint v36 = (v35 ? (ld9 >> ((uint)((v35 ? x34 : 0u)))) : 0u);
        const uint x37 = (v36 & 15u);
        const float x38 = ((float)(x37));
        const float x39 = (x38 * ld17);
        const float x40 = (x39 + ld19);
        const int ri41 = (((t6 * 256) + (ix4 * 8)) + 2);
        const float ld42 = in0[ri41];
        const float x43 = (x40 * ld42);
        acc5 = (acc5 + x43);
        const uint x44 = (((uint)(3)) * 4u);
        const bool v45 = (x44 < 32u);
        const uint v46 = (v45 ? (ld9 >> ((uint)((v45 ? x44 : 0u)))) : 0u);
        const uint x47 = (v46 & 15u);
        const float x48 = ((float)(x47));
        const float x49 = (x48 * ld17);
        const float x50 = (x49 + ld19);
        const int ri51 = (((t6 * 256) + (ix4 * 8)) + 3);
        const float ld52 = in0[ri51];
        const float x53 = (x50 * ld52);
        acc5 = (acc5 + x53);
        const uint x54 = (((uint)(4)) * 4u);
        const bool v55 = (x54 < 32u);
        const uint v56 = (v55 ? (ld9 >> ((uint)((v55 ? x54 : 0u)))) : 0u);
        const uint x57 = (v56 & 15u);
        const float x58 = ((float)(x57));
        const float x59 = (x58 * ld17);
        const float x60 = (x59 + ld19);
        const int ri61 = (((t6 * 256) + (ix4 * 8)) + 4);
        const float ld62 = in0[ri61];
        const float x63 = (x60 * ld62);
        acc5 = (acc5 + x63);
        const uint x64 = (((uint)(5)) * 4u);
        const bool v65 = (x64 < 32u);
        const uint v66 = (v65 ? (ld9 >> ((uint)((v65 ? x64 : 0u)))) : 0u);
        const uint x67 = (v66 & 15u);
        const float x68 = ((float)(x67));
        const float x69 = (x68 * ld17);
        const float x70 = (x69 + ld19);
        const int ri71 = (((t6 * 256) + (ix4 * 8)) + 5);
        const float ld72 = in0[ri71];
        const float x73 = (x70 * ld72);
        acc5 = (acc5 + x73);
        const uint x74 = (((uint)(6)) * 4u);
        const bool v75 = (x74 < 32u);
        const uint v76 = (v75 ? (ld9 >> ((uint)((v75 ? x74 : 0u)))) : 0u);
        const uint x77 = (v76 & 15u);
        const float x78 = ((float)(x77));
        const float x79 = (x78 * ld17);
        const float x80 = (x79 + ld19);
        const int ri81 = (((t6 * 256) + (ix4 * 8)) + 6);
        const float ld82 = in0[ri81];
        const float x83 = (x80 * ld82);
        acc5 = (acc5 + x83);
        const uint x84 = (((uint)(7)) * 4u);
        const bool v85 = (x84 < 32u);
        const uint v86 = (v85 ? (ld9 >> ((uint)((v85 ? x84 : 0u)))) : 0u);
        const uint x87 = (v86 & 15u);
        const float x88 = ((float)(x87));
        const float x89 = (x88 * ld17);
        const float x90 = (x89 + ld19);
        const int ri91 = (((t6 * 256) + (ix4 * 8)) + 7);
        const float ld92 = in0[ri91];
        const float x93 = (x90 * ld92);
        acc5 = (acc5 + x93);
    }
    part2[((ix3 * 32) + ix4)] = acc5;
    metal::threadgroup_barrier(metal::mem_flags::mem_threadgroup);
    if ((((int)thread_position_in_threadgroup.x) < 8)) {
        const int pb94 = (((int)thread_position_in_threadgroup.x) * 32);
        float acc95 = 0.0f;
        for (int l96 = 0; l96 < 32; l96++) {
            const float pv97 = part2[(pb94 + l96)];
            acc95 = (acc95 + pv97);
        }
        red1[((int)thread_position_in_threadgroup.x)] = acc95;
    }
    metal::threadgroup_barrier(metal::mem_flags::mem_threadgroup);
    if ((((int)thread_position_in_threadgroup.x) < 8)) {
        const float lv98 = red1[((int)thread_position_in_threadgroup.x)];
        out4[(off0 + ((int)thread_position_in_threadgroup.x))] = lv98;
    }
}
