"""The ``fft`` primitive on the library backends: NumPy (the reference), JAX and MLX.

Each function is registered in its backend's rule table by that backend's module (``numpy_impls.IMPLS``,
``jax.RULES``, ``mlx.RULES``), so this module imports no backend library at import time. The kernel
backends' FFT (Stockham and Bluestein kernels) is ``fnarray.lowering.kernels.groups.fft``.
"""

from __future__ import annotations

import numpy as np

from fnarray.core.fft import FftType

__all__ = ["numpy_fft", "jax_fft", "mlx_fft"]


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


def jax_fft(x, *, fft_type, fft_lengths):
    """``fft`` as ``jax.lax.fft`` (XLA's FFT: DUCC on the CPU, cuFFT on NVIDIA GPUs)."""
    from jax import lax
    return lax.fft(x, lax.FftType[FftType(fft_type).name], tuple(fft_lengths))


def mlx_fft(params, in_avals, out_avals):
    """``fft`` as ``mx.fft`` (complex64 and float32 only: the backend's ``supports`` sends the rest to numpy)."""
    import mlx.core as mx
    fft_type = FftType(params["fft_type"])
    lengths = list(params["fft_lengths"])
    axes = list(range(-len(lengths), 0))
    fn = {FftType.FFT: mx.fft.fftn, FftType.IFFT: mx.fft.ifftn, FftType.RFFT: mx.fft.rfftn,
          FftType.IRFFT: mx.fft.irfftn}[fft_type]
    return lambda x: fn(x, s=lengths, axes=axes)
