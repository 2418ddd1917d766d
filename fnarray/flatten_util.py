"""``fnarray.flatten_util``: ``ravel_pytree`` (as ``jax.flatten_util``), a pytree of arrays as one flat vector.

Research code uses it to treat all parameters as one vector: global norms, second-order and L-BFGS solvers,
Hessians over a model, flat optimizer states.
"""

from __future__ import annotations

import numpy as np

from fnarray import tree_util

__all__ = ["ravel_pytree"]


def ravel_pytree(pytree):
    """Every leaf of ``pytree`` raveled and concatenated into one 1-D array, and the function that undoes it
    (``jax.flatten_util.ravel_pytree``).

    Args:
      pytree: a pytree of arrays or scalars (``None`` and empty containers hold no leaves).

    Returns:
      ``(flat, unravel)``: ``flat`` has shape ``(total size,)`` and the leaves' promoted dtype (float32 for a tree
      without leaves); ``unravel(v)`` takes an array of that shape and dtype and returns the tree with each leaf's
      shape and dtype. Both are differentiable and work under ``jit``, ``vmap`` and ``grad``.

    Raises:
      ``unravel`` raises ``ValueError`` for an array of another shape and ``TypeError`` for another dtype.

    Example::

        >>> flat, unravel = ravel_pytree({"w": fnp.ones((2, 3)), "b": fnp.zeros(3)})
        >>> flat.shape, unravel(flat)["w"].shape
        ((9,), (2, 3))

    Source: JAX's ``jax/_src/flatten_util.py`` (its contract; written anew on fnarray's namespace).
    """
    import fnarray.numpy as fnp
    leaves, treedef = tree_util.tree_flatten(pytree)
    arrays = [fnp.asarray(x) for x in leaves]
    dtype = fnp.result_type(*arrays) if arrays else np.dtype(np.float32)
    shapes = [tuple(a.shape) for a in arrays]
    sizes = [int(np.prod(s, dtype=np.int64)) for s in shapes]
    leaf_dtypes = [a.dtype for a in arrays]
    flat = fnp.concatenate([fnp.ravel(a).astype(dtype) for a in arrays]) if arrays else fnp.zeros(0, dtype)
    total = sum(sizes)

    def unravel(vector):
        v = fnp.asarray(vector)
        if tuple(v.shape) != (total,):
            raise ValueError(f"ravel_pytree's unravel expects an array of shape ({total},), the raveled tree's, "
                             f"got shape {tuple(v.shape)}")
        if v.dtype != dtype:
            raise TypeError(f"ravel_pytree's unravel expects dtype {np.dtype(dtype).name}, the raveled tree's, got "
                            f"{v.dtype.name}; cast it with .astype first")
        pieces, start = [], 0
        for shape, size, d in zip(shapes, sizes, leaf_dtypes, strict=True):
            pieces.append(fnp.reshape(v[start:start + size], shape).astype(d))
            start += size
        return tree_util.tree_unflatten(treedef, pieces)

    return flat, unravel
