__kernel void map_mul_add_tanh(const int n, __global const float* restrict in0, __global const float* restrict in1, __global const float* restrict in2, __global float* restrict out3) {
    const int gid = ((int)get_global_id(0));
    if ((gid < n)) {
        const float v0 = in0[gid];
        const float v1 = in1[gid];
        const float v2 = (v0 * v1);
        const float v3 = in2[gid];
        const float v4 = (v2 + v3);
        const float v5 = tanh(v4);
        const float v6 = (v5 * v1);
        const float v7 = (v6 + 1.0f);
        out3[gid] = v7;
    }
}
