"""Array creation functions of the array API standard (2024.12) and NumPy's common extras.

Defaults are 32-bit (docs/design.md): ``arange(5)`` is ``int32``, ``zeros(3)`` is
``float32``. ``device`` places the result (committed) on a device.
"""

from __future__ import annotations

import math
import operator

import numpy as np

from fnarray.core import dtypes, lax
from fnarray.core.array import Array
from fnarray.core.errors import ShapeError
from fnarray.core.tracing import Tracer, is_scalar
from fnarray.numpy._util import asarray_internal, aval_of, is_weakly_typed

__all__ = ["asarray", "array", "zeros", "ones", "full", "empty", "zeros_like", "ones_like", "full_like",
           "empty_like", "arange", "linspace", "logspace", "eye", "identity", "meshgrid", "tril", "triu",
           "from_dlpack", "diag", "diagflat", "tri", "indices"]


def static_sizes(sizes, name) -> None:
    """Raise ``name``'s ``ConcretizationTypeError`` (a ``TypeError``, which JAX raises there) where ``sizes`` (a shape,
    or the counts that make one) holds a traced value: the result's shape must be known while tracing."""
    for s in sizes:
        if isinstance(s, Tracer):  # names the user's line, and points to static_argnums
            s._concrete(f"{name}: a shape from a traced value, {tuple(sizes)!r} (array shapes must be known when "
                        "tracing)")


def _shape(shape, name):
    if isinstance(shape, (int, np.integer, Array)):
        shape = (shape,)
    for s in shape if isinstance(shape, (tuple, list)) else ():
        if isinstance(s, Tracer):  # (static_sizes' error, its loop inline: full is a hot path)
            static_sizes(shape, name)
    try:
        if isinstance(shape, str):
            raise TypeError(shape)
        shape = tuple(operator.index(s) for s in shape)
    except (TypeError, ValueError):
        raise TypeError(f"{name}: shape must be an int or a tuple of ints, got {shape!r}") from None
    if any(s < 0 for s in shape):
        raise ShapeError(f"{name}: negative dimensions are not allowed, got {shape}")
    return shape


def _place(x, device):
    if device is None:
        return x
    from fnarray.devices.placement import device_put
    return device_put(x, device)


def asarray(obj, /, dtype=None, device=None, copy=None):
    """Convert ``obj`` (array, NumPy array, scalar, nested sequence, DLPack capsule holder) to an ``Array``.

    Mirrors the array API ``asarray`` and ``jax.numpy.asarray``. Python floats become ``float32`` and ints
    ``int32`` (weak-typed when a bare scalar); NumPy arrays keep their dtype, except that while
    ``fnarray.config.enable_x64`` is off (the default, as in JAX) 64-bit ones become 32-bit (``float64`` →
    ``float32``, silently) and an explicit 64-bit ``dtype`` gives the 32-bit one with JAX's ``UserWarning``.
    ``copy=False`` raises when a copy is needed.

    Raises ``DTypeError`` for objects that hold no numbers, ``OverflowError`` for
    Python ints outside ``int32`` without an explicit dtype.
    """
    if copy is False and not isinstance(obj, Array):
        if hasattr(obj, "__dlpack__") and not isinstance(obj, np.ndarray) and dtype is None:
            return from_dlpack(obj, device=device, copy=False)  # shares the producer's memory
        raise ValueError("asarray(copy=False) cannot wrap a non-fnarray object without a copy; "
                         "fnarray arrays own their buffers (only DLPack producers such as torch and jax "
                         "arrays can be shared, through fnarray.numpy.from_dlpack)")
    if not isinstance(obj, (Array, np.ndarray, list, tuple)) and not is_scalar(obj) and hasattr(obj, "__dlpack__"):
        obj = np.from_dlpack(obj)
    elif not isinstance(obj, (Array, np.ndarray, list, tuple)) and not is_scalar(obj) and hasattr(obj, "__array__"):
        obj = np.asarray(obj)
    x = asarray_internal(obj, dtype)
    return _place(x, device)


def array(obj, dtype=None, copy=True, ndmin: int = 0, device=None):
    """``numpy.array``: like ``asarray``, with ``ndmin`` leading unit dimensions (not in the array API).

    Differences from NumPy: the dtype rules of ``asarray`` (Python floats ``float32``, ints
    ``int32``); ``copy`` is ignored, as arrays are immutable; no ``order``/``subok``.

    Raises:
      The errors of ``asarray``.
    """
    x = asarray(obj, dtype=dtype, device=device)
    if x.ndim < ndmin:
        x = lax.reshape(x, (1,) * (ndmin - x.ndim) + x.shape)
    return x


def _default_float(dtype, where):
    return dtypes.requested(dtype, where) if dtype is not None else dtypes.default_float()


def full(shape, fill_value, dtype=None, *, device=None):
    """An array of ``shape`` filled with ``fill_value`` (array API ``full``; ``numpy.full``).

    Differences from NumPy: without ``dtype``, a Python float gives ``float32`` and a Python int ``int32`` (NumPy:
    ``float64``/``int64``); an array ``fill_value`` keeps its dtype and may be traced. Without ``dtype``, a Python
    scalar (not bool) or weakly typed fill gives a weakly typed array, as ``jnp.full``.

    Args:
      shape: an int or a tuple of non-negative ints (static).
      fill_value: a scalar or a 0-d array (cast to ``dtype``; a float into an integer dtype as ``astype``:
        truncated, saturated, NaN -> 0, as JAX's).
      dtype: the result dtype; default the fill value's.
      device: a ``Device`` or a string; the result is committed there (default: the default device, uncommitted).

    Returns:
      An array of ``shape`` and ``dtype``.

    Raises:
      TypeError: ``shape`` is not an int or a tuple of ints.
      ShapeError: a negative dimension.
      DTypeError: a ``dtype`` fnarray does not have.
      OverflowError: a Python int that does not fit ``dtype``.
    """
    out = _full(shape, fill_value, dtype, device)
    return _weak_like(out, dtype is None and is_weakly_typed(fill_value))


def _weak_like(out, weak: bool):
    """``out`` weakly typed where ``weak`` (a Python scalar's fill without a dtype: ``jnp.full(2, 1.0)`` is weak)."""
    return lax.convert_element_type(out, aval_of(out).dtype, weak_type=True) if weak else out


def _full(shape, fill_value, dtype, device):
    shape = _shape(shape, "full")
    dtype_given = dtype is not None
    if dtype is None:
        a = aval_of(fill_value) if not isinstance(fill_value, (list, tuple)) else None
        dtype = a.dtype if a is not None else dtypes.default_float()
    d = dtypes.requested(dtype, "full") if dtype_given else dtypes.canonicalize(dtype)
    if isinstance(fill_value, int) and not isinstance(fill_value, bool) and dtypes.is_int(d):
        _check_int_bounds("full", (fill_value,), d, dtype_given)
    if isinstance(fill_value, Array):
        v = lax.convert_element_type(fill_value, d)
        return _place(lax.broadcast_to_rank_shape(v, shape), device)
    if device is not None and not isinstance(fill_value, (list, tuple)):
        # Filled on the device itself (a committed scalar broadcast there), not made on the default
        # device and copied over: no host-sized intermediate, and a size check against the right device.
        v = _place(lax.convert_element_type(lax.full((), fill_value, d), d), device)
        return lax.broadcast_to_rank_shape(v, shape)
    return _place(lax.full(shape, fill_value, d), device)


def zeros(shape, dtype=None, *, device=None):
    """An array of zeros (array API ``zeros``; ``numpy.zeros``).

    Differences from NumPy: the default dtype is ``float32`` (NumPy: ``float64``).

    Args:
      shape: an int or a tuple of non-negative ints (static).
      dtype: the result dtype; default ``float32``.
      device: a ``Device`` or a string; the result is committed there (default: the default device, uncommitted).

    Returns:
      An array of ``shape`` and ``dtype``.

    Raises:
      TypeError: ``shape`` is not an int or a tuple of ints.
      ShapeError: a negative dimension.
      DTypeError: a ``dtype`` fnarray does not have.
    """
    return full(shape, 0, dtype=_default_float(dtype, "zeros"), device=device)


def ones(shape, dtype=None, *, device=None):
    """An array of ones (array API ``ones``; ``numpy.ones``).

    Differences from NumPy: the default dtype is ``float32`` (NumPy: ``float64``).

    Args:
      shape: an int or a tuple of non-negative ints (static).
      dtype: the result dtype; default ``float32``.
      device: a ``Device`` or a string; the result is committed there (default: the default device, uncommitted).

    Returns:
      An array of ``shape`` and ``dtype``.

    Raises:
      TypeError: ``shape`` is not an int or a tuple of ints.
      ShapeError: a negative dimension.
      DTypeError: a ``dtype`` fnarray does not have.
    """
    return full(shape, 1, dtype=_default_float(dtype, "ones"), device=device)


def empty(shape, dtype=None, *, device=None):
    """An array of ``shape`` (array API ``empty``; ``numpy.empty``).

    Differences from NumPy: the values are zeros, not uninitialized memory (immutable arrays need some values); the
    default dtype is ``float32`` (NumPy: ``float64``).

    Args:
      shape: an int or a tuple of non-negative ints (static).
      dtype: the result dtype; default ``float32``.
      device: a ``Device`` or a string; the result is committed there (default: the default device, uncommitted).

    Returns:
      An array of zeros of ``shape`` and ``dtype``.

    Raises:
      TypeError: ``shape`` is not an int or a tuple of ints.
      ShapeError: a negative dimension.
      DTypeError: a ``dtype`` fnarray does not have.
    """
    return zeros(shape, dtype=dtype, device=device)


def _like(x, dtype, shape, where):
    a = aval_of(asarray_internal(x) if not isinstance(x, Array) else x)
    return (a.shape if shape is None else shape), (a.dtype if dtype is None else dtypes.requested(dtype, where))


def _like_device(x, dtype, device):
    """``device``, else the device JAX's ``full_like`` takes from ``x`` (``placement.like_device``)."""
    if device is not None or not isinstance(x, Array):
        return device
    from fnarray.devices.placement import like_device
    return like_device(x, dtype is None and is_weakly_typed(x))


def full_like(x, /, fill_value, dtype=None, *, device=None, shape=None):
    """An array like ``x`` (shape, dtype) filled with ``fill_value`` (array API ``full_like``; ``numpy.full_like``).

    Differences from NumPy: none beyond the ``device`` argument; no ``order``/``subok``. Like a Python scalar (or
    a weakly typed array) without ``dtype``, the result is weakly typed, as JAX's.

    Args:
      x: an array (or array-like) giving the default shape and dtype.
      fill_value: a scalar or 0-d array, cast to the dtype.
      dtype: the result dtype; default ``x``'s.
      shape: the result shape; default ``x``'s.
      device: a ``Device`` or a string; the result is committed there (default: ``x``'s device, committed, where
        ``x`` is an array committed there and the result is not weakly typed, as JAX's; else the default device,
        uncommitted).

    Returns:
      An array filled with ``fill_value``.

    Raises:
      TypeError: ``shape`` is not an int or a tuple of ints.
      ShapeError: a negative dimension.
      DTypeError: a ``dtype`` fnarray does not have.
    """
    s, d = _like(x, dtype, shape, "full_like")
    return _weak_like(full(s, fill_value, dtype=d, device=_like_device(x, dtype, device)),
                      dtype is None and is_weakly_typed(x))


def zeros_like(x, /, dtype=None, *, device=None, shape=None):
    """Zeros shaped like ``x`` (array API ``zeros_like``; ``numpy.zeros_like``).

    Differences from NumPy: none beyond the ``device`` argument; no ``order``/``subok``. Like a Python scalar (or
    a weakly typed array) without ``dtype``, the result is weakly typed, as JAX's.

    Args:
      x: an array (or array-like) giving the default shape and dtype.
      dtype: the result dtype; default ``x``'s.
      shape: the result shape; default ``x``'s.
      device: a ``Device`` or a string; the result is committed there (default: as ``full_like``'s).

    Returns:
      An array of zeros.

    Raises:
      TypeError: ``shape`` is not an int or a tuple of ints.
      ShapeError: a negative dimension.
      DTypeError: a ``dtype`` fnarray does not have.
    """
    s, d = _like(x, dtype, shape, "zeros_like")
    return _weak_like(full(s, 0, dtype=d, device=_like_device(x, dtype, device)), dtype is None and is_weakly_typed(x))


def ones_like(x, /, dtype=None, *, device=None, shape=None):
    """Ones shaped like ``x`` (array API ``ones_like``; ``numpy.ones_like``).

    Differences from NumPy: none beyond the ``device`` argument; no ``order``/``subok``. Like a Python scalar (or
    a weakly typed array) without ``dtype``, the result is weakly typed, as JAX's.

    Args:
      x: an array (or array-like) giving the default shape and dtype.
      dtype: the result dtype; default ``x``'s.
      shape: the result shape; default ``x``'s.
      device: a ``Device`` or a string; the result is committed there (default: as ``full_like``'s).

    Returns:
      An array of ones.

    Raises:
      TypeError: ``shape`` is not an int or a tuple of ints.
      ShapeError: a negative dimension.
      DTypeError: a ``dtype`` fnarray does not have.
    """
    s, d = _like(x, dtype, shape, "ones_like")
    return _weak_like(full(s, 1, dtype=d, device=_like_device(x, dtype, device)), dtype is None and is_weakly_typed(x))


def empty_like(x, /, dtype=None, *, device=None, shape=None):
    """An array shaped like ``x`` (array API ``empty_like``; ``numpy.empty_like``).

    Differences from NumPy: the values are zeros, not uninitialized memory.

    Args:
      x: an array (or array-like) giving the default shape and dtype.
      dtype: the result dtype; default ``x``'s.
      shape: the result shape; default ``x``'s.
      device: a ``Device`` or a string; the result is committed there (default: the default device, uncommitted).

    Returns:
      An array of zeros.

    Raises:
      TypeError: ``shape`` is not an int or a tuple of ints.
      ShapeError: a negative dimension.
      DTypeError: a ``dtype`` fnarray does not have.
    """
    return zeros_like(x, dtype=dtype, device=device, shape=shape)


def _static(v, name):
    if isinstance(v, Tracer):
        v._concrete(f"{name}'s bounds from a traced value (the output shape depends on them; pass Python "
                    "numbers)")
    if isinstance(v, Array):
        return v.item()
    return v


def arange(start, /, stop=None, step=None, dtype=None, *, device=None):
    """Evenly spaced values in ``[start, stop)`` (array API ``arange``; ``numpy.arange``).

    Differences from NumPy: integer arguments give ``int32`` and float ones ``float32`` (NumPy:
    ``int64``/``float64``); the bounds must be concrete (the length decides the shape); float values are ``start + i
    * step`` in ``dtype``.

    Args:
      start: the first value (or ``stop`` when ``stop`` is None).
      stop: the end (excluded).
      step: the spacing (non-zero).
      dtype: the result dtype.
      device: a ``Device`` or a string; the result is committed there (default: the default device, uncommitted).

    Returns:
      A 1-d array of ``max(0, ceil((stop - start) / step))`` elements.

    Raises:
      ValueError: ``step == 0``.
      TypeError: a complex bound or step.
      ConcretizationError: a traced bound.
      OverflowError: an integer result does not fit in the dtype (``arange(2**31 - 3, 2**31 + 2)``
        in ``int32``), as ``asarray(2**40)``; pass ``dtype=int64`` for such ranges.
    """
    step = 1 if step is None else step
    start, stop, step = (_static(v, "arange") for v in (start, stop, step))
    if any(isinstance(v, (complex, np.complexfloating)) for v in (start, stop, step)):
        raise TypeError(f"arange: bounds and step must be real numbers, got {(start, stop, step)!r} (JAX 0.10 "
                        "refuses complex ones too); build the real and imaginary parts with arange and combine them")
    if stop is None:
        start, stop = 0, start
    if step == 0:
        raise ValueError("arange: step must not be zero")
    d_given = dtype is not None
    if dtype is None:
        if all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in (start, stop, step)):
            dtype = dtypes.default_int()
        else:
            dtype = dtypes.default_float()
    d = dtypes.requested(dtype, "arange") if d_given else dtype
    n = max(0, math.ceil((stop - start) / step))
    if dtypes.is_int(d):
        if n:
            # The ends in exact Python ints: int64 arithmetic and the cast below would wrap silently.
            _check_int_bounds("arange", (int(start), int(start) + (n - 1) * int(step)), d, d_given)
        if n > _HOST_ARANGE:
            x = _int_range(d, n, start, step)
        else:
            vals = np.arange(n, dtype=np.int64) * step + start
            x = asarray_internal(vals.astype(d))
    else:
        idx = lax.iota(d, n) if n else asarray_internal(np.zeros(0, d))
        x = lax.add(lax.mul(idx, np.asarray(step, d)[()]), np.asarray(start, d)[()]) if n else idx
    return _place(x, device)


# Longer integer ranges are counted on the device: built on the host they took three int64 temporaries
# (arange(2**31 - 1) needed ~50 GiB for an 8 GiB result) and became a constant of the program under jit.
_HOST_ARANGE = 1 << 16


def _int_range(d, n, start, step):
    """``start + i * step`` for ``i < n`` in ``d``'s wrapping integer arithmetic: exact, because every
    value fits in ``d`` (``_check_int_bounds`` ran)."""
    x = lax.iota(d, n)
    if step != 1:
        x = lax.mul(x, np.asarray(step).astype(d)[()])
    if start != 0:
        x = lax.add(x, np.asarray(start).astype(d)[()])
    return x


def _check_int_bounds(name, values, d, dtype_given):
    """Raise the ``OverflowError`` of ``asarray(2**40)`` when a creation function's integer values
    do not fit in ``d`` (NumPy would wrap them around silently)."""
    if dtypes.is_low_bit(d):
        return   # int4/uint4 wrap, as in JAX (full(3, 20, dtype=int4) is [4, 4, 4])
    info = dtypes.iinfo(d)
    for v in values:
        if not info.min <= v <= info.max:
            hint = "" if dtype_given else " (the default integer dtype); pass dtype=int64 or uint64"
            raise OverflowError(f"{name}: Python int {v} does not fit in {d.name}{hint}; expected values in "
                                f"[{info.min}, {info.max}]")


def _linspace_arrays(start, stop, num, dtype, endpoint):
    """``linspace`` with array bounds (traceable: differentiable in, and mappable over, the bounds).

    The result has shape ``(num,) + broadcast(start, stop).shape``, as ``jax.numpy.linspace`` with ``axis=0``.
    """
    from fnarray.numpy._elementwise import add, divide, multiply, subtract
    from fnarray.numpy._manipulation import broadcast_arrays, where
    lo, hi = (asarray_internal(v) for v in (start, stop))
    if dtype is None:
        d, _ = dtypes.result_type((aval_of(lo).dtype, False), (aval_of(hi).dtype, False))
        d = d if dtypes.is_inexact(d) else dtypes.default_float()
    else:
        d = dtypes.requested(dtype, "linspace")
    lo, hi = broadcast_arrays(lax.convert_element_type(lo, d), lax.convert_element_type(hi, d))
    rest = tuple(lo.shape)
    step = lax.iota(dtypes.int32, (num,) + rest, 0)
    div = num - 1 if endpoint else num
    frac = divide(lax.convert_element_type(step, d), max(div, 1))
    out = add(lo, multiply(subtract(hi, lo), frac))
    if endpoint and num > 1:
        out = where(lax.eq(step, np.int32(num - 1)), hi, out)  # the last value is exactly ``stop``
    return lax.convert_element_type(out, d)


def sample_count(num, who: str) -> int:
    """``num`` of ``linspace``/``logspace``/``geomspace`` as a Python int: an integer (NumPy's and JAX's rule: a
    float count, 5.0 or 5.7, raises ``TypeError``, never truncated) and >= 0 (``ValueError``); a traced count raises
    ``ConcretizationTypeError``, as JAX."""
    static_sizes((num,), f"{who}'s num")
    try:
        num = operator.index(num)
    except TypeError:
        raise TypeError(f"{who}: num must be an integer, got {num!r} of type {type(num).__name__}; pass "
                        f"int(num) if a whole float was meant") from None
    if num < 0:
        raise ValueError(f"{who}: num must be >= 0, got {num}")
    return num


def _linspace(start, stop, num, dtype, device, endpoint):
    """The values of ``linspace`` along a new leading axis."""
    num = sample_count(num, "linspace")
    if isinstance(start, (Array, np.ndarray)) or isinstance(stop, (Array, np.ndarray)):
        return _place(_linspace_arrays(start, stop, num, dtype, endpoint), device)
    start, stop = _static(start, "linspace"), _static(stop, "linspace")
    if dtype is None:
        dtype = dtypes.default_complex() if isinstance(start, complex) or isinstance(stop, complex) else dtypes.default_float()
    d = dtypes.requested(dtype, "linspace")
    vals = np.linspace(start, stop, num, endpoint=endpoint, dtype=np.complex128 if dtypes.is_complex(d)
                       else np.float64)
    if dtypes.is_int(d) and vals.size:
        _check_int_bounds("linspace", (math.floor(vals.min()), math.ceil(vals.max())), d, True)
    return _place(asarray_internal(vals.astype(d)), device)


def linspace(start, stop, /, num=50, endpoint=True, retstep=False, dtype=None, axis=0, *, device=None):
    """``num`` evenly spaced values from ``start`` to ``stop`` (array API ``linspace``; ``numpy.linspace``).

    Differences from NumPy: the default dtype is ``float32`` (``complex64`` for complex bounds; NumPy: ``float64``);
    array bounds (which may be traced, so ``grad``/``vmap`` reach them)
    give shape ``(num,) + bounds' shape``, as ``jax.numpy.linspace``; Python-number bounds
    are computed in float64 and rounded to ``dtype``.

    Args:
      start, stop: the end points (Python numbers, or arrays).
      num: the number of values (>= 0; default 50, as NumPy and JAX; the array API requires it).
      endpoint: include ``stop``.
      retstep: also return the spacing (``(samples, step)``, ``step`` a 0-d array or of the bounds' shape).
      dtype: the result dtype.
      axis: where the samples' axis goes in the result, for array bounds (NumPy's ``axis``).
      device: a ``Device`` or a string; the result is committed there (default: the default device, uncommitted).

    Returns:
      An array of ``num`` values (times the bounds' shape).

    Raises:
      ValueError: ``num < 0``.
      TypeError: ``num`` is not an integer (a float count, as NumPy and JAX).
    """
    out = _linspace(start, stop, num, dtype, device, endpoint)
    if axis != 0:
        from fnarray.numpy._manipulation import moveaxis
        out = moveaxis(out, 0, axis)
    if not retstep:
        return out
    div = (num - 1) if endpoint else num
    delta = lax.sub(asarray_internal(stop, dtype=out.dtype), asarray_internal(start, dtype=out.dtype))
    if div > 0:
        step = lax.div(delta, np.asarray(div, out.dtype)[()])
    else:  # NumPy: NaN
        step = lax.mul(delta, np.asarray(np.nan, out.dtype)[()])
    return out, step


def logspace(start, stop, num=50, endpoint=True, base=10.0, dtype=None, device=None):
    """``base ** linspace(start, stop, num)`` (``numpy.logspace``; not in the array API).

    Differences from NumPy: the default dtype is ``float32`` (NumPy: ``float64``); array bounds are traceable, as in
    ``linspace``.

    Args:
      start, stop: the exponents' end points.
      num: the number of values.
      endpoint: include ``stop``.
      base: the base.
      dtype: the result dtype.
      device: a ``Device`` or a string; the result is committed there (default: the default device, uncommitted).

    Returns:
      An array of ``num`` values.

    Raises:
      ValueError: ``num < 0``.
      TypeError: ``num`` is not an integer.
    """
    num = sample_count(num, "logspace")
    if isinstance(start, (Array, np.ndarray)) or isinstance(stop, (Array, np.ndarray)):
        from fnarray.numpy._elementwise import power
        exps = _linspace_arrays(start, stop, num, dtype, endpoint)
        return _place(lax.convert_element_type(power(base, exps), exps.dtype), device)
    d = dtypes.requested(dtype, "logspace") if dtype is not None else dtypes.default_float()
    vals = np.logspace(_static(start, "logspace"), _static(stop, "logspace"), num, endpoint=endpoint, base=base)
    return _place(asarray_internal(vals.astype(d)), device)


def eye(n_rows, n_cols=None, /, k=0, dtype=None, *, device=None):
    """A matrix with ones on the ``k``-th diagonal (array API ``eye``; ``numpy.eye``).

    Differences from NumPy: the default dtype is ``float32`` (NumPy: ``float64``).

    Args:
      n_rows, n_cols: the shape (``n_cols`` defaults to ``n_rows``).
      k: the diagonal (> 0 above, < 0 below).
      dtype: the result dtype; default ``float32``.
      device: a ``Device`` or a string; the result is committed there (default: the default device, uncommitted).

    Returns:
      An array of shape ``(n_rows, n_cols)``.

    Raises:
      TypeError: a non-integer ``k``, ``n_rows`` or ``n_cols`` (``eye(2.0)``, as NumPy and JAX).
      ShapeError: a negative ``n_rows`` or ``n_cols``.
    """
    n_rows, n_cols = _shape((n_rows, n_rows if n_cols is None else n_cols), "eye")
    d = _default_float(dtype, "eye")
    # A diagonal past either edge is empty: clamping keeps huge k within int32 index math.
    k = max(-n_rows, min(operator.index(k), n_cols))
    r = lax.iota(dtypes.int32, (n_rows, n_cols), 0)
    c = lax.iota(dtypes.int32, (n_rows, n_cols), 1)
    mask = lax.eq(lax.add(r, np.int32(k)), c)
    return _place(lax.convert_element_type(mask, d), device)


def identity(n, dtype=None, device=None):
    """The ``n`` x ``n`` identity matrix (``numpy.identity``; not in the array API).

    Differences from NumPy: the default dtype is ``float32`` (NumPy: ``float64``).

    Args:
      n: the size.
      dtype: the result dtype; default ``float32``.
      device: a ``Device`` or a string; the result is committed there (default: the default device, uncommitted).

    Returns:
      An array of shape ``(n, n)``.

    Raises:
      TypeError: a non-integer ``n``.
    """
    return eye(n, dtype=dtype, device=device)


def tri(N, M=None, k=0, dtype=None):
    """Ones at and below the ``k``-th diagonal (``numpy.tri``; not in the array API).

    Differences from NumPy: the default dtype is ``float32`` (NumPy: ``float64``), with ``enable_x64`` on too
    (as ``jax.numpy.tri``).

    Args:
      N, M: the shape (``M`` defaults to ``N``).
      k: the diagonal.
      dtype: the result dtype; default ``float32``.

    Returns:
      An array of shape ``(N, M)``.

    Raises:
      TypeError: a non-integer ``k``.
    """
    M = N if M is None else M
    static_sizes((N, M), "tri")
    k = max(-N, min(operator.index(k), M))
    r = lax.iota(dtypes.int32, (N, M), 0)
    c = lax.iota(dtypes.int32, (N, M), 1)
    d = dtypes.requested(dtype, "tri") if dtype is not None else dtypes.float32  # float32 under x64 too, as JAX
    return lax.convert_element_type(lax.le(c, lax.add(r, np.int32(k))), d)


def _tri_mask(x, k, lower):
    x = asarray_internal(x)
    if x.ndim < 2:
        raise ShapeError(f"{'tril' if lower else 'triu'} needs an array of rank >= 2, got shape {x.shape}")
    n, m = x.shape[-2:]
    k = max(-n, min(operator.index(k), m))
    r = lax.iota(dtypes.int32, (n, m), 0)
    c = lax.iota(dtypes.int32, (n, m), 1)
    mask = lax.le(c, lax.add(r, np.int32(k))) if lower else lax.ge(c, lax.add(r, np.int32(k)))
    mask = lax.broadcast_to_rank_shape(mask, x.shape)
    return lax.select(mask, x, lax.zeros_like(x))


def tril(x, /, k: int = 0):
    """The lower triangle of the last two axes, zeros above diagonal ``k`` (array API ``tril``)."""
    return _tri_mask(x, k, True)


def triu(x, /, k: int = 0):
    """The upper triangle of the last two axes, zeros below diagonal ``k`` (array API ``triu``)."""
    return _tri_mask(x, k, False)


def meshgrid(*arrays, indexing: str = "xy"):
    """Coordinate grids from 1-d arrays (array API ``meshgrid``; ``indexing`` is ``'xy'`` or ``'ij'``)."""
    if indexing not in ("xy", "ij"):
        raise ValueError(f"meshgrid: indexing must be 'xy' or 'ij', got {indexing!r}")
    arrays = [asarray_internal(a) for a in arrays]
    for a in arrays:
        if a.ndim != 1:
            raise ShapeError(f"meshgrid takes 1-d arrays, got shape {a.shape}")
    if not arrays:
        return []
    from fnarray.numpy._util import result_aval
    d, _ = result_aval(*arrays)
    shape = [a.shape[0] for a in arrays]
    if indexing == "xy" and len(arrays) > 1:
        shape[0], shape[1] = shape[1], shape[0]
    out = []
    for i, a in enumerate(arrays):
        dim = i
        if indexing == "xy" and len(arrays) > 1 and i < 2:
            dim = 1 - i
        out.append(lax.broadcast_in_dim(lax.convert_element_type(a, d), tuple(shape), (dim,)))
    return out


def from_dlpack(x, /, *, device=None, copy=None):
    """An ``Array`` from any object with ``__dlpack__`` (array API ``from_dlpack``; ``numpy.from_dlpack``).

    Zero-copy where the target allows (the array API's ``copy=None``, as
    ``jax.numpy.from_dlpack``): on ``numpy:0`` the array is a read-only NumPy view of the
    producer's memory, on ``jax:0`` a ``jax.Array`` over it (a ``jax.Array`` is taken as
    it is). The fnarray array never writes the memory, but a mutable producer (a
    ``torch.Tensor``) still can: do not write the tensor afterwards, or pass
    ``copy=True``. Other backends (mlx, opencl, webgpu) copy. ``docs/interop.md``
    says which exchange copies.

    Args:
      x: an object implementing ``__dlpack__`` (a ``torch.Tensor``, ``jax.Array``, NumPy array...).
      device: where to place the result (default: the default device, uncommitted).
      copy: ``True`` always copies; ``False`` never copies (``BufferError`` if it must);
        ``None`` shares where possible.

    Returns:
      An ``Array`` of ``x``'s shape and dtype.

    Raises:
      AttributeError, TypeError: ``x`` does not implement DLPack (raised by ``numpy.from_dlpack``).
      BufferError: ``copy=False`` where the memory cannot be shared (another device, a read-only
        legacy producer).
      DTypeError: a dtype fnarray does not have.
    """
    from fnarray.devices.placement import import_dlpack
    shared = import_dlpack(x, device=device, copy=copy)
    if shared is not None:
        return shared
    if copy is False:
        raise BufferError(f"from_dlpack(copy=False): a {type(x).__name__} cannot be shared with "
                          f"{device or 'the default device'}; allow a copy (copy=None)")
    return asarray(np.from_dlpack(x), device=device)


def diag(v, k: int = 0):
    """The ``k``-th diagonal of a matrix, or a matrix with ``v`` on it (``numpy.diag``)."""
    v = asarray_internal(v)
    if v.ndim == 1:
        n = v.shape[0] + abs(k)
        r = lax.iota(dtypes.int32, (n, n), 0)
        c = lax.iota(dtypes.int32, (n, n), 1)
        mask = lax.eq(lax.add(r, np.int32(k)), c)
        # padded[i] = v[i - |k|]: read along columns (k >= 0) or rows (k < 0) it lands on the diagonal.
        padded = lax.pad(v, np.asarray(0, v.dtype)[()], [(abs(k), 0, 0)])
        rows = lax.broadcast_in_dim(padded, (n, n), (1,)) if k >= 0 else lax.broadcast_in_dim(padded, (n, n), (0,))
        return lax.select(mask, rows, lax.zeros_like(rows))
    if v.ndim == 2:
        from fnarray.numpy._linalg import diagonal
        return diagonal(v, offset=k)
    raise ShapeError(f"diag needs a 1-d or 2-d array, got shape {v.shape}")


def diagflat(v, k: int = 0):
    """``diag`` of the flattened input (``numpy.diagflat``)."""
    v = asarray_internal(v)
    return diag(lax.reshape(v, (v.size,)), k)


def indices(dimensions, dtype=None):
    """A grid of indices, shape ``(len(dimensions), *dimensions)`` (``numpy.indices``; not in the array API).

    Differences from NumPy: the default dtype is ``int32`` (NumPy: ``int64``); no ``sparse``.

    Args:
      dimensions: a sequence of ints (each converted with ``int()``, so ``2.5`` counts as 2).
      dtype: the result dtype; default ``int32``.

    Returns:
      An array of shape ``(len(dimensions),) + tuple(dimensions)``.

    Raises:
      TypeError: ``dimensions`` is not a sequence of numbers.
    """
    d = dtypes.requested(dtype, "indices") if dtype is not None else dtypes.default_int()
    dims = tuple(dimensions)
    static_sizes(dims, "indices")
    dims = tuple(int(n) for n in dims)
    from fnarray.numpy._manipulation import stack
    return stack([lax.iota(d, dims, i) for i in range(len(dims))]) if dims else asarray_internal(
        np.zeros((0,), d))
