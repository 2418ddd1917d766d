__kernel void map_lt_add_select_n_reshape(__global const int* restrict in0, __global const float* restrict in1, __global float* restrict out2) {
    const int gid = ((int)get_global_id(0));
    if (gid < 21) {
        const int i0 = (gid / 7);
        const int i1 = (gid % 7);
        const int v0 = in0[i1];
        const bool v1 = (v0 < 0);
        const int v2 = as_int((as_uint(v0) + 10u));
        const int v3 = (v1 ? v2 : v0);
        const int v4 = ((v3 < 0) ? 0 : v3);
        const int v5 = ((v4 > 9) ? 9 : v4);
        const float v6 = in1[(i0 + (v5 * 3))];
        const float v7 = (v6 * 2.0f);
        out2[gid] = v7;
    }
}
