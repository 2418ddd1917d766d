"""A new user's pass over the twenty-sixth session's additions (branch s26-fresh): the failures it found, each
pinned against NumPy float64, SciPy or JAX."""

from __future__ import annotations

import numpy as np
import pytest

import fnarray as fa
import fnarray.numpy as fnp


def _newton_sqrt(a):
    """``sqrt(a)`` by ``custom_root`` whose ``tangent_solve`` closes over ``a`` (a traced value under ``grad``)."""
    def solve(f, x0):
        return fa.lax.fori_loop(0, 25, lambda i, x: x - f(x) / (2 * x), x0)
    return fa.lax.custom_root(lambda x: x * x - a, 1.0, solve, lambda g, y: y / (2.0 * fnp.sqrt(a)))


def test_custom_root_tangent_solve_closing_over_a_traced_value():
    # was: TracerLeakError under grad/jit(grad)/vmap(grad), a leaked tracer as jvp's tangent, hessian 0
    a = np.array([1.0, 4.0, 9.0])
    np.testing.assert_allclose(fa.vmap(fa.grad(_newton_sqrt))(a.astype(np.float32)), 0.5 / np.sqrt(a), rtol=1e-6)
    _, tangent = fa.jvp(_newton_sqrt, (4.0,), (1.0,))
    assert float(tangent) == 0.25
    np.testing.assert_allclose(fa.hessian(_newton_sqrt)(4.0), -0.25 * 4.0 ** -1.5, rtol=1e-6)  # JAX's -0.03125


def test_pure_callback_result_canonicalized_as_jax():
    # a Python float, or NumPy's float64 of float32 times an int32 keyword, is cast to the declared float32 (JAX
    # canonicalizes it while x64 is off); an int64 for float32 is still an error (tests/test_api_sweep.py)
    f32 = fa.ShapeDtypeStruct((), np.float32)
    assert float(fa.jit(lambda x: fa.pure_callback(lambda x: 3.0, f32, x))(fnp.ones(2))) == 3.0
    out = fa.pure_callback(lambda x, *, k: np.asarray(x) * k, fa.ShapeDtypeStruct((3,), np.float32), fnp.arange(3.0),
                           k=3)
    assert out.dtype == np.float32 and out.tolist() == [0.0, 3.0, 6.0]


def test_schur_batches_and_non_finite():
    scipy_linalg = pytest.importorskip("scipy.linalg")
    from fnarray.scipy.linalg import schur, sqrtm
    a = np.random.RandomState(1).randn(2, 3, 3).astype(np.float32)
    t, z = schur(a)  # a batch, as JAX's (was: "schur takes one square matrix")
    for i in range(2):
        np.testing.assert_allclose(t[i], scipy_linalg.schur(a[i])[0], atol=1e-6)  # (signs: float32 LAPACK)
        np.testing.assert_allclose(np.asarray(z[i]) @ np.asarray(t[i]) @ np.asarray(z[i]).T, a[i], atol=1e-5)
    # a NaN/inf matrix gives NaNs (as JAX's), not SciPy's "array must not contain infs or NaNs"
    t, z = fa.jit(schur)(np.array([[np.nan, 0.0], [0.0, 1.0]], np.float32))
    assert np.isnan(t).all() and np.isnan(z).all()
    assert np.isnan(sqrtm(np.array([[np.inf, 0.0], [0.0, 1.0]], np.float32))).all()
    with pytest.raises(ValueError, match="sqrtm takes one square matrix"):
        sqrtm(a)  # JAX's sqrtm is 2-d only


def test_like_creation_with_device_on_a_committed_array():
    # zeros_like(x, device=d): from the third call (the key's eager program) the result lay on x's device
    pytest.importorskip("jax")
    x = fa.device_put(fnp.arange(3.0), "numpy:0")
    for _ in range(3):
        assert str(fnp.zeros_like(x, device="jax:0").device) == "jax:0"
        assert str(fnp.full_like(x, 2.0, device="jax:0").device) == "jax:0"


def test_unique_fill_value_not_a_scalar():
    # was: "broadcast_in_dim got ndarray; expected an fnarray Array" (JAX: incompatible shapes)
    with pytest.raises(ValueError, match="fill_value must be a scalar"):
        fnp.unique_all(np.array([1, 2]), size=3, fill_value=np.array([1, 2]))
    assert fnp.unique(np.array([2, 1]), size=3, fill_value=np.array(7)).tolist() == [1, 2, 7]


def test_disable_jit_is_per_thread():
    # was one process-wide switch: another thread's scope made this thread's jitted functions run in Python, and
    # two threads' overlapping scopes left compilation off after both had closed
    import threading
    from fnarray.transforms import disable_jit as dj
    runs = []
    f = fa.jit(lambda x: (runs.append(1), x + 1)[1])
    f(fnp.ones(2))  # traced once
    opened, close_a, a_closed = threading.Event(), threading.Event(), threading.Event()

    def scope_a():
        with fa.disable_jit():
            opened.set()
            close_a.wait(5)
        a_closed.set()

    thread = threading.Thread(target=scope_a)
    thread.start()
    opened.wait(5)
    with fa.disable_jit():  # overlaps thread a's scope, closes after it
        close_a.set()
        a_closed.wait(5)
        assert f(fnp.ones(2)).tolist() == [2.0, 2.0] and len(runs) == 2  # this thread's scope: Python
    thread.join(5)
    del runs[:]
    assert f(fnp.ones(2)).tolist() == [2.0, 2.0] and runs == [] and not dj.off
    with fa.disable_jit():
        seen = []
        other = threading.Thread(target=lambda: seen.append(f(fnp.ones(2))))
        other.start()
        other.join(5)
    assert len(seen) == 1 and runs == []  # another thread's call stays compiled
