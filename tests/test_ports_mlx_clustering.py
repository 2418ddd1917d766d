"""A port of mlx-examples' ``clustering`` (fuzzy c-means, ``fcm.py``'s ``FuzzyCMeans``: memberships from
broadcast distances, centers as membership-weighted means, a host-side convergence test each iteration) from
``mlx.core`` to ``fnarray.numpy``, written for the fifteenth session's new-user probe (docs/internals.md, "Open
work"); the code is our own, in the example's structure, shrunk to 60 points in 4 dimensions.

The class is written once over a namespace ``mx``: ``mlx.core`` itself, or ``fnarray.numpy`` (the port is the
import change). What else changes, as docs/from_mlx.md says:
1. ``mx.eval(diff)``, ``mx.eval(centers, u)`` become ``fa.block_until_ready(...)`` (which takes several arguments
   as ``mx.eval`` does since this probe; before, a second argument raised ``TypeError``).
2. The initial centers are drawn with an explicit key (``fa.random.randint(fa.random.key(s), (k,), 0, n)`` for
   ``mx.random.seed(s); mx.random.randint(0, n, (k,))``); both runs here start from the same given rows, as MLX's
   global stream cannot be reproduced.
3. ``mx.argmax`` gives uint32 in MLX, int32 here (NumPy's and JAX's integer index type).
"""

from __future__ import annotations

import numpy as np
import pytest

import fnarray as fa
import fnarray.numpy as fnp

mlx_core = pytest.importorskip("mlx.core")


def _fuzzy_c_means(mx, evaluate):
    class FuzzyCMeans:
        def __init__(self, n_clusters, m=2.0, max_iter=100, tol=1e-4):
            if n_clusters < 2:
                raise ValueError("n_clusters must be >= 2")
            if m <= 1:
                raise ValueError("m (fuzziness) must be > 1")
            self.n_clusters, self.m, self.max_iter, self.tol = n_clusters, m, max_iter, tol

        def fit(self, X, indices):
            centers = X[indices]
            for iteration in range(self.max_iter):
                u = self._memberships(self._distances(X, centers))
                centers_new = self._centers(X, u)
                diff = mx.sum((centers_new - centers) ** 2)
                evaluate(diff)
                if float(diff) < self.tol:
                    self.n_iter_ = iteration + 1
                    break
                centers = centers_new
            else:
                self.n_iter_ = self.max_iter
            evaluate(centers, u)
            self.cluster_centers_, self.u_, self.labels_ = centers, u, mx.argmax(u, axis=1)
            return self

        def predict(self, X):
            return mx.argmax(self._memberships(self._distances(X, self.cluster_centers_)), axis=1)

        def _distances(self, X, centers):
            diff = mx.expand_dims(X, axis=1) - mx.expand_dims(centers, axis=0)
            return mx.maximum(mx.sum(diff ** 2, axis=2), 1e-10)

        def _memberships(self, distances):
            ratio = mx.expand_dims(distances, axis=2) / mx.expand_dims(distances, axis=1)
            return 1.0 / mx.sum(ratio ** (2.0 / (self.m - 1.0)), axis=2)

        def _centers(self, X, u):
            u_m = u ** self.m
            numerator = mx.sum(mx.expand_dims(u_m, axis=2) * mx.expand_dims(X, axis=1), axis=0)
            return numerator / mx.expand_dims(mx.maximum(mx.sum(u_m, axis=0), 1e-10), axis=1)

    return FuzzyCMeans


def _run(mx, evaluate, m):
    rng = np.random.default_rng(0)
    centers = (rng.normal(size=(3, 4)) * 5.0).astype(np.float32)
    assign = rng.integers(0, 3, 60)
    X = mx.stack([mx.array(centers[a]) + mx.array(rng.normal(size=4).astype(np.float32)) * 0.5 for a in assign])
    fcm = _fuzzy_c_means(mx, evaluate)(n_clusters=3, m=m, max_iter=50).fit(X, mx.array(np.array([0, 1, 2])))
    labels = np.array(fcm.labels_)
    return (fcm.n_iter_, np.array(fcm.cluster_centers_), np.array(fcm.u_), np.bincount(labels, minlength=3),
            np.array(fcm.predict(X[:7])))


@pytest.mark.parametrize("m", [2.0, 1.5])
def test_fuzzy_c_means_port_matches_mlx(device, m):
    """Iteration count, centers, every membership, cluster sizes and ``predict`` as MLX's on every device
    (float32: rtol 1e-4 on the centers, atol 1e-5 on the memberships)."""
    want = _run(mlx_core, mlx_core.eval, m)
    with fa.default_device(device):
        got = _run(fnp, fa.block_until_ready, m)
    assert got[0] == want[0]
    np.testing.assert_allclose(got[1], want[1], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got[2], want[2], rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(got[3], want[3])
    np.testing.assert_array_equal(got[4], want[4].astype(np.int64))


def test_block_until_ready_takes_several_trees_as_mx_eval():
    """``fa.block_until_ready(a, b)`` waits for both and returns ``(a, b)``; one argument returns it unchanged
    (JAX's form); leaves that are not arrays pass through; no argument raises ``TypeError`` naming it."""
    a, b = fnp.arange(3.0), {"w": fnp.ones(2), "n": 3}
    out = fa.block_until_ready(a, b)
    assert isinstance(out, tuple) and out[0] is a and out[1] is b
    assert fa.block_until_ready(a) is a
    with pytest.raises(TypeError, match="x"):
        fa.block_until_ready()
