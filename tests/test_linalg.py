"""Linear algebra: the primitives of ``fnarray.lax.linalg`` and the namespace ``fnarray.numpy.linalg``.

References: NumPy's ``linalg`` in float64 (float32 at float32 tolerances), JAX (``jax.lax.linalg`` /
``jax.numpy.linalg`` under ``jax.enable_x64``) for derivatives, central finite differences in float64, and a
Python loop for ``vmap``. The full table runs on numpy:0; every other device gets a parity selection
against numpy:0 (docs/design.md test tiers). opencl and webgpu may run these primitives on numpy through the
fallback; ``KERNELS_REQUIRED`` (below) turns that into an error for the primitives that have kernels there.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import fnarray as fa
import fnarray.numpy as fnp
from fnarray.core import linalg as L
from fnarray.core.errors import DTypeError, LinAlgError, ShapeError
from fnarray.testing.linalg_cases import canonical, spd, well_separated

from helpers import check_traced, fallback_mode

#: opencl and webgpu have kernels for these primitives (``kernels/groups/linalg.py``): their device tests
#: run with ``fa.config.fallback = "error"`` there.
KERNELS_REQUIRED = True
KERNEL_PRIMITIVES = ("cholesky", "triangular_solve", "lu")

jax = pytest.importorskip("jax")
jnp = jax.numpy

RNG = np.random.default_rng(1515)
REF = fa.devices("numpy")[0]


def _mat(*shape, dtype=np.float64):
    a = RNG.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        a = a + 1j * RNG.standard_normal(shape)
    return a.astype(dtype)


def _tol(dtype):
    return 1e-4 if np.dtype(dtype) in (np.float32, np.complex64) else 1e-10


def _close(got, want, dtype, msg=""):
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=_tol(dtype), atol=_tol(dtype),
                               err_msg=msg)


def _phase_fixed(v):
    """Each column scaled so that its largest entry is real positive (eigen/singular vector convention)."""
    return canonical(L.eigh_p, [np.asarray(v), None])[0]


# ------------------------------------------------------------------------- the namespace against NumPy

def _lu_recon(x):
    lu, piv, perm = (np.asarray(o) for o in L.lu(fnp.asarray(x)))
    m, n = x.shape[-2:]
    k = min(m, n)
    low = np.tril(lu, -1)[..., :, :k] + np.eye(m, k)
    up = np.triu(lu)[..., :k, :]
    return np.take_along_axis(x, perm[..., None].astype(np.intp), -2), low @ up, piv


# name, fnp function, NumPy reference, inputs (as functions of a dtype), complex supported
def _sq(d, *b):
    return [_mat(*b, 4, 4, dtype=d)]


def _spd(d, *b):
    return [spd(RNG, *b, 4, 4, dtype=d).astype(d)]


def _rect(d, *b):
    return [well_separated(RNG, *b, 5, 3, dtype=d)]


NAMESPACE = [
    ("cholesky", fnp.linalg.cholesky, np.linalg.cholesky, _spd),
    ("cholesky_upper", lambda x: fnp.linalg.cholesky(x, upper=True), lambda x: np.linalg.cholesky(x, upper=True),
     _spd),
    ("det", fnp.linalg.det, np.linalg.det, _sq),
    ("slogdet", fnp.linalg.slogdet, np.linalg.slogdet, _sq),
    ("inv", fnp.linalg.inv, np.linalg.inv, _sq),
    ("solve", fnp.linalg.solve, np.linalg.solve, lambda d, *b: _sq(d, *b) + [_mat(*b, 4, 2, dtype=d)]),
    ("solve_vector", fnp.linalg.solve, np.linalg.solve, lambda d, *b: _sq(d, *b) + [_mat(4, dtype=d)]),
    ("eigvalsh", fnp.linalg.eigvalsh, np.linalg.eigvalsh, _spd),
    ("eigh_vectors", lambda x: _phase_fixed(fnp.linalg.eigh(x).eigenvectors),
     lambda x: _phase_fixed(np.linalg.eigh(x).eigenvectors), _spd),
    ("qr", lambda x: tuple(fnp.linalg.qr(x)), lambda x: tuple(np.linalg.qr(x)), _rect),
    ("qr_complete", lambda x: tuple(fnp.linalg.qr(x, mode="complete")),
     lambda x: tuple(np.linalg.qr(x, mode="complete")), _rect),
    ("svdvals", fnp.linalg.svdvals, lambda x: np.linalg.svd(x, compute_uv=False), _rect),
    ("svd_u", lambda x: _phase_fixed(fnp.linalg.svd(x, full_matrices=False).U),
     lambda x: _phase_fixed(np.linalg.svd(x, full_matrices=False).U), _rect),
    ("pinv", fnp.linalg.pinv, np.linalg.pinv, _rect),
    ("matrix_rank", fnp.linalg.matrix_rank, np.linalg.matrix_rank, _rect),
    ("matrix_power_3", lambda x: fnp.linalg.matrix_power(x, 3), lambda x: np.linalg.matrix_power(x, 3), _sq),
    ("matrix_power_-2", lambda x: fnp.linalg.matrix_power(x, -2), lambda x: np.linalg.matrix_power(x, -2), _spd),
    ("matrix_norm_fro", fnp.linalg.matrix_norm, np.linalg.matrix_norm, _rect),
    ("matrix_norm_nuc", lambda x: fnp.linalg.matrix_norm(x, ord="nuc"),
     lambda x: np.linalg.matrix_norm(x, ord="nuc"), _rect),
    ("matrix_norm_2", lambda x: fnp.linalg.matrix_norm(x, ord=2), lambda x: np.linalg.matrix_norm(x, ord=2), _rect),
    ("matrix_norm_-inf", lambda x: fnp.linalg.matrix_norm(x, ord=-np.inf, keepdims=True),
     lambda x: np.linalg.matrix_norm(x, ord=-np.inf, keepdims=True), _rect),
    ("vector_norm_3", lambda x: fnp.linalg.vector_norm(x, ord=3, axis=-1),
     lambda x: np.linalg.vector_norm(x, ord=3, axis=-1), _rect),
    ("vector_norm_inf", lambda x: fnp.linalg.vector_norm(x, ord=np.inf),
     lambda x: np.linalg.vector_norm(x, ord=np.inf), _rect),
    ("norm", fnp.linalg.norm, np.linalg.norm, _rect),
    ("cond", fnp.linalg.cond, np.linalg.cond, _sq),
    ("trace", fnp.linalg.trace, np.linalg.trace, _sq),
    ("diagonal", lambda x: fnp.linalg.diagonal(x, offset=-1), lambda x: np.linalg.diagonal(x, offset=-1), _sq),
    ("cross", fnp.linalg.cross, np.linalg.cross, lambda d, *b: [_mat(*b, 2, 3, dtype=d), _mat(*b, 2, 3, dtype=d)]),
    ("vecdot", fnp.linalg.vecdot, np.linalg.vecdot, lambda d, *b: [_mat(*b, 3, dtype=d), _mat(*b, 3, dtype=d)]),
    ("matmul", fnp.linalg.matmul, np.linalg.matmul, lambda d, *b: _sq(d, *b) + _sq(d, *b)),
    ("tensordot", lambda a, b: fnp.linalg.tensordot(a, b, axes=1), lambda a, b: np.linalg.tensordot(a, b, axes=1),
     lambda d, *b: _sq(d) + _sq(d)),
    ("outer", fnp.linalg.outer, np.linalg.outer, lambda d, *b: [_mat(3, dtype=d), _mat(4, dtype=d)]),
    ("matrix_transpose", fnp.linalg.matrix_transpose, np.linalg.matrix_transpose, _rect),
]


def _as_list(v):
    return [np.asarray(o) for o in v] if isinstance(v, (tuple, list)) else [np.asarray(v)]


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.complex128])
@pytest.mark.parametrize("batch", [(), (2,)], ids=["unbatched", "batched"])
@pytest.mark.parametrize("name,fn,ref,make", NAMESPACE, ids=[c[0] for c in NAMESPACE])
def test_namespace_against_numpy(name, fn, ref, make, batch, dtype):
    if name in ("tensordot", "outer") and batch:
        pytest.skip("rank-fixed operands: one case suffices")
    inputs = make(dtype, *batch)
    got = _as_list(fn(*[fnp.asarray(x) for x in inputs]))
    wide = [x.astype(np.complex128 if np.iscomplexobj(x) else np.float64) for x in inputs]
    want = _as_list(ref(*wide))
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape, (name, g.shape, w.shape)
        if w.dtype.kind in "fc":
            assert g.dtype == np.result_type(w.dtype, dtype) or g.dtype.itemsize <= w.dtype.itemsize, g.dtype
            _close(g, w, dtype, name)
        else:
            np.testing.assert_array_equal(g, w)


def test_result_types_and_reachability():
    import fnarray.numpy.linalg as la
    assert fnp.linalg is la and la.LinAlgError is LinAlgError
    assert issubclass(LinAlgError, np.linalg.LinAlgError) and issubclass(LinAlgError, ValueError)
    x = fnp.asarray(spd(RNG, 3, 3))
    assert type(la.eigh(x)).__name__ == "EighResult" and la.eigh(x)._fields == ("eigenvalues", "eigenvectors")
    assert la.qr(x)._fields == ("Q", "R") and la.svd(x)._fields == ("U", "S", "Vh")
    assert la.slogdet(x)._fields == ("sign", "logabsdet")
    import fnarray.lax
    assert fnarray.lax.linalg.cholesky is L.cholesky


@pytest.mark.enable_x64
def test_lstsq_multi_dot_tensor_functions():
    a, b = _mat(6, 3), _mat(6, 2)
    got = fnp.linalg.lstsq(fnp.asarray(a), fnp.asarray(b))
    want = np.linalg.lstsq(a, b)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(np.asarray(g), w, rtol=1e-10, atol=1e-10)
    xs = [_mat(2, 5), _mat(5, 3), _mat(3, 4), _mat(4)]
    np.testing.assert_allclose(np.asarray(fnp.linalg.multi_dot([fnp.asarray(x) for x in xs])),
                               np.linalg.multi_dot(xs), rtol=1e-10)
    t, rhs = _mat(2, 3, 6), _mat(2, 3)
    np.testing.assert_allclose(np.asarray(fnp.linalg.tensorsolve(fnp.asarray(t), fnp.asarray(rhs))),
                               np.linalg.tensorsolve(t, rhs), rtol=1e-9)
    t = _mat(4, 6, 8, 3)
    np.testing.assert_allclose(np.asarray(fnp.linalg.tensorinv(fnp.asarray(t), 2)), np.linalg.tensorinv(t, 2),
                               rtol=1e-8, atol=1e-10)


@pytest.mark.enable_x64
def test_lu_against_its_definition():
    for shape in [(4, 4), (2, 5, 3), (3, 5), (1, 0, 3), (3, 0)]:
        x = _mat(*shape)
        lhs, rhs, piv = _lu_recon(x)
        np.testing.assert_allclose(lhs, rhs, atol=1e-12)
        assert piv.dtype == np.int32
        if x.size:  # the same pivots as LAPACK's getrf (JAX on the CPU)
            np.testing.assert_array_equal(piv, np.asarray(jax.lax.linalg.lu(x)[1]))


@pytest.mark.enable_x64
def test_triangular_solve_every_flag_combination():
    a = np.tril(_mat(2, 4, 4, dtype=np.complex128)) + 4 * np.eye(4)
    a = a + np.triu(_mat(4, 4), 1) * 9  # never read with lower=True...
    b = _mat(2, 4, 3, dtype=np.complex128)
    for left in (True, False):
        for lower in (True, False):
            for trans in (False, True):
                for conj in (False, True):
                    for unit in (False, True):
                        t = np.tril(a) if lower else np.triu(a)
                        if unit:
                            t = t * (1 - np.eye(4)) + np.eye(4)
                        op = np.swapaxes(t, -1, -2) if trans else t
                        op = np.conj(op) if conj else op
                        rhs = b if left else np.swapaxes(b, -1, -2)
                        want = np.linalg.solve(op, rhs) if left else np.swapaxes(
                            np.linalg.solve(np.swapaxes(op, -1, -2), np.swapaxes(rhs, -1, -2)), -1, -2)
                        got = L.triangular_solve(fnp.asarray(a), fnp.asarray(rhs), left_side=left, lower=lower,
                                                 transpose_a=trans, conjugate_a=conj, unit_diagonal=unit)
                        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-9, atol=1e-9,
                                                   err_msg=str((left, lower, trans, conj, unit)))
    # One rank less: a vector per matrix, as jax.lax.linalg.triangular_solve.
    v = _mat(2, 4)
    got = L.triangular_solve(fnp.asarray(np.tril(a.real)), fnp.asarray(v), left_side=True, lower=True)
    np.testing.assert_allclose(np.asarray(got), np.linalg.solve(np.tril(a.real), v[..., None])[..., 0], rtol=1e-9)


def test_traced_programs_verify():
    x = fnp.asarray(spd(RNG, 2, 3, 3))
    check_traced(lambda a: fnp.linalg.solve(a, fnp.linalg.cholesky(a)), x)
    check_traced(fa.grad(lambda a: fnp.sum(fnp.linalg.eigh(a).eigenvalues ** 2)), x)
    check_traced(fa.vmap(lambda a: fnp.linalg.svd(a, full_matrices=False).U), x)


# ------------------------------------------------------------------------- derivatives

def _prim_fns():
    """(name, fnarray function, jax function, inputs): outputs invariant to eigen/singular vector signs."""
    a3 = spd(RNG, 2, 3, 3)
    t = np.tril(_mat(2, 3, 3)) + 3 * np.eye(3)
    ts = dict(left_side=True, lower=True, transpose_a=True)
    return [
        ("cholesky", L.cholesky, jax.lax.linalg.cholesky, [a3]),
        ("cholesky_complex", L.cholesky, jax.lax.linalg.cholesky, [spd(RNG, 3, 3, dtype=np.complex128)]),
        ("triangular_solve", lambda a, b: L.triangular_solve(a, b, **ts),
         lambda a, b: jax.lax.linalg.triangular_solve(a, b, **ts), [t, _mat(2, 3, 2)]),
        ("triangular_solve_right", lambda a, b: L.triangular_solve(a, b, lower=True, unit_diagonal=True),
         lambda a, b: jax.lax.linalg.triangular_solve(a, b, lower=True, unit_diagonal=True), [t, _mat(2, 4, 3)]),
        ("lu_square", lambda x: L.lu(x)[0], lambda x: jax.lax.linalg.lu(x)[0], [_mat(2, 3, 3)]),
        ("lu_wide", lambda x: L.lu(x)[0], lambda x: jax.lax.linalg.lu(x)[0], [_mat(3, 4)]),
        ("lu_tall", lambda x: L.lu(x)[0], lambda x: jax.lax.linalg.lu(x)[0], [_mat(4, 2)]),
        ("qr_reduced", lambda x: L.qr(x, full_matrices=False), lambda x: jax.lax.linalg.qr(x, full_matrices=False),
         [_mat(2, 4, 3)]),
        ("qr_full_tall", lambda x: L.qr(x), lambda x: jax.lax.linalg.qr(x), [_mat(4, 2)]),
        ("qr_wide_complex", lambda x: L.qr(x), lambda x: jax.lax.linalg.qr(x), [_mat(2, 3, dtype=np.complex128)]),
        ("eigh", lambda x: _sign_free_eigh(L.eigh(x), fnp), lambda x: _sign_free_eigh(jax.lax.linalg.eigh(x), jnp),
         [a3]),
        ("svd", lambda x: _sign_free_svd(L.svd(x, full_matrices=False), fnp),
         lambda x: _sign_free_svd(jax.lax.linalg.svd(x, full_matrices=False), jnp),
         [well_separated(RNG, 4, 3, dtype=np.float64)]),
        ("svd_wide_complex", lambda x: _sign_free_svd(L.svd(x, full_matrices=False), fnp),
         lambda x: _sign_free_svd(jax.lax.linalg.svd(x, full_matrices=False), jnp),
         [well_separated(RNG, 2, 3, dtype=np.complex128)]),
        ("svdvals", lambda x: L.svd(x, compute_uv=False), lambda x: jax.lax.linalg.svd(x, compute_uv=False),
         [_mat(3, 3)]),
    ]


def _sign_free_eigh(vw, ns):
    v, w = vw
    return ns.abs(v) ** 2, w


def _sign_free_svd(usv, ns):
    u, s, vh = usv
    return ns.abs(u) ** 2, s, ns.abs(vh) ** 2


PRIMS = _prim_fns()


def _flat(out):
    return out if isinstance(out, (tuple, list)) else (out,)


def _tangents(xs):
    return [_mat(*x.shape, dtype=x.dtype) for x in xs]


@pytest.mark.parametrize("name,f,jf,xs", PRIMS, ids=[p[0] for p in PRIMS])
@pytest.mark.enable_x64
def test_jvp_against_finite_differences_and_jax(name, f, jf, xs):
    ts = _tangents(xs)
    # Under jit on both sides: one compiled program each (op-by-op dispatch of ~50 ops costs more here).
    _, got = fa.jit(lambda a, t: fa.jvp(f, a, t))([fnp.asarray(x) for x in xs], [fnp.asarray(t) for t in ts])
    eps = 1e-6
    fj = fa.jit(f)
    plus = fj(*[fnp.asarray(x + eps * t) for x, t in zip(xs, ts, strict=True)])
    minus = fj(*[fnp.asarray(x - eps * t) for x, t in zip(xs, ts, strict=True)])
    for g, p, m in zip(_flat(got), _flat(plus), _flat(minus), strict=True):
        fd = (np.asarray(p) - np.asarray(m)) / (2 * eps)
        np.testing.assert_allclose(np.asarray(g), fd, rtol=1e-5, atol=1e-6, err_msg=name)
    with jax.enable_x64(True):
        _, want = jax.jit(lambda a, t: jax.jvp(jf, a, t))([jnp.asarray(x) for x in xs],
                                                          [jnp.asarray(t) for t in ts])
        for g, w in zip(_flat(got), _flat(want), strict=True):
            np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-9, atol=1e-10, err_msg=name)


@pytest.mark.parametrize("name,f,jf,xs", PRIMS, ids=[p[0] for p in PRIMS])
@pytest.mark.enable_x64
def test_grad_against_jax(name, f, jf, xs):
    outs = _flat(f(*[fnp.asarray(x) for x in xs]))
    ws = [RNG.standard_normal(np.shape(o)) for o in outs]

    def loss(ns, fn):
        def g(*a):
            return sum(ns.sum(ns.real(o) * w) for o, w in zip(_flat(fn(*a)), ws, strict=True))
        return g
    argnums = tuple(range(len(xs)))
    got = fa.jit(fa.grad(loss(fnp, f), argnums=argnums))(*[fnp.asarray(x) for x in xs])
    with jax.enable_x64(True):
        want = jax.jit(jax.grad(loss(jnp, jf), argnums=argnums))(*[jnp.asarray(x) for x in xs])
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-8, atol=1e-10, err_msg=name)


@pytest.mark.enable_x64
def test_namespace_grads_against_jax():
    x, b = _mat(3, 3) + 3 * np.eye(3), _mat(3, 2)
    s = spd(RNG, 3, 3)
    cases = [
        (lambda a, c: fnp.sum(fnp.linalg.solve(a, c) ** 2), lambda a, c: jnp.sum(jnp.linalg.solve(a, c) ** 2), [x, b]),
        (lambda a: fnp.linalg.det(a), jnp.linalg.det, [x]),
        (lambda a: fnp.linalg.slogdet(a).logabsdet, lambda a: jnp.linalg.slogdet(a)[1], [x]),
        (lambda a: fnp.sum(fnp.linalg.inv(a)), lambda a: jnp.sum(jnp.linalg.inv(a)), [x]),
        (lambda a: fnp.sum(fnp.linalg.cholesky(a) ** 2), lambda a: jnp.sum(jnp.linalg.cholesky(a) ** 2), [s]),
        (lambda a: fnp.linalg.matrix_norm(a, ord="nuc"), lambda a: jnp.linalg.matrix_norm(a, ord="nuc"), [x]),
        (lambda a: fnp.sum(fnp.linalg.pinv(a)), lambda a: jnp.sum(jnp.linalg.pinv(a)),
         [well_separated(RNG, 4, 3, dtype=np.float64)]),
    ]
    for f, jf, xs in cases:
        argnums = tuple(range(len(xs)))
        got = fa.jit(fa.grad(f, argnums=argnums))(*[fnp.asarray(v) for v in xs])
        with jax.enable_x64(True):
            want = jax.jit(jax.grad(jf, argnums=argnums))(*[jnp.asarray(v) for v in xs])
            for g, w in zip(got, want, strict=True):
                np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-8, atol=1e-10)


def test_repeated_eigenvalues_and_singular_values_follow_jax():
    # The values' derivatives stay finite, as JAX's. The vectors' derivatives are finite too (JAX's are inf/NaN):
    # the 1/(gap) terms of pairs inside a degenerate subspace are masked (issue 27 item 4, docs/linalg.md), and
    # the columns whose eigenvalue is simple agree with JAX's.
    x = np.diag([1.0, 1.0, 2.0])
    t = np.array([[0.0, 1.0, 0.5], [1.0, 0.0, 0.2], [0.5, 0.2, 1.0]])
    _, (dv, dw) = fa.jvp(L.eigh, [fnp.asarray(x)], [fnp.asarray(t)])
    with jax.enable_x64(True):
        _, (jdv, jdw) = jax.jvp(jax.lax.linalg.eigh, [jnp.asarray(x)], [jnp.asarray(t)])
        np.testing.assert_allclose(np.asarray(dw), np.asarray(jdw), atol=1e-12)
        assert np.all(np.isfinite(np.asarray(dw)))
        assert np.all(np.isfinite(np.asarray(dv))) and not np.all(np.isfinite(np.asarray(jdv)))
        np.testing.assert_allclose(np.asarray(dv)[:, 2], np.asarray(jdv)[:, 2], atol=1e-12)
        y = np.diag([3.0, 3.0, 1.0])[:, :2]
        g = fa.grad(lambda a: fnp.sum(L.svd(a, compute_uv=False)))(fnp.asarray(y))
        jg = jax.grad(lambda a: jnp.sum(jax.lax.linalg.svd(a, compute_uv=False)))(jnp.asarray(y))
        np.testing.assert_allclose(np.asarray(g), np.asarray(jg), atol=1e-12)
        _, (_, du, _) = fa.jvp(lambda a: L.svd(a, full_matrices=False), [fnp.asarray(y)], [fnp.asarray(t[:, :2])])
        _, (_, jdu, _) = jax.jvp(lambda a: jax.lax.linalg.svd(a, full_matrices=False), [jnp.asarray(y)],
                                 [jnp.asarray(t[:, :2])])
        assert np.all(np.isfinite(np.asarray(du)))


def test_svd_full_matrices_derivative_of_a_nonsquare_matrix_is_refused():
    with pytest.raises(ValueError, match="full_matrices=False"):
        fa.jvp(lambda a: L.svd(a, full_matrices=True), [fnp.asarray(_mat(3, 2))], [fnp.asarray(_mat(3, 2))])


@pytest.mark.enable_x64
def test_triangular_solve_transposes_in_b_only():
    a, b = np.tril(_mat(3, 3)) + 3 * np.eye(3), _mat(3, 2)
    ct = _mat(3, 2)
    _, vjp = fa.vjp(lambda y: L.triangular_solve(fnp.asarray(a), y, left_side=True, lower=True), fnp.asarray(b))
    (got,) = vjp(fnp.asarray(ct))
    np.testing.assert_allclose(np.asarray(got), np.linalg.solve(np.tril(a).T, ct), rtol=1e-10)
    ir = str(fa.make_ir(lambda y, c: vjp_of(y, c))(fnp.asarray(b), fnp.asarray(ct)))
    assert ir.count("triangular_solve") == 2 and "transpose_a=True" in ir  # the forward solve and its transpose


def vjp_of(y, c):
    a = fnp.asarray(np.tril(np.arange(1.0, 10.0).reshape(3, 3)) + 3 * np.eye(3))
    return fa.vjp(lambda v: L.triangular_solve(a, v, left_side=True, lower=True), y)[1](c)


# ------------------------------------------------------------------------- vmap against a loop

VMAPPED = [
    ("cholesky", L.cholesky, [spd(RNG, 3, 3, 3)], 0),
    ("triangular_solve_both", lambda a, b: L.triangular_solve(a, b, left_side=True, lower=True),
     [np.tril(_mat(3, 3, 3)) + 3 * np.eye(3), _mat(3, 3, 2)], 0),
    ("lu", lambda x: L.lu(x), [_mat(2, 4, 3)], 1),
    ("qr", lambda x: L.qr(x, full_matrices=False), [_mat(3, 4, 2)], 0),
    ("eigh", lambda x: L.eigh(x), [spd(RNG, 3, 3, 3)], 0),
    ("svd", lambda x: L.svd(x, compute_uv=False), [_mat(3, 2, 4)], 2),
    ("solve", fnp.linalg.solve, [_mat(3, 3, 3) + 3 * np.eye(3), _mat(3, 3)], 0),
]


@pytest.mark.parametrize("name,f,xs,axis", VMAPPED, ids=[v[0] for v in VMAPPED])
def test_vmap_against_a_loop(name, f, xs, axis):
    arrays = [fnp.asarray(x) for x in xs]
    got = _flat(fa.vmap(f, in_axes=axis)(*arrays))
    n = xs[0].shape[axis]
    loop = [_flat(f(*[fnp.asarray(np.take(x, i, axis=axis)) for x in xs])) for i in range(n)]
    for k, g in enumerate(got):
        np.testing.assert_allclose(np.asarray(g), np.stack([np.asarray(r[k]) for r in loop]), rtol=1e-10,
                                   atol=1e-12, err_msg=name)


def test_vmap_of_triangular_solve_with_an_unbatched_matrix():
    a = np.tril(_mat(3, 3)) + 3 * np.eye(3)
    bs = _mat(4, 3, 2)
    for left in (True, False):
        rhs = bs if left else np.swapaxes(bs, -1, -2)
        f = lambda b, left=left: L.triangular_solve(fnp.asarray(a), b, left_side=left, lower=True)  # noqa: E731
        for axis in (0, 2):
            moved = np.moveaxis(rhs, 0, axis)
            got = fa.vmap(f, in_axes=axis)(fnp.asarray(moved))
            want = np.stack([np.asarray(f(fnp.asarray(r))) for r in rhs])
            np.testing.assert_allclose(np.asarray(got), want, rtol=1e-10)


# ------------------------------------------------------------------------- bad input

def test_bad_input():
    la = fnp.linalg
    with pytest.raises(ShapeError, match="square"):
        la.inv(fnp.ones((2, 3)))
    with pytest.raises(ShapeError, match="square"):
        la.cholesky(fnp.ones((3, 2)))
    with pytest.raises(ShapeError, match="rank >= 2"):
        la.det(fnp.ones(3))
    with pytest.raises(ShapeError, match="does not fit"):
        la.solve(fnp.eye(3), fnp.ones((2, 1)))
    with pytest.raises(ShapeError, match="does not fit"):
        la.solve(fnp.eye(3), fnp.ones(2))
    with pytest.raises(ShapeError, match="batch"):
        L.triangular_solve(fnp.eye(3), fnp.ones((2, 3, 1)), left_side=True)
    with pytest.raises(DTypeError, match="float32, float64"):
        L.cholesky(fnp.eye(3, dtype=fnp.int32))
    with pytest.raises(TypeError, match="integer exponent"):
        la.matrix_power(fnp.eye(2), 1.5)
    with pytest.raises(ValueError, match="mode"):
        la.qr(fnp.eye(2), mode="economic")
    # Integers promote to the default float dtype, as jax.numpy.linalg.
    d = la.det(fnp.asarray([[2, 1], [1, 3]]))
    assert d.dtype == fnp.float32 and float(d) == pytest.approx(5.0)
    assert la.inv(fnp.asarray([[2, 0], [0, 4]], dtype=fnp.int8)).dtype == fnp.float32


def test_singular_solve_and_inv_raise_eagerly_and_give_non_finite_under_jit():
    la = fnp.linalg
    sing = fnp.asarray([[1.0, 2.0], [2.0, 4.0]])
    with pytest.raises(LinAlgError, match="singular"):
        la.inv(sing)
    with pytest.raises(np.linalg.LinAlgError):
        la.solve(sing, fnp.ones(2))
    with pytest.raises(LinAlgError):
        la.tensorinv(fnp.zeros((2, 2)), 1)
    assert not np.all(np.isfinite(np.asarray(fa.jit(la.inv)(sing))))
    assert not np.all(np.isfinite(np.asarray(fa.jit(la.solve)(sing, fnp.ones(2)))))
    # Under vmap (traced) nothing is checked either: the singular element is non-finite, the other exact.
    both = fnp.stack([sing, fnp.eye(2)])
    out = np.asarray(fa.vmap(la.inv)(both))
    assert not np.all(np.isfinite(out[0])) and np.allclose(out[1], np.eye(2))
    assert float(la.det(sing)) == 0.0
    sign, logabs = la.slogdet(sing)
    assert float(sign) == 0.0 and float(logabs) == -np.inf
    assert float(la.cond(sing)) > 1e15 or np.isinf(float(la.cond(sing)))


def test_cholesky_of_a_non_positive_definite_matrix_is_nan_as_jax():
    x = np.array([[[1.0, 2.0], [2.0, 1.0]], [[4.0, 2.0], [2.0, 3.0]]])
    got = np.asarray(fnp.linalg.cholesky(fnp.asarray(x)))
    with jax.enable_x64(True):
        want = np.asarray(jnp.linalg.cholesky(jnp.asarray(x)))
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    assert np.isnan(got[0][np.tril_indices(2)]).all() and got[0, 0, 1] == 0
    np.testing.assert_allclose(got[1], np.linalg.cholesky(x[1]))


def test_empty_matrices():
    la = fnp.linalg
    assert float(la.det(fnp.zeros((0, 0)))) == 1.0
    assert la.inv(fnp.zeros((3, 0, 0))).shape == (3, 0, 0)
    q, r = la.qr(fnp.zeros((3, 0)), mode="complete")
    np.testing.assert_array_equal(np.asarray(q), np.eye(3))
    assert r.shape == (3, 0)
    u, s, vh = la.svd(fnp.zeros((2, 0)))
    assert np.asarray(u).tolist() == np.eye(2).tolist() and s.shape == (0,) and vh.shape == (0, 0)
    assert la.eigh(fnp.zeros((0, 0))).eigenvalues.shape == (0,)
    assert np.asarray(L.lu(fnp.zeros((3, 0)))[2]).tolist() == [0, 1, 2]


# ------------------------------------------------------------------------- every device

DEVICE_CASES = [
    ("cholesky", lambda x: fnp.linalg.cholesky(x), lambda: [spd(RNG, 2, 3, 3).astype(np.float32)]),
    ("triangular_solve", lambda a, b: L.triangular_solve(a, b, left_side=True, lower=True),
     lambda: [(np.tril(_mat(2, 3, 3)) + 3 * np.eye(3)).astype(np.float32), _mat(2, 3, 2, dtype=np.float32)]),
    ("lu", lambda x: L.lu(x), lambda: [_mat(2, 3, 3, dtype=np.float32)]),
    ("solve", fnp.linalg.solve, lambda: [(_mat(3, 3) + 3 * np.eye(3)).astype(np.float32),
                                         _mat(3, 2, dtype=np.float32)]),
    ("det", fnp.linalg.det, lambda: [_mat(2, 3, 3, dtype=np.float32)]),
    ("qr", lambda x: tuple(fnp.linalg.qr(x)), lambda: [well_separated(RNG, 4, 3)]),
    ("eigh", lambda x: fnp.linalg.eigvalsh(x), lambda: [spd(RNG, 3, 3).astype(np.float32)]),
    ("svd", fnp.linalg.svdvals, lambda: [well_separated(RNG, 2, 3, 4)]),
    ("grad_cholesky", fa.grad(lambda x: fnp.sum(fnp.linalg.cholesky(x))),
     lambda: [spd(RNG, 3, 3).astype(np.float32)]),
]


def _uses_kernel_primitive(name):
    return any(name.endswith(k) or name.startswith(k) for k in KERNEL_PRIMITIVES) or name in ("solve", "det")


@pytest.mark.parametrize("name,f,make", DEVICE_CASES, ids=[c[0] for c in DEVICE_CASES])
def test_every_device_against_numpy(device, name, f, make):
    xs = make()
    want = _as_list(fa.jit(f, device=REF)(*[fa.device_put(fnp.asarray(x), REF) for x in xs]))
    # device.backend, not .platform: the platform of opencl:0 and webgpu:0 here is "cpu"
    strict = KERNELS_REQUIRED and device.backend in ("opencl", "webgpu") and _uses_kernel_primitive(name)
    with fallback_mode("error" if strict else fa.config.fallback), warnings.catch_warnings():
        warnings.simplefilter("ignore", fa.FallbackWarning)
        args = [fa.device_put(fnp.asarray(x), device) for x in xs]
        for jit in (False, True):
            got = _as_list(fa.jit(f, device=device)(*args) if jit else f(*args))
            for g, w in zip(got, want, strict=True):
                assert g.shape == w.shape and g.dtype == w.dtype, (name, g.dtype, w.dtype)
                np.testing.assert_allclose(g, w, rtol=2e-4, atol=2e-4, err_msg=f"{name} on {device}")
