"""The convolution kernels: ``conv_general_dilated`` as one kernel on the kernel backends.

A convolution is a matrix product over an implicit im2col matrix. With ``Gt`` groups
(``feature_group_count`` or ``batch_group_count``, at most one above 1, as in XLA), group ``g``
multiplies

- ``A[m, k]``: rows ``m`` = (output batch ``n``, output position ``y``), columns ``k`` = (kernel
  position ``w``, input feature ``c``); the lhs element at batch ``n + g * Nout`` (batch groups),
  feature ``c + g * Cg`` (feature groups) and position ``q = y * stride - pad_lo + w * rhs_dilation``
  of the ``lhs_dilation``-dilated input, zero where ``q`` is in the padding or between dilated
  elements;
- ``B[k, j]``: the rhs element at output feature ``o = g * Og + j``, input feature ``c``, position ``w``.

Three kernels compute it (written here in the kernel IR):

- the *direct* kernel: one work item per output element, loops over the kernel window and the
  group's input features, skipping the window positions that fall into padding or dilation holes;
  where the target stops long loops (``Capabilities.max_loop_iterations``: Mesa's lavapipe) the
  contraction is split into chunks whose partial sums a second kernel adds;
- the *tiled* kernel (where ``Capabilities.tiling_pays``): the matrix product of
  ``fnarray.lowering.kernels.schedule``'s ``dot_general`` tiles, ``A`` and ``B`` tiles loaded into
  local memory by computing each element's im2col address.
- the *register-tiled* kernel (where ``Capabilities.matmul_tiling == "register"``: CPU OpenCL devices,
  ``register_tiles.py``): the weights packed into zero-padded panels of 8 output features by a copy
  kernel, the input read where it lies, ``rm x rn`` outputs per work item in registers (``CONV_TUNABLE``: 4 x 8
  by default, 4 x 16 by the cost model, timed by ``autotune="full"``), no local memory; where
  the input's features are not its unit stride (a weight gradient, whose contracted "features" are the
  batch) the contraction runs features outermost and the innermost window dimension innermost
  (``_features_outer``).

All read the operands where they lie, through transposes, reshapes, broadcasts and reversals (the
kernel flip of the input gradient) expressed as strides; sizes, strides, paddings and dilations are
scalar arguments, so one compiled kernel serves every shape of the same rank and layout (the register
kernel also bakes the input-feature count and whether the feature stride is 1). All end
with the elementwise epilogue (bias, activation) that the scheduler fuses into them, as a matrix
product's. The gradients of a convolution are convolutions (with ``lhs_dilation`` or swapped group
counts), so they are these kernels too.
"""

from __future__ import annotations

import math

import numpy as np

from fnarray.core import primitives as P
from fnarray.core.conv import conv_general_dilated_p
from fnarray.core.ir import Literal
from fnarray.lowering.kernels.groups import register_tiles
from fnarray.lowering.kernels.groups.base import (
    VIEW_OPS,
    Group,
    contiguous_strides,
    kernel_name,
    make_launch,
    reshape_strides,
)
from fnarray.lowering.kernels.groups.dot import TILE, tile_arrays, tile_product
from fnarray.lowering.kernels.groups.register_tiles import (
    INT64,
    RM,
    RN,
    UK,
    panel_coords,
    panels,
    register_dtype,
    register_product,
    store_loop,
)
from fnarray.lowering.kernels.index import ix_const, ix_data
from fnarray.lowering.kernels.ir import INT32, Cast, Special, const
from fnarray.lowering.kernels.rules import add_of, convert, mul_of, op, select
from fnarray.lowering.kernels.tuning import Tunable

__all__ = ["CONV", "ConvGroup", "strided_view", "GROUPS", "OPERAND_VIEWS", "CONV_TUNABLE", "CONV_DEFAULT"]
CONV = conv_general_dilated_p

#: The register-tiled kernel's default (``register_tiles``' hand-tuned product tile): ``rm`` output positions x
#: ``rn`` output features per work item, ``uk`` contraction steps per loop iteration, ``wx x wy`` work items per
#: group at most.
CONV_DEFAULT = {"rm": RM, "rn": RN, "uk": UK, "wx": 8, "wy": 8}


def _conv_cost(tile, default, facts) -> float:
    """The register tile's cost model (``register_tiles.TUNABLE``'s, ``facts`` ``rows`` = output positions,
    ``cols`` = output features of a group), with the input's rows as streams of their own (``lhs="rows"``) unless
    ``facts["rows_together"]``: a row is a window position's run of input features, read where it lies, so more
    than 4 rows cost 0.1 each; a weight gradient's rows are consecutive elements of one run (the batch innermost,
    ``nfast``), where 8 x 8 ran fastest (the 3x3 conv 32 -> 64's weight gradient: 8 x 8 45 ms, 4 x 16 54, 4 x 8
    80, load 12). Wider ``rn`` blocks cost fewer loads per multiply-add."""
    if facts.get("rows_together"):
        return register_tiles.TUNABLE.cost(tile, default, facts)
    return register_tiles.TUNABLE.cost(tile, default, {**facts, "lhs": "rows"})


#: The register-tiled convolution's tunable choices (``kernels/tuning.py``): register blocking over output
#: features (``rn``: each input value loaded once serves ``rn`` multiply-adds) and output positions (``rm``:
#: each packed weight serves ``rm``), contraction steps per iteration (``uk``). At most 64 accumulators.
CONV_TUNABLE = Tunable("conv_register", {"rm": (2, 4, 8), "rn": (8, 16, 32), "uk": (4,), "wx": (8,), "wy": (8,)},
                       doc="output positions (rm) x output features (rn) per work item and contraction steps per "
                           "iteration (uk) of the register-tiled convolution",
                       valid=lambda c, f: (c["rm"] * c["rn"] <= 64
                                           and c["wx"] * c["wy"] <= (f.get("workgroup_limit") or 1024)),
                       cost=_conv_cost)


def strided_view(ctx, v):
    """``(base var, offset, strides)`` reading ``v`` from ``base``'s buffer without a copy, through
    ``transpose``, ``reshape``, ``broadcast_in_dim`` and ``rev`` (a negative stride); ``v`` itself
    (which then gets a buffer) where no such view exists."""
    own = (v, 0, contiguous_strides(v.aval.shape))
    if ctx.in_buffer(v) or v not in ctx.producer:
        return own
    e = ctx.producer[v]
    if e.primitive not in VIEW_OPS and e.primitive != P.rev:
        return own
    x = e.inputs[0]
    if isinstance(x, Literal):
        return own
    base, off, st = strided_view(ctx, x)
    shape = x.aval.shape
    if e.primitive == P.rev:
        dims = set(e.params["dimensions"])
        off += sum((shape[d] - 1) * st[d] for d in dims)
        return base, off, tuple(-s if d in dims else s for d, s in enumerate(st))
    if e.primitive == P.transpose:
        return base, off, tuple(st[p] for p in e.params["permutation"])
    if e.primitive == P.reshape:
        ns = reshape_strides(shape, st, v.aval.shape)
        return (base, off, ns) if ns is not None else own
    out = [0] * v.aval.ndim
    for i, d in enumerate(e.params["broadcast_dimensions"]):
        out[d] = st[i] if shape[i] == v.aval.shape[d] else 0
    return base, off, tuple(out)


class _Geometry:
    """The static description of one convolution equation (Python ints)."""

    def __init__(self, eqn):
        lhs, rhs = eqn.inputs
        out = eqn.outputs[0]
        p = eqn.params
        nsp = lhs.aval.ndim - 2
        dn = p.get("dimension_numbers")
        if dn is None:
            dn = (tuple(range(nsp + 2)),) * 3
        self.lspec, self.rspec, self.ospec = (tuple(s) for s in dn)
        ls, rs, os_ = lhs.aval.shape, rhs.aval.shape, out.aval.shape
        self.nsp = nsp
        self.N, self.C = ls[self.lspec[0]], ls[self.lspec[1]]
        self.O, self.Cg = rs[self.rspec[0]], rs[self.rspec[1]]
        self.Nout = os_[self.ospec[0]]
        self.in_sp = tuple(ls[d] for d in self.lspec[2:])
        self.k_sp = tuple(rs[d] for d in self.rspec[2:])
        self.out_sp = tuple(os_[d] for d in self.ospec[2:])
        self.G = int(p.get("feature_group_count", 1) or 1)
        self.BG = int(p.get("batch_group_count", 1) or 1)
        self.Gt = self.G * self.BG
        self.Og = self.O // self.Gt
        ones = (1,) * nsp
        self.strides = tuple(p.get("window_strides") or ones)
        self.pad_lo = tuple(lo for lo, _ in (p.get("padding") or ((0, 0),) * nsp))
        self.ldil = tuple(p.get("lhs_dilation") or ones)
        self.rdil = tuple(p.get("rhs_dilation") or ones)
        self.M = self.Nout * math.prod(self.out_sp)          # rows of one group's matrix product
        self.K = self.Cg * math.prod(self.k_sp)              # its contraction
        self.window = math.prod(self.k_sp)

    @property
    def dilated(self) -> bool:
        return any(d != 1 for d in self.ldil)


def _window_size(ksizes):
    """The number of window positions (a kernel expression) of the window sizes ``ksizes`` (at least one)."""
    win = ksizes[0]
    for k in ksizes[1:]:
        win = op("mul", win, k)
    return win


def _decode(b, lin, sizes, hint="y"):
    """Row-major coordinates of ``lin`` in ``sizes`` (kernel expressions), outermost first."""
    out = []
    for k in range(len(sizes) - 1, -1, -1):
        if k == 0:
            out.append(lin)
            break
        out.append(b.let(op("rem", lin, sizes[k]), f"{hint}{k}"))
        lin = b.let(op("div", lin, sizes[k]))
    return out[::-1]


class ConvGroup(Group):
    """One ``conv_general_dilated`` with the elementwise ops on its result as an epilogue."""

    kind = "conv"
    accepts_roots = True
    TX, TY, RX, RY, BK = TILE  # the matrix product's tile shape

    def __init__(self, ctx, eqn):
        out = eqn.outputs[0]
        super().__init__(ctx, out.aval.shape)
        self.eqn = eqn
        self.products.append(out)
        self.geo = _Geometry(eqn)

    def plans(self):
        return [strided_view(self.ctx, a) for a in self.eqn.inputs]

    def analyse(self):
        for base, _, _ in self.plans():
            self.reads.add(base)

    # ------------------------------------------------------------------ arguments
    def _scalars(self, b, args, scalars, plans):
        """The operand buffers and every size, stride, padding and dilation as scalar arguments."""
        g = self.geo
        ctx = self.ctx
        (lb, loff, lst), (rb, roff, rst) = plans
        dt = self.eqn.inputs[0].aval.dtype
        lname = b.buffer(ctx.spec(lb), dt, False, "lhs")
        args[lname] = ctx.spec(lb)
        rname = b.buffer(ctx.spec(rb), self.eqn.inputs[1].aval.dtype, False, "rhs")
        args[rname] = ctx.spec(rb)
        ost = contiguous_strides(self.shape)
        names = dict(l_off=loff, l_b=lst[g.lspec[0]], l_f=lst[g.lspec[1]], r_off=roff, r_o=rst[g.rspec[0]],
                     r_i=rst[g.rspec[1]], o_b=ost[g.ospec[0]], o_f=ost[g.ospec[1]], Cg=g.Cg, Og=g.Og,
                     Nout=g.Nout, O=g.O, bmul=g.Nout if g.BG > 1 else 0, fmul=g.Cg if g.G > 1 else 0)
        for d in range(g.nsp):
            names.update({f"l_s{d}": lst[g.lspec[2 + d]], f"r_s{d}": rst[g.rspec[2 + d]],
                          f"o_s{d}": ost[g.ospec[2 + d]], f"in{d}": g.in_sp[d], f"k{d}": g.k_sp[d],
                          f"y{d}": g.out_sp[d], f"st{d}": g.strides[d], f"pl{d}": g.pad_lo[d],
                          f"rd{d}": g.rdil[d], f"ld{d}": g.ldil[d]})
        syms = {k: b.scalar(k) for k in names}
        scalars.update(names)
        return lname, rname, syms

    def _position(self, b, s, d, y, w):
        """``(ok, p)``: whether kernel position ``w`` over output position ``y`` (dimension ``d``) reads
        an input element, and which."""
        q = b.let(op("add", op("sub", op("mul", y, s[f"st{d}"]), s[f"pl{d}"]), op("mul", w, s[f"rd{d}"])))
        if self.geo.dilated:
            ld = s[f"ld{d}"]
            qc = b.let(select(op("lt", q, const(0, INT32)), const(0, INT32), q))
            p = b.let(op("div", qc, ld))
            ok = op("land", op("land", op("ge", q, const(0, INT32)), op("eq", op("rem", qc, ld), const(0, INT32))),
                    op("lt", p, s[f"in{d}"]))
            return b.let(ok), p
        return b.let(op("land", op("ge", q, const(0, INT32)), op("lt", q, s[f"in{d}"]))), q

    def _row_positions(self, b, s, rows, nfast, d, w, bases, oks):
        """Each register row's input base and validity after window position ``w`` of dimension ``d`` (with
        ``nfast``, rows after the first share row 0's positions, one element on)."""
        nb, no = [], []
        for i, ((_, ys), okr, cur) in enumerate(zip(rows, oks, bases, strict=True)):
            if nfast and i:
                no.append(no[0])
                nb.append(op("add", nb[0], const(i, INT32)))
                continue
            okd, p = self._position(b, s, d, ys[d], w)
            no.append(okd if okr is None else b.let(op("land", okr, okd)))
            nb.append(b.let(op("add", cur, op("mul", p, s[f"l_s{d}"]))))
        return nb, no

    def _out_index(self, n, o, ys):
        """The output multi-index (``Ix``) of kernel values ``n``, ``o``, ``ys`` (for the epilogue)."""
        g = self.geo
        idx = [None] * len(self.shape)
        for d, e in zip(g.ospec, [n, o, *ys], strict=True):
            size = self.shape[d]
            idx[d] = ix_data(e, 0, size - 1) if size > 1 else ix_const(0)
        return tuple(idx)

    def _finish(self, b, em, args, s, n, o, ys, acc, flat=None):
        ctx = self.ctx
        out = self.eqn.outputs[0]
        v = b.let(convert(b, acc, out.aval.dtype))
        idx = self._out_index(n, o, ys)
        em.seed(out, idx, v)
        if flat is None:
            e = op("add", op("mul", n, s["o_b"]), op("mul", o, s["o_f"]))
            for d, y in enumerate(ys):
                e = op("add", e, op("mul", y, s[f"o_s{d}"]))
            flat = b.let(e, "o")
        if out in ctx.needed:
            b.store(ctx.output(b, args, out), flat, v)
        self.emit_roots(b, em, args, idx, flat)

    def _acc_dtype(self):
        out = self.eqn.outputs[0].aval.dtype
        return np.dtype(np.float32) if out == np.float16 else out

    # ------------------------------------------------------------------ code
    def codegen(self):
        g = self.geo
        if math.prod(self.shape) == 0:
            return []
        caps = self.ctx.caps
        dt = self.eqn.inputs[0].aval.dtype
        plans = self.plans()
        tiled = (caps.tiling_pays and caps.local_memory and dt != np.bool_ and g.M * g.Og * g.K >= (1 << 16)
                 and min(g.M, g.Og) >= 8 and (caps.max_workgroup_size or 1024) >= self.TX * self.TY
                 and self._tiled_fits())
        if tiled and self._register_tiled():
            return self._register(plans)
        if tiled:
            return [self._tiled(plans)]
        cap = getattr(caps, "max_loop_iterations", None)
        # Loop iterations of one work item of the direct kernel: the window loops and the feature loop.
        iters = g.window * (g.Cg + 1) + sum(math.prod(g.k_sp[:d + 1]) for d in range(g.nsp))
        if cap is not None and iters > cap // 2:
            chunks = -(-g.window * g.Cg // (cap // 4))
            return self._split(plans, chunks)
        rp = min(int(self.ctx.opts.get("conv_positions", 1)), g.out_sp[-1]) if g.nsp else 1
        return [self._direct_blocked(plans, rp) if rp > 1 else self._direct(plans)]

    def _register_tiled(self) -> bool:
        """Whether the register-tiled kernels run (``register_tiles``: the target asks for them; float32 or
        float64 operands; at least ``RN / 2`` output features per group, so that the column panels are
        not mostly padding)."""
        caps = self.ctx.caps
        ldt, rdt = (a.aval.dtype for a in self.eqn.inputs)
        return (getattr(caps, "matmul_tiling", "local") == "register" and np.dtype(np.int64) in caps.dtypes
                and register_dtype(ldt) and rdt == ldt and self.eqn.outputs[0].aval.dtype == ldt
                and self.geo.Og >= RN // 2)

    def _tiled_fits(self) -> bool:
        g = self.geo
        caps = self.ctx.caps
        lim = caps.max_dispatch
        groups = (-(-g.Og // (self.TX * self.RX)), -(-g.M // (self.TY * self.RY)), g.Gt)
        if lim is not None and max(groups) > lim:
            return False
        cap = getattr(caps, "max_loop_iterations", None)
        per_step = ((self.TY * self.RY + self.TX * self.RX) * self.BK // (self.TX * self.TY)
                    + self.BK * (1 + self.RY + self.RX + self.RY * (1 + self.RX)))
        return cap is None or -(-g.K // self.BK) * (per_step + 8) + 64 < cap

    def _begin(self, name):
        """``_kernel_start`` with the kernel's scalar arguments (``{}``)."""
        b, args, tracker, em = self._kernel_start(name)
        return b, args, {}, tracker, em

    # Output features per work item of the direct kernel: one input load serves RO multiply-adds.
    RO = 4

    def _direct(self, plans):
        """One work item per output position and ``RO`` consecutive output features of one group."""
        ctx, g = self.ctx, self.geo
        ro = self.RO if g.Og >= self.RO else 1
        b, args, scalars, tracker, em = self._begin("k")
        lname, rname, s = self._scalars(b, args, scalars, plans)
        nblk = -(-g.Og // ro)
        items = math.prod(self.shape) // g.O * g.Gt * nblk
        gid, gsize, lsize = ctx.gid(b, items, ctx.wg)
        scalars.update(items=items, nblk=nblk, OB=g.Gt * nblk)
        with b.when(op("lt", gid, b.scalar("items"))):
            n, fb, ys = self._coords(b, s, gid, b.scalar("OB"))
            grp = b.let(op("div", fb, b.scalar("nblk")), "grp")
            j0 = b.let(op("mul", op("rem", fb, b.scalar("nblk")), const(ro, INT32)), "j0")
            o0 = b.let(op("add", op("mul", grp, s["Og"]), j0), "o0")
            outs, valid = [], []
            for r in range(ro):
                ok = b.let(op("lt", op("add", j0, const(r, INT32)), s["Og"])) if r else None
                o = b.let(op("add", o0, const(r, INT32))) if r else o0
                outs.append(o)
                valid.append(ok)
            safe = [o if ok is None else b.let(select(ok, o, o0)) for o, ok in zip(outs, valid, strict=True)]
            accs = self._accumulate(b, lname, rname, s, n, grp, safe, ys, None)
            for o, ok, acc in zip(outs, valid, accs, strict=True):
                if ok is None:
                    self._finish(b, em, args, s, n, o, ys, acc, flat=gid if ro == 1 else None)
                else:
                    with b.when(ok):
                        self._finish(b, em, args, s, n, o, ys, acc)
        b.name = kernel_name("conv", tracker.eqns)
        return make_launch(b, args, scalars, gsize, lsize, tracker.eqns, "conv")

    def _direct_blocked(self, plans, rp):
        """The direct kernel with ``rp`` consecutive output positions of the last spatial dimension per work
        item (the scheduler option ``conv_positions``: webgpu on a CPU adapter, where every load is a gather):
        one weight load serves ``rp`` multiply-adds and one input load ``RO``. Positions past the edge read
        the last position's window and are not stored; window taps in padding add nothing (a select, not a
        branch, since the positions' windows differ)."""
        ctx, g = self.ctx, self.geo
        ro = self.RO if g.Og >= self.RO else 1
        b, args, scalars, tracker, em = self._begin("k")
        lname, rname, s = self._scalars(b, args, scalars, plans)
        nblk, last = -(-g.Og // ro), g.nsp - 1
        yblk = -(-g.out_sp[last] // rp)
        items = math.prod(self.shape) // g.O // g.out_sp[last] * yblk * g.Gt * nblk
        gid, gsize, lsize = ctx.gid(b, items, ctx.wg)
        scalars.update(items=items, nblk=nblk, OB=g.Gt * nblk, yblk=yblk)
        with b.when(op("lt", gid, b.scalar("items"))):
            sizes = [None] * len(self.shape)
            sizes[g.ospec[0]], sizes[g.ospec[1]] = s["Nout"], b.scalar("OB")
            for d in range(g.nsp):
                sizes[g.ospec[2 + d]] = b.scalar("yblk") if d == last else s[f"y{d}"]
            coords = _decode(b, gid, sizes, "c")
            n, fb = coords[g.ospec[0]], coords[g.ospec[1]]
            ys = [coords[g.ospec[2 + d]] for d in range(g.nsp)]
            grp = b.let(op("div", fb, b.scalar("nblk")), "grp")
            j0 = b.let(op("mul", op("rem", fb, b.scalar("nblk")), const(ro, INT32)), "j0")
            o0 = b.let(op("add", op("mul", grp, s["Og"]), j0), "o0")
            outs = [o0] + [b.let(op("add", o0, const(r, INT32))) for r in range(1, ro)]
            oks = [None] + [b.let(op("lt", op("add", j0, const(r, INT32)), s["Og"])) for r in range(1, ro)]
            safe = [o if ok is None else b.let(select(ok, o, o0)) for o, ok in zip(outs, oks, strict=True)]
            y0 = b.let(op("mul", ys[last], const(rp, INT32)), "yl")
            ylast = b.let(op("sub", s[f"y{last}"], const(1, INT32)))
            pos = [y0] + [b.let(op("add", y0, const(p, INT32))) for p in range(1, rp)]
            inside = [b.let(op("lt", y, s[f"y{last}"])) for y in pos]
            clamped = [y0] + [b.let(select(ok, y, ylast)) for y, ok in zip(pos[1:], inside[1:], strict=True)]
            accs = self._accumulate_positions(b, lname, rname, s, n, grp, safe, ys[:last], clamped)
            for p, (y, okp) in enumerate(zip(pos, inside, strict=True)):
                for o, ok, acc in zip(outs, oks, accs[p], strict=True):
                    cond = okp if ok is None else b.let(op("land", okp, ok))
                    with b.when(cond):
                        self._finish(b, em, args, s, n, o, ys[:last] + [y], acc)
        b.name = kernel_name("conv", tracker.eqns)
        return make_launch(b, args, scalars, gsize, lsize, tracker.eqns, "conv")

    def _accumulate_positions(self, b, lname, rname, s, n, grp, outs, ys, lasts):
        """``_accumulate`` for output positions ``lasts`` of the last spatial dimension (the others ``ys``,
        shared): ``accs[position][feature]``."""
        g = self.geo
        ldt, rdt = (a.aval.dtype for a in self.eqn.inputs)
        adt = self._acc_dtype()
        last = g.nsp - 1
        lbase, rbases = self._bases(b, s, n, grp, outs)
        accs = [[b.var(adt, const(0, adt)) for _ in outs] for _ in lasts]

        def taps(la, ra):
            with b.loop(const(0, INT32), s[f"k{last}"]) as w:
                oks, las = [], []
                for y in lasts:
                    ok, p = self._position(b, s, last, y, w)
                    oks.append(ok)
                    las.append(b.let(select(ok, op("add", la, op("mul", p, s[f"l_s{last}"])), s["l_off"])))
                ra_w = [b.let(op("add", r, op("mul", w, s[f"r_s{last}"]))) for r in ra]
                with b.loop(const(0, INT32), s["Cg"]) as c:
                    xs = [b.let(convert(b, b.load(lname, op("add", a, op("mul", c, s["l_f"])), ldt), adt))
                          for a in las]
                    for j, rb in enumerate(ra_w):
                        wv = b.let(convert(b, b.load(rname, b.let(op("add", rb, op("mul", c, s["r_i"]))), rdt), adt))
                        for i, (x, ok) in enumerate(zip(xs, oks, strict=True)):
                            prod = b.let(select(ok, b.let(mul_of(b, x, wv)), const(0, adt)))
                            b.assign(accs[i][j], add_of(b, accs[i][j], prod))

        self._window_levels(b, s, ys, last, lbase, rbases, taps)
        return accs

    def _window_levels(self, b, s, ys, depth, la, ra, inner):
        """Loops over the window positions of spatial dimensions ``0 .. depth - 1`` that read an input
        element (output positions ``ys``), then ``inner(input base, weight bases)`` at each."""
        def level(d, la, ra):
            if d == depth:
                inner(la, ra)
                return
            with b.loop(const(0, INT32), s[f"k{d}"]) as w:
                ok, p = self._position(b, s, d, ys[d], w)
                with b.when(ok):
                    level(d + 1, b.let(op("add", la, op("mul", p, s[f"l_s{d}"]))),
                          [b.let(op("add", r, op("mul", w, s[f"r_s{d}"]))) for r in ra])

        level(0, la, ra)

    def _coords(self, b, s, lin, features=None):
        """``n``, ``o`` and the output positions of output element ``lin`` (row-major in the output, whose
        feature dimension has ``features`` entries: ``O``, or the direct kernel's feature blocks)."""
        g = self.geo
        sizes = [None] * len(self.shape)
        sizes[g.ospec[0]], sizes[g.ospec[1]] = s["Nout"], s["O"] if features is None else features
        for d in range(g.nsp):
            sizes[g.ospec[2 + d]] = s[f"y{d}"]
        coords = _decode(b, lin, sizes, "c")
        return coords[g.ospec[0]], coords[g.ospec[1]], [coords[g.ospec[2 + d]] for d in range(g.nsp)]

    def _bases(self, b, s, n, grp, outs):
        """The input's offset of batch ``n`` in group ``grp`` and the weights' offsets of features ``outs``."""
        nb = b.let(op("add", n, op("mul", grp, s["bmul"])))
        lbase = b.let(op("add", op("add", s["l_off"], op("mul", nb, s["l_b"])),
                         op("mul", op("mul", grp, s["fmul"]), s["l_f"])), "lbase")
        return lbase, [b.let(op("add", s["r_off"], op("mul", o, s["r_o"])), "rbase") for o in outs]

    def _accumulate(self, b, lname, rname, s, n, grp, outs, ys, chunk):
        """The sums over the window for output features ``outs`` of group ``grp`` (all of the window, or
        kernel-flat positions ``chunk = (start, stop)``); one accumulator per feature."""
        g = self.geo
        ldt, rdt = (a.aval.dtype for a in self.eqn.inputs)
        adt = self._acc_dtype()
        lbase, rbases = self._bases(b, s, n, grp, outs)
        accs = [b.var(adt, const(0, adt)) for _ in outs]

        def madd(x, ra, c, guard=None):
            xv = b.let(convert(b, x, adt))
            for acc, rb in zip(accs, ra, strict=True):
                w = b.load(rname, b.let(op("add", rb, op("mul", c, s["r_i"]))), rdt)
                prod = b.let(mul_of(b, xv, b.let(convert(b, w, adt))))
                if guard is not None:
                    prod = b.let(select(guard, prod, const(0, adt)))
                b.assign(acc, add_of(b, acc, prod))

        if chunk is not None:
            # One flat loop over (window position, feature) pairs [start, stop): the split kernel.
            start, stop = chunk
            with b.loop(start, stop) as t:
                wc = b.let(op("div", t, s["Cg"]))
                c = b.let(op("rem", t, s["Cg"]))
                ws = _decode(b, wc, [s[f"k{d}"] for d in range(g.nsp)], "w")
                ok, la, ra = None, lbase, list(rbases)
                for d in range(g.nsp):
                    okd, p = self._position(b, s, d, ys[d], ws[d])
                    ok = okd if ok is None else b.let(op("land", ok, okd))
                    la = op("add", la, op("mul", p, s[f"l_s{d}"]))
                    ra = [op("add", r, op("mul", ws[d], s[f"r_s{d}"])) for r in ra]
                la = b.let(select(ok, la, s["l_off"])) if ok is not None else b.let(la)
                x = b.load(lname, op("add", la, op("mul", c, s["l_f"])), ldt)
                madd(x, [b.let(r) for r in ra], c, ok)
            return accs

        def features(la, ra):
            with b.loop(const(0, INT32), s["Cg"]) as c:
                madd(b.load(lname, op("add", la, op("mul", c, s["l_f"])), ldt), ra, c)

        self._window_levels(b, s, ys, g.nsp, lbase, rbases, features)
        return accs

    def _split(self, plans, chunks):
        """Partial sums over ``chunks`` pieces of the contraction (a scratch buffer), then a kernel that
        adds them and runs the epilogue: no work item loops longer than the target allows."""
        ctx, g = self.ctx, self.geo
        total = math.prod(self.shape)
        adt = self._acc_dtype()
        part = ctx.spec(("convpart", id(self)), (chunks, total), adt)
        flat_k = g.window * g.Cg
        step = -(-flat_k // chunks)
        b, args, scalars, tracker, em = self._begin("k")
        lname, rname, s = self._scalars(b, args, scalars, plans)
        gid, gsize, lsize = ctx.gid(b, total * chunks, ctx.wg)
        scalars.update(total=total, step=step, flat_k=flat_k)
        tot = b.scalar("total")
        with b.when(op("lt", gid, op("mul", tot, const(chunks, INT32)))):
            e = b.let(op("rem", gid, tot), "e")
            piece = b.let(op("div", gid, tot), "piece")
            start = b.let(op("mul", piece, b.scalar("step")))
            stop = b.let(op("min", op("add", start, b.scalar("step")), b.scalar("flat_k")))
            n, o, ys = self._coords(b, s, e)
            grp = b.let(op("div", o, s["Og"]), "grp")
            (acc,) = self._accumulate(b, lname, rname, s, n, grp, [o], ys, (start, stop))
            pname = b.buffer(part, adt, True, "part")
            args[pname] = part
            b.store(pname, gid, acc)
        b.name = kernel_name("conv_part", tracker.eqns)
        first = make_launch(b, args, scalars, gsize, lsize, tracker.eqns, "conv")

        b, args, scalars, tracker, em = self._begin("k")
        _, _, s = self._scalars(b, args, scalars, plans)
        gid, gsize, lsize = ctx.gid(b, total, ctx.wg)
        scalars["total"] = total
        with b.when(op("lt", gid, b.scalar("total"))):
            n, o, ys = self._coords(b, s, gid)
            pname = b.buffer(part, adt, False, "part")
            args[pname] = part
            acc = b.var(adt, const(0, adt))
            with b.loop(const(0, INT32), const(chunks, INT32)) as k:
                b.assign(acc, add_of(b, acc, b.load(pname, op("add", op("mul", k, b.scalar("total")), gid), adt)))
            self._finish(b, em, args, s, n, o, ys, acc, flat=gid)
        b.name = kernel_name("conv_sum", tracker.eqns)
        return [first, make_launch(b, args, scalars, gsize, lsize, tracker.eqns, "conv")]

    def _register(self, plans):
        """The register-tiled kernels (``_register_variant``) in the ``CONV_TUNABLE`` choice of this device."""
        g = self.geo
        # (rows of 8 share one run of input where the batch is the input's unit stride: ``nfast``)
        facts = {"rows": g.M, "cols": g.Og, "rows_together": plans[0][2][g.lspec[0]] == 1 and g.Nout % 8 == 0}
        return self.ctx.tuned(CONV_TUNABLE, dict(CONV_DEFAULT), lambda t: self._register_variant(plans, t), facts)

    def _register_variant(self, plans, t):
        """The implicit GEMM with register tiles (``register_tiles``): the weights packed into panels of
        ``rn`` output features ``[group][panel][k][rn]`` (``k`` = (window position, input feature), as the
        tiled kernel's contraction), the input read where it lies, ``rm`` output positions per work item
        each with its own window bounds, ``uk`` input features per loop step (``t``: a ``CONV_TUNABLE``
        choice)."""
        g = self.geo
        dt = self.eqn.inputs[0].aval.dtype
        rm, rn = t["rm"], t["rn"]
        wx, wy, mp, np_ = panels(g.M, g.Og, t)
        # (Packing the input too, as im2col panels, measured 2x slower for a channels-first forward conv and
        # no faster for the weight gradient: the pack's gather costs what the merged loads save.)
        # Where the input features are not its unit stride (a weight gradient: the "features" are the batch,
        # images apart at a power-of-two pitch) the contraction runs features outermost and the innermost
        # window dimension innermost, UK positions per step: consecutive steps read neighbouring input
        # elements. Features innermost, each step read RM*UK elements a whole image apart, which all fall into
        # one cache set (the 32x32x32 weight gradient: ~3x slower).
        features_outer = plans[0][2][g.lspec[1]] != 1 and g.nsp >= 1 and g.k_sp[-1] >= UK
        pack_launch, pack = (self._pack_features_outer if features_outer else self._pack_weights)(plans, np_, g.K, rn)
        b, args, scalars, tracker, em = self._begin("k")
        lname, rname, s = self._scalars(b, args, scalars, plans)
        pname = b.buffer(pack, dt, False, "wp")
        args[pname] = pack
        scalars.update(M=g.M, K=g.K, Np=np_)
        M = b.scalar("M")
        cp, rp, grp = Special("global_id", 0), Special("global_id", 1), b.let(Special("group_id", 2), "grp")
        lgrp = b.let(op("add", s["l_off"], op("add", op("mul", op("mul", grp, s["bmul"]), s["l_b"]),
                                                   op("mul", op("mul", grp, s["fmul"]), s["l_f"]))), "lgrp")
        # The input feature stride at its value when it is 1 (a channels-last input): the loads of
        # consecutive features then sit at constant offsets, which the device compiler merges.
        lf = const(1, INT64) if plans[0][2][g.lspec[1]] == 1 else Cast(s["l_f"], INT64)
        # Rows run over (batch, positions), the batch outermost; where the batch is the input's unit stride
        # (a weight gradient: the input's features are the "batch") and a multiple of RM, the batch runs
        # innermost instead, so that a work item's RM rows are consecutive elements at the same positions
        # (one bounds test, loads at constant offsets that merge).
        nfast = plans[0][2][g.lspec[0]] == 1 and g.Nout % rm == 0
        order = self._row_order(nfast, s)
        rows = self._register_rows(b, s, rp, M, lgrp, nfast, order, rm)
        wbase = b.let(Cast(op("mul", op("add", op("mul", grp, b.scalar("Np")), cp),
                              op("mul", b.scalar("K"), const(rn, INT32))), INT64), "wbase")
        accs = [[b.var(dt, const(0, dt)) for _ in range(rn)] for _ in range(rm)]
        if features_outer:
            self._features_outer(b, s, lname, pname, rows, nfast, wbase, accs, dt, t["uk"])
        else:
            self._features_inner(b, s, lname, pname, rows, nfast, wbase, accs, dt, lf, t["uk"])
        self._register_store(b, em, args, s, M, order, accs, dt, cp, rp, grp)
        b.name = kernel_name("conv_reg", tracker.eqns)
        main = make_launch(b, args, scalars, (np_, mp, g.Gt), (wx, wy, 1), tracker.eqns, "conv", fixed_local=True)
        return [pack_launch, main]

    @staticmethod
    def _register_rows(b, s, rp, M, lgrp, nfast, order, rm):
        """``(input offset, positions)`` of the work item's ``rm`` output rows (a row past the end at row 0)."""
        rows = []
        for i in range(rm):
            gm = b.let(op("add", op("mul", rp, const(rm, INT32)), const(i, INT32)), "gm")
            if nfast and i:
                rows.append((op("add", rows[0][0], const(i, INT32)), rows[0][1]))
                continue
            n, ys = order(_decode(b, b.let(select(op("lt", gm, M), gm, const(0, INT32))), order.sizes, "m"))
            rows.append((b.let(op("add", lgrp, op("mul", n, s["l_b"])), "lrow"), ys))
        return rows

    def _features_inner(self, b, s, lname, pname, rows, nfast, wbase, accs, dt, lf, uk):
        """The register kernel's contraction with the input features innermost: a loop per window dimension
        (each row's bounds tested), then the features, ``uk`` per step and a tail one by one."""
        g = self.geo
        c0 = const(0, INT32)
        rm, rn = len(accs), len(accs[0])
        cmain = g.Cg // uk * uk

        def taps(d, bases, oks, t):
            if d == g.nsp:
                features(bases, oks, t)
                return
            with b.loop(c0, s[f"k{d}"]) as w:
                nb, no = self._row_positions(b, s, rows, nfast, d, w, bases, oks)
                taps(d + 1, nb, no, b.let(op("add", op("mul", t, s[f"k{d}"]), w)) if d else w)

        def features(bases, oks, t):
            # Rows outside the input read element l_off (any valid one) and multiply by zero.
            safe = [b.let(Cast(select(ok, base, s["l_off"]), INT64)) if ok is not None else
                    b.let(Cast(base, INT64)) for base, ok in zip(bases, oks, strict=True)]
            if nfast:  # one bounds test for the rm rows, at constant offsets from row 0
                safe = [safe[0]] + [b.let(op("add", safe[0], const(i, INT64))) for i in range(1, rm)]
            zero = const(0, dt)
            kt = b.let(op("mul", t, const(g.Cg, INT32)))

            def step(c, width):
                wk = b.let(op("add", wbase, Cast(op("mul", op("add", kt, c), const(rn, INT32)), INT64)))
                cl = b.let(op("mul", Cast(c, INT64), lf))

                def load_a(u, i):
                    x = b.load(lname, op("add", safe[i], op("add", cl, op("mul", const(u, INT64), lf))), dt)
                    return x if oks[i] is None else b.let(select(oks[i], x, zero))

                register_product(b, load_a, lambda u, j: b.load(pname, op("add", wk, const(u * rn + j, INT64)), dt),
                                 width, accs)

            if cmain:
                with b.loop(c0, const(cmain, INT32), const(uk, INT32)) as c:
                    step(c, uk)
            if cmain < g.Cg:
                with b.loop(const(cmain, INT32), const(g.Cg, INT32)) as c:
                    step(c, 1)

        taps(0, [r[0] for r in rows], [None] * rm, c0)

    def _register_store(self, b, em, args, s, M, order, accs, dt, cp, rp, grp):
        """The register tile's results (those inside the output) through the epilogue."""
        row0 = b.let(op("mul", rp, const(len(accs), INT32)), "row0")
        col0 = b.let(op("mul", cp, const(len(accs[0]), INT32)), "col0")
        ogrp = b.let(op("mul", grp, s["Og"]), "ogrp")
        with store_loop(b, accs, dt) as (i, j, v):
            gm = b.let(op("add", row0, i), "gm")
            gj = b.let(op("add", col0, j), "gj")
            with b.when(op("land", op("lt", gm, M), op("lt", gj, s["Og"]))):
                n, ys = order(_decode(b, gm, order.sizes, "m"))
                self._finish(b, em, args, s, n, b.let(op("add", ogrp, gj), "oc"), ys, v)

    def _features_outer(self, b, s, lname, pname, rows, nfast, wbase, accs, dt, uk):
        """The register kernel's contraction with the input features outermost: for each feature, the window
        positions in row-major order, the innermost dimension ``uk`` positions per step (a tail one by one);
        the packed weights in the same order (``_pack_features_outer``). Where the ``rm`` rows share their
        positions (``nfast``) and the input is not dilated, an outer window position outside the input is
        skipped by a branch and the innermost loop runs over the positions inside only (its bounds computed
        once), so the loop body tests nothing: ~1.3x faster than a test per position."""
        g = self.geo
        c0 = const(0, INT32)
        zero = const(0, dt)
        last = g.nsp - 1
        rm, rn = len(accs), len(accs[0])
        ksizes = [s[f"k{d}"] for d in range(g.nsp)]
        win = b.let(_window_size(ksizes), "win")

        def step(w, width, bases, oks, t):
            # k = (feature, window position): the packed weights of positions t + w + u (t: the feature's
            # first k and the outer window dimensions' share).
            wk = b.let(op("add", wbase, Cast(op("mul", op("add", t, w), const(rn, INT32)), INT64)))
            addrs = []
            for u in range(width):
                nb, no = self._row_positions(b, s, rows, nfast, last, op("add", w, const(u, INT32)) if u else w,
                                             bases, oks)
                row = []
                for i in range(rm):
                    if nfast and i:
                        row.append((b.let(op("add", row[0][0], const(i, INT64))), row[0][1]))
                        continue
                    row.append((b.let(Cast(select(no[i], nb[i], s["l_off"]), INT64)), no[i]))
                addrs.append(row)

            def load_a(u, i):
                addr, ok = addrs[u][i]
                return b.let(select(ok, b.load(lname, addr, dt), zero))

            register_product(b, load_a, lambda u, j: b.load(pname, op("add", wk, const(u * rn + j, INT64)), dt),
                             width, accs)

        if nfast and not g.dilated:
            self._features_outer_ranged(b, s, lname, pname, rows, wbase, accs, dt, win, uk)
            return

        def taps(d, bases, oks, t, ck):
            if d == last:
                kl = ksizes[last]
                tl = b.let(op("add", ck, op("mul", t, kl)) if d else ck)
                main = b.let(op("mul", op("div", kl, const(uk, INT32)), const(uk, INT32)), "kmain")
                with b.loop(c0, main, const(uk, INT32)) as w:
                    step(w, uk, bases, oks, tl)
                with b.loop(main, kl) as w:
                    step(w, 1, bases, oks, tl)
                return
            with b.loop(c0, ksizes[d]) as w:
                nb, no = self._row_positions(b, s, rows, nfast, d, w, bases, oks)
                taps(d + 1, nb, no, b.let(op("add", op("mul", t, ksizes[d]), w)) if d else w, ck)

        with b.loop(c0, s["Cg"]) as c:
            fbase = b.let(op("mul", c, s["l_f"]), "fb")
            base0 = [b.let(op("add", r[0], fbase)) for r in rows]
            taps(0, base0, [None] * rm, c0, b.let(op("mul", c, win), "ck"))

    def _features_outer_ranged(self, b, s, lname, pname, rows, wbase, accs, dt, win, uk):
        """``_features_outer`` for rows at the same positions (consecutive elements) of an undilated input:
        branches for the outer window dimensions, the innermost loop over its in-bounds range."""
        g = self.geo
        c0 = const(0, INT32)
        last = g.nsp - 1
        ys = rows[0][1]
        ksizes = [s[f"k{d}"] for d in range(g.nsp)]

        def cdiv(a, d):
            # ceil(a / d) for d > 0 (C's division truncates: that is the ceiling where a <= 0)
            return select(op("gt", a, c0), op("div", op("sub", op("add", a, d), const(1, INT32)), d), op("div", a, d))

        def step(w, width, base, t):
            wk = b.let(op("add", wbase, Cast(op("mul", op("add", t, w), const(len(accs[0]), INT32)), INT64)))
            q0 = b.let(op("add", op("sub", op("mul", ys[last], s[f"st{last}"]), s[f"pl{last}"]),
                              op("mul", w, s[f"rd{last}"])))
            starts = [b.let(Cast(op("add", base, op("mul", op("add", q0, op("mul", const(u, INT32), s[f"rd{last}"])),
                                                    s[f"l_s{last}"])), INT64)) for u in range(width)]
            register_product(b, lambda u, i: b.load(lname, op("add", starts[u], const(i, INT64)), dt),
                             lambda u, j: b.load(pname, op("add", wk, const(u * len(accs[0]) + j, INT64)), dt),
                             width, accs)

        def taps(d, base, t, ck):
            if d == last:
                # The positions w with 0 <= y*st - pl + w*rd < in: [lo, hi), computed once.
                off = b.let(op("sub", op("mul", ys[d], s[f"st{d}"]), s[f"pl{d}"]))
                rd = s[f"rd{d}"]
                lo = b.let(select(op("gt", off, c0), c0, cdiv(op("neg", off), rd)), "wlo")
                hi0 = b.let(cdiv(op("sub", s[f"in{d}"], off), rd))
                hi1 = b.let(select(op("lt", hi0, ksizes[d]), hi0, ksizes[d]))
                hi = b.let(select(op("lt", hi1, lo), lo, hi1), "whi")
                main = b.let(op("add", lo, op("mul", op("div", op("sub", hi, lo), const(uk, INT32)),
                                              const(uk, INT32))), "wmain")
                tl = b.let(op("add", ck, op("mul", t, ksizes[d])) if d else ck)
                with b.loop(lo, main, const(uk, INT32)) as w:
                    step(w, uk, base, tl)
                with b.loop(main, hi) as w:
                    step(w, 1, base, tl)
                return
            with b.loop(c0, ksizes[d]) as w:
                ok, p = self._position(b, s, d, ys[d], w)
                with b.when(ok):
                    taps(d + 1, b.let(op("add", base, op("mul", p, s[f"l_s{d}"]))),
                         b.let(op("add", op("mul", t, ksizes[d]), w)) if d else w, ck)

        with b.loop(c0, s["Cg"]) as c:
            taps(0, b.let(op("add", rows[0][0], op("mul", c, s["l_f"]))), c0, b.let(op("mul", c, win), "ck"))

    def _row_order(self, nfast, s):
        """The register kernel's row order: a function from a row's decoded coordinates to ``(n, ys)``, with
        ``.sizes`` the sizes to decode by (batch outermost, or innermost when ``nfast``)."""
        ysizes = [s[f"y{d}"] for d in range(self.geo.nsp)]

        def order(coords):
            return (coords[-1], coords[:-1]) if nfast else (coords[0], coords[1:])

        order.sizes = [*ysizes, s["Nout"]] if nfast else [s["Nout"], *ysizes]
        return order

    def _pack_weights(self, plans, np_, kp, rn):
        """``(launch, spec)``: a copy kernel writing the weights as zero-padded panels ``[group][np_][K][rn]``
        into a scratch buffer, and the buffer's spec."""
        g = self.geo
        ctx = self.ctx
        dt = self.eqn.inputs[1].aval.dtype
        spec = ctx.spec(("convpack", id(self), rn, np_), (g.Gt, np_, kp, rn), dt)
        b, args, scalars, tracker, em = self._begin("k")
        _, rname, s = self._scalars(b, args, scalars, plans)
        total = g.Gt * np_ * kp * rn
        gid, gsize, lsize = ctx.gid(b, total, ctx.wg)
        with b.when(op("lt", gid, const(total, INT32))):
            # (Local names must not meet the scalars': a local "k1" hid the kernel size k1.)
            c, kq, grp, j = panel_coords(b, gid, rn, kp, np_, ("pc", "pk", "pp", "pg"))
            inside = b.let(op("lt", kq, const(g.K, INT32)))
            k = b.let(select(inside, kq, const(0, INT32)))
            ok = b.let(op("land", op("lt", j, s["Og"]), inside))
            o = b.let(op("add", op("mul", grp, s["Og"]), select(ok, j, const(0, INT32))))
            ws = _decode(b, b.let(op("div", k, s["Cg"])), [s[f"k{d}"] for d in range(g.nsp)], "w") if g.nsp else []
            addr = op("add", s["r_off"], op("add", op("mul", o, s["r_o"]), op("mul", op("rem", k, s["Cg"]), s["r_i"])))
            for d in range(g.nsp):
                addr = op("add", addr, op("mul", ws[d], s[f"r_s{d}"]))
            w = b.load(rname, b.let(addr), dt)
            out = b.buffer(spec, dt, True, "out")
            args[out] = spec
            b.store(out, gid, b.let(select(ok, w, const(0, dt))))
        b.name = "conv_pack"
        return make_launch(b, args, scalars, gsize, lsize, [], "copy"), spec

    def _pack_features_outer(self, plans, np_, kp, rn):
        """``(launch, spec)``: the weights as ``_pack_weights`` packs them, with the contraction index ``k`` =
        (input feature, window position) (the register kernel's ``_features_outer`` order). One work item per
        (k, panel), in the source's order, copying the panel's ``rn`` output features: consecutive items read
        consecutive features (in panel order each of the ``np_`` passes over this operand, a weight gradient's
        whole output gradient, read ``rn`` of every row's features), and the divisors are constants (with the
        sizes as scalar arguments the integer divisions cost ~1/4 of the weight gradient's time)."""
        g = self.geo
        ctx = self.ctx
        dt = self.eqn.inputs[1].aval.dtype
        spec = ctx.spec(("convpack", id(self), rn, np_), (g.Gt, np_, kp, rn), dt)
        b, args, scalars, tracker, em = self._begin("k")
        _, rname, s = self._scalars(b, args, scalars, plans)
        total = g.Gt * np_ * kp
        gid, gsize, lsize = ctx.gid(b, total, ctx.wg)
        out = b.buffer(spec, dt, True, "out")
        args[out] = spec
        with b.when(op("lt", gid, const(total, INT32))):
            # (Local names must not meet the scalars': a local "k1" hid the kernel size k1.)
            pn = b.let(op("rem", gid, const(np_, INT32)), "pp")
            kq = b.let(op("rem", op("div", gid, const(np_, INT32)), const(kp, INT32)), "pk")
            grp = b.let(op("div", gid, const(np_ * kp, INT32)), "pg")
            inside = b.let(op("lt", kq, const(g.K, INT32)))
            k = b.let(select(inside, kq, const(0, INT32)))
            ci = b.let(op("div", k, const(g.window, INT32)))
            ws = _decode(b, b.let(op("rem", k, const(g.window, INT32))), [const(v, INT32) for v in g.k_sp], "w")
            base = op("add", s["r_off"], op("mul", ci, s["r_i"]))
            for d in range(g.nsp):
                base = op("add", base, op("mul", ws[d], s[f"r_s{d}"]))
            j0 = b.let(op("mul", pn, const(rn, INT32)), "pj")
            base = b.let(op("add", base, op("mul", op("add", op("mul", grp, s["Og"]), j0), s["r_o"])))
            slot = b.let(op("mul", op("add", op("mul", op("add", op("mul", grp, const(np_, INT32)), pn),
                                                         const(kp, INT32)), kq), const(rn, INT32)))
            for c in range(rn):
                ok = b.let(op("land", op("lt", op("add", j0, const(c, INT32)), s["Og"]), inside))
                addr = b.let(select(ok, op("add", base, op("mul", const(c, INT32), s["r_o"])), s["r_off"]))
                w = b.load(rname, addr, dt)
                b.store(out, op("add", slot, const(c, INT32)), b.let(select(ok, w, const(0, dt))))
        b.name = "conv_pack_fo"
        return make_launch(b, args, scalars, gsize, lsize, [], "copy"), spec


    def _tiled(self, plans):
        """The implicit-GEMM kernel: ``A`` and ``B`` tiles of each group's product in local memory."""
        g = self.geo
        TX, TY, RX, RY, BK = self.TX, self.TY, self.RX, self.RY, self.BK
        BM, BN = TY * RY, TX * RX
        b, args, scalars, tracker, em = self._begin("k")
        lname, rname, s = self._scalars(b, args, scalars, plans)
        scalars.update(M=g.M, K=g.K)
        M, K = b.scalar("M"), b.scalar("K")
        adt = self._acc_dtype()
        c0 = const(0, INT32)
        tx, ty = Special("local_id", 0), Special("local_id", 1)
        grp = b.let(Special("group_id", 2), "grp")
        row0 = b.let(op("mul", Special("group_id", 1), const(BM, INT32)), "row0")
        col0 = b.let(op("mul", Special("group_id", 0), const(BN, INT32)), "col0")
        tid = b.let(op("add", op("mul", ty, const(TX, INT32)), tx), "tid")
        lgrp = b.let(op("add", s["l_off"], op("add", op("mul", op("mul", grp, s["bmul"]), s["l_b"]),
                                                   op("mul", op("mul", grp, s["fmul"]), s["l_f"]))), "lgrp")
        ogrp = b.let(op("mul", grp, s["Og"]), "ogrp")
        tiles = tile_arrays(b, adt, TILE)
        As, Bs, acc = tiles[:3]
        with b.loop(c0, K, const(BK, INT32)) as k0:
            with b.loop(tid, const(BM * BK, INT32), const(TX * TY, INT32)) as l:
                self._tile_a(b, s, lname, As, l, k0, row0, lgrp, M, K, adt)
            with b.loop(tid, const(BK * BN, INT32), const(TX * TY, INT32)) as l:
                self._tile_b(b, s, rname, Bs, l, k0, col0, ogrp, K, adt)
            b.barrier()
            tile_product(b, tiles, adt, tx, ty, TILE)
            b.barrier()
        with b.loop(c0, const(RY, INT32)) as yy:
            with b.loop(c0, const(RX, INT32)) as xx:
                gm = b.let(op("add", row0, op("add", op("mul", ty, const(RY, INT32)), yy)), "gm")
                gj = b.let(op("add", col0, op("add", tx, op("mul", xx, const(TX, INT32)))), "gj")
                with b.when(op("land", op("lt", gm, M), op("lt", gj, s["Og"]))):
                    v = b.load(acc, op("add", op("mul", yy, const(RX, INT32)), xx), adt, "private")
                    yn = _decode(b, gm, [s["Nout"], *(s[f"y{d}"] for d in range(g.nsp))], "m")
                    o = b.let(op("add", ogrp, gj), "oc")
                    self._finish(b, em, args, s, yn[0], o, yn[1:], v)
        b.name = kernel_name("conv_tiled", tracker.eqns)
        gsize = (-(-g.Og // BN) * TX, -(-g.M // BM) * TY, g.Gt)
        return make_launch(b, args, scalars, gsize, (TX, TY, 1), tracker.eqns, "conv", fixed_local=True)

    def _tile_a(self, b, s, lname, As, l, k0, row0, lgrp, M, K, adt):
        """Element ``l`` of the tiled kernel's ``A`` tile: the input under output row ``row0 + l / BK`` at
        contraction step ``k0 + l % BK`` (window position, input feature), zero outside the input."""
        g, BM, BK = self.geo, self.TY * self.RY, self.BK
        c0 = const(0, INT32)
        r = b.let(op("div", l, const(BK, INT32)))
        c = b.let(op("rem", l, const(BK, INT32)))
        gm = b.let(op("add", row0, r))
        gk = b.let(op("add", k0, c))
        inside = b.let(op("land", op("lt", gm, M), op("lt", gk, K)))
        gm_c = b.let(select(op("lt", gm, M), gm, c0))
        gk_c = b.let(select(op("lt", gk, K), gk, c0))
        yn = _decode(b, gm_c, [s["Nout"], *(s[f"y{d}"] for d in range(g.nsp))], "m")
        wc = b.let(op("div", gk_c, s["Cg"]))
        ci = b.let(op("rem", gk_c, s["Cg"]))
        ws = _decode(b, wc, [s[f"k{d}"] for d in range(g.nsp)], "w") if g.nsp else []
        ok = inside
        addr = op("add", lgrp, op("add", op("mul", yn[0], s["l_b"]), op("mul", ci, s["l_f"])))
        for d in range(g.nsp):
            okd, p = self._position(b, s, d, yn[1 + d], ws[d])
            ok = b.let(op("land", ok, okd))
            addr = op("add", addr, op("mul", p, s[f"l_s{d}"]))
        addr = b.let(select(ok, addr, s["l_off"]))
        x = b.let(convert(b, b.load(lname, addr, self.eqn.inputs[0].aval.dtype), adt))
        b.store(As, op("add", op("mul", c, const(BM, INT32)), r), select(ok, x, const(0, adt)), space="local")

    def _tile_b(self, b, s, rname, Bs, l, k0, col0, ogrp, K, adt):
        """Element ``l`` of the tiled kernel's ``B`` tile: the weight of output feature ``col0 + l % BN`` at
        contraction step ``k0 + l / BN``, zero past the ends."""
        g, BN = self.geo, self.TX * self.RX
        c0 = const(0, INT32)
        r = b.let(op("div", l, const(BN, INT32)))
        c = b.let(op("rem", l, const(BN, INT32)))
        gk = b.let(op("add", k0, r))
        gj = b.let(op("add", col0, c))
        ok = b.let(op("land", op("lt", gk, K), op("lt", gj, s["Og"])))
        gk_c = b.let(select(op("lt", gk, K), gk, c0))
        gj_c = b.let(select(op("lt", gj, s["Og"]), gj, c0))
        wc = b.let(op("div", gk_c, s["Cg"]))
        ci = b.let(op("rem", gk_c, s["Cg"]))
        ws = _decode(b, wc, [s[f"k{d}"] for d in range(g.nsp)], "w") if g.nsp else []
        addr = op("add", s["r_off"], op("add", op("mul", op("add", ogrp, gj_c), s["r_o"]),
                                        op("mul", ci, s["r_i"])))
        for d in range(g.nsp):
            addr = op("add", addr, op("mul", ws[d], s[f"r_s{d}"]))
        y = b.let(convert(b, b.load(rname, b.let(addr), self.eqn.inputs[1].aval.dtype), adt))
        b.store(Bs, op("add", op("mul", r, const(BN, INT32)), c), select(ok, y, const(0, adt)), space="local")


#: What ``schedule`` collects into its tables ``GROUPS`` and ``OPERAND_VIEWS``.
GROUPS = {CONV: ConvGroup}
OPERAND_VIEWS = {CONV: strided_view}
