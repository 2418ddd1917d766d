@group(0) @binding(0) var<storage, read> in0: array<f32>;
@group(0) @binding(1) var<storage, read_write> out1: array<f32>;
var<workgroup> red3: array<f32, 128>;
var<workgroup> red38: array<f32, 128>;

fn fa_f32_bits(b: u32) -> f32 {
    return bitcast<f32>(b);
}

@compute @workgroup_size(128, 1, 1)
fn reduce_reduce_max_reshape_broadcast_in_dim_sub(@builtin(global_invocation_id) fa_gid: vec3<u32>, @builtin(local_invocation_id) fa_lid: vec3<u32>, @builtin(workgroup_id) fa_wid: vec3<u32>, @builtin(num_workgroups) fa_nwg: vec3<u32>) {
    let i0: i32 = i32(fa_wid.x);
    var acc0: f32 = fa_f32_bits(0xff800000u);
    for (var r1: i32 = i32(fa_lid.x); r1 < 300i; r1 += 128i) {
        let v2: f32 = in0[((i0 * 300i) + r1)];
        acc0 = select(v2, acc0, (((acc0 > v2) && (!((bitcast<u32>(v2) & 0x7fffffffu) > 0x7f800000u))) || ((bitcast<u32>(acc0) & 0x7fffffffu) > 0x7f800000u)));
    }
    red3[i32(fa_lid.x)] = acc0;
    workgroupBarrier();
    if ((i32(fa_lid.x) < 64i)) {
        let v4: i32 = (i32(fa_lid.x) + 64i);
        let v5: f32 = red3[i32(fa_lid.x)];
        let v6: f32 = red3[v4];
        let v7: f32 = select(v6, v5, (((v5 > v6) && (!((bitcast<u32>(v6) & 0x7fffffffu) > 0x7f800000u))) || ((bitcast<u32>(v5) & 0x7fffffffu) > 0x7f800000u)));
        red3[i32(fa_lid.x)] = v7;
    }
    workgroupBarrier();
    if ((i32(fa_lid.x) < 32i)) {
        let v8: i32 = (i32(fa_lid.x) + 32i);
        let v9: f32 = red3[i32(fa_lid.x)];
        let v10: f32 = red3[v8];
        let v11: f32 = select(v10, v9, (((v9 > v10) && (!((bitcast<u32>(v10) & 0x7fffffffu) > 0x7f800000u))) || ((bitcast<u32>(v9) & 0x7fffffffu) > 0x7f800000u)));
        red3[i32(fa_lid.x)] = v11;
    }
    workgroupBarrier();
    if ((i32(fa_lid.x) < 16i)) {
        let v12: i32 = (i32(fa_lid.x) + 16i);
        let v13: f32 = red3[i32(fa_lid.x)];
        let v14: f32 = red3[v12];
        let v15: f32 = select(v14, v13, (((v13 > v14) && (!((bitcast<u32>(v14) & 0x7fffffffu) > 0x7f800000u))) || ((bitcast<u32>(v13) & 0x7fffffffu) > 0x7f800000u)));
        red3[i32(fa_lid.x)] = v15;
    }
    workgroupBarrier();
    if ((i32(fa_lid.x) < 8i)) {
        let v16: i32 = (i32(fa_lid.x) + 8i);
        let v17: f32 = red3[i32(fa_lid.x)];
        let v18: f32 = red3[v16];
        let v19: f32 = select(v18, v17, (((v17 > v18) && (!((bitcast<u32>(v18) & 0x7fffffffu) > 0x7f800000u))) || ((bitcast<u32>(v17) & 0x7fffffffu) > 0x7f800000u)));
        red3[i32(fa_lid.x)] = v19;
    }
    workgroupBarrier();
    if ((i32(fa_lid.x) < 4i)) {
        let v20: i32 = (i32(fa_lid.x) + 4i);
        let v21: f32 = red3[i32(fa_lid.x)];
        let v22: f32 = red3[v20];
        let v23: f32 = select(v22, v21, (((v21 > v22) && (!((bitcast<u32>(v22) & 0x7fffffffu) > 0x7f800000u))) || ((bitcast<u32>(v21) & 0x7fffffffu) > 0x7f800000u)));
        red3[i32(fa_lid.x)] = v23;
    }
    workgroupBarrier();
    if ((i32(fa_lid.x) < 2i)) {
        let v24: i32 = (i32(fa_lid.x) + 2i);
        let v25: f32 = red3[i32(fa_lid.x)];
        let v26: f32 = red3[v24];
        let v27: f32 = select(v26, v25, (((v25 > v26) && (!((bitcast<u32>(v26) & 0x7fffffffu) > 0x7f800000u))) || ((bitcast<u32>(v25) & 0x7fffffffu) > 0x7f800000u)));
        red3[i32(fa_lid.x)] = v27;
    }
    workgroupBarrier();
    if ((i32(fa_lid.x) < 1i)) {
        let v28: i32 = (i32(fa_lid.x) + 1i);
        let v29: f32 = red3[i32(fa_lid.x)];
        let v30: f32 = red3[v28];
        let v31: f32 = select(v30, v29, (((v29 > v30) && (!((bitcast<u32>(v30) & 0x7fffffffu) > 0x7f800000u))) || ((bitcast<u32>(v29) & 0x7fffffffu) > 0x7f800000u)));
        red3[i32(fa_lid.x)] = v31;
    }
    workgroupBarrier();
    let v32: f32 = red3[0i];
    var acc33: f32 = 0.0f;
    for (var r34: i32 = i32(fa_lid.x); r34 < 300i; r34 += 128i) {
        let v35: f32 = in0[((i0 * 300i) + r34)];
        let v36: f32 = (v35 - v32);
        let v37: f32 = exp(v36);
        acc33 = (acc33 + v37);
    }
    red38[i32(fa_lid.x)] = acc33;
    workgroupBarrier();
    if ((i32(fa_lid.x) < 64i)) {
        let v39: i32 = (i32(fa_lid.x) + 64i);
        let v40: f32 = red38[i32(fa_lid.x)];
        let v41: f32 = red38[v39];
        let v42: f32 = (v40 + v41);
        red38[i32(fa_lid.x)] = v42;
    }
    workgroupBarrier();
    if ((i32(fa_lid.x) < 32i)) {
        let v43: i32 = (i32(fa_lid.x) + 32i);
        let v44: f32 = red38[i32(fa_lid.x)];
        let v45: f32 = red38[v43];
        let v46: f32 = (v44 + v45);
        red38[i32(fa_lid.x)] = v46;
    }
    workgroupBarrier();
    if ((i32(fa_lid.x) < 16i)) {
        let v47: i32 = (i32(fa_lid.x) + 16i);
        let v48: f32 = red38[i32(fa_lid.x)];
        let v49: f32 = red38[v47];
        let v50: f32 = (v48 + v49);
        red38[i32(fa_lid.x)] = v50;
    }
    workgroupBarrier();
    if ((i32(fa_lid.x) < 8i)) {
        let v51: i32 = (i32(fa_lid.x) + 8i);
        let v52: f32 = red38[i32(fa_lid.x)];
        let v53: f32 = red38[v51];
        let v54: f32 = (v52 + v53);
        red38[i32(fa_lid.x)] = v54;
    }
    workgroupBarrier();
    if ((i32(fa_lid.x) < 4i)) {
        let v55: i32 = (i32(fa_lid.x) + 4i);
        let v56: f32 = red38[i32(fa_lid.x)];
        let v57: f32 = red38[v55];
        let v58: f32 = (v56 + v57);
        red38[i32(fa_lid.x)] = v58;
    }
    workgroupBarrier();
    if ((i32(fa_lid.x) < 2i)) {
        let v59: i32 = (i32(fa_lid.x) + 2i);
        let v60: f32 = red38[i32(fa_lid.x)];
        let v61: f32 = red38[v59];
        let v62: f32 = (v60 + v61);
        red38[i32(fa_lid.x)] = v62;
    }
    workgroupBarrier();
    if ((i32(fa_lid.x) < 1i)) {
        let v63: i32 = (i32(fa_lid.x) + 1i);
        let v64: f32 = red38[i32(fa_lid.x)];
        let v65: f32 = red38[v63];
        let v66: f32 = (v64 + v65);
        red38[i32(fa_lid.x)] = v66;
    }
    workgroupBarrier();
    let v67: f32 = red38[0i];
    if ((i32(fa_lid.x) == 0i)) {
        let v68: f32 = select(log(v67), fa_f32_bits(0x7fc00000u), (v67 < 0.0f));
        out1[i32(fa_wid.x)] = v68;
    }
}
