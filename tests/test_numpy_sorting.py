"""fnarray.numpy sorting, searching and set functions against NumPy (and JAX where NumPy has no
counterpart), eagerly and under jit.

Inputs are float32, float64 and int32 with repeated values and (for floats) NaNs, so that
stability and NaN placement are exercised. Functions with data-dependent output shapes must
raise ``ConcretizationError`` under ``jit`` unless given a static size.
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest
from helpers import assert_close, assert_same, eager_and_jit, index_dtype, random_array

import fnarray as fa
import fnarray.numpy as fnp
from fnarray.core.errors import ConcretizationError, DTypeError, ShapeError

DTYPES = [np.float32, np.float64, np.int32]
ids = {"ids": lambda d: np.dtype(d).name}


def _data(shape, dtype, seed, nan=True):
    """Random values with many repeats and, for floats, some NaNs."""
    rng = np.random.default_rng(seed)
    x = random_array(rng, shape, dtype)
    if np.dtype(dtype).kind == "f":
        x = np.round(x * 2) / 2
        if nan and x.size:
            x.reshape(-1)[rng.random(x.size) < 0.2] = np.nan
    return x


def _seed(*parts):
    return zlib.crc32(repr(parts).encode())


def _ref_argsort(x, axis, descending):
    """Stable argsort by NumPy; descending puts NaN first, then larger values, ties by index."""
    x = np.moveaxis(np.asarray(x), axis, -1)
    if descending:
        nan = np.isnan(x) if x.dtype.kind == "f" else np.zeros(x.shape, bool)
        neg = -np.where(nan, 0, x).astype(np.float64)
        out = np.empty(x.shape, np.int64)
        for idx in np.ndindex(x.shape[:-1]):
            out[idx] = np.lexsort((neg[idx], ~nan[idx]))
    else:
        out = np.argsort(x, axis=-1, kind="stable")
    return np.moveaxis(out, -1, axis).astype(index_dtype())


SORT_SHAPES = [((7,), -1), ((3, 5), -1), ((3, 5), 0), ((2, 3, 4), 1), ((3, 4), None), ((0, 3), 0), ((4, 0), -1),
               ((), None), ((1,), 0)]


@pytest.mark.parametrize("descending", [False, True])
@pytest.mark.parametrize("shape,axis", SORT_SHAPES, ids=[f"{s}-{a}".replace(" ", "") for s, a in SORT_SHAPES])
@pytest.mark.parametrize("dtype", DTYPES, **ids)
def test_sort_and_argsort(dtype, shape, axis, descending):
    x = _data(shape, dtype, _seed(shape, axis))
    xa = fnp.asarray(x)
    flat = x.reshape(-1) if axis is None else x
    ax = 0 if axis is None else axis
    eager, jitted = eager_and_jit(lambda a: fnp.argsort(a, axis=axis, descending=descending), xa)
    want_idx = _ref_argsort(flat, ax, descending)
    assert_close(eager, want_idx)
    assert_same(eager, jitted)
    eager, jitted = eager_and_jit(lambda a: fnp.sort(a, axis=axis, descending=descending), xa)
    want = np.take_along_axis(flat, want_idx.astype(np.int64), axis=ax) if flat.ndim else flat
    assert_close(eager, want)
    assert_same(eager, jitted)


def test_sort_matches_numpy_nan_last_and_signed_zero():
    x = np.array([3.0, np.nan, -0.0, 1.0, 0.0, -np.inf, np.nan, np.inf], np.float32)
    assert_close(fnp.sort(fnp.asarray(x)), np.sort(x))
    assert_close(fnp.argsort(fnp.asarray(x)), np.argsort(x, kind="stable").astype(np.int32))
    assert_close(fnp.sort(fnp.asarray(x), descending=True), np.sort(x)[::-1])


def test_sort_complex_lexicographic():
    x = np.array([1 + 2j, 1 - 1j, -3 + 0j, 1 - 1j, 0 + 5j], np.complex64)
    assert_close(fnp.sort(fnp.asarray(x)), np.sort(x))
    assert_close(fnp.argsort(fnp.asarray(x)), np.argsort(x, kind="stable").astype(np.int32))


def test_sort_errors_and_methods():
    with pytest.raises(ShapeError):
        fnp.sort(fnp.asarray(np.float32(1)))
    with pytest.raises(ShapeError):
        fnp.argsort(fnp.asarray(np.ones((2, 3))), axis=2)
    x = np.array([[3, 1, 2], [0, 5, 4]], np.int32)
    assert_close(fnp.asarray(x).sort(), np.sort(x))
    assert_close(fnp.asarray(x).argsort(axis=0), np.argsort(x, axis=0, kind="stable").astype(np.int32))


# ----------------------------------------------------------------------------- searchsorted


@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("n", [0, 1, 2, 7, 16])
@pytest.mark.parametrize("dtype", DTYPES, **ids)
def test_searchsorted(dtype, n, side):
    a = np.sort(_data((n,), dtype, _seed("a", n)))
    v = np.concatenate([_data((12,), dtype, _seed("v", n)), a[:3]])   # some values equal to a's
    v = np.resize(v, (3, 5))
    eager, jitted = eager_and_jit(lambda p, q: fnp.searchsorted(p, q, side=side), fnp.asarray(a), fnp.asarray(v))
    assert_close(eager, np.searchsorted(a, v, side=side).astype(np.int32))
    assert_same(eager, jitted)


def test_searchsorted_sorter_scalar_and_errors():
    rng = np.random.default_rng(3)
    a = _data((9,), np.float32, 4)
    sorter = np.argsort(a, kind="stable").astype(np.int32)
    v = rng.uniform(-3, 3, (4,)).astype(np.float32)
    eager, jitted = eager_and_jit(lambda p, q, s: fnp.searchsorted(p, q, side="right", sorter=s),
                                  fnp.asarray(a), fnp.asarray(v), fnp.asarray(sorter))
    assert_close(eager, np.searchsorted(a, v, side="right", sorter=sorter).astype(np.int32))
    assert_same(eager, jitted)
    s = np.sort(a)
    assert_close(fnp.searchsorted(fnp.asarray(s), 0.5), np.asarray(np.searchsorted(s, 0.5), np.int32))
    with pytest.raises(ShapeError):
        fnp.searchsorted(fnp.asarray(np.ones((2, 2))), 1.0)
    with pytest.raises(ValueError):
        fnp.searchsorted(fnp.asarray(s), 1.0, side="middle")


# ----------------------------------------------------------------------------- unique


UNIQUE_SHAPES = [(12,), (3, 4), (0,), ()]


@pytest.mark.parametrize("shape", UNIQUE_SHAPES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, **ids)
def test_array_api_unique(dtype, shape):
    x = _data(shape, dtype, _seed("u", shape))
    xa = fnp.asarray(x)
    vals, idx, inv, cnt = np.unique(x, return_index=True, return_inverse=True, return_counts=True, equal_nan=False)
    r = fnp.unique_all(xa)
    assert_close(r.values, vals)
    assert_close(r.indices, idx.astype(index_dtype()))
    assert_close(r.inverse_indices, inv.reshape(x.shape).astype(index_dtype()))
    assert_close(r.counts, cnt.astype(index_dtype()))
    assert_close(fnp.unique_values(xa), vals)
    c = fnp.unique_counts(xa)
    assert_close(c.values, vals)
    assert_close(c.counts, cnt.astype(index_dtype()))
    i = fnp.unique_inverse(xa)
    assert_close(i.values, vals)
    assert_close(i.inverse_indices, inv.reshape(x.shape).astype(index_dtype()))


def test_unique_nans_distinct_or_equal():
    x = np.array([np.nan, 1.0, np.nan, 1.0, 0.0], np.float32)
    assert_close(fnp.unique_values(fnp.asarray(x)), np.array([0.0, 1.0, np.nan, np.nan], np.float32))
    vals, idx, inv, cnt = fnp.unique(fnp.asarray(x), return_index=True, return_inverse=True, return_counts=True)
    rv, ri, rinv, rc = np.unique(x, return_index=True, return_inverse=True, return_counts=True)
    assert_close(vals, rv)
    assert_close(idx, ri.astype(index_dtype()))
    assert_close(inv, rinv.astype(index_dtype()))
    assert_close(cnt, rc.astype(index_dtype()))


@pytest.mark.parametrize("dtype", DTYPES, **ids)
def test_unique_with_size_under_jit(dtype):
    jnp = pytest.importorskip("jax.numpy")
    x = _data((3, 4), dtype, 5, nan=False)

    def f(a):
        return fnp.unique(a, return_index=True, return_inverse=True, return_counts=True, size=9, fill_value=-7)
    eager, jitted = eager_and_jit(f, fnp.asarray(x))
    want = jnp.unique(jnp.asarray(x), return_index=True, return_inverse=True, return_counts=True, size=9,
                      fill_value=-7)
    names = ["values", "indices", "inverse", "counts"]
    for name, got, ref, jit_got in zip(names, eager, want, jitted, strict=True):
        # (slots past the unique values: the smallest value's index and count 0, as JAX's since s26-apisweep)
        assert_close(got, np.asarray(ref).astype(got.dtype), msg=name)
        assert_same(got, jit_got, name)
    small = fnp.unique(fnp.asarray(x), size=2)
    assert_close(small, np.unique(x)[:2])
    default_fill = fnp.unique(fnp.asarray(np.array([2, 2, 5], np.int32)), size=4)
    assert_close(default_fill, np.array([2, 5, 2, 2], np.int32))


def test_data_dependent_functions_raise_under_jit():
    x = fnp.asarray(np.array([1, 0, 2, 2], np.int32))
    for fn in (fnp.unique_values, fnp.unique_counts, fnp.unique_inverse, fnp.unique_all, fnp.unique,
               fnp.nonzero, fnp.argwhere, fnp.flatnonzero, fnp.bincount):
        with pytest.raises(ConcretizationError, match="jit"):
            fa.jit(fn)(x)
    fa.jit(lambda a: fnp.bincount(a, length=4))(x)
    fa.jit(lambda a: fnp.nonzero(a, size=2))(x)


# ----------------------------------------------------------------------------- nonzero family


NZ_SHAPES = [(7,), (3, 4), (2, 0, 3), (2, 3, 2)]


@pytest.mark.parametrize("shape", NZ_SHAPES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES + [np.bool_], **ids)
def test_nonzero_family(dtype, shape):
    x = random_array(np.random.default_rng(_seed("nz", shape)), shape, dtype, low=-1, high=1)
    if np.dtype(dtype).kind == "f":
        x = np.round(x)
    xa = fnp.asarray(x)
    for got, want in zip(fnp.nonzero(xa), np.nonzero(x), strict=True):
        assert_close(got, want.astype(index_dtype()))
    assert_close(fnp.argwhere(xa), np.argwhere(x).astype(index_dtype()))
    assert_close(fnp.flatnonzero(xa), np.flatnonzero(x).astype(index_dtype()))
    assert_close(xa.nonzero()[0], np.nonzero(x)[0].astype(index_dtype()))


def test_nonzero_with_size_matches_jax():
    jnp = pytest.importorskip("jax.numpy")
    x = np.array([[0, 3, 0], [1, 0, 2]], np.int32)
    for size, fill in [(5, None), (2, None), (4, -1), (4, (8, 9))]:
        def f(a, s=size, fv=fill):
            return fnp.nonzero(a, size=s, fill_value=fv)
        eager, jitted = eager_and_jit(f, fnp.asarray(x))
        want = jnp.nonzero(jnp.asarray(x), size=size, fill_value=fill)
        for g, w, j in zip(eager, want, jitted, strict=True):
            assert_close(g, np.asarray(w).astype(np.int32))
            assert_same(g, j)
    eager, jitted = eager_and_jit(lambda a: fnp.argwhere(a, size=4, fill_value=-1), fnp.asarray(x))
    assert_close(eager, np.asarray(jnp.argwhere(jnp.asarray(x), size=4, fill_value=-1)).astype(np.int32))
    assert_close(fnp.flatnonzero(fnp.asarray(x), size=4), np.array([1, 3, 5, 0], np.int32))
    assert_close(fnp.argwhere(fnp.asarray(np.float32(2))), np.argwhere(np.float32(2)).astype(np.int32))
    with pytest.raises(ShapeError):
        fnp.nonzero(fnp.asarray(np.float32(2)))


# ----------------------------------------------------------------------------- lexsort, partition, top_k


@pytest.mark.parametrize("dtype", DTYPES, **ids)
def test_lexsort(dtype):
    rng = np.random.default_rng(6)
    k1 = random_array(rng, (3, 8), dtype, low=0, high=2)
    k2 = random_array(rng, (3, 8), dtype, low=0, high=2)
    k1, k2 = np.round(k1), np.round(k2)
    eager, jitted = eager_and_jit(lambda a, b: fnp.lexsort((a, b)), fnp.asarray(k1), fnp.asarray(k2))
    assert_close(eager, np.lexsort((k1, k2)).astype(index_dtype()))
    assert_same(eager, jitted)
    assert_close(fnp.lexsort((fnp.asarray(k1), fnp.asarray(k2)), axis=0),
                 np.lexsort((k1, k2), axis=0).astype(index_dtype()))
    stacked = fnp.asarray(np.stack([k1[0], k2[0]]))
    assert_close(fnp.lexsort(stacked), np.lexsort(np.stack([k1[0], k2[0]])).astype(index_dtype()))
    with pytest.raises(ShapeError):
        fnp.lexsort((fnp.asarray(k1), fnp.asarray(k2[0])))


@pytest.mark.parametrize("dtype", DTYPES, **ids)
def test_partition(dtype):
    x = _data((3, 9), dtype, 7, nan=False)
    xa = fnp.asarray(x)
    ref = np.sort(x, axis=-1)
    for kth in (0, 4, -1, (2, 6)):
        p = np.asarray(fnp.partition(xa, kth))
        ip = np.asarray(fnp.argpartition(xa, kth))
        assert ip.dtype == np.int32
        np.testing.assert_array_equal(np.take_along_axis(x, ip.astype(np.int64), -1), p)
        for k in np.atleast_1d(kth):
            np.testing.assert_array_equal(p[:, k], ref[:, k])
            assert np.all(p[:, :k % 9] <= p[:, [k]]) and np.all(p[:, k % 9:] >= p[:, [k]])
    with pytest.raises(ShapeError):
        fnp.partition(xa, 9)


@pytest.mark.parametrize("dtype", DTYPES, **ids)
def test_top_k_matches_jax(dtype):
    jax = pytest.importorskip("jax")
    x = _data((3, 8), dtype, 8)
    for k in (0, 3, 8):
        eager, jitted = eager_and_jit(lambda a, kk=k: fnp.top_k(a, kk), fnp.asarray(x))
        with jax.enable_x64(True):
            wv, wi = jax.lax.top_k(jax.numpy.asarray(x), k)
            wv, wi = np.asarray(wv), np.asarray(wi)
        assert_close(eager[0], wv.astype(dtype))
        assert_close(eager[1], wi.astype(np.int32))
        assert_same(eager[0], jitted[0])
        assert_same(eager[1], jitted[1])
    with pytest.raises(ShapeError):
        fnp.top_k(fnp.asarray(x), 9)


# ----------------------------------------------------------------------------- bincount


def test_bincount():
    rng = np.random.default_rng(9)
    x = rng.integers(0, 6, 20).astype(np.int32)
    w = rng.uniform(-1, 1, 20).astype(np.float32)
    xa, wa = fnp.asarray(x), fnp.asarray(w)
    assert_close(fnp.bincount(xa), np.bincount(x).astype(np.int32))
    assert_close(fnp.bincount(xa, minlength=10), np.bincount(x, minlength=10).astype(np.int32))
    assert_close(fnp.bincount(xa, weights=wa), np.bincount(x, weights=w).astype(np.float32), rtol=1e-5,
                 atol=1e-6)
    eager, jitted = eager_and_jit(lambda a, b: fnp.bincount(a, b, length=8), xa, wa)
    assert_close(eager, np.bincount(x, weights=w, minlength=8).astype(np.float32), rtol=1e-5, atol=1e-6)
    assert_same(eager, jitted)
    short = fnp.bincount(xa, length=3)
    assert_close(short, np.bincount(x)[:3].astype(np.int32))
    assert_close(fnp.bincount(fnp.asarray(np.zeros((0,), np.int32))), np.zeros((0,), np.int32))
    assert_close(fnp.bincount(fnp.asarray(np.array([True, False, True]))), np.array([1, 2], np.int32))
    with pytest.raises(ValueError, match="negative"):
        fnp.bincount(fnp.asarray(np.array([1, -1], np.int32)))
    with pytest.raises(DTypeError):
        fnp.bincount(fnp.asarray(np.array([1.0, 2.0], np.float32)))
    with pytest.raises(ShapeError):
        fnp.bincount(fnp.asarray(np.ones((2, 2), np.int32)))


# ----------------------------------------------------------------------------- transforms


def test_vmap_against_loop():
    x = _data((4, 6), np.float32, 10)
    s = np.sort(_data((7,), np.float32, 11))
    fns = [lambda a: fnp.argsort(a, descending=True), lambda a: fnp.sort(a),
           lambda a: fnp.searchsorted(fnp.asarray(s), a, side="right"), lambda a: fnp.top_k(a, 3)[1],
           lambda a: fnp.unique(a, size=6), lambda a: fnp.nonzero(a, size=6, fill_value=-1)[0]]
    for f in fns:
        batched = fa.vmap(f)(fnp.asarray(x))
        looped = np.stack([np.asarray(f(fnp.asarray(x[i]))) for i in range(x.shape[0])])
        assert_close(batched, looped)


@pytest.mark.enable_x64
def test_grad_through_sort():
    x = np.array([[3.0, -1.0, 2.0], [0.5, 4.0, -2.0]])
    w = np.array([1.0, 10.0, 100.0])
    g = fa.grad(lambda a: fnp.sum(fnp.sort(a) * fnp.asarray(w)))(fnp.asarray(x))
    ranks = np.argsort(np.argsort(x, axis=1), axis=1)
    assert_close(g, w[ranks])
