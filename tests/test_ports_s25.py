"""Public JAX and MLX programs of the twenty-fifth session's new-user probe, run as written under their own library
and after an import change under fnarray: both must print the same numbers.

Sources (code as published, sizes shrunk; license headers, comments and argument parsing left out):

- ``CONTROL``: jax-ml/jax ``examples/control.py`` (02d7d83: iLQR and model-predictive control over
  ``lax.fori_loop`` with a namedtuple of arrays in the carry, ``vmap`` of ``jacfwd(grad(...))`` Hessians,
  ``jacobian(argnums=(1, 2))``, ``jnp.linalg.solve``, ``.at[].set``, ``lax.dynamic_slice_in_dim``, and an index
  one past the end (``spec.Q[T + 1]``, clamped as JAX clamps)); the driver under ``__main__`` runs problems of
  ``examples/control_test.py`` (LQR solve and predict, iLQR on the LQR problem, iLQR and MPC on the nonlinear one).
- ``HMM_EM``: jax-ml/jax ``examples/hmm_em.py`` (83d540e: EM for a hidden Markov model, the E step as ``grad`` of
  a ``lax.scan`` log normalizer, the loop a ``lax.fori_loop`` under ``jit``, sampling by ``random.categorical`` in
  ``lax.scan`` with ``static_argnums``). Two lines differ from the published file, for both libraries: the text
  is a short sentence (``CORPUS``) instead of ``jax.core.__file__``, and ``decodings[int(i)]`` for
  ``decodings[i]`` (today's JAX arrays are unhashable: the example as published raises ``TypeError`` under JAX
  itself, and fnarray raises the same). 4 states, 10 EM steps, 40 samples. The sampled characters are discrete
  draws: JAX's gumbel-argmax margins here are >= 0.014, the programs' float rounding differs ~1e-5.
- ``ESS``: PrincetonLIPS/active-phase-mapping ``notebooks/elliptical_slice_sampler_jax.py`` (b22bedc: a research
  script's elliptical slice sampler over ``jax.numpy`` alone: ``lax.while_loop`` whose jitted body draws
  ``jrnd.uniform(minval=lower, maxval=upper)`` between traced bounds and shrinks them by ``lax.cond`` of two
  zero-argument lambdas, inside a jitted step inside ``lax.scan(f, init, None, num_samples)``); the driver under
  ``__main__`` (ours) samples a Gaussian-process prior over 8 points with a logistic likelihood, 30 samples. Its 60
  accept/shrink decisions have margins >= 0.03 under JAX (``jax.disable_jit``), so the chains follow one path.
- ``GCN_MLX``: ml-explore/mlx-examples ``gcn/gcn.py`` and ``gcn/main.py`` (d936ab5, 35b219b: a graph
  convolutional network trained with ``nn.value_and_grad`` of a function returning ``(loss, y_hat)``, an L2 term
  over ``tree_flatten(parameters)`` ending in ``.sqrt()``, Adam, early stopping); ``datasets.py``'s Cora loader
  is a 40-node synthetic graph in 3 classes (``load_data`` / ``train_val_test_mask`` of the same names), dropout
  0 (MLX's dropout draws from its global generator), 8 epochs. One line is added for both libraries: MLX saves
  its initial weights (``WEIGHTS``) and the port loads them, so both start from the same parameters. The accuracies
  are argmaxes: MLX's top-two logit gaps on the validation and test nodes are >= 0.017 at every epoch.

Before this session's fixes the three JAX programs ported by their imports alone (``jax_port.rewrite_imports``);
the GCN needed the changes docs/from_mlx.md lists for every MLX program (``key=``, field annotations, the pure
optimizer step, ``load_weights``) and two more that are now fixed: ``nn.value_and_grad`` of a function returning
a tuple (MLX differentiates its first element and returns the whole tuple) and ``mlx.core.array``'s methods
(``x.sqrt()``; also ``square``, ``rsqrt``, ``exp``, ``log``, ``logsumexp``, ``cummax``, ... added).

Each program runs in this process with fnarray's default device set: on numpy:0, and ``CONTROL`` and the GCN also on
opencl:0 (``jax_port.PORT_DEVICES``' kernel backend); all four passed on opencl:0, jax:0, mlx:0 and webgpu:0 when
written (not run here: CI time).
"""

from __future__ import annotations

import contextlib
import io
import re

import numpy as np
import pytest

from jax_port import PORT_DEVICES, assert_rewrite_changes_imports_only, compare_outputs, rewrite_imports

CONTROL = """
import collections

from jax import lax, grad, jacfwd, jacobian, vmap
import jax.numpy as jnp


ControlSpec = collections.namedtuple(
    'ControlSpec', 'cost dynamics horizon state_dim control_dim')


LqrSpec = collections.namedtuple('LqrSpec', 'Q q R r M A B')


dot = jnp.dot
mm = jnp.matmul


def mv(mat, vec):
  assert mat.ndim == 2
  assert vec.ndim == 1
  return dot(mat, vec)


LOOP_VIA_SCAN = False


def fori_loop(lo, hi, loop, init):
  if LOOP_VIA_SCAN:
    return scan_fori_loop(lo, hi, loop, init)
  else:
    return lax.fori_loop(lo, hi, loop, init)


def scan_fori_loop(lo, hi, loop, init):
  def scan_f(x, t):
    return loop(t, x), ()
  x, _ = lax.scan(scan_f, init, jnp.arange(lo, hi))
  return x


def trajectory(dynamics, U, x0):
  '''Unrolls `X[t+1] = dynamics(t, X[t], U[t])`, where `X[0] = x0`.'''
  T, _ = U.shape
  d, = x0.shape

  X = jnp.zeros((T + 1, d))
  X = X.at[0].set(x0)

  def loop(t, X):
    x = dynamics(t, X[t], U[t])
    X = X.at[t + 1].set(x)
    return X

  return fori_loop(0, T, loop, X)


def make_lqr_approx(p):
  T = p.horizon

  def approx_timestep(t, x, u):
    M = jacfwd(grad(p.cost, argnums=2), argnums=1)(t, x, u).T
    Q = jacfwd(grad(p.cost, argnums=1), argnums=1)(t, x, u)
    R = jacfwd(grad(p.cost, argnums=2), argnums=2)(t, x, u)
    q, r = grad(p.cost, argnums=(1, 2))(t, x, u)
    A, B = jacobian(p.dynamics, argnums=(1, 2))(t, x, u)
    return Q, q, R, r, M, A, B

  _approx = vmap(approx_timestep)

  def approx(X, U):
    assert X.shape[0] == T + 1 and U.shape[0] == T
    U_pad = jnp.vstack((U, jnp.zeros((1,) + U.shape[1:])))
    Q, q, R, r, M, A, B = _approx(jnp.arange(T + 1), X, U_pad)
    return LqrSpec(Q, q, R[:T], r[:T], M[:T], A[:T], B[:T])

  return approx


def lqr_solve(spec):
  EPS = 1e-7
  T, control_dim, _ = spec.R.shape
  _, state_dim, _ = spec.Q.shape

  K = jnp.zeros((T, control_dim, state_dim))
  k = jnp.zeros((T, control_dim))

  def rev_loop(t_, state):
    t = T - t_ - 1
    spec, P, p, K, k = state

    Q, q = spec.Q[t], spec.q[t]
    R, r = spec.R[t], spec.r[t]
    M = spec.M[t]
    A, B = spec.A[t], spec.B[t]

    AtP = mm(A.T, P)
    BtP = mm(B.T, P)
    G = R + mm(BtP, B)
    H = mm(BtP, A) + M.T
    h = r + mv(B.T, p)
    K_ = -jnp.linalg.solve(G + EPS * jnp.eye(G.shape[0]), H)
    k_ = -jnp.linalg.solve(G + EPS * jnp.eye(G.shape[0]), h)
    P_ = Q + mm(AtP, A) + mm(K_.T, H)
    p_ = q + mv(A.T, p) + mv(K_.T, h)

    K = K.at[t].set(K_)
    k = k.at[t].set(k_)
    return spec, P_, p_, K, k

  _, P, p, K, k = fori_loop(
      0, T, rev_loop,
      (spec, spec.Q[T + 1], spec.q[T + 1], K, k))

  return K, k


def lqr_predict(spec, x0):
  T, control_dim, _ = spec.R.shape
  _, state_dim, _ = spec.Q.shape

  K, k = lqr_solve(spec)

  def fwd_loop(t, state):
    spec, X, U = state
    A, B = spec.A[t], spec.B[t]
    u = mv(K[t], X[t]) + k[t]
    x = mv(A, X[t]) + mv(B, u)
    X = X.at[t + 1].set(x)
    U = U.at[t].set(u)
    return spec, X, U

  U = jnp.zeros((T, control_dim))
  X = jnp.zeros((T + 1, state_dim))
  X = X.at[0].set(x0)
  _, X, U = fori_loop(0, T, fwd_loop, (spec, X, U))
  return X, U


def ilqr(iterations, p, x0, U):
  assert x0.ndim == 1 and x0.shape[0] == p.state_dim, x0.shape
  assert U.ndim > 0 and U.shape[0] == p.horizon, (U.shape, p.horizon)

  lqr_approx = make_lqr_approx(p)

  def loop(_, state):
    X, U = state
    p_lqr = lqr_approx(X, U)
    dX, dU = lqr_predict(p_lqr, jnp.zeros_like(x0))
    U = U + dU
    X = trajectory(p.dynamics, U, X[0] + dX[0])
    return X, U

  X = trajectory(p.dynamics, U, x0)
  return fori_loop(0, iterations, loop, (X, U))


def mpc_predict(solver, p, x0, U):
  assert x0.ndim == 1 and x0.shape[0] == p.state_dim
  T = p.horizon

  def zero_padded_controls_window(U, t):
    U_pad = jnp.vstack((U, jnp.zeros(U.shape)))
    return lax.dynamic_slice_in_dim(U_pad, t, T, axis=0)

  def loop(t, state):
    cost = lambda t_, x, u: p.cost(t + t_, x, u)
    dyns = lambda t_, x, u: p.dynamics(t + t_, x, u)

    X, U = state
    p_ = ControlSpec(cost, dyns, T, p.state_dim, p.control_dim)
    xt = X[t]
    U_rem = zero_padded_controls_window(U, t)
    _, U_ = solver(p_, xt, U_rem)
    ut = U_[0]
    x = p.dynamics(t, xt, ut)
    X = X.at[t + 1].set(x)
    U = U.at[t].set(ut)
    return X, U

  X = jnp.zeros((T + 1, p.state_dim))
  X = X.at[0].set(x0)
  return fori_loop(0, T, loop, (X, U))


if __name__ == "__main__":
  from functools import partial
  import numpy as np

  def one_step_lqr(dim, T):
    Q = jnp.stack(T * (jnp.eye(dim),))
    q = jnp.zeros((T, dim))
    R = jnp.zeros((T, dim, dim))
    r = jnp.zeros((T, dim))
    M = jnp.zeros((T, dim, dim))
    A = jnp.stack(T * (jnp.eye(dim),))
    B = jnp.stack(T * (jnp.eye(dim),))
    return LqrSpec(Q, q, R, r, M, A, B)

  def control_from_lqr(lqr):
    T, dim, _ = lqr.Q.shape
    dot = jnp.dot

    def cost(t, x, u):
      return (
          dot(dot(lqr.Q[t], x), x) + dot(lqr.q[t], x) +
          dot(dot(lqr.R[t], u), u) + dot(lqr.r[t], u) +
          dot(dot(lqr.M[t], u), x))

    def dynamics(t, x, u):
      return dot(lqr.A[t], x) + dot(lqr.B[t], u)

    return ControlSpec(cost, dynamics, T, dim, dim)

  def cost(t, x, u):
    return (x[0] ** 2. + 1e-3 * u[0] ** 2.) / (t + 1).astype(x.dtype)

  def dynamics(t, x, u):
    return (x ** 2. - u ** 2.) / (t + 1).astype(x.dtype)

  dim, T = 2, 10
  x0 = jnp.array(np.random.default_rng(0).normal(size=dim))
  K, k = lqr_solve(one_step_lqr(dim, T))
  print("lqr_solve", np.asarray(K[0]).ravel(), np.asarray(k).sum())
  X, U = lqr_predict(one_step_lqr(dim, T), x0)
  print("lqr_predict", np.asarray(X[:2]).ravel(), np.asarray(U[:2]).ravel())
  p = ControlSpec(cost, dynamics, T, 1, 1)
  X, U = ilqr(7, p, jnp.array([0.2]), 1e-5 * jnp.ones((T, 1)))
  print("ilqr nonlinear", np.asarray(X).ravel(), np.asarray(U).ravel())
  X, U = mpc_predict(partial(ilqr, 7), p, jnp.array([0.2]), 1e-5 * jnp.ones((T, 1)))
  print("mpc nonlinear", np.asarray(X).ravel(), np.asarray(U).ravel())
"""

HMM_EM = '''
from functools import partial

import jax
import jax.numpy as np
from jax.scipy.special import logsumexp
from jax import lax, random
from jax import jit, grad


def log_normalizer(params, seq):
  log_pi, log_A, log_B = params
  def marginalize(log_alpha, obs):
    log_alpha = logsumexp(log_alpha[:, None] + log_A, axis=0) + log_B[:, obs]
    return log_alpha, None
  log_alpha, _ = lax.scan(marginalize, log_pi, seq)
  return logsumexp(log_alpha)

@jit
def EM(params, seq, num_steps):
  def update(i, params):
    moments = grad(log_normalizer)(params, seq)                     # E step
    return [np.log(x / x.sum(-1, keepdims=True)) for x in moments]  # M step
  return lax.fori_loop(0, num_steps, update, params)

@partial(jit, static_argnums=(2,))
def sample(key, params, length):
  log_pi, log_A, log_B = params
  def sample_one(state, key):
    k1, k2 = random.split(key)
    obs = random.categorical(k1, log_B[state])
    state = random.categorical(k2, log_A[state])
    return state, obs
  k1, k2 = random.split(key)
  init_state = random.categorical(k1, log_pi)
  _, seq = lax.scan(sample_one, init_state, random.split(k2, length))
  return seq


### demo

from collections import defaultdict
from itertools import count

def build_dataset(string):
  encodings = defaultdict(partial(next, count()))
  data = np.array([encodings[c] for c in string])
  decodings = {i:c for c, i in encodings.items()}
  return data, decodings

if __name__ == '__main__':
  with open(CORPUS, 'r') as f:
    seq, decodings = build_dataset(f.read())

  num_states = 4
  num_obs = len(decodings)

  keys = map(random.PRNGKey, count())
  log_pi = random.normal(next(keys), (num_states,))
  log_A = random.normal(next(keys), (num_states, num_states))
  log_B = random.normal(next(keys), (num_states, num_obs))
  params = [log_pi, log_A, log_B]

  new_params = EM(params, seq, 10)
  print(log_normalizer(params, seq), log_normalizer(new_params, seq))

  sampled_seq = sample(next(keys), new_params, 40)
  print(''.join(decodings[int(i)] for i in sampled_seq))
'''

ESS = """
import jax
import jax.numpy as jnp 
import jax.random as jrnd

def elliptical_slice_jax(x0, log_lh_func, chol, num_samples, rng_key):
    '''
    Jax implementation of ESS
    '''

    @jax.jit
    def ess_step_condfun(state):
        x, new_x, nu, thresh, lower, upper, rng_key = state
        llh = log_lh_func(new_x)
        return log_lh_func(new_x) < thresh

    @jax.jit
    def ess_step_bodyfun(state):
        x, new_x, nu, thresh, lower, upper, rng_key = state
        theta_rng, rng_key = jrnd.split(rng_key, 2)
        theta = jrnd.uniform(theta_rng, minval=lower, maxval=upper)
        new_x = x * jnp.cos(theta) + nu * jnp.sin(theta)
        lower, upper = jax.lax.cond(theta < 0, lambda : (theta, upper), lambda : (lower, theta))
        return x, new_x, nu, thresh, lower, upper, rng_key

    @jax.jit
    def ess_step(x, rng_key):
        nu_rng, u_rng, theta_rng, rng_key = jrnd.split(rng_key, 4)
        nu = chol.T @ jrnd.normal(nu_rng, shape=x.shape)
        u = jrnd.uniform(u_rng)
        thresh = log_lh_func(x) + jnp.log(u)
        theta = jrnd.uniform(theta_rng, minval=0, maxval=2*jnp.pi)
        upper = theta
        lower = theta - 2 * jnp.pi
        new_x = x * jnp.cos(theta) + nu * jnp.sin(theta)
        _, new_x, _, _, _, _, _ = jax.lax.while_loop(
          ess_step_condfun,
          ess_step_bodyfun,
          (x, new_x, nu, thresh, lower, upper, rng_key)
        )
        return new_x

    @jax.jit
    def scanfunc(state, xs):
        x, rng_key = state
        step_key, rng_key = jrnd.split(rng_key, 2)
        x = ess_step(x, step_key)
        return (x, rng_key), x

    _, samples = jax.lax.scan(scanfunc, (x0, rng_key), None, num_samples)

    return samples


if __name__ == "__main__":
    grid = jnp.linspace(0.0, 1.0, 8)
    K = jnp.exp(-0.5 * (grid[:, None] - grid[None, :]) ** 2 / 0.2 ** 2) + 1e-4 * jnp.eye(8)
    chol = jnp.linalg.cholesky(K).T
    y = jnp.array([1., 1., -1., -1., 1., 1., -1., 1.])
    log_lh = lambda f: jnp.sum(jax.nn.log_sigmoid(y * f))
    samples = elliptical_slice_jax(jnp.zeros(8), log_lh, chol, 30, jrnd.PRNGKey(1))
    print(samples.shape, samples.mean(axis=0))
    print(samples[-1])
"""

GCN_MLX = '''
import numpy as np
import mlx.core as mx
import mlx.nn as nn
import mlx.optimizers as optim
from mlx.nn.losses import cross_entropy
from mlx.utils import tree_flatten


class GCNLayer(nn.Module):
    def __init__(self, in_features, out_features, bias=True):
        super(GCNLayer, self).__init__()
        self.linear = nn.Linear(in_features, out_features, bias)

    def __call__(self, x, adj):
        x = self.linear(x)
        return adj @ x


class GCN(nn.Module):
    def __init__(self, x_dim, h_dim, out_dim, nb_layers=2, dropout=0.5, bias=True):
        super(GCN, self).__init__()

        layer_sizes = [x_dim] + [h_dim] * nb_layers + [out_dim]
        self.gcn_layers = [
            GCNLayer(in_dim, out_dim, bias)
            for in_dim, out_dim in zip(layer_sizes[:-1], layer_sizes[1:])
        ]
        self.dropout = nn.Dropout(p=dropout)

    def __call__(self, x, adj):
        for layer in self.gcn_layers[:-1]:
            x = nn.relu(layer(x, adj))
            x = self.dropout(x)

        x = self.gcn_layers[-1](x, adj)
        return x


def loss_fn(y_hat, y, weight_decay=0.0, parameters=None):
    l = mx.mean(nn.losses.cross_entropy(y_hat, y))

    if weight_decay != 0.0:
        assert parameters != None, "Model parameters missing for L2 reg."

        l2_reg = sum(mx.sum(p[1] ** 2) for p in tree_flatten(parameters)).sqrt()
        return l + weight_decay * l2_reg
    return l


def eval_fn(x, y):
    return mx.mean(mx.argmax(x, axis=1) == y)


def forward_fn(gcn, x, adj, y, train_mask, weight_decay):
    y_hat = gcn(x, adj)
    loss = loss_fn(y_hat[train_mask], y[train_mask], weight_decay, gcn.parameters())
    return loss, y_hat


def load_data(args):
    rng = np.random.default_rng(0)
    n = 40
    labels = rng.integers(0, args.nb_classes, n)
    features = (np.eye(args.nb_classes)[labels] @ rng.normal(size=(args.nb_classes, 12)) + rng.normal(size=(n, 12))).astype(np.float32)
    adj = (rng.random((n, n)) < 0.1) | (labels[:, None] == labels[None, :]) & (rng.random((n, n)) < 0.2)
    adj = (adj | adj.T | np.eye(n, dtype=bool)).astype(np.float32)
    d = adj.sum(1) ** -0.5
    adj = (d[:, None] * adj * d[None, :]).astype(np.float32)
    return mx.array(features, mx.float32), mx.array(labels, mx.int32), mx.array(adj)


def train_val_test_mask():
    train_set = mx.arange(14)
    validation_set = mx.arange(14, 26)
    test_set = mx.arange(26, 40)
    return train_set, validation_set, test_set


def main(args):

    # Data loading
    x, y, adj = load_data(args)
    train_mask, val_mask, test_mask = train_val_test_mask()

    gcn = GCN(
        x_dim=x.shape[-1],
        h_dim=args.hidden_dim,
        out_dim=args.nb_classes,
        nb_layers=args.nb_layers,
        dropout=args.dropout,
        bias=args.bias,
    )
    mx.eval(gcn.parameters())
    gcn.save_weights(WEIGHTS)

    optimizer = optim.Adam(learning_rate=args.lr)
    loss_and_grad_fn = nn.value_and_grad(gcn, forward_fn)

    best_val_loss = float("inf")
    cnt = 0

    # Training loop
    for epoch in range(args.epochs):

        # Loss
        (loss, y_hat), grads = loss_and_grad_fn(
            gcn, x, adj, y, train_mask, args.weight_decay
        )
        optimizer.update(gcn, grads)
        mx.eval(gcn.parameters(), optimizer.state)

        # Validation
        val_loss = loss_fn(y_hat[val_mask], y[val_mask])
        val_acc = eval_fn(y_hat[val_mask], y[val_mask])

        # Early stopping
        if val_loss < best_val_loss:
            best_val_loss = val_loss
            cnt = 0
        else:
            cnt += 1
            if cnt == args.patience:
                break

        print(
            " | ".join(
                [
                    f"Epoch: {epoch:3d}",
                    f"Train loss: {loss.item():.3f}",
                    f"Val loss: {val_loss.item():.3f}",
                    f"Val acc: {val_acc.item():.2f}",
                ]
            )
        )

    # Test
    test_y_hat = gcn(x, adj)
    test_loss = loss_fn(y_hat[test_mask], y[test_mask])
    test_acc = eval_fn(y_hat[test_mask], y[test_mask])

    print(f"Test loss: {test_loss.item():.3f}  |  Test acc: {test_acc.item():.2f}")


main(ARGS)
'''


JAX_PROGRAMS = {"control": CONTROL, "hmm_em": HMM_EM, "ess": ESS}
SENTENCE = "the quick brown fox jumps over the lazy dog; a hidden markov model of characters.\n"

# mlx-examples' gcn -> fnarray: each (MLX's text, the port's text) pair is one change docs/from_mlx.md names
GCN_CHANGES = (
    ("import mlx.core as mx\nimport mlx.nn as nn\nimport mlx.optimizers as optim\n"
     "from mlx.nn.losses import cross_entropy\nfrom mlx.utils import tree_flatten",
     "import fnarray as fa\nimport fnarray.numpy as mx\nimport fnarray.nn as nn\nimport fnarray.optim as optim\n"
     "from fnarray.nn.losses import cross_entropy\nfrom fnarray.utils import tree_flatten"),
    # annotated fields, an explicit key for the weights
    ("class GCNLayer(nn.Module):\n    def __init__(self, in_features, out_features, bias=True):",
     "class GCNLayer(nn.Module):\n    linear: nn.Linear\n\n"
     "    def __init__(self, in_features, out_features, bias=True, *, key):"),
    ("nn.Linear(in_features, out_features, bias)", "nn.Linear(in_features, out_features, bias, key=key)"),
    ("class GCN(nn.Module):\n    def __init__(self, x_dim, h_dim, out_dim, nb_layers=2, dropout=0.5, bias=True):",
     "class GCN(nn.Module):\n    gcn_layers: list\n    dropout: nn.Dropout\n\n"
     "    def __init__(self, x_dim, h_dim, out_dim, nb_layers=2, dropout=0.5, bias=True, *, key):"),
    ("        self.gcn_layers = [\n            GCNLayer(in_dim, out_dim, bias)\n"
     "            for in_dim, out_dim in zip(layer_sizes[:-1], layer_sizes[1:])",
     "        keys = fa.random.split(key, len(layer_sizes) - 1)\n        self.gcn_layers = [\n"
     "            GCNLayer(in_dim, out_dim, bias, key=k)\n"
     "            for in_dim, out_dim, k in zip(layer_sizes[:-1], layer_sizes[1:], keys)"),
    # the weights MLX saved (the modules are values: load_weights returns the new one)
    ("        bias=args.bias,\n    )\n    mx.eval(gcn.parameters())\n    gcn.save_weights(WEIGHTS)",
     "        bias=args.bias,\n        key=fa.random.key(0),\n    )\n    gcn = gcn.load_weights(WEIGHTS)"),
    # the pure optimizer step: state in and out
    ("    loss_and_grad_fn = nn.value_and_grad(gcn, forward_fn)\n",
     "    loss_and_grad_fn = nn.value_and_grad(gcn, forward_fn)\n    state = optimizer.init(gcn)\n"),
    ("        optimizer.update(gcn, grads)\n        mx.eval(gcn.parameters(), optimizer.state)",
     "        updates, state = optimizer.update(grads, state, gcn)\n        gcn = optim.apply_updates(gcn, updates)"),
)


def _port_gcn(source: str) -> str:
    for mlx_text, fnarray_text in GCN_CHANGES:
        assert source.count(mlx_text) == 1, mlx_text
        source = source.replace(mlx_text, fnarray_text)
    return source


_PADDING = re.compile(r"\s+\]")   # NumPy pads the last element of an array to its column: `0.1910963 ]`


def _run(source: str, **names) -> str:
    """Execute ``source`` as ``__main__`` in this process with ``names`` bound; its standard output, the padding
    before a closing bracket cut."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(source, "<program>", "exec"), {"__name__": "__main__", **names})  # noqa: S102 (test programs)
    return _PADDING.sub("]", out.getvalue())


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    path = tmp_path_factory.mktemp("hmm") / "corpus.txt"
    path.write_text(SENTENCE)
    return str(path)


_REFERENCE: dict[str, str] = {}


def _reference(name: str, run) -> str:
    if name not in _REFERENCE:
        _REFERENCE[name] = run()
    return _REFERENCE[name]


def test_rewrite_changes_imports_only():
    assert_rewrite_changes_imports_only(JAX_PROGRAMS.values())


@pytest.mark.parametrize("name", sorted(JAX_PROGRAMS))
def test_jax_program_ports_with_imports_only(device, name, corpus):
    """The program prints JAX's numbers (and, for ``hmm_em``, JAX's sampled characters) with fnarray's default
    device set to ``device``: float rounding on numpy:0, what EM's and iLQR's iterations amplify elsewhere."""
    pytest.importorskip("jax", reason="JAX runs the programs as written")
    import fnarray as fa
    if str(device) not in PORT_DEVICES:
        pytest.skip(f"the whole programs run on {', '.join(PORT_DEVICES)}; {device}'s primitives: the parity suite")
    if name in ("hmm_em", "ess") and str(device) != "numpy:0":
        pytest.skip("scans, while loops and samplers on kernel backends: test_ports_jax_research.py (this one passed "
                    "on opencl:0, jax:0, mlx:0 and webgpu:0 when written; CI time)")
    want = _reference(name, lambda: _run(JAX_PROGRAMS[name], CORPUS=corpus))
    with fa.default_device(device):
        got = _run(rewrite_imports(JAX_PROGRAMS[name]), CORPUS=corpus)
    tight = str(device) == "numpy:0"
    compare_outputs(want, got, rtol=2e-4 if tight else 2e-3, atol=2e-5 if tight else 2e-4)
    if name == "hmm_em":
        assert want.splitlines()[1:] == got.splitlines()[1:]          # the sampled text, character for character


def test_gcn_port_trains_as_mlx(device, tmp_path):
    """mlx-examples' gcn, ported with the changes of ``GCN_CHANGES``, prints MLX's losses and accuracies (printed
    to 3 and 2 decimals) from MLX's initial weights."""
    mx = pytest.importorskip("mlx.core")
    import types

    import fnarray as fa
    if str(device) not in PORT_DEVICES:
        pytest.skip(f"the whole program runs on {', '.join(PORT_DEVICES)} (it passed on jax:0, mlx:0 and webgpu:0 "
                    "when written: 12 s, 0.1 s and 5 s of eager first calls)")
    args = types.SimpleNamespace(hidden_dim=16, dropout=0.0, nb_layers=2, nb_classes=3, bias=True, lr=0.01,
                                 weight_decay=5e-4, patience=20, epochs=8)
    weights = str(tmp_path / "gcn_init.npz")
    mx.random.seed(0)
    want = _run(GCN_MLX, ARGS=args, WEIGHTS=weights)
    with fa.default_device(device):
        got = _run(_port_gcn(GCN_MLX), ARGS=args, WEIGHTS=weights)
    compare_outputs(want, got, rtol=0, atol=1.5e-3)
    assert want.count("Epoch:") == 8


def test_mlx_array_methods_and_tuple_value_and_grad_as_mlx():
    """``mlx.core.array``'s methods that ``jax.Array`` lacks, and ``nn.value_and_grad`` of a function returning
    ``(loss, aux)``: the values and gradients MLX gives."""
    mx = pytest.importorskip("mlx.core")
    mlx_nn = pytest.importorskip("mlx.nn")
    import fnarray as fa
    import fnarray.numpy as fnp
    from fnarray import nn
    x = np.array([[0.5, 2.0, 1.0], [3.0, 0.25, 4.0]], np.float32)
    a, m = fnp.asarray(x), mx.array(x)
    for call in (lambda t: t.sqrt(), lambda t: t.rsqrt(), lambda t: t.square(), lambda t: t.reciprocal(),
                 lambda t: t.exp(), lambda t: t.log(), lambda t: t.log1p(), lambda t: t.log2(), lambda t: t.log10(),
                 lambda t: t.sin(), lambda t: t.cos(), lambda t: (-t).abs(), lambda t: t.logsumexp(axis=1),
                 lambda t: t.logsumexp(), lambda t: t.cummax(), lambda t: t.cummin(axis=1, reverse=True),
                 lambda t: t.logcumsumexp(axis=0), lambda t: t.moveaxis(0, 1), lambda t: t.diagonal(),
                 lambda t: t.split(3, axis=1)[2], lambda t: t[0].diag()):
        np.testing.assert_allclose(np.asarray(call(a)), np.asarray(call(m)), rtol=1e-6, atol=1e-6)
    assert (a.itemsize, a.nbytes) == (m.itemsize, m.nbytes) == (4, 24)
    with pytest.raises(ValueError, match="inclusive=False"):
        a.cummax(inclusive=False)

    def fit(model, v):
        y = model(v)
        return (y ** 2).mean(), y

    layer = nn.Linear(3, 2, key=fa.random.key(0))
    mlx_layer = mlx_nn.Linear(3, 2)
    mlx_layer.update({"weight": mx.array(np.asarray(layer.weight)), "bias": mx.array(np.asarray(layer.bias))})
    (loss, y), grads = nn.value_and_grad(layer, fit)(layer, a)
    (mlx_loss, mlx_y), mlx_grads = mlx_nn.value_and_grad(mlx_layer, fit)(mlx_layer, m)
    np.testing.assert_allclose(float(loss), mlx_loss.item(), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(y), np.asarray(mlx_y), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(grads.weight), np.asarray(mlx_grads["weight"]), rtol=1e-5)
    loss_only, _ = nn.value_and_grad(layer, lambda mdl, v: (mdl(v) ** 2).mean())(layer, a)
    assert float(loss_only) == float(loss)
