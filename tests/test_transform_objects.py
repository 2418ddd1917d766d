"""The transforms' objects as JAX's (issue 25 item 4), JAX as the oracle: ``vjp``'s and ``linearize``'s functions
are pytrees whose leaves are the residuals (passable to ``jit``); ``custom_vjp`` runs fwd and bwd only under
``grad`` (JAX's call sequence); ``custom_jvp``/``custom_vjp`` on Python and NumPy scalars return what JAX
returns; ``defjvps``, ``defjvp``, ``defvjp`` and ``register_pytree_node`` return what JAX's return."""

from __future__ import annotations

import numpy as np
import pytest

import fnarray as fa
import fnarray.numpy as fnp

jax = pytest.importorskip("jax")
jnp = jax.numpy

NAMESPACES = {"fa": (fa, fnp), "jax": (jax, jnp)}


def _f(xp):
    return lambda x, w: xp.tanh(x @ w) * x.sum()


@pytest.mark.parametrize("which", ["vjp", "linearize"])
def test_the_function_is_a_pytree_of_residuals_and_goes_through_jit(device, which):
    x = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
    w = np.linspace(0.5, -0.5, 12, dtype=np.float32).reshape(3, 4)
    results = {}
    for name, (lib, xp) in NAMESPACES.items():
        args = (fa.device_put(x, device), fa.device_put(w, device)) if name == "fa" else (x, w)
        if which == "vjp":
            out, fn = lib.vjp(_f(xp), *args)
            seed = (xp.ones_like(out),)
        else:
            out, fn = lib.linearize(_f(xp), *args)
            seed = (xp.ones_like(args[0]), xp.ones_like(args[1]))
        leaves = lib.tree_util.tree_leaves(fn)
        assert leaves and all(hasattr(leaf, "shape") for leaf in leaves), leaves
        direct = fn(*seed)
        through_jit = lib.jit(lambda fn, *s: fn(*s))(fn, *seed)   # the function as a jit argument
        rebuilt = lib.tree_util.tree_unflatten(lib.tree_util.tree_structure(fn), [leaf * 1 for leaf in leaves])
        results[name] = (direct, through_jit, rebuilt(*seed), len(leaves))
    for a, b in zip(jax.tree_util.tree_leaves(results["fa"][:3]), jax.tree_util.tree_leaves(results["jax"][:3]),
                    strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=2e-5, atol=2e-6)
    assert isinstance(fa.vjp(_f(fnp), x, w)[1], fa.tree_util.Partial)


def _counting_custom_vjp(lib, xp, calls):
    @lib.custom_vjp
    def f(x):
        calls.append("f")
        return xp.sin(x) * 2.0

    def fwd(x):
        calls.append("fwd")
        return f(x), xp.cos(x)

    def bwd(r, g):
        calls.append("bwd")
        return (2.0 * g * r,)
    f.defvjp(fwd, bwd)
    return f


@pytest.mark.parametrize("transform", ["call", "jit", "grad", "jit(grad)", "value_and_grad", "vjp", "vmap(grad)"])
def test_custom_vjp_call_sequence_as_jax(device, transform):
    seqs, values = {}, {}
    x = np.float32(0.7)
    for name, (lib, xp) in NAMESPACES.items():
        calls = []
        f = _counting_custom_vjp(lib, xp, calls)
        arg = fa.device_put(x, device) if name == "fa" else x
        run = {"call": lambda: f(arg), "jit": lambda: lib.jit(f)(arg), "grad": lambda: lib.grad(f)(arg),
               "jit(grad)": lambda: lib.jit(lib.grad(f))(arg), "value_and_grad": lambda: lib.value_and_grad(f)(arg),
               "vjp": lambda: lib.vjp(f, arg)[1](xp.ones_like(arg)),
               "vmap(grad)": lambda: lib.vmap(lib.grad(f))(xp.stack([arg, arg]))}[transform]
        values[name] = run()
        seqs[name] = calls
    assert seqs["fa"] == seqs["jax"], seqs
    for a, b in zip(jax.tree_util.tree_leaves(values["fa"]), jax.tree_util.tree_leaves(values["jax"]), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6)


def _kind(v):
    """What a result is: its Python type's kind, dtype and weak type (JAX's and fnarray's arrays alike)."""
    if isinstance(v, (float, int)):
        return (type(v).__name__,)
    if isinstance(v, np.generic):
        return ("numpy scalar", v.dtype.name)
    return ("array", np.dtype(v.dtype).name, bool(getattr(v, "weak_type", False)))


def _customs(lib, xp):
    @lib.custom_jvp
    def cj(x):
        return x * 2.0
    cj.defjvp(lambda p, t: (cj(p[0]), t[0] * 2.0))

    @lib.custom_vjp
    def cv(x):
        return x * 3.0
    cv.defvjp(lambda x: (cv(x), None), lambda r, g: (g * 3.0,))

    @lib.custom_vjp
    def cv_sin(x):
        return xp.sin(x)
    cv_sin.defvjp(lambda x: (cv_sin(x), xp.cos(x)), lambda r, g: (g * r,))
    return cj, cv, cv_sin


@pytest.mark.parametrize("arg", [1.5, np.float32(1.5), "array"], ids=["python", "numpy", "array"])
def test_custom_rules_on_scalars_return_what_jax_returns(arg):
    kinds, values = {}, {}
    for name, (lib, xp) in NAMESPACES.items():
        a = xp.asarray(1.5, dtype=xp.float32) if isinstance(arg, str) else arg
        out = []
        for f in _customs(lib, xp):
            out += [f(a), lib.jit(f)(a), lib.grad(f)(a)]
        kinds[name] = [_kind(v) for v in out]
        values[name] = [float(v) for v in out]
    assert kinds["fa"] == kinds["jax"]
    np.testing.assert_allclose(values["fa"], values["jax"], rtol=1e-6)


def test_definition_methods_return_what_jax_returns():
    returned = {}
    for name, (lib, xp) in NAMESPACES.items():
        @lib.custom_jvp
        def f(x, y):
            return x * y

        rule = lambda p, t: (p[0] * p[1], t[0] * p[1] + p[0] * t[1])  # noqa: E731
        r_defjvp = f.defjvp(rule)
        r_defjvps = f.defjvps(lambda t, ans, x, y: t * y, lambda t, ans, x, y: x * t)

        @lib.custom_vjp
        def g(x):
            return x
        r_defvjp = g.defvjp(lambda x: (x, None), lambda r, c: (c,))

        class Box:
            def __init__(self, v):
                self.v = v
        r_reg = lib.tree_util.register_pytree_node(Box, lambda b: ((b.v,), None), lambda aux, ch: Box(*ch))

        @lib.tree_util.register_pytree_node_class
        class Pair:
            def __init__(self, a, b):
                self.a, self.b = a, b

            def tree_flatten(self):
                return (self.a, self.b), None

            @classmethod
            def tree_unflatten(cls, aux, children):
                return cls(*children)
        returned[name] = (r_defjvp is rule, r_defjvps, r_defvjp, r_reg, isinstance(Pair, type))
        assert lib.tree_util.tree_leaves(Box(xp.ones(2)))[0].shape == (2,)
        assert float(lib.grad(f, argnums=1)(2.0, 3.0)) == 2.0
    assert returned["fa"] == returned["jax"]
