"""Indexing (``x[key]``, ``x.at[key]``, ``take``, ``take_along_axis``) against NumPy.

Each key of the table is applied to NumPy and to fnarray eagerly, under ``jit`` with the key
captured, and (when it holds integer arrays) under ``jit`` with those arrays traced. Updates
are compared with a NumPy copy-then-assign reference (``np.add.at`` and friends where
indices repeat). Out-of-bounds array indices are clamped by gathers and dropped by scatters;
the references compute that explicitly.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import assert_close, assert_same, check_traced, random_array

import fnarray as fa
import fnarray.numpy as fnp
from fnarray.core.errors import ConcretizationError, ShapeError

DTYPES = [np.float32, np.float64, np.int32]
S = slice
E = Ellipsis


def _mask(shape, seed):
    return np.random.default_rng(seed).random(shape) < 0.5


# (x shape, key) pairs; keys are exactly what a user would write.
KEYS = [
    ((4, 5, 6), 0),
    ((4, 5, 6), -1),
    ((4, 5, 6), (1, 2)),
    ((4, 5, 6), (-1, -2, -3)),
    ((4, 5, 6), S(None)),
    ((4, 5, 6), S(1, 3)),
    ((4, 5, 6), S(None, None, -1)),
    ((4, 5, 6), (S(4, 0, -2), S(None, None, -3))),
    ((4, 5, 6), (S(-2, None), S(10, -10, -1))),
    ((4, 5, 6), S(-100, 100, 3)),
    ((4, 5, 6), S(3, 1)),
    ((4, 5, 6), (1, S(None), -1)),
    ((4, 5, 6), None),
    ((4, 5, 6), (None, 0)),
    ((4, 5, 6), (0, None, S(1, None))),
    ((4, 5, 6), E),
    ((4, 5, 6), (E, 0)),
    ((4, 5, 6), (0, E, -1)),
    ((4, 5, 6), (None, E, None)),
    ((4, 5, 6), np.array([0, 2, -1])),
    ((4, 5, 6), np.array([[0, 1], [2, 3]])),
    ((4, 5, 6), [3, 0]),
    ((4, 5, 6), np.array([], np.int32)),
    ((4, 5, 6), ([0, 1], [1, 2])),
    ((4, 5, 6), (S(None), np.array([0, -1]))),
    ((4, 5, 6), (0, [1, 2])),
    ((4, 5, 6), ([1, 2], S(None), 0)),
    ((4, 5, 6), ([0, 1], S(None), [2, 3])),
    ((4, 5, 6), (S(None), [0, 1], [2, 3])),
    ((4, 5, 6), (S(1, 3), np.array([[0], [1]]), np.array([2, 0, 1]))),
    ((4, 5, 6), (E, [0, 1])),
    ((4, 5, 6), ([0, 1], None, [0, 1])),
    ((4, 5, 6), (S(None), [0], E, [0])),
    ((4, 5, 6), (S(None, None, -1), np.array([[4, 0]]), S(1, None, 2))),
    ((4, 5, 6), (None, 1, E, [0, 0])),
    ((4, 5, 6), _mask((4, 5), 0)),
    ((4, 5, 6), (S(None), _mask((5,), 1))),
    ((4, 5, 6), (_mask((4,), 2), S(None), [1])),
    ((4, 5, 6), (E, _mask((6,), 3))),
    ((4, 5, 6), True),
    ((4, 5, 6), False),
    ((4, 5, 6), (0, True)),
    ((4, 5, 6), (S(None), True)),
    ((), ()),
    ((), None),
    ((), E),
    ((), True),
    ((0, 3), (S(None), 1)),
    ((0, 3), []),
    ((0, 3), (S(None), [0, 2])),
    ((3,), -3),
]


def _key_id(k):
    return repr(k).replace("slice", "S").replace("array", "a").replace("Ellipsis", "E")[:60]


def _split_arrays(key):
    """The integer arrays of ``key`` (for tracing them) and a function rebuilding the key."""
    parts = list(key) if isinstance(key, tuple) else [key]
    where = [i for i, p in enumerate(parts)
             if isinstance(p, (np.ndarray, list)) and np.asarray(p).dtype.kind in "iu" and np.size(p)]
    arrays = [np.asarray(parts[i], np.int32) for i in where]

    def rebuild(arrs):
        out = list(parts)
        for i, a in zip(where, arrs, strict=True):
            out[i] = a
        return tuple(out) if isinstance(key, tuple) else out[0]
    return arrays, rebuild


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape, key", KEYS, ids=[_key_id(k) for _, k in KEYS])
def test_getitem_against_numpy(shape, key, dtype):
    x = random_array(np.random.default_rng(5), shape, dtype)
    expected = x[key]
    fx = fnp.asarray(x)
    got = fx[key]
    assert_close(got, expected, msg=f"x{shape}[{key!r}]")
    f = lambda a: a[key]
    check_traced(f, fx)
    assert_same(fa.jit(f)(fx), got, "jit, key captured")
    arrays, rebuild = _split_arrays(key)
    if arrays:
        g = lambda a, *arrs: a[rebuild(arrs)]
        targs = [fnp.asarray(a) for a in arrays]
        check_traced(g, fx, *targs)
        assert_same(fa.jit(g)(fx, *targs), got, "jit, index arrays traced")


def _getter(key):
    return lambda a: a[key]


def _masked_update(op, value):
    return lambda a: getattr(a.at[a > 0], op)(value)


def _bind_axis(fn, axis):
    return lambda a, i: fn(a, i, axis=axis)


def test_traced_scalar_indices():
    x = np.arange(4 * 5 * 3, dtype=np.float32).reshape(4, 5, 3)
    fx = fnp.asarray(x)

    def ref_index(i, n):
        return int(np.clip(i + n if i < 0 else i, 0, n - 1))

    for i in [0, 3, -1, -4, 7, -9]:
        for idt in [np.int32, np.int8, np.int64, np.uint32]:
            if i < 0 and np.dtype(idt).kind == "u":
                continue
            iv = fnp.asarray(np.asarray(i, idt))
            r = ref_index(i, 4)
            for f, ref in [(lambda a, k: a[k], x[r]),
                           (lambda a, k: a[k, 1:3], x[r, 1:3]),
                           (lambda a, k: a[:, -1, k], x[:, -1, ref_index(i, 3)]),
                           (lambda a, k: a[None, k, ::-2], x[None, r, ::-2])]:
                eager = f(fx, iv)
                assert_close(eager, ref, msg=f"i={i} {np.dtype(idt).name}")
                check_traced(f, fx, iv)
                assert_same(fa.jit(f)(fx, iv), eager)
    # two traced indices at once, and a traced index combined with an index array
    f = lambda a, i, j: a[i, :, j]
    out = fa.jit(f)(fx, fnp.asarray(np.int32(-1)), fnp.asarray(np.int32(2)))
    assert_close(out, x[-1, :, 2])
    g = lambda a, i: a[i, [0, 4], 1:]
    out = fa.jit(g)(fx, fnp.asarray(np.int32(2)))
    assert_close(out, x[2, [0, 4], 1:])


def test_out_of_bounds_array_indices_clamp_in_gathers():
    x = np.arange(20, dtype=np.float32).reshape(4, 5)
    fx = fnp.asarray(x)
    idx = np.array([1, 10, -10, -1, 4])
    clamped = np.clip(np.where(idx < 0, idx + 4, idx), 0, 3)
    for f in [lambda a: a[idx], fa.jit(lambda a: a[idx])]:
        assert_close(f(fx), x[clamped])
    traced = fa.jit(lambda a, i: a[:, i])(fx, fnp.asarray(idx.astype(np.int32)))
    assert_close(traced, x[:, np.clip(np.where(idx < 0, idx + 5, idx), 0, 4)])


def test_static_out_of_bounds_int_clamps():
    # As JAX: a static int index out of bounds is clamped when read (NumPy raises); only an empty axis raises.
    x = np.arange(20, dtype=np.float32).reshape(4, 5)
    fx = fnp.asarray(x)
    for key, clamped in [(4, 3), (-5, 0), ((0, 5), (0, 4)), ((0, -6), (0, 0)), ((E, 5), (E, 4)), (10**12, 3)]:
        assert_close(fx[key], x[clamped], msg=f"x[{key}]")
        assert_close(fa.jit(_getter(key))(fx), x[clamped], msg=f"jit x[{key}]")
    with pytest.raises(IndexError, match="out of bounds"):
        fnp.zeros((0, 3))[0]
    with pytest.raises(IndexError, match="too many indices"):
        fx[0, 0, 0]
    with pytest.raises(IndexError, match="single ellipsis"):
        fx[E, E]
    with pytest.raises(IndexError, match="valid indices"):
        fx[1.5]
    with pytest.raises(IndexError, match="valid indices"):
        fx[fnp.asarray(np.array([0.5]))]
    with pytest.raises(IndexError, match="boolean index"):
        fx[np.ones(3, bool)]
    with pytest.raises(IndexError, match="broadcast"):
        fx[[0, 1], [0, 1, 2]]


def test_bool_mask_under_jit_raises():
    fx = fnp.asarray(np.arange(6.0, dtype=np.float32))
    with pytest.raises(ConcretizationError, match="where"):
        fa.jit(lambda a: a[a > 2])(fx)
    with pytest.raises(ConcretizationError, match="size="):
        fa.jit(lambda a, m: a[m])(fx, fnp.asarray(np.ones(6, bool)))
    # a concrete mask captured by the jitted function is static, as in NumPy
    m = np.arange(6) % 2 == 0
    assert_close(fa.jit(lambda a: a[m])(fx), np.arange(6.0, dtype=np.float32)[m])


def test_traced_slice_bounds_raise():
    fx = fnp.ones((4,))
    with pytest.raises(ConcretizationError, match="dynamic_slice"):
        fa.jit(lambda a, i: a[i:])(fx, 1)


def test_setitem_stays_an_error():
    fx = fnp.ones((3,))
    with pytest.raises(TypeError, match="at"):
        fx[0] = 1.0


# ----------------------------------------------------------------------------- .at updates

AT_KEYS = [
    ((4, 5, 6), 0),
    ((4, 5, 6), -1),
    ((4, 5, 6), (1, 2)),
    ((4, 5, 6), (1, S(None), -2)),
    ((4, 5, 6), S(1, 3)),
    ((4, 5, 6), (S(None, None, -2), S(4, 0, -3))),
    ((4, 5, 6), (E, 1)),
    ((4, 5, 6), (None, 1)),
    ((4, 5, 6), (None, 1, E, [0, 3])),
    ((4, 5, 6), np.array([0, 2, -1])),
    ((4, 5, 6), ([0, 1], S(None), [2, 3])),
    ((4, 5, 6), (S(None), [0, 1], [2, 3])),
    ((4, 5, 6), (S(1, 3), np.array([[0], [1]]), np.array([2, 0, 1]))),
    ((4, 5, 6), _mask((4, 5), 6)),
    ((4, 5, 6), (S(None), _mask((5,), 7), 0)),
    ((4, 5, 6), True),
    ((4, 5, 6), False),
    ((4, 5, 6), E),
    ((4, 5, 6), S(None)),
    ((), ()),
    ((0, 3), (S(None), 1)),
]
REPEATED = [
    ((4, 5, 6), np.array([0, 2, 0, 0])),
    ((4, 5, 6), (S(None), [1, 1], [2, 2])),
    ((4, 5, 6), ([3, 3, 1], S(None, None, 2))),
]
UFUNC = {"add": np.add, "multiply": np.multiply, "min": np.minimum, "max": np.maximum}


def _values(rng, shape, dtype):
    return random_array(rng, shape, dtype, low=-2, high=2)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape, key", AT_KEYS, ids=[_key_id(k) for _, k in AT_KEYS])
def test_at_set_against_numpy(shape, key, dtype):
    rng = np.random.default_rng(8)
    x = random_array(rng, shape, dtype)
    v = _values(rng, x[key].shape, dtype)
    ref = x.copy()
    ref[key] = v
    fx, fv = fnp.asarray(x), fnp.asarray(v)
    got = fx.at[key].set(fv)
    assert_close(got, ref, msg=f"x{shape}.at[{key!r}].set")
    f = lambda a, b: a.at[key].set(b)
    check_traced(f, fx, fv)
    assert_same(fa.jit(f)(fx, fv), got)
    assert_same(fx.at[key].get(), fx[key])


@pytest.mark.parametrize("op", ["add", "multiply", "min", "max"])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape, key", AT_KEYS + REPEATED, ids=[_key_id(k) for _, k in AT_KEYS + REPEATED])
def test_at_accumulate_against_numpy(shape, key, dtype, op):
    rng = np.random.default_rng(9)
    x = random_array(rng, shape, dtype)
    v = _values(rng, x[key].shape, dtype)
    ref = x.copy()
    UFUNC[op].at(ref, key, v)
    fx, fv = fnp.asarray(x), fnp.asarray(v)
    got = getattr(fx.at[key], op)(fv)
    assert_close(got, ref, msg=f"x{shape}.at[{key!r}].{op}")
    f = lambda a, b: getattr(a.at[key], op)(b)
    check_traced(f, fx, fv)
    assert_same(fa.jit(f)(fx, fv), got)
    arrays, rebuild = _split_arrays(key)
    if arrays:
        g = lambda a, b, *arrs: getattr(a.at[rebuild(arrs)], op)(b)
        targs = [fnp.asarray(a) for a in arrays]
        check_traced(g, fx, fv, *targs)
        assert_same(fa.jit(g)(fx, fv, *targs), got, "index arrays traced")


def test_at_values_cast_and_broadcast():
    x = np.arange(24, dtype=np.int32).reshape(4, 6)
    fx = fnp.asarray(x)
    ref = x.copy()
    ref[1:3] = 2.7  # NumPy casts the value to the array's dtype
    assert_close(fx.at[1:3].set(2.7), ref)
    ref = x.copy()
    ref[0] = np.arange(6).reshape(1, 6)
    assert_close(fx.at[0].set(fnp.asarray(np.arange(6, dtype=np.int32).reshape(1, 6))), ref)
    ref = x.copy()
    ref[:, [0, 5]] += np.array([10, 20], np.int32)
    assert_close(fx.at[:, [0, 5]].add(fnp.asarray(np.array([10, 20], np.int32))), ref)
    ref = x.copy()
    ref[1] -= 3
    assert_close(fx.at[1].subtract(3), ref)
    with pytest.raises(ShapeError, match="cannot be broadcast"):
        fx.at[0].set(fnp.ones(4))
    f32 = fnp.asarray(x.astype(np.float32), dtype=np.float32)
    assert f32.at[0].set(1).dtype == np.float32
    weak = fnp.asarray(1.5)
    assert weak.at[()].set(2.0).weak_type


def test_at_out_of_bounds_updates_are_dropped():
    x = np.arange(20, dtype=np.float32).reshape(4, 5)
    fx = fnp.asarray(x)
    idx = np.array([1, 10, -10, -1])
    v = np.array([100, 200, 300, 400], np.float32)
    norm = np.where(idx < 0, idx + 4, idx)
    ok = (norm >= 0) & (norm < 4)
    ref = x.copy()
    ref[norm[ok]] = v[ok][:, None]
    for f in [lambda a, b: a.at[idx].set(b[:, None]), fa.jit(lambda a, b: a.at[idx].set(b[:, None]))]:
        assert_close(f(fx, fnp.asarray(v)), ref)
    norm5 = np.where(idx < 0, idx + 5, idx)
    ok5 = (norm5 >= 0) & (norm5 < 5)
    ref = x.copy()
    np.add.at(ref, (slice(None), norm5[ok5]), v[ok5])
    traced = fa.jit(lambda a, i, b: a.at[:, i].add(b))(fx, fnp.asarray(idx.astype(np.int32)), fnp.asarray(v))
    assert_close(traced, ref)
    # a traced out-of-bounds scalar index drops the update too
    for i in [7, -5]:
        out = fa.jit(lambda a, k: a.at[k].set(-1.0))(fx, fnp.asarray(np.int32(i)))
        assert_close(out, x)
    out = fa.jit(lambda a, k: a.at[k, 2].multiply(2.0))(fx, fnp.asarray(np.int32(-1)))
    ref = x.copy()
    ref[-1, 2] *= 2
    assert_close(out, ref)


def test_at_traced_mask():
    rng = np.random.default_rng(10)
    x = random_array(rng, (3, 4), np.float32)
    fx = fnp.asarray(x)
    for op, fn in [("set", lambda r, m: r.__setitem__(m, 0.5)), ("add", lambda r, m: np.add.at(r, m, 0.5)),
                   ("max", lambda r, m: np.maximum.at(r, m, 0.5))]:
        f = _masked_update(op, 0.5)
        ref = x.copy()
        fn(ref, x > 0)
        check_traced(f, fx)
        assert_close(fa.jit(f)(fx), ref, msg=op)
        assert_close(f(fx), ref, msg=op)
    # a row mask with a per-row value
    m = np.array([True, False, True])
    row = np.arange(4, dtype=np.float32)
    ref = x.copy()
    ref[m] = row
    f = lambda a, mm, r: a.at[mm].set(r)
    assert_close(fa.jit(f)(fx, fnp.asarray(m), fnp.asarray(row)), ref)
    # values that depend on the number of True entries need a concrete mask
    vals = np.arange(int(m.sum()) * 4, dtype=np.float32).reshape(-1, 4)
    ref = x.copy()
    ref[m] = vals
    assert_close(fx.at[m].set(fnp.asarray(vals)), ref)
    with pytest.raises(ConcretizationError, match="where"):
        fa.jit(f)(fx, fnp.asarray(m), fnp.asarray(vals))


def test_at_modes():
    fx = fnp.ones((3,))
    with pytest.raises(ValueError, match="mode"):
        fx.at[0].set(2.0, mode="wrap")
    with pytest.raises(ValueError, match="mode"):
        fx.at[0].get(mode="raise")
    assert_close(fx.at[0].add(1.0, mode="drop"), np.array([2, 1, 1], np.float32))


# ----------------------------------------------------------------------------- take


def _norm_clip(i, n):
    i = np.asarray(i)
    return np.clip(np.where(i < 0, i + n, i), 0, n - 1)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_take(dtype):
    rng = np.random.default_rng(11)
    x = random_array(rng, (3, 4, 5), dtype)
    fx = fnp.asarray(x)
    for idx, axis in [(np.array([0, 2, -1]), 1), (np.array([[1, 0], [4, 4]]), -1), (2, 0),
                      (np.array([7, 59, -3]), None), (np.array([], np.int32), 0)]:
        n = x.size if axis is None else x.shape[axis]
        ref = np.take(x, _norm_clip(idx, n), axis=axis)
        eager = fnp.take(fx, idx, axis=axis)
        assert_close(eager, ref, msg=f"take {idx} axis={axis}")
        f = _bind_axis(fnp.take, axis)
        ti = fnp.asarray(np.asarray(idx, np.int32))
        check_traced(f, fx, ti)
        assert_same(fa.jit(f)(fx, ti), eager)
    oob = np.array([5, -6, 1, -1, 40])
    assert_close(fnp.take(fx, oob, axis=1, mode="clip"), np.take(x, oob, axis=1, mode="clip"))
    assert_close(fnp.take(fx, oob, axis=1, mode="wrap"), np.take(x, oob, axis=1, mode="wrap"))
    traced_wrap = fa.jit(lambda a, i: fnp.take(a, i, axis=1, mode="wrap"))(fx, fnp.asarray(oob.astype(np.int32)))
    assert_close(traced_wrap, np.take(x, oob, axis=1, mode="wrap"))
    filled = fnp.take(fx, oob, axis=1, mode="fill", fill_value=-9)
    ref = np.take(x, _norm_clip(oob, 4), axis=1)
    bad = (np.where(oob < 0, oob + 4, oob) < 0) | (np.where(oob < 0, oob + 4, oob) >= 4)
    ref[:, bad] = -9
    assert_close(filled, ref)
    ref[:, bad] = np.nan if np.dtype(dtype).kind == "f" else np.iinfo(dtype).min  # the default mode, "fill"
    assert_close(fnp.take(fx, oob, axis=1), ref)
    with pytest.raises(NotImplementedError, match="raise"):
        fnp.take(fx, [0], mode="raise")
    with pytest.raises(IndexError, match="integers"):
        fnp.take(fx, [0.5])


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_take_along_axis(dtype):
    rng = np.random.default_rng(12)
    x = random_array(rng, (3, 4, 5), dtype)
    fx = fnp.asarray(x)
    cases = [(rng.integers(-4, 4, (3, 2, 5)), 1), (rng.integers(0, 5, (1, 4, 2)), -1),
             (rng.integers(-3, 3, (6, 1, 1)), 0), (np.argsort(x, axis=2), 2)]
    for idx, axis in cases:
        ref = np.take_along_axis(x, idx, axis=axis)
        eager = fnp.take_along_axis(fx, idx, axis)
        assert_close(eager, ref, msg=f"axis={axis}")
        f = _bind_axis(fnp.take_along_axis, axis)
        ti = fnp.asarray(idx.astype(np.int32))
        check_traced(f, fx, ti)
        assert_same(fa.jit(f)(fx, ti), eager)
    flat = np.array([0, 59, -1, 7])
    assert_close(fnp.take_along_axis(fx, flat, None), np.take_along_axis(x, flat, None))
    oob = np.full((3, 1, 5), 9)
    assert_close(fnp.take_along_axis(fx, oob, 1, mode="clip"), np.take_along_axis(x, np.full((3, 1, 5), 3), 1))
    fill = np.nan if np.dtype(dtype).kind == "f" else np.iinfo(dtype).min  # jax.numpy's default mode "fill"
    assert_close(fnp.take_along_axis(fx, oob, 1), np.full((3, 1, 5), fill, dtype))
    with pytest.raises(ShapeError, match="rank"):
        fnp.take_along_axis(fx, np.zeros((3, 4), int), 1)
