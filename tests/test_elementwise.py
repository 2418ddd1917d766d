"""Every elementwise function of ``fnarray.numpy`` against NumPy in float64.

Each function runs on random float32, float64 and integer inputs (complex64 and
bool where defined), with broadcasting, 0-d and empty shapes and a Python-scalar
operand. The result's dtype comes from the oracle (JAX's promotion, 32-bit
defaults); its values from NumPy computed in float64 (exactly, for integers).
Every case also checks ``jit(f)(x) == f(x)`` and runs the verifier on ``make_ir(f)``.
"""

from __future__ import annotations

import math
from typing import Callable, NamedTuple

import numpy as np
import pytest

import fnarray as fa
import fnarray.numpy as fnp
from helpers import (assert_close, assert_same, check_traced, int_div_ref, int_rem_ref, oracle_promote,
                     random_array, shift_ref, to_inexact)

F32, F64, I32 = np.dtype("float32"), np.dtype("float64"), np.dtype("int32")


def _is_int(a) -> bool:
    return np.asarray(a).dtype.kind in "iu"


def _int_or(float_fn, int_fn):
    def f(*xs):
        return int_fn(*xs) if all(_is_int(x) for x in xs) else float_fn(*xs)
    return f


def _int_fmod(x, y):
    with np.errstate(all="ignore"):
        return np.where(y == 0, 0, np.fmod(x, np.where(y == 0, 1, y))).astype(np.result_type(x, y))


def _erf(x):
    return np.vectorize(math.erf, otypes=[np.float64])(x)


def _erfinv(y):
    """Inverse error function by bisection on ``math.erf`` (independent of fnarray's approximation)."""
    y = np.asarray(y, np.float64)
    lo, hi = np.full(y.shape, -7.0), np.full(y.shape, 7.0)
    for _ in range(80):
        mid = (lo + hi) / 2
        below = _erf(mid) < y
        lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
    out = (lo + hi) / 2
    return np.where(y == 1, np.inf, np.where(y == -1, -np.inf, np.where(np.abs(y) > 1, np.nan, out)))


def _shift(direction):
    def f(x, y):
        return shift_ref(x, np.asarray(y).astype(np.asarray(x).dtype), direction)
    return f


def _right_shift(x, y):
    return _shift("right")(x, y)


class Spec(NamedTuple):
    name: str
    ref: Callable
    nargs: int
    kind: str                      # float | same | bool | real | realf (float, then real) | f64
    dtypes: tuple
    domain: tuple = (-3.0, 3.0)    # floats of argument 1 (and 2 unless domain2)
    int_domain: tuple = (-3, 3)
    domain2: tuple | None = None
    int_domain2: tuple | None = None
    in_result_dtype: bool = False  # compute the reference in the result dtype (nextafter)


FL = ("float32", "float64")
NUM = FL + ("int32",)
NUMC = NUM + ("complex64",)
INTS = ("int8", "uint8", "int32")
INTB = INTS + ("bool",)
ANY = NUMC + ("bool",)

SPECS = [
    # unary, floating result
    Spec("exp", np.exp, 1, "float", NUMC),
    Spec("exp2", np.exp2, 1, "float", NUM),
    Spec("expm1", np.expm1, 1, "float", NUM),
    Spec("log", np.log, 1, "float", NUMC, (0.05, 5.0), (1, 9)),
    Spec("log1p", np.log1p, 1, "float", NUM, (-0.9, 5.0), (0, 9)),
    Spec("log2", np.log2, 1, "float", NUM, (0.05, 5.0), (1, 9)),
    Spec("log10", np.log10, 1, "float", NUM, (0.05, 5.0), (1, 9)),
    Spec("sin", np.sin, 1, "float", NUMC),
    Spec("cos", np.cos, 1, "float", NUMC),
    Spec("tan", np.tan, 1, "float", NUM, (-1.4, 1.4), (-1, 1)),
    Spec("asin", np.arcsin, 1, "float", NUM, (-0.95, 0.95), (-1, 1)),
    Spec("arcsin", np.arcsin, 1, "float", FL, (-0.95, 0.95)),
    Spec("acos", np.arccos, 1, "float", NUM, (-0.95, 0.95), (-1, 1)),
    Spec("arccos", np.arccos, 1, "float", FL, (-0.95, 0.95)),
    Spec("atan", np.arctan, 1, "float", NUM),
    Spec("arctan", np.arctan, 1, "float", FL),
    Spec("sinh", np.sinh, 1, "float", NUM),
    Spec("cosh", np.cosh, 1, "float", NUM),
    Spec("tanh", np.tanh, 1, "float", NUMC),
    Spec("asinh", np.arcsinh, 1, "float", NUM),
    Spec("arcsinh", np.arcsinh, 1, "float", FL),
    Spec("acosh", np.arccosh, 1, "float", NUM, (1.05, 5.0), (1, 9)),
    Spec("arccosh", np.arccosh, 1, "float", FL, (1.05, 5.0)),
    Spec("atanh", np.arctanh, 1, "float", NUM, (-0.95, 0.95), (-1, 1)),
    Spec("arctanh", np.arctanh, 1, "float", FL, (-0.95, 0.95)),
    Spec("sqrt", np.sqrt, 1, "float", NUMC, (0.0, 5.0), (0, 9)),
    Spec("cbrt", np.cbrt, 1, "float", NUM),
    Spec("erf", _erf, 1, "float", NUM),
    Spec("erfc", lambda x: 1 - _erf(x), 1, "float", NUM),
    Spec("erfinv", _erfinv, 1, "float", NUM, (-0.95, 0.95), (-1, 1)),
    Spec("deg2rad", np.deg2rad, 1, "float", NUM, (-360, 360), (-360, 360)),
    Spec("radians", np.deg2rad, 1, "float", FL, (-360, 360)),
    Spec("rad2deg", np.rad2deg, 1, "float", NUM),
    Spec("degrees", np.rad2deg, 1, "float", FL),
    Spec("reciprocal", lambda x: 1 / x, 1, "float", NUMC, (0.2, 3.0), (1, 5)),
    Spec("sinc", np.sinc, 1, "float", NUM),
    Spec("angle", np.angle, 1, "realf", NUMC),
    # unary, same dtype
    Spec("abs", np.abs, 1, "real", NUMC + INTS),
    Spec("absolute", np.abs, 1, "real", NUM),
    Spec("negative", np.negative, 1, "same", NUMC + INTS),
    Spec("positive", np.positive, 1, "same", NUMC + INTS),
    Spec("sign", np.sign, 1, "same", NUMC + INTS),
    Spec("floor", np.floor, 1, "same", NUM + INTS),
    Spec("ceil", np.ceil, 1, "same", NUM + INTS),
    Spec("trunc", np.trunc, 1, "same", NUM + INTS),
    Spec("round", np.round, 1, "same", NUMC + INTS, (-4.0, 4.0)),
    Spec("square", np.square, 1, "same", NUMC + INTS),
    Spec("conj", np.conj, 1, "same", NUMC),
    Spec("conjugate", np.conj, 1, "same", NUMC),
    Spec("real", np.real, 1, "real", NUMC),
    Spec("imag", np.imag, 1, "real", NUMC),
    Spec("bitwise_invert", np.invert, 1, "same", INTB),
    Spec("invert", np.invert, 1, "same", INTB),
    Spec("bitwise_not", np.invert, 1, "same", INTB),
    Spec("logical_not", np.logical_not, 1, "bool", ANY),
    # unary, bool result
    Spec("isfinite", np.isfinite, 1, "bool", NUMC),
    Spec("isinf", np.isinf, 1, "bool", NUMC),
    Spec("isnan", np.isnan, 1, "bool", NUMC),
    Spec("signbit", np.signbit, 1, "bool", NUM + INTS),
    Spec("isreal", np.isreal, 1, "bool", NUMC),
    Spec("iscomplex", np.iscomplex, 1, "bool", NUMC),
    # binary, promoted dtype
    Spec("add", np.add, 2, "same", ANY + INTS),
    Spec("subtract", np.subtract, 2, "same", NUMC + INTS),
    Spec("multiply", np.multiply, 2, "same", ANY + INTS),
    Spec("maximum", np.maximum, 2, "same", NUM + INTS),
    Spec("minimum", np.minimum, 2, "same", NUM + INTS),
    Spec("fmax", np.fmax, 2, "same", NUM + INTS),
    Spec("fmin", np.fmin, 2, "same", NUM + INTS),
    Spec("floor_divide", _int_or(np.floor_divide, int_div_ref), 2, "same", NUM + INTS),
    Spec("remainder", _int_or(np.remainder, int_rem_ref), 2, "same", NUM + INTS),
    Spec("mod", _int_or(np.remainder, int_rem_ref), 2, "same", NUM + INTS),
    Spec("fmod", _int_or(np.fmod, _int_fmod), 2, "same", NUM + INTS),
    Spec("pow", np.power, 2, "same", NUMC + INTS, (0.1, 3.0), (-3, 3), (-2.0, 2.0), (0, 4)),
    Spec("power", np.power, 2, "same", NUM, (0.1, 3.0), (-3, 3), (-2.0, 2.0), (0, 4)),
    Spec("bitwise_and", np.bitwise_and, 2, "same", INTB),
    Spec("bitwise_or", np.bitwise_or, 2, "same", INTB),
    Spec("bitwise_xor", np.bitwise_xor, 2, "same", INTB),
    Spec("bitwise_left_shift", _shift("left"), 2, "same", INTS, int_domain=(0, 7), int_domain2=(0, 7)),
    Spec("left_shift", _shift("left"), 2, "same", INTS, int_domain=(0, 7), int_domain2=(0, 7)),
    Spec("bitwise_right_shift", _right_shift, 2, "same", INTS, int_domain=(-100, 100), int_domain2=(0, 7)),
    Spec("right_shift", _right_shift, 2, "same", INTS, int_domain=(-100, 100), int_domain2=(0, 7)),
    Spec("gcd", np.gcd, 2, "same", INTS, int_domain=(-30, 30)),
    Spec("lcm", np.lcm, 2, "same", ("int8", "int32"), int_domain=(-10, 10)),
    # binary, floating result
    Spec("divide", np.true_divide, 2, "float", NUMC, (0.5, 3.0), (1, 9)),
    Spec("true_divide", np.true_divide, 2, "float", NUM, (0.5, 3.0), (1, 9)),
    Spec("atan2", np.arctan2, 2, "float", NUM),
    Spec("arctan2", np.arctan2, 2, "float", FL),
    Spec("hypot", np.hypot, 2, "float", NUM),
    Spec("copysign", np.copysign, 2, "float", NUM),
    Spec("nextafter", np.nextafter, 2, "float", NUM, in_result_dtype=True),
    Spec("logaddexp", np.logaddexp, 2, "float", NUM),
    Spec("logaddexp2", np.logaddexp2, 2, "float", NUM),
    Spec("heaviside", np.heaviside, 2, "float", FL),
    Spec("float_power", np.float_power, 2, "f64", NUM, (0.1, 3.0), (1, 4), (-2.0, 2.0), (0, 3)),
    # comparisons and logic
    Spec("equal", np.equal, 2, "bool", ANY),
    Spec("not_equal", np.not_equal, 2, "bool", ANY),
    Spec("less", np.less, 2, "bool", NUM + INTB),
    Spec("less_equal", np.less_equal, 2, "bool", NUM + INTB),
    Spec("greater", np.greater, 2, "bool", NUM + INTB),
    Spec("greater_equal", np.greater_equal, 2, "bool", NUM + INTB),
    Spec("logical_and", np.logical_and, 2, "bool", ANY),
    Spec("logical_or", np.logical_or, 2, "bool", ANY),
    Spec("logical_xor", np.logical_xor, 2, "bool", ANY),
]

# Functions with other signatures, tested below by name.
OTHERS = {"clip", "isclose", "nan_to_num", "frexp", "ldexp"}
CASES = [(s, d) for s in SPECS for d in s.dtypes]

UNARY_SHAPES = [(3, 4), (), (0,), (2, 0, 3), (1, 5)]
BINARY_SHAPES = [((3, 4), (3, 4)), ((3, 4), (4,)), ((2, 1, 3), (4, 1)), ((), (5,)), ((0, 3), (1, 3)), ((), ())]


def test_every_elementwise_function_is_tested():
    from fnarray.numpy import _elementwise
    covered = {s.name for s in SPECS} | OTHERS
    assert set(_elementwise.__all__) == covered


def _result_dtype(spec, in_dtypes, scalar=None):
    ops = tuple(in_dtypes) + ((scalar,) if scalar is not None else ())
    d, _ = oracle_promote(*ops) if len(ops) > 1 else (in_dtypes[0], False)
    if spec.kind == "float":
        return to_inexact(d)
    if spec.kind == "bool":
        return np.dtype(bool)
    if spec.kind in ("real", "realf"):
        d = to_inexact(d) if spec.kind == "realf" else d
        return {np.dtype("complex64"): F32, np.dtype("complex128"): F64}.get(d, d)
    if spec.kind == "f64":
        return np.dtype("complex128") if d.kind == "c" else F64
    return d


def _inputs(rng, spec, dtype, shapes):
    out = []
    for i, shape in enumerate(shapes):
        second = i == 1
        if np.dtype(dtype).kind in "iu":
            lo, hi = (spec.int_domain2 if second and spec.int_domain2 else spec.int_domain)
        else:
            lo, hi = (spec.domain2 if second and spec.domain2 else spec.domain)
        out.append(random_array(rng, shape, dtype, lo, hi))
    return out


def _reference(spec, args, dtype):
    if spec.in_result_dtype:
        with np.errstate(all="ignore"):
            return np.asarray(spec.ref(*[np.asarray(a).astype(dtype) for a in args])).astype(dtype)
    if spec.kind == "bool":
        wide = [np.asarray(a) if np.asarray(a).dtype.kind in "biu" else np.asarray(a).astype(
            np.complex128 if np.asarray(a).dtype.kind == "c" else np.float64) for a in args]
        with np.errstate(all="ignore"):
            return np.asarray(spec.ref(*wide))
    if spec.kind in ("same", "real") and dtype.kind in "biu":
        # Integer results: compute exactly in the result dtype (wrap-around as in fnarray).
        with np.errstate(all="ignore"):
            return np.asarray(spec.ref(*[np.asarray(a).astype(dtype) for a in args])).astype(dtype)
    wide_dtype = np.complex128 if dtype.kind == "c" or any(np.asarray(a).dtype.kind == "c" for a in args) \
        else np.float64
    with np.errstate(all="ignore"):
        r = np.asarray(spec.ref(*[np.asarray(a).astype(wide_dtype) if not isinstance(a, (int, float, complex))
                                  else a for a in args]))
        if dtype.kind != "c" and r.dtype.kind == "c":
            r = r.real
        return r.astype(dtype)


def _check_case(fn, spec, args, want_dtype, jit_args=None):
    msg = f"{spec.name}{tuple(getattr(a, 'shape', a) for a in args)} {[getattr(a, 'dtype', type(a)) for a in args]}"
    fa_args = [fnp.asarray(a) if isinstance(a, np.ndarray) else a for a in args]
    out = fn(*fa_args)
    assert_close(out, _reference(spec, args, want_dtype), want_dtype, msg=msg)
    arrays = [a for a in fa_args if isinstance(a, fa.Array)]
    if len(arrays) == len(fa_args):
        assert_same(fa.jit(fn)(*fa_args), out, msg=msg + " under jit")
        check_traced(fn, *fa_args)
    else:  # a Python scalar operand: close over it
        def g(*arrs):
            it = iter(arrs)
            return fn(*[next(it) if isinstance(a, fa.Array) else a for a in fa_args])
        assert_same(fa.jit(g)(*arrays), out, msg=msg + " under jit")
        check_traced(g, *arrays)


@pytest.mark.enable_x64
@pytest.mark.parametrize("spec,dtype", CASES, ids=[f"{s.name}-{d}" for s, d in CASES])
def test_elementwise_against_numpy(spec, dtype):
    rng = np.random.default_rng(abs(hash((spec.name, dtype))) % 2 ** 32)
    fn = getattr(fnp, spec.name)
    dt = np.dtype(dtype)
    if spec.nargs == 1:
        for shape in UNARY_SHAPES:
            (x,) = _inputs(rng, spec, dt, [shape])
            _check_case(fn, spec, [x], _result_dtype(spec, [dt]))
        return
    for shapes in BINARY_SHAPES:
        args = _inputs(rng, spec, dt, shapes)
        _check_case(fn, spec, args, _result_dtype(spec, [dt, dt]))
    # A Python scalar on either side (weak: the array's dtype decides).
    scalar = True if dt == np.bool_ else (2 if dt.kind in "iu" else 1.5)
    (x,) = _inputs(rng, spec, dt, [(4,)])
    _check_case(fn, spec, [x, scalar], _result_dtype(spec, [dt], scalar))
    if spec.name not in ("bitwise_left_shift", "left_shift", "bitwise_right_shift", "right_shift", "float_power",
                         "pow", "power", "nextafter", "heaviside"):
        _check_case(fn, spec, [scalar, x], _result_dtype(spec, [dt], scalar))


MIXED = [("int8", "float32"), ("int32", "float64"), ("uint8", "int8"), ("float32", "float64"), ("int16", "uint32"),
         ("bool", "int32")]
MIXED_FNS = ["add", "multiply", "maximum", "floor_divide", "divide", "equal", "less", "logical_and"]


@pytest.mark.enable_x64
@pytest.mark.parametrize("name", MIXED_FNS)
def test_mixed_dtypes_promote_as_jax(name):
    spec = next(s for s in SPECS if s.name == name)
    rng = np.random.default_rng(7)
    for a, b in MIXED:
        da, db = np.dtype(a), np.dtype(b)
        if (da == np.bool_ or db == np.bool_) and name in ("floor_divide",):
            continue
        x = random_array(rng, (3, 2), da, 1, 5)
        y = random_array(rng, (2,), db, 1, 5)
        _check_case(getattr(fnp, name), spec, [x, y], _result_dtype(spec, [da, db]))


SPECIAL = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-30, -1e-30, 1e30, 1.0, -1.0, 0.5, -2.5], np.float64)
SPECIAL_FNS = ["exp", "expm1", "log", "log1p", "sqrt", "sin", "tanh", "atan", "sinh", "cosh", "cbrt", "erf",
               "abs", "sign", "floor", "ceil", "round", "trunc", "square", "negative", "reciprocal", "isnan",
               "isinf", "isfinite", "signbit", "log2", "asinh"]


@pytest.mark.parametrize("name", SPECIAL_FNS)
@pytest.mark.parametrize("dtype", FL)
def test_special_values_match_numpy(name, dtype):
    spec = next(s for s in SPECS if s.name == name)
    with np.errstate(over="ignore"):
        x = SPECIAL.astype(dtype)
    _check_case(getattr(fnp, name), spec, [x], _result_dtype(spec, [np.dtype(dtype)]))


def test_signbit_and_copysign_see_negative_zero():
    x = fnp.asarray(np.array([-0.0, 0.0, -np.nan, np.nan], np.float32))
    np.testing.assert_array_equal(np.asarray(fnp.signbit(x)), np.signbit(np.array([-0.0, 0.0, -np.nan, np.nan])))
    got = np.asarray(fnp.copysign(fnp.ones(4), x))
    np.testing.assert_array_equal(np.signbit(got), [True, False, True, False])


@pytest.mark.parametrize("dtype", ["int8", "int32", "uint8"])
def test_integer_power_with_negative_exponents_as_jax(dtype):
    jnp = pytest.importorskip("jax.numpy")
    if dtype == "uint8":
        base = np.array([0, 1, 2, 3, 4, 5, 1, 1, 0, 7], dtype)
        exp = np.array([2, 3, 1, 0, 2, 1, 0, 5, 4, 3], dtype)
    else:
        base = np.array([-3, -2, -1, 0, 1, 2, 3, 1, -1, 2, -2, 5], dtype)
        exp = np.array([2, 3, -1, 0, -2, 1, 0, 5, -3, -1, -2, 3], dtype)
    want = np.asarray(jnp.power(jnp.asarray(base), jnp.asarray(exp)))
    for out in (fnp.power(fnp.asarray(base), fnp.asarray(exp)),
                fa.jit(fnp.power)(fnp.asarray(base), fnp.asarray(exp))):
        assert_close(out, want.astype(dtype))


@pytest.mark.parametrize("e", [0, 1, 2, 3, 7, -1, -2])
@pytest.mark.parametrize("dtype", ["float32", "float64", "int32"])
def test_pow_with_a_python_int_exponent(e, dtype):
    if e < 0 and dtype == "int32":  # as jax.numpy: a TypeError that says what to do, eager and traced
        x = fnp.arange(3)
        for f in (lambda: x ** e, lambda: fnp.power(x, e), lambda: fa.jit(lambda v: v ** e)(x)):
            with pytest.raises(TypeError, match="negative Python int power.*float"):
                f()
        return
    x_np = random_array(np.random.default_rng(3), (5,), np.dtype(dtype), 0.5, 3.0)
    x = fnp.asarray(x_np)
    want = np.power(x_np.astype(np.float64), e)
    for out in (x ** e, fnp.pow(x, e), fa.jit(lambda v: v ** e)(x)):
        assert_close(out, want.astype(dtype))
    check_traced(lambda v: v ** e, x)


@pytest.mark.parametrize("dtype", NUM)
def test_clip(dtype):
    rng = np.random.default_rng(1)
    x_np = random_array(rng, (4, 3), np.dtype(dtype), -5, 5)
    x = fnp.asarray(x_np)
    for lo, hi in [(-1, 2), (None, 0), (-2, None), (0.5, 1.5) if dtype != "int32" else (1, 1)]:
        want = np.clip(x_np, lo if lo is not None else -np.inf, hi if hi is not None else np.inf).astype(dtype)
        out = fnp.clip(x, lo, hi)
        assert_close(out, want)
        assert_same(fa.jit(lambda v: fnp.clip(v, lo, hi))(x), out)
        check_traced(lambda v: fnp.clip(v, lo, hi), x)
    lo_arr = random_array(rng, (3,), np.dtype(dtype), -3, 0)
    assert_close(fnp.clip(x, fnp.asarray(lo_arr), 2), np.clip(x_np, lo_arr, 2).astype(dtype))
    nan_x = fnp.asarray(np.array([np.nan, 5.0], np.float32))
    assert np.isnan(np.asarray(fnp.clip(nan_x, 0, 1))[0])


@pytest.mark.parametrize("dtype", FL)
def test_isclose(dtype):
    a = np.array([1.0, 1.0 + 1e-6, 1.0 + 1e-3, np.nan, np.inf, -np.inf, 0.0, 1e-9], dtype)
    b = np.array([1.0, 1.0, 1.0, np.nan, np.inf, np.inf, 1e-9, 0.0], dtype)
    for kw in ({}, {"equal_nan": True}, {"rtol": 1e-2}, {"atol": 1e-8, "rtol": 0.0}):
        want = np.isclose(a.astype(np.float64), b.astype(np.float64), **kw)
        out = fnp.isclose(fnp.asarray(a), fnp.asarray(b), **kw)
        assert_close(out, want)
        check_traced(lambda u, v: fnp.isclose(u, v, **kw), fnp.asarray(a), fnp.asarray(b))
    assert_close(fnp.isclose(fnp.arange(3), 1), np.array([False, True, False]))


@pytest.mark.parametrize("dtype", FL + ("complex64",))
def test_nan_to_num(dtype):
    vals = np.array([np.nan, np.inf, -np.inf, 1.5, -0.0], np.float64)
    x_np = vals.astype(dtype)
    if dtype == "complex64":
        x_np.imag = vals[::-1]
    x = fnp.asarray(x_np)
    for kw in ({}, {"nan": 7.0, "posinf": 1e3, "neginf": -1e3}):
        want = np.nan_to_num(x_np, **kw)
        out = fnp.nan_to_num(x, **kw)
        assert_close(out, want, rtol=0, atol=0)
        assert_same(fa.jit(lambda v: fnp.nan_to_num(v, **kw))(x), out)
        check_traced(lambda v: fnp.nan_to_num(v, **kw), x)
    i = fnp.arange(3)
    assert_close(fnp.nan_to_num(i), np.arange(3, dtype=i.dtype))


@pytest.mark.parametrize("dtype", FL)
def test_frexp_and_ldexp(dtype):
    rng = np.random.default_rng(2)
    x_np = np.concatenate([random_array(rng, (6,), np.dtype(dtype), -100, 100),
                           np.array([0.0, 1.0, 0.5, -8.0, np.inf, np.nan], dtype)])
    x = fnp.asarray(x_np)
    m_want, e_want = np.frexp(x_np)
    m, e = fnp.frexp(x)
    assert_close(m, m_want.astype(dtype), rtol=0, atol=0)
    finite = np.isfinite(x_np)
    assert e.dtype == I32
    np.testing.assert_array_equal(np.asarray(e)[finite], e_want[finite])
    jm, je = fa.jit(fnp.frexp)(x)
    assert_same(jm, m)
    assert_same(je, e)
    check_traced(fnp.frexp, x)
    k_np = np.array([0, 1, -1, 3, -3, 10, 2, 0, 1, -2, 0, 0], np.int32)
    out = fnp.ldexp(x, fnp.asarray(k_np))
    assert_close(out, np.ldexp(x_np, k_np).astype(dtype))
    assert_same(fa.jit(fnp.ldexp)(x, fnp.asarray(k_np)), out)
    assert_close(fnp.ldexp(x, 2), np.ldexp(x_np, 2).astype(dtype))
    check_traced(fnp.ldexp, x, fnp.asarray(k_np))


@pytest.mark.enable_x64
@pytest.mark.parametrize("decimals", [1, 2, -1])
def test_round_with_decimals(decimals):
    x_np = np.array([1.2345, -2.5678, 123.456, 0.05, -0.15], np.float64)
    out = fnp.round(fnp.asarray(x_np), decimals=decimals)
    assert_close(out, np.round(x_np, decimals), rtol=1e-12, atol=1e-12)


def test_elementwise_rejects_what_it_cannot_compute():
    b = fnp.asarray([True, False])
    f = fnp.asarray([1.5, 2.0])
    with pytest.raises(fa.DTypeError):
        fnp.subtract(b, b)
    with pytest.raises(fa.DTypeError):
        fnp.negative(b)
    with pytest.raises(fa.DTypeError):
        fnp.bitwise_and(f, f)
    with pytest.raises(fa.DTypeError):
        fnp.bitwise_left_shift(f, 1)
    with pytest.raises(fa.DTypeError):
        fnp.less(fnp.asarray([1j]), fnp.asarray([2j]))
    with pytest.raises(TypeError, match="asarray"):
        fnp.add(f, [1.0, 2.0])
    with pytest.raises(fa.ShapeError, match=r"\(2,\).*\(3,\)"):
        fnp.multiply(f, fnp.ones(3))


_WEAK_FNS = ["add", "subtract", "multiply", "maximum", "minimum", "fmax", "fmin", "floor_divide", "divide",
             "true_divide", "remainder", "mod", "fmod", "logaddexp", "arctan2", "atan2", "copysign", "nextafter"]
_WEAK_ARGS = [(2, 3), (2.5, 3), (np.arange(3, dtype=np.int8), 1.5), (1.5, np.arange(3, dtype=np.int16)),
              (np.arange(3, dtype=np.float16), 2), (np.arange(3, dtype=np.uint8), 2),
              (np.arange(1, 4, dtype=np.int32), 2.5)]


@pytest.mark.parametrize("name", _WEAK_FNS)
def test_weak_types_of_results_match_jax(name):
    """Python scalars and NumPy arrays together: result dtype, weak type and values as ``jax.numpy``.

    Composite functions mix in strong constants internally; the result must still be weak when
    the operands promote to a weak type.
    """
    jnp = pytest.importorskip("jax.numpy")
    for args in _WEAK_ARGS:
        want = getattr(jnp, name)(*args)
        for as_arrays in (False, True):
            ours_args = [fnp.asarray(a) if as_arrays and isinstance(a, np.ndarray) else a for a in args]
            got = getattr(fnp, name)(*ours_args)
            assert (got.dtype, got.weak_type) == (want.dtype, want.weak_type), (name, args)
            assert_close(got, np.asarray(want), msg=f"{name}{args}")


def _lax_cases():
    """(name, our lax function, jax.lax function, inputs) for elementwise primitives at their edges."""
    import jax.lax as jl
    from fnarray.core import lax

    i8 = np.array([-1, -128, 5, 0, 127], np.int8)
    # (No subnormals: XLA's CPU backend flushes them to zero, NumPy does not; that is not pinned.)
    f32_edges = np.array([-0.0, 0.0, np.nan, -3.0, np.inf, -np.inf, 1e-30], np.float32)
    return [
        ("population_count-i8", lax.population_count, jl.population_count, [i8]),
        ("population_count-u16", lax.population_count, jl.population_count, [np.array([65535, 1, 0], np.uint16)]),
        ("population_count-i32", lax.population_count, jl.population_count, [np.array([-1, -2, 7], np.int32)]),
        ("sign-f32", lax.sign, jl.sign, [f32_edges]),
        ("sign-i8", lax.sign, jl.sign, [i8]),
        ("is_finite", lax.is_finite, jl.is_finite, [f32_edges]),
        ("nextafter", lax.nextafter, jl.nextafter,
         [np.array([0.0, 1.0, np.inf, -0.0, 1.0], np.float32), np.array([1.0, 0.0, 0.0, -1.0, 1.0], np.float32)]),
        ("shift_right_arithmetic-u8", lax.shift_right_arithmetic, jl.shift_right_arithmetic,
         [np.array([200, 7, 255], np.uint8), np.array([1, 9, 8], np.uint8)]),
        ("shift_right_logical-i8", lax.shift_right_logical, jl.shift_right_logical,
         [np.array([-128, -1, 64], np.int8), np.array([1, 7, 8], np.int8)]),
        ("shift_left-i16", lax.shift_left, jl.shift_left,
         [np.array([1, -1, 3], np.int16), np.array([15, 16, 40], np.int16)]),
        # (Division by zero differs on purpose: fnarray pins 0, see test_semantics.)
        ("div-i32", lax.div, jl.div, [np.array([-7, 7, -8, 9, 5], np.int32), np.array([3, -3, -3, 2, 1], np.int32)]),
        ("rem-i32", lax.rem, jl.rem, [np.array([-7, 7, -8, 9, 5], np.int32), np.array([3, -3, -3, 2, 1], np.int32)]),
        ("rem-f32", lax.rem, jl.rem,
         [np.array([-7.5, 7.5, 1.0], np.float32), np.array([2.0, -2.0, np.inf], np.float32)]),
        ("atan2-zeros", lax.atan2, jl.atan2,
         [np.array([0.0, -0.0, 0.0, -0.0], np.float32), np.array([-1.0, -1.0, 0.0, -0.0], np.float32)]),
        ("logistic", lax.logistic, jl.logistic, [np.array([-100.0, -5.0, 0.0, 5.0, 100.0], np.float32)]),
        ("cbrt", lax.cbrt, jl.cbrt, [np.array([-8.0, -0.001, 27.0, 0.0], np.float32)]),
        ("rsqrt", lax.rsqrt, jl.rsqrt, [np.array([4.0, 0.0, np.inf, 1e-20], np.float32)]),
        ("erf_inv", lax.erf_inv, jl.erf_inv, [np.array([-0.999, -0.5, 0.0, 0.3, 0.9999, 1.0, -1.0], np.float32)]),
        ("lgamma-f64", lax.lgamma, jl.lgamma, [np.array([-2.5, 0.5, 3.0, 1e-3, 30.0, 171.5])]),
        ("digamma-f64", lax.digamma, jl.digamma, [np.array([-2.5, 0.5, 3.0, 1e-3, 30.0, 1e4])]),
        ("round-half-even", lax.round, lambda x: jl.round(x, jl.RoundingMethod.TO_NEAREST_EVEN),
         [np.array([0.5, 1.5, 2.5, -0.5, -2.5, 2.4999998], np.float32)]),
        ("integer_pow", lambda x: lax.integer_pow(x, -3), lambda x: jl.integer_pow(x, -3),
         [np.array([2.0, -0.5, 0.0], np.float32)]),
        ("f32->u32", lambda x: lax.convert_element_type(x, np.uint32),
         lambda x: jl.convert_element_type(x, np.uint32), [np.array([3e9, -1.5, 5e9, 2.9], np.float32)]),
        ("i32->u8", lambda x: lax.convert_element_type(x, np.uint8),
         lambda x: jl.convert_element_type(x, np.uint8), [np.array([300, -1, 255, 256], np.int32)]),
        ("f32->bool", lambda x: lax.convert_element_type(x, np.bool_),
         lambda x: jl.convert_element_type(x, np.bool_), [np.array([np.nan, 0.0, -0.0, 2.0], np.float32)]),
    ]


_N_LAX_CASES = 25


@pytest.mark.enable_x64
@pytest.mark.parametrize("case", range(_N_LAX_CASES))
def test_primitive_edge_cases_match_jax_lax(case):
    """The elementwise primitives at their edges (signed zeros, NaN, bit patterns, widths) as ``jax.lax``."""
    jax = pytest.importorskip("jax")
    cases = _lax_cases()
    assert len(cases) == _N_LAX_CASES
    name, ours, theirs, inputs = cases[case]
    with jax.enable_x64(True):
        want = np.asarray(theirs(*[jax.numpy.asarray(a) for a in inputs]))
    got = ours(*[fnp.asarray(a) for a in inputs])
    assert_close(got, want, msg=name)
    if want.dtype.kind == "f":
        np.testing.assert_array_equal(np.signbit(np.asarray(got)), np.signbit(want), err_msg=f"{name}: signs")
    assert_same(fa.jit(ours)(*[fnp.asarray(a) for a in inputs]), got, msg=name)


def test_isclose_on_integers_applies_the_tolerances():
    # NumPy and jax.numpy compare integers in float with the tolerances (was: plain equality).
    a, b = np.array([1, 5, 100], np.int32), np.array([2, 5, 103], np.int32)
    for kw in ({"atol": 1}, {"rtol": 0.02}, {}):
        assert_close(fnp.isclose(fnp.asarray(a), fnp.asarray(b), **kw), np.isclose(a, b, **kw))
    assert bool(fnp.isclose(True, False, atol=1)) == bool(np.isclose(True, False, atol=1))


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16", "int32", "uint32"])
@pytest.mark.parametrize("decimals", [-1, -2, -3, -12])
def test_round_integers_with_negative_decimals(dtype, decimals):
    info = np.iinfo(dtype)
    vals = np.array([-250, -150, -125, -25, -15, -5, 0, 5, 15, 25, 35, 45, 50, 94, 95, 96, 125, 150, 250, 1000, 2500],
                    np.int64)
    x = np.clip(vals, info.min, info.max).astype(dtype)  # (the dtype's extremes would overflow when rounded up)
    want = np.round(x, decimals)  # NumPy: half to even in integer arithmetic
    assert_close(fnp.round(fnp.asarray(x), decimals=decimals), want, rtol=0, atol=0)
    assert_close(fa.jit(lambda v: fnp.round(v, decimals=decimals))(fnp.asarray(x)), want, rtol=0, atol=0)


def test_gcd_lcm_reject_floats():
    for f in (fnp.gcd, fnp.lcm):
        with pytest.raises(fa.DTypeError, match="integer"):
            f(1.5, 18)
        with pytest.raises(fa.DTypeError, match="integer"):
            f(fnp.asarray([True]), fnp.asarray([False]))


@pytest.mark.enable_x64
def test_float_power_keeps_complex():
    z = np.array([1j, 1 + 2j, -3.0 + 0j], np.complex64)
    out = fnp.float_power(fnp.asarray(z), 2)
    assert out.dtype == np.complex128
    assert_close(out, np.float_power(z, 2))
    assert fnp.float_power(fnp.asarray(np.float32(2.0)), 3).dtype == np.float64
