"""``examples/gaussian_process.py`` on a small budget, checked against scikit-learn and NumPy float64.

The log marginal likelihood and its gradient (through ``cholesky``/``cho_solve``) against scikit-learn's
``GaussianProcessRegressor.log_marginal_likelihood(theta, eval_gradient=True)`` (the chain rule maps its
log-variance parameters to the example's log-standard-deviations), the posterior mean against a NumPy float64
solve, a short run on every device, and bad command lines exiting non-zero with a message.
"""

from __future__ import annotations

import math
import os
import sys
import warnings

import numpy as np
import pytest

import fnarray as fa

from helpers import check_traced

pytest.importorskip("sklearn", reason="the example needs scikit-learn (pip install 'fnarray[examples]')")

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
import gaussian_process as gp  # noqa: E402


def _sklearn_lml_and_grad(params, x, y):
    from sklearn.gaussian_process import GaussianProcessRegressor
    from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel
    p = {k: float(v) for k, v in params.items()}
    kern = (ConstantKernel(math.exp(2 * p["log_signal"])) * RBF(math.exp(p["log_length"]))
            + WhiteKernel(math.exp(2 * p["log_noise"])))
    gpr = GaussianProcessRegressor(kernel=kern, optimizer=None).fit(x.astype(np.float64), y.astype(np.float64))
    lml, g = gpr.log_marginal_likelihood(gpr.kernel_.theta, eval_gradient=True)
    # theta = (log s_f^2, log l, log s_n^2): d/d log s = 2 d/d log s^2; the example minimizes -LML.
    return lml, {"log_signal": -2 * g[0], "log_length": -g[1], "log_noise": -2 * g[2]}


def _posterior_mean64(params, x, y, xn):
    p = {k: math.exp(float(v)) for k, v in params.items()}
    x, y, xn = (a.astype(np.float64) for a in (x, y, xn))

    def k(a, b):
        sq = ((a[:, None, :] - b[None, :, :]) ** 2).sum(-1)
        return p["log_signal"] ** 2 * np.exp(-0.5 * sq / p["log_length"] ** 2)
    return k(xn, x) @ np.linalg.solve(k(x, x) + p["log_noise"] ** 2 * np.eye(len(x)), y)


def test_lml_and_gradient_against_sklearn(device):
    x, _, y, _, _ = gp.load_data(200)
    x, y = x[:60], y[:60]
    params = {k: np.float32(v) for k, v in gp.INIT.items()}
    want, want_grad = _sklearn_lml_and_grad(params, x, y)
    put = lambda v: fa.device_put(v, device)  # noqa: E731
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", fa.FallbackWarning)
        value, grad = fa.jit(fa.value_and_grad(gp.negative_log_marginal_likelihood), device=device)(
            {k: put(v) for k, v in params.items()}, put(x), put(y))
    assert abs(-float(value) - want) <= 1e-4 * abs(want)
    for k in params:
        assert np.isclose(float(grad[k]), want_grad[k], rtol=2e-3, atol=2e-3), (k, float(grad[k]), want_grad[k])
    check_traced(fa.grad(gp.negative_log_marginal_likelihood), params, x, y)


def test_short_fit_agrees_with_sklearn_and_numpy():
    out = gp.main(["--steps", "4", "--test-size", "200", "--lr", "0.1"])
    assert out["check_rel_diff"] < gp.CHECK_RTOL
    assert abs(out["lml_final"] - out["sklearn_lml_final"]) <= gp.CHECK_RTOL * abs(out["sklearn_lml_final"])
    assert out["losses"][-1] < out["losses"][0]
    assert out["lml_final"] > out["lml_init"]
    x, xt, y, yt, _ = gp.load_data(200)
    params = {k: math.log(v) for k, v in out["params"].items()}
    mean = _posterior_mean64(params, x, y, xt)
    assert abs(out["rmse"] - np.sqrt(np.mean((mean - yt) ** 2))) < 1e-3
    assert out["rmse"] < out["baseline_rmse"]


@pytest.mark.parametrize("argv, message", [
    (["--device", "nosuch"], "numpy:0"), (["--steps", "-1"], "--steps"), (["--lr", "0"], "--lr"),
    (["--test-size", "500"], "--test-size"),
])
def test_bad_input_exits_nonzero(argv, message, capsys):
    with pytest.raises(SystemExit) as info:
        gp.main(argv)
    assert info.value.code not in (0, None)
    assert message in capsys.readouterr().err
