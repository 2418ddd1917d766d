"""``dot_product_attention``'s reference (registered into ``common.IMPLS``): ``lowering/attention_math.py`` in
NumPy, float32 accumulation (float64 for float64)."""

from __future__ import annotations

import numpy as np

from fnarray.core.attention import acc_dtype, dot_product_attention_p, key_sizes
from fnarray.lowering.attention_math import attention
from fnarray.lowering.numpy.common import IMPLS

__all__ = ["numpy_attention"]


def _cast(x, dtype):
    return np.asarray(x, dtype)


def numpy_attention(params, in_avals, out_avals):
    """The reference; no keys (``S == 0``) give zeros, as an empty weighted sum."""
    out = out_avals[0]
    acc = acc_dtype(out.dtype)
    S = key_sizes(in_avals[1].shape, params.get("kv_heads_first", False))[0]

    def f(*xs):
        if S == 0 or 0 in out.shape:
            return np.zeros(out.shape, out.dtype)
        return attention(np, _cast, xs, acc, **params).astype(out.dtype)
    return f


IMPLS[dot_product_attention_p] = numpy_attention
