"""``ShapedArray``: the abstract value of the IR (shape, dtype, weak type)."""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from fnarray.core import dtypes

__all__ = ["ShapedArray"]


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
