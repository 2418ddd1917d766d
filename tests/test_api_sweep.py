"""Names of ``jax.numpy``, ``jax.lax``, ``jax.nn``, ``jax.scipy.special``/``linalg`` and ``jax`` that the
twenty-fifth session's API sweep found missing, each against JAX itself (the oracle) on tiny inputs.

The sweep's full list (present / missing / parameter mismatches per namespace) is in docs/from_jax.md.
"""

from __future__ import annotations

import inspect

import numpy as np
import pytest

import fnarray as fa
import fnarray.numpy as fnp

jax = pytest.importorskip("jax")
jnp = jax.numpy

R = np.random.RandomState(0)
A = np.array([3, 1, 5, 3, 7], np.int32)
B = np.array([2, 3, 7, 8], np.int32)
Q = np.array([[1.0, np.nan, 3.0, 4.0], [np.nan] * 4, [2.0, -1.0, 0.5, 9.0]], np.float32)
P = np.array([1.0, -2.0, 3.0], np.float32)
POS = np.array([0.3, 1.0, 2.5, 4.0], np.float32)
NEG = np.array([-2.5, -0.5, 0.3, 1.0, 4.5], np.float32)
PHASE = np.array([0.0, 3.0, 6.5, -3.0, 10.0], np.float32)
M = R.randn(4, 3).astype(np.float32)
XS = np.linspace(0.0, 1.0, 7, dtype=np.float32)
YS = np.stack([1 + 2 * XS - 3 * XS ** 2 + 0.01 * np.sin(9 * XS), XS ** 3], axis=1).astype(np.float32)

# (name, fnarray function, jax function, arguments, keyword arguments)
CASES = [
    ("union1d", fnp.union1d, jnp.union1d, (A, B), {}),
    ("union1d_size", fnp.union1d, jnp.union1d, (A, B), {"size": 9}),
    ("intersect1d", fnp.intersect1d, jnp.intersect1d, (A, B), {"size": 4}),
    ("setdiff1d", fnp.setdiff1d, jnp.setdiff1d, (A, B), {"size": 4}),
    ("setxor1d", fnp.setxor1d, jnp.setxor1d, (A, B), {"size": 6}),
    ("nanquantile", fnp.nanquantile, jnp.nanquantile, (Q, np.float32([0.3, 0.5])), {"axis": 1}),
    ("nanquantile_keep", fnp.nanquantile, jnp.nanquantile, (Q, 0.7), {"axis": 1, "keepdims": True,
                                                                     "method": "midpoint"}),
    ("nanpercentile", fnp.nanpercentile, jnp.nanpercentile, (Q, 25.0), {"axis": 1, "method": "lower"}),
    ("nanmedian", fnp.nanmedian, jnp.nanmedian, (Q,), {}),
    ("polyadd", fnp.polyadd, jnp.polyadd, (P, P[1:]), {}),
    ("polysub", fnp.polysub, jnp.polysub, (P[1:], P), {}),
    ("polymul", fnp.polymul, jnp.polymul, (P, P[1:]), {}),
    ("polyder", fnp.polyder, jnp.polyder, (P, 2), {}),
    ("polyint", fnp.polyint, jnp.polyint, (P, 2, np.float32([1.0, 2.0])), {}),
    ("polyfit", fnp.polyfit, jnp.polyfit, (XS, YS, 2), {"w": XS + 1}),
    ("ediff1d", fnp.ediff1d, jnp.ediff1d, (P,), {"to_begin": 9.0, "to_end": P}),
    ("unwrap", fnp.unwrap, jnp.unwrap, (PHASE,), {}),
    ("resize", fnp.resize, jnp.resize, (P, (2, 4)), {}),
    ("choose", fnp.choose, jnp.choose, (np.array([0, 2, 1]), [P, 10 * P, 100 * P]), {"mode": "wrap"}),
    ("put_along_axis", fnp.put_along_axis, jnp.put_along_axis,
     (np.zeros((2, 3), np.float32), np.array([[1], [2]]), 5.0, 1), {"inplace": False}),
    ("top_k_axis", fa.lax.top_k, jax.lax.top_k, (M, 2), {"axis": 0}),
    ("svd_positional", fnp.linalg.svd, jnp.linalg.svd, (M, False, False), {}),
    ("pinv_positional", fnp.linalg.pinv, jnp.linalg.pinv, (M, 1e-3), {}),
    ("bitwise_count", fnp.bitwise_count, jnp.bitwise_count, (np.array([7, -3, 0, 255], np.int32),), {}),
    ("fromfunction", fnp.fromfunction, jnp.fromfunction, (lambda i, j: i * 3 + j, (2, 3)), {}),
    ("apply_over_axes", lambda a, axes: fnp.apply_over_axes(fnp.sum, a, axes),
     lambda a, axes: jnp.apply_over_axes(jnp.sum, a, axes), (np.ones((2, 3, 4), np.float32), (0, 2)), {}),
]
SPECIAL = [("gamma", (NEG,)), ("gammasgn", (NEG,)), ("loggamma", (POS,)), ("beta", (NEG, POS[:1] + 0.1)),
           ("factorial", (NEG,)), ("comb", (NEG + 3, POS[:1])), ("poch", (POS, NEG[:1] + 3)),
           ("rel_entr", (NEG, POS[:1])), ("kl_div", (NEG, POS[:1])), ("boxcox", (POS, NEG[:1])),
           ("boxcox1p", (POS, NEG[:1]))]
LINALG = [("toeplitz", (P, POS)), ("toeplitz", (np.ones((2, 3), np.float32),)), ("hankel", (P, POS)),
          ("hankel", (P,)), ("circulant", (P,)), ("companion", (P,)), ("hilbert", (3,)), ("hadamard", (4,)),
          ("pascal", (4,)), ("pascal", (3, "upper")), ("dft", (4, "sqrtn"))]
LAX = [("igamma", (POS, POS[::-1])), ("igammac", (POS, POS[::-1])), ("betainc", (POS, POS[::-1], POS / 5)),
       ("bessel_i0e", (P,)), ("bessel_i1e", (P,)), ("polygamma", (np.float32(1), POS)), ("zeta", (POS + 2, POS)),
       ("broadcast_to_rank", (P, 3)), ("tile", (P, (2,))), ("split", (np.arange(5), (2, 3))),
       ("unstack", (np.ones((2, 3), np.float32), 1))]


def _module_cases(fa_mod, jax_mod, table):
    return [(f"{name}{i}", getattr(fa_mod, name), getattr(jax_mod, name), args, {})
            for i, (name, args) in enumerate(table)]


def _all_cases():
    import jax.scipy.linalg
    import jax.scipy.special

    import fnarray.lax
    import fnarray.scipy.linalg
    import fnarray.scipy.special
    return (CASES + _module_cases(fnarray.scipy.special, jax.scipy.special, SPECIAL)
            + _module_cases(fnarray.scipy.linalg, jax.scipy.linalg, LINALG)
            + _module_cases(fnarray.lax, jax.lax, LAX)
            + [("logmeanexp", fa.nn.logmeanexp, jax.nn.logmeanexp, (Q[2:], 1), {"where": Q[2:] > 0}),
               ("logsumexp_where", fa.nn.logsumexp, jax.nn.logsumexp, (Q[2:], 1), {"where": Q[2:] > 0})])


EAGER_ONLY = ("union1d",)  # results of a value-dependent length: JAX too computes them outside jit


@pytest.fixture(scope="module")
def jax_results():
    """JAX's result of every case, keyed by name: one jitted program for all (compiling each of them on its own
    took 12 s of CPU, one program 2 s, without LLVM's optimizations about half that)."""
    cases = [c for c in _all_cases() if c[0] not in EAGER_ONLY]
    outs = jax.jit(lambda: [theirs(*args, **kwargs) for _, _, theirs, args, kwargs in cases]).lower().compile(
        {"xla_backend_optimization_level": 0})()  # without LLVM's optimizations: half the compile's CPU time
    results = {c[0]: out for c, out in zip(cases, outs, strict=True)}
    results.update({c[0]: c[2](*c[3], **c[4]) for c in _all_cases() if c[0] in EAGER_ONLY})
    return results


@pytest.mark.parametrize("case", _all_cases(), ids=lambda c: c[0])
def test_added_names_match_jax(case, jax_results):
    name, ours, _, args, kwargs = case
    with fa.default_device("numpy:0"):
        got = ours(*args, **kwargs)
    want = jax_results[name]
    got_leaves, want_leaves = fa.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)
    assert len(got_leaves) == len(want_leaves), name
    for g, w in zip(got_leaves, want_leaves, strict=True):
        assert np.shape(g) == np.shape(w), (name, np.shape(g), np.shape(w))
        np.testing.assert_allclose(np.asarray(g, np.complex128), np.asarray(w, np.complex128), rtol=2e-5,
                                   atol=2e-6, err_msg=name)


def test_set_operations_need_a_size_under_jit(jax_results):
    f = fa.jit(lambda a, b: fnp.union1d(a, b, size=9))
    np.testing.assert_array_equal(f(A, B), jax_results["union1d_size"])
    with pytest.raises(fa.ConcretizationError):
        fa.jit(lambda a, b: fnp.union1d(a, b))(A, B)


def test_top_level_names_and_vmap_argument_order():
    assert fa.default_backend() == fa.default_device().platform
    assert fa.local_devices() == fa.devices()
    with fa.named_scope("block"):
        assert fa.named_call(fnp.sin, name="s") is fnp.sin
    # jax.vmap's order: fun, in_axes, out_axes, axis_name, axis_size
    assert list(inspect.signature(fa.vmap).parameters)[:5] == list(inspect.signature(jax.vmap).parameters)[:5]
    got = fa.vmap(lambda v: fa.lax.psum(v, "i"), 0, 0, "i")(np.arange(3.0, dtype=np.float32))
    np.testing.assert_allclose(got, [3.0, 3.0, 3.0])
    for name in ("float_", "int_", "uint", "complex_", "double", "single", "cdouble", "csingle"):
        assert fnp.dtype(getattr(fnp, name)) == jnp.dtype(getattr(jnp, name)) or name in (
            "float_", "int_", "uint", "complex_", "double", "cdouble"), name  # 64-bit names give 32 bits without x64


def test_tree_util_names_match_jax():
    import dataclasses
    tu, jtu = fa.tree_util, jax.tree_util
    tree = {"a": [1, (2,)], "b": None}
    path, jpath = tu.tree_flatten_with_path(tree)[0][1][0], jtu.tree_flatten_with_path(tree)[0][1][0]
    assert tu.keystr(path, simple=True, separator="/") == jtu.keystr(jpath, simple=True, separator="/") == "a/1/0"
    assert tu.keystr(path) == jtu.keystr(jpath)
    for items in ([1, None, [2]], [1, 2.0]):
        assert tu.all_leaves(items) == jtu.all_leaves(items)
    assert len(tu.treedef_children(tu.tree_structure(tree))) == len(jtu.treedef_children(jtu.tree_structure(tree)))
    pair = tu.treedef_tuple([tu.tree_structure([1, 2]), tu.tree_structure(3)])
    assert pair.num_leaves == 3 and pair.unflatten([1, 2, 3]) == ([1, 2], 3)
    assert tu.tree_all([1, 0]) is False and tu.tree_all([[], 1], is_leaf=lambda x: x == []) is False

    @tu.register_static
    @dataclasses.dataclass(frozen=True)
    class Scale:
        v: int

    assert tu.tree_leaves([Scale(3), 2]) == [2]
    assert float(fa.jit(lambda s, x: x * s.v)(Scale(3), 2.0)) == 6.0
    assert list(inspect.signature(tu.register_pytree_node).parameters) == list(
        inspect.signature(jtu.register_pytree_node).parameters)


def _composites_program(a, b, q, p, phase):
    """One program over several of the added composites (sorts, gathers, cumulative sums, masks, logs)."""
    return (fnp.setdiff1d(a, b, size=4), fnp.nanquantile(q, 0.3, axis=1), fnp.unwrap(phase),
            fnp.choose(fnp.array([0, 2, 1]), [p, 10 * p, 100 * p]), fa.scipy.special.rel_entr(POS, p[:1] + 2))


def test_composites_on_every_device(device):
    """The numpy:0 results are JAX's (test_added_names_match_jax); every backend runs the same jitted program
    (webgpu:0 got unwrap's output wrong here until s25c-wgpubug: lavapipe miscompiled fmod's body in a phase after
    a barrier, test_kernel_phases.py)."""
    args = (A, B, Q, P, PHASE)
    with fa.default_device("numpy:0"):
        want = fa.jit(_composites_program)(*args)
    got = fa.jit(_composites_program)(*(fa.device_put(fnp.asarray(x), device) for x in args))
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(np.asarray(g, np.float64), np.asarray(w, np.float64), rtol=2e-5, atol=2e-5,
                                   equal_nan=True)


def _grad_cases():
    """(name, fnarray function, JAX function, arguments, positions of the float array arguments) of the added
    special functions, lax functions and structured matrices whose JAX version has a derivative there (the
    ``fnarray.numpy`` names have their rows in tests/test_grad_namespace.py)."""
    out = []
    for name, ours, theirs, args, kwargs in _all_cases()[len(CASES):]:
        argnums = tuple(i for i, a in enumerate(args) if isinstance(a, np.ndarray) and a.dtype.kind == "f")
        if kwargs or not argnums or name.startswith(("top_k", "svd", "pinv", "logmeanexp", "logsumexp")):
            continue
        try:
            jax.eval_shape(jax.grad(lambda *xs, _f=theirs: jnp.sum(_f(*xs)), argnums=argnums), *args)
        except Exception:  # JAX defines no derivative there (zeta's x, betainc's a and b, polygamma's order)
            continue
        out.append((name, ours, theirs, args, argnums))
    return out


def _weighted(fn, m, w):
    """``sum(fn(*xs) * w)``: a scalar with a full gradient."""
    return lambda *xs: m.sum(fn(*xs) * w)


def _weights(ours, args):
    """Cosines of the flat index in the output's shape, 0 where the value is infinite (constant there: JAX's
    ``kl_div`` gives -1 from its ``- p + q``)."""
    with fa.default_device("numpy:0"):
        value = np.asarray(ours(*args))
    return (np.cos(np.arange(value.size)).reshape(value.shape) * np.isfinite(value)).astype(value.dtype)


def test_added_differentiable_names_grad_as_jax():
    """``grad`` of a weighted sum of each added special function, lax function and structured matrix against
    ``jax.grad`` (one jitted JAX program for all; float32 at the sweep's ordinary points); where JAX gives NaN
    (``beta`` at negative non-integers: its ``betaln``'s derivative), against central differences."""
    cases = [c + (_weights(c[1], c[3]),) for c in _grad_cases()]
    assert len(cases) >= 20, [c[0] for c in cases]  # 22 on JAX 0.10.2
    # compiled without LLVM's optimizations (half the CPU time; the tolerance covers any change of rounding)
    want = jax.jit(lambda: [jax.grad(_weighted(theirs, jnp, w), argnums=argnums)(*args)
                            for _, _, theirs, args, argnums, w in cases]).lower().compile(
        {"xla_backend_optimization_level": 0})()
    for (name, ours, _, args, argnums, w), w_jax in zip(cases, want, strict=True):
        with fa.default_device("numpy:0"):
            f = _weighted(ours, fnp, w)
            got = fa.grad(f, argnums=argnums)(*args)
            for i, g, wj in zip(argnums, got, w_jax, strict=True):
                wj = np.array(wj)
                nan = np.isnan(wj)
                for k in np.flatnonzero(nan):
                    step = np.zeros_like(args[i])
                    step.flat[k] = 1e-2
                    hi, lo = (list(args[:i]) + [args[i] + s] + list(args[i + 1:]) for s in (step, -step))
                    wj.flat[k] = (float(f(*hi)) - float(f(*lo))) / 2e-2
                np.testing.assert_allclose(np.asarray(g), wj, rtol=2e-3 if nan.any() else 2e-4, atol=2e-5,
                                           err_msg=f"{name}: argument {i}")
