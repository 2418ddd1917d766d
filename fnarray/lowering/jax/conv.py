"""The jax lowering of ``conv_general_dilated``: ``jax.lax.conv_general_dilated`` with the same params.

Registered into ``common.RULES``. float16/bfloat16 accumulate in float32 (as the
reference does), then round once.
"""

from __future__ import annotations

import numpy as np

from fnarray.core import dtypes
from fnarray.core.conv import conv_general_dilated_p
from fnarray.lowering.jax.common import RULES

__all__ = ["conv_general_dilated_rule"]

_LOW = (dtypes.float16, dtypes.bfloat16, dtypes.float8_e4m3fn, dtypes.float8_e5m2)   # accumulated in float32


def _precision(lax, p):
    if p is None:
        return None
    if isinstance(p, tuple):
        return tuple(_precision(lax, q) for q in p)
    return getattr(lax.Precision, p)


def conv_general_dilated_rule(x, y, *, window_strides, padding, lhs_dilation, rhs_dilation, dimension_numbers,
                              feature_group_count, batch_group_count, precision=None, preferred_element_type=None):
    from jax import lax  # noqa: PLC0415 (jax is imported only when the jax backend is used)
    dn = lax.ConvDimensionNumbers(*dimension_numbers)
    pet = preferred_element_type
    low = np.dtype(x.dtype) in _LOW
    out = lax.conv_general_dilated(
        x, y, window_strides, padding, lhs_dilation, rhs_dilation, dn, feature_group_count, batch_group_count,
        precision=_precision(lax, precision), preferred_element_type=np.float32 if low and pet is None else pet)
    return out.astype(x.dtype) if low and pet is None else out


RULES[conv_general_dilated_p] = conv_general_dilated_rule
