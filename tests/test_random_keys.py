"""Typed PRNG keys (``fa.random.key``, dtype ``key<fry>``) against JAX's (issue 25 item 6).

The oracle is ``jax.random``: the same words, the same printed form, the same samples from a typed and
a raw key, and typed keys through ``jit``, ``vmap``, ``grad`` and the loops, on every installed backend.
"""

from __future__ import annotations

import numpy as np
import pytest

import fnarray as fa
import fnarray.numpy as fnp
import fnarray.random as fr
from fnarray.core.prng import KeyArray

jax = pytest.importorskip("jax")
jr = jax.random
jnp = jax.numpy


def _words(k):
    if isinstance(k, KeyArray):
        return np.asarray(fr.key_data(k))
    if jnp.issubdtype(k.dtype, jax.dtypes.prng_key):
        return np.asarray(jr.key_data(k))
    return np.asarray(k)


def _same_keys(got, want):
    assert isinstance(got, KeyArray), type(got)
    assert got.shape == want.shape and str(got.dtype) == str(want.dtype) == "key<fry>"
    np.testing.assert_array_equal(_words(got), _words(want))


def test_key_prints_and_types_as_jax():
    k, jk = fr.key(0), jr.key(0)
    assert repr(k) == repr(jk) and str(k) == str(jk)
    assert repr(k) == "Array((), dtype=key<fry>) overlaying:\n[0 0]"
    for got, want in [(fr.split(k, 3), jr.split(jk, 3)), (fr.split(k, 3)[1], jr.split(jk, 3)[1]),
                      (fr.fold_in(k, 3), jr.fold_in(jk, 3)), (fr.split(k, (2, 2)), jr.split(jk, (2, 2)))]:
        assert repr(got) == repr(want)
    assert str(k.dtype) == repr(k.dtype) == k.dtype.name == str(jk.dtype)
    assert (k.shape, k.ndim, k.size, k.itemsize) == (jk.shape, jk.ndim, jk.size, jk.itemsize)
    assert str(fa.typeof(fr.split(k, 3))) == str(jax.typeof(jr.split(jk, 3))) == "key<fry>[3]"
    # issubdtype: typed keys are prng_key (an extended dtype); raw keys are uint32
    assert fnp.issubdtype(k.dtype, fa.dtypes.prng_key) and jnp.issubdtype(jk.dtype, jax.dtypes.prng_key)
    assert fnp.issubdtype(k.dtype, fa.dtypes.extended)
    assert not fnp.issubdtype(k.dtype, fnp.integer) and not jnp.issubdtype(jk.dtype, jnp.integer)
    raw = fr.PRNGKey(0)
    assert raw.dtype == np.uint32 and raw.shape == (2,) == jr.PRNGKey(0).shape
    assert not fnp.issubdtype(raw.dtype, fa.dtypes.prng_key)
    assert fr.key_impl(k) == fr.key_impl(raw) == str(jr.key_impl(jk)) == "threefry2x32"
    with pytest.raises(TypeError, match="key_data"):
        np.asarray(k)


@pytest.mark.parametrize("seed", [0, 1, 42, 2 ** 31 - 1])
def test_key_data_and_wrap_key_data_as_jax(seed):
    k, jk = fr.key(seed), jr.key(seed)
    np.testing.assert_array_equal(np.asarray(fr.key_data(k)), np.asarray(jr.key_data(jk)))
    np.testing.assert_array_equal(np.asarray(fr.key_data(k)), np.asarray(fr.PRNGKey(seed)))
    # batched both ways
    ks, jks = fr.split(k, (2, 3)), jr.split(jk, (2, 3))
    data = fr.key_data(ks)
    assert data.shape == (2, 3, 2) and data.dtype == np.uint32
    np.testing.assert_array_equal(np.asarray(data), np.asarray(jr.key_data(jks)))
    _same_keys(fr.wrap_key_data(data), jr.wrap_key_data(jr.key_data(jks)))
    _same_keys(fr.wrap_key_data(np.asarray(data)), jks)
    # raw keys are words already
    raw = fr.split(fr.PRNGKey(seed), 4)
    np.testing.assert_array_equal(np.asarray(fr.key_data(raw)), np.asarray(raw))
    _same_keys(fr.wrap_key_data(raw), jr.wrap_key_data(jr.split(jr.PRNGKey(seed), 4)))
    with pytest.raises(TypeError, match="wrapped already"):
        fr.wrap_key_data(k)
    with pytest.raises(ValueError, match="threefry2x32"):
        fr.wrap_key_data(data, impl="rbg")


def test_split_fold_in_keep_the_form():
    k = fr.key(7)
    _same_keys(fr.split(k), jr.split(jr.key(7)))
    _same_keys(fr.fold_in(k, 12345), jr.fold_in(jr.key(7), 12345))
    raw = fr.split(fr.PRNGKey(7))
    assert not isinstance(raw, KeyArray) and raw.shape == (2, 2)
    np.testing.assert_array_equal(np.asarray(raw), np.asarray(jr.split(jr.PRNGKey(7))))
    # indexing, iteration, len, reshape, equality over the batch shape
    ks, jks = fr.split(k, 6), jr.split(jr.key(7), 6)
    assert len(ks) == 6
    _same_keys(ks[2:4], jks[2:4])
    _same_keys(ks.reshape(2, 3)[1, 2], jks.reshape(2, 3)[1, 2])
    _same_keys(list(ks)[5], jks[5])
    np.testing.assert_array_equal(np.asarray(ks == ks[0]), np.asarray(jks == jks[0]))


def _samplers():
    return {
        "bits": lambda k: fr.bits(k, (5,)),
        "uniform": lambda k: fr.uniform(k, (5,)),
        "normal": lambda k: fr.normal(k, (5,)),
        "randint": lambda k: fr.randint(k, (5,), 0, 10),
        "bernoulli": lambda k: fr.bernoulli(k, 0.3, (5,)),
        "permutation": lambda k: fr.permutation(k, 8),
        "choice": lambda k: fr.choice(k, 8, (3,), replace=False),
        "gumbel": lambda k: fr.gumbel(k, (5,)),
        "exponential": lambda k: fr.exponential(k, (5,)),
        "laplace": lambda k: fr.laplace(k, (5,)),
        "categorical": lambda k: fr.categorical(k, fnp.asarray(np.log(np.array([0.2, 0.3, 0.5], np.float32))),
                                                shape=(5,)),
        "truncated_normal": lambda k: fr.truncated_normal(k, -1.0, 1.0, (5,)),
        "gamma": lambda k: fr.gamma(k, 2.0, (5,)),
        "beta": lambda k: fr.beta(k, 2.0, 3.0, (5,)),
        "poisson": lambda k: fr.poisson(k, 3.0, (5,)),
        "dirichlet": lambda k: fr.dirichlet(k, fnp.asarray(np.array([1.0, 2.0], np.float32)), (3,)),
        "multivariate_normal": lambda k: fr.multivariate_normal(k, fnp.zeros(2), fnp.eye(2), (3,)),
        "threefry_2x32": lambda k: fr.threefry_2x32(k, fnp.arange(4, dtype=fnp.uint32)),
    }


# the samplers whose bits equal JAX's (the others agree to float rounding: docs/from_jax.md)
_BITWISE = ("bits", "uniform", "normal", "randint", "bernoulli", "permutation", "choice")


@pytest.mark.parametrize("name", sorted(_samplers()))
def test_every_sampler_takes_both_forms(name):
    f = _samplers()[name]
    typed, raw = np.asarray(f(fr.key(3))), np.asarray(f(fr.PRNGKey(3)))
    np.testing.assert_array_equal(typed, raw)
    if name in _BITWISE:
        jf = {"bits": lambda k: jr.bits(k, (5,)), "uniform": lambda k: jr.uniform(k, (5,)),
              "normal": lambda k: jr.normal(k, (5,)), "randint": lambda k: jr.randint(k, (5,), 0, 10),
              "bernoulli": lambda k: jr.bernoulli(k, 0.3, (5,)), "permutation": lambda k: jr.permutation(k, 8),
              "choice": lambda k: jr.choice(k, 8, (3,), replace=False)}[name]
        np.testing.assert_array_equal(typed, np.asarray(jf(jr.key(3))))
    with pytest.raises(ValueError, match="single PRNG key"):
        f(fr.split(fr.key(3), 2))


def test_typed_keys_through_transforms(device):
    k = fa.device_put(fr.key(5), device)
    jk = jr.key(5)
    # jit: a typed key in, typed keys out
    _same_keys(fa.jit(lambda k: fr.split(k, 3))(k), jax.jit(lambda k: jr.split(k, 3))(jk))
    np.testing.assert_array_equal(np.asarray(fa.jit(lambda k: fr.uniform(k, (4,)))(k)),
                                  np.asarray(jr.uniform(jk, (4,))))
    # vmap over a batch of typed keys, and returning typed keys
    ks, jks = fr.split(k, 3), jr.split(jk, 3)
    np.testing.assert_array_equal(np.asarray(fa.vmap(lambda k: fr.bits(k, (2,)))(ks)),
                                  np.asarray(jax.vmap(lambda k: jr.bits(k, (2,)))(jks)))
    _same_keys(fa.vmap(lambda k: fr.fold_in(k, 1))(ks), jax.vmap(lambda k: jr.fold_in(k, 1))(jks))
    _same_keys(fa.vmap(fr.key)(fnp.arange(3)), jax.vmap(jr.key)(jnp.arange(3)))
    # grad: a typed key as a non-differentiated argument and as an auxiliary output

    def loss(x, k):
        k1, k2 = fr.split(k)
        return fnp.sum(x * fr.uniform(k1, (3,))), k2

    def jloss(x, k):
        k1, k2 = jr.split(k)
        return jnp.sum(x * jr.uniform(k1, (3,))), k2
    x = np.ones(3, np.float32)
    g, aux = fa.grad(loss, has_aux=True)(fa.device_put(fnp.asarray(x), device), k)
    jg, jaux = jax.grad(jloss, has_aux=True)(x, jk)
    np.testing.assert_array_equal(np.asarray(g), np.asarray(jg))
    _same_keys(aux, jaux)
    # a typed key in a loop's carry
    _same_keys(fa.lax.fori_loop(0, 3, lambda i, k: fr.fold_in(k, i), k),
               jax.lax.fori_loop(0, 3, lambda i, k: jr.fold_in(k, i), jk))

    def step(k, _):
        k, sub = fr.split(k)
        return k, fr.normal(sub)

    def jstep(k, _):
        k, sub = jr.split(k)
        return k, jr.normal(sub)
    kf, xs = fa.lax.scan(step, k, None, length=4)
    jkf, jxs = jax.lax.scan(jstep, jk, None, length=4)
    _same_keys(kf, jkf)
    np.testing.assert_allclose(np.asarray(xs), np.asarray(jxs), rtol=2e-6)
