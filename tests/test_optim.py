"""fnarray.optim against hand-written NumPy float64 optimizers, and convergence on least squares."""

from __future__ import annotations

import math

import numpy as np
import pytest
from helpers import check_traced

import fnarray as fa
import fnarray.numpy as fnp
from fnarray import lax, optim, tree_util


# ----------------------------------------------------------------------------- NumPy references


class NpSGD:
    def __init__(self, lr, momentum=None, nesterov=False):
        self.lr, self.m, self.nesterov, self.t = lr, momentum, nesterov, None

    def step(self, x, g, k):
        lr = self.lr(k) if callable(self.lr) else self.lr
        if self.m is None:
            return x - lr * g
        self.t = g if self.t is None else g + self.m * self.t
        d = g + self.m * self.t if self.nesterov else self.t
        return x - lr * d


class NpAdam:
    def __init__(self, lr, b1=0.9, b2=0.999, eps=1e-8, wd=0.0):
        self.lr, self.b1, self.b2, self.eps, self.wd = lr, b1, b2, eps, wd
        self.m = self.v = 0.0

    def step(self, x, g, k):
        t = k + 1
        self.m = self.b1 * self.m + (1 - self.b1) * g
        self.v = self.b2 * self.v + (1 - self.b2) * g * g
        mh = self.m / (1 - self.b1 ** t)
        vh = self.v / (1 - self.b2 ** t)
        return x - self.lr * (mh / (np.sqrt(vh) + self.eps) + self.wd * x)


class NpRMSProp:
    def __init__(self, lr, decay=0.9, eps=1e-8, centered=False):
        self.lr, self.decay, self.eps, self.centered = lr, decay, eps, centered
        self.nu = self.mu = 0.0

    def step(self, x, g, k):
        self.nu = self.decay * self.nu + (1 - self.decay) * g * g
        if self.centered:
            self.mu = self.decay * self.mu + (1 - self.decay) * g
            return x - self.lr * g / np.sqrt(self.nu - self.mu ** 2 + self.eps)
        return x - self.lr * g / np.sqrt(self.nu + self.eps)


# The quadratic f(x) = sum(a x²/2 + b x), gradient a x + b, computed by hand.
QA = np.array([1.0, 3.0, 0.5, 10.0])
QB = np.array([0.5, -1.0, 2.0, 0.0])
X0 = np.array([1.0, -2.0, 0.3, 0.7])


def _quad_grad_np(x):
    return QA * x + QB


def _quad_grad_fa(x):
    return x * fnp.asarray(QA.astype(np.float32)) + fnp.asarray(QB.astype(np.float32))


CASES = {
    "sgd": (lambda: optim.sgd(0.1), lambda: NpSGD(0.1)),
    "sgd_momentum": (lambda: optim.sgd(0.05, momentum=0.9), lambda: NpSGD(0.05, 0.9)),
    "sgd_nesterov": (lambda: optim.sgd(0.05, momentum=0.9, nesterov=True), lambda: NpSGD(0.05, 0.9, True)),
    "momentum": (lambda: optim.momentum(0.05, beta=0.8), lambda: NpSGD(0.05, 0.8)),
    "adam": (lambda: optim.adam(0.1), lambda: NpAdam(0.1)),
    "adam_betas": (lambda: optim.adam(0.05, b1=0.5, b2=0.9, eps=1e-3), lambda: NpAdam(0.05, 0.5, 0.9, 1e-3)),
    "adamw": (lambda: optim.adamw(0.1, weight_decay=0.1), lambda: NpAdam(0.1, wd=0.1)),
    "rmsprop": (lambda: optim.rmsprop(0.01), lambda: NpRMSProp(0.01)),
    "rmsprop_centered": (lambda: optim.rmsprop(0.01, decay=0.8, centered=True),
                         lambda: NpRMSProp(0.01, 0.8, centered=True)),
    "sgd_schedule": (lambda: optim.sgd(optim.exponential_decay(0.2, 1, 0.5)),
                     lambda: NpSGD(lambda k: 0.2 * 0.5 ** k)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_few_steps_against_numpy(name):
    make, make_ref = CASES[name]
    opt, ref = make(), make_ref()
    x = fnp.asarray(X0.astype(np.float32))
    state = opt.init(x)
    xr = X0.copy()
    for k in range(6):
        updates, state = opt.update(_quad_grad_fa(x), state, x)
        x = optim.apply_updates(x, updates)
        xr = ref.step(xr, _quad_grad_np(xr), k)
        np.testing.assert_allclose(np.asarray(x, np.float64), xr, rtol=2e-5, atol=2e-6, err_msg=f"step {k}")
    assert x.dtype == np.float32


@pytest.mark.parametrize("name", ["adam", "sgd_momentum", "rmsprop_centered", "sgd_schedule"])
def test_jitted_step_equals_eager(name):
    opt = CASES[name][0]()

    def step(x, state):
        updates, state = opt.update(_quad_grad_fa(x), state, x)
        return optim.apply_updates(x, updates), state

    x = fnp.asarray(X0.astype(np.float32))
    s = opt.init(x)
    check_traced(step, x, s)
    jstep = fa.jit(step)
    xe, se, xj, sj = x, s, x, s
    for _ in range(4):
        xe, se = step(xe, se)
        xj, sj = jstep(xj, sj)
    np.testing.assert_allclose(np.asarray(xj), np.asarray(xe), rtol=1e-6, atol=1e-7)
    le, lj = tree_util.tree_leaves(se), tree_util.tree_leaves(sj)
    assert len(le) == len(lj)
    for a, b in zip(le, lj, strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-6, atol=1e-7)


def test_state_is_a_pytree_of_arrays_with_a_count():
    opt = optim.adam(1e-3)
    params = {"w": fnp.zeros((3, 2)), "b": (fnp.zeros((2,)), fnp.ones(()))}
    state = opt.init(params)
    adam_state = state[0]
    assert isinstance(adam_state, optim.ScaleByAdamState)
    assert adam_state.count.dtype == np.int32 and int(np.asarray(adam_state.count)) == 0
    assert tree_util.tree_structure(adam_state.mu) == tree_util.tree_structure(params)
    for leaf in tree_util.tree_leaves(state):
        assert isinstance(leaf, fa.Array)
    grads = tree_util.tree_map(lambda p: fnp.ones_like(p), params)
    _, state = opt.update(grads, state)
    assert int(np.asarray(state[0].count)) == 1


def test_pytree_params_and_dtypes():
    params = {"w": fnp.asarray(np.array([[1.0, 2.0]], np.float16)), "b": fnp.asarray(np.array([0.5], np.float32))}
    grads = {"w": fnp.asarray(np.array([[0.5, -1.0]], np.float16)), "b": fnp.asarray(np.array([2.0], np.float32))}
    opt = optim.sgd(0.1, momentum=0.5)
    state = opt.init(params)
    updates, state = opt.update(grads, state)
    new = optim.apply_updates(params, updates)
    assert new["w"].dtype == np.float16 and new["b"].dtype == np.float32
    np.testing.assert_allclose(np.asarray(new["w"], np.float64), [[0.95, 2.1]], rtol=1e-3)
    np.testing.assert_allclose(np.asarray(new["b"]), [0.3], rtol=1e-6)


def test_errors():
    with pytest.raises(ValueError, match="params"):
        opt = optim.adamw(0.1)
        x = fnp.zeros((2,))
        opt.update(x, opt.init(x))
    with pytest.raises(TypeError, match="learning_rate"):
        optim.adam("fast")
    with pytest.raises(TypeError, match="GradientTransformation"):
        optim.chain(optim.scale(1.0), lambda g: g)


def test_weight_decay_mask():
    params = {"w": fnp.ones((2,)), "b": fnp.ones((2,))}
    grads = tree_util.tree_map(fnp.zeros_like, params)
    opt = optim.add_decayed_weights(0.5, mask={"w": True, "b": False})
    updates, _ = opt.update(grads, opt.init(params), params)
    np.testing.assert_array_equal(np.asarray(updates["w"]), [0.5, 0.5])
    np.testing.assert_array_equal(np.asarray(updates["b"]), [0.0, 0.0])


def test_clip_by_global_norm():
    g = {"a": fnp.asarray(np.array([3.0, 0.0], np.float32)), "b": fnp.asarray(np.array([4.0], np.float32))}
    np.testing.assert_allclose(float(np.asarray(optim.global_norm(g))), 5.0, rtol=1e-6)
    opt = optim.clip_by_global_norm(1.0)
    out, _ = opt.update(g, opt.init(g))
    np.testing.assert_allclose(np.asarray(out["a"]), [0.6, 0.0], rtol=1e-6)
    np.testing.assert_allclose(np.asarray(out["b"]), [0.8], rtol=1e-6)
    opt = optim.clip_by_global_norm(10.0)
    out, _ = opt.update(g, opt.init(g))
    np.testing.assert_allclose(np.asarray(out["b"]), [4.0], rtol=1e-6)


def test_global_norm_of_complex_leaves_is_the_modulus():
    # Regression: the norm summed x * x, so 1j-valued leaves gave sqrt(-2) = NaN (optax sums |x|²).
    z = np.array([3 + 4j, 1j], np.complex64)
    g = {"z": fnp.asarray(z), "r": fnp.asarray(np.array([2.0], np.float32))}
    want = math.sqrt(float(np.sum(np.abs(z.astype(np.complex128)) ** 2)) + 4.0)
    norm = optim.global_norm(g)
    assert norm.dtype == np.float32
    np.testing.assert_allclose(float(np.asarray(norm)), want, rtol=1e-6)
    out, _ = optim.clip_by_global_norm(1.0).update(g, optim.EmptyState())
    np.testing.assert_allclose(np.asarray(out["z"]), z / want, rtol=1e-6)


@pytest.mark.parametrize("step", [0, 1, 5, 10, 25])
def test_schedules_against_formulas(step):
    c = fnp.asarray(np.int32(step))
    lin = optim.linear_schedule(1.0, 0.1, transition_steps=10, transition_begin=2)
    frac = min(max(step - 2, 0), 10) / 10
    assert abs(float(np.asarray(lin(c))) - (1.0 + (0.1 - 1.0) * frac)) < 1e-6
    exp = optim.exponential_decay(0.5, transition_steps=4, decay_rate=0.1)
    assert abs(float(np.asarray(exp(c))) - 0.5 * 0.1 ** (step / 4)) < 1e-6 * max(1, 0.5 * 0.1 ** (step / 4)) + 1e-9
    stair = optim.exponential_decay(0.5, transition_steps=4, decay_rate=0.1, staircase=True, end_value=0.004)
    assert abs(float(np.asarray(stair(c))) - max(0.5 * 0.1 ** (step // 4), 0.004)) < 1e-7
    cos = optim.cosine_decay_schedule(2.0, decay_steps=20, alpha=0.1)
    t = min(step, 20) / 20
    assert abs(float(np.asarray(cos(c))) - 2.0 * (0.9 * 0.5 * (1 + math.cos(math.pi * t)) + 0.1)) < 1e-5
    assert float(np.asarray(optim.constant_schedule(0.3)(c))) == pytest.approx(0.3)



def _piecewise_ref(init, table, step):
    v = init
    for b, s in sorted(table.items()):
        v = v * s if step >= b else v
    return v


def _cosine_ref(init, steps, alpha, step, exponent=1.0):
    t = min(step, steps) / steps
    return init * ((1 - alpha) * (0.5 * (1 + math.cos(math.pi * t))) ** exponent + alpha)


@pytest.mark.parametrize("step", [0, 1, 3, 4, 5, 10, 11, 25, 400])
def test_optax_schedules_against_formulas(step):
    """The optax schedules against their definitions written as Python loops (optax's docs)."""
    c = fnp.asarray(np.int32(step))
    table = {4: 0.5, 10: 0.1, 11: 2.0}
    cases = [
        (optim.piecewise_constant_schedule(0.3, table), _piecewise_ref(0.3, table, step)),
        (optim.piecewise_constant_schedule(0.3), 0.3),
        (optim.polynomial_schedule(1.0, 0.01, 2.5, 20, transition_begin=3),
         (1.0 - 0.01) * (1 - min(max(step - 3, 0), 20) / 20) ** 2.5 + 0.01),
        (optim.warmup_cosine_decay_schedule(0.0, 1.0, 5, 50, end_value=0.1, exponent=2.0),
         step / 5 if step < 5 else _cosine_ref(1.0, 45, 0.1, step - 5, 2.0)),
        (optim.warmup_exponential_decay_schedule(0.1, 1.0, 4, 3, 0.5, end_value=0.05),
         0.1 + 0.9 * step / 4 if step < 4 else max(0.5 ** ((step - 4) / 3), 0.05)),
        (optim.join_schedules([optim.constant_schedule(2.0), optim.linear_schedule(1.0, 0.0, 10)], [5]),
         2.0 if step < 5 else 1.0 - min(step - 5, 10) / 10),
    ]
    for i, (f, want) in enumerate(cases):
        got = f(c)
        assert got.dtype == np.float32, i
        assert float(np.asarray(got)) == pytest.approx(want, rel=1e-5, abs=1e-7), (i, step)


def test_optax_schedules_jit_vector_and_errors():
    steps = np.arange(0, 30, dtype=np.int32)
    f = optim.warmup_cosine_decay_schedule(0.0, 1.0, 5, 20)
    got = np.asarray(fa.jit(f)(fnp.asarray(steps)))
    want = [s / 5 if s < 5 else _cosine_ref(1.0, 15, 0.0, s - 5) for s in steps]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)
    pw = optim.piecewise_constant_schedule(1.0, {3: 0.1})
    np.testing.assert_allclose(np.asarray(fa.jit(pw)(fnp.asarray(steps[:5]))), [1, 1, 1, 0.1, 0.1], rtol=1e-6)
    with pytest.raises(ValueError, match="non-negative"):
        optim.piecewise_constant_schedule(1.0, {3: -1.0})
    with pytest.raises(ValueError, match="one schedule more"):
        optim.join_schedules([optim.constant_schedule(1.0)], [3])
    # a schedule as an optimizer's learning rate: sgd steps by -lr(count) * g
    opt = optim.sgd(optim.piecewise_constant_schedule(1.0, {1: 0.5}))
    p = {"w": fnp.asarray(np.float32(0.0))}
    state = opt.init(p)
    for want in (-1.0, -1.5):
        u, state = opt.update({"w": fnp.asarray(np.float32(1.0))}, state, p)
        p = optim.apply_updates(p, u)
        assert float(np.asarray(p["w"])) == pytest.approx(want)

# ----------------------------------------------------------------------------- convergence


def _least_squares_problem():
    rng = np.random.default_rng(0)
    A = rng.normal(size=(64, 5))
    w_true = rng.normal(size=5)
    y = A @ w_true + 0.01 * rng.normal(size=64)
    w_star = np.linalg.lstsq(A, y, rcond=None)[0]
    return A.astype(np.float32), y.astype(np.float32), w_star


def _matvec(A, w):
    return lax.dot_general(A, w, (((1,), (0,)), ((), ())))


@pytest.mark.parametrize("opt", [optim.adam(0.05), optim.sgd(0.02, momentum=0.9),
                                 optim.rmsprop(optim.exponential_decay(0.02, 100, 0.5))],
                         ids=["adam", "momentum", "rmsprop"])
def test_least_squares_converges_with_hand_gradients(opt):
    A, y, w_star = _least_squares_problem()
    An, yn = fnp.asarray(A), fnp.asarray(y)
    At = fnp.asarray(np.ascontiguousarray(A.T))

    @fa.jit
    def step(w, state):
        r = _matvec(An, w) - yn
        g = _matvec(At, r) * (2.0 / A.shape[0])        # gradient of mean((A w - y)²), by hand
        updates, state = opt.update(g, state, w)
        return optim.apply_updates(w, updates), state

    w = fnp.zeros((5,))
    state = opt.init(w)
    for _ in range(400):
        w, state = step(w, state)
    np.testing.assert_allclose(np.asarray(w, np.float64), w_star, atol=2e-3)


def test_least_squares_converges_with_fa_grad():
    grad = fa.grad
    A, y, w_star = _least_squares_problem()
    An, yn = fnp.asarray(A), fnp.asarray(y)

    def loss(params):
        r = _matvec(An, params["w"]) + params["b"] - yn
        return lax.reduce_sum(r * r, (0,)) / float(A.shape[0])

    opt = optim.adamw(0.05, weight_decay=0.0)

    @fa.jit
    def step(params, state):
        g = grad(loss)(params)
        updates, state = opt.update(g, state, params)
        return optim.apply_updates(params, updates), state

    params = {"w": fnp.zeros((5,)), "b": fnp.zeros(())}
    state = opt.init(params)
    for _ in range(400):
        params, state = step(params, state)
    Ab = np.hstack([A.astype(np.float64), np.ones((A.shape[0], 1))])
    wb = np.linalg.lstsq(Ab, y.astype(np.float64), rcond=None)[0]
    np.testing.assert_allclose(np.asarray(params["w"], np.float64), wb[:5], atol=3e-3)
    assert abs(float(np.asarray(params["b"])) - wb[5]) < 3e-3
    assert np.allclose(wb[:5], w_star, atol=0.05)
