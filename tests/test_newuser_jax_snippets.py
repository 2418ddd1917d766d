"""Small JAX programs from JAX's documentation, run with their imports changed (the sixteenth session's new-user
probe): ``jax.lax.reduce`` (single and variadic) and ``jax.nn.softmax``/``log_softmax`` with ``where=``, which were
missing, against JAX itself on every device."""

from __future__ import annotations

import operator

import numpy as np
import pytest

import fnarray as fa
import fnarray.numpy as fnp
from fnarray.core.errors import DTypeError, ShapeError

jax = pytest.importorskip("jax", reason="JAX is the oracle")
jnp = jax.numpy

rng = np.random.default_rng(16)
X = rng.standard_normal((3, 4, 5)).astype(np.float32)


def _comp(lax, np_, name):
    return {"add": lax.add, "max": lax.max, "mul": lax.mul, "or": operator.or_,
            "logaddexp": lambda a, b: np_.logaddexp(a, b)}[name]


@pytest.mark.parametrize("name,init,dims", [("add", 0.0, (0, 2)), ("max", -np.inf, (1,)), ("add", 2.0, (1,)),
                                            ("mul", 1.0, ()), ("logaddexp", 0.0, (0, 1)), ("add", 0.0, (3,))])
def test_lax_reduce_as_jax(name, init, dims):
    """``lax.reduce`` with a reducing primitive (identity or not as the initial value) or another computation
    (``logaddexp``: the pairwise fold), and an empty dimension (``(3,)`` of a zero-size axis: the initial value)."""
    x = np.zeros((2, 3, 4, 0), np.float32) if dims == (3,) else X
    want = jax.lax.reduce(x, np.float32(init), _comp(jax.lax, jnp, name), dims)
    got = fa.lax.reduce(x, init, _comp(fa.lax, fnp, name), dims)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=2e-6, atol=1e-6)


def test_lax_reduce_on_every_device(device):
    """One jitted program per device: a sum with a non-identity initial value, a max, and the pairwise fold."""
    def f(lax, np_, v):
        return (lax.reduce(v, np_.float32(2.0), lax.add, (0, 2)), lax.reduce(v, -np_.inf, lax.max, (1,)),
                lax.reduce(v, np_.float32(0.0), lambda a, b: np_.logaddexp(a, b), (0, 1)))
    want = jax.jit(lambda v: f(jax.lax, jnp, v))(X)
    got = fa.jit(lambda v: f(fa.lax, fnp, v), device=device)(fa.device_put(X, device))
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=2e-6, atol=1e-6)


def test_lax_reduce_variadic_argmax_bool_and_errors():
    """JAX's variadic form: a (value, index) argmax over axis 1; a bool ``or``; and the bad inputs' errors."""
    idx = np.broadcast_to(np.arange(4, dtype=np.int32)[None, :, None], X.shape)

    def argmax_comp(np_):
        def comp(a, b):
            (va, ia), (vb, ib) = a, b
            pick = (va > vb) | ((va == vb) & (ia < ib))
            return np_.where(pick, va, vb), np_.where(pick, ia, ib)
        return comp
    want = jax.lax.reduce((X, idx), (np.float32(-np.inf), np.int32(0)), argmax_comp(jnp), (1,))
    got = fa.lax.reduce((X, idx), (-np.inf, 0), argmax_comp(fnp), (1,))
    np.testing.assert_array_equal(np.asarray(got[1]), np.asarray(want[1]))
    np.testing.assert_array_equal(np.asarray(got[0]), np.asarray(want[0]))
    b = X > 0
    np.testing.assert_array_equal(np.asarray(fa.lax.reduce(b, False, operator.or_, (2,))),
                                  np.asarray(jax.lax.reduce(b, np.bool_(False), operator.or_, (2,))))
    with pytest.raises(ShapeError, match="distinct dimensions"):
        fa.lax.reduce(X, 0.0, fa.lax.add, (1, 1))
    with pytest.raises(TypeError, match="structure"):
        fa.lax.reduce((X, X), 0.0, fa.lax.add, (0,))
    with pytest.raises(TypeError, match=r"reduce needs a callable as computation \(a function of two values"):
        fa.lax.reduce(X, 0.0, "add", (0,))


def test_lax_reduce_under_jit_and_grad():
    f = fa.jit(lambda v: fa.lax.reduce(v, 0.0, fa.lax.add, (0, 2)))
    np.testing.assert_allclose(np.asarray(f(X)), X.astype(np.float64).sum((0, 2)), rtol=1e-5)
    g = fa.grad(lambda v: fa.lax.reduce(v, -np.inf, fa.lax.max, (1,)).sum())(X)
    np.testing.assert_array_equal(np.asarray(g), np.asarray(jax.grad(
        lambda v: jax.lax.reduce(v, -np.inf, jax.lax.max, (1,)).sum())(X)))


@pytest.mark.parametrize("fn", ["softmax", "log_softmax"])
def test_softmax_where_as_jax(device, fn):
    """``where=`` (a full mask, a broadcast row, a slice masked entirely) against ``jax.nn``."""
    x = X[0]
    w = x > -0.3
    w[1] = False
    xd = fa.device_put(x, device)
    both = fa.jit(lambda v: (getattr(fa.nn, fn)(v, axis=-1, where=w), getattr(fa.nn, fn)(v, axis=-1, where=w[0])),
                  device=device)(xd)
    for where, got in zip((w, w[0]), both, strict=True):
        want = getattr(jax.nn, fn)(x, axis=-1, where=where)
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("fn", ["softmax", "log_softmax"])
def test_softmax_where_gradient_and_errors(fn):
    x, w = X[0, 0], X[0, 0] > -0.3
    gw = jax.grad(lambda v: jnp.sum(jnp.where(w, getattr(jax.nn, fn)(v, where=w), 0) * jnp.arange(5.0)))(x)
    gf = fa.grad(lambda v: fnp.sum(fnp.where(w, getattr(fa.nn, fn)(v, where=w), 0) * fnp.arange(5.0)))(x)
    np.testing.assert_allclose(np.asarray(gf), np.asarray(gw), rtol=1e-5, atol=1e-6)
    with pytest.raises(ShapeError, match="broadcast"):
        getattr(fa.nn, fn)(x, where=np.ones(3, bool))
    with pytest.raises(DTypeError, match="bool"):
        getattr(fa.nn, fn)(x, where=np.ones(5))
