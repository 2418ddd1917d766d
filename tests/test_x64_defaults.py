"""With ``enable_x64`` on, default dtypes follow JAX's (float64/int64/complex128, weak 64-bit Python scalars,
64-bit indices and sampler defaults); with it off they stay 32-bit. Table-driven against JAX itself: JAX's dtypes
and weak types come from ``jax.eval_shape`` (tracing only, no compile), so the whole table takes ~0.1 s."""

import numpy as np
import pytest

import fnarray as fa
import fnarray.numpy as fnp
from fnarray.experimental import enable_x64

jax = pytest.importorskip("jax")
jnp = jax.numpy

_ARRAY_DTYPES = ("bool", "int8", "uint8", "int32", "uint32", "int64", "float16", "bfloat16", "float32", "float64",
                 "complex64", "complex128")

# (name, f(np_, random, key)): each case runs with fnarray's namespace and with JAX's; results compare by dtype
# and weak type.
_CASES = [
    ("asarray(1.0)", lambda n, r, k: n.asarray(1.0)),
    ("asarray(1)", lambda n, r, k: n.asarray(1)),
    ("asarray(1j)", lambda n, r, k: n.asarray(1j)),
    ("asarray(True)", lambda n, r, k: n.asarray(True)),
    ("asarray([1.0, 2.0])", lambda n, r, k: n.asarray([1.0, 2.0])),
    ("asarray([1, 2])", lambda n, r, k: n.asarray([1, 2])),
    ("asarray(float64 ndarray)", lambda n, r, k: n.asarray(np.ones(2))),
    ("array([1j])", lambda n, r, k: n.array([1j])),
    ("arange(3)", lambda n, r, k: n.arange(3)),
    ("arange(3.0)", lambda n, r, k: n.arange(3.0)),
    ("ones(2)", lambda n, r, k: n.ones(2)),
    ("zeros(2)", lambda n, r, k: n.zeros(2)),
    ("empty(2)", lambda n, r, k: n.empty(2)),
    ("full(2, 1)", lambda n, r, k: n.full(2, 1).astype(n.int8) + 1),       # (full's result is strong here, weak
    ("full(2, 1.0)", lambda n, r, k: n.full(2, 1.0).astype(n.float16) + 1.0),  # in JAX: compared through a cast)
    ("eye(2)", lambda n, r, k: n.eye(2)),
    ("identity(2)", lambda n, r, k: n.identity(2)),
    ("linspace(0, 1, 3)", lambda n, r, k: n.linspace(0, 1, 3)),
    ("logspace(0, 1, 3)", lambda n, r, k: n.logspace(0, 1, 3)),
    ("geomspace(1, 2, 3)", lambda n, r, k: n.geomspace(1, 2, 3)),
    ("ones(2, dtype=float)", lambda n, r, k: n.ones(2, dtype=float)),
    ("zeros(2, dtype=int)", lambda n, r, k: n.zeros(2, dtype=int)),
    ("tri(2)", lambda n, r, k: n.tri(2)),
    ("indices((2, 2))", lambda n, r, k: n.indices((2, 2))),
    ("ones(2) + 1", lambda n, r, k: n.ones(2) + 1),
    ("sin(1.0)", lambda n, r, k: n.sin(1.0)),
    ("sqrt(2)", lambda n, r, k: n.sqrt(2)),
    ("add(1, 2.0)", lambda n, r, k: n.add(1, 2.0)),
    ("mean(arange(3))", lambda n, r, k: n.mean(n.arange(3))),
    ("sum(int8 ones)", lambda n, r, k: n.sum(n.ones(3, n.int8))),
    ("sum(uint8 ones)", lambda n, r, k: n.sum(n.ones(3, n.uint8))),
    ("sum(bool)", lambda n, r, k: n.sum(n.ones(3, bool))),
    ("sum(int32 ones)", lambda n, r, k: n.sum(n.ones(3, n.int32))),
    ("prod(int32 ones)", lambda n, r, k: n.prod(n.ones(3, n.int32))),
    ("cumsum(int32 ones)", lambda n, r, k: n.cumsum(n.ones(3, n.int32))),
    ("sum(float32 ones)", lambda n, r, k: n.sum(n.ones(3, n.float32))),
    ("var(arange(3))", lambda n, r, k: n.var(n.arange(3))),
    ("count_nonzero", lambda n, r, k: n.count_nonzero(n.arange(3))),
    ("argmax", lambda n, r, k: n.argmax(n.ones(3, n.float32))),
    ("argmin", lambda n, r, k: n.argmin(n.ones(3, n.float32))),
    ("argsort", lambda n, r, k: n.argsort(n.ones(3, n.float32))),
    ("nonzero", lambda n, r, k: n.nonzero(n.ones(3, n.float32), size=3)[0]),
    ("argwhere", lambda n, r, k: n.argwhere(n.ones(3, n.float32), size=3)),
    ("searchsorted", lambda n, r, k: n.searchsorted(n.ones(3, n.float32), n.ones(2, n.float32))),
    ("digitize", lambda n, r, k: n.digitize(n.ones(3, n.float32), n.ones(2, n.float32))),
    ("unravel_index", lambda n, r, k: n.unravel_index(n.asarray(3, n.int32), (2, 2))[0]),
    ("random.normal", lambda n, r, k: r.normal(k, (3,))),
    ("random.uniform", lambda n, r, k: r.uniform(k, (3,))),
    ("random.randint", lambda n, r, k: r.randint(k, (3,), 0, 5)),
    ("random.bernoulli", lambda n, r, k: r.bernoulli(k, 0.5, (3,))),
    ("random.permutation", lambda n, r, k: r.permutation(k, 3)),
    ("random.choice", lambda n, r, k: r.choice(k, 3, (2,))),
    ("random.exponential", lambda n, r, k: r.exponential(k, (3,))),
    ("random.gamma", lambda n, r, k: r.gamma(k, 1.0, (3,))),
    ("random.categorical", lambda n, r, k: r.categorical(k, n.ones(3, n.float32))),
    ("random.truncated_normal", lambda n, r, k: r.truncated_normal(k, -1.0, 1.0, (3,))),
    ("random.bits", lambda n, r, k: r.bits(k, (2,))),
    ("random.poisson", lambda n, r, k: r.poisson(k, 1.0, (2,))),
    ("exp(int32)", lambda n, r, k: n.exp(n.ones(2, n.int32))),
    ("arange(3) / 2", lambda n, r, k: n.arange(3) / 2),
    ("mean(bool)", lambda n, r, k: n.mean(n.ones(2, bool))),
    ("fft(arange(4))", lambda n, r, k: n.fft.fft(n.arange(4))),
    ("norm(arange(3))", lambda n, r, k: n.linalg.norm(n.arange(3))),
    ("bincount", lambda n, r, k: n.bincount(n.arange(3), length=3)),
    ("tril_indices", lambda n, r, k: n.tril_indices(3)[0]),
    ("argpartition", lambda n, r, k: n.argpartition(n.ones(3, n.float32), 1)),
    ("unique inverse", lambda n, r, k: n.unique(n.arange(3), return_inverse=True, size=3)[1]),
    ("unique counts", lambda n, r, k: n.unique(n.arange(3), return_counts=True, size=3)[1]),
    ("hanning(3)", lambda n, r, k: n.hanning(3)),                        # (float32 with x64 on before s24b)
    ("kaiser(3, 1.0)", lambda n, r, k: n.kaiser(3, 1.0)),
    ("vander(int32)", lambda n, r, k: n.vander(n.arange(3, dtype=n.int32))),   # (int64 with x64 on before s24b)
    ("vander(uint8)", lambda n, r, k: n.vander(n.ones(3, n.uint8))),
]

# (name, f(transforms)): jit and grad of Python scalars (their weak types), through fnarray's or JAX's transforms
_TRANSFORM_CASES = [
    ("jit(x * 2)(1.0)", lambda t: t.jit(lambda x: x * 2)(1.0)),
    ("jit(x)(1)", lambda t: t.jit(lambda x: x)(1)),
    ("jit(x + 1)(1j)", lambda t: t.jit(lambda x: x + 1)(1j)),
    ("grad(x * x)(1.0)", lambda t: t.grad(lambda x: x * x)(1.0)),
    ("vmap(x * 2.0)", lambda t: t.vmap(lambda x: x * 2.0)(t.numpy.ones(3, t.numpy.int32))),
]


def _sig(x):
    return (np.dtype(x.dtype).name, bool(getattr(x, "weak_type", False)))


def _fnarray(f):
    return _sig(f(fnp, fa.random, fa.random.PRNGKey(0)))


def _jax(f):
    return _sig(jax.eval_shape(lambda: f(jnp, jax.random, jax.random.PRNGKey(0))))


def _promotion_cases():
    out = []
    for name in _ARRAY_DTYPES:
        for scalar in (2, 2.0, 2j):
            out.append((f"{name} * {scalar!r}", lambda n, r, k, name=name, s=scalar: n.ones(2, name) * s))
    return out


@pytest.mark.parametrize("x64", [True, False])
def test_defaults_match_jax(x64):
    """Every case's dtype and weak type as JAX's with the same setting (off: the 32-bit defaults, unchanged)."""
    with enable_x64(x64), jax.enable_x64(x64):
        got = {name: _fnarray(f) for name, f in _CASES + _promotion_cases()}
        got.update((name, _sig(f(fa))) for name, f in _TRANSFORM_CASES)
        want = {name: _jax(f) for name, f in _CASES + _promotion_cases()}
        want.update((name, _sig(jax.eval_shape(lambda f=f: f(jax)))) for name, f in _TRANSFORM_CASES)
    assert {n: (got[n], want[n]) for n in got if got[n] != want[n]} == {}
    if not x64:   # pinned, not only JAX's: the 32-bit defaults with x64 off
        assert [got[n][0] for n in ("asarray(1.0)", "arange(3)", "ones(2)", "random.normal", "argmax")] == \
            ["float32", "int32", "float32", "float32", "int32"]


def test_jit_never_reuses_a_program_across_the_setting():
    """A program traced under one setting is not reused under the other (the setting is part of jit's key)."""
    traces = []

    @fa.jit
    def f(x):
        traces.append(1)
        return x * 2 + fnp.arange(2)

    with enable_x64(False):
        a = f(1.0)
    with enable_x64(True):
        b = f(1.0)
    with enable_x64(False):
        c = f(1.0)
    assert (a.dtype, b.dtype, c.dtype) == (np.float32, np.float64, np.float32) and len(traces) == 2
    np.testing.assert_array_equal(np.asarray(b), [2.0, 3.0])
