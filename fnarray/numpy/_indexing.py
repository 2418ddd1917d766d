"""Indexing: ``x[key]``, functional updates ``x.at[key].set(v)``, ``take`` and ``take_along_axis``.

Semantics (docs/design.md, "Indices"), as NumPy where NumPy is defined and as JAX beyond:

- every integer index, a static Python int as an array or a traced one, is first normalised (a
  negative value counts from the end), then clamped into bounds when reading (``x[10]`` on a length-3
  axis is ``x[2]``, ``x[-10]`` is ``x[0]``, as JAX) and dropped when updating (``x.at[10].set(v)`` is
  ``x``), in eager mode and under ``jit`` alike; only an index into an axis of size 0 raises
  ``IndexError``. Slices clamp, as in NumPy;
- ``x.at[key].get(mode=...)``: ``None``/``"clip"``/``"promise_in_bounds"`` clamp, ``"fill"`` (or
  ``"drop"``) gives ``fill_value`` where an index is out of bounds (default NaN for inexact dtypes, the
  lowest signed or highest unsigned integer, True); ``x.at[key].set/add/...(mode=...)``: ``None``/
  ``"drop"``/``"fill"``/``"promise_in_bounds"`` drop out-of-bounds updates, ``"clip"`` clamps them
  onto the edge (JAX's ``GatherScatterMode``);
- ``take``/``take_along_axis`` default to ``mode="fill"``, as ``jax.numpy``;
- advanced indices follow NumPy's placement rule: the broadcast index dimensions replace
  the indexed axes when the advanced indices are adjacent in the key, and go first when
  a slice, ``None`` or ``...`` separates them;
- a boolean mask needs concrete values (its number of ``True`` decides the shape), except
  in ``x.at[mask].op(v)`` with a value that does not depend on that number, which is a
  ``where``.

Basic keys (ints, slices, ``None``, ``...``, traced scalars) lower to ``slice``, ``rev``,
``dynamic_slice`` and ``reshape``; keys with arrays to one ``gather``; every ``.at`` update
to one ``scatter*`` over the full index grid of the key.
"""

from __future__ import annotations

import operator

import numpy as np

from fnarray.core import dtypes, lax
from fnarray.core.array import Array
from fnarray.core.errors import ConcretizationError, NonConcreteBooleanIndexError, ShapeError, check_callable
from fnarray.core.tracing import Tracer, is_scalar
from fnarray.numpy import _elementwise
from fnarray.numpy._util import asarray_internal, broadcast_shapes, normalize_axis
from fnarray.transforms.control_flow import while_loop

__all__ = ["_IndexUpdateHelper", "_getitem", "take", "take_along_axis"]

_I32 = dtypes.int32
_I32_MAX = int(np.iinfo(np.int32).max)


# ----------------------------------------------------------------------------- parsing the key

_MASK_UNDER_JIT = (
    "boolean mask indexing on a traced mask {aval}: the result's shape depends on how many "
    "elements are True, which is unknown under jit. Keep the shape with fnarray.numpy.where(mask, x, "
    "fill) (or x.at[mask].set(v) for updates), or get a fixed number of indices with "
    "fnarray.numpy.where(mask, size=N, fill_value=...) and index with those.")


def _slice_part(v, what):
    if v is None:
        return None
    if isinstance(v, Tracer):
        raise ConcretizationError(
            f"slice {what} must be static, got a traced value {v.aval.str_short()}: the slice length "
            "decides the result's shape. Use fnarray.lax.dynamic_slice(x, starts, sizes) for a "
            "traced start with a static size.")
    try:
        return operator.index(v)
    except TypeError:
        raise IndexError(f"slice {what} must be an int or None, got {type(v).__name__} {v!r}") from None


def _static_slice(s):
    out = slice(_slice_part(s.start, "start"), _slice_part(s.stop, "stop"), _slice_part(s.step, "step"))
    if out.step == 0:
        raise ValueError("slice step cannot be zero")
    return out


def _has_array(seq):
    return any(isinstance(e, Array) or (isinstance(e, (list, tuple)) and _has_array(e)) for e in seq)


def _bad_index(e):
    what = f"an array of dtype {e.dtype}" if hasattr(e, "dtype") else f"{type(e).__name__} {e!r}"
    return IndexError(f"only integers, slices (:), ellipsis (...), None and integer or boolean arrays are "
                      f"valid indices; got {what}")


def _parse_one(e):
    """One element of a key as ``(kind, payload)``."""
    if e is None:
        return "none", None
    if e is Ellipsis:
        return "ellipsis", None
    if isinstance(e, slice):
        return "slice", _static_slice(e)
    if isinstance(e, (bool, np.bool_)):
        return "bool0", bool(e)
    if isinstance(e, (int, np.integer)):
        return "int", int(e)
    if isinstance(e, (list, tuple)):
        if _has_array(e):
            return _parse_one(asarray_internal(e))
        v = np.asarray(e)
        if v.size == 0 and v.dtype.kind == "f":
            v = v.astype(np.int32)  # [] is an empty integer index, as in NumPy
        if v.dtype.kind not in "iub":
            raise _bad_index(v)
        e = v
    if isinstance(e, Array):
        if e.dtype == dtypes.bool_:
            if isinstance(e, Tracer):
                raise NonConcreteBooleanIndexError(_MASK_UNDER_JIT.format(aval=e.aval.str_short()))
            e = np.asarray(e)
        elif dtypes.is_int(e.dtype):
            return ("dyn" if e.ndim == 0 else "arr"), e
        else:
            raise _bad_index(e)
    if isinstance(e, np.ndarray):
        if e.dtype == np.bool_:
            return ("bool0", bool(e)) if e.ndim == 0 else ("mask", e)
        if e.dtype.kind in "iu":
            return ("int", int(e)) if e.ndim == 0 else ("arr", e)
    raise _bad_index(e)


_CONSUMES = {"int": 1, "dyn": 1, "arr": 1, "slice": 1}
_ADVANCED = ("int", "dyn", "arr", "bool0")


def _resolve(shape, key):
    """The key as a list of ``(kind, payload, axis)`` over ``shape``, and how many axes it indexes.

    Kinds: ``slice`` (a static ``slice``), ``int`` (in bounds, non-negative), ``dyn`` (a 0-d
    integer array), ``arr`` (an integer array), ``none``, ``bool0`` (a scalar boolean: a new
    axis of length 1 or 0) and ``sep`` (where an ``...`` stood; it separates advanced
    indices even when it covers no axis). Masks become one ``arr`` per masked axis.
    """
    if not isinstance(key, tuple):
        key = (key,)
    parsed = [_parse_one(e) for e in key]
    ndim = len(shape)
    if sum(k == "ellipsis" for k, _ in parsed) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    consumed = sum(_CONSUMES.get(k, 0) for k, _ in parsed) + sum(p.ndim for k, p in parsed if k == "mask")
    if consumed > ndim:
        raise IndexError(f"too many indices for array: array is {ndim}-dimensional, but {consumed} were indexed")
    out, ax = [], 0
    for kind, p in parsed:
        if kind == "ellipsis":
            out.append(("sep", None, None))
            for _ in range(ndim - consumed):
                out.append(("slice", slice(None), ax))
                ax += 1
        elif kind in ("none", "bool0"):
            out.append((kind, p, None))
        elif kind == "mask":
            covered = shape[ax:ax + p.ndim]
            # A mask axis of length 0 selects nothing whatever the array's length (NumPy, JAX and the
            # array API test suite accept it).
            if len(covered) != p.ndim or any(k not in (s, 0) for k, s in zip(p.shape, covered)):
                raise IndexError(f"boolean index of shape {p.shape} does not match the indexed axes "
                                 f"{tuple(range(ax, ax + p.ndim))} of shape {covered} (array shape {shape})")
            for comp in np.nonzero(p):
                out.append(("arr", comp, ax))
                ax += 1
        elif kind == "int":
            n = shape[ax]
            if n == 0:
                raise IndexError(f"index {p} is out of bounds for axis {ax} with size 0")
            if -n <= p < n:
                out.append(("int", p % n, ax))
            else:  # as JAX: an index like any other, clamped when read, dropped when updated (or filled); held as
                # the nearest out-of-bounds index, which behaves alike and fits int64 (x[2**70] was NumPy's
                # OverflowError "too large to convert to C long")
                out.append(("dyn", np.int64(n if p >= n else -n - 1), ax))
            ax += 1
        else:
            out.append((kind, p, ax))
            ax += 1
    return out, ax


def _slice_bounds(s, n):
    """``(lo, hi, stride, reversed, length)`` of a static slice over an axis of size ``n``."""
    start, stop, step = s.indices(n)
    m = len(range(start, stop, step))
    if m == 0:
        return 0, 0, 1, False, 0
    if step > 0:
        return start, start + (m - 1) * step + 1, step, False, m
    return start + (m - 1) * step, start + 1, -step, True, m


def _is_full(entry, shape):
    kind, p, ax = entry
    return kind == "sep" or (kind == "slice" and p.indices(shape[ax]) == (0, shape[ax], 1))


def _strip_trailing_full(entries, shape):
    """Drop trailing full slices (and a trailing ``...``): those axes are left as they are."""
    entries = list(entries)
    while entries and _is_full(entries[-1], shape):
        entries.pop()
    n_indexed = max((ax + 1 for _, _, ax in entries if ax is not None), default=0)
    return entries, n_indexed


# ----------------------------------------------------------------------------- index values


def _normalize(i, n):
    """An int32 index (array) over an axis of size ``n``: negative values count from the end;
    values out of bounds stay out of bounds (``-1`` or ``n`` for the wide dtypes) so that
    gathers clamp them and scatters drop them."""
    if n > _I32_MAX:  # an index past 2**31 - 1 would wrap: x[-1] read element 2**31 - 64 of 2**31 + 64
        raise ShapeError(f"an array index over an axis of {n} elements: fnarray's index arithmetic is int32 "
                         f"(docs/design.md, as JAX without x64), which addresses at most {_I32_MAX + 1} elements "
                         "per axis; reshape the array so that the indexed axis is shorter, or slice it with "
                         "Python ints first (x[a:b] and x[k] with a Python int need no index arithmetic)")
    if isinstance(i, (int, np.integer, np.ndarray)):
        v = np.asarray(i)
        if v.dtype.kind == "u":
            return np.minimum(v, n).astype(np.int32)
        v = v.astype(np.int64)
        return np.clip(np.where(v < 0, v + n, v), -1, n).astype(np.int32)
    d = i.dtype
    if d.itemsize < 4:
        i, d = lax.convert_element_type(i, _I32), _I32
    if dtypes.is_signed(d):
        nn = np.asarray(n, d)[()]
        i = lax.select(lax.lt(i, np.asarray(0, d)[()]), lax.add(i, nn), i)
        if d != _I32:
            i = lax.max(lax.min(i, nn), np.asarray(-1, d)[()])
    else:
        i = lax.min(i, np.asarray(n, d)[()])
    return i if (d == _I32 and not i.weak_type) else lax.convert_element_type(i, _I32)


def _stack_columns(cols, shape):
    """Index columns (each broadcastable to ``shape``, NumPy or traced) stacked on a new last axis."""
    if all(isinstance(c, np.ndarray) for c in cols):
        full = [np.broadcast_to(c, shape) for c in cols]
        return asarray_internal(np.stack(full, -1).astype(np.int32).reshape(tuple(shape) + (len(cols),)))
    parts = []
    for c in cols:
        c = asarray_internal(np.ascontiguousarray(c, np.int32)) if isinstance(c, np.ndarray) else c
        c = lax.broadcast_to_rank_shape(c, shape)
        parts.append(lax.reshape(c, tuple(shape) + (1,)))
    return lax.concatenate(parts, len(shape))


def _adv_shape(advs):
    shapes = [i.shape if isinstance(i, Array) else np.shape(i) for _, i in advs]
    try:
        return broadcast_shapes(*shapes, name="indexing")
    except ShapeError:
        raise IndexError(f"shape mismatch: indexing arrays of shapes {', '.join(map(str, shapes))} "
                         "could not be broadcast together") from None


def _placed(c, lead, trail):
    """``c`` with ``lead`` size-1 axes before and ``trail`` after."""
    shape = (1,) * lead + tuple(np.shape(c) if isinstance(c, np.ndarray) else c.shape) + (1,) * trail
    return c.reshape(shape) if isinstance(c, np.ndarray) else lax.reshape(c, shape)


def _adjacent(entries):
    pos = [k for k, e in enumerate(entries) if e[0] in _ADVANCED]
    return bool(pos) and pos == list(range(pos[0], pos[-1] + 1))


def _check_gather_axis(n, index_shape, ax):
    if n == 0 and np.prod(index_shape, dtype=np.int64) > 0:
        raise IndexError(f"cannot take indices from axis {ax} of size 0")


# ----------------------------------------------------------------------------- x[key]


def _basic_get(x, entries, n_indexed):
    nd = x.ndim
    starts, limits, strides = [0] * nd, list(x.shape), [1] * nd
    revs, dyns, out_shape = [], {}, []
    for kind, p, ax in entries:
        if kind == "none":
            out_shape.append(1)
        elif kind == "slice":
            lo, hi, st, rev, m = _slice_bounds(p, x.shape[ax])
            starts[ax], limits[ax], strides[ax] = lo, hi, st
            if rev:
                revs.append(ax)
            out_shape.append(m)
        elif kind == "int":
            starts[ax], limits[ax] = p, p + 1
        elif kind == "dyn":
            dyns[ax] = p
    out_shape.extend(x.shape[n_indexed:])
    y = lax.rev(lax.slice(x, starts, limits, strides), revs)
    if dyns:
        for ax in dyns:
            if x.shape[ax] == 0:
                raise IndexError(f"index into axis {ax} of size 0")
        dstarts = [_normalize(dyns[a], x.shape[a]) if a in dyns else np.int32(0) for a in range(nd)]
        sizes = [1 if a in dyns else y.shape[a] for a in range(nd)]
        y = lax.dynamic_slice(y, dstarts, sizes)
    return lax.reshape(y, out_shape)


def _advanced_get(x, entries, n_indexed):
    # 1. x' = x with a size-1 axis for every None / scalar bool, statically sliced on slice entries
    xp_shape, entry_axis = [], []
    for kind, _p, ax in entries:
        if kind in ("none", "bool0"):
            entry_axis.append(len(xp_shape))
            xp_shape.append(1)
        elif kind == "sep":
            entry_axis.append(None)
        else:
            entry_axis.append(len(xp_shape))
            xp_shape.append(x.shape[ax])
    xp_shape.extend(x.shape[n_indexed:])
    y = lax.reshape(x, xp_shape)
    nd = len(xp_shape)
    starts, limits, strides, revs = [0] * nd, list(xp_shape), [1] * nd, []
    advs = []
    for (kind, p, _), a in zip(entries, entry_axis, strict=True):
        if kind == "slice":
            lo, hi, st, rev, _ = _slice_bounds(p, xp_shape[a])
            starts[a], limits[a], strides[a] = lo, hi, st
            if rev:
                revs.append(a)
        elif kind == "bool0":
            advs.append((a, np.zeros((1 if p else 0,), np.int32)))
        elif kind in ("int", "dyn", "arr"):
            advs.append((a, p))
    y = lax.rev(lax.slice(y, starts, limits, strides), revs)
    # 2. one gather over the advanced axes
    bshape = _adv_shape(advs)
    cols = []
    for a, i in advs:
        _check_gather_axis(xp_shape[a], bshape, a)
        cols.append(_normalize(i, xp_shape[a]))
    idx = _stack_columns(cols, bshape)
    g = lax.gather(y, idx, tuple(a for a, _ in advs))
    # 3. NumPy's placement of the broadcast index dimensions
    if _adjacent(entries):
        first = min(a for a, _ in advs)
        if first:
            nb = len(bshape)
            rest = g.ndim - nb
            perm = [nb + j for j in range(first)] + list(range(nb)) + [nb + j for j in range(first, rest)]
            g = lax.transpose(g, perm)
    return g


def _getitem(x, key):
    """``x[key]`` with NumPy's basic and advanced indexing (see the module docstring)."""
    if isinstance(key, tuple) and not key:
        return x
    if type(key) is int:
        shape = x.shape
        if shape and -shape[0] <= key < shape[0]:  # ``x[i]`` in bounds: what ``_basic_get`` binds, without parsing
            i = key % shape[0]
            nd = len(shape)
            y = lax.slice(x, (i,) + (0,) * (nd - 1), (i + 1,) + shape[1:], (1,) * nd)
            return lax.reshape(y, shape[1:])
    entries, n_indexed = _resolve(x.shape, key)
    if any(e[0] in ("arr", "bool0") for e in entries):
        entries, n_indexed = _strip_trailing_full(entries, x.shape)
        return _advanced_get(x, entries, n_indexed)
    return _basic_get(x, entries, n_indexed)


# ----------------------------------------------------------------------------- x.at[key]


def _index_grid(shape, entries, n_indexed):
    """``(axes, indices, out_shape)`` with ``x[key] == gather(x, indices, axes)`` of ``out_shape``.

    Every indexed axis gets a column of the index grid: slices their positions, advanced
    indices their normalised values, laid out in NumPy's order of result dimensions.
    """
    advs = [(ax, p) for kind, p, ax in entries if kind in ("int", "dyn", "arr")]
    advs += [(None, np.zeros((1 if p else 0,), np.int32)) for kind, p, _ in entries if kind == "bool0"]
    bshape = _adv_shape(advs) if advs else ()
    slots = []  # ("B",) or ("slice", axis, positions) or ("one",)
    if advs and not _adjacent(entries):
        slots.append(("B",))
    for kind, p, ax in entries:
        if kind in _ADVANCED:
            if ("B",) not in slots:
                slots.append(("B",))
        elif kind == "slice":
            slots.append(("slice", ax, np.arange(*p.indices(shape[ax]), dtype=np.int32)))
        elif kind == "none":
            slots.append(("one",))
    grid, where_b, slice_cols = [], 0, {}
    for s in slots:
        if s[0] == "B":
            where_b = len(grid)
            grid.extend(bshape)
        elif s[0] == "one":
            grid.append(1)
        else:
            slice_cols[s[1]] = (len(grid), s[2])
            grid.append(len(s[2]))
    nb = len(grid)
    cols, axes = [], []
    adv_of = {ax: i for ax, i in advs if ax is not None}
    for ax in range(n_indexed):
        if ax in adv_of:
            col = _normalize(adv_of[ax], shape[ax])
            col = np.broadcast_to(col, bshape) if isinstance(col, np.ndarray) else \
                lax.broadcast_to_rank_shape(col, bshape)
            col = _placed(col, where_b, nb - where_b - len(bshape))
            cols.append(col)
        else:
            q, pos = slice_cols[ax]
            cols.append(pos.reshape((1,) * q + (len(pos),) + (1,) * (nb - q - 1)))
        axes.append(ax)
    out_shape = tuple(grid) + tuple(shape[n_indexed:])
    idx = _stack_columns(cols, tuple(grid)) if cols else None
    return tuple(axes), idx, out_shape


def _cast_value(values, d):
    """Update values cast to ``d``: a Python or NumPy scalar stays a literal, the rest an Array."""
    if is_scalar(values):
        with np.errstate(all="ignore"):
            return np.asarray(values).astype(d)[()]
    v = values if isinstance(values, Array) else asarray_internal(values)
    return lax.convert_element_type(v, d)


def _prepare_values(x, values, out_shape):
    """``values`` cast to ``x.dtype`` and broadcast to the indexed shape (leading 1s may be dropped)."""
    v = _cast_value(values, x.dtype)
    s = tuple(np.shape(v))
    while len(s) > len(out_shape) and s[0] == 1:
        s = s[1:]
        v = lax.reshape(v, s)
    k = len(out_shape) - len(s)
    if k < 0 or any(n not in (1, out_shape[k + j]) for j, n in enumerate(s)):
        raise ShapeError(f"x.at[...]: values of shape {s} cannot be broadcast to the indexed shape {out_shape}")
    return lax.broadcast_in_dim(v, out_shape, tuple(range(k, len(out_shape)))) if s != out_shape else v


_SCATTER = {"set": lax.scatter, "add": lax.scatter_add, "multiply": lax.scatter_mul,
            "min": lax.scatter_min, "max": lax.scatter_max}
_COMBINE = {"set": lambda old, new: new, "add": lax.add, "multiply": lax.mul, "min": lax.min, "max": lax.max}


def _single_mask(key):
    """The boolean mask if ``key`` is one boolean array of rank >= 1, else ``None``."""
    k = key[0] if isinstance(key, tuple) and len(key) == 1 else key
    if isinstance(k, Array) and k.dtype == dtypes.bool_ and k.ndim >= 1:
        return k
    if isinstance(k, np.ndarray) and k.dtype == np.bool_ and k.ndim >= 1:
        return asarray_internal(k)
    return None


def _update(x, key, values, op, clip=False):
    mask = _single_mask(key)
    if mask is not None:
        v = _cast_value(values, x.dtype)
        vshape = tuple(np.shape(v))
        k = mask.ndim
        if mask.shape != x.shape[:k]:
            if k <= x.ndim and all(m in (s, 0) for m, s in zip(mask.shape, x.shape)):
                return x  # a mask axis of length 0 selects nothing, as in x[mask]
            raise IndexError(f"boolean index of shape {mask.shape} does not match the leading axes of "
                             f"an array of shape {x.shape}")
        trailing = x.shape[k:]
        if len(vshape) <= len(trailing) and all(n in (1, trailing[len(trailing) - len(vshape) + j])
                                                for j, n in enumerate(vshape)):
            # The value does not depend on the number of True entries: an elementwise select,
            # which also works on traced masks.
            vv = lax.broadcast_in_dim(v, x.shape, tuple(range(x.ndim - len(vshape), x.ndim)))
            m = lax.broadcast_in_dim(mask, x.shape, tuple(range(k)))
            return _like(lax.select(m, _COMBINE[op](x, vv), x), x)
        if isinstance(mask, Tracer):
            raise NonConcreteBooleanIndexError(_MASK_UNDER_JIT.format(aval=mask.aval.str_short()))
    if isinstance(key, tuple) and not key:
        key = (Ellipsis,)
    entries, n_indexed = _resolve(x.shape, key)
    entries, n_indexed = _strip_trailing_full(entries, x.shape)
    axes, idx, out_shape = _index_grid(x.shape, entries, n_indexed)
    v = _prepare_values(x, values, out_shape)
    if idx is None:
        # no axis is indexed (only None, ..., or scalar booleans): the update covers all of x,
        # or nothing when a False made the index empty
        if 0 in out_shape[:len(out_shape) - x.ndim]:
            return x
        return _like(_COMBINE[op](x, lax.reshape(v, x.shape)), x)
    return _SCATTER[op](x, _clip_indices(idx, x.shape, axes) if clip else idx, v, axes)


def _like(out, x):
    """``out`` with ``x``'s weak type (an update never changes the array's type)."""
    return out if out.weak_type == x.weak_type else lax.convert_element_type(out, x.dtype, weak_type=x.weak_type)


_MODES = (None, "clip", "fill", "drop", "promise_in_bounds")  # JAX's GatherScatterMode names


def _check_mode(mode, what):
    if mode not in _MODES:
        raise ValueError(f"x.at[...].{what}: unknown mode {mode!r}; expected one of {_MODES} (jax.numpy's "
                         "modes: 'clip' clamps out-of-bounds indices, 'fill'/'drop' fill them when reading and "
                         "drop them when updating)")
    return mode


def _fill_get(x, key, fill_value):
    """``x[key]`` with ``fill_value`` (cast to ``x.dtype``) where an index is out of bounds."""
    if _single_mask(key) is not None or (isinstance(key, tuple) and not key):
        return _getitem(x, key)  # a mask or an empty key selects in-bounds elements only
    entries, n_indexed = _resolve(x.shape, key)
    entries, n_indexed = _strip_trailing_full(entries, x.shape)
    axes, idx, out_shape = _index_grid(x.shape, entries, n_indexed)
    if idx is None or not any(kind in ("dyn", "arr") for kind, _, _ in entries):
        return _getitem(x, key)  # only static in-bounds ints and slices: nothing can be out of bounds
    for kind, _, ax in entries:
        if kind in ("dyn", "arr"):
            _check_gather_axis(x.shape[ax], out_shape, ax)
    out = lax.gather(x, idx, axes)
    sizes = asarray_internal(np.asarray([x.shape[a] for a in axes], np.int32))
    k = len(out_shape) - (x.ndim - n_indexed)
    bounds = lax.broadcast_in_dim(sizes, idx.shape, (idx.ndim - 1,))
    bad = lax.bitwise_or(lax.lt(idx, np.int32(0)), lax.ge(idx, bounds))
    bad = lax.reduce_or(bad, (idx.ndim - 1,))
    bad = lax.broadcast_in_dim(bad, out_shape, tuple(range(k)))
    return lax.select(bad, lax.broadcast_in_dim(_fill_scalar(fill_value, x.dtype), out_shape, ()), out)


def _fill_scalar(fill_value, d):
    """``fill_value`` (default: ``_fill_default(d)``) as a 0-d value of dtype ``d``."""
    if fill_value is None:
        fill_value = _fill_default(d)
    if isinstance(fill_value, Array):
        if fill_value.ndim != 0:
            raise ShapeError(f"fill_value must be a scalar, got an array of shape {fill_value.shape}")
        return lax.convert_element_type(fill_value, d)
    with np.errstate(all="ignore"):
        return np.asarray(fill_value).astype(d)[()]


def _clip_indices(idx, shape, axes):
    """Index columns ``idx`` (last axis: one per entry of ``axes``) clamped into ``[0, shape[axis] - 1]``."""
    upper = asarray_internal(np.asarray([max(shape[a] - 1, 0) for a in axes], np.int32))
    return lax.max(lax.min(idx, lax.broadcast_in_dim(upper, idx.shape, (idx.ndim - 1,))), np.int32(0))


class _IndexUpdateRef:
    """``x.at[key]``: the pending functional update of ``x`` at ``key`` (as ``jax.numpy.ndarray.at``)."""

    __slots__ = ("array", "index")

    def __init__(self, array, index):
        self.array, self.index = array, index

    def __repr__(self):
        return f"_IndexUpdateRef({self.array.aval.str_short()}, {self.index!r})"

    def get(self, *, mode=None, fill_value=None, indices_are_sorted=False, unique_indices=False):
        """``x[key]`` (``jax.numpy.ndarray.at[...].get``).

        Args:
          mode: ``None``, ``"clip"`` or ``"promise_in_bounds"``: out-of-bounds indices (after a negative one
            counts from the end) are clamped onto the edge, as ``x[key]``; ``"fill"`` (or ``"drop"``): the
            elements read through an out-of-bounds index are ``fill_value``.
          fill_value: with ``mode="fill"``, a scalar cast to ``x.dtype`` (default NaN for inexact dtypes, the
            lowest signed or highest unsigned integer, True for bool, as JAX).

        Returns:
          An array of ``x[key]``'s shape and ``x``'s dtype.

        Raises:
          ValueError: an unknown ``mode``. IndexError: the errors of ``x[key]``.
        """
        if _check_mode(mode, "get") in ("fill", "drop"):
            return _fill_get(self.array, self.index, fill_value)
        return _getitem(self.array, self.index)

    def _apply(self, op, values, mode):
        return _update(self.array, self.index, values, op, clip=_check_mode(mode, op) == "clip")

    def set(self, values, *, mode=None, indices_are_sorted=False, unique_indices=False):
        """A copy of ``x`` with ``x[key] = values`` (cast to ``x.dtype``, broadcast to ``x[key]``'s shape).

        Out-of-bounds indices are dropped (``mode=None``, ``"drop"``, ``"fill"``, ``"promise_in_bounds"``) or,
        with ``mode="clip"``, clamped onto the edge (as ``jax.numpy``); with repeated indices one of the
        values wins. The other updates take the same ``mode``.
        """
        return self._apply("set", values, mode)

    def add(self, values, *, mode=None, indices_are_sorted=False, unique_indices=False):
        """A copy of ``x`` with ``values`` added at ``key``; repeated indices add up (``numpy.add.at``)."""
        return self._apply("add", values, mode)

    def subtract(self, values, *, mode=None, indices_are_sorted=False, unique_indices=False):
        """A copy of ``x`` with ``values`` subtracted at ``key`` (repeated indices accumulate)."""
        v = _cast_value(values, self.array.dtype)
        if isinstance(v, np.generic):
            with np.errstate(all="ignore"):
                v = (-v).astype(v.dtype)
        else:
            v = lax.neg(v)
        return self._apply("add", v, mode)

    def multiply(self, values, *, mode=None, indices_are_sorted=False, unique_indices=False):
        """A copy of ``x`` multiplied by ``values`` at ``key``; repeats multiply (``numpy.multiply.at``)."""
        return self._apply("multiply", values, mode)

    mul = multiply

    def divide(self, values, *, mode=None, indices_are_sorted=False, unique_indices=False):
        """``x`` divided by ``values`` at ``key`` (``x[key] /= values``; ``jax.numpy.ndarray.at[...].divide``).

        As JAX: ``x / ones_like(x).at[key].multiply(values)``, so an integer ``x`` gives a float array (true
        division, ``values`` first cast to ``x.dtype``) and repeated indices divide again.
        """
        return _elementwise.divide(self.array, self._factors(values, mode))

    def power(self, values, *, mode=None, indices_are_sorted=False, unique_indices=False):
        """``x`` raised to ``values`` at ``key`` (``x[key] **= values``; ``jax.numpy.ndarray.at[...].power``).

        As JAX: ``x ** ones_like(x).at[key].multiply(values)`` (``values`` cast to ``x.dtype``; repeated
        indices multiply their exponents); the result has ``x``'s dtype.
        """
        return _elementwise.power(self.array, self._factors(values, mode))

    def _factors(self, values, mode):
        x = self.array
        ones = _like(lax.full(x.shape, 1, x.dtype), x)
        return _update(ones, self.index, values, "multiply", clip=_check_mode(mode, "multiply") == "clip")

    def apply(self, func, *, mode=None, indices_are_sorted=False, unique_indices=False):
        """``x`` with the unary elementwise function ``func`` applied at ``key`` (``func.at(x, key)``;
        ``jax.numpy.ndarray.at[...].apply``): an index repeated ``k`` times applies ``func`` ``k`` times.

        Args:
          func: a function of one array that works elementwise (``fnp.sin``, ``lambda v: v * 3``); it is
            called on the whole array (as many times as the most repeated index) and its results kept at
            ``key``, so it must keep the shape and may not change the dtype.
          mode: as ``set``: out-of-bounds indices are dropped, or clamped with ``"clip"``.

        Raises:
          TypeError: ``func`` is not callable, or changes the shape or dtype of ``x``.
        """
        check_callable(func, "x.at[...].apply", "func (a function of the elements)")
        x = self.array
        counts = _update(lax.full(x.shape, 0, _I32), self.index, np.int32(1), "add",
                         clip=_check_mode(mode, "apply") == "clip")

        def applied(y):
            out = func(y)
            if getattr(out, "shape", None) != x.shape or out.dtype != x.dtype:
                raise TypeError(f"x.at[...].apply: func must keep x's shape and dtype {x.aval.str_short()}, "
                                f"got {getattr(out, 'aval', out)!r}")
            return out

        if not isinstance(counts, Tracer):
            for k in range(int(np.max(np.asarray(counts), initial=0))):   # eager: the repeats are known
                x = _like(lax.select(lax.gt(counts, np.int32(k)), applied(x), x), x)
            return x

        def body(carry):
            k, y = carry
            return k + 1, _like(lax.select(lax.gt(counts, k), applied(y), y), y)

        rounds = lax.reduce_max(counts, tuple(range(x.ndim))) if x.ndim else counts
        return while_loop(lambda c: c[0] < rounds, body, (np.int32(0), x))[1]

    def min(self, values, *, mode=None, indices_are_sorted=False, unique_indices=False):
        """A copy of ``x`` with ``minimum(x[key], values)`` at ``key`` (``numpy.minimum.at``)."""
        return self._apply("min", values, mode)

    def max(self, values, *, mode=None, indices_are_sorted=False, unique_indices=False):
        """A copy of ``x`` with ``maximum(x[key], values)`` at ``key`` (``numpy.maximum.at``)."""
        return self._apply("max", values, mode)


class _IndexUpdateHelper:
    """``x.at``: index it (``x.at[key]``) to get an object with ``set``, ``add``, ``subtract``,
    ``multiply``, ``divide``, ``power``, ``min``, ``max``, ``apply`` and ``get``; each returns a new array
    (``jax.numpy.ndarray.at``).

    Example: ``x.at[0, 1:].set(0.0)``, ``x.at[idx].add(v)`` (repeated ``idx`` accumulate).
    """

    __slots__ = ("array",)

    def __init__(self, array):
        self.array = array

    def __getitem__(self, index):
        return _IndexUpdateRef(self.array, index)

    def __repr__(self):
        return f"_IndexUpdateHelper({self.array.aval.str_short()})"


# ----------------------------------------------------------------------------- take


def _index_operand(indices, what):
    """Integer indices as a NumPy array (static) or an Array (traced or concrete)."""
    if isinstance(indices, Array):
        if not dtypes.is_int(indices.dtype):
            raise IndexError(f"{what}: indices must be integers, got {indices.dtype.name}")
        return indices
    v = np.asarray(indices)
    if v.size == 0 and v.dtype.kind == "f":
        v = v.astype(np.int32)
    if v.dtype == object and v.size and all(type(i) is int for i in v.flat):  # Python ints past int64 (JAX's error)
        big = max(v.flat, key=abs)
        raise OverflowError(f"{what}: the index {big} does not fit in int64; give indices within the array's axis "
                            "(negative ones count from its end)")
    if v.dtype.kind not in "iu":
        raise IndexError(f"{what}: indices must be integers, got {v.dtype}")
    return v


def _fill_default(d):
    if dtypes.is_inexact(d):
        return np.nan
    if dtypes.is_bool(d):
        return True
    info = dtypes.iinfo(d)
    return info.min if dtypes.is_signed(d) else info.max


def _with_fill(out, ni, n, fill_value, oob_shape_to):
    """``out`` with ``fill_value`` where the normalised index ``ni`` is out of ``[0, n)``."""
    fv = _fill_scalar(fill_value, out.dtype)
    if isinstance(ni, np.ndarray):
        bad = asarray_internal((ni < 0) | (ni >= n))
    else:
        bad = lax.bitwise_or(lax.lt(ni, np.int32(0)), lax.ge(ni, np.int32(n)))
    bad = oob_shape_to(bad)
    return lax.select(bad, lax.broadcast_in_dim(fv, out.shape, ()), out)


def _index_mode(i, n, mode, what, raw_clip=False):
    """Indices ``i`` into an axis of size ``n`` under ``mode`` (``take``'s modes), as int32. ``raw_clip``:
    ``"clip"`` clamps the indices as given, a negative one to 0 (``jax.numpy.take``, ``numpy.take``)."""
    if mode == "clip" and raw_clip:
        if isinstance(i, np.ndarray):
            return np.clip(i.astype(np.int64), 0, max(n - 1, 0)).astype(np.int32)
        d = i.dtype
        hi = np.asarray(min(max(n - 1, 0), dtypes.iinfo(d).max), d)[()]
        return lax.convert_element_type(lax.max(lax.min(i, hi), np.asarray(0, d)[()]), _I32)
    if mode in ("clip", "fill", "promise_in_bounds"):
        return _normalize(i, n)
    if mode == "wrap":
        if n == 0:
            raise IndexError(f"{what}: cannot wrap indices into an axis of size 0")
        if isinstance(i, np.ndarray):
            return np.mod(i.astype(np.int64), n).astype(np.int32)
        d = i.dtype
        r = lax.rem(i, np.asarray(n, d)[()])
        if dtypes.is_signed(d):
            r = lax.select(lax.lt(r, np.asarray(0, d)[()]), lax.add(r, np.asarray(n, d)[()]), r)
        return lax.convert_element_type(r, _I32)
    if mode == "raise":
        raise NotImplementedError(f"{what}: mode='raise' is not supported (it cannot be checked on traced values, "
                                  "as in jax.numpy); use 'fill' (the default), 'clip' or 'wrap'")
    raise ValueError(f"{what}: mode must be None, 'fill', 'clip', 'wrap' or 'promise_in_bounds', got {mode!r}")


def take(a, indices, axis=None, mode=None, fill_value=None, *, unique_indices=False, indices_are_sorted=False):
    """Elements of ``a`` at ``indices`` along ``axis`` (array API ``take``; ``numpy.take``, ``jax.numpy.take``).

    Differences from NumPy: out-of-bounds indices give ``fill_value`` by default (NumPy raises
    ``IndexError``), as in ``jax.numpy``.

    Args:
      a: array; ``axis=None`` takes from the flattened array.
      indices: integer array (any shape) or int; negative values count from the end (except with ``"clip"``).
      mode: ``None``/``"fill"`` (default, as ``jax.numpy.take``: out-of-bounds indices give ``fill_value``),
        ``"clip"`` (indices clamped into ``[0, n - 1]`` as given, so a negative one reads element 0, as
        ``numpy.take``), ``"wrap"`` (modulo the axis size) or ``"promise_in_bounds"`` (clamped).
      fill_value: with ``"fill"``, a scalar cast to ``a.dtype``; default NaN for inexact dtypes, the lowest
        signed / highest unsigned integer, True for bool (JAX's defaults).

    Returns:
      An array of ``a``'s dtype and shape ``a.shape[:axis] + indices.shape + a.shape[axis+1:]``.

    Raises:
      IndexError: non-integer indices, or non-empty indices into an empty axis.
      ValueError: unknown mode. NotImplementedError: ``mode="raise"`` (as JAX).
    """
    a = a if isinstance(a, Array) else asarray_internal(a)
    if axis is None:
        a = lax.reshape(a, (a.size,))
        ax = 0
    else:
        ax = normalize_axis(axis, a.ndim, "take axis")
    i = _index_operand(indices, "take")
    n = a.shape[ax]
    ishape = np.shape(i) if isinstance(i, np.ndarray) else i.shape
    _check_gather_axis(n, ishape, ax)
    mode = "fill" if mode is None else mode
    ni = _index_mode(i, n, mode, "take", raw_clip=True)
    col = (asarray_internal(np.asarray(ni, np.int32).reshape(ishape + (1,))) if isinstance(ni, np.ndarray)
           else lax.reshape(ni, ishape + (1,)))
    out = _move_axes_block(lax.gather(a, col, (ax,)), len(ishape), ax)
    if mode == "fill":
        k = len(ishape)
        out = _with_fill(out, ni, n, fill_value,
                         lambda b: lax.broadcast_in_dim(b, out.shape, tuple(range(ax, ax + k))))
    return out


def _move_axes_block(g, k, pos):
    """Move the first ``k`` axes of ``g`` to start at ``pos``."""
    if k == 0 or pos == 0:
        return g
    perm = list(range(k, k + pos)) + list(range(k)) + list(range(k + pos, g.ndim))
    return lax.transpose(g, perm)


def take_along_axis(arr, indices, axis=-1, mode=None, fill_value=None):
    """``arr`` indexed along ``axis`` by ``indices`` of the same rank (array API ``take_along_axis``;
    ``numpy.take_along_axis``).

    Differences from NumPy: out-of-bounds indices give ``fill_value`` by default (NumPy raises
    ``IndexError``), as in ``jax.numpy``; ``mode="clip"`` clamps them (after a negative index counts from
    the end), ``"wrap"`` wraps them.

    ``axis`` defaults to -1 (the last axis), as the array API 2024.12 and NumPy 2.3.

    The other axes of ``indices`` and ``arr`` broadcast; ``axis=None`` uses the flattened
    array and 1-d indices. Negative indices count from the end; ``mode`` as ``take``.

    Returns an array of ``arr``'s dtype and the broadcast shape (with ``indices.shape[axis]``
    along ``axis``). Raises ``ShapeError`` for a rank mismatch or shapes that do not broadcast.
    """
    arr = arr if isinstance(arr, Array) else asarray_internal(arr)
    i = _index_operand(indices, "take_along_axis")
    ishape = np.shape(i) if isinstance(i, np.ndarray) else i.shape
    if axis is None:
        if len(ishape) != 1:
            raise ShapeError(f"take_along_axis with axis=None needs 1-d indices, got shape {ishape}")
        arr = lax.reshape(arr, (arr.size,))
        axis = 0
    if len(ishape) != arr.ndim:
        raise ShapeError(f"take_along_axis: indices of rank {len(ishape)} do not match an array of rank "
                         f"{arr.ndim}; they need the same number of dimensions")
    ax = normalize_axis(axis, arr.ndim, "take_along_axis axis")
    other = [1 if d == ax else n for d, n in enumerate(arr.shape)]
    ioth = [1 if d == ax else n for d, n in enumerate(ishape)]
    try:
        grid = list(broadcast_shapes(tuple(other), tuple(ioth), name="take_along_axis"))
    except ShapeError:
        raise ShapeError(f"take_along_axis: indices of shape {ishape} do not broadcast with the array's "
                         f"shape {arr.shape} outside axis {ax}") from None
    grid[ax] = ishape[ax]
    grid = tuple(grid)
    n = arr.shape[ax]
    _check_gather_axis(n, grid, ax)
    mode = "fill" if mode is None else mode
    ni = _index_mode(i, n, mode, "take_along_axis")
    traced = not isinstance(ni, np.ndarray)
    cols = []
    for d in range(arr.ndim):
        shape_d = tuple(grid[d] if k == d else 1 for k in range(arr.ndim))
        if d == ax:
            cols.append(ni)
        elif arr.shape[d] == 1:
            cols.append(np.zeros((1,) * arr.ndim, np.int32))
        elif traced:
            # Made in the program (as jax.numpy does), not a NumPy constant: a constant becomes an input of the
            # compiled program that is uploaded, and inside a shard_map, placed on every device.
            cols.append(lax.iota(np.int32, shape_d, d))
        else:
            cols.append(np.arange(grid[d], dtype=np.int32).reshape(shape_d))
    idx = _stack_columns(cols, grid)
    out = lax.gather(arr, idx, tuple(range(arr.ndim)))
    if mode == "fill":
        out = _with_fill(out, ni, n, fill_value,
                         lambda b: lax.broadcast_in_dim(b, grid, tuple(range(arr.ndim))))
    return out
