"""Regressions of issue 12, items 6 (silent wrong results) and 7 (crashes under composition), on every
device. References: NumPy in float64, JAX (``jax.grad``, ``jax.checkpoint``, call counts), or numpy:0."""

from __future__ import annotations

import functools
import warnings

import numpy as np
import pytest

import fnarray as fa
import fnarray.numpy as fnp
from fnarray.core import lax
from fnarray.core.errors import FallbackWarning

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")

NUMPY = fa.devices("numpy")[0]

# ------------------------------------------------------------------ NaN propagation past size thresholds

# XLA's CPU reductions lost a NaN past 2048 elements; kernel backends change strategy at other sizes.
SIZES = (5, 2049, 4097, 100003)


def _with_nans(n, where):
    a = np.random.default_rng(n).standard_normal(n).astype(np.float32)
    a[list(where)] = np.nan
    return a


@pytest.mark.parametrize("n", SIZES)
def test_max_min_reductions_propagate_nan_at_any_size(device, n):
    a = _with_nans(n, [n // 3, n - 1])
    x = fnp.asarray(a, device=device)
    for fn in (fnp.max, fnp.min, fa.jit(fnp.max), fa.jit(fnp.min), fa.jit(lambda v: fnp.max(v * 2.0 + 1.0))):
        assert np.isnan(float(fn(x))), fn
    # a NaN-free array still gives the extreme (the NaN-aware reduction must not change that)
    b = np.where(np.isnan(a), 0.0, a).astype(np.float32)
    np.testing.assert_equal(float(fnp.max(fnp.asarray(b, device=device))), b.max())
    np.testing.assert_equal(float(fnp.min(fnp.asarray(b, device=device))), b.min())
    # per-row reductions: only the rows holding a NaN are NaN
    m = n // 4 * 4
    rows = a[:m].reshape(4, -1)
    got = np.asarray(fa.jit(lambda v: fnp.max(v, axis=1))(fnp.asarray(rows, device=device)))
    want = np.max(rows.astype(np.float64), axis=1)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got[~np.isnan(want)], want[~np.isnan(want)], rtol=1e-6)


@pytest.mark.parametrize("n", SIZES)
def test_argmax_argmin_return_the_first_nan_at_any_size(device, n):
    first = n // 3
    a = _with_nans(n, [first, n - 1])
    x = fnp.asarray(a, device=device)
    assert int(fnp.argmax(x)) == first
    assert int(fnp.argmin(x)) == first
    assert int(fa.jit(lambda v: fnp.argmax(v + 1.0))(x)) == first
    assert int(fa.jit(lambda v: fnp.argmin(v * 3.0))(x)) == first


@pytest.mark.parametrize("n", [5, 2049, 4097, 60001])
def test_maximum_minimum_and_cumulative_extremes_propagate_nan(device, n):
    # 60001: webgpu:0's cumulative kernel loses values past 65,536 steps of one line (see the report).
    first = n // 3
    a = _with_nans(n, [first])
    x = fnp.asarray(a, device=device)
    nan_in = np.isnan(a) | np.isnan(a[::-1])
    for fn in (fnp.maximum, fnp.minimum):
        got = np.asarray(fa.jit(lambda v, f=fn: f(v, v[::-1]))(x))
        np.testing.assert_array_equal(np.isnan(got), nan_in)
    for cum in (lax.cummax, lax.cummin):
        got = np.asarray(fa.jit(lambda v, c=cum: c(v, 0))(x))
        assert np.isnan(got[first:]).all() and not np.isnan(got[:first]).any(), cum


# ------------------------------------------------------------------ integer creation never wraps


@pytest.mark.parametrize("make", [
    lambda d: fnp.arange(2**31 - 3, 2**31 + 2, device=d),
    lambda d: fnp.arange(-2**31 - 2, -2**31 + 2, device=d),
    lambda d: fnp.arange(0, 2**31 + 10, 2**30, device=d),
    lambda d: fnp.arange(120, 130, dtype=fnp.int8, device=d),
    lambda d: fnp.full(3, 2**40, device=d),
    lambda d: fnp.full(3, 300, dtype=fnp.int8, device=d),
    lambda d: fnp.linspace(0, 2**40, 3, dtype=fnp.int32, device=d),
], ids=["arange_up", "arange_down", "arange_step", "arange_int8", "full", "full_int8", "linspace_int"])
def test_integer_creation_out_of_range_raises_overflow(device, make):
    with pytest.raises(OverflowError, match="does not fit in int"):
        make(device)


@pytest.mark.enable_x64
def test_integer_creation_in_range_and_int64(device):
    np.testing.assert_array_equal(np.asarray(fnp.arange(2**31 - 3, 2**31, device=device)),
                                  np.arange(2**31 - 3, 2**31, dtype=np.int64))
    x = fnp.arange(2**31 - 3, 2**31 + 2, dtype=fnp.int64, device=device) if device.backend != "webgpu" else None
    if x is not None:
        np.testing.assert_array_equal(np.asarray(x), np.arange(2**31 - 3, 2**31 + 2, dtype=np.int64))
    np.testing.assert_array_equal(np.asarray(fnp.full(2, 2**31 - 1, device=device)), [2**31 - 1] * 2)
    # eye/tri with a huge k are an empty (or full) triangle, not an overflow
    np.testing.assert_array_equal(np.asarray(fnp.eye(3, k=2**40, device=device)), np.zeros((3, 3)))


# ------------------------------------------------------------------ custom rules are checked


def test_custom_jvp_rule_with_wrong_tangent_shape_or_dtype_raises_naming_it(device):
    @fa.custom_jvp
    def f(x):
        return fnp.sin(x)

    @f.defjvp
    def wrong_shape_rule(p, t):
        return fnp.sin(p[0]), fnp.ones(3, device=device) * t[0]

    @fa.custom_jvp
    def g(x):
        return fnp.sin(x)

    @g.defjvp
    def wrong_dtype_rule(p, t):
        return fnp.sin(p[0]), fnp.asarray(t[0]).astype(fnp.float16)

    x = fnp.asarray(0.5, device=device)
    for fun, name in ((f, "wrong_shape_rule"), (g, "wrong_dtype_rule")):
        for call in (lambda: fa.jvp(fun, (x,), (x,)), lambda: fa.grad(fun)(x),
                     lambda: fa.jit(fa.grad(fun))(x)):
            with pytest.raises(TypeError, match=name):
                call()


def test_custom_vjp_bwd_with_wrong_cotangents_raises_naming_it(device):
    def fwd(x, y):
        return x * y, (x, y)

    @fa.custom_vjp
    def f(x, y):
        return x * y

    def bad_shape_bwd(res, ct):
        return ct * fnp.ones(3, device=device), ct

    f.defvjp(fwd, bad_shape_bwd)

    @fa.custom_vjp
    def g(x, y):
        return x * y

    def bad_structure_bwd(res, ct):
        return (ct, ct), ct

    g.defvjp(fwd, bad_structure_bwd)
    x, y = fnp.asarray(1.0, device=device), fnp.asarray(2.0, device=device)
    with pytest.raises(TypeError, match="bad_shape_bwd"):
        fa.grad(f)(x, y)
    with pytest.raises(TypeError, match="bad_structure_bwd"):
        fa.grad(g)(x, y)

    # None for a whole argument is a zero cotangent, as in JAX
    @fa.custom_vjp
    def h(x, d):
        return x * d["a"]

    h.defvjp(lambda x, d: (x * d["a"], d["a"]), lambda a, ct: (ct * a, None))
    assert float(fa.grad(h)(x, {"a": fnp.asarray(3.0, device=device), "b": y})) == 3.0


def test_jvp_of_custom_vjp_raises_without_a_fallback_warning(device):
    @fa.custom_vjp
    def f(x):
        return fnp.sin(x)

    f.defvjp(lambda x: (fnp.sin(x), x), lambda r, ct: (ct * fnp.cos(r),))
    x = fnp.asarray(1.0, device=device)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        for call in (lambda: fa.jvp(f, (x,), (x,)), lambda: fa.jit(lambda v: fa.jvp(f, (v,), (v,)))(x)):
            with pytest.raises(TypeError, match="cannot be forward-mode differentiated"):
                call()
        np.testing.assert_allclose(float(fa.grad(f)(x)), np.cos(1.0), rtol=1e-6)


# ------------------------------------------------------------------ batched cond and gradients


def test_grad_of_batched_cond_does_not_leak_the_untaken_branch(device):
    def f(v):
        return fnp.sum(fa.vmap(lambda x: fa.cond(x > 0, fnp.log, lambda x: 0.0 * x, x))(v))

    def fj(v):
        return jnp.sum(jax.vmap(lambda x: jax.lax.cond(x > 0, jnp.log, lambda x: 0.0 * x, x))(v))

    v = np.array([1.0, -1.0, 0.0, 2.0], np.float32)
    want = np.asarray(jax.grad(fj)(v))
    assert not np.isnan(want).any()
    for g in (fa.grad(f), fa.jit(fa.grad(f))):
        np.testing.assert_allclose(np.asarray(g(fnp.asarray(v, device=device))), want, rtol=1e-6)


def test_grad_of_batched_switch_with_a_captured_operand_matches_jax(device):
    def make(lib, np_, cf):
        def g(w, v):
            return np_.sum(lib.vmap(lambda x: cf(x.astype(np_.int32), [
                lambda x: np_.log(w) * x, lambda x: np_.sqrt(x - 1.0) * w, lambda x: x * w], x))(v))
        return g

    g = make(fa, fnp, fa.switch)
    gj = make(jax, jnp, jax.lax.switch)
    v = np.array([0.5, 1.0, 2.5, 1.5], np.float32)
    for w in (1.0, 2.0):
        want = jax.grad(gj, argnums=(0, 1))(np.float32(w), v)
        got = fa.grad(g, argnums=(0, 1))(fnp.asarray(w, device=device), fnp.asarray(v, device=device))
        for a, b in zip(got, want, strict=True):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5)


# ------------------------------------------------------------------ backends answer as numpy:0


def _on(dev, f, *args):
    return np.asarray(f(*[fnp.asarray(a, device=dev) for a in args]))


@pytest.mark.parametrize("op", ["add", "multiply", "set", "max", "min"])
@pytest.mark.parametrize("dt", ["bool", "uint8", "int32", "float32"])
def test_at_updates_of_every_dtype_match_numpy0(device, op, dt):
    x = np.array([True, False, False, True]).astype(dt)
    u = np.array([True, True, False]).astype(dt)
    idx = np.array([0, 1, 1], np.int32)

    def f(a, i, b):
        return getattr(a.at[i], op)(b)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FallbackWarning)
        np.testing.assert_array_equal(_on(device, f, x, idx, u), _on(NUMPY, f, x, idx, u))


def test_bool_cumulative_and_unsigned_abs_match_numpy0(device):
    b = np.array([False, True, False, True, True])
    for f in (lambda v: lax.cummax(v, 0), lambda v: lax.cummin(v, 0), lambda v: lax.cummax(v, 0, reverse=True)):
        np.testing.assert_array_equal(_on(device, fa.jit(f), b), _on(NUMPY, fa.jit(f), b))
    u = np.array([0, 3, 255], np.uint8)
    np.testing.assert_array_equal(_on(device, fnp.abs, u), u)


def test_argmin_argmax_over_an_empty_axis_give_numpy0s_answer(device):
    z = fnp.zeros((0, 3), device=device)
    for fn in (fnp.argmin, fnp.argmax):
        with pytest.raises(ValueError, match="empty sequence"):
            fn(z, axis=0)
        out = fn(z, axis=1)
        assert out.shape == (0,) and out.dtype == np.int32


# ------------------------------------------------------------------ subnormals (documented in README)


def _flushed(a):
    """``a`` with every float32 subnormal replaced by a zero of the same sign."""
    a = np.asarray(a, np.float32).copy()
    sub = (a != 0) & (np.abs(a) < np.finfo(np.float32).tiny)
    a[sub] = np.copysign(0.0, a[sub])
    return a


SUBNORMALS = np.array([-3e-39, 3e-39, -1e-45, 1e-38, 2.5, -0.0], np.float32)


@pytest.mark.parametrize("name,fn,ref", [
    ("sqrt", fnp.sqrt, np.sqrt), ("double", lambda x: x * 2.0, lambda x: x * 2),
    ("negative", lambda x: (x < 0).astype(fnp.float32), lambda x: (x < 0).astype(np.float32)),
    ("reciprocal", lambda x: 1.0 / x, lambda x: 1 / x),
])
def test_subnormals_give_the_ieee_or_the_flushed_result(device, name, fn, ref):
    """README "Semantics": a backend may flush float32 subnormal operands and results to a zero of the
    same sign; each element must equal either the IEEE result or the flushed one, never anything else."""
    with np.errstate(all="ignore"):
        exact = ref(SUBNORMALS.astype(np.float64)).astype(np.float32)
        flushed = _flushed(ref(_flushed(SUBNORMALS).astype(np.float64)).astype(np.float32))
    for g in (fn, fa.jit(fn)):
        got = np.asarray(g(fnp.asarray(SUBNORMALS, device=device)))
        for i, v in enumerate(got):
            ok = [np.isnan(v) if np.isnan(e) else (v == e and np.signbit(v) == np.signbit(e)) or
                  (np.isfinite(e) and e != 0 and abs(v - e) <= 1e-2 * abs(e))
                  for e in (exact[i], flushed[i])]
            assert any(ok), (name, SUBNORMALS[i], v, exact[i], flushed[i])


def test_log_of_a_subnormal_keeps_its_sign_but_not_its_accuracy(device):
    """README: transcendental functions may lose accuracy on subnormals (XLA's log reads a flushed
    exponent on jax:0, lavapipe's log is approximate), but a subnormal keeps its sign: log of a
    positive one is at most log of the smallest normal (or -inf), of a negative one NaN or -inf."""
    x = fnp.asarray(np.array([3e-39, 1e-45, -3e-39, -1e-45], np.float32), device=device)
    bound = np.log(np.finfo(np.float32).tiny) + 1e-3
    for g in (fnp.log, fa.jit(fnp.log)):
        got = np.asarray(g(x))
        assert all(v == -np.inf or (np.isfinite(v) and v <= bound) for v in got[:2]), got
        assert all(np.isnan(v) or v == -np.inf for v in got[2:]), got


def test_sqrt_of_a_negative_subnormal_is_nan_or_negative_zero_and_nan_inf_are_pinned(device):
    x = fnp.asarray(np.array([-3e-39, -1.0, np.inf, np.nan], np.float32), device=device)
    got = np.asarray(fa.jit(fnp.sqrt)(x))
    assert np.isnan(got[0]) or (got[0] == 0 and np.signbit(got[0]))
    assert np.isnan(got[1]) and got[2] == np.inf and np.isnan(got[3])


def test_moving_data_keeps_subnormal_bits(device):
    a = np.array([-3e-39, 3e-39, 1e-45, 1.0], np.float32)
    x = fnp.asarray(a, device=device)
    np.testing.assert_array_equal(np.asarray(x).view(np.uint32), a.view(np.uint32))
    for f in (lambda v: fnp.reshape(v, (2, 2)).T.reshape(-1), lambda v: v[::-1][::-1], lambda v: v[fnp.arange(4)]):
        np.testing.assert_array_equal(np.sort(np.asarray(fa.jit(f)(x)).view(np.uint32)), np.sort(a.view(np.uint32)))


# ------------------------------------------------------------------ checkpoint under composition


def _variants(lib, np_, ck=None):
    """The compositions; ``ck`` replaces ``checkpoint`` (the identity gives the same without it)."""
    fori = lib.lax.fori_loop if lib is jax else lib.fori_loop
    scan = lib.lax.scan if lib is jax else lib.scan
    while_loop = lib.lax.while_loop if lib is jax else lib.while_loop
    cond = lib.lax.cond if lib is jax else lib.cond
    ck = ck or lib.checkpoint

    def fl(x):
        return fori(0, 3, lambda i, c: np_.sin(c) * 1.5, x)

    def sc(x):
        c, ys = scan(lambda c, xi: (np_.sin(c) * xi, c * 2.0), x, np_.arange(1.0, 4.0))
        return c + ys.sum()

    def wl(x):
        return while_loop(lambda c: c[0] < 3, lambda c: (c[0] + 1, c[1] * np_.cos(c[1])), (0, x))[1]

    def cd(x):
        return cond(x > 0, np_.sin, np_.cos, x)

    def nested_loops(x):
        return fori(0, 2, lambda i, c: ck(sc)(c) * 0.1, x)

    return {
        "checkpoint(fori_loop)": ck(fl),
        "fori_loop(checkpoint(body))": lambda x: fori(0, 3, ck(lambda i, c: np_.sin(c) * 1.5), x),
        "checkpoint(scan)": ck(sc),
        "scan(checkpoint(body))": lambda x: scan(ck(lambda c, xi: (np_.sin(c) * xi, c)), x, np_.arange(1.0, 4.0))[0],
        "checkpoint(cond)": ck(cd),
        "cond(checkpoint(branch))": lambda x: cond(x > 0, ck(np_.sin), np_.cos, x),
        "checkpoint(static_argnums)": lambda x: ck(lambda x, n: fori(0, n, lambda i, c: np_.sin(c) * 1.5, x),
                                                  static_argnums=1)(x, 3),
        "checkpoint(checkpoint(fori_loop))": ck(ck(fl)),
        "jit(checkpoint(fori_loop))": lib.jit(ck(fl)),
        "checkpoint(jit(scan))": ck(lib.jit(sc)),
        "fori_loop(checkpoint(scan))": nested_loops,
        "checkpoint(fori_loop) * checkpoint(scan)": lambda x: ck(fl)(x) * ck(sc)(x),
        "checkpoint(while_loop) forward": ck(wl),
    }


VARIANTS = list(_variants(fa, fnp))


@functools.cache
def _jax_derivative(name, x):
    """JAX's derivative of the variant at ``x`` (the oracle, computed once for every device's parametrization):
    ``jvp`` for the forward-only variants (reverse mode of ``while_loop`` needs a known trip count), else ``grad``."""
    fj = _variants(jax, jnp)[name]
    if name.endswith("forward"):
        return float(jax.jvp(fj, (x,), (1.0,))[1])
    return float(jax.grad(fj)(x))


@pytest.mark.parametrize("name", VARIANTS)
def test_grad_of_checkpoint_compositions_matches_jax(device, name):
    f = _variants(fa, fnp)[name]
    x = 0.7
    xd = fnp.asarray(x, device=device)
    want = _jax_derivative(name, x)
    if name.endswith("forward"):  # reverse mode of while_loop needs a known trip count: forward only
        got = [float(fa.jvp(f, (xd,), (fnp.ones_like(xd),))[1])]
    else:
        got = [float(fa.grad(f)(xd)), float(fa.jit(fa.grad(f))(xd))]
        # the same function without checkpoint agrees too
        plain = _variants(fa, fnp, ck=lambda fun, **kw: fun)[name]
        got.append(float(fa.grad(plain)(xd)))
    for g in got:
        np.testing.assert_allclose(g, want, rtol=2e-5, atol=1e-6)


# ------------------------------------------------------------------ custom_jvp with Python control flow


def _counted_custom_jvp(lib, np_):
    calls = {"fun": 0, "rule": 0}

    @lib.custom_jvp
    def f(x):
        calls["fun"] += 1
        if x > 0:
            return np_.sin(x) * x
        return 0.0 * x

    @f.defjvp
    def f_jvp(primals, tangents):
        calls["rule"] += 1
        (x,), (t,) = primals, tangents
        if x > 0:
            return f(x), (np_.cos(x) * x + np_.sin(x)) * t
        return f(x), 0.0 * t

    return f, calls


@pytest.mark.parametrize("what", ["call", "jvp", "grad", "grad_negative", "value_and_grad", "grad_of_grad"])
def test_custom_jvp_with_python_control_flow_and_call_counts_match_jax(device, what):
    def run(lib, f, x):
        return {"call": lambda: f(x), "jvp": lambda: lib.jvp(f, (x,), (x * 0 + 1,))[1],
                "grad": lambda: lib.grad(f)(x), "grad_negative": lambda: lib.grad(f)(-x),
                "value_and_grad": lambda: lib.value_and_grad(f)(x)[1],
                "grad_of_grad": lambda: lib.grad(lib.grad(f))(x)}[what]()

    f, calls = _counted_custom_jvp(fa, fnp)
    fj, calls_j = _counted_custom_jvp(jax, jnp)
    got = run(fa, f, fnp.asarray(2.0, device=device))
    want = run(jax, fj, np.float32(2.0))
    np.testing.assert_allclose(float(got), float(want), rtol=1e-5)
    assert calls == calls_j


def test_custom_jvp_without_control_flow_is_called_as_often_as_in_jax(device):
    def make(lib, np_):
        calls = {"fun": 0, "rule": 0}

        @lib.custom_jvp
        def f(x):
            calls["fun"] += 1
            return np_.sin(x)

        @f.defjvp
        def rule(p, t):
            calls["rule"] += 1
            return np_.sin(p[0]), np_.cos(p[0]) * t[0]
        return f, calls

    for what in ("jvp", "grad", "jit_grad", "vmap_grad"):
        f, c = make(fa, fnp)
        fj, cj = make(jax, jnp)
        x = fnp.ones(3, device=device) * 0.5
        xj = np.full(3, 0.5, np.float32)
        if what == "jvp":
            fa.jvp(f, (x,), (x,)), jax.jvp(fj, (xj,), (xj,))
        elif what == "grad":
            fa.grad(lambda v: f(v).sum())(x), jax.grad(lambda v: fj(v).sum())(xj)
        elif what == "jit_grad":
            fa.jit(fa.grad(lambda v: f(v).sum()))(x), jax.jit(jax.grad(lambda v: fj(v).sum()))(xj)
        else:
            fa.vmap(fa.grad(f))(x), jax.vmap(jax.grad(fj))(xj)
        assert c == cj, what


@pytest.mark.parametrize("dt", ["uint8", "uint16", "uint32", "int8", "int32"])
def test_bitwise_reductions_of_every_integer_dtype_match_numpy0(device, dt):
    # the kernel backends' identity of reduce_and was a literal -1, which overflows unsigned types
    a = np.array([[7, 3, 12], [5, 5, 1]]).astype(dt)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FallbackWarning)
        for f in (lambda v: lax.reduce_and(v, (1,)), lambda v: lax.reduce_or(v, (0, 1))):
            np.testing.assert_array_equal(_on(device, f, a), _on(NUMPY, f, a))


def test_exp_of_log_keeps_the_nan_of_a_negative_argument(device):
    # Mesa folded exp(log(v)) to v in WGSL: exp(log(-1)) gave -1 on webgpu:0 instead of NaN.
    x = fa.device_put(fnp.asarray(np.array([1.0, 2.0, 0.0, 1.5, -0.0], np.float32)), device)
    out = np.asarray(fa.jit(lambda v: fnp.exp(fnp.log(v * 2 - 3)))(x))
    with np.errstate(invalid="ignore", divide="ignore"):
        want = np.exp(np.log(np.array([1.0, 2.0, 0.0, 1.5, -0.0], np.float32) * 2 - 3))
    np.testing.assert_array_equal(out, want)


# ------------------------------------------------------------------ signed zeros through a constant zero term

def test_adding_a_constant_zero_gives_ieee_signed_zeros(device):
    """``x + 0.0`` is +0.0 at x = -0.0 (IEEE 754 round-to-nearest). XLA's simplifier and Mesa's shader compiler
    fold ``x + 0.0`` to ``x`` under jit and kept -0.0 (found by a new-user trial); ``x - 0.0`` must keep it."""
    a = np.array([0.0, -0.0, 1.5, -2.0, np.nan, np.inf, -np.inf], np.float32)
    x = fnp.asarray(a, device=device)
    cases = [(lambda v: v + 0.0, a + np.float32(0.0)), (lambda v: 0.0 + v, np.float32(0.0) + a),
             (lambda v: v - (-0.0), a - np.float32(-0.0)), (lambda v: v - 0.0, a - np.float32(0.0)),
             (lambda v: v * -1.0 + 0.0, a * np.float32(-1.0) + np.float32(0.0))]
    for k, (fn, want) in enumerate(cases):
        for how, f in (("eager", fn), ("jit", fa.jit(fn))):
            got = np.asarray(f(x))
            np.testing.assert_array_equal(got, want, err_msg=f"case {k} {how}")
            zero = want == 0  # the sign of a NaN result is not specified by IEEE 754
            np.testing.assert_array_equal(np.signbit(got[zero]), np.signbit(want[zero]), err_msg=f"case {k} {how}")


# ------------------------------------------------------------------ a bool array times inf or NaN

@pytest.mark.filterwarnings("ignore::fnarray.FallbackWarning")   # opencl:0 here has no cl_khr_fp16
def test_false_times_inf_is_nan(device):
    """``bool_array * inf``: False converts to 0.0 and 0.0 * inf is NaN (NumPy). XLA's simplifier rewrites
    ``convert(pred) * y`` as ``select(pred, y, 0)``, so jax:0 gave 0 there, eagerly (the first, second and third
    calls: general path, program, fast entry) and under jit (``jnp`` gives 0 too)."""
    b = np.array([True, False, True, False])
    x = fnp.asarray(b, device=device)
    with np.errstate(invalid="ignore"):
        cases = [(lambda v: v * np.inf, b * np.inf), (lambda v: -np.inf * v, -np.inf * b),
                 (lambda v: fnp.multiply(v, np.nan), b * np.nan),
                 (lambda v: v.astype(fnp.float16) * np.inf, b.astype(np.float16) * np.float16(np.inf))]
    for k, (fn, want) in enumerate(cases):
        for how, f in (("eager", fn), ("eager", fn), ("eager", fn), ("jit", fa.jit(fn))):
            with np.errstate(invalid="ignore"):   # (numpy:0 computes as NumPy does)
                got = np.asarray(f(x))
            np.testing.assert_array_equal(got, want.astype(got.dtype), err_msg=f"case {k} {how}")
            assert got.dtype == (np.float16 if k == 3 else np.float32), (k, got.dtype)


# ------------------------------------------------------------------ float16 accumulates in float32

_F16_ACCUMULATIONS = {
    "matmul": (lambda a, b: a @ b, lambda a, b: a @ b),
    "sum": (lambda a, b: fnp.sum(a, axis=1), lambda a, b: a.sum(1)),
    "cumsum": (lambda a, b: fnp.cumsum(a, axis=1)[:, -1], lambda a, b: a.sum(1)),
    "cumprod": (lambda a, b: fnp.cumprod(a * 0.0 + (1 + 2**-10), axis=1)[:, -1],   # factors exact in float16
                lambda a, b: np.full(2, (1 + 2**-10) ** 6001)),
    "window_sum": (lambda a, b: fa.lax.reduce_window_sum(a, (1, 6001), (1, 1), "VALID")[:, 0],
                   lambda a, b: a.sum(1)),
}


@pytest.mark.filterwarnings("ignore::fnarray.FallbackWarning")   # opencl:0 here has no cl_khr_fp16
@pytest.mark.parametrize("name", sorted(_F16_ACCUMULATIONS))
def test_float16_accumulates_in_float32(device, name):
    """A float16 sum accumulated in float16 stalls (512 + 0.25 is 512): on webgpu:0 a matmul with 6,001
    products 0.25 gave 512 instead of 1500, and sums and scans drifted. Every backend accumulates float16
    in float32, as the reference and XLA do (float64 NumPy here)."""
    f, ref = _F16_ACCUMULATIONS[name]
    a = np.full((2, 6001), 0.5, np.float16)
    b = np.full((6001, 2), 0.5, np.float16)
    want = ref(a.astype(np.float64), b.astype(np.float64))
    got = fa.jit(f, device=device)(fa.device_put(a, device), fa.device_put(b, device))
    assert got.dtype == np.float16
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=2e-3)


def test_pow_one_half_follows_ieee_pow_on_numpy():
    """numpy:0 took NumPy's 0-d-exponent shortcut (``x ** 0.5`` as ``sqrt``): ``(-inf) ** 0.5`` was NaN and
    ``(-0.0) ** 0.5`` -0.0, where IEEE 754's pow, JAX (``jnp.power``), jax:0, mlx:0 and webgpu:0 give inf and +0.0
    (twenty-first session's new-user probe); an array exponent already gave those."""
    v = np.array([-np.inf, -0.0, 4.0, -4.0], np.float32)
    for got in (fnp.asarray(v) ** 0.5, fa.jit(lambda a: fnp.power(a, 0.5))(v), fnp.asarray(v, dtype=fnp.float16) ** 0.5):
        r = np.asarray(got, np.float32)
        np.testing.assert_array_equal(r, [np.inf, 0.0, 2.0, np.nan])
        assert not np.signbit(r[1])
