"""The NumPy reference of ``dot_general``."""

from __future__ import annotations

import numpy as np

from fnarray.core import dtypes
from fnarray.core import primitives as P
from fnarray.lowering.common import dot_general_as_matmul
from fnarray.lowering.numpy.common import LOW, factory


@factory(P.dot_general)
def _dot_general(params, in_avals, out_avals):
    (lc, rc), (lb, rb) = params["dimension_numbers"]
    la, ra = in_avals
    out_d = out_avals[0].dtype
    lperm, rperm, B, M, K, N = dot_general_as_matmul(params["dimension_numbers"], la.shape, ra.shape)
    out_shape = out_avals[0].shape
    compute = np.float32 if la.dtype in LOW else la.dtype
    if dtypes.is_int(la.dtype) or la.dtype == np.bool_:
        # integers accumulate in the result dtype (preferred_element_type=int32 of int8/int4 operands is the
        # exact int32 sum, as XLA's), wrapping there
        compute = out_d if dtypes.is_int(out_d) else la.dtype

    if not lb and len(lc) == 1 and la.ndim == 2 and ra.ndim == 2 and compute == la.dtype == out_d:
        # The common 2-d cases: a matmul of (transposed) views, no copies. (Outer products of two
        # matrices, with no contracting dimension, take the general path below.)
        lt, rt = lc == (0,), rc == (1,)
        if not lt and not rt:
            return np.matmul
        if lt and not rt:
            return lambda x, y: np.matmul(x.T, y)
        if rt and not lt:
            return lambda x, y: np.matmul(x, y.T)
        return lambda x, y: np.matmul(x.T, y.T)

    def f(x, y):
        a = np.transpose(x, lperm).reshape(B, M, K).astype(compute, copy=False)
        b = np.transpose(y, rperm).reshape(B, K, N).astype(compute, copy=False)
        return np.matmul(a, b).reshape(out_shape).astype(out_d, copy=False)
    return f
