"""Indexing as JAX documents it, against JAX: static out-of-bounds ints, ``.at[...].get/set/...(mode=...)``,
``take``/``take_along_axis`` modes and fill values; eager and under ``jit``, on every device.

Tiers (docs/design.md, "Testing"): numpy:0 runs every case in every dtype of ``CASE_DTYPES``; the other devices
run the parity tier (``_parity_case``): every case once, its dtype taken in turn from the case's dtypes, so that
each mode and each dtype (float32, int32, uint8, bool) runs on every device."""

from __future__ import annotations

import numpy as np
import pytest

import fnarray as fa
import fnarray.numpy as fnp

jax = pytest.importorskip("jax", reason="JAX is the oracle of these tests (a test dependency)")
# the oracle's own notice that float updates of integer arrays will be refused in future JAX versions
pytestmark = pytest.mark.filterwarnings("ignore:scatter inputs have incompatible types:FutureWarning")
jnp = pytest.importorskip("jax.numpy")

_X = np.arange(12, dtype=np.float32).reshape(3, 4) * 10 - 50
_I = np.array([[0, 3, -1], [-4, 4, 2]], np.int32)  # in bounds, negative, out of bounds both ways


def _x(lib, dtype="float32"):
    return lib.numpy.asarray(_X.astype(dtype))


# name -> f(lib, x, i): x an array of _X, i the index array _I of lib; each returns an array.
CASES = {
    "x[10]": lambda lib, x, i: x[10],
    "x[-10]": lambda lib, x, i: x[-10],
    "x[1, 7]": lambda lib, x, i: x[1, 7],
    "x[-1, -9]": lambda lib, x, i: x[-1, -9],
    "x[..., 4]": lambda lib, x, i: x[..., 4],
    "x[5, 1:]": lambda lib, x, i: x[5, 1:],
    "x[i]": lambda lib, x, i: x[i],
    "x[1, i]": lambda lib, x, i: x[1, i],
    "get default": lambda lib, x, i: x.at[i].get(),
    "get clip": lambda lib, x, i: x.at[1, i].get(mode="clip"),
    "get promise_in_bounds": lambda lib, x, i: x.at[1, lib.numpy.asarray([0, 2, -1])].get(mode="promise_in_bounds"),
    "get fill": lambda lib, x, i: x.at[1, i].get(mode="fill", fill_value=-7),
    "get fill default": lambda lib, x, i: x.at[i, 1].get(mode="fill"),
    "get fill static int": lambda lib, x, i: x.at[7].get(mode="fill", fill_value=3.5),
    "get fill static negative": lambda lib, x, i: x.at[-4, 0].get(mode="fill", fill_value=1),
    "get fill slice and array": lambda lib, x, i: x.at[:, i[0]].get(mode="fill", fill_value=0.25),
    "get fill arrays in two axes": lambda lib, x, i: x.at[i, i].get(mode="fill", fill_value=-1),
    "get fill in bounds": lambda lib, x, i: x.at[1, 2].get(mode="fill", fill_value=-1),
    "get drop": lambda lib, x, i: x.at[1, i].get(mode="drop", fill_value=9),
    "set default": lambda lib, x, i: x.at[1, i].set(5.0),
    "set drop": lambda lib, x, i: x.at[i, 2].set(5.0, mode="drop"),
    "set fill": lambda lib, x, i: x.at[i, 2].set(5.0, mode="fill"),
    "set clip": lambda lib, x, i: x.at[1, i[0]].set(lib.numpy.asarray([1.0, 2.0, 3.0]), mode="clip"),
    "set static out of bounds": lambda lib, x, i: x.at[7].set(1.0),
    "set static out of bounds clip": lambda lib, x, i: x.at[7].set(1.0, mode="clip"),
    "set static negative out of bounds": lambda lib, x, i: x.at[-9, 1].set(1.0),
    "add clip": lambda lib, x, i: x.at[1, i].add(1.0, mode="clip"),
    "multiply clip": lambda lib, x, i: x.at[i, 0].multiply(0.0, mode="clip"),
    "min clip": lambda lib, x, i: x.at[2, i].min(5.0, mode="clip"),
    "max drop": lambda lib, x, i: x.at[2, i].max(100.0, mode="drop"),
    "add promise_in_bounds": lambda lib, x, i: x.at[0, 1].add(1.0, mode="promise_in_bounds"),
    "take default": lambda lib, x, i: lib.numpy.take(x, i, axis=1),
    "take flat default": lambda lib, x, i: lib.numpy.take(x, i * 5),
    "take clip": lambda lib, x, i: lib.numpy.take(x, i, axis=1, mode="clip"),
    "take wrap": lambda lib, x, i: lib.numpy.take(x, i, axis=0, mode="wrap"),
    "take fill": lambda lib, x, i: lib.numpy.take(x, i, axis=0, mode="fill", fill_value=-3),
    "take static": lambda lib, x, i: lib.numpy.take(x, 20),
    "take_along_axis default": lambda lib, x, i: lib.numpy.take_along_axis(x, i[:, :1], axis=0),
    "take_along_axis fill": lambda lib, x, i: lib.numpy.take_along_axis(x, i.T, axis=1, mode="fill", fill_value=2),
    "take_along_axis clip": lambda lib, x, i: lib.numpy.take_along_axis(x, i.T, axis=1, mode="clip"),
}
# every case in float32 and int32; the cases whose result depends on the dtype's default fill value also in
# uint8 (the highest value) and bool (True)
CASE_DTYPES = [(n, d) for n in CASES for d in ("float32", "int32")] + \
    [(n, d) for n in CASES if "default" in n or "fill" in n for d in ("uint8", "bool")]


def _jax_case(name, dtype):
    with jax.enable_x64(False):
        out = CASES[name](jax, _x(jax, dtype), jnp.asarray(_I))
        return np.asarray(out), out.dtype


def _fnarray_case(name, dtype, device, jitted):
    x = fa.device_put(_x(fa, dtype), device)
    i = fa.device_put(fnp.asarray(_I), device)
    if jitted:
        return fa.jit(lambda x, i: CASES[name](fa, x, i))(x, i)
    return CASES[name](fa, x, i)


def _parity_case(name, dtype, **_):
    """Whether ``(name, dtype)`` runs outside numpy:0: the case's ``k``-th dtype for the ``k``-th case (modulo the
    number of its dtypes)."""
    dts = [d for n, d in CASE_DTYPES if n == name]
    return dts[list(CASES).index(name) % len(dts)] == dtype


@pytest.mark.parity_subset(keep=_parity_case)
@pytest.mark.parametrize("name,dtype", CASE_DTYPES)
def test_indexing_modes_match_jax(device, name, dtype):
    want, want_dtype = _jax_case(name, dtype)
    for jitted in (False, True):
        got = _fnarray_case(name, dtype, device, jitted)
        how = f"{name} {dtype} ({'jit' if jitted else 'eager'})"
        assert got.dtype == want_dtype and got.shape == want.shape, f"{how}: {got.dtype}{got.shape} vs " \
                                                                    f"{want_dtype}{want.shape}"
        np.testing.assert_array_equal(np.asarray(got), want, err_msg=how)


def test_traced_scalar_index_and_fill_value(device):
    x = fa.device_put(fnp.asarray(_X[0]), device)
    jx = jnp.asarray(_X[0])
    for i in (-5, -4, -1, 0, 3, 4, 100):
        for mode, fill in ((None, None), ("clip", None), ("fill", -1.5)):
            got = fa.jit(lambda x, i: x.at[i].get(mode=mode, fill_value=fill))(x, i)
            with jax.enable_x64(False):  # JAX needs a concrete fill value
                want = jax.jit(lambda x, i: x.at[i].get(mode=mode, fill_value=fill))(jx, i)
            np.testing.assert_array_equal(np.asarray(got), np.asarray(want), err_msg=f"{i} {mode}")
    # a traced fill value (JAX needs a concrete one), of another dtype than the array
    got = fa.jit(lambda x, fv: x.at[fnp.asarray([1, 9])].get(mode="fill", fill_value=fv))(x, fnp.int32(7))
    np.testing.assert_array_equal(np.asarray(got), np.array([_X[0, 1], 7], np.float32))


def test_empty_arrays(device):
    e = fa.device_put(fnp.zeros((0, 3)), device)
    with pytest.raises(IndexError, match="out of bounds"):
        e[0]
    with pytest.raises(IndexError, match="size 0"):
        e[fnp.asarray([0])]
    empty_idx = fnp.zeros((0,), fnp.int32)
    for mode in (None, "clip", "fill"):
        got = e.at[empty_idx].get(mode=mode)
        assert got.shape == (0, 3)
    x = fa.device_put(fnp.asarray(_X), device)
    assert x.at[empty_idx].set(1.0, mode="clip").tolist() == _X.tolist()
    assert fnp.take(x, empty_idx, axis=1).shape == (3, 0)
    assert x.at[:, empty_idx].get(mode="fill", fill_value=0).shape == (3, 0)


def test_unknown_modes_raise():
    x = fnp.ones(3)
    with pytest.raises(ValueError, match="mode"):
        x.at[0].get(mode="wrap")
    with pytest.raises(ValueError, match="mode"):
        x.at[0].add(1.0, mode="raise")
    with pytest.raises(NotImplementedError, match="raise"):
        fnp.take(x, fnp.asarray([0]), mode="raise")
    with pytest.raises(ValueError, match="mode"):
        fnp.take(x, fnp.asarray([0]), mode="nearest")
