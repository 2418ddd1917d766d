"""Named axes and the collective primitives (``psum``, ``all_gather``, ``ppermute``...), as ``jax.lax``.

A *named axis* is bound by ``vmap(f, axis_name="i")`` or by ``shard_map`` over a mesh axis. Inside it, a
collective combines the values that the examples (or the devices) along that axis hold. The axis
environment is a per-thread stack of ``AxisFrame(name, size, main)``: ``main`` is the ``MainTrace`` of the
named ``vmap`` level (``None`` for a ``shard_map`` axis, whose collectives are staged into the body program
and run by the engine: ``jax.lax.psum`` inside ``jax.shard_map``).

Every collective is a primitive of family ``collective`` whose shape rule is self-contained (the axis
sizes it needs are params: ``axis_size``). The wrappers below first *lift* their operands into the named
``vmap`` level, so that a value made outside the ``vmap`` (the same for every example) still reaches that
level's batching rule, which turns the collective into the reduction or permutation it means
(``fnarray.transforms.collective_rules``). So every backend, and the browser export, runs collectives
under ``vmap``; outside any named axis they raise ``NameError`` naming the axes that are bound.

Semantics (those of ``jax.lax``; ``n`` is the axis size, ``i`` the position along it):

- ``psum``/``pmax``/``pmin``: the sum/max/min over the axis (every position gets it); ``pmean = psum / n``.
  With ``axis_index_groups`` (a partition of the axis positions, e.g. ``[[0, 2], [1, 3]]``), each position
  gets the reduction over its own group only (``pmean``: divided by the group size; equal sizes).
- ``all_gather(x, axis=a, tiled=False)``: the values of every position stacked along a new axis ``a``
  (``tiled=True``: concatenated along the existing axis ``a``); with ``axis_index_groups`` (groups of one
  size ``k``), the values of the position's group, in the group's order (``k`` of them).
- ``psum_scatter(x, scatter_dimension=d, tiled=False)``: the sum, of which position ``i`` keeps block
  ``i`` along ``d`` (``x.shape[d] == n`` and the axis is removed; ``tiled``: ``x.shape[d] % n == 0``).
- ``all_to_all(x, split_axis=s, concat_axis=c, tiled=False)``: position ``i`` receives block ``i`` of every
  position's ``x`` along ``s``, ordered by sender along ``c`` (untiled: ``x.shape[s] == n``, axis ``s`` is
  removed and the senders' axis is inserted at ``c`` of the result; tiled: ``s`` shrinks and ``c`` grows ``n``
  times).
- ``ppermute(x, perm)``: ``perm`` is pairs ``(source, destination)``; a destination that no pair names
  gets zeros.
- ``axis_index``: ``i`` (int32); ``axis_size``: ``n`` (a Python int).
"""

from __future__ import annotations

import threading
from typing import NamedTuple

import numpy as np

from fnarray.core import dtypes
from fnarray.core.errors import ShapeError
from fnarray.core.primitives import Primitive
from fnarray.core.shaped import ShapedArray

__all__ = ["AxisFrame", "axis_frame", "bound_axes", "push_axis", "pop_axis", "COLLECTIVES", "names_of",
           "psum", "pmean", "pmax", "pmin", "all_gather", "psum_scatter", "all_to_all", "ppermute",
           "axis_index", "axis_size", "pcast",
           "psum_p", "pmax_p", "pmin_p", "all_gather_p", "psum_scatter_p", "all_to_all_p", "ppermute_p",
           "axis_index_p"]

# ----------------------------------------------------------------------------- the axis environment


class AxisFrame(NamedTuple):
    """A bound axis: its ``name``, ``size`` and the ``MainTrace`` of its named vmap (``None``: shard_map)."""
    name: object
    size: int
    main: object


class _AxisEnv(threading.local):
    def __init__(self):
        self.frames: list[AxisFrame] = []


_env = _AxisEnv()


def push_axis(frame: AxisFrame) -> None:
    _env.frames.append(frame)


def pop_axis() -> None:
    _env.frames.pop()


def bound_axes() -> list:
    """The names bound in this thread, innermost last."""
    return [f.name for f in _env.frames]


def axis_frame(name, what: str = "a collective") -> AxisFrame:
    """The innermost frame binding ``name``; ``NameError`` (what is bound, what to do) when none does."""
    for f in reversed(_env.frames):
        if f.name == name:
            return f
    bound = ", ".join(repr(n) for n in bound_axes()) or "none"
    raise NameError(
        f"{what} over axis {name!r}, but no enclosing vmap or shard_map binds that name (bound axes: {bound}). "
        f"Call it inside fnarray.vmap(f, axis_name={name!r}) (every backend runs it there) or inside "
        f"fnarray.shard_map over a mesh with an axis {name!r} (meshes of more than one device need the "
        "jax or mlx backend).")


def names_of(axis_name) -> tuple:
    """``axis_name`` (a name or a tuple of names) as a tuple."""
    return tuple(axis_name) if isinstance(axis_name, (tuple, list)) else (axis_name,)


def _size(names) -> int:
    return int(np.prod([axis_frame(n).size for n in names], dtype=np.int64))


# ----------------------------------------------------------------------------- primitives

COLLECTIVES: dict = {}


def _collective(name, rule, doc):
    p = Primitive(name, rule, doc=doc, kind="collective")
    COLLECTIVES[p] = name
    return p


def _same(x, *, axis_name, **params):
    return ShapedArray(x.shape, x.dtype, x.weak_type)


def _numeric(name):
    def rule(x, *, axis_name, **params):
        if dtypes.is_bool(x.dtype):
            raise TypeError(f"{name} accepts numeric dtypes, got bool; convert with astype first")
        return _same(x, axis_name=axis_name)
    return rule


psum_p = _collective("psum", _numeric("psum"), "The sum over the named axes (every position gets it).")
pmax_p = _collective("pmax", _numeric("pmax"), "The maximum over the named axes (NaN propagates).")
pmin_p = _collective("pmin", _numeric("pmin"), "The minimum over the named axes (NaN propagates).")


def _axis_in_range(name, axis, ndim):
    if not 0 <= axis < ndim:
        raise ShapeError(f"{name}: axis {axis} is out of range for rank {ndim}")


def _all_gather_rule(x, *, axis_name, axis, tiled, axis_size, axis_index_groups=None):
    if tiled:
        _axis_in_range("all_gather", axis, x.ndim)
        shape = x.shape[:axis] + (x.shape[axis] * axis_size,) + x.shape[axis + 1:]
    else:
        _axis_in_range("all_gather", axis, x.ndim + 1)
        shape = x.shape[:axis] + (axis_size,) + x.shape[axis:]
    return ShapedArray(shape, x.dtype, x.weak_type)


all_gather_p = _collective("all_gather", _all_gather_rule,
                           "Every position's value, stacked along a new axis (tiled: concatenated).")


def _psum_scatter_rule(x, *, axis_name, scatter_dimension, tiled, axis_size):
    d = scatter_dimension
    _axis_in_range("psum_scatter", d, x.ndim)
    if tiled:
        if x.shape[d] % axis_size:
            raise ShapeError(f"psum_scatter(tiled=True): dimension {d} of {x.str_short()} is not divisible by "
                             f"the axis size {axis_size}")
        shape = x.shape[:d] + (x.shape[d] // axis_size,) + x.shape[d + 1:]
    else:
        if x.shape[d] != axis_size:
            raise ShapeError(f"psum_scatter: dimension {d} of {x.str_short()} must equal the axis size "
                             f"{axis_size} (or pass tiled=True to split it into {axis_size} blocks)")
        shape = x.shape[:d] + x.shape[d + 1:]
    return ShapedArray(shape, x.dtype, x.weak_type)


psum_scatter_p = _collective("psum_scatter", _psum_scatter_rule,
                             "The sum over the axis, of which position i keeps block i along scatter_dimension.")


def _all_to_all_rule(x, *, axis_name, split_axis, concat_axis, tiled, axis_size):
    _axis_in_range("all_to_all", split_axis, x.ndim)
    _axis_in_range("all_to_all", concat_axis, x.ndim)
    s = list(x.shape)
    if tiled:
        if s[split_axis] % axis_size:
            raise ShapeError(f"all_to_all(tiled=True): dimension {split_axis} of {x.str_short()} is not divisible "
                             f"by the axis size {axis_size}")
        s[split_axis] //= axis_size
        s[concat_axis] *= axis_size
    else:
        if s[split_axis] != axis_size:
            raise ShapeError(f"all_to_all: dimension {split_axis} of {x.str_short()} must equal the axis size "
                             f"{axis_size} (or pass tiled=True to split it into {axis_size} blocks)")
        del s[split_axis]  # the receivers' axis goes; the senders' axis comes at concat_axis (jax.vmap's shapes)
        s.insert(concat_axis, axis_size)
    return ShapedArray(tuple(s), x.dtype, x.weak_type)


all_to_all_p = _collective("all_to_all", _all_to_all_rule,
                           "Position i receives block i (along split_axis) of every position, along concat_axis.")


def _ppermute_rule(x, *, axis_name, perm, axis_size):
    return ShapedArray(x.shape, x.dtype, x.weak_type)


ppermute_p = _collective("ppermute", _ppermute_rule,
                         "Sends each position's value along the (source, destination) pairs; others get zeros.")


def _axis_index_rule(*, axis_name, axis_size):
    return ShapedArray((), dtypes.int32, False)


class _AxisIndexPrimitive(Primitive):
    """``axis_index`` has no operand to carry it to its named vmap level, so its ``bind`` goes there itself
    (also when an interpreter re-binds a staged one, as ``batch_program`` does)."""

    __slots__ = ()

    def bind(self, *args, axis_name, axis_size):
        f = axis_frame(axis_name, "axis_index")
        if f.main is not None:
            from fnarray.core.tracing import trace_level
            if trace_level() <= f.main.level:
                from fnarray.core import lax
                return f.main.with_cur_sublevel().new_batched(lax.iota(dtypes.int32, f.size), 0)
        return super().bind(*args, axis_name=axis_name, axis_size=axis_size)


axis_index_p = _AxisIndexPrimitive("axis_index", _axis_index_rule, kind="collective",
                                   doc="The position along the named axis (int32).")
COLLECTIVES[axis_index_p] = "axis_index"


# ----------------------------------------------------------------------------- binding with lifting


def _lift(args, names):
    """Raise ``args`` into the innermost named-vmap level among ``names`` when nothing above it holds them.

    A value made outside that vmap (a closure, a literal) must still meet its batching rule: ``psum`` of a
    value every example shares is ``n`` times it. Values of a higher level (an inner jit, grad or vmap)
    are left alone: that level stages or transforms the collective first.
    """
    from fnarray.core.tracing import Tracer, trace_level
    mains = [f.main for f in (axis_frame(n) for n in names) if f.main is not None]
    if not mains:
        return list(args)
    main = max(mains, key=lambda m: m.level)
    if trace_level() > main.level:
        return list(args)
    for a in args:
        if isinstance(a, Tracer) and a._trace.main.level >= main.level:
            return list(args)
    trace = main.with_cur_sublevel()
    return [trace.full_raise(a) for a in args]


def bind_collective(prim, *args, **params):
    """``prim.bind`` after lifting the operands into the named axis' vmap level (see ``_lift``)."""
    from fnarray.core.avals import get_aval
    names = names_of(params["axis_name"])
    prim.abstract_eval(*[get_aval(a) for a in args], **params)  # the shape checks, also where a rule runs eagerly
    return prim.bind(*_lift(args, names), **params)


def _check_names(axis_name, what):
    names = names_of(axis_name)
    if not names:
        raise ValueError(f"{what} needs at least one axis name, got {axis_name!r}")
    for n in names:
        axis_frame(n, what)
    return names


def _map_leaves(fn, x):
    from fnarray import tree_util  # a leaf module (optree only): no layering cycle
    from fnarray.core.avals import asarray
    leaves, tree = tree_util.tree_flatten(x)
    return tree_util.tree_unflatten(tree, [fn(v if hasattr(v, "aval") else asarray(v)) for v in leaves])


def check_groups(axis_index_groups, names, what, equal=False):
    """``axis_index_groups`` as a tuple of tuples of positions (``None`` stays ``None``), checked as JAX checks it.

    Raises:
      ``ValueError`` for several axis names, groups that do not hold every position of the axis exactly
      once, or (``equal``) groups of different sizes; ``TypeError`` for anything but lists of integers.
    """
    if axis_index_groups is None:
        return None
    if len(names) != 1:
        raise ValueError(f"{what}: axis_index_groups groups the positions of one axis, got the axis names "
                         f"{tuple(names)!r}; give one name (nest calls for several axes)")
    n = axis_frame(names[0], what).size
    try:
        groups = tuple(tuple(int(i) for i in g) for g in axis_index_groups)
    except TypeError:
        raise TypeError(f"{what}: axis_index_groups must be a list of lists of axis positions, got "
                        f"{axis_index_groups!r}") from None
    if sorted(i for g in groups for i in g) != list(range(n)):
        raise ValueError(f"{what}: axis_index_groups {axis_index_groups!r} must hold every position 0..{n - 1} of "
                         f"axis {names[0]!r} (size {n}) exactly once")
    if equal and len({len(g) for g in groups}) != 1:
        raise ValueError(f"{what}: axis_index_groups {axis_index_groups!r} must all have the same size (the "
                         "result's shape or divisor depends on it)")
    return groups


def _reducer(prim, what):
    def fn(x, axis_name, *, axis_index_groups=None):
        names = _check_names(axis_name, what)
        key = names[0] if len(names) == 1 else names
        groups = check_groups(axis_index_groups, names, what)
        extra = {} if groups is None else {"axis_index_groups": groups}
        return _map_leaves(lambda v: bind_collective(prim, v, axis_name=key, **extra), x)
    return fn


_psum = _reducer(psum_p, "psum")
_pmax = _reducer(pmax_p, "pmax")
_pmin = _reducer(pmin_p, "pmin")


def psum(x, axis_name, *, axis_index_groups=None):
    """The sum of ``x`` over the named axis (``jax.lax.psum``).

    Args:
      x: an array or a pytree of arrays (numeric dtypes).
      axis_name: a name bound by ``vmap(axis_name=)`` or ``shard_map``, or a tuple of names.
      axis_index_groups: ``None``, or a partition of the positions of one axis into groups (lists of
        positions): each position then gets the sum over its group (JAX's; fnarray also runs it under a
        named ``vmap``, where JAX does not).
    Returns:
      The same structure, shapes and dtypes: every position holds the sum (of its group).
    Raises:
      ``NameError`` when a name is not bound; ``TypeError`` for bool; ``ValueError`` for groups that are
      not a partition of the axis positions, or groups with several axis names.
    """
    return _psum(x, axis_name, axis_index_groups=axis_index_groups)


def pmax(x, axis_name, *, axis_index_groups=None):
    """The maximum over the named axis (``jax.lax.pmax``); as ``psum`` otherwise."""
    return _pmax(x, axis_name, axis_index_groups=axis_index_groups)


def pmin(x, axis_name, *, axis_index_groups=None):
    """The minimum over the named axis (``jax.lax.pmin``); as ``psum`` otherwise."""
    return _pmin(x, axis_name, axis_index_groups=axis_index_groups)


def pmean(x, axis_name, *, axis_index_groups=None):
    """The mean over the named axis: ``psum(x) / axis_size`` (``jax.lax.pmean``); as ``psum`` otherwise (with
    ``axis_index_groups``, of one size ``k``: the mean over the group, ``psum / k``)."""
    from fnarray.core import lax
    names = _check_names(axis_name, "pmean")
    groups = check_groups(axis_index_groups, names, "pmean", equal=True)
    n = _size(names) if groups is None else len(groups[0])
    s = _psum(x, axis_name, axis_index_groups=axis_index_groups)

    def mean(v):
        if not dtypes.is_inexact(v.dtype):  # as jax.lax.pmean: an integer mean is a float
            v = lax.convert_element_type(v, dtypes.float32)
        return lax.div(v, lax.full((), n, v.dtype))
    return _map_leaves(mean, s)


def _one_name(axis_name, what):
    names = _check_names(axis_name, what)
    if len(names) != 1:
        raise ValueError(f"{what} takes one axis name, got {axis_name!r}; nest calls for several axes")
    return names[0]


def _norm_axis(axis, ndim, what):
    if not -ndim <= axis < ndim:
        raise ShapeError(f"{what}: axis {axis} is out of range for rank {ndim}")
    return axis % ndim


def all_gather(x, axis_name, *, axis=0, tiled=False, axis_index_groups=None):
    """Every position's ``x``, stacked along a new axis ``axis`` (``jax.lax.all_gather``).

    Args:
      x: an array or pytree of arrays; axis_name: one bound name.
      axis: where the gathered axis goes (``tiled``: the existing axis to concatenate along).
      tiled: concatenate instead of stacking.
      axis_index_groups: ``None``, or a partition of the axis positions into groups of one size ``k``: each
        position gathers the values of its group, in the group's order.
    Returns:
      ``x.shape`` with ``n`` (``k``) inserted at ``axis`` (``tiled``: ``x.shape[axis] * n``), same dtype.
    Raises:
      ``NameError`` for an unbound name; ``ShapeError`` for an axis out of range; ``ValueError`` for groups
      that are not a partition of the positions into groups of one size.
    """
    name = _one_name(axis_name, "all_gather")
    groups = check_groups(axis_index_groups, (name,), "all_gather", equal=True)
    n = axis_frame(name).size if groups is None else len(groups[0])
    extra = {} if groups is None else {"axis_index_groups": groups}

    def one(v):
        a = _norm_axis(axis, v.ndim if tiled else v.ndim + 1, "all_gather")
        return bind_collective(all_gather_p, v, axis_name=name, axis=a, tiled=bool(tiled), axis_size=n, **extra)
    return _map_leaves(one, x)


def psum_scatter(x, axis_name, *, scatter_dimension=0, tiled=False, axis_index_groups=None):
    """The sum over the axis, of which position ``i`` keeps block ``i`` (``jax.lax.psum_scatter``).

    Args:
      x: an array or pytree; axis_name: one bound name; scatter_dimension: the dimension split in blocks.
      tiled: ``False``: ``x.shape[d]`` must equal the axis size and the dimension is removed; ``True``:
        it must be divisible by it and shrinks to ``x.shape[d] // n``.
    Returns:
      The block of the sum this position keeps.
    Raises:
      ``NameError`` for an unbound name; ``ShapeError`` for sizes that do not fit.
    """
    if axis_index_groups is not None:
        raise NotImplementedError("psum_scatter: axis_index_groups is not supported (psum, pmean, pmax, pmin and "
                                  "all_gather take it); split the axis into two named axes instead")
    name = _one_name(axis_name, "psum_scatter")
    n = axis_frame(name).size

    def one(v):
        d = _norm_axis(scatter_dimension, v.ndim, "psum_scatter")
        return bind_collective(psum_scatter_p, v, axis_name=name, scatter_dimension=d, tiled=bool(tiled),
                               axis_size=n)
    return _map_leaves(one, x)


def all_to_all(x, axis_name, split_axis, concat_axis, *, tiled=False, axis_index_groups=None):
    """Position ``i`` receives block ``i`` along ``split_axis`` of every position (``jax.lax.all_to_all``).

    Args:
      x: an array or pytree; axis_name: one bound name; split_axis, concat_axis: dimensions of ``x``.
      tiled: ``False``: ``x.shape[split_axis]`` must equal the axis size (the shape is unchanged);
        ``True``: divisible by it (split_axis shrinks ``n`` times, concat_axis grows ``n`` times).
    Returns:
      The received blocks, ordered by sender along ``concat_axis``.
    Raises:
      ``NameError`` for an unbound name; ``ShapeError`` for sizes that do not fit.
    """
    if axis_index_groups is not None:
        raise NotImplementedError("all_to_all: axis_index_groups is not supported (psum, pmean, pmax, pmin and "
                                  "all_gather take it); split the axis into two named axes instead")
    name = _one_name(axis_name, "all_to_all")
    n = axis_frame(name).size

    def one(v):
        s = _norm_axis(split_axis, v.ndim, "all_to_all")
        c = _norm_axis(concat_axis, v.ndim, "all_to_all")
        return bind_collective(all_to_all_p, v, axis_name=name, split_axis=s, concat_axis=c, tiled=bool(tiled),
                               axis_size=n)
    return _map_leaves(one, x)


def ppermute(x, axis_name, perm):
    """Send each position's ``x`` along ``perm``'s ``(source, destination)`` pairs (``jax.lax.ppermute``).

    Args:
      x: an array or pytree; axis_name: one bound name; perm: pairs of positions, no source or
        destination twice.
    Returns:
      At each destination, its source's value; zeros where no pair names the position.
    Raises:
      ``NameError`` for an unbound name; ``ValueError`` for positions out of range or repeated.
    """
    name = _one_name(axis_name, "ppermute")
    n = axis_frame(name).size
    pairs = tuple((int(s), int(d)) for s, d in perm)
    srcs, dsts = [s for s, _ in pairs], [d for _, d in pairs]
    if any(not 0 <= i < n for i in srcs + dsts):
        raise ValueError(f"ppermute: perm {perm!r} names positions outside [0, {n}) of axis {name!r}")
    if len(set(srcs)) != len(srcs) or len(set(dsts)) != len(dsts):
        raise ValueError(f"ppermute: perm {perm!r} repeats a source or a destination; each may appear once")
    return _map_leaves(lambda v: bind_collective(ppermute_p, v, axis_name=name, perm=pairs, axis_size=n), x)


def axis_index(axis_name):
    """This position along the named axis, an int32 scalar (``jax.lax.axis_index``).

    Raises: ``NameError`` when the name is not bound.
    """
    name = _one_name(axis_name, "axis_index")
    return axis_index_p.bind(axis_name=name, axis_size=axis_frame(name).size)


def axis_size(axis_name) -> int:
    """The size of the named axis (or the product over a tuple of names), a Python int (``jax.lax.axis_size``).

    Raises: ``NameError`` when a name is not bound.
    """
    return _size(_check_names(axis_name, "axis_size"))


def pcast(x, axis_name, *, to: str):
    """Mark ``x`` (a pytree) as varying over the named axes (``jax.lax.pcast(x, name, to="varying")``).

    The values are unchanged; the result counts as differing per device for ``shard_map``'s ``check_vma``
    (an ``out_specs`` that leaves the axis out is refused), as JAX's ``pvary``. fnarray tracks which values
    vary from the program itself, so a ``pcast`` is only needed where JAX programs need one.

    Args:
      x: arrays (a pytree); axis_name: a bound axis name or a tuple of them; to: ``"varying"``.
    Raises:
      ``NotImplementedError`` for ``to="reduced"``/``"unreduced"`` (JAX's unreduced arrays); ``NameError``
      for an unbound name; ``TypeError`` for a set of names (as JAX).
    """
    if isinstance(axis_name, (set, frozenset)):
        raise TypeError(f"pcast: axis_name={axis_name!r} must be a name or a tuple of names, not a set")
    if to != "varying":
        raise NotImplementedError(f"pcast(to={to!r}): fnarray has no reduced or unreduced arrays; to='varying' "
                                  "works")
    names = names_of(axis_name)
    if not names:
        return x
    _check_names(names, "pcast")
    from fnarray.core import lax

    def one(v):
        for n in names:  # a select on this position: the same values, now depending on the axis
            keep = lax.ge(axis_index(n), lax.full((), 0, np.dtype(np.int32)))
            v = lax.select(keep, v, v)
        return v
    return _map_leaves(one, x)


def program_axis_names(program) -> set:
    """The axis names that the collectives of ``program`` (sub-programs included) name."""
    from fnarray.core.passes import walk_eqns
    names: set = set()
    for e in walk_eqns(program):
        if e.primitive in COLLECTIVES:
            names.update(names_of(e.params["axis_name"]))
    return names


def free_axis_names(program) -> set:
    """The axis names that ``program``'s collectives name and no ``shard_map`` inside it binds (its mesh's axes):
    the names the caller's context must bind."""
    from fnarray.core.subprograms import subprograms
    names: set = set()
    for e in program.eqns:
        if e.primitive in COLLECTIVES:
            names.update(names_of(e.params["axis_name"]))
        subs = subprograms(e)
        if not subs:  # (most equations: no sets made; jit asks this of each new shape's program, issue 28)
            continue
        inner: set = set()
        for sub in subs:
            inner |= free_axis_names(sub)
        if e.primitive.name == "shard_map":
            inner -= set(e.params["mesh"].axis_names)
        names |= inner
    return names


def lift_for_program(args: list, program) -> list | None:
    """``args`` lifted into the innermost named-vmap level whose axis ``program``'s collectives name, or ``None``
    when there is nothing to lift (no bound axis, none named, no operand): what ``jit`` needs when it is called
    inside a named ``vmap`` with operands that do not vary (its program would otherwise run outside the axis)."""
    if not _env.frames or not args:
        return None
    used = program_axis_names(program)
    names = [f.name for f in _env.frames if f.main is not None and f.name in used]
    if not names:
        return None
    lifted = _lift(args, names)
    return None if all(a is b for a, b in zip(lifted, args, strict=True)) else lifted
