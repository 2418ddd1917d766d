"""``vmap`` against a Python loop over the examples, for every batching rule.

The reference runs the function on each slice and stacks the results with
``np.stack``; the vmapped function must agree (dtype and values), eagerly and
under ``jit``, and its traced program must verify.
"""

from __future__ import annotations

import numpy as np
import pytest

import fnarray as fa
import fnarray.numpy as fnp
from fnarray import lax, tree_util
from fnarray.core import primitives as P
from fnarray.core.errors import ConcretizationError, FnArrayError, ShapeError
from fnarray.transforms.batching import batch_program, vmap
from fnarray.transforms.batching_tables import primitive_batchers

RNG = np.random.default_rng(0)
B = 3


# ------------------------------------------------------------------------------------------ helpers


def rand(shape, dtype=np.float32, low=-2.0, high=2.0):
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return RNG.random(shape) < 0.5
    if dtype.kind in "iu":
        return RNG.integers(int(low), int(high), size=shape, endpoint=True).astype(dtype)
    if dtype.kind == "c":
        return (RNG.uniform(low, high, shape) + 1j * RNG.uniform(low, high, shape)).astype(dtype)
    return RNG.uniform(low, high, shape).astype(dtype)


def _example(a, ax, i):
    if ax is None:
        return fnp.asarray(a) if isinstance(a, np.ndarray) else a
    return fnp.asarray(np.take(np.asarray(a), i, axis=ax))


def loop(f, args, in_axes=0, out_axes=0):
    """``np.stack`` of ``f`` on each example (the reference); outputs may be a tuple/list of arrays."""
    axes = in_axes if isinstance(in_axes, tuple) else (in_axes,) * len(args)
    size = next(np.shape(a)[ax] for a, ax in zip(args, axes, strict=True) if ax is not None)
    outs = [f(*[_example(a, ax, i) for a, ax in zip(args, axes, strict=True)]) for i in range(size)]
    if isinstance(outs[0], (tuple, list)):
        o_axes = out_axes if isinstance(out_axes, (tuple, list)) else (out_axes,) * len(outs[0])
        return tuple(np.stack([np.asarray(o[k]) for o in outs], axis=ax) for k, ax in enumerate(o_axes))
    return np.stack([np.asarray(o) for o in outs], axis=out_axes)


def assert_match(got, want):
    if isinstance(want, tuple):
        assert isinstance(got, (tuple, list)) and len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            assert_match(g, w)
        return
    g = np.asarray(got)
    assert g.dtype == want.dtype, (g.dtype, want.dtype)
    assert g.shape == want.shape, (g.shape, want.shape)
    if want.dtype.kind in "fc":
        np.testing.assert_allclose(g, want, rtol=2e-6, atol=1e-6, equal_nan=True)
    else:
        np.testing.assert_array_equal(g, want)


def check(f, *args, in_axes=0, out_axes=0, jit=True):
    """vmap(f) equals the loop eagerly and (``jit``) under jit; its program verifies."""
    want = loop(f, args, in_axes, out_axes)
    vf = vmap(f, in_axes=in_axes, out_axes=out_axes)
    assert_match(vf(*args), want)
    fa.check_program(fa.make_ir(vf)(*args))
    if jit:
        assert_match(fa.jit(vf)(*args), want)
    return want


# ------------------------------------------------------------------------------------------ coverage


CONTROL_FLOW = {"cond", "while", "scan", "custom_lin"}  # rules live in control_flow / not evaluated


def test_every_first_order_primitive_has_a_rule():
    from fnarray.transforms.batching_tables import collective_batchers  # the collectives' own table
    missing = [p.name for p in P.PRIMITIVES.values()
               if p not in primitive_batchers and p not in collective_batchers and p.name not in CONTROL_FLOW
               and p is not P.iota and p.kind != "kernel"]   # kernel-only: batched by pallas_call's grid axis
    assert missing == []


# ------------------------------------------------------------------------------------------ elementwise


def _unary_case(prim):
    """Params and an input dtype the unary primitive accepts, with values in its domain."""
    params = {}
    if prim is P.integer_pow:
        params = {"y": 3}
    elif prim is P.convert_element_type:
        params = {"new_dtype": np.dtype(np.int32), "weak_type": False}
    elif prim is P.bitcast_convert_type:
        params = {"new_dtype": np.dtype(np.int32)}
    for dt in (np.float32, np.int32, np.complex64, np.bool_):
        try:
            prim.abstract_eval(fa.ShapedArray((2,), np.dtype(dt)), **params)
        except TypeError:
            continue
        return dt, params
    raise AssertionError(prim.name)


UNARY = [p for p in P.PRIMITIVES.values() if p.kind == "unary"]


@pytest.mark.parametrize("prim", UNARY, ids=lambda p: p.name)
def test_unary(prim):
    dt, params = _unary_case(prim)
    low, high = (1.1, 1.9) if prim in (P.acosh,) else (0.1, 0.9) if np.dtype(dt).kind == "f" else (-5, 5)
    x = rand((B, 2, 4), dt, low, high)
    f = lambda a: prim.bind(a, **params)
    check(f, x, in_axes=0, jit=False)
    check(f, x, in_axes=-1, out_axes=1, jit=False)


def _binary_inputs(prim, shape):
    for dt in (np.float32, np.int32, np.bool_):
        try:
            prim.abstract_eval(fa.ShapedArray((), np.dtype(dt)), fa.ShapedArray((), np.dtype(dt)))
        except TypeError:
            continue
        if np.dtype(dt).kind == "i":
            return rand(shape, dt, 1, 5)
        return rand(shape, dt, 0.5, 1.5)
    raise AssertionError(prim.name)


BINARY = [p for p in P.PRIMITIVES.values() if p.kind == "binary"]


@pytest.mark.parametrize("prim", BINARY, ids=lambda p: p.name)
def test_binary(prim):
    f = lambda a, b: prim.bind(a, b)
    x, y = _binary_inputs(prim, (B, 2, 3)), _binary_inputs(prim, (B, 2, 3))
    check(f, x, y, jit=False)                                                    # both batched at 0
    check(f, np.moveaxis(x, 0, 2), y, in_axes=(2, 0), jit=False)                 # at different axes
    check(f, x, y[0], in_axes=(0, None), out_axes=-1, jit=False)                 # unbatched full shape
    check(f, x[:, 0, 0], y[0], in_axes=(0, None), jit=False)                     # batched rank 0
    check(f, x[0, 0, 0], y, in_axes=(None, 1), jit=False)                        # unbatched rank 0
    check(f, x[:, 0, 0], y[:, 0, 0], jit=False)


def test_elementwise_through_the_namespace():
    x, y = rand((B, 4)), rand((4, B))
    check(lambda a, b: fnp.sin(a) * b + 2.0, x, y, in_axes=(0, 1))
    check(lambda a: fnp.exp(a) - fnp.tanh(a) / 3.0, x, in_axes=1, out_axes=1)
    check(lambda a, b: fnp.maximum(a, b), x, np.float32(0.5), in_axes=(0, None))
    check(lambda a, b: fnp.where(a > 0.0, a, b), x, y[:, 0], in_axes=(0, None))
    check(lambda a: a.astype(np.int32), x * 3)
    check(lambda a: fnp.add(a, 1.5), rand((B,)))


def test_python_scalar_unbatched_argument():
    x = rand((B, 2))
    check(lambda a, s: a * s, x, 2.5, in_axes=(0, None))


def test_select_n():
    c, t, e = rand((B, 4), np.bool_), rand((B, 4)), rand((B, 4))
    sel = lambda w, a, b: lax.select_n(w, a, b)
    check(sel, c, t, e)
    check(sel, c[:, 0], t, e)                                    # batched rank-0 selector
    check(sel, c[0, 0], t, e, in_axes=(None, 0, 0))              # unbatched rank-0 selector
    check(sel, c, t[0], e[0], in_axes=(0, None, None))           # only the selector batched
    check(sel, c[0], t.T, e[0], in_axes=(None, 1, None))
    check(sel, c[:, 0], t[0, 0], e[0, 0], in_axes=(0, None, None))
    w = rand((B, 4), np.int32, 0, 2)
    check(lambda w, a, b, d: lax.select_n(w, a, b, d), w, t, e.T, rand((4,)), in_axes=(0, 0, 1, None))


def test_iota_never_batched():
    check(lambda a: a + lax.iota(np.float32, 4), rand((B, 4)))
    check(lambda a: lax.iota(np.int32, (2, 3), 1), rand((B,)), out_axes=1)


# ------------------------------------------------------------------------------------------ structural


def test_broadcast_reshape_transpose_rev():
    x = rand((B, 2, 3))
    check(lambda a: lax.broadcast_in_dim(a, (4, 2, 3), (1, 2)), np.moveaxis(x, 0, 1), in_axes=1)
    check(lambda a: lax.broadcast_in_dim(a, (2, 5), (0,)), rand((2, B)), in_axes=1, out_axes=-1)
    check(lambda a: lax.reshape(a, (3, 2)), np.moveaxis(x, 0, -1), in_axes=-1)
    check(lambda a: lax.reshape(a, (6,)), x)
    check(lambda a: lax.transpose(a, (1, 0)), np.moveaxis(x, 0, 1), in_axes=1)
    check(lambda a: lax.transpose(a, (1, 0)), np.moveaxis(x, 0, 2), in_axes=2, out_axes=1)
    check(lambda a: lax.rev(a, (0,)), np.moveaxis(x, 0, 1), in_axes=1)
    check(lambda a: lax.rev(a, (0, 1)), np.moveaxis(x, 0, -1), in_axes=-1)


def test_slice():
    x = rand((B, 5, 6))
    check(lambda a: lax.slice(a, (1, 0), (4, 6), (2, 3)), x)
    check(lambda a: lax.slice(a, (1, 0), (B, 5), (1, 2)), np.moveaxis(x, 0, 2), in_axes=2)


def test_pad():
    x = rand((B, 3, 4))
    config = ((1, 2, 1), (-1, 0, 0))
    check(lambda a, v: lax.pad(a, v, config), x, np.float32(7.0), in_axes=(0, None))
    # batched padding value
    check(lambda a, v: lax.pad(a, v, config), np.moveaxis(x, 0, 1), rand((B,)), in_axes=(1, 0))
    check(lambda a, v: lax.pad(a, v, config), x[0], rand((B,)), in_axes=(None, 0))
    check(lambda a, v: lax.pad(a, v, ((0, 0, 2),)), rand((4, B)), rand((B,)), in_axes=(1, 0))


def test_concatenate():
    x, y = rand((B, 2, 3)), rand((2, 4))
    check(lambda a, b: lax.concatenate([a, b, a], 1), x, y, in_axes=(0, None))
    check(lambda a, b: lax.concatenate([a, b], 0), rand((2, B, 3)), rand((B, 1, 3)), in_axes=(1, 0), out_axes=-1)
    check(lambda a, b: fnp.concat([a, b]), rand((B, 2)), rand((3,)), in_axes=(0, None))


# ------------------------------------------------------------------------------------------ dynamic slicing


def test_dynamic_slice():
    x = rand((B, 5, 6))
    i, j = np.array([0, 3, 9], np.int32), np.array([-2, 1, 4], np.int32)   # some out of range: clamped
    ds = lambda a, s, t: lax.dynamic_slice(a, (s, t), (2, 3))
    check(ds, x, np.int32(1), np.int32(2), in_axes=(0, None, None))      # operand batched only
    check(ds, x[0], i, j, in_axes=(None, 0, 0))                          # starts batched only
    check(ds, x, i, j)                                                   # everything batched
    check(ds, np.moveaxis(x, 0, 2), np.int32(1), j, in_axes=(2, None, 0))                   # one start batched
    check(ds, x[0], i, np.int32(4), in_axes=(None, 0, None))
    check(lambda a, s: lax.dynamic_slice(a, (s, 0), (5, 2)), x, i, in_axes=(0, 0))  # full-size window
    check(lambda a, s: lax.dynamic_slice(a, (s,), (2,)), rand((B, 4)), np.array([1, 5, 2], np.int64))


def test_dynamic_update_slice():
    x, u = rand((B, 5, 6)), rand((B, 2, 3))
    i, j = np.array([0, 3, 9], np.int32), np.array([-2, 1, 4], np.int32)
    dus = lambda a, v, s, t: lax.dynamic_update_slice(a, v, (s, t))
    check(dus, x, u, np.int32(1), np.int32(2), in_axes=(0, 0, None, None))
    check(dus, x[0], u, np.int32(1), np.int32(2), in_axes=(None, 0, None, None))
    check(dus, x, u[0], np.int32(4), np.int32(5), in_axes=(0, None, None, None))
    check(dus, x, u, i, j)
    check(dus, x[0], u[0], i, j, in_axes=(None, None, 0, 0))
    check(dus, x, u, i, np.int32(2), in_axes=(0, 0, 0, None))
    check(dus, np.moveaxis(x, 0, 1), u[0], np.int32(0), j, in_axes=(1, None, None, 0), out_axes=1)


# ------------------------------------------------------------------------------------------ gather / scatter


def test_gather():
    x = rand((B, 4, 5))
    idx = rand((B, 2, 1), np.int32, -1, 5)                  # out-of-range indices clamp
    g = lambda a, i: lax.gather(a, i, (1,))
    check(g, x, idx[0], in_axes=(0, None))
    check(g, np.moveaxis(x, 0, 2), idx[0], in_axes=(2, None))
    check(g, np.moveaxis(x, 0, 1), idx[0], in_axes=(1, None), out_axes=-1)
    check(g, x[0], idx, in_axes=(None, 0))
    check(g, x, idx)
    check(g, np.moveaxis(x, 0, 2), np.moveaxis(idx, 0, 1), in_axes=(2, 1))
    idx2 = rand((B, 3, 2), np.int32, 0, 3)
    check(lambda a, i: lax.gather(a, i, (1, 0)), np.moveaxis(x, 0, 1), idx2, in_axes=(1, 0))
    check(lambda a, i: fnp.take(a, i, axis=0), x, rand((B, 2), np.int32, 0, 3))


SCATTERS = [lax.scatter, lax.scatter_add, lax.scatter_mul, lax.scatter_min, lax.scatter_max]


@pytest.mark.parametrize("op", SCATTERS, ids=lambda f: f.__name__)
def test_scatter(op):
    x = rand((B, 5, 3))
    # unique indices per example (scatter chooses one update among repeats); -1 and 5 are dropped
    idx = np.stack([RNG.permutation(np.array([-1, 0, 2, 4, 5], np.int32))[:4, None] for _ in range(B)])
    upd = rand((B, 4, 3))
    s = lambda a, i, u: op(a, i, u, (0,))
    check(s, x, idx, upd, jit=False)
    check(s, x[0], idx, upd, in_axes=(None, 0, 0), jit=False)
    check(s, x, idx[0], upd, in_axes=(0, None, 0), jit=False)
    check(s, x, idx[0], upd[0], in_axes=(0, None, None), jit=False)
    check(s, x[0], idx[0], upd, in_axes=(None, None, 0), jit=False)
    check(s, x[0], idx, upd[0], in_axes=(None, 0, None), jit=False)
    check(s, np.moveaxis(x, 0, 2), idx, np.moveaxis(upd, 0, 1), in_axes=(2, 0, 1), jit=False)
    check(lambda a, i, u: op(a, i, u, (1,)), x, idx, rand((B, 4, 5)), jit=False)


# ------------------------------------------------------------------------------------------ reductions


REDUCERS = [(lax.reduce_sum, np.float32), (lax.reduce_prod, np.float32), (lax.reduce_max, np.float32),
            (lax.reduce_min, np.int32), (lax.reduce_and, np.bool_), (lax.reduce_or, np.bool_)]


@pytest.mark.parametrize("op,dt", REDUCERS, ids=lambda v: getattr(v, "__name__", ""))
def test_reductions(op, dt):
    x = rand((B, 3, 4), dt)
    check(lambda a: op(a, (0,)), x, jit=False)
    check(lambda a: op(a, (1,)), x, in_axes=1, jit=False)
    check(lambda a: op(a, (0, 1)), x, in_axes=-1, jit=False)
    check(lambda a: op(a, (0,)), x, in_axes=2, out_axes=-1, jit=False)


def test_argmax_argmin_cumulative_through_namespace():
    x = rand((B, 3, 4))
    x[0, 1, 2] = np.nan
    check(lambda a: lax.argmax(a, 1), x, in_axes=1)
    check(lambda a: lax.argmin(a, 0), x, in_axes=-1)
    check(lambda a: lax.argmin(a, 1), x)
    check(lambda a: fnp.sum(a, axis=1), x, in_axes=1)


CUMULATIVE = [lax.cumsum, lax.cumprod, lax.cummax, lax.cummin, lax.cumlogsumexp]


@pytest.mark.parametrize("op", CUMULATIVE, ids=lambda f: f.__name__)
def test_cumulative(op):
    x = rand((B, 3, 4))
    check(lambda a: op(a, 1), x, jit=False)
    check(lambda a: op(a, 0, reverse=True), x, in_axes=1, jit=False)
    check(lambda a: op(a, 1), x, in_axes=-1, out_axes=1, jit=False)


def test_sort():
    x = rand((B, 4, 5))
    x[1, 2, 3] = np.nan
    check(lambda a: lax.sort(a, 1), x)
    check(lambda a: lax.sort(a, 0), x, in_axes=2)
    keys, vals = rand((B, 6), np.int32, 0, 2), rand((6,))
    check(lambda k, v: lax.sort((k, v), 0, num_keys=1), keys, vals, in_axes=(0, None))
    check(lambda k, v: lax.sort((k, v), 0, num_keys=2), keys[0], rand((6, B)), in_axes=(None, 1))


def test_dot_general():
    lhs, rhs = rand((B, 2, 3)), rand((3, 4))
    mm = lambda a, b: lax.dot_general(a, b, (((1,), (0,)), ((), ())))
    check(mm, lhs, rhs, in_axes=(0, None))
    check(mm, np.moveaxis(lhs, 0, 2), rhs, in_axes=(2, None))
    check(mm, lhs[0], rand((3, B, 4)), in_axes=(None, 1))
    check(mm, lhs, rand((B, 3, 4)))
    check(mm, np.moveaxis(lhs, 0, 1), rand((3, 4, B)), in_axes=(1, -1), out_axes=-1)
    # with batch dimensions of its own and two contracting dimensions
    bmm = lambda a, b: lax.dot_general(a, b, (((2, 3), (1, 3)), ((0,), (2,))))
    a, b = rand((2, 5, 3, 4)), rand((4, 3, 2, 4))
    check(bmm, np.stack([a] * B, 1) + rand((2, B, 5, 3, 4)), b, in_axes=(1, None))
    check(bmm, a, np.stack([b] * B, 4) + rand((4, 3, 2, 4, B)), in_axes=(None, 4))
    check(bmm, rand((B, 2, 5, 3, 4)), rand((4, 3, B, 2, 4)), in_axes=(0, 2))
    check(lambda a, b: fnp.matmul(a, b), rand((B, 2, 3)), rand((3, 2)), in_axes=(0, None))


# ------------------------------------------------------------------------------------------ transforms


def test_in_axes_out_axes_and_negative_axes():
    x, y = rand((2, B, 3)), rand((3, B))
    f = lambda a, b: (a * b[None, :], lax.reduce_sum(a, (0,)))
    check(f, x, y, in_axes=(1, -1), out_axes=0)
    check(f, x, y, in_axes=(-2, 1), out_axes=(1, -1))
    check(f, x, y[:, 0], in_axes=(1, None), out_axes=(-1, 0))


def test_out_axes_none_for_unbatched_output():
    x = rand((B, 2))
    c = fnp.asarray(rand((4,)))
    got = vmap(lambda a: (a * 2.0, c + 1.0), out_axes=(0, None))(x)
    np.testing.assert_allclose(np.asarray(got[0]), x * 2.0, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(got[1]), np.asarray(c) + 1.0, rtol=1e-6)
    # an unbatched output with an int out_axes is broadcast
    got = vmap(lambda a: c, out_axes=1)(x)
    np.testing.assert_array_equal(np.asarray(got), np.stack([np.asarray(c)] * B, 1))


def test_axis_size_when_nothing_is_mapped():
    c = rand((2,))
    got = vmap(lambda a: a + 1.0, in_axes=None, axis_size=4)(c)
    np.testing.assert_allclose(np.asarray(got), np.stack([c + 1.0] * 4), rtol=1e-6)


def test_pytree_inputs_and_outputs():
    x, y, z = rand((B, 2)), rand((2, B)), rand((3,))

    def f(d, lst):
        return {"s": d["u"] + d["v"], "p": [lst[0] * 2.0, lst[1]]}

    got = vmap(f, in_axes=({"u": 0, "v": 1}, [0, None]), out_axes={"s": 1, "p": [0, None]})(
        {"u": x, "v": y}, [x, z])
    want_s = np.stack([x[i] + y[:, i] for i in range(B)], 1)
    np.testing.assert_allclose(np.asarray(got["s"]), want_s, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(got["p"][0]), x * 2.0, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(got["p"][1]), z, rtol=1e-6)
    # a prefix: one axis for a whole dict; keyword arguments map over axis 0
    got = vmap(lambda d, k: d["a"] * d["b"] + k, in_axes=(1,))({"a": y, "b": y}, k=x)
    np.testing.assert_allclose(np.asarray(got), (y * y).T + x, rtol=1e-6)


def test_nested_vmap():
    x, y = rand((B, 4, 2)), rand((4, 5))
    inner = vmap(lambda a, b: lax.dot_general(a, b, (((0,), (0,)), ((), ()))), in_axes=(1, None))
    outer = vmap(inner, in_axes=(0, None))
    x64, y64 = x.astype(np.float64), y.astype(np.float64)
    want = np.stack([np.stack([x64[i][:, j] @ y64 for j in range(2)]) for i in range(B)])
    # float32 sums of 4 products of |terms| <= 4 cancel: an absolute bound too (rtol alone failed at a sum of 1e-3)
    np.testing.assert_allclose(np.asarray(outer(x, y)), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(fa.jit(outer)(x, y)), want, rtol=1e-5, atol=1e-5)
    fa.check_program(fa.make_ir(outer)(x, y))
    # the inner vmap maps the outer one's unbatched argument
    f = vmap(vmap(lambda a, b: a * b, in_axes=(None, 0)), in_axes=(0, None))
    a, b = rand((B,)), rand((5,))
    np.testing.assert_allclose(np.asarray(f(a, b)), a[:, None] * b[None, :], rtol=1e-6)


def test_vmap_of_jit_and_jit_of_vmap():
    x, w = rand((B, 3)), rand((3, 2))

    def f(a, m):
        return fnp.tanh(lax.dot_general(a, m, (((0,), (0,)), ((), ())))) + 1.0

    want = loop(f, (x, w), (0, None))
    vj = vmap(fa.jit(f), in_axes=(0, None))
    assert_match(vj(x, w), want)
    prog = fa.make_ir(vj)(x, w)
    fa.check_program(prog)
    assert any(e.primitive is P.call for e in prog.eqns)
    assert_match(fa.jit(vmap(f, in_axes=(0, None)))(x, w), want)
    assert_match(vmap(fa.jit(f), in_axes=(None, 1))(x[0], np.stack([w] * B, 1)),
                 loop(f, (x[0], np.stack([w] * B, 1)), (None, 1)))
    # a jitted function closing over a batched value: the value becomes a batched operand of call
    x2 = rand((B, 3))

    def g(a, b):
        return fa.jit(lambda c: c * b)(a)

    check(g, x, x2)


def test_batch_program():
    def f(a, b):
        return fnp.sin(a) * b, b + 1.0, 3.0

    prog = fa.make_ir(f)(rand((3,)), rand(()))
    bprog, out_batched = batch_program(prog, 4, [True, False], [False, False, True])
    fa.check_program(bprog)
    assert out_batched == [True, False, True]
    assert not bprog.constvars
    assert [a.shape for a in bprog.in_avals] == [(4, 3), ()]
    assert [a.shape for a in bprog.out_avals] == [(4, 3), (), (4,)]
    with pytest.raises(ValueError, match="in_batched has 1 entries"):
        batch_program(prog, 4, [True], False)


def test_remat_and_custom_rules_under_vmap():
    x, y = fnp.asarray(rand((B,), low=0.1, high=1.0)), fnp.asarray(np.float32(2.0))
    check(fa.checkpoint(lambda a: fnp.sin(a) * 2.0), x)

    @fa.custom_jvp
    def f(a, b):
        return fnp.sin(a) * b

    @f.defjvp
    def f_jvp(p, t):
        return f(*p), 100.0 * t[0] + t[1]   # deliberately not the true derivative

    check(f, x, y, in_axes=(0, None))
    got = fa.grad(lambda a: fnp.sum(vmap(f, in_axes=(0, None))(a, y)))(x)
    np.testing.assert_allclose(np.asarray(got), np.full(B, 100.0), rtol=1e-6)
    got = fa.grad(lambda b: fnp.sum(vmap(f, in_axes=(0, None))(x, b)))(y)
    np.testing.assert_allclose(np.asarray(got), float(B), rtol=1e-6)
    got = vmap(fa.grad(f), in_axes=(0, None))(x, y)
    np.testing.assert_allclose(np.asarray(got), np.full(B, 100.0), rtol=1e-6)

    @fa.custom_vjp
    def h(a, b):
        return fnp.sin(a) * b

    h.defvjp(lambda a, b: (h(a, b), (a, b)), lambda r, ct: (ct * 100.0, ct * 7.0))
    check(h, x, y, in_axes=(0, None))
    got = fa.grad(lambda a: fnp.sum(vmap(h, in_axes=(0, None))(a, y)))(x)
    np.testing.assert_allclose(np.asarray(got), np.full(B, 100.0), rtol=1e-6)
    got = fa.grad(lambda b: fnp.sum(vmap(h, in_axes=(0, None))(x, b)))(y)
    np.testing.assert_allclose(np.asarray(got), 7.0 * B, rtol=1e-6)


def test_grad_of_vmap_matches_loop():
    x = rand((B, 3))
    g = vmap(fa.grad(lambda a: fnp.sum(fnp.sin(a) * a)))
    assert_match(g(x), loop(fa.grad(lambda a: fnp.sum(fnp.sin(a) * a)), (x,)))


# ------------------------------------------------------------------------------------------ errors


def test_error_mismatched_sizes_names_each_argument():
    with pytest.raises(ShapeError, match=r"argument a of shape \(3, 2\).*size 3.*argument b of shape \(4,\).*size 4"):
        vmap(lambda a, b: a)(rand((3, 2)), rand((4,)))
    with pytest.raises(ValueError, match="axis_size=5"):
        vmap(lambda a: a, axis_size=5)(rand((3,)))


def test_error_in_axes_structure():
    with pytest.raises(ValueError, match=r"\{'u': 0\}.*argument a.*PyTreeSpec\(\{'v': \*\}\)"):
        vmap(lambda a: a, in_axes=({"u": 0},))({"v": rand((3,))})
    with pytest.raises(ValueError, match="tuple of 1 entries.*2 positional arguments"):
        vmap(lambda a, b: a, in_axes=(0,))(rand((3,)), rand((3,)))
    with pytest.raises(TypeError, match=r"tuple with one entry per positional argument.*\{'a': 0\}"):
        vmap(lambda a: a, in_axes={"a": 0})
    # as JAX, a top-level list is read as the tuple of per-argument entries
    x = rand((B, 2))
    np.testing.assert_array_equal(np.asarray(vmap(lambda a, b: a + b, in_axes=[0, 1])(x, x.T)), x + x)
    with pytest.raises(TypeError, match="ints or None, got 1.5"):
        vmap(lambda a: a, in_axes=({"u": 1.5},))
    with pytest.raises(ValueError, match=r"out_axes specification \(0, 1\).*the output"):
        vmap(lambda a: a, out_axes=(0, 1))(rand((3,)))


def test_error_axis_out_of_range_names_argument_and_shape():
    with pytest.raises(ShapeError, match=r"argument x over axis 2.*shape \(3, 4\)"):
        vmap(lambda x: x, in_axes=2)(rand((3, 4)))
    with pytest.raises(ShapeError, match=r"argument s.*shape \(\)"):
        vmap(lambda x, s: x, in_axes=(0, 0))(rand((3,)), 1.0)
    with pytest.raises(ShapeError, match="out_axes=3"):
        vmap(lambda x: x, out_axes=3)(rand((3, 4)))


def test_error_out_axes_none_for_batched_output():
    with pytest.raises(ValueError, match="out_axes is None.*varies over the mapped axis"):
        vmap(lambda x: x * 2.0, out_axes=None)(rand((3,)))


def test_error_nothing_mapped_needs_axis_size():
    with pytest.raises(ValueError, match="axis_size"):
        vmap(lambda x: x, in_axes=None)(rand((3,)))


def test_error_concretization_points_to_where_and_cond():
    with pytest.raises(ConcretizationError, match=r"vmap.*fnarray\.numpy\.where.*fnarray\.cond"):
        vmap(lambda x: x if lax.reduce_sum(x, (0,)) > 0.0 else -x)(rand((3, 2)))
    with pytest.raises(ConcretizationError):
        vmap(lambda x: float(x))(rand((3,)))


def test_error_missing_rule_names_primitive_and_vmap(monkeypatch):
    monkeypatch.delitem(primitive_batchers, P.cumsum)
    with pytest.raises(FnArrayError, match="vmap has no batching rule for the primitive 'cumsum'"):
        vmap(lambda x: lax.cumsum(x, 0))(rand((3, 2)))


def test_unmapped_values_pass_through_untouched():
    # a primitive whose operands are all unbatched is bound directly (no rule needed)
    c = rand((4,))
    got = vmap(lambda x, k: x + lax.cumsum(k, 0), in_axes=(0, None))(rand((B, 4)), c)
    assert np.asarray(got).shape == (B, 4)
    leaves = tree_util.tree_leaves(vmap(lambda x: {"a": x, "b": None})(rand((B,))))
    assert len(leaves) == 1
