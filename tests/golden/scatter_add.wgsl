@group(0) @binding(0) var<storage, read> in0: array<f32>;
@group(0) @binding(1) var<storage, read> in1: array<i32>;
@group(0) @binding(2) var<storage, read> in2: array<f32>;
@group(0) @binding(3) var<storage, read_write> out3: array<f32>;

@compute @workgroup_size(64, 1, 1)
fn scatter_lt_add_select_n_reshape(@builtin(global_invocation_id) fa_gid: vec3<u32>, @builtin(local_invocation_id) fa_lid: vec3<u32>, @builtin(workgroup_id) fa_wid: vec3<u32>, @builtin(num_workgroups) fa_nwg: vec3<u32>) {
    let gid: i32 = i32(fa_gid.x);
    if ((gid < 30i)) {
        let i0: i32 = (gid / 3i);
        let i1: i32 = (gid % 3i);
        let v0: f32 = in0[((i0 * 3i) + i1)];
        var acc1: f32 = v0;
        for (var r2: i32 = 0i; r2 < 7i; r2 += 1i) {
            let v3: i32 = in1[r2];
            let v4: bool = (v3 < 0i);
            let v5: i32 = bitcast<i32>((bitcast<u32>(v3) + 10u));
            let v6: i32 = select(v3, v5, v4);
            let v7: bool = (v6 == i0);
            if (v7) {
                let v8: f32 = in2[(i1 + (r2 * 3i))];
                acc1 = (acc1 + v8);
            }
        }
        out3[gid] = acc1;
    }
}
