"""Consecutive small launches as the phases of one launch on CPU OpenCL (``kernels/phases.py``) and the int32
constants that follow a size as kernel arguments (``kernels/int_args.py``): a step whose cache grows by a row
(its concatenation and a product reading it) is one launch, a buffer one phase writes and a later one reads one
parameter of it, and one source for every length; launches with work-group memory or too much work keep their
own launch. Schedules only (nothing is built): the runtime counts and values are ``test_growing_shapes.py``'s."""

from __future__ import annotations

import numpy as np
import pytest

import fnarray as fa
import fnarray.numpy as fnp
from fnarray.lowering.kernels import phases, render_opencl
from fnarray.lowering.kernels.int_args import IntArgs
from fnarray.lowering.kernels.ir import BufferParam
from helpers import cpu_opencl, decode_step, require_backend

W = 16


def _grow_and_score(cache, q, row):
    """A cache grown by a row and ``tanh(q @ cache.T)``: a concatenation and a product, two small launches (the
    whole decode step of ``helpers.decode_step`` is one attention launch already, reading the concatenation's
    pieces)."""
    cache = fnp.concatenate([cache, row], axis=0)
    return cache, fnp.tanh(q @ cache.T)


def _decode_schedule(dev, length, f=_grow_and_score):
    rng = np.random.default_rng(length)
    args = [fa.device_put(rng.standard_normal(s).astype(np.float32), dev) for s in ((length, W), (1, W), (1, W))]
    return fa.jit(f, device=dev).lower(*args)._backend_lowered._schedules().schedule


def test_decode_step_is_one_launch_of_one_source_for_every_length():
    """The decode step is one attention launch; a step's concatenation (the new cache, an output) and a product
    reading it merge into one launch whose
    cache is one writable parameter; the merged kernels of lengths 5, 6, 7 share one source from the second on,
    the constants that follow the length its int32 arguments, with the values of each length (schedules only:
    nothing built; the loop's runtime counts are ``test_growing_shapes.py``'s)."""
    dev = cpu_opencl()
    ints = IntArgs(16)
    sources, args = [], []
    for length in (5, 6, 7):
        sched = _decode_schedule(dev, length)
        assert [la.kind for la in _decode_schedule(dev, length, decode_step(fnp)).launches] == ["attention"]
        assert [la.kind for la in sched.launches] == ["map", "dot"]
        (merged,) = phases.merged_schedule(sched, 64, phases.MERGE_BELOW).launches
        params = [p for p in merged.kernel.params if isinstance(p, BufferParam)]
        assert merged.kind == "phases" and merged.global_size == (1,) and len(params) == 5
        new_cache = sched.launches[0].args[-1]
        assert params[merged.args.index(new_cache)].writes and sched.launches[1].args.count(new_cache) == 1
        lifted = ints.launch(merged)
        sources.append(render_opencl(lifted.kernel))
        args.append(lifted.args[len(merged.args):])
    assert "ilit" not in sources[0] and "ilit0" in sources[1] and sources[1] == sources[2]
    assert args[0] == () and len(args[1]) == len(args[2]) and all(a != b for a, b in zip(*args[1:], strict=True))
    assert (7 + 1) * W in args[2] and 7 in args[2]   # the new cache's size (a bound, a stride) and its length


def test_launches_that_cannot_be_phases_keep_their_own():
    """A row sum over work-groups (local memory, barriers) and a map of more work than ``MERGE_BELOW`` keep their
    own launches, and the small map before the row sum is not merged across it (schedules only: nothing built)."""
    dev = cpu_opencl()

    def f(a, m, big):
        s = fnp.tanh(a) * 2.0                        # a small map
        r = (m * s[0]).sum(axis=1)                   # [4, 65536] row sums: a work-group a row
        return fnp.sin(r) + 1.0, big * 3.0 + s[1]    # a map of 2**18 elements
    args = [fa.device_put(np.ones(shape, np.float32), dev) for shape in ((2,), (4, 1 << 16), (1 << 18,))]
    launches = fa.jit(f, device=dev).lower(*args)._backend_lowered._schedules().schedule.launches
    assert [la.kind for la in launches] == ["map", "reduce", "map"]
    small, rows, big = launches
    assert phases._phase_ready(small) and not phases._phase_ready(rows)
    assert phases.work_estimate(small) < phases.MERGE_BELOW < phases.work_estimate(big)
    assert phases.merge_small(launches, 64, phases.MERGE_BELOW) == launches


def test_equal_kernels_are_analysed_and_rendered_once(monkeypatch):
    """A kernel equal to one met before (a network's second layer, stack's concatenations) reuses what was made of
    it: ``IntArgs`` walks each distinct kernel's IR once and lifts its constants once (the same lifted kernel), and
    the device state renders each distinct kernel once (schedules only: nothing built)."""
    from fnarray.lowering.kernels import int_args
    from fnarray.lowering.opencl import backend as ocl
    dev = cpu_opencl()
    walked, rendered = [], []
    monkeypatch.setattr(int_args, "_structure", lambda k, real=int_args._structure: walked.append(k) or real(k))
    monkeypatch.setattr(ocl, "_named_source", lambda k, real=ocl._named_source: rendered.append(k) or real(k))
    ints = IntArgs(16)
    runs = [[ints.launch(la) for la in _decode_schedule(dev, n).launches] for n in (5, 5, 6, 6)]
    assert len(walked) == 4   # lengths 5 and 6, two kernels each; the second schedule of each length walks nothing
    assert [la.kernel for la in runs[0]] == [la.kernel for la in runs[1]] and "ilit0" not in str(runs[0][1].kernel)
    lifted = [sum(getattr(p, "name", "").startswith("ilit") for p in la.kernel.params) for la in runs[2]]
    assert all(lifted) and all(a.kernel is b.kernel and a.args[-n:] == b.args[-n:]
                               for a, b, n in zip(runs[2], runs[3], lifted, strict=True))
    state = dev.impl.state(dev)
    rendered.clear()
    named = [state.named_source(la.kernel) for run in runs for la in run]
    assert named[:2] == named[2:4] and named[4:6] == named[6:] and len(rendered) <= 4


def _sum_scan(x):
    """A column sum, its running sum and a map: three small launches, each reading what the one before wrote."""
    return fnp.cumsum(x.sum(axis=0)) + fnp.exp(x[0])


def test_webgpu_small_launches_are_phases_of_one_work_group():
    """On a CPU webgpu adapter (lavapipe) such a run is one dispatch of one work-group of 64 items, each phase a
    loop over its work items strided by the group, a storage barrier before each phase that reads what the one
    before wrote (WGSL orders invocations' storage accesses only there, within one work-group); the values are
    numpy:0's."""
    dev = require_backend("webgpu")[0]
    if dev.platform != "cpu":
        pytest.skip("merged launches are for CPU webgpu adapters (lavapipe); this one is a GPU")
    x = np.random.default_rng(0).standard_normal((8, W)).astype(np.float32)
    f = fa.jit(_sum_scan, device=dev)
    lowered = f.lower(x)._backend_lowered
    assert [la.kind for la in lowered._schedules().schedule.launches] == ["reduce", "cumulative", "map"]
    (step,) = lowered.launch_plan().steps
    assert step.launch.kind == "phases" and step.groups == (1, 1, 1)
    assert "@workgroup_size(64, 1, 1)" in step.source and step.source.count("storageBarrier();") == 2
    np.testing.assert_allclose(np.asarray(f(x)), np.asarray(fa.jit(_sum_scan, device="numpy:0")(x)), rtol=1e-6)


def _sort_and_fmod(a, x):
    """A sort (its steps one phase each, a barrier between them) and a float remainder (``fmod``'s counted loops,
    ``kernels/transcendental.py``) after them in the same run."""
    return fnp.sort(a), fnp.fmod(x, 2.5), fnp.remainder(x, 2.5)


def test_webgpu_fmod_after_a_barrier_is_right():
    """lavapipe (Mesa 22.3, LLVM 15) miscompiled fmod's body after a barrier (of a phase, or of a work-group
    reduction): ``select(|x| < |y|, x, copysign(r, x))`` after its loops gave 7.95 for fmod(6.64, 2.5)
    (docs/internals.md, twenty-fifth session, s25c-wgpubug); the body now has no select of x there (the loops
    leave r at |x| in that case)."""
    dev = require_backend("webgpu")[0]
    if dev.platform != "cpu":
        pytest.skip("merged launches are for CPU webgpu adapters (lavapipe); this one is a GPU")
    a = np.array([3, 1, 2], np.int32)
    x = np.array([6.64, -6.36, 16.14, 1.0, -0.0, np.inf, np.nan], np.float32)
    f = fa.jit(_sort_and_fmod, device=dev)
    (step,) = [st for st in f.lower(a, x)._backend_lowered.launch_plan().steps if "fmod" not in st.entry]
    assert step.launch.kind == "phases" and "storageBarrier();" in step.source
    got = [np.asarray(v) for v in f(a, x)]
    for g, w in zip(got, fa.jit(_sort_and_fmod, device="numpy:0")(a, x), strict=True):
        np.testing.assert_allclose(g, np.asarray(w), rtol=1e-6)
    assert np.signbit(got[1][4])   # fmod(-0.0, y) is -0.0 (x's sign where |x| < |y|)
    # not only phases: a work-group reduction's barriers, fmod in its epilogue (447.8 for -0.31 before)
    rows = np.random.default_rng(0).standard_normal((2, 256)).astype(np.float32)
    g = fa.jit(lambda r: fnp.fmod(r.sum(axis=1) * 3.0, 2.5), device=dev)(rows)
    np.testing.assert_allclose(np.asarray(g), np.fmod(rows.astype(np.float64).sum(axis=1) * 3.0, 2.5), atol=1e-3)
