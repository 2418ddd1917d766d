"""A flax-free convolutional network written for the fifteenth session's new-user probe (docs/internals.md, "Open
work"), in the style of public "CNN in pure JAX" notebooks, run as written under JAX and, after
``jax_port.rewrite_imports`` (imports only), under fnarray: NHWC images and HWIO kernels through
``lax.conv_general_dilated`` (``dimension_numbers``, ``rhs_dilation``, ``feature_group_count``), max and average
pooling through ``lax.reduce_window`` (``"VALID"`` and ``"SAME"``), ``jax.nn.initializers`` (``he_normal``,
``glorot_uniform``, ``lecun_normal``), a jitted SGD step with ``static_argnums`` over a dict of parameters, then
the other convolution forms such code uses: strided ``"VALID"``, ``lax.conv`` in NCHW/OIHW with explicit padding,
``lax.conv_transpose``, ``lhs_dilation``, ``grad`` through max pooling, a padded window sum and ``lax.cumsum``. It
ported with its imports changed alone before any fix.
"""

from __future__ import annotations

import pytest

from jax_port import assert_port_matches_on, rewrite_imports

pytest.importorskip("jax", reason="JAX runs the program as written")

CNN = '''
import numpy as np
import jax
import jax.numpy as jnp
from jax import lax, random
from functools import partial

# flax-free CNN: NHWC images, HWIO kernels, as in public "CNN in pure JAX" notebooks
def init_params(key):
    k1, k2, k3, k4 = random.split(key, 4)
    he = jax.nn.initializers.he_normal()
    return {
        "conv1": {"w": he(k1, (3, 3, 1, 8), jnp.float32), "b": jnp.zeros(8)},
        "conv2": {"w": he(k2, (3, 3, 8, 16), jnp.float32), "b": jnp.zeros(16)},
        "dense": {"w": jax.nn.initializers.glorot_uniform()(k3, (4 * 4 * 16, 10)), "b": jnp.zeros(10)},
        "dw": {"w": jax.nn.initializers.lecun_normal()(k4, (3, 3, 1, 16)), "b": jnp.zeros(16)},
    }

def conv(x, p, stride=1, padding="SAME", groups=1, dilation=1):
    y = lax.conv_general_dilated(x, p["w"], window_strides=(stride, stride), padding=padding,
                                 rhs_dilation=(dilation, dilation),
                                 dimension_numbers=("NHWC", "HWIO", "NHWC"),
                                 feature_group_count=groups)
    return y + p["b"]

def max_pool(x, k=2):
    return lax.reduce_window(x, -jnp.inf, lax.max, (1, k, k, 1), (1, k, k, 1), "VALID")

def avg_pool(x, k=2):
    s = lax.reduce_window(x, 0.0, lax.add, (1, k, k, 1), (1, k, k, 1), "SAME")
    return s / (k * k)

def model(params, x):
    x = jax.nn.relu(conv(x, params["conv1"]))
    x = max_pool(x)                                   # 16 -> 8
    x = jax.nn.relu(conv(x, params["conv2"], dilation=1))
    x = avg_pool(x)                                   # 8 -> 4
    x = x.reshape((x.shape[0], -1))
    return x @ params["dense"]["w"] + params["dense"]["b"]

def loss_fn(params, x, y):
    logits = model(params, x)
    onehot = jax.nn.one_hot(y, 10)
    return -jnp.mean(jnp.sum(jax.nn.log_softmax(logits) * onehot, axis=-1))

@jax.jit
def accuracy(params, x, y):
    return jnp.mean(jnp.argmax(model(params, x), axis=-1) == y)

@partial(jax.jit, static_argnums=3)
def update(params, x, y, lr):
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    return jax.tree_util.tree_map(lambda p, g: p - lr * g, params, grads), loss

rng = np.random.default_rng(0)
x = rng.normal(size=(32, 16, 16, 1)).astype(np.float32)
y = (x[:, :8, :, 0].mean(axis=(1, 2)) > x[:, 8:, :, 0].mean(axis=(1, 2))).astype(np.int32) + 2 * (x[:, :, :8, 0].mean(axis=(1, 2)) > 0)
params = init_params(random.PRNGKey(0))
print("logits0", np.round(np.asarray(model(params, jnp.asarray(x[:2])))[:, :4], 4))
for step in range(5):
    params, loss = update(params, jnp.asarray(x), jnp.asarray(y), 0.05)
    print("step", step, "loss %.5f" % float(loss))
print("acc %.4f" % float(accuracy(params, x, y)))

# other conv forms public code uses: depthwise (feature_group_count), strided VALID, dilated, NCHW/OIHW, explicit padding
dw = conv(jnp.asarray(np.repeat(x[:2], 16, axis=-1)), params["dw"], groups=16)
print("depthwise", dw.shape, "%.5f" % float(jnp.sum(dw ** 2)))
sv = lax.conv_general_dilated(jnp.asarray(x[:2]), params["conv1"]["w"], (2, 2), "VALID", dimension_numbers=("NHWC", "HWIO", "NHWC"))
print("strided", sv.shape, "%.5f" % float(jnp.sum(sv)))
dl = conv(jnp.asarray(x[:2]), params["conv1"], dilation=2)
print("dilated", dl.shape, "%.5f" % float(jnp.sum(jnp.abs(dl))))
xn = jnp.transpose(jnp.asarray(x[:2]), (0, 3, 1, 2))
wn = jnp.transpose(params["conv1"]["w"], (3, 2, 0, 1))
nc = lax.conv(xn, wn, (1, 1), [(1, 2), (0, 1)])
print("nchw", nc.shape, "%.5f" % float(jnp.sum(nc)))
tr = lax.conv_transpose(jnp.asarray(x[:2]), params["conv1"]["w"], (2, 2), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
print("transpose", tr.shape, "%.5f" % float(jnp.sum(tr)))
lhs_d = lax.conv_general_dilated(jnp.asarray(x[:2]), params["conv1"]["w"], (1, 1), ((1, 1), (1, 1)), lhs_dilation=(2, 2), dimension_numbers=("NHWC", "HWIO", "NHWC"))
print("lhs_dilated", lhs_d.shape, "%.5f" % float(jnp.sum(lhs_d)))
g = jax.grad(lambda x: jnp.sum(max_pool(x) ** 2))(jnp.asarray(x[:1]))
print("maxpool grad", "%.5f" % float(jnp.sum(g)), int(jnp.sum(g != 0)))
cmx = lax.reduce_window(jnp.asarray(x[:1]), 0.0, lax.add, (1, 3, 3, 1), (1, 1, 1, 1), ((0, 0), (1, 1), (1, 1), (0, 0)))
print("window sum", cmx.shape, "%.5f" % float(jnp.sum(cmx)))
print("cumsum window", "%.5f" % float(jnp.sum(lax.cumsum(jnp.asarray(x[:1]), axis=1))))
pn = jax.tree_util.tree_reduce(lambda a, b: a + b, jax.tree_util.tree_map(lambda p: jnp.sum(p ** 2), params))
print("param norm %.5f" % float(pn), jax.tree_util.tree_structure(params).num_leaves)
'''


def test_rewrite_changes_imports_only():
    changed = [(a, b) for a, b in zip(CNN.splitlines(), rewrite_imports(CNN).splitlines()) if a != b]
    assert changed and all(a.lstrip().startswith(("import ", "from ")) for a, _ in changed)


def test_cnn_ports_with_imports_only():
    """The program prints JAX's numbers (logits, five losses, accuracy, every convolution and pooling form's
    shape and sum, the max-pool gradient's sum and support) on numpy:0. It matched on opencl:0 too (rtol 2e-3), but
    took 265 s there at load 10 (PoCL compiling each new kernel), so the whole program runs on the reference only;
    every convolution and window reduction it uses runs on every backend in the parity suite."""
    assert_port_matches_on(CNN, "numpy:0")


_GENERAL_WINDOWS = [  # (computation name, init, window, strides, padding, base_dilation, window_dilation)
    ("mul", 1.0, (1, 2, 2, 1), (1, 2, 2, 1), "VALID", None, None),
    ("lambda_mul", 1.0, (1, 3, 3, 1), (1, 1, 1, 1), "SAME", None, None),
    ("lambda_mul", 2.0, (1, 3, 2, 1), (1, 2, 1, 1), ((0, 0), (1, 2), (0, 1), (0, 0)), None, None),
    ("logaddexp", -float("inf"), (1, 2, 3, 1), (1, 1, 2, 1), "SAME", None, (1, 2, 1, 1)),
    ("mul", 3.0, (1, 2, 2, 1), (1, 1, 1, 1), ((0, 0), (-1, 1), (1, 0), (0, 0)), (1, 2, 1, 1), (1, 1, 2, 1)),
    ("lambda_mul", 1.5, (1, 3, 3, 1), (1, 1, 1, 1), ((0, 0), (5, 5), (2, 2), (0, 0)), (1, 3, 1, 1), None),
]


def _computation(name, lax, np_namespace):
    return {"mul": lax.mul, "lambda_mul": lambda a, b: a * b, "logaddexp": np_namespace.logaddexp}[name]


@pytest.mark.parametrize("case", _GENERAL_WINDOWS, ids=lambda c: f"{c[0]}-{c[4] if isinstance(c[4], str) else 'pads'}")
def test_reduce_window_with_any_computation_matches_jax(device, case):
    """``lax.reduce_window`` with a computation other than add/max/min (``lax.mul``, a lambda, ``logaddexp``; as
    flax's ``pooling.pool`` passes its reducer), which raised ``TypeError`` before this probe: JAX's values on every
    device with padding (which adds nothing, as in JAX), strides, base and window dilation and an ``init_value``
    other than the identity; its gradient passes ``check_grads`` (JAX cannot differentiate this form)."""
    import jax
    import numpy as np

    import fnarray as fa
    import fnarray.numpy as fnp
    from fnarray import lax
    from fnarray.test_util import check_grads

    name, init, wd, ws, pad, bd, wdl = case
    x = np.random.default_rng(0).uniform(0.5, 1.5, size=(2, 7, 6, 3)).astype(np.float32)
    want = jax.lax.reduce_window(x, init, _computation(name, jax.lax, jax.numpy), wd, ws, pad, base_dilation=bd,
                                 window_dilation=wdl)
    with fa.default_device(device):
        f = lambda v: lax.reduce_window(v, init, _computation(name, lax, fnp), wd, ws, pad, base_dilation=bd,
                                        window_dilation=wdl)
        got = f(fnp.asarray(x))
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=2e-6, atol=1e-6)
        np.testing.assert_allclose(np.asarray(fa.jit(f)(fnp.asarray(x))), np.asarray(want), rtol=2e-6, atol=1e-6)
        if str(device) == "numpy:0":
            check_grads(f, (fnp.asarray(x[:1, :4, :4, :1]),), 1, modes=("rev",))


def test_reduce_window_general_bad_input_and_edges():
    """A computation that is not elementwise or changes the dtype raises ``TypeError`` naming it and what it
    returned; a non-callable one ``TypeError``; an array ``init_value`` ``ShapeError``; a window of more than 1024
    taps ``ValueError`` (one program step per tap: a 40x40 window would trace 1600); an empty operand gives
    an empty result as JAX; integer products are exact; ``vmap`` of the composite equals JAX's."""
    import jax
    import numpy as np

    import fnarray as fa
    import fnarray.numpy as fnp
    from fnarray import lax
    from fnarray.core.errors import ShapeError

    x = fnp.ones((2, 6, 6, 3))
    win = ((1, 2, 2, 1), (1, 2, 2, 1), "VALID")
    with pytest.raises(TypeError, match=r"reduce_window needs a callable as computation \(a function of two scalars.*got str"):
        lax.reduce_window(x, 1.0, "mul", *win)
    with pytest.raises(TypeError, match=r"elementwise\), got float32\[\] from two float32\[2, 3, 3, 3\]"):
        lax.reduce_window(x, 1.0, lambda a, b: fnp.sum(a * b), *win)
    with pytest.raises(TypeError, match=r"dtype float32 per pair .*got bool\[2, 3, 3, 3\]"):
        lax.reduce_window(x, 1.0, lambda a, b: a > b, *win)
    with pytest.raises(ShapeError, match=r"init_value must be a scalar, got shape \(2,\)"):
        lax.reduce_window(x, fnp.ones(2), lax.mul, *win)
    with pytest.raises(ValueError, match=r"\(1, 40, 40, 1\) has 1600 taps \(at most 1024\)"):
        lax.reduce_window(fnp.ones((1, 40, 40, 1)), 1.0, lax.mul, (1, 40, 40, 1), (1, 1, 1, 1), "VALID")
    empty = np.ones((0, 4), np.float32)
    assert lax.reduce_window(empty, 1.0, lax.mul, (1, 2), (1, 1), "VALID").shape == \
        jax.lax.reduce_window(empty, 1.0, jax.lax.mul, (1, 2), (1, 1), "VALID").shape
    xi = np.random.default_rng(1).integers(1, 4, size=(6, 5)).astype(np.int32)
    np.testing.assert_array_equal(np.asarray(lax.reduce_window(xi, 1, lax.mul, (2, 2), (1, 1), "VALID")),
                                  np.asarray(jax.lax.reduce_window(xi, 1, jax.lax.mul, (2, 2), (1, 1), "VALID")))
    rows = np.random.default_rng(2).uniform(size=(4, 7)).astype(np.float32)
    want = jax.vmap(lambda v: jax.lax.reduce_window(v, 1.0, jax.lax.mul, (3,), (2,), "SAME"))(rows)
    got = fa.vmap(lambda v: lax.reduce_window(v, 1.0, lax.mul, (3,), (2,), "SAME"))(fnp.asarray(rows))
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-6)
