"""Convolutions: ``fa.lax.conv_general_dilated`` and friends against ``jax.lax`` (the oracle), on every device.

- The table (``CASES``): 1-D/2-D/3-D, the NCHW/OIHW and NHWC/HWIO layouts and permuted ones, strides, input
  and kernel dilation, every padding form (SAME, SAME_LOWER, VALID, pairs with negative entries), feature
  groups (depthwise included) and batch groups. Each case: values, ``grad`` with respect to both operands
  against ``jax.grad``, and ``vmap`` (input, kernel, both, non-leading axes) against a Python loop. The whole
  table runs on numpy:0; ``PARITY`` (a few cases: 1-D, 2-D and 3-D, feature and batch groups, permuted layouts,
  input dilation) on every other device (docs/design.md's test tiers; jax:0 ran the whole table until the
  seventeenth session).
- float64 gradients against central finite differences (numpy:0), bfloat16 with float32 accumulation,
  integers, zero-size operands, the ``lax`` shorthands (``conv``, ``conv_with_general_padding``,
  ``conv_transpose``, ``conv_dimension_numbers``), ``fnp.convolve``/``correlate`` against NumPy, the errors of
  bad input, ``fa.nn.Conv`` (against ``jax.lax`` with the layer's weights, under ``jit(grad)`` and ``vmap``)
  and the ONNX export (onnxruntime against numpy:0).

Every backend runs it with its own kernels (``fallback="error"``; opencl and webgpu since branch convkern's
kernels, ``fnarray/lowering/kernels/groups/conv.py``): ``KERNELS`` names the backends.
"""

from __future__ import annotations

import contextlib
import warnings
from typing import NamedTuple

import numpy as np
import pytest

import fnarray as fa
import fnarray.numpy as fnp
from fnarray.core.conv import ConvDimensionNumbers
from fnarray.core.errors import DTypeError, ShapeError

jax = pytest.importorskip("jax", reason="jax is the oracle of these tests (pip install 'fnarray[test]')")
jlax = jax.lax

#: Backends whose own kernels must run convolutions (tests there use ``fallback="error"``). The kernel backends
#: joined when their convolution kernels landed.
KERNELS = {"numpy", "jax", "mlx", "opencl", "webgpu"}

NUMPY = fa.devices("numpy")[0]
rng = np.random.default_rng(1234)


@contextlib.contextmanager
def _fallback(device):
    """``fallback="error"`` where the device's backend has convolution kernels; else the fallback, quietly."""
    old = fa.config.fallback
    fa.config.fallback = "error" if device.backend in KERNELS else "silent"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", fa.FallbackWarning)
            yield
    finally:
        fa.config.fallback = old


class Case(NamedTuple):
    name: str
    lhs: tuple
    rhs: tuple
    strides: tuple
    padding: object
    lhs_dilation: tuple | None = None
    rhs_dilation: tuple | None = None
    dn: object = None
    groups: int = 1
    batch_groups: int = 1


CASES = [
    Case("1d_nch_valid", (2, 3, 9), (4, 3, 3), (1,), "VALID"),
    Case("1d_nhc_same_stride_rdil", (2, 9, 3), (3, 3, 4), (2,), "SAME", None, (2,), ("NHC", "HIO", "NHC")),
    Case("1d_depthwise_same_lower", (2, 4, 8), (8, 1, 2), (1,), "SAME_LOWER", groups=4),
    Case("1d_batch_groups_permuted", (2, 9, 6), (3, 2, 6), (3,), ((1, 2),), (2,), (2,), ("CHN", "HIO", "HCN"),
         batch_groups=2),
    Case("2d_nchw_pairs_negative", (2, 3, 7, 6), (4, 3, 3, 2), (2, 1), ((1, -1), (2, 0)), (2, 1), (1, 2),
         ("NCHW", "OIHW", "NCHW")),
    Case("2d_nhwc_same", (2, 7, 6, 4), (3, 2, 4, 6), (2, 2), "SAME", None, None, ("NHWC", "HWIO", "NHWC")),
    Case("2d_nhwc_groups_valid", (2, 7, 6, 4), (3, 2, 2, 6), (1, 2), "VALID", None, (2, 1),
         ("NHWC", "HWIO", "NHWC"), groups=2),
    Case("2d_depthwise_nchw", (2, 4, 6, 5), (4, 1, 3, 3), (1, 1), "SAME", groups=4),
    Case("2d_batch_groups_nhwc", (4, 6, 5, 3), (2, 3, 3, 6), (1, 1), ((1, 1), (0, 2)), (1, 2), None,
         ("NHWC", "HWIO", "NHWC"), batch_groups=2),
    Case("2d_kernel_larger_than_output", (2, 2, 6, 5), (3, 2, 5, 4), (1, 2), ((0, 0), (1, 0)), None, (1, 1),
         ("NCHW", "OIHW", "NHWC")),
    Case("2d_permuted_layout", (5, 3, 2, 6), (2, 3, 4, 3), (1, 2), ((0, 1), (1, 1)), None, (2, 1),
         ("HCNW", "WIHO", "CWHN")),
    Case("3d_ndhwc", (1, 5, 4, 6, 2), (2, 2, 3, 2, 3), (1, 2, 1), ((1, 0), (0, 1), (1, 1)), None, (1, 1, 2),
         ("NDHWC", "DHWIO", "NDHWC")),
    Case("3d_groups_lhs_dilation", (2, 6, 4, 3, 3), (4, 3, 2, 2, 1), (1, 1, 2), ((1, 1), (0, 0), (1, 0)),
         (1, 2, 1), None, None, groups=2),
    Case("3d_batch_groups_ncdhw", (4, 2, 3, 4, 3), (4, 2, 2, 2, 2), (1, 1, 1), "VALID", batch_groups=2),
]
PARITY = ("1d_batch_groups_permuted", "2d_nhwc_groups_valid", "3d_groups_lhs_dilation")


def _case(name):
    return next(c for c in CASES if c.name == name)


def _fa_fn(c):
    def f(x, w):
        return fa.lax.conv_general_dilated(x, w, c.strides, c.padding, c.lhs_dilation, c.rhs_dilation, c.dn,
                                           c.groups, c.batch_groups)
    return f


def _jax_fn(c):
    def f(x, w):
        return jlax.conv_general_dilated(x, w, c.strides, c.padding, c.lhs_dilation, c.rhs_dilation, c.dn,
                                         c.groups, c.batch_groups, precision=jlax.Precision.HIGHEST)
    return f


def _data(c, dtype=np.float32):
    x = rng.standard_normal(c.lhs).astype(dtype)
    w = rng.standard_normal(c.rhs).astype(dtype)
    return x, w


def _close(got, want, msg, tol=2e-4):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, (msg, got.shape, want.shape)
    scale = max(1.0, float(np.abs(want).max()) if want.size else 1.0)
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * scale, err_msg=msg)


def _put(a, device):
    return fa.device_put(fnp.asarray(a), device)


def _oracle(c):
    """``(x, w, cot, out, grad_x, grad_w)`` for a case from JAX (one jitted program: XLA compiles are slow)."""
    jf = _jax_fn(c)
    x, w = _data(c)
    out_shape = jax.eval_shape(jf, x, w).shape
    cot = rng.standard_normal(out_shape).astype(np.float32)

    def value_and_grads(a, b, t):
        out, vjp = jax.vjp(jf, a, b)
        return (out,) + vjp(t)
    return (x, w, cot) + tuple(np.asarray(v) for v in jax.jit(value_and_grads)(x, w, cot))


def _check_case(c, device, vmaps=True, oracle=None):
    f = _fa_fn(c)
    x, w, cot, want, jx, jw = oracle or _oracle(c)
    xd, wd, cd = _put(x, device), _put(w, device), _put(cot, device)
    with _fallback(device):
        out = f(xd, wd)
        assert out.device == device and out.dtype == np.float32
        _close(out, want, f"{c.name} values on {device}")

        def value_and_grads(a, b, t):   # one program: XLA compiles cost more than these convolutions
            return f(a, b), fa.grad(lambda a, b: fnp.sum(f(a, b) * t), argnums=(0, 1))(a, b)
        out, (gx, gw) = fa.jit(value_and_grads)(xd, wd, cd)
        _close(out, want, f"{c.name} jit values on {device}")
        _close(gx, jx, f"{c.name} grad lhs on {device}")
        _close(gw, jw, f"{c.name} grad rhs on {device}")
        if not vmaps:
            return
        # vmap over the input, the kernel, both, and non-leading axes (one jitted program), against a loop.
        V = 2
        xs = rng.standard_normal((V,) + c.lhs).astype(np.float32)
        ws = rng.standard_normal((V,) + c.rhs).astype(np.float32)
        # (eager calls of the shapes above: their executable is cached)
        loop_both = np.stack([np.asarray(f(_put(xs[i], device), _put(ws[i], device))) for i in range(V)])
        loop_lhs = np.stack([np.asarray(f(_put(xs[i], device), wd)) for i in range(V)])
        loop_rhs = np.stack([np.asarray(f(xd, _put(ws[i], device))) for i in range(V)])

        def mapped(xs, ws, x, w, xm, wm):
            return (fa.vmap(f)(xs, ws), fa.vmap(f, in_axes=(0, None))(xs, w), fa.vmap(f, in_axes=(None, 0))(x, ws),
                    fa.vmap(f, in_axes=(-1, 1), out_axes=1)(xm, wm))
        xm, wm = _put(np.moveaxis(xs, 0, -1), device), _put(np.moveaxis(ws, 0, 1), device)
        both, lhs, rhs, moved = fa.jit(mapped)(_put(xs, device), _put(ws, device), xd, wd, xm, wm)
        _close(both, loop_both, f"{c.name} vmap both on {device}")
        _close(lhs, loop_lhs, f"{c.name} vmap lhs on {device}")
        _close(rhs, loop_rhs, f"{c.name} vmap rhs on {device}")
        _close(moved, np.moveaxis(loop_both, 0, 1), f"{c.name} vmap axes (-1, 1) on {device}")


@pytest.mark.parametrize("c", CASES, ids=[c.name for c in CASES])
def test_table_numpy(c):
    """The whole table on numpy:0 (the full-matrix tier; jax:0 runs ``PARITY`` in ``test_parity_every_device``)."""
    _check_case(c, NUMPY, oracle=_oracle(c))


@pytest.mark.parametrize("name", PARITY)
def test_parity_every_device(device, name):
    if device.backend == "numpy":
        return  # the full table covers it
    _check_case(_case(name), device, vmaps=device.backend in ("mlx", "jax") or name == PARITY[0])


def test_vmap_of_grad_per_example(device):
    if device.backend in ("opencl", "webgpu"):
        return  # per-example gradients of a module run there in test_nn_conv_training_step
    c = _case("2d_nhwc_groups_valid")
    f = _fa_fn(c)
    x, w = _data(c)
    xs = rng.standard_normal((3,) + c.lhs).astype(np.float32)

    def loss(w, x):
        return fnp.sum(f(x[None], w) ** 2)
    with _fallback(device):
        got = fa.jit(fa.vmap(fa.grad(loss), in_axes=(None, 0)))(_put(w, device), _put(xs[:, 0], device))
    jf = _jax_fn(c)
    want = jax.vmap(jax.grad(lambda w, x: (jf(x[None], w) ** 2).sum()), in_axes=(None, 0))(w, xs[:, 0])
    _close(got, want, f"per-example gradients on {device}")


# ----------------------------------------------------------------------------- float64 finite differences


@pytest.mark.parametrize("name", ["1d_batch_groups_permuted", "2d_nchw_pairs_negative", "2d_depthwise_nchw",
                                  "3d_groups_lhs_dilation"])
@pytest.mark.enable_x64
def test_grad_against_finite_differences_f64(name):
    c = _case(name)
    f = _fa_fn(c)
    x, w = _data(c, np.float64)
    cot = rng.standard_normal(np.asarray(f(x, w)).shape)

    def loss(a, b):
        return fnp.sum(f(a, b) * cot)
    gx, gw = fa.grad(loss, argnums=(0, 1))(x, w)
    assert gx.dtype == np.float64 and gw.dtype == np.float64
    eps = 1e-6
    for arg, g in ((0, gx), (1, gw)):
        d = rng.standard_normal(c.lhs if arg == 0 else c.rhs)
        plus = [x + eps * d, w] if arg == 0 else [x, w + eps * d]
        minus = [x - eps * d, w] if arg == 0 else [x, w - eps * d]
        fd = (float(loss(*plus)) - float(loss(*minus))) / (2 * eps)
        np.testing.assert_allclose(float(np.sum(np.asarray(g) * d)), fd, rtol=1e-6, atol=1e-8)


def test_second_order_and_jvp():
    c = _case("1d_depthwise_same_lower")
    f, jf = _fa_fn(c), _jax_fn(c)
    x, w = _data(c)
    tx, tw = _data(c)
    out, tan = fa.jvp(f, (x, w), (tx, tw))
    jout, jtan = jax.jvp(jf, (x, w), (tx, tw))
    _close(out, jout, "jvp primal")
    _close(tan, jtan, "jvp tangent")
    # d/dw of (d/dx sum(f^2)) . 1: second order through both transposes.
    h = fa.jit(fa.grad(lambda w: fnp.sum(fa.grad(lambda x: fnp.sum(f(x, w) ** 2))(x))))(w)
    jh = jax.grad(lambda w: jax.grad(lambda x: (jf(x, w) ** 2).sum())(x).sum())(w)
    _close(h, jh, "grad of grad")


# ----------------------------------------------------------------------------- dtypes, sizes


def test_bfloat16_accumulates_in_float32(device):
    import ml_dtypes
    bf16 = np.dtype(ml_dtypes.bfloat16)
    c = _case("2d_nhwc_same")
    x, w = _data(c)
    xb, wb = x.astype(bf16), w.astype(bf16)
    want = np.asarray(_jax_fn(c)(xb.astype(np.float32), wb.astype(np.float32)))

    def f(a, b):
        return fa.lax.conv_general_dilated(a, b, c.strides, c.padding, dimension_numbers=c.dn,
                                           preferred_element_type=fnp.float32)
    # OpenCL C and WGSL have no bfloat16: there the equations fall back to numpy:0 (the dtype is the reason).
    with _fallback(device) if device.backend not in ("webgpu", "opencl") else _quiet():
        out = f(_put(xb, device), _put(wb, device))
        assert out.dtype == np.float32
        _close(out, want, f"bf16 -> f32 on {device}", tol=1e-5)
        plain = fa.lax.conv_general_dilated(_put(xb, device), _put(wb, device), c.strides, c.padding,
                                            dimension_numbers=c.dn)
        assert plain.dtype == bf16
        _close(np.asarray(plain).astype(np.float32), want, f"bf16 on {device}", tol=1e-2)
        gx = fa.grad(lambda a, b: fnp.sum(f(a, b)))(_put(xb, device), _put(wb, device))
        assert gx.dtype == bf16


@contextlib.contextmanager
def _quiet():
    # webgpu has no bfloat16 at all: those equations fall back whatever the kernels (docs/design.md).
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", fa.FallbackWarning)
        yield


def test_integers_exact_and_wrapping(device):
    x = rng.integers(-50, 50, (2, 3, 6, 5)).astype(np.int32)
    w = rng.integers(-50, 50, (4, 3, 2, 3)).astype(np.int32)
    x[0, 0, 0, 0] = 2**30
    want = np.asarray(jlax.conv_general_dilated(x, w, (1, 2), ((1, 0), (0, 1))))
    with _quiet():
        got = fa.lax.conv_general_dilated(_put(x, device), _put(w, device), (1, 2), ((1, 0), (0, 1)))
    assert got.dtype == np.int32
    np.testing.assert_array_equal(np.asarray(got), want)
    i8 = fa.lax.conv_general_dilated(x.astype(np.int8), w.astype(np.int8), (1, 1), "VALID",
                                     preferred_element_type=np.int32)
    want8 = jlax.conv_general_dilated(x.astype(np.int8), w.astype(np.int8), (1, 1), "VALID",
                                      preferred_element_type=np.int32)
    assert i8.dtype == np.int32
    np.testing.assert_array_equal(np.asarray(i8), np.asarray(want8))


def test_zero_size(device):
    cases = [((0, 3, 5, 5), (2, 3, 2, 2)),   # empty batch
             ((2, 0, 5, 5), (2, 0, 2, 2)),   # no input features: zeros
             ((2, 3, 5, 5), (0, 3, 2, 2))]   # no output features
    for ls, rs in cases:
        x, w = np.ones(ls, np.float32), np.ones(rs, np.float32)
        want = np.asarray(jlax.conv_general_dilated(x, w, (1, 1), "SAME"))
        with _fallback(device):
            got = fa.jit(lambda a, b: fa.lax.conv(a, b, (1, 1), "SAME"))(_put(x, device), _put(w, device))
            np.testing.assert_array_equal(np.asarray(got), want)
            gx, gw = fa.grad(lambda a, b: fnp.sum(fa.lax.conv(a, b, (1, 1), "SAME")), argnums=(0, 1))(
                _put(x, device), _put(w, device))
        assert gx.shape == ls and gw.shape == rs
        jx, jw = jax.grad(lambda a, b: jlax.conv_general_dilated(a, b, (1, 1), "SAME").sum(), argnums=(0, 1))(x, w)
        np.testing.assert_array_equal(np.asarray(gx), np.asarray(jx))
        np.testing.assert_array_equal(np.asarray(gw), np.asarray(jw))


def test_reference_memory_is_linear():
    # 64 x 64 x 64 input, 5 x 5 kernel: an im2col matrix would hold 25x the input; the reference loops over taps.
    import tracemalloc
    x = np.ones((1, 64, 64, 64), np.float32)
    w = np.ones((64, 64, 5, 5), np.float32) / 1600
    xa, wa = fnp.asarray(x), fnp.asarray(w)
    tracemalloc.start()
    out = fa.lax.conv(xa, wa, (1, 1), "SAME")
    out.block_until_ready()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 8 * x.nbytes, f"the reference peaked at {peak} bytes for a {x.nbytes}-byte input"
    np.testing.assert_allclose(np.asarray(out)[0, :, 32, 32], 1.0, rtol=1e-5)


# ----------------------------------------------------------------------------- the lax API


def test_lax_shorthands():
    x = rng.standard_normal((2, 3, 8, 7)).astype(np.float32)
    w = rng.standard_normal((4, 3, 3, 2)).astype(np.float32)
    hi = jlax.Precision.HIGHEST
    _close(fa.lax.conv(x, w, (2, 1), "SAME"), jlax.conv(x, w, (2, 1), "SAME", precision=hi), "conv")
    _close(fa.lax.conv_with_general_padding(x, w, (1, 2), ((1, 2), (-1, 1)), (2, 1), (1, 2)),
           jlax.conv_with_general_padding(x, w, (1, 2), ((1, 2), (-1, 1)), (2, 1), (1, 2), precision=hi),
           "conv_with_general_padding")
    dn = fa.lax.conv_dimension_numbers(x.shape, w.shape, ("NHWC", "OIHW", "NCHW"))
    jdn = jlax.conv_dimension_numbers(x.shape, w.shape, ("NHWC", "OIHW", "NCHW"))
    assert isinstance(dn, ConvDimensionNumbers) and tuple(dn) == tuple(jdn)
    assert fa.lax.ConvDimensionNumbers is ConvDimensionNumbers
    assert tuple(fa.lax.conv_dimension_numbers(x.shape, w.shape, None)) == tuple(
        jlax.conv_dimension_numbers(x.shape, w.shape, None))
    assert fa.lax.padtype_to_pads((7, 8), (3, 2), (2, 3), "SAME") == tuple(
        tuple(p) for p in jlax.padtype_to_pads((7, 8), (3, 2), (2, 3), "SAME"))


@pytest.mark.parametrize("padding", ["SAME", "VALID", ((1, 2), (0, 1))])
@pytest.mark.parametrize("transpose_kernel", [False, True])
def test_conv_transpose(padding, transpose_kernel):
    x = rng.standard_normal((2, 5, 6, 3)).astype(np.float32)
    w = rng.standard_normal((3, 2, 4, 3) if transpose_kernel else (3, 2, 3, 4)).astype(np.float32)
    got = fa.lax.conv_transpose(x, w, (2, 3), padding, rhs_dilation=(1, 2), transpose_kernel=transpose_kernel)
    want = jlax.conv_transpose(x, w, (2, 3), padding, rhs_dilation=(1, 2), transpose_kernel=transpose_kernel,
                               precision=jlax.Precision.HIGHEST)
    _close(got, want, f"conv_transpose {padding} {transpose_kernel}")
    x1 = rng.standard_normal((2, 3, 7)).astype(np.float32)
    w1 = rng.standard_normal((3, 5, 3)).astype(np.float32)   # the forward kernel: 5 -> 3 features
    got = fa.lax.conv_transpose(x1, w1, (2,), "SAME", dimension_numbers=("NCH", "OIH", "NCH"),
                                transpose_kernel=True)
    want = jlax.conv_transpose(x1, w1, (2,), "SAME", dimension_numbers=("NCH", "OIH", "NCH"),
                               transpose_kernel=True, precision=jlax.Precision.HIGHEST)
    _close(got, want, "conv_transpose 1-d")


def test_conv_transpose_is_the_input_gradient():
    # TensorFlow's convention: conv_transpose(transpose_kernel=True) of g is the gradient of conv with respect
    # to its input (for SAME padding and an input size that is a multiple of the stride).
    x = rng.standard_normal((1, 8, 8, 2)).astype(np.float32)
    w = rng.standard_normal((3, 3, 2, 4)).astype(np.float32)
    dn = ("NHWC", "HWIO", "NHWC")
    y = fa.lax.conv_general_dilated(x, w, (2, 2), "SAME", dimension_numbers=dn)
    g = rng.standard_normal(y.shape).astype(np.float32)
    gx = fa.grad(lambda a: fnp.sum(fa.lax.conv_general_dilated(a, w, (2, 2), "SAME", dimension_numbers=dn) * g))(x)
    t = fa.lax.conv_transpose(g, w, (2, 2), "SAME", dimension_numbers=dn, transpose_kernel=True)
    _close(t, gx, "conv_transpose as the input gradient")


def test_the_ir_and_the_verifier():
    c = _case("2d_batch_groups_nhwc")
    x, w = _data(c)
    f = _fa_fn(c)
    for g, args in ((f, (x, w)), (fa.grad(lambda a, b: fnp.sum(f(a, b)), argnums=(0, 1)), (x, w)),
                    (fa.vmap(f, in_axes=(0, None)), (np.stack([x, x]), w))):
        prog = fa.make_ir(g)(*args)
        fa.check_program(prog)
        assert "conv_general_dilated" in str(prog)


# ----------------------------------------------------------------------------- numpy's convolve / correlate


@pytest.mark.parametrize("mode", ["full", "same", "valid"])
def test_convolve_correlate_against_numpy(mode, device):
    if device.backend not in ("numpy", "jax") and mode != "same":
        return  # the other modes differ only in padding, which the table covers on every device
    pairs = [(5, 3), (4, 6), (6, 4), (1, 1), (7, 2)] if device.backend in ("numpy", "jax") else [(5, 3), (4, 6)]
    with _fallback(device):
        for n, m in pairs:
            a = rng.standard_normal(n).astype(np.float32)
            v = rng.standard_normal(m).astype(np.float32)
            for name in ("convolve", "correlate"):
                got = getattr(fnp, name)(_put(a, device), _put(v, device), mode)
                _close(got, getattr(np, name)(a, v, mode), f"{name} {n} {m} {mode} on {device}", tol=1e-5)
    if device.backend == "numpy":
        ai, vi = np.array([1, 2, 3, 4], np.int32), np.array([2, -1], np.int32)
        np.testing.assert_array_equal(np.asarray(fnp.convolve(ai, vi, mode)), np.convolve(ai, vi, mode))
        ac = (rng.standard_normal(5) + 1j * rng.standard_normal(5)).astype(np.complex64)
        vc = (rng.standard_normal(3) + 1j * rng.standard_normal(3)).astype(np.complex64)
        _close(fnp.correlate(vc, ac, mode), np.correlate(vc, ac, mode), "complex correlate", tol=1e-5)
        ab, vb = np.array([True, False, True]), np.array([True, True])
        np.testing.assert_array_equal(np.asarray(fnp.convolve(ab, vb, mode)), np.convolve(ab, vb, mode))


def test_convolve_errors():
    with pytest.raises(ValueError, match="cannot be empty"):
        fnp.convolve(np.ones(3, np.float32), np.ones(0, np.float32))
    with pytest.raises(ShapeError, match="must be 1-D"):
        fnp.correlate(np.ones((2, 2), np.float32), np.ones(2, np.float32))
    with pytest.raises(ValueError, match="mode"):
        fnp.convolve(np.ones(3, np.float32), np.ones(2, np.float32), "circular")


# ----------------------------------------------------------------------------- bad input


def _conv(x_shape, w_shape, strides=(1, 1), padding="VALID", **kw):
    return fa.lax.conv_general_dilated(np.ones(x_shape, np.float32), np.ones(w_shape, np.float32), strides, padding,
                                       **kw)


def test_bad_input_errors():
    # feature counts that disagree (with feature_group_count given)
    with pytest.raises(ShapeError, match=r"4 features.*feature_group_count=2.*needs 2 input features.*has 3"):
        _conv((1, 4, 5, 5), (4, 3, 2, 2), feature_group_count=2)
    with pytest.raises(ShapeError, match=r"3 features.*needs 3 input features.*has 2"):
        _conv((1, 3, 5, 5), (4, 2, 2, 2))
    # a group count that does not divide the features / the batch
    with pytest.raises(ShapeError, match=r"feature_group_count=2 does not divide the input's 3 features"):
        _conv((1, 3, 5, 5), (4, 1, 2, 2), feature_group_count=2)
    with pytest.raises(ShapeError, match=r"feature_group_count=2 does not divide the kernel's 3 output"):
        _conv((1, 4, 5, 5), (3, 2, 2, 2), feature_group_count=2)
    with pytest.raises(ShapeError, match=r"batch_group_count=2 does not divide the input's batch of 3"):
        _conv((3, 2, 5, 5), (4, 2, 2, 2), batch_group_count=2)
    with pytest.raises(ValueError, match="at most one of feature_group_count"):
        _conv((2, 4, 5, 5), (4, 2, 2, 2), feature_group_count=2, batch_group_count=2)
    # strides or dilations <= 0
    with pytest.raises(ValueError, match=r"window_strides must be >= 1.*\(1, 0\)"):
        _conv((1, 2, 5, 5), (2, 2, 2, 2), strides=(1, 0))
    with pytest.raises(ValueError, match=r"rhs_dilation must be >= 1.*\(-1, 1\)"):
        _conv((1, 2, 5, 5), (2, 2, 2, 2), rhs_dilation=(-1, 1))
    with pytest.raises(ValueError, match=r"lhs_dilation must be >= 1"):
        _conv((1, 2, 5, 5), (2, 2, 2, 2), padding=((0, 0), (0, 0)), lhs_dilation=(0, 1))
    with pytest.raises(ValueError, match="feature_group_count must be >= 1"):
        _conv((1, 2, 5, 5), (2, 2, 2, 2), feature_group_count=0)
    # an unknown padding string; string padding with lhs_dilation
    with pytest.raises(ValueError, match=r"unknown padding 'SAMEISH'.*'SAME', 'SAME_LOWER', 'VALID'"):
        _conv((1, 2, 5, 5), (2, 2, 2, 2), padding="SAMEISH")
    with pytest.raises(ValueError, match="lhs_dilation"):
        _conv((1, 2, 5, 5), (2, 2, 2, 2), padding="SAME", lhs_dilation=(2, 1))
    # padding pairs of the wrong length
    with pytest.raises(ShapeError, match=r"padding needs 2 \(low, high\) pairs.*\(\(1, 1\),\)"):
        _conv((1, 2, 5, 5), (2, 2, 2, 2), padding=((1, 1),))
    with pytest.raises(ShapeError, match=r"padding needs 2"):
        _conv((1, 2, 5, 5), (2, 2, 2, 2), padding=((1, 1, 1), (0, 0)))
    with pytest.raises(ShapeError, match=r"window_strides needs 2 entries"):
        _conv((1, 2, 5, 5), (2, 2, 2, 2), strides=(1,))
    # dimension-number strings that disagree with the ranks (or with each other)
    with pytest.raises(ShapeError, match=r"spec 'NHWC' has 4 letters but the lhs \(input\) has rank 3"):
        _conv((1, 5, 2), (2, 2, 2), strides=(1,), dimension_numbers=("NHWC", "HWIO", "NHWC"))
    with pytest.raises(ShapeError, match="spatial letters"):
        _conv((1, 5, 5, 2), (2, 2, 2, 2), dimension_numbers=("NHWC", "HDIO", "NHWC"))
    with pytest.raises(ShapeError, match="exactly one 'O' and one 'I'"):
        _conv((1, 5, 5, 2), (2, 2, 2, 2), dimension_numbers=("NHWC", "HWII", "NHWC"))
    with pytest.raises(ShapeError, match="same rank"):
        _conv((1, 2, 5, 5), (2, 2, 2))
    # a window larger than the padded input
    with pytest.raises(ShapeError, match=r"window of 5 is larger than the padded input of 4"):
        _conv((1, 2, 4, 4), (2, 2, 3, 3), rhs_dilation=(2, 1))
    with pytest.raises(ShapeError, match="negative padding"):
        _conv((1, 2, 4, 4), (2, 2, 1, 1), padding=((-3, -2), (0, 0)))
    # dtypes
    with pytest.raises(DTypeError, match="one dtype"):
        fa.lax.conv(np.ones((1, 1, 3), np.float32), np.ones((1, 1, 2), np.float16), (1,), "VALID")
    with pytest.raises(DTypeError, match="not bool"):
        fa.lax.conv(np.ones((1, 1, 3), bool), np.ones((1, 1, 2), bool), (1,), "VALID")


# ----------------------------------------------------------------------------- nn.Conv


def _jax_layer(m, x):
    n = m.num_spatial_dims
    sp = "DHW"[3 - n:] if n <= 3 else None
    dn = ("N" + sp + "C", "OI" + sp, "N" + sp + "C") if m.channels_last else ("NC" + sp, "OI" + sp, "NC" + sp)
    y = jlax.conv_general_dilated(x, np.asarray(m.weight), m.stride, m.padding, rhs_dilation=m.dilation,
                                  dimension_numbers=dn, feature_group_count=m.groups,
                                  precision=jlax.Precision.HIGHEST)
    b = np.asarray(m.bias) if m.channels_last else np.asarray(m.bias).reshape((-1,) + (1,) * n)
    return y + b


def test_nn_conv_layers_against_jax():
    key = fa.random.key(0)
    layers = [
        (fa.nn.Conv1d(3, 4, 3, stride=2, padding=1, key=key, bias_init=fa.nn.initializers.normal(1.0)), (2, 9, 3)),
        (fa.nn.Conv2d(4, 6, (3, 2), padding="SAME", dilation=(1, 2), groups=2, key=key,
                      bias_init=fa.nn.initializers.normal(1.0)), (2, 7, 6, 4)),
        (fa.nn.Conv2d(4, 4, 3, groups=4, channels_last=False, key=key, bias_init=fa.nn.initializers.normal(1.0)),
         (2, 4, 6, 6)),
        (fa.nn.Conv3d(2, 3, 2, padding=((1, 0), 0, (0, 1)), key=key, bias_init=fa.nn.initializers.normal(1.0)),
         (1, 4, 3, 4, 2)),
    ]
    for m, shape in layers:
        x = rng.standard_normal(shape).astype(np.float32)
        assert m.weight.shape == (m.out_channels, m.in_channels // m.groups) + m.kernel_size
        _close(m(x), _jax_layer(m, x), f"{type(m).__name__}")
        # one example (no batch axis) and two leading batch axes
        _close(m(x[0]), _jax_layer(m, x[:1])[0], f"{type(m).__name__} unbatched")
        xx = np.stack([x, x])
        _close(m(xx), np.stack([_jax_layer(m, x)] * 2), f"{type(m).__name__} two batch axes")
    with pytest.raises(ShapeError, match="in_channels=3"):
        layers[0][0](np.ones((2, 9, 4), np.float32))
    with pytest.raises(ValueError, match="groups=3 must divide"):
        fa.nn.Conv2d(4, 6, 3, groups=3, key=key)
    with pytest.raises(ValueError, match="kernel_size needs 2 positive ints"):
        fa.nn.Conv2d(4, 6, (3, 0), key=key)


def test_nn_conv_training_step(device):
    key = fa.random.key(1)
    k1, k2, k3 = fa.random.split(key, 3)
    model = fa.nn.Sequential([fa.nn.Conv2d(1, 4, 3, padding="SAME", key=k1), fa.nn.relu,
                              fa.nn.Conv2d(4, 2, 3, stride=2, key=k2), lambda y: fnp.mean(y, axis=(1, 2))])
    x = rng.standard_normal((3, 6, 6, 1)).astype(np.float32)
    y = rng.standard_normal((3, 2)).astype(np.float32)

    def loss(m, x, y):
        return fnp.mean((m(x) - y) ** 2)
    with _fallback(device):
        mdl = fa.device_put(model, device)
        xd, yd = _put(x, device), _put(y, device)
        val, g = fa.jit(fa.value_and_grad(loss))(mdl, xd, yd)
        per = fa.jit(fa.vmap(fa.grad(loss), in_axes=(None, 0, 0)))(mdl, xd[:, None], yd[:, None])
    ref_val, ref_g = fa.jit(fa.value_and_grad(loss))(model, x, y)
    _close(val, ref_val, f"loss on {device}")
    for a, b in zip(fa.tree_util.tree_leaves(g), fa.tree_util.tree_leaves(ref_g)):
        _close(a, b, f"module gradient on {device}")
    # the mean of the per-example gradients is the batch gradient
    for a, b in zip(fa.tree_util.tree_leaves(per), fa.tree_util.tree_leaves(ref_g)):
        _close(np.asarray(a).mean(axis=0), b, f"per-example gradients on {device}")


# ----------------------------------------------------------------------------- ONNX export


ONNX_CASES = ["1d_batch_groups_permuted", "2d_nchw_pairs_negative", "2d_nhwc_groups_valid", "2d_depthwise_nchw",
              "2d_permuted_layout", "3d_groups_lhs_dilation", "3d_batch_groups_ncdhw"]


def _ort(model, feeds):
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime is in the test extra")
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def test_onnx_export_conv(tmp_path):
    onnx = pytest.importorskip("onnx", reason="onnx is in the test extra")
    for name in ONNX_CASES:
        c = _case(name)
        x, w = _data(c)
        f = _fa_fn(c)
        model = fa.export.onnx(f, x, w, path=tmp_path / f"{name}.onnx")
        onnx.checker.check_model(model)
        assert any(n.op_type == "Conv" for n in model.graph.node), name
        got = _ort(model, dict(zip([i.name for i in model.graph.input], (x, w), strict=True)))
        _close(got[0], np.asarray(fa.jit(f, device=NUMPY)(x, w)), f"onnx {name}", tol=1e-5)
    # integers take the exact tap path (ONNX's Conv is floating point only)
    xi = rng.integers(-9, 9, (2, 2, 5, 4)).astype(np.int32)
    wi = rng.integers(-9, 9, (4, 1, 2, 2)).astype(np.int32)

    def fi(a, b):
        return fa.lax.conv_general_dilated(a, b, (2, 1), ((0, 1), (-1, 1)), (1, 2), (2, 1), feature_group_count=2)
    model = fa.export.onnx(fi, xi, wi, path=tmp_path / "int.onnx")
    feeds = dict(zip([i.name for i in model.graph.input], (xi, wi), strict=True))
    np.testing.assert_array_equal(_ort(model, feeds)[0], np.asarray(fi(xi, wi)))


def test_onnx_export_cnn_and_its_gradient(tmp_path):
    key = fa.random.key(2)
    k1, k2 = fa.random.split(key)
    conv1 = fa.nn.Conv2d(1, 3, 3, padding="SAME", key=k1)
    conv2 = fa.nn.Conv2d(3, 2, 3, stride=2, channels_last=False, key=k2)

    def net(params, x):
        c1, c2 = params
        h = fa.nn.relu(c1(x))
        return c2(fnp.moveaxis(h, -1, 1))

    x = rng.standard_normal((2, 8, 8, 1)).astype(np.float32)
    model = fa.export.onnx(net, (conv1, conv2), x, path=tmp_path / "cnn.onnx", bake_argnums=(0,))
    got = _ort(model, {model.graph.input[0].name: x})
    _close(got[0], np.asarray(fa.jit(net, device=NUMPY)((conv1, conv2), x)), "onnx cnn", tol=1e-5)

    def grad_x(x):
        return fa.grad(lambda x: fnp.sum(net((conv1, conv2), x) ** 2))(x)
    model = fa.export.onnx(grad_x, x, path=tmp_path / "grad.onnx")
    got = _ort(model, {model.graph.input[0].name: x})
    _close(got[0], np.asarray(fa.jit(grad_x, device=NUMPY)(x)), "onnx gradient of the cnn", tol=1e-5)
