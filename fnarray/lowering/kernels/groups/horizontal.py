"""Horizontal fusion: independent map kernels of different shapes as one launch.

An optimizer step updates every parameter leaf with the same few elementwise operations, each leaf of its own
shape, none reading another's results: the scheduler's grouping (``schedule._place_root``) gives each leaf its
own map kernel, since the leaves neither share an iteration space nor fit in one kernel's buffers as guests.
``fuse_horizontal`` runs after the grouping and merges such kernels into a ``HorizontalGroup``: one launch over
the concatenation of their work items, each map a *segment* of whole work-groups (so every work-group runs one
map's code, and the map's own once-per-work-group bounds test and elements-per-item choice still apply); a work
item finds its segment by comparing its id with the segments' static bounds. On a CPU WebGPU adapter (lavapipe)
each launch costs far more than a small map's work, so fewer launches is the lever (docs/internals.md, issue 28).

Two kernels merge only where neither reads what the other writes, where no kernel between them reads what the
earlier one writes (the merged launch runs at the later one's place) or overwrites what it reads (an in-place
update), and where the merged kernel binds at most ``Capabilities.max_buffers_per_kernel`` buffers (WebGPU's
``maxStorageBuffersPerShaderStage`` of the device opened, OpenCL's from its argument size). Targets whose
``Capabilities.horizontal_fusion`` is false keep one launch per map kernel.
"""

from __future__ import annotations

import math

from fnarray.lowering.kernels.builder import KernelBuilder
from fnarray.lowering.kernels.emitter import NotFlat
from fnarray.lowering.kernels.groups.base import (
    MAP_TUNABLE,
    Group,
    MapGroup,
    Segment,
    Tracker,
    kernel_name,
    make_launch,
    vectors_fit,
)
from fnarray.lowering.kernels.groups.in_place import InPlaceUpdateGroup
from fnarray.lowering.kernels.ir import INT32, Special, const
from fnarray.lowering.kernels.rules import op

__all__ = ["HorizontalGroup", "fuse_horizontal", "split_guests"]


class HorizontalGroup(Group):
    """Map kernels (``MapGroup``) with no data between them, written as one kernel: member ``k``'s work items
    are items ``[start_k, end_k)`` of the launch, whole work-groups each."""

    kind = "map"

    def __init__(self, ctx, members):
        super().__init__(ctx, ())
        self.members: list = []
        for m in members:
            self.add(m)

    def add(self, member):
        """Take map kernel ``member`` (or every member of a horizontal one) in as the last segment(s)."""
        for m in getattr(member, "members", [member]):
            self.members.append(m)
            self.products.extend(m.products)
            self.reads |= m.reads

    def codegen(self):
        ctx = self.ctx
        default = {"per": ctx.caps.items_per_work_item, "wg": ctx.wg, "guard": bool(ctx.caps.uniform_guard)}
        return ctx.tuned(MAP_TUNABLE, default, self._variant)

    def _variant(self, choice):
        # Each member tries flat indices first; a member whose rules need the shaped index (``NotFlat``) is
        # retried shaped, the other members kept as they were: at most one more try per member.
        flat = [True] * len(self.members)
        while True:
            try:
                return self._gen(flat, choice)
            except NotFlat:
                if not flat[self._at]:
                    raise
                flat[self._at] = False

    def _gen(self, flat, choice):
        ctx, wg = self.ctx, choice["wg"]
        b = KernelBuilder("k")
        args: dict = {}
        tracker = Tracker(ctx)
        computes = {v for m in self.members for v in m.roots + m.guests}
        em = ctx.emitter(b, args=args, computes=computes, tracker=tracker)
        full_flat = flat
        pers = [m.items_per(f, choice) for m, f in zip(self.members, flat, strict=True)]
        chunked, kept = [], []   # members launched in uniform windows of their own (MapGroup.uniform_chunks) first
        for k, m in enumerate(self.members):
            self._at = k
            if m.vector_items(flat[k], pers[k]) and m.uniform_chunks():
                chunked.extend(m.chunk_launches(choice))
            else:
                kept.append(k)
        if not kept:
            return chunked
        members, flat, pers = [self.members[k] for k in kept], [flat[k] for k in kept], [pers[k] for k in kept]
        items = [_ceil_div(math.prod(m.shape), per) for m, per in zip(members, pers, strict=True)]
        groups = [max(1, _ceil_div(n, wg)) for n in items]
        gid, gsize, lsize = ctx.gid(b, sum(groups) * wg, wg)
        scalars: dict = {}
        start = 0
        for k, m in enumerate(members):
            self._at = kept[k]
            end = start + groups[k]
            inside = op("lt", gid, const(end * wg, INT32))
            if start:
                inside = op("land", op("ge", gid, const(start * wg, INT32)), inside)
            with b.when(inside):
                rel = gid if not start else b.let(op("sub", gid, const(start * wg, INT32)), "s")
                group = Special("group_id", 0) if not start else op("sub", Special("group_id", 0), const(start, INT32))
                seg = Segment(rel, group, wg, len(gsize) == 1, f"n{k}", f"s{k}_")
                m.emit_body(b, em, args, scalars, seg, flat[k], pers[k], choice)
            start = end
        b.name = kernel_name("hmap", tracker.eqns)
        launch = make_launch(b, args, scalars, gsize, lsize, tracker.eqns, "map")
        vec = [m for m, f, per in zip(members, flat, pers, strict=True) if m.vector_items(f, per)]
        if vec and not vectors_fit(ctx.caps, launch):   # the members' vec4 bindings do not fit: scalar items
            for m in vec:
                m.scalar_items = True
            return self._gen(full_flat, choice)
        return [*chunked, launch]


def _ceil_div(a, b) -> int:
    return -(-a // b)


def _stores(ctx, g) -> int:
    return sum(p in ctx.needed for p in g.products)


def _elements(g) -> int:
    """Work items ``g``'s segments need at most (one element each, padded to whole work-groups of up to 1,024)."""
    return sum(math.prod(m.shape) + 1024 for m in getattr(g, "members", [g]))


def _fits(ctx, a, b) -> bool:
    """Whether ``a`` and ``b`` fit one kernel: its buffers within the target's limit, its work-item ids in int32."""
    if _elements(a) + _elements(b) >= 2 ** 31:
        return False
    limit = ctx.caps.max_buffers_per_kernel
    return limit is None or len(a.reads | b.reads) + _stores(ctx, a) + _stores(ctx, b) <= limit


def _fusable(g) -> bool:
    return type(g) is MapGroup or isinstance(g, HorizontalGroup)


def _partner(ctx, out, g, window):
    """The position in ``out`` of the latest map kernel that ``g`` can merge with, or ``None``. The merged launch
    takes ``g``'s place, after every kernel of ``out``: the partner moves past the kernels after it, so none of
    them may read what it writes, nor overwrite (in place) what it reads; ``g`` must not read what it writes."""
    read_later: set = set()
    for j in range(len(out) - 1, max(-1, len(out) - 1 - window), -1):
        c = out[j]
        if isinstance(c, InPlaceUpdateGroup):
            return None   # it overwrites a buffer in place: nothing moves past it
        if _fusable(c) and _fits(ctx, c, g) and not (
                read_later.intersection(c.products) or g.reads.intersection(c.products)):
            return j
        read_later |= c.reads
    return None


def split_guests(ctx, g):
    """Map kernel ``g`` with its guests (smaller values computed by its first work items, ``_place_root``) as a
    ``HorizontalGroup``: its roots one segment, each guest shape another, so every segment computes
    ``Capabilities.items_per_work_item`` elements per item (a kernel with guests computes one: lavapipe's 4
    elements per invocation were lost on a parameter's whole update for the sake of a bias beside it). The
    buffers are the same; ``g`` itself where it has no guests."""
    if type(g) is not MapGroup or not g.guests or not g.roots:
        return g
    by_shape: dict = {}
    for v in g.guests:
        by_shape.setdefault(v.aval.shape, []).append(v)
    members = []
    for shape, roots in [(g.shape, g.roots), *by_shape.items()]:
        m = MapGroup(ctx, shape)
        for v in roots:
            m.add_root(v, set(m.root_reads(v)) - set(g.products))
        members.append(m)
    return HorizontalGroup(ctx, members)


def fuse_horizontal(ctx, groups, window=64) -> list:
    """``groups`` (in launch order) with independent map kernels merged into ``HorizontalGroup``s, each at the
    place of its latest member. ``window``: how many of the latest kernels a map kernel looks back over (linear
    time in the number of kernels). Needs ``ctx.needed`` (the values stored for other kernels or the caller)."""
    if not ctx.caps.horizontal_fusion:
        return groups
    if ctx.caps.items_per_work_item > 1:
        groups = [split_guests(ctx, g) for g in groups]
    out: list = []
    for g in groups:
        j = _partner(ctx, out, g, window) if _fusable(g) and g.products else None
        if j is None:
            out.append(g)
            continue
        host = out.pop(j)
        if not isinstance(host, HorizontalGroup):
            host = HorizontalGroup(ctx, [host])
        host.add(g)
        out.append(host)
    for i, g in enumerate(out):
        g.index = i
    return out
