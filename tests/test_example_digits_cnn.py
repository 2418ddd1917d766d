"""``examples/digits_cnn.py``: the CNN against JAX and a NumPy float64 forward pass, its command line, a train
step on every device, and its accuracy claim (>= 98% on the held-out digits) on numpy:0.
"""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

import fnarray as fa

from helpers import check_traced, fallback_mode

pytest.importorskip("sklearn", reason="the examples need scikit-learn (pip install scikit-learn)")
jax = pytest.importorskip("jax")
jnp = jax.numpy

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
import digits_cnn  # noqa: E402
import digits_mlp  # noqa: E402


@pytest.fixture(scope="module")
def digits():
    return digits_mlp.load_data()


def _jax_logits(p, x):
    """The same network written in JAX (the test oracle)."""
    h = x.reshape(x.shape[0], 8, 8, 1)
    for k, b in (("c1", "cb1"), ("c2", "cb2")):
        h = jax.lax.conv_general_dilated(h, p[k], (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
        h = jax.nn.relu(h + p[b])
        h = jax.lax.reduce_window(h, -jnp.inf, jax.lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
    h = jax.nn.relu(h.reshape(h.shape[0], -1) @ p["w1"] + p["b1"])
    return h @ p["w2"] + p["b2"]


def _jax_loss(p, x, y):
    return -jnp.mean(jnp.sum(jax.nn.one_hot(y, 10) * jax.nn.log_softmax(_jax_logits(p, x)), axis=-1))


def _forward64(p, x):
    """Class probabilities in NumPy float64: explicit loops over the 3x3 taps and the 2x2 pools."""
    p = {k: np.asarray(v, np.float64) for k, v in p.items()}
    h = np.asarray(x, np.float64).reshape(-1, 8, 8, 1)
    for k, b in (("c1", "cb1"), ("c2", "cb2")):
        n, size, _, _ = h.shape
        padded = np.pad(h, ((0, 0), (1, 1), (1, 1), (0, 0)))
        out = np.zeros((n, size, size, p[k].shape[-1]))
        for i in range(3):
            for j in range(3):
                out += padded[:, i:i + size, j:j + size, :] @ p[k][i, j]
        out = np.maximum(out + p[b], 0.0)
        h = out.reshape(n, size // 2, 2, size // 2, 2, -1).max(axis=(2, 4))
    h = np.maximum(h.reshape(h.shape[0], -1) @ p["w1"] + p["b1"], 0.0)
    z = h @ p["w2"] + p["b2"]
    z = z - z.max(axis=1, keepdims=True)
    return np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)


def test_loss_and_gradients_match_jax_and_float64(digits):
    x_train, _, y_train, _ = digits
    params = digits_cnn.init_params(fa.random.key(3))
    host = {k: np.asarray(v) for k, v in params.items()}
    assert {k: v.shape for k, v in host.items()} == dict(digits_cnn.PARAM_SHAPES)
    x, y = x_train[:40], y_train[:40]
    check_traced(fa.value_and_grad(digits_cnn.loss_fn), params, x, y)
    loss, grads = fa.jit(fa.value_and_grad(digits_cnn.loss_fn))(params, x, y)
    jloss, jgrads = jax.jit(jax.value_and_grad(_jax_loss))(host, x, y)
    np.testing.assert_allclose(float(loss), float(jloss), rtol=1e-5)
    for k in digits_cnn.PARAM_NAMES:
        np.testing.assert_allclose(np.asarray(grads[k]), np.asarray(jgrads[k]), rtol=2e-4, atol=2e-6, err_msg=k)
    ref = _forward64(host, x)
    np.testing.assert_allclose(float(loss), -np.mean(np.log(ref[np.arange(len(y)), y])), rtol=1e-5)


def test_main_trains_plots_and_saves(tmp_path, digits):
    png, npz = tmp_path / "history.png", tmp_path / "cnn.npz"
    out = digits_cnn.main(["--epochs", "2", "--seed", "1", "--quiet", "--device", "numpy:0", "--plot", str(png),
                           "--save", str(npz)])
    assert out["accuracy"] > 0.7, out["accuracy"]
    assert len(out["losses"]) == 2 and out["losses"][1] < out["losses"][0]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with np.load(npz, allow_pickle=False) as f:
        saved = {k: f[k] for k in f.files}
    assert {k: v.shape for k, v in saved.items()} == dict(digits_cnn.PARAM_SHAPES)
    _, x_test, _, y_test = digits
    probs = np.asarray(digits_cnn.predict(saved, x_test))
    ref = _forward64(saved, x_test)
    np.testing.assert_allclose(probs, ref, atol=2e-5)
    assert np.mean(ref.argmax(1) == y_test) == pytest.approx(out["accuracy"], abs=1.5 / len(y_test))


@pytest.mark.parametrize("argv, message", [
    (["--device", "nosuch"], "numpy:0"), (["--epochs", "0"], "--epochs"), (["--batch-size", "0"], "--batch-size"),
    (["--lr", "nan"], "--lr"), (["--save", "/no/such/folder/cnn.npz"], "does not exist")])
def test_bad_input_exits_nonzero(argv, message, capsys):
    with pytest.raises(SystemExit) as info:
        digits_cnn.main(argv)
    assert info.value.code not in (0, None)
    assert message in capsys.readouterr().err


def test_on_every_device(device, digits):
    """predict on every device, and a whole train step (value_and_grad + Adam) where compiling the gradient's
    kernels is cheap (jax, mlx): on opencl/webgpu the convolution and window gradient kernels are tested by
    tests/test_conv_kernels.py and tests/test_windows.py, and a cold PoCL compiles them for ~90 s here."""
    x_train, x_test, y_train, _ = digits
    params = digits_cnn.init_params(fa.random.key(5))
    opt = fa.optim.adam(1e-3)
    idx = np.arange(32, dtype=np.int32)
    ref = fa.get_device("numpy:0")

    def step_on(dev):
        p = fa.device_put(params, dev)
        step = digits_mlp.make_train_step(opt, dev, digits_cnn.loss_fn)
        new, _, loss = step(p, opt.init(p), fa.device_put(x_train, dev), fa.device_put(y_train, dev), idx)
        return {k: np.asarray(v) for k, v in new.items()}, float(loss)

    with fallback_mode("error"):   # convolutions, pools and their gradients are native on every backend
        probs = np.asarray(fa.jit(digits_cnn.predict, device=device)(params, x_test[:16]))
        got = step_on(device) if device.backend in ("numpy", "jax", "mlx") else None
    want_probs = np.asarray(fa.jit(digits_cnn.predict, device=ref)(params, x_test[:16]))
    np.testing.assert_allclose(probs, want_probs, rtol=1e-5, atol=1e-6)
    if got is not None:
        want, want_loss = step_on(ref)
        np.testing.assert_allclose(got[1], want_loss, rtol=1e-5)
        for k in digits_cnn.PARAM_NAMES:
            np.testing.assert_allclose(got[0][k], want[k], rtol=1e-4, atol=1e-6, err_msg=k)


def test_accuracy_claim_on_numpy():
    """The docstring's claim: >= 98% test accuracy with the default options (30 epochs), on numpy:0."""
    out = digits_cnn.main(["--device", "numpy:0", "--quiet"])
    assert out["accuracy"] >= 0.98, out["test_accuracies"]
