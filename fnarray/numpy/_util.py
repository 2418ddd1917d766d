"""Shared helpers of the namespace: conversion, promotion, broadcasting, axes."""

from __future__ import annotations

import operator

import numpy as np

from fnarray.core import dtypes, lax
from fnarray.core import primitives as P
from fnarray.core.array import Array
from fnarray.core.avals import get_aval, set_asarray
from fnarray.core.errors import AxisError, DTypeError, ShapeError, type_name
from fnarray.core.shaped import broadcast_same_rank
from fnarray.core.tracing import Tracer, is_scalar

__all__ = ["aval_of", "asarray_internal", "promote", "broadcast_shapes", "broadcast_arrays_",
           "elementwise", "normalize_axis", "normalize_axes", "check_arraylike", "result_aval", "same_dtype"]


aval_of = get_aval  # one definition, in fnarray.core.avals


def check_arraylike(name, *args):
    for a in args:
        if not (isinstance(a, (Array, np.ndarray)) or is_scalar(a)):
            raise TypeError(f"{name} requires arrays or scalars, got {type_name(a)}; convert it first with "
                            "fnarray.numpy.asarray(x) (which also takes JAX, MLX and other arrays)")


#: ``stack(arrays) -> Array``: the namespace's ``stack``, set by ``_manipulation`` when it is imported (a list
#: holding arrays is stacked; ``stack`` itself converts with ``asarray_internal``).
stack = None


def asarray_internal(x, dtype=None, where: str = "asarray"):
    """An ``Array`` (or tracer) from an array, NumPy value, scalar or nested list.

    An explicit 64-bit ``dtype`` while ``config.enable_x64`` is off gives the 32-bit one with JAX's warning
    naming ``where`` (``dtypes.requested``); NumPy 64-bit values become 32-bit silently."""
    if dtype is None and isinstance(x, Array):  # the common case first (every namespace function converts)
        return x
    from fnarray.devices.placement import array_from_numpy
    dtype = dtypes.requested(dtype, where)
    if isinstance(x, Array):
        if dtype is not None and dtype != x.dtype:
            return lax.convert_element_type(x, dtype)
        return x
    if hasattr(x, "__jax_array__"):   # JAX's protocol (a Pallas kernel ref reads its block)
        return asarray_internal(x.__jax_array__(), dtype, where)
    if is_scalar(x):
        d, w = dtypes.dtype_of_scalar(x)
        if dtype is not None:
            d, w = dtype, False
        # int4/uint4 wrap Python ints as JAX does (asarray(20, dtype=int4) is 4); the others raise
        if isinstance(x, int) and not isinstance(x, bool) and dtypes.is_int(d) and not dtypes.is_low_bit(d):
            info = dtypes.iinfo(d)
            if not info.min <= x <= info.max:
                hint = " (the default integer dtype); pass dtype=int64 or uint64" if dtype is None else ""
                raise OverflowError(f"Python int {x} does not fit in {d.name}{hint}")
        return array_from_numpy(np.asarray(x, d), weak_type=w)
    if isinstance(x, (list, tuple)) and _has_array(x):
        return stack([asarray_internal(e, dtype) for e in x])
    try:
        v = np.asarray(x)
    except ValueError as e:  # ragged nesting
        raise ShapeError(f"cannot make an array from a nested sequence of uneven lengths ({e}); every "
                         "row must have the same length") from None
    except OverflowError:
        raise OverflowError("a Python int in this sequence does not fit in 64 bits; fnarray integers are at "
                            "most int64/uint64") from None
    if dtype is not None or isinstance(x, np.ndarray) or dtypes.x64_enabled():
        pass  # an explicit dtype (applied below), a NumPy array's own dtype, or x64's 64-bit defaults
    elif v.dtype == np.float64:
        v = v.astype(np.float32)   # Python floats in lists follow the 32-bit defaults
    elif v.dtype == np.int64:
        v = _int_default(v)
    elif v.dtype == np.complex128:
        v = v.astype(np.complex64)
    if v.dtype.kind in "OUSMm":
        raise DTypeError(f"cannot make an array from {type(x).__name__} of dtype {v.dtype}; "
                         "fnarray arrays hold booleans and numbers")
    if dtype is not None:
        d = dtype
        if isinstance(x, (list, tuple)) and v.dtype != d:
            v = _python_values_as(x, d)
        else:
            v = v.astype(d)
    return array_from_numpy(v)


def _python_values_as(x, d):
    """Python numbers converted to ``d`` by value: one that ``d`` cannot hold raises (as NumPy 2 and JAX do)
    instead of wrapping (``asarray([300], dtype=uint8)`` was 44)."""
    try:
        return np.asarray(x, dtype=d)
    except (OverflowError, ValueError) as e:
        raise type(e)(f"asarray: {e} (the values of the given sequence do not fit the requested dtype "
                      f"{d.name}); pass a dtype that holds them, or convert with .astype after making the "
                      "array to get its wrapping or saturating conversion") from None


set_asarray(asarray_internal)


def _int_default(v):
    info = np.iinfo(np.int32)
    if v.size and (v.max() > info.max or v.min() < info.min):
        raise OverflowError(f"Python int {v.max() if v.max() > info.max else v.min()} does not fit in "
                            "int32, the default integer dtype; pass dtype=int64 (or uint32)")
    return v.astype(np.int32)


def _has_array(x):
    return any(isinstance(e, Array) or (isinstance(e, (list, tuple)) and _has_array(e)) for e in x)


_PY_TYPE_OF_DEFAULT = {False: {dtypes.float32: float, dtypes.int32: int, dtypes.complex64: complex},
                       True: {dtypes.float64: float, dtypes.int64: int, dtypes.complex128: complex}}


def _scalar_to(x, d, weak=False):
    """A Python scalar as a literal of dtype ``d``: kept as a Python scalar (weak) when ``d`` is
    its default dtype, else a NumPy scalar of ``d`` (raising OverflowError if it does not fit).
    For a ``weak`` result the literal stays weak, so that the operation's result is weak too."""
    if isinstance(x, np.generic):
        return x if x.dtype == d else _cast_scalar(x, d)
    dd, _ = dtypes.dtype_of_scalar(x)
    if dd == d:
        return x
    if weak:
        py = _PY_TYPE_OF_DEFAULT[dtypes.x64_enabled()].get(d)
        if py is int:
            dtypes.check_weak_int(x, d)
        if py is not None:
            return py(x)
        return lax.convert_element_type(_cast_scalar(x, d), d, weak_type=True)
    return _cast_scalar(x, d)


def _cast_scalar(x, d):
    if isinstance(x, (int, np.integer)) and not isinstance(x, bool) and dtypes.is_int(d) and not dtypes.is_low_bit(d):
        info = dtypes.iinfo(d)
        if not info.min <= int(x) <= info.max:
            raise dtypes.int_out_of_range(int(x), d)
    if isinstance(x, complex) and not dtypes.is_complex(d):
        raise DTypeError(f"a complex scalar cannot be combined into a {d.name} result")
    return dtypes.scalar_literal(x, d, quiet=True)


def is_weakly_typed(v) -> bool:
    """As JAX's ``dtypes.is_weakly_typed``: a Python int, float or complex (not bool), or a weakly typed array."""
    if isinstance(v, (int, float, complex)):
        return not isinstance(v, bool)
    return isinstance(v, (Array, Tracer)) and aval_of(v).weak_type


def result_aval(*args):
    return dtypes.result_type(*[(a.dtype, a.weak_type) for a in map(aval_of, args)])


def promote(name, *args, to=None):
    """Convert ``args`` to one dtype (JAX's promotion with weak types); scalars stay literals.

    Returns the list of converted args. ``to`` overrides the result dtype.
    """
    if to is None and same_dtype(args) is not None:
        return list(args)  # arrays of one dtype: nothing converts (the loop below changes only a dtype)
    avals = [aval_of(a) for a in args]
    if to is None:
        d, weak = dtypes.result_type(*[(a.dtype, a.weak_type) for a in avals])
    else:
        d, weak = dtypes.canonicalize(to), False
    out = []
    for a, av in zip(args, avals, strict=True):
        if is_scalar(a):
            out.append(_scalar_to(a, d, weak))
        elif isinstance(a, np.ndarray):
            out.append(lax.convert_element_type(asarray_internal(a), d, weak_type=weak))
        elif av.dtype != d:
            out.append(lax.convert_element_type(a, d, weak_type=weak))
        else:
            out.append(a)
    return out


def broadcast_shapes(*shapes, name="broadcast"):
    """NumPy's broadcasting of shapes; ``ShapeError`` naming every shape when they do not fit."""
    if len(shapes) == 2 and len(shapes[0]) == len(shapes[1]):  # two of one rank (the eager hot path: no sets)
        out = broadcast_same_rank(shapes[0], shapes[1])
        if out is not None:
            return out  # (else they do not fit: the general loop below raises)
    nd = max((len(s) for s in shapes), default=0)
    out = []
    for i in range(nd):
        sizes = {s[i - nd + len(s)] for s in shapes if i - nd + len(s) >= 0}
        sizes.discard(1)
        if len(sizes) > 1:
            raise ShapeError(f"{name}: shapes {', '.join(str(tuple(s)) for s in shapes)} cannot be "
                             "broadcast together (sizes must match or be 1, aligned from the right)")
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


def broadcast_arrays_(args, name="broadcast"):
    """Broadcast arrays to one shape; rank-0 operands and scalars are left as they are."""
    shapes = [aval_of(a).shape for a in args]
    shape = broadcast_shapes(*shapes, name=name)
    return [a if (s == shape or s == ()) else lax.broadcast_to_rank_shape(a, shape)
            for a, s in zip(args, shapes, strict=True)], shape


def elementwise(name, fn, *args, check=None, bool_fn=None):
    """Promote, broadcast and apply the lax function ``fn``; ``check(dtype)`` may raise.

    ``bool_fn``, if given, replaces ``fn`` when the promoted dtype is bool (``add`` is ``or``).
    """
    if len(args) == 2:
        fast = _fast_binary(args[0], args[1])
        if fast is not None:
            d = fast[0].aval.dtype if isinstance(fast[0], Array) else fast[1].aval.dtype
            if check is not None:
                check(d)
            return (bool_fn if bool_fn is not None and d == dtypes.bool_ else fn)(*fast)
        d = same_dtype(args)
        if d is not None and not args[0].aval.weak_type and not args[1].aval.weak_type:
            # Two strong arrays of one dtype and different shapes (``x - x.max(axis, keepdims=True)``): nothing to
            # promote, so only the broadcast below (what the general path does for them, without its passes).
            if check is not None:
                check(d)
            x, y = args
            sx, sy = x.aval.shape, y.aval.shape
            shape = broadcast_same_rank(sx, sy) if len(sx) == len(sy) else None
            if shape is not None:   # one rank (``broadcast_arrays_``'s passes inline: ~10 calls less an operation)
                dims = tuple(range(len(shape)))
                if sx != shape:
                    x = P.broadcast_in_dim.bind(x, shape=shape, broadcast_dimensions=dims)
                if sy != shape:
                    y = P.broadcast_in_dim.bind(y, shape=shape, broadcast_dimensions=dims)
                args = (x, y)
            else:
                args, _ = broadcast_arrays_(args, name)
            return (bool_fn if bool_fn is not None and d == dtypes.bool_ else fn)(*args)
    elif len(args) == 1 and isinstance(args[0], Array):
        av = args[0].aval
        if not av.weak_type and av.dtype in _SELF_PROMOTING:  # one strong array: nothing to promote or keep weak
            d = av.dtype
            if check is not None:
                check(d)
            return (bool_fn if bool_fn is not None and d == dtypes.bool_ else fn)(args[0])
    check_arraylike(name, *args)
    _, weak = result_aval(*args)
    args = promote(name, *args)
    d = aval_of(args[0]).dtype
    if check is not None:
        check(d)
    if bool_fn is not None and d == dtypes.bool_:
        fn = bool_fn
    if len(args) > 1:
        args, shape = broadcast_arrays_(args, name)
        if shape == () and all(is_scalar(a) for a in args):
            args = [asarray_internal(args[0])] + list(args[1:])
    elif is_scalar(args[0]):
        args = [asarray_internal(args[0])]
    out = fn(*args)
    if weak and isinstance(out, Array) and out.aval.dtype == d and not out.aval.weak_type:
        # A composite mixed in strong constants; the result of weak operands stays weak (as JAX).
        out = lax.convert_element_type(out, d, weak_type=True)
    return out


_PY_OPERANDS = (float, int)

# The dtypes that promote to themselves with x64 on or off (a 64-bit array made under ``enable_x64`` and used
# outside it promotes to 32 bits).
_SELF_PROMOTING = frozenset(d for d in dtypes.ALL_DTYPES if d.itemsize < 8 or dtypes.is_complex(d) and d.itemsize == 8)


def same_dtype(args):
    """The dtype of ``args`` where they are all arrays (or tracers) of one dtype that promotes to itself, whatever
    their weak types: then ``promote`` converts none of them; else ``None``."""
    d = None
    for a in args:
        if not isinstance(a, Array):
            return None
        ad = a.aval.dtype
        if d is None:
            if ad not in _SELF_PROMOTING:
                return None
            d = ad
        elif ad != d:
            return None
    return d


def _fast_binary(a, b):
    """The common cases of promotion without the general machinery (the eager hot path):
    two arrays of one dtype and shape, or an array with a Python float/int it absorbs
    (``dtypes.scalar_operand_dtype``, whose rule ``Array``'s fast operators share)."""
    ta, tb = type(a), type(b)
    if ta in _PY_OPERANDS and isinstance(b, Array):
        a, b, ta, tb, swap = b, a, tb, ta, True
    else:
        swap = False
    if not isinstance(a, Array):
        return None
    av = a.aval
    if av.weak_type:
        return None  # weak results: the general path keeps them weak
    if tb in _PY_OPERANDS:
        rule = dtypes.scalar_operand_dtype(av.dtype, tb)
        if rule is None:
            return None  # a weak result, or a range check: general path
        if tb is int and rule[1]:
            dtypes.check_weak_int(b, rule[0])
        lit = b if rule[1] else dtypes.scalar_literal(b, rule[0])
        return (lit, a) if swap else (a, lit)
    if isinstance(b, Array):
        bv = b.aval
        if av.dtype == bv.dtype and av.shape == bv.shape and av.weak_type == bv.weak_type:
            return a, b
    return None


def normalize_axis(axis, ndim, name="axis"):
    """An axis in ``[-ndim, ndim)`` as a non-negative int; ``AxisError`` (a ``ShapeError``) otherwise."""
    try:
        a = operator.index(axis)  # not int(): an axis of 1.5 is an error (NumPy, JAX), not axis 1
    except TypeError:
        hint = ("; an axis cannot be a traced value: mark it static (jit's static_argnums / static_argnames)"
                if isinstance(axis, Tracer) else "")
        raise TypeError(f"{name} must be an int, got {type(axis).__name__} {axis!r}; axes are Python ints "
                        f"(or tuples of them){hint}") from None
    if not -ndim <= a < ndim:
        raise AxisError(f"{name} {axis} is out of bounds for an array of rank {ndim}; "
                        f"give an axis in [{-ndim}, {ndim})")
    return a % ndim if ndim else 0


def normalize_axes(axis, ndim, name="axis"):
    """``None`` -> all axes; int or tuple -> sorted non-negative tuple (duplicates raise)."""
    if axis is None:
        return tuple(range(ndim))
    if type(axis) is int and -ndim <= axis < ndim:  # one axis in range (the common case)
        return (axis % ndim,)
    axes = (axis,) if not isinstance(axis, (tuple, list)) else tuple(axis)
    out = tuple(normalize_axis(a, ndim, name) for a in axes)
    if len(set(out)) != len(out):
        twice = sorted({a for a in out if out.count(a) > 1})
        raise ShapeError(f"{name}={axis!r} names {name} {', '.join(map(str, twice))} more than once (negative "
                         f"axes count from the end of the {ndim} axes); give each axis once")
    return tuple(sorted(out))
