__kernel void scatter_lt_add_select_n_reshape(__global const float* restrict in0, __global const int* restrict in1, __global const float* restrict in2, __global float* restrict out3) {
    const int gid = ((int)get_global_id(0));
    if (gid < 30) {
        const int i0 = (gid / 3);
        const int i1 = (gid % 3);
        const float v0 = in0[((i0 * 3) + i1)];
        float acc1 = v0;
        for (int r2 = 0; r2 < 7; r2++) {
            const int v3 = in1[r2];
            const bool v4 = (v3 < 0);
            const int v5 = as_int((as_uint(v3) + 10u));
            const int v6 = (v4 ? v5 : v3);
            const bool v7 = (v6 == i0);
            if (v7) {
                const float v8 = in2[(i1 + (r2 * 3))];
                acc1 = (acc1 + v8);
            }
        }
        out3[gid] = acc1;
    }
}
