"""A research-style JAX program written for the thirteenth session's new-user probe (docs/internals.md, "Open
work"), run as written under JAX and, after ``jax_port.rewrite_imports`` (imports only), under fnarray on every
device: denoising score matching on a 2-D mixture of Gaussians (Song & Ermon, 2019) with a noise-level-embedded
GELU MLP from ``jax.nn.initializers.glorot_normal``, a hand-written Adam over ``jax.tree.map``, training in one
jitted ``lax.scan`` (``static_argnames``) with ``value_and_grad`` and ``jax.flatten_util.ravel_pytree`` for the
gradient norm, annealed Langevin sampling in nested ``lax.fori_loop``s, ``jax.scipy.special.logsumexp``
densities, ``vmap(grad)`` per example, ``random.categorical``/``randint``/``fold_in`` and ``bincount``.
Before the probe it failed at ``from jax.flatten_util import ravel_pytree`` (no such module); with
``fnarray.flatten_util`` it ports with its imports changed alone.
"""

from __future__ import annotations

import numpy as np
import pytest

from jax_port import assert_port_matches_on, rewrite_imports

jax = pytest.importorskip("jax", reason="JAX runs the program as written")

SCORE_MATCHING = '''
import functools
import jax
import jax.numpy as jnp
from jax import lax, random
from jax.flatten_util import ravel_pytree
from jax.scipy.special import logsumexp
import numpy as np

CENTERS = jnp.array([[2.0, 0.0], [-2.0, 0.0], [0.0, 2.0], [0.0, -2.0]])
STD = 0.3
SIGMAS = jnp.exp(jnp.linspace(jnp.log(2.0), jnp.log(0.05), 8))

def sample_data(key, n):
  k1, k2 = random.split(key)
  idx = random.categorical(k1, jnp.zeros(4), shape=(n,))
  return CENTERS[idx] + STD * random.normal(k2, (n, 2))

def log_density(x):
  d2 = jnp.sum((x[:, None, :] - CENTERS[None]) ** 2, axis=-1)
  return logsumexp(-0.5 * d2 / STD**2, axis=1) - jnp.log(4.0) - jnp.log(2 * jnp.pi * STD**2)

def init_mlp(key, sizes):
  params = []
  for k, (m, n) in zip(random.split(key, len(sizes) - 1), zip(sizes[:-1], sizes[1:])):
    w = jax.nn.initializers.glorot_normal()(k, (m, n))
    params.append({"w": w, "b": jnp.zeros(n)})
  return params

def embed(sigma):
  freqs = jnp.arange(1, 5, dtype=jnp.float32)
  t = jnp.log(sigma)[..., None] * freqs
  return jnp.concatenate([jnp.sin(t), jnp.cos(t)], axis=-1)

def score(params, x, sigma):
  h = jnp.concatenate([x, embed(sigma)], axis=-1)
  for layer in params[:-1]:
    h = jax.nn.gelu(h @ layer["w"] + layer["b"])
  out = h @ params[-1]["w"] + params[-1]["b"]
  return out / sigma[..., None]

def dsm_loss(params, key, x):
  k1, k2 = random.split(key)
  sigma = SIGMAS[random.randint(k1, (x.shape[0],), 0, SIGMAS.shape[0])]
  noise = random.normal(k2, x.shape)
  target = -noise / sigma[:, None]
  s = score(params, x + sigma[:, None] * noise, sigma)
  return 0.5 * jnp.mean(jnp.sum((s - target) ** 2, axis=-1) * sigma**2)

def adam(lr=3e-3, b1=0.9, b2=0.999, eps=1e-8):
  def init(p):
    return (jax.tree.map(jnp.zeros_like, p), jax.tree.map(jnp.zeros_like, p), 0)
  def update(g, state, p):
    m, v, t = state
    t = t + 1
    m = jax.tree.map(lambda m, g: b1 * m + (1 - b1) * g, m, g)
    v = jax.tree.map(lambda v, g: b2 * v + (1 - b2) * g * g, v, g)
    mhat = jax.tree.map(lambda m: m / (1 - b1**t), m)
    vhat = jax.tree.map(lambda v: v / (1 - b2**t), v)
    p = jax.tree.map(lambda p, a, b: p - lr * a / (jnp.sqrt(b) + eps), p, mhat, vhat)
    return p, (m, v, t)
  return init, update

opt_init, opt_update = adam()

@functools.partial(jax.jit, static_argnames=("steps",))
def train(params, opt_state, key, steps):
  def body(carry, k):
    params, opt_state = carry
    kd, kl = random.split(k)
    loss, g = jax.value_and_grad(dsm_loss)(params, kl, sample_data(kd, 256))
    flat, _ = ravel_pytree(g)
    params, opt_state = opt_update(g, opt_state, params)
    return (params, opt_state), (loss, jnp.linalg.norm(flat))
  (params, opt_state), (losses, gnorms) = lax.scan(body, (params, opt_state), random.split(key, steps))
  return params, opt_state, losses, gnorms

@jax.jit
def langevin(params, key, x0):
  def level(i, carry):
    x, key = carry
    sigma = SIGMAS[i]
    eps = 2e-3 * (sigma / SIGMAS[-1]) ** 2 * 0.05
    def step(j, carry):
      x, key = carry
      key, sub = random.split(key)
      g = score(params, x, jnp.full((x.shape[0],), sigma))
      x = x + eps * g + jnp.sqrt(2 * eps) * random.normal(sub, x.shape)
      return x, key
    return lax.fori_loop(0, 10, step, (x, key))
  x, _ = lax.fori_loop(0, SIGMAS.shape[0], level, (x0, key))
  return x

key = random.key(0)
kp, kt, ks, kx = random.split(key, 4)
params = init_mlp(kp, [2 + 8, 64, 64, 2])
n_params = ravel_pytree(params)[0].size
opt_state = opt_init(params)
params, opt_state, losses, gnorms = train(params, opt_state, kt, steps=150)
print("params", n_params)
print("loss first/last", losses[:5].mean(), losses[-20:].mean())
print("grad norm last", gnorms[-20:].mean())
x0 = SIGMAS[0] * random.normal(kx, (256, 2))
xs = langevin(params, ks, x0)
data = sample_data(random.fold_in(key, 7), 256)
print("mean log density: samples", log_density(xs).mean(), "data", log_density(data).mean())
print("noise", log_density(x0).mean())
per_example = jax.vmap(jax.grad(lambda x, s: jnp.sum(score(params, x[None], s[None]))))(xs[:4], SIGMAS[:4])
print("per-example input grads", np.round(np.asarray(per_example), 4).tolist())
nearest = jnp.argmin(jnp.sum((xs[:, None] - CENTERS) ** 2, -1), axis=1)
print("mode counts", jnp.bincount(nearest, length=4))
'''
def test_rewrite_changes_imports_only():
    changed = [(a, b) for a, b in zip(SCORE_MATCHING.splitlines(), rewrite_imports(SCORE_MATCHING).splitlines())
               if a != b]
    assert changed and all(a.lstrip().startswith(("import ", "from ")) for a, _ in changed)


def test_score_matching_ports_with_imports_only(device):
    """The program prints JAX's numbers (losses, gradient norms, sample densities, per-example gradients, mode
    counts) with fnarray's default device set to numpy:0 (the reference, tight tolerances) and opencl:0 (generated
    kernels, the scan and loops lowered to them). The other backends run every primitive this program uses in the
    parity suite; running the whole program on them too cost CI 2-4 minutes (docs/design.md's test tiers)."""
    assert_port_matches_on(SCORE_MATCHING, device)


def test_ravel_pytree_matches_jax(device):
    """``fnarray.flatten_util.ravel_pytree`` against ``jax.flatten_util.ravel_pytree``: the flat vector (leaves
    promoted, ``None`` skipped), ``unravel``'s leaves (shapes and dtypes back), its errors, and ``grad``/``vmap``
    through it."""
    from jax.flatten_util import ravel_pytree as jax_ravel

    import fnarray as fa
    import fnarray.numpy as fnp
    from fnarray.flatten_util import ravel_pytree

    tree = {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "b": (np.int32(3), np.ones(2, np.float16)),
            "c": None}
    with fa.default_device(device):
        flat, unravel = ravel_pytree(tree)
        want, jax_unravel = jax_ravel(tree)
        assert flat.dtype == want.dtype and flat.shape == want.shape
        np.testing.assert_array_equal(np.asarray(flat), np.asarray(want))
        back, jax_back = unravel(flat * 2), jax_unravel(want * 2)
        for x, y in zip(fa.tree_util.tree_leaves(back), jax.tree_util.tree_leaves(jax_back), strict=True):
            assert x.shape == y.shape and x.dtype == y.dtype
            np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
        assert back["c"] is None
        with pytest.raises(ValueError, match=r"shape \(9,\).*got shape \(3,\)"):
            unravel(flat[:3])
        with pytest.raises(TypeError, match="expects dtype float32.*got float16"):
            unravel(flat.astype(fnp.float16))
        g = fa.grad(lambda t: fnp.sum(ravel_pytree(t)[0] ** 2))({"w": fnp.arange(3.0), "v": fnp.ones((2, 2))})
        np.testing.assert_array_equal(np.asarray(g["w"]), [0.0, 2.0, 4.0])
        np.testing.assert_array_equal(np.asarray(g["v"]), np.full((2, 2), 2.0))
        rows = fa.vmap(lambda x: ravel_pytree({"x": x, "y": 2 * x})[0])(fnp.ones((4, 3)))
        np.testing.assert_array_equal(np.asarray(rows), np.repeat([[1.0] * 3 + [2.0] * 3], 4, axis=0))
        assert ravel_pytree({})[0].shape == (0,) and ravel_pytree({})[0].dtype == jax_ravel({})[0].dtype
