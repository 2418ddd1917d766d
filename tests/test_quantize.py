"""Quantization in MLX's formats (``"affine"``, ``"mxfp4"``, ``"mxfp8"``, ``"nvfp4"``): ``fa.quantize``,
``fa.dequantize``, ``fa.quantized_matmul`` against MLX.

MLX (``mlx.core``) is the oracle: the packed words, scales and biases must be bit-identical to
``mx.quantize``'s and ``dequantize`` to ``mx.dequantize``'s on every device; ``quantized_matmul`` within float
tolerance of ``mx.quantized_matmul`` (``dequantize`` within an ulp of the weights' magnitude where the compiler
fuses ``scale * q + bias`` into one multiply-add: XLA does). opencl and webgpu run with ``fallback="error"``,
so what is tested there is their own kernels (``lowering/kernels/groups/quantized.py``). Gradients with
respect to ``x`` are checked against central finite differences of the float64 product with the dequantized
weights, ``vmap`` against a Python loop.

Tiers (docs/design.md, "Testing"): the bits x group size (x orientation) matrices run whole on numpy:0; on every
other device they are the parity tier (``@pytest.mark.parity_subset(keep=_parity_case)``): every bits value in both
orientations, with the group size turning with the bits, so each group size meets each orientation and the decode
(1-3 rows) and prefill (37 rows) shapes run on every device; mlx stays the oracle of every case.
"""

from __future__ import annotations

import functools
import gc
import itertools
import re
import warnings

import numpy as np
import pytest

import fnarray as fa

from helpers import kernel_capabilities
import fnarray.numpy as fnp
from fnarray.core.errors import DTypeError, ShapeError
from tests.helpers import fallback_mode

mx = pytest.importorskip("mlx.core", reason="MLX is the oracle of these tests (pip install 'mlx[cpu]')")

BITS = (1, 2, 3, 4, 5, 6, 8)
GROUP_SIZES = (32, 64, 128)


def _parity_case(bits, gs, transpose=True, **_):
    """Whether a case of a bits x group size (x transpose) matrix runs outside numpy:0 (the parity tier): each
    ``bits`` value once per orientation, the group size turning with it (32, 64, 128, 32, ... for ``transpose=True``
    and shifted by one for ``False``): 7 of 21 cases, 14 of 42."""
    return gs == GROUP_SIZES[(BITS.index(bits) + (not transpose)) % len(GROUP_SIZES)]


@pytest.fixture
def on(device):
    """The device, with ``fallback="error"`` where it has kernels of its own (opencl, webgpu)."""
    mode = "error" if device.backend in ("opencl", "webgpu") else fa.config.fallback
    with fallback_mode(mode):
        yield device


def _weights(rows, cols, gs, seed=0):
    """Random weights with an all-zero group and an all-positive one (the format's two special cases)."""
    w = np.random.default_rng(seed).standard_normal((rows, cols)).astype(np.float32)
    w[0, :gs] = 0.0
    w[1, :gs] = np.abs(w[1, :gs])
    w[-1, -gs:] = -np.abs(w[-1, -gs:])
    return w


def _mlx(*arrays):
    return [mx.array(np.asarray(a)) for a in arrays]


@pytest.mark.parity_subset(keep=_parity_case)
@pytest.mark.parametrize("gs", GROUP_SIZES)
@pytest.mark.parametrize("bits", BITS)
def test_quantize_and_dequantize_are_bit_identical_to_mlx(on, bits, gs):
    w = _weights(4, 256, gs, seed=bits * gs)
    want = mx.quantize(mx.array(w), group_size=gs, bits=bits)
    got = fa.jit(functools.partial(fa.quantize, group_size=gs, bits=bits))(fa.device_put(w, on))
    for g, m, name in zip(got, want, ("w_q", "scales", "biases"), strict=True):
        assert g.dtype == np.dtype(str(m.dtype).split(".")[-1]), name
        np.testing.assert_array_equal(np.asarray(g), np.array(m), err_msg=name)
    back = np.asarray(fa.jit(functools.partial(fa.dequantize, group_size=gs, bits=bits))(*got))
    want_back = np.array(mx.dequantize(*want, group_size=gs, bits=bits))
    if on.backend in ("numpy", "mlx"):
        np.testing.assert_array_equal(back, want_back)
    else:
        # XLA and the OpenCL/WGSL compilers may contract scale * q + bias into one fused multiply-add.
        np.testing.assert_allclose(back, want_back, rtol=0, atol=2 * np.finfo(np.float32).eps * np.abs(w).max())


@pytest.mark.parity_subset(keep=_parity_case)
@pytest.mark.parametrize("transpose", [True, False])
@pytest.mark.parametrize("gs", GROUP_SIZES)
@pytest.mark.parametrize("bits", BITS)
def test_quantized_matmul_matches_mlx(on, bits, gs, transpose):
    rng = np.random.default_rng(bits + gs)
    w_q, scales, biases = mx.quantize(mx.array(_weights(8, 256, gs)), group_size=gs, bits=bits)
    k = 256 if transpose else 8
    qmm = fa.jit(functools.partial(fa.quantized_matmul, transpose=transpose, group_size=gs, bits=bits))
    args = [fa.device_put(np.array(a), on) for a in (w_q, scales, biases)]
    for shape in ((k,), (3, k), (2, 3, k)):   # one row (decode), a few, and a batch past one work item's rows
        x = rng.standard_normal(shape).astype(np.float32)
        want = np.array(mx.quantized_matmul(mx.array(x), w_q, scales, biases, transpose=transpose,
                                            group_size=gs, bits=bits))
        got = qmm(fa.device_put(x, on), *args)
        assert got.shape == want.shape and got.dtype == np.float32
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=2e-5 * np.sqrt(k))


@pytest.mark.parity_subset(keep=_parity_case)
@pytest.mark.parametrize("transpose", [True, False])
@pytest.mark.parametrize("gs", GROUP_SIZES)
@pytest.mark.parametrize("bits", BITS)
def test_prefill_rows_match_the_float64_reference(on, bits, gs, transpose):
    """Many rows of ``x`` (a prompt's prefill): on opencl and webgpu both forms take a tiled kernel:
    ``transpose=True`` with the weights laid out in panels of 16 columns (37 rows and 40 columns are not whole
    tiles), ``transpose=False`` reading panels of 16 or 32 columns (1, 3, 5 bits) in place, over 43 rows of ``W``
    (not a whole number of the 4 rows per statement); both against NumPy in float64 on the dequantized weights,
    with ``fallback="error"``."""
    rng = np.random.default_rng(bits * gs + transpose)
    rows = 40 if transpose else 43
    w_q, scales, biases = (np.asarray(a) for a in fa.quantize(_weights(rows, 256, gs), group_size=gs, bits=bits))
    wd = np.asarray(fa.dequantize(w_q, scales, biases, group_size=gs, bits=bits), np.float64)
    x = rng.standard_normal((37, 256 if transpose else rows)).astype(np.float32)
    want = x.astype(np.float64) @ (wd.T if transpose else wd)
    qmm = fa.jit(functools.partial(fa.quantized_matmul, transpose=transpose, group_size=gs, bits=bits))
    got = qmm(*(fa.device_put(a, on) for a in (x, w_q, scales, biases)))
    assert got.shape == want.shape and got.dtype == np.float32
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=2e-5 * np.sqrt(x.shape[-1]))


@pytest.mark.parametrize("bits", (3, 4, 8))
def test_decode_rows_in_every_shape_of_work_item(on, bits):
    """The affine matrix-vector form (``transpose=True``, 1 to 4 rows) with each rows x columns per work item
    (``quantized.WIDE_SHAPE`` forced; 40 columns are not whole blocks of 8 or 16, 3 rows not a whole block of 2
    or 4), against NumPy in float64 on the dequantized weights, with ``fallback="error"``; one form's kernels per
    device (``WIDE_SHAPE`` is read when the program is scheduled, so each shape gets a new ``jit``). 3 bits (words
    crossed) runs 1, 3 and 4 rows of ``x`` in each shape; 4 and 8 bits (whole words, vector reads) 3 and 4 rows (a
    work item takes ``min(rows, m)`` rows: one row of ``x`` repeats the one-row shape, which 3 rows run too)."""
    if on.backend not in ("opencl", "webgpu"):
        pytest.skip("the kernel backends' matrix-vector form")
    from fnarray.lowering.kernels.groups import quantized as Q
    rng = np.random.default_rng(bits)
    w_q, scales, biases = (np.asarray(a) for a in fa.quantize(_weights(40, 256, 64), group_size=64, bits=bits))
    wd = np.asarray(fa.dequantize(w_q, scales, biases, group_size=64, bits=bits), np.float64)
    args = [fa.device_put(a, on) for a in (w_q, scales, biases)]
    for shape in ({"rows": 1, "cols": 4}, {"rows": 2, "cols": 16}, {"rows": 4, "cols": 8}):
        for m in (1, 3, 4) if bits == 3 else (3, 4):
            x = rng.standard_normal((m, 256)).astype(np.float32)
            qmm = fa.jit(lambda x, *p: fa.quantized_matmul(x, *p, group_size=64, bits=bits))
            Q.WIDE_SHAPE = shape
            try:
                got = np.asarray(qmm(fa.device_put(x, on), *args))
                names = [k.name for k in qmm.lower(fa.device_put(x, on), *args).kernels()]
            finally:
                Q.WIDE_SHAPE = None
            assert len(names) == 1 and names[0].startswith("quantized_quantized_matmul"), names
            np.testing.assert_allclose(got, x.astype(np.float64) @ wd.T, rtol=1e-5, atol=2e-5 * 16,
                                       err_msg=f"{shape} {m} rows")


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_quantized_matmul_half_precision(on, dtype):
    """float16/bfloat16 weights and inputs: scales of that dtype bit-identical to MLX's, a result of that dtype
    accumulated in float32 (MLX's CPU kernel sums in the half type: it is compared to float64 instead)."""
    import ml_dtypes
    dt = np.dtype(ml_dtypes.bfloat16) if dtype == "bfloat16" else np.dtype(np.float16)
    try:
        fa.device_put(np.ones(2, dt), on) * 2
    except fa.UnsupportedOnDevice as e:
        # float16 needs shader-f16 / cl_khr_fp16 (hardware this machine lacks); OpenCL C and WGSL have no bfloat16.
        pytest.skip(f"{on} has no {dtype} kernels: {e}")
    w = _weights(8, 128, 64).astype(dt)
    x = np.random.default_rng(1).standard_normal((2, 128)).astype(dt)
    w_q, scales, biases = mx.quantize(mx.array(w.astype(np.float32)).astype(getattr(mx, dtype)), group_size=64,
                                      bits=4)
    mine = fa.quantize(fa.device_put(w, on), group_size=64, bits=4)
    for g, m in zip(mine, (w_q, scales, biases), strict=True):
        np.testing.assert_array_equal(np.asarray(g).astype(np.float64) if g.dtype != np.uint32 else np.asarray(g),
                                      np.array(m.astype(mx.float32) if m.dtype != mx.uint32 else m))
    got = fa.quantized_matmul(fa.device_put(x, on), *mine, group_size=64, bits=4)
    assert got.dtype == dt
    want = _float64_product(x, *mine, 64, 4, True)
    tol = 2 * float(ml_dtypes.finfo(dt).eps) * np.abs(want).max()
    np.testing.assert_allclose(np.asarray(got).astype(np.float64), want, rtol=0, atol=tol)


def _float64_product(x, w_q, scales, biases, gs, bits, transpose):
    wd = np.asarray(fa.dequantize(w_q, scales, biases, group_size=gs, bits=bits), np.float64)
    return np.asarray(x, np.float64) @ (wd.T if transpose else wd)


@pytest.mark.parametrize("transpose", [True, False])
@pytest.mark.parametrize("bits", [3, 4])
def test_grad_wrt_x_matches_finite_differences(on, bits, transpose):
    gs = 32
    rng = np.random.default_rng(7)
    w_q, scales, biases = fa.quantize(_weights(6, 64, gs), group_size=gs, bits=bits)
    k = 64 if transpose else 6
    x = rng.standard_normal((2, k)).astype(np.float32)
    cot = rng.standard_normal((2, 6 if transpose else 64))
    args = [fa.device_put(a, on) for a in (w_q, scales, biases)]

    def loss(x):
        y = fa.quantized_matmul(x, *args, transpose=transpose, group_size=gs, bits=bits)
        return fnp.sum(y * fnp.asarray(cot.astype(np.float32)) ** 2)

    got = np.asarray(fa.jit(fa.grad(loss))(fa.device_put(x, on)))
    eps = 1e-3
    want = np.zeros_like(x, np.float64)
    for i in np.ndindex(x.shape):
        up, down = x.astype(np.float64), x.astype(np.float64)
        up[i] += eps
        down[i] -= eps
        f = [np.sum(_float64_product(v, w_q, scales, biases, gs, bits, transpose) * cot ** 2) for v in (up, down)]
        want[i] = (f[0] - f[1]) / (2 * eps)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_jvp_is_the_product_of_the_tangent(on):
    w_q, scales, biases = fa.quantize(_weights(8, 64, 32), group_size=32, bits=4)
    args = [fa.device_put(a, on) for a in (w_q, scales, biases)]
    x, t = np.random.default_rng(3).standard_normal((2, 2, 64)).astype(np.float32)
    f = functools.partial(fa.quantized_matmul, group_size=32, bits=4)
    y, ty = fa.jvp(lambda x: f(x, *args), (fa.device_put(x, on),), (fa.device_put(t, on),))
    np.testing.assert_allclose(np.asarray(ty), np.asarray(f(t, w_q, scales, biases)), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("in_axes", [0, 1])
def test_vmap_over_x_matches_a_loop(on, in_axes):
    w_q, scales, biases = fa.quantize(_weights(8, 64, 32), group_size=32, bits=6)
    args = [fa.device_put(a, on) for a in (w_q, scales, biases)]
    x = np.random.default_rng(4).standard_normal((3, 64) if in_axes == 0 else (64, 3)).astype(np.float32)

    def f(xi):
        return fa.quantized_matmul(xi, *args, group_size=32, bits=6)

    got = fa.vmap(f, in_axes=in_axes)(fa.device_put(x, on))
    want = np.stack([np.asarray(f(np.take(x, i, axis=in_axes))) for i in range(3)])
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)


def test_grad_wrt_the_quantized_weights_raises_naming_dequantize():
    w_q, scales, biases = fa.quantize(_weights(4, 64, 32), group_size=32, bits=4)
    x = np.ones((1, 64), np.float32)
    with pytest.raises(TypeError, match="dequantize"):
        fa.grad(lambda s: fnp.sum(fa.quantized_matmul(x, w_q, s, biases, group_size=32, bits=4)))(scales)
    with pytest.raises(TypeError, match="dequantize"):
        fa.grad(lambda b: fnp.sum(fa.quantized_matmul(x, w_q, scales, b, group_size=32, bits=4)))(biases)
    with pytest.raises(NotImplementedError, match="dequantize"):
        fa.vmap(lambda s: fa.quantized_matmul(x, w_q, s, biases, group_size=32, bits=4))(fnp.stack([scales] * 2))
    with pytest.raises(DTypeError, match="uint32.*fnarray.dequantize"):   # the words: grad's integer check says it
        fa.grad(lambda w: fnp.sum(fa.quantized_matmul(x, w, scales, biases, group_size=32, bits=4)))(w_q)
    # The way the message names: through the float weights, d/dscale of sum(x @ (scale * q + bias).T) is sum(x * q).
    g = fa.grad(lambda s: fnp.sum(x @ fa.dequantize(w_q, s, biases, group_size=32, bits=4).T))(scales)
    q = (np.asarray(fa.dequantize(w_q, fnp.ones_like(scales), fnp.zeros_like(biases), group_size=32, bits=4)))
    np.testing.assert_allclose(np.asarray(g), q.reshape(4, 2, 32).sum(-1), rtol=1e-6)


def test_jax_program_keeps_the_packed_weights_as_its_only_weight_input():
    jax_devices = fa.devices("jax")
    if not jax_devices:
        pytest.skip("backend unavailable: jax (pip install jax)")
    w_q, scales, biases = fa.quantize(_weights(64, 256, 64), group_size=64, bits=4)
    x = np.ones((1, 256), np.float32)
    text = fa.jit(fa.quantized_matmul, device=jax_devices[0]).lower(x, w_q, scales, biases).as_text()
    header = next(line for line in text.splitlines() if "func.func public @main" in line)
    assert "tensor<64x32xui32>" in header            # the packed words go in as they are
    assert "tensor<64x256xf32>" not in header         # no float weights in the inputs
    assert "tensor<64x4xf32>" in header               # scales and biases


@pytest.mark.parametrize("mode,rows", [("affine", 1), ("affine", 3), ("mxfp4", 2), ("mxfp8", 4), ("nvfp4", 3)])
def test_jax_decode_rows_fuse_the_unpacking_into_the_product(mode, rows):
    """XLA's optimised program for a decode step (up to ``DECODE_ROWS`` rows) holds no float weight matrix
    between its fusions: each row's product is one loop fusion reading the packed words
    (``lowering/jax/quantized.py``; before, a fusion wrote ``f32[64,256]`` on every call, and for the floating
    modes at several rows the gathered element values, which every row read, until the tenth session decoded
    them by bit arithmetic)."""
    import re
    jax = pytest.importorskip("jax")
    from fnarray.lowering.jax.quantized import DECODE_ROWS, jax_quantized_matmul
    assert rows <= DECODE_ROWS
    opts = dict(group_size=64, bits=4) if mode == "affine" else {}
    group_size, bits = fa.core.quantized.check_format(opts.get("group_size"), opts.get("bits"), mode)
    parts = [np.asarray(a) for a in fa.quantize(_weights(64, 256, group_size), mode=mode, **opts)]
    x = np.random.default_rng(0).standard_normal((rows, 256)).astype(np.float32)
    f = jax.jit(functools.partial(jax_quantized_matmul, transpose=True, group_size=group_size, bits=bits,
                                  mode=mode))
    hlo = f.lower(x, *parts).compile().as_text()
    entry = hlo[hlo.index("ENTRY"):]
    for line in entry.splitlines():
        shape = re.search(r"= f32\[([\d,]*)\]", line)
        if shape and "parameter(" not in line:   # only outputs, at most the scales' values (64 x 16 for nvfp4)
            assert np.prod([int(d) for d in shape.group(1).split(",") if d]) <= 64 * 16, line
    wd = np.asarray(fa.dequantize(*parts, mode=mode, dtype=np.float32, **opts), np.float64)
    np.testing.assert_allclose(np.asarray(f(x, *parts)), x @ wd.T, rtol=1e-5, atol=1e-4)


def _largest_buffers(hlo):
    """``(elements, line)`` of every value the optimised program's entry computation makes (any dtype;
    parameters and tuples left out)."""
    import re
    out = []
    for line in hlo[hlo.index("ENTRY"):].splitlines():
        shape = re.search(r"= [a-z]+[0-9]*\[([\d,]*)\]", line)
        if shape and "parameter(" not in line:
            out.append((int(np.prod([int(d) for d in shape.group(1).split(",") if d])), line))
    return out


def _elements_of(line):
    """The element count of the value an HLO instruction ``line`` makes."""
    import re
    return int(np.prod([int(d) for d in re.search(r"= [a-z]+[0-9]*\[([\d,]*)\]", line).group(1).split(",") if d]))


_DECODE_FORMATS = [("affine", b, g) for b in (2, 3, 4, 5, 6, 8) for g in (32, 64, 128)] + \
    [(m, None, None) for m in ("mxfp4", "mxfp8", "nvfp4")]
#: jax is a parity-tier backend: every bits value and float mode in both orientations, the group size turning
#: with the bits (``_parity_case``), so each group size meets each orientation (18 of the 42 cases).
_DECODE_CASES = [(m, b, g, t) for m, b, g in _DECODE_FORMATS for t in (True, False)
                 if m != "affine" or _parity_case(b, g, t)]


@pytest.mark.parametrize("mode,bits,gs,transpose", _DECODE_CASES)
def test_jax_decode_products_write_no_weight_matrix(mode, bits, gs, transpose):
    """Issue 30: on jax, the unpacking and scaling of a decode product (1-4 rows) are fused by XLA into the
    products: the optimised program makes no value (float or integer) with as many elements as the weights,
    for either orientation, every bits and group size (``transpose=False`` reads words transposed once, a
    ``bits / 32`` share; 3, 5 and 6 bits are unpacked in pieces, where a gather or concatenation of the
    elements was written whole: ``lowering/jax/quantized.py``; ``x @ W.T`` in the affine mode gathers nothing but
    ``x``, spread to the lanes of 3, 5 and 6 bits); the result equals NumPy's float64 product."""
    jax = pytest.importorskip("jax")
    from fnarray.lowering.jax.quantized import jax_quantized_matmul
    group_size, bits = fa.core.quantized.check_format(gs, bits, mode)
    opts = dict(group_size=gs, bits=bits) if mode == "affine" else {}
    n, k = (96, 2 * max(32, group_size) * 3) if transpose else (2 * max(32, group_size) * 3, 96)
    rng = np.random.default_rng(bits + group_size)
    parts = [np.asarray(a) for a in fa.quantize(rng.standard_normal((n, k) if transpose else (k, n))
                                                .astype(np.float32), mode=mode, **opts)]
    wd = np.asarray(fa.dequantize(*parts, mode=mode, dtype=np.float32, **opts), np.float64)
    # x @ W.T of 3, 5 or 6 bits dequantizes first from three rows on (``_dequantize_first``: faster); below,
    # ``x`` alone is spread to its lanes by a gather (``_crossing_rows``: at most twice its size)
    for rows in (1, 2) if transpose and 32 % bits else (1, 3):
        x = rng.standard_normal((rows, k)).astype(np.float32)
        f = jax.jit(functools.partial(jax_quantized_matmul, transpose=transpose, group_size=group_size, bits=bits,
                                      mode=mode))
        text = f.lower(x, *parts).compile().as_text()
        for size, line in _largest_buffers(text):
            assert size < n * k, line
        gathers = [line for line in text.splitlines() if " gather(" in line]
        assert mode != "affine" or not transpose or \
            all(" f32[" in line and _elements_of(line) <= 2 * rows * k for line in gathers), gathers
        np.testing.assert_allclose(np.asarray(f(x, *parts)), x @ (wd.T if transpose else wd), rtol=1e-5,
                                   atol=1e-4)


@pytest.mark.parametrize("transpose", [True, False])
@pytest.mark.parametrize("mode,bits,gs", [("affine", 3, 32), ("mxfp4", None, None)])
def test_jax_prefill_products_dequantize_in_blocks(mode, bits, gs, transpose, monkeypatch):
    """Issue 30: a jax prefill product (more than 4 rows) over weights past ``BLOCKED_WEIGHT_BYTES`` (lowered
    here to 0) dequantizes blocks of ``prefill_block_rows`` weight rows in turn: the compiled program's
    temporaries (XLA's buffer assignment) stay under a quarter of the float weights' bytes where blocks are an
    eighth (whole blocks) and under a half with a shorter last block (134 = 2 x 67 rows, blocks of 20); the
    result equals NumPy's float64 product, batch axes kept, in both orientations."""
    jax = pytest.importorskip("jax")
    from fnarray.lowering.jax import quantized
    group_size, bits = fa.core.quantized.check_format(gs, bits, mode)
    opts = dict(group_size=gs, bits=bits) if mode == "affine" else {}
    monkeypatch.setattr(quantized, "BLOCKED_WEIGHT_BYTES", 0)
    rng = np.random.default_rng(bits + group_size)
    for rows, cols, block, bound in [(128, 128, 16, 4), (134, 128, 20, 2)]:
        monkeypatch.setattr(quantized, "PREFILL_BLOCK_BYTES", block * cols * 4)
        assert quantized.prefill_block_rows(rows, cols * 4) == block
        parts = [np.asarray(a) for a in fa.quantize(rng.standard_normal((rows, cols)).astype(np.float32), mode=mode,
                                                    **opts)]
        wd = np.asarray(fa.dequantize(*parts, mode=mode, dtype=np.float32, **opts), np.float64)
        k = cols if transpose else rows
        x = rng.standard_normal((2, 3, k)).astype(np.float32)
        f = jax.jit(functools.partial(quantized.jax_quantized_matmul, transpose=transpose, group_size=group_size,
                                      bits=bits, mode=mode))
        compiled = f.lower(x, *parts).compile()
        assert compiled.memory_analysis().temp_size_in_bytes < rows * cols * 4 / bound
        assert mode != "affine" or " gather(" not in compiled.as_text()   # mxfp4 looks its scales up
        np.testing.assert_allclose(np.asarray(f(x, *parts)), x @ (wd.T if transpose else wd), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("bits", [3, 6])
def test_jax_prefill_unpacks_crossing_elements_without_gathers(bits):
    """Issue 30: a jax prefill product (more than 4 rows, weights under ``BLOCKED_WEIGHT_BYTES``: one
    dequantization; and ``x @ W.T`` from two rows, ``_dequantize_first``) of 3- or 6-bit words, whose elements
    cross words, unpacks them by static slices and shifts of each 32-element chunk's words (``_elements``): the
    compiled program has no gather (``packed.unpack``'s gathers were written whole before the float weights, 2x
    float32's time at 2048²), in both orientations; the result equals NumPy's float64 product."""
    jax = pytest.importorskip("jax")
    from fnarray.lowering.jax.quantized import jax_quantized_matmul
    rng = np.random.default_rng(bits)
    parts = [np.asarray(a) for a in fa.quantize(rng.standard_normal((96, 128)).astype(np.float32), group_size=32,
                                                bits=bits)]
    wd = np.asarray(fa.dequantize(*parts, group_size=32, bits=bits, dtype=np.float32), np.float64)
    for transpose, rows in [(True, 3), (True, 6), (False, 6)]:
        x = rng.standard_normal((rows, 128 if transpose else 96)).astype(np.float32)
        f = jax.jit(functools.partial(jax_quantized_matmul, transpose=transpose, group_size=32, bits=bits,
                                      mode="affine"))
        text = f.lower(x, *parts).compile().as_text()
        assert " gather(" not in text and " dot(" in text, text
        np.testing.assert_allclose(np.asarray(f(x, *parts)), x @ (wd.T if transpose else wd), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("mode,k,rows", [("affine", 4160, 1), ("affine", 8200, 3), ("mxfp8", 4100, 2)])
def test_jax_long_columns_contractions_fuse(mode, k, rows):
    """``transpose=False`` over a contraction past XLA's 16 KiB fusion limit (any length: no groups along it):
    cut into chunks as ``transpose=True`` is, no value as large as one chunk of float weights, and no dot at the
    top level."""
    jax = pytest.importorskip("jax")
    from fnarray.lowering.jax.quantized import _chunks, jax_quantized_matmul
    opts = dict(group_size=64, bits=4) if mode == "affine" else {}
    group_size, bits = fa.core.quantized.check_format(opts.get("group_size"), opts.get("bits"), mode)
    n = 128
    rng = np.random.default_rng(k)
    parts = [np.asarray(a) for a in fa.quantize(rng.standard_normal((k, n)).astype(np.float32), mode=mode, **opts)]
    x = rng.standard_normal((rows, k)).astype(np.float32)
    f = jax.jit(functools.partial(jax_quantized_matmul, transpose=False, group_size=group_size, bits=bits,
                                  mode=mode))
    chunk = min(b - a for a, b in _chunks(k, 32 if k % 32 == 0 else 1, 4))
    assert chunk * 4 < 16 * 1024 and chunk > k // 4   # near-equal chunks, no short tail
    for size, line in _largest_buffers(f.lower(x, *parts).compile().as_text()):
        assert " dot(" not in line, line
        assert size < n * chunk or " u32[" in line and size < n * k, line   # the words, transposed
    wd = np.asarray(fa.dequantize(*parts, mode=mode, dtype=np.float32, **opts), np.float64)
    np.testing.assert_allclose(np.asarray(f(x, *parts)), x @ wd, rtol=1e-5, atol=1e-3)


def test_jax_transposed_tiles_equal_the_transpose():
    """``transposed`` (the gather in tiles behind ``transpose=False``'s decode products) is ``a.T`` for sides
    with and without a whole tile (16, 96, prime 37 and 1)."""
    jax = pytest.importorskip("jax")
    from fnarray.lowering.jax.quantized import transposed
    for shape in [(16, 16), (96, 40), (37, 12), (1, 5), (256, 96)]:
        a = np.random.default_rng(sum(shape)).integers(0, 2 ** 32, shape, dtype=np.uint32)
        np.testing.assert_array_equal(np.asarray(jax.jit(lambda v: transposed(jax.numpy, v))(a)), a.T)


def test_jax_element_decoders_match_the_tables():
    """The floating modes' element values by bit arithmetic (``e2m1_values``, ``e4m3_values``: through float16,
    whose subnormals XLA's CPU float32 arithmetic would flush) equal ``packed``'s tables bit for bit, every code
    (``-0.0`` and the E4M3 subnormals included; ``0x7F``/``0xFF`` NaN)."""
    jax = pytest.importorskip("jax")
    from jax import lax
    from fnarray.lowering.jax.quantized import e2m1_values, e4m3_values
    from fnarray.lowering.packed import E2M1, E4M3
    for decode, table in [(e2m1_values, E2M1), (e4m3_values, E4M3)]:
        got = np.asarray(jax.jit(lambda c: decode(jax.numpy, lax, c))(np.arange(len(table), dtype=np.uint32)))
        nan = np.isnan(table)
        np.testing.assert_array_equal(np.isnan(got), nan)
        np.testing.assert_array_equal(got.view(np.uint32)[~nan], table.view(np.uint32)[~nan])


@pytest.mark.parametrize("mode,cols,rows", [("affine", 4096, 1), ("affine", 8320, 2), ("mxfp4", 4096, 1),
                                           ("mxfp8", 4160, 1), ("nvfp4", 4096, 3)])
def test_jax_long_contractions_still_fuse(mode, cols, rows):
    """Issue 30: XLA's CPU fusion takes a dot's producers only while its vector is under 16 KiB, so at 4096
    float32 elements the unpacking wrote a transposed float copy of the weights on every call (36-38x float32's
    time at 4096 x 4096). Cut into chunks (``_chunks``), the optimised program's top level holds no dot, no
    transpose and no value as large as one chunk of float weights: every product is a fusion reading the
    packed words."""
    import re
    jax = pytest.importorskip("jax")
    from fnarray.lowering.jax.quantized import _chunks, jax_quantized_matmul
    opts = dict(group_size=64, bits=4) if mode == "affine" else {}
    group_size, bits = fa.core.quantized.check_format(opts.get("group_size"), opts.get("bits"), mode)
    n = 256
    parts = [np.asarray(a) for a in fa.quantize(_weights(n, cols, group_size), mode=mode, **opts)]
    x = np.random.default_rng(1).standard_normal((rows, cols)).astype(np.float32)
    f = jax.jit(functools.partial(jax_quantized_matmul, transpose=True, group_size=group_size, bits=bits,
                                  mode=mode))
    hlo = f.lower(x, *parts).compile().as_text()
    entry = hlo[hlo.index("ENTRY"):]
    chunk = min(b - a for a, b in _chunks(cols, max(32, group_size), 4))
    assert chunk * 4 < 16 * 1024
    for line in entry.splitlines():
        shape = re.search(r"= f32\[([\d,]*)\]", line)
        if "parameter(" in line or not shape:
            continue
        assert " dot(" not in line and "transpose(" not in line, line
        assert np.prod([int(d) for d in shape.group(1).split(",") if d]) < n * chunk, line
    wd = np.asarray(fa.dequantize(*parts, mode=mode, dtype=np.float32, **opts), np.float64)
    np.testing.assert_allclose(np.asarray(f(x, *parts)), x @ wd.T, rtol=1e-5, atol=1e-3)


def test_jax_chunks_cut_whole_groups_under_the_fusion_limit():
    from fnarray.lowering.jax.quantized import _chunks
    assert _chunks(4064, 32, 4) == [(0, 4064)]
    assert _chunks(16, 32, 4) == [(0, 16)]   # nvfp4's one group: less than a step
    assert _chunks(4096, 32, 4) == [(0, 2048), (2048, 4096)]
    assert _chunks(4096, 128, 8) == [(0, 1408), (1408, 2816), (2816, 4096)]
    for k, step, size in [(8320, 64, 4), (11008, 128, 4), (6144, 32, 8), (64, 64, 4)]:
        cuts = _chunks(k, step, size)
        assert cuts[0][0] == 0 and cuts[-1][1] == k and all(a % step == 0 for a, _ in cuts)
        assert all(b0 == a1 for (_, b0), (a1, _) in zip(cuts, cuts[1:]))
        assert all((b - a) * size < 16 * 1024 for a, b in cuts)


def test_errors_name_what_was_given():
    w = np.ones((4, 64), np.float32)
    with pytest.raises(ValueError, match="bits=7"):
        fa.quantize(w, bits=7)
    with pytest.raises(ValueError, match="group_size=16"):
        fa.quantize(w, group_size=16)
    with pytest.raises(ShapeError, match="divisible by group_size=128"):
        fa.quantize(w, group_size=128)
    with pytest.raises(ShapeError, match="at least 2 dimensions"):
        fa.quantize(np.ones(64, np.float32))
    with pytest.raises(DTypeError, match="int32"):
        fa.quantize(np.ones((4, 64), np.int32))
    with pytest.raises(ValueError, match="group_size=32 and bits=4"):
        fa.quantize(w, group_size=64, mode="mxfp4")
    with pytest.raises(ValueError, match="mode='nvfp4' needs group_size=16 and bits=4"):
        fa.quantize(w, group_size=32, mode="nvfp4")
    with pytest.raises(ValueError, match="mode='mxfp8' needs group_size=32 and bits=8"):
        fa.quantize(w, bits=4, mode="mxfp8")
    with pytest.raises(ValueError, match="'int4' is not a quantization mode"):
        fa.quantize(w, mode="int4")
    w_q, scales, biases = fa.quantize(w, group_size=32, bits=4)
    with pytest.raises(ShapeError, match="must be 64"):
        fa.quantized_matmul(np.ones((2, 32), np.float32), w_q, scales, biases, group_size=32, bits=4)
    with pytest.raises(ShapeError, match=r"got \(4, 2\) and \(4, 2\); pass the group_size and bits"):
        fa.quantized_matmul(np.ones((2, 64), np.float32), w_q, scales, biases, group_size=64, bits=4)
    with pytest.raises(DTypeError, match="uint32"):
        fa.quantized_matmul(np.ones((2, 64), np.float32), np.asarray(w_q, np.int32), scales, biases,
                            group_size=32, bits=4)
    with pytest.raises(ShapeError, match="scales and biases.*pass the group_size and bits"):
        fa.dequantize(w_q, scales[:, :1], biases, group_size=32, bits=4)
    stack = r"got shapes \(1, 4, 8\) and \(1, 4, 2\) and \(1, 4, 2\); multiply by each matrix"
    with pytest.raises(ShapeError, match=stack):    # the biases printed as a list
        fa.quantized_matmul(np.ones(64, np.float32), w_q[None], scales[None], biases[None], group_size=32, bits=4)
    with pytest.raises(ShapeError, match=r"got a scalar; pass x of shape \(64,\)"):
        fa.quantized_matmul(np.float32(1), w_q, scales, biases, group_size=32, bits=4)
    for words in (w_q[0], w_q[0, 0]):    # a scalar raised IndexError
        with pytest.raises(ShapeError, match=rf"at least 2 dimensions.*got shape {re.escape(str(words.shape))}"):
            fa.dequantize(words, scales, biases, group_size=32, bits=4)


def test_integer_x_promotes_as_mlx():
    w_q, scales, biases = fa.quantize(_weights(4, 64, 32), group_size=32, bits=8)
    x = np.arange(64, dtype=np.int32)[None] % 5
    got = fa.quantized_matmul(x, w_q, scales, biases, group_size=32, bits=8)
    want = np.array(mx.quantized_matmul(mx.array(x), *_mlx(w_q, scales, biases), group_size=32, bits=8))
    assert got.dtype == want.dtype == np.float32
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("mode", ["mxfp4", "mxfp8", "nvfp4"])
def test_integer_x_in_a_floating_mode_raises_as_mlx(device, mode):
    """The floating modes take a floating ``x`` only, as ``mx.quantized_matmul`` ("Only real floating types are
    supported"); fnarray made an integer or bool ``x`` float32 (on every backend). A float16 ``x`` keeps its
    dtype."""
    w_q, scales = fa.quantize(_weights(4, 64, 32), mode=mode)
    for dt in (np.int32, np.uint8, np.bool_):
        x = np.ones((2, 64), dt)
        with pytest.raises(ValueError, match="floating"):
            mx.quantized_matmul(mx.array(x), mx.array(np.asarray(w_q)), mx.array(np.asarray(scales)), mode=mode)
        with pytest.raises(TypeError) as e:
            fa.jit(lambda x: fa.quantized_matmul(x, w_q, scales, mode=mode), device=device)(x)
        for part in ("quantized_matmul", mode, "floating x", np.dtype(dt).name, "astype"):
            assert part in str(e.value), (part, str(e.value))
    x = np.linspace(-1, 1, 128).reshape(2, 64).astype(np.float16)
    got = fa.jit(lambda x: fa.quantized_matmul(x, w_q, scales, mode=mode), device=device)(x)
    assert got.dtype == np.float16


# ----------------------------------------------------------------------------------------------- fa.nn


class _Net(fa.nn.Module):
    emb: object
    layers: tuple
    head: object

    def __init__(self, key):
        k1, k2, k3, k4 = fa.random.split(key, 4)
        self.emb = fa.nn.Embedding(50, 64, key=k1)
        self.layers = (fa.nn.Linear(64, 128, key=k2), fa.nn.Linear(128, 64, key=k3))
        self.head = fa.nn.Linear(64, 10, key=k4)

    def __call__(self, ids):
        h = self.emb(ids)
        for layer in self.layers:
            h = fa.nn.relu(layer(h))
        return self.head(h)


_IDS = np.array([[1, 2, 3], [4, 5, 39]], np.int32)


def test_nn_quantize_returns_a_new_model_as_mlx_nn_quantize():
    net = _Net(fa.random.key(0))
    seen = []

    def predicate(path, module):
        seen.append(path)
        if not isinstance(module, (fa.nn.Linear, fa.nn.Embedding)):
            return False
        return {"bits": 8} if path == "head" else True

    q = fa.nn.quantize(net, group_size=64, bits=4, class_predicate=predicate)
    assert seen == ["", "emb", "layers.0", "layers.1", "head"]   # MLX's dotted paths
    assert isinstance(q.emb, fa.nn.QuantizedEmbedding) and isinstance(net.emb, fa.nn.Embedding)
    assert [type(m) for m in q.layers] == [fa.nn.QuantizedLinear] * 2 and (q.layers[0].bits, q.head.bits) == (4, 8)
    # The quantized model is the float model with dequantized weights, layer by layer.
    h = q.emb(_IDS)
    h_ref = fa.dequantize(q.emb.weight, q.emb.scales, q.emb.biases, group_size=64, bits=4)[_IDS]
    np.testing.assert_array_equal(np.asarray(h), np.asarray(h_ref))
    for layer, fl in zip(q.layers, net.layers, strict=True):
        wd = np.asarray(fa.dequantize(layer.weight, layer.scales, layer.biases, group_size=64, bits=4))
        want = np.asarray(h) @ wd.T + np.asarray(fl.bias)
        h = layer(h)
        np.testing.assert_allclose(np.asarray(h), want, rtol=1e-5, atol=1e-5)
        h = fa.nn.relu(h)
    # Default predicate: every Linear/Embedding whose rows split into groups (the head's 64 does, at 64).
    q2 = fa.nn.quantize(net, group_size=128, bits=4)
    assert isinstance(q2.layers[1], fa.nn.QuantizedLinear) and isinstance(q2.head, fa.nn.Linear)
    np.testing.assert_array_equal(np.asarray(fa.jit(lambda m, i: m(i))(q, _IDS)), np.asarray(q(_IDS)))


def test_nn_quantize_takes_mlx_style_predicates():
    """MLX asks its predicate of leaf modules only: a predicate accepting every module quantizes the layers
    (containers and the functions Sequential wraps are walked past); a selected leaf without a quantized form
    raises."""
    k1, k2, k3 = fa.random.split(fa.random.key(1), 3)
    seq = fa.nn.Sequential([fa.nn.Embedding(40, 64, key=k1), fa.nn.Linear(64, 32, key=k2), fa.nn.relu,
                            fa.nn.Linear(32, 8, key=k3)])
    q = fa.nn.quantize(seq, group_size=32, class_predicate=lambda p, m: {"bits": 8})
    assert [type(m).__name__ for m in q.layers] == ["QuantizedEmbedding", "QuantizedLinear", "Lambda",
                                                    "QuantizedLinear"]
    assert [m.bits for m in q.layers if hasattr(m, "bits")] == [8, 8, 8]
    with pytest.raises(TypeError, match="LayerNorm"):
        fa.nn.quantize(fa.nn.Sequential([fa.nn.Linear(64, 8, key=k1), fa.nn.LayerNorm(8)]), group_size=64,
                       class_predicate=lambda p, m: True)


@pytest.mark.parametrize("mode,opts", [("affine", dict(group_size=32, bits=3)), ("affine", {}), ("mxfp4", {}),
                                       ("nvfp4", {})])
def test_to_quantized_is_what_nn_quantize_does_and_mlx_to_quantized(mode, opts):
    """``Linear.to_quantized``/``Embedding.to_quantized`` (``mlx.nn``'s methods) give what ``fa.nn.quantize``
    gives the same layer, field for field, and MLX's own ``to_quantized`` of the same weights; mlx-lm's
    ``hasattr(m, "to_quantized")`` predicate selects both kinds of layer."""
    import mlx.nn as mnn
    k1, k2 = fa.random.split(fa.random.key(3))
    lin, emb = fa.nn.Linear(128, 16, key=k1), fa.nn.Embedding(24, 128, key=k2)
    model = fa.nn.Sequential([emb, lin])
    by_walk = fa.nn.quantize(model, mode=mode, class_predicate=lambda p, m: hasattr(m, "to_quantized"), **opts)
    mlin, memb = mnn.Linear(128, 16), mnn.Embedding(24, 128)
    mlin.weight, mlin.bias = mx.array(np.asarray(lin.weight)), mx.array(np.asarray(lin.bias))
    memb.weight = mx.array(np.asarray(emb.weight))
    for layer, walked, mlayer, cls in [(lin, by_walk.layers[1], mlin, fa.nn.QuantizedLinear),
                                       (emb, by_walk.layers[0], memb, fa.nn.QuantizedEmbedding)]:
        q = layer.to_quantized(mode=mode, **opts)
        mq = mlayer.to_quantized(mode=mode, **opts)
        assert type(q) is cls and type(walked) is cls and (q.group_size, q.bits, q.mode) == (
            walked.group_size, walked.bits, walked.mode) == (mq.group_size, mq.bits, mq.mode)
        for name in ("weight", "scales", "biases"):
            mine = getattr(q, name)
            assert (mine is None) == (getattr(walked, name) is None) == (mode != "affine" and name == "biases")
            if mine is not None:
                np.testing.assert_array_equal(np.asarray(mine), np.asarray(getattr(walked, name)), err_msg=name)
                np.testing.assert_array_equal(np.asarray(mine), np.array(getattr(mq, name)), err_msg=name)
    assert not hasattr(by_walk.layers[0], "to_quantized")   # quantized layers are not quantized again
    with pytest.raises(ValueError, match="group_size"):
        fa.nn.Linear(48, 4, key=k1).to_quantized(group_size=32)


def test_from_linear_matches_mlx_quantized_linear():
    import mlx.nn as mnn
    lin = fa.nn.Linear(128, 16, key=fa.random.key(1))
    q = fa.nn.QuantizedLinear.from_linear(lin, group_size=32, bits=3)
    ml = mnn.Linear(128, 16)
    ml.weight, ml.bias = mx.array(np.asarray(lin.weight)), mx.array(np.asarray(lin.bias))
    mq = mnn.QuantizedLinear.from_linear(ml, group_size=32, bits=3)
    for name in ("weight", "scales", "biases"):
        np.testing.assert_array_equal(np.asarray(getattr(q, name)), np.array(getattr(mq, name)), err_msg=name)
    x = np.random.default_rng(2).standard_normal((4, 128)).astype(np.float32)
    np.testing.assert_allclose(np.asarray(q(x)), np.array(mq(mx.array(x))), rtol=1e-5, atol=1e-5)
    assert (q.input_dims, q.output_dims) == (128, 16)


def test_save_and_load_a_quantized_model(tmp_path):
    q = fa.nn.quantize(_Net(fa.random.key(3)), group_size=32, bits=6)
    path = tmp_path / "q.safetensors"
    fa.save(path, q)
    back = fa.load(path)
    assert type(back.layers[0]) is fa.nn.QuantizedLinear and back.layers[0].bits == 6
    assert back.layers[0].weight.dtype == np.uint32
    np.testing.assert_array_equal(np.asarray(back(_IDS)), np.asarray(q(_IDS)))


def test_reads_mlx_quantized_safetensors_by_their_names(tmp_path):
    import mlx.nn as mnn
    from mlx.utils import tree_flatten
    key = fa.random.key(4)
    ml = mnn.QuantizedLinear(128, 32, bias=True, group_size=64, bits=4)
    mx.save_safetensors(str(tmp_path / "linear.safetensors"), dict(tree_flatten(ml.parameters())))
    layer = fa.load(tmp_path / "linear.safetensors", like=fa.nn.QuantizedLinear(128, 32, True, 64, 4, key=key))
    x = np.random.default_rng(5).standard_normal((3, 128)).astype(np.float32)
    np.testing.assert_allclose(np.asarray(layer(x)), np.array(ml(mx.array(x))), rtol=1e-5, atol=1e-5)
    me = mnn.QuantizedEmbedding(40, 64, group_size=32, bits=3)
    mx.save_safetensors(str(tmp_path / "emb.safetensors"), dict(tree_flatten(me.parameters())))
    emb = fa.load(tmp_path / "emb.safetensors", like=fa.nn.QuantizedEmbedding(40, 64, 32, 3, key=key))
    np.testing.assert_array_equal(np.asarray(emb(_IDS)), np.array(me(mx.array(_IDS))))
    np.testing.assert_allclose(np.asarray(emb.as_linear(x[:, :64])), np.array(me.as_linear(mx.array(x[:, :64]))),
                               rtol=1e-5, atol=1e-5)


def test_quantized_layers_on_every_device(on):
    q = fa.nn.quantize(_Net(fa.random.key(6)), group_size=64, bits=4)
    ref = np.asarray(q(_IDS))
    qd = fa.device_put(q, on)
    np.testing.assert_allclose(np.asarray(fa.jit(lambda m, i: m(i))(qd, fa.device_put(_IDS, on))), ref,
                               rtol=1e-5, atol=1e-5)


def test_kernels_refuse_a_walk_past_the_loop_limit():
    """lavapipe stops a shader's loops after 65,535 iterations, silently: a longer walk is declared unsupported
    (it falls back, or raises with fallback="error") rather than computed wrong."""
    import types

    from fnarray.lowering.kernels.groups.quantized import unsupported_reason
    w_q, scales, biases = fa.quantize(_weights(32, 64, 32), group_size=32, bits=4)
    prog = fa.make_ir(lambda x: fa.quantized_matmul(x, w_q, scales, biases, transpose=False, group_size=32,
                                                     bits=4))(np.ones((1, 32), np.float32))
    eqn = next(e for e in prog.eqns if e.primitive.name == "quantized_matmul")
    assert unsupported_reason(eqn, types.SimpleNamespace(max_loop_iterations=None)) is None
    assert unsupported_reason(eqn, types.SimpleNamespace(max_loop_iterations=32)) is None
    assert "loop iterations" in unsupported_reason(eqn, types.SimpleNamespace(max_loop_iterations=31))


@pytest.mark.parametrize("rows", [(1, 3), (2, 3)])
def test_a_layers_bias_and_activation_fuse_into_the_kernel(on, rows):
    """On the kernel backends, ``relu(x @ W.T + bias)`` is one kernel: the elementwise ops are its epilogue
    (3 rows: the matrix-vector form; 6 rows: the tiled form, whose weights a copy kernel lays out first)."""
    rng = np.random.default_rng(8)
    w_q, scales, biases = fa.quantize(rng.standard_normal((48, 128)).astype(np.float32), group_size=64, bits=4)
    bias = rng.standard_normal(48).astype(np.float32)
    x = rng.standard_normal((*rows, 128)).astype(np.float32)

    def layer(x, w_q, scales, biases, bias):
        return fa.nn.relu(fa.quantized_matmul(x, w_q, scales, biases, group_size=64, bits=4) + bias)

    f = fa.jit(layer, device=on)
    wd = np.asarray(fa.dequantize(w_q, scales, biases, group_size=64, bits=4), np.float64)
    np.testing.assert_allclose(np.asarray(f(x, w_q, scales, biases, bias)), np.maximum(x @ wd.T + bias, 0),
                               rtol=1e-5, atol=1e-5)
    if on.backend in ("opencl", "webgpu"):
        kernels = f.lower(x, w_q, scales, biases, bias).kernels()
        want = ["quantized_pack", "quantized_tile_quantized_matmul"] if rows[0] > 1 else ["quantized_quantized_matmul"]
        assert [k.name[:len(w)] for k, w in zip(kernels, want)] == want and len(kernels) == len(want), kernels
        assert "max" in kernels[-1].name   # the epilogue's relu


def test_prefill_panels_follow_the_weights_call_after_call(on):
    """The tiled form's panels (opencl: its copy kernel runs again only when the weights' buffers change): one jitted
    prefill called with weights A, A, B, A, then with a new array put where A's freed buffer was (the memory pool
    may hand it the same block), against NumPy in float64 each time; on opencl only the repeated call leaves the
    copy out (``fa.profiler``'s kernel spans)."""
    rng = np.random.default_rng(3)
    x = fa.device_put(rng.standard_normal((9, 128)).astype(np.float32), on)
    qmm = fa.jit(functools.partial(fa.quantized_matmul, group_size=32, bits=4))
    ws = [tuple(np.asarray(a) for a in fa.quantize(_weights(24, 128, 32, seed), group_size=32, bits=4))
          for seed in (1, 2, 3)]

    def kernels(parts, on_device):
        want = np.asarray(x, np.float64) @ np.asarray(fa.dequantize(*parts, group_size=32, bits=4), np.float64).T
        with fa.profiler.trace() as h:
            got = np.asarray(qmm(x, *on_device))
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
        return [r.name[:14] for r in h.profile.records if r.kind == "kernel"]

    a, b = ([fa.device_put(p, on) for p in w] for w in ws[:2])
    runs = [kernels(ws[0], a), kernels(ws[0], a), kernels(ws[1], b), kernels(ws[0], a)]
    del a
    gc.collect()
    runs.append(kernels(ws[2], [fa.device_put(p, on) for p in ws[2]]))
    if on.backend == "opencl":
        both = ["quantized_pack", "quantized_tile"]
        assert runs == [both, ["quantized_tile"], both, both, both], runs


@pytest.mark.parametrize("kdev", ["opencl"], indirect=True)
def test_prefill_elements_masked_in_place_are_the_shifted_products(kdev, no_fallback, monkeypatch):
    """The tiled ``x @ W.T`` kernel masks an affine element inside its word in place (``q * 2**s`` against the
    scale times ``2**-s``): random 4-bit words (every code at every position), 6 rows, against NumPy in float64 on
    the dequantized weights and bit for bit against the kernel that shifts every element down
    (``quantized.IN_PLACE`` off; every bit width's tiled form is checked against float64 by
    ``test_prefill_rows_match_the_float64_reference``)."""
    from fnarray.lowering.kernels.groups import quantized
    rng = np.random.default_rng(4)
    gs, k, n, bits = 32, 128, 24, 4
    w_q = rng.integers(0, 2 ** 32, (n, k * bits // 32), dtype=np.uint32)
    scales = rng.uniform(-0.1, 0.1, (n, k // gs)).astype(np.float32)
    biases = rng.uniform(-1, 1, (n, k // gs)).astype(np.float32)
    wd = np.asarray(fa.dequantize(w_q, scales, biases, group_size=gs, bits=bits), np.float64)
    x = rng.standard_normal((6, k)).astype(np.float32)
    args = [fa.device_put(a, kdev) for a in (x, w_q, scales, biases)]
    got = []
    for in_place in (True, False):
        monkeypatch.setattr(quantized, "IN_PLACE", in_place)
        f = fa.jit(functools.partial(fa.quantized_matmul, transpose=True, group_size=gs, bits=bits))
        assert [nm[:14] for nm in (k_.name for k_ in f.lower(*args).kernels())] == ["quantized_pack",
                                                                                   "quantized_tile"]
        got.append(np.asarray(f(*args)))
    want = x.astype(np.float64) @ wd.T
    np.testing.assert_allclose(got[0], want, rtol=1e-5, atol=2e-5 * np.sqrt(k))
    np.testing.assert_array_equal(got[0], got[1])


def test_x_at_w_with_many_rows_is_one_tiled_kernel_with_its_epilogue(on):
    """``transpose=False`` with more than 4 rows: one kernel (the tiled form reads the packed rows of ``W`` in
    place, no copy kernel), the bias and relu its epilogue; against NumPy in float64."""
    rng = np.random.default_rng(9)
    w_q, scales, biases = fa.quantize(rng.standard_normal((96, 128)).astype(np.float32), group_size=32, bits=3)
    bias = rng.standard_normal(128).astype(np.float32)
    x = rng.standard_normal((2, 7, 96)).astype(np.float32)

    def layer(x, w_q, scales, biases, bias):
        return fa.nn.relu(fa.quantized_matmul(x, w_q, scales, biases, transpose=False, group_size=32, bits=3) + bias)

    f = fa.jit(layer, device=on)
    wd = np.asarray(fa.dequantize(w_q, scales, biases, group_size=32, bits=3), np.float64)
    np.testing.assert_allclose(np.asarray(f(x, w_q, scales, biases, bias)), np.maximum(x @ wd + bias, 0),
                               rtol=1e-5, atol=1e-5)
    if on.backend in ("opencl", "webgpu"):
        kernels = f.lower(x, w_q, scales, biases, bias).kernels()
        assert [k.name[:15] for k in kernels] == ["quantized_ctile"], kernels
        assert "max" in kernels[0].name   # the epilogue's relu


def test_the_quantization_page_runs():
    """docs/quantization.md's code blocks run, in order, and give what the page says."""
    import pathlib
    import re
    text = (pathlib.Path(__file__).parent.parent / "docs" / "quantization.md").read_text()
    ns: dict = {}
    for block in re.findall(r"```python\n(.*?)```", text, re.S):
        exec(compile(block, "docs/quantization.md", "exec"), ns)  # noqa: S102 (our own documentation)
    assert ns["w_q"].dtype == np.uint32 and ns["w_q"].shape == (256, 64) and ns["scales"].shape == (256, 8)
    assert ns["y"].shape == (1, 256) and ns["w_back"].shape == (256, 512)
    assert [type(m).__name__ for m in ns["small"].layers] == ["QuantizedLinear", "Lambda", "QuantizedLinear"]
    assert [getattr(m, "bits", None) for m in ns["mixed"].layers] == [8, None, 8]
    assert (ns["m_q"].shape, ns["m_scales"].dtype, ns["m_scales"].shape) == ((64, 16), np.uint8, (64, 4))
    assert ns["ym"].shape == (2, 64) and ns["wm_back"].dtype == np.float32


_kernel_caps = kernel_capabilities   # a kernel device scheduled with other Capabilities (tests/helpers.py)


@pytest.mark.parametrize("bits", [3, 4, 8])
@pytest.mark.parametrize("kdev", [d for d in fa.devices(all_backends=True) if d.backend in ("opencl", "webgpu")],
                         ids=str)
def test_the_gpu_form_matches_mlx(kdev, bits):
    """The cooperative form GPUs take (a work-group per column, partial sums reduced in local memory), forced on
    this machine's CPU devices, with a bias epilogue, 1 to 6 rows."""
    from fnarray.lowering.kernels.groups.quantized import cooperative
    rng = np.random.default_rng(bits)
    w_q, scales, biases = mx.quantize(mx.array(rng.standard_normal((40, 320)).astype(np.float32)), group_size=64,
                                      bits=bits)
    bias = rng.standard_normal(40).astype(np.float32)
    args = [fa.device_put(np.array(a), kdev) for a in (w_q, scales, biases)]
    gpu = {"tiling_pays": True} if kdev.backend == "webgpu" else {"matmul_tiling": "local", "uniform_guard": False}
    with _kernel_caps(kdev, **gpu), fallback_mode("error"):
        caps = kdev.impl.state(kdev).caps if kdev.backend == "opencl" else kdev.impl.capabilities(kdev)
        assert cooperative(caps)
        for rows in (1, 3, 6):
            x = rng.standard_normal((rows, 320)).astype(np.float32)
            f = fa.jit(lambda x, w, s, b, c: fa.quantized_matmul(x, w, s, b, group_size=64, bits=bits) + c)
            want = np.array(mx.quantized_matmul(mx.array(x), w_q, scales, biases, group_size=64, bits=bits)) + bias
            np.testing.assert_allclose(np.asarray(f(fa.device_put(x, kdev), *args, bias)), want, rtol=1e-5, atol=1e-4)


# ------------------------------------------------------------------ the floating modes: mxfp4, mxfp8, nvfp4

FLOAT_MODES = ("mxfp4", "mxfp8", "nvfp4")
#: Per floating mode: MLX's (only) ``(group_size, bits)``.
_MODE_FORMATS = {"mxfp4": (32, 4), "mxfp8": (32, 8), "nvfp4": (16, 4)}
#: Per floating mode: its group size and the largest element magnitude (amax / top is the scale's quotient).
_FLOAT = {"mxfp4": (32, 6.0), "mxfp8": (32, 448.0), "nvfp4": (16, 6.0)}


def _float_weights(dtype, mode="mxfp4", seed=0):
    """Weights over 60 binades with the rules' edge cases: groups whose ``amax / top`` is a power of two and one
    ulp above it, every E2M1 rounding tie (and E4M3 ties of mxfp8's elements), a negative value rounding to 0,
    an all-zero group, a subnormal group and (for float32) infinities and NaNs of both signs beside zeros of both
    signs; float16 rows overflow to infinity or underflow past ``2**-24``."""
    rng = np.random.default_rng(seed)
    top = _FLOAT[mode][1]
    w = (rng.standard_normal((64, 64)) * np.exp2(rng.integers(-30, 30, (64, 1)))).astype(np.float32)
    w[w > 60000] = np.inf   # the float16 cast's overflow, without NumPy's warning
    w[w < -60000] = -np.inf
    for i in range(8):
        w[i, 0] = top * 2.0 ** (i - 4) * (1 + 2.0 ** -7)
        w[8 + i, 0] = top * 2.0 ** (i - 4)
        w[8 + i, 16] = np.nextafter(np.float32(top * 2.0 ** (i - 4)), np.float32(np.inf))
    w[20, :32] = 0.0
    w[21, 0], w[22, 3], w[23, :32] = np.inf, np.nan, 1e-41
    w[24, :12] = [6, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, -2.5, -0.25, -5.0, -0.2]
    w[25, :32] = np.arange(32) * 2.0 ** -9 * 3   # E4M3 subnormal ties (x 448 / amax)
    w[26, :6] = [-np.nan, 0.0, -0.0, 1.0, -1.0, 300.0]
    w[27, :16] = [448, 2.0 ** -6 * 1.0625, 2.0 ** -6 * 1.1875, 3 * 2.0 ** -7, 2.0 ** -10, 3 * 2.0 ** -11, 248, 264,
                  -2.0 ** -10, 1 / 3, 2 / 3, 460, 464, -0.0, 0.0, 0.0]
    w[28, 16] = -np.inf
    return w.astype(dtype)


def _float_weights_dense(mode):
    """Rows that walk the roundings densely: mxfp8's elements over every E4M3 midpoint (and an ulp either side)
    under a group maximum of 448 (scale 1), and every mode's scale over a dense range of group maxima (nvfp4's
    E4M3 scale ties among them)."""
    import ml_dtypes
    rng = np.random.default_rng(7)
    vals = np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float32)
    vals = np.unique(vals[np.isfinite(vals) & (vals >= 0)])
    mids = (vals[1:] + vals[:-1]) / 2
    if mode == "mxfp8":
        x = np.concatenate([mids, np.nextafter(mids, 0), np.nextafter(mids, 1000), -mids,
                            rng.uniform(-464, 464, 1500).astype(np.float32)]).astype(np.float32)
        x = np.resize(x, -(-len(x) // 31) * 31).reshape(-1, 31)
        return np.pad(np.concatenate([np.full((len(x), 1), 448, np.float32), x], 1), ((0, 0), (0, 32)),
                      constant_values=1.0)
    amax = np.concatenate([mids * 6, np.nextafter(mids * 6, 0), np.nextafter(mids * 6, np.inf),
                           np.exp2(rng.uniform(-20, 14, 600))]).astype(np.float32)
    amax = np.resize(amax, -(-len(amax) // 4) * 4)
    w = np.clip(rng.standard_normal((len(amax), 16)).astype(np.float32) * amax[:, None] / 5, -amax[:, None],
                amax[:, None])
    w[:, 0] = amax
    w[::3, 0] = -amax[::3]
    return w.reshape(-1, 64)


def _float_mode(device, *dts):
    """``fallback="error"`` on opencl where it has the dtypes ``dts`` (it lacks bfloat16, and float16 without
    cl_khr_fp16); webgpu reads uint8 (the scales) but writes none, so the composites fall back there
    (``test_mxfp4_on_webgpu_falls_back_naming_uint8``)."""
    caps = device.impl.capabilities(device)
    return "error" if device.backend == "opencl" and all(np.dtype(d) in caps.dtypes for d in dts) else "warn"


def _check_quantize(device, w, mode, dtype, npdt, dequantize=True):
    """``fa.quantize``'s words and scales of ``w`` bit-identical to ``mx.quantize``'s, then (``dequantize``)
    ``fa.dequantize`` to ``mx.dequantize`` for the default dtype, float32 and float16."""
    import ml_dtypes
    mw = mx.array(w.astype(np.float32)).astype(getattr(mx, dtype))
    want_q, want_s = mx.quantize(mw, mode=mode)
    gs = _FLOAT[mode][0]
    with fallback_mode(_float_mode(device, npdt)), warnings.catch_warnings():
        warnings.simplefilter("ignore", fa.FallbackWarning)
        got_q, got_s = fa.jit(functools.partial(fa.quantize, mode=mode))(fa.device_put(w, device))
        assert (got_q.dtype, got_s.dtype, got_s.shape) == (np.uint32, np.uint8, (w.shape[0], w.shape[1] // gs))
        # XLA on the CPU flushes subnormal inputs (docs/traps.md): jax:0 quantizes row 23's group as zeros.
        rows = [r for r in range(w.shape[0]) if not (device.backend == "jax" and r == 23)]
        np.testing.assert_array_equal(np.asarray(got_q)[rows], np.array(want_q)[rows], err_msg=f"{mode} w_q")
        np.testing.assert_array_equal(np.asarray(got_s)[rows], np.array(want_s)[rows], err_msg=f"{mode} scales")
    for out in (None, "float32", "float16") if dequantize else ():
        with fallback_mode(_float_mode(device, out or ml_dtypes.bfloat16)), warnings.catch_warnings():
            warnings.simplefilter("ignore", fa.FallbackWarning)
            got = fa.dequantize(got_q, got_s, mode=mode, dtype=out)
            want = mx.dequantize(want_q, want_s, mode=mode, dtype=None if out is None else getattr(mx, out))
            assert got.dtype.name == (out or "bfloat16")
            np.testing.assert_array_equal(np.asarray(got, np.float32)[rows], np.array(want.astype(mx.float32))[rows],
                                          err_msg=f"{mode} dequantize to {out}")


@pytest.mark.parametrize("mode", FLOAT_MODES)
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_float_modes_quantize_and_dequantize_are_bit_identical_to_mlx(device, dtype, mode):
    import ml_dtypes
    npdt = np.dtype(getattr(ml_dtypes, dtype, None) or dtype)
    _check_quantize(device, _float_weights(npdt, mode), mode, dtype, npdt)


@pytest.mark.parametrize("mode", FLOAT_MODES)
def test_float_modes_round_densely_as_mlx(device, mode):
    """Every E4M3 tie of mxfp8's elements and of nvfp4's scales, and scales over a dense range of group maxima,
    in float32 and float16 (XLA's CPU division is not correctly rounded: the scales are decided by comparisons
    with exact thresholds, ``_quantize._thresholds``)."""
    w = _float_weights_dense(mode)
    for dtype in ("float32", "float16"):
        _check_quantize(device, w.astype(dtype), mode, dtype, np.dtype(dtype), dequantize=False)


@pytest.mark.parametrize("mode", FLOAT_MODES)
@pytest.mark.parametrize("transpose", [True, False])
def test_float_modes_quantized_matmul_matches_mlx(device, transpose, mode):
    """Against ``mx.quantized_matmul(mode=...)`` and NumPy in float64 on the dequantized weights, every mode with
    ``fallback="error"`` on every backend (opencl and webgpu: the matrix-vector kernel up to 4 rows, the tiled
    forms for 10; every kernel form: ``test_float_modes_in_every_kernel_form_match_mlx``)."""
    rng = np.random.default_rng(3)
    w = _weights(40, 256, 32)
    w[5, :40] *= 300.0   # nvfp4's E4M3 scales saturate at 448
    w_q, scales = mx.quantize(mx.array(w), mode=mode)
    wd = np.array(mx.dequantize(w_q, scales, mode=mode, dtype=mx.float32), np.float64)
    k = 256 if transpose else 40
    qmm = fa.jit(functools.partial(fa.quantized_matmul, transpose=transpose, mode=mode))
    args = [fa.device_put(np.array(a), device) for a in (w_q, scales)]
    for shape in ((k,), (3, k), (2, 5, k)):
        x = rng.standard_normal(shape).astype(np.float32)
        want = np.array(mx.quantized_matmul(mx.array(x), w_q, scales, transpose=transpose, mode=mode))
        with fallback_mode("error"):
            got = qmm(fa.device_put(x, device), *args)
        assert got.shape == want.shape and got.dtype == np.float32
        tol = 2e-5 * np.sqrt(k) * np.abs(wd).max()
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=tol)
        np.testing.assert_allclose(np.asarray(got), x.astype(np.float64) @ (wd.T if transpose else wd),
                                   rtol=1e-5, atol=tol)


def _packed_codes(q, bits):
    """uint32 words of the codes ``q`` (uint8, last axis a multiple of ``32 // bits``), MLX's little-endian stream."""
    if bits == 4:
        q = q[..., 0::2] | (q[..., 1::2] << 4)
    return np.ascontiguousarray(q).view("<u4")


@pytest.mark.parametrize("transpose", [True, False])
def test_float_modes_decode_every_code(device, transpose):
    """Every E4M3 element code (mxfp8, under scale 2**0), every E8M0 scale (mxfp8, over elements 1.0; 0 and 255
    aside: 2**-127 is subnormal, which XLA flushes, and 2**128 is inf) and every E4M3 scale code (nvfp4, over
    elements 1.0) read back through ``quantized_matmul`` as ``packed.E4M3`` (0x7F and 0xFF are NaN, as MLX's) and
    ``packed.E8M0``: ``x`` one-hot, so each output is one weight. opencl's and webgpu's kernels decode them from
    their bits (``fallback="error"``)."""
    from fnarray.lowering.packed import E4M3, E8M0
    codes = np.arange(256, dtype=np.uint8)
    one = {"mxfp8": 0x38, "nvfp4": 2}   # the element code of 1.0
    cases = [("mxfp8", codes, np.full(256, 127, np.uint8), E4M3),
             ("mxfp8", np.full(256, one["mxfp8"], np.uint8), codes, E8M0),
             ("nvfp4", np.full(256, one["nvfp4"], np.uint8), codes, E4M3)]
    keep = np.ones(256, bool)
    for mode, q, s, want in cases:
        gs, bits = _MODE_FORMATS[mode]
        keep = (codes > 0) & (codes < 255) if want is E8M0 else np.ones(256, bool)
        if transpose:   # W (256, gs): row j holds its code first, zeros after; x = e_0 picks each row's first
            rows = np.zeros((256, gs), np.uint8)
            rows[:, 0] = q
            w, scales, x = _packed_codes(rows, bits), s[:, None], np.eye(1, gs, dtype=np.float32)
        else:           # W (1, 256 * gs): group j is its code, then zeros; x = [1]
            row = np.zeros((256, gs), np.uint8)
            row[:, 0] = q
            w, scales, x = _packed_codes(row.reshape(1, -1), bits), s[None, :], np.ones((1, 1), np.float32)
        with fallback_mode("error"):
            got = np.asarray(fa.quantized_matmul(*(fa.device_put(a, device) for a in (x, w, scales)),
                                                 transpose=transpose, mode=mode))
        got = got[0] if transpose else got[0].reshape(256, gs)[:, 0]
        np.testing.assert_array_equal(got[keep], want[keep], err_msg=f"{mode} on {device}")


@pytest.mark.parametrize("mode", FLOAT_MODES)
def test_float_modes_dequantize_every_code_as_mlx(device, mode):
    """``fa.dequantize`` of every element code beside every scale code (NaN codes included), bit for bit
    ``mx.dequantize``'s, to bfloat16 (the default), float32 and float16."""
    import ml_dtypes
    gs, bits = _MODE_FORMATS[mode]
    rng = np.random.default_rng(4)
    q = rng.integers(0, 1 << bits, (256, gs)).astype(np.uint8)
    q[:, 0] = np.arange(256) % (1 << bits)
    w, s = _packed_codes(q, bits), np.arange(256, dtype=np.uint8)[:, None]
    for out in (None, "float32", "float16"):
        want = mx.dequantize(mx.array(w), mx.array(s), mode=mode, dtype=None if out is None else getattr(mx, out))
        want = np.array(want.astype(mx.float32))
        with fallback_mode(_float_mode(device, out or ml_dtypes.bfloat16)), warnings.catch_warnings():
            warnings.simplefilter("ignore", fa.FallbackWarning)
            got = fa.dequantize(fa.device_put(w, device), fa.device_put(s, device), mode=mode, dtype=out)
        keep = np.ones(want.shape, bool)
        if device.backend == "jax" and out != "float16":   # XLA flushes float32/bfloat16 subnormals to 0
            keep = ~((want != 0) & (np.abs(want) < 2.0 ** -126))
        np.testing.assert_array_equal(np.asarray(got, np.float32)[keep], want[keep],
                                      err_msg=f"{mode} to {out} on {device}")


@pytest.mark.parametrize("mode", FLOAT_MODES)
def test_float_modes_grad_wrt_x_is_the_transposed_product(device, mode):
    """Linear in x: the gradient of ``sum(qmm(x) * c)`` is ``c @ W`` (float64 NumPy on the dequantized weights)."""
    rng = np.random.default_rng(5)
    w_q, scales = fa.quantize(_weights(6, 64, 32), mode=mode)
    wd = np.asarray(fa.dequantize(w_q, scales, mode=mode, dtype="float32"), np.float64)
    c = rng.standard_normal((2, 6)).astype(np.float32)
    args = [fa.device_put(a, device) for a in (w_q, scales)]

    def loss(x):
        return fnp.sum(fa.quantized_matmul(x, *args, mode=mode) * fnp.asarray(c))

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", fa.FallbackWarning)
        got = np.asarray(fa.jit(fa.grad(loss))(fa.device_put(np.ones((2, 64), np.float32), device)))
    np.testing.assert_allclose(got, c.astype(np.float64) @ wd, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode", FLOAT_MODES)
def test_float_modes_errors_name_what_was_given(mode):
    gs, _ = _FLOAT[mode]
    w_q, scales = fa.quantize(np.ones((4, 64), np.float32), mode=mode)
    x = np.ones((2, 64), np.float32)
    with pytest.raises(ValueError, match="no biases"):
        fa.quantized_matmul(x, w_q, scales, scales, mode=mode)
    with pytest.raises(ValueError, match="no biases"):
        fa.dequantize(w_q, scales, scales, mode=mode)
    with pytest.raises(DTypeError, match="uint8"):
        fa.quantized_matmul(x, w_q, np.asarray(scales, np.float32), mode=mode)
    with pytest.raises(DTypeError, match="uint8"):
        fa.dequantize(w_q, np.asarray(scales, np.float32), mode=mode)
    with pytest.raises(ValueError, match="needs the biases"):
        fa.quantized_matmul(x, w_q, scales)
    with pytest.raises(ShapeError, match="scales"):
        fa.dequantize(w_q, scales[:, :1], mode=mode)
    with pytest.raises(ShapeError, match="divisible by group_size"):
        fa.quantize(np.ones((4, gs + 8), np.float32), mode=mode)
    # MLX's own errors for the other group sizes and widths, as ValueErrors naming the mode's only format.
    for bad in ({"group_size": 64}, {"bits": 2}):
        with pytest.raises(ValueError):
            mx.quantize(mx.ones((4, 64)), mode=mode, **bad)
        with pytest.raises(ValueError, match=f"mode={mode!r} needs group_size={gs}"):
            fa.quantize(np.ones((4, 64), np.float32), mode=mode, **bad)
        with pytest.raises(ValueError, match=f"mode={mode!r} needs group_size={gs}"):
            fa.quantized_matmul(x, w_q, scales, mode=mode, **bad)
        with pytest.raises(ValueError, match=f"mode={mode!r} needs group_size={gs}"):
            fa.nn.QuantizedLinear(64, 4, mode=mode, key=fa.random.key(0), **bad)


@pytest.mark.parametrize("kdev", [d for d in fa.devices(all_backends=True) if d.backend in ("opencl", "webgpu")],
                         ids=str)
@pytest.mark.parametrize("mode", FLOAT_MODES)
def test_float_modes_in_every_kernel_form_match_mlx(kdev, mode):
    """Each floating mode in each ``quantized_matmul`` kernel form, ``fallback="error"``, with an epilogue: the
    matrix-vector form (1 and 3 rows), the tiled forms (6 and 10 rows; ``transpose=True`` packs the scales as
    floats, and on CPU OpenCL devices the codes as bfloat16 values, but on a CPU WebGPU adapter with subgroups 10
    rows take the subgroup form, reading them in place; ``transpose=False`` reads the scales in place,
    there the codes as bfloat16 values from a copy kernel) and, forced with a GPU's capabilities, the cooperative form
    (webgpu reads the uint8 scales four to a u32 word; nvfp4's chunks are its groups of 16). Weights over 60
    binades with zero, subnormal and non-finite groups (``_float_weights``), against ``mx.quantized_matmul`` and
    NumPy in float64, relative to ``|x| @ |W|``."""
    from fnarray.lowering.kernels.groups.quantized import cooperative
    gs, bits = _MODE_FORMATS[mode]
    w = _float_weights(np.float32, mode)
    w_q, scales = mx.quantize(mx.array(w), group_size=gs, bits=bits, mode=mode)
    wd = np.array(mx.dequantize(w_q, scales, group_size=gs, bits=bits, mode=mode, dtype=mx.float32), np.float64)
    args = [fa.device_put(np.array(a), kdev) for a in (w_q, scales)]
    rng = np.random.default_rng(11)
    gpu = {"tiling_pays": True} if kdev.backend == "webgpu" else {"matmul_tiling": "local", "uniform_guard": False}
    # a CPU WebGPU adapter with subgroups (not the forced GPU capabilities): 8 rows or more of x @ W.T take the
    # subgroup form (_subgroup_tiled)
    sub = kdev.backend == "webgpu" and kdev.platform == "cpu" and getattr(kdev.impl.gpu, "has_subgroups", False)
    for caps in ({}, gpu):
        with _kernel_caps(kdev, **caps), fallback_mode("error"):
            if caps:
                assert cooperative(kdev.impl.state(kdev).caps if kdev.backend == "opencl"
                                   else kdev.impl.capabilities(kdev))
            for transpose, rows in itertools.product((True, False), (1, 3, 6, 10)):
                x = rng.standard_normal((rows, 64)).astype(np.float32)
                f = fa.jit(lambda x, w, s, t=transpose: fa.nn.relu(fa.quantized_matmul(x, w, s, transpose=t,
                                                                                       mode=mode)))
                wt = wd.T if transpose else wd
                got = np.asarray(f(fa.device_put(x, kdev), *args), np.float64)
                mlx = np.array(mx.quantized_matmul(mx.array(x), w_q, scales, transpose=transpose, group_size=gs,
                                                   bits=bits, mode=mode), np.float64)
                tol = 1e-6 * (np.abs(x.astype(np.float64)) @ np.abs(wt)) + 1e-37
                for want in (np.maximum(x.astype(np.float64) @ wt, 0), np.maximum(mlx, 0)):
                    assert np.all(np.abs(got - want) <= tol), (transpose, rows, np.abs(got - want).max())
                names = [k.name for k in f.lower(fa.device_put(x, kdev), *args).kernels()]
                # CPU OpenCL devices decode x @ W's codes to bfloat16 once in a copy kernel (_float_panels)
                decode = ["quantized_decode"] if kdev.backend == "opencl" and not caps else []
                want_names = (["quantized_wg"] if caps and transpose and rows <= 4 else ["quantized_quantized"]
                              if rows <= 4 else ["quantized_subgroup"] if transpose and rows >= 8 and sub and not caps
                              else ["quantized_pack", "quantized_tile"] if transpose
                              else decode + ["quantized_ctile"])
                assert [nm[:len(w_)] for nm, w_ in zip(names, want_names)] == want_names, names
                assert len(names) == len(want_names) and "max" in names[-1], names   # the relu: the epilogue


def test_mxfp4_on_webgpu_falls_back_naming_uint8():
    """WGSL has no 8-bit type: webgpu kernels read uint8 bytes but write none, so the scales' cast falls back, named."""
    devs = [d for d in fa.devices(all_backends=True) if d.backend == "webgpu"]
    if not devs:
        pytest.skip("no webgpu device")
    with fallback_mode("error"), pytest.raises(fa.UnsupportedOnDevice, match="uint8"):
        fa.jit(functools.partial(fa.quantize, mode="mxfp4"))(fa.device_put(np.ones((2, 32), np.float32), devs[0]))


@pytest.mark.parametrize("mode", FLOAT_MODES)
def test_float_mode_layers_match_mlx_nn(tmp_path, mode):
    """``QuantizedLinear``/``QuantizedEmbedding`` with a floating mode hold MLX's fields (no biases: nothing saved
    under that name), match ``mlx.nn``'s, read MLX's safetensors, and ``fa.nn.quantize`` takes the mode."""
    import mlx.nn as mnn
    from mlx.utils import tree_flatten
    lin = fa.nn.Linear(128, 16, key=fa.random.key(1))
    q = fa.nn.QuantizedLinear.from_linear(lin, mode=mode)
    ml = mnn.Linear(128, 16)
    ml.weight, ml.bias = mx.array(np.asarray(lin.weight)), mx.array(np.asarray(lin.bias))
    mq = mnn.QuantizedLinear.from_linear(ml, mode=mode)
    assert q.biases is None and (q.group_size, q.bits) == _MODE_FORMATS[mode] and "biases" not in mq.parameters()
    for name in ("weight", "scales"):
        np.testing.assert_array_equal(np.asarray(getattr(q, name)), np.array(getattr(mq, name)), err_msg=name)
    x = np.random.default_rng(2).standard_normal((4, 128)).astype(np.float32)
    np.testing.assert_allclose(np.asarray(q(x)), np.array(mq(mx.array(x))), rtol=1e-5, atol=1e-5)
    fa.save(tmp_path / "q.safetensors", q)
    back = fa.load(tmp_path / "q.safetensors")
    np.testing.assert_array_equal(np.asarray(back(x)), np.asarray(q(x)))
    me = mnn.QuantizedEmbedding(40, 64, mode=mode)
    mx.save_safetensors(str(tmp_path / "emb.safetensors"), dict(tree_flatten(me.parameters())))
    emb = fa.load(tmp_path / "emb.safetensors", like=fa.nn.QuantizedEmbedding(40, 64, mode=mode,
                                                                              key=fa.random.key(4)))
    got, want = emb(_IDS), me(mx.array(_IDS))
    assert got.dtype.name == "bfloat16" == str(want.dtype).split(".")[-1]
    np.testing.assert_array_equal(np.asarray(got, np.float32), np.array(want.astype(mx.float32)))
    np.testing.assert_allclose(np.asarray(emb.as_linear(x[:, :64])), np.array(me.as_linear(mx.array(x[:, :64]))),
                               rtol=1e-5, atol=1e-5)
    small = fa.nn.quantize(_Net(fa.random.key(3)), mode=mode)
    assert {(m.mode, m.group_size, m.biases is None) for m in small.layers if hasattr(m, "mode")} == \
        {(mode, _MODE_FORMATS[mode][0], True)}
