"""The pinned semantics of docs/design.md ("Semantics"), one test per row, on every device,
eagerly and under ``jit``. References are NumPy (float64 / exact integers), JAX's
promotion, or the rule written out in ``helpers``."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import fnarray as fa
import fnarray.numpy as fnp
from fnarray.core import lax
from helpers import (ALL_DTYPES, assert_close, eager_and_jit, int_div_ref, int_rem_ref, needs_namespace,
                     on_device, oracle_promote, saturating_cast_ref, shift_ref)

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")

F32, F64, I32 = np.dtype("float32"), np.dtype("float64"), np.dtype("int32")

# ------------------------------------------------------------------------- default dtypes


@pytest.mark.parametrize("value,dtype,weak", [
    (1.0, "float32", True), (1, "int32", True), (True, "bool", False), (1j, "complex64", True),
    ([1.0, 2.0], "float32", False), ([1, 2], "int32", False), ([True], "bool", False),
    ([1j], "complex64", False), (np.ones(3), "float64", False), (np.arange(3), "int64", False),
    (np.float64(2.5), "float64", False), (np.ones(2, np.float16), "float16", False),
])
def test_default_dtypes_are_32_bit_and_explicit_arrays_keep_theirs(device, value, dtype, weak):
    x = fnp.asarray(value, device=device)
    assert x.dtype == np.dtype(dtype) and x.weak_type == weak and x.device == device
    np.testing.assert_array_equal(np.asarray(x), np.asarray(value).astype(dtype))
    # Under jit an explicit float64 input stays float64 (no silent truncation).
    y = fa.jit(lambda v: v + v)(x)
    assert (y.dtype, y.weak_type) == (np.dtype(dtype), weak)


def test_creation_defaults(device):
    outs = {
        "arange(5)": (fnp.arange(5, device=device), I32),
        "arange(5.0)": (fnp.arange(5.0, device=device), F32),
        "zeros(3)": (fnp.zeros(3, device=device), F32),
        "ones(3)": (fnp.ones(3, device=device), F32),
        "full(3, 7)": (fnp.full(3, 7, device=device), I32),
        "full(3, 7.0)": (fnp.full(3, 7.0, device=device), F32),
        "eye(2)": (fnp.eye(2, device=device), F32),
        "linspace": (fnp.linspace(0, 1, 5, device=device), F32),
    }
    for name, (x, d) in outs.items():
        assert x.dtype == d, name
    jitted = fa.jit(lambda: (fnp.arange(5), fnp.zeros(2), fnp.full(2, 3)))()
    assert [a.dtype for a in jitted] == [I32, F32, I32]


def test_python_int_outside_int32_needs_an_explicit_dtype():
    """x64 off: a Python int past int32 needs a dtype; x64 on: it is the default int64 (as JAX)."""
    with pytest.raises(OverflowError, match="int32"):
        fnp.asarray([2 ** 40])
    from fnarray.experimental import enable_x64
    with enable_x64():
        assert fnp.asarray([2 ** 40]).dtype == np.dtype("int64")
        assert fnp.asarray([2 ** 40], dtype=fnp.int64).dtype == np.dtype("int64")


def test_python_int_out_of_range_of_an_int_array_says_what_to_do(device):
    """As ``jax.numpy``: an ``OverflowError`` (never a wrapped value), eager and traced, both operand orders."""
    x = on_device(np.arange(3, dtype=np.int32), device)
    for f in (lambda: x + 2 ** 31, lambda: (-2 ** 31 - 1) * x, lambda: fnp.subtract(x, 2 ** 40),
              lambda: fa.jit(lambda v: v + 2 ** 31)(x)):
        with pytest.raises(OverflowError, match=r"out of range for int32.*astype"):
            f()
    assert np.asarray(x + (2 ** 31 - 1)).tolist() == [2 ** 31 - 1, -2 ** 31, -2 ** 31 + 1]  # in range: wraps
    assert np.asarray(x + (-2 ** 31)).tolist() == [-2 ** 31, -2 ** 31 + 1, -2 ** 31 + 2]


# ------------------------------------------------------------------------- promotion


def test_weak_python_scalars(device):
    x32 = on_device(np.arange(3, dtype=np.float32), device)
    i32 = on_device(np.arange(3, dtype=np.int32), device)
    for out in eager_and_jit(lambda x: x * 2.0, x32):
        assert_close(out, np.arange(3) * 2.0, F32, weak_type=False)
    for out in eager_and_jit(lambda x: x + 1.5, i32):
        assert_close(out, np.arange(3) + 1.5, F32, weak_type=True)
    f16 = on_device(np.ones(2, np.float16), device)
    for out in eager_and_jit(lambda x: x + 1.0, f16):
        assert out.dtype == np.float16
    u8 = on_device(np.array([250, 3], np.uint8), device)
    for out in eager_and_jit(lambda x: x + 10, u8):  # stays uint8 and wraps, as JAX
        assert_close(out, np.array([4, 13], np.uint8), np.uint8)


_ARITH_DTYPES = [d for d in ALL_DTYPES if d != np.bool_]


# Promotion happens in the namespace before any lowering, so the full tables run on the default device
# only (each new dtype pair is a new compilation on a compiling backend); test_weak_python_scalars above
# covers every device.
@pytest.mark.enable_x64
@pytest.mark.parametrize("a", _ARITH_DTYPES, ids=lambda d: d.name)
def test_binary_promotion_of_arrays_matches_jax(a):
    """``x + y`` for every pair of dtypes: the result dtype is JAX's (``jnp.promote_types``)."""
    x = fnp.asarray(np.ones(2, a))
    for b in ALL_DTYPES:
        y = fnp.asarray(np.ones(2, b))
        with jax.enable_x64(True):
            want = np.dtype(jnp.promote_types(a, b))
        for out in (x + y, fa.jit(lambda u, v: u + v)(x, y)):
            assert out.dtype == want, (a, b)
            np.testing.assert_array_equal(np.real(np.asarray(out)).astype(np.float64), np.full(2, 2.0))


@pytest.mark.enable_x64
@pytest.mark.parametrize("s", [True, 3, 1.5, 2j], ids=["bool", "int", "float", "complex"])
def test_weak_promotion_of_arrays_matches_jax(s):
    for d in ALL_DTYPES:
        x = fnp.asarray(np.ones(2, d))
        want, weak = oracle_promote(d, s)
        for out in (x * s, fa.jit(lambda u: u * s)(x), fa.jit(lambda u, v: u * v)(x, s)):
            assert (out.dtype, out.weak_type) == (want, weak), (d, s)


def test_weak_type_survives_jit_and_shows_in_the_program():
    prog = fa.make_ir(lambda i: i + 1.5)(fnp.arange(3))
    assert str(prog.outvars[0].aval.dtype) == "float32" and prog.outvars[0].aval.weak_type
    assert fa.jit(lambda v: v * 2)(1.5).weak_type


# ------------------------------------------------------------------------- indices


def _norm_clamp(idx, n):
    idx = np.where(idx < 0, idx + n, idx)
    return np.clip(idx, 0, n - 1)


def test_gather_and_dynamic_slice_clamp(device):
    x_np = np.arange(10, dtype=np.float32) * 1.5
    x = on_device(x_np, device)
    idx = np.array([[0], [9], [12], [-1], [-30]], np.int32)
    for out in eager_and_jit(lambda v, i: lax.gather(v, i, axes=(0,)), x, fnp.asarray(idx)):
        assert_close(out, x_np[np.clip(idx[:, 0], 0, 9)])
    for start in (-5, 0, 3, 8, 100):
        for out in eager_and_jit(lambda v, s: lax.dynamic_slice(v, [s], [4]), x, fnp.asarray(np.int32(start))):
            s = min(max(start, 0), 10 - 4)
            assert_close(out, x_np[s:s + 4])


def test_scatter_drops_out_of_bounds(device):
    x = on_device(np.zeros(5, np.float32), device)
    idx = fnp.asarray(np.array([[1], [7], [-1], [4], [1]], np.int32))
    upd = fnp.asarray(np.array([1, 2, 3, 4, 5], np.float32))
    want = np.zeros(5, np.float32)
    for i, u in zip([1, 7, -1, 4, 1], [1, 2, 3, 4, 5], strict=True):
        if 0 <= i < 5:
            want[i] += u
    for out in eager_and_jit(lambda v, i, u: lax.scatter_add(v, i, u, axes=(0,)), x, idx, upd):
        assert_close(out, want)


def test_array_indices_normalise_then_clamp(device):
    needs_namespace("_getitem", "take", "take_along_axis")
    x_np = np.arange(12, dtype=np.float32).reshape(4, 3)
    x = on_device(x_np, device)
    idx_np = np.array([0, 3, 5, -1, -4, -7], np.int32)
    idx = fnp.asarray(idx_np)
    want_rows = x_np[_norm_clamp(idx_np, 4)]
    for out in eager_and_jit(lambda v, i: v[i], x, idx):
        assert_close(out, want_rows)
    # take and take_along_axis default to mode="fill" (jax.numpy): NaN where the normalised index is outside
    filled_rows = want_rows.copy()
    filled_rows[(idx_np >= 4) | (idx_np < -4)] = np.nan
    for out in eager_and_jit(lambda v, i: fnp.take(v, i, axis=0), x, idx):
        assert_close(out, filled_rows)
    cols = np.array([[0, 2, 7], [-1, -5, 1], [3, 0, 0], [2, 2, -2]], np.int32)
    want = np.take_along_axis(x_np, _norm_clamp(cols, 3), axis=1)
    for out in eager_and_jit(lambda v, i: fnp.take_along_axis(v, i, axis=1, mode="clip"), x, fnp.asarray(cols)):
        assert_close(out, want)
    want[(cols >= 3) | (cols < -3)] = np.nan
    for out in eager_and_jit(lambda v, i: fnp.take_along_axis(v, i, axis=1), x, fnp.asarray(cols)):
        assert_close(out, want)


def test_at_updates_drop_out_of_bounds(device):
    needs_namespace("_IndexUpdateHelper")
    x = on_device(np.zeros(5, np.float32), device)
    idx_np = np.array([1, 7, -1, -9, 2], np.int32)
    idx = fnp.asarray(idx_np)
    want = np.zeros(5, np.float32)
    for i in idx_np:
        j = i + 5 if i < 0 else i
        if 0 <= j < 5:
            want[j] = 1.0
    for out in eager_and_jit(lambda v, i: v.at[i].set(1.0), x, idx):
        assert_close(out, want)


def test_static_index_out_of_bounds_clamps_and_slices_clamp(device):
    needs_namespace("_getitem")
    x_np = np.arange(6, dtype=np.int32)
    x = on_device(x_np, device)
    assert int(x[6]) == 5 and int(x[100]) == 5  # as JAX (NumPy raises IndexError)
    assert int(fa.jit(lambda v: v[-7])(x)) == 0
    with pytest.raises(IndexError):
        on_device(np.zeros(0, np.int32), device)[0]  # an empty axis has nothing to clamp to
    for out in eager_and_jit(lambda v: (v[2:100], v[-100:3], v[::-2]), x):
        for got, want in zip(out, (x_np[2:100], x_np[-100:3], x_np[::-2]), strict=True):
            assert_close(got, want)


# ------------------------------------------------------------------------- integer edge cases

_INTS = [np.dtype(n) for n in ("int8", "int16", "int32", "int64", "uint8", "uint32")]


@pytest.mark.parametrize("d", _INTS, ids=lambda d: d.name)
def test_integer_division_and_remainder_by_zero_give_zero(device, d):
    x_np = np.array([7, 0, 5, 100, 3, 1], d)
    if d.kind == "i":
        x_np = x_np * np.array([1, 1, -1, 1, -1, 1], d)
    y_np = np.array([0, 0, 2, -3 if d.kind == "i" else 3, 0, 1], d)
    x, y = on_device(x_np, device), on_device(y_np, device)
    for out in eager_and_jit(lambda a, b: (a // b, fnp.floor_divide(a, b), a % b, fnp.remainder(a, b),
                                           fnp.fmod(a, b), lax.div(a, b), lax.rem(a, b)), x, y):
        fd, fd2, rm, rm2, fm, dv, rv = out
        assert_close(fd, int_div_ref(x_np, y_np))
        assert_close(fd2, int_div_ref(x_np, y_np))
        assert_close(rm, int_rem_ref(x_np, y_np))
        assert_close(rm2, int_rem_ref(x_np, y_np))
        with np.errstate(all="ignore"):
            trunc_div = np.where(y_np == 0, 0, np.trunc(x_np / np.where(y_np == 0, 1, y_np))).astype(d)
            fmod = np.where(y_np == 0, 0, np.fmod(x_np, np.where(y_np == 0, 1, y_np))).astype(d)
        assert_close(fm, fmod)
        assert_close(dv, trunc_div)
        assert_close(rv, fmod)
    # A Python zero divisor, too.
    for out in eager_and_jit(lambda a: (a // 0, a % 0), x):
        assert_close(out[0], np.zeros_like(x_np))
        assert_close(out[1], np.zeros_like(x_np))


@pytest.mark.parametrize("d", [np.dtype(n) for n in ("int8", "int16", "int32", "int64", "uint8", "uint16",
                                                     "uint32", "uint64")], ids=lambda d: d.name)
def test_shifts_past_the_bit_width(device, d):
    bits = d.itemsize * 8
    shifts = np.array([0, 1, bits - 1, bits, bits + 3, 2 * bits], d)
    base = [1, 5, 3, 7, 1, 2] if d.kind == "u" else [1, -5, -3, 7, -1, -2]
    x_np = np.array(base, d)
    x, s = on_device(x_np, device), on_device(shifts, device)
    for out in eager_and_jit(lambda a, b: (a << b, a >> b, fnp.bitwise_left_shift(a, b),
                                           fnp.bitwise_right_shift(a, b)), x, s):
        assert_close(out[0], shift_ref(x_np, shifts, "left"))
        assert_close(out[1], shift_ref(x_np, shifts, "right"))
        assert_close(out[2], shift_ref(x_np, shifts, "left"))
        assert_close(out[3], shift_ref(x_np, shifts, "right"))
    if d.kind == "i":
        # The primitive's logical right shift fills with zeros whatever the sign.
        for out in eager_and_jit(lambda a, b: lax.shift_right_logical(a, b), x, s):
            ux = x_np.view(np.dtype(f"u{d.itemsize}"))
            want = shift_ref(ux, shifts.astype(ux.dtype), "right").view(d)
            assert_close(out, want)


_FLOAT_SOURCES = [np.dtype(n) for n in ("float16", "float32", "float64")]
_INT_TARGETS = [np.dtype(n) for n in ("int8", "int16", "int32", "int64", "uint8", "uint32")]


@pytest.mark.enable_x64
@pytest.mark.parametrize("src", _FLOAT_SOURCES, ids=lambda d: d.name)
def test_float_to_int_saturates_and_nan_is_zero(device, src):
    vals = np.array([np.nan, np.inf, -np.inf, 1e20, -1e20, 2.7, -2.7, 300.0, -300.0, 255.9, 65504.0,
                     2.0 ** 31, -2.0 ** 31 - 1e3, 2.0 ** 63, 0.0, -0.0], np.float64)
    with np.errstate(over="ignore"):
        x_np = vals.astype(src)
    x = on_device(x_np, device)
    for dst in _INT_TARGETS:
        for out in eager_and_jit(lambda v: (v.astype(dst), fnp.astype(v, dst)), x):
            want = saturating_cast_ref(x_np, dst)
            assert_close(out[0], want, msg=f"{src}->{dst}")
            assert_close(out[1], want, msg=f"{src}->{dst}")


def test_bfloat16_to_int_saturates(device):
    import ml_dtypes
    x_np = np.array([np.nan, 1e30, -1e30, 3.5, -3.5], ml_dtypes.bfloat16)
    x = on_device(x_np, device)
    for out in eager_and_jit(lambda v: v.astype(fnp.int16), x):
        assert_close(out, saturating_cast_ref(x_np.astype(np.float64), np.int16))


# ------------------------------------------------------------------------- NaN


@pytest.mark.enable_x64
def test_nan_sorts_last_and_argmax_returns_the_first_nan(device):
    x_np = np.array([3.0, np.nan, -1.0, np.inf, np.nan, -np.inf, 0.5], np.float32)
    x = on_device(x_np, device)
    for out in eager_and_jit(lambda v: (lax.sort(v), lax.argmax(v, 0), lax.argmin(v, 0)), x):
        assert_close(out[0], np.sort(x_np))
        assert_close(out[1], np.array(np.argmax(x_np), np.int32))
        assert_close(out[2], np.array(np.argmin(x_np), np.int32))
    m_np = np.array([[1.0, 2.0, np.nan], [np.nan, 0.0, 5.0], [4.0, 3.0, 2.0]], np.float64)
    m = on_device(m_np, device)
    for out in eager_and_jit(lambda v: (lax.sort(v, 0), lax.argmax(v, 1), lax.argmin(v, 0)), m):
        assert_close(out[0], np.sort(m_np, axis=0))
        assert_close(out[1], np.argmax(m_np, axis=1).astype(np.int32))
        assert_close(out[2], np.argmin(m_np, axis=0).astype(np.int32))


def test_nan_order_in_the_namespace(device):
    needs_namespace("sort", "argsort", "argmax", "argmin")
    x_np = np.array([3.0, np.nan, -1.0, np.inf, np.nan, 0.5], np.float32)
    x = on_device(x_np, device)
    for out in eager_and_jit(lambda v: (fnp.sort(v), fnp.argsort(v), fnp.argmax(v), fnp.argmin(v)), x):
        assert_close(out[0], np.sort(x_np))
        assert_close(out[1], np.argsort(x_np, kind="stable").astype(np.int32))
        assert_close(out[2], np.array(np.argmax(x_np), np.int32))
        assert_close(out[3], np.array(np.argmin(x_np), np.int32))


@pytest.mark.parametrize("d", [F32, F64], ids=lambda d: d.name)
def test_max_min_propagate_nan(device, d):
    a_np = np.array([1.0, np.nan, 3.0, np.nan, -np.inf], d)
    b_np = np.array([np.nan, 2.0, 1.0, np.nan, 0.0], d)
    a, b = on_device(a_np, device), on_device(b_np, device)
    for out in eager_and_jit(lambda u, v: (fnp.maximum(u, v), fnp.minimum(u, v), lax.max(u, v), lax.min(u, v),
                                           lax.reduce_max(u, (0,)), lax.reduce_min(v, (0,))), a, b):
        assert_close(out[0], np.maximum(a_np, b_np))
        assert_close(out[1], np.minimum(a_np, b_np))
        assert_close(out[2], np.maximum(a_np, b_np))
        assert_close(out[3], np.minimum(a_np, b_np))
        assert_close(out[4], np.array(np.max(a_np), d))
        assert_close(out[5], np.array(np.min(b_np), d))
    for out in eager_and_jit(lambda u: (fnp.maximum(u, 0.0), fnp.minimum(0.0, u)), a):
        assert_close(out[0], np.maximum(a_np, 0.0))
        assert_close(out[1], np.minimum(0.0, a_np))


def test_max_min_reductions_propagate_nan(device):
    needs_namespace("max", "min", "amax", "nanmax")
    x_np = np.array([[1.0, np.nan], [3.0, 4.0]], np.float32)
    x = on_device(x_np, device)
    for out in eager_and_jit(lambda v: (fnp.max(v), fnp.min(v, axis=0), v.max(axis=1)), x):
        assert_close(out[0], np.array(np.max(x_np)))
        assert_close(out[1], np.min(x_np, axis=0))
        assert_close(out[2], np.max(x_np, axis=1))


# ------------------------------------------------------------------------- 0 ** 0


@pytest.mark.parametrize("d", [F32, F64, I32, np.dtype("int8"), np.dtype("complex64")], ids=lambda d: d.name)
def test_zero_to_the_zero_is_one(device, d):
    z = on_device(np.zeros(3, d), device)
    e = on_device(np.array([0, 1, 2], d), device)
    one = np.ones(3, d)
    for out in eager_and_jit(lambda a, b: (a ** a, fnp.pow(a, a), a ** 0, fnp.power(a, b)), z, e):
        assert_close(out[0], one)
        assert_close(out[1], one)
        assert_close(out[2], one)
        assert_close(out[3], np.array([1, 0, 0], d))
    assert fnp.pow(0.0, 0.0).item() == 1.0
    assert fnp.pow(0, 0).item() == 1


def test_every_dtype_pair_of_scalars_and_arrays_is_covered():
    # Guard against the tables above silently shrinking.
    assert len(list(itertools.product(_ARITH_DTYPES, ALL_DTYPES))) == 14 * 15
