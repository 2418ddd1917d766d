"""Pytrees on ``optree`` (mirrors ``jax.tree_util``).

Containers are tuples, lists, dicts, namedtuples, ``None`` (an empty node, as
in JAX) and classes registered with ``register_pytree_node`` or
``register_dataclass``. Everything else is a leaf. All fnarray pytrees live in
optree's ``"fnarray"`` namespace, so registrations do not leak into other
libraries that use optree.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable

import optree

from fnarray.core.errors import PyTreeError

__all__ = ["tree_map", "tree_leaves", "tree_flatten", "tree_unflatten", "tree_structure",
           "tree_reduce", "tree_all", "tree_transpose", "register_pytree_node", "register_dataclass",
           "register_pytree_node_class", "treedef_is_leaf", "PyTreeDef", "NAMESPACE", "tree_map_with_path",
           "keystr"]

NAMESPACE = "fnarray"
PyTreeDef = optree.PyTreeSpec
_KW = {"none_is_leaf": False, "namespace": NAMESPACE}


def tree_flatten(tree, is_leaf: Callable[[Any], bool] | None = None):
    """``(leaves, treedef)`` of ``tree``, leaves in a deterministic order (dict keys sorted)."""
    return optree.tree_flatten(tree, is_leaf=is_leaf, **_KW)


def tree_unflatten(treedef, leaves):
    """Rebuild a pytree of structure ``treedef`` from ``leaves``.

    Raises:
      PyTreeError: ``leaves`` is not a sequence of exactly ``treedef.num_leaves`` leaves.
      TypeError: ``treedef`` is not a tree structure.
    """
    try:
        return optree.tree_unflatten(treedef, leaves)
    except (ValueError, TypeError, AttributeError) as e:
        if not isinstance(treedef, optree.PyTreeSpec):
            raise TypeError(f"tree_unflatten: treedef must be a tree structure (from tree_flatten or "
                            f"tree_structure), got {type(treedef).__name__}") from e
        try:
            n = len(leaves)
        except TypeError:
            raise PyTreeError(f"tree_unflatten: leaves must be a list of leaves, got {type(leaves).__name__}; "
                              f"{treedef} takes {treedef.num_leaves}") from e
        raise PyTreeError(f"tree_unflatten: {treedef} takes {treedef.num_leaves} leaves, got {n} "
                          f"({type(leaves).__name__}); pass the leaves of a tree of this structure, in "
                          f"tree_flatten's order") from e


def describe_mismatch(names, trees) -> str | None:
    """``None`` when every tree has the structure of the first, else a sentence naming the first that differs.

    Args:
      names: a name per tree for the message (``"updates"``, ``"params"``).
      trees: the pytrees to compare.
    """
    first = optree.tree_structure(trees[0], **_KW)
    for name, t in zip(names[1:], trees[1:], strict=True):
        s = optree.tree_structure(t, **_KW)
        if s != first:
            return (f"{names[0]} has structure {first} ({first.num_leaves} leaves) but {name} has {s} "
                    f"({s.num_leaves} leaves)")
    return None


def tree_leaves(tree, is_leaf=None) -> list:
    return optree.tree_leaves(tree, is_leaf=is_leaf, **_KW)


def tree_structure(tree, is_leaf=None):
    return optree.tree_structure(tree, is_leaf=is_leaf, **_KW)


def tree_map(f: Callable, tree, *rest, is_leaf=None):
    """Apply ``f`` to corresponding leaves of ``tree`` and ``rest`` (which share its structure).

    Raises ``ValueError`` naming both structures when they differ.
    """
    return optree.tree_map(f, tree, *rest, is_leaf=is_leaf, **_KW)


def tree_map_with_path(f: Callable, tree, *rest, is_leaf=None):
    return optree.tree_map_with_path(f, tree, *rest, is_leaf=is_leaf, **_KW)


def keystr(path) -> str:
    return "".join(f"[{k!r}]" for k in path)


_NO_INIT = object()


def tree_reduce(f: Callable, tree, initializer=_NO_INIT, is_leaf=None):
    """Fold ``f`` over the leaves of ``tree`` (``functools.reduce`` semantics)."""
    leaves = tree_leaves(tree, is_leaf)
    if initializer is _NO_INIT:
        return functools.reduce(f, leaves)
    return functools.reduce(f, leaves, initializer)


def tree_all(tree) -> bool:
    return all(tree_leaves(tree))


def tree_transpose(outer_treedef, inner_treedef, pytree):
    return optree.tree_transpose(outer_treedef, inner_treedef, pytree)


def treedef_is_leaf(treedef) -> bool:
    return treedef.num_nodes == 1 and treedef.num_leaves == 1


def register_pytree_node(cls: type, flatten: Callable, unflatten: Callable):
    """Register ``cls`` as a container (as ``jax.tree_util.register_pytree_node``).

    Args:
      flatten: ``obj -> (children, aux_data)``; ``aux_data`` must be hashable.
      unflatten: ``(aux_data, children) -> obj``.
    """
    optree.register_pytree_node(cls, flatten, lambda aux, children: unflatten(aux, list(children)),
                                namespace=NAMESPACE)
    return cls


def register_pytree_node_class(cls: type):
    """Class decorator using ``cls.tree_flatten`` and the classmethod ``cls.tree_unflatten``."""
    return register_pytree_node(cls, lambda o: o.tree_flatten(), cls.tree_unflatten)


def register_dataclass(cls: type, data_fields=None, meta_fields=None):
    """Register a dataclass: ``data_fields`` are children, ``meta_fields`` static (hashable).

    Without field lists, every field is a child unless its metadata has ``static=True``.
    """
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"register_dataclass needs a dataclass, got {cls!r}")
    if data_fields is None:
        fs = dataclasses.fields(cls)
        data_fields = [f.name for f in fs if not f.metadata.get("static", False)]
        meta_fields = [f.name for f in fs if f.metadata.get("static", False)]
    data_fields, meta_fields = list(data_fields), list(meta_fields or [])

    def flatten(o):
        return [getattr(o, n) for n in data_fields], tuple(getattr(o, n) for n in meta_fields)

    def unflatten(aux, children):
        return cls(**dict(zip(data_fields, children, strict=True)), **dict(zip(meta_fields, aux, strict=True)))

    return register_pytree_node(cls, flatten, unflatten)
