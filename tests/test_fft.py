"""``fnarray.numpy.fft`` and the ``fft`` primitive: values against NumPy in float64 (float32 tolerances),
gradients against finite differences and ``jax.grad``, ``vmap`` against a loop, every backend against numpy:0
(``fallback="error"`` on the kernel backends), and the bad inputs."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest

import fnarray as fa
import fnarray.numpy as fnp
from fnarray import lax

from helpers import assert_close, check_traced, fallback_mode

RNG = np.random.default_rng(15)


def _c(shape, dtype=np.complex64):
    return (RNG.standard_normal(shape) + 1j * RNG.standard_normal(shape)).astype(dtype)


def _r(shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)




# ------------------------------------------------------------------------------------------ values vs NumPy

# (name, input maker, kwargs): every function with odd, even, prime and unit lengths, 1-D to 4-D, norms, n/s.
VALUE_CASES = []
for _n in (1, 5, 7, 8, 13, 16):
    VALUE_CASES += [("fft", _c((3, _n)), {}), ("ifft", _c((_n,)), {}), ("rfft", _r((2, _n)), {}),
                    ("ihfft", _r((_n,)), {})]
    if _n > 1:
        VALUE_CASES += [("irfft", _c((2, _n // 2 + 1)), {"n": _n}), ("hfft", _c((_n // 2 + 1,)), {"n": _n})]
for _norm in ("backward", "ortho", "forward", None):
    VALUE_CASES += [("fft", _c((4, 6)), {"norm": _norm, "axis": 0}), ("ifft", _c((9,)), {"norm": _norm}),
                    ("rfft", _r((10,)), {"norm": _norm}), ("irfft", _c((6,)), {"norm": _norm}),
                    ("fftn", _c((3, 4, 5)), {"norm": _norm}), ("ifftn", _c((3, 4)), {"norm": _norm}),
                    ("rfftn", _r((3, 6)), {"norm": _norm}), ("irfftn", _c((4, 3)), {"norm": _norm}),
                    ("hfft", _c((5,)), {"norm": _norm}), ("ihfft", _r((7,)), {"norm": _norm})]
VALUE_CASES += [
    ("fft", _c((6,)), {"n": 9}), ("fft", _c((6,)), {"n": 4}), ("ifft", _c((2, 6)), {"n": 11, "axis": 0}),
    ("rfft", _r((9,)), {"n": 12}), ("rfft", _r((9,)), {"n": 5}), ("irfft", _c((5,)), {}),
    ("irfft", _c((5,)), {"n": 9}), ("irfft", _c((3, 5)), {"n": 4, "axis": 0}), ("hfft", _c((4,)), {}),
    ("fftn", _c((3, 4, 5)), {"axes": (0, 2)}), ("fftn", _c((3, 4)), {"s": (5, 3)}),
    ("fftn", _c((2, 3, 2, 3)), {}),                       # 4 axes: two chained equations
    ("fftn", _c((3, 4, 5)), {"s": (-1, 6), "axes": (2, 0)}),
    ("ifftn", _c((2, 3, 4, 2)), {"axes": (3, 0, 1, 2)}),
    ("rfftn", _r((3, 4, 5)), {}), ("rfftn", _r((3, 4, 5)), {"axes": (2, 0)}),
    ("rfftn", _r((2, 3, 2, 4)), {}), ("rfftn", _r((4, 6)), {"s": (5, 7)}),
    ("irfftn", _c((3, 4, 3)), {}), ("irfftn", _c((3, 4)), {"s": (3, 5)}),
    ("irfftn", _c((2, 3, 2, 3)), {}), ("irfftn", _c((5, 4)), {"axes": (1, 0)}),
    ("fft2", _c((2, 3, 4)), {}), ("ifft2", _c((3, 5)), {}), ("rfft2", _r((4, 5)), {}),
    ("irfft2", _c((4, 3)), {"s": (4, 5)}),
    ("fft", _c((2, 7), np.complex128), {}), ("rfft", _r((8,), np.float64), {}),
    ("irfft", _c((5,), np.complex128), {}), ("fftn", _r((3, 4)), {}),   # real input to a complex transform
    ("fft", np.arange(6, dtype=np.int32), {}), ("rfft", np.arange(6, dtype=np.int32), {}),
]


def _expected_dtype(name, x):
    wide = x.dtype in (np.float64, np.complex128)
    if name in ("irfft", "irfftn", "irfft2", "hfft"):
        return np.float64 if wide else np.float32
    return np.complex128 if wide else np.complex64


@pytest.mark.filterwarnings("ignore:`axes` should not be `None`:DeprecationWarning")  # NumPy's, for s alone
@pytest.mark.parametrize("name,x,kw", VALUE_CASES,
                         ids=[f"{c[0]}-{c[1].shape}-{i}" for i, c in enumerate(VALUE_CASES)])
@pytest.mark.enable_x64
def test_values_vs_numpy(name, x, kw):
    want = getattr(np.fft, name)(x.astype(np.complex128 if x.dtype.kind == "c" else np.float64), **kw)
    got = getattr(fnp.fft, name)(fnp.asarray(x), **kw)
    assert_close(got, want, _expected_dtype(name, x), rtol=2e-5, atol=2e-5 * max(1.0, np.abs(want).max()),
                 msg=f"{name}{x.shape} {kw}")


@pytest.mark.enable_x64
def test_jit_and_dtypes_kept():
    x = _c((4, 8))
    prog = check_traced(lambda v: fnp.fft.fft(v), fnp.asarray(x))
    assert [e.primitive.name for e in prog.eqns] == ["fft"]
    assert fa.jit(fnp.fft.fft)(fnp.asarray(x)).dtype == np.complex64
    assert fnp.fft.rfft(fnp.asarray(_r((8,), np.float64))).dtype == np.complex128
    assert fnp.fft.irfft(fnp.asarray(_c((5,), np.complex128))).dtype == np.float64
    assert fnp.fft.rfft(fnp.asarray(_r((8,)).astype(np.float16))).dtype == np.complex64


@pytest.mark.enable_x64
def test_freqs_and_shifts():
    for n in (1, 4, 7, 10):
        for d in (1.0, 0.25):
            # the default float: float64 with x64 on, as jax.numpy.fft.fftfreq
            assert_close(fnp.fft.fftfreq(n, d), np.fft.fftfreq(n, d), np.float64, msg=f"fftfreq {n} {d}")
            assert_close(fnp.fft.rfftfreq(n, d=d), np.fft.rfftfreq(n, d), np.float64, msg=f"rfftfreq {n} {d}")
    assert fnp.fft.fftfreq(8, dtype=fnp.float64).dtype == np.float64
    x = np.arange(30, dtype=np.int32).reshape(5, 6)
    for axes in (None, 0, (1,), (0, 1), -1):
        assert_close(fnp.fft.fftshift(fnp.asarray(x), axes), np.fft.fftshift(x, axes), np.int32)
        assert_close(fnp.fft.ifftshift(fnp.asarray(x), axes=axes), np.fft.ifftshift(x, axes), np.int32)
    d = fnp.asarray(np.float32(0.5))
    assert_close(fa.jit(lambda d: fnp.fft.fftfreq(6, d))(d), np.fft.fftfreq(6, 0.5), np.float64)


def test_lax_fft_matches_jax():
    import jax
    x = _c((2, 4, 6))
    for t, lengths, v in [("fft", (4, 6), x), ("ifft", (6,), x), ("rfft", (4, 6), x.real.copy()),
                          ("irfft", (4, 10), x)]:
        got = lax.fft(fnp.asarray(v), t, lengths)
        want = jax.lax.fft(v, t.upper(), lengths)
        assert_close(got, np.asarray(want), np.asarray(want).dtype, rtol=2e-5, atol=2e-5, msg=t)


# ------------------------------------------------------------------------------------------ gradients

def _real_loss(f, w):
    """A real scalar of a transform's output (weights ``w`` so that every entry matters)."""
    def loss(x):
        y = f(x)
        if np.dtype(y.dtype).kind == "c":
            return fnp.sum(fnp.real(y) * w) + fnp.sum(fnp.imag(y) ** 2 * w)
        return fnp.sum(y * w) + fnp.sum(y ** 2)
    return loss


def _jax_loss(f, w):
    import jax.numpy as jnp  # noqa: PLC0415

    def loss(x):
        y = f(x)
        if jnp.iscomplexobj(y):
            return jnp.sum(jnp.real(y) * w) + jnp.sum(jnp.imag(y) ** 2 * w)
        return jnp.sum(y * w) + jnp.sum(y ** 2)
    return loss


# (name, kwargs, real input?, input shape): real-to-complex and back, odd and even lengths, n-D.
GRAD_CASES = [
    ("fft", {}, False, (3, 5)), ("ifft", {"norm": "ortho"}, False, (6,)), ("fft", {"n": 8}, False, (6,)),
    ("fft", {}, True, (7,)),
    ("rfft", {}, True, (8,)), ("rfft", {}, True, (7,)), ("rfft", {"n": 10, "norm": "forward"}, True, (2, 7)),
    ("irfft", {}, False, (5,)), ("irfft", {"n": 9}, False, (5,)), ("irfft", {"n": 6}, False, (2, 4)),
    ("rfftn", {}, True, (4, 6)), ("rfftn", {}, True, (3, 5)), ("irfftn", {}, False, (4, 3)),
    ("irfftn", {"s": (3, 5)}, False, (3, 3)), ("fftn", {}, False, (2, 3, 4)),
    ("hfft", {}, False, (4,)), ("ihfft", {}, True, (7,)),
]


def _fd_check(loss, x, got, real, msg):
    """Central finite differences in float64 along a random direction (real and imaginary parts)."""
    v = _r(x.shape, np.float64) if real else _c(x.shape, np.complex128)
    eps = 1e-6
    fd = (float(loss(fnp.asarray(x + eps * v))) - float(loss(fnp.asarray(x - eps * v)))) / (2 * eps)
    # JAX's convention: the cotangent of z is d/dre - i d/dim, so the directional derivative is re(g * v).
    dd = float(np.sum(np.real(np.asarray(got) * v)))
    assert abs(fd - dd) <= 1e-6 * max(1.0, abs(fd)), f"{msg}: finite difference {fd} vs grad {dd}"


@pytest.mark.filterwarnings("ignore:`axes` should not be `None`:DeprecationWarning")
@pytest.mark.parametrize("name,kw,real,shape", GRAD_CASES, ids=[f"{c[0]}-{c[3]}-{i}" for i, c in enumerate(GRAD_CASES)])
@pytest.mark.enable_x64
def test_grad_vs_finite_differences(name, kw, real, shape):
    x = _r(shape, np.float64) if real else _c(shape, np.complex128)
    w = RNG.standard_normal(getattr(np.fft, name)(x, **kw).shape)
    loss = _real_loss(lambda v: getattr(fnp.fft, name)(v, **kw), fnp.asarray(w))
    got = fa.jit(fa.grad(loss))(fnp.asarray(x))
    assert got.dtype == x.dtype
    _fd_check(loss, x, got, real, f"grad {name} {kw}")


# Against jax.grad (one jitted JAX function for several transforms: JAX's eager grads cost seconds each here).
JAX_GRAD_CASES = [("rfft", {}, True, (2, 8)), ("rfft", {}, True, (7,)), ("irfft", {}, False, (5,)),
                  ("irfft", {"n": 9}, False, (2, 5)), ("rfftn", {}, True, (3, 5)), ("irfftn", {}, False, (4, 3)),
                  ("fft", {"norm": "ortho"}, False, (3, 5)), ("ihfft", {}, True, (6,)), ("hfft", {}, False, (4,))]


@pytest.mark.enable_x64
def test_grad_vs_jax():
    import jax
    import jax.numpy as jnp
    xs = [_r(shape, np.float64) if real else _c(shape, np.complex128) for _, _, real, shape in JAX_GRAD_CASES]
    ws = [RNG.standard_normal(getattr(np.fft, n)(x, **kw).shape) for (n, kw, _, _), x in zip(JAX_GRAD_CASES, xs,
                                                                                            strict=True)]
    with jax.enable_x64(True):
        def total(args):
            return sum(_jax_loss(lambda v, n=n, kw=kw: getattr(jnp.fft, n)(v, **kw), jnp.asarray(w))(x)
                       for (n, kw, _, _), x, w in zip(JAX_GRAD_CASES, args, ws, strict=True))
        want = [np.asarray(g) for g in jax.jit(jax.grad(total))([jnp.asarray(x) for x in xs])]

    def fa_total(args):
        return sum(_real_loss(lambda v, n=n, kw=kw: getattr(fnp.fft, n)(v, **kw), fnp.asarray(w))(x)
                   for (n, kw, _, _), x, w in zip(JAX_GRAD_CASES, args, ws, strict=True))
    got = fa.jit(fa.grad(fa_total))([fnp.asarray(x) for x in xs])
    for (n, kw, _, _), g, w in zip(JAX_GRAD_CASES, got, want, strict=True):
        assert_close(g, w, w.dtype, rtol=1e-9, atol=1e-9, msg=f"grad {n} {kw} vs jax.grad")


@pytest.mark.enable_x64
def test_second_order():
    x = _r((6,), np.float64)

    def f(v):
        return fnp.sum(fnp.fft.irfft(fnp.fft.rfft(v) ** 2, n=6) ** 2)
    g = fa.jit(fa.grad(f))
    h = np.asarray(fa.jit(fa.hessian(f))(fnp.asarray(x)))
    eps = 1e-6
    for i in range(6):
        e = np.zeros(6)
        e[i] = eps
        col = (np.asarray(g(fnp.asarray(x + e))) - np.asarray(g(fnp.asarray(x - e)))) / (2 * eps)
        np.testing.assert_allclose(h[:, i], col, rtol=1e-6, atol=1e-6)


# ------------------------------------------------------------------------------------------ vmap

@pytest.mark.parametrize("name,kw,real,shape,in_axis", [
    ("fft", {}, False, (4, 5), 0), ("fft", {"axis": 0}, False, (4, 5), 1), ("rfft", {}, True, (3, 8), 1),
    ("irfft", {"n": 7}, False, (4, 3), 0), ("fftn", {}, False, (2, 3, 4), 2), ("rfftn", {}, True, (3, 4, 6), 0),
    ("irfftn", {}, False, (2, 4, 3), 1),
])
def test_vmap_vs_loop(name, kw, real, shape, in_axis):
    x = _r(shape) if real else _c(shape)
    f = lambda v: getattr(fnp.fft, name)(v, **kw)  # noqa: E731
    got = fa.vmap(f, in_axes=in_axis)(fnp.asarray(x))
    want = np.stack([np.asarray(f(fnp.asarray(np.take(x, i, axis=in_axis)))) for i in range(shape[in_axis])])
    assert_close(got, want, want.dtype, rtol=1e-6, atol=1e-5, msg=name)


# ------------------------------------------------------------------------------------------ every backend

def _kernel_backend(device):
    return device.backend in ("opencl", "webgpu")


# A parity selection: power-of-two (Stockham), other (Bluestein) and prime lengths, batched, n-D, real.
DEVICE_CASES = [
    ("fft", (3, 16), False, {}), ("fft", (2, 8), False, {"norm": "ortho"}), ("ifft", (13,), False, {}),
    ("rfft", (2, 9), True, {}), ("irfft", (3, 4), False, {"n": 7}), ("fftn", (4, 8), False, {}),
    ("irfftn", (5, 3), False, {}), ("fft", (2, 1000), False, {}),
]


@pytest.mark.parametrize("name,shape,real,kw", DEVICE_CASES, ids=[f"{c[0]}-{c[1]}" for c in DEVICE_CASES])
def test_every_backend(device, name, shape, real, kw):
    x = _r(shape) if real else _c(shape)
    want = getattr(np.fft, name)(x.astype(np.float64 if real else np.complex128), **kw)
    f = fa.jit(lambda v: getattr(fnp.fft, name)(v, **kw), device=device)
    ctx = fallback_mode("error") if _kernel_backend(device) else contextlib.nullcontext()
    with ctx:
        got = f(fa.device_put(fnp.asarray(x), device))
    assert_close(got, want, _expected_dtype(name, x), rtol=1e-4, atol=1e-4 * max(1.0, np.abs(want).max()),
                 msg=f"{name}{shape} on {device}")


def test_every_backend_grad(device):
    x = _r((2, 12))
    w = _r((2, 7))

    def loss(v):
        return fnp.sum(fnp.abs(fnp.fft.rfft(v)) * w) + fnp.sum(fnp.fft.irfft(fnp.fft.rfft(v) * w, n=12) ** 2)
    want = np.asarray(fa.jit(fa.grad(loss), device="numpy:0")(fnp.asarray(x)))
    g = fa.jit(fa.grad(loss), device=device)
    ctx = fallback_mode("error") if _kernel_backend(device) else contextlib.nullcontext()
    with ctx:
        got = g(fa.device_put(fnp.asarray(x), device))
    assert_close(got, want, np.float32, rtol=1e-4, atol=1e-4, msg=str(device))


# ------------------------------------------------------------------------------------------ bad input

def test_bad_input():
    x = fnp.asarray(_c((4,)))
    with pytest.raises(ValueError, match="invalid number of FFT data points"):
        fnp.fft.fft(x, n=0)
    with pytest.raises(ValueError, match="norm"):
        fnp.fft.fft(x, norm="both")
    with pytest.raises(fa.DTypeError, match="real input"):
        fnp.fft.rfft(x)
    with pytest.raises(fa.ShapeError, match="repeated"):
        fnp.fft.fftn(fnp.asarray(_c((2, 2))), axes=(0, 0))
    with pytest.raises(fa.ShapeError, match="same length"):
        fnp.fft.fftn(fnp.asarray(_c((2, 2))), s=(2,), axes=(0, 1))
    with pytest.raises(ValueError, match="invalid number of data points"):
        fnp.fft.irfft(fnp.asarray(_c((1,))))
    with pytest.raises(fa.DTypeError, match="complex64 or complex128"):
        lax.fft(fnp.asarray(_r((4,))), "fft", (4,))
    with pytest.raises(fa.ShapeError, match="must equal fft_lengths"):
        lax.fft(x, "fft", (5,))
    with pytest.raises(fa.ShapeError, match="1 to 3"):
        lax.fft(fnp.asarray(_c((2, 2, 2, 2))), "fft", (2, 2, 2, 2))
    with pytest.raises(ValueError, match="unknown fft_type"):
        lax.fft(x, "dct", (4,))
    with pytest.raises(TypeError, match="requires arrays"):
        fnp.fft.fft("abc")


def test_empty_batch():
    x = fnp.asarray(np.zeros((0, 8), np.complex64))
    assert fnp.fft.fft(x).shape == (0, 8)
    assert fnp.fft.rfft(fnp.asarray(np.zeros((0, 8), np.float32))).shape == (0, 5)
