"""The jax backend's rule for ``dot_general`` (bool as int32, float16/bfloat16 accumulated in float32, int4 widened
to a wider ``preferred_element_type`` first)."""

from __future__ import annotations

import numpy as np

from fnarray.core import dtypes
from fnarray.core import primitives as P
from fnarray.lowering.jax.common import lax, rule


@rule(P.dot_general)
def _dot_general(x, y, *, dimension_numbers, preferred_element_type=None):
    if x.dtype == np.bool_:
        r = lax.dot_general(x.astype(np.int32), y.astype(np.int32), dimension_numbers)
        return r > 0
    if x.dtype in (dtypes.float16, dtypes.bfloat16):
        r = lax.dot_general(x, y, dimension_numbers, preferred_element_type=np.float32)
        return r.astype(preferred_element_type or x.dtype)
    if x.dtype in (dtypes.int4, dtypes.uint4) and preferred_element_type not in (None, x.dtype):
        # XLA's CPU backend refuses an int4 dot with a wider result: widen the operands first (exact)
        x, y = (lax.convert_element_type(v, preferred_element_type) for v in (x, y))
    return lax.dot_general(x, y, dimension_numbers, preferred_element_type=preferred_element_type)
