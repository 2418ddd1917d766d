"""Dtypes, the promotion lattice and dtype information, against JAX and NumPy."""

from __future__ import annotations

import itertools

import ml_dtypes
import numpy as np
import pytest

import fnarray as fa
import fnarray.numpy as fnp
from fnarray.core import dtypes as D
from helpers import ALL_DTYPES, DTYPE_NAMES, jax_promote, oracle_promote

jnp = pytest.importorskip("jax.numpy")
import jax  # noqa: E402

BF16 = np.dtype(ml_dtypes.bfloat16)
PAIRS = list(itertools.product(ALL_DTYPES, repeat=2))
SCALARS = (True, 3, 1.5, 2j)


def test_namespace_dtypes_are_numpy_dtypes():
    for name, d in zip(DTYPE_NAMES, ALL_DTYPES, strict=True):
        ours = getattr(fnp, name)
        assert ours == d and hash(ours) == hash(d), name
        assert fnp.dtype(name) == d


def test_python_types_canonicalize_to_the_defaults():
    """Python types mean the default dtypes: 32-bit with x64 off, 64-bit with it on (as JAX)."""
    from fnarray.experimental import enable_x64
    for x64, want in ((False, ("float32", "int32", "complex64", "bool")), (True, ("float64", "int64", "complex128", "bool"))):
        with enable_x64(x64):
            for py, w in zip((float, int, complex, bool), want, strict=True):
                assert D.canonicalize(py) == np.dtype(w) and fnp.zeros(2, dtype=py).dtype == np.dtype(w), (x64, py)


@pytest.mark.parametrize("bad", ["U5", object, "datetime64[s]", "S3", np.float128 if hasattr(np, "float128") else "V4"])
def test_unsupported_dtype_raises_dtype_error(bad):
    with pytest.raises(fa.DTypeError) as e:
        D.canonicalize(bad)
    assert "float32" in str(e.value)  # the message lists what is supported
    assert isinstance(e.value, TypeError)


@pytest.mark.parametrize("a,b", PAIRS, ids=[f"{a.name}-{b.name}" for a, b in PAIRS])
def test_promote_types_matches_jax(a, b):
    with jax.enable_x64(True):
        want = np.dtype(jnp.promote_types(a, b))
    assert fnp.promote_types(a, b) == want
    assert D.promote_types(a, b) == jax_promote(a, b)  # weak only for uint64 with a signed integer


@pytest.mark.enable_x64
def test_result_type_is_order_independent_and_matches_jax():
    rng = np.random.default_rng(0)
    for _ in range(300):
        trio = [ALL_DTYPES[i] for i in rng.integers(0, len(ALL_DTYPES), 3)]
        got = {fnp.result_type(*p) for p in itertools.permutations(trio)}
        with jax.enable_x64(True):
            want = np.dtype(jnp.result_type(*trio))
        assert got == {want}, trio
        assert D.result_type(*[(d, False) for d in trio]) == oracle_promote(*trio), trio


@pytest.mark.enable_x64
def test_mixed_weak_and_strong_promotion_is_order_independent():
    rng = np.random.default_rng(1)
    pool = list(ALL_DTYPES) + list(SCALARS)
    for _ in range(300):
        ops = [pool[i] for i in rng.integers(0, len(pool), 3)]
        strong = tuple(o for o in ops if isinstance(o, np.dtype))
        if len(strong) < len(ops) and strong and jax_promote(*strong)[1]:
            # uint64 with a signed int is a weak float64 (as jnp.promote_types); next to a Python
            # complex scalar the order then matters (c64 or c128). A known edge, not pinned.
            continue
        want = oracle_promote(*ops)
        pairs = [(o, False) if isinstance(o, np.dtype) else D.dtype_of_scalar(o) for o in ops]
        for perm in itertools.permutations(pairs):
            assert D.result_type(*perm) == want, ops


@pytest.mark.parametrize("d", ALL_DTYPES, ids=[d.name for d in ALL_DTYPES])
@pytest.mark.parametrize("s", SCALARS, ids=["bool", "int", "float", "complex"])
def test_weak_promotion_matches_jax(d, s):
    """A strong dtype meeting a Python scalar: JAX's answer with the 32-bit default for weak results."""
    want = oracle_promote(d, s)
    sd, sw = D.dtype_of_scalar(s)
    assert D.promote_types(d, sd, False, sw) == want
    assert fnp.result_type(fnp.zeros((), dtype=d), s) == want[0]


@pytest.mark.parametrize("a,b", list(itertools.combinations_with_replacement(SCALARS, 2)))
def test_two_python_scalars(a, b):
    want = oracle_promote(a, b)
    da, wa = D.dtype_of_scalar(a)
    db, wb = D.dtype_of_scalar(b)
    assert D.promote_types(da, db, wa, wb) == want


def test_oracle_pinned_difference_is_only_the_default_width():
    # JAX in 64-bit mode makes i32 + 1.5 a weak float64; the pinned semantics say float32.
    assert jax_promote(np.dtype("int32"), 1.5) == (np.dtype("float64"), True)
    assert oracle_promote(np.dtype("int32"), 1.5) == (np.dtype("float32"), True)
    assert oracle_promote(np.dtype("float64"), 1.5) == (np.dtype("float64"), False)


@pytest.mark.parametrize("scalar,want", [(1.0, ("float64", True)), (1, ("int64", True)), (True, ("bool", False)),
                                         (1j, ("complex128", True)), (np.float64(1.0), ("float64", False)),
                                         (np.int8(1), ("int8", False))])
@pytest.mark.enable_x64
def test_dtype_of_scalar(scalar, want):
    assert D.dtype_of_scalar(scalar) == (np.dtype(want[0]), want[1])


@pytest.mark.parametrize("d", [d for d in ALL_DTYPES if d.kind in "fc" or d == BF16], ids=lambda d: d.name)
def test_finfo_matches_numpy(d):
    real = {np.dtype("complex64"): np.dtype("float32"), np.dtype("complex128"): np.dtype("float64")}.get(d, d)
    want = ml_dtypes.finfo(real)
    fi = fnp.finfo(d)
    assert fi.bits == want.bits
    assert fi.eps == float(want.eps)
    assert fi.max == float(want.max) and fi.min == float(want.min)
    assert fi.smallest_normal == float(want.smallest_normal)
    assert fi.dtype == real
    assert fnp.finfo(fnp.zeros(2, dtype=d)).eps == fi.eps  # an array is accepted too


@pytest.mark.parametrize("d", [d for d in ALL_DTYPES if d.kind in "iu"], ids=lambda d: d.name)
def test_iinfo_matches_numpy(d):
    want = np.iinfo(d)
    ii = fnp.iinfo(d)
    assert (ii.bits, ii.min, ii.max, ii.dtype) == (want.bits, int(want.min), int(want.max), d)


def test_finfo_iinfo_reject_wrong_kind():
    with pytest.raises(fa.DTypeError, match="iinfo"):
        fnp.finfo(fnp.int32)
    with pytest.raises(fa.DTypeError, match="finfo"):
        fnp.iinfo(fnp.float32)


@pytest.mark.parametrize("d", ALL_DTYPES, ids=lambda d: d.name)
def test_isdtype_kinds_match_numpy(d):
    np_kind = {
        "bool": d == np.bool_,
        "signed integer": d.kind == "i",
        "unsigned integer": d.kind == "u",
        "integral": d.kind in "iu",
        "real floating": d.kind == "f" or d == BF16,
        "complex floating": d.kind == "c",
        "numeric": d != np.bool_,
    }
    for kind, want in np_kind.items():
        assert fnp.isdtype(d, kind) == want, (d, kind)
    assert fnp.isdtype(d, ("bool", "numeric"))
    with pytest.raises(ValueError, match="unknown kind"):
        fnp.isdtype(d, "floating")


@pytest.mark.parametrize("a,b,want", [("int8", "int16", True), ("int16", "int8", False), ("uint8", "int8", False),
                                      ("float32", "int32", False), ("int32", "float32", True),
                                      ("float32", "complex64", True), ("bool", "uint8", True)])
def test_can_cast(a, b, want):
    assert fnp.can_cast(np.dtype(a), np.dtype(b)) is want


def test_namespace_info_default_dtypes():
    info = fnp.__array_namespace_info__()
    assert info.default_dtypes() == {"real floating": np.float32, "complex floating": np.complex64,
                                     "integral": np.int32, "indexing": np.int32}
    assert all(fnp.isdtype(v, "integral") for v in info.dtypes(kind="integral").values())
    assert fa.default_device() in info.devices()


def test_short_names_in_the_printer():
    assert [D.short_name(d) for d in (np.dtype("float32"), BF16, np.dtype("bool"), np.dtype("uint64"))] == \
        ["f32", "bf16", "bool", "u64"]


@pytest.mark.filterwarnings("ignore::fnarray.FallbackWarning")  # webgpu:0 runs int16 on numpy:0
@pytest.mark.parametrize("order", [">f4", ">i4", ">i2", ">u2"])
def test_non_native_byte_order_is_the_native_dtype(device, order):
    """A big-endian array (from a FITS or network file) is its native dtype, as in JAX: fnarray raised
    ``DTypeError: fnarray has no dtype >f4``; the values arrive byteswapped correctly on every backend,
    through ``device_put`` and as a raw NumPy argument of ``jit``."""
    want = (np.arange(6).reshape(2, 3) * 3 - 4).astype(np.dtype(order).newbyteorder("="))
    if want.dtype.kind == "u":
        want = np.abs(want)
    x = want.astype(order)
    assert not x.dtype.isnative
    a = fa.device_put(x, device)
    assert a.dtype == want.dtype
    np.testing.assert_array_equal(np.asarray(a), want)
    np.testing.assert_array_equal(np.asarray(fa.jit(lambda v: v * 2 + 1, device=device)(x)), want * 2 + 1)
    assert fnp.asarray(fnp.ones(2), dtype=order).dtype == want.dtype
    assert fnp.dtype(order) == want.dtype
