"""The kernels of ``cholesky``, ``triangular_solve`` and ``lu`` on opencl:0 and webgpu:0
(``fnarray/lowering/kernels/groups/linalg.py``), with ``fallback="error"`` so that nothing runs on numpy, against
NumPy in float64 and against Python loops written here (LU with partial pivoting as LAPACK's ``getf2``):
sizes 1, small, odd, over 64 and batched; every parameter combination of the triangular solve, both sides;
non-positive-definite and singular inputs; zero-size inputs; gradients through them (their rules are these
primitives and matrix products again, so they stay kernels); more launches than one where the device caps
loop iterations; and the fallback of ``qr``/``eigh``/``svd`` with its reason.
"""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import pytest

import fnarray as fa
import fnarray.numpy as fnp
from fnarray.core import linalg as LA
from fnarray.core.errors import FallbackWarning, UnsupportedOnDevice
from helpers import require_backend, kernel_capabilities

pytestmark = pytest.mark.usefixtures("no_fallback")

def _dtypes(dev):
    out = [np.float32]
    if dev.backend == "opencl" and np.dtype(np.float64) in dev.impl.capabilities(dev).dtypes:
        out.append(np.float64)
    return out


def _tol(dt):
    return 2e-4 if np.dtype(dt) == np.float32 else 1e-10


def _run(dev, fn, *args):
    return [np.asarray(o) for o in fa.tree_util.tree_leaves(fa.jit(fn, device=dev)(*args))]


rng = np.random.default_rng(7)


def _spd(*shape):
    n = shape[-1]
    m = rng.normal(size=shape)
    return m @ np.swapaxes(m, -1, -2) / n + np.eye(n)


# ------------------------------------------------------------------------------------------- cholesky


@pytest.mark.parametrize("shape", [(1, 1), (3, 3), (7, 7), (2, 3, 5, 5), (65, 65)])
@pytest.mark.enable_x64
def test_cholesky_matches_numpy(kdev, shape):
    x = _spd(*shape)
    want = np.linalg.cholesky(x)
    for dt in _dtypes(kdev):
        (got,) = _run(kdev, LA.cholesky_p.bind, x.astype(dt))
        assert got.dtype == dt
        np.testing.assert_allclose(got, want, rtol=_tol(dt), atol=_tol(dt))
        assert np.all(np.triu(got, 1) == 0)


def test_cholesky_not_positive_definite_is_nan_for_that_matrix_only(kdev):
    x = np.stack([_spd(4, 4), np.diag([1.0, 2.0, -1.0, 3.0]), _spd(4, 4)]).astype(np.float32)
    x[2, 0, 0] = 0.0   # a zero pivot fails too
    (got,) = _run(kdev, LA.cholesky_p.bind, x)
    for k in (1, 2):   # as JAX: NaN in the lower triangle, the upper one zero
        low = np.tril(np.ones((4, 4), bool))
        assert np.isnan(got[k][low]).all() and (got[k][~low] == 0).all(), got[k]
    np.testing.assert_allclose(got[0], np.linalg.cholesky(x[0].astype(np.float64)), rtol=2e-4, atol=2e-4)


def test_cholesky_reads_only_the_lower_triangle(kdev):
    x = _spd(6, 6)
    noisy = x + np.triu(rng.normal(size=(6, 6)), 1)
    (got,) = _run(kdev, LA.cholesky_p.bind, noisy.astype(np.float32))
    np.testing.assert_allclose(got, np.linalg.cholesky(x), rtol=2e-4, atol=2e-4)


# ------------------------------------------------------------------------------------------- triangular solve


def _trsm_ref(a, b, *, left_side, lower, transpose_a, conjugate_a, unit_diagonal):
    t = np.tril(a) if lower else np.triu(a)
    if unit_diagonal:
        t = t.copy()
        i = np.arange(t.shape[-1])
        t[..., i, i] = 1
    if transpose_a:
        t = np.swapaxes(t, -1, -2)
    if left_side:
        return np.linalg.solve(t, b)
    return np.swapaxes(np.linalg.solve(np.swapaxes(t, -1, -2), np.swapaxes(b, -1, -2)), -1, -2)


def _trsm_case(m, nr, batch, left_side):
    a = rng.normal(size=batch + (m, m)) / np.sqrt(m) + 2 * np.eye(m)
    b = rng.normal(size=batch + ((m, nr) if left_side else (nr, m)))
    return a, b


_FLAGS = list(itertools.product([True, False], repeat=5))


@pytest.mark.parametrize("flags", _FLAGS, ids=lambda f: "".join("LlTCU"[i] if v else "-" for i, v in enumerate(f)))
def test_triangular_solve_every_parameter_combination(kdev, flags):
    left, lower, tr, conj, unit = flags
    p = dict(left_side=left, lower=lower, transpose_a=tr, conjugate_a=conj, unit_diagonal=unit)
    a, b = _trsm_case(5, 3, (2,), left)
    (got,) = _run(kdev, lambda a, b: LA.triangular_solve_p.bind(a, b, **p), a.astype(np.float32),
                  b.astype(np.float32))
    np.testing.assert_allclose(got, _trsm_ref(a, b, **p), rtol=2e-4, atol=2e-4)


@pytest.mark.parametrize("m,nr,batch", [(1, 1, ()), (9, 1, ()), (40, 70, ()), (66, 3, (2,))])
@pytest.mark.parametrize("left", [True, False])
@pytest.mark.enable_x64
def test_triangular_solve_sizes(kdev, m, nr, batch, left):
    # (40, 70): more right-hand sides than one work-group takes: three blocks, the last one narrower.
    p = dict(left_side=left, lower=not left, transpose_a=left, conjugate_a=False, unit_diagonal=False)
    a, b = _trsm_case(m, nr, batch, left)
    for dt in _dtypes(kdev):
        (got,) = _run(kdev, lambda a, b: LA.triangular_solve_p.bind(a, b, **p), a.astype(dt), b.astype(dt))
        np.testing.assert_allclose(got, _trsm_ref(a, b, **p), rtol=_tol(dt), atol=_tol(dt))


def test_triangular_solve_of_a_computed_matrix(kdev):
    # ``a`` is an expression (no buffer of its own): the solve copies it once, then reads the copy.
    a, b = _trsm_case(6, 2, (), True)
    f = lambda a, b: LA.triangular_solve(a * 2.0 + 1.0, b, left_side=True, lower=True)  # noqa: E731
    (got,) = _run(kdev, f, a.astype(np.float32), b.astype(np.float32))
    want = _trsm_ref(a * 2 + 1, b, left_side=True, lower=True, transpose_a=False, conjugate_a=False,
                     unit_diagonal=False)
    np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-4)


# ------------------------------------------------------------------------------------------- lu


def _lu_ref(x):
    """LU with partial pivoting (first largest |x[i, k]|), as LAPACK's getf2, in float64."""
    x = np.array(x, np.float64)
    m, n = x.shape
    perm = np.arange(m)
    piv = []
    for k in range(min(m, n)):
        p = k + int(np.argmax(np.abs(x[k:, k])))
        piv.append(p)
        x[[k, p]] = x[[p, k]]
        perm[[k, p]] = perm[[p, k]]
        if x[k, k] != 0:
            x[k + 1:, k] /= x[k, k]
        x[k + 1:, k + 1:] -= np.outer(x[k + 1:, k], x[k, k + 1:])
    return x, np.array(piv, np.int32), perm.astype(np.int32)


def _check_lu(x, lu, piv, perm, tol, exact_pivots=True):
    m, n = x.shape[-2:]
    k = min(m, n)
    assert piv.dtype == np.int32 and perm.dtype == np.int32
    assert piv.shape == x.shape[:-1][:-1] + (k,) and perm.shape == x.shape[:-1]
    for idx in np.ndindex(*x.shape[:-2]):
        l_ = np.tril(lu[idx][:, :k], -1) + np.eye(m, k)
        u = np.triu(lu[idx][:k])
        np.testing.assert_allclose(l_ @ u, x[idx][perm[idx]], rtol=tol, atol=tol)
        assert np.all(np.abs(l_) <= 1 + 1e-6)    # partial pivoting: every multiplier at most 1
        assert sorted(perm[idx].tolist()) == list(range(m))
        if exact_pivots:
            rl, rp, rperm = _lu_ref(x[idx])
            np.testing.assert_array_equal(piv[idx], rp)
            np.testing.assert_array_equal(perm[idx], rperm)
            np.testing.assert_allclose(lu[idx], rl, rtol=tol, atol=tol)


@pytest.mark.parametrize("shape", [(1, 1), (4, 4), (7, 5), (5, 9), (3, 6, 6)])
@pytest.mark.enable_x64
def test_lu_matches_the_pivoting_loop(kdev, shape):
    x = rng.normal(size=shape)
    x[..., 0, :] *= 1e-3     # the first row is never the first pivot: rows swap
    for dt in _dtypes(kdev):
        lu, piv, perm = _run(kdev, LA.lu_p.bind, x.astype(dt))
        assert lu.dtype == dt
        _check_lu(x.astype(dt).astype(np.float64), lu, piv, perm, 50 * _tol(dt))


def test_lu_large_reconstructs(kdev):
    x = rng.normal(size=(67, 66)).astype(np.float32)
    lu, piv, perm = _run(kdev, LA.lu_p.bind, x)
    _check_lu(x.astype(np.float64), lu, piv, perm, 1e-3, exact_pivots=False)


def test_lu_singular_matrix_is_factored(kdev):
    x = np.array([[0.0, 2.0, 1.0], [0.0, 4.0, 2.0], [0.0, 1.0, 5.0]], np.float32)   # a zero column
    lu, piv, perm = _run(kdev, LA.lu_p.bind, x)
    assert np.isfinite(lu).all()
    _check_lu(x.astype(np.float64), lu, piv, perm, 1e-5)


# ------------------------------------------------------------------------------------------- zero size


def test_zero_size_inputs(kdev):
    (c,) = _run(kdev, LA.cholesky_p.bind, np.zeros((2, 0, 0), np.float32))
    assert c.shape == (2, 0, 0)
    (x,) = _run(kdev, lambda a, b: LA.triangular_solve(a, b, left_side=True, lower=True),
                np.eye(3, dtype=np.float32), np.zeros((3, 0), np.float32))
    assert x.shape == (3, 0)
    lu, piv, perm = _run(kdev, LA.lu_p.bind, np.zeros((2, 3, 0), np.float32))
    assert lu.shape == (2, 3, 0) and piv.shape == (2, 0)
    np.testing.assert_array_equal(perm, np.broadcast_to(np.arange(3, dtype=np.int32), (2, 3)))
    lu, piv, perm = _run(kdev, LA.lu_p.bind, np.zeros((0, 4), np.float32))
    assert lu.shape == (0, 4) and piv.shape == (0,) and perm.shape == (0,)


# ------------------------------------------------------------------------------------------- transforms


def _logdet(x):
    c = LA.cholesky(x)
    return 2.0 * fnp.sum(fnp.log(fnp.diagonal(c, axis1=-2, axis2=-1)))


def test_grad_of_cholesky_logdet_runs_on_kernels(kdev):
    x = _spd(2, 6, 6)
    (g,) = _run(kdev, fa.grad(lambda x: fnp.sum(_logdet(x))), x.astype(np.float32))
    np.testing.assert_allclose(g, np.linalg.inv(x), rtol=2e-3, atol=2e-3)   # d logdet / dx = x^-1 (symmetric)


def test_grad_through_triangular_solve_and_lu_against_numpy(kdev):
    a, b = _trsm_case(5, 2, (), True)
    a, b = a.astype(np.float32), b.astype(np.float32)

    def f(a, b):
        x = LA.triangular_solve(a, b, left_side=True, lower=True, transpose_a=True)
        lu, _, _ = LA.lu(a)
        return fnp.sum(x * x) + fnp.sum(lu * lu)

    got = _run(kdev, fa.grad(f, argnums=(0, 1)), a, b)
    want = _run(fa.devices("numpy")[0], fa.grad(f, argnums=(0, 1)), a, b)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=2e-3, atol=2e-3)


def test_vmap_of_cholesky_solve_against_a_loop(kdev):
    x = _spd(3, 5, 5).astype(np.float32)
    y = rng.normal(size=(3, 5)).astype(np.float32)

    def solve(x, y):
        c = LA.cholesky(x)
        z = LA.triangular_solve(c, y, left_side=True, lower=True)
        return LA.triangular_solve(c, z, left_side=True, lower=True, transpose_a=True)

    (got,) = _run(kdev, fa.vmap(solve), x, y)
    want = np.stack([np.linalg.solve(x[i].astype(np.float64), y[i]) for i in range(3)])
    np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-4)


# ------------------------------------------------------------------------------------------- loop limits


_caps = kernel_capabilities   # a kernel device scheduled with other Capabilities (tests/helpers.py)


def test_steps_split_into_launches_within_the_loop_limit(kdev):
    x = _spd(40, 40)
    a, b = _trsm_case(40, 60, (), True)
    with _caps(kdev, max_loop_iterations=200):
        f = fa.jit(lambda x, a, b: (LA.cholesky_p.bind(x), LA.triangular_solve(a, b, left_side=True, lower=True),
                                    LA.lu_p.bind(a)), device=kdev)
        args = (x.astype(np.float32), a.astype(np.float32), b.astype(np.float32))
        kinds = [k.name for k in f.lower(*args).kernels()]
        c, s, (lu, piv, perm) = f(*args)
    for name in ("cholesky", "triangular_solve", "lu"):
        assert sum(k == name or k.startswith(name + "_") for k in kinds) > 1, kinds
    np.testing.assert_allclose(np.asarray(c), np.linalg.cholesky(x), rtol=2e-4, atol=2e-4)
    want = _trsm_ref(a, b, left_side=True, lower=True, transpose_a=False, conjugate_a=False, unit_diagonal=False)
    np.testing.assert_allclose(np.asarray(s), want, rtol=2e-4, atol=2e-4)
    _check_lu(a.astype(np.float32).astype(np.float64), np.asarray(lu), np.asarray(piv), np.asarray(perm), 1e-4,
              exact_pivots=False)


def test_a_step_over_the_loop_limit_falls_back_with_the_reason(kdev):
    x = _spd(40, 40).astype(np.float32)
    with _caps(kdev, max_loop_iterations=20):
        with pytest.raises(UnsupportedOnDevice, match="loop iterations"):
            fa.jit(LA.cholesky_p.bind, device=kdev)(x)


def test_more_matrices_than_one_dispatch_dimension_takes(kdev):
    # With at most 3 work-groups per dimension, 7 matrices need a second dimension and a guard.
    x = _spd(7, 3, 3)
    a, b = _trsm_case(3, 2, (7,), True)
    with _caps(kdev, max_dispatch=3):
        c, s, (lu, piv, perm) = fa.jit(lambda x, a, b: (LA.cholesky_p.bind(x), LA.triangular_solve(
            a, b, left_side=True, lower=True), LA.lu_p.bind(a)), device=kdev)(
            x.astype(np.float32), a.astype(np.float32), b.astype(np.float32))
    np.testing.assert_allclose(np.asarray(c), np.linalg.cholesky(x), rtol=2e-4, atol=2e-4)
    want = _trsm_ref(a, b, left_side=True, lower=True, transpose_a=False, conjugate_a=False, unit_diagonal=False)
    np.testing.assert_allclose(np.asarray(s), want, rtol=2e-4, atol=2e-4)
    _check_lu(a.astype(np.float32).astype(np.float64), np.asarray(lu), np.asarray(piv), np.asarray(perm), 1e-4)


# ------------------------------------------------------------------------------------------- no kernels


@pytest.mark.parametrize("name", ["qr", "eigh", "svd"])
def test_qr_eigh_svd_fall_back_with_the_reason(kdev, name):
    from fnarray.devices import partition, placement
    x = _spd(4, 4).astype(np.float32)
    fn = {"qr": LA.qr, "eigh": LA.eigh, "svd": LA.svd}[name]
    with pytest.raises(UnsupportedOnDevice, match=f"{name} runs on numpy \\(LAPACK\\) by design"):
        fa.jit(fn, device=kdev)(x)
    fa.config.fallback = "warn"
    partition._warned.clear()
    placement._eager_cache.clear()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        outs = fa.jit(fn, device=kdev)(x)
    msgs = [str(w.message) for w in caught if issubclass(w.category, FallbackWarning)]
    assert any(f"{name} runs on numpy (LAPACK) by design" in m and "numpy:0" in m for m in msgs), msgs
    want = fa.jit(fn, device=fa.devices("numpy")[0])(x)
    for g, w in zip(fa.tree_util.tree_leaves(outs), fa.tree_util.tree_leaves(want), strict=True):
        np.testing.assert_allclose(np.abs(np.asarray(g)), np.abs(np.asarray(w)), rtol=1e-4, atol=1e-4)


# ------------------------------------------------------------------------------------------- browser export


def test_browser_export_has_the_kernels_and_names_the_primitive_without_one(tmp_path):
    # The bundle's run in Chromium is tests/test_browser.py's "cholesky_solve" case.
    require_backend("webgpu")
    x = _spd(2, 5, 5).astype(np.float32)
    y = rng.normal(size=(2, 5, 1)).astype(np.float32)

    def cho_solve(x, y):
        c = LA.cholesky(x)
        z = LA.triangular_solve(c, y, left_side=True, lower=True)
        return LA.triangular_solve(c, z, left_side=True, lower=True, transpose_a=True), LA.lu(x)[0]

    manifest = fa.export.webgpu(cho_solve, x, y, path=tmp_path / "ok")
    names = [k["name"] for k in manifest["kernels"]]
    for name in ("cholesky", "triangular_solve", "lu"):
        assert any(n.startswith(name) for n in names), names
    with pytest.raises(UnsupportedOnDevice, match=r"qr \(float32\) cannot run in the browser: qr runs on numpy"):
        fa.export.webgpu(lambda x: LA.qr(x)[1], x, path=tmp_path / "qr")
