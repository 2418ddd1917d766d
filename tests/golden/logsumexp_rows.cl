#ifndef FA_EXP_F32
#define FA_EXP_F32
__attribute__((always_inline)) float fa_exp_f32(const float x) {
    const float xc = (x >= -104.0f) ? ((x <= 89.0f) ? x : 89.0f) : -104.0f;
    const float t = xc * 1.44269504f;
    const int k = (int)(t + ((t < 0.0f) ? -0.5f : 0.5f));
    const float r = (xc - (float)k * 0.693145752f) - (float)k * 1.42860677e-6f;
    const float p = 1.0f + r * (1.0f + r * (0.5f + r * (0.166666672f + r * (0.0416666456f
                    + r * (0.00833336077f + r * (0.00138888892f + r * 0.000198412701f))))));
    const int k1 = k >> 1;
    const float e = (p * as_float((k1 + 127) << 23)) * as_float((k - k1 + 127) << 23);
    return (x != x) ? x : e;
}
#endif
#ifndef FA_LOG_F32
#define FA_LOG_F32
__attribute__((always_inline)) float fa_log_f32(const float x) {
    const int sub = x < 1.17549435e-38f;
    const int bits = as_int(sub ? x * 8388608.0f : x);
    const int big = (bits & 0x007fffff) > 0x003504f3;
    const float m = as_float((bits & 0x007fffff) | (big ? 0x3f000000 : 0x3f800000));
    const float e = (float)(((bits >> 23) & 0xff) - 127 + big - (sub ? 23 : 0));
    const float s = (m - 1.0f) / (m + 1.0f);
    const float s2 = s * s;
    const float lm = 2.0f * s + 2.0f * s * s2 * (0.333333343f + s2 * (0.2f + s2 * (0.142857149f
                     + s2 * 0.111111112f)));
    const float r = e * 0.693145752f + (lm + e * 1.42860677e-6f);
    return (x > 0.0f) ? ((x < INFINITY) ? r : x) : ((x == 0.0f) ? (-INFINITY) : NAN);
}
#endif
__kernel __attribute__((reqd_work_group_size(128, 1, 1))) void reduce_reduce_max_reshape_broadcast_in_dim_sub(__global const float* restrict in0, __global float* restrict out1) {
    const int i0 = ((int)get_group_id(0));
    float acc0 = (-(float)INFINITY);
    for (int r1 = ((int)get_local_id(0)); r1 < 300; r1 += 128) {
        const float v2 = in0[((i0 * 300) + r1)];
        acc0 = (((acc0 > v2) || (acc0 != acc0)) ? acc0 : v2);
    }
    __local float red3[128];
    red3[((int)get_local_id(0))] = acc0;
    barrier(CLK_LOCAL_MEM_FENCE);
    if (((int)get_local_id(0)) < 64) {
        const int v4 = (((int)get_local_id(0)) + 64);
        const float v5 = red3[((int)get_local_id(0))];
        const float v6 = red3[v4];
        const float v7 = (((v5 > v6) || (v5 != v5)) ? v5 : v6);
        red3[((int)get_local_id(0))] = v7;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (((int)get_local_id(0)) < 32) {
        const int v8 = (((int)get_local_id(0)) + 32);
        const float v9 = red3[((int)get_local_id(0))];
        const float v10 = red3[v8];
        const float v11 = (((v9 > v10) || (v9 != v9)) ? v9 : v10);
        red3[((int)get_local_id(0))] = v11;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (((int)get_local_id(0)) < 16) {
        const int v12 = (((int)get_local_id(0)) + 16);
        const float v13 = red3[((int)get_local_id(0))];
        const float v14 = red3[v12];
        const float v15 = (((v13 > v14) || (v13 != v13)) ? v13 : v14);
        red3[((int)get_local_id(0))] = v15;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (((int)get_local_id(0)) < 8) {
        const int v16 = (((int)get_local_id(0)) + 8);
        const float v17 = red3[((int)get_local_id(0))];
        const float v18 = red3[v16];
        const float v19 = (((v17 > v18) || (v17 != v17)) ? v17 : v18);
        red3[((int)get_local_id(0))] = v19;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (((int)get_local_id(0)) < 4) {
        const int v20 = (((int)get_local_id(0)) + 4);
        const float v21 = red3[((int)get_local_id(0))];
        const float v22 = red3[v20];
        const float v23 = (((v21 > v22) || (v21 != v21)) ? v21 : v22);
        red3[((int)get_local_id(0))] = v23;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (((int)get_local_id(0)) < 2) {
        const int v24 = (((int)get_local_id(0)) + 2);
        const float v25 = red3[((int)get_local_id(0))];
        const float v26 = red3[v24];
        const float v27 = (((v25 > v26) || (v25 != v25)) ? v25 : v26);
        red3[((int)get_local_id(0))] = v27;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (((int)get_local_id(0)) < 1) {
        const int v28 = (((int)get_local_id(0)) + 1);
        const float v29 = red3[((int)get_local_id(0))];
        const float v30 = red3[v28];
        const float v31 = (((v29 > v30) || (v29 != v29)) ? v29 : v30);
        red3[((int)get_local_id(0))] = v31;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    const float v32 = red3[0];
    float acc33 = 0.0f;
    for (int r34 = ((int)get_local_id(0)); r34 < 300; r34 += 128) {
        const float v35 = in0[((i0 * 300) + r34)];
        const float v36 = (v35 - v32);
        const float v37 = fa_exp_f32(v36);
        acc33 = (acc33 + v37);
    }
    __local float red38[128];
    red38[((int)get_local_id(0))] = acc33;
    barrier(CLK_LOCAL_MEM_FENCE);
    if (((int)get_local_id(0)) < 64) {
        const int v39 = (((int)get_local_id(0)) + 64);
        const float v40 = red38[((int)get_local_id(0))];
        const float v41 = red38[v39];
        const float v42 = (v40 + v41);
        red38[((int)get_local_id(0))] = v42;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (((int)get_local_id(0)) < 32) {
        const int v43 = (((int)get_local_id(0)) + 32);
        const float v44 = red38[((int)get_local_id(0))];
        const float v45 = red38[v43];
        const float v46 = (v44 + v45);
        red38[((int)get_local_id(0))] = v46;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (((int)get_local_id(0)) < 16) {
        const int v47 = (((int)get_local_id(0)) + 16);
        const float v48 = red38[((int)get_local_id(0))];
        const float v49 = red38[v47];
        const float v50 = (v48 + v49);
        red38[((int)get_local_id(0))] = v50;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (((int)get_local_id(0)) < 8) {
        const int v51 = (((int)get_local_id(0)) + 8);
        const float v52 = red38[((int)get_local_id(0))];
        const float v53 = red38[v51];
        const float v54 = (v52 + v53);
        red38[((int)get_local_id(0))] = v54;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (((int)get_local_id(0)) < 4) {
        const int v55 = (((int)get_local_id(0)) + 4);
        const float v56 = red38[((int)get_local_id(0))];
        const float v57 = red38[v55];
        const float v58 = (v56 + v57);
        red38[((int)get_local_id(0))] = v58;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (((int)get_local_id(0)) < 2) {
        const int v59 = (((int)get_local_id(0)) + 2);
        const float v60 = red38[((int)get_local_id(0))];
        const float v61 = red38[v59];
        const float v62 = (v60 + v61);
        red38[((int)get_local_id(0))] = v62;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (((int)get_local_id(0)) < 1) {
        const int v63 = (((int)get_local_id(0)) + 1);
        const float v64 = red38[((int)get_local_id(0))];
        const float v65 = red38[v63];
        const float v66 = (v64 + v65);
        red38[((int)get_local_id(0))] = v66;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    const float v67 = red38[0];
    if (((int)get_local_id(0)) == 0) {
        const float v68 = fa_log_f32(v67);
        out1[((int)get_group_id(0))] = v68;
    }
}
