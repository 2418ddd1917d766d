"""Transcendental and special-function bodies as kernel-IR rewrites, written once for every renderer.

``expand(kernel, names)`` replaces each float ``Op`` whose name is in ``names`` (a subset of ``BODIES``) by
its body: straight-line kernel IR (``Let`` locals, selects, bit casts, the target's basic math functions),
``fmod`` with two counted loops. What a renderer prints is then only ops it has natively, so a body is
printed by the OpenCL C and the WGSL renderer alike (``tests/test_transcendental.py`` runs them on both).
The WGSL renderer expands every op WGSL lacks or leaves open (``wgsl.EXPANDED``); the OpenCL renderer keeps
OpenCL C's library and its PoCL-tuned helpers (``opencl_c.py``) and expands only what it is asked to.

A body receives its operands as ``Val``s bound to locals (so each is computed once) and builds its result with
Python operators (``+ - * /``, comparisons, ``&``/``|``/``~`` on bools) and the helpers below; ``/`` and the
function calls in a body are the target's own (a body is not expanded again), and a body that needs another
calls its Python function (``_atan`` in ``_atan2``). Early returns of a C-style helper become selects, taken in
reverse order: the last ``select`` is the first ``if`` of the C form. ``float16`` operands are computed in
``float32`` and rounded back (the reference does so).

The pattern (math bodies as rewrites of the IR rather than library text per target) is tinygrad's
``transcendental.py``; the algorithms and constants are those of the WGSL helpers they replace (Cephes atanf,
Numerical Recipes' erfc fit, Stirling's series with reflection, Kahan's log1p/expm1).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from fnarray.lowering.kernels.ir import (
    BOOL,
    INT32,
    UINT32,
    Assign,
    Atomic,
    Bitcast,
    Cast,
    Const,
    Decl,
    For,
    If,
    Let,
    Op,
    Select,
    Store,
    Sym,
    children,
    const,
    rebuild,
)

__all__ = ["BODIES", "expand", "Val"]

F32, F16 = np.dtype(np.float32), np.dtype(np.float16)
_SIGN, _ABS, _EXP = 0x80000000, 0x7FFFFFFF, 0x7F800000
_PI, _PI_2, _PI_4 = 3.1415926535897932, 1.5707963267948966, 0.7853981633974483


class Val:
    """A kernel-IR expression with Python operators, for writing bodies (constants take the other side's
    dtype)."""

    __slots__ = ("e", "body")

    def __init__(self, e, body):
        self.e, self.body = e, body

    @property
    def dtype(self):
        return self.e.dtype

    def _x(self, other):
        return other.e if isinstance(other, Val) else const(other, self.dtype)

    def _op(self, name, other, dtype=None, swap=False):
        a, b = (self._x(other), self.e) if swap else (self.e, self._x(other))
        return Val(Op(name, (a, b), dtype or self.dtype), self.body)

    def __add__(self, o): return self._op("add", o)
    def __radd__(self, o): return self._op("add", o, swap=True)
    def __sub__(self, o): return self._op("sub", o)
    def __rsub__(self, o): return self._op("sub", o, swap=True)
    def __mul__(self, o): return self._op("mul", o)
    def __rmul__(self, o): return self._op("mul", o, swap=True)
    def __truediv__(self, o): return self._op("div", o)
    def __rtruediv__(self, o): return self._op("div", o, swap=True)
    def __neg__(self): return Val(Op("neg", (self.e,), self.dtype), self.body)
    def __lt__(self, o): return self._op("lt", o, BOOL)
    def __le__(self, o): return self._op("le", o, BOOL)
    def __gt__(self, o): return self._op("gt", o, BOOL)
    def __ge__(self, o): return self._op("ge", o, BOOL)
    def __and__(self, o): return self._op("land" if self.dtype == BOOL else "and", o)
    def __or__(self, o): return self._op("lor" if self.dtype == BOOL else "or", o)
    def __xor__(self, o): return self._op("xor", o)
    def __rshift__(self, o): return self._op("shr", o)
    def __invert__(self): return Val(Op("lnot", (self.e,), BOOL), self.body)

    def eq(self, o):
        return self._op("eq", o, BOOL)

    def ne(self, o):
        """``!=`` of integers or bools (a float ``!=`` is written ``~x.eq(y)``: see wgsl.py)."""
        return self._op("ne", o, BOOL)


class _Body:
    """The statements a body adds before the statement that used the op, and fresh local names."""

    def __init__(self, names):
        self.stmts: list = []
        self.names = names

    def fresh(self) -> str:
        self.names[0] += 1
        return f"fa_t{self.names[0]}"

    def let(self, v) -> Val:
        """``v`` computed once, into a local (a symbol is used as it is)."""
        e = v.e if isinstance(v, Val) else v
        if isinstance(e, Sym):
            return Val(e, self)
        name = self.fresh()
        self.stmts.append(Let(name, e))
        return Val(Sym(name, e.dtype), self)


def _fn(name, *xs, dtype=None) -> Val:
    """The target's own math function ``name`` (printed, never expanded again)."""
    return Val(Op(name, tuple(x.e for x in xs), dtype or xs[0].dtype), xs[0].body)


def _sel(cond, a, b) -> Val:
    """``a`` where ``cond`` else ``b`` (Python numbers take the other branch's dtype)."""
    body = next(x.body for x in (cond, a, b) if isinstance(x, Val))
    d = next((x.dtype for x in (a, b) if isinstance(x, Val)), F32)
    ae = a.e if isinstance(a, Val) else const(a, d)
    be = b.e if isinstance(b, Val) else const(b, d)
    return Val(Select(cond.e, ae, be), body)


def _bits(x) -> Val:
    return Val(Bitcast(x.e, UINT32), x.body)


def _float(u) -> Val:
    return Val(Bitcast(u.e, F32), u.body)


def _u32(x, value) -> Val:
    return Val(const(value, UINT32), x.body)


def _nan(x) -> Val:
    return Val(const(np.nan, F32), x.body)


# ------------------------------------------------------------------------------------------ the bodies

#: kernel-IR op -> its body ``fn(body, *operands) -> Val`` (operands and result float32), registered by ``_body``.
BODIES: dict = {}


def _body(op_name):
    """Register the decorated function as the body of the kernel-IR op ``op_name``."""
    def register(fn):
        BODIES[op_name] = fn
        return fn
    return register


@_body("isnan")
def _isnan(b, x):
    return (_bits(x) & _ABS) > _EXP


@_body("isinf")
def _isinf(b, x):
    return (_bits(x) & _ABS).eq(_EXP)


@_body("isfinite")
def _isfinite(b, x):
    return (_bits(x) & _EXP).ne(_EXP)


def _fabs(b, x):
    return _float(_bits(x) & _ABS)


@_body("copysign")
def _copysign(b, x, y):
    return _float((_bits(x) & _ABS) | (_bits(y) & _SIGN))


def _by_zero(b, x, y):
    """``x / y`` for a zero ``y``: NaN for a zero or NaN ``x``, else an infinity with the operands' signs."""
    return _sel(x.eq(0.0) | _isnan(b, x), _nan(x), _float(((_bits(x) ^ _bits(y)) & _SIGN) | _u32(x, _EXP)))


@_body("div")
def _div(b, x, y):
    # IEEE division where the target leaves x / 0 open (Mesa folds x / 0.0 to 0). A constant divisor is not
    # expanded (see _Expander.expr): no division by a constant zero is ever printed.
    return _sel(y.eq(0.0), _by_zero(b, x, y), x / y)


def _mul_by_zero(b, x, negative: bool):
    # x times a constant zero (Mesa folds it to 0.0, losing NaN and infinity): NaN for a NaN or infinite x, else a
    # zero with the sign of the product.
    return _sel(_isfinite(b, x), _float((_bits(x) & _SIGN) ^ (_SIGN if negative else 0)), _nan(x))


def _self_difference(b, x):
    # x - x or x + (-x) (Mesa folds both to 0.0, losing NaN and infinity): NaN for a NaN or infinite x, else +0.0.
    return _sel(_isfinite(b, x), _float(_u32(x, 0)), _nan(x))


def _plus_zero(b, x):
    # x + 0.0 (Mesa folds it to x, keeping a -0.0 that IEEE makes +0.0): a zero's sign bit cleared.
    return _float(_sel(x.eq(0.0), _u32(x, 0), _bits(x)))


@_body("log")
def _log(b, x):
    # Mesa folds exp(log(x)) to x: the negative-argument NaN is stated explicitly.
    return _sel(x < 0.0, _nan(x), _fn("log", x))


@_body("log10")
def _log10(b, x):
    # WGSL has no log10: log(x) / ln 10 (within 2 ulp of NumPy's).
    return _log(b, x) * 0.43429448190325176


@_body("max")
def _max(b, x, y):
    return _sel(_isnan(b, x) | _isnan(b, y), _nan(x), _fn("max", x, y))


@_body("min")
def _min(b, x, y):
    return _sel(_isnan(b, x) | _isnan(b, y), _nan(x), _fn("min", x, y))


@_body("tanh")
def _tanh(b, x):
    # tanh(+-0) keeps the sign and tanh(NaN) is NaN on every driver.
    return _sel(_isnan(b, x) | x.eq(0.0), x, _fn("tanh", x))


@_body("acosh")
def _acosh(b, x):
    return _sel((x < 1.0) | _isnan(b, x), _nan(x), _fn("acosh", x))


@_body("log1p")
def _log1p(b, x):
    # Kahan: log(u) * x / (u - 1) with u = 1 + x cancels the rounding of u.
    u = b.let(1.0 + x)
    d = b.let(u - 1.0)
    lg = b.let(_fn("log", u))
    return _sel(d.eq(0.0), x, _sel(u.eq(np.inf), lg, lg * (x / d)))


@_body("expm1")
def _expm1(b, x):
    # Kahan: (u - 1) * x / log(u) with u = exp(x).
    u = b.let(_fn("exp", x))
    d = b.let(u - 1.0)
    r = d * (x / _fn("log", u))
    return _sel(u.eq(1.0), x, _sel(d.eq(-1.0), -1.0, _sel(u.eq(np.inf), u, r)))


def _half_exp(b, a):
    # exp(a) / 2 for a large a >= 0 as (exp(a/2) / 2) * exp(a/2): finite up to float32's largest value (a of
    # 89.4159), where exp(a) itself overflows from 88.7228 on (a rounded a - ln 2 would cost ~60 ulp).
    h = b.let(_fn("exp", a * 0.5))
    return (h * 0.5) * h


@_body("sinh")
def _sinh(b, x):
    # |x| + |x|^3/6 + |x|^5/120 + |x|^7/5040 below |x| = 0.5 (within 1e-8: Mesa's (e^x - e^-x) / 2 cancels,
    # 0.14 % off at 1e-5), the driver's sinh up to 16, exp|x| / 2 above (e^-|x| is then below float32's
    # rounding; Mesa's overflowed from |x| = 88.72, sinh's own limit being 89.4159), the sign of x.
    a = b.let(_fabs(b, x))
    a2 = b.let(a * a)
    series = a + (a * a2) * (1.0 / 6.0 + a2 * (1.0 / 120.0 + a2 * (1.0 / 5040.0)))
    return _copysign(b, _sel(a < 0.5, series, _sel(a < 16.0, _fn("sinh", a), _half_exp(b, a))), x)


@_body("cosh")
def _cosh(b, x):
    # The driver's cosh below |x| = 16, exp|x| / 2 above (Mesa's overflowed from |x| = 88.72, cosh's own limit
    # being 89.4159).
    a = b.let(_fabs(b, x))
    return _sel(a < 16.0, _fn("cosh", x), _half_exp(b, a))


@_body("cbrt")
def _cbrt(b, x):
    # exp2(log2|x| / 3), one Newton step, the sign of x.
    a = b.let(_fabs(b, x))
    y0 = b.let(_fn("exp2", _fn("log2", a) * (1.0 / 3.0)))
    y = y0 - (y0 * y0 * y0 - a) / (3.0 * y0 * y0)
    special = a.eq(0.0) | _isnan(b, x) | _isinf(b, x)
    return _sel(special, x, _copysign(b, b.let(y), x))


@_body("atan")
def _atan(b, x):
    # Range reduction to |t| <= tan(pi/8), then a minimax polynomial (Cephes atanf).
    a = b.let(_fabs(b, x))
    big = b.let(a > 2.414213562373095)
    mid = b.let(a > 0.4142135623730950)
    base = _sel(big, _PI_2, _sel(mid, _PI_4, 0.0))
    t = b.let(_sel(big, -1.0 / a, _sel(mid, (a - 1.0) / (a + 1.0), a)))
    z = b.let(t * t)
    p = (((8.05374449538e-2 * z - 1.38776856032e-1) * z + 1.99777106478e-1) * z - 3.33329491539e-1) * z * t + t
    return _sel(_isnan(b, x), x, _copysign(b, b.let(base + p), x))


@_body("asin")
def _asin(b, x):
    a = b.let(_fabs(b, x))
    inner = _atan(b, b.let(x / _fn("sqrt", (1.0 - x) * (1.0 + x))))
    r = _sel(a.eq(1.0), _sel(x < 0.0, -_PI_2, _PI_2), inner)
    return _sel((a > 1.0) | _isnan(b, x), _nan(x), r)


@_body("acos")
def _acos(b, x):
    # acos(x) = 2 atan(sqrt((1 - x) / (1 + x))), accurate near both ends.
    a = b.let(_fabs(b, x))
    r = 2.0 * _atan(b, b.let(_fn("sqrt", (1.0 - x) / (1.0 + x))))
    return _sel((a > 1.0) | _isnan(b, x), _nan(x), _sel(x.eq(-1.0), _PI, r))


@_body("erf")
def _erf(b, x):
    a = b.let(_fabs(b, x))
    # |x| < 0.5: the Maclaurin series 2/sqrt(pi) sum (-1)^n x^(2n+1) / (n! (2n+1)).
    z = b.let(x * x)
    s = ((((((-1.3227513e-5 * z + 1.0683761e-4) * z - 7.5757576e-4) * z + 4.6296296e-3) * z - 2.3809524e-2) * z
          + 1.0000000e-1) * z - 3.3333334e-1) * z + 1.0
    small = 1.1283791670955126 * x * s
    # Beyond: erfc by the Chebyshev fit of Numerical Recipes (fractional error < 1.2e-7).
    t = b.let(1.0 / (1.0 + 0.5 * a))
    poly = -0.82215223 + t * 0.17087277
    for c in (1.48851587, -1.13520398, 0.27886807, -0.18628806, 0.09678418, 0.37409196, 1.00002368):
        poly = c + t * poly
    p = -a * a - 1.26551223 + t * poly
    r = b.let(1.0 - t * _fn("exp", p))
    return _sel(_isnan(b, x), x, _sel(a < 0.5, small, _sel(x < 0.0, -r, r)))


def _lgamma_positive(b, x0):
    """lgamma of ``x0 >= 0.5``: shifted up to ``x >= 8`` (at most 8 factors, each below 8: no overflow), then
    Stirling's series."""
    low = b.let(x0 < 8.0)
    prod, x = b.let(_sel(low, x0, 1.0)), b.let(_sel(low, x0 + 1.0, x0))
    for _ in range(7):
        low = b.let(x < 8.0)
        prod = b.let(_sel(low, prod * x, prod))
        x = b.let(_sel(low, x + 1.0, x))
    inv = b.let(1.0 / x)
    inv2 = b.let(inv * inv)
    series = inv * (0.083333333333333333 - inv2 * (0.0027777777777777778 - inv2 * (7.9365079365079365e-4
                                                                                  - inv2 * 5.9523809523809524e-4)))
    return (x - 0.5) * _fn("log", x) - x + 0.91893853320467274 + series - _fn("log", prod)


@_body("lgamma")
def _lgamma(b, x):
    up = b.let(x >= 0.5)
    pos = b.let(_lgamma_positive(b, b.let(_sel(up, x, 1.0 - x))))
    # Reflection: lgamma(x) = log(pi / |sin(pi x)|) - lgamma(1 - x). x - round(x) in [-1/2, 1/2] is exact and keeps
    # a tiny x whole; sin by its Taylor series to t^13 (below 1e-9 off on [-pi/2, pi/2]), as Vulkan lets the
    # builtin be 2^-11 off in absolute terms, all of a tiny sin's digits.
    t = b.let(_PI * (x - _fn("rint", x)))
    t2 = b.let(t * t)
    s = t * (1.0 - t2 / 6.0 * (1.0 - t2 / 20.0 * (1.0 - t2 / 42.0 * (1.0 - t2 / 72.0 * (1.0 - t2 / 110.0
                                                                                          * (1.0 - t2 / 156.0))))))
    reflected = 1.1447298858494002 - _fn("log", _fabs(b, b.let(s))) - pos
    r = _sel(up, pos, _sel(x.eq(_fn("floor", x)), np.inf, reflected))
    return _sel(_isnan(b, x), x, _sel(_isinf(b, x), np.inf, r))


@_body("pow")
def _pow(b, x, y):
    # C's pow: pow(x, 0) = 1 and pow(1, y) = 1 even for NaN; negative bases need an integer exponent.
    ay = b.let(_fabs(b, y))
    ax = b.let(_fabs(b, x))
    is_int = b.let(_fn("floor", y).eq(y))
    odd = is_int & (ay < 16777216.0) & (ay - 2.0 * _fn("floor", ay * 0.5)).eq(1.0)
    y_inf = b.let(_isinf(b, y))
    r = _sel(ax.eq(0.0), _sel(y < 0.0, np.inf, 0.0),
             _sel(y_inf, _sel((ax > 1.0).eq(y > 0.0), np.inf, 0.0), _fn("exp2", y * _fn("log2", ax))))
    r = b.let(r)
    neg = odd & (_bits(x) & _SIGN).ne(0)
    out = _sel(neg, -r, r)
    out = _sel(x.eq(-1.0) & y_inf, 1.0, out)
    out = _sel((x < 0.0) & ~is_int & ~_isinf(b, x), _nan(x), out)
    out = _sel(_isnan(b, x) | _isnan(b, y), _nan(x), out)
    return _sel(y.eq(0.0) | x.eq(1.0), 1.0, out)


@_body("fmod")
def _fmod(b, x, y):
    # Exact: s = |y| doubled while 2s <= |x|, then halved back down to |y|, subtracted wherever it fits (each
    # doubling, halving and subtraction is exact: r stays in [s, 2s) when s is taken away, Sterbenz). The loops
    # run at most the exponent difference plus 25 times (subnormal |y|), each step guarded.
    m = b.let(_fabs(b, y))
    ax = b.let(_fabs(b, x))
    ex, em = b.let(_bits(ax) >> 23), b.let(_bits(m) >> 23)
    steps = b.let(Val(Cast(_sel(ex > em, ex - em, _u32(x, 0)).e, INT32), b) + 25)
    r, s = b.fresh(), b.fresh()
    b.stmts.append(Decl(r, F32, ax.e))
    b.stmts.append(Decl(s, F32, m.e))
    rv, sv = Val(Sym(r, F32), b), Val(Sym(s, F32), b)
    k = b.fresh()
    b.stmts.append(For(k, const(0, INT32), steps.e, const(1, INT32),
                       (If((2.0 * sv <= rv).e, (Assign(s, (2.0 * sv).e),)),)))
    k = b.fresh()
    b.stmts.append(For(k, const(0, INT32), (steps + 1).e, const(1, INT32),
                       (If((sv >= m).e, (If((rv >= sv).e, (Assign(r, (rv - sv).e),)),
                                         Assign(s, (sv * 0.5).e))),)))
    # |x| < |y| and an infinite y leave r at |x| (neither loop subtracts), so r with x's sign is x: no select of
    # x itself here. That select (x, or r with x's sign) after a barrier, the loops inside a phase's loop, was
    # miscompiled by lavapipe (Mesa 22.3, LLVM 15; docs/internals.md, twenty-fifth session, s25c-wgpubug).
    out = _copysign(b, b.let(rv), x)
    return _sel(_isnan(b, x) | _isnan(b, y) | _isinf(b, x) | y.eq(0.0), _nan(x), out)


@_body("nextafter")
def _nextafter(b, x, y):
    u = b.let(_bits(x))
    away = (x < y).eq(x > 0.0)
    step = _float(_sel(away, u + 1, u - 1))
    from_zero = _float(_sel(y < 0.0, _u32(x, 0x80000001), _u32(x, 1)))
    r = _sel((u & _ABS).eq(0), from_zero, step)
    return _sel(_isnan(b, x) | _isnan(b, y), _nan(x), _sel(x.eq(y), y, r))


@_body("hypot")
def _hypot(b, x, y):
    a = b.let(_fabs(b, x))
    c = b.let(_fabs(b, y))
    m = b.let(_fn("max", a, c))
    q = b.let(_fn("min", a, c) / _sel(m.eq(0.0), 1.0, m))
    r = _sel(m.eq(0.0), 0.0, m * _fn("sqrt", 1.0 + q * q))
    return _sel(_isinf(b, a) | _isinf(b, c), np.inf, _sel(_isnan(b, a) | _isnan(b, c), _nan(x), r))


@_body("atan2")
def _atan2(b, y, x):
    # C's atan2 with its signed zeros and infinities, on the atan body.
    ax = b.let(_fabs(b, x))
    ay = b.let(_fabs(b, y))
    x_neg = b.let((_bits(x) & _SIGN).ne(0))
    steep = b.let(ay > ax)
    t = b.let(_atan(b, b.let(_sel(steep, ax, ay) / _sel(steep, ay, ax))))
    r = b.let(_sel(steep, _PI_2 - t, t))
    r = _sel(x_neg, _PI - r, r)
    r = _sel(ax.eq(0.0) & ay.eq(0.0), _sel(x_neg, _PI, 0.0), r)
    r = _sel(_isinf(b, ax) & _isinf(b, ay), _sel(x_neg, 2.3561944901923449, 0.78539816339744831), r)
    return _sel(_isnan(b, x) | _isnan(b, y), _nan(x), _copysign(b, b.let(r), y))


# ------------------------------------------------------------------------------------------ the pass


def _zero_factor(e):
    """The constant zero factor of a float product, or ``None``."""
    if e.op == "mul" and e.dtype.kind == "f":
        for a in e.args:
            if isinstance(a, Const) and a.value == 0:
                return a
    return None


def _zero_term(e):
    """For ``x + 0.0``, ``0.0 + x`` or ``x - (-0.0)`` in floats: ``x``; else ``None``."""
    if e.dtype.kind != "f" or e.op not in ("add", "sub"):
        return None
    want = e.op == "sub"   # the sign bit of the zero that makes the operation x + 0.0
    for k, a in enumerate(e.args):
        if (isinstance(a, Const) and a.value == 0 and bool(np.signbit(a.value)) == want
                and (e.op == "add" or k == 1)):
            return e.args[1 - k]
    return None


def _cancelling(e, lets):
    """For ``x - x``, ``x + (-x)``, ``(-x) + x`` or ``k * y + (-k) * y`` in floats: ``x`` (the first term); else
    ``None``. ``lets``: the values of the kernel's locals so far (a negation is usually a local of its own)."""
    if e.dtype.kind != "f" or e.op not in ("add", "sub"):
        return None
    a, c = e.args
    if e.op == "sub":
        return a if a == c else None
    for u, v in ((a, c), (c, a)):
        v = _let_value(v, lets)
        if isinstance(v, Op) and v.op == "neg" and v.args[0] == u:
            return u
    # k * x + (-k) * x (a transposed product's two halves: grad of arctan2(u, u)), which Mesa factors into
    # (k - k) * x and folds to 0.0: exactly k * x + (-(k * x))
    p, q = _let_value(a, lets), _let_value(c, lets)
    if _opposite_products(p, q, lets):
        return a
    return None


def _let_value(v, lets):
    """``v``, or the value of the local ``v`` names."""
    return lets.get(v.name, v) if isinstance(v, Sym) else v


def _const_factor(v, lets):
    """The value of the constant ``v`` (a literal, a local of one, or its negation), or ``None``."""
    v = _let_value(v, lets)
    if isinstance(v, Const):
        return v.value
    if isinstance(v, Op) and v.op == "neg" and isinstance(v.args[0], Const):
        return -v.args[0].value
    return None


def _opposite_products(p, q, lets) -> bool:
    """``p`` is ``k * x`` and ``q`` is ``-k * x`` (either order of factors), ``k`` a non-zero constant."""
    if not (isinstance(p, Op) and isinstance(q, Op) and p.op == q.op == "mul"):
        return False
    for i in (0, 1):
        k = _const_factor(p.args[i], lets)
        if k is None or k == 0:
            continue
        for j in (0, 1):
            if q.args[1 - j] == p.args[1 - i] and _const_factor(q.args[j], lets) == -k:
                return True
    return False


def _self_comparison(e):
    """For ``x == x``, ``x <= x``, ``x >= x`` or ``x != x`` in floats (which Mesa folds to true or false, whatever
    ``x``): ``x``; else ``None``."""
    if e.op in ("eq", "ne", "le", "ge") and e.args[0].dtype.kind == "f" and e.args[0] == e.args[1]:
        return e.args[0]
    return None


class _Expander:
    def __init__(self, names, zero_ops):
        self.names, self.zero_ops = frozenset(names), zero_ops
        self.counter = [0]
        self.lets = {}   # name -> value of each local met so far (zero_ops' x + (-x))

    def _apply(self, body, fn, args, dtype):
        """``fn`` on ``args`` in float32 (float16 operands widened, the result narrowed back). Each operand is
        a local, constants too: a body computed on constants would be a WGSL constant expression, where an
        overflow or a division by zero is a compile error."""
        wide = [body.let(Cast(a, F32) if a.dtype == F16 else a) for a in args]
        out = fn(body, *wide).e
        return Cast(out, F16) if dtype == F16 else out

    def _rewrite(self, new, body):
        """The body of op ``new`` (operands already rewritten) where one applies, else ``new``."""
        if not (isinstance(new, Op) and new.args and new.args[0].dtype in (F32, F16)):
            return new   # the bodies are float32 (float16 through them); float64 keeps the target's functions
        if new.op == "div" and "div" in self.names:
            y = new.args[1]
            if isinstance(y, Const):   # a constant divisor: IEEE as it is, or the by-zero result
                return new if y.value != 0 else self._apply(body, _by_zero, new.args, new.dtype)
            return self._apply(body, _div, new.args, new.dtype)
        if new.op in self.names:
            return self._apply(body, BODIES[new.op], new.args, new.dtype)
        if not self.zero_ops:
            return new
        if (z := _zero_factor(new)) is not None:
            x = new.args[1] if new.args[0] is z else new.args[0]
            neg = bool(np.signbit(z.value))
            return self._apply(body, lambda b, v: _mul_by_zero(b, v, neg), (x,), new.dtype)
        if (x := _zero_term(new)) is not None:
            return self._apply(body, _plus_zero, (x,), new.dtype)
        if (x := _cancelling(new, self.lets)) is not None:
            return self._apply(body, _self_difference, (x,), new.dtype)
        if (x := _self_comparison(new)) is not None:
            nan = self._apply(body, _isnan, (x,), new.dtype)
            return nan if new.op == "ne" else Op("lnot", (nan,), new.dtype)
        return new

    def expr(self, e, body, memo):
        got = memo.get(e)
        if got is not None:
            return got
        kids = children(e)
        new = self._rewrite(rebuild(e, [self.expr(c, body, memo) for c in kids]) if kids else e, body)
        memo[e] = new
        return new

    def stmts(self, ss) -> tuple:
        out: list = []
        for s in ss:
            body, memo = _Body(self.counter), {}
            if isinstance(s, Let):
                s = Let(s.name, self.expr(s.value, body, memo))
                self.lets[s.name] = s.value
            elif isinstance(s, Decl):
                s = Decl(s.name, s.dtype, self.expr(s.value, body, memo))
            elif isinstance(s, Assign):
                s = Assign(s.name, self.expr(s.value, body, memo))
            elif isinstance(s, Store):
                s = Store(s.space, s.name, self.expr(s.index, body, memo), self.expr(s.value, body, memo))
            elif isinstance(s, Atomic):
                s = dataclasses.replace(s, index=self.expr(s.index, body, memo), value=self.expr(s.value, body, memo))
            elif isinstance(s, For):
                s = For(s.var, self.expr(s.start, body, memo), self.expr(s.stop, body, memo),
                        self.expr(s.step, body, memo), self.stmts(s.body))
            elif isinstance(s, If):
                s = If(self.expr(s.cond, body, memo), self.stmts(s.then), self.stmts(s.orelse))
            out.extend(body.stmts)
            out.append(s)
        return tuple(out)


def expand(kernel, names, zero_ops: bool = False):
    """``kernel`` with each float32 or float16 op named in ``names`` replaced by its body in ``BODIES`` (float16
    through float32; float64 ops are kept). ``zero_ops``: also products with a constant zero factor and sums with
    a constant zero term, differences and comparisons of an operand with itself, which some WGSL drivers fold away
    (``x * 0.0`` and ``x - x`` to ``0.0``, ``-0.0 + 0.0`` to ``-0.0``, ``x == x`` to true), by their IEEE results.

    The locals a body needs are ``Let`` statements (``fa_t<n>``) put before the statement that used the op;
    raises ``KeyError`` for a name without a body.
    """
    missing = set(names) - set(BODIES)
    if missing:
        raise KeyError(f"no kernel-IR body for {sorted(missing)} (kernels/transcendental.py BODIES)")
    return dataclasses.replace(kernel, body=_Expander(names, zero_ops).stmts(kernel.body))
