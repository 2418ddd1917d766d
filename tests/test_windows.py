"""Windowed reductions: ``fa.lax.reduce_window`` (sum/max/min), its gradients, and ``fa.nn`` pooling.

References: ``jax.lax.reduce_window`` and ``jax.grad`` (JAX is a test oracle), float64 central finite
differences, a Python loop for ``vmap``, and a NumPy float64 loop over output positions for the pooling
functions (flax's definitions). The full table runs on numpy:0; every device runs a smaller selection
against numpy:0 (docs/design.md test tiers).
"""

from __future__ import annotations

import contextlib
import itertools
import operator
import warnings

import numpy as np
import pytest

import fnarray as fa
import fnarray.numpy as fnp
from fnarray import lax, nn
from fnarray.core.errors import DTypeError, ShapeError

jax = pytest.importorskip("jax")
jnp = jax.numpy

#: How opencl and webgpu may run these primitives: "error" now that the kernel compiler has window kernels
#: (branch convkern); "warn" would let them fall back to numpy.
KERNEL_FALLBACK = "error"

rng = np.random.default_rng(14)

# (name, shape, window_dimensions, window_strides, padding, base_dilation, window_dilation)
TABLE = [
    ("pool2x2", (4, 6), (2, 2), (2, 2), "VALID", None, None),
    ("same", (5, 7), (3, 2), (1, 2), "SAME", None, None),
    ("dilations", (5, 7), (2, 3), (2, 1), ((1, 2), (0, 1)), (2, 1), (1, 2)),
    ("nhwc_same_lower", (2, 6, 5, 3), (1, 3, 3, 1), (1, 2, 1, 1), "SAME_LOWER", None, (1, 1, 2, 1)),
    ("crop_1d", (7,), (3,), (2,), ((-1, 2),), (2,), None),
    ("3d", (3, 4, 5), (2, 2, 2), (1, 1, 2), ((0, 1), (1, 0), (1, 1)), None, None),
]
OPS = {"sum": (lax.reduce_window_sum, jax.lax.add, 0.0), "max": (lax.reduce_window_max, jax.lax.max, -np.inf),
       "min": (lax.reduce_window_min, jax.lax.min, np.inf)}


def _ties(shape, dtype=np.float32):
    """Small integers: many ties within each window."""
    return rng.integers(-3, 4, shape).astype(dtype)


def _distinct(shape):
    n = int(np.prod(shape))
    return (rng.permutation(n) * 0.37 - n * 0.1 + rng.uniform(0, 0.1, n)).reshape(shape)


def _kw(case):
    _, _, w, s, pad, bd, wd = case
    return dict(window_dimensions=w, window_strides=s, padding=pad, base_dilation=bd, window_dilation=wd)


def _jax_fn(op, case):
    _, jop, init = OPS[op]
    kw = _kw(case)
    return lambda a: jax.lax.reduce_window(a, init, jop, **kw)


def _fa_fn(op, case):
    f = OPS[op][0]
    kw = _kw(case)
    return lambda a: f(a, **kw)


def _jax_has_grad(op, case):
    # JAX's VJP of max/min windows raises for window dilation and for negative padding (select_and_gather_add's
    # transpose); ours has both, checked against finite differences.
    _, _, _, _, pad, _, wd = case
    cropped = not isinstance(pad, str) and any(v < 0 for p in pad for v in p)
    return op == "sum" or ((wd is None or all(d == 1 for d in wd)) and not cropped)


@contextlib.contextmanager
def _on(device):
    """Kernel backends run with fa.config.fallback = KERNEL_FALLBACK; FallbackWarnings are collected."""
    old = fa.config.fallback
    if device.backend in ("opencl", "webgpu"):
        fa.config.fallback = KERNEL_FALLBACK
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", fa.FallbackWarning)
            yield
    finally:
        fa.config.fallback = old


# ------------------------------------------------------------------------------------ the table on numpy:0


@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("case", TABLE, ids=[c[0] for c in TABLE])
def test_values_and_grads_match_jax(op, case):
    x = _ties(case[1])
    f, jf = _fa_fn(op, case), _jax_fn(op, case)
    with_grad = _jax_has_grad(op, case)
    ct = rng.standard_normal(jax.eval_shape(jf, x).shape).astype(np.float32)

    def jboth(a):  # one XLA compilation per case: the values and (where JAX has it) the gradient
        return jf(a), (jax.grad(lambda b: jnp.sum(jf(b) * ct))(a) if with_grad else a)

    want, jg = (np.asarray(v) for v in jax.jit(jboth)(x))
    for got in (f(fnp.asarray(x)), fa.jit(f)(fnp.asarray(x))):
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6)
    if with_grad:  # ties: both give the first maximal element of a window its cotangent
        g = fa.grad(lambda a: fnp.sum(f(a) * ct))(fnp.asarray(x))
        np.testing.assert_allclose(np.asarray(g), jg, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("case", TABLE, ids=[c[0] for c in TABLE])
@pytest.mark.enable_x64
def test_grad_matches_finite_differences_float64(op, case):
    x = _distinct(case[1])
    f = _fa_fn(op, case)
    out_shape = f(fnp.asarray(x)).shape
    ct = rng.standard_normal(out_shape)

    def loss(a):  # windows of padding and holes alone give -inf (max) / inf (min): left out
        y = f(a)
        return fnp.sum(fnp.where(fnp.isfinite(y), y, 0.0) * ct)

    g = np.asarray(fa.jit(fa.grad(loss))(fnp.asarray(x)))
    v = rng.standard_normal(x.shape)
    h = 1e-6
    fd = (float(loss(fnp.asarray(x + h * v))) - float(loss(fnp.asarray(x - h * v)))) / (2 * h)
    np.testing.assert_allclose(np.sum(g * v), fd, rtol=1e-6, atol=1e-8)
    # second order through select_and_gather_add <-> select_and_scatter_add (or the linear sum)
    hv = fa.jvp(fa.grad(loss), (fnp.asarray(x),), (fnp.asarray(v),))[1]
    np.testing.assert_allclose(np.asarray(hv), 0.0, atol=1e-12)  # piecewise linear: no curvature


@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("case", TABLE[1:4], ids=[c[0] for c in TABLE[1:4]])
def test_vmap_matches_a_loop(op, case):
    f = _fa_fn(op, case)
    xs = _ties((3,) + case[1])
    for axis in (0, 1):
        batched = np.moveaxis(xs, 0, axis)
        got = fa.vmap(f, in_axes=axis)(fnp.asarray(batched))
        want = np.stack([np.asarray(f(fnp.asarray(x))) for x in xs])
        np.testing.assert_array_equal(np.asarray(got), want)
    # per-example gradients (vmap of grad) against a loop of grads
    g = fa.vmap(fa.grad(lambda a: fnp.sum(f(a) ** 2)))(fnp.asarray(xs))
    want = np.stack([np.asarray(fa.grad(lambda a: fnp.sum(f(a) ** 2))(fnp.asarray(x))) for x in xs])
    np.testing.assert_array_equal(np.asarray(g), want)


def test_vmap_of_the_selections_with_one_operand_batched():
    from fnarray.core import primitives as P
    from fnarray.core import windows as W
    params = dict(window_dimensions=(2, 2), window_strides=(1, 2), padding=((1, 0), (0, 1)), base_dilation=(1, 1),
                  window_dilation=(1, 1))
    xs, t = _ties((3, 4, 5)), rng.standard_normal((4, 5)).astype(np.float32)
    got = fa.vmap(lambda x: W.select_and_gather_add_p.bind(fnp.asarray(t), x, select_prim=P.ge, **params))(
        fnp.asarray(xs))
    want = [np.asarray(W.select_and_gather_add_p.bind(fnp.asarray(t), fnp.asarray(x), select_prim=P.ge, **params))
            for x in xs]
    np.testing.assert_array_equal(np.asarray(got), np.stack(want))
    src = rng.standard_normal((3,) + tuple(want[0].shape)).astype(np.float32)
    got = fa.vmap(lambda s: W.select_and_scatter_add_p.bind(s, fnp.asarray(xs[0]), select_prim=P.le, **params))(
        fnp.asarray(src))
    want = [np.asarray(W.select_and_scatter_add_p.bind(fnp.asarray(s), fnp.asarray(xs[0]), select_prim=P.le,
                                                       **params)) for s in src]
    np.testing.assert_array_equal(np.asarray(got), np.stack(want))


def test_max_pool_ties_send_the_gradient_to_the_first_maximum():
    x = np.array([[3.0, 3.0, 1.0, 5.0], [3.0, 2.0, 5.0, 5.0]], np.float32)[None, :, :, None]
    g = fa.grad(lambda a: fnp.sum(nn.max_pool(a, (2, 2), (2, 2))))(fnp.asarray(x))
    want = np.array([[1.0, 0.0, 0.0, 1.0], [0.0, 0.0, 0.0, 0.0]], np.float32)[None, :, :, None]
    np.testing.assert_array_equal(np.asarray(g), want)
    jg = jax.jit(jax.grad(lambda a: jnp.sum(jax.lax.reduce_window(a, -jnp.inf, jax.lax.max, (1, 2, 2, 1),
                                                                  (1, 2, 2, 1), "VALID"))))(x)
    np.testing.assert_array_equal(np.asarray(g), np.asarray(jg))


def test_nan_propagates_and_its_window_selects_the_first_nan():
    x = np.array([[1.0, np.nan, 7.0, np.nan], [9.0, 2.0, 0.0, 1.0]], np.float32)
    out = lax.reduce_window_max(x, (2, 2), (2, 2))
    assert np.isnan(np.asarray(out)).all()
    w = np.array([[1.0, 2.0]], np.float32)
    for f in (lax.reduce_window_max, lax.reduce_window_min):
        g = fa.grad(lambda a, f=f: fnp.sum(f(a, (2, 2), (2, 2)) * w))(fnp.asarray(x))
        np.testing.assert_array_equal(np.asarray(g), [[0.0, 1.0, 0.0, 2.0], [0.0, 0.0, 0.0, 0.0]])


# ------------------------------------------------------------------------------------ reduce_window's API


@pytest.mark.parametrize("comp,init,jcomp", [
    (lax.add, 0.0, jax.lax.add), (fnp.add, 0.0, jax.lax.add), (operator.add, 0.0, jax.lax.add),
    (lambda a, b: a + b, 0.0, jax.lax.add), (lax.max, -np.inf, jax.lax.max), (fnp.maximum, -np.inf, jax.lax.max),
    (lax.min, np.inf, jax.lax.min), (fnp.minimum, np.inf, jax.lax.min),
    (lax.add, 1.5, jax.lax.add), (lax.max, 0.5, jax.lax.max), (lax.min, -0.25, jax.lax.min)])
def test_reduce_window_computations_and_init_values(comp, init, jcomp):
    x = rng.standard_normal((4, 5)).astype(np.float32)
    args = ((2, 3), (1, 2), ((1, 0), (0, 2)), (2, 1), (1, 1))
    got = lax.reduce_window(fnp.asarray(x), init, comp, *args)
    want = jax.jit(lambda a: jax.lax.reduce_window(a, np.float32(init), jcomp, *args))(x)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-6, atol=1e-6)


def test_reduce_window_init_can_be_traced_and_differentiated():
    x = rng.standard_normal((4, 5)).astype(np.float32)

    def f(a, c):
        return fnp.sum(lax.reduce_window(a, c, lax.max, (2, 2)))

    def jf(a, c):  # JAX has no derivative in init_value: the same function written with a maximum
        return jnp.sum(jnp.maximum(jax.lax.reduce_window(a, -jnp.inf, jax.lax.max, (2, 2), (1, 1), "VALID"), c))

    g = fa.jit(fa.grad(f, argnums=(0, 1)))(fnp.asarray(x), fnp.asarray(np.float32(0.3)))
    jg = jax.jit(jax.grad(jf, argnums=(0, 1)))(x, np.float32(0.3))
    for a, b in zip(g, jg, strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6)


def test_integer_windows():
    x = rng.integers(-50, 50, (5, 6)).astype(np.int32)
    for op, (f, jop, _) in OPS.items():
        init = {"sum": 0, "max": np.iinfo(np.int32).min, "min": np.iinfo(np.int32).max}[op]
        got = f(x, (2, 3), (2, 1), "SAME")
        want = jax.jit(lambda a, jop=jop, init=init: jax.lax.reduce_window(a, np.int32(init), jop, (2, 3), (2, 1),
                                                                          "SAME"))(x)
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
        assert got.dtype == np.int32


def test_empty_operands():
    assert lax.reduce_window_sum(np.zeros((0, 4), np.float32), (1, 2)).shape == (0, 3)
    out = lax.reduce_window_max(np.zeros((0, 3), np.float32), (1, 2), padding=((1, 1), (0, 0)))
    np.testing.assert_array_equal(np.asarray(out), np.full((2, 2), -np.inf, np.float32))
    g = fa.grad(lambda a: fnp.sum(lax.reduce_window_max(a, (1, 2))))(fnp.zeros((0, 3)))
    assert g.shape == (0, 3)


def test_padtype_to_pads_matches_jax():
    for args in [((5, 7), (2, 3), (2, 2)), ((4, 1, 9), (3, 1, 4), (1, 3, 2)), ((0,), (2,), (1,))]:
        for mode in ("SAME", "SAME_LOWER", "VALID", "same"):
            assert [tuple(p) for p in lax.padtype_to_pads(*args, mode)] == \
                [tuple(int(v) for v in p) for p in jax.lax.padtype_to_pads(*args, mode)]


@pytest.mark.parametrize("call,err,match", [
    (lambda x: lax.reduce_window(x, 1.0, "mul", (2, 2)), TypeError, "function of two scalars"),
    (lambda x: lax.reduce_window(x, 0.0, lambda a, b: fnp.sum(a * 2 + b), (2, 2)), TypeError, "elementwise"),
    (lambda x: lax.reduce_window((x, x), (0.0, 0.0), lax.add, (2, 2)), TypeError, "pytree"),
    (lambda x: lax.reduce_window_sum(x, (5, 2)), ShapeError, r"window of dimension 0 covers 5 .* only 4"),
    (lambda x: lax.reduce_window_sum(x, (2, 2), window_dilation=(1, 6)), ShapeError,
     r"covers 7 .*window_dilation\[1\]=6"),
    (lambda x: lax.reduce_window_sum(x, (2, 2), (0, 1)), ShapeError, "window_strides must be >= 1"),
    (lambda x: lax.reduce_window_sum(x, (2, 2), base_dilation=(1, -1)), ShapeError, "base_dilation"),
    (lambda x: lax.reduce_window_sum(x, (2, 2), window_dilation=(0, 1)), ShapeError, "window_dilation"),
    (lambda x: lax.reduce_window_sum(x, (2,)), ShapeError, "window_dimensions has 1 entries .* rank 2"),
    (lambda x: lax.reduce_window_sum(x, (2, 2), (1, 1, 1)), ShapeError, "window_strides has 3"),
    (lambda x: lax.reduce_window_sum(x, (2, 2), padding=((1, 1),)), ShapeError, "padding"),
    (lambda x: lax.reduce_window_sum(x, (2, 2), padding="FULL"), ValueError, "SAME_LOWER"),
    (lambda x: lax.reduce_window_sum(x, (2, 2), padding=((-5, 0), (0, 0))), ShapeError, "crops more"),
    (lambda x: lax.reduce_window_sum(x > 0, (2, 2)), DTypeError, "not bool"),
    (lambda x: nn.max_pool(x, (2, 2)), ShapeError, "no room for 2 spatial axes"),
    (lambda x: nn.avg_pool(x[None], (2,), (1, 1)), ShapeError, "strides"),
    (lambda x: nn.max_pool(x[None], (2,), padding=((0, 0), (1, 1))), ShapeError, "padding"),
])
def test_bad_input_names_the_argument(call, err, match):
    with pytest.raises(err, match=match):
        call(fnp.asarray(rng.standard_normal((4, 6)).astype(np.float32)))


# ------------------------------------------------------------------------------------ pooling (flax's)


def _pool_ref(x, window, strides, padding, op, count_include_pad=True):
    """flax's pooling as a NumPy float64 loop over output positions: (*batch, *spatial, features)."""
    x = np.asarray(x, np.float64)
    k = len(window)
    strides = strides or (1,) * k
    spatial = x.shape[x.ndim - k - 1:-1]
    if isinstance(padding, str):
        pads = []
        for n, w, s in zip(spatial, window, strides, strict=True):
            if padding == "VALID":
                pads.append((0, 0))
            else:
                total = max(0, (-(-n // s) - 1) * s + w - n)
                pads.append((total // 2, total - total // 2))
    else:
        pads = list(padding)
    outs = [(n + lo + hi - w) // s + 1 for n, w, s, (lo, hi) in zip(spatial, window, strides, pads, strict=True)]
    out = np.zeros(x.shape[:x.ndim - k - 1] + tuple(outs) + x.shape[-1:])
    for pos in itertools.product(*(range(m) for m in outs)):
        idx = [[p * s - lo + j for j in range(w)] for p, s, (lo, _), w in zip(pos, strides, pads, window, strict=True)]
        inside = [[i for i in ix if 0 <= i < n] for ix, n in zip(idx, spatial, strict=True)]
        block = x[(Ellipsis,) + tuple(np.ix_(*inside)) + (slice(None),)] if all(inside) else None
        axes = tuple(range(x.ndim - k - 1, x.ndim - 1))
        if op == "max":
            val = block.max(axis=axes) if block is not None else -np.inf
        elif op == "min":
            val = block.min(axis=axes) if block is not None else np.inf
        else:
            total = block.sum(axis=axes) if block is not None else 0.0
            val = total / (np.prod(window) if count_include_pad else np.prod([len(i) for i in inside]))
        out[(Ellipsis,) + pos + (slice(None),)] = val
    return out


POOLS = [
    ((2, 8, 8, 3), (2, 2), (2, 2), "VALID"),
    ((2, 7, 6, 2), (3, 3), (2, 1), "SAME"),
    ((7, 6, 2), (2, 3), None, ((1, 0), (2, 1))),          # no batch axis
    ((2, 3, 9, 2), (4,), (3,), "SAME"),                   # two batch axes, 1-D windows
    ((1, 4, 5, 6, 1), (2, 2, 3), (1, 2, 1), "VALID"),     # 3-D
]


@pytest.mark.parametrize("shape,window,strides,padding", POOLS, ids=[str(i) for i in range(len(POOLS))])
def test_pooling_matches_the_flax_definitions(shape, window, strides, padding):
    x = rng.standard_normal(shape).astype(np.float32)
    for fn, op in ((nn.max_pool, "max"), (nn.min_pool, "min"), (nn.avg_pool, "avg")):
        got = fn(fnp.asarray(x), window, strides, padding)
        np.testing.assert_allclose(np.asarray(got), _pool_ref(x, window, strides, padding, op), rtol=2e-6,
                                   atol=1e-6, err_msg=op)
    got = nn.avg_pool(fnp.asarray(x), window, strides, padding, count_include_pad=False)
    np.testing.assert_allclose(np.asarray(got), _pool_ref(x, window, strides, padding, "avg", False), rtol=2e-6,
                               atol=1e-6)


def test_pooling_grads_match_jax():
    x = _ties((2, 6, 6, 3))

    def jmax(a):
        return jax.lax.reduce_window(a, -jnp.inf, jax.lax.max, (1, 3, 3, 1), (1, 2, 2, 1), "SAME")

    def javg(a):
        return jax.lax.reduce_window(a, 0.0, jax.lax.add, (1, 2, 2, 1), (1, 2, 2, 1), "VALID") / 4

    for f, jf in ((lambda a: nn.max_pool(a, (3, 3), (2, 2), "SAME"), jmax),
                  (lambda a: nn.avg_pool(a, (2, 2), (2, 2)), javg)):
        g = fa.jit(fa.grad(lambda a, f=f: fnp.sum(f(a) ** 2)))(fnp.asarray(x))
        jg = jax.jit(jax.grad(lambda a, jf=jf: jnp.sum(jf(a) ** 2)))(x)
        np.testing.assert_allclose(np.asarray(g), np.asarray(jg), rtol=1e-6, atol=1e-6)


def test_avg_pool_of_integers_is_float32():
    out = nn.avg_pool(np.arange(16, dtype=np.int32).reshape(1, 4, 4, 1), (2, 2), (2, 2))
    assert out.dtype == np.float32
    np.testing.assert_array_equal(np.asarray(out)[0, :, :, 0], [[2.5, 4.5], [10.5, 12.5]])


# ------------------------------------------------------------------------------------ every device


DEVICE_CASES = [TABLE[2]]  # both dilations, padding, strides: the richest case


@pytest.mark.parametrize("case", DEVICE_CASES, ids=[c[0] for c in DEVICE_CASES])
def test_on_every_device(device, case):
    x = _ties(case[1])
    fs = [_fa_fn(op, case) for op in OPS]

    def f(a):
        return sum(fnp.sum(g(a) * (i + 1.5)) for i, g in enumerate(fs)), [g(a) for g in fs]

    ref_v, ref_g = fa.jit(fa.value_and_grad(f, has_aux=True), device="numpy:0")(x)
    with _on(device):
        (v, outs), g = fa.jit(fa.value_and_grad(f, has_aux=True), device=device)(x)
        eager = [h(fa.device_put(fnp.asarray(x), device)) for h in fs]
    np.testing.assert_allclose(float(v), float(ref_v[0]), rtol=1e-6)
    for a, b, c in zip(outs, ref_v[1], eager, strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
        np.testing.assert_array_equal(np.asarray(c), np.asarray(b))
    np.testing.assert_allclose(np.asarray(g), np.asarray(ref_g), rtol=1e-6, atol=1e-6)


def test_pooling_on_every_device(device):
    x = _ties((2, 6, 6, 3))

    def f(a):
        y = nn.max_pool(a, (2, 2), (2, 2)) + nn.avg_pool(a, (3, 3), (2, 2), "SAME", count_include_pad=False)
        return fnp.sum(y ** 2), y

    ref = fa.jit(fa.value_and_grad(f, has_aux=True), device="numpy:0")(x)
    with _on(device):
        got = fa.jit(fa.value_and_grad(f, has_aux=True), device=device)(x)
        vg = fa.jit(fa.vmap(fa.grad(lambda a: f(a)[0])), device=device)(x[:, None])
    np.testing.assert_allclose(np.asarray(got[0][1]), np.asarray(ref[0][1]), rtol=2e-6, atol=1e-6)
    np.testing.assert_allclose(np.asarray(got[1]), np.asarray(ref[1]), rtol=2e-6, atol=1e-5)
    np.testing.assert_allclose(np.asarray(vg)[:, 0], np.asarray(ref[1]), rtol=2e-6, atol=1e-5)


# ------------------------------------------------------------------------------------ dot_product_attention


@pytest.mark.parametrize("kw", [dict(local_window_size=(3, 0), is_causal=True),
                                dict(return_residual=True, local_window_size=(1, 2),
                                     key_value_seq_lengths=np.array([4, 6], np.int32))])
def test_dot_product_attention_local_window_and_residual_match_jax(kw):
    q = rng.standard_normal((2, 7, 4, 8)).astype(np.float32)
    k, v = (rng.standard_normal((2, 6, 2, 8)).astype(np.float32) for _ in range(2))
    got = nn.dot_product_attention(q, k, v, **kw)
    want = jax.jit(lambda q, k, v: jax.nn.dot_product_attention(q, k, v, **kw))(q, k, v)
    got, want = (got, want) if kw.get("return_residual") else ((got,), (want,))
    for a, b in zip(got, want, strict=True):
        assert a.shape == b.shape
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)
