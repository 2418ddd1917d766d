__kernel void map_mul_add_max_min(const int n, __global const float* restrict in0, __global const float* restrict in1, __global const float* restrict in2, __global float* restrict out3) {
    const int gid = ((int)get_global_id(0));
    const bool full0 = (((int)get_group_id(0)) < (n / 64));
    const bool inside1 = (gid < n);
    const int e2 = ((full0 || inside1) ? gid : (n - 1));
    const float v3 = in0[e2];
    const float v4 = in1[e2];
    const float v5 = (v3 * v4);
    const float v6 = in2[e2];
    const float v7 = (v5 + v6);
    const float v8 = ((v7 <= (-4.0f)) ? (-4.0f) : v7);
    const float v9 = ((v8 >= 4.0f) ? 4.0f : v8);
    const float v10 = (((v9 > v4) || (v9 != v9)) ? v9 : v4);
    if (full0) {
        out3[e2] = v10;
    } else {
        if (inside1) {
            out3[e2] = v10;
        }
    }
}
