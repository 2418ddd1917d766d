"""Elementwise (map) kernels in their per-target forms, against NumPy float64.

The forms (``Capabilities``): on a CPU OpenCL device full work-groups run unguarded and the last
one element by element (``uniform_guard``); on a CPU WebGPU adapter each invocation computes 4
elements, each lane under its own bound test (``items_per_work_item``); OpenCL prints
NaN-propagating ``min``/``max``/``clip`` as plain IEEE comparisons and float32 ``tanh`` through a
call-free helper. The sizes straddle the work-group size (64) and multiples of 4 (1, 3, 5, 63, 65,
4k+1), the operands are contiguous, broadcast scalars and rows, and views at odd offsets; the values
include NaN, infinities and signed zeros. The device-free tests check the kernel structure each
capability asks for.
"""

from __future__ import annotations

import dataclasses

import numpy as np

import fnarray as fa
import fnarray.numpy as fnp
from fnarray.core import dtypes
from fnarray.devices.backend import Capabilities
from fnarray.lowering.kernels import render_opencl, schedule
from fnarray.lowering.kernels.ir import If, Let, Special, Store, Sym, walk_exprs
from fnarray.lowering.kernels.wgsl import render_wgsl

_KERNEL_BACKENDS = ("opencl", "webgpu")
SIZES = (1, 3, 5, 63, 64, 65, 257, 1001)
_SPECIALS = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 4.0, -4.0, 1e-30, -1e-30, 0.62, 0.63, -0.625,
                      9.0, -9.0, 50.0, -50.0], np.float32)


def _sizes(device):
    return SIZES if device.backend in _KERNEL_BACKENDS else (5, 257)


def _values(n, seed):
    x = np.random.default_rng(seed).uniform(-6, 6, n).astype(np.float32)
    k = min(n, len(_SPECIALS))
    x[:k] = np.roll(_SPECIALS, seed)[:k]
    return x


def _close(got, want, msg, zero_signs=True):
    got = np.asarray(got)
    assert got.dtype == np.float32 and got.shape == want.shape, msg
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=2e-5, atol=2e-6, equal_nan=True, err_msg=msg)
    if not zero_signs:
        return
    zero = want == 0
    np.testing.assert_array_equal(np.signbit(got[zero]), np.signbit(want[zero]), err_msg=msg + " (sign of zero)")


def _chain(a, x, b):
    return fnp.maximum(fnp.clip(fnp.tanh(a * x + b) * x + 1.0, -4.0, 4.0), fnp.minimum(a, b))


def _chain_ref(a, x, b):
    a, x, b = (v.astype(np.float64) for v in (a, x, b))
    with np.errstate(invalid="ignore"):
        return np.maximum(np.clip(np.tanh(a * x + b) * x + 1.0, -4.0, 4.0), np.minimum(a, b))


def test_chain_at_sizes_around_the_work_group_and_the_lane_count(device):
    f = fa.jit(_chain, device=device)
    for n in _sizes(device):
        a, x, b = _values(n, 0), _values(n, 1), _values(n, 2)
        args = [fa.device_put(fnp.asarray(v), device) for v in (a, x, b)]
        _close(f(*args), _chain_ref(a, x, b), f"{device} n={n}")


def test_min_max_clip_propagate_nan_and_keep_ties(device):
    # Every pair of specials, both orders: NaN wins, ties give the second operand (as NumPy).
    s = _SPECIALS
    x, y = np.repeat(s, len(s)), np.tile(s, len(s))
    xd, yd = (fa.device_put(fnp.asarray(v), device) for v in (x, y))
    f = fa.jit(lambda x, y: (fnp.maximum(x, y), fnp.minimum(x, y), fnp.clip(x, -4.0, 4.0),
                             fnp.maximum(x, 0.0), fnp.minimum(0.0, x)), device=device)
    with np.errstate(invalid="ignore"):
        wants = (np.maximum(x, y), np.minimum(x, y), np.clip(x, -4.0, 4.0), np.maximum(x, np.float32(0)),
                 np.minimum(np.float32(0), x))
    # XLA and MLX break the tie of -0.0 and +0.0 their own way; the kernels and numpy:0 as NumPy.
    signs = device.backend not in ("jax", "mlx")
    for k, (g, w) in enumerate(zip(f(xd, yd), wants, strict=True)):
        _close(g, w.astype(np.float64), f"{device} output {k}", zero_signs=signs)


def test_abs_and_copysign_keep_signed_zeros_and_nan(device):
    x = np.repeat(_SPECIALS, len(_SPECIALS))
    y = np.tile(_SPECIALS, len(_SPECIALS))
    f = fa.jit(lambda a, b: (fnp.abs(a), fnp.copysign(a, b), fnp.exp(-2.0 * fnp.abs(a)) * fnp.copysign(1.0, b)),
               device=device)
    got = f(*(fa.device_put(fnp.asarray(v), device) for v in (x, y)))
    x64, y64 = x.astype(np.float64), y.astype(np.float64)
    wants = (np.abs(x64), np.copysign(x64, y64), np.exp(-2.0 * np.abs(x64)) * np.copysign(1.0, y64))
    for k, (g, w) in enumerate(zip(got, wants, strict=True)):
        _close(g, w, f"{device} output {k}")


def test_tanh_accuracy_and_special_values(device):
    x = np.concatenate([_SPECIALS, np.linspace(-12, 12, 4001, dtype=np.float32),
                        np.geomspace(1e-30, 30, 2001).astype(np.float32),
                        -np.geomspace(1e-30, 30, 2001).astype(np.float32),
                        np.nextafter(np.float32(0.625), np.float32([0, 1]))]).astype(np.float32)
    got = np.asarray(fa.jit(fnp.tanh, device=device)(fa.device_put(fnp.asarray(x), device)))
    want = np.tanh(x.astype(np.float64))
    _close(got, want, str(device))
    if device.backend == "opencl":
        # fnarray's own float32 tanh helper there: within 4 ulp of the float64 result everywhere.
        fin = np.isfinite(want) & (np.abs(want) > 1e-30)
        ulp = np.spacing(np.abs(want[fin]).astype(np.float32)).astype(np.float64)
        assert np.max(np.abs(got[fin] - want[fin]) / ulp) <= 4.0


def test_exp_accuracy_overflow_and_subnormal_results(device):
    x = np.concatenate([_SPECIALS, np.linspace(-110, 92, 6001, dtype=np.float32),
                        np.float32([88.72, 88.73, -87.3, -103.9, -104.0, -150.0])]).astype(np.float32)
    got = np.asarray(fa.jit(fnp.exp, device=device)(fa.device_put(fnp.asarray(x), device)))
    with np.errstate(over="ignore"):
        want = np.exp(x.astype(np.float64))
        want32 = want.astype(np.float32)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want32), err_msg=str(device))
    normal = np.isfinite(want32) & (want32 >= np.finfo(np.float32).tiny)
    if device.backend == "mlx":
        normal &= want32 < 1e38   # MLX's exp (Linux CPU, 0.32) gives inf from x ~ 88.0 on
    else:
        np.testing.assert_array_equal(np.isinf(got), np.isinf(want32), err_msg=str(device))
    _close(got[normal], want[normal], str(device))
    if device.backend == "opencl":
        # fnarray's float32 exp helper there: within 2 ulp, subnormal results within 2 of their ulps.
        ulp = np.spacing(want32[normal]).astype(np.float64)
        assert np.max(np.abs(got[normal] - want[normal]) / ulp) <= 2.0
        sub = want32 < np.finfo(np.float32).tiny
        assert np.max(np.abs(got[sub] - want[sub])) <= 2 * 2.0 ** -149


def test_log_accuracy_and_special_values(device):
    rng = np.random.default_rng(5)
    x = np.concatenate([np.float32([np.nan, np.inf, -np.inf, 0.0, -0.0, -1.0, 1.0, 1e-45, 1e-40, 3.4e38,
                                    1.4142135, 1.4142137, 0.70710677]),
                        np.geomspace(1e-45, 3.4e38, 3001).astype(np.float32),
                        (1 + rng.uniform(-1e-3, 1e-3, 1001)).astype(np.float32)]).astype(np.float32)
    got = np.asarray(fa.jit(fnp.log, device=device)(fa.device_put(fnp.asarray(x), device)))
    with np.errstate(divide="ignore", invalid="ignore"):
        want = np.log(x.astype(np.float64))
    # XLA, MLX and lavapipe's WGSL treat subnormal inputs their own way (WGSL promises nothing for them).
    keep = np.ones(x.shape, bool) if device.backend in ("numpy", "opencl") else \
        np.abs(x) >= np.finfo(np.float32).tiny
    _close(got[keep], want[keep], str(device), zero_signs=False)
    if device.backend == "opencl":
        # fnarray's float32 log helper there: within 3 ulp (OpenCL's own bound).
        fin = np.isfinite(want) & (want != 0)
        ulp = np.spacing(np.abs(want[fin]).astype(np.float32)).astype(np.float64)
        assert np.max(np.abs(got[fin] - want[fin]) / ulp) <= 3.0


def test_broadcast_operands_and_views_at_odd_offsets(device):
    rng = np.random.default_rng(3)
    m = rng.uniform(-3, 3, (7, 13)).astype(np.float32)
    m[2, 5], m[4, 0] = np.nan, -0.0
    row = rng.uniform(-3, 3, 13).astype(np.float32)
    v = rng.uniform(-3, 3, 37).astype(np.float32)
    md, rd, vd = (fa.device_put(fnp.asarray(t), device) for t in (m, row, v))

    def f(m, row, v):
        return (fnp.clip(m * row + 2.0, -1.0, 1.0),         # a broadcast row
                fnp.tanh(m[1:, 3:]) * m[:-1, :-3],           # views at offsets 3 and 16 elements
                fnp.maximum(v[1:], v[:-1]) + v[5],           # offset 1 and a one-element operand
                fnp.minimum(v[3::2], 0.5))                   # a strided view
    m64, r64, v64 = (t.astype(np.float64) for t in (m, row, v))
    wants = (np.clip(m64 * r64 + 2.0, -1, 1), np.tanh(m64[1:, 3:]) * m64[:-1, :-3],
             np.maximum(v64[1:], v64[:-1]) + v64[5], np.minimum(v64[3::2], 0.5))
    for mode, fn in (("jit", fa.jit(f, device=device)), ("eager", f)):
        for k, (g, w) in enumerate(zip(fn(md, rd, vd), wants, strict=True)):
            _close(g, w, f"{device} {mode} output {k}")


def test_values_of_another_shape_beside_the_map(device):
    # A map kernel that also computes a smaller value (a counter beside the arrays) on its first items.
    f = fa.jit(lambda x, i: (fnp.tanh(x) * 2.0, i + 1), device=device)
    for n in _sizes(device):
        x = _values(n, 4)
        y, j = f(fa.device_put(fnp.asarray(x), device), fa.device_put(fnp.asarray(np.int32(n)), device))
        _close(y, np.tanh(x.astype(np.float64)) * 2.0, f"{device} n={n}")
        assert int(np.asarray(j)) == n + 1


# ------------------------------------------------------------------------------------- kernel structure

_CAPS = Capabilities(dtypes=frozenset({dtypes.float32, dtypes.int32, dtypes.uint32, dtypes.bool_}),
                     max_buffers_per_kernel=8, max_workgroup_size=256, local_memory=True, control_flow="host")


def _launches(f, n, caps):
    x = np.zeros(n, np.float32)
    return schedule(fa.make_ir(f)(x, x), caps, workgroup=64).launches


def test_uniform_guard_computes_once_and_branches_on_the_work_group_for_the_stores():
    caps = dataclasses.replace(_CAPS, uniform_guard=True)
    (launch,) = _launches(lambda a, b: fnp.clip(a * b, -1.0, 1.0), 1000, caps)
    body = launch.kernel.body
    top = [s for s in body if isinstance(s, If)]
    assert len(top) == 1 and top[0].orelse, "one work-group test with an item-by-item else branch"
    lets = {s.name: s for s in body if isinstance(s, Let)}
    assert isinstance(top[0].cond, Sym) and any(
        isinstance(e, Special) and e.kind == "group_id" for e in walk_exprs([lets[top[0].cond.name]]))
    # The values are computed once, outside the branches, which hold the stores only.
    (inner,) = top[0].orelse
    assert all(isinstance(s, Store) for s in top[0].then) and all(isinstance(s, Store) for s in inner.then)
    src = render_opencl(launch.kernel)
    assert src.count("in0[") == 1 and src.count("in1[") == 1
    assert "isnan" not in src   # IEEE comparisons already fail on NaN


def test_items_per_work_item_launches_a_quarter_of_the_items():
    caps = dataclasses.replace(_CAPS, items_per_work_item=4, max_dispatch=65535)
    for n in (1, 5, 1001, 4 * 64 * 70000 + 1):
        (launch,) = _launches(lambda a, b: a * b + 1.0, n, caps)
        items = -(-n // 4)
        groups = -(-items // 64)
        assert np.prod(launch.global_size) >= items and np.prod(launch.global_size) // 64 - groups < \
            len(launch.global_size) * 64, (n, launch.global_size)
        render_wgsl(launch.kernel)


def test_folded_dispatch_is_balanced():
    caps = dataclasses.replace(_CAPS, max_dispatch=8)
    (launch,) = _launches(lambda a, b: a * b + 1.0, 9 * 64, caps)   # 9 groups: 5 x 2, not 8 x 2
    assert launch.global_size == (5 * 64, 2)


def test_shaped_map_kernels_keep_one_item_per_element():
    # A transpose needs the shaped index: that kernel computes one element per item on every target.
    caps = dataclasses.replace(_CAPS, items_per_work_item=4, uniform_guard=True)
    x = np.zeros((6, 10), np.float32)
    (launch,) = schedule(fa.make_ir(lambda a: a.T * 2.0)(x), caps, workgroup=64).launches
    assert launch.global_size == (64,)
