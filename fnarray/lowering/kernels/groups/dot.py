"""Matrix-multiply kernels: ``DotGroup`` (``dot_general`` over strided operand views, tiled in local memory
where the target says tiling pays, with the elementwise epilogue fused) and operand views.
"""

from __future__ import annotations

import math

import numpy as np

from fnarray.core import primitives as P
from fnarray.core.ir import Literal
from fnarray.lowering.kernels.builder import KernelBuilder
from fnarray.lowering.kernels.emitter import shaped_index
from fnarray.lowering.kernels.groups.base import (
    VIEW_OPS,
    Group,
    Tracker,
    collapse_stride,
    contiguous_strides,
    index_vars,
    kernel_name,
    make_launch,
    reshape_strides,
)
from fnarray.lowering.kernels.groups import register_tiles
from fnarray.lowering.kernels.groups.register_tiles import (
    packs_launch,
    padded_k,
    panels,
    register_dot,
    register_dtype,
)
from fnarray.lowering.kernels.index import ix_data, unravel
from fnarray.lowering.kernels.ir import INT32, Special, const
from fnarray.lowering.kernels.rules import (
    add_of,
    convert,
    mul_of,
    op,
    select,
)

# ---------------------------------------------------------------------------- matrix multiply

#: The smallest ``M * N * K`` that takes the register-tiled kernels where the target asks for them.
REGISTER_MIN_WORK = 1 << 16
#: The most rows, and the fewest rhs elements, of a register-tiled product that reads its rhs unpacked
#: (``DotGroup._unpacked_rhs``). Products without the rhs pack, against with it, at loads 6-10 on both PoCLs:
#: ``[32, 512-784] @ [512-784, 512-784]`` 0.6-0.9x the time, ``[64, 512] @ [512, 512]`` 0.76-0.94x, M = 100-128
#: 0.8-1.4x; a 128 x 128 rhs 0.8-1.2x (its pack takes a few us, in the lhs pack's launch).
UNPACKED_RHS_ROWS = 64
UNPACKED_RHS_MIN = 1 << 16


#: Tile shape of the local-memory kernels (matrix product, implicit-GEMM convolution): (TX, TY) work items,
#: each computing RY x RX outputs, over BK-deep slices of the contraction.
TILE = (16, 8, 4, 8, 16)  # TX, TY, RX, RY, BK


def tile_arrays(b, dt, tile):
    """The tiled kernel's arrays ``(As, Bs, acc, av, bv)``: the ``BK x BM`` and ``BK x BN`` operand tiles in local
    memory, a work item's ``RY x RX`` accumulators (set to zero) and its row and column registers."""
    TX, TY, RX, RY, BK = tile
    As = b.array("local", dt, BK * TY * RY, "As")
    Bs = b.array("local", dt, BK * TX * RX, "Bs")
    acc = b.array("private", dt, RY * RX, "acc")
    av = b.array("private", dt, RY, "a")
    bv = b.array("private", dt, RX, "b")
    with b.loop(const(0, INT32), const(RY * RX, INT32)) as i:
        b.store(acc, i, const(0, dt), space="private")
    return As, Bs, acc, av, bv


def tile_product(b, tiles, dt, tx, ty, tile):
    """``acc += As^T Bs`` for work item ``(tx, ty)``: its ``RY`` rows and ``RX`` columns (``TX`` apart) of the
    staged tiles, one ``k`` of the ``BK``-deep slice at a time through the row and column registers."""
    TX, TY, RX, RY, BK = tile
    BM, BN = TY * RY, TX * RX
    As, Bs, acc, av, bv = tiles
    c0 = const(0, INT32)
    with b.loop(c0, const(BK, INT32)) as k:
        with b.loop(c0, const(RY, INT32)) as yy:
            b.store(av, yy, b.load(As, op("add", op("mul", k, const(BM, INT32)),
                                           op("add", op("mul", ty, const(RY, INT32)), yy)), dt, "local"),
                    space="private")
        with b.loop(c0, const(RX, INT32)) as xx:
            b.store(bv, xx, b.load(Bs, op("add", op("mul", k, const(BN, INT32)),
                                           op("add", tx, op("mul", xx, const(TX, INT32)))), dt, "local"),
                    space="private")
        with b.loop(c0, const(RY, INT32)) as yy:
            with b.loop(c0, const(RX, INT32)) as xx:
                slot = b.let(op("add", op("mul", yy, const(RX, INT32)), xx))
                prod = b.let(mul_of(b, b.load(av, yy, dt, "private"), b.load(bv, xx, dt, "private")))
                cur = b.load(acc, slot, dt, "private")
                b.store(acc, slot, add_of(b, cur, prod), space="private")


class DotGroup(Group):
    kind = "dot"
    accepts_roots = True

    def __init__(self, ctx, eqn):
        out = eqn.outputs[0]
        super().__init__(ctx, out.aval.shape)
        self.eqn = eqn
        self.products.append(out)
        (lc, rc), (lb, rb) = eqn.params["dimension_numbers"]
        lhs, rhs = eqn.inputs
        self.lc, self.rc, self.lb, self.rb = tuple(lc), tuple(rc), tuple(lb), tuple(rb)
        self.lf = tuple(i for i in range(lhs.aval.ndim) if i not in lc and i not in lb)
        self.rf = tuple(i for i in range(rhs.aval.ndim) if i not in rc and i not in rb)
        ls, rs = lhs.aval.shape, rhs.aval.shape
        self.B = math.prod(ls[i] for i in lb)
        self.M = math.prod(ls[i] for i in self.lf)
        self.K = math.prod(ls[i] for i in lc)
        self.N = math.prod(rs[i] for i in self.rf)

    def plan(self, operand, groups):
        """``(base var, offset, strides per group)`` reading ``operand`` in place, or ``None``."""
        view = operand_view(self.ctx, operand)
        if view is None:
            return None
        base, offset, strides = view
        shape = operand.aval.shape
        out = []
        for dims in groups:
            s = collapse_stride(dims, shape, strides)
            if s is None:
                return None
            out.append(s)
        return base, offset, tuple(out)

    def operand_plans(self):
        lhs, rhs = self.eqn.inputs
        lp = self.plan(lhs, (self.lb, self.lf, self.lc))
        rp = self.plan(rhs, (self.rb, self.rc, self.rf))
        return lp, rp

    def analyse(self):
        lp, rp = self.operand_plans()
        for plan, v in zip((lp, rp), self.eqn.inputs, strict=True):
            if plan is not None:
                self.reads.add(plan[0])
            else:
                b = KernelBuilder("analysis")
                reads: dict = {}
                em = self.ctx.emitter(b, on_read=lambda var, key: reads.setdefault(var, set()).add(key))
                em.val(v, shaped_index(v.aval.shape))
                self.reads |= set(reads)

    def _copy_launch(self, operand, groups, tag):
        """A kernel writing ``operand`` in (batch, rows, cols) order into a scratch buffer."""
        ctx = self.ctx
        shape = operand.aval.shape
        sizes = [math.prod(shape[d] for d in g) for g in groups]
        spec = ctx.spec(("dotcopy", id(self), tag), tuple(sizes), operand.aval.dtype)
        b = KernelBuilder("dot_operand_copy")
        args: dict = {}
        tracker = Tracker(ctx)
        em = ctx.emitter(b, args=args, computes=set(self.roots), tracker=tracker)
        n = math.prod(sizes)
        gid, gsize, lsize = ctx.gid(b, n, ctx.wg)
        with b.when(op("lt", gid, const(n, INT32))):
            cidx = index_vars(b, gid, tuple(sizes), "c")
            idx = [None] * len(shape)
            for g, ci in zip(groups, cidx, strict=True):
                sub = unravel(ci, tuple(shape[d] for d in g)) if g else ()
                for d, s in zip(g, sub, strict=True):
                    idx[d] = s
            v = em.val(operand, tuple(idx))
            name = b.buffer(spec, operand.aval.dtype, True, "out")
            args[name] = spec
            b.store(name, gid, v)
        stride = contiguous_strides(sizes)
        return make_launch(b, args, {}, gsize, lsize, tracker.eqns, "copy"), (spec, 0, stride)

    def codegen(self):
        ctx = self.ctx
        launches = []
        lhs, rhs = self.eqn.inputs
        if self._register_tiled():
            return self._register()
        lp, rp = self.operand_plans()
        if lp is None:
            launch, lp = self._copy_launch(lhs, (self.lb, self.lf, self.lc), "lhs")
            launches.append(launch)
        else:
            lp = (ctx.spec(lp[0]), lp[1], lp[2])
        if rp is None:
            launch, rp = self._copy_launch(rhs, (self.rb, self.rc, self.rf), "rhs")
            launches.append(launch)
        else:
            rp = (ctx.spec(rp[0]), rp[1], rp[2])
        B, M, N, K = self.B, self.M, self.N, self.K
        if B * M * N == 0:
            return launches
        dt = lhs.aval.dtype
        tiled = (ctx.caps.tiling_pays and ctx.caps.local_memory and dt != np.bool_ and M * N * K >= (1 << 16)
                 and self._accumulator_dtype() == dt
                 and min(M, N) >= 8 and (ctx.caps.max_workgroup_size or 1024) >= self.TX * self.TY
                 and self._tiled_groups_fit())
        if tiled:
            launches.append(self._tiled(lp, rp))
        else:
            block = self._block()
            launches.append(self._blocked(lp, rp, block) if block != (1, 1) else self._simple(lp, rp))
        return launches

    def _block(self):
        """Outputs ``(rows, cols)`` one work item of the untiled kernel computes: the scheduler option
        ``dot_block`` (webgpu on a CPU adapter: lavapipe loads each operand element with a gather, so a
        4 x 4 block, reading 8 elements for 16 products instead of 32, runs the MLP's products 2-4x faster),
        narrowed to the output's own rows and columns; ``(1, 1)`` (the one-output kernel) by default."""
        ry, rx = self.ctx.opts.get("dot_block", (1, 1))
        if self.eqn.inputs[0].aval.dtype == np.bool_:
            return (1, 1)
        return (min(ry, self.M), min(rx, self.N))

    def _accumulator_dtype(self):
        """The dtype products are summed in: the operands', or for integer operands a wider integer result
        (``preferred_element_type``: int8 x int8 summed in int32, as XLA; not in int8 and then widened)."""
        dt = self.eqn.inputs[0].aval.dtype
        out = self.eqn.outputs[0].aval.dtype
        if dt.kind in "iu" and out.kind in "iu" and out.itemsize > dt.itemsize:
            return out
        return dt

    def _register_tiled(self) -> bool:
        """Whether the packed register-tiled kernels run (``register_tiles``): a target that asks for them
        (and has 64-bit integers, which their panel offsets use), a float32/float64 product large enough
        that the two pack launches pay."""
        caps = self.ctx.caps
        dt = self.eqn.inputs[0].aval.dtype
        return (caps.tiling_pays and getattr(caps, "matmul_tiling", "local") == "register"
                and np.dtype(np.int64) in caps.dtypes and register_dtype(dt)
                and self.eqn.outputs[0].aval.dtype == dt and self.eqn.inputs[1].aval.dtype == dt
                and self.M * self.N * self.K >= REGISTER_MIN_WORK and min(self.M, self.N) >= 4)

    def _register(self):
        return self.ctx.tuned(register_tiles.TUNABLE, register_tiles.DEFAULT_TILE, self._register_variant,
                              {"rows": self.M, "cols": self.N})

    def _register_variant(self, tile):
        lhs, rhs = self.eqn.inputs
        wx, wy, mp, np_ = panels(self.M, self.N, tile)
        kp = padded_k(self.K, tile)
        lpart = (lhs, (self.lb, self.lf, self.lc), 1, kp, mp, "lhs")
        view = self._unpacked_rhs(tile)
        if view is not None:
            la, (ls,) = packs_launch(self.ctx, self, [lpart], tile)
            base, off, (sb, sk, sn) = view
            rhs_view = (off, sb, sk, sn, self.N // tile["rn"])
            return [la, register_dot(self, ls, self.ctx.spec(base), (wx, wy, mp, np_, kp), tile, rhs_view)]
        rpart = (rhs, (self.rb, self.rc, self.rf), 2, kp, np_, "rhs")
        pa, (ls, rs) = packs_launch(self.ctx, self, [lpart, rpart], tile)
        return [pa, register_dot(self, ls, rs, (wx, wy, mp, np_, kp), tile)]

    def _unpacked_rhs(self, tile):
        """The rhs plan ``(base, offset, (batch, contraction, column strides))`` where the product reads the
        rhs where it lies instead of packing it, else ``None``: a skinny unbatched product (at most
        ``UNPACKED_RHS_ROWS`` rows: each rhs panel is read by few work items, and a weight's pack cost about as
        much as the product) whose rhs has at least ``UNPACKED_RHS_MIN`` elements and is a view of a buffer with
        consecutive columns, whole panels of columns and whole loop iterations of the contraction (no bounds
        tests). Packed where unpacked reads measured slower: a transposed rhs (``x @ w.T``: 1.2-4x on both
        PoCLs), a row pitch of a multiple of 4 KiB (the rows alias in the cache: 1.1-1.4x at 1024 x 1024), a
        batch of small products (64 x (64x64 @ 64x16): 2.5x on PoCL 3.1)."""
        if (self.B != 1 or self.M > UNPACKED_RHS_ROWS or self.K * self.N < UNPACKED_RHS_MIN or self.N % tile["rn"]
                or self.K % tile["uk"]):
            return None
        rp = self.operand_plans()[1]
        if rp is None or rp[2][2] != 1 or rp[2][1] % 1024 == 0:
            return None
        return rp

    def _tiled_groups_fit(self) -> bool:
        """Whether the tiled kernel's work-groups per dimension (columns, rows, batch) stay within the
        target's dispatch limit; else the simple kernel runs, whose linear launch folds to fit."""
        lim = self.ctx.caps.max_dispatch
        if lim is None:
            return True
        groups = (-(-self.N // (self.TX * self.RX)), -(-self.M // (self.TY * self.RY)), self.B)
        return max(groups) <= lim

    def _params(self, b, lp, rp, args, scalars):
        lspec, loff, (lsb, lsm, lsk) = lp
        rspec, roff, (rsb, rsk, rsn) = rp
        dt = self.eqn.inputs[0].aval.dtype
        a = b.buffer(lspec, dt, False, "lhs")
        args[a] = lspec
        bb = b.buffer(rspec, dt, False, "rhs")
        args[bb] = rspec
        names = dict(M=self.M, N=self.N, K=self.K, a_off=loff, a_sb=lsb, a_sm=lsm, a_sk=lsk,
                     b_off=roff, b_sb=rsb, b_sk=rsk, b_sn=rsn)
        if self.ctx.opts.get("bake_dot", False):
            return a, bb, {k: const(v, INT32) for k, v in names.items()}
        syms = {k: b.scalar(k) for k in names}
        scalars.update(names)
        return a, bb, syms

    def _out_index(self, bexpr, mexpr, nexpr):
        """The output multi-index (``Ix``) of canonical (batch, row, column) kernel values."""
        lhs, rhs = self.eqn.inputs
        ls, rs = lhs.aval.shape, rhs.aval.shape
        parts = []
        for e, size, dims in ((bexpr, self.B, [ls[i] for i in self.lb]), (mexpr, self.M, [ls[i] for i in self.lf]),
                              (nexpr, self.N, [rs[i] for i in self.rf])):
            if not dims:
                continue
            parts.extend(unravel(ix_data(e, 0, size - 1), tuple(dims)))
        return tuple(parts)

    def _finish(self, b, em, args, bexpr, mexpr, nexpr, acc):
        ctx = self.ctx
        out = self.eqn.outputs[0]
        v = b.let(convert(b, acc, out.aval.dtype))
        idx = self._out_index(bexpr, mexpr, nexpr)
        em.seed(out, idx, v)
        flat = b.let(op("add", op("mul", op("add", op("mul", bexpr, const(self.M, INT32)), mexpr),
                                  const(self.N, INT32)), nexpr), "o")
        if out in ctx.needed:
            b.store(ctx.output(b, args, out), flat, v)
        self.emit_roots(b, em, args, idx, flat)

    def _simple(self, lp, rp):
        ctx = self.ctx
        b, args, tracker, em = self._kernel_start()
        scalars = {}
        a, bb, s = self._params(b, lp, rp, args, scalars)
        total = self.B * self.M * self.N
        gid, gsize, lsize = ctx.gid(b, total, ctx.wg)
        dt = self.eqn.inputs[0].aval.dtype
        acc_dt = self._accumulator_dtype()
        with b.when(op("lt", gid, const(total, INT32))):
            n = b.let(op("rem", gid, s["N"]), "n")
            mn = b.let(op("div", gid, s["N"]))
            m = b.let(op("rem", mn, s["M"]), "m")
            bi = b.let(op("div", mn, s["M"]), "bi")
            abase = b.let(op("add", op("add", s["a_off"], op("mul", bi, s["a_sb"])), op("mul", m, s["a_sm"])))
            bbase = b.let(op("add", op("add", s["b_off"], op("mul", bi, s["b_sb"])), op("mul", n, s["b_sn"])))
            acc = b.var(acc_dt, const(0, acc_dt))
            with b.loop(const(0, INT32), s["K"]) as k:
                x = b.load(a, op("add", abase, op("mul", k, s["a_sk"])), dt)
                y = b.load(bb, op("add", bbase, op("mul", k, s["b_sk"])), dt)
                if acc_dt != dt:
                    x, y = b.let(convert(b, x, acc_dt)), b.let(convert(b, y, acc_dt))
                b.assign(acc, add_of(b, acc, b.let(mul_of(b, x, y))))
            self._finish(b, em, args, bi, m, n, acc)
        b.name = kernel_name("dot", tracker.eqns)
        return make_launch(b, args, scalars, gsize, lsize, tracker.eqns, "dot")

    def _blocked(self, lp, rp, block):
        """The untiled product with ``block = (RY, RX)`` outputs per work item: RY rows and RX columns
        (clamped to the last row and column at the edges, whose products are computed and not stored),
        RY + RX operand loads per step of the contraction, the epilogue per output as ``_simple``'s."""
        ry, rx = block
        ctx = self.ctx
        b, args, tracker, em = self._kernel_start()
        scalars = {}
        a, bb, s = self._params(b, lp, rp, args, scalars)
        mb, nb = -(-self.M // ry), -(-self.N // rx)
        total = self.B * mb * nb
        gid, gsize, lsize = ctx.gid(b, total, ctx.wg)
        dt = self.eqn.inputs[0].aval.dtype
        acc_dt = self._accumulator_dtype()
        c0 = const(0, INT32)
        with b.when(op("lt", gid, const(total, INT32))):
            n0 = b.let(op("mul", op("rem", gid, const(nb, INT32)), const(rx, INT32)), "n")
            mn = b.let(op("div", gid, const(nb, INT32)))
            m0 = b.let(op("mul", op("rem", mn, const(mb, INT32)), const(ry, INT32)), "m")
            bi = b.let(op("div", mn, const(mb, INT32)), "bi")
            abase = b.let(op("add", s["a_off"], op("mul", bi, s["a_sb"])))
            bbase = b.let(op("add", s["b_off"], op("mul", bi, s["b_sb"])))
            mlast, nlast = (b.let(op("sub", s[k], const(1, INT32))) for k in ("M", "N"))
            rows, cols = [], []
            for i in range(ry):
                r = b.let(op("add", m0, const(i, INT32))) if i else m0
                rows.append(b.let(op("add", abase, op("mul", select(op("lt", r, s["M"]), r, mlast), s["a_sm"]))))
            for j in range(rx):
                c = b.let(op("add", n0, const(j, INT32))) if j else n0
                cols.append(b.let(op("add", bbase, op("mul", select(op("lt", c, s["N"]), c, nlast), s["b_sn"]))))
            accs = [b.var(acc_dt, const(0, acc_dt)) for _ in range(ry * rx)]
            with b.loop(c0, s["K"]) as k:
                ka, kb = b.let(op("mul", k, s["a_sk"])), b.let(op("mul", k, s["b_sk"]))
                xs = [b.load(a, op("add", r, ka), dt) for r in rows]
                ys = [b.load(bb, op("add", c, kb), dt) for c in cols]
                if acc_dt != dt:
                    xs = [b.let(convert(b, x, acc_dt)) for x in xs]
                    ys = [b.let(convert(b, y, acc_dt)) for y in ys]
                for i, x in enumerate(xs):
                    for j, y in enumerate(ys):
                        acc = accs[i * rx + j]
                        b.assign(acc, add_of(b, acc, b.let(mul_of(b, x, y))))
            held = b.array("private", acc_dt, ry * rx, "acc")
            for i, acc in enumerate(accs):
                b.store(held, const(i, INT32), acc, space="private")
            with b.loop(c0, const(ry, INT32)) as yy:
                with b.loop(c0, const(rx, INT32)) as xx:
                    gi = b.let(op("add", m0, yy), "gi")
                    gj = b.let(op("add", n0, xx), "gj")
                    with b.when(op("land", op("lt", gi, s["M"]), op("lt", gj, s["N"]))):
                        v = b.load(held, op("add", op("mul", yy, const(rx, INT32)), xx), acc_dt, "private")
                        self._finish(b, em, args, bi, gi, gj, v)
        b.name = kernel_name("dot", tracker.eqns)
        return make_launch(b, args, scalars, gsize, lsize, tracker.eqns, "dot")

    TX, TY, RX, RY, BK = TILE

    def _tiled(self, lp, rp):
        TX, TY, RX, RY, BK = self.TX, self.TY, self.RX, self.RY, self.BK
        BM, BN = TY * RY, TX * RX
        b, args, tracker, em = self._kernel_start()
        scalars = {}
        a, bb, s = self._params(b, lp, rp, args, scalars)
        dt = self.eqn.inputs[0].aval.dtype
        c0 = const(0, INT32)
        tx, ty, bz = Special("local_id", 0), Special("local_id", 1), Special("group_id", 2)
        row0 = b.let(op("mul", Special("group_id", 1), const(BM, INT32)), "row0")
        col0 = b.let(op("mul", Special("group_id", 0), const(BN, INT32)), "col0")
        tid = b.let(op("add", op("mul", ty, const(TX, INT32)), tx), "tid")
        abase = b.let(op("add", s["a_off"], op("mul", bz, s["a_sb"])))
        bbase = b.let(op("add", s["b_off"], op("mul", bz, s["b_sb"])))
        tiles = tile_arrays(b, dt, TILE)
        As, Bs, acc = tiles[:3]
        mlast, nlast, klast = (b.let(op("sub", s[k], const(1, INT32))) for k in ("M", "N", "K"))
        with b.loop(c0, s["K"], const(BK, INT32)) as k0:
            with b.loop(tid, const(BM * BK, INT32), const(TX * TY, INT32)) as l:
                r = b.let(op("div", l, const(BK, INT32)))
                c = b.let(op("rem", l, const(BK, INT32)))
                gi = b.let(op("add", row0, r))
                gk = b.let(op("add", k0, c))
                ok = b.let(op("land", op("lt", gi, s["M"]), op("lt", gk, s["K"])))
                gi_c = b.let(select(op("lt", gi, s["M"]), gi, mlast))
                gk_c = b.let(select(op("lt", gk, s["K"]), gk, klast))
                x = b.load(a, op("add", abase, op("add", op("mul", gi_c, s["a_sm"]), op("mul", gk_c, s["a_sk"]))), dt)
                b.store(As, op("add", op("mul", c, const(BM, INT32)), r), select(ok, x, const(0, dt)), space="local")
            with b.loop(tid, const(BK * BN, INT32), const(TX * TY, INT32)) as l:
                r = b.let(op("div", l, const(BN, INT32)))
                c = b.let(op("rem", l, const(BN, INT32)))
                gk = b.let(op("add", k0, r))
                gj = b.let(op("add", col0, c))
                ok = b.let(op("land", op("lt", gk, s["K"]), op("lt", gj, s["N"])))
                gk_c = b.let(select(op("lt", gk, s["K"]), gk, klast))
                gj_c = b.let(select(op("lt", gj, s["N"]), gj, nlast))
                y = b.load(bb, op("add", bbase, op("add", op("mul", gk_c, s["b_sk"]), op("mul", gj_c, s["b_sn"]))), dt)
                b.store(Bs, op("add", op("mul", r, const(BN, INT32)), c), select(ok, y, const(0, dt)), space="local")
            b.barrier()
            tile_product(b, tiles, dt, tx, ty, TILE)
            b.barrier()
        with b.loop(c0, const(RY, INT32)) as yy:
            with b.loop(c0, const(RX, INT32)) as xx:
                gi = b.let(op("add", row0, op("add", op("mul", ty, const(RY, INT32)), yy)), "gi")
                gj = b.let(op("add", col0, op("add", tx, op("mul", xx, const(TX, INT32)))), "gj")
                with b.when(op("land", op("lt", gi, s["M"]), op("lt", gj, s["N"]))):
                    v = b.load(acc, op("add", op("mul", yy, const(RX, INT32)), xx), dt, "private")
                    self._finish(b, em, args, bz, gi, gj, v)
        b.name = kernel_name("dot_tiled", tracker.eqns)
        gsize = (-(-self.N // BN) * TX, -(-self.M // BM) * TY, self.B)
        return make_launch(b, args, scalars, gsize, (TX, TY, 1), tracker.eqns, "dot", fixed_local=True)


def operand_view(ctx, v):
    """``(base var, offset, strides)`` reading ``v`` from a buffer through transposes, reshapes and
    broadcasts, where the base is (or will be) materialised; ``None`` for a literal."""
    if isinstance(v, Literal):
        return None
    if ctx.in_buffer(v) or v not in ctx.producer:
        return v, 0, contiguous_strides(v.aval.shape)
    e = ctx.producer[v]
    if e.primitive not in VIEW_OPS:
        return v, 0, contiguous_strides(v.aval.shape)
    inner = operand_view(ctx, e.inputs[0])
    if inner is None:
        return v, 0, contiguous_strides(v.aval.shape)
    base, off, st = inner
    x = e.inputs[0].aval
    if e.primitive == P.transpose:
        return base, off, tuple(st[p] for p in e.params["permutation"])
    if e.primitive == P.reshape:
        ns = reshape_strides(x.shape, st, v.aval.shape)
        return (base, off, ns) if ns is not None else (v, 0, contiguous_strides(v.aval.shape))
    bd = e.params["broadcast_dimensions"]
    out = [0] * v.aval.ndim
    for i, d in enumerate(bd):
        out[d] = st[i] if x.shape[i] == v.aval.shape[d] else 0
    return base, off, tuple(out)


#: What ``schedule`` collects into its tables ``GROUPS`` (and ``OPERAND_VIEWS``).
GROUPS = {P.dot_general: DotGroup}
OPERAND_VIEWS = {P.dot_general: operand_view}
