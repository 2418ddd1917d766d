"""``associative_scan``: an inclusive prefix scan with a user's associative function (``jax.lax.associative_scan``).

The scan is the parallel prefix of Ladner-Fischer / Blelloch as JAX describes it: combine
neighbouring pairs, scan the half-length sequence of pair results recursively, then fill
in the even positions with one more combine. That is ``O(log n)`` levels of ``fn`` applied
to whole slices, so it runs as a handful of wide elementwise programs rather than ``n``
sequential steps, and it composes with ``jit``, ``grad`` and ``vmap`` like any other
composite of primitives.
"""

from __future__ import annotations

from fnarray import tree_util
from fnarray.core import lax
from fnarray.core.avals import asarray
from fnarray.core.errors import ShapeError

__all__ = ["associative_scan"]


def _slice0(x, start, stop, step=1):
    """``x[start:stop:step]`` along axis 0 (bounds already inside ``[0, len]``)."""
    return lax.slice_in_dim(x, start, stop, step, axis=0)


def _interleave(evens, odds):
    """``r[0::2] = evens``, ``r[1::2] = odds`` along axis 0 (``len(evens)`` is ``len(odds)`` or one more)."""
    n_even, n_odd = evens.shape[0], odds.shape[0]
    if n_even == n_odd + 1:
        pad = lax.full((1,) + odds.shape[1:], 0, odds.dtype)
        odds = lax.concatenate([odds, pad], 0)
    pairs = lax.concatenate([lax.expand_dims(evens, (1,)), lax.expand_dims(odds, (1,))], 1)
    out = lax.reshape(pairs, (2 * n_even,) + evens.shape[1:])
    return _slice0(out, 0, n_even + n_odd)


def _combine(fn, treedef, a_flat, b_flat, where):
    """``fn`` on two flat lists of leaves, checked to return leaves of the inputs' shapes."""
    out = fn(tree_util.tree_unflatten(treedef, a_flat), tree_util.tree_unflatten(treedef, b_flat))
    out_flat, out_tree = tree_util.tree_flatten(out)
    if out_tree != treedef:
        raise TypeError(f"associative_scan: fn must return a pytree of the structure of elems, {treedef}; "
                        f"it returned {out_tree} ({where})")
    for i, (o, a) in enumerate(zip(out_flat, a_flat, strict=True)):
        if tuple(o.shape) != tuple(a.shape):
            raise ShapeError(f"associative_scan: fn returned leaf {i} of shape {tuple(o.shape)} for inputs of "
                             f"shape {tuple(a.shape)}; fn must be elementwise along the scanned axis")
    return out_flat


def _scan(fn, treedef, elems):
    n = elems[0].shape[0]
    if n < 2:
        return elems
    # Combine neighbouring pairs (0,1), (2,3), ...: the prefixes at the odd positions, one level up.
    pairs = _combine(fn, treedef, [_slice0(e, 0, n - 1, 2) for e in elems],
                     [_slice0(e, 1, n, 2) for e in elems], "pair level")
    odd = _scan(fn, treedef, pairs)
    # Even positions 2, 4, ...: the prefix at the odd position before them, combined with themselves.
    if n % 2 == 0:
        left = [_slice0(o, 0, o.shape[0] - 1) for o in odd]
    else:
        left = odd
    rest = [_slice0(e, 2, n, 2) for e in elems]
    if rest[0].shape[0] > 0:
        even_tail = _combine(fn, treedef, left, rest, "even positions")
        even = [lax.concatenate([_slice0(e, 0, 1), t], 0) for e, t in zip(elems, even_tail, strict=True)]
    else:
        even = [_slice0(e, 0, 1) for e in elems]
    return [_interleave(ev, od) for ev, od in zip(even, odd, strict=True)]


def associative_scan(fn, elems, reverse: bool = False, axis: int = 0):
    """The inclusive scan of ``elems`` with the associative function ``fn`` (``jax.lax.associative_scan``).

    With ``reverse=False`` the result at position ``i`` along ``axis`` is
    ``fn(...fn(fn(e[0], e[1]), e[2])..., e[i])``, computed in ``O(log n)`` levels of ``fn``.

    Args:
      fn: ``fn(a, b) -> c``, associative, taking and returning pytrees of elems' structure whose
        leaves have the same shapes as its arguments' (it is called on whole slices, so it must
        act elementwise along ``axis``, e.g. ``fnp.add``, ``fnp.maximum``, a matrix product over
        trailing axes).
      elems: a pytree of arrays, all of the same length along ``axis``.
      reverse: scan from the end: the result equals
        ``flip(associative_scan(fn, flip(elems, axis)), axis)`` (as JAX).
      axis: the scanned axis (negative counts from the end).
    Returns:
      a pytree like ``elems``, the same shapes and the dtypes ``fn`` returns.
    Raises:
      ShapeError: the leaves differ in length along ``axis``, or ``fn`` changes a shape.
      TypeError: ``fn`` returns another structure.
    Source: the recursive odd/even algorithm of Blelloch, "Prefix sums and their applications"
    (1990), in the form JAX documents for ``lax.associative_scan``.
    """
    flat, treedef = tree_util.tree_flatten(elems)
    if not flat:
        return elems
    flat = [asarray(x) for x in flat]
    ndim = flat[0].ndim
    for x in flat:
        if x.ndim == 0:
            raise ShapeError("associative_scan: elems must have the scanned axis; got a 0-d leaf")
    ax = axis + ndim if axis < 0 else axis
    if not 0 <= ax < ndim:
        raise ShapeError(f"associative_scan: axis {axis} is out of range for leaves of rank {ndim}")
    lengths = {x.shape[ax] if ax < x.ndim else None for x in flat}
    if len(lengths) != 1:
        raise ShapeError(f"associative_scan: every leaf of elems needs the same length along axis {axis}; "
                         f"got shapes {[tuple(x.shape) for x in flat]}")
    to_front = [ax] + [i for i in range(ndim) if i != ax]            # moves axis ax to the front
    to_back = [to_front.index(i) for i in range(ndim)]               # and back
    flat = [lax.transpose(x, to_front) for x in flat]
    if reverse:
        flat = [lax.rev(x, (0,)) for x in flat]

    def fn0(a, b):  # fn sees the user's axis layout
        if ax == 0:
            return fn(a, b)
        back = lambda t: tree_util.tree_map(lambda x: lax.transpose(x, to_back), t)
        out = fn(back(a), back(b))
        return tree_util.tree_map(lambda x: lax.transpose(x, to_front), out)

    out = _scan(fn0, treedef, flat)
    if reverse:
        out = [lax.rev(x, (0,)) for x in out]
    out = [lax.transpose(x, to_back) for x in out]
    return tree_util.tree_unflatten(treedef, out)
