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

from fnarray.core.errors import PyTreeError, check_callable

__all__ = ["tree_map", "tree_leaves", "tree_flatten", "tree_unflatten", "tree_structure",
           "tree_reduce", "tree_all", "tree_transpose", "register_pytree_node", "register_dataclass",
           "register_pytree_node_class", "treedef_is_leaf", "PyTreeDef", "NAMESPACE", "tree_map_with_path",
           "tree_flatten_with_path", "tree_leaves_with_path", "keystr", "DictKey", "SequenceKey", "GetAttrKey",
           "FlattenedIndexKey", "is_array", "is_inexact_array", "partition", "combine", "Partial", "all_leaves",
           "register_static", "treedef_children", "treedef_tuple"]

NAMESPACE = "fnarray"
PyTreeDef = optree.PyTreeSpec
_KW = {"none_is_leaf": False, "namespace": NAMESPACE}


_NO_LEAVES = object()

#: structure -> the equal structure whose dicts rebuild in sorted key order (``_sorted_keys``). optree's structures
#: remember a dict's insertion order and rebuild it; JAX's rebuild sorted (``tree_unflatten``, ``tree_map``, the
#: dicts ``jit``, ``grad`` and ``vmap`` return and pass to the function). Equal structures hash equal whatever that
#: order, so one lookup (~0.3 us, no Python call: the hot flattens inline it) serves every flatten.
_SORTED: dict = {}
_DICT, _DEFAULTDICT = int(optree.PyTreeKind.DICT), int(optree.PyTreeKind.DEFAULTDICT)   # (records hold ints)


def _sorted_def(treedef):
    """``treedef`` rebuilding its dicts in sorted key order: ``_SORTED``'s entry, made on a miss."""
    try:
        return _SORTED[treedef]
    except (KeyError, TypeError, ValueError):   # a new structure, or node data that does not compare (an array)
        return _sorted_keys(treedef)


def _sorted_node(node):
    """One node record of a pickled structure, its dict's insertion order replaced by the sorted keys.

    A dict whose keys do not compare (``int`` and ``str`` mixed: JAX raises ``ValueError``) keeps optree's order,
    insertion order: MLX's trees and ``fnarray.save``'s checkpoints hold such dicts (an int key at the root)."""
    if node[0] != _DICT and node[0] != _DEFAULTDICT:
        return node
    keys = node[2][1] if node[0] == _DEFAULTDICT else node[2]   # (a defaultdict's data: (factory, keys))
    return node if list(node[7]) == list(keys) else node[:7] + (dict.fromkeys(keys),)


def _sorted_keys(treedef):
    """``treedef`` with every dict and defaultdict node rebuilding its keys in sorted order (JAX's), kept in
    ``_SORTED``; ``treedef`` itself where none is out of order. Source: optree's pickled node records
    ``(kind, arity, node_data, entries, custom, leaves, nodes, original_keys)``, whose last field is the
    insertion order ``unflatten`` restores."""
    try:
        nodes, *rest = treedef.__getstate__()
        fixed = tuple(_sorted_node(n) for n in nodes)
        if any(a is not b for a, b in zip(fixed, nodes)):
            out = optree.PyTreeSpec.__new__(optree.PyTreeSpec)
            out.__setstate__((fixed, *rest))
            treedef = out
    except Exception:   # noqa: BLE001 (another optree's record layout: its insertion order, as before)
        pass
    if len(_SORTED) > 4096:
        _SORTED.clear()
    try:
        _SORTED[treedef] = treedef
    except (TypeError, ValueError):   # node data that does not compare: made again at each flatten
        pass
    return treedef


def tree_flatten(tree, is_leaf: Callable[[Any], bool] | None = None):
    """``(leaves, treedef)`` of ``tree``, leaves in a deterministic order (dict keys sorted), and a treedef that
    rebuilds dicts in sorted key order, as JAX's."""
    leaves, treedef = optree.tree_flatten(tree, is_leaf=is_leaf, **_KW)
    try:
        return leaves, _SORTED[treedef]
    except (KeyError, TypeError, ValueError):   # a new structure, or node data that does not compare (an array)
        return leaves, _sorted_keys(treedef)


def tree_unflatten(treedef, leaves=_NO_LEAVES):
    """Rebuild a pytree of structure ``treedef`` from ``leaves`` (``jax.tree_util.tree_unflatten``).

    Called with one list of ``(dotted_name, value)`` pairs instead (``mlx.utils.tree_unflatten``, as MLX
    checkpoints and ``Module.parameters()`` name arrays), it returns the nested dicts and lists those names
    spell (``fnarray.utils.tree_unflatten``).

    Raises:
      PyTreeError: ``leaves`` is not a sequence of exactly ``treedef.num_leaves`` leaves.
      TypeError: ``treedef`` is not a tree structure.
    """
    if leaves is _NO_LEAVES:
        if isinstance(treedef, (list, tuple)) and all(isinstance(p, tuple) and len(p) == 2 and isinstance(p[0], str)
                                                     for p in treedef):
            from fnarray.utils import tree_unflatten as named
            return named(list(treedef))
        raise TypeError("tree_unflatten(treedef, leaves): leaves missing (one argument is MLX's form: a list of "
                        "(dotted_name, value) pairs)")
    try:
        return _sorted_def(treedef).unflatten(leaves)
    except (ValueError, TypeError, AttributeError) as e:
        if not isinstance(treedef, optree.PyTreeSpec):
            raise TypeError(f"tree_unflatten: treedef must be a tree structure (from tree_flatten or "
                            f"tree_structure), got {type(treedef).__name__}") from e
        try:
            n = len(leaves)
        except TypeError:
            raise PyTreeError(f"tree_unflatten: leaves must be a list of leaves, got {type(leaves).__name__}; "
                              f"{treedef} takes {treedef.num_leaves}") from e
        if n == treedef.num_leaves:
            raise  # the count is right: a registered unflatten function failed; its own error, as in JAX
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
    treedef = optree.tree_structure(tree, is_leaf=is_leaf, **_KW)
    try:
        return _SORTED[treedef]
    except (KeyError, TypeError, ValueError):
        return _sorted_keys(treedef)


def tree_map(f: Callable, tree, *rest, is_leaf=None):
    """Apply ``f`` to corresponding leaves of ``tree`` and ``rest`` (which share its structure).

    Raises ``ValueError`` naming both structures when they differ, ``TypeError`` when ``f`` is not callable.
    """
    check_callable(f, "tree_map", "f (a function of the leaves)", "; call it as tree_map(f, tree, *rest)")
    leaves, treedef = optree.tree_flatten(tree, is_leaf=is_leaf, **_KW)
    others = [treedef.flatten_up_to(r) for r in rest]
    return _sorted_def(treedef).unflatten(map(f, leaves, *others))


# ----------------------------------------------------------------------------- paths (as jax.tree_util)


@dataclasses.dataclass(frozen=True)
class DictKey:
    """A path entry for a mapping's key (``jax.tree_util.DictKey``); prints ``['key']``."""

    key: Any

    def __str__(self):
        return f"[{self.key!r}]"


@dataclasses.dataclass(frozen=True)
class SequenceKey:
    """A path entry for a list or tuple position (``jax.tree_util.SequenceKey``); prints ``[0]``."""

    idx: int

    def __str__(self):
        return f"[{self.idx}]"


@dataclasses.dataclass(frozen=True)
class GetAttrKey:
    """A path entry for an attribute: a namedtuple or module field (``jax.tree_util.GetAttrKey``); prints ``.name``."""

    name: str

    def __str__(self):
        return f".{self.name}"


@dataclasses.dataclass(frozen=True)
class FlattenedIndexKey:
    """A path entry for the i-th child of a custom node (``jax.tree_util.FlattenedIndexKey``); prints ``[i]``."""

    key: int

    def __str__(self):
        return f"[{self.key}]"


def _key_of(entry):
    """The JAX-style key object of one optree accessor entry."""
    # NamedTupleEntry is a SequenceEntry in optree: test the attribute kinds first.
    if isinstance(entry, optree.NamedTupleEntry):
        return GetAttrKey(entry.field)
    if isinstance(entry, optree.GetAttrEntry):
        return GetAttrKey(entry.name)
    if isinstance(entry, optree.MappingEntry):
        return DictKey(entry.entry)
    if isinstance(entry, optree.SequenceEntry):
        return SequenceKey(entry.entry)
    return FlattenedIndexKey(entry.entry)


def tree_flatten_with_path(tree, is_leaf: Callable[[Any], bool] | None = None):
    """``([(path, leaf), ...], treedef)``, as ``jax.tree_util.tree_flatten_with_path``.

    Args:
      tree: any pytree.
      is_leaf: an optional predicate that stops the flattening at a subtree.
    Returns:
      the list of ``(path, leaf)`` in ``tree_leaves`` order, each ``path`` a tuple of key objects
      (``DictKey``, ``SequenceKey``, ``GetAttrKey`` for namedtuple and ``fnarray.nn.Module``
      fields, ``FlattenedIndexKey`` for other custom nodes), and the treedef.
    Source: optree's ``tree_flatten_with_accessor``, its entries mapped to JAX's key classes.
    """
    accessors, leaves, treedef = optree.tree_flatten_with_accessor(tree, is_leaf=is_leaf, **_KW)
    paths = [tuple(_key_of(e) for e in acc) for acc in accessors]
    return list(zip(paths, leaves, strict=True)), _sorted_def(treedef)


def tree_leaves_with_path(tree, is_leaf: Callable[[Any], bool] | None = None) -> list:
    """``[(path, leaf), ...]`` of ``tree`` (``jax.tree_util.tree_leaves_with_path``); see ``tree_flatten_with_path``."""
    return tree_flatten_with_path(tree, is_leaf)[0]


def tree_map_with_path(f: Callable, tree, *rest, is_leaf=None):
    """``f(path, leaf, *rest_leaves)`` at every leaf of ``tree`` (``jax.tree_util.tree_map_with_path``).

    Args:
      f: called with the leaf's path (a tuple of key objects, see ``tree_flatten_with_path``), the
        leaf, and the corresponding leaves of ``rest``.
      tree: the pytree whose structure the result has.
      rest: pytrees with ``tree``'s structure (or with ``tree``'s leaves as subtrees).
    Returns:
      a pytree of ``tree``'s structure holding ``f``'s results.
    Raises:
      ValueError: when a tree of ``rest`` does not have ``tree``'s structure.
    """
    pairs, treedef = tree_flatten_with_path(tree, is_leaf)
    others = [treedef.flatten_up_to(r) for r in rest]
    outs = [f(path, leaf, *(o[i] for o in others)) for i, (path, leaf) in enumerate(pairs)]
    return treedef.unflatten(outs)


def keystr(keys, *, simple: bool = False, separator: str = "") -> str:
    """A path as text, ``['a'][0].w`` (``jax.tree_util.keystr``); raw keys print as ``[key]``.

    With ``simple=True`` each entry prints as its bare key (``a``, ``0``, ``w``), joined by ``separator``
    (``keystr(path, simple=True, separator="/")`` gives ``a/0/w``, as JAX).
    """
    if simple:
        return separator.join(str(_bare_key(k)) for k in keys)
    return separator.join(str(k) if isinstance(k, (DictKey, SequenceKey, GetAttrKey, FlattenedIndexKey))
                          else f"[{k!r}]" for k in keys)


def _bare_key(entry):
    """The key a path entry wraps: a dict key, a sequence index, an attribute name or a flattened index."""
    for field in ("key", "idx", "name"):
        if hasattr(entry, field):
            return getattr(entry, field)
    return entry


_NO_INIT = object()


def tree_reduce(f: Callable, tree, initializer=_NO_INIT, is_leaf=None):
    """Fold ``f`` over the leaves of ``tree`` (``functools.reduce`` semantics)."""
    leaves = tree_leaves(tree, is_leaf)
    if initializer is _NO_INIT:
        return functools.reduce(f, leaves)
    return functools.reduce(f, leaves, initializer)


def tree_all(tree, *, is_leaf=None) -> bool:
    """Whether every leaf of ``tree`` is true (``jax.tree_util.tree_all``); ``is_leaf`` as ``tree_leaves``."""
    return all(tree_leaves(tree, is_leaf))


def all_leaves(iterable, is_leaf=None) -> bool:
    """Whether every element of ``iterable`` is a leaf (``jax.tree_util.all_leaves``); ``None`` is not one."""
    return all(treedef_is_leaf(tree_structure(x, is_leaf)) for x in iterable)


def treedef_children(treedef) -> list:
    """The structures of the children of ``treedef``'s root (``jax.tree_util.treedef_children``)."""
    return list(treedef.children())


def treedef_tuple(treedefs):
    """The structure of a tuple whose elements have the structures ``treedefs`` (``jax.tree_util.treedef_tuple``)."""
    return optree.treespec_tuple(list(treedefs), **_KW)


def tree_transpose(outer_treedef, inner_treedef, pytree_to_transpose):
    """A tree of structure ``outer`` of trees of structure ``inner`` turned into an ``inner`` of ``outer``s
    (``jax.tree_util.tree_transpose``, JAX's argument names).

    Args:
      outer_treedef: the structure of the outer level; inner_treedef: the structure of each inner tree, or
        ``None`` to take the first inner tree's; pytree_to_transpose: the tree to transpose.
    Returns:
      The transposed tree; its plain dicts in sorted key order, as JAX builds them.
    Raises:
      ``TypeError`` when an inner tree's structure differs from ``inner_treedef``; ``ValueError`` for a dict
      whose keys do not sort (mixed types such as ``1`` and ``"a"``), as JAX refuses them.
    """
    subtrees = outer_treedef.flatten_up_to(pytree_to_transpose)
    if inner_treedef is None:
        inner_treedef = tree_structure(subtrees[0]) if subtrees else tree_structure(None)
    for sub in subtrees:
        if tree_structure(sub) != inner_treedef:
            raise TypeError(f"tree_transpose: an inner tree has the structure {tree_structure(sub)}, not "
                            f"{inner_treedef}; every tree at the outer level must share the inner structure")
    out = optree.tree_transpose(outer_treedef, inner_treedef, pytree_to_transpose)
    outer = tree_structure(_sorted_dicts(outer_treedef.unflatten([0] * outer_treedef.num_leaves)))
    inner = tree_structure(_sorted_dicts(inner_treedef.unflatten([0] * inner_treedef.num_leaves)))
    return inner.compose(outer).unflatten(tree_leaves(out))


def _sorted_dicts(node):
    """``node``'s structure rebuilt with every plain dict in sorted key order (JAX's order)."""
    if type(node) is dict:
        try:
            keys = sorted(node)
        except TypeError as e:
            raise ValueError(f"Comparator raised exception while sorting pytree dictionary keys: the keys "
                             f"{list(node)!r} do not sort (JAX refuses such dicts); use keys of one type") from e
        return {k: _sorted_dicts(node[k]) for k in keys}
    if optree.treespec_is_leaf(tree_structure(node)):
        return node
    children, metadata, _, unflatten = optree.tree_flatten_one_level(node, **_KW)
    return unflatten(metadata, [_sorted_dicts(c) for c in children])


def treedef_is_leaf(treedef) -> bool:
    return treedef.num_nodes == 1 and treedef.num_leaves == 1


def register_pytree_node(nodetype: type, flatten_func: Callable, unflatten_func: Callable,
                         flatten_with_keys_func: Callable | None = None):
    """Register ``nodetype`` as a container (as ``jax.tree_util.register_pytree_node``, JAX's argument names).

    Args:
      flatten_func: ``obj -> (children, aux_data)``; ``aux_data`` must be hashable.
      unflatten_func: ``(aux_data, children) -> obj``.
      flatten_with_keys_func: accepted for JAX's signature and not used: the paths through such a node
        (``tree_flatten_with_path``) name its children by position (``FlattenedIndexKey``).

    Returns:
      None (as JAX's).
    """
    optree.register_pytree_node(nodetype, flatten_func, lambda aux, children: unflatten_func(aux, list(children)),
                                namespace=NAMESPACE)


def register_static(cls: type):
    """Register ``cls`` as a node without children whose instances are static data (``jax.tree_util``'s
    ``register_static``): they are not leaves, ``jit`` keys its cache on them, so they must be hashable.
    Returns ``cls`` (usable as a decorator)."""
    register_pytree_node(cls, lambda obj: ((), obj), lambda obj, _: obj)
    return cls


def register_pytree_node_class(cls: type):
    """Class decorator using ``cls.tree_flatten`` and the classmethod ``cls.tree_unflatten``; returns ``cls``."""
    register_pytree_node(cls, lambda o: o.tree_flatten(), cls.tree_unflatten)
    return cls


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

    register_pytree_node(cls, flatten, unflatten)
    return cls


class Partial(functools.partial):
    """``functools.partial`` that is a pytree (``jax.tree_util.Partial``): the bound arguments are its
    children, the function is static, so a ``Partial`` can be passed to and returned from ``jit``,
    ``vmap`` and ``grad`` (a closure cannot).

    Args (constructor): ``func`` (any callable: part of the tree structure, so hashable) and the
      positional and keyword arguments to bind (pytrees).
    Returns: a callable; ``Partial(f, a)(b) == f(a, b)``.
    """

    def __new__(cls, func, *args, **kw):
        # a Partial of a Partial would hide the inner arguments from the tree: flatten it (as JAX)
        if isinstance(func, functools.partial) and type(func) is not functools.partial:
            return super().__new__(cls, func.func, *func.args, *args, **{**func.keywords, **kw})
        return super().__new__(cls, func, *args, **kw)


optree.register_pytree_node(Partial, lambda p: ((p.args, p.keywords), p.func),
                            lambda func, children: Partial(func, *children[0], **children[1]), namespace=NAMESPACE)


# ----------------------------------------------------------------------------- filtering (as Equinox)


def is_array(x) -> bool:
    """Whether ``x`` is an array leaf: an fnarray ``Array`` (or tracer) or a NumPy array (``equinox.is_array``)."""
    import numpy as np
    from fnarray.core.array import Array
    return isinstance(x, (Array, np.ndarray))


def is_inexact_array(x) -> bool:
    """Whether ``x`` is an array of a floating or complex dtype (bfloat16 and float8 included): what a gradient
    is taken with respect to."""
    from fnarray.core import dtypes
    return is_array(x) and not dtypes.is_key(x.dtype) and dtypes.is_inexact(x.dtype)


def _is_none(x) -> bool:
    return x is None


def partition(tree, filter_spec, replace=None, is_leaf: Callable[[Any], bool] | None = None):
    """Split ``tree`` into ``(selected, rest)`` of the same structure (``equinox.partition``).

    Args:
      tree: a pytree (a model).
      filter_spec: a predicate ``leaf -> bool`` (``is_array``, ``is_inexact_array``...), or a pytree
        that is a prefix of ``tree`` whose leaves are bools or predicates (``True`` for a whole
        submodule).
      replace: what stands in for the leaves that were not selected (default ``None``, an empty
        node, which ``grad``, ``jit`` and ``fa.optim`` pass over).
      is_leaf: an optional predicate that stops the flattening at a subtree.
    Returns:
      ``(selected, rest)``: ``selected`` keeps the leaves where the filter holds and has ``replace``
      elsewhere; ``rest`` the opposite. ``combine(selected, rest)`` is ``tree`` again.
    Raises:
      ValueError: ``filter_spec`` is a pytree that is not a prefix of ``tree``.

    Freezing part of a model is one call: differentiate only ``trainable`` and recombine::

        trainable, frozen = partition(model, spec)
        grads = fa.grad(lambda t: loss(combine(t, frozen)))(trainable)
    """
    flags = _filter_flags(tree, filter_spec, is_leaf)
    leaves, treedef = tree_flatten(tree, is_leaf)
    keep = [x if f else replace for x, f in zip(leaves, flags, strict=True)]
    drop = [replace if f else x for x, f in zip(leaves, flags, strict=True)]
    return tree_unflatten(treedef, keep), tree_unflatten(treedef, drop)


def _filter_flags(tree, filter_spec, is_leaf):
    leaves = tree_leaves(tree, is_leaf)
    if callable(filter_spec) and not isinstance(filter_spec, (bool, list, tuple, dict)) and \
            treedef_is_leaf(tree_structure(filter_spec)):
        return [bool(filter_spec(x)) for x in leaves]
    try:
        specs = optree.tree_broadcast_prefix(filter_spec, tree, is_leaf=is_leaf, **_KW)
    except ValueError as e:
        raise ValueError(f"partition: filter_spec must be a predicate or a pytree prefix of the tree ({e})") from None
    spec_leaves = tree_leaves(specs, is_leaf)
    return [bool(s(x)) if callable(s) else bool(s) for s, x in zip(spec_leaves, leaves, strict=True)]


def combine(*trees, is_leaf: Callable[[Any], bool] | None = None):
    """Merge trees of one structure: at each leaf the first that is not ``None`` (``equinox.combine``).

    Args:
      trees: pytrees of the same structure in which ``None`` marks a missing leaf (as
        ``partition`` makes them).
      is_leaf: an optional extra leaf predicate.
    Returns: the combined pytree (``None`` where every tree has ``None``).
    Raises: ValueError: the trees' structures differ.
    """
    if not trees:
        raise TypeError("combine needs at least one tree")
    leaf_pred = _is_none if is_leaf is None else (lambda x: x is None or is_leaf(x))
    flat = [optree.tree_flatten(t, is_leaf=leaf_pred, **_KW) for t in trees]
    treedef = flat[0][1]
    for _, td in flat[1:]:
        if td != treedef:
            raise ValueError(f"combine: the trees have different structures: {treedef} and {td}")
    out = []
    for items in zip(*(leaves for leaves, _ in flat), strict=True):
        out.append(next((x for x in items if x is not None), None))
    return optree.tree_unflatten(treedef, out)
