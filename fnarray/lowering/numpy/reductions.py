"""The NumPy references of the reductions, cumulative reductions and ``sort`` (NaNs last)."""

from __future__ import annotations

import numpy as np

from fnarray.core import dtypes
from fnarray.core import primitives as P
from fnarray.lowering.numpy.common import LOW, factory, with_params


def acc_dtype(d):
    """The dtype a sum or product of dtype ``d`` accumulates in."""
    return np.float32 if d in LOW else d


@factory(P.reduce_sum)
def _reduce_sum(params, in_avals, out_avals):
    axes, d = params["axes"], in_avals[0].dtype
    acc = acc_dtype(d)
    if acc == d:
        add_reduce = np.add.reduce
        return lambda x: add_reduce(x, axis=axes, dtype=acc)
    return lambda x: np.asarray(np.sum(x, axis=axes, dtype=acc)).astype(d, copy=False)


@factory(P.reduce_prod)
def _reduce_prod(params, in_avals, out_avals):
    axes, d = params["axes"], in_avals[0].dtype
    acc = acc_dtype(d)
    return lambda x: np.asarray(np.prod(x, axis=axes, dtype=acc)).astype(d, copy=False)


#: float8_e4m3fn has no infinities (-inf would become NaN): its extremes start from its finite ones
_NO_INF = {dtypes.float8_e4m3fn: -448.0}


def _lowest(d):
    if d == np.bool_:
        return False
    if dtypes.is_int(d):
        return dtypes.iinfo(d).min
    return _NO_INF.get(d, -np.inf)


def _highest(d):
    if d == np.bool_:
        return True
    if dtypes.is_int(d):
        return dtypes.iinfo(d).max
    return -_NO_INF.get(d, -np.inf)


@factory(P.reduce_max)
def _reduce_max(params, in_avals, out_avals):
    axes, d = params["axes"], in_avals[0].dtype
    init = np.asarray(_lowest(d), d)
    if dtypes.is_complex(d):
        return lambda x: np.max(x, axis=axes)
    return lambda x: np.asarray(np.max(x, axis=axes, initial=init)).astype(d, copy=False)


@factory(P.reduce_min)
def _reduce_min(params, in_avals, out_avals):
    axes, d = params["axes"], in_avals[0].dtype
    init = np.asarray(_highest(d), d)
    if dtypes.is_complex(d):
        return lambda x: np.min(x, axis=axes)
    return lambda x: np.asarray(np.min(x, axis=axes, initial=init)).astype(d, copy=False)


@factory(P.reduce_and)
def _reduce_and(params, in_avals, out_avals):
    axes, d = params["axes"], in_avals[0].dtype
    if d == np.bool_:
        return lambda x: np.all(x, axis=axes)
    ones = np.asarray(-1).astype(d)
    return lambda x: np.bitwise_and.reduce(np.asarray(x), axis=axes, initial=ones).astype(d)


@factory(P.reduce_or)
def _reduce_or(params, in_avals, out_avals):
    axes, d = params["axes"], in_avals[0].dtype
    if d == np.bool_:
        return lambda x: np.any(x, axis=axes)
    return lambda x: np.bitwise_or.reduce(np.asarray(x), axis=axes, initial=d.type(0)).astype(d)


def _arg(fn):
    def impl(x, *, axes, index_dtype):
        return np.asarray(fn(x, axis=axes[0])).astype(index_dtype)
    return impl


with_params(P.argmax)(_arg(np.argmax))
with_params(P.argmin)(_arg(np.argmin))


def _cumulative(accum):
    def impl(x, *, axis, reverse=False):
        x = np.asarray(x)
        if reverse:
            x = np.flip(x, axis)
        d = x.dtype
        y = accum(x.astype(acc_dtype(d)) if d in LOW else x, axis).astype(d, copy=False)
        return np.flip(y, axis) if reverse else y
    return impl


with_params(P.cumsum)(_cumulative(lambda x, a: np.cumsum(x, axis=a, dtype=x.dtype)))
with_params(P.cumprod)(_cumulative(lambda x, a: np.cumprod(x, axis=a, dtype=x.dtype)))
with_params(P.cummax)(_cumulative(lambda x, a: np.maximum.accumulate(x, axis=a)))
with_params(P.cummin)(_cumulative(lambda x, a: np.minimum.accumulate(x, axis=a)))
with_params(P.cumlogsumexp)(_cumulative(lambda x, a: np.logaddexp.accumulate(x, axis=a)))


def _sort_key(k):
    k = np.asarray(k)
    if k.dtype in LOW:
        k = k.astype(np.float32)
    if k.dtype.kind == "f":
        k = k + 0.0  # -0.0 sorts equal to 0.0
    return k


@with_params(P.sort)
def _sort(*xs, dimension, is_stable, num_keys):
    if xs[0].ndim == 0 or xs[0].shape[dimension] == 0:
        return list(xs)
    if num_keys == 1:
        order = np.argsort(_sort_key(xs[0]), axis=dimension, kind="stable")
    else:
        keys = [np.moveaxis(_sort_key(k), dimension, -1) for k in xs[:num_keys]]
        order = np.moveaxis(np.lexsort(keys[::-1], axis=-1), -1, dimension)
    return [np.take_along_axis(np.asarray(x), order, axis=dimension) for x in xs]
