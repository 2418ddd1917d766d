[[kernel]] void pallas_flash_attention(
  const device float* in0 [[buffer(0)]],
  const device float* in1 [[buffer(1)]],
  const device float* in2 [[buffer(2)]],
  device float* out3 [[buffer(3)]],
  uint3 thread_position_in_threadgroup [[thread_position_in_threadgroup]],
  uint3 threadgroup_position_in_grid [[threadgroup_position_in_grid]]) {
    threadgroup float carry3[16];
    threadgroup float carry4[16];
    threadgroup float carry5[128];
    threadgroup float ta29[128];
    threadgroup float tb35[128];
    threadgroup float dot42[256];
    threadgroup float red49[16];
    threadgroup float part50[32];
    threadgroup float red66[16];
    threadgroup float part67[32];
    threadgroup float ta88[256];
    threadgroup float tb103[128];
    threadgroup float dot110[128];
    float pc117[1];
    float pc121[1];
    float pc132[1];
    const int pid0 = (((int)threadgroup_position_in_grid.x) / 2);
    const int pid1 = (((int)threadgroup_position_in_grid.x) % 2);
    const int off2 = (pid1 * 16);
    if ((((int)thread_position_in_threadgroup.x) < 16)) {
        carry3[((int)thread_position_in_threadgroup.x)] = (-(float)INFINITY);
    }
    if ((((int)thread_position_in_threadgroup.x) < 16)) {
        carry4[((int)thread_position_in_threadgroup.x)] = 0.0f;
    }
    if ((((int)thread_position_in_threadgroup.x) < 128)) {
        const int ix6 = (((int)thread_position_in_threadgroup.x) / 8);
        const int ix7 = (((int)thread_position_in_threadgroup.x) % 8);
        carry5[((ix6 * 8) + ix7)] = 0.0f;
    }
    metal::threadgroup_barrier(metal::mem_flags::mem_threadgroup);
    const int x8 = as_type<int>((as_type<uint>(pid1) + 1u));
    const int x9 = as_type<int>((as_type<uint>(x8) * 16u));
    const int x10 = as_type<int>((as_type<uint>(x9) + 16u));
    const int x11 = as_type<int>((as_type<uint>(x10) - 1u));
    const bool v12 = ((16 == 0) || (16 == (-1)));
    const int v13 = (v12 ? 1 : 16);
    const int x14 = (v12 ? 0 : (x11 % v13));
    const bool x15 = (x14 != 0);
    const bool x16 = (x14 < 0);
    const bool x17 = (x16 != false);
    const bool x18 = (x15 && x17);
    const bool v19 = (16 == 0);
    const bool v20 = (16 == (-1));
    const int v21 = ((v19 || v20) ? 1 : 16);
    const int v22 = (x11 / v21);
    const int v23 = as_type<int>((0u - as_type<uint>(x11)));
    const int x24 = (v19 ? 0 : (v20 ? v23 : v22));
    const int x25 = as_type<int>((as_type<uint>(x24) - 1u));
    const int x26 = (x18 ? x25 : x24);
    for (int it27 = 0; it27 < x26; it27++) {
        if ((((int)thread_position_in_threadgroup.x) < 128)) {
            const int ix30 = (((int)thread_position_in_threadgroup.x) / 8);
            const int ix31 = (((int)thread_position_in_threadgroup.x) % 8);
            const int ad32 = (((pid0 * 256) + ((off2 + ix30) * 8)) + ix31);
            const float ld33 = in0[ad32];
            const float x34 = (ld33 * 0.35355338f);
            ta29[((ix30 * 8) + ix31)] = x34;
        }
        metal::threadgroup_barrier(metal::mem_flags::mem_threadgroup);
        if ((((int)thread_position_in_threadgroup.x) < 128)) {
            const int ix36 = (((int)thread_position_in_threadgroup.x) / 16);
            const int ix37 = (((int)thread_position_in_threadgroup.x) % 16);
            const int x38 = as_type<int>((as_type<uint>(it27) * 16u));
            const int ri39 = (x38 + ix37);
            const int ad40 = (((pid0 * 256) + (ri39 * 8)) + ix36);
            const float ld41 = in1[ad40];
            tb35[((ix36 * 16) + ix37)] = ld41;
        }
        metal::threadgroup_barrier(metal::mem_flags::mem_threadgroup);
        const int ix43 = (((int)thread_position_in_threadgroup.x) / 16);
        const int ix44 = (((int)thread_position_in_threadgroup.x) % 16);
        float acc45 = 0.0f;
        for (int k46 = 0; k46 < 8; k46++) {
            const float lv47 = ta29[((ix43 * 8) + k46)];
            const float lv48 = tb35[((k46 * 16) + ix44)];
            acc45 = (acc45 + (lv47 * lv48));
        }
        dot42[((ix43 * 16) + ix44)] = acc45;
        metal::threadgroup_barrier(metal::mem_flags::mem_threadgroup);
        if ((((int)thread_position_in_threadgroup.x) < 32)) {
            const int ix51 = (((int)thread_position_in_threadgroup.x) / 2);
            const int ix52 = (((int)thread_position_in_threadgroup.x) % 2);
            float acc53 = (-(float)INFINITY);
            for (int k54 = ix52; k54 < 16; k54 += 2) {
                const int x55 = as_type<int>((as_type<uint>(pid1) * 16u));
                const int x56 = as_type<int>((as_type<uint>(x55) + as_type<uint>(ix51)));
                const int x57 = as_type<int>((as_type<uint>(it27) * 16u));
                const int x58 = as_type<int>((as_type<uint>(x57) + as_type<uint>(k54)));
                const bool x59 = (x56 >= x58);
                const float lv60 = dot42[((ix51 * 16) + k54)];
                const float x61 = (x59 ? lv60 : (-(float)INFINITY));
                acc53 = ((((acc53 > x61) && (!((as_type<uint>(x61) & 2147483647u) > 2139095040u))) || ((as_type<uint>(acc53) & 2147483647u) > 2139095040u)) ? acc53 : x61);
            }
            part50[((ix51 * 2) + ix52)] = acc53;
        }
        metal::threadgroup_barrier(metal::mem_flags::mem_threadgroup);
        if ((((int)thread_position_in_threadgroup.x) < 16)) {
            const int pb62 = (((int)thread_position_in_threadgroup.x) * 2);
            float acc63 = (-(float)INFINITY);
            for (int l64 = 0; l64 < 2; l64++) {
                const float pv65 = part50[(pb62 + l64)];
                acc63 = ((((acc63 > pv65) && (!((as_type<uint>(pv65) & 2147483647u) > 2139095040u))) || ((as_type<uint>(acc63) & 2147483647u) > 2139095040u)) ? acc63 : pv65);
            }
            red49[((int)thread_position_in_threadgroup.x)] = acc63;
        }
        metal::threadgroup_barrier(metal::mem_flags::mem_threadgroup);
        if ((((int)thread_position_in_threadgroup.x) < 32)) {
            const int ix68 = (((int)thread_position_in_threadgroup.x) / 2);
            const int ix69 = (((int)thread_position_in_threadgroup.x) % 2);
            float acc70 = 0.0f;
            for (int k71 = ix69; k71 < 16; k71 += 2) {
                const int x72 = as_type<int>((as_type<uint>(pid1) * 16u));
                const int x73 = as_type<int>((as_type<uint>(x72) + as_type<uint>(ix68)));
                const int x74 = as_type<int>((as_type<uint>(it27) * 16u));
                const int x75 = as_type<int>((as_type<uint>(x74) + as_type<uint>(k71)));
                const bool x76 = (x73 >= x75);
                const float lv77 = dot42[((ix68 * 16) + k71)];
                const float x78 = (x76 ? lv77 : (-(float)INFINITY));
                const float lv79 = carry3[ix68];
                const float lv80 = red49[ix68];
                const float x81 = ((((lv79 > lv80) && (!((as_type<uint>(lv80) & 2147483647u) > 2139095040u))) || ((as_type<uint>(lv79) & 2147483647u) > 2139095040u)) ? lv79 : lv80);
                const float x82 = (x78 - x81);
                const float x83 = metal::exp(x82);
                acc70 = (acc70 + x83);
            }
            part67[((ix68 * 2) + ix69)] = acc70;
        }
        metal::threadgroup_barrier(metal::mem_flags::mem_threadgroup);
        if ((((int)thread_position_in_threadgroup.x) < 16)) {
            const int pb84 = (((int)thread_position_in_threadgroup.x) * 2);
            float acc85 = 0.0f;
            for (int l86 = 0; l86 < 2; l86++) {
                const float pv87 = part67[(pb84 + l86)];
                acc85 = (acc85 + pv87);
            }
            red66[((int)thread_position_in_threadgroup.x)] = acc85;
        }
        const int ix89 = (((int)thread_position_in_threadgroup.x) / 16);
        const int ix90 = (((int)thread_position_in_threadgroup.x) % 16);
        const int x91 = as_type<int>((as_type<uint>(pid1) * 16u));
        const int x92 = as_type<int>((as_type<uint>(x91) + as_type<uint>(ix89)));
        const int x93 = as_type<int>((as_type<uint>(it27) * 16u));
        const int x94 = as_type<int>((as_type<uint>(x93) + as_type<uint>(ix90)));
        const bool x95 = (x92 >= x94);
        const float lv96 = dot42[((ix89 * 16) + ix90)];
        const float x97 = (x95 ? lv96 : (-(float)INFINITY));
        const float lv98 = carry3[ix89];
        const float lv99 = red49[ix89];
        const float x100 = ((((lv98 > lv99) && (!((as_type<uint>(lv99) & 2147483647u) > 2139095040u))) || ((as_type<uint>(lv98) & 2147483647u) > 2139095040u)) ? lv98 : lv99);
        const float x101 = (x97 - x100);
        const float x102 = metal::exp(x101);
        ta88[((ix89 * 16) + ix90)] = x102;
        if ((((int)thread_position_in_threadgroup.x) < 128)) {
            const int ix104 = (((int)thread_position_in_threadgroup.x) / 8);
            const int ix105 = (((int)thread_position_in_threadgroup.x) % 8);
            const int x106 = as_type<int>((as_type<uint>(it27) * 16u));
            const int ri107 = (x106 + ix104);
            const int ad108 = (((pid0 * 256) + (ri107 * 8)) + ix105);
            const float ld109 = in2[ad108];
            tb103[((ix104 * 8) + ix105)] = ld109;
        }
        metal::threadgroup_barrier(metal::mem_flags::mem_threadgroup);
        if ((((int)thread_position_in_threadgroup.x) < 128)) {
            const int ix111 = (((int)thread_position_in_threadgroup.x) / 8);
            const int ix112 = (((int)thread_position_in_threadgroup.x) % 8);
            float acc113 = 0.0f;
            for (int k114 = 0; k114 < 16; k114++) {
                const float lv115 = ta88[((ix111 * 16) + k114)];
                const float lv116 = tb103[((k114 * 8) + ix112)];
                acc113 = (acc113 + (lv115 * lv116));
            }
            dot110[((ix111 * 8) + ix112)] = acc113;
        }
        metal::threadgroup_barrier(metal::mem_flags::mem_threadgroup);
        if ((((int)thread_position_in_threadgroup.x) < 16)) {
            const float lv118 = carry3[((int)thread_position_in_threadgroup.x)];
            const float lv119 = red49[((int)thread_position_in_threadgroup.x)];
            const float x120 = ((((lv118 > lv119) && (!((as_type<uint>(lv119) & 2147483647u) > 2139095040u))) || ((as_type<uint>(lv118) & 2147483647u) > 2139095040u)) ? lv118 : lv119);
            pc117[0] = x120;
        }
        if ((((int)thread_position_in_threadgroup.x) < 16)) {
            const float lv122 = carry4[((int)thread_position_in_threadgroup.x)];
            const float lv123 = carry3[((int)thread_position_in_threadgroup.x)];
            const float lv124 = carry3[((int)thread_position_in_threadgroup.x)];
            const float lv125 = red49[((int)thread_position_in_threadgroup.x)];
            const float x126 = ((((lv124 > lv125) && (!((as_type<uint>(lv125) & 2147483647u) > 2139095040u))) || ((as_type<uint>(lv124) & 2147483647u) > 2139095040u)) ? lv124 : lv125);
            const float x127 = (lv123 - x126);
            const float x128 = metal::exp(x127);
            const float x129 = (lv122 * x128);
            const float lv130 = red66[((int)thread_position_in_threadgroup.x)];
            const float x131 = (x129 + lv130);
            pc121[0] = x131;
        }
        if ((((int)thread_position_in_threadgroup.x) < 128)) {
            const int ix133 = (((int)thread_position_in_threadgroup.x) / 8);
            const int ix134 = (((int)thread_position_in_threadgroup.x) % 8);
            const float lv135 = carry5[((ix133 * 8) + ix134)];
            const float lv136 = carry3[ix133];
            const float lv137 = carry3[ix133];
            const float lv138 = red49[ix133];
            const float x139 = ((((lv137 > lv138) && (!((as_type<uint>(lv138) & 2147483647u) > 2139095040u))) || ((as_type<uint>(lv137) & 2147483647u) > 2139095040u)) ? lv137 : lv138);
            const float x140 = (lv136 - x139);
            const float x141 = metal::exp(x140);
            const float x142 = (lv135 * x141);
            const float lv143 = dot110[((ix133 * 8) + ix134)];
            const float x144 = (x142 + lv143);
            pc132[0] = x144;
        }
        metal::threadgroup_barrier(metal::mem_flags::mem_threadgroup);
        if ((((int)thread_position_in_threadgroup.x) < 16)) {
            const float pc145 = pc117[0];
            carry3[((int)thread_position_in_threadgroup.x)] = pc145;
        }
        if ((((int)thread_position_in_threadgroup.x) < 16)) {
            const float pc146 = pc121[0];
            carry4[((int)thread_position_in_threadgroup.x)] = pc146;
        }
        if ((((int)thread_position_in_threadgroup.x) < 128)) {
            const int ix147 = (((int)thread_position_in_threadgroup.x) / 8);
            const int ix148 = (((int)thread_position_in_threadgroup.x) % 8);
            const float pc149 = pc132[0];
            carry5[((ix147 * 8) + ix148)] = pc149;
        }
    }
    metal::threadgroup_barrier(metal::mem_flags::mem_threadgroup);
    if ((((int)thread_position_in_threadgroup.x) < 128)) {
        const int ix150 = (((int)thread_position_in_threadgroup.x) / 8);
        const int ix151 = (((int)thread_position_in_threadgroup.x) % 8);
        const float lv152 = carry5[((ix150 * 8) + ix151)];
        const float lv153 = carry4[ix150];
        const float x154 = (lv152 / lv153);
        out3[(((pid0 * 256) + ((off2 + ix150) * 8)) + ix151)] = x154;
    }
}
