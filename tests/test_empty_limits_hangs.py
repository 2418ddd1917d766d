"""Zero-size arrays, kernels past a device's limits, and former hangs (issue 12, items 3-5).

- Zero-size operands and outputs: every backend gives numpy:0's answer (the parity cases in
  ``fnarray/testing/cases.py`` hold one per primitive); here, that the kernel backends launch
  nothing for empty results and compute a reduction over an empty axis without reading its input,
  and the programs that users reported.
- Limits: chains that would bind more buffers than the target allows, in every kernel group, split
  into kernels that fit (checked on the schedule) and still agree with numpy:0 when run with small
  limits forced on the real opencl:0 and webgpu:0 devices.
- Hangs: each former hang runs in a subprocess with a time limit, so that its return fails the test
  instead of blocking the suite.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import fnarray as fa
import fnarray.numpy as fnp
from fnarray.core import dtypes
from fnarray.core import primitives as P
from fnarray.devices.backend import Capabilities
from fnarray.lowering.kernels import schedule
from fnarray.lowering.kernels.index import ix_var, unravel
from fnarray.lowering.kernels.ir import BufferParam

ROOT = pathlib.Path(__file__).resolve().parents[1]
REF = "numpy:0"


def _caps(limit):
    return Capabilities(dtypes=frozenset({dtypes.float32, dtypes.int32, dtypes.uint32, dtypes.bool_}),
                        max_buffers_per_kernel=limit, max_workgroup_size=256, max_dispatch=65535,
                        local_memory=True, tiling_pays=True, control_flow="host")


def _launches(f, *args, caps):
    return schedule(fa.make_ir(f)(*args), caps, workgroup=64).launches


def _buffers(launch):
    return sum(isinstance(p, BufferParam) for p in launch.kernel.params)


def _run(code: str, timeout: float, *args) -> str:
    """``code`` in a fresh interpreter (this checkout's fnarray); fails on error or past ``timeout``."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    try:
        res = subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], cwd=ROOT, env=env,
                             capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"did not finish within {timeout} s (a hang or a quadratic cost is back)")
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-4000:]
    return res.stdout


# ------------------------------------------------------------------------------------- zero-size arrays

REPORTED = {
    "reshape": lambda x: fnp.reshape(x, (0, 3)),
    "prod_keepdims": lambda x: fnp.prod(fnp.reshape(x, (0, 3)), axis=0, keepdims=True),
    "argsort_after_reshape": lambda x: fnp.argsort(fnp.reshape(x, (3, 0)), axis=0),
    "none_index": lambda x: x[None, :],
    "stack": lambda x: fnp.stack([x, x]),
    "repeat": lambda x: fnp.repeat(x, 3),
    "concatenate_of_intermediates": lambda x: fnp.concatenate([x * 2.0, x + 1.0]),
    "matmul_empty_contraction": lambda x: fnp.reshape(x, (3, 0)) @ fnp.reshape(x, (0, 4)),
    "sum_int_twice": lambda x: fnp.sum(fnp.astype(x, fnp.int32), axis=0),
    "max_initial": lambda x: fnp.max(x, initial=-3.0),
    "mean_of_empty_rows": lambda x: fnp.sum(fnp.reshape(x, (4, 0)), axis=1),
    "take_from_nothing": lambda x: fnp.take(fnp.reshape(x, (0, 2)), fnp.zeros((0,), dtype=fnp.int32), axis=0),
    "cumsum_then_concat": lambda x: fnp.concatenate([fnp.cumsum(x), fnp.ones(2)]),
}


@pytest.mark.parametrize("name", sorted(REPORTED))
def test_reported_empty_programs_match_numpy(device, name):
    f = REPORTED[name]
    x = np.zeros((0,), np.float32)
    want = np.asarray(fa.jit(f, device=REF)(fnp.asarray(x)))
    for _ in range(2):   # twice: MLX once hung on the second evaluation of an empty reduction
        got = np.asarray(fa.jit(f, device=device)(fa.device_put(fnp.asarray(x), device)))
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)


def test_argmax_over_an_empty_axis_raises_as_numpy(device):
    x = fa.device_put(fnp.zeros((3, 0)), device)
    with pytest.raises(ValueError):
        fa.jit(lambda a: fnp.argmax(a, axis=1), device=device)(x)
    with pytest.raises(ValueError):
        fnp.argmin(x, axis=1)


@pytest.mark.parametrize("limit", [None, 8])
def test_empty_results_launch_nothing(limit):
    caps = _caps(limit)
    e = np.zeros((0, 3), np.float32)
    for f in (lambda x: fnp.exp(x) * 2.0, lambda x: fnp.sort(x, axis=0), lambda x: fnp.cumsum(x, axis=1),
              lambda x: fnp.sum(x, axis=1), lambda x: x @ fnp.ones((3, 2)),
              lambda x: fnp.concatenate([x, x + 1.0]), lambda x: x.at[fnp.zeros((0,), dtype=fnp.int32)].add(1.0)):
        for launch in _launches(f, e, caps=caps):
            assert _buffers(launch) and launch.kind != "?"
            assert all(n > 0 for n in launch.global_size)
    assert _launches(lambda x: fnp.exp(x) * 2.0, e, caps=caps) == []
    assert _launches(lambda x: fnp.sort(x, axis=0), e, caps=caps) == []


def test_reduction_over_an_empty_axis_reads_no_input():
    e = np.zeros((0, 3), np.float32)
    launches = _launches(lambda x: (fnp.sum(x, axis=0), fnp.max(x, axis=0, initial=-1.0)), e, caps=_caps(8))
    assert launches, "the identities of a non-empty result are written by a kernel"
    for launch in launches:
        assert all(p.writes for p in launch.kernel.params if isinstance(p, BufferParam))


def test_unravel_of_a_zero_size_shape_does_not_divide_by_zero():
    assert all(i.is_const() for i in unravel(ix_var("g", 5), (3, 0, 2)))


# ------------------------------------------------------------------------------------- device limits


def _chain(xs):
    acc = xs[0]
    for x in xs[1:]:
        acc = acc * 0.5 + x
    return acc


def _limit_programs():
    """``(name, f, args)``: per kernel group, a program whose fused kernel would bind too many buffers."""
    rng = np.random.default_rng(0)

    def r(*shape):
        return rng.uniform(-1, 1, shape).astype(np.float32)
    vs = [r(16) for _ in range(12)]
    ms = [r(8, 8) for _ in range(6)]
    idx = np.array([3, 0, 15, 7, 3, 9], np.int32)
    yield "elementwise", (lambda *xs: _chain(xs)), vs
    yield "reduce", (lambda *xs: (fnp.sum(_chain(xs)), fnp.max(_chain(xs[::-1])), fnp.argmax(_chain(xs[1:])))), vs
    yield "matmul", (lambda *xs: _chain(xs[:3]) @ _chain(xs[3:]) + _chain(xs)), ms
    yield "gather", (lambda i, *xs: _chain(xs)[i] * _chain(xs[::-1])[i]), [idx] + vs
    yield "scatter", (lambda i, *xs: _chain(xs[:6]).at[i].add(_chain(xs[6:])[:6])), [idx] + vs
    yield "scatter_set", (lambda i, *xs: _chain(xs[:6]).at[i[:3]].set(_chain(xs[6:])[:3])), [idx] + vs
    yield "sort", (lambda *xs: (fnp.sort(_chain(xs)), fnp.argsort(_chain(xs[::-1])))), vs
    yield "sort_many_operands", (lambda *xs: P.sort.bind(*[x * 2.0 + 1.0 for x in xs[:6]], dimension=0,
                                                         is_stable=True, num_keys=2)), vs
    yield "cumulative", (lambda *xs: (fnp.cumsum(_chain(xs)), fnp.cumprod(_chain(xs[2:])))), vs
    yield "concatenate", (lambda *xs: fnp.concatenate([x * 2.0 for x in xs] + list(xs))), vs
    yield "stack", (lambda *xs: fnp.stack(xs)), vs
    yield "select_where", (lambda *xs: fnp.where(_chain(xs) > 0, _chain(xs[::-1]), _chain(xs[3:]))), vs


LIMIT_PROGRAMS = list(_limit_programs())


@pytest.mark.parametrize("limit", [4, 8])
@pytest.mark.parametrize("name,f,args", LIMIT_PROGRAMS, ids=[p[0] for p in LIMIT_PROGRAMS])
def test_every_kernel_fits_the_buffer_limit(name, f, args, limit):
    launches = _launches(f, *args, caps=_caps(limit))
    assert launches
    assert max(_buffers(launch) for launch in launches) <= limit
    # Without a limit the same programs bind more: the split is what keeps them under it.
    assert max(_buffers(launch) for launch in _launches(f, *args, caps=_caps(None))) > 4 or name.startswith("sort")


def test_matmul_work_groups_fit_the_dispatch_limit():
    rng = np.random.default_rng(2)
    a = rng.uniform(-1, 1, (70, 32, 64)).astype(np.float32)
    b = rng.uniform(-1, 1, (70, 64, 32)).astype(np.float32)
    caps = Capabilities(**{**_caps(8).__dict__, "max_dispatch": 64})
    f = lambda x, y: fnp.matmul(x, y)  # noqa: E731
    for launch in _launches(f, a, b, caps=caps):
        local = launch.local_size or (1,) * len(launch.global_size)
        assert all(g // max(k, 1) <= 64 for g, k in zip(launch.global_size, local))
    assert any(len(launch.global_size) == 3 for launch in _launches(f, a, b, caps=_caps(8)))  # tiled there


def _forced_caps(monkeypatch, device, limit):
    impl = device.impl
    caps = impl.capabilities(device)
    small = Capabilities(**{**caps.__dict__, "max_buffers_per_kernel": limit}) if limit else caps
    if device.backend == "opencl":
        monkeypatch.setattr(impl.state(device), "caps", small)
    else:
        monkeypatch.setattr(impl, "_caps", small)


@pytest.mark.parametrize("limit", [4, None])
@pytest.mark.parametrize("name,f,args", LIMIT_PROGRAMS, ids=[p[0] for p in LIMIT_PROGRAMS])
@pytest.mark.parametrize("target", ["opencl:0", "webgpu:0"])
def test_split_kernels_match_numpy(monkeypatch, target, name, f, args, limit):
    """With a small limit forced on the kernel compiler, and with the real default (8 storage buffers
    on webgpu:0, where wgpu raised ``GPUValidationError`` for a kernel binding 9)."""
    backend, index = target.split(":")
    device = fa.devices(backend)[int(index)]
    _forced_caps(monkeypatch, device, limit)
    want = fa.jit(lambda *a: f(*a), device=REF)(*args)
    got = fa.jit(lambda *a: f(*a), device=device)(*args)
    want = want if isinstance(want, (list, tuple)) else [want]
    got = got if isinstance(got, (list, tuple)) else [got]
    for g, w in zip(got, want, strict=True):
        assert g.device == device
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=2e-5, atol=2e-5, err_msg=name)


def test_reported_scatter_chain_on_webgpu_default_limit():
    rng = np.random.default_rng(1)
    xs = [rng.uniform(-1, 1, 10).astype(np.float32) for _ in range(8)]
    i = np.array([1, 4, 4, 9], np.int32)

    def f(i, *xs):
        base = xs[0] * xs[1] + xs[2] - xs[3]
        return base.at[i].add((xs[4] * xs[5] + xs[6] * xs[7])[:4])
    want = np.asarray(fa.jit(f, device=REF)(i, *xs))
    got = np.asarray(fa.jit(f, device="webgpu:0")(i, *xs))
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


# ------------------------------------------------------------------------------------- former hangs

_MLX_EMPTY = """
import numpy as np, fnarray as fa, fnarray.numpy as fnp
for k in range(3):
    r = fa.jit(lambda x: fnp.sum(x, axis=0), device="mlx:0")(fnp.zeros((0,), dtype=fnp.int32))
    assert int(np.asarray(r)) == 0
    r = fa.jit(lambda x: (fnp.prod(x), fnp.all(x > 0), fnp.max(x, initial=2.0)), device="mlx:0")(fnp.zeros((0, 2)))
    assert [float(np.asarray(a)) for a in r] == [1.0, 1.0, 2.0]
    x = fa.device_put(fnp.zeros((0, 3), dtype=fnp.int32), "mlx:0")
    assert np.asarray(fnp.sum(x, axis=0)).tolist() == [0, 0, 0]
    assert np.asarray(fnp.argmin(fnp.reshape(x, (3, 0)), axis=0)).shape == (0,)
print("ok")
"""


def test_mlx_empty_reductions_do_not_hang():
    assert "ok" in _run(_MLX_EMPTY, 180)


_MLX_DLPACK = """
import numpy as np, mlx.core as mx, fnarray as fa, fnarray.numpy as fnp
for k in range(3):
    for shape in [(0,), (2, 0), (3,), (2, 2)]:
        for dt in [np.float32, np.int32, np.bool_]:
            a = np.arange(int(np.prod(shape))).reshape(shape).astype(dt)
            x = fnp.asarray(a, device="mlx:0")
            for y in (fnp.from_dlpack(x), fnp.asarray(x), fnp.from_dlpack(x, device="mlx:0"),
                      fnp.asarray(mx.array(a)), fnp.from_dlpack(mx.array(a))):
                assert np.asarray(y).shape == shape
                assert bool(fnp.all(fa.device_put(y, "mlx:0") == x))
            assert np.from_dlpack(x).shape == shape and np.array(mx.array(x)).shape == shape
print("ok")
"""


def test_mlx_dlpack_round_trips_do_not_hang():
    assert "ok" in _run(_MLX_DLPACK, 240)


_MANY = """
import sys, numpy as np, fnarray as fa, fnarray.numpy as fnp
dev, n = sys.argv[1], 6000
xs = [np.full((3,), i, np.float32) for i in range(n)]
s = np.asarray(fa.jit(lambda xs: fnp.stack(xs), device=dev)(xs))
c = np.asarray(fa.jit(lambda xs: fnp.concatenate(xs), device=dev)(xs))
assert s.shape == (n, 3) and (s[:, 0] == np.arange(n)).all()
assert c.shape == (3 * n,) and (c == np.repeat(np.arange(n), 3)).all()
print("ok")
"""


def test_stack_and_concatenate_of_6000_arrays_finish(device):
    # Quadratic before (over 4 minutes on jax:0 and opencl:0); linear now (seconds to tens of seconds
    # on this loaded 2-core machine). The limit only catches a return of the quadratic cost.
    assert "ok" in _run(_MANY, 400, str(device))


# ------------------------------------------------------------------------------- past 2**31 elements

_PAST_I32 = 2**31 + 64   # views with zero strides: traced, never allocated
_INDEXED = {
    "argmax": lambda v: fnp.argmax(v),
    "argmin_axis": lambda v: fnp.argmin(v, axis=0),
    "argsort": lambda v: fnp.argsort(v),
    "traced_index": lambda v: v[fa.lax.convert_element_type(v[0], fnp.int32)],
    "numpy_index": lambda v: v[np.array([-1])],
    "take": lambda v: fnp.take(v, fnp.asarray([1])),
    "scatter": lambda v: v.at[fnp.asarray([1])].set(1),
}


@pytest.mark.parametrize("name", sorted(_INDEXED))
def test_int32_indices_past_2_31_elements_raise_instead_of_wrapping(name):
    """On numpy:0 and opencl:0, ``argmax`` of 2**31 + 64 bytes returned -2147483587 and ``x[np.array([-1])]``
    read a wrong element: int32 indices wrapped. Now every index-producing or index-consuming operation
    over such an axis raises at trace time, naming the limit and what to do."""
    big = np.broadcast_to(np.zeros((), np.uint8), (_PAST_I32,))
    with pytest.raises(fa.ShapeError, match="int32"):
        fa.make_ir(_INDEXED[name])(big)


def test_past_2_31_elements_without_index_arithmetic_still_trace():
    big = np.broadcast_to(np.zeros((), np.uint8), (_PAST_I32,))
    fa.make_ir(lambda v: (v[-1] + v[2**31 + 5], v[2**31:], fnp.max(v), fnp.cumsum(v)))(big)
    fa.make_ir(lambda v: fnp.argmax(v, axis=1))(np.broadcast_to(np.zeros((), np.uint8), (3, 2**31)))
