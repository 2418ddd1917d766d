@group(0) @binding(0) var<storage, read> in0: array<f32>;
@group(0) @binding(1) var<storage, read> in1: array<f32>;
@group(0) @binding(2) var<storage, read_write> out2: array<f32>;
struct FaArgs {
    n: i32,
}
@group(0) @binding(3) var<uniform> fa_args: FaArgs;

fn fa_f32_bits(b: u32) -> f32 {
    return bitcast<f32>(b);
}

@compute @workgroup_size(64, 1, 1)
fn map_tanh_erf_add_lgamma(@builtin(global_invocation_id) fa_gid: vec3<u32>, @builtin(local_invocation_id) fa_lid: vec3<u32>, @builtin(workgroup_id) fa_wid: vec3<u32>, @builtin(num_workgroups) fa_nwg: vec3<u32>) {
    let n: i32 = fa_args.n;
    let gid: i32 = i32(fa_gid.x);
    if ((gid < n)) {
        let v0: f32 = in0[gid];
        let v1: f32 = select(tanh(v0), v0, (((bitcast<u32>(v0) & 0x7fffffffu) > 0x7f800000u) || (v0 == 0.0f)));
        let fa_t1: f32 = bitcast<f32>((bitcast<u32>(v0) & 0x7fffffffu));
        let fa_t2: f32 = (v0 * v0);
        let fa_t3: f32 = (1.0f / (1.0f + (0.5f * fa_t1)));
        let fa_t4: f32 = (1.0f - (fa_t3 * exp(((((-fa_t1) * fa_t1) - 1.2655122f) + (fa_t3 * (1.0000237f + (fa_t3 * (0.37409195f + (fa_t3 * (0.09678418f + (fa_t3 * ((-0.18628806f) + (fa_t3 * (0.27886808f + (fa_t3 * ((-1.135204f) + (fa_t3 * (1.4885159f + (fa_t3 * ((-0.82215226f) + (fa_t3 * 0.17087276f)))))))))))))))))))));
        let v2: f32 = select(select(select(fa_t4, (-fa_t4), (v0 < 0.0f)), ((1.1283792f * v0) * (((((((((((((((-1.3227513e-05f) * fa_t2) + 0.00010683761f) * fa_t2) - 0.00075757573f) * fa_t2) + 0.0046296297f) * fa_t2) - 0.023809524f) * fa_t2) + 0.1f) * fa_t2) - 0.33333334f) * fa_t2) + 1.0f)), (fa_t1 < 0.5f)), v0, ((bitcast<u32>(v0) & 0x7fffffffu) > 0x7f800000u));
        let v3: f32 = (v1 + v2);
        let v4: f32 = in1[gid];
        let fa_t5: bool = (v4 >= 0.5f);
        let fa_t6: f32 = select((1.0f - v4), v4, fa_t5);
        let fa_t7: bool = (fa_t6 < 8.0f);
        let fa_t8: f32 = select(1.0f, fa_t6, fa_t7);
        let fa_t9: f32 = select(fa_t6, (fa_t6 + 1.0f), fa_t7);
        let fa_t10: bool = (fa_t9 < 8.0f);
        let fa_t11: f32 = select(fa_t8, (fa_t8 * fa_t9), fa_t10);
        let fa_t12: f32 = select(fa_t9, (fa_t9 + 1.0f), fa_t10);
        let fa_t13: bool = (fa_t12 < 8.0f);
        let fa_t14: f32 = select(fa_t11, (fa_t11 * fa_t12), fa_t13);
        let fa_t15: f32 = select(fa_t12, (fa_t12 + 1.0f), fa_t13);
        let fa_t16: bool = (fa_t15 < 8.0f);
        let fa_t17: f32 = select(fa_t14, (fa_t14 * fa_t15), fa_t16);
        let fa_t18: f32 = select(fa_t15, (fa_t15 + 1.0f), fa_t16);
        let fa_t19: bool = (fa_t18 < 8.0f);
        let fa_t20: f32 = select(fa_t17, (fa_t17 * fa_t18), fa_t19);
        let fa_t21: f32 = select(fa_t18, (fa_t18 + 1.0f), fa_t19);
        let fa_t22: bool = (fa_t21 < 8.0f);
        let fa_t23: f32 = select(fa_t20, (fa_t20 * fa_t21), fa_t22);
        let fa_t24: f32 = select(fa_t21, (fa_t21 + 1.0f), fa_t22);
        let fa_t25: bool = (fa_t24 < 8.0f);
        let fa_t26: f32 = select(fa_t23, (fa_t23 * fa_t24), fa_t25);
        let fa_t27: f32 = select(fa_t24, (fa_t24 + 1.0f), fa_t25);
        let fa_t28: bool = (fa_t27 < 8.0f);
        let fa_t29: f32 = select(fa_t26, (fa_t26 * fa_t27), fa_t28);
        let fa_t30: f32 = select(fa_t27, (fa_t27 + 1.0f), fa_t28);
        let fa_t31: f32 = (1.0f / fa_t30);
        let fa_t32: f32 = (fa_t31 * fa_t31);
        let fa_t33: f32 = ((((((fa_t30 - 0.5f) * log(fa_t30)) - fa_t30) + 0.9189385f) + (fa_t31 * (0.083333336f - (fa_t32 * (0.0027777778f - (fa_t32 * (0.0007936508f - (fa_t32 * 0.0005952381f)))))))) - log(fa_t29));
        let fa_t34: f32 = (3.1415927f * (v4 - round(v4)));
        let fa_t35: f32 = (fa_t34 * fa_t34);
        let fa_t36: f32 = (fa_t34 * (1.0f - ((fa_t35 / 6.0f) * (1.0f - ((fa_t35 / 20.0f) * (1.0f - ((fa_t35 / 42.0f) * (1.0f - ((fa_t35 / 72.0f) * (1.0f - ((fa_t35 / 110.0f) * (1.0f - (fa_t35 / 156.0f)))))))))))));
        let v5: f32 = select(select(select(select(((1.1447299f - log(bitcast<f32>((bitcast<u32>(fa_t36) & 0x7fffffffu)))) - fa_t33), fa_f32_bits(0x7f800000u), (v4 == floor(v4))), fa_t33, fa_t5), fa_f32_bits(0x7f800000u), ((bitcast<u32>(v4) & 0x7fffffffu) == 0x7f800000u)), v4, ((bitcast<u32>(v4) & 0x7fffffffu) > 0x7f800000u));
        let v6: f32 = (v3 + v5);
        let fa_t37: f32 = (1.0f + v4);
        let fa_t38: f32 = (fa_t37 - 1.0f);
        let fa_t39: f32 = log(fa_t37);
        let v7: f32 = select(select((fa_t39 * (v4 / fa_t38)), fa_t39, (fa_t37 == fa_f32_bits(0x7f800000u))), v4, (fa_t38 == 0.0f));
        let v8: f32 = (v6 + v7);
        let fa_t40: f32 = exp(v0);
        let fa_t41: f32 = (fa_t40 - 1.0f);
        let v9: f32 = select(select(select((fa_t41 * (v0 / log(fa_t40))), fa_t40, (fa_t40 == fa_f32_bits(0x7f800000u))), (-1.0f), (fa_t41 == (-1.0f))), v0, (fa_t40 == 1.0f));
        let v10: f32 = (v8 + v9);
        let fa_t42: f32 = bitcast<f32>((bitcast<u32>(v0) & 0x7fffffffu));
        let fa_t43: f32 = exp2((log2(fa_t42) * 0.33333334f));
        let fa_t44: f32 = (fa_t43 - ((((fa_t43 * fa_t43) * fa_t43) - fa_t42) / ((3.0f * fa_t43) * fa_t43)));
        let v11: f32 = select(bitcast<f32>(((bitcast<u32>(fa_t44) & 0x7fffffffu) | (bitcast<u32>(v0) & 0x80000000u))), v0, (((fa_t42 == 0.0f) || ((bitcast<u32>(v0) & 0x7fffffffu) > 0x7f800000u)) || ((bitcast<u32>(v0) & 0x7fffffffu) == 0x7f800000u)));
        let v12: f32 = (v10 + v11);
        let fa_t45: f32 = bitcast<f32>((bitcast<u32>(v4) & 0x7fffffffu));
        let fa_t46: f32 = bitcast<f32>((bitcast<u32>(v0) & 0x7fffffffu));
        let fa_t47: bool = ((bitcast<u32>(v4) & 0x80000000u) != 0u);
        let fa_t48: bool = (fa_t46 > fa_t45);
        let fa_t49: f32 = (select(fa_t46, fa_t45, fa_t48) / select(fa_t45, fa_t46, fa_t48));
        let fa_t50: f32 = bitcast<f32>((bitcast<u32>(fa_t49) & 0x7fffffffu));
        let fa_t51: bool = (fa_t50 > 2.4142137f);
        let fa_t52: bool = (fa_t50 > 0.41421357f);
        let fa_t53: f32 = select(select(fa_t50, ((fa_t50 - 1.0f) / (fa_t50 + 1.0f)), fa_t52), ((-1.0f) / fa_t50), fa_t51);
        let fa_t54: f32 = (fa_t53 * fa_t53);
        let fa_t55: f32 = (select(select(0.0f, 0.7853982f, fa_t52), 1.5707964f, fa_t51) + (((((((((0.080537446f * fa_t54) - 0.13877685f) * fa_t54) + 0.19977711f) * fa_t54) - 0.3333295f) * fa_t54) * fa_t53) + fa_t53));
        let fa_t56: f32 = select(bitcast<f32>(((bitcast<u32>(fa_t55) & 0x7fffffffu) | (bitcast<u32>(fa_t49) & 0x80000000u))), fa_t49, ((bitcast<u32>(fa_t49) & 0x7fffffffu) > 0x7f800000u));
        let fa_t57: f32 = select(fa_t56, (1.5707964f - fa_t56), fa_t48);
        let fa_t58: f32 = select(select(select(fa_t57, (3.1415927f - fa_t57), fa_t47), select(0.0f, 3.1415927f, fa_t47), ((fa_t45 == 0.0f) && (fa_t46 == 0.0f))), select(0.7853982f, 2.3561945f, fa_t47), (((bitcast<u32>(fa_t45) & 0x7fffffffu) == 0x7f800000u) && ((bitcast<u32>(fa_t46) & 0x7fffffffu) == 0x7f800000u)));
        let v13: f32 = select(bitcast<f32>(((bitcast<u32>(fa_t58) & 0x7fffffffu) | (bitcast<u32>(v0) & 0x80000000u))), fa_f32_bits(0x7fc00000u), (((bitcast<u32>(v4) & 0x7fffffffu) > 0x7f800000u) || ((bitcast<u32>(v0) & 0x7fffffffu) > 0x7f800000u)));
        let v14: f32 = (v12 + v13);
        let v15: f32 = (v0 / 4.0f);
        let fa_t59: f32 = bitcast<f32>((bitcast<u32>(v15) & 0x7fffffffu));
        let fa_t60: f32 = (v15 / sqrt(((1.0f - v15) * (1.0f + v15))));
        let fa_t61: f32 = bitcast<f32>((bitcast<u32>(fa_t60) & 0x7fffffffu));
        let fa_t62: bool = (fa_t61 > 2.4142137f);
        let fa_t63: bool = (fa_t61 > 0.41421357f);
        let fa_t64: f32 = select(select(fa_t61, ((fa_t61 - 1.0f) / (fa_t61 + 1.0f)), fa_t63), ((-1.0f) / fa_t61), fa_t62);
        let fa_t65: f32 = (fa_t64 * fa_t64);
        let fa_t66: f32 = (select(select(0.0f, 0.7853982f, fa_t63), 1.5707964f, fa_t62) + (((((((((0.080537446f * fa_t65) - 0.13877685f) * fa_t65) + 0.19977711f) * fa_t65) - 0.3333295f) * fa_t65) * fa_t64) + fa_t64));
        let v16: f32 = select(select(select(bitcast<f32>(((bitcast<u32>(fa_t66) & 0x7fffffffu) | (bitcast<u32>(fa_t60) & 0x80000000u))), fa_t60, ((bitcast<u32>(fa_t60) & 0x7fffffffu) > 0x7f800000u)), select(1.5707964f, (-1.5707964f), (v15 < 0.0f)), (fa_t59 == 1.0f)), fa_f32_bits(0x7fc00000u), ((fa_t59 > 1.0f) || ((bitcast<u32>(v15) & 0x7fffffffu) > 0x7f800000u)));
        let v17: f32 = (v14 + v16);
        let fa_t67: f32 = bitcast<f32>((bitcast<u32>(v15) & 0x7fffffffu));
        let fa_t68: f32 = sqrt(((1.0f - v15) / (1.0f + v15)));
        let fa_t69: f32 = bitcast<f32>((bitcast<u32>(fa_t68) & 0x7fffffffu));
        let fa_t70: bool = (fa_t69 > 2.4142137f);
        let fa_t71: bool = (fa_t69 > 0.41421357f);
        let fa_t72: f32 = select(select(fa_t69, ((fa_t69 - 1.0f) / (fa_t69 + 1.0f)), fa_t71), ((-1.0f) / fa_t69), fa_t70);
        let fa_t73: f32 = (fa_t72 * fa_t72);
        let fa_t74: f32 = (select(select(0.0f, 0.7853982f, fa_t71), 1.5707964f, fa_t70) + (((((((((0.080537446f * fa_t73) - 0.13877685f) * fa_t73) + 0.19977711f) * fa_t73) - 0.3333295f) * fa_t73) * fa_t72) + fa_t72));
        let v18: f32 = select(select((2.0f * select(bitcast<f32>(((bitcast<u32>(fa_t74) & 0x7fffffffu) | (bitcast<u32>(fa_t68) & 0x80000000u))), fa_t68, ((bitcast<u32>(fa_t68) & 0x7fffffffu) > 0x7f800000u))), 3.1415927f, (v15 == (-1.0f))), fa_f32_bits(0x7fc00000u), ((fa_t67 > 1.0f) || ((bitcast<u32>(v15) & 0x7fffffffu) > 0x7f800000u)));
        let v19: f32 = (v17 + v18);
        let fa_t75: f32 = bitcast<f32>((bitcast<u32>(v0) & 0x7fffffffu));
        let fa_t76: f32 = bitcast<f32>((bitcast<u32>(v4) & 0x7fffffffu));
        let fa_t77: bool = (floor(v0) == v0);
        let fa_t78: bool = ((bitcast<u32>(v0) & 0x7fffffffu) == 0x7f800000u);
        let fa_t79: f32 = select(select(exp2((v0 * log2(fa_t76))), select(0.0f, fa_f32_bits(0x7f800000u), ((fa_t76 > 1.0f) == (v0 > 0.0f))), fa_t78), select(0.0f, fa_f32_bits(0x7f800000u), (v0 < 0.0f)), (fa_t76 == 0.0f));
        let v20: f32 = select(select(select(select(select(fa_t79, (-fa_t79), (((fa_t77 && (fa_t75 < 1.6777216e+07f)) && ((fa_t75 - (2.0f * floor((fa_t75 * 0.5f)))) == 1.0f)) && ((bitcast<u32>(v4) & 0x80000000u) != 0u))), 1.0f, ((v4 == (-1.0f)) && fa_t78)), fa_f32_bits(0x7fc00000u), (((v4 < 0.0f) && (!fa_t77)) && (!((bitcast<u32>(v4) & 0x7fffffffu) == 0x7f800000u)))), fa_f32_bits(0x7fc00000u), (((bitcast<u32>(v4) & 0x7fffffffu) > 0x7f800000u) || ((bitcast<u32>(v0) & 0x7fffffffu) > 0x7f800000u))), 1.0f, ((v0 == 0.0f) || (v4 == 1.0f)));
        let v21: f32 = (v19 + v20);
        let fa_t80: f32 = bitcast<f32>((bitcast<u32>(v4) & 0x7fffffffu));
        let fa_t81: f32 = bitcast<f32>((bitcast<u32>(v0) & 0x7fffffffu));
        let fa_t82: u32 = (bitcast<u32>(fa_t81) >> 23u);
        let fa_t83: u32 = (bitcast<u32>(fa_t80) >> 23u);
        let fa_t84: i32 = (i32(select(0u, (fa_t82 - fa_t83), (fa_t82 > fa_t83))) + 25i);
        var fa_t85: f32 = fa_t81;
        var fa_t86: f32 = fa_t80;
        for (var fa_t87: i32 = 0i; fa_t87 < fa_t84; fa_t87 += 1i) {
            if (((2.0f * fa_t86) <= fa_t85)) {
                fa_t86 = (2.0f * fa_t86);
            }
        }
        for (var fa_t88: i32 = 0i; fa_t88 < (fa_t84 + 1i); fa_t88 += 1i) {
            if ((fa_t86 >= fa_t80)) {
                if ((fa_t85 >= fa_t86)) {
                    fa_t85 = (fa_t85 - fa_t86);
                }
                fa_t86 = (fa_t86 * 0.5f);
            }
        }
        let v22: f32 = select(bitcast<f32>(((bitcast<u32>(fa_t85) & 0x7fffffffu) | (bitcast<u32>(v0) & 0x80000000u))), fa_f32_bits(0x7fc00000u), (((((bitcast<u32>(v0) & 0x7fffffffu) > 0x7f800000u) || ((bitcast<u32>(v4) & 0x7fffffffu) > 0x7f800000u)) || ((bitcast<u32>(v0) & 0x7fffffffu) == 0x7f800000u)) || (v4 == 0.0f)));
        let v23: f32 = (v21 + v22);
        let v24: f32 = abs(v0);
        let v25: bool = (v24 == fa_f32_bits(0x7f800000u));
        let v26: f32 = abs(v4);
        let v27: bool = (v26 == fa_f32_bits(0x7f800000u));
        let v28: bool = (v25 || v27);
        let v29: f32 = select(v26, v24, (((v24 > v26) && (!((bitcast<u32>(v26) & 0x7fffffffu) > 0x7f800000u))) || ((bitcast<u32>(v24) & 0x7fffffffu) > 0x7f800000u)));
        let v30: f32 = select(v26, v24, (((v24 < v26) && (!((bitcast<u32>(v26) & 0x7fffffffu) > 0x7f800000u))) || ((bitcast<u32>(v24) & 0x7fffffffu) > 0x7f800000u)));
        let v31: bool = (v29 == 0.0f);
        let v32: f32 = select(v29, 1.0f, v31);
        let v33: f32 = select((v30 / v32), select(bitcast<f32>((((bitcast<u32>(v30) ^ bitcast<u32>(v32)) & 0x80000000u) | 0x7f800000u)), fa_f32_bits(0x7fc00000u), ((v30 == 0.0f) || ((bitcast<u32>(v30) & 0x7fffffffu) > 0x7f800000u))), (v32 == 0.0f));
        let v34: f32 = (v33 * v33);
        let v35: f32 = (1.0f + v34);
        let v36: f32 = sqrt(v35);
        let v37: f32 = (v29 * v36);
        let v38: f32 = select(v37, fa_f32_bits(0x7f800000u), v28);
        let v39: f32 = (v23 + v38);
        let fa_t89: u32 = bitcast<u32>(v0);
        let v40: f32 = select(select(select(bitcast<f32>(select((fa_t89 - 1u), (fa_t89 + 1u), ((v0 < v4) == (v0 > 0.0f)))), bitcast<f32>(select(1u, 0x80000001u, (v4 < 0.0f))), ((fa_t89 & 0x7fffffffu) == 0u)), v4, (v0 == v4)), fa_f32_bits(0x7fc00000u), (((bitcast<u32>(v0) & 0x7fffffffu) > 0x7f800000u) || ((bitcast<u32>(v4) & 0x7fffffffu) > 0x7f800000u)));
        let v41: f32 = (v39 + v40);
        let v42: f32 = (v4 + 1.0f);
        let v43: f32 = select(acosh(v42), fa_f32_bits(0x7fc00000u), ((v42 < 1.0f) || ((bitcast<u32>(v42) & 0x7fffffffu) > 0x7f800000u)));
        let v44: f32 = (v41 + v43);
        let v45: i32 = bitcast<i32>(v0);
        let v46: bool = (v45 < 0i);
        let v47: f32 = (-v26);
        let v48: f32 = select(v26, v47, v46);
        let v49: f32 = (v44 + v48);
        out2[gid] = v49;
    }
}
