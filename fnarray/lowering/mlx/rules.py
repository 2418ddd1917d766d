"""The mlx backend: the IR lowered to ``mlx.core`` for Apple silicon (``mlx[cpu]`` elsewhere).

Devices. ``fa.devices("mlx")`` lists the Metal (or CUDA) GPU first when MLX sees
one (``mlx:0``, platform ``gpu``), then the CPU (``mlx:1``, or ``mlx:0`` on a
machine without a GPU, platform ``cpu``). MLX arrays live in unified memory, so
a device only chooses the stream an operation runs on.

Semantics. Every primitive has a rule in ``RULES`` (``rule(params, in_avals,
out_avals) -> fn(*arrays)``) that reproduces ``numpy_impls`` with MLX
operations: integer division and remainder by zero give 0 (and ``INT_MIN // -1``
never reaches MLX, where it would trap), shifts past the bit width give 0 or -1,
float -> int casts saturate with NaN -> 0, gathers clamp and scatters drop
out-of-bounds indices, NaN sorts last, ``max``/``min`` propagate NaN, ``sign(NaN)``
is NaN. ``lgamma``, ``digamma`` and ``erfc``, which MLX lacks, come from their
decompositions (``fnarray.core.decompositions``); other things MLX lacks are composed
here: ``population_count`` (bit slicing), ``nextafter`` (bit
arithmetic), padding with interior/negative widths, bitwise reductions (a tree of
halvings), integer ``dot_general`` (products summed in blocks; MLX's matmul is
floating-point only), multi-key ``sort`` (successive stable argsorts).

Unsupported (these fall back to numpy with a ``FallbackWarning``, see
``supports``): ``complex128`` everywhere (MLX has no such dtype); ``float64``
on the GPU (Metal has none); on the CPU, ``float64`` only where MLX computes it
exactly — its CPU transcendental functions round through float32 (``exp`` of a
float64 is float32-accurate), so float64 transcendental and special functions
fall back (``_F64_APPROXIMATE``); ``complex64`` outside the operations that MLX
implements for it (``_COMPLEX_OK``); ``custom_lin`` (never executed).

This module holds the elementwise, reduction, sort, ``dot_general`` and call rules and
what falls back; ``mlx_structural.py`` the structural ones; ``mlx_backend.py`` the devices,
executables and the ``mx.compile`` policy; ``mlx_common.py`` the table and transfers.
"""

from __future__ import annotations

import math
import weakref

import numpy as np

from fnarray.core import dtypes
from fnarray.core import primitives as P
from fnarray.core.conv import conv_general_dilated_p
from fnarray.core.ir import Literal, Program
from fnarray.core.passes import dce
from fnarray.core.subprograms import CALL_PROGRAM, CONTROL_FLOW
from fnarray.lowering.mlx import conv as _mlx_conv
from fnarray.lowering.mlx import structural as mlx_structural  # noqa: F401  (registers the structural rules)
from fnarray.lowering.mlx import windows as mlx_windows  # noqa: F401  (registers the window primitives' rules)
from fnarray.lowering.common import dot_general_as_matmul
from fnarray.lowering.mlx.common import _F32, _LOW, RULES, _const, _md, _mx_op, _upcast, from_numpy, mx, rule, to_numpy
from fnarray.lowering.zero_size import drop_zero_size, has_zero_size, is_fill

__all__ = ["RULES", "from_numpy", "to_numpy"]


# ------------------------------------------------------------------------------ elementwise

for _p, _name in [(P.floor, "floor"), (P.ceil, "ceil"), (P.round_p, "round"), (P.exp, "exp"), (P.log, "log"),
                  (P.log2, "log2"), (P.log1p, "log1p"), (P.expm1, "expm1"), (P.tanh, "tanh"),
                  (P.sin, "sin"), (P.cos, "cos"), (P.tan, "tan"), (P.asin, "arcsin"), (P.acos, "arccos"),
                  (P.atan, "arctan"), (P.sinh, "sinh"), (P.cosh, "cosh"), (P.asinh, "arcsinh"),
                  (P.acosh, "arccosh"), (P.atanh, "arctanh"), (P.sqrt, "sqrt"), (P.rsqrt, "rsqrt"),
                  (P.erf_inv, "erfinv"), (P.pow_p, "power"), (P.atan2, "arctan2")]:
    RULES[_p] = _mx_op(_name, upcast=True)

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


RULES[P.erf] = _upcast(_erf_small_corrected)


@rule(P.pow_p)
def _pow(params, in_avals, out_avals):
    real_pow = _mx_op("power", upcast=True)(params, in_avals, out_avals)
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
    RULES[_p] = _mx_op(_name, upcast=False)


def _identity(params, in_avals, out_avals):
    return lambda x: x


RULES[P.stop_gradient] = _identity
RULES[P.copy_p] = _identity
RULES[P.name_p] = _identity


@rule(P.exp2)
def _exp2(params, in_avals, out_avals):
    d = in_avals[0].dtype
    if dtypes.is_complex(d):
        ln2 = _const(math.log(2.0), d)
        return lambda x: mx.exp(x * ln2)
    two = _const(2.0, _F32 if d in _LOW else d)
    return _upcast(lambda x: mx.power(two, x))(params, in_avals, out_avals)


@rule(P.logistic)
def _logistic(params, in_avals, out_avals):
    d = in_avals[0].dtype
    if dtypes.is_complex(d):  # MLX's sigmoid is real-only; the reference's complex form is this one
        one = _const(1, d)
        return lambda x: one / (one + mx.exp(-x))
    return _upcast(lambda x: mx.sigmoid(x))(params, in_avals, out_avals)


@rule(P.sign)
def _sign(params, in_avals, out_avals):
    d = in_avals[0].dtype
    if dtypes.is_float(d):  # MLX's sign(NaN) is 0; the reference keeps NaN
        return lambda x: mx.where(mx.isnan(x), x, mx.sign(x))
    return lambda x: mx.sign(x)


@rule(P.not_p)
def _not(params, in_avals, out_avals):
    if in_avals[0].dtype == dtypes.bool_:
        return lambda x: mx.logical_not(x)
    return lambda x: mx.bitwise_invert(x)


@rule(P.cbrt)
def _cbrt(params, in_avals, out_avals):
    d = in_avals[0].dtype
    third = _const(1.0 / 3.0, _F32 if d in _LOW else d)

    def f(x):
        r = mx.power(mx.abs(x), third)
        return mx.where(x < 0, -r, r)
    return _upcast(f)(params, in_avals, out_avals)


@rule(P.integer_pow)
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
    one = _const(1, in_avals[0].dtype)
    return lambda x: one / positive(x, -y)


# lgamma and digamma (which MLX lacks) are written once, in fnarray.core.decompositions.


_UNSIGNED_OF = {1: dtypes.uint8, 2: dtypes.uint16, 4: dtypes.uint32, 8: dtypes.uint64}
_SIGNED_OF = {1: dtypes.int8, 2: dtypes.int16, 4: dtypes.int32, 8: dtypes.int64}


@rule(P.population_count)
def _population_count(params, in_avals, out_avals):
    d = in_avals[0].dtype
    width = d.itemsize * 8
    ud = _UNSIGNED_OF[d.itemsize]
    mu, md = _md(ud), _md(d)

    def c(pattern):  # a byte pattern repeated over the width
        return _const(int.from_bytes(bytes([pattern]) * d.itemsize, "little"), ud)

    m1, m2, m4, h01 = c(0x55), c(0x33), c(0x0F), c(0x01)
    s1, s2, s4, top = _const(1, ud), _const(2, ud), _const(4, ud), _const(width - 8, ud)

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


@rule(P.div)
def _div(params, in_avals, out_avals):
    d = in_avals[0].dtype
    if not dtypes.is_int(d):
        return lambda x, y: mx.divide(x, y)
    zero, one = _const(0, d), _const(1, d)
    if dtypes.is_unsigned(d):
        return lambda x, y: mx.where(y == zero, zero, mx.floor_divide(x, mx.where(y == zero, one, y)))
    minus_one = _const(-1, d)
    return lambda x, y: _trunc_div_signed(x, y, zero, one, minus_one)


@rule(P.rem)
def _rem(params, in_avals, out_avals):
    d = in_avals[0].dtype
    if dtypes.is_int(d):
        zero, one = _const(0, d), _const(1, d)
        if dtypes.is_unsigned(d):
            return lambda x, y: mx.where(y == zero, zero, mx.remainder(x, mx.where(y == zero, one, y)))
        minus_one = _const(-1, d)

        def irem(x, y):
            q = _trunc_div_signed(x, y, zero, one, minus_one)
            return mx.where(y == zero, zero, x - q * y)
        return irem

    def frem(x, y):
        # C fmod: for non-negative operands MLX's floored remainder is exactly fmod; the sign is x's.
        r = mx.remainder(mx.abs(x), mx.abs(y))
        return mx.where(x < 0, -r, r)
    return _upcast(frem)(params, in_avals, out_avals)


@rule(P.nextafter)
def _nextafter(params, in_avals, out_avals):
    d = in_avals[0].dtype
    sd = _SIGNED_OF[d.itemsize]
    ms = _md(sd)
    md = _md(d)
    one_i = _const(1, sd)  # also the bits of the smallest subnormal
    sign_bit = _const(np.array(1, _UNSIGNED_OF[d.itemsize]) << (8 * d.itemsize - 1), _UNSIGNED_OF[d.itemsize])
    mu = _md(_UNSIGNED_OF[d.itemsize])
    zero = _const(0, d)

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
    zero, width = _const(0, d), _const(d.itemsize * 8, d)

    def f(x, y):
        ok = _shift_ok(y, width, zero)
        return mx.where(ok, mx.left_shift(x, mx.where(ok, y, zero)), zero)
    return f


@rule(P.shift_right_logical)
def _shift_right_logical(params, in_avals, out_avals):
    d = in_avals[0].dtype
    ud = _UNSIGNED_OF[d.itemsize]
    mu, md = _md(ud), _md(d)
    zero, width, zero_u = _const(0, d), _const(d.itemsize * 8, d), _const(0, ud)

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
    ms, md = _md(sd), _md(d)
    zero, width = _const(0, d), _const(d.itemsize * 8, d)
    zero_s, minus_one_s = _const(0, sd), _const(-1, sd)

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


@rule(P.select_n)
def _select_n(params, in_avals, out_avals):
    n = len(in_avals) - 1
    if n == 1:
        return lambda which, c0: c0
    if in_avals[0].dtype == dtypes.bool_:
        return lambda which, c0, c1: mx.where(which, c1, c0)
    bounds = [_const(j, dtypes.int32) for j in range(n - 1)]

    def f(which, *cases):
        r = cases[-1]
        for j in range(n - 2, -1, -1):  # which <= j picks case j: clamps below 0 and above n-1
            r = mx.where(which <= bounds[j], cases[j], r)
        return r
    return f


# ------------------------------------------------------------------------------ conversions

@rule(P.convert_element_type)
def _convert(params, in_avals, out_avals):
    src, dst = in_avals[0].dtype, params["new_dtype"]
    if src == dst:
        return lambda x: x
    mdst = _md(dst)
    if dst == dtypes.bool_:
        zero = _const(0, src)
        return lambda x: mx.not_equal(x, zero)
    real_first = dtypes.is_complex(src) and not dtypes.is_complex(dst)
    if real_first:
        src = _F32
    if dtypes.is_inexact(src) and dtypes.is_int(dst):
        info = np.iinfo(dst)
        fd = _F32 if src in _LOW else src
        lo_f, hi_f = _const(float(info.min), fd), _const(float(info.max), fd)
        lo_i, hi_i = _const(info.min, dst), _const(info.max, dst)
        zero = _const(0, fd)
        low = src in _LOW

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
        return lambda x: mx.real(x).astype(mdst)
    return lambda x: x.astype(mdst)


@rule(P.bitcast_convert_type)
def _bitcast(params, in_avals, out_avals):
    md = _md(params["new_dtype"])
    return lambda x: mx.view(x, md)


# ------------------------------------------------------------------------------ reductions

def _reduction(name):
    def factory(params, in_avals, out_avals):
        axes = list(params["axes"])
        d = in_avals[0].dtype
        md = _md(d)
        if not axes:
            return lambda x: x
        fn = getattr(mx, name)
        if d in _LOW:
            return lambda x: fn(x.astype(mx.float32), axis=axes).astype(md)

        def f(x):
            r = fn(x, axis=axes)
            return r if r.dtype == md else r.astype(md)  # MLX widens small integers
        return f
    return factory


RULES[P.reduce_sum] = _reduction("sum")
RULES[P.reduce_prod] = _reduction("prod")


def _lowest(d):
    return False if d == dtypes.bool_ else (np.iinfo(d).min if dtypes.is_int(d) else -np.inf)


def _highest(d):
    return True if d == dtypes.bool_ else (np.iinfo(d).max if dtypes.is_int(d) else np.inf)


def _extremum(name, bool_name, identity):
    def factory(params, in_avals, out_avals):
        axes = list(params["axes"])
        x_aval = in_avals[0]
        d = x_aval.dtype
        if not axes:
            return lambda x: x
        if any(x_aval.shape[a] == 0 for a in axes):
            val, shape, md = _const(identity(d), d), out_avals[0].shape, _md(d)
            return lambda x: mx.full(shape, val, dtype=md)
        fn = getattr(mx, bool_name if d == dtypes.bool_ else name)
        return lambda x: fn(x, axis=axes)
    return factory


RULES[P.reduce_max] = _extremum("max", "any", _lowest)
RULES[P.reduce_min] = _extremum("min", "all", _highest)


def _fold(x, axes, shape, op, identity):
    """Reduce ``axes`` of ``x`` with a binary ``op`` by repeated halving (MLX has no bitwise reductions)."""
    rest = [i for i in range(len(shape)) if i not in axes]
    rest_shape = [shape[i] for i in rest]
    n = math.prod(shape[a] for a in axes)
    y = mx.transpose(x, rest + list(axes)).reshape(rest_shape + [n])
    if n == 0:
        return mx.full(rest_shape, identity, dtype=identity.dtype)
    while n > 1:
        if n % 2:
            y = mx.concatenate([y, mx.full(rest_shape + [1], identity, dtype=identity.dtype)], axis=-1)
            n += 1
        h = n // 2
        y = op(y[..., :h], y[..., h:])
        n = h
    return y.reshape(rest_shape)


def _bitwise_reduction(bool_name, op_name, identity):
    def factory(params, in_avals, out_avals):
        axes = list(params["axes"])
        x_aval = in_avals[0]
        d = x_aval.dtype
        if not axes:
            return lambda x: x
        if d == dtypes.bool_:
            fn = getattr(mx, bool_name)
            return lambda x: fn(x, axis=axes)
        op = getattr(mx, op_name)
        ident = _const(np.asarray(identity).astype(d), d)  # -1 means all bits set, unsigned too
        return lambda x: _fold(x, axes, x_aval.shape, op, ident)
    return factory


RULES[P.reduce_and] = _bitwise_reduction("all", "bitwise_and", -1)
RULES[P.reduce_or] = _bitwise_reduction("any", "bitwise_or", 0)


def _arg(name):
    def factory(params, in_avals, out_avals):
        axis = params["axes"][0]
        md = _md(params["index_dtype"])
        fn = getattr(mx, name)  # MLX returns the first extremum, and the first NaN, as the reference
        return lambda x: fn(x, axis=axis).astype(md)
    return factory


RULES[P.argmax] = _arg("argmax")
RULES[P.argmin] = _arg("argmin")


def _cumulative(name):
    def factory(params, in_avals, out_avals):
        axis, reverse = params["axis"], params.get("reverse", False)
        d = in_avals[0].dtype
        md = _md(d)
        fn = getattr(mx, name)
        if in_avals[0].size == 0:
            return lambda x: x
        if d in _LOW:
            return lambda x: fn(x.astype(mx.float32), axis=axis, reverse=reverse).astype(md)

        def f(x):
            r = fn(x, axis=axis, reverse=reverse)
            return r if r.dtype == md else r.astype(md)
        return f
    return factory


RULES[P.cumsum] = _cumulative("cumsum")
RULES[P.cumprod] = _cumulative("cumprod")
RULES[P.cummax] = _cumulative("cummax")
RULES[P.cummin] = _cumulative("cummin")
RULES[P.cumlogsumexp] = _cumulative("logcumsumexp")


@rule(P.sort)
def _sort(params, in_avals, out_avals):
    dim, num_keys = params["dimension"], params["num_keys"]
    x_aval = in_avals[0]
    if x_aval.ndim == 0 or x_aval.shape[dim] == 0:
        return lambda *xs: list(xs)
    key_low = [a.dtype in _LOW for a in in_avals[:num_keys]]
    key_float = [dtypes.is_float(a.dtype) for a in in_avals[:num_keys]]
    zeros = [_const(0, _F32 if low else a.dtype) if fl else None
             for a, low, fl in zip(in_avals[:num_keys], key_low, key_float, strict=True)]

    def key(k, low, z):
        if low:
            k = k.astype(mx.float32)
        if z is not None:
            k = mx.where(k == z, z, k)  # -0.0 sorts equal to 0.0 (MLX sorts NaN last already)
        return k

    if len(in_avals) == 1:
        return lambda x: [mx.sort(x, axis=dim)]  # stable; -0.0 == 0.0 and NaN last in MLX

    def f(*xs):
        keys = [key(k, low, z) for k, low, z in zip(xs[:num_keys], key_low, zeros, strict=True)]
        # Lexicographic order from stable sorts, least significant key first.
        order = mx.argsort(keys[-1], axis=dim)
        for k in reversed(keys[:-1]):
            order = mx.take_along_axis(order, mx.argsort(mx.take_along_axis(k, order, axis=dim), axis=dim),
                                       axis=dim)
        return [mx.take_along_axis(x, order, axis=dim) for x in xs]
    return f


_INT_DOT_BLOCK = 1 << 22  # elements of the broadcast product per block (integer dot_general)


@rule(P.dot_general)
def _dot_general(params, in_avals, out_avals):
    (lc, rc), (lb, rb) = params["dimension_numbers"]
    la, ra = in_avals
    d = la.dtype
    out_d = out_avals[0].dtype
    out_shape = list(out_avals[0].shape)
    mo = _md(out_d)
    lperm, rperm, B, M, K, N = dot_general_as_matmul(params["dimension_numbers"], la.shape, ra.shape)
    l_ident, r_ident = lperm == list(range(la.ndim)), rperm == list(range(ra.ndim))
    if B * M * N == 0:
        return lambda x, y: mx.zeros(out_shape, mo)

    def operands(x, y):
        a = x if l_ident else mx.transpose(x, lperm)
        b = y if r_ident else mx.transpose(y, rperm)
        return a.reshape([B, M, K]), b.reshape([B, K, N])

    if dtypes.is_inexact(d):
        low = d in _LOW

        def f(x, y):
            a, b = operands(x, y)
            if low:
                a, b = a.astype(mx.float32), b.astype(mx.float32)
            r = mx.matmul(a, b).reshape(out_shape)
            return r if r.dtype == mo else r.astype(mo)
        return f

    # Integers and bool: MLX's matmul is floating-point only. Sum exact (wrapping) products in blocks of K.
    work = mx.int32 if d == dtypes.bool_ else _md(d)
    block = max(1, _INT_DOT_BLOCK // max(1, B * M * N))
    is_bool = d == dtypes.bool_

    def fi(x, y):
        a, b = operands(x, y)
        if is_bool:
            a, b = a.astype(work), b.astype(work)
        acc = None
        for k0 in range(0, max(K, 1), block):
            part = a[:, :, k0:k0 + block, None] * b[:, None, k0:k0 + block, :]
            s = mx.sum(part, axis=2)
            acc = s if acc is None else acc + s
        if acc is None or K == 0:
            acc = mx.zeros([B, M, N], work)
        if is_bool:
            acc = acc > 0
        return acc.reshape(out_shape).astype(mo)
    return fi


# ------------------------------------------------------------------------------ calls (inlined)

def _call(key):
    def factory(params, in_avals, out_avals):
        fn = _generated(params[key]).fn
        return lambda *args: fn(*args)
    return factory


for _p, _k in CALL_PROGRAM.items():
    RULES[_p] = _call(_k)

# while, scan and cond run from the host (fnarray.devices.host_control); custom_lin never runs.
_HOST = CONTROL_FLOW
_UNSUPPORTED = {P.custom_lin: "custom_lin only appears in linear programs that are transposed, never run"}

# Convolutions: mx.conv_general through mlx_conv.py, which also says which equations it cannot run.
RULES[conv_general_dilated_p] = _mlx_conv.conv_general_dilated_factory
#: ``prim -> check(in_avals, params) -> reason | None``: equations of a primitive that has a rule but not for
#: these operands (they fall back to numpy with that reason; ``mlx_backend`` asks before it runs one).
_EQN_CHECKS = {conv_general_dilated_p: _mlx_conv.unsupported_reason}

# ------------------------------------------------------------------------------ what falls back

# MLX's CPU kernels compute these in float32 precision even for float64 inputs (measured against NumPy
# in float64: relative errors of 1e-8..2e-6 where the other float64 functions are within 4e-16), so
# float64 runs them on numpy. lgamma is composed with sin, cumlogsumexp is MLX's logcumsumexp.
_F64_APPROXIMATE = frozenset({P.exp, P.logistic, P.sin, P.cos, P.erf, P.erf_inv, P.lgamma, P.cumlogsumexp})
# What MLX implements for complex64 (everything else with a complex64 operand falls back).
_COMPLEX_OK = frozenset({
    P.neg, P.add, P.sub, P.mul, P.div, P.pow_p, P.integer_pow, P.exp, P.exp2, P.log, P.log1p, P.sqrt, P.rsqrt,
    P.sin, P.cos, P.tan, P.asin, P.acos, P.atan, P.sinh, P.cosh, P.tanh, P.asinh, P.acosh, P.atanh, P.logistic,
    P.abs_p, P.sign, P.real, P.imag, P.conj, P.eq, P.ne, P.complex_p, P.select_n, P.convert_element_type,
    P.iota, P.broadcast_in_dim, P.reshape, P.transpose, P.rev, P.slice_p, P.dynamic_slice, P.dynamic_update_slice,
    P.pad, P.concatenate, P.gather, P.scatter, P.scatter_add, P.scatter_mul, P.reduce_sum, P.reduce_prod,
    P.cumsum, P.cumprod, P.dot_general, P.stop_gradient, P.copy_p, P.name_p, P.call, P.remat, P.custom_jvp_call,
    P.custom_vjp_call, P.while_p, P.scan, P.cond,
})

# fft (its own module, fnarray.lowering.mlx.fft): mx.fft in complex64/float32.
from fnarray.core.fft import fft_p as _fft_p  # noqa: E402
from fnarray.lowering.mlx.fft import mlx_fft as _mlx_fft  # noqa: E402

RULES[_fft_p] = _mlx_fft
_COMPLEX_OK = _COMPLEX_OK | {_fft_p}

# quantized_matmul (fnarray.lowering.mlx.quantized): mx.quantized_matmul.
from fnarray.core.quantized import quantized_matmul_p as _quantized_matmul_p  # noqa: E402
from fnarray.lowering.mlx.quantized import mlx_quantized_matmul as _mlx_qmm  # noqa: E402

RULES[_quantized_matmul_p] = _mlx_qmm

from fnarray.lowering.mlx.attention import RULES as _ATTENTION  # noqa: E402  (mx.fast.scaled_dot_product_attention)

RULES.update(_ATTENTION)
_F64_APPROXIMATE = _F64_APPROXIMATE | set(_ATTENTION)   # its softmax's exp: float32 precision on the CPU


def _dtype_reason(prim, eqn_dtypes, platform):
    if dtypes.complex128 in eqn_dtypes:
        return "MLX has no complex128"
    if dtypes.float64 in eqn_dtypes:
        if platform != "cpu":
            return "MLX has no float64 on the GPU"
        if prim in _F64_APPROXIMATE:
            return f"MLX computes {prim.name} of float64 in float32 precision on the CPU"
    if dtypes.complex64 in eqn_dtypes and prim not in _COMPLEX_OK:
        return f"MLX has no complex64 {prim.name}"
    return None


def _eqn_dtypes(eqn):
    ds = {a.aval.dtype for a in eqn.inputs}
    ds.update(o.aval.dtype for o in eqn.outputs)
    for p in eqn.params.values():
        if isinstance(p, np.dtype):
            ds.add(p)
    return ds


# ------------------------------------------------------------------------------ code generation

class _Generated:
    """Python source for a straight-line program over MLX arrays, and the function it defines."""

    def __init__(self, prog: Program, execute: bool = True):
        prog, _ = dce(prog)
        prog, _ = dce(drop_zero_size(prog))
        names: dict = {}
        glb: dict = {"__name__": "fnarray.lowering.mlx_program"}
        consts, lines = [], []
        # mx.compile is never given empty (NumPy) buffers: such programs stay eager.
        self.has_empty = has_zero_size(prog)
        self.max_elements = max([v.aval.size for v in list(prog.constvars) + list(prog.invars)] +
                                [o.aval.size for e in prog.eqns for o in e.outputs] + [0])

        def name(a):
            if isinstance(a, Literal):
                k = f"k{len(consts)}"
                consts.append(f"#   {k} = {a.val!r} ({a.aval.dtype.name})")
                if execute:
                    glb[k] = from_numpy(np.asarray(a.val, a.aval.dtype))
                return k
            if a not in names:
                names[a] = f"v{len(names)}"
            return names[a]

        ins = [name(v) for v in list(prog.constvars) + list(prog.invars)]
        for i, e in enumerate(prog.eqns):
            f = f"f{i}_{e.primitive.name}"
            if is_fill(e):  # a zero-size value: an empty NumPy buffer, made once, never given to MLX
                k = f"e{i}"
                o = e.outputs[0].aval
                consts.append(f"#   {k} = empty {o.str_short()}")
                if execute:
                    glb[k] = from_numpy(np.zeros(o.shape, o.dtype))
                lines.append(f"    {name(e.outputs[0])} = {k}")
                continue
            if execute:
                if e.primitive in _HOST:
                    raise ValueError(f"{e.primitive.name} runs from the host; compile it through "
                                     "fnarray.devices.partition.compile_program")
                glb[f] = RULES[e.primitive](e.params, [a.aval for a in e.inputs], [o.aval for o in e.outputs])
            elif e.primitive in _HOST:
                f = f"host_{e.primitive.name}"
            args = ", ".join(name(a) for a in e.inputs)
            outs = [name(o) for o in e.outputs]
            if e.primitive.multiple_results or e.primitive in _HOST:
                lhs = ", ".join(outs) + ("," if len(outs) == 1 else "")
                lines.append(f"    {lhs} = {f}({args})")
            else:
                lines.append(f"    {outs[0]} = {f}({args})")
        lines.append(f"    return [{', '.join(name(a) for a in prog.outvars)}]")
        header = (["# MLX program; constants:"] + consts) if consts else []
        self.source = "\n".join(header + [f"def program({', '.join(ins)}):"] + lines) + "\n"
        self.n_eqns = len(prog.eqns)
        self.fn = None
        if execute:
            exec(compile(self.source, "<fnarray mlx program>", "exec"), glb)  # noqa: S102 (our own codegen)
            self.fn = glb["program"]


_generated_cache: "weakref.WeakKeyDictionary[Program, _Generated]" = weakref.WeakKeyDictionary()


def _generated(prog: Program) -> _Generated:
    g = _generated_cache.get(prog)
    if g is None:
        g = _Generated(prog)
        _generated_cache[prog] = g
    return g


# The linear-algebra primitives' rules (mx.linalg on the CPU stream) live in their own module.
from fnarray.lowering.mlx.linalg import register as _register_linalg  # noqa: E402

_COMPLEX_OK = _COMPLEX_OK | _register_linalg(RULES)
