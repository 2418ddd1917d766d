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
