"""The webgpu backend's own guarantees (the parity tier covers every primitive against numpy).

- ``render_wgsl``: WGSL's helper functions (erf, lgamma, pow, fmod, atan2...) against
  NumPy/``math`` in float64, and the IEEE edge cases WGSL leaves open (NaN, infinities,
  signed zeros) on every special value;
- the runtime: the adapter's limits are read and obeyed (storage buffers per kernel,
  work-groups per dimension, storage binding size), one submit per call, readback only
  when values are read, the pipeline cache;
- dtypes: float32/int32/uint32/bool on the device, float16 with ``shader-f16``, everything
  else through the partitioner's fallback in both fallback modes;
- the digits training step with ``fallback = "error"``; a backend that cannot start.
"""

from __future__ import annotations

import dataclasses
import math
import re
import sys
import types
import warnings

import numpy as np
import pytest

import fnarray as fa
import fnarray.numpy as fnp
from fnarray.core.errors import BackendUnavailable, FallbackWarning, UnsupportedOnDevice
from fnarray.lowering.webgpu import backend as wb
from helpers import check_traced, config_setting, require_backend
from math_cases import (BINARY_SPECIAL, HELPER_CASES, LIN, SPECIAL, UNARY_SPECIAL, Y, check_binary_special,
                        check_unary_special)


@pytest.fixture(scope="module")
def wdev():
    return require_backend("webgpu")[0]


@pytest.fixture(scope="module")
def ref():
    return fa.devices("numpy")[0]


@pytest.fixture
def fallback_mode():
    """Set ``fa.config.fallback`` inside a test; the previous mode comes back afterwards."""
    old = fa.config.fallback

    def set_mode(mode):
        fa.config.fallback = mode
    yield set_mode
    fa.config.fallback = old


@pytest.fixture
def patched_caps(wdev):
    """Replace fields of the device's ``Capabilities`` for one test (the scheduler reads them)."""
    be = wdev.impl
    old = be.capabilities(wdev)

    def patch(**kw):
        be._caps = dataclasses.replace(old, **kw)
    yield patch
    be._caps = old


def _on(dev, *xs):
    return [fa.device_put(fnp.asarray(x), dev) for x in xs]


# ------------------------------------------------------------------------------------------ device


def test_device_names_its_adapter(wdev):
    gpu = wdev.impl.gpu
    assert str(wdev) == "webgpu:0" and fa.devices("webgpu") == [wdev]
    assert gpu.backend_type in wdev.description and str(gpu.info["device"]) in wdev.description
    assert wdev.platform in ("cpu", "gpu")
    assert fa.devices(all_backends=True)[0].backend == "numpy"


def test_block_until_ready_waits_by_polling_the_device_not_by_a_readback(wdev, monkeypatch):
    # a 4-byte readback cost 400-550 us of CPU a wait on lavapipe; the blocking device poll 110-150 us
    gpu = wdev.impl.gpu
    if getattr(gpu.device, "_poll_wait", None) is None:
        pytest.skip("this wgpu-py has no blocking device poll: waits read 4 bytes back")
    a = np.arange(48, dtype=np.float32).reshape(6, 8)
    x, = _on(wdev, a)
    f = fa.jit(lambda x: (x @ x.T) * 2 + 1, device=wdev)
    reads = []
    monkeypatch.setattr(gpu.queue, "read_buffer", lambda *args, **kw: reads.append(args) or pytest.fail("readback"))
    y = f(x)
    assert y.block_until_ready() is y
    assert reads == []
    monkeypatch.undo()
    np.testing.assert_allclose(np.asarray(y), (a.astype(np.float64) @ a.T) * 2 + 1, rtol=1e-6)


def test_capabilities_come_from_the_device_limits(wdev):
    caps = wdev.impl.capabilities(wdev)
    lim = wdev.impl.gpu.limits
    # The device asks for WebGPU's portable defaults, whatever the native adapter offers, except for the storage
    # buffers per kernel: the adapter's, up to NATIVE_STORAGE_BUFFERS; an export schedules with the portable 8.
    offered = wdev.impl.gpu.adapter.limits["max-storage-buffers-per-shader-stage"]
    assert lim["max-storage-buffers-per-shader-stage"] == max(8, min(wb.NATIVE_STORAGE_BUFFERS, offered))
    assert lim["max-compute-invocations-per-workgroup"] == 256
    assert caps.max_buffers_per_kernel == lim["max-storage-buffers-per-shader-stage"]
    with wb.portable_limits():
        assert wdev.impl.capabilities(wdev).max_buffers_per_kernel == 8
        assert wdev.impl.capabilities(wdev).max_workgroup_size == caps.max_workgroup_size
    assert wdev.impl.capabilities(wdev) is caps
    assert caps.max_dispatch == lim["max-compute-workgroups-per-dimension"]
    assert caps.max_workgroup_size == lim["max-compute-invocations-per-workgroup"]
    assert caps.control_flow == "host"
    assert {np.dtype(d).name for d in caps.dtypes} >= {"float32", "int32", "uint32", "bool"}
    assert not {np.dtype(d).name for d in caps.dtypes} & {"float64", "int64", "int8", "complex128"}
    assert np.dtype(np.complex64) in caps.dtypes   # vec2<f32> in WGSL
    assert (np.dtype(np.float16) in caps.dtypes) == wdev.impl.gpu.has_f16


# ------------------------------------------------------------------------------------------ render_wgsl


def _run_kernel_op(dev, name, arrays, out_dtype=None):
    """One kernel ``out[i] = name(arrays[0][i], ...)`` written in the kernel IR, rendered and run."""
    from fnarray.lowering.kernels.builder import KernelBuilder
    from fnarray.lowering.kernels.ir import Op, Special
    from fnarray.lowering.kernels.rules import op
    from fnarray.lowering.kernels.schedule import BufSpec, Launch, Schedule
    from fnarray.lowering.webgpu.backend import _Plan

    gpu = dev.impl.gpu
    n = arrays[0].size
    out_dtype = np.dtype(out_dtype or arrays[0].dtype)
    b = KernelBuilder(f"k_{name}")
    ins = [BufSpec(a.shape, a.dtype, f"i{k}") for k, a in enumerate(arrays)]
    out = BufSpec(arrays[0].shape, out_dtype, "o")
    args = {}
    names = []
    for s in ins:
        nm = b.buffer(s, s.dtype, False, "in")
        args[nm] = s
        names.append(nm)
    on = b.buffer(out, out_dtype, True, "out")
    args[on] = out
    count = b.scalar("n")
    gid = Special("global_id", 0)
    with b.when(op("lt", gid, count)):
        xs = [b.load(nm, gid, s.dtype) for nm, s in zip(names, ins)]
        b.store(on, gid, b.let(Op(name, tuple(xs), out_dtype)))
    k = b.build()
    vals = [args[p.name] if hasattr(p, "writes") else n for p in k.params]
    launch = Launch(k, vals, (max(1, -(-n // 64)) * 64,), (64,), (), "test")
    plan = _Plan(gpu, Schedule(ins, [launch], [out], None))
    return gpu.download(plan.executable()([gpu.upload(a) for a in arrays])[0])


@pytest.mark.parametrize("name,inputs,reference,tol", HELPER_CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(HELPER_CASES)])
def test_wgsl_helpers_match_float64_reference(wdev, name, inputs, reference, tol):
    got = _run_kernel_op(wdev, name, inputs)
    want = reference(*[x.astype(np.float64) for x in inputs])
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def test_wgsl_nextafter_is_bit_exact(wdev):
    got = _run_kernel_op(wdev, "nextafter", [LIN, Y])
    np.testing.assert_array_equal(got, np.nextafter(LIN, Y))


@pytest.mark.parametrize("name,reference", BINARY_SPECIAL)
def test_wgsl_binary_special_values(wdev, name, reference):
    check_binary_special(lambda n, xs: _run_kernel_op(wdev, n, xs), name, reference)


@pytest.mark.parametrize("name,reference", UNARY_SPECIAL + [
    ("exp", np.exp), ("sqrt", np.sqrt), ("rint", np.rint), ("trunc", np.trunc), ("floor", np.floor),
    ("fabs", np.abs)])
def test_wgsl_unary_special_values(wdev, name, reference):
    check_unary_special(lambda n, xs: _run_kernel_op(wdev, n, xs), name, reference)


def test_wgsl_sinh_cosh_stay_finite_up_to_float32s_limit(wdev):
    # Mesa's sinh/cosh computed exp(|x|) first: +-inf from |x| = 88.72 on (sinh(89) = 2.24e38 is finite), and
    # sinh cancelled near 0 (0.14 % off at 1e-5)
    x = np.array([89.0, -89.4, 88.8, 89.5, 1e-5, -0.3, -0.0, 3.0, -20.0, np.inf, np.nan], np.float32)
    got = fa.jit(lambda a: (fnp.sinh(a), fnp.cosh(a)))(*_on(wdev, x))
    for g, ref_fn in zip(got, (np.sinh, np.cosh), strict=True):
        with np.errstate(over="ignore"):
            want = ref_fn(x.astype(np.float64)).astype(np.float32)
        np.testing.assert_allclose(np.asarray(g), want, rtol=1e-5)
        np.testing.assert_array_equal(np.signbit(np.asarray(g)), np.signbit(want))


@pytest.mark.parametrize("name,reference", [("isnan", np.isnan), ("isinf", np.isinf), ("isfinite", np.isfinite)])
def test_wgsl_class_tests_are_bit_tests(wdev, name, reference):
    np.testing.assert_array_equal(_run_kernel_op(wdev, name, [SPECIAL], np.bool_), reference(SPECIAL))


def test_render_wgsl_writes_no_float_specials_and_is_deterministic(wdev):
    x = np.array([1.0, np.nan, -np.inf, 0.0], np.float32)

    def f(a):
        big = fnp.where(a > 0, fnp.inf, -fnp.inf)
        return fnp.maximum(a, 0.5) + fnp.where(fnp.isnan(a), 0.0, big), a != 0

    check_traced(f, x)
    (xd,) = _on(wdev, x)
    text = fa.jit(f).lower(xd).as_text()
    assert text == fa.jit(f).lower(xd).as_text()  # the same program prints the same WGSL
    assert "fa_f32_bits(0x7f800000u)" in text and "fa_f32_bits(0xff800000u)" in text  # not const: see wgsl.py
    code = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("//"))
    assert not re.search(r"\binf\b|\bnan\b|\binfinity\b", code.lower())
    assert "f64" not in text  # standard WebGPU only: no shader-f64
    m, ne = fa.jit(f)(xd)
    with np.errstate(invalid="ignore"):
        want = np.maximum(x, 0.5) + np.where(np.isnan(x), 0, np.where(x > 0, np.inf, -np.inf))
    np.testing.assert_array_equal(np.asarray(m), want)  # [inf, nan, -inf, -inf]
    np.testing.assert_array_equal(np.asarray(ne), x != 0)  # NaN != 0 is true


def test_equal_kernels_built_apart_render_once(wdev, monkeypatch):
    renders = []
    monkeypatch.setattr(wb, "render_wgsl", lambda k, real=wb.render_wgsl: (renders.append(k), real(k))[1])
    x = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32) / 8

    def f(a, w):   # three equal products, each kernel built on its own
        return fnp.tanh(fnp.tanh(fnp.tanh(a @ w) @ w) @ w)

    np.testing.assert_allclose(np.asarray(fa.jit(f)(*_on(wdev, x, x))),
                               np.tanh(np.tanh(np.tanh(x @ x) @ x) @ x), rtol=1e-5, atol=1e-6)
    assert len(renders) == 1 and renders[0].name.startswith("dot")


def test_nan_propagates_through_max_min_and_reductions(wdev, ref):
    x = np.array([[1.0, np.nan, 3.0], [2.0, -1.0, -np.inf]], np.float32)
    y = np.array([[np.nan, 0.0, 4.0], [1.0, np.nan, 0.25]], np.float32)

    def f(a, b):   # Mesa folds x - x, x + (-x), k x + (-k) x to 0.0 and x == x, x <= x to true: wgsl's expand
        # states them (the gradient of arctan2(u, u) is such a sum: NaN at 0, as JAX's)
        return (fnp.maximum(a, b), fnp.minimum(a, b), fnp.max(a, axis=1), fnp.min(b, axis=0),
                fnp.argmax(a, axis=1), fnp.isnan(a + b), fa.nn.relu(a),
                a - a, b + -b, (a == a) & (b <= b), a != a, -2.0 * a + 2.0 * a,
                fa.grad(lambda u: fnp.sum(fnp.arctan2(u, u)))(b * 0.0))

    check_traced(f, x, y)
    got = fa.jit(f, device=wdev)(*_on(wdev, x, y))
    want = fa.jit(f, device=ref)(x, y)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))
    np.testing.assert_array_equal(np.asarray(got[0]), np.maximum(x, y))
    np.testing.assert_array_equal(np.asarray(got[4]), np.argmax(x, axis=1))


# ------------------------------------------------------------------------------------------ fusion on the device


def _f32(*shape, seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype(np.float32)


def _adam_like(m, v, g):
    m2 = 0.9 * m + 0.1 * g
    v2 = 0.999 * v + 0.001 * g * g
    return m2, v2, m2 / (fnp.sqrt(v2) + 1e-8)


# The programs of tests/test_kernels.py's fusion tests, run as WGSL: (name, f, args, most kernels).
FUSED = [
    ("chain", lambda a, x, b: fnp.tanh(a * x + b) * x + 1.0, (_f32(1000), _f32(1000, seed=1), _f32(1000, seed=2)), 1),
    ("views", lambda x, y, z: (x.T[1:, ::2] * y[None, :] + z[:, None]).reshape(-1), (_f32(6, 5), _f32(3), _f32(4)),
     1),
    ("softmax_normaliser", lambda x: fnp.sum(fnp.exp(x - fnp.max(x))), (_f32(1000),), 2),
    ("matmul_bias_relu", lambda x, w, b: fa.nn.relu(x @ w + b), (_f32(64, 32), _f32(32, 48, seed=1), _f32(48, seed=2)),
     1),
    ("adam_like", _adam_like, (_f32(100), _f32(100, seed=1), _f32(100, seed=2)), 1),
    ("weight_gradient", lambda x, g: (x.T @ g).T, (_f32(64, 32), _f32(64, 16, seed=1)), 1),
    ("reduction_epilogue", lambda x: fnp.mean(x, axis=1) * 2.0 + 1.0, (_f32(16, 50),), 1),
]


@pytest.mark.parametrize("name,f,args,most", FUSED, ids=[c[0] for c in FUSED])
def test_fused_programs_run_as_wgsl(wdev, ref, name, f, args, most):
    check_traced(f, *args)
    dargs = _on(wdev, *args)
    assert len(fa.jit(f).lower(*dargs).kernels()) <= most
    got = fa.jit(f)(*dargs)
    want = fa.jit(f, device=ref)(*args)
    for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,),
                    strict=True):
        assert g.device == wdev
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=2e-5, atol=2e-5)


# Matrix products of the blocked kernel (a CPU adapter: CPU_DOT_BLOCK outputs per work item), edges included:
# (name, f, operand shapes); each against NumPy in float64.
BLOCKED_DOTS = [
    ("square", lambda a, b: a @ b, ((64, 128), (128, 128))),
    ("ragged_edges", lambda a, b: a @ b, ((13, 9), (9, 7))),
    ("one_row", lambda a, b: a @ b, ((1, 5), (5, 10))),
    ("one_column", lambda a, b: a @ b, ((11, 6), (6, 1))),
    ("batched", lambda a, b: a @ b, ((3, 10, 5), (3, 5, 9))),
    ("transposed_lhs", lambda a, b: a.T @ b, ((6, 19), (6, 10))),
    ("transposed_rhs_epilogue", lambda a, b: fnp.maximum(a @ b.T + 1.0, 0.0), ((17, 12), (11, 12))),
    ("empty_contraction", lambda a, b: a @ b, ((5, 0), (0, 6))),
]


def _blocks_only(monkeypatch):
    """The blocked product where the subgroup form (``DotGroup._subgroup``) would run: the form of products it
    does not take (fewer rows or columns than a subgroup, other dtypes, adapters without subgroups)."""
    from fnarray.lowering.kernels.groups import dot
    monkeypatch.setattr(dot.DotGroup, "_subgroup_lanes", lambda self, lp, rp: 0)


def _products_equal_numpy(name, got, args):
    a64 = [a.astype(np.float64) for a in args]
    want = {"transposed_lhs": lambda: a64[0].T @ a64[1],
            "transposed_rhs_epilogue": lambda: np.maximum(a64[0] @ a64[1].T + 1.0, 0.0)}.get(
        name, lambda: a64[0] @ a64[1])()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name,f,shapes", BLOCKED_DOTS, ids=[c[0] for c in BLOCKED_DOTS])
def test_blocked_matrix_products_equal_numpy(wdev, monkeypatch, name, f, shapes):
    from fnarray.lowering.webgpu.backend import CPU_DOT_BLOCK
    _blocks_only(monkeypatch)
    args = [_f32(*s, seed=i) for i, s in enumerate(shapes)]
    got = np.asarray(fa.jit(f)(*_on(wdev, *args)))
    a64 = [a.astype(np.float64) for a in args]
    want = {"transposed_lhs": lambda: a64[0].T @ a64[1],
            "transposed_rhs_epilogue": lambda: np.maximum(a64[0] @ a64[1].T + 1.0, 0.0)}.get(
        name, lambda: a64[0] @ a64[1])()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    if wdev.platform == "cpu" and name == "square":
        with config_setting("autotune", "off"):   # 8 x 4 outputs per work item: 256 work items
            (k,) = fa.jit(f).lower(*_on(wdev, *args)).kernels()
        assert k.global_size[0] == -(-64 // CPU_DOT_BLOCK[0]) * -(-128 // CPU_DOT_BLOCK[1])
        with config_setting("autotune", "fast"):  # under dot.BLOCK_MIN_WORK: the block model keeps 8 x 4
            (k,) = fa.jit(f).lower(*_on(wdev, *args)).kernels()
        assert k.global_size[0] == 256


def test_blocked_integer_products_are_exact(wdev):
    x = np.random.default_rng(0).integers(-50, 50, (9, 14)).astype(np.int32)
    np.testing.assert_array_equal(np.asarray(fa.jit(lambda a: a @ a.T)(*_on(wdev, x))), x @ x.T)


# Operands the blocked kernel reads four elements per load on a CPU adapter (groups/dot.py ``_vector_reads``):
# (name, f, operand shapes, vector bindings of the product kernel there). Aligned operands along the
# contraction or along the rows/columns (the last block's vector clamped where the rows are 12), rows that are
# not a multiple of 4 (a scalar lhs beside a vector rhs), sizes that are not, a batch, and an epilogue that
# also reads an operand element by element.
VECTOR_DOTS = [
    ("contraction", lambda a, b: a @ b.T, ((12, 16), (20, 16)), 2),
    ("rows_and_columns", lambda a, b: a.T @ b, ((8, 12), (8, 20)), 2),
    ("contraction_and_columns", lambda a, b: a @ b, ((12, 16), (16, 20)), 2),
    ("rows_not_a_multiple_of_4", lambda a, b: a.T @ b, ((6, 10), (6, 8)), 1),
    ("odd_sizes", lambda a, b: a @ b, ((13, 9), (9, 7)), 0),
    ("batched", lambda a, b: a @ b, ((3, 12, 16), (3, 16, 8)), 2),
    ("epilogue_reads_operand", lambda a, b: a @ b + b[:8], ((8, 16), (16, 16)), 2),
]


@pytest.mark.parametrize("name,f,shapes,vectors", VECTOR_DOTS, ids=[c[0] for c in VECTOR_DOTS])
def test_vector_operand_loads_give_the_scalar_kernels_bits(wdev, monkeypatch, name, f, shapes, vectors):
    from fnarray.lowering.kernels.groups import dot
    _blocks_only(monkeypatch)
    monkeypatch.setattr(dot, "WIDE_STORES", False)   # the operands' loads only (the stores: STORE_DOTS below)
    args = _on(wdev, *[_f32(*s, seed=i) for i, s in enumerate(shapes)])
    (k,) = [k for k in fa.jit(f).lower(*args).kernels() if k.kind == "dot"]
    # storage (``array<vec4<f32>>``) or, for operands of 64 KiB or less, uniform (``array<vec4<f32>, n>``) bindings
    assert k.source.count("array<vec4<f32>") == (vectors if wdev.platform == "cpu" else 0)
    got = np.asarray(fa.jit(f)(*args))
    np.testing.assert_allclose(got, np.asarray(fa.jit(f, device=fa.devices("numpy")[0])(
        *[np.asarray(a) for a in args])), rtol=1e-5, atol=1e-5)
    monkeypatch.setattr(dot.DotGroup, "_vector_reads", lambda self, lp, rp, block: (None, None))
    g = fa.jit(lambda *a: f(*a))
    assert "vec4" not in "".join(k.source for k in g.lower(*args).kernels())
    scalar = np.asarray(g(*args))
    np.testing.assert_array_equal(got.view(np.uint32), scalar.view(np.uint32))


# Products of the subgroup form (groups/dot.py ``_subgroup``: native webgpu on a CPU adapter with subgroups, a
# subgroup sharing its lhs rows by broadcast): (name, f, operand shapes). Row tiles and column tiles cut short
# (37 rows of 16-row tiles, 45 columns of 32), a contraction not a multiple of 4 (scalar loads), an empty one, a
# batch with an epilogue reading another operand, both operands transposed, a batch of one, and products past
# BLOCK_MIN_WORK (32-row tiles in the row order by the cost model; the transposed lhs read four rows per load).
SUBGROUP_DOTS = [
    ("odd_tiles", lambda a, b: a @ b, ((37, 21), (21, 45))),
    ("aligned", lambda a, b: a @ b.T, ((1, 40, 16), (24, 16))),
    ("empty_contraction", lambda a, b: a @ b, ((9, 0), (0, 12))),
    ("batched_epilogue", lambda a, b, c: (fnp if isinstance(a, fa.Array) else np).tanh(a @ b + c),
     ((3, 17, 12), (3, 12, 24), (24,))),
    ("transposed_both", lambda a, b: a.T @ b.T, ((20, 36), (44, 20))),
    ("large", lambda a, b: a @ b, ((164, 260), (260, 204))),
    ("large_transposed_lhs", lambda a, b: a.T @ b, ((260, 164), (260, 204))),
]


@pytest.mark.parametrize("name,f,shapes", SUBGROUP_DOTS, ids=[c[0] for c in SUBGROUP_DOTS])
def test_subgroup_products_give_the_blocked_kernels_bits(wdev, monkeypatch, name, f, shapes):
    from fnarray.lowering.kernels.groups import dot
    args = [_f32(*s, seed=i) for i, s in enumerate(shapes)]
    dargs = _on(wdev, *args)
    kernels = fa.jit(f).lower(*dargs).kernels()
    sub = wdev.platform == "cpu" and getattr(wdev.impl.gpu, "has_subgroups", False)
    assert any("subgroupBroadcast" in k.source for k in kernels) == (sub and name != "empty_contraction"), name
    got = np.asarray(fa.jit(f)(*dargs))
    want = f(*[a.astype(np.float64) for a in args])   # NumPy's own product in float64
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * max(1, shapes[0][-1]) ** 0.5)
    # each accumulator adds its products in the contraction's order: the blocked kernel's bits, the same in the
    # row order of a 16 x 4 tile (SUBGROUP_TILE's "order"; the "large" products' own, by the cost model), and in
    # it with scalar loads only
    monkeypatch.setattr(dot, "SUBGROUP_TILE", {**dot.SUBGROUP_TILE, "order": "rows"})
    with config_setting("autotune", "off"):
        if not name.startswith("large"):
            rows = np.asarray(fa.jit(lambda *a: f(*a))(*dargs))
            np.testing.assert_array_equal(got.view(np.uint32), rows.view(np.uint32))
        monkeypatch.setattr(dot.DotGroup, "_subgroup_reads", lambda self, lp, rp, tile, lanes: (None, None))
        scalar = np.asarray(fa.jit(lambda *a: f(*a))(*dargs))
    np.testing.assert_array_equal(got.view(np.uint32), scalar.view(np.uint32))
    _blocks_only(monkeypatch)
    blocked = np.asarray(fa.jit(lambda *a: f(*a))(*dargs))
    np.testing.assert_array_equal(got.view(np.uint32), blocked.view(np.uint32))


# Products over per-head views whose batch dimensions (batch, heads) do not collapse to one stride (groups/dot.py,
# scheduler option ``dot_batch_views``: native webgpu on a CPU adapter reads them in place): (name, f, operand
# shapes, form). Attention's scores and values (einsum over [batch, seq, heads, d]) in the subgroup and blocked
# forms, a head width that is not a multiple of 4 (scalar loads), three batch dimensions, and one element per work
# item (the ``dot_block`` option off).
HEAD_DOTS = [
    ("scores", lambda q, k: _np_or_fnp(q).einsum("bqhd,bkhd->bhqk", q, k), ((2, 24, 3, 16), (2, 24, 3, 16)), "subgroup"),
    ("values", lambda p, v: _np_or_fnp(p).einsum("bhqk,bkhd->bqhd", p, v), ((2, 3, 24, 24), (2, 24, 3, 16)), "subgroup"),
    ("scores_blocked", lambda q, k: _np_or_fnp(q).einsum("bqhd,bkhd->bhqk", q, k), ((2, 12, 3, 8), (2, 12, 3, 8)),
     "blocked"),
    ("odd_width", lambda q, k: _np_or_fnp(q).einsum("bqhd,bkhd->bhqk", q, k), ((2, 10, 3, 5), (2, 9, 3, 5)), "blocked"),
    ("three_batch_dims", lambda q, k: _np_or_fnp(q).einsum("abqhd,abkhd->abhqk", q, k),
     ((2, 3, 9, 2, 4), (2, 3, 7, 2, 4)), "blocked"),
    ("one_output_per_item", lambda q, k: _np_or_fnp(q).einsum("bqhd,bkhd->bhqk", q, k), ((2, 10, 3, 5), (2, 9, 3, 5)),
     "simple"),
]


@pytest.mark.parametrize("name,f,shapes,form", HEAD_DOTS, ids=[c[0] for c in HEAD_DOTS])
def test_products_read_per_head_views_in_place(wdev, monkeypatch, name, f, shapes, form):
    """On a CPU adapter the product reads the per-head operands where they lie (no ``dot_operand_copy``
    kernel); the values agree with NumPy's einsum in float64 and, bit for bit, with the copied operands' product
    (``dot.BATCH_VIEWS`` off)."""
    from fnarray.lowering.kernels.groups import dot
    if form != "subgroup":
        _blocks_only(monkeypatch)
    if form == "simple":
        monkeypatch.setattr(dot.DotGroup, "_block", lambda self: (1, 1))
    args = [_f32(*s, seed=i) for i, s in enumerate(shapes)]
    dargs = _on(wdev, *args)
    names = [k.name for k in fa.jit(f).lower(*dargs).kernels()]
    assert ("dot_operand_copy" in names) == (wdev.platform != "cpu"), names
    got = np.asarray(fa.jit(f)(*dargs))
    np.testing.assert_allclose(got, f(*[a.astype(np.float64) for a in args]), rtol=1e-5, atol=1e-5)
    monkeypatch.setattr(dot, "BATCH_VIEWS", False)
    g = fa.jit(lambda *a: f(*a))
    assert "dot_operand_copy" in [k.name for k in g.lower(*dargs).kernels()]
    np.testing.assert_array_equal(got.view(np.uint32), np.asarray(g(*dargs)).view(np.uint32))


# Products whose vec4 operands of 64 KiB or less a CPU adapter binds as uniform arrays (groups/dot.py, scheduler
# option ``dot_uniform``): (name, f, operand shapes, uniform bindings of the product kernel there, form). Tiles cut
# short (odd rows and columns: the rhs then read by scalar loads from storage), operands transposed (the lhs too),
# a batch with an epilogue reading another operand, one operand just over 64 KiB (a storage binding) beside one of
# exactly 64 KiB, the same array as both operands (one uniform binding), and the blocked form.
UNIFORM_DOTS = [
    ("odd_tiles", lambda a, b: a @ b, ((37, 20), (20, 45)), 1, "subgroup"),
    ("transposed_both", lambda a, b: a.T @ b.T, ((20, 36), (44, 20)), 1, "subgroup"),
    ("batched_epilogue", lambda a, b, c: a @ b + c[:, :1, :], ((3, 17, 12), (3, 12, 32), (3, 12, 32)), 2,
     "subgroup"),
    ("over_64_kib", lambda a, b: a @ b, ((16, 128), (128, 129)), 1, "subgroup"),
    ("exactly_64_kib", lambda a, b: a @ b, ((16, 128), (128, 128)), 2, "subgroup"),
    ("same_operand", lambda a: a @ a.T, ((24, 16),), 1, "subgroup"),
    ("blocked", lambda a, b: a.T @ b, ((8, 12), (8, 20)), 2, "blocked"),
]


@pytest.mark.parametrize("name,f,shapes,uniforms,form", UNIFORM_DOTS, ids=[c[0] for c in UNIFORM_DOTS])
def test_uniform_operands_give_the_storage_kernels_bits(wdev, monkeypatch, name, f, shapes, uniforms, form):
    """On a CPU adapter a product reads its vec4 operands of at most 64 KiB through uniform bindings; the values
    agree with NumPy in float64 and, bit for bit, with the storage bindings' kernel (``dot.UNIFORM_OPERANDS``
    off): only where the elements are loaded from changes."""
    from fnarray.lowering.kernels.groups import dot
    if form == "blocked":
        _blocks_only(monkeypatch)
    args = [_f32(*s, seed=i) for i, s in enumerate(shapes)]
    dargs = _on(wdev, *args)
    (k,) = [k for k in fa.jit(f).lower(*dargs).kernels() if k.kind == "dot"]
    assert k.source.count("var<uniform> uni") == (uniforms if wdev.platform == "cpu" else 0), k.source
    got = np.asarray(fa.jit(f)(*dargs))
    np.testing.assert_allclose(got, f(*[a.astype(np.float64) for a in args]), rtol=1e-5, atol=1e-5)
    monkeypatch.setattr(dot, "UNIFORM_OPERANDS", False)
    g = fa.jit(lambda *a: f(*a))
    assert all("var<uniform> uni" not in k.source for k in g.lower(*dargs).kernels())
    np.testing.assert_array_equal(got.view(np.uint32), np.asarray(g(*dargs)).view(np.uint32))


# Products whose larger vec4 operand read four rows or columns a load (a weight gradient's ``x.T``, the rhs as it
# lies) a CPU adapter binds as several uniform windows of its buffer, the contraction's loop split where a window
# ends (groups/dot.py, scheduler option ``dot_uniform_windows``): (name, f, operand shapes, uniform bindings of the
# product kernel there in the subgroup and the blocked form). Operands of 75-86 KiB whose windows end inside the
# contraction (steps 224 and 256 of 300), odd rows and an odd contraction (the lhs then read by scalar loads), a
# transposed rhs of 48 KiB bound whole beside a windowed lhs, both operands windowed, a batch (storage: windows
# are for one batch; its batch windows, ``UNIFORM_BATCH_WINDOWS``, are off here and pinned by
# ``ROW_WINDOW_DOTS``), and an operand needing more windows than a stage's uniform buffers (storage).
WINDOW_DOTS = [
    ("weight_gradient", lambda a, b: a.T @ b, ((300, 64), (300, 72)), (2, 4)),
    ("odd_rows_and_steps", lambda a, b: a.T @ b, ((301, 37), (301, 60)), (2, 2)),
    ("transposed_rhs", lambda a, b: a.T @ b.T, ((300, 64), (40, 300)), (1, 3)),
    ("both_windowed", lambda a, b: a.T @ b, ((300, 96), (300, 68)), (2, 4)),
    ("batched", lambda a, b: a.mT @ b, ((3, 200, 32), (3, 200, 40)), (0, 0)),
    ("over_budget", lambda a, b: a.T @ b, ((800, 8), (800, 256)), (0, 1)),
]


@pytest.mark.parametrize("form", ["subgroup", "blocked"])
@pytest.mark.parametrize("name,f,shapes,uniforms", WINDOW_DOTS, ids=[c[0] for c in WINDOW_DOTS])
def test_uniform_windows_give_the_storage_kernels_bits(wdev, monkeypatch, name, f, shapes, uniforms, form):
    """On a CPU adapter a product's larger operand read four rows or columns a load is bound as uniform windows of
    at most 64 KiB each; the values agree with NumPy in float64 and, bit for bit, with the kernel that reads it
    from storage (``dot.UNIFORM_WINDOWS`` off: the accumulators add in the contraction's order either way)."""
    from fnarray.lowering.kernels.groups import dot
    monkeypatch.setattr(dot, "UNIFORM_BATCH_WINDOWS", False)
    if form == "blocked":
        _blocks_only(monkeypatch)
    args = [_f32(*s, seed=i) for i, s in enumerate(shapes)]
    dargs = _on(wdev, *args)
    (k,) = [k for k in fa.jit(f).lower(*dargs).kernels() if k.kind == "dot"]
    want = uniforms[form == "blocked"] if wdev.platform == "cpu" else 0
    assert k.source.count("var<uniform> uni") == want, k.source
    assert all(int(n) * 16 <= 1 << 16 for n in re.findall(r"var<uniform> uni\w*: array<vec4<f32>, (\d+)>", k.source))
    got = np.asarray(fa.jit(f)(*dargs))
    np.testing.assert_allclose(got, f(*[a.astype(np.float64) for a in args]), rtol=1e-5, atol=1e-4)
    monkeypatch.setattr(dot, "UNIFORM_WINDOWS", False)
    g = fa.jit(lambda *a: f(*a))
    np.testing.assert_array_equal(got.view(np.uint32), np.asarray(g(*dargs)).view(np.uint32))


@pytest.mark.parametrize("off,geometry,steps,split", [
    (0, (1, 72, 72), (300, 1), True), (8, (1, 260, 244), (301, 4), True), (0, (1, 64, 64), (1024, 1), True),
    (0, (1, 64, 64), (100, 1), True), (0, (1, 20000, 16400), (8, 1), False), (0, (1, 4100, 4096), (8, 1), False)])
def test_uniform_windows_cover_the_contraction(off, geometry, steps, split):
    """``dot._uniform_windows``: consecutive runs of the contraction from 0 to K (each but the last a multiple of
    the step), each window starting at a multiple of the alignment, at most 64 KiB, holding every element its
    steps read (``off + k * s_k + i``, ``i < count``); none where one step's elements exceed a window, or where
    no run of steps that fits one starts at an aligned byte (a row of 16,400 bytes: 16 steps)."""
    from fnarray.lowering.kernels.groups import dot
    _, s_k, count = geometry
    K, step = steps
    spec = types.SimpleNamespace(shape=(off + (K - 1) * s_k + count,), dtype=np.dtype(np.float32))
    ws = dot._uniform_windows(spec, off, geometry, steps, (1 << 16, 256))
    assert bool(ws) == split
    if split:
        assert [w[0] for w in ws] == [0] + [w[1] for w in ws[:-1]] and ws[-1][1] == K
    for k0, k1, start, size in ws:
        assert start % 256 == 0 and size <= 1 << 16 and (k1 == K or (k1 - k0) % step == 0)
        assert start <= 4 * (off + k0 * s_k) and 4 * (off + (k1 - 1) * s_k + count) <= start + size


# Products whose lhs read four contraction steps a load (rows as they lie) is over 64 KiB: a CPU adapter binds it
# as one uniform window of its rows per dispatch (groups/dot.py ``UNIFORM_ROW_WINDOWS``): (name, f, operand
# shapes, dispatches there, the switch, the window's first-index scalar). Two windows, the last one moved back to
# end at the buffer's end (odd rows and columns, an epilogue reading another operand), 16-row tiles of 4 KiB rows
# each bound as two windows of 8 rows (the last tile's second part past the rows), and a batch (storage: the
# row windows are for one batch; a batch element over 64 KiB has no batch window). Batched products over 64 KiB
# read through uniform windows of whole batch elements (``UNIFORM_BATCH_WINDOWS``): attention's q @ k^T over
# [batch, seq, heads, d] views (both operands windowed), and p @ v with an epilogue (the lhs windowed, 8 KiB batch
# elements: 4 dispatches, ``ROW_WINDOWS_MAX``).
ROW_WINDOW_DOTS = [
    ("odd_epilogue", lambda a, b, c: a @ b + c, ((301, 60), (60, 36), (301, 36)), 2, "UNIFORM_ROW_WINDOWS", "m_base"),
    ("tile_in_parts", lambda a, b: a @ b, ((40, 1040), (1040, 16)), 3, "UNIFORM_ROW_WINDOWS", "a_off1"),
    ("batched", lambda a, b: a @ b, ((2, 300, 64), (2, 64, 16)), 1, "UNIFORM_ROW_WINDOWS", "m_base"),
    ("attention_qk", lambda q, k: q.transpose(0, 2, 1, 3) @ k.transpose(0, 2, 3, 1),
     ((8, 64, 4, 16), (8, 64, 4, 16)), 2, "UNIFORM_BATCH_WINDOWS", "b_base"),
    ("attention_pv", lambda p, v, c: p @ v.transpose(0, 2, 1, 3) + c, ((8, 4, 64, 32), (8, 32, 4, 16), (8, 4, 64, 16)),
     4, "UNIFORM_BATCH_WINDOWS", "b_base"),
]


@pytest.mark.parametrize("name,f,shapes,dispatches,switch,first", ROW_WINDOW_DOTS, ids=[c[0] for c in ROW_WINDOW_DOTS])
def test_row_windows_give_the_storage_kernels_bits(wdev, monkeypatch, name, f, shapes, dispatches, switch, first):
    """On a CPU adapter a product's lhs over 64 KiB read along its rows (a batched product's operands over 64 KiB:
    whole batch elements) is bound as a uniform window of at most 64 KiB per dispatch, every dispatch running one
    kernel source; the values agree with NumPy in float64 and, bit for bit, with the kernel that reads it from
    storage (``switch`` off)."""
    from fnarray.lowering.kernels.groups import dot
    args = [_f32(*s, seed=i) for i, s in enumerate(shapes)]
    dargs = _on(wdev, *args)
    ks = [k for k in fa.jit(f).lower(*dargs).kernels() if k.kind == "dot"]
    assert len(ks) == (dispatches if wdev.platform == "cpu" else 1) and len({k.source for k in ks}) == 1
    if len(ks) > 1:   # operands as uniform arrays of at most 64 KiB, the window's first row or batch a scalar
        sizes = re.findall(r"var<uniform> uni\w*: array<vec4<f32>, (\d+)>", ks[0].source)
        assert sizes and all(int(n) * 16 <= 1 << 16 for n in sizes) and first in ks[0].source, ks[0].source
    got = np.asarray(fa.jit(f)(*dargs))
    np.testing.assert_allclose(got, f(*[a.astype(np.float64) for a in args]), rtol=1e-5, atol=1e-4)
    monkeypatch.setattr(dot, switch, False)
    g = fa.jit(lambda *a: f(*a))
    assert len([k for k in g.lower(*dargs).kernels() if k.kind == "dot"]) == 1
    np.testing.assert_array_equal(got.view(np.uint32), np.asarray(g(*dargs)).view(np.uint32))


@pytest.mark.parametrize("off,geometry,tile,count,parts", [
    (0, (64, 64, 1024), 32, 4, 1), (0, (64, 64, 300), 16, 2, 1), (8, (60, 60, 301), 16, 2, 1),
    (0, (784, 784, 32), 32, 1, 2), (0, (784, 784, 40), 32, 2, 2), (0, (2048, 2048, 64), 32, 2, 4),
    (0, (256, 256, 1 << 15), 16, 0, 1), (0, (64, 64, 1100), 32, 0, 1), (0, (256, 256, 1024), 32, 0, 1)])
def test_row_windows_cover_the_rows(off, geometry, tile, count, parts):
    """``dot._row_windows``: ``count`` dispatches of windows of one size, at most 64 KiB, each starting at a
    multiple of the alignment and within the buffer, holding whole tiles of consecutive rows from 0 to M and
    every element of them; a tile over one window (the VAE's ``[32, 784]`` in 32-row tiles, 8-row loads) in
    ``parts`` windows, one per run of whole loads (rows past M read as the last row); none where more than
    ``ROW_WINDOWS_MAX`` (4) dispatches would be needed (1100 rows of 256 bytes: 5; the transformer's ``[1024,
    256]``: 16)."""
    from fnarray.lowering.kernels.groups import dot
    s_m, K, M = geometry
    spec = types.SimpleNamespace(shape=(off + (M - 1) * s_m + K,), dtype=np.dtype(np.float32))
    plan = dot._row_windows(spec, off, geometry, (tile, 8, 4), (1 << 16, 32))
    assert len(plan[2] if plan else ()) == count
    if plan:
        per, size, ws = plan
        assert per % tile == 0 and size <= 1 << 16 and size % 16 == 0
        assert [w[0] for w in ws] == list(range(0, M, per)) and [w[1] for w in ws] == [min(M, w[0] + per) for w in ws]
        for r0, r1, ats in ws:
            assert len(ats) == parts and (parts == 1 or per == tile)
            for q, at in enumerate(ats):
                lo, hi = (min(r0 + q * per // parts, r1 - 1), min(r0 + (q + 1) * per // parts, r1) - 1)
                assert at % 32 == 0 and 0 <= at <= 4 * (off + lo * s_m) and 4 * (off + hi * s_m + K) <= at + size
                assert at + size <= 4 * math.prod(spec.shape)


@pytest.mark.parametrize("shape", [(16, 64, 256), (4, 256, 256), (1024, 256)])
def test_plain_index_reads_a_reshape_as_the_flat_index(shape):
    """``dot._plain``: the index of element ``(m, n + k)`` of a ``[1024, 256]`` product output, unravelled into an
    operand of ``shape`` and linearised (``((m * 256 + n + k) // 16384) * 16384 + (m % 64) * 256 + n + k``), is
    ``m * 256 + n + k`` for each of the four columns a ``vec4`` epilogue load reads (``n`` a multiple of 4 below
    253), so ``DotGroup._epilogue_loads`` reads such an operand four elements a load."""
    from fnarray.lowering.kernels import index
    from fnarray.lowering.kernels.groups import dot
    from fnarray.lowering.kernels.ir import INT32, Sym
    m, n = index.ix_data(Sym("m", INT32), 0, 1023), index.ix_data(Sym("n", INT32), 0, 252)
    for k in range(4):
        flat = m * 256 + n + k
        assert dot._plain(index.linearize(index.unravel(flat, shape), shape)) == flat


@pytest.mark.parametrize("d,dispatches", [(32, 4), (36, 0)])
def test_batch_windows_stop_at_the_dispatch_cap(d, dispatches):
    """``DotGroup._batch_plan``: a batched product's lhs of 32 batch elements of ``[64, d]`` float32 is bound as
    uniform windows of whole batch elements in at most ``ROW_WINDOWS_MAX`` (4) dispatches: elements of 8 KiB, 8 a
    window, in 4; of 9 KiB (7 a window; 4 divides 32: 8 dispatches) from storage in one."""
    from fnarray.lowering.kernels.groups import dot
    B, M, K, N = 32, 64, d, 16
    ctx = types.SimpleNamespace(opts={"dot_uniform": 1 << 16, "dot_uniform_windows": (11, 256)})
    group = types.SimpleNamespace(B=B, M=M, K=K, N=N, ctx=ctx)
    lhs = types.SimpleNamespace(shape=(B, M, K), dtype=np.dtype(np.float32))
    rhs = types.SimpleNamespace(shape=(B, K, N), dtype=np.dtype(np.float32))
    plan = dot.DotGroup._batch_plan(group, (lhs, 0, (M * K, K, 1)), (rhs, 0, (K * N, N, 1)), ("k", "rows"))
    assert len(plan[2] if plan else ()) == dispatches


def _momentum(x, d, m, p):
    m2 = 0.9 * m + x.T @ d
    return p - 1e-3 * m2, m2


def _np_or_fnp(a):
    return fnp if isinstance(a, fa.Array) else np


# Epilogues of products whose outputs a CPU adapter stores four columns per store (groups/dot.py ``_finish4``,
# option ``dot_store4``): (name, f, operand shapes, float32 outputs stored as vec4 there, form). A weight gradient
# with its momentum update (two outputs, both updated operands read four at a time), in both product forms, a
# column bias beside a row bias (one read per row), a batch, columns that are not a multiple of 4 (scalar stores),
# a bool output beside a float one, and an epilogue operand read transposed (scalar loads, vec4 stores) beside one
# read through a reshape (``dot._plain``: vec4 loads).
STORE_DOTS = [
    ("momentum", _momentum, ((8, 24), (8, 32), (24, 32), (24, 32)), 2, "subgroup"),
    ("momentum_blocked", _momentum, ((8, 24), (8, 32), (24, 32), (24, 32)), 2, "blocked"),
    ("row_and_column_bias", lambda a, b, c, r: _np_or_fnp(a).maximum(a @ b + c + r[:, None], 0),
     ((20, 12), (12, 32), (32,), (20,)), 1, "subgroup"),
    ("batched", lambda a, b, c: a @ b + c, ((3, 17, 12), (3, 12, 40), (40,)), 1, "blocked"),
    ("columns_not_a_multiple_of_4", lambda a, b: a @ b, ((16, 8), (8, 18)), 0, "blocked"),
    ("bool_beside_float", lambda a, b: (a @ b, a @ b > 0), ((16, 8), (8, 32)), 1, "subgroup"),
    ("transposed_and_reshaped_epilogue_operands", lambda a, b, c, d: a @ b - c.T + d.reshape(16, 32),
     ((16, 8), (8, 32), (32, 16), (2, 8, 32)), 1, "subgroup"),
]


def _bits(x):
    x = np.asarray(x)
    return x.view(np.uint32) if x.dtype == np.float32 else x


@pytest.mark.parametrize("name,f,shapes,wide,form", STORE_DOTS, ids=[c[0] for c in STORE_DOTS])
def test_vector_stores_give_the_scalar_kernels_bits(wdev, monkeypatch, name, f, shapes, wide, form):
    from fnarray.lowering.kernels.groups import dot
    if form == "blocked":
        _blocks_only(monkeypatch)
    args = [_f32(*s, seed=i) for i, s in enumerate(shapes)]
    dargs = _on(wdev, *args)
    (k,) = [k for k in fa.jit(f).lower(*dargs).kernels() if k.kind == "dot"]
    assert k.source.count("read_write> wide") == (wide if wdev.platform == "cpu" else 0), k.source
    got = fa.tree.leaves(fa.jit(f)(*dargs))
    want = fa.tree.leaves(f(*[a.astype(np.float64) for a in args]))   # NumPy in float64
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(np.asarray(g).astype(np.float64), w, rtol=1e-5, atol=1e-5)
    monkeypatch.setattr(dot, "WIDE_STORES", False)   # one element per store: the same values, bit for bit
    g = fa.jit(lambda *a: f(*a))
    assert all("read_write> wide" not in k.source for k in g.lower(*dargs).kernels())
    for a, b in zip(got, fa.tree.leaves(g(*dargs)), strict=True):
        np.testing.assert_array_equal(_bits(a), _bits(b))


def test_vector_stores_are_dropped_where_their_bindings_do_not_fit(wdev, monkeypatch):
    """A kernel whose vec4 output bindings the target refuses (``vectors_fit``: too many buffers, a written buffer
    bound twice) is built again with scalar stores, keeping its vec4 operand reads; the same bits."""
    from fnarray.lowering.kernels.groups import base, dot
    args = _on(wdev, *[_f32(*s, seed=i) for i, s in enumerate(STORE_DOTS[0][2])])
    wide = fa.tree.leaves(fa.jit(_momentum)(*args))
    refused = []

    def fits(caps, launch):
        writes = any(p.writes and np.dtype(p.dtype).subdtype is not None
                     for p in launch.kernel.params if isinstance(p, base.BufferParam))
        refused.append(writes)
        return not writes and base.vectors_fit(caps, launch)
    monkeypatch.setattr(dot, "vectors_fit", fits)
    g = fa.jit(lambda *a: _momentum(*a))
    (k,) = [k for k in g.lower(*args).kernels() if k.kind == "dot"]
    assert "read_write> wide" not in k.source
    if wdev.platform == "cpu":
        assert refused[:2] == [True, False]
        assert "var<storage, read> wide" in k.source or "var<uniform> uni" in k.source
    for a, b in zip(wide, fa.tree.leaves(g(*args)), strict=True):
        np.testing.assert_array_equal(_bits(a), _bits(b))


@pytest.mark.parametrize("k,bias", [(32, False), (48, False), (32, True)])
def test_short_products_leave_streamed_updates_to_a_map_kernel(wdev, monkeypatch, k, bias):
    """On a CPU adapter (``dot_streamed``: a contraction of 32 or less, an output of 2**16 elements or more), a
    momentum update reading its moment and parameter element by element runs as a map kernel after the product,
    not in its epilogue; a longer contraction keeps it, and so does an epilogue reading only a bias; the values
    agree with NumPy in float64 either way."""
    shapes = ((k, 256), (k, 256), (256, 256), (256, 256))
    args = [_f32(*s, seed=i) for i, s in enumerate(shapes)]
    dargs = _on(wdev, *args)
    if bias:
        f = lambda x, d, c, _: fnp.maximum(x.T @ d + c[0], 0)   # noqa: E731 (a row of c: one read per column)
    else:
        f = _momentum
    kernels = fa.jit(f).lower(*dargs).kernels()
    (product,) = [kk for kk in kernels if kk.kind == "dot"]
    declined = wdev.platform == "cpu" and k <= wb.CPU_DOT_STREAMED[0] and not bias
    assert (product.name == "dot_subgroup_dot_general") == declined, [kk.name for kk in kernels]
    maps = [kk for kk in kernels if kk.kind == "map"]   # one launch per 64 KiB window where map_uniform is on
    assert bool(maps) == declined and len(kernels) == 1 + len(maps), [kk.name for kk in kernels]
    got = fa.tree.leaves(fa.jit(f)(*dargs))
    want = fa.tree.leaves(f(*[a.astype(np.float64) for a in args]))
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(np.asarray(g).astype(np.float64), w, rtol=1e-5, atol=1e-5)
    monkeypatch.setattr(wb, "CPU_DOT_STREAMED", (0, 0))   # the option off: one kernel, the same values
    g = fa.jit(lambda *a: f(*a))
    assert len(g.lower(*dargs).kernels()) == 1
    for a, b in zip(got, fa.tree.leaves(g(*dargs)), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-6)


def test_a_device_refusing_subgroups_is_opened_without_them():
    from fnarray.lowering.webgpu.backend import _GPU
    asked = []

    class Adapter:
        def __init__(self, refuses):
            self.refuses = refuses

        def request_device_sync(self, required_features, required_limits):
            asked.append(list(required_features))
            if self.refuses & set(required_features):
                raise RuntimeError("feature not supported")
            return "device"
    gpu = _GPU.__new__(_GPU)
    gpu.adapter, gpu.has_subgroups = Adapter({"subgroup"}), True
    assert gpu._request_device(["shader-f16", "subgroup"], {}) == "device"
    assert asked == [["shader-f16", "subgroup"], ["shader-f16"]] and gpu.has_subgroups is False
    asked.clear()
    gpu.adapter = Adapter({"shader-f16"})
    with pytest.raises(RuntimeError, match="feature"):   # any other refusal is the caller's to report
        gpu._request_device(["shader-f16"], {})
    assert asked == [["shader-f16"]]


def _layernorm(h):
    mu = fnp.mean(h, axis=-1, keepdims=True)
    var = fnp.mean((h - mu) ** 2, axis=-1, keepdims=True)
    return (h - mu) / fnp.sqrt(var + 1e-5)


def test_shared_values_get_a_buffer_on_a_cpu_adapter(wdev, ref):
    """An embedding gather plus positions (the transformer's residual stream), read by a layernorm's passes,
    is computed once into a buffer on a CPU adapter (the scheduler option ``share_values``: the layernorm's
    three row loops would each redo the gather), and stays inline on a GPU; a softmax's ``exp(x - max)``
    (one buffer and a row statistic) stays in its reduction's row loop on both. Results equal numpy:0's."""
    rng = np.random.default_rng(3)
    table, pos = _f32(96, 64, seed=1), _f32(64, 64, seed=2)
    ids = rng.integers(0, 96, (16, 64)).astype(np.int32)

    def f(table, pos, ids):
        return _layernorm(fnp.take(table, ids, axis=0) + pos)
    args = [fa.device_put(a, wdev) for a in (table, pos, ids)]
    kernels = fa.jit(f).lower(*args).kernels()
    gathers = [k for k in kernels if f"{96 - 1}i" in k.source]   # the gather's clamp to the table's rows
    # kernels by name: a row kernel read through uniform row windows is one launch a window (reduce.UNIFORM_ROWS)
    names = {k.name for k in kernels}
    assert len(gathers) == 1 and len(names) == (2 if wdev.platform == "cpu" else 1), [k.name for k in kernels]
    want = np.asarray(fa.jit(f, device=ref)(table, pos, ids))
    np.testing.assert_allclose(np.asarray(fa.jit(f)(*args)), want, rtol=1e-5, atol=1e-5)
    h = table[ids].astype(np.float64) + pos
    np.testing.assert_allclose(want, (h - h.mean(-1, keepdims=True)) / np.sqrt(h.var(-1, keepdims=True) + 1e-5),
                               rtol=1e-4, atol=1e-4)
    x = fa.device_put(_f32(64, 130, seed=4), wdev)
    assert len(fa.jit(lambda v: fa.nn.softmax(v, axis=-1)).lower(x).kernels()) == 1


@pytest.mark.parametrize("dtype", [np.float32, np.bool_])
def test_concatenations_branch_on_a_cpu_adapter(wdev, ref, dtype):
    """A concatenation of more than two pieces inside a kernel is a tree of ``if``s on a CPU adapter (the
    scheduler option ``concat_branches``: a work item evaluates its own piece, where a ``select`` per piece
    evaluates all of them), a ``select`` chain on a GPU; both equal numpy:0 (an image grid's slices and
    transposes of a 2-D array, and uneven pieces along the last axis). The grid's pieces are one chain at shifted
    slices, which reads that chain once on every adapter (``kernels/uniform_pieces.py``: no branch, no select)."""
    x = _f32(100, 12, seed=5) > 0 if dtype == np.bool_ else _f32(100, 12, seed=5)

    def grid(v):
        ims = [v[i].reshape((3, 4)) for i in range(9)]
        rows = [fnp.concatenate([ims[r * 3 + c].T for c in range(3)][::-1], axis=0) for r in range(3)]
        return fnp.concatenate(rows, axis=1).T

    def uneven(v):
        return fnp.concatenate([v[:, :1], v[:, 3:7], v[:, 1:3], v[:, 7:]] * 2, axis=1)
    for f, branches in ((grid, False), (uneven, wdev.platform == "cpu")):
        xd = fa.device_put(x, wdev)
        source = "".join(k.source for k in fa.jit(f).lower(xd).kernels())
        assert ("cat0 = " in source) == branches, source
        np.testing.assert_array_equal(np.asarray(fa.jit(f)(xd)), np.asarray(fa.jit(f, device=ref)(x)))


def test_direct_conv_computes_several_positions_per_work_item(wdev, ref):
    """On a CPU adapter a work item of the direct convolution computes CPU_CONV_POSITIONS positions of the
    last spatial dimension (7 wide: 4 + 3, the last one past the edge not stored) and 4 output features."""
    from fnarray.lowering.webgpu.backend import CPU_CONV_POSITIONS
    x, w = _f32(2, 5, 7, 3), _f32(3, 3, 3, 8, seed=1)

    def f(x, w):
        y = fa.lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
        return fa.nn.relu(y + 0.5)
    got = fa.jit(f)(*_on(wdev, x, w))
    np.testing.assert_allclose(np.asarray(got), np.asarray(fa.jit(f, device=ref)(x, w)), rtol=2e-5, atol=2e-5)
    if wdev.platform == "cpu":
        (k,) = fa.jit(f).lower(*_on(wdev, x, w)).kernels()
        items = 2 * 5 * -(-7 // CPU_CONV_POSITIONS) * (8 // 4)
        assert k.global_size[0] == -(-items // k.local_size[0]) * k.local_size[0]


# ------------------------------------------------------------------------------------------ fallback


@pytest.mark.enable_x64
def test_float64_falls_back_with_a_warning(wdev, fallback_mode, monkeypatch):
    fallback_mode("warn")
    # The warning comes once per primitive, dtype and device per process: forget earlier tests' warnings.
    from fnarray.devices import partition
    monkeypatch.setattr(partition, "_warned", set())
    x64 = np.linspace(-1, 1, 7)
    (xd,) = _on(wdev, x64)
    assert xd.dtype == np.float64 and xd.device == wdev
    f = fa.jit(lambda a: fnp.sin(a) * 2.0 + a)
    with pytest.warns(FallbackWarning, match=r"float64.*webgpu:0"):
        y = f(xd)
    assert y.dtype == np.float64 and y.device == wdev
    np.testing.assert_allclose(np.asarray(y), np.sin(x64) * 2.0 + x64, rtol=1e-15)
    # eager operations take the same path
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FallbackWarning)
        z = fnp.exp(xd)
    np.testing.assert_allclose(np.asarray(z), np.exp(x64), rtol=1e-15)


@pytest.mark.enable_x64
def test_float64_raises_with_fallback_error(wdev, fallback_mode):
    fallback_mode("error")
    (xd,) = _on(wdev, np.linspace(-1, 1, 7))
    with pytest.raises(UnsupportedOnDevice, match=r"float64.*webgpu:0.*float32, int32, uint32, bool"):
        fa.jit(lambda a: fnp.sin(a) * 2.0)(xd)
    with pytest.raises(UnsupportedOnDevice):
        fnp.cos(xd)


def test_mixed_program_runs_its_float32_part_on_the_device(wdev, fallback_mode):
    fallback_mode("silent")
    x = np.arange(6, dtype=np.float32)
    f = fa.jit(lambda a: (a * 2.0).astype(np.int8).astype(np.float32) + a)
    (xd,) = _on(wdev, x)
    y = f(xd)
    assert y.device == wdev and y.dtype == np.float32
    np.testing.assert_array_equal(np.asarray(y), (x * 2).astype(np.int8).astype(np.float32) + x)


# ------------------------------------------------------------------------------------------ limits


def _storage_bindings(source: str) -> int:
    return len(re.findall(r"var<storage", source))


def test_kernels_bind_at_most_eight_storage_buffers(wdev, ref):
    xs = [np.full(5, k + 1, np.float32) for k in range(12)]

    def f(*a):
        acc = a[0]
        for v in a[1:]:
            acc = acc * 0.5 + v
        return acc

    args = _on(wdev, *xs)
    limit = wdev.impl.capabilities(wdev).max_buffers_per_kernel
    kernels = fa.jit(f).lower(*args).kernels()
    assert all(_storage_bindings(k.source) <= limit for k in kernels)
    with wb.portable_limits():   # as fa.export.webgpu schedules: within every browser's 8
        portable = fa.jit(f).lower(*args).kernels()
    assert len(portable) >= 2 and all(_storage_bindings(k.source) <= 8 for k in portable)
    if limit >= 13:   # 13 buffers (12 inputs, 1 output) fit one kernel where the device gives them
        assert len(kernels) == 1
    np.testing.assert_allclose(np.asarray(fa.jit(f)(*args)), np.asarray(fa.jit(f, device=ref)(*xs)), rtol=1e-6)


def test_a_lower_buffer_limit_splits_further(wdev, ref, patched_caps):
    patched_caps(max_buffers_per_kernel=4)
    xs = [np.arange(5, dtype=np.float32) * (k + 1) for k in range(7)]

    def f(*a):
        return sum(a[1:], a[0] * 3.0), a[0] - a[1]

    args = _on(wdev, *xs)
    kernels = fa.jit(f).lower(*args).kernels()
    assert all(_storage_bindings(k.source) <= 4 for k in kernels)
    for g, w in zip(fa.jit(f)(*args), fa.jit(f, device=ref)(*xs), strict=True):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-6)


def _long_reductions(z):
    return z.sum(), z.max(), fnp.argmax(z), z @ z


@pytest.mark.slow
def test_reductions_past_lavapipes_loop_limit_read_every_element(wdev):
    # lavapipe stops an invocation's loops after 65,535 iterations: a work-group of 128 summing 8,388,481
    # elements lost the last one (0.0 0.0 0 0.0 here); the scheduler now reduces such rows in blocks
    n = 8388481
    z = np.zeros(n, np.float32)
    z[-1] = 7.0
    got = [float(np.asarray(v)) for v in fa.jit(_long_reductions)(*_on(wdev, z))]
    assert got == [7.0, 7.0, n - 1, 49.0]


def test_reductions_and_products_past_the_loop_limit_run_in_blocks(wdev, ref, patched_caps):
    # the blocked forms (kernels/long_reductions.py) at a limit of 100: rows of more than 3,200 in blocks of 64
    # and a tail, products contracting more than 100; argmax/argmin keep the first of equal extremes
    patched_caps(max_loop_iterations=100)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((3, 3301)).astype(np.float32)
    x[1, [700, 3200]] = 9.0
    x[2, [5, 3300]] = -9.0
    a, b = rng.standard_normal((2, 300)).astype(np.float32), rng.standard_normal((300, 3)).astype(np.float32)

    def f(x, a, b):
        return x.sum(1), x.max(1), fnp.argmax(x, 1), fnp.argmin(x, 1), x.T.sum(), a @ b

    got = fa.jit(f)(*_on(wdev, x, a, b))
    want = fa.jit(f, device=ref)(x, a, b)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=2e-5, atol=2e-4)
    assert [int(i) for i in np.asarray(got[2])[1:]] == [700, int(np.argmax(x[2]))]
    assert int(np.asarray(got[3])[2]) == 5


def test_dispatch_folds_into_a_second_dimension(wdev, ref, patched_caps):
    patched_caps(max_dispatch=8)
    # 16 work-groups of 64 items of 4 elements on a CPU adapter (63 of one element on a GPU): folded
    x = np.arange(4000, dtype=np.float32) * 0.25

    def g(a):   # two outputs: `tanh(a * 0.01) + sum(a)` is one single-group reduction kernel since wgpured
        return fnp.tanh(a * 0.01) + 1.0, fnp.sum(a)

    (xd,) = _on(wdev, x)
    kernels = fa.jit(g).lower(xd).kernels()
    assert any(len(k.global_size) == 2 for k in kernels)
    for k in kernels:
        assert all(gs // ls <= 8 for gs, ls in zip(k.global_size, k.local_size, strict=True))
    for got, want in zip(fa.jit(g)(xd), fa.jit(g, device=ref)(x), strict=True):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5)


def test_dispatch_past_65535_workgroups_on_the_adapter(wdev):
    lim = wdev.impl.gpu.limits["max-compute-workgroups-per-dimension"]
    n = lim * 64 + 129  # more work-groups of 64 than one dimension allows
    f = fa.jit(lambda: fnp.arange(n, dtype=np.int32) * 3 + 1, device=wdev)
    y = np.asarray(f())
    assert y.shape == (n,) and y[0] == 1 and y[-1] == 3 * (n - 1) + 1
    np.testing.assert_array_equal(y[:: 4099], np.arange(0, n, 4099, dtype=np.int32) * 3 + 1)


def test_operands_past_the_binding_size_fall_back(wdev, fallback_mode):
    gpu = wdev.impl.gpu
    old = gpu.limits["max-storage-buffer-binding-size"]
    gpu.limits["max-storage-buffer-binding-size"] = 256
    try:
        x = np.arange(100, dtype=np.float32)  # 400 bytes > 256
        (xd,) = _on(wdev, x)
        fallback_mode("error")
        with pytest.raises(UnsupportedOnDevice, match="maxStorageBufferBindingSize"):
            fa.jit(lambda a: a * 2.0)(xd)
        fallback_mode("warn")
        with pytest.warns(FallbackWarning, match="maxStorageBufferBindingSize"):
            y = fa.jit(lambda a: a * 3.0)(xd)
        np.testing.assert_array_equal(np.asarray(y), x * 3)
        assert y.device == wdev
    finally:
        gpu.limits["max-storage-buffer-binding-size"] = old


# ------------------------------------------------------------------------------------------ runtime


class _Counting:
    """A stand-in for the wgpu queue that counts submits and readbacks."""

    def __init__(self, queue):
        self._q, self.submits, self.reads = queue, 0, 0

    def submit(self, bufs):
        self.submits += 1
        return self._q.submit(bufs)

    def read_buffer(self, *a, **k):
        self.reads += 1
        return self._q.read_buffer(*a, **k)

    def __getattr__(self, name):
        return getattr(self._q, name)


def test_small_calls_share_one_submit_and_readback_only_on_read(wdev, ref, monkeypatch):
    gpu = wdev.impl.gpu

    def step(p, x):
        h = fnp.tanh(x @ p["w"] + p["b"])
        return fnp.sum(h * h), {"w": p["w"] * 0.5, "b": p["b"] + fnp.mean(h)}

    rng = np.random.default_rng(1)
    p = {"w": rng.standard_normal((8, 4)).astype(np.float32), "b": np.zeros(4, np.float32)}
    x = rng.standard_normal((3, 8)).astype(np.float32)
    pd, (xd,) = fa.device_put(p, wdev), _on(wdev, x)
    f = fa.jit(step)
    assert len(f.lower(pd, xd).kernels()) >= 3
    f(pd, xd)  # compile
    gpu.flush()
    counting = _Counting(gpu.queue)
    monkeypatch.setattr(gpu, "queue", counting)
    loss, newp = f(pd, xd)
    loss2, _ = f(newp, xd)
    # both calls recorded into the GPU's open command encoder (dispatch.BATCH_LAUNCHES), submitted by the read
    assert counting.submits == 0 and counting.reads == 0
    got = float(loss2)
    assert counting.submits == 1 and counting.reads == 1
    want = fa.jit(step, device=ref)(fa.jit(step, device=ref)(p, x)[1], x)[0]
    np.testing.assert_allclose(got, float(want), rtol=1e-5)


def test_pipelines_are_cached_by_source_across_shapes(wdev):
    gpu = wdev.impl.gpu
    f = fa.jit(lambda a: fnp.exp(a) * 0.75 - 0.125)
    f(*_on(wdev, np.ones(3, np.float32)))
    n = len(gpu.pipelines)
    for size in (5, 17, 301):
        x = np.linspace(0, 1, size, dtype=np.float32)
        np.testing.assert_allclose(np.asarray(f(*_on(wdev, x))), np.exp(x) * 0.75 - 0.125, rtol=1e-6)
    assert len(gpu.pipelines) == n  # a flat elementwise kernel takes its size as an argument
    for size in (8, 300, 1000):   # on a CPU adapter, multiples of 4 take map_vec4's form: one more pipeline
        x = np.linspace(0, 1, size, dtype=np.float32)
        np.testing.assert_allclose(np.asarray(f(*_on(wdev, x))), np.exp(x) * 0.75 - 0.125, rtol=1e-6)
    assert len(gpu.pipelines) <= n + 1


def test_dtypes_round_trip_including_odd_and_empty_sizes(wdev):
    for x in [np.array([True, False, True]), np.array([1, 2**32 - 1, 7], np.uint32),
              np.array([-(2**31), 5, 2**31 - 1], np.int32), np.zeros((0, 3), np.float32),
              np.array(2.5, np.float32), np.array(False)]:
        (xd,) = _on(wdev, x)
        back = np.asarray(xd)
        assert back.dtype == x.dtype and back.shape == x.shape
        np.testing.assert_array_equal(back, x)
        y = np.asarray(fa.jit(lambda a: a)(xd))
        np.testing.assert_array_equal(y, x)
    b = np.array([True, False, True, True, False])
    (bd,) = _on(wdev, b)
    np.testing.assert_array_equal(np.asarray(fa.jit(lambda a: ~a | (a ^ a[::-1]))(bd)), ~b | (b ^ b[::-1]))
    u = np.array([1, 2**31, 2**32 - 1], np.uint32)
    (ud,) = _on(wdev, u)
    np.testing.assert_array_equal(np.asarray(fa.jit(lambda a: (a >> 1) + a * 3)(ud)), (u >> 1) + u * np.uint32(3))
    e = fa.jit(lambda a: fnp.sum(a, axis=0) + 1.0)(*_on(wdev, np.zeros((0, 3), np.float32)))
    np.testing.assert_array_equal(np.asarray(e), np.ones(3, np.float32))


def test_float16_with_shader_f16(wdev, ref, fallback_mode):
    if not wdev.impl.gpu.has_f16:
        pytest.skip("this adapter has no shader-f16 (hardware this machine lacks)")
    fallback_mode("error")
    rng = np.random.default_rng(2)
    x = rng.uniform(-2, 2, (5, 7)).astype(np.float16)
    y = rng.uniform(-2, 2, (5, 7)).astype(np.float16)

    def f(a, b):
        return (a * b + 1.0, fnp.exp(a), fnp.sum(a * b, axis=1), fnp.maximum(a, b), a @ b.T,
                (a > b).astype(np.float32) + a.astype(np.float32), fnp.sort(a, axis=1))

    got = fa.jit(f)(*_on(wdev, x, y))
    want = fa.jit(f, device=ref)(x, y)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype
        np.testing.assert_allclose(np.asarray(g, np.float64), np.asarray(w, np.float64), rtol=1e-2, atol=1e-2)
    assert "enable f16;" in fa.jit(f).lower(*_on(wdev, x, y)).as_text()


def test_host_driven_control_flow(wdev, ref):
    def f(x):
        def body(c):
            k, v = c
            return k + 1, v * 0.5 + fnp.sin(v)
        k, v = fa.while_loop(lambda c: c[0] < 4, body, (0, x))
        s, ys = fa.scan(lambda c, t: (c + t, c * t), 0.0, v)
        return fa.cond(s > 0, lambda: ys * 2.0, lambda: ys - 1.0), k

    x = np.linspace(-1, 2, 6, dtype=np.float32)
    got = fa.jit(f)(*_on(wdev, x))
    want = fa.jit(f, device=ref)(x)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-5, atol=1e-6)
    assert got[0].device == wdev


def test_random_bits_equal_the_reference_bit_for_bit(wdev, ref, fallback_mode):
    fallback_mode("error")  # Threefry is uint32 arithmetic: all of it runs as WGSL

    def draws(k):
        return (fa.random.bits(k, (5,)), fa.random.uniform(k, (4,)), fa.random.randint(k, (4,), 0, 10),
                fa.random.permutation(k, 8), fa.random.normal(fa.random.split(k)[1], (3,)))

    got = fa.jit(draws)(fa.device_put(fa.random.key(42), wdev))
    want = fa.jit(draws, device=ref)(fa.random.key(42))
    for g, w in zip(got[:4], want[:4], strict=True):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))
    np.testing.assert_allclose(np.asarray(got[4]), np.asarray(want[4]), rtol=1e-6)


def test_block_until_ready_and_delete(wdev):
    (xd,) = _on(wdev, np.arange(4, dtype=np.float32))
    y = fa.jit(lambda a: a + 1.0)(xd)
    assert y.block_until_ready() is y
    y.delete()
    with pytest.raises(RuntimeError, match="deleted"):
        np.asarray(y)


def test_donated_inputs_are_deleted_and_results_stay_right(wdev):
    f = fa.jit(lambda p, g: p - 0.5 * g, donate_argnums=0)
    p = fa.device_put(np.arange(6, dtype=np.float32), wdev)
    g = fa.device_put(np.ones(6, np.float32), wdev)
    for k in range(3):
        new = f(p, g)
        assert p.is_deleted()
        p = new
        np.testing.assert_allclose(np.asarray(p), np.arange(6) - 0.5 * (k + 1))


@pytest.mark.parametrize("donate", [(), (0,), (0, 1)])
def test_inputs_returned_as_outputs_survive_donation_and_delete(wdev, donate):
    """A jitted function returning an argument as it is (once or twice, beside a computed result): the output
    shares the argument's buffer, so donating the argument (jit deletes it after the call) or deleting another
    array that shares the buffer must leave the outputs readable; numpy:0's values. Was: the donated input's
    buffer went back to the pool and every output holding it raised ``AttributeError`` on read."""
    x = np.arange(6, dtype=np.float32)
    f = fa.jit(lambda a, b: (a, b, a, a + 1), donate_argnums=donate)
    a, b = fa.device_put(x, wdev), fa.device_put(x + 10, wdev)
    outs = f(a, b)
    for i in donate:
        assert (a, b)[i].is_deleted()
    if not donate:
        a.delete()   # the outputs sharing a's buffer keep it
    junk = [fa.jit(lambda v: v * 100)(fa.device_put(x, wdev)) for _ in range(4)]   # pooled buffers reused
    for got, want in zip(outs, (x, x + 10, x, x + 1), strict=True):
        np.testing.assert_array_equal(np.asarray(got), want)
    outs[0].delete()
    np.testing.assert_array_equal(np.asarray(outs[2]), x)   # the other output holding the same buffer
    np.testing.assert_array_equal(np.asarray(junk[0]), x * 100)


def test_digits_training_step_runs_without_fallback(wdev, ref, fallback_mode):
    sys.path.append(str(__import__("pathlib").Path(__file__).resolve().parents[1] / "benchmarks"))
    from backend_vs_raw import fn_init, make_fn_step

    fallback_mode("error")
    rng = np.random.default_rng(0)
    x = rng.random((16, 64)).astype(np.float32)
    y = np.eye(10, dtype=np.float32)[rng.integers(0, 10, 16)]
    results = {}
    for dev in (wdev, ref):
        opt, step = make_fn_step()
        params = fa.device_put(fn_init(), dev)
        state = opt.init(params)
        xd, yd = fa.device_put(x, dev), fa.device_put(y, dev)
        jstep = fa.jit(step)
        losses = []
        for _ in range(3):
            params, state, loss = jstep(params, state, xd, yd)
            losses.append(float(loss))
        results[dev.backend] = (losses, {k: np.asarray(v) for k, v in params.items()})
    (lw, pw), (ln, pn) = results["webgpu"], results["numpy"]
    np.testing.assert_allclose(lw, ln, rtol=1e-5)
    assert lw[-1] < lw[0]
    for k in pn:
        np.testing.assert_allclose(pw[k], pn[k], rtol=1e-4, atol=1e-6, err_msg=k)


@pytest.mark.parametrize("model,most", [("mlp", 24), ("cnn", 33)])
def test_digits_steps_kernel_counts_and_losses(wdev, ref, fallback_mode, model, most):
    """The examples' digits training steps (gather, value_and_grad, Adam): at most ``most`` kernels per step on
    webgpu:0 (the counts of the 2026-12-05 eighth session; each launch costs lavapipe ~30-60 us whatever its
    work), and the losses and parameters of numpy:0 after three steps."""
    root = __import__("pathlib").Path(__file__).resolve().parents[1] / "examples"
    sys.path.insert(0, str(root))
    import digits_cnn
    import digits_mlp
    mod = digits_cnn if model == "cnn" else digits_mlp
    fallback_mode("error")
    rng = np.random.default_rng(0)
    x, y = rng.random((200, 64)).astype(np.float32), rng.integers(0, 10, 200).astype(np.int32)
    idx = [rng.integers(0, 200, 32).astype(np.int32) for _ in range(3)]
    p0 = {k: np.asarray(v) for k, v in mod.init_params(fa.random.key(0)).items()}
    results = {}
    for dev in (wdev, ref):
        opt = fa.optim.adam(1e-3)
        params = fa.device_put(p0, dev)
        state = opt.init(params)
        step = digits_mlp.make_train_step(opt, dev, loss=mod.loss_fn)
        args = [fa.device_put(a, dev) for a in (x, y)]
        if dev == wdev:
            kernels = step.lower(params, state, *args, fa.device_put(idx[0], dev)).kernels()
            assert len(kernels) <= most, [k.name for k in kernels]
        losses = []
        for i in idx:
            params, state, loss = step(params, state, *args, fa.device_put(i, dev))
            losses.append(float(loss))
        results[dev.backend] = (losses, {k: np.asarray(v) for k, v in params.items()})
    (lw, pw), (ln, pn) = results["webgpu"], results["numpy"]
    np.testing.assert_allclose(lw, ln, rtol=1e-5)
    for k in pn:
        # Adam divides by sqrt(v): a gradient near zero, summed in another order, moves its parameter by up to
        # ~lr either way (one of the CNN's 32,768 w1 entries by 1.7e-4, on main as here)
        np.testing.assert_allclose(pw[k], pn[k], rtol=1e-4, atol=5e-4, err_msg=k)


# ------------------------------------------------------------------------------------------ availability


@pytest.mark.parametrize("backend_type", ["Vulkan", "OpenGL"])
def test_wgpu_backend_type_picks_the_adapter(wdev, backend_type):
    import os
    import subprocess

    import wgpu
    kinds = {str(a.info.get("backend_type")) for a in wgpu.gpu.enumerate_adapters_sync()}
    if backend_type not in kinds:
        pytest.skip(f"no {backend_type} adapter on this machine (hardware this machine lacks)")
    code = ("import numpy as np, fnarray as fa; d = fa.devices('webgpu')[0]; print(d.description); "
            "x = fa.device_put(np.array([1.5, -2.0, np.nan], np.float32), d); "
            "print(np.asarray(fa.jit(lambda a: fa.numpy.maximum(a * 2.0, 0.0))(x)).tolist())")
    env = dict(os.environ, WGPU_BACKEND_TYPE=backend_type)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    desc, values = out.stdout.strip().splitlines()[-2:]
    assert f"via {backend_type}" in desc
    assert values == "[3.0, 0.0, nan]"



def test_missing_wgpu_is_reported_with_the_fix(monkeypatch):
    from fnarray.lowering.webgpu import backend as webgpu
    monkeypatch.setitem(sys.modules, "wgpu", None)
    with pytest.raises(BackendUnavailable, match="pip install wgpu"):
        webgpu.make_backend()


def test_a_broken_driver_does_not_crash(monkeypatch):
    from fnarray.lowering.webgpu import backend as webgpu

    class BrokenAdapter:
        info = {"device": "fake", "backend_type": "Vulkan", "adapter_type": "CPU"}
        features = set()
        limits = {}

        def request_device_sync(self, **kw):
            raise OSError("driver exploded")

    gpu_ns = types.SimpleNamespace(request_adapter_sync=lambda **kw: BrokenAdapter(),
                                   enumerate_adapters_sync=lambda: [BrokenAdapter()])
    fake = types.SimpleNamespace(gpu=gpu_ns, BufferUsage=types.SimpleNamespace(STORAGE=1, COPY_SRC=2, COPY_DST=4,
                                                                                     UNIFORM=8))
    monkeypatch.setattr(webgpu, "_import_wgpu", lambda: fake)
    with pytest.raises(BackendUnavailable, match="driver exploded.*to fix"):
        webgpu.make_backend()
    gpu_ns.request_adapter_sync = lambda **kw: None
    gpu_ns.enumerate_adapters_sync = lambda: []
    with pytest.raises(BackendUnavailable, match="no adapter"):
        webgpu.make_backend()


def test_pooled_buffers_survive_gc_cycles(wdev):
    # A buffer captured by a jitted function that is then collected (a reference cycle) used to go
    # back to the pool after wgpu-py had already released it; the next launch then panicked in
    # wgpu and aborted the process. Run in a subprocess so that a regression fails instead of aborting.
    import subprocess
    code = ("import gc, numpy as np, fnarray as fa\n"
            "a = np.array([1, 2], np.int32)\n"
            "for i in range(3):\n"
            "    print(np.asarray(fa.jit(lambda: fa.device_put(a, 'webgpu:0') + 1)()).tolist()); gc.collect()\n"
            "    y = fa.device_put(np.array([5, 6], np.int32), 'webgpu:0')\n"
            "    print(np.asarray(y + 1).tolist())\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["[2,", "3]", "[6,", "7]"] * 3


def test_float_division_by_zero_is_ieee_under_jit(wdev):
    # WGSL leaves x / 0.0 indeterminate (Mesa folded it to 0); the renderer spells IEEE results out.
    x = fa.device_put(np.array([1.0, -1.0, 0.0, np.nan, np.inf, 6.0], np.float32), wdev)
    y = fa.device_put(np.array([0.0, 0.0, 0.0, 0.0, 0.0, 3.0], np.float32), wdev)
    with np.errstate(all="ignore"):
        want = np.asarray(x) / np.asarray(y)
        want0 = np.asarray(x) / np.float32(0.0)
    np.testing.assert_array_equal(np.asarray(fa.jit(lambda a, b: a / b)(x, y)), want)
    np.testing.assert_array_equal(np.asarray(fa.jit(lambda a: a / 0.0)(x)), want0)
    empty = fa.device_put(np.zeros(0, np.float32), wdev)
    assert np.isnan(float(fa.jit(fa.numpy.mean)(empty)))


def test_concatenate_of_more_arrays_than_a_kernel_binds_runs_split(wdev):
    # The scheduler splits it into a tree of concatenates that each fit the 8 storage buffers.
    parts = [fa.device_put(np.full(3, i, np.float32), wdev) for i in range(9)]
    with warnings.catch_warnings():
        warnings.simplefilter("error", fa.FallbackWarning)
        out = fa.numpy.concatenate(parts)
    assert out.device == wdev
    np.testing.assert_array_equal(np.asarray(out), np.repeat(np.arange(9, dtype=np.float32), 3))


def test_window_reductions_past_the_loop_limit_fall_back(fallback_mode):
    """lavapipe stops a shader invocation's loops after 65,535 iterations, silently: a window sum over
    90,000 taps (one work item walks them all) came back 32550.5 instead of 45000. Such windows run on
    numpy:0 now, with the warning; smaller ones stay on the device."""
    dev = require_backend("webgpu")[0]
    if dev.impl.capabilities(dev).max_loop_iterations is None:
        pytest.skip("this adapter has no loop limit")
    x = fa.device_put(np.arange(90_000, dtype=np.float32).reshape(1, 300, 300) / 90_000, dev)
    for f, ref in [(fa.lax.reduce_window_sum, np.sum), (fa.lax.reduce_window_max, np.max)]:
        def g(v, f=f):
            return f(v, (1, 300, 300), (1, 1, 1), "VALID")
        fallback_mode("error")
        with pytest.raises(UnsupportedOnDevice, match="90000 taps"):
            fa.jit(g, device=dev)(x)
        fallback_mode("warn")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FallbackWarning)
            got = fa.jit(g, device=dev)(x)
        np.testing.assert_allclose(np.asarray(got).ravel(), [ref(np.asarray(x, np.float64))], rtol=1e-5)
    small = fa.jit(lambda v: fa.lax.reduce_window_sum(v, (1, 100, 100), (1, 100, 100), "VALID"), device=dev)(x)
    np.testing.assert_allclose(np.asarray(small), np.asarray(x).reshape(3, 100, 3, 100).sum((1, 3))[None],
                               rtol=1e-5)


def _cache_step(cache, x, pos):
    """``x`` written at row ``pos`` of ``cache`` (a KV cache's update) and the new cache's column sums."""
    new = fa.lax.dynamic_update_slice(cache, fnp.tanh(x) * 2.0, (pos, 0))
    return fnp.sum(new, axis=0), new


def test_donated_cache_is_updated_in_place(wdev):
    """``jit(donate_argnums=...)`` on webgpu: a ``dynamic_update_slice`` of the donated cache writes only the
    new row into the donated buffer, which the result takes over (no new buffer, no copy of the cache); the
    results equal NumPy's float64 step after step, and the donated array is deleted."""
    f = fa.jit(_cache_step, donate_argnums=0)
    cache = fa.device_put(np.zeros((256, 8), np.float32), wdev)
    first = cache.call_view()[0].buffer
    args = (cache, np.zeros((1, 8), np.float32), np.int32(0))
    assert [k.name for k in f.lower(*args).kernels()] == ["update_tanh_mul_dynamic_update_slice", "reduce_reduce_sum"]
    assert [k.name for k in fa.jit(_cache_step).lower(*args).kernels()] == [
        "map_tanh_mul_dynamic_update_slice", "reduce_reduce_sum"]                 # the whole cache written
    want = np.zeros((256, 8))
    for pos in (0, 3, 255, 300):                                 # 300: clamped to the last row
        x = np.random.default_rng(pos).normal(size=(1, 8)).astype(np.float32)
        total, new = f(cache, fa.device_put(x, wdev), np.int32(pos))
        assert cache.is_deleted() and new.call_view()[0].buffer is first
        want[min(pos, 255)] = np.tanh(x[0].astype(np.float64)) * 2.0
        np.testing.assert_allclose(np.asarray(total), want.sum(0), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(np.asarray(new), want, rtol=1e-6, atol=1e-6)
        cache = new
    # Without donation the cache is a new buffer each call, and the argument keeps its value.
    plain = fa.jit(_cache_step)
    _, again = plain(cache, fa.device_put(np.ones((1, 8), np.float32), wdev), np.int32(0))
    assert again.call_view()[0].buffer is not first and not cache.is_deleted()
    np.testing.assert_allclose(np.asarray(cache), want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("how", ["set", "add", "mul", "min", "max"])
def test_donated_scatter_is_updated_in_place(wdev, how):
    """A scatter into a donated array writes only the updated rows, in place: repeated indices combine in order
    (``set``: the last wins, as the copying kernel), out-of-bounds ones are dropped; against NumPy's ``ufunc.at``
    in float64, with one and two scattered axes."""
    rng = np.random.default_rng(7)
    x = rng.uniform(0.5, 1.5, (6, 5, 3)).astype(np.float32)
    rows = np.asarray([4, 1, 4, 9, 0, 1], np.int32)             # 4 and 1 twice; 9 out of bounds
    cols = np.asarray([2, 0, 2, 1, 4, 3], np.int32)
    u1 = rng.uniform(0.5, 1.5, (6, 5, 3)).astype(np.float32)
    u2 = rng.uniform(0.5, 1.5, (6, 3)).astype(np.float32)
    ufunc = {"add": np.add, "mul": np.multiply, "min": np.minimum, "max": np.maximum}.get(how)
    for index, u in (((rows,), u1), ((rows, cols), u2)):
        f = fa.jit(lambda a, i, v, index=index: getattr(a.at[i if len(index) == 1 else (i, index[1])], how)(v),
                   donate_argnums=0)
        a = fa.device_put(x, wdev)
        before = a.call_view()[0].buffer
        got = f(a, index[0], u)
        assert a.is_deleted() and got.call_view()[0].buffer is before
        want = x.astype(np.float64)
        keep = index[0] < x.shape[0]
        where = tuple(i[keep] for i in index)
        if ufunc is None:
            want[where] = u[keep].astype(np.float64)            # the repeated rows' last update wins
        else:
            ufunc.at(want, where, u[keep].astype(np.float64))
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-6)
