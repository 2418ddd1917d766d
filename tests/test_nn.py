"""fnarray.nn against NumPy float64 formulas, with jax.nn as a second oracle; initializers' statistics."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
from helpers import check_traced

import fnarray as fa
import fnarray.numpy as fnp
import fnarray.random as fr
from fnarray import nn
from fnarray.nn import initializers as init

jax = pytest.importorskip("jax")
jnn = jax.nn


# ----------------------------------------------------------------------------- NumPy float64 references


def _sigmoid(x):
    return np.where(x >= 0, 1 / (1 + np.exp(-np.abs(x))), np.exp(-np.abs(x)) / (1 + np.exp(-np.abs(x))))


def _softplus(x):
    return np.maximum(x, 0) + np.log1p(np.exp(-np.abs(x)))


def _erf(x):
    return np.vectorize(math.erf)(x)


SELU_A, SELU_S = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946

ACTIVATIONS = {
    "relu": lambda x: np.maximum(x, 0),
    "relu6": lambda x: np.minimum(np.maximum(x, 0), 6),
    "leaky_relu": lambda x: np.where(x >= 0, x, 0.01 * x),
    "elu": lambda x: np.where(x > 0, x, np.expm1(np.minimum(x, 0))),
    "celu": lambda x: np.where(x > 0, x, np.expm1(np.minimum(x, 0))),
    "selu": lambda x: SELU_S * np.where(x > 0, x, SELU_A * np.expm1(np.minimum(x, 0))),
    "gelu": lambda x: 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3))),
    "sigmoid": _sigmoid,
    "log_sigmoid": lambda x: -_softplus(-x),
    "softplus": _softplus,
    "soft_sign": lambda x: x / (np.abs(x) + 1),
    "silu": lambda x: x * _sigmoid(x),
    "swish": lambda x: x * _sigmoid(x),
    "hard_sigmoid": lambda x: np.clip(x + 3, 0, 6) / 6,
    "hard_silu": lambda x: x * np.clip(x + 3, 0, 6) / 6,
    "hard_tanh": lambda x: np.clip(x, -1, 1),
    "tanh": np.tanh,
    "mish": lambda x: x * np.tanh(_softplus(x)),
    "squareplus": lambda x: (x + np.sqrt(x * x + 4)) / 2,
    "sparse_plus": lambda x: np.where(x <= -1, 0, np.where(x >= 1, x, (x + 1) ** 2 / 4)),
    "sparse_sigmoid": lambda x: np.clip((x + 1) / 2, 0, 1),
    "identity": lambda x: x,
}

X = np.array([-100.0, -20.0, -6.5, -3.0, -1.0, -0.5, -1e-3, 0.0, 1e-3, 0.5, 1.0, 3.0, 6.0, 6.5, 20.0, 100.0])


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_activation_against_numpy_and_jax(name):
    x32 = X.astype(np.float32)
    got = getattr(nn, name)(fnp.asarray(x32))
    assert got.dtype == np.float32 and got.shape == X.shape
    want = ACTIVATIONS[name](X.astype(np.float64))
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=2e-6, atol=1e-6)
    np.testing.assert_allclose(np.asarray(got), np.asarray(getattr(jnn, name)(x32)), rtol=2e-6, atol=1e-6)


def test_gelu_exact():
    x32 = X.astype(np.float32)
    got = np.asarray(nn.gelu(fnp.asarray(x32), approximate=False), np.float64)
    want = 0.5 * X * (1 + _erf(X / np.sqrt(2)))
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-6)
    np.testing.assert_allclose(got, np.asarray(jnn.gelu(x32, approximate=False)), rtol=2e-6, atol=1e-6)


def test_activation_parameters():
    x = fnp.asarray(X.astype(np.float32))
    np.testing.assert_allclose(np.asarray(nn.leaky_relu(x, 0.2)), np.where(X >= 0, X, 0.2 * X), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(nn.elu(x, 2.0)), np.where(X > 0, X, 2 * np.expm1(np.minimum(X, 0))),
                               rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(np.asarray(nn.celu(x, 0.5)), np.where(X > 0, X, 0.5 * np.expm1(np.minimum(X, 0) / 0.5)),
                               rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, np.float64])
def test_activation_dtypes_kept(dtype):
    x = fnp.asarray(np.array([-2.0, 0.0, 1.5]).astype(dtype))
    for name in ("relu", "gelu", "sigmoid", "softplus", "silu", "elu"):
        out = getattr(nn, name)(x)
        assert out.dtype == np.dtype(dtype), name
        want = ACTIVATIONS[name](np.array([-2.0, 0.0, 1.5]))
        np.testing.assert_allclose(np.asarray(out, np.float64), want, rtol=2e-2, atol=2e-2)
    assert nn.softmax(x).dtype == np.dtype(dtype)


def test_integer_inputs():
    xi = fnp.asarray(np.array([-2, 0, 3, 9], np.int32))
    r = nn.relu(xi)
    assert r.dtype == np.int32
    np.testing.assert_array_equal(np.asarray(r), [0, 0, 3, 9])
    np.testing.assert_array_equal(np.asarray(nn.relu6(xi)), [0, 0, 3, 6])
    s = nn.sigmoid(xi)
    assert s.dtype == np.float32
    np.testing.assert_allclose(np.asarray(s), _sigmoid(np.array([-2.0, 0, 3, 9])), rtol=1e-6)


def test_nan_propagates():
    x = fnp.asarray(np.array([np.nan, 1.0], np.float32))
    for name in sorted(ACTIVATIONS):
        out = np.asarray(getattr(nn, name)(x))
        assert np.isnan(out[0]), name


def test_complex_rejected():
    with pytest.raises(TypeError, match="real"):
        nn.relu(fnp.asarray(np.array([1 + 1j], np.complex64)))


# ----------------------------------------------------------------------------- softmax family


def _np_logsumexp(a, axis=None, keepdims=False, b=None):
    a = np.asarray(a, np.float64)
    m = np.max(a, axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, 0)
    e = np.exp(a - m) * (1 if b is None else b)
    s = np.sum(e, axis=axis, keepdims=True)
    out = np.log(s) + m
    return out if keepdims else np.squeeze(out, axis=axis) if axis is not None else out.reshape(())


A = np.random.default_rng(0).normal(size=(3, 4, 5)).astype(np.float32) * 3


@pytest.mark.parametrize("axis", [-1, 0, 1, (0, 2), None])
def test_softmax_and_log_softmax(axis):
    a64 = A.astype(np.float64)
    lse = _np_logsumexp(a64, axis=axis, keepdims=True)
    sm = np.asarray(nn.softmax(fnp.asarray(A), axis=axis), np.float64)
    np.testing.assert_allclose(sm, np.exp(a64 - lse), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(np.sum(sm, axis=axis), 1.0, rtol=1e-5)
    lsm = np.asarray(nn.log_softmax(fnp.asarray(A), axis=axis), np.float64)
    np.testing.assert_allclose(lsm, a64 - lse, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(sm, np.asarray(jnn.softmax(A, axis=axis)), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("axis,keepdims", [(None, False), (-1, False), (1, True), ((0, 2), False), ((0, 2), True)])
def test_logsumexp(axis, keepdims):
    got = nn.logsumexp(fnp.asarray(A), axis=axis, keepdims=keepdims)
    want = _np_logsumexp(A, axis=axis, keepdims=keepdims)
    assert got.shape == want.shape
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(np.asarray(got), np.asarray(jnn.logsumexp(A, axis=axis, keepdims=keepdims)),
                               rtol=1e-6, atol=1e-6)


def test_logsumexp_large_and_infinite_inputs():
    big = np.array([1e4, 1e4, 1e4 - 1], np.float32)
    got = float(np.asarray(nn.logsumexp(fnp.asarray(big))))
    assert np.isfinite(got)
    assert abs(got - (1e4 + math.log(2 + math.exp(-1)))) < 1e-2
    neg = np.array([-1e4, -1e4], np.float32)
    assert abs(float(np.asarray(nn.logsumexp(fnp.asarray(neg)))) - (-1e4 + math.log(2))) < 1e-2
    inf_rows = np.array([[-np.inf, -np.inf], [np.inf, 0.0], [1.0, -np.inf]], np.float32)
    got = np.asarray(nn.logsumexp(fnp.asarray(inf_rows), axis=1))
    np.testing.assert_array_equal(got[:2], [-np.inf, np.inf])
    assert abs(got[2] - 1.0) < 1e-6
    sm = np.asarray(nn.softmax(fnp.asarray(np.array([1e4, 1e4 - 1, -1e4], np.float32))))
    np.testing.assert_allclose(sm, [1 / (1 + math.exp(-1)), math.exp(-1) / (1 + math.exp(-1)), 0], rtol=1e-5)


def test_logsumexp_b_and_return_sign():
    a = np.array([[0.0, 1.0, 2.0], [3.0, -1.0, 0.5]], np.float32)
    b = np.array([1.0, -2.0, 0.5], np.float32)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    s = np.sum(b64 * np.exp(a64), axis=1)
    out, sign = nn.logsumexp(fnp.asarray(a), axis=1, b=fnp.asarray(b), return_sign=True)
    np.testing.assert_allclose(np.asarray(out), np.log(np.abs(s)), rtol=1e-5)
    np.testing.assert_array_equal(np.asarray(sign), np.sign(s))
    plain = np.asarray(nn.logsumexp(fnp.asarray(a), axis=1, b=fnp.asarray(b)))
    for v, t in zip(plain, s, strict=True):     # a negative sum gives NaN without return_sign
        assert np.isnan(v) if t < 0 else abs(v - np.log(t)) < 1e-5
    jo, js = jnn.logsumexp(a, axis=1, b=b, return_sign=True)
    np.testing.assert_allclose(np.asarray(out), np.asarray(jo), rtol=1e-5)
    np.testing.assert_array_equal(np.asarray(sign), np.asarray(js))


def test_standardize():
    a64 = A.astype(np.float64)
    mu = a64.mean(-1, keepdims=True)
    want = (a64 - mu) / np.sqrt(a64.var(-1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(np.asarray(nn.standardize(fnp.asarray(A)), np.float64), want, rtol=1e-4, atol=1e-5)
    want0 = (a64 - a64.mean((0, 2), keepdims=True)) / np.sqrt(a64.var((0, 2), keepdims=True) + 1e-3)
    got0 = nn.standardize(fnp.asarray(A), axis=(0, 2), epsilon=1e-3)
    np.testing.assert_allclose(np.asarray(got0, np.float64), want0, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(np.asarray(nn.standardize(fnp.asarray(A))), np.asarray(jnn.standardize(A)),
                               rtol=1e-4, atol=1e-4)
    given = nn.standardize(fnp.asarray(A), mean=2.0, variance=4.0, epsilon=0.0)
    np.testing.assert_allclose(np.asarray(given, np.float64), (a64 - 2) / 2, rtol=1e-6, atol=1e-6)


# ----------------------------------------------------------------------------- one_hot


def test_one_hot():
    x = np.array([[0, 2], [5, -1]], np.int32)
    got = nn.one_hot(fnp.asarray(x), 4)
    want = (x[..., None] == np.arange(4)).astype(np.float32)
    assert got.dtype == np.float32 and got.shape == (2, 2, 4)
    np.testing.assert_array_equal(np.asarray(got), want)
    got0 = nn.one_hot(fnp.asarray(x), 4, axis=0, dtype=np.int32)
    assert got0.dtype == np.int32
    np.testing.assert_array_equal(np.asarray(got0), np.moveaxis(want, -1, 0).astype(np.int32))
    np.testing.assert_array_equal(np.asarray(nn.one_hot(fnp.asarray(x), 4, axis=1)), np.moveaxis(want, -1, 1))
    np.testing.assert_array_equal(np.asarray(nn.one_hot(fnp.asarray(x), 4)), np.asarray(jnn.one_hot(x, 4)))
    u8 = nn.one_hot(fnp.asarray(np.array([255, 3], np.uint8)), 300)
    assert np.asarray(u8)[0, 255] == 1 and np.asarray(u8).sum() == 2
    with pytest.raises(TypeError, match="num_classes"):
        nn.one_hot(fnp.asarray(x), 4.0)
    with pytest.raises(ValueError):
        nn.one_hot(fnp.asarray(x), 4, axis=5)


# ----------------------------------------------------------------------------- under jit and transforms


@pytest.mark.parametrize("name", ["relu", "gelu", "softplus", "softmax", "log_softmax", "logsumexp", "standardize"])
def test_jit_equals_eager(name):
    f = getattr(nn, name)
    x = fnp.asarray(A)
    check_traced(f, x)
    np.testing.assert_array_equal(np.asarray(fa.jit(f)(x)), np.asarray(f(x)))


def _fd(f, x, eps=1e-6):
    """Central finite differences of a scalar function of a float64 vector."""
    g = np.zeros_like(x)
    for i in range(x.size):
        e = np.zeros_like(x)
        e.flat[i] = eps
        g.flat[i] = (f(x + e) - f(x - e)) / (2 * eps)
    return g


def test_logsumexp_gradient_stable_at_large_inputs():
    grad = fa.grad
    a = np.array([1e4, 1e4 - 1.0, 1e4 - 50.0], np.float32)
    g = np.asarray(grad(lambda x: nn.logsumexp(x))(fnp.asarray(a)))
    assert np.all(np.isfinite(g))
    p = np.exp(a.astype(np.float64) - a.max())
    np.testing.assert_allclose(g, p / p.sum(), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("name", ["gelu", "softplus", "log_sigmoid", "elu", "silu", "selu", "sigmoid", "tanh"])
@pytest.mark.enable_x64
def test_activation_gradients_against_finite_differences(name):
    grad = fa.grad
    x = np.array([-30.0, -2.0, -0.3, 0.4, 1.7, 30.0])
    f = getattr(nn, name)

    def total(v):
        return fa.lax.reduce_sum(f(v), (0,))
    g = np.asarray(grad(total)(fnp.asarray(x)))            # float64 all the way
    assert g.dtype == np.float64 and np.all(np.isfinite(g))
    ref = _fd(lambda v: np.sum(ACTIVATIONS[name](v)), x)
    np.testing.assert_allclose(g, ref, rtol=1e-6, atol=1e-8)


def test_log1mexp_and_glu_against_jax():
    x = np.array([0.0, 1e-6, 0.3, np.log(2.0), 0.7, 5.0, 40.0, -1.0, np.nan], np.float32)
    np.testing.assert_allclose(np.asarray(nn.log1mexp(x)), np.asarray(jnn.log1mexp(x)), rtol=2e-6, atol=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        x64 = x[:7].astype(np.float64)
        want = np.where(x64 < np.log(2.0), np.log(-np.expm1(-x64)), np.log1p(-np.exp(-x64)))
    np.testing.assert_allclose(np.asarray(nn.log1mexp(x[:7])), want, rtol=2e-6)
    g = fa.vmap(fa.grad(nn.log1mexp))(x)                   # 1 / expm1(x): inf at 0, as JAX
    np.testing.assert_allclose(np.asarray(g), np.asarray(jax.vmap(jax.grad(jnn.log1mexp))(x)), rtol=1e-5)
    a = np.arange(24.0, dtype=np.float32).reshape(2, 3, 4) / 10 - 1
    for axis in (-1, 0):
        np.testing.assert_allclose(np.asarray(nn.glu(a, axis=axis)), np.asarray(jnn.glu(a, axis=axis)), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(nn.squareplus(a, b=0.5)), np.asarray(jnn.squareplus(a, b=0.5)), rtol=1e-6)
    with pytest.raises(fa.ShapeError, match="odd length"):
        nn.glu(a, axis=1)
    with pytest.raises(fa.DTypeError):
        nn.mish(np.ones(2, np.complex64))


def test_gradients_at_kinks_follow_jax():
    grad = fa.grad
    for name in ("relu", "relu6", "softplus", "leaky_relu", "hard_tanh", "elu", "sparse_plus", "sparse_sigmoid",
                 "squareplus", "mish"):
        for x0 in (0.0, 6.0, -1.0, 1.0):
            g = float(np.asarray(grad(getattr(nn, name))(fnp.asarray(np.float32(x0)))))
            want = float(jax.grad(getattr(jnn, name))(np.float32(x0)))
            assert abs(g - want) < 1e-6, (name, x0, g, want)


@pytest.mark.enable_x64
def test_softmax_cross_entropy_gradient():
    grad = fa.grad
    logits = A[0].astype(np.float64)
    labels = np.array([1, 0, 3, 4])

    def loss(z):
        lp = nn.log_softmax(z)
        return -fa.lax.reduce_sum(lp * nn.one_hot(fnp.asarray(labels), 5, dtype=np.float64), (0, 1))
    g = np.asarray(grad(loss)(fnp.asarray(logits)))
    p = np.exp(logits - _np_logsumexp(logits, axis=1, keepdims=True))
    np.testing.assert_allclose(g, p - np.eye(5)[labels], rtol=1e-9, atol=1e-12)


def test_vmap_softmax_equals_loop():
    vmap = fa.vmap
    got = np.asarray(vmap(nn.softmax)(fnp.asarray(A)))
    want = np.stack([np.asarray(nn.softmax(fnp.asarray(r))) for r in A])
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


# ----------------------------------------------------------------------------- initializers


@pytest.mark.parametrize("factory,scale,mode,uniform", [
    (init.glorot_uniform, 1.0, "fan_avg", True), (init.glorot_normal, 1.0, "fan_avg", False),
    (init.he_uniform, 2.0, "fan_in", True), (init.he_normal, 2.0, "fan_in", False),
    (init.lecun_uniform, 1.0, "fan_in", True), (init.lecun_normal, 1.0, "fan_in", False),
])
@pytest.mark.parametrize("shape", [(200, 300), (3, 3, 16, 32)])
def test_variance_scaling_initializers(factory, scale, mode, uniform, shape):
    receptive = math.prod(shape[:-2])
    fan_in, fan_out = shape[-2] * receptive, shape[-1] * receptive
    fan = {"fan_in": fan_in, "fan_avg": (fan_in + fan_out) / 2}[mode]
    var = scale / fan
    w = factory()(fr.key(0), shape)
    assert w.shape == shape and w.dtype == np.float32
    w = np.asarray(w, np.float64)
    n = w.size
    # sample variance within 4 standard errors (kurtosis: 1.8 uniform, < 3 truncated normal)
    assert abs(w.var() - var) < 4 * var * math.sqrt(2 / n)
    assert abs(w.mean()) < 4 * math.sqrt(var / n)
    if uniform:
        assert np.abs(w).max() <= math.sqrt(3 * var) + 1e-7
    else:
        assert np.abs(w).max() <= 2 * math.sqrt(var) / 0.87962566103423978 + 1e-6


@pytest.mark.enable_x64
def test_initializers_dtypes_and_simple_ones():
    k = fr.key(1)
    np.testing.assert_array_equal(np.asarray(init.zeros(k, (2, 3))), np.zeros((2, 3), np.float32))
    o = init.ones(k, (4,), np.float16)
    assert o.dtype == np.float16
    np.testing.assert_array_equal(np.asarray(o), np.ones(4))
    np.testing.assert_array_equal(np.asarray(init.constant(2.5)(k, (2,))), [2.5, 2.5])
    w = np.asarray(init.normal(0.5)(k, (50_000,)), np.float64)
    assert abs(w.std() - 0.5) < 4 * 0.5 / math.sqrt(2 * 50_000)
    u = np.asarray(init.uniform(0.3)(k, (50_000,)), np.float64)
    assert u.min() >= 0 and u.max() < 0.3 and abs(u.mean() - 0.15) < 4 * 0.3 / math.sqrt(12 * 50_000)
    g = init.glorot_uniform()(k, (8, 8), np.float64)
    assert g.dtype == np.float64
    assert init.he_normal(dtype=np.float16)(k, (4, 4)).dtype == np.float16
    t = np.asarray(init.truncated_normal(0.1)(k, (10_000,)))
    assert np.abs(t).max() <= 0.2


def test_initializer_errors():
    with pytest.raises(ValueError, match="at least"):
        init.glorot_uniform()(fr.key(0), (5,))
    with pytest.raises(ValueError, match="mode"):
        init.variance_scaling(1.0, "fan_sideways", "normal")
    with pytest.raises(TypeError, match="floating"):
        init.he_normal()(fr.key(0), (3, 3), np.int32)


def test_initializer_custom_axes():
    # conv kernel laid out (out, in, h, w): in_axis=1, out_axis=0
    w = init.variance_scaling(1.0, "fan_in", "normal", in_axis=1, out_axis=0)(fr.key(3), (64, 32, 3, 3))
    var = 1.0 / (32 * 9)
    w = np.asarray(w, np.float64)
    assert abs(w.var() - var) < 4 * var * math.sqrt(2 / w.size)
    # batch axes do not count in the fans
    w = init.variance_scaling(1.0, "fan_in", "normal", batch_axis=0)(fr.key(4), (10, 100, 50))
    var = 1.0 / 100
    w = np.asarray(w, np.float64)
    assert abs(w.var() - var) < 4 * var * math.sqrt(2 / w.size)
