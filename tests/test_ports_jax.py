"""Public JAX programs, shrunk to seconds on synthetic data and written anew following the originals'
structure, run as written under JAX and, after ``jax_port.rewrite_imports`` (an import change only),
under fnarray: both must print the same numbers.

The programs: JAX's ``examples/mnist_classifier.py`` (stax + optimizers.momentum), ``examples/mnist_vae.py``
(stax encoder/decoder, the reparameterisation with ``random.normal``, optimizers.adam),
``examples/gaussian_process_regression.py`` (Cholesky marginal likelihood, ``jax.scipy.linalg``,
optimizers.adam on log hyperparameters), ``examples/differentially_private_sgd.py`` (per-example gradients
with ``vmap``, clipping, Gaussian noise, optimizers.sgd), the "Autodiff cookbook" notebook (``grad``,
``jacfwd``/``jacrev``, ``hessian``, ``jvp``/``vjp``, ``jax.test_util.check_grads``) and the "Training a
simple neural network" tutorial (hand-written MLP with ``vmap`` and ``jit``). Each runs on the default
device (numpy:0 here), a printed number differing from JAX's in float rounding only; the two stax programs
also run with opencl:0 as the default device (``jax_port.PORT_DEVICES``; the other backends: the parity suite).
"""

from __future__ import annotations

import pytest

from jax_port import (PORT_DEVICES, assert_port_matches, assert_rewrite_changes_imports_only, compare_outputs,
                      jax_output, rewrite_imports, run_program)

pytest.importorskip("jax", reason="JAX runs the programs as written")

MNIST_CLASSIFIER = '''
import itertools
import numpy.random as npr
import jax.numpy as jnp
from jax import jit, grad, random
from jax.example_libraries import optimizers
from jax.example_libraries import stax
from jax.example_libraries.stax import Dense, Relu, LogSoftmax

def loss(params, batch):
  inputs, targets = batch
  preds = predict(params, inputs)
  return -jnp.mean(jnp.sum(preds * targets, axis=1))

def accuracy(params, batch):
  inputs, targets = batch
  target_class = jnp.argmax(targets, axis=1)
  predicted_class = jnp.argmax(predict(params, inputs), axis=1)
  return jnp.mean(predicted_class == target_class)

init_random_params, predict = stax.serial(Dense(32), Relu, Dense(32), Relu, Dense(4), LogSoftmax)

rs = npr.RandomState(0)
centers = rs.randn(4, 16).astype("float32") * 2
labels = rs.randint(0, 4, 256)
train_images = (centers[labels] + rs.randn(256, 16)).astype("float32")
train_labels = jnp.eye(4)[labels]
step_size, num_epochs, batch_size, momentum_mass = 0.05, 3, 64, 0.9
num_batches = 256 // batch_size

def data_stream():
  rng = npr.RandomState(0)
  while True:
    perm = rng.permutation(256)
    for i in range(num_batches):
      idx = perm[i * batch_size:(i + 1) * batch_size]
      yield train_images[idx], train_labels[idx]
batches = data_stream()

opt_init, opt_update, get_params = optimizers.momentum(step_size, mass=momentum_mass)

@jit
def update(i, opt_state, batch):
  params = get_params(opt_state)
  return opt_update(i, grad(loss)(params, batch), opt_state)

_, init_params = init_random_params(random.key(0), (-1, 16))
opt_state = opt_init(init_params)
itercount = itertools.count()
for epoch in range(num_epochs):
  for _ in range(num_batches):
    opt_state = update(next(itercount), opt_state, next(batches))
  params = get_params(opt_state)
  print(f"epoch {epoch} loss {float(loss(params, (train_images, train_labels))):.6f} "
        f"accuracy {float(accuracy(params, (train_images, train_labels))):.4f}")
print("first weights", [round(float(v), 5) for v in params[0][0][0, :4]])
'''

MNIST_VAE = '''
import numpy as np
import jax
import jax.numpy as jnp
from jax import jit, grad, lax, random
from jax.example_libraries import optimizers
from jax.example_libraries import stax
from jax.example_libraries.stax import Dense, FanOut, Relu, Softplus

def gaussian_kl(mu, sigmasq):
  return -0.5 * jnp.sum(1. + jnp.log(sigmasq) - mu**2. - sigmasq)

def gaussian_sample(rng, mu, sigmasq):
  return mu + jnp.sqrt(sigmasq) * random.normal(rng, mu.shape)

def bernoulli_logpdf(logits, x):
  return -jnp.sum(jnp.logaddexp(0., jnp.where(x, -1., 1.) * logits))

def elbo(rng, params, images):
  enc_params, dec_params = params
  mu_z, sigmasq_z = encode(enc_params, images)
  logits_x = decode(dec_params, gaussian_sample(rng, mu_z, sigmasq_z))
  return bernoulli_logpdf(logits_x, images) - gaussian_kl(mu_z, sigmasq_z)

encoder_init, encode = stax.serial(
    Dense(32), Relu, Dense(32), Relu,
    FanOut(2), stax.parallel(Dense(4), stax.serial(Dense(4), Softplus)))
decoder_init, decode = stax.serial(Dense(32), Relu, Dense(32), Relu, Dense(20))

rs = np.random.RandomState(1)
train_images = (rs.rand(128, 20) > 0.6).astype(np.float32)
step_size, num_epochs, batch_size = 0.01, 2, 32
num_batches = 128 // batch_size

enc_init_rng, dec_init_rng = random.split(random.key(2))
_, init_encoder_params = encoder_init(enc_init_rng, (batch_size, 20))
_, init_decoder_params = decoder_init(dec_init_rng, (batch_size, 4))
init_params = init_encoder_params, init_decoder_params
opt_init, opt_update, get_params = optimizers.adam(step_size)

def binarize_batch(rng, i, images):
  i = i % num_batches
  batch = lax.dynamic_slice_in_dim(images, i * batch_size, batch_size)
  return random.bernoulli(rng, batch)

@jit
def run_epoch(rng, opt_state, images):
  def body_fun(i, opt_state):
    elbo_rng, data_rng = random.split(random.fold_in(rng, i))
    batch = binarize_batch(data_rng, i, images)
    loss = lambda params: -elbo(elbo_rng, params, batch) / batch_size
    g = grad(loss)(get_params(opt_state))
    return opt_update(i, g, opt_state)
  return lax.fori_loop(0, num_batches, body_fun, opt_state)

opt_state = opt_init(init_params)
for epoch in range(num_epochs):
  opt_state = run_epoch(random.key(epoch), opt_state, train_images)
  params = get_params(opt_state)
  print(f"epoch {epoch} elbo {float(elbo(random.key(9), params, train_images[:32]) / 32):.5f}")
'''

GAUSSIAN_PROCESS = '''
import numpy as np
import jax.numpy as jnp
from jax import jit, grad, vmap
import jax.scipy as scipy
from jax.example_libraries import optimizers

def cov_map(cov_func, xs, xs2=None):
  if xs2 is None:
    return vmap(lambda x: vmap(lambda y: cov_func(x, y))(xs))(xs)
  return vmap(lambda x: vmap(lambda y: cov_func(x, y))(xs))(xs2).T

def softplus(x):
  return jnp.logaddexp(x, 0.)

def exp_quadratic(x1, x2):
  return jnp.exp(-jnp.sum((x1 - x2)**2))

def gp(params, x, y, xtest=None, compute_marginal_likelihood=False):
  noise = softplus(params["noise"])
  amp = softplus(params["amplitude"])
  ls = softplus(params["lengthscale"])
  ymean = jnp.mean(y)
  y = y - ymean
  x = x / ls
  train_cov = amp * cov_map(exp_quadratic, x) + eye * (noise + 1e-6)
  chol = scipy.linalg.cholesky(train_cov, lower=True)
  kinvy = scipy.linalg.solve_triangular(chol.T, scipy.linalg.solve_triangular(chol, y, lower=True))
  if compute_marginal_likelihood:
    log2pi = jnp.log(2. * 3.1415)
    ml = jnp.sum(-0.5 * jnp.dot(y.T, kinvy) - jnp.sum(jnp.log(jnp.diag(chol))) - (numpts / 2.) * log2pi)
    ml -= jnp.sum(-0.5 * jnp.log(2 * 3.1415) - jnp.log(amp) - 0.5 * jnp.log(amp)**2)
    return -ml
  if xtest is not None:
    xtest = xtest / ls
  cross_cov = amp * cov_map(exp_quadratic, x, xtest)
  mu = jnp.dot(cross_cov.T, kinvy) + ymean
  return mu

numpts = 12
rs = np.random.RandomState(0)
eye = jnp.eye(numpts)
xs = np.sort(rs.rand(numpts)) * 4 - 2
ys = (np.sin(2 * xs) + 0.1 * rs.randn(numpts)).astype(np.float32)
xs = xs.astype(np.float32)[:, None]
params = {"amplitude": jnp.zeros((1, 1)), "noise": jnp.zeros((1, 1)) - 5., "lengthscale": jnp.zeros((1, 1))}
marginal_likelihood = lambda params: gp(params, xs, ys, compute_marginal_likelihood=True)
grad_fun = jit(grad(marginal_likelihood))
opt_init, opt_update, get_params = optimizers.adam(0.05)
opt_state = opt_init(params)
for i in range(60):
  opt_state = opt_update(i, grad_fun(params), opt_state)
  params = get_params(opt_state)
  if i % 20 == 0:
    print(f"step {i} negative log likelihood {float(marginal_likelihood(params)):.4f}")
for k in sorted(params):
  print(k, round(float(params[k][0, 0]), 4))
xtest = jnp.linspace(-2., 2., 5)[:, None]
print("posterior mean", [round(float(v), 4) for v in gp(params, xs, ys, xtest=xtest)])
'''

DP_SGD = '''
import itertools
import numpy.random as npr
import jax.numpy as jnp
from jax import grad, jit, random, vmap
from jax import tree_util
from jax.example_libraries import optimizers
from jax.example_libraries import stax
from jax.example_libraries.stax import Dense, Tanh, LogSoftmax

def loss(params, batch):
  inputs, targets = batch
  logits = predict(params, inputs)
  logits = logits - jnp.max(logits, axis=-1, keepdims=True)
  return -jnp.mean(jnp.sum(logits * targets, axis=-1))

def clipped_grad(params, l2_norm_clip, single_example_batch):
  grads = grad(loss)(params, single_example_batch)
  nonempty_grads, tree_def = tree_util.tree_flatten(grads)
  total_grad_norm = jnp.linalg.norm(jnp.array([jnp.linalg.norm(g.ravel()) for g in nonempty_grads]))
  divisor = jnp.maximum(total_grad_norm / l2_norm_clip, 1.)
  normalized_nonempty_grads = [g / divisor for g in nonempty_grads]
  return tree_util.tree_unflatten(tree_def, normalized_nonempty_grads)

def private_grad(params, batch, rng, l2_norm_clip, noise_multiplier, batch_size):
  clipped_grads = vmap(clipped_grad, (None, None, 0))(params, l2_norm_clip, batch)
  clipped_grads_flat, grads_treedef = tree_util.tree_flatten(clipped_grads)
  aggregated_clipped_grads = [g.sum(0) for g in clipped_grads_flat]
  rngs = random.split(rng, len(aggregated_clipped_grads))
  noised = [(g + l2_norm_clip * noise_multiplier * random.normal(r, g.shape)) / batch_size
            for r, g in zip(rngs, aggregated_clipped_grads)]
  return tree_util.tree_unflatten(grads_treedef, noised)

init_random_params, predict = stax.serial(Dense(16), Tanh, Dense(3), LogSoftmax)
rs = npr.RandomState(3)
labels = rs.randint(0, 3, 96)
train_images = (rs.randn(3, 8)[labels] + rs.randn(96, 8)).astype("float32")
train_labels = jnp.eye(3)[labels]
batch_size, l2_norm_clip, noise_multiplier = 16, 1.5, 1.1

def data_stream():
  rng = npr.RandomState(0)
  while True:
    perm = rng.permutation(96)
    for i in range(96 // batch_size):
      idx = perm[i * batch_size:(i + 1) * batch_size]
      yield train_images[idx], train_labels[idx]
batches = data_stream()
opt_init, opt_update, get_params = optimizers.sgd(0.3)

@jit
def private_update(rng, i, opt_state, batch):
  params = get_params(opt_state)
  rng = random.fold_in(rng, i)
  return opt_update(i, private_grad(params, batch, rng, l2_norm_clip, noise_multiplier, batch_size), opt_state)

key = random.key(1)
_, init_params = init_random_params(key, (-1, 8))
opt_state = opt_init(init_params)
itercount = itercount = itertools.count()
for epoch in range(3):
  for _ in range(96 // batch_size):
    opt_state = private_update(key, next(itercount), opt_state, next(batches))
  params = get_params(opt_state)
  print(f"epoch {epoch} loss {float(loss(params, (train_images, train_labels))):.5f}")
'''

AUTODIFF_COOKBOOK = '''
import jax.numpy as jnp
from jax import grad, jit, vmap, jacfwd, jacrev, hessian, jvp, vjp
from jax import random
from jax.test_util import check_grads

key = random.key(0)
grad_tanh = grad(jnp.tanh)
print("grad tanh", float(grad_tanh(2.0)), float(grad(grad(grad(jnp.tanh)))(2.0)))

def sigmoid(x):
  return 0.5 * (jnp.tanh(x / 2) + 1)

def predict(W, b, inputs):
  return sigmoid(jnp.dot(inputs, W) + b)

inputs = jnp.array([[0.52, 1.12, 0.77], [0.88, -1.08, 0.15], [0.52, 0.06, -1.30], [0.74, -2.49, 1.39]])
targets = jnp.array([True, True, False, True])

def loss(W, b):
  preds = predict(W, b, inputs)
  label_probs = preds * targets + (1 - preds) * (1 - targets)
  return -jnp.sum(jnp.log(label_probs))

key, W_key, b_key = random.split(key, 3)
W = random.normal(W_key, (3,))
b = random.normal(b_key, ())
print("W_grad", [round(float(v), 5) for v in grad(loss, argnums=0)(W, b)])
W_grad, b_grad = grad(loss, (0, 1))(W, b)
print("b_grad", float(b_grad))
eps = 1e-4
b_grad_numerical = (loss(W, b + eps / 2.) - loss(W, b - eps / 2.)) / eps
print("b_grad_numerical close", bool(abs(b_grad_numerical - b_grad) < 1e-2))
check_grads(loss, (W, b), order=2)
f = lambda W: predict(W, b, inputs)
J = jacfwd(f)(W)
print("jacfwd", J.shape, [round(float(v), 5) for v in J.ravel()[:6]])
print("jacrev agrees", bool(jnp.allclose(J, jacrev(f)(W), atol=1e-6)))
H = hessian(f)(W)
print("hessian", H.shape, round(float(H.sum()), 5))
y, u = jvp(f, (W,), (jnp.ones(3),))
print("jvp", [round(float(v), 5) for v in u])
y, vjp_fun = vjp(f, W)
print("vjp", [round(float(v), 5) for v in vjp_fun(jnp.ones(4))[0]])
def hvp(f, x, v):
  return grad(lambda x: jnp.vdot(grad(f)(x), v))(x)
print("hvp", [round(float(v), 5) for v in hvp(lambda w: loss(w, b), W, jnp.arange(3.))])
per_example = vmap(grad(lambda w, x: jnp.sum(sigmoid(jnp.dot(x, w)))), (None, 0))(W, inputs)
print("per-example grads", per_example.shape, round(float(per_example.sum()), 5))
'''

NN_TUTORIAL = '''
import time
import numpy as np
import jax.numpy as jnp
from jax import grad, jit, vmap
from jax import random
from jax.scipy.special import logsumexp

def random_layer_params(m, n, key, scale=1e-2):
  w_key, b_key = random.split(key)
  return scale * random.normal(w_key, (n, m)), scale * random.normal(b_key, (n,))

def init_network_params(sizes, key):
  keys = random.split(key, len(sizes))
  return [random_layer_params(m, n, k) for m, n, k in zip(sizes[:-1], sizes[1:], keys)]

layer_sizes = [12, 32, 32, 5]
step_size, num_epochs, batch_size, n_targets = 0.5, 4, 32, 5
params = init_network_params(layer_sizes, random.key(0))

def relu(x):
  return jnp.maximum(0, x)

def predict(params, image):
  activations = image
  for w, b in params[:-1]:
    outputs = jnp.dot(w, activations) + b
    activations = relu(outputs)
  final_w, final_b = params[-1]
  logits = jnp.dot(final_w, activations) + final_b
  return logits - logsumexp(logits)

batched_predict = vmap(predict, in_axes=(None, 0))

def one_hot(x, k, dtype=jnp.float32):
  return jnp.array(x[:, None] == jnp.arange(k), dtype)

def accuracy(params, images, targets):
  target_class = jnp.argmax(targets, axis=1)
  predicted_class = jnp.argmax(batched_predict(params, images), axis=1)
  return jnp.mean(predicted_class == target_class)

def loss(params, images, targets):
  preds = batched_predict(params, images)
  return -jnp.mean(preds * targets)

@jit
def update(params, x, y):
  grads = grad(loss)(params, x, y)
  return [(w - step_size * dw, b - step_size * db) for (w, b), (dw, db) in zip(params, grads)]

rs = np.random.RandomState(0)
labels = rs.randint(0, n_targets, 160)
images = (rs.randn(n_targets, 12)[labels] * 3 + rs.randn(160, 12)).astype(np.float32)
targets = one_hot(labels, n_targets)
for epoch in range(num_epochs):
  for i in range(0, 160, batch_size):
    params = update(params, images[i:i + batch_size], targets[i:i + batch_size])
  print(f"epoch {epoch} train accuracy {float(accuracy(params, images, targets)):.4f} "
        f"loss {float(loss(params, images, targets)):.6f}")
'''

PROGRAMS = {"mnist_classifier": MNIST_CLASSIFIER, "mnist_vae": MNIST_VAE, "gaussian_process": GAUSSIAN_PROCESS,
            "dp_sgd": DP_SGD, "autodiff_cookbook": AUTODIFF_COOKBOOK, "nn_tutorial": NN_TUTORIAL}


def test_rewrite_changes_imports_only():
    assert_rewrite_changes_imports_only(PROGRAMS.values())


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_jax_program_ports_unchanged(name):
    """The program prints the same numbers under JAX and, after the import rewrite, under fnarray."""
    expected, got = assert_port_matches(PROGRAMS[name], rtol=2e-4, atol=2e-5, timeout=300)
    assert expected.strip(), f"{name} printed nothing"


# Short programs for other parts of issue 25 (x64 canonicalisation, jit's cache by function, checkpoint
# policies): each must run under JAX and print the same under fnarray.
X64_DEFAULT = '''
import numpy as np
import jax.numpy as jnp
from jax import grad
xs = np.linspace(0., 1., 5)
ys = jnp.asarray(xs) ** 2
print("dtype", ys.dtype, "is float32", ys.dtype == jnp.float32)
print("slope", float(grad(lambda w: jnp.sum((w * jnp.asarray(xs) - ys) ** 2))(0.5)))
'''

JIT_CACHE = '''
import jax
import jax.numpy as jnp
traces = [0]
def f(x):
  traces[0] += 1
  return jnp.sin(x) * 2
for i in range(3):
  y = jax.jit(f)(jnp.float32(i))
print("traces", traces[0], "value", float(y))
'''

CHECKPOINT_POLICIES = '''
import jax
import jax.numpy as jnp
from jax.ad_checkpoint import checkpoint_name
def layer(w, x):
  h = checkpoint_name(jnp.sin(jnp.dot(w, x)), "h")
  return jnp.tanh(jnp.dot(w, h))
f = jax.checkpoint(layer, policy=jax.checkpoint_policies.save_only_these_names("h"))
w, x = jnp.eye(3) * 0.5, jnp.arange(3.)
print("grad", [round(float(v), 5) for v in jax.grad(lambda w: f(w, x).sum())(w).ravel()])
f = jax.checkpoint(layer, policy=jax.checkpoint_policies.dots_saveable)
print("grad dots", [round(float(v), 5) for v in jax.grad(lambda w: f(w, x).sum())(w).ravel()])
'''

PENDING = {
    "x64_default": (X64_DEFAULT, "issue 25 item 1: NumPy float64 inputs become float32 with x64 off"),
    "jit_cache": (JIT_CACHE, "issue 25 item 2: jit traces a function once per signature, not per wrapper"),
    "checkpoint_policies": (CHECKPOINT_POLICIES, "issue 25 item 5: checkpoint policies and checkpoint_name"),
}


@pytest.mark.parametrize("name", sorted(PENDING))
def test_jax_program_of_other_items(name):
    source, what = PENDING[name]
    expected = run_program(source, timeout=300)          # the program itself must be right under JAX
    compare_outputs(expected, run_program(rewrite_imports(source), timeout=300), rtol=2e-4, atol=2e-5)


@pytest.mark.parametrize("name", ["mnist_classifier", "mnist_vae"])
def test_jax_program_ports_on_every_device(device, name):
    """The stax + optimizers programs with fnarray's default device (``FNARRAY_DEVICE``) set to the kernel backend
    of ``jax_port.PORT_DEVICES`` (opencl:0): the same numbers as JAX within the float differences that training
    amplifies. The other backends run the programs' primitives and transforms in the parity suite
    (docs/design.md's test tiers)."""
    if str(device) == "numpy:0":
        pytest.skip("numpy:0 is the default device: test_jax_program_ports_unchanged runs it at rtol 2e-4")
    if str(device) not in PORT_DEVICES:
        pytest.skip(f"the whole programs run on {', '.join(PORT_DEVICES)}; {device}'s primitives: the parity suite")
    got = run_program(rewrite_imports(PROGRAMS[name]), env={"FNARRAY_DEVICE": str(device)}, timeout=300)
    compare_outputs(jax_output(PROGRAMS[name], timeout=300), got, rtol=2e-3, atol=2e-4)
