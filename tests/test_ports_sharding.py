"""A JAX program with ``shard_map`` on 8 host devices, run as written under JAX and after the import rewrite of
``tests/jax_port.py`` under fnarray: the printed numbers must agree.

The program follows the topics of JAX's ``shard_map`` documentation notebook (written here, not copied): a
blocked matmul whose partial sums meet in a ``psum``, the same with ``psum_scatter`` leaving the result split,
an ``all_gather``, a ring of ``ppermute``s, a data-parallel SGD step with ``pmean`` under ``jit`` and ``grad``,
and JAX 0.10's ambient mesh with ``in_specs`` inferred from the arguments' shardings.

JAX 0.10 refuses ``in_specs`` that split an unsharded input over an Explicit mesh axis (``make_mesh``'s
default); fnarray splits it (it refuses only a global array sharded otherwise). The program uses Auto axes
where it hands unsharded inputs to ``shard_map``, so JAX accepts it. Its training step passes
``check_vma=False``: with the check on, JAX 0.10 differentiates by varying-axes types, and the gradient of a
replicated parameter comes out already summed over the devices (an implicit ``psum``); fnarray's ``grad``
inside ``shard_map`` gives each device's own gradient, as JAX does with ``check_vma=False``.
"""

from __future__ import annotations

import pytest

from jax_port import assert_port_matches, rewrite_imports

pytest.importorskip("jax")

PROGRAM = r'''
from functools import partial

import numpy as np
import jax
import jax.numpy as jnp
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec as P

print("devices", len(jax.devices()))
mesh = Mesh(np.array(jax.devices()).reshape(4, 2), ("x", "y"))  # Auto axes: unsharded inputs are split
a = jnp.arange(8 * 16, dtype=jnp.float32).reshape(8, 16) / 100
b = jnp.arange(16 * 4, dtype=jnp.float32).reshape(16, 4) / 50


@jax.jit
@partial(jax.shard_map, mesh=mesh, in_specs=(P("x", "y"), P("y", None)), out_specs=P("x", None))
def matmul_psum(a_block, b_block):
    print("block shapes", a_block.shape, b_block.shape)
    return jax.lax.psum(jnp.dot(a_block, b_block), "y")


c = matmul_psum(a, b)
print("psum matmul", c.shape, float(c.sum()), bool(jnp.allclose(c, a @ b, atol=1e-4)))


@jax.jit
@partial(jax.shard_map, mesh=mesh, in_specs=(P("x", "y"), P("y", None)), out_specs=P("x", "y"))
def matmul_scatter(a_block, b_block):
    return jax.lax.psum_scatter(jnp.dot(a_block, b_block), "y", scatter_dimension=1, tiled=True)


d = matmul_scatter(a, b)
print("psum_scatter matmul", d.shape, float(d.sum()), float(jnp.abs(d - a @ b).max()) < 1e-4)

from jax.experimental.shard_map import shard_map  # the spelling of programs written before jax.shard_map

gather = jax.jit(shard_map(lambda v: jax.lax.all_gather(v, "x", tiled=True), mesh, P("x"), P(None), check_rep=False))
g = gather(jnp.arange(8.0))
print("all_gather", g.shape, g.tolist())

perm = [(i, (i + 1) % 4) for i in range(4)]
shift = jax.jit(jax.shard_map(lambda v: jax.lax.ppermute(v, "x", perm), mesh=mesh, in_specs=P("x"),
                              out_specs=P("x")))
print("ppermute ring", shift(jnp.arange(8.0)).tolist())

rng = np.random.RandomState(0)
w = jnp.asarray(rng.randn(16, 4).astype(np.float32) * 0.1)
x = jnp.asarray(rng.randn(32, 16).astype(np.float32))
y = jnp.asarray(rng.randn(32, 4).astype(np.float32))


def loss(w, x, y):
    return jnp.mean((jnp.tanh(x @ w) - y) ** 2)


@jax.jit
@partial(jax.shard_map, mesh=mesh, in_specs=(P(), P(("x", "y")), P(("x", "y"))), out_specs=(P(), P()),
         check_vma=False)
def step(w, x, y):
    value, grad = jax.value_and_grad(loss)(w, x, y)
    grad = jax.lax.pmean(grad, ("x", "y"))
    return w - 0.5 * grad, jax.lax.pmean(value, ("x", "y"))


for i in range(5):
    w, value = step(w, x, y)
    print("step", i, round(float(value), 5))
print("full-batch loss", round(float(loss(w, x, y)), 5))

explicit = jax.make_mesh((4, 2), ("x", "y"), axis_types=(AxisType.Explicit,) * 2)
with jax.set_mesh(explicit):
    xs = jax.device_put(x, P("x"))
    print("typeof", jax.typeof(xs))

    @jax.shard_map(out_specs=P("x"))
    def centred(block):
        return block - jax.lax.pmean(block.mean(0), "x")

    z = centred(xs)
    print("inferred in_specs", z.shape, round(float(jnp.abs(z.mean(0)).max()), 5))
    print("out sharding", z.sharding.spec)
'''


def test_rewrite_touches_imports_only():
    new = rewrite_imports(PROGRAM)
    assert "import fnarray as jax" in new and "from fnarray.sharding import AxisType, Mesh" in new
    assert "from fnarray.experimental.shard_map import shard_map" in new
    assert [ln for ln in PROGRAM.splitlines() if "import" not in ln] == \
        [ln for ln in new.splitlines() if "import" not in ln]


def test_shard_map_program_on_8_host_devices_ports_by_imports():
    expected, got = assert_port_matches(PROGRAM, env={"XLA_FLAGS": "--xla_force_host_platform_device_count=8",
                                                     "JAX_PLATFORMS": "cpu"}, rtol=1e-4, atol=1e-5, timeout=300)
    assert "step 4" in got and "devices 8" in got and expected.count("\n") == got.count("\n")
