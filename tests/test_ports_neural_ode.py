"""A neural ODE written for the fourteenth session's new-user probe (docs/internals.md, "Open work"), in the
style of the public "Neural ODEs in Jax" demos (the torchdiffeq spiral of Chen et al. 2018 ported to JAX with
``stax`` and ``jax.experimental.ode.odeint``), run as written under JAX and, after ``jax_port.rewrite_imports``
(imports only), under fnarray: spiral data from ``odeint`` of ``y' = y**3 @ A``, an MLP vector field from
``jax.example_libraries.stax`` trained on random windows of the trajectory with ``optimizers.adam`` through
``grad`` of ``odeint`` (its adjoint), the loss's gradient with respect to a value the vector field closes over,
a pytree state, ``jit``/``vmap`` of ``odeint`` and ``jax.flatten_util.ravel_pytree``. Before the probe it failed
at ``from jax.experimental.ode import odeint`` (no such module); with ``fnarray.experimental.ode`` it ports with
its imports changed alone.
"""

from __future__ import annotations

import numpy as np
import pytest

from jax_port import assert_port_matches_on, rewrite_imports

jax = pytest.importorskip("jax", reason="JAX runs the program as written")

NEURAL_ODE = '''
import numpy as np
import jax
import jax.numpy as jnp
from jax import random, grad, jit, vmap
from jax.experimental.ode import odeint
from jax.example_libraries import stax, optimizers
from jax.example_libraries.stax import Dense, Tanh
from jax.flatten_util import ravel_pytree

data_size, batch_time, batch_size = 40, 6, 8
true_y0 = jnp.array([2.0, 0.0])
t = jnp.linspace(0.0, 5.0, data_size)
true_A = jnp.array([[-0.1, 2.0], [-2.0, -0.1]])

def true_dynamics(y, t):
  return jnp.dot(y ** 3, true_A)

true_y = odeint(true_dynamics, true_y0, t, rtol=1e-6, atol=1e-6)
print("true_y", np.round(np.asarray(true_y[::8]), 4).tolist())

def get_batch(key):
  s = random.choice(key, data_size - batch_time, (batch_size,), replace=False)
  batch_y0 = true_y[s]
  batch_t = t[:batch_time]
  batch_y = jnp.stack([true_y[s + i] for i in range(batch_time)], axis=0)
  return batch_y0, batch_t, batch_y

init_fun, apply_fun = stax.serial(Dense(16), Tanh, Dense(2))
_, params = init_fun(random.PRNGKey(0), (-1, 2))
flat, unravel = ravel_pytree(params)
print("n params", flat.shape[0])

def dynamics(y, t, params):
  return apply_fun(params, y ** 3)

def loss(params, batch_y0, batch_t, batch_y):
  pred = odeint(dynamics, batch_y0, batch_t, params, rtol=1e-5, atol=1e-5)
  return jnp.mean(jnp.abs(pred - batch_y))

opt_init, opt_update, get_params = optimizers.adam(1e-2)
opt_state = opt_init(params)

@jit
def update(i, opt_state, batch):
  p = get_params(opt_state)
  value, g = jax.value_and_grad(loss)(p, *batch)
  return opt_update(i, g, opt_state), value

key = random.PRNGKey(1)
losses = []
for i in range(6):
  key, sub = random.split(key)
  opt_state, value = update(i, opt_state, get_batch(sub))
  losses.append(float(value))
print("losses", np.round(np.array(losses), 5).tolist())
params = get_params(opt_state)
full = loss(params, true_y0, t, true_y)
print("full trajectory loss", round(float(full), 5))

# the gradient with respect to a value the vector field closes over (JAX converts the closure)
def damped(scale):
  f = lambda y, t: -scale * y + jnp.sin(t)
  return jnp.sum(odeint(f, jnp.ones(3), jnp.linspace(0.0, 2.0, 4)) ** 2)
print("closure grad", round(float(grad(damped)(0.5)), 5))

# a pytree state (position and velocity of an oscillator) and gradients of its energy w.r.t. args and y0
def oscillator(state, t, k, c):
  x, v = state["x"], state["v"]
  return {"x": v, "v": -k * x - c * v}
ts = jnp.linspace(0.0, 3.0, 7)
sol = odeint(oscillator, {"x": jnp.array([1.0, 0.5]), "v": jnp.zeros(2)}, ts, 4.0, 0.3)
print("oscillator x", np.round(np.asarray(sol["x"]), 4).tolist())
energy = lambda s0, k, c: jnp.sum(odeint(oscillator, s0, ts, k, c)["x"][-1] ** 2)
gs = grad(energy, argnums=(0, 1, 2))({"x": jnp.array([1.0, 0.5]), "v": jnp.zeros(2)}, 4.0, 0.3)
print("energy grads", np.round(np.asarray(gs[0]["x"]), 4).tolist(), np.round(np.asarray(gs[0]["v"]), 4).tolist(),
      round(float(gs[1]), 4), round(float(gs[2]), 4))
# gradient with respect to the times
tgrad = grad(lambda ts: jnp.sum(odeint(true_dynamics, true_y0, ts)[-1]))(jnp.array([0.0, 0.5, 1.0]))
print("time grads", np.round(np.asarray(tgrad), 4).tolist())
# vmap over initial states
many = vmap(lambda y0: odeint(true_dynamics, y0, t[:5], rtol=1e-6, atol=1e-6)[-1])(true_y[:3])
print("vmapped", np.round(np.asarray(many), 4).tolist())
'''


def test_rewrite_changes_imports_only():
    changed = [(a, b) for a, b in zip(NEURAL_ODE.splitlines(), rewrite_imports(NEURAL_ODE).splitlines()) if a != b]
    assert changed and all(a.lstrip().startswith(("import ", "from ")) for a, _ in changed)


def test_neural_ode_ports_with_imports_only(device):
    """The program prints JAX's numbers (trajectories, training losses, adjoint gradients with respect to
    parameters, closed-over values, a pytree state and the times, vmapped solves) with fnarray's default device
    set to numpy:0 (the reference) and opencl:0 (generated kernels, the solver's loops lowered to them); the
    other backends run its primitives in the parity suite (docs/design.md's test tiers)."""
    assert_port_matches_on(NEURAL_ODE, device)


def test_odeint_bad_inputs_say_what_is_wrong():
    """Bad arguments raise naming what was given and what to do, before any solve (JAX's odeint checks args
    the same way); a vector field that changes the state's shape raises from the loop, naming the carry."""
    import fnarray.numpy as fnp
    from fnarray.experimental.ode import odeint

    f = lambda y, t: -y  # noqa: E731
    y0, ts = fnp.ones(2), fnp.linspace(0.0, 1.0, 3)
    with pytest.raises(TypeError, match="leaves of \\*args must be arrays or numbers.*got a str"):
        odeint(lambda y, t, s: -y, y0, ts, "fast")
    with pytest.raises(ValueError, match=r"t must be a 1-D array.*got shape \(\)"):
        odeint(f, y0, 1.0)
    with pytest.raises(ValueError, match=r"got shape \(0,\)"):
        odeint(f, y0, fnp.zeros((0,)))
    with pytest.raises(ValueError, match="rtol must be a positive number, got -0.001"):
        odeint(f, y0, ts, rtol=-1e-3)
    with pytest.raises(ValueError, match="mxstep must be a positive number"):
        odeint(f, y0, ts, mxstep=0)
    with pytest.raises(TypeError, match="y0's leaves must be floating point.*int32"):
        odeint(f, fnp.ones(2, dtype=fnp.int32), ts)
    with pytest.raises(ValueError, match="y0 has no array leaves"):
        odeint(f, {}, ts)
    with pytest.raises(Exception, match=r"f32\[2\].*f32\[3\]|f32\[3\].*f32\[2\]|shape"):
        odeint(lambda y, t: fnp.concatenate([y, y[:1]]), y0, ts)


def test_odeint_matches_jax_and_the_exact_solution():
    """With ``hmax``, loose and default tolerances, fnarray's and JAX's solutions of ``y' = -k cos(t) y`` lie
    within the tolerance of the exact ``y0 exp(-k sin t)`` and of each other (the step controller is
    Dormand-Prince's as JAX's, written anew, so the steps differ); ``mxstep`` stops early, as JAX."""
    from jax.experimental.ode import odeint as jax_odeint

    import fnarray.numpy as fnp
    from fnarray.experimental.ode import odeint

    ts = np.linspace(0.0, 4.0, 6).astype(np.float32)
    y0 = np.array([1.0, -0.5, 0.25], np.float32)
    exact = y0 * np.exp(-0.8 * np.sin(ts.astype(np.float64)))[:, None]
    for kw, tol in (({"hmax": 0.05}, 2e-5), ({"rtol": 1e-4, "atol": 1e-4}, 2e-3), ({}, 2e-5)):
        want = np.asarray(jax_odeint(lambda y, t, k: -k * y * jax.numpy.cos(t), y0, ts, 0.8, **kw))
        got = np.asarray(odeint(lambda y, t, k: -k * y * fnp.cos(t), y0, ts, 0.8, **kw))
        np.testing.assert_allclose(want, exact, rtol=tol, atol=tol / 10)   # the reference is itself that close
        np.testing.assert_allclose(got, exact, rtol=tol, atol=tol / 10)
        np.testing.assert_allclose(got, want, rtol=2 * tol, atol=tol / 5)
    few = np.asarray(odeint(lambda y, t: -y, y0, ts, mxstep=2))
    want = np.asarray(jax_odeint(lambda y, t: -y, y0, ts, mxstep=2))
    assert np.isfinite(few).all() and np.array_equal(few[0], y0)
    assert np.abs(few[-1] - y0 * np.exp(-4.0)).max() > 1e-3 and np.abs(want[-1] - y0 * np.exp(-4.0)).max() > 1e-3
