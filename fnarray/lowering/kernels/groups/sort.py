"""Sort kernels: ``SortGroup`` (a bitonic network over a padded power-of-two length, multi-operand, stable).
"""

from __future__ import annotations

import math

from fnarray.core import primitives as P
from fnarray.lowering.kernels.builder import KernelBuilder
from fnarray.lowering.kernels.emitter import Flat
from fnarray.lowering.kernels.groups.base import (
    Group,
    Launch,
    analyse_val,
    index_vars,
    inline_reads,
    linear_index,
    make_launch,
)
from fnarray.lowering.kernels.index import ix_const, ix_data, linearize
from fnarray.lowering.kernels.ir import INT32, BufferParam, const
from fnarray.lowering.kernels.rules import (
    op,
    select,
)

# ---------------------------------------------------------------------------- sort


class SortGroup(Group):
    """Bitonic sort of each line along ``dimension``, by the first ``num_keys`` operands, NaN last and
    stable (the original position breaks ties); lines are padded to a power of two."""

    kind = "sort"

    def __init__(self, ctx, eqn):
        super().__init__(ctx, eqn.outputs[0].aval.shape)
        self.eqn = eqn
        self.products.extend(eqn.outputs)

    def analyse(self):
        analyse_val(self, *self.eqn.inputs)

    def codegen(self):
        ctx = self.ctx
        e = self.eqn
        dim, nk = e.params["dimension"], e.params["num_keys"]
        shape = self.shape
        if len(shape) == 0 or math.prod(shape) == 0:
            return self._copy_all()
        L = shape[dim]
        lines = math.prod(shape) // L
        Pn = 1 << (L - 1).bit_length()
        keys = e.inputs[:nk]
        idx_spec = ctx.spec(("sortidx", id(self)), (lines * Pn,), INT32)
        key_specs = [ctx.spec(("sortkey", id(self), k), (lines * Pn,), kv.aval.dtype) for k, kv in enumerate(keys)]
        # 1. Copy the keys and positions into padded scratch lines (in as many kernels as the
        #    buffer limit needs; the first also writes the positions).
        launches = [self._init_kernel(chunk_no == 0, chunk, idx_spec, L, Pn, lines)
                    for chunk_no, chunk in enumerate(self._chunks(list(zip(keys, key_specs, strict=True)),
                                                                  lambda kv: kv[0], 2))]
        # 2. The bitonic network: one kernel, launched once per (k, j) stage.
        if Pn > 1:
            step = self._step_kernel(idx_spec, key_specs, keys, L, Pn, lines)
            k = 2
            while k <= Pn:
                j = k // 2
                while j >= 1:
                    stage = {"jj": j, "kk": k}
                    args = [stage[a] if isinstance(a, str) else a for a in step.args]
                    launches.append(Launch(step.kernel, args, step.global_size, step.local_size, (e,), "sort"))
                    j //= 2
                k *= 2
        # 3. Gather every operand in sorted order (in chunks that fit the buffer limit).
        wanted = [(x, o) for x, o in zip(e.inputs, e.outputs, strict=True) if o in ctx.needed]
        for chunk in self._chunks(wanted, lambda xo: xo[0], 2):
            launches.append(self._gather_kernel(chunk, idx_spec, L, Pn, lines))
        return launches

    def _full_index(self, oidx, t):
        """The index of element ``t`` of the line at ``oidx`` (the index over the other dimensions)."""
        dim = self.eqn.params["dimension"]
        it = iter(oidx)
        return tuple(t if d == dim else next(it) for d in range(len(self.shape)))

    def _line_index(self, b, row):
        """The index over the dimensions other than the sorted one of line ``row``."""
        dim = self.eqn.params["dimension"]
        other = tuple(n for d, n in enumerate(self.shape) if d != dim)
        return index_vars(b, row, other, "o") if other else ()

    def _init_kernel(self, first, chunk, idx_spec, L, Pn, lines):
        """A kernel copying the keys of ``chunk`` (``(key, scratch spec)`` pairs) into padded scratch lines;
        the ``first`` writes the positions too."""
        ctx = self.ctx
        b, args, tracker, em = self._kernel_start("sort_init")
        total = lines * Pn
        gid, gsize, lsize = ctx.gid(b, total, ctx.wg)
        with b.when(op("lt", gid, const(total, INT32))):
            row = b.let(op("div", gid, const(Pn, INT32)), "row")
            p = b.let(op("rem", gid, const(Pn, INT32)), "p")
            if first:
                iname = b.buffer(idx_spec, INT32, True, "idx")
                args[iname] = idx_spec
                b.store(iname, gid, p)
            inside = b.let(op("lt", p, const(L, INT32)))
            pc = b.let(select(inside, p, const(L - 1, INT32)))
            idx = self._full_index(self._line_index(b, row), ix_data(pc, 0, L - 1) if L > 1 else ix_const(0))
            for kv, spec in chunk:
                v = em.val(kv, idx)
                kname = b.buffer(spec, kv.aval.dtype, True, "key")
                args[kname] = spec
                b.store(kname, gid, select(inside, v, const(0, kv.aval.dtype)))
        b.name = "sort_init"
        return make_launch(b, args, {}, gsize, lsize, tracker.eqns, "sort")

    def _gather_kernel(self, chunk, idx_spec, L, Pn, lines):
        """A kernel writing the outputs of ``chunk`` (``(operand, output)`` pairs) in sorted order."""
        ctx = self.ctx
        b = KernelBuilder("sort_gather")
        args = {}
        em = ctx.emitter(b, args=args)
        total = lines * L
        gid, gsize, lsize = ctx.gid(b, total, ctx.wg)
        with b.when(op("lt", gid, const(total, INT32))):
            row = b.let(op("div", gid, const(L, INT32)), "row")
            t = b.let(op("rem", gid, const(L, INT32)), "t")
            iname = b.buffer(idx_spec, INT32, False, "idx")
            args[iname] = idx_spec
            src = b.load(iname, op("add", op("mul", row, const(Pn, INT32)), t), INT32)
            oidx = self._line_index(b, row)
            idx = self._full_index(oidx, ix_data(src, 0, L - 1) if L > 1 else ix_const(0))
            dest_idx = self._full_index(oidx, ix_data(t, 0, L - 1) if L > 1 else ix_const(0))
            dest = b.let(linear_index(linearize(dest_idx, self.shape)), "dest")
            for x, o in chunk:
                b.store(ctx.output(b, args, o), dest, em.val(x, idx))
        b.name = "sort_gather"
        return make_launch(b, args, {}, gsize, lsize, (self.eqn,), "sort")

    def _chunks(self, items, atom_of, per_item):
        """``items`` in runs whose kernels fit the buffer limit: one index buffer, ``per_item - 1``
        buffers written per item, and the buffers each item's operand reads."""
        limit = self.ctx.caps.max_buffers_per_kernel
        if limit is None:
            return [items] if items else []
        out, run, reads = [], [], set()
        for it in items:
            r = inline_reads(self.ctx, atom_of(it))
            if run and len(reads | r) + (len(run) + 1) * (per_item - 1) + 1 > limit:
                out.append(run)
                run, reads = [], set()
            run.append(it)
            reads |= r
        if run:
            out.append(run)
        return out

    def _less(self, b, ka, kb, ia, ib, L):
        """Whether element a sorts before b: real before padding, then keys (NaN last), then position."""
        r = op("lt", ia, ib)
        for x, y in reversed(list(zip(ka, kb, strict=True))):
            if x.dtype.kind == "f":
                xn, yn = b.let(op("isnan", x)), b.let(op("isnan", y))
                lt = op("lor", op("land", op("lnot", xn), yn), op("lt", x, y))
                eq = op("lor", op("eq", x, y), op("land", xn, yn))
            else:
                lt, eq = op("lt", x, y), op("eq", x, y)
            r = b.let(op("lor", b.let(lt), op("land", b.let(eq), r)))
        apad = b.let(op("ge", ia, const(L, INT32)))
        bpad = b.let(op("ge", ib, const(L, INT32)))
        both_real = op("land", op("lnot", apad), op("lnot", bpad))
        return b.let(op("lor", op("land", op("lnot", apad), bpad),
                        op("lor", op("land", both_real, r), op("land", op("land", apad, bpad), op("lt", ia, ib)))))

    def _step_kernel(self, idx_spec, key_specs, keys, L, Pn, lines):
        ctx = self.ctx
        b = KernelBuilder("sort_step")
        args: dict = {}
        half = Pn // 2
        total = lines * half
        gid, gsize, lsize = ctx.gid(b, total, ctx.wg)
        jj, kk = b.scalar("jj"), b.scalar("kk")
        with b.when(op("lt", gid, const(total, INT32))):
            row = b.let(op("div", gid, const(half, INT32)), "row")
            q = b.let(op("rem", gid, const(half, INT32)), "q")
            i = b.let(op("add", op("mul", op("mul", op("div", q, jj), const(2, INT32)), jj), op("rem", q, jj)), "i")
            l = b.let(op("add", i, jj), "l")
            base = b.let(op("mul", row, const(Pn, INT32)), "base")
            gi = b.let(op("add", base, i))
            gl = b.let(op("add", base, l))
            iname = b.buffer(idx_spec, INT32, True, "idx")
            args[iname] = idx_spec
            names = []
            for spec, kv in zip(key_specs, keys, strict=True):
                n = b.buffer(spec, kv.aval.dtype, True, "key")
                args[n] = spec
                names.append(n)
            ia, il = b.load(iname, gi, INT32), b.load(iname, gl, INT32)
            ka = [b.load(n, gi, kv.aval.dtype) for n, kv in zip(names, keys, strict=True)]
            kl = [b.load(n, gl, kv.aval.dtype) for n, kv in zip(names, keys, strict=True)]
            up = b.let(op("eq", op("and", i, kk), const(0, INT32)))
            l_first = self._less(b, kl, ka, il, ia, L)
            i_first = self._less(b, ka, kl, ia, il, L)
            swap = b.let(op("lor", op("land", up, l_first), op("land", op("lnot", up), i_first)))
            with b.when(swap):
                b.store(iname, gi, il)
                b.store(iname, gl, ia)
                for n, x, y in zip(names, ka, kl, strict=True):
                    b.store(n, gi, y)
                    b.store(n, gl, x)
        kernel = b.build()
        vals = []
        for p in kernel.params:
            vals.append(args[p.name] if isinstance(p, BufferParam) else p.name)
        return Launch(kernel, vals, gsize, lsize, (self.eqn,), "sort")

    def _copy_all(self):
        """Rank-0 or empty operands: the outputs are the inputs."""
        ctx = self.ctx
        launches = []
        for x, o in zip(self.eqn.inputs, self.eqn.outputs, strict=True):
            n = o.aval.size
            if n == 0 or o not in ctx.needed:
                continue
            b = KernelBuilder("sort_copy")
            args: dict = {}
            em = ctx.emitter(b, args=args)
            gid, gsize, lsize = ctx.gid(b, n, ctx.wg)
            with b.when(op("lt", gid, const(n, INT32))):
                b.store(ctx.output(b, args, o), gid, em.val(x, Flat(gid) if n > 1 else ()))
            launches.append(make_launch(b, args, {}, gsize, lsize, (self.eqn,), "sort"))
        return launches


#: What ``schedule`` collects into its tables ``GROUPS`` (and ``OPERAND_VIEWS``).
GROUPS = {P.sort: SortGroup}
