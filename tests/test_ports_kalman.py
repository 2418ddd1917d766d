"""A linear-Gaussian state-space model written for the fifteenth session's new-user probe (docs/internals.md,
"Open work"), in the style of public "Kalman filter in JAX" notebooks, run as written under JAX and, after
``jax_port.rewrite_imports`` (imports only), under fnarray: a model class registered with
``register_pytree_node_class`` (properties computed from its leaves), sampling with
``random.multivariate_normal`` in ``lax.scan``, a Kalman filter (``jax.scipy.linalg.cho_factor``/``cho_solve``,
``jax.scipy.stats.multivariate_normal.logpdf``), a Rauch-Tung-Striebel smoother (``lax.scan(reverse=True)``,
``jnp.linalg.solve``, ``jax.tree.map`` over tuples), the marginal likelihood fitted by ``jit(value_and_grad)``
with respect to the model object, ``tree_util.Partial`` through ``jit``, ``vmap`` of the filter, and
``jax.nn.initializers.orthogonal``/``delta_orthogonal``. Before the probe only the initializers were missing
(``AttributeError``); with them it ports with its imports changed alone.
"""

from __future__ import annotations

import numpy as np
import pytest

import fnarray as fa
from fnarray.core.errors import DTypeError, ShapeError
from jax_port import assert_port_matches_on, rewrite_imports

jax = pytest.importorskip("jax", reason="JAX runs the program as written")

KALMAN = '''
import numpy as np
import jax
import jax.numpy as jnp
from jax import lax, random
from jax.tree_util import register_pytree_node_class, Partial
import jax.scipy.linalg as jsl
from functools import partial

# a linear-Gaussian state-space model, filtered and smoothed in lax.scan (in the style of public
# "Kalman filter in JAX" notebooks and dynamax's structure), its marginal likelihood fitted by gradient descent
@register_pytree_node_class
class LGSSM:
    def __init__(self, F, H, log_q, log_r):
        self.F, self.H, self.log_q, self.log_r = F, H, log_q, log_r
    def tree_flatten(self):
        return (self.F, self.H, self.log_q, self.log_r), None
    @classmethod
    def tree_unflatten(cls, aux, children):
        return cls(*children)
    @property
    def Q(self):
        return jnp.exp(self.log_q) * jnp.eye(self.F.shape[0])
    @property
    def R(self):
        return jnp.exp(self.log_r) * jnp.eye(self.H.shape[0])

def sample(model, key, T, m0):
    def step(x, k):
        k1, k2 = random.split(k)
        x = model.F @ x + random.multivariate_normal(k1, jnp.zeros_like(x), model.Q)
        y = model.H @ x + random.multivariate_normal(k2, jnp.zeros(model.H.shape[0]), model.R)
        return x, (x, y)
    _, (xs, ys) = lax.scan(step, m0, random.split(key, T))
    return xs, ys

def kalman_filter(model, ys, m0, P0):
    def step(carry, y):
        m, P, ll = carry
        m_pred, P_pred = model.F @ m, model.F @ P @ model.F.T + model.Q
        S = model.H @ P_pred @ model.H.T + model.R
        c, low = jsl.cho_factor(S, lower=True)
        resid = y - model.H @ m_pred
        K = jsl.cho_solve((c, low), model.H @ P_pred).T
        ll = ll + jax.scipy.stats.multivariate_normal.logpdf(y, model.H @ m_pred, S)
        m_new = m_pred + K @ resid
        P_new = P_pred - K @ S @ K.T
        return (m_new, P_new, ll), (m_new, P_new, m_pred, P_pred)
    (_, _, ll), out = lax.scan(step, (m0, P0, 0.0), ys)
    return ll, out

def rts_smoother(model, filtered):
    ms, Ps, m_preds, P_preds = filtered
    def step(carry, args):
        m_s, P_s = carry
        m, P, m_pred, P_pred = args
        G = jnp.linalg.solve(P_pred, model.F @ P).T
        m_new = m + G @ (m_s - m_pred)
        P_new = P + G @ (P_s - P_pred) @ G.T
        return (m_new, P_new), (m_new, P_new)
    nxt = jax.tree.map(lambda a: a[1:], (ms, Ps, m_preds, P_preds))
    cur = jax.tree.map(lambda a: a[:-1], (ms, Ps))
    _, (sm, sP) = lax.scan(step, (ms[-1], Ps[-1]), (cur[0], cur[1], nxt[2], nxt[3]), reverse=True)
    return jnp.concatenate([sm, ms[-1:]]), jnp.concatenate([sP, Ps[-1:]])

theta = 0.3
true = LGSSM(jnp.array([[jnp.cos(theta), -jnp.sin(theta)], [jnp.sin(theta), jnp.cos(theta)]]) * 0.98,
             jnp.array([[1.0, 0.0]]), jnp.log(0.05), jnp.log(0.2))
m0, P0 = jnp.array([1.0, 0.0]), jnp.eye(2)
xs, ys = sample(true, random.PRNGKey(0), 40, m0)
ll, filt = kalman_filter(true, ys, m0, P0)
print("loglik %.4f" % float(ll))
sm, sP = rts_smoother(true, filt)
print("filter rmse %.4f smoother rmse %.4f" % (float(jnp.sqrt(jnp.mean((filt[0] - xs) ** 2))), float(jnp.sqrt(jnp.mean((sm - xs) ** 2)))))
print("smoothed var <= filtered", bool(jnp.all(jnp.trace(sP, axis1=1, axis2=2) <= jnp.trace(filt[1], axis1=1, axis2=2) + 1e-5)))

init = LGSSM(jnp.eye(2) * 0.9, jnp.array([[1.0, 0.0]]), jnp.log(0.2), jnp.log(1.0))
loss = jax.jit(lambda model: -kalman_filter(model, ys, m0, P0)[0] / ys.shape[0])
vg = jax.jit(jax.value_and_grad(lambda model: -kalman_filter(model, ys, m0, P0)[0] / ys.shape[0]))
model = init
for i in range(30):
    l, g = vg(model)
    g = LGSSM(g.F, jnp.zeros_like(g.H), g.log_q, g.log_r)    # H stays fixed
    model = jax.tree.map(lambda p, d: p - 0.05 * d, model, g)
    if i % 10 == 0:
        print("step", i, "nll %.4f" % float(l))
print("fitted q %.4f r %.4f" % (float(jnp.exp(model.log_q)), float(jnp.exp(model.log_r))))
print("eig |F|", np.round(np.sort(np.abs(np.linalg.eigvals(np.asarray(model.F)))), 3))
scale = Partial(jnp.multiply, 2.0)
print("partial", jax.jit(lambda f, x: f(x))(scale, jnp.arange(3.0)))
batch_ll = jax.vmap(lambda y: kalman_filter(true, y, m0, P0)[0])(jnp.stack([ys, ys * 1.1, ys * 0.9]))
print("batch ll", np.round(np.asarray(batch_ll), 3))
leaves, treedef = jax.tree_util.tree_flatten(model)
print("leaves", len(leaves), treedef.num_leaves, [l.shape for l in leaves])
W = jax.nn.initializers.orthogonal(scale=0.5)(random.PRNGKey(1), (4, 3))
print("orth init", np.round(np.asarray(W), 4).tolist(), np.round(np.asarray(W.T @ W), 4).tolist())
K = jax.nn.initializers.delta_orthogonal()(random.PRNGKey(2), (3, 3, 2, 4))
print("delta orth", float(jnp.sum(jnp.abs(K[0]))), np.round(np.asarray(K[1, 1] @ K[1, 1].T), 4).tolist())
'''


def test_rewrite_changes_imports_only():
    changed = [(a, b) for a, b in zip(KALMAN.splitlines(), rewrite_imports(KALMAN).splitlines()) if a != b]
    assert changed and all(a.lstrip().startswith(("import ", "from ")) for a, _ in changed)


def test_kalman_ports_with_imports_only(device):
    """The program prints JAX's numbers (log-likelihood, filter and smoother errors, the fit's losses and
    parameters, the batched likelihoods, the initializers' matrices) with fnarray's default device set to
    numpy:0 and opencl:0 (``jax_port.PORT_DEVICES``)."""
    assert_port_matches_on(KALMAN, device)


@pytest.mark.parametrize("shape, kw", [((3, 3), {}), ((5, 3), {}), ((3, 5), {"scale": 2.0}), ((2, 4, 6), {}),
                                       ((4, 2, 3), {"column_axis": 0}), ((2, 3, 4), {"column_axis": -2})])
def test_orthogonal_matches_jax(device, shape, kw):
    """``orthogonal`` with JAX's key gives JAX's matrix (the same normal draw, QR signs fixed by ``R``'s
    diagonal) to float32 rounding, on every device; its columns (or rows) are orthonormal times ``scale``."""
    want = np.asarray(jax.nn.initializers.orthogonal(**kw)(jax.random.PRNGKey(3), shape))
    with fa.default_device(device):
        got = np.asarray(fa.nn.initializers.orthogonal(**kw)(fa.random.PRNGKey(3), shape))
    np.testing.assert_allclose(got, want, atol=2e-6)
    m = np.moveaxis(got, kw.get("column_axis", -1), -1).reshape(-1, shape[kw.get("column_axis", -1)])
    gram = m.T @ m if m.shape[0] >= m.shape[1] else m @ m.T
    np.testing.assert_allclose(gram, kw.get("scale", 1.0) ** 2 * np.eye(len(gram)), atol=1e-5)


def test_delta_orthogonal_matches_jax():
    """The centre tap ``(k - 1) // 2`` of 1-3 spatial dimensions, odd and even sizes, both column axes."""
    for shape in [(3, 2, 4), (3, 3, 2, 2), (3, 3, 3, 1, 2), (4, 4, 3, 3)]:
        for axis in (-1, 0):
            want = jax.nn.initializers.delta_orthogonal(1.5, axis)(jax.random.PRNGKey(1), shape)
            got = fa.nn.initializers.delta_orthogonal(1.5, axis)(fa.random.PRNGKey(1), shape)
            np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=2e-6)


def test_orthogonal_bad_input_raises_clearly():
    init = fa.nn.initializers
    key = fa.random.PRNGKey(0)
    with pytest.raises(ShapeError, match=r"at least a 2D shape, got \(3,\)"):
        init.orthogonal()(key, (3,))
    with pytest.raises(ShapeError, match="column_axis 2 is out of range for shape"):
        init.orthogonal(column_axis=2)(key, (3, 3))
    with pytest.raises(DTypeError, match="floating weights, got dtype int32"):
        init.orthogonal()(key, (3, 3), fa.numpy.int32)
    with pytest.raises(ShapeError, match="negative dimension"):
        init.orthogonal()(key, (3, -1))
    with pytest.raises(ShapeError, match="3D, 4D or 5D shape, got \\(3, 3\\)"):
        init.delta_orthogonal()(key, (3, 3))
    with pytest.raises(ShapeError, match="in_channels <= out_channels.*4 > 2"):
        init.delta_orthogonal()(key, (3, 3, 4, 2))
    with pytest.raises(ShapeError, match="column_axis 2 is out of range for shape \\(2, 2\\)"):
        init.delta_orthogonal(column_axis=2)(key, (3, 3, 2, 2))
    assert init.orthogonal()(key, (0, 3)).shape == (0, 3)        # an empty weight is empty, not an error
