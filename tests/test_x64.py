"""64-bit dtypes as a switch (``fa.config.enable_x64``) and weak types through control flow, against JAX.

JAX (with ``jax_enable_x64`` off, its default) is the oracle: for every way a value enters (``asarray``,
``array``, creation functions, ``astype``, ``device_put``, ``jit`` arguments, NumPy scalars) the result's
dtype, weak type and values, and whether a ``UserWarning`` ("Explicitly requested dtype ...") is raised.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest

from helpers import config_setting

import fnarray as fa
import fnarray.numpy as fnp

jax = pytest.importorskip("jax", reason="JAX is the oracle of these tests (a test dependency)")
jnp = pytest.importorskip("jax.numpy")

_F64 = np.arange(3.0) / 3  # float64 values that float32 rounds
_I64 = np.arange(3, dtype=np.int64) - 1
_U64 = np.arange(3, dtype=np.uint64)
_C128 = _F64 + 1j * _F64[::-1]

# name -> (fnarray call, JAX call): each takes (namespace, device_put-like placement) and returns an array.
INPUT_PATHS = {
    "asarray float64": lambda np_, put: np_.asarray(_F64),
    "asarray int64": lambda np_, put: np_.asarray(_I64),
    "asarray uint64": lambda np_, put: np_.asarray(_U64),
    "asarray complex128": lambda np_, put: np_.asarray(_C128),
    "array float64": lambda np_, put: np_.array(_F64),
    "asarray dtype=float64": lambda np_, put: np_.asarray([0.1, 0.2], dtype=np_.float64),
    "asarray dtype=np.float64": lambda np_, put: np_.asarray([0.1, 0.2], dtype=np.float64),
    "asarray dtype='float64'": lambda np_, put: np_.asarray([0.1, 0.2], dtype="float64"),
    "asarray dtype=float": lambda np_, put: np_.asarray([0.1, 0.2], dtype=float),
    "asarray dtype=int": lambda np_, put: np_.asarray([1, 2], dtype=int),
    "asarray dtype=int64": lambda np_, put: np_.asarray([1, 2], dtype=np.int64),
    "zeros float64": lambda np_, put: np_.zeros(3, dtype=np_.float64),
    "zeros float": lambda np_, put: np_.zeros(3, dtype=float),
    "ones int64": lambda np_, put: np_.ones(3, dtype=np.int64),
    "full float64": lambda np_, put: np_.full(3, 0.1, dtype=np.float64),
    "arange float64": lambda np_, put: np_.arange(3, dtype=np.float64),
    "linspace float64": lambda np_, put: np_.linspace(0, 1, 4, dtype=np.float64),
    "eye float64": lambda np_, put: np_.eye(2, dtype=np.float64),
    "zeros_like float64": lambda np_, put: np_.zeros_like(np_.ones(3), dtype=np.float64),
    "full_like complex128": lambda np_, put: np_.full_like(np_.ones(3), 2.0, dtype=np.complex128),
    "astype float64": lambda np_, put: np_.ones(3).astype(np.float64),
    "astype float": lambda np_, put: np_.ones(3).astype(float),
    "sum dtype=float64": lambda np_, put: np_.sum(np_.ones(3), dtype=np.float64),
    "scalar type float64": lambda np_, put: np_.float64(0.1),
    "np.float64 scalar": lambda np_, put: np_.asarray(np.float64(0.1)),
    "np.float64 * float16": lambda np_, put: np_.ones(3, np_.float16) * np.float64(0.1),
    "np float64 array + float32": lambda np_, put: np_.ones(3) + _F64,
    "device_put float64": lambda np_, put: put(_F64),
    "device_put int64": lambda np_, put: put(_I64),
}


def _jit_paths(lib):
    return {
        "jit float64 argument": lambda: lib.jit(lambda x: x * 2)(_F64),
        "jit np.float64 argument": lambda: lib.jit(lambda x: x * 2)(np.float64(0.1)),
        "jit np.int64 argument": lambda: lib.jit(lambda x: x + 1)(np.int64(5)),
        "jit float64 constant": lambda: lib.jit(lambda x: x + np.float64(0.1))(np.float32(1)),
        "jit zeros float64 inside": lambda: lib.jit(lambda x: x + lib.numpy.zeros(3, np.float64))(
            np.ones(3, np.float32)),
    }


def _record(fn):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = fn()
    explicit = [w for w in caught if issubclass(w.category, UserWarning)
                and str(w.message).startswith("Explicitly requested dtype")]
    return out, [str(w.message).split(" requested in ")[0] for w in explicit]


def _jax_off(fn):
    with jax.enable_x64(False):
        return _record(fn)


def _summary(x):
    return np.dtype(x.dtype), bool(x.aval.weak_type), np.asarray(x)


@functools.cache
def _jax_reference(name):
    """JAX's result and warnings for an input path, from its first call (JAX warns while tracing, so a
    second call of a jitted ``jnp`` function reuses the trace silently)."""
    return _jax_off(lambda: INPUT_PATHS[name](jnp, jax.device_put))


@pytest.mark.parametrize("name", list(INPUT_PATHS))
def test_default_off_canonicalises_like_jax(device, name):
    path = INPUT_PATHS[name]
    want, want_warn = _jax_reference(name)
    got, got_warn = _record(lambda: _on_device(lambda: path(fnp, lambda v: fa.device_put(v, device)), device))
    assert not fa.config.enable_x64
    gd, gw, gv = _summary(got)
    wd, ww, wv = _summary(want)
    assert (gd, gw) == (wd, ww), f"{name}: fnarray {gd} weak={gw}, JAX {wd} weak={ww}"
    np.testing.assert_array_equal(gv, wv, err_msg=name)
    assert bool(got_warn) == bool(want_warn), f"{name}: fnarray warned {got_warn}, JAX {want_warn}"


@pytest.mark.parametrize("name", list(_jit_paths(jax)))
def test_jit_arguments_and_constants_canonicalise_like_jax(device, name):
    want, want_warn = _jax_off(_jit_paths(jax)[name])
    got, got_warn = _record(lambda: _on_device(_jit_paths(fa)[name], device))
    gd, gw, gv = _summary(got)
    wd, ww, wv = _summary(want)
    assert (gd, gw) == (wd, ww), f"{name}: fnarray {gd} weak={gw}, JAX {wd} weak={ww}"
    np.testing.assert_array_equal(gv, wv, err_msg=name)
    assert bool(got_warn) == bool(want_warn), f"{name}: fnarray warned {got_warn}, JAX {want_warn}"


def _on_device(fn, device):
    """``fn()`` with ``device`` the default device (where eager operations and uncommitted arrays go)."""
    with config_setting("default_device", str(device)):
        return fn()


def test_on_mode_keeps_64_bit_without_warning(x64):
    assert fa.config.enable_x64
    for name, path in INPUT_PATHS.items():
        out, warned = _record(lambda path=path: path(fnp, lambda v: fa.device_put(v, "numpy:0")))
        assert not warned, f"{name}: warned {warned} with x64 on"
        assert out.dtype.itemsize == 8 or out.dtype == np.complex128 or name in (
            "zeros float", "asarray dtype=float", "asarray dtype=int", "astype float", "np.float64 * float16"), \
            f"{name}: {out.dtype} with x64 on"
    for name, path in _jit_paths(fa).items():
        out, warned = _record(path)
        assert not warned and out.dtype.itemsize == 8, f"{name}: {out.dtype}, warned {warned}"
    x = fnp.asarray(_F64)
    np.testing.assert_array_equal(np.asarray(x), _F64)  # kept exactly, not rounded through float32


def test_config_update_spellings_and_environment():
    before = fa.config.enable_x64
    try:
        fa.config.update("jax_enable_x64", True)
        assert fa.config.enable_x64 and fnp.asarray(_F64).dtype == np.float64
        fa.config.update("enable_x64", False)
        assert not fa.config.enable_x64 and fnp.asarray(_F64).dtype == np.float32
        fa.config.enable_x64 = True
        assert fnp.zeros(2, np.int64).dtype == np.int64
    finally:
        fa.config.enable_x64 = before
    with pytest.raises(AttributeError, match="no setting"):
        fa.config.update("jax_no_such_option", True)
    code = "import numpy as np, fnarray as fa, fnarray.numpy as fnp; print(fa.config.enable_x64, " \
           "fnp.asarray(np.ones(2)).dtype)"
    for env, want in (("1", "True float64"), ("0", "False float32"), (None, "False float32")):
        e = {k: v for k, v in os.environ.items() if k != "FNARRAY_ENABLE_X64"}
        if env is not None:
            e["FNARRAY_ENABLE_X64"] = env
        e["PYTHONPATH"] = os.pathsep.join([os.path.dirname(os.path.dirname(fa.__file__)), e.get("PYTHONPATH", "")])
        out = subprocess.run([sys.executable, "-c", code], env=e, capture_output=True, text=True, timeout=120)
        assert out.stdout.split() == want.split(), (env, out.stdout, out.stderr[-2000:])


def test_jit_does_not_reuse_programs_across_the_switch(device):
    calls = []

    def f(x):
        calls.append(1)
        return x + np.float64(0.1) + fnp.zeros(x.shape, np.float64)

    g = fa.jit(f, device=device)
    x = np.ones(3, np.float32)
    before = fa.config.enable_x64
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            fa.config.enable_x64 = False
            assert g(x).dtype == np.float32
            n_off = len(calls)
            assert g(x).dtype == np.float32 and len(calls) == n_off  # cached
            fa.config.enable_x64 = True
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # a device without float64 falls back
                y = g(x)
            assert y.dtype == np.float64 and len(calls) == n_off + 1  # traced again, not reused
            np.testing.assert_array_equal(np.asarray(y), np.float32(1) + np.float64(0.1))
            fa.config.enable_x64 = False
            assert g(x).dtype == np.float32
    finally:
        fa.config.enable_x64 = before
    assert fa.config.lowering_key() != (fa.config.lowering_key()[:-1] + (not fa.config.enable_x64,))


# ------------------------------------------------------------------ weak types through control flow

def _weak_cases(lib, np_):
    lax = lib.lax
    return {
        "fori_loop int carry": lambda: lax.fori_loop(0, 10, lambda i, a: a + i, 0),
        "fori_loop float carry": lambda: lax.fori_loop(0, 10, lambda i, a: a + 1.0, 0.0),
        "fori_loop index": lambda: lax.fori_loop(0, 3, lambda i, a: i, 0),
        "fori_loop int16 bounds": lambda: lax.fori_loop(np_.int16(0), np_.int16(3), lambda i, a: a + i, 0),
        "fori_loop strong carry": lambda: lax.fori_loop(0, 3, lambda i, a: a + i, np_.int16(0)),
        "while_loop int": lambda: lax.while_loop(lambda a: a < 10, lambda a: a + 1, 0),
        "while_loop float": lambda: lax.while_loop(lambda a: a < 10, lambda a: a + 1.5, 0.0),
        "while_loop becomes strong": lambda: lax.while_loop(lambda a: a < 10, lambda a: a + np_.float32(1), 0.0),
        "scan carry": lambda: lax.scan(lambda c, x: (c + x, c * 2), 0.0, np_.arange(3.0))[0],
        "scan ys of a weak carry": lambda: lax.scan(lambda c, x: (c + x, c * 2), 0.0, np_.arange(3.0))[1],
        "scan without xs": lambda: lax.scan(lambda c, x: (c + 1, c), 0, None, length=3)[0],
        "scan ys without xs": lambda: lax.scan(lambda c, x: (c + 1, c), 0, None, length=3)[1],
        "scan ys of a Python constant": lambda: lax.scan(lambda c, x: (c, 1.0), 0.0, None, length=3)[1],
        "cond weak branches": lambda: lax.cond(True, lambda: 1.0, lambda: 2.0),
        "cond weak operand": lambda: lax.cond(False, lambda x: x * 2, lambda x: x, 1.0),
        "cond weak and strong": lambda: lax.cond(True, lambda: 1.0, lambda: np_.float32(2.0)),
        "switch weak": lambda: lax.switch(1, [lambda: 1, lambda: 2]),
    }


@pytest.mark.parametrize("name", list(_weak_cases(jax, jnp)))
def test_weak_types_through_control_flow_match_jax(device, name):
    with jax.enable_x64(False):
        want = _weak_cases(jax, jnp)[name]()
        want_promoted = [(want + jnp.int8(1)).dtype, (want + jnp.float16(1)).dtype]
    fn = _weak_cases(fa, fnp)[name]
    for how, got in (("eager", _on_device(fn, device)), ("jit", fa.jit(fn, device=device)())):
        assert (got.dtype, got.weak_type) == (want.dtype, want.aval.weak_type), \
            f"{name} ({how}): fnarray {got.dtype} weak={got.weak_type}, JAX {want.dtype} weak={want.aval.weak_type}"
        assert [(got + fnp.int8(1)).dtype, (got + fnp.float16(1)).dtype] == want_promoted, f"{name} ({how})"
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want), err_msg=f"{name} ({how})")


def test_fori_loop_bounds_past_int32_with_x64_as_jax():
    """With 64-bit enabled JAX reads a Python int bound past int32 as a weak int64: ``fori_loop(2**40, 2**40 + 3)``
    runs three steps with a weak int64 index, eagerly and under jit (fnarray raised OverflowError, as it still does
    with 64-bit off: tests/test_bad_input.py). Beside a traced int32 bound such a bound does not fit: an error."""
    body = lambda i, c: c + i   # noqa: E731
    with jax.enable_x64(True):   # (traced only: JAX's compile of the loop would be most of this test's time)
        want = jax.eval_shape(lambda: jax.lax.fori_loop(2 ** 40, 2 ** 40 + 3, body, 0))
    with config_setting("enable_x64", True):
        got = [fa.lax.fori_loop(2 ** 40, 2 ** 40 + 3, body, 0),
               fa.jit(lambda n: fa.lax.fori_loop(2 ** 40, n, body, 0))(np.int64(2 ** 40 + 3))]
        with pytest.raises(OverflowError, match="fori_loop bound 1099511627776 does not fit int32"):
            fa.jit(lambda n: fa.lax.fori_loop(2 ** 40, n, body, 0))(np.int32(3))
    assert (got[0].dtype, got[0].weak_type) == (want.dtype, want.weak_type) == (np.int64, True)
    assert [int(g) for g in got] == [sum(range(2 ** 40, 2 ** 40 + 3))] * 2


def test_issue_example_fori_loop_carry_stays_weak():
    # the issue's example: JAX gives int8 (the Python-int carry stays weak through the loop)
    out = fa.lax.fori_loop(0, 10, lambda i, a: a + i, 0) + fnp.int8(1)
    assert out.dtype == np.int8 and int(out) == 46
