"""Control flow (``cond``, ``switch``, ``while_loop``, ``fori_loop``, ``scan``) and its transformation rules.

References are independent of fnarray: Python loops over NumPy values (float64 where
derivatives are checked) and central finite differences.
"""

from __future__ import annotations

import numpy as np
import pytest

import fnarray as fa
import fnarray.numpy as fnp
from fnarray.core.passes import walk_eqns
from fnarray.transforms.control_flow import ReverseModeError, cond, fori_loop, scan, switch, while_loop

RNG = np.random.default_rng(0)


def _require(*names):
    missing = [n for n in names if not hasattr(fa, n)]
    if missing:
        pytest.skip(f"fnarray.{', fnarray.'.join(missing)} not available yet (transform module in progress)")


def _traced(f, *args):
    prog = fa.make_ir(f)(*args)
    fa.check_program(prog)
    return prog


def _prims(prog):
    return {e.primitive.name for e in walk_eqns(prog)}


def _both(f, *args):
    """``f`` eager and under jit, after verifying its traced program."""
    _traced(f, *args)
    return [f(*args), fa.jit(f)(*args)]


def _close(a, b, rtol=1e-5, atol=1e-6):
    np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(b, np.float64), rtol=rtol, atol=atol)


def _f64(*shape):
    return RNG.uniform(-1.0, 1.0, shape)


def _fd_grad(f_np, x, eps=1e-6):
    """Central finite differences of a scalar NumPy function of a float64 array."""
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        d = np.zeros_like(x)
        d[i] = eps
        g[i] = (f_np(x + d) - f_np(x - d)) / (2 * eps)
    return g


def _fd_jvp(f_np, x, v, eps=1e-6):
    return (np.asarray(f_np(x + eps * v)) - np.asarray(f_np(x - eps * v))) / (2 * eps)


def _np_of(f):
    """Run an fnarray function on a float64 NumPy array and return NumPy (for finite differences)."""
    return lambda x: np.asarray(f(fnp.asarray(x)), np.float64)


# =================================================================================== cond / switch


@pytest.mark.parametrize("p", [True, False])
def test_cond_pytrees_and_captures(p):
    xn, wn = _f64(3).astype(np.float32), _f64(3).astype(np.float32)
    w = fnp.asarray(wn)

    def f(pred, x):
        return cond(pred, lambda d: {"a": d["x"] * w, "b": (d["x"].sum(), 2.0 * d["y"])},
                    lambda d: {"a": d["x"] - 1.0, "b": (d["x"].max(), w[0] * d["y"])},
                    {"x": x, "y": 3.0})
    for out in _both(f, p, fnp.asarray(xn)):
        if p:
            ref = {"a": xn * wn, "b": (xn.sum(), 6.0)}
        else:
            ref = {"a": xn - 1.0, "b": (xn.max(), wn[0] * 3.0)}
        _close(out["a"], ref["a"])
        _close(out["b"][0], ref["b"][0])
        _close(out["b"][1], ref["b"][1])


def test_cond_numeric_predicate_and_traced_predicate():
    x = fnp.asarray(np.arange(4.0, dtype=np.float32))
    _close(cond(fnp.asarray(0.0), lambda v: v * 2, lambda v: -v, x), -np.arange(4.0))
    _close(cond(3, lambda v: v * 2, lambda v: -v, x), 2 * np.arange(4.0))
    f = fa.jit(lambda v: cond(v.sum() > 3, lambda a: a * 2, lambda a: -a, v))
    _close(f(x), 2 * np.arange(4.0))
    _close(f(x - 10), -(np.arange(4.0) - 10))
    assert "cond" in _prims(_traced(lambda v: cond(v.sum() > 3, lambda a: a * 2, lambda a: -a, v), x))


@pytest.mark.parametrize("i", [-3, 0, 1, 2, 7])
def test_switch_clamps_index(i):
    xn = _f64(4).astype(np.float32)
    fns = [lambda v: v + 1.0, lambda v: v * v, lambda v: fnp.sin(v)]
    refs = [lambda v: v + 1.0, lambda v: v * v, np.sin]
    k = min(max(i, 0), 2)
    for out in _both(lambda j, v: switch(j, fns, v), i, fnp.asarray(xn)):
        _close(out, refs[k](xn))


def test_cond_branch_mismatch_errors():
    x = fnp.ones(3)
    with pytest.raises(fa.DTypeError, match="true_fun.*false_fun|false_fun.*true_fun"):
        cond(True, lambda v: v, lambda v: v.astype(fnp.int32), x)
    with pytest.raises(fa.ShapeError, match="f32\\[3\\].*f32\\[\\]|f32\\[\\].*f32\\[3\\]"):
        cond(True, lambda v: v, lambda v: v.sum(), x)
    with pytest.raises(TypeError, match="structure"):
        cond(True, lambda v: (v, v), lambda v: [v, v], x)
    with pytest.raises(fa.DTypeError, match="branches\\[0\\].*branches\\[1\\]"):
        switch(0, [lambda v: v, lambda v: v > 0], x)
    with pytest.raises(fa.ShapeError, match="scalar"):
        cond(fnp.ones(2) > 0, lambda v: v, lambda v: v, x)
    with pytest.raises(ValueError, match="at least one branch"):
        switch(0, [], x)
    with pytest.raises(fa.DTypeError, match="integer"):
        switch(0.5, [lambda v: v], x)


# =================================================================================== while / fori


def test_while_loop_pytree_carry():
    xn = np.abs(_f64(3)).astype(np.float32) + 0.1

    def f(x):
        return while_loop(lambda c: c["s"].sum() < 50.0,
                          lambda c: {"i": c["i"] + 1, "s": c["s"] * 2.0 + 1.0}, {"i": 0, "s": x})
    i, s = 0, xn.astype(np.float64)
    while s.sum() < 50.0:
        i, s = i + 1, s * 2.0 + 1.0
    for out in _both(f, fnp.asarray(xn)):
        assert int(out["i"]) == i
        _close(out["s"], s)
    assert "while" in _prims(_traced(f, fnp.asarray(xn)))


def test_while_body_type_change_errors():
    with pytest.raises(fa.DTypeError, match="i32\\[\\].*f32\\[\\]"):
        while_loop(lambda c: c < 3, lambda c: c + 0.5, 0)
    with pytest.raises(fa.DTypeError, match="i32.*f32"):
        while_loop(lambda c: c[0] < 3, lambda c: (c[0] + 1, c[1] + 0.5), (0, fnp.zeros(2, dtype=fnp.int32)))
    with pytest.raises(fa.ShapeError, match="f32\\[2\\].*f32\\[\\]"):
        while_loop(lambda c: c.sum() < 3, lambda c: c.sum(), fnp.zeros(2))
    with pytest.raises(TypeError, match="structure"):
        while_loop(lambda c: c[0] < 3, lambda c: [c[0] + 1, c[1]], (0, fnp.zeros(2)))
    with pytest.raises(fa.DTypeError, match="boolean scalar"):
        while_loop(lambda c: c, lambda c: c + 1, 0)
    with pytest.raises(fa.DTypeError, match="fori_loop.*i32.*f32"):
        fori_loop(0, 3, lambda i, c: c * 0.5, 1)


@pytest.mark.enable_x64
def test_weak_carries_and_branch_outputs_adopt_strong_types():
    x = fnp.asarray(np.float32(0.25))
    out = while_loop(lambda c: c < 2.0, lambda c: c + x, 0.0)
    assert out.dtype == np.float32 and not out.weak_type
    _close(out, 2.0)
    xs = np.array([0.5, 2.0, 3.0])                      # float64
    carry, ys = scan(lambda c, e: (c * e, c), 1.0, fnp.asarray(xs))
    assert carry.dtype == np.float64 and ys.dtype == np.float64
    _close(carry, 3.0)
    r = cond(False, lambda v: 1.0, lambda v: v.sum(), fnp.asarray(xs))
    assert r.dtype == np.float64
    _close(r, 5.5)
    with pytest.raises(fa.DTypeError, match="i(32|64).*f64|f64.*i(32|64)"):
        cond(False, lambda v: 1, lambda v: v.sum(), fnp.asarray(xs))


def test_fori_loop_static_and_traced_bounds():
    xn = _f64(3).astype(np.float32)

    def body(i, c):
        return {"acc": c["acc"] + i * c["x"], "n": c["n"] + 1, "x": c["x"]}

    def ref(lo, hi):
        acc, n = np.zeros(3), 0
        for i in range(lo, hi):
            acc, n = acc + i * xn.astype(np.float64), n + 1
        return acc, n

    def static(x):
        return fori_loop(2, 6, body, {"acc": fnp.zeros_like(x), "x": x, "n": 0})

    def dynamic(x, lo, hi):
        return fori_loop(lo, hi, body, {"acc": fnp.zeros_like(x), "x": x, "n": 0})
    acc, n = ref(2, 6)
    for out in _both(static, fnp.asarray(xn)):
        _close(out["acc"], acc)
        assert int(out["n"]) == n
    assert "scan" in _prims(_traced(static, fnp.asarray(xn)))
    for lo, hi in [(2, 6), (3, 3), (5, 1)]:
        acc, n = ref(lo, hi)
        out = fa.jit(dynamic)(fnp.asarray(xn), lo, hi)
        _close(out["acc"], acc)
        assert int(out["n"]) == n
    assert "while" in _prims(_traced(dynamic, fnp.asarray(xn), 1, 4))
    empty = fori_loop(5, 1, body, {"acc": fnp.zeros(3), "x": fnp.asarray(xn), "n": 0})
    _close(empty["acc"], np.zeros(3))


# =================================================================================== scan


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("unroll", [1, 3])
def test_scan_pytrees(reverse, unroll):
    an, bn = _f64(5, 2).astype(np.float32), _f64(5).astype(np.float32)

    def f(a, b):
        def step(c, x):
            s = c["s"] + x["a"] * x["b"]
            return {"s": s, "k": c["k"] + 1}, (s.sum(), {"p": x["a"] * c["s"]})
        return scan(step, {"s": fnp.zeros(2), "k": 0}, {"a": a, "b": b}, reverse=reverse, unroll=unroll)

    s, k = np.zeros(2), 0
    ys0, ys1 = np.zeros(5), np.zeros((5, 2))
    for i in (range(4, -1, -1) if reverse else range(5)):
        p = an[i] * s
        s = s + an[i] * bn[i]
        k += 1
        ys0[i], ys1[i] = s.sum(), p
    for carry, ys in _both(f, fnp.asarray(an), fnp.asarray(bn)):
        _close(carry["s"], s)
        assert int(carry["k"]) == k
        _close(ys[0], ys0)
        _close(ys[1]["p"], ys1)


def test_scan_length_without_xs_and_errors():
    carry, ys = scan(lambda c, _: (c * 2.0, c), 1.0, None, length=4)
    _close(carry, 16.0)
    _close(ys, [1.0, 2.0, 4.0, 8.0])
    with pytest.raises(ValueError, match="length"):
        scan(lambda c, x: (c, x), 0.0, None)
    with pytest.raises(fa.ShapeError, match="leading dimension"):
        scan(lambda c, x: (c, x), 0.0, (fnp.ones(3), fnp.ones(4)))
    with pytest.raises(fa.ShapeError, match="length=2"):
        scan(lambda c, x: (c, x), 0.0, fnp.ones(3), length=2)
    with pytest.raises(TypeError, match="pair"):
        scan(lambda c, x: c, 0.0, fnp.ones(3))
    with pytest.raises(fa.DTypeError, match="carry"):
        scan(lambda c, x: (c + x, x), fnp.zeros((), dtype=fnp.int32), fnp.ones(3))
    # length as jax.lax.scan converts it, int(length) (JAX 0.10.2 gave these lengths; 3.5 truncates there too)
    for length, want in ((3.0, 3), (3.5, 3), (np.float32(3), 3), ("3", 3), (np.array(3.0), 3), (fnp.asarray(2), 2),
                         (True, 1)):
        assert fa.lax.scan(lambda c, _: (c + 1, c), 0, None, length=length)[1].shape == (want,), length
    for length, error in ((float("nan"), ValueError), (float("inf"), OverflowError), (3j, TypeError),
                          (-1.0, ValueError)):
        with pytest.raises(error, match="scan's length"):
            scan(lambda c, x: (c, x), 0.0, None, length=length)
    with pytest.raises(fa.ConcretizationError, match="length must be concrete.*while_loop"):
        fa.jit(lambda n: scan(lambda c, x: (c, x), 0.0, None, length=n))(3)


def test_nested_control_flow_program_verifies():
    def f(x):
        def outer(c):
            i, v = c
            v = cond(i % 2 == 0, lambda a: scan(lambda s, e: (s + e, s * e), a[0], a)[1],
                     lambda a: fori_loop(0, 2, lambda j, b: b * 0.5, a), v)
            return i + 1, v
        return while_loop(lambda c: c[0] < 3, outer, (0, x))[1]
    xn = _f64(4).astype(np.float32)
    prog = _traced(f, fnp.asarray(xn))
    assert {"while", "cond", "scan"} <= _prims(prog)
    v = xn.astype(np.float64)
    for i in range(3):
        if i % 2 == 0:
            s, ys = v[0], np.zeros(4)
            for j in range(4):
                ys[j] = s * v[j]
                s = s + v[j]
            v = ys
        else:
            v = v * 0.25
    for out in _both(f, fnp.asarray(xn)):
        _close(out, v)


# =================================================================================== vmap


def test_vmap_cond_batched_and_unbatched_predicate():
    _require("vmap")
    xn = _f64(6, 3).astype(np.float32)
    w = fnp.asarray(_f64(3).astype(np.float32))

    def f(x):
        return cond(x.sum() > 0, lambda a: (a * w, a.sum()), lambda a: (-a, a.max()), x)
    outs = [fa.vmap(f)(fnp.asarray(xn)), fa.jit(fa.vmap(f))(fnp.asarray(xn))]
    _traced(fa.vmap(f), fnp.asarray(xn))
    for out in outs:
        for r in range(6):
            ref = f(fnp.asarray(xn[r]))
            _close(out[0][r], ref[0])
            _close(out[1][r], ref[1])

    def g(p, x):   # the predicate is not batched: only the operands are
        return cond(p, lambda a: a * w, lambda a: a - w, x)
    prog = _traced(fa.vmap(g, in_axes=(None, 0)), True, fnp.asarray(xn))
    assert "cond" in _prims(prog)
    for p in (True, False):
        out = fa.vmap(g, in_axes=(None, 0))(p, fnp.asarray(xn))
        _close(out, xn * np.asarray(w) if p else xn - np.asarray(w))


def test_vmap_switch_batched_index():
    _require("vmap")
    idx = fnp.asarray(np.array([-1, 0, 1, 2, 5], np.int32))
    xn = _f64(5, 2).astype(np.float32)
    fns = [lambda v: v + 1.0, lambda v: v * v, lambda v: fnp.cos(v)]
    refs = [lambda v: v + 1.0, lambda v: v * v, np.cos]
    out = fa.vmap(lambda i, v: switch(i, fns, v))(idx, fnp.asarray(xn))
    for r, i in enumerate([-1, 0, 1, 2, 5]):
        _close(out[r], refs[min(max(i, 0), 2)](xn[r]))


def test_vmap_while_per_element_trip_counts():
    _require("vmap")
    xn = np.array([0.1, 0.4, 3.0, 1.0, 7.5], np.float32)

    def f(x):
        return while_loop(lambda c: c[1] < 5.0, lambda c: (c[0] + 1, c[1] * 2.0 + 0.1), (0, x))
    ref_n, ref_v = [], []
    for v in xn.astype(np.float64):
        n = 0
        while v < 5.0:
            n, v = n + 1, v * 2.0 + 0.1
        ref_n.append(n)
        ref_v.append(v)
    for n, v in [fa.vmap(f)(fnp.asarray(xn)), fa.jit(fa.vmap(f))(fnp.asarray(xn))]:
        np.testing.assert_array_equal(np.asarray(n), ref_n)
        _close(v, ref_v)
    _traced(fa.vmap(f), fnp.asarray(xn))

    # An unbatched predicate with a carry that only becomes batched through the body (fixed point).
    def g(x):
        return while_loop(lambda c: c[0] < 3, lambda c: (c[0] + 1, c[1] + x), (0, 0.0))[1]
    _close(fa.vmap(g)(fnp.asarray(xn)), 3 * xn)
    # A fori_loop with a batched upper bound becomes a while with a batched predicate.
    h = fa.vmap(lambda n, x: fori_loop(0, n, lambda i, c: c + x, fnp.zeros_like(x)))
    ns = np.array([0, 1, 4, 2, 3], np.int32)
    _close(h(fnp.asarray(ns), fnp.asarray(xn)), ns * xn)


def test_vmap_scan_axes_and_carry_fixed_point():
    _require("vmap")
    xs_n = _f64(3, 5, 2).astype(np.float32)     # batch axis 0 of the vmap, then the scan axis
    w_n = _f64(3, 2).astype(np.float32)

    def f(w, xs):
        # The carry starts unbatched (zeros) and becomes batched through w and xs.
        return scan(lambda c, x: (c * 0.5 + x * w, (c * x).sum()), fnp.zeros(2), xs)

    def ref(w, xs):
        c, ys = np.zeros(2), []
        for x in xs.astype(np.float64):
            ys.append((c * x).sum())
            c = c * 0.5 + x * w
        return c, np.array(ys)
    for vf in (fa.vmap(f), fa.jit(fa.vmap(f))):
        c, ys = vf(fnp.asarray(w_n), fnp.asarray(xs_n))
        for b in range(3):
            rc, rys = ref(w_n[b], xs_n[b])
            _close(c[b], rc)
            _close(ys[b], rys)
    _traced(fa.vmap(f), fnp.asarray(w_n), fnp.asarray(xs_n))
    # xs batched along its own axis 1 (in_axes=1), the weights unbatched.
    xs_t = np.ascontiguousarray(np.swapaxes(xs_n, 0, 1))
    c, ys = fa.vmap(f, in_axes=(None, 1))(fnp.asarray(w_n[0]), fnp.asarray(xs_t))
    for b in range(3):
        rc, rys = ref(w_n[0], xs_n[b])
        _close(c[b], rc)
        _close(ys[b], rys)


# =================================================================================== forward mode


@pytest.mark.enable_x64
def test_jvp_cond_switch_against_finite_differences():
    _require("jvp")
    x, v = _f64(4), _f64(4)

    def f(a):
        return cond(a[0] > 0, lambda b: fnp.sin(b) * b[1], lambda b: b * b, a)

    def g(a):
        return switch(1, [lambda b: b, lambda b: fnp.exp(b) * b.sum(), lambda b: -b], a)
    for fn in (f, g):
        for xx in (x, -np.abs(x)):
            p, t = fa.jvp(fn, (fnp.asarray(xx),), (fnp.asarray(v),))
            _close(p, _np_of(fn)(xx))
            _close(t, _fd_jvp(_np_of(fn), xx, v), rtol=1e-6, atol=1e-7)


@pytest.mark.enable_x64
def test_jvp_while_and_scan_against_finite_differences():
    _require("jvp")
    x, v = np.abs(_f64(3)) + 0.5, _f64(3)

    def wl(a):
        # The scalar counter has no tangent; the float carry gets one (fixed point with the const a).
        return while_loop(lambda c: c[0] < 4, lambda c: (c[0] + 1, fnp.sin(c[1]) * a + c[1]), (0, fnp.zeros_like(a)))[1]

    def sc(a):
        c, ys = scan(lambda c, e: (c * e + fnp.sin(c), {"y": c * a[0]}), 1.0, a, reverse=True)
        return fnp.concatenate([c[None], ys["y"]])
    for fn in (wl, sc):
        for g in (fn, fa.jit(fn)):
            p, t = fa.jvp(g, (fnp.asarray(x),), (fnp.asarray(v),))
            _close(p, _np_of(fn)(x))
            _close(t, _fd_jvp(_np_of(fn), x, v), rtol=1e-6, atol=1e-7)
        fa.check_program(fa.make_ir(lambda a, t, fn=fn: fa.jvp(fn, (a,), (t,)))(fnp.asarray(x), fnp.asarray(v)))


# =================================================================================== reverse mode


@pytest.mark.enable_x64
def test_grad_fori_loop_static_bounds():
    _require("grad")
    x = _f64(3)

    def f(a):
        out = fori_loop(0, 4, lambda i, c: (c[0] * fnp.cos(a) + i * c[1], c[1] + a * a), (fnp.ones_like(a), a))
        return (out[0] * out[1]).sum()
    g = fa.grad(f)(fnp.asarray(x))
    _close(g, _fd_grad(_np_of(f), x), rtol=1e-6, atol=1e-7)
    prog = _traced(fa.grad(f), fnp.asarray(x))
    assert "scan" in _prims(prog)


@pytest.mark.enable_x64
def test_jit_grad_scan_against_finite_differences():
    _require("grad")
    xs, w = _f64(6, 2), _f64(2)

    def loss(w, xs):
        def step(c, x):
            h = fnp.tanh(c["h"] * w + x)
            return {"h": h, "n": c["n"] + 1}, (h * h).sum()
        carry, ys = scan(step, {"h": fnp.zeros(2, dtype=fnp.float64), "n": 0}, xs)
        return ys.sum() + carry["h"].sum()
    gw, gx = fa.jit(fa.grad(loss, argnums=(0, 1)))(fnp.asarray(w), fnp.asarray(xs))
    _close(gw, _fd_grad(lambda a: float(loss(fnp.asarray(a), fnp.asarray(xs))), w), rtol=1e-6, atol=1e-7)
    _close(gx, _fd_grad(lambda a: float(loss(fnp.asarray(w), fnp.asarray(a))), xs), rtol=1e-6, atol=1e-7)
    _traced(fa.grad(loss, argnums=(0, 1)), fnp.asarray(w), fnp.asarray(xs))

    def rev(a):  # a reverse scan with a carry that is only linear through a captured value
        c, ys = scan(lambda c, x: (c + x * a[0], fnp.sin(c) * x), 0.0, a, reverse=True)
        return c + ys.sum()
    a = _f64(5)
    _close(fa.grad(rev)(fnp.asarray(a)), _fd_grad(lambda z: float(rev(fnp.asarray(z))), a), rtol=1e-6, atol=1e-7)


@pytest.mark.enable_x64
def test_grad_cond_and_switch():
    _require("grad")
    x = _f64(3)

    def f(a, k):
        r = switch(k, [lambda b: (fnp.sin(b) * b[0]).sum(), lambda b: (b * b).sum(), lambda b: fnp.exp(b).sum()], a)
        return r + cond(a.sum() > 0, lambda b: b[1] ** 3, lambda b: 2.0 * b[2], a)
    for k in (0, 1, 2):
        for xx in (x, x - 3.0):
            for g in (fa.grad(f), fa.jit(fa.grad(f))):
                _close(g(fnp.asarray(xx), k), _fd_grad(lambda z, k=k: float(f(fnp.asarray(z), k)), xx),
                       rtol=1e-6, atol=1e-7)
    _traced(fa.grad(f), fnp.asarray(x), 1)


@pytest.mark.enable_x64
def test_second_order_through_scan_and_cond():
    _require("hessian", "grad")
    x = _f64(3)

    def f(a):
        c, _ = scan(lambda c, e: (c * fnp.sin(e) + e * e, c), 1.0, a)
        return c + cond(a[0] > 0, lambda b: (b ** 3).sum(), lambda b: (fnp.exp(b) * b[1]).sum(), a)
    h = fa.hessian(f)(fnp.asarray(x))
    g = fa.grad(f)
    ref = np.stack([_fd_grad(lambda z, i=i: float(g(fnp.asarray(z))[i]), x) for i in range(3)])
    _close(h, ref, rtol=1e-5, atol=1e-6)


@pytest.mark.enable_x64
def test_vmap_of_grad_of_scan():
    _require("grad", "vmap")
    xs = _f64(4, 5)

    def f(a):
        return scan(lambda c, e: (c * fnp.cos(e) + e, c), 0.5, a)[1].sum()
    out = fa.vmap(fa.grad(f))(fnp.asarray(xs))
    for b in range(4):
        _close(out[b], _fd_grad(lambda z: float(f(fnp.asarray(z))), xs[b]), rtol=1e-6, atol=1e-7)


def test_reverse_mode_through_while_loop_raises():
    _require("grad")

    def f(a):
        return while_loop(lambda c: c[0] < 3, lambda c: (c[0] + 1, c[1] * a), (0, 1.0))[1]
    with pytest.raises(ReverseModeError, match="while_loop.*fnarray.scan.*fnarray.fori_loop"):
        fa.grad(f)(fnp.asarray(2.0))
    with pytest.raises(ValueError, match="static"):
        fa.jit(fa.grad(lambda a, n: fori_loop(0, n, lambda i, c: c * a, 1.0)))(fnp.asarray(2.0), 3)
    # A loop that only computes primal values (no tangent flows through it) is fine.
    g = fa.grad(lambda a: a * while_loop(lambda c: c < 10, lambda c: c * 2, 1).astype(fnp.float32))
    _close(g(fnp.asarray(3.0)), 16.0)


@pytest.mark.enable_x64
def test_grad_scan_does_not_stack_loop_invariant_weights():
    _require("grad")
    w = fnp.asarray(_f64(3, 3))
    xs = fnp.asarray(_f64(7, 3))

    def f(w, xs):
        return scan(lambda h, x: (fnp.tanh(w @ h + x), h.sum()), fnp.zeros(3, dtype=fnp.float64), xs)[1].sum()
    prog = _traced(fa.grad(f), w, xs)
    shapes = {v.aval.shape for e in walk_eqns(prog) for v in e.outputs}
    assert (7, 3, 3) not in shapes, "the weight matrix was stacked once per iteration as a residual"
    _close(fa.grad(f)(w, xs), _fd_grad(lambda a: float(f(fnp.asarray(a), xs)), np.asarray(w)), rtol=1e-6, atol=1e-7)
