"""How an export names its inputs and outputs (shared by the WebGPU and ONNX exports).

Run-time inputs are named by ``f``'s Python parameter names, pytree leaves by
dotted paths in the order ``jit`` flattens them (``params.w1``, ``batch.0``,
``args.1`` past a ``*args``); outputs ``out`` or ``out.0``, ``out.loss``...
"""

from __future__ import annotations

import inspect

import optree

from fnarray.core.errors import check_callable, int_tuple

__all__ = ["argnum_positions", "export_leaves", "fname", "out_names", "param_names", "leaf_names"]


def _entry_name(e) -> str:
    for attr in ("field", "key", "name"):
        if hasattr(e, attr):
            return str(getattr(e, attr))
    return str(e.entry)


def leaf_names(prefix: str, tree) -> list[tuple[str, object]]:
    """``(dotted name, leaf)`` for every leaf of ``tree``, in flattening order."""
    accessors, leaves, _ = optree.tree_flatten_with_accessor(tree, none_is_leaf=False, namespace="fnarray")
    return [(".".join([prefix] + [_entry_name(e) for e in acc]), leaf)
            for acc, leaf in zip(accessors, leaves, strict=True)]


def fname(f) -> str:
    """A function's name for messages and manifests."""
    return getattr(f, "__name__", type(f).__name__)


def param_names(f, nargs: int, who: str = "fnarray.export") -> list[str]:
    """The name of each positional argument: the parameter's, ``args.<i>`` past a ``*args``."""
    try:
        params = list(inspect.signature(f).parameters.values())
    except (TypeError, ValueError):
        return [f"arg{i}" for i in range(nargs)]
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    star = next((p for p in params if p.kind == p.VAR_POSITIONAL), None)
    names = []
    for i in range(nargs):
        if i < len(positional):
            names.append(positional[i].name)
            continue
        if star is None:
            raise TypeError(f"{who}: {fname(f)} takes {len(positional)} positional arguments, "
                            f"{nargs} example arguments were given")
        names.append(f"{star.name}.{i - len(positional)}")
    return names


def out_names(treedef) -> list[str]:
    """``out`` for a single array, else ``out.<path>`` per output leaf."""
    paths = treedef.paths()
    if len(paths) == 1 and paths[0] == ():
        return ["out"]
    return [".".join(["out"] + [str(k) for k in p]) for p in paths]


def argnum_positions(who: str, argnums, nargs: int, what: str) -> list:
    """``argnums`` (an int or a sequence of ints, ``who``'s ``what``) as the sorted non-negative positions among
    ``nargs`` example arguments: ``errors.int_tuple``'s ``TypeError`` for another kind of value, a ``ValueError``
    for a position that names no example argument."""
    out = set()
    for i in int_tuple(argnums, who, what):
        if not -nargs <= i < nargs:
            raise ValueError(f"{who}: {what} holds {i!r}, which is not the position of one of the {nargs} example "
                             "arguments")
        out.add(i % nargs)
    return sorted(out)


def export_leaves(who: str, f, example_args, bake_argnums, where: str):
    """The function to trace and ``(name, value, baked)`` per flattened argument leaf.

    Args:
      who: the exporter's public name, for messages.
      f: the function (a ``jit`` function is unwrapped to the function it traces).
      example_args: the positional example arguments.
      bake_argnums: an int or a sequence of positions whose values are baked into the export.
      where: where the user passes the inputs by name, for the collision message.
    Returns: ``(fun, leaves)``.
    Raises:
      TypeError: ``f`` is not callable, or takes fewer positional arguments than were given; ``bake_argnums``
        that are not ints.
      ValueError: a ``bake_argnums`` entry that names no argument, or two inputs with one name.
    """
    from fnarray.transforms.jit import Jitted

    check_callable(f, who, "the function to export")
    nargs = len(example_args)
    bake = set(argnum_positions(who, bake_argnums, nargs, "bake_argnums"))
    fun = f.fun if isinstance(f, Jitted) else f
    names = param_names(fun, nargs, who)
    leaves = []
    for i, (name, arg) in enumerate(zip(names, example_args, strict=True)):
        leaves.extend((n, v, i in bake) for n, v in leaf_names(name, arg))
    seen: dict = {}
    for n, _, baked in leaves:
        if n in seen and not (baked and seen[n]):
            raise ValueError(f"{who}: two inputs would both be named {n!r} (a dict key with a dot "
                             f"in it collides with a nested path); rename the key so that every input has its "
                             f"own name in {where}")
        seen[n] = baked
    return fun, leaves
