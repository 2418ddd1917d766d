"""Dispatch on the kernel backends (issue 28 item 3): what a cached jitted call costs in API calls.

A cached call of a training step on opencl:0 and webgpu:0 must cost a bounded number of driver API
calls per kernel and make nothing (no buffer, kernel, program or pipeline; on webgpu only the bind groups of
the kernels that bind the call's own buffers, released once recorded) after its first calls: every wgpu /
pyopencl entry point the backends call, and the wgpu-native C functions webgpu's call path calls directly, is
wrapped in a counting shim for one call. Also: results equal numpy:0's; two threads calling one jitted
function (sharing its kernels and arena) get their own results; buffers reused from call to call never alias an
output the caller still holds; the profiler's kernel spans are the device's time and the host's time around
them is ``dispatch``; on webgpu, small calls share one command buffer and one compute pass, an upload takes a
buffer no recorded work uses and a readback comes after the work recorded before it, and errors of the direct
C calls still raise.
"""

from __future__ import annotations

import collections

import numpy as np
import pytest

import fnarray as fa
import fnarray.numpy as fnp
from helpers import decode_loop, decode_step, require_backend, run_threads

# --------------------------------------------------------------------------- the program


def _loss(params, x, y):
    h = fnp.tanh(x @ params["w1"] + params["b1"])
    out = h @ params["w2"] + params["b2"]
    return fnp.mean((out - y) ** 2)


def _step(params, m, x, y):
    """One step of SGD with momentum: value, gradient, update (about 10-20 kernels)."""
    loss, g = fa.value_and_grad(_loss)(params, x, y)
    m = {k: 0.9 * m[k] + g[k] for k in params}
    params = {k: params[k] - 0.05 * m[k] for k in params}
    return params, m, loss


def _data(seed=0):
    rng = np.random.default_rng(seed)
    params = {"w1": rng.standard_normal((6, 16)).astype(np.float32) * 0.4, "b1": np.zeros(16, np.float32),
              "w2": rng.standard_normal((16, 3)).astype(np.float32) * 0.4, "b2": np.zeros(3, np.float32)}
    x = rng.standard_normal((32, 6)).astype(np.float32)
    y = rng.standard_normal((32, 3)).astype(np.float32)
    return params, x, y


def _reference(steps, seed=0):
    """``steps`` steps on numpy:0: the list of (params, momentum, loss) as NumPy values."""
    params, x, y = _data(seed)
    f = fa.jit(_step, device="numpy:0")
    p, m = fa.device_put(params, "numpy:0"), fa.device_put({k: np.zeros_like(v) for k, v in params.items()}, "numpy:0")
    out = []
    for _ in range(steps):
        p, m, loss = f(p, m, x, y)
        out.append(({k: np.asarray(v) for k, v in p.items()}, {k: np.asarray(v) for k, v in m.items()}, float(loss)))
    return out


def _on(device, seed=0):
    params, x, y = _data(seed)
    p = fa.device_put(params, device)
    m = fa.device_put({k: np.zeros_like(v) for k, v in params.items()}, device)
    return p, m, fa.device_put(x, device), fa.device_put(y, device)


# --------------------------------------------------------------------------- counting shims


def _count_wgpu(monkeypatch, counts):
    """Count every call of the wgpu-py methods the webgpu backend uses (device, encoder, pass, queue), and of the
    wgpu-native C functions its call path calls directly (``native.Native``: named ``native.wgpu...``)."""
    from wgpu.backends.wgpu_native import _api
    names = {
        "GPUDevice": ("create_buffer", "create_buffer_with_data", "create_bind_group", "create_bind_group_layout",
                      "create_pipeline_layout", "create_shader_module", "create_compute_pipeline",
                      "create_command_encoder", "create_query_set"),
        "GPUCommandEncoder": ("begin_compute_pass", "copy_buffer_to_buffer", "clear_buffer", "resolve_query_set",
                              "finish"),
        "GPUComputePassEncoder": ("set_pipeline", "set_bind_group", "dispatch_workgroups", "end"),
        "GPUQueue": ("submit", "write_buffer", "read_buffer"),
    }
    for cls_name, methods in names.items():
        cls = getattr(_api, cls_name)
        for meth in methods:
            monkeypatch.setattr(cls, meth, _counted(getattr(cls, meth), f"{cls_name}.{meth}", counts))
    calls = require_backend("webgpu")[0].impl.gpu.calls
    if calls.native:
        monkeypatch.setattr(calls, "lib", _CountedLib(calls.lib, counts))


class _CountedLib:
    """wgpu-native's cffi library with every function call counted as ``native.<name>``."""

    def __init__(self, lib, counts):
        self._lib, self._counts = lib, counts

    def __getattr__(self, name):
        f = getattr(self._lib, name)
        return _counted(f, f"native.{name}", self._counts) if callable(f) else f


def _count_opencl(monkeypatch, counts):
    """Count the pyopencl entry points the opencl backend calls (enqueues, arguments, creations, the pool)."""
    import pyopencl as cl
    import pyopencl.tools as cl_tools
    monkeypatch.setattr(cl.Kernel, "set_arg", _counted(cl.Kernel.set_arg, "Kernel.set_arg", counts))
    for name in ("enqueue_nd_range_kernel", "enqueue_copy", "Buffer", "Program", "Kernel"):
        monkeypatch.setattr(cl, name, _counted(getattr(cl, name), name, counts))
    monkeypatch.setattr(cl_tools.MemoryPool, "allocate", _counted(cl_tools.MemoryPool.allocate, "pool.allocate",
                                                                  counts))


def _counted(fn, name, counts):
    def wrapper(*args, **kwargs):
        counts[name] += 1
        return fn(*args, **kwargs)
    return wrapper


_CREATES = {"webgpu": ("GPUDevice.create_buffer", "GPUDevice.create_buffer_with_data", "GPUDevice.create_bind_group",
                       "GPUDevice.create_bind_group_layout", "GPUDevice.create_pipeline_layout",
                       "GPUDevice.create_shader_module", "GPUDevice.create_compute_pipeline",
                       "GPUDevice.create_query_set"),
            "opencl": ("Buffer", "Program", "Kernel")}


def _one_counted_call(device, monkeypatch, f, args):
    counts = collections.Counter()
    with monkeypatch.context() as mp:
        (_count_wgpu if device.backend == "webgpu" else _count_opencl)(mp, counts)
        out = f(*args)
    return out, counts


# --------------------------------------------------------------------------- tests


def test_cached_call_costs_a_bounded_number_of_api_calls(kdev, monkeypatch):
    f = fa.jit(_step, device=kdev)
    p, m, x, y = _on(kdev)
    n_kernels = len(f.lower(p, m, x, y).kernels())
    assert n_kernels >= 5
    for _ in range(3):  # compiles; then the pool holds buffers of every output size
        p, m, loss = f(p, m, x, y)
    n_launches = _n_launches(kdev, f, (p, m, x, y))
    if kdev.backend == "webgpu":
        if kdev.platform == "cpu":   # each layer's bias and weight updates: phases of one work-group (phases.py)
            assert n_launches == n_kernels - 2
        float(loss)   # nothing recorded: the counted call opens the command encoder
        own = _own_buffer_launches(f, (p, m, x, y))
        args = [p, m, x, y]
        del p, m, loss   # as a loop lets them go: the pool gives the next outputs
        _webgpu_calls_count_exactly(kdev, monkeypatch, f, args, n_launches, own)
        return
    assert n_launches <= n_kernels
    pool = kdev.impl.state(kdev).pool
    managed = pool.managed_bytes
    (p, m, loss), counts = _one_counted_call(kdev, monkeypatch, f, (p, m, x, y))
    n_in, n_out = 10, 9
    made = {k: counts[k] for k in _CREATES[kdev.backend] if counts[k]}
    assert not made, f"a cached call made {made}; all calls: {dict(counts)}"
    assert sum(counts.values()) <= 3 * n_kernels + n_in + n_out + 6, (n_kernels, dict(counts))
    assert counts["enqueue_nd_range_kernel"] == n_launches and counts["enqueue_copy"] == 0, dict(counts)
    assert counts["pool.allocate"] <= n_out and counts["Kernel.set_arg"] <= n_in + 2 * n_out, dict(counts)
    assert pool.managed_bytes == managed  # the pool made no new device memory
    float(loss)


def _n_launches(device, f, args):
    """The launches of a call of ``f``: one a kernel, except on a CPU OpenCL device or webgpu adapter, where
    consecutive small kernels are one launch (``kernels/phases.py``; its executable's steps, its plan's steps)."""
    if device.backend == "webgpu":
        return len(f.lower(*args)._backend_lowered.launch_plan().steps)
    return len(f.lower(*args)._backend_lowered.compile().steps)


def _own_buffer_launches(f, args):
    """The launches of ``f``'s plan that bind one of the call's own buffers (an input or an output)."""
    plan = f.lower(*args)._backend_lowered.launch_plan()
    own = set(range(plan.n_inputs)) | {o for o in plan.outputs if isinstance(o, int)}
    return sum(1 for st in plan.steps if own & set(st.slots))


def _webgpu_calls_count_exactly(kdev, monkeypatch, f, args, n_launches, own):
    """A cached webgpu call records per launch one bind group (made only where the launch binds the call's own
    buffers, and released once recorded), ``set_bind_group`` and ``dispatch_workgroups``, and ``set_pipeline``
    where the pipeline changes; no copy, no buffer, pipeline or layout made. The first call after a wait opens
    the command encoder and its compute pass; the next call records into the same pass: no wgpu-py method at all."""
    from fnarray.lowering.webgpu import dispatch
    assert 2 * n_launches < dispatch.BATCH_LAUNCHES and n_launches < dispatch.ALONE_LAUNCHES   # neither submits
    assert 0 < own <= n_launches
    (args[0], args[1], loss), first = _one_counted_call(kdev, monkeypatch, f, args)   # the old p, m let go
    (args[0], args[1], loss), second = _one_counted_call(kdev, monkeypatch, f, args)
    native = kdev.impl.gpu.calls.native
    for counts in (first, second):
        made = {k: counts[k] for k in _CREATES["webgpu"] if counts[k]}
        prefix = "native.wgpuComputePassEncoder" if native else "GPUComputePassEncoder."
        assert counts[prefix + ("DispatchWorkgroups" if native else "dispatch_workgroups")] == n_launches
        assert counts[prefix + ("SetBindGroup" if native else "set_bind_group")] == n_launches
        assert 1 <= counts[prefix + ("SetPipeline" if native else "set_pipeline")] <= n_launches
        if native:
            assert not made, f"a cached call made {made}; all calls: {dict(counts)}"
            # at most one a kernel that binds the call's own buffers: none where the call's buffers are the ones
            # a kept bind group binds; a new one is kept, and releases the oldest kept one past
            # dispatch.KEPT_GROUPS (bound was == own before runners kept bind groups, twentieth session)
            assert counts["native.wgpuBindGroupRelease"] <= counts["native.wgpuDeviceCreateBindGroup"] <= own
        else:
            assert made == {"GPUDevice.create_bind_group": own}, dict(counts)
        assert counts["GPUCommandEncoder.copy_buffer_to_buffer"] == 0, dict(counts)
        for name in ("GPUQueue.submit", "GPUQueue.write_buffer", "GPUQueue.read_buffer", "GPUCommandEncoder.finish",
                     "GPUComputePassEncoder.end"):
            assert counts[name] == 0, dict(counts)
    assert first["GPUDevice.create_command_encoder"] == first["GPUCommandEncoder.begin_compute_pass"] == 1
    public = {k: v for k, v in second.items() if not k.startswith("native.")}
    if native:
        assert not public, f"a call recorded after another used wgpu-py's methods: {public}"
    assert sum(second.values()) <= 5 * n_launches, dict(second)
    float(loss)


def test_results_equal_numpy_over_many_calls(kdev):
    ref = _reference(6)
    f = fa.jit(_step, device=kdev)
    p, m, x, y = _on(kdev)
    for want_p, want_m, want_loss in ref:
        p, m, loss = f(p, m, x, y)
        np.testing.assert_allclose(float(loss), want_loss, rtol=2e-5)
        for k in want_p:
            np.testing.assert_allclose(np.asarray(p[k]), want_p[k], rtol=2e-5, atol=2e-6, err_msg=k)
            np.testing.assert_allclose(np.asarray(m[k]), want_m[k], rtol=2e-5, atol=2e-6, err_msg=k)


def test_outputs_the_caller_holds_are_never_reused(kdev):
    """Every call's outputs stay as they were while later calls reuse the executable's arena and the pool's
    buffers: the outputs of all six calls, read only at the end, equal numpy:0's step by step."""
    ref = _reference(6)
    f = fa.jit(_step, device=kdev)
    p, m, x, y = _on(kdev)
    held = []
    for _ in range(6):
        p, m, loss = f(p, m, x, y)
        held.append((p, m, loss))
    for (p, m, loss), (want_p, want_m, want_loss) in zip(held, ref, strict=True):
        np.testing.assert_allclose(float(loss), want_loss, rtol=2e-5)
        for k in want_p:
            np.testing.assert_allclose(np.asarray(p[k]), want_p[k], rtol=2e-5, atol=2e-6, err_msg=k)
            np.testing.assert_allclose(np.asarray(m[k]), want_m[k], rtol=2e-5, atol=2e-6, err_msg=k)


def test_passthrough_constant_and_reread_outputs_stay_distinct(kdev):
    """Outputs that are an input, a constant, or also read by a later kernel of the same call: none is
    overwritten by the next call, and the input passed through is the caller's own array."""
    def f(a, b):
        s = a * 2.0 + b          # an output that the next kernel reads too
        t = fnp.sum(s * s)       # a reduction over it
        return a, s, t, fnp.float32(3.0), s + 1.0

    g = fa.jit(f, device=kdev)
    outs = []
    for i in range(4):
        a = fa.device_put(np.full(8, float(i), np.float32), kdev)
        b = fa.device_put(np.arange(8, dtype=np.float32), kdev)
        outs.append((i, a, g(a, b)))
    for i, a, (a2, s, t, c, s1) in outs:
        want = np.full(8, 2.0 * i, np.float32) + np.arange(8, dtype=np.float32)
        assert a2 is a or np.array_equal(np.asarray(a2), np.asarray(a))
        np.testing.assert_array_equal(np.asarray(s), want)
        np.testing.assert_allclose(float(t), float(np.sum(want.astype(np.float64) ** 2)), rtol=1e-6)
        assert float(c) == 3.0
        np.testing.assert_array_equal(np.asarray(s1), want + 1.0)


def test_two_threads_calling_one_jitted_function(kdev):
    """Both threads share the function's executable (its kernels and arena); each gets
    the results of its own inputs, call after call."""
    f = fa.jit(_step, device=kdev)
    refs = {t: _reference(8, seed=t) for t in (0, 1)}
    p, m, x, y = _on(kdev)
    f(p, m, x, y)  # compile once, before the threads start

    def work(t):
        p, m, x, y = _on(kdev, seed=t)
        for _, _, want_loss in refs[t]:
            p, m, loss = f(p, m, x, y)
            np.testing.assert_allclose(float(loss), want_loss, rtol=2e-5)
        want_p = refs[t][-1][0]
        for k in want_p:
            np.testing.assert_allclose(np.asarray(p[k]), want_p[k], rtol=2e-5, atol=2e-6, err_msg=k)

    run_threads(work, n=2, timeout=300.0)


def test_profiler_kernel_spans_are_device_time_and_the_rest_is_dispatch(kdev):
    f = fa.jit(_step, device=kdev)
    p, m, x, y = _on(kdev)
    for _ in range(2):
        p, m, loss = f(p, m, x, y)
    float(loss)
    with fa.profiler.trace() as h:
        for _ in range(3):
            p, m, loss = f(p, m, x, y)
        float(loss)
    recs = h.profile.records
    kernels = [r for r in recs if r.kind == "kernel"]
    assert len(kernels) == 3 * _n_launches(kdev, f, (p, m, x, y))
    timed = [r for r in kernels if "device_us" in r.args]
    if not timed:
        pytest.skip(f"{kdev} gives no device times (no timestamp queries / profiling events)")
    for r in timed:  # a kernel span lasts its device time (less only where clamped into its call)
        assert r.dur <= r.args["device_us"] * 1e3 + 1
        assert r.parent is not None and r.parent.kind == "dispatch" and r.parent.args.get("launches")
    runs = {id(r.parent): r.parent for r in timed}
    assert len(runs) == 3
    for run in runs.values():  # the host's time around the launches is the run span's own (dispatch) time
        inside = sum(r.dur for r in recs if r.parent is run)
        assert abs(run.self_ns - max(run.dur - inside, 0)) <= 1
    s = h.profile.summary()
    assert s.counts["dispatch"] >= 3 and s.totals_ns["kernel"] > 0
    if s.dominant == "dispatch":
        assert "around kernel launches" in s.verdict, s.verdict


def _held(device):
    return (device.impl.gpu if device.backend == "webgpu" else device.impl.state(device)).held_bytes


def test_past_the_held_budget_buffers_come_per_call(kdev, monkeypatch):
    """With no budget for executable-held memory, intermediates, inputs and outputs are bound per call
    (the path of programs whose intermediates are too large to keep): the same results."""
    import importlib
    mod = importlib.import_module(f"fnarray.lowering.{kdev.backend}.dispatch")
    monkeypatch.setattr(mod, "HELD_BYTES", 0)
    ref = _reference(4, seed=2)
    f = fa.jit(lambda p, m, x, y: _step(p, m, x, y), device=kdev)
    p, m, x, y = _on(kdev, seed=2)
    before = _held(kdev)
    for _, _, want_loss in ref:
        p, m, loss = f(p, m, x, y)
        np.testing.assert_allclose(float(loss), want_loss, rtol=2e-5)
    assert _held(kdev) == before
    want_p = ref[-1][0]
    for k in want_p:
        np.testing.assert_allclose(np.asarray(p[k]), want_p[k], rtol=2e-5, atol=2e-6, err_msg=k)


def test_held_memory_is_given_back_with_the_executable(kdev):
    import gc
    before = _held(kdev)
    f = fa.jit(lambda p, m, x, y: _step(p, m, x, y), device=kdev)
    p, m, x, y = _on(kdev, seed=3)
    p, m, loss = f(p, m, x, y)
    float(loss)
    assert _held(kdev) > before
    del f
    gc.collect()
    assert _held(kdev) == before


def test_webgpu_profile_without_timestamp_queries(monkeypatch):
    """An adapter without timestamp queries: each kernel is submitted and waited for alone under the
    profiler, its span the wall time; the results are those of numpy:0."""
    device = require_backend("webgpu")[0]
    monkeypatch.setattr(device.impl.gpu, "has_timestamps", False)
    ref = _reference(3, seed=4)
    f = fa.jit(lambda p, m, x, y: _step(p, m, x, y), device=device)
    p, m, x, y = _on(device, seed=4)
    with fa.profiler.trace() as h:
        for _, _, want_loss in ref:
            p, m, loss = f(p, m, x, y)
            np.testing.assert_allclose(float(loss), want_loss, rtol=2e-5)
    kernels = [r for r in h.profile.records if r.kind == "kernel" and r.parent is not None
               and r.parent.kind == "dispatch"]
    assert kernels and not any("device_us" in r.args for r in kernels)
    for k in ref[-1][0]:
        np.testing.assert_allclose(np.asarray(p[k]), ref[-1][0][k], rtol=2e-5, atol=2e-6, err_msg=k)


# --------------------------------------------------------------------------- webgpu: one command buffer for small calls


def _webgpu():
    return require_backend("webgpu")[0]


def test_webgpu_small_calls_share_one_command_buffer():
    """Forty calls of a one-kernel program: one submit per ``BATCH_LAUNCHES`` kernels, not one per call; the
    results (read only at the end) equal NumPy's, step by step."""
    from fnarray.lowering.webgpu import dispatch
    dev = _webgpu()
    gpu = dev.impl.gpu
    f = fa.jit(lambda c, r: c * 0.5 + r, device=dev)
    r = fa.device_put(np.arange(8, dtype=np.float32), dev)
    c = fa.device_put(np.ones(8, np.float32), dev)
    c = f(c, r)
    np.asarray(c)  # compiled, and the open encoder submitted by the readback
    before = gpu.submits
    outs = []
    for _ in range(40):
        c = f(c, r)
        outs.append(c)
    launches = 40 * len(f.lower(c, r).kernels())
    assert gpu.submits - before == launches // dispatch.BATCH_LAUNCHES
    got = [np.asarray(o) for o in outs]
    assert gpu.submits - before == launches // dispatch.BATCH_LAUNCHES + 1   # the first readback flushed
    want = np.ones(8) * 0.5 + np.arange(8)
    for g in got:
        want = want * 0.5 + np.arange(8)
        np.testing.assert_allclose(g, want, rtol=1e-6)


def test_webgpu_upload_into_a_recycled_buffer_comes_after_recorded_calls():
    """A recorded call's output, dropped before the encoder is submitted, goes back to the pool; an upload
    must not take its buffer (``write_buffer`` runs before the next submit's work, and the recorded kernel would
    overwrite the upload), nor submit the encoder: it takes a buffer that no recorded work uses."""
    import gc
    dev = _webgpu()
    gpu = dev.impl.gpu
    f = fa.jit(lambda a: a + 1.0, device=dev)
    a = fa.device_put(np.zeros(16, np.float32), dev)
    np.asarray(f(a))
    for k in range(5):
        out = f(a)
        assert gpu.open_launches > 0   # recorded, not submitted yet
        del out
        gc.collect()
        before = gpu.submits
        y = fa.device_put(np.full(16, 7.0 + k, np.float32), dev)
        assert gpu.submits == before
        np.testing.assert_array_equal(np.asarray(y), np.full(16, 7.0 + k, np.float32))


def test_webgpu_uploads_while_calls_are_recorded_take_buffers_no_recorded_work_uses(monkeypatch):
    """An upload while calls are recorded is written into a buffer that no recorded work uses
    (``_GPU._upload_target``): no copy, no submit. A buffer read by a recorded call and given back to the pool
    before the submit does not take the upload: the call still reads the old values, the upload's array the new
    ones. Past ``NEW_UPLOAD_BYTES``, where the pool's buffers of its size are all such ones, the upload submits
    the encoder first and then takes one."""
    import gc
    from fnarray.lowering.webgpu import dispatch
    dev = _webgpu()
    gpu = dev.impl.gpu
    f = fa.jit(lambda a: a * 2.0 + 1.0, device=dev)
    np.asarray(f(fa.device_put(np.zeros(24, np.float32), dev)))
    counts = collections.Counter()
    with monkeypatch.context() as mp:
        _count_wgpu(mp, counts)
        _uploads_between_recorded_calls(dev, f)
    # the only copies are wgpu-py's own, one in each readback (``read_buffer``)
    assert counts["GPUCommandEncoder.copy_buffer_to_buffer"] == counts["GPUQueue.read_buffer"], dict(counts)
    n = dispatch.NEW_UPLOAD_BYTES // 4 + 1
    x = fa.device_put(np.ones(n, np.float32), dev)
    np.asarray(f(x))
    out = f(x)            # recorded: reads x's buffer
    del x
    gc.collect()          # the only pooled buffer of its size, given back while the encoder is open
    before = gpu.submits
    big = np.arange(n, dtype=np.float32)
    bd = fa.device_put(big, dev)
    assert gpu.submits == before + 1
    np.testing.assert_array_equal(np.asarray(bd), big)
    np.testing.assert_array_equal(np.asarray(out), np.full(n, 3.0, np.float32))


def _uploads_between_recorded_calls(dev, f):
    """Four rounds: a call recorded over an array dropped at once, three uploads and calls recorded after it."""
    import gc
    gpu = dev.impl.gpu
    for k in range(4):
        a = fa.device_put(np.full(24, float(k), np.float32), dev)
        np.asarray(a)   # its upload done: nothing recorded now
        outs, ups = [], []
        before = gpu.submits
        outs.append(f(a))                 # recorded: reads a's buffer when the encoder runs
        assert gpu.open_launches > 0
        del a
        gc.collect()                      # a's buffer back to the pool, still read by the recorded call
        for j in range(3):
            ups.append(fa.device_put(np.full(24, 100.0 * (k + 1) + j, np.float32), dev))
            outs.append(f(ups[-1]))
        assert gpu.submits == before      # three uploads and four calls in the one open encoder
        np.testing.assert_array_equal(np.asarray(outs[0]), np.full(24, 2.0 * k + 1))
        for j in range(3):
            v = 100.0 * (k + 1) + j
            np.testing.assert_array_equal(np.asarray(ups[j]), np.full(24, v, np.float32))
            np.testing.assert_array_equal(np.asarray(outs[j + 1]), np.full(24, 2 * v + 1, np.float32))


def test_webgpu_a_call_of_many_kernels_is_submitted_at_its_end():
    from fnarray.lowering.webgpu import dispatch
    dev = _webgpu()
    gpu = dev.impl.gpu
    f = fa.jit(_step, device=dev)
    p, m, x, y = _on(dev)
    n = _n_launches(dev, f, (p, m, x, y))
    p, m, loss = f(p, m, x, y)
    float(loss)
    before = gpu.submits
    p, m, loss = f(p, m, x, y)
    assert gpu.submits - before == (1 if n >= dispatch.ALONE_LAUNCHES else 0)
    assert (gpu.open_launches == 0) == (n >= dispatch.ALONE_LAUNCHES)


def test_webgpu_buffers_let_go_before_their_recorded_work_is_submitted(monkeypatch):
    """Arrays dropped while the calls that read them are only recorded: with no pool, wgpu-py releases their
    buffers before the submit, and the recorded work still reads them (wgpu keeps what a command buffer uses)."""
    import gc
    dev = _webgpu()
    from fnarray.lowering.webgpu import dispatch
    gpu = dev.impl.gpu
    monkeypatch.setattr(gpu, "pool_limit", 0)
    # a map over 1.2 MB is launched once per 64 KiB uniform window on a CPU adapter (19 launches a call, more than
    # a call submitted alone): the calls stay recorded only if the submit bounds are out of the way
    monkeypatch.setattr(dispatch, "ALONE_LAUNCHES", 10**6)
    monkeypatch.setattr(dispatch, "BATCH_LAUNCHES", 10**6)
    f = fa.jit(lambda a: a * 3.0 + 1.0, device=dev)
    x0 = np.linspace(-1, 1, 300_000, dtype=np.float32)   # 1.2 MB: bound directly, no cached bind group
    y = f(fa.device_put(x0, dev))
    float(y[0])
    want = x0.astype(np.float64)
    for _ in range(4):
        want = want * 3.0 + 1.0
    x = fa.device_put(x0, dev)
    for _ in range(4):
        x = f(x)   # each input dropped here, its call recorded only
        gc.collect()
    assert gpu.open_launches > 0
    np.testing.assert_allclose(np.asarray(x), want, rtol=1e-5, atol=1e-4)   # float32 rounding near 0


def test_donated_array_passed_twice_keeps_the_other_argument(kdev):
    """An array donated as a cache (updated in place) and passed again: refused, as XLA refuses ``f(donate(a), a)``;
    its copy (one buffer with it inside fnarray) as the other argument: the update goes to a copy of the buffer,
    so what the other argument reads is the value before the update; the donated array is deleted."""
    def step(cache, other):
        return fa.lax.dynamic_update_slice(cache, fnp.full((1, 4), 5.0, np.float32), (0, 0)), other * 1.0

    c0 = np.arange(32, dtype=np.float32).reshape(8, 4)
    a = fa.device_put(c0, kdev)
    with pytest.raises(RuntimeError, match=r"f\(donate\(a\), a\)"):
        fa.jit(step, donate_argnums=0)(a, a)
    new, other = fa.jit(step, donate_argnums=0)(a, a.copy())
    want = c0.copy()
    want[0] = 5.0
    np.testing.assert_array_equal(np.asarray(new), want)
    np.testing.assert_array_equal(np.asarray(other), c0)
    assert a.is_deleted()


def test_array_sharing_a_buffer_updated_in_place_raises_clearly(kdev):
    """An array that shares its buffer with another (a jitted identity's output) after that other is donated to
    an in-place ``dynamic_update_slice``: reading it, passing it to a jitted function or to an eager operation
    raises ``RuntimeError`` naming the cause (was: a segmentation fault in the kernel reading a NULL buffer on
    opencl, ``AttributeError`` from wgpu on webgpu); the update's result is right."""
    x = np.arange(8, dtype=np.float32)
    upd = fa.jit(lambda c, u: fa.lax.dynamic_update_slice(c, u, (np.int32(2),)), donate_argnums=0)
    a = fa.device_put(x, kdev)
    shared = fa.jit(lambda v: v)(a)
    r = upd(a, fa.device_put(np.full(3, -1, np.float32), kdev))
    for use in (np.asarray, fa.jit(lambda v: v * 2), lambda v: v * 2, lambda v: upd(v, fnp.ones(3))):
        with pytest.raises(RuntimeError, match="shares its buffer with an array donated"):
            np.asarray(use(shared))
    np.testing.assert_array_equal(np.asarray(r), np.concatenate([x[:2], [-1, -1, -1], x[5:]]))


def test_donated_must_copy_is_one_rule_for_both_kernel_backends():
    """``donated_must_copy`` (opencl's ``_env`` and webgpu's ``_bind`` both ask it): a donated input is copied
    where its memory is also another input's (the same array twice, or two buffer objects over one memory) or is
    a cached 0-d scalar's; not where it is its own, nor for a cached array of another shape."""
    from types import SimpleNamespace

    from fnarray.lowering.kernels.lowered import donated_must_copy

    def buf(mem, shape=(4,)):
        return SimpleNamespace(mem=mem, shape=shape)

    def memory(b):
        return b.mem

    a, b, s = buf(object()), buf(object()), buf(object(), ())
    assert not donated_must_copy([a, b], 0, memory)
    assert donated_must_copy([a, a], 0, memory)
    assert donated_must_copy([a, buf(a.mem)], 1, memory)      # another buffer object over the same memory
    assert donated_must_copy([s, b], 0, memory, cached=[s])
    assert not donated_must_copy([s, b], 0, memory, cached=[buf(object(), ())])
    assert not donated_must_copy([a, b], 0, memory, cached=[a])  # only 0-d values are cached


# --------------------------------------------------------------------------- webgpu: native calls and their errors


def _native_or_skip():
    gpu = _webgpu().impl.gpu
    if not gpu.calls.native:
        pytest.skip("this wgpu-py records through its methods (native.Public)")
    return gpu


def test_webgpu_public_calls_give_the_native_calls_bits(monkeypatch):
    """The fallback through wgpu-py's methods (``native.Public``) records the same commands: the same bits over
    several calls, and its cached call makes only the bind groups of the kernels that bind the call's buffers."""
    from fnarray.lowering.webgpu import native
    dev = _webgpu()
    gpu = dev.impl.gpu
    results = []
    for calls in (gpu.calls, native.Public(gpu.device)):
        monkeypatch.setattr(gpu, "calls", calls)
        f = fa.jit(lambda p, m, x, y: _step(p, m, x, y), device=dev)   # a new runner, made with ``calls``
        p, m, x, y = _on(dev, seed=5)
        for _ in range(3):
            p, m, loss = f(p, m, x, y)
        results.append([np.asarray(v) for v in (*p.values(), *m.values(), loss)])
    for a, b in zip(*results, strict=True):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(float(results[1][-1]), _reference(3, seed=5)[-1][2], rtol=2e-5)


def test_webgpu_calls_are_public_where_asked_or_where_wgpu_differs(monkeypatch):
    from fnarray.lowering.webgpu import native
    device = _webgpu().impl.gpu.device
    monkeypatch.setenv("FNARRAY_WEBGPU_CALLS", "public")
    assert not native.make(device).native
    monkeypatch.delenv("FNARRAY_WEBGPU_CALLS")

    # a C function declared with another signature (another wgpu-native): wgpu-py's methods
    other = dict(native._FUNCTIONS, wgpuBindGroupRelease="void(*)(struct WGPUBindGroupImpl *, uint32_t)")
    monkeypatch.setattr(native, "_FUNCTIONS", other)
    assert not native.make(device).native

    def missing(self, device):
        raise AttributeError("module 'wgpu.backends.wgpu_native._api' has no attribute 'error_handler'")
    monkeypatch.setattr(native.Native, "__init__", missing)
    assert not native.make(device).native


def test_webgpu_type_strings_parsed_at_once_are_what_cffi_parses():
    """``native.parse_types_at_once`` enters, under each string wgpu-py passes, the very ``(ctype, is a function
    type)`` pair that cffi's own parse of that string gives (pointers, structs, open arrays, function types,
    scalars); strings the declarations lack enter nothing."""
    from fnarray.lowering.webgpu import native
    _webgpu()
    from wgpu.backends.wgpu_native import _ffi
    ffi, strings = _ffi.ffi, native._TYPE_STRINGS
    kinds = {native._as_argument(s)[1] for s in strings}
    assert kinds == {"arg", "item", "function"}
    with ffi._lock:
        saved = {s: ffi._parsed_types.pop(s) for s in strings if s in ffi._parsed_types}
    try:
        assert native.parse_types_at_once(ffi, strings) == len(strings)
        with ffi._lock:
            at_once = {s: ffi._parsed_types.pop(s) for s in strings}
            one_by_one = {s: ffi._typeof_locked(s) for s in strings}     # cffi's own parse, one string each
        for s in strings:
            assert at_once[s][0] is one_by_one[s][0] and at_once[s][1] == one_by_one[s][1], s
        assert native.parse_types_at_once(ffi, strings) == 0              # all there already
        assert native.parse_types_at_once(ffi, ("WGPUNoSuchStruct *", "uint16_t *")) == 0   # one parse fails
        assert "WGPUNoSuchStruct *" not in ffi._parsed_types
    finally:
        with ffi._lock:
            ffi._parsed_types.update(saved)


def test_webgpu_native_bind_group_errors_raise_before_anything_is_recorded(monkeypatch):
    """A bind group wgpu-native rejects raises wgpu-py's own error class with wgpu's message (the capture around
    the call's creations); the ones made before it are released, and the next creation works."""
    import wgpu
    gpu = _native_or_skip()
    calls = gpu.calls
    dev = _webgpu()
    f = fa.jit(lambda a: a * 2.0 + 1.0, device=dev)
    st = f.lower(fa.device_put(np.zeros(8, np.float32), dev))._backend_lowered.launch_plan().steps[0]
    binder = calls.binder(st.bgl, [None] * len(st.slots), st.uniform)
    vals = {"good": gpu.alloc(np.float32, (8,)).buffer,
            "bad": gpu.device.create_buffer(size=32, usage=wgpu.BufferUsage.COPY_DST)}   # no STORAGE usage
    good = ("good",) * len(st.slots)
    counts = collections.Counter()
    monkeypatch.setattr(calls, "lib", _CountedLib(calls.lib, counts))
    with pytest.raises(wgpu.GPUValidationError, match="STORAGE"):
        calls.bind_groups([(binder, good), (binder, good[:-1] + ("bad",))], vals)
    assert counts["native.wgpuDeviceCreateBindGroup"] == counts["native.wgpuBindGroupRelease"] == 2
    calls.release(calls.bind_groups([(binder, good)], vals))


def test_webgpu_call_given_the_last_calls_buffers_makes_no_bind_group(monkeypatch):
    """A runner keeps its last ``KEPT_GROUPS`` bind groups: a call given the buffers of one of them makes and
    releases none, a call given other buffers makes one (releasing the oldest kept past ``KEPT_GROUPS``), and every
    result is NumPy's (a kept bind group bound to the wrong buffer would give another input's values). The output
    buffer is held by the test, so each input's calls bind the same one."""
    from fnarray.lowering.webgpu import dispatch
    gpu = _native_or_skip()
    runner = _one_kernel_runner(gpu)
    keep = dispatch.KEPT_GROUPS
    xs = [gpu.upload(np.arange(8, dtype=np.float32) * k) for k in range(1, keep + 2)]
    out = gpu.alloc(np.float32, (8,))
    monkeypatch.setattr(gpu, "alloc_fresh", lambda fresh, vals, made: (vals.__setitem__(fresh[0][0], out.buffer),
                                                                          made.__setitem__(fresh[0][0], out)))
    # (input, bind groups made, released): a new one each until KEPT_GROUPS are kept, then the oldest goes
    calls = [(k, 1, 0) for k in range(keep)] + [(0, 0, 0), (keep - 1, 0, 0), (keep, 1, 1), (0, 1, 1), (keep, 0, 0)]
    for k, made, released in calls:
        counts = collections.Counter()
        with monkeypatch.context() as mp:
            mp.setattr(gpu.calls, "lib", _CountedLib(gpu.calls.lib, counts))
            runner([xs[k]])
        assert (counts["native.wgpuDeviceCreateBindGroup"], counts["native.wgpuBindGroupRelease"]) == (made, released)
        np.testing.assert_array_equal(gpu.download(out), np.arange(8) * (k + 1) * 2.0 + 1.0)


def test_webgpu_growing_decode_loop_records_one_dispatch_a_step(monkeypatch):
    """A jitted decode step whose cache grows a row a call (a new shape, so a plan of its own, each call) is one
    kernel reading the cache's pieces (``kernels/softmax_products.py``), of one WGSL source for every length: once
    the loop has run, a step records one dispatch, the pass sets the pipeline once for the whole loop, and no buffer
    or pipeline is made; the pass and its wait are one command encoder, one compute pass and one submit, with no
    upload or copy. The values are a NumPy float64 loop's."""
    dev = require_backend("webgpu")[0]
    rng = np.random.default_rng(0)
    cache0, q, row = (rng.normal(size=(1, 64)).astype(np.float32) for _ in range(3))
    step, steps = fa.jit(decode_step(fnp)), 3
    args = [fa.device_put(a, dev) for a in (cache0, q, row)]

    def run():
        return decode_loop(step, *args, steps)
    float(run()[1][0, 0])   # the first pass compiles each length, then waits: the next call opens the encoder
    counts = collections.Counter()
    with monkeypatch.context() as mp:
        _count_wgpu(mp, counts)
        cache, out = run()
        fa.block_until_ready(out)
    native = dev.impl.gpu.calls.native
    prefix = "native.wgpuComputePassEncoder" if native else "GPUComputePassEncoder."
    assert counts[prefix + ("DispatchWorkgroups" if native else "dispatch_workgroups")] == steps, dict(counts)
    assert counts[prefix + ("SetPipeline" if native else "set_pipeline")] == 1, dict(counts)
    assert not {k: counts[k] for k in _CREATES["webgpu"] if counts[k]}, dict(counts)
    once = ("GPUDevice.create_command_encoder", "GPUCommandEncoder.begin_compute_pass", "GPUQueue.submit")
    assert [counts[k] for k in once] == [1, 1, 1], dict(counts)
    assert counts["GPUQueue.write_buffer"] == counts["GPUCommandEncoder.copy_buffer_to_buffer"] == 0, dict(counts)
    # at most the step's own bind group (none where the pool gave the buffers of one of its last calls)
    assert counts["native.wgpuBindGroupRelease"] <= counts["native.wgpuDeviceCreateBindGroup"] <= steps
    want = cache0.astype(np.float64), q.astype(np.float64), row.astype(np.float64)
    c = want[0]
    for _ in range(steps):
        c, w = decode_step(np)(c, *want[1:])
    np.testing.assert_array_equal(np.asarray(cache), c)
    np.testing.assert_allclose(np.asarray(out), w, rtol=2e-5, atol=2e-6)


def _timeslices(tid):
    with open(f"/proc/self/task/{tid}/schedstat") as f:
        return int(f.read().split()[2])


def test_webgpu_lavapipe_threads_share_one_cpu_while_dispatches_are_one_work_group(monkeypatch):
    """On lavapipe (Linux), the threads the device's opening made (its queue thread and compute workers: each runs
    the dispatches) are kept on one CPU the process may use while every submitted dispatch is one work-group or of
    little work (``dispatch.WIDE_WORK``), and get their own masks back at the submit of a dispatch of more
    work-groups and more work; the results are NumPy's. Never on a GPU, and ``FNARRAY_WEBGPU_PIN_THREADS=0`` turns
    it off (``driver_threads.py``)."""
    import os
    from fnarray.lowering.webgpu import driver_threads
    on = driver_threads.enabled()   # (the device may have opened already, under the environment's switch)
    assert not driver_threads.applies({"adapter_type": "DiscreteGPU", "backend_type": "Vulkan", "device": "GPU"})
    assert not driver_threads.applies({"adapter_type": "CPU", "backend_type": "OpenGL", "device": "llvmpipe"})
    with monkeypatch.context() as mp:
        mp.setenv(driver_threads.SWITCH, "0")
        assert not driver_threads.enabled()
        mp.setenv(driver_threads.SWITCH, "1")
        assert driver_threads.enabled()
    assert driver_threads.opened_since(driver_threads.task_ids()) is None   # no thread made since
    dev = _webgpu()
    gpu = dev.impl.gpu
    gpu.device
    if not (on and driver_threads.applies(gpu.info) and len(os.sched_getaffinity(0)) >= 2):
        assert gpu.driver_threads is None
        pytest.skip(f"not lavapipe on two or more CPUs, or {driver_threads.SWITCH}=0: {dev.description}")
    kept = gpu.driver_threads
    assert kept is not None and len(kept.tids) >= 2, "lavapipe's queue thread and compute workers not found"
    narrow = fa.jit(lambda a: a * 2.0 + 1.0, device=dev)
    x, small, y = (fa.device_put(np.arange(n, dtype=np.float32), dev) for n in (8, 1 << 10, 1 << 16))
    # compiled (a new shader also wakes the disk cache's thread)
    fa.block_until_ready((narrow(x), narrow(small), narrow(y)))
    ran = [_timeslices(t) for t in kept.tids]
    out, few = narrow(x), narrow(small)   # 1,024 elements: several work-groups of little work
    for _ in range(3):
        out = narrow(out)
    fa.block_until_ready(out)
    assert all(_timeslices(t) > n for t, n in zip(kept.tids, ran, strict=True))   # these threads ran the work
    assert kept.cpu in os.sched_getaffinity(0)
    assert [os.sched_getaffinity(t) for t in kept.tids] == [{kept.cpu}] * len(kept.tids)
    wide = narrow(y)   # 65,536 elements: several work-groups, work past WIDE_WORK
    gpu.flush()
    assert kept.cpu is None and [os.sched_getaffinity(t) for t in kept.tids] == list(kept.masks)
    np.testing.assert_array_equal(np.asarray(out), np.arange(8) * 16 + 15)
    np.testing.assert_array_equal(np.asarray(few), np.arange(1 << 10) * 2 + 1)
    np.testing.assert_array_equal(np.asarray(wide), np.arange(1 << 16) * 2 + 1)


def test_webgpu_native_pass_command_errors_raise_when_the_encoder_is_submitted():
    """A command recorded through wgpu-native's C functions is validated when the pass ends and the encoder
    finishes: a dispatch of more work-groups than the device allows raises ``GPUValidationError`` at the flush,
    naming the dispatch; the GPU records and runs calls again afterwards. (A GPU of its own: the shared one keeps
    its encoder.)"""
    import wgpu
    from fnarray.lowering.webgpu import backend
    shared = _native_or_skip()
    gpu = backend._GPU(shared.wgpu, shared.adapter)
    runner = _one_kernel_runner(gpu)
    bufs = [gpu.upload(np.arange(8, dtype=np.float32))]
    pipe, bg, _ = runner.launches[0]
    too_many = gpu.limits["max-compute-workgroups-per-dimension"] + 1
    with gpu.lock:
        groups = gpu.calls.bind_groups(runner.binders, [b.buffer for b in bufs] + [gpu.alloc(np.float32, (8,)).buffer])
        gpu.calls.record(gpu.compute_pass(), [(pipe, bg, (too_many, 1, 1))], groups, None)
        gpu.calls.release(groups)
    with pytest.raises(wgpu.GPUValidationError, match="dispatch"):
        gpu.flush()
    np.testing.assert_array_equal(gpu.download(runner(bufs)[0]), np.arange(8) * 2.0 + 1.0)


def _one_kernel_runner(gpu):
    """The runner of ``a * 2 + 1`` over 8 float32s on ``gpu`` (its input and output bound per call)."""
    from fnarray.lowering.webgpu import backend
    dev = _webgpu()
    f = fa.jit(lambda a: a * 2.0 + 1.0, device=dev)
    lowered = f.lower(fa.device_put(np.zeros(8, np.float32), dev))._backend_lowered
    return backend._Plan(gpu, lowered.launch_plan().schedule).executable()


def test_webgpu_in_place_updates_record_into_the_calls_pass(monkeypatch):
    """A donated cache updated in place (``dynamic_update_slice``) is bound as the caller's buffer: a call after
    another records no copy and no wgpu-py method (the pass stays open), and the cache read at the end holds every
    row written."""
    gpu = _native_or_skip()
    dev = _webgpu()

    def step(cache, row, i):
        cache = fa.lax.dynamic_update_slice(cache, row, (i, 0))
        return cache, cache.sum()   # an output of its own too
    f = fa.jit(step, donate_argnums=0)
    rows = [fa.device_put(np.full((1, 4), k + 1.0, np.float32), dev) for k in range(8)]
    index = [fa.device_put(np.int32(k), dev) for k in range(8)]
    cache, total = f(fa.device_put(np.zeros((8, 4), np.float32), dev), rows[0], index[0])
    float(total)
    counts = collections.Counter()
    with monkeypatch.context() as mp:
        _count_wgpu(mp, counts)
        cache, total = f(cache, rows[1], index[1])
        first = dict(counts)
        counts.clear()
        for k in range(2, 8):
            cache, total = f(cache, rows[k], index[k])
    public = {k: v for k, v in counts.items() if not k.startswith("native.")}
    assert first.get("GPUCommandEncoder.copy_buffer_to_buffer", 0) == 0 and not public, (first, dict(counts))
    assert counts["native.wgpuComputePassEncoderDispatchWorkgroups"] == 6 * _n_launches(dev, f, (cache, rows[0],
                                                                                               index[0]))
    np.testing.assert_array_equal(np.asarray(cache), np.repeat(np.arange(1.0, 9.0, dtype=np.float32), 4).reshape(8, 4))
    assert float(total) == 4 * 36.0
    assert gpu.calls.native
