"""A JAX program with gradient checkpointing, run as written and after the import rewrite (issue 25 item 5).

Modelled on the topics of JAX's gradient-checkpointing notebook ("Control autodiff's saved values with
jax.checkpoint"): a small MLP whose layers are named with ``checkpoint_name``, its gradient under each
policy (``dots_saveable``, ``dots_with_no_batch_dims_saveable``, ``save_only_these_names``,
``save_any_names_but_these``, ``nothing_saveable``, the default), the residuals ``vjp``'s function holds,
a checkpointed block applied three times (nested remat) and a jitted training loop. The code is our own.
``tests/jax_port.py`` runs it under JAX and under fnarray and compares every printed number.
"""

from __future__ import annotations

import pytest

from jax_port import assert_port_matches

pytest.importorskip("jax")

PROGRAM = '''
import jax
import jax.numpy as jnp
from jax.ad_checkpoint import checkpoint_name


def predict(params, x):
    for i, (w, b) in enumerate(params):
        x = checkpoint_name(jnp.dot(x, w) + b, f"layer{i}")
        x = jnp.tanh(x)
    return x


def loss(params, x, y):
    return jnp.mean((predict(params, x) - y) ** 2)


key = jax.random.PRNGKey(0)
sizes = [3, 8, 8, 2]
params = []
for m, n in zip(sizes[:-1], sizes[1:]):
    key, k1, k2 = jax.random.split(key, 3)
    params.append((jax.random.normal(k1, (m, n)) / jnp.sqrt(m), jax.random.normal(k2, (n,)) * 0.1))
x = jnp.linspace(-1.0, 1.0, 12).reshape(4, 3)
y = jnp.stack([jnp.sin(x[:, 0]), jnp.cos(x[:, 1])], axis=1)

policies = {
    "default": None,
    "dots": jax.checkpoint_policies.dots_saveable,
    "no_batch_dims": jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
    "names": jax.checkpoint_policies.save_only_these_names("layer0", "layer2"),
    "but": jax.checkpoint_policies.save_any_names_but_these("layer1"),
    "nothing": jax.checkpoint_policies.nothing_saveable,
}
ref = jax.grad(loss)(params, x, y)
for name, policy in policies.items():
    g = jax.jit(jax.grad(jax.checkpoint(loss, policy=policy)))(params, x, y)
    diff = max(float(jnp.max(jnp.abs(a - b))) for a, b in zip(jax.tree_util.tree_leaves(g),
                                                               jax.tree_util.tree_leaves(ref)))
    print(name, "max difference from the plain gradient", round(diff, 6))
    print(name, "gradient of the first layer", jnp.round(g[0][0][0], 4))
    _, f_vjp = jax.vjp(jax.checkpoint(loss, policy=policy), params, x, y)
    print(name, "number of saved residuals", len(jax.tree_util.tree_leaves(f_vjp)))

for policy_name in ("names", "dots"):
    _, f_vjp = jax.vjp(jax.checkpoint(loss, policy=policies[policy_name]), params, x, y)
    print(policy_name, "residual shapes", sorted(tuple(r.shape) for r in jax.tree_util.tree_leaves(f_vjp)))


@jax.checkpoint
def block(w, h):
    return jnp.sin(jnp.dot(h, w))


def deep(w, h):
    for _ in range(3):
        h = block(w, h)
    return h.sum()


w = jnp.eye(3) * 0.9
print("nested remat", jax.value_and_grad(deep)(w, x))
step = jax.jit(lambda p: jax.tree_util.tree_map(lambda a, b: a - 0.1 * b, p, jax.grad(
    jax.checkpoint(loss, policy=policies["dots"]))(p, x, y)))
p = params
for i in range(5):
    p = step(p)
    print("step", i, "loss", round(float(loss(p, x, y)), 6))
'''


def test_checkpoint_policies_program_prints_what_jax_prints():
    expected, got = assert_port_matches(PROGRAM)
    assert "number of saved residuals" in got and "step 4 loss" in got
