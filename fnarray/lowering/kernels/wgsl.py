"""WGSL from the kernel IR: a thin subclass of the C-style renderer.

What differs from OpenCL C is declared here; what WGSL cannot express is
rewritten before printing:

- Buffers are module-scope ``var<storage>`` bindings (``@group(0)``, binding
  ``k`` for the ``k``-th buffer parameter); ``bool`` buffers hold ``u32``.
  Scalar parameters live in one uniform struct (``fa_args``, the binding after
  the buffers) that the body reads into locals. ``wgsl_layout(kernel)``
  describes this layout for the runtime, ``uniform_bytes`` fills the struct.
- Work-group (``local``) arrays move to module scope (``var<workgroup>``). The
  work-group size is part of the source: a kernel that does not fix one is
  rendered with its launch's (``dataclasses.replace(kernel, local_size=...)``).
- Work-item builtins are ``global_invocation_id`` and friends; a launch of more
  than 65,535 work-groups is folded into a second dimension by the scheduler
  (``Capabilities.max_dispatch``), as for OpenCL.
- WGSL does not promise IEEE infinities and NaN: a constant expression that
  overflows is a compile error and drivers may fold ``x != x`` to false (Mesa
  does). Infinities and NaNs are written as bit patterns passed through a
  function (``fa_f32_bits(0x7f800000u)``: a call is a run-time value, while Tint,
  Chromium's compiler, rejects a constant ``bitcast`` whose value is not finite),
  ``isnan``/``isinf``/``isfinite`` are tests on
  the bits, ``max``/``min`` on floats propagate NaN through an explicit select.
- Functions WGSL lacks, or whose precision or edge cases WGSL leaves open
  (``erf``, ``lgamma``, ``log1p``, ``expm1``, ``cbrt``, ``pow`` at 0 and for
  negative bases, ``fmod``, ``nextafter``, ``hypot``, ``copysign``, ``asin``,
  ``acos``, ``atan``, ``atan2``, ``acosh`` below 1), are helper functions printed before the kernel, only those
  the kernel calls. ``float16`` math goes through the ``float32`` helpers (as
  the reference computes it); ``float16`` needs the ``shader-f16`` feature.
- ``!=`` on floats is printed as ``!(a == b)`` (drivers compile ``!=`` as an
  ordered comparison, false for NaN). Signed remainder is printed as ``a - (a / b) * b`` (GLSL-based drivers leave
  ``%`` of negative operands undefined); shift amounts are ``u32``; ``xor`` of
  bools is ``!=``; WGSL has no ``?:`` (``select(false_value, true_value, cond)``).
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np

from fnarray.lowering.kernels.cstyle import CStyleRenderer
from fnarray.lowering.kernels.ir import (
    OPS,
    ArrayDecl,
    BufferParam,
    Cast,
    Const,
    For,
    If,
    Kernel,
    Let,
    Op,
    ScalarParam,
    Special,
    Sym,
    walk_exprs,
)

__all__ = ["WGSLRenderer", "render_wgsl", "wgsl_layout", "uniform_bytes", "WGSLLayout", "DEFAULT_GROUP_SIZE",
           "DTYPES"]

F16, F32 = np.dtype(np.float16), np.dtype(np.float32)
I32, U32, BOOL = np.dtype(np.int32), np.dtype(np.uint32), np.dtype(np.bool_)
C64 = np.dtype(np.complex64)

#: The dtypes WGSL computes in (``float16`` only where the adapter has ``shader-f16``); complex64 values are
#: ``vec2<f32>`` (re, im), touched only by the kernel IR's ``cmake``/``creal``/``cimag``.
DTYPES = frozenset({F32, I32, U32, BOOL, F16, C64})
#: Work-group size of kernels that do not fix one.
DEFAULT_GROUP_SIZE = 64

_TYPES = {F32: "f32", I32: "i32", U32: "u32", BOOL: "bool", F16: "f16", C64: "vec2<f32>"}
# Uniform (host-shareable) types of scalar parameters: bool as u32, f16 as f32.
_UNIFORM_TYPES = {F32: "f32", I32: "i32", U32: "u32", BOOL: "u32", F16: "f32"}
_SPECIAL_BUILTINS = {"global_id": "fa_gid", "local_id": "fa_lid", "group_id": "fa_wid"}
_XYZ = "xyz"

# Kernel-IR func op -> WGSL builtin, where the builtin does what the op means for every input.
_BUILTINS = {"exp": "exp", "exp2": "exp2", "log2": "log2", "sin": "sin", "cos": "cos", "tan": "tan",
             "sinh": "sinh", "cosh": "cosh", "asinh": "asinh", "atanh": "atanh", "sqrt": "sqrt",
             "rsqrt": "inverseSqrt", "floor": "floor", "ceil": "ceil", "rint": "round", "trunc": "trunc",
             "fabs": "abs", "popcount": "countOneBits"}
# Ops that are helper functions for floats (min/max: NaN-propagating; integers use the builtins).
_HELPED = {"div", "log", "isnan", "isinf", "isfinite", "erf", "lgamma", "log1p", "expm1", "cbrt", "pow", "fmod",
           "nextafter", "hypot", "copysign", "min", "max", "asin", "acos", "atan", "atan2", "acosh", "tanh"}



def renders_primitive(prim) -> bool:
    """Whether WGSL prints the kernel op of a one-function unary primitive (else it is decomposed)."""
    from fnarray.lowering.kernels.facts import FACTS
    fact = FACTS.get(prim)
    name = fact.func if fact is not None else None
    return name is None or name in _BUILTINS or name in _HELPED

# ----------------------------------------------------------------------------------------- helpers
# WGSL source of each float32 helper and the helpers it calls. NaN and infinity come from bit patterns.

_NAN = "bitcast<f32>(0x7fc00000u)"

_HELPER_SRC = {
    "isnan": ((), """
fn fa_isnan_f32(x: f32) -> bool {
    return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u;
}"""),
    "isinf": ((), """
fn fa_isinf_f32(x: f32) -> bool {
    return (bitcast<u32>(x) & 0x7fffffffu) == 0x7f800000u;
}"""),
    "isfinite": ((), """
fn fa_isfinite_f32(x: f32) -> bool {
    return (bitcast<u32>(x) & 0x7f800000u) != 0x7f800000u;
}"""),
    # WGSL leaves a float division by zero indeterminate (Mesa folds x / 0.0 to 0): IEEE results explicitly.
    "div": (("isnan",), f"""
fn fa_div_f32(x: f32, y: f32) -> f32 {{
    if (y == 0.0f) {{
        if (x == 0.0f || fa_isnan_f32(x)) {{
            return {_NAN};
        }}
        return bitcast<f32>(((bitcast<u32>(x) ^ bitcast<u32>(y)) & 0x80000000u) | 0x7f800000u);
    }}
    return x / y;
}}"""),
    # Mesa folds x * 0.0 to 0.0 (found by the fuzzer: NaN * 0.0 gave 0 on webgpu:0); a product with a
    # constant zero factor goes through this helper: NaN for a NaN or infinite factor, else a signed zero.
    "mulz": (("isfinite",), f"""
fn fa_mulz_f32(x: f32, y: f32) -> f32 {{
    if (x == 0.0f || y == 0.0f) {{
        if (!fa_isfinite_f32(x) || !fa_isfinite_f32(y)) {{
            return {_NAN};
        }}
        return bitcast<f32>((bitcast<u32>(x) ^ bitcast<u32>(y)) & 0x80000000u);
    }}
    return x * y;
}}"""),
    # Mesa folds x + 0.0 to x, which keeps -0.0 (IEEE: -0.0 + 0.0 is +0.0): a sum with a constant +0.0 term
    # (or a difference with a constant -0.0) clears the sign bit of a zero through its bits.
    "addz": ((), """
fn fa_addz_f32(x: f32) -> f32 {
    return bitcast<f32>(select(bitcast<u32>(x), 0u, x == 0.0f));
}"""),
    # Mesa folds exp(log(x)) to x, so exp(log(-1)) gave -1: log states its negative-argument NaN explicitly.
    "log": ((), f"""
fn fa_log_f32(x: f32) -> f32 {{
    return select(log(x), {_NAN}, x < 0.0f);
}}"""),
    "copysign": ((), """
fn fa_copysign_f32(x: f32, y: f32) -> f32 {
    return bitcast<f32>((bitcast<u32>(x) & 0x7fffffffu) | (bitcast<u32>(y) & 0x80000000u));
}"""),
    "max": (("isnan",), f"""
fn fa_max_f32(x: f32, y: f32) -> f32 {{
    return select(max(x, y), {_NAN}, fa_isnan_f32(x) || fa_isnan_f32(y));
}}"""),
    "min": (("isnan",), f"""
fn fa_min_f32(x: f32, y: f32) -> f32 {{
    return select(min(x, y), {_NAN}, fa_isnan_f32(x) || fa_isnan_f32(y));
}}"""),
    "tanh": (("isnan",), """
fn fa_tanh_f32(x: f32) -> f32 {
    // tanh(+-0) keeps the sign and tanh(NaN) is NaN on every driver.
    return select(select(tanh(x), x, x == 0.0f), x, fa_isnan_f32(x));
}"""),
    "log1p": ((), """
fn fa_log1p_f32(x: f32) -> f32 {
    // Kahan: log(u) * x / (u - 1) with u = 1 + x cancels the rounding of u.
    let u = 1.0f + x;
    let d = u - 1.0f;
    if (d == 0.0f) {
        return x;
    }
    let l = log(u);
    return select(l * (x / d), l, u == bitcast<f32>(0x7f800000u));
}"""),
    "expm1": ((), """
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
    if (u == bitcast<f32>(0x7f800000u)) {
        return u;
    }
    return d * (x / log(u));
}"""),
    "cbrt": (("isnan", "isinf", "copysign"), """
fn fa_cbrt_f32(x: f32) -> f32 {
    let a = abs(x);
    if (a == 0.0f || fa_isnan_f32(x) || fa_isinf_f32(x)) {
        return x;
    }
    var y = exp2(log2(a) * (1.0f / 3.0f));
    y = y - (y * y * y - a) / (3.0f * y * y);
    return fa_copysign_f32(y, x);
}"""),
    "atan": (("isnan", "copysign"), """
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
}"""),
    "asin": (("atan", "isnan"), """
fn fa_asin_f32(x: f32) -> f32 {
    let a = abs(x);
    if (a > 1.0f || fa_isnan_f32(x)) {
        return bitcast<f32>(0x7fc00000u);
    }
    if (a == 1.0f) {
        return select(1.5707963267948966f, -1.5707963267948966f, x < 0.0f);
    }
    return fa_atan_f32(x / sqrt((1.0f - x) * (1.0f + x)));
}"""),
    "acos": (("atan", "isnan"), """
fn fa_acos_f32(x: f32) -> f32 {
    let a = abs(x);
    if (a > 1.0f || fa_isnan_f32(x)) {
        return bitcast<f32>(0x7fc00000u);
    }
    if (x == -1.0f) {
        return 3.1415926535897932f;
    }
    // acos(x) = 2 atan(sqrt((1 - x) / (1 + x))), accurate near both ends.
    return 2.0f * fa_atan_f32(sqrt((1.0f - x) / (1.0f + x)));
}"""),
    "erf": (("isnan",), """
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
}"""),
    "lgamma": (("isnan", "isinf"), """
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
        return bitcast<f32>(0x7f800000u);
    }
    if (x >= 0.5f) {
        return fa_lgamma_pos_f32(x);
    }
    if (x == floor(x)) {
        return bitcast<f32>(0x7f800000u);
    }
    // Reflection: lgamma(x) = log(pi / |sin(pi x)|) - lgamma(1 - x). x - round(x) in [-1/2, 1/2] is exact and
    // keeps a tiny x whole; sin by its Taylor series to t^13 (below 1e-9 off on [-pi/2, pi/2]), as Vulkan lets
    // the builtin be 2^-11 off in absolute terms, all of a tiny sin's digits.
    let t = 3.1415926535897932f * (x - round(x));
    let t2 = t * t;
    let s = t * (1.0f - t2 / 6.0f * (1.0f - t2 / 20.0f * (1.0f - t2 / 42.0f * (1.0f - t2 / 72.0f
            * (1.0f - t2 / 110.0f * (1.0f - t2 / 156.0f))))));
    return 1.1447298858494002f - log(abs(s)) - fa_lgamma_pos_f32(1.0f - x);
}"""),
    "pow": (("isnan", "isinf"), """
fn fa_pow_f32(x: f32, y: f32) -> f32 {
    // C's pow: pow(x, 0) = 1 and pow(1, y) = 1 even for NaN; negative bases need an integer exponent.
    if (y == 0.0f || x == 1.0f) {
        return 1.0f;
    }
    if (fa_isnan_f32(x) || fa_isnan_f32(y)) {
        return bitcast<f32>(0x7fc00000u);
    }
    let ay = abs(y);
    let is_int = floor(y) == y;
    let odd = is_int && ay < 16777216.0f && (ay - 2.0f * floor(ay * 0.5f)) == 1.0f;
    let ax = abs(x);
    if (x < 0.0f && !is_int && !fa_isinf_f32(x)) {
        return bitcast<f32>(0x7fc00000u);
    }
    if (x == -1.0f && fa_isinf_f32(y)) {
        return 1.0f;
    }
    var r: f32;
    if (ax == 0.0f) {
        r = select(0.0f, bitcast<f32>(0x7f800000u), y < 0.0f);
    } else if (fa_isinf_f32(y)) {
        r = select(0.0f, bitcast<f32>(0x7f800000u), (ax > 1.0f) == (y > 0.0f));
    } else {
        r = exp2(y * log2(ax));
    }
    let neg = odd && (bitcast<u32>(x) & 0x80000000u) != 0u;
    return select(r, -r, neg);
}"""),
    "fmod": (("isnan", "isinf", "copysign"), """
fn fa_fmod_f32(x: f32, y: f32) -> f32 {
    // Exact: subtract the largest m * 2^k <= r until r < m (each subtraction is exact).
    if (fa_isnan_f32(x) || fa_isnan_f32(y) || fa_isinf_f32(x) || y == 0.0f) {
        return bitcast<f32>(0x7fc00000u);
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
}"""),
    "nextafter": (("isnan",), """
fn fa_nextafter_f32(x: f32, y: f32) -> f32 {
    if (fa_isnan_f32(x) || fa_isnan_f32(y)) {
        return bitcast<f32>(0x7fc00000u);
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
}"""),
    "hypot": (("isinf", "isnan"), """
fn fa_hypot_f32(x: f32, y: f32) -> f32 {
    let a = abs(x);
    let b = abs(y);
    if (fa_isinf_f32(a) || fa_isinf_f32(b)) {
        return bitcast<f32>(0x7f800000u);
    }
    if (fa_isnan_f32(a) || fa_isnan_f32(b)) {
        return bitcast<f32>(0x7fc00000u);
    }
    let m = max(a, b);
    if (m == 0.0f) {
        return 0.0f;
    }
    let q = min(a, b) / m;
    return m * sqrt(1.0f + q * q);
}"""),
    "atan2": (("atan", "isnan", "isinf", "copysign"), """
fn fa_atan2_f32(y: f32, x: f32) -> f32 {
    // C's atan2 with its signed zeros and infinities, on the atan helper.
    if (fa_isnan_f32(x) || fa_isnan_f32(y)) {
        return bitcast<f32>(0x7fc00000u);
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
}"""),
    "acosh": (("isnan",), """
fn fa_acosh_f32(x: f32) -> f32 {
    return select(acosh(x), bitcast<f32>(0x7fc00000u), x < 1.0f || fa_isnan_f32(x));
}"""),
    "bits": ((), """
fn fa_f32_bits(b: u32) -> f32 {
    return bitcast<f32>(b);
}"""),
}


def _runtime_special(m) -> str:
    bits = int(m.group(1), 16)
    return f"fa_f32_bits({m.group(1)}u)" if (bits >> 23) & 0xFF == 0xFF else m.group(0)


def _with_runtime_specials(deps, src):
    # Infinities and NaNs become calls of fa_f32_bits: WGSL const-evaluation (Tint's, in Chromium) rejects a
    # non-finite constant such as bitcast<f32>(0x7f800000u), and a function call is never a constant expression.
    new = re.sub(r"bitcast<f32>\((0x[0-9a-f]{8})u\)", _runtime_special, src)
    return (tuple(deps) + ("bits",) if new != src else tuple(deps)), new


_HELPER_SRC = {name: _with_runtime_specials(*v) for name, v in _HELPER_SRC.items()}


def _helper_closure(names) -> list:
    """``names`` and the helpers they call, in an order where each comes after what it calls."""
    out: list = []

    def visit(n):
        if n in out:
            return
        for dep in _HELPER_SRC[n][0]:
            visit(dep)
        out.append(n)

    for n in sorted(names):
        visit(n)
    return out


def _float_literal(x, d) -> str:
    """A WGSL literal of the float ``x`` of dtype ``d`` (bit patterns for what WGSL may not parse)."""
    if d == F16:
        h = np.float16(x)
        if np.isfinite(h) and (h == 0 or abs(h) >= np.finfo(F16).tiny) and not (h == 0 and np.signbit(h)):
            text = repr(float(h))
            return text + "h" if h >= 0 else f"({text}h)"
        return f"f16({_float_literal(float(h), F32)})"
    bits = int(np.asarray(x, F32).view(np.uint32))
    if not np.isfinite(x):
        return f"fa_f32_bits({bits:#010x}u)"
    if (x != 0 and abs(x) < np.finfo(F32).tiny) or bits == 0x80000000:
        return f"bitcast<f32>({bits:#010x}u)"
    text = str(np.float32(x))
    if "e" not in text and "." not in text:
        text += ".0"
    return text + "f" if x >= 0 else f"({text}f)"


@dataclasses.dataclass(frozen=True)
class WGSLLayout:
    """How the runtime binds a kernel: buffer parameter ``k`` at binding ``k``, then (when the kernel
    has scalar parameters) one uniform struct at binding ``uniform_binding``.

    ``uniform_fields``: ``(name, dtype)`` of the struct in order, each field 4 bytes (``bool`` as
    ``u32``, ``float16`` as ``f32``); ``group_size``: the work-group size (x, y, z).
    """

    buffers: tuple
    uniform_fields: tuple
    uniform_binding: int | None
    group_size: tuple


def wgsl_layout(kernel: Kernel) -> WGSLLayout:
    """The binding layout and work-group size of ``kernel`` (what ``render_wgsl`` prints)."""
    bufs = tuple(p for p in kernel.params if isinstance(p, BufferParam))
    fields = tuple((p.name, np.dtype(p.dtype)) for p in kernel.params if isinstance(p, ScalarParam))
    gs = tuple(kernel.local_size) if kernel.local_size is not None else (DEFAULT_GROUP_SIZE,)
    gs = gs + (1,) * (3 - len(gs))
    return WGSLLayout(bufs, fields, len(bufs) if fields else None, gs)


def uniform_bytes(layout: WGSLLayout, values: dict) -> bytes:
    """The uniform struct of ``layout`` filled with ``values`` (scalar parameter name -> value)."""
    out = bytearray()
    for name, d in layout.uniform_fields:
        v = values[name]
        if d == BOOL:
            out += np.uint32(bool(v)).tobytes()
        elif d == F16:
            out += np.float32(v).tobytes()
        else:
            out += np.asarray(v, d).tobytes()
    out += b"\0" * (-len(out) % 16)
    return bytes(out)


class WGSLRenderer(CStyleRenderer):
    types = _TYPES
    storage_types = {BOOL: "u32"}

    def __init__(self):
        self._layout = None
        self._workgroup_arrays = []

    # ------------------------------------------------------------------ rewrites before printing
    def rewrite_expr(self, e):
        if isinstance(e, Op):
            a = e.args
            if e.op in ("shl", "shr") and a[1].dtype != U32:
                return Op(e.op, (a[0], Cast(a[1], U32)), e.dtype)
            if e.op == "xor" and e.dtype == BOOL:
                return Op("ne", a, BOOL)
            if e.op == "rem" and e.dtype.kind == "i" and not _positive_const(a[1]):
                # a - (a / b) * b: GLSL-based drivers leave % of negative operands undefined (a constant
                # divisor only comes from index arithmetic, whose dividends are never negative).
                return Op("sub", (a[0], Op("mul", (Op("div", a, e.dtype), a[1]), e.dtype)), e.dtype)
            if e.op == "rem" and e.dtype.kind == "f":
                return Op("fmod", a, e.dtype)
            if e.op == "ne" and a[0].dtype.kind == "f":
                # Drivers compile != on floats as an ordered comparison (NaN != 0 false): negate == instead.
                return Op("lnot", (Op("eq", a, BOOL),), BOOL)
            if e.op in ("lt", "le", "gt", "ge") and a[0].dtype == BOOL:
                return Op(e.op, (Cast(a[0], U32), Cast(a[1], U32)), e.dtype)
        return e

    def render(self, kernel: Kernel) -> str:
        layout = wgsl_layout(kernel)
        pre = [Let(name, Sym(f"fa_args.{name}", d)) if d not in (BOOL, F16) else
               Let(name, Cast(Sym(f"fa_args.{name}", U32 if d == BOOL else F32), d))
               for name, d in layout.uniform_fields]
        self._layout = layout
        self._workgroup_arrays = [s for s in _array_decls(kernel.body) if s.space == "local"]
        try:
            return super().render(dataclasses.replace(kernel, body=tuple(pre) + _without_local_arrays(kernel.body)))
        finally:
            self._layout = None
            self._workgroup_arrays = []

    # ------------------------------------------------------------------ hooks
    def literal(self, c: Const) -> str:
        d, v = c.dtype, c.value
        if d == BOOL:
            return "true" if v else "false"
        if d == I32:
            v = int(v)
            return f"{v}i" if v >= 0 else ("bitcast<i32>(0x80000000u)" if v == -2**31 else f"({v}i)")
        if d == U32:
            return f"{int(v)}u"
        if d in (F32, F16):
            return _float_literal(float(v), d)
        if d == C64:
            z = complex(v)
            return f"vec2<f32>({_float_literal(z.real, F32)}, {_float_literal(z.imag, F32)})"
        raise TypeError(f"WGSL has no {d.name} literal (the webgpu backend computes in "
                        f"{', '.join(sorted(t.name for t in DTYPES))})")

    def special(self, e: Special) -> str:
        if e.kind == "global_size":
            return f"i32(fa_nwg.{_XYZ[e.dim]} * {self._layout.group_size[e.dim]}u)"
        return f"i32({_SPECIAL_BUILTINS[e.kind]}.{_XYZ[e.dim]})"

    def cast(self, x: str, dtype) -> str:
        return f"{self.type_name(dtype)}({x})"

    def to_storage(self, value: str, dtype) -> str:
        return f"select(0u, 1u, {value})"

    def from_storage(self, text: str, dtype) -> str:
        return f"({text} != 0u)"

    def bitcast(self, x: str, dtype) -> str:
        return f"bitcast<{self.type_name(dtype)}>({x})"

    def select(self, cond: str, a: str, b: str, dtype) -> str:
        return f"select({b}, {a}, {cond})"

    def complex_op(self, op: str, args: list, dtype) -> str:
        if op == "cmake":
            return f"vec2<f32>({args[0]}, {args[1]})"
        return f"({args[0]}).{'x' if op == 'creal' else 'y'}"

    def let(self, name, dtype, value) -> str:
        return f"let {name}: {self.type_name(dtype)} = {value};"

    def decl(self, name, dtype, value) -> str:
        return f"var {name}: {self.type_name(dtype)} = {value};"

    def array_decl(self, s: ArrayDecl) -> str:
        return f"var {s.name}: array<{self.type_name(s.dtype)}, {s.size}>;"

    def for_header(self, var, start, stop, step) -> str:
        return f"for (var {var}: i32 = {start}; {var} < {stop}; {var} += {step})"

    def barrier(self, space: str = "local") -> str:
        if space == "global":  # storageBarrier orders the buffers only; the second one the workgroup arrays
            return "storageBarrier(); workgroupBarrier();"
        return "workgroupBarrier();"

    def signature(self, kernel: Kernel) -> str:
        gs = ", ".join(f"{g}" for g in self._layout.group_size)
        return (f"@compute @workgroup_size({gs})\nfn {kernel.name}(@builtin(global_invocation_id) fa_gid: vec3<u32>, "
                "@builtin(local_invocation_id) fa_lid: vec3<u32>, @builtin(workgroup_id) fa_wid: vec3<u32>, "
                "@builtin(num_workgroups) fa_nwg: vec3<u32>)")

    def prelude(self, kernel: Kernel) -> list:
        exprs = list(walk_exprs(kernel.body))
        uses_f16 = any(getattr(p, "dtype", None) == F16 for p in kernel.params) or any(
            e.dtype == F16 for e in exprs) or any(s.dtype == F16 for s in self._workgroup_arrays) or any(
            s.dtype == F16 for s in _array_decls(kernel.body))
        lines = ["enable f16;", ""] if uses_f16 else []
        lay = self._layout
        for k, p in enumerate(lay.buffers):
            access = "read_write" if p.writes else "read"
            lines.append(f"@group(0) @binding({k}) var<storage, {access}> {p.name}: "
                         f"array<{self.storage_name(p.dtype)}>;")
        if lay.uniform_fields:
            lines.append("struct FaArgs {")
            for name, d in lay.uniform_fields:
                lines.append(f"    {name}: {_UNIFORM_TYPES[d]},")
            lines.append("}")
            lines.append(f"@group(0) @binding({lay.uniform_binding}) var<uniform> fa_args: FaArgs;")
        for s in self._workgroup_arrays:
            lines.append(f"var<workgroup> {s.name}: array<{self.type_name(s.dtype)}, {s.size}>;")
        helpers = {e.op for e in exprs if isinstance(e, Op) and e.op in _HELPED and e.dtype.kind == "f"}
        helpers |= {e.op for e in exprs if isinstance(e, Op) and e.op in ("isnan", "isinf", "isfinite")}
        if any(_is_mul_by_zero(e) for e in exprs):
            helpers.add("mulz")
        if any(_zero_term(e) is not None for e in exprs):
            helpers.add("addz")
        if any(isinstance(e, Const) and e.dtype.kind == "f" and not np.isfinite(e.value) for e in exprs):
            helpers.add("bits")
        for name in _helper_closure(helpers):
            lines.extend(_HELPER_SRC[name][1].splitlines())
        lines.append("")
        return lines

    # ------------------------------------------------------------------ function ops
    def expr(self, e) -> str:
        if isinstance(e, Op) and OPS[e.op][1] == "func":
            return self._func(e, [self.expr(a) for a in e.args])
        if isinstance(e, Op) and e.op == "div" and e.dtype.kind == "f":
            a, b = (self.expr(x) for x in e.args)
            if e.dtype == F16:
                return f"f16(fa_div_f32(f32({a}), f32({b})))"
            return f"fa_div_f32({a}, {b})"
        if _is_mul_by_zero(e):
            a, b = (self.expr(x) for x in e.args)
            if e.dtype == F16:
                return f"f16(fa_mulz_f32(f32({a}), f32({b})))"
            return f"fa_mulz_f32({a}, {b})"
        other = _zero_term(e)
        if other is not None:
            a = self.expr(other)
            return f"f16(fa_addz_f32(f32({a})))" if e.dtype == F16 else f"fa_addz_f32({a})"
        return super().expr(e)

    def _func(self, e: Op, args: list) -> str:
        op, d = e.op, e.args[0].dtype
        if op in ("min", "max") and d.kind != "f":
            if d == BOOL:  # max of bools is or, min is and
                return f"({args[0]} {'|' if op == 'max' else '&'} {args[1]})"
            return f"{op}({', '.join(args)})"
        if op == "fabs" and d.kind != "f":
            return f"abs({args[0]})"
        if op in _HELPED:
            if d == F16:
                inner = ", ".join(f"f32({a})" for a in args)
                call = f"fa_{op}_f32({inner})"
                return call if e.dtype == BOOL else f"f16({call})"
            return f"fa_{op}_f32({', '.join(args)})"
        name = _BUILTINS.get(op)
        if name is None:
            raise TypeError(f"WGSL renderer has no rule for the kernel op {op!r}")
        return f"{name}({', '.join(args)})"


def _is_mul_by_zero(e) -> bool:
    """A float product with a constant zero factor (which Mesa folds to 0.0, losing NaN and inf)."""
    return (isinstance(e, Op) and e.op == "mul" and e.dtype.kind == "f"
            and any(isinstance(a, Const) and a.value == 0 for a in e.args))


def _zero_term(e):
    """For ``x + 0.0``, ``0.0 + x`` or ``x - (-0.0)`` in floats (which Mesa folds to ``x``, keeping a -0.0 that
    IEEE makes +0.0): ``x``; else ``None``."""
    if not (isinstance(e, Op) and e.dtype.kind == "f" and e.op in ("add", "sub")):
        return None
    want = e.op == "sub"  # the sign bit of the zero that makes the operation x + 0.0
    for k, a in enumerate(e.args):
        if (isinstance(a, Const) and a.value == 0 and bool(np.signbit(a.value)) == want
                and (e.op == "add" or k == 1)):
            return e.args[1 - k]
    return None


def _without_local_arrays(stmts) -> tuple:
    """The statements without their work-group array declarations (WGSL declares them at module scope)."""
    out = []
    for s in stmts:
        if isinstance(s, ArrayDecl) and s.space == "local":
            continue
        if isinstance(s, For):
            s = dataclasses.replace(s, body=_without_local_arrays(s.body))
        elif isinstance(s, If):
            s = dataclasses.replace(s, then=_without_local_arrays(s.then), orelse=_without_local_arrays(s.orelse))
        out.append(s)
    return tuple(out)


def _positive_const(e) -> bool:
    return isinstance(e, Const) and e.value > 0


def _array_decls(stmts):
    for s in stmts:
        if isinstance(s, ArrayDecl):
            yield s
        elif isinstance(s, For):
            yield from _array_decls(s.body)
        elif isinstance(s, If):
            yield from _array_decls(s.then)
            yield from _array_decls(s.orelse)


def render_wgsl(kernel: Kernel) -> str:
    """WGSL source of ``kernel`` (deterministic: the same kernel gives the same text).

    Bindings and the uniform struct follow ``wgsl_layout(kernel)``. Raises ``TypeError``
    for a dtype or op WGSL cannot express (the scheduler never gives it one for a webgpu
    device: it only uses the dtypes of the device's ``Capabilities``).
    """
    return WGSLRenderer().render(kernel)  # a renderer per call: it holds the kernel's layout while it prints
