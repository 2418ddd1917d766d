"""Transforms nested in each other, against the same composition in JAX (64-bit) or a Python loop.

Each composition named in docs/design.md ("Transforms nest in any order") runs on the
numpy backend: ``jit(vmap(grad(f)))``, ``vmap(jit(f))``, ``grad(jit(f))``,
``jit(grad(f))`` of a ``scan``, ``vmap(cond)``, ``grad(fori_loop)``,
``hessian(jit(f))`` and more (custom rules, checkpoint, random keys under vmap).
Every program a composition produces is traced with ``fa.make_ir`` and verified
with ``fa.check_program``. Per-example gradients of a small MLP
(``vmap(grad(loss), in_axes=(None, 0, 0))``) are compared with a loop of
single-example gradients. One test runs ``jit(vmap(grad(f)))`` on every device.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import check_traced
from test_grad_namespace import JNS, jax_run

import fnarray as fa
import fnarray.numpy as fnp
from fnarray import tree_util
from fnarray.core.tracing import Tracer

RNG = np.random.default_rng(20240601)
TOL = dict(rtol=1e-9, atol=1e-11)
B = 4


def close(got, want, msg="", **tol):
    tol = tol or TOL
    g_leaves, w_leaves = tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)
    assert len(g_leaves) == len(w_leaves), msg
    for g, w in zip(g_leaves, w_leaves, strict=True):
        w = np.asarray(w)
        assert isinstance(g, fa.Array), msg
        assert g.shape == w.shape, f"{msg}: shape {g.shape} vs {w.shape}"
        assert g.dtype == w.dtype, f"{msg}: dtype {g.dtype} vs {w.dtype}"
        np.testing.assert_allclose(np.asarray(g), w, err_msg=msg, **tol)


def verified(f, *args):
    """``f(*args)`` after tracing ``f`` with ``make_ir`` and checking the program."""
    check_traced(f, *args)
    return f(*args)


# ------------------------------------------------------------------------------- scalar functions

# f(m, w, x) -> scalar, w: (3,), x: (3,) float64
SCALAR_FNS = {
    "tanh-quadratic": lambda m, w, x: m.sum(m.tanh(w * x + 0.5) ** 2),
    "logsumexp": lambda m, w, x: m.logsumexp(w * x + m.sin(w)),
    "sort": lambda m, w, x: m.sum(m.sort(w * x) * m.asarray(np.array([1.0, -2.0, 3.0]))),
    "cumprod-where": lambda m, w, x: m.sum(m.where(x > 0, m.cumprod(w * x + 2.0), m.exp(w))),
    "outer-einsum": lambda m, w, x: m.einsum("i,ij,j", w, m.outer(x, w), x) / 10.0,
    "index-clip": lambda m, w, x: m.sum(m.clip(w[np.array([2, 0, 1])] * x, -1.0, 1.0) ** 2) + m.max(w * x),
}


def _wx():
    return RNG.uniform(-1.5, 1.5, 3), RNG.uniform(-1.5, 1.5, (B, 3))


@pytest.mark.parametrize("name", list(SCALAR_FNS))
def test_jit_vmap_grad(name):
    fn = SCALAR_FNS[name]
    w, xs = _wx()
    for argnums in (0, 1, (0, 1)):
        f = fa.jit(fa.vmap(fa.grad(lambda a, b: fn(fnp, a, b), argnums=argnums), in_axes=(None, 0)))
        want = jax_run(jax.vmap(jax.grad(lambda a, b: fn(JNS, a, b), argnums=argnums), in_axes=(None, 0)), w, xs)
        close(verified(f, fnp.asarray(w), fnp.asarray(xs)), want, f"{name} argnums={argnums}")


@pytest.mark.parametrize("name", list(SCALAR_FNS))
def test_vmap_jit(name):
    fn = SCALAR_FNS[name]
    w, xs = _wx()
    f = fa.vmap(fa.jit(lambda a, b: fn(fnp, a, b)), in_axes=(None, 0))
    got = verified(f, fnp.asarray(w), fnp.asarray(xs))
    loop = np.stack([np.asarray(fa.jit(lambda a, b: fn(fnp, a, b))(w, xs[i])) for i in range(B)])
    close(got, loop, name)
    close(got, jax_run(jax.vmap(lambda a, b: fn(JNS, a, b), in_axes=(None, 0)), w, xs), name)


@pytest.mark.parametrize("name", list(SCALAR_FNS))
def test_grad_jit_and_jvp_jit(name):
    fn = SCALAR_FNS[name]
    w, xs = _wx()
    x = xs[0]
    g = verified(fa.grad(fa.jit(lambda a, b: fn(fnp, a, b)), argnums=(0, 1)), fnp.asarray(w), fnp.asarray(x))
    close(g, jax_run(jax.grad(lambda a, b: fn(JNS, a, b), argnums=(0, 1)), w, x), f"grad(jit) {name}")
    t = RNG.standard_normal(3)
    jv = fa.jvp(fa.jit(lambda a: fn(fnp, a, fnp.asarray(x))), (fnp.asarray(w),), (fnp.asarray(t),))
    want = jax_run(lambda a, v: jax.jvp(lambda u: fn(JNS, u, x), (a,), (v,)), w, t)
    close(jv, want, f"jvp(jit) {name}")
    # grad(vmap): the gradient of a sum over the batch
    gv = verified(fa.grad(lambda a, b: fnp.sum(fa.vmap(lambda v: fn(fnp, a, v))(b))), fnp.asarray(w),
                  fnp.asarray(xs))
    close(gv, jax_run(jax.grad(lambda a, b: jnp.sum(jax.vmap(lambda v: fn(JNS, a, v))(b))), w, xs),
          f"grad(vmap) {name}")


@pytest.mark.parametrize("name", ["tanh-quadratic", "logsumexp", "outer-einsum", "cumprod-where"])
def test_hessian_jit(name):
    fn = SCALAR_FNS[name]
    w, xs = _wx()
    f = fa.hessian(fa.jit(lambda a: fn(fnp, a, fnp.asarray(xs[1]))))
    want = jax_run(jax.hessian(lambda a: fn(JNS, a, xs[1])), w)
    close(verified(f, fnp.asarray(w)), want, f"hessian(jit) {name}")
    close(verified(fa.jit(fa.hessian(lambda a: fn(fnp, a, fnp.asarray(xs[1])))), fnp.asarray(w)), want,
          f"jit(hessian) {name}")
    # the Hessian of each example, mapped
    hv = verified(fa.vmap(fa.hessian(lambda a, v: fn(fnp, a, v)), in_axes=(None, 0)), fnp.asarray(w),
                  fnp.asarray(xs))
    close(hv, jax_run(jax.vmap(jax.hessian(lambda a, v: fn(JNS, a, v)), in_axes=(None, 0)), w, xs),
          f"vmap(hessian) {name}")


# ------------------------------------------------------------------------------- control flow


def _rnn(m, scan, w, h0, xs):
    """A tiny recurrent net: h <- tanh(W h + x), output sum of h per step."""
    def step(h, x):
        h = m.tanh(w @ h + x)
        return h, m.sum(h * h)
    h, ys = scan(step, h0, xs)
    return m.sum(h) + m.sum(ys * m.arange(1.0, xs.shape[0] + 1.0))


def test_jit_grad_scan():
    w = RNG.standard_normal((3, 3)) * 0.5
    h0 = RNG.standard_normal(3)
    xs = RNG.standard_normal((5, 3))
    f = fa.jit(fa.grad(lambda a, b, c: _rnn(fnp, fa.scan, a, b, c), argnums=(0, 1, 2)))
    want = jax_run(jax.grad(lambda a, b, c: _rnn(jnp, jax.lax.scan, a, b, c), argnums=(0, 1, 2)), w, h0, xs)
    close(verified(f, fnp.asarray(w), fnp.asarray(h0), fnp.asarray(xs)), want, "jit(grad(scan))")
    # reverse scans and vmap over a batch of sequences
    rev = fa.jit(fa.vmap(fa.grad(lambda a, c: _rnn(fnp, lambda s, i, x: fa.scan(s, i, x, reverse=True), a,
                                                     fnp.zeros(3, dtype=fnp.float64), c)), in_axes=(None, 0)))
    xb = RNG.standard_normal((2, 5, 3))
    want = jax_run(jax.vmap(jax.grad(lambda a, c: _rnn(jnp, lambda s, i, x: jax.lax.scan(s, i, x, reverse=True), a,
                                                       jnp.zeros(3), c)), in_axes=(None, 0)), w, xb)
    close(verified(rev, fnp.asarray(w), fnp.asarray(xb)), want, "jit(vmap(grad(reverse scan)))")


def test_grad_fori_loop():
    def f(m, fori, x, a):
        def body(i, c):
            return c * a + m.sin(c) * (i + 1.0)
        return m.sum(fori(0, 4, body, x))

    x = RNG.uniform(-1, 1, 3)
    a = np.float64(0.7)
    g = verified(fa.grad(lambda u, v: f(fnp, fa.fori_loop, u, v), argnums=(0, 1)), fnp.asarray(x), fnp.asarray(a))
    want = jax_run(jax.grad(lambda u, v: f(jnp, jax.lax.fori_loop, u, v), argnums=(0, 1)), x, a)
    close(g, want, "grad(fori_loop)")
    h = verified(fa.jit(fa.hessian(lambda u: f(fnp, fa.fori_loop, u, a))), fnp.asarray(x))
    close(h, jax_run(jax.hessian(lambda u: f(jnp, jax.lax.fori_loop, u, a)), x), "jit(hessian(fori_loop))")


def _cond_fn(m, cond, p, x, y):
    return cond(p, lambda u, v: m.sin(u) * v, lambda u, v: u - m.exp(v), x, y)


def test_vmap_cond():
    xs, ys = RNG.standard_normal((B, 3)), RNG.standard_normal((B, 3))
    ps = np.array([True, False, False, True])
    cases = {  # in_axes: (p, x, y)
        "all mapped": ((0, 0, 0), (ps, xs, ys)),
        "predicate mapped only": ((0, None, None), (ps, xs[0], ys[0])),
        "operands mapped only": ((None, 0, 0), (np.bool_(True), xs, ys)),
        "y unmapped": ((0, 0, None), (ps, xs, ys[1])),
    }
    for name, (in_axes, args) in cases.items():
        f = fa.vmap(lambda p, x, y: _cond_fn(fnp, fa.cond, p, x, y), in_axes=in_axes)
        got = verified(f, *[fnp.asarray(a) for a in args])
        want = jax_run(jax.vmap(lambda p, x, y: _cond_fn(jnp, jax.lax.cond, p, x, y), in_axes=in_axes), *args)
        close(got, want, f"vmap(cond) {name}")
        close(fa.jit(f)(*[fnp.asarray(a) for a in args]), want, f"jit(vmap(cond)) {name}")
    # gradient through a mapped cond, and cond of a mapped switch index
    g = verified(fa.vmap(fa.grad(lambda p, x, y: fnp.sum(_cond_fn(fnp, fa.cond, p, x, y)), argnums=(1, 2))),
                 fnp.asarray(ps), fnp.asarray(xs), fnp.asarray(ys))
    want = jax_run(jax.vmap(jax.grad(lambda p, x, y: jnp.sum(_cond_fn(jnp, jax.lax.cond, p, x, y)),
                                     argnums=(1, 2))), ps, xs, ys)
    close(g, want, "vmap(grad(cond))")
    idx = np.array([2, 0, 1, 2], np.int32)
    branches = [lambda x: fnp.sin(x), lambda x: x * x, lambda x: -fnp.cos(x)]
    jbranches = [lambda x: jnp.sin(x), lambda x: x * x, lambda x: -jnp.cos(x)]
    sw = verified(fa.vmap(fa.grad(lambda i, x: fnp.sum(fa.switch(i, branches, x)), argnums=1)),
                  fnp.asarray(idx), fnp.asarray(xs))
    close(sw, jax_run(jax.vmap(jax.grad(lambda i, x: jnp.sum(jax.lax.switch(i, jbranches, x)), argnums=1)), idx, xs),
          "vmap(grad(switch))")


def test_vmap_while_loop_with_mapped_predicate():
    """Each example stops at its own iteration: Newton's square root to a per-example tolerance."""
    def newton(m, while_loop, a):
        def cond(c):
            return m.abs(c[0] * c[0] - a) > 1e-10
        def body(c):
            return (0.5 * (c[0] + a / c[0]), c[1] + 1)
        return while_loop(cond, body, (a, 0))

    a = np.array([0.5, 2.0, 9.0, 1e4])
    got = verified(fa.vmap(lambda v: newton(fnp, fa.while_loop, v)), fnp.asarray(a))
    want = jax_run(jax.vmap(lambda v: newton(jnp, jax.lax.while_loop, v)), a)
    close(got[0], want[0], "root")
    np.testing.assert_array_equal(np.asarray(got[1]), np.asarray(want[1]))
    # forward mode through the mapped while_loop: d sqrt(a) / da = 1 / (2 sqrt(a))
    _, t = fa.jvp(lambda v: fa.vmap(lambda u: newton(fnp, fa.while_loop, u)[0])(v), (fnp.asarray(a),),
                  (fnp.ones(4, dtype=fnp.float64),))
    np.testing.assert_allclose(np.asarray(t), 0.5 / np.sqrt(a), rtol=1e-7)


def test_grad_scan_and_jacfwd_of_while_agree():
    """The same iteration as a scan (reverse mode) and as a while_loop (forward mode) has one derivative."""
    def by_scan(x):
        return fa.scan(lambda c, _: (fnp.cos(c) * c + 0.1, None), x, None, length=6)[0]

    def by_while(x):
        return fa.while_loop(lambda c: c[0] < 6, lambda c: (c[0] + 1, fnp.cos(c[1]) * c[1] + 0.1), (0, x))[1]

    x = fnp.asarray(RNG.uniform(-1, 1, 3))
    close(verified(fa.jacrev(by_scan), x), np.asarray(fa.jacfwd(by_while)(x)), "jacrev(scan) vs jacfwd(while)")


# ------------------------------------------------------------------------------- custom rules, checkpoint


def test_custom_jvp_under_vmap_jit_and_grad():
    @fa.custom_jvp
    def softplus(x):
        return fnp.log1p(fnp.exp(x))

    @softplus.defjvp
    def _(primals, tangents):
        (x,), (t,) = primals, tangents
        return softplus(x), t * fa.nn.sigmoid(x)

    xs = RNG.standard_normal((B, 3))
    want_g = jax_run(jax.vmap(jax.grad(lambda v: jnp.sum(jax.nn.softplus(v) ** 2))), xs)
    f = fa.jit(fa.vmap(fa.grad(lambda v: fnp.sum(softplus(v) ** 2))))
    close(verified(f, fnp.asarray(xs)), want_g, "jit(vmap(grad(custom_jvp)))")
    h = verified(fa.hessian(lambda v: fnp.sum(softplus(v))), fnp.asarray(xs[0]))
    close(h, jax_run(jax.hessian(lambda v: jnp.sum(jax.nn.softplus(v))), xs[0]), "hessian(custom_jvp)")


def _closing_custom_jvp(y, scale):
    """``sin(x) * y`` with a rule that closes over ``y`` and calls the function itself (JAX's usual form)."""
    @fa.custom_jvp
    def f(x):
        return fnp.sin(x) * y

    @f.defjvp
    def _(primals, tangents):
        return f(primals[0]), fnp.cos(primals[0]) * tangents[0] * y * scale

    return f


@pytest.mark.parametrize("wrap", ["plain", "jit"])
def test_custom_jvp_closed_over_values_get_no_tangent(wrap):
    """A differentiated value the function closes over is a constant for the rule (docs/transforms.md).

    The rule's tangent (scaled by 2, so it is visibly the rule's) is used for ``x``; ``y`` gets zero.
    """
    def g(x, y):
        return _closing_custom_jvp(y, 2.0)(x)

    x, y = 0.5, 3.0
    gr = fa.grad(g, argnums=(0, 1)) if wrap == "plain" else fa.jit(fa.grad(g, argnums=(0, 1)))
    gx, gy = verified(gr, fnp.asarray(np.float64(x)), fnp.asarray(np.float64(y)))
    np.testing.assert_allclose(float(gx), 2 * np.cos(x) * y, rtol=1e-12)
    assert float(gy) == 0.0
    p, t = fa.jvp(lambda v: g(fnp.asarray(np.float64(x)), v), (fnp.asarray(np.float64(y)),),
                  (fnp.asarray(np.float64(1.0)),))
    assert isinstance(p, fa.Array) and not isinstance(p, Tracer)
    np.testing.assert_allclose(float(p), np.sin(x) * y, rtol=1e-12)
    assert float(t) == 0.0
    # a value closed over from an *outer* grad is differentiated through the rule: d/dy (2 cos(x) y) = 2 cos(x)
    g2 = fa.grad(fa.grad(g), argnums=1)(fnp.asarray(np.float64(x)), fnp.asarray(np.float64(y)))
    np.testing.assert_allclose(float(g2), 2 * np.cos(x), rtol=1e-12)
    # a mapped closed-over value under vmap: the loop of single examples
    ys = np.array([1.0, -2.0, 0.5])
    got = fa.vmap(lambda v: fa.grad(lambda u: _closing_custom_jvp(v, 2.0)(u))(fnp.asarray(np.float64(x))))(
        fnp.asarray(ys))
    np.testing.assert_allclose(np.asarray(got), 2 * np.cos(x) * ys, rtol=1e-12)


def test_custom_vjp_is_reverse_mode_only():
    @fa.custom_vjp
    def f(x):
        return fnp.sin(x)

    f.defvjp(lambda x: (fnp.sin(x), x), lambda r, c: (c * fnp.cos(r),))
    x = fnp.asarray(np.array([0.3, -1.2]))
    for forward in (lambda: fa.jvp(f, (x,), (fnp.ones_like(x),)), lambda: fa.jacfwd(f)(x),
                    lambda: fa.jit(fa.jacfwd(f))(x)):
        with pytest.raises(TypeError, match="custom_vjp.*reverse mode.*custom_jvp"):
            forward()
    np.testing.assert_allclose(np.asarray(fa.jacrev(f)(x)), np.diag(np.cos(np.asarray(x))), rtol=1e-12)
    # forward over reverse differentiates bwd, which is ordinary code: the Hessian of sum(sin)
    np.testing.assert_allclose(np.asarray(fa.hessian(lambda v: fnp.sum(f(v)))(x)), np.diag(-np.sin(np.asarray(x))),
                               rtol=1e-12)


def test_custom_vjp_under_vmap_and_jit():
    @fa.custom_vjp
    def clip_gradient(x):
        return x

    def fwd(x):
        return x, None

    def bwd(_, g):
        return (fnp.clip(g, -0.5, 0.5),)

    clip_gradient.defvjp(fwd, bwd)
    xs = RNG.standard_normal((B, 3)) * 2
    f = fa.jit(fa.vmap(fa.grad(lambda v: fnp.sum(clip_gradient(v) ** 2))))
    got = verified(f, fnp.asarray(xs))
    np.testing.assert_allclose(np.asarray(got), np.clip(2 * xs, -0.5, 0.5), rtol=1e-12)


def test_custom_rules_get_python_numbers_with_a_weak_dtype_as_jax():
    """JAX passes a custom_jvp/custom_vjp function, its JVP rule and fwd Python floats that carry a weak dtype (its
    ``TypedFloat`` literals), and nondiff_argnums as given (was: the raw float, so ``grad(nn.relu)(1.0)`` raised
    AttributeError)."""
    weak = []

    def seen(tag, x):
        weak.append(getattr(x, "weak_type", lib is jax))
        return tag, np.dtype(x.dtype).kind if hasattr(x, "dtype") else type(x).__name__

    for lib in (jax, fa):
        log = []

        @lib.custom_jvp
        def f(x):
            log.append(seen("f", x))
            return x * 2

        f.defjvp(lambda p, t: (log.append(seen("rule", p[0])), (p[0] * 2, t[0] * 2.0))[1])

        @lib.custom_vjp
        def g(x):
            log.append(seen("g", x))
            return x * 3

        g.defvjp(lambda x: (log.append(seen("fwd", x)), (x * 3, None))[1], lambda r, c: (c * 3,))
        h = lib.custom_jvp(lambda n, x: (log.append(("h", type(n).__name__)), x * n)[1], nondiff_argnums=(0,))
        h.defjvp(lambda n, p, t: (p[0] * n, t[0] * n))
        outs = [f(1.0), lib.grad(f)(1.0), g(1.0), lib.grad(g)(1.0), h(3, 2.0), lib.grad(lib.nn.relu)(1.0)]
        assert [float(o) for o in outs] == [2.0, 2.0, 3.0, 3.0, 6.0, 1.0], lib
        if lib is jax:
            want = log
    assert log == want == [("f", "f"), ("rule", "f"), ("g", "f"), ("fwd", "f"), ("h", "int")]
    assert all(weak)


def test_checkpoint_and_stop_gradient():
    def layer(w, x):
        return fnp.tanh(w @ x)

    def net(w, x, remat):
        f = fa.checkpoint(layer) if remat else layer
        for _ in range(3):
            x = f(w, x)
        return fnp.sum(x ** 2)

    w, x = RNG.standard_normal((3, 3)) * 0.7, RNG.standard_normal(3)
    g_plain = fa.grad(net)(fnp.asarray(w), fnp.asarray(x), False)
    g_remat = verified(fa.jit(fa.grad(lambda a, b: net(a, b, True))), fnp.asarray(w), fnp.asarray(x))
    close(g_remat, np.asarray(g_plain), "checkpoint")
    close(g_plain, jax_run(jax.grad(lambda a, b: jnp.sum(jnp.tanh(a @ jnp.tanh(a @ jnp.tanh(a @ b))) ** 2)), w, x),
          "grad of the net")
    gs = verified(fa.grad(lambda a: fnp.sum(a * fa.stop_gradient(a) ** 2)), fnp.asarray(x))
    close(gs, x ** 2, "stop_gradient")


def test_linearize_and_vjp_under_jit():
    fn = SCALAR_FNS["tanh-quadratic"]
    w, xs = _wx()

    def vec(a):
        return fnp.tanh(a * fnp.asarray(xs[0])) * fnp.sin(a)

    y, f_lin = fa.linearize(vec, fnp.asarray(w))
    t = RNG.standard_normal(3)
    want_y, want_t = jax_run(lambda a, v: jax.jvp(lambda u: jnp.tanh(u * xs[0]) * jnp.sin(u), (a,), (v,)), w, t)
    close(y, want_y, "linearize primal")
    close(fa.jit(f_lin)(fnp.asarray(t)), want_t, "jit(linearized)")
    _, f_vjp = fa.vjp(vec, fnp.asarray(w))
    ct = RNG.standard_normal(3)
    want_ct = jax_run(lambda a, c: jax.vjp(lambda u: jnp.tanh(u * xs[0]) * jnp.sin(u), a)[1](c), w, ct)
    close(fa.jit(f_vjp)(fnp.asarray(ct)), want_ct, "jit(vjp function)")
    cts = RNG.standard_normal((2, 3))
    mapped = verified(fa.vmap(f_vjp), fnp.asarray(cts))
    close(mapped[0], np.stack([np.asarray(f_vjp(fnp.asarray(c))[0]) for c in cts]), "vmap(vjp function) vs loop")
    vg = verified(fa.jit(fa.value_and_grad(lambda a: fn(fnp, a, fnp.asarray(xs[0])), has_aux=False)), fnp.asarray(w))
    close(vg, jax_run(jax.value_and_grad(lambda a: fn(JNS, a, xs[0])), w), "jit(value_and_grad)")


# ------------------------------------------------------------------------------- per-example gradients


def _mlp_params(rng, dtype):
    return {"w1": (rng.standard_normal((5, 8)) * 0.5).astype(dtype), "b1": (rng.standard_normal(8) * 0.1).astype(dtype),
            "w2": (rng.standard_normal((8, 3)) * 0.5).astype(dtype), "b2": np.zeros(3, dtype)}


def _mlp_loss(m, nn, params, x, y):
    h = nn.relu(x @ params["w1"] + params["b1"])
    logits = h @ params["w2"] + params["b2"]
    return -m.sum(nn.one_hot(y, 3, dtype=logits.dtype) * nn.log_softmax(logits))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_per_example_gradients_of_mlp(dtype):
    rng = np.random.default_rng(7)
    params = _mlp_params(rng, dtype)
    xs = rng.standard_normal((6, 5)).astype(dtype)
    ys = rng.integers(0, 3, 6).astype(np.int32)
    p_fa = tree_util.tree_map(fnp.asarray, params)

    def loss(p, x, y):
        return _mlp_loss(fnp, fa.nn, p, x, y)

    per_example = fa.vmap(fa.grad(loss), in_axes=(None, 0, 0))
    got = verified(per_example, p_fa, fnp.asarray(xs), fnp.asarray(ys))
    got_jit = fa.jit(per_example)(p_fa, fnp.asarray(xs), fnp.asarray(ys))
    tol = dict(rtol=2e-5, atol=1e-6) if dtype == np.float32 else TOL
    for k in params:
        loop = np.stack([np.asarray(fa.grad(loss)(p_fa, fnp.asarray(xs[i]), fnp.asarray(ys[i]))[k])
                         for i in range(len(xs))])
        assert got[k].shape == (6,) + params[k].shape and got[k].dtype == dtype
        close(got[k], loop, f"per-example {k} vs loop", **tol)
        close(got_jit[k], loop, f"jit per-example {k} vs loop", **tol)
    want = jax_run(jax.vmap(jax.grad(lambda p, x, y: _mlp_loss(jnp, jax.nn, p, x, y)), in_axes=(None, 0, 0)),
                   params, xs, ys)
    close(got, want, "per-example vs JAX", **tol)
    # the mean of the per-example gradients is the gradient of the mean loss
    batch = fa.grad(lambda p: fnp.mean(fa.vmap(loss, in_axes=(None, 0, 0))(p, fnp.asarray(xs), fnp.asarray(ys))))(p_fa)
    for k in params:
        np.testing.assert_allclose(np.asarray(batch[k]), np.asarray(got[k]).mean(axis=0), **tol)


def test_jitted_training_step_with_optim():
    """``jit`` of a step (value_and_grad + fa.optim.adam) equals the eager step; Adam against NumPy."""
    rng = np.random.default_rng(11)
    params = tree_util.tree_map(fnp.asarray, _mlp_params(rng, np.float64))
    xs = fnp.asarray(rng.standard_normal((8, 5)))
    ys = fnp.asarray(rng.integers(0, 3, 8).astype(np.int32))
    opt = fa.optim.adam(1e-2)

    def step(p, state):
        def batch_loss(q):
            return fnp.mean(fa.vmap(lambda x, y: _mlp_loss(fnp, fa.nn, q, x, y))(xs, ys))
        loss, g = fa.value_and_grad(batch_loss)(p)
        updates, state = opt.update(g, state, p)
        return fa.optim.apply_updates(p, updates), state, loss, g

    state = opt.init(params)
    check_traced(step, params, state)
    jstep = fa.jit(step)
    p_e, s_e, p_j, s_j = params, state, params, state
    m = {k: np.zeros(np.shape(v)) for k, v in params.items()}
    v = {k: np.zeros(np.shape(v)) for k, v in params.items()}
    p_np = {k: np.asarray(val) for k, val in params.items()}
    losses = []
    for t in range(1, 4):
        p_e, s_e, loss_e, g = step(p_e, s_e)
        p_j, s_j, loss_j, _ = jstep(p_j, s_j)
        losses.append(float(loss_e))
        np.testing.assert_allclose(float(loss_j), float(loss_e), rtol=1e-12)
        for k in p_np:  # Adam by hand, on the same gradient
            gk = np.asarray(g[k])
            m[k] = 0.9 * m[k] + 0.1 * gk
            v[k] = 0.999 * v[k] + 0.001 * gk ** 2
            p_np[k] = p_np[k] - 1e-2 * (m[k] / (1 - 0.9 ** t)) / (np.sqrt(v[k] / (1 - 0.999 ** t)) + 1e-8)
            np.testing.assert_allclose(np.asarray(p_j[k]), np.asarray(p_e[k]), rtol=1e-12, atol=1e-14)
            np.testing.assert_allclose(np.asarray(p_e[k]), p_np[k], rtol=1e-5, atol=1e-7)
    assert losses[-1] < losses[0]


# ------------------------------------------------------------------------------- random under transforms


def test_random_under_vmap_and_jit():
    keys = fa.random.split(fa.random.key(3), B)
    got = verified(fa.vmap(lambda k: fa.random.normal(k, (2,), dtype=fnp.float32)), keys)
    loop = np.stack([np.asarray(fa.random.normal(keys[i], (2,), dtype=fnp.float32)) for i in range(B)])
    np.testing.assert_allclose(np.asarray(got), loop, rtol=1e-6)
    # uint32 named: this module runs with x64 on, where the default is uint64 (JAX's reference runs with it off)
    ub = fa.jit(fa.vmap(lambda k: fa.random.bits(k, (3,), fnp.uint32)))(keys)
    loop_bits = np.stack([np.asarray(fa.random.bits(keys[i], (3,), fnp.uint32)) for i in range(B)])
    np.testing.assert_array_equal(np.asarray(ub), loop_bits)
    want = np.asarray(jax.vmap(lambda k: jax.random.bits(k, (3,)))(jnp.asarray(np.asarray(fa.random.key_data(keys)))))
    np.testing.assert_array_equal(np.asarray(ub), want)


def test_key_captured_outside_jit_is_a_constant():
    """A key closed over by a jitted function is baked in: every call draws the same numbers."""
    k = fa.random.key(0)
    f = fa.jit(lambda x: x + fa.random.uniform(k, (3,)))
    a = f(fnp.zeros(3))
    b = f(fnp.zeros(3))
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    g = fa.jit(lambda key, x: x + fa.random.uniform(key, (3,)))
    k1, k2 = fa.random.split(k)
    assert not np.array_equal(np.asarray(g(k1, fnp.zeros(3))), np.asarray(g(k2, fnp.zeros(3))))


def test_grad_through_reparameterised_sample():
    """d/dmu, d/dsigma of E[(mu + sigma * eps)^2] on fixed noise, against the closed form on that noise."""
    eps = fa.random.normal(fa.random.key(1), (64,), dtype=fnp.float64)

    def loss(mu, sigma):
        return fnp.mean((mu + sigma * eps) ** 2)

    g = verified(fa.jit(fa.grad(loss, argnums=(0, 1))), fnp.asarray(np.float64(0.3)), fnp.asarray(np.float64(1.2)))
    e = np.asarray(eps)
    np.testing.assert_allclose(float(g[0]), np.mean(2 * (0.3 + 1.2 * e)), rtol=1e-12)
    np.testing.assert_allclose(float(g[1]), np.mean(2 * (0.3 + 1.2 * e) * e), rtol=1e-12)


# ------------------------------------------------------------------------------- on every device


def test_jit_vmap_grad_on_every_device(device):
    fn = SCALAR_FNS["tanh-quadratic"]
    w, xs = _wx()
    w32, xs32 = w.astype(np.float32), xs.astype(np.float32)
    f = fa.vmap(fa.grad(lambda a, b: fn(fnp, a, b), argnums=(0, 1)), in_axes=(None, 0))
    ref = fa.jit(f, device="numpy:0")(fnp.asarray(w32), fnp.asarray(xs32))
    got = fa.jit(f, device=device)(fa.device_put(fnp.asarray(w32), device), fa.device_put(fnp.asarray(xs32), device))
    for g, r in zip(got, ref, strict=True):
        assert g.dtype == np.float32 and g.shape == r.shape
        np.testing.assert_allclose(np.asarray(g), np.asarray(r), rtol=2e-5, atol=1e-6)


# ------------------------------------------------------------------------------- the docs page


def test_docs_transforms_examples_run():
    """The code blocks of docs/transforms.md run, in order, and say what the page claims."""
    import math
    import pathlib
    import re
    import textwrap
    text = (pathlib.Path(__file__).parent.parent / "docs" / "transforms.md").read_text()
    blocks = [textwrap.dedent(b) for b in re.findall(r"```python\n(.*?)```", text, re.S)]
    assert len(blocks) >= 5
    ns = {}
    for block in blocks:
        exec(compile(block, "docs/transforms.md", "exec"), ns)  # noqa: S102 (our own documentation)
    fa_, naive, safe, g = ns["fa"], ns["naive"], ns["safe"], ns["g"]
    assert math.isnan(float(fa_.grad(naive)(0.0)))
    assert float(fa_.grad(safe)(0.0)) == 0.0 and float(fa_.grad(safe)(4.0)) == 0.25
    gx, gy = fa_.grad(g, argnums=(0, 1))(0.5, 3.0)
    np.testing.assert_allclose(float(gx), 3 * np.cos(0.5), rtol=1e-6)
    assert float(gy) == 0.0


def test_has_aux_that_depends_on_the_input_is_returned_as_values():
    # Regression: aux outputs computed from the differentiated input leaked as tracers of the finished
    # linearization (TracerLeakError), eagerly and under jit, in vjp/grad/value_and_grad.
    x = fnp.asarray(np.arange(6.0, dtype=np.float32).reshape(2, 3))

    def f(a, label=None):
        aux = {"double": a * 2, "total": fnp.sum(a)}
        return fnp.sum(a * a), (aux if label is None else dict(aux, label=label))

    for g in (fa.value_and_grad(f, has_aux=True), fa.jit(fa.value_and_grad(f, has_aux=True))):
        (v, aux), grad = g(x)
        np.testing.assert_allclose(np.asarray(grad), 2 * np.asarray(x))
        np.testing.assert_allclose(np.asarray(aux["double"]), 2 * np.asarray(x))
        assert float(aux["total"]) == 15.0 and float(v) == 55.0
    assert fa.grad(f, has_aux=True)(x, "kept")[1]["label"] == "kept"  # a non-array aux leaf stays as it is


def test_jacobian_basis_made_once_per_shape(device):
    """``jacfwd``/``jacrev`` of small inputs reuse one identity basis per (shapes, dtypes, device) (``ad._bases``:
    issue 28's sweep over many functions made it on the host and copied it at every call): a second Jacobian
    places no array, a deleted basis is made again, and every result is ``diag(2 x)``."""
    import fnarray as fa
    from fnarray.transforms import ad
    from helpers import python_calls
    x = fa.device_put(np.linspace(-1, 1, 5, dtype=np.float32), device)
    want = np.diag(2 * np.asarray(x, np.float64))

    def f(v):
        return v * v
    for jac in (fa.jacfwd, fa.jacrev):
        np.testing.assert_allclose(np.asarray(jac(f)(x)), want, rtol=1e-5, atol=1e-6)
        calls = []
        calls = python_calls(lambda jac=jac: calls.append(np.asarray(jac(f)(x))))
        assert "array_from_numpy" not in calls
    if device.impl.eager_jacobian is not None:   # mlx: MLX's own transforms, with their basis made once per shape
        from fnarray.lowering.mlx import jacobians
        assert (5,) in jacobians._bases
        return
    (_dev, basis), = [v for k, v in ad._bases._d.items()   # (this configuration's: earlier tests may leave others)
                      if k[0] == ((5,),) and k[3] == fa.config.generation and v[0] is x.device]
    basis[0].delete()
    np.testing.assert_allclose(np.asarray(fa.jacfwd(f)(x)), want, rtol=1e-5, atol=1e-6)
