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
    threadgroup float red94[16];
    threadgroup float part95[32];
    threadgroup float ta179[256];
    threadgroup float tb194[128];
    threadgroup float dot201[128];
    float pc208[1];
    float pc212[1];
    float pc223[1];
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
            for (int t54 = 0; t54 < 1; t54++) {
                const int x55 = as_type<int>((as_type<uint>(pid1) * 16u));
                const int x56 = as_type<int>((as_type<uint>(x55) + as_type<uint>(ix51)));
                const int x57 = as_type<int>((as_type<uint>(it27) * 16u));
                const int x58 = as_type<int>((as_type<uint>(x57) + as_type<uint>(((t54 * 16) + (ix52 * 8)))));
                const bool x59 = (x56 >= x58);
                const float lv60 = dot42[((ix51 * 16) + ((t54 * 16) + (ix52 * 8)))];
                const float x61 = (x59 ? lv60 : (-(float)INFINITY));
                acc53 = ((((acc53 > x61) && (!((as_type<uint>(x61) & 2147483647u) > 2139095040u))) || ((as_type<uint>(acc53) & 2147483647u) > 2139095040u)) ? acc53 : x61);
                const int x62 = as_type<int>((as_type<uint>(x57) + as_type<uint>((((t54 * 16) + (ix52 * 8)) + 1))));
                const bool x63 = (x56 >= x62);
                const float lv64 = dot42[((ix51 * 16) + (((t54 * 16) + (ix52 * 8)) + 1))];
                const float x65 = (x63 ? lv64 : (-(float)INFINITY));
                acc53 = ((((acc53 > x65) && (!((as_type<uint>(x65) & 2147483647u) > 2139095040u))) || ((as_type<uint>(acc53) & 2147483647u) > 2139095040u)) ? acc53 : x65);
                const int x66 = as_type<int>((as_type<uint>(x57) + as_type<uint>((((t54 * 16) + (ix52 * 8)) + 2))));
                const bool x67 = (x56 >= x66);
                const float lv68 = dot42[((ix51 * 16) + (((t54 * 16) + (ix52 * 8)) + 2))];
                const float x69 = (x67 ? lv68 : (-(float)INFINITY));
                acc53 = ((((acc53 > x69) && (!((as_type<uint>(x69) & 2147483647u) > 2139095040u))) || ((as_type<uint>(acc53) & 2147483647u) > 2139095040u)) ? acc53 : x69);
                const int x70 = as_type<int>((as_type<uint>(x57) + as_type<uint>((((t54 * 16) + (ix52 * 8)) + 3))));
                const bool x71 = (x56 >= x70);
                const float lv72 = dot42[((ix51 * 16) + (((t54 * 16) + (ix52 * 8)) + 3))];
                const float x73 = (x71 ? lv72 : (-(float)INFINITY));
                acc53 = ((((acc53 > x73) && (!((as_type<uint>(x73) & 2147483647u) > 2139095040u))) || ((as_type<uint>(acc53) & 2147483647u) > 2139095040u)) ? acc53 : x73);
                const int x74 = as_type<int>((as_type<uint>(x57) + as_type<uint>((((t54 * 16) + (ix52 * 8)) + 4))));
                const bool x75 = (x56 >= x74);
                const float lv76 = dot42[((ix51 * 16) + (((t54 * 16) + (ix52 * 8)) + 4))];
                const float x77 = (x75 ? lv76 : (-(float)INFINITY));
                acc53 = ((((acc53 > x77) && (!((as_type<uint>(x77) & 2147483647u) > 2139095040u))) || ((as_type<uint>(acc53) & 2147483647u) > 2139095040u)) ? acc53 : x77);
                const int x78 = as_type<int>((as_type<uint>(x57) + as_type<uint>((((t54 * 16) + (ix52 * 8)) + 5))));
                const bool x79 = (x56 >= x78);
                const float lv80 = dot42[((ix51 * 16) + (((t54 * 16) + (ix52 * 8)) + 5))];
                const float x81 = (x79 ? lv80 : (-(float)INFINITY));
                acc53 = ((((acc53 > x81) && (!((as_type<uint>(x81) & 2147483647u) > 2139095040u))) || ((as_type<uint>(acc53) & 2147483647u) > 2139095040u)) ? acc53 : x81);
                const int x82 = as_type<int>((as_type<uint>(x57) + as_type<uint>((((t54 * 16) + (ix52 * 8)) + 6))));
                const bool x83 = (x56 >= x82);
                const float lv84 = dot42[((ix51 * 16) + (((t54 * 16) + (ix52 * 8)) + 6))];
                const float x85 = (x83 ? lv84 : (-(float)INFINITY));
                acc53 = ((((acc53 > x85) && (!((as_type<uint>(x85) & 2147483647u) > 2139095040u))) || ((as_type<uint>(acc53) & 2147483647u) > 2139095040u)) ? acc53 : x85);
                const int x86 = as_type<int>((as_type<uint>(x57) + as_type<uint>((((t54 * 16) + (ix52 * 8)) + 7))));
                const bool x87 = (x56 >= x86);
                const float lv88 = dot42[((ix51 * 16) + (((t54 * 16) + (ix52 * 8)) + 7))];
                const float x89 = (x87 ? lv88 : (-(float)INFINITY));
                acc53 = ((((acc53 > x89) && (!((as_type<uint>(x89) & 2147483647u) > 2139095040u))) || ((as_type<uint>(acc53) & 2147483647u) > 2139095040u)) ? acc53 : x89);
            }
            part50[((ix51 * 2) + ix52)] = acc53;
        }
        metal::threadgroup_barrier(metal::mem_flags::mem_threadgroup);
        if ((((int)thread_position_in_threadgroup.x) < 16)) {
            const int pb90 = (((int)thread_position_in_threadgroup.x) * 2);
            float acc91 = (-(float)INFINITY);
            for (int l92 = 0; l92 < 2; l92++) {
                const float pv93 = part50[(pb90 + l92)];
                acc91 = ((((acc91 > pv93) && (!((as_type<uint>(pv93) & 2147483647u) > 2139095040u))) || ((as_type<uint>(acc91) & 2147483647u) > 2139095040u)) ? acc91 : pv93);
            }
            red49[((int)thread_position_in_threadgroup.x)] = acc91;
        }
        metal::threadgroup_barrier(metal::mem_flags::mem_threadgroup);
        if ((((int)thread_position_in_threadgroup.x) < 32)) {
            const int ix96 = (((int)thread_position_in_threadgroup.x) / 2);
            const int ix97 = (((int)thread_position_in_threadgroup.x) % 2);
            float acc98 = 0.0f;
            for (int t99 = 0; t99 < 1; t99++) {
                const int x100 = as_type<int>((as_type<uint>(pid1) * 16u));
                const int x101 = as_type<int>((as_type<uint>(x100) + as_type<uint>(ix96)));
                const int x102 = as_type<int>((as_type<uint>(it27) * 16u));
                const int x103 = as_type<int>((as_type<uint>(x102) + as_type<uint>(((t99 * 16) + (ix97 * 8)))));
                const bool x104 = (x101 >= x103);
                const float lv105 = dot42[((ix96 * 16) + ((t99 * 16) + (ix97 * 8)))];
                const float x106 = (x104 ? lv105 : (-(float)INFINITY));
                const float lv107 = carry3[ix96];
                const float lv108 = red49[ix96];
                const float x109 = ((((lv107 > lv108) && (!((as_type<uint>(lv108) & 2147483647u) > 2139095040u))) || ((as_type<uint>(lv107) & 2147483647u) > 2139095040u)) ? lv107 : lv108);
                const float x110 = (x106 - x109);
                const float x111 = metal::exp(x110);
                acc98 = (acc98 + x111);
                const int x112 = as_type<int>((as_type<uint>(x102) + as_type<uint>((((t99 * 16) + (ix97 * 8)) + 1))));
                const bool x113 = (x101 >= x112);
                const float lv114 = dot42[((ix96 * 16) + (((t99 * 16) + (ix97 * 8)) + 1))];
                const float x115 = (x113 ? lv114 : (-(float)INFINITY));
                const float lv116 = carry3[ix96];
                const float lv117 = red49[ix96];
                const float x118 = ((((lv116 > lv117) && (!((as_type<uint>(lv117) & 2147483647u) > 2139095040u))) || ((as_type<uint>(lv116) & 2147483647u) > 2139095040u)) ? lv116 : lv117);
                const float x119 = (x115 - x118);
                const float x120 = metal::exp(x119);
                acc98 = (acc98 + x120);
                const int x121 = as_type<int>((as_type<uint>(x102) + as_type<uint>((((t99 * 16) + (ix97 * 8)) + 2))));
                const bool x122 = (x101 >= x121);
                const float lv123 = dot42[((ix96 * 16) + (((t99 * 16) + (ix97 * 8)) + 2))];
                const float x124 = (x122 ? lv123 : (-(float)INFINITY));
                const float lv125 = carry3[ix96];
                const float lv126 = red49[ix96];
                const float x127 = ((((lv125 > lv126) && (!((as_type<uint>(lv126) & 2147483647u) > 2139095040u))) || ((as_type<uint>(lv125) & 2147483647u) > 2139095040u)) ? lv125 : lv126);
                const float x128 = (x124 - x127);
                const float x129 = metal::exp(x128);
                acc98 = (acc98 + x129);
                const int x130 = as_type<int>((as_type<uint>(x102) + as_type<uint>((((t99 * 16) + (ix97 * 8)) + 3))));
                const bool x131 = (x101 >= x130);
                const float lv132 = dot42[((ix96 * 16) + (((t99 * 16) + (ix97 * 8)) + 3))];
                const float x133 = (x131 ? lv132 : (-(float)INFINITY));
                const float lv134 = carry3[ix96];
                const float lv135 = red49[ix96];
                const float x136 = ((((lv134 > lv135) && (!((as_type<uint>(lv135) & 2147483647u) > 2139095040u))) || ((as_type<uint>(lv134) & 2147483647u) > 2139095040u)) ? lv134 : lv135);
                const float x137 = (x133 - x136);
                const float x138 = metal::exp(x137);
                acc98 = (acc98 + x138);
                const int x139 = as_type<int>((as_type<uint>(x102) + as_type<uint>((((t99 * 16) + (ix97 * 8)) + 4))));
                const bool x140 = (x101 >= x139);
                const float lv141 = dot42[((ix96 * 16) + (((t99 * 16) + (ix97 * 8)) + 4))];
                const float x142 = (x140 ? lv141 : (-(float)INFINITY));
                const float lv143 = carry3[ix96];
                const float lv144 = red49[ix96];
                const float x145 = ((((lv143 > lv144) && (!((as_type<uint>(lv144) & 2147483647u) > 2139095040u))) || ((as_type<uint>(lv143) & 2147483647u) > 2139095040u)) ? lv143 : lv144);
                const float x146 = (x142 - x145);
                const float x147 = metal::exp(x146);
                acc98 = (acc98 + x147);
                const int x148 = as_type<int>((as_type<uint>(x102) + as_type<uint>((((t99 * 16) + (ix97 * 8)) + 5))));
                const bool x149 = (x101 >= x148);
                const float lv150 = dot42[((ix96 * 16) + (((t99 * 16) + (ix97 * 8)) + 5))];
                const float x151 = (x149 ? lv150 : (-(float)INFINITY));
                const float lv152 = carry3[ix96];
                const float lv153 = red49[ix96];
                const float x154 = ((((lv152 > lv153) && (!((as_type<uint>(lv153) & 2147483647u) > 2139095040u))) || ((as_type<uint>(lv152) & 2147483647u) > 2139095040u)) ? lv152 : lv153);
                const float x155 = (x151 - x154);
                const float x156 = metal::exp(x155);
                acc98 = (acc98 + x156);
                const int x157 = as_type<int>((as_type<uint>(x102) + as_type<uint>((((t99 * 16) + (ix97 * 8)) + 6))));
                const bool x158 = (x101 >= x157);
                const float lv159 = dot42[((ix96 * 16) + (((t99 * 16) + (ix97 * 8)) + 6))];
                const float x160 = (x158 ? lv159 : (-(float)INFINITY));
                const float lv161 = carry3[ix96];
                const float lv162 = red49[ix96];
                const float x163 = ((((lv161 > lv162) && (!((as_type<uint>(lv162) & 2147483647u) > 2139095040u))) || ((as_type<uint>(lv161) & 2147483647u) > 2139095040u)) ? lv161 : lv162);
                const float x164 = (x160 - x163);
                const float x165 = metal::exp(x164);
                acc98 = (acc98 + x165);
                const int x166 = as_type<int>((as_type<uint>(x102) + as_type<uint>((((t99 * 16) + (ix97 * 8)) + 7))));
                const bool x167 = (x101 >= x166);
                const float lv168 = dot42[((ix96 * 16) + (((t99 * 16) + (ix97 * 8)) + 7))];
                const float x169 = (x167 ? lv168 : (-(float)INFINITY));
                const float lv170 = carry3[ix96];
                const float lv171 = red49[ix96];
                const float x172 = ((((lv170 > lv171) && (!((as_type<uint>(lv171) & 2147483647u) > 2139095040u))) || ((as_type<uint>(lv170) & 2147483647u) > 2139095040u)) ? lv170 : lv171);
                const float x173 = (x169 - x172);
                const float x174 = metal::exp(x173);
                acc98 = (acc98 + x174);
            }
            part95[((ix96 * 2) + ix97)] = acc98;
        }
        metal::threadgroup_barrier(metal::mem_flags::mem_threadgroup);
        if ((((int)thread_position_in_threadgroup.x) < 16)) {
            const int pb175 = (((int)thread_position_in_threadgroup.x) * 2);
            float acc176 = 0.0f;
            for (int l177 = 0; l177 < 2; l177++) {
                const float pv178 = part95[(pb175 + l177)];
                acc176 = (acc176 + pv178);
            }
            red94[((int)thread_position_in_threadgroup.x)] = acc176;
        }
        metal::threadgroup_barrier(metal::mem_flags::mem_threadgroup);
        const int ix180 = (((int)thread_position_in_threadgroup.x) / 16);
        const int ix181 = (((int)thread_position_in_threadgroup.x) % 16);
        const int x182 = as_type<int>((as_type<uint>(pid1) * 16u));
        const int x183 = as_type<int>((as_type<uint>(x182) + as_type<uint>(ix180)));
        const int x184 = as_type<int>((as_type<uint>(it27) * 16u));
        const int x185 = as_type<int>((as_type<uint>(x184) + as_type<uint>(ix181)));
        const bool x186 = (x183 >= x185);
        const float lv187 = dot42[((ix180 * 16) + ix181)];
        const float x188 = (x186 ? lv187 : (-(float)INFINITY));
        const float lv189 = carry3[ix180];
        const float lv190 = red49[ix180];
        const float x191 = ((((lv189 > lv190) && (!((as_type<uint>(lv190) & 2147483647u) > 2139095040u))) || ((as_type<uint>(lv189) & 2147483647u) > 2139095040u)) ? lv189 : lv190);
        const float x192 = (x188 - x191);
        const float x193 = metal::exp(x192);
        ta179[((ix180 * 16) + ix181)] = x193;
        metal::threadgroup_barrier(metal::mem_flags::mem_threadgroup);
        if ((((int)thread_position_in_threadgroup.x) < 128)) {
            const int ix195 = (((int)thread_position_in_threadgroup.x) / 8);
            const int ix196 = (((int)thread_position_in_threadgroup.x) % 8);
            const int x197 = as_type<int>((as_type<uint>(it27) * 16u));
            const int ri198 = (x197 + ix195);
            const int ad199 = (((pid0 * 256) + (ri198 * 8)) + ix196);
            const float ld200 = in2[ad199];
            tb194[((ix195 * 8) + ix196)] = ld200;
        }
        metal::threadgroup_barrier(metal::mem_flags::mem_threadgroup);
        if ((((int)thread_position_in_threadgroup.x) < 128)) {
            const int ix202 = (((int)thread_position_in_threadgroup.x) / 8);
            const int ix203 = (((int)thread_position_in_threadgroup.x) % 8);
            float acc204 = 0.0f;
            for (int k205 = 0; k205 < 16; k205++) {
                const float lv206 = ta179[((ix202 * 16) + k205)];
                const float lv207 = tb194[((k205 * 8) + ix203)];
                acc204 = (acc204 + (lv206 * lv207));
            }
            dot201[((ix202 * 8) + ix203)] = acc204;
        }
        metal::threadgroup_barrier(metal::mem_flags::mem_threadgroup);
        if ((((int)thread_position_in_threadgroup.x) < 16)) {
            const float lv209 = carry3[((int)thread_position_in_threadgroup.x)];
            const float lv210 = red49[((int)thread_position_in_threadgroup.x)];
            const float x211 = ((((lv209 > lv210) && (!((as_type<uint>(lv210) & 2147483647u) > 2139095040u))) || ((as_type<uint>(lv209) & 2147483647u) > 2139095040u)) ? lv209 : lv210);
            pc208[0] = x211;
        }
        if ((((int)thread_position_in_threadgroup.x) < 16)) {
            const float lv213 = carry4[((int)thread_position_in_threadgroup.x)];
            const float lv214 = carry3[((int)thread_position_in_threadgroup.x)];
            const float lv215 = carry3[((int)thread_position_in_threadgroup.x)];
            const float lv216 = red49[((int)thread_position_in_threadgroup.x)];
            const float x217 = ((((lv215 > lv216) && (!((as_type<uint>(lv216) & 2147483647u) > 2139095040u))) || ((as_type<uint>(lv215) & 2147483647u) > 2139095040u)) ? lv215 : lv216);
            const float x218 = (lv214 - x217);
            const float x219 = metal::exp(x218);
            const float x220 = (lv213 * x219);
            const float lv221 = red94[((int)thread_position_in_threadgroup.x)];
            const float x222 = (x220 + lv221);
            pc212[0] = x222;
        }
        if ((((int)thread_position_in_threadgroup.x) < 128)) {
            const int ix224 = (((int)thread_position_in_threadgroup.x) / 8);
            const int ix225 = (((int)thread_position_in_threadgroup.x) % 8);
            const float lv226 = carry5[((ix224 * 8) + ix225)];
            const float lv227 = carry3[ix224];
            const float lv228 = carry3[ix224];
            const float lv229 = red49[ix224];
            const float x230 = ((((lv228 > lv229) && (!((as_type<uint>(lv229) & 2147483647u) > 2139095040u))) || ((as_type<uint>(lv228) & 2147483647u) > 2139095040u)) ? lv228 : lv229);
            const float x231 = (lv227 - x230);
            const float x232 = metal::exp(x231);
            const float x233 = (lv226 * x232);
            const float lv234 = dot201[((ix224 * 8) + ix225)];
            const float x235 = (x233 + lv234);
            pc223[0] = x235;
        }
        metal::threadgroup_barrier(metal::mem_flags::mem_threadgroup);
        if ((((int)thread_position_in_threadgroup.x) < 16)) {
            const float pc236 = pc208[0];
            carry3[((int)thread_position_in_threadgroup.x)] = pc236;
        }
        metal::threadgroup_barrier(metal::mem_flags::mem_threadgroup);
        if ((((int)thread_position_in_threadgroup.x) < 16)) {
            const float pc237 = pc212[0];
            carry4[((int)thread_position_in_threadgroup.x)] = pc237;
        }
        metal::threadgroup_barrier(metal::mem_flags::mem_threadgroup);
        if ((((int)thread_position_in_threadgroup.x) < 128)) {
            const int ix238 = (((int)thread_position_in_threadgroup.x) / 8);
            const int ix239 = (((int)thread_position_in_threadgroup.x) % 8);
            const float pc240 = pc223[0];
            carry5[((ix238 * 8) + ix239)] = pc240;
        }
        metal::threadgroup_barrier(metal::mem_flags::mem_threadgroup);
    }
    if ((((int)thread_position_in_threadgroup.x) < 128)) {
        const int ix241 = (((int)thread_position_in_threadgroup.x) / 8);
        const int ix242 = (((int)thread_position_in_threadgroup.x) % 8);
        const float lv243 = carry5[((ix241 * 8) + ix242)];
        const float lv244 = carry4[ix241];
        const float x245 = (lv243 / lv244);
        out3[(((pid0 * 256) + ((off2 + ix241) * 8)) + ix242)] = x245;
    }
}
