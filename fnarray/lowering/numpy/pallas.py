"""The reference of ``pallas_call`` (``fnarray.core.pallas``): the kernel body run per program instance.

The body is compiled once by the numpy backend (``compile_numpy``: its kernel-only primitives have the
implementations below) and called for every program instance of the grid in row-major order, over NumPy
blocks: each input block is copied out of its array, each output block is read from the output (so a kernel
that revisits a block, accumulating over a grid axis, sees what it wrote before) and written back after the
instance. A ref is a ``_Ref``: its block and, for a block that runs past the array's end (a padded last
block), which elements are real. A load or store of an element outside the ref, or an unmasked load of a
padded element, raises ``IndexError`` (undefined behaviour on devices, as in Pallas). Registered into
``numpy.common.IMPLS`` (the family ``pallas`` of ``numpy/backend.py``); ``interpret=True`` runs this on every
backend (their ``supports`` send it here).
"""

from __future__ import annotations

import numpy as np

from fnarray.core.pallas import (pallas_atomic_p, pallas_call_p, pallas_load_p, pallas_loop_p, pallas_store_p,
                                 pallas_when_p)

from fnarray.lowering.numpy.common import IMPLS
from fnarray.lowering.numpy.program import compile_numpy

__all__ = ["block_offsets"]


class _Ref:
    """A ref's contents in the interpreter: ``data`` and ``valid`` (bool, ``None`` when every element is real)."""

    __slots__ = ("data", "valid", "name")

    def __init__(self, data, valid, name):
        self.data, self.valid, self.name = data, valid, name


def _fill(dtype):
    d = np.dtype(dtype)
    return np.nan if d.kind in "fc" else 0


def block_offsets(block, block_index, name):
    """``[(first element, block size or None), ...]`` per array axis of block ``block_index``."""
    out = []
    for d, (n, s, b) in enumerate(zip(block.block_shape, block.shape, block_index, strict=True)):
        size = 1 if n is None else n
        start = int(b) * size
        if int(b) < 0 or (start >= s and s > 0):
            raise IndexError(f"pallas_call {name}: the index_map gives block {int(b)} on axis {d}, past the end of "
                             f"an array of shape {block.shape} in blocks of {block.block_shape}")
        out.append((start, n))
    return out


def _block_index(block, imap, pid):
    if block.index_map is None:
        return (0,) * len(block.shape)
    return [int(v) for v in imap(list(pid))]


def _read_block(arr, block, imap, pid, name):
    if block.index_map is None and all(n == s for n, s in zip(block.block_shape, block.shape, strict=True)):
        return _Ref(np.array(arr), None, name)
    offs = block_offsets(block, _block_index(block, imap, pid), name)
    full = tuple(1 if n is None else n for n in block.block_shape)
    data = np.full(full, _fill(arr.dtype), arr.dtype)
    valid = np.zeros(full, bool)
    src = tuple(slice(o, min(o + f, s)) for (o, _), f, s in zip(offs, full, block.shape, strict=True))
    dst = tuple(slice(0, sl.stop - sl.start) for sl in src)
    data[dst] = arr[src]
    valid[dst] = True
    ref_shape = block.ref_shape
    data, valid = data.reshape(ref_shape), valid.reshape(ref_shape)
    return _Ref(data, None if valid.all() else valid, name)


def _write_block(arr, ref, block, imap, pid, name):
    if block.index_map is None and all(n == s for n, s in zip(block.block_shape, block.shape, strict=True)):
        arr[...] = ref.data
        return
    offs = block_offsets(block, _block_index(block, imap, pid), name)
    full = tuple(1 if n is None else n for n in block.block_shape)
    data = ref.data.reshape(full)
    src = tuple(slice(o, min(o + f, s)) for (o, _), f, s in zip(offs, full, block.shape, strict=True))
    dst = tuple(slice(0, sl.stop - sl.start) for sl in src)
    arr[src] = data[dst]


def _numpy_pallas_call(params, in_avals, out_avals):
    body = compile_numpy(params["body"].program)
    name, grid = params["name"], params["grid"]
    in_blocks, out_blocks = params["in_blocks"], params["out_blocks"]
    in_maps = [None if b.index_map is None else compile_numpy(b.index_map) for b in in_blocks]
    out_maps = [None if b.index_map is None else compile_numpy(b.index_map) for b in out_blocks]
    aliases = dict((o, i) for i, o in params["aliases"])

    def f(*args):
        outs = []
        for j, a in enumerate(out_avals):
            outs.append(np.array(args[aliases[j]], a.dtype) if j in aliases else np.zeros(a.shape, a.dtype))
        for pid in np.ndindex(*grid):
            pid = [np.int32(p) for p in pid]
            refs = [_read_block(np.asarray(x), b, m, pid, name) for x, b, m in zip(args, in_blocks, in_maps,
                                                                                   strict=True)]
            refs += [_read_block(o, b, m, pid, name) for o, b, m in zip(outs, out_blocks, out_maps, strict=True)]
            refs += [_Ref(np.zeros(s.shape, s.dtype), None, name) for s in params["scratch"]]
            res = body(pid + refs)
            for o, r, b, m in zip(outs, res, out_blocks, out_maps, strict=True):
                _write_block(o, r, b, m, pid, name)
        return outs
    return f


def _where(ref, indexer, starts):
    """Index arrays (broadcast over the block) and the in-bounds mask of ``ref[indexer at starts]``."""
    shape = ref.data.shape
    out_rank = sum(e[0] == "s" for e in indexer)
    idx, inside, k = [], None, 0
    for e, start, n in zip(indexer, starts, shape, strict=True):
        s = int(start)
        if e[0] == "i":
            ix = np.asarray(s)
        else:
            ix = (s + np.arange(e[1])).reshape((1,) * k + (e[1],) + (1,) * (out_rank - k - 1))
            k += 1
        ok = (ix >= 0) & (ix < n)
        inside = ok if inside is None else inside & ok
        idx.append(np.clip(ix, 0, max(n - 1, 0)))
    block = tuple(e[1] for e in indexer if e[0] == "s")
    inside = np.broadcast_to(True if inside is None else inside, block)
    return tuple(idx), inside


def _split(rest, n, flags):
    starts, extra = rest[:n], list(rest[n:])
    got = []
    for flag in flags:
        got.append(extra.pop(0) if flag else None)
    return starts, got


def _describe(indexer, starts):
    return "[" + ", ".join(str(int(s)) if e[0] == "i" else f"{int(s)}:{int(s) + e[1]}"
                           for e, s in zip(indexer, starts, strict=True)) + "]"


def _load(params, in_avals, out_avals):
    indexer, masked, has_other = params["indexer"], params["masked"], params["has_other"]

    def f(ref, *rest):
        starts, (mask, other) = _split(rest, len(indexer), (masked, has_other))
        idx, inside = _where(ref, indexer, starts)
        real = inside if ref.valid is None else inside & ref.valid[idx]
        need = np.ones(inside.shape, bool) if mask is None else np.asarray(mask, bool)
        if (need & ~real).any():
            where = "outside the ref" if (need & ~inside).any() else "in the padding of a block past the array's end"
            raise IndexError(f"pallas_call {ref.name}: a load of ref{_describe(indexer, starts)} (shape "
                             f"{ref.data.shape}) reads elements {where} without a mask; pass mask= (and other=) "
                             f"to pl.load")
        vals = ref.data[idx]
        vals = np.broadcast_to(vals, inside.shape)
        if mask is not None:
            fill = np.zeros((), ref.data.dtype) if other is None else other
            vals = np.where(need, vals, fill)
        return np.array(vals, ref.data.dtype)
    return f


def _update(ref, indexer, starts, value, mask, combine, what):
    idx, inside = _where(ref, indexer, starts)
    need = np.ones(inside.shape, bool) if mask is None else np.asarray(mask, bool)
    if (need & ~inside).any():
        raise IndexError(f"pallas_call {ref.name}: a {what} to ref{_describe(indexer, starts)} (shape "
                         f"{ref.data.shape}) writes outside the ref without a mask; pass mask=")
    data = ref.data.copy()
    old = np.array(np.broadcast_to(data[idx], inside.shape))
    value = np.broadcast_to(np.asarray(value, data.dtype), inside.shape)
    sel = need & inside
    if data.ndim == 0:   # a 0-d ref: a boolean selection of a 0-d array is 1-d, which data[()] cannot take
        if sel:
            data[()] = combine(old, value)
        return _Ref(data, ref.valid, ref.name), old
    full = tuple(np.broadcast_to(i, inside.shape)[sel] for i in idx)
    data[full] = combine(old[sel], value[sel])
    return _Ref(data, ref.valid, ref.name), old


def _store(params, in_avals, out_avals):
    indexer, masked = params["indexer"], params["masked"]

    def f(ref, value, *rest):
        starts, (mask,) = _split(rest, len(indexer), (masked,))
        return _update(ref, indexer, starts, value, mask, lambda old, new: new, "store")[0]
    return f


_COMBINE = {"add": np.add, "max": np.maximum, "min": np.minimum}


def _atomic(params, in_avals, out_avals):
    indexer, masked, op = params["indexer"], params["masked"], params["op"]

    def f(ref, value, *rest):
        starts, (mask,) = _split(rest, len(indexer), (masked,))
        new, old = _update(ref, indexer, starts, value, mask, _COMBINE[op], f"atomic_{op}")
        return [new, old]
    return f


def _loop(params, in_avals, out_avals):
    body = compile_numpy(params["body"])
    nc = params["num_consts"]

    def f(lo, hi, *ops):
        consts, carry = list(ops[:nc]), list(ops[nc:])
        for i in range(int(lo), int(hi)):
            carry = list(body([np.int32(i)] + consts + carry))
        return carry
    return f


def _when(params, in_avals, out_avals):
    body = compile_numpy(params["body"])
    nc = params["num_consts"]

    def f(pred, *ops):
        if bool(pred):
            return list(body(list(ops)))
        return list(ops[nc:])
    return f


IMPLS.update({pallas_call_p: _numpy_pallas_call, pallas_load_p: _load, pallas_store_p: _store,
              pallas_atomic_p: _atomic, pallas_loop_p: _loop, pallas_when_p: _when})
