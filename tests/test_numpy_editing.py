"""``jax.numpy`` names a ported research program needed (tests/test_ports_jax_research.py): ``x.at[].divide``,
``power`` and ``apply``; ``interp``, ``histogram``, ``histogram_bin_edges`` (``fnarray/numpy/_binning.py``);
``delete``, ``insert``, ``compress``, ``extract``, ``put``, ``fill_diagonal`` (``_editing.py``); ``vectorize``,
``apply_along_axis``, ``piecewise`` (``_vectorize.py``); ``mgrid``, ``ogrid``, the windows and ``gradient``
(``_grids.py``). Each against JAX itself (the oracle; NumPy where JAX
refuses lists), eager on numpy:0, jitted on every device, and the bad inputs that must raise.
"""

from __future__ import annotations

import numpy as np
import pytest

import fnarray as fa
import fnarray.numpy as fnp
from fnarray.core.errors import AxisError, ConcretizationError, ShapeError

jax = pytest.importorskip("jax")
jnp = jax.numpy

R = np.random.RandomState(0)
X = R.randn(3, 4).astype(np.float32)
A = np.arange(24.0, dtype=np.float32).reshape(2, 3, 4)
Q = np.array([-1.0, 0.0, 0.5, 1.0, 2.0, 4.0, 9.0, np.nan], np.float32)
EDGES = np.array([0.0, 1.0, 2.5, 4.0], np.float32)
FP = np.array([0.0, 10.0, 5.0, 1.0], np.float32)
I3 = np.array([0, 0, 2], np.int32)


def _same(got, want, rtol=1e-6, atol=1e-6):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, got.dtype, want.shape, want.dtype)
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=atol)


# name: f(m, *args) run with m = fnarray.numpy and m = jax.numpy, and its array arguments
CASES = {
    "at_divide": (lambda m, x: m.asarray(x).at[I3, 1].divide(2.0), (X,)),
    "at_divide_int": (lambda m, x: m.asarray(x).astype(m.int32).at[1:].divide(3), (X * 10,)),
    "at_power": (lambda m, x: m.asarray(x).at[I3].power(2.0), (X,)),
    "at_power_clip": (lambda m, x: m.asarray(x).at[:, 7].power(3.0, mode="clip"), (X,)),
    "at_apply_repeats": (lambda m, x: m.asarray(x).at[I3].apply(lambda v: v * 3), (X,)),
    "at_apply_sin": (lambda m, x: m.asarray(x).at[..., -1].apply(m.sin), (X,)),
    "interp": (lambda m, q, e, f: m.interp(q, e, f), (Q, EDGES, FP)),
    "interp_left_right": (lambda m, q, e, f: m.interp(q, e, f, left=-1.0, right=-2.0), (Q, EDGES, FP)),
    "interp_period": (lambda m, q, e, f: m.interp(q * 3, e, f, period=3.0), (Q, EDGES, FP)),
    "interp_repeated_xp": (lambda m, q, e, f: m.interp(q, m.asarray(e).at[2].set(1.0), f), (Q, EDGES, FP)),
    "histogram": (lambda m, q: m.histogram(q, bins=3, range=(0.0, 3.0)), (Q,)),
    "histogram_auto_range": (lambda m, q: m.histogram(q[:-1], bins=4), (Q,)),
    "histogram_edges": (lambda m, q, e: m.histogram(q, bins=e, density=True), (Q, EDGES)),
    "histogram_weights": (lambda m, x: m.histogram(x, bins=5, weights=x * x), (X,)),
    "histogram_bin_edges": (lambda m, x: m.histogram_bin_edges(x, bins=6), (X,)),
    "delete_int": (lambda m, x: m.delete(x, 1, axis=1), (X,)),
    "delete_flat_slice": (lambda m, x: m.delete(x, slice(2, 9, 3)), (X,)),
    "delete_array": (lambda m, x: m.delete(x, np.array([0, -1, 0]), axis=1), (X,)),
    "delete_mask": (lambda m, x: m.delete(x, np.array([True, False, True]), axis=0), (X,)),
    "insert_scalar": (lambda m, x: m.insert(x, 2, 9.0, axis=1), (X,)),
    "insert_column": (lambda m, x: m.insert(x, -1, np.array([7.0, 8.0, 9.0]), axis=1), (X,)),
    "insert_many": (lambda m, x: m.insert(x, np.array([0, 2]), np.array([5.0, 6.0])), (X,)),
    "insert_block": (lambda m, x: m.insert(x, 4, np.ones((3, 1)), axis=1), (X,)),
    "compress": (lambda m, x: m.compress(np.array([True, False, True]), x, axis=0), (X,)),
    "compress_short": (lambda m, x: m.compress(np.array([False, True]), x, axis=1), (X,)),
    "compress_size": (lambda m, x: m.compress(np.array([True, False, True]), x, axis=0, size=3, fill_value=-1),
                      (X,)),
    "extract": (lambda m, x: m.extract(x > 0, x), (X,)),
    "extract_size": (lambda m, x: m.extract(x > 0, x, size=12, fill_value=-5.0), (X,)),
    "put": (lambda m, x: m.put(x, np.array([1, 13, -2, 5]), np.array([7.0, 8.0]), inplace=False), (X,)),
    "put_wrap": (lambda m, x: m.put(x, np.array([1, 13, -2]), np.array([7.0, 8.0, 9.0]), mode="wrap",
                                    inplace=False), (X,)),
    "fill_diagonal": (lambda m, x: m.fill_diagonal(x, np.array([1.0, 2.0]), inplace=False), (X,)),
    "fill_diagonal_3d": (lambda m, a: m.fill_diagonal(a[:2, :2, :2], 5.0, inplace=False), (A,)),
    "vectorize_signature": (lambda m, a: m.vectorize(lambda u, v: u @ v, signature="(n),(n)->()")(a, a[0, 0]),
                            (A,)),
    "vectorize_scalars": (lambda m, a: m.vectorize(lambda u, v: m.where(u > v, u, -v))(a, a[0, :, :1]), (A,)),
    "vectorize_two_outputs": (lambda m, a: m.vectorize(lambda v: (v.sum(), v.max()), signature="(n)->(),()")(a),
                              (A,)),
    "vectorize_excluded": (lambda m, a: m.vectorize(lambda v, p: v ** p, excluded={1})(a, 2), (A,)),
    "apply_along_axis_0": (lambda m, a: m.apply_along_axis(lambda v: m.cumsum(v[::-1]), 0, a), (A,)),
    "apply_along_axis_1_scalar": (lambda m, a: m.apply_along_axis(lambda v: v @ v, 1, a), (A,)),
    "apply_along_axis_outer": (lambda m, a: m.apply_along_axis(lambda v: m.outer(v, v[:2]), -1, a), (A,)),
    "piecewise": (lambda m, q: m.piecewise(q, [q < 1, q >= 1], [lambda v: v * 2, lambda v: v - 1]), (Q,)),
    "piecewise_default": (lambda m, q: m.piecewise(q, [q < 0, q > 3], [-1.0, lambda v: v * v, 7.5]), (Q,)),
    "piecewise_overlap": (lambda m, q: m.piecewise(q, [q < 3, q > 0], [1.0, 2.0]), (Q,)),
    "mgrid": (lambda m, x: m.mgrid[0:1:5j, -1:2] + x[0, 0], (X,)),
    "ogrid": (lambda m, x: m.ogrid[0:3, 0:1:4j][1] * x[0, 0], (X,)),
    "windows": (lambda m, x: (m.hanning(7), m.hamming(6), m.blackman(5), m.bartlett(4), m.kaiser(6, 2.5) * x[0, 0]),
                (X,)),
    "gradient": (lambda m, x: m.gradient(x), (X,)),
    "gradient_spacing": (lambda m, x: m.gradient(x, 2.0, 0.5), (X,)),
    "gradient_coordinates": (lambda m, x, e: m.gradient(x, e, axis=1), (X, EDGES)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_against_jax(name):
    fn, args = CASES[name]
    want = fn(jnp, *args)
    got = fn(fnp, *args)
    for g, w in zip(fa.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want), strict=True):
        _same(g, w)


JIT_CASES = ("at_divide", "at_apply_repeats", "interp", "histogram_weights", "delete_array", "insert_column",
             "compress_size", "put", "vectorize_signature", "apply_along_axis_outer", "piecewise_default",
             "gradient_coordinates")


@pytest.mark.parametrize("name", JIT_CASES)
def test_jitted_on_every_device(name, device):
    fn, args = CASES[name]
    want = fn(jnp, *args)
    got = fa.jit(lambda *a: fn(fnp, *a))(*[fa.device_put(a, device) for a in args])
    for g, w in zip(fa.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want), strict=True):
        _same(g, w, rtol=2e-6, atol=2e-6)


def test_at_apply_under_jit_repeats_as_often_as_indexed():
    f = fa.jit(lambda x, i: x.at[i].apply(lambda v: v * 3))
    got = f(fnp.arange(1.0, 6.0), fnp.asarray([0, 0, 0, 2, 9]))
    np.testing.assert_array_equal(np.asarray(got), [27.0, 2.0, 9.0, 4.0, 5.0])
    with pytest.raises(TypeError, match="keep x's shape"):
        fnp.arange(3.0).at[0].apply(lambda v: fnp.sum(v))
    with pytest.raises(TypeError, match="callable"):
        fnp.arange(3.0).at[0].apply(2.0)


def test_grad_and_vmap_through_the_new_functions():
    g = fa.grad(lambda x: fnp.interp(x, fnp.asarray([0.0, 1.0, 2.0]), fnp.asarray([0.0, 3.0, 4.0])))(1.5)
    assert float(g) == pytest.approx(1.0)
    g = fa.grad(lambda v: fnp.sum(fnp.insert(fnp.arange(3.0), 1, v) ** 2))(2.0)
    assert float(g) == pytest.approx(4.0)
    got = fa.vmap(lambda v: v.at[0].divide(2.0))(X)
    _same(got, jax.vmap(lambda v: v.at[0].divide(2.0))(X))
    got = fa.grad(lambda q: fnp.sum(fnp.piecewise(q, [q < 1, q >= 1], [lambda v: v * 2, lambda v: v ** 3])))(Q[:-1])
    want = jax.grad(lambda q: jnp.sum(jnp.piecewise(q, [q < 1, q >= 1], [lambda v: v * 2, lambda v: v ** 3])))(Q[:-1])
    _same(got, want)
    _same(fa.jit(lambda a: fnp.histogram(a, 3, range=(a.min(), a.max()))[0])(X),
          jax.jit(lambda a: jnp.histogram(a, 3, range=(a.min(), a.max()))[0])(X))


def test_lists_as_numpy():
    """``jax.numpy`` refuses Python lists for positions; NumPy takes them, and so does fnarray."""
    np.testing.assert_array_equal(np.asarray(fnp.delete(X, [0, 2], axis=1)), np.delete(X, [0, 2], axis=1))
    np.testing.assert_array_equal(np.asarray(fnp.insert(X, [0, 2], [5.0, 6.0], axis=1)),
                                  np.insert(X, [0, 2], [5.0, 6.0], axis=1))
    np.testing.assert_array_equal(np.asarray(fnp.delete(X, [], axis=1)), X)
    np.testing.assert_array_equal(np.asarray(fnp.interp(2.5, [1.0], [2.0])), np.float32(2.0))
    h, e = fnp.histogram(np.zeros(0, np.float32), 3)          # NumPy's (0, 1) range for no values
    np.testing.assert_array_equal(np.asarray(h), [0, 0, 0])
    np.testing.assert_allclose(np.asarray(e), np.histogram(np.zeros(0), 3)[1], rtol=1e-6)


@pytest.mark.parametrize("call, error, match", [
    (lambda: fnp.interp(X, X, X), ShapeError, "1-d"),
    (lambda: fnp.interp(X, np.zeros(0), np.zeros(0)), ShapeError, "non-zero length"),
    (lambda: fnp.interp(X, EDGES, FP[:3]), ShapeError, "same non-zero length"),
    (lambda: fnp.interp(X, EDGES, FP, period=0), ValueError, "non-zero"),
    (lambda: fnp.interp(X + 1j, EDGES, FP), fa.DTypeError, "real"),
    (lambda: fnp.histogram(X, 0), ValueError, "positive"),
    (lambda: fnp.histogram(X, 2.5), TypeError, "static int"),
    (lambda: fnp.histogram(X, "auto"), NotImplementedError, "auto"),
    (lambda: fnp.histogram(X, 3, range=(1.0,)), ValueError, "pair"),
    (lambda: fnp.histogram(X, 3, weights=np.ones(3)), ShapeError, "weights"),
    (lambda: fa.jit(lambda a, b: fnp.histogram(a, b)[0])(X, 3), TypeError, "static int"),
    (lambda: fnp.delete(X, 0, axis=10), AxisError, "out of bounds"),
    (lambda: fnp.delete(X, 9, axis=1), IndexError, "axis 1 of length 4"),
    (lambda: fnp.delete(X, 1.5, axis=1), IndexError, "integers or booleans"),
    (lambda: fa.jit(lambda a, i: fnp.delete(a, i, axis=1))(X, 1), ConcretizationError, "static"),
    (lambda: fnp.insert(X, 9, 1.0, axis=1), IndexError, "out of bounds"),
    (lambda: fnp.compress(X > 0, X), ShapeError, "1-d"),
    (lambda: fnp.compress(np.array([1, 0, 0, 1]), X, axis=0), ValueError, "past the axis"),
    (lambda: fnp.compress(np.array([1, 0]), X, axis=0, size=5), ValueError, "size"),
    (lambda: fa.jit(lambda c, a: fnp.compress(c, a, axis=0))(np.array([True, False]), X), ConcretizationError,
     "size="),
    (lambda: fnp.put(X, np.array([1]), 2.0), ValueError, "inplace=False"),
    (lambda: fnp.put(X, np.array([1.5]), 2.0, inplace=False), IndexError, "integers"),
    (lambda: fnp.put(X, np.array([1]), 2.0, mode="x", inplace=False), ValueError, "mode"),
    (lambda: fnp.put(X, np.array([1]), 2.0, mode="raise", inplace=False), NotImplementedError, "raise"),
    (lambda: fnp.fill_diagonal(X, 1.0), ValueError, "inplace=False"),
    (lambda: fnp.fill_diagonal(np.zeros(3), 1.0, inplace=False), ValueError, "rank >= 2"),
    (lambda: fnp.fill_diagonal(np.zeros((2, 3, 3)), 1.0, inplace=False), ValueError, "one length"),
    (lambda: fnp.fill_diagonal(X, 1.0, wrap=True, inplace=False), NotImplementedError, "wrap"),
    (lambda: fnp.vectorize(lambda a, b: a @ b, signature="(n),(n)->()")(A, np.ones(3)), ShapeError, "'n'"),
    (lambda: fnp.vectorize(lambda a: a, signature="(n->()")(A), ValueError, "signature"),
    (lambda: fnp.vectorize(lambda a: a, signature="(n)->()")(A), ShapeError, "core shape"),
    (lambda: fnp.vectorize(lambda a, b: a + b)(np.ones(3), np.ones(4)), ShapeError, "broadcast"),
    (lambda: fnp.vectorize(lambda a: a, signature="(n)->()")(np.float32(1)), ShapeError, "fewer axes"),
    (lambda: fnp.apply_along_axis(lambda v: v, 0, np.float32(1)), ShapeError, "at least one axis"),
    (lambda: fnp.apply_along_axis(lambda v: v, 5, A), AxisError, "out of bounds"),
    (lambda: fnp.piecewise(Q, [Q < 1], [1.0, 2.0, 3.0]), ValueError, "1 or 2 functions"),
    (lambda: fnp.piecewise(X, [np.ones(5, bool)], [1.0]), ShapeError, "broadcast"),
    (lambda: fnp.arange(3.0).at[0].divide(1.0, mode="nope"), ValueError, "mode"),
    (lambda: fnp.mgrid[3], TypeError, "slices"),
    (lambda: fnp.hanning(3.5), TypeError, "static int"),
    (lambda: fnp.kaiser(4, fnp.asarray(1.0)), TypeError, "static number"),
    (lambda: fnp.gradient(np.ones(1, np.float32)), ShapeError, "at least 2"),
    (lambda: fnp.gradient(X, EDGES[:3], axis=1), ShapeError, "coordinates"),
    (lambda: fnp.gradient(X, 1.0, 2.0, 3.0), ValueError, "spacings"),
    (lambda: fnp.gradient(X, edge_order=2), NotImplementedError, "edge_order"),
])
def test_bad_inputs_raise(call, error, match):
    with pytest.raises(error, match=match):
        call()
