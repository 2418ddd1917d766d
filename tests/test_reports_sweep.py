"""Public bug reports from JAX's, MLX's and tinygrad's trackers, reduced to fnarray (issue 27, "further sweep").

Each test names the report it comes from (repository#number and what it was about) and checks fnarray against an
independent reference: NumPy or SciPy in float64, a Python loop, or JAX's own derivative of a forward operation.
None of the reporters' code is reused; each case is rewritten from the behaviour the report describes. Every test
runs on every device (the ``device`` fixture)."""

from __future__ import annotations

import numpy as np
import pytest

import fnarray as fa
import fnarray.numpy as fnp
import fnarray.scipy.special as fss

scipy_special = pytest.importorskip("scipy.special")
scipy_linalg = pytest.importorskip("scipy.linalg")


def _put(x, device, dtype=np.float32):
    return fa.device_put(np.asarray(x, dtype=dtype), device)


def _np(x):
    return np.asarray(x)


# ------------------------------------------------------------------------------------------------ scipy.special


# jax-ml/jax#38264: gammaln(-inf) gave +inf; SciPy gives -inf (|Gamma| -> 0 along the negative axis). Fixed by the
# special-functions audit of issue 27 item 1.
def test_jax_38264_gammaln_at_negative_infinity_and_poles(device):
    x = np.array([-np.inf, np.inf, 0.0, -1.0, -2.0, 0.5, 1e-30], np.float32)
    got = _np(fss.gammaln(_put(x, device)))
    want = scipy_special.gammaln(x.astype(np.float64))
    np.testing.assert_allclose(got, want, rtol=2e-6)


# jax-ml/jax#1624: logaddexp / logsumexp gave NaN for infinite inputs; NumPy and SciPy define every case.
def test_jax_1624_logaddexp_and_logsumexp_with_infinities(device):
    a = np.array([np.inf, -np.inf, np.inf, -np.inf, 1.0, np.inf], np.float32)
    b = np.array([np.inf, -np.inf, -np.inf, 2.0, -np.inf, 3.0], np.float32)
    got = _np(fnp.logaddexp(_put(a, device), _put(b, device)))
    np.testing.assert_allclose(got, np.logaddexp(a.astype(np.float64), b.astype(np.float64)), rtol=1e-6)
    rows = np.array([[-np.inf, -np.inf], [np.inf, 1.0], [np.inf, -np.inf], [0.0, -np.inf]], np.float32)
    got = _np(fss.logsumexp(_put(rows, device), axis=1))
    np.testing.assert_allclose(got, scipy_special.logsumexp(rows.astype(np.float64), axis=1), rtol=1e-6)


# ------------------------------------------------------------------------------------------------ nn layers


# jax-ml/jax#21495: softmax with infinite logits; the resolution documents NaN for +inf (as SciPy), while masked
# (-inf) entries must get exactly zero weight and the rest stay finite.
def test_jax_21495_softmax_with_infinite_logits(device):
    x = np.array([[0.0, -np.inf, 1.0], [-np.inf, 2.0, -np.inf], [np.inf, 0.0, 0.0]], np.float32)
    got = _np(fa.nn.softmax(_put(x, device), axis=-1))
    with np.errstate(invalid="ignore"):
        want = scipy_special.softmax(x.astype(np.float64), axis=-1)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7, equal_nan=True)


# ml-explore/mlx#3653: GroupNorm accepted a group count that does not divide the channels and mixed channel and
# spatial positions in its statistics; it must refuse that configuration. The values are checked against MLX's own
# layer in both of its groupings (interleaved channels by default, contiguous with pytorch_compatible=True).
def test_mlx_3653_group_norm_groups_must_divide_channels(device):
    mx = pytest.importorskip("mlx.core")
    mnn = pytest.importorskip("mlx.nn")
    with pytest.raises(ValueError):
        fa.nn.GroupNorm(4, 6)
    x = np.random.default_rng(0).standard_normal((2, 3, 5, 6)).astype(np.float32)
    for compat in (False, True):
        got = _np(fa.nn.GroupNorm(3, 6, affine=False, pytorch_compatible=compat)(_put(x, device)))
        want = np.array(mnn.GroupNorm(3, 6, affine=False, pytorch_compatible=compat)(mx.array(x)))
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


# ------------------------------------------------------------------------------------------------ windows / pooling


# jax-ml/jax#11874: a windowed sum with SAME padding must add the zero padding, not average over real elements.
def test_jax_11874_reduce_window_sum_same_padding(device):
    x = _put([[1.0, 2.0], [3.0, 4.0]], device)
    def f(v):
        return fa.lax.reduce_window(v, 0.0, fa.lax.add, (2, 2), (1, 1), "SAME")
    for fn in (f, fa.jit(f)):
        np.testing.assert_array_equal(_np(fn(x)), np.array([[10.0, 6.0], [7.0, 4.0]], np.float32))


def _window_loop(x, window, strides, pads, reduce, fill):
    """Reference pooling over the spatial axes of an NHWC array: pad with ``fill``, reduce each window."""
    padded = np.pad(x, [(0, 0)] + list(pads) + [(0, 0)], constant_values=fill)
    oh = (padded.shape[1] - window[0]) // strides[0] + 1
    ow = (padded.shape[2] - window[1]) // strides[1] + 1
    out = np.empty((x.shape[0], oh, ow, x.shape[3]), dtype=np.result_type(x, np.float64) if fill is None else x.dtype)
    for i in range(oh):
        for j in range(ow):
            win = padded[:, i * strides[0]:i * strides[0] + window[0], j * strides[1]:j * strides[1] + window[1]]
            out[:, i, j] = reduce(win)
    return out


# jax-ml/jax#273 (fixed by jax-ml/jax#285): average pooling must count the real elements of each window along the
# right spatial axis; a non-square input with SAME padding and count_include_pad=False exposed the mix-up.
def test_jax_273_avg_pool_counts_per_spatial_axis(device):
    x = np.random.default_rng(1).standard_normal((2, 3, 5, 2)).astype(np.float32)
    got = _np(fa.nn.avg_pool(_put(x, device), (2, 3), (1, 1), "SAME", count_include_pad=False))
    # SAME with window (2, 3), stride 1: pad (0, 1) rows and (1, 1) columns
    xs = np.pad(x.astype(np.float64), [(0, 0), (0, 1), (1, 1), (0, 0)])
    ones = np.pad(np.ones((1, 3, 5, 1)), [(0, 0), (0, 1), (1, 1), (0, 0)])
    sums = _window_loop(xs, (2, 3), (1, 1), [(0, 0), (0, 0)], lambda w: w.sum(axis=(1, 2)), 0.0)
    counts = _window_loop(ones, (2, 3), (1, 1), [(0, 0), (0, 0)], lambda w: w.sum(axis=(1, 2)), 0.0)
    np.testing.assert_allclose(got, sums / counts, rtol=1e-5, atol=1e-6)


# tinygrad/tinygrad#7726: max pooling of an integer array with padding padded with float infinity and changed the
# dtype; the result must keep the integer dtype and ignore the padding.
def test_tinygrad_7726_max_pool_integer_input_with_padding(device):
    x = np.random.default_rng(2).integers(-50, -1, size=(1, 4, 4, 1)).astype(np.int32)
    want = _window_loop(x, (3, 3), (1, 1), [(1, 1), (1, 1)], lambda w: w.max(axis=(1, 2)), np.iinfo(np.int32).min)

    def f(v):
        return fa.nn.max_pool(v, (3, 3), (1, 1), ((1, 1), (1, 1)))
    for fn in (f, fa.jit(f)):
        got = fn(fa.device_put(x, device))
        assert got.dtype == np.int32, got.dtype
        np.testing.assert_array_equal(_np(got), want)


# ------------------------------------------------------------------------------------------------ convolutions


def _conv1d_loop(x, w, pad):
    """NWC input, WIO kernel, stride 1, zero padding ``pad`` on both sides: a Python loop in float64."""
    xp = np.pad(x.astype(np.float64), [(0, 0), (pad, pad), (0, 0)])
    k = w.shape[0]
    n_out = xp.shape[1] - k + 1
    return np.stack([np.einsum("bkc,kco->bo", xp[:, i:i + k], w.astype(np.float64)) for i in range(n_out)], axis=1)


# ml-explore/mlx#2190: a 2-D convolution over inputs with a unit spatial axis (a 1-D convolution written as 2-D)
# gave results different from the 1-D convolution.
def test_mlx_2190_conv2d_with_unit_axis_matches_conv1d(device):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 10, 4)).astype(np.float32)
    w = rng.standard_normal((3, 4, 5)).astype(np.float32)
    want = _conv1d_loop(x, w, 1)
    out1 = fa.lax.conv_general_dilated(_put(x, device), _put(w, device), (1,), [(1, 1)],
                                       dimension_numbers=("NWC", "WIO", "NWC"))
    out2 = fa.lax.conv_general_dilated(_put(x[:, None], device), _put(w[None], device), (1, 1), [(0, 0), (1, 1)],
                                       dimension_numbers=("NHWC", "HWIO", "NHWC"))
    np.testing.assert_allclose(_np(out1), want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(_np(out2)[:, 0], want, rtol=1e-4, atol=1e-4)


# jax-ml/jax#32267: lax.conv_transpose's string paddings mean the padding of the forward convolution it transposes,
# so the result must equal JAX's VJP of that forward convolution; explicit (low, high) pairs keep JAX's meaning
# (padding of the stride-dilated input; the report asking to change it is still open), checked against raw JAX.
@pytest.mark.parametrize("padding,x_shape", [("VALID", (1, 7, 9, 2)), ("SAME", (1, 8, 6, 2)),
                                             (((1, 1), (0, 0)), None), (((2, 1), (1, 2)), None)])
def test_jax_32267_conv_transpose_padding(device, padding, x_shape):
    jax = pytest.importorskip("jax")
    rng = np.random.default_rng(4)
    strides = (2, 2)
    w = rng.standard_normal((3, 3, 2, 3)).astype(np.float32)  # HWIO of the forward convolution
    dn = ("NHWC", "HWIO", "NHWC")
    if x_shape is None:  # explicit pairs: the mirrored API is the reference
        y = rng.standard_normal((1, 4, 3, 3)).astype(np.float32)
        want = np.asarray(jax.lax.conv_transpose(y, w, strides, padding, dimension_numbers=dn,
                                                 transpose_kernel=True))
    else:
        def forward(x):
            return jax.lax.conv_general_dilated(x, w, strides, padding, dimension_numbers=dn)

        y_shape = jax.eval_shape(forward, jax.ShapeDtypeStruct(x_shape, np.float32)).shape
        y = rng.standard_normal(y_shape).astype(np.float32)
        _, vjp = jax.vjp(forward, np.zeros(x_shape, np.float32))
        want = np.asarray(vjp(y)[0])
    got = _np(fa.lax.conv_transpose(_put(y, device), _put(w, device), strides, padding, dimension_numbers=dn,
                                    transpose_kernel=True))
    assert got.shape == want.shape, (got.shape, want.shape)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


# ------------------------------------------------------------------------------------------------ FFT


# ml-explore/mlx#2034: rfft of a segment shorter than n (zero-padded), then irfft with the same n, lost samples for a
# non-power-of-two length; the round trip must return the padded segment.
def test_mlx_2034_irfft_round_trip_padded_segment(device):
    n = 6144
    seg = np.random.default_rng(5).standard_normal((1, 5000)).astype(np.float32)
    spec = fnp.fft.rfft(_put(seg, device), n=n)
    back = _np(fnp.fft.irfft(spec, n=n))
    want = np.fft.irfft(np.fft.rfft(seg.astype(np.float64), n=n), n=n)
    np.testing.assert_allclose(back, want, atol=2e-5)
    np.testing.assert_allclose(back[:, :5000], seg, atol=2e-5)


# ml-explore/mlx#1592: irfftn with an explicit output shape s over the last two axes of a batched complex array
# differed from NumPy.
def test_mlx_1592_irfftn_with_shape(device):
    rng = np.random.default_rng(6)
    a = (rng.standard_normal((4, 32, 17)) + 1j * rng.standard_normal((4, 32, 17))).astype(np.complex64)
    got = _np(fnp.fft.irfftn(fa.device_put(a, device), s=(32, 32), axes=(-2, -1)))
    want = np.fft.irfftn(a.astype(np.complex128), s=(32, 32), axes=(-2, -1))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


# jax-ml/jax#1878: fftn with axes=[0] on a 2-D array transformed the wrong axis.
def test_jax_1878_fftn_single_axis(device):
    x = np.random.default_rng(7).standard_normal((3, 4)).astype(np.float32)
    for axes in ([0], [1], [-2]):
        got = _np(fnp.fft.fftn(_put(x, device), axes=axes))
        np.testing.assert_allclose(got, np.fft.fftn(x.astype(np.float64), axes=axes), rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------------------------------------ linalg


# ml-explore/mlx#4032: Cholesky of an empty (0, 0) matrix aborted the process; it must return an empty matrix.
def test_mlx_4032_cholesky_of_empty_matrix(device):
    for shape in ((0, 0), (3, 0, 0)):
        got = fnp.linalg.cholesky(_put(np.zeros(shape), device))
        assert got.shape == shape and got.dtype == np.float32


# ml-explore/mlx#2107: pinv of a singular matrix kept its tiny (round-off) singular value and returned huge entries;
# NumPy cuts singular values below rcond * max(s).
def test_mlx_2107_pinv_of_singular_matrix(device):
    a = np.array([[4.0, 1.0], [4.0, 1.0]], np.float32)
    for fn in (fnp.linalg.pinv, fa.jit(fnp.linalg.pinv)):
        np.testing.assert_allclose(_np(fn(_put(a, device))), np.linalg.pinv(a.astype(np.float64)), rtol=1e-4,
                                   atol=1e-6)


# jax-ml/jax#1213: slogdet returned sign +1 for matrices of odd order with a negative determinant.
def test_jax_1213_slogdet_sign_of_negative_determinant(device):
    mats = np.stack([np.eye(n, dtype=np.float32) * -0.01 for n in (5,)] * 2)
    for n in range(1, 6):
        sign, logabs = fnp.linalg.slogdet(_put(mats[:, :n, :n], device))
        want_sign, want_log = np.linalg.slogdet(mats[:, :n, :n].astype(np.float64))
        np.testing.assert_array_equal(_np(sign), want_sign)
        np.testing.assert_allclose(_np(logabs), want_log, rtol=1e-5)


# jax-ml/jax#13985: expm of a matrix with large negative eigenvalues returned NaN; SciPy gives (nearly) zero.
def test_jax_13985_expm_of_large_negative_definite_matrix(device):
    s = np.random.default_rng(8).standard_normal((6, 6))
    h = s @ s.T + 0.1 * np.eye(6)
    a = (-1e4 * h).astype(np.float32)
    for fn in (fa.scipy.linalg.expm, fa.jit(fa.scipy.linalg.expm)):
        got = _np(fn(_put(a, device)))
        assert np.isfinite(got).all(), got
        np.testing.assert_allclose(got, scipy_linalg.expm(a.astype(np.float64)), atol=1e-6)


# jax-ml/jax#40141: eigh's eigenvector derivative was all-NaN once the eigenvalues passed 2**24 (float32), although
# they are well separated; for a diagonal input the symmetric part of d sum(V) / dA is zero (PyTorch gives zeros).
def test_jax_40141_eigh_gradient_with_large_separated_eigenvalues(device):
    base = np.float32(2.0 ** 24)
    a = np.diag(np.array([base, base + 2, base + 4], np.float32))
    g = _np(fa.grad(lambda m: fnp.sum(fnp.linalg.eigh(m)[1]))(_put(a, device)))
    assert np.isfinite(g).all(), g
    np.testing.assert_allclose((g + g.T) / 2, np.zeros((3, 3)), atol=1e-6)


# ------------------------------------------------------------------------------------------------ samplers


# jax-ml/jax#2888: categorical's logits are unnormalised log-probabilities (softmax(logits) are the probabilities),
# not logit(p); and a -inf logit must never be drawn.
def test_jax_2888_categorical_uses_log_probabilities(device):
    p = np.array([0.4, 0.6, 0.0], np.float64)
    with np.errstate(divide="ignore"):
        logits = np.log(p).astype(np.float32)
    n = 20000
    draws = _np(fa.random.categorical(fa.random.key(0), _put(logits, device), shape=(n,)))
    counts = np.bincount(draws, minlength=3)
    assert counts[2] == 0, counts
    # binomial standard deviation of the first count is sqrt(n p (1 - p)) ~ 69; allow five of them
    assert abs(counts[0] - 0.4 * n) < 5 * np.sqrt(n * 0.4 * 0.6), counts


# ------------------------------------------------------------------------------------------------ optimizers


# tinygrad/tinygrad#15724: Adam with b2 = 1 (or b1 = 1, eps <= 0) divided by zero in its bias correction and gave
# NaN silently; such hyperparameters must be refused when the optimizer is made.
def test_tinygrad_15724_adam_rejects_degenerate_decays(device):
    for kwargs in ({"b2": 1.0}, {"b1": 1.0}, {"b1": -0.1}, {"eps": -1.0}):
        with pytest.raises(ValueError):
            fa.optim.adam(1e-3, **kwargs)
    # valid decays still give the textbook first step: -lr * sign(g) (bias-corrected, eps negligible)
    opt = fa.optim.adam(0.1)
    params = {"w": _put([1.0, -2.0, 3.0], device)}
    grads = {"w": _put([0.5, -0.25, 0.0], device)}
    updates, _ = opt.update(grads, opt.init(params), params)
    np.testing.assert_allclose(_np(updates["w"]), [-0.1, 0.1, 0.0], rtol=1e-5, atol=1e-7)


# ------------------------------------------------------------------------------------------------ sharding


# jax-ml/jax#26552 and jax-ml/jax#31793: device_put of an unsharded array onto a NamedSharding inside use_mesh failed,
# and an array moved between meshes kept the old mesh and broke a later jit; both must just work, values unchanged.
def test_jax_26552_device_put_named_sharding_inside_use_mesh(device):
    from fnarray.sharding import Mesh, NamedSharding, PartitionSpec as P
    mesh = Mesh([device], ("x",), axis_types=fa.sharding.AxisType.Explicit)
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    sharding = NamedSharding(mesh, P("x", None))
    with fa.sharding.use_mesh(mesh):
        y = fa.device_put(_put(x, device), sharding)
        # a one-device mesh gives an array committed to that device (fnarray.sharding.device_put_sharded)
        assert y.sharding.device_set == {device} and y.is_fully_addressable
        np.testing.assert_array_equal(_np(fa.jit(lambda v: v + 1)(y)), x + 1)
    other = Mesh([device], ("y",))
    z = fa.device_put(y, NamedSharding(other, P()))
    np.testing.assert_array_equal(_np(fa.jit(lambda v: v * 2)(z)), 2 * x)
