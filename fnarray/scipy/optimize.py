"""Unconstrained minimization with SciPy's names (mirrors ``jax.scipy.optimize``): ``minimize`` with
``method="BFGS"`` and its ``OptimizeResults``.

The solver is written over ``fnarray.lax.while_loop`` and ``value_and_grad``: it runs eagerly, under ``jit`` and
under ``vmap`` (one fit per batch member, each stopping on its own), on every backend. The method is the BFGS
update of the inverse Hessian with a line search that satisfies the strong Wolfe conditions (Nocedal & Wright,
*Numerical Optimization*, 2nd ed., algorithms 6.1, 3.5 and 3.6: a bracketing phase that doubles the step, then a
zoom phase that places each trial step at the minimizer of the cubic through the bracket's ends, kept inside
the bracket's middle 80%, or at its midpoint where that cubic has no minimizer), the first trial step of each iteration
chosen from the previous decrease as in SciPy's ``fmin_bfgs``.

Where JAX differs: JAX 0.10's zoom declares a failure whenever its bracket is reversed (jax-ml/jax pull request
40228), so it stops with ``status=3`` on problems SciPy solves (the Rosenbrock function from ``[-1.2, 1]``,
float32 or float64); fnarray's line search converges there as SciPy's does. Where both converge, the minimizers
agree to the tolerance (the iterates, ``nit`` and ``nfev`` may differ).
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np

from fnarray.core import dtypes
from fnarray.core.errors import DTypeError, ShapeError

__all__ = ["OptimizeResults", "minimize"]

_MAX_DENSE = 16384            # variables: the n x n inverse Hessian and its update hold ~4 n^2 floats (4 GiB, float32)
_C1, _C2 = 1e-4, 0.9          # the sufficient-decrease and curvature constants of the Wolfe conditions


class OptimizeResults(NamedTuple):
    """What ``minimize`` returns (mirrors ``jax.scipy.optimize.OptimizeResults``; a pytree, so it can leave
    ``jit`` and ``vmap``).

    Fields:
      x: the final point, shape ``(n,)``, ``x0``'s dtype.
      success: bool scalar, ``True`` where the gradient's norm fell below ``gtol``.
      status: int32 scalar, 0 converged, 1 ``maxiter`` reached, 3 line search failed (the bracket shrank below
        the dtype's resolution, or a non-finite value at the start), 5 ``line_search_maxiter`` reached (JAX's
        codes).
      fun: ``fun(x)``. jac: its gradient, shape ``(n,)``. hess_inv: the final inverse-Hessian estimate,
        ``(n, n)``.
      nfev, njev: evaluations of ``fun`` and of its gradient (equal: each evaluates both). nit: BFGS iterations.
    """
    x: Any
    success: Any
    status: Any
    fun: Any
    jac: Any
    hess_inv: Any
    nfev: Any
    njev: Any
    nit: Any


def _fnp():
    import fnarray.numpy as fnp
    return fnp


def _check_x0(x0):
    from fnarray.numpy._util import asarray_internal, check_arraylike
    check_arraylike("minimize", x0)
    x0 = asarray_internal(x0)
    if dtypes.is_complex(x0.dtype):
        raise DTypeError(f"minimize needs a real x0, got {x0.dtype.name}; split a complex parameter into its "
                         "real and imaginary parts")
    if not dtypes.is_float(x0.dtype):
        x0 = x0.astype(dtypes.float32)
    if x0.ndim != 1:
        raise ShapeError(f"minimize needs x0 of shape (n,), got shape {x0.shape}; pass x0.ravel() and reshape "
                         "inside fun (fnarray.flatten_util.ravel_pytree does that for a pytree)")
    if x0.shape[0] == 0:
        raise ShapeError("minimize needs at least one variable, got x0 of shape (0,)")
    n, itemsize = x0.shape[0], np.dtype(x0.dtype.name).itemsize
    if n > _MAX_DENSE:
        raise ValueError(f"minimize(method='BFGS') keeps a dense {n} x {n} inverse Hessian and its update "
                         f"(~{4 * n * n * itemsize / 2**30:.0f} GiB for x0 of shape ({n},)); it takes at most "
                         f"{_MAX_DENSE} variables. Fit a larger model with a first-order optimizer (fnarray.optim)")
    return x0


def _positive(name, v, integer, allow_zero=False):
    ok = isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool) and math.isfinite(v)
    ok = ok and (v >= 0 if allow_zero else v > 0) and (not integer or int(v) == v)
    if not ok:
        kind = "integer" if integer else "number"
        raise ValueError(f"{name} must be a {'non-negative' if allow_zero else 'positive'} {kind}, got {v!r}")
    return int(v) if integer else float(v)


def _options(n, tol, options):
    """``(maxiter, norm, gtol, line_search_maxiter)`` from ``minimize``'s ``tol`` and ``options``."""
    if options is None:
        options = {}
    if not isinstance(options, dict):
        raise TypeError(f"options must be a dict of solver options, got {type(options).__name__}")
    known = ("maxiter", "norm", "gtol", "line_search_maxiter")
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise TypeError(f"minimize(method='BFGS') got unknown options {unknown}; it takes {list(known)}")
    if "gtol" in options:
        gtol = _positive("gtol", options["gtol"], False)
    else:
        gtol = 1e-5 if tol is None else _positive("tol", tol, False)
    maxiter = options.get("maxiter")
    maxiter = 200 * n if maxiter is None else _positive("maxiter", maxiter, True, allow_zero=True)
    ls_maxiter = _positive("line_search_maxiter", options.get("line_search_maxiter", 10), True)
    norm = options.get("norm", np.inf)
    if not (norm in (np.inf, -np.inf) or (isinstance(norm, (int, float)) and not isinstance(norm, bool) and norm >= 1)):
        raise ValueError(f"norm must be a vector norm's order (inf, -inf or a number >= 1), got {norm!r}")
    return maxiter, float(norm), gtol, ls_maxiter


def _value_and_grad(fun, x0):
    """``x -> (f, g)`` with ``f`` a scalar of ``x0``'s dtype; raises for a ``fun`` that is not scalar-valued."""
    from fnarray.transforms import ad
    from fnarray.transforms.jit import eval_shape
    out = eval_shape(fun, x0)
    shape, dtype = getattr(out, "shape", None), getattr(out, "dtype", None)
    if shape != () or dtype is None or not (dtypes.is_float(dtype) or dtypes.is_int(dtype)):
        raise TypeError(f"minimize needs fun(x, *args) to return a real scalar, got "
                        f"{'shape ' + str(shape) + ' ' + str(dtype) if shape is not None else type(out).__name__}"
                        "; reduce it (a sum or a mean) to the objective")
    vg = ad.value_and_grad(lambda x: fun(x).astype(x0.dtype))
    return vg


def _cubic_min(a, fa, da, b, fb, db):
    """The minimizer of the cubic through ``(a, fa)``, ``(b, fb)`` with slopes ``da``, ``db``, or NaN where it
    has none (Nocedal & Wright, eq. 3.59)."""
    fnp = _fnp()
    d1 = da + db - 3.0 * (fa - fb) / (a - b)
    disc = d1 * d1 - da * db
    d2 = fnp.sign(b - a) * fnp.sqrt(fnp.where(disc >= 0, disc, fnp.nan))
    return b - (b - a) * (db + d2 - d1) / (db - da + 2.0 * d2)


def _zoom_trial(s):
    """The zoom phase's next step: the cubic's minimizer moved into the bracket's middle 80% (a step that crowds
    an end is placed a tenth of the bracket from it, so the bracket shrinks by at least a tenth each trial and
    a minimizer near an end is reached geometrically), or the midpoint where the cubic has no minimizer."""
    fnp = _fnp()
    lo, hi = s["a_lo"], s["a_hi"]
    c = _cubic_min(lo, s["f_lo"], s["d_lo"], hi, s["f_hi"], s["d_hi"])
    width = fnp.abs(hi - lo)
    inner = fnp.clip(c, fnp.minimum(lo, hi) + 0.1 * width, fnp.maximum(lo, hi) - 0.1 * width)
    return fnp.where(fnp.isfinite(c), inner, 0.5 * (lo + hi))


def _pick(default, *cases):
    """The ``(a, f, slope)`` triple of the first case whose condition holds, else ``default`` (elementwise)."""
    fnp = _fnp()
    out = default
    for cond, triple in reversed(cases):
        out = tuple(fnp.where(cond, t, o) for t, o in zip(triple, out, strict=True))
    return out


def _ls_body(vg, x, p, f0, d0, ls_maxiter):
    """One trial step of the strong-Wolfe line search along ``p`` from ``x`` (``f0``, slope ``d0``): the
    bracketing phase (``zoom`` false) or the zoom phase, as Nocedal & Wright's algorithms 3.5 and 3.6."""
    fnp = _fnp()
    eps = float(np.finfo(np.dtype(x.dtype.name)).eps)
    f_tol = 16 * eps * fnp.abs(f0)

    def body(s):
        zoom = s["zoom"]
        a = fnp.where(zoom, _zoom_trial(s), s["a_cur"])
        f, g = vg(x + a * p)
        d = fnp.dot(g, p)
        too_high = (~(f <= f0 + _C1 * a * d0) | (~zoom & (s["i"] > 0) & (f >= s["f_prev"]))
                    | (zoom & (f >= s["f_lo"])))
        curvature = fnp.abs(d) <= -_C2 * d0
        # Hager & Zhang's approximate Wolfe conditions: where f is flat to its rounding near a minimum the
        # sufficient-decrease test cannot be met, a step with f within rounding of f0 and a flat slope is taken
        approx = (f <= f0 + f_tol) & curvature
        wolfe = (~too_high & curvature) | approx
        # bracketing: [prev, a] holds a step when a is too high, [a, prev] when the slope turned up
        b_to_lo = ~zoom & too_high & ~wolfe
        b_turn = ~zoom & ~too_high & ~wolfe & (d >= 0)
        z_hi = zoom & too_high & ~wolfe
        z_lo = zoom & ~too_high & ~wolfe
        z_flip = z_lo & (d * (s["a_hi"] - s["a_lo"]) >= 0)
        new = dict(s)
        trial = (a, f, d)
        prev = (s["a_prev"], s["f_prev"], s["d_prev"])
        lo = (s["a_lo"], s["f_lo"], s["d_lo"])
        hi = (s["a_hi"], s["f_hi"], s["d_hi"])
        new["a_lo"], new["f_lo"], new["d_lo"] = _pick(lo, (b_to_lo, prev), (b_turn | z_lo, trial))
        new["a_hi"], new["f_hi"], new["d_hi"] = _pick(hi, (b_to_lo | z_hi, trial), (b_turn, prev), (z_flip, lo))
        new["zoom"] = zoom | b_to_lo | b_turn
        grow = ~zoom & ~too_high & ~wolfe & (d < 0)
        new["a_prev"], new["f_prev"], new["d_prev"] = a, f, d
        new["a_cur"] = fnp.where(grow, 2.0 * a, s["a_cur"])
        new["i"] = s["i"] + 1
        new["a"], new["f"], new["g"] = a, f, g
        scale = fnp.maximum(fnp.abs(new["a_lo"]), fnp.abs(new["a_hi"]))
        collapsed = new["zoom"] & (fnp.abs(new["a_hi"] - new["a_lo"]) <= eps * scale)
        new["status"] = fnp.where(wolfe, 0, fnp.where(collapsed, 3, fnp.where(new["i"] >= ls_maxiter, 5, -1))).astype(
            fnp.int32)  # (Python ints alone are weak int64 under x64, as in JAX: the carry is int32)
        return new
    return body


def _line_search(vg, x, f0, g0, p, alpha1, ls_maxiter):
    """A step ``a`` along ``p`` satisfying the strong Wolfe conditions: returns ``(a, f, g, nfev, status)``,
    status 0 found, 3 the bracket collapsed, 5 out of iterations (then ``a`` is the last trial)."""
    fnp = _fnp()
    from fnarray.transforms.control_flow import while_loop
    d0 = fnp.dot(g0, p)
    z = fnp.zeros((), x.dtype)
    s = {"i": fnp.asarray(0, dtype=fnp.int32), "zoom": fnp.asarray(False), "status": fnp.asarray(-1, dtype=fnp.int32),
         "a_cur": alpha1, "a_prev": z, "f_prev": f0, "d_prev": d0, "a_lo": z, "f_lo": f0, "d_lo": d0,
         "a_hi": z, "f_hi": f0, "d_hi": d0, "a": z, "f": f0, "g": g0}
    s = while_loop(lambda s: s["status"] < 0, _ls_body(vg, x, p, f0, d0, ls_maxiter), s)
    status = fnp.where(d0 < 0, s["status"], 3)   # not a descent direction: no step can decrease f
    return s["a"], s["f"], s["g"], s["i"], status


def _bfgs_body(vg, norm, gtol, ls_maxiter):
    fnp = _fnp()

    def body(s):
        x, f, g, h = s["x"], s["f"], s["g"], s["h"]
        p = -(h @ g)
        d0 = fnp.dot(g, p)
        alpha1 = fnp.minimum(1.0, 1.01 * 2.0 * (f - s["f_old"]) / d0)
        alpha1 = fnp.where((alpha1 > 0) & fnp.isfinite(alpha1), alpha1, 1.0).astype(x.dtype)
        a, f_new, g_new, nfev, ls_status = _line_search(vg, x, f, g, p, alpha1, ls_maxiter)
        ok = ls_status == 0
        step = a * p
        y = g_new - g
        ys = fnp.dot(y, step)
        rho = 1.0 / fnp.where(ys > 0, ys, 1.0)
        eye = fnp.eye(x.shape[0], dtype=x.dtype)
        left = eye - rho * fnp.outer(step, y)
        h_new = left @ h @ left.T + rho * fnp.outer(step, step)
        new = dict(s)
        new["x"] = fnp.where(ok, x + step, x)
        new["f"] = fnp.where(ok, f_new, f)
        new["g"] = fnp.where(ok, g_new, g)
        new["h"] = fnp.where(ok & (ys > 0) & fnp.all(fnp.isfinite(h_new)), h_new, h)
        new["f_old"] = fnp.where(ok, f, s["f_old"])
        new["k"] = s["k"] + 1
        new["nfev"] = s["nfev"] + nfev
        new["converged"] = ok & (fnp.linalg.norm(g_new, ord=norm) < gtol)
        new["status"] = fnp.where(ok, s["status"], ls_status)
        return new
    return body


def _bfgs(vg, x0, maxiter, norm, gtol, ls_maxiter):
    fnp = _fnp()
    from fnarray.transforms.control_flow import while_loop
    f0, g0 = vg(x0)
    finite = fnp.isfinite(f0) & fnp.all(fnp.isfinite(g0))
    s = {"x": x0, "f": f0, "g": g0, "h": fnp.eye(x0.shape[0], dtype=x0.dtype),
         "f_old": f0 + fnp.linalg.norm(g0) / 2, "k": fnp.asarray(0, dtype=fnp.int32),
         "nfev": fnp.asarray(1, dtype=fnp.int32),
         "converged": finite & (fnp.linalg.norm(g0, ord=norm) < gtol), "status": fnp.where(finite, 0, 3)}
    s = while_loop(lambda s: ~s["converged"] & (s["status"] == 0) & (s["k"] < maxiter),
                   _bfgs_body(vg, norm, gtol, ls_maxiter), s)
    status = fnp.where(s["converged"], 0, fnp.where(s["status"] != 0, s["status"], 1)).astype(fnp.int32)
    return OptimizeResults(x=s["x"], success=s["converged"], status=status, fun=s["f"], jac=s["g"],
                           hess_inv=s["h"], nfev=s["nfev"], njev=s["nfev"], nit=s["k"])


def minimize(fun, x0, args=(), *, method, tol=None, options=None):
    """Minimize a scalar function of one or more variables (mirrors ``jax.scipy.optimize.minimize``).

    Args:
      fun: ``fun(x, *args) -> scalar``, ``x`` of shape ``(n,)``; differentiated with ``value_and_grad`` (its
        value is taken in ``x0``'s dtype).
      x0: the starting point, a real array of shape ``(n,)``, ``n >= 1`` (integers become float32).
      args: a tuple of extra arguments to ``fun``.
      method: ``"BFGS"`` (any case), the one method, as in JAX.
      tol: the gradient-norm tolerance (SciPy's meaning: ``gtol``) when ``options`` has no ``gtol``.
      options: ``maxiter`` (default ``200 * n``), ``gtol`` (default 1e-5), ``norm`` (of the gradient for the
        stopping test; default ``inf``), ``line_search_maxiter`` (bracketing and zoom trials per iteration,
        default 10).

    Returns:
      an ``OptimizeResults`` (``x``, ``success``, ``status``, ``fun``, ``jac``, ``hess_inv``, ``nfev``,
      ``njev``, ``nit``). A failed line search stops the iteration at the last accepted point, ``success``
      false, as in SciPy and JAX; nothing raises for a problem that does not converge.

    Raises:
      TypeError: ``args`` is not a tuple, ``options`` has an unknown key, or ``fun`` does not return a real
        scalar. ValueError: an unknown ``method``, or an option out of range. ShapeError: ``x0`` is not 1-D or
        is empty. DTypeError: a complex ``x0``. ValueError: more than 16384 variables (the dense inverse Hessian).

    Method: BFGS with a strong-Wolfe line search (the module docstring has the sources and where JAX's results
    differ). Not differentiable with respect to ``args`` (neither is JAX's).
    """
    if not isinstance(args, tuple):
        raise TypeError(f"args argument to minimize must be a tuple, got {type(args).__name__}; write args=(a,) "
                        "for one extra argument")
    if not isinstance(method, str) or method.lower() != "bfgs":
        raise ValueError(f"Method {method!r} not recognized: minimize supports method='BFGS' (as "
                         "jax.scipy.optimize.minimize); for stochastic training use fnarray.optim")
    x0 = _check_x0(x0)
    maxiter, norm, gtol, ls_maxiter = _options(x0.shape[0], tol, options)
    vg = _value_and_grad(lambda x: fun(x, *args), x0)
    return _bfgs(vg, x0, maxiter, norm, gtol, ls_maxiter)
