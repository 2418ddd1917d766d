"""``fnarray.random``'s samplers composed from the others (``fnarray/_random_more.py``), added after the
twenty-third session's port probe.

Those built on ``uniform``, ``exponential`` and ``normal`` are compared with ``jax.random``'s values for the same key
(pinned; to float rounding); those built on ``gamma`` and ``binomial`` (other streams than JAX's) by
Kolmogorov-Smirnov distances against SciPy with fixed keys; then shapes, dtypes, ``shape=None`` rules and errors.
"""

from __future__ import annotations

import numpy as np
import pytest

import fnarray.random as fr
from fnarray.core.errors import DTypeError, ShapeError

st = pytest.importorskip("scipy.stats", reason="the oracle is SciPy (pip install scipy)")

N = 4000
KS_BOUND = 1.95 / np.sqrt(N)   # exceeded with probability about 1e-4

# name: (positional parameters, keyword arguments, jax.random's values for key(7) in JAX 0.10, flattened). Pinned
# rather than computed: JAX compiles each of these for 0.3-1.2 s (a live comparison took 6.6 s); regenerate with
# `np.asarray(getattr(jax.random, name)(jax.random.key(7), *args, **kw)).ravel()`.
MATCH_JAX = {
    "rayleigh": ((np.array([0.5, 2.0], np.float32),), dict(shape=(2, 2)),
                 [0.44406745, 0.45352685, 0.7728321, 2.548763]),
    "pareto": ((3.0,), dict(shape=(4,)), [1.4531176, 3.4026585, 1.1277771, 1.2160859]),
    "weibull_min": ((2.0, 1.5), dict(shape=(4,)), [2.158415, 4.7617164, 1.013516, 1.401992]),
    "maxwell": ((), dict(shape=(4,)), [2.0702868, 0.7144703, 1.4999796, 1.705673]),
    "double_sided_maxwell": ((np.array([0.0, 1.0], np.float32), 2.0), dict(shape=(2,)),
                             [-2.477191, -4.1701055, 2.7603445, 5.8724093]),
    "triangular": ((0.0, np.array([0.0, 0.3, 2.0], np.float32), 2.0), dict(shape=(2, 3)),
                   [0.8582293, 1.706227, 1.1006244, 0.50863624, 1.0434512, 1.5886215]),
    "wald": ((np.array([0.5, 1.5, 40.0], np.float32),), {}, [0.23181117, 1.7837371, 3.115139]),
    "geometric": ((np.array([0.05, 0.5, 1.0], np.float32),), dict(shape=(2, 3)), [8, 1, 1, 16, 1, 1]),
    "orthogonal": ((2,), dict(shape=(2,)), [0.65811265, 0.7529195, -0.7529195, 0.65811265, 0.9786309, -0.20562439,
                                            -0.20562439, -0.97863096]),
}


@pytest.mark.parametrize("kind", ["typed", "raw"])
def test_composed_samplers_match_jax(kind):
    key = fr.key(7) if kind == "typed" else fr.key_data(fr.key(7))
    for name, (args, kw, want) in MATCH_JAX.items():
        got = np.asarray(getattr(fr, name)(key, *args, **kw))
        assert got.dtype == (np.int32 if name == "geometric" else np.float32), name
        np.testing.assert_allclose(got.ravel(), want, rtol=2e-6, atol=1e-6, err_msg=name)
    # a semi-orthogonal 2 x 4 (rows orthonormal) and a 4 x 2 (columns)
    q = np.asarray(fr.orthogonal(key, 2, (), m=4), np.float64)
    assert q.shape == (2, 4)
    np.testing.assert_allclose(q @ q.T, np.eye(2), atol=1e-6)
    q = np.asarray(fr.orthogonal(key, 4, (), m=2), np.float64)
    np.testing.assert_allclose(q.T @ q, np.eye(2), atol=1e-6)


def test_gamma_based_samplers_distribution():
    g = np.asarray(fr.generalized_normal(fr.key(0), 1.5, (N,)))
    assert g.dtype == np.float32 and st.kstest(g.astype(np.float64), st.gennorm(1.5).cdf).statistic < KS_BOUND
    # uniform in the unit L2 ball of R^3: the radius cubed is uniform on [0, 1]
    b = np.asarray(fr.ball(fr.key(1), 3, 2, (N,)))
    assert b.shape == (N, 3)
    r3 = np.linalg.norm(b.astype(np.float64), axis=-1) ** 3
    assert r3.max() < 1 and st.kstest(r3, st.uniform.cdf).statistic < KS_BOUND
    p = np.array([0.2, 0.0, 0.5, 0.3], np.float32)
    m = np.asarray(fr.multinomial(fr.key(2), 10.0, p, shape=(N, 4)))
    assert m.shape == (N, 4) and m.dtype == np.float32
    assert (m.sum(-1) == 10).all() and (m[:, 1] == 0).all()
    for i in (0, 2):   # each count is Binomial(10, p_i): its mean within 5 standard errors
        assert abs(m[:, i].mean() - 10 * p[i]) < 5 * np.sqrt(10 * p[i] * (1 - p[i]) / N)


def test_sampler_shapes_dtypes_and_errors():
    k = fr.key(0)
    # shape=None: the parameters' broadcast shape; double_sided_maxwell's () means params + params (JAX's rule)
    assert fr.triangular(k, np.zeros((2, 1)), 0.5, np.ones(3)).shape == (2, 3)
    assert fr.pareto(k, np.ones((0, 2), np.float32)).shape == (0, 2)
    assert fr.double_sided_maxwell(k, np.zeros(2), 1.0).shape == (2, 2)
    assert fr.double_sided_maxwell(k, np.zeros(2), 1.0, (5,)).shape == (5, 2)
    assert fr.ball(k, 4, 1.0, (2, 3), np.float16).shape == (2, 3, 4)
    assert fr.orthogonal(k, 0, (2,)).shape == (2, 0, 0)
    assert fr.geometric(k, 0.3, (2,), np.int16).dtype == np.int16
    assert (np.asarray(fr.geometric(k, 1.0, (50,))) == 1).all()
    assert fr.multinomial(k, np.array([3.0, 4.0]), np.full((2, 3), 1 / 3)).shape == (2, 3)
    with pytest.raises(DTypeError):
        fr.rayleigh(k, 1.0, (2,), np.int32)
    with pytest.raises(DTypeError):
        fr.geometric(k, 0.5, (2,), np.float32)
    with pytest.raises(ShapeError):
        fr.wald(k, np.ones(3), (2,))
    with pytest.raises(ShapeError):
        fr.multinomial(k, 5.0, 0.5)
