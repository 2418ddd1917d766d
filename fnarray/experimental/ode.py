"""``odeint``: adaptive Dormand-Prince integration of ``dy/dt = func(y, t, *args)`` with adjoint gradients
(mirrors ``jax.experimental.ode.odeint``).

The forward solve is the explicit Runge-Kutta pair of Dormand and Prince (5th order, embedded 4th order error
estimate) with a proportional step-size controller, stepping in ``fnarray.lax.while_loop`` to each requested
time and reading the value there off a 4th-order interpolant of the step that covers it (Hairer, Norsett and
Wanner, "Solving Ordinary Differential Equations I", II.4-II.6). Reverse mode solves the adjoint system
backwards in time, interval by interval (Pontryagin; Chen et al. 2018, "Neural Ordinary Differential
Equations", Algorithm 1), so its memory does not grow with the number of steps. Values that ``func`` closes
over are made explicit arguments first, so gradients reach them too.
"""

from __future__ import annotations

import numpy as np

from fnarray import tree_util
from fnarray._implicit import traced_once
from fnarray.core.interpreter import eval_program
from fnarray.transforms.custom_derivatives import custom_vjp

__all__ = ["odeint"]

# Dormand-Prince 5(4): nodes, stages, 5th-order weights, error weights (5th minus 4th order), midpoint weights
_ALPHA = (1 / 5, 3 / 10, 4 / 5, 8 / 9, 1.0, 1.0)
_BETA = ((1 / 5,),
         (3 / 40, 9 / 40),
         (44 / 45, -56 / 15, 32 / 9),
         (19372 / 6561, -25360 / 2187, 64448 / 6561, -212 / 729),
         (9017 / 3168, -355 / 33, 46732 / 5247, 49 / 176, -5103 / 18656),
         (35 / 384, 0.0, 500 / 1113, 125 / 192, -2187 / 6784, 11 / 84))
_C_SOL = (35 / 384, 0.0, 500 / 1113, 125 / 192, -2187 / 6784, 11 / 84, 0.0)
_C_ERR = tuple(a - b for a, b in zip(_C_SOL, (5179 / 57600, 0.0, 7571 / 16695, 393 / 640, -92097 / 339200,
                                              187 / 2100, 1 / 40), strict=True))
_C_MID = (6025192743 / 30085553152 / 2, 0.0, 51252292925 / 65400821598 / 2, -2691868925 / 45128329728 / 2,
          187940372067 / 1594534317056 / 2, -1776094331 / 19743644256 / 2, 11237099 / 235043384 / 2)


def _np():
    from fnarray import numpy as fnp
    return fnp


def _weighted(ks, weights):
    """``sum_i w_i * k_i`` over the stages with a nonzero weight."""
    out = None
    for w, k in zip(weights, ks):
        if w:
            out = w * k if out is None else out + w * k
    return out


def _dopri_step(f, y0, f0, t0, dt):
    """One Dormand-Prince step: ``(y1, f1, y1_error, k)`` with ``k`` the seven stage derivatives."""
    ks = [f0]
    for alpha, beta in zip(_ALPHA, _BETA, strict=True):
        ks.append(f(y0 + dt * _weighted(ks, beta), t0 + alpha * dt))
    y1 = y0 + dt * _weighted(ks, _C_SOL)
    return y1, ks[-1], dt * _weighted(ks, _C_ERR), ks


def _interpolant(y0, y1, y_mid, f0, f1, dt):
    """Coefficients (highest power first) of the quartic through ``y0``, ``y_mid``, ``y1`` with slopes
    ``dt * f0`` and ``dt * f1`` at the step's ends, in the step's unit time."""
    fnp = _np()
    a = 2 * dt * (f1 - f0) - 8 * (y0 + y1) + 16 * y_mid
    b = dt * (5 * f0 - 3 * f1) + 18 * y0 + 14 * y1 - 32 * y_mid
    c = dt * (f1 - 4 * f0) - 11 * y0 - 5 * y1 + 16 * y_mid
    return fnp.stack([a, b, c, dt * f0, y0])


def _rms(x):
    fnp = _np()
    return fnp.sqrt(fnp.mean(x * x))


def _first_step(f, y0, t0, f0, rtol, atol):
    """Hairer, Norsett and Wanner's starting step size (II.4, "Starting Step Size") for a 5th-order method."""
    fnp = _np()
    scale = atol + fnp.abs(y0) * rtol
    d0, d1 = _rms(y0 / scale), _rms(f0 / scale)
    h0 = fnp.where((d0 < 1e-5) | (d1 < 1e-5), 1e-6, 0.01 * d0 / d1)
    f1 = f(y0 + h0 * f0, t0 + h0)
    d2 = _rms((f1 - f0) / scale) / h0
    h1 = fnp.where((d1 <= 1e-15) & (d2 <= 1e-15), fnp.maximum(1e-6, h0 * 1e-3),
                   (0.01 / fnp.maximum(d1, d2)) ** (1 / 5))
    return fnp.minimum(100 * h0, h1)


def _next_step(dt, mean_sq_error):
    """The next step size from the mean squared scaled error: ``0.9 * err**(-1/5)``, kept within [0.2, 10]
    times ``dt`` and never growing after a rejected step."""
    fnp = _np()
    grow = fnp.where(mean_sq_error < 1, 10.0, 1.0)
    factor = fnp.clip(0.9 * mean_sq_error ** (-1 / 10), 0.2, grow)
    return fnp.where(mean_sq_error == 0, dt * 10.0, dt * factor)


def _solve(func, rtol, atol, mxstep, hmax, y0, ts, *args):
    """The forward solve on a 1-D state ``y0``: ``y`` at every time of ``ts``, shape ``(len(ts), n)``."""
    from fnarray import lax
    fnp = _np()

    def f(y, t):
        return func(y, t, *args)

    f0 = f(y0, ts[0])
    dt0 = fnp.minimum(_first_step(f, y0, ts[0], f0, rtol, atol), hmax)
    coeffs0 = fnp.stack([y0 * 0] * 4 + [y0])

    def to_time(carry, target):
        def keep_stepping(state):
            _, _, t, dt, _, _, count = state
            return (t < target) & (count < mxstep) & (dt > 0)

        def step(state):
            y, fy, t, dt, last_t, coeffs, count = state
            y1, f1, err, ks = _dopri_step(f, y, fy, t, dt)
            tol = atol + rtol * fnp.maximum(fnp.abs(y), fnp.abs(y1))
            mean_sq = fnp.mean((err / tol) ** 2)
            accept = mean_sq <= 1
            y_mid = y + dt * _weighted(ks, _C_MID)
            new_coeffs = _interpolant(y, y1, y_mid, fy, f1, dt)
            new_dt = fnp.minimum(_next_step(dt, mean_sq), hmax)
            pick = lambda a, b: fnp.where(accept, a, b)  # noqa: E731
            return (pick(y1, y), pick(f1, fy), pick(t + dt, t), new_dt, pick(t, last_t),
                    pick(new_coeffs, coeffs), count + 1)

        y, fy, t, dt, last_t, coeffs = carry
        y, fy, t, dt, last_t, coeffs, _ = lax.while_loop(keep_stepping, step,
                                                         (y, fy, t, dt, last_t, coeffs, 0))
        s = (target - last_t) / (t - last_t)
        y_target = coeffs[0]
        for c in coeffs[1:]:
            y_target = y_target * s + c
        return (y, fy, t, dt, last_t, coeffs), y_target

    _, ys = lax.scan(to_time, (y0, f0, ts[0], dt0, ts[0], coeffs0), ts[1:])
    return fnp.concatenate([y0[None], ys])


def _solve_fwd(func, rtol, atol, mxstep, hmax, y0, ts, *args):
    ys = _solve(func, rtol, atol, mxstep, hmax, y0, ts, *args)
    return ys, (ys, ts, args)


def _solve_bwd(func, rtol, atol, mxstep, hmax, res, g):
    """Adjoint sweep: from the last time back to the first, integrate ``(y, a, t_bar, args_bar)`` backwards
    (``a = dL/dy``) over each interval, adding the output cotangent at each requested time."""
    from fnarray import lax
    from fnarray.transforms.ad import vjp
    from fnarray.flatten_util import ravel_pytree
    fnp = _np()
    ys, ts, args = res

    def aug_dynamics(state, minus_t, *args):
        y, a = state[0], state[1]
        y_dot, pullback = vjp(func, y, -minus_t, *args)
        return (-y_dot, *pullback(a))

    def interval(carry, i):
        a, t0_bar, args_bar = carry
        t_bar = fnp.dot(func(ys[i], ts[i], *args), g[i])
        t0_bar = t0_bar - t_bar
        state0 = (ys[i], a, t0_bar, args_bar)
        flat0, unravel = ravel_pytree(state0)
        flat_dyn = lambda v, t, *ar: ravel_pytree(aug_dynamics(unravel(v), t, *ar))[0]  # noqa: E731
        back = _solve(flat_dyn, rtol, atol, mxstep, hmax, flat0, -fnp.stack([ts[i], ts[i - 1]]), *args)
        _, a, t0_bar, args_bar = unravel(back[1])
        return (a + g[i - 1], t0_bar, args_bar), t_bar

    zeros_args = tree_util.tree_map(fnp.zeros_like, args)
    init = (g[-1], fnp.zeros((), ts.dtype), zeros_args)
    (a, t0_bar, args_bar), rev_t_bars = lax.scan(interval, init, fnp.arange(ts.shape[0] - 1, 0, -1))
    ts_bar = fnp.concatenate([t0_bar[None], rev_t_bars[::-1]])
    return (a, ts_bar, *args_bar)


_solve_vjp = custom_vjp(_solve, nondiff_argnums=(0, 1, 2, 3, 4))
_solve_vjp.defvjp(_solve_fwd, _solve_bwd)


def _closure_converted(func, y0, t0, args):
    """``func`` with the values it closes over (arrays, outer tracers) made trailing arguments:
    ``(converted, consts)`` with ``converted(y, t, *args, *consts) == func(y, t, *args)`` (traced once, as
    ``custom_root``'s functions: ``fnarray._implicit.traced_once``)."""
    prog, consts, out_tree = traced_once(lambda y, t, a: func(y, t, *a), (y0, t0, args), "odeint_func")
    n_args = len(args)

    def converted(y, t, *rest):
        xs = tree_util.tree_leaves((y, t, tuple(rest[:n_args])))
        return tree_util.tree_unflatten(out_tree, eval_program(prog, list(rest[n_args:]), xs))

    return converted, consts


def _check(y0, t, args, rtol, atol, mxstep, hmax):
    from fnarray.core.array import Array
    from fnarray.core.tracing import Tracer
    fnp = _np()
    for i, a in enumerate(tree_util.tree_leaves(args)):
        if not isinstance(a, (Array, Tracer, np.ndarray, np.generic, int, float, complex)):
            raise TypeError(f"odeint: the leaves of *args must be arrays or numbers (they are differentiated), got "
                            f"a {type(a).__name__} as leaf {i}; bind other values into func with a closure or "
                            "functools.partial")
    t = fnp.asarray(t)
    if t.ndim != 1 or t.shape[0] < 1:
        raise ValueError(f"odeint: t must be a 1-D array of at least one time (increasing, t[0] the time of y0), "
                         f"got shape {tuple(t.shape)}")
    if not fnp.issubdtype(t.dtype, fnp.floating):
        t = t.astype(fnp.result_type(float))
    for name, v in (("rtol", rtol), ("atol", atol)):
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not v > 0:
            raise ValueError(f"odeint: {name} must be a positive number, got {v!r}")
    for name, v in (("mxstep", mxstep), ("hmax", hmax)):
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not v > 0:
            raise ValueError(f"odeint: {name} must be a positive number (float('inf') for no limit), got {v!r}")
    leaves = tree_util.tree_leaves(y0)
    if not leaves:
        raise ValueError("odeint: y0 has no array leaves; pass the initial state (an array or a pytree of arrays)")
    for leaf in leaves:
        if not fnp.issubdtype(fnp.asarray(leaf).dtype, fnp.inexact):
            raise TypeError(f"odeint: y0's leaves must be floating point (the state is integrated continuously), "
                            f"got dtype {fnp.asarray(leaf).dtype}; cast with .astype(fnarray.numpy.float32)")
    return t


def odeint(func, y0, t, *args, rtol=1.4e-8, atol=1.4e-8, mxstep=float("inf"), hmax=float("inf")):
    """Solve ``dy/dt = func(y, t, *args)`` from ``y(t[0]) = y0`` and return ``y`` at every time of ``t``
    (``jax.experimental.ode.odeint``).

    Args:
      func: ``func(y, t, *args) -> dy/dt``, a pytree of ``y``'s structure, shapes and dtypes.
      y0: the initial state: an array or a pytree of floating arrays.
      t: 1-D array of increasing times; ``t[0]`` is the time of ``y0``.
      *args: arrays (pytrees of them) passed to ``func``; ``grad`` differentiates with respect to them, ``y0``
        and ``t``. Values ``func`` closes over are differentiated too.
      rtol, atol: relative and absolute error tolerances of each step (JAX's defaults, 1.4e-8).
      mxstep: the most steps taken to reach each time of ``t`` (default unlimited); when it is reached the
        value there is extrapolated from the last step, as JAX does.
      hmax: the largest step size (default unlimited).
    Returns:
      a pytree of ``y0``'s structure whose leaves have a leading axis of ``len(t)``: the state at each time.
    Raises:
      TypeError: a leaf of ``args`` that is not an array or number; an integer ``y0``.
      ValueError: ``t`` not 1-D or empty; a tolerance, ``mxstep`` or ``hmax`` that is not a positive number.
      (``func`` returning another structure or shape raises from the ``lax`` loops, naming the carry.)
    Source: Dormand and Prince's RK5(4) with a 4th-order dense output and adjoint gradients, as JAX's
    ``jax/experimental/ode.py``; Hairer, Norsett and Wanner, "Solving Ordinary Differential Equations I".
    """
    from fnarray import vmap
    from fnarray.flatten_util import ravel_pytree
    t = _check(y0, t, args, rtol, atol, mxstep, hmax)
    converted, consts = _closure_converted(func, y0, t[0], args)
    flat_y0, unravel = ravel_pytree(y0)

    def flat_func(y, t_, *rest):
        return ravel_pytree(converted(unravel(y), t_, *rest))[0]

    ys = _solve_vjp(flat_func, rtol, atol, mxstep, hmax, flat_y0, t, *args, *consts)
    return vmap(unravel)(ys)
