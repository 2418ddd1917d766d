"""OpenCL C from the kernel IR: a thin subclass of the C-style renderer.

It declares OpenCL C's type names (``bool`` buffers are ``uchar``; complex
values are ``float2``/``double2``), literals, work-item builtins, casts
(``convert_<type>``) and bit casts (``as_<type>``), and the kernel signature.
Kernels with ``float64``/``int64`` need the device's ``cl_khr_fp64``; the
``#pragma`` is printed when a kernel uses ``double``.
"""

from __future__ import annotations

import numpy as np

from fnarray.lowering.kernels.cstyle import CStyleRenderer
from fnarray.lowering.kernels.ir import (INT32, ArrayDecl, Bitcast, BufferParam, Const, For, If, Kernel, Op, const,
                                         walk_exprs)

__all__ = ["OpenCLRenderer", "render_opencl"]

_TYPES = {
    np.dtype(np.bool_): "bool", np.dtype(np.int8): "char", np.dtype(np.uint8): "uchar",
    np.dtype(np.int16): "short", np.dtype(np.uint16): "ushort", np.dtype(np.int32): "int",
    np.dtype(np.uint32): "uint", np.dtype(np.int64): "long", np.dtype(np.uint64): "ulong",
    np.dtype(np.float16): "half", np.dtype(np.float32): "float", np.dtype(np.float64): "double",
    np.dtype(np.complex64): "float2", np.dtype(np.complex128): "double2",
}
_INT_SUFFIX = {np.dtype(np.int32): "", np.dtype(np.uint32): "u", np.dtype(np.int64): "L",
               np.dtype(np.uint64): "UL"}
_ORDERED = frozenset({"lt", "le", "gt", "ge"})
_F32 = np.dtype(np.float32)

# float32 tanh, exp and log without library calls: PoCL's tanh, exp and log (and rint, copysign...) are calls
# that keep its work-group vectoriser off the whole kernel (a 4M chain: ~10x slower than these forms).
# Each helper is guarded, as the runtime builds several kernels' sources as one program.
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
_HELPERS = {
    "tanh": ("fa_tanh_f32", """#ifndef FA_TANH_F32
#define FA_TANH_F32
float fa_tanh_f32(const float x) {
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
float fa_exp_f32(const float x) {
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
float fa_log_f32(const float x) {
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
_SPECIALS = {"global_id": "get_global_id", "local_id": "get_local_id", "group_id": "get_group_id",
             "global_size": "get_global_size"}


class OpenCLRenderer(CStyleRenderer):
    types = _TYPES
    storage_types = {np.dtype(np.bool_): "uchar"}
    functions = {"min": "min", "max": "max", "fabs": "fabs"}

    def expr(self, e) -> str:
        if isinstance(e, Op) and e.op in _HELPERS and e.dtype == _F32:
            return f"{_HELPERS[e.op][0]}({self.expr(e.args[0])})"
        return super().expr(e)

    def rewrite_expr(self, e):
        if isinstance(e, Op) and e.op in ("fabs", "copysign") and e.dtype == _F32:
            # The sign bit cleared (and copied): exact, and not a library call (see _HELPERS).
            mag = Op("and", (Bitcast(e.args[0], INT32), const(0x7fffffff, INT32)), INT32)
            if e.op == "copysign":
                sign = Op("and", (Bitcast(e.args[1], INT32), const(-2 ** 31, INT32)), INT32)
                mag = Op("or", (mag, sign), INT32)
            return Bitcast(mag, _F32)
        if isinstance(e, Op) and e.op == "isnan" and e.args[0].dtype.kind == "f":
            # x != x: a comparison PoCL vectorises (its isnan is a call per element).
            return Op("ne", (e.args[0], e.args[0]), e.dtype)
        if isinstance(e, Op) and e.op == "land":
            # OpenCL C's ordered comparisons are IEEE's (false where an operand is NaN), so the explicit
            # "and not NaN" that the NaN-propagating min/max/clip rules add for WGSL's sake
            # (``rules.max_of``) is dropped: a select on one comparison, which PoCL vectorises.
            a, b = e.args
            if _not_nan_of(b, a):
                return a
            if _not_nan_of(a, b):
                return b
        return e

    def literal(self, c: Const) -> str:
        d, v = c.dtype, c.value
        if d == np.bool_:
            return "true" if v else "false"
        if d.kind in "iu":
            v = int(v)
            if d in _INT_SUFFIX:
                if d.kind == "i" and v == int(np.iinfo(d).min):
                    return f"({v + 1}{_INT_SUFFIX[d]} - 1{_INT_SUFFIX[d]})"
                return f"{v}{_INT_SUFFIX[d]}" if v >= 0 else f"({v}{_INT_SUFFIX[d]})"
            return f"(({self.type_name(d)}){v})"
        if d.kind == "f":
            x = float(v)
            name = self.type_name(d)
            if np.isnan(x):
                return f"(({name})NAN)"
            if np.isinf(x):
                return f"(({name})INFINITY)" if x > 0 else f"(-({name})INFINITY)"
            text = str(np.float32(x)) if d == np.float32 else repr(x)
            if "e" not in text and "." not in text:
                text += ".0"
            text += "f" if d == np.float32 else ""
            return text if x >= 0 and not text.startswith("-") else f"({text})"
        if d.kind == "c":
            part = np.dtype(np.float32) if d == np.complex64 else np.dtype(np.float64)
            z = complex(v)
            re, im = (self.literal(Const(np.asarray(t, part).tobytes(), part)) for t in (z.real, z.imag))
            return f"(({self.type_name(d)})({re}, {im}))"
        raise TypeError(f"no OpenCL literal for {d.name}")

    def special(self, e) -> str:
        return f"((int){_SPECIALS[e.kind]}({e.dim}))"

    def cast(self, x: str, dtype) -> str:
        return f"(({self.type_name(dtype)})({x}))"

    def to_storage(self, value: str, dtype) -> str:
        return f"(({self.storage_name(dtype)})({value}))"

    def from_storage(self, text: str, dtype) -> str:
        return f"({text} != 0)"

    def bitcast(self, x: str, dtype) -> str:
        return f"as_{self.type_name(dtype)}({x})"

    def select(self, cond: str, a: str, b: str, dtype) -> str:
        return f"({cond} ? {a} : {b})"

    def complex_op(self, op: str, args: list, dtype) -> str:
        if op == "cmake":
            return f"(({self.type_name(dtype)})({args[0]}, {args[1]}))"
        return f"({args[0]}).{'x' if op == 'creal' else 'y'}"

    def let(self, name, dtype, value) -> str:
        return f"const {self.type_name(dtype)} {name} = {value};"

    def decl(self, name, dtype, value) -> str:
        return f"{self.type_name(dtype)} {name} = {value};"

    def array_decl(self, s: ArrayDecl) -> str:
        space = "__local " if s.space == "local" else ""
        return f"{space}{self.type_name(s.dtype)} {s.name}[{s.size}];"

    def for_header(self, var, start, stop, step) -> str:
        inc = f"{var}++" if step == "1" else f"{var} += {step}"
        return f"for (int {var} = {start}; {var} < {stop}; {inc})"

    def barrier(self, space: str = "local") -> str:
        if space == "global":
            return "barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);"
        return "barrier(CLK_LOCAL_MEM_FENCE);"

    def signature(self, kernel: Kernel) -> str:
        params = []
        for p in kernel.params:
            if isinstance(p, BufferParam):
                const = "" if p.writes else "const "
                params.append(f"__global {const}{self.storage_name(p.dtype)}* restrict {p.name}")
            else:
                params.append(f"const {self.type_name(p.dtype)} {p.name}")
        attr = ""
        if kernel.local_size is not None:
            dims = tuple(kernel.local_size) + (1,) * (3 - len(kernel.local_size))
            attr = f"__attribute__((reqd_work_group_size({dims[0]}, {dims[1]}, {dims[2]}))) "
        return f"__kernel {attr}void {kernel.name}({', '.join(params)})"

    def prelude(self, kernel: Kernel) -> list:
        used = {p.dtype for p in kernel.params} | {e.dtype for e in walk_exprs(kernel.body)}
        used |= {s.dtype for s in _array_decls(kernel.body)}
        lines = []
        if used & {np.dtype(np.float64), np.dtype(np.complex128)}:
            lines.append("#pragma OPENCL EXTENSION cl_khr_fp64 : enable")
        if np.dtype(np.float16) in used:
            lines.append("#pragma OPENCL EXTENSION cl_khr_fp16 : enable")
        helped = {e.op for e in walk_exprs(kernel.body) if isinstance(e, Op) and e.op in _HELPERS and e.dtype == _F32}
        lines.extend(_HELPERS[name][1] for name in sorted(helped))
        return lines


def _not_nan_of(term, cmp) -> bool:
    """Whether ``term`` is ``!isnan(z)`` (rewritten: ``!(z != z)``) for an operand ``z`` of the ordered
    float comparison ``cmp``."""
    if not (isinstance(term, Op) and term.op == "lnot" and isinstance(cmp, Op) and cmp.op in _ORDERED):
        return False
    inner = term.args[0]
    return (isinstance(inner, Op) and inner.op == "ne" and inner.args[0] == inner.args[1]
            and inner.args[0] in cmp.args and inner.args[0].dtype.kind == "f")


def _array_decls(stmts):
    for s in stmts:
        if isinstance(s, ArrayDecl):
            yield s
        elif isinstance(s, For):
            yield from _array_decls(s.body)
        elif isinstance(s, If):
            yield from _array_decls(s.then)
            yield from _array_decls(s.orelse)


_RENDERER = OpenCLRenderer()


def render_opencl(kernel: Kernel) -> str:
    """OpenCL C source of ``kernel`` (deterministic: the same kernel gives the same text)."""
    return _RENDERER.render(kernel)
