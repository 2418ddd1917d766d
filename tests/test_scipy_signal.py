"""``fnarray.scipy.signal`` against ``scipy.signal`` (float64 oracle) on every device, and against
``jax.scipy.signal`` where SciPy and JAX share a quirk (``istft``'s times)."""

from __future__ import annotations

import numpy as np
import pytest

import fnarray as fa
import fnarray.scipy.signal as fs
from fnarray.core.errors import ShapeError

ss = pytest.importorskip("scipy.signal", reason="SciPy is the oracle")

RTOL, ATOL = 2e-4, 2e-4


def _put(device, *xs):
    return [fa.device_put(np.asarray(x), device) for x in xs]


def _close(got, want, msg=""):
    np.testing.assert_allclose(np.asarray(got), want, rtol=RTOL, atol=ATOL, err_msg=msg)


@pytest.mark.parametrize("mode", ["full", "same", "valid"])
def test_convolve_correlate_fftconvolve_1d_and_2d(device, mode):
    rng = np.random.default_rng(0)
    x, k_odd, k_even = (rng.standard_normal(n).astype(np.float32) for n in (40, 7, 4))
    for a, b in [(x, k_odd), (k_odd, x), (x, k_even), (k_even, x)]:
        da, db = _put(device, a, b)
        _close(fs.convolve(da, db, mode=mode), ss.convolve(a, b, mode=mode), f"convolve {mode} {device}")
        _close(fs.correlate(da, db, mode=mode), ss.correlate(a, b, mode=mode), f"correlate {mode} {device}")
        _close(fs.fftconvolve(da, db, mode=mode), ss.fftconvolve(a, b, mode=mode), f"fftconvolve {mode} {device}")
        _close(fs.convolve(da, db, mode=mode, method="fft"), ss.convolve(a, b, mode=mode))
    A, B = rng.standard_normal((9, 8)).astype(np.float32), rng.standard_normal((3, 4)).astype(np.float32)
    for a, b in [(A, B), (B, A), (A, B[:, :3])]:
        da, db = _put(device, a, b)
        _close(fs.convolve2d(da, db, mode=mode), ss.convolve2d(a, b, mode=mode), f"convolve2d {mode} {device}")
        _close(fs.correlate2d(da, db, mode=mode), ss.correlate2d(a, b, mode=mode), f"correlate2d {mode} {device}")
        _close(fs.fftconvolve(da, db, mode=mode), ss.fftconvolve(a, b, mode=mode), f"fftconvolve 2d {device}")


def test_complex_axes_and_errors():
    rng = np.random.default_rng(1)
    xc = (rng.standard_normal(20) + 1j * rng.standard_normal(20)).astype(np.complex64)
    k = rng.standard_normal(5).astype(np.float32)
    _close(fs.correlate(xc, k, mode="same"), ss.correlate(xc, k, mode="same"))
    _close(fs.fftconvolve(xc, xc[:6], mode="full"), ss.fftconvolve(xc, xc[:6], mode="full"))
    batch, ker = rng.standard_normal((3, 30)).astype(np.float32), rng.standard_normal((1, 5)).astype(np.float32)
    _close(fs.fftconvolve(batch, ker, mode="same", axes=1), ss.fftconvolve(batch, ker, mode="same", axes=1))
    with pytest.raises(ValueError, match="mode"):
        fs.convolve(k, k, mode="middle")
    with pytest.raises(ShapeError, match="same rank"):
        fs.convolve(k, batch)
    with pytest.raises(ShapeError, match="valid"):
        fs.convolve(np.ones((2, 5)), np.ones((3, 4)), mode="valid")
    with pytest.raises(NotImplementedError, match="fill"):
        fs.convolve2d(np.ones((3, 3)), np.ones((2, 2)), boundary="wrap")


def test_detrend(device):
    rng = np.random.default_rng(2)
    d = (rng.standard_normal((3, 40)) + np.arange(40) * 0.3).astype(np.float32)
    (dd,) = _put(device, d)
    for t in ("linear", "constant"):
        _close(fs.detrend(dd, type=t), ss.detrend(d, type=t), f"{t} on {device}")
    _close(fs.detrend(dd, bp=[10, 25]), ss.detrend(d, bp=[10, 25]))
    _close(fs.detrend(dd.T, axis=0), ss.detrend(d.T, axis=0))
    with pytest.raises(ValueError, match="type"):
        fs.detrend(dd, type="quadratic")


STFT_CASES = [dict(nperseg=64), dict(nperseg=50, noverlap=10, nfft=64),
              dict(nperseg=64, window="hamming", detrend="linear"), dict(nperseg=32, return_onesided=False)]


@pytest.mark.parametrize("case", range(len(STFT_CASES)))
def test_stft_istft(device, case):
    kw = STFT_CASES[case]
    sig = np.random.default_rng(3).standard_normal((2, 300)).astype(np.float32)
    (ds,) = _put(device, sig)
    f1, t1, z1 = fs.stft(ds, fs=10.0, **kw)
    f2, t2, z2 = ss.stft(sig, fs=10.0, **kw)
    _close(f1, f2), _close(t1, t2)
    np.testing.assert_allclose(np.asarray(z1), z2, rtol=1e-3, atol=1e-5, err_msg=f"stft {kw} on {device}")
    inv = {k: v for k, v in kw.items() if k not in ("detrend", "return_onesided")}
    onesided = kw.get("return_onesided", True)
    tt1, x1 = fs.istft(z1, fs=10.0, input_onesided=onesided, **inv)
    tt2, x2 = ss.istft(z2, fs=10.0, input_onesided=onesided, **inv)
    _close(tt1, tt2)
    np.testing.assert_allclose(np.asarray(x1), x2, rtol=1e-3, atol=1e-4, err_msg=f"istft {kw} on {device}")
    if "detrend" not in kw:   # the round trip recovers the signal
        np.testing.assert_allclose(np.asarray(x1)[..., :300].real, sig, rtol=1e-3, atol=1e-4)


WELCH_CASES = [dict(nperseg=64), dict(nperseg=50, noverlap=10, nfft=65),
               dict(scaling="spectrum", window="blackman", nperseg=40), dict(average="median", nperseg=32),
               dict(detrend="linear", nperseg=64), dict(return_onesided=False, nperseg=64)]


@pytest.mark.parametrize("case", range(len(WELCH_CASES)))
def test_welch(device, case):
    kw = WELCH_CASES[case]
    sig = np.random.default_rng(4).standard_normal((2, 300)).astype(np.float32)
    (ds,) = _put(device, sig)
    f1, p1 = fs.welch(ds, fs=3.0, **kw)
    f2, p2 = ss.welch(sig, fs=3.0, **kw)
    _close(f1, f2)
    np.testing.assert_allclose(np.asarray(p1), p2, rtol=1e-3, atol=1e-6, err_msg=f"welch {kw} on {device}")


def test_matches_jax_signatures_and_istft_times():
    jsig = pytest.importorskip("jax.scipy.signal", reason="JAX is the second oracle")
    import inspect
    for name in fs.__all__:
        want = list(inspect.signature(getattr(jsig, name)).parameters)
        assert list(inspect.signature(getattr(fs, name)).parameters) == want, name
    sig = np.random.default_rng(5).standard_normal((2, 200)).astype(np.float32)
    _, _, z = fs.stft(sig, nperseg=32)
    t, _ = fs.istft(z, nperseg=32)
    _, _, jz = jsig.stft(sig, nperseg=32)
    jt, _ = jsig.istft(jz, nperseg=32)
    _close(t, np.asarray(jt))
