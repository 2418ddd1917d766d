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


# JAX 0.10 infers shard_map's in_specs under jit too (shardings are part of its types). fnarray infers them from
# the shardings of jit's arguments and of reshard / with_sharding_constraint results; a jitted function that does
# so is keyed by its arguments' shardings (a differently sharded call retraces, as JAX's does).
JIT_INFER_PROGRAM = r'''
import numpy as np
import jax
import jax.numpy as jnp
from jax.sharding import AxisType, PartitionSpec as P

mesh = jax.make_mesh((4, 2), ("x", "y"), axis_types=(AxisType.Explicit,) * 2)
with jax.set_mesh(mesh):
    a = jax.device_put(np.arange(32.0, dtype=np.float32).reshape(8, 4) / 10, P("x", "y"))
    b = jax.device_put(np.linspace(0, 1, 8).astype(np.float32), P("x"))
    c = np.arange(3.0, dtype=np.float32)

    @jax.shard_map(out_specs=P("x", "y"))
    def f(a, b, c):
        print("block", a.shape, b.shape, c.shape)
        return a * 2 + b[:, None] + jax.lax.psum(c.sum(), "x")

    print("eager", float(f(a, b, c).sum()), jax.typeof(f(a, b, c)))
    g = jax.jit(lambda a, b, c: f(a, b, c) + 1)
    print("jit", float(g(a, b, c).sum()), jax.typeof(g(a, b, c)))
    a_rows = jax.device_put(np.asarray(a), P("x", None))
    print("jit, rows only", float(g(a_rows, b, c).sum()), jax.typeof(g(a_rows, b, c)))
    print("jit, first again", float(g(a, b, c).sum()))

    @jax.jit
    def h(a, c):
        a3 = jax.sharding.reshard(a * 3, P("x", "y"))
        ones = jax.sharding.reshard(jnp.ones(8), P("x"))
        return f(a3, ones, c)
    print("jit, resharded values", float(h(a, c).sum()), jax.typeof(h(a, c)))
    print("nested jit", float(jax.jit(lambda a, b: g(a, b, c))(a, b).sum()))
    # shardings propagated through elementwise operations; a value made inside jit from constants is replicated
    print("computed", float(jax.jit(lambda a, b: f(a * 3 - 1, b * 2, c))(a, b).sum()))
    print("replicated", float(jax.jit(lambda a, b: f(a, b, jnp.ones(3) * 2))(a, b).sum()))
'''


def test_shard_map_infers_in_specs_under_jit_as_jax_on_8_host_devices():
    expected, got = assert_port_matches(JIT_INFER_PROGRAM, env={
        "XLA_FLAGS": "--xla_force_host_platform_device_count=8", "JAX_PLATFORMS": "cpu"}, rtol=1e-5, atol=1e-5,
        timeout=300)
    assert "jit, rows only" in got and "nested jit" in got
    assert expected.count("block") == got.count("block")   # traced as often as JAX traces


def test_in_specs_of_a_value_computed_under_jit_are_not_inferred():
    import numpy as np

    import fnarray as fa
    import fnarray.numpy as fnp
    from fnarray.sharding import AxisType, P
    mesh = fa.make_mesh((1,), ("x",), axis_types=(AxisType.Explicit,))
    f = fa.shard_map(lambda v: v * 2, out_specs=P("x"), mesh=mesh)
    with pytest.raises(ValueError, match="computed inside jit"):
        fa.jit(lambda v: f(fnp.cumsum(v)))(np.ones(4, np.float32))
    np.testing.assert_array_equal(np.asarray(fa.jit(f)(np.ones(4, np.float32))), np.full(4, 2.0))


CONTRADICT_PROGRAM = r'''
import numpy as np
import jax
from jax.sharding import AxisType, PartitionSpec as P

mesh = jax.make_mesh((4, 2), ("x", "y"), axis_types=(AxisType.Explicit,) * 2)
with jax.set_mesh(mesh):
    a = jax.device_put(np.arange(32.0, dtype=np.float32).reshape(8, 4), P("x", "y"))
    f = jax.jit(jax.shard_map(lambda v: v * 2, in_specs=P("x", None), out_specs=P("x", None)))
    try:
        f(a)
        print("accepted")
    except ValueError:
        print("ValueError")
    print("matching", float(jax.jit(jax.shard_map(lambda v: v * 2, in_specs=P("x", "y"),
                                                  out_specs=P("x", "y")))(a).sum()))
'''


def test_in_specs_that_contradict_a_jit_arguments_sharding_raise_as_jax():
    expected, got = assert_port_matches(CONTRADICT_PROGRAM, env={
        "XLA_FLAGS": "--xla_force_host_platform_device_count=8", "JAX_PLATFORMS": "cpu"}, timeout=300)
    assert "ValueError" in expected and "ValueError" in got
