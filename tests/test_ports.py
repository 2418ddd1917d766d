"""Ports of public JAX and MLX programs, run with changed imports and compared with the original
library on the same inputs (the originals are jax/examples/advi.py, a jax.ops.segment_sum graph
layer as in GNN codebases, and mlx-examples' normalizing_flow; the code here is our own, shrunk to
run in seconds). Each program is written once over a namespace ``M`` holding either JAX's modules or
fnarray's, so the port is exactly the import change that docs/from_jax.md describes."""

from __future__ import annotations

import functools
import math
import types
from functools import partial

import numpy as np
import pytest

import fnarray as fa
import fnarray.numpy as fnp

jax = pytest.importorskip("jax")


def _jax_ns():
    import jax.numpy as jnp
    import jax.scipy.stats.norm as norm
    return types.SimpleNamespace(jax=jax, jnp=jnp, lax=jax.lax, random=jax.random, tree_util=jax.tree_util,
                                 nn=jax.nn, norm=norm, ops=jax.ops)


def _fa_ns():
    import fnarray.scipy.stats.norm as norm
    return types.SimpleNamespace(jax=fa, jnp=fnp, lax=fa.lax, random=fa.random, tree_util=fa.tree_util, nn=fa.nn,
                                 norm=norm, ops=fa.ops)


def advi(M, steps=4):
    """jax/examples/advi.py: a Gaussian fitted to the funnel density by a Monte Carlo ELBO gradient."""
    jnp, random, vmap, jit, grad, norm = M.jnp, M.random, M.jax.vmap, M.jax.jit, M.jax.grad, M.norm

    def diag_gaussian_sample(rng, mean, log_std):
        return mean + jnp.exp(log_std) * random.normal(rng, mean.shape)

    def diag_gaussian_logpdf(x, mean, log_std):
        return jnp.sum(vmap(norm.logpdf)(x, mean, jnp.exp(log_std)))

    def elbo(logprob, rng, mean, log_std):
        s = diag_gaussian_sample(rng, mean, log_std)
        return logprob(s) - diag_gaussian_logpdf(s, mean, log_std)

    def batch_elbo(logprob, rng, params, n):
        rngs = random.split(rng, n)
        return jnp.mean(vmap(partial(elbo, logprob), in_axes=(0, None, None))(rngs, *params))

    @jit(static_argnums=(0, 1, 2, 4))
    def mesh_eval(func, xl, yl, params, num_ticks):
        X, Y = jnp.meshgrid(jnp.linspace(*xl, num=num_ticks), jnp.linspace(*yl, num=num_ticks))
        zs = vmap(func, in_axes=(0, None))(jnp.stack([X.ravel(), Y.ravel()]).T, params)
        return zs.reshape(X.shape)

    def funnel(p):
        return norm.logpdf(p[0], 0, jnp.exp(p[1])) + norm.logpdf(p[1], 0, 1.35)

    @jit
    def objective(params, t):
        return -batch_elbo(funnel, random.key(t), params, 16)   # a key from a traced seed

    @jit
    def update(i, state):       # jax.example_libraries.optimizers.momentum(0.1, 0.9), written out
        x, v = state
        g = grad(objective)(x, i)
        v = M.tree_util.tree_map(lambda vv, gg: 0.9 * vv + gg, v, g)
        return M.tree_util.tree_map(lambda xx, vv: xx - 0.1 * vv, x, v), v

    params = (jnp.zeros(2), jnp.zeros(2))
    g0 = jit(grad(objective))((jnp.asarray([0.3, -0.5]), jnp.asarray([0.2, 0.1])), 7)
    state = (params, M.tree_util.tree_map(jnp.zeros_like, params))
    bounds = []
    for t in range(steps):
        state = update(t, state)
        bounds.append(objective(state[0], t))
    Z = mesh_eval(lambda x, p: jnp.exp(diag_gaussian_logpdf(x, *p)), (-2, 2), (-4, 2), state[0], 5)
    samples = jit(vmap(diag_gaussian_sample, in_axes=(0, None, None)))(random.split(random.key(3), 8), *state[0])
    return [g0[0], g0[1], jnp.stack(bounds), state[0][0], state[0][1], Z, samples]


def segment_layer(M):
    """A graph layer as GNN codebases write it: messages gathered by sender, aggregated by receiver."""
    jnp = M.jnp
    r = np.random.RandomState(4)
    n, e = 10, 30
    senders = jnp.asarray(r.randint(0, n, e).astype(np.int32))
    receivers = jnp.asarray(r.randint(0, n, e).astype(np.int32))
    x = jnp.asarray(r.randn(n, 4).astype(np.float32))
    w = jnp.asarray(r.randn(4, 4).astype(np.float32))

    def layer(w, x):
        deg = M.ops.segment_sum(jnp.ones(e), receivers, num_segments=n)
        msg = (x @ w)[senders]
        agg = M.ops.segment_sum(msg, receivers, num_segments=n) / jnp.maximum(deg, 1.0)[:, None]
        top = M.ops.segment_max(msg, receivers, num_segments=n)
        return M.nn.relu(agg), jnp.where(jnp.isfinite(top), top, 0.0)

    a, b = M.jax.jit(layer)(w, x)
    g = M.jax.jit(M.jax.grad(lambda w: jnp.sum(layer(w, x)[0] ** 2) + jnp.sum(layer(w, x)[1])))(w)
    return [a, b, g]


@functools.lru_cache(maxsize=None)
def _reference(prog):
    with jax.enable_x64(fa.config.enable_x64):   # JAX with fnarray's setting: the same default dtypes
        return [np.asarray(r) for r in prog(_jax_ns())]


def _compare(prog, device, rtol, atol, loose=()):
    ref = _reference(prog)
    old = fa.config.default_device
    fa.config.default_device = str(device)
    try:
        out = [np.asarray(o) for o in prog(_fa_ns())]
    finally:
        fa.config.default_device = old
    for i, (o, r) in enumerate(zip(out, ref, strict=True)):
        assert o.shape == r.shape, (i, o.shape, r.shape)
        tol = 10 * rtol if i in loose else rtol
        np.testing.assert_allclose(o.astype(np.float64), r.astype(np.float64), rtol=tol, atol=atol, err_msg=str(i))


def test_advi_port_matches_jax():
    # fa.random is bit-identical to jax.random; one gradient agrees to float32 rounding, and the
    # four momentum steps after it amplify those roundings (the funnel's exp(log_std) is stiff)
    _compare(advi, "numpy:0", rtol=2e-4, atol=1e-5, loose=(2, 3, 4, 5, 6))


def test_segment_layer_port_matches_jax(device):
    _compare(segment_layer, device, rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------------------- MLX: normalizing_flow (RealNVP)


def _moons(n=32):
    r = np.random.RandomState(0)
    t = r.rand(n) * np.pi
    x = np.stack([np.cos(t), np.sin(t)], 1) + 0.06 * r.randn(n, 2)
    return ((x - x.mean(0)) / x.std(0)).astype(np.float32)


def _flow_mlx(path, steps):
    mx = pytest.importorskip("mlx.core")
    import mlx.nn as nn
    import mlx.optimizers as optim

    class MLP(nn.Module):
        def __init__(self, sizes):
            super().__init__()
            self.layers = [nn.Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:])]

        def __call__(self, x):
            for layer in self.layers[:-1]:
                x = nn.gelu(layer(x))
            return self.layers[-1](x)

    class RealNVP(nn.Module):
        def __init__(self, n_t, d, h):
            super().__init__()
            self.mask_list = [(mx.arange(d) % 2 == i % 2).astype(mx.bool_) for i in range(n_t)]
            self.freeze(keys=["mask_list"])
            self.conditioner_list = [MLP([d, h, h, 2 * d]) for _ in range(n_t)]

        def __call__(self, x):
            lp = mx.zeros(x.shape[0])
            for mask, cond in zip(self.mask_list[::-1], self.conditioner_list[::-1]):
                shift, log_scale = mx.split(cond(mx.where(mask, 0.0, x)), 2, axis=-1)
                lp += mx.sum(mx.where(mask, -log_scale, 0.0), axis=-1)
                x = mx.where(mask, (x - shift) * mx.exp(-log_scale), x)
            return lp + (-0.5 * math.log(2 * math.pi) - 0.5 * x ** 2).sum(-1)

    mx.random.seed(0)
    model = RealNVP(2, 2, 8)
    mx.eval(model.parameters())
    model.save_weights(path)
    optimizer = optim.Adam(learning_rate=1e-2)
    state = [model.state, optimizer.state]

    @partial(mx.compile, inputs=state, outputs=state)
    def step(x):
        loss, grads = nn.value_and_grad(model, lambda m, x: -mx.mean(m(x)))(model, x)
        optimizer.update(model, grads)
        return loss

    x = mx.array(_moons())
    return np.array([step(x).item() for _ in range(steps)]), np.array(model(x))


def _flow_fa(path, steps):
    mx, nn = fnp, fa.nn        # the port: mlx.core -> fnarray.numpy, mlx.nn -> fa.nn

    class MLP(nn.Module):
        layers: list

        def __init__(self, sizes, *, key):
            keys = fa.random.split(key, len(sizes) - 1)
            self.layers = [nn.Linear(a, b, key=k) for a, b, k in zip(sizes[:-1], sizes[1:], keys)]

        def __call__(self, x):
            for layer in self.layers[:-1]:
                x = nn.gelu(layer(x), approximate=False)      # mlx.nn.gelu is the erf form
            return self.layers[-1](x)

    class RealNVP(nn.Module):
        mask_list: tuple = nn.field(static=True)                # MLX's frozen arrays: static fields
        conditioner_list: list

        def __init__(self, n_t, d, h, *, key):
            self.mask_list = tuple(tuple(bool(v) for v in np.arange(d) % 2 == i % 2) for i in range(n_t))
            self.conditioner_list = [MLP([d, h, h, 2 * d], key=k) for k in fa.random.split(key, n_t)]

        def __call__(self, x):
            lp = mx.zeros(x.shape[0])
            for mask, cond in zip(self.mask_list[::-1], self.conditioner_list[::-1]):
                shift, log_scale = mx.split(cond(mx.where(mask, 0.0, x)), 2, axis=-1)
                lp += mx.sum(mx.where(mask, -log_scale, 0.0), axis=-1)
                x = mx.where(mask, (x - shift) * mx.exp(-log_scale), x)
            return lp + (-0.5 * math.log(2 * math.pi) - 0.5 * x ** 2).sum(-1)

    # the MLX checkpoint also holds the frozen masks: strict=False skips them
    model = fa.load(path, like=RealNVP(2, 2, 8, key=fa.random.key(0)), strict=False)
    opt = fa.optim.adam(1e-2, bias_correction=False)           # mlx.optimizers.Adam's update
    ost = opt.init(model)

    @fa.jit
    def step(model, ost, x):
        loss, grads = fa.value_and_grad(lambda m, x: -mx.mean(m(x)))(model, x)
        upd, ost = opt.update(grads, ost, model)
        return fa.optim.apply_updates(model, upd), ost, loss

    x = mx.asarray(_moons())
    losses = []
    for _ in range(steps):
        model, ost, loss = step(model, ost, x)
        losses.append(float(loss))
    return np.array(losses), np.asarray(model(x))


@pytest.fixture(scope="module")
def flow_reference(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("flow") / "flow.safetensors")
    return path, _flow_mlx(path, 6)


@pytest.mark.parametrize("dev", ["numpy:0", "mlx:0"])
def test_normalizing_flow_port_matches_mlx(dev, flow_reference):
    path, ref = flow_reference
    old = fa.config.default_device
    fa.config.default_device = dev
    try:
        out = _flow_fa(path, 6)
    finally:
        fa.config.default_device = old
    for o, r in zip(out, ref, strict=True):
        np.testing.assert_allclose(o, r, rtol=1e-4, atol=1e-5)


# ----------------------------------------------------------------------------- what the ports needed, one by one


def test_adam_without_bias_correction_matches_mlx():
    mx = pytest.importorskip("mlx.core")
    import mlx.optimizers as optim
    r = np.random.RandomState(1)
    w0 = r.randn(5).astype(np.float32)
    grads = [r.randn(5).astype(np.float32) for _ in range(4)]
    mopt = optim.Adam(learning_rate=0.1)            # MLX's default: no 1 - b**t correction
    params = {"w": mx.array(w0)}
    mopt.init(params)
    opt = fa.optim.adam(0.1, bias_correction=False)
    p = {"w": fnp.asarray(w0)}
    st = opt.init(p)
    for g in grads:
        params = mopt.apply_gradients({"w": mx.array(g)}, params)
        upd, st = opt.update({"w": fnp.asarray(g)}, st, p)
        p = fa.optim.apply_updates(p, upd)
    np.testing.assert_allclose(np.asarray(p["w"]), np.array(params["w"]), rtol=1e-6, atol=1e-6)
    # and the default (optax's) update: a hand-written float64 loop with the correction
    m = v = np.zeros(5)
    w = w0.astype(np.float64)
    opt = fa.optim.adamw(0.1, weight_decay=0.01, bias_correction=True)
    p = fnp.asarray(w0)
    st = opt.init(p)
    for t, g in enumerate(grads, 1):
        m, v = 0.9 * m + 0.1 * g, 0.999 * v + 0.001 * g.astype(np.float64) ** 2
        w = w - 0.1 * ((m / (1 - 0.9 ** t)) / (np.sqrt(v / (1 - 0.999 ** t)) + 1e-8) + 0.01 * w)
        upd, st = opt.update(fnp.asarray(g), st, p)
        p = fa.optim.apply_updates(p, upd)
    np.testing.assert_allclose(np.asarray(p), w, rtol=1e-5, atol=1e-6)


def test_batchnorm_unbiased_running_var_matches_mlx():
    mx = pytest.importorskip("mlx.core")
    import mlx.nn as mnn
    x = np.random.RandomState(2).randn(6, 3).astype(np.float32)
    ref = mnn.BatchNorm(3)                          # momentum 0.1 (PyTorch's), unbiased running variance
    ref(mx.array(x))
    bn = fa.nn.BatchNorm(3, momentum=0.9, running_var_ddof=1)
    _, st = bn(fnp.asarray(x), bn.init_state())
    np.testing.assert_allclose(np.asarray(st.mean), np.array(ref.running_mean), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(np.asarray(st.var), np.array(ref.running_var), rtol=1e-6)
    _, st0 = fa.nn.BatchNorm(3, momentum=0.9)(fnp.asarray(x), bn.init_state())   # Flax's biased default
    np.testing.assert_allclose(np.asarray(st0.var), 0.9 + 0.1 * x.astype(np.float64).var(0), rtol=1e-6)
    with pytest.raises(ValueError, match="running_var_ddof"):
        fa.nn.BatchNorm(3, running_var_ddof=2)


def test_dropout_takes_p_as_mlx_and_equinox():
    assert fa.nn.Dropout(p=0.25).rate == 0.25 and fa.nn.Dropout(0.3).rate == 0.3
    assert fa.nn.Dropout(rate=0.2).rate == 0.2 and fa.nn.Dropout().rate == 0.5
    with pytest.raises(TypeError, match="once"):
        fa.nn.Dropout(p=0.1, rate=0.2)
    y = fa.nn.Dropout(p=0.5)(fnp.ones(1000), key=fa.random.key(0))
    kept = np.asarray(y) != 0
    assert 400 < kept.sum() < 600 and np.all(np.asarray(y)[kept] == 2.0)


def test_load_strict_false_skips_and_keeps(tmp_path):
    path = str(tmp_path / "ck.safetensors")
    fa.save(path, {"w": fnp.arange(3.0), "mask": fnp.asarray([True, False]), "b": fnp.ones(2)})
    like = {"w": fnp.zeros(3), "extra": fnp.full(2, 7.0)}
    with pytest.raises(fa.CheckpointError, match="lacks"):
        fa.load(path, like=like)
    with pytest.raises(fa.CheckpointError, match="no leaf for"):
        fa.load(path, like={"w": fnp.zeros(3)})
    got = fa.load(path, like=like, strict=False)
    np.testing.assert_array_equal(np.asarray(got["w"]), [0.0, 1.0, 2.0])
    np.testing.assert_array_equal(np.asarray(got["extra"]), [7.0, 7.0])      # absent from the file: kept
    with pytest.raises(fa.CheckpointError, match="float(32|64)\\[4\\]"):           # shapes are still checked
        fa.load(path, like={"w": fnp.zeros(4)}, strict=False)
