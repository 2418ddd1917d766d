"""The ``fft`` primitive on mlx: ``mx.fft`` (registered into ``common.RULES``)."""

from __future__ import annotations

from fnarray.core.fft import FftType, fft_p
from fnarray.lowering.mlx.common import RULES

__all__ = ["mlx_fft"]


def mlx_fft(params, in_avals, out_avals):
    """``fft`` as ``mx.fft`` (complex64 and float32 only: the backend's ``supports`` sends the rest to numpy)."""
    import mlx.core as mx
    fft_type = FftType(params["fft_type"])
    lengths = list(params["fft_lengths"])
    axes = list(range(-len(lengths), 0))
    fn = {FftType.FFT: mx.fft.fftn, FftType.IFFT: mx.fft.ifftn, FftType.RFFT: mx.fft.rfftn,
          FftType.IRFFT: mx.fft.irfftn}[fft_type]
    return lambda x: fn(x, s=lengths, axes=axes)


RULES[fft_p] = mlx_fft
