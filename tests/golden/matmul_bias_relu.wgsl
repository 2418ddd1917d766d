@group(0) @binding(0) var<storage, read> lhs0: array<f32>;
@group(0) @binding(1) var<storage, read> rhs1: array<f32>;
@group(0) @binding(2) var<storage, read> in2: array<f32>;
@group(0) @binding(3) var<storage, read_write> out3: array<f32>;
struct FaArgs {
    M: i32,
    N: i32,
    K: i32,
    a_off: i32,
    a_sb: i32,
    a_sm: i32,
    a_sk: i32,
    b_off: i32,
    b_sb: i32,
    b_sk: i32,
    b_sn: i32,
}
@group(0) @binding(4) var<uniform> fa_args: FaArgs;
var<workgroup> As5: array<f32, 1024>;
var<workgroup> Bs6: array<f32, 1024>;

@compute @workgroup_size(16, 8, 1)
fn dot_tiled_dot_general_broadcast_in_dim_add_max(@builtin(global_invocation_id) fa_gid: vec3<u32>, @builtin(local_invocation_id) fa_lid: vec3<u32>, @builtin(workgroup_id) fa_wid: vec3<u32>, @builtin(num_workgroups) fa_nwg: vec3<u32>) {
    let M: i32 = fa_args.M;
    let N: i32 = fa_args.N;
    let K: i32 = fa_args.K;
    let a_off: i32 = fa_args.a_off;
    let a_sb: i32 = fa_args.a_sb;
    let a_sm: i32 = fa_args.a_sm;
    let a_sk: i32 = fa_args.a_sk;
    let b_off: i32 = fa_args.b_off;
    let b_sb: i32 = fa_args.b_sb;
    let b_sk: i32 = fa_args.b_sk;
    let b_sn: i32 = fa_args.b_sn;
    let row00: i32 = (i32(fa_wid.y) * 64i);
    let col01: i32 = (i32(fa_wid.x) * 64i);
    let tid2: i32 = ((i32(fa_lid.y) * 16i) + i32(fa_lid.x));
    let v3: i32 = (a_off + (i32(fa_wid.z) * a_sb));
    let v4: i32 = (b_off + (i32(fa_wid.z) * b_sb));
    var acc7: array<f32, 32>;
    var a8: array<f32, 8>;
    var b9: array<f32, 4>;
    for (var r10: i32 = 0i; r10 < 32i; r10 += 1i) {
        acc7[r10] = 0.0f;
    }
    let v11: i32 = (M - 1i);
    let v12: i32 = (N - 1i);
    let v13: i32 = (K - 1i);
    for (var r14: i32 = 0i; r14 < K; r14 += 16i) {
        for (var r15: i32 = tid2; r15 < 1024i; r15 += 128i) {
            let v16: i32 = (r15 / 16i);
            let v17: i32 = (r15 % 16i);
            let v18: i32 = (row00 + v16);
            let v19: i32 = (r14 + v17);
            let v20: bool = ((v18 < M) && (v19 < K));
            let v21: i32 = select(v11, v18, (v18 < M));
            let v22: i32 = select(v13, v19, (v19 < K));
            let v23: f32 = lhs0[(v3 + ((v21 * a_sm) + (v22 * a_sk)))];
            As5[((v17 * 64i) + v16)] = select(0.0f, v23, v20);
        }
        for (var r24: i32 = tid2; r24 < 1024i; r24 += 128i) {
            let v25: i32 = (r24 / 64i);
            let v26: i32 = (r24 % 64i);
            let v27: i32 = (r14 + v25);
            let v28: i32 = (col01 + v26);
            let v29: bool = ((v27 < K) && (v28 < N));
            let v30: i32 = select(v13, v27, (v27 < K));
            let v31: i32 = select(v12, v28, (v28 < N));
            let v32: f32 = rhs1[(v4 + ((v30 * b_sk) + (v31 * b_sn)))];
            Bs6[((v25 * 64i) + v26)] = select(0.0f, v32, v29);
        }
        workgroupBarrier();
        for (var r33: i32 = 0i; r33 < 16i; r33 += 1i) {
            for (var r34: i32 = 0i; r34 < 8i; r34 += 1i) {
                let v35: f32 = As5[((r33 * 64i) + ((i32(fa_lid.y) * 8i) + r34))];
                a8[r34] = v35;
            }
            for (var r36: i32 = 0i; r36 < 4i; r36 += 1i) {
                let v37: f32 = Bs6[((r33 * 64i) + (i32(fa_lid.x) + (r36 * 16i)))];
                b9[r36] = v37;
            }
            for (var r38: i32 = 0i; r38 < 8i; r38 += 1i) {
                for (var r39: i32 = 0i; r39 < 4i; r39 += 1i) {
                    let v40: i32 = ((r38 * 4i) + r39);
                    let v41: f32 = a8[r38];
                    let v42: f32 = b9[r39];
                    let v43: f32 = (v41 * v42);
                    let v44: f32 = acc7[v40];
                    acc7[v40] = (v44 + v43);
                }
            }
        }
        workgroupBarrier();
    }
    for (var r45: i32 = 0i; r45 < 8i; r45 += 1i) {
        for (var r46: i32 = 0i; r46 < 4i; r46 += 1i) {
            let gi47: i32 = (row00 + ((i32(fa_lid.y) * 8i) + r45));
            let gj48: i32 = (col01 + (i32(fa_lid.x) + (r46 * 16i)));
            if (((gi47 < M) && (gj48 < N))) {
                let v49: f32 = acc7[((r45 * 4i) + r46)];
                let o50: i32 = ((((i32(fa_wid.z) * 64i) + gi47) * 128i) + gj48);
                let v51: f32 = in2[gj48];
                let v52: f32 = (v49 + v51);
                let v53: f32 = select(v52, 0.0f, ((v52 <= 0.0f) && (!((bitcast<u32>(v52) & 0x7fffffffu) > 0x7f800000u))));
                out3[o50] = v53;
            }
        }
    }
}
