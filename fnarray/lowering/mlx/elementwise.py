"""The mlx backend's rules for the elementwise primitives and conversions, with the reference's integer,
shift and NaN semantics composed where MLX differs (``mlx.core`` operations; registered into ``common.RULES``)."""

from __future__ import annotations

import math

import numpy as np

from fnarray.core import dtypes, families
from fnarray.core import primitives as P
from fnarray.lowering.mlx.common import (F32, LOW, RULES, SHAPE_FREE, constant, expression, mx_dtype, mx_op,
                                         upcast_low, mx, rule)


# The primitives mlx.core has by their own name (``Primitive.library``; exp2 and cbrt, which it lacks, have rules
# below), then those it spells otherwise.
def _library_rule(p):
    if p.library:
        RULES[p] = mx_op(p.name, upcast=True)
        SHAPE_FREE[p] = None  # (MLX's function itself, or its float32 form: reads no size)


families.on_family("unary", _library_rule)
for _p, _name in [(P.floor, "floor"), (P.ceil, "ceil"), (P.round_p, "round"), (P.log2, "log2"),
                  (P.asin, "arcsin"), (P.acos, "arccos"), (P.atan, "arctan"), (P.asinh, "arcsinh"),
                  (P.acosh, "arccosh"), (P.atanh, "arctanh"), (P.rsqrt, "rsqrt"),
                  (P.erf_inv, "erfinv"), (P.pow_p, "power"), (P.atan2, "arctan2")]:
    RULES[_p] = mx_op(_name, upcast=True)
    SHAPE_FREE[_p] = None

# erf's Maclaurin series 2/sqrt(pi) sum (-1)^k x^(2k+1) / (k! (2k+1)), to x^9: below 1/10 its next term is
# under 1e-14 relative.
_ERF_SERIES = tuple((-1) ** k * 2 / math.sqrt(math.pi) / (math.factorial(k) * (2 * k + 1)) for k in range(5))


def _erf_small_corrected(x):
    # MLX's erf loses its relative accuracy below |x| ~ 1e-2 (5% off at 1e-6, 0 at 1e-8; the reference
    # gives 2x/sqrt(pi)): the series takes over there.
    x2 = x * x
    poly = _ERF_SERIES[-1]
    for c in _ERF_SERIES[-2::-1]:
        poly = c + x2 * poly
    return mx.where(mx.abs(x) < 0.1, x * poly, mx.erf(x))


RULES[P.erf] = upcast_low(_erf_small_corrected)


@rule(P.pow_p)
def _pow(params, in_avals, out_avals):
    real_pow = mx_op("power", upcast=True)(params, in_avals, out_avals)
    if not dtypes.is_complex(in_avals[0].dtype):
        return real_pow

    def f(x, y):
        # MLX's complex power gives NaN at 0 ** 0; the reference (NumPy, XLA) gives 1.
        r = mx.power(x, y)
        return mx.where((x == 0) & (y == 0), mx.ones_like(r), r)
    return f

for _p, _name in [(P.neg, "negative"), (P.is_finite, "isfinite"), (P.real, "real"), (P.imag, "imag"),
                  (P.conj, "conj"), (P.abs_p, "abs"), (P.add, "add"), (P.sub, "subtract"), (P.mul, "multiply"),
                  (P.max_p, "maximum"), (P.min_p, "minimum"), (P.eq, "equal"), (P.ne, "not_equal"),
                  (P.lt, "less"), (P.le, "less_equal"), (P.gt, "greater"), (P.ge, "greater_equal"),
                  (P.and_p, "bitwise_and"), (P.or_p, "bitwise_or"), (P.xor_p, "bitwise_xor")]:
    RULES[_p] = mx_op(_name, upcast=False)
    SHAPE_FREE[_p] = None


def _identity(params, in_avals, out_avals):
    return expression("{0}", 1)


for _p in (P.stop_gradient, P.copy_p, P.name_p):
    RULES[_p] = _identity
    SHAPE_FREE[_p] = None


@rule(P.exp2, shape_free=True)
def _exp2(params, in_avals, out_avals):
    d = in_avals[0].dtype
    if dtypes.is_complex(d):
        ln2 = constant(math.log(2.0), d)
        return lambda x: mx.exp(x * ln2)
    two = constant(2.0, F32 if d in LOW else d)
    return upcast_low(lambda x: mx.power(two, x))(params, in_avals, out_avals)


@rule(P.logistic, shape_free=True)
def _logistic(params, in_avals, out_avals):
    d = in_avals[0].dtype
    if dtypes.is_complex(d):  # MLX's sigmoid is real-only; the reference's complex form is this one
        one = constant(1, d)
        return lambda x: one / (one + mx.exp(-x))
    return upcast_low(mx.sigmoid)(params, in_avals, out_avals)


@rule(P.sign, shape_free=True)
def _sign(params, in_avals, out_avals):
    d = in_avals[0].dtype
    if dtypes.is_float(d):  # MLX's sign(NaN) is 0 and sign(-0.0) +0.0; the reference keeps NaN and -0.0 (as XLA)
        return lambda x: mx.where(mx.isnan(x) | (x == 0), x, mx.sign(x))
    return lambda x: mx.sign(x)


@rule(P.not_p, shape_free=True)
def _not(params, in_avals, out_avals):
    if in_avals[0].dtype == dtypes.bool_:
        return lambda x: mx.logical_not(x)
    return lambda x: mx.bitwise_invert(x)


@rule(P.cbrt, shape_free=True)
def _cbrt(params, in_avals, out_avals):
    d = in_avals[0].dtype
    third = constant(1.0 / 3.0, F32 if d in LOW else d)

    def f(x):
        r = mx.power(mx.abs(x), third)
        return mx.where(x < 0, -r, r)
    return upcast_low(f)(params, in_avals, out_avals)


@rule(P.integer_pow, shape_free=True)
def _integer_pow(params, in_avals, out_avals):
    y = params["y"]

    def positive(x, n):
        acc, base = None, x
        while n:
            if n & 1:
                acc = base if acc is None else acc * base
            n >>= 1
            if n:
                base = base * base
        return acc

    if y == 0:
        return lambda x: mx.ones_like(x)
    if y > 0:
        return lambda x: positive(x, y)
    one = constant(1, in_avals[0].dtype)
    return lambda x: one / positive(x, -y)


# lgamma and digamma (which MLX lacks) are written once, in fnarray.core.decompositions.


_UNSIGNED_OF = {1: dtypes.uint8, 2: dtypes.uint16, 4: dtypes.uint32, 8: dtypes.uint64}
_SIGNED_OF = {1: dtypes.int8, 2: dtypes.int16, 4: dtypes.int32, 8: dtypes.int64}


@rule(P.population_count)
def _population_count(params, in_avals, out_avals):
    d = in_avals[0].dtype
    width = d.itemsize * 8
    ud = _UNSIGNED_OF[d.itemsize]
    mu, md = mx_dtype(ud), mx_dtype(d)

    def c(pattern):  # a byte pattern repeated over the width
        return constant(int.from_bytes(bytes([pattern]) * d.itemsize, "little"), ud)

    m1, m2, m4, h01 = c(0x55), c(0x33), c(0x0F), c(0x01)
    s1, s2, s4, top = constant(1, ud), constant(2, ud), constant(4, ud), constant(width - 8, ud)

    def f(x):
        u = mx.view(x, mu) if d != ud else x
        u = u - mx.bitwise_and(mx.right_shift(u, s1), m1)
        u = mx.bitwise_and(u, m2) + mx.bitwise_and(mx.right_shift(u, s2), m2)
        u = mx.bitwise_and(u + mx.right_shift(u, s4), m4)
        if width > 8:
            u = mx.right_shift(u * h01, top)
        return mx.view(u, md) if d != ud else u
    return f


def _trunc_div_signed(x, y, zero, one, minus_one):
    """x / y truncated toward zero for signed integers, with y == 0 -> 0 and y == -1 -> -x (wrapping)."""
    bad = (y == zero) | (y == minus_one)
    ys = mx.where(bad, one, y)
    q = mx.floor_divide(x, ys)
    r = x - q * ys
    q = q + ((r != zero) & ((x < zero) != (ys < zero))).astype(q.dtype)
    q = mx.where(y == minus_one, zero - x, q)
    return mx.where(y == zero, zero, q)


@rule(P.div, shape_free=True)
def _div(params, in_avals, out_avals):
    d = in_avals[0].dtype
    if not dtypes.is_int(d):
        return expression("mx.divide({0}, {1})", 2)  # (written into a generated program: no call of its own)
    zero, one = constant(0, d), constant(1, d)
    if dtypes.is_unsigned(d):
        return lambda x, y: mx.where(y == zero, zero, mx.floor_divide(x, mx.where(y == zero, one, y)))
    minus_one = constant(-1, d)
    return lambda x, y: _trunc_div_signed(x, y, zero, one, minus_one)


@rule(P.rem)
def _rem(params, in_avals, out_avals):
    d = in_avals[0].dtype
    if dtypes.is_int(d):
        zero, one = constant(0, d), constant(1, d)
        if dtypes.is_unsigned(d):
            return lambda x, y: mx.where(y == zero, zero, mx.remainder(x, mx.where(y == zero, one, y)))
        minus_one = constant(-1, d)

        def irem(x, y):
            q = _trunc_div_signed(x, y, zero, one, minus_one)
            return mx.where(y == zero, zero, x - q * y)
        return irem

    def frem(x, y):
        # C fmod: for non-negative operands MLX's floored remainder is exactly fmod; the sign is x's.
        r = mx.remainder(mx.abs(x), mx.abs(y))
        return mx.where(x < 0, -r, r)
    return upcast_low(frem)(params, in_avals, out_avals)


@rule(P.nextafter)
def _nextafter(params, in_avals, out_avals):
    d = in_avals[0].dtype
    sd = _SIGNED_OF[d.itemsize]
    ms = mx_dtype(sd)
    md = mx_dtype(d)
    one_i = constant(1, sd)  # also the bits of the smallest subnormal
    sign_bit = constant(np.array(1, _UNSIGNED_OF[d.itemsize]) << (8 * d.itemsize - 1), _UNSIGNED_OF[d.itemsize])
    mu = mx_dtype(_UNSIGNED_OF[d.itemsize])
    zero = constant(0, d)

    def f(x, y):
        bx = mx.view(x, ms)
        up = (x < y) == (x > zero)  # moving away from zero adds one to the magnitude bits
        moved = mx.where(up, bx + one_i, bx - one_i)
        y_sign = mx.bitwise_and(mx.view(y, mu), sign_bit)
        from_zero = mx.bitwise_or(mx.view(one_i, mu), y_sign)
        r = mx.where(x == zero, mx.view(from_zero, ms), moved)
        r = mx.view(r, md)
        r = mx.where(x == y, y, r)
        return mx.where(mx.isnan(x) | mx.isnan(y), x + y, r)
    return f


def _shift_ok(y, width, zero_y):
    return (y >= zero_y) & (y < width)


@rule(P.shift_left)
def _shift_left(params, in_avals, out_avals):
    d = in_avals[0].dtype
    zero, width = constant(0, d), constant(d.itemsize * 8, d)

    def f(x, y):
        ok = _shift_ok(y, width, zero)
        return mx.where(ok, mx.left_shift(x, mx.where(ok, y, zero)), zero)
    return f


@rule(P.shift_right_logical)
def _shift_right_logical(params, in_avals, out_avals):
    d = in_avals[0].dtype
    ud = _UNSIGNED_OF[d.itemsize]
    mu, md = mx_dtype(ud), mx_dtype(d)
    zero, width, zero_u = constant(0, d), constant(d.itemsize * 8, d), constant(0, ud)

    def f(x, y):
        ok = _shift_ok(y, width, zero)
        s = mx.where(ok, y, zero)
        if d != ud:
            x, s = mx.view(x, mu), mx.view(s, mu)
        r = mx.where(ok, mx.right_shift(x, s), zero_u)
        return mx.view(r, md) if d != ud else r
    return f


@rule(P.shift_right_arithmetic)
def _shift_right_arithmetic(params, in_avals, out_avals):
    d = in_avals[0].dtype
    sd = _SIGNED_OF[d.itemsize]
    ms, md = mx_dtype(sd), mx_dtype(d)
    zero, width = constant(0, d), constant(d.itemsize * 8, d)
    zero_s, minus_one_s = constant(0, sd), constant(-1, sd)

    def f(x, y):
        ok = _shift_ok(y, width, zero)
        s = mx.where(ok, y, zero)
        if d != sd:
            x, s = mx.view(x, ms), mx.view(s, ms)
        r = mx.where(ok, mx.right_shift(x, s), mx.where(x < zero_s, minus_one_s, zero_s))
        return mx.view(r, md) if d != sd else r
    return f


@rule(P.complex_p)
def _complex(params, in_avals, out_avals):
    shape = out_avals[0].shape

    def f(x, y):
        x, y = mx.broadcast_to(x, shape), mx.broadcast_to(y, shape)
        pair = mx.stack([x, y], axis=-1)  # (re, im) pairs in memory order are complex64 values
        return mx.view(pair, mx.complex64).reshape(shape)
    return f


@rule(P.select_n, shape_free=True)
def _select_n(params, in_avals, out_avals):
    n = len(in_avals) - 1
    if n == 1:
        return lambda which, c0: c0
    if in_avals[0].dtype == dtypes.bool_:
        return lambda which, c0, c1: mx.where(which, c1, c0)
    bounds = [constant(j, dtypes.int32) for j in range(n - 1)]

    def f(which, *cases):
        r = cases[-1]
        for j in range(n - 2, -1, -1):  # which <= j picks case j: clamps below 0 and above n-1
            r = mx.where(which <= bounds[j], cases[j], r)
        return r
    return f


# ------------------------------------------------------------------------------ conversions

@rule(P.convert_element_type, shape_free=True)
def _convert(params, in_avals, out_avals):
    src, dst = in_avals[0].dtype, params["new_dtype"]
    if src == dst:
        return expression("{0}", 1)
    mdst = mx_dtype(dst)
    if dst == dtypes.bool_:
        zero = constant(0, src)
        return lambda x: mx.not_equal(x, zero)
    real_first = dtypes.is_complex(src) and not dtypes.is_complex(dst)
    if real_first:
        src = F32
    if dtypes.is_inexact(src) and dtypes.is_int(dst):
        info = np.iinfo(dst)
        fd = F32 if src in LOW else src
        lo_f, hi_f = constant(float(info.min), fd), constant(float(info.max), fd)
        lo_i, hi_i = constant(info.min, dst), constant(info.max, dst)
        zero = constant(0, fd)
        low = src in LOW

        def f2i(x):
            if real_first:
                x = mx.real(x)
            if low:
                x = x.astype(mx.float32)
            t = mx.where(mx.isnan(x), zero, x)
            conv = mx.clip(t, lo_f, hi_f).astype(mdst)
            return mx.where(t >= hi_f, hi_i, mx.where(t <= lo_f, lo_i, conv))
        return f2i
    if real_first:
        return expression("mx.real({0}).astype({md})", 1, md=mdst)
    return expression("{0}.astype({md})", 1, md=mdst)


@rule(P.bitcast_convert_type)
def _bitcast(params, in_avals, out_avals):
    md = mx_dtype(params["new_dtype"])
    return lambda x: mx.view(x, md)
