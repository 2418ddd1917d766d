"""What jax:0 compiles for a jitted step, and what a call of it costs on the host (issue 30).

``examples/llm.py``'s 4-bit decode step was 1.2-1.6x raw JAX's same model although the products' fusions were
alike: its small traced constants (the unpacking shifts of the quantized embedding, RoPE's frequencies) were
parameters of the XLA program, so XLA could not fold them and recomputed an unpacked embedding row inside each of
the first block's products with shifts read from memory. These tests pin what fixed it: small constants are
literals of the XLA program (as ``jax.jit`` compiles a closed-over NumPy array), ``fa.dequantize`` unpacks without
a gather, the decode step's only parameters are the model's, the caches' and the token's arrays, its cache update
is in place when the caches are donated, a ``transpose`` feeding a ``dot_general`` is folded into it (float32
``x @ w.T`` as XLA's library product, not a single-threaded loop fusion), a call with every argument on the device
copies nothing over, packed inputs are reused while unchanged, and a module flattens without rebuilding its static
data. Each value is checked against NumPy (float64 where it matters).
"""

from __future__ import annotations

import os
import re
import sys

import numpy as np
import pytest

import fnarray as fa
import fnarray.numpy as fnp
from fnarray import nn, tree_util
from fnarray.core.passes import cse
from helpers import assert_argmax

pytest.importorskip("jax")
from fnarray.lowering.jax import backend as jax_backend  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
import llm  # noqa: E402

JAX = "jax:0"


def _entry_params(hlo: str) -> list[str]:
    """The parameter shapes of the optimised HLO's entry computation."""
    entry = hlo[hlo.index("\nENTRY "):]
    entry = entry[:entry.index("\n}")]
    return re.findall(r"= (\S+) parameter\(\d+\)", entry)


def _entry_lines(hlo: str) -> list[str]:
    entry = hlo[hlo.index("\nENTRY "):]
    return entry[:entry.index("\n}")].splitlines()


def test_small_constants_are_literals_of_the_xla_program():
    small = np.arange(8, dtype=np.float32) * 0.5
    big = np.linspace(0, 1, jax_backend.INLINE_CONSTS_UP_TO + 1, dtype=np.float32)
    f = fa.jit(lambda x: (x * small, fnp.sum(x[:1] * big)), device=JAX)
    x = fa.device_put(np.linspace(-1, 1, 8, dtype=np.float32), JAX)
    low = f.lower(x)
    params = _entry_params(low._backend_lowered.optimized_text())
    # x and the large constant; the small one is a literal
    assert sorted(params) == sorted(["f32[8]{0}", f"f32[{big.size}]{{0}}"]), params
    a, b = f(x)
    xn = np.asarray(x, np.float64)
    np.testing.assert_allclose(np.asarray(a), xn * small, rtol=1e-6)
    np.testing.assert_allclose(float(b), float(np.sum(xn[:1, None] * big)), rtol=1e-5)


@pytest.mark.enable_x64
def test_inlined_float64_constant_keeps_its_precision():
    c = np.array([1 + 2.0 ** -40, 3.0], np.float64)
    f = fa.jit(lambda x: x * c, device=JAX)
    x = fa.device_put(np.array([1.0, 1.0], np.float64), JAX)
    assert _entry_params(f.lower(x)._backend_lowered.optimized_text()) == ["f64[2]{0}"]
    np.testing.assert_array_equal(np.asarray(f(x)), c)


@pytest.mark.parametrize("bits", [2, 3, 4, 8])
def test_dequantize_on_jax_reads_only_its_three_arrays(bits):
    rng = np.random.default_rng(bits)
    w = rng.standard_normal((4, 128)).astype(np.float32)
    wq, s, b = fa.quantize(w, group_size=64, bits=bits)
    args = [fa.device_put(a, JAX) for a in (wq, s, b)]
    f = fa.jit(lambda w, s, b: fa.dequantize(w, s, b, group_size=64, bits=bits), device=JAX)
    hlo = f.lower(*args)._backend_lowered.optimized_text()
    assert len(_entry_params(hlo)) == 3        # no constant parameter (shifts, masks, word indices)
    if 32 % bits == 0:
        assert "gather(" not in hlo            # the shifts broadcast over each word, no gather of the words
    # against the eager reference (XLA may contract scale * q + bias into a fused multiply-add: 1-2 ulp)
    ref = np.asarray(fa.dequantize(wq, s, b, group_size=64, bits=bits))
    np.testing.assert_allclose(np.asarray(f(*args)), ref, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(np.asarray(f(*args)), w, atol=2.0 ** (2 - bits) * np.abs(w).max() + 1e-6)


@pytest.fixture(scope="module")
def decode_step():
    dev = fa.get_device(JAX)
    base = llm.Llama(96, 64, 4, 2, 2, 128, key=fa.random.key(0))
    model = fa.device_put(nn.quantize(base, group_size=32, bits=4), dev)
    prefill, decode, counts = llm.make_generators(dev, 0.9, 1.0)
    ids = fa.device_put(np.arange(8, dtype=np.int32)[None], dev)
    key = fa.device_put(fa.random.key(0), dev)
    token, caches = prefill(model, model.make_caches(1, 16, dev), ids, key, greedy=True)
    return dev, model, decode, counts, token, caches, key, base


def test_decode_step_parameters_are_the_arrays_it_reads(decode_step):
    dev, model, decode, _, token, caches, key, _ = decode_step
    hlo = decode.lower(model, caches, token, key, greedy=True)._backend_lowered.optimized_text()
    # + the token; the key is unread, and so are the offsets of every cache but the first (``Llama`` reads the
    # first cache's offset in every layer: one mask a step, as mlx-lm builds it from ``cache[0]``)
    n = len(tree_util.tree_leaves(model)) + len(tree_util.tree_leaves(caches)) + 1 - (len(caches) - 1)
    assert len(_entry_params(hlo)) == n
    # one dynamic_update_slice per cache array (keys and values of each layer), nothing else writes them
    assert hlo.count("dynamic-update-slice(") == 2 * len(caches)


def test_donated_caches_are_updated_in_place(decode_step):
    dev, model, decode, _, token, caches, key, _ = decode_step
    tr = decode.trace(model, caches, token, key, greedy=True)
    first = len(tr.consts) + len(tree_util.tree_leaves(model))
    cache_pos = range(first, first + len(tree_util.tree_leaves(caches)))
    low = dev.impl.lower(cse(tr.program), dev, donate=tuple(cache_pos), consts=tuple(tr.consts))
    hlo = low.optimized_text()
    aliased = re.search(r"input_output_alias=\{(.*?)\}, entry", hlo).group(1)
    # every cache array is aliased; of the offsets only the first cache's is read (``Llama.__call__``)
    assert len(re.findall(r"\{\d+\}: \(\d+", aliased)) == len(cache_pos) - (len(caches) - 1)
    cache = "f32[" + ",".join(str(n) for n in caches[0].keys.shape) + "]"   # (1, K, 16, H): heads first
    big = [line for line in _entry_lines(hlo) if " copy(" in line and cache in line]
    assert big == [], big   # no copy of a cache array: the update writes the donated buffer
    plain = dev.impl.lower(cse(tr.program), dev, consts=tuple(tr.consts)).optimized_text()
    assert sum(" copy(" in line and cache in line for line in _entry_lines(plain)) == 2 * len(caches)


def test_decode_step_tokens_match_the_float64_reference(decode_step):
    dev, model, decode, counts, token, caches, key, _ = decode_step
    toks = [int(token[0])]                # the prefill's pick, then the decode steps'
    for step in range(4):
        token, caches = decode(model, caches, token, key, greedy=True)
        toks.append(int(token[0]))
        if step == 0:   # traced by now (here, or by an earlier test of this module on this worker)
            traces = counts["decode"]
    assert counts["decode"] == traces == 1   # one trace for every position
    # the same quantized model on numpy:0, without a cache, one pass over the whole sequence (causal: position
    # t's logits are those of a pass over ids[:t + 1]); each pick is the argmax up to a float32 near-tie
    host = fa.device_put(model, "numpy:0")
    ids = np.asarray(list(range(8)) + toks, np.int32)
    logits = np.asarray(host(ids[None, :-1]))[0, 7:]
    assert_argmax(logits, toks, 1e-4, msg="jax:0's greedy decode against numpy:0's forward pass")


def test_module_flatten_builds_its_static_data_once(monkeypatch):
    lin = nn.Linear(3, 2, key=fa.random.key(0))
    calls = []
    real = type(lin)._fa_static_items
    monkeypatch.setattr(type(lin), "_fa_static_items", lambda self: calls.append(1) or real(self))
    leaves1, tree1 = tree_util.tree_flatten(lin)
    leaves2, tree2 = tree_util.tree_flatten(lin)
    assert len(calls) == 1 and tree1 == tree2
    again = tree_util.tree_unflatten(tree1, leaves1)      # unflattening hands the static data on
    tree_util.tree_flatten(again)
    assert len(calls) == 1
    changed = lin.replace(use_bias=lin.use_bias)          # replace finishes a new module: rebuilt once
    tree_util.tree_flatten(changed)
    assert len(calls) == 2


def test_module_with_an_unhashable_static_field_still_raises_each_flatten():
    class Holder(nn.Module):
        w: object
        names: object = nn.static_field()

    h = Holder(fnp.zeros(2), ["a"])
    for _ in range(2):
        with pytest.raises(TypeError, match="unhashable list"):
            tree_util.tree_flatten(h)


def _np_dot_general(x, y, dn):
    """``lax.dot_general`` in NumPy (``einsum``): batch, then lhs free, then rhs free axes."""
    (lc, rc), (lb, rb) = dn
    letters = iter("abcdefghijklmnop")
    xs, ys = [None] * x.ndim, [None] * y.ndim
    for a, b in list(zip(lb, rb)) + list(zip(lc, rc)):
        xs[a] = ys[b] = next(letters)
    for seq in (xs, ys):
        for i, c in enumerate(seq):
            if c is None:
                seq[i] = next(letters)
    out = [xs[a] for a in lb] + [c for i, c in enumerate(xs) if i not in lb and i not in lc] + \
        [c for i, c in enumerate(ys) if i not in rb and i not in rc]
    return np.einsum(f"{''.join(xs)},{''.join(ys)}->{''.join(out)}", x, y)


@pytest.mark.parametrize("case", [
    # (x shape, y shape, permutation of y before the product, dimension_numbers on the transposed y)
    ((3, 5), (4, 5), (1, 0), (((1,), (0,)), ((), ())), True),               # x @ w.T
    ((5, 3), (5, 4), (1, 0), (((0,), (1,)), ((), ())), True),               # contract y's second axis
    ((2, 3, 5), (2, 4, 5), (0, 2, 1), (((2,), (1,)), ((0,), (0,))), True),  # batched x @ w.mT
    ((2, 3, 5), (4, 2, 5), (1, 2, 0), (((2,), (1,)), ((0,), (0,))), True),  # batch axis moved
    ((3, 5), (4, 6, 5), (2, 1, 0), (((1,), (0,)), ((), ())), False),        # free axes reversed: kept
])
def test_dot_general_of_a_transpose_matches_numpy(case):
    from fnarray import lax
    xs, ys, perm, dn, folds = case
    rng = np.random.default_rng(len(xs) + len(ys))
    x, y = rng.standard_normal(xs).astype(np.float32), rng.standard_normal(ys).astype(np.float32)
    f = fa.jit(lambda a, b: lax.dot_general(a, fnp.transpose(b, perm), dn), device=JAX)
    args = fa.device_put(x, JAX), fa.device_put(y, JAX)
    got = np.asarray(f(*args))
    lowered = f.lower(*args)._backend_lowered._prog
    assert any(e.primitive.name == "transpose" for e in lowered.eqns) != folds
    ref = _np_dot_general(x.astype(np.float64), np.transpose(y.astype(np.float64), perm), dn)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


def test_one_row_product_with_a_transposed_weight_is_one_library_dot():
    w = fa.device_put(np.random.default_rng(0).standard_normal((64, 32)).astype(np.float32), JAX)
    x = fa.device_put(np.ones((1, 32), np.float32), JAX)
    f = fa.jit(lambda x, w: x @ w.T, device=JAX)
    hlo = f.lower(x, w)._backend_lowered.optimized_text()
    entry = "\n".join(_entry_lines(hlo))
    assert " dot(" in entry and "copy_dot_fusion" not in entry and "transpose" not in entry
    np.testing.assert_allclose(np.asarray(f(x, w)), np.ones((1, 32)) @ np.asarray(w, np.float64).T, rtol=1e-5)


def test_decode_call_with_everything_on_the_device_copies_nothing_over(decode_step, monkeypatch):
    dev, model, decode, _, token, caches, key, _ = decode_step
    decode(model, caches, token, key, greedy=True)      # compiled
    moved = []
    impl = type(dev.impl)
    real = impl.to_device
    monkeypatch.setattr(impl, "to_device", lambda self, a, d: moved.append(np.shape(a)) or real(self, a, d))
    for _ in range(3):
        token, caches = decode(model, caches, token, key, greedy=True)
    assert moved == []
    # the key on another device is copied over on each call (examples/llm.py puts its keys on the device first)
    decode(model, caches, token, fa.device_put(fa.random.key(1), "numpy:0"), greedy=True)
    assert len(moved) == 1


def test_packed_small_inputs_are_reused_only_while_they_are_the_same_buffers(monkeypatch):
    n = jax_backend.PACK_INPUTS_ABOVE + 8          # enough inputs to be packed (one flat array per dtype)
    xs = [fa.device_put(np.full(3, i, np.float32), JAX) for i in range(n)]
    f = fa.jit(lambda xs: fnp.stack(xs).sum(0), device=JAX)
    want = np.full(3, n * (n - 1) / 2)
    np.testing.assert_allclose(np.asarray(f(xs)), want)
    packs = []
    real = np.concatenate
    monkeypatch.setattr(jax_backend.np, "concatenate", lambda a, *k, **kw: packs.append(1) or real(a, *k, **kw))
    np.testing.assert_allclose(np.asarray(f(xs)), want)
    assert packs == []                             # the same buffers: the previous call's packed array
    xs2 = list(xs)
    xs2[5] = fa.device_put(np.full(3, 1000, np.float32), JAX)
    np.testing.assert_allclose(np.asarray(f(xs2)), want - 5 + 1000)
    assert packs == [1]


def test_random_bits_loop_carries_the_key_as_scalars():
    # threefry's rolled loop on XLA CPU: keys broadcast to the counters' shape were two more full-size arrays
    # carried through it and copied in and out (the VAE grid's executable 10% slower than raw JAX's)
    key = fa.device_put(fa.random.key(3), JAX)
    f = fa.jit(lambda k: fa.random.uniform(k, (64, 96)), device=JAX)
    hlo = f.lower(key)._backend_lowered.optimized_text()
    loops = re.findall(r"= \(([^)]*)\) while\(", hlo)
    assert loops, hlo
    assert all(carry.count("u32[64,96]") == 2 for carry in loops), loops   # the two counter words only
    import jax
    want = jax.random.uniform(jax.random.wrap_key_data(np.asarray(fa.random.key_data(key))), (64, 96))
    np.testing.assert_array_equal(np.asarray(f(key)), np.asarray(want))
