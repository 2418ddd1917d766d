"""The call path: Python scalars reach the device once, and every scalar value stays exact.

On jax:0 a device scalar is kept per (type, value, dtype) in a bounded cache, for eager operations
and for scalar arguments of jitted calls (not donated ones). Counted uploads, not timings, are
asserted here; the times are in benchmarks/call_overhead.py.
"""

import math

import numpy as np
import pytest

import fnarray as fa
import fnarray.numpy as fnp


def _count_uploads(monkeypatch, device):
    impl = fa.devices(device.split(":")[0])[0].impl
    calls = [0]
    orig = impl.to_device

    def counting(array, dev):
        calls[0] += 1
        return orig(array, dev)

    monkeypatch.setattr(impl, "to_device", counting)
    return calls


def test_eager_scalar_operand_is_uploaded_once_on_jax(monkeypatch):
    pytest.importorskip("jax")
    x = fa.device_put(fnp.arange(4, dtype=fnp.float32), "jax:0")
    calls = _count_uploads(monkeypatch, "jax:0")
    for _ in range(50):
        y = x * 2.5 + 1.0
    assert calls[0] <= 2
    np.testing.assert_array_equal(np.asarray(y), np.arange(4, dtype=np.float32) * 2.5 + 1.0)


def test_jitted_scalar_argument_is_uploaded_once_on_jax(monkeypatch):
    pytest.importorskip("jax")
    x = fa.device_put(fnp.arange(4, dtype=fnp.float32), "jax:0")
    f = fa.jit(lambda a, s: a * s)
    f(x, 2.5)
    calls = _count_uploads(monkeypatch, "jax:0")
    for _ in range(50):
        y = f(x, 2.5)
    assert calls[0] <= 1
    np.testing.assert_array_equal(np.asarray(y), np.arange(4, dtype=np.float32) * 2.5)


@pytest.mark.filterwarnings("ignore:Some donated buffers were not usable")
def test_donated_scalar_gets_its_own_buffer_on_jax():
    pytest.importorskip("jax")
    x = fa.device_put(fnp.arange(4, dtype=fnp.float32), "jax:0")
    f = fa.jit(lambda a, s: a * s)
    g = fa.jit(lambda a, s: a * s, donate_argnums=(1,))
    want = np.arange(4, dtype=np.float32) * 1.5
    for _ in range(3):
        np.testing.assert_array_equal(np.asarray(f(x, 1.5)), want)
        np.testing.assert_array_equal(np.asarray(g(x, 1.5)), want)
    np.testing.assert_array_equal(np.asarray(x * 1.5), want)


@pytest.mark.parametrize("value", [2.0, -0.0, 0.0, math.nan, math.inf, -3, True, 1, 1.0, np.float32(0.25)])
def test_scalar_values_exact_in_any_order(device, value):
    """Values that compare equal (0.0 and -0.0, 1 and True and 1.0) never share a cached buffer."""
    x = fa.device_put(fnp.asarray([1.0, -2.0, 0.5], dtype=fnp.float32), device)
    xn = np.asarray([1.0, -2.0, 0.5], dtype=np.float32)
    for v in (value, -0.0, 0.0, 1, True, 1.0, value):
        got = np.asarray(x * v)
        want = xn * np.float32(v)
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
    f = fa.jit(lambda a, s: a * s)
    for v in (value, -0.0, 0.0, value):
        np.testing.assert_array_equal(np.signbit(np.asarray(f(x, v))), np.signbit(xn * np.float32(v)))


def test_scalar_cache_is_bounded():
    pytest.importorskip("jax")
    from fnarray.lowering import jax as jax_lowering
    x = fa.device_put(fnp.ones(2, dtype=fnp.float32), "jax:0")
    for i in range(jax_lowering._SCALAR_CACHE_SIZE * 2):
        x * (i + 0.5)
    impl = fa.devices("jax")[0].impl
    assert len(impl._scalars._d) <= jax_lowering._SCALAR_CACHE_SIZE


def test_cached_call_on_a_non_default_device_skips_the_trace_lookup(monkeypatch):
    """Arrays on jax:0 with numpy:0 the default: a repeated call is a hit of the per-function table."""
    pytest.importorskip("jax")
    x = fa.device_put(fnp.arange(4, dtype=fnp.float32), "jax:0")
    f = fa.jit(lambda a: a * 2.0 + 1.0)
    f(x)
    looked_up = [0]
    orig = type(f)._trace

    def counting(self, *a, **k):
        looked_up[0] += 1
        return orig(self, *a, **k)

    monkeypatch.setattr(type(f), "_trace", counting)
    for _ in range(20):
        y = f(x)
    assert looked_up[0] == 0
    assert str(y.device) == "jax:0"
    np.testing.assert_array_equal(np.asarray(y), np.arange(4, dtype=np.float32) * 2 + 1)


def test_a_call_without_arrays_runs_on_the_default_device():
    """An entry made for jax:0 arrays never decides where a call without array arguments runs."""
    pytest.importorskip("jax")
    f = fa.jit(lambda s: fnp.full((3,), 1.0) * s)
    a = fa.device_put(fnp.asarray(2.0, dtype=fnp.float32), "jax:0")
    assert str(f(a).device) == "jax:0"
    y = f(np.float32(3.0))
    assert y.device == fa.devices()[0]
    np.testing.assert_array_equal(np.asarray(y), np.full(3, 3.0, np.float32))
    b = fa.device_put(fnp.asarray(2.0, dtype=fnp.float32), "numpy:0")
    assert str(f(b).device) == "numpy:0" and str(f(a).device) == "jax:0"
