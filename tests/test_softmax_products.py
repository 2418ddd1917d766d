"""Attention written out as two products and a softmax runs as the attention kernel on the kernel backends.

``fnarray/lowering/kernels/softmax_products.py`` replaces ``softmax(q @ k.T * c) @ v`` (2-D float32 rows, every value
between the products private to the chain, short rows) by one ``dot_product_attention`` kernel. The references are
NumPy in float64 for finite values and numpy:0 (the unfused chain, the semantics) for non-finite logits; the counts
of kernels show what was folded and what was not.
"""

import numpy as np
import pytest

import fnarray as fa
import fnarray.numpy as fnp
from fnarray.lowering.kernels.softmax_products import ROW_WALK

from helpers import fallback_mode

TARGETS = ["opencl:0", "webgpu:0"]


def _decode_step(cache, q, row):
    cache = fnp.concatenate([cache, row], axis=0)
    sc = q @ cache.T
    e = fnp.exp(sc - sc.max(axis=-1, keepdims=True))
    return cache, (e / e.sum(axis=-1, keepdims=True)) @ cache


def _scaled_softmax(q, k, v):
    return fa.nn.softmax(q @ k.T * 0.125, axis=-1) @ v


def _divided(q, k, v):
    s = q @ k.T / 3.0
    e = fnp.exp(s - fnp.max(s, axis=1, keepdims=True))
    return (e / fnp.sum(e, axis=1, keepdims=True)) @ v


def _ref(q, k, v, scale=1.0):
    s = q.astype(np.float64) @ k.astype(np.float64).T * scale
    e = np.exp(s - s.max(-1, keepdims=True))
    return (e / e.sum(-1, keepdims=True)) @ v.astype(np.float64)


def _kernels(f, *args):
    return len(fa.jit(f).lower(*args).kernels())


def _sources(f, *args):
    return [k.source for k in fa.jit(f).lower(*args).kernels()]


def _put(dev, *xs):
    return [fa.device_put(np.asarray(x, np.float32), dev) for x in xs]


def _decode_output_only(cache, q, row):   # the grown cache not returned: nothing stores it
    return _decode_step(cache, q, row)[1]


def _cache_read_first(cache, q, row):    # the grown cache read before the chain: the concatenation stays a kernel
    grown = fnp.concatenate([cache, row], axis=0)
    total = grown.sum()
    sc = q @ grown.T
    e = fnp.exp(sc - sc.max(axis=-1, keepdims=True))
    return total, (e / e.sum(axis=-1, keepdims=True)) @ grown


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("S,T,H", [(1, 1, 64), (6, 1, 64), (40, 3, 64), (17, 2, 7)])
def test_decode_step_is_one_kernel_for_every_length_with_numpy_values(target, S, T, H):
    rng = np.random.default_rng(S * 100 + T)
    cache, q, row = (rng.standard_normal(s).astype(np.float32) * 2 for s in ((S, H), (T, H), (1, H)))
    args = _put(target, cache, q, row)
    with fallback_mode("error"):
        d, out = fa.jit(_decode_step)(*args)
        # the attention kernel reads the cache's pieces and stores their concatenation: one launch a step, and one
        # source (so one pipeline or program) for the step of every length
        (src,) = _sources(_decode_step, *args)
        assert _sources(_decode_step, *_put(target, np.zeros((S + 1, H)), q, row)) == [src]
        others = []
        if S == 6 and target == "webgpu:0":   # (once: these forms differ in the schedule, PoCL builds cost ~1 s)
            others.append(fa.jit(_decode_output_only)(*args))
            assert _kernels(_decode_output_only, *args) == 1
            total, first = fa.jit(_cache_read_first)(*args)
            others.append(first)
            assert _kernels(_cache_read_first, *args) >= 2
    full = np.concatenate([cache, row])
    np.testing.assert_array_equal(np.asarray(d), full)
    want = _ref(q, full, full)
    for got in (out, *others):
        np.testing.assert_allclose(np.asarray(got), want, rtol=2e-5, atol=2e-6)
    if others:
        np.testing.assert_allclose(float(total), full.astype(np.float64).sum(), rtol=1e-5)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("f,scale", [(_scaled_softmax, 0.125), (_divided, 1 / 3.0)])
def test_scaled_forms_fold_with_numpy_values(target, f, scale):
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal(s).astype(np.float32) * 3 for s in ((4, 16), (9, 16), (9, 16)))
    args = _put(target, q, k, v)
    with fallback_mode("error"):
        got = np.asarray(fa.jit(f)(*args))
        assert _kernels(f, *args) == 1
    np.testing.assert_allclose(got, _ref(q, k, v, scale), rtol=2e-5, atol=2e-6)


def _probabilities_too(q, k, v):
    p = fa.nn.softmax(q @ k.T, axis=-1)
    return p @ v, p


def _over_queries(q, k, v):   # the softmax over the other axis: not attention
    s = q @ k.T
    e = fnp.exp(s - s.max(axis=0, keepdims=True))
    return (e / e.sum(axis=0, keepdims=True)).T @ q


@pytest.mark.parametrize("target", TARGETS)
def test_chains_that_do_not_match_keep_their_kernels(target):
    rng = np.random.default_rng(2)
    q, k = rng.standard_normal((3, 8)).astype(np.float32), rng.standard_normal((5, 8)).astype(np.float32)
    args = _put(target, q, k, k)
    with fallback_mode("error"):
        out, p = fa.jit(_probabilities_too)(*args)
        assert _kernels(_probabilities_too, *args) >= 3
        np.testing.assert_allclose(np.asarray(out), _ref(q, k, k), rtol=2e-5, atol=2e-6)
        np.testing.assert_allclose(np.asarray(p) @ k, _ref(q, k, k), rtol=2e-5, atol=2e-6)
        got = np.asarray(fa.jit(_over_queries)(*args))
        assert _kernels(_over_queries, *args) >= 3
    s = q.astype(np.float64) @ k.T
    e = np.exp(s - s.max(0, keepdims=True))
    np.testing.assert_allclose(got, (e / e.sum(0, keepdims=True)).T @ q, rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("target", TARGETS)
def test_long_rows_are_not_folded(target):
    H = 64
    S = ROW_WALK // H + 1
    rng = np.random.default_rng(3)
    q, k = rng.standard_normal((1, H)).astype(np.float32), rng.standard_normal((S, H)).astype(np.float32) * 0.1
    args = _put(target, q, k, k)
    with fallback_mode("error"):
        got = np.asarray(fa.jit(_decode_step)(args[1][:S - 1], args[0], args[1][S - 1:])[1])
        assert _kernels(_decode_step, args[1][:S - 1], args[0], args[1][S - 1:]) > 2
    np.testing.assert_allclose(got, _ref(q, k, k), rtol=2e-5, atol=2e-6)


def _attend(q, k, v):
    return fa.nn.softmax(q @ k.T, axis=-1) @ v


_INF = np.inf
NON_FINITE = {   # head size 1, so each logit is q * k exactly
    # rows: finite; every logit +inf; every logit -inf; a NaN logit; finite
    "rows of inf": ([[0.5], [_INF], [-_INF], [np.nan], [-2.0]], [[1.0], [2.0], [3.0]]),
    "-inf beside finite logits": ([[0.5], [2.0]], [[1.0], [2.0], [-_INF]]),
}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("case", list(NON_FINITE))
def test_non_finite_logits_give_what_the_unfused_chain_gives(target, case):
    q, k = (np.array(x, np.float32) for x in NON_FINITE[case])
    v = np.array([[1.0], [3.0], [5.0]], np.float32)
    want = np.asarray(fa.jit(_attend)(*_put("numpy:0", q, k, v)))
    finite = np.isfinite(want[:, 0])
    assert finite.tolist() == ([True, False, False, False, True] if len(q) == 5 else [True, True])
    args = _put(target, q, k, v)
    with fallback_mode("error"):
        got = np.asarray(fa.jit(_attend)(*args))
        assert _kernels(_attend, *args) == 1
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got[finite], want[finite], rtol=2e-5, atol=2e-6)
