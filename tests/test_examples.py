"""The examples (``examples/*.py``) run in-process on a small budget, checked against NumPy references.

Each example's ``main([...])`` runs with few epochs/steps; its results are
checked against independent references written here in NumPy float64
(forward and backward passes by hand, the analytic logistic Hessian,
``numpy.linalg.solve``, a float64 leapfrog), and its traced programs against
the IR verifier. Bad command-line input must exit non-zero with a message.
"""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

import fnarray as fa
import fnarray.numpy as fnp

from helpers import check_traced

pytest.importorskip("sklearn", reason="the examples need scikit-learn (pip install scikit-learn)")

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
import digits_mlp  # noqa: E402
import nbody  # noqa: E402
import newton  # noqa: E402
import per_example_gradients as peg  # noqa: E402


@pytest.fixture(scope="module")
def digits():
    return digits_mlp.load_data()


# ------------------------------------------------------------------------------ references


def relu64(z):
    return np.maximum(z, 0.0)


def log_softmax64(z):
    z = z - z.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def mlp_forward64(params, x):
    """Probabilities of the 64-128-128-10 MLP in float64."""
    p = {k: np.asarray(v, np.float64) for k, v in params.items()}
    h = relu64(x @ p["w1"] + p["b1"])
    h = relu64(h @ p["w2"] + p["b2"])
    return np.exp(log_softmax64(h @ p["w3"] + p["b3"]))


def mlp_loss_and_grads64(params, x, y):
    """Mean cross-entropy and its gradients, backpropagated by hand in float64."""
    p = {k: np.asarray(v, np.float64) for k, v in params.items()}
    x = np.asarray(x, np.float64)
    n = x.shape[0]
    z1 = x @ p["w1"] + p["b1"]
    h1 = relu64(z1)
    z2 = h1 @ p["w2"] + p["b2"]
    h2 = relu64(z2)
    logp = log_softmax64(h2 @ p["w3"] + p["b3"])
    loss = -np.mean(logp[np.arange(n), y])
    d = np.exp(logp)
    d[np.arange(n), y] -= 1.0
    d /= n
    g = {"w3": h2.T @ d, "b3": d.sum(0)}
    d = (d @ p["w3"].T) * (z2 > 0)
    g["w2"], g["b2"] = h1.T @ d, d.sum(0)
    d = (d @ p["w2"].T) * (z1 > 0)
    g["w1"], g["b1"] = x.T @ d, d.sum(0)
    return loss, g


def example_grad64(params, x, y):
    """The gradient of one example's cross-entropy for the 64-32-10 net, by hand in float64."""
    p = {k: np.asarray(v, np.float64) for k, v in params.items()}
    z1 = np.asarray(x, np.float64) @ p["w1"] + p["b1"]
    h1 = relu64(z1)
    d = np.exp(log_softmax64(h1 @ p["w2"] + p["b2"]))
    d[y] -= 1.0
    g = {"w2": np.outer(h1, d), "b2": d}
    d = (p["w2"] @ d) * (z1 > 0)
    g["w1"], g["b1"] = np.outer(np.asarray(x, np.float64), d), d
    return g


def leapfrog64(pos, vel, masses, dt, steps):
    """The same softened leapfrog as ``examples/nbody.py``, in float64 NumPy."""
    pos, vel, m = (np.asarray(a, np.float64) for a in (pos, vel, masses))
    eps2 = nbody.SOFTENING ** 2

    def acc(x):
        diff = x[None, :, :] - x[:, None, :]
        inv_r3 = ((diff ** 2).sum(-1) + eps2) ** -1.5
        return nbody.G * ((m[None, :] * inv_r3)[:, :, None] * diff).sum(1)

    a = acc(pos)
    for _ in range(steps):
        vel = vel + 0.5 * dt * a
        pos = pos + dt * vel
        a = acc(pos)
        vel = vel + 0.5 * dt * a
    return pos, vel


def energy64(pos, vel, m):
    pos, vel, m = (np.asarray(a, np.float64) for a in (pos, vel, m))
    kinetic = 0.5 * np.sum(m * (vel ** 2).sum(-1))
    i, j = np.triu_indices(len(m), k=1)
    r = np.sqrt(((pos[i] - pos[j]) ** 2).sum(-1) + nbody.SOFTENING ** 2)
    return kinetic - nbody.G * np.sum(m[i] * m[j] / r)


def exits_with_error(main, argv, capsys, expect_in_message):
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code not in (0, None)
    err = capsys.readouterr().err
    assert expect_in_message in err, err


# ------------------------------------------------------------------------------ digits MLP


def test_digits_loss_and_gradients_match_numpy(digits):
    x_train, _, y_train, _ = digits
    params = digits_mlp.init_params(fa.random.key(3))
    x, y = x_train[:50], y_train[:50]
    check_traced(fa.value_and_grad(digits_mlp.loss_fn), params, x, y)
    loss, grads = fa.jit(fa.value_and_grad(digits_mlp.loss_fn))(params, x, y)
    ref_loss, ref_grads = mlp_loss_and_grads64({k: np.asarray(v) for k, v in params.items()}, x, y)
    np.testing.assert_allclose(float(loss), ref_loss, rtol=1e-5)
    for k in digits_mlp.PARAM_NAMES:
        np.testing.assert_allclose(np.asarray(grads[k]), ref_grads[k], rtol=1e-4, atol=1e-6, err_msg=k)


def test_digits_train_step_is_adam_on_the_gradients(digits):
    """One jitted step (gather, value_and_grad, Adam) against optax's Adam written in NumPy float64."""
    x_train, _, y_train, _ = digits
    params = digits_mlp.init_params(fa.random.key(4))
    opt = fa.optim.adam(1e-2)
    state = opt.init(params)
    step = digits_mlp.make_train_step(opt, fa.default_device())
    idx = np.arange(10, 42, dtype=np.int32)
    check_traced(step.fun, params, state, x_train, y_train, idx)
    new, _, loss = step(params, state, fa.device_put(x_train), fa.device_put(y_train), idx)
    host = {k: np.asarray(v) for k, v in params.items()}
    ref_loss, g = mlp_loss_and_grads64(host, x_train[idx], y_train[idx])
    np.testing.assert_allclose(float(loss), ref_loss, rtol=1e-5)
    for k in digits_mlp.PARAM_NAMES:
        m, v = 0.1 * g[k] / (1 - 0.9), 0.001 * g[k] ** 2 / (1 - 0.999)  # first step, bias-corrected
        want = host[k] - 1e-2 * m / (np.sqrt(v) + 1e-8)
        np.testing.assert_allclose(np.asarray(new[k]), want, rtol=1e-4, atol=2e-5, err_msg=k)


def test_digits_main_trains_plots_and_saves(tmp_path, digits):
    png, npz = tmp_path / "history.png", tmp_path / "params.npz"
    out = digits_mlp.main(["--epochs", "2", "--seed", "1", "--quiet", "--plot", str(png), "--save", str(npz)])
    assert out["accuracy"] > 0.7, out["accuracy"]
    assert len(out["losses"]) == 2 and all(np.isfinite(out["losses"]))
    assert out["losses"][1] < out["losses"][0]
    assert out["device"] == str(fa.default_device())
    assert out["epoch_time"] > 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
    with np.load(npz, allow_pickle=False) as f:
        saved = {k: f[k] for k in f.files}
    shapes = {"w1": (64, 128), "b1": (128,), "w2": (128, 128), "b2": (128,), "w3": (128, 10), "b3": (10,)}
    assert {k: v.shape for k, v in saved.items()} == shapes
    assert all(v.dtype == np.float32 for v in saved.values())

    # predict on the saved parameters: probabilities that sum to 1, equal to a float64 forward pass,
    # and the accuracy that main reported.
    _, x_test, _, y_test = digits
    probs = digits_mlp.predict(saved, x_test)
    assert probs.dtype == np.float32 and probs.shape == (x_test.shape[0], 10)
    ref = mlp_forward64(saved, x_test)
    np.testing.assert_allclose(np.asarray(probs), ref, atol=1e-5)
    np.testing.assert_allclose(np.asarray(probs).sum(axis=1), 1.0, atol=1e-5)
    assert np.mean(ref.argmax(1) == y_test) == pytest.approx(out["accuracy"], abs=1.5 / len(y_test))
    check_traced(digits_mlp.predict, saved, x_test)


def test_digits_is_deterministic_for_a_seed():
    a = digits_mlp.main(["--epochs", "1", "--seed", "7", "--batch-size", "500", "--quiet"])
    b = digits_mlp.main(["--epochs", "1", "--seed", "7", "--batch-size", "500", "--quiet"])
    c = digits_mlp.main(["--epochs", "1", "--seed", "8", "--batch-size", "500", "--quiet"])
    for k in digits_mlp.PARAM_NAMES:
        np.testing.assert_array_equal(a["params"][k], b["params"][k])
    assert not np.array_equal(a["params"]["w1"], c["params"]["w1"])


@pytest.mark.parametrize("argv, message", [
    (["--device", "nosuch"], "numpy:0"),
    (["--epochs", "0"], "--epochs"),
    (["--epochs", "-3"], "--epochs"),
    (["--batch-size", "0"], "--batch-size"),
    (["--batch-size", "-64"], "--batch-size"),
    (["--lr", "-1"], "--lr"),
    (["--plot", "out.txt"], "matplotlib cannot write .txt"),
    (["--save", "x.txt"], "--save x.txt: the parameters are written as a NumPy .npz"),
])
def test_digits_bad_input_exits_nonzero(argv, message, capsys):
    exits_with_error(digits_mlp.main, argv, capsys, message)


# ------------------------------------------------------------------------------ per-example gradients


def test_per_example_gradients_match_loop_and_numpy(digits):
    x_train, _, y_train, _ = digits
    out = peg.main(["--steps", "3", "--batch-size", "12", "--seed", "2"])
    assert out["max_abs_diff"] < 1e-5
    assert out["norms"].shape == (12,) and np.all(out["norms"] > 0)
    assert len(out["losses"]) == 3 and np.all(np.isfinite(out["losses"]))

    params = peg.init_params(fa.random.key(5))
    x, y = x_train[:8], y_train[:8]
    check_traced(peg.per_example_grads, params, x, y)
    grads = fa.jit(peg.per_example_grads)(params, x, y)
    host = {k: np.asarray(v) for k, v in params.items()}
    for i in range(len(y)):
        ref = example_grad64(host, x[i], y[i])
        for k in ref:
            np.testing.assert_allclose(np.asarray(grads[k])[i], ref[k], rtol=1e-4, atol=1e-6, err_msg=f"{k}[{i}]")
    norms = np.asarray(peg.global_norms(grads))
    want = np.sqrt(sum((np.asarray(grads[k]).reshape(len(y), -1) ** 2).sum(1) for k in grads))
    np.testing.assert_allclose(norms, want, rtol=1e-5)


def test_dp_sgd_step_clips_and_averages(digits):
    """Without noise the step is exactly ``p - lr * mean(clip(g_i))``; with noise it differs by lr*noise."""
    x_train, _, y_train, _ = digits
    params = peg.init_params(fa.random.key(6))
    host = {k: np.asarray(v) for k, v in params.items()}
    x, y = x_train[:16], y_train[:16]
    key = fa.random.key(9)
    check_traced(peg.dp_sgd_step, params, x, y, key, 0.5, 0.0, 0.1)
    new, norms, _ = fa.jit(peg.dp_sgd_step)(params, x, y, key, 0.5, 0.0, 0.1)
    per = [example_grad64(host, x[i], y[i]) for i in range(len(y))]
    ref_norms = np.array([np.sqrt(sum(np.sum(g[k] ** 2) for k in g)) for g in per])
    np.testing.assert_allclose(np.asarray(norms), ref_norms, rtol=1e-4)
    scale = np.minimum(1.0, 0.5 / ref_norms)
    for k in host:
        clipped = np.mean([s * g[k] for s, g in zip(scale, per, strict=True)], axis=0)
        np.testing.assert_allclose(np.asarray(new[k]), host[k] - 0.1 * clipped, rtol=1e-4, atol=1e-6, err_msg=k)
    noisy, _, _ = fa.jit(peg.dp_sgd_step)(params, x, y, key, 0.5, 1.0, 0.1)
    diff = np.concatenate([(np.asarray(noisy[k]) - np.asarray(new[k])).ravel() for k in host]) / 0.1
    assert abs(np.std(diff) - 0.5 / 16) < 0.1 * 0.5 / 16  # noise std = multiplier * C / batch


@pytest.mark.parametrize("argv, message", [
    (["--device", "nosuch"], "numpy:0"), (["--batch-size", "0"], "--batch-size"), (["--clip", "0"], "--clip"),
])
def test_per_example_bad_input_exits_nonzero(argv, message, capsys):
    exits_with_error(peg.main, argv, capsys, message)


# ------------------------------------------------------------------------------ Newton


def test_newton_loss_decreases_and_hvp_equals_hessian_times_v(digits):
    out = newton.main(["--digit", "3", "--steps", "5"])
    losses = np.array(out["losses"])
    assert np.all(np.isfinite(losses)) and np.all(np.diff(losses) <= 1e-6 * losses[0])
    assert losses[-1] < 0.5 * losses[0]
    assert out["accuracy"] > out["baseline"]
    scale = np.max(np.abs(out["hessian_v"]))
    assert out["hvp_max_abs_diff"] <= 1e-5 * scale
    np.testing.assert_allclose(out["hvp"], out["hessian_v"], rtol=1e-4, atol=1e-6 * scale)


def test_newton_hessian_and_solvers_match_numpy(digits):
    x_train, _, y_train, _ = digits
    x = newton.with_bias(x_train[:300])
    t = (y_train[:300] == 5).astype(np.float32)
    lam = 1e-2
    loss = newton.make_loss(x, t, lam)
    w = (np.random.default_rng(0).standard_normal(65) * 0.1).astype(np.float32)
    check_traced(fa.hessian(loss), w)
    hess = np.asarray(fa.jit(fa.hessian(loss))(w))
    x64 = x.astype(np.float64)
    p = 1 / (1 + np.exp(-(x64 @ w)))
    ref = (x64.T * (p * (1 - p))) @ x64 / len(t) + lam * np.eye(65)   # the analytic Hessian
    np.testing.assert_allclose(hess, ref, rtol=1e-4, atol=1e-6)

    v = np.linspace(-1, 1, 65).astype(np.float32)
    check_traced(lambda a, b: newton.hvp(loss, a, b), w, v)
    np.testing.assert_allclose(np.asarray(fa.jit(lambda a, b: newton.hvp(loss, a, b))(w, v)), ref @ v,
                               rtol=1e-4, atol=1e-6)

    b = np.cos(np.arange(65)).astype(np.float32)
    want = np.linalg.solve(ref, b)
    solve = lambda a, r: newton.cho_solve(newton.cho_factor(a, lower=True), r)  # noqa: E731  (what newton.py solves with)
    check_traced(solve, ref.astype(np.float32), b)
    got = fa.jit(solve)(ref.astype(np.float32), b)
    np.testing.assert_allclose(np.asarray(got), want, rtol=2e-3, atol=2e-3 * np.max(np.abs(want)))
    cg = fa.jit(lambda a, r: newton.conjugate_gradient(lambda q: a @ q, r, 130))(ref.astype(np.float32), b)
    np.testing.assert_allclose(np.asarray(cg), want, rtol=2e-3, atol=2e-3 * np.max(np.abs(want)))


def test_newton_cg_solver_agrees_with_cholesky():
    a = newton.main(["--digit", "0", "--steps", "3", "--solver", "cholesky"])
    b = newton.main(["--digit", "0", "--steps", "3", "--solver", "cg"])
    np.testing.assert_allclose(a["losses"], b["losses"], rtol=1e-4)


@pytest.mark.parametrize("argv, message", [
    (["--device", "nosuch"], "numpy:0"), (["--digit", "10"], "--digit"), (["--l2", "0"], "--l2"),
    (["--steps", "0"], "--steps"),
])
def test_newton_bad_input_exits_nonzero(argv, message, capsys):
    exits_with_error(newton.main, argv, capsys, message)


# ------------------------------------------------------------------------------ N-body


def test_nbody_conserves_energy_and_matches_float64_leapfrog():
    out = nbody.main(["--steps", "300", "--bodies", "4", "--dt", "0.01", "--seed", "3"])
    assert out["drift"] < 1e-4 and out["max_drift"] < 1e-4
    assert out["angular_momentum_drift"] < 1e-4
    assert out["energies"].shape == (300,) and np.all(np.isfinite(out["energies"]))
    pos0, vel0, m = nbody.initial_state(fa.random.key(3), 4)
    np.testing.assert_allclose(out["energy0"], energy64(pos0, vel0, m), rtol=1e-5)
    pos, vel = leapfrog64(pos0, vel0, m, 0.01, 300)
    np.testing.assert_allclose(out["positions"], pos, atol=2e-4)
    np.testing.assert_allclose(out["energies"][-1], energy64(pos, vel, m), rtol=1e-4)


def test_nbody_program_verifies():
    pos, vel, m = nbody.initial_state(fa.random.key(0), 3)
    prog = check_traced(lambda p, v, mm: nbody.simulate(p, v, mm, 0.01, 5), pos, vel, m)
    assert "scan" in str(prog)


@pytest.mark.parametrize("argv, message", [
    (["--device", "nosuch"], "numpy:0"), (["--bodies", "1"], "--bodies"), (["--steps", "0"], "--steps"),
    (["--dt", "-0.1"], "--dt"),
])
def test_nbody_bad_input_exits_nonzero(argv, message, capsys):
    exits_with_error(nbody.main, argv, capsys, message)


# ------------------------------------------------------------------------------ every device


def test_examples_run_on_every_device(device, digits):
    """The digits training and the N-body run on each usable device, against the NumPy references."""
    x_train, _, y_train, _ = digits
    out = digits_mlp.main(["--device", str(device), "--epochs", "1", "--batch-size", "500", "--seed", "5", "--quiet"])
    assert out["device"] == str(device)
    # replay the same 3 steps in float64: same initial parameters, same batches, Adam by hand
    key_init, key_shuffle = fa.random.split(fa.random.key(5))
    params = {k: np.asarray(v, np.float64) for k, v in digits_mlp.init_params(key_init).items()}
    order = np.asarray(fa.random.permutation(fa.random.fold_in(key_shuffle, 1), x_train.shape[0]))
    m = {k: 0.0 for k in params}
    v = {k: 0.0 for k in params}
    for t, start in enumerate(range(0, len(order), 500), start=1):
        idx = order[start:start + 500]
        _, g = mlp_loss_and_grads64(params, x_train[idx], y_train[idx])
        for k in params:
            m[k] = 0.9 * m[k] + 0.1 * g[k]
            v[k] = 0.999 * v[k] + 0.001 * g[k] ** 2
            params[k] = params[k] - 1e-3 * (m[k] / (1 - 0.9 ** t)) / (np.sqrt(v[k] / (1 - 0.999 ** t)) + 1e-8)
    for k in digits_mlp.PARAM_NAMES:
        np.testing.assert_allclose(out["params"][k], params[k], atol=2e-4, err_msg=k)

    body = nbody.main(["--device", str(device), "--steps", "100", "--bodies", "3", "--seed", "1"])
    pos0, vel0, masses = nbody.initial_state(fa.random.key(1), 3)
    np.testing.assert_allclose(body["positions"], leapfrog64(pos0, vel0, masses, 0.01, 100)[0], atol=1e-4)
    assert body["drift"] < 1e-4


def test_fnp_is_the_namespace_the_examples_use():
    # the examples accept NumPy inputs and return fnarray arrays from predict
    probs = digits_mlp.predict(digits_mlp.init_params(fa.random.key(0)), np.zeros((2, 64), np.float32))
    assert isinstance(probs, fnp.ndarray)
