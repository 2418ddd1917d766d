"""The kernel backends' eager index operations without launches of their own (fnarray/lowering/kernels/deferred.py,
on webgpu:0 and opencl:0): a reshape is a view of its operand's buffer, broadcasts and transposes run inside the
elementwise operation that reads them, or once when anything else reads them; launches counted per call (issue 28:
jacobians' launches that only move a few floats), values against NumPy, and in-place updates of a buffer that a
view or a deferred value reads."""

from __future__ import annotations

import numpy as np
import pytest

import fnarray as fa
import fnarray.numpy as fnp
from helpers import config_setting, count_lowerings, decode_step, fresh_eager_keys, require_backend


def _count_webgpu(monkeypatch, count):
    from fnarray.lowering.webgpu import dispatch
    call = dispatch.Runner.__call__

    def counting(self, bufs):
        count[0] += len(self.launches)
        return call(self, bufs)
    monkeypatch.setattr(dispatch.Runner, "__call__", counting)


def _count_bind_groups(monkeypatch, device) -> list:
    """``[bind groups made since zeroed, whether counted]``: webgpu:0's ``wgpuDeviceCreateBindGroup`` calls where it
    records through wgpu-native's C functions (``native.Native`` reads its ``lib`` at each call); ``[0, False]``
    elsewhere."""
    calls = getattr(getattr(device.impl, "gpu", None), "calls", None)
    made = [0, bool(getattr(calls, "native", False))]
    if made[1]:
        lib = calls.lib

        class Counting:
            def __getattr__(self, name):
                if name != "wgpuDeviceCreateBindGroup":
                    return getattr(lib, name)

                def create(*args):
                    made[0] += 1
                    return lib.wgpuDeviceCreateBindGroup(*args)
                return create
        monkeypatch.setattr(calls, "lib", Counting())
    return made


def _count_opencl(monkeypatch, count):
    import pyopencl as cl
    enqueue = cl.enqueue_nd_range_kernel

    def counting(*args, **kwargs):
        count[0] += 1
        return enqueue(*args, **kwargs)
    monkeypatch.setattr(cl, "enqueue_nd_range_kernel", counting)


@pytest.fixture(params=["webgpu", "opencl"])
def launches(request, monkeypatch):
    """``(device, count)``: webgpu:0 or opencl:0 and a list whose ``[0]`` counts the kernels launched since it was
    zeroed."""
    device = require_backend(request.param)[0]
    count = [0]
    (_count_webgpu if request.param == "webgpu" else _count_opencl)(monkeypatch, count)
    return device, count


def _launched(count, fn):
    fn()   # compiles what it needs
    count[0] = 0
    out = fn()
    return count[0], out


def test_reshape_is_a_view_and_index_operations_run_in_their_reader(launches, monkeypatch):
    device, count = launches
    from fnarray.devices import placement
    general = [0]   # eager calls through ``placement._eager_run``: a hit calls the executable's ``one`` directly
    run = placement._eager_run
    monkeypatch.setattr(placement, "_eager_run", lambda *a: general.__setitem__(0, general[0] + 1) or run(*a))
    x0 = np.arange(8, dtype=np.float32) - 3.5
    m0 = np.arange(64, dtype=np.float32).reshape(8, 8) / 7
    x, m = fa.device_put(x0, device), fa.device_put(m0, device)
    n, r = _launched(count, lambda: x.reshape(2, 4))
    assert n == 0 and r._buf.base is x._buf
    np.testing.assert_array_equal(np.asarray(r), x0.reshape(2, 4))
    # vmap's broadcast of an unbatched operand, a transpose and a reshape of it: one launch with the product
    n, y = _launched(count, lambda: fa.lax.broadcast_in_dim(x, (8, 8), (1,)) * m)
    assert n == 1
    np.testing.assert_allclose(np.asarray(y), x0[None, :] * m0)
    general[0] = 0
    n, y = _launched(count, lambda: fnp.tanh(fa.lax.broadcast_in_dim(x, (2, 8), (1,)).T.reshape(4, 4)))
    assert n == 1 and general[0] == 4   # the first call's four misses; the second's hits direct
    np.testing.assert_allclose(np.asarray(y), np.tanh(np.broadcast_to(x0, (2, 8)).T.reshape(4, 4)), rtol=1e-6)
    # a product reads a deferred transpose where it lies (a decode loop's ``q @ k.T``): one launch, no copy first
    n, y = _launched(count, lambda: x.reshape(1, 8) @ m.T)
    assert n == 1
    np.testing.assert_allclose(np.asarray(y), x0.astype(np.float64).reshape(1, 8) @ m0.T, rtol=1e-5, atol=1e-5)
    # read by anything else (a reduction, a readback, block_until_ready), it runs once, on its own
    b = fa.lax.broadcast_in_dim(x, (8, 8), (0,))
    n, s = _launched(count, lambda: fnp.sum(b, axis=1))
    assert n == 1   # the broadcast ran at the first call, and is kept
    np.testing.assert_allclose(np.asarray(s), 8 * x0)
    count[0] = 0
    np.testing.assert_array_equal(np.asarray(m.T), m0.T)
    assert count[0] == 1
    count[0] = 0
    m.T.block_until_ready()
    assert count[0] == 1


def test_a_donated_buffer_that_a_view_or_deferred_value_reads_is_updated_as_a_copy(launches):
    device, _ = launches
    x0 = np.arange(8, dtype=np.float32)
    upd = fa.jit(lambda c, u: fa.lax.dynamic_update_slice(c, u, (np.int32(2),)), donate_argnums=0)
    for make, want in ((lambda a: a.reshape(2, 4), x0.reshape(2, 4)),
                       (lambda a: fa.lax.broadcast_in_dim(a, (3, 8), (1,)), np.broadcast_to(x0, (3, 8)))):
        a = fa.device_put(x0, device)
        kept = make(a)
        r = upd(a, fa.device_put(np.full(3, -1, np.float32), device))
        np.testing.assert_array_equal(np.asarray(kept), want)
        np.testing.assert_array_equal(np.asarray(r), np.concatenate([x0[:2], [-1, -1, -1], x0[5:]]))
        assert a.is_deleted()
    # a view donated to an in-place update: updated as a copy (a view always shares its base), the base kept
    a = fa.device_put(x0.reshape(2, 4), device)
    r = upd(a.reshape(8), fa.device_put(np.full(3, -1, np.float32), device))
    np.testing.assert_array_equal(np.asarray(r), np.concatenate([x0[:2], [-1, -1, -1], x0[5:]]))
    np.testing.assert_array_equal(np.asarray(a), x0.reshape(2, 4))


def test_jacobian_launches_per_call(launches):
    """``jacfwd``/``jacrev``/``hessian`` of ``tanh(c x) x`` at 8 points: eagerly 14/13/49 launches before
    deferred.py, 11/10/31 now; staged (``stage_eager_transforms``) one each, was two (``tanh(c x)`` under the
    ``[8, 8]`` broadcast recomputed per element: the scheduler's ``recompute_below``)."""
    device, count = launches
    x0 = np.linspace(-1, 1, 8, dtype=np.float32)
    x = fa.device_put(x0, device)

    def f(x):
        return fnp.tanh(0.7 * x) * x

    t = np.tanh(0.7 * x0.astype(np.float64))
    s = 1 - t * t   # d/dx tanh(0.7 x) = 0.7 s
    want = (np.diag(0.7 * s * x0 + t), np.diag(0.7 * s * x0 + t), np.diag(1.4 * s - 0.98 * s * t * x0))
    transforms = (fa.jacfwd(f), fa.jacrev(f), fa.hessian(lambda x: f(x).sum()))
    for staged, counts in ((False, (11, 10, 31)), (True, (1, 1, 1))):
        with config_setting("stage_eager_transforms", staged):
            for transform, n_want, w in zip(transforms, counts, want, strict=True):
                n, got = _launched(count, lambda transform=transform: transform(x).block_until_ready())
                assert n == n_want, (staged, transform, n)
                np.testing.assert_allclose(np.asarray(got), w, rtol=2e-5, atol=2e-6)


def test_eager_decode_steps_replay_their_tapes(launches, monkeypatch):
    """``eager_programs="tapes"``: a key's second call records its tape (the eager executables its general path
    ran), its later calls replay it; no key gets a program, and a kernel backend compiles nothing for either.
    Four passes of two decode steps whose cache grows a row a step (every step's calls new keys): the second pass
    records, the third replays, both with the first pass's launches, no lowering after the first pass, and the
    first pass's bits (NumPy float64's softmax attention within rounding). On webgpu:0 a fourth pass of replays
    makes no bind group (the kept ones: ``dispatch.KEPT_GROUPS``; a cache uploaded anew each pass would make one,
    its first concatenation's) and submits only at its two readbacks, not per launch (the open command encoder:
    ``dispatch.BATCH_LAUNCHES``)."""
    from fnarray.transforms import eager_jit
    device, count = launches
    assert device.impl.capabilities(device).eager_programs == "tapes"
    fresh_eager_keys(monkeypatch)
    lowered = count_lowerings(monkeypatch, device)
    made = _count_bind_groups(monkeypatch, device)
    step = decode_step(fnp)
    rng = np.random.default_rng(3)
    q0, row0 = rng.standard_normal((1, 8)).astype(np.float32), rng.standard_normal((1, 8)).astype(np.float32)
    q, row = fa.device_put(q0, device), fa.device_put(row0, device)
    passes, api = [], []
    start = fa.device_put(np.zeros((1, 8), np.float32), device)   # each pass's first cache: the same buffer
    for _ in range(4):
        gpu = getattr(device.impl, "gpu", None)
        submits, made[0] = gpu.submits if gpu is not None else 0, 0
        info, n_lowered, count[0] = eager_jit.cache_info(), len(lowered), 0
        cache = start
        outs = []
        for _ in range(2):
            cache, out = step(cache, q, row)
            outs.append(np.asarray(out))
        after = eager_jit.cache_info()
        passes.append((count[0], len(lowered) - n_lowered, after["tapes"] - info["tapes"], after["made"] - info["made"],
                       [o.tobytes() for o in outs]))
        api.append((made[0], gpu.submits - submits if gpu is not None else 0))
    (n1, _, tapes1, _, bits1), (n2, low2, tapes2, made2, bits2), (n3, low3, tapes3, made3, bits3) = passes[:3]
    assert n1 == n2 == n3 == passes[3][0] and low2 == low3 == 0 and made2 == made3 == 0, passes
    if made[1]:   # webgpu:0 recording through wgpu-native's C functions (native.Native)
        assert api[3] == (0, 2), api   # no bind group made; one submit at each of the pass's two readbacks
    assert tapes1 == 0 and tapes2 >= 2 * 5 and tapes3 == 0, (tapes1, tapes2, tapes3)   # 5+ keys a step
    assert bits1 == bits2 == bits3
    c0 = np.concatenate([np.zeros((1, 8)), np.repeat(row0.astype(np.float64), 2, 0)])
    sc = q0.astype(np.float64) @ c0.T
    e = np.exp(sc - sc.max(-1, keepdims=True))
    np.testing.assert_allclose(outs[-1], e / e.sum(-1, keepdims=True) @ c0, rtol=1e-5, atol=1e-6)


def test_small_buffers_are_pooled_past_sixty_four_of_a_size():
    """A sweep holding 120 results of 256 bytes takes them all from the pool the second time (with 64 kept a
    size, 56 new wgpu buffers a pass: most of the staged jacobian sweep's time): webgpu:0."""
    device = require_backend("webgpu")[0]
    from fnarray.lowering.webgpu import backend
    gpu = device.impl.gpu
    x = fa.device_put(np.ones((8, 8), np.float32), device)
    held = [x + float(k) for k in range(120)]
    del held
    gpu.alloc(np.float32, (1,))   # takes back the buffers returned meanwhile
    assert len(gpu.pool[256]) >= 120
    assert backend._pooled_per_size(256) == backend._POOLED_SMALL_MOST
    assert backend._pooled_per_size(1 << 20) == backend._POOLED_PER_SIZE


def test_small_eager_launches_wait_in_batches_until_read(monkeypatch):
    """On a CPU device small eager launches are held behind a user event (opencl's ``_DeviceState.hold``): PoCL's
    threads woken once a batch of ``HOLD_LAUNCHES``; a read, ``block_until_ready`` or anything taking the queue
    lets the held ones go first. opencl:0."""
    device = require_backend("opencl")[0]
    import pyopencl as cl
    from fnarray.lowering.opencl import backend
    state = device.impl.state(device)
    if not state.hold_items:
        pytest.skip(f"{device} is a GPU: nothing held")
    x0 = np.linspace(-1, 1, 8, dtype=np.float32)
    x = fa.device_put(x0, device)
    (x * 0.5).block_until_ready()   # compiled
    held, opened = [], []
    enqueue, user_event = cl.enqueue_nd_range_kernel, cl.UserEvent

    class Gate(user_event):
        def set_status(self, status):
            opened.append(held.count(self))
            return super().set_status(status)

    def counting(queue, kernel, gsize, lsize, wait_for=None, **kw):
        held.extend(wait_for or [None])
        return enqueue(queue, kernel, gsize, lsize, wait_for=wait_for, **kw)
    monkeypatch.setattr(cl, "enqueue_nd_range_kernel", counting)
    monkeypatch.setattr(cl, "UserEvent", Gate)
    y, n = x, backend.HOLD_LAUNCHES + 8
    for _ in range(n):
        y = y * 0.5
    assert opened == [backend.HOLD_LAUNCHES] and None not in held
    np.testing.assert_allclose(np.asarray(y), x0 * 0.5 ** n, rtol=1e-6)   # the read lets the last 8 go
    assert opened == [backend.HOLD_LAUNCHES, 8]
    y = x * 0.5
    state.queue.finish()   # the queue taken: the held launch goes first
    assert opened[-1] == 1
    np.testing.assert_array_equal(np.asarray(y), x0 * 0.5)
