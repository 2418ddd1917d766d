"""``jax.experimental.shard_map``'s spelling (deprecated in JAX 0.8, still in JAX 0.10): ``mesh``, ``in_specs`` and
``out_specs`` positional, ``check_rep`` for ``check_vma``. Programs written before ``jax.shard_map`` import it."""

from __future__ import annotations

from fnarray.transforms.shard_map import shard_map as _shard_map

__all__ = ["shard_map"]


def shard_map(f, mesh, in_specs, out_specs, check_rep: bool = True, auto=frozenset()):
    """``fnarray.shard_map(f, mesh=mesh, in_specs=in_specs, out_specs=out_specs, check_vma=check_rep)``.

    Args:
      f, mesh, in_specs, out_specs: as ``fnarray.shard_map``'s; check_rep: its ``check_vma``.
      auto: JAX's automatic axes; must be empty (every mesh axis is manual).
    Returns:
      The mapped function.
    Raises:
      ``NotImplementedError`` for a non-empty ``auto``; otherwise as ``fnarray.shard_map``.
    """
    if auto:
        raise NotImplementedError("shard_map(auto=...): partially manual meshes are not supported; every mesh axis "
                                  "is manual")
    return _shard_map(f, mesh=mesh, in_specs=in_specs, out_specs=out_specs, check_vma=check_rep)
