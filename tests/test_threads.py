"""Threads (issue 12): trace state per thread, caches safe under concurrent use, on every backend.

Four threads each make 1,000 jitted calls (300 on the mlx, opencl and webgpu backends, whose calls
cost milliseconds here: see ``_calls``), once with a function of their own (built in the thread)
and once with one function shared by all; every result is compared with NumPy. Shapes vary so that
threads trace, compile and run at the same time, and eager operations run between the calls while
other threads trace (the original failure: one thread's trace state was visible to another, so an
eager operation in one thread was staged into another thread's program).
"""

from __future__ import annotations

import threading

import numpy as np

import fnarray as fa
import fnarray.numpy as fnp
from helpers import run_threads
from fnarray.core import tracing

N_THREADS = 4
N_CALLS = 1000
SLOW_BACKEND_CALLS = 300  # per thread on the backends whose calls cost milliseconds on this machine
SIZES = (3, 4, 5, 7)


def _calls(device) -> int:
    return N_CALLS if device.backend in ("numpy", "jax") else SLOW_BACKEND_CALLS


def _inputs(t, i):
    n = SIZES[(i + t) % len(SIZES)]
    x = np.linspace(-1.0, 1.0, n, dtype=np.float32) + np.float32(0.01 * t)
    y = np.full(n, 0.5 + i % 3, np.float32)
    return x, y


def _expected(x, y, c):
    x64, y64 = x.astype(np.float64), y.astype(np.float64)
    return np.sin(x64) * y64 + c, np.cos(x64) * c  # the value, and the gradient of sum(sin(x) * c)


def _check(got, x, y, c, what):
    want_v, want_g = _expected(x, y, c)
    np.testing.assert_allclose(np.asarray(got[0]), want_v, rtol=1e-5, atol=1e-5, err_msg=what)
    np.testing.assert_allclose(np.asarray(got[1]), want_g, rtol=1e-5, atol=1e-5, err_msg=what)


def _body(x, y, c):
    # jit, grad and eager-looking code inside: several trace levels per call
    value = fnp.sin(x) * y + c
    g = fa.grad(lambda v: fnp.sum(fnp.sin(v) * c))(x)
    return value, g


def test_threads_distinct_functions(device):
    results = [0] * N_THREADS

    def work(t):
        c = float(t + 1)
        f = fa.jit(lambda x, y: _body(x, y, c), device=device)
        for i in range(_calls(device)):
            x, y = _inputs(t, i)
            xa = fa.device_put(x, device)
            ya = fnp.asarray(y) * 1.0  # an eager operation while other threads trace
            _check(f(xa, ya), x, y, c, f"thread {t} call {i} on {device}")
            results[t] += 1

    run_threads(work, N_THREADS)
    assert results == [_calls(device)] * N_THREADS


def test_threads_shared_function(device):
    results = [0] * N_THREADS
    f = fa.jit(lambda x, y, c: _body(x, y, c), device=device)

    def work(t):
        c = np.float32(t + 1)
        for i in range(_calls(device)):
            x, y = _inputs(t, i)
            _check(f(fa.device_put(x, device), fa.device_put(y, device), c), x, y, float(c),
                   f"thread {t} call {i} on {device}")
            results[t] += 1

    run_threads(work, N_THREADS)
    assert results == [_calls(device)] * N_THREADS


def test_threads_eager_ops_shared_cache(device):
    """Eager operations from four threads at once share one eager cache (and kernel objects)."""
    def work(t):
        for i in range(_calls(device) // 4):
            x, y = _inputs(t, i)
            a = fa.device_put(x, device)
            b = fa.device_put(y, device)
            got = np.asarray(fnp.sin(a) * b + 1.0)
            np.testing.assert_allclose(got, np.sin(x.astype(np.float64)) * y + 1.0, rtol=1e-5, atol=1e-5)

    run_threads(work, N_THREADS)


def test_trace_state_is_per_thread():
    """A thread that is inside a trace does not make another thread's eager operations traced."""
    inside, release = threading.Event(), threading.Event()
    seen = {}

    def traced_body(x):
        inside.set()
        release.wait(10)
        return x * 2.0

    def tracer_thread():
        seen["out"] = np.asarray(fa.jit(traced_body)(fnp.ones(3)))

    th = threading.Thread(target=tracer_thread)
    th.start()
    try:
        assert inside.wait(10)
        assert tracing.trace_level() == 0  # this thread is not tracing
        y = fnp.asarray([1.0, 2.0]) + 1.0
        assert not isinstance(y, tracing.Tracer)
        np.testing.assert_array_equal(np.asarray(y), [2.0, 3.0])
        assert float(fnp.sum(y)) == 5.0  # a concrete value: no ConcretizationError
    finally:
        release.set()
        th.join()
    np.testing.assert_array_equal(seen["out"], [2.0, 2.0, 2.0])


def test_new_thread_starts_with_an_empty_trace_stack():
    levels = {}

    def child():
        levels["child"] = tracing.trace_level()

    def traced(x):
        th = threading.Thread(target=child)  # started while this thread traces
        th.start()
        th.join()
        levels["parent"] = tracing.trace_level()
        return x

    fa.jit(traced)(fnp.ones(2))
    assert levels["child"] == 0
    assert levels["parent"] > 0


def test_backend_starts_once_under_threads():
    """Threads asking at once for a backend not started yet get one instance (one device handle)."""
    import time

    from fnarray.devices.backend import Backend, Device, get_backend, register_backend, unregister_backend
    made = []

    class _Slow(Backend):
        name = "slowstart"

        def __init__(self):
            time.sleep(0.05)  # a backend start takes a while (a driver opens a device)
            made.append(self)
            self._devices = [Device("slowstart", 0, "cpu")]

        def devices(self):
            return self._devices

    register_backend("slowstart", _Slow)
    try:
        got = []
        run_threads(lambda t: got.append(get_backend("slowstart")), N_THREADS)
        assert len(made) == 1
        assert all(b is made[0] for b in got)
    finally:
        unregister_backend("slowstart")
