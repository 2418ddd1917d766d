"""The jax backend's rules for the collectives and the SPMD primitives (registered into ``common.RULES``).

``shard_map`` becomes ``jax.shard_map`` over the mesh's ``jax.sharding.Mesh``, its body interpreted with the
same rule table, so the collectives inside it are ``jax.lax`` collectives over the mesh axes (XLA's
all-reduce, all-gather, reduce-scatter, all-to-all and collective-permute: gloo between CPU processes,
NCCL on NVIDIA GPUs, ICI on TPUs). ``sharding_constraint`` is ``jax.lax.with_sharding_constraint``.
fnarray already checked the outputs' replication (``check_vma`` in ``transforms/shard_map.py``), so JAX's
own check is off.

Global arrays: a fnarray ``Mesh`` of jax devices is a ``jax.sharding.Mesh`` (``native_mesh``), a global array's
buffer is a ``jax.Array`` sharded over it (``put_global``), and its ``NamedSharding`` is read back from JAX's
(``sharding_from_native``). ``JaxBackend``'s mesh hooks call these.
"""

from __future__ import annotations

import contextlib

import jax
import numpy as np
from jax import lax

from fnarray import distributed
from fnarray.core import collectives as C
from fnarray.core.shaped import ShapedArray
from fnarray.core.spmd import sharding_constraint_p, shard_map_p
from fnarray.devices.array_impl import ArrayImpl
from fnarray.devices.mesh import Mesh, PartitionSpec, known_mesh
from fnarray.devices.placement import device_put
from fnarray.devices.sharding import NamedSharding, Shard
from fnarray.lowering.jax.common import RULES, interpret, manual

__all__ = ["native_mesh", "native_sharding", "sharding_from_native", "put_global", "array_sharding",
           "addressable_shards", "addressable_devices", "shard_map_operand"]


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


# ----------------------------------------------------------------------------- meshes and global arrays


def native_mesh(mesh):
    """``mesh`` as a ``jax.sharding.Mesh`` over the devices' JAX handles."""
    handles = np.vectorize(lambda d: d.handle, otypes=[object])(mesh.devices)
    # NOTE: JAX's mesh is always Auto: fnarray's programs carry no shardings in their types, and JAX's
    # Explicit mode would ask each traced operation for a sharding rule. The types act at fnarray's level.
    return jax.sharding.Mesh(handles, mesh.axis_names)


def native_sharding(sharding):
    """A ``NamedSharding`` as JAX's (over ``mesh.jax_mesh``)."""
    return jax.sharding.NamedSharding(sharding.mesh.jax_mesh, jax.sharding.PartitionSpec(*sharding.spec))


def sharding_from_native(s, backend):
    """A fnarray ``NamedSharding`` for JAX's sharding ``s`` (a ``NamedSharding``, or any ``Sharding``: then a 1-D
    mesh over its devices, replicated) over ``backend``'s devices; a mesh made before keeps its axis types."""
    by_handle = {d.handle: d for d in backend.devices()}
    if isinstance(s, jax.sharding.NamedSharding):
        devs = np.vectorize(lambda h: by_handle[h], otypes=[object])(s.mesh.devices)
        return NamedSharding(known_mesh(devs, s.mesh.axis_names), PartitionSpec(*s.spec))
    # Another kind (GSPMD's positional sharding): a 1-D mesh over its devices, replicated.
    devs = [by_handle[h] for h in sorted(s.device_set, key=lambda h: h.id)]
    return NamedSharding(Mesh(devs, ("devices",)), PartitionSpec())


def put_global(x, sharding):
    """``jax.device_put`` of ``x`` (an ``ArrayImpl``) with the JAX sharding: each device receives its shard."""
    first = sharding.mesh.devices.flat[0]
    value = x.buf() if x.device.backend == first.backend else np.asarray(x)
    x64 = np.dtype(x.dtype).itemsize == 8
    with jax.enable_x64(True) if x64 else contextlib.nullcontext():
        buf = jax.device_put(value, sharding.jax_sharding, may_alias=False)
    return ArrayImpl.make(x.aval, first, buf, committed=True)


def array_sharding(arr, backend):
    """The ``NamedSharding`` of a jax array sharded over several devices, else ``None``."""
    s = arr.buf().sharding
    return sharding_from_native(s, backend) if len(s.device_set) > 1 else None


def addressable_shards(arr, backend) -> list:
    """A ``Shard`` per device of this process that holds a piece of ``arr`` (JAX's ``addressable_shards``)."""
    by_handle = {d.handle: d for d in backend.devices()}
    out = []
    for sh in arr.buf().addressable_shards:
        d = by_handle[sh.device]
        aval = ShapedArray(tuple(sh.data.shape), arr.dtype, arr.aval.weak_type)
        out.append(Shard(d, tuple(sh.index), sh.replica_id, ArrayImpl.make(aval, d, sh.data, committed=True)))
    return out


def addressable_devices(mesh) -> set:
    """The devices of ``mesh`` that belong to this process (``fnarray.distributed.process_index``)."""
    me = distributed.process_index()
    return {d for d in mesh.devices.flat if getattr(d.handle, "process_index", 0) == me}


def shard_map_operand(x, sharding):
    """A concrete operand of a ``shard_map`` over several jax devices, placed as ``sharding`` says unless it is so
    already. Captured constants (a NumPy ``arange`` a body made) would otherwise be copied to every device on
    every call of the compiled program (``pxla.shard_args``: measured 0.5 ms a step of
    ``benchmarks/data_parallel.py`` on 2 devices, 30% of it); placed once here, a jitted caller keeps them as its
    constants' buffers."""
    on_mesh = getattr(getattr(x, "device", None), "backend", None) == sharding.mesh.backend
    if not on_mesh or not x.buf().sharding.is_equivalent_to(sharding.jax_sharding, x.ndim):
        x = device_put(x, sharding)
    return x
