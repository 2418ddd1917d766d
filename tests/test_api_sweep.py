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
I2 = np.array([[3, 1, 3], [2, 2, 2], [3, 1, 3], [0, 5, 1]], np.int32)
X2 = np.array([[1.0, 2, 4], [np.nan, 2, 4], [1, 2, 4], [np.nan, 2, 4]], np.float32)
SPD = (M.T @ M + 2 * np.eye(3)).astype(np.float32)
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
    ("var_mean", fnp.var, jnp.var, (M, 0), {"mean": M.mean(0, keepdims=True) + 0.5, "correction": 1}),
    ("std_mean", fnp.std, jnp.std, (M, 1), {"mean": M.mean(1, keepdims=True), "keepdims": True}),
    ("nanstd_mean", fnp.nanstd, jnp.nanstd, (Q, 1, None, None, 1), {"mean": np.float32(2)}),
    ("unique_axis0", fnp.unique, jnp.unique, (I2, True, True, True, 0), {"size": 5, "fill_value": -1}),
    ("unique_nan_rows_ne", fnp.unique, jnp.unique, (X2,), {"axis": 0, "equal_nan": False, "size": 4}),
    ("unique_flat_size", fnp.unique, jnp.unique, (I2, True, True, True), {"size": 8, "sorted": True}),
    ("unique_all_size", fnp.unique_all, jnp.unique_all, (X2,), {"size": 6, "fill_value": 7}),
    ("polar", lambda a: fa.scipy.linalg.polar(a, "left"), lambda a: jax.scipy.linalg.polar(a, "left", method="svd"),
     (M.T,), {}),  # (JAX's default method, qdwh, converges to the same factors; compiling it costs 0.4 s)
    ("i0", fnp.i0, jnp.i0, (np.float32([-30, -1.5, 0, 0.5, 11, 40]),), {}),
    ("apply_over_axes", lambda a, axes: fnp.apply_over_axes(fnp.sum, a, axes),
     lambda a, axes: jnp.apply_over_axes(jnp.sum, a, axes), (np.ones((2, 3, 4), np.float32), (0, 2)), {}),
]
SPECIAL = [("gamma", (NEG,)), ("gammasgn", (NEG,)), ("loggamma", (POS,)), ("beta", (NEG, POS[:1] + 0.1)),
           ("factorial", (NEG,)), ("comb", (NEG + 3, POS[:1])), ("poch", (POS, NEG[:1] + 3)),
           ("rel_entr", (NEG, POS[:1])), ("kl_div", (NEG, POS[:1])), ("boxcox", (POS, NEG[:1])),
           ("boxcox1p", (POS, NEG[:1]))]
LINALG = [("toeplitz", (P, POS)), ("toeplitz", (np.ones((2, 3), np.float32),)), ("hankel", (P, POS)),
          ("hankel", (P,)), ("circulant", (P,)), ("companion", (P,)), ("hilbert", (3,)), ("hadamard", (4,)),
          ("pascal", (4,)), ("pascal", (3, "upper")), ("dft", (4, "sqrtn")),
          ("sqrtm", (np.float32([[1, 2, 3], [2, 4, 2], [3, 2, 1]]),))]
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
            + [("unique_axis_eager", fnp.unique, jnp.unique, (I2, True, True, True, 1), {}),
               ("logmeanexp", fa.nn.logmeanexp, jax.nn.logmeanexp, (Q[2:], 1), {"where": Q[2:] > 0}),
               ("logsumexp_where", fa.nn.logsumexp, jax.nn.logsumexp, (Q[2:], 1), {"where": Q[2:] > 0})])


EAGER_ONLY = ("union1d", "unique_axis_eager")  # results of a value-dependent length: JAX too computes them outside jit


@pytest.fixture(scope="module")
def jax_results():
    """JAX's result of every case, keyed by name: one jitted program for all (compiling each of them on its own
    took 12 s of CPU, one program 2 s), compiled without LLVM's optimizations (3.4 s of CPU for 70 cases, 4.3 s
    with them)."""
    cases = [c for c in _all_cases() if c[0] not in EAGER_ONLY]
    program = jax.jit(lambda: [theirs(*args, **kwargs) for _, _, theirs, args, kwargs in cases])
    outs = program.lower().compile({"xla_backend_optimization_level": 0})()
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
    """One program over several of the added composites (sorts, gathers, cumulative sums, masks, logs; the
    twenty-sixth session's std with mean= and i0). pure_callback runs on every device in test_parity.py's cases;
    unique(axis=) here cost opencl:0 0.8 s of kernel compiles."""
    m = fnp.asarray(M)
    return (fnp.setdiff1d(a, b, size=4), fnp.nanquantile(q, 0.3, axis=1), fnp.unwrap(phase),
            fnp.choose(fnp.array([0, 2, 1]), [p, 10 * p, 100 * p]), fa.scipy.special.rel_entr(POS, p[:1] + 2),
            fnp.std(m, 0, mean=fnp.mean(m, 0, keepdims=True) + p[:1], correction=1), fnp.i0(p * 3))


def test_composites_on_every_device(device):
    """The numpy:0 results are JAX's (test_added_names_match_jax); every backend runs the same jitted program
    (webgpu:0 got unwrap's output wrong here until s25c-wgpubug: lavapipe miscompiled fmod's body in a phase after
    a barrier, test_kernel_phases.py)."""
    args = (A, B, Q, P, PHASE)
    with fa.default_device("numpy:0"):
        want = fa.jit(_composites_program)(*args)
    got = fa.jit(_composites_program)(*(fa.device_put(fnp.asarray(x), device) for x in args))
    for g, w in zip(fa.tree_util.tree_leaves(got), fa.tree_util.tree_leaves(want), strict=True):
        np.testing.assert_allclose(np.asarray(g, np.float64), np.asarray(w, np.float64), rtol=2e-5, atol=2e-5,
                                   equal_nan=True)


def _affine_host(x, y, scale=1.0):
    """A pure host function: NumPy in, NumPy out (float32 and int32 results)."""
    return {"s": (np.sin(x) * scale + y).astype(np.float32), "n": np.asarray(np.sum(x > 0), np.int32)}


def _affine_cb(x, y, vmap_method="sequential"):
    out = {"s": fa.ShapeDtypeStruct(x.shape, fnp.float32), "n": fa.ShapeDtypeStruct((), fnp.int32)}
    return fa.pure_callback(_affine_host, out, x, y, scale=2.0, vmap_method=vmap_method)


def test_pure_callback_under_jit_vmap_and_scan():
    x, y = M[:2], np.float32(0.5)
    want = _affine_host(x, y, 2.0)
    seen = []
    with fa.default_device("numpy:0"):
        for got in (_affine_cb(x, y), fa.jit(_affine_cb)(x, y)):  # eager, then one program
            np.testing.assert_allclose(got["s"], want["s"], rtol=1e-6)
            assert got["n"].dtype == fnp.int32 and int(got["n"]) == int(want["n"])
        # vmap as JAX's: sequential calls once per example (nested: 2 x 3 calls), expand_dims once on the batch
        nested = fa.jit(fa.vmap(fa.vmap(_affine_cb, (0, None)), (1, None)))(x, y)
        np.testing.assert_allclose(nested["s"], want["s"].T, rtol=1e-6)

        def record(a, b):
            seen.append((a.shape, b.shape))
            return (a * b).astype(np.float32)
        once = fa.vmap(lambda a, b: fa.pure_callback(record, fa.ShapeDtypeStruct(a.shape, a.dtype), a, b,
                                                     vmap_method="expand_dims"), (0, None))(x, np.float32(3))
        np.testing.assert_allclose(once, 3 * x, rtol=1e-6)
        assert seen == [((2, 3), (1,))]

        def body(c, xi):  # inside a scan body: one call per step, in order; an unused result is still called
            r = fa.pure_callback(lambda a: (a + 1).astype(np.float32), fa.ShapeDtypeStruct((), fnp.float32), c)
            fa.pure_callback(record, fa.ShapeDtypeStruct((), fnp.float32), c, c)
            return r + xi, r
        c, ys = fa.jit(lambda xs: fa.lax.scan(body, np.float32(0), xs))(np.arange(4, dtype=np.float32))
        assert float(c) == 10.0 and ys.tolist() == [1.0, 2.0, 4.0, 7.0] and len(seen) == 5
        with pytest.raises(ValueError, match="custom_jvp"):
            fa.grad(lambda v: fa.pure_callback(np.sin, fa.ShapeDtypeStruct((), fnp.float32), v))(np.float32(1))
        with pytest.raises(NotImplementedError, match="vmap_method"):
            fa.vmap(lambda v: fa.pure_callback(np.sin, fa.ShapeDtypeStruct((), fnp.float32), v))(P)
        with pytest.raises(RuntimeError, match="int64.*expected float32"):  # (a float64 is cast, as JAX's)
            fa.jit(lambda v: fa.pure_callback(lambda a: a.astype(np.int64), fa.ShapeDtypeStruct((3,), fnp.float32),
                                              v))(P)
    with pytest.raises(ValueError, match="vmap_method"):
        fa.pure_callback(np.sin, fa.ShapeDtypeStruct((), fnp.float32), 1.0, vmap_method="loop")
    # JAX's own, the oracle of the vmap semantics: the same shapes reach the host function
    jseen = []
    jax.vmap(lambda a, b: jax.pure_callback(lambda u, v: jseen.append((u.shape, v.shape)) or np.asarray(u * v),
                                            jax.ShapeDtypeStruct(a.shape, a.dtype), a, b, vmap_method="expand_dims"),
             (0, None))(x, np.float32(3))
    assert jseen == seen[:1]


def test_disable_jit_runs_the_python_function():
    calls = []

    @fa.jit
    def f(x):
        calls.append(type(x).__name__)
        if float(fnp.sum(x)) > 0:  # a Python branch on a value: only without jit
            return x * 2
        return x

    with fa.disable_jit():
        np.testing.assert_allclose(f(P), 2 * P)
        with fa.disable_jit(False):
            with pytest.raises(fa.ConcretizationError):
                f(P)
        np.testing.assert_allclose(f(-P), -P)
    assert [c == "ndarray" for c in calls] == [True, False, True]  # (the middle one traced)
    with pytest.raises(fa.ConcretizationError):
        f(P)
    assert "disable" in inspect.signature(fa.disable_jit).parameters


def test_schur_factors():
    import fnarray.scipy.linalg as fsl
    for output, dtype in (("real", np.float32), ("complex", np.complex64)):
        t, z = fa.jit(lambda a, o=output: fsl.schur(a, o))(SPD + np.triu(M[:3], 1))
        t, z = np.asarray(t), np.asarray(z)
        assert t.dtype == z.dtype == dtype
        np.testing.assert_allclose(z @ t @ z.conj().T, SPD + np.triu(M[:3], 1), atol=2e-5)
        np.testing.assert_allclose(z.conj().T @ z, np.eye(3), atol=2e-6)
        assert np.abs(np.tril(t, -1 if output == "complex" else -2)).max() == 0
    with pytest.raises(ValueError, match="output"):
        fsl.schur(SPD, "upper")


def _newton(lax, grad):
    def solve(f, x0):
        return lax.fori_loop(0, 12, lambda i, x: x - f(x) / grad(f)(x), x0)
    return solve


def _implicit(ns, lax, grad, a, mat, b):
    """A root (sqrt(a) by Newton) and two linear solves (fnarray's second without a transpose_solve), both the
    matrix and the right-hand side differentiated."""
    root = lax.custom_root(lambda x: x ** 2 - a, ns.float32(1.0), _newton(lax, grad), lambda g, y: y / g(1.0))
    with_t = lax.custom_linear_solve(lambda x: mat @ x, b, lambda mv, r: ns.linalg.solve(mat, r),
                                     lambda vm, r: ns.linalg.solve(mat.T, r))
    plain = lax.custom_linear_solve(lambda x: mat @ x, b, lambda mv, r: ns.linalg.solve(mat, r),
                                    # (JAX's reverse mode needs the transposed solve: ours transposes solve's ops)
                                    (lambda vm, r: ns.linalg.solve(mat.T, r)) if ns is jnp else None)
    return root * ns.sum(with_t ** 2) + ns.sum(plain * b)


def test_custom_root_and_custom_linear_solve_match_jax():
    mat = SPD + np.triu(M[:3], 1)
    args = (np.float32(2.0), mat, P)
    f_ours = lambda a, m, v: _implicit(fnp, fa.lax, fa.grad, a, m, v)  # noqa: E731
    f_jax = lambda a, m, v: _implicit(jnp, jax.lax, jax.grad, a, m, v)  # noqa: E731
    want = jax.jit(lambda *xs: (f_jax(*xs), jax.grad(f_jax, (0, 1, 2))(*xs))).lower(*args).compile(
        {"xla_backend_optimization_level": 0})(*args)
    with fa.default_device("numpy:0"):
        got = (f_ours(*args), fa.jit(fa.grad(f_ours, (0, 1, 2)))(*args))
        for g, w in zip(fa.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want), strict=True):
            np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-6)
        # forward mode: the root, and the solve without transpose_solve (a custom_jvp)
        fwd = lambda a, v: fa.lax.custom_root(lambda x: x ** 2 - a, fnp.float32(1.0), _newton(fa.lax, fa.grad),  # noqa
                                              lambda g, y: y / g(1.0)) + fnp.sum(fa.lax.custom_linear_solve(
                                                  lambda x: mat @ x, v, lambda mv, r: fnp.linalg.solve(mat, r)))
        tangent = fa.jvp(fwd, args[::2], (np.float32(1), P))[1]
        np.testing.assert_allclose(tangent, 0.5 / np.sqrt(2) + np.linalg.solve(mat, P).sum(), rtol=1e-5)
        with pytest.raises(TypeError, match="structure"):
            fa.lax.custom_root(lambda x: (x, x), np.float32(1), _newton(fa.lax, fa.grad), lambda g, y: y)


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
