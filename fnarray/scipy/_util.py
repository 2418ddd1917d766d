"""Argument handling shared by ``fnarray.scipy``: arrays of one floating dtype and one shape."""

from __future__ import annotations

import numpy as np

from fnarray.core import dtypes, lax
from fnarray.core.array import Array
from fnarray.core import linalg as lax_linalg
from fnarray.core.errors import DTypeError, ShapeError

__all__ = ["floats", "math_dtype", "to_math", "from_math", "const", "positive_scale", "matrix"]


def floats(name, *xs, shape=True):
    """``xs`` as arrays of one real floating dtype (JAX's promotion; integers and bools become ``float32``),
    broadcast to one shape unless ``shape=False``.

    Raises:
      TypeError: an argument is not an array or a scalar.
      DTypeError: an argument is complex.
      ShapeError: the shapes do not broadcast.
    """
    from fnarray.numpy._util import asarray_internal, broadcast_shapes, check_arraylike, promote
    check_arraylike(name, *xs)
    if len(xs) > 1 and any(type(x) in (bool, int, float) for x in xs) and not all(
            type(x) in (bool, int, float) for x in xs):
        # Python scalars are weak: promoted with the arrays first, so 0.7 beside a float64 array is the
        # float64 0.7, not 0.7 rounded to float32 and widened (JAX's promote_dtypes_inexact)
        others = [x for x in xs if type(x) not in (bool, int, float)]
        done = floats(name, *others, shape=False)
        it = iter(done)
        mixed = [x if type(x) in (bool, int, float) else next(it) for x in xs]
        xs = tuple(v if isinstance(v, Array) else asarray_internal(v) for v in promote(name, *mixed))
    arrs = []
    for x in xs:
        a = asarray_internal(x)
        if dtypes.is_complex(a.dtype):
            raise DTypeError(f"{name} is defined for real inputs, got {a.dtype.name}; pass the real part "
                             "(fnarray.numpy.real) if that is what you mean")
        if not dtypes.is_float(a.dtype):
            a = lax.convert_element_type(a, dtypes.to_inexact(a.dtype), weak_type=a.weak_type)
        arrs.append(a)
    if len(arrs) > 1:
        arrs = promote(name, *arrs)
        if shape:
            s = broadcast_shapes(*[a.shape for a in arrs], name=name)
            arrs = [a if a.shape == s else lax.broadcast_to_rank_shape(a, s) for a in arrs]
    return arrs


def math_dtype(x):
    """The dtype a special function computes in: float32 for float16/bfloat16, else ``x``'s."""
    d = x.dtype
    return dtypes.float32 if d.itemsize < 4 else d


def to_math(*xs):
    m = math_dtype(xs[0])
    return [x if x.dtype == m else lax.convert_element_type(x, m) for x in xs]


def from_math(r, d):
    return r if r.dtype == d else lax.convert_element_type(r, d)


def const(x, v):
    """``v`` as a NumPy scalar of ``x``'s dtype (a strong literal)."""
    return np.asarray(v, x.dtype)[()]


def log1p(x):
    """``log1p(x)`` that keeps its relative accuracy for small ``|x|`` on every backend: there the Taylor series
    (to ``x**9`` below 0.1 in float32, to ``x**6`` below 1e-3 in float64), else the primitive. (WGSL's
    ``log`` may be off by 2**-21 absolute near 1, as Vulkan allows, which makes the primitive's
    ``log1p(-1e-7)`` 3% off on Mesa's lavapipe.)"""
    import fnarray.numpy as fnp
    if x.dtype == dtypes.float64:
        bound, terms = 1e-3, 6
    else:
        bound, terms = 0.1, 9
    small = fnp.abs(x) < bound
    xs = fnp.where(small, x, 0.0)
    acc = fnp.full_like(xs, (-1) ** (terms + 1) / terms)
    for k in range(terms - 1, 0, -1):
        acc = (-1) ** (k + 1) / k + xs * acc
    return fnp.where(small, xs * acc, fnp.log1p(x))


def positive_scale(out, scale):
    """``out`` with NaN where ``scale`` is not positive (or is NaN), as SciPy answers for such a distribution."""
    import fnarray.numpy as fnp
    return fnp.where(scale > 0, out, fnp.nan)


def matrix(name, a, square=True):
    """``a`` as an array of a linear-algebra dtype with rank >= 2 (square unless ``square=False``)."""
    from fnarray.numpy._util import asarray_internal, check_arraylike
    check_arraylike(name, a)
    a = asarray_internal(a)
    if dtypes.is_bool(a.dtype) or dtypes.is_int(a.dtype) or a.dtype in (dtypes.float16, dtypes.bfloat16):
        a = lax.convert_element_type(a, dtypes.float32)
    if a.dtype not in lax_linalg.LINALG_DTYPES:
        raise DTypeError(f"{name} needs a float or complex matrix, got {a.dtype.name}")
    if a.ndim < 2:
        raise ShapeError(f"{name} needs a matrix (at least 2-d, the last two axes), got shape {a.shape}")
    if square and a.shape[-1] != a.shape[-2]:
        raise ShapeError(f"{name} needs square matrices (the last two axes equal), got shape {a.shape}; for a "
                         "least-squares solution use fnarray.numpy.linalg.lstsq")
    return a
