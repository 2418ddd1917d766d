"""The ``dot_product_attention`` kernel: one launch per call, an online softmax over blocks of keys.

One work item per query row ``(b, t, n)``: it holds the row of ``q`` and an accumulator of ``H`` values (registers:
head sizes up to ``UNROLL_HEAD`` are unrolled at code generation; a private array above) and walks the keys of its
key/value head ``n // (N // K)`` (grouped-query heads read the shared head; no key is repeated in memory) in blocks
of ``KEY_BLOCK``, keys and values in either layout (``(B, S, K, H)``, or ``(B, K, S, H)`` with ``kv_heads_first``: a
key's stride only differs). Per block it computes the block's logits
``q . k_s * scale (+ bias)``, replaces the removed ones (the bool mask, the causal and window conditions) by
``MASKED_LOGIT``, and takes the block's maximum ``m'``; the running sum ``l`` and accumulator ``o`` are rescaled
once by ``exp(m - m')`` and the block's ``exp(logit - m')`` and ``exp(logit - m') * v_s`` added. At the end the
row is ``o / l``, rounded once to the output dtype. This is the online softmax of Milakov & Gimelshein (2018) as
FlashAttention (Dao et al., 2022) tiles it, one row per work item: the ``(B, N, T, S)`` logits never exist in
memory, and a decode step (``T = 1``) with a fixed-capacity cache is one kernel per layer whatever the position.
With a causal or window condition and no mask operand, a row walks only the keys the conditions keep; with a key
lengths operand (``key_value_seq_lengths``) it stops at its batch element's length, a bound read at run time, so one
compiled kernel serves a whole generation over a fixed-capacity cache and a decode step reads only the filled keys.
With ``lower_right`` (queries aligned at the end of the keys) the causal and window conditions are taken at the
position ``t + L - T``, ``L`` that length read at run time (or ``S``): a prefill into a cache already holding
``L - T`` keys walks, per query, only the keys up to its own position, with no mask operand.

On a native CPU WebGPU adapter with subgroups (the scheduler option ``attention_subgroup``) a query row is a
subgroup's instead (``AttentionGroup._row_lanes``): each lane holds ``H / lanes`` of the row's head, reads its slice
of each key and value (as ``vec4`` where the slice is a multiple of 4: lavapipe gathers a load lane by lane), and the
logit is its partial dot product summed over the lanes by ``subgroupBroadcast`` in lane order, the same value in
every lane; the softmax's walk is the one above, every lane walking it in step. A decode step's single row then
keeps all of lavapipe's 8 SIMD lanes busy, where a work item per row left 7 idle.

Everything is computed in float32 (float64 for float64 inputs), as the primitive's semantics say. The running
maximum starts at ``-finfo(float32).max``, below every logit the primitive can produce but ``-inf``, so the first
block's rescaling multiplies zeros by zero and no ``inf - inf`` arises. A row with every key removed has every
logit at ``MASKED_LOGIT`` and averages the values, as the reference does.

Not done: a cooperative form for GPUs (a work-group per block of query rows, keys staged in work-group memory as
FlashAttention does), flash-decoding (a decode step has only ``B * N`` rows, so as many work items) and a fused
backward; the derivatives run the decomposition's kernels. Measured against them: docs/attention.md.
"""

from __future__ import annotations

import math

import numpy as np

from fnarray.core.attention import (MASKED_LOGIT, acc_dtype, dot_product_attention_p, key_sizes, lengths_operand,
                                    offset_limit, split_operands)
from fnarray.core.ir import Var
from fnarray.core.shaped import ShapedArray
from fnarray.lowering.kernels.groups.base import (contiguous_strides, EquationGroup, kernel_name, make_launch, tree_sum,
                                                  vec4_binding, vectors_fit)
from fnarray.lowering.kernels.ir import BOOL, INT32, Broadcast, Cast, Lane, Special, const, vector_dtype
from fnarray.lowering.kernels.rules import op, select

__all__ = ["AttentionGroup", "GROUPS", "OPERAND_VIEWS", "KEY_BLOCK", "UNROLL_HEAD", "as_heads", "loop_steps",
           "unsupported_reason"]

#: Keys per block of the online softmax (one rescaling of the accumulator per block).
KEY_BLOCK = 16
#: Head sizes up to this are unrolled at code generation (the query row and the accumulator in registers).
UNROLL_HEAD = 128
#: A ``lower_right`` causal prefill on a CPU device walks every key before the length when the length is at least this
#: many times the queries (``AttentionGroup._uniform_walk``).
UNIFORM_FILL = 2
#: Independent partial sums of an unrolled dot product.
DOT_LANES = 4
#: The subgroup form without ``vec4`` reads (``AttentionGroup._row_lanes``) runs for at most this many query rows
#: per lane of a subgroup and a lane's slice of the head of at least ``SCALAR_SLICE`` elements.
ROWS_PER_LANES = 1
SCALAR_SLICE = 2


class AttentionGroup(EquationGroup):
    """One ``dot_product_attention`` equation: a work item per query row ``(b, t, n)``."""

    kind = "attention"
    #: whether the subgroup form may read keys and values as ``vec4`` (``_vector_rows``; cleared for a launch
    #: whose bindings those reads would break, ``vectors_fit``)
    _vectors = True

    def codegen(self):
        ctx = self.ctx
        e = self.eqn
        p = e.params
        out = e.outputs[0]
        if math.prod(out.aval.shape) == 0:
            return []
        q, k, v, bias, mask = split_operands(_operands(e), p["has_bias"], p["has_mask"])
        B, T, N, H = as_heads(q.aval.shape)
        S, K = key_sizes(as_heads(k.aval.shape), heads_first := p.get("kv_heads_first", False))
        acc = acc_dtype(out.aval.dtype)
        b, args, tracker, _ = self._kernel_start()
        buffers = self.input_buffers(b, args)
        qs, ks, vs, bs, ms = self._buffers(b, buffers, H)
        if pieces := isinstance(ks, _Pieces):
            S = ks.keys   # a scalar: one kernel source for every length of a growing cache
        lengths = lengths_operand(e.inputs, p.get("has_lengths", False))
        ls = lengths_operand(buffers, p.get("has_lengths", False))
        out_name = ctx.output(b, args, out)
        items = B * T * N
        lanes = self._row_lanes(items, H, acc, k.aval.dtype)
        item, inside, uniform, sizes = self._rows(b, items, lanes, q.aval)
        with b.when(const(True, BOOL) if uniform else inside):
            n = b.let(op("rem", item, const(N, INT32)), "n")
            t = b.let(op("rem", op("div", item, const(N, INT32)), const(T, INT32)), "t")
            bb = b.let(op("div", item, const(N * T, INT32)), "bb")
            row = b.let(op("mul", item, const(H, INT32)), "row")
            kh = b.let(op("div", n, const(N // K, INT32)), "kh")
            kv_base, key_stride = _kv_start(b, bb, kh, (S, K, H), heads_first)
            w = _Walk(b, acc, t, kv_base, key_stride, k.aval.dtype, ks, vs, bs, bias, ms, mask)
            share = w.share = _HeadShare(lanes, H, self._vector_rows(lanes, H, acc, k.aval.dtype))
            if pieces:
                ks.bind(ctx, b, args, e, share.vectors, op("land", inside, op("eq", item, const(0, INT32))))
            elif share.vectors:   # keys and values read four elements per load (lavapipe gathers a load lane by lane)
                w.vectors = {name: vec4_binding(b, args, ctx.spec(a), np.float32) for name, a in ((ks, k), (vs, v))}
            w.row_q = _Row(b, acc, share.size, share.size <= UNROLL_HEAD, share=share)
            w.row_q.fill(lambda h: _to(b.load(qs, op("add", row, h), q.aval.dtype), acc), "qv")
            w.o = _Row(b, acc, share.size, share.size <= UNROLL_HEAD, mutable=True, share=share)
            w.o.fill(lambda h: const(0, acc), "o")
            w.m = b.var(acc, const(-float(np.finfo(np.float32).max), acc), "m")
            w.total = b.var(acc, const(0, acc), "l")
            w.offsets = {name: _broadcast_offset(b, aval, bb, n, t) for name, aval in
                         ((nm, a.aval) for nm, a in ((bs, bias), (ms, mask)) if a is not None)}
            w.lg = b.array("private", acc, KEY_BLOCK, "lg")
            self._positions(w, (lengths, ls), bb, T, S)
            lo, hi = self._key_range(b, w.t, S, w.length)
            with b.loop(lo, hi, const(KEY_BLOCK, INT32), hint="blk") as blk:
                self._key_block(w, blk, hi)
            if w.length is not None and mask is not None:
                self._removed_tail(w, hi, S, kv_base)
            inv = b.let(op("div", const(1, acc), w.total), "inv")
            with b.when(inside if uniform else const(True, BOOL)):
                w.o.each(lambda h, cur: b.store(out_name, op("add", row, h), _to(op("mul", cur, inv), out.aval.dtype)))
        b.name = kernel_name("attention_subgroup" if lanes else "attention", tracker.eqns)
        # the subgroup form's work-group size is its own (a multiple of the subgroup), not the backend's default
        launch = make_launch(b, args, ks.scalars if pieces else {}, *sizes, tracker.eqns, "attention", bool(lanes))
        if share.vectors and not vectors_fit(ctx.caps, launch):   # a donated buffer also written: scalar reads
            self._vectors = False
            return self.codegen()
        return [launch]

    def _buffers(self, b, buffers, H):
        """The buffers of ``(q, k, v, bias, mask)`` (``None`` where absent); with ``kv_pieces`` (keys and values one
        concatenation, ``kernels/softmax_products.py``) ``k`` and ``v`` one ``_Pieces`` over the pieces' buffers."""
        p = self.eqn.params
        if not p.get("kv_pieces"):
            return split_operands(buffers, p["has_bias"], p["has_mask"])
        kv = _Pieces(b, buffers[1:], p["kv_pieces"], H)
        return buffers[0], kv, kv, None, None

    def _rows(self, b, items, lanes, q):
        """``(item, inside, uniform, (global size, local size))``: the query row of the work item (``lanes``: a
        subgroup per row, work item ``gid`` being lane ``gid % lanes`` of row ``gid / lanes``), whether it is a
        row, and whether every work item computes (then only the stores are guarded)."""
        ctx = self.ctx
        if lanes:
            gid, gsize, lsize = ctx.gid(b, items * lanes, lanes * max(1, min(ctx.wg // lanes, items)))
            gid = b.let(op("div", gid, const(lanes, INT32)), "sg")
        else:
            gid, gsize, lsize = ctx.gid(b, items, _group_size(ctx.wg, q, items))
        inside = op("lt", gid, const(items, INT32))
        # On CPU devices every work item computes (past the end at the last row) and only the stores are guarded:
        # a bounds branch around the body keeps PoCL from vectorising across work items. A subgroup per row
        # guards only its stores too: every lane of a subgroup must reach each broadcast.
        uniform = bool(getattr(ctx.caps, "uniform_guard", False)) or bool(lanes)
        item = b.let(select(inside, gid, const(items - 1, INT32)), "item") if uniform else gid
        return item, inside, uniform, (gsize, lsize)

    def _positions(self, w, lengths, bb, T, S):
        """The walk's key length ``w.length`` (the batch element's, clamped to ``[0, S]``; ``None`` without a
        lengths operand) and, aligned at the end of the keys (``lower_right``), the query position ``w.t``:
        ``t + L - T`` (``L`` the length, data, or ``S``). ``lengths``: the operand and its buffer, or ``None``s."""
        b, p = w.b, self.eqn.params
        (lengths, ls), t = lengths, w.t
        w.length = None
        if lengths is not None:
            raw = b.let(b.load(ls, bb, lengths.aval.dtype), "kvn")
            w.length = b.let(_clamp(raw, 0, S), "kvl")
            if p.get("lower_right"):
                w.t = b.let(op("add", t, op("sub", _clamp(raw, *offset_limit(T, S)), const(T, INT32))), "qp")
        elif p.get("lower_right") and S != T:
            w.t = b.let(op("add", t, const(S - T, INT32)), "qp")

    def _vector_rows(self, lanes, H, acc, kdt) -> bool:
        """Whether the subgroup form reads keys and values as ``vec4`` (a lane's slice of the head four elements
        per load; keys then 4-aligned too): float32, slices of a multiple of 4, where ``codegen`` has not declined."""
        f32 = np.dtype(np.float32)
        return bool(lanes) and self._vectors and acc == f32 and np.dtype(kdt) == f32 and H % (4 * lanes) == 0

    def _row_lanes(self, items, H, acc, kdt) -> int:
        """The subgroup size of the subgroup form (a subgroup of work items per query row, each lane ``H / lanes``
        of the head: the scheduler option ``attention_subgroup``, native webgpu on a CPU adapter with subgroups),
        or 0 for a work item per row. With ``vec4`` reads (``_vector_rows``) at any number of rows: lavapipe,
        call CPU time against a work item per row over 64 keys (load 10-13): 8 heads of 32 1.25x faster for 1
        query (a decode step) and 1.2x for 64 (a prefill, 512 rows); 1 query of 2 heads of 64 2.6x, of 4 heads of
        128 2.9x, of 64 heads of 64 1.5x.
        Without them (head sizes not a multiple of ``4 * lanes``) only for at most ``ROWS_PER_LANES * lanes`` rows
        and slices of ``SCALAR_SLICE`` elements or more: 8 heads of 16, 1 query, 1.0-1.2x; of 8 (a slice of 1)
        0.85x; 128 rows of 8 0.55x."""
        lanes = int(self.ctx.opts.get("attention_subgroup", 0) or 0)
        if not lanes or acc != np.dtype(np.float32) or H % lanes:
            return 0
        if self._vector_rows(lanes, H, acc, kdt):
            return lanes
        return lanes if items <= ROWS_PER_LANES * lanes and H >= SCALAR_SLICE * lanes else 0

    def _key_block(self, w, blk, hi):
        """One block of up to ``KEY_BLOCK`` keys from ``blk`` of the online softmax: the block's logits and their
        maximum, the running sum and output rescaled to it, then the block's weighted values added."""
        b, acc, p = w.b, w.acc, self.eqn.params
        left = op("sub", hi, blk)
        count = b.let(select(op("lt", left, const(KEY_BLOCK, INT32)), left, const(KEY_BLOCK, INT32)), "cnt")
        top = b.var(acc, w.m, "top")
        with b.loop(const(0, INT32), count, hint="j") as j:
            s = b.let(op("add", blk, j), "s")
            kb = b.let(op("add", w.kv_base, op("mul", s, const(w.kh_stride, INT32))), "kb")
            keys = w.read(w.ks, kb)
            dot = w.row_q.dot(keys)
            if isinstance(w.ks, _Pieces) and w.ks.store is not None:
                w.ks.keep(b, kb, keys, w.share)
            logit = op("mul", dot, const(p["scale"], acc))
            if w.bias is not None:
                bidx = _key_offset(w.offsets[w.bs], w.bias.aval, s)
                logit = op("add", logit, _to(b.load(w.bs, bidx, w.bias.aval.dtype), acc))
            keep = self._keep(b, w.t, s, w.ms, w.mask, w.offsets, w.length)
            logit = b.let(logit if keep is None else select(keep, logit, const(MASKED_LOGIT, acc)), "lgt")
            b.store(w.lg, j, logit, space="private")
            b.assign(top, op("max", top, logit))
        corr = b.let(op("exp", op("sub", w.m, top)), "corr")
        b.assign(w.total, op("mul", w.total, corr))
        w.o.update(lambda h, cur: op("mul", cur, corr))
        with b.loop(const(0, INT32), count, hint="j") as j:
            s = b.let(op("add", blk, j), "s")
            vb = b.let(op("add", w.kv_base, op("mul", s, const(w.kh_stride, INT32))), "vb")
            wt = b.let(op("exp", op("sub", b.load(w.lg, j, acc, "private"), top)), "w")
            b.assign(w.total, op("add", w.total, wt))
            vals = w.read(w.vs, vb)
            w.o.update(lambda j, cur: op("add", cur, op("mul", wt, vals(j))))
        b.assign(w.m, top)

    def _key_range(self, b, t, S, length):
        """The keys ``[lo, hi)`` query ``t`` walks: all of them, or, with a causal or window condition and no mask
        operand, only those the conditions keep (a causal prefill walks half the keys), and never past ``length``
        (the run-time key length, when there is one). A row the conditions empty walks all keys, every one removed:
        the values' average, as the primitive says. With a mask operand that could remove the kept keys too, every
        key is walked, or the keys before ``length`` and then ``_removed_tail``. See ``_uniform_walk``."""
        p = self.eqn.params
        full = (const(0, INT32), const(S, INT32) if isinstance(S, int) else S)
        if p["has_mask"] or (not p["is_causal"] and p["local_window"] is None):
            if length is None:
                return full
            if p["has_mask"]:
                return const(0, INT32), length
            lo, hi = const(0, INT32), length
        else:
            lo, hi = const(0, INT32), op("add", t, const(1, INT32)) if p["is_causal"] else const(S, INT32)
            if p["local_window"] is not None:
                left, right = p["local_window"]
                lo = select(op("gt", op("sub", t, const(left, INT32)), const(0, INT32)),
                            op("sub", t, const(left, INT32)), const(0, INT32))
                stop = op("add", t, const(right + 1, INT32))
                hi = select(op("lt", stop, hi), stop, hi)
            hi = select(op("lt", hi, const(S, INT32)), hi, const(S, INT32))
            if length is not None:
                hi = select(op("lt", hi, length), hi, length)
            if self._uniform_walk():   # a filled cache: every row of the batch element walks to the length
                T = self.eqn.inputs[0].aval.shape[1]
                hi = select(op("ge", length, const(UNIFORM_FILL * T, INT32)), length, hi)
        empty = b.let(op("ge", lo, hi), "none")
        return b.let(select(empty, const(0, INT32), lo), "klo"), b.let(select(empty, const(S, INT32), hi), "khi")

    def _uniform_walk(self):
        """Whether a ``lower_right`` causal row with key lengths walks every key before the length (the causal
        condition removing those past its position) when the length is at least ``UNIFORM_FILL`` times the
        queries (a prefill into a filled cache, where the rows' walks differ little), not only its own keys: on
        CPU devices (``uniform_guard``), where PoCL vectorises across work items only when their loops have one
        trip count. The choice is made at run time from the length, the same for every row of a batch element.
        PoCL 3.0, 64 queries over a cache of 1,024 (8 / 4 heads of 64), load 8-12, one walk against each row's own:
        filled to 128 keys 0.82 / 1.12 ms, to 320 1.96 / 3.9-12 ms, to 1,024 25.0 / 41.8-45.7 ms; filled to 64 (the
        queries alone) 0.97 / 0.72 ms and with 16 batch elements of head size 16 3.94 / 1.2-1.3 ms. lavapipe gains
        from the shorter walks at every fill (1.05-1.76x against a mask array) and keeps them."""
        p = self.eqn.params
        return (bool(getattr(self.ctx.caps, "uniform_guard", False)) and bool(p.get("lower_right"))
                and p["is_causal"] and p["local_window"] is None and not p["has_mask"] and p.get("has_lengths"))

    def _removed_tail(self, w, hi, S, kv_base):
        """With a mask operand and key lengths the walk stopped at the length; if it removed every key it walked (the
        running maximum is ``MASKED_LOGIT``, each walked key weighed ``exp(0) = 1``), the keys past the length, all
        removed, weigh 1 too: add their values so that the row averages all ``S`` values, as the primitive says."""
        b, acc = w.b, w.acc
        start = b.let(select(op("le", w.m, const(MASKED_LOGIT, acc)), hi, const(S, INT32)), "tail")
        with b.loop(start, const(S, INT32), hint="r") as s:
            vb = b.let(op("add", kv_base, op("mul", s, const(w.kh_stride, INT32))), "vb")
            b.assign(w.total, op("add", w.total, const(1, acc)))
            vals = w.read(w.vs, vb)
            w.o.update(lambda j, cur: op("add", cur, vals(j)))

    def _keep(self, b, t, s, ms, mask, offsets, length=None):
        """Whether key ``s`` stays for query ``t``: the mask operand, the causal and window conditions, ``s <
        length`` (needed only when a row the conditions empty walks every key; a mask operand's walk stops at it)."""
        p = self.eqn.params
        conds = []
        if length is not None and mask is None:
            conds.append(op("lt", s, length))
        if mask is not None:
            conds.append(b.load(ms, _key_offset(offsets[ms], mask.aval, s), mask.aval.dtype))
        if p["is_causal"]:
            conds.append(op("le", s, t))
        if p["local_window"] is not None:
            left, right = p["local_window"]
            conds.append(op("le", t, op("add", s, const(left, INT32))))
            conds.append(op("ge", t, op("sub", s, const(right, INT32))))
        if not conds:
            return None
        keep = conds[0]
        for c in conds[1:]:
            keep = op("land", keep, c)
        return b.let(keep, "keep")


class _Walk:
    """What one query row's walk over the keys shares: the builder, accumulation dtype, the query position
    ``t``, the row's first key/value element ``kv_base`` and a key's stride ``kh_stride``, the keys' dtype, the
    operands' buffers (bias and mask with their avals, ``None`` when absent); the codegen adds the row's
    registers (``row_q``, ``o``, ``m``, ``total``, ``lg``) and the bias/mask ``offsets``."""

    def __init__(self, b, acc, t, kv_base, kh_stride, kdt, ks, vs, bs, bias, ms, mask):
        self.b, self.acc, self.t, self.kv_base, self.kh_stride, self.kdt = b, acc, t, kv_base, kh_stride, kdt
        self.ks, self.vs, self.bs, self.bias, self.ms, self.mask = ks, vs, bs, bias, ms, mask
        self.share = _HeadShare(0, 0)
        self.vectors = {}   # a key/value buffer's vec4 binding, where ``share.vectors``

    def read(self, buf, base):
        """``j -> value``: the work item's ``j``-th element (``share``) of the key or value row at element ``base``
        of ``buf``, in the accumulation dtype. With ``vec4`` bindings the row's slice is loaded here, a vector per
        four elements."""
        b, share = self.b, self.share
        if isinstance(buf, _Pieces):
            return buf.read(b, base, share, self.acc)
        if buf not in self.vectors:
            return lambda j: _to(b.load(buf, op("add", base, share.element(j)), self.kdt), self.acc)
        four = share.size // 4
        first = b.let(op("add", op("div", base, const(4, INT32)), op("mul", Special("lane", 0), const(four, INT32))),
                      "v4")
        vdt = vector_dtype(np.float32)
        vecs = [b.load(self.vectors[buf], op("add", first, const(i, INT32)), vdt) for i in range(four)]
        return lambda j: Lane(vecs[j // 4], j % 4, self.acc)


class _Pieces:
    """Keys and values that are one concatenation along the keys (``kernels/softmax_products.py``'s ``kv_pieces``: a
    decode step's cache grown by a row), read from its pieces: ``names`` their buffers, ``rows`` their keys, ``H``
    the head size. Every read loads the key's elements from each piece at a clamped place and selects the one
    holding the key (a few loads more than one buffer's, against a launch less). The number of keys (``keys``) and
    where each piece ends are scalar parameters (``scalars``), not constants: the kernel of every length of a
    growing cache is one source, so one compiled pipeline or program, and consecutive steps set it once."""

    def __init__(self, b, names, rows, H):
        self.names, self.H = names, H
        self.keys = b.scalar("kv_rows")
        ends = [sum(rows[:i + 1]) * H for i in range(len(rows))]   # element offsets where the pieces end
        self.scalars = {"kv_rows": sum(rows), **{f"kv_end{i}": n for i, n in enumerate(ends[:-1])}}
        ends = [b.scalar(f"kv_end{i}") for i in range(len(rows) - 1)] + [op("mul", self.keys, const(H, INT32))]
        starts = [const(0, INT32)] + ends[:-1]
        # each piece's (first element, first element of its last key, end), computed once a work item
        self.spans = [(lo, b.let(op("sub", op("sub", end, lo), const(H, INT32)), "klast"), b.let(end, "kend"))
                      for lo, end in zip(starts, ends, strict=True)]
        self.vectors = None   # the pieces' vec4 bindings, where the walk reads four elements a load
        self.store = None     # (the concatenation's buffer, condition) where the walk stores it (``keep``)

    def bind(self, ctx, b, args, e, vectors, first_row):
        """Bind the pieces as ``vec4`` where ``vectors``, and the concatenation where ``e`` outputs it (its second
        output), stored by the work items where ``first_row`` holds."""
        if vectors:
            self.vectors = [vec4_binding(b, args, ctx.spec(a), np.float32) for a in e.inputs[1:]]
        if len(e.outputs) > 1:
            self.store = ctx.output(b, args, e.outputs[1], "cat"), b.let(first_row, "cat0")

    def _places(self, b, base):
        """``[(element offset in piece i of the key at element base, clamped into the piece; whether the key lies
        before the end of piece i)]``: the first piece whose condition holds has it."""
        out = []
        for lo, last, end in self.spans:
            at = b.let(op("sub", base, lo), "kp")
            at = select(op("lt", at, last), at, last)
            out.append((b.let(select(op("gt", at, const(0, INT32)), at, const(0, INT32)), "kp"), op("lt", base, end)))
        return out

    def read(self, b, base, share, acc):
        """``j -> value`` as ``_Walk.read``'s, for the key at element ``base`` of the concatenation."""
        places = self._places(b, base)
        if self.vectors is None:
            picks = [(lambda j, name=name, at=at: _to(b.load(name, op("add", at, share.element(j)), np.float32), acc),
                      inside) for name, (at, inside) in zip(self.names, places, strict=True)]
        else:
            four = share.size // 4
            picks = []
            for name, (at, inside) in zip(self.vectors, places, strict=True):
                first = b.let(op("add", op("div", at, const(4, INT32)),
                                 op("mul", Special("lane", 0), const(four, INT32))), "v4")
                vecs = [b.load(name, op("add", first, const(i, INT32)), vector_dtype(np.float32)) for i in range(four)]
                picks.append((lambda j, vecs=vecs: Lane(vecs[j // 4], j % 4, acc), inside))

        def value(j):
            out = picks[-1][0](j)
            for pick, inside in reversed(picks[:-1]):
                out = select(inside, pick(j), out)
            return out
        return value

    def keep(self, b, base, keys, share):
        """Store the work item's elements ``keys(j)`` of the key at element ``base`` into the concatenation, where
        ``store``'s condition holds (the first query row; every key of the walk is stored once)."""
        name, cond = self.store
        with b.when(cond):
            for j in range(share.size):
                b.store(name, op("add", base, share.element(j)), b.let(keys(j), "kx"))   # the dot's own value


class _HeadShare:
    """How a row's ``H`` head elements are split among the ``lanes`` work items of a subgroup (0: one work item
    holds them all): a work item holds ``size`` of them, its ``j``-th being element ``lane + lanes * j`` (the
    lanes of one ``j`` read adjacent elements), or with ``vectors`` element ``lane * size + j`` (a lane's slice
    contiguous, read as ``vec4``)."""

    def __init__(self, lanes, H, vectors=False):
        self.lanes, self.size, self.vectors = lanes, (H // lanes if lanes else H), vectors

    def element(self, j):
        """The head element of a work item's ``j``-th value (``j``: a Python int or an index expression)."""
        j = const(j, INT32) if isinstance(j, int) else j
        if not self.lanes:
            return j
        if self.vectors:
            return op("add", op("mul", Special("lane", 0), const(self.size, INT32)), j)
        return op("add", Special("lane", 0), op("mul", j, const(self.lanes, INT32)))

    def total(self, b, part):
        """The sum of ``part`` over the subgroup's lanes, in every lane: each lane's value broadcast and added as a
        tree in lane order (the same sum, rounded the same way, in every lane); ``part`` itself without lanes."""
        if not self.lanes:
            return part
        part = b.let(part, "part")
        return tree_sum([b.let(Broadcast(part, lane, part.dtype), "pl") for lane in range(self.lanes)])


class _Row:
    """A work item's row of ``size`` values: ``size`` locals when ``unrolled`` (the loops over ``h`` written out at
    code generation, so the values stay in registers and the dot products are independent multiply-adds), else a
    private array walked by loops. ``share`` (``_HeadShare``) says which head elements they are; the callbacks
    get the head element's index."""

    def __init__(self, b, dtype, size, unrolled, mutable=False, share=None):
        self.b, self.dtype, self.size, self.unrolled, self.mutable = b, dtype, size, unrolled, mutable
        self.share = share or _HeadShare(0, size)
        self.vals = None
        self.arr = None

    def fill(self, value, hint):
        b = self.b
        at = self.share.element
        if self.unrolled:
            make = (lambda v: b.var(self.dtype, v, hint)) if self.mutable else (lambda v: b.let(v, hint))
            self.vals = [make(value(at(h))) for h in range(self.size)]
            return
        self.arr = b.array("private", self.dtype, self.size, hint)
        with b.loop(const(0, INT32), const(self.size, INT32), hint="h") as h:
            b.store(self.arr, h, value(at(h)), space="private")

    def dot(self, other):
        """``sum_j row[j] * other(j)`` over the whole head (``other(j)``: the other row's value at the work item's
        ``j``-th element; the subgroup's lanes summed by ``share``): ``DOT_LANES`` independent partial sums summed
        as a tree when unrolled."""
        b = self.b
        if self.unrolled:
            lanes = [[] for _ in range(min(DOT_LANES, self.size))]
            for h, v in enumerate(self.vals):
                lanes[h % len(lanes)].append(op("mul", v, b.let(other(h), "kx")))
            sums = []
            for terms in lanes:
                acc = terms[0]
                for term in terms[1:]:
                    acc = b.let(op("add", acc, term), "dp")
                sums.append(acc)
            return self.share.total(b, tree_sum(sums))
        total = b.var(self.dtype, const(0, self.dtype), "dot")
        with b.loop(const(0, INT32), const(self.size, INT32), hint="h") as h:
            b.assign(total, op("add", total, op("mul", b.load(self.arr, h, self.dtype, "private"), other(h))))
        return self.share.total(b, total)

    def update(self, fn):
        """``row[j] = fn(j, row[j])`` for each of the work item's values ``j`` (a Python int when unrolled)."""
        b = self.b
        if self.unrolled:
            for j, v in enumerate(self.vals):
                b.assign(v, fn(j, v))
            return
        with b.loop(const(0, INT32), const(self.size, INT32), hint="h") as j:
            b.store(self.arr, j, fn(j, b.load(self.arr, j, self.dtype, "private")), space="private")

    def each(self, fn):
        """``fn(h, row[h])`` for every ``h`` (statements)."""
        b = self.b
        at = self.share.element
        if self.unrolled:
            for h, v in enumerate(self.vals):
                fn(at(h), v)
            return
        with b.loop(const(0, INT32), const(self.size, INT32), hint="h") as h:
            fn(at(h), b.load(self.arr, h, self.dtype, "private"))


def _operands(e) -> tuple:
    """The equation's operands in the primitive's order; with ``kv_pieces`` (its keys and values one concatenation
    of its operands past ``q``: ``_Pieces``) ``(q, whole, whole)``, ``whole`` a ``Var`` standing for the concatenation
    (its ``aval`` alone is read)."""
    pieces = e.params.get("kv_pieces")
    if not pieces:
        return e.inputs
    first = e.inputs[1].aval
    whole = Var(ShapedArray((sum(pieces), first.shape[1]), first.dtype))
    return e.inputs[0], whole, whole


def _kv_start(b, bb, kh, sizes, heads_first):
    """``(element offset, key stride)``: where the keys of batch element ``bb``, key/value head ``kh`` start, and the
    step from one key to the next: ``K * H`` in ``(B, S, K, H)`` (the other heads' keys lie between), ``H`` with the
    heads first."""
    S, K, H = sizes
    key_stride, head_stride = (H, S * H) if heads_first else (K * H, H)
    head = op("mul", kh, const(head_stride, INT32))
    batch = const(S * K * H, INT32) if isinstance(S, int) else op("mul", S, const(K * H, INT32))   # S: a scalar
    return b.let(op("add", op("mul", bb, batch), head), "kvb"), key_stride


def as_heads(shape) -> tuple:
    """``(B, T, N, H)`` of an operand: its shape, or ``(1, T, 1, H)`` for the 2-D rows ``(T, H)`` of an equation that
    ``kernels/softmax_products.py`` wrote (the same memory: one batch element, one head)."""
    return tuple(shape) if len(shape) == 4 else (1, shape[0], 1, shape[1])


def _group_size(wg, q, items) -> int:
    """The work-group size: the target's, or for the 2-D rows of ``softmax_products`` (a decode step's few queries)
    the rows alone, so that a CPU device's uniform guard (every item of a group computes) does not walk the keys 64
    times for one row (PoCL 3.0: a 40-step decode loop 2.4 -> 3.3 ms of CPU with 64, 1.6 ms with the rows)."""
    return wg if q.ndim == 4 else min(wg, items)


def _clamp(x, lo, hi):
    """``x`` (int32) clamped to ``[lo, hi]``."""
    x = select(op("lt", x, const(hi, INT32)), x, const(hi, INT32))
    return select(op("gt", x, const(lo, INT32)), x, const(lo, INT32))


def _to(x, dtype):
    return x if x.dtype == dtype else Cast(x, dtype)


def _broadcast_offset(b, aval, bb, n, t):
    """The element offset of row ``(bb, n, t)`` in a ``(B|1, N|1, T|1, S|1)`` operand (size-1 axes broadcast)."""
    strides = contiguous_strides(aval.shape)
    terms = [op("mul", i, const(st, INT32)) for i, size, st in zip((bb, n, t), aval.shape[:3], strides[:3],
                                                                   strict=True) if size > 1]
    offset = const(0, INT32)
    for term in terms:
        offset = op("add", offset, term)
    return b.let(offset, "bo")


def _key_offset(row_offset, aval, s):
    return op("add", row_offset, s) if aval.shape[3] > 1 else row_offset


def loop_steps(eqn) -> int:
    """The loop iterations one work item runs at most: the key blocks and their two walks over the keys (and, for head
    sizes past ``UNROLL_HEAD``, the loops over the head)."""
    q, k = eqn.inputs[0].aval, eqn.inputs[1].aval
    H, S = as_heads(q.shape)[3], key_sizes(as_heads(k.shape), eqn.params.get("kv_heads_first", False))[0]
    blocks = -(-S // KEY_BLOCK)
    if H <= UNROLL_HEAD:
        return blocks + 2 * S
    return 2 * H + blocks * (1 + H) + 2 * S * (H + 1)


def unsupported_reason(eqn, caps):
    """Why the kernel cannot run this ``dot_product_attention`` equation on a target with ``caps``, or ``None``: a
    work item's walk longer than the driver's loop limit (lavapipe stops loops silently past it)."""
    limit = getattr(caps, "max_loop_iterations", None)
    steps = loop_steps(eqn)
    if limit is not None and steps > limit:
        S = key_sizes(as_heads(eqn.inputs[1].aval.shape), eqn.params.get("kv_heads_first", False))[0]
        H = as_heads(eqn.inputs[0].aval.shape)[3]
        return (f"dot_product_attention over {S} keys of head size {H}: a work item walks {steps} loop steps, past "
                f"this device's {limit} loop iterations per invocation")
    return None


def _operand_buffer(ctx, a):
    """Every operand is read in place from a buffer of its own layout."""
    return (a, 0, contiguous_strides(a.aval.shape)) if isinstance(a, Var) else None


#: What ``schedule`` adds to its tables ``_GROUPS`` and ``OPERAND_VIEWS``.
GROUPS = {dot_product_attention_p: AttentionGroup}
OPERAND_VIEWS = {dot_product_attention_p: _operand_buffer}
