"""Compile-time hygiene (issue 28): common-subexpression elimination before lowering, and random bits as one
``threefry2x32`` equation that XLA does not copy into every reader. Pinned by equation and instruction counts,
never by time."""

from __future__ import annotations

import collections

import numpy as np
import pytest

import fnarray as fa
import fnarray.numpy as fnp
from fnarray.core.ir import Program
from fnarray.core.passes import cse
from fnarray.core.prng import threefry2x32_reference

from helpers import count_lowerings, require_backend


def _counts(prog):
    return collections.Counter(e.primitive.name for e in prog.eqns)


def _draw_twice(k, v):
    # The same draw written twice, as programs that re-derive a mask in a loop do.
    return fa.random.bernoulli(k, v) & fa.random.bernoulli(k, v), fnp.broadcast_to(v[0], (3, 4)) + \
        fnp.broadcast_to(v[0], (3, 4))


def test_cse_removes_duplicated_random_bits_and_broadcasts():
    k, v = fa.random.key(3), fnp.full((3, 4), 0.4)
    prog = fa.make_ir(_draw_twice)(k, v)
    before, after = _counts(prog), _counts(cse(prog))
    assert before["threefry2x32"] == 2 and after["threefry2x32"] == 1
    assert before["broadcast_in_dim"] > after["broadcast_in_dim"]
    assert sum(after.values()) <= sum(before.values()) // 2 + 2
    # the compiled program runs the reduced one and computes the same values
    lowered = fa.jit(_draw_twice).lower(k, v)
    assert _counts(lowered._backend_lowered.program)["threefry2x32"] == 1
    got, ref = fa.jit(_draw_twice)(k, v), _draw_twice(k, v)
    for g, r in zip(got, ref, strict=True):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(r))


def test_cse_keeps_what_differs():
    def f(x):
        # 0.0 and -0.0, 1 and True differ as literals; two prints are two effects
        fa.debug.print("x={x}", x=x)
        fa.debug.print("x={x}", x=x)
        return x + 0.0, x + -0.0, fnp.sum(x, axis=0), fnp.sum(x, axis=1)
    prog = fa.make_ir(f)(fnp.ones((2, 3)))
    before, after = _counts(prog), _counts(cse(prog))
    assert after == before
    assert cse(prog) is prog     # nothing merged: the very same program, so caches keyed by it keep hitting


def test_cse_inside_sub_programs():
    def body(i, c):
        return c + fnp.sin(c) * fnp.sin(c)
    prog = fa.make_ir(lambda x: fa.lax.fori_loop(0, 3, body, x))(fnp.ones(4))
    (loop,) = [e for e in prog.eqns if e.primitive.name in ("while", "scan")]
    sub = [p for p in loop.params.values() if isinstance(p, Program)]
    out = cse(prog)
    (loop2,) = [e for e in out.eqns if e.primitive.name in ("while", "scan")]
    sub2 = [p for p in loop2.params.values() if isinstance(p, Program)]
    assert sum(_counts(p)["sin"] for p in sub) == 2 and sum(_counts(p)["sin"] for p in sub2) == 1
    np.testing.assert_allclose(np.asarray(fa.jit(lambda x: fa.lax.fori_loop(0, 3, body, x))(fnp.ones(4))),
                               np.asarray(fa.lax.fori_loop(0, 3, body, fnp.ones(4))), rtol=1e-6)


def test_threefry_reference_matches_jax():
    jax = pytest.importorskip("jax")
    from jax.extend.random import threefry2x32_p as jax_threefry
    rng = np.random.default_rng(0)
    k0, k1 = (np.uint32(x) for x in rng.integers(0, 2**32, 2))
    x0, x1 = (rng.integers(0, 2**32, 64).astype(np.uint32) for _ in range(2))
    want = [np.asarray(o) for o in jax_threefry.bind(*(jax.numpy.asarray(np.broadcast_to(a, (64,)))
                                                       for a in (k0, k1, x0, x1)))]
    got = threefry2x32_reference(k0, k1, x0, x1)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)


def test_threefry_is_one_equation_and_bits_agree_on_every_device(device):
    k = fa.random.key(11)
    prog = fa.make_ir(lambda k: fa.random.bits(k, (5, 7)))(k)
    assert _counts(prog)["threefry2x32"] == 1 and _counts(prog)["xor"] <= 1
    want = np.asarray(fa.random.bits(k, (5, 7)))
    got = fa.jit(lambda k: fa.random.bits(k, (5, 7)))(fa.device_put(k, device))
    np.testing.assert_array_equal(np.asarray(got), want)
    np.testing.assert_array_equal(np.asarray(fa.random.bits(fa.device_put(k, device), (5, 7))), want)


def test_vmap_and_grad_through_threefry(device):
    keys = fa.device_put(fa.random.split(fa.random.key(2), 4), device)
    got = fa.vmap(lambda k: fa.random.uniform(k, (3,)))(keys)
    want = np.stack([np.asarray(fa.random.uniform(k, (3,)))
                     for k in fa.random.split(fa.random.key(2), 4)])
    np.testing.assert_array_equal(np.asarray(got), want)
    g = fa.grad(lambda x, k: fnp.sum(x * fa.random.uniform(k, (3,))))(fa.device_put(fnp.ones(3), device), keys[0])
    np.testing.assert_allclose(np.asarray(g), want[0], rtol=1e-6)


def _image_grid(np_, imagevecs):
    images = iter(imagevecs.reshape((-1, 8, 8)))
    return np_.vstack([np_.hstack([next(images).T for _ in range(5)][::-1]) for _ in range(5)]).T


def test_xla_compiles_the_cipher_once_for_many_slices():
    """100 slices of one bernoulli draw (the VAE example's image grid) compiled Threefry into each slice's
    fusion: 23 xors per copy. JAX's own threefry lowering keeps one copy, as raw JAX does."""
    require_backend("jax")
    import jax
    import jax.numpy as jnp
    v = fnp.full((25, 64), 0.3)
    lowered = fa.jit(lambda k, v: _image_grid(fnp, fa.random.bernoulli(k, v))).lower(
        fa.random.key(0), fa.device_put(v, "jax:0"))
    bl = lowered._backend_lowered
    ours = bl._jitted.lower(*bl._jit_avals()).compile().as_text().count(" xor(")
    raw = jax.jit(lambda k, v: _image_grid(jnp, jax.random.bernoulli(k, v))).lower(
        jax.random.key(0), jnp.full((25, 64), 0.3)).compile().as_text().count(" xor(")
    assert ours <= raw + 2, (ours, raw)


def _decode_steps(cache, row, steps):
    outs = []
    for _ in range(steps):
        cache = fnp.concatenate([cache, row], axis=0)      # the cache grows by one row a step
        outs.append(float(fnp.sum(fnp.tanh(cache), axis=0)[0]))
    return outs


def test_eager_compiles_each_new_shape_once_on_jax(monkeypatch):
    """A decode loop whose cache grows by one row a step: on jax:0 each step compiles each function once (the
    whole function, as jax.numpy's jitted functions), and a second identical run compiles nothing."""
    require_backend("jax")
    cache = fa.device_put(fnp.zeros((3, 4)), "jax:0")
    dev = cache.device
    row = fa.device_put(fnp.ones((1, 4)), dev)
    _decode_steps(cache, row, 2)                 # warm: the shapes of steps 1-2
    lowered = count_lowerings(monkeypatch, dev)
    first = _decode_steps(cache, row, 6)
    # steps 3-6 are new shapes: concatenate, tanh, sum and the index each compile once per step
    assert len(lowered) <= 4 * 4, lowered
    n = len(lowered)
    second = _decode_steps(cache, row, 6)
    assert len(lowered) == n, lowered[n:]        # nothing compiles the second time
    assert first == second
    want = [float(np.tanh(np.concatenate([np.zeros((3, 4))] + [np.ones((1, 4))] * k)).sum(0)[0])
            for k in range(1, 7)]
    np.testing.assert_allclose(first, want, rtol=1e-6)


def test_eager_numpy_waits_for_the_second_call(monkeypatch):
    x = fnp.ones((5, 3))
    dev = x.device
    fnp.sum(x, axis=1)                           # the general path's per-primitive programs, now cached
    lowered = count_lowerings(monkeypatch, dev)
    y = fnp.ones((7, 3))
    fnp.sum(y, axis=1)                           # first call of a new key: the general path (1 reduce)
    fnp.sum(y, axis=1)                           # second: the whole function, once
    fnp.sum(y, axis=1)
    assert len(lowered) <= 2, lowered
