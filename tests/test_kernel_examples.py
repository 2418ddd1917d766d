"""``examples/kernels/``: each Pallas kernel against fnarray's own operations on every device (its own kernel
with ``fallback="error"``, mlx through the interpreter), and exported to a web page run in headless Chromium
(the pattern and fixtures of ``tests/test_browser.py``)."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

import fnarray as fa
import fnarray.numpy as fnp

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples"))
from kernels import flash_attention, histogram, layer_norm, matmul, quantized_matvec, softmax, vector_add  # noqa: E402
from test_pallas import own_kernels  # noqa: E402

rng = np.random.default_rng(290)


def _f32(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def _qmv_inputs():
    w, s, b = (np.asarray(a) for a in fa.quantize(_f32(32, 256), group_size=64, bits=4))
    return _f32(256), w, s, b


def _qmv_reference(x, w, s, b):
    return fa.quantized_matmul(x, w, s, b, transpose=True, group_size=64, bits=4)


def _histogram_inputs():
    return rng.integers(0, 12, 320).astype(np.int32), rng.integers(0, 5, 12).astype(np.int32)


def _histogram_reference(x, counts):
    return counts + fnp.sum((x[:, None] == fnp.arange(counts.shape[0], dtype=fnp.int32)[None, :]).astype(fnp.int32),
                            axis=0)


#: name: (kernel function, fnarray's own computation, inputs, tolerance)
EXAMPLES = {
    "vector_add": (vector_add.vector_add, lambda x, y: x + y, lambda: (_f32(1000), _f32(1000)), 1e-6),
    "softmax": (softmax.softmax, lambda x: fa.nn.softmax(x, axis=-1), lambda: (_f32(16, 40) * 3,), 1e-6),
    "layer_norm": (layer_norm.layer_norm, layer_norm.reference, lambda: (_f32(16, 48), _f32(48), _f32(48)), 2e-5),
    "matmul": (lambda x, y: matmul.matmul(x, y, 16, 16, 16), lambda x, y: x @ y, lambda: (_f32(64, 48), _f32(48, 32)),
               2e-5),
    "flash_attention": (flash_attention.flash_attention, flash_attention.reference,
                        lambda: (_f32(2, 32, 8), _f32(2, 32, 8), _f32(2, 32, 8)), 2e-5),
    "quantized_matvec": (quantized_matvec.quantized_matvec, _qmv_reference, _qmv_inputs, 1e-4),
    "histogram": (histogram.histogram, _histogram_reference, _histogram_inputs, 0),
    "column_sums": (histogram.column_sums, lambda x, init: init + fnp.sum(x, axis=0),
                    lambda: (_f32(48, 40), _f32(40)), 2e-5),
}


@pytest.mark.parametrize("name", list(EXAMPLES))
def test_example_matches_fnarray_ops(name, device):
    kernel, ref, make, tol = EXAMPLES[name]
    args = [fa.device_put(a, device) for a in make()]
    want = np.asarray(ref(*[fa.device_put(np.asarray(a), "numpy:0") for a in args]))
    with own_kernels(device):
        got = np.asarray(kernel(*args))
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def test_softmax_backward_kernel_matches_fnarray_grad(device):
    x, w = _f32(8, 24), _f32(8, 24)
    want = np.asarray(fa.grad(lambda v: fnp.sum(fa.nn.softmax(v, axis=-1) * w))(x))
    with own_kernels(device):
        got = np.asarray(fa.grad(lambda v: fnp.sum(softmax.softmax(v) * fa.device_put(w, device)))(
            fa.device_put(x, device)))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_example_scripts_run():
    """Each example's command line (on numpy:0) prints its error against fnarray's operations."""
    import io
    from contextlib import redirect_stdout
    for mod in (vector_add, softmax, layer_norm, matmul, flash_attention, quantized_matvec, histogram):
        out = io.StringIO()
        with redirect_stdout(out):
            mod.main(["--device", "numpy:0"])
        assert "error" in out.getvalue(), mod.__name__


# ------------------------------------------------------------------------------------------- in the browser

BROWSER = ("flash_attention", "softmax", "quantized_matvec", "histogram", "column_sums")


@pytest.mark.parametrize("wg", [8, 16, 64])
def test_flash_attention_head_size_32(device, wg):
    """The benchmark's shape class (head size 32, 16 x 16 blocks) at several work-group sizes: the phases of the
    key loop without bounds tests or with them, and the barriers ``barriers.prune_barriers`` keeps (PoCL 3.0 and
    3.1 miscompiled a bounds-tested phase followed by a loop in one barrier region: docs/internals.md)."""
    if device.backend not in ("opencl", "webgpu"):
        pytest.skip("work-group sizes are a kernel backend's")
    import functools
    import math
    import fnarray.experimental.pallas as pl
    q, k, v = _f32(2, 64, 32), _f32(2, 64, 32), _f32(2, 64, 32)
    qspec = pl.BlockSpec((None, 16, 32), lambda hh, i: (hh, i, 0))
    kvspec = pl.BlockSpec((None, 64, 32), lambda hh, i: (hh, 0, 0))
    f = pl.pallas_call(functools.partial(flash_attention.flash_kernel, bk=16, scale=1 / math.sqrt(32)),
                       out_shape=pl.ShapeDtypeStruct(q.shape, q.dtype), grid=(2, 4), in_specs=[qspec, kvspec, kvspec],
                       out_specs=qspec, compiler_params={"workgroup": wg})
    want = np.asarray(flash_attention.reference(q, k, v))
    with own_kernels(device):
        got = np.asarray(fa.jit(f)(*[fa.device_put(a, device) for a in (q, k, v)]))
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("params", [{"rows": True}, {"rows": False}, {"stage": True, "rows": False}])
def test_flash_attention_row_mode(device, params):
    """``compiler_params={"rows": True}``: one work item per query row, each row's scores, maxima, sums and
    output in the item's private arrays, no barrier (the default on lavapipe); ``False`` the shared form. Both
    against the unfused reference on every device; on opencl/webgpu the rendered kernel has no barrier in row
    mode. ``{"stage": True}``: ``k.T`` staged in work-group memory (the choice on PoCL 3.1)."""
    import functools
    import math
    import fnarray.experimental.pallas as pl
    q, k, v = _f32(2, 64, 32), _f32(2, 64, 32), _f32(2, 64, 32)
    qspec = pl.BlockSpec((None, 16, 32), lambda hh, i: (hh, i, 0))
    kvspec = pl.BlockSpec((None, 64, 32), lambda hh, i: (hh, 0, 0))
    f = pl.pallas_call(functools.partial(flash_attention.flash_kernel, bk=16, scale=1 / math.sqrt(32)),
                       out_shape=pl.ShapeDtypeStruct(q.shape, q.dtype), grid=(2, 4), in_specs=[qspec, kvspec, kvspec],
                       out_specs=qspec, compiler_params=params)
    want = np.asarray(flash_attention.reference(q, k, v))
    args = [fa.device_put(a, device) for a in (q, k, v)]
    with own_kernels(device):
        got = np.asarray(fa.jit(f)(*args))
        text = fa.jit(f).lower(*args).as_text() if device.backend in ("opencl", "webgpu") else None
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)
    if text is not None:
        assert ("arrier(" not in text) == bool(params.get("rows")), text[-3000:]


def test_flash_attention_past_work_group_memory_in_row_mode():
    """64-row query blocks of head size 32 need more than WebGPU's 16 KiB of work-group memory in the shared form
    (their output, scores and weights); on a CPU WebGPU adapter (lavapipe) row mode holds them in each work
    item's private arrays, so the kernel runs there instead of being refused."""
    devs = [d for d in fa.devices(all_backends=True) if d.backend == "webgpu"
            and not d.impl.capabilities(d).tiling_pays]
    if not devs:
        pytest.skip("no CPU WebGPU adapter")
    q, k, v = _f32(1, 128, 32), _f32(1, 128, 32), _f32(1, 128, 32)
    want = np.asarray(flash_attention.reference(q, k, v))
    args = [fa.device_put(a, devs[0]) for a in (q, k, v)]
    with own_kernels(devs[0]):
        got = np.asarray(fa.jit(lambda a, b, c: flash_attention.flash_attention(a, b, c, bq=64, bk=16))(*args))
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)


def test_flash_attention_key_loop_barriers():
    """On a CPU OpenCL device the key loop of the flash-attention example keeps 4 barriers (the scores, their
    row maxima, the weights and rescaling factors, the weighted values; 5 where ``k.T`` is staged) and the
    carries are updated in place: 10 before ``barriers.prune_barriers`` and the in-place carries."""
    devs = [d for d in fa.devices(all_backends=True) if d.backend == "opencl"]
    if not devs or devs[0].impl.capabilities(devs[0]).matmul_tiling != "register":
        pytest.skip("no CPU OpenCL device")
    args = [fa.device_put(_f32(2, 64, 32), devs[0]) for _ in range(3)]
    with own_kernels(devs[0]):
        text = fa.jit(flash_attention.flash_attention).lower(*args).as_text()
    loop = text[text.index("for (int it"):]
    loop = loop[:loop.index("\n    }\n")]
    # PoCL with LLVM >= 15 (PoCL 3.1) stages k.T first (``_pallas_cost``): one phase and barrier more
    staged = dict(devs[0].impl.capabilities(devs[0]).tuning_facts).get("llvm", 0) >= 15
    assert loop.count("barrier(") == 4 + staged, loop
    assert "if (" not in loop   # no per-item branch (all phases divide among the 8 work items)


@pytest.fixture(scope="module")
def kernel_bundles(wdev, site):  # noqa: F811 (the fixtures imported below)
    root, _ = site
    out = {}
    for name in BROWSER:
        kernel, _, make, _ = EXAMPLES[name]
        args = make()
        out[name] = (fa.export.webgpu(kernel, *args, path=root / f"kernel_{name}"), args)
    return out


@pytest.mark.parametrize("name", BROWSER)
def test_example_kernel_in_chromium(page, kernel_bundles, name):  # noqa: F811
    from test_browser import _inputs
    kernel, ref, _, tol = EXAMPLES[name]
    manifest, args = kernel_bundles[name]
    got = page.evaluate("([dir, inputs]) => window.runBundle(dir, inputs)",
                        [f"kernel_{name}", _inputs(manifest, kernel, args, ())])
    want = np.asarray(ref(*[fa.device_put(a, "numpy:0") for a in args]))
    np.testing.assert_allclose(np.asarray(got[0]).reshape(want.shape), want, rtol=tol, atol=max(tol, 3e-5))



def test_revisited_block_in_chromium(page, site, wdev):  # noqa: F811
    """A bundle (``fa.export.webgpu``) of a kernel whose instances share output blocks along two axes (``o = o *
    0.5 + x``, ``tests/test_pallas.py``'s ``_decay_call``: the grid's order matters) runs them in order in the
    browser too: NumPy's float64 loop over the grid."""
    from test_browser import _inputs
    from test_pallas import _decay_call, _decay_loop
    grid, out_map, x_map = (3, 8), (lambda i, k: (0, 0)), (lambda i, k: (i * 8 + k, 0, 0))
    x, c = _f32(24, 16, 64), _f32(16, 64)
    f = _decay_call(grid, out_map, x_map, 16, 64, 1)
    manifest = fa.export.webgpu(f, x, c, path=site[0] / "kernel_revisited")
    got = page.evaluate("([dir, inputs]) => window.runBundle(dir, inputs)",
                        ["kernel_revisited", _inputs(manifest, f, (x, c), ())])
    want = _decay_loop(x, c, grid, out_map, x_map, 16)
    np.testing.assert_allclose(np.asarray(got[0]).reshape(want.shape), want, rtol=1e-5, atol=1e-5)

# The browser fixtures of tests/test_browser.py (one Chromium for the module, bundles served from 127.0.0.1).
from test_browser import browser, page, site, wdev  # noqa: E402, F401



def test_quantized_matvec_reads_lanes(device):
    """The 4-bit matvec example (8 rows per work item, ``_joint_reduce``) against a float64 NumPy reference
    (words unpacked by hand); its OpenCL C on a CPU device reads ``x`` and the packed words as ``float4``/``uint4``
    lanes (``.s0`` ... ``.s3``; ``_lane_load``) where PoCL compiles with LLVM 15 or later (the scheduler option
    ``lane_vec4``), else one element per load, with 32-bit ``(int)base + c`` addresses in the loop (``_base32``)
    either way; on a CPU WebGPU adapter as ``vec4`` lanes."""
    x = _f32(512)
    w, s, b = (np.asarray(a) for a in fa.quantize(_f32(64, 512), group_size=64, bits=4))
    q = (w[:, :, None] >> (4 * np.arange(8, dtype=np.uint32))) & 15
    deq = q.reshape(64, 512) * np.repeat(s.astype(np.float64), 64, 1) + np.repeat(b.astype(np.float64), 64, 1)
    want = deq @ x.astype(np.float64)
    args = [fa.device_put(a, device) for a in (x, w, s, b)]
    f = fa.jit(quantized_matvec.quantized_matvec)
    with own_kernels(device):
        got = np.asarray(f(*args))
        text = f.lower(*args).as_text() if device.backend in ("opencl", "webgpu") else ""
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3 * np.abs(want).max())
    caps = device.impl.capabilities(device) if text else None
    if caps is not None and device.backend == "opencl" and caps.matmul_tiling == "register":
        facts = dict(caps.tuning_facts)
        lanes = facts.get("compiler") == "pocl" and facts.get("llvm", 0) >= 15
        loop = text[text.index("for ("):]
        assert ("const float4 " in loop and "const uint4 " in loop and ".s3;" in loop) == lanes
        assert "long" not in loop[:loop.index("acc")] and "((int)((t" in loop
    elif caps is not None and device.backend == "webgpu" and not caps.tiling_pays:
        assert "vec4<f32>" in text and "vec4<u32>" in text
