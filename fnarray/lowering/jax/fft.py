"""The ``fft`` primitive on jax: ``jax.lax.fft`` (registered into ``common.RULES``)."""

from __future__ import annotations

from fnarray.core.fft import FftType, fft_p
from fnarray.lowering.jax.common import RULES

__all__ = ["jax_fft"]


def jax_fft(x, *, fft_type, fft_lengths):
    """``fft`` as ``jax.lax.fft`` (XLA's FFT: DUCC on the CPU, cuFFT on NVIDIA GPUs)."""
    from jax import lax
    return lax.fft(x, lax.FftType[FftType(fft_type).name], tuple(fft_lengths))


RULES[fft_p] = jax_fft
