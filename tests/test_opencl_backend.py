"""The opencl backend on its device (PoCL here): fusion, no silent fallback, dtypes, kernels, runtime.

Results are compared with NumPy (in float64 where it matters) or with the numpy
backend; kernel counts come from ``fa.jit(f, device=...).lower(...).kernels()``.
The parity tier (``tests/test_parity.py``) runs every primitive on this device too.
"""

from __future__ import annotations

import pathlib
import sys
import warnings

import numpy as np
import pytest

import fnarray as fa
import fnarray.numpy as fnp
from fnarray.core import dtypes
from fnarray.core import primitives as P
from fnarray.core.config import config
from fnarray.core.errors import BackendUnavailable, FallbackWarning, UnsupportedOnDevice
from fnarray.testing.cases import CASES, NOT_EXECUTED

from helpers import require_backend

sys.path.append(str(pathlib.Path(__file__).resolve().parents[1] / "benchmarks"))  # after examples/: both have an llm.py
from backend_vs_raw import fn_init, fn_loss, make_fn_step  # noqa: E402

REF = fa.devices("numpy")[0]


@pytest.fixture(scope="module")
def dev():
    return require_backend("opencl")[0]


def put(x, device):
    return fa.device_put(fnp.asarray(x), device)


def f32(*shape, seed=0, lo=-1.0, hi=1.0):
    return np.random.default_rng(seed).uniform(lo, hi, shape).astype(np.float32)


def lowered_kernels(f, device, *args):
    return fa.jit(f, device=device).lower(*[put(a, device) for a in args]).kernels()


# ------------------------------------------------------------------------------------- the device


def test_device_is_listed_with_a_description(dev):
    assert str(dev) == "opencl:0" and dev.platform in ("gpu", "cpu")
    assert dev.description
    caps = dev.impl.capabilities(dev)
    assert caps.control_flow == "host" and dtypes.float32 in caps.dtypes and dtypes.bfloat16 not in caps.dtypes


def test_broken_driver_makes_the_backend_unavailable(monkeypatch):
    cl = pytest.importorskip("pyopencl")
    from fnarray.lowering.opencl import backend

    def no_platform():
        raise cl.Error("clGetPlatformIDs failed: PLATFORM_NOT_FOUND_KHR")
    monkeypatch.setattr(backend.cl, "get_platforms", no_platform)
    with pytest.raises(BackendUnavailable, match="pocl-binary-distribution"):
        backend.make_backend()
    monkeypatch.undo()

    def broken_device(cl_device):
        raise cl.Error("clCreateContext failed: OUT_OF_HOST_MEMORY")
    monkeypatch.setattr(backend, "_DeviceState", broken_device)
    with pytest.raises(BackendUnavailable, match="OUT_OF_HOST_MEMORY"):
        backend.make_backend()


# ------------------------------------------------------------------------------------- fusion


def test_chain_is_one_kernel_and_correct(dev):
    a, x, b = f32(1000), f32(1000, seed=1), f32(1000, seed=2)

    def chain(a, x, b):
        return fnp.tanh(a * x + b) * x + 1.0
    ks = lowered_kernels(chain, dev, a, x, b)
    assert len(ks) == 1
    got = np.asarray(fa.jit(chain, device=dev)(put(a, dev), put(x, dev), put(b, dev)))
    want = np.tanh(a.astype(np.float64) * x + b) * x + 1
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_sum_exp_shifted_is_at_most_two_kernels(dev):
    x = f32(5000, lo=-5, hi=5)

    def f(x):
        return fnp.sum(fnp.exp(x - fnp.max(x)))
    assert len(lowered_kernels(f, dev, x)) <= 2
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(float(fa.jit(f, device=dev)(put(x, dev))), np.sum(np.exp(x64 - x64.max())),
                               rtol=1e-5)


def test_a_gathered_residual_read_by_a_layernorm_is_computed_once_on_a_cpu_device(dev):
    """The transformer's residual stream (an embedding gather plus positions) read by a layernorm's row loops gets
    a buffer of its own on a CPU device (the scheduler option ``share_values``: each loop would redo the gather),
    and stays inline on a GPU; the result equals float64 NumPy's."""
    table, pos = f32(96, 64, seed=1), f32(64, 64, seed=2)
    ids = np.random.default_rng(3).integers(0, 96, (16, 64)).astype(np.int32)

    def f(table, pos, ids):
        h = fnp.take(table, ids, axis=0) + pos
        mu = fnp.mean(h, axis=-1, keepdims=True)
        return (h - mu) / fnp.sqrt(fnp.mean((h - mu) ** 2, axis=-1, keepdims=True) + 1e-5)
    ks = lowered_kernels(f, dev, table, pos, ids)
    assert len(ks) == (2 if dev.impl.capabilities(dev).matmul_tiling == "register" else 1), ks
    h = table[ids].astype(np.float64) + pos
    want = (h - h.mean(-1, keepdims=True)) / np.sqrt(h.var(-1, keepdims=True) + 1e-5)
    got = np.asarray(fa.jit(f, device=dev)(put(table, dev), put(pos, dev), put(ids, dev)))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_concatenations_branch_on_a_cpu_device(dev):
    """A concatenation of more than two uneven pieces inside a kernel is a tree of ``if``s on a CPU device (the
    scheduler option ``concat_branches``), a ``select`` chain on a GPU; the result equals NumPy's."""
    x = f32(50, 12, seed=6)

    def f(v):
        return fnp.sin(fnp.concatenate([v[:, :1], v[:, 3:7], v[:, 1:3], v[:, 7:]] * 2, axis=1))
    source = "".join(k.source for k in lowered_kernels(f, dev, x))
    assert ("cat0 = " in source) == (dev.impl.capabilities(dev).matmul_tiling == "register")
    want = np.sin(np.concatenate([x[:, :1], x[:, 3:7], x[:, 1:3], x[:, 7:]] * 2, axis=1).astype(np.float64))
    np.testing.assert_allclose(np.asarray(fa.jit(f, device=dev)(put(x, dev))), want, rtol=1e-5, atol=1e-6)


def test_matmul_bias_relu_is_one_matmul_kernel(dev):
    x, w, b = f32(100, 70), f32(70, 90, seed=1), f32(90, seed=2)

    def f(x, w, b):
        return fa.nn.relu(x @ w + b)
    ks = lowered_kernels(f, dev, x, w, b)
    # One matmul kernel with the epilogue fused; on a CPU device (matmul_tiling="register") the kernel packing
    # both operands before it is a copy that fuses nothing.
    dots = [k for k in ks if k.kind == "dot"]
    assert len(dots) == 1 and all(k.kind == "copy" and not k.eqns for k in ks if k.kind != "dot"), ks
    assert len(ks) == (2 if dev.impl.capabilities(dev).matmul_tiling == "register" else 1), ks
    assert {P.dot_general, P.add, P.max_p} <= {e.primitive for e in dots[0].eqns}
    got = np.asarray(fa.jit(f, device=dev)(put(x, dev), put(w, dev), put(b, dev)))
    want = np.maximum(x.astype(np.float64) @ w + b, 0)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_mlp_gradient_in_fewer_kernels_than_primitives(dev):
    params = fn_init()
    x = f32(64, 64)
    y = np.eye(10, dtype=np.float32)[np.random.default_rng(0).integers(0, 10, 64)]
    g = fa.jit(fa.grad(fn_loss), device=dev)
    lowered = g.lower({k: put(v, dev) for k, v in params.items()}, put(x, dev), put(y, dev))
    n_prims, n_kernels = len(lowered.program.eqns), len(lowered.kernels())
    assert n_kernels < n_prims, (n_kernels, n_prims)
    # (The values of these gradients are checked through the training step below.)


def test_kernel_listing_shows_the_fused_equations(dev):
    text = str(lowered_kernels(lambda x, y: fnp.exp(x) * y + 1.0, dev, f32(8), f32(8, seed=1)))
    assert "fuses" in text and "exp" in text and "mul" in text and "__kernel" in text


# ------------------------------------------------------------------------------------- no silent fallback


def test_digits_training_step_runs_without_fallback(dev, no_fallback):
    opt, step = make_fn_step()
    params = fn_init()
    rng = np.random.default_rng(1)
    x = rng.uniform(0, 1, (64, 64)).astype(np.float32)
    y = np.eye(10, dtype=np.float32)[rng.integers(0, 10, 64)]
    results = {}
    for d in (dev, REF):
        p = {k: put(v, d) for k, v in params.items()}
        state = opt.init(p)
        js = fa.jit(step, device=d)
        losses = []
        for _ in range(3):
            p, state, loss = js(p, state, put(x, d), put(y, d))
            losses.append(float(loss))
        results[d] = (losses, {k: np.asarray(v) for k, v in p.items()})
    (l_dev, p_dev), (l_ref, p_ref) = results[dev], results[REF]
    np.testing.assert_allclose(l_dev, l_ref, rtol=1e-4)
    assert l_dev[2] < l_dev[0]
    for k in p_ref:
        np.testing.assert_allclose(p_dev[k], p_ref[k], rtol=1e-4, atol=1e-5, err_msg=k)


def _by_design_on_numpy(prim, inputs) -> bool:
    """qr, eigh and svd have no kernel (kernels/no_kernel.py), nor have the linear-algebra kernels a
    complex form: the support matrix says they fall back."""
    from fnarray.lowering.kernels.schedule import SCHEDULED
    return prim.kind == "linalg" and (prim not in SCHEDULED or any(np.iscomplexobj(x) for x in inputs))


_RUNNABLE = [c for c in CASES if c[1] not in NOT_EXECUTED and not _by_design_on_numpy(c[1], c[2])]


@pytest.mark.parametrize("name,prim,inputs,params", _RUNNABLE, ids=[c[0] for c in _RUNNABLE])
def test_parity_primitive_runs_on_the_device(dev, no_fallback, name, prim, inputs, params):
    args = [put(x, dev) for x in inputs]
    out = fa.jit(lambda *a: prim.bind(*a, **params), device=dev)(*args)
    for o in (out if isinstance(out, (list, tuple)) else [out]):
        assert o.device == dev
        np.asarray(o)


def test_unsupported_dtype_falls_back_or_raises(dev):
    x = put(np.arange(4, dtype=np.float32), dev)

    def f(x):
        return (x.astype(dtypes.bfloat16) * 2).astype(fnp.float32)
    old = config.fallback
    try:
        config.fallback = "warn"
        with warnings.catch_warnings(record=True) as rec:
            warnings.simplefilter("always")
            out = fa.jit(f, device=dev)(x)
        np.testing.assert_allclose(np.asarray(out), [0, 2, 4, 6])
        assert out.device == dev
        assert any(issubclass(w.category, FallbackWarning) and "bfloat16" in str(w.message) for w in rec)
        config.fallback = "error"
        with pytest.raises(UnsupportedOnDevice, match="bfloat16"):
            fa.jit(f, device=dev)(x)
    finally:
        config.fallback = old


# ------------------------------------------------------------------------------------- dtypes


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "uint32", "int64", "int8", "uint8", "int16"])
def test_dtype_arithmetic(dev, no_fallback, dtype):
    d = np.dtype(dtype)
    if d not in dev.impl.capabilities(dev).dtypes:
        pytest.skip(f"{dev} has no {dtype}")
    rng = np.random.default_rng(0)
    if d.kind == "f":
        x, y = rng.uniform(-3, 3, 50).astype(d), rng.uniform(0.5, 3, 50).astype(d)
    else:
        info = np.iinfo(d)
        x = rng.integers(info.min, info.max, 50, endpoint=True).astype(d)
        y = rng.integers(info.min, info.max, 50, endpoint=True).astype(d)
        y[:5] = 0

    def f(x, y):
        return x * y + x, x // y if d.kind != "f" else x / y, fnp.maximum(x, y), fnp.sum(x)
    got = fa.jit(f, device=dev)(put(x, dev), put(y, dev))
    want = fa.jit(f, device=REF)(x, y)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype == (d if d.itemsize >= 4 or g.ndim else g.dtype)
        if d.kind == "f":
            np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-6 if d == np.float32 else 1e-13)
        else:
            np.testing.assert_array_equal(np.asarray(g), np.asarray(w))


def test_bool_arrays(dev, no_fallback):
    a, b = np.random.default_rng(0).random((2, 40)) < 0.5
    got = fa.jit(lambda a, b: (a & ~b, fnp.any(a), fnp.sum(a)), device=dev)(put(a, dev), put(b, dev))
    np.testing.assert_array_equal(np.asarray(got[0]), a & ~b)
    assert bool(got[1]) == a.any() and int(got[2]) == a.sum()


def test_float16_needs_cl_khr_fp16(dev, no_fallback):
    if dtypes.float16 not in dev.impl.capabilities(dev).dtypes:
        pytest.skip(f"{dev} lacks cl_khr_fp16 (float16 runs where the device has it)")
    x = np.linspace(-2, 2, 33).astype(np.float16)
    got = fa.jit(lambda x: fnp.exp(x) * 2, device=dev)(put(x, dev))
    np.testing.assert_allclose(np.asarray(got).astype(np.float32), np.exp(x.astype(np.float32)) * 2, rtol=2e-3)


def test_complex64(dev, no_fallback):
    rng = np.random.default_rng(0)
    z = (rng.standard_normal(20) + 1j * rng.standard_normal(20)).astype(np.complex64)
    w = (rng.standard_normal(20) + 1j * rng.standard_normal(20)).astype(np.complex64)
    got = fa.jit(lambda z, w: (z * w + z / w, fnp.exp(z), fnp.abs(z), z * (1 + 2j), fnp.sum(z)),
                 device=dev)(put(z, dev), put(w, dev))
    z64, w64 = z.astype(np.complex128), w.astype(np.complex128)
    wants = (z64 * w64 + z64 / w64, np.exp(z64), np.abs(z64), z64 * (1 + 2j), np.sum(z64))
    for g, want in zip(got, wants, strict=True):
        np.testing.assert_allclose(np.asarray(g), want, rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------------------------- kernels at size


def _same_as_numpy_backend(f, device, *args, rtol=2e-5, atol=1e-5):
    got = fa.jit(f, device=device)(*[put(a, device) for a in args])
    want = fa.jit(f, device=REF)(*args)
    got = got if isinstance(got, (list, tuple)) else [got]
    want = want if isinstance(want, (list, tuple)) else [want]
    for g, w in zip(got, want, strict=True):
        g, w = np.asarray(g), np.asarray(w)
        assert g.shape == w.shape and g.dtype == w.dtype
        if w.dtype.kind in "fc":
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, equal_nan=True)
        else:
            np.testing.assert_array_equal(g, w)


def test_work_group_reductions(dev, no_fallback):
    x = f32(3, 5000)
    x[1, 3000] = np.nan
    ties = np.round(f32(4, 3000, seed=1) * 3)
    ties[2, 100] = np.nan
    ties[2, 2000] = np.nan
    _same_as_numpy_backend(lambda x: (fnp.sum(x, axis=1), fnp.max(x, axis=1), fnp.min(x, axis=1)), dev, x,
                           rtol=1e-4, atol=1e-4)
    _same_as_numpy_backend(lambda t: (fnp.argmax(t, axis=1), fnp.argmin(t, axis=1), fnp.argmax(t.T, axis=0)),
                           dev, ties)
    ints = np.random.default_rng(2).integers(-100, 100, (7, 300, 5)).astype(np.int32)
    _same_as_numpy_backend(lambda v: (fnp.sum(v, axis=1), fnp.sum(v, axis=(0, 2)), fnp.max(v)), dev, ints)


@pytest.mark.parametrize("m,k,n", [(70, 33, 129), (130, 257, 65), (5, 7, 3)])
def test_matmul_shapes(dev, no_fallback, m, k, n):
    a, b = f32(m, k), f32(k, n, seed=1)
    _same_as_numpy_backend(lambda a, b: (a @ b, b.T @ a.T), dev, a, b, rtol=1e-4, atol=1e-4)


def test_batched_and_integer_matmuls(dev, no_fallback):
    rng = np.random.default_rng(0)
    a, b = rng.integers(-5, 5, (3, 70, 40)).astype(np.int32), rng.integers(-5, 5, (3, 40, 90)).astype(np.int32)
    _same_as_numpy_backend(lambda a, b: a @ b, dev, a, b)
    x, y = f32(2, 3, 4, 5), f32(4, 6, 5, 2, seed=1)
    _same_as_numpy_backend(lambda x, y: fnp.einsum("bmkl,knlb->bmn", x, y), dev, x, y, rtol=1e-4)


def test_sort_is_stable_with_nans_last(dev, no_fallback):
    rng = np.random.default_rng(0)
    v = rng.uniform(-1, 1, (5, 1000)).astype(np.float32)
    v[0, ::7] = np.nan
    v[1, :500] = 0.25
    v[2, ::3] = -0.0
    _same_as_numpy_backend(lambda v: (fnp.sort(v, axis=1), fnp.argsort(v, axis=1), fnp.argsort(v.T, axis=0)),
                           dev, v)
    keys = rng.integers(0, 4, (300,)).astype(np.int32)
    _same_as_numpy_backend(lambda k: fnp.argsort(k, stable=True), dev, keys)


def test_cumulative_ops(dev, no_fallback):
    a = f32(4, 50, 3, lo=0.5, hi=1.5)
    _same_as_numpy_backend(lambda a: (fnp.cumsum(a, axis=1), fnp.cumprod(a, axis=0), fnp.cumsum(a[::-1], axis=2)),
                           dev, a, rtol=1e-4)


def test_scatter_add_is_deterministic(dev, no_fallback):
    rng = np.random.default_rng(0)
    idx = rng.integers(0, 10, 500).astype(np.int32)
    upd = f32(500, 4, seed=1)

    def f(x, i, u):
        return x.at[i].add(u)
    x = f32(10, 4, seed=2)
    outs = [np.asarray(fa.jit(f, device=dev)(put(x, dev), put(idx, dev), put(upd, dev))) for _ in range(2)]
    np.testing.assert_array_equal(outs[0], outs[1])
    want = x.astype(np.float64).copy()
    np.add.at(want, idx, upd)
    np.testing.assert_allclose(outs[0], want, rtol=1e-5, atol=1e-5)


def test_gathers_and_dynamic_slices(dev, no_fallback):
    x = f32(10, 4, 3)
    i = np.random.default_rng(0).integers(-5, 15, (6, 7)).astype(np.int32)
    _same_as_numpy_backend(lambda x, i: (x[i], fnp.take(x, i, axis=2), x[2:9:3, ::-1]), dev, x, i)


def test_host_driven_control_flow(dev, no_fallback):
    def f(x, n):
        y = fa.fori_loop(0, n, lambda i, c: c * 0.5 + 1.0, x)
        z = fa.cond(n > 3, lambda v: v * 2.0, lambda v: v - 1.0, y)
        c, ys = fa.scan(lambda c, e: (c + e, c * e), 0.0, x)
        return y, z, c, ys
    x = f32(6)
    _same_as_numpy_backend(f, dev, x, np.int32(5))


def test_zero_size_and_rank0(dev, no_fallback):
    _same_as_numpy_backend(lambda x: (x * 2, fnp.sum(x, axis=0), fnp.max(x, axis=0, initial=-1.0)), dev,
                           np.zeros((0, 3), np.float32))
    _same_as_numpy_backend(lambda s: s * s + 1.0, dev, np.float32(3.0))


# ------------------------------------------------------------------------------------- runtime


def test_buffers_stay_on_the_device(dev):
    from fnarray.lowering.opencl.backend import CLBuffer
    f = fa.jit(lambda x: x * 2.0 + 1.0, device=dev)
    y = f(put(f32(16), dev))
    assert isinstance(y._buf, CLBuffer) and y._host is None
    z = f(y)
    assert isinstance(z._buf, CLBuffer) and y._host is None


def test_programs_are_cached_by_source(dev):
    state = dev.impl.state(dev)
    f = fa.jit(lambda x, y: x * y - 3.0, device=dev)
    f(put(f32(10), dev), put(f32(10, seed=1), dev)).block_until_ready()
    before = len(state.programs)
    f(put(f32(3, 7), dev), put(f32(3, 7, seed=1), dev)).block_until_ready()  # another shape: same kernel
    assert len(state.programs) == before


def test_eager_operations_on_device_arrays(dev):
    x = put(f32(5), dev)
    y = fnp.exp(x) + x * 2
    assert y.device == dev
    np.testing.assert_allclose(np.asarray(y), np.exp(np.asarray(x)) + np.asarray(x) * 2, rtol=1e-6)


def test_a_read_waits_for_its_copy_outside_the_device_lock(dev, monkeypatch):
    """A thread reading an array (``_DeviceState.download``) enqueues its copy under the device's lock and waits
    for it outside: another thread's eager launch is enqueued meanwhile, not after the read (it waited on the lock
    while the queue ran the copy and everything before it). Here the queue is stopped before the copy by a marker
    waiting for a user event, opened only once the other thread's launch is in."""
    import threading

    import pyopencl as cl
    state = dev.impl.state(dev)
    x0 = np.arange(8, dtype=np.float32)
    x = put(x0, dev)
    y = x * 2.0
    np.asarray(x + 1.0)   # both compiled
    gate = cl.UserEvent(state.context)
    cl.enqueue_marker(state.queue, wait_for=[gate])   # the queue waits here until the gate opens
    copying, launched, got = threading.Event(), threading.Event(), {}
    enqueue_copy = cl.enqueue_copy

    def copy(*args, **kw):
        copying.set()
        return enqueue_copy(*args, **kw)
    monkeypatch.setattr(cl, "enqueue_copy", copy)

    def launch():
        got["z"] = x + 1.0
        launched.set()
    reader = threading.Thread(target=lambda: got.setdefault("y", np.asarray(y)))
    writer = threading.Thread(target=launch)
    try:
        reader.start()
        assert copying.wait(60)
        writer.start()
        assert launched.wait(60), "the eager launch waited for another thread's read"
        assert "y" not in got   # the read still waits for the queue
    finally:
        gate.set_status(cl.command_execution_status.COMPLETE)
        reader.join()
        writer.join()
    np.testing.assert_array_equal(got["y"], x0 * 2)
    np.testing.assert_array_equal(np.asarray(got["z"]), x0 + 1)


def test_memory_pool_gives_back_free_blocks(dev, monkeypatch):
    """PyOpenCL's pool kept every freed block: arrays of ever new sizes grew the process without bound
    (found by outside testing: 40 arrays of 10-400 MB, each freed, left 6 GB held). Free blocks now stay
    only up to the bytes in use or ``_POOL_HELD_BYTES`` (made small here so that small arrays show it)."""
    from fnarray.lowering.opencl import backend as ocl
    monkeypatch.setattr(ocl, "_POOL_HELD_BYTES", 1 << 20, raising=False)
    state = dev.impl._states[dev]
    pool = state.pool
    pool.free_held()
    for k in range(24):
        buf = state.alloc((40_000 + 4_099 * k,), np.dtype(np.float32))   # 160-550 KB, every size new: 8.4 MB
        del buf
    held = pool.managed_bytes - pool.active_bytes
    assert held <= max(1 << 20, pool.active_bytes) + (600 << 10), held
    x = fa.device_put(np.arange(5, dtype=np.float32), dev)
    np.testing.assert_array_equal(np.asarray(x * 2.0), np.arange(5) * 2.0)   # the pool still serves


# ------------------------------------------------------------------------------ donated inputs updated in place


def _cache_step(cache, x, pos):
    """``x`` written at row ``pos`` of ``cache`` (a KV cache's update) and the new cache's column sums."""
    new = fa.lax.dynamic_update_slice(cache, fnp.tanh(x) * 2.0, (pos, 0))
    return fnp.sum(new, axis=0), new


def _kernel_names(lowered):
    return [k.name.rsplit("_", 1)[0] for k in lowered.kernels()]   # without the digest of the source


@pytest.mark.parametrize("profiled", [False, True])
def test_donated_cache_is_updated_in_place(dev, profiled):
    """``jit(donate_argnums=...)`` on opencl: a ``dynamic_update_slice`` of the donated cache is one kernel over
    the new row, written into the donated buffer, which the result takes over (no new buffer, no copy of the
    cache); the same kernel count as without donation; the results equal NumPy's float64 step after step (also
    under the profiler, whose calls run on a second queue), and the donated array is deleted."""
    f = fa.jit(_cache_step, donate_argnums=0)
    cache = fa.device_put(np.zeros((256, 8), np.float32), dev)
    first = cache.call_view()[0].mem
    args = (cache, np.zeros((1, 8), np.float32), np.int32(0))
    assert _kernel_names(f.lower(*args)) == ["update_tanh_mul_dynamic_update_slice", "reduce_reduce_sum"]
    assert _kernel_names(fa.jit(_cache_step).lower(*args)) == [
        "map_tanh_mul_dynamic_update_slice", "reduce_reduce_sum"]                 # the whole cache written
    want = np.zeros((256, 8))
    for pos in (0, 3, 255, 300):                                 # 300: clamped to the last row
        x = np.random.default_rng(pos).normal(size=(1, 8)).astype(np.float32)
        if profiled:
            with fa.profiler.trace():
                total, new = f(cache, fa.device_put(x, dev), np.int32(pos))
        else:
            total, new = f(cache, fa.device_put(x, dev), np.int32(pos))
        assert cache.is_deleted() and new.call_view()[0].mem is first
        with pytest.raises(RuntimeError, match="donated"):
            np.asarray(cache)
        want[min(pos, 255)] = np.tanh(x[0].astype(np.float64)) * 2.0
        np.testing.assert_allclose(np.asarray(total), want.sum(0), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(np.asarray(new), want, rtol=1e-6, atol=1e-6)
        cache = new
    # Without donation the cache is a new buffer each call, and the argument keeps its value.
    _, again = fa.jit(_cache_step)(cache, fa.device_put(np.ones((1, 8), np.float32), dev), np.int32(0))
    assert again.call_view()[0].mem is not first and not cache.is_deleted()
    np.testing.assert_allclose(np.asarray(cache), want, rtol=1e-6, atol=1e-6)


def test_donated_caches_of_one_layer_are_updated_in_place(dev):
    """A layer's key and value caches, both donated, updated by one kernel (updates of 1 and 3 rows); the results
    equal NumPy's float64 step after step, both buffers kept."""
    def step(keys, values, k, v, pos):
        new_k = fa.lax.dynamic_update_slice(keys, fnp.tanh(k), (pos, 0))
        new_v = fa.lax.dynamic_update_slice(values, v * 2.0, (pos, 0))
        return fnp.sum(new_k) + fnp.sum(new_v), new_k, new_v

    f = fa.jit(step, donate_argnums=(0, 1))
    keys, values = fa.device_put(np.zeros((64, 8), np.float32), dev), fa.device_put(np.zeros((64, 8), np.float32), dev)
    mems = (keys.call_view()[0].mem, values.call_view()[0].mem)
    rng = np.random.default_rng(3)
    want_k, want_v = np.zeros((64, 8)), np.zeros((64, 8))
    for pos in (0, 7, 62):                                       # 62: the 3-row update clamped to start at 61
        k, v = rng.normal(size=(1, 8)).astype(np.float32), rng.normal(size=(3, 8)).astype(np.float32)
        total, keys, values = f(keys, values, k, v, np.int32(pos))
        want_k[pos] = np.tanh(k[0].astype(np.float64))
        want_v[min(pos, 61):min(pos, 61) + 3] = v.astype(np.float64) * 2.0
        assert (keys.call_view()[0].mem, values.call_view()[0].mem) == mems
        np.testing.assert_allclose(np.asarray(keys), want_k, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(np.asarray(values), want_v, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(float(total), want_k.sum() + want_v.sum(), rtol=1e-5, atol=1e-4)
    names = _kernel_names(f.lower(keys, values, k, v, np.int32(0)))
    assert [n for n in names if n.startswith("update")] == ["update_tanh_dynamic_update_slice_mul"]


def test_donated_device_scalar_is_copied_not_overwritten(dev):
    """A rank-0 array may be one of the device's cached scalars (uploads of equal values share a buffer): its
    in-place update goes to a copy, so the cached value stays."""
    f = fa.jit(lambda c, v: fa.lax.dynamic_update_slice(c, v, ()), donate_argnums=0)
    a = fa.device_put(np.float32(1.5), dev)
    got = f(a, np.float32(7.0))
    assert a.is_deleted() and float(got) == 7.0
    assert float(fa.device_put(np.float32(1.5), dev)) == 1.5


@pytest.mark.parametrize("how", ["set", "add", "max"])
def test_donated_scatter_is_updated_in_place(dev, how):
    """A scatter into a donated array writes only the updated rows, in place: repeated indices combine in order
    (``set``: the last wins), out-of-bounds ones are dropped; against NumPy's ``ufunc.at`` in float64."""
    rng = np.random.default_rng(7)
    x = rng.uniform(0.5, 1.5, (6, 5, 3)).astype(np.float32)
    rows = np.asarray([4, 1, 4, 9, 0, 1], np.int32)             # 4 and 1 twice; 9 out of bounds
    u = rng.uniform(0.5, 1.5, (6, 5, 3)).astype(np.float32)
    f = fa.jit(lambda a, i, v: getattr(a.at[i], how)(v), donate_argnums=0)
    a = fa.device_put(x, dev)
    before = a.call_view()[0].mem
    got = f(a, rows, u)
    assert a.is_deleted() and got.call_view()[0].mem is before
    want = x.astype(np.float64)
    keep = rows < x.shape[0]
    if how == "set":
        want[rows[keep]] = u[keep].astype(np.float64)           # the repeated rows' last update wins
    else:
        {"add": np.add, "max": np.maximum}[how].at(want, rows[keep], u[keep].astype(np.float64))
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-6)


def test_an_alias_of_a_donated_buffer_says_so(dev):
    """An array sharing the donated array's buffer (a jitted call's output that is its input) cannot be read
    after the buffer was updated in place: a clear error, never the updated values."""
    x = fa.device_put(np.zeros((4, 2), np.float32), dev)
    alias = fa.jit(lambda a: a)(x)
    f = fa.jit(lambda c: fa.lax.dynamic_update_slice(c, fnp.ones((1, 2), np.float32), (0, 0)), donate_argnums=0)
    got = f(x)
    np.testing.assert_array_equal(np.asarray(got)[0], [1.0, 1.0])
    with pytest.raises(RuntimeError, match="donated"):
        np.asarray(alias)
