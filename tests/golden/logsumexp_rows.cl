__kernel __attribute__((reqd_work_group_size(128, 1, 1))) void reduce_reduce_max(const int R, const int I, __global const float* restrict in0, __global float* restrict out1) {
    const int base0 = ((((((int)get_group_id(0)) / I) * R) * I) + (((int)get_group_id(0)) % I));
    float acc1 = (-(float)INFINITY);
    for (int r2 = ((int)get_local_id(0)); r2 < R; r2 += 128) {
        const int v3 = (base0 + (r2 * I));
        const float v4 = in0[v3];
        acc1 = ((((acc1 > v4) && (!isnan(v4))) || isnan(acc1)) ? acc1 : v4);
    }
    __local float red5[128];
    red5[((int)get_local_id(0))] = acc1;
    barrier(CLK_LOCAL_MEM_FENCE);
    if ((((int)get_local_id(0)) < 64)) {
        const int v6 = (((int)get_local_id(0)) + 64);
        const float v7 = red5[((int)get_local_id(0))];
        const float v8 = red5[v6];
        const float v9 = ((((v7 > v8) && (!isnan(v8))) || isnan(v7)) ? v7 : v8);
        red5[((int)get_local_id(0))] = v9;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if ((((int)get_local_id(0)) < 32)) {
        const int v10 = (((int)get_local_id(0)) + 32);
        const float v11 = red5[((int)get_local_id(0))];
        const float v12 = red5[v10];
        const float v13 = ((((v11 > v12) && (!isnan(v12))) || isnan(v11)) ? v11 : v12);
        red5[((int)get_local_id(0))] = v13;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if ((((int)get_local_id(0)) < 16)) {
        const int v14 = (((int)get_local_id(0)) + 16);
        const float v15 = red5[((int)get_local_id(0))];
        const float v16 = red5[v14];
        const float v17 = ((((v15 > v16) && (!isnan(v16))) || isnan(v15)) ? v15 : v16);
        red5[((int)get_local_id(0))] = v17;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if ((((int)get_local_id(0)) < 8)) {
        const int v18 = (((int)get_local_id(0)) + 8);
        const float v19 = red5[((int)get_local_id(0))];
        const float v20 = red5[v18];
        const float v21 = ((((v19 > v20) && (!isnan(v20))) || isnan(v19)) ? v19 : v20);
        red5[((int)get_local_id(0))] = v21;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if ((((int)get_local_id(0)) < 4)) {
        const int v22 = (((int)get_local_id(0)) + 4);
        const float v23 = red5[((int)get_local_id(0))];
        const float v24 = red5[v22];
        const float v25 = ((((v23 > v24) && (!isnan(v24))) || isnan(v23)) ? v23 : v24);
        red5[((int)get_local_id(0))] = v25;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if ((((int)get_local_id(0)) < 2)) {
        const int v26 = (((int)get_local_id(0)) + 2);
        const float v27 = red5[((int)get_local_id(0))];
        const float v28 = red5[v26];
        const float v29 = ((((v27 > v28) && (!isnan(v28))) || isnan(v27)) ? v27 : v28);
        red5[((int)get_local_id(0))] = v29;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if ((((int)get_local_id(0)) < 1)) {
        const int v30 = (((int)get_local_id(0)) + 1);
        const float v31 = red5[((int)get_local_id(0))];
        const float v32 = red5[v30];
        const float v33 = ((((v31 > v32) && (!isnan(v32))) || isnan(v31)) ? v31 : v32);
        red5[((int)get_local_id(0))] = v33;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if ((((int)get_local_id(0)) == 0)) {
        const float v34 = red5[0];
        out1[((int)get_group_id(0))] = v34;
    }
}

__kernel __attribute__((reqd_work_group_size(128, 1, 1))) void reduce_reshape_broadcast_in_dim_sub_exp(__global const float* restrict in0, __global const float* restrict in1, __global float* restrict out2) {
    const int i0 = ((int)get_group_id(0));
    float acc0 = 0.0f;
    for (int r1 = ((int)get_local_id(0)); r1 < 300; r1 += 128) {
        const float v2 = in0[((i0 * 300) + r1)];
        const float v3 = in1[i0];
        const float v4 = (v2 - v3);
        const float v5 = exp(v4);
        acc0 = (acc0 + v5);
    }
    __local float red6[128];
    red6[((int)get_local_id(0))] = acc0;
    barrier(CLK_LOCAL_MEM_FENCE);
    if ((((int)get_local_id(0)) < 64)) {
        const int v7 = (((int)get_local_id(0)) + 64);
        const float v8 = red6[((int)get_local_id(0))];
        const float v9 = red6[v7];
        const float v10 = (v8 + v9);
        red6[((int)get_local_id(0))] = v10;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if ((((int)get_local_id(0)) < 32)) {
        const int v11 = (((int)get_local_id(0)) + 32);
        const float v12 = red6[((int)get_local_id(0))];
        const float v13 = red6[v11];
        const float v14 = (v12 + v13);
        red6[((int)get_local_id(0))] = v14;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if ((((int)get_local_id(0)) < 16)) {
        const int v15 = (((int)get_local_id(0)) + 16);
        const float v16 = red6[((int)get_local_id(0))];
        const float v17 = red6[v15];
        const float v18 = (v16 + v17);
        red6[((int)get_local_id(0))] = v18;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if ((((int)get_local_id(0)) < 8)) {
        const int v19 = (((int)get_local_id(0)) + 8);
        const float v20 = red6[((int)get_local_id(0))];
        const float v21 = red6[v19];
        const float v22 = (v20 + v21);
        red6[((int)get_local_id(0))] = v22;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if ((((int)get_local_id(0)) < 4)) {
        const int v23 = (((int)get_local_id(0)) + 4);
        const float v24 = red6[((int)get_local_id(0))];
        const float v25 = red6[v23];
        const float v26 = (v24 + v25);
        red6[((int)get_local_id(0))] = v26;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if ((((int)get_local_id(0)) < 2)) {
        const int v27 = (((int)get_local_id(0)) + 2);
        const float v28 = red6[((int)get_local_id(0))];
        const float v29 = red6[v27];
        const float v30 = (v28 + v29);
        red6[((int)get_local_id(0))] = v30;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if ((((int)get_local_id(0)) < 1)) {
        const int v31 = (((int)get_local_id(0)) + 1);
        const float v32 = red6[((int)get_local_id(0))];
        const float v33 = red6[v31];
        const float v34 = (v32 + v33);
        red6[((int)get_local_id(0))] = v34;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if ((((int)get_local_id(0)) == 0)) {
        const float v35 = red6[0];
        const float v36 = log(v35);
        out2[((int)get_group_id(0))] = v36;
    }
}
