@group(0) @binding(0) var<storage, read> in0: array<i32>;
@group(0) @binding(1) var<storage, read> in1: array<f32>;
@group(0) @binding(2) var<storage, read_write> out2: array<f32>;

@compute @workgroup_size(64, 1, 1)
fn map_lt_add_select_n_reshape(@builtin(global_invocation_id) fa_gid: vec3<u32>, @builtin(local_invocation_id) fa_lid: vec3<u32>, @builtin(workgroup_id) fa_wid: vec3<u32>, @builtin(num_workgroups) fa_nwg: vec3<u32>) {
    let gid: i32 = i32(fa_gid.x);
    if ((gid < 21i)) {
        let i0: i32 = (gid / 7i);
        let i1: i32 = (gid % 7i);
        let v0: i32 = in0[i1];
        let v1: bool = (v0 < 0i);
        let v2: i32 = bitcast<i32>((bitcast<u32>(v0) + 10u));
        let v3: i32 = select(v0, v2, v1);
        let v4: i32 = select(v3, 0i, (v3 < 0i));
        let v5: i32 = select(v4, 9i, (v4 > 9i));
        let v6: f32 = in1[(i0 + (v5 * 3i))];
        let v7: f32 = (v6 * 2.0f);
        out2[gid] = v7;
    }
}
