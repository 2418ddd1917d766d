"""``ShapedArray``: the abstract value of the IR (shape, dtype, weak type)."""

from __future__ import annotations

import dataclasses
import math
from typing import NamedTuple

import numpy as np

from fnarray.core import dtypes

__all__ = ["ShapedArray", "ShapeDtypeStruct", "broadcast_same_rank"]


class ShapedArray(NamedTuple):
    """What the IR knows of a value: its shape (tuple of ints), dtype and weak type.

    ``weak_type`` marks a value that came from a Python scalar and adopts the
    dtype of whatever strong value it meets (see ``fnarray.core.dtypes``).
    """

    shape: tuple
    dtype: np.dtype
    weak_type: bool = False

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    def update(self, shape=None, dtype=None, weak_type=None) -> "ShapedArray":
        return ShapedArray(self.shape if shape is None else tuple(shape),
                           self.dtype if dtype is None else dtype,
                           self.weak_type if weak_type is None else weak_type)

    def strip_weak(self) -> "ShapedArray":
        return self._replace(weak_type=False) if self.weak_type else self

    def str_short(self) -> str:
        """``f32[3,4]``, as the IR printer shows it."""
        return f"{dtypes.short_name(self.dtype)}[{','.join(map(str, self.shape))}]"

    def __repr__(self):
        weak = ", weak_type=True" if self.weak_type else ""
        return f"ShapedArray({self.str_short()}{weak})"


def broadcast_same_rank(a, b):
    """NumPy's broadcast of two shapes of one rank as a tuple, or ``None`` where they do not fit (the caller
    raises or takes another path: ``fnarray.numpy._util.broadcast_shapes``, mlx's rules of any shape)."""
    out = []
    for m, n in zip(a, b):
        if m == n or n == 1:
            out.append(m)
        elif m == 1:
            out.append(n)
        else:
            return None
    return tuple(out)


@dataclasses.dataclass(frozen=True)
class ShapeDtypeStruct:
    """A shape and a dtype standing for an array, as ``jax.ShapeDtypeStruct`` (``fa.ShapeDtypeStruct`` and
    ``pl.ShapeDtypeStruct`` are this class).

    ``fa.eval_shape`` returns them; ``fa.eval_shape``, ``fa.make_jaxpr`` and ``fa.jit(f).trace``/``.lower`` take
    them as arguments in place of arrays (nothing is computed); ``pallas_call``'s ``out_shape`` is made of them.

    Args:
      shape: a sequence of non-negative ints.
      dtype: anything ``numpy.dtype`` takes (``fnp.float32``, ``"int8"``...). Kept as given: with x64 off a
        float64 struct stands for a float32 argument, as in JAX.
      sharding: kept for JAX's signature; unused.
      weak_type: whether it stands for a Python scalar's weakly typed value.

    Raises:
      TypeError: an entry of ``shape`` is not an int, or ``dtype`` is not a dtype.
      ValueError: an entry of ``shape`` is negative.
    """

    shape: tuple
    dtype: object
    sharding: object = None
    weak_type: bool = False

    def __post_init__(self):
        shape = (self.shape,) if isinstance(self.shape, (int, np.integer)) else tuple(self.shape)
        for n in shape:
            if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
                raise TypeError(f"ShapeDtypeStruct: shape entries must be ints, got {shape!r}")
            if n < 0:
                raise ValueError(f"ShapeDtypeStruct: shape entries must be >= 0, got {shape!r}")
        object.__setattr__(self, "shape", tuple(int(n) for n in shape))
        object.__setattr__(self, "dtype", np.dtype(self.dtype))

    ndim = ShapedArray.ndim   # the same properties: len and product of ``shape``
    size = ShapedArray.size

    @classmethod
    def like(cls, x) -> "ShapeDtypeStruct":
        """The struct of ``x`` (an array, tracer, NumPy array, scalar or struct): its shape, dtype and weak type,
        as ``jax.ShapeDtypeStruct.like``. Raises ``TypeError`` for anything else."""
        if isinstance(x, cls):
            return x
        a = getattr(x, "aval", None)   # an Array or tracer (core.avals.get_aval's rules; it imports this module)
        if isinstance(a, ShapedArray):
            return cls(a.shape, a.dtype, weak_type=a.weak_type)
        if isinstance(x, (bool, int, float, complex, np.generic)):
            d, weak = dtypes.dtype_of_scalar(x)
            return cls((), d, weak_type=weak)
        if isinstance(x, np.ndarray):
            return cls(x.shape, dtypes.canonicalize(x.dtype))
        raise TypeError(f"ShapeDtypeStruct.like: expected an array, a scalar or a ShapeDtypeStruct, got "
                        f"{type(x).__name__}")

    def __repr__(self):
        weak = ", weak_type=True" if self.weak_type else ""
        return f"ShapeDtypeStruct(shape={self.shape}, dtype={self.dtype.name}{weak})"
