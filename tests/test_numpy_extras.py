"""NumPy / jax.numpy names outside the array API (``fnarray/numpy/_extras.py``), ``fa.ops`` segment
reductions, ``tree_util.Partial`` and NumPy's positional arguments of the creation functions,
against NumPy in float64 (and Python loops); every case on numpy:0, a parity selection jitted on
every device. Found missing while porting public JAX/MLX programs (tests/test_ports.py)."""

from __future__ import annotations

import numpy as np
import pytest

import fnarray as fa
import fnarray.numpy as fnp

R = np.random.RandomState(0)
X = R.randn(3, 4).astype(np.float32)
XN = X.copy()
XN[0, 1] = XN[2, 3] = np.nan
XN[1] = np.nan

# (name, fnarray call, NumPy float64 reference); the inputs are float32, the reference sees float64
CASES = [
    ("allclose", lambda m, x: m.allclose(x, x + 1e-9), lambda x: np.allclose(x, x + 1e-9)),
    ("array_equal", lambda m, x: m.array_equal(x, x), lambda x: np.array_equal(x, x)),
    ("array_equal_nan",
     lambda m, x: m.array_equal(x, x, equal_nan=True), lambda x: np.array_equal(x, x, equal_nan=True)),
    ("array_equiv", lambda m, x: m.array_equiv(x, x[:1]), lambda x: np.array_equiv(x, x[:1])),
    ("isin", lambda m, x: m.isin(x, x[0]), lambda x: np.isin(x, x[0])),
    ("nanvar", lambda m, x: m.nanvar(x, axis=1), lambda x: np.nanvar(x, axis=1)),
    ("nanstd_ddof",
     lambda m, x: m.nanstd(x, axis=0, ddof=1, keepdims=True), lambda x: np.nanstd(x, axis=0, ddof=1, keepdims=True)),
    ("nanstd_all", lambda m, x: m.nanstd(x), lambda x: np.nanstd(x)),
    ("nanargmax", lambda m, x: m.nanargmax(x[[0, 2]], axis=1), lambda x: np.nanargmax(x[[0, 2]], axis=1)),
    ("nanargmin", lambda m, x: m.nanargmin(x), lambda x: np.nanargmin(x)),
    ("nanprod", lambda m, x: m.nanprod(x, axis=1), lambda x: np.nanprod(x, axis=1)),
    ("nancumsum", lambda m, x: m.nancumsum(x, axis=1), lambda x: np.nancumsum(x, axis=1)),
    ("nancumprod", lambda m, x: m.nancumprod(x), lambda x: np.nancumprod(x)),
    ("rint", lambda m, x: m.rint(x * 3), lambda x: np.rint(x * 3)),
    ("fabs", lambda m, x: m.fabs(x), lambda x: np.fabs(x)),
    ("around", lambda m, x: m.around(x, 1), lambda x: np.around(x, 1)),
    ("modf", lambda m, x: m.modf(x * 3), lambda x: np.modf(x * 3)),
    ("divmod", lambda m, x: m.divmod(x * 3, 1.5), lambda x: np.divmod(x * 3, 1.5)),
    ("append", lambda m, x: m.append(x, x[:1], axis=0), lambda x: np.append(x, x[:1], axis=0)),
    ("append_flat", lambda m, x: m.append(x, x[0]), lambda x: np.append(x, x[0])),
    ("rollaxis", lambda m, x: m.rollaxis(m.reshape(x, (3, 2, 2)), 2), lambda x: np.rollaxis(x.reshape(3, 2, 2), 2)),
    ("trapezoid", lambda m, x: m.trapezoid(x, dx=0.5), lambda x: np.trapezoid(x, dx=0.5)),
    ("trapezoid_x",
     lambda m, x: m.trapezoid(x, m.cumsum(m.abs(x[0])), axis=1),
     lambda x: np.trapezoid(x, np.cumsum(np.abs(x[0])), axis=1)),
    ("vander", lambda m, x: m.vander(x[0], 3), lambda x: np.vander(x[0], 3)),
    ("vander_inc", lambda m, x: m.vander(x[1], increasing=True), lambda x: np.vander(x[1], increasing=True)),
    ("cov", lambda m, x: m.cov(x), lambda x: np.cov(x)),
    ("cov_rowvar", lambda m, x: m.cov(x, rowvar=False, bias=True), lambda x: np.cov(x, rowvar=False, bias=True)),
    ("cov_y", lambda m, x: m.cov(x[0], x[1]), lambda x: np.cov(x[0], x[1])),
    ("corrcoef", lambda m, x: m.corrcoef(x), lambda x: np.corrcoef(x)),
    ("digitize", lambda m, x: m.digitize(x, np.array([-1.0, 0.0, 0.5], np.float32)),
     lambda x: np.digitize(x, [-1.0, 0.0, 0.5])),
    ("digitize_right_dec", lambda m, x: m.digitize(x, np.array([0.5, 0.0, -1.0], np.float32), right=True),
     lambda x: np.digitize(x, [0.5, 0.0, -1.0], right=True)),
    ("isneginf", lambda m, x: m.isneginf(x / 0.0), lambda x: np.isneginf(x / 0.0)),
    ("isposinf", lambda m, x: m.isposinf(x / 0.0), lambda x: np.isposinf(x / 0.0)),
    ("polyval", lambda m, x: m.polyval(x[0], x), lambda x: np.polyval(x[0], x)),
    ("matvec", lambda m, x: m.matvec(x, x[0]), lambda x: x @ x[0]),
    ("vecmat", lambda m, x: m.vecmat(x[:, 0], x), lambda x: x[:, 0] @ x),
    ("tril_indices", lambda m, x: x[m.tril_indices(3, -1, 4)], lambda x: x[np.tril_indices(3, -1, 4)]),
    ("triu_indices_from", lambda m, x: x[m.triu_indices_from(x, 1)], lambda x: x[np.triu_indices_from(x, 1)]),
    ("diag_indices", lambda m, x: x[:3, :3][m.diag_indices(3)], lambda x: x[:3, :3][np.diag_indices(3)]),
    ("unravel_index", lambda m, x: m.unravel_index(m.asarray([0, 5, 11, -1]), (3, 4)),
     lambda x: np.unravel_index([0, 5, 11, 11], (3, 4))),
    ("ravel_multi_index", lambda m, x: m.ravel_multi_index((m.asarray([0, 2]), m.asarray([3, 1])), (3, 4)),
     lambda x: np.ravel_multi_index(([0, 2], [3, 1]), (3, 4))),
    ("ravel_multi_index_clip_F",
     lambda m, x: m.ravel_multi_index((m.asarray([5, 2]), m.asarray([3, -1])), (3, 4),
                                                                   mode="clip", order="F"),
     lambda x: np.ravel_multi_index(([5, 2], [3, -1]), (3, 4), mode="clip", order="F")),
    ("ix_", lambda m, x: x[m.ix_(m.asarray([0, 2]), m.asarray([1, 3]))], lambda x: x[np.ix_([0, 2], [1, 3])]),
    ("linspace_retstep",
     lambda m, x: m.linspace(0.0, 1.0, 5, retstep=True), lambda x: np.linspace(0.0, 1.0, 5, retstep=True)),
    ("linspace_axis", lambda m, x: m.linspace(m.asarray(x[0]), m.asarray(x[1]), 3, False, axis=1),
     lambda x: np.linspace(x[0], x[1], 3, False, axis=1)),
    ("geomspace", lambda m, x: m.geomspace(1.0, 100.0, 5), lambda x: np.geomspace(1.0, 100.0, 5)),
    ("geomspace_neg",
     lambda m, x: m.geomspace(-1.0, -8.0, 4, endpoint=False), lambda x: np.geomspace(-1.0, -8.0, 4, endpoint=False)),
]
NAN_CASES = {"nanvar", "nanstd_ddof", "nanstd_all", "nanargmax", "nanargmin", "nanprod", "nancumsum", "nancumprod",
             "array_equal_nan"}
PARITY = {"nanstd_ddof", "nanargmax", "cov", "corrcoef", "digitize", "polyval", "unravel_index", "isin", "trapezoid_x",
          "modf", "vecmat"}


def _flat(v):
    return list(v) if isinstance(v, (tuple, list)) else [v]


def _check(out, ref, name):
    out, ref = _flat(out), _flat(ref)
    assert len(out) == len(ref), name
    for o, r in zip(out, ref, strict=True):
        o, r = np.asarray(o), np.asarray(r)
        assert o.shape == r.shape, (name, o.shape, r.shape)
        np.testing.assert_allclose(o.astype(np.float64), r.astype(np.float64), rtol=2e-5, atol=2e-5,
                                   equal_nan=True, err_msg=name)


@pytest.mark.parametrize("name,fn,ref", CASES, ids=[c[0] for c in CASES])
def test_extras_against_numpy(name, fn, ref):
    x = XN if name in NAN_CASES else X
    with np.errstate(all="ignore"):
        expected = ref(x.astype(np.float64))
    _check(fn(fnp, fnp.asarray(x)), expected, name)


@pytest.mark.parametrize("name", sorted(PARITY))
def test_extras_jit_every_device(name, device):
    fn, ref = next((c[1], c[2]) for c in CASES if c[0] == name)
    x = XN if name in NAN_CASES else X
    with np.errstate(all="ignore"):
        expected = ref(x.astype(np.float64))
    out = fa.jit(lambda a: fn(fnp, a))(fa.device_put(fnp.asarray(x), device))
    _check(out, expected, name)


def test_extras_static_answers():
    x = fnp.asarray(X)
    assert fnp.ndim(x) == 2 and fnp.shape(x) == (3, 4) and fnp.size(x) == 12 and fnp.size(x, 1) == 4
    assert fnp.ndim([[1, 2]]) == 2 and fnp.isscalar(1.0) and fnp.isscalar(x[0, 0]) and not fnp.isscalar(x)
    assert fnp.iscomplexobj(fnp.asarray(1j)) and fnp.isrealobj(x)
    assert not bool(fnp.array_equal(x, x[:2])) and not bool(fnp.array_equiv(x, x[:2]))
    assert fnp.copy(x) is not None and np.array_equal(np.asarray(fnp.copy(x)), X)
    assert fnp.issubdtype(fnp.bfloat16, fnp.floating) and fnp.issubdtype(fnp.uint8, fnp.unsignedinteger)
    assert not fnp.issubdtype(fnp.int32, fnp.inexact) and fnp.bool_ == fnp.bool
    with pytest.raises(ValueError, match="out of bounds"):
        fnp.ravel_multi_index((fnp.asarray([3]), fnp.asarray([0])), (3, 4))
    with pytest.raises(TypeError, match="complex"):
        fnp.fabs(fnp.asarray(1j))
    with pytest.raises(ValueError, match="zero"):
        fnp.geomspace(0.0, 1.0, 3)


def test_grad_through_extras():
    # d/dx nanvar (NaNs ignored) against central differences in float64
    x0 = X[0].astype(np.float64)

    def f(v):
        return np.nanvar(np.where(np.arange(4) == 1, np.nan, v))

    g = np.asarray(fa.grad(lambda v: fnp.nanvar(fnp.where(fnp.arange(4) == 1, fnp.nan, v)))(fnp.asarray(x0)))
    eps = 1e-6
    fd = np.array([(f(x0 + eps * e) - f(x0 - eps * e)) / (2 * eps) for e in np.eye(4)])
    np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-8)


def test_creation_positional_dtype():
    # NumPy's and jax.numpy's positional dtype (the array API makes it keyword-only)
    assert fnp.zeros(3, fnp.int32).dtype == fnp.int32 and fnp.ones((2, 2), fnp.int8).dtype == fnp.int8
    assert fnp.empty(2, fnp.float16).dtype == fnp.float16 and fnp.full(2, 3, fnp.float32).dtype == fnp.float32
    x = fnp.asarray(X)
    assert fnp.zeros_like(x, fnp.int32).dtype == fnp.int32 and fnp.full_like(x, 1, fnp.int8).dtype == fnp.int8
    np.testing.assert_array_equal(np.asarray(fnp.arange(1, 8, 3, fnp.float32)), np.arange(1, 8, 3, np.float32))
    np.testing.assert_array_equal(np.asarray(fnp.eye(3, 4, 1, fnp.int32)), np.eye(3, 4, 1, np.int32))
    np.testing.assert_array_equal(np.asarray(fnp.tril(x, -1)), np.tril(X, -1))
    np.testing.assert_array_equal(np.asarray(fnp.triu(x, 1)), np.triu(X, 1))
    np.testing.assert_allclose(np.asarray(fnp.linspace(0, 1)), np.linspace(0, 1), rtol=1e-6)


def _segment_ref(op, data, ids, n):
    ident = {"sum": 0.0, "prod": 1.0, "max": -np.inf, "min": np.inf}[op]
    out = np.full((n,) + data.shape[1:], ident)
    fn = {"sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum}[op]
    for i, s in enumerate(ids):
        if 0 <= s < n:
            out[s] = fn(out[s], data[i])
    return out


@pytest.mark.parametrize("op", ["sum", "prod", "max", "min"])
def test_segment_ops_against_loop(op):
    data = R.randn(9, 2).astype(np.float32)
    ids = np.array([0, 2, 2, -1, 4, 0, 7, 2, 1], np.int32)  # -1 and 7 are out of range: dropped
    fn = getattr(fa.ops, f"segment_{op}")
    np.testing.assert_allclose(np.asarray(fn(data, ids, num_segments=5)),
                               _segment_ref(op, data.astype(np.float64), ids, 5), rtol=1e-5)
    np.testing.assert_allclose(np.asarray(fn(data[ids >= 0], ids[ids >= 0])),  # num_segments counted from concrete ids
                               _segment_ref(op, data[ids >= 0].astype(np.float64), ids[ids >= 0], 8), rtol=1e-5)


def test_segment_sum_every_device_and_grad(device):
    data = R.randn(6, 3).astype(np.float32)
    ids = np.array([1, 0, 1, 3, 3, 3], np.int32)
    f = fa.jit(lambda d, i: fa.ops.segment_sum(d, i, num_segments=4) * 2 + fa.ops.segment_max(d, i, num_segments=4))
    out = f(fa.device_put(fnp.asarray(data), device), fa.device_put(fnp.asarray(ids), device))
    d64 = data.astype(np.float64)
    np.testing.assert_allclose(np.asarray(out), _segment_ref("sum", d64, ids, 4) * 2 + _segment_ref("max", d64, ids, 4),
                               rtol=1e-5)
    # d/d data of sum(segment_sum(data)**2): 2 * segment total, gathered back to each row
    g = fa.jit(fa.grad(lambda d: fnp.sum(fa.ops.segment_sum(d, ids, num_segments=4) ** 2)))(
        fa.device_put(fnp.asarray(data), device))
    np.testing.assert_allclose(np.asarray(g), 2 * _segment_ref("sum", d64, ids, 4)[ids], rtol=1e-5)


def test_segment_errors():
    with pytest.raises(TypeError, match="num_segments"):
        fa.jit(lambda d, i: fa.ops.segment_sum(d, i))(fnp.ones(3), fnp.asarray([0, 1, 1]))
    with pytest.raises(fa.DTypeError, match="integers"):
        fa.ops.segment_sum(fnp.ones(3), fnp.ones(3))
    with pytest.raises(fa.ShapeError, match="leading"):
        fa.ops.segment_sum(fnp.ones(3), fnp.asarray([0, 1]))


def test_partial_is_a_pytree():
    P = fa.tree_util.Partial(lambda a, b, c=1.0: a * b + c, fnp.asarray(2.0), c=fnp.asarray(3.0))
    assert float(P(4.0)) == 11.0 and len(fa.tree.leaves(P)) == 2
    assert float(fa.jit(lambda p, x: p(x))(P, 5.0)) == 13.0        # passes through jit as an argument
    g = fa.grad(lambda p: p(5.0))(P)                                # the gradient is a Partial of the same function
    assert isinstance(g, fa.tree_util.Partial) and float(g.args[0]) == 5.0 and float(g.keywords["c"]) == 1.0
    nested = fa.tree_util.Partial(P, 1.0)
    assert nested.func is P.func and float(nested()) == 5.0 and len(fa.tree.leaves(nested)) == 3


# ---------------------------------------------------------------- jax.lax conveniences (fnarray/_lax_more.py)

LAX_CASES = ["dot(x, x.T)", "dot(x[0], x[1])", "dot(x, x[0])", "batch_matmul(x[None], x.T[None])",
             "clamp(-0.5, x, 0.5)",
             "square(x)", "reciprocal(x)", "full_like(x, 2.0)", "full_like(x, 2, shape=(2,))", "broadcast(x, (2,))",
             "broadcasted_iota(np.int32, (2, 3), 1)", "collapse(x[None], 0, 2)", "collapse(x[None], 1)",
             "sort_key_val(x, x * 2, 0)", "top_k(x, 3)", "dynamic_slice_in_dim(x, 2, 3, 1)",
             "dynamic_slice_in_dim(x, 4, 3, 1)", "dynamic_index_in_dim(x, 1, 0, False)",
             "dynamic_update_slice_in_dim(x, x[:1] * 0, 2, 0)", "dynamic_update_index_in_dim(x, x[0] * 0, 1, 0)",
             "index_in_dim(x, -1, 1, False)", "index_in_dim(x, 0)", "full((2,), 3.0)",
             "dot_general(x, x, (((1,), (1,)), ((), ())), precision=L.Precision.HIGHEST)"]
XL = R.randn(3, 5).astype(np.float32)
XL[1, 2] = XL[1, 4]    # a tie for top_k


def _lax_eval(src, lax_mod, x):
    return eval(src, {"L": lax_mod, "x": x, "np": np, **{n: getattr(lax_mod, n) for n in dir(lax_mod) if n[0] != "_"}})


@pytest.mark.parametrize("src", LAX_CASES)
def test_lax_conveniences_against_jax(src):
    jax = pytest.importorskip("jax")
    ref = _lax_eval(src, jax.lax, XL)
    out = _lax_eval(src, fa.lax, fnp.asarray(XL))
    for r, o in zip(*(((ref, out) if isinstance(ref, tuple) else ((ref,), (out,)))), strict=True):
        assert np.asarray(o).dtype == np.asarray(r).dtype and np.asarray(o).shape == np.asarray(r).shape
        np.testing.assert_allclose(np.asarray(o), np.asarray(r), rtol=1e-6)


def test_lax_conveniences_jit_every_device(device):
    def f(x, i):
        v, idx = fa.lax.top_k(x, 2)
        return (v, idx, fa.lax.dynamic_slice_in_dim(x, i, 2, 1), fa.lax.dynamic_update_index_in_dim(x, x[0] * 0, i, 0),
                fa.lax.clamp(-0.5, x, 0.5))
    out = fa.jit(f)(fa.device_put(fnp.asarray(XL), device), fa.device_put(fnp.asarray(1), device))
    order = np.argsort(-XL, axis=1, kind="stable")[:, :2]
    upd = XL.copy()
    upd[1] = 0
    for o, r in zip(out, [np.take_along_axis(XL, order, 1), order, XL[:, 1:3], upd, np.clip(XL, -0.5, 0.5)],
                    strict=True):
        np.testing.assert_allclose(np.asarray(o), r, rtol=1e-6)
    with pytest.raises(ValueError, match="top_k"):
        fa.lax.top_k(fnp.asarray(XL), 6)


def test_scalar_types_make_arrays_and_stand_for_dtypes():
    a = fnp.float32(1.5)
    assert isinstance(a, fa.Array) and a.dtype == np.float32 and not a.weak_type and float(a) == 1.5
    assert fnp.int32(3).dtype == np.int32 and fnp.bool(1).dtype == np.bool_ and fnp.uint8([1, 2]).shape == (2,)
    assert np.dtype(fnp.bfloat16) == fnp.bfloat16 and fnp.float16.itemsize == 2 and fnp.int8.name == "int8"
    table = {np.dtype("float32"): "f4"}
    assert table[fnp.float32] == "f4" and {fnp.int32: 1}[np.dtype("int32")] == 1
    assert fnp.float32 == np.float32 and fnp.float32 != fnp.float64 and fnp.float32 != "nonsense"
    assert fnp.zeros(2, fnp.float16).dtype == fnp.float16 and np.zeros(2, fnp.int8).dtype == np.int8
    assert fa.jit(lambda x: x.astype(fnp.int32) + fnp.int32(1))(fnp.ones(2)).dtype == np.int32
