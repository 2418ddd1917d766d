"""The NumPy reference of ``conv_general_dilated`` (registered into ``common.IMPLS``).

Method: bring the operands to ``lhs[N, C, *S]`` and ``rhs[O, I, *K]``, dilate and pad the input once (memory
linear in the padded input), then loop over the kernel's positions: each position ``k`` reads a strided view of
the padded input (the elements that kernel tap ``k`` meets at every output position) and adds
``rhs[:, :, k] @ view`` to the result. So memory stays linear in the input and output (no im2col matrix of
``prod(K)`` times the input), and every product is a BLAS matmul over the features. When the kernel has more
taps than the result has positions (the kernel gradient, whose kernel is the cotangent), the loop runs over
the output positions instead, each one matmul over the features and the whole (strided) window.
Groups are axes of that matmul: feature groups split ``C`` and ``O``, batch groups split ``N`` and ``O``.
"""

from __future__ import annotations

import math
from itertools import product

import numpy as np

from fnarray.core import dtypes
from fnarray.core.conv import conv_general_dilated_p, dilate_dim
from fnarray.lowering.numpy.common import IMPLS

__all__ = ["conv_general_dilated_impl", "dilate_and_pad"]

#: the float dtypes a convolution accumulates in float32, rounding once (float8 too, as its products)
_LOW = (dtypes.float16, dtypes.bfloat16, dtypes.float8_e4m3fn, dtypes.float8_e5m2)


def dilate_and_pad(x, lhs_dilation, padding, first=2):
    """``x`` with its dimensions from ``first`` on dilated (zeros between elements) and padded (negative crops)."""
    sp = x.shape[first:]
    if any(d != 1 for d in lhs_dilation):
        dil = tuple(dilate_dim(s, d) for s, d in zip(sp, lhs_dilation, strict=True))
        y = np.zeros(x.shape[:first] + dil, x.dtype)
        y[(Ellipsis,) + tuple(slice(None, None, d) for d in lhs_dilation)] = x
        x = y
    crop = tuple(slice(max(0, -lo), x.shape[first + k] - max(0, -hi)) for k, (lo, hi) in enumerate(padding))
    x = x[(Ellipsis,) + crop]
    grow = [(0, 0)] * first + [(max(0, lo), max(0, hi)) for lo, hi in padding]
    if any(g != (0, 0) for g in grow):
        x = np.pad(x, grow)
    return x


def _compute_dtype(in_dtype, out_dtype):
    if dtypes.is_int(in_dtype):
        if dtypes.is_low_bit(out_dtype):
            return np.dtype(np.int32)   # int4/uint4: NumPy cannot add them; int32 wraps into 4 bits at the end
        return out_dtype  # preferred_element_type (int8 -> int32) or the input's own type; ints wrap
    d = np.promote_types(in_dtype, out_dtype)
    return np.dtype(np.float32) if d in _LOW else d


def _by_taps(res, x, w, out_sp, strides, rhs_dil):
    """One matmul per kernel tap over every output position (the common case: small kernels)."""
    for k in product(*(range(n) for n in w.shape[5:])):
        view = x[(Ellipsis,) + tuple(slice(ki * rd, ki * rd + (n - 1) * s + 1, s)
                                     for ki, rd, n, s in zip(k, rhs_dil, out_sp, strides, strict=True))]
        view = view.reshape(view.shape[:4] + (-1,))            # (B, NB, G, I, P)
        tap = w[(Ellipsis,) + k]                                # (B|1, 1, G, OG, I)
        res += np.matmul(tap, view)                             # (B, NB, G, OG, P)


def _by_positions(res, x, w, out_sp, strides, rhs_dil):
    """One matmul per output position over the whole kernel, for kernels with more taps than the result has
    positions (a kernel gradient, whose "kernel" is the cotangent): ``(OG, I * K) @ (I * K, NB)``."""
    B, NB, G, I = x.shape[:4]
    ksp = w.shape[5:]
    wk = w.reshape(w.shape[0], G, w.shape[3], -1)               # (B|1, G, OG, I * K)
    nk = len(ksp)
    for flat, pos in enumerate(product(*(range(n) for n in out_sp))):
        win = x[(Ellipsis,) + tuple(slice(pi * s, pi * s + (k - 1) * rd + 1, rd)
                                    for pi, s, k, rd in zip(pos, strides, ksp, rhs_dil, strict=True))]
        win = win.transpose((0, 2, 3) + tuple(range(4, 4 + nk)) + (1,)).reshape(B, G, -1, NB)
        res[..., flat] = np.moveaxis(np.matmul(wk, win), 3, 1)   # (B, G, OG, NB) -> (B, NB, G, OG)


def conv_general_dilated_impl(params, in_avals, out_avals):
    """``IMPLS`` factory: ``f(lhs, rhs) -> out`` for one equation's params."""
    dn = params["dimension_numbers"]
    strides, padding = params["window_strides"], params["padding"]
    lhs_dil, rhs_dil = params["lhs_dilation"], params["rhs_dilation"]
    G, B = params["feature_group_count"], params["batch_group_count"]
    out_aval = out_avals[0]
    out_dtype = out_aval.dtype
    compute = _compute_dtype(in_avals[0].dtype, out_dtype)
    # The result's layout: (N', O, *S') -> out_spec.
    to_out = np.argsort(dn.out_spec)
    nsp = len(strides)

    def f(lhs, rhs):
        x = np.transpose(np.asarray(lhs), dn.lhs_spec).astype(compute, copy=False)
        w = np.transpose(np.asarray(rhs), dn.rhs_spec).astype(compute, copy=False)
        N, C = x.shape[:2]
        O, I = w.shape[:2]
        out_sp = tuple(out_aval.shape[dn.out_spec[2 + k]] for k in range(nsp))
        NB, OG = N // B, O // max(G, B)
        res = np.zeros((B, NB, G, OG, math.prod(out_sp)), compute)
        if res.size and C and w.size:
            x = dilate_and_pad(x, lhs_dil, padding)
            # x: (B, NB, G, I, *S); w: (B or G groups, OG, I, *K) -> one group axis for each count.
            x = x.reshape((B, NB, G, I) + x.shape[2:])
            w = w.reshape((B, 1, G, OG, I) + w.shape[2:]) if B > 1 else w.reshape((1, 1, G, OG, I) + w.shape[2:])
            if math.prod(w.shape[5:]) <= math.prod(out_sp):
                _by_taps(res, x, w, out_sp, strides, rhs_dil)
            else:
                _by_positions(res, x, w, out_sp, strides, rhs_dil)
        # (B, NB, G, OG, P) -> (NB, B * G * OG = O, *S'): output feature o = (b * G + g) * OG + j.
        res = np.moveaxis(res, 0, 1).reshape((NB, O) + out_sp)
        return np.transpose(res, to_out).astype(out_dtype, copy=False)
    return f


IMPLS[conv_general_dilated_p] = conv_general_dilated_impl
