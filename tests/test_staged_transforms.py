"""Eager Jacobians staged into cached jitted programs (``fa.config.stage_eager_transforms``,
fnarray/transforms/staged_transforms.py): results against the eager transforms and NumPy float64 (analytic
derivatives), one program per function fingerprint, and when the function's Python runs."""

from __future__ import annotations

import numpy as np
import pytest

import fnarray as fa
import fnarray.numpy as fnp
from fnarray.transforms import staged_transforms
from helpers import config_setting, python_calls

X0 = np.array([0.3, -0.7, 1.1], np.float32)
MAT0 = np.array([[0.5, -0.2, 0.1], [0.3, 0.8, -0.4], [-0.6, 0.2, 0.9]], np.float32)
SCALE = 0.5  # a global the functions below read


def _tanh_jac(x, c):
    """d/dx of tanh(c x) * x, elementwise (a diagonal Jacobian), in float64."""
    t = np.tanh(c * x)
    return np.diag(c * (1 - t * t) * x + t)


def _hessian_of_sum(f):
    """``hessian`` of ``f(x).sum()``, made anew at each call (as a notebook's loop makes it)."""
    return fa.hessian(lambda x, f=f: f(x).sum())


def _sweep(x, fns):
    out = []
    for f in fns:
        out += [fa.jacfwd(f)(x), fa.jacrev(f)(x), _hessian_of_sum(f)(x)]
    return [np.asarray(o) for o in out]


def _functions(n):
    return [(lambda c: lambda x: fnp.tanh(c * x) * x)(0.5 + 0.25 * k) for k in range(n)]


def test_off_by_default():
    assert fa.config.stage_eager_transforms is False


def test_staged_jacobians_equal_the_eager_ones_and_numpy(device):
    """Rebuilt functions of one code (a notebook's loop): the first sweep stages one program per function and
    transform, the second finds them all; every result equals the eager transform's and the float64 one."""
    x = fa.device_put(X0, device)
    eager = _sweep(x, _functions(3))
    staged_transforms._programs.clear()  # (jit keys the device: another device's test made the same programs)
    shared = None
    if device.backend == "jax":   # the three functions differ in a literal: two XLA programs a transform, not three
        from fnarray.lowering.jax import shared
        shared._shared.clear()
        compiled = shared.stats["made"]
    with config_setting("stage_eager_transforms", True):
        made = staged_transforms.stats["staged"]
        first = _sweep(x, _functions(3))
        assert staged_transforms.stats["staged"] - made == 9
        if shared is not None:
            assert shared.stats["made"] - compiled == 6
        second = _sweep(x, _functions(3))  # new function objects, equal fingerprints
        assert staged_transforms.stats["staged"] - made == 9
        # a found program's call: the hessian is keyed by its function's fingerprint, not by that of jacrev's
        # closure inside jacfwd's (26 values and functions walked on main at c8ec195, 7 here), and arrays passed
        # as they are pick their device scope without flattening (issue 28, programs.py's jacobians_staged)
        calls = python_calls(lambda: _hessian_of_sum(_functions(1)[0])(x))
        assert calls.count("_value") + calls.count("_function") <= 12, calls
        assert "tree_leaves" not in calls and "parse_device" not in calls, calls
    x64 = X0.astype(np.float64)
    for k in range(3):
        want = _tanh_jac(x64, 0.5 + 0.25 * k)
        for got in (first[3 * k], first[3 * k + 1], second[3 * k]):
            np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6)
    for a, b, c in zip(eager, first, second, strict=True):
        np.testing.assert_allclose(b, a, rtol=2e-5, atol=2e-6)
        np.testing.assert_allclose(c, a, rtol=2e-5, atol=2e-6)


def test_the_key_reads_closures_defaults_and_globals():
    """A closure value, a default and a global array each change the result (a new key, not a stale program)."""
    global SCALE
    x = fa.device_put(X0, "numpy:0")
    mat = fa.device_put(MAT0, "numpy:0")
    with config_setting("stage_eager_transforms", True):
        for c in (0.5, 0.75, 0.5):
            np.testing.assert_allclose(np.asarray(fa.jacfwd(lambda x: fnp.tanh(c * x) * x)(x)),
                                       _tanh_jac(X0.astype(np.float64), c), rtol=2e-5, atol=2e-6)
        for c in (0.5, 0.75):
            np.testing.assert_allclose(np.asarray(fa.jacrev(lambda x, c=c: fnp.tanh(c * x) * x)(x)),
                                       _tanh_jac(X0.astype(np.float64), c), rtol=2e-5, atol=2e-6)
        old = SCALE
        try:
            for SCALE in (0.5, 2.0):
                got = fa.jacfwd(lambda x: SCALE * (mat @ x))(x)
                np.testing.assert_allclose(np.asarray(got), SCALE * MAT0, rtol=1e-6)
        finally:
            SCALE = old


def test_side_effects_run_once_per_key_when_staged(capsys):
    """Staged, the function's Python runs at the trace only (as under jit); eager, at every call (as JAX's eager
    transforms); a function holding mutable state (a list) is never staged."""
    x = fa.device_put(X0, "numpy:0")

    def f(x):
        print("ran")
        return fnp.sin(x) * 2.0
    want = np.diag(2 * np.cos(X0.astype(np.float64)))
    for on, expected in ((False, 3), (True, 1)):
        staged_transforms._programs.clear()
        capsys.readouterr()
        with config_setting("stage_eager_transforms", on):
            for _ in range(3):
                np.testing.assert_allclose(np.asarray(fa.jacfwd(f)(x)), want, rtol=2e-6, atol=1e-7)
        assert capsys.readouterr().out.count("ran") == expected, on
    refused = staged_transforms.stats["refused"]
    state = [1.0]
    with config_setting("stage_eager_transforms", True):
        got = fa.jacrev(lambda x: fnp.sin(x) * state[0])(x)
        state[0] = 3.0
        got3 = fa.jacrev(lambda x: fnp.sin(x) * state[0])(x)
    assert staged_transforms.stats["refused"] == refused + 2
    np.testing.assert_allclose(np.asarray(got3), 3 * np.asarray(got), rtol=1e-6)


def test_a_value_dependent_function_runs_eagerly():
    """A branch on a value cannot be traced: the staged call gives way to the eager transform (its result), and
    the function is not traced again."""
    x = fa.device_put(X0, "numpy:0")

    def f(x):
        return fnp.sin(x) if float(x[0]) > 0 else fnp.cos(x)
    with config_setting("stage_eager_transforms", True):
        for _ in range(2):
            np.testing.assert_allclose(np.asarray(fa.jacfwd(f)(x)), np.diag(np.cos(X0.astype(np.float64))),
                                       rtol=2e-6, atol=1e-7)
        with pytest.raises(Exception):  # noqa: B017 (the eager transform's own error, unchanged)
            fa.jacfwd(lambda x: x @ fnp.ones((5,)))(x)
