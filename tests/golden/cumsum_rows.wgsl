@group(0) @binding(0) var<storage, read> in0: array<f32>;
@group(0) @binding(1) var<storage, read_write> out1: array<f32>;
struct FaArgs {
    lines: i32,
    L: i32,
    I: i32,
}
@group(0) @binding(2) var<uniform> fa_args: FaArgs;

@compute @workgroup_size(64, 1, 1)
fn scan_cumsum(@builtin(global_invocation_id) fa_gid: vec3<u32>, @builtin(local_invocation_id) fa_lid: vec3<u32>, @builtin(workgroup_id) fa_wid: vec3<u32>, @builtin(num_workgroups) fa_nwg: vec3<u32>) {
    let lines: i32 = fa_args.lines;
    let L: i32 = fa_args.L;
    let I: i32 = fa_args.I;
    let gid: i32 = i32(fa_gid.x);
    if ((gid < lines)) {
        let base0: i32 = ((((gid / I) * L) * I) + (gid - ((gid / I) * I)));
        let v1: f32 = in0[base0];
        var acc2: f32 = v1;
        out1[base0] = acc2;
        for (var r3: i32 = 1i; r3 < L; r3 += 1i) {
            let pos4: i32 = (base0 + (r3 * I));
            let v5: f32 = in0[pos4];
            acc2 = (acc2 + v5);
            out1[pos4] = acc2;
        }
    }
}
