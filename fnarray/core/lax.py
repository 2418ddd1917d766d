"""Thin typed wrappers over the primitives (as ``jax.lax``), exposed as ``fnarray.lax``.

These do no implicit promotion or broadcasting beyond what each primitive's
rule allows; ``fnarray.numpy`` builds NumPy semantics on top of them. Every
function takes arrays (or tracers, or scalars) and returns the same.
"""

from __future__ import annotations

import numpy as np

from fnarray.core import dtypes, families
from fnarray.core import primitives as P
from fnarray.core.avals import get_aval
from fnarray.core.tracing import is_scalar

__all__ = [name for name in dir() if False]  # filled at the end


_aval = get_aval  # (one name for fnarray.core.avals' function, without a call of its own)


def shape(x):
    return _aval(x).shape


def dtype(x):
    return _aval(x).dtype


# Elementwise --------------------------------------------------------------------------------
def _un(p):
    def f(x):
        return p.bind(x)
    f.__name__ = p.name
    f.__doc__ = f"Elementwise ``{p.name}`` (primitive). {p.doc}"
    return f


neg, sign, floor, ceil, round, is_finite = map(_un, (P.neg, P.sign, P.floor, P.ceil, P.round_p, P.is_finite))
# A wrapper for each primitive named as the math libraries name it (``Primitive.library``: exp, log, sin, ..., cbrt,
# log10), then the others.
globals().update({p.name: _un(p) for p in families.members("unary") if p.library})
logistic, rsqrt, erf, erf_inv, lgamma, digamma = map(_un, (P.logistic, P.rsqrt, P.erf, P.erf_inv, P.lgamma,
                                                           P.digamma))
erfc = _un(P.erfc)
log2 = _un(P.log2)
abs, bitwise_not, real, imag, conj, population_count = map(_un, (P.abs_p, P.not_p, P.real, P.imag, P.conj,
                                                                 P.population_count))
stop_gradient_p_bind = _un(P.stop_gradient)


_PY_NUMBERS = (int, float, complex)


def _beside(s, other):
    """The Python number ``s`` as a weak literal of ``other``'s dtype where 64-bit is on and its own default
    (``float64``, ``int64``) is not that dtype: fnarray's own compositions write ``lax.mul(x, 2.0)`` for float32
    ``x``, which with x64 off meets a weak float32 (JAX's lax raises under x64 instead; fnarray keeps them working)."""
    if not dtypes.x64_enabled():
        return s
    d = _aval(other).dtype
    own, _ = dtypes.dtype_of_scalar(s)
    if own == d or dtypes.is_bool(d) or (dtypes.is_inexact(own) and not dtypes.is_inexact(d)):
        return s
    return convert_element_type(np.asarray(s).astype(d)[()], d, weak_type=True)


def _bin(p):
    def f(x, y):
        if type(y) in _PY_NUMBERS and type(x) not in _PY_NUMBERS:
            y = _beside(y, x)
        elif type(x) in _PY_NUMBERS and type(y) not in _PY_NUMBERS:
            x = _beside(x, y)
        return p.bind(x, y)
    f.__name__ = p.name
    f.__doc__ = f"Elementwise ``{p.name}`` (primitive). {p.doc}"
    return f


add, sub, mul, div, rem, pow = map(_bin, (P.add, P.sub, P.mul, P.div, P.rem, P.pow_p))
max, min, atan2, nextafter = map(_bin, (P.max_p, P.min_p, P.atan2, P.nextafter))
bitwise_and, bitwise_or, bitwise_xor = map(_bin, (P.and_p, P.or_p, P.xor_p))
shift_left, shift_right_arithmetic, shift_right_logical = map(
    _bin, (P.shift_left, P.shift_right_arithmetic, P.shift_right_logical))
eq, ne, lt, le, gt, ge = map(_bin, (P.eq, P.ne, P.lt, P.le, P.gt, P.ge))
complex = _bin(P.complex_p)


def integer_pow(x, y: int):
    """``x ** y`` for a static integer ``y`` (``jax.lax.integer_pow``); a float ``y`` raises ``TypeError``
    (``int(y)`` made ``integer_pow(x, 2.5)`` the square)."""
    if isinstance(y, bool) or not hasattr(type(y), "__index__"):
        raise TypeError(f"integer_pow: the exponent y must be a Python int, got {type(y).__name__} {y!r}; use "
                        "fnarray.lax.pow or fnarray.numpy.power for other exponents")
    return P.integer_pow.bind(x, y=y.__index__())


def select_n(which, *cases):
    if dtypes.x64_enabled() and any(type(c) in _PY_NUMBERS for c in cases):
        arr = next((c for c in cases if type(c) not in _PY_NUMBERS), None)
        if arr is not None:
            cases = tuple(_beside(c, arr) if type(c) in _PY_NUMBERS else c for c in cases)
    return P.select_n.bind(which, *cases)


def select(pred, on_true, on_false):
    """``on_true`` where ``pred`` else ``on_false`` (all of one shape, or a scalar ``pred``)."""
    return select_n(pred, on_false, on_true)


def convert_element_type(x, new_dtype, weak_type: bool = False):
    """Cast ``x`` to ``new_dtype`` (float -> int saturates, NaN -> 0)."""
    new_dtype = dtypes.canonicalize(new_dtype)
    a = _aval(x)
    if a.dtype == new_dtype and a.weak_type == weak_type and not is_scalar(x):
        return x
    return P.convert_element_type.bind(x, new_dtype=new_dtype, weak_type=bool(weak_type))


def bitcast_convert_type(x, new_dtype):
    return P.bitcast_convert_type.bind(x, new_dtype=dtypes.canonicalize(new_dtype))


# Structural ---------------------------------------------------------------------------------
def iota(dtype, size_or_shape, dimension: int = 0):
    shape_ = (size_or_shape,) if isinstance(size_or_shape, (int, np.integer)) else tuple(size_or_shape)
    return P.iota.bind(dtype=dtypes.canonicalize(dtype), shape=tuple(map(int, shape_)),
                       dimension=dimension)


def broadcast_in_dim(x, shape, broadcast_dimensions):
    shape = tuple(map(int, shape))
    broadcast_dimensions = tuple(map(int, broadcast_dimensions))
    if _aval(x).shape == shape and broadcast_dimensions == tuple(range(len(shape))) and not is_scalar(x):
        return x
    return P.broadcast_in_dim.bind(x, shape=shape, broadcast_dimensions=broadcast_dimensions)


def broadcast_to_rank_shape(x, shape):
    """NumPy-style broadcast of ``x`` to ``shape`` (trailing alignment)."""
    s = _aval(x).shape
    shape = tuple(shape)
    if s == shape and not is_scalar(x):
        return x
    nd = len(shape) - len(s)
    return broadcast_in_dim(x, shape, tuple(range(nd, len(shape))))


def reshape(x, new_sizes, dimensions=None):
    """``x`` with shape ``new_sizes`` (row-major; as ``jax.lax.reshape``), after transposing ``x`` by
    ``dimensions`` (a permutation of its axes) where given. Raises ``TypeError`` for ``dimensions`` that are not
    a permutation of ``x``'s axes; the ``reshape`` primitive's error for sizes of another element count."""
    if dimensions is not None:
        dims, rank = tuple(dimensions), _aval(x).ndim
        if sorted(dims) != list(range(rank)):
            raise TypeError(f"reshape: dimensions must be a permutation of the operand's axes {tuple(range(rank))} "
                            f"(shape {_aval(x).shape}), got {dims}; give each axis once, in the order to read them")
        x = transpose(x, dims)
    new_sizes = tuple(map(int, new_sizes))
    if _aval(x).shape == new_sizes and not is_scalar(x):
        return x
    return P.reshape.bind(x, new_sizes=new_sizes)


def transpose(x, permutation):
    permutation = tuple(map(int, permutation))
    if permutation == tuple(range(len(permutation))):
        return x
    return P.transpose.bind(x, permutation=permutation)


def rev(x, dimensions):
    dimensions = tuple(map(int, dimensions))
    return P.rev.bind(x, dimensions=dimensions) if dimensions else x


def slice(x, start_indices, limit_indices, strides=None):
    n = len(start_indices)
    strides = tuple(map(int, strides)) if strides is not None else (1,) * n
    start_indices = tuple(map(int, start_indices))
    limit_indices = tuple(map(int, limit_indices))
    if start_indices == (0,) * n and limit_indices == _aval(x).shape and strides == (1,) * n:
        return x
    return P.slice_p.bind(x, start_indices=start_indices, limit_indices=limit_indices, strides=strides)


def slice_in_dim(x, start, limit, stride=1, axis=0):
    s = _aval(x).shape
    starts = [0] * len(s)
    limits = list(s)
    strides = [1] * len(s)
    starts[axis], limits[axis], strides[axis] = start, limit, stride
    return slice(x, starts, limits, strides)


def _starts(start_indices):
    """Python int start indices beside array ones as literals of the arrays' dtype where 64-bit is on (their own,
    int64, beside int32 indices: JAX's lowering wants one index dtype)."""
    if dtypes.x64_enabled():
        arr = next((i for i in start_indices if type(i) not in _PY_NUMBERS), None)
        if arr is not None:
            return [_beside(i, arr) if type(i) in _PY_NUMBERS else i for i in start_indices]
    return start_indices


def dynamic_slice(x, start_indices, slice_sizes):
    return P.dynamic_slice.bind(x, *_starts(start_indices), slice_sizes=tuple(map(int, slice_sizes)))


def dynamic_update_slice(x, update, start_indices):
    return P.dynamic_update_slice.bind(x, update, *_starts(start_indices))


def pad(x, padding_value, padding_config):
    if type(padding_value) in _PY_NUMBERS:
        padding_value = _beside(padding_value, x)
    return P.pad.bind(x, padding_value, padding_config=tuple(tuple(map(int, c)) for c in padding_config))


def concatenate(operands, dimension: int):
    operands = list(operands)
    if len(operands) == 1:
        return operands[0]
    return P.concatenate.bind(*operands, dimension=int(dimension))


def gather(x, indices, axes):
    return P.gather.bind(x, indices, axes=tuple(map(int, axes)))


def _scatter(p):
    def f(x, indices, updates, axes):
        return p.bind(x, indices, updates, axes=tuple(map(int, axes)))
    f.__name__ = p.name
    return f


scatter, scatter_add, scatter_mul, scatter_min, scatter_max = map(
    _scatter, (P.scatter, P.scatter_add, P.scatter_mul, P.scatter_min, P.scatter_max))


# Reductions ---------------------------------------------------------------------------------
def _red(p):
    def f(x, axes):
        axes = tuple(sorted(map(int, axes)))
        return p.bind(x, axes=axes) if axes else x
    f.__name__ = p.name
    return f


reduce_sum, reduce_prod, reduce_max, reduce_min, reduce_and, reduce_or = map(
    _red, (P.reduce_sum, P.reduce_prod, P.reduce_max, P.reduce_min, P.reduce_and, P.reduce_or))


def argmax(x, axis: int, index_dtype=dtypes.int32):
    return P.argmax.bind(x, axes=(int(axis),), index_dtype=dtypes.canonicalize(index_dtype))


def argmin(x, axis: int, index_dtype=dtypes.int32):
    return P.argmin.bind(x, axes=(int(axis),), index_dtype=dtypes.canonicalize(index_dtype))


def _cum(p):
    def f(x, axis: int = 0, reverse: bool = False):
        axis = int(axis)
        if axis < 0:   # counted from the end, as JAX's lax.cumsum and its kin
            axis += len(_aval(x).shape)
        return p.bind(x, axis=axis, reverse=bool(reverse))
    f.__name__ = p.name
    return f


cumsum, cumprod, cummax, cummin, cumlogsumexp = map(_cum, (P.cumsum, P.cumprod, P.cummax, P.cummin,
                                                           P.cumlogsumexp))


def sort(operands, dimension: int = -1, is_stable: bool = True, num_keys: int = 1):
    """Sort ``operands`` (one array or a sequence) along ``dimension`` by the first ``num_keys``."""
    single = not isinstance(operands, (list, tuple))
    ops = [operands] if single else list(operands)
    nd = len(_aval(ops[0]).shape)
    dimension = dimension % nd if nd else 0
    outs = P.sort.bind(*ops, dimension=dimension, is_stable=bool(is_stable), num_keys=int(num_keys))
    return outs[0] if single else tuple(outs)


def dot_general(lhs, rhs, dimension_numbers, precision=None, preferred_element_type=None):
    # ``precision`` (jax.lax.Precision) is accepted for JAX's signature; it changes nothing here
    (lc, rc), (lb, rb) = dimension_numbers
    dn = ((tuple(map(int, lc)), tuple(map(int, rc))),
          (tuple(map(int, lb)), tuple(map(int, rb))))
    pet = dtypes.canonicalize(preferred_element_type) if preferred_element_type is not None else None
    return P.dot_general.bind(lhs, rhs, dimension_numbers=dn, preferred_element_type=pet)


# Conveniences -------------------------------------------------------------------------------
def full(shape, fill_value, dtype=None):
    """An array of ``shape`` filled with the scalar ``fill_value`` (cast to ``dtype``; default its own)."""
    d = dtypes.canonicalize(dtype if dtype is not None else _aval(fill_value).dtype)
    v = convert_element_type(fill_value, d) if not is_scalar(fill_value) else _host_scalar(fill_value, d)
    if tuple(shape) == () and is_scalar(v):
        # A scalar: under tracing this folds to a literal instead of a broadcast equation.
        return P.convert_element_type.bind(v, new_dtype=d, weak_type=False)
    return broadcast_in_dim(v, tuple(shape), ())


def _host_scalar(value, d):
    """The Python or NumPy scalar ``value`` as a NumPy scalar of dtype ``d``; a float into an integer dtype by
    ``convert_element_type``'s rule (truncated, saturated, NaN -> 0, as JAX's ``full``), where NumPy raises
    for NaN and infinities and wraps a float32 NaN to the dtype's minimum."""
    if d.kind in "iu" and (type(value) is float or isinstance(value, np.generic) and dtypes.is_float(value.dtype)):
        f, info = float(value), dtypes.iinfo(d)
        n = 0 if f != f else info.max if f >= info.max else info.min if f <= info.min else int(f)
        return np.asarray(n, d)[()]
    return np.asarray(value, d)[()]


def zeros_like(x):
    a = _aval(x)
    return full(a.shape, 0, a.dtype)


def expand_dims(x, dimensions):
    s = list(_aval(x).shape)
    for d in sorted(dimensions):
        s.insert(d, 1)
    return reshape(x, s)


def squeeze(x, dimensions):
    s = _aval(x).shape
    return reshape(x, [n for i, n in enumerate(s) if i not in dimensions])


def stop_gradient(x):
    """Identity whose derivative is zero (as ``jax.lax.stop_gradient``); works on pytrees."""
    from fnarray import tree_util
    from fnarray.core.array import Array

    def f(leaf):
        if isinstance(leaf, Array) and dtypes.is_inexact(leaf.dtype):
            return P.stop_gradient.bind(leaf)
        return leaf
    return tree_util.tree_map(f, x)


__all__ = [n for n, v in list(globals().items()) if callable(v) and not n.startswith("_")
           and getattr(v, "__module__", None) == __name__]

from fnarray.core.fft import FftType, fft  # noqa: E402  (the fft primitive lives in its own module)

__all__ += ["FftType", "fft"]
