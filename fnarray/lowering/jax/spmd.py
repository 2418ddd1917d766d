"""The jax backend's rules for the collectives and the SPMD primitives (registered into ``common.RULES``).

``shard_map`` becomes ``jax.shard_map`` over the mesh's ``jax.sharding.Mesh``, its body interpreted with the
same rule table, so the collectives inside it are ``jax.lax`` collectives over the mesh axes (XLA's
all-reduce, all-gather, reduce-scatter, all-to-all and collective-permute: gloo between CPU processes,
NCCL on NVIDIA GPUs, ICI on TPUs). ``sharding_constraint`` is ``jax.lax.with_sharding_constraint``.
fnarray already checked the outputs' replication (``check_vma`` in ``transforms/shard_map.py``), so JAX's
own check is off.
"""

from __future__ import annotations

import jax
from jax import lax

from fnarray.core import collectives as C
from fnarray.core.spmd import sharding_constraint_p, shard_map_p
from fnarray.lowering.jax.common import RULES, interpret, manual

__all__: list = []


def _name(axis_name):
    return tuple(axis_name) if isinstance(axis_name, tuple) else axis_name


def _groups(g):
    return None if g is None else [list(x) for x in g]


RULES[C.psum_p] = lambda x, *, axis_name, axis_index_groups=None: lax.psum(
    x, _name(axis_name), axis_index_groups=_groups(axis_index_groups))
RULES[C.pmax_p] = lambda x, *, axis_name, axis_index_groups=None: lax.pmax(
    x, _name(axis_name), axis_index_groups=_groups(axis_index_groups))
RULES[C.pmin_p] = lambda x, *, axis_name, axis_index_groups=None: lax.pmin(
    x, _name(axis_name), axis_index_groups=_groups(axis_index_groups))
RULES[C.all_gather_p] = lambda x, *, axis_name, axis, tiled, axis_size, axis_index_groups=None: lax.all_gather(
    x, axis_name, axis=axis, tiled=tiled, axis_index_groups=_groups(axis_index_groups))
RULES[C.psum_scatter_p] = lambda x, *, axis_name, scatter_dimension, tiled, axis_size: lax.psum_scatter(
    x, axis_name, scatter_dimension=scatter_dimension, tiled=tiled)
def _all_to_all(x, *, axis_name, split_axis, concat_axis, tiled, axis_size):
    if tiled:
        return lax.all_to_all(x, axis_name, split_axis, concat_axis, tiled=True)
    # Untiled, with jax.vmap's shapes (the receivers' axis removed, the senders' inserted at concat_axis):
    # as a tiled exchange of blocks of one along a leading axis.
    import jax.numpy as jnp
    y = jnp.expand_dims(jnp.moveaxis(x, split_axis, 0), 1)         # (receiver, 1, rest)
    y = lax.all_to_all(y, axis_name, 0, 1, tiled=True)             # (1, sender, rest)
    return jnp.moveaxis(y[0], 0, concat_axis)


RULES[C.all_to_all_p] = _all_to_all
RULES[C.ppermute_p] = lambda x, *, axis_name, perm, axis_size: lax.ppermute(x, axis_name, perm)
RULES[C.axis_index_p] = lambda *, axis_name, axis_size: lax.axis_index(axis_name)


def _spec(s):
    return jax.sharding.PartitionSpec(*s)


def _shard_map(*args, program, mesh, in_specs, out_specs):
    def body(*xs):
        manual.depth = getattr(manual, "depth", 0) + 1
        try:
            return tuple(interpret(program, list(xs)))
        finally:
            manual.depth -= 1
    fn = jax.shard_map(body, mesh=mesh.jax_mesh, in_specs=tuple(_spec(s) for s in in_specs),
                       out_specs=tuple(_spec(s) for s in out_specs), check_vma=False)
    return list(fn(*args))


RULES[shard_map_p] = _shard_map


def _constraint(x, *, sharding):
    if sharding.mesh.backend != "jax" or sharding.mesh.size == 1:
        return x
    return lax.with_sharding_constraint(x, sharding.jax_sharding)


RULES[sharding_constraint_p] = _constraint
