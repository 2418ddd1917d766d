"""``fnarray.numpy.fft``: the array API (2024.12) fft extension, as ``numpy.fft`` / ``jax.numpy.fft``.

Every transform lowers to the ``fft`` primitive (``fnarray.core.fft``: up to 3 trailing axes per equation;
more axes are chained), so it runs eagerly, under ``jit``, ``grad`` and ``vmap``, on every backend.

Dtypes (as JAX, 32-bit by default): complex transforms of float32 (and of integers, bools, float16 and
bfloat16) compute in complex64, of float64 in complex128; complex64 stays complex64 and complex128 stays
complex128. The real transforms (``rfft``, ``ihfft``) take real input and give the complex dtype of its
precision; ``irfft`` and ``hfft`` give the real dtype of their input's precision.

``norm`` (as NumPy): ``"backward"`` (the default, ``None``) leaves the forward transform unscaled and scales
the inverse by ``1/n``; ``"ortho"`` scales both by ``1/sqrt(n)``; ``"forward"`` scales the forward by ``1/n``
and leaves the inverse unscaled. ``n`` (or ``s``) crops or zero-pads the input along each transformed axis
before the transform (for ``irfft``/``hfft``, the half spectrum is cropped or padded to ``n//2 + 1``).
"""

from __future__ import annotations

import math
import operator

import numpy as np

from fnarray.core import dtypes, lax
from fnarray.core.errors import DTypeError, ShapeError
from fnarray.core.fft import MAX_FFT_RANK, FftType, fft_p
from fnarray.numpy._util import asarray_internal, check_arraylike, normalize_axis

__all__ = ["fft", "ifft", "fftn", "ifftn", "rfft", "irfft", "rfftn", "irfftn", "hfft", "ihfft", "fft2", "ifft2",
           "rfft2", "irfft2", "fftfreq", "rfftfreq", "fftshift", "ifftshift"]

_NORMS = ("backward", "ortho", "forward")


# ----------------------------------------------------------------------------- helpers


def _norm(norm, name):
    if norm is None:
        return "backward"
    if norm not in _NORMS:
        raise ValueError(f"{name}: norm={norm!r} is not one of 'backward', 'ortho', 'forward' (or None)")
    return norm


def _swap(norm):
    return {"backward": "forward", "forward": "backward", "ortho": "ortho"}[norm]


def _scale(x, norm, n, inverse):
    """``x`` scaled for ``norm`` (the primitive's IFFT/IRFFT already divide by ``n``)."""
    if norm == "backward":
        return x
    if norm == "ortho":
        f = math.sqrt(n) if inverse else 1.0 / math.sqrt(n)
    else:  # "forward"
        f = float(n) if inverse else 1.0 / n
    d = lax.dtype(x)
    return lax.mul(x, np.asarray(f, d)[()])


def _complex_input(name, x):
    check_arraylike(name, x)
    x = asarray_internal(x)
    d = x.dtype
    if dtypes.is_complex(d):
        return x
    return lax.convert_element_type(x, dtypes.complex128 if dtypes.to_inexact(d) == dtypes.float64 else dtypes.complex64)


def _real_input(name, x):
    check_arraylike(name, x)
    x = asarray_internal(x)
    d = x.dtype
    if dtypes.is_complex(d):
        raise DTypeError(f"{name} needs a real input, got {d.name}; use {name.replace('r', '', 1)} for complex "
                         "input, or take the real part first")
    if d in (dtypes.float32, dtypes.float64):
        return x
    return lax.convert_element_type(x, dtypes.to_inexact(d) if dtypes.is_int(d) else dtypes.float32)


def _length(n, name, what="n"):
    try:
        n = operator.index(n)
    except TypeError:
        raise TypeError(f"{name}: {what} must be an int, got {type(n).__name__} {n!r}") from None
    if n < 1:
        raise ValueError(f"{name}: invalid number of FFT data points ({n}) specified; {what} must be >= 1")
    return n



def _n_as_s(n, name):
    """A 1-D transform's length ``n`` as the ``s`` of the n-D code (where ``-1`` means "as the input",
    as in NumPy 2's ``s``; ``n=-1`` is an error in NumPy and JAX)."""
    return None if n is None else (_length(n, name),)


def _resize(x, axis, n):
    """``x`` cropped or zero-padded to ``n`` entries along ``axis``."""
    shape = lax.shape(x)
    have = shape[axis]
    if have == n:
        return x
    if have > n:
        lim = list(shape)
        lim[axis] = n
        return lax.slice(x, (0,) * len(shape), tuple(lim))
    cfg = [(0, 0, 0)] * len(shape)
    cfg[axis] = (0, n - have, 0)
    return lax.pad(x, np.zeros((), lax.dtype(x))[()], cfg)


def _on_trailing(x, axes, fn):
    """``fn`` applied with ``axes`` (in that order) moved to the end, and the axes moved back."""
    nd = len(lax.shape(x))
    rest = [i for i in range(nd) if i not in axes]
    perm = rest + list(axes)
    if perm != list(range(nd)):
        x = lax.transpose(x, perm)
    y = fn(x)
    if perm != list(range(nd)):
        y = lax.transpose(y, [perm.index(i) for i in range(nd)])
    return y


def _prim(x, fft_type, lengths):
    return fft_p.bind(x, fft_type=fft_type, fft_lengths=tuple(lengths))


def _c2c(x, axes, inverse):
    """Complex transform over ``axes`` (already sized), in equations of at most 3 axes."""
    kind = FftType.IFFT if inverse else FftType.FFT
    axes = list(axes)
    while axes:
        chunk, axes = axes[-MAX_FFT_RANK:], axes[:-MAX_FFT_RANK]
        x = _on_trailing(x, chunk, lambda v, c=chunk: _prim(v, kind, [lax.shape(v)[-len(c) + i]
                                                                      for i in range(len(c))]))
    return x


def _axes_and_sizes(name, x, s, axes):
    """Normalised ``axes`` (order kept) and the output size ``s`` of each (``-1`` or absent: as the input)."""
    nd = len(lax.shape(x))
    if axes is None:
        axes = list(range(nd)) if s is None else list(range(nd - len(s), nd))
    else:
        axes = [normalize_axis(a, nd, f"{name} axes") for a in ((axes,) if isinstance(axes, int) else axes)]
    if len(set(axes)) != len(axes):
        raise ShapeError(f"{name}: repeated axis in axes={axes}")
    if s is None:
        sizes = [None] * len(axes)
    else:
        s = (s,) if isinstance(s, int) else tuple(s)
        if len(s) != len(axes):
            raise ShapeError(f"{name}: s={s} and axes={axes} must have the same length")
        sizes = [None if _is_minus_one(k) else _length(k, name, "each entry of s") for k in s]
    return axes, sizes


def _is_minus_one(k):
    return not isinstance(k, float) and k == -1


# ----------------------------------------------------------------------------- complex transforms


def _fftn(name, x, s, axes, norm, inverse):
    norm = _norm(norm, name)
    x = _complex_input(name, x)
    axes, sizes = _axes_and_sizes(name, x, s, axes)
    for a, k in zip(axes, sizes, strict=True):
        if k is not None:
            x = _resize(x, a, k)
    if not axes:
        return x
    n = math.prod(lax.shape(x)[a] for a in axes)
    if n == 0:
        raise ValueError(f"{name}: invalid number of FFT data points (0) in the input of shape {lax.shape(x)}")
    return _scale(_c2c(x, axes, inverse), norm, n, inverse)


def fft(x, /, n=None, axis=-1, norm="backward"):
    """The 1-D discrete Fourier transform along ``axis`` (array API ``fft.fft``; ``numpy.fft.fft``).

    Args:
      x: the input (real inputs are converted: float64 to complex128, others to complex64).
      n: the transform length: the input is cropped or zero-padded to it (default: its length).
      axis: the axis transformed.
      norm: ``"backward"`` (default: unscaled), ``"ortho"`` (``1/sqrt(n)``) or ``"forward"`` (``1/n``).

    Returns:
      A complex array of ``x``'s shape with ``n`` entries along ``axis``.

    Raises:
      ValueError: ``n < 1``, or an unknown ``norm``. AxisError: ``axis`` out of range.
    """
    return _fftn("fft", x, _n_as_s(n, "fft"), (axis,), norm, False)


def ifft(x, /, n=None, axis=-1, norm="backward"):
    """The 1-D inverse discrete Fourier transform (array API ``fft.ifft``); ``1/n`` by default.

    Args and Raises as ``fft``. Returns a complex array with ``n`` entries along ``axis``.
    """
    return _fftn("ifft", x, _n_as_s(n, "ifft"), (axis,), norm, True)


def fftn(x, /, s=None, axes=None, norm="backward"):
    """The n-D discrete Fourier transform over ``axes`` (array API ``fft.fftn``; ``numpy.fft.fftn``).

    Args:
      x: the input (converted to complex as in ``fft``).
      s: the length of each transformed axis (``-1``: the input's); default: the input's.
      axes: the axes (default: all, or the last ``len(s)`` when ``s`` is given).
      norm: as ``fft``, with ``n`` the product of the transformed lengths.

    Returns:
      A complex array; each transformed axis has its length from ``s``.

    Raises:
      ValueError: an entry of ``s`` below 1, ``s`` and ``axes`` of different lengths, a repeated axis.
    """
    return _fftn("fftn", x, s, axes, norm, False)


def ifftn(x, /, s=None, axes=None, norm="backward"):
    """The n-D inverse discrete Fourier transform (array API ``fft.ifftn``). Args, Returns, Raises as ``fftn``."""
    return _fftn("ifftn", x, s, axes, norm, True)


def fft2(x, /, s=None, axes=(-2, -1), norm="backward"):
    """``fftn`` over two axes (``numpy.fft.fft2``)."""
    return _fftn("fft2", x, s, axes, norm, False)


def ifft2(x, /, s=None, axes=(-2, -1), norm="backward"):
    """``ifftn`` over two axes (``numpy.fft.ifft2``)."""
    return _fftn("ifft2", x, s, axes, norm, True)


# ----------------------------------------------------------------------------- real transforms


def _rfftn(name, x, s, axes, norm):
    norm = _norm(norm, name)
    x = _real_input(name, x)
    axes, sizes = _axes_and_sizes(name, x, s, axes)
    if not axes:
        raise ShapeError(f"{name} needs at least one axis")
    for a, k in zip(axes, sizes, strict=True):
        if k is not None:
            x = _resize(x, a, k)
    shape = lax.shape(x)
    n = math.prod(shape[a] for a in axes)
    if n == 0:
        raise ValueError(f"{name}: invalid number of FFT data points (0) in the input of shape {shape}")
    last = axes[-MAX_FFT_RANK:]
    y = _on_trailing(x, last, lambda v: _prim(v, FftType.RFFT, [shape[a] for a in last]))
    y = _c2c(y, axes[:-MAX_FFT_RANK], False)
    return _scale(y, norm, n, False)


def _irfftn(name, x, s, axes, norm):
    norm = _norm(norm, name)
    x = _complex_input(name, x)
    axes, sizes = _axes_and_sizes(name, x, s, axes)
    if not axes:
        raise ShapeError(f"{name} needs at least one axis")
    shape = lax.shape(x)
    out = [shape[a] if k is None else k for a, k in zip(axes, sizes, strict=True)]
    if sizes[-1] is None:
        out[-1] = 2 * (shape[axes[-1]] - 1)
        if out[-1] < 1:
            raise ValueError(f"{name}: invalid number of data points ({out[-1]}) from an input of length "
                             f"{shape[axes[-1]]} along axis {axes[-1]}; pass n (or s)")
    for i, (a, k) in enumerate(zip(axes, out, strict=True)):
        x = _resize(x, a, k // 2 + 1 if i == len(axes) - 1 else k)
    n = math.prod(out)
    x = _c2c(x, axes[:-MAX_FFT_RANK], True)
    last = axes[-MAX_FFT_RANK:]
    y = _on_trailing(x, last, lambda v: _prim(v, FftType.IRFFT, out[-len(last):]))
    return _scale(y, norm, n, True)


def rfft(x, /, n=None, axis=-1, norm="backward"):
    """The 1-D transform of real input: the ``n//2 + 1`` non-negative frequency terms (array API ``fft.rfft``).

    Args:
      x: a real input (integers, bools, float16 and bfloat16 compute in float32).
      n: the transform length (the input is cropped or zero-padded); default its length.
      axis, norm: as ``fft``.

    Returns:
      complex64 (complex128 for float64 input) with ``n//2 + 1`` entries along ``axis``.

    Raises:
      DTypeError: a complex input. ValueError: ``n < 1`` or an unknown ``norm``.
    """
    return _rfftn("rfft", x, _n_as_s(n, "rfft"), (axis,), norm)


def irfft(x, /, n=None, axis=-1, norm="backward"):
    """The inverse of ``rfft`` (array API ``fft.irfft``): a real result with ``n`` entries along ``axis``.

    Args:
      x: the half spectrum (converted to complex as in ``fft``).
      n: the length of the result (default ``2 * (m - 1)`` for ``m`` input entries); the input is cropped or
        zero-padded to ``n//2 + 1`` entries. The imaginary parts of the terms that must be real are ignored.
      axis, norm: as ``fft``.

    Returns:
      float32 (float64 for complex128 input).

    Raises:
      ValueError: ``n < 1`` (or an input of one entry without ``n``), an unknown ``norm``.
    """
    return _irfftn("irfft", x, _n_as_s(n, "irfft"), (axis,), norm)


def rfftn(x, /, s=None, axes=None, norm="backward"):
    """The n-D transform of real input (array API ``fft.rfftn``): the last axis of ``axes`` is halved.

    Args, Raises as ``fftn`` (and ``rfft`` for dtypes). Returns a complex array whose last transformed axis
    has ``s[-1]//2 + 1`` entries.
    """
    return _rfftn("rfftn", x, s, axes, norm)


def irfftn(x, /, s=None, axes=None, norm="backward"):
    """The inverse of ``rfftn`` (array API ``fft.irfftn``); ``s[-1]`` defaults to ``2 * (m - 1)``.

    Args, Raises as ``fftn``. Returns a real array with the lengths ``s`` along ``axes``.
    """
    return _irfftn("irfftn", x, s, axes, norm)


def rfft2(x, /, s=None, axes=(-2, -1), norm="backward"):
    """``rfftn`` over two axes (``numpy.fft.rfft2``)."""
    return _rfftn("rfft2", x, s, axes, norm)


def irfft2(x, /, s=None, axes=(-2, -1), norm="backward"):
    """``irfftn`` over two axes (``numpy.fft.irfft2``)."""
    return _irfftn("irfft2", x, s, axes, norm)


def hfft(x, /, n=None, axis=-1, norm="backward"):
    """The transform of a Hermitian-symmetric signal given by its first half: a real spectrum (array API
    ``fft.hfft``; ``numpy.fft.hfft``): ``irfft(conj(x), n)`` with the ``norm`` direction swapped.

    Args, Raises as ``irfft``. Returns a real array with ``n`` (default ``2 * (m - 1)``) entries along ``axis``.
    """
    x = _complex_input("hfft", x)
    return _irfftn("hfft", lax.conj(x), _n_as_s(n, "hfft"), (axis,), _swap(_norm(norm, "hfft")))


def ihfft(x, /, n=None, axis=-1, norm="backward"):
    """The inverse of ``hfft`` (array API ``fft.ihfft``): ``conj(rfft(x, n))`` with the ``norm`` direction
    swapped.

    Args, Raises as ``rfft``. Returns a complex array with ``n//2 + 1`` entries along ``axis``.
    """
    return lax.conj(_rfftn("ihfft", x, _n_as_s(n, "ihfft"), (axis,), _swap(_norm(norm, "ihfft"))))


# ----------------------------------------------------------------------------- frequencies and shifts


def _freqs(name, ints, n, d, dtype, device):
    from fnarray.numpy._creation import asarray
    from fnarray.core.array import Array
    dt = dtypes.canonicalize(dtype) if dtype is not None else dtypes.default_float()
    if not dtypes.is_float(dt):
        raise DTypeError(f"{name}: dtype must be a real floating dtype, got {dt.name}")
    if isinstance(d, Array) or hasattr(d, "aval"):
        out = asarray(ints.astype(dt), device=device)
        d = lax.convert_element_type(asarray_internal(d), dt)   # (a float32 d beside float64 results under x64)
        return lax.div(out, lax.mul(d, np.asarray(n, dt)[()]))
    return asarray((ints / (n * float(d))).astype(dt), device=device)


def fftfreq(n, /, d=1.0, *, dtype=None, device=None):
    """The sample frequencies of an ``n``-point ``fft`` (array API ``fft.fftfreq``): ``[0, 1, ..., -1] / (d n)``.

    Args:
      n: the window length (an int >= 1).
      d: the sample spacing.
      dtype: a real floating dtype (default float32). device: where the result lives.

    Returns:
      An array of shape ``(n,)``: ``0, 1, ..., ceil(n/2) - 1, -floor(n/2), ..., -1``, divided by ``d * n``.

    Raises:
      ValueError: ``n < 1``. DTypeError: a non-float ``dtype``.
    """
    n = _length(n, "fftfreq")
    ints = np.concatenate([np.arange(0, (n - 1) // 2 + 1), np.arange(-(n // 2), 0)]).astype(np.float64)
    return _freqs("fftfreq", ints, n, d, dtype, device)


def rfftfreq(n, /, d=1.0, *, dtype=None, device=None):
    """The sample frequencies of an ``n``-point ``rfft`` (array API ``fft.rfftfreq``): ``[0, ..., n//2] / (d n)``.

    Args, Raises as ``fftfreq``. Returns an array of shape ``(n//2 + 1,)``.
    """
    n = _length(n, "rfftfreq")
    return _freqs("rfftfreq", np.arange(0, n // 2 + 1).astype(np.float64), n, d, dtype, device)


def _shift(name, x, axes, sign):
    from fnarray.numpy._manipulation import roll
    check_arraylike(name, x)
    x = asarray_internal(x)
    nd = x.ndim
    if axes is None:
        axes = tuple(range(nd))
    elif isinstance(axes, int):
        axes = (axes,)
    axes = tuple(normalize_axis(a, nd, f"{name} axes") for a in axes)
    if not axes:
        return x
    shape = x.shape
    return roll(x, [sign * (shape[a] // 2) for a in axes], axes)


def fftshift(x, /, axes=None):
    """The zero-frequency term moved to the centre (array API ``fft.fftshift``): a roll by ``n//2`` along
    each of ``axes`` (default all).

    Args:
      x: any array. axes: an int or a sequence of ints.

    Returns:
      ``x`` rolled; same shape and dtype.

    Raises:
      AxisError: an axis out of range.
    """
    return _shift("fftshift", x, axes, 1)


def ifftshift(x, /, axes=None):
    """The inverse of ``fftshift`` (array API ``fft.ifftshift``): a roll by ``-(n//2)``. Args as ``fftshift``."""
    return _shift("ifftshift", x, axes, -1)

