"""``quantized_matmul`` on mlx: ``mx.quantized_matmul`` (registered into ``common.RULES``)."""

from __future__ import annotations

import numpy as np

from fnarray.core.quantized import FLOAT_MODES, quantized_matmul_p
from fnarray.lowering.mlx.common import RULES
from fnarray.lowering.packed import fp_weights, unpack

__all__ = ["mlx_quantized_matmul"]


def mlx_quantized_matmul(params, in_avals, out_avals):
    """``mx.quantized_matmul`` (float32, float16, bfloat16; every mode); float64 (MLX's kernel has none) unpacks
    with MLX's integer ops and multiplies in float64."""
    import mlx.core as mx
    transpose, gs, bits, mode = params["transpose"], params["group_size"], params["bits"], params["mode"]
    if in_avals[0].dtype != np.float64:
        return lambda x, w, s, b=None: mx.quantized_matmul(x, w, s, b, transpose=transpose, group_size=gs,
                                                           bits=bits, mode=mode)
    if mode in FLOAT_MODES:
        return lambda x, w, s: mx.matmul(x, _t(fp_weights(mx, w, s, np.float64, mode), transpose))

    def f(x, w, s, b):
        q = unpack(mx, w, bits).astype(mx.float64)
        rows, cols = q.shape
        q = q.reshape(rows, cols // gs, gs)
        wd = (q * s[:, :, None] + b[:, :, None]).reshape(rows, cols)
        return mx.matmul(x, _t(wd, transpose))
    return f


def _t(wd, transpose):
    return wd.T if transpose else wd


RULES[quantized_matmul_p] = mlx_quantized_matmul
