"""``fnarray.experimental.enable_x64`` / ``disable_x64`` (``core.config.x64_scope``): 64-bit dtypes for one
thread's ``with`` block, as JAX's context managers, while other threads keep the global setting; and
``test_util.check_grads``, which widens float32 differences inside such a scope, no longer flips the global
switch under other threads. References: NumPy's dtypes, the global setting read outside the block."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import fnarray as fa
import fnarray.numpy as fnp
from fnarray.experimental import disable_x64, enable_x64
from fnarray.test_util import check_grads

WAIT_S = 60


def _in_threads(inside, outside):
    """Run ``inside(ready, done)`` and ``outside(ready, done)`` on two threads; re-raise the first error."""
    ready, done, errors = threading.Event(), threading.Event(), []

    def run(fn):
        try:
            fn(ready, done)
        except BaseException as e:   # (reported by the main thread)
            errors.append(e)
            ready.set()
            done.set()
    threads = [threading.Thread(target=run, args=(fn,)) for fn in (inside, outside)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT_S)
    if errors:
        raise errors[0]


def test_scope_is_per_thread():
    """One thread in ``enable_x64()`` keeps float64 (arrays and a jitted function's result) while the other,
    at the same time, gets float32 from the same calls and the same jitted function."""
    assert not fa.config.enable_x64
    x32 = fnp.ones(2)
    g = fa.jit(lambda v: v + fnp.ones(2, dtype=fnp.float64))
    seen = {}

    def inside(ready, done):
        with enable_x64():
            seen["in"] = (fnp.asarray(np.ones(2)).dtype, g(x32).dtype, fa.config.enable_x64)
            ready.set()
            assert done.wait(WAIT_S)
            seen["in_after_other"] = g(x32).dtype
        seen["after"] = (fnp.asarray(np.ones(2)).dtype, g(x32).dtype)

    def outside(ready, done):
        assert ready.wait(WAIT_S)
        with pytest.warns(UserWarning, match="float64"):
            seen["out"] = (fnp.asarray(np.ones(2)).dtype, g(x32).dtype, fa.config.enable_x64)
        done.set()
    _in_threads(inside, outside)
    assert seen["in"] == (np.float64, np.float64, True)
    assert seen["out"] == (np.float32, np.float32, False)
    assert seen["in_after_other"] == np.float64
    assert seen["after"] == (np.float32, np.float32)


def test_scopes_nest_and_leave_the_global_setting(monkeypatch):
    monkeypatch.setattr(fa.config, "enable_x64", True)
    with disable_x64():
        assert fnp.asarray(np.ones(1)).dtype == np.float32
        with enable_x64(True):
            assert fnp.asarray(np.ones(1)).dtype == np.float64
        assert not fa.config.enable_x64
    assert fa.config.enable_x64 and fnp.asarray(np.ones(1)).dtype == np.float64
    with pytest.raises(TypeError, match="bool"):
        with enable_x64("yes"):
            pass
    # JAX 0.10's spelling, jax.enable_x64, and jax.experimental without its own import, as after ``import jax``
    monkeypatch.setattr(fa.config, "enable_x64", False)
    with fa.enable_x64():
        assert fnp.arange(2).dtype == np.int64
    assert fa.experimental.disable_x64 is disable_x64 and fnp.arange(2).dtype == np.int32


def test_check_grads_widens_in_its_own_thread_only():
    """``check_grads`` of a float32 function evaluates its differences in float64 (the function sees float64
    inputs) while another thread, during that evaluation, still sees 32-bit dtypes."""
    seen = {"dtypes": set()}

    def inside(ready, done):
        def f(x):
            seen["dtypes"].add(np.dtype(x.dtype))
            if x.dtype == np.float64 and not ready.is_set():
                ready.set()
                assert done.wait(WAIT_S)
            return fnp.sin(x) * x
        check_grads(f, (np.linspace(0.5, 1.5, 3).astype(np.float32),), order=1, modes=("rev",))

    def outside(ready, done):
        assert ready.wait(WAIT_S)
        seen["outside"] = (fa.config.enable_x64, fnp.zeros(1, dtype=float).dtype)
        done.set()
    _in_threads(inside, outside)
    assert np.dtype(np.float64) in seen["dtypes"]
    assert seen["outside"] == (False, np.float32)
