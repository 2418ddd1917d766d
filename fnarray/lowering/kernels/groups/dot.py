"""Matrix-multiply kernels: ``DotGroup`` (``dot_general`` over strided operand views, tiled in local memory
where the target says tiling pays, with the elementwise epilogue fused) and operand views.
"""

from __future__ import annotations

import math

import numpy as np

from fnarray.core import primitives as P
from fnarray.core.ir import Literal, Var
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
    placed,
    reshape_strides,
    tree_sum,
    uniform_binding,
    vectors_fit,
    vec4_binding,
)
from fnarray.lowering.kernels.groups import register_tiles
from fnarray.lowering.kernels.groups.register_tiles import (
    pack_block,
    packs_launch,
    padded_k,
    panels,
    register_dot,
    register_dtype,
)
from fnarray.lowering.kernels.index import Ix, IxDiv, IxMod, ix_data, to_expr, unravel
from fnarray.lowering.kernels.ir import BOOL, INT32, UINT32, Broadcast, Cast, Lane, Op, Special, const, vector_dtype
from fnarray.lowering.kernels.rules import (
    LOW_BIT,
    add_of,
    convert,
    mul_of,
    op,
    select,
)
from fnarray.lowering.kernels.tuning import Tunable

# ---------------------------------------------------------------------------- matrix multiply

#: The smallest ``M * N * K`` that takes the register-tiled kernels where the target asks for them.
REGISTER_MIN_WORK = 1 << 16
#: The most rows, and the fewest rhs elements, of a register-tiled product that reads its rhs unpacked
#: (``DotGroup._unpacked_rhs``). Products without the rhs pack, against with it, at loads 6-10 on both PoCLs:
#: ``[32, 512-784] @ [512-784, 512-784]`` 0.6-0.9x the time, ``[64, 512] @ [512, 512]`` 0.76-0.94x, M = 100-128
#: 0.8-1.4x; a 128 x 128 rhs 0.8-1.2x (its pack takes a few us, in the lhs pack's launch).
UNPACKED_RHS_ROWS = 64
UNPACKED_RHS_MIN = 1 << 16
#: Whether a skinny product with a transposed rhs (``d @ w.T``) runs transposed, reading the rhs where it lies
#: (``DotGroup._transposed_rhs``); off, the rhs is packed (benchmarks/backward_products.py compares the two).
TRANSPOSED_PRODUCTS = True
#: The most rows of a product that runs transposed. Against the packed form (both packs in blocks), load 13:
#: ``[M, 512-784] @ [512-784, 512-784]``: M = 64 0.77-0.97x on both PoCLs; M = 100-256 0.82-0.92x on PoCL 3.0
#: but 0.98-1.08x on 3.1: the same bound as the unpacked rhs.
TRANSPOSED_ROWS = UNPACKED_RHS_ROWS


#: The most rows of ``x`` the word form (``DotGroup._words``: low-bit weights read a word at a time) takes, one
#: work item computing them all for its column (a decode step's 1 to 4 rows).
WORD_ROWS = 4
#: Columns one work item of the word form computes (each row's ``x`` element loaded once for them), by the axis the
#: bytes run along (``DotGroup._word_plans``). Along ``k``: best of 1, 2, 4, 8, 16 on all three CPU devices (4096 x
#: 4096 float8 against float32, 1 and 4 rows, process CPU time): float8's speed-up with 1 column 0.91/1.09/3.1x
#: (PoCL 3.0/3.1/lavapipe at 2048), with 8 columns 2.6/2.0/3.7x. Along ``n`` (PoCL 3.0, load 11, 1 and 4 rows): 4
#: columns 29/34 ms, 8 23/30, 16 23/22, 32 19/19 (float32's 130/26); 16 keeps a GPU's registers in bounds.
WORD_COLS = {"k": 8, "n": 16}


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


#: The most accumulators (rows x cols) of a blocked product's work item: lavapipe's compile time grows much faster
#: than the block's gain past it (the transformer step's first call: 6 s at 8 x 4, 68.5 s at 16 x 8, 332 s at
#: 16 x 16, docs/performance.md).
BLOCK_ACCUMULATORS = 128


def _block_valid(choice, facts) -> bool:
    """A block worth building: at most ``BLOCK_ACCUMULATORS`` accumulators, and no taller (wider) than the
    output's rows (columns) need where a smaller candidate already covers them (both narrow to the same kernel)."""
    if choice["rows"] * choice["cols"] > BLOCK_ACCUMULATORS:
        return False
    return all(choice[k] == 4 or choice[k] // 2 < facts.get(k, choice[k]) for k in ("rows", "cols"))


#: The fewest multiply-adds (batch x rows x cols x contraction) of a product whose block the cost model
#: (``_block_cost``) enlarges past the default. With a cold shader cache lavapipe compiles an 8 x 16 block
#: ~1.5 s longer than 8 x 4 per kernel (first calls, CPU s: the digits MLP step 2.7 -> 16.0, the transformer step
#: 10.1 -> 45.7), and a product under 2**23 multiply-adds (~4.5 ms at 8 x 4 there) gains under ~1.5 ms a call:
#: over a thousand calls to repay its compile. Above it (the transformer's 1024 x 256 x 64 products, the VAE's)
#: the gain is 2.5-6.7 ms a call (docs/performance.md).
BLOCK_MIN_WORK = 1 << 23


def block_loads(block, along) -> tuple:
    """``(loads, addresses)`` of one contraction step of a ``block = (rows, cols)`` work item of the blocked
    product (``DotGroup._blocked``), each operand read as ``along`` says (``_vector_reads``: ``"k"``, four steps
    of a row per load; ``"rows"``, four rows of a step per load; ``None``, an element per load): the loads per
    step, and the row addresses the work item keeps live across the loop."""
    loads = addresses = 0.0
    for r, how in zip(block, along, strict=True):
        loads += r / 4 if how is not None else r
        addresses += r / 4 if how == "rows" else r
    return loads, addresses


def _block_cost(choice, default, facts) -> float:
    """The blocked product's cost model on a CPU adapter (``facts["device"] == "cpu"``: lavapipe runs
    ``simd_bits / 32`` work items per vector instruction and gathers each of their loads lane by lane), in
    vector multiply-adds per output and contraction step: each gathered load costs one instruction per lane
    (a ``vec4`` load, ``_vector_reads``, one per lane for four elements), so a step costs ``loads x lanes``
    for the block's ``rows x cols`` multiply-adds, plus the multiply-add itself; the padding of the output
    (``facts`` ``rows x cols``) to whole narrowed blocks is work too. The row addresses a work item keeps
    live (``block_loads``) break ties, then wider blocks (the output's and the rhs's contiguous dimension).
    A product of fewer than ``BLOCK_MIN_WORK`` multiply-adds (``facts["work"]``) keeps the default: the
    larger block's compile costs more than it saves in a thousand calls.
    Accumulators are bounded by ``BLOCK_ACCUMULATORS`` (``valid``), past which lavapipe's compile time
    explodes; below it the spilled accumulators are contiguous stack slots, cheap against a gather.
    Measured against ``full``'s choices on the transformer and MLP steps' 34 products (lavapipe, 256 bits):
    docs/performance.md. Elsewhere (a GPU, or no facts): the default."""
    if (facts.get("device") != "cpu" or "rows" not in facts or "cols" not in facts
            or facts.get("work", BLOCK_MIN_WORK) < BLOCK_MIN_WORK):
        return float(choice != default)
    lanes = max(1, int(facts.get("simd_bits", 128)) // 32)
    rows, cols = facts["rows"], facts["cols"]
    r, c = min(choice["rows"], rows), min(choice["cols"], cols)
    loads, addresses = block_loads((r, c), (facts.get("lhs_vec"), facts.get("rhs_vec")))
    padded = -(-rows // r) * r * -(-cols // c) * c / (rows * cols)
    return padded * (1 + loads * lanes / (r * c)) + 1e-3 * addresses / (r * c) - 1e-6 * c


#: Outputs per work item of the blocked product (``DotGroup._blocked``, where ``dot_block`` asks for it:
#: webgpu on a CPU adapter). Larger blocks run lavapipe's products up to 2x faster (8 x 16 against 8 x 4,
#: docs/performance.md) and take about twice as long to compile. Mode ``"off"`` keeps the scheduler option's
#: block (8 x 4); mode ``"fast"`` takes the cost model's (``_block_cost``: larger blocks for products of at least
#: ``BLOCK_MIN_WORK`` multiply-adds) untimed; mode ``"full"`` times every
#: block per product on the device and keeps the choice in the persistent cache, which ``"fast"`` reuses.
BLOCK_TUNABLE = Tunable("dot_block", {"rows": (4, 8, 16), "cols": (4, 8, 16)},
                        doc="outputs per work item (rows x cols) of the blocked matrix product",
                        valid=_block_valid, cost=_block_cost)


def _subgroup_valid(choice, facts) -> bool:
    """A subgroup tile worth building: whole row loads of the subgroup's ``lanes`` (``facts``) and at most
    ``BLOCK_ACCUMULATORS`` accumulators per work item (lavapipe's compile time, as the blocked product's)."""
    return choice["rows"] % facts.get("lanes", 8) == 0 and choice["rows"] * choice["cols"] <= BLOCK_ACCUMULATORS


#: The fewest multiply-adds of a product whose subgroup tile the cost model (``_subgroup_cost``) chooses (below
#: it the default 16 x 4). Half ``BLOCK_MIN_WORK``: the transformer's 2**22 products gain 0.4-1.1 ms a call
#: from the model's tile (its weight gradients 3x; ~20 ms a step), for +6-12 s of cold shader compiles of its
#: first call (Mesa's cache off), repaid within ~600 steps (docs/performance.md, eighteenth session).
SUBGROUP_MIN_WORK = 1 << 22

#: What a storage-bound operand's element costs the subgroup form against a uniform-bound one's
#: (``_subgroup_cost``): lavapipe (Mesa 22.3) loads a storage buffer at per-lane addresses lane by lane, each
#: lane's element bounds-checked and inserted into the vector through the stack, and gathers a uniform array's
#: lanes in one go. 4 ranks the tiles of the transformer's and VAE's products as measured (docs/performance.md,
#: eighteenth session).
STORAGE_GATHER = 4.0


#: What a multiply-add of the subgroup form pays for its accumulator's trip through the stack in the ``"k"`` order
#: (``_subgroup_cost``; a ``"rows"`` order accumulator makes the trip once per ``step`` multiply-adds): lavapipe
#: holds each of a work item's values in a vector register, 16 of them, and a tile's 32-128 accumulators are
#: spilled. 0.6 prices the row order at 0.8x the ``"k"`` order's time, as the VAE's eight large products and the
#: transformer's sixteen measured (0.65-0.97x; docs/performance.md, twenty-third session).
ACCUMULATOR_TRIP = 0.6


def _subgroup_cost(choice, default, facts) -> float:
    """The subgroup form's cost model on a CPU adapter (lavapipe), in the blocked product's units
    (``_block_cost``): per output and contraction step, one multiply-add plus the element loads a work item
    makes, ``rows / lanes`` lhs values (the subgroup shares them; a quarter of that where the lhs is read four
    rows a load, ``facts["lhs_rows"]``, at a tile of ``4 x lanes`` rows) and ``cols`` rhs values, each gathered
    lane by lane, an operand bound as storage (``facts`` ``lhs_uniform``/``lhs_uniform_tall``/``rhs_uniform``,
    ``DotGroup._subgroup_uniform``) ``STORAGE_GATHER`` times a uniform one's; plus the accumulator's trip
    through the stack (``ACCUMULATOR_TRIP``, once per ``facts["step"]`` multiply-adds in the ``"rows"`` order);
    times the output's padding to whole tiles. Products under ``SUBGROUP_MIN_WORK`` multiply-adds keep the
    default: a 32 x 4 tile compiles ~0.5 s longer than 16 x 4 with a cold shader cache. Elsewhere (a GPU, or no
    facts): the default."""
    if (facts.get("device") != "cpu" or "rows" not in facts or "cols" not in facts
            or facts.get("work", SUBGROUP_MIN_WORK) < SUBGROUP_MIN_WORK):
        return float(choice != default)
    lanes = int(facts.get("lanes", 8))
    rows, cols = min(choice["rows"], facts["rows"]), min(choice["cols"], max(1, facts["cols"] // lanes))
    width = lanes * cols
    padded = -(-facts["rows"] // rows) * rows * -(-facts["cols"] // width) * width / (facts["rows"] * facts["cols"])
    tall = rows % (4 * lanes) == 0
    lhs = 1.0 if facts.get("lhs_uniform_tall" if tall else "lhs_uniform", True) else STORAGE_GATHER
    if tall and facts.get("lhs_rows"):
        lhs /= 4
    rhs = 1.0 if facts.get("rhs_uniform", True) else STORAGE_GATHER
    trip = ACCUMULATOR_TRIP / (facts.get("step", 1) if choice.get("order") == "rows" else 1)
    return padded * (1 + trip + lanes * (lhs * rows / lanes + rhs * cols) / (rows * cols))


#: Whether the subgroup form runs where the scheduler option asks for it (off: the blocked product;
#: ``benchmarks/webgpu_products.py`` compares the two).
SUBGROUP_PRODUCTS = True
#: Whether the blocked and subgroup products store four adjacent columns at a time where the scheduler option
#: ``dot_store4`` asks (``DotGroup._wide_stores``; off: one element per store, ``benchmarks/webgpu_stores.py``
#: compares the two).
WIDE_STORES = True
#: The subgroup form of the blocked product (``DotGroup._subgroup``, where the scheduler option ``dot_subgroup``
#: asks: native webgpu on a CPU adapter with subgroups): a subgroup of work items computes ``rows`` rows of the
#: output, each work item ``cols`` columns of them; each work item loads ``rows / lanes`` lhs values a step and
#: the subgroup broadcasts them (lavapipe gathers a load lane by lane, and broadcasts a lane's value in one
#: shuffle). Default 16 x 4 (compiled as fast as the 8 x 4 block, 1.4-2x faster than it); the cost model
#: (``_subgroup_cost``) takes 32 x 4 for products of ``SUBGROUP_MIN_WORK`` multiply-adds or more (1.7-2x faster
#: than the 8 x 16 block, compiled in half its time; docs/performance.md), 16 x 8 where the lhs is gathered from
#: storage and the rhs is uniform (the transformer's activations times a weight). ``order``: how ``_accumulate``
#: walks an iteration's multiply-adds, ``"k"`` (every accumulator at each step) or ``"rows"`` (each lhs row's
#: accumulators through the iteration's steps, its broadcasts where they are used: 0.65-0.97x the time on the VAE's
#: and transformer's large products, bit for bit the same sums), which the model takes past ``SUBGROUP_MIN_WORK``
#: (``ACCUMULATOR_TRIP``). ``full`` times every tile.
SUBGROUP_TILE = {"rows": 16, "cols": 4, "order": "k"}
SUBGROUP_TUNABLE = Tunable("dot_subgroup", {"rows": (8, 16, 32), "cols": (4, 8), "order": ("k", "rows")},
                           doc="rows per subgroup x columns per work item of the subgroup matrix product",
                           valid=_subgroup_valid, cost=_subgroup_cost)

#: Whether the blocked and subgroup products read a ``vec4`` operand whose whole buffer fits the scheduler option
#: ``dot_uniform`` (bytes; native webgpu on a CPU adapter) through a uniform binding (off: a storage binding;
#: ``benchmarks/webgpu_uniform_products.py`` compares the two). Lavapipe (Mesa 22.3) loads a storage buffer at
#: per-lane addresses lane by lane in a loop (a branch and a bounds test per lane), a uniform buffer by one
#: gather: a raw 1024 x 64 x 64 product 0.60x the CPU time with its 16 KiB rhs so bound (docs/performance.md).
UNIFORM_OPERANDS = True

#: Whether a single-batch product's ``vec4`` operand read four rows (lhs) or columns (rhs) at a time (``"rows"``:
#: a weight gradient's ``x.T @ d``, the VAE's ``[32, 784]`` activations as a weight gradient's rhs) whose buffer is
#: over ``dot_uniform`` bytes is bound as several uniform windows of the buffer, each a run of the contraction's
#: steps, where the scheduler option ``dot_uniform_windows`` ``(bindings, alignment)`` allows (native webgpu on a CPU
#: adapter: the stage's uniform buffers less the scalars' one, ``minUniformBufferOffsetAlignment``): the loop over
#: the contraction is split where a window ends (``_accumulate``; each accumulator adds in the contraction's order,
#: so the results are the storage kernel's bits). Off: a storage binding (``benchmarks/webgpu_uniform_products.py
#: --windows`` compares the two).
UNIFORM_WINDOWS = True

#: Whether the subgroup form reads a single-batch lhs whose rows are read four contraction steps a load (``"k"``: the
#: transformer's ``[1024, 64]`` and ``[1024, 256]`` activations times a weight) and whose buffer is over
#: ``dot_uniform`` bytes through a uniform window of the buffer along its rows, one dispatch per window
#: (``_row_windows``: each binds its own 64 KiB or less at its own offset and computes the output rows it holds),
#: where the scheduler option ``dot_uniform_windows`` allows (native webgpu on a CPU adapter): lavapipe gathers a
#: uniform array's lanes at once and a storage buffer's lane by lane. The kernel's source is the same for every
#: window (one pipeline); each accumulator adds in the contraction's order, so the results are the storage
#: kernel's bits. Off: a storage binding (``benchmarks/webgpu_uniform_products.py --row-windows`` compares the two).
#: Where a tile's rows are over one window (the VAE's ``[32, 784]`` lhs in 32-row tiles, 100 KiB), each dispatch
#: binds its tile as several windows of whole subgroup loads of rows (``_row_windows``' parts: two of 16 rows), each
#: load reading the window that holds its rows.
UNIFORM_ROW_WINDOWS = True
#: The most dispatches (row or batch windows) a product is split into (``UNIFORM_ROW_WINDOWS``,
#: ``UNIFORM_BATCH_WINDOWS``); more rows or batch elements than that many windows hold keep the storage binding, one
#: dispatch. The subgroup form's 128 accumulators a work item make a product's time its multiply-adds and
#: broadcasts, not its loads: a uniform window saves little (the transformer's ``[1024, 64]`` lhs, 4 windows, equal
#: with ``LP_NUM_THREADS=0``), and past 4 dispatches the launches cost more than it saves (lavapipe, load 14: the
#: ``[1024, 256]`` lhs in 16 windows 1.25-1.38x the storage kernel's CPU time, the attention products in 16 batch
#: windows 1.28-1.48x, in 4 0.92x; docs/performance.md, twenty-first session). 32 before.
ROW_WINDOWS_MAX = 4

#: Whether the subgroup form reads a batched product's ``vec4`` operands whose buffers are over ``dot_uniform`` bytes
#: (attention's ``q @ k^T`` and ``p @ v``, batch = batch x heads) through uniform windows of whole batch elements,
#: one dispatch per run of ``per`` batch elements (``_batch_windows``: each binds the bytes of its batch elements of
#: each operand, at most 64 KiB, at its own offset), where the scheduler option ``dot_uniform_windows`` allows
#: (native webgpu on a CPU adapter: lavapipe gathers a uniform array's lanes at once, a storage buffer's lane by
#: lane). One kernel source for every window; each accumulator adds in the contraction's order, so the results are
#: the storage kernel's bits. Off: storage bindings (``benchmarks/webgpu_uniform_products.py --batch-windows``).
UNIFORM_BATCH_WINDOWS = True

#: Whether the scheduler option ``dot_batch_views`` (native webgpu on a CPU adapter) lets a product read an operand
#: whose batch dimensions keep a stride each (``DotGroup.plan``'s ``split``: the transformer's attention products
#: over ``[batch, seq, heads, d]`` views) in place, instead of a ``dot_operand_copy`` kernel first (off: the copy;
#: ``benchmarks/webgpu_batch_views.py`` compares the two).
BATCH_VIEWS = True


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

    def takes_root(self, reads, own) -> bool:
        """Whether a root (its buffer ``reads``, computed at element ``own``) joins the product's epilogue: not where
        the scheduler option ``dot_streamed`` ``(k, size)`` (native webgpu on a CPU adapter) has the contraction
        ``K <= k``, the output ``size`` elements or more, and the root reads another array of the output's size
        element by element (an optimizer update's moment and parameter). lavapipe pays ~2x per element for those
        accesses in a product's epilogue, after the work item's accumulators, what a map kernel pays; with a
        short contraction that is most of the product's time (the VAE step's K = 32 weight gradients with their
        momentum update). The product then stores its result and a map kernel updates; smaller outputs keep
        their epilogue (the map kernel's launch would cost more)."""
        k, least = self.ctx.opts.get("dot_streamed", (0, 0))
        size = math.prod(self.shape)
        if self.K > k or size < least:
            return True
        return not any(r not in self.products and r.aval.size == size and own in keys for r, keys in reads.items())

    def plan(self, operand, groups, split=False):
        """``(base var, offset, strides per group)`` reading ``operand`` in place, or ``None``. With ``split``, a
        first (batch) group whose dimensions do not collapse to one stride (attention's ``[batch, seq, heads, d]``
        read per (batch, head)) gets ``((size, stride), ...)``, its dimensions row-major (``batch_offset``)."""
        view = operand_view(self.ctx, operand)
        if view is None:
            return None
        base, offset, strides = view
        shape = operand.aval.shape
        out = []
        for i, dims in enumerate(groups):
            s = collapse_stride(dims, shape, strides)
            if s is None and split and i == 0:
                s = tuple((shape[d], strides[d]) for d in dims if shape[d] != 1)
            if s is None:
                return None
            out.append(s)
        return base, offset, tuple(out)

    def operand_plans(self, split=None):
        """The ``plan`` of each operand in (batch, rows, contraction) and (batch, contraction, columns) order;
        ``split`` (default: the scheduler option ``dot_batch_views``, outside the register-tiled kernels) lets
        the batch dimensions keep a stride each (``plan``)."""
        if split is None:
            split = BATCH_VIEWS and bool(self.ctx.opts.get("dot_batch_views", False)) and not self._register_tiled()
        lhs, rhs = self.eqn.inputs
        lp = self.plan(lhs, (self.lb, self.lf, self.lc), split)
        rp = self.plan(rhs, (self.rb, self.rc, self.rf), split)
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
        words = self._word_plans()
        if words is not None:
            return [self._words(*words)]
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
        elif self._block() == (1, 1):
            launches.append(self._simple(lp, rp))
        elif self._subgroup_lanes(lp, rp):
            lanes = self._subgroup_lanes(lp, rp)
            launches.extend(self.ctx.tuned(SUBGROUP_TUNABLE, dict(SUBGROUP_TILE),
                                           lambda c: self._subgroup(lp, rp, lanes, self._subgroup_tile(c, lanes),
                                                                    order=c.get("order", "k")),
                                           {"lanes": lanes, "rows": self.M, "cols": self.N, "work": B * M * N * K,
                                            "step": 1 if K % 4 else 4, **self._subgroup_uniform(lp, rp, lanes)}))
        else:
            ry, rx = self._block()
            along = self._vector_reads(lp, rp, (4, 4)) if lp[0].dtype == rp[0].dtype == dt else (None, None)
            launches.extend(self.ctx.tuned(BLOCK_TUNABLE, {"rows": ry, "cols": rx},
                                           lambda c: [self._blocked(lp, rp, self._narrowed(c))],
                                           {"rows": self.M, "cols": self.N, "lhs_vec": along[0],
                                            "rhs_vec": along[1], "work": B * M * N * K}))
        return launches

    def _word_plans(self):
        """``(lhs plan, rhs plan, along)`` (plans with buffer specs) of the word form, or ``None`` where it does not
        apply: up to ``WORD_ROWS`` rows of a float product whose right operand is a low-bit byte array (float8
        weights read through their ``astype``: ``operand_view``) laid out with its bytes consecutive along the
        contraction (``along="k"``: ``x @ w8.astype(f32).T``) or the output columns (``"n"``: ``x @ w8.astype(f32)``),
        each row of them starting at a word, so a work item reads four elements per 32-bit word."""
        lp, rp = self.operand_plans(split=False)
        if lp is None or rp is None or rp[0].aval.dtype not in LOW_BIT:
            return None
        dt = self.eqn.inputs[0].aval.dtype
        _, roff, (rsb, rsk, rsn) = rp
        if not (dt.kind == "f" and self._accumulator_dtype() == dt and self.M <= WORD_ROWS and roff % 4 == 0
                and rsb % 4 == 0):
            return None
        if rsk == 1 and self.K % 4 == 0 and rsn % 4 == 0:
            along = "k"
        elif rsn == 1 and self.N % 4 == 0 and rsk % 4 == 0:
            along = "n"
        else:
            return None
        return (self.ctx.spec(lp[0]), lp[1], lp[2]), (self.ctx.spec(rp[0]), rp[1], rp[2]), along

    def _words(self, lp, rp, along):
        """The product of up to ``WORD_ROWS`` rows with low-bit bytes (``_word_plans``): a work item per (batch,
        block of ``WORD_COLS`` columns) computes every row, loading the bytes four to a uint32 word (the byte
        buffer bound as words: along ``k``, four steps of one column; along ``n``, four neighbouring columns of one
        step, neighbouring work items reading neighbouring words) and converting each byte once in registers.
        A byte per load was a gather of single bytes on PoCL (which vectorises the work items), 3.5x slower than
        float32's product; a conversion kernel writing float32 weights, then the product, 0.6-0.8x its speed.
        On CPU devices (``uniform_guard``) every work item computes and only the stores are guarded; columns
        past the end compute on the last one."""
        ctx = self.ctx
        b, args, tracker, em = self._kernel_start()
        (lspec, loff, (lsb, lsm, _)), (rspec, roff, (rsb, rsk, rsn)) = lp, rp
        a = b.buffer(lspec, lspec.dtype, False, "lhs")
        ws = b.buffer(rspec, UINT32, False, "w")
        args[a], args[ws] = lspec, rspec
        self._held = {a: lspec.dtype}
        cols = min(WORD_COLS[along], self.N)
        nb = -(-self.N // cols)
        items = self.B * nb
        gid, gsize, lsize = ctx.gid(b, items, ctx.wg)
        inside = op("lt", gid, const(items, INT32))
        uniform = bool(getattr(ctx.caps, "uniform_guard", False))
        item = b.let(select(inside, gid, const(items - 1, INT32)), "item") if uniform else gid
        with b.when(const(True, BOOL) if uniform else inside):
            n0 = b.let(op("mul", op("rem", item, const(nb, INT32)), const(cols, INT32)), "n")
            bi = b.let(op("div", item, const(nb, INT32)), "bi")
            wb = b.let(op("add", const(roff // 4, INT32), op("mul", bi, const(rsb // 4, INT32))), "wb")
            ns = [b.let(op("add", n0, const(c, INT32))) if c else n0 for c in range(cols)]
            xbase = b.let(op("add", const(loff, INT32), op("mul", bi, const(lsb, INT32))), "xb")
            x_rows = [b.let(op("add", xbase, const(m * lsm, INT32)), "xrow") for m in range(self.M)]
            if along == "k":   # a column's words; past the end, the last column's
                wrows = [b.let(op("add", wb, op("mul", select(op("lt", n, const(self.N, INT32)), n,
                                                              const(self.N - 1, INT32)), const(rsn // 4, INT32))),
                               "wrow") for n in ns]
                sums = self._word_sums(b, (a, ws), wrows, x_rows, (lp[2][2], rspec.dtype))
            else:              # the block's words of a step; past the end, the row's last word
                last = const(self.N // 4 - 1, INT32)
                wcols = [b.let(select(op("lt", w, last), w, last), "wcol")
                         for w in (b.let(op("add", op("div", n0, const(4, INT32)), const(u, INT32)))
                                   for u in range(-(-cols // 4)))]
                sums = self._column_word_sums(b, (a, ws), (wb, wcols, rsk // 4), x_rows, (lp[2][2], rspec.dtype))
            for c, n in enumerate(ns):
                ok = op("lt", n, const(self.N, INT32))
                for m in range(self.M):
                    with b.when(op("land", inside, ok) if uniform else ok):
                        self._finish(b, em, args, bi, const(m, INT32), n, sums[m][c])
        b.name = kernel_name("dot_words", tracker.eqns)
        return make_launch(b, args, {}, gsize, lsize, tracker.eqns, "dot")

    def _word_sums(self, b, names, wrows, x_rows, layout):
        """``_words``' contraction: per step ``unroll`` words of each column in ``wrows`` (4 elements a word), each
        byte converted once from ``held`` and multiplied into each row's partial sums (``lanes`` independent ones
        per row and column, summed at the end). Returns the sums as ``[row][column]``."""
        a, ws = names
        lsk, held = layout
        dt = self.eqn.inputs[0].aval.dtype
        unroll = 2 if self.K % 8 == 0 else 1
        lanes = 8 if len(x_rows) * len(wrows) == 1 else max(1, 4 // len(wrows))
        dots = [[[b.var(dt, const(0, dt), "dot") for _ in range(lanes)] for _ in wrows] for _ in x_rows]
        with b.loop(const(0, INT32), const(self.K // 4, INT32), const(unroll, INT32), hint="t") as t:
            for u in range(unroll):
                at = b.let(op("add", t, const(u, INT32))) if u else t
                words = [b.load(ws, b.let(op("add", wr, at)), UINT32) for wr in wrows]
                for j in range(4):
                    k = b.let(op("add", op("mul", at, const(4, INT32)), const(j, INT32)), "k")
                    xs = [self._load(b, a, b.let(op("add", xr, op("mul", k, const(lsk, INT32)))), dt) for xr in x_rows]
                    for c, word in enumerate(words):
                        wv = _byte_value(b, word, j, held, dt)
                        for r, xv in enumerate(xs):
                            d = dots[r][c][(4 * u + j) % lanes]
                            b.assign(d, add_of(b, d, b.let(mul_of(b, xv, wv))))
        return [[tree_sum(lane) for lane in row] for row in dots]

    def _column_word_sums(self, b, names, where, x_rows, layout):
        """``_words``' contraction along ``n``: per step ``k`` the block's words ``wcols`` of row ``k`` (word offset
        ``wb + k * rsk4``; 4 neighbouring columns a word), each byte converted once from ``held`` and multiplied
        into the ``[row][column]`` sums (4 per word)."""
        a, ws = names
        wb, wcols, rsk4 = where
        lsk, held = layout
        dt = self.eqn.inputs[0].aval.dtype
        sums = [[b.var(dt, const(0, dt), "dot") for _ in range(4 * len(wcols))] for _ in x_rows]
        with b.loop(const(0, INT32), const(self.K, INT32), hint="kk") as k:
            base = b.let(op("add", wb, op("mul", k, const(rsk4, INT32))), "wk")
            xs = [self._load(b, a, b.let(op("add", xr, op("mul", k, const(lsk, INT32)))), dt) for xr in x_rows]
            for u, wc in enumerate(wcols):
                word = b.load(ws, b.let(op("add", base, wc)), UINT32)
                for j in range(4):
                    wv = _byte_value(b, word, j, held, dt)
                    for r, xv in enumerate(xs):
                        d = sums[r][4 * u + j]
                        b.assign(d, add_of(b, d, b.let(mul_of(b, xv, wv))))
        return sums

    def _block(self):
        """Outputs ``(rows, cols)`` one work item of the untiled kernel computes by default: the scheduler
        option ``dot_block`` (webgpu on a CPU adapter: lavapipe loads each operand element with a gather, so
        a 4 x 4 block, reading 8 elements for 16 products instead of 32, runs the MLP's products 2-4x
        faster); ``(1, 1)`` (the one-output kernel) without it. A ``BLOCK_TUNABLE`` choice replaces it."""
        if self.eqn.inputs[0].aval.dtype == np.bool_:
            return (1, 1)
        return tuple(self.ctx.opts.get("dot_block", (1, 1)))

    def _narrowed(self, choice):
        """A ``BLOCK_TUNABLE`` choice narrowed to the output's own rows and columns."""
        return (min(choice["rows"], self.M), min(choice["cols"], self.N))

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
        if self._transposed_rhs() is not None:
            return self.ctx.tuned(register_tiles.TUNABLE, register_tiles.DEFAULT_TILE, self._transposed_product,
                                  {"rows": self.N, "cols": self.M, "lhs": "rows"})
        return self.ctx.tuned(register_tiles.TUNABLE, register_tiles.DEFAULT_TILE, self._register_variant,
                              {"rows": self.M, "cols": self.N})

    def _transposed_rhs(self):
        """The rhs plan ``(base, offset, (batch, contraction, column strides))`` where the product runs transposed
        (``_transposed_product``), else ``None``: a skinny unbatched product (at most ``UNPACKED_RHS_ROWS`` rows,
        a rhs of at least ``UNPACKED_RHS_MIN`` elements, as ``_unpacked_rhs``) whose rhs is a view with its
        contraction along memory and its columns not (``d @ w.T``, the input's gradient of ``x @ w``; ``x @ w.T``,
        a ``Linear`` layer), in whole loop iterations of any tile (no bounds tests)."""
        if (not TRANSPOSED_PRODUCTS or self.B != 1 or self.M > TRANSPOSED_ROWS
                or self.K * self.N < UNPACKED_RHS_MIN or self.K % max(register_tiles.TUNABLE.choices["uk"])):
            return None
        rp = self.operand_plans(split=False)[1]
        if not self._read_as_is(rp) or rp[2][1] != 1 or rp[2][2] == 1:
            return None
        return rp

    def _read_as_is(self, plan) -> bool:
        """Whether an operand ``plan`` reads a buffer of the operand's own dtype (not a low-bit base read through
        its ``astype``, which only the word form and ``_load`` convert): the register kernels read it unconverted."""
        return plan is not None and plan[0].aval.dtype == self.eqn.inputs[0].aval.dtype

    def _transposed_product(self, tile):
        """``out.T = rhs.T @ lhs.T`` (``_transposed_rhs``): the kernel's lhs is the rhs read where it lies (each
        work item's rows are columns of ``out``, each a run of memory along the contraction, broadcast against
        the packed values), its rhs the lhs packed into panels across ``out``'s rows; each output is stored at
        its place in ``out``. The weight is never packed: its pack (a transpose) cost as much as the product."""
        lhs, _ = self.eqn.inputs
        wx, wy, mp, np_ = panels(self.N, self.M, tile)
        kp = padded_k(self.K, tile)
        lp = self.plan(lhs, (self.lb, self.lc, self.lf))
        groups = (self.lb, self.lc, self.lf)
        la, (ls,) = packs_launch(self.ctx, self, [(lhs, groups, 2, kp, np_, "lhs",
                                                   pack_block(lhs, groups, 2, lp and lp[2], kp))], tile)
        base, off, (sb, sk, sn) = self._transposed_rhs()
        return [la, register_dot(self, self.ctx.spec(base), ls, (wx, wy, mp, np_, kp), tile,
                                 lhs_view=(off, sb, sn, sk, self.N), transposed=True)]

    def _register_variant(self, tile):
        lhs, rhs = self.eqn.inputs
        wx, wy, mp, np_ = panels(self.M, self.N, tile)
        kp = padded_k(self.K, tile)
        lp, rp = self.operand_plans(split=False)
        lgroups, rgroups = (self.lb, self.lf, self.lc), (self.rb, self.rc, self.rf)
        lpart = (lhs, lgroups, 1, kp, mp, "lhs", pack_block(lhs, lgroups, 1, lp and lp[2], kp))
        view = self._unpacked_rhs(tile)
        if view is not None:
            la, (ls,) = packs_launch(self.ctx, self, [lpart], tile)
            base, off, (sb, sk, sn) = view
            rhs_view = (off, sb, sk, sn, self.N // tile["rn"])
            return [la, register_dot(self, ls, self.ctx.spec(base), (wx, wy, mp, np_, kp), tile, rhs_view)]
        rpart = (rhs, rgroups, 2, kp, np_, "rhs", pack_block(rhs, rgroups, 2, rp and rp[2], kp))
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
        rp = self.operand_plans(split=False)[1]
        if not self._read_as_is(rp) or rp[2][2] != 1 or rp[2][1] % 1024 == 0:
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
        a = b.buffer(lspec, lspec.dtype, False, "lhs")
        args[a] = lspec
        bb = b.buffer(rspec, rspec.dtype, False, "rhs")
        args[bb] = rspec
        self._held = {a: lspec.dtype, bb: rspec.dtype}
        names = dict(M=self.M, N=self.N, K=self.K, a_off=loff, a_sb=lsb, a_sm=lsm, a_sk=lsk,
                     b_off=roff, b_sb=rsb, b_sk=rsk, b_sn=rsn)
        split = {k: names.pop(k) for k in ("a_sb", "b_sb") if isinstance(names[k], tuple)}
        if self.ctx.opts.get("bake_dot", False):
            return a, bb, {k: const(v, INT32) for k, v in names.items()} | split
        syms = {k: b.scalar(k) for k in names}
        scalars.update(names)
        return a, bb, syms | split

    def _load(self, b, name, index, dt):
        """An operand element of dtype ``dt`` from buffer ``name`` (``_params``): a low-bit base (a float8
        weight matrix read through its ``astype``: ``operand_view``) is loaded as its bytes and converted in
        registers, so the converted operand is never written."""
        held = self._held[name]
        v = b.load(name, index, held)
        return b.let(convert(b, v, dt)) if held != dt else v

    def _out_index(self, bexpr, mexpr, nexpr, lane=None):
        """The output multi-index (``Ix``) of canonical (batch, row, column) kernel values; with ``lane``, of
        column ``nexpr + lane`` where ``nexpr`` is a multiple of 4 below the last four columns (``_finish4``)."""
        lhs, rhs = self.eqn.inputs
        ls, rs = lhs.aval.shape, rhs.aval.shape
        parts = []
        for e, size, dims, k in ((bexpr, self.B, [ls[i] for i in self.lb], None),
                                 (mexpr, self.M, [ls[i] for i in self.lf], None),
                                 (nexpr, self.N, [rs[i] for i in self.rf], lane)):
            if not dims:
                continue
            parts.extend(unravel(ix_data(e, 0, size - 1) if k is None else ix_data(e, 0, size - 4) + k, tuple(dims)))
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
            abase = b.let(op("add", op("add", s["a_off"], batch_offset(bi, s["a_sb"])), op("mul", m, s["a_sm"])))
            bbase = b.let(op("add", op("add", s["b_off"], batch_offset(bi, s["b_sb"])), op("mul", n, s["b_sn"])))
            acc = b.var(acc_dt, const(0, acc_dt))
            with b.loop(const(0, INT32), s["K"]) as k:
                x = self._load(b, a, op("add", abase, op("mul", k, s["a_sk"])), dt)
                y = self._load(b, bb, op("add", bbase, op("mul", k, s["b_sk"])), dt)
                if acc_dt != dt:
                    x, y = b.let(convert(b, x, acc_dt)), b.let(convert(b, y, acc_dt))
                b.assign(acc, add_of(b, acc, b.let(mul_of(b, x, y))))
            self._finish(b, em, args, bi, m, n, acc)
        b.name = kernel_name("dot", tracker.eqns)
        return make_launch(b, args, scalars, gsize, lsize, tracker.eqns, "dot")

    def _blocked(self, lp, rp, block, vectors=True, stores=True):
        """The untiled product with ``block = (RY, RX)`` outputs per work item: RY rows and RX columns
        (clamped to the last row and column at the edges, whose products are computed and not stored),
        RY + RX operand loads per step of the contraction, the epilogue per output as ``_simple``'s.

        With the scheduler option ``dot_vec4`` (webgpu on a CPU adapter), an operand whose contiguous
        dimension allows it is read four elements per load (``_vector_reads``): along the contraction (the
        loop then takes four steps per iteration) or along the block's rows or columns. Each accumulator
        still adds its products in the order of the contraction, so the results are the same, bit for bit.
        ``vectors=False``: scalar loads only (where a vector binding would exceed the target's buffers per
        kernel or alias a buffer the kernel writes); ``stores=False``: no ``vec4`` stores (``_wide_stores``)."""
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
        # a low-bit operand read through its astype (``_load``) is loaded a byte at a time, never as vec4
        held_as_dt = self._held[a] == dt and self._held[bb] == dt
        along = self._vector_reads(lp, rp, block) if vectors and held_as_dt else (None, None)
        with b.when(op("lt", gid, const(total, INT32))):
            n0 = b.let(op("mul", op("rem", gid, const(nb, INT32)), const(rx, INT32)), "n")
            mn = b.let(op("div", gid, const(nb, INT32)))
            m0 = b.let(op("mul", op("rem", mn, const(mb, INT32)), const(ry, INT32)), "m")
            bi = b.let(op("div", mn, const(mb, INT32)), "bi")
            abase = b.let(op("add", s["a_off"], batch_offset(bi, s["a_sb"])))
            bbase = b.let(op("add", s["b_off"], batch_offset(bi, s["b_sb"])))
            lhs = _OperandReader(b, a, lp[0], dt, abase, m0, ry, s["M"], s["a_sm"], s["a_sk"], along[0], self._load)
            rhs = _OperandReader(b, bb, rp[0], dt, bbase, n0, rx, s["N"], s["b_sn"], s["b_sk"], along[1], self._load)
            self._bind_readers(args, (lhs, rhs), (lp, rp), 4 if "k" in along else 1)
            accs = _accumulate(b, lhs, rhs, s["K"], 4 if "k" in along else 1, dt, acc_dt, ry * rx)
            wide = vectors and stores and self._wide_stores(rx)
            self._store_block(b, em, args, accs, (bi, m0, n0, block), None, s, wide)
        b.name = kernel_name("dot", tracker.eqns)
        launch = make_launch(b, args, scalars, gsize, lsize, tracker.eqns, "dot")
        if (along != (None, None) or wide) and not vectors_fit(self.ctx.caps, launch):
            # first without the vec4 stores (a written buffer also read: donated), then without any vectors
            return self._blocked(lp, rp, block, vectors=vectors and wide, stores=False)
        return launch

    def _bind_readers(self, args, readers, plans, step, rowwin=(), batchwin=()):
        """Bind the ``vec4`` reads of the ``(lhs, rhs)`` readers of the blocked or subgroup product (operand
        ``plans`` ``(lp, rp)``, the contraction taken ``step`` at a time) as ``_uniform_plan`` says: each operand
        whose whole buffer fits the scheduler option ``dot_uniform`` as a uniform array, those it splits into
        windows as several, the rest as storage (``_OperandReader.bind``). ``rowwin`` (``_row_plan``): the lhs as
        uniform row windows of that size (one per part of a tile), placed by each dispatch (``_row_launches``);
        ``batchwin``
        (``_batch_plan``): each operand with a window size as a uniform window of its batch elements."""
        whole = [r.fits(self.ctx.opts.get("dot_uniform", 0)) for r in readers]
        _, split = self._uniform_plan([whole[0] or _row_parts(rowwin), whole[1]], [(r.spec, r.along) for r in readers],
                                      plans, step)
        for i, (r, w) in enumerate(zip(readers, split, strict=True)):
            if batchwin and batchwin[1][i]:
                r.vname = r.b.buffer(("uniform batches", i, r.spec), vector_dtype(r.dt), False, "uni",
                                     uniform=batchwin[1][i] // 16, offset=0)
                args[r.vname] = r.spec
            elif i == 0 and rowwin and not whole[0]:
                names = [r.b.buffer(("uniform rows", r.spec) + ((p,) if p else ()), vector_dtype(r.dt), False, "uni",
                                    uniform=rowwin[1] // 16, offset=0) for p in range(_row_parts(rowwin))]
                args.update((n, r.spec) for n in names)
                r.vname, r.part_names = names[0], names
                if len(names) > 1:   # each load of the tile's rows from its part's window
                    r.row_names = [names[q] for q in r.parts]
            else:
                r.bind(args, self.ctx.opts.get("dot_uniform", 0), w)

    def _uniform_plan(self, whole, reads, plans, step):
        """``(whole, split)``: which of the two operands (``reads``: ``(spec, along)`` each, ``whole``: whether
        its whole buffer fits ``dot_uniform``, ``_OperandReader.fits``) a product binds as one uniform array,
        and the uniform windows (``_uniform_windows``) of the others: within ``dot_uniform_windows``' bindings
        left after the whole ones, the operands with the fewest windows first; ``()`` for a storage binding."""
        uniform = self.ctx.opts.get("dot_uniform", 0)
        bindings, align = self.ctx.opts.get("dot_uniform_windows", (0, 256))
        left = bindings - sum(whole)
        split = [()] * len(reads)
        for i, (spec, along) in enumerate(reads):
            if UNIFORM_OPERANDS and UNIFORM_WINDOWS and not whole[i] and along == "rows" and self.B == 1 and bindings:
                own, k_stride = (plans[i][2][1], plans[i][2][2]) if i == 0 else (plans[i][2][2], plans[i][2][1])
                count = self.M if i == 0 else self.N
                split[i] = _uniform_windows(spec, plans[i][1], (own, k_stride, count), (self.K, step),
                                            (uniform, align))
        for i in sorted(range(len(reads)), key=lambda i: len(split[i])):
            if split[i] and len(split[i]) > left:
                split[i] = ()
            left -= len(split[i])
        return whole, split

    def _subgroup_uniform(self, lp, rp, lanes) -> dict:
        """The tuning facts of how the subgroup form's operands are bound (``_uniform_plan``): ``lhs_uniform``
        (``lhs_uniform_tall``: with the tile's rows a multiple of ``4 x lanes``, where the lhs may be read four
        rows a load) and ``rhs_uniform``, each whether the operand is read from uniform bindings (lavapipe
        gathers their lanes in one go) rather than a storage one (lane by lane: ``_subgroup_cost``); ``lhs_rows``,
        whether a tile of ``4 x lanes`` rows reads the lhs four rows a load."""
        out = {}
        for key, rows in (("lhs_uniform", lanes), ("lhs_uniform_tall", 4 * lanes)):
            along = self._subgroup_reads(lp, rp, (rows, 4), lanes)
            reads = [(p[0], a) for p, a in zip((lp, rp), along, strict=True)]
            whole = [a is not None and UNIFORM_OPERANDS and np.dtype(p[0].dtype) == np.dtype(np.float32)
                     and math.prod(p[0].shape) * 4 <= self.ctx.opts.get("dot_uniform", 0)
                     for p, a in zip((lp, rp), along, strict=True)]
            rowwin = self._row_plan(lp, along[0], rows)
            whole[0] = whole[0] or _row_parts(rowwin)
            whole, split = self._uniform_plan(whole, reads, (lp, rp), 4 if "k" in along else 1)
            sizes = (self._batch_plan(lp, rp, along) or (0, (0, 0)))[1]
            out[key] = bool(whole[0] or split[0] or sizes[0])
            out["rhs_uniform"] = bool(whole[1] or split[1] or sizes[1])
        out["lhs_rows"] = along[0] == "rows"
        return out

    def _row_plan(self, lp, along, rows) -> tuple:
        """The uniform row windows (``_row_windows``) the subgroup form reads its lhs through (``UNIFORM_ROW_WINDOWS``;
        ``lp``: the lhs plan with its buffer spec, read ``along``, ``rows`` rows a tile), or ``()``: a single-batch
        float32 lhs read ``"k"`` whose buffer is over ``dot_uniform``, where ``dot_uniform_windows`` allows it; a tile
        over one window in parts of whole subgroup loads (``dot_subgroup`` rows), at most a stage's bindings."""
        uniform = self.ctx.opts.get("dot_uniform", 0)
        bindings, align = self.ctx.opts.get("dot_uniform_windows", (0, 256))
        spec, off, (_, s_m, _) = lp
        if not (UNIFORM_OPERANDS and UNIFORM_ROW_WINDOWS and bindings and along == "k" and self.B == 1
                and np.dtype(spec.dtype) == np.dtype(np.float32)
                and math.prod(spec.shape) * 4 > uniform):
            return ()
        lanes = int(self.ctx.opts.get("dot_subgroup", 0) or 0) or rows
        return _row_windows(spec, off, (s_m, self.K, self.M), (rows, lanes, bindings), (uniform, align))

    def _batch_plan(self, lp, rp, along) -> tuple:
        """The uniform batch windows (``_batch_windows``) the subgroup form reads its operands through
        (``UNIFORM_BATCH_WINDOWS``; ``lp``, ``rp``: the plans with their buffer specs, read ``along``):
        ``(per, (lhs size, rhs size), ((b0, lhs offset, rhs offset), ...))``, a size 0 for an operand that keeps
        its binding (its whole buffer within ``dot_uniform``, or not read as vectors), or ``()``: one batch, no
        operand over ``dot_uniform`` read as float32 vectors, or no run of batch elements whose windows fit."""
        uniform = self.ctx.opts.get("dot_uniform", 0)
        bindings, align = self.ctx.opts.get("dot_uniform_windows", (0, 256))
        if not (UNIFORM_OPERANDS and UNIFORM_BATCH_WINDOWS and bindings >= 2 and self.B > 1):
            return ()
        extents = ((self.M - 1) * lp[2][1] + (self.K - 1) * lp[2][2] + 1,
                   (self.K - 1) * rp[2][1] + (self.N - 1) * rp[2][2] + 1)
        big = [a is not None and np.dtype(p[0].dtype) == np.dtype(np.float32)
               and math.prod(p[0].shape) * 4 > uniform for p, a in zip((lp, rp), along, strict=True)]
        if not any(big):
            return ()
        for per in [d for d in range(self.B, 0, -1) if self.B % d == 0 and self.B // d <= ROW_WINDOWS_MAX]:
            plans = [_batch_windows(p[0], p[1], (p[2][0], e, self.B), per, (uniform, align)) if g else ((), 0)
                     for p, e, g in zip((lp, rp), extents, big, strict=True)]
            if all(w for (w, _), g in zip(plans, big, strict=True) if g):
                starts = [w or (0,) * (self.B // per) for w, _ in plans]
                return per, (plans[0][1], plans[1][1]), tuple(
                    (b0 * per, la, ra) for b0, (la, ra) in enumerate(zip(*starts, strict=True)))
        return ()

    def _subgroup_lanes(self, lp, rp) -> int:
        """The subgroup size of the subgroup form (``_subgroup``: the scheduler option ``dot_subgroup``), or 0
        where it does not apply: float32 operands read as float32 (no low-bit base), at least a subgroup of rows
        and of columns (fewer would leave work items idle)."""
        lanes = int(self.ctx.opts.get("dot_subgroup", 0) or 0)
        f32 = np.dtype(np.float32)
        if not SUBGROUP_PRODUCTS or not lanes or lp[0].dtype != f32 or rp[0].dtype != f32 or self.eqn.inputs[0].aval.dtype != f32:
            return 0
        if self.eqn.inputs[1].aval.dtype != f32 or self._accumulator_dtype() != f32:
            return 0
        return lanes if min(self.M, self.N) >= lanes else 0

    def _subgroup_tile(self, choice, lanes):
        """A ``SUBGROUP_TUNABLE`` choice narrowed to the output: ``(rows, cols)``, rows a multiple of ``lanes``
        within the output's rows, columns per work item within ``N / lanes``."""
        rows = max(lanes, min(choice["rows"], self.M // lanes * lanes))
        return rows, max(1, min(choice["cols"], self.N // lanes))

    def _subgroup_reads(self, lp, rp, tile, lanes):
        """``(lhs, rhs)``: how ``_subgroup`` reads each operand four elements at a time (``"k"``, along the
        contraction; ``"rows"``, along the lhs rows of one load, four per work item, or the rhs columns of a
        work item) or ``None``, with the conditions of ``_vector_reads`` (aligned, whole vectors)."""
        if not self.ctx.opts.get("dot_vec4", False):
            return None, None
        rows, cols = tile
        _, loff, (lsb, lsm, lsk) = lp
        _, roff, (rsb, rsk, rsn) = rp

        def aligned(off, sb, *pairs):
            return off % 4 == 0 and all(st % 4 == 0 for st, n in batch_pairs(sb, self.B) + pairs if n > 1)
        k4 = self.K % 4 == 0
        lhs = ("k" if lsk == 1 and k4 and aligned(loff, lsb, (lsm, self.M)) else
               "rows" if lsm == 1 and self.M % 4 == 0 and rows % (4 * lanes) == 0 and aligned(loff, lsb, (lsk, self.K))
               else None)
        rhs = ("rows" if rsn == 1 and self.N % 4 == 0 and cols % 4 == 0 and aligned(roff, rsb, (rsk, self.K)) else
               "k" if rsk == 1 and k4 and aligned(roff, rsb, (rsn, self.N)) else None)
        return lhs, rhs

    def _subgroup(self, lp, rp, lanes, tile, vectors=True, stores=True, order="k"):
        """The blocked product with its lhs rows shared by a subgroup (``lanes`` work items; WGSL subgroups on
        lavapipe: a vector of consecutive work items). A subgroup computes ``rows`` output rows and ``lanes x
        cols`` columns (``tile``): each work item loads ``rows / lanes`` of the lhs rows a step (``_SharedRows``)
        and the subgroup broadcasts every row's value to all of its work items, which multiply it into their own
        ``cols`` columns (``_OperandReader``, as ``_blocked``'s). Every work item runs the loop (a subgroup past
        the output computes on the last tile; only stores are guarded), so each broadcast is in uniform control
        flow. Each accumulator adds its products in the order of the contraction: ``_blocked``'s results."""
        rows, cols = tile
        ctx = self.ctx
        b, args, tracker, em = self._kernel_start()
        scalars = {}
        a, bb, s = self._params(b, lp, rp, args, scalars)
        dt = self.eqn.inputs[0].aval.dtype
        along = self._subgroup_reads(lp, rp, tile, lanes) if vectors else (None, None)
        rowwin = self._row_plan(lp, along[0], rows)
        batchwin = self._batch_plan(lp, rp, along)
        mt, nt = -(-(rowwin[0] if rowwin else self.M) // rows), -(-self.N // (lanes * cols))
        tiles = (batchwin[0] if batchwin else self.B) * mt * nt
        wg = lanes * max(1, min(ctx.wg // lanes, tiles // 2))   # two work-groups at least, where there are tiles
        gid, gsize, lsize = ctx.gid(b, tiles * lanes, wg)
        sg = b.let(op("div", gid, const(lanes, INT32)), "sg")
        t = b.let(select(op("lt", sg, const(tiles, INT32)), sg, const(tiles - 1, INT32)), "t")
        n0 = b.let(op("add", op("mul", op("rem", t, const(nt, INT32)), const(lanes * cols, INT32)),
                      op("mul", Special("lane", 0), const(cols, INT32))), "n")
        mn = b.let(op("div", t, const(nt, INT32)))
        m0 = b.let(op("mul", op("rem", mn, const(mt, INT32)), const(rows, INT32)), "m")
        if rowwin:   # the rows of this dispatch's window (``_row_launches``): from m_base, below m_end
            s = dict(s, M=b.scalar("m_end"), a_off=b.scalar("a_off"))   # scalars even where ``bake_dot`` asks
            scalars.update(m_base=0, m_end=self.M, a_off=lp[1])
            m0 = b.let(op("add", m0, b.scalar("m_base")), "m")
            # a tile in parts (``_row_windows``): the lhs's first element counted from each part's window
            scalars.update({f"a_off{q}": lp[1] for q in range(1, _row_parts(rowwin))})
            parts = [s["a_off"]] + [b.scalar(f"a_off{q}") for q in range(1, _row_parts(rowwin))]
        bi = b.let(op("div", mn, const(mt, INT32)), "bi")
        if batchwin:   # the batch elements of this dispatch's windows (``_batch_launches``): from b_base
            s = dict(s, a_off=b.scalar("a_off"), b_off=b.scalar("b_off"))
            scalars.update(b_base=0, a_off=lp[1], b_off=rp[1])
            bi = b.let(op("add", bi, b.scalar("b_base")), "bi")
        abase = b.let(op("add", s["a_off"], batch_offset(bi, s["a_sb"])))
        bbase = b.let(op("add", s["b_off"], batch_offset(bi, s["b_sb"])))
        if rowwin and len(parts) > 1:
            abase = (abase,) + tuple(b.let(op("add", o, batch_offset(bi, s["a_sb"]))) for o in parts[1:])
        lhs = _SharedRows(b, a, lp[0], dt, (abase, m0, s["M"], s["a_sm"], s["a_sk"]), (rows, lanes), along[0], self._load)
        rhs = _OperandReader(b, bb, rp[0], dt, bbase, n0, cols, s["N"], s["b_sn"], s["b_sk"], along[1], self._load)
        step = 4 if "k" in along or (order == "rows" and self.K % 4 == 0) else 1
        self._bind_readers(args, (lhs, rhs), (lp, rp), step, rowwin, batchwin)
        accs = _accumulate(b, lhs, rhs, s["K"], step, dt, dt, rows * cols, order)
        wide = vectors and stores and self._wide_stores(cols)
        self._store_block(b, em, args, accs, (bi, m0, n0, tile), op("lt", sg, const(tiles, INT32)), s, wide)
        b.name = kernel_name("dot_subgroup", tracker.eqns)
        # the work-group size is the kernel's own (a multiple of the subgroup), not the backend's default
        launch = make_launch(b, args, scalars, gsize, lsize, tracker.eqns, "dot", fixed_local=True)
        if (along != (None, None) or wide) and not vectors_fit(self.ctx.caps, launch):
            # first without the vec4 stores (a written buffer also read: donated), then without any vectors
            return self._subgroup(lp, rp, lanes, tile, vectors=vectors and wide, stores=False, order=order)
        if batchwin:
            return _batch_launches(launch, [r.vname if n else None for r, n in zip((lhs, rhs), batchwin[1], strict=True)],
                                   batchwin[2], (lp[1], rp[1]))
        return _row_launches(launch, lhs.part_names, rowwin[2], lp[1]) if rowwin else [launch]

    def _store_block(self, b, em, args, accs, where, inside, s, wide=False):
        """The epilogue of a work item's ``rows x cols`` accumulators ``accs`` (row-major) of output rows
        ``m0 + i`` and columns ``n0 + j`` of batch ``bi`` (``where``), each stored (``_finish``) where ``inside``
        (``None``: always) and within the output: through a private array, in loops (one copy of the epilogue's
        code). ``wide`` (``_wide_stores``): four adjacent columns per iteration, stored four at a time
        (``_finish4``)."""
        bi, m0, n0, (rows, cols) = where
        c0 = const(0, INT32)
        held = b.array("private", accs[0].dtype, rows * cols, "acc")
        for i, acc in enumerate(accs):
            b.store(held, const(i, INT32), acc, space="private")
        with b.loop(c0, const(rows, INT32)) as yy:
            with b.loop(c0, const(cols, INT32), const(4, INT32) if wide else None) as xx:
                gi = b.let(op("add", m0, yy), "gi")
                gj = b.let(op("add", n0, xx), "gj")
                within = op("land", op("lt", gi, s["M"]), op("lt", gj, s["N"]))
                with b.when(within if inside is None else op("land", inside, within)):
                    at = op("add", op("mul", yy, const(cols, INT32)), xx)
                    if wide:
                        self._finish4(b, em, args, (bi, gi, gj), (held, at, accs[0].dtype))
                    else:
                        self._finish(b, em, args, bi, gi, gj, b.load(held, at, accs[0].dtype, "private"))

    def _wide_stores(self, cols) -> bool:
        """Whether ``_store_block`` stores four adjacent columns at a time (the scheduler option ``dot_store4``,
        native webgpu on a CPU adapter, where lavapipe stores each lane's element in a loop: one ``vec4`` store
        per four elements instead): float32 products whose columns per work item and whose output rows are
        multiples of 4, so that a work item's first column and every row start on a whole, aligned vector."""
        return bool(WIDE_STORES and self.ctx.opts.get("dot_store4", False) and cols % 4 == 0 and self.N % 4 == 0
                    and self.eqn.outputs[0].aval.dtype == np.float32)

    def _finish4(self, b, em, args, where, accs):
        """``_finish`` of four adjacent outputs, columns ``n .. n + 3`` of row ``m`` of batch ``bi`` (``where``),
        whose accumulators (of dtype ``dt``) are ``held[at .. at + 3]`` (``accs``): the epilogue's operands read four
        elements at a time where they can be (``_epilogue_loads``), the product (where needed) and the roots computed
        for each column in turn, then each float32 output stored as one ``vec4`` through its buffer's ``vec4``
        binding (the reduce group's ``store_vectors``), any other element by element. The values are ``_finish``'s;
        only loads and stores are grouped (``_wide_stores``: the four are one aligned vector of every buffer indexed
        as the output). The loop keeps one copy of this code (unrolled over a work item's blocks it ran the
        transformer's products 0.9x faster but tripled the step's scheduling time)."""
        bexpr, mexpr, nexpr = where
        held, at, dt = accs
        ctx, out, f32 = self.ctx, self.eqn.outputs[0], np.dtype(np.float32)
        idxs = [self._out_index(bexpr, mexpr, nexpr, k) for k in range(4)]
        self._epilogue_loads(b, em, args, where, idxs)
        wide = set()

        def binding(v):
            if v.aval.dtype != f32:
                return ctx.output(b, args, v)
            name = vec4_binding(b, args, ctx.spec(v), f32, writes=True)
            wide.add(name)
            return name
        flat = b.let(op("add", op("mul", op("add", op("mul", bexpr, const(self.M, INT32)), mexpr),
                                  const(self.N, INT32)), nexpr), "o")
        lanes: dict = {}
        for k, idx in enumerate(idxs):
            acc = b.load(held, at if k == 0 else op("add", at, const(k, INT32)), dt, "private")
            v = b.let(convert(b, acc, out.aval.dtype))
            em.seed(out, idx, v)
            values = [(binding(out), v)] if out in ctx.needed else []
            for name, val in dict(values + self.root_values(b, em, idx, binding)).items():
                lanes.setdefault(name, []).append(val)
        four = b.let(op("div", flat, const(4, INT32)))
        for name, vals in lanes.items():
            if name in wide:
                b.store(name, four, Op("vector4", tuple(vals), vector_dtype(f32)))
                continue
            for k, val in enumerate(vals):
                b.store(name, flat if k == 0 else b.let(op("add", flat, const(k, INT32))), val)

    def _epilogue_loads(self, b, em, args, where, idxs):
        """The float32 operands of the epilogue that the four columns ``idxs`` (``_finish4``, at ``where``) read at four
        adjacent elements ``key .. key + 3`` of one buffer, ``key`` a multiple of 4 (every term of it but the
        column a multiple of 4, the column itself one), each loaded as one ``vec4`` whose lanes are seeded in
        ``em`` as those elements. Found by computing the roots at the four indices in a scratch emitter that
        knows what ``em`` knows (the reduce group's ``vector_reads``); an index through a reshape of the output's
        flat index (the transformer's gelu gradient reading its ``[16, 64, 256]`` activations) compared as that
        flat index (``_plain``: lavapipe then loads it as one ``vec4``, not lane by lane, element by element)."""
        f32, out = np.dtype(np.float32), self.eqn.outputs[0]
        reads: list = [{} for _ in idxs]
        at = [0]
        an = self.ctx.emitter(KernelBuilder("analysis"), computes=set(self.roots),
                              on_read=lambda var, key: reads[at[0]].setdefault(var, set()).add(key))
        an.adopt(em)
        for k, idx in enumerate(idxs):
            at[0] = k
            an.seed(out, idx, const(0, out.aval.dtype))
            self.root_values(b, an, idx, lambda r: None)
        bexpr, mexpr, nexpr = where
        rows = {t for e, n in ((bexpr, self.B), (mexpr, self.M)) for t, _ in ix_data(e, 0, n - 1).terms}
        column = {t for t, _ in ix_data(nexpr, 0, self.N - 4).terms}
        for u, keys in reads[0].items():
            if u.aval.dtype != f32 or u.aval.size == 1 or u in self.roots or u in self.products:
                continue
            for key in sorted(keys, key=repr):
                flat = _plain(key)   # a reshape's index through the flat one (``(m * 256 + n) // 16384``...)
                if flat.const % 4 or not all(t in column or (t in rows and c % 4 == 0) for t, c in flat.terms):
                    continue   # not aligned
                lanes = [key] + [next((o for o in sorted(reads[k].get(u, ()), key=repr) if _plain(o) == flat + k), None)
                                 for k in range(1, 4)]
                if None in lanes:
                    continue
                name = vec4_binding(b, args, self.ctx.spec(u), f32)
                v = b.load(name, op("div", to_expr(flat), const(4, INT32)), vector_dtype(f32))
                for k, lane_key in enumerate(lanes):
                    em.seed_key(u, lane_key, b.let(Lane(v, k, f32)))

    def _vector_reads(self, lp, rp, block):
        """``(lhs, rhs)``: how ``_blocked`` reads each operand four elements at a time, ``"k"`` (along the
        contraction), ``"rows"`` (along the block's rows of the lhs or columns of the rhs) or ``None``
        (one element per load). Only where the scheduler option ``dot_vec4`` asks, for float32 operands,
        where that dimension has unit stride and a length that is a multiple of 4, and every other stride
        and the offset are multiples of 4 (each vector is then whole and aligned in its buffer)."""
        lhs, rhs = self.eqn.inputs
        f32 = np.dtype(np.float32)
        if not self.ctx.opts.get("dot_vec4", False) or lhs.aval.dtype != f32 or rhs.aval.dtype != f32:
            return None, None
        ry, rx = block
        _, loff, (lsb, lsm, lsk) = lp
        _, roff, (rsb, rsk, rsn) = rp
        out = []
        for off, sb, (s_own, n_own, r_own), s_k in ((loff, lsb, (lsm, self.M, ry), lsk),
                                                   (roff, rsb, (rsn, self.N, rx), rsk)):
            def aligned(*pairs, off=off, sb=sb):
                return off % 4 == 0 and all(st % 4 == 0 for st, n in batch_pairs(sb, self.B) + pairs if n > 1)
            if s_k == 1 and self.K % 4 == 0 and aligned((s_own, n_own)):
                out.append("k")
            elif s_own == 1 and r_own % 4 == 0 and n_own % 4 == 0 and aligned((s_k, self.K)):
                out.append("rows")
            else:
                out.append(None)
        return tuple(out)

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
        abase = b.let(op("add", s["a_off"], batch_offset(bz, s["a_sb"])))
        bbase = b.let(op("add", s["b_off"], batch_offset(bz, s["b_sb"])))
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
                at = op("add", abase, op("add", op("mul", gi_c, s["a_sm"]), op("mul", gk_c, s["a_sk"])))
                x = self._load(b, a, at, dt)
                b.store(As, op("add", op("mul", c, const(BM, INT32)), r), select(ok, x, const(0, dt)), space="local")
            with b.loop(tid, const(BK * BN, INT32), const(TX * TY, INT32)) as l:
                r = b.let(op("div", l, const(BN, INT32)))
                c = b.let(op("rem", l, const(BN, INT32)))
                gk = b.let(op("add", k0, r))
                gj = b.let(op("add", col0, c))
                ok = b.let(op("land", op("lt", gk, s["K"]), op("lt", gj, s["N"])))
                gk_c = b.let(select(op("lt", gk, s["K"]), gk, klast))
                gj_c = b.let(select(op("lt", gj, s["N"]), gj, nlast))
                at = op("add", bbase, op("add", op("mul", gk_c, s["b_sk"]), op("mul", gj_c, s["b_sn"])))
                y = self._load(b, bb, at, dt)
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


def _plain(ix):
    """``ix`` with each term ``x // k`` or ``x % k`` whose ``x`` is ``g S + R`` (``0 <= R < g``, ``g`` a coefficient
    of ``x`` dividing ``k``) written ``S // (k / g)`` or ``(S % (k / g)) g + R``, so that a flat index unravelled
    through a reshape folds back (``index._fold_divmod``): ``((m * 256 + n) // 16384) * 16384 + (m % 64) * 256 + n``,
    ``n < 256``, is ``m * 256 + n`` (``DotGroup._epilogue_loads``: the transformer's ``[16, 64, 256]`` activations
    read as ``[1024, 256]``)."""
    out = Ix({}, ix.const)
    for t, c in ix.terms:
        part = Ix({t: c}, 0)
        if isinstance(t, (IxDiv, IxMod)):
            for g in sorted({k for _, k in t.x.terms if k > 1 and t.k % k == 0}, reverse=True):
                s = Ix({u: k // g for u, k in t.x.terms if k % g == 0}, t.x.const // g)
                r = Ix({u: k for u, k in t.x.terms if k % g}, t.x.const % g)
                lo, hi = r.bounds()
                if lo >= 0 and hi < g and s.bounds()[0] >= 0:
                    part = (s // (t.k // g) if isinstance(t, IxDiv) else (s % (t.k // g)) * g + r) * c
                    break
        out = out + part
    return out


def batch_offset(bi, sb):
    """The element offset of batch ``bi`` (a kernel expression) of an operand whose batch stride ``sb`` (a
    ``DotGroup.plan``) is one stride (a constant or scalar parameter) or ``((size, stride), ...)``, the batch
    dimensions row-major: ``bi`` unravelled over the sizes, each index times its stride."""
    if not isinstance(sb, tuple):
        return op("mul", bi, sb)
    terms, inner = [], 1
    for i, (size, stride) in enumerate(reversed(sb)):
        at = op("div", bi, const(inner, INT32)) if inner > 1 else bi
        at = op("rem", at, const(size, INT32)) if i < len(sb) - 1 else at
        terms.append(op("mul", at, const(stride, INT32)))
        inner *= size
    return tree_sum(terms)


def batch_pairs(sb, count) -> tuple:
    """``((stride, size), ...)`` of a batch stride ``sb`` (``batch_offset``) over ``count`` batches."""
    return tuple((st, n) for n, st in sb) if isinstance(sb, tuple) else ((sb, count),)


def _byte_value(b, word, j, held, dt):
    """Byte ``j`` of the uint32 ``word``, a value of the low-bit dtype ``held``, converted to ``dt`` in registers."""
    byte = op("shr", word, const(8 * j, UINT32)) if j else word
    byte = op("and", byte, const(255, UINT32)) if j < 3 else byte
    return b.let(convert(b, b.let(Cast(byte, held)), dt), "wv")



def _accumulate(b, lhs, rhs, count, step, dt, acc_dt, n_acc, order="k"):
    """The blocked product's loop over the contraction (``count`` steps, ``step`` per iteration, each reading
    the ``lhs`` and ``rhs`` readers' values): ``n_acc`` accumulators of dtype ``acc_dt``, one per (lhs row, rhs
    column) of the block, row-major, each adding its products in the order of the contraction; returns them.
    ``order`` (``SUBGROUP_TUNABLE``'s): ``"k"``, each step of an iteration updates every accumulator in turn;
    ``"rows"`` (``_SharedRows`` lhs only), each lhs row is broadcast where it is used and its accumulators take
    the iteration's ``step`` steps one after another, so one row's accumulators and values are live at a time
    (the same sums in the same order)."""
    accs = [b.var(acc_dt, const(0, acc_dt)) for _ in range(n_acc)]
    for k in _contraction_loops(b, (lhs, rhs), count, step):
        if order == "rows":
            _row_steps(b, lhs, rhs, k, step, accs)
            continue
        for reader in (lhs, rhs):
            reader.start(k)
        for kk in range(step):
            xs, ys = lhs.values(k, kk), rhs.values(k, kk)
            if acc_dt != dt:
                xs = [b.let(convert(b, x, acc_dt)) for x in xs]
                ys = [b.let(convert(b, y, acc_dt)) for y in ys]
            for i, x in enumerate(xs):
                for j, y in enumerate(ys):
                    acc = accs[i * len(ys) + j]
                    b.assign(acc, add_of(b, acc, b.let(mul_of(b, x, y))))
    return accs


def _contraction_loops(b, readers, count, step):
    """The loops of ``_accumulate`` over the contraction's ``count`` steps, ``step`` an iteration: yields each
    loop's index inside it. A reader bound as uniform windows (``_uniform_windows``) splits the loop where one of
    its windows ends."""
    ends = sorted({k for r in readers for k0, k1, _ in r.windows for k in (k0, k1)})
    for k0, k1 in zip(ends, ends[1:]) if ends else [(const(0, INT32), count)]:
        if ends:
            for r in readers:
                r.window(k0)
            k0, k1 = const(k0, INT32), const(k1, INT32)
        with b.loop(k0, k1, const(step, INT32) if step > 1 else None) as k:
            yield k


def _row_steps(b, lhs, rhs, k, step, accs):
    """One iteration of ``_accumulate`` in row order (float32, ``lhs`` a ``_SharedRows``): the rhs values of its
    ``step`` steps first, then each lhs row's broadcasts and accumulators, each accumulator its ``step`` products
    in a row. Lavapipe keeps a work item's values in vector registers, one per accumulator and value: with every
    accumulator updated at each step (``"k"``) the 32 x 4 tile's 128 accumulators and its rows' broadcasts are
    spilled and reloaded every step; here a row's accumulators stay in registers for its ``step`` steps."""
    rhs.start(k)
    lhs.start_rows(k, step)
    ys = [rhs.values(k, kk) for kk in range(step)]
    cols = len(ys[0])
    for i in range(len(accs) // cols):
        xs = [lhs.row(i, kk) for kk in range(step)]
        for j in range(cols):
            acc = accs[i * cols + j]
            for kk in range(step):
                b.assign(acc, add_of(b, acc, b.let(mul_of(b, xs[kk], ys[kk][j]))))


def _uniform_windows(spec, off, geometry, steps, limits) -> tuple:
    """``((k0, k1, offset, size), ...)``: windows of ``spec``'s buffer (float32 elements; ``off`` the operand's
    first element) that hold a ``"rows"``-read operand's contraction steps ``k0 .. k1 - 1``, each at most
    ``limit`` bytes starting at a byte ``offset`` that is a multiple of ``align`` (``limits = (limit, align)``:
    WebGPU's ``maxUniformBufferBindingSize`` and ``minUniformBufferOffsetAlignment``; the size rounded to 16 bytes,
    ``_fit_windows``), or ``()`` where one step does not fit or a window does not fit the buffer. ``geometry = (s_own, s_k, count)``: the element (row ``k``, own index ``i``) lies at
    ``off + k * s_k + i``, ``i < count``, ``s_own == 1``; ``steps = (K, step)``: the contraction's length, each
    window but the last a multiple of ``step`` steps. Step ``k`` of window ``k0`` is read at vector
    ``(off + i) / 4 + (k - k0) * s_k / 4`` of the window (``_OperandReader.values``)."""
    s_own, s_k, count = geometry
    K, step = steps
    limit, align = limits
    if s_own != 1 or s_k < count or off % 4 or s_k % 4:
        return ()
    unit = math.lcm(step, align // math.gcd(4 * s_k, align))
    per = ((limit // 4 - off - count) // s_k + 1) // unit * unit if limit // 4 >= off + count else 0
    if per <= 0:
        return ()
    total = math.prod(spec.shape) * np.dtype(spec.dtype).itemsize
    out = []
    for k0 in range(0, K, per):
        k1 = min(K, k0 + per)
        start = 4 * k0 * s_k
        fit = _fit_windows([(start, start + 4 * ((k1 - k0 - 1) * s_k + off + count))], total, limits)
        if not fit or fit[1] != (start,):   # the reads count from the window's step k0: it may not move
            return ()
        out.append((k0, k1, start, fit[0]))
    return tuple(out)


def _row_windows(spec, off, geometry, tile, limits) -> tuple:
    """``(rows, size, ((r0, r1, offsets), ...))``: windows of ``spec``'s buffer (float32 elements; ``off`` the
    operand's first element) of ``size`` bytes each (at most ``limit``, a multiple of 16), each starting at a byte
    of ``offsets`` (multiples of ``align``; ``limits = (limit, align)``); a dispatch's holding the lhs rows ``r0 ..
    r1 - 1`` whole, ``rows`` rows a dispatch (a multiple of the tile's rows: a dispatch computes whole tiles). Where
    a tile's rows do not fit one window, each dispatch computes one tile bound as ``parts`` windows (``offsets``,
    at most ``tile = (tile rows, lanes, parts)``' ``parts``), part ``q`` holding the tile's rows ``q * tile rows /
    parts`` on (a multiple of ``lanes``: a subgroup's load reads one part), the rows past ``r1`` counted as row
    ``r1 - 1`` (the reads clamp them so). ``()`` where neither fits or more than ``ROW_WINDOWS_MAX`` dispatches
    would be needed (a tile in parts of 32 rows of 256 KiB rows). One window, not a tile in parts, per dispatch for
    a 32-row tile split over two dispatches: each tile computed twice, 1.2-1.4x the storage kernel's time.
    ``geometry = (s_m, K, M)``: row ``m`` of the operand is the ``K`` elements from ``off + m * s_m`` (``s_m >=
    K``). Every window has the same size, so one kernel source reads them all: the last one starts early enough to
    end within the buffer (``_fit_windows``)."""
    s_m, K, M = geometry
    tile_rows, lanes, most = tile
    limit, align = limits
    total = math.prod(spec.shape) * np.dtype(spec.dtype).itemsize
    if off % 4 or s_m % 4 or s_m < K or K <= 0 or M <= 0 or 4 * K > limit:
        return ()

    def fitted(per, parts):
        bounds = [(r0, min(M, r0 + per)) for r0 in range(0, M, per)]
        spans = []
        for r0, r1 in bounds:
            for q in range(parts):   # part q's rows, clamped below r1 as the reads clamp them
                lo, hi = min(r0 + q * per // parts, r1 - 1), min(r0 + (q + 1) * per // parts, r1) - 1
                at = 4 * (off + lo * s_m)
                spans.append((at - at % align, 4 * (off + hi * s_m + K)))
        fit = _fit_windows(spans, total, limits)
        return fit and (per, fit[0], tuple((r0, r1, fit[1][i * parts:(i + 1) * parts])
                                           for i, (r0, r1) in enumerate(bounds)))
    per = ((limit // 4 - K) // s_m + 1) // tile_rows * tile_rows
    while per > 0 and -(-M // per) <= ROW_WINDOWS_MAX:
        if plan := fitted(per, 1):
            return plan
        per -= tile_rows
    for parts in range(2, min(most, tile_rows // lanes) + 1):
        if tile_rows % (parts * lanes) == 0 and -(-M // tile_rows) <= ROW_WINDOWS_MAX and (plan := fitted(tile_rows, parts)):
            return plan
    return ()


def _row_parts(rowwin) -> int:
    """The uniform bindings of a row plan's lhs (``_row_windows``' parts of a tile; 0 without one)."""
    return len(rowwin[2][0][2]) if rowwin else 0


def _row_launches(launch, names, windows, off) -> list:
    """One launch of the subgroup product ``launch`` per row window (``_row_windows``' ``(r0, r1, offsets)``): the
    uniform bindings ``names`` (one per part of a tile) placed at the window's byte ``offsets``
    (``BufferParam.offset``), the scalars ``m_base``/``m_end`` its rows and ``a_off``, ``a_off1``, ... the lhs's
    first element (``off``) counted from each part's window's start. The kernel's source, and so its pipeline, is
    the same for every window."""
    return [placed(launch, dict(zip(names, ats, strict=True)),
                   {"m_base": r0, "m_end": r1, **{f"a_off{q or ''}": off - at // 4 for q, at in enumerate(ats)}})
            for r0, r1, ats in windows]


def _batch_windows(spec, off, geometry, per, limits) -> tuple:
    """``(offsets, size)``: windows of ``spec``'s buffer (float32 elements; ``off`` the operand's first element) of
    ``size`` bytes each (at most ``limit``, a multiple of 16), window ``i`` starting at byte ``offsets[i]`` (a
    multiple of ``align``; ``limits = (limit, align)``) and holding every element of the batch elements
    ``i * per .. (i + 1) * per - 1``, or ``((), 0)`` where they do not fit. ``geometry = (sb, extent, B)``: batch
    element ``bi`` of ``B`` is the ``extent`` elements from ``off + batch_offset(bi, sb)`` (``sb`` one stride or
    ``((size, stride), ...)``, row-major). Every window has the same size (one kernel source reads them all): one
    that would run past the buffer's end is moved back to end within it."""
    sb, extent, count = geometry
    align = limits[1]
    total = math.prod(spec.shape) * np.dtype(spec.dtype).itemsize
    pairs = ((count, sb),) if not isinstance(sb, tuple) else sb
    sizes = [n for n, _ in pairs]

    def first(bi):
        return off + sum(int(i) * st for i, (_, st) in zip(np.unravel_index(bi, sizes), pairs, strict=True))
    spans = []
    for b0 in range(0, count, per):
        firsts = [first(bi) for bi in range(b0, b0 + per)]
        at = 4 * min(firsts)
        spans.append((at - at % align, 4 * (max(firsts) + extent)))
    fit = _fit_windows(spans, total, limits) if off % 4 == 0 else ()
    return (fit[1], fit[0]) if fit else ((), 0)


def _fit_windows(spans, total, limits) -> tuple:
    """``(size, offsets)``: one uniform window size (bytes, a multiple of 16, at most ``limit``) that holds every
    span ``(at, end)`` of ``spans`` (byte ranges of a buffer of ``total`` bytes, each ``at`` a multiple of ``align``;
    ``limits = (limit, align)``: WebGPU's ``maxUniformBufferBindingSize`` and ``minUniformBufferOffsetAlignment``)
    from its window's byte offset, or ``()`` where none fits. Each span's window starts at its ``at``, except one that
    would run past the buffer's end: it ends at the end instead, moved back to an aligned start (the size grown to
    the next one), so that one kernel source reads every window (``_row_windows``, ``_batch_windows``,
    ``_uniform_windows``)."""
    limit, align = limits
    size = -(-max(end - at for at, end in spans) // 16) * 16
    if any(at + size > total for at, _ in spans):
        # a window that would run past the buffer's end ends at it: sized so that it starts at an aligned byte
        size += (total - size) % align
    if size > limit or size > total or total % 16:
        return ()
    return size, tuple(min(at, total - size) for at, _ in spans)


def _batch_launches(launch, names, windows, offs) -> list:
    """One launch of the subgroup product ``launch`` per batch window (``DotGroup._batch_plan``'s ``(b0, lhs
    offset, rhs offset)``): each operand's uniform binding of ``names`` (``None``: the operand keeps its binding)
    placed at its window's byte offset, the scalar ``b_base`` the window's first batch element and ``a_off``,
    ``b_off`` the operands' first elements (``offs``) counted from their windows' starts."""
    out = []
    for b0, *ats in windows:
        given = {"b_base": b0, **{k: off - (at // 4 if n is not None else 0)
                                  for k, off, n, at in zip(("a_off", "b_off"), offs, names, ats, strict=True)}}
        out.append(placed(launch, {n: at for n, at in zip(names, ats, strict=True) if n is not None}, given))
    return out


class _OperandReader:
    """How ``DotGroup._blocked`` reads one operand's ``r`` rows (lhs) or columns (rhs) of the block starting at
    ``first`` per step of the contraction: one element per load (``along=None``, through ``load``: the group's
    ``_load``, which converts a low-bit operand in registers), four consecutive steps of the contraction per
    vector load (``"k"``), or four consecutive rows per vector load (``"rows"``; the
    last vector of a block past the operand's ``count`` rows is clamped to its last four, whose products are
    not stored). ``base``: the element offset of the batch; ``s_own``, ``s_k``: the strides of the rows and
    of the contraction (scalar parameters)."""

    def __init__(self, b, name, spec, dt, base, first, r, count, s_own, s_k, along, load):
        self.b, self.name, self.spec, self.dt, self.along, self.load = b, name, spec, dt, along, load
        self.s_k, self.r = s_k, r
        four = const(4, INT32)
        if along is None or along == "k":
            last = b.let(op("sub", count, const(1, INT32)))
            rows = []
            for i in range(r):
                at = b.let(op("add", first, const(i, INT32))) if i else first
                rows.append(b.let(op("add", base, op("mul", select(op("lt", at, count), at, last), s_own))))
            # "k": the vector index of each row's first element (a multiple of 4: _vector_reads)
            self.rows = rows if along is None else [b.let(op("div", row, four)) for row in rows]
        else:
            last = b.let(op("sub", count, four))
            self.rows = []
            for q in range(r // 4):
                at = b.let(op("add", first, const(4 * q, INT32))) if q else first
                self.rows.append(b.let(op("div", op("add", base, select(op("lt", at, count), at, last)), four)))
            self.sk4 = b.let(op("div", s_k, four))
        self.vname, self.row_names, self.part_names = None, (), ()
        self.vectors, self.loaded = (), ()
        self.windows, self.first_step = (), 0

    def fits(self, uniform) -> bool:
        """Whether the operand is read as vectors from a buffer of at most ``uniform`` bytes (the scheduler option
        ``dot_uniform``; ``UNIFORM_OPERANDS``) of its own dtype: ``bind`` makes it one uniform array."""
        nbytes = math.prod(self.spec.shape) * np.dtype(self.spec.dtype).itemsize
        return (self.along is not None and UNIFORM_OPERANDS and np.dtype(self.spec.dtype) == np.dtype(self.dt)
                and nbytes <= uniform)

    def bind(self, args, uniform=0, windows=()):
        """The vector binding of the operand's buffer (beside its element binding, which the epilogue may
        read too), recorded in ``args``: a uniform binding (``base.uniform_binding``) where the whole buffer
        ``fits``; else, given ``windows`` (``_uniform_windows``: ``(k0, k1, offset, size)``), a uniform binding per
        window, read by ``values`` at the window of ``window``'s steps; else a storage one."""
        if self.along is None:
            return
        if self.fits(uniform):
            self.vname = uniform_binding(self.b, args, self.spec, self.dt)
        elif windows and np.dtype(self.spec.dtype) == np.dtype(self.dt):
            self.windows = tuple((k0, k1, uniform_binding(self.b, args, self.spec, self.dt, (at, size)))
                                 for k0, k1, at, size in windows)
        else:
            self.vname = vec4_binding(self.b, args, self.spec, self.dt)

    def window(self, k):
        """Read the steps from ``k`` on (a loop of ``_accumulate``'s that starts at ``k``) from the window that
        holds step ``k`` (where ``bind`` made windows)."""
        for k0, k1, name in self.windows:
            if k0 <= k < k1:
                self.vname, self.first_step = name, k0

    def spread(self, value, dtype) -> list:
        """The values a work item's load ``value`` (of ``dtype``) gives it: the value itself (``_SharedRows``:
        every work item's, broadcast)."""
        return [value]

    def start(self, k, spread=True):
        """The loads of one iteration at contraction index ``k`` that all its steps share (``"k"``), each
        ``spread`` (``_SharedRows``: broadcast) unless told not to (``loaded``: the loads as they are)."""
        if self.along == "k":
            kq = self.b.let(op("div", k, const(4, INT32)))
            vt = vector_dtype(self.dt)
            names = self.row_names or [self.vname] * len(self.rows)
            # each load then its spread (broadcasts), in that order: the "k" order's kernels as before
            loads = (self.b.load(name, op("add", row, kq), vt) for row, name in zip(self.rows, names, strict=True))
            if not spread:
                self.loaded = list(loads)
                return
            self.vectors = [v for x in loads for v in self.spread(x, vt)]

    def values(self, k, kk):
        """The operand's ``r`` values at contraction index ``k + kk``."""
        b = self.b
        if self.along == "k":
            return [b.let(Lane(v, kk, self.dt)) for v in self.vectors]
        kofs = self._step_offset(k, kk)
        if self.along is None:
            return [x for row in self.rows for x in self.spread(self._step_load(row, kofs), self.dt)]
        out = []
        for row in self.rows:
            for v in self.spread(self._step_load(row, kofs), vector_dtype(self.dt)):
                out.extend(b.let(Lane(v, lane, self.dt)) for lane in range(4))
        return out

    def _step_offset(self, k, kk):
        """The offset of contraction index ``k + kk`` from a row's address (``along`` ``None`` or ``"rows"``)."""
        b = self.b
        kat = b.let(op("add", k, const(kk, INT32))) if kk else k
        if self.along is None:
            return b.let(op("mul", kat, self.s_k))
        if self.first_step:   # a window's steps from its first (``window``)
            kat = b.let(op("sub", kat, const(self.first_step, INT32)))
        return b.let(op("mul", kat, self.sk4))

    def _step_load(self, row, kofs):
        """This work item's load of ``row`` (an entry of ``rows``) at offset ``kofs`` (``_step_offset``): an
        element (``along=None``) or four rows (``"rows"``)."""
        if self.along is None:
            return self.load(self.b, self.name, op("add", row, kofs), self.dt)
        return self.b.load(self.vname, op("add", row, kofs), vector_dtype(self.dt))


class _SharedRows(_OperandReader):
    """The lhs rows of ``DotGroup._subgroup``'s tile, loaded by the subgroup's work items together and
    broadcast: ``rows`` rows from ``first`` (``where = (base, first, count, s_own, s_k)``, as
    ``_OperandReader``'s), each of the ``lanes`` work items loading ``rows / lanes`` of them a step: one element
    per load (``along=None``), four steps of its row per vector load (``"k"``), or four consecutive rows per
    vector load (``"rows"``, ``rows / (4 lanes)`` loads a step). Rows past ``count`` are clamped to the last
    (their products are not stored). ``values`` gives the ``rows`` values in row order, in every work item. A
    ``base`` of several element offsets (``DotGroup._subgroup``: a tile in parts of row windows, ``_row_windows``)
    gives each part's rows their own (``parts``: each load's part; ``row_names``, set by the binding, its window)."""

    def __init__(self, b, name, spec, dt, where, shape, along, load):
        base, first, count, s_own, s_k = where
        bases = base if isinstance(base, tuple) else (base,)
        self.b, self.name, self.spec, self.dt, self.along, self.load = b, name, spec, dt, along, load
        self.r, self.lanes = shape
        self.s_k = s_k
        lane, four = Special("lane", 0), const(4, INT32)
        per = 4 * self.lanes if along == "rows" else self.lanes
        last = b.let(op("sub", count, four if along == "rows" else const(1, INT32)))
        self.rows = []    # each work item's load addresses, as _OperandReader's
        self.parts = [j * per * len(bases) // self.r for j in range(self.r // per)]
        for j in range(self.r // per):
            base = bases[self.parts[j]]
            at = b.let(op("add", op("add", first, const(j * per, INT32)),
                          op("mul", lane, four) if along == "rows" else lane))
            if along == "rows":
                self.rows.append(b.let(op("div", op("add", base, select(op("lt", at, count), at, last)), four)))
            else:
                row = b.let(op("add", base, op("mul", select(op("lt", at, count), at, last), s_own)))
                self.rows.append(b.let(op("div", row, four)) if along == "k" else row)
        self.sk4 = b.let(op("div", s_k, four)) if along == "rows" else None
        self.vname, self.row_names, self.part_names = None, (), ()
        self.vectors, self.loaded, self.held = (), (), {}
        self.windows, self.first_step = (), 0

    def spread(self, value, dtype) -> list:
        """``value`` of each work item of the subgroup, in lane order, broadcast to all of them."""
        return [self.b.let(Broadcast(value, lane, dtype), "x") for lane in range(self.lanes)]

    def start_rows(self, k, step):
        """Row order (``_accumulate``): this work item's loads of the iteration at contraction index ``k``
        (``step`` steps), none broadcast yet; ``row`` broadcasts one row's values where they are used."""
        if self.along == "k":
            self.start(k, spread=False)
        else:
            offsets = [self._step_offset(k, kk) for kk in range(step)]
            self.loaded = [[self._step_load(row, kofs) for row in self.rows] for kofs in offsets]
        self.held = {}

    def row(self, i, kk):
        """Row ``i``'s value at step ``kk`` of the iteration ``start_rows`` loaded, in every work item: broadcast
        from the work item that loaded it (``"k"``: its four steps at once, the first time row ``i`` is asked
        for; ``"rows"``: the one element of the four rows it loaded)."""
        b, vt = self.b, vector_dtype(self.dt)
        if self.along == "k":
            q, lane = divmod(i, self.lanes)
            if i not in self.held:
                self.held[i] = b.let(Broadcast(self.loaded[q], lane, vt), "x")
            return b.let(Lane(self.held[i], kk, self.dt))
        if self.along is None:
            q, lane = divmod(i, self.lanes)
            return b.let(Broadcast(self.loaded[kk][q], lane, self.dt), "x")
        q, rest = divmod(i, 4 * self.lanes)
        lane, c = divmod(rest, 4)
        return b.let(Broadcast(b.let(Lane(self.loaded[kk][q], c, self.dt)), lane, self.dt), "x")


def operand_view(ctx, v):
    """``(base var, offset, strides)`` reading ``v`` from a buffer through transposes, reshapes and
    broadcasts, where the base is (or will be) materialised; ``None`` for a literal. A conversion out of a
    low-bit dtype (``w8.astype(float32)``: float8, int4, uint4 held as bytes) is read through too: the base is
    then the byte array, which ``DotGroup`` loads and converts in registers (4x fewer bytes than the float32
    weights a conversion kernel would write and the product read back)."""
    if isinstance(v, Literal):
        return None
    if ctx.in_buffer(v) or v not in ctx.producer:
        return v, 0, contiguous_strides(v.aval.shape)
    e = ctx.producer[v]
    if (e.primitive == P.convert_element_type and e.inputs[0].aval.dtype in LOW_BIT
            and v.aval.dtype not in LOW_BIT and v not in converted_first(ctx)):
        inner = operand_view(ctx, e.inputs[0])
        return inner if inner is not None else (v, 0, contiguous_strides(v.aval.shape))
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


def converted_first(ctx) -> set:
    """The conversions out of a low-bit dtype that ``operand_view`` does not read through: with the scheduler
    option ``dot_upcast_reuse`` (``r``), those feeding (through views) a product operand each of whose elements
    the product uses more than ``r`` times (the other operand's free size), which then reads the converted values
    from a buffer a map kernel writes. A byte converted in the product's loop is converted again in every work
    item that uses it (a block of rows each): lavapipe took 48 ms for a 256x256 float8 product so, 8.7-10.7 ms
    with its operands converted first (6.2 ms for float32 operands); a decode step's weights (1-4 rows) are still
    read as bytes. Computed once per scheduling run (kept in ``ctx.memo``)."""
    limit = ctx.opts.get("dot_upcast_reuse")
    if limit is None:
        return frozenset()
    found = ctx.memo.get("converted_first")
    if found is None:
        found = ctx.memo["converted_first"] = set()
        for e in ctx.prog.eqns:
            if e.primitive is P.dot_general:
                free = [_free_size(x.aval.shape, dims) for x, dims in zip(e.inputs, zip(*e.params["dimension_numbers"]),
                                                                           strict=True)]
                for x, reuse in zip(e.inputs, free[::-1], strict=True):
                    conv = _conversion_under_views(ctx, x)
                    if reuse > limit and conv is not None:
                        found.add(conv)
    return found


def _free_size(shape, dims) -> int:
    """Elements of an operand's free dimensions (``dims``: its contracting and batch dimensions)."""
    skip = {d for group in dims for d in group}
    return math.prod(n for d, n in enumerate(shape) if d not in skip)


def _conversion_under_views(ctx, v):
    """The result of the conversion out of a low-bit dtype that ``v`` views (transposes, reshapes, broadcasts
    of it), or ``None``."""
    while isinstance(v, Var) and v in ctx.producer and not ctx.in_buffer(v):
        e = ctx.producer[v]
        if e.primitive == P.convert_element_type:
            return v if e.inputs[0].aval.dtype in LOW_BIT and v.aval.dtype not in LOW_BIT else None
        if e.primitive not in VIEW_OPS:
            return None
        v = e.inputs[0]
    return None


#: What ``schedule`` collects into its tables ``GROUPS`` (and ``OPERAND_VIEWS``).
GROUPS = {P.dot_general: DotGroup}
OPERAND_VIEWS = {P.dot_general: operand_view}
