"""jit's miss path (issue 28, first calls): a decode loop whose cache grows by a row a step traces and lowers once
per new shape and computes what a NumPy float64 loop computes on every device; the passes' shortcuts on that path
(``subprograms`` kept on the ``Params``, ``cse``'s key of integer tuples, ``has_zero_size`` by output shapes)
answer as the full walks do."""

from __future__ import annotations

import numpy as np

import fnarray as fa
import fnarray.numpy as fnp
from fnarray.core import primitives as P
from fnarray.core.ir import Eqn, Params, Program, Var
from fnarray.core.passes import cse
from fnarray.core.shaped import ShapedArray
from fnarray.core.subprograms import map_subprograms, subprograms
from fnarray.lowering.zero_size import has_zero_size

from helpers import count_lowerings

W = 8


def _decode_reference(steps):
    """The decode loop in NumPy float64: ``[(cache, out)]`` after each step."""
    q, row = np.full((1, W), 0.01), np.linspace(-1, 1, W)[None, :]
    cache, got = np.zeros((1, W)), []
    for i in range(steps):
        cache = np.concatenate([cache, row * (i + 1)], axis=0)
        sc = q @ cache.T
        e = np.exp(sc - sc.max(axis=-1, keepdims=True))
        got.append((cache, (e / e.sum(axis=-1, keepdims=True)) @ cache))
    return got


def test_growing_cache_traces_and_lowers_once_per_shape(device, monkeypatch):
    traces = []

    def step(cache, q, row):
        traces.append(cache.shape)
        cache = fnp.concatenate([cache, row], axis=0)
        sc = q @ cache.T
        e = fnp.exp(sc - sc.max(axis=-1, keepdims=True))
        return cache, (e / e.sum(axis=-1, keepdims=True)) @ cache
    jstep = fa.jit(step)
    lowered = count_lowerings(monkeypatch, device)
    q = fa.device_put(np.full((1, W), 0.01, np.float32), device)
    rows = [fa.device_put((np.linspace(-1, 1, W)[None, :] * (i + 1)).astype(np.float32), device) for i in range(6)]
    want = _decode_reference(6)
    for _ in range(2):  # the second pass meets only shapes seen: no trace, no lowering
        cache = fa.device_put(np.zeros((1, W), np.float32), device)
        for i in range(6):
            cache, out = jstep(cache, q, rows[i])
            np.testing.assert_allclose(np.asarray(cache), want[i][0], rtol=1e-6)
            np.testing.assert_allclose(np.asarray(out), want[i][1], rtol=2e-5, atol=1e-6)
    assert traces == [(n, W) for n in range(1, 7)]
    # mlx:0: lengths 2-6 are one program up to its sizes, lowered once (``core/size_free.py``); length 1 is its own
    assert len(lowered) == (2 if str(device).startswith("mlx") else 6)


def _var(*shape):
    return Var(ShapedArray(shape, np.dtype(np.float32)))


def test_cse_keys_integer_tuples_apart_from_bool_and_float_tuples():
    x = _var(2, 3)
    outs = [_var(2) for _ in range(4)]
    axes = [(1,), (True,), (1.0,), (1,)]
    prog = Program([], [x], [Eqn(P.reduce_sum, (x,), Params(axes=a), (o,)) for a, o in zip(axes, outs)], outs)
    out = cse(prog)
    # the two (1,) merge; (True,) and (1.0,) compare equal to (1,) in Python but are other params
    assert [e.params["axes"] for e in out.eqns] == [(1,), (True,), (1.0,)]
    assert [type(e.params["axes"][0]) for e in out.eqns] == [int, bool, float]
    assert out.outvars[3] is outs[0] and out.outvars[:3] == tuple(outs[:3])


def test_subprograms_kept_on_params_match_a_walk_and_follow_replacement():
    body = fa.make_ir(lambda c: c + fnp.sin(c))(fnp.ones(3))
    prog = fa.make_ir(lambda x: fa.lax.fori_loop(0, 2, lambda i, c: c + fnp.sin(c), x))(fnp.ones(3))
    (loop,) = [e for e in prog.eqns if subprograms(e)]
    walked = tuple(p for v in loop.params.values() for p in (v if isinstance(v, tuple) else (v,))
                   if isinstance(p, Program))
    assert subprograms(loop) == walked and subprograms(loop) == walked  # the second answer is the kept one
    # a replaced sub-program makes new Params: the new equation answers its own programs, the old its old ones
    key = next(k for k, v in loop.params.items() if v is walked[-1])
    new = loop._replace(params=loop.params.replace(**{key: body}))
    assert subprograms(new)[-1] is body and subprograms(loop) == walked
    assert map_subprograms(new, lambda p: p) is new
    plain = Eqn(P.sin, (prog.invars[0],), Params(), (_var(3),))
    assert map_subprograms(plain, lambda p: 1 / 0) is plain  # nothing to map: fn is never called


def test_has_zero_size_sees_inputs_values_and_outputs():
    x, y, z = _var(2, 3), _var(2, 0), _var(2, 3)
    assert not has_zero_size(Program([], [x], [Eqn(P.sin, (x,), Params(), (z,))], [z]))
    assert has_zero_size(Program([], [y], [], [y]))
    e = _var(0, 3)
    assert has_zero_size(Program([], [x], [Eqn(P.slice_p, (x,), Params(start_indices=(0, 0),
                                                                        limit_indices=(0, 3), strides=None),
                                               (e,)), Eqn(P.sin, (x,), Params(), (z,))], [z]))
