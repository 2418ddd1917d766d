"""JVP, transpose and batching rules of the ``fft`` primitive (``fnarray.core.fft``).

``fft`` is linear, so its JVP applies it to the tangent (``deflinear``). Its transposes follow the
convention of JAX for complex cotangents (a real-linear map's transpose, with the cotangent of a complex
value ``z`` written ``d/d re(z) - i d/d im(z)``), as ``jax/_src/lax/fft.py`` does:

- ``FFT`` and ``IFFT``: their matrices are symmetric, so each is its own transpose;
- ``RFFT`` (real ``x`` to the first ``n//2+1`` entries of ``FFT(x)``): zero-pad the cotangent back to ``n``
  entries, ``FFT`` it, keep the real part (the transposes of the slice, the FFT and the real-to-complex
  conversion, in reverse order);
- ``IRFFT``: ``conj(w * RFFT(ct)) / prod(fft_lengths)``, where ``w`` weighs each entry of the half spectrum
  by how many entries of the full spectrum it stands for (1 for index 0 and, for even lengths, ``n/2``;
  2 for the others). Derived from ``irfft``'s real form ``x[t] = (1/n) sum_k w_k re(X_k e^{+i theta})``.

Batching moves the batch axis first (the primitive treats leading axes as a batch).
"""

from __future__ import annotations

import math

import numpy as np

from fnarray.core import lax
from fnarray.core.avals import get_aval
from fnarray.core.fft import FftType, fft_p
from fnarray.transforms.ad_tables import Zero, deflinear
from fnarray.transforms.batching_tables import primitive_batchers

__all__ = ["fft_transpose", "fft_batch"]


def _rfft_transpose(ct, fft_lengths):
    shape = get_aval(ct).shape
    n = fft_lengths[-1]
    pad = [(0, 0, 0)] * len(shape)
    pad[-1] = (0, n - shape[-1], 0)
    full = lax.pad(ct, _zero(ct), pad)
    return lax.real(fft_p.bind(full, fft_type=FftType.FFT, fft_lengths=tuple(fft_lengths)))


def _zero(x):
    return np.zeros((), get_aval(x).dtype)[()]


def _irfft_transpose(ct, fft_lengths):
    x = fft_p.bind(ct, fft_type=FftType.RFFT, fft_lengths=tuple(fft_lengths))
    a = get_aval(x)
    m = a.shape[-1]
    n = fft_lengths[-1]
    doubled = m - 1 - (1 - n % 2)  # the entries between index 0 and (for even n) n/2
    scale = 1.0 / math.prod(fft_lengths)
    pieces = [lax.full((1,), scale, a.dtype)]
    if doubled > 0:
        pieces.append(lax.full((doubled,), 2 * scale, a.dtype))
    if m - 1 - doubled > 0:
        pieces.append(lax.full((1,), scale, a.dtype))
    w = lax.concatenate(pieces, 0) if len(pieces) > 1 else pieces[0]
    w = lax.broadcast_in_dim(w, a.shape, (len(a.shape) - 1,))
    return lax.conj(lax.mul(x, w))


def fft_transpose(ct, x, *, fft_type, fft_lengths):
    """The cotangent of ``fft``'s operand (JAX's convention for complex values; see the module)."""
    if isinstance(ct, Zero):
        return [Zero(x.aval)]
    fft_type = FftType(fft_type)
    if fft_type == FftType.RFFT:
        return [_rfft_transpose(ct, fft_lengths)]
    if fft_type == FftType.IRFFT:
        return [_irfft_transpose(ct, fft_lengths)]
    return [fft_p.bind(ct, fft_type=fft_type, fft_lengths=tuple(fft_lengths))]


deflinear(fft_p, fft_transpose)


def fft_batch(vals, dims, *, fft_type, fft_lengths):
    """The batch axis goes first (any axis before the transformed ones is a batch axis of ``fft``)."""
    x, = vals
    d, = dims
    nd = len(get_aval(x).shape)
    if d >= nd - len(fft_lengths):
        perm = [d] + [i for i in range(nd) if i != d]
        x, d = lax.transpose(x, perm), 0
    return fft_p.bind(x, fft_type=fft_type, fft_lengths=fft_lengths), d


primitive_batchers[fft_p] = fft_batch
