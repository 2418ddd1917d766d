"""The ``Array`` type: repr, immutability, conversions, protocols, properties and operators.

``repr`` is compared with ``jax.Array``'s (the style fnarray adopts); values with NumPy.
"""

from __future__ import annotations

import operator
import pickle

import ml_dtypes
import numpy as np
import pytest

import fnarray as fa
import fnarray.numpy as fnp
from helpers import assert_close, needs_namespace

F32, I32 = np.dtype("float32"), np.dtype("int32")


REPR_CASES = [np.array([1.0, 2.0], np.float32), np.array(1.5, np.float32), np.arange(6, dtype=np.int32).reshape(2, 3),
              np.zeros((0,), np.float32), np.zeros((2, 0), np.int32), np.array([True, False]),
              np.array([1 + 2j], np.complex64), np.array([1.5, 2], ml_dtypes.bfloat16),
              np.linspace(0, 1, 7, dtype=np.float32), np.arange(2000, dtype=np.float32),
              np.array([np.nan, -np.inf], np.float32), np.arange(24, dtype=np.uint8).reshape(2, 3, 4),
              np.array([-3, 7], np.int8), np.array([1e-8, 1e8], np.float32)]


@pytest.mark.parametrize("x_np", REPR_CASES, ids=range(len(REPR_CASES)))
def test_repr_matches_jax(x_np):
    jnp = pytest.importorskip("jax.numpy")
    assert repr(fnp.asarray(x_np)) == repr(jnp.asarray(x_np))


@pytest.mark.enable_x64
def test_repr_examples_and_weak_type():
    assert repr(fnp.asarray([1.0, 2.0])) == "Array([1., 2.], dtype=float64)"   # x64 on: the 64-bit defaults
    assert repr(fnp.asarray(2.0)) == "Array(2., dtype=float64, weak_type=True)"
    assert repr(fnp.asarray(np.arange(3.0))) == "Array([0., 1., 2.], dtype=float64)"
    assert str(fnp.asarray([1, 2])) == "[1 2]"
    assert f"{fnp.asarray(np.float32(3.14159)):.2f}" == "3.14"


def test_arrays_are_immutable():
    x = fnp.asarray([1.0, 2.0])
    with pytest.raises(TypeError, match=r"\.at\[") as e:
        x[0] = 1
    assert "immutable" in str(e.value)
    with pytest.raises(AttributeError):
        x.shape = (1, 2)
    with pytest.raises(TypeError, match="unhashable"):
        hash(x)
    assert_close(x, np.array([1.0, 2.0], np.float32))


def test_array_protocol_is_read_only():
    x = fnp.asarray([1.0, 2.0, 3.0])
    v = np.asarray(x)
    assert not v.flags.writeable
    with pytest.raises(ValueError):
        v[0] = 5.0
    c = np.array(x)  # an explicit copy may be written
    c[0] = 5.0
    assert np.asarray(x)[0] == 1.0
    assert np.asarray(x, dtype=np.float64).dtype == np.float64
    assert np.array(x, copy=True).flags.writeable
    with pytest.raises(ValueError):
        np.asarray(x, dtype=np.float64, copy=False)


def test_dlpack():
    x = fnp.asarray(np.arange(6, dtype=np.float32).reshape(2, 3))
    y = np.from_dlpack(x)
    np.testing.assert_array_equal(y, np.arange(6, dtype=np.float32).reshape(2, 3))
    assert not y.flags.writeable or not np.shares_memory(y, np.asarray(x))
    assert x.__dlpack_device__() == (1, 0)  # kDLCPU, device 0
    z = fnp.from_dlpack(x)
    assert_close(z, np.arange(6, dtype=np.float32).reshape(2, 3))


@pytest.mark.enable_x64
def test_item_tolist_astype_block_until_ready():
    x = fnp.asarray(np.array([[1.5, -2.0], [3.25, 0.0]], np.float32))
    assert x.tolist() == [[1.5, -2.0], [3.25, 0.0]]
    assert x.item(1, 0) == 3.25 and x.item(3) == 0.0
    assert fnp.asarray(7).item() == 7 and type(fnp.asarray(7).item()) is int
    assert type(fnp.asarray(True).item()) is bool
    i = x.astype(fnp.int32)
    assert_close(i, np.array([[1, -2], [3, 0]], np.int32))
    assert_close(x.astype("float64"), np.array([[1.5, -2.0], [3.25, 0.0]]))
    assert x.block_until_ready() is x
    with pytest.raises(ValueError):
        x.item()


def test_scalar_conversions():
    z = fnp.asarray(np.float32(2.75))
    assert bool(z) is True and int(z) == 2 and float(z) == 2.75 and complex(z) == 2.75
    assert bool(fnp.asarray(0.0)) is False
    i = fnp.asarray(3)
    assert operator.index(i) == 3 and list(range(i)) == [0, 1, 2] and [10, 20, 30, 40][i] == 40
    with pytest.raises(TypeError, match="integer"):
        operator.index(z)
    with pytest.raises(ValueError):
        bool(fnp.ones(2))
    assert round(fnp.asarray(2.6)) == 3
    with pytest.raises(TypeError, match="0-d"):
        len(fnp.asarray(1.0))


@pytest.mark.enable_x64
def test_properties():
    x_np = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    x = fnp.asarray(x_np)
    assert (x.ndim, x.size, x.shape, x.dtype) == (3, 24, (2, 3, 4), F32)
    assert len(x) == 2
    assert x.device == fa.default_device() and x.devices() == {fa.default_device()}
    assert not x.weak_type and fnp.asarray(1.0).weak_type
    assert_close(x.T, x_np.T)
    assert_close(x.mT, np.swapaxes(x_np, -1, -2))
    assert_close(fnp.asarray(np.ones(3)).T, np.ones(3))
    assert x.__array_namespace__() is fnp
    with pytest.raises(ValueError):
        x.__array_namespace__(api_version="1999.01")
    c = fnp.asarray(np.array([1 + 2j, 3 - 1j], np.complex64))
    assert_close(c.real, np.array([1.0, 3.0], np.float32))
    assert_close(c.imag, np.array([2.0, -1.0], np.float32))


def test_iteration_and_indexing():
    needs_namespace("_getitem")
    x_np = np.arange(6, dtype=np.int32).reshape(3, 2)
    x = fnp.asarray(x_np)
    rows = list(x)
    assert len(rows) == 3
    for r, w in zip(rows, x_np, strict=True):
        assert_close(r, w)
    assert_close(x[1], x_np[1])
    assert_close(x[:, 1], x_np[:, 1])


def test_at_returns_a_new_array():
    needs_namespace("_IndexUpdateHelper")
    x = fnp.zeros(3)
    y = x.at[1].set(5.0)
    assert_close(y, np.array([0.0, 5.0, 0.0], np.float32))
    assert_close(x, np.zeros(3, np.float32))
    assert_close(x.at[0].add(2.0).at[0].add(1.0), np.array([3.0, 0.0, 0.0], np.float32))


def test_pickle_round_trip():
    x = fnp.asarray(np.arange(4, dtype=np.int16))
    y = pickle.loads(pickle.dumps(x))
    assert_close(y, np.arange(4, dtype=np.int16))
    w = pickle.loads(pickle.dumps(fnp.asarray(1.5)))
    assert w.weak_type


_OPS = [
    ("+", operator.add), ("-", operator.sub), ("*", operator.mul), ("/", operator.truediv),
    ("//", operator.floordiv), ("%", operator.mod), ("**", operator.pow),
    ("<", operator.lt), ("<=", operator.le), (">", operator.gt), (">=", operator.ge),
    ("==", operator.eq), ("!=", operator.ne),
]
_INT_OPS = [("&", operator.and_), ("|", operator.or_), ("^", operator.xor), ("<<", operator.lshift),
            (">>", operator.rshift)]


@pytest.mark.parametrize("sym,op", _OPS, ids=[s for s, _ in _OPS])
def test_operators_and_reflected_operators(sym, op):
    a_np = np.array([1.5, 2.0, 3.0], np.float32)
    b_np = np.array([0.5, 4.0, 2.0], np.float32)
    a, b = fnp.asarray(a_np), fnp.asarray(b_np)
    want = op(a_np.astype(np.float64), b_np.astype(np.float64))
    dt = want.dtype if want.dtype == np.bool_ else F32
    assert_close(op(a, b), want.astype(dt), dt)
    assert_close(op(2.0, b), op(2.0, b_np.astype(np.float64)).astype(dt), dt)     # reflected, Python scalar
    assert_close(op(a, 2), op(a_np.astype(np.float64), 2).astype(dt), dt)
    out = op(a_np, b)   # NumPy array on the left defers to fnarray
    assert isinstance(out, fa.Array)
    assert_close(out, want.astype(dt), dt)
    assert_close(fa.jit(op)(a, b), want.astype(dt), dt)


@pytest.mark.parametrize("sym,op", _INT_OPS, ids=[s for s, _ in _INT_OPS])
def test_integer_operators(sym, op):
    a_np = np.array([1, 6, 12, -7], np.int32)
    b_np = np.array([3, 1, 2, 2], np.int32)
    a, b = fnp.asarray(a_np), fnp.asarray(b_np)
    assert_close(op(a, b), op(a_np, b_np))
    assert_close(op(a, 1), op(a_np, 1))
    assert_close(op(5, b), op(5, b_np))
    assert_close(fa.jit(op)(a, b), op(a_np, b_np))


def test_unary_operators_and_divmod():
    x_np = np.array([-1.5, 2.0, 0.0], np.float32)
    x = fnp.asarray(x_np)
    assert_close(-x, -x_np)
    assert_close(+x, x_np)
    assert_close(abs(x), np.abs(x_np))
    i_np = np.array([5, -3, 0], np.int32)
    assert_close(~fnp.asarray(i_np), ~i_np)
    assert_close(~fnp.asarray([True, False]), np.array([False, True]))
    q, r = divmod(fnp.asarray(i_np), 2)
    assert_close(q, i_np // 2)
    assert_close(r, i_np % 2)
    q, r = divmod(7, fnp.asarray(np.array([2, -3], np.int32)))
    assert_close(q, np.array([3, -3], np.int32))
    assert_close(r, np.array([1, -2], np.int32))


def test_matmul_operator():
    needs_namespace("matmul")
    a_np = np.arange(6, dtype=np.float32).reshape(2, 3)
    b_np = np.arange(12, dtype=np.float32).reshape(3, 4)
    a, b = fnp.asarray(a_np), fnp.asarray(b_np)
    want = (a_np.astype(np.float64) @ b_np).astype(np.float32)
    assert_close(a @ b, want)
    assert_close(a_np @ b, want)
    assert_close(a @ b_np, want)
    assert_close(fa.jit(operator.matmul)(a, b), want)


def test_methods_forward_to_the_namespace():
    needs_namespace("sum", "_reshape_method")
    x_np = np.arange(6, dtype=np.float32).reshape(2, 3)
    x = fnp.asarray(x_np)
    assert_close(x.sum(), np.array(15.0, np.float32))
    assert_close(x.reshape(3, 2), x_np.reshape(3, 2))
    assert_close(x.reshape((6,)), x_np.reshape(6))
    assert_close(x.max(axis=0), x_np.max(axis=0))


def test_mismatched_shapes_raise_shape_error_naming_both():
    with pytest.raises(fa.ShapeError) as e:
        fnp.ones(3) + fnp.ones(4)
    assert isinstance(e.value, ValueError)
    assert "(3,)" in str(e.value) and "(4,)" in str(e.value)
    with pytest.raises(fa.ShapeError, match=r"\(2, 3\).*\(2,\)"):
        fa.jit(lambda a, b: a * b)(fnp.ones((2, 3)), fnp.ones(2))


def test_copy_and_pickle_keep_device_and_placement():
    import copy
    import pickle
    for dev in fa.devices(all_backends=True):
        x = fa.device_put(fa.numpy.arange(4.0), dev)
        for y in (copy.deepcopy(x), copy.copy(x), pickle.loads(pickle.dumps(x))):
            assert y.device == dev and y.committed and y.dtype == x.dtype
            np.testing.assert_array_equal(np.asarray(y), np.asarray(x))
    w = pickle.loads(pickle.dumps(fa.numpy.asarray(2.0)))
    assert w.weak_type and not w.committed
