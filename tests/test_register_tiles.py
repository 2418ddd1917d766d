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
    # skinny products with a transposed rhs (``d @ w.T``) run transposed, the rhs read where it lies as the
    # kernel's lhs: rows of ``w`` past whole panels (301), an epilogue, a reshaped and a sliced weight
    ("transposed_rhs", lambda a, b: a @ b.T, (_f32(33, 256), _f32(301, 256)), lambda a, b: a @ b.T, True),
    ("transposed_rhs_fused", lambda a, b, c: fa.nn.relu(a @ b.T + c), (_f32(20, 512), _f32(130, 512), _f32(130)),
     lambda a, b, c: np.maximum(a @ b.T + c, 0), True),
    ("transposed_rhs_reshaped", lambda a, b: a @ b.reshape(260, 256).T, (_f32(64, 256), _f32(260, 16, 16)),
     lambda a, b: a @ b.reshape(260, 256).T, True),
    ("transposed_rhs_sliced", lambda a, b: a @ b[:, 8:].T, (_f32(7, 256), _f32(300, 264)),
     lambda a, b: a @ b[:, 8:].T, True),
    # packs writing a block of contraction steps per work item (an operand whose contraction runs along memory
    # and whose panel lanes do not): 4 steps where 8 do not divide the contraction (68, past it in 72-step
    # panels), a contraction over two dimensions, a batch of transposed right operands
    ("blocks_k68", lambda a, b: a @ b, (_f32(100, 68), _f32(68, 72)), lambda a, b: a @ b, True),
    ("blocks_two_dims", _dg((((1, 2), (0, 1)), ((), ()))), (_f32(40, 4, 16), _f32(4, 16, 36)),
     lambda a, b: np.einsum("mij,ijn->mn", a, b), True),
    ("blocks_batched_transposed", lambda a, b: a @ fnp.swapaxes(b, 1, 2), (_f32(3, 40, 64), _f32(3, 36, 64)),
     lambda a, b: a @ np.swapaxes(b, 1, 2), True),
]

def _float8(*shape):
    """float8 weights (held as bytes) and their float32 values."""
    w8 = fnp.asarray(_f32(*shape)).astype(dtypes.float8_e4m3fn)
    return w8, np.asarray(w8.astype(np.float32))


_W8, _W8_VALUES = _float8(256, 264)
_MATMULS += [
    # a float8 weight read through its ``astype``: the unpacked and transposed forms would read its bytes as
    # floats, so it is packed (converted by the pack)
    ("float8_rhs", lambda a, b: a @ b.astype(np.float32), (_f32(32, 256), _W8), lambda a, b: a @ _W8_VALUES, True),
    ("float8_rhs_transposed", lambda a, b: a @ b.astype(np.float32).T, (_f32(32, 264), _W8),
     lambda a, b: a @ _W8_VALUES.T, True),
]

# The cases whose product runs transposed (a weight read as the kernel's lhs: ``DotGroup._transposed_product``)
# or whose packs write blocks of contraction steps (``register_tiles.pack_block``); the others write panel rows.
_T, _B = "weight as lhs", "blocks"
_FORMS = {"batched": {_B}, "fused": {_B}, "skinny": {_B}, "skinny_sliced": {_B}, "skinny_reshaped_fused": {_B},
          "transposed_rhs": {_T, _B}, "transposed_rhs_fused": {_T, _B}, "transposed_rhs_reshaped": {_T, _B},
          "transposed_rhs_sliced": {_T, _B}, "blocks_k68": {_B}, "blocks_two_dims": {_B},
          "blocks_batched_transposed": {_B}, "float8_rhs": {_B}, "float8_rhs_transposed": {_B}}


@pytest.mark.parametrize("name,f,args,ref,register", _MATMULS, ids=[m[0] for m in _MATMULS])
def test_register_matmul(cl, name, f, args, ref, register):
    with _register(cl):
        jf = fa.jit(f, device=cl)
        kernels = jf.lower(*args).kernels()
        names = [k.name for k in kernels]
        got = jf(*args)
    want = ref(*(np.asarray(a, np.float64) for a in args))
    _check(got, want)
    assert any(n.startswith("dot_reg") for n in names) == register, names
    if register:  # one pack kernel (both operands; a skinny product's lhs), then the product with the epilogue
        assert [n.split("_")[:2] for n in names[-2:]] == [["dot", "pack"], ["dot", "reg"]], names
        assert sum(n.startswith("dot_pack") for n in names) == 1, names
        # the forms the cases are named for: a weight read as the kernel's lhs, packs writing blocks
        forms = {f for f, there in (("weight as lhs", "const long arow" in kernels[-1].source),
                                    ("blocks", "kq" in kernels[-2].source)) if there}
        assert forms == _FORMS.get(name, set()), (name, forms)


@pytest.mark.enable_x64
@pytest.mark.parametrize("form", ["packed", "transposed"])
def test_register_matmul_float64_and_specials(cl, form):
    """float64 accumulates in float64; an inf or NaN reaches exactly the outputs it touches (the padding of
    the panels is zero and never meets it; in the transposed form, rows of the weight past the last are read
    again for outputs that are not stored)."""
    if form == "packed":
        a, b = _f32(45, 72).astype(np.float64), _f32(72, 61).astype(np.float64)
        a[3, 5], b[7, 60] = np.inf, np.nan
        f = lambda x, y: x @ y  # noqa: E731
    else:   # ``b`` is a weight ``[257, 256]`` read transposed
        a, b = _f32(9, 256).astype(np.float64), _f32(257, 256).astype(np.float64)
        a[3, 5], b[256, 7] = np.inf, np.nan
        f = lambda x, y: x @ y.T  # noqa: E731
    with _register(cl):
        if dtypes.float64 not in cl.impl.capabilities(cl).dtypes:
            pytest.skip("the OpenCL device has no float64")
        jf = fa.jit(f, device=cl)
        names = _kernels(jf, a, b)
        assert any(n.startswith("dot_reg") for n in names)
        assert (sum(n.startswith("dot_pack") for n in names), len(names)) == (1, 2), names
        got = np.asarray(jf(a, b))
    want = f(a, b)
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
    much as the product); a small rhs, rows 4 KiB apart and batches (slower unpacked), ragged columns or
    contraction, and more rows are packed. A transposed one: ``test_skinny_transposed_products``."""
    from fnarray.lowering.kernels.groups.dot import UNPACKED_RHS_ROWS

    def matmul(x, w):
        return x @ w
    one, two = [("dot_pack", 1), ("dot_reg", 0)], [("dot_pack", 2), ("dot_reg", 0)]
    assert _packed(matmul, _f32(UNPACKED_RHS_ROWS, 256), _f32(256, 256)) == one
    assert _packed(matmul, _f32(UNPACKED_RHS_ROWS + 1, 256), _f32(256, 256)) == two
    assert _packed(matmul, _f32(32, 128), _f32(128, 128)) == two   # a small rhs: its pack is cheap
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


def test_skinny_transposed_products():
    """``d @ w.T`` with at most ``UNPACKED_RHS_ROWS`` rows and a weight of at least ``UNPACKED_RHS_MIN`` elements
    runs transposed: one pack (``d``, across the output's rows), the product reading ``w`` where it lies as its
    lhs, its rows 4 to a work item (``_tile_cost``'s ``lhs="rows"``). More rows, a small weight, a contraction
    not in whole steps of 8 and a batch pack both operands. Values: ``test_register_matmul``."""
    from fnarray.lowering.kernels.groups.dot import UNPACKED_RHS_ROWS

    def product(d, w):
        return d @ w.T
    one, two = [("dot_pack", 1), ("dot_reg", 0)], [("dot_pack", 2), ("dot_reg", 0)]
    assert _packed(product, _f32(UNPACKED_RHS_ROWS, 256), _f32(256, 256)) == one
    assert _packed(product, _f32(UNPACKED_RHS_ROWS + 1, 256), _f32(256, 256)) == two
    assert _packed(product, _f32(32, 128), _f32(128, 128)) == two
    assert _packed(product, _f32(32, 260), _f32(256, 260)) == two
    assert _packed(lambda d, w: d @ fnp.swapaxes(w, 1, 2), _f32(2, 32, 256), _f32(2, 256, 256)) == two
    pocl = dataclasses.replace(CAPS, tuning_facts=(("device", "cpu"), ("compiler", "pocl")))
    sched = schedule(_traced(product, _f32(32, 512), _f32(784, 512)), pocl, workgroup=64)
    src = render_opencl(sched.launches[-1].kernel)
    assert src.count("const long arow") == 4, src


def _pack_items(f, *args):
    """The pack launch of ``f``'s schedule on ``CAPS``: its global size and, per panel buffer it writes, the
    panel rows ``batch * panels * kp``."""
    sched = schedule(_traced(f, *args), CAPS, workgroup=64)
    (ln,) = [ln for ln in sched.launches if ln.kernel.name.startswith("dot_pack")]
    return ln, [math.prod(a.shape[:3]) for a in ln.args if len(getattr(a, "shape", ())) == 4]


def test_pack_work_item_writes_a_panel_row():
    """A pack kernel's work item copies one panel row (its ``width`` lanes in a loop, the panel's index
    arithmetic once) where the panel's lanes run along memory (``x.T`` and ``d`` of ``x.T @ d``): one work item
    per element was 3x slower on PoCL 3.0. Both operands are packed by one kernel, each in its own whole
    work-groups. Values: ``test_register_matmul``."""
    ln, rows = _pack_items(lambda x, d: x.T @ d, _f32(64, 100), _f32(64, 72))
    assert len(rows) == 2
    assert -(-rows[0] // 64) * 64 + rows[1] <= ln.global_size[0] < -(-rows[0] // 64) * 64 + rows[1] + 64
    assert render_opencl(ln.kernel).count("for (int r") == 2


@pytest.mark.parametrize("k,block", [(64, 8), (68, 4), (66, 1)])
def test_pack_work_item_writes_a_block(k, block):
    """Where the contraction runs along memory and the panel's lanes do not (the lhs ``x`` of ``x @ w``; the rhs
    ``w.T`` of ``d @ w.T``), a work item writes ``PACK_BLOCK`` (8) panel rows, or 4 where 8 do not divide the
    contraction, or one (66: neither does): ``pack_block``. Values: ``test_register_matmul``."""
    ln, rows = _pack_items(lambda x, w: x @ w, _f32(100, k), _f32(k, 72))
    first = -(-(rows[0] // block) // 64) * 64
    assert first + rows[1] <= ln.global_size[0] < first + rows[1] + 64
    ln, rows = _pack_items(lambda d, w: d @ w.T, _f32(100, k), _f32(72, k))
    assert -(-(rows[0] // block) // 64) * 64 + rows[1] // block <= ln.global_size[0]
