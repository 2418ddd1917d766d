"""Horizontal fusion (``lowering/kernels/groups/horizontal.py``): independent map kernels as one launch.

Programs whose map kernels the grouping keeps apart (a kernel between them that the second reads, so the second
cannot ride along as a guest of the first) merge into one launch over their concatenated work-groups. Checked:
results against NumPy float64 on every installed device (numpy:0 included, where nothing is scheduled), the launch
counts (with and without ``Capabilities.horizontal_fusion``), the buffer cap (``max_buffers_per_kernel``), and that
kernels where one reads what the other writes, or where a kernel between reads the earlier one's results, never
merge.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import fnarray as fa
import fnarray.numpy as fnp
from fnarray.core import dtypes
from fnarray.devices.backend import Capabilities
from fnarray.lowering.kernels import render_opencl, schedule
from fnarray.lowering.kernels.wgsl import render_wgsl

_CAPS = Capabilities(dtypes=frozenset({dtypes.float32, dtypes.int32, dtypes.uint32, dtypes.bool_}),
                     max_buffers_per_kernel=8, max_workgroup_size=256, max_dispatch=65535, local_memory=True,
                     control_flow="host")
#: the map-kernel forms of the targets: plain, lavapipe's 4 elements per item, PoCL's once-per-group bounds test
_FORMS = {"plain": {}, "per4": {"items_per_work_item": 4}, "guard": {"uniform_guard": True}}


def _separated(x, w):
    """A map over ``x``, a sort of ``w``, then a map over part of the sorted rows (which reads the sort, so it
    cannot join the first map's kernel as a guest) and a transposed view (shaped indices)."""
    a = fnp.sin(x) * 2.0 + x
    d = fnp.sort(w, axis=1)
    b = d[:, :3] * 2.0 + 1.0
    c = d.T[1:, ::2] - 0.5
    return a, b, c


def _separated_ref(x, w):
    x64, d = x.astype(np.float64), np.sort(w.astype(np.float64), axis=1)
    return np.sin(x64) * 2.0 + x64, d[:, :3] * 2.0 + 1.0, d.T[1:, ::2] - 0.5


def _inputs(n, rows=8, cols=8, seed=0):
    rng = np.random.default_rng(seed)
    return rng.uniform(-3, 3, n).astype(np.float32), rng.normal(size=(rows, cols)).astype(np.float32)


def _maps(launches):
    return [la for la in launches if la.kind == "map"]


@pytest.mark.parametrize("form", sorted(_FORMS))
def test_independent_maps_become_one_launch(form):
    caps = dataclasses.replace(_CAPS, **_FORMS[form])
    x, w = _inputs(1000)
    prog = fa.make_ir(_separated)(x, w)
    fused = schedule(prog, caps, workgroup=64).launches
    apart = schedule(prog, dataclasses.replace(caps, horizontal_fusion=False), workgroup=64).launches
    assert len(_maps(apart)) == 2 and len(_maps(fused)) == 1
    assert len(fused) == len(apart) - 1
    (la,) = _maps(fused)
    assert la.kernel.name.startswith("hmap_") and la is fused[-1]
    # Segments of whole work-groups: the first map's items (a quarter of them with 4 per item), then the second's
    # with its guest (the slice of 28 elements beside the 24), which with 4 elements per item is a segment of its own.
    if form == "per4":
        assert la.global_size == ((-(-250 // 64) + 2) * 64,)
    else:
        assert la.global_size == ((-(-1000 // 64) + 1) * 64,)
    render_wgsl(la.kernel)
    render_opencl(la.kernel)


def test_results_equal_numpy(device):
    f = fa.jit(_separated, device=device)
    for n in (1, 63, 65, 1001):
        x, w = _inputs(n, seed=n)
        got = f(fa.device_put(x, device), fa.device_put(w, device))
        for g, want in zip(got, _separated_ref(x, w), strict=True):
            np.testing.assert_allclose(np.asarray(g).astype(np.float64), want, rtol=2e-6, atol=2e-6)


def test_launch_count_on_kernel_devices(device):
    if device.backend not in ("opencl", "webgpu"):
        pytest.skip("only the kernel backends schedule launches")
    x, w = _inputs(1001)
    kernels = fa.jit(_separated, device=device).lower(fa.device_put(x, device), fa.device_put(w, device)).kernels()
    maps = [k for k in kernels if k.kind == "map"]
    assert len(maps) == 1 and maps[0].name.startswith("hmap_")


def _many(*xs):
    """One independent update per array, each separated from the previous by a sort it reads."""
    out = [fnp.cos(xs[0]) + 1.0]
    for x in xs[1:]:
        out.append(fnp.sort(x)[::2] * 3.0 - 1.0)
    return out


def test_the_buffer_cap_is_respected():
    xs = [np.linspace(-1, 1, 10 + 7 * k).astype(np.float32) for k in range(6)]
    prog = fa.make_ir(_many)(*xs)
    for limit in (4, 6, 8, 12, None):
        launches = schedule(prog, dataclasses.replace(_CAPS, max_buffers_per_kernel=limit), workgroup=64).launches
        for la in launches:
            buffers = sum(1 for p in la.kernel.params if hasattr(p, "writes"))
            assert limit is None or buffers <= limit, (limit, la.kernel.name, buffers)
        maps = _maps(launches)
        # each update reads one buffer and writes one: limit // 2 of them per launch
        per_launch = 6 if limit is None else limit // 2
        assert len(maps) == -(-6 // per_launch), (limit, [la.kernel.name for la in maps])


def test_no_merge_where_one_reads_what_the_other_writes():
    def chained(x, w):
        a = fnp.sin(x) * 2.0
        d = fnp.sort(w)
        return a, d[:3] * a[:3]     # the second map reads the first's result (materialised: an output)

    def read_between(x, w):
        a = fnp.sin(x) * 2.0
        d = fnp.sort(w + a[:8])     # the sort reads the first map's result: it cannot move past the sort
        return a, d[:3] * 2.0

    x, w = _inputs(100)
    for f in (chained, read_between):
        launches = schedule(fa.make_ir(f)(x, w[0]), _CAPS, workgroup=64).launches
        assert not any(la.kernel.name.startswith("hmap_") for la in launches), f.__name__
        got = fa.jit(f, device="numpy:0")(x, w[0])
        for d in fa.devices(all_backends=True):
            if d.backend in ("opencl", "webgpu"):
                for g, want in zip(fa.jit(f, device=d)(x, w[0]), got, strict=True):
                    np.testing.assert_allclose(np.asarray(g), np.asarray(want), rtol=2e-6, atol=2e-6)


def _guest(x, y):
    return x * 2.0 + 1.0, fnp.exp(y) - 1.0   # y's map rides along as a guest of x's kernel


def test_guests_become_segments_where_items_compute_several_elements():
    x, y = np.linspace(-2, 2, 1000).astype(np.float32), np.linspace(-1, 1, 10).astype(np.float32)
    prog = fa.make_ir(_guest)(x, y)
    per4 = dataclasses.replace(_CAPS, items_per_work_item=4)
    (la,) = schedule(prog, per4, workgroup=64).launches
    # 250 items of 4 elements (4 work-groups), then a work-group for the 10 elements of the guest
    assert la.kernel.name.startswith("hmap_") and la.global_size == (5 * 64,)
    (guest,) = schedule(prog, dataclasses.replace(per4, horizontal_fusion=False), workgroup=64).launches
    assert guest.global_size == (1024,)     # with a guest, one element per item
    (plain,) = schedule(prog, _CAPS, workgroup=64).launches   # one element per item anyway: kept as it was
    assert plain.kernel.name.startswith("map_") and plain.global_size == (1024,)
    for d in fa.devices(all_backends=True):
        got = fa.jit(_guest, device=d)(fa.device_put(x, d), fa.device_put(y, d))
        np.testing.assert_allclose(np.asarray(got[0]), x.astype(np.float64) * 2 + 1, rtol=2e-6, atol=2e-6)
        np.testing.assert_allclose(np.asarray(got[1]), np.expm1(y.astype(np.float64)), rtol=2e-6, atol=2e-6)


def _momentum_update(p, m, g, b, mb, gb):
    """A weight's and its bias's momentum update (the VAE's): maps of the weight's size and of the bias's."""
    m, mb = 0.9 * m + g, 0.9 * mb + gb
    return p - 1e-3 * m, m, b - 1e-3 * mb, mb


def test_map_vec4_and_uniform_windows():
    """``map_vec4`` / ``map_uniform`` (webgpu on a CPU adapter, ``groups/base.py``): a map of four elements per item
    reads its float32 operands four at a time and stores four at a time, through uniform windows of ``bytes`` each
    where the map is larger (as many full windows a launch as the uniform bindings hold, the windows' offsets moved
    along, one source for the launches of as many full windows), a whole uniform array where it fits; a bias's map
    beside it stays a horizontal kernel; the values agree with NumPy in float64 on every installed device (webgpu:0
    with its own options: 2 windows of 64 KiB here)."""
    # (the bias's three arrays of 40 bytes: below ``least``, storage bindings)
    rng = np.random.default_rng(3)
    args = [rng.normal(size=s).astype(np.float32) for s in ((30000,),) * 3 + ((10,),) * 3]
    prog = fa.make_ir(_momentum_update)(*args)
    per4 = dataclasses.replace(_CAPS, items_per_work_item=4, max_buffers_per_kernel=10)
    launches = schedule(prog, per4, workgroup=64, map_vec4=True, map_uniform=(11, 16384, 4096)).launches
    windows = [la for la in launches if any(getattr(p, "offset", -1) >= 0 for p in la.kernel.params)]
    assert len(windows) == 4 and windows == launches[:4], [la.kernel.name for la in launches]
    offsets = [[p.offset for p in la.kernel.params if getattr(p, "uniform", 0)] for la in windows]
    # p, m and g read at each window (not the outputs): 3 bindings a window, 3 windows a launch within 11 bindings
    assert offsets == [[16384 * w for w in ws for _ in range(3)] for ws in ((0, 1, 2), (3, 4, 5), (6,), (7,))]
    sources = [render_wgsl(la.kernel) for la in windows]
    assert sources[0] == sources[1] and len(set(sources)) == 3   # 3 x 1024 vectors a launch, 1024, the last 332
    assert "var<uniform>" in sources[0] and "array<vec4<f32>>" in sources[0]
    assert [la.args[[p.name for p in la.kernel.params].index("base")] for la in windows] == [0, 3072, 6144, 7168]
    whole = schedule(prog, per4, workgroup=64, map_vec4=True, map_uniform=(11, 1 << 17, 4096)).launches
    # p, m and g whole (beside the bias's segment, storage), and the scalars
    assert whole[0].kernel.name.startswith("hmap_") and render_wgsl(whole[0].kernel).count("var<uniform>") == 4
    want = _momentum_update(*[a.astype(np.float64) for a in args])
    for d in fa.devices(all_backends=True):
        got = fa.jit(_momentum_update, device=d)(*[fa.device_put(a, d) for a in args])
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(np.asarray(g), w, rtol=1e-6, atol=1e-6)
