"""``fnarray.nn`` modules, losses and ``dot_product_attention``.

References: NumPy float64 forward passes written here, JAX (``jax.nn.dot_product_attention``,
``jax.grad`` of the same model written in ``jax.numpy``), and Python loops for per-example
gradients. Training runs on every backend against the numpy:0 run.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import fnarray as fa
import fnarray.numpy as fnp
from fnarray import nn
from fnarray.nn import losses
from fnarray.tree_util import combine, is_array, partition, tree_leaves, tree_map

from helpers import check_traced

jax = pytest.importorskip("jax")
jnp = jax.numpy

RNG = np.random.RandomState(0)


def _np(x):
    return np.asarray(x, dtype=np.float64)


def _close(a, b, rtol=2e-5, atol=2e-6):
    np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(b, np.float64), rtol=rtol, atol=atol)


def _model(key=0):
    """Embedding -> LayerNorm -> self-attention -> RMSNorm -> MLP head: every layer once."""
    k = fa.random.split(fa.random.key(key), 3)

    class Net(nn.Module):
        emb: nn.Embedding
        ln: nn.LayerNorm
        attn: nn.MultiHeadAttention
        rms: nn.RMSNorm
        head: nn.MLP

        def __init__(self):
            self.emb = nn.Embedding(11, 8, key=k[0])
            self.ln = nn.LayerNorm(8)
            self.attn = nn.MultiHeadAttention(2, 8, key=k[1])
            self.rms = nn.RMSNorm(8)
            self.head = nn.MLP(8, 5, 16, 1, activation=nn.gelu, key=k[2])

        def __call__(self, ids):
            h = self.emb(ids)
            h = h + self.attn(self.ln(h), is_causal=True)
            return self.head(self.rms(h))

    return Net()


def _loss(model, ids, targets):
    return losses.cross_entropy(model(ids), targets)


# ----------------------------------------------------------------------------- single layers vs NumPy


def test_linear_embedding_mlp_match_numpy():
    key = fa.random.key(3)
    lin = nn.Linear(4, 3, key=key)
    assert lin.weight.shape == (3, 4) and lin.bias.shape == (3,)
    bound = 1 / np.sqrt(4)
    assert np.all(np.abs(np.asarray(lin.weight)) <= bound)
    x = RNG.randn(2, 5, 4).astype(np.float32)
    _close(lin(x), x @ _np(lin.weight).T + _np(lin.bias))
    nob = nn.Linear(4, 3, use_bias=False, key=key)
    assert nob.bias is None
    _close(nob(x), x @ _np(nob.weight).T)
    emb = nn.Embedding(7, 3, key=key)
    ids = np.array([[0, 6], [3, 3]], np.int32)
    _close(emb(ids), _np(emb.weight)[ids])
    _close(emb.attend(x[..., :3]), x[..., :3] @ _np(emb.weight).T)
    mlp = nn.MLP(4, 2, 6, 2, key=key)
    assert len(mlp.layers) == 3
    h = x
    for layer in mlp.layers[:-1]:
        h = np.maximum(h @ _np(layer.weight).T + _np(layer.bias), 0)
    _close(mlp(x), h @ _np(mlp.layers[-1].weight).T + _np(mlp.layers[-1].bias))
    with pytest.raises(fa.ShapeError, match="in_features=4"):
        lin(np.ones((2, 5), np.float32))


def test_embedding_ids_out_of_range():
    """Ids index the table as ``weight[ids]`` (they gave a NaN row through take's fill mode, where the docstring
    promised clamping): negative ids count from the end, ids outside [-n, n) clamp onto the table's edge, the
    same eager and under jit (docs/design.md, "Indices"), with no host read of the ids. QuantizedEmbedding the
    same."""
    emb = nn.Embedding(5, 3, key=fa.random.key(0))
    w = _np(emb.weight)
    ids = np.array([[7, -1, -9], [-5, 2, 4]], np.int32)
    expect = w[np.clip(np.where(ids < 0, ids + 5, ids), 0, 4)]
    _close(emb(ids), expect)
    _close(fa.jit(emb)(ids), expect)
    assert emb(np.zeros((0, 2), np.int32)).shape == (0, 2, 3)
    q = nn.QuantizedEmbedding(5, 64, key=fa.random.key(1))
    edge = np.asarray(q(np.array([4], np.int32)))
    _close(q(np.array([-1], np.int32)), edge)
    _close(q(np.array([9], np.int32)), edge)
    _close(fa.jit(q)(np.array([9], np.int32)), edge)
    _close(q(np.array([-7], np.int32)), np.asarray(q(np.array([0], np.int32))))


def test_norms_match_numpy():
    x = RNG.randn(3, 4, 6).astype(np.float32)
    ln = nn.LayerNorm(6).replace(weight=fnp.asarray(RNG.randn(6).astype(np.float32)),
                                 bias=fnp.asarray(RNG.randn(6).astype(np.float32)))
    m, v = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    _close(ln(x), (x - m) / np.sqrt(v + 1e-5) * _np(ln.weight) + _np(ln.bias), rtol=1e-4, atol=1e-5)
    ln2 = nn.LayerNorm((4, 6), use_weight=False, use_bias=False)
    m2, v2 = x.mean((1, 2), keepdims=True), x.var((1, 2), keepdims=True)
    _close(ln2(x), (x - m2) / np.sqrt(v2 + 1e-5), rtol=1e-4, atol=1e-5)
    rms = nn.RMSNorm(6, eps=1e-6)
    _close(rms(x), x / np.sqrt((x.astype(np.float64) ** 2).mean(-1, keepdims=True) + 1e-6), rtol=1e-4, atol=1e-5)
    xb = fnp.asarray(x).astype(fnp.bfloat16)
    assert nn.LayerNorm(6, dtype=fnp.bfloat16)(xb).dtype == fnp.bfloat16
    assert nn.RMSNorm(6, dtype=fnp.bfloat16)(xb).dtype == fnp.bfloat16
    assert ln(xb).dtype == fnp.float32   # bfloat16 * float32 weight promotes, as in JAX


def test_batchnorm_train_and_eval_with_explicit_state():
    bn = nn.BatchNorm(3, momentum=0.9)
    state = bn.init_state()
    x = (RNG.randn(8, 5, 3) * 2 + 1).astype(np.float32)
    y, state1 = bn(x, state, training=True)
    mean, var = x.mean((0, 1)), x.var((0, 1))
    _close(y, (x - mean) / np.sqrt(var + 1e-5), rtol=1e-4, atol=1e-5)
    _close(state1.mean, 0.1 * mean, rtol=1e-5)
    _close(state1.var, 0.9 + 0.1 * var, rtol=1e-5)
    y_eval, state2 = bn(x, state1, training=False)
    assert state2 is state1
    _close(y_eval, (x - _np(state1.mean)) / np.sqrt(_np(state1.var) + 1e-5), rtol=1e-4, atol=1e-5)
    # no gradient flows into the running statistics; the step is a pure function under jit
    step = fa.jit(lambda m, s, x: fa.value_and_grad(lambda m: fnp.sum(m(x, s)[0] ** 3))(m))
    _, g = step(bn, state, x)
    assert g.weight.shape == (3,)
    check_traced(lambda m, s, x: m(x, s, training=True), bn, state, x)


def test_dropout_uses_only_the_explicit_key():
    drop = nn.Dropout(0.3)
    x = fnp.ones((200, 50))
    k = fa.random.key(5)
    a, b = np.asarray(drop(x, key=k)), np.asarray(drop(x, key=k))
    np.testing.assert_array_equal(a, b)
    assert set(np.unique(a)) <= {0.0, np.float32(1 / 0.7)}
    assert abs((a == 0).mean() - 0.3) < 0.02
    assert not np.array_equal(a, np.asarray(drop(x, key=fa.random.key(6))))
    np.testing.assert_array_equal(np.asarray(drop(x, training=False)), np.ones((200, 50)))
    with pytest.raises(ValueError, match="key="):
        drop(x)
    with pytest.raises(ValueError, match="rate"):
        nn.Dropout(1.0)


def test_sequential_wraps_functions_and_splits_keys():
    k = fa.random.key(0)
    seq = nn.Sequential([nn.Linear(4, 8, key=k), nn.relu, nn.Dropout(0.5), nn.Linear(8, 2, key=k)])
    assert isinstance(seq[1], nn.Lambda) and len(seq) == 4 and isinstance(seq[1:], nn.Sequential)
    x = RNG.randn(3, 4).astype(np.float32)
    ref = np.maximum(x @ _np(seq[0].weight).T + _np(seq[0].bias), 0) @ _np(seq[3].weight).T + _np(seq[3].bias)
    _close(seq(x, training=False), ref)
    a = seq(x, key=fa.random.key(1))
    b = seq(x, key=fa.random.key(1))
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert not np.allclose(np.asarray(a), ref)


def _attention64(q, k, v, bias=None, mask=None, causal=False, scale=None):
    q, k, v = _np(q), _np(k), _np(v)
    n, kh = q.shape[2], k.shape[2]
    k = np.repeat(k, n // kh, axis=2)
    v = np.repeat(v, n // kh, axis=2)
    logits = np.einsum("btnh,bsnh->bnts", q, k) * (scale if scale is not None else 1 / np.sqrt(q.shape[-1]))
    if bias is not None:
        logits = logits + bias
    keep = np.ones(logits.shape, bool)
    if mask is not None:
        keep &= mask
    if causal:
        keep &= np.tril(np.ones(logits.shape[-2:], bool))
    logits = np.where(keep, logits, -0.7 * np.finfo(np.float32).max)
    p = np.exp(logits - logits.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return np.einsum("bnts,bsnh->btnh", p, v)


@pytest.mark.parametrize("case", ["plain", "bias_mask", "causal", "gqa", "unbatched", "scale", "seq_lengths"])
def test_dot_product_attention_matches_jax(case):
    r = np.random.RandomState(1)
    B, T, S, N, K, H = 2, 5, 7, 4, 4, 3
    if case == "gqa":
        K = 2
    if case == "causal":
        S = T
    q = r.randn(B, T, N, H).astype(np.float32)
    k = r.randn(B, S, K, H).astype(np.float32)
    v = r.randn(B, S, K, H).astype(np.float32)
    kw = {}
    if case == "bias_mask":
        kw = {"bias": r.randn(1, N, T, S).astype(np.float32), "mask": r.rand(B, 1, T, S) > 0.3}
        kw["mask"][0, 0, 1] = False  # a fully masked row
    if case == "causal":
        kw = {"is_causal": True}
    if case == "scale":
        kw = {"scale": 0.25}
    if case == "seq_lengths":
        kw = {"query_seq_lengths": np.array([5, 3], np.int32), "key_value_seq_lengths": np.array([7, 2], np.int32)}
    if case == "unbatched":
        q, k, v = q[0], k[0], v[0]
    got = nn.dot_product_attention(q, k, v, **kw)
    # JAX's op-by-op dispatch compiles every op (seconds on this machine): the oracle runs jitted.
    want = jax.jit(lambda q, k, v: jax.nn.dot_product_attention(q, k, v, **kw))(q, k, v)
    assert got.shape == want.shape and got.dtype == np.float32
    _close(got, want, rtol=1e-5, atol=1e-5)
    if case in ("plain", "bias_mask", "causal", "gqa", "scale"):
        ref = _attention64(q, k, v, bias=kw.get("bias"), mask=kw.get("mask"), causal=kw.get("is_causal", False),
                           scale=kw.get("scale"))
        _close(got, ref, rtol=1e-5, atol=1e-5)
    # gradients too
    gq = fa.grad(lambda q: fnp.sum(nn.dot_product_attention(q, k, v, **kw) ** 2))(fnp.asarray(q))
    jq = jax.jit(jax.grad(lambda q: jnp.sum(jax.nn.dot_product_attention(q, k, v, **kw) ** 2)))(q)
    _close(gq, jq, rtol=1e-4, atol=1e-5)


def test_multi_head_attention_matches_a_numpy_reference():
    mha = nn.MultiHeadAttention(2, 6, key=fa.random.key(4), use_query_bias=True, use_output_bias=True)
    x = RNG.randn(3, 5, 6).astype(np.float32)
    mask = np.tril(np.ones((5, 5), bool))

    def proj(lin, x):
        y = x @ _np(lin.weight).T
        return y + _np(lin.bias) if lin.bias is not None else y

    q = proj(mha.query_proj, x).reshape(3, 5, 2, 3)
    k = proj(mha.key_proj, x).reshape(3, 5, 2, 3)
    v = proj(mha.value_proj, x).reshape(3, 5, 2, 3)
    ref = proj(mha.output_proj, _attention64(q, k, v, mask=mask).reshape(3, 5, 6))
    _close(mha(x, mask=mask), ref, rtol=1e-4, atol=1e-5)
    _close(mha(x, is_causal=True), ref, rtol=1e-4, atol=1e-5)
    _close(mha(x[0], x[0], x[0], mask=mask), ref[0], rtol=1e-4, atol=1e-5)   # no batch axis


# ----------------------------------------------------------------------------- modules as pytrees


def test_modules_are_immutable_pytrees():
    model = _model()
    with pytest.raises(dataclasses.FrozenInstanceError, match="replace"):
        model.emb = None
    with pytest.raises(dataclasses.FrozenInstanceError):
        model.ln.eps = 1.0
    names = [fa.tree_util.keystr(p) for p, _ in fa.tree_util.tree_flatten_with_path(model)[0]]
    assert names[0] == ".emb.weight" and ".attn.query_proj.weight" in names
    leaves = tree_leaves(model)
    assert all(isinstance(x, fa.Array) for x in leaves) and len(leaves) == 12   # 1 + 2 + 4 + 1 + 4
    # static fields are in the structure: another eps is another tree
    assert fa.tree_util.tree_structure(nn.LayerNorm(4)) != fa.tree_util.tree_structure(nn.LayerNorm(4, eps=1e-3))
    again = tree_map(lambda x: x, model)
    assert type(again) is type(model) and again.ln.eps == model.ln.eps
    assert nn.LayerNorm(4).replace(eps=0.5).eps == 0.5
    with pytest.raises(TypeError, match="no field"):
        nn.LayerNorm(4).replace(nope=1)

    class Missing(nn.Module):
        a: object
        b: object

        def __init__(self):
            self.a = 1

    with pytest.raises(TypeError, match="did not set the field"):
        Missing()


def _jax_forward(p, ids):
    """The same network in jax.numpy, from the fnarray model's weights ``p`` (a dict of arrays)."""
    def lin(prefix, x, bias=True):
        y = x @ p[prefix + ".weight"].T
        return y + p[prefix + ".bias"] if bias else y

    h = p[".emb.weight"][ids]
    m = h.mean(-1, keepdims=True)
    v = ((h - m) ** 2).mean(-1, keepdims=True)
    z = (h - m) / jnp.sqrt(v + 1e-5) * p[".ln.weight"] + p[".ln.bias"]
    B, T = ids.shape
    q = lin(".attn.query_proj", z, False).reshape(B, T, 2, 4)
    k = lin(".attn.key_proj", z, False).reshape(B, T, 2, 4)
    v_ = lin(".attn.value_proj", z, False).reshape(B, T, 2, 4)
    a = jax.nn.dot_product_attention(q, k, v_, is_causal=True).reshape(B, T, 8)
    h = h + lin(".attn.output_proj", a, False)
    h = h / jnp.sqrt((h ** 2).mean(-1, keepdims=True) + 1e-5) * p[".rms.weight"]
    h = jax.nn.gelu(lin(".head.layers[0]", h))
    return lin(".head.layers[1]", h)


def _jax_loss(p, ids, y):
    logp = jax.nn.log_softmax(_jax_forward(p, ids), -1)
    return -jnp.mean(jnp.take_along_axis(logp, y[..., None], -1))


def test_jit_grad_of_a_module_matches_jax():
    model = _model()
    ids = RNG.randint(0, 11, (3, 6)).astype(np.int32)
    y = RNG.randint(0, 5, (3, 6)).astype(np.int32)
    loss, grads = fa.jit(fa.value_and_grad(_loss))(model, ids, y)
    assert type(grads) is type(model)
    pairs = fa.tree_util.tree_flatten_with_path(model)[0]
    p = {fa.tree_util.keystr(path): jnp.asarray(np.asarray(leaf)) for path, leaf in pairs}
    jloss, jgrads = jax.jit(jax.value_and_grad(_jax_loss))(p, ids, y)
    _close(loss, jloss, rtol=1e-5)
    for path, g in fa.tree_util.tree_flatten_with_path(grads)[0]:
        _close(g, jgrads[fa.tree_util.keystr(path)], rtol=2e-4, atol=2e-6)
    check_traced(fa.grad(_loss), model, ids, y)


def test_vmap_per_example_gradients_of_a_module_match_a_loop():
    model = _model(1)
    ids = RNG.randint(0, 11, (4, 6)).astype(np.int32)
    y = RNG.randint(0, 5, (4, 6)).astype(np.int32)
    one = lambda m, i, t: _loss(m, i[None], t[None])
    per = fa.jit(fa.vmap(fa.grad(one), in_axes=(None, 0, 0)))(model, ids, y)
    for n in range(4):
        g = fa.grad(one)(model, ids[n], y[n])
        for a, b in zip(tree_leaves(per), tree_leaves(g), strict=True):
            _close(np.asarray(a)[n], b, rtol=1e-4, atol=1e-6)


def _train(device, steps=5):
    model = fa.device_put(nn.MLP(6, 3, 16, 2, key=fa.random.key(2)), device)
    opt = fa.optim.adam(1e-2)
    state = opt.init(model)
    x = fa.device_put(fnp.asarray(np.random.RandomState(3).randn(32, 6).astype(np.float32)), device)
    y = fa.device_put(fnp.asarray(np.random.RandomState(4).randint(0, 3, 32).astype(np.int32)), device)

    @fa.jit
    def step(model, state, x, y):
        loss, g = fa.value_and_grad(lambda m: losses.cross_entropy(m(x), y))(model)
        updates, state = opt.update(g, state, model)
        return fa.optim.apply_updates(model, updates), state, loss

    out = []
    for _ in range(steps):
        model, state, loss = step(model, state, x, y)
        out.append(float(loss))
    return model, out


def test_optim_trains_a_module_on_every_backend(device):
    model, ls = _train(device)
    assert all(leaf.device == device for leaf in tree_leaves(model))
    ref_model, ref = _train(fa.get_device("numpy:0"))
    assert ls[-1] < ls[0]
    np.testing.assert_allclose(ls, ref, rtol=2e-4, atol=1e-5)
    for a, b in zip(tree_leaves(model), tree_leaves(ref_model), strict=True):
        _close(a, b, rtol=2e-3, atol=2e-5)


def test_partition_combine_freezes_part_of_a_model():
    model = nn.MLP(4, 2, 8, 1, key=fa.random.key(0))
    spec = tree_map(lambda _: False, model)
    spec = spec.replace(layers=(True, False))   # train the first layer only (a prefix: True for a whole module)
    trainable, frozen = partition(model, spec)
    assert trainable.layers[1].weight is None and frozen.layers[0].weight is None
    assert len(tree_leaves(trainable)) == 2 and len(tree_leaves(frozen)) == 2
    x = fnp.asarray(RNG.randn(5, 4).astype(np.float32))
    opt = fa.optim.sgd(0.1)
    state = opt.init(trainable)

    @fa.jit
    def step(trainable, frozen, state):
        g = fa.grad(lambda t: fnp.sum(combine(t, frozen)(x) ** 2))(trainable)
        u, state = opt.update(g, state)
        return fa.optim.apply_updates(trainable, u), state

    t2, _ = step(trainable, frozen, state)
    new = combine(t2, frozen)
    assert not np.allclose(np.asarray(new.layers[0].weight), np.asarray(model.layers[0].weight))
    np.testing.assert_array_equal(np.asarray(new.layers[1].weight), np.asarray(model.layers[1].weight))
    arrays, static = partition({"w": fnp.ones(2), "n": np.ones(1), "s": 3}, is_array)
    assert arrays == {"w": arrays["w"], "n": arrays["n"], "s": None} and static["s"] == 3
    assert fa.tree_util.is_inexact_array(fnp.ones(1)) and not fa.tree_util.is_inexact_array(fnp.ones(1, dtype=int))
    with pytest.raises(ValueError, match="different structures"):
        combine({"a": None}, {"b": None})


# ----------------------------------------------------------------------------- losses vs NumPy float64


def _log_softmax64(z, axis=-1):
    z = _np(z)
    z = z - z.max(axis, keepdims=True)
    return z - np.log(np.exp(z).sum(axis, keepdims=True))


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_losses_match_numpy(reduction):
    def red(v):
        return {"mean": np.mean, "sum": np.sum, "none": lambda a: a}[reduction](v)

    r = np.random.RandomState(7)
    logits = r.randn(4, 3, 5).astype(np.float32)
    labels = r.randint(0, 5, (4, 3)).astype(np.int32)
    lp = _log_softmax64(logits)
    ce = -np.take_along_axis(lp, labels[..., None], -1)[..., 0]
    _close(losses.cross_entropy(logits, labels, reduction=reduction), red(ce), rtol=1e-5)
    onehot = np.eye(5, dtype=np.float32)[labels]
    _close(losses.cross_entropy(logits, onehot, reduction=reduction), red(ce), rtol=1e-5)
    sm = onehot * 0.9 + 0.1 / 5
    _close(losses.cross_entropy(logits, labels, label_smoothing=0.1, reduction=reduction),
           red(-(sm * lp).sum(-1)), rtol=1e-5)
    moved = np.ascontiguousarray(logits.transpose(0, 2, 1))   # classes on axis 1
    _close(losses.cross_entropy(moved, labels, axis=1, reduction=reduction), red(ce), rtol=1e-5)
    p, t = r.randn(6, 2).astype(np.float32), r.randn(6, 2).astype(np.float32)
    _close(losses.mse_loss(p, t, reduction=reduction), red((_np(p) - t) ** 2), rtol=1e-5)
    _close(losses.l1_loss(p, t, reduction=reduction), red(np.abs(_np(p) - t)), rtol=1e-5)
    z = (r.randn(6, 2) * 4).astype(np.float32)
    tt = (r.rand(6, 2) > 0.5).astype(np.float32)
    s = 1 / (1 + np.exp(-_np(z)))
    bce = -(tt * np.log(s) + (1 - tt) * np.log(1 - s))
    _close(losses.binary_cross_entropy_with_logits(z, tt, reduction=reduction), red(bce), rtol=1e-5, atol=1e-6)
    _close(losses.binary_cross_entropy(s.astype(np.float32), tt, reduction=reduction), red(bce), rtol=1e-4,
           atol=1e-5)
    q = np.exp(_log_softmax64(r.randn(4, 5)))
    q[0, 0] = 0.0
    q[0] /= q[0].sum()
    kl = np.where(q > 0, q * (np.log(np.where(q > 0, q, 1)) - lp[:, 0]), 0).sum(-1)
    _close(losses.kl_div_loss(lp[:, 0].astype(np.float32), q.astype(np.float32), reduction=reduction), red(kl),
           rtol=1e-5, atol=1e-6)
    lq = np.log(np.exp(_log_softmax64(r.randn(4, 5))))
    kl2 = (np.exp(lq) * (lq - lp[:, 0])).sum(-1)
    _close(losses.kl_div_loss(lp[:, 0].astype(np.float32), lq.astype(np.float32), log_targets=True,
                              reduction=reduction), red(kl2), rtol=1e-5, atol=1e-6)


def test_loss_errors_and_extremes():
    with pytest.raises(ValueError, match="reduction"):
        losses.mse_loss(fnp.ones(2), fnp.ones(2), reduction="avg")
    with pytest.raises(fa.ShapeError, match="without the class axis"):
        losses.cross_entropy(fnp.ones((3, 4)), fnp.zeros((4,), dtype=fnp.int32))
    # stable for huge logits, finite for saturated probabilities
    assert np.isfinite(float(losses.binary_cross_entropy_with_logits(fnp.asarray([100.0, -100.0]),
                                                                     fnp.asarray([0.0, 1.0]))))
    assert np.isfinite(float(losses.binary_cross_entropy(fnp.asarray([1.0, 0.0]), fnp.asarray([0.0, 1.0]))))
    g = fa.grad(lambda z: losses.cross_entropy(z, fnp.asarray([1], dtype=fnp.int32)))(fnp.asarray([[1000.0, 0.0]]))
    assert np.all(np.isfinite(np.asarray(g)))


@pytest.mark.parametrize("axis", [-1, 1])
def test_cross_entropy_integer_labels_value_and_grad_every_backend(device, axis):
    """The label's log-probability is a select-sum over the class axis (its gradient a select, not a scatter):
    the jitted loss and gradient match NumPy float64's ``softmax - one_hot`` on every backend, with a ``-inf``
    logit in another class, and labels out of range clipped (``mode="clip"``) or NaN (``"nan"``)."""
    r = np.random.RandomState(11)
    logits = (r.randn(3, 5, 7) * 3).astype(np.float32)          # classes on the last axis
    logits[0, 1, 4] = -np.inf
    labels = r.randint(0, 7, (3, 5)).astype(np.int32)
    labels[0, 1] = 2
    lp = _log_softmax64(logits)
    onehot = np.eye(7)[labels]
    want_loss = -np.take_along_axis(lp, labels[..., None], -1).mean()
    want_grad = (np.exp(lp) - onehot) / labels.size
    moved = (lambda a: np.moveaxis(a, -1, axis)) if axis == 1 else (lambda a: a)
    f = fa.jit(fa.value_and_grad(lambda z, y: losses.cross_entropy(z, y, axis=axis)))
    loss, g = f(fa.device_put(np.ascontiguousarray(moved(logits)), device), fa.device_put(labels, device))
    _close(loss, want_loss, rtol=1e-5, atol=1e-6)
    _close(g, moved(want_grad), rtol=1e-5, atol=1e-6)
    bad = labels.copy()
    bad[2, 3], bad[1, 0] = 9, -1
    clip = fa.jit(lambda z, y: losses.cross_entropy(z, y, axis=axis, mode="clip", reduction="none"))
    got = np.asarray(clip(fa.device_put(np.ascontiguousarray(moved(logits)), device), fa.device_put(bad, device)))
    want = -np.take_along_axis(lp, np.clip(bad, 0, 6)[..., None], -1)[..., 0]
    _close(got, want, rtol=1e-5, atol=1e-6)
    nan = fa.jit(lambda z, y: losses.cross_entropy(z, y, axis=axis, reduction="none"))
    got = np.asarray(nan(fa.device_put(np.ascontiguousarray(moved(logits)), device), fa.device_put(bad, device)))
    assert np.isnan(got[2, 3]) and np.isnan(got[1, 0])
    _close(got[0], want[0], rtol=1e-5, atol=1e-6)


def test_linear_on_3d_input_every_backend(device):
    """Regression: on the kernel backends a matmul whose bias epilogue is reshaped (``Linear`` on
    ``(B, T, D)``, which multiplies ``(B*T, D)`` and reshapes back) read its own never-written output
    buffer, because the reshape's index expression was not recognised as the matmul's element."""
    r = np.random.RandomState(5)
    x = r.randn(4, 16, 16).astype(np.float32)
    lin = nn.Linear(16, 64, key=fa.random.key(0)).replace(bias=fnp.asarray(r.randn(64).astype(np.float32)))
    ref = x @ _np(lin.weight).T + _np(lin.bias)
    f = fa.jit(lambda m, x: fnp.tanh(m(x)))
    _close(f(fa.device_put(lin, device), fa.device_put(x, device)), np.tanh(ref), rtol=1e-5, atol=1e-5)


def test_scatter_with_fused_operands_fits_the_buffer_limit(device):
    """Regression: a scatter-add (an embedding's gradient) inlined the producers of its indices and of
    its updates together, 10 storage buffers on webgpu where a shader stage may bind 8."""
    r = np.random.RandomState(6)
    n = 7
    x = r.randn(n, 3).astype(np.float32)
    i0, i1, i2 = (r.randint(0, n, 20).astype(np.int32) for _ in range(3))
    us = [r.randn(20, 3).astype(np.float32) for _ in range(6)]

    def f(x, i0, i1, i2, *u):
        idx = (i0 + i1 * 2 + i2 * 3) % n
        return x.at[idx].add(u[0] * u[1] + u[2] * u[3] - u[4] * u[5])

    want = x.copy()
    np.add.at(want, (i0 + i1 * 2 + i2 * 3) % n, us[0] * us[1] + us[2] * us[3] - us[4] * us[5])
    args = [fa.device_put(a, device) for a in [x, i0, i1, i2, *us]]
    _close(fa.jit(f)(*args), want, rtol=1e-5, atol=1e-5)
