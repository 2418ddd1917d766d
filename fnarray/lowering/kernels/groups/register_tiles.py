"""Register-tiled matrix products without local memory, for devices where work-group memory is emulated
(``Capabilities.matmul_tiling == "register"``: OpenCL on a CPU, PoCL here).

On such a device a work-group is a loop over its work items and a barrier splits that loop, saving every
work item's registers to memory and restoring them: the local-memory tiles of ``dot.py`` cost more than
they save. What pays instead (measured with hand-written kernels on PoCL 3.0, the device of this
machine; a 1024^2 float32 product: 7 GFLOP/s reading the operands where they lie, 20-38 GFLOP/s packed):

- each work item computes a ``RM x RN`` (4 x 8) block of outputs in registers (scalar locals, the loops
  unrolled: no private array), ``UK`` (4) contraction steps per loop iteration;
- the operands are first *packed* by a copy kernel each into panels of ``RM`` rows (``RN`` columns)
  interleaved along the contraction, ``Ap[b][p][k][r] = A[b, RM*p + r, k]`` and
  ``Bp[b][p][k][c] = B[b, k, RN*p + c]``, zero-padded to whole panels, whole work-groups and a
  contraction multiple of ``UK``. The product kernel then reads ``RM`` and ``RN`` consecutive values per
  step at constant offsets (which the device's compiler merges into vector loads: as fast as explicit
  ``float4`` loads here), needs no bounds test in its loop, and does not stride through an operand at
  its row pitch (at power-of-two pitches, 1024 floats, the unpacked form thrashed the cache: 3x slower).
  A pack is one pass over its operand, and it reads any strided view or fused producer of the operand
  (transposes, broadcasts, elementwise chains), as the dot kernel's operand copy does.

The elementwise epilogue stays fused into the product kernel (``RM * RN`` outputs per work item, each
guarded by the output's bounds); a batched ``dot_general`` is one product launch (the batch is the third
launch dimension). Work-groups shrink to the panel counts of small products, so the padding stays below
one work-group's panels.
"""

from __future__ import annotations

import contextlib
import math

import numpy as np

from fnarray.lowering.kernels.builder import KernelBuilder
from fnarray.lowering.kernels.groups.base import Tracker, kernel_name, make_launch
from fnarray.lowering.kernels.index import ix_data, unravel
from fnarray.lowering.kernels.ir import INT32, Cast, Special, const
from fnarray.lowering.kernels.rules import add_of, mul_of, op, select
from fnarray.lowering.kernels.tuning import Tunable

#: Panel offsets are 64-bit (see ``register_dot``).
INT64 = np.dtype(np.int64)

__all__ = ["RM", "RN", "UK", "PACK_BLOCK", "register_dtype", "panels", "padded_k", "packs_launch", "pack_block",
           "panel_coords", "register_product", "store_loop", "packed_product", "register_dot"]

#: Outputs per work item along rows (the lhs panel width) and along columns (the rhs panel width), and
#: contraction steps per loop iteration. 4 x 8 measured best of 2x8, 4x4, 8x4, 4x8, 8x8, 4x16 on PoCL
#: (AVX2: a row of 8 accumulators is one vector register; 8x8 and 4x16 spilled, 10-20x slower), and
#: 4 steps best of 2, 4, 8.
RM, RN, UK = 4, 8, 4
#: The most work items per work-group along columns and rows (8 x 8 measured best of 2x64 .. 16x16).
WX, WY = 8, 8
#: Contraction steps one work item of a transposing pack writes (``pack_block``): 8 best of 4, 8, 16 on both PoCLs
#: (a 784 x 512 ``w.T`` packed into 8-wide panels, hand-written kernels, load 8: 95-102 us against 378-403 for
#: a panel row per work item on PoCL 3.0, 132-170 against 194-383 on 3.1; 4 steps 180-220, 16 steps 130-180).
PACK_BLOCK = 8
#: The product's tunable choices (``kernels/tuning.py``; the dot group asks for them, the conv group declares its
#: own, ``conv.CONV_TUNABLE``, priced by this table's model): ``rm x rn`` outputs per work item, ``uk`` contraction steps per loop iteration, ``wx x wy`` the
#: most work items per group. At most 64 accumulators (more spilled on AVX2, above).
DEFAULT_TILE = {"rm": RM, "rn": RN, "uk": UK, "wx": WX, "wy": WY}
def _tile_cost(tile, default, facts) -> float:
    """The register tile's cost model on a CPU OpenCL driver (PoCL): per multiply-add, a work item loads
    ``(rm + rn) / (rm rn)`` operands from its panels, so wider tiles cost less up to the 64 accumulators a
    vector register file holds; ``uk = 8`` halves the loop's overhead per step; the padding of ``rows x cols``
    (``facts``) to whole tiles is work too. ``full`` tuning picked 8x8 or 4x16 with 8 steps on both PoCLs
    (matmul 512-1024: 0.6x of the 4x8 default, docs/performance.md). Where the lhs is read unpacked (``facts``
    ``lhs="rows"``: ``DotGroup._transposed_product``) each of its ``rm`` rows is a stream of its own through
    memory: more than 4 cost 0.1 each (``d @ w.T`` at 32 x 512 x 512-784 on both PoCLs: 4x16 with 8 steps
    250-360 us, 8x8 330-570, 2x16 360-550). Elsewhere (no facts): the default."""
    if facts.get("compiler") != "pocl" or facts.get("device") != "cpu":
        return float(any(tile[k] != default[k] for k in tile))
    rows, cols = facts.get("rows", 1024), facts.get("cols", 1024)
    _, _, row_panels, col_panels = panels(rows, cols, tile)
    padded = row_panels * tile["rm"] * col_panels * tile["rn"] / (rows * cols)
    streams = 0.1 * max(0, tile["rm"] - 4) if facts.get("lhs") == "rows" else 0.0
    return padded * ((tile["rm"] + tile["rn"]) / (tile["rm"] * tile["rn"]) + (0.05 if tile["uk"] < 8 else 0.0)
                     + streams)


TUNABLE = Tunable("dot_register", {"rm": (2, 4, 8), "rn": (4, 8, 16), "uk": (4, 8), "wx": (8,), "wy": (8,)},
                  doc="outputs per work item (rm x rn) and contraction steps per iteration (uk) of the "
                      "register-tiled matrix product",
                  valid=lambda c, f: (c["rm"] * c["rn"] <= 64
                                      and c["wx"] * c["wy"] <= (f.get("workgroup_limit") or 1024)),
                  cost=_tile_cost)


def register_dtype(dt) -> bool:
    """Whether the register-tiled kernels compute in ``dt`` (float32 and float64: the accumulators
    are ``dt``)."""
    dt = np.dtype(dt)
    return dt.kind == "f" and dt.itemsize >= 4


def _pow2_at_least(n: int, cap: int) -> int:
    p = 1
    while p < n and p < cap:
        p *= 2
    return p


def panels(rows: int, cols: int, tile=None):
    """``(wx, wy, row_panels, col_panels)``: the work-group shape and the padded panel counts of a
    ``rows x cols`` output (panels of ``RM`` rows and ``RN`` columns, counts multiples of the
    work-group's extent; ``tile``: a ``TUNABLE`` choice, default ``DEFAULT_TILE``)."""
    t = tile or DEFAULT_TILE
    pr, pc = -(-rows // t["rm"]), -(-cols // t["rn"])
    wx, wy = _pow2_at_least(pc, t["wx"]), _pow2_at_least(pr, t["wy"])
    return wx, wy, -(-pr // wy) * wy, -(-pc // wx) * wx


def padded_k(k: int, tile=None) -> int:
    """The contraction length rounded up to whole loop iterations."""
    uk = (tile or DEFAULT_TILE)["uk"]
    return -(-k // uk) * uk


def packs_launch(ctx, group, parts, tile=None):
    """One kernel writing operands of ``group``'s product as zero-padded panels into scratch buffers, each part
    in its own range of whole work-groups: a product's two packs are one launch (PoCL costs 5-7 us a launch;
    the digits MLP's packs of 64 x 128 operands run 2-10 us each).

    Args:
        parts: ``(operand, groups, across, kp, npanels, tag, block)`` each: ``groups``, the operand's dimensions
            as (batch, rows, cols) of the matrix product; ``across``, 1 when the panels run across rows (the lhs:
            ``RM`` wide), 2 across columns (the rhs: ``RN`` wide), the other non-batch group being the
            contraction; ``kp``, ``npanels``: the padded contraction length and panel count; ``block``: the
            contraction steps one work item writes (1: a panel row, ``_pack_row``; more: a block of panel rows,
            ``_pack_block``, for an operand whose contraction runs along its memory).

    Returns:
        ``(launch, specs)``: the launch and each part's scratch buffer ``[batch][npanels][kp][width]``.
    """
    b = KernelBuilder("dot_pack")
    args: dict = {}
    tracker = Tracker(ctx)
    em = ctx.emitter(b, args=args, computes=set(group.roots), tracker=tracker)
    t = tile or DEFAULT_TILE
    batches = [math.prod(operand.aval.shape[d] for d in groups[0]) for operand, groups, *_ in parts]
    items = [nb * npanels * kp // block
             for nb, (_, _, _, kp, npanels, _, block) in zip(batches, parts, strict=True)]
    starts = [0]
    for n in items[:-1]:
        starts.append(starts[-1] + -(-n // ctx.wg) * ctx.wg)
    gid, gsize, lsize = ctx.gid(b, starts[-1] + items[-1], ctx.wg)
    specs = []
    for part, nb, start, n in zip(parts, batches, starts, items, strict=True):
        operand, groups, across, kp, npanels, tag, block = part
        width = t["rm"] if across == 1 else t["rn"]
        spec = ctx.spec(("dotpack", id(group), tag, width, kp), (nb, npanels, kp, width), operand.aval.dtype)
        specs.append(spec)
        write = _pack_row if block == 1 else _pack_block
        if len(parts) == 1:
            with b.when(op("lt", gid, const(n, INT32))):
                write(b, em, args, part, width, spec, gid)
            continue
        # The part is chosen by the work-group id, which PoCL knows is the same across a work-group (a test of
        # the work item's id kept it from vectorising the loop over work items: 2x slower at 256 x 256); a
        # launch folded into two dimensions (``ctx.gid``) tests the linear id.
        if len(gsize) == 1:
            at, first, last = Special("group_id", 0), start // ctx.wg, (start + n - 1) // ctx.wg
        else:
            at, first, last = gid, start, start + n - 1
        with b.when(op("land", op("ge", at, const(first, INT32)), op("le", at, const(last, INT32)))):
            local = b.let(op("sub", gid, const(start, INT32)), f"g{len(specs)}")
            with b.when(op("lt", local, const(n, INT32))):
                write(b, em, args, part, width, spec, local)
    return make_launch(b, args, {}, gsize, lsize, tracker.eqns, "copy"), specs


def _pack_row(b, em, args, part, width, spec, gid):
    """A pack kernel's work item ``gid`` writes one panel row: its ``width`` lanes in a loop, the index
    arithmetic of (batch, panel, contraction step) done once for them. One work item per element took 3x longer
    on PoCL 3.0 (a 1024 x 64 operand: 206 -> 69 us; the division and remainder per element are not vectorised),
    1.2x on PoCL 3.1. ``part``: one of ``packs_launch``'s."""
    operand, groups, across, kp, npanels, *_ = part
    shape = operand.aval.shape
    sizes = [math.prod(shape[d] for d in g) for g in groups]
    kdim = 3 - across
    nk, nr = sizes[kdim], sizes[across]
    dt = operand.aval.dtype
    k = b.let(op("rem", gid, const(kp, INT32)), "k")
    rest = b.let(op("div", gid, const(kp, INT32)))
    p = b.let(op("rem", rest, const(npanels, INT32)), "p")
    bi = b.let(op("div", rest, const(npanels, INT32)), "bi")
    k_in = b.let(op("lt", k, const(nk, INT32)))
    k_at = b.let(select(k_in, k, const(nk - 1, INT32)))
    name = b.buffer(spec, dt, True, "out")
    args[name] = spec
    with b.loop(const(0, INT32), const(width, INT32), hint="r") as r:
        row = b.let(op("add", op("mul", p, const(width, INT32)), r))
        row_in = b.let(op("lt", row, const(nr, INT32)))
        inside = b.let(op("land", row_in, k_in))
        coord = {0: bi, across: b.let(select(row_in, row, const(nr - 1, INT32))), kdim: k_at}
        idx = [None] * len(shape)
        for gi, g in enumerate(groups):
            if not g:
                continue
            sub = unravel(ix_data(coord[gi], 0, sizes[gi] - 1), tuple(shape[d] for d in g))
            for d, sv in zip(g, sub, strict=True):
                idx[d] = sv
        v = em.val(operand, tuple(idx))
        b.store(name, op("add", op("mul", gid, const(width, INT32)), r), b.let(select(inside, v, const(0, dt))))


def pack_block(operand, groups, across, strides, kp) -> int:
    """The contraction steps one work item of the pack writes for an operand whose collapsed strides per group
    (``strides``: batch, rows, cols, as ``groups``) are known (``None``: unknown, a panel row per work item).
    ``PACK_BLOCK`` steps where the contraction has unit stride and the panel's lanes do not (the lhs ``x`` of
    ``x @ w``, the rhs ``w.T`` of ``d @ w.T``): the work item then reads ``PACK_BLOCK`` consecutive elements of
    each lane's row and writes ``PACK_BLOCK`` whole panel rows, one run of memory, where a panel row per work
    item read each lane a row pitch apart and wrote ``width`` elements between neighbouring work items. Needs
    the block to divide the contraction's innermost dimension and ``kp`` (else 1)."""
    if strides is None:
        return 1
    kdim = 3 - across
    shape = operand.aval.shape
    live = [d for d in groups[kdim] if shape[d] > 1]
    if strides[kdim] != 1 or strides[across] == 1 or not live:
        return 1
    for block in (PACK_BLOCK, PACK_BLOCK // 2):
        if block > 1 and shape[live[-1]] % block == 0 and kp % block == 0:
            return block
    return 1


def _pack_block(b, em, args, part, width, spec, gid):
    """A pack kernel's work item ``gid`` writes ``block`` consecutive panel rows (``pack_block``): for each of
    its ``width`` lanes ``block`` consecutive elements of the operand along the contraction (constant offsets
    from one index: the device's compiler merges them into vector loads), stored as one run of
    ``block * width`` elements. A block past the contraction (``kp`` padding) stores zeros."""
    operand, groups, across, kp, npanels, _, block = part
    shape = operand.aval.shape
    sizes = [math.prod(shape[d] for d in g) for g in groups]
    kdim = 3 - across
    nk, nr = sizes[kdim], sizes[across]
    nq = nk // block
    dt = operand.aval.dtype
    kq = b.let(op("rem", gid, const(kp // block, INT32)), "kq")
    rest = b.let(op("div", gid, const(kp // block, INT32)))
    p = b.let(op("rem", rest, const(npanels, INT32)), "p")
    bi = b.let(op("div", rest, const(npanels, INT32)), "bi")
    k_in = b.let(op("lt", kq, const(nq, INT32))) if kp > nk else None
    k_at = b.let(select(k_in, kq, const(nq - 1, INT32))) if k_in is not None else kq
    kshape = [shape[d] for d in groups[kdim]]
    inner = max(i for i, n in enumerate(kshape) if n > 1)
    kshape[inner] //= block
    ksub = unravel(ix_data(k_at, 0, nq - 1), tuple(kshape))
    name = b.buffer(spec, dt, True, "out")
    args[name] = spec
    base = b.let(op("mul", gid, const(block * width, INT32)), "o")
    with b.loop(const(0, INT32), const(width, INT32), hint="r") as r:
        row = b.let(op("add", op("mul", p, const(width, INT32)), r))
        row_in = b.let(op("lt", row, const(nr, INT32)))
        inside = b.let(op("land", row_in, k_in)) if k_in is not None else row_in
        idx = [None] * len(shape)
        for gi, coord in ((0, bi), (across, b.let(select(row_in, row, const(nr - 1, INT32))))):
            if groups[gi]:
                sub = unravel(ix_data(coord, 0, sizes[gi] - 1), tuple(shape[d] for d in groups[gi]))
                for d, sv in zip(groups[gi], sub, strict=True):
                    idx[d] = sv
        for j in range(block):
            for i, d in enumerate(groups[kdim]):
                idx[d] = ksub[i] * block + j if i == inner else ksub[i]
            v = em.val(operand, tuple(idx))
            at = op("add", base, op("add", r, const(j * width, INT32)))
            b.store(name, at, b.let(select(inside, v, const(0, dt))))


def panel_coords(b, gid, width, kp, npanels, names):
    """A pack kernel's work item ``gid`` over ``[outer][npanels][kp][width]`` panels: ``(r, k, outer, row)``, its
    lane within the panel, its contraction step, its outer index (batch or group) and its unpacked row
    ``RM*panel + r`` (or column). ``names``: the locals of ``(r, k, panel, outer)`` (they must not meet the
    kernel's scalar arguments' names)."""
    rn, kn, pn, on = names
    r = b.let(op("rem", gid, const(width, INT32)), rn)
    k = b.let(op("rem", op("div", gid, const(width, INT32)), const(kp, INT32)), kn)
    rest = b.let(op("div", gid, const(width * kp, INT32)))
    p = b.let(op("rem", rest, const(npanels, INT32)), pn)
    outer = b.let(op("div", rest, const(npanels, INT32)), on)
    return r, k, outer, b.let(op("add", op("mul", p, const(width, INT32)), r))


def register_product(b, load_a, load_b, steps, accs):
    """``accs[i][j] += sum_u a(u, i) * b(u, j)`` over the ``steps`` contraction offsets ``u`` of one loop
    iteration; ``load_a(u, i)`` and ``load_b(u, j)`` give the operands' values (each loaded once)."""
    av = [[load_a(u, i) for i in range(len(accs))] for u in range(steps)]
    bv = [[load_b(u, j) for j in range(len(accs[0]))] for u in range(steps)]
    for i, row in enumerate(accs):
        for j, acc in enumerate(row):
            e = acc
            for u in range(steps):
                # One expression per accumulator: OpenCL C contracts ``acc + a * b`` within an expression
                # into fused multiply-adds (FP_CONTRACT is on by default), not across statements; bound
                # to locals, the products made the kernel 4-8x slower on PoCL.
                e = add_of(b, e, mul_of(b, av[u][i], bv[u][j]))
            b.assign(acc, e)


@contextlib.contextmanager
def store_loop(b, accs, dt):
    """Yields ``(i, j, value)`` in a loop over the accumulators' block (through a private array): the
    epilogue is written once, not once per accumulator (unrolled 32 times, it made PoCL's kernel
    1.3-1.7x slower)."""
    rows, cols = len(accs), len(accs[0])
    arr = b.array("private", dt, rows * cols, "accv")
    for i, row in enumerate(accs):
        for j, acc in enumerate(row):
            b.store(arr, const(i * cols + j, INT32), acc, space="private")
    c0 = const(0, INT32)
    with b.loop(c0, const(rows, INT32)) as i:
        with b.loop(c0, const(cols, INT32)) as j:
            yield i, j, b.load(arr, op("add", op("mul", i, const(cols, INT32)), j), dt, "private")


def packed_product(b, a, bb, dt, scalars, kp, mp, np_, tile=None, rhs_view=None, lhs_view=None):
    """The accumulators ``[RM][RN]`` of work item ``(column panel, row panel, batch)`` = (global id 0, global
    id 1, group id 2) over packed operand buffers ``a`` ``[B][Mp][Kp][RM]`` and ``bb`` ``[B][Np][Kp][RN]``
    (parameter names; the sizes become the scalar arguments ``Kp``, ``Mp``, ``Np``).

    ``rhs_view = (offset, batch stride, contraction stride, column stride, column panels)``: ``bb`` is the
    unpacked rhs itself, read through those element strides (see ``unpacked_rhs``); a work item past the last
    of the ``column panels`` reads the last one (its outputs are not stored). ``lhs_view = (offset, batch
    stride, row stride, contraction stride, rows)``: ``a`` is the unpacked lhs, each of the work item's rows
    read through its own offset (a row past the last reads the last one); its values are broadcast against
    the rhs panel's, so a lhs whose contraction runs along memory reads as fast as its panels."""
    scalars.update(Kp=kp, Mp=mp, Np=np_)
    Kp, Mp, Np = b.scalar("Kp"), b.scalar("Mp"), b.scalar("Np")
    cp, rp, bz = Special("global_id", 0), Special("global_id", 1), Special("group_id", 2)
    t = tile or DEFAULT_TILE
    rm, rn, uk = t["rm"], t["rn"], t["uk"]
    sm, sn = const(rm, INT32), const(rn, INT32)
    # The panel offsets in 64 bits: with int32 indices (``a[base + k*4 + c]``) PoCL did not vectorize the
    # loop (the sign extension of each index hides that they are consecutive): 10-15x slower.
    if lhs_view is None:
        abase = b.let(Cast(op("mul", op("add", op("mul", bz, Mp), rp), op("mul", Kp, sm)), INT64), "abase")
    else:
        rows = _view_rows(b, rp, rm, bz, lhs_view)
    if rhs_view is None:
        bbase = b.let(Cast(op("mul", op("add", op("mul", bz, Np), cp), op("mul", Kp, sn)), INT64), "bbase")
        bstep, bsk, bsn = sn, rn, 1
    else:
        off, bsb, bsk, bsn, ncp = rhs_view
        col = b.let(op("mul", select(op("lt", cp, const(ncp, INT32)), cp, const(ncp - 1, INT32)), sn))
        bbase = b.let(Cast(op("add", op("add", const(off, INT32), op("mul", bz, const(bsb, INT32))),
                              op("mul", col, const(bsn, INT32))), INT64), "bbase")
        bstep = const(bsk, INT32)
    accs = [[b.var(dt, const(0, dt)) for _ in range(rn)] for _ in range(rm)]
    with b.loop(const(0, INT32), Kp, const(uk, INT32)) as k:
        if lhs_view is None:
            ak = b.let(op("add", abase, Cast(op("mul", k, sm), INT64)), "ak")

            def load_a(u, i):
                return b.load(a, op("add", ak, const(u * rm + i, INT64)), dt)
        else:
            ask = lhs_view[3]
            kk = b.let(Cast(op("mul", k, const(ask, INT32)), INT64), "ak")

            def load_a(u, i):
                return b.load(a, op("add", op("add", rows[i], kk), const(u * ask, INT64)), dt)
        bk = b.let(op("add", bbase, Cast(op("mul", k, bstep), INT64)), "bk")
        register_product(b, load_a, lambda u, j: b.load(bb, op("add", bk, const(u * bsk + j * bsn, INT64)), dt),
                         uk, accs)
    return accs


def _view_rows(b, rp, rm, bz, lhs_view):
    """The 64-bit element offsets of row panel ``rp``'s ``rm`` rows of an unpacked lhs (``packed_product``'s
    ``lhs_view``), each past the last row reading the last."""
    off, asb, asm, _, nrows = lhs_view
    first = b.let(op("mul", rp, const(rm, INT32)), "arow")
    base = b.let(op("add", const(off, INT32), op("mul", bz, const(asb, INT32))))
    rows = []
    for i in range(rm):
        at = b.let(op("add", first, const(i, INT32))) if i else first
        row = select(op("lt", at, const(nrows, INT32)), at, const(nrows - 1, INT32))
        rows.append(b.let(Cast(op("add", base, op("mul", row, const(asm, INT32))), INT64), "arow"))
    return rows


def register_dot(group, lspec, rspec, layout, tile=None, rhs_view=None, lhs_view=None, transposed=False):
    """The product kernel of ``DotGroup`` ``group`` over packed operands ``lspec`` ``[B][Mp][Kp][RM]`` and
    ``rspec`` ``[B][Np][Kp][RN]`` (or an unpacked operand read through ``rhs_view`` or ``lhs_view``:
    ``packed_product``); ``layout = (wx, wy, Mp, Np, Kp)``. ``transposed``: the kernel computes the product's
    transpose (its rows are the group's columns, its lhs the group's rhs: ``DotGroup._transposed_product``), and
    stores each output at its place in the group's output. Returns its launch."""
    wx, wy, mp, np_, kp = layout
    dt = group.eqn.inputs[0].aval.dtype
    b, args, tracker, em = group._kernel_start()
    scalars = {}
    a = b.buffer(lspec, dt, False, "lhs")
    args[a] = lspec
    bb = b.buffer(rspec, dt, False, "rhs")
    args[bb] = rspec
    t = tile or DEFAULT_TILE
    accs = packed_product(b, a, bb, dt, scalars, kp, mp, np_, t, rhs_view, lhs_view)
    row0 = b.let(op("mul", Special("global_id", 1), const(t["rm"], INT32)), "row0")
    col0 = b.let(op("mul", Special("global_id", 0), const(t["rn"], INT32)), "col0")
    rows, cols = (group.N, group.M) if transposed else (group.M, group.N)
    with store_loop(b, accs, dt) as (i, j, v):
        gi = b.let(op("add", row0, i), "gi")
        gj = b.let(op("add", col0, j), "gj")
        with b.when(op("land", op("lt", gi, const(rows, INT32)), op("lt", gj, const(cols, INT32)))):
            if transposed:
                group._finish(b, em, args, Special("group_id", 2), gj, gi, v)
            else:
                group._finish(b, em, args, Special("group_id", 2), gi, gj, v)
    b.name = kernel_name("dot_reg", tracker.eqns)
    return make_launch(b, args, scalars, (np_, mp, group.B), (wx, wy, 1), tracker.eqns, "dot", fixed_local=True)
