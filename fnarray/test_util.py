"""``check_grads``: derivatives against finite differences (mirrors ``jax.test_util.check_grads``)."""

from __future__ import annotations

import functools

import numpy as np

from fnarray import tree_util

__all__ = ["check_grads", "check_jvp", "check_vjp"]

EPS = 1e-4
# per-dtype tolerance of a derivative against a central difference (JAX's defaults)
_TOLERANCE = {np.dtype(np.float16): 1e-2, np.dtype("bfloat16"): 1e-1, np.dtype(np.float32): 2e-3,
              np.dtype(np.float64): 1e-5, np.dtype(np.complex64): 2e-3, np.dtype(np.complex128): 1e-5}


def _dtype(x):
    return np.dtype(getattr(x, "dtype", np.asarray(x).dtype))


def _tol(tol, leaves):
    if tol is not None:
        return tol
    return max((_TOLERANCE.get(_dtype(x), 1e-5) for x in leaves), default=1e-5)


def _close(got, want, atol, rtol, what, like=None):
    g, w = tree_util.tree_leaves(got), tree_util.tree_leaves(want)
    if len(g) != len(w):
        raise AssertionError(f"{what}: {len(g)} leaves against {len(w)} expected")
    dt = g if like is None else tree_util.tree_leaves(like)   # the tolerance of the dtype computed in
    atol, rtol = _tol(atol, dt), _tol(rtol, dt)
    for i, (a, b) in enumerate(zip(g, w)):
        np.testing.assert_allclose(np.asarray(a, np.complex128 if np.iscomplexobj(a) else np.float64),
                                   np.asarray(b, np.complex128 if np.iscomplexobj(b) else np.float64),
                                   atol=atol, rtol=rtol, err_msg=f"{what} (leaf {i})")


def _random_like(rng, tree):
    from fnarray import numpy as fnp

    def one(x):
        x = np.asarray(x)
        if not np.issubdtype(x.dtype, np.inexact):
            return fnp.zeros(x.shape, x.dtype)
        v = np.asarray(rng.randn(*x.shape))
        if np.iscomplexobj(x):
            v = v + 1j * np.asarray(rng.randn(*x.shape))
        return fnp.asarray(np.asarray(v, x.dtype))
    return tree_util.tree_map(one, tree)


def _axpy(a, x, y):
    from fnarray import numpy as fnp
    return tree_util.tree_map(lambda u, v: fnp.asarray((np.asarray(v) + a * np.asarray(u)).astype(np.asarray(v).dtype)),
                              x, y)


def _inner(x, y):
    return sum(np.vdot(np.asarray(a, np.complex128).conj(), np.asarray(b, np.complex128)).real
               if np.iscomplexobj(a) or np.iscomplexobj(b)
               else np.vdot(np.asarray(a, np.float64), np.asarray(b, np.float64))
               for a, b in zip(tree_util.tree_leaves(x), tree_util.tree_leaves(y)))


_NARROW = {np.dtype(np.float16): np.float64, np.dtype("bfloat16"): np.float64, np.dtype(np.float32): np.float64,
           np.dtype(np.complex64): np.complex128}


def _widened(tree):
    """``tree``'s leaves as NumPy arrays with float16/bfloat16/float32 widened to float64 (complex64 to
    complex128), or ``None`` where no leaf is that narrow."""
    leaves = tree_util.tree_leaves(tree)
    if not any(_dtype(x) in _NARROW for x in leaves):
        return None
    return tree_util.tree_map(lambda x: np.asarray(x, _NARROW.get(_dtype(x), _dtype(x))), tree)


def _difference(f, primals, tangents, eps):
    plus = f(*_axpy(eps, tangents, primals))
    minus = f(*_axpy(-eps, tangents, primals))
    return tree_util.tree_map(lambda p, m: (np.asarray(p) - np.asarray(m)) * (0.5 / eps), plus, minus)


def _numerical_jvp(f, primals, tangents, eps):
    """The central difference ``(f(x + eps t) - f(x - eps t)) / (2 eps)``.

    Where a primal is float32 or narrower and 64-bit is off, ``f`` is evaluated at the primals widened to
    float64 with 64-bit dtypes on for the two calls (``x64_scope``: in this thread only, so other threads
    keep their setting), and in ``f``'s dtype as JAX where that fails. A float32 quotient's rounding error, about ``1e-7 |f| / eps``,
    is the size of float32's tolerance, so JAX's form passes or fails by the last bit of its kernels' rounding
    (the autodiff cookbook's ``check_grads(loss, (W, b), order=2)`` failed on NumPy 2.4's float32 ``tanh``).
    """
    from fnarray.core.config import config, x64_scope
    wide_p, wide_t = _widened(primals), _widened(tangents)
    if wide_p is not None and not config.enable_x64:
        try:
            with x64_scope(True):
                return _difference(f, wide_p, tangents if wide_t is None else wide_t, eps)
        except Exception:   # f needs its own dtypes (a kernel of fixed dtype): JAX's form below
            pass
    return _difference(f, primals, tangents, eps)


def check_jvp(f, f_jvp, args, atol=None, rtol=None, eps=EPS, err_msg=""):
    """``f_jvp(args, tangents)`` (as ``partial(fa.jvp, f)``) against ``f`` and a central difference of
    ``eps`` along random tangents (JAX's: ``RandomState(0)`` normals). Raises ``AssertionError`` naming the mismatch."""
    rng = np.random.RandomState(0)   # JAX's directions
    tangents = _random_like(rng, tuple(args))
    out, t_out = f_jvp(tuple(args), tangents)
    _close(out, f(*args), atol, rtol, f"{err_msg or 'JVP'} primal output")
    _close(t_out, _numerical_jvp(f, tuple(args), tangents, eps), atol, rtol,
           f"{err_msg or 'JVP'} tangent against a central difference")


def check_vjp(f, f_vjp, args, atol=None, rtol=None, eps=EPS, err_msg=""):
    """``f_vjp(*args)`` (as ``partial(fa.vjp, f)``) against ``f``: for random tangents ``t`` and cotangents
    ``c``, ``<vjp(c), t>`` must equal ``<c, (f(x + eps t) - f(x - eps t)) / (2 eps)>``."""
    rng = np.random.RandomState(0)
    out, vjp_fun = f_vjp(*args)
    _close(out, f(*args), atol, rtol, f"{err_msg or 'VJP'} primal output")
    tangents = _random_like(rng, tuple(args))
    cotangents = _random_like(rng, out)
    ct_in = vjp_fun(cotangents)
    got = _inner(tangents, tuple(ct_in))
    want = _inner(_numerical_jvp(f, tuple(args), tangents, eps), cotangents)
    _close(got, want, atol, rtol, f"{err_msg or 'VJP'} inner product against a central difference", like=out)


def check_grads(f, args, order, modes=("fwd", "rev"), atol=None, rtol=None, eps=None):
    """Check ``f``'s derivatives up to ``order`` against finite differences (mirrors
    ``jax.test_util.check_grads``).

    Args:
      f: a function of ``*args`` returning a pytree of arrays.
      args: a tuple of arguments (pytrees of float or complex arrays).
      order: the highest order checked (1: first derivatives; 2: derivatives of the derivative maps...).
      modes: ``"fwd"`` (``fa.jvp``) and/or ``"rev"`` (``fa.vjp``).
      atol, rtol: tolerances (default per dtype: float32 2e-3, float64 1e-5, float16 1e-2).
      eps: the central difference's step (default 1e-4).
    Raises:
      AssertionError: a derivative disagrees, with the mode, order and leaf in the message.
      ValueError: an unknown mode.
    """
    import fnarray as fa
    bad = [m for m in modes if m not in ("fwd", "rev")]
    if bad:
        raise ValueError(f"check_grads modes are 'fwd' and 'rev', got {bad}")
    eps = EPS if eps is None else eps

    def check(f, args, order, msg):
        if "fwd" in modes:
            fwd_msg = f"JVP of {msg}" if msg else "JVP"
            check_jvp(f, functools.partial(fa.jvp, f), args, atol, rtol, eps, fwd_msg)
            if order > 1:
                check(functools.partial(fa.jvp, f), (tuple(args), tuple(args)), order - 1, fwd_msg)
        if "rev" in modes:
            rev_msg = f"VJP of {msg}" if msg else "VJP"
            check_vjp(f, functools.partial(fa.vjp, f), args, atol, rtol, eps, rev_msg)
            if order > 1:
                def f_vjp(*a):
                    out, vjp_fun = fa.vjp(f, *a)
                    return vjp_fun(out)
                check(f_vjp, args, order - 1, rev_msg)

    check(f, tree_util.tree_map(fa.numpy.asarray, tuple(args)), order, "")
