"""``lax.map``: apply a function to every slice along the leading axis, sequentially (``jax.lax.map``)."""

from __future__ import annotations

from fnarray import tree_util
from fnarray.core.errors import ShapeError, check_callable

__all__ = ["map"]


def _map(f, xs, *, batch_size: int | None = None):
    """``stack([f(x) for x in xs])`` over the leading axis of the pytree ``xs``, as a ``scan`` (``jax.lax.map``).

    Args:
      f: a function of one slice (a pytree like ``xs`` without its leading axis).
      xs: a pytree of arrays sharing the leading axis length ``n``.
      batch_size: when given, ``f`` runs under ``vmap`` on ``batch_size`` slices per step
        (``n // batch_size`` steps, then the remainder in one more ``vmap``), as JAX's.
    Returns:
      the pytree of ``f``'s outputs, each with a leading axis of length ``n``.
    Raises:
      ShapeError: the leaves of ``xs`` differ in leading length; ValueError: a ``batch_size`` below 1.
    """
    from fnarray import numpy as fnp
    from fnarray.transforms.batching import vmap
    from fnarray.transforms.control_flow import scan

    check_callable(f, "map")
    flat, treedef = tree_util.tree_flatten(xs)
    flat = [fnp.asarray(x) for x in flat]
    lengths = {x.shape[0] if x.ndim else None for x in flat}
    if len(lengths) != 1 or None in lengths:
        raise ShapeError(f"map: every leaf of xs needs the same leading axis; got shapes "
                         f"{[tuple(x.shape) for x in flat]}")
    n = lengths.pop()
    if batch_size is None:
        _, ys = scan(lambda carry, x: (carry, f(x)), None, xs)
        return ys
    if int(batch_size) < 1:
        raise ValueError(f"map: batch_size must be a positive int, got {batch_size}")
    bs = int(batch_size)
    steps, rem = divmod(n, bs)
    fv = vmap(f)
    parts = []
    if steps:
        main = [fnp.reshape(x[:steps * bs], (steps, bs) + x.shape[1:]) for x in flat]
        _, ys = scan(lambda carry, x: (carry, fv(x)), None, tree_util.tree_unflatten(treedef, main))
        parts.append(tree_util.tree_map(lambda y: fnp.reshape(y, (steps * bs,) + y.shape[2:]), ys))
    if rem:
        parts.append(fv(tree_util.tree_unflatten(treedef, [x[steps * bs:] for x in flat])))
    if len(parts) == 1:
        return parts[0]
    return tree_util.tree_map(lambda a, b: fnp.concatenate([a, b], axis=0), *parts)


map = _map  # noqa: A001  (the name JAX users type: jax.lax.map)
map.__name__ = "map"
