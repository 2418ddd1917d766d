"""The register-tiled matrix-product and convolution kernels (``lowering/kernels/groups/register_tiles.py``:
operands packed into zero-padded panels, 4 x 8 outputs per work item, no local memory), which opencl:0 runs
where ``Capabilities.matmul_tiling == "register"`` (CPU OpenCL devices; forced here, so the tests mean the same
on a GPU device), against NumPy in float64.

Shapes that stress the tiling: sizes that are not multiples of the panels or of the contraction step, a
single row or column, a contraction of 1, batches, contractions over other dimensions than the last (dimension
numbers, transposed operands), operands that are slices, broadcasts or fused producers, the fused epilogue;
convolutions with input features not a multiple of 4, strides, both dilations, groups, channels-first layouts
and their gradients. The schedule tests need no device.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math

import numpy as np
import pytest

import fnarray as fa
import fnarray.lax as lax
import fnarray.numpy as fnp
from fnarray.core import dtypes
from fnarray.devices.backend import Capabilities
from fnarray.lowering.kernels import render_opencl, schedule
from helpers import fallback_mode, require_backend

rng = np.random.default_rng(17)


def _f32(*shape):
    return rng.standard_normal(shape).astype(np.float32)


@pytest.fixture(scope="module")
def cl():
    return require_backend("opencl")[0]


@contextlib.contextmanager
def _register(dev):
    """``dev`` scheduled with ``matmul_tiling="register"`` (and fallback errors: a kernel or an error)."""
    state = dev.impl.state(dev)
    old = state.caps
    state.caps = dataclasses.replace(old, tiling_pays=True, matmul_tiling="register")
    try:
        with fallback_mode("error"):
            yield
    finally:
        state.caps = old


def _kernels(jf, *args):
    return [k.name for k in jf.lower(*args).kernels()]


def _check(got, want, scale=None, tol=2e-5):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape
    scale = scale if scale is not None else 1.0 + np.abs(want).max()
    np.testing.assert_allclose(got, want, rtol=0, atol=tol * scale)


def _dg(dn):
    return lambda a, b: lax.dot_general(a, b, dn)


# (name, function, operands, NumPy float64 reference, whether the register kernel must run)
_MATMULS = [
    ("ragged", lambda a, b: a @ b, (_f32(37, 129), _f32(129, 45)), lambda a, b: a @ b, True),
    ("k_not_mult_4", lambda a, b: a @ b, (_f32(64, 67), _f32(67, 72)), lambda a, b: a @ b, True),
    ("k_is_1", lambda a, b: a @ b, (_f32(260, 1), _f32(1, 257)), lambda a, b: a @ b, True),
    ("one_row", lambda a, b: a @ b, (_f32(1, 300), _f32(300, 257)), lambda a, b: a @ b, False),
    ("one_col", lambda a, b: a @ b, (_f32(300, 257), _f32(257, 1)), lambda a, b: a @ b, False),
    ("batched", lambda a, b: a @ b, (_f32(3, 40, 72), _f32(3, 72, 36)), lambda a, b: a @ b, True),
    ("transposed_dims", _dg((((0,), (1,)), ((), ()))), (_f32(70, 50), _f32(30, 70)), lambda a, b: a.T @ b.T, True),
    ("batch_last", _dg((((1,), (0,)), ((2,), (2,)))), (_f32(33, 40, 2), _f32(40, 50, 2)),
     lambda a, b: np.einsum("mkb,knb->bmn", a, b), True),
    ("views", lambda a, b: a[1:, 3:].T @ fnp.broadcast_to(b[:, None], (61, 36)),
     (_f32(62, 45), _f32(61)), lambda a, b: a[1:, 3:].T @ np.broadcast_to(b[:, None], (61, 36)), True),
    ("fused", lambda a, b, c: fa.nn.relu(fnp.exp(a * 0.1) @ b + c), (_f32(50, 60), _f32(60, 70), _f32(70)),
     lambda a, b, c: np.maximum(np.exp(a * 0.1) @ b + c, 0), True),
    # skinny products read the rhs where it lies (no pack): column panels past the last one (272 columns pad to
    # whole work-groups of panels for every tile width), a slice, a reshape and an epilogue
    ("skinny", lambda a, b: a @ b, (_f32(32, 256), _f32(256, 272)), lambda a, b: a @ b, True),
    ("skinny_sliced", lambda a, b: a @ b.reshape(2, 256, 272)[1], (_f32(20, 256), _f32(512, 272)),
     lambda a, b: a @ b[256:], True),
    ("skinny_reshaped_fused", lambda a, b, c: fa.nn.relu(a @ b.reshape(256, 272) + c),
     (_f32(17, 256), _f32(16, 16, 272), _f32(272)), lambda a, b, c: np.maximum(a @ b.reshape(256, 272) + c, 0),
     True),
]


@pytest.mark.parametrize("name,f,args,ref,register", _MATMULS, ids=[m[0] for m in _MATMULS])
def test_register_matmul(cl, name, f, args, ref, register):
    with _register(cl):
        jf = fa.jit(f, device=cl)
        names = _kernels(jf, *args)
        got = jf(*args)
    want = ref(*(np.asarray(a, np.float64) for a in args))
    _check(got, want)
    assert any(n.startswith("dot_reg") for n in names) == register, names
    if register:  # one pack kernel (both operands; a skinny product's lhs), then the product with the epilogue
        assert [n.split("_")[:2] for n in names[-2:]] == [["dot", "pack"], ["dot", "reg"]], names
        assert sum(n.startswith("dot_pack") for n in names) == 1, names


@pytest.mark.enable_x64
def test_register_matmul_float64_and_specials(cl):
    """float64 accumulates in float64; an inf or NaN reaches exactly the outputs it touches (the padding of
    the panels is zero and never meets it)."""
    a, b = _f32(45, 70).astype(np.float64), _f32(70, 61).astype(np.float64)
    a[3, 5], b[7, 60] = np.inf, np.nan
    with _register(cl):
        if dtypes.float64 not in cl.impl.capabilities(cl).dtypes:
            pytest.skip("the OpenCL device has no float64")
        jf = fa.jit(lambda x, y: x @ y, device=cl)
        assert any(n.startswith("dot_reg") for n in _kernels(jf, a, b))
        got = np.asarray(jf(a, b))
    want = a @ b
    assert got.dtype == np.float64
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
    fin = np.isfinite(want)
    np.testing.assert_allclose(got[fin], want[fin], rtol=1e-12, atol=1e-12)


def _conv_f64(x, w, kw):
    """The reference: the numpy backend's convolution in float64 (itself tested against JAX in
    tests/test_conv.py)."""
    return np.asarray(fa.jit(lambda a, b: lax.conv_general_dilated(a, b, **kw), device="numpy:0")(
        np.asarray(x, np.float64), np.asarray(w, np.float64)))


_NHWC = ("NHWC", "HWIO", "NHWC")
_CONVS = [
    ("same_nhwc", (2, 9, 10, 8), (3, 3, 8, 16), dict(window_strides=(1, 1), padding="SAME", dimension_numbers=_NHWC)),
    ("cin_1", (16, 8, 8, 1), (3, 3, 1, 32), dict(window_strides=(1, 1), padding="SAME", dimension_numbers=_NHWC)),
    ("cin_5_stride", (2, 13, 12, 5), (3, 3, 5, 12), dict(window_strides=(2, 1), padding="SAME",
                                                          dimension_numbers=_NHWC)),
    ("nchw_dilated", (2, 8, 9, 7), (16, 8, 3, 2), dict(window_strides=(1, 1), padding=((1, 2), (2, 0)),
                                                       lhs_dilation=(2, 1), rhs_dilation=(1, 2))),
    ("groups", (4, 12, 12, 12), (16, 6, 3, 3), dict(window_strides=(1, 1), padding="VALID", feature_group_count=2)),
    ("batch_minor", (5, 6, 8, 12), (3, 3, 8, 16), dict(window_strides=(1, 1), padding="SAME",
                                                       dimension_numbers=("HWCN", "HWIO", "NHWC"))),
    ("conv1d", (3, 40, 6), (5, 6, 20), dict(window_strides=(1,), padding="SAME",
                                          dimension_numbers=("NWC", "WIO", "NWC"))),
    # Weight gradients over consecutive input features (a multiple of 4) of strided convolutions: their
    # contraction loops over the in-bounds window range only (``ConvGroup._features_outer_ranged``).
    ("stride_2_nhwc", (2, 11, 12, 8), (3, 3, 8, 16), dict(window_strides=(2, 2), padding="SAME",
                                                          dimension_numbers=_NHWC)),
    ("conv1d_stride_3", (8, 101, 8), (5, 8, 20), dict(window_strides=(3,), padding=((2, 1),),
                                                     dimension_numbers=("NWC", "WIO", "NWC"))),
]
# The weight gradient's contraction runs the input's features outermost where they are not its unit stride
# (every case but batch_minor), over the in-bounds window range where 4 consecutive rows share positions.
_FEATURES_OUTER = {"same_nhwc": "ranged", "cin_1": "tested", "cin_5_stride": "tested", "nchw_dilated": "tested",
                   "groups": "tested", "conv1d": "tested", "stride_2_nhwc": "ranged", "conv1d_stride_3": "ranged"}


@pytest.mark.parametrize("name,xs,ws,kw", _CONVS, ids=[c[0] for c in _CONVS])
def test_register_conv_and_gradients(cl, name, xs, ws, kw):
    x, w = _f32(*xs), _f32(*ws)
    y = _conv_f64(x, w, kw)
    ct = _f32(*y.shape)

    def f(a, b):
        out, vjp = fa.vjp(lambda p, q: lax.conv_general_dilated(p, q, **kw), a, b)
        return (fa.nn.relu(out + 0.25), *vjp(fnp.asarray(ct)))

    with _register(cl):
        jf = fa.jit(f, device=cl)
        names = _kernels(jf, x, w)
        src = "".join(str(k) for k in jf.lower(x, w).kernels())
        got = jf(x, w)
    assert any(n.startswith("conv_reg") for n in names), names
    form = _FEATURES_OUTER.get(name)
    assert any(n.startswith("conv_pack_fo") for n in names) == (form is not None), names
    assert ("wlo" in src) == (form == "ranged")
    _check(got[0], np.maximum(y + 0.25, 0))
    # The gradients against the numpy backend's VJP (the transposed convolutions) in float64.
    def vjp64(a, b, c):
        return fa.vjp(lambda p, q: lax.conv_general_dilated(p, q, **kw), a, b)[1](c)

    dx, dw = (np.asarray(v) for v in fa.jit(vjp64, device="numpy:0")(
        np.asarray(x, np.float64), np.asarray(w, np.float64), np.asarray(ct, np.float64)))
    _check(got[1], dx)
    _check(got[2], dw)


# ------------------------------------------------------------------------------------- schedules, no device

CAPS = Capabilities(dtypes=frozenset(dtypes.ALL_DTYPES), max_workgroup_size=256, local_memory=True,
                    tiling_pays=True, control_flow="host", matmul_tiling="register")


def _traced(f, *args):
    return fa.jit(f).lower(*args).program


def test_register_schedule_and_text():
    """Packs, then the product with its epilogue; panel offsets in 64 bits; one work-group size baked in."""
    a, b, c = _f32(128, 64), _f32(64, 128), _f32(128)
    sched = schedule(_traced(lambda x, w, v: fa.nn.relu(x @ w + v), a, b, c), CAPS, workgroup=64)
    names = [ln.kernel.name for ln in sched.launches]
    assert [n.split("_")[:2] for n in names] == [["dot", "pack"], ["dot", "reg"]], names
    src = render_opencl(sched.launches[-1].kernel)
    assert "reqd_work_group_size(8, 8, 1)" in src and "const long" in src and "__local" not in src
    assert "barrier" not in src


def _packed(f, *args):
    """Per launch of ``f``'s schedule on ``CAPS``: its kind and the panel buffers (4-d) it writes."""
    out = []
    for ln in schedule(_traced(f, *args), CAPS, workgroup=64).launches:
        written = [a for a in ln.args if len(getattr(a, "shape", ())) == 4 and ln.kernel.name.startswith("dot_pack")]
        out.append(("_".join(ln.kernel.name.split("_")[:2]), len(written)))
    return out


def test_skinny_products_read_the_rhs_unpacked():
    """At most ``UNPACKED_RHS_ROWS`` rows, a rhs with consecutive columns is read where it lies (its pack cost as
    much as the product); a small rhs, a transposed one (``x @ w.T``), rows 4 KiB apart and batches (slower
    unpacked), ragged columns or contraction, and more rows are packed."""
    from fnarray.lowering.kernels.groups.dot import UNPACKED_RHS_ROWS

    def matmul(x, w):
        return x @ w
    one, two = [("dot_pack", 1), ("dot_reg", 0)], [("dot_pack", 2), ("dot_reg", 0)]
    assert _packed(matmul, _f32(UNPACKED_RHS_ROWS, 256), _f32(256, 256)) == one
    assert _packed(matmul, _f32(UNPACKED_RHS_ROWS + 1, 256), _f32(256, 256)) == two
    assert _packed(matmul, _f32(32, 128), _f32(128, 128)) == two   # a small rhs: its pack is cheap
    assert _packed(lambda x, w: x @ w.T, _f32(32, 256), _f32(256, 256)) == two
    assert _packed(matmul, _f32(32, 256), _f32(256, 260)) == two   # 260 columns: not whole panels of 8
    assert _packed(matmul, _f32(32, 258), _f32(258, 256)) == two   # 258: not whole steps of 4
    assert _packed(matmul, _f32(16, 64), _f32(64, 1024)) == two  # rows 4 KiB apart
    assert _packed(matmul, _f32(2, 32, 256), _f32(2, 256, 256)) == two   # a batch


def test_register_form_needs_64_bit_indices():
    """A target without int64 (WebGPU) keeps the local-memory form even when it asks for register tiles."""
    webgpu_like = dataclasses.replace(CAPS, dtypes=frozenset({dtypes.float32, dtypes.int32, dtypes.uint32,
                                                              dtypes.bool_}))
    sched = schedule(_traced(lambda x, w: x @ w, _f32(64, 64), _f32(64, 128)), webgpu_like, workgroup=64)
    assert [ln.kernel.name.split("_")[:2] for ln in sched.launches] == [["dot", "tiled"]]


def test_pack_work_item_writes_a_panel_row():
    """A pack kernel's work item copies one panel row (its ``width`` lanes in a loop, the panel's index
    arithmetic once): one work item per element was 3x slower on PoCL 3.0. Both operands are packed by one
    kernel, each in its own whole work-groups. Values: ``test_register_matmul``."""
    sched = schedule(_traced(lambda x, w: x @ w, _f32(100, 64), _f32(64, 72)), CAPS, workgroup=64)
    (ln,) = [ln for ln in sched.launches if ln.kernel.name.startswith("dot_pack")]
    rows = [math.prod(a.shape[:3]) for a in ln.args if len(getattr(a, "shape", ())) == 4]
    assert len(rows) == 2 and all(a.shape[3] > 1 for a in ln.args if len(getattr(a, "shape", ())) == 4)
    assert -(-rows[0] // 64) * 64 + rows[1] <= ln.global_size[0] < -(-rows[0] // 64) * 64 + rows[1] + 64
    assert render_opencl(ln.kernel).count("for (int r") == 2
