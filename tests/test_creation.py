"""Creation functions of ``fnarray.numpy`` against NumPy, eagerly and under ``jit``.

Dtypes follow the pinned 32-bit defaults (Python floats -> float32, ints ->
int32); values come from NumPy (in float64 where NumPy computes them).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import fnarray as fa
import fnarray.numpy as fnp
from helpers import ALL_DTYPES, assert_close, assert_same, check_traced, needs_namespace

F32, F64, I32 = np.dtype("float32"), np.dtype("float64"), np.dtype("int32")


def _jit_same(make):
    """``make()`` traced and jitted agrees with its eager result; the program verifies."""
    eager = make()
    check_traced(make)
    jitted = fa.jit(make)()
    if isinstance(eager, (list, tuple)):
        for a, b in zip(eager, jitted, strict=True):
            assert_same(b, a)
    else:
        assert_same(jitted, eager)
    return eager


# ----------------------------------------------------------------------------- asarray / array


@pytest.mark.parametrize("d", ALL_DTYPES, ids=lambda d: d.name)
def test_asarray_keeps_numpy_dtypes(d):
    x_np = (np.arange(6).reshape(2, 3) % 2).astype(d)
    x = fnp.asarray(x_np)
    assert_close(x, x_np, d, rtol=0, atol=0)
    assert not x.weak_type


@pytest.mark.parametrize("value,dtype", [
    ([[1, 2], [3, 4]], "int32"), ([1.5, -2.0], "float32"), ((1, 2.5), "float32"), ([True, False], "bool"),
    ([1 + 2j], "complex64"), ([], "float32"), ([[]], "float32"), (np.float32(3.0), "float32"),
    (7, "int32"), (2.5, "float32"),
])
def test_asarray_from_python_values(value, dtype):
    x = fnp.asarray(value)
    want = np.asarray(value).astype(dtype)
    assert_close(x, want, dtype)


@pytest.mark.enable_x64
def test_asarray_with_dtype_does_not_round_through_the_default():
    x = fnp.asarray([0.1, 1e-300], dtype=fnp.float64)
    assert_close(x, np.array([0.1, 1e-300]), F64, rtol=0, atol=0)
    assert fnp.asarray(2 ** 40, dtype=fnp.int64).item() == 2 ** 40
    assert fnp.asarray([2 ** 31], dtype=fnp.uint32).item() == 2 ** 31
    assert_close(fnp.asarray([1, 2], dtype=fnp.float16), np.array([1, 2], np.float16))


def test_asarray_of_an_array_is_that_array():
    x = fnp.ones(3)
    assert fnp.asarray(x) is x
    y = fnp.asarray(x, dtype=fnp.int32)
    assert y.dtype == I32 and x.dtype == F32


def test_asarray_copy_and_bad_inputs():
    with pytest.raises(ValueError, match="copy=False"):
        fnp.asarray(np.ones(3), copy=False)
    with pytest.raises(fa.DTypeError):
        fnp.asarray(["a", "b"])
    with pytest.raises(fa.DTypeError):
        fnp.asarray(np.array([object()]))
    with pytest.raises(OverflowError):
        fnp.asarray([1, 2 ** 33])


def test_asarray_copies_what_numpy_holds():
    x_np = np.arange(4.0)
    x = fnp.asarray(x_np)
    x_np[0] = 100.0
    assert np.asarray(x)[0] == 0.0


@pytest.mark.enable_x64
def test_asarray_from_array_protocols():
    class HasArray:
        def __array__(self, dtype=None, copy=None):
            return np.arange(3, dtype=np.int16)

    assert_close(fnp.asarray(HasArray()), np.arange(3, dtype=np.int16))
    x_np = np.linspace(0, 1, 4)
    assert_close(fnp.from_dlpack(x_np), x_np, rtol=0, atol=0)


def test_array_ndmin_and_device():
    x = fnp.array([1.0, 2.0], ndmin=3)
    assert_close(x, np.array([1.0, 2.0], ndmin=3).astype(F32))
    d = fa.devices()[0]
    y = fnp.asarray([1, 2], device=d)
    assert y.device == d and y.committed


def test_asarray_with_arrays_inside_a_list():
    needs_namespace("stack")
    a, b = fnp.ones(2), fnp.zeros(2)
    assert_close(fnp.asarray([a, b]), np.array([[1.0, 1.0], [0.0, 0.0]], np.float32))


# ----------------------------------------------------------------------------- filled arrays


@pytest.mark.parametrize("shape", [3, (2, 3), (), (0,), (2, 0, 4)])
@pytest.mark.parametrize("dtype", [None, "float64", "int8", "bool", "complex64", "bfloat16"])
def test_zeros_ones_empty_full(shape, dtype):
    d = F32 if dtype is None else np.dtype(ml_dtypes.bfloat16 if dtype == "bfloat16" else dtype)
    fns = {"zeros": (fnp.zeros, np.zeros), "ones": (fnp.ones, np.ones), "empty": (fnp.empty, np.zeros)}
    for name, (ours, ref) in fns.items():
        out = _jit_same(lambda: ours(shape, dtype=d if dtype else None))
        assert_close(out, ref(shape, dtype=np.float64).astype(d), d, msg=name)
    out = _jit_same(lambda: fnp.full(shape, 3, dtype=d if dtype else None))
    want_d = I32 if dtype is None else d
    assert_close(out, np.full(shape, 3).astype(want_d), want_d)


@pytest.mark.parametrize("fill,dtype", [(7, "int32"), (2.5, "float32"), (True, "bool"), (1j, "complex64"),
                                        (np.float64(0.1), "float64"), (np.int8(-3), "int8")])
def test_full_takes_the_fill_values_dtype(fill, dtype):
    out = _jit_same(lambda: fnp.full((2, 2), fill))
    assert_close(out, np.full((2, 2), fill).astype(dtype), dtype, rtol=0, atol=0)


@pytest.mark.enable_x64
def test_full_with_an_array_fill_value():
    v = fnp.asarray(np.float64(2.25))
    out = fnp.full((2, 3), v)
    assert_close(out, np.full((2, 3), 2.25), F64)
    out = fa.jit(lambda u: fnp.full((3,), u, dtype=fnp.float32))(v)
    assert_close(out, np.full(3, 2.25, np.float32))


def test_shape_errors():
    with pytest.raises(fa.ShapeError, match="negative"):
        fnp.zeros((2, -1))
    with pytest.raises(TypeError, match="shape"):
        fnp.ones("abc")
    with pytest.raises(TypeError, match="shape"):
        fnp.full((2.5, 3), 1.0)
    assert fnp.zeros((np.int64(2), fnp.asarray(3))).shape == (2, 3)


@pytest.mark.parametrize("x_np", [np.arange(6, dtype=np.int16).reshape(2, 3), np.ones((0, 2), np.float64),
                                  np.array(1.5, np.float32)], ids=["i16", "empty-f64", "scalar"])
@pytest.mark.enable_x64
def test_like_functions(x_np):
    x = fnp.asarray(x_np)
    for ours, ref in [(fnp.zeros_like, np.zeros_like), (fnp.ones_like, np.ones_like),
                      (fnp.empty_like, np.zeros_like)]:
        assert_close(ours(x), ref(x_np), x_np.dtype)
        assert_close(ours(x_np), ref(x_np), x_np.dtype)
        assert_close(ours(x, dtype=fnp.float16), ref(x_np, dtype=np.float16))
        assert_close(ours(x, shape=(2, 2)), ref(x_np, shape=(2, 2)))
        assert_same(fa.jit(ours)(x), ours(x))
        check_traced(ours, x)
    assert_close(fnp.full_like(x, 4), np.full_like(x_np, 4))
    assert_close(fnp.full_like(x, 0.5, dtype=fnp.float64), np.full_like(x_np, 0.5, dtype=np.float64))
    assert_same(fa.jit(lambda v: fnp.full_like(v, 9))(x), fnp.full_like(x, 9))


# ----------------------------------------------------------------------------- ranges


@pytest.mark.parametrize("args,dtype", [
    ((5,), None), ((2, 9), None), ((10, 2, -3), None), ((3, 3), None), ((5, 1), None), ((-4, 4, 3), None),
    ((0.0, 1.0, 0.25), None), ((2.5,), None), ((1, 2, 0.1), None), ((5,), "float64"), ((-2.0, 3.0, 0.7), "float64"),
    ((6,), "uint8"), ((0, 30, 7), "int64"),
])
def test_arange(args, dtype):
    out = _jit_same(lambda: fnp.arange(*args, dtype=dtype))
    ints = all(isinstance(a, int) for a in args)
    d = np.dtype(dtype) if dtype else (I32 if ints else F32)
    want = np.arange(*[np.float64(a) if not ints else a for a in args])
    assert_close(out, want.astype(d), d, atol=1e-6)


def test_arange_step_zero_and_traced_bounds():
    with pytest.raises(ValueError, match="step"):
        fnp.arange(0, 5, 0)
    with pytest.raises(TypeError, match="concrete"):
        fa.jit(lambda n: fnp.arange(n))(5)
    assert_close(fnp.arange(fnp.asarray(4)), np.arange(4, dtype=np.int32))


@pytest.mark.parametrize("start,stop,num,endpoint,dtype", [
    (0, 1, 5, True, None), (0, 1, 5, False, None), (-2.5, 7, 1, True, None), (3, 3, 4, True, None),
    (0, 10, 0, True, None), (1, 0, 7, True, "float64"), (0, 1 + 1j, 3, True, None)])
def test_linspace(start, stop, num, endpoint, dtype):
    out = _jit_same(lambda: fnp.linspace(start, stop, num, endpoint=endpoint, dtype=dtype))
    want = np.linspace(start, stop, num, endpoint=endpoint)
    d = np.dtype(dtype) if dtype else (np.dtype("complex64") if isinstance(stop, complex) else F32)
    assert_close(out, want.astype(d), d)
    with pytest.raises(ValueError):
        fnp.linspace(0, 1, -1)


@pytest.mark.parametrize("fn", [fnp.linspace, fnp.logspace, fnp.geomspace])
def test_sample_count_is_an_integer_as_numpy(fn):
    """A float count raises as NumPy and JAX (it was truncated: 5.7 gave 5 values); NumPy integers and concrete
    0-d integer arrays are counts."""
    for bad in (5.0, 5.7, "5"):
        with pytest.raises(TypeError, match="num must be an integer"):
            fn(1, 2, bad)
    with pytest.raises(ValueError, match="num must be >= 0"):
        fn(1, 2, -1)
    for num in (np.int64(3), fnp.asarray(3)):
        np.testing.assert_allclose(np.asarray(fn(1, 2, num)), getattr(np, fn.__name__)(1, 2, 3), rtol=1e-6)


@pytest.mark.enable_x64
@pytest.mark.parametrize("kw", [{}, {"base": 2.0}, {"endpoint": False}, {"num": 4, "dtype": "float64"}])
def test_logspace(kw):
    out = _jit_same(lambda: fnp.logspace(0, 3, **kw))
    ref_kw = {k: v for k, v in kw.items() if k != "dtype"}
    want = np.logspace(0, 3, **ref_kw)
    d = np.dtype(kw.get("dtype", "float64"))   # (x64 on: the default float is float64, as JAX)
    assert_close(out, want.astype(d), d)


# ----------------------------------------------------------------------------- matrices


@pytest.mark.parametrize("n,m,k", [(3, None, 0), (3, 5, 1), (4, 2, -1), (2, 3, 5), (0, 3, 0), (3, 3, -3)])
@pytest.mark.parametrize("dtype", [None, "int32", "bool"])
def test_eye_tri_identity(n, m, k, dtype):
    d = F32 if dtype is None else np.dtype(dtype)
    out = _jit_same(lambda: fnp.eye(n, m, k=k, dtype=dtype))
    assert_close(out, np.eye(n, m, k=k).astype(d), d)
    out = _jit_same(lambda: fnp.tri(n, m, k=k, dtype=dtype))
    assert_close(out, np.tri(n, m, k=k).astype(d), d)
    out = _jit_same(lambda: fnp.identity(n, dtype=dtype))
    assert_close(out, np.identity(n).astype(d), d)


@pytest.mark.parametrize("shape", [(4, 4), (3, 5), (2, 3, 4), (0, 3)])
@pytest.mark.parametrize("k", [0, 1, -2])
def test_tril_triu(shape, k):
    x_np = np.arange(np.prod(shape), dtype=np.float32).reshape(shape) + 1
    x = fnp.asarray(x_np)
    for ours, ref in [(fnp.tril, np.tril), (fnp.triu, np.triu)]:
        out = ours(x, k=k)
        assert_close(out, ref(x_np, k=k))
        assert_same(fa.jit(lambda v: ours(v, k=k))(x), out)
        check_traced(lambda v: ours(v, k=k), x)
    with pytest.raises(fa.ShapeError):
        fnp.tril(fnp.ones(3))


@pytest.mark.parametrize("k", [0, 2, -1])
def test_diag_and_diagflat(k):
    v_np = np.array([1.0, -2.0, 3.0], np.float32)
    v = fnp.asarray(v_np)
    out = fnp.diag(v, k=k)
    assert_close(out, np.diag(v_np, k=k))
    assert_same(fa.jit(lambda u: fnp.diag(u, k=k))(v), out)
    check_traced(lambda u: fnp.diag(u, k=k), v)
    m_np = np.arange(6, dtype=np.float32).reshape(2, 3)
    assert_close(fnp.diagflat(fnp.asarray(m_np), k=k), np.diagflat(m_np, k=k))
    with pytest.raises(fa.ShapeError):
        fnp.diag(fnp.ones((2, 2, 2)))


@pytest.mark.parametrize("k", [0, 1, -1])
def test_diag_of_a_matrix(k):
    needs_namespace("diagonal")
    m_np = np.arange(12, dtype=np.float32).reshape(3, 4)
    assert_close(fnp.diag(fnp.asarray(m_np), k=k), np.diag(m_np, k=k))


@pytest.mark.parametrize("indexing", ["xy", "ij"])
def test_meshgrid(indexing):
    a_np, b_np, c_np = np.arange(3, dtype=np.int32), np.linspace(0, 1, 4).astype(np.float32), np.arange(2.0)
    a, b, c = fnp.asarray(a_np), fnp.asarray(b_np), fnp.asarray(c_np)
    for ours_args, np_args in [((a, b), (a_np, b_np)), ((a, b, c), (a_np, b_np, c_np)), ((a,), (a_np,))]:
        out = fnp.meshgrid(*ours_args, indexing=indexing)
        want = np.meshgrid(*np_args, indexing=indexing)
        d = np.result_type(*[x.dtype for x in np_args]) if len(np_args) > 1 else np_args[0].dtype
        if len(np_args) > 1:
            d = fnp.result_type(*ours_args)
        assert len(out) == len(want)
        for o, w in zip(out, want, strict=True):
            assert_close(o, w.astype(d), d)
        jout = fa.jit(lambda *xs: fnp.meshgrid(*xs, indexing=indexing))(*ours_args)
        for o, j in zip(out, jout, strict=True):
            assert_same(j, o)
        check_traced(lambda *xs: fnp.meshgrid(*xs, indexing=indexing), *ours_args)
    with pytest.raises(ValueError, match="indexing"):
        fnp.meshgrid(a, indexing="xx")
    with pytest.raises(fa.ShapeError):
        fnp.meshgrid(fnp.ones((2, 2)))


@pytest.mark.parametrize("dims", [(2, 3), (4,), (2, 1, 3)])
def test_indices(dims):
    needs_namespace("stack")
    out = _jit_same(lambda: fnp.indices(dims))
    assert_close(out, np.indices(dims).astype(np.int32), I32)


@pytest.mark.parametrize("values,dtype", [([300], "uint8"), ([-1], "uint32"), ([2**31], "int32"),
                                          ([[1, 2], [3, 1e10]], "int32"), ([float("nan")], "int32")])
def test_python_values_that_do_not_fit_the_dtype_raise(values, dtype):
    """``asarray([300], dtype=uint8)`` was 44 (wrapped); NumPy 2 and JAX raise, as fnarray does for
    ``asarray(300, dtype=uint8)`` and ``full(2, 300, dtype=uint8)``."""
    with pytest.raises((OverflowError, ValueError)):
        np.asarray(values, dtype=dtype)
    with pytest.raises((OverflowError, ValueError), match=f"requested dtype {dtype}"):
        fnp.asarray(values, dtype=dtype)


def test_python_values_that_fit_convert_as_numpy():
    for values, dtype in [([255, 0], "uint8"), ([1.5, -2.7], "int32"), ([[1, 2]], "float16"), ([1, 0], "bool"),
                          ([1, 2], "bfloat16")]:
        _equal(fnp.asarray(values, dtype=dtype), np.asarray(values, dtype=dtype))
    _equal(fnp.asarray(np.array([300]), dtype="uint8"), np.array([300]).astype(np.uint8))  # astype: wraps


def _equal(got, want):
    got = np.asarray(got)
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape, want.dtype, want.shape)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("args,dtype", [((70_000,), None), ((5, 200_000, 3), None), ((500_000, 5, -7), None),
                                        ((-2**31 + 10, 2**31 - 10, 65_535), None),
                                        ((200_000, 0, -1), "uint32"), ((2**40, 2**40 + 70_000), "int64")])
def test_long_integer_ranges_are_counted_on_the_device(device, args, dtype):
    """A long integer ``arange`` was built on the host in three int64 temporaries (``arange(2**31 - 1)``
    needed ~50 GiB for an 8 GiB result, and was killed) and became a constant under ``jit``; now it is
    an ``iota`` and its arithmetic, with NumPy's values on every backend."""
    kw = {} if dtype is None else {"dtype": dtype}
    want = np.arange(*args, dtype=dtype or np.int32)
    prog = fa.make_ir(lambda: fnp.arange(*args, **kw))()
    assert "iota" in str(prog) and not prog.constvars, prog
    _equal(fa.jit(lambda: fnp.arange(*args, **kw), device=device)(), want)
