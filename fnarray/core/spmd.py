"""The SPMD primitives: ``shard_map`` (a per-shard program over a mesh) and ``sharding_constraint``.

``shard_map[program, mesh, in_specs, out_specs]``: its operands are global arrays; each device runs
``program`` on its shard (the dimensions that ``in_specs[i]`` splits are divided by their mesh axes) and the
outputs are assembled from the shards as ``out_specs`` say. The mesh axes are named axes inside
``program``, so its collectives combine the devices along them. The jax backend lowers it to
``jax.shard_map``; the other backends never see it (a mesh of one device runs as a named ``vmap``:
``fnarray.transforms.shard_map``).

``sharding_constraint[sharding]``: the identity on values; on the jax backend it asks XLA to lay the value
out as ``sharding`` says (``jax.lax.with_sharding_constraint``), elsewhere a copy.
"""

from __future__ import annotations

from fnarray.core.errors import ShapeError
from fnarray.core.primitives import Primitive
from fnarray.core.shaped import ShapedArray

__all__ = ["shard_map_p", "sharding_constraint_p", "global_aval", "local_aval"]


def _parts(part, mesh) -> int:
    if part is None:
        return 1
    names = part if isinstance(part, tuple) else (part,)
    n = 1
    for a in names:
        n *= mesh.shape[a]
    return n


def _padded(spec, ndim):
    spec = tuple(spec)
    if len(spec) > ndim:
        raise ShapeError(f"shard_map: PartitionSpec {spec!r} has more entries than the rank {ndim}")
    return spec + (None,) * (ndim - len(spec))


def local_aval(aval: ShapedArray, spec, mesh) -> ShapedArray:
    """The shard of a global ``aval`` split as ``spec`` says."""
    shape = []
    for size, part in zip(aval.shape, _padded(spec, aval.ndim), strict=True):
        k = _parts(part, mesh)
        if size % k:
            raise ShapeError(f"shard_map: dimension of size {size} of {aval.str_short()} is not divisible by {k}, "
                             f"the size of mesh axes {part!r} that its PartitionSpec {tuple(spec)!r} splits it over")
        shape.append(size // k)
    return ShapedArray(tuple(shape), aval.dtype, aval.weak_type)


def global_aval(aval: ShapedArray, spec, mesh) -> ShapedArray:
    """The global array assembled from shards of ``aval`` as ``spec`` says."""
    shape = tuple(size * _parts(part, mesh) for size, part in zip(aval.shape, _padded(spec, aval.ndim), strict=True))
    return ShapedArray(shape, aval.dtype, aval.weak_type)


def _shard_map_rule(*args, program, mesh, in_specs, out_specs):
    if len(args) != len(in_specs) or len(program.invars) != len(args):
        raise ShapeError(f"shard_map: {len(args)} operands, {len(in_specs)} in_specs, a program of "
                         f"{len(program.invars)} inputs")
    for a, s, v in zip(args, in_specs, program.invars, strict=True):
        loc = local_aval(a, s, mesh)
        if loc.shape != v.aval.shape or loc.dtype != v.aval.dtype:
            raise ShapeError(f"shard_map: operand {a.str_short()} split as {tuple(s)!r} gives shards "
                             f"{loc.str_short()}, the program takes {v.aval.str_short()}")
    return [global_aval(a.aval, s, mesh) for a, s in zip(program.outvars, out_specs, strict=True)]


shard_map_p = Primitive("shard_map", _shard_map_rule, multiple_results=True, kind="control",
                        doc="Runs a per-shard program on every device of a mesh (jax.shard_map).")


def _constraint_rule(x, *, sharding):
    return ShapedArray(x.shape, x.dtype, x.weak_type)


sharding_constraint_p = Primitive("sharding_constraint", _constraint_rule, kind="other",
                                  doc="The identity; on jax a layout for XLA (jax.lax.with_sharding_constraint).")


from fnarray.core.decompositions import defdecomposition  # noqa: E402


@defdecomposition(sharding_constraint_p)
def sharding_constraint_decomposed(x, *, sharding):
    """Backends without GSPMD: the values, copied (only meshes of one device reach them)."""
    return x
