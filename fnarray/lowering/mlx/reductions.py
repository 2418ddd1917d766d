"""The mlx backend's rules for the reductions, cumulative reductions and ``sort`` (bitwise reductions as a tree
of halvings, multi-key sort as successive stable argsorts; registered into ``common.RULES``)."""

from __future__ import annotations

import math

import numpy as np

from fnarray.core import dtypes
from fnarray.core import primitives as P
from fnarray.lowering.mlx.common import F32, LOW, RULES, SHAPE_FREE, constant, mx_dtype, mx, rule


def _reduction(name):
    def factory(params, in_avals, out_avals):
        axes = list(params["axes"])
        d = in_avals[0].dtype
        md = mx_dtype(d)
        if not axes:
            return lambda x: x
        fn = getattr(mx, name)
        if d in LOW:
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
            val, shape, md = constant(identity(d), d), out_avals[0].shape, mx_dtype(d)
            return lambda x: mx.full(shape, val, dtype=md)
        fn = getattr(mx, bool_name if d == dtypes.bool_ else name)
        return lambda x: fn(x, axis=axes)
    return factory


RULES[P.reduce_max] = _extremum("max", "any", _lowest)
RULES[P.reduce_min] = _extremum("min", "all", _highest)
# (their functions read the axes alone; an empty axis' fill reads its shape, but a program with an empty value is
# never shared: ``program.Generated.shape_free``)
SHAPE_FREE.update(dict.fromkeys((P.reduce_sum, P.reduce_prod, P.reduce_max, P.reduce_min)))


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
        ident = constant(np.asarray(identity).astype(d), d)  # -1 means all bits set, unsigned too
        return lambda x: _fold(x, axes, x_aval.shape, op, ident)
    return factory


RULES[P.reduce_and] = _bitwise_reduction("all", "bitwise_and", -1)
RULES[P.reduce_or] = _bitwise_reduction("any", "bitwise_or", 0)


def _arg(name):
    def factory(params, in_avals, out_avals):
        axis = params["axes"][0]
        md = mx_dtype(params["index_dtype"])
        fn = getattr(mx, name)  # MLX returns the first extremum, and the first NaN, as the reference
        return lambda x: fn(x, axis=axis).astype(md)
    return factory


RULES[P.argmax] = _arg("argmax")
RULES[P.argmin] = _arg("argmin")


def _cumulative(name):
    def factory(params, in_avals, out_avals):
        axis, reverse = params["axis"], params.get("reverse", False)
        d = in_avals[0].dtype
        md = mx_dtype(d)
        fn = getattr(mx, name)
        if in_avals[0].size == 0:
            return lambda x: x
        if d in LOW:
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
    key_low = [a.dtype in LOW for a in in_avals[:num_keys]]
    key_float = [dtypes.is_float(a.dtype) for a in in_avals[:num_keys]]
    zeros = [constant(0, F32 if low else a.dtype) if fl else None
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
