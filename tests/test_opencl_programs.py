"""Whole programs on opencl devices: what a new or a cached program costs in builds (issue 28).

Counts, not times: OpenCL program builds (``_DeviceState._build``, PoCL's ~40-150 ms each) of a second
program whose kernels another program already built, of cached calls and of repeated eager operations; and
the results of the programs ``benchmarks/programs.py`` times against NumPy.
"""

from __future__ import annotations

import numpy as np
import pytest

import fnarray as fa
import fnarray.numpy as fnp

from helpers import require_backend


@pytest.fixture(scope="module", params=range(2), ids=lambda i: f"opencl:{i}")
def dev(request):
    devs = require_backend("opencl")
    if request.param >= len(devs):
        pytest.skip("one OpenCL device")
    return devs[request.param]


@pytest.fixture
def builds(dev, monkeypatch):
    """The list of OpenCL program builds on ``dev`` while the test runs (each entry: the source's length)."""
    state = dev.impl.state(dev)
    seen = []
    real = state._build

    def counted(text):
        seen.append(len(text))
        return real(text)
    monkeypatch.setattr(state, "_build", counted)
    return seen


def _x(dev, n=37, seed=0):
    return fa.device_put(np.random.default_rng(seed).uniform(-1, 1, n).astype(np.float32), dev)


def test_a_second_identical_program_builds_nothing(dev, builds):
    """Another function with the same operations (a notebook cell run again, a function made per item of a
    sweep) reuses the kernels the first one built: programs are cached by kernel source."""
    x = _x(dev)
    first = fa.jit(lambda v: fnp.tanh(v * 0.75) * v + fnp.sum(v * v), device=dev)
    want = first(x)
    n = len(builds)
    second = fa.jit(lambda v: fnp.tanh(v * 0.75) * v + fnp.sum(v * v), device=dev)
    got = second(x)
    assert len(builds) == n, f"the second program built {len(builds) - n} more"
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    xs = np.asarray(x).astype(np.float64)
    np.testing.assert_allclose(np.asarray(got), np.tanh(xs * 0.75) * xs + (xs * xs).sum(), rtol=1e-5, atol=1e-5)


def test_cached_calls_and_repeated_eager_operations_build_nothing(dev, builds):
    f = fa.jit(lambda v, w: fnp.exp(v - w).sum() * w, device=dev)
    f(_x(dev), _x(dev, seed=1)).block_until_ready()
    fnp.cos(_x(dev)).block_until_ready()
    n = len(builds)
    for seed in range(3):
        f(_x(dev, seed=seed), _x(dev, seed=seed + 1)).block_until_ready()
        fnp.cos(_x(dev, seed=seed)).block_until_ready()
    assert len(builds) == n


def test_jacobian_sweep_of_one_form_builds_once(dev, builds):
    """``benchmarks/programs.py``'s sweep: ``jacfwd``/``jacrev``/``hessian`` of functions that differ in a
    Python constant build their kernels for the first function only (eager operations take the constant as
    an argument, not in the kernel's source)."""
    x = _x(dev, n=6)
    xs = np.asarray(x).astype(np.float64)

    def sweep(c):
        def f(v):
            return fnp.sin(c * v) + v * v
        return fa.jacfwd(f)(x), fa.jacrev(f)(x), fa.hessian(lambda v: f(v).sum())(x)
    [np.asarray(r) for r in sweep(0.5)]   # (jacfwd's result is a deferred transpose: read, it runs once)
    n = len(builds)
    for c in (0.6, 0.7):
        jf, jr, h = sweep(c)
        want = np.diag(c * np.cos(c * xs) + 2 * xs)
        np.testing.assert_allclose(np.asarray(jf), want, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(np.asarray(jr), want, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(np.asarray(h), np.diag(-c * c * np.sin(c * xs) + 2), rtol=1e-4, atol=1e-5)
    assert len(builds) == n, f"the second and third functions built {len(builds) - n} programs"


def test_a_multi_kernel_program_builds_once_and_renders_each_kernel_once(dev, builds, monkeypatch):
    """A jitted program of several kernels is one ``clBuildProgram`` (PoCL's cost per build is large), and each
    kernel is printed once (the unique name goes into the printed signature, not through a second render)."""
    from fnarray.lowering.opencl import backend as ocl
    rendered, launches = [], []
    real_render, real_compile = ocl.render_opencl, ocl.OpenCLLowered._compile_schedule
    monkeypatch.setattr(ocl, "render_opencl", lambda k: rendered.append(k.name) or real_render(k))
    monkeypatch.setattr(ocl.OpenCLLowered, "_compile_schedule",
                        lambda self, sched: launches.extend(sched.launches) or real_compile(self, sched))
    x, w = _x(dev, 48).reshape(6, 8), _x(dev, 40, seed=3).reshape(8, 5)
    x.block_until_ready(), w.block_until_ready()
    del builds[:], rendered[:], launches[:]   # the eager reshapes' kernels
    f = fa.jit(lambda a, b: fnp.tanh(a @ b).sum(axis=0) + fnp.max(a) * fnp.cumsum(a[:, 0]).sum(), device=dev)
    got = np.asarray(f(x, w))
    assert len(launches) >= 3, launches
    assert len(builds) <= 1, builds
    # each launch printed once: on a CPU device consecutive small kernels are one launch (kernels/phases.py)
    assert 1 <= len(rendered) <= len(launches) and len(set(rendered)) == len(rendered), (
        rendered, [la.kernel.name for la in launches])
    xs, ws = np.asarray(x).astype(np.float64), np.asarray(w).astype(np.float64)
    want = np.tanh(xs @ ws).sum(axis=0) + xs.max() * np.cumsum(xs[:, 0]).sum()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("local_size", [None, (64,)])
def test_named_source_is_the_renamed_kernels_rendering(local_size):
    """``_named_source``'s text (renamed in the signature) is byte for byte what the renamed kernel renders to,
    with and without a ``reqd_work_group_size`` attribute."""
    import dataclasses

    from fnarray.lowering.kernels.opencl_c import render_opencl
    from fnarray.lowering.opencl import backend as ocl
    seen = []
    real = ocl.OpenCLLowered._compile_schedule
    dev = require_backend("opencl")[0]
    x = _x(dev, 300)
    try:
        ocl.OpenCLLowered._compile_schedule = lambda self, sched: seen.extend(l.kernel for l in sched.launches) or \
            real(self, sched)
        fa.jit(lambda v: fnp.sort(fnp.sin(v)) + fnp.sum(v), device=dev)(x).block_until_ready()
    finally:
        ocl.OpenCLLowered._compile_schedule = real
    assert seen
    for k in seen:
        k = dataclasses.replace(k, local_size=local_size) if local_size is not None else k
        name, text = ocl._named_source(k)
        assert text == render_opencl(dataclasses.replace(k, name=name))
        odd = dataclasses.replace(k, name="n")   # a name that is also a parameter's
        name, text = ocl._named_source(odd)
        assert text == render_opencl(dataclasses.replace(odd, name=name))
