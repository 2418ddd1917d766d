"""``fnarray.tree``: the short pytree names (as ``jax.tree``): ``fa.tree.map(f, tree)`` and friends.

Each function is the ``fnarray.tree_util`` function of the longer name (``map`` is
``tree_map``, ``leaves_with_path`` is ``tree_leaves_with_path``...), so both spellings
share one implementation and the ``"fnarray"`` optree namespace.
"""

from __future__ import annotations

from fnarray import tree_util as _tu

__all__ = ["all", "flatten", "flatten_with_path", "leaves", "leaves_with_path", "map", "map_with_path", "reduce",
           "structure", "transpose", "unflatten"]

# Plain assignments (no `def`): one implementation per function, the one in tree_util.
all = _tu.tree_all  # noqa: A001 (jax.tree.all)
flatten = _tu.tree_flatten
flatten_with_path = _tu.tree_flatten_with_path
leaves = _tu.tree_leaves
leaves_with_path = _tu.tree_leaves_with_path
map = _tu.tree_map  # noqa: A001 (jax.tree.map)
map_with_path = _tu.tree_map_with_path
reduce = _tu.tree_reduce
structure = _tu.tree_structure
transpose = _tu.tree_transpose
unflatten = _tu.tree_unflatten
