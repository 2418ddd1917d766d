"""Gradient checkpointing as JAX's (issue 25 item 5), JAX as the oracle: for the same functions and policies,
the residuals fnarray saves (``saved_residuals``: their types and kinds) are JAX's (``jax.ad_checkpoint``), the
backward program recomputes what is not saved (more equations when less is saved), and gradients agree on
every device."""

from __future__ import annotations

import collections
import contextlib
import io
import re

import numpy as np
import pytest

import fnarray as fa
import fnarray.numpy as fnp
from fnarray import ad_checkpoint as fac
from fnarray.core.ir import check_program
from fnarray.core.subprograms import subprograms

jax = pytest.importorskip("jax")
jnp = jax.numpy
from jax import ad_checkpoint as jac  # noqa: E402

LIBS = {"fa": (fa, fnp, fac), "jax": (jax, jnp, jac)}


def _mlp(lib, xp, ac):
    def layer(w, x, name):
        return xp.sin(ac.checkpoint_name(xp.dot(w, x), name))

    def f(w1, w2, w3, x):
        return layer(w3, layer(w2, layer(w1, x, "a"), "b"), "c").sum()
    return f


def _batched(lib, xp, ac):
    def f(a, b):
        return xp.tanh(xp.einsum("bij,bjk->bik", a, b)).sum() + xp.cos(a).sum()
    return f


def _args(which):
    rng = np.random.default_rng(0)
    if which == "mlp":
        return [rng.standard_normal(s).astype(np.float32) * 0.5 for s in ((5, 4), (6, 5), (7, 6), (4,))]
    return [rng.standard_normal(s).astype(np.float32) for s in ((2, 3, 4), (2, 4, 5))]


def _policies(lib):
    cp = lib.checkpoint_policies
    return {
        "none": None,
        "everything_saveable": cp.everything_saveable,
        "nothing_saveable": cp.nothing_saveable,
        "dots_saveable": cp.dots_saveable,
        "dots_with_no_batch_dims_saveable": cp.dots_with_no_batch_dims_saveable,
        "save_only_these_names(a, c)": cp.save_only_these_names("a", "c"),
        "save_any_names_but_these(a)": cp.save_any_names_but_these("a"),
        "save_from_both_policies": cp.save_from_both_policies(cp.save_only_these_names("b"),
                                                              cp.dots_with_no_batch_dims_saveable),
    }


def _kind(text):
    """``from the argument x`` / ``output of dot_general`` / ``named 'a'`` without JAX's source positions."""
    return re.sub(r" from \S+:\d+:\d+ \(.*\)$", "", text).strip()


def _residuals(lib, ac, f, args):
    if lib is fa:
        return [(a.str_short(), text) for a, text in ac.saved_residuals(f, *args)]
    buf = io.StringIO()  # JAX's public form: the printed lines
    with contextlib.redirect_stdout(buf):
        ac.print_saved_residuals(f, *args)
    return [(line.split(" ", 1)[0], _kind(line.split(" ", 1)[1])) for line in buf.getvalue().splitlines()]


@pytest.mark.parametrize("which", ["mlp", "batched"])
@pytest.mark.parametrize("policy", list(_policies(fa)))
def test_saved_residuals_are_jaxs(which, policy):
    if (which, policy) == ("batched", "everything_saveable"):
        pytest.skip("everything_saveable keeps what the plain linearization keeps, which follows each primitive's "
                    "JVP rule, not the policy: fnarray's cos and tanh rules save -sin(x) and 1 - tanh(x)**2 where "
                    "JAX's save sin(x), tanh(x) and 1 - tanh(x)**2 (test_the_policy_changes_what_the_backward_pass_"
                    "recomputes compares it with fnarray's own vjp)")
    args = _args(which)
    got = {}
    for name, (lib, xp, ac) in LIBS.items():
        f = (_mlp if which == "mlp" else _batched)(lib, xp, ac)
        g = lib.checkpoint(f, policy=_policies(lib)[policy])
        got[name] = collections.Counter(_residuals(lib, ac, g, args))
    assert got["fa"] == got["jax"]


def test_print_saved_residuals_prints_them():
    f = fa.checkpoint(_mlp(fa, fnp, fac), policy=fa.checkpoint_policies.save_only_these_names("b"))
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        fac.print_saved_residuals(f, *_args("mlp"))
    lines = buf.getvalue().splitlines()
    assert lines == ["f32[5,4] from the argument w1", "f32[6,5] from the argument w2",
                     "f32[7,6] from the argument w3", "f32[4] from the argument x", "f32[6] named 'b'"]


def _count_eqns(program):
    n = 0
    for e in program.eqns:
        n += 1
        for sub in subprograms(e):
            n += _count_eqns(sub)
    return n


def test_the_policy_changes_what_the_backward_pass_recomputes():
    """Saving less means recomputing more: the backward program (``make_ir`` of vjp's function) grows as the
    policy saves less, and the residuals (its constants) shrink; everything_saveable is the plain vjp."""
    args = [fnp.asarray(a) for a in _args("mlp")]
    f = _mlp(fa, fnp, fac)
    sizes = {}
    for name, policy in _policies(fa).items():
        _, f_vjp = fa.vjp(fa.checkpoint(f, policy=policy), *args)
        prog = fa.make_ir(f_vjp)(fnp.float32(1.0))
        check_program(prog)
        assert len(prog.constvars) == len(fa.tree_util.tree_leaves(f_vjp))  # the residuals, shown as constants
        sizes[name] = (len(fa.tree_util.tree_leaves(f_vjp)), _count_eqns(prog))
    _, plain = fa.vjp(f, *args)
    assert sizes["everything_saveable"][0] == len(fa.tree_util.tree_leaves(plain))
    n_res = {k: v[0] for k, v in sizes.items()}
    n_eqns = {k: v[1] for k, v in sizes.items()}
    assert n_res["nothing_saveable"] == n_res["none"] == 4 < n_res["dots_saveable"] < n_res["everything_saveable"]
    assert n_eqns["nothing_saveable"] > n_eqns["dots_saveable"] > n_eqns["everything_saveable"]
    assert n_eqns["save_only_these_names(a, c)"] < n_eqns["nothing_saveable"]


@pytest.mark.parametrize("policy", ["none", "dots_saveable", "save_only_these_names(a, c)",
                                    "save_from_both_policies"])
def test_gradients_agree_with_jax_on_every_device(device, policy):
    args = _args("mlp")
    want = jax.grad(jax.checkpoint(_mlp(jax, jnp, jac), policy=_policies(jax)[policy]), argnums=(0, 1, 2, 3))(*args)
    f = fa.checkpoint(_mlp(fa, fnp, fac), policy=_policies(fa)[policy])
    dev_args = [fa.device_put(a, device) for a in args]
    for got in (fa.grad(f, argnums=(0, 1, 2, 3))(*dev_args), fa.jit(fa.grad(f, argnums=(0, 1, 2, 3)))(*dev_args)):
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=2e-5, atol=2e-6)


def test_names_policies_and_errors():
    x = fnp.arange(3.0)
    named = fac.checkpoint_name({"p": x, "q": (x, x)}, "h")
    assert fa.tree_util.tree_structure(named) == fa.tree_util.tree_structure({"p": x, "q": (x, x)})
    assert "name[name=h]" in str(fa.make_ir(lambda y: fac.checkpoint_name(y, "h") * 2)(x))
    with pytest.raises(TypeError, match="string"):
        fac.checkpoint_name(x, 3)
    with pytest.raises(NotImplementedError, match="dots_with_no_batch_dims_saveable"):
        fa.checkpoint_policies.offload_dot_with_no_batch_dims("device", "pinned_host")
    with pytest.raises(TypeError, match="policy"):
        fa.checkpoint(lambda y: y, policy="dots")
    assert fa.remat is fa.checkpoint and fac.checkpoint is fa.checkpoint
    assert fa.checkpoint_policies.save_only_these_names("a") == fa.checkpoint_policies.save_only_these_names("a")
    # a custom policy (JAX's calling convention: primitive, *avals, **params) is honoured as by JAX
    got = {}
    for name, (lib, xp, ac) in LIBS.items():
        def policy(prim, *avals, **params):
            return prim.name == "sin"
        f = lib.checkpoint(lambda y, xp=xp: xp.cos(xp.sin(y) * 2.0).sum(), policy=policy)
        got[name] = sorted(_residuals(lib, ac, f, [np.arange(3.0, dtype=np.float32)]))
    assert got["fa"] == got["jax"] and len(got["fa"]) == 2


def _static_fns(lib, xp):
    def layers(x, n, act):
        for _ in range(n):     # Python control flow on the static arguments
            x = xp.sin(x) if act == "sin" else xp.tanh(x)
        return x

    def scaled(x, w, *, scale):
        return xp.sum(layers(x * scale, 2, "tanh") * w)
    return layers, scaled


@pytest.mark.parametrize("static", [(1, 2), (-2, -1)])
def test_static_argnums_with_grad_as_jax(device, static):
    x = np.linspace(-1.0, 1.0, 5, dtype=np.float32)
    w = np.arange(5, dtype=np.float32)
    got, want = {}, {}
    for name, out in (("fa", got), ("jax", want)):
        lib, xp, _ = LIBS[name]
        layers, scaled = _static_fns(lib, xp)
        xa = fa.device_put(fnp.asarray(x), device) if name == "fa" else x
        f = lib.checkpoint(layers, static_argnums=static)
        out["grad"] = lib.grad(lambda v, f=f: xp.sum(f(v, 3, "sin") ** 2))(xa)
        out["jit"] = lib.jit(lib.grad(lambda v, f=f: xp.sum(f(v, 2, "tanh"))))(xa)
        r = lib.remat(layers, static_argnums=static, policy=lib.checkpoint_policies.dots_saveable,
                      prevent_cse=False)
        out["vmap"] = lib.vmap(lib.grad(lambda v, r=r: r(v, 1, "sin")))(xa)
        # keyword arguments are traced (dynamic), as JAX's
        s = lib.checkpoint(scaled)
        out["kw"] = lib.grad(lambda v, s=s: s(v, w, scale=2.0), argnums=0)(xa)
    for k in want:
        np.testing.assert_allclose(np.asarray(got[k]), np.asarray(want[k]), rtol=2e-5, atol=1e-6, err_msg=k)


def test_static_argnums_out_of_range_raises_as_jax():
    for lib, _, _ in LIBS.values():
        f = lib.checkpoint(lambda x, n: x * n, static_argnums=(2,))
        with pytest.raises(ValueError, match="static_argnums"):
            f(1.0, 2)
    with pytest.raises(TypeError, match="static_argnums"):
        fa.checkpoint(lambda x: x, static_argnums=("a",))
