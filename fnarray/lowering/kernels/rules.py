"""Elementwise primitives as kernel-IR expressions, with fnarray's pinned semantics.

``ELEMENTWISE[primitive](b, xs, params, in_avals, out_aval) -> Expr`` builds the
value of one output element from its inputs' values ``xs`` (kernel-IR
expressions), binding intermediate values through the ``KernelBuilder`` ``b``.
The rules reproduce the numpy reference (``lowering/numpy/``) (the reference): integer division and
remainder by zero give 0 (and never trap: ``INT_MIN / -1`` is guarded), shifts
past the bit width give 0 or -1, float-to-int casts saturate with NaN -> 0,
``max``/``min`` propagate NaN, signed integer arithmetic wraps (it is computed
in the unsigned type, where C defines wrap-around). Complex values are
expanded into real arithmetic on their two components.

Everything here is target-neutral: the same expressions print as OpenCL C or
WGSL.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np

from fnarray.core import primitives as P
from fnarray.lowering.kernels import facts
from fnarray.lowering.kernels.ir import BOOL, OPS, UINT32, Bitcast, Cast, Const, Op, Select, const

__all__ = ["ELEMENTWISE", "UNARY_FUNCS", "op", "select", "convert", "max_of", "min_of", "add_of", "mul_of", "lowest",
           "highest", "float_math_dtype", "logaddexp", "COMPLEX_OK", "LOW_BIT", "low_bit_value", "to_low_bit"]

ELEMENTWISE: dict = {}

F32 = np.dtype(np.float32)
F16 = np.dtype(np.float16)


def op(name, *args, dtype=None):
    """``Op(name, args)``; the dtype is bool for comparisons and ``isnan``/``isinf``/``isfinite``, else the
    first argument's."""
    if dtype is None:
        dtype = BOOL if OPS[name][1] == "compare" or name in ("isnan", "isinf", "isfinite") else args[0].dtype
    if dtype.kind in "iu" and name in ("add", "sub", "mul") and len(args) == 2:
        folded = _fold_int(name, args[0], args[1], dtype)
        if folded is not None:
            return folded
    return Op(name, tuple(args), dtype)


def _int_value(x):
    return int(x.value) if isinstance(x, Const) and x.dtype.kind in "iu" else None


def _fold_int(name, a, b, dtype):
    """Integer ``add``/``sub``/``mul`` with constant operands, or a 0 or 1 operand, folded (index math)."""
    va, vb = _int_value(a), _int_value(b)
    if va is not None and vb is not None and dtype == np.int32:
        r = {"add": va + vb, "sub": va - vb, "mul": va * vb}[name]
        if -2**31 <= r < 2**31:
            return const(r, dtype)
    if name == "mul":
        if va == 0 or vb == 0:
            return const(0, dtype)
        if va == 1:
            return b
        if vb == 1:
            return a
    elif vb == 0:
        return a
    elif name == "add" and va == 0:
        return b
    return None


def bitcast(x, dtype):
    """``x``'s bits as ``dtype`` (a constant is converted here, not in the kernel)."""
    dtype = np.dtype(dtype)
    if isinstance(x, Const):
        return Const(x.bits, dtype)
    return Bitcast(x, dtype)


def select(cond, a, b):
    return Select(cond, a, b)


def _kind(d):
    return np.dtype(d).kind


def _is_float(d):
    return _kind(d) == "f"


def _is_complex(d):
    return _kind(d) == "c"


def _is_signed(d):
    return _kind(d) == "i"


def _unsigned(d):
    return np.dtype(f"u{np.dtype(d).itemsize}")


def _signed(d):
    return np.dtype(f"i{np.dtype(d).itemsize}")


def _part(d):
    return np.dtype(np.float32) if np.dtype(d) == np.complex64 else np.dtype(np.float64)


def float_math_dtype(d):
    """The dtype transcendental functions compute in: float16 computes in float32 (as the reference)."""
    return F32 if np.dtype(d) == F16 else np.dtype(d)


def _zero(d):
    return const(0, d)


def _one(d):
    return const(1, d)


def lowest(d):
    """The identity of ``max``: -inf, the smallest integer, or False."""
    d = np.dtype(d)
    if d == np.bool_:
        return const(False, d)
    if d.kind in "iu":
        return const(np.iinfo(d).min, d)
    return const(-np.inf, d)


def highest(d):
    d = np.dtype(d)
    if d == np.bool_:
        return const(True, d)
    if d.kind in "iu":
        return const(np.iinfo(d).max, d)
    return const(np.inf, d)


def _wrapping(name, a, b=None):
    """Integer ``add``/``sub``/``mul``/``neg`` with wrap-around: computed in an unsigned type."""
    d = a.dtype
    args = (a,) if b is None else (a, b)
    if d.itemsize < 4:
        wide = tuple(Cast(x, UINT32) for x in args)
        return Cast(_apply(name, wide, UINT32), d)
    if _is_signed(d):
        u = _unsigned(d)
        return Bitcast(_apply(name, tuple(bitcast(x, u) for x in args), u), d)
    return _apply(name, args, d)


def _apply(name, args, d):
    if name == "neg":
        return Op("sub", (_zero(d), args[0]), d)
    return Op(name, args, d)


def _cparts(b, z):
    z = b.let(z)
    p = _part(z.dtype)
    return b.let(op("creal", z, dtype=p)), b.let(op("cimag", z, dtype=p))


def _cmake(re, im, d):
    return Op("cmake", (re, im), d)


# ------------------------------------------------------------------------------------------ arithmetic


def add_of(b, x, y):
    d = x.dtype
    if _is_complex(d):
        (xr, xi), (yr, yi) = _cparts(b, x), _cparts(b, y)
        return _cmake(op("add", xr, yr), op("add", xi, yi), d)
    if d == np.bool_:
        return op("lor", x, y)
    if _kind(d) in "iu":
        return _wrapping("add", x, y)
    return op("add", x, y)


def _sub(b, x, y):
    d = x.dtype
    if _is_complex(d):
        (xr, xi), (yr, yi) = _cparts(b, x), _cparts(b, y)
        return _cmake(op("sub", xr, yr), op("sub", xi, yi), d)
    if _kind(d) in "iu":
        return _wrapping("sub", x, y)
    return op("sub", x, y)


def mul_of(b, x, y):
    d = x.dtype
    if _is_complex(d):
        (xr, xi), (yr, yi) = _cparts(b, x), _cparts(b, y)
        re = op("sub", b.let(op("mul", xr, yr)), b.let(op("mul", xi, yi)))
        im = op("add", b.let(op("mul", xr, yi)), b.let(op("mul", xi, yr)))
        return _cmake(b.let(re), b.let(im), d)
    if d == np.bool_:
        return op("land", x, y)
    if _kind(d) in "iu":
        return _wrapping("mul", x, y)
    return op("mul", x, y)


def _neg(b, x):
    d = x.dtype
    if _is_complex(d):
        xr, xi = _cparts(b, x)
        return _cmake(op("neg", xr), op("neg", xi), d)
    if _kind(d) in "iu":
        return _wrapping("neg", x)
    return op("neg", x)


def _int_div(b, x, y):
    d = x.dtype
    zero = b.let(op("eq", y, _zero(d)))
    if _is_signed(d) and d.itemsize >= 4:
        # INT_MIN / -1 traps on some hardware: divide by 1 there and negate (wrapping) instead.
        minus1 = b.let(op("eq", y, const(-1, d)))
        safe = b.let(select(op("lor", zero, minus1), _one(d), y))
        q = b.let(op("div", x, safe))
        return select(zero, _zero(d), select(minus1, b.let(_wrapping("neg", x)), q))
    safe = b.let(select(zero, _one(d), y))
    return select(zero, _zero(d), op("div", x, safe))


def _int_rem(b, x, y):
    d = x.dtype
    bad = op("eq", y, _zero(d))
    if _is_signed(d):
        bad = op("lor", bad, op("eq", y, const(-1, d)))
    bad = b.let(bad)
    safe = b.let(select(bad, _one(d), y))
    return select(bad, _zero(d), op("rem", x, safe))


def _div(b, x, y):
    d = x.dtype
    if _kind(d) in "iu":
        return _int_div(b, x, y)
    if _is_complex(d):
        return _cdiv(b, x, y)
    return op("div", x, y)


def _cdiv(b, x, y):
    # Smith's algorithm (as NumPy): scale by the larger component of the divisor.
    d = x.dtype
    (xr, xi), (yr, yi) = _cparts(b, x), _cparts(b, y)
    big = b.let(op("ge", op("fabs", yr), op("fabs", yi)))
    r1 = b.let(op("div", yi, yr))
    den1 = b.let(op("add", yr, op("mul", yi, r1)))
    r2 = b.let(op("div", yr, yi))
    den2 = b.let(op("add", op("mul", yr, r2), yi))
    re = select(big, op("div", op("add", xr, op("mul", xi, r1)), den1),
                op("div", op("add", op("mul", xr, r2), xi), den2))
    im = select(big, op("div", op("sub", xi, op("mul", xr, r1)), den1),
                op("div", op("sub", op("mul", xi, r2), xr), den2))
    return _cmake(b.let(re), b.let(im), d)


def _rem(b, x, y):
    if _kind(x.dtype) in "iu":
        return _int_rem(b, x, y)
    return _float_fn(b, "fmod", x, y)


def _float_fn(b, name, *xs):
    """A float math function, computed in float32 for float16 operands."""
    d = xs[0].dtype
    m = float_math_dtype(d)
    if m != d:
        return Cast(b.let(op(name, *(Cast(x, m) for x in xs))), d)
    return op(name, *xs)


def _number(e) -> bool:
    """Whether ``e`` is a constant that is not NaN."""
    return isinstance(e, Const) and not np.isnan(e.value)


def max_of(b, x, y):
    """``max`` with NaN propagation; on ties the second operand (as ``numpy.maximum``)."""
    d = x.dtype
    if d == np.bool_:
        return op("lor", x, y)
    if _is_float(d):
        # Against a constant: one comparison plus a NaN bit test (relu and clip stay cheap). The
        # test is explicit because WGSL promises nothing for NaN comparisons (Mesa's GL takes
        # NaN <= 0 as true).
        if _number(y):
            return select(op("land", op("le", x, y), op("lnot", op("isnan", x, dtype=BOOL))), y, x)
        if _number(x):
            return select(op("land", op("gt", x, y), op("lnot", op("isnan", y, dtype=BOOL))), x, y)
        gt = op("land", op("gt", x, y), op("lnot", op("isnan", y, dtype=BOOL)))
        return select(op("lor", gt, op("isnan", x, dtype=BOOL)), x, y)
    return select(op("gt", x, y), x, y)


def min_of(b, x, y):
    """``min`` with NaN propagation; on ties the second operand (as ``numpy.minimum``)."""
    d = x.dtype
    if d == np.bool_:
        return op("land", x, y)
    if _is_float(d):
        if _number(y):
            return select(op("land", op("ge", x, y), op("lnot", op("isnan", x, dtype=BOOL))), y, x)
        if _number(x):
            return select(op("land", op("lt", x, y), op("lnot", op("isnan", y, dtype=BOOL))), x, y)
        lt = op("land", op("lt", x, y), op("lnot", op("isnan", y, dtype=BOOL)))
        return select(op("lor", lt, op("isnan", x, dtype=BOOL)), x, y)
    return select(op("lt", x, y), x, y)


def _compare(name):
    def rule(b, xs, params, in_avals, out_aval):
        x, y = xs
        if _is_complex(x.dtype):
            (xr, xi), (yr, yi) = _cparts(b, x), _cparts(b, y)
            both = op("land", op("eq", xr, yr), op("eq", xi, yi))
            return both if name == "eq" else op("lnot", both)
        return op(name, x, y)
    return rule


def _bitwise(name):
    def rule(b, xs, params, in_avals, out_aval):
        x, y = xs
        if x.dtype == np.bool_:
            return op({"and": "land", "or": "lor", "xor": "ne"}[name], x, y)
        return op(name, x, y)
    return rule


def _shift_ok(b, y, bits):
    """Whether the shift amount is in ``[0, bits)``: a Python bool for a constant amount, else an expression."""
    if isinstance(y, Const):
        return 0 <= int(y.value) < bits
    d = y.dtype
    below = op("lt", y, const(bits, d))
    return b.let(below if d.kind == "u" else op("land", op("ge", y, _zero(d)), below))


def _pick(ok, a, b_):
    """``a`` where ``ok`` else ``b_``, folded when ``ok`` is known."""
    if ok is True:
        return a
    if ok is False:
        return b_
    return select(ok, a, b_)


def _shift_left(b, xs, params, in_avals, out_aval):
    x, y = xs
    d = x.dtype
    ok = _shift_ok(b, y, d.itemsize * 8)
    if ok is False:
        return _zero(d)
    u = UINT32 if d.itemsize < 4 else _unsigned(d)
    amount = Cast(_pick(ok, y, _zero(d)), u)
    shifted = Cast(op("shl", Cast(x, u), amount), d) if u != d else op("shl", x, amount)
    return _pick(ok, b.let(shifted), _zero(d))


def _shift_right_arithmetic(b, xs, params, in_avals, out_aval):
    x, y = xs
    d = x.dtype
    ok = _shift_ok(b, y, d.itemsize * 8)
    s = _signed(d)
    sx = b.let(Bitcast(x, s) if s != d else x)
    fill = select(op("lt", sx, _zero(s)), const(-1, s), _zero(s))
    if ok is False:
        r = b.let(fill)
    else:
        amount = b.let(Cast(_pick(ok, y, _zero(d)), s))
        r = b.let(_pick(ok, op("shr", sx, amount), fill), "v")
    return Bitcast(r, d) if s != d else r


def _shift_right_logical(b, xs, params, in_avals, out_aval):
    x, y = xs
    d = x.dtype
    ok = _shift_ok(b, y, d.itemsize * 8)
    if ok is False:
        return _zero(d)
    u = _unsigned(d)
    ux = b.let(Bitcast(x, u) if u != d else x)
    amount = Cast(_pick(ok, y, _zero(d)), u)
    r = b.let(_pick(ok, op("shr", ux, amount), _zero(u)))
    return Bitcast(r, d) if u != d else r


def _pow(b, xs, params, in_avals, out_aval):
    return _float_fn(b, "pow", *xs)


def _binary(fn):
    def rule(b, xs, params, in_avals, out_aval):
        return fn(b, *xs)
    return rule


ELEMENTWISE[P.add] = _binary(add_of)
ELEMENTWISE[P.sub] = _binary(_sub)
ELEMENTWISE[P.mul] = _binary(mul_of)
ELEMENTWISE[P.div] = _binary(_div)
ELEMENTWISE[P.rem] = _binary(_rem)
ELEMENTWISE[P.pow_p] = _pow
ELEMENTWISE[P.max_p] = _binary(max_of)
ELEMENTWISE[P.min_p] = _binary(min_of)
ELEMENTWISE[P.atan2] = lambda b, xs, params, ia, oa: _float_fn(b, "atan2", *xs)
ELEMENTWISE[P.nextafter] = lambda b, xs, params, ia, oa: _float_fn(b, "nextafter", *xs)
for _p, _n in [(P.eq, "eq"), (P.ne, "ne"), (P.lt, "lt"), (P.le, "le"), (P.gt, "gt"), (P.ge, "ge")]:
    ELEMENTWISE[_p] = _compare(_n)
for _p, _n in [(P.and_p, "and"), (P.or_p, "or"), (P.xor_p, "xor")]:
    ELEMENTWISE[_p] = _bitwise(_n)
ELEMENTWISE[P.shift_left] = _shift_left
ELEMENTWISE[P.shift_right_arithmetic] = _shift_right_arithmetic
ELEMENTWISE[P.shift_right_logical] = _shift_right_logical


def _complex(b, xs, params, in_avals, out_aval):
    return _cmake(xs[0], xs[1], out_aval.dtype)


ELEMENTWISE[P.complex_p] = _complex

# ------------------------------------------------------------------------------------------ unary


def _unary_fn(name):
    def rule(b, xs, params, in_avals, out_aval):
        return _float_fn(b, name, xs[0])
    return rule


# Unary primitives that are one math function of the kernel IR, from the kernel facts (a renderer without that
# function leaves the primitive to its decomposition: ``fnarray.lowering.kernels.wgsl.renders_primitive``).
UNARY_FUNCS = facts.funcs()
for _p, _n in UNARY_FUNCS.items():
    OPS.setdefault(_n, (1, "func"))
    ELEMENTWISE[_p] = _unary_fn(_n)


def _exp(b, xs, params, in_avals, out_aval):
    x = xs[0]
    if _is_complex(x.dtype):
        xr, xi = _cparts(b, x)
        pd = _part(x.dtype)
        m = b.let(op("exp", xr))
        re = b.let(op("mul", m, op("cos", xi)))
        im = b.let(op("mul", m, op("sin", xi)))
        # C99 Annex G (the array API's special cases, NumPy): a zero imaginary part stays exactly zero
        # (exp(inf + 0j) = inf + 0j, not inf * sin 0 = NaN), and an infinite real part with an infinite or
        # NaN imaginary part gives 0 + 0j (at -inf) or inf + NaN j (at +inf).
        zero_im = b.let(op("eq", xi, const(0.0, pd)))
        odd_im = b.let(op("lnot", op("isfinite", xi, dtype=BOOL)))
        at_ninf = b.let(op("land", op("eq", xr, const(-np.inf, pd)), odd_im))
        at_pinf = b.let(op("land", op("eq", xr, const(np.inf, pd)), odd_im))
        re = select(zero_im, m, select(at_ninf, const(0.0, pd), select(at_pinf, const(np.inf, pd), re)))
        im = select(zero_im, xi, select(at_ninf, const(0.0, pd), select(at_pinf, const(np.nan, pd), im)))
        return _cmake(b.let(re), b.let(im), x.dtype)
    return _float_fn(b, "exp", x)


ELEMENTWISE[P.exp] = _exp
ELEMENTWISE[P.is_finite] = lambda b, xs, params, ia, oa: op("isfinite", xs[0], dtype=BOOL)
ELEMENTWISE[P.neg] = lambda b, xs, params, ia, oa: _neg(b, xs[0])
ELEMENTWISE[P.stop_gradient] = lambda b, xs, params, ia, oa: xs[0]
ELEMENTWISE[P.copy_p] = lambda b, xs, params, ia, oa: xs[0]
ELEMENTWISE[P.name_p] = lambda b, xs, params, ia, oa: xs[0]
ELEMENTWISE[P.population_count] = lambda b, xs, params, ia, oa: op("popcount", xs[0])


def _sign(b, xs, params, in_avals, out_aval):
    x = xs[0]
    d = x.dtype
    if _is_complex(d):
        xr, xi = _cparts(b, x)
        a = b.let(op("hypot", xr, xi))
        zero = b.let(op("eq", a, _zero(a.dtype)))
        safe = b.let(select(zero, _one(a.dtype), a))
        p = _part(d)
        return _cmake(select(zero, _zero(p), op("div", xr, safe)), select(zero, _zero(p), op("div", xi, safe)), d)
    if _is_float(d):
        return select(op("gt", x, _zero(d)), _one(d), select(op("lt", x, _zero(d)), const(-1, d), x))
    if _is_signed(d):
        return select(op("gt", x, _zero(d)), _one(d), select(op("lt", x, _zero(d)), const(-1, d), _zero(d)))
    return select(op("gt", x, _zero(d)), _one(d), _zero(d))


ELEMENTWISE[P.sign] = _sign


def _abs(b, xs, params, in_avals, out_aval):
    x = xs[0]
    d = x.dtype
    if _is_complex(d):
        xr, xi = _cparts(b, x)
        return op("hypot", xr, xi)
    if _is_float(d):
        return op("fabs", x)
    if _is_signed(d):
        return select(op("lt", x, _zero(d)), b.let(_wrapping("neg", x)), x)
    return x


ELEMENTWISE[P.abs_p] = _abs


def _not(b, xs, params, in_avals, out_aval):
    x = xs[0]
    return op("lnot", x) if x.dtype == np.bool_ else op("not", x)


ELEMENTWISE[P.not_p] = _not


def _logistic(b, xs, params, in_avals, out_aval):
    x = xs[0]
    d = x.dtype
    m = float_math_dtype(d)
    xm = b.let(Cast(x, m)) if m != d else x
    e = b.let(op("exp", op("neg", op("fabs", xm))))
    den = b.let(op("add", _one(m), e))
    r = select(op("ge", xm, _zero(m)), op("div", _one(m), den), op("div", e, den))
    return Cast(b.let(r), d) if m != d else r


ELEMENTWISE[P.logistic] = _logistic


def _integer_pow(b, xs, params, in_avals, out_aval):
    x, y = xs[0], params["y"]
    d = x.dtype
    if y == 0:
        return _one(d)
    n = abs(y)
    acc, base = None, x
    while n:
        if n & 1:
            acc = base if acc is None else b.let(mul_of(b, acc, base))
        n >>= 1
        if n:
            base = b.let(mul_of(b, base, base))
    if y < 0:
        return _div(b, _one(d), acc)
    return acc


ELEMENTWISE[P.integer_pow] = _integer_pow


# erf_inv and digamma are written once, in fnarray.core.decompositions.

# ------------------------------------------------------------------------------------------ complex parts


def _real(b, xs, params, in_avals, out_aval):
    return op("creal", xs[0], dtype=out_aval.dtype)


def _imag(b, xs, params, in_avals, out_aval):
    return op("cimag", xs[0], dtype=out_aval.dtype)


def _conj(b, xs, params, in_avals, out_aval):
    xr, xi = _cparts(b, xs[0])
    return _cmake(xr, op("neg", xi), xs[0].dtype)


ELEMENTWISE[P.real] = _real
ELEMENTWISE[P.imag] = _imag
ELEMENTWISE[P.conj] = _conj

# ------------------------------------------------------------------------------------------ select, casts


def _select_n(b, xs, params, in_avals, out_aval):
    which, cases = xs[0], xs[1:]
    if len(cases) == 1:
        return cases[0]
    if which.dtype == np.bool_:
        return select(which, cases[1], cases[0])
    # An int32 selector is clamped into range: <= 0 picks the first case, >= n-1 the last.
    r = cases[-1]
    for k in range(len(cases) - 2, -1, -1):
        r = b.let(select(op("le", which, const(k, which.dtype)), cases[k], r))
    return r


ELEMENTWISE[P.select_n] = _select_n


def convert(b, x, dst):
    """``x`` converted to ``dst`` with the reference semantics (saturating float -> int, NaN -> 0); the low-bit
    dtypes (``LOW_BIT``) through their bytes (``low_bit_value``, ``to_low_bit``)."""
    src = x.dtype
    dst = np.dtype(dst)
    if src == dst:
        return x
    if src in LOW_BIT:
        return convert(b, low_bit_value(b, x), dst)
    if dst in LOW_BIT:
        return to_low_bit(b, x, dst)
    if dst == np.bool_:
        if _is_complex(src):
            xr, xi = _cparts(b, x)
            return op("lor", op("ne", xr, _zero(xr.dtype)), op("ne", xi, _zero(xi.dtype)))
        return op("ne", x, _zero(src))
    if src == np.bool_:
        return select(x, _one(dst), _zero(dst)) if not _is_complex(dst) else _cmake(
            select(x, _one(_part(dst)), _zero(_part(dst))), _zero(_part(dst)), dst)
    if _is_complex(src):
        if _is_complex(dst):
            xr, xi = _cparts(b, x)
            p = _part(dst)
            return _cmake(Cast(xr, p), Cast(xi, p), dst)
        return convert(b, b.let(op("creal", x, dtype=_part(src))), dst)
    if _is_complex(dst):
        p = _part(dst)
        return _cmake(b.let(convert(b, x, p)), _zero(p), dst)
    if _is_float(src) and _kind(dst) in "iu":
        xf = b.let(Cast(x, F32)) if src == F16 else x
        info = np.iinfo(dst)
        f = xf.dtype
        lo, hi = float(info.min), float(info.max)
        t = b.let(select(op("isnan", xf, dtype=BOOL), _zero(f), xf))
        # The largest float <= hi may round up past it (2**31 - 1 -> 2**31 in float32): compare against
        # the bound as a float, and saturate both at and beyond it.
        return select(op("ge", t, const(hi, f)), const(info.max, dst),
                      select(op("le", t, const(lo, f)), const(info.min, dst), Cast(t, dst)))
    return Cast(x, dst)


# ------------------------------------------------------------------------------- the low-bit dtypes
# float8_e4m3fn, float8_e5m2, int4 and uint4 (ml_dtypes) are one byte an element in a buffer (a target prints them
# as its unsigned/signed byte type); a kernel only converts them, in registers, bit for bit as ml_dtypes: a float8
# byte to float32 and float32 to a float8 byte rounding to nearest even (e4m3fn has no infinity: overflow, inf and
# NaN give NaN 0x7f; e5m2 overflows to inf 0x7c, NaN is 0x7e; both keep the sign), an int4/uint4 byte read as
# its low 4 bits (int4 sign-extends bit 3) and written as them.

#: float8 dtype -> (mantissa bits, exponent bias, NaN code, largest finite code, overflow code)
_FLOAT8 = {np.dtype(ml_dtypes.float8_e4m3fn): (3, 7, 0x7F, 0x7E, 0x7F),
           np.dtype(ml_dtypes.float8_e5m2): (2, 15, 0x7E, 0x7B, 0x7C)}
_INT4, _UINT4 = np.dtype(ml_dtypes.int4), np.dtype(ml_dtypes.uint4)
#: The dtypes held as bytes and only converted by kernels.
LOW_BIT = frozenset(_FLOAT8) | {_INT4, _UINT4}
_I32 = np.dtype(np.int32)


def _u(v):
    return const(v, UINT32)


def low_bit_value(b, x):
    """The value of a low-bit ``x`` (a byte): float32 for float8, int32 for int4, uint32 for uint4."""
    byte = b.let(Cast(x, UINT32), "lb")
    if x.dtype == _UINT4:
        return b.let(op("and", byte, _u(15)))
    if x.dtype == _INT4:
        nib = Cast(op("xor", op("and", byte, _u(15)), _u(8)), _I32)
        return b.let(op("sub", nib, const(8, _I32)))
    mbits, bias, nan, top, over = _FLOAT8[x.dtype]
    mag = b.let(op("and", byte, _u(0x7F)), "mag")
    # The significand (the implicit bit but for subnormals) times the power of two of the exponent (1 for
    # subnormals), both exact in float32. Computed on every byte, in statements of their own: a float product or
    # its bits inside a C `?:` (a select between it and re-biased bits, e5m2's inf/NaN selects) kept PoCL 3.0 from
    # vectorising a float8 matrix-vector product (54 and 35 against 16 and 6 ms, 4096 x 4096).
    e = b.let(op("shr", mag, _u(mbits)), "f8e")
    low = op("and", mag, _u((1 << mbits) - 1))
    sub = b.let(op("eq", e, _u(0)), "f8s")
    mant = select(sub, low, op("or", low, _u(1 << mbits)))
    scale = Bitcast(op("shl", op("add", select(sub, _u(1), e), _u(127 - bias - mbits)), _u(23)), F32)
    bits = b.let(Bitcast(b.let(op("mul", Cast(mant, F32), scale), "f8v"), UINT32), "f8b")
    if over == nan:    # e4m3fn: 0x7f is NaN, no infinity
        bits = select(op("eq", mag, _u(nan)), _u(0x7FC00000), bits)
    else:              # e5m2: an all-ones exponent is inf (mantissa 0) or NaN
        bits = select(op("gt", mag, _u(over)), _u(0x7FC00000), select(op("eq", mag, _u(over)), _u(0x7F800000), bits))
    sign = op("shl", op("and", byte, _u(0x80)), _u(24))
    return b.let(Bitcast(op("or", b.let(bits), sign), F32), "f8")


def to_low_bit(b, x, dst):
    """``x`` (any real dtype but float64 into a float8: see the kernel backends' ``supports``) as the byte of
    the low-bit ``dst``."""
    if dst in _FLOAT8:
        return Cast(_float8_code(b, convert(b, x, F32), dst), dst)
    if x.dtype in (_I32, UINT32) or x.dtype.kind in "iub":
        v = convert(b, x, UINT32) if x.dtype.kind != "b" else select(x, _u(1), _u(0))
    else:   # a float: truncated and saturated into the 4-bit range (the reference's float -> int rule)
        lo, hi = (-8, 7) if dst == _INT4 else (0, 15)
        t = convert(b, x, _I32)
        v = Cast(select(op("lt", t, const(lo, _I32)), const(lo, _I32),
                        select(op("gt", t, const(hi, _I32)), const(hi, _I32), t)), UINT32)
    return Cast(op("and", v, _u(15)), dst)


def _float8_code(b, f, dst):
    """The float8 byte (uint32) of float32 ``f``: round to nearest even on the bits (normal results) or with
    ``rint`` of the scaled magnitude (subnormal results, exact: a power-of-two scaling)."""
    mbits, bias, nan, top, over = _FLOAT8[dst]
    u = b.let(Bitcast(f, UINT32), "fb")
    a = b.let(op("and", u, _u(0x7FFFFFFF)), "fa")
    drop = 23 - mbits
    rounded = op("shr", op("add", op("add", a, _u((1 << (drop - 1)) - 1)), op("and", op("shr", a, _u(drop)), _u(1))),
                 _u(drop))
    normal = op("sub", rounded, _u((127 - bias) << mbits))
    scaled = op("mul", Bitcast(a, F32), const(2.0 ** (bias - 1 + mbits), F32))
    sub = Cast(op("rint", scaled), UINT32)
    mag = b.let(select(op("lt", a, _u((128 - bias) << 23)), sub, normal), "f8m")
    mag = select(op("gt", mag, _u(top)), _u(over), mag)
    mag = select(op("gt", a, _u(0x7F800000)), _u(nan), mag)
    return op("or", b.let(mag), op("and", op("shr", u, _u(24)), _u(0x80)))


def _convert(b, xs, params, in_avals, out_aval):
    return convert(b, xs[0], params["new_dtype"])


ELEMENTWISE[P.convert_element_type] = _convert


def _bitcast(b, xs, params, in_avals, out_aval):
    x, dst = xs[0], np.dtype(params["new_dtype"])
    if x.dtype == dst:
        return x
    if x.dtype == np.bool_ or dst == np.bool_:
        return convert(b, x, dst)
    return Bitcast(x, dst)


ELEMENTWISE[P.bitcast_convert_type] = _bitcast

# ------------------------------------------------------------------------------------------ helpers


def logaddexp(b, x, y):
    """``log(exp(x) + exp(y))`` as ``numpy.logaddexp`` (equal infinities give that infinity)."""
    d = x.dtype
    same = b.let(op("eq", x, y))
    t = b.let(op("sub", x, y))
    big = b.let(op("add", x, op("log1p", op("exp", op("neg", t)))))
    small = b.let(op("add", y, op("log1p", op("exp", t))))
    r = select(op("gt", t, _zero(d)), big, select(op("le", t, _zero(d)), small, t))
    return select(same, op("add", x, const(math.log(2.0), d)), b.let(r))


# Primitives whose rules accept complex operands (from the kernel facts).
COMPLEX_OK = facts.complex_ok() & frozenset(ELEMENTWISE)

