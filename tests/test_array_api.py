"""A fast, self-contained check of ``fnarray.numpy`` against the array API standard 2024.12.

The external conformance suite (data-apis/array-api-tests, see ``docs/array_api.md``)
is the thorough check; this file keeps a representative subset in the test suite without
it: the names of the main namespace, the inspection API, dtype objects and the
data-type functions (against NumPy as the reference), the array object's namespace
hook, and the special cases that the suite once found broken. Where fnarray differs
from the standard on purpose (docs/design.md) the tests check fnarray's pinned behaviour.
"""

from __future__ import annotations

import itertools
import math
import pathlib

import numpy as np
import pytest

import fnarray as fa
import fnarray.numpy as fnp
from helpers import assert_close, check_traced

# ------------------------------------------------------------------ the 2024.12 main namespace

# Constants, functions and dtypes of the standard's main namespace (extensions excluded).
CONSTANTS = ("e", "inf", "nan", "newaxis", "pi")
CREATION = ("arange", "asarray", "empty", "empty_like", "eye", "from_dlpack", "full", "full_like",
            "linspace", "meshgrid", "ones", "ones_like", "tril", "triu", "zeros", "zeros_like")
DATA_TYPE_FUNCTIONS = ("astype", "can_cast", "finfo", "iinfo", "isdtype", "result_type")
ELEMENTWISE = (
    "abs", "acos", "acosh", "add", "asin", "asinh", "atan", "atan2", "atanh", "bitwise_and",
    "bitwise_left_shift", "bitwise_invert", "bitwise_or", "bitwise_right_shift", "bitwise_xor",
    "ceil", "clip", "conj", "copysign", "cos", "cosh", "divide", "equal", "exp", "expm1", "floor",
    "floor_divide", "greater", "greater_equal", "hypot", "imag", "isfinite", "isinf", "isnan",
    "less", "less_equal", "log", "log1p", "log2", "log10", "logaddexp", "logical_and",
    "logical_not", "logical_or", "logical_xor", "maximum", "minimum", "multiply", "negative",
    "nextafter", "not_equal", "positive", "pow", "real", "reciprocal", "remainder", "round", "sign",
    "signbit", "sin", "sinh", "square", "sqrt", "subtract", "tan", "tanh", "trunc")
INDEXING = ("take", "take_along_axis")
LINEAR_ALGEBRA = ("matmul", "matrix_transpose", "tensordot", "vecdot")
MANIPULATION = ("broadcast_arrays", "broadcast_to", "concat", "expand_dims", "flip", "moveaxis",
                "permute_dims", "repeat", "reshape", "roll", "squeeze", "stack", "tile", "unstack")
SEARCHING = ("argmax", "argmin", "count_nonzero", "nonzero", "searchsorted", "where")
SET = ("unique_all", "unique_counts", "unique_inverse", "unique_values")
SORTING = ("argsort", "sort")
STATISTICAL = ("cumulative_sum", "cumulative_prod", "max", "mean", "min", "prod", "std", "sum", "var")
UTILITY = ("all", "any", "diff")
DTYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
          "float32", "float64", "complex64", "complex128")
INSPECTION = ("__array_namespace_info__", "__array_api_version__")

MAIN_NAMESPACE = (CONSTANTS + CREATION + DATA_TYPE_FUNCTIONS + ELEMENTWISE + INDEXING + LINEAR_ALGEBRA
                  + MANIPULATION + SEARCHING + SET + SORTING + STATISTICAL + UTILITY + DTYPES + INSPECTION)

ARRAY_ATTRIBUTES = ("dtype", "device", "mT", "ndim", "shape", "size", "T")
ARRAY_METHODS = (
    "__abs__", "__add__", "__and__", "__array_namespace__", "__bool__", "__complex__", "__dlpack__",
    "__dlpack_device__", "__eq__", "__float__", "__floordiv__", "__ge__", "__getitem__", "__gt__",
    "__index__", "__int__", "__invert__", "__le__", "__lshift__", "__lt__", "__matmul__", "__mod__",
    "__mul__", "__ne__", "__neg__", "__or__", "__pos__", "__pow__", "__rshift__", "__setitem__",
    "__sub__", "__truediv__", "__xor__", "to_device")

# The standard's dtypes spelled with NumPy, the independent reference for their properties.
NP_DTYPES = {name: np.dtype(name) for name in DTYPES}
INTS = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
FLOATS = ("float32", "float64")
COMPLEX = ("complex64", "complex128")


def test_namespace_has_every_name_of_the_standard():
    assert len(ELEMENTWISE) == 67 and len(MAIN_NAMESPACE) == len(set(MAIN_NAMESPACE))
    missing = [n for n in MAIN_NAMESPACE if not hasattr(fnp, n)]
    assert not missing, f"fnarray.numpy lacks {missing}"
    assert fnp.__array_api_version__ == "2024.12"
    for name in MAIN_NAMESPACE:
        if name not in CONSTANTS + DTYPES + ("__array_api_version__",):
            assert callable(getattr(fnp, name)), name


def test_constants_match_python_math():
    assert fnp.e == math.e and fnp.pi == math.pi
    assert fnp.inf == math.inf and math.isnan(fnp.nan)
    assert fnp.newaxis is None


def test_array_object_has_every_attribute_and_method():
    x = fnp.ones((2, 3))
    missing = [n for n in ARRAY_ATTRIBUTES + ARRAY_METHODS if not hasattr(x, n)]
    assert not missing, f"Array lacks {missing}"
    assert (x.ndim, x.shape, x.size) == (2, (2, 3), 6)
    assert x.mT.shape == (3, 2) and x.T.shape == (3, 2)
    assert x.to_device(x.device).device == x.device


def test_array_namespace_is_the_module():
    x = fnp.asarray([1.0, 2.0])
    assert x.__array_namespace__() is fnp
    assert x.__array_namespace__(api_version="2024.12") is fnp
    with pytest.raises(ValueError, match="2024.12"):
        x.__array_namespace__(api_version="2019.01")
    # Under a transformation too: tracers answer with the same namespace.
    seen = []
    fa.jit(lambda v: seen.append(v.__array_namespace__()) or v)(x)
    assert seen == [fnp]


def test_setitem_is_refused_with_a_pointer_to_at():
    # docs/design.md: arrays are immutable; the one deliberate gap in the array object.
    x = fnp.zeros(3)
    with pytest.raises(TypeError, match=r"\.at\["):
        x[0] = 1.0


# ------------------------------------------------------------------------ inspection API


def test_namespace_info_answers():
    info = fnp.__array_namespace_info__()
    caps = info.capabilities()
    assert set(caps) >= {"boolean indexing", "data-dependent shapes", "max dimensions"}
    assert isinstance(caps["boolean indexing"], bool) and isinstance(caps["data-dependent shapes"], bool)
    assert caps["max dimensions"] is None or caps["max dimensions"] >= 8
    devs = info.devices()
    assert info.default_device() in devs
    assert fnp.ones(2).device == info.default_device()
    # docs/design.md: 32-bit defaults, indices int32.
    assert info.default_dtypes() == {"real floating": fnp.float32, "complex floating": fnp.complex64,
                                     "integral": fnp.int32, "indexing": fnp.int32}
    assert info.default_dtypes(device=info.default_device()) == info.default_dtypes()
    every = info.dtypes()
    assert {k: np.dtype(v) for k, v in every.items()} == NP_DTYPES
    kinds = {"bool": ("bool",), "signed integer": INTS[:4], "unsigned integer": INTS[4:],
             "integral": INTS, "real floating": FLOATS, "complex floating": COMPLEX,
             "numeric": INTS + FLOATS + COMPLEX}
    for kind, names in kinds.items():
        assert set(info.dtypes(kind=kind)) == set(names), kind
    assert set(info.dtypes(kind=("bool", "complex floating"))) == {"bool", *COMPLEX}


def test_default_dtypes_of_creation_follow_info():
    d = fnp.__array_namespace_info__().default_dtypes()
    assert fnp.asarray(1.5).dtype == d["real floating"]
    assert fnp.asarray(2).dtype == d["integral"]
    assert fnp.asarray(1j).dtype == d["complex floating"]
    assert fnp.arange(3).dtype == d["integral"] and fnp.argmax(fnp.ones(3)).dtype == d["indexing"]
    assert fnp.ones(2).dtype == d["real floating"]


# ---------------------------------------------------------------- dtypes and their functions


@pytest.mark.enable_x64
def test_dtype_objects_compare_by_value():
    for name in DTYPES:
        d = getattr(fnp, name)
        assert d == NP_DTYPES[name] and d == getattr(fnp, name)
        assert fnp.asarray(np.zeros(1, NP_DTYPES[name])).dtype == d
    for a, b in itertools.combinations(DTYPES, 2):
        assert getattr(fnp, a) != getattr(fnp, b), (a, b)


def _np_kind(name: str, kind) -> bool:
    """The standard's kinds, decided from NumPy's dtype.kind letters."""
    k = NP_DTYPES[name].kind
    table = {"bool": k == "b", "signed integer": k == "i", "unsigned integer": k == "u",
             "integral": k in "iu", "real floating": k == "f", "complex floating": k == "c",
             "numeric": k in "iufc"}
    if isinstance(kind, tuple):
        return any(_np_kind(name, x) for x in kind)
    if isinstance(kind, str):
        return table[kind]
    return NP_DTYPES[name] == np.dtype(kind)


@pytest.mark.parametrize("name", DTYPES)
def test_isdtype(name):
    d = getattr(fnp, name)
    kinds = ["bool", "signed integer", "unsigned integer", "integral", "real floating",
             "complex floating", "numeric", ("integral", "real floating"), ("bool",),
             fnp.float32, fnp.int64, (fnp.uint8, "complex floating")]
    for kind in kinds:
        assert fnp.isdtype(d, kind) == _np_kind(name, kind), (name, kind)
    with pytest.raises(ValueError):
        fnp.isdtype(d, "floating-ish")


def _same_category(a: str, b: str) -> bool:
    """Pairs whose promotion the standard defines: bool-bool, integer-integer, float/complex."""
    cat = {"b": 0, "i": 1, "u": 1, "f": 2, "c": 2}
    ka, kb = NP_DTYPES[a].kind, NP_DTYPES[b].kind
    if cat[ka] != cat[kb]:
        return False
    # uint64 with a signed integer has no result in the standard.
    return not ({ka, kb} == {"i", "u"} and "uint64" in (a, b))


STANDARD_PAIRS = [(a, b) for a in DTYPES for b in DTYPES if _same_category(a, b)]


@pytest.mark.enable_x64
def test_result_type_follows_the_standard_table():
    # NumPy's promotion agrees with the standard's table on every pair the table defines.
    for a, b in STANDARD_PAIRS:
        got = fnp.result_type(getattr(fnp, a), getattr(fnp, b))
        assert got == np.result_type(NP_DTYPES[a], NP_DTYPES[b]), (a, b)
        arr = fnp.zeros(2, dtype=getattr(fnp, a))
        assert fnp.result_type(arr, getattr(fnp, b)) == got
    assert fnp.result_type(fnp.int8, fnp.uint8, fnp.int16) == fnp.int16
    assert fnp.result_type(fnp.float32, fnp.complex64, fnp.float64) == fnp.complex128
    with pytest.raises(ValueError):
        fnp.result_type()


@pytest.mark.enable_x64
def test_result_type_with_python_scalars():
    # 2024.12: a Python scalar of a compatible kind takes the array's dtype.
    for name in INTS + FLOATS + COMPLEX:
        x = fnp.zeros(2, dtype=getattr(fnp, name))
        assert fnp.result_type(x, 1) == getattr(fnp, name), name
        if name not in INTS:
            assert fnp.result_type(x, 1.5) == getattr(fnp, name), name
    assert fnp.result_type(fnp.zeros(2, dtype=fnp.bool), True) == fnp.bool
    assert fnp.result_type(fnp.zeros(2, dtype=fnp.float64), 1j) == fnp.complex128


@pytest.mark.enable_x64
def test_can_cast_is_safe_casting_within_a_category():
    for a, b in STANDARD_PAIRS:
        want = bool(np.can_cast(NP_DTYPES[a], NP_DTYPES[b], casting="safe"))
        assert fnp.can_cast(getattr(fnp, a), getattr(fnp, b)) == want, (a, b)
        assert fnp.can_cast(fnp.zeros(1, dtype=getattr(fnp, a)), getattr(fnp, b)) == want, (a, b)
    # Never from a float to an integer, or from complex to real.
    assert not fnp.can_cast(fnp.float32, fnp.int64)
    assert not fnp.can_cast(fnp.complex64, fnp.float64)


@pytest.mark.parametrize("name", FLOATS + COMPLEX)
def test_finfo(name):
    real = np.finfo(NP_DTYPES[name])  # NumPy's finfo of a complex dtype describes its real part
    for arg in (getattr(fnp, name), fnp.zeros(2, dtype=getattr(fnp, name))):
        fi = fnp.finfo(arg)
        assert fi.bits == real.bits
        for attr in ("eps", "max", "min", "smallest_normal"):
            v = getattr(fi, attr)
            assert isinstance(v, float) and v == float(getattr(real, attr)), attr
        assert fi.dtype == real.dtype and fnp.isdtype(fi.dtype, "real floating")


@pytest.mark.parametrize("name", INTS)
def test_iinfo(name):
    ref = np.iinfo(NP_DTYPES[name])
    for arg in (getattr(fnp, name), fnp.zeros(2, dtype=getattr(fnp, name))):
        ii = fnp.iinfo(arg)
        assert (ii.bits, ii.max, ii.min) == (ref.bits, ref.max, ref.min)
        assert isinstance(ii.max, int) and isinstance(ii.min, int)
        assert ii.dtype == NP_DTYPES[name]


@pytest.mark.enable_x64
def test_astype_and_copy_semantics():
    x = fnp.asarray(np.array([1.7, -2.2, 3.0], np.float64))
    for name in INTS[:4] + FLOATS + COMPLEX:
        y = fnp.astype(x, getattr(fnp, name))
        assert_close(y, np.array([1.7, -2.2, 3.0]).astype(NP_DTYPES[name]), msg=name)
    assert fnp.astype(x, fnp.float64, copy=False).dtype == fnp.float64
    assert fnp.astype(x, fnp.float32, device=x.device).device == x.device


# ------------------------------------------------------------ cases the suite once found broken


def test_expand_dims_out_of_range_axis_is_an_index_error():
    x = fnp.ones(())
    with pytest.raises(IndexError):
        fnp.expand_dims(x, axis=-2)
    with pytest.raises(IndexError):
        fnp.expand_dims(fnp.ones((2, 3)), axis=3)
    assert fnp.expand_dims(fnp.ones((2, 3)), axis=-3).shape == np.expand_dims(np.ones((2, 3)), -3).shape


@pytest.mark.parametrize("k", [2**31, -(2**31) - 5, 2**40, 3, -2])
def test_eye_tril_triu_accept_any_diagonal(k):
    assert_close(fnp.eye(3, 4, k=k), np.eye(3, 4, k=k, dtype=np.float32))
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    assert_close(fnp.tril(fnp.asarray(a), k=k), np.tril(a, k=k))
    assert_close(fnp.triu(fnp.asarray(a), k=k), np.triu(a, k=k))


def _floor_div_spec(x: float, y: float) -> float:
    """The standard's special cases of floor_divide are the floor of IEEE true division (signed zeros kept)."""
    with np.errstate(all="ignore"):
        return float(np.floor(np.float64(x) / np.float64(y)))


def test_floor_divide_signed_zeros_and_infinities():
    xs = [-0.0, 0.0, 1.0, -1.0, 7.0, -7.0, 2.5, math.inf, -math.inf]
    ys = [2.0, -2.0, math.inf, -math.inf, 0.5, -3.0]
    pairs = [(x, y) for x in xs for y in ys]
    x = np.array([p[0] for p in pairs], np.float32)
    y = np.array([p[1] for p in pairs], np.float32)
    want = np.array([_floor_div_spec(a, b) for a, b in pairs], np.float32)
    for got in (fnp.floor_divide(fnp.asarray(x), fnp.asarray(y)), fa.jit(fnp.floor_divide)(x, y),
                fnp.asarray(x) // fnp.asarray(y)):
        g = np.asarray(got)
        np.testing.assert_array_equal(g, want)
        np.testing.assert_array_equal(np.signbit(g), np.signbit(want), err_msg=str(pairs))
    check_traced(fnp.floor_divide, fnp.asarray(x), fnp.asarray(y))


# expm1 special cases of the standard for complex input: (real, imag) -> (real, imag); None: either sign.
EXPM1_CASES = [
    ((0.0, 0.0), (0.0, 0.0)),
    ((-0.0, 0.0), (0.0, 0.0)),
    ((1.0, math.inf), (math.nan, math.nan)),
    ((1.0, math.nan), (math.nan, math.nan)),
    ((math.inf, 0.0), (math.inf, 0.0)),
    ((-math.inf, 2.0), (-1.0, math.copysign(0.0, math.sin(2.0)))),
    ((-math.inf, math.inf), (-1.0, None)),
    ((math.inf, math.inf), (None, math.nan)),
    ((-math.inf, math.nan), (-1.0, None)),
    ((math.inf, math.nan), (None, math.nan)),
    ((math.nan, 0.0), (math.nan, 0.0)),
    ((math.nan, 1.0), (math.nan, math.nan)),
    ((math.nan, math.nan), (math.nan, math.nan)),
]


def _matches(got: float, want) -> bool:
    if want is None:
        return True
    if math.isnan(want):
        return math.isnan(got)
    if want == 0 or math.isinf(want):
        return got == want and math.copysign(1, got) == math.copysign(1, want)
    return got == want


def test_complex_expm1_special_cases():
    z = np.array([complex(*c[0]) for c in EXPM1_CASES], np.complex64)
    for got in (fnp.expm1(fnp.asarray(z)), fa.jit(fnp.expm1)(z)):
        assert got.dtype == fnp.complex64
        for (case, (re, im)), g in zip(EXPM1_CASES, np.asarray(got), strict=True):
            assert _matches(float(g.real), re) and _matches(float(g.imag), im), (case, g)
    check_traced(fnp.expm1, fnp.asarray(z))


@pytest.mark.enable_x64
def test_complex_expm1_finite_values_match_numpy():
    rng = np.random.default_rng(7)
    z = (rng.uniform(-3, 3, 64) + 1j * rng.uniform(-4, 4, 64)).astype(np.complex64)
    z[:4] = [1e-5 + 2e-5j, -3e-6j, 4e-7, 0.5 - 1j]
    ref = np.expm1(z.astype(np.complex128))
    assert_close(fnp.expm1(fnp.asarray(z)), ref.astype(np.complex64))
    z64 = z.astype(np.complex128)
    assert_close(fnp.expm1(fnp.asarray(z64)), ref, rtol=1e-12, atol=1e-14)


# tanh special cases at an infinite real part: the zero imaginary part takes b's sign (tanh is odd
# and conjugate-symmetric), where C99's ctanh gives 0 * sin(2b).
TANH_CASES = [
    ((math.inf, 3.0), (1.0, 0.0)),
    ((math.inf, 0.5), (1.0, 0.0)),
    ((math.inf, -3.0), (1.0, -0.0)),
    ((-math.inf, 3.0), (-1.0, 0.0)),
    ((math.inf, math.inf), (1.0, None)),
    ((math.inf, math.nan), (1.0, None)),
    ((0.0, 0.0), (0.0, 0.0)),
    ((math.nan, 0.0), (math.nan, 0.0)),
]


def test_complex_tanh_special_cases_and_values():
    z = np.array([complex(*c[0]) for c in TANH_CASES], np.complex64)
    for got in (fnp.tanh(fnp.asarray(z)), fa.jit(fnp.tanh)(z)):
        for (case, (re, im)), g in zip(TANH_CASES, np.asarray(got), strict=True):
            assert _matches(float(g.real), re) and _matches(float(g.imag), im), (case, g)
    rng = np.random.default_rng(8)
    w = (rng.uniform(-3, 3, 32) + 1j * rng.uniform(-3, 3, 32)).astype(np.complex64)
    assert_close(fnp.tanh(fnp.asarray(w)), np.tanh(w.astype(np.complex128)).astype(np.complex64))
    check_traced(fnp.tanh, fnp.asarray(z))


def test_sign_of_zero_is_plus_zero():
    x = np.array([-0.0, 0.0, -2.5, 3.0, -np.inf, np.nan], np.float32)
    for got in (fnp.sign(fnp.asarray(x)), fa.jit(fnp.sign)(x)):
        g = np.asarray(got)
        np.testing.assert_array_equal(g, np.sign(x))
        np.testing.assert_array_equal(np.signbit(g), np.signbit(np.sign(x)))
    z = np.array([complex(-0.0, -0.0), complex(-0.0, 0.0), complex(3, -4)], np.complex64)
    g = np.asarray(fnp.sign(fnp.asarray(z)))
    np.testing.assert_allclose(g, [0, 0, 0.6 - 0.8j], rtol=1e-6)
    assert not np.signbit(g[:2].real).any() and not np.signbit(g[:2].imag).any()


def test_boolean_mask_with_an_empty_axis_selects_nothing():
    # The suite (like NumPy and JAX) accepts a mask axis of length 0 over an axis of any length.
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    for ks in [(0,), (2, 0), (0, 3)]:
        m = np.zeros(ks, bool)
        assert_close(fnp.asarray(a)[fnp.asarray(m)], a[m], msg=str(ks))
        assert_close(fnp.asarray(a).at[fnp.asarray(m)].set(9.0), a, msg=str(ks))
    with pytest.raises(IndexError):
        fnp.asarray(a)[fnp.asarray(np.zeros((1,), bool))]


def test_take_along_axis_defaults_to_the_last_axis():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    i = np.array([[3, 0], [1, 1], [-1, 2]], np.int32)
    assert_close(fnp.take_along_axis(fnp.asarray(a), fnp.asarray(i)), np.take_along_axis(a, i % 4, axis=1))


# ------------------------------------------------------------------------ the xfails file


def test_xfails_file_is_well_formed():
    """Every id in ``tests/array_api_xfails.txt`` comes after a ``#`` comment giving its reason.

    The suite reads whole lines as ids (a ``#`` line is a comment), so reasons sit on their own
    lines above the ids they explain.
    """
    path = pathlib.Path(__file__).with_name("array_api_xfails.txt")
    lines = path.read_text().splitlines()
    ids, commented = [], False
    for line in lines:
        if not line.strip():
            commented = False
        elif line.startswith("#"):
            commented = True
        else:
            assert line.startswith("array_api_tests/") and "#" not in line and line == line.strip(), line
            assert commented, f"{line}: no '#' comment with its reason above it"
            ids.append(line)
    assert ids and len(ids) == len(set(ids))


# ------------------------------------------------------------------ the fft extension (fnarray.numpy.fft)

FFT_EXTENSION = ("fft", "ifft", "fftn", "ifftn", "rfft", "irfft", "rfftn", "irfftn", "hfft", "ihfft", "fftfreq",
                 "rfftfreq", "fftshift", "ifftshift")


@pytest.mark.enable_x64
def test_fft_extension_has_every_name_and_keeps_precision():
    import inspect
    missing = [n for n in FFT_EXTENSION if not callable(getattr(fnp.fft, n, None))]
    assert not missing, f"fnarray.numpy.fft lacks {missing}"
    for n in FFT_EXTENSION[:10]:
        params = inspect.signature(getattr(fnp.fft, n)).parameters
        assert list(params)[0] == "x" and params["x"].kind == inspect.Parameter.POSITIONAL_ONLY, n
        assert params["norm"].default == "backward", n
    # complex64 in, complex64 out; a real float64 input to rfft gives complex128 (the standard's rule)
    z = fnp.asarray(np.ones((4,), np.complex64))
    assert fnp.fft.fft(z).dtype == fnp.complex64 and fnp.fft.ifftn(z).dtype == fnp.complex64
    assert fnp.fft.rfft(fnp.asarray(np.ones((4,)))).dtype == fnp.complex128
    assert fnp.fft.fftfreq(4, device=fa.default_device()).dtype == fnp.float64   # x64 on: the default float
