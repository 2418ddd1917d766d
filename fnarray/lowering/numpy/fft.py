"""The ``fft`` primitive's reference: ``numpy.fft`` (registered into ``common.IMPLS``).

The kernel backends' FFT (Stockham and Bluestein kernels) is ``fnarray.lowering.kernels.groups.fft``.
"""

from __future__ import annotations

import numpy as np

from fnarray.core.fft import FftType, fft_p
from fnarray.lowering.numpy.common import IMPLS

__all__ = ["numpy_fft"]


def numpy_fft(params, in_avals, out_avals):
    """``fft`` through ``numpy.fft`` (NumPy >= 2 computes complex64 in single precision); the result is cast
    to the primitive's dtype."""
    fft_type = FftType(params["fft_type"])
    lengths = tuple(params["fft_lengths"])
    axes = tuple(range(-len(lengths), 0))
    out_dtype = out_avals[0].dtype
    fn = {FftType.FFT: np.fft.fftn, FftType.IFFT: np.fft.ifftn, FftType.RFFT: np.fft.rfftn,
          FftType.IRFFT: np.fft.irfftn}[fft_type]

    def f(x):
        if x.size == 0:
            return np.zeros(out_avals[0].shape, out_dtype)
        return np.asarray(fn(x, s=lengths, axes=axes)).astype(out_dtype, copy=False)
    return f


IMPLS[fft_p] = numpy_fft
