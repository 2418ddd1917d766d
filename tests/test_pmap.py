"""``fa.pmap`` (``jax.pmap``) on numpy:0, one device: a mapped size of 1 runs (its collectives over one device),
a larger one raises the error that says how to get devices. Against JAX's own ``jax.pmap`` on 8 forced XLA host
devices (collectives, ``in_axes``/``out_axes``, static arguments, pytrees, ``vmap`` inside, the ``pmean`` training
step): the pmap section of ``tests/spmd_8_devices.py``, run by ``tests/test_sharding.py`` in its subprocess."""

from __future__ import annotations

import numpy as np
import pytest

import fnarray as fa
import fnarray.numpy as fnp
from fnarray import lax

X = np.arange(6.0, dtype=np.float32).reshape(1, 2, 3)


def test_one_device_collectives_axes_and_pytrees():
    f = fa.pmap(lambda v: v * 2 + lax.psum(v, "i") + lax.pmax(v, "i") * lax.axis_index("i")
                + lax.all_gather(v, "i")[0] - lax.ppermute(v, "i", [(0, 0)]), "i")
    y = f(X)
    np.testing.assert_allclose(np.asarray(y), 3 * X)
    assert y.shape == (1, 2, 3) and y.dtype == np.float32
    assert str(y.device) == "numpy:0"                       # one device: a plain array (global on jax's 8)
    # in_axes over another axis and None (broadcast), a keyword argument (mapped over axis 0), out_axes a prefix
    g = fa.pmap(lambda a, b, c, *, d: {"s": lax.psum((a @ b).sum(), "i"), "m": a @ b + c["k"] + d}, "i",
                in_axes=(2, None, {"k": None}), out_axes={"s": None, "m": 1})
    a, b = X.reshape(2, 3, 1), np.ones((3, 4), np.float32)
    out = g(a, b, {"k": np.float32(1)}, d=np.full((1, 4), 2, np.float32))
    np.testing.assert_allclose(np.asarray(out["m"]), (a[:, :, 0] @ b + 3)[:, None, :])
    np.testing.assert_allclose(np.asarray(out["s"]), (a[:, :, 0] @ b).sum())
    assert out["s"].shape == ()


def test_training_step_with_grad_pmean_and_static_argument():
    def update(w, x, lr):
        loss = lambda w: fnp.mean((fnp.tanh(x @ w) - 1) ** 2)
        return w - lr * lax.pmean(fa.grad(loss)(w), "batch"), lax.pmean(loss(w), "batch")

    traces = []
    step = fa.pmap(lambda w, x, lr: (traces.append(1), update(w, x, lr))[1], "batch", static_broadcasted_argnums=2)
    w0, x = np.full((1, 3), 0.1, np.float32), X.reshape(1, 2, 3) / 10
    w, ref = w0, w0[0].astype(np.float64)
    for k in range(3):
        w, loss = step(w, x, 0.5)
        first = first if k else len(traces)   # shard_map over one device traces its body twice (check, vmap)
        t = np.tanh(x[0] @ ref)
        ref = ref - 0.5 * (x[0].T @ (2 * (t - 1) * (1 - t ** 2) / 2))
    np.testing.assert_allclose(np.asarray(w)[0], ref, rtol=1e-5)
    assert loss.shape == (1,) and len(traces) == first        # traced on the first call only, as jax.pmap
    step(w, x, 0.25)
    assert len(traces) == 2 * first                           # a new static value traces again
    # grad of a pmapped function, and vmap outside and inside
    np.testing.assert_allclose(np.asarray(fa.grad(lambda v: fa.pmap(lambda u: (u ** 2).sum())(v).sum())(X)), 2 * X)
    np.testing.assert_allclose(np.asarray(fa.vmap(fa.pmap(lambda u: fa.vmap(lambda r: r * 2)(u)))(X[None])),
                               2 * X[None])


def test_errors_say_what_was_given_and_what_to_do():
    with pytest.raises(ValueError, match=r"size 4, but the numpy backend has 1 device.*"
                                         r"xla_force_host_platform_device_count=4"):
        fa.pmap(lambda v: v)(np.ones((4, 2), np.float32))
    with pytest.raises(ValueError, match="devices= names 1 devices"):
        fa.pmap(lambda v: v, devices=fa.devices("numpy"))(np.ones((2, 2), np.float32))
    with pytest.raises(ValueError, match="inconsistent sizes"):
        fa.pmap(lambda a, b: a + b)(np.ones((1, 2)), np.ones((2, 2)))
    with pytest.raises(ValueError, match="pass axis_size"):
        fa.pmap(lambda a: a, in_axes=None)(np.ones(2))
    np.testing.assert_allclose(np.asarray(fa.pmap(lambda a: a + 1, in_axes=None, axis_size=1)(np.ones(2))),
                               np.full((1, 2), 2.0))
    with pytest.raises(ValueError, match="does not match the structure"):
        fa.pmap(lambda a: a, in_axes=({"x": 0},))(np.ones((1, 2)))
    with pytest.raises(ValueError, match="over axis 3, but it has rank 2"):
        fa.pmap(lambda a: a, in_axes=3)(np.ones((1, 2)))
    with pytest.raises(TypeError, match="not hashable"):
        fa.pmap(lambda a, k: a, static_broadcasted_argnums=1)(np.ones((1, 2)), [1])
    with pytest.raises(NameError):
        fa.pmap(lambda a: lax.psum(a, "j"), "i")(np.ones((1, 2)))
    with pytest.raises(TypeError):
        fa.pmap(3)
    with pytest.raises(ValueError, match="axis of size 0"):   # (was: "Mesh: devices of several backends ()")
        fa.pmap(lambda a: a)(np.ones((0, 2)))
    with pytest.raises(ValueError, match=r"in_axes holds 0.5 \(float\)"):   # (was: optree's "Cannot flatten")
        fa.pmap(lambda a: a, in_axes=(0.5,))(np.ones((1, 2)))
    with pytest.raises(TypeError, match="axis_name must be hashable"):
        fa.pmap(lambda a: a, axis_name=["i"])
