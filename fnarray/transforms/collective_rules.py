"""The collectives' batching, JVP and transpose rules (``fnarray.core.collectives``).

**Batching.** Under a ``vmap`` level whose axis a collective names, the collective *is* an operation on
the batch axis: ``psum`` a ``reduce_sum`` over it, ``all_gather`` moving it into place, ``psum_scatter`` a
sum whose blocks become the new batch axis, ``all_to_all`` a transpose of the batch axis with the split
axis, ``ppermute`` a reordering of the batch, ``axis_index`` an ``iota``. So every backend runs them with
its ordinary primitives. With ``axis_index_groups`` the reduction or gather runs over each group's examples
(slices of the batch) and each example takes its group's result. Under a level of another axis the
collective acts on each example alone (its axis params shift past the batch axis). Rules:
``rule(vals, dims, axis, **params)`` in ``batching_tables.collective_batchers``; ``axis`` is the level's
``BatchAxis(size, name)``.

**Differentiation** (JAX's rules): the sum, gather, scatter, all-to-all and permutation are linear;
their transposes are ``psum`` (as ``jax.vmap`` transposes it), ``psum_scatter`` for ``all_gather`` and back,
the all-to-all with its axes swapped, and the inverse permutation. ``pmax``/``pmin`` pass the tangent of
the positions that hold the extreme, ties sharing it equally. With ``axis_index_groups`` the same rules
hold within each group; the transpose of a grouped ``all_gather`` is the grouped ``psum`` of the
cotangent, of which each position keeps its own block (its place in its group).
"""

from __future__ import annotations

import numpy as np

from fnarray.core import collectives as C
from fnarray.core import dtypes, lax
from fnarray.core.avals import get_aval
from fnarray.transforms.ad_tables import Zero, instantiate_zeros, primitive_jvps, primitive_transposes, tangent_aval
from fnarray.transforms.batching import move_batch_dim
from fnarray.transforms.batching_tables import collective_batchers

__all__: list = []


def _shape(x):
    return get_aval(x).shape


def _own(axis, axis_name) -> bool:
    return axis.name is not None and axis.name in C.names_of(axis_name)


def _rest(axis, axis_name):
    """The names left once this level's axis is done (``None`` when none is)."""
    rest = tuple(n for n in C.names_of(axis_name) if n != axis.name)
    if not rest:
        return None
    return rest[0] if len(rest) == 1 else rest


def _front(val, d, axis):
    return move_batch_dim(val, d, 0, axis.size)


def _merge(x, a):
    """``x`` with axes ``a`` and ``a + 1`` merged into one (``a`` major)."""
    s = _shape(x)
    return lax.reshape(x, s[:a] + (s[a] * s[a + 1],) + s[a + 2:])


def _split(x, a, n):
    """``x`` with axis ``a`` split into ``(n, s[a] // n)``."""
    s = _shape(x)
    return lax.reshape(x, s[:a] + (n, s[a] // n) + s[a + 1:])


def _move(x, src, dst):
    return move_batch_dim(x, src, dst)


# ----------------------------------------------------------------------------- batching


def _extra(groups) -> dict:
    return {} if groups is None else {"axis_index_groups": groups}


def _by_group(xs, groups, n, fn):
    """``fn`` applied to each group's examples (``xs``: the examples along axis 0; ``fn`` gets them stacked
    along axis 0 and returns one value), every example then taking its group's value: stacked along axis 0."""
    results, of = [], {}
    for k, g in enumerate(groups):
        members = [lax.slice_in_dim(xs, i, i + 1, axis=0) for i in g]
        r = fn(members[0] if len(members) == 1 else lax.concatenate(members, 0))
        results.append(lax.reshape(r, (1,) + tuple(_shape(r))))
        of.update((i, k) for i in g)
    return lax.concatenate([results[of[i]] for i in range(n)], 0)


def _reduction(prim, reduce, shared):
    """psum / pmax / pmin: ``reduce`` over the batch axis; ``shared(x, n)`` for a value all examples share."""
    def rule(vals, dims, axis, *, axis_name, axis_index_groups=None):
        (x,), (d,) = vals, dims
        groups = axis_index_groups
        if not _own(axis, axis_name):
            return C.bind_collective(prim, x, axis_name=axis_name, **_extra(groups)), d
        if groups is not None:  # one axis name (checked where the collective is called)
            sizes = {len(g) for g in groups}
            if d is None and len(sizes) == 1:
                return shared(x, sizes.pop()), None
            xs = _front(x, d, axis) if d is not None else lax.broadcast_in_dim(
                x, (axis.size,) + tuple(_shape(x)), tuple(range(1, len(_shape(x)) + 1)))
            return _by_group(xs, groups, axis.size, lambda m: reduce(m, (0,))), 0
        out = shared(x, axis.size) if d is None else reduce(x, (d,))
        rest = _rest(axis, axis_name)
        if rest is not None:
            out = C.bind_collective(prim, out, axis_name=rest)
        return out, None
    rule.__name__ = f"{prim.name}_batch"
    return rule


def _times(x, n):
    return lax.mul(x, lax.full((), n, get_aval(x).dtype))


collective_batchers[C.psum_p] = _reduction(C.psum_p, lax.reduce_sum, _times)
collective_batchers[C.pmax_p] = _reduction(C.pmax_p, lax.reduce_max, lambda x, n: x)
collective_batchers[C.pmin_p] = _reduction(C.pmin_p, lax.reduce_min, lambda x, n: x)


def _all_gather_batch(vals, dims, level, **params):
    (x,), (d,) = vals, dims
    a, tiled = params["axis"], params["tiled"]
    groups = params.get("axis_index_groups")
    if not _own(level, params["axis_name"]):
        if d is None:
            return C.bind_collective(C.all_gather_p, x, **params), None
        return C.bind_collective(C.all_gather_p, _front(x, d, level), **{**params, "axis": a + 1}), 0
    if groups is not None:
        k = len(groups[0])
        if d is None:  # every member holds x: k copies of it, stacked at ``a``
            s = tuple(_shape(x))
            out = lax.broadcast_in_dim(x, s[:a] + (k,) + s[a:], tuple(i for i in range(len(s) + 1) if i != a))
            return (_merge(out, a) if tiled else out), None

        def gather(m):  # m: the group's examples along axis 0
            out = _move(m, 0, a)
            return _merge(out, a) if tiled else out
        return _by_group(_front(x, d, level), groups, level.size, gather), 0
    out = move_batch_dim(x, d, a, level.size)  # the examples, stacked at ``a``
    return (_merge(out, a) if tiled else out), None


def _psum_scatter_batch(vals, dims, level, *, axis_name, scatter_dimension, tiled, axis_size):
    (x,), (d,) = vals, dims
    sd = scatter_dimension
    if not _own(level, axis_name):
        if d is None:
            return C.bind_collective(C.psum_scatter_p, x, axis_name=axis_name, scatter_dimension=sd, tiled=tiled,
                                     axis_size=axis_size), None
        return C.bind_collective(C.psum_scatter_p, _front(x, d, level), axis_name=axis_name,
                                 scatter_dimension=sd + 1, tiled=tiled, axis_size=axis_size), 0
    total = _times(x, level.size) if d is None else lax.reduce_sum(x, (d,))
    if tiled:
        total = _split(total, sd, level.size)
    return total, sd  # block i along ``sd`` belongs to example i


def _all_to_all_batch(vals, dims, level, *, axis_name, split_axis, concat_axis, tiled, axis_size):
    (x,), (d,) = vals, dims
    s, c = split_axis, concat_axis
    if not _own(level, axis_name):
        if d is None:
            return C.bind_collective(C.all_to_all_p, x, axis_name=axis_name, split_axis=s, concat_axis=c,
                                     tiled=tiled, axis_size=axis_size), None
        return C.bind_collective(C.all_to_all_p, _front(x, d, level), axis_name=axis_name, split_axis=s + 1,
                                 concat_axis=c + 1, tiled=tiled, axis_size=axis_size), 0
    n = level.size
    xs = _front(x, d, level)                      # (sender j, *x.shape)
    if tiled:
        xs = _split(xs, 1 + s, n)                 # (j, ..., receiver i, block, ...)
    xs = _move(xs, 1 + s, 0)                      # (i, j, rest): x's shape without ``s`` (tiled: the block)
    xs = _move(xs, 1, 1 + c)                      # the senders at ``c`` of the rest
    return (_merge(xs, 1 + c) if tiled else xs), 0


def _ppermute_batch(vals, dims, level, *, axis_name, perm, axis_size):
    (x,), (d,) = vals, dims
    if not _own(level, axis_name):
        if d is None:
            return C.bind_collective(C.ppermute_p, x, axis_name=axis_name, perm=perm, axis_size=axis_size), None
        return C.bind_collective(C.ppermute_p, x, axis_name=axis_name, perm=perm, axis_size=axis_size), d
    n = level.size
    xs = _front(x, d, level)
    shape, dt = _shape(xs)[1:], get_aval(xs).dtype
    source = {dst: src for src, dst in perm}
    pieces = [lax.slice_in_dim(xs, source[i], source[i] + 1, axis=0) if i in source
              else lax.full((1,) + shape, 0, dt) for i in range(n)]
    return lax.concatenate(pieces, 0), 0


def _axis_index_batch(vals, dims, level, *, axis_name, axis_size):
    if not _own(level, axis_name):
        return C.axis_index_p.bind(axis_name=axis_name, axis_size=axis_size), None
    return lax.iota(dtypes.int32, level.size), 0


collective_batchers[C.all_gather_p] = _all_gather_batch
collective_batchers[C.psum_scatter_p] = _psum_scatter_batch
collective_batchers[C.all_to_all_p] = _all_to_all_batch
collective_batchers[C.ppermute_p] = _ppermute_batch
collective_batchers[C.axis_index_p] = _axis_index_batch

# ----------------------------------------------------------------------------- JVP and transpose


def _linear(prim, transpose):
    def jvp(primals, tangents, **params):
        out = C.bind_collective(prim, primals[0], **params)
        t = tangents[0]
        if isinstance(t, Zero):
            return out, Zero(tangent_aval(get_aval(out)))
        return out, C.bind_collective(prim, instantiate_zeros(t), **params)

    def tr(ct, x, **params):
        if isinstance(ct, Zero):
            return [Zero(x.aval)]
        return [transpose(ct, **params)]
    jvp.__name__, tr.__name__ = f"{prim.name}_jvp", f"{prim.name}_transpose"
    primitive_jvps[prim] = jvp
    primitive_transposes[prim] = tr


def psum_transpose(ct, *, axis_name, axis_index_groups=None):
    # As jax.vmap: the cotangent of a sum every position holds is summed back (shard_map's transpose
    # rescales its replicated outputs, so that it agrees with JAX's shard_map; transforms/shard_map.py).
    return C.bind_collective(C.psum_p, ct, axis_name=axis_name, **_extra(axis_index_groups))


def all_gather_transpose(ct, *, axis_name, axis, tiled, axis_size, axis_index_groups=None):
    if axis_index_groups is None:
        return C.bind_collective(C.psum_scatter_p, ct, axis_name=axis_name, scatter_dimension=axis, tiled=tiled,
                                 axis_size=axis_size)
    # Position j's value sits at block place(j) of every gather of its group: the group's sum of the
    # cotangents, at that block.
    total = C.bind_collective(C.psum_p, ct, axis_name=axis_name, axis_index_groups=axis_index_groups)
    place = np.zeros(sum(len(g) for g in axis_index_groups), np.int32)
    for g in axis_index_groups:
        place[list(g)] = np.arange(len(g), dtype=np.int32)
    here = C.axis_index(axis_name)
    block = lax.full((), 0, dtypes.int32)
    for j in np.flatnonzero(place):  # from scalars only: a transposed program may capture no array constant
        block = lax.select(lax.eq(here, lax.full((), int(j), dtypes.int32)), lax.full((), int(place[j]), dtypes.int32),
                           block)
    s = tuple(_shape(total))
    width = s[axis] // axis_size
    zero = lax.full((), 0, dtypes.int32)
    start = lax.mul(block, lax.full((), width, dtypes.int32))
    out = lax.dynamic_slice(total, [start if i == axis else zero for i in range(len(s))],
                            s[:axis] + (width,) + s[axis + 1:])
    return out if tiled else lax.reshape(out, s[:axis] + s[axis + 1:])


def psum_scatter_transpose(ct, *, axis_name, scatter_dimension, tiled, axis_size):
    return C.bind_collective(C.all_gather_p, ct, axis_name=axis_name, axis=scatter_dimension, tiled=tiled,
                             axis_size=axis_size)


def all_to_all_transpose(ct, *, axis_name, split_axis, concat_axis, tiled, axis_size):
    return C.bind_collective(C.all_to_all_p, ct, axis_name=axis_name, split_axis=concat_axis, concat_axis=split_axis,
                             tiled=tiled, axis_size=axis_size)


def ppermute_transpose(ct, *, axis_name, perm, axis_size):
    return C.bind_collective(C.ppermute_p, ct, axis_name=axis_name, perm=tuple((d, s) for s, d in perm),
                             axis_size=axis_size)


_linear(C.psum_p, psum_transpose)
_linear(C.all_gather_p, all_gather_transpose)
_linear(C.psum_scatter_p, psum_scatter_transpose)
_linear(C.all_to_all_p, all_to_all_transpose)
_linear(C.ppermute_p, ppermute_transpose)


def _extreme_jvp(prim):
    def jvp(primals, tangents, *, axis_name, axis_index_groups=None):
        (x,), (t,) = primals, tangents
        extra = _extra(axis_index_groups)
        out = C.bind_collective(prim, x, axis_name=axis_name, **extra)
        if isinstance(t, Zero):
            return out, Zero(tangent_aval(get_aval(out)))
        hit = lax.convert_element_type(lax.eq(x, out), get_aval(x).dtype)
        num = C.bind_collective(C.psum_p, lax.mul(t, hit), axis_name=axis_name, **extra)
        return out, lax.div(num, C.bind_collective(C.psum_p, hit, axis_name=axis_name, **extra))
    jvp.__name__ = f"{prim.name}_jvp"
    primitive_jvps[prim] = jvp


_extreme_jvp(C.pmax_p)
_extreme_jvp(C.pmin_p)


def axis_index_jvp(primals, tangents, **params):
    out = C.axis_index_p.bind(**params)
    return out, Zero(tangent_aval(get_aval(out)))


primitive_jvps[C.axis_index_p] = axis_index_jvp
