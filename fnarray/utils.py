"""``fnarray.utils``: MLX's tree helpers (``mlx.utils``) over dotted names, for ports of MLX programs.

MLX names each leaf of a nested dict/list by the keys on its path joined with dots (``"layers.0.weight"``):
``tree_flatten`` gives ``[(name, leaf), ...]``, ``tree_unflatten`` rebuilds the nested dicts and lists (keys
that are all digits become list positions), as checkpoints (``.npz``, ``.safetensors``) and
``Module.parameters()`` name their arrays. ``fnarray.tree_util.tree_unflatten`` accepts such a list too.
"""

from __future__ import annotations

from typing import Any, Callable

__all__ = ["tree_flatten", "tree_unflatten", "tree_map"]


def tree_flatten(tree, prefix: str = "", is_leaf: Callable[[Any], bool] | None = None) -> list:
    """``[(dotted_name, leaf), ...]`` of nested lists, tuples and dicts (``mlx.utils.tree_flatten``).

    Args:
      tree: nested ``dict``/``list``/``tuple``; anything else is a leaf.
      prefix: prepended to every name (MLX's argument; a leading dot is dropped).
      is_leaf: a node for which it returns True is a leaf.
    Returns:
      A list of ``(name, leaf)`` in the containers' order (dict insertion order, as MLX).
    """
    if (is_leaf is None or not is_leaf(tree)) and isinstance(tree, (list, tuple)):
        return [p for i, t in enumerate(tree) for p in tree_flatten(t, f"{prefix}.{i}", is_leaf)]
    if (is_leaf is None or not is_leaf(tree)) and isinstance(tree, dict):
        return [p for k, t in tree.items() for p in tree_flatten(t, f"{prefix}.{k}", is_leaf)]
    return [(prefix[1:] if prefix.startswith(".") else prefix, tree)]


def tree_unflatten(tree: list):
    """Nested dicts and lists from ``[(dotted_name, value), ...]`` (``mlx.utils.tree_unflatten``).

    A level whose keys are all digits becomes a list (positions ``0..n-1``); other levels are dicts.

    Args:
      tree: a list of ``(name, value)`` pairs, names joined with dots.
    Returns:
      The nested structure (a bare value for the single name ``""``).
    Raises:
      ``ValueError`` for a name that is both a leaf and a container, or list positions with gaps.
    """
    if len(tree) == 1 and tree[0][0] == "":
        return tree[0][1]
    children: dict = {}
    for name, value in tree:
        head, dot, rest = str(name).partition(".")
        if not dot:
            if head in children:
                raise ValueError(f"tree_unflatten: the name {name!r} appears twice or is also a container")
            children[head] = [("", value)]
        else:
            children.setdefault(head, []).append((rest, value))
    out = {k: tree_unflatten(v) for k, v in children.items()}
    if out and all(k.isdigit() for k in out):
        idx = sorted(int(k) for k in out)
        if idx != list(range(len(idx))):
            raise ValueError(f"tree_unflatten: list positions {idx} have gaps; expected 0..{len(idx) - 1}")
        return [out[str(i)] for i in idx]
    return out


def tree_map(fn: Callable, tree, *rest, is_leaf: Callable[[Any], bool] | None = None):
    """``fn`` applied to every leaf of nested lists/tuples/dicts (``mlx.utils.tree_map``), structure kept.

    Args:
      fn: called as ``fn(leaf, *rest_leaves)``; tree: the structure; rest: trees of the same structure.
      is_leaf: a node for which it returns True is a leaf.
    Returns:
      A tree of the same containers holding ``fn``'s results.
    """
    if (is_leaf is None or not is_leaf(tree)) and isinstance(tree, (list, tuple)):
        out = [tree_map(fn, t, *[r[i] for r in rest], is_leaf=is_leaf) for i, t in enumerate(tree)]
        return type(tree)(out) if isinstance(tree, list) or not hasattr(tree, "_fields") else type(tree)(*out)
    if (is_leaf is None or not is_leaf(tree)) and isinstance(tree, dict):
        return {k: tree_map(fn, t, *[r[k] for r in rest], is_leaf=is_leaf) for k, t in tree.items()}
    return fn(tree, *rest)
