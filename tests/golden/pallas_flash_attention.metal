[[kernel]] void pallas_flash_attention(
  const device float* in0 [[buffer(0)]],
  const device float* in1 [[buffer(1)]],
  const device float* in2 [[buffer(2)]],
  const device int32_t* in3 [[buffer(3)]],
  const device int32_t* in4 [[buffer(4)]],
  device float* out5 [[buffer(5)]],
  uint3 thread_position_in_threadgroup [[thread_position_in_threadgroup]],
  uint3 threadgroup_position_in_grid [[threadgroup_position_in_grid]]) {
    threadgroup float carry3[16];
    threadgroup float carry6[16];
    threadgroup float carry9[128];
    threadgroup float ta35[128];
    threadgroup float tb43[128];
    threadgroup float dot51[256];
    threadgroup float red60[16];
    threadgroup float part61[32];
    threadgroup float red82[16];
    threadgroup float part83[32];
    threadgroup float ta109[256];
    threadgroup float tb127[128];
    threadgroup float dot135[128];
    float pc144[1];
    float pc150[1];
    float pc163[1];
    const int pid0 = (((int)threadgroup_position_in_grid.x) / 2);
    const int pid1 = (((int)threadgroup_position_in_grid.x) % 2);
    const int off2 = (pid1 * 16);
    for (int s4 = 0; s4 < 1; s4++) {
        const int e5 = ((s4 * 256) + ((int)thread_position_in_threadgroup.x));
        if ((e5 < 16)) {
            carry3[e5] = (-(float)INFINITY);
        }
    }
    for (int s7 = 0; s7 < 1; s7++) {
        const int e8 = ((s7 * 256) + ((int)thread_position_in_threadgroup.x));
        if ((e8 < 16)) {
            carry6[e8] = 0.0f;
        }
    }
    for (int s10 = 0; s10 < 1; s10++) {
        const int e11 = ((s10 * 256) + ((int)thread_position_in_threadgroup.x));
        if ((e11 < 128)) {
            const int ix12 = (e11 / 8);
            const int ix13 = (e11 % 8);
            carry9[((ix12 * 8) + ix13)] = 0.0f;
        }
    }
    metal::threadgroup_barrier(metal::mem_flags::mem_threadgroup);
    const int x14 = as_type<int>((as_type<uint>(pid1) + 1u));
    const int x15 = as_type<int>((as_type<uint>(x14) * 16u));
    const int x16 = as_type<int>((as_type<uint>(x15) + 16u));
    const int x17 = as_type<int>((as_type<uint>(x16) - 1u));
    const bool v18 = ((16 == 0) || (16 == (-1)));
    const int v19 = (v18 ? 1 : 16);
    const int x20 = (v18 ? 0 : (x17 % v19));
    const bool x21 = (x20 != 0);
    const bool x22 = (x20 < 0);
    const bool x23 = (x22 != false);
    const bool x24 = (x21 && x23);
    const bool v25 = (16 == 0);
    const bool v26 = (16 == (-1));
    const int v27 = ((v25 || v26) ? 1 : 16);
    const int v28 = (x17 / v27);
    const int v29 = as_type<int>((0u - as_type<uint>(x17)));
    const int x30 = (v25 ? 0 : (v26 ? v29 : v28));
    const int x31 = as_type<int>((as_type<uint>(x30) - 1u));
    const int x32 = (x24 ? x31 : x30);
    for (int it33 = 0; it33 < x32; it33++) {
        const int x34 = as_type<int>((as_type<uint>(it33) * 16u));
        for (int s36 = 0; s36 < 1; s36++) {
            const int e37 = ((s36 * 256) + ((int)thread_position_in_threadgroup.x));
            if ((e37 < 128)) {
                const int ix38 = (e37 / 8);
                const int ix39 = (e37 % 8);
                const int ad40 = (((pid0 * 256) + ((off2 + ix38) * 8)) + ix39);
                const float ld41 = in0[ad40];
                const float x42 = (ld41 * 0.35355338f);
                ta35[((ix38 * 8) + ix39)] = x42;
            }
        }
        metal::threadgroup_barrier(metal::mem_flags::mem_threadgroup);
        for (int s44 = 0; s44 < 1; s44++) {
            const int e45 = ((s44 * 256) + ((int)thread_position_in_threadgroup.x));
            if ((e45 < 128)) {
                const int ix46 = (e45 / 16);
                const int ix47 = (e45 % 16);
                const int ri48 = (x34 + ix47);
                const int ad49 = (((pid0 * 256) + (ri48 * 8)) + ix46);
                const float ld50 = in1[ad49];
                tb43[((ix46 * 16) + ix47)] = ld50;
            }
        }
        metal::threadgroup_barrier(metal::mem_flags::mem_threadgroup);
        for (int s52 = 0; s52 < 1; s52++) {
            const int e53 = ((s52 * 256) + ((int)thread_position_in_threadgroup.x));
            if ((e53 < 256)) {
                const int ix54 = (e53 / 16);
                const int ix55 = (e53 % 16);
                float acc56 = 0.0f;
                for (int k57 = 0; k57 < 8; k57++) {
                    const float lv58 = ta35[((ix54 * 8) + k57)];
                    const float lv59 = tb43[((k57 * 16) + ix55)];
                    acc56 = (acc56 + (lv58 * lv59));
                }
                dot51[((ix54 * 16) + ix55)] = acc56;
            }
        }
        metal::threadgroup_barrier(metal::mem_flags::mem_threadgroup);
        for (int s62 = 0; s62 < 1; s62++) {
            const int e63 = ((s62 * 256) + ((int)thread_position_in_threadgroup.x));
            if ((e63 < 32)) {
                const int ix64 = (e63 / 2);
                const int ix65 = (e63 % 2);
                float acc66 = (-(float)INFINITY);
                for (int k67 = ix65; k67 < 16; k67 += 2) {
                    const int x68 = as_type<int>((as_type<uint>(pid1) * 16u));
                    const int ld69 = in3[ix64];
                    const int x70 = as_type<int>((as_type<uint>(x68) + as_type<uint>(ld69)));
                    const int ld71 = in4[k67];
                    const int x72 = as_type<int>((as_type<uint>(x34) + as_type<uint>(ld71)));
                    const bool x73 = (x70 >= x72);
                    const float lv74 = dot51[((ix64 * 16) + k67)];
                    const float x75 = (x73 ? lv74 : (-(float)INFINITY));
                    acc66 = ((((acc66 > x75) && (!((as_type<uint>(x75) & 2147483647u) > 2139095040u))) || ((as_type<uint>(acc66) & 2147483647u) > 2139095040u)) ? acc66 : x75);
                }
                part61[((ix64 * 2) + ix65)] = acc66;
            }
        }
        metal::threadgroup_barrier(metal::mem_flags::mem_threadgroup);
        for (int s76 = 0; s76 < 1; s76++) {
            const int e77 = ((s76 * 256) + ((int)thread_position_in_threadgroup.x));
            if ((e77 < 16)) {
                const int pb78 = (e77 * 2);
                float acc79 = (-(float)INFINITY);
                for (int l80 = 0; l80 < 2; l80++) {
                    const float pv81 = part61[(pb78 + l80)];
                    acc79 = ((((acc79 > pv81) && (!((as_type<uint>(pv81) & 2147483647u) > 2139095040u))) || ((as_type<uint>(acc79) & 2147483647u) > 2139095040u)) ? acc79 : pv81);
                }
                red60[e77] = acc79;
            }
        }
        metal::threadgroup_barrier(metal::mem_flags::mem_threadgroup);
        for (int s84 = 0; s84 < 1; s84++) {
            const int e85 = ((s84 * 256) + ((int)thread_position_in_threadgroup.x));
            if ((e85 < 32)) {
                const int ix86 = (e85 / 2);
                const int ix87 = (e85 % 2);
                float acc88 = 0.0f;
                for (int k89 = ix87; k89 < 16; k89 += 2) {
                    const int x90 = as_type<int>((as_type<uint>(pid1) * 16u));
                    const int ld91 = in3[ix86];
                    const int x92 = as_type<int>((as_type<uint>(x90) + as_type<uint>(ld91)));
                    const int ld93 = in4[k89];
                    const int x94 = as_type<int>((as_type<uint>(x34) + as_type<uint>(ld93)));
                    const bool x95 = (x92 >= x94);
                    const float lv96 = dot51[((ix86 * 16) + k89)];
                    const float x97 = (x95 ? lv96 : (-(float)INFINITY));
                    const float lv98 = carry3[ix86];
                    const float lv99 = red60[ix86];
                    const float x100 = ((((lv98 > lv99) && (!((as_type<uint>(lv99) & 2147483647u) > 2139095040u))) || ((as_type<uint>(lv98) & 2147483647u) > 2139095040u)) ? lv98 : lv99);
                    const float x101 = (x97 - x100);
                    const float x102 = metal::exp(x101);
                    acc88 = (acc88 + x102);
                }
                part83[((ix86 * 2) + ix87)] = acc88;
            }
        }
        metal::threadgroup_barrier(metal::mem_flags::mem_threadgroup);
        for (int s103 = 0; s103 < 1; s103++) {
            const int e104 = ((s103 * 256) + ((int)thread_position_in_threadgroup.x));
            if ((e104 < 16)) {
                const int pb105 = (e104 * 2);
                float acc106 = 0.0f;
                for (int l107 = 0; l107 < 2; l107++) {
                    const float pv108 = part83[(pb105 + l107)];
                    acc106 = (acc106 + pv108);
                }
                red82[e104] = acc106;
            }
        }
        metal::threadgroup_barrier(metal::mem_flags::mem_threadgroup);
        for (int s110 = 0; s110 < 1; s110++) {
            const int e111 = ((s110 * 256) + ((int)thread_position_in_threadgroup.x));
            if ((e111 < 256)) {
                const int ix112 = (e111 / 16);
                const int ix113 = (e111 % 16);
                const int x114 = as_type<int>((as_type<uint>(pid1) * 16u));
                const int ld115 = in3[ix112];
                const int x116 = as_type<int>((as_type<uint>(x114) + as_type<uint>(ld115)));
                const int ld117 = in4[ix113];
                const int x118 = as_type<int>((as_type<uint>(x34) + as_type<uint>(ld117)));
                const bool x119 = (x116 >= x118);
                const float lv120 = dot51[((ix112 * 16) + ix113)];
                const float x121 = (x119 ? lv120 : (-(float)INFINITY));
                const float lv122 = carry3[ix112];
                const float lv123 = red60[ix112];
                const float x124 = ((((lv122 > lv123) && (!((as_type<uint>(lv123) & 2147483647u) > 2139095040u))) || ((as_type<uint>(lv122) & 2147483647u) > 2139095040u)) ? lv122 : lv123);
                const float x125 = (x121 - x124);
                const float x126 = metal::exp(x125);
                ta109[((ix112 * 16) + ix113)] = x126;
            }
        }
        metal::threadgroup_barrier(metal::mem_flags::mem_threadgroup);
        for (int s128 = 0; s128 < 1; s128++) {
            const int e129 = ((s128 * 256) + ((int)thread_position_in_threadgroup.x));
            if ((e129 < 128)) {
                const int ix130 = (e129 / 8);
                const int ix131 = (e129 % 8);
                const int ri132 = (x34 + ix130);
                const int ad133 = (((pid0 * 256) + (ri132 * 8)) + ix131);
                const float ld134 = in2[ad133];
                tb127[((ix130 * 8) + ix131)] = ld134;
            }
        }
        metal::threadgroup_barrier(metal::mem_flags::mem_threadgroup);
        for (int s136 = 0; s136 < 1; s136++) {
            const int e137 = ((s136 * 256) + ((int)thread_position_in_threadgroup.x));
            if ((e137 < 128)) {
                const int ix138 = (e137 / 8);
                const int ix139 = (e137 % 8);
                float acc140 = 0.0f;
                for (int k141 = 0; k141 < 16; k141++) {
                    const float lv142 = ta109[((ix138 * 16) + k141)];
                    const float lv143 = tb127[((k141 * 8) + ix139)];
                    acc140 = (acc140 + (lv142 * lv143));
                }
                dot135[((ix138 * 8) + ix139)] = acc140;
            }
        }
        metal::threadgroup_barrier(metal::mem_flags::mem_threadgroup);
        for (int s145 = 0; s145 < 1; s145++) {
            const int e146 = ((s145 * 256) + ((int)thread_position_in_threadgroup.x));
            if ((e146 < 16)) {
                const float lv147 = carry3[e146];
                const float lv148 = red60[e146];
                const float x149 = ((((lv147 > lv148) && (!((as_type<uint>(lv148) & 2147483647u) > 2139095040u))) || ((as_type<uint>(lv147) & 2147483647u) > 2139095040u)) ? lv147 : lv148);
                pc144[s145] = x149;
            }
        }
        for (int s151 = 0; s151 < 1; s151++) {
            const int e152 = ((s151 * 256) + ((int)thread_position_in_threadgroup.x));
            if ((e152 < 16)) {
                const float lv153 = carry6[e152];
                const float lv154 = carry3[e152];
                const float lv155 = carry3[e152];
                const float lv156 = red60[e152];
                const float x157 = ((((lv155 > lv156) && (!((as_type<uint>(lv156) & 2147483647u) > 2139095040u))) || ((as_type<uint>(lv155) & 2147483647u) > 2139095040u)) ? lv155 : lv156);
                const float x158 = (lv154 - x157);
                const float x159 = metal::exp(x158);
                const float x160 = (lv153 * x159);
                const float lv161 = red82[e152];
                const float x162 = (x160 + lv161);
                pc150[s151] = x162;
            }
        }
        for (int s164 = 0; s164 < 1; s164++) {
            const int e165 = ((s164 * 256) + ((int)thread_position_in_threadgroup.x));
            if ((e165 < 128)) {
                const int ix166 = (e165 / 8);
                const int ix167 = (e165 % 8);
                const float lv168 = carry9[((ix166 * 8) + ix167)];
                const float lv169 = carry3[ix166];
                const float lv170 = carry3[ix166];
                const float lv171 = red60[ix166];
                const float x172 = ((((lv170 > lv171) && (!((as_type<uint>(lv171) & 2147483647u) > 2139095040u))) || ((as_type<uint>(lv170) & 2147483647u) > 2139095040u)) ? lv170 : lv171);
                const float x173 = (lv169 - x172);
                const float x174 = metal::exp(x173);
                const float x175 = (lv168 * x174);
                const float lv176 = dot135[((ix166 * 8) + ix167)];
                const float x177 = (x175 + lv176);
                pc163[s164] = x177;
            }
        }
        metal::threadgroup_barrier(metal::mem_flags::mem_threadgroup);
        for (int s178 = 0; s178 < 1; s178++) {
            const int e179 = ((s178 * 256) + ((int)thread_position_in_threadgroup.x));
            if ((e179 < 16)) {
                const float pc180 = pc144[s178];
                carry3[e179] = pc180;
            }
        }
        for (int s181 = 0; s181 < 1; s181++) {
            const int e182 = ((s181 * 256) + ((int)thread_position_in_threadgroup.x));
            if ((e182 < 16)) {
                const float pc183 = pc150[s181];
                carry6[e182] = pc183;
            }
        }
        for (int s184 = 0; s184 < 1; s184++) {
            const int e185 = ((s184 * 256) + ((int)thread_position_in_threadgroup.x));
            if ((e185 < 128)) {
                const int ix186 = (e185 / 8);
                const int ix187 = (e185 % 8);
                const float pc188 = pc163[s184];
                carry9[((ix186 * 8) + ix187)] = pc188;
            }
        }
        metal::threadgroup_barrier(metal::mem_flags::mem_threadgroup);
    }
    for (int s189 = 0; s189 < 1; s189++) {
        const int e190 = ((s189 * 256) + ((int)thread_position_in_threadgroup.x));
        if ((e190 < 128)) {
            const int ix191 = (e190 / 8);
            const int ix192 = (e190 % 8);
            const float lv193 = carry9[((ix191 * 8) + ix192)];
            const float lv194 = carry6[ix191];
            const float x195 = (lv193 / lv194);
            out5[(((pid0 * 256) + ((off2 + ix191) * 8)) + ix192)] = x195;
        }
    }
    metal::threadgroup_barrier(metal::mem_flags::mem_device | metal::mem_flags::mem_threadgroup);
}
