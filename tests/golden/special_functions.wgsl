@group(0) @binding(0) var<storage, read> in0: array<f32>;
@group(0) @binding(1) var<storage, read> in1: array<f32>;
@group(0) @binding(2) var<storage, read_write> out2: array<f32>;
struct FaArgs {
    n: i32,
}
@group(0) @binding(3) var<uniform> fa_args: FaArgs;

fn fa_isnan_f32(x: f32) -> bool {
    return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u;
}

fn fa_copysign_f32(x: f32, y: f32) -> f32 {
    return bitcast<f32>((bitcast<u32>(x) & 0x7fffffffu) | (bitcast<u32>(y) & 0x80000000u));
}

fn fa_atan_f32(x: f32) -> f32 {
    // Range reduction to |t| <= tan(pi/8), then a minimax polynomial (Cephes atanf).
    if (fa_isnan_f32(x)) {
        return x;
    }
    let a = abs(x);
    var base = 0.0f;
    var t = a;
    if (a > 2.414213562373095f) {
        base = 1.5707963267948966f;
        t = -1.0f / a;
    } else if (a > 0.4142135623730950f) {
        base = 0.7853981633974483f;
        t = (a - 1.0f) / (a + 1.0f);
    }
    let z = t * t;
    let p = (((8.05374449538e-2f * z - 1.38776856032e-1f) * z + 1.99777106478e-1f) * z
             - 3.33329491539e-1f) * z * t + t;
    return fa_copysign_f32(base + p, x);
}

fn fa_f32_bits(b: u32) -> f32 {
    return bitcast<f32>(b);
}

fn fa_acos_f32(x: f32) -> f32 {
    let a = abs(x);
    if (a > 1.0f || fa_isnan_f32(x)) {
        return fa_f32_bits(0x7fc00000u);
    }
    if (x == -1.0f) {
        return 3.1415926535897932f;
    }
    // acos(x) = 2 atan(sqrt((1 - x) / (1 + x))), accurate near both ends.
    return 2.0f * fa_atan_f32(sqrt((1.0f - x) / (1.0f + x)));
}

fn fa_acosh_f32(x: f32) -> f32 {
    return select(acosh(x), fa_f32_bits(0x7fc00000u), x < 1.0f || fa_isnan_f32(x));
}

fn fa_asin_f32(x: f32) -> f32 {
    let a = abs(x);
    if (a > 1.0f || fa_isnan_f32(x)) {
        return fa_f32_bits(0x7fc00000u);
    }
    if (a == 1.0f) {
        return select(1.5707963267948966f, -1.5707963267948966f, x < 0.0f);
    }
    return fa_atan_f32(x / sqrt((1.0f - x) * (1.0f + x)));
}

fn fa_isinf_f32(x: f32) -> bool {
    return (bitcast<u32>(x) & 0x7fffffffu) == 0x7f800000u;
}

fn fa_atan2_f32(y: f32, x: f32) -> f32 {
    // C's atan2 with its signed zeros and infinities, on the atan helper.
    if (fa_isnan_f32(x) || fa_isnan_f32(y)) {
        return fa_f32_bits(0x7fc00000u);
    }
    let ax = abs(x);
    let ay = abs(y);
    let x_neg = (bitcast<u32>(x) & 0x80000000u) != 0u;
    var r: f32;
    if (fa_isinf_f32(ax) && fa_isinf_f32(ay)) {
        r = select(0.78539816339744831f, 2.3561944901923449f, x_neg);
    } else if (ax == 0.0f && ay == 0.0f) {
        r = select(0.0f, 3.1415926535897932f, x_neg);
    } else {
        if (ay > ax) {
            r = 1.5707963267948966f - fa_atan_f32(ax / ay);
        } else {
            r = fa_atan_f32(ay / ax);
        }
        if (x_neg) {
            r = 3.1415926535897932f - r;
        }
    }
    return fa_copysign_f32(r, y);
}

fn fa_cbrt_f32(x: f32) -> f32 {
    let a = abs(x);
    if (a == 0.0f || fa_isnan_f32(x) || fa_isinf_f32(x)) {
        return x;
    }
    var y = exp2(log2(a) * (1.0f / 3.0f));
    y = y - (y * y * y - a) / (3.0f * y * y);
    return fa_copysign_f32(y, x);
}

fn fa_div_f32(x: f32, y: f32) -> f32 {
    if (y == 0.0f) {
        if (x == 0.0f || fa_isnan_f32(x)) {
            return fa_f32_bits(0x7fc00000u);
        }
        return bitcast<f32>(((bitcast<u32>(x) ^ bitcast<u32>(y)) & 0x80000000u) | 0x7f800000u);
    }
    return x / y;
}

fn fa_erf_f32(x: f32) -> f32 {
    if (fa_isnan_f32(x)) {
        return x;
    }
    let a = abs(x);
    if (a < 0.5f) {
        // Maclaurin series: 2/sqrt(pi) * sum (-1)^n x^(2n+1) / (n! (2n+1)).
        let z = x * x;
        let s = ((((((-1.3227513e-5f * z + 1.0683761e-4f) * z - 7.5757576e-4f) * z + 4.6296296e-3f) * z
                  - 2.3809524e-2f) * z + 1.0000000e-1f) * z - 3.3333334e-1f) * z + 1.0f;
        return 1.1283791670955126f * x * s;
    }
    // erfc by the Chebyshev fit of Numerical Recipes (fractional error < 1.2e-7).
    let t = 1.0f / (1.0f + 0.5f * a);
    let p = -a * a - 1.26551223f + t * (1.00002368f + t * (0.37409196f + t * (0.09678418f
            + t * (-0.18628806f + t * (0.27886807f + t * (-1.13520398f + t * (1.48851587f
            + t * (-0.82215223f + t * 0.17087277f))))))));
    let r = 1.0f - t * exp(p);
    return select(r, -r, x < 0.0f);
}

fn fa_expm1_f32(x: f32) -> f32 {
    // Kahan: (u - 1) * x / log(u) with u = exp(x).
    let u = exp(x);
    if (u == 1.0f) {
        return x;
    }
    let d = u - 1.0f;
    if (d == -1.0f) {
        return -1.0f;
    }
    if (u == fa_f32_bits(0x7f800000u)) {
        return u;
    }
    return d * (x / log(u));
}

fn fa_fmod_f32(x: f32, y: f32) -> f32 {
    // Exact: subtract the largest m * 2^k <= r until r < m (each subtraction is exact).
    if (fa_isnan_f32(x) || fa_isnan_f32(y) || fa_isinf_f32(x) || y == 0.0f) {
        return fa_f32_bits(0x7fc00000u);
    }
    let m = abs(y);
    var r = abs(x);
    if (fa_isinf_f32(y) || r < m) {
        return x;
    }
    for (var k = 0; k < 300 && r >= m; k++) {
        var s = ldexp(m, frexp(r).exp - frexp(m).exp);
        if (s > r) {
            s = s * 0.5f;
        }
        r = r - s;
    }
    return fa_copysign_f32(r, x);
}

fn fa_lgamma_pos_f32(x0: f32) -> f32 {
    // x0 >= 0.5: shift up to x >= 8, then Stirling's series.
    var x = x0;
    var prod = 1.0f;
    var shift = 0.0f;
    for (var k = 0; k < 8 && x < 8.0f; k++) {
        prod = prod * x;
        x = x + 1.0f;
        if (prod > 1.0e30f) {
            shift = shift + log(prod);
            prod = 1.0f;
        }
    }
    let inv = 1.0f / x;
    let inv2 = inv * inv;
    let series = inv * (0.083333333333333333f - inv2 * (0.0027777777777777778f - inv2 * (7.9365079365079365e-4f
                 - inv2 * 5.9523809523809524e-4f)));
    return (x - 0.5f) * log(x) - x + 0.91893853320467274f + series - log(prod) - shift;
}

fn fa_lgamma_f32(x: f32) -> f32 {
    if (fa_isnan_f32(x)) {
        return x;
    }
    if (fa_isinf_f32(x)) {
        return fa_f32_bits(0x7f800000u);
    }
    if (x >= 0.5f) {
        return fa_lgamma_pos_f32(x);
    }
    if (x == floor(x)) {
        return fa_f32_bits(0x7f800000u);
    }
    // Reflection: lgamma(x) = log(pi / |sin(pi x)|) - lgamma(1 - x). x - round(x) in [-1/2, 1/2] is exact and
    // keeps a tiny x whole; sin by its Taylor series to t^13 (below 1e-9 off on [-pi/2, pi/2]), as Vulkan lets
    // the builtin be 2^-11 off in absolute terms, all of a tiny sin's digits.
    let t = 3.1415926535897932f * (x - round(x));
    let t2 = t * t;
    let s = t * (1.0f - t2 / 6.0f * (1.0f - t2 / 20.0f * (1.0f - t2 / 42.0f * (1.0f - t2 / 72.0f
            * (1.0f - t2 / 110.0f * (1.0f - t2 / 156.0f))))));
    return 1.1447298858494002f - log(abs(s)) - fa_lgamma_pos_f32(1.0f - x);
}

fn fa_log1p_f32(x: f32) -> f32 {
    // Kahan: log(u) * x / (u - 1) with u = 1 + x cancels the rounding of u.
    let u = 1.0f + x;
    let d = u - 1.0f;
    if (d == 0.0f) {
        return x;
    }
    let l = log(u);
    return select(l * (x / d), l, u == fa_f32_bits(0x7f800000u));
}

fn fa_nextafter_f32(x: f32, y: f32) -> f32 {
    if (fa_isnan_f32(x) || fa_isnan_f32(y)) {
        return fa_f32_bits(0x7fc00000u);
    }
    if (x == y) {
        return y;
    }
    let b = bitcast<u32>(x);
    if ((b & 0x7fffffffu) == 0u) {
        return bitcast<f32>(select(1u, 0x80000001u, y < 0.0f));
    }
    let away = (x < y) == (x > 0.0f);
    return bitcast<f32>(select(b - 1u, b + 1u, away));
}

fn fa_pow_f32(x: f32, y: f32) -> f32 {
    // C's pow: pow(x, 0) = 1 and pow(1, y) = 1 even for NaN; negative bases need an integer exponent.
    if (y == 0.0f || x == 1.0f) {
        return 1.0f;
    }
    if (fa_isnan_f32(x) || fa_isnan_f32(y)) {
        return fa_f32_bits(0x7fc00000u);
    }
    let ay = abs(y);
    let is_int = floor(y) == y;
    let odd = is_int && ay < 16777216.0f && (ay - 2.0f * floor(ay * 0.5f)) == 1.0f;
    let ax = abs(x);
    if (x < 0.0f && !is_int && !fa_isinf_f32(x)) {
        return fa_f32_bits(0x7fc00000u);
    }
    if (x == -1.0f && fa_isinf_f32(y)) {
        return 1.0f;
    }
    var r: f32;
    if (ax == 0.0f) {
        r = select(0.0f, fa_f32_bits(0x7f800000u), y < 0.0f);
    } else if (fa_isinf_f32(y)) {
        r = select(0.0f, fa_f32_bits(0x7f800000u), (ax > 1.0f) == (y > 0.0f));
    } else {
        r = exp2(y * log2(ax));
    }
    let neg = odd && (bitcast<u32>(x) & 0x80000000u) != 0u;
    return select(r, -r, neg);
}

fn fa_tanh_f32(x: f32) -> f32 {
    // tanh(+-0) keeps the sign and tanh(NaN) is NaN on every driver.
    return select(select(tanh(x), x, x == 0.0f), x, fa_isnan_f32(x));
}

@compute @workgroup_size(64, 1, 1)
fn map_tanh_erf_add_lgamma(@builtin(global_invocation_id) fa_gid: vec3<u32>, @builtin(local_invocation_id) fa_lid: vec3<u32>, @builtin(workgroup_id) fa_wid: vec3<u32>, @builtin(num_workgroups) fa_nwg: vec3<u32>) {
    let n: i32 = fa_args.n;
    let gid: i32 = i32(fa_gid.x);
    if ((gid < n)) {
        let v0: f32 = in0[gid];
        let v1: f32 = fa_tanh_f32(v0);
        let v2: f32 = fa_erf_f32(v0);
        let v3: f32 = (v1 + v2);
        let v4: f32 = in1[gid];
        let v5: f32 = fa_lgamma_f32(v4);
        let v6: f32 = (v3 + v5);
        let v7: f32 = fa_log1p_f32(v4);
        let v8: f32 = (v6 + v7);
        let v9: f32 = fa_expm1_f32(v0);
        let v10: f32 = (v8 + v9);
        let v11: f32 = fa_cbrt_f32(v0);
        let v12: f32 = (v10 + v11);
        let v13: f32 = fa_atan2_f32(v0, v4);
        let v14: f32 = (v12 + v13);
        let v15: f32 = fa_div_f32(v0, 4.0f);
        let v16: f32 = fa_asin_f32(v15);
        let v17: f32 = (v14 + v16);
        let v18: f32 = fa_acos_f32(v15);
        let v19: f32 = (v17 + v18);
        let v20: f32 = fa_pow_f32(v4, v0);
        let v21: f32 = (v19 + v20);
        let v22: f32 = fa_fmod_f32(v0, v4);
        let v23: f32 = (v21 + v22);
        let v24: f32 = abs(v0);
        let v25: bool = (v24 == fa_f32_bits(0x7f800000u));
        let v26: f32 = abs(v4);
        let v27: bool = (v26 == fa_f32_bits(0x7f800000u));
        let v28: bool = (v25 || v27);
        let v29: f32 = select(v26, v24, (((v24 > v26) && (!fa_isnan_f32(v26))) || fa_isnan_f32(v24)));
        let v30: f32 = select(v26, v24, (((v24 < v26) && (!fa_isnan_f32(v26))) || fa_isnan_f32(v24)));
        let v31: bool = (v29 == 0.0f);
        let v32: f32 = select(v29, 1.0f, v31);
        let v33: f32 = fa_div_f32(v30, v32);
        let v34: f32 = (v33 * v33);
        let v35: f32 = (1.0f + v34);
        let v36: f32 = sqrt(v35);
        let v37: f32 = (v29 * v36);
        let v38: f32 = select(v37, fa_f32_bits(0x7f800000u), v28);
        let v39: f32 = (v23 + v38);
        let v40: f32 = fa_nextafter_f32(v0, v4);
        let v41: f32 = (v39 + v40);
        let v42: f32 = (v4 + 1.0f);
        let v43: f32 = fa_acosh_f32(v42);
        let v44: f32 = (v41 + v43);
        let v45: i32 = bitcast<i32>(v0);
        let v46: bool = (v45 < 0i);
        let v47: f32 = (-v26);
        let v48: f32 = select(v26, v47, v46);
        let v49: f32 = (v44 + v48);
        out2[gid] = v49;
    }
}
