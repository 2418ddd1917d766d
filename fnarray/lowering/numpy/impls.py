"""NumPy implementations of every primitive: the reference semantics.

``IMPLS[primitive](params, in_avals, out_avals)`` returns a callable over NumPy
arrays. These rules define what every other backend reproduces (docs/design.md,
"The numpy backend defines the semantics"): integer division and remainder by
zero give 0, shifts past the bit width give 0 (or -1), float-to-int casts
saturate with NaN -> 0, gathers clamp and scatters drop out-of-bounds indices,
NaN sorts last and propagates through max/min.
"""

from __future__ import annotations

import functools
import math

import ml_dtypes
import numpy as np

from fnarray.core import dtypes
from fnarray.core.subprograms import CALL_PROGRAM
from fnarray.core import primitives as P
from fnarray.lowering.numpy import xla_cpu_float32
from fnarray.lowering.common import dot_general_as_matmul
from fnarray.core.conv import conv_general_dilated_p
from fnarray.lowering.numpy.conv import conv_general_dilated_impl

__all__ = ["IMPLS", "run_program"]

IMPLS: dict = {}


def _direct(prim, fn):
    plain = getattr(fn, "plain", None)
    if plain is None:
        IMPLS[prim] = lambda params, in_avals, out_avals: fn
    else:
        # Dispatch on the dtype once, when the equation is compiled, not on every call.
        IMPLS[prim] = lambda params, in_avals, out_avals: fn if in_avals[0].dtype in _LOW else plain


def _with_params(prim):
    """Register ``fn(*args, **params)``; params are bound once per compiled equation."""
    def deco(fn):
        IMPLS[prim] = lambda params, in_avals, out_avals: functools.partial(fn, **params) if params else fn
        return fn
    return deco


def _factory(prim):
    """Register ``factory(params, in_avals, out_avals) -> callable``."""
    def deco(fn):
        IMPLS[prim] = fn
        return fn
    return deco


_LOW = (dtypes.float16, dtypes.bfloat16)


def _upcast(fn):
    """Compute in float32 for float16/bfloat16 (what XLA does on the CPU), casting back."""
    def f(x):
        if x.dtype in _LOW:
            return np.asarray(fn(x.astype(np.float32))).astype(x.dtype)
        return fn(x)
    f.plain = fn
    return f


def _pyfunc(fn):
    """Elementwise through a Python math function, in float64."""
    uf = np.frompyfunc(fn, 1, 1)

    def f(x):
        return np.asarray(uf(np.asarray(x, np.float64)), dtype=np.float64).astype(x.dtype)
    return f


# ----------------------------------------------------------------------------- unary

for _p, _f in [(P.neg, np.negative), (P.floor, np.floor), (P.ceil, np.ceil), (P.is_finite, np.isfinite),
               (P.abs_p, np.abs), (P.real, np.real), (P.imag, np.imag), (P.conj, np.conj),
               (P.population_count, None)]:
    if _f is not None:
        _direct(_p, _f)

# np.bitwise_count counts the bits of |x|; the primitive counts the two's-complement bits (as XLA).
_direct(P.population_count, lambda x: np.bitwise_count(x.view(f"u{x.dtype.itemsize}")).astype(x.dtype))

for _p, _f in [(P.exp, np.exp), (P.exp2, np.exp2), (P.log, np.log), (P.log2, np.log2), (P.log1p, np.log1p),
               (P.expm1, np.expm1), (P.tanh, np.tanh), (P.sin, np.sin), (P.cos, np.cos), (P.tan, np.tan),
               (P.asin, np.arcsin), (P.acos, np.arccos), (P.atan, np.arctan), (P.sinh, np.sinh),
               (P.cosh, np.cosh), (P.asinh, np.arcsinh), (P.acosh, np.arccosh), (P.atanh, np.arctanh),
               (P.sqrt, np.sqrt), (P.cbrt, np.cbrt)]:
    _direct(_p, _upcast(_f))


def _sign(x):
    if dtypes.is_complex(x.dtype):
        a = np.abs(x)
        return np.where(a == 0, 0, x / np.where(a == 0, 1, a)).astype(x.dtype)
    return np.where(x == 0, x, np.sign(x))  # sign(-0.0) is -0.0, as XLA


_direct(P.sign, _upcast(_sign))
_direct(P.round_p, _upcast(np.round))
_direct(P.rsqrt, _upcast(lambda x: 1 / np.sqrt(x)))


def _logistic(x):
    if dtypes.is_complex(x.dtype):  # the stable real form below would drop the imaginary part
        return (1 / (1 + np.exp(-x))).astype(x.dtype)
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e)).astype(x.dtype)


_direct(P.logistic, _upcast(_logistic))
_direct(P.erf, _upcast(_pyfunc(math.erf)))
_direct(P.erfc, _upcast(_pyfunc(math.erfc)))
def _lgamma1(v):
    if v <= 0 and math.isfinite(v) and v == math.floor(v):
        return math.inf
    try:
        return math.lgamma(v)
    except OverflowError:  # Python raises where the result passes the float64 range (x > 2.5e305)
        return math.inf


_direct(P.lgamma, _upcast(_pyfunc(_lgamma1)))


def _erf_inv64(y):
    # Giles (2010), "Approximating the erfinv function", single-precision branch as the start,
    # then two Newton steps on erf in float64.
    y = np.asarray(y, np.float64)
    w = -np.log(np.clip((1.0 - y) * (1.0 + y), 1e-300, None))
    small = w < 5.0
    ws = w - 2.5
    p1 = 2.81022636e-08
    for c in (3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087, -0.00125372503,
              -0.00417768164, 0.246640727, 1.50140941):
        p1 = c + p1 * ws
    wl = np.sqrt(np.maximum(w, 5.0)) - 3.0
    p2 = -0.000200214257
    for c in (0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773, -0.0076224613,
              0.00943887047, 1.00167406, 2.83297682):
        p2 = c + p2 * wl
    x = np.where(small, p1, p2) * y
    erf = np.frompyfunc(math.erf, 1, 1)
    for _ in range(2):
        fx = np.asarray(erf(x), np.float64) - y
        x = x - fx / (2 / math.sqrt(math.pi) * np.exp(-x * x))
    x = np.where(y == 1, np.inf, np.where(y == -1, -np.inf, x))
    return np.where(np.abs(y) > 1, np.nan, x)


def _erf_inv(x):
    # float32 (and float16/bfloat16, which XLA computes in float32): XLA CPU's own evaluation, so that
    # random.normal is bitwise JAX's; float64: accurate to the last bit or two
    if x.dtype == np.float64:
        return np.asarray(_erf_inv64(x))
    return xla_cpu_float32.erf_inv(x.astype(np.float32)).astype(x.dtype)


_direct(P.erf_inv, _erf_inv)


def _digamma64(x):
    x = np.asarray(x, np.float64)
    reflect = x < 0.5
    xr = np.where(reflect, 1 - x, x)
    acc = np.zeros_like(xr)
    for _ in range(6):
        small = xr < 6
        acc = acc - np.where(small, 1 / xr, 0)
        xr = np.where(small, xr + 1, xr)
    inv = 1 / xr
    inv2 = inv * inv
    series = np.log(xr) - 0.5 * inv - inv2 * (1 / 12 - inv2 * (1 / 120 - inv2 * (1 / 252 - inv2 * (
        1 / 240 - inv2 / 132))))
    res = acc + series
    res = np.where(reflect, res - np.pi / np.tan(np.pi * x), res)
    # The pole at 0 has a sign (as SciPy and C's tgamma): -inf at +0, +inf at -0; the other poles are NaN.
    res = np.where((x < 0) & (x == np.floor(x)), np.nan, res)
    return np.where(x == 0, -np.copysign(np.inf, x), res)


_direct(P.digamma, lambda x: np.asarray(_digamma64(x)).astype(x.dtype))


def _not(x):
    return np.logical_not(x) if x.dtype == np.bool_ else np.invert(x)


_direct(P.not_p, _not)
_direct(P.stop_gradient, lambda x: x)
_direct(P.copy_p, lambda x: x)
_direct(P.name_p, lambda x: x)


@_with_params(P.integer_pow)
def _integer_pow(x, *, y):
    if y == 0:
        return np.ones_like(x)
    if y < 0:
        return (1 / _integer_pow(x, y=-y)).astype(x.dtype)
    acc, base = None, x
    while y:
        if y & 1:
            acc = base if acc is None else acc * base
        y >>= 1
        if y:
            base = base * base
    return np.asarray(acc).astype(x.dtype)

# ----------------------------------------------------------------------------- binary


_direct(P.add, np.add)
_direct(P.sub, np.subtract)
_direct(P.mul, np.multiply)
_direct(P.max_p, np.maximum)
_direct(P.min_p, np.minimum)
_direct(P.atan2, np.arctan2)
_direct(P.nextafter, np.nextafter)
_direct(P.and_p, np.bitwise_and)
_direct(P.or_p, np.bitwise_or)
_direct(P.xor_p, np.bitwise_xor)
_direct(P.eq, np.equal)
_direct(P.ne, np.not_equal)
_direct(P.lt, np.less)
_direct(P.le, np.less_equal)
_direct(P.gt, np.greater)
_direct(P.ge, np.greater_equal)


def _int_div(x, y):
    zero = y == 0
    ys = np.where(zero, 1, y).astype(y.dtype)
    q = np.floor_divide(x, ys)
    if dtypes.is_signed(np.asarray(x).dtype):
        r = x - q * ys
        q = q + ((r != 0) & ((x < 0) != (ys < 0))).astype(q.dtype)
    return np.where(zero, 0, q).astype(np.result_type(x, y))


def _div(x, y):
    if dtypes.is_int(np.asarray(x).dtype):
        return _int_div(x, y)
    return np.true_divide(x, y)


def _rem(x, y):
    if dtypes.is_int(np.asarray(x).dtype):
        zero = y == 0
        ys = np.where(zero, 1, y).astype(y.dtype)
        return np.where(zero, 0, np.fmod(x, ys)).astype(np.result_type(x, y))
    return np.fmod(x, y)


def _pow(x, y):
    return np.power(x, y)


def _by_kind(int_fn, float_fn):
    return lambda params, in_avals, out_avals: int_fn if dtypes.is_int(in_avals[0].dtype) else float_fn


IMPLS[P.div] = _by_kind(_int_div, np.true_divide)
IMPLS[P.rem] = _by_kind(_rem, np.fmod)
_direct(P.pow_p, _pow)


def _bits(d):
    return np.dtype(d).itemsize * 8


def _shift_ok(y, d):
    return (y >= 0) & (y < _bits(d))


def _shift_left(x, y):
    d = np.asarray(x).dtype
    ok = _shift_ok(y, d)
    return np.where(ok, np.left_shift(x, np.where(ok, y, 0).astype(d)), 0).astype(d)


def _shift_right_arithmetic(x, y):
    d = np.asarray(x).dtype
    ok = _shift_ok(y, d)
    if dtypes.is_unsigned(d):
        sx = np.asarray(x).view(np.dtype(f"i{d.itemsize}"))
        r = np.right_shift(sx, np.where(ok, y, 0).astype(sx.dtype)).view(d)
        neg = sx < 0
    else:
        r = np.right_shift(x, np.where(ok, y, 0).astype(d))
        neg = np.asarray(x) < 0
    fill = np.where(neg, np.array(-1).astype(d) if dtypes.is_signed(d) else np.array(np.iinfo(d).max, d), 0)
    return np.where(ok, r, fill).astype(d)


def _shift_right_logical(x, y):
    d = np.asarray(x).dtype
    ok = _shift_ok(y, d)
    ud = np.dtype(f"u{d.itemsize}")
    ux = np.asarray(x).view(ud) if d != ud else np.asarray(x)
    r = np.right_shift(ux, np.where(ok, y, 0).astype(ud))
    return np.where(ok, r, 0).astype(ud).view(d)


_direct(P.shift_left, _shift_left)
_direct(P.shift_right_arithmetic, _shift_right_arithmetic)
_direct(P.shift_right_logical, _shift_right_logical)


@_factory(P.complex_p)
def _complex(params, in_avals, out_avals):
    d = out_avals[0].dtype

    def f(x, y):
        x, y = np.broadcast_arrays(x, y)
        r = np.empty(x.shape, d)
        r.real, r.imag = x, y
        return r
    return f


def _select_n(which, *cases):
    if which.dtype == np.bool_:
        return np.where(which, cases[1], cases[0]) if len(cases) == 2 else cases[0]
    w = np.clip(which, 0, len(cases) - 1)
    if np.ndim(w) == 0:
        return cases[int(w)]
    return np.choose(w, cases)


_direct(P.select_n, _select_n)

# ----------------------------------------------------------------------------- conversions


@_factory(P.convert_element_type)
def _convert(params, in_avals, out_avals):
    src, dst = in_avals[0].dtype, params["new_dtype"]
    if src == dst:
        return lambda x: x
    if dst == np.bool_:
        return lambda x: np.asarray(x) != 0
    if dtypes.is_complex(src) and not dtypes.is_complex(dst):
        real = _convert(params, [in_avals[0].update(dtype=dtypes.float64)], out_avals)
        return lambda x: real(np.real(x).astype(np.float64))
    if dtypes.is_inexact(src) and dtypes.is_int(dst):
        info = np.iinfo(dst)
        lo, hi = float(info.min), float(info.max)

        def f2i(x):
            x = np.asarray(x)
            xf = x.astype(np.float32) if x.dtype in _LOW else x
            t = np.trunc(np.where(np.isnan(xf), 0, xf))
            safe = np.clip(t, lo, hi)
            r = np.where(t >= hi, info.max, np.where(t <= lo, info.min, safe.astype(dst)))
            return r.astype(dst)
        return f2i
    return lambda x: np.asarray(x).astype(dst)


@_with_params(P.bitcast_convert_type)
def _bitcast(x, *, new_dtype):
    x = np.asarray(x)
    # np.ascontiguousarray makes 0-d arrays 1-d: keep the shape.
    return np.ascontiguousarray(x).view(new_dtype).reshape(x.shape)

# ----------------------------------------------------------------------------- structural


@_with_params(P.iota)
def _iota(*, dtype, shape, dimension):
    r = np.arange(shape[dimension], dtype=dtype)
    r = r.reshape([-1 if i == dimension else 1 for i in range(len(shape))])
    return np.broadcast_to(r, shape)


@_factory(P.broadcast_in_dim)
def _bid(params, in_avals, out_avals):
    shape, bd = params["shape"], params["broadcast_dimensions"]
    inter = [1] * len(shape)
    for i, d in enumerate(bd):
        inter[d] = in_avals[0].shape[i]
    return lambda x: np.broadcast_to(np.reshape(x, inter), shape)


@_with_params(P.reshape)
def _reshape(x, *, new_sizes):
    return np.reshape(x, new_sizes)


@_with_params(P.transpose)
def _transpose(x, *, permutation):
    return np.transpose(x, permutation)


@_with_params(P.rev)
def _rev(x, *, dimensions):
    return np.flip(x, dimensions) if dimensions else x


@_factory(P.slice_p)
def _slice(params, in_avals, out_avals):
    idx = tuple(slice(s, l, st) for s, l, st in zip(params["start_indices"], params["limit_indices"],
                                                     params["strides"], strict=True))
    return lambda x: np.asarray(x)[idx]


def _clamp_starts(starts, sizes, shape):
    return [min(max(int(s), 0), n - k) for s, k, n in zip(starts, sizes, shape, strict=True)]


@_with_params(P.dynamic_slice)
def _dynamic_slice(x, *starts, slice_sizes):
    x = np.asarray(x)
    st = _clamp_starts(starts, slice_sizes, x.shape)
    return x[tuple(slice(s, s + k) for s, k in zip(st, slice_sizes, strict=True))]


def _dynamic_update_slice(x, update, *starts):
    x = np.array(x)
    st = _clamp_starts(starts, update.shape, x.shape)
    x[tuple(slice(s, s + k) for s, k in zip(st, update.shape, strict=True))] = update
    return x


_direct(P.dynamic_update_slice, _dynamic_update_slice)


@_with_params(P.pad)
def _pad(x, pv, *, padding_config):
    x = np.asarray(x)
    # Interior padding first, then low/high (negative values crop).
    if any(i for _, _, i in padding_config):
        shape = [n + max(0, n - 1) * i for n, (_, _, i) in zip(x.shape, padding_config, strict=True)]
        y = np.full(shape, pv, dtype=x.dtype)
        y[tuple(slice(None, None, i + 1) for _, _, i in padding_config)] = x
        x = y
    widths = [(max(lo, 0), max(hi, 0)) for lo, hi, _ in padding_config]
    if any(w != (0, 0) for w in widths):
        x = np.pad(x, widths, constant_values=pv)
    crop = tuple(slice(-lo if lo < 0 else 0, x.shape[d] + hi if hi < 0 else x.shape[d])
                 for d, (lo, hi, _) in enumerate(padding_config))
    return x[crop]


@_with_params(P.concatenate)
def _concatenate(*xs, dimension):
    return np.concatenate(xs, axis=dimension)


def _gather_index(x, indices, axes):
    idx = np.asarray(indices)
    return tuple(np.clip(idx[..., k], 0, x.shape[a] - 1) for k, a in enumerate(axes))


@_with_params(P.gather)
def _gather(x, indices, *, axes):
    x = np.asarray(x)
    if any(x.shape[a] == 0 for a in axes):
        shape = np.shape(indices)[:-1] + tuple(n for i, n in enumerate(x.shape) if i not in axes)
        return np.zeros(shape, x.dtype)
    if len(axes) == 1 and np.asarray(indices).dtype != np.uint64:  # take casts uint64 to intp: may wrap
        # NOTE: fast path (~5x faster on small batches): np.take's mode="clip" clamps to [0, n-1],
        # exactly the gather semantics; it puts the batch dims at the axis, so move them to the front.
        idx = np.asarray(indices)[..., 0]
        out = np.take(x, idx, axis=axes[0], mode="clip")
        nb = idx.ndim
        return np.moveaxis(out, tuple(range(axes[0], axes[0] + nb)), tuple(range(nb))) if axes[0] else out
    xt = np.moveaxis(x, axes, range(len(axes)))
    return xt[_gather_index(x, indices, axes)]


def _scatter_impl(update):
    def impl(x, indices, updates, *, axes):
        x = np.asarray(x)
        out = np.array(np.moveaxis(x, axes, range(len(axes))))
        idx = np.asarray(indices)
        ok = np.ones(idx.shape[:-1], bool)
        for k, a in enumerate(axes):
            ok &= (idx[..., k] >= 0) & (idx[..., k] < x.shape[a])
        sel = tuple(idx[..., k][ok] for k in range(len(axes)))
        update(out, sel, np.asarray(updates)[ok])
        return np.moveaxis(out, range(len(axes)), axes)
    return impl


def _set(out, sel, upd):
    out[sel] = upd


_with_params(P.scatter)(_scatter_impl(_set))
_with_params(P.scatter_add)(_scatter_impl(np.add.at))
_with_params(P.scatter_mul)(_scatter_impl(np.multiply.at))
_with_params(P.scatter_min)(_scatter_impl(np.minimum.at))
_with_params(P.scatter_max)(_scatter_impl(np.maximum.at))

# ----------------------------------------------------------------------------- reductions


def _acc_dtype(d):
    return np.float32 if d in _LOW else d


@_factory(P.reduce_sum)
def _reduce_sum(params, in_avals, out_avals):
    axes, d = params["axes"], in_avals[0].dtype
    acc = _acc_dtype(d)
    if acc == d:
        add_reduce = np.add.reduce
        return lambda x: add_reduce(x, axis=axes, dtype=acc)
    return lambda x: np.asarray(np.sum(x, axis=axes, dtype=acc)).astype(d, copy=False)


@_factory(P.reduce_prod)
def _reduce_prod(params, in_avals, out_avals):
    axes, d = params["axes"], in_avals[0].dtype
    acc = _acc_dtype(d)
    return lambda x: np.asarray(np.prod(x, axis=axes, dtype=acc)).astype(d, copy=False)


def _lowest(d):
    if d == np.bool_:
        return False
    if dtypes.is_int(d):
        return np.iinfo(d).min
    return -np.inf


def _highest(d):
    if d == np.bool_:
        return True
    if dtypes.is_int(d):
        return np.iinfo(d).max
    return np.inf


@_factory(P.reduce_max)
def _reduce_max(params, in_avals, out_avals):
    axes, d = params["axes"], in_avals[0].dtype
    init = np.asarray(_lowest(d), d)
    if dtypes.is_complex(d):
        return lambda x: np.max(x, axis=axes)
    return lambda x: np.asarray(np.max(x, axis=axes, initial=init)).astype(d, copy=False)


@_factory(P.reduce_min)
def _reduce_min(params, in_avals, out_avals):
    axes, d = params["axes"], in_avals[0].dtype
    init = np.asarray(_highest(d), d)
    if dtypes.is_complex(d):
        return lambda x: np.min(x, axis=axes)
    return lambda x: np.asarray(np.min(x, axis=axes, initial=init)).astype(d, copy=False)


@_factory(P.reduce_and)
def _reduce_and(params, in_avals, out_avals):
    axes, d = params["axes"], in_avals[0].dtype
    if d == np.bool_:
        return lambda x: np.all(x, axis=axes)
    ones = np.asarray(-1).astype(d)
    return lambda x: np.bitwise_and.reduce(np.asarray(x), axis=axes, initial=ones).astype(d)


@_factory(P.reduce_or)
def _reduce_or(params, in_avals, out_avals):
    axes, d = params["axes"], in_avals[0].dtype
    if d == np.bool_:
        return lambda x: np.any(x, axis=axes)
    return lambda x: np.bitwise_or.reduce(np.asarray(x), axis=axes, initial=d.type(0)).astype(d)


def _arg(fn):
    def impl(x, *, axes, index_dtype):
        return np.asarray(fn(x, axis=axes[0])).astype(index_dtype)
    return impl


_with_params(P.argmax)(_arg(np.argmax))
_with_params(P.argmin)(_arg(np.argmin))


def _cumulative(accum):
    def impl(x, *, axis, reverse=False):
        x = np.asarray(x)
        if reverse:
            x = np.flip(x, axis)
        d = x.dtype
        y = accum(x.astype(_acc_dtype(d)) if d in _LOW else x, axis).astype(d, copy=False)
        return np.flip(y, axis) if reverse else y
    return impl


_with_params(P.cumsum)(_cumulative(lambda x, a: np.cumsum(x, axis=a, dtype=x.dtype)))
_with_params(P.cumprod)(_cumulative(lambda x, a: np.cumprod(x, axis=a, dtype=x.dtype)))
_with_params(P.cummax)(_cumulative(lambda x, a: np.maximum.accumulate(x, axis=a)))
_with_params(P.cummin)(_cumulative(lambda x, a: np.minimum.accumulate(x, axis=a)))
_with_params(P.cumlogsumexp)(_cumulative(lambda x, a: np.logaddexp.accumulate(x, axis=a)))


def _sort_key(k):
    k = np.asarray(k)
    if k.dtype in _LOW:
        k = k.astype(np.float32)
    if k.dtype.kind == "f":
        k = k + 0.0  # -0.0 sorts equal to 0.0
    return k


@_with_params(P.sort)
def _sort(*xs, dimension, is_stable, num_keys):
    if xs[0].ndim == 0 or xs[0].shape[dimension] == 0:
        return list(xs)
    if num_keys == 1:
        order = np.argsort(_sort_key(xs[0]), axis=dimension, kind="stable")
    else:
        keys = [np.moveaxis(_sort_key(k), dimension, -1) for k in xs[:num_keys]]
        order = np.moveaxis(np.lexsort(keys[::-1], axis=-1), -1, dimension)
    return [np.take_along_axis(np.asarray(x), order, axis=dimension) for x in xs]


@_factory(P.dot_general)
def _dot_general(params, in_avals, out_avals):
    (lc, rc), (lb, rb) = params["dimension_numbers"]
    la, ra = in_avals
    out_d = out_avals[0].dtype
    lperm, rperm, B, M, K, N = dot_general_as_matmul(params["dimension_numbers"], la.shape, ra.shape)
    out_shape = out_avals[0].shape
    compute = np.float32 if la.dtype in _LOW else la.dtype
    if dtypes.is_int(la.dtype) or la.dtype == np.bool_:
        compute = la.dtype

    if not lb and len(lc) == 1 and la.ndim == 2 and ra.ndim == 2 and compute == la.dtype == out_d:
        # The common 2-d cases: a matmul of (transposed) views, no copies. (Outer products of two
        # matrices, with no contracting dimension, take the general path below.)
        lt, rt = lc == (0,), rc == (1,)
        if not lt and not rt:
            return np.matmul
        if lt and not rt:
            return lambda x, y: np.matmul(x.T, y)
        if rt and not lt:
            return lambda x, y: np.matmul(x, y.T)
        return lambda x, y: np.matmul(x.T, y.T)

    def f(x, y):
        a = np.transpose(x, lperm).reshape(B, M, K).astype(compute, copy=False)
        b = np.transpose(y, rperm).reshape(B, K, N).astype(compute, copy=False)
        return np.matmul(a, b).reshape(out_shape).astype(out_d, copy=False)
    return f

# ----------------------------------------------------------------------------- higher-order


def run_program(prog, *args):
    """Evaluate a program on NumPy values (compiled once per program and cached)."""
    from fnarray.lowering.numpy.backend import compile_numpy
    return compile_numpy(prog)(list(args))


@_factory(P.cond)
def _cond(params, in_avals, out_avals):
    from fnarray.lowering.numpy.backend import compile_numpy
    branches = [compile_numpy(b) for b in params["branches"]]
    n = len(branches)

    def f(index, *ops):
        return branches[min(max(int(index), 0), n - 1)](list(ops))
    return f


@_factory(P.while_p)
def _while(params, in_avals, out_avals):
    from fnarray.lowering.numpy.backend import compile_numpy
    cond_f = compile_numpy(params["cond_program"])
    body_f = compile_numpy(params["body_program"])
    cn, bn = params["cond_nconsts"], params["body_nconsts"]

    def f(*args):
        cc, bc, carry = list(args[:cn]), list(args[cn:cn + bn]), list(args[cn + bn:])
        while cond_f(cc + carry)[0]:
            carry = body_f(bc + carry)
        return carry
    return f


@_factory(P.scan)
def _scan(params, in_avals, out_avals):
    from fnarray.lowering.numpy.backend import compile_numpy
    body = compile_numpy(params["program"])
    nc, nk, length, rev = params["num_consts"], params["num_carry"], params["length"], params["reverse"]
    y_avals = out_avals[nk:]

    def f(*args):
        consts, carry, xs = list(args[:nc]), list(args[nc:nc + nk]), args[nc + nk:]
        ys = [np.empty(a.shape, a.dtype) for a in y_avals]
        for i in (range(length - 1, -1, -1) if rev else range(length)):
            outs = body(consts + carry + [x[i] for x in xs])
            carry = outs[:nk]
            for y, o in zip(ys, outs[nk:], strict=True):
                y[i] = o
        return carry + ys
    return f


def _call_factory(key):
    def factory(params, in_avals, out_avals):
        from fnarray.lowering.numpy.backend import compile_numpy
        exe = compile_numpy(params[key])
        return lambda *args: exe(list(args))
    return factory


for _p, _k in CALL_PROGRAM.items():
    IMPLS[_p] = _call_factory(_k)

def _custom_lin(params, in_avals, out_avals):
    def f(*args):
        raise TypeError("a custom_vjp function cannot be forward-mode differentiated (jvp, jacfwd): it only "
                        "defines reverse mode. Use fnarray.custom_jvp for forward mode, or grad/vjp/jacrev.")
    return f


IMPLS[P.custom_lin] = _custom_lin


def _debug_callback(params, in_avals, out_avals):
    callback, in_tree, nbatch = params["callback"], params["in_tree"], params.get("nbatch", 0)

    def f(*args):
        callback.run(in_tree, [np.asarray(a) for a in args], nbatch)
        return []
    return f


IMPLS[P.debug_callback] = _debug_callback

# Convolutions: the reference lives in its own module (numpy_conv.py).
IMPLS[conv_general_dilated_p] = conv_general_dilated_impl

# The linear-algebra primitives have their own module (fnarray/lowering/numpy/linalg.py).
from fnarray.lowering.numpy.linalg import register as _register_linalg  # noqa: E402

_register_linalg(IMPLS)

# The collectives and the SPMD primitives (fnarray.core.collectives, fnarray.core.spmd). A collective has no
# meaning on one device outside a named axis: under vmap(axis_name=) its batching rule replaces it before any
# backend sees it, and shard_map over a mesh of one device runs as such a vmap.
from fnarray.core import collectives as _coll  # noqa: E402
from fnarray.core import spmd as _spmd  # noqa: E402


def _no_collective(params, in_avals, out_avals):
    def f(*args):
        from fnarray.core.errors import UnsupportedOnDevice
        raise UnsupportedOnDevice(
            f"a collective over axis {params['axis_name']!r} reached the numpy backend outside a named axis: run it "
            "inside fnarray.vmap(f, axis_name=...) (every backend), or in fnarray.shard_map over a mesh of the jax "
            "or mlx backend; numpy, opencl and webgpu have no distributed engine")
    return f


def _no_shard_map(params, in_avals, out_avals):
    def f(*args):
        from fnarray.core.errors import UnsupportedOnDevice
        mesh = params["mesh"]
        raise UnsupportedOnDevice(
            f"shard_map over {mesh!r} reached the numpy backend: it runs on the {mesh.backend} backend, where a "
            f"jitted function holding it runs when its inputs are there (fa.device_put(x, NamedSharding(mesh, "
            f"spec))) or FNARRAY_DEVICE={mesh.backend} is set")
    return f


for _p in _coll.COLLECTIVES:
    IMPLS[_p] = _no_collective
IMPLS[_spmd.shard_map_p] = _no_shard_map
_direct(_spmd.sharding_constraint_p, lambda x: x)

_missing = [p.name for p in P.PRIMITIVES.values() if p not in IMPLS]
if _missing:  # every primitive needs a reference implementation
    raise RuntimeError(f"numpy backend lacks implementations for {_missing}")

del ml_dtypes


# ----------------------------------------------------------------------------- fft (its own module)

from fnarray.core.fft import fft_p as _fft_p  # noqa: E402
from fnarray.lowering.numpy.fft import numpy_fft as _numpy_fft  # noqa: E402

IMPLS[_fft_p] = _numpy_fft


# ----------------------------------------------------------------------------- threefry2x32

from fnarray.core.prng import threefry2x32_p as _threefry2x32_p, threefry2x32_reference  # noqa: E402

_direct(_threefry2x32_p, threefry2x32_reference)

# quantized_matmul (its own module, fnarray.lowering.numpy.quantized): weights dequantized in row blocks.
from fnarray.core.quantized import quantized_matmul_p as _quantized_matmul_p  # noqa: E402
from fnarray.lowering.numpy.quantized import numpy_quantized_matmul as _numpy_qmm  # noqa: E402

IMPLS[_quantized_matmul_p] = _numpy_qmm

from fnarray.lowering.numpy.attention import IMPLS as _ATTENTION  # noqa: E402  (dot_product_attention)

IMPLS.update(_ATTENTION)
