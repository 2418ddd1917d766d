__kernel void sort_init(__global int* restrict idx0, __global const float* restrict in1, __global float* restrict key2) {
    const int gid = ((int)get_global_id(0));
    if (gid < 32) {
        const int p1 = (gid % 32);
        idx0[gid] = p1;
        const bool v2 = (p1 < 20);
        const int v3 = (v2 ? p1 : 19);
        const float v4 = in1[v3];
        key2[gid] = (v2 ? v4 : 0.0f);
    }
}

__kernel void sort_step(const int jj, const int kk, __global int* restrict idx0, __global float* restrict key1) {
    const int gid = ((int)get_global_id(0));
    if (gid < 16) {
        const int row0 = (gid / 16);
        const int q1 = (gid % 16);
        const int i2 = ((((q1 / jj) * 2) * jj) + (q1 % jj));
        const int l3 = (i2 + jj);
        const int base4 = (row0 * 32);
        const int v5 = (base4 + i2);
        const int v6 = (base4 + l3);
        const int v7 = idx0[v5];
        const int v8 = idx0[v6];
        const float v9 = key1[v5];
        const float v10 = key1[v6];
        const bool v11 = ((i2 & kk) == 0);
        const bool v12 = (v10 != v10);
        const bool v13 = (v9 != v9);
        const bool v14 = (((!v12) && v13) || (v10 < v9));
        const bool v15 = ((v10 == v9) || (v12 && v13));
        const bool v16 = (v14 || (v15 && (v8 < v7)));
        const bool v17 = (v8 >= 20);
        const bool v18 = (v7 >= 20);
        const bool v19 = (((!v17) && v18) || ((((!v17) && (!v18)) && v16) || ((v17 && v18) && (v8 < v7))));
        const bool v20 = (((!v13) && v12) || (v9 < v10));
        const bool v21 = ((v9 == v10) || (v13 && v12));
        const bool v22 = (v20 || (v21 && (v7 < v8)));
        const bool v23 = (((!v18) && v17) || ((((!v18) && (!v17)) && v22) || ((v18 && v17) && (v7 < v8))));
        const bool v24 = ((v11 && v19) || ((!v11) && v23));
        if (v24) {
            idx0[v5] = v8;
            idx0[v6] = v7;
            key1[v5] = v10;
            key1[v6] = v9;
        }
    }
}

__kernel void sort_gather(__global const int* restrict idx0, __global int* restrict out1) {
    const int gid = ((int)get_global_id(0));
    if (gid < 20) {
        const int row0 = (gid / 20);
        const int t1 = (gid % 20);
        const int v2 = idx0[((row0 * 32) + t1)];
        out1[t1] = v2;
    }
}
