"""Fused attention (the ``dot_product_attention`` primitive, ``fnarray.core.attention``) and ``fa.nn.KVCache``.

Oracles: ``jax.nn.dot_product_attention`` (jitted) for the forward pass with causal, grouped-query, window, bias and
padding masks, and with an explicit NumPy mask for ``mask="causal"`` (MLX's bottom-right alignment, a run-time
offset with key lengths); central finite differences of a float64 NumPy attention written here for the gradients; a
Python loop for ``vmap``. opencl and webgpu run with ``fallback="error"`` (their own kernel,
``lowering/kernels/groups/attention.py``), and the profiler must show one attention kernel per call there. A jitted
decode step over a ``KVCache`` must be traced once for a whole generation.

Each case's inputs and JAX result are made once and shared by every device's parametrization (``functools.cache``).
Tiers (docs/design.md, "Testing"): the decode-split matrix (case x head size) runs whole on numpy:0 and on opencl and
webgpu (the head size chooses their kernel's lanes and vector reads); jax and mlx, where it chooses nothing, run each
case at one head size (``_decode_split_parity``), 32 (keys heads first) among them.
"""

from __future__ import annotations

import functools
import json

import numpy as np
import pytest

import fnarray as fa
import fnarray.numpy as fnp
from fnarray import nn
from tests.helpers import fallback_mode, kernel_capabilities

jax = pytest.importorskip("jax")

RNG = np.random.default_rng(7)
B, T, S, N, K, H = 2, 5, 7, 4, 2, 8


@pytest.fixture
def on(device):
    """The device, with ``fallback="error"`` (every backend has a rule; opencl and webgpu their own kernel)."""
    with fallback_mode("error"):
        yield device


def _qkv(t=T, s=S, n=N, k=K, h=H, batch=B):
    q = RNG.standard_normal((batch, t, n, h)).astype(np.float32)
    kk = RNG.standard_normal((batch, s, k, h)).astype(np.float32)
    v = RNG.standard_normal((batch, s, k, h)).astype(np.float32)
    return q, kk, v


def _case(name):
    """Keyword arguments of ``dot_product_attention`` for each case (NumPy arrays), and (T, S, N, K)."""
    t, s, n, k = T, S, N, K
    kw = {}
    if name == "causal":
        kw = {"is_causal": True}
    elif name == "causal_square":
        s = t
        kw = {"is_causal": True}
    elif name == "mha":
        k = n
    elif name == "mqa":
        k = 1
    elif name == "window":
        kw = {"local_window_size": (2, 1)}
    elif name == "window_causal":
        kw = {"local_window_size": 1, "is_causal": True}
    elif name == "window_past_keys":   # the last queries' windows hold no key: every key removed, the average
        t, s = 7, 3
        kw = {"local_window_size": (1, 0)}
    elif name == "padding":
        kw = {"query_seq_lengths": np.array([5, 2], np.int32), "key_value_seq_lengths": np.array([3, 7], np.int32)}
    elif name == "bias_mask":
        mask = RNG.random((B, 1, t, s)) > 0.3
        mask[0, 0, 1] = False   # a row with every key removed: the values' average, as JAX's
        kw = {"bias": RNG.standard_normal((1, n, t, s)).astype(np.float32), "mask": mask}
    elif name == "scale_long":
        s = 37   # more than two key blocks, the last one partial
        kw = {"scale": 0.3, "is_causal": True}
    elif name == "decode":
        t, s = 1, 20
        kw = {"mask": np.arange(s)[None, None, None, :] <= 11}
    elif name == "kv_lengths":   # a length of 0 removes every key (the values' average, as JAX's); S keeps them all
        s = 37
        kw = {"key_value_seq_lengths": np.array([0, 37], np.int32)}
    elif name == "kv_lengths_partial":   # lengths past S and below 0, as JAX's mask
        s = 37
        kw = {"key_value_seq_lengths": np.array([40, -3], np.int32), "bias": RNG.standard_normal((1, n, t, s))
              .astype(np.float32)}
    elif name == "kv_lengths_causal_window":
        s = 21
        kw = {"key_value_seq_lengths": np.array([3, 17], np.int32), "is_causal": True, "local_window_size": (2, 1)}
    elif name == "kv_lengths_mask":   # a row the mask empties before the length averages all S values
        s = 21
        mask = RNG.random((B, 1, t, s)) > 0.5
        mask[1, 0, 2, :9] = False
        kw = {"key_value_seq_lengths": np.array([21, 9], np.int32), "mask": mask}
    elif name == "decode_lengths":   # a decode step over a cache of 20 positions, 12 and 1 filled
        t, s = 1, 20
        kw = {"key_value_seq_lengths": np.array([12, 1], np.int32)}
    return kw, (t, s, n, k)


CASES = ["plain", "causal", "causal_square", "mha", "mqa", "window", "window_causal", "window_past_keys", "padding",
         "bias_mask", "scale_long", "decode", "kv_lengths", "kv_lengths_partial", "kv_lengths_causal_window",
         "kv_lengths_mask", "decode_lengths"]


def _put(kw, device):
    return {a: fa.device_put(b, device) if isinstance(b, np.ndarray) else b for a, b in kw.items()}


def _jax_attention(kw, q, k, v):
    return np.asarray(jax.jit(lambda q, k, v: jax.nn.dot_product_attention(q, k, v, **kw))(q, k, v))


@functools.cache
def _case_with_oracle(name):
    """``(kw, q, k, v, JAX's result)`` of a ``_case``: made once and shared by every device's parametrization (the
    oracle is traced and compiled once per case, not once per device)."""
    kw, (t, s, n, k) = _case(name)
    q, kk, v = _qkv(t, s, n, k)
    return kw, q, kk, v, _jax_attention(kw, q, kk, v)


@pytest.mark.parametrize("name", CASES)
def test_fused_attention_matches_jax(on, name):
    kw, q, kk, v, want = _case_with_oracle(name)
    args = [fa.device_put(a, on) for a in (q, kk, v)]
    got = nn.dot_product_attention(*args, **_put(kw, on))
    assert got.shape == want.shape and got.dtype == np.float32
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=2e-5, atol=2e-5)
    jitted = fa.jit(lambda q, k, v: nn.dot_product_attention(q, k, v, **_put(kw, on)))(*args)
    np.testing.assert_allclose(np.asarray(jitted), np.asarray(want), rtol=2e-5, atol=2e-5)


def _decode_split_case(name, h):
    """Keyword arguments of a decode step (``T = 1``, ``B * N = 8`` query rows over 21 keys) for
    ``test_decode_rows_split_across_a_subgroup_match_jax``."""
    s = 21
    if name == "lengths":
        return {"key_value_seq_lengths": np.array([12, 1], np.int32)}
    if name == "window_lengths":   # the query (position 0) keeps keys 0-8, and batch element 1 the first 5
        return {"key_value_seq_lengths": np.array([21, 5], np.int32), "local_window_size": (2, 8)}
    if name == "bias_mask_lengths":   # batch element 1 removes every key before its length: the tail's average
        mask = RNG.random((B, 1, 1, s)) > 0.4
        mask[1, 0, 0, :9] = False
        return {"key_value_seq_lengths": np.array([21, 9], np.int32), "mask": mask,
                "bias": RNG.standard_normal((1, N, 1, s)).astype(np.float32)}
    return {"scale": 0.3}


@functools.cache
def _decode_split_case_with_oracle(name, h):
    """``(kw, q, k, v, JAX's result)`` of a ``_decode_split_case``, made once for every device."""
    kw = _decode_split_case(name, h)
    q, kk, v = _qkv(1, 21, h=h)
    return kw, q, kk, v, _jax_attention(kw, q, kk, v)


_DECODE_SPLIT = ["plain", "lengths", "window_lengths", "bias_mask_lengths"]
_HEAD_SIZES = [8, 16, 32, 64]


def _decode_split_parity(device, name, h, **_):
    """Whether a decode-split case runs on ``device`` besides numpy:0: every case on the kernel backends, one head
    size per case (the ``k``-th for the ``k``-th) on jax and mlx."""
    return device.backend in ("opencl", "webgpu") or _HEAD_SIZES[_DECODE_SPLIT.index(name)] == h


@pytest.mark.parity_subset(keep=_decode_split_parity)
@pytest.mark.parametrize("h", _HEAD_SIZES)
@pytest.mark.parametrize("name", _DECODE_SPLIT)
def test_decode_rows_split_across_a_subgroup_match_jax(on, name, h):
    """A decode step's few query rows: on a CPU WebGPU adapter with subgroups each row is a subgroup's (the lanes
    split the head, ``vec4`` reads where a lane's slice is a multiple of 4, scalar reads for slices of 2 or 3:
    ``groups/attention.py`` ``_row_lanes``); every device against JAX, heads first at head size 32."""
    kw, q, kk, v, want = _decode_split_case_with_oracle(name, h)
    first = h == 32
    if first:
        kk, v = np.swapaxes(kk, 1, 2).copy(), np.swapaxes(v, 1, 2).copy()
    args = [fa.device_put(a, on) for a in (q, kk, v)]
    f = fa.jit(lambda q, k, v: nn.dot_product_attention(q, k, v, **_put(kw, on), kv_heads_first=first))
    np.testing.assert_allclose(np.asarray(f(*args)), np.asarray(want), rtol=2e-5, atol=2e-5)
    if on.backend == "webgpu" and on.platform == "cpu" and getattr(on.impl.gpu, "has_subgroups", False):
        source = "".join(k.source for k in f.lower(*args).kernels())
        lanes = dict(on.impl.capabilities(on).tuning_facts)["simd_bits"] // 32
        vectors = h % (4 * lanes) == 0
        assert ("vec4<f32>" in source) == vectors, source
        assert ("subgroupBroadcast" in source) == (vectors or (h >= 2 * lanes and B * N <= lanes)), source


#: ``kv_heads_first`` (keys and values ``(B, K, S, H)``, ``KVCache``'s layout) on every kind of key walk: plain,
#: one key head, bias and mask, several key blocks, a mask with lengths (the removed tail), causal window with lengths.
HEADS_FIRST = ["plain", "mqa", "bias_mask", "scale_long", "kv_lengths_mask", "kv_lengths_causal_window",
               "decode_lengths"]


@pytest.mark.parametrize("name", HEADS_FIRST)
def test_keys_heads_first_match_jax(on, name):
    """``kv_heads_first=True`` with the keys and values transposed to ``(B, K, S, H)``: JAX's result on the
    ``(B, S, K, H)`` arrays, eagerly, under ``jit`` and with ``return_residual`` (the composite); and
    ``mask="causal"`` with key lengths (a run-time offset)."""
    kw, q, kk, v, want = _case_with_oracle(name)
    args = [fa.device_put(a, on) for a in (q, np.swapaxes(kk, 1, 2).copy(), np.swapaxes(v, 1, 2).copy())]
    got = nn.dot_product_attention(*args, **_put(kw, on), kv_heads_first=True)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=2e-5, atol=2e-5)
    jitted = fa.jit(lambda q, k, v: nn.dot_product_attention(q, k, v, **_put(kw, on), kv_heads_first=True))(*args)
    np.testing.assert_allclose(np.asarray(jitted), np.asarray(want), rtol=2e-5, atol=2e-5)
    out, _ = nn.dot_product_attention(*args, **_put(kw, on), kv_heads_first=True, return_residual=True)
    np.testing.assert_allclose(np.asarray(out), np.asarray(want), rtol=2e-5, atol=2e-5)
    if name == "kv_lengths_causal_window":
        kw, oracle, (t, s) = _lower_right_case("window")
        q, kk, v = _qkv(t, s)
        want = jax.nn.dot_product_attention(q, kk, v, **oracle)
        args = [fa.device_put(a, on) for a in (q, np.swapaxes(kk, 1, 2).copy(), np.swapaxes(v, 1, 2).copy())]
        got = fa.jit(lambda q, k, v: nn.dot_product_attention(q, k, v, **_put(kw, on), kv_heads_first=True))(*args)
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=2e-5, atol=2e-5)


def test_keys_heads_first_gradients_and_vmap(on):
    """Gradients of ``kv_heads_first`` attention are the default layout's, transposed (whose own are checked against
    finite differences above); ``vmap`` over a batch of heads-first keys matches a loop over JAX's calls."""
    q, kk, v = _qkv(t=3, s=9)
    lengths = np.array([9, 4], np.int32)
    cot = fa.device_put(RNG.standard_normal(q.shape).astype(np.float32), on)

    def loss(q, k, v, first):
        out = nn.dot_product_attention(q, k, v, mask="causal", key_value_seq_lengths=fa.device_put(lengths, on),
                                       kv_heads_first=first)
        return fnp.sum(out * cot)

    put = lambda x: fa.device_put(x, on)  # noqa: E731
    want = fa.grad(loss, argnums=(0, 1, 2))(put(q), put(kk), put(v), False)
    got = fa.jit(fa.grad(loss, argnums=(0, 1, 2)), static_argnums=3)(
        put(q), put(np.swapaxes(kk, 1, 2).copy()), put(np.swapaxes(v, 1, 2).copy()), True)
    np.testing.assert_allclose(np.asarray(got[0]), np.asarray(want[0]), rtol=1e-5, atol=1e-6)
    for g, w in zip(got[1:], want[1:], strict=True):
        np.testing.assert_allclose(np.swapaxes(np.asarray(g), 1, 2), np.asarray(w), rtol=1e-5, atol=1e-6)
    ks = np.stack([kk, -kk, kk * 0.5])
    got = fa.vmap(lambda k: nn.dot_product_attention(put(q), k, put(np.swapaxes(v, 1, 2).copy()),
                                                     kv_heads_first=True))(put(np.swapaxes(ks, 2, 3).copy()))
    for i in range(3):
        want = jax.nn.dot_product_attention(q, ks[i], v)
        np.testing.assert_allclose(np.asarray(got[i]), np.asarray(want), rtol=2e-5, atol=2e-5)


def test_fused_attention_float16_and_unbatched(on):
    if np.dtype(np.float16) not in on.impl.capabilities(on).dtypes:
        pytest.skip(f"{on} has no float16")
    q, kk, v = _qkv()
    # jax.nn.dot_product_attention of float16 fails under jit on XLA's CPU backend (jax 0.10): float64 oracle.
    want = _attention64(*(a[:1].astype(np.float16) for a in (q, kk, v)), causal=True)[0]
    got = nn.dot_product_attention(*[fa.device_put(a[0].astype(np.float16), on) for a in (q, kk, v)], is_causal=True)
    assert got.dtype == np.float16 and got.shape == (T, N, H)
    np.testing.assert_allclose(np.asarray(got, np.float32), np.asarray(want, np.float32), rtol=0, atol=4e-3)
    # a window: on mlx:0 the composite (MLX's kernel takes no float16 mask array here), elsewhere as above
    want = _attention64(*(a[:1].astype(np.float16) for a in (q, kk, v)), window=(1, 2))[0]
    got = nn.dot_product_attention(*[fa.device_put(a[0].astype(np.float16), on) for a in (q, kk, v)],
                                   local_window_size=(1, 2))
    np.testing.assert_allclose(np.asarray(got, np.float32), np.asarray(want, np.float32), rtol=0, atol=4e-3)


def _attention64(q, k, v, bias=None, mask=None, causal=False, window=None, scale=None):
    """Attention in float64, written with einsum and repeated heads (independent of the library's reshapes)."""
    q, k, v = (np.asarray(a, np.float64) for a in (q, k, v))
    g = q.shape[2] // k.shape[2]
    k, v = np.repeat(k, g, axis=2), np.repeat(v, g, axis=2)
    scale = 1 / np.sqrt(q.shape[-1]) if scale is None else scale
    logits = np.einsum("btnh,bsnh->bnts", q, k) * scale
    if bias is not None:
        logits = logits + bias
    tt, ss = np.arange(q.shape[1])[:, None], np.arange(k.shape[1])[None, :]
    keep = np.ones(logits.shape, bool)
    if mask is not None:
        keep &= mask
    if causal:
        keep &= ss <= tt
    if window is not None:
        keep &= (tt <= ss + window[0]) & (tt >= ss - window[1])
    logits = np.where(keep, logits, -0.7 * np.finfo(np.float32).max)
    p = np.exp(logits - logits.max(-1, keepdims=True))
    return np.einsum("bnts,bsnh->btnh", p / p.sum(-1, keepdims=True), v)


def _numeric_grad(f, x, eps=1e-6):
    out = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        up, down = x.copy(), x.copy()
        up[i] += eps
        down[i] -= eps
        out[i] = (f(up) - f(down)) / (2 * eps)
    return out


def test_gradients_match_float64_finite_differences(on):
    t, s, n, k, h = 3, 6, 4, 2, 4
    q, kk, v = (a.astype(np.float64) for a in _qkv(t, s, n, k, h, batch=1))
    bias = RNG.standard_normal((1, 1, t, s))
    cot = RNG.standard_normal((1, t, n, h))
    opts = dict(causal=True, window=(3, 0))

    def loss64(q, kk, v, bias):
        return float(np.sum(_attention64(q, kk, v, bias=bias, **opts) * cot))

    def loss(q, kk, v, bias):
        out = nn.dot_product_attention(q, kk, v, bias=bias, is_causal=True, local_window_size=(3, 0))
        return fnp.sum(out * fa.device_put(cot.astype(np.float32), on))

    args = [fa.device_put(a.astype(np.float32), on) for a in (q, kk, v, bias)]
    grads = fa.jit(fa.grad(loss, argnums=(0, 1, 2, 3)))(*args)
    wants = [_numeric_grad(lambda x: loss64(x, kk, v, bias), q), _numeric_grad(lambda x: loss64(q, x, v, bias), kk),
             _numeric_grad(lambda x: loss64(q, kk, x, bias), v), _numeric_grad(lambda x: loss64(q, kk, v, x), bias)]
    for got, want, name in zip(grads, wants, "qkvb", strict=True):
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=2e-5, err_msg=name)
    # forward mode: the directional derivative along random tangents is <gradient, tangent>
    tangents = [RNG.standard_normal(a.shape).astype(np.float32) for a in (q, kk, v, bias)]
    _, d = fa.jvp(loss, args, [fa.device_put(t, on) for t in tangents])
    want = sum(float(np.sum(w * t)) for w, t in zip(wants, tangents, strict=True))
    np.testing.assert_allclose(float(d), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("causal", [False, True], ids=["lengths", "lengths_causal_offset"])
def test_gradients_with_key_lengths_match_float64_finite_differences(on, causal):
    """``key_value_seq_lengths`` (the primitive's int32 operand) has no tangent; q, k, v still differentiate, also
    with ``mask="causal"`` (the lengths then also offset the causal mask: ``lower_right``)."""
    t, s, n, k, h = (3, 7, 2, 1, 4) if causal else (2, 7, 2, 1, 4)
    q, kk, v = (a.astype(np.float64) for a in _qkv(t, s, n, k, h, batch=2))
    lengths = np.array([5, 3] if causal else [4, 7], np.int32)
    if causal:
        mask = _lower_right_mask(t, s, lengths)
    else:
        mask = np.arange(s)[None, None, None, :] < lengths[:, None, None, None]
    cot = RNG.standard_normal((2, t, n, h))

    def loss64(q, kk, v):
        return float(np.sum(_attention64(q, kk, v, mask=mask) * cot))

    def loss(q, kk, v):
        out = nn.dot_product_attention(q, kk, v, key_value_seq_lengths=fa.device_put(lengths, on),
                                       mask="causal" if causal else None)
        return fnp.sum(out * fa.device_put(cot.astype(np.float32), on))

    args = [fa.device_put(a.astype(np.float32), on) for a in (q, kk, v)]
    grads = fa.jit(fa.grad(loss, argnums=(0, 1, 2)))(*args)
    wants = [_numeric_grad(lambda x: loss64(x, kk, v), q), _numeric_grad(lambda x: loss64(q, x, v), kk),
             _numeric_grad(lambda x: loss64(q, kk, x), v)]
    for got, want, name in zip(grads, wants, "qkv", strict=True):
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=2e-5, err_msg=name)


def test_vmap_with_key_lengths_matches_a_loop(on):
    q, kk, v = _qkv(s=20)
    lengths = np.array([[0, 20], [5, 13], [1, 7]], np.int32)

    def f(q, lens):
        return nn.dot_product_attention(q, fa.device_put(kk, on), fa.device_put(v, on), key_value_seq_lengths=lens)

    got = fa.vmap(f)(fa.device_put(np.stack([q, -q, q * 2]), on), fa.device_put(lengths, on))
    for i, qi in enumerate([q, -q, q * 2]):
        want = jax.nn.dot_product_attention(qi, kk, v, key_value_seq_lengths=lengths[i])
        np.testing.assert_allclose(np.asarray(got[i]), np.asarray(want), rtol=2e-5, atol=2e-5)
    # unmapped lengths broadcast over the mapped axis
    got = fa.vmap(lambda q: f(q, fa.device_put(lengths[1], on)))(fa.device_put(np.stack([q, -q]), on))
    want = jax.nn.dot_product_attention(-q, kk, v, key_value_seq_lengths=lengths[1])
    np.testing.assert_allclose(np.asarray(got[1]), np.asarray(want), rtol=2e-5, atol=2e-5)


def test_key_lengths_are_data_to_jit(on):
    """One trace (so one compiled kernel on opencl and webgpu) serves every length."""
    q, kk, v = _qkv(t=1, s=40)
    traces = []

    @fa.jit
    def f(q, k, v, lens):
        traces.append(1)
        return nn.dot_product_attention(q, k, v, key_value_seq_lengths=lens)

    args = [fa.device_put(a, on) for a in (q, kk, v)]
    for lens in ([1, 40], [17, 3], [0, 33]):
        lens = np.array(lens, np.int32)
        want = jax.nn.dot_product_attention(q, kk, v, key_value_seq_lengths=lens)
        np.testing.assert_allclose(np.asarray(f(*args, fa.device_put(lens, on))), np.asarray(want), rtol=2e-5,
                                   atol=2e-5)
    assert len(traces) == 1


def test_kv_cache_attend_equals_the_masked_call(on):
    """``attend`` (key lengths, and the causal mask for several positions) gives exactly what the mask alone
    gave: the removed keys past the filled length weigh ``exp(MASKED_LOGIT - max) = 0`` either way."""
    q, kk, v = _qkv(t=4, s=4)
    cache = nn.KVCache.create(B, 24, K, H, device=on)
    cache = cache.update(fa.device_put(kk[:, :3], on), fa.device_put(v[:, :3], on))
    for t in (3, 1):   # a prefill of 3 positions, then a decode step
        if t == 1:
            cache = cache.update(fa.device_put(kk[:, 3:], on), fa.device_put(v[:, 3:], on))
        qt = fa.device_put(q[:, :t], on)
        got = np.asarray(cache.attend(qt))
        want = np.asarray(nn.dot_product_attention(qt, cache.keys, cache.values, mask=cache.causal_mask(t),
                                                   kv_heads_first=True))
        np.testing.assert_array_equal(got, want)


def test_kv_cache_keeps_keys_heads_first(on):
    """``KVCache`` holds ``(B, K, capacity, H)`` (mlx-lm's layout): the entries written at the offset are the new
    ``(B, T, K, H)`` keys and values transposed, the rest zeros; its attention matches JAX's over the filled keys."""
    q, kk, v = _qkv(t=4, s=4)
    cache = nn.KVCache.create(B, 10, K, H, device=on)
    assert cache.keys.shape == (B, K, 10, H) and cache.capacity == 10
    cache = cache.update(fa.device_put(kk[:, :3], on), fa.device_put(v[:, :3], on))
    cache = fa.jit(lambda c, k, v: c.update(k, v))(cache, fa.device_put(kk[:, 3:], on), fa.device_put(v[:, 3:], on))
    for got, new in ((cache.keys, kk), (cache.values, v)):
        want = np.zeros((B, K, 10, H), np.float32)
        want[:, :, :4] = np.swapaxes(new, 1, 2)
        np.testing.assert_array_equal(np.asarray(got), want)
    got = cache.attend(fa.device_put(q[:, 3:], on))
    want = jax.nn.dot_product_attention(q[:, 3:], kk, v)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=2e-5, atol=2e-5)


def _lower_right_mask(t, s, lengths=None, window=None):
    """``mask="causal"`` in NumPy: query ``i`` at position ``i + L - t`` keeps keys ``j <= position`` (and inside the
    window), ``L = clip(lengths[b], 0, s + t)`` or ``s``, keys at or past the length removed; ``(B|1, 1, t, s)``."""
    length = np.array([s]) if lengths is None else np.asarray(lengths)
    pos = np.arange(t)[None, :, None] + (np.clip(length, 0, s + t) - t)[:, None, None]   # (B|1, t, 1)
    j = np.arange(s)[None, None, :]
    keep = (j <= pos) & (j < length[:, None, None])
    if window is not None:
        keep &= (pos <= j + window[0]) & (pos >= j - window[1])
    return keep[:, None]


def _lower_right_case(name):
    """``(kw for dot_product_attention, kw for the explicit-mask oracle, (t, s))`` of each ``mask="causal"`` case."""
    t, s, lengths, window, extra = 5, 37, None, None, {}
    if name == "prefill_after_cache":   # caches holding 7 and 0 keys get 5 more
        lengths = np.array([12, 5], np.int32)
    elif name == "lengths_past_the_ends":   # positions below 0 (every key removed: the average) and past S + T
        lengths = np.array([3, 45], np.int32)
    elif name == "more_queries_than_keys":   # no key lengths: the offset S - T, here below 0
        t, s = 7, 3
    elif name == "window":
        lengths, window = np.array([20, 9], np.int32), (3, 0)
    elif name == "bias_and_padding":   # padding queries: a mask operand, so the walk stops at the length
        lengths = np.array([30, 9], np.int32)
        extra = {"bias": RNG.standard_normal((1, N, t, s)).astype(np.float32),
                 "query_seq_lengths": np.array([5, 3], np.int32)}
    elif name == "long":   # several key blocks
        s, lengths = 70, np.array([70, 33], np.int32)
    kw = {"mask": "causal", **extra}
    if lengths is not None:
        kw["key_value_seq_lengths"] = lengths
    if window is not None:
        kw["local_window_size"] = window
    oracle = {"mask": _lower_right_mask(t, s, lengths, window), **extra}
    return kw, oracle, (t, s)


LOWER_RIGHT = ["prefill_after_cache", "lengths_past_the_ends", "static", "more_queries_than_keys", "window",
               "bias_and_padding", "long"]


@functools.cache
def _lower_right_case_with_oracle(name):
    """``(kw, q, k, v, JAX's result with the explicit mask)`` of a ``_lower_right_case``, made once for every
    device."""
    kw, oracle, (t, s) = _lower_right_case(name)
    q, kk, v = _qkv(t, s)
    return kw, q, kk, v, _jax_attention(oracle, q, kk, v)


@pytest.mark.parametrize("name", LOWER_RIGHT)
def test_causal_with_a_run_time_offset_matches_jax_with_an_explicit_mask(on, name):
    """``mask="causal"``: the queries aligned at the end of the keys (their lengths: a run-time offset), against
    ``jax.nn.dot_product_attention`` given the same mask built in NumPy."""
    kw, q, kk, v, want = _lower_right_case_with_oracle(name)
    args = [fa.device_put(a, on) for a in (q, kk, v)]
    got = nn.dot_product_attention(*args, **_put(kw, on))
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=2e-5, atol=2e-5)
    jitted = fa.jit(lambda q, k, v: nn.dot_product_attention(q, k, v, **_put(kw, on)))(*args)
    np.testing.assert_allclose(np.asarray(jitted), np.asarray(want), rtol=2e-5, atol=2e-5)
    # with return_residual (the composite), the same output
    out, _ = nn.dot_product_attention(*args, **_put(kw, on), return_residual=True)
    np.testing.assert_allclose(np.asarray(out), np.asarray(want), rtol=2e-5, atol=2e-5)


def test_causal_offset_is_data_one_trace_no_mask_operand(on):
    """A prefill of 4 positions into caches of every fill: one trace, one ``dot_product_attention`` equation with
    ``lower_right`` and no mask operand (the kernel reads no mask), right for each fill."""
    q, kk, v = _qkv(t=4, s=24)
    traces = []

    def f(q, k, v, lens):
        traces.append(1)
        return nn.dot_product_attention(q, k, v, mask="causal", key_value_seq_lengths=lens)

    args = [fa.device_put(a, on) for a in (q, kk, v)]
    (eqn,) = [e for e in fa.make_ir(lambda *a: f(*a))(*args, np.array([4, 4], np.int32)).eqns
              if e.primitive.name == "dot_product_attention"]
    assert eqn.params["lower_right"] and eqn.params["is_causal"] and not eqn.params["has_mask"]
    traces.clear()
    jitted = fa.jit(f)
    for lens in ([4, 24], [10, 4], [17, 9]):
        lens = np.array(lens, np.int32)
        want = jax.nn.dot_product_attention(q, kk, v, mask=_lower_right_mask(4, 24, lens))
        np.testing.assert_allclose(np.asarray(jitted(*args, fa.device_put(lens, on))), np.asarray(want),
                                   rtol=2e-5, atol=2e-5)
    assert len(traces) == 1


def test_vmap_with_a_run_time_causal_offset_matches_a_loop(on):
    q, kk, v = _qkv(t=3, s=20)
    lengths = np.array([[3, 20], [9, 4], [0, 13]], np.int32)

    def f(q, lens):
        return nn.dot_product_attention(q, fa.device_put(kk, on), fa.device_put(v, on), mask="causal",
                                        key_value_seq_lengths=lens)

    got = fa.vmap(f)(fa.device_put(np.stack([q, -q, q * 2]), on), fa.device_put(lengths, on))
    for i, qi in enumerate([q, -q, q * 2]):
        want = jax.nn.dot_product_attention(qi, kk, v, mask=_lower_right_mask(3, 20, lengths[i]))
        np.testing.assert_allclose(np.asarray(got[i]), np.asarray(want), rtol=2e-5, atol=2e-5)


def test_mask_strings_other_than_causal_raise():
    q, kk, v = _qkv()
    with pytest.raises(ValueError, match="one mask string is 'causal'"):
        nn.dot_product_attention(q, kk, v, mask="bottom_right")
    with pytest.raises(ValueError, match="pass one"):
        nn.dot_product_attention(q, kk, v, mask="causal", is_causal=True)


def test_vmap_matches_a_loop(on):
    q, kk, v = _qkv()
    mask = RNG.random((3, B, 1, T, S)) > 0.2
    qs = np.stack([q, q * 0.5, -q])

    def f(q, m):
        return nn.dot_product_attention(q, fa.device_put(kk, on), fa.device_put(v, on), mask=m, is_causal=True)

    got = fa.vmap(f)(fa.device_put(qs, on), fa.device_put(mask, on))
    for i in range(3):
        want = _attention64(qs[i], kk, v, mask=mask[i], causal=True)
        np.testing.assert_allclose(np.asarray(got[i]), want, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("backend", ["opencl", "webgpu"])
def test_profiler_shows_one_attention_kernel_per_call(backend, tmp_path):
    devs = [d for d in fa.devices(all_backends=True) if d.backend == backend]
    if not devs:
        pytest.skip(f"no {backend} device")
    dev = devs[0]
    q, kk, v = (fa.device_put(a, dev) for a in _qkv())
    mask = fa.device_put(RNG.random((B, 1, T, S)) > 0.3, dev)
    f = fa.jit(lambda q, k, v, m: nn.dot_product_attention(q, k, v, mask=m, is_causal=True, local_window_size=3))
    # keys and values heads first (KVCache's layout): read in place, still one kernel
    g = fa.jit(lambda q, k, v, m: nn.dot_product_attention(q, k, v, mask=m, is_causal=True, kv_heads_first=True))
    kf, vf = (fa.device_put(np.swapaxes(np.asarray(a), 1, 2).copy(), dev) for a in (kk, v))
    f(q, kk, v, mask).block_until_ready()
    g(q, kf, vf, mask).block_until_ready()
    path = tmp_path / "trace.json"
    with fallback_mode("error"), fa.profiler.trace(str(path)):
        for _ in range(3):
            f(q, kk, v, mask).block_until_ready()
            g(q, kf, vf, mask).block_until_ready()
    kernels = [e for e in json.loads(path.read_text())["traceEvents"] if e.get("cat") == "kernel"]
    assert len(kernels) == 6, [e["name"] for e in kernels]
    assert all("attention" in e["name"] for e in kernels), [e["name"] for e in kernels]


def test_kv_cache_decode_step_is_traced_once_for_a_generation(on):
    """Prefill 3 positions, then decode 6 one at a time through one jitted step: one trace, and every output equal
    to attention over the whole prefix (causal), computed in float64."""
    cap, steps = 12, 6
    q, kk, v = _qkv(t=3 + steps, s=3 + steps)
    rope = nn.RoPE(H)
    traces = []

    def step(cache, q, k, v):
        traces.append(1)   # runs only while tracing
        offset = cache.offset   # the new positions' first index (RoPE's offset)
        rot = lambda x: fnp.swapaxes(rope(fnp.swapaxes(x, 1, 2), offset=offset), 1, 2)  # noqa: E731
        cache = cache.update(rot(k), v)
        return cache, cache.attend(rot(q))

    cache = nn.KVCache.create(B, cap, K, H, device=on)
    prefill = fa.jit(step)
    cache, out = prefill(cache, *(fa.device_put(a[:, :3], on) for a in (q, kk, v)))
    outs = [np.asarray(out)]
    decode = fa.jit(step)
    for i in range(3, 3 + steps):
        cache, out = decode(cache, *(fa.device_put(a[:, i:i + 1], on) for a in (q, kk, v)))
        outs.append(np.asarray(out))
    assert len(traces) == 2, f"prefill once and decode once, got {len(traces)} traces"
    assert int(cache.offset) == 3 + steps
    ref_rope = lambda x: np.swapaxes(np.asarray(rope(np.swapaxes(x, 1, 2))), 1, 2)  # noqa: E731
    want = _attention64(ref_rope(q), ref_rope(kk), v, causal=True)
    np.testing.assert_allclose(np.concatenate(outs, axis=1), want, rtol=1e-4, atol=1e-4)


def test_kv_cache_checks_shapes():
    cache = nn.KVCache.create(1, 4, 2, 8)
    with pytest.raises(ValueError, match="KVCache.update"):
        cache.update(np.zeros((1, 5, 2, 8), np.float32), np.zeros((1, 5, 2, 8), np.float32))
    with pytest.raises(ValueError, match="at least 1"):
        nn.KVCache.create(1, 0, 2, 8)
    # Eagerly (a concrete offset) a write past the capacity raises instead of clamping over the last positions.
    full = cache.update(np.ones((1, 3, 2, 8), np.float32), np.ones((1, 3, 2, 8), np.float32))
    with pytest.raises(ValueError, match="overflow the capacity 4"):
        full.update(np.zeros((1, 2, 2, 8), np.float32), np.zeros((1, 2, 2, 8), np.float32))
    assert int(full.update(np.zeros((1, 1, 2, 8), np.float32), np.zeros((1, 1, 2, 8), np.float32)).offset) == 4


@pytest.mark.enable_x64
def test_float64_is_computed_in_float64(on):
    if np.dtype(np.float64) not in on.impl.capabilities(on).dtypes:
        pytest.skip(f"{on} has no float64")
    q, kk, v = (a.astype(np.float64) for a in _qkv())
    mask = RNG.random((B, 1, T, S)) > 0.3
    # mlx:0 sends float64 attention to numpy (MLX's float64 exp has float32 precision on the CPU).
    with fallback_mode("silent" if on.backend == "mlx" else "error"):
        got = nn.dot_product_attention(*(fa.device_put(a, on) for a in (q, kk, v)), mask=fa.device_put(mask, on),
                                       local_window_size=(3, 1))
    assert got.dtype == np.float64
    np.testing.assert_allclose(np.asarray(got), _attention64(q, kk, v, mask=mask, window=(3, 1)), rtol=1e-12,
                               atol=1e-12)


@pytest.mark.parametrize("backend", ["opencl", "webgpu"])
def test_past_the_loop_limit_the_kernel_declines_with_the_reason(backend):
    """A device whose invocations stop loops early (lavapipe) gets no attention kernel that would walk past its
    limit: with ``fallback="error"`` the reason is raised, else the call runs on numpy and is right."""
    devs = [d for d in fa.devices(all_backends=True) if d.backend == backend]
    if not devs:
        pytest.skip(f"no {backend} device")
    dev = devs[0]
    q, kk, v = _qkv()
    args = [fa.device_put(a, dev) for a in (q, kk, v)]
    with kernel_capabilities(dev, max_loop_iterations=8):
        with fallback_mode("error"), pytest.raises(Exception, match="loop iterations"):
            nn.dot_product_attention(*args, scale=0.5, is_causal=True)
        with fallback_mode("silent"):
            got = nn.dot_product_attention(*args, scale=0.5, is_causal=True)
    np.testing.assert_allclose(np.asarray(got), _attention64(q, kk, v, causal=True, scale=0.5), rtol=2e-5, atol=2e-5)
