"""Gaussian-process regression on scikit-learn's diabetes data, hyperparameters fit by ``fa.grad``.

The ten standardized features of the 442 patients predict the (standardized) disease progression one year
on. The model is a zero-mean GP with the kernel

    k(x, x') = s_f**2 * exp(-|x - x'|**2 / (2 l**2)) + s_n**2 [x == x']

(an RBF kernel plus noise). Its three hyperparameters are fit, in log space, by Adam on the negative log
marginal likelihood

    -log p(y | X) = y^T K^-1 y / 2 + sum(log diag L) + n log(2 pi) / 2,    K = L L^T,

whose gradient ``fa.grad`` takes through ``fnarray.scipy.linalg.cholesky`` and ``cho_solve`` (the
cholesky and triangular_solve primitives' derivative rules). Then the posterior mean predicts the held-out
patients and the test RMSE is printed next to the RMSE of predicting the mean.

Before fitting, the log marginal likelihood at fixed hyperparameters is checked against scikit-learn's
``GaussianProcessRegressor.log_marginal_likelihood`` (the same kernel as ``ConstantKernel * RBF +
WhiteKernel``); the relative difference is printed and must be within float32 rounding.

Usage::

    python examples/gaussian_process.py [--steps 150] [--lr 0.05] [--test-size 100] [--device numpy:0]
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fnarray as fa  # noqa: E402
import fnarray.numpy as fnp  # noqa: E402
from _cli import device_from_arg  # noqa: E402
from fnarray.scipy import linalg as fsl  # noqa: E402

SPLIT_SEED = 0
# Where the fit starts: length scale sqrt(10) (the features' typical distance), unit signal, noise 0.5.
INIT = {"log_length": 0.5 * math.log(10.0), "log_signal": 0.0, "log_noise": math.log(0.5)}
CHECK_RTOL = 1e-4   # float32 Cholesky of a ~350 x 350 kernel matrix against scikit-learn's float64


def load_data(test_size):
    """Standardized ``(x_train, x_test, y_train, y_test)`` float32 arrays (statistics of the training part)."""
    from sklearn.datasets import load_diabetes
    from sklearn.model_selection import train_test_split
    x, y = load_diabetes(return_X_y=True)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=test_size, random_state=SPLIT_SEED)
    mx, sx = x_train.mean(0), x_train.std(0)
    my, sy = y_train.mean(), y_train.std()
    out = ((x_train - mx) / sx, (x_test - mx) / sx, (y_train - my) / sy, (y_test - my) / sy)
    return tuple(a.astype(np.float32) for a in out) + (float(sy),)


def kernel(params, a, b):
    """``s_f**2 exp(-|a_i - b_j|**2 / (2 l**2))`` for ``a: f32[n, d]``, ``b: f32[m, d]``: ``f32[n, m]``."""
    sq = fnp.sum(a * a, axis=1)[:, None] + fnp.sum(b * b, axis=1)[None, :] - 2.0 * (a @ b.T)
    sq = fnp.maximum(sq, 0.0)
    return fnp.exp(2.0 * params["log_signal"] - 0.5 * sq * fnp.exp(-2.0 * params["log_length"]))


def negative_log_marginal_likelihood(params, x, y):
    """``-log p(y | x, params)`` through the Cholesky factor of ``K = k(x, x) + s_n**2 I``."""
    n = x.shape[0]
    k = kernel(params, x, x) + fnp.exp(2.0 * params["log_noise"]) * fnp.eye(n, dtype=x.dtype)
    low = fsl.cholesky(k, lower=True)
    alpha = fsl.cho_solve((low, True), y)
    log_det_half = fnp.sum(fnp.log(fnp.diagonal(low)))
    return 0.5 * (y @ alpha) + log_det_half + 0.5 * n * math.log(2 * math.pi)


def predict(params, x_train, y_train, x_new):
    """The posterior mean at ``x_new``."""
    n = x_train.shape[0]
    k = kernel(params, x_train, x_train) + fnp.exp(2.0 * params["log_noise"]) * fnp.eye(n, dtype=x_train.dtype)
    alpha = fsl.cho_solve(fsl.cho_factor(k, lower=True), y_train)
    return kernel(params, x_new, x_train) @ alpha


def sklearn_log_marginal_likelihood(params, x, y):
    """scikit-learn's log marginal likelihood of the same model at ``params`` (float64)."""
    from sklearn.gaussian_process import GaussianProcessRegressor
    from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel
    p = {k: float(v) for k, v in params.items()}
    kern = (ConstantKernel(math.exp(2 * p["log_signal"])) * RBF(math.exp(p["log_length"]))
            + WhiteKernel(math.exp(2 * p["log_noise"])))
    gpr = GaussianProcessRegressor(kernel=kern, optimizer=None, normalize_y=False).fit(x, y)
    return float(gpr.log_marginal_likelihood(gpr.kernel_.theta))


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=150, help="Adam steps on the hyperparameters (default 150)")
    p.add_argument("--lr", type=float, default=0.05, help="Adam's learning rate (default 0.05)")
    p.add_argument("--test-size", type=int, default=100, help="held-out patients, 1-200 (default 100)")
    p.add_argument("--device", default=None,
                   help="a name from fnarray.devices(all_backends=True) (default: the default device)")
    args = p.parse_args(argv)
    args.device = device_from_arg(p, args.device)
    if args.steps < 0:
        p.error(f"--steps must be >= 0, got {args.steps}")
    if not (math.isfinite(args.lr) and args.lr > 0):
        p.error(f"--lr must be a positive number, got {args.lr}")
    if not 1 <= args.test_size <= 200:
        p.error(f"--test-size must be between 1 and 200, got {args.test_size}")
    return args


def main(argv=None) -> dict:
    """Check the LML against scikit-learn, fit, predict; returns a dict.

    Keys: ``lml_init`` and ``sklearn_lml_init`` (the check), ``check_rel_diff``, ``lml_final``,
    ``sklearn_lml_final``, ``losses`` (negative LML per step), ``params`` (fitted, natural scale),
    ``rmse`` and ``baseline_rmse`` (standardized units), ``rmse_original`` (the target's units), ``device``.
    """
    args = parse_args(argv)
    dev = args.device
    x_train, x_test, y_train, y_test, y_scale = load_data(args.test_size)
    xa, ya = fa.device_put(x_train, dev), fa.device_put(y_train, dev)
    params = {k: fa.device_put(np.float32(v), dev) for k, v in INIT.items()}

    nlml = fa.jit(negative_log_marginal_likelihood, device=dev)
    lml_init = -float(nlml(params, xa, ya))
    sk_init = sklearn_log_marginal_likelihood(params, x_train.astype(np.float64), y_train.astype(np.float64))
    rel = abs(lml_init - sk_init) / abs(sk_init)
    print(f"diabetes: {x_train.shape[0]} training and {x_test.shape[0]} test patients, {x_train.shape[1]} features")
    print(f"log marginal likelihood at the initial hyperparameters: fnarray {lml_init:.4f}, scikit-learn "
          f"{sk_init:.4f} (relative difference {rel:.1e}; {'OK' if rel < CHECK_RTOL else 'MISMATCH'})")

    opt = fa.optim.adam(args.lr)
    state = opt.init(params)

    @fa.jit
    def step(p, s):
        value, grads = fa.value_and_grad(negative_log_marginal_likelihood)(p, xa, ya)
        updates, s = opt.update(grads, s, p)
        return fa.optim.apply_updates(p, updates), s, value

    losses = []
    t0 = time.perf_counter()
    for i in range(args.steps):
        params, state, value = step(params, state)
        losses.append(float(value))
        if i % 25 == 0 or i == args.steps - 1:
            nat = {k: math.exp(float(v)) for k, v in params.items()}
            print(f"  step {i:3d}: -log p(y) {losses[-1]:9.4f}   length {nat['log_length']:.3f}   "
                  f"signal {nat['log_signal']:.3f}   noise {nat['log_noise']:.3f}")
    fit_time = time.perf_counter() - t0
    lml_final = -float(nlml(params, xa, ya))
    sk_final = sklearn_log_marginal_likelihood(params, x_train.astype(np.float64), y_train.astype(np.float64))
    print(f"log marginal likelihood after {args.steps} steps: fnarray {lml_final:.4f}, scikit-learn {sk_final:.4f}")

    mean = np.asarray(fa.jit(predict, device=dev)(params, xa, ya, fa.device_put(x_test, dev)))
    rmse = float(np.sqrt(np.mean((mean - y_test) ** 2)))
    baseline = float(np.sqrt(np.mean(y_test ** 2)))   # predicting the training mean (0 after standardizing)
    print(f"test RMSE {rmse:.4f} (standardized; {rmse * y_scale:.2f} in the target's units), against "
          f"{baseline:.4f} for predicting the mean")
    if args.steps:
        print(f"time: {fit_time / args.steps * 1e3:.1f} ms per step (the first includes compilation)")
    print(f"device: {dev}")
    return {"lml_init": lml_init, "sklearn_lml_init": sk_init, "check_rel_diff": rel, "lml_final": lml_final,
            "sklearn_lml_final": sk_final, "losses": losses,
            "params": {k: math.exp(float(v)) for k, v in params.items()}, "rmse": rmse, "baseline_rmse": baseline,
            "rmse_original": rmse * y_scale, "device": str(dev)}


if __name__ == "__main__":
    main()
