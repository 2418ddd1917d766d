@group(0) @binding(0) var<storage, read_write> idx0: array<i32>;
@group(0) @binding(1) var<storage, read> in1: array<f32>;
@group(0) @binding(2) var<storage, read_write> key2: array<f32>;

@compute @workgroup_size(64, 1, 1)
fn sort_init(@builtin(global_invocation_id) fa_gid: vec3<u32>, @builtin(local_invocation_id) fa_lid: vec3<u32>, @builtin(workgroup_id) fa_wid: vec3<u32>, @builtin(num_workgroups) fa_nwg: vec3<u32>) {
    let gid: i32 = i32(fa_gid.x);
    if ((gid < 32i)) {
        let p1: i32 = (gid % 32i);
        idx0[gid] = p1;
        let v2: bool = (p1 < 20i);
        let v3: i32 = select(19i, p1, v2);
        let v4: f32 = in1[v3];
        key2[gid] = select(0.0f, v4, v2);
    }
}

@group(0) @binding(0) var<storage, read_write> idx0: array<i32>;
@group(0) @binding(1) var<storage, read_write> key1: array<f32>;
struct FaArgs {
    jj: i32,
    kk: i32,
}
@group(0) @binding(2) var<uniform> fa_args: FaArgs;

@compute @workgroup_size(64, 1, 1)
fn sort_step(@builtin(global_invocation_id) fa_gid: vec3<u32>, @builtin(local_invocation_id) fa_lid: vec3<u32>, @builtin(workgroup_id) fa_wid: vec3<u32>, @builtin(num_workgroups) fa_nwg: vec3<u32>) {
    let jj: i32 = fa_args.jj;
    let kk: i32 = fa_args.kk;
    let gid: i32 = i32(fa_gid.x);
    if ((gid < 16i)) {
        let row0: i32 = (gid / 16i);
        let q1: i32 = (gid % 16i);
        let i2: i32 = ((((q1 / jj) * 2i) * jj) + (q1 - ((q1 / jj) * jj)));
        let l3: i32 = (i2 + jj);
        let base4: i32 = (row0 * 32i);
        let v5: i32 = (base4 + i2);
        let v6: i32 = (base4 + l3);
        let v7: i32 = idx0[v5];
        let v8: i32 = idx0[v6];
        let v9: f32 = key1[v5];
        let v10: f32 = key1[v6];
        let v11: bool = ((i2 & kk) == 0i);
        let v12: bool = ((bitcast<u32>(v10) & 0x7fffffffu) > 0x7f800000u);
        let v13: bool = ((bitcast<u32>(v9) & 0x7fffffffu) > 0x7f800000u);
        let v14: bool = (((!v12) && v13) || (v10 < v9));
        let v15: bool = ((v10 == v9) || (v12 && v13));
        let v16: bool = (v14 || (v15 && (v8 < v7)));
        let v17: bool = (v8 >= 20i);
        let v18: bool = (v7 >= 20i);
        let v19: bool = (((!v17) && v18) || ((((!v17) && (!v18)) && v16) || ((v17 && v18) && (v8 < v7))));
        let v20: bool = (((!v13) && v12) || (v9 < v10));
        let v21: bool = ((v9 == v10) || (v13 && v12));
        let v22: bool = (v20 || (v21 && (v7 < v8)));
        let v23: bool = (((!v18) && v17) || ((((!v18) && (!v17)) && v22) || ((v18 && v17) && (v7 < v8))));
        let v24: bool = ((v11 && v19) || ((!v11) && v23));
        if (v24) {
            idx0[v5] = v8;
            idx0[v6] = v7;
            key1[v5] = v10;
            key1[v6] = v9;
        }
    }
}

@group(0) @binding(0) var<storage, read> idx0: array<i32>;
@group(0) @binding(1) var<storage, read_write> out1: array<i32>;

@compute @workgroup_size(64, 1, 1)
fn sort_gather(@builtin(global_invocation_id) fa_gid: vec3<u32>, @builtin(local_invocation_id) fa_lid: vec3<u32>, @builtin(workgroup_id) fa_wid: vec3<u32>, @builtin(num_workgroups) fa_nwg: vec3<u32>) {
    let gid: i32 = i32(fa_gid.x);
    if ((gid < 20i)) {
        let row0: i32 = (gid / 20i);
        let t1: i32 = (gid % 20i);
        let v2: i32 = idx0[((row0 * 32i) + t1)];
        out1[t1] = v2;
    }
}
