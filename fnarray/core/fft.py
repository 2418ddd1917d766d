"""The ``fft`` primitive: discrete Fourier transforms over the last ``k`` axes (as ``jax.lax.fft``).

``fft[fft_type, fft_lengths] x`` transforms the last ``len(fft_lengths)`` axes (1 to 3, XLA's limit) of
``x``; the leading axes are a batch. Its four types, with ``n = prod(fft_lengths)``:

- ``FFT``: complex -> complex, ``X[k] = sum_t x[t] exp(-2 pi i k.t / N)`` (no scaling);
- ``IFFT``: complex -> complex, the inverse, scaled by ``1/n``;
- ``RFFT``: real (float32/float64) -> complex of the matching precision; the last axis of the result has
  ``fft_lengths[-1] // 2 + 1`` entries (the others follow from Hermitian symmetry);
- ``IRFFT``: the inverse of ``RFFT``: complex with last axis ``fft_lengths[-1] // 2 + 1`` -> real of shape
  ``fft_lengths``; the imaginary parts of the entries that must be real (index 0 and, for even lengths,
  ``n/2`` of the last axis) are ignored, as NumPy's and XLA's ``irfft`` do.

Every ``fft_lengths`` entry is at least 1 (NumPy raises for 0 points). The primitive is linear (in the real
sense for RFFT/IRFFT): its JVP applies it to the tangent; its transposes are in
``fnarray.transforms.fft_rules``. ``fnarray.numpy.fft`` builds the NumPy/array-API functions on it.
"""

from __future__ import annotations

import enum

from fnarray.core import dtypes
from fnarray.core.avals import get_aval
from fnarray.core.errors import DTypeError, ShapeError
from fnarray.core.primitives import Primitive
from fnarray.core.shaped import ShapedArray

__all__ = ["FftType", "fft_p", "fft", "MAX_FFT_RANK", "complex_of", "real_of"]

#: The most axes one ``fft`` equation transforms (XLA's limit; ``fnarray.numpy.fft`` chains more).
MAX_FFT_RANK = 3


class FftType(enum.IntEnum):
    """The kind of transform (``jax.lax.FftType``)."""

    FFT = 0
    IFFT = 1
    RFFT = 2
    IRFFT = 3

    def __repr__(self):
        return f"FftType.{self.name}"

    __str__ = __repr__


_COMPLEX_OF = {dtypes.float32: dtypes.complex64, dtypes.float64: dtypes.complex128}
_REAL_OF = {v: k for k, v in _COMPLEX_OF.items()}


def complex_of(d):
    """The complex dtype of real float dtype ``d`` (float32 -> complex64, float64 -> complex128)."""
    return _COMPLEX_OF[d]


def real_of(d):
    """The real dtype of complex dtype ``d``."""
    return _REAL_OF[d]


def _fft_rule(x, *, fft_type, fft_lengths):
    fft_type = FftType(fft_type)
    k = len(fft_lengths)
    if not 1 <= k <= MAX_FFT_RANK:
        raise ShapeError(f"fft transforms 1 to {MAX_FFT_RANK} trailing axes; got fft_lengths={fft_lengths}")
    if k > x.ndim:
        raise ShapeError(f"fft over {k} axes of an operand of rank {x.ndim} (shape {x.shape}); the operand needs "
                         f"at least {k} axes")
    if any(int(n) < 1 for n in fft_lengths):
        raise ShapeError(f"fft_lengths must be positive, got {fft_lengths}")
    lead, tail = x.shape[:x.ndim - k], tuple(x.shape[x.ndim - k:])
    lengths = tuple(int(n) for n in fft_lengths)
    if fft_type == FftType.RFFT:
        if x.dtype not in _COMPLEX_OF:
            raise DTypeError(f"fft of type RFFT needs a float32 or float64 operand, got {x.dtype.name}")
        if tail != lengths:
            raise ShapeError(f"fft RFFT: the last {k} axes of the operand {x.shape} must equal fft_lengths "
                             f"{lengths}")
        return ShapedArray(lead + lengths[:-1] + (lengths[-1] // 2 + 1,), _COMPLEX_OF[x.dtype])
    if x.dtype not in _REAL_OF:
        raise DTypeError(f"fft of type {fft_type.name} needs a complex64 or complex128 operand, got "
                         f"{x.dtype.name} (convert a real operand first, or use RFFT)")
    if fft_type == FftType.IRFFT:
        want = lengths[:-1] + (lengths[-1] // 2 + 1,)
        if tail != want:
            raise ShapeError(f"fft IRFFT with fft_lengths {lengths}: the last {k} axes of the operand {x.shape} "
                             f"must be {want}")
        return ShapedArray(lead + lengths, _REAL_OF[x.dtype])
    if tail != lengths:
        raise ShapeError(f"fft {fft_type.name}: the last {k} axes of the operand {x.shape} must equal "
                         f"fft_lengths {lengths}")
    return ShapedArray(x.shape, x.dtype, x.weak_type)


fft_p = Primitive(
    "fft", _fft_rule, kind="other",
    doc="FFT/IFFT (complex, IFFT scaled by 1/n), RFFT (real -> half spectrum), IRFFT (its inverse, real "
        "result) over the last len(fft_lengths) axes (1 to 3); leading axes are a batch.")


def _fft_type(fft_type) -> FftType:
    if isinstance(fft_type, str):
        try:
            return FftType[fft_type.upper()]
        except KeyError:
            raise ValueError(f"unknown fft_type {fft_type!r}; expected one of FFT, IFFT, RFFT, IRFFT") from None
    return FftType(fft_type)


def fft(x, fft_type, fft_lengths):
    """Discrete Fourier transform over the trailing axes (as ``jax.lax.fft``).

    Args:
      x: the operand; complex for ``FFT``/``IFFT``/``IRFFT``, float32/float64 for ``RFFT``.
      fft_type: an ``FftType`` or its name (``"fft"``, ``"ifft"``, ``"rfft"``, ``"irfft"``).
      fft_lengths: the lengths of the last ``k`` axes transformed (1 <= k <= 3); for ``IRFFT``, the
        lengths of the real result (its last entry may be odd or even).

    Returns:
      The transform: see ``fnarray.core.fft`` for the shapes and dtypes of each type.

    Raises:
      ShapeError: the trailing axes do not match ``fft_lengths``, or more than 3 / no axes.
      DTypeError: a real operand for a complex transform or the reverse.
    """
    lengths = (int(fft_lengths),) if isinstance(fft_lengths, int) else tuple(int(n) for n in fft_lengths)
    get_aval(x)  # a clear error for a non-array before binding
    return fft_p.bind(x, fft_type=_fft_type(fft_type), fft_lengths=lengths)
