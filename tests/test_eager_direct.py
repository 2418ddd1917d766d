"""``bind``'s direct eager path (``fnarray.devices.placement.eager_direct``) and ``matmul``'s plain 2-D case against
the general paths they shortcut (issue 28).

While no thread stages anything, ``bind`` of concrete arrays on one device goes straight to the eager cache and,
on a hit, to the backend's one-output implementation. Every case runs a primitive twice through ``bind`` (the
miss, then the direct hit) and once through ``placement.eager_apply`` (the general path, what ``bind`` called
before); the three must agree on values, dtype, weak type, shape, committed flag and device, and with NumPy in
float64. The direct path must also be taken (its entry's implementation looked up, the general path's frames not
entered), and leave the general path wherever it does not apply: tracers, scalars, deleted arrays, errors.
"""

from __future__ import annotations

import numpy as np
import pytest

import fnarray as fa
import fnarray.numpy as fnp
from fnarray.core import primitives as P
from fnarray.core import tracing
from fnarray.core.ir import Params
from fnarray.devices import placement
from helpers import python_calls

RNG = np.random.default_rng(28)
A = RNG.standard_normal((3, 4)).astype(np.float32)
B = RNG.standard_normal((4, 5)).astype(np.float32)

# (primitive, params, operands as NumPy arrays, the NumPy float64 reference of the result)
CASES = {
    "exp": (P.exp, {}, (A,), lambda a: np.exp(a)),
    "add": (P.add, {}, (A, A[::-1].copy()), lambda a, b: a + b),
    "transpose": (P.transpose, {"permutation": (1, 0)}, (A,), lambda a: a.T),
    "reshape": (P.reshape, {"new_sizes": (4, 3)}, (A,), lambda a: a.reshape(4, 3)),
    "reduce_max": (P.reduce_max, {"axes": (1,)}, (A,), lambda a: a.max(axis=1)),
    "dot_general": (P.dot_general, {"dimension_numbers": (((1,), (0,)), ((), ())), "preferred_element_type": None},
                    (A, B), lambda a, b: a @ b),
    "lt int32": (P.lt, {}, (np.arange(6, dtype=np.int32), np.full(6, 3, np.int32)), lambda a, b: a < b),
    "div int32 by zero": (P.div, {}, (np.arange(6, dtype=np.int32), np.array([0, 1, 0, 2, 0, 3], np.int32)),
                          lambda a, b: np.where(b == 0, 0, a // np.where(b == 0, 1, b))),
}


def _same(x, y):
    assert (x.dtype, x.aval.weak_type, x.shape, x.committed, x.device) == \
        (y.dtype, y.aval.weak_type, y.shape, y.committed, y.device)
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


@pytest.mark.parametrize("case", list(CASES))
def test_direct_path_equals_the_general_path(device, case):
    prim, params, operands, ref = CASES[case]
    xs = [fa.device_put(o, device) for o in operands]
    assert tracing.plain, "nothing stages here: bind takes the direct path"
    first = prim.bind(*xs, **params)        # a miss: the eager cache compiles
    second = prim.bind(*xs, **params)       # a hit: the backend's implementation, directly
    general = placement.eager_apply(prim, xs, Params(params))
    _same(first, general)
    _same(second, general)
    want = ref(*[o.astype(np.float64) if o.dtype.kind == "f" else o for o in operands])
    assert second.dtype == np.dtype(want.dtype if want.dtype.kind == "b" else operands[0].dtype)
    np.testing.assert_allclose(np.asarray(second), want, rtol=2e-6, atol=2e-6)


def test_direct_path_is_taken_on_a_hit():
    """A hit enters none of the general path's frames, and its entry keeps the implementation it found."""
    x = fa.device_put(A, "numpy:0")
    P.exp.bind(x)
    calls = python_calls(lambda: P.exp.bind(x))
    assert "eager_direct" in calls
    assert not {"eager_apply", "_eager_run", "_eager_executable", "_eager_done"} & set(calls), calls
    key = placement.eager_key(P.exp, Params(), (x.aval,), x.device)
    assert callable(placement._eager_d[key].one)


def test_direct_path_on_mlx_calls_the_rule():
    devs = [d for d in fa.devices(all_backends=True) if d.backend == "mlx"]
    if not devs:
        pytest.skip("mlx is not installed")
    x = fa.device_put(A, devs[0])
    P.exp.bind(x)
    calls = python_calls(lambda: P.exp.bind(x))
    assert not {"eager_apply", "_eager_run", "_eager_done"} & set(calls), calls
    key = placement.eager_key(P.exp, Params(), (x.aval,), x.device)
    assert placement._eager_d[key].one is not False  # mlx's rule itself, not the executable around it


def test_scalars_deleted_arrays_and_tracers_take_the_general_path():
    x = fa.device_put(A, "numpy:0")
    got = P.mul.bind(x, 2.0)                       # a Python scalar: eager_apply converts it
    np.testing.assert_array_equal(np.asarray(got), A * np.float32(2.0))
    assert got.dtype == np.float32
    y = fa.device_put(A, "numpy:0")
    P.exp.bind(y)
    y.delete()
    with pytest.raises(RuntimeError, match="donated|deleted"):
        P.exp.bind(y)
    g = fa.grad(lambda v: fnp.sum(P.exp.bind(v)))(x)  # JVP tracers under grad: the trace, not the direct path
    np.testing.assert_allclose(np.asarray(g), np.exp(A), rtol=1e-6)


def test_errors_of_the_direct_call_are_the_general_paths(monkeypatch):
    """An error of the backend's implementation re-runs the general path, which raises its own error."""
    x = fa.device_put(A, "numpy:0")
    P.exp.bind(x)
    key = placement.eager_key(P.exp, Params(), (x.aval,), x.device)
    entry = placement._eager_d[key]

    def broken(*bufs):
        raise MemoryError("the direct call failed")
    monkeypatch.setattr(entry, "one", broken)
    got = P.exp.bind(x)  # the general path's executable succeeds
    np.testing.assert_allclose(np.asarray(got), np.exp(A), rtol=1e-6)


@pytest.mark.parametrize("dtypes", [("float32", "float32"), ("int32", "int32"), ("int32", "float32"),
                                    ("bool", "bool")])
def test_matmul_plain_matrices_equal_numpy(device, dtypes):
    """``matmul``'s 2-D case of one dtype binds one product directly; other dtypes promote as before. Both
    against NumPy in float64 and the batched path (a leading axis of one)."""
    a = (A * 3).astype(dtypes[0])
    b = (B * 3).astype(dtypes[1])
    x, y = fa.device_put(a, device), fa.device_put(b, device)
    got = fnp.matmul(x, y)
    batched = fnp.matmul(fnp.expand_dims(x, 0), y)[0]
    want_dtype = fnp.result_type(x, y)
    assert got.dtype == want_dtype == batched.dtype
    if want_dtype == np.bool_:
        want = (a.astype(np.int64) @ b.astype(np.int64)) != 0
    else:
        want = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(np.asarray(got).astype(np.float64), want, rtol=2e-5, atol=2e-5)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(batched))


def test_matmul_plain_case_traces_the_same_program():
    ir = fa.make_ir(fnp.matmul)(A, B)
    assert [e.primitive.name for e in ir.eqns] == ["dot_general"]
    with pytest.raises(fa.ShapeError, match="contracting dimension"):
        fnp.matmul(fa.device_put(A, "numpy:0"), fa.device_put(A, "numpy:0"))


def test_broadcasting_operators_take_the_general_path_and_learn_nothing(device):
    """``Array``'s fast binary operators send operands of two avals (``s - s.max(axis, keepdims=True)``) to the
    general path without a lookup: results as NumPy's, and no fast entry learned from them."""
    s = fa.device_put(A, device)
    m = s.max(axis=-1, keepdims=True)
    for op, ref in ((lambda x, y: x - y, np.subtract), (lambda x, y: x / y, np.divide),
                    (lambda x, y: x * y, np.multiply), (lambda x, y: x < y, np.less)):
        for _ in range(3):  # first calls, then whatever the caches hold
            got = op(s, m)
        want = ref(A.astype(np.float64), A.max(axis=-1, keepdims=True).astype(np.float64))
        assert got.dtype == (np.bool_ if want.dtype == np.bool_ else np.float32) and got.shape == (3, 4)
        np.testing.assert_allclose(np.asarray(got), want, rtol=2e-6)
    calls = python_calls(lambda: s - m)
    assert "_learn" not in calls and "_remember" not in calls, calls


def test_integer_index_equals_the_general_path_and_numpy(device):
    """``x[i]`` of an in-bounds Python int skips the key's parsing (the same two binds); other ints (out of bounds:
    clamped, docs/design.md "Indices"), NumPy ints and tuples take the parser. Every form against NumPy."""
    x = fa.device_put(A, device)
    n = A.shape[0]
    for i in list(range(-n, n)) + [n, n + 5, -n - 1, -n - 9]:
        want = A[min(max(i + n if i < 0 else i, 0), n - 1)]
        for key in (i, np.int32(i), (i, Ellipsis), (i,)):
            got = x[key]
            assert got.dtype == np.float32 and got.shape == want.shape, (i, key)
            np.testing.assert_array_equal(np.asarray(got), want)
    empty = fa.device_put(np.zeros((0, 2), np.float32), device)
    with pytest.raises(IndexError, match="out of bounds"):
        empty[0]
    ir = fa.make_ir(lambda v: v[1])(A)
    assert [e.primitive.name for e in ir.eqns] == ["slice", "reshape"]
