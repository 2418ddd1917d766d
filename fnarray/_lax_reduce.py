"""``fnarray.lax.reduce`` (``jax.lax.reduce``): a reduction over some dimensions with a given computation.

A single operand whose computation is one of the reducing primitives (``add``, ``mul``, ``max``, ``min``,
``and``, ``or``) is that reduction (``reduce_sum``...); its initial value is combined once with the result where
it is not the monoid's identity, as XLA's Reduce folds it in. Any other computation, and several operands
reduced together (a pytree of operands and one of initial values, as JAX's variadic form), run as a pairwise
tree over the reduced elements: ``ceil(log2(n))`` elementwise calls of ``computation`` on halves of the
operands, then one with the initial values. As in JAX, the result is defined for an associative and
commutative computation. Sits above ``core/`` because it uses the namespace's ``moveaxis``/``reshape``.
"""

from __future__ import annotations

import math

import numpy as np

from fnarray import tree_util
from fnarray.core import dtypes
from fnarray.core import lax as _lax
from fnarray.core import primitives as P
from fnarray.core.avals import get_aval
from fnarray.core.errors import ShapeError, check_callable
from fnarray.core.lax_windows import binary_primitive
from fnarray.core.tracing import is_scalar

__all__ = ["reduce"]

_REDUCERS = {P.add: _lax.reduce_sum, P.mul: _lax.reduce_prod, P.max_p: _lax.reduce_max, P.min_p: _lax.reduce_min,
             P.and_p: _lax.reduce_and, P.or_p: _lax.reduce_or}


def _identity(prim, d):
    if prim is P.add or prim is P.or_p:
        return 0 if d != np.bool_ else False
    if prim is P.mul:
        return 1
    if prim is P.and_p:
        return True if d == np.bool_ else -1 if dtypes.is_int(d) and dtypes.iinfo(d).min < 0 else dtypes.iinfo(d).max
    lowest = prim is P.max_p
    if d == np.bool_:
        return not lowest
    if dtypes.is_int(d):
        return dtypes.iinfo(d).min if lowest else dtypes.iinfo(d).max
    return -np.inf if lowest else np.inf


def _is_identity(init, prim, d) -> bool:
    if not (is_scalar(init) or isinstance(init, np.ndarray)) or np.ndim(init) != 0:
        return False
    return bool(np.asarray(init) == np.asarray(_identity(prim, d)))


def _dimensions(dimensions, ndim):
    try:
        dims = tuple(int(a) for a in dimensions)
    except TypeError:
        raise TypeError(f"reduce: dimensions must be a sequence of ints, got {dimensions!r}") from None
    if any(not 0 <= a < ndim for a in dims) or len(set(dims)) != len(dims):
        raise ShapeError(f"reduce: dimensions {dims} must be distinct dimensions of the operands' rank {ndim} "
                         f"(0 to {ndim - 1}; negative values are not accepted, as in jax.lax.reduce)")
    return dims


def _tree_fold(xs, inits, computation, tree, dims, shape):
    """The general form: pairwise halves of the reduced elements, then the initial values, once."""
    import fnarray.numpy as fnp  # noqa: PLC0415 (the namespace sits above this module's imports at load)
    kept = tuple(n for i, n in enumerate(shape) if i not in dims)
    n = math.prod(shape[i] for i in dims)
    if n == 0:
        return tree_util.tree_unflatten(tree, [_lax.broadcast_in_dim(fnp.asarray(v, dtype=x.dtype), kept, ())
                                               for v, x in zip(inits, xs, strict=True)])
    acc = [fnp.reshape(fnp.moveaxis(x, dims, tuple(range(len(dims)))), (n,) + kept) for x in xs]

    def call(a, b):
        out = computation(tree_util.tree_unflatten(tree, a), tree_util.tree_unflatten(tree, b))
        leaves, out_tree = tree_util.tree_flatten(out)
        if out_tree != tree:
            raise TypeError(f"reduce: computation must return the operands' structure {tree}, got {out_tree}")
        return leaves
    while n > 1:
        h = n // 2
        merged = call([x[:h] for x in acc], [x[h:2 * h] for x in acc])
        acc = [fnp.concatenate([m, x[2 * h:]]) if n % 2 else m for m, x in zip(merged, acc, strict=True)]
        n = h + n % 2
    first = [x[0] for x in acc]
    init = [_lax.broadcast_in_dim(fnp.asarray(v, dtype=x.dtype), kept, ()) for v, x in zip(inits, first,
                                                                                         strict=True)]
    return tree_util.tree_unflatten(tree, [fnp.asarray(v).astype(x.dtype) for v, x in
                                           zip(call(init, first), first, strict=True)])


def reduce(operands, init_values, computation, dimensions):
    """Reduce ``operands`` over ``dimensions`` with ``computation``, starting from ``init_values`` (as
    ``jax.lax.reduce``).

    Args:
      operands: an array, or a pytree of arrays of one shape (reduced together: JAX's variadic reduce).
      init_values: a scalar, or a pytree of scalars of ``operands``' structure.
      computation: a function of two values of ``operands``' structure returning one; applied elementwise to
        arrays here, so it must be elementwise (and, for the result to be defined, associative and
        commutative, as in JAX). ``fnarray.lax.add``/``mul``/``max``/``min``/``bitwise_and``/``bitwise_or``
        (or the namespace's, or ``operator``'s) on one operand are the reduction primitives.
      dimensions: distinct dimension numbers (non-negative ints) to reduce.
    Returns:
      The reduced value(s), of ``operands``' structure and dtypes, with ``dimensions`` removed.
    Raises:
      TypeError: ``computation`` not callable, ``operands``/``init_values`` structures differ, or
        ``computation`` returns another structure.
      ShapeError: operands of different shapes, or a dimension out of range or repeated.
    """
    check_callable(computation, "reduce", "computation (a function of two values: fnarray.lax.add or your own)")
    xs, tree = tree_util.tree_flatten(operands)
    inits, init_tree = tree_util.tree_flatten(init_values)
    if init_tree != tree:
        raise TypeError(f"reduce: init_values must have the operands' structure {tree}, got {init_tree}")
    import fnarray.numpy as fnp  # noqa: PLC0415 (see _tree_fold)
    xs = [fnp.asarray(x) for x in xs]
    shapes = {tuple(get_aval(x).shape) for x in xs}
    if len(shapes) != 1:
        raise ShapeError(f"reduce: the operands must have one shape, got {sorted(shapes)}")
    shape = shapes.pop()
    dims = _dimensions(dimensions, len(shape))
    if len(xs) == 1:
        d = get_aval(xs[0]).dtype
        prim = binary_primitive(computation, d)
        if prim in _REDUCERS:
            out = _REDUCERS[prim](xs[0], dims)
            if not _is_identity(inits[0], prim, d):
                out = computation(fnp.asarray(inits[0], dtype=d), out)
            return tree_util.tree_unflatten(tree, [out])
    return _tree_fold(xs, inits, computation, tree, dims, shape)
