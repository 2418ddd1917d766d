"""The ``quantized_matmul`` kernels: packed weights loaded as words and dequantized in registers.

The float weights never exist in memory: a work item loads the uint32 words of its weight row, takes the
``bits``-bit integers apart with constant shifts and masks, and multiplies them into its accumulators
(float32; float64 for float64). One work item computes one output column ``n`` for ``ROWS`` (up to 4)
consecutive rows of ``x``, so each weight word is read once per ``ROWS`` rows: for decoding (1 to 4 rows)
one pass over the weights computes every row, for longer inputs (prefill) the weights are read
``M / ROWS`` times.

- ``transpose=True`` (``x @ W.T``, a ``Linear`` layer): the work item walks weight row ``n`` a group at a
  time; a group is ``group_size / 32`` chunks of 32 elements, each exactly ``bits`` words, whose element
  ``j`` sits at bit ``j * bits`` of the chunk (unrolled at code generation, so every shift is a constant).
  Per group and row, ``sum(x * q)`` and ``sum(x)`` accumulate (in ``LANES`` independent partial sums, so
  the adds do not wait on each other), and the group adds
  ``scale * sum(x * q) + bias * sum(x)``: two multiplies per group instead of two per element.
- ``transpose=True``, affine, on CPU devices (``_wide``): a work item computes ``rows x cols`` outputs (up to 4
  rows x 16 columns, ``wide_shape``; the tunable ``quantized_rows``): each element of ``x`` is loaded once and its
  group's ``sum(x)`` taken once for all the item's columns (the one-column form above takes it per column), the
  codes converted through int32 and, where an element lies inside its word, masked in place (``q * 2**s`` times
  ``x * 2**-s``, formed once per item: exact); on a CPU WebGPU adapter (``dot_vec4``) ``x`` and the words are read
  as ``vec4``. At 2048 x 2048 4-bit it is 1.9-2.4x faster than float32's product on lavapipe at 1-4 rows (the
  one-column form: 0.19-0.72x), 4-7x at 1-2 rows on PoCL, parity at 4 rows (docs/performance.md "4-bit
  matrix-vector products faster than float32's").
- ``transpose=False`` (``x @ W``, the gradient of the first): the work item walks the ``k`` rows of the
  weights, extracting its column's element at a bit offset known only at run time (shifts kept below 32:
  ``(hi << 1) << (31 - s)``), dequantized as ``scale * q + bias`` per element.

For more than ``ROWS`` rows (prefill, ``tiled``) ``transpose=True`` takes a tiled form: a copy kernel lays the
packed words out in panels of ``rn`` output columns (``[panel][word][column]``: the panel's words of one position
side by side; scales and biases likewise, in the accumulation dtype), then a work item computes ``rm`` rows x
``rn`` columns in registers, dequantizing each weight once (``scale * q + bias``) for its ``rm`` rows; the tile
is a tunable choice (``TILE_TUNABLE``, default 4 x 16). An affine element inside its word is masked in place, not
shifted down: ``q * 2**s`` converts exactly and meets the group's scale times ``2**-s`` (the same products, one
integer operation fewer per element: 0.75-0.9x the kernel's time on PoCL). Against float32's register-tiled matmul on PoCL 3.0,
64 and 256 rows of a 1024 x 1024 4-bit product take 0.45-0.6x its time (they took 1.7-2.7x with the
matrix-vector form), 0.74x on PoCL 3.1 and 0.1x on lavapipe. ``transpose=False`` (``x @ W``, the gradient) has a
tiled form of its own (``_tiled_columns``): ``W``'s rows are packed along the output axis, so a work item's ``rn``
neighbouring columns of one row are whole words read in place (no copy kernel) under one scale and bias; it
computes ``rm x rn`` outputs, each element dequantized once for its ``rm`` rows. 1024 x 1024 4-bit, 64 and 256 rows
(``benchmarks/quantized_columns.py``, load 12): 4.6x and 6.5x faster than the matrix-vector form on PoCL 3.0 (0.72x
and 0.54x float32's register-tiled matmul), 9.3x and 12x on lavapipe (13x and 20x its float32 matmul).

On a CPU WebGPU adapter with subgroups (lavapipe: the scheduler options ``dot_subgroup`` and ``dot_vec4``) a
``transpose=True`` product of 8 rows or more takes the subgroup form instead (``_subgroup_tiled``), shaped as
float32's subgroup product (``groups/dot.py``): a subgroup of work items computes ``rows`` rows x ``lanes * cols``
columns (``SUBGROUP_TUNABLE``, default 16 x 8), each work item dequantizing its columns' elements once per word
for all the rows; the rows' ``x`` is loaded four elements a load, ``rows / lanes`` rows per work item, and
broadcast. No copy kernel. The panel form above ran 2.2x float32's product there (lavapipe gathers a work item's
panel words and ``x`` values lane by lane); the subgroup form runs 0.5-0.6x of it at 64 rows of the llm's widths
(docs/performance.md, "4-bit prefill on webgpu:0 faster than float32"). On PoCL a form shaped as float32's
register-tiled product (``x`` in panels of 8 or 16 rows, 4 or 8 weight rows per work item, the words dequantized in
place) was no faster than the panel form (64 rows of 1024 x 1024 and 2816 x 1024: 1.0-1.1x its time with 8 x 8,
1.6-1.8x with 16 x 4; float32's product 0.6-0.8x): not kept.

Every mode has every form. The floating modes (mxfp4, mxfp8, nvfp4: no biases, a uint8 scale per group of 32 or
16) decode their codes in registers from the bits (E2M1 from a constant's nibbles, E4M3 and the scales by moving
their fields into a float32's). On CPU OpenCL devices (``_float_panels``) their tiled forms decode each code once
instead, in a copy kernel writing bfloat16 values (exact), so the product kernel's decode is one shift or mask:
per element of the product the E4M3 decode made mxfp8's tiled form 26x slower than affine's on PoCL 3.0, and
mxfp4's 1.8x (``benchmarks/quantized_tiles.py``; docs/performance.md "Floating quantized modes in the tiled
kernels"). lavapipe keeps the codes (the four times larger panels cost it more than the decode).

On GPUs (``cooperative(caps)``: work-group memory, local tiling, no CPU-style guards) a ``transpose=True`` product
of up to ``ROWS`` rows takes a cooperative form instead: a work-group of 64 per output column, its work items
taking the row's chunks in turn (neighbouring work items read neighbouring words) and summing their parts in
local memory. Forced on this machine's CPU devices it is correct and 2-3x slower than the form above (CPU
adapters do not coalesce); its speed on a GPU is not measured yet, nor the tiled form's (whose panels are read
one work item per panel, not coalesced).

The elementwise ops on the result (a layer's bias and activation) are the kernel's epilogue (the product
kernel's, in the tiled form), so a quantized layer is one launch (two with the tiled form's copy).
"""

from __future__ import annotations

import math

import numpy as np

from fnarray.core.ir import Var
from fnarray.core.quantized import quantized_matmul_p
from fnarray.lowering.packed import FLOAT_FORMATS
from fnarray.lowering.kernels.builder import KernelBuilder
from fnarray.lowering.kernels.groups.base import (
    EquationGroup,
    contiguous_strides,
    index_vars,
    kernel_name,
    make_launch,
    tree_sum,
    vec4_binding,
    vectors_fit,
)
from fnarray.lowering.kernels.groups.register_tiles import store_loop
from fnarray.lowering.kernels.ir import (BOOL, INT32, UINT32, Bitcast, Broadcast, Cast, Lane, Special, const,
                                         vector_dtype)
from fnarray.lowering.kernels.rules import op, select
from fnarray.lowering.kernels.tuning import Tunable
from fnarray.lowering.zero_size import REWRITES, fill

__all__ = ["QuantizedMatmulGroup", "GROUPS", "OPERAND_VIEWS", "ROWS", "LANES", "TILE_TUNABLE", "DEFAULT_TILE",
           "COLUMNS_TILE", "cooperative", "tiled", "unsupported_reason"]

#: The most rows of ``x`` one work item computes (the batch of a decode step: 1 to 4 rows in one pass).
ROWS = 4
#: Independent partial sums per row in the ``transpose=True`` walk, by rows per work item (PoCL, 4096 x 4096
#: 4-bit: one row 14.1 ms with one sum, 6.8 with 4, 4.9 with 8; four rows 26.8, 8.9 with 4, 12.1 with 8).
LANES = {1: 8}

#: The tiled (prefill) form's choices (``kernels/tuning.py``): ``rm`` rows of ``x`` x ``rn`` output columns per
#: work item (accumulators in registers), ``u`` elements per accumulator statement (one expression
#: ``acc + x0*w0 + x1*w1 + ...``, which OpenCL C contracts into fused multiply-adds), ``wx`` x ``wy`` work items
#: per work-group (column panels x row blocks). 3 x 16, u 4 measured best on PoCL 3.0 (256 rows of a
#: 1024 x 1024 4-bit product, process CPU time against float32's: 3x16 0.60, 4x16 0.77, 2x16 0.79, 4x8 0.78,
#: 6x16 0.94); on PoCL 3.1 4x16 and 6x16 were best (0.68, 0.66; 3x16 0.73); on lavapipe 4x16 u 8 (0.07 of
#: its float32 matmul; 3x16 0.09). With affine elements masked in place (``_in_place_shift``, one shift fewer per
#: element) 4x16 is best on both PoCLs at the llm's widths (64 and 256 rows of 1024 x 2816, 2816 x 1024 and
#: 1024 x 1024 4-bit, group 64, process CPU time against float32's product, load 11-12: PoCL 3.0 4x16 1.05-1.20,
#: 3x16 1.25-1.40; PoCL 3.1 4x16 1.06-1.32, 3x16 1.23-1.46; u 8, 6x8, 8x8 and 4x8 no better; mxfp4 and nvfp4
#: 0.90-1.31 against 1.00-1.52 with 3x16; docs/performance.md, "opencl:0 4-bit prefill: elements masked in place").
DEFAULT_TILE = {"rm": 4, "rn": 16, "u": 4, "wx": 8, "wy": 8}
#: ``_tiled_columns``' (``x @ W``) default tile: 4 x 16 was best on PoCL 3.0, PoCL 3.1 and lavapipe alike (256 rows of
#: 1024 x 1024, process CPU ms against 3 x 16: PoCL 3.0 affine 19.7 / 23.6, mxfp4 14.2 / 17.7; PoCL 3.1 affine 15.2
#: / 19.9, mxfp4 23.4 / 35.2; lavapipe affine 55 / 63, mxfp4 53 / 62; 2x16, 4x8, 3x8 u8 and 6x8 slower).
COLUMNS_TILE = {"rm": 4, "rn": 16, "u": 4, "wx": 8, "wy": 8}
TILE_TUNABLE = Tunable("quantized_tile", {"rm": (1, 2, 3, 4, 6), "rn": (8, 16), "u": (4, 8), "wx": (8,), "wy": (8,)},
                       doc="rows x columns per work item, elements per accumulator statement and the work-group "
                           "shape of quantized_matmul's tiled (prefill) kernel",
                       valid=lambda c, f: (c["rm"] * c["rn"] <= 64
                                           and c["wx"] * c["wy"] <= (f.get("workgroup_limit") or 1024)))


F32 = np.dtype(np.float32)


def _acc_dtype(d):
    return np.dtype(np.float64) if d == np.float64 else np.dtype(np.float32)


class QuantizedMatmulGroup(EquationGroup):
    """One ``quantized_matmul`` equation: a work item per (block of ``ROWS`` rows of ``x``, output column)."""

    kind = "quantized"
    accepts_roots = True   # the elementwise ops on the result (a layer's bias, its activation) as an epilogue

    def codegen(self):
        ctx = self.ctx
        e = self.eqn
        x = e.inputs[0]
        out = e.outputs[0]
        n_out = math.prod(out.aval.shape)
        if n_out == 0:
            return []
        p = e.params
        n = out.aval.shape[-1]
        m = n_out // n
        k = x.aval.shape[-1]
        rows = min(ROWS, m)
        blocks = -(-m // rows)
        lanes = subgroup_lanes(m, n, p, x.aval.dtype, out.aval.dtype, ctx.opts)
        if tiled(m, ctx.caps) and lanes:
            launch = ctx.tuned(SUBGROUP_TUNABLE, dict(SUBGROUP_TILE), lambda t: self._subgroup_tiled(n, m, k, t, lanes))
            if vectors_fit(ctx.caps, launch[0]):
                return launch
        if tiled(m, ctx.caps):
            form = self._tiled if p["transpose"] else self._tiled_columns
            return ctx.tuned(TILE_TUNABLE, dict(DEFAULT_TILE if p["transpose"] else COLUMNS_TILE),
                             lambda t: form(n, m, k, t))
        if p["transpose"] and cooperative(ctx.caps):
            return self._cooperative(n, m, k, rows, blocks)
        if p["transpose"] and p["mode"] == "affine" and WIDE and wide_shape(m, n, ctx.caps) is not None:
            return ctx.tuned(WIDE_TUNABLE, wide_shape(m, n, ctx.caps),
                             lambda t: self._wide(n, m, k, min(t["rows"], m), -(-m // min(t["rows"], m)), t["cols"]))
        b, args, tracker, em = self._kernel_start()
        names = tuple(self.input_buffers(b, args)) + (None,) * (4 - len(e.inputs))   # mxfp4: no biases
        items = blocks * n
        gid, gsize, lsize = ctx.gid(b, items, ctx.wg)
        acc = _acc_dtype(out.aval.dtype)
        inside = op("lt", gid, const(items, INT32))
        # On CPU devices every work item computes (past the end at the last item) and only the stores are
        # guarded: a bounds branch around the whole body keeps PoCL from vectorising across work items.
        uniform = bool(getattr(ctx.caps, "uniform_guard", False))
        item = b.let(select(inside, gid, const(items - 1, INT32)), "item") if uniform else gid
        with b.when(const(True, BOOL) if uniform else inside):
            col, first, row_ids = _block_rows(b, item, n, rows, m, "col")
            if p["transpose"] and p["mode"] in _FLOAT_WALK:
                sums = self._rows_of_w_float(b, names, col, row_ids, k, p["mode"], x.aval.dtype, acc)
            elif p["transpose"]:
                sums = self._rows_of_w(b, names, col, row_ids, k, p["group_size"], p["bits"], x.aval.dtype, acc)
            else:
                sums = self._columns_of_w(b, names, col, row_ids, k, n, p["group_size"], p["bits"],
                                          x.aval.dtype, acc)
            self._store(b, em, args, sums, first, row_ids, col, m, n, inside if uniform else None)
        b.name = kernel_name("quantized", tracker.eqns)
        return [make_launch(b, args, {}, gsize, lsize, tracker.eqns, "quantized")]

    def _store(self, b, em, args, sums, first, row_ids, col, m, n, guard, tag=""):
        """The results of rows ``first + r`` (those below ``m``, under ``guard``), and the epilogue."""
        out = self.eqn.outputs[0]
        for r, total in enumerate(sums):
            ok = op("lt", op("add", first, const(r, INT32)), const(m, INT32))
            with b.when(op("land", guard, ok) if guard is not None else ok):
                res = b.let(Cast(total, out.aval.dtype) if total.dtype != out.aval.dtype else total, "res")
                flat = b.let(op("add", op("mul", row_ids[r], const(n, INT32)), col), "o")
                idx = index_vars(b, flat, self.shape, prefix=f"qo{r}{tag}_")
                em.seed(out, idx, res)
                if out in self.ctx.needed:
                    b.store(self.ctx.output(b, args, out), flat, res)
                self.emit_roots(b, em, args, idx, flat)

    def _cooperative(self, n, m, k, rows, blocks):
        """A work-group per output column (and block of rows): its work items take the row's chunks in turn
        (neighbours read neighbouring words, as a GPU's memory wants) and sum their parts in local memory."""
        ctx = self.ctx
        e = self.eqn
        wg = _COOPERATIVE_WG
        acc = _acc_dtype(e.outputs[0].aval.dtype)
        b, args, tracker, em = self._kernel_start()
        names = tuple(self.input_buffers(b, args)) + (None,) * (4 - len(e.inputs))   # mxfp4: no biases
        groups = blocks * n
        gid, gsize, lsize = ctx.gid(b, groups * wg, wg)
        lid = b.let(op("rem", gid, const(wg, INT32)), "lid")
        grp = b.let(op("div", gid, const(wg, INT32)), "grp")
        inside = b.let(op("lt", grp, const(groups, INT32)), "inside")
        # Every work item reaches the barriers: past the end, a group works on the last column.
        item = b.let(select(inside, grp, const(groups - 1, INT32)), "item")
        col = b.let(op("rem", item, const(n, INT32)), "col")
        first = b.let(op("mul", op("div", item, const(n, INT32)), const(rows, INT32)), "row")
        row_ids = [b.let(select(op("lt", op("add", first, const(r, INT32)), const(m, INT32)),
                                op("add", first, const(r, INT32)), const(m - 1, INT32)), "rw")
                   for r in range(rows)]
        partial = self._cooperative_parts(b, names, lid, col, row_ids, k, acc)
        totals = _local_sums(b, partial, lid, wg, acc)
        leader = b.let(op("land", inside, op("eq", lid, const(0, INT32))), "leader")
        self._store(b, em, args, totals, first, row_ids, col, m, n, leader)
        b.name = kernel_name("quantized_wg", tracker.eqns)
        return [make_launch(b, args, {}, gsize, lsize, tracker.eqns, "quantized", fixed_local=True)]

    def _wide(self, n, m, k, rows, blocks, cols):
        """The affine ``transpose=True`` matrix-vector form with ``cols`` output columns per work item
        (``_wide_columns``): each element of ``x`` is loaded once per work item and its group's sum taken once for
        the ``cols`` columns; the codes are converted through int32 (a uint32 conversion is several instructions on
        a CPU's vector units) and, where an element sits inside one word, masked in place without a shift (its value
        ``q * 2**s``, multiplied by ``x * 2**-s``, which the work item forms once for its columns; exact). With the
        scheduler option ``dot_vec4`` (webgpu on a CPU adapter) ``x`` and the words are read four to a load."""
        ctx = self.ctx
        e = self.eqn
        gs, bits = e.params["group_size"], e.params["bits"]
        xdt = e.inputs[0].aval.dtype
        acc = _acc_dtype(e.outputs[0].aval.dtype)
        ncb = -(-n // cols)
        b, args, tracker, em = self._kernel_start()
        bufs = self._wide_buffers(b, args, k, bits)
        items = blocks * ncb
        gid, gsize, lsize = ctx.gid(b, items, ctx.wg)
        inside = op("lt", gid, const(items, INT32))
        uniform = bool(getattr(ctx.caps, "uniform_guard", False))
        item = b.let(select(inside, gid, const(items - 1, INT32)), "item") if uniform else gid
        with b.when(const(True, BOOL) if uniform else inside):
            cb, first, row_ids = _block_rows(b, item, ncb, rows, m, "cb")
            col_ids, col_ok = _wide_column_ids(b, cb, cols, n)
            words, groups = k * bits // 32, k // gs
            wrows = [b.let(op("mul", c, const(words, INT32)), "wrow") for c in col_ids]
            grows = [b.let(op("mul", c, const(groups, INT32)), "grow") for c in col_ids]
            x_rows = [b.let(op("mul", r, const(k, INT32)), "xrow") for r in row_ids]
            total = [[b.var(acc, const(0, acc), "acc") for _ in range(cols)] for _ in range(rows)]
            with b.loop(const(0, INT32), const(groups, INT32), hint="g") as g:
                dots = [[b.var(acc, const(0, acc), "dot") for _ in range(cols)] for _ in range(rows)]
                xsum = [b.var(acc, const(0, acc), "xsum") for _ in range(rows)]
                with b.loop(const(0, INT32), const(gs // 32, INT32), hint="c") as ch:
                    chunk = b.let(op("add", op("mul", g, const(gs // 32, INT32)), ch), "chunk")
                    self._wide_chunk(b, bufs, chunk, x_rows, wrows, xsum, dots, acc)
                for c in range(cols):
                    gi = b.let(op("add", grows[c], g), "gi")
                    scale = self._load_f(b, bufs["s"], gi, xdt, acc)
                    bias = self._load_f(b, bufs["b"], gi, xdt, acc)
                    for r in range(rows):
                        b.assign(total[r][c], op("add", total[r][c], op("add", op("mul", scale, dots[r][c]),
                                                                        op("mul", bias, xsum[r]))))
            for c in range(cols):
                guard = op("land", inside, col_ok[c]) if uniform else col_ok[c]
                self._store(b, em, args, [total[r][c] for r in range(rows)], first, row_ids, col_ids[c], m, n,
                            guard, tag=f"c{c}")
        b.name = kernel_name("quantized", tracker.eqns)
        return [make_launch(b, args, {}, gsize, lsize, tracker.eqns, "quantized")]

    def _wide_buffers(self, b, args, k, bits):
        """``_wide``'s buffers by role (``x``, ``w``, ``s``, ``b``), and the ``vec4`` views of ``x`` (``x4``) and
        of the words (``w4``) where ``dot_vec4`` reads them four to a load (else ``None``)."""
        ctx, e = self.ctx, self.eqn
        x = e.inputs[0]
        xs, ws, ss, bs = self.input_buffers(b, args)
        bufs = {"x": xs, "w": ws, "s": ss, "b": bs, "x4": None, "w4": None}
        if bool(ctx.opts.get("dot_vec4", False)) and x.aval.dtype == F32:
            bufs["x4"] = vec4_binding(b, args, ctx.spec(x), F32)
            if bits % 4 == 0 and (k * bits // 32) % 4 == 0:
                bufs["w4"] = vec4_binding(b, args, ctx.spec(e.inputs[1]), UINT32)
        return bufs

    def _wide_chunk(self, b, bufs, chunk, x_rows, wrows, xsum, dots, acc):
        """One chunk of 32 elements of ``_wide``: each row's ``x`` loaded (and added to ``xsum``), each column's
        words loaded and their codes multiplied into ``dots[row][column]``."""
        bits = self.eqn.params["bits"]
        xdt = self.eqn.inputs[0].aval.dtype
        base_x = b.let(op("mul", chunk, const(32, INT32)), "xb")
        xvals = []
        for r, xr in enumerate(x_rows):
            if bufs["x4"] is not None:
                at = b.let(op("div", op("add", xr, base_x), const(4, INT32)), "x4")
                vs = [b.load(bufs["x4"], b.let(op("add", at, const(t, INT32))), vector_dtype(F32)) for t in range(8)]
                xs_r = [b.let(Lane(vs[j // 4], j % 4, F32)) for j in range(32)]
            else:
                xs_r = [self._load_f(b, bufs["x"], b.let(op("add", xr, op("add", base_x, const(j, INT32)))), xdt, acc)
                        for j in range(32)]
            for q in range(0, 32, 8):
                b.assign(xsum[r], op("add", xsum[r], tree_sum(xs_r[q:q + 8])))
            xvals.append(xs_r)
        # Each element's place in its word: masked in place (x scaled by 2**-s) or shifted.
        places = [_in_place(j * bits % 32, bits) for j in range(32)]
        scaled = [[b.let(op("mul", xs_r[j], const(2.0 ** -places[j], acc))) if places[j] else xs_r[j]
                   for j in range(32)] for xs_r in xvals]
        mask = (1 << bits) - 1
        for c, wrow in enumerate(wrows):
            base_w = b.let(op("add", wrow, op("mul", chunk, const(bits, INT32))), "wb")
            if bufs["w4"] is not None:
                at = b.let(op("div", base_w, const(4, INT32)), "w4")
                vs = [b.load(bufs["w4"], b.let(op("add", at, const(t, INT32))), vector_dtype(UINT32))
                      for t in range(bits // 4)]
                wd = [b.let(Lane(vs[t // 4], t % 4, UINT32)) for t in range(bits)]
            else:
                wd = [b.load(bufs["w"], b.let(op("add", base_w, const(t, INT32))), UINT32) for t in range(bits)]
            for j in range(32):
                t, s = divmod(j * bits, 32)
                if places[j]:
                    qi = op("and", wd[t], const(mask << s, UINT32))
                elif s + bits == 32:
                    qi = op("shr", wd[t], const(s, UINT32))
                else:
                    qi = _element(b, wd, j * bits, bits, const(mask, UINT32))
                qf = b.let(Cast(b.let(Cast(qi, INT32)), acc), "q")
                for r in range(len(x_rows)):
                    b.assign(dots[r][c], op("add", dots[r][c], op("mul", scaled[r][j], qf)))

    def _cooperative_parts(self, b, names, lid, col, row_ids, k, acc):
        """Each work item's part of the rows' dot products with column ``col``: chunks of 32 elements
        ``lid, lid + wg, ...`` of the row, dequantized in registers (``scale * dot + bias * sum(x)``)."""
        xs, ws, ss, bs = names
        xdt = self.eqn.inputs[0].aval.dtype
        gs, bits, mode = self.eqn.params["group_size"], self.eqn.params["bits"], self.eqn.params["mode"]
        ce = min(32, gs)   # elements per chunk: 32, or nvfp4's group of 16
        cw = ce * bits // 32
        words, chunks, per_group = k * bits // 32, k // ce, gs // ce
        mask = const((1 << bits) - 1, UINT32)
        wrow = b.let(op("mul", col, const(words, INT32)), "wrow")
        grow = b.let(op("mul", col, const(k // gs, INT32)), "grow")
        x_rows = [b.let(op("mul", r, const(k, INT32)), "xrow") for r in row_ids]
        partial = [b.var(acc, const(0, acc), "part") for _ in row_ids]
        with b.loop(lid, const(chunks, INT32), const(_COOPERATIVE_WG, INT32), hint="c") as c:
            base_w = b.let(op("add", wrow, op("mul", c, const(cw, INT32))), "wb")
            wd = [b.load(ws, b.let(op("add", base_w, const(t, INT32))), UINT32) for t in range(cw)]
            gi = b.let(op("add", grow, op("div", c, const(per_group, INT32))), "gi")
            scale, bias = self._group_scale(b, (ss, bs), gi, xdt, acc)
            base_x = b.let(op("mul", c, const(ce, INT32)), "xb")
            dots = [b.var(acc, const(0, acc), "dot") for _ in row_ids]
            sums = [b.var(acc, const(0, acc), "xsum") for _ in row_ids]
            for j in range(ce):
                qf = b.let(_code_value(_element(b, wd, j * bits, bits, mask), acc, mode), "q")
                for r, xr in enumerate(x_rows):
                    xv = self._load_f(b, xs, b.let(op("add", xr, op("add", base_x, const(j, INT32)))), xdt, acc)
                    b.assign(dots[r], op("add", dots[r], op("mul", xv, qf)))
                    if bias is not None:   # mxfp4 has no bias, so no sum of x
                        b.assign(sums[r], op("add", sums[r], xv))
            for r in range(len(row_ids)):
                part = op("mul", scale, dots[r])
                if bias is not None:
                    part = op("add", part, op("mul", bias, sums[r]))
                b.assign(partial[r], op("add", partial[r], part))
        return partial

    def _group_scale(self, b, names, gi, xdt, acc):
        """``(scale, bias)`` of group ``gi`` in ``acc``: the affine format's own, or for a floating mode
        (``names[1]`` is ``None``) the uint8 scale's value matching ``_float_element`` (``_float_scale``: half the
        E8M0 scale for mxfp4's doubled E2M1 values) and ``None``."""
        ss, bs = names
        if bs is None:
            scale = _float_scale(b.load(ss, gi, np.dtype(np.uint8)), self.eqn.params["mode"], acc)
            return b.let(scale, "scale"), None
        return self._load_f(b, ss, gi, xdt, acc), self._load_f(b, bs, gi, xdt, acc)

    def _tiled(self, n, m, k, tile):
        """The prefill form (``transpose=True``, more than ``ROWS`` rows): a copy kernel lays the packed words,
        scales and biases out in panels of ``rn`` output columns (``words[panel][word][column]``, a panel's
        words of one position side by side), then a work item computes ``rm`` rows x ``rn`` columns in
        registers: per group it loads the panel's ``rn`` scales and biases, per span of words the panel's words,
        dequantizes each element once in registers (``scale * q + bias``) and uses it for its ``rm`` rows."""
        e = self.eqn
        x = e.inputs[0]
        p = e.params
        gs, bits = p["group_size"], p["bits"]
        rm, rn = tile["rm"], tile["rn"]
        acc = _acc_dtype(e.outputs[0].aval.dtype)
        panel_bits = 16 if _float_panels(p["mode"], self.ctx.caps) else bits   # bfloat16 values or the codes
        words, groups = k * panel_bits // 32, k // gs
        npan = -(-n // rn)
        pack, wspec, sspec, bspec = self._pack_launch(n, words, groups, rn, npan, acc, tile)
        wx = min(tile["wx"], _pow2_at_least(npan))
        blocks = -(-m // rm)
        wy = min(tile["wy"], _pow2_at_least(blocks))
        cols_g, rows_g = -(-npan // wx) * wx, -(-blocks // wy) * wy
        b, args, tracker, em = self._kernel_start()
        xs = b.buffer(self.ctx.spec(x), x.aval.dtype, False, "in")
        args[xs] = self.ctx.spec(x)
        names = []
        for spec, dt, hint in ((wspec, UINT32, "w"), (sspec, acc, "s"), (bspec, acc, "bs")):
            names.append(b.buffer(spec, dt, False, hint) if spec is not None else None)   # mxfp4: no biases
            if spec is not None:
                args[names[-1]] = spec
        ws, ss, bs = names
        panel, row0, x_rows = _tile_position(b, npan, rm, m, k)
        wbase = b.let(op("mul", panel, const(words * rn, INT32)), "wbase")
        sbase = b.let(op("mul", panel, const(groups * rn, INT32)), "sbase")
        accs = [[b.var(acc, const(0, acc)) for _ in range(rn)] for _ in range(rm)]
        self._tile_contraction(b, (xs, ws, ss, bs), x_rows, wbase, sbase, accs, (groups, tile))
        self._tile_store(b, em, args, accs, acc, row0, (m, n, rn))
        b.name = kernel_name("quantized_tile", tracker.eqns)
        product = make_launch(b, args, {}, (cols_g, rows_g), (wx, wy), tracker.eqns, "quantized", fixed_local=True)
        return [pack, product]

    def _subgroup_tiled(self, n, m, k, tile, lanes):
        """The prefill form (``transpose=True``) on a CPU WebGPU adapter with subgroups (``subgroup_lanes``), shaped
        as float32's subgroup product (``groups/dot.py``, ``DotGroup._subgroup``): a subgroup of ``lanes`` work
        items computes ``rows`` rows x ``lanes * cols`` columns, each work item ``cols`` neighbouring columns of
        them (``tile``, narrowed to the product). Per word of its columns' weight rows a work item loads the
        word, dequantizes its ``32 / bits`` elements once (``scale * q + bias``) and multiplies each into its
        ``rows`` rows; the rows' ``x`` values are loaded four to a load by the subgroup's work items together,
        ``rows / lanes`` rows each, and broadcast (lavapipe gathers a load lane by lane and broadcasts a lane's
        vector in one shuffle). No copy kernel: the packed weights, scales and biases are read in place. Every
        work item runs the loops (a subgroup past the output computes on the last tile; only stores are
        guarded), so each broadcast is in uniform control flow."""
        ctx = self.ctx
        e = self.eqn
        rows = max(lanes, min(tile["rows"], m // lanes * lanes))
        cols = max(1, min(tile["cols"], n // lanes))
        per = 32 // e.params["bits"]   # elements per word
        mt, nt = -(-m // rows), -(-n // (lanes * cols))
        tiles = mt * nt
        b, args, tracker, em = self._kernel_start()
        xs, ws, ss, bs = tuple(self.input_buffers(b, args)) + (None,) * (4 - len(e.inputs))   # mxfp4: no biases
        x4 = vec4_binding(b, args, ctx.spec(e.inputs[0]), F32)
        gid, gsize, lsize = ctx.gid(b, tiles * lanes, lanes * max(1, min(ctx.wg // lanes, tiles // 2)))
        sg = b.let(op("div", gid, const(lanes, INT32)), "sg")
        t = b.let(select(op("lt", sg, const(tiles, INT32)), sg, const(tiles - 1, INT32)), "t")
        lane = Special("lane", 0)
        n0 = b.let(op("add", op("mul", op("rem", t, const(nt, INT32)), const(lanes * cols, INT32)),
                      op("mul", lane, const(cols, INT32))), "n0")
        m0 = b.let(op("mul", op("div", t, const(nt, INT32)), const(rows, INT32)), "m0")
        col_ids = [b.let(select(op("lt", op("add", n0, const(c, INT32)), const(n, INT32)),
                                op("add", n0, const(c, INT32)), const(n - 1, INT32)), "col") for c in range(cols)]
        # the vec4 index of the start of each row this work item loads: rows m0 + j * lanes + lane (clamped)
        x_rows = []
        for j in range(rows // lanes):
            at = b.let(op("add", m0, op("add", const(j * lanes, INT32), lane)), "xr")
            x_rows.append(b.let(op("mul", select(op("lt", at, const(m, INT32)), at, const(m - 1, INT32)),
                                   const(k // 4, INT32)), "xq"))
        acc = F32
        accs = [[b.var(acc, const(0, acc)) for _ in range(cols)] for _ in range(rows)]
        vec = vector_dtype(F32)

        def x_values(wi):
            """Row ``m0 + r``'s ``x`` at the word's elements, ``[r][element]``: each work item's loads broadcast."""
            kq = b.let(op("mul", wi, const(per // 4, INT32)), "kq")
            xv = [[None] * per for _ in range(rows)]
            for j, xr in enumerate(x_rows):
                for h in range(per // 4):
                    v = b.load(x4, b.let(op("add", xr, op("add", kq, const(h, INT32)))), vec)
                    for ln in range(lanes):
                        shared = b.let(Broadcast(v, ln, vec), "x")
                        for q in range(4):
                            xv[j * lanes + ln][4 * h + q] = b.let(Lane(shared, q, F32))
            return xv
        self._dequantized_walk(b, (ws, ss, bs), col_ids, accs, x_values)
        self._tile_store(b, em, args, accs, acc, m0, (m, n, cols), n0, op("lt", sg, const(tiles, INT32)))
        b.name = kernel_name("quantized_subgroup", tracker.eqns)
        return [make_launch(b, args, {}, gsize, lsize, tracker.eqns, "quantized", fixed_local=True)]

    def _dequantized_walk(self, b, bufs, col_ids, accs, x_values):
        """The contraction of ``_subgroup_tiled``:
        per group the scales (and biases) of the work item's weight rows ``col_ids``, per word of the group their
        words, each of a word's ``32 / bits`` elements dequantized once (``scale * q + bias``) and multiplied into
        every row's accumulators ``accs[row][column]``; ``x_values(word index)`` gives the rows' ``x`` at the
        word's elements, ``[row][element]``."""
        ws, ss, bs = bufs
        p = self.eqn.params
        gs, bits, mode = p["group_size"], p["bits"], p["mode"]
        k = self.eqn.inputs[0].aval.shape[-1]
        per, words, groups, wpg = 32 // bits, k * bits // 32, k // gs, gs * bits // 32
        acc = accs[0][0].dtype
        wrows = [b.let(op("mul", c, const(words, INT32)), "wrow") for c in col_ids]
        grows = [b.let(op("mul", c, const(groups, INT32)), "grow") for c in col_ids]
        mask = const((1 << bits) - 1, UINT32)
        with b.loop(const(0, INT32), const(groups, INT32), hint="g") as g:
            sdt = self.eqn.inputs[2].aval.dtype
            scales = [self._group_scale(b, (ss, bs), b.let(op("add", gr, g), "gi"), sdt, acc) for gr in grows]
            with b.loop(const(0, INT32), const(wpg, INT32), hint="w") as tw:
                wi = b.let(op("add", op("mul", g, const(wpg, INT32)), tw), "wi")
                wd = [b.load(ws, b.let(op("add", wr, wi)), UINT32) for wr in wrows]
                xe = x_values(wi)
                for el in range(per):
                    wv = [b.let(_dequantized(b, _element(b, [wd[c]], el * bits, bits, mask), scale, bias, acc, mode),
                                "wv") for c, (scale, bias) in enumerate(scales)]
                    for r, row in enumerate(accs):
                        for c, a in enumerate(row):
                            b.assign(a, op("add", a, op("mul", xe[r][el], wv[c])))

    def _tiled_columns(self, n, m, k, tile):
        """The prefill form of ``transpose=False`` (``x @ W``, more than ``ROWS`` rows): a work item computes ``rm``
        rows x ``rn`` neighbouring output columns in registers. ``W``'s rows are packed along the output axis, so a
        panel's ``rn`` elements of row ``kk`` are ``rn * bits / 32`` consecutive words at a word boundary (``rn`` is
        raised to a whole span of words: 32 columns for 1, 3 and 5 bits) inside one group (one scale and one bias
        per row): no copy kernel. Neighbouring work items read neighbouring words."""
        e = self.eqn
        gs, bits = e.params["group_size"], e.params["bits"]
        launches = []
        if _float_panels(e.params["mode"], self.ctx.caps):   # W as bfloat16 values, decoded once by a copy kernel
            transcode, wspec = self._transcode_launch(k, n)
            launches.append(transcode)
            bits = 16
        span_elems = (bits * 32 // math.gcd(bits, 32)) // bits   # the fewest columns filling whole words
        rn = max(tile["rn"], span_elems)
        rm = max(1, min(tile["rm"], 64 // rn))
        acc = _acc_dtype(e.outputs[0].aval.dtype)
        words, npan, blocks = n * bits // 32, n // rn, -(-m // rm)
        wx, wy = min(tile["wx"], _pow2_at_least(npan)), min(tile["wy"], _pow2_at_least(blocks))
        b, args, tracker, em = self._kernel_start()
        xs, ws, ss, bs = tuple(self.input_buffers(b, args)) + (None,) * (4 - len(e.inputs))   # mxfp4: no biases
        if launches:   # the product reads the copy's words in place of the packed ones
            del args[ws]
            ws = b.buffer(wspec, np.dtype(np.uint32), False, "w")
            args[ws] = wspec
        panel, row0, x_rows = _tile_position(b, npan, rm, m, k)
        wcol = b.let(op("mul", panel, const(rn * bits // 32, INT32)), "wcol")
        gcol = b.let(op("div", op("mul", panel, const(rn, INT32)), const(gs, INT32)), "gcol")
        accs = [[b.var(acc, const(0, acc)) for _ in range(rn)] for _ in range(rm)]
        u = tile["u"]
        main = k - k % u
        sizes = (words, n // gs, rn, bits)
        if main:
            with b.loop(const(0, INT32), const(main, INT32), const(u, INT32), hint="kk") as kk:
                self._column_rows(b, (xs, ws, ss, bs), x_rows, (kk, wcol, gcol), accs, sizes, u)
        if k % u:
            with b.loop(const(main, INT32), const(k, INT32), hint="kt") as kk:
                self._column_rows(b, (xs, ws, ss, bs), x_rows, (kk, wcol, gcol), accs, sizes, 1)
        self._tile_store(b, em, args, accs, acc, row0, (m, n, rn))
        b.name = kernel_name("quantized_ctile", tracker.eqns)
        return launches + [make_launch(b, args, {}, (-(-npan // wx) * wx, -(-blocks // wy) * wy), (wx, wy),
                                       tracker.eqns, "quantized", fixed_local=True)]

    def _transcode_launch(self, k, n):
        """A copy kernel writing ``W``'s codes (``transpose=False``: ``k`` rows of ``n`` packed along the output
        axis) as bfloat16 values (``_float_bits``), two to a uint32 word, the first low, in the same row-major order:
        a work item per packed word, every work item computing and only the stores guarded. Returns
        ``(launch, words spec)``."""
        ctx = self.ctx
        e = self.eqn
        mode, bits = e.params["mode"], e.params["bits"]
        w = e.inputs[1]
        spec = ctx.spec(("qcols_w", id(self)), (k, n // 2), np.dtype(np.uint32))
        b = KernelBuilder("quantized_decode")
        src = b.buffer(ctx.spec(w), w.aval.dtype, False, "in")
        dst = b.buffer(spec, np.dtype(np.uint32), True, "out")
        args = {src: ctx.spec(w), dst: spec}
        items = k * n * bits // 32
        per = 32 // bits // 2   # words written per packed word
        gid, gsize, lsize = ctx.gid(b, items, ctx.wg)
        inside = b.let(op("lt", gid, const(items, INT32)), "inside")
        item = b.let(select(inside, gid, const(items - 1, INT32)), "item")
        wd = b.load(src, item, UINT32)
        mask = const((1 << bits) - 1, UINT32)
        vals = [b.let(_float_bits(_element(b, [wd], j * bits, bits, mask), mode), "fv") for j in range(32 // bits)]
        base = b.let(op("mul", item, const(per, INT32)), "dw")
        with b.when(inside):
            for t in range(per):
                b.store(dst, b.let(op("add", base, const(t, INT32))),
                        op("or", op("shr", vals[2 * t], const(16, UINT32)),
                           op("and", vals[2 * t + 1], const(0xFFFF0000, UINT32))))
        b.name = "quantized_decode"
        return make_launch(b, args, {}, gsize, lsize, [], "copy"), spec

    def _column_rows(self, b, buffers, x_rows, where, accs, sizes, u):
        """``u`` rows ``kk ..`` of ``W`` in ``_tiled_columns``: each row's panel words, scale and bias loaded, its
        ``rn`` elements dequantized once (``scale * q + bias``) and multiplied into the ``rm x rn`` accumulators
        (one expression per accumulator over the ``u`` rows)."""
        xs, ws, ss, bs = buffers
        kk, wcol, gcol = where
        words, groups, rn, bits = sizes
        xdt = self.eqn.inputs[0].aval.dtype
        acc = _acc_dtype(self.eqn.outputs[0].aval.dtype)
        bf16 = _float_panels(self.eqn.params["mode"], self.ctx.caps)
        bits = 16 if bf16 else bits
        mask = const((1 << bits) - 1, UINT32)
        wv, xv = {}, {}
        for d in range(u):
            row = b.let(op("add", kk, const(d, INT32)), "kr")
            wb = b.let(op("add", op("mul", row, const(words, INT32)), wcol), "wb")
            wd = [b.load(ws, b.let(op("add", wb, const(j, INT32))), UINT32) for j in range(rn * bits // 32)]
            gi = b.let(op("add", op("mul", row, const(groups, INT32)), gcol), "gi")
            scale, bias = self._group_scale(b, (ss, bs), gi, xdt, acc)
            for c in range(rn):
                wv[d, c] = b.let(_bf16_element(b, wd, c, scale, acc) if bf16 else
                                 _dequantized(b, _element(b, wd, c * bits, bits, mask), scale, bias, acc,
                                              self.eqn.params["mode"]), "wv")
            for r, xr in enumerate(x_rows):
                xv[d, r] = self._load_f(b, xs, b.let(op("add", xr, row)), xdt, acc)
        for r in range(len(x_rows)):
            for c in range(rn):
                total = accs[r][c]
                for d in range(u):   # one expression per accumulator (contracted into fused multiply-adds)
                    total = op("add", total, op("mul", xv[d, r], wv[d, c]))
                b.assign(accs[r][c], total)

    def _tile_contraction(self, b, buffers, x_rows, wbase, sbase, accs, sizes):
        """The tiled kernel's loop over the groups: the panel's scales and biases per group, its words per span,
        each element dequantized once and multiplied into the ``rm x rn`` accumulators ``accs``."""
        xs, ws, ss, bs = buffers
        groups, tile = sizes
        p = self.eqn.params
        gs, bits = p["group_size"], p["bits"]
        rm, rn, u = tile["rm"], tile["rn"], tile["u"]
        acc = _acc_dtype(self.eqn.outputs[0].aval.dtype)
        x = self.eqn.inputs[0]
        bf16 = _float_panels(p["mode"], self.ctx.caps)
        bits = 16 if bf16 else bits
        # A span: the fewest whole words holding whole elements (1 word of 2, 4 or 8 bits; 3 of 3 or 6 bits...);
        # bfloat16 panels: enough words for ``u`` elements inside a group.
        span_bits = bits * 32 // math.gcd(bits, 32)
        span_words, span_elems = span_bits // 32, span_bits // bits
        while bf16 and span_elems < u and gs % (2 * span_elems) == 0:
            span_words, span_elems = 2 * span_words, 2 * span_elems
        with b.loop(const(0, INT32), const(groups, INT32), hint="g") as g:
            gi = b.let(op("add", sbase, op("mul", g, const(rn, INT32))), "gi")
            scale = [self._load_f(b, ss, b.let(op("add", gi, const(c, INT32))), acc, acc) for c in range(rn)]
            bias = [self._load_f(b, bs, b.let(op("add", gi, const(c, INT32))), acc, acc) if bs is not None else None
                    for c in range(rn)]
            with b.loop(const(0, INT32), const(gs // span_elems, INT32), hint="t") as t:
                span = b.let(op("add", op("mul", g, const(gs // span_elems, INT32)), t), "span")
                wb = b.let(op("add", wbase, op("mul", span, const(span_words * rn, INT32))), "wb")
                wd = [[b.load(ws, b.let(op("add", wb, const(j * rn + c, INT32))), UINT32) for j in range(span_words)]
                      for c in range(rn)]
                xb = b.let(op("mul", span, const(span_elems, INT32)), "xb")
                shifted = {}   # scale * 2**-s per column, by in-place shift s (_in_place_shift)
                for j0 in range(0, span_elems, u):
                    js = range(j0, min(j0 + u, span_elems))
                    wv = {(j, c): b.let(self._tile_weight(b, wd[c], j, (scale, bias, shifted), c, acc, bf16, bits)
                                        , "wv")
                          for j in js for c in range(rn)}
                    xv = {(j, r): self._load_f(b, xs, b.let(op("add", x_rows[r], op("add", xb, const(j, INT32)))),
                                               x.aval.dtype, acc) for j in js for r in range(rm)}
                    for r in range(rm):
                        for c in range(rn):
                            total = accs[r][c]
                            for j in js:   # one expression per accumulator (contracted into fused multiply-adds)
                                total = op("add", total, op("mul", xv[j, r], wv[j, c]))
                            b.assign(accs[r][c], total)

    def _tile_weight(self, b, words, j, group, c, acc, bf16, bits):
        """Element ``j`` of column ``c``'s span ``words`` in ``_tile_contraction``, dequantized: a bfloat16 panel
        value times its scale, or ``scale * q + bias``. An affine element that lies inside its word below the sign
        bit is masked in place (``_in_place_shift``: ``q * 2**s`` converted exactly) and multiplied by the scale
        times ``2**-s`` (formed once per group, kept in ``group[2]`` by ``s``): the same products as
        ``scale * q``, one shift fewer per element."""
        scale, bias, shifted = group
        if bf16:
            return _bf16_element(b, words, j, scale[c], acc)
        mode = self.eqn.params["mode"]
        s = _in_place_shift(j * bits, bits, mode)
        if s is None:
            return _dequantized(b, _element(b, words, j * bits, bits, const((1 << bits) - 1, UINT32)), scale[c],
                                bias[c], acc, mode)
        if (s, c) not in shifted:
            shifted[s, c] = b.let(op("mul", scale[c], const(2.0 ** -s, acc)), "ss")
        q = b.let(op("and", words[j * bits // 32], const(((1 << bits) - 1) << s, UINT32)), "qi")
        return op("add", op("mul", shifted[s, c], b.let(Cast(b.let(Cast(q, INT32)), acc))), bias[c])

    def _tile_store(self, b, em, args, accs, acc, row0, sizes, col0=None, guard=None):
        """The tiled kernel's results: each accumulator inside the ``m x n`` output stored (and its roots), where
        ``guard`` (``None``: always). ``col0``: the first column (default global id 0 times ``rn``)."""
        m, n, rn = sizes
        e = self.eqn
        if col0 is None:
            col0 = b.let(op("mul", Special("global_id", 0), const(rn, INT32)), "col0")
        out = e.outputs[0]
        with store_loop(b, accs, acc) as (i, j, v):
            gr = b.let(op("add", row0, i), "gr")
            gc = b.let(op("add", col0, j), "gc")
            within = op("land", op("lt", gr, const(m, INT32)), op("lt", gc, const(n, INT32)))
            with b.when(within if guard is None else op("land", guard, within)):
                res = b.let(Cast(v, out.aval.dtype) if acc != out.aval.dtype else v, "res")
                flat = b.let(op("add", op("mul", gr, const(n, INT32)), gc), "o")
                idx = index_vars(b, flat, self.shape, prefix="qo_")
                em.seed(out, idx, res)
                if out in self.ctx.needed:
                    b.store(self.ctx.output(b, args, out), flat, res)
                self.emit_roots(b, em, args, idx, flat)

    def _pack_launch(self, n, words, groups, rn, npan, acc, tile):
        """A copy kernel writing the packed words as ``[panel][word][rn]`` and the scales and biases (as
        ``acc``) as ``[panel][group][rn]``; the columns past ``n`` of the last panel repeat column ``n - 1``.
        mxfp4 has no biases (their spec is ``None``) and its uint8 E8M0 scales are written as half their value
        (``_e8m0_half``). Returns ``(launch, words spec, scales spec, biases spec)``."""
        ctx = self.ctx
        e = self.eqn
        ops = e.inputs[1:]
        key = (id(self), rn)
        wspec = ctx.spec(("qpack_w",) + key, (npan, words, rn), np.dtype(np.uint32))
        sspec = ctx.spec(("qpack_s",) + key, (npan, groups, rn), acc)
        bspec = ctx.spec(("qpack_b",) + key, (npan, groups, rn), acc) if len(ops) == 3 else None
        b = KernelBuilder("quantized_pack")
        args: dict = {}
        srcs = []
        for a in ops:
            spec = ctx.spec(a)
            srcs.append(b.buffer(spec, a.aval.dtype, False, "in"))
            args[srcs[-1]] = spec
        dsts = []
        for spec, dt in ((wspec, np.dtype(np.uint32)), (sspec, acc), (bspec, acc))[:len(ops)]:
            dsts.append(b.buffer(spec, dt, True, "out"))
            args[dsts[-1]] = spec
        mode = e.params["mode"]
        if _float_panels(mode, ctx.caps):
            gsize, lsize = self._pack_floats(b, srcs, dsts, (n, words, groups, rn, npan), acc)
        else:
            gsize, lsize = self._pack_words(b, srcs, dsts, (n, words, groups, rn, npan), acc)
        b.name = "quantized_pack"
        return make_launch(b, args, {}, gsize, lsize, [], "copy"), wspec, sspec, bspec

    def _pack_words(self, b, srcs, dsts, sizes, acc):
        """``_pack_launch``'s body for the affine mode (and the floating ones with ``FLOAT_PANELS`` off): a work item
        per panel word, copied; the scales and biases of its position (below ``groups``) converted to ``acc`` (a
        floating mode's uint8 scale as ``_float_scale``'s value). Returns the launch sizes."""
        n, words, groups, rn, npan = sizes
        ops = self.eqn.inputs[1:]
        items = npan * words * rn
        gid, gsize, lsize = self.ctx.gid(b, items, self.ctx.wg)
        with b.when(op("lt", gid, const(items, INT32))):
            c = b.let(op("rem", gid, const(rn, INT32)), "c")
            t = b.let(op("rem", op("div", gid, const(rn, INT32)), const(words, INT32)), "t")
            pn = b.let(op("div", gid, const(rn * words, INT32)), "pn")
            col = b.let(op("add", op("mul", pn, const(rn, INT32)), c), "col")
            col = b.let(select(op("lt", col, const(n, INT32)), col, const(n - 1, INT32)), "col")
            b.store(dsts[0], gid, b.load(srcs[0], b.let(op("add", op("mul", col, const(words, INT32)), t)), UINT32))
            with b.when(op("lt", t, const(groups, INT32))):
                src = b.let(op("add", op("mul", col, const(groups, INT32)), t), "si")
                dst = b.let(op("add", op("mul", op("add", op("mul", pn, const(groups, INT32)), t), const(rn, INT32)),
                                      c), "di")
                if len(ops) == 2:   # a floating mode (FLOAT_PANELS off): the uint8 scale's value (_float_scale)
                    b.store(dsts[1], dst, b.let(_float_scale(b.load(srcs[1], src, np.dtype(np.uint8)),
                                                             self.eqn.params["mode"], acc)))
                for k_ in range(1, len(ops)) if len(ops) == 3 else ():
                    b.store(dsts[k_], dst, self._load_f(b, srcs[k_], src, ops[k_].aval.dtype, acc))
        return gsize, lsize

    def _pack_floats(self, b, srcs, dsts, sizes, acc):
        """``_pack_launch``'s body for a floating mode (``_float_panels``): a work item per packed source word of
        a panel column (``32 / bits`` codes), each code decoded once (``_float_bits``, constant shifts) and written
        as bfloat16 bits, two to a panel word (the first low; exact: E2M1 and E4M3 values have at most 4
        significant bits); the uint8 scale of its position (below ``groups``) as ``_float_scale``'s value. Every
        work item computes (past the end on the last one) and only the stores are guarded, so PoCL vectorises
        it across work items. Returns the launch sizes."""
        n, words, groups, rn, npan = sizes
        mode, bits = self.eqn.params["mode"], self.eqn.params["bits"]
        src_words = math.prod(self.eqn.inputs[1].aval.shape[1:])   # words of one weight row
        per = 32 // bits // 2   # panel words per source word
        items = npan * src_words * rn
        gid, gsize, lsize = self.ctx.gid(b, items, self.ctx.wg)
        inside = b.let(op("lt", gid, const(items, INT32)), "inside")
        item = b.let(select(inside, gid, const(items - 1, INT32)), "item")
        c = b.let(op("rem", item, const(rn, INT32)), "c")
        sw = b.let(op("rem", op("div", item, const(rn, INT32)), const(src_words, INT32)), "sw")
        pn = b.let(op("div", item, const(rn * src_words, INT32)), "pn")
        col = b.let(op("add", op("mul", pn, const(rn, INT32)), c), "col")
        col = b.let(select(op("lt", col, const(n, INT32)), col, const(n - 1, INT32)), "col")
        wd = b.load(srcs[0], b.let(op("add", op("mul", col, const(src_words, INT32)), sw)), UINT32)
        mask = const((1 << bits) - 1, UINT32)
        vals = [b.let(_float_bits(_element(b, [wd], j * bits, bits, mask), mode), "fv") for j in range(32 // bits)]
        base = b.let(op("add", op("mul", pn, const(words * rn, INT32)),
                        op("add", op("mul", sw, const(per * rn, INT32)), c)), "dw")
        svals = b.let(_float_scale(b.load(srcs[1], b.let(op("add", op("mul", col, const(groups, INT32)),
                                                                   select(op("lt", sw, const(groups, INT32)), sw,
                                                                          const(groups - 1, INT32)))),
                                          np.dtype(np.uint8)), mode, acc), "sv")
        with b.when(inside):
            for t in range(per):
                b.store(dsts[0], b.let(op("add", base, const(t * rn, INT32))),
                        op("or", op("shr", vals[2 * t], const(16, UINT32)),
                           op("and", vals[2 * t + 1], const(0xFFFF0000, UINT32))))
            with b.when(op("lt", sw, const(groups, INT32))):
                dst = b.let(op("add", op("mul", op("add", op("mul", pn, const(groups, INT32)), sw), const(rn, INT32)),
                                      c), "di")
                b.store(dsts[1], dst, svals)
        return gsize, lsize

    def _load_f(self, b, name, index, dtype, acc):
        v = b.load(name, index, dtype)
        return b.let(Cast(v, acc)) if dtype != acc else v

    def _rows_of_w(self, b, names, col, row_ids, k, gs, bits, xdt, acc):
        xs, ws, ss, bs = names
        words = k * bits // 32
        groups = k // gs
        total = [b.var(acc, const(0, acc), "acc") for _ in row_ids]
        mask = const((1 << bits) - 1, UINT32)
        wrow = b.let(op("mul", col, const(words, INT32)), "wrow")
        grow = b.let(op("mul", col, const(groups, INT32)), "grow")
        x_rows = [b.let(op("mul", r, const(k, INT32)), "xrow") for r in row_ids]
        with b.loop(const(0, INT32), const(groups, INT32), hint="g") as g:
            # LANES independent partial sums per row: the chain of dependent adds is LANES times shorter.
            lanes = LANES.get(len(row_ids), 4)
            dots = [[b.var(acc, const(0, acc), "dot") for _ in range(lanes)] for _ in row_ids]
            sums = [[b.var(acc, const(0, acc), "xsum") for _ in range(lanes)] for _ in row_ids]
            with b.loop(const(0, INT32), const(gs // 32, INT32), hint="c") as c:
                chunk = b.let(op("add", op("mul", g, const(gs // 32, INT32)), c), "chunk")
                base_w = b.let(op("add", wrow, op("mul", chunk, const(bits, INT32))), "wb")
                wd = [b.load(ws, b.let(op("add", base_w, const(t, INT32))), UINT32) for t in range(bits)]
                base_x = b.let(op("mul", chunk, const(32, INT32)), "xb")
                for j in range(32):
                    qi = _element(b, wd, j * bits, bits, mask)
                    qf = b.let(_e2m1_doubled(qi, acc) if bs is None else Cast(qi, acc), "q")
                    for r, xr in enumerate(x_rows):
                        xv = self._load_f(b, xs, b.let(op("add", xr, op("add", base_x, const(j, INT32)))), xdt,
                                          acc)
                        d, s = dots[r][j % lanes], sums[r][j % lanes]
                        b.assign(d, op("add", d, op("mul", xv, qf)))
                        if bs is not None:   # mxfp4 has no bias, so no sum of x
                            b.assign(s, op("add", s, xv))
            gi = b.let(op("add", grow, g), "gi")
            if bs is None:   # mxfp4: the doubled E2M1 values times half the E8M0 scale, no bias
                scale = b.let(_e8m0_half(b.load(ss, gi, np.dtype(np.uint8)), acc), "scale")
                for r in range(len(row_ids)):
                    b.assign(total[r], op("add", total[r], op("mul", scale, tree_sum(dots[r]))))
            else:
                scale = self._load_f(b, ss, gi, xdt, acc)
                bias = self._load_f(b, bs, gi, xdt, acc)
                for r in range(len(row_ids)):
                    dot, xsum = tree_sum(dots[r]), tree_sum(sums[r])
                    b.assign(total[r], op("add", total[r], op("add", op("mul", scale, dot), op("mul", bias, xsum))))
        return total

    def _rows_of_w_float(self, b, names, col, row_ids, k, mode, xdt, acc):
        """``transpose=True`` for the floating modes of ``_FLOAT_WALK`` (mxfp8, nvfp4: groups of 32 bytes or 16
        nibbles): the work item walks weight row ``col`` a group at a time (its ``group_size * bits / 32`` words),
        each element's value in registers (``_float_element``) multiplied into ``LANES`` partial dots per row,
        then one multiply by the group's scale (``_float_scale``); no biases, so no sum of ``x``."""
        xs, ws, ss, _ = names
        _, _, gs, bits = FLOAT_FORMATS[mode]
        gwords, groups = gs * bits // 32, k // gs
        mask = const((1 << bits) - 1, UINT32)
        total = [b.var(acc, const(0, acc), "acc") for _ in row_ids]
        wrow = b.let(op("mul", col, const(k * bits // 32, INT32)), "wrow")
        grow = b.let(op("mul", col, const(groups, INT32)), "grow")
        x_rows = [b.let(op("mul", r, const(k, INT32)), "xrow") for r in row_ids]
        lanes = LANES.get(len(row_ids), 4)
        with b.loop(const(0, INT32), const(groups, INT32), hint="g") as g:
            dots = [[b.var(acc, const(0, acc), "dot") for _ in range(lanes)] for _ in row_ids]
            base_w = b.let(op("add", wrow, op("mul", g, const(gwords, INT32))), "wb")
            wd = [b.load(ws, b.let(op("add", base_w, const(t, INT32))), UINT32) for t in range(gwords)]
            base_x = b.let(op("mul", g, const(gs, INT32)), "xb")
            for j in range(gs):
                qf = b.let(_float_element(_element(b, wd, j * bits, bits, mask), mode, acc), "q")
                for r, xr in enumerate(x_rows):
                    xv = self._load_f(b, xs, b.let(op("add", xr, op("add", base_x, const(j, INT32)))), xdt, acc)
                    d = dots[r][j % lanes]
                    b.assign(d, op("add", d, op("mul", xv, qf)))
            gi = b.let(op("add", grow, g), "gi")
            scale = b.let(_float_scale(b.load(ss, gi, np.dtype(np.uint8)), mode, acc), "scale")
            for r in range(len(row_ids)):
                b.assign(total[r], op("add", total[r], op("mul", scale, tree_sum(dots[r]))))
        return total

    def _columns_of_w(self, b, names, col, row_ids, k, n, gs, bits, xdt, acc):
        xs, ws, ss, bs = names
        words = n * bits // 32
        groups = n // gs
        total = [b.var(acc, const(0, acc), "acc") for _ in row_ids]
        bit = b.let(op("mul", col, const(bits, INT32)), "bit")
        word = b.let(op("div", bit, const(32, INT32)), "word")
        shift = b.let(Cast(op("rem", bit, const(32, INT32)), UINT32), "sh")
        nxt = b.let(select(op("lt", op("add", word, const(1, INT32)), const(words, INT32)),
                           op("add", word, const(1, INT32)), word), "nw")
        gcol = b.let(op("div", col, const(gs, INT32)), "gc")
        mask = const((1 << bits) - 1, UINT32)
        x_rows = [b.let(op("mul", r, const(k, INT32)), "xrow") for r in row_ids]
        with b.loop(const(0, INT32), const(k, INT32), hint="kk") as kk:
            wbase = b.let(op("mul", kk, const(words, INT32)), "wb")
            lo = b.load(ws, b.let(op("add", wbase, word)), UINT32)
            v = op("shr", lo, shift)
            if 32 % bits:
                hi = b.load(ws, b.let(op("add", wbase, nxt)), UINT32)
                up = op("shl", op("shl", hi, const(1, UINT32)), op("sub", const(31, UINT32), shift))
                v = op("or", v, up)
            qi = b.let(op("and", v, mask))
            qf = b.let(Cast(qi, acc), "q") if bs is not None else None
            gi = b.let(op("add", op("mul", kk, const(groups, INT32)), gcol), "gi")
            if bs is None:   # a floating mode
                mode = self.eqn.params["mode"]
                wv = b.let(op("mul", _float_scale(b.load(ss, gi, np.dtype(np.uint8)), mode, acc),
                              _float_element(qi, mode, acc)), "wv")
            else:
                wv = b.let(op("add", op("mul", self._load_f(b, ss, gi, xdt, acc), qf),
                                  self._load_f(b, bs, gi, xdt, acc)), "wv")
            for r, xr in enumerate(x_rows):
                xv = self._load_f(b, xs, b.let(op("add", xr, kk)), xdt, acc)
                b.assign(total[r], op("add", total[r], op("mul", xv, wv)))
        return total


def _wide_column_ids(b, cb, cols, n):
    """The ``cols`` output columns of column block ``cb`` (clamped to ``n - 1`` past the end) and whether each
    is below ``n``."""
    col_ids, col_ok = [], []
    for c in range(cols):
        at = b.let(op("add", op("mul", cb, const(cols, INT32)), const(c, INT32)), "cl")
        col_ok.append(op("lt", at, const(n, INT32)))
        col_ids.append(b.let(select(col_ok[-1], at, const(n - 1, INT32)), "col"))
    return col_ids, col_ok


def _block_rows(b, item, per, rows, m, hint):
    """A matrix-vector work item's place: ``(item % per`` (its column or block of columns, named ``hint``), its first
    row ``(item // per) * rows``, the ids of its ``rows`` rows)``; rows past the end (the last block) compute on the
    last row ``m - 1`` and store nothing."""
    within = b.let(op("rem", item, const(per, INT32)), hint)
    first = b.let(op("mul", op("div", item, const(per, INT32)), const(rows, INT32)), "row")
    row_ids = [b.let(select(op("lt", op("add", first, const(r, INT32)), const(m, INT32)),
                            op("add", first, const(r, INT32)), const(m - 1, INT32)), "rw")
               for r in range(rows)]
    return within, first, row_ids


def _tile_position(b, npan, rm, m, k):
    """A tiled work item's column panel (global id 0, clamped to the last of ``npan``), first row ``row0`` (global id
    1 times ``rm``) and the offsets in ``x`` of its ``rm`` rows (rows past ``m`` read the last one)."""
    panel = b.let(select(op("lt", Special("global_id", 0), const(npan, INT32)), Special("global_id", 0),
                         const(npan - 1, INT32)), "panel")
    row0 = b.let(op("mul", Special("global_id", 1), const(rm, INT32)), "row0")
    x_rows = [b.let(op("mul", select(op("lt", op("add", row0, const(r, INT32)), const(m, INT32)),
                                     op("add", row0, const(r, INT32)), const(m - 1, INT32)), const(k, INT32)), "xrow")
              for r in range(rm)]
    return panel, row0, x_rows


def _local_sums(b, partial, lid, wg, acc):
    """The work-group's sums of each row's ``partial`` values: a tree reduction in local memory (every work
    item reaches the barriers); the totals as loads of the first slot of each row."""
    rows = len(partial)
    red = b.array("local", acc, rows * wg, "red")
    for r in range(rows):
        b.store(red, op("add", const(r * wg, INT32), lid), partial[r], space="local")
    b.barrier()
    step = wg // 2
    while step:
        with b.when(op("lt", lid, const(step, INT32))):
            for r in range(rows):
                here = b.let(op("add", const(r * wg, INT32), lid))
                there = b.let(op("add", here, const(step, INT32)))
                b.store(red, here, op("add", b.load(red, here, acc, "local"), b.load(red, there, acc, "local")),
                        space="local")
        b.barrier()
        step //= 2
    return [b.load(red, const(r * wg, INT32), acc, "local") for r in range(rows)]


def _code_value(q, acc, mode):
    """The value in ``acc`` of the element code ``q`` (uint32) before its group's scale: the integer (affine), or a
    floating mode's ``_float_element`` (mxfp4's doubled E2M1 value, ...)."""
    return Cast(q, acc) if mode == "affine" else _float_element(q, mode, acc)


def _dequantized(b, q, scale, bias, acc, mode):
    """The weight of code ``q`` (uint32): ``scale * q + bias`` (affine; ``q`` through int32, as the tiled forms
    always converted it), or for a floating mode (``bias`` ``None``, ``scale`` from ``_float_scale``)
    ``scale * _float_element(q)`` (mxfp4: half the E8M0 scale times the doubled E2M1 value)."""
    if bias is None:
        return op("mul", scale, b.let(_float_element(q, mode, acc)))
    return op("add", op("mul", scale, b.let(Cast(b.let(Cast(q, INT32)), acc))), bias)



#: Whether the tiled form masks an affine element in place (``_in_place_shift``) rather than shifting it down.
IN_PLACE = True


def _in_place_shift(start, bits, mode):
    """The shift ``s`` of an affine element at bit ``start`` of a chunk that ``QuantizedMatmulGroup._tile_weight``
    masks in place (``q * 2**s`` stays below 2**31, so its int32 conversion is exact), or ``None`` (``IN_PLACE`` off,
    a floating mode, an element at shift 0 or straddling words or reaching the sign bit: shifted as ``_element``)."""
    s = start % 32
    if not IN_PLACE or mode != "affine" or s == 0 or s + bits > 31:
        return None
    return s


def _bf16_element(b, words, j, scale, acc):
    """``scale`` times element ``j`` of a span of bfloat16 panel ``words`` (two to a word, the first low): the
    element's bits moved to the top of a float32 (``_float_panels``)."""
    w = words[j // 2]
    v = Bitcast(op("shl", w, const(16, UINT32)) if j % 2 == 0 else op("and", w, const(0xFFFF0000, UINT32)), F32)
    return op("mul", scale, b.let(Cast(v, acc) if acc != F32 else v))


#: Whether affine ``transpose=True`` matrix-vector products take ``_wide`` (several columns per work item).
WIDE = True


#: ``_wide``'s choices (``kernels/tuning.py``): ``rows`` of ``x`` (at most the product's) x ``cols`` output columns
#: per work item; the default is ``wide_shape``'s.
WIDE_TUNABLE = Tunable("quantized_rows", {"rows": (1, 2, 3, 4), "cols": (4, 8, 16, 32)},
                       doc="rows of x x output columns per work item of quantized_matmul's affine matrix-vector "
                           "(decode) kernel")
#: ``{"rows": ..., "cols": ...}`` forced on ``_wide`` (benchmarks), or ``None``: ``wide_shape``'s choice.
WIDE_SHAPE = None


def wide_shape(m: int, n: int, caps) -> dict | None:
    """``_wide``'s rows x columns per work item for a product of ``m`` rows (up to ``ROWS``) and ``n`` output
    columns on a target with ``caps``, or ``None`` where the one-column form (``_rows_of_w``) is faster: one row of
    fewer than 1024 columns on PoCL (its work items then fill more work-groups, which PoCL spreads over the
    cores: 256 x 768 4-bit on PoCL 3.1, 0.07 ms against 0.12 with 16 columns, the llm's decode 1.2-1.6x faster).
    Measured at 2048 x 2048 4-bit (``benchmarks/quantized.py``; docs/performance.md "4-bit matrix-vector
    products faster than float32's"): lavapipe and PoCL 3.1 (LLVM 15) gain up to 16 columns and 4 rows per item
    (64 accumulators); PoCL 3.0 (LLVM 14) runs 3-4x slower past 16 accumulators (2 x 16 for 2 rows: 3.4 ms against
    0.8 with 2 x 8), so there it keeps ``rows x cols`` at 16 (3 rows: 1 x 16, 1.4 ms against 1.8 with 2 x 8)."""
    if WIDE_SHAPE is not None:
        return dict(WIDE_SHAPE)
    facts = dict(getattr(caps, "tuning_facts", ()) or ())
    if facts.get("compiler") == "pocl" and m == 1 and n < 1024:
        return None
    if facts.get("compiler") == "pocl" and facts.get("llvm", 0) < 15:
        return {"rows": 2, "cols": 8} if m in (2, 4) else {"rows": 1, "cols": 16}
    return {"rows": min(ROWS, m), "cols": 16}


def _in_place(s: int, bits: int) -> int:
    """``s`` where an element at bit ``s`` of a word is masked in place (inside the word, not its lowest or highest
    element), else 0 (shifted down: bit 0 needs no shift, the top element no mask, a straddling one two words)."""
    return s if 0 < s and s + bits < 32 else 0


def _element(b, words, start, bits, mask):
    """The ``bits``-bit integer at bit ``start`` of a chunk held in ``words`` (constant shifts only)."""
    t, s = divmod(start, 32)
    v = words[t] if s == 0 else op("shr", words[t], const(s, UINT32))
    if s + bits > 32:
        v = op("or", v, op("shl", words[t + 1], const(32 - s, UINT32)))
    if s + bits < 32 or s + bits > 32:
        v = op("and", v, mask)
    return b.let(v, "qi")


#: E2M1 magnitudes doubled (0, 1, 2, 3, 4, 6, 8, 12), one per nibble of a constant: code ``c``'s is nibble ``c & 7``.
_E2M1_DOUBLED_NIBBLES = 0xC8643210


def _e2m1_doubled(q, acc):
    """Twice the value of the E2M1 code ``q`` (uint32 below 16) in ``acc``: the doubled magnitude from a constant's
    nibble, negated for sign bit 3 (exact; half the scale restores it, ``_e8m0_half``)."""
    t = Cast(op("and", op("shr", const(_E2M1_DOUBLED_NIBBLES, UINT32),
                          op("shl", op("and", q, const(7, UINT32)), const(2, UINT32))), const(15, UINT32)), INT32)
    neg = op("ne", op("and", q, const(8, UINT32)), const(0, UINT32))
    return Cast(select(neg, op("neg", t), t), acc)


def _e2m1_doubled_bits(q):
    """``_e2m1_doubled``'s value as float32 bits (uint32) built with integer ops, no table and no conversion: a
    magnitude code ``c`` (``q & 7``) of 2 or more doubled is ``2**(c >> 1) * (1 + (c & 1) / 2)``, whose bits are
    ``(c + 254) << 22`` (the exponent ``(c >> 1) + 127`` above the significand's top bit ``c & 1``); 0 and 1 are 0.0
    and 1.0, ``-c & 0x3F800000``; sign bit 3 moves to bit 31 (code 8 is -0.0). In the tiled form's copy kernel
    (``_pack_floats``) it took mxfp4's copy from 3.5 to 2.1 ms on PoCL 3.0 (1024 x 1024); in the product kernels
    the table was as fast or faster (256 rows of the tiled form with the codes: 18.3 ms against 14.7), so they keep
    ``_e2m1_doubled``."""
    mag = op("and", q, const(7, UINT32))
    small = op("and", op("sub", const(0, UINT32), mag), const(0x3F800000, UINT32))
    normal = op("shl", op("add", mag, const(254, UINT32)), const(22, UINT32))
    low = select(op("lt", mag, const(2, UINT32)), small, normal)
    return op("or", low, op("shl", op("and", q, const(8, UINT32)), const(28, UINT32)))


def _e8m0_half(s, acc):
    """Half the E8M0 scale of the uint8 ``s``, ``2**(s - 128)``, in ``acc``: float32 bits ``s << 23`` (``s = 0``:
    ``2**-127``, the subnormal ``0x400000``; ``s = 255``: inf, as MLX), times 0.5."""
    su = Cast(s, UINT32)
    bits = select(op("eq", su, const(0, UINT32)), const(0x400000, UINT32), op("shl", su, const(23, UINT32)))
    f = op("mul", Bitcast(bits, F32), const(0.5, F32))
    return Cast(f, acc) if acc != F32 else f


#: The floating modes whose ``transpose=True`` product walks with ``_rows_of_w_float`` (mxfp4 has its own branch
#: in ``_rows_of_w``).
_FLOAT_WALK = ("mxfp8", "nvfp4")


def _e4m3_value(q, acc):
    """The value of the E4M3 code ``q`` (uint32 below 256) in ``acc``, as MLX's ``from_fp8`` (``packed.E4M3``:
    0x7F and 0xFF are NaN): the magnitude bits shifted into float32's significand with the exponent rebiased by
    120 (``v``), which is the value of a normal code; a subnormal one (exponent field 0) is ``2 * v - 2**-6``;
    bit 7 is or-ed into the sign. No conversion from an integer (a uint32 -> float conversion made the
    mxfp8 product 4.8x slower on PoCL) and no denormal float on the way."""
    mag = op("and", q, const(0x7F, UINT32))
    v = Bitcast(op("add", op("shl", mag, const(20, UINT32)), const(120 << 23, UINT32)), F32)
    v = select(op("lt", mag, const(8, UINT32)), op("sub", op("mul", v, const(2.0, F32)), const(2.0 ** -6, F32)), v)
    bits = select(op("eq", mag, const(0x7F, UINT32)), const(0x7FC00000, UINT32), Bitcast(v, UINT32))
    v = Bitcast(op("or", bits, op("shl", op("and", q, const(0x80, UINT32)), const(24, UINT32))), F32)
    return Cast(v, acc) if acc != F32 else v


def _float_element(q, mode, acc):
    """The value a floating mode's element code ``q`` (uint32) stands for, in ``acc``, before ``_float_scale``:
    E2M1 doubled (mxfp4, nvfp4: ``_e2m1_doubled``) or E4M3 (mxfp8)."""
    return _e4m3_value(q, acc) if mode == "mxfp8" else _e2m1_doubled(q, acc)


def _float_bits(q, mode):
    """``_float_element``'s float32 value as its bits (uint32): E2M1 doubled from integer ops
    (``_e2m1_doubled_bits``), E4M3 through ``_e4m3_value``."""
    return Bitcast(_e4m3_value(q, F32), UINT32) if mode == "mxfp8" else _e2m1_doubled_bits(q)


def _float_scale(s, mode, acc):
    """The scale of a floating mode's uint8 ``s``, in ``acc``, matching ``_float_element``: half the E8M0 scale
    (mxfp4, whose elements are doubled), the E8M0 scale (mxfp8), half the E4M3 value (nvfp4); all exact."""
    if mode == "nvfp4":
        return op("mul", _e4m3_value(Cast(s, UINT32), acc), const(0.5, acc))
    half = _e8m0_half(s, acc)
    return op("mul", half, const(2.0, acc)) if mode == "mxfp8" else half


def _pow2_at_least(n: int) -> int:
    p = 1
    while p < n:
        p *= 2
    return p


#: Whether the floating modes' tiled form (``_tiled``) on CPU OpenCL devices lays its panels out as bfloat16 values
#: (the copy kernel decodes each code once; the product kernel's decode is one shift or mask) instead of the packed
#: codes (decoded per element in the product kernel: E4M3 made mxfp8's product 26x slower than affine's on PoCL 3.0).
#: Off: the form of before (``benchmarks/quantized_tiles.py --before``).
FLOAT_PANELS = True


def _float_panels(mode, caps) -> bool:
    """Whether the tiled form of ``mode`` holds bfloat16 values in its panels (``FLOAT_PANELS``): floating modes on
    CPU OpenCL devices (``uniform_guard``). lavapipe took 1.4x longer with them (four times the panel bytes: 110 ms
    against 77 at 256 rows of 1024 x 1024 mxfp4), and a GPU's memory is its bottleneck more than its arithmetic, so
    they keep the codes, decoded in registers."""
    return FLOAT_PANELS and mode != "affine" and bool(getattr(caps, "uniform_guard", False))


#: Whether ``transpose=True`` prefill products take ``_subgroup_tiled`` where ``subgroup_lanes`` allows (off: the
#: panel form ``_tiled``; ``benchmarks/quantized_tiles.py`` compares the two).
SUBGROUP_TILES = True
#: ``_subgroup_tiled``'s default tile: rows per subgroup x columns per work item. 16 x 8 was best on lavapipe (64 rows
#: of a 4-bit product, process CPU ms, load 12: 1024 x 1024 20.0-21.8 against 32 x 4 24.8-29.6, 16 x 4 28.3,
#: 8 x 16 29.0, 8 x 8 29.5, 32 x 2 38.7; 1024 x 2816 56.8 against 70.0 with 32 x 4).
SUBGROUP_TILE = {"rows": 16, "cols": 8}
SUBGROUP_TUNABLE = Tunable("quantized_subgroup", {"rows": (16, 32), "cols": (4, 8)},
                           doc="rows per subgroup x columns per work item of quantized_matmul's subgroup prefill "
                               "kernel (CPU WebGPU adapters)",
                           valid=lambda c, f: c["rows"] * c["cols"] <= 128)


def subgroup_lanes(m, n, params, xdt, odt, opts) -> int:
    """The subgroup size ``_subgroup_tiled`` runs with for a ``transpose=True`` product of ``m`` rows and ``n``
    columns (``params``: the equation's) of float32 ``x`` (``xdt``) and result (``odt``), or 0 where it does not
    apply: the scheduler options ``dot_subgroup`` (native webgpu on a CPU adapter with subgroups) and ``dot_vec4``
    (``x`` read four to a load), at least a subgroup of rows and of columns, and whole ``vec4`` loads per word
    (2, 4 or 8 bits)."""
    lanes = int(opts.get("dot_subgroup", 0) or 0)
    f32 = np.dtype(np.float32)
    if not SUBGROUP_TILES or not lanes or not opts.get("dot_vec4", False) or not params["transpose"]:
        return 0
    if xdt != f32 or odt != f32 or params["bits"] not in (2, 4, 8) or min(m, n) < lanes:
        return 0
    return lanes


#: Rows of ``x`` above which a product takes a tiled form (at most ``ROWS``: the matrix-vector form).
TILED_ROWS = ROWS


def tiled(m: int, caps) -> bool:
    """Whether a product of ``m`` rows of ``x`` takes a tiled (prefill) form (``_tiled`` for ``transpose=True``,
    ``_tiled_columns`` for ``transpose=False``): more rows than one work item of the matrix-vector form takes."""
    return m > TILED_ROWS


#: Work items per work-group of the cooperative form.
_COOPERATIVE_WG = 64


def cooperative(caps) -> bool:
    """Whether ``transpose=True`` products take the cooperative form (GPUs: work-group memory, tiles that pay,
    no CPU-style uniform guards); CPU devices take the work-item-per-column form."""
    return (bool(caps.local_memory) and bool(caps.tiling_pays) and getattr(caps, "matmul_tiling", "local") == "local"
            and not getattr(caps, "uniform_guard", False)
            and (caps.max_workgroup_size is None or caps.max_workgroup_size >= _COOPERATIVE_WG))


def unsupported_reason(eqn, caps):
    """Why the kernels cannot run this ``quantized_matmul`` equation on a target with ``caps``, or ``None``: a work
    item's walk longer than the driver's loop limit (lavapipe stops loops silently past it). Every mode (affine,
    mxfp4, mxfp8, nvfp4) has every form."""
    limit = getattr(caps, "max_loop_iterations", None)
    k = eqn.inputs[0].aval.shape[-1]
    steps = k // 32 if eqn.params["transpose"] else k
    if limit is not None and steps > limit:
        return (f"quantized_matmul over a contraction of {k}: a work item walks {steps} steps, past this "
                f"device's {limit} loop iterations per invocation")
    return None


def _operand_buffer(ctx, a):
    """Every operand is read in place from a buffer (the packed words above all)."""
    return (a, 0, contiguous_strides(a.aval.shape)) if isinstance(a, Var) else None


def _zero_size(e):
    """An empty contraction (no weight columns): the product is 0."""
    return [fill(e.outputs[0], 0)], {}


#: What ``schedule`` collects into its tables ``GROUPS`` and ``OPERAND_VIEWS``.
GROUPS = {quantized_matmul_p: QuantizedMatmulGroup}
OPERAND_VIEWS = {quantized_matmul_p: _operand_buffer}
REWRITES.setdefault(quantized_matmul_p, _zero_size)
