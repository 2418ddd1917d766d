"""fnarray.numpy reductions against NumPy in float64, eagerly and under jit.

Every case of the table runs on float32, float64 and int32 inputs over a table of shapes and
axes (0-d, empty, negative and tuple axes, keepdims): the eager result is compared with NumPy
computed wide (float64) and cast to the dtype JAX's rules give; the jitted result must equal
the eager one exactly; the traced program must pass the verifier. Result dtypes of small
dtypes are checked against ``jax.numpy`` itself.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import pytest
from helpers import assert_close, assert_same, check_traced, eager_and_jit, index_dtype, random_array, reference

import fnarray as fa
import fnarray.numpy as fnp
from fnarray.core.errors import DTypeError, ShapeError

DTYPES = [np.float32, np.float64, np.int32]


# ----------------------------------------------------------------------------- dtype rules (as jax.numpy)


def sum_dtype(d):
    """bool and integers narrower than 32 bits accumulate in 32 bits; others are kept."""
    d = np.dtype(d)
    if d == np.bool_ or (d.kind == "i" and d.itemsize < 4):
        return np.dtype(np.int32)
    if d.kind == "u" and d.itemsize < 4:
        return np.dtype(np.uint32)
    return d


def float_of(d):
    d = np.dtype(d)
    return d if d.kind in "fc" else np.dtype(np.float32)


def real_float_of(d):
    d = float_of(d)
    return {np.dtype(np.complex64): np.dtype(np.float32), np.dtype(np.complex128): np.dtype(np.float64)}.get(d, d)


def same_dtype(d):
    return np.dtype(d)


def int32_dtype(d):
    return index_dtype()   # int32; int64 with x64 on


def bool_dtype(d):
    return np.dtype(np.bool_)


# ----------------------------------------------------------------------------- the table


class Case(NamedTuple):
    name: str
    fa_fn: Callable          # (x, axis, keepdims) -> Array
    np_fn: Callable          # (x, axis, keepdims) -> ndarray, on wide values
    out_dtype: Callable      # input dtype -> result dtype
    empty_ok: bool = True    # defined on empty reductions
    int_axis: bool = False   # axis is an int or None only
    nan: bool = False        # inject NaNs into float inputs
    rounded: bool = False    # round float inputs (so that zeros occur)
    rtol: float | None = None


def _q():
    return np.array([0.0, 0.3, 0.5, 1.0])


CASES = [
    Case("sum", lambda x, a, k: fnp.sum(x, axis=a, keepdims=k), lambda x, a, k: np.sum(x, axis=a, keepdims=k),
         sum_dtype),
    Case("sum_nan", lambda x, a, k: fnp.sum(x, axis=a, keepdims=k), lambda x, a, k: np.sum(x, axis=a, keepdims=k),
         sum_dtype, nan=True),
    Case("prod", lambda x, a, k: fnp.prod(x, axis=a, keepdims=k), lambda x, a, k: np.prod(x, axis=a, keepdims=k),
         sum_dtype, rtol=1e-4),
    Case("mean", lambda x, a, k: fnp.mean(x, axis=a, keepdims=k), lambda x, a, k: np.mean(x, axis=a, keepdims=k),
         float_of),
    Case("var", lambda x, a, k: fnp.var(x, axis=a, keepdims=k), lambda x, a, k: np.var(x, axis=a, keepdims=k),
         real_float_of, rtol=1e-4),
    Case("var_correction", lambda x, a, k: fnp.var(x, axis=a, keepdims=k, correction=1),
         lambda x, a, k: np.var(x, axis=a, keepdims=k, ddof=1), real_float_of, rtol=1e-4),
    Case("std_ddof", lambda x, a, k: fnp.std(x, axis=a, keepdims=k, ddof=1),
         lambda x, a, k: np.std(x, axis=a, keepdims=k, ddof=1), real_float_of, rtol=1e-4),
    Case("max", lambda x, a, k: fnp.max(x, axis=a, keepdims=k), lambda x, a, k: np.max(x, axis=a, keepdims=k),
         same_dtype, empty_ok=False),
    Case("min_nan", lambda x, a, k: fnp.min(x, axis=a, keepdims=k), lambda x, a, k: np.min(x, axis=a, keepdims=k),
         same_dtype, empty_ok=False, nan=True),
    Case("amax_initial", lambda x, a, k: fnp.amax(x, axis=a, keepdims=k, initial=1),
         lambda x, a, k: np.amax(x, axis=a, keepdims=k, initial=1), same_dtype),
    Case("argmax", lambda x, a, k: fnp.argmax(x, axis=a, keepdims=k),
         lambda x, a, k: np.argmax(x, axis=a, keepdims=k), int32_dtype, empty_ok=False, int_axis=True),
    Case("argmin_nan", lambda x, a, k: fnp.argmin(x, axis=a, keepdims=k),
         lambda x, a, k: np.argmin(x, axis=a, keepdims=k), int32_dtype, empty_ok=False, int_axis=True, nan=True),
    Case("all", lambda x, a, k: fnp.all(x, axis=a, keepdims=k), lambda x, a, k: np.all(x, axis=a, keepdims=k),
         bool_dtype, rounded=True),
    Case("any", lambda x, a, k: fnp.any(x, axis=a, keepdims=k), lambda x, a, k: np.any(x, axis=a, keepdims=k),
         bool_dtype, rounded=True),
    Case("count_nonzero", lambda x, a, k: fnp.count_nonzero(x, axis=a, keepdims=k),
         lambda x, a, k: np.count_nonzero(x, axis=a, keepdims=k), int32_dtype, rounded=True),
    Case("ptp", lambda x, a, k: fnp.ptp(x, axis=a, keepdims=k), lambda x, a, k: np.ptp(x, axis=a, keepdims=k),
         same_dtype, empty_ok=False),
    Case("nansum", lambda x, a, k: fnp.nansum(x, axis=a, keepdims=k),
         lambda x, a, k: np.nansum(x, axis=a, keepdims=k), sum_dtype, nan=True),
    Case("nanmean", lambda x, a, k: fnp.nanmean(x, axis=a, keepdims=k),
         lambda x, a, k: np.nanmean(x, axis=a, keepdims=k), float_of, nan=True),
    Case("nanmax", lambda x, a, k: fnp.nanmax(x, axis=a, keepdims=k),
         lambda x, a, k: np.nanmax(x, axis=a, keepdims=k), same_dtype, empty_ok=False, nan=True),
    Case("nanmin", lambda x, a, k: fnp.nanmin(x, axis=a, keepdims=k),
         lambda x, a, k: np.nanmin(x, axis=a, keepdims=k), same_dtype, empty_ok=False, nan=True),
    Case("median", lambda x, a, k: fnp.median(x, axis=a, keepdims=k),
         lambda x, a, k: np.median(x, axis=a, keepdims=k), float_of, empty_ok=False),
    Case("median_nan", lambda x, a, k: fnp.median(x, axis=a, keepdims=k),
         lambda x, a, k: np.median(x, axis=a, keepdims=k), float_of, empty_ok=False, nan=True),
    Case("quantile", lambda x, a, k: fnp.quantile(x, _q(), axis=a, keepdims=k),
         lambda x, a, k: np.quantile(x, _q(), axis=a, keepdims=k), float_of, empty_ok=False),
    Case("percentile", lambda x, a, k: fnp.percentile(x, 100 * _q(), axis=a, keepdims=k),
         lambda x, a, k: np.percentile(x, 100 * _q(), axis=a, keepdims=k), float_of, empty_ok=False, rtol=1e-4),
    Case("logsumexp", lambda x, a, k: fnp.logsumexp(x, axis=a, keepdims=k),
         lambda x, a, k: np.log(np.sum(np.exp(x), axis=a, keepdims=k)), float_of),
]

AXES = [
    ((2, 3, 4), None, False),
    ((2, 3, 4), 1, False),
    ((2, 3, 4), -1, True),
    ((2, 3, 4), (0, 2), False),
    ((2, 3, 4), (-1, -3), True),
    ((), None, False),
    ((5,), 0, True),
    ((0, 3), 1, False),   # empty result, non-empty reduction
    ((0, 3), 0, False),   # empty reduction
    ((4, 0), None, True),  # empty reduction over everything
]


def _wide_dtype(d):
    """Compute references in float64 (int64 for integers), whatever the result dtype."""
    return np.float64 if np.dtype(d).kind == "f" else np.int64


def _is_empty_reduction(shape, axis):
    if axis is None:
        return 0 in shape
    axes = axis if isinstance(axis, tuple) else (axis,)
    return any(shape[a] == 0 for a in axes)


def _inputs(case, dtype, shape, rng):
    x = random_array(rng, shape, dtype)
    if np.dtype(dtype).kind == "f":
        if case.rounded:
            x = np.round(x)
        if case.nan and x.size:
            x = x.copy()
            x.reshape(-1)[rng.random(x.size) < 0.3] = np.nan
    return x


def _params():
    """(case, shape, axis, keepdims) combinations where the case is defined."""
    out = []
    for case in CASES:
        for shape, axis, keepdims in AXES:
            if case.int_axis and isinstance(axis, tuple):
                continue   # axis must be an int or None
            if not case.empty_ok and _is_empty_reduction(shape, axis):
                continue   # raises: see test_empty_reductions_raise
            out.append(pytest.param(case, shape, axis, keepdims,
                                    id=f"{case.name}-{shape}-{axis}-{keepdims}".replace(" ", "")))
    return out


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("case,shape,axis,keepdims", _params())
def test_against_numpy(case, dtype, shape, axis, keepdims):
    rng = np.random.default_rng(zlib.crc32(f"{case.name}{shape}{axis}".encode()))
    x = _inputs(case, dtype, shape, rng)

    def f(v):
        return case.fa_fn(v, axis, keepdims)
    eager, jitted = eager_and_jit(f, fnp.asarray(x))
    want = case.out_dtype(dtype)
    expected = reference(lambda v: case.np_fn(v, axis, keepdims), x, dtype=want, compute_in=_wide_dtype(dtype))
    assert_close(eager, expected, want, rtol=case.rtol, msg=case.name)
    assert_same(eager, jitted, case.name)


# ----------------------------------------------------------------------------- dtypes against JAX


SMALL_DTYPES = ["bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "float16", "float32", "complex64"]


@pytest.mark.parametrize("dtype", SMALL_DTYPES)
def test_result_dtypes_match_jax(dtype):
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    x = random_array(np.random.default_rng(0), (3, 4), dtype, low=0, high=3)
    spec = jax.ShapeDtypeStruct(x.shape, x.dtype)
    names = ["sum", "prod", "mean", "var", "std", "count_nonzero", "cumsum", "cumprod", "nansum", "average"]
    if dtype != "complex64":
        names += ["max", "min", "argmax", "argmin", "median", "nanmax", "nanmin", "all", "any"]
    for name in names:
        got = getattr(fnp, name)(fnp.asarray(x))
        want = jax.eval_shape(getattr(jnp, name), spec)
        assert got.dtype == want.dtype, f"{name}({dtype}): {got.dtype}, jax.numpy gives {want.dtype}"
    for name in ["cumulative_sum", "cumulative_prod"]:
        got = getattr(fnp, name)(fnp.asarray(x), axis=1)
        want = jax.eval_shape(lambda v, n=name: getattr(jnp, n)(v, axis=1), spec)
        assert got.dtype == want.dtype, f"{name}({dtype}): {got.dtype}, jax.numpy gives {want.dtype}"


def test_complex_reductions():
    rng = np.random.default_rng(3)
    z = random_array(rng, (3, 4), np.complex64)
    for name in ["sum", "prod", "mean"]:
        eager, jitted = eager_and_jit(lambda v, n=name: getattr(fnp, n)(v, axis=1), fnp.asarray(z))
        assert_close(eager, reference(lambda v, n=name: getattr(np, n)(v, axis=1), z, dtype=np.complex64),
                     rtol=1e-4, msg=name)
        assert_same(eager, jitted, name)
    v = fnp.var(fnp.asarray(z), axis=0)
    assert_close(v, reference(lambda t: np.var(t, axis=0), z, dtype=np.float32), rtol=1e-4)
    for name in ["max", "min", "argmax", "argmin", "ptp", "median"]:
        with pytest.raises(DTypeError):
            getattr(fnp, name)(fnp.asarray(z))


# ----------------------------------------------------------------------------- pinned edge cases


def test_nan_semantics():
    x = np.array([[1.0, np.nan, 3.0, np.nan], [2.0, 0.5, -1.0, 4.0]], np.float32)
    a = fnp.asarray(x)
    assert_close(fnp.max(a, axis=1), np.array([np.nan, 4.0], np.float32))
    assert_close(fnp.min(a, axis=1), np.array([np.nan, -1.0], np.float32))
    assert_close(fnp.argmax(a, axis=1), np.array([1, 3], np.int32))   # first NaN wins
    assert_close(fnp.argmin(a, axis=1), np.array([1, 2], np.int32))
    assert_close(fnp.argmax(a), np.array(1, np.int32))
    assert_close(fnp.nanmax(a, axis=1), np.array([3.0, 4.0], np.float32))
    assert_close(fnp.nanmax(fnp.asarray(np.full((2, 2), np.nan, np.float32)), axis=0),
                 np.array([np.nan, np.nan], np.float32))
    assert_close(fnp.median(a, axis=1), np.array([np.nan, 1.25], np.float32))


def test_empty_reductions_raise():
    e = fnp.asarray(np.zeros((0, 3), np.float32))
    for fn in (fnp.max, fnp.min, fnp.amax, fnp.nanmax, fnp.ptp):
        with pytest.raises(ValueError, match="empty"):
            fn(e, axis=0)
    for fn in (fnp.argmax, fnp.argmin):
        with pytest.raises(ValueError, match="empty"):
            fn(e, axis=0)
        with pytest.raises(ValueError, match="empty"):
            fn(e)
    assert_close(fnp.max(e, axis=0, initial=-2.0), np.full(3, -2.0, np.float32))
    assert_close(fnp.sum(e, axis=0), np.zeros(3, np.float32))
    assert_close(fnp.prod(e, axis=0), np.ones(3, np.float32))
    assert_close(fnp.all(e), np.array(True))
    assert_close(fnp.any(e), np.array(False))
    assert_close(fnp.logsumexp(e, axis=0), np.full(3, -np.inf, np.float32))


def test_keepdims_argmax_and_0d():
    x = random_array(np.random.default_rng(4), (2, 3, 4), np.float32)
    assert_close(fnp.argmax(fnp.asarray(x), axis=-2, keepdims=True),
                 np.argmax(x, axis=-2, keepdims=True).astype(np.int32))
    assert_close(fnp.argmin(fnp.asarray(x), keepdims=True), np.argmin(x, keepdims=True).astype(np.int32))
    s = fnp.asarray(np.float32(2.5))
    assert_close(fnp.argmax(s), np.array(0, np.int32))
    assert_close(fnp.sum(s), np.array(2.5, np.float32))
    with pytest.raises(ShapeError):
        fnp.sum(s, axis=0)
    m = fnp.ones((2, 3))
    for axis in ((0, 0), (1, -1), [0, -2]):  # as NumPy and jax.numpy refuse, with what to do
        with pytest.raises(ShapeError, match="more than once.*give each axis once"):
            fnp.sum(m, axis=axis)


def test_where_and_initial():
    rng = np.random.default_rng(5)
    x = random_array(rng, (3, 4), np.float32)
    w = rng.random((1, 4)) < 0.5
    w[0, 0] = True
    xa, wa = fnp.asarray(x), fnp.asarray(w)
    for name, kw in [("sum", {}), ("prod", {}), ("mean", {}), ("var", {}), ("max", {"initial": -10.0}),
                     ("min", {"initial": 10.0}), ("all", {}), ("any", {})]:
        def f(a, m, n=name, k=kw):
            return getattr(fnp, n)(a, axis=1, where=m, **k)
        eager, jitted = eager_and_jit(f, xa, wa)
        want = getattr(np, name)(x.astype(np.float64), axis=1, where=w, **kw)
        assert_close(eager, np.asarray(want).astype(eager.dtype), rtol=1e-5, msg=name)
        assert_same(eager, jitted, name)
    with pytest.raises(ValueError, match="initial"):
        fnp.max(xa, where=wa)
    assert_close(fnp.sum(xa, initial=2.0), np.asarray(np.sum(x.astype(np.float64)) + 2).astype(np.float32))


def test_bool_and_small_int_sums():
    b = np.array([[True, False, True], [True, True, True]])
    assert_close(fnp.sum(fnp.asarray(b), axis=1), np.array([2, 3], np.int32))
    assert_close(fnp.sum(fnp.asarray(b), axis=1, dtype=bool), np.array([True, True]))
    i8 = np.full((100,), 100, np.int8)
    assert_close(fnp.sum(fnp.asarray(i8)), np.array(10000, np.int32))   # no int8 overflow
    assert_close(fnp.sum(fnp.asarray(i8), promote_integers=False), np.array(10000, np.int32).astype(np.int8))
    assert_close(fnp.prod(fnp.asarray(b), axis=0), np.array([1, 0, 1], np.int32))


def test_mean_of_half_precision_accumulates_in_float32():
    x = np.full((4096,), 0.1, np.float16)
    out = fnp.mean(fnp.asarray(x))
    assert out.dtype == np.float16
    assert abs(float(out) - 0.1) < 1e-3


# ----------------------------------------------------------------------------- cumulative


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_cumulative(dtype):
    rng = np.random.default_rng(6)
    x = random_array(rng, (3, 4), dtype, low=-2, high=2)
    xa = fnp.asarray(x)
    rt = 1e-4
    cases = [
        ("cumsum", lambda a: fnp.cumsum(a), lambda v: np.cumsum(v)),
        ("cumsum_axis", lambda a: fnp.cumsum(a, axis=-2), lambda v: np.cumsum(v, axis=-2)),
        ("cumprod", lambda a: fnp.cumprod(a, axis=1), lambda v: np.cumprod(v, axis=1)),
        ("cumulative_sum", lambda a: fnp.cumulative_sum(a, axis=1), lambda v: np.cumulative_sum(v, axis=1)),
        ("cumulative_sum_initial", lambda a: fnp.cumulative_sum(a, axis=0, include_initial=True),
         lambda v: np.cumulative_sum(v, axis=0, include_initial=True)),
        ("cumulative_prod_initial", lambda a: fnp.cumulative_prod(a, axis=-1, include_initial=True),
         lambda v: np.cumulative_prod(v, axis=-1, include_initial=True)),
    ]
    for name, f, g in cases:
        eager, jitted = eager_and_jit(f, xa)
        assert_close(eager, reference(g, x, dtype=dtype), rtol=rt, msg=name)
        assert_same(eager, jitted, name)
    one = fnp.asarray(x[0])
    assert_close(fnp.cumulative_sum(one), reference(np.cumulative_sum, x[0], dtype=dtype), rtol=rt)
    empty = fnp.asarray(np.zeros((0, 2), dtype))
    assert_close(fnp.cumulative_sum(empty, axis=0, include_initial=True), np.zeros((1, 2), dtype))
    assert fnp.cumsum(fnp.asarray(np.asarray(3, dtype))).shape == (1,)
    with pytest.raises(ShapeError):
        fnp.cumulative_sum(xa)          # axis required for N-d
    with pytest.raises(ShapeError):
        fnp.cumulative_sum(fnp.asarray(np.asarray(3, dtype)))
    bools = fnp.asarray(np.array([True, True, False]))
    assert_close(fnp.cumsum(bools), np.array([1, 2, 2], index_dtype()))


# ----------------------------------------------------------------------------- diff, average, quantile methods


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_diff(dtype):
    rng = np.random.default_rng(7)
    x = random_array(rng, (3, 5), dtype)
    xa = fnp.asarray(x)
    p = random_array(rng, (3, 1), dtype)
    cases = [
        (lambda a: fnp.diff(a), lambda v: np.diff(v)),
        (lambda a: fnp.diff(a, n=2, axis=0), lambda v: np.diff(v, n=2, axis=0)),
        (lambda a: fnp.diff(a, n=0), lambda v: np.diff(v, n=0)),
        (lambda a: fnp.diff(a, n=7), lambda v: np.diff(v, n=7)),
        (lambda a: fnp.diff(a, prepend=1, append=fnp.asarray(p)), lambda v: np.diff(v, prepend=1, append=p)),
    ]
    for f, g in cases:
        eager, jitted = eager_and_jit(f, xa)
        assert_close(eager, reference(g, x, dtype=dtype))
        assert_same(eager, jitted)
    b = np.array([True, False, False, True])
    assert_close(fnp.diff(fnp.asarray(b)), np.diff(b))
    with pytest.raises(ShapeError):
        fnp.diff(fnp.asarray(np.float32(1)))
    with pytest.raises(ValueError):
        fnp.diff(xa, n=-1)
    with pytest.raises(ShapeError):
        fnp.diff(xa, append=fnp.asarray(np.zeros((2, 1), dtype)))


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_average(dtype):
    rng = np.random.default_rng(8)
    x = random_array(rng, (3, 4), dtype)
    w = random_array(rng, (3, 4), dtype, low=0.5, high=2)
    w1 = random_array(rng, (4,), dtype, low=0.5, high=2)
    xa, wa, w1a = fnp.asarray(x), fnp.asarray(w), fnp.asarray(w1)
    want = float_of(dtype)
    eager, jitted = eager_and_jit(lambda a, b: fnp.average(a, axis=0, weights=b), xa, wa)
    assert_close(eager, reference(lambda v, u: np.average(v, axis=0, weights=u), x, w, dtype=want))
    assert_same(eager, jitted)
    avg, wsum = fnp.average(xa, axis=1, weights=w1a, returned=True, keepdims=True)
    ravg, rwsum = np.average(x.astype(np.float64), axis=1, weights=w1.astype(np.float64), returned=True,
                             keepdims=True)
    assert_close(avg, ravg.astype(want))
    assert_close(wsum, rwsum.astype(want))
    assert_close(fnp.average(xa), reference(np.average, x, dtype=want))
    with pytest.raises(ShapeError):
        fnp.average(xa, weights=w1a)


@pytest.mark.parametrize("method", ["linear", "lower", "higher", "nearest", "midpoint"])
@pytest.mark.enable_x64
def test_quantile_methods(method):
    rng = np.random.default_rng(9)
    x = random_array(rng, (4, 7), np.float64)
    q = np.array([0.0, 0.1, 0.25, 0.5, 0.8, 1.0])
    eager, jitted = eager_and_jit(lambda a, b: fnp.quantile(a, b, axis=1, method=method), fnp.asarray(x),
                                  fnp.asarray(q))
    assert_close(eager, np.quantile(x, q, axis=1, method=method))
    assert_same(eager, jitted)
    assert_close(fnp.quantile(fnp.asarray(x), 0.25, method=method), np.quantile(x, 0.25, method=method))
    with pytest.raises(ValueError):
        fnp.quantile(fnp.asarray(x), 1.5)
    with pytest.raises(ValueError):
        fnp.percentile(fnp.asarray(x), -1)


@pytest.mark.enable_x64
def test_quantile_infinities():
    # NumPy's interpolation gives NaN next to infinities; the definition (sorted values, linear
    # interpolation at q * (n - 1)) gives these.
    x = np.array([np.inf, 1.0, -np.inf, 2.0, np.inf])
    q = np.array([0.0, 0.5, 0.9, 1.0])
    assert_close(fnp.quantile(fnp.asarray(x), fnp.asarray(q)), np.array([-np.inf, 2.0, np.inf, np.inf]))
    assert_close(fnp.quantile(fnp.asarray(np.array([-np.inf, 1.0])), 0.3), np.array(-np.inf))
    assert_close(fnp.quantile(fnp.asarray(np.array([1.0, 3.0])), 0.25), np.array(1.5))


# ----------------------------------------------------------------------------- logsumexp


def test_logsumexp_stable_and_infinite():
    x = np.array([[1000.0, 1000.0, -5.0], [-np.inf, -np.inf, -np.inf], [np.inf, 1.0, 2.0]], np.float32)
    out = fnp.logsumexp(fnp.asarray(x), axis=1)
    x64 = x.astype(np.float64)
    m = np.max(x64, axis=1, keepdims=True)
    ms = np.where(np.isfinite(m), m, 0)
    with np.errstate(all="ignore"):
        want = (np.log(np.sum(np.exp(x64 - ms), axis=1)) + ms[:, 0]).astype(np.float32)
    assert np.isclose(want[0], 1000 + np.log(2))
    assert_close(out, want)
    b = np.array([0.5, 2.0, 1.0], np.float32)
    xs = random_array(np.random.default_rng(10), (2, 3), np.float32)
    eager, jitted = eager_and_jit(lambda a, w: fnp.logsumexp(a, axis=-1, keepdims=True, b=w), fnp.asarray(xs),
                                  fnp.asarray(b))
    assert_close(eager, reference(lambda v, w: np.log(np.sum(w * np.exp(v), axis=-1, keepdims=True)), xs, b,
                                  dtype=np.float32))
    assert_same(eager, jitted)
    assert_close(fnp.logsumexp(fnp.asarray(np.arange(3, dtype=np.int32))),
                 np.log(np.sum(np.exp(np.arange(3.0)))).astype(np.float32))


# ----------------------------------------------------------------------------- errors


def test_errors():
    x = fnp.asarray(np.ones((2, 3), np.float32))
    with pytest.raises(ShapeError):
        fnp.sum(x, axis=2)
    with pytest.raises(ShapeError):
        fnp.sum(x, axis=(0, -2))
    with pytest.raises(TypeError, match="out="):
        fnp.sum(x, out=x)
    with pytest.raises(TypeError):
        fnp.sum([1.0, 2.0])
    with pytest.raises(ValueError):
        fnp.var(x, ddof=1, correction=1)
    with pytest.raises(DTypeError):
        fnp.ptp(fnp.asarray(np.array([True, False])))
    with pytest.raises(ValueError, match="method"):
        fnp.quantile(x, 0.5, method="cubic")


def test_program_shapes():
    x = fnp.asarray(np.ones((2, 3), np.float32))
    prog = check_traced(lambda a: fnp.var(a, axis=0, keepdims=True), x)
    assert prog.out_avals[0].shape == (1, 3)
    prog = check_traced(lambda a: fnp.quantile(a, fnp.asarray(np.array([0.2, 0.7], np.float32)), axis=1), x)
    assert prog.out_avals[0].shape == (2, 2)
    fa.jit(lambda a: fnp.logsumexp(a, axis=(0, 1)))(x)


# ----------------------------------------------------------------------------- transforms


def _finite_difference_grad(f, x, h=1e-6):
    """Central differences of the scalar NumPy function ``f`` at ``x`` (float64)."""
    g = np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[idx] = h
        g[idx] = (f(x + e) - f(x - e)) / (2 * h)
    return g


@pytest.mark.parametrize("name", ["logsumexp", "var", "std", "mean", "max", "median", "prod", "cumsum"])
@pytest.mark.enable_x64
def test_grad_against_finite_differences(name):
    rng = np.random.default_rng(11)
    x = rng.uniform(-2, 2, (3, 4))
    fns = {
        "logsumexp": (lambda a: fnp.logsumexp(a * 50.0), lambda v: np.log(np.sum(np.exp(v * 50.0)))),
        "var": (lambda a: fnp.var(a, axis=0, ddof=1).sum(), lambda v: np.var(v, axis=0, ddof=1).sum()),
        "std": (lambda a: fnp.std(a, axis=1).sum(), lambda v: np.std(v, axis=1).sum()),
        "mean": (lambda a: fnp.mean(a * a), lambda v: np.mean(v * v)),
        "max": (lambda a: fnp.max(a, axis=1).sum(), lambda v: np.max(v, axis=1).sum()),
        "median": (lambda a: fnp.median(a, axis=1).sum(), lambda v: np.median(v, axis=1).sum()),
        "prod": (lambda a: fnp.prod(a, axis=0).sum(), lambda v: np.prod(v, axis=0).sum()),
        "cumsum": (lambda a: (fnp.cumsum(a, axis=1) ** 2).sum(), lambda v: (np.cumsum(v, axis=1) ** 2).sum()),
    }
    f, g = fns[name]
    got = fa.grad(f)(fnp.asarray(x))
    assert_close(got, _finite_difference_grad(g, x), rtol=1e-5, atol=1e-5, msg=name)


def test_logsumexp_grad_is_softmax_for_large_inputs():
    x = np.array([1000.0, 999.0, -1000.0], np.float32)
    got = fa.grad(lambda a: fnp.logsumexp(a))(fnp.asarray(x))
    e = np.exp(x.astype(np.float64) - 1000.0)
    assert_close(got, (e / e.sum()).astype(np.float32))


def test_vmap_against_loop():
    rng = np.random.default_rng(12)
    x = rng.uniform(-2, 2, (5, 3, 4))
    q = np.array([0.2, 0.9])
    fns = [lambda a: fnp.quantile(a, q, axis=0), lambda a: fnp.argmax(a, axis=1), lambda a: fnp.var(a, ddof=1),
           lambda a: fnp.logsumexp(a, axis=-1), lambda a: fnp.cumulative_sum(a, axis=0, include_initial=True)]
    for f in fns:
        batched = fa.vmap(f)(fnp.asarray(x))
        looped = np.stack([np.asarray(f(fnp.asarray(x[i]))) for i in range(x.shape[0])])
        assert_close(batched, looped)
