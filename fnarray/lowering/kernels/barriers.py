"""Removing work-group barriers that order nothing, from what the statements around each one read and write.

A barrier is needed only where a work item may read or write, after it, an array element another item wrote
before it (or write one that another read before it). Statements between two barriers form a *region*; a
barrier whose regions on either side touch no shared array in conflicting ways (one writes what the other reads
or writes) can go, the two regions becoming one. Shared arrays are the work-group (``local``) arrays and the
global buffers the kernel writes; private arrays and read-only buffers never order anything.

The analysis is conservative: it only removes a barrier whose regions are closed on both sides by barriers of
the same statement list (or the kernel's start), and neither contains a statement with a barrier inside. At the
end of a ``For`` body, the last barrier goes if the body's last region does not conflict with its first (the
next iteration's): a barrier right after the loop then orders the last iteration against what follows, and is
itself removed again where that orders nothing. Used by the Pallas kernel group (``groups/pallas.py``), whose
renderer puts a barrier after every parallel phase (Dao et al.'s FlashAttention loop body then keeps 4 of 10).
"""

from __future__ import annotations

import dataclasses

from fnarray.lowering.kernels.ir import ArrayDecl, Atomic, Barrier, For, If, Load, Store, walk_exprs

__all__ = ["prune_barriers", "shared_arrays"]


def shared_arrays(body) -> frozenset:
    """The names that can order work items: work-group arrays declared in ``body`` and the global buffers it
    stores to or updates atomically."""
    return frozenset(s.name for s in _statements(body)
                     if isinstance(s, ArrayDecl) and s.space == "local"
                     or isinstance(s, Atomic) or isinstance(s, Store) and s.space != "private")


def _statements(stmts):
    """Every statement of ``stmts``, those inside ``For`` bodies and ``If`` branches too."""
    for s in stmts:
        yield s
        if isinstance(s, For):
            yield from _statements(s.body)
        elif isinstance(s, If):
            yield from _statements(s.then + s.orelse)


def _accesses(stmts, shared):
    """``(reads, writes)``: the shared arrays the statements read and write (an atomic does both)."""
    writes = {s.name for s in _statements(stmts) if isinstance(s, (Store, Atomic)) and s.name in shared}
    reads = {e.name for e in walk_exprs(stmts) if isinstance(e, Load) and e.name in shared}
    reads |= {s.name for s in _statements(stmts) if isinstance(s, Atomic)}
    return reads, writes


def _conflict(a, b):
    (ra, wa), (rb, wb) = a, b
    return bool(wa & (rb | wb) or wb & ra)


def _has_barrier(s):
    return any(isinstance(t, Barrier) for t in _statements((s,)))


def prune_barriers(body, shared=None, top=True, keep=None) -> tuple:
    """``body`` without the barriers that order nothing (the module's docstring); ``top``: ``body`` is the whole
    kernel's (nothing runs before it); ``keep(before, after)``: whether a barrier between two such regions (lists
    of statements) stays anyway (a driver's miscompile to avoid)."""
    shared = shared_arrays(body) if shared is None else shared
    keep = keep or _never
    stmts = []
    for s in body:
        if isinstance(s, For):
            inner, moved = _prune_loop(s, shared, keep)
            stmts.append(dataclasses.replace(s, body=inner))
            if moved is not None:
                stmts.append(moved)
        elif isinstance(s, If):
            stmts.append(dataclasses.replace(s, then=prune_barriers(s.then, shared, False, keep),
                                             orelse=prune_barriers(s.orelse, shared, False, keep)))
        else:
            stmts.append(s)
    return _merge_regions(stmts, shared, top, keep)


def _never(before, after):
    return False


def _regions(stmts):
    """``[(barrier index or None, statements of the region after it)]`` of a statement list."""
    out = [(None, [])]
    for i, s in enumerate(stmts):
        if isinstance(s, Barrier):
            out.append((i, []))
        else:
            out[-1][1].append(s)
    return out


def _merge_regions(stmts, shared, top, keep):
    """Drops each barrier between two closed regions that do not conflict, left to right."""
    regions = _regions(stmts)
    drop = set()
    cur = regions[0][1]
    closed_before = top   # the current region starts at a barrier of this list (or at the kernel's start)
    for k in range(1, len(regions)):
        i, nxt = regions[k]
        closed_after = k + 1 < len(regions)
        if (closed_before and closed_after and not any(_has_barrier(s) for s in cur + nxt)
                and not _conflict(_accesses(cur, shared), _accesses(nxt, shared)) and not keep(cur, nxt)):
            drop.add(i)
            cur = cur + nxt
        else:
            cur = nxt
            closed_before = True
    return tuple(s for i, s in enumerate(stmts) if i not in drop)


def _prune_loop(loop, shared, keep):
    """A ``For`` loop's body pruned, and the barrier to put after the loop where its last one went (else
    ``None``: also where the loop's bounds read a shared array, which C reads again each iteration)."""
    body = prune_barriers(loop.body, shared, False, keep)
    header = _accesses([dataclasses.replace(loop, body=())], shared)[0]
    if not body or not isinstance(body[-1], Barrier):
        return body, None
    regions = _regions(body[:-1])
    if len(regions) < 2:
        return body, None
    first, last = regions[0][1], regions[-1][1]
    if header or any(_has_barrier(s) for s in first + last):
        return body, None
    if _conflict(_accesses(last, shared), _accesses(first, shared)) or keep(last, first):
        return body, None
    return body[:-1], body[-1]
