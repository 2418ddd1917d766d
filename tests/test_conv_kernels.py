"""Convolutions and window reductions as kernels on opencl:0 and webgpu:0 (``fnarray/lowering/kernels/conv.py``,
``windows.py``), with ``fallback="error"``: a kernel or an error, never the numpy backend in disguise.

- values and gradients with respect to both operands of ``conv_general_dilated`` over strides, both dilations,
  padding forms (SAME, VALID, pairs, negative), feature and batch groups, three layouts and 1-D/3-D, against
  numpy:0 (the reference, itself tested against JAX in the conv tests);
- the three kernel forms of a convolution: the direct kernel, the tiled implicit GEMM (opencl:0; webgpu:0 with
  ``tiling_pays`` as on a GPU adapter) and the split contraction of targets that cap loop lengths (forced);
- window reductions (sum/max/min with strides, padding, both dilations), ties and NaNs in max pooling and its
  gradient (``select_and_scatter_add``) and JVP (``select_and_gather_add``);
- the schedule: a convolution with bias and ReLU is one kernel, and so is each convolution of its gradient;
- the browser export of a small conv + pool network runs in headless Chromium and agrees with numpy:0.
"""

from __future__ import annotations


import numpy as np
import pytest

import fnarray as fa
import fnarray.lax as lax
import fnarray.numpy as fnp
from fnarray.core import dtypes
from fnarray.core import primitives as P
from fnarray.core import windows as W
from fnarray.devices.backend import Capabilities
from fnarray.lowering.kernels import render_opencl, render_wgsl, schedule
from helpers import kernel_capabilities

pytestmark = pytest.mark.usefixtures("no_fallback")
from test_browser import _inputs, browser, page, site, wdev  # noqa: F401  (the browser fixtures)

REF = fa.devices("numpy")[0]
rng = np.random.default_rng(14)


def _f32(*shape):
    return rng.standard_normal(shape).astype(np.float32)


_caps = kernel_capabilities   # a kernel device scheduled with other Capabilities (tests/helpers.py)


def _close(got, want, name, rtol=2e-5, atol=2e-5):
    for g, w in zip(fa.tree_util.tree_leaves(got), fa.tree_util.tree_leaves(want), strict=True):
        g, w = np.asarray(g), np.asarray(w)
        assert g.shape == w.shape, (name, g.shape, w.shape)
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol * max(1.0, float(np.abs(w).max())), err_msg=name)


# ------------------------------------------------------------------------------------------- convolutions

# name, lhs shape, rhs shape, conv_general_dilated arguments
CONV_CASES = [
    ("same", (2, 3, 7, 6), (4, 3, 3, 2), dict(window_strides=(1, 1), padding="SAME")),
    ("strided_pairs", (2, 3, 9, 8), (4, 3, 3, 3), dict(window_strides=(2, 3), padding=((1, 2), (0, 1)))),
    ("rhs_dilation_valid", (2, 3, 9, 8), (4, 3, 2, 3), dict(window_strides=(1, 1), padding="VALID",
                                                           rhs_dilation=(2, 2))),
    ("lhs_dilation_negative_pad", (2, 3, 5, 4), (4, 3, 3, 3), dict(window_strides=(1, 2), padding=((2, -1), (1, 2)),
                                                                  lhs_dilation=(2, 3))),
    ("feature_groups", (2, 6, 7, 6), (4, 3, 3, 2), dict(window_strides=(1, 1), padding="SAME",
                                                       feature_group_count=2)),
    ("depthwise", (2, 4, 6, 5), (8, 1, 3, 3), dict(window_strides=(1, 1), padding="SAME_LOWER",
                                                  feature_group_count=4)),
    ("batch_groups", (4, 3, 7, 6), (6, 3, 3, 2), dict(window_strides=(1, 1), padding="VALID", batch_group_count=2)),
    ("nhwc_hwio", (2, 7, 6, 3), (3, 2, 3, 4), dict(window_strides=(2, 1), padding="SAME",
                                                  dimension_numbers=("NHWC", "HWIO", "NHWC"))),
    ("permuted_layout", (5, 2, 3, 6), (3, 3, 2, 4), dict(window_strides=(1, 1), padding="SAME",
                                                        dimension_numbers=("HNCW", "HIWO", "CWNH"))),
    ("1d", (2, 3, 11), (4, 3, 3), dict(window_strides=(2,), padding="SAME")),
    ("3d", (1, 2, 5, 4, 4), (3, 2, 2, 3, 2), dict(window_strides=(1, 2, 1), padding="SAME")),
]


def _conv_args(lhs_shape, rhs_shape, kw):
    x, w = _f32(*lhs_shape), _f32(*rhs_shape)
    out = fa.make_ir(lambda a, b: lax.conv_general_dilated(a, b, **kw))(x, w).outvars[0].aval
    return x, w, _f32(*out.shape)


def _conv_and_grads(kw, ct):
    def f(a, b):
        y = lax.conv_general_dilated(a, b, **kw)
        return y, fa.grad(lambda a, b: fnp.sum(lax.conv_general_dilated(a, b, **kw) * ct), argnums=(0, 1))(a, b)
    return f


@pytest.mark.parametrize("name,lhs_shape,rhs_shape,kw", CONV_CASES, ids=[c[0] for c in CONV_CASES])
def test_conv_and_its_gradients_are_kernels(kdev, name, lhs_shape, rhs_shape, kw):
    x, w, ct = _conv_args(lhs_shape, rhs_shape, kw)
    f = _conv_and_grads(kw, ct)
    _close(fa.jit(f, device=kdev)(x, w), fa.jit(f, device=REF)(x, w), name)


def test_tiled_conv_kernel(kdev):
    """The implicit GEMM in local memory (webgpu:0 scheduled as for a GPU adapter, opencl:0 as for a GPU
    device), with its gradients."""
    kw = dict(window_strides=(1, 1), padding="SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
    x, w, ct = _conv_args((2, 9, 10, 8), (3, 3, 8, 16), kw)
    f = _conv_and_grads(kw, ct)
    with _caps(kdev, tiling_pays=True, matmul_tiling="local"):
        jf = fa.jit(f, device=kdev)
        kinds = [k.name for k in jf.lower(x, w).kernels()]
        got = jf(x, w)
    assert sum(n.startswith("conv_tiled") for n in kinds) == 3, kinds
    _close(got, fa.jit(f, device=REF)(x, w), "tiled")


def test_split_contraction_where_loops_are_capped(kdev):
    """A target that stops long loops (lavapipe's 65,535 iterations) gets partial sums plus a summing kernel."""
    kw = dict(window_strides=(1, 1), padding="SAME", feature_group_count=1)
    x, w, _ = _conv_args((2, 8, 6, 5), (4, 8, 3, 3), kw)
    f = lambda a, b: fa.nn.relu(lax.conv_general_dilated(a, b, **kw) + 0.25)  # noqa: E731
    with _caps(kdev, max_loop_iterations=40, tiling_pays=False):
        jf = fa.jit(f, device=kdev)
        names = [k.name for k in jf.lower(x, w).kernels()]
        got = jf(x, w)
    assert [n.split("_conv_general")[0] for n in names] == ["conv_part", "conv_sum"], names
    _close(got, fa.jit(f, device=REF)(x, w), "split")


def test_integer_conv(kdev):
    x = rng.integers(-5, 5, (2, 3, 6, 5)).astype(np.int32)
    w = rng.integers(-3, 3, (4, 3, 3, 3)).astype(np.int32)
    f = lambda a, b: lax.conv_general_dilated(a, b, (2, 1), "SAME")  # noqa: E731
    np.testing.assert_array_equal(np.asarray(fa.jit(f, device=kdev)(x, w)), np.asarray(fa.jit(f, device=REF)(x, w)))


# ------------------------------------------------------------------------------------------- window ops

WINDOW_CASES = [
    ("pool_2x2", (2, 7, 6, 3), (1, 2, 2, 1), (1, 2, 2, 1), "VALID", None, None),
    ("same_3x3", (2, 7, 6), (1, 3, 3), (1, 1, 1), "SAME", None, None),
    ("dilations_pairs", (5, 8), (2, 3), (2, 2), ((1, 0), (0, 2)), (2, 1), (1, 2)),
    ("1d_negative_pad", (9,), (3,), (2,), ((-1, 2),), None, None),
]


def _ties(shape):
    x = rng.integers(-2, 3, shape).astype(np.float32)  # many ties
    x.flat[1] = np.nan
    return x


@pytest.mark.parametrize("name,shape,wd,ws,pad,bd,wdl", WINDOW_CASES, ids=[c[0] for c in WINDOW_CASES])
def test_window_reductions_and_their_gradients_are_kernels(kdev, name, shape, wd, ws, pad, bd, wdl):
    x = _ties(shape)

    def f(a):
        outs = [lax.reduce_window_sum(a, wd, ws, pad, bd, wdl), lax.reduce_window_max(a, wd, ws, pad, bd, wdl),
                lax.reduce_window_min(a, wd, ws, pad, bd, wdl)]
        grads = [fa.grad(lambda a, g=g: fnp.sum(fnp.sin(g(a, wd, ws, pad, bd, wdl))))(a)
                 for g in (lax.reduce_window_sum, lax.reduce_window_max, lax.reduce_window_min)]
        tangent = fa.jvp(lambda a: lax.reduce_window_max(a, wd, ws, pad, bd, wdl), (a,), (fnp.cos(a),))[1]
        return outs, grads, tangent
    _close(fa.jit(f, device=kdev)(x), fa.jit(f, device=REF)(x), name)


def test_selection_ties_nans_and_padding_match_the_reference(kdev):
    x = np.array([[1., 1., 3., 3., np.nan, 2., -np.inf, -np.inf, 5., np.nan, np.nan]], np.float32)
    kw = dict(window_dimensions=(1, 3), window_strides=(1, 1), padding=((0, 0), (2, 1)), base_dilation=(1, 1),
              window_dilation=(1, 1))
    n = W.window_out_shape("t", x.shape, **kw)[1]
    src = np.arange(1, n + 1, dtype=np.float32)[None]
    for sp in (P.ge, P.le):
        def f(s, a, sp=sp):
            return (W.select_and_scatter_add_p.bind(s, a, select_prim=sp, **kw),
                    W.select_and_gather_add_p.bind(a * 2.0 + 1.0, a, select_prim=sp, **kw))
        for g, w in zip(fa.jit(f, device=kdev)(src, x), fa.jit(f, device=REF)(src, x), strict=True):
            np.testing.assert_array_equal(np.asarray(g), np.asarray(w), err_msg=str(sp))


def test_large_window_gradient_writes_the_selections_first(kdev):
    """Windows of more than 16 taps: one kernel writes every window's selected tap, the next scatters."""
    x = _ties((2, 9, 8))
    kw = dict(window_dimensions=(1, 5, 4), window_strides=(1, 1, 2), padding=((0, 0), (2, 2), (1, 2)),
              base_dilation=(1, 1, 2), window_dilation=(1, 1, 1))
    src = _f32(*W.window_out_shape("t", x.shape, **kw))
    for sp in (P.ge, P.le):
        jf = fa.jit(lambda s, a, sp=sp: W.select_and_scatter_add_p.bind(s, a, select_prim=sp, **kw), device=kdev)
        assert [k.name.split("_select_and")[0] for k in jf.lower(src, x).kernels()] == ["select_taps", "select"]
        ref = fa.jit(lambda s, a, sp=sp: W.select_and_scatter_add_p.bind(s, a, select_prim=sp, **kw), device=REF)
        np.testing.assert_array_equal(np.asarray(jf(src, x)), np.asarray(ref(src, x)), err_msg=str(sp))


# ------------------------------------------------------------------------------------------- the schedule

CAPS = Capabilities(dtypes=frozenset(dtypes.ALL_DTYPES), max_workgroup_size=256, local_memory=True,
                    tiling_pays=True, control_flow="host")
WEBGPU_LIKE = Capabilities(dtypes=frozenset({dtypes.float32, dtypes.int32, dtypes.uint32, dtypes.bool_}),
                           max_buffers_per_kernel=8, max_workgroup_size=256, max_dispatch=65535,
                           local_memory=True, tiling_pays=False, control_flow="host")


def _layer(x, w, b):
    y = lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
    return fa.nn.relu(y + b)


@pytest.mark.parametrize("caps,render,kind", [(CAPS, render_opencl, "conv_tiled"), (WEBGPU_LIKE, render_wgsl, "conv")],
                         ids=["tiled_opencl", "direct_wgsl"])
def test_conv_bias_relu_is_one_kernel_and_sizes_are_arguments(caps, render, kind):
    x, w, b = _f32(4, 16, 16, 8), _f32(3, 3, 8, 16), _f32(16)
    launches = schedule(fa.make_ir(_layer)(x, w, b), caps).launches
    assert len(launches) == 1, [launch.kernel.name for launch in launches]
    (launch,) = launches
    assert launch.kernel.name.startswith(kind + "_conv_general_dilated")
    assert {e.primitive.name for e in launch.eqns} >= {"conv_general_dilated", "add", "max"}
    src = render(launch.kernel)
    # One compiled kernel serves other sizes of the same rank and layout: only the arguments change.
    other = schedule(fa.make_ir(_layer)(_f32(2, 12, 20, 8), _f32(5, 3, 8, 16), b), caps).launches
    assert len(other) == 1 and render(other[0].kernel) == src


def test_every_convolution_of_a_cnn_gradient_is_one_kernel():
    x, w1, w2 = _f32(2, 10, 10, 3), _f32(3, 3, 3, 8), _f32(3, 3, 8, 4)

    def loss(w1, w2, x):
        h = _layer(x, w1, 0.1)
        h = lax.reduce_window_max(h, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
        y = lax.conv_general_dilated(h, w2, (1, 1), "VALID", dimension_numbers=("NHWC", "HWIO", "NHWC"))
        return fnp.sum(y * y)

    prog = fa.make_ir(fa.grad(loss, argnums=(0, 1)))(w1, w2, x)
    n_conv = sum(e.primitive.name == "conv_general_dilated" for e in prog.eqns)
    for caps in (CAPS, WEBGPU_LIKE):
        launches = schedule(prog, caps).launches
        conv_kernels = [lc for lc in launches if lc.kind == "conv"]
        assert len(conv_kernels) == n_conv >= 4
        assert sum(lc.kind == "window" for lc in launches) == 2  # the pool and its select_and_scatter_add


# ------------------------------------------------------------------------------------------- the browser


def _cnn_params():
    return {"w1": _f32(3, 3, 1, 8) * 0.5, "b1": _f32(8) * 0.1, "w2": _f32(3, 3, 8, 8) * 0.3, "b2": _f32(8) * 0.1}


def _cnn(params, x):
    h = _layer(x, params["w1"], params["b1"])
    h = lax.reduce_window_max(h, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
    h = _layer(h, params["w2"], params["b2"])
    return lax.reduce_window_sum(h, (1, 4, 4, 1), (1, 1, 1, 1), "VALID") / 16.0


def test_exported_cnn_runs_in_chromium(page, site, wdev):  # noqa: F811 (fixtures)
    """Conv + pool exported as WGSL (direct kernels, and tiled as for a GPU adapter) and run in the browser."""
    root, _ = site
    params, x = _cnn_params(), rng.uniform(0, 1, (2, 16, 16, 1)).astype(np.float32)
    want = np.asarray(fa.jit(_cnn, device=REF)(params, x))
    for tiled in (False, True):
        name = f"cnn_tiled{int(tiled)}"
        with _caps(wdev, tiling_pays=tiled):
            m = fa.export.webgpu(_cnn, params, x, path=root / name, bake_argnums=(0,))
        names = [k["name"] for k in m["kernels"]]
        assert sum(n.startswith("conv_tiled") for n in names) == (1 if tiled else 0), names
        assert any(n.startswith("window") for n in names), names
        got = page.evaluate("([dir, inputs]) => window.runBundle(dir, inputs)",
                            [name, _inputs(m, _cnn, (params, x), (0,))])
        np.testing.assert_allclose(np.asarray(got[0]).reshape(want.shape), want, rtol=3e-5, atol=3e-5)
