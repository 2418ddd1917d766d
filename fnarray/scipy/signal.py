"""Signal processing (mirrors ``jax.scipy.signal``, after ``scipy.signal``): direct and FFT convolutions,
``detrend``, and the short-time Fourier transform with Welch's power spectral density.

Direct convolutions are ``lax.conv_general_dilated`` of the first input by the flipped second one (one
batch, one channel), so they run, differentiate and vectorise on every backend; ``fftconvolve``, ``stft``,
``istft`` and ``welch`` use ``fnarray.numpy.fft``. Windows are given by name (``"hann"``, ``"hamming"``,
``"blackman"``, ``"boxcar"``: SciPy's periodic windows, computed here, SciPy is not a dependency) or as an
array of length ``nperseg``.
"""

from __future__ import annotations

import operator

import numpy as np

import fnarray.numpy as fnp
from fnarray import lax
from fnarray.core.errors import ShapeError

__all__ = ["convolve", "convolve2d", "correlate", "correlate2d", "detrend", "fftconvolve", "istft", "stft",
           "welch"]

_MODES = ("full", "same", "valid")


def _check_mode(mode, name):
    if mode not in _MODES:
        raise ValueError(f"{name}: mode must be 'full', 'same' or 'valid', got {mode!r}")


def _conv_real(x, k, mode, precision):
    """Convolution of two real arrays of one rank (``k`` flipped, so a correlation of ``x`` with it)."""
    pads = []
    for m in k.shape:
        lo = {"full": m - 1, "same": m - 1 - (m - 1) // 2, "valid": 0}[mode]
        hi = {"full": m - 1, "same": (m - 1) // 2, "valid": 0}[mode]
        pads.append((lo, hi))
    flipped = fnp.flip(k)
    out = lax.conv_general_dilated(x[None, None], flipped[None, None], (1,) * x.ndim, pads, precision=precision)
    return out[0, 0]


def _convolve_nd(in1, in2, mode, precision, name):
    _check_mode(mode, name)
    in1, in2 = fnp.asarray(in1), fnp.asarray(in2)
    if in1.ndim != in2.ndim:
        raise ShapeError(f"{name}: in1 and in2 must have the same rank, got shapes {in1.shape} and {in2.shape}")
    if in1.ndim == 0:
        raise ShapeError(f"{name}: the inputs must have at least one axis, got scalars")
    if in1.size == 0 or in2.size == 0:
        raise ShapeError(f"{name}: the inputs must be non-empty, got shapes {in1.shape} and {in2.shape}")
    if mode == "valid" and any(a < b for a, b in zip(in1.shape, in2.shape)):
        if not all(a <= b for a, b in zip(in1.shape, in2.shape)):
            raise ShapeError(f"{name}: in 'valid' mode one input must be at least as large as the other in every "
                             f"axis, got shapes {in1.shape} and {in2.shape}")
        in1, in2 = in2, in1            # as SciPy: the larger one slides under the smaller
    dtype = fnp.result_type(in1, in2)
    in1, in2 = in1.astype(dtype), in2.astype(dtype)
    if fnp.issubdtype(dtype, fnp.complexfloating):
        a, b, c, d = fnp.real(in1), fnp.imag(in1), fnp.real(in2), fnp.imag(in2)
        re = _conv_real(a, c, mode, precision) - _conv_real(b, d, mode, precision)
        im = _conv_real(a, d, mode, precision) + _conv_real(b, c, mode, precision)
        return lax.complex(re, im)
    return _conv_real(in1, in2, mode, precision)


def convolve(in1, in2, mode="full", method="auto", precision=None):
    """N-dimensional convolution (mirrors ``jax.scipy.signal.convolve`` / ``scipy.signal.convolve``).

    Args:
      in1, in2: arrays of the same rank (at least 1).
      mode: ``"full"`` (every overlap, shape ``n + k - 1``), ``"same"`` (the shape of ``in1``, centred as
        SciPy), ``"valid"`` (full overlaps only, ``|n - k| + 1``; one input must dominate in every axis).
      method: ``"auto"``/``"direct"`` (a convolution primitive) or ``"fft"`` (``fftconvolve``).
      precision: passed to ``lax.conv_general_dilated``.
    Returns:
      an array of the promoted dtype of the inputs.
    Raises:
      ValueError: an unknown mode or method. ShapeError: ranks differ, scalar or empty inputs, or no
        dominant input in ``"valid"`` mode.
    """
    if method == "fft":
        return fftconvolve(in1, in2, mode=mode)
    if method not in ("auto", "direct"):
        raise ValueError(f"convolve: method must be 'auto', 'direct' or 'fft', got {method!r}")
    return _convolve_nd(in1, in2, mode, precision, "convolve")


def correlate(in1, in2, mode="full", method="auto", precision=None):
    """N-dimensional cross-correlation (mirrors ``scipy.signal.correlate``): ``convolve(in1,
    flip(conj(in2)))``; arguments as ``convolve``."""
    in2 = fnp.asarray(in2)
    return convolve(in1, fnp.flip(fnp.conj(in2)), mode=mode, method=method, precision=precision)


def _check_2d(in1, in2, boundary, fillvalue, name):
    if boundary != "fill" or fillvalue != 0:
        raise NotImplementedError(f"{name} supports boundary='fill' with fillvalue=0 only (as JAX), got "
                                  f"boundary={boundary!r}, fillvalue={fillvalue!r}")
    in1, in2 = fnp.asarray(in1), fnp.asarray(in2)
    if in1.ndim != 2 or in2.ndim != 2:
        raise ShapeError(f"{name} takes 2-d arrays, got shapes {in1.shape} and {in2.shape}")
    return in1, in2


def convolve2d(in1, in2, mode="full", boundary="fill", fillvalue=0, precision=None):
    """2-d convolution (mirrors ``jax.scipy.signal.convolve2d``); ``boundary="fill"``, ``fillvalue=0`` only.

    Raises:
      NotImplementedError: another boundary or fill value. ShapeError: inputs not 2-d.
    """
    in1, in2 = _check_2d(in1, in2, boundary, fillvalue, "convolve2d")
    return _convolve_nd(in1, in2, mode, precision, "convolve2d")


def correlate2d(in1, in2, mode="full", boundary="fill", fillvalue=0, precision=None):
    """2-d cross-correlation (mirrors ``jax.scipy.signal.correlate2d``); ``boundary="fill"``, ``fillvalue=0``
    only. ``"same"`` is centred as SciPy's ``correlate2d`` (which differs from ``correlate``'s for even
    kernel sizes)."""
    in1, in2 = _check_2d(in1, in2, boundary, fillvalue, "correlate2d")
    if mode == "same":
        # SciPy centres correlate2d's "same" window on the flipped product (start k // 2, not (k - 1) // 2)
        return fnp.flip(_convolve_nd(fnp.flip(in1), fnp.conj(in2), mode, precision, "correlate2d"))
    return _convolve_nd(in1, fnp.flip(fnp.conj(in2)), mode, precision, "correlate2d")


def _centered(x, shape, axes):
    index = [slice(None)] * x.ndim
    for ax, n in zip(axes, shape):
        start = (x.shape[ax] - n) // 2
        index[ax] = slice(start, start + n)
    return x[tuple(index)]


def fftconvolve(in1, in2, mode="full", axes=None):
    """Convolution by FFT (mirrors ``jax.scipy.signal.fftconvolve``): transform, multiply, invert.

    Args:
      in1, in2: arrays of the same rank; axes outside ``axes`` must be equal or 1 (they broadcast).
      mode: ``"full"``, ``"same"`` or ``"valid"`` (as ``convolve``).
      axes: the axes convolved over (default all).
    Returns:
      the promoted (inexact) dtype; real inputs give real results.
    Raises:
      ValueError: an unknown mode. ShapeError: ranks differ or non-convolved axes do not broadcast.
    """
    _check_mode(mode, "fftconvolve")
    in1, in2 = fnp.asarray(in1), fnp.asarray(in2)
    if in1.ndim != in2.ndim:
        raise ShapeError(f"fftconvolve: in1 and in2 must have the same rank, got {in1.shape} and {in2.shape}")
    axes = tuple(range(in1.ndim)) if axes is None else tuple(
        operator.index(a) % in1.ndim for a in ((axes,) if np.ndim(axes) == 0 else axes))
    for ax in range(in1.ndim):
        if ax not in axes and in1.shape[ax] != in2.shape[ax] and 1 not in (in1.shape[ax], in2.shape[ax]):
            raise ShapeError(f"fftconvolve: axis {ax} is not convolved and its sizes {in1.shape[ax]} and "
                             f"{in2.shape[ax]} do not broadcast")
    if mode == "valid" and any(in1.shape[a] < in2.shape[a] for a in axes):
        in1, in2 = in2, in1
    dtype = fnp.result_type(in1, in2, fnp.float32)
    full = [in1.shape[a] + in2.shape[a] - 1 for a in axes]
    if fnp.issubdtype(dtype, fnp.complexfloating):
        out = fnp.fft.ifftn(fnp.fft.fftn(in1.astype(dtype), full, axes) * fnp.fft.fftn(in2.astype(dtype), full, axes),
                            full, axes)
    else:
        out = fnp.fft.irfftn(fnp.fft.rfftn(in1.astype(dtype), full, axes) *
                             fnp.fft.rfftn(in2.astype(dtype), full, axes), full, axes)
    out = out.astype(dtype)
    if mode == "full":
        return out
    if mode == "same":
        return _centered(out, [in1.shape[a] for a in axes], axes)
    return _centered(out, [in1.shape[a] - in2.shape[a] + 1 for a in axes], axes)


def detrend(data, axis=-1, type="linear", bp=0, overwrite_data=None):  # noqa: A002 (SciPy's name)
    """Remove the mean (``type="constant"``) or the least-squares line (``"linear"``, piecewise between the
    breakpoints ``bp``) along ``axis`` (mirrors ``jax.scipy.signal.detrend``).

    Args:
      data: an array; axis: the axis; type: ``"linear"``/``"l"`` or ``"constant"``/``"c"``;
      bp: a sorted sequence of breakpoint indices for ``"linear"`` (static ints).
    Returns:
      an inexact array of ``data``'s shape.
    Raises:
      ValueError: an unknown type or breakpoints outside ``(0, n)``.
    """
    if type not in ("linear", "l", "constant", "c"):
        raise ValueError(f"detrend: type must be 'linear' or 'constant', got {type!r}")
    data = fnp.asarray(data)
    if not fnp.issubdtype(data.dtype, fnp.inexact):
        data = data.astype(fnp.result_type(data.dtype, fnp.float32))
    if type in ("constant", "c"):
        return data - fnp.mean(data, axis=axis, keepdims=True)
    x = fnp.moveaxis(data, axis, -1)
    n = x.shape[-1]
    bps = sorted({0, *[operator.index(b) for b in np.atleast_1d(bp)], n})
    if bps[0] < 0 or bps[-1] > n:
        raise ValueError(f"detrend: breakpoints must lie in [0, {n}], got {bp!r}")
    pieces = []
    for lo, hi in zip(bps[:-1], bps[1:]):
        seg = x[..., lo:hi]
        t = fnp.arange(hi - lo, dtype=seg.real.dtype)
        t = t - fnp.mean(t)
        mean = fnp.mean(seg, axis=-1, keepdims=True)
        denom = fnp.sum(t * t)
        slope = fnp.sum(t * (seg - mean), axis=-1, keepdims=True) / fnp.where(denom == 0, 1, denom)
        pieces.append(seg - (mean + slope * t))
    return fnp.moveaxis(fnp.concatenate(pieces, axis=-1), -1, axis)


# ----------------------------------------------------------------------------- spectral analysis

_WINDOWS = {
    "hann": (0.5, 0.5), "hanning": (0.5, 0.5), "hamming": (0.54, 0.46), "blackman": (0.42, 0.5, 0.08),
}


def _window(window, nperseg, dtype):
    """SciPy's periodic (``sym=False``) window of length ``nperseg``, or an array given as the window."""
    if isinstance(window, str) or (isinstance(window, tuple) and window and isinstance(window[0], str)):
        name = window if isinstance(window, str) else window[0]
        if name in ("boxcar", "rect", "rectangular", "ones"):
            return fnp.ones(nperseg, dtype)
        if name not in _WINDOWS:
            raise ValueError(f"window {name!r} is not one of fnarray's windows "
                             f"({', '.join(sorted(_WINDOWS) + ['boxcar'])}); pass the window as an array "
                             "(e.g. from scipy.signal.get_window(name, nperseg))")
        n = np.arange(nperseg) * (2 * np.pi / nperseg)
        coeffs = _WINDOWS[name]
        w = sum(((-1) ** i) * c * np.cos(i * n) for i, c in enumerate(coeffs))
        return fnp.asarray(np.asarray(w, np.float64).astype(dtype))
    w = fnp.asarray(window, dtype)
    if w.ndim != 1 or w.shape[0] != nperseg:
        raise ShapeError(f"the window must be 1-d of length nperseg={nperseg}, got shape {w.shape}")
    return w


def _segments(x, nperseg, step):
    """``x[..., n]`` as overlapping segments ``[..., nseg, nperseg]`` (a gather of static indices)."""
    nseg = (x.shape[-1] - nperseg) // step + 1
    idx = np.arange(nseg)[:, None] * step + np.arange(nperseg)[None, :]
    return x[..., idx]


def _spectral(x, y, fs, window, nperseg, noverlap, nfft, detrend_type, return_onesided, scaling, axis, mode,
              boundary, padded, name):
    x = fnp.asarray(x)
    if not fnp.issubdtype(x.dtype, fnp.inexact):
        x = x.astype(fnp.float32)
    complex_input = fnp.issubdtype(x.dtype, fnp.complexfloating)
    real_dtype = x.real.dtype
    x = fnp.moveaxis(x, axis, -1)
    n = x.shape[-1]
    if nperseg is None:
        nperseg = 256
    nperseg = operator.index(nperseg)
    if nperseg < 1:
        raise ValueError(f"{name}: nperseg must be positive, got {nperseg}")
    if nperseg > n and mode == "psd":
        nperseg = n                       # as SciPy (with a warning there)
    noverlap = nperseg // 2 if noverlap is None else operator.index(noverlap)
    if not 0 <= noverlap < nperseg:
        raise ValueError(f"{name}: noverlap must be in [0, nperseg={nperseg}), got {noverlap}")
    nfft = nperseg if nfft is None else operator.index(nfft)
    if nfft < nperseg:
        raise ValueError(f"{name}: nfft must be at least nperseg={nperseg}, got {nfft}")
    step = nperseg - noverlap
    if boundary is not None:
        if boundary != "zeros":
            raise ValueError(f"{name}: boundary must be 'zeros' or None, got {boundary!r}")
        half = nperseg // 2
        x = fnp.pad(x, [(0, 0)] * (x.ndim - 1) + [(half, half)])
    if padded:
        extra = (-(x.shape[-1] - nperseg) % step) % nperseg
        x = fnp.pad(x, [(0, 0)] * (x.ndim - 1) + [(0, extra)])
    if x.shape[-1] < nperseg:
        raise ValueError(f"{name}: the signal ({n} samples) is shorter than nperseg={nperseg}")
    win = _window(window, nperseg, real_dtype)
    seg = _segments(x, nperseg, step)
    if detrend_type:
        seg = detrend(seg, axis=-1, type=detrend_type)
    seg = seg * win
    onesided = return_onesided and not complex_input
    spec = fnp.fft.rfft(seg, nfft) if onesided else fnp.fft.fft(seg, nfft)
    if mode == "psd":
        scale = 1.0 / (fs * fnp.sum(win * win)) if scaling == "density" else 1.0 / fnp.sum(win) ** 2
        spec = (fnp.conj(spec) * spec).real * scale
        if onesided:   # fold the negative frequencies in: double all but DC (and an even nfft's Nyquist bin)
            end = spec.shape[-1] if nfft % 2 else spec.shape[-1] - 1
            spec = fnp.concatenate([spec[..., :1], spec[..., 1:end] * 2, spec[..., end:]], axis=-1)
    else:
        spec = spec / fnp.sum(win)
    freqs = (np.fft.rfftfreq(nfft, 1 / fs) if onesided else np.fft.fftfreq(nfft, 1 / fs)).astype(real_dtype)
    times = np.arange(nperseg / 2, x.shape[-1] - nperseg / 2 + 1, step) / float(fs)
    if boundary is not None:
        times = times - (nperseg / 2) / fs
    return fnp.asarray(freqs), fnp.asarray(times.astype(real_dtype)), spec, axis


def stft(x, fs=1.0, window="hann", nperseg=256, noverlap=None, nfft=None, detrend=False, return_onesided=True,
         boundary="zeros", padded=True, axis=-1):
    """Short-time Fourier transform (mirrors ``jax.scipy.signal.stft`` / ``scipy.signal.stft``).

    Args:
      x: the signal, along ``axis``; fs: its sampling frequency.
      window: a window name or an array of length ``nperseg``; nperseg: the segment length;
      noverlap: overlap (default ``nperseg // 2``); nfft: FFT length (default ``nperseg``);
      detrend: ``False``, ``"constant"`` or ``"linear"`` per segment; return_onesided: ``rfft`` for
      real input; boundary: ``"zeros"`` (pad ``nperseg // 2`` each side) or ``None``; padded: zero-pad
      the end to a whole number of segments.
    Returns:
      ``(f, t, Zxx)``: frequencies ``[nfreq]``, segment times ``[nseg]``, and ``Zxx[..., nfreq, nseg]``
      (complex), scaled by ``1 / sum(window)`` as SciPy's ``stft``.
    Raises:
      ValueError: bad lengths, overlap or boundary; an unknown window name.
    """
    f, t, spec, _ = _spectral(x, None, fs, window, nperseg, noverlap, nfft, detrend, return_onesided,
                              "spectrum", axis, "stft", boundary, padded, "stft")
    return f, t, fnp.moveaxis(spec, -2, -1)


def welch(x, fs=1.0, window="hann", nperseg=None, noverlap=None, nfft=None, detrend="constant",
          return_onesided=True, scaling="density", axis=-1, average="mean"):
    """Power spectral density by Welch's method (mirrors ``jax.scipy.signal.welch``): the mean (or median)
    of the periodograms of overlapping windowed segments.

    Args:
      as ``stft``; scaling: ``"density"`` (V**2/Hz) or ``"spectrum"`` (V**2); average: ``"mean"`` or
      ``"median"`` (SciPy's bias-corrected median).
    Returns:
      ``(f, Pxx)`` with ``Pxx``'s ``axis`` replaced by the frequencies.
    Raises:
      ValueError: bad scaling or average, as ``stft``.
    """
    if scaling not in ("density", "spectrum"):
        raise ValueError(f"welch: scaling must be 'density' or 'spectrum', got {scaling!r}")
    if average not in ("mean", "median"):
        raise ValueError(f"welch: average must be 'mean' or 'median', got {average!r}")
    f, _, spec, ax = _spectral(x, None, fs, window, nperseg, noverlap, nfft, detrend, return_onesided, scaling,
                               axis, "psd", None, False, "welch")
    if average == "mean":
        p = fnp.mean(spec, axis=-2)
    else:
        k = spec.shape[-2]
        bias = 1.0 + sum(1.0 / (2 * j + 1) - 1.0 / (2 * j) for j in range(1, (k - 1) // 2 + 1))
        p = fnp.median(spec, axis=-2) / bias
    return f, fnp.moveaxis(p, -1, ax)


def istft(Zxx, fs=1.0, window="hann", nperseg=None, noverlap=None, nfft=None, input_onesided=True, boundary=True,
          time_axis=-1, freq_axis=-2):
    """Inverse short-time Fourier transform by weighted overlap-add (mirrors ``jax.scipy.signal.istft``).

    Args:
      Zxx: ``stft``'s result, frequencies on ``freq_axis`` and segments on ``time_axis``; the other
      arguments as ``stft`` (``nperseg`` defaults to the frequencies' length, doubled less one if
      one-sided); boundary: remove the ``nperseg // 2`` samples ``stft`` padded at each end.
    Returns:
      ``(t, x)``: the signal ``x[..., n]`` (real if ``input_onesided``) and ``t = arange(x.shape[0]) / fs``
      (as SciPy and JAX compute it: the sample times for a 1-d signal).
    Raises:
      ValueError: fewer than two axes, equal time and frequency axes, bad lengths.
    """
    Z = fnp.asarray(Zxx)
    if Z.ndim < 2:
        raise ValueError(f"istft needs at least 2 axes (frequencies and segments), got shape {Z.shape}")
    time_axis, freq_axis = time_axis % Z.ndim, freq_axis % Z.ndim
    if time_axis == freq_axis:
        raise ValueError("istft: time_axis and freq_axis must differ")
    Z = fnp.moveaxis(Z, (freq_axis, time_axis), (-1, -2))     # [..., nseg, nfreq]
    nfreq = Z.shape[-1]
    n_default = 2 * (nfreq - 1) if input_onesided else nfreq
    nperseg = n_default if nperseg is None else operator.index(nperseg)
    nfft = (n_default if nfft is None else operator.index(nfft)) if input_onesided else nfreq
    if nfft < nperseg:
        raise ValueError(f"istft: nfft={nfft} is smaller than nperseg={nperseg}")
    noverlap = nperseg // 2 if noverlap is None else operator.index(noverlap)
    if not 0 <= noverlap < nperseg:
        raise ValueError(f"istft: noverlap must be in [0, nperseg={nperseg}), got {noverlap}")
    step = nperseg - noverlap
    real_dtype = Z.real.dtype
    win = _window(window, nperseg, real_dtype)
    seg = fnp.fft.irfft(Z, nfft) if input_onesided else fnp.fft.ifft(Z, nfft)
    seg = seg[..., :nperseg] * (win * fnp.sum(win))            # undo stft's 1/sum(window) scaling
    nseg = Z.shape[-2]
    length = nperseg + (nseg - 1) * step
    idx = (np.arange(nseg)[:, None] * step + np.arange(nperseg)[None, :]).ravel()
    flat = seg.reshape(seg.shape[:-2] + (nseg * nperseg,))
    x = fnp.zeros(seg.shape[:-2] + (length,), seg.dtype).at[..., idx].add(flat)
    norm = np.zeros(length)
    np.add.at(norm, idx, np.tile(np.asarray(win, np.float64) ** 2, nseg))
    if boundary:
        x = x[..., nperseg // 2: length - nperseg // 2]
        norm = norm[nperseg // 2: length - nperseg // 2]
    x = x / fnp.asarray(np.where(norm > 1e-10, norm, 1.0).astype(real_dtype))
    t = np.arange(x.shape[0]) / float(fs)   # SciPy's and JAX's: the first axis (the length for 1-d signals)
    return fnp.asarray(t.astype(real_dtype)), x
