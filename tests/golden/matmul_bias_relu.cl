__kernel __attribute__((reqd_work_group_size(16, 8, 1))) void dot_tiled_dot_general_broadcast_in_dim_add_max(__global const float* restrict lhs0, __global const float* restrict rhs1, const int M, const int N, const int K, const int a_off, const int a_sb, const int a_sm, const int a_sk, const int b_off, const int b_sb, const int b_sk, const int b_sn, __global const float* restrict in2, __global float* restrict out3) {
    const int row00 = (((int)get_group_id(1)) * 64);
    const int col01 = (((int)get_group_id(0)) * 64);
    const int tid2 = ((((int)get_local_id(1)) * 16) + ((int)get_local_id(0)));
    const int v3 = (a_off + (((int)get_group_id(2)) * a_sb));
    const int v4 = (b_off + (((int)get_group_id(2)) * b_sb));
    __local float As5[1024];
    __local float Bs6[1024];
    float acc7[32];
    float a8[8];
    float b9[4];
    for (int r10 = 0; r10 < 32; r10++) {
        acc7[r10] = 0.0f;
    }
    const int v11 = (M - 1);
    const int v12 = (N - 1);
    const int v13 = (K - 1);
    for (int r14 = 0; r14 < K; r14 += 16) {
        for (int r15 = tid2; r15 < 1024; r15 += 128) {
            const int v16 = (r15 / 16);
            const int v17 = (r15 % 16);
            const int v18 = (row00 + v16);
            const int v19 = (r14 + v17);
            const bool v20 = ((v18 < M) && (v19 < K));
            const int v21 = ((v18 < M) ? v18 : v11);
            const int v22 = ((v19 < K) ? v19 : v13);
            const float v23 = lhs0[(v3 + ((v21 * a_sm) + (v22 * a_sk)))];
            As5[((v17 * 64) + v16)] = (v20 ? v23 : 0.0f);
        }
        for (int r24 = tid2; r24 < 1024; r24 += 128) {
            const int v25 = (r24 / 64);
            const int v26 = (r24 % 64);
            const int v27 = (r14 + v25);
            const int v28 = (col01 + v26);
            const bool v29 = ((v27 < K) && (v28 < N));
            const int v30 = ((v27 < K) ? v27 : v13);
            const int v31 = ((v28 < N) ? v28 : v12);
            const float v32 = rhs1[(v4 + ((v30 * b_sk) + (v31 * b_sn)))];
            Bs6[((v25 * 64) + v26)] = (v29 ? v32 : 0.0f);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int r33 = 0; r33 < 16; r33++) {
            for (int r34 = 0; r34 < 8; r34++) {
                const float v35 = As5[((r33 * 64) + ((((int)get_local_id(1)) * 8) + r34))];
                a8[r34] = v35;
            }
            for (int r36 = 0; r36 < 4; r36++) {
                const float v37 = Bs6[((r33 * 64) + (((int)get_local_id(0)) + (r36 * 16)))];
                b9[r36] = v37;
            }
            for (int r38 = 0; r38 < 8; r38++) {
                for (int r39 = 0; r39 < 4; r39++) {
                    const int v40 = ((r38 * 4) + r39);
                    const float v41 = a8[r38];
                    const float v42 = b9[r39];
                    const float v43 = (v41 * v42);
                    const float v44 = acc7[v40];
                    acc7[v40] = (v44 + v43);
                }
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    for (int r45 = 0; r45 < 8; r45++) {
        for (int r46 = 0; r46 < 4; r46++) {
            const int gi47 = (row00 + ((((int)get_local_id(1)) * 8) + r45));
            const int gj48 = (col01 + (((int)get_local_id(0)) + (r46 * 16)));
            if ((gi47 < M) && (gj48 < N)) {
                const float v49 = acc7[((r45 * 4) + r46)];
                const int o50 = ((((((int)get_group_id(2)) * 64) + gi47) * 128) + gj48);
                const float v51 = in2[gj48];
                const float v52 = (v49 + v51);
                const float v53 = ((v52 <= 0.0f) ? 0.0f : v52);
                out3[o50] = v53;
            }
        }
    }
}
