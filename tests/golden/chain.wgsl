@group(0) @binding(0) var<storage, read> in0: array<f32>;
@group(0) @binding(1) var<storage, read> in1: array<f32>;
@group(0) @binding(2) var<storage, read> in2: array<f32>;
@group(0) @binding(3) var<storage, read_write> out3: array<f32>;
struct FaArgs {
    n: i32,
}
@group(0) @binding(4) var<uniform> fa_args: FaArgs;

@compute @workgroup_size(64, 1, 1)
fn map_mul_add_tanh(@builtin(global_invocation_id) fa_gid: vec3<u32>, @builtin(local_invocation_id) fa_lid: vec3<u32>, @builtin(workgroup_id) fa_wid: vec3<u32>, @builtin(num_workgroups) fa_nwg: vec3<u32>) {
    let n: i32 = fa_args.n;
    let gid: i32 = i32(fa_gid.x);
    if ((gid < n)) {
        let v0: f32 = in0[gid];
        let v1: f32 = in1[gid];
        let v2: f32 = (v0 * v1);
        let v3: f32 = in2[gid];
        let v4: f32 = (v2 + v3);
        let v5: f32 = select(tanh(v4), v4, (((bitcast<u32>(v4) & 0x7fffffffu) > 0x7f800000u) || (v4 == 0.0f)));
        let v6: f32 = (v5 * v1);
        let v7: f32 = (v6 + 1.0f);
        out3[gid] = v7;
    }
}
