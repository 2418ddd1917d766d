"""The PoCL-tuned float32 math of the OpenCL renderer: C text of call-free helpers, chosen by measurement.

PoCL (the CPU OpenCL driver) compiles OpenCL C's ``tanh``, ``exp``, ``log``, ``sin``, ``floor``... as library
calls, and one library call keeps its work-group vectoriser off the whole kernel (a 4M map 7-20x slower). The
OpenCL renderer (``opencl_c.py``) prints these ops through the helpers below instead: ``HELPERS[op] = (function
name, C text)`` for float32, ``BUILTINS[(op, dtype)]`` a clang builtin form. They are the OpenCL target's own
choices; the math bodies every target can print are kernel IR (``transcendental.py``).
"""

from __future__ import annotations

import numpy as np

__all__ = ["HELPERS", "BUILTINS", "F32"]

F32 = np.dtype(np.float32)

# float32 tanh, exp and log without library calls: PoCL's tanh, exp and log (and rint, copysign...) are calls
# that keep its work-group vectoriser off the whole kernel (a 4M chain: ~10x slower than these forms).
# Each helper is guarded, as the runtime builds several kernels' sources as one program, and always inlined:
# PoCL's inliner keeps a long helper or one that calls another (erf's exp) as a call past its size threshold,
# which turns the vectoriser off again (a 4M erf map: 97 ms as a call, 7.8 ms inlined).
#
# tanh: |x| < 0.625: an odd polynomial (least-squares fit of (tanh(x) - x) / x^3 in x^2, relative
# weights); beyond it (1 - e) / (1 + e) with e = exp(-2|x|) = 2^y, 2^y split as 2^k (exponent bits)
# times a degree-6 polynomial of the fraction in [-0.5, 0.5]. Measured against float64 tanh: at most
# 1.8 ulp (OpenCL allows its own tanh 5). y is clamped by a select (NaN -> -126), so the float-to-int
# conversion never sees NaN; NaN comes back through the final select, and the sign bit is restored
# (tanh(-0) = -0).
#
# exp: x clamped into [-104, 89] (past both ends the result is 0 or inf anyway; NaN -> 89, restored at
# the end), k = round(x / ln 2), r = x - k ln 2 in two parts (Cody and Waite), e^r by its Taylor
# polynomial of degree 7 (|r| <= 0.35), times 2^k applied in two halves so that subnormal results
# round once. Measured against float64 exp over [-110, 90]: at most 0.92 ulp (OpenCL allows 3).
#
# log: x = m 2^e with m in [sqrt(1/2), sqrt(2)) read from the bits (a subnormal x scaled by 2^23 first),
# log m = 2 atanh(s) with s = (m - 1) / (m + 1) (m - 1 exact; |s| <= 0.172, series to s^9), plus e ln 2 in
# two parts. Measured against float64 log over all positive floats: at most 1.94 ulp (OpenCL allows 3);
# 0 -> -inf, inf -> inf, negative and NaN -> NaN by the final selects.
HELPERS = {
    "tanh": ("fa_tanh_f32", """#ifndef FA_TANH_F32
#define FA_TANH_F32
__attribute__((always_inline)) float fa_tanh_f32(const float x) {
    const float ax = as_float(as_int(x) & 0x7fffffff);
    const float x2 = x * x;
    const float p = ax + ax * x2 * (-0.33333281f + x2 * (0.13331382f + x2 * (-0.05373532f
                    + x2 * (0.020626292f + x2 * (-0.0056919856f)))));
    const float y0 = -2.8853900817779268f * ax;
    const float y = (y0 >= -126.0f) ? y0 : -126.0f;
    const int k = (int)(y - 0.5f);
    const float f = y - (float)k;
    const float q = 1.0f + f * (0.6931472f + f * (0.24022646f + f * (0.05550329f + f * (0.00961852f
                    + f * (0.001339986f + f * 0.00015337577f)))));
    const float e = q * as_float((k + 127) << 23);
    const float r = (ax < 0.625f) ? p : (1.0f - e) / (1.0f + e);
    return (x != x) ? x : as_float(as_int(r) | (as_int(x) & (int)0x80000000));
}
#endif"""),
    "exp": ("fa_exp_f32", """#ifndef FA_EXP_F32
#define FA_EXP_F32
__attribute__((always_inline)) float fa_exp_f32(const float x) {
    const float xc = (x >= -104.0f) ? ((x <= 89.0f) ? x : 89.0f) : -104.0f;
    const float t = xc * 1.44269504f;
    const int k = (int)(t + ((t < 0.0f) ? -0.5f : 0.5f));
    const float r = (xc - (float)k * 0.693145752f) - (float)k * 1.42860677e-6f;
    const float p = 1.0f + r * (1.0f + r * (0.5f + r * (0.166666672f + r * (0.0416666456f
                    + r * (0.00833336077f + r * (0.00138888892f + r * 0.000198412701f))))));
    const int k1 = k >> 1;
    const float e = (p * as_float((k1 + 127) << 23)) * as_float((k - k1 + 127) << 23);
    return (x != x) ? x : e;
}
#endif"""),
    "log": ("fa_log_f32", """#ifndef FA_LOG_F32
#define FA_LOG_F32
__attribute__((always_inline)) float fa_log_f32(const float x) {
    const int sub = x < 1.17549435e-38f;
    const int bits = as_int(sub ? x * 8388608.0f : x);
    const int big = (bits & 0x007fffff) > 0x003504f3;
    const float m = as_float((bits & 0x007fffff) | (big ? 0x3f000000 : 0x3f800000));
    const float e = (float)(((bits >> 23) & 0xff) - 127 + big - (sub ? 23 : 0));
    const float s = (m - 1.0f) / (m + 1.0f);
    const float s2 = s * s;
    const float lm = 2.0f * s + 2.0f * s * s2 * (0.333333343f + s2 * (0.2f + s2 * (0.142857149f
                     + s2 * 0.111111112f)));
    const float r = e * 0.693145752f + (lm + e * 1.42860677e-6f);
    return (x > 0.0f) ? ((x < INFINITY) ? r : x) : ((x == 0.0f) ? (-INFINITY) : NAN);
}
#endif"""),
}

# floor, ceil, rint: exact, from the float-to-int conversion (or 2^23 added and taken away, which rounds half to
# even in the default rounding mode) where |x| < 2^23; from 2^23 on every float is an integer, as are
# infinities, and NaN is kept: x itself. The sign bit of x is put back, so -0.0 and (-1, 0) give -0.0 where
# IEEE does (floor(-0.0), ceil(-0.5), rint(-0.4)). PoCL's floor/ceil/rint are library calls (a 4M map
# 7-20x slower than these).
_ROUNDINGS = {
    "floor": "t - ((t > xs) ? 1.0f : 0.0f)",
    "ceil": "t + ((t < xs) ? 1.0f : 0.0f)",
    "rint": "(as_float(as_int(xs) & 0x7fffffff) + 8388608.0f) - 8388608.0f",
}
for _name, _body in _ROUNDINGS.items():
    _guard = f"FA_{_name.upper()}_F32"
    HELPERS[_name] = (f"fa_{_name}_f32", f"""#ifndef {_guard}
#define {_guard}
__attribute__((always_inline)) float fa_{_name}_f32(const float x) {{
    const int small = as_float(as_int(x) & 0x7fffffff) < 8388608.0f;
    const float xs = small ? x : 0.0f;
    const float t = (float)(int)xs;
    const float r = {_body};
    return small ? as_float(as_int(r) | (as_int(x) & (int)0x80000000)) : x;
}}
#endif""")

# sin and cos: |x| < 2^20 reduced by k = round(x 2/pi) in double, r = x - k pi/2 with pi/2 in two parts
# (k pi/2's first part is exact for k < 2^20), then the Taylor polynomials of sin (to r^9) and cos (to
# r^10) of r in float (|r| <= pi/4: the first neglected terms are below 2^-28 relative), the quadrant k mod 4
# choosing sin or cos and the sign. Beyond 2^20, and for inf and NaN, the library's sin/cos (its own argument
# reduction), in a branch; on a device without float64 (``cl_khr_fp64`` undefined), the library's throughout.
# Measured against float64 over [-2^20, 2^20]: at most 1.5 ulp (OpenCL allows 4). The branch keeps PoCL's
# vectoriser off (a call-free Payne-Hanek reduction for the large range, tried, was not vectorised either),
# but the reduced form still runs ~3x faster than the library call for every element.
_TRIG = """#ifndef FA_TRIG_F32
#define FA_TRIG_F32
#ifdef cl_khr_fp64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#endif
__attribute__((always_inline)) float fa_trig_f32(const float x, const int odd) {
#ifndef cl_khr_fp64
    return odd ? cos(x) : sin(x);
#else
    const float ax = as_float(as_int(x) & 0x7fffffff);
    const int small = ax < 1048576.0f;
    const double xd = small ? (double)ax : 0.0;
    const int k = (int)(xd * 0.63661977236758134 + 0.5);
    const double kd = (double)k;
    const float r = (float)((xd - kd * 1.5707963267341256) - kd * 6.0771005065061922e-11);
    const float r2 = r * r;
    const float s = r + r * r2 * (-0.16666667f + r2 * (0.008333333f + r2 * (-0.0001984127f
                    + r2 * 2.7557319e-6f)));
    const float c = 1.0f + r2 * (-0.5f + r2 * (0.041666668f + r2 * (-0.0013888889f + r2 * (2.4801588e-5f
                    + r2 * (-2.7557319e-7f)))));
    const int q = k + odd;
    const float v = (q & 1) ? c : s;
    float y = as_float(as_int(v) ^ (int)((uint)(q & 2) << 30) ^ (odd ? 0 : (as_int(x) & (int)0x80000000)));
    if (!small) {
        y = odd ? cos(x) : sin(x);
    }
    return y;
#endif
}
#endif
"""
HELPERS["sin"] = ("fa_sin_f32", _TRIG + """#ifndef FA_SIN_F32
#define FA_SIN_F32
__attribute__((always_inline)) float fa_sin_f32(const float x) { return fa_trig_f32(x, 0); }
#endif""")
HELPERS["cos"] = ("fa_cos_f32", _TRIG + """#ifndef FA_COS_F32
#define FA_COS_F32
__attribute__((always_inline)) float fa_cos_f32(const float x) { return fa_trig_f32(x, 1); }
#endif""")

# expm1: x clamped into [-20, 89] (below -17.4 the result rounds to -1; NaN restored at the end), k and r as in
# exp, expm1(r) by its Taylor polynomial (|r| <= 0.35, to r^8), then 2^k expm1(r) + (2^k - 1), exact for k = 0
# (tiny x keep their relative accuracy, -0.0 its sign); from k = 25 on, (expm1(r) + 1) 2^k - 1 with 2^k in two
# halves as in exp. Measured against float64 over [-20, 89]: at most 1.6 ulp (OpenCL allows 3).
#
# log1p: u = 1 + x rounded, log(u) (the helper above) less the rounding error of u relative to u,
# ((u - 1) - x) / u (Goldberg's correction); u = 1 gives x itself (tiny x, -0.0). -1 -> -inf, inf -> inf,
# below -1 and NaN -> NaN. Measured against float64: at most 2.4 ulp (OpenCL allows 2 for its own; NumPy's
# is within 1).
#
# erf: odd, computed at |x| with the sign put back: below 0.875 x P(x^2) (P of degree 6 fitted by least
# squares in relative terms); up to 4, 1 - exp(-x^2) Q(1/x), with Q (degree 7, same fit) approximating
# erfc(x) exp(x^2); from 4 on (and inf) 1. Measured against float64: at most 2.3 ulp (OpenCL allows 16).
#
# pow: in double, as exp2(y log2|x|): log2|x| from the bits (as log above, the atanh series to s^15),
# 2^t as 2^k (exponent bits) times the Taylor polynomial of e^(f ln 2), |f| <= 1/2, to degree 12; the
# float32 result is rounded once from the double, so at most ~0.5 ulp plus 1e-12 relative. The special cases
# of C99/IEEE pow (NumPy's): y = 0 or x = 1 -> 1, a negative x -> NaN unless y is an integer (its sign when
# y is odd), zeros and infinities through log2 = -inf/+inf, |x| = 1 with y = +-inf -> 1, other NaN -> NaN.
# Without float64 (``cl_khr_fp64`` undefined): the library's pow.
HELPERS["expm1"] = ("fa_expm1_f32", """#ifndef FA_EXPM1_F32
#define FA_EXPM1_F32
__attribute__((always_inline)) float fa_expm1_f32(const float x) {
    const float xc = (x >= -20.0f) ? ((x <= 89.0f) ? x : 89.0f) : -20.0f;
    const float t = xc * 1.44269504f;
    const int k = (int)(t + ((t < 0.0f) ? -0.5f : 0.5f));
    const float r = (xc - (float)k * 0.693145752f) - (float)k * 1.42860677e-6f;
    const float em = r + r * r * (0.5f + r * (0.166666672f + r * (0.0416666679f + r * (0.00833333377f
                     + r * (0.00138888892f + r * (0.000198412701f + r * 2.48015876e-05f))))));
    const int kb = (k < 25) ? k : 0;
    const float p2 = as_float((kb + 127) << 23);
    const float small = p2 * em + (p2 - 1.0f);
    const int k1 = k >> 1;
    const float big = ((em + 1.0f) * as_float((k1 + 127) << 23)) * as_float((k - k1 + 127) << 23) - 1.0f;
    const float y = (k < 25) ? small : big;
    return (x != x || x == 0.0f) ? x : y;
}
#endif""")
HELPERS["log1p"] = ("fa_log1p_f32", HELPERS["log"][1] + """
#ifndef FA_LOG1P_F32
#define FA_LOG1P_F32
__attribute__((always_inline)) float fa_log1p_f32(const float x) {
    const float u = 1.0f + x;
    const float r = fa_log_f32(u) - ((u - 1.0f) - x) / u;
    const float y = (u == 1.0f) ? x : ((x < INFINITY) ? r : x);
    return (x == -1.0f) ? (-INFINITY) : y;
}
#endif""")
HELPERS["erf"] = ("fa_erf_f32", HELPERS["exp"][1] + """
#ifndef FA_ERF_F32
#define FA_ERF_F32
__attribute__((always_inline)) float fa_erf_f32(const float x) {
    const float ax = as_float(as_int(x) & 0x7fffffff);
    const float z = ax * ax;
    const float lo = ax * (1.1283792f + z * (-0.37612638f + z * (0.11283741f + z * (-0.026861968f
                     + z * (0.005207619f + z * (-0.00082204904f + z * 8.713938e-05f))))));
    const float xb = (ax < 4.0f) ? ((ax > 0.875f) ? ax : 0.875f) : 4.0f;
    const float t = 1.0f / xb;
    const float q = 0.00034772456f + t * (0.5577565f + t * (0.05099442f + t * (-0.50612503f + t * (0.5765523f
                    + t * (-0.35534516f + t * (0.121462256f + t * (-0.018059423f)))))));
    const float hi = 1.0f - fa_exp_f32(-(xb * xb)) * q;
    const float r = (ax <= 0.875f) ? lo : hi;
    return (x != x) ? x : as_float(as_int(r) | (as_int(x) & (int)0x80000000));
}
#endif""")
HELPERS["pow"] = ("fa_pow_f32", """#ifndef FA_POW_F32
#define FA_POW_F32
#ifdef cl_khr_fp64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#endif
__attribute__((always_inline)) float fa_pow_f32(const float x, const float y) {
#ifndef cl_khr_fp64
    return pow(x, y);
#else
    const float ax = as_float(as_int(x) & 0x7fffffff);
    const float ay = as_float(as_int(y) & 0x7fffffff);
    const int sub = ax < 1.17549435e-38f;
    const int bits = as_int(sub ? ax * 8388608.0f : ax);
    const int big = (bits & 0x007fffff) > 0x003504f3;
    const double m = (double)as_float((bits & 0x007fffff) | (big ? 0x3f000000 : 0x3f800000));
    const double e = (double)(((bits >> 23) & 0xff) - 127 + big - (sub ? 23 : 0));
    const double s = (m - 1.0) / (m + 1.0);
    const double s2 = s * s;
    const double l = e + s * (2.8853900817779268 + s2 * (0.96179669392597560 + s2 * (0.57707801635558536
                     + s2 * (0.41219858311113240 + s2 * (0.32059889797532520 + s2 * (0.26230818925253880
                     + s2 * (0.22195308321368668 + s2 * 0.19235933878519512)))))));
    const double l2 = (ax == 0.0f) ? -(double)INFINITY : ((ax < INFINITY) ? l : (double)INFINITY);
    const double t0 = (double)y * l2;
    const double t = (t0 >= -400.0) ? ((t0 <= 400.0) ? t0 : 400.0) : -400.0;
    const int k = (int)(t + ((t < 0.0) ? -0.5 : 0.5));
    const double f = (t - (double)k) * 0.69314718055994531;
    const double p = 1.0 + f * (1.0 + f * (0.5 + f * (1.6666666666666666e-01 + f * (4.1666666666666664e-02
                     + f * (8.3333333333333332e-03 + f * (1.3888888888888889e-03 + f * (1.9841269841269841e-04
                     + f * (2.4801587301587302e-05 + f * (2.7557319223985893e-06 + f * (2.7557319223985888e-07
                     + f * (2.5052108385441720e-08 + f * 2.0876756987868100e-09)))))))))));
    const float v = (float)(p * as_double((long)(k + 1023) << 52));
    const int yint = (ay >= 8388608.0f) || (((ay + 8388608.0f) - 8388608.0f) == ay);
    const int yodd = yint && (((int)((ay < 16777216.0f) ? ay : 0.0f)) & 1);
    const int xneg = as_int(x) < 0;
    const float sv = as_float(as_int(v) | ((xneg && yodd) ? (int)0x80000000 : 0));
    const float r = (x < 0.0f && !yint && x > -INFINITY) ? NAN : sv;
    const int one = (y == 0.0f) || (x == 1.0f) || (ax == 1.0f && ay == INFINITY);
    return one ? 1.0f : ((x != x || y != y) ? (x + y) : r);
#endif
}
#endif""")

# sqrt: clang's builtin is LLVM's sqrt instruction (correctly rounded, as IEEE's and NumPy's), which PoCL
# inlines and vectorises; OpenCL C's sqrt is a library call there (a 4M map ~6x slower). rsqrt as NumPy's
# reference computes it, 1 / sqrt(x) (two correctly rounded steps), where OpenCL's rsqrt is a call.
BUILTINS = {("sqrt", F32): "__builtin_sqrtf({})", ("sqrt", np.dtype(np.float64)): "__builtin_sqrt({})",
             ("rsqrt", F32): "(1.0f / __builtin_sqrtf({}))",
             ("rsqrt", np.dtype(np.float64)): "(1.0 / __builtin_sqrt({}))"}
