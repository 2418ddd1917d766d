"""Kernels of the linear-algebra primitives: ``cholesky``, ``triangular_solve`` and ``lu``.

Each runs one work-group per matrix of the batch (per block of right-hand sides for a solve): the
matrix lives in the output buffer, the work-group walks its columns (or rows) in order, and its
work items split each step's row or element updates, with a work-group barrier over global
memory between the phases of a step. The algorithms (Golub & Van Loan, *Matrix Computations*,
4th ed.: 4.2 and 3.1, 3.4):

- ``cholesky``: the left-looking (Cholesky-Crout) column form. Column ``j`` is
  ``s_i = A[i, j] - sum_{k<j} L[i, k] L[j, k]`` for ``i >= j`` (one dot product per row, rows split
  over the work items), then ``L[j, j] = sqrt(s_j)`` and ``L[i, j] = s_i / L[j, j]``. The upper
  triangle is zero. A matrix that is not positive definite gives NaN in its whole lower triangle (the
  upper stays zero), as JAX: a failing pivot ``s_j <= 0`` is stored as NaN, which reaches
  ``L[n-1, n-1]`` through the later dot products, and the last launch fills the lower triangle of a
  matrix whose last diagonal element is NaN with NaN.
- ``triangular_solve``: the column-oriented substitution on ``op(a) x = b`` (a right-side solve
  ``x op(a) = b`` is the left-side solve ``op(a)^T x^T = b^T``, read through strides). Step ``s``
  subtracts the finished row ``i`` of ``x`` from every remaining row, ``x[q] -= T[q, i] x[i]``, and
  the row that becomes finished is divided by its diagonal in the same pass, so a step is one phase
  and one barrier. Right-hand sides are split into blocks, each its own work-group.
- ``lu``: right-looking Gaussian elimination with partial pivoting (LAPACK's ``getf2``): the pivot is
  the first largest ``|a[i, k]|`` (a tree reduction in local memory), rows ``k`` and ``p`` swap in
  every column, the multipliers are divided by the pivot (not where the pivot is zero: the column
  is left as it is, as LAPACK), and the trailing block gets the rank-one update, its elements split
  over the work items. ``pivots[k] = p`` and the permutation follow the same swaps.

Large matrices stay correct: every loop is counted, and a device with ``max_loop_iterations``
(Mesa's lavapipe stops an invocation after 65,535 iterations in all, silently) gets the steps in
several launches of the same kernel (scalar arguments ``s0``, ``s1``: the steps it runs), each within
half the limit; the matrix waits in the output buffer between launches. Where even one step would
pass the limit, ``oversize_reason`` says so and the backend leaves the equation to numpy.

Only real ``float32`` (and ``float64`` where the device has it) run here; complex operands fall back
(``facts.complex_ok`` is false for these primitives).
"""

from __future__ import annotations

import math

import numpy as np

from fnarray.core import linalg as LA
from fnarray.lowering.kernels.builder import KernelBuilder
from fnarray.lowering.kernels.groups.base import Group, Launch, Tracker, analyse_val, index_vars, make_launch
from fnarray.lowering.kernels.index import ix_const, ix_data, unravel
from fnarray.lowering.kernels.ir import INT32, Barrier, BufferParam, Let, Load, Special, Sym, const
from fnarray.lowering.kernels.rules import op, select

__all__ = ["GROUPS", "PRIMITIVES", "oversize_reason"]

_MAX_WG = 256          # the browsers' default maxComputeInvocationsPerWorkgroup


def _wg(caps, items):
    """Work items per group for ``items`` parallel updates per step: 16, 64 or 256 (within the device's
    limit), so that kernels of similar sizes share one source (sizes are scalar arguments) and PoCL
    compiles fewer of them."""
    cap = min(_MAX_WG, caps.max_workgroup_size or _MAX_WG)
    cap = 1 << (cap.bit_length() - 1)
    want = 16 if items <= 16 else 64 if items <= 64 else 256
    return min(cap, want)


def _cdiv(a, b):
    return -(-a // b)


def _read(b, name, index, dtype, space="global"):
    """A fresh local holding a load: never shared with an equal load elsewhere (the buffers change)."""
    sym = Sym(b.fresh("ld"), dtype)
    b.emit(Let(sym.name, Load(space, name, index, dtype)))
    return sym


def _i(v):
    return const(v, INT32)


def _add(*xs):
    out = xs[0]
    for x in xs[1:]:
        out = op("add", out, x)
    return out


def _mul(a, c):
    return op("mul", a, c)


def _chunks(costs, first, last, budget):
    """Step ranges ``[(s0, s1), ...]`` covering ``len(costs)`` steps, each launch's loop iterations
    (``first`` more in the first launch, ``last`` more in the last) within ``budget``; ``None`` for no
    limit: one launch."""
    n = len(costs)
    if budget is None:
        return [(0, n)]
    out, start, acc = [], 0, first
    for s, c in enumerate(costs):
        if acc + c > budget and s > start:
            out.append((start, s))
            start, acc = s, 0
        acc += c
    if acc + last > budget and start < n:
        out.append((start, n))
        out.append((n, n))    # the closing pass alone
    else:
        out.append((start, n))
    return out


def _budget(caps):
    cap = getattr(caps, "max_loop_iterations", None)
    return None if cap is None else cap // 2


class _LinalgGroup(Group):
    """One kernel launched over the steps of a factorisation, a work-group per matrix (or block)."""

    kind = "linalg"

    def __init__(self, ctx, eqn):
        super().__init__(ctx, eqn.outputs[0].aval.shape)
        self.eqn = eqn
        self.products.extend(eqn.outputs)

    def analyse(self):
        analyse_val(self, *self.eqn.inputs)

    def _start(self, name, groups, wg):
        """A builder, its emitter and the group index (``g``), launch sizes and the guard of extra groups."""
        ctx = self.ctx
        b = KernelBuilder(name)
        args: dict = {}
        tracker = Tracker(ctx)
        tracker.add(self.eqn)
        em = ctx.emitter(b, args=args, tracker=tracker)
        self._scalars = {}
        lim = ctx.caps.max_dispatch
        if lim is None or groups <= lim:
            g, gsize, lsize, guard = Special("group_id", 0), (groups * wg,), (wg,), None
        else:
            rows = _cdiv(groups, lim)
            g = b.let(_add(Special("group_id", 0), _mul(Special("group_id", 1), _i(lim))), "grp")
            gsize, lsize, guard = (lim * wg, rows), (wg, 1), op("lt", g, _i(groups))
        return b, args, tracker, em, g, gsize, lsize, guard

    def _size(self, b, name, value):
        """A size as a scalar argument (one compiled kernel serves every shape of its work-group size)."""
        self._scalars[name] = int(value)
        return b.scalar(name)

    def _launches(self, b, args, gsize, lsize, tracker, ranges):
        scalars = dict(self._scalars, s0=ranges[0][0], s1=ranges[0][1])
        launch = make_launch(b, args, scalars, gsize, lsize, tracker.eqns, "linalg", fixed_local=True)
        out = [launch]
        names = [p.name for p in launch.kernel.params]
        for s0, s1 in ranges[1:]:
            vals = {"s0": s0, "s1": s1}
            argv = [vals.get(n, a) if not isinstance(p, BufferParam) else a
                    for n, p, a in zip(names, launch.kernel.params, launch.args, strict=True)]
            out.append(Launch(launch.kernel, argv, gsize, lsize, launch.eqns, "linalg"))
        return out


def _batch_index(g, batch):
    """The ``Ix`` tuple of the batch coordinates of flat group ``g``."""
    nb = math.prod(batch)
    if not batch:
        return ()
    return unravel(ix_data(g, 0, nb - 1) if nb > 1 else ix_const(0), batch)


def _dim(expr, n):
    return ix_data(expr, 0, n - 1) if n > 1 else ix_const(0)


# ---------------------------------------------------------------------------- cholesky


def _cholesky_costs(n, wg):
    steps = [_cdiv(n - j, wg) * (j + 1) + _cdiv(n - j - 1, wg) + 1 for j in range(n)]
    return steps, _cdiv(n * n, wg), _cdiv(n * n, wg)


class _Frame:
    """What the steps of one linalg kernel share: its builder, work-group size, element dtype, local id and
    ``at(i, j)``, the flat position of element ``(i, j)`` of the work-group's matrix (a kernel's steps may add
    their own fields: buffers, sizes, accessors)."""

    def __init__(self, b, wg, dt, lid, at):
        self.b, self.wg, self.dt, self.lid, self.at = b, wg, dt, lid, at


class _CholeskyGroup(_LinalgGroup):
    def codegen(self):
        ctx = self.ctx
        x = self.eqn.inputs[0]
        out = self.eqn.outputs[0]
        shape = x.aval.shape
        n = shape[-1]
        batch = shape[:-2]
        G = math.prod(batch)
        if G * n == 0:
            return []
        dt = out.aval.dtype
        wg = _wg(ctx.caps, n)
        b, args, tracker, em, g, gsize, lsize, guard = self._start("cholesky", G, wg)
        nn, nsq, nlast = self._size(b, "n", n), self._size(b, "nn", n * n), self._size(b, "last", n * n - 1)
        s0, s1 = b.scalar("s0"), b.scalar("s1")
        lid = Special("local_id", 0)
        L = ctx.output(b, args, out)
        diag = b.array("local", dt, 1, "diag")
        body = b.when(guard) if guard is not None else _nullscope()
        with body:
            base = b.let(_mul(g, nsq), "base")
            bidx = _batch_index(g, batch)

            def at(i, j):
                return b.let(_add(base, _mul(i, nn), j))

            f = _Frame(b, wg, dt, lid, at)
            with b.when(op("eq", s0, _i(0))):
                self._load_lower(f, em, L, base, bidx, n, nn, nsq)
            b.emit(Barrier("global"))
            with b.loop(s0, s1) as j:
                self._column(f, L, diag, j, nn)
            # The last launch: a failed pivot anywhere made L[n-1, n-1] NaN; the lower triangle is NaN then.
            with b.when(op("eq", s1, nn)):
                self._nan_fill(f, L, base, nlast, nn, nsq)
        steps, first, last = _cholesky_costs(n, wg)
        ranges = _chunks(steps, first, last, _budget(ctx.caps))
        return self._launches(b, args, gsize, lsize, tracker, ranges)

    def _load_lower(self, f, em, L, base, bidx, n, nn, nsq):
        """The first launch: the input's lower triangle (and zeros above it) into ``L``."""
        b, dt, x = f.b, f.dt, self.eqn.inputs[0]
        direct = self.ctx.in_buffer(x)
        with b.loop(f.lid, nsq, _i(f.wg)) as t:
            i = b.let(op("div", t, nn), "i")
            j = b.let(op("rem", t, nn), "j")
            pos = b.let(_add(base, t))
            if direct:   # the input's own buffer, row-major: the same flat position
                v = _read(b, em.buffer_of(x), pos, dt)
            else:
                v = em.val(x, bidx + (_dim(i, n), _dim(j, n)))
            b.store(L, pos, select(op("le", j, i), v, const(0, dt)))

    def _column(self, f, L, diag, j, nn):
        """Step ``j``: column ``j`` of ``L`` (the rows' dot products, then the pivot's square root divides)."""
        b, dt, lid, wg, at = f.b, f.dt, f.lid, f.wg, f.at
        zero = const(0, dt)
        # Phase 1: s_i = A[i, j] - L[i, :j] . L[j, :j] for the rows i >= j.
        with b.loop(b.let(_add(j, lid)), nn, _i(wg)) as i:
            acc = b.var(dt, _read(b, L, at(i, j), dt))
            with b.loop(_i(0), j) as k:
                lik = _read(b, L, at(i, k), dt)
                ljk = _read(b, L, at(j, k), dt)
                b.assign(acc, op("sub", acc, b.let(op("mul", lik, ljk))))
            with b.when(op("eq", i, j)):
                b.store(diag, _i(0), acc, space="local")
            with b.when(op("ne", i, j)):
                b.store(L, at(i, j), acc)
        b.emit(Barrier("global"))
        # Phase 2: the pivot's square root (NaN where it is not positive) divides the column.
        d = _read(b, diag, _i(0), dt, "local")
        r = b.let(op("sqrt", select(op("gt", d, zero), d, const(np.nan, dt))), "r")
        with b.loop(b.let(_add(j, _i(1), lid)), nn, _i(wg)) as i:
            lij = _read(b, L, at(i, j), dt)
            b.store(L, at(i, j), op("div", lij, r))
        with b.when(op("eq", lid, _i(0))):
            b.store(L, at(j, j), r)
        b.emit(Barrier("global"))

    @staticmethod
    def _nan_fill(f, L, base, nlast, nn, nsq):
        """The lower triangle filled with NaN where ``L[n-1, n-1]`` is NaN."""
        b, dt = f.b, f.dt
        # (No barrier: a work item that reads the NaN it or another wrote fills as well.)
        last = _read(b, L, b.let(_add(base, nlast)), dt)
        with b.when(op("isnan", last)):
            with b.loop(f.lid, nsq, _i(f.wg)) as t:
                lower = op("le", b.let(op("rem", t, nn)), b.let(op("div", t, nn)))
                with b.when(lower):
                    b.store(L, b.let(_add(base, t)), const(np.nan, dt))


class _nullscope:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


# ---------------------------------------------------------------------------- triangular_solve


def _solve_layout(eqn):
    """``(m, nr, batch, trans, forward)``: the order, right-hand sides, batch shape, whether ``T`` (the
    matrix of the canonical left-side solve ``T x = b``) is ``a`` transposed, and the sweep direction."""
    p = eqn.params
    a, bb = eqn.inputs
    m = a.aval.shape[-1]
    left = p["left_side"]
    nr = bb.aval.shape[-1] if left else bb.aval.shape[-2]
    trans = bool(p["transpose_a"]) != (not left)
    lower_t = bool(p["lower"]) != trans
    return m, nr, a.aval.shape[:-2], trans, lower_t


def _solve_block(m, nr):
    """Right-hand sides per work-group: all of them for small problems, else about 4096 elements (16 per
    work item and step: fewer groups, and so fewer barriers, measured faster on PoCL than 4 per item)."""
    if m * nr <= 16 * _MAX_WG:
        return nr
    return max(1, min(nr, _cdiv(16 * _MAX_WG, m)))


def _solve_costs(m, cb, wg):
    return [_cdiv(max(m - 1 - s, 0) * cb, wg) + 1 for s in range(m)], _cdiv(m * cb, wg), 0


class _TriangularSolveGroup(_LinalgGroup):
    def codegen(self):
        ctx = self.ctx
        e = self.eqn
        a, rhs = e.inputs
        out = e.outputs[0]
        m, nr, batch, trans, forward = _solve_layout(e)
        nbatch = math.prod(batch)
        if nbatch * m * nr == 0:
            return []
        dt = out.aval.dtype
        cb = _solve_block(m, nr)
        nblk = _cdiv(nr, cb)
        wg = _wg(ctx.caps, m * cb)
        launches = []
        if not ctx.in_buffer(a):
            launches.append(self._copy_a(a))
            aspec = ctx.spec(("trsm_a", id(self)), a.aval.shape, a.aval.dtype)
        else:
            aspec = ctx.spec(a)
        b, args, tracker, em, g, gsize, lsize, guard = self._start("triangular_solve", nbatch * nblk, wg)
        sizes = {k: self._size(b, k, v) for k, v in (("m", m), ("nr", nr), ("cb", cb), ("nblk", nblk), ("mm", m * m),
                                                     ("mnr", m * nr), ("mlast", m - 1))}
        A = b.buffer(aspec, dt, False, "a")
        args[A] = aspec
        s0, s1 = b.scalar("s0"), b.scalar("s1")
        X = ctx.output(b, args, out)
        body = b.when(guard) if guard is not None else _nullscope()
        with body:
            sv = self._solve_frame(b, g, sizes, A, X, dt, wg)
            with b.when(op("eq", s0, _i(0))):
                self._load_rhs(sv, em, _batch_index(sv.bi, batch))
            b.emit(Barrier("global"))
            with b.loop(s0, s1) as s:
                self._substitute(sv, s)
        steps, first_cost, last_cost = _solve_costs(m, cb, wg)
        ranges = _chunks(steps[:-1] if m > 1 else [], first_cost, last_cost, _budget(ctx.caps))
        # The last row is finished by step m - 2 (or by the copy when m == 1): m - 1 steps in all.
        launches.extend(self._launches(b, args, gsize, lsize, tracker, ranges))
        return launches

    def _solve_frame(self, b, g, sizes, A, X, dt, wg):
        """The work-group's matrix and block of right-hand sides, and the element accessors of the steps:
        ``t_at(i, k)`` (``T[i, k]``: ``a[i, k]``, or ``a[k, i]`` where ``T`` is ``a`` transposed), ``x_at(q, r)``
        (row ``q`` of the block's column ``r``) and ``divided(q, v)`` (``v`` over ``T[q, q]``)."""
        m, nr, _, trans, forward = _solve_layout(self.eqn)
        left, unit = self.eqn.params["left_side"], self.eqn.params["unit_diagonal"]
        ms, nrs, cbs, nblks, mm, mnr = (sizes[k] for k in ("m", "nr", "cb", "nblk", "mm", "mnr"))
        sv = _Frame(b, wg, dt, Special("local_id", 0), None)
        sv.A, sv.X, sv.m, sv.nr, sv.left, sv.forward = A, X, m, nr, left, forward
        sv.ms, sv.mlast = ms, sizes["mlast"]
        sv.bi = b.let(op("div", g, nblks), "bi")
        blk = b.let(op("rem", g, nblks), "blk")
        sv.col0 = col0 = b.let(_mul(blk, cbs), "col0")
        sv.width = b.let(op("min", cbs, op("sub", nrs, col0)), "w")    # the last block may be narrower
        abase = b.let(_mul(sv.bi, mm), "abase")
        xbase = b.let(_mul(sv.bi, mnr), "xbase")

        def t_at(i, k):
            return b.let(_add(abase, _mul(k, ms), i) if trans else _add(abase, _mul(i, ms), k))

        def x_at(q, r):
            col = b.let(_add(col0, r))
            return b.let(_add(xbase, _mul(q, nrs), col) if left else _add(xbase, _mul(col, ms), q))

        def divided(q, v):
            if unit:
                return v
            return op("div", v, _read(b, A, t_at(q, q), dt))

        sv.t_at, sv.x_at, sv.divided = t_at, x_at, divided
        return sv

    def _load_rhs(self, sv, em, bidx):
        """The first launch: the block of ``b`` into ``x``, its first row divided by its diagonal."""
        b, dt, rhs = sv.b, sv.dt, self.eqn.inputs[1]
        first = _i(0) if sv.forward else sv.mlast
        with b.loop(sv.lid, b.let(_mul(sv.ms, sv.width)), _i(sv.wg)) as t:
            q = b.let(op("div", t, sv.width), "q")
            r = b.let(op("rem", t, sv.width), "r")
            if self.ctx.in_buffer(rhs):   # b's own buffer has the layout of x
                v = _read(b, em.buffer_of(rhs), sv.x_at(q, r), dt)
            else:
                col = b.let(_add(sv.col0, r))
                m, nr = sv.m, sv.nr
                idx = bidx + ((_dim(q, m), _dim(col, nr)) if sv.left else (_dim(col, nr), _dim(q, m)))
                v = b.let(em.val(rhs, idx))
            xv = b.var(dt, v)
            with b.when(op("eq", q, first)):
                b.assign(xv, sv.divided(q, xv))
            b.store(sv.X, sv.x_at(q, r), xv)

    @staticmethod
    def _substitute(sv, s):
        """Step ``s``: the finished row ``i`` subtracted from every remaining row; the next row is divided."""
        b, dt, forward, x_at = sv.b, sv.dt, sv.forward, sv.x_at
        i = s if forward else b.let(op("sub", sv.mlast, s))
        rest = b.let(op("sub", sv.mlast, s), "rest")    # rows still to finish
        nxt = b.let(op("add", i, _i(1)) if forward else op("sub", i, _i(1)), "next")
        with b.loop(sv.lid, b.let(_mul(rest, sv.width)), _i(sv.wg)) as t:
            off = b.let(op("div", t, sv.width))
            r = b.let(op("rem", t, sv.width), "r")
            q = b.let(_add(nxt, off) if forward else op("sub", nxt, off), "q")
            xi = _read(b, sv.X, x_at(i, r), dt)
            tqi = _read(b, sv.A, sv.t_at(q, i), dt)
            xq = _read(b, sv.X, x_at(q, r), dt)
            nv = b.var(dt, op("sub", xq, b.let(op("mul", tqi, xi))))
            with b.when(op("eq", q, nxt)):
                b.assign(nv, sv.divided(q, nv))
            b.store(sv.X, x_at(q, r), nv)
        b.emit(Barrier("global"))

    def _copy_a(self, a):
        """A kernel writing ``a`` (computed inline) into a scratch buffer, so that the solve reads it once."""
        ctx = self.ctx
        spec = ctx.spec(("trsm_a", id(self)), a.aval.shape, a.aval.dtype)
        b = KernelBuilder("triangular_solve_copy")
        args: dict = {}
        tracker = Tracker(ctx)
        em = ctx.emitter(b, args=args, tracker=tracker)
        n = a.aval.size
        gid, gsize, lsize = ctx.gid(b, n, ctx.wg)
        with b.when(op("lt", gid, _i(n))):
            shape = a.aval.shape
            idx = index_vars(b, gid, shape, "c")
            name = b.buffer(spec, a.aval.dtype, True, "out")
            args[name] = spec
            b.store(name, gid, em.val(a, idx))
        return make_launch(b, args, {}, gsize, lsize, tracker.eqns, "copy")


# ---------------------------------------------------------------------------- lu


def _lu_costs(m, n, wg):
    steps = [_cdiv(m - k, wg) + _cdiv(n, wg) + _cdiv(m - k - 1, wg) + _cdiv((m - k - 1) * (n - k - 1), wg) + 1
             for k in range(min(m, n))]
    return steps, _cdiv(m * n, wg) + _cdiv(m, wg), 0


class _LUGroup(_LinalgGroup):
    def codegen(self):
        ctx = self.ctx
        e = self.eqn
        x = e.inputs[0]
        lu_v, piv_v, perm_v = e.outputs
        shape = x.aval.shape
        m, n = shape[-2], shape[-1]
        K = min(m, n)
        batch = shape[:-2]
        G = math.prod(batch)
        if G * m == 0:
            return []
        dt = lu_v.aval.dtype
        wg = _wg(ctx.caps, max(m, n))
        b, args, tracker, em, g, gsize, lsize, guard = self._start("lu", G, wg)
        ms, ns, Ks, mn = (self._size(b, k, v) for k, v in (("m", m), ("n", n), ("k", K), ("mn", m * n)))
        mlast, nlast = self._size(b, "mlast", m - 1), self._size(b, "nlast", n - 1)
        s0, s1 = b.scalar("s0"), b.scalar("s1")
        f = _Frame(b, wg, dt, Special("local_id", 0), None)
        f.A, f.PV, f.PM = (ctx.output(b, args, v) for v in (lu_v, piv_v, perm_v))
        f.best_v = b.array("local", dt, wg, "bv")
        f.best_i = b.array("local", INT32, wg, "bi")
        f.ms, f.ns, f.mlast, f.nlast = ms, ns, mlast, nlast
        body = b.when(guard) if guard is not None else _nullscope()
        with body:
            f.base = base = b.let(_mul(g, mn), "base")
            f.pbase = b.let(_mul(g, Ks), "pbase")
            f.mbase = b.let(_mul(g, ms), "mbase")
            bidx = _batch_index(g, batch)

            def at(i, j):
                return b.let(_add(base, _mul(i, ns), j))

            f.at = at
            with b.when(op("eq", s0, _i(0))):
                self._load(f, em, bidx, m, n, mn)
            b.emit(Barrier("global"))
            with b.loop(s0, s1) as k:
                p = self._pivot(f, k)
                self._swap_rows(f, k, p)
                self._eliminate(f, k)
        steps, first, last = _lu_costs(m, n, wg)
        ranges = _chunks(steps, first, last, _budget(ctx.caps))
        return self._launches(b, args, gsize, lsize, tracker, ranges)

    def _load(self, f, em, bidx, m, n, mn):
        """The first launch: the input into the output ``A``, and the identity permutation."""
        b, dt, x = f.b, f.dt, self.eqn.inputs[0]
        direct = self.ctx.in_buffer(x)
        with b.loop(f.lid, mn, _i(f.wg)) as t:
            pos = b.let(_add(f.base, t))
            if direct:
                v = _read(b, em.buffer_of(x), pos, dt)
            else:
                i = b.let(op("div", t, f.ns), "i")
                j = b.let(op("rem", t, f.ns), "j")
                v = em.val(x, bidx + (_dim(i, m), _dim(j, n)))
            b.store(f.A, pos, v)
        with b.loop(f.lid, f.ms, _i(f.wg)) as t:
            b.store(f.PM, b.let(_add(f.mbase, t)), t)

    @staticmethod
    def _pivot(f, k):
        """The pivot row of column ``k``: the first largest ``|a[i, k]|``, ``i >= k`` (NaN never wins, as
        LAPACK's i?amax), each work item's best of its rows, then a tree reduction in local memory."""
        b, dt, lid, wg, best_v, best_i = f.b, f.dt, f.lid, f.wg, f.best_v, f.best_i
        bv = b.var(dt, const(-1, dt), "bestv")
        bix = b.var(INT32, k, "besti")
        with b.loop(b.let(_add(k, lid)), f.ms, _i(wg)) as i:
            v = b.let(op("fabs", _read(b, f.A, f.at(i, k), dt)))
            better = b.let(op("gt", v, bv))
            b.assign(bv, select(better, v, bv))
            b.assign(bix, select(better, i, bix))
        b.store(best_v, lid, bv, space="local")
        b.store(best_i, lid, bix, space="local")
        b.emit(Barrier("local"))
        half = wg // 2
        while half >= 1:
            with b.when(op("lt", lid, _i(half))):
                other = b.let(_add(lid, _i(half)))
                mv, mi = _read(b, best_v, lid, dt, "local"), _read(b, best_i, lid, INT32, "local")
                ov, oi = _read(b, best_v, other, dt, "local"), _read(b, best_i, other, INT32, "local")
                take = b.let(op("lor", op("gt", ov, mv), op("land", op("eq", ov, mv), op("lt", oi, mi))))
                b.store(best_v, lid, select(take, ov, mv), space="local")
                b.store(best_i, lid, select(take, oi, mi), space="local")
            b.emit(Barrier("local"))
            half //= 2
        return _read(b, best_i, _i(0), INT32, "local")

    @staticmethod
    def _swap_rows(f, k, p):
        """Rows ``k`` and ``p`` swap in every column; the pivots and the permutation follow."""
        b, dt, A, at, PM = f.b, f.dt, f.A, f.at, f.PM
        with b.loop(f.lid, f.ns, _i(f.wg)) as c:
            akc = _read(b, A, at(k, c), dt)
            apc = _read(b, A, at(p, c), dt)
            b.store(A, at(k, c), apc)
            b.store(A, at(p, c), akc)
        with b.when(op("eq", f.lid, _i(0))):
            b.store(f.PV, b.let(_add(f.pbase, k)), p)
            mk = _read(b, PM, b.let(_add(f.mbase, k)), INT32)
            mp = _read(b, PM, b.let(_add(f.mbase, p)), INT32)
            b.store(PM, b.let(_add(f.mbase, k)), mp)
            b.store(PM, b.let(_add(f.mbase, p)), mk)
        b.emit(Barrier("global"))

    @staticmethod
    def _eliminate(f, k):
        """The multipliers of column ``k`` (a zero pivot leaves its column as it is), then the rank-one
        update of the trailing block, its elements split over the work items."""
        b, dt, lid, wg, A, at = f.b, f.dt, f.lid, f.wg, f.A, f.at
        pivot = _read(b, A, at(k, k), dt)
        with b.when(op("ne", pivot, const(0, dt))):
            with b.loop(b.let(_add(k, _i(1), lid)), f.ms, _i(wg)) as i:
                aik = _read(b, A, at(i, k), dt)
                b.store(A, at(i, k), op("div", aik, pivot))
        b.emit(Barrier("global"))
        rows = b.let(op("sub", f.mlast, k), "rows")
        cols = b.let(op("sub", f.nlast, k), "cols")
        safe = b.let(select(op("gt", cols, _i(0)), cols, _i(1)))
        with b.loop(lid, b.let(_mul(rows, cols)), _i(wg)) as t:
            i = b.let(_add(k, _i(1), op("div", t, safe)), "i")
            c = b.let(_add(k, _i(1), op("rem", t, safe)), "c")
            aik = _read(b, A, at(i, k), dt)
            akc = _read(b, A, at(k, c), dt)
            aic = _read(b, A, at(i, c), dt)
            b.store(A, at(i, c), op("sub", aic, b.let(op("mul", aik, akc))))
        b.emit(Barrier("global"))


# ---------------------------------------------------------------------------- limits


def oversize_reason(eqn, caps) -> str | None:
    """Why one step of ``eqn``'s kernel would pass the device's loop limit (``None`` when it fits, and for
    every primitive without a kernel here: ``kernels/no_kernel.py`` says why ``qr``/``eigh``/``svd`` have none)."""
    budget = _budget(caps)
    if budget is None or eqn.primitive not in PRIMITIVES:
        return None
    name = eqn.primitive.name
    shape = eqn.inputs[0].aval.shape
    if name == "cholesky":
        steps, first, last = _cholesky_costs(shape[-1], _wg(caps, shape[-1]))
    elif name == "lu":
        m, n = shape[-2], shape[-1]
        steps, first, last = _lu_costs(m, n, _wg(caps, max(m, n)))
    else:
        m, nr, _, _, _ = _solve_layout(eqn)
        cb = _solve_block(m, nr)
        steps, first, last = _solve_costs(m, cb, _wg(caps, m * cb))
    worst = max([first, last] + steps)
    if worst <= budget:
        return None
    return (f"one step of the {name} kernel on {eqn.inputs[0].aval.str_short()} runs {worst} loop iterations "
            f"per work item, more than half the device's limit of {caps.max_loop_iterations}")


#: ``{primitive: group class}`` (the schedule collects them into its ``GROUPS``).
GROUPS = {LA.cholesky_p: _CholeskyGroup, LA.triangular_solve_p: _TriangularSolveGroup, LA.lu_p: _LUGroup}
PRIMITIVES = frozenset(GROUPS)
