"""JAX-compatibility leftovers of the twenty-sixth session, each against the installed JAX (or SciPy): the base
classes of ``fa.errors``, the error of a shape made of a traced value, tracers' printed text, and ``beta``'s limits
at poles that cancel."""

from __future__ import annotations

import contextlib
import io

import numpy as np
import pytest

import fnarray as fa
import fnarray.numpy as fnp
import fnarray.scipy.special as fsp

jax = pytest.importorskip("jax")
jnp = jax.numpy


def test_errors_have_jax_bases():
    """Every class of ``fa.errors`` is a subclass of each built-in base of its ``jax.errors`` namesake (the leak,
    ``UnexpectedTracerError``, is a ``TypeError`` as JAX's), and stays fnarray's own class."""
    for name in fa.errors.__all__:
        ours, theirs = getattr(fa.errors, name), getattr(jax.errors, name)
        builtin = {b for b in theirs.__mro__ if b.__module__ == "builtins"}
        assert builtin and all(issubclass(ours, b) for b in builtin), (name, builtin)
        assert issubclass(ours, fa.FnArrayError)
    assert issubclass(fa.errors.UnexpectedTracerError, (fa.TracerLeakError, RuntimeError))


def test_traced_shape_raises_jax_class():
    """A shape (or size, or sample count) from a traced value raises what JAX raises there, a ``TypeError``
    (``ConcretizationTypeError`` for the counts), naming the function (``full`` for ``ones``, which calls it) and the
    shape as JAX prints it."""
    cases = {"full": lambda m, n: m.ones((n,)), "tri": lambda m, n: m.tri(2, n),
             "linspace": lambda m, n: m.linspace(0.0, 1.0, n), "tril_indices": lambda m, n: m.tril_indices(n),
             "indices": lambda m, n: m.indices((n,))}
    for name, f in cases.items():
        with pytest.raises(TypeError) as want:
            jax.jit(lambda n: f(jnp, n))(3)
        with pytest.raises(getattr(fa.errors, type(want.value).__name__, TypeError), match=rf"{name}.*traced value.*JitTracer\(~int32\[\]\)") as got:
            fa.jit(lambda n: f(fnp, n))(3)
        assert isinstance(got.value, fa.errors.ConcretizationTypeError), name


def _printed(jx, xp):
    out = io.StringIO()

    def show(x):
        print(repr(x), str(x))
        return x
    with contextlib.redirect_stdout(out):
        jx.jit(show)(1.0)
        jx.jit(show)(xp.ones((2, 3), xp.int32))
        jx.grad(show)(1.0)
        jx.vmap(show)(xp.ones(2))
        jx.jvp(show, (1.0,), (1.0,))
        jx.vmap(jx.grad(show))(xp.ones(2))
        jx.jit(jx.grad(show))(1.0)
    return out.getvalue().splitlines()


def test_tracer_text_as_jax():
    """Tracers print as JAX's under ``jit``, ``grad``, ``jvp``, ``vmap`` and their compositions
    (``JitTracer(~float32[])``, ``GradTracer(primal=1.0, typeof(tangent)=f32[])``...)."""
    assert _printed(fa, fnp) == _printed(jax, jnp)


def test_beta_limits_as_scipy():
    """``beta`` takes SciPy's limits where poles cancel (JAX 0.10.2: NaN at ``beta(1, -2)``), with finite gradients
    elsewhere (against ``dB/da = B (psi(a) - psi(a + b))`` in float64; JAX's own runs 5 s of compiles)."""
    import scipy.special as ss
    a = np.array([1.0, 2.0, -3.0, 3.0, -2.5, 0.5, -1.5, 2.5, 0.5], np.float32)
    b = np.array([-2.0, -3.0, 2.0, -5.0, 1.5, -1.5, -0.5, -0.7, 2.0], np.float32)
    want = ss.beta(a.astype(np.float64), b.astype(np.float64))
    np.testing.assert_allclose(np.asarray(fsp.beta(fnp.asarray(a), fnp.asarray(b))), want, rtol=1e-5)
    grads = fa.vmap(fa.grad(fsp.beta, argnums=(0, 1)))(fnp.asarray(a[-2:]), fnp.asarray(b[-2:]))
    x, y = a[-2:].astype(np.float64), b[-2:].astype(np.float64)
    want = [ss.beta(x, y) * (ss.psi(v) - ss.psi(x + y)) for v in (x, y)]
    np.testing.assert_allclose(np.asarray(grads), want, rtol=1e-4)
