"""Newton's method for logistic regression with ``fa.hessian`` and Hessian-vector products.

One digit class against the rest (default: 8 vs the other nine) on scikit-learn's
digits, with the 64 pixels and a bias as the 65 parameters ``w``. The loss is the
mean logistic loss plus ``lam / 2 * |w|^2``; the small L2 term keeps the Hessian
positive definite, so every Newton direction ``d = H^-1 g`` is well defined. A backtracking
line search picks the step ``w <- w - t d`` (``t = 1`` once close to the optimum, where
convergence is quadratic).

Two ways to solve ``H d = g`` (``--solver``):

* ``cholesky`` (default): the full Hessian from ``fa.hessian``, factorised by
  ``fnarray.scipy.linalg.cho_factor`` (the ``cholesky`` primitive) and solved by ``cho_solve``
  (two ``triangular_solve`` calls), on every backend;
* ``cg``: matrix-free conjugate gradient that only uses Hessian-vector products,
  ``fa.jvp(fa.grad(loss), (w,), (v,))`` (forward-over-reverse), never forming ``H``.

Either way the script first checks the Hessian-vector product against
``hessian(loss)(w) @ v`` and prints the difference. Every step prints the loss,
the gradient norm and the Newton decrement; the end prints the test accuracy next
to the accuracy of always answering "rest".

Usage::

    python examples/newton.py [--digit 8] [--steps 8] [--solver cholesky|cg] [--l2 1e-3] [--device numpy:0]
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time

import numpy as np

import fnarray as fa
from _cli import device_from_arg
import fnarray.numpy as fnp
from fnarray.scipy.linalg import cho_factor, cho_solve

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from digits_mlp import load_data  # noqa: E402  (the same data and split)

TOLERANCE = 1e-10  # stop once half the squared Newton decrement (the predicted decrease) is below this


def with_bias(x):
    """``x: f32[n, 64]`` -> ``f32[n, 65]`` with a trailing column of ones (the bias input)."""
    return np.concatenate([x, np.ones((x.shape[0], 1), np.float32)], axis=1)


def make_loss(x, t, lam):
    """The regularised logistic loss ``w: f32[65] -> f32[]`` of inputs ``x: f32[n, 65]`` and targets ``t`` in {0, 1}."""

    def loss(w):
        z = x @ w
        # log(1 + e^z) - t z, written with logaddexp so that it never overflows
        return fnp.mean(fnp.logaddexp(0.0, z) - t * z) + 0.5 * lam * fnp.sum(w * w)

    return loss


def hvp(f, w, v):
    """The Hessian of ``f`` at ``w`` times ``v``, by forward-over-reverse (no Hessian is formed)."""
    return fa.jvp(fa.grad(f), (w,), (v,))[1]


def conjugate_gradient(matvec, b, iterations):
    """Approximately solve ``A x = b`` for symmetric positive-definite ``A`` given only ``matvec``.

    A fixed number of iterations (``fa.fori_loop``); once the residual vanishes, the
    iterate stops changing.
    """
    def body(_, state):
        x, r, p, rs = state
        ap = matvec(p)
        pap = p @ ap
        alpha = fnp.where(pap > 0, rs / fnp.where(pap > 0, pap, 1.0), 0.0)
        x = x + alpha * p
        r = r - alpha * ap
        rs_new = r @ r
        beta = fnp.where(rs > 0, rs_new / fnp.where(rs > 0, rs, 1.0), 0.0)
        return x, r, r + beta * p, rs_new

    zero = fnp.zeros_like(b)
    x, *_ = fa.fori_loop(0, iterations, body, (zero, b, b, b @ b))
    return x


def newton_direction(loss, w, solver, cg_iterations):
    """``(loss, gradient, d)`` at ``w`` with ``d = H^-1 g`` (the step is ``w - d``)."""
    value, g = fa.value_and_grad(loss)(w)
    if solver == "cholesky":
        d = cho_solve(cho_factor(fa.hessian(loss)(w), lower=True), g)
    else:
        d = conjugate_gradient(lambda v: hvp(loss, w, v), g, cg_iterations)
    return value, g, d


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--digit", type=int, default=8, help="the class to tell apart from the rest, 0-9 (default 8)")
    p.add_argument("--steps", type=int, default=12, help="at most this many Newton steps (default 12)")
    p.add_argument("--solver", choices=("cholesky", "cg"), default="cholesky",
                   help="cholesky of fa.hessian (default), or conjugate gradient with Hessian-vector products")
    p.add_argument("--cg-iterations", type=int, default=65, help="CG iterations per step (default 65)")
    p.add_argument("--l2", type=float, default=1e-3, help="L2 regularisation lam (default 1e-3)")
    p.add_argument("--device", default=None,
                   help="a name from fnarray.devices(all_backends=True) (default: the default device)")
    args = p.parse_args(argv)
    args.device = device_from_arg(p, args.device)
    if not 0 <= args.digit <= 9:
        p.error(f"--digit must be a digit class 0-9, got {args.digit}")
    if args.steps < 1:
        p.error(f"--steps must be >= 1, got {args.steps}")
    if args.cg_iterations < 1:
        p.error(f"--cg-iterations must be >= 1, got {args.cg_iterations}")
    if not (math.isfinite(args.l2) and args.l2 > 0):
        p.error(f"--l2 must be > 0 (it keeps the Hessian invertible), got {args.l2}")
    return args


def main(argv=None) -> dict:
    """Run the check and the Newton iterations; returns a dict.

    Keys: ``losses`` (at each step, then at the final ``w``), ``grad_norms``,
    ``decrements`` (Newton decrement ``sqrt(g . H^-1 g)`` of each step), ``step_sizes`` (from the
    backtracking line search),
    ``hvp_max_abs_diff`` (HVP vs Hessian @ v), ``hvp``/``hessian_v`` (the two vectors),
    ``accuracy`` and ``baseline`` (test accuracy, and that of always answering "rest"), ``device``.
    """
    args = parse_args(argv)
    dev = args.device
    x_train, x_test, y_train, y_test = load_data()
    xa, xt = fa.device_put(with_bias(x_train), dev), fa.device_put(with_bias(x_test), dev)
    ta = fa.device_put((y_train == args.digit).astype(np.float32), dev)
    loss = make_loss(xa, ta, args.l2)
    w = fa.device_put(np.zeros(xa.shape[1], np.float32), dev)

    # Hessian-vector product (forward-over-reverse) against the full Hessian.
    v = fa.device_put(fa.random.normal(fa.random.key(0), (xa.shape[1],)), dev)
    w_probe = fa.device_put(fa.random.normal(fa.random.key(1), (xa.shape[1],)) * 0.1, dev)
    hv = np.asarray(fa.jit(lambda w_, v_: hvp(loss, w_, v_), device=dev)(w_probe, v))
    hess = fa.jit(fa.hessian(loss), device=dev)(w_probe)
    h_v = np.asarray(hess) @ np.asarray(v)
    hvp_diff = float(np.max(np.abs(hv - h_v)))
    print(f"Hessian {tuple(hess.shape)} from fa.hessian; Hessian-vector product by fa.jvp(fa.grad(loss)):")
    print(f"  max |hvp(w, v) - hessian(w) @ v| = {hvp_diff:.3e} (max |H v| = {np.max(np.abs(h_v)):.3e})")

    step = fa.jit(lambda w_: newton_direction(loss, w_, args.solver, args.cg_iterations), device=dev)
    solver = "Cholesky of fa.hessian" if args.solver == "cholesky" else \
        f"conjugate gradient, {args.cg_iterations} Hessian-vector products"
    print(f"Newton's method, digit {args.digit} vs rest, {xa.shape[0]} training images, "
          f"L2 {args.l2:g}, solver: {solver}")
    loss_at = fa.jit(loss, device=dev)
    losses, grad_norms, decrements, step_sizes, times = [], [], [], [], []
    for k in range(args.steps):
        t0 = time.perf_counter()
        value, g, d = step(w)
        value, g_np, d_np = float(value), np.asarray(g), np.asarray(d)
        slope = float(g_np @ d_np)  # the squared Newton decrement: the decrease the quadratic model predicts x 2
        losses.append(value)
        grad_norms.append(float(np.linalg.norm(g_np)))
        decrements.append(float(np.sqrt(max(slope, 0.0))))
        if slope / 2 < TOLERANCE:
            times.append(time.perf_counter() - t0)
            print(f"  step {k:2d}: loss {value:.6f}   |grad| {grad_norms[-1]:.3e}   "
                  f"Newton decrement {decrements[-1]:.3e}   converged (decrement^2 / 2 < {TOLERANCE:g})")
            break
        # Backtracking (Armijo) line search: far from the optimum a full Newton step of the
        # logistic loss can overshoot; near it the full step t = 1 is taken and convergence is
        # quadratic. The slack allows for float32 rounding of the loss.
        slack = 4 * float(np.finfo(np.float32).eps) * abs(value)
        t = 1.0
        while t > 1e-6 and float(loss_at(w - t * d)) > value - 0.25 * t * slope + slack:
            t *= 0.5
        w = w - t * d
        times.append(time.perf_counter() - t0)
        step_sizes.append(t)
        print(f"  step {k:2d}: loss {value:.6f}   |grad| {grad_norms[-1]:.3e}   "
              f"Newton decrement {decrements[-1]:.3e}   step size {t:g}")
    losses.append(float(loss_at(w)))
    print(f"  final  : loss {losses[-1]:.6f}")

    pred = np.asarray(xt @ w) > 0
    truth = y_test == args.digit
    acc = float(np.mean(pred == truth))
    baseline = float(np.mean(~truth))
    print(f"test accuracy: {100 * acc:.2f}% on {len(truth)} held-out images "
          f"(always answering 'not {args.digit}' scores {100 * baseline:.2f}%)")
    if len(times) > 1:
        print(f"time: {np.mean(times[1:]) * 1e3:.1f} ms per Newton step "
              f"(steps after the first; the first, with compilation, took {times[0] * 1e3:.0f} ms)")
    print(f"device: {dev}")
    return {"losses": losses, "grad_norms": grad_norms, "decrements": decrements, "hvp_max_abs_diff": hvp_diff,
            "step_sizes": step_sizes, "hvp": hv, "hessian_v": h_v, "accuracy": acc, "baseline": baseline,
            "device": str(dev), "weights": np.asarray(w)}


if __name__ == "__main__":
    main()
