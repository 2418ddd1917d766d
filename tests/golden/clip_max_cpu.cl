__kernel void map_mul_add_max_min(const int n, __global const float* restrict in0, __global const float* restrict in1, __global const float* restrict in2, __global float* restrict out3) {
    const int gid = ((int)get_global_id(0));
    if ((((int)get_group_id(0)) < (n / 64))) {
        const float v0 = in0[gid];
        const float v1 = in1[gid];
        const float v2 = (v0 * v1);
        const float v3 = in2[gid];
        const float v4 = (v2 + v3);
        const float v5 = ((v4 <= (-4.0f)) ? (-4.0f) : v4);
        const float v6 = ((v5 >= 4.0f) ? 4.0f : v5);
        const float v7 = (((v6 > v1) || (v6 != v6)) ? v6 : v1);
        out3[gid] = v7;
    } else {
        if ((gid < n)) {
            const float v8 = in0[gid];
            const float v9 = in1[gid];
            const float v10 = (v8 * v9);
            const float v11 = in2[gid];
            const float v12 = (v10 + v11);
            const float v13 = ((v12 <= (-4.0f)) ? (-4.0f) : v12);
            const float v14 = ((v13 >= 4.0f) ? 4.0f : v13);
            const float v15 = (((v14 > v9) || (v14 != v14)) ? v14 : v9);
            out3[gid] = v15;
        }
    }
}
