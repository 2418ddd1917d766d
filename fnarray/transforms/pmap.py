"""``pmap``: a function mapped over an axis of its arguments, one slice per device (``jax.pmap``).

Built on ``shard_map``: ``pmap(f, "i")(xs)`` is ``jit(shard_map(g, mesh, in_specs=P("i"), out_specs=P("i")))(xs)``
over a 1-D mesh of the first ``n`` devices (``n`` the mapped size), where ``g`` removes the mapped axis of each
argument's one-slice shard, calls ``f`` and puts the axis back on each output. The collectives of ``fnarray.lax``
over ``"i"`` inside ``f`` are ``shard_map``'s: ``jax.lax`` collectives on jax devices, ``mx.distributed`` over mlx
processes, a named ``vmap`` of size 1 on a backend of one device. An argument mapped over another axis keeps its
layout (its spec names the mesh axis at that position: no transpose); an output's mapped axis is moved to its
``out_axes`` inside the compiled program.
"""

from __future__ import annotations

import functools
import itertools

import numpy as np
import optree

from fnarray import tree_util
from fnarray.core import lax
from fnarray.core.array import Array
from fnarray.core.errors import check_callable
from fnarray.devices.lookup import devices as backend_devices
from fnarray.devices.mesh import Mesh, PartitionSpec
from fnarray.devices.sharding import NamedSharding
from fnarray.transforms.jit import jit
from fnarray.transforms.shard_map import shard_map

__all__ = ["pmap"]

_ANONYMOUS = itertools.count()   # a name for the mapped axis of a pmap without axis_name (no collective reads it)


def pmap(fun, axis_name=None, *, in_axes=0, out_axes=0, static_broadcasted_argnums=(), devices=None, backend=None,
         axis_size=None, donate_argnums=(), global_arg_shapes=None):
    """Map ``fun`` over an axis of its arguments, one slice per device, compiled (``jax.pmap``).

    ``pmap(f)(xs)`` with ``xs`` of shape ``(n, ...)`` runs ``f`` on ``xs[k]`` (shape ``(...)``) on the ``k``-th
    device and stacks the results: outputs of shape ``(n, ...)``, dtypes unchanged, global arrays split over the
    ``n`` devices along that axis. Inside ``fun`` the collectives of ``fnarray.lax`` (``psum``, ``pmean``,
    ``pmax``, ``all_gather``, ``ppermute``, ``axis_index``...) over ``axis_name`` combine the devices, as in
    ``shard_map``. ``grad``, ``vmap`` and control flow work inside ``fun``, ``grad`` and ``vmap`` of it too;
    ``pmap`` inside ``pmap`` does not (use a 2-D mesh and ``shard_map``, or ``vmap(axis_name=)`` inside).

    Args:
      fun: a function of arrays, scalars and pytrees of them, returning the same.
      axis_name: a hashable name for the mapped axis (the collectives' name); ``None``: unnamed.
      in_axes: the mapped axis of each positional argument, as ``vmap``'s: an int (negative counts from the
        end), ``None`` (broadcast: every device gets the whole value) or a tuple with one entry per positional
        argument (static ones included), each an int, ``None`` or a pytree prefix of the argument. Keyword
        arguments are mapped over axis 0.
      out_axes: where the mapped axis goes in each output (a pytree prefix of the output); ``None``: an output
        that is the same on every device (after a ``psum``, say), returned once without the axis.
      static_broadcasted_argnums: positional arguments that are hashable Python values, passed to ``fun`` as
        they are; a new value traces and compiles again, as ``jit``'s ``static_argnums``.
      devices: the devices to map over, in order; the mapped size must equal their number. ``None``: the first
        ``n`` devices of ``backend`` (``None``: the default device's backend).
      backend: a backend name (``"jax"``, ``"mlx"``, ``"numpy"``...).
      axis_size: the mapped size, needed only when no argument is mapped.
      donate_argnums, global_arg_shapes: ``jax.pmap``'s; donation is not acted on (the inputs stay valid),
        ``global_arg_shapes`` must be ``None``.
    Returns:
      A function with ``fun``'s arguments whose outputs have the mapped axis at ``out_axes``.
    Raises:
      ``ValueError`` when the mapped size exceeds the backend's device count (naming both, and how to get
      more: ``XLA_FLAGS=--xla_force_host_platform_device_count=N`` on ``jax:0``), differs from the number of
      ``devices`` given or between arguments, or is unknown (nothing mapped, no ``axis_size``); when
      ``in_axes``/``out_axes`` do not match the arguments/outputs or an axis is out of range; when an
      ``out_axes=None`` output differs between devices (``shard_map``'s check). ``TypeError`` for a ``fun`` that
      is not callable or an unhashable static argument; ``NameError`` for a collective over an unbound name.

    Source: JAX's ``jax.pmap`` (signature, errors) and its ``migrate_pmap`` guide (``jit(shard_map(...))``).
    """
    check_callable(fun, "pmap")
    name = _axis_name(axis_name)
    if global_arg_shapes is not None:
        raise NotImplementedError("pmap global_arg_shapes is not supported (JAX deprecated it); pass None")
    if isinstance(in_axes, list):
        in_axes = tuple(in_axes)
    statics = np.atleast_1d(static_broadcasted_argnums).astype(int).tolist()
    compiled = {}   # (argument structure, axes, static values, devices) -> the jitted shard_map

    @functools.wraps(fun)
    def mapped(*args, **kwargs):
        leaves, treedef, axes, fixed = _flat_inputs(args, kwargs, in_axes, statics)
        devs = _devices_for(_mapped_size(leaves, axes, axis_size), devices, backend)
        key = (treedef, tuple(axes), tuple(_ndim(x) for x in leaves), _hashable(fixed), tuple(map(str, devs)))
        run = compiled.get(key)
        if run is None:
            run = compiled[key] = _compile(fun, name, treedef, axes, fixed, len(args), devs, out_axes)
        return run(*leaves)

    return mapped


def _axis_name(axis_name):
    """The mapped axis's name: ``axis_name``, checked hashable, or a fresh one for ``None``."""
    if axis_name is None:
        return f"_pmap{next(_ANONYMOUS)}"
    if not _is_hashable(axis_name):
        raise TypeError(f"pmap axis_name must be hashable (a str, as the collectives name it), got {axis_name!r} "
                        f"({type(axis_name).__name__})")
    return axis_name


def _flat_inputs(args, kwargs, in_axes, statics):
    """``(leaves, treedef, axes, fixed)``: the leaves of the non-static arguments and keyword arguments, their
    structure, each leaf's mapped axis (non-negative, or ``None``), and ``(position, value)`` of the static ones."""
    static = sorted({i % len(args) for i in statics if -len(args) <= i < len(args)})
    dyn = tuple(a for i, a in enumerate(args) if i not in static)
    spec = tuple(a for i, a in enumerate(in_axes) if i not in static) if isinstance(in_axes, tuple) else in_axes
    leaves, treedef = tree_util.tree_flatten((dyn, kwargs))
    axes = _leaf_axes(spec, dyn, "in_axes", "the arguments") + [0] * (len(leaves) - _count(dyn))
    axes = [None if ax is None else _checked_axis(ax, _ndim(x), f"argument leaf {k}")
            for k, (x, ax) in enumerate(zip(leaves, axes, strict=True))]
    return leaves, treedef, axes, tuple((i, args[i]) for i in static)


def _compile(fun, name, treedef, axes, fixed, nargs, devs, out_axes):
    """``jit(shard_map(...))`` of ``fun`` over a 1-D mesh of ``devs`` named ``name``, taking the flat leaves."""
    mesh = Mesh(np.array(devs, dtype=object), (name,))
    in_specs = tuple(PartitionSpec() if ax is None else PartitionSpec(*([None] * ax), name) for ax in axes)

    def per_device(*blocks):
        dyn, kwargs = tree_util.tree_unflatten(treedef, [x if ax is None else lax.squeeze(x, (ax,))
                                                         for x, ax in zip(blocks, axes, strict=True)])
        it = iter(dyn)
        given = dict(fixed)
        out = fun(*[given[i] if i in given else next(it) for i in range(nargs)], **kwargs)
        o_leaves, o_tree = tree_util.tree_flatten(out)
        o_axes = _leaf_axes(out_axes, out, "out_axes", "the output")
        return tree_util.tree_unflatten(o_tree, [_as_array(x) if ax is None else lax.expand_dims(_as_array(x), (0,))
                                                 for x, ax in zip(o_leaves, o_axes, strict=True)])

    out_specs = optree.tree_map(lambda ax: PartitionSpec() if ax is None else PartitionSpec(name), out_axes,
                                none_is_leaf=True, namespace=tree_util.NAMESPACE)
    body = shard_map(per_device, mesh=mesh, in_specs=in_specs, out_specs=out_specs)

    def program(*leaves):
        out = body(*leaves)
        o_leaves, o_tree = tree_util.tree_flatten(out)
        o_axes = _leaf_axes(out_axes, out, "out_axes", "the output")
        return tree_util.tree_unflatten(o_tree, [x if not ax else _moved(x, ax)
                                                 for x, ax in zip(o_leaves, o_axes, strict=True)])

    program.__name__ = f"pmap_{getattr(fun, '__name__', 'fun')}"
    return jit(program, in_shardings=tuple(NamedSharding(mesh, s) for s in in_specs))


def _moved(x, ax):
    """``x`` with its leading (mapped) axis moved to ``ax`` (negative counts from the end)."""
    ax = _checked_axis(ax, x.ndim, "an output")
    perm = list(range(1, x.ndim))
    perm.insert(ax, 0)
    return lax.transpose(x, tuple(perm))


def _as_array(x):
    if isinstance(x, Array):
        return x
    from fnarray.core.avals import asarray
    return asarray(x)


def _shape(x) -> tuple:
    return tuple(x.shape) if hasattr(x, "shape") else np.shape(x)


def _ndim(x) -> int:
    return len(_shape(x))


def _count(tree) -> int:
    return len(tree_util.tree_leaves(tree))


def _leaf_axes(spec, tree, what, whose) -> list:
    """One axis (an int or ``None``) per leaf of ``tree``, from ``spec``, a pytree prefix of it."""
    if spec is None or isinstance(spec, (int, np.integer)):
        return [spec] * _count(tree)
    if tree_util.treedef_is_leaf(tree_util.tree_structure(spec)):
        raise ValueError(f"pmap {what} holds {spec!r} ({type(spec).__name__}): each entry must be an int (the "
                         "mapped axis) or None (not mapped)")
    s = optree.tree_flatten_one_level(spec, none_is_leaf=True, namespace=tree_util.NAMESPACE)
    t = optree.tree_flatten_one_level(tree, none_is_leaf=False, namespace=tree_util.NAMESPACE) \
        if not tree_util.treedef_is_leaf(tree_util.tree_structure(tree)) else None
    if t is None or type(spec) is not type(tree) or tuple(s.entries) != tuple(t.entries):
        raise ValueError(f"pmap {what} {spec!r} does not match the structure of {whose}, "
                         f"{tree_util.tree_structure(tree)}: give an int, None, or a container of the same type "
                         "and keys holding ints and Nones (a pytree prefix; one entry per positional argument)")
    out = []
    for sc, tc in zip(s.children, t.children, strict=True):
        out.extend(_leaf_axes(sc, tc, what, whose))
    return out


def _checked_axis(ax, ndim, what) -> int:
    if not -ndim <= ax < ndim:
        raise ValueError(f"pmap maps {what} over axis {ax}, but it has rank {ndim}: choose an axis in "
                         f"[{-ndim}, {ndim}), or None to give the whole value to every device")
    return ax % ndim


def _mapped_size(leaves, axes, axis_size) -> int:
    sizes = {_shape(x)[ax] for x, ax in zip(leaves, axes, strict=True) if ax is not None}
    if axis_size is not None:
        sizes.add(int(axis_size))
    if len(sizes) > 1:
        shapes = [f"leaf {k} of shape {_shape(x)} over axis {ax}" for k, (x, ax) in enumerate(zip(leaves, axes))
                  if ax is not None]
        raise ValueError(f"pmap got inconsistent sizes for the mapped axis ({sorted(sizes)}): {'; '.join(shapes)}"
                         + (f"; axis_size={axis_size}" if axis_size is not None else "")
                         + ". Every mapped axis must have the same size (one slice per device).")
    if not sizes:
        raise ValueError("pmap maps no argument (every in_axes entry is None, or there are no arrays), so it "
                         "cannot tell how many devices to use; pass axis_size=N")
    return sizes.pop()


def _devices_for(n, devices, backend) -> list:
    """The ``n`` devices to map over: ``devices`` (exactly ``n``) or the first ``n`` of ``backend``'s."""
    if n == 0:
        raise ValueError("pmap maps an axis of size 0: it runs one slice per device, so the mapped size must be at "
                         "least 1 (as jax.pmap); skip the call for an empty batch, or vmap over it instead")
    if devices is not None:
        devs = list(devices)
        if len(devs) != n:
            raise ValueError(f"pmap: the mapped axis has size {n}, but devices= names {len(devs)} devices "
                             f"({', '.join(map(str, devs))}); the mapped size must equal the number of devices "
                             "given (one slice per device), as in jax.pmap")
        return devs
    devs = backend_devices(backend)
    if n > len(devs):
        where = devs[0].backend if devs else (backend or "default")
        raise ValueError(
            f"pmap maps an axis of size {n}, but the {where} backend has {len(devs)} device(s) "
            f"({', '.join(map(str, devs))}): pmap runs one slice per device, so the size must be at most "
            f"{len(devs)}. Map fewer slices (reshape the batch to ({len(devs)}, {n // max(len(devs), 1)}, ...) "
            "and vmap inside the pmapped function), or run on more devices: on a CPU, set "
            f"XLA_FLAGS=--xla_force_host_platform_device_count={n} before JAX starts, which gives jax:0 {n} host "
            "devices and makes it the default (or pass backend='jax'); a multi-GPU machine with FNARRAY_DEVICE=jax; "
            f"mlx: {n} processes (python -m fnarray.distributed.launch -n {n} --backend mlx).")
    return devs[:n]


def _hashable(fixed):
    try:
        hash(fixed)
    except TypeError:
        bad = next(i for i, v in fixed if not _is_hashable(v))
        raise TypeError(f"pmap static_broadcasted_argnums names positional argument {bad}, but its value "
                        f"{type(dict(fixed)[bad]).__name__} is not hashable; pass a hashable value (a tuple, not a "
                        "list) or map it as an array") from None
    return fixed


def _is_hashable(v) -> bool:
    try:
        hash(v)
    except TypeError:
        return False
    return True
