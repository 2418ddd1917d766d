"""``fnarray.example_libraries.optimizers`` and ``.stax`` against ``jax.example_libraries``: the same
states step by step for the same gradients, the same parameters for the same key (bitwise on numpy:0 and
jax:0, where the samplers are bitwise JAX's; within float tolerance elsewhere), the same outputs."""

from __future__ import annotations

import numpy as np
import pytest

import fnarray as fa
import fnarray.numpy as fnp
from fnarray.example_libraries import optimizers as fopt
from fnarray.example_libraries import stax as fstax
from helpers import require_backend

jax = pytest.importorskip("jax", reason="JAX is the oracle of these tests")
from jax.example_libraries import optimizers as jopt  # noqa: E402
from jax.example_libraries import stax as jstax  # noqa: E402

BITWISE = ("numpy:0", "jax:0")


def _params(rng):
    return {"w": rng.standard_normal((3, 4)).astype(np.float32),
            "b": (rng.standard_normal(4).astype(np.float32), rng.standard_normal(()).astype(np.float32))}


def _leaves(tree, mod):
    return [np.asarray(x) for x in mod.tree_util.tree_leaves(tree)]


OPTIMIZERS = [
    ("sgd", (0.1,), {}), ("sgd", ((fopt.exponential_decay, jopt.exponential_decay),), {}),
    ("momentum", (0.1, 0.9), {}), ("nesterov", (0.05, 0.8), {}), ("adagrad", (0.1,), {"momentum": 0.5}),
    ("rmsprop", (0.01,), {"gamma": 0.8}), ("rmsprop_momentum", (0.01,), {}), ("adam", (0.01,), {}),
    ("adamax", (0.02,), {"b1": 0.8}), ("sm3", (0.1,), {}),
]


@pytest.mark.parametrize("name,args,kwargs", OPTIMIZERS, ids=[f"{o[0]}{i}" for i, o in enumerate(OPTIMIZERS)])
def test_optimizer_matches_jax(device, name, args, kwargs):
    """Five steps on the same gradients: every leaf of every state agrees with JAX's."""
    if isinstance(args[0], tuple):
        fargs, jargs = (args[0][0](0.1, 3, 0.5),), (args[0][1](0.1, 3, 0.5),)
    else:
        fargs = jargs = args
    f_init, f_update, f_get = getattr(fopt, name)(*fargs, **kwargs)
    j_init, j_update, j_get = getattr(jopt, name)(*jargs, **kwargs)
    rng = np.random.default_rng(0)
    params = _params(rng)
    fs = f_init(fa.device_put(params, device))
    js = j_init(params)
    assert len(_leaves(fs, fa)) == len(_leaves(js, jax))
    for i in range(5):
        g = _params(rng)
        fs = f_update(i, fa.device_put(g, device), fs)
        js = j_update(i, g, js)
        for a, b in zip(_leaves(fs, fa), _leaves(js, jax)):
            np.testing.assert_allclose(a, b, rtol=2e-6, atol=1e-7, err_msg=f"{name} step {i} on {device}")
    for a, b in zip(_leaves(f_get(fs), fa), _leaves(j_get(js), jax)):
        np.testing.assert_allclose(a, b, rtol=2e-6, atol=1e-7)


def test_optimizer_under_jit_and_state_is_pytree():
    init, update, get_params = fopt.adam(1e-2)
    params = _params(np.random.default_rng(1))
    state = init(params)
    step = fa.jit(update)
    grads = _params(np.random.default_rng(2))
    eager = update(0, grads, state)
    jitted = step(0, grads, state)
    for a, b in zip(_leaves(eager, fa), _leaves(jitted, fa)):
        np.testing.assert_allclose(a, b, rtol=1e-6)
    assert isinstance(jitted, fopt.OptimizerState)
    with pytest.raises(TypeError, match="gradient tree"):
        update(0, {"w": grads["w"]}, state)


def test_pack_unpack_round_trip():
    init, update, get_params = fopt.momentum(0.1, 0.9)
    params = _params(np.random.default_rng(3))
    state = update(0, params, init(params))
    marked = fopt.unpack_optimizer_state(state)
    j_init, j_update, _ = jopt.momentum(0.1, 0.9)
    j_marked = jopt.unpack_optimizer_state(j_update(0, params, j_init(params)))
    assert sorted(marked) == sorted(j_marked)
    assert isinstance(marked["w"], fopt.JoinPoint) and len(marked["w"].subtree) == 2
    back = fopt.pack_optimizer_state(marked)
    for a, b in zip(_leaves(back, fa), _leaves(state, fa)):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(TypeError, match="JoinPoint"):
        fopt.pack_optimizer_state({"w": 1.0})


@pytest.mark.parametrize("make", ["constant", "exponential_decay", "inverse_time_decay", "staircase",
                                  "polynomial_decay", "piecewise_constant"])
def test_schedules_match_jax(make):
    def build(mod):
        return {"constant": lambda: mod.constant(0.3),
                "exponential_decay": lambda: mod.exponential_decay(0.3, 4, 0.5),
                "inverse_time_decay": lambda: mod.inverse_time_decay(0.3, 4, 0.5),
                "staircase": lambda: mod.inverse_time_decay(0.3, 4, 0.5, staircase=True),
                "polynomial_decay": lambda: mod.polynomial_decay(0.3, 6, 0.01, power=2.0),
                "piecewise_constant": lambda: mod.piecewise_constant([2, 5], [0.3, 0.1, 0.01])}[make]()
    fs, js = build(fopt), build(jopt)
    for i in range(9):
        np.testing.assert_allclose(np.asarray(fs(i)), np.asarray(js(i)), rtol=1e-6, err_msg=f"step {i}")
    with pytest.raises(TypeError, match="scalar or a schedule"):
        fopt.make_schedule([0.1, 0.2])
    with pytest.raises(ValueError, match="one value more"):
        fopt.piecewise_constant([1, 2], [0.1, 0.2])


def test_clip_grads_and_l2_norm(device):
    g = _params(np.random.default_rng(4))
    np.testing.assert_allclose(np.asarray(fopt.l2_norm(fa.device_put(g, device))), np.asarray(jopt.l2_norm(g)),
                               rtol=1e-6)
    for max_norm in (0.5, 100.0):
        got = fopt.clip_grads(fa.device_put(g, device), max_norm)
        for a, b in zip(_leaves(got, fa), _leaves(jopt.clip_grads(g, max_norm), jax)):
            np.testing.assert_allclose(a, b, rtol=1e-6)


# ----------------------------------------------------------------------------- stax

def _layers(mod):
    s = mod
    return {
        "Dense": (s.Dense(5), (2, 3)),
        "Conv": (s.Conv(4, (3, 3), (2, 1), "SAME"), (2, 6, 5, 3)),
        "ConvTranspose": (s.ConvTranspose(3, (3, 2), (2, 2), "VALID"), (1, 4, 3, 2)),
        "Conv1DTranspose": (s.Conv1DTranspose(3, (3,), (2,), "SAME"), (2, 5, 2)),
        "GeneralConv": (s.GeneralConv(("NCHW", "OIHW", "NCHW"), 4, (2, 3)), (2, 3, 5, 6)),
        "BatchNorm": (s.BatchNorm(axis=(0, 1)), (4, 3, 2)),
        "AvgPool": (s.AvgPool((2, 2), (1, 2), "SAME"), (2, 5, 5, 3)),
        "MaxPool": (s.MaxPool((2, 2), (2, 2)), (2, 5, 5, 3)),
        "SumPool": (s.SumPool((3, 1), spec="NCHW"), (2, 3, 5, 4)),
        "mlp": (s.serial(s.Dense(8), s.Relu, s.Dense(8), s.Tanh, s.Dense(4), s.LogSoftmax), (3, 6)),
        "cnn": (s.serial(s.Conv(4, (3, 3)), s.Elu, s.MaxPool((2, 2), (2, 2)), s.Flatten, s.Dense(3), s.Softmax),
                (2, 7, 7, 2)),
        "residual": (s.serial(s.FanOut(2), s.parallel(s.serial(s.Dense(4), s.Selu), s.Identity), s.FanInSum,
                              s.Gelu, s.Sigmoid), (3, 4)),
        "concat": (s.serial(s.FanOut(3), s.parallel(s.Softplus, s.LeakyRelu, s.Exp), s.FanInConcat(-1)), (2, 3)),
        "shape_dependent": (s.shape_dependent(lambda shape: s.Dense(shape[-1] * 2)), (2, 3)),
    }


# every layer on the reference and one kernel backend; the other backends run the composites (Dense, Conv, MaxPool,
# Flatten, FanOut/parallel/FanIn and every activation), their primitives being the parity suite's (docs/design.md's
# test tiers: every layer on jax:0 cost ~44 s of CI, its eager operations compiling one XLA program per shape)
_EVERY_LAYER_ON = ("numpy:0", "opencl:0")
_COMPOSITES = ("mlp", "cnn", "residual", "concat")


@pytest.mark.parametrize("layer", sorted(_layers(fstax)))
def test_stax_layer_matches_jax(device, layer):
    """The same parameters for the same key (bitwise where the samplers are), the same output shape and
    the same outputs: every layer on numpy:0 and opencl:0, the composites on every device."""
    if str(device) not in _EVERY_LAYER_ON and layer not in _COMPOSITES:
        pytest.skip(f"{layer} runs on {', '.join(_EVERY_LAYER_ON)}; on {device}: the composites and the parity suite")
    (f_init, f_apply), shape = _layers(fstax)[layer]
    (j_init, j_apply), _ = _layers(jstax)[layer]
    key = fa.device_put(fa.random.PRNGKey(7), device)
    f_shape, f_params = f_init(key, shape)
    j_shape, j_params = j_init(jax.random.PRNGKey(7), shape)
    f_params, j_params = (list(p) if layer == "residual" else p for p in (f_params, j_params))
    assert [int(d) for d in np.ravel(f_shape)] == [int(d) for d in np.ravel(j_shape)]
    fl, jl = _leaves(f_params, fa), _leaves(j_params, jax)
    assert [a.shape for a in fl] == [b.shape for b in jl]
    for a, b in zip(fl, jl):
        # truncated_normal (glorot_normal weights) goes through erf and a scaled uniform, which XLA
        # rounds differently (its erf polynomial, a fused multiply-add): a few ulp
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-9, err_msg=f"{layer} parameters on {device}")
    x = np.random.default_rng(5).standard_normal(shape).astype(np.float32)
    got = f_apply(f_params, fa.device_put(x, device))
    want = j_apply(j_params, x)
    for a, b in zip(_leaves(got, fa), _leaves(want, jax)):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-5, err_msg=f"{layer} outputs on {device}")


def test_dense_first_call_compiles_about_as_often_as_jax():
    """jax:0: a ``Dense`` layer's init and apply at a new shape compile at most twice as many XLA programs as
    JAX's own (issue 28: its initialisers' float bounds are their programs' weak inputs,
    ``eager_jit._WEAK_FLOAT_POLICIES``; 43 compiles against JAX's 13 before). Shapes no other test uses."""
    import jax.monitoring
    dev = require_backend("jax")[0]
    counts = []

    def listener(name, secs, **kwargs):
        if name == "/jax/core/compile/backend_compile_duration":
            counts.append(secs)
    x = np.random.default_rng(3).standard_normal((3, 11)).astype(np.float32)
    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        j_init, j_apply = jstax.Dense(7)
        _shape, j_params = j_init(jax.random.PRNGKey(5), x.shape)
        want = np.asarray(j_apply(j_params, x))
        n_jax = len(counts)
        f_init, f_apply = fstax.Dense(7)
        _shape, f_params = f_init(fa.device_put(fa.random.PRNGKey(5), dev), x.shape)
        got = np.asarray(f_apply(f_params, fa.device_put(x, dev)))
        n_fa = len(counts) - n_jax
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)
    assert n_fa <= 2 * max(n_jax, 7), (n_fa, n_jax)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("init", ["normal", "uniform", "ones"])
def test_normal_and_uniform_initialisers_bitwise(device, init):
    """Dense's bias (``normal()``) and the uniform initialisers draw JAX's numbers bit for bit on numpy:0
    and jax:0 (random.normal is XLA's erf_inv there), within float tolerance elsewhere."""
    b_init = {"normal": fa.nn.initializers.normal(), "uniform": fa.nn.initializers.uniform(),
              "ones": fa.nn.initializers.ones}[init]
    j_b_init = {"normal": jax.nn.initializers.normal(), "uniform": jax.nn.initializers.uniform(),
                "ones": jax.nn.initializers.ones}[init]
    _, (_, b) = fstax.Dense(4096, b_init=b_init)[0](fa.device_put(fa.random.PRNGKey(11), device), (1, 2))
    _, (_, jb) = jstax.Dense(4096, b_init=j_b_init)[0](jax.random.PRNGKey(11), (1, 2))
    if str(device) in BITWISE:
        np.testing.assert_array_equal(np.asarray(b), np.asarray(jb))
    else:
        np.testing.assert_allclose(np.asarray(b), np.asarray(jb), rtol=1e-5, atol=1e-9)


def test_dropout_matches_jax(device):
    f_init, f_apply = fstax.Dropout(0.7)
    j_init, j_apply = jstax.Dropout(0.7)
    x = np.random.default_rng(6).standard_normal((4, 5)).astype(np.float32)
    got = f_apply((), fa.device_put(x, device), rng=fa.device_put(fa.random.PRNGKey(3), device))
    np.testing.assert_allclose(np.asarray(got), np.asarray(j_apply((), x, rng=jax.random.PRNGKey(3))), rtol=1e-6)
    with pytest.raises(ValueError, match="PRNG key"):
        f_apply((), x)
    np.testing.assert_array_equal(np.asarray(fstax.Dropout(0.5, mode="test")[1]((), fnp.asarray(x), rng=1)), x)
