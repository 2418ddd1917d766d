"""Argument handling shared by ``fnarray.scipy``: arrays of one floating dtype and one shape."""

from __future__ import annotations

import numpy as np

from fnarray.core import dtypes, lax
from fnarray.core.errors import DTypeError

__all__ = ["floats", "math_dtype", "to_math", "from_math", "const"]


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
    arrs = []
    for x in xs:
        a = asarray_internal(x)
        if dtypes.is_complex(a.dtype):
            raise DTypeError(f"{name} is defined for real inputs, got {a.dtype.name}; pass the real part "
                             "(fnarray.numpy.real) if that is what you mean")
        if not dtypes.is_float(a.dtype):
            a = lax.convert_element_type(a, dtypes.float32, weak_type=a.weak_type)
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
