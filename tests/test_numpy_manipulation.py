"""fnarray.numpy manipulation functions against NumPy, eagerly and under jit.

Every case of the table runs on float32, float64 and int32 inputs: the eager result is
compared with NumPy, the jitted result must equal the eager one exactly (dtype, shape,
weak type, values), and the traced program must pass the verifier.
"""

from __future__ import annotations

import functools
import zlib
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import pytest
from helpers import assert_close, assert_same, check_traced, eager_and_jit, oracle_promote, random_array

import fnarray as fa
import fnarray.numpy as fnp
from fnarray.core.errors import ConcretizationError, DTypeError, ShapeError

DTYPES = [np.float32, np.float64, np.int32]


class Case(NamedTuple):
    name: str
    fa_fn: Callable
    np_fn: Callable
    shapes: tuple


def same(name, shapes, *args, label="", **kw):
    """A case where fnarray.numpy.<name> and numpy.<name> take the same arguments."""
    return Case(f"{name}{label}", lambda *a: getattr(fnp, name)(*a, *args, **kw),
                lambda *a: getattr(np, name)(*a, *args, **kw), shapes)


def seq(name, shapes, label="", **kw):
    """A case whose function takes a sequence of arrays (concat, stack, hstack...)."""
    return Case(f"{name}{label}", lambda *a: getattr(fnp, name)(list(a), **kw),
                lambda *a: getattr(np, name)(list(a), **kw), shapes)


CASES = [
    same("reshape", ((2, 3, 4),), (4, -1)),
    same("reshape", ((6, 4),), (-1,), label="_flat"),
    same("reshape", ((),), (1, 1), label="_0d"),
    same("reshape", ((0, 3),), (3, 0), label="_empty"),
    same("reshape", ((2, 3, 4),), (4, 6), order="F", label="_F"),
    same("ravel", ((2, 3, 4),)),
    same("ravel", ((2, 3),), order="F", label="_F"),
    same("ravel", ((),), label="_0d"),
    same("permute_dims", ((2, 3, 4),), (1, -1, 0)),
    same("transpose", ((2, 3, 4),)),
    same("transpose", ((2, 3, 4),), (2, 0, 1), label="_axes"),
    same("transpose", ((),), label="_0d"),
    same("matrix_transpose", ((2, 3, 4),)),
    same("expand_dims", ((2, 3),), 0),
    same("expand_dims", ((2, 3),), -1, label="_neg"),
    same("expand_dims", ((2, 3),), (0, 3), label="_tuple"),
    same("expand_dims", ((),), 0, label="_0d"),
    same("squeeze", ((1, 3, 1),)),
    same("squeeze", ((3, 1, 2),), -2, label="_neg"),
    same("squeeze", ((0, 1),), (1,), label="_empty"),
    same("broadcast_to", ((3, 1),), (2, 3, 4)),
    same("broadcast_to", ((),), (2,), label="_0d"),
    same("broadcast_to", ((0, 1),), (0, 5), label="_empty"),
    Case("broadcast_arrays", lambda *a: fnp.broadcast_arrays(*a), lambda *a: np.broadcast_arrays(*a),
         ((3, 1), (1, 4), ())),
    seq("concat", ((2, 3), (4, 3))),
    seq("concat", ((2, 3), (2, 0), (2, 1)), axis=-1, label="_neg_empty"),
    seq("concat", ((2, 3), (5,), ()), axis=None, label="_none"),
    seq("concatenate", ((1, 2, 2), (1, 2, 2)), axis=2),
    seq("stack", ((2, 3), (2, 3))),
    seq("stack", ((2, 3), (2, 3), (2, 3)), axis=-1, label="_neg"),
    seq("stack", ((), ()), label="_0d"),
    seq("stack", ((0, 2), (0, 2)), axis=1, label="_empty"),
    Case("unstack", lambda a: fnp.unstack(a, axis=-1), lambda a: np.unstack(a, axis=-1), ((2, 3),)),
    same("split", ((6, 2),), 3),
    same("split", ((2, 7),), [1, 4], axis=-1, label="_indices"),
    same("split", ((5,),), [2, 10, 3], label="_past_end"),
    same("array_split", ((10, 2),), 4),
    same("array_split", ((3,),), 5, label="_more"),
    same("hsplit", ((2, 6),), 3),
    same("hsplit", ((6,),), [2], label="_1d"),
    same("vsplit", ((4, 2),), 2),
    same("dsplit", ((1, 2, 4),), [1]),
    same("flip", ((2, 3, 4),)),
    same("flip", ((2, 3, 4),), axis=-1, label="_neg"),
    same("flip", ((2, 3, 4),), axis=(0, 2), label="_tuple"),
    same("flip", ((),), label="_0d"),
    same("fliplr", ((2, 3),)),
    same("flipud", ((2, 3),)),
    same("roll", ((2, 3, 4),), 2),
    same("roll", ((2, 3, 4),), -1, axis=1, label="_axis"),
    same("roll", ((2, 3, 4),), (1, 7), axis=(0, -1), label="_tuple"),
    same("roll", ((5,),), 13, label="_large"),
    same("roll", ((0, 3),), 1, axis=0, label="_empty"),
    same("roll", ((),), 1, label="_0d"),
    same("moveaxis", ((2, 3, 4),), 0, -1),
    same("moveaxis", ((2, 3, 4, 5),), (0, 1), (3, 0), label="_tuple"),
    same("swapaxes", ((2, 3, 4),), 0, -1),
    same("tile", ((2, 3),), (2, 1, 2)),
    same("tile", ((2, 3),), 3, label="_int"),
    same("tile", ((),), (2, 2), label="_0d"),
    same("tile", ((2, 3, 4),), (2,), label="_short"),
    same("repeat", ((2, 3),), 2),
    same("repeat", ((2, 3),), 3, axis=-1, label="_axis"),
    same("repeat", ((2, 3),), [1, 0, 2], axis=1, label="_array"),
    same("repeat", ((),), 2, label="_0d"),
    same("repeat", ((0, 2),), 2, axis=0, label="_empty"),
    Case("atleast_1d", fnp.atleast_1d, np.atleast_1d, ((),)),
    Case("atleast_2d", fnp.atleast_2d, np.atleast_2d, ((3,),)),
    Case("atleast_3d", lambda a, b, c: fnp.atleast_3d(a, b, c), lambda a, b, c: np.atleast_3d(a, b, c),
         ((3,), (2, 3), ())),
    seq("hstack", ((2, 3), (2, 1))),
    seq("hstack", ((3,), (2,), ()), label="_1d"),
    seq("vstack", ((3,), (2, 3))),
    seq("dstack", ((2, 3), (2, 3))),
    seq("column_stack", ((3,), (3, 2))),
    same("rot90", ((2, 3),)),
    same("rot90", ((2, 3, 4),), 2, axes=(0, 2), label="_k2"),
    same("rot90", ((2, 3, 4),), 3, axes=(-1, 1), label="_k3"),
    same("rot90", ((2, 3),), -1, label="_kneg"),
    same("rot90", ((2, 3),), 4, label="_k4"),
    same("pad", ((2, 3),), 1),
    same("pad", ((2, 3),), ((1, 2), (0, 3)), constant_values=7, label="_pairs"),
    same("pad", ((2, 3),), ((1, 2), (3, 1)), constant_values=((1, 2), (3, 4)), label="_values"),
    same("pad", ((0, 2),), (1, 2), label="_empty"),
    same("pad", ((),), 2, label="_0d"),
    same("pad", ((3, 4),), ((2, 5), (1, 0)), mode="edge", label="_edge"),
    same("pad", ((3, 4),), ((7, 5), (1, 3)), mode="reflect", label="_reflect"),
    same("pad", ((1, 4),), ((3, 2), (1, 0)), mode="reflect", label="_reflect1"),
    same("pad", ((3, 4),), ((8, 5), (2, 3)), mode="symmetric", label="_symmetric"),
    same("pad", ((3, 4),), ((7, 2), (2, 9)), mode="wrap", label="_wrap"),
]


def _np_inputs(case, dtype, rng):
    return [random_array(rng, s, dtype) for s in case.shapes]


def _compare(actual, expected, msg):
    if isinstance(expected, (list, tuple)):
        assert isinstance(actual, (list, tuple)) and len(actual) == len(expected), msg
        for k, (a, e) in enumerate(zip(actual, expected, strict=True)):
            _compare(a, e, f"{msg}[{k}]")
    else:
        assert_close(actual, expected, msg=msg)


def _same(a, b, msg):
    if isinstance(a, (list, tuple)):
        assert len(a) == len(b), msg
        for x, y in zip(a, b, strict=True):
            _same(x, y, msg)
    else:
        assert_same(a, b, msg)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_against_numpy(case, dtype):
    rng = np.random.default_rng(zlib.crc32(case.name.encode()))
    xs = _np_inputs(case, dtype, rng)
    expected = case.np_fn(*xs)
    args = [fnp.asarray(x) for x in xs]
    eager, jitted = eager_and_jit(case.fa_fn, *args)
    _compare(eager, expected, case.name)
    _same(eager, jitted, case.name)


# ----------------------------------------------------------------------------- where and select


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_where_three_args(dtype):
    rng = np.random.default_rng(0)
    c = rng.random((3, 1)) < 0.5
    x, y = random_array(rng, (1, 4), dtype), random_array(rng, (3, 4), dtype)
    for cc, xx, yy in [(c, x, y), (c, x, np.zeros((), dtype)), (c.astype(np.int32), y, x)]:
        f = lambda a, b, d: fnp.where(a, b, d)
        eager, jitted = eager_and_jit(f, fnp.asarray(cc), fnp.asarray(xx), fnp.asarray(yy))
        assert_close(eager, np.where(cc, xx, yy))
        assert_same(eager, jitted)
    empty = fnp.where(fnp.asarray(np.zeros((0, 2), bool)), fnp.asarray(np.ones((0, 2), dtype)), 0)
    assert empty.shape == (0, 2) and empty.dtype == dtype


def test_where_promotes_like_jax():
    rng = np.random.default_rng(1)
    c = rng.random((4,)) < 0.5
    i = random_array(rng, (4,), np.int32)
    f = random_array(rng, (4,), np.float16)
    cases = [((np.dtype(np.int32), 1.5), (i, 1.5)), ((np.dtype(np.float16), np.dtype(np.int32)), (f, i)),
             ((2.0, 3), (2.0, 3)), ((np.dtype(np.float16), 2.0), (f, 2.0))]
    for ops, (a, b) in cases:
        want, weak = oracle_promote(*ops)
        out = fnp.where(fnp.asarray(c), a if np.isscalar(a) else fnp.asarray(a),
                        b if np.isscalar(b) else fnp.asarray(b))
        ref = np.where(c, np.asarray(a).astype(np.float64), np.asarray(b).astype(np.float64))
        assert_close(out, ref.astype(want), dtype=want, weak_type=weak, msg=str(ops))


def _nonzero_sized(a, *, size, fill):
    return fnp.where(a > 0.5, size=size, fill_value=fill)


def _repeat_total(a, k, *, total):
    return fnp.repeat(a, k, axis=1, total_repeat_length=total)


def test_where_one_argument():
    rng = np.random.default_rng(2)
    m = rng.random((3, 4)) < 0.4
    got = fnp.where(fnp.asarray(m))
    for g, e in zip(got, np.nonzero(m), strict=True):
        assert_close(g, e.astype(np.int32))
    with pytest.raises(ConcretizationError, match="size="):
        fa.jit(lambda a: fnp.where(a))(fnp.asarray(m))
    # with a static size it traces: extra entries are dropped, missing ones filled
    for size, fill in [(3, None), (20, -1)]:
        f = functools.partial(_nonzero_sized, size=size, fill=fill)
        x = fnp.asarray(rng.random((3, 4)).astype(np.float32))
        eager, jitted = eager_and_jit(f, x)
        nz = np.nonzero(np.asarray(x) > 0.5)
        for d in range(2):
            ref = np.full(size, 0 if fill is None else fill, np.int32)
            k = min(size, len(nz[d]))
            ref[:k] = nz[d][:k]
            assert_close(eager[d], ref)
            assert_same(eager[d], jitted[d])
    with pytest.raises(TypeError, match="three"):
        fnp.where(fnp.asarray(m), 1)


def test_select():
    rng = np.random.default_rng(3)
    x = random_array(rng, (3, 4), np.float32)
    conds = [x < -1, x > 1]
    choices = [x * 2, np.float32(5)]
    f = lambda a: fnp.select([a < -1, a > 1], [a * 2, 5.0], default=-7.0)
    eager, jitted = eager_and_jit(f, fnp.asarray(x))
    assert_close(eager, np.select(conds, choices, default=-7.0).astype(np.float32))
    assert_same(eager, jitted)
    with pytest.raises(DTypeError, match="bool"):
        fnp.select([fnp.asarray(x)], [fnp.asarray(x)])
    with pytest.raises(ValueError, match="same length"):
        fnp.select([fnp.asarray(x) > 0], [])


# ----------------------------------------------------------------------------- promotion, traced args


def test_concat_and_stack_promote():
    a = np.arange(3, dtype=np.float32)
    b = np.arange(2, dtype=np.int32)
    out = fnp.concat([fnp.asarray(a), fnp.asarray(b)])
    want, _ = oracle_promote(np.dtype(np.float32), np.dtype(np.int32))
    assert_close(out, np.concatenate([a, b]).astype(want))
    out = fnp.stack([fnp.asarray(b), fnp.asarray(b.astype(np.int16))])
    assert out.dtype == oracle_promote(np.dtype(np.int32), np.dtype(np.int16))[0]
    out = fnp.concatenate([fnp.asarray(a), fnp.asarray(b)], dtype=np.int32)
    assert_close(out, np.concatenate([a, b]).astype(np.int32))


def test_roll_traced_shift():
    x = np.arange(10, dtype=np.float32).reshape(2, 5)
    for s in [0, 3, -2, 12, -11]:
        f = lambda a, sh: fnp.roll(a, sh, axis=1)
        eager, jitted = eager_and_jit(f, fnp.asarray(x), fnp.asarray(np.int32(s)))
        assert_close(eager, np.roll(x, s, axis=1))
        assert_same(eager, jitted)


def test_repeat_array_repeats():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    r = np.array([2, 0, 3], np.int32)
    with pytest.raises(ConcretizationError, match="total_repeat_length"):
        fa.jit(lambda a, k: fnp.repeat(a, k, axis=1))(fnp.asarray(x), fnp.asarray(r))
    # a concrete array of repeats works under jit (captured, static)
    got = fa.jit(lambda a: fnp.repeat(a, fnp.asarray(r), axis=1))(fnp.asarray(x))
    assert_close(got, np.repeat(x, r, axis=1))
    for total in [5, 3, 8]:
        f = functools.partial(_repeat_total, total=total)
        eager, jitted = eager_and_jit(f, fnp.asarray(x), fnp.asarray(r))
        full = np.repeat(x, r, axis=1)
        ref = np.concatenate([full, np.repeat(full[:, -1:], max(0, total - 5), axis=1)], axis=1)[:, :total]
        assert_close(eager, ref)
        assert_same(eager, jitted)
        static = fnp.repeat(fnp.asarray(x), r, axis=1, total_repeat_length=total)
        assert_close(static, ref)
    with pytest.raises(ValueError, match="non-negative"):
        fnp.repeat(fnp.asarray(x), [1, -1, 2], axis=1)
    with pytest.raises(ShapeError, match="do not match"):
        fnp.repeat(fnp.asarray(x), [1, 2], axis=1)


def test_pad_traced_constant():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    f = lambda a, v: fnp.pad(a, ((1, 0), (2, 1)), constant_values=v)
    eager, jitted = eager_and_jit(f, fnp.asarray(x), fnp.asarray(np.float32(-3)))
    assert_close(eager, np.pad(x, ((1, 0), (2, 1)), constant_values=-3))
    assert_same(eager, jitted)


@pytest.mark.enable_x64
def test_pad_wide_reflections_match_numpy():
    rng = np.random.default_rng(4)
    for n in [1, 2, 3, 5]:
        x = rng.standard_normal(n)
        for mode in ["reflect", "symmetric", "wrap", "edge"]:
            for b, a in [(0, 3), (4, 0), (2 * n + 1, 3 * n + 2)]:
                assert_close(fnp.pad(fnp.asarray(x), (b, a), mode=mode), np.pad(x, (b, a), mode=mode),
                             msg=f"{mode} n={n} ({b},{a})")


# ----------------------------------------------------------------------------- Array methods


@pytest.mark.enable_x64
def test_array_methods():
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    fx = fnp.asarray(x)
    assert_close(fx.reshape(4, 6), x.reshape(4, 6))
    assert_close(fx.reshape((6, -1)), x.reshape((6, -1)))
    assert_close(fx.reshape([24]), x.reshape([24]))
    assert_close(fx.reshape(24, order="F"), x.reshape(24, order="F"))
    assert_close(fx.transpose(), x.transpose())
    assert_close(fx.transpose(1, 0, 2), x.transpose(1, 0, 2))
    assert_close(fx.transpose((2, 0, 1)), x.transpose((2, 0, 1)))
    assert_close(fx.T, x.T)
    assert_close(fx.mT, np.swapaxes(x, -1, -2))
    assert_close(fx.flatten(), x.flatten())
    assert_close(fx[:1].squeeze(), x[:1].squeeze())
    assert_close(fx.swapaxes(0, 2), x.swapaxes(0, 2))
    assert_close(fx.repeat(2, axis=0), x.repeat(2, axis=0))
    c = fx.copy()
    assert_same(c, fx)
    assert c is not fx
    assert_close(fx.view(np.int32), x.view(np.int32))
    assert_close(fnp.asarray(x.astype(np.int32)).view(np.uint32), x.astype(np.int32).view(np.uint32))
    assert fx.view() is fx
    with pytest.raises(DTypeError, match="width"):
        fx.view(np.float64)
    prog = check_traced(lambda a: a.reshape(4, 6).T.copy().view(np.int32), fx)
    assert "copy" in str(prog) and "bitcast_convert_type" in str(prog)


# ----------------------------------------------------------------------------- errors


@pytest.mark.parametrize("call, exc, match", [
    (lambda x: fnp.reshape(x, (5, 5)), ShapeError, "cannot reshape"),
    (lambda x: fnp.reshape(x, (-1, -1)), ShapeError, "at most one -1"),
    (lambda x: fnp.reshape(x, (0, -1)), ShapeError, "inferred"),
    (lambda x: fnp.squeeze(x, 0), ShapeError, "size"),
    (lambda x: fnp.broadcast_to(x, (3, 4)), ShapeError, "cannot be broadcast"),
    (lambda x: fnp.concat([x, fnp.ones((2, 2))], axis=0), ShapeError, "differ"),
    (lambda x: fnp.concat([fnp.asarray(1.0), fnp.asarray(2.0)]), ShapeError, "0-d"),
    (lambda x: fnp.concat([]), ShapeError, "at least one"),
    (lambda x: fnp.stack([x, x.T]), ShapeError, "one shape"),
    (lambda x: fnp.split(x, 4, axis=1), ShapeError, "equal"),
    (lambda x: fnp.split(x, 0), ValueError, "> 0"),
    (lambda x: fnp.permute_dims(x, (0, 0)), ShapeError, "permutation"),
    (lambda x: fnp.expand_dims(x, (0, 0)), ShapeError, "repeated"),
    (lambda x: fnp.expand_dims(x, 3), ShapeError, "out of bounds"),
    (lambda x: fnp.moveaxis(x, (0, 1), (0,)), ShapeError, "equal lengths"),
    (lambda x: fnp.pad(x, 1, mode="median"), ValueError, "not supported"),
    (lambda x: fnp.pad(x, -1), ValueError, "non-negative"),
    (lambda x: fnp.pad(x, ((1, 2, 3),)), ShapeError, "broadcast"),
    (lambda x: fnp.pad(fnp.ones((0, 3)), 1, mode="edge"), ValueError, "empty axis"),
    (lambda x: fnp.matrix_transpose(fnp.ones(3)), ShapeError, "rank >= 2"),
    (lambda x: fnp.rot90(x, axes=(1, 1)), ShapeError, "different"),
    (lambda x: fnp.vsplit(fnp.ones(4), 2), ShapeError, "rank >= 2"),
    (lambda x: fnp.tile(x, (-1,)), ValueError, "non-negative"),
    (lambda x: fnp.unstack(fnp.asarray(1.0)), ShapeError, "rank"),
])
def test_errors(call, exc, match):
    x = fnp.ones((2, 3))
    with pytest.raises(exc, match=match):
        call(x)


def test_traced_shape_arguments_raise():
    x = fnp.ones((2, 3))
    with pytest.raises(ConcretizationError, match="static"):
        fa.jit(lambda a, n: fnp.reshape(a, (n, 3)))(x, 2)
    with pytest.raises(ConcretizationError, match="static"):
        fa.jit(lambda a, n: fnp.tile(a, n))(x, 2)
    # static arguments are fine
    got = fa.jit(lambda a, n: fnp.reshape(a, (n, -1)), static_argnums=1)(x, 3)
    assert got.shape == (3, 2)
