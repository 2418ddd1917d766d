__kernel void scan_cumsum(const int lines, const int L, const int I, __global const float* restrict in0, __global float* restrict out1) {
    const int gid = ((int)get_global_id(0));
    if (gid < lines) {
        const int base0 = ((((gid / I) * L) * I) + (gid % I));
        const float v1 = in0[base0];
        float acc2 = v1;
        out1[base0] = acc2;
        for (int r3 = 1; r3 < L; r3++) {
            const int pos4 = (base0 + (r3 * I));
            const float v5 = in0[pos4];
            acc2 = (acc2 + v5);
            out1[pos4] = acc2;
        }
    }
}
