"""``pallas_call`` as a kernel: a user's Pallas kernel body rendered into fnarray's kernel IR.

One work-group runs one program instance of the grid (instance ``group_id``; past the device's dispatch limit
each work-group walks several instances), except that the instances which may write the same output block
(along the grid axes ``revisited_axes`` finds: those some output's index map ignores or does not follow one to
one, for an output the body touches other than by atomics) are one work-group's, which walks them in the grid's
row-major order, a barrier between steps: Pallas's grid is sequential, and a kernel accumulating into a block
along ``k`` (``o_ref[...] += ...``) sees what the step before wrote. (Before the fifteenth session each of them
was a work-group of its own, and concurrent work-groups raced on the block: the CI's scaled k-accumulating
product came out wrong in one block.) The other axes are spread across work-groups. The traced body (``fnarray.core.pallas``) is rendered statement by
statement, with block values in one of three forms:

- *inline* (``_Lazy``): a function from an element's coordinates to a kernel-IR expression: loads from a ref,
  elementwise operations (the kernel compiler's own element rules, ``kernels/rules.py``), broadcasts, reshapes,
  transposes and iotas cost nothing until a consumer evaluates them at its element;
- *in work-group memory* (``_Local``): the results of reductions and ``dot`` s, the loop carries, and the
  operands of a ``dot`` (staged there once, read by every work item: the tiles of a tiled matmul). They are
  written by a *parallel phase* (the work-group's items take the block's elements in turn, ``WG`` apart) and a
  barrier;
- *refs* (``_Ref``): an operand's or result's block is read and written in place in its global buffer (the
  block's offsets come from the ``BlockSpec``'s index map, rendered too); a scratch ref (``pl.Local``) is an
  array in work-group memory.

A store is a parallel phase over the stored block, guarded by the mask and by the array's bounds (a padded
last block writes only its real elements), followed by a barrier (barriers that order nothing are trimmed); a
stored value that reads the ref it is written to is first computed into each work item's private array (the
same elements, the same items), so that no item overwrites what another still reads. ``fori_loop`` is a counted
``For`` loop around its body (carries in work-group memory, updated in place where each item reads only the
elements it writes, else through staging arrays: ``_update_carries``); ``pl.when`` an ``If``. The barriers
that order nothing are removed afterwards (``kernels/barriers.py``). On CPU devices an inline value with a
transcendental function that would be computed several times per element is materialized once
(``_Renderer.compute_once``). Conditions and loop bounds must be
the same across the work-group (grid indices, loop counters, constants), as on every Pallas target.

``pl.atomic_*`` is a phase of ``ir.Atomic`` statements (the device's atomics) on the output's buffer.

On CPU devices (no staged ``dot`` operands) a k-accumulating product body (``_accumulating_dot``:
``o_ref[...] += x_ref[...] @ y_ref[...]``, zeroed at ``k == 0`` or not, the output block fixed along the last
grid axis) renders as one work-group per output block walking ``k``, each work item's register tile kept across
all of ``k`` and stored once (``_render_accumulating_dot``). On CPU OpenCL devices global addresses are 64-bit
with their constant part added last (``_wide``); on CPU devices lanes of a shared reduction take unrolled runs of
consecutive elements, whose index arithmetic ``_div``/``_rem`` keep constant (docs/performance.md).

On a CPU WebGPU adapter (the scheduler option ``dot_vec4``, ``render(vectors=)``) a float32 input may also be
bound as ``vec4<f32>`` vectors: the k-accumulating product reads both operands four elements per load into an
8 x 8 register tile (``_accumulate_vectors``), and a ``dot`` operand that is a plain load of an input, 4-aligned
along the contraction (flash attention's ``k.T``) or along the register tile's columns (its ``v``), is read as
lanes of vector loads (``_Lazy.vector``, ``_vector_plans``). Each product is still added in the contraction's
order, so the results equal the scalar form's. On lavapipe the loads were the cost (flash attention with its
``k`` loads replaced by a constant took half the time); four elements per load made flash attention 1.6x and
the matmul 2.4x faster there (docs/performance.md). Where the adapter has subgroups as well (native, the option
``dot_subgroup``: ``render(subgroup=)``), the k-accumulating product's subgroups share their rows of x by
broadcast (``_subgroup_elements``, as ``groups/dot.py``'s ``_subgroup``), and a row-mode ``dot`` loads each vector
of its right operand (the same in every work item) once per subgroup and broadcasts it (``_shared_vectors``):
the matmul example 0.6x, flash attention 0.45x the time on lavapipe. With the option ``pallas_lane_maps``, an
operand computed elementwise from a load and rank-0 values (``q * scale``) is read as the load's lanes
(``_lane_map``). None of these is in browser bundles (``portable_limits()``).

*Row mode* (``render(rows=True)``, the default on lavapipe and, for a body without a ``dot``, on PoCL; a
``PALLAS_TUNABLE`` choice elsewhere): one work item per row of the first output block, each phase giving row ``lid``
of its block to item ``lid``, the block values in the item's private arrays and no barrier; ``_Renderer.own_row``
refuses (``_NotRowwise``) any access of shared memory outside the item's row, and the usual form is rendered
instead. With ``row_tile`` rows per item (``render(row_tile=)``, rows ``lid``, ``lid + wg``, ...:
``_Renderer.row_ids``; two by default on lavapipe for a body with a ``dot``) the phases take the item's rows in turn
and a ``dot`` with a two-axis result computes one register tile over all of them, each right-operand vector read
once for its rows (flash attention 0.63-0.68x the time of one row per item on lavapipe). In a body without a ``dot``
a reduction of a value that reads refs takes the item's rows in one loop instead (``_joint_reduce``: the 4-bit
matvec example with 8 rows per item, each element of ``x`` loaded once for the 8 and first in each step:
``_shared_first``; on lavapipe and on PoCL with LLVM >= 15 (the option ``lane_vec4``) read as ``vec4`` /
``float4``/``uint4`` lanes, ``_lane_load``; on PoCL with 32-bit ``(int)base + c`` addresses, ``_base32``: 0.3x the
time of one row per item of 8-row blocks on lavapipe, 0.6-0.7x on PoCL 3.0, 0.8-1.0x on 3.1 before ``_base32`` and
the OpenCL lanes, which took 0.81x / 0.71x of that kernel's time there). Inline values fold what is known while
rendering: integer arithmetic on constant coordinates (an unrolled axis's ``iota``, so ``w >> (4 * j)`` shifts by a
constant), index divisions with a constant part past the divisor (``_div``), and an unsigned integer below ``2**31``
(masked by or shifted right by a constant) converts to a float through int32 (``_Renderer.small``). Outside row mode
a transposed ``dot`` operand (``k.T``) may be staged in work-group memory in its own layout (``stage``; chosen by
``_pallas_cost`` on PoCL with LLVM 15, whose vectoriser gathers the in-place reads).

What does not render (sorts, gathers, control flow other than ``fori_loop``/``when``, atomics on scratch refs or
of other dtypes than int32/uint32/float32, blocks past the device's work-group memory) makes
``unsupported_reason`` say so: the backend runs the equation in the interpreter instead, with a
``FallbackWarning`` naming the reason.
"""

from __future__ import annotations

import collections
import dataclasses
import math

import numpy as np

from fnarray.core import primitives as P
from fnarray.core.cache import LRUCache
from fnarray.core.config import config
from fnarray.core.ir import Literal, Var
from fnarray.core.subprograms import CALL_PROGRAM
from fnarray.core.pallas import pallas_atomic_p, pallas_call_p, pallas_load_p, pallas_loop_p, pallas_store_p, \
    pallas_when_p, walk_body
from fnarray.lowering.kernels import facts
from fnarray.lowering.kernels.barriers import prune_barriers
from fnarray.lowering.kernels.builder import KernelBuilder
from fnarray.lowering.kernels.groups.base import Launch, EquationGroup, Tracker, vec4_binding
from fnarray.lowering.kernels.ir import ATOMIC_DTYPES, INT32, ArrayDecl, Assign, Barrier, BufferParam, Cast, Const, \
    Broadcast, For, If, Lane, Let, Load, Op, Special, Sym, const, vector_dtype, walk_exprs, without
from fnarray.lowering.kernels.tuning import Tunable
from fnarray.lowering.kernels.rules import ELEMENTWISE, add_of, convert, highest, lowest, max_of, min_of, mul_of, op, \
    select

__all__ = ["PallasGroup", "GROUPS", "OPERAND_VIEWS", "unsupported_reason", "LOCAL_BYTES", "workgroup_size",
           "Unrenderable", "render", "hoisted_kernel", "default_workgroup", "PALLAS_TUNABLE", "revisited_axes"]

#: Work-group memory one kernel may use where the device does not report its size
#: (``Capabilities.local_memory_bytes``): WebGPU's guaranteed ``maxComputeWorkgroupStorageSize``.
LOCAL_BYTES = 16384
_MAX_WG = 256
#: work items of a kernel with a ``dot`` or a reduction on a CPU OpenCL device (PoCL) and on another CPU device
#: (lavapipe) (``workgroup_size``)
_CPU_OPENCL_WG = 8
_CPU_WG = 16
#: the most outputs of a ``dot``'s register tile per work item by default (``_dot_tile``; ``PALLAS_TUNABLE``'s
#: ``tile``)
_DOT_TILE = 16


class Unrenderable(Exception):
    """A kernel body the kernel IR cannot express (the reason is the message)."""


class _NotRowwise(Exception):
    """A kernel body that row mode (``render(rows=True)``) cannot run: some work item would read or write
    another's row, or a phase is not one row per work item."""


def workgroup_size(caps, params, largest, has_dot=False):
    """Work items per program instance: ``compiler_params["workgroup"]``, else on a CPU device, for kernels with
    a ``dot`` or a reduction (``has_dot``), 8 (a CPU OpenCL device such as PoCL) or 16 (a WebGPU CPU adapter such
    as lavapipe), and 64 for the other kernels on lavapipe, else the power of two covering the largest block (32
    to 256); within the device's limit. ``PALLAS_TUNABLE`` times the others where autotuning is on."""
    cp = dict(params.get("compiler_params", ()))
    cap = min(_MAX_WG, caps.max_workgroup_size or _MAX_WG)
    if "workgroup" in cp:
        wg = int(cp["workgroup"])
        if wg < 1 or wg > cap:
            raise Unrenderable(f"compiler_params workgroup={wg} is outside 1..{cap} on this device")
        return wg
    register = getattr(caps, "matmul_tiling", "local") == "register"
    if (not caps.tiling_pays or register) and has_dot:
        # A CPU runs a work-group's items one after another: fewer items hold bigger register tiles, repeat less
        # of the phases shorter than the work-group and combine fewer partial sums (flash attention, 16 query
        # rows, at 8 or 16 items: 0.55-0.7x the time of 64 on PoCL 3.0 and lavapipe; docs/performance.md)
        return min(_CPU_OPENCL_WG if register else _CPU_WG, cap)
    if not caps.tiling_pays:
        # Measured on the examples (docs/performance.md): lavapipe 0.6-1.0x the time of 256 work items for every
        # kernel; PoCL 0.45x for the matmul and 0.65x for flash attention, but 1.6x for a vector add.
        return min(64, cap)
    wg = 32
    while wg < largest and wg < cap:
        wg *= 2
    return min(wg, cap)


#: The work-group size of a ``pallas_call`` kernel, timed by ``tuning.choose`` where autotuning is on (the
#: default is ``workgroup_size``'s; ``compiler_params={"workgroup": n}`` fixes it untimed).
def _pallas_cost(choice, default, facts):
    """``PALLAS_TUNABLE``'s cost model: the default, except that PoCL compiling with LLVM 15 or later (Debian's
    PoCL 3.1) vectorises a register tile's columns read from a transposed operand (flash attention's ``k.T``)
    into gathers, so there staging it costs less (the flash-attention example 0.68x the time; 1.09x on PoCL 3.0,
    LLVM 14), and ``dot`` register tiles of up to 64 outputs, 16 columns, cost less than of 16 (the example
    0.87x the time; 1.09x on PoCL 3.0; tenth session), and row mode more (1.2x the staged form). Only for a
    body with a ``dot`` (the group's fact ``dot``). Each choice away from the default costs a little (nothing
    else is modelled)."""
    away = sum(choice.get(k) != default.get(k) for k in choice) * 0.01
    if facts.get("compiler") == "pocl" and facts.get("llvm", 0) >= 15 and facts.get("dot", 1):
        if choice.get("rows"):
            return away + 1.0
        return away + (0.0 if choice.get("stage") else 1.0) + (0.0 if choice.get("tile", _DOT_TILE) > _DOT_TILE
                                                              else 0.5)
    return away


PALLAS_TUNABLE = Tunable("pallas_workgroup", {"workgroup": (8, 16, 32, 64, 128, 256), "rows": (False, True),
                                              "stage": (False, True), "tile": (_DOT_TILE, 64),
                                              "row_tile": (1, 2)},
                         doc="work items per program instance of a pallas_call kernel; one work item per row "
                             "of the blocks without barriers (rows, where ``row_count`` allows it); a "
                             "transposed dot operand staged in work-group memory (stage); the most outputs of "
                             "a dot's register tile per work item (tile: 16, of up to 8 columns, or 64, of up "
                             "to 16); in row mode, the rows per work item (row_tile), a dot's register tile "
                             "over all of them",
                         valid=lambda c, facts: c["workgroup"] <= facts.get("workgroup_limit", _MAX_WG) and (
                             not c.get("rows") and c.get("row_tile", 1) == 1
                             or c.get("rows") and c["workgroup"] * c.get("row_tile", 1) == facts.get("rows")
                             and not c.get("stage") and c.get("tile", _DOT_TILE) == _DOT_TILE),
                         cost=_pallas_cost)


def _has_dot(program):
    """Whether the kernel body has a ``dot`` or a reduction (``workgroup_size``)."""
    return any(e.primitive is P.dot_general or e.primitive in _REDUCE for e in walk_body(program))


# ------------------------------------------------------------------------------------------ values


def _strides(shape):
    out, s = [], 1
    for n in reversed(shape):
        out.append(s)
        s *= n
    return tuple(reversed(out))


def _i(v):
    return const(int(v), INT32)


def _linear(idx, shape):
    terms = []
    for x, s in zip(idx, _strides(shape), strict=True):
        # (a / c) * (c * s) + (a % c) * s is a * s (C's division truncates and its remainder keeps the identity
        # for any sign): a reshape that splits an index and one that joins it again cost nothing.
        if terms and _splits(terms[-1], x, s):
            terms[-1] = (x.args[0], s)
        elif terms and _splits_plus(terms[-1], x, s) is not None:
            terms[-1] = (_splits_plus(terms[-1], x, s), s)
        elif terms and _splits_after(terms[-1], x, s) is not None:
            terms[-1] = (_splits_after(terms[-1], x, s), s)
        else:
            terms.append((x, s))
    e = _i(0)
    for x, s in terms:
        e = op("add", e, op("mul", x, _i(s)))
    return e


def _splits(prev, x, s):
    px, ps = prev
    return (isinstance(px, Op) and px.op == "div" and isinstance(x, Op) and x.op == "rem"
            and px.args == x.args and isinstance(px.args[1], Const) and ps == int(px.args[1].value) * s)


def _splits_plus(prev, x, s):
    """``a + j`` where ``prev, x`` are ``(a / c, c * s)`` and ``(a % c) + j`` (the form ``_rem`` leaves for an
    index ``a + j`` with ``j`` below every step of ``a``), else ``None``."""
    if isinstance(x, Op) and x.op == "add" and isinstance(x.args[1], Const) and _splits(prev, x.args[0], s):
        return op("add", x.args[0].args[0], x.args[1])
    return None


def _splits_after(prev, x, s):
    """``(q + a / c) * (c * s) + (a % c) * s`` as ``(q * c + a) * s`` (the form ``_div`` leaves): ``q * c + a``,
    else ``None``."""
    px, ps = prev
    j = 0
    if isinstance(x, Op) and x.op == "add" and isinstance(x.args[1], Const):   # (a % c) + j, from ``_rem``
        x, j = x.args[0], int(x.args[1].value)
    if not (isinstance(px, Op) and px.op == "add" and isinstance(x, Op) and x.op == "rem"
            and isinstance(x.args[1], Const)):
        return None
    c = int(x.args[1].value)
    terms = _terms(px)
    if ps != c * s or not any(isinstance(t, Op) and t.op == "div" and t.args == x.args for t in terms):
        return None
    q = [t for t in terms if not (isinstance(t, Op) and t.op == "div" and t.args == x.args)]
    if len(q) != len(terms) - 1:
        return None
    out = op("add", op("mul", _sum(q), _i(c)), x.args[0])
    return op("add", out, _i(j)) if j else out


def _unravel(flat, shape):
    out = []
    for d, (n, s) in enumerate(zip(shape, _strides(shape), strict=True)):
        if n == 1:
            out.append(_i(0))
            continue
        e = flat if s == 1 else _div(flat, s)
        if d > 0:
            e = _rem(e, n)
        out.append(e)
    return tuple(out)


def _terms(e):
    """The terms of an int32 sum ``e`` (nested ``add`` s)."""
    if isinstance(e, Op) and e.op == "add":
        return _terms(e.args[0]) + _terms(e.args[1])
    return [e]


def _sum(terms):
    out = None
    for t in terms:
        out = t if out is None else op("add", out, t)
    return _i(0) if out is None else out


def _multiple(e, c):
    """``e / c`` where ``e`` is ``x * m`` with ``c`` dividing ``m`` (or a constant multiple of ``c``), else
    ``None``."""
    if isinstance(e, Const) and int(e.value) % c == 0:
        return _i(int(e.value) // c)
    if isinstance(e, Op) and e.op == "mul" and isinstance(e.args[1], Const) and int(e.args[1].value) % c == 0:
        return op("mul", e.args[0], _i(int(e.args[1].value) // c))
    return None


def _split_multiples(e, c):
    """``(quotients of the terms of e that c divides, the other terms)``."""
    qs, rest = [], []
    for t in _terms(e):
        q = _multiple(t, c)
        (rest if q is None else qs).append(t if q is None else q)
    return qs, rest


def _div(e, c):
    """``e / c`` of a non-negative index: the terms ``x * m`` of a sum that ``c`` divides come out as ``x * (m / c)``
    (a reduction's index ``t * lanes * u + lane * u + j`` then keeps its word index and its lane within the
    word apart: the 4-bit matvec's constant shift amounts)."""
    qs, rest = _split_multiples(e, c)
    rest = _drop_below_step(rest, c)
    if not qs:
        return op("div", _sum(rest), _i(c))
    r = _sum(rest)
    if isinstance(r, Const) and 0 <= int(r.value):
        # a constant part past ``c`` (element 9 of a run of 64 elements, 8 to a word) folds into the quotient
        return _sum(qs + ([_i(int(r.value) // c)] if int(r.value) >= c else []))
    return op("add", _sum(qs), op("div", r, _i(c)))


def _below_step(terms, c):
    """``(j, others)`` where ``terms`` are ``x * m`` terms and one constant ``0 <= j < m`` with ``m`` dividing ``c``
    (``(x * m + j) / c == (x * m) / c`` and ``(x * m + j) % c == (x * m) % c + j`` for non-negative ``x``), else
    ``(None, terms)``."""
    ks = [t for t in terms if isinstance(t, Const)]
    xs = [t for t in terms if not isinstance(t, Const)]
    if len(ks) != 1 or not xs:
        return None, terms
    j = int(ks[0].value)
    ms = [int(t.args[1].value) for t in xs if isinstance(t, Op) and t.op == "mul" and isinstance(t.args[1], Const)]
    if len(ms) != len(xs) or not all(0 <= j < m and c % m == 0 for m in ms):
        return None, terms
    return j, xs


def _drop_below_step(terms, c):
    return _below_step(terms, c)[1]


def _rem(e, c):
    """``e % c`` of a non-negative index, without the terms that ``c`` divides."""
    if isinstance(e, Op) and e.op == "rem" and isinstance(e.args[1], Const) and int(e.args[1].value) % c == 0:
        return _rem(e.args[0], c)
    qs, rest = _split_multiples(e, c)
    j, xs = _below_step(rest, c)
    if j is not None:
        return op("add", _rem(_sum(xs), c), _i(j)) if j else _rem(_sum(xs), c)
    if not qs:
        return op("rem", e, _i(c))
    r = _sum(rest)
    if isinstance(r, Const) and 0 <= int(r.value):
        return _i(int(r.value) % c)
    return op("rem", r, _i(c))


@dataclasses.dataclass
class _Lazy:
    """A value computed inline at each element: ``at(idx) -> Expr``; ``reads``: the refs it reads."""

    shape: tuple
    dtype: np.dtype
    at: object
    reads: frozenset = frozenset()
    aligned: dict = dataclasses.field(default_factory=dict)   # ref -> the block it reads only at the own element
    heavy: bool = False   # computes a transcendental function (``facts.with_cost("expensive")``) per element
    swapped: bool = False   # a transpose that moves the last axis (``k.T``): ``stage_swapped`` stages it
    # ``(axis, vec, k)``: a plain load of float32 elements of input ``k``, ``vec(idx)`` the four-element vector
    # (``Load`` of the input's vector binding) holding elements ``idx`` .. ``idx + 3`` along ``axis``, for
    # ``idx[axis]`` a multiple of 4 (``_vector_load``; ``_dot`` reads its operands through it)
    vector: tuple | None = None
    # with ``vector``: ``f(lane) -> Expr``, this value's element from the load's (an elementwise function of a
    # plain load and rank-0 values: flash attention's ``q * scale``, ``_lane_map``); ``None``: the lane itself
    lane_map: object = None


@dataclasses.dataclass
class _Ref:
    """A ref: a block of a global buffer (``space="global"``) or a work-group array (``"local"``)."""

    space: str
    name: str
    dtype: np.dtype
    shape: tuple                      # the ref's shape (squeezed axes dropped)
    array_shape: tuple = ()           # global: the whole array's shape
    offsets: tuple = ()               # global: per array axis, the block's first element (Expr)
    axes: tuple = ()                  # global: the array axis of each ref axis
    padded: bool = False
    wide: bool = False                # global: 64-bit addresses, their constant part added last (``_wide``)
    vector: int | None = None         # global input: its position, for its vector binding (``vector_name``)
    base32: bool = False              # wide: ``_wide``'s form in 32 bits (``_base32``)

    def coords(self, idx):
        """Array coordinates of ref element ``idx`` (a global ref)."""
        g = list(self.offsets)
        for k, a in enumerate(self.axes):
            g[a] = op("add", g[a], idx[k])
        return g

    def address(self, idx, clamp):
        if self.space == "local":
            if clamp:
                idx = [op("max", op("min", x, _i(n - 1)), _i(0)) for x, n in zip(idx, self.shape, strict=True)]
            return _linear(idx, self.shape)
        g = self.coords(idx)
        if clamp:
            g = [op("max", op("min", x, _i(n - 1)), _i(0)) for x, n in zip(g, self.array_shape, strict=True)]
        a = _linear(g, self.array_shape)
        return self.widened(a) if self.wide else a

    def widened(self, a):
        """The 32-bit address ``a`` in ``_wide``'s form: ``(long)rest + c``, or with ``base32`` ``(int)rest + c``."""
        return _wide(a, _INT32 if self.base32 else _INT64)

    def inside(self, idx):
        """Whether ref element ``idx`` is a real element (within the ref and, for a global ref, the array)."""
        conds = []
        if self.space == "local":
            pairs = zip(idx, self.shape, strict=True)
        else:
            pairs = zip(self.coords(idx), self.array_shape, strict=True)
        for x, n in pairs:
            conds.append(op("land", op("ge", x, _i(0)), op("lt", x, _i(n))))
        out = const(True, np.bool_)
        for c in conds:
            out = op("land", out, c)
        return out


def _const_part(e):
    """``(rest, c)`` with ``e == rest + c`` for an int32 index expression (``rest`` ``None`` where ``e`` is
    constant): the constant terms of its sums, through multiplications by constants."""
    if isinstance(e, Const):
        return None, int(e.value)
    if isinstance(e, Op) and e.op == "add":
        (ra, ca), (rb, cb) = _const_part(e.args[0]), _const_part(e.args[1])
        rest = ra if rb is None else rb if ra is None else op("add", ra, rb)
        return rest, ca + cb
    if isinstance(e, Op) and e.op == "mul" and isinstance(e.args[1], Const):
        ra, ca = _const_part(e.args[0])
        k = int(e.args[1].value)
        return (None if ra is None else op("mul", ra, e.args[1])), ca * k
    return e, 0


def _wide(a, dtype=None):
    """A global address as ``(long)rest + c`` (``dtype``: ``int32``, ``(int)rest + c``: ``_base32``): the loads of
    one work item at consecutive constant offsets (a register tile's columns) then share ``rest`` and differ by
    constants in 64 bits, which PoCL's compiler merges into vector loads; with each int32 address sign-extended on
    its own it did not (as ``register_tiles.packed_product`` found)."""
    rest, c = _const_part(a)
    if rest is None:
        return a
    dtype = _INT64 if dtype is None else dtype
    base = Cast(rest, dtype)
    return base if c == 0 else op("add", base, const(c, dtype))


_INT64 = np.dtype(np.int64)
_INT32 = np.dtype(np.int32)


def _base32(ref):
    """``ref`` with ``_wide``'s address form in 32 bits (``(int)rest + c``), where it is a wide ref of an array
    of fewer than 2**31 elements; else ``ref``. Inside ``_joint_reduce`` on PoCL: the 4-bit matvec example took
    0.81x the time on PoCL 3.0 (LLVM 14) and 0.88x on PoCL 3.1 than with ``long`` addresses; as plain 32-bit
    sums (no shared ``(int)rest``) it took 1.0x on PoCL 3.0."""
    if not ref.wide or math.prod(ref.array_shape) >= 2 ** 31:
        return ref
    return dataclasses.replace(ref, base32=True)


def _bound_address(b, a):
    """Address ``a`` bound to a local, a wide address's 64-bit base to one of its own (shared by the loads at
    constant offsets from it)."""
    if isinstance(a, Op) and a.op == "add" and isinstance(a.args[0], Cast):
        a = op("add", b.let(a.args[0], "base"), a.args[1])
    return b.let(a, "ad")


#: the primitives whose per-element cost makes a value worth computing once (``_heavy``)
_EXPENSIVE = facts.with_cost("expensive")
#: the ``aligned`` key of a work-group array read at the value's own element (``_Renderer.local_value``)
_OWN = ("local",)


def _heavy(v):
    """Whether ``v`` is computed inline with a transcendental function per element (``_Lazy.heavy``)."""
    return isinstance(v, _Lazy) and v.heavy


def _scalar(v):
    return v.at(())


def _at(v, idx):
    """Element ``idx`` of ``v`` (a scalar broadcasts)."""
    return v.at(idx if v.shape else ())


# ------------------------------------------------------------------------------------------ the renderer


class _Renderer:
    """Renders a kernel body into a ``KernelBuilder``, one program instance per work-group."""

    def __init__(self, b, wg, lid, caps=None):
        self.b, self.wg, self.lid = b, wg, lid
        # dot operands are staged in work-group memory where tiles pay (GPUs); CPU devices read them in place
        self.stage_dots = bool(caps is not None and caps.local_memory and caps.tiling_pays
                               and getattr(caps, "matmul_tiling", "local") == "local")
        # 64-bit global addresses on CPU OpenCL devices (``_wide``; WGSL has no 64-bit integers)
        self.wide = bool(caps is not None and getattr(caps, "matmul_tiling", "local") == "register"
                         and _INT64 in caps.dtypes)
        # lanes of a shared reduction take runs of consecutive elements on CPU devices (``_reduce``); GPUs keep
        # the strided form, whose lanes read neighbouring elements together (unmeasured there)
        self.lane_runs = bool(caps is not None and (not caps.tiling_pays
                                                    or getattr(caps, "matmul_tiling", "local") == "register"))
        # phases without per-item bounds tests on CPU OpenCL devices (``par_for``)
        self.clamp_phases = bool(caps is not None and getattr(caps, "uniform_guard", False))
        self.ok, self.sizes = None, {}
        self.local_bytes = 0
        self.local_limit = getattr(caps, "local_memory_bytes", None) or LOCAL_BYTES
        self.barriers = 0
        self.used = set()   # the variables some equation or result reads (an atomic's old values may be unused)
        self.small = set()   # unsigned locals known below 2**31 (a mask, a right shift): converted through int
        # one work item per row (``render(rows=True)``): every phase gives row ``lid`` of its block to item
        # ``lid``; ``shared`` are the refs other work items could write (outputs, scratch), checked like
        # work-group arrays (``own_row``)
        self.rows, self.shared = False, frozenset()
        # row mode's rows of each work item (``render(row_tile=)``): ``lid``, ``lid + wg``, ... (block rows)
        self.row_ids = (lid,)
        # row mode with several rows per item in a body without a ``dot``: a reduction takes the item's rows
        # together (``_joint_reduce``)
        self.joint_rows = False
        # inside ``_joint_reduce``: ``_load`` reads float32/uint32 input elements as lanes of vector loads where the
        # input has a vector binding (``_lane_load``), and wide addresses in 32 bits (``_base32``)
        self.lane_loads = False
        # a transposed ``dot`` operand (``k.T``) staged in work-group memory in its own layout (``render(stage=)``)
        self.stage_swapped = False
        self.row_private = {}   # row mode: the block arrays held as each item's private row (``block_array``)
        # ``vectors(b, k)``: the name of a four-float32 vector binding of input ``k`` (``render(vectors=)``)
        # ``vector_room``: the vector bindings the target's buffers per kernel leave room for (``None``: any)
        self.vectors, self.vector_names, self.vector_room = None, {}, None
        # the most outputs of a ``dot``'s register tile per work item (``render(tile=)``)
        self.dot_tile = _DOT_TILE
        # the subgroup size where a k-accumulating product may share its rows of ``x`` across a subgroup
        # (``render(subgroup=)``), else 0
        self.subgroup = 0
        # elementwise functions of a value read as vectors are read as vectors too (``_lane_map``;
        # ``render(lane_maps=)``)
        self.lane_maps = False
        self.name = "kernel"   # the kernel's name, for errors (``_check_constant_index``)
        self.guarded = 0   # inside a ``pl.when`` or a loop, which may not run (``_check_constant_index``)

    def vector_name(self, k):
        """The name of input ``k``'s four-float32 vector binding (``render(vectors=)``), made on first use;
        ``None`` where the target's buffers per kernel leave no room for another."""
        if k not in self.vector_names:
            if self.vector_room is not None and len(self.vector_names) >= self.vector_room:
                return None
            self.vector_names[k] = self.vectors(self.b, k)
        return self.vector_names[k]

    # -------------------------------------------------------------- memory
    def local_array(self, dtype, size, hint):
        self.local_bytes += np.dtype(dtype).itemsize * max(size, 1)
        if self.local_bytes > self.local_limit:
            raise Unrenderable(f"the kernel's blocks in work-group memory (dot operands and results, reductions, "
                               f"loop carries, scratch) need more than the {self.local_limit} bytes the device "
                               f"gives one work-group (its reported local memory size); use smaller blocks")
        name = self.b.fresh(hint)
        self.sizes[name] = max(size, 1)
        # a spare element where phases without bounds tests store past the end (``par_for``)
        self.b.emit(ArrayDecl("local", name, np.dtype(dtype), max(size, 1) + self.clamp_phases))
        return name

    def par_for(self, shape, fn, fresh=False):
        """``fn(idx, slot)`` for every element of ``shape``, the work items taking them ``wg`` apart.

        A phase whose elements the work items divide evenly runs unguarded, and one that fits in one pass
        of the work-group runs without a loop: PoCL vectorises a phase across work items only where its body
        is not under a per-item branch. (An earlier version guarded every phase against a flash-attention
        result that came out wrong on PoCL 3.0; the cause was a private array of two elements per item kept
        across a barrier, which PoCL 3.0 and 3.1 both lose: ``staging``. With that fixed, the unguarded
        kernel is exact on both and the guarded one is the one they miscompile.)

        ``fresh``: the phase stores only through ``put`` into work-group arrays it does not read (the arrays of
        materialized values, reductions, ``dot`` s, staged carries). On CPU OpenCL devices such a phase, where
        more than half the work-group has an element, has no bounds test at all: every item computes, those past
        the end at the last element, storing to each array's spare element. PoCL 3.0 and 3.1 miscompiled a
        bounds-tested phase followed by a loop in one barrier region (flash attention's row sums came out inf
        once the barrier between them was dropped): there ``hoisted_kernel`` keeps such barriers."""
        n = math.prod(shape)
        if n == 0:
            return
        if self.rows:
            self._row_for(shape, fn)
            return
        slots = -(-n // self.wg)
        guard = n % self.wg != 0
        # at most half the items repeat an element (a shared reduction's combining phase stays bounds-tested)
        clamp = guard and fresh and self.clamp_phases and 2 * n > self.wg

        def one(s):
            e = self.lid if s is None else self.b.let(op("add", op("mul", s, _i(self.wg)), self.lid), "e")
            if clamp:
                # no per-item branch: the items past the end compute element n - 1 and store it to the arrays'
                # spare element (``put``)
                self.ok = self.b.let(op("lt", e, _i(n)), "ok")
                e = self.b.let(op("min", e, _i(n - 1)), "ec")
            with self.b.when(op("lt", e, _i(n))) if guard and not clamp else _null():
                idx = tuple(self.b.let(x, "ix") if not isinstance(x, Const) else x for x in _unravel(e, shape))
                fn(idx, _i(0) if s is None else s)
            self.ok = None

        if slots == 1:
            one(None)
        else:
            with self.b.loop(_i(0), _i(slots), hint="s") as s:
                one(s)

    def row_columns(self, shape, fn):
        """Row mode: ``fn(idxs)`` for each element of a row of ``shape`` (in order), ``idxs`` that element of each
        of the item's rows (``row_ids``): the rows' elements computed together (``_reduce``: a load the rows
        share, such as a matrix-vector product's vector element, is then read once for all of them)."""
        self._row_for(shape, None, fn)

    def _row_for(self, shape, fn, joint=None):
        """``par_for`` with one work item per row: item ``lid`` takes every element of its rows of ``shape``
        (``row_ids``: rows ``lid``, ``lid + wg``, ... of its first axis, as long as the work-group times the
        rows per item), in order, the element's place among the item's rows as its slot (row ``j``'s elements
        after the ``j`` rows before it); element ``c`` of each row in turn."""
        if not shape or shape[0] != self.wg * len(self.row_ids):
            raise _NotRowwise(f"a phase over {shape} is not one row per work item")
        rest = shape[1:]
        m = math.prod(rest)

        def each(c, sub):
            if joint is not None:
                joint([(row,) + sub for row in self.row_ids])
                return
            for j, row in enumerate(self.row_ids):
                fn((row,) + sub, op("add", c, _i(j * m)))
        if self.unrolled(m):
            for c in range(m):
                each(_i(c), tuple(_unravel(_i(c), rest)))
            return
        with self.b.loop(_i(0), _i(m), hint="c") as c:
            each(c, tuple(self.b.let(x, "ix") if not isinstance(x, Const) else x for x in _unravel(c, rest)))

    def unrolled(self, n):
        """Whether a loop of ``n`` steps over a row is written out step by step (row mode, ``n`` at most
        ``_ROW_UNROLL``): a short loop's private array elements are then indexed by constants."""
        return self.rows and n <= _ROW_UNROLL

    def own_row(self, idx, what):
        """In row mode: refuse (``_NotRowwise``) a read or write of shared memory at ``idx`` outside the work
        item's own row (another item's element, which no barrier would order)."""
        if self.rows and (not idx or idx[0] not in self.row_ids):
            raise _NotRowwise(f"{what} reads or writes another work item's row")

    def row_index(self, idx, shape):
        """Where element ``idx`` of a ``shape`` block value lies in its work item's private array (row mode,
        ``block_array``): after the item's rows before ``idx[0]``."""
        self.own_row(idx, "a block value")
        m = math.prod(shape[1:])
        return op("add", _linear(idx[1:], shape[1:]), _i(self.row_ids.index(idx[0]) * m))

    def block_array(self, dtype, shape, hint):
        """An array for a block value of ``shape`` written by a parallel phase: in work-group memory, or in row
        mode each work item's private array of its own row (no item reads another's; a CPU then keeps the
        row in the item's own memory, a SIMD CPU adapter such as lavapipe one vector access per element for
        all its lanes instead of a gather)."""
        if not self.rows:
            return self.local_array(dtype, math.prod(shape), hint)
        if not shape or shape[0] != self.wg * len(self.row_ids):
            raise _NotRowwise(f"a block of {shape} is not one row per work item")
        name = self.b.array("private", dtype, len(self.row_ids) * max(math.prod(shape[1:]), 1), hint)
        self.row_private[name] = tuple(shape)
        return name

    def put_elem(self, name, idx, shape, value):
        """Element ``idx`` of the ``shape`` block array ``name`` (``block_array``) set to ``value``."""
        if name in self.row_private:
            self.b.store(name, self.row_index(idx, shape), value, space="private")
        else:
            self.put(name, _linear(idx, shape), value)

    def put(self, name, index, value, space="local"):
        """A store of a ``fresh`` phase (``par_for``): past the end, to the work-group array's spare element."""
        if self.ok is not None and space == "local":
            index = select(self.ok, index, _i(self.sizes[name]))
        self.b.store(name, index, value, space=space)

    def staging(self, dtype, shape, hint):
        """An array holding each work item's elements of a ``shape`` value across a barrier: ``(space, name,
        index(idx, slot))``. A private array where each item has one element; work-group memory where items
        have several (PoCL 3.0 and 3.1 lost a private array of two elements per item across a barrier: the
        flash-attention example's carries came out inf at a head size of 32)."""
        n = math.prod(shape)
        if self.rows:   # the item's own row, its place in the row the slot (``_row_for``); no barrier follows
            return "private", self.b.array("private", dtype, n // self.wg, hint), lambda idx, slot: slot
        if n <= self.wg:
            return "private", self.b.array("private", dtype, 1, hint), lambda idx, slot: _i(0)
        return "local", self.local_array(dtype, n, hint), lambda idx, slot: _linear(idx, shape)

    def barrier(self, space="local"):
        if self.rows:   # every item reads only what it wrote itself (``own_row``): nothing to order
            return
        self.b.emit(Barrier(space))
        # Index arithmetic of work item ids is computed again after a barrier rather than kept across it:
        # PoCL 3.0 and 3.1 lost such values (flash attention at 64 work items came out inf).
        self.b.forget()
        self.barriers += 1

    def materialize(self, v, hint="blk"):
        """``v`` in work-group memory (a parallel phase and a barrier)."""
        if isinstance(v, _Lazy) and getattr(v, "local", None) is not None:
            return v
        shape = v.shape
        name = self.block_array(v.dtype, shape, hint)
        self.par_for(shape, lambda idx, s: self.put_elem(name, idx, shape, v.at(idx)), fresh=True)
        self.barrier()
        return self.local_value(name, shape, v.dtype)

    def compute_once(self, v, hint):
        """``v`` materialized where it is ``_heavy`` and read more than once per element, on CPU devices (whose
        transcendental functions are long instruction sequences; a GPU's are cheap to compute again), where
        work-group memory has room for it; else ``v``."""
        size = np.dtype(v.dtype).itemsize * max(math.prod(v.shape), 1) if isinstance(v, _Lazy) else 0
        if not (self.lane_runs and _heavy(v)) or self.local_bytes + size > self.local_limit:
            return v
        return self.materialize(v, hint)

    def local_value(self, name, shape, dtype):
        b = self.b

        def at(idx):
            self.own_row(idx, "a value in work-group memory")
            if name in self.row_private:
                return b.let(Load("private", name, self.row_index(idx, shape), dtype), "lv")
            return b.let(Load("local", name, _linear(idx, shape), dtype), "lv")
        lz = _Lazy(tuple(shape), np.dtype(dtype), at, frozenset([name]), {name: _OWN})
        lz.local = name
        return lz

    # -------------------------------------------------------------- the body
    def run(self, prog, args):
        env = dict(zip(prog.invars, args, strict=True))
        last_use = {}
        for k, e in enumerate(prog.eqns):
            for a in e.inputs:
                if isinstance(a, Var):
                    last_use[a] = k
        for a in prog.outvars:
            if isinstance(a, Var):
                last_use[a] = len(prog.eqns)
        self.used.update(last_use)
        uses = collections.Counter(a for e in prog.eqns for a in e.inputs if isinstance(a, Var))
        uses.update(a for a in prog.outvars if isinstance(a, Var))

        def read(a):
            if isinstance(a, Literal):
                c = const(a.val, a.aval.dtype)
                return _Lazy((), a.aval.dtype, lambda idx, c=c: c)
            return env[a]

        for k, e in enumerate(prog.eqns):
            vals = [read(a) for a in e.inputs]
            if e.primitive in (pallas_store_p, pallas_atomic_p):
                self._protect(env, last_use, k, vals[0])
            rule = _RULES.get(e.primitive)
            if rule is None:
                if e.primitive in ELEMENTWISE:
                    outs = [self.elementwise(e, vals)]
                else:
                    raise Unrenderable(f"{e.primitive.name} inside a kernel has no kernel form (the kernels render "
                                       f"elementwise operations, broadcasts, reshapes, transposes, iota, "
                                       f"reductions, dot, calls, loads, stores, fori_loop and pl.when)")
            else:
                outs = rule(self, e, vals)
                if not e.primitive.multiple_results:
                    outs = [outs]
            for v, o in zip(e.outputs, outs, strict=True):
                # a value with a transcendental read by several equations is computed once, into work-group
                # memory (flash attention's exp(s - m), read by the row sum and by p @ v)
                env[v] = self.compute_once(o, "hv") if uses[v] > 1 else o
        return [read(a) for a in prog.outvars]

    def _protect(self, env, last_use, k, ref):
        """Before a store into ``ref``: values still needed later that read it are put in work-group memory."""
        for var, val in list(env.items()):
            if isinstance(val, _Lazy) and ref.name in val.reads and last_use.get(var, -1) > k:
                env[var] = self.materialize(val, "keep")

    def elementwise(self, e, vals):
        shape, dtype = e.outputs[0].aval.shape, e.outputs[0].aval.dtype
        rule, b = ELEMENTWISE[e.primitive], self.b
        in_avals = [a.aval for a in e.inputs]
        out_aval = e.outputs[0].aval
        params = e.params

        small, fold = _small(e, np.dtype(dtype)), _FOLD.get(e.primitive)
        if e.primitive is P.convert_element_type and np.dtype(dtype).kind == "f" and in_avals[0].dtype.kind == "u":
            signed = [in_avals[0].update(dtype=_signed(in_avals[0].dtype))]

        def at(idx):
            xs = [v.at(idx if v.shape else ()) for v in vals]
            if fold is not None and all(isinstance(x, Const) and x.dtype.kind in "iu" for x in xs):
                return _wrapped(fold(*(int(x.value) for x in xs)), dtype)   # arithmetic on unrolled coordinates
            if xs and isinstance(xs[0], Sym) and xs[0].name in self.small:
                return b.let(rule(b, [Cast(xs[0], signed[0].dtype)], params, signed, out_aval), "x")
            v = b.let(rule(b, xs, params, in_avals, out_aval), "x")
            if small and isinstance(v, Sym):
                self.small.add(v.name)
            return v
        vector, lane_map = _lane_map(b, vals, np.dtype(dtype), lambda xs: rule(b, xs, params, in_avals, out_aval)) \
            if self.lane_maps else (None, None)
        return _Lazy(tuple(shape), np.dtype(dtype), at, frozenset().union(*(v.reads for v in vals)),
                     _aligned(vals, tuple(shape)), e.primitive in _EXPENSIVE or any(_heavy(v) for v in vals),
                     vector=vector, lane_map=lane_map)


def _lane_map(b, vals, dtype, rule):
    """``(vector, lane_map)`` of an elementwise float32 value (``_Lazy``'s) whose operands are one value read as
    vectors (``_Lazy.vector``) of its own shape and rank-0 values: the vectors of that operand, and per lane
    ``rule`` of its element and the rank-0 values; else ``(None, None)``."""
    read = [v for v in vals if v.shape]
    if dtype != np.float32 or len(read) != 1 or read[0].vector is None or read[0].dtype != np.float32:
        return None, None
    src = read[0]

    def lane_map(x):
        x = src.lane_map(x) if src.lane_map is not None else x
        return b.let(rule([x if v is src else v.at(()) for v in vals]), "x")
    return src.vector, lane_map


def _signed(d):
    return np.dtype(f"i{np.dtype(d).itemsize}")


#: integer elementwise operations evaluated at rendering time where every operand is a constant
_FOLD = {P.add: lambda a, b: a + b, P.sub: lambda a, b: a - b, P.mul: lambda a, b: a * b}


def _wrapped(v, dtype):
    """The Python integer ``v`` as a ``dtype`` constant, wrapped around as the kernel's integer arithmetic does."""
    dtype = np.dtype(dtype)
    bits = 8 * dtype.itemsize
    v &= (1 << bits) - 1
    if dtype.kind == "i" and v >= 1 << (bits - 1):
        v -= 1 << bits
    return const(v, dtype)


def _small(e, dtype):
    """Whether ``e`` (an elementwise equation) gives an unsigned integer below ``2**(bits - 1)``: an ``and`` with
    such a constant, or a right shift by a positive constant."""
    if dtype.kind != "u":
        return False
    half = 1 << (8 * dtype.itemsize - 1)
    lits = [int(a.val) for a in e.inputs if isinstance(a, Literal)]
    if e.primitive is P.and_p:
        return any(0 <= v < half for v in lits)
    if e.primitive is P.shift_right_logical:
        return isinstance(e.inputs[1], Literal) and 0 < int(e.inputs[1].val) < 8 * dtype.itemsize
    return False


class _null:
    def __enter__(self):
        return None

    def __exit__(self, *a):
        return False


def _reads(*vals):
    return frozenset().union(*(v.reads for v in vals))


def _aligned(vals, shape):
    """The refs an elementwise result reads only at its own element of one block (every operand reading them
    does so, at the same block, with the result's shape)."""
    out = {}
    for ref in frozenset().union(*(v.reads for v in vals)):
        keys = {v.aligned.get(ref) if v.shape == shape else None for v in vals if ref in v.reads}
        if len(keys) == 1 and None not in keys:
            out[ref] = keys.pop()
    return out


# ------------------------------------------------------------------------------------------ rules per primitive


def _broadcast(r, e, vals):
    x = vals[0]
    bd, shape = e.params["broadcast_dimensions"], e.params["shape"]
    if math.prod(shape) > math.prod(x.shape):
        x = r.compute_once(x, "hb")   # else each element's transcendental is computed at each copy of it
    xs = x.shape

    def at(idx):
        return x.at(tuple(idx[d] if xs[k] != 1 else _i(0) for k, d in enumerate(bd)))
    return _Lazy(tuple(shape), x.dtype, at, x.reads, heavy=_heavy(x))


def _axis_groups(old, new):
    """Runs of axes ``[(old axes, new axes), ...]`` whose sizes have equal products, in order (a reshape maps
    each run on its own: ``(8, 32) -> (8, 4, 8)`` divides only the last index), or ``None``."""
    out, i, j = [], 0, 0
    while i < len(old) or j < len(new):
        oi, nj = [i], [j]
        if i >= len(old) or j >= len(new):
            return None
        po, pn = old[i], new[j]
        i, j = i + 1, j + 1
        while po != pn:
            if po < pn and i < len(old):
                po *= old[i]
                oi.append(i)
                i += 1
            elif pn < po and j < len(new):
                pn *= new[j]
                nj.append(j)
                j += 1
            else:
                return None
        out.append((oi, nj))
    return out


def _reshape(r, e, vals):
    x = vals[0]
    shape = tuple(e.params["new_sizes"])
    # Axes of size 1 are left out of the runs (their index is 0): (8, 128) -> (8, 128, 1) maps each index
    # to itself instead of through the flat index.
    oi = [a for a, n in enumerate(x.shape) if n != 1]
    ni = [j for j, n in enumerate(shape) if n != 1]
    groups = _axis_groups(tuple(x.shape[a] for a in oi), tuple(shape[j] for j in ni)) if 0 not in shape else None

    def at(idx):
        if not x.shape:
            return x.at(())
        if groups is None:
            return x.at(_unravel(_linear(idx, shape), x.shape))
        src = [_i(0)] * len(x.shape)
        for og, ng in groups:
            olds, news = [oi[a] for a in og], [ni[j] for j in ng]
            flat = _linear([idx[j] for j in news], [shape[j] for j in news])
            for a, v in zip(olds, _unravel(flat, [x.shape[a] for a in olds]), strict=True):
                src[a] = v
        return x.at(tuple(src))
    return _Lazy(shape, x.dtype, at, x.reads, heavy=_heavy(x))


def _transpose(r, e, vals):
    x = vals[0]
    perm = e.params["permutation"]
    shape = tuple(x.shape[p] for p in perm)

    def at(idx):
        src = [None] * len(perm)
        for k, p in enumerate(perm):
            src[p] = idx[k]
        return x.at(tuple(src))
    vector = None
    if x.vector is not None:
        axis, xvec, k, xwhere = x.vector

        def source(idx):
            src = [None] * len(perm)
            for j, p in enumerate(perm):
                src[p] = idx[j]
            return tuple(src)
        vector = (list(perm).index(axis), lambda idx: xvec(source(idx)), k, lambda idx: xwhere(source(idx)))
    return _Lazy(shape, x.dtype, at, x.reads, heavy=_heavy(x), swapped=bool(perm) and perm[-1] != len(perm) - 1,
                 vector=vector, lane_map=x.lane_map if vector is not None else None)


def _iota(r, e, vals):
    d, dim = e.params["dtype"], e.params["dimension"]
    shape = tuple(e.params["shape"])

    def at(idx):
        i = idx[dim]   # a constant coordinate (an unrolled axis) gives a constant, which later arithmetic folds
        return const(int(i.value), d) if isinstance(i, Const) else convert(r.b, i, np.dtype(d))
    return _Lazy(shape, np.dtype(d), at)


def _slice(r, e, vals):
    x = vals[0]
    lo, strides = e.params["start_indices"], e.params["strides"] or (1,) * len(x.shape)
    shape = e.outputs[0].aval.shape

    def at(idx):
        return x.at(tuple(op("add", op("mul", i, _i(s)), _i(a)) for i, a, s in zip(idx, lo, strides, strict=True)))
    return _Lazy(tuple(shape), x.dtype, at, x.reads, heavy=_heavy(x))


def _rev(r, e, vals):
    x = vals[0]
    dims = set(e.params["dimensions"])

    def at(idx):
        return x.at(tuple(op("sub", _i(n - 1), i) if d in dims else i
                          for d, (i, n) in enumerate(zip(idx, x.shape, strict=True))))
    return _Lazy(x.shape, x.dtype, at, x.reads, heavy=_heavy(x))


def _identity(r, e, vals):
    return vals[0]


_REDUCE = {P.reduce_sum: "sum", P.reduce_prod: "prod", P.reduce_max: "max", P.reduce_min: "min",
           P.reduce_and: "and", P.reduce_or: "or"}


def _combine(b, kind, acc, v):
    if kind == "sum":
        return add_of(b, acc, v)
    if kind == "prod":
        return mul_of(b, acc, v)
    if kind == "max":
        return max_of(b, acc, v)
    if kind == "min":
        return min_of(b, acc, v)
    return op("land" if kind == "and" else "lor", acc, v)


def _identity_of(kind, d):
    if kind == "sum":
        return const(0, d)
    if kind == "prod":
        return const(1, d)
    if kind == "max":
        return lowest(d)
    if kind == "min":
        return highest(d)
    return const(kind == "and", d)


def _acc_dtype(d):
    return np.dtype(np.float32) if d == np.float16 else np.dtype(d)


def _reduce(r, e, vals):
    """Each result element's reduction; where the results are fewer than half the work items, ``lanes`` work
    items share one (strided partial results in work-group memory, then one item combines them), so a block
    of a few long rows still keeps the work-group busy."""
    x = vals[0]
    kind = _REDUCE[e.primitive]
    axes = tuple(sorted(e.params["axes"]))
    keep = [d for d in range(len(x.shape)) if d not in axes]
    out_shape = tuple(x.shape[d] for d in keep)
    red_shape = tuple(x.shape[d] for d in axes)
    n_out, n_red = math.prod(out_shape), math.prod(red_shape)
    d = x.dtype
    acc_d = _acc_dtype(d) if kind in ("sum", "prod") else d
    b = r.b
    name = r.block_array(d, out_shape, "red")
    lanes = _lanes(r, n_out, n_red)

    def partial(idx, start, step):
        lanes_ = int(step.value) if isinstance(step, Const) else 1
        un = _RUN if r.lane_runs and n_red % (lanes_ * _RUN) == 0 and n_red > _RUN else 0
        if un:
            # each lane takes runs of ``_RUN`` consecutive elements, unrolled: their index ``t * lanes * RUN +
            # lane * RUN + j`` keeps constant parts through index arithmetic (``_div``, ``_rem``: a 4-bit word's
            # eight values read with one load and constant shifts); element ``j`` of each run has its own
            # accumulator (independent additions; PoCL 3.1 does not vectorise across work items here: the
            # 4-bit matvec took 3x the time with one chain), combined at the end
            accs = [b.var(acc_d, _identity_of(kind, acc_d), "acc") for _ in range(un)]
            steps = n_red // (lanes_ * un)
            for t in range(steps) if r.unrolled(n_red) else [None]:
                with b.loop(_i(0), _i(steps), hint="t") if t is None else _null() as tv:
                    base = op("add", op("mul", _i(t) if t is not None else tv, _i(lanes_ * un)),
                              op("mul", start, _i(un)))
                    for j in range(un):
                        one_elem(op("add", base, _i(j)) if j else base, idx, accs[j])
            while len(accs) > 1:
                accs = [b.let(_combine(b, kind, accs[i], accs[i + 1]), "acc") for i in range(0, len(accs), 2)]
            return accs[0]
        acc = b.var(acc_d, _identity_of(kind, acc_d), "acc")
        with b.loop(start, _i(n_red), step, hint="k") as k:
            one_elem(k, idx, acc)
        return acc

    def elem(k, idx):
        v = x.at(_reduced_index(len(x.shape), keep, idx, axes, _unravel(k, red_shape)))
        return convert(b, v, acc_d) if acc_d != d else v

    def one_elem(k, idx, acc):
        b.assign(acc, _combine(b, kind, acc, elem(k, idx)))

    if lanes == 1 and r.joint_rows and x.reads:
        # row mode, several rows per item, an operand that reads refs: the item's rows reduced in one loop
        r.row_columns(out_shape, lambda idxs: _joint_reduce(r, elem, (kind, acc_d, d), n_red, name, out_shape,
                                                            idxs))
    elif lanes == 1:
        r.par_for(out_shape, lambda idx, slot: r.put_elem(
            name, idx, out_shape, _narrow(b, partial(idx, _i(0), _i(1)), d)), fresh=True)
    else:
        _shared_reduce(r, name, out_shape, lanes, (kind, acc_d, d), partial)
    r.barrier()
    return r.local_value(name, out_shape, d)


#: the most runs of ``_RUN`` elements in one step of ``_joint_reduce``'s loop: 8 rows of the 4-bit matvec example
#: (load 5-6) at 8 / 4 / 2 runs: PoCL 3.1 1.03-1.08x / 1.28-1.41x / 1.51-1.54x fnarray's own kernel, PoCL 3.0
#: 1.12-1.26x / 1.18-1.20x / 1.17-1.27x, lavapipe 1.37-1.48x / 1.20-1.32x / 0.95-1.29x (one run: 2.6x on PoCL 3.0)
_JOINT_RUNS = 8


def _joint_reduce(r, elem, kinds, n_red, name, out_shape, idxs):
    """Row mode with several rows per item (``joint_rows``): the results ``idxs`` of ``_reduce`` (one per row of the
    item; ``elem(k, idx)`` its element ``k``) in one loop, so that a load the rows share (a matrix-vector product's
    vector element) is read once for all of them. A step takes up to ``_JOINT_RUNS`` runs of ``_RUN`` elements (one
    element a run where ``_RUN`` does not divide the row), run by run, each run for every row; element ``j`` of a
    row's runs has its own chain within the step, the chains combined as a tree into the row's one accumulator, so
    the loop carries one value per row (eight per row, as ``partial`` carries, took 1.7x the time on PoCL 3.0 for 8
    rows of the 4-bit matvec example) and a value that changes once per 64 elements (a group's scale) is loaded once
    a step."""
    kind, acc_d, d = kinds
    b = r.b
    un = _RUN if r.lane_runs and n_red % _RUN == 0 and n_red > _RUN else 1
    span = next(m * un for m in (8, 4, 2, 1) if m <= _JOINT_RUNS and n_red % (m * un) == 0)
    accs = [b.var(acc_d, _identity_of(kind, acc_d), "acc") for _ in idxs]
    rows = {x.name for x in r.row_ids if isinstance(x, Sym)}   # and the local id (a ``Special``)
    r.lane_loads = True
    with b.loop(_i(0), _i(n_red // span), hint="t", arrange=_shared_first(rows)) as tv:
        base = op("mul", tv, _i(span))
        chains = [[None] * un for _ in idxs]
        for run in range(0, span, un):
            for vs, idx in zip(chains, idxs, strict=True):
                for j in range(un):
                    k = run + j
                    v = elem(op("add", base, _i(k)) if k else base, idx)
                    vs[j] = b.let(v if vs[j] is None else _combine(b, kind, vs[j], v), "ev")
        for vs, acc in zip(chains, accs, strict=True):
            while len(vs) > 1:
                vs = [b.let(_combine(b, kind, vs[i], vs[i + 1]), "ev") for i in range(0, len(vs), 2)]
            b.assign(acc, _combine(b, kind, acc, vs[0]))
    r.lane_loads = False
    for idx, acc in zip(idxs, accs, strict=True):
        r.put_elem(name, idx, out_shape, _narrow(b, acc, d))


def _shared_first(rows):
    """``arrange`` of a loop (``KernelBuilder.loop``) over a straight-line body (no nested blocks, no stores, else
    the body as it is): each ``Let`` that does not depend on the names ``rows`` (a work item's row ids) or on the
    local id moved up to just after the statements defining what it reads (``_joint_reduce``: the values the rows
    share, the vector's loads and their addresses, come first in a step, before the rows' arithmetic). With them
    inside the first row's arithmetic PoCL 3.0 took 1.5x the time for 8 rows of the 4-bit matvec example, and PoCL
    3.1 1.1-1.2x; lavapipe the same time."""
    def arrange(body):
        if any(not isinstance(s, (Let, Assign)) for s in body):
            return body
        kept, slots, at, varying = [], collections.defaultdict(list), {}, set(rows)
        for s in body:
            exprs = list(walk_exprs([s]))
            deps = {e.name for e in exprs if isinstance(e, Sym)}
            if deps & varying or any(isinstance(e, Special) and e.kind == "local_id" for e in exprs):
                varying.add(s.name)
            if isinstance(s, Let) and s.name not in varying:
                slot = max([at[n] for n in deps if n in at], default=-1)
                slots[slot].append(s)
                at[s.name] = slot
            else:
                kept.append(s)
                at[s.name] = len(kept) - 1
        out = list(slots[-1])
        for i, s in enumerate(kept):
            out.append(s)
            out.extend(slots[i])
        return tuple(out)
    return arrange


def _reduced_index(rank, keep, idx, axes, ridx):
    """The operand's index of a reduction result ``idx`` (along the kept axes) at reduced position ``ridx``."""
    full = [None] * rank
    for dd, i in zip(keep, idx, strict=True):
        full[dd] = i
    for dd, i in zip(axes, ridx, strict=True):
        full[dd] = i
    return tuple(full)


def _lanes(r, n_out, n_red):
    """Work items per result element of a reduction of ``n_out`` results over ``n_red`` elements each: a power of
    two while the results fill at most half the work-group and each lane keeps 8 elements (on CPU devices two
    runs: a short row, flash attention's 16 keys, is not worth the extra phase and barrier of combining)."""
    lanes = 1
    per = 2 * _RUN if r.lane_runs else 8
    while not r.rows and n_out * lanes * 2 <= r.wg and lanes * 2 <= n_red // per:
        lanes *= 2
    return lanes


def _shared_reduce(r, name, out_shape, lanes, kinds, partial):
    """``lanes`` work items per result element: each writes its ``partial`` result to work-group memory, then
    one item per element combines them into ``name``."""
    kind, acc_d, d = kinds
    b = r.b
    n_out = math.prod(out_shape)
    parts = r.local_array(acc_d, n_out * lanes, "part")

    def lane_sum(idx, slot):
        flat = _linear(idx, (n_out, lanes))
        o = b.let(idx[0], "ro")
        r.put(parts, flat, partial(_unravel(o, out_shape), idx[1], _i(lanes)))
    r.par_for((n_out, lanes), lane_sum, fresh=True)
    r.barrier()

    def combine(idx, slot):
        base = b.let(op("mul", _linear(idx, out_shape), _i(lanes)), "pb")
        acc = b.var(acc_d, _identity_of(kind, acc_d), "acc")
        with b.loop(_i(0), _i(lanes), hint="l") as ln:
            b.assign(acc, _combine(b, kind, acc, b.let(Load("local", parts, op("add", base, ln), acc_d), "pv")))
        r.put(name, _linear(idx, out_shape), _narrow(b, acc, d))
    r.par_for(out_shape, combine, fresh=True)


#: the longest loop over a row that row mode writes out step by step (``_Renderer.unrolled``): lavapipe's flash
#: attention 0.9x the time at 2 or 4 (a register tile's two column tiles), 1.3x at 64 (every row loop, the
#: ``dot`` contraction; the code grows), 1.05x at 16
_ROW_UNROLL = 4
#: the most outputs of a ``dot``'s register tile in row mode with several rows per work item (``_dot``): their
#: columns as many as fit (lavapipe's flash attention at two rows: 32, tiles of 2 x 16, 0.63-0.64x the time of
#: one row per item; 16, tiles of 2 x 8, 0.67-0.68x; four rows: 4 x 8 0.79x, 4 x 4 0.90-1.08x)
_ROW_TILE_OUTPUTS = 32
#: consecutive elements per lane of a shared reduction, unrolled (``_reduce``)
_RUN = 8


def _narrow(b, acc, d):
    return convert(b, acc, d) if acc.dtype != d else acc


def _dot(r, e, vals):
    x, y = vals
    (lc, rc), (lb, rb) = e.params["dimension_numbers"]
    out = e.outputs[0].aval
    d = np.dtype(out.dtype)
    acc_d = _acc_dtype(d)
    b = r.b
    xs, ys = _dot_staged(r, x, y)
    lfree = [k for k in range(len(x.shape)) if k not in lc and k not in lb]
    rfree = [k for k in range(len(y.shape)) if k not in rc and k not in rb]
    kshape = tuple(x.shape[k] for k in lc)
    name = r.block_array(d, tuple(out.shape), "dot")

    oshape = tuple(out.shape)
    row_rows, (tr, tc), tshape = _dot_tiling(r, oshape)
    nk = math.prod(kshape)
    dims = (lb, rb, lc, rc, lfree, rfree)

    def body(tidx, slot):
        # A register tile: each work item computes tr x tc outputs of the last two axes, so a loaded operand
        # element serves several products (equal loads are bound once) and the sums are independent.
        elems, bases = _tile_elements(r, tidx, (tr, tc), bool(oshape), row_rows)
        accs = [b.var(acc_d, const(0, acc_d), "acc") for _ in elems]
        uk = _UNROLL_K if len(elems) > 1 and nk % _UNROLL_K == 0 else 1
        if r.unrolled(nk):
            uk = nk
        plans = _vector_plans(r, (xs, ys), dims, nk, uk, tc) if oshape else (None, None)
        operands = _dot_operands(b, (xs, ys), (len(x.shape), len(y.shape)), dims, acc_d, plans)
        share = plans[1] is not None and row_rows is not None and not lb and r.subgroup and r.wg % r.subgroup == 0

        def kidx_at(k, u):
            return _unravel(_i(u) if k is None else b.let(op("add", k, _i(u)), "ku") if u else k, kshape)
        with b.loop(_i(0), _i(nk), _i(uk), hint="k") if uk < nk else _null() as k:
            vectors: dict = {}
            if share:
                vectors = _shared_vectors(r, ys, (len(x.shape), len(y.shape)), dims, plans[1], [
                    (kidx_at(k, u), [(idx, (k, u) + bases[n]) for n, idx in enumerate(elems)]) for u in range(uk)])
            for u in range(uk):
                kidx = kidx_at(k, u)
                cache: dict = {"vectors": vectors}
                for n, (acc, idx) in enumerate(zip(accs, elems, strict=True)):
                    at = (k, u) + bases[n] if any(plans) else None
                    xa, yc = operands(idx, kidx, cache, at)
                    b.assign(acc, op("add", acc, op("mul", xa, yc)))
        for acc, idx in zip(accs, elems, strict=True):
            r.put_elem(name, idx, oshape, convert(b, acc, d) if acc_d != d else acc)

    if row_rows is None:
        r.par_for(tshape, body, fresh=True)
    elif r.unrolled(tshape[0]):
        for c in range(tshape[0]):
            body((row_rows[0], _i(c)), _i(c))
    else:
        with b.loop(_i(0), _i(tshape[0]), hint="t") as c:
            body((row_rows[0], c), c)
    r.barrier()
    return r.local_value(name, tuple(out.shape), d)


def _dot_staged(r, x, y):
    """``_dot``'s operands, staged in work-group memory once where the options ask (each element is read by many
    work items)."""
    xs = x if getattr(x, "local", None) is not None or not r.stage_dots else r.materialize(x, "ta")
    ys = y if getattr(y, "local", None) is not None or not r.stage_dots else r.materialize(y, "tb")
    if r.stage_swapped and not r.rows:
        # k.T read in place gives a register tile's columns (rows of k) far apart; staged, they are adjacent
        # (PoCL 3.1 turned the in-place reads into gathers: flash attention 0.68x the time staged, 3.0 1.09x)
        xs = r.materialize(xs, "ta") if getattr(xs, "swapped", False) else xs
        ys = r.materialize(ys, "tb") if getattr(ys, "swapped", False) else ys
    return xs, ys


def _dot_tiling(r, oshape):
    """``(row ids or None, (tile rows, tile columns), the tiles' index shape)`` of ``_dot``'s result ``oshape``.

    Row mode with several rows per work item (``row_ids``) and a two-axis result: one register tile over all the
    item's rows, so that each right-operand element (flash attention's k and v) is read once for them."""
    row_rows = r.row_ids if r.rows and len(r.row_ids) > 1 and len(oshape) == 2 else None
    if row_rows is not None:
        tr, tc = len(row_rows), _row_tile(oshape, _ROW_TILE_OUTPUTS // len(row_rows))[1]
        return row_rows, (tr, tc), (oshape[-1] // tc,)
    tr, tc = _row_tile(oshape) if r.rows else _dot_tile(oshape, r.wg, r.dot_tile, 16 if r.dot_tile > 16 else 8)
    tshape = oshape[:-2] + (oshape[-2] // tr,) if tr > 1 else oshape[:-1]
    return None, (tr, tc), tshape + (oshape[-1] // tc,) if oshape else tshape


def _tile_elements(r, tidx, tile, has_axes, rows=None):
    """The output indices of the ``tile = (tr, tc)`` register tile at tile index ``tidx`` (rows of the
    second-to-last axis, columns of the last), and per element ``(base, lane)``: its column is ``base + lane``
    with ``base`` a multiple of 4 (``_dot_operands``' vector reads along the columns). ``rows``: the tile's
    rows themselves (row mode's ``row_ids``; a two-axis result), in place of ``tidx``'s row times ``tr``."""
    b = r.b
    tr, tc = tile
    elems, bases = [], []
    for a in range(tr):
        for c in range(tc):
            idx = list(tidx)
            if has_axes:
                col = op("add", op("mul", idx[-1], _i(tc)), _i(c))
                # unbound where addresses are wide: the constant column offset reaches each address
                idx[-1] = (col if r.wide else b.let(col, "tj")) if tc > 1 else idx[-1]
                bases.append((op("add", op("mul", tidx[-1], _i(tc)), _i(c - c % 4)), c % 4))
            if rows is not None:
                idx[-2] = rows[a]
            elif tr > 1:
                idx[-2] = b.let(op("add", op("mul", idx[-2], _i(tr)), _i(a)), "ti")
            elems.append(tuple(idx))
    return elems, bases


#: contraction steps per iteration of a register-tiled ``dot``'s loop (where they divide the contraction)
_UNROLL_K = 4


def _dot_operands(b, staged, ranks, dims, acc_d, plans=(None, None)):
    """``operands(idx, kidx, cache, at=None) -> (x element, y element)`` of a ``dot`` for output index ``idx``
    and contraction index ``kidx``, as ``acc_d``; an element several outputs of a tile read is computed once
    per ``cache`` (an inline operand may be a whole expression: attention's ``exp(s - m)`` for ``p @ v``).
    ``plans``: per operand ``None``, ``"k"`` or ``"cols"`` (``_vector_plans``): its elements are lanes of
    vector loads (``_Lazy.vector``), along the contraction (``at = (k, u, ...)``: step ``u`` of an iteration
    at ``k``, a multiple of 4, or ``None`` where the contraction is written out) or along the tile's columns
    (``at = (..., base, lane)``: the element's column is ``base + lane``, ``base`` a multiple of 4); the vectors
    of one iteration are loaded once (``cache["vectors"]``, shared by its steps)."""
    xs, ys = staged

    def lane(which, val, ix, at, cache):
        vec = val.vector[1]
        start, ln = _vector_start(plans[which], val.vector[0], ix, at)
        key = (which, start)
        vectors = cache["vectors"]
        if key not in vectors:
            vectors[key] = vec(start)
        v = b.let(Lane(vectors[key], ln, val.dtype), "vx")
        return val.lane_map(v) if val.lane_map is not None else v

    def operands(idx, kidx, cache, at=None):
        xi, yi = _operand_indices(ranks, dims, idx, kidx)
        if ("x", xi) not in cache:
            v = lane(0, xs, xi, at, cache) if at is not None and plans[0] else xs.at(xi)
            cache["x", xi] = convert(b, v, acc_d)
        if ("y", yi) not in cache:
            v = lane(1, ys, yi, at, cache) if at is not None and plans[1] else ys.at(yi)
            cache["y", yi] = convert(b, v, acc_d)
        return cache["x", xi], cache["y", yi]
    return operands


def _operand_indices(ranks, dims, idx, kidx):
    """``(x index, y index)`` of a ``dot``'s operands (ranks ``ranks``, ``dims`` as ``_dot_operands``') for
    output index ``idx`` and contraction index ``kidx``."""
    lb, rb, lc, rc, lfree, rfree = dims
    nb = len(lb)
    bidx, li, ri = idx[:nb], idx[nb:nb + len(lfree)], idx[nb + len(lfree):]
    xi, yi = [None] * ranks[0], [None] * ranks[1]
    for dd, i in zip(lb, bidx, strict=True):
        xi[dd] = i
    for dd, i in zip(rb, bidx, strict=True):
        yi[dd] = i
    for dd, i in zip(lfree, li, strict=True):
        xi[dd] = i
    for dd, i in zip(rfree, ri, strict=True):
        yi[dd] = i
    for dd, ee, i in zip(lc, rc, kidx, strict=True):
        xi[dd] = i
        yi[ee] = i
    return tuple(xi), tuple(yi)


def _vector_start(plan, axis, ix, at):
    """``(start, lane)``: the first index of the four-element vector (along ``axis``) holding operand element
    ``ix`` read by ``plan`` at ``at = (k, u, base, lane)`` (``_dot_operands``), and the element's lane in it."""
    k, u, base, ln = at
    start = list(ix)
    if plan == "k":
        start[axis] = _i(u - u % 4) if k is None else op("add", k, _i(u - u % 4)) if u >= 4 else k
        ln = u % 4
    else:
        start[axis] = base
    return tuple(start), ln


def _shared_vectors(r, ys, ranks, dims, plan, steps):
    """The right operand's vectors of one iteration of a row-mode ``dot`` (``plan``: ``"k"`` or ``"cols"``),
    shared across each subgroup (``render(subgroup=)``): its output columns and the contraction are the same in
    every work item, so are its vectors. ``steps``: per step of the iteration ``(kidx, [(output index, at)])``.
    The tile's distinct vectors, in order, are loaded ``lanes`` at a time, one per work item (the vector of
    lane ``l``'s address picked by ``Special("lane")``), then broadcast to all: ``{(1, start): vector}`` for
    ``_dot_operands``' ``cache["vectors"]``; empty where their count is not a multiple of ``lanes``."""
    b, lanes = r.b, r.subgroup
    axis, where = ys.vector[0], ys.vector[3]
    starts = []
    for kidx, outs in steps:
        for idx, at in outs:
            start = _vector_start(plan, axis, _operand_indices(ranks, dims, idx, kidx)[1], at)[0]
            if start not in starts:
                starts.append(start)
    if len(starts) % lanes:
        return {}
    lane, vt, shared = Special("lane", 0), vector_dtype(ys.dtype), {}
    for m in range(0, len(starts), lanes):
        group = starts[m:m + lanes]
        name, address = where(group[-1])
        for j in range(lanes - 2, -1, -1):
            address = select(op("eq", lane, _i(j)), where(group[j])[1], address)
        mine = b.let(Load("global", name, b.let(address, "sa"), vt), "vs")
        for j, start in enumerate(group):
            shared[1, start] = b.let(Broadcast(mine, j, vt), "vb")
    return shared


def _vector_plans(r, staged, dims, nk, uk, tc):
    """How ``_dot`` reads each operand (``_dot_operands``' ``plans``): ``"k"`` where the operand is a plain
    load (``_Lazy.vector``) whose vector axis is the contraction's (one axis, a multiple of 4 long, taken 4 or a
    multiple of 4 steps per iteration: flash attention's ``k.T``), ``"cols"`` for the right operand where its
    vector axis is the output's last, whose register tile is a multiple of 4 columns (``p @ v``'s ``v``), else
    ``None`` (one element per load). Only where ``render(vectors=)`` gives vector bindings (a CPU WebGPU
    adapter) and addresses are 32-bit."""
    if r.vectors is None or r.wide:
        return None, None
    lb, rb, lc, rc, lfree, rfree = dims
    out = []
    for which, (val, c) in enumerate(zip(staged, (lc, rc), strict=True)):
        vec = getattr(val, "vector", None)
        plan = None
        if vec is not None and len(c) == 1 and vec[0] == c[0] and nk % 4 == 0 and uk % 4 == 0:
            plan = "k"
        elif vec is not None and which == 1 and rfree and vec[0] == rfree[-1] and tc % 4 == 0:
            plan = "cols"
        out.append(plan if plan is None or r.vector_name(vec[2]) is not None else None)
    return tuple(out)


def _dot_tile(shape, wg, most=16, widest=8):
    """``(rows, cols)`` of the register tile each work item of a ``dot`` computes: the outputs per work item
    (where the work-group divides them, at most ``most``), as columns of the last axis first (contiguous
    operand reads, at most ``widest``), then rows of the axis before it; ``(1, 1)`` where it does not divide
    evenly."""
    n = math.prod(shape)
    if not shape or n % wg or n // wg < 2:
        return 1, 1
    per = min(n // wg, most)
    while n % (per * wg) and per > 1:
        per -= 1
    tc = 1
    for c in (16, 8, 4, 2):
        if c > widest:
            continue
        if per % c == 0 and shape[-1] % c == 0:
            tc = c
            break
    tr = per // tc
    if tr > 1 and (len(shape) < 2 or shape[-2] % tr):
        tr = 1
    return tr, tc


def _row_tile(shape, most=16):
    """The register tile of a ``dot`` in row mode: ``(1, tc)``, ``tc`` consecutive outputs of a row (at most
    ``most``, dividing the last axis), so that an item's row of the left operand is read once per tile."""
    if len(shape) < 2:
        return 1, 1
    tc = max(c for c in range(1, most + 1) if shape[-1] % c == 0)
    return 1, tc


def _split(vals, n, flags):
    starts, extra = vals[:n], list(vals[n:])
    return starts, [extra.pop(0) if f else None for f in flags]


def _ref_index(ref, indexer, starts, idx):
    """Ref coordinates of element ``idx`` of the block ``indexer`` selects at ``starts``."""
    out, k = [], 0
    for ent, s in zip(indexer, starts, strict=True):
        if ent[0] == "i":
            out.append(_scalar(s))
        else:
            out.append(op("add", _scalar(s), idx[k]))
            k += 1
    return out


def _load(r, e, vals):
    ref, rest = vals[0], vals[1:]
    p = e.params
    indexer = p["indexer"]
    starts, (mask, other) = _split(rest, len(indexer), (p["masked"], p["has_other"]))
    shape = tuple(e.outputs[0].aval.shape)
    b = r.b
    masked = mask is not None
    off = not masked and _check_constant_index(r, vals[0], indexer, starts, "a load of",
                                               ("reads", "pass mask= (and other=) to pl.load"))

    # A masked read of a block that lies inside the array (constant starts, no padding) needs neither the
    # clamped address nor the bounds test: on PoCL the clamp turns a vector load into a gather (a masked
    # vector add ran 15x slower).
    inside = masked and _statically_inside(ref, indexer, starts)

    def at(idx):
        ref = _base32(vals[0]) if r.lane_loads else vals[0]
        ri = _ref_index(ref, indexer, starts, idx)
        if ref.name in r.shared:
            r.own_row(ri, f"a load of {ref.name}")
        v = _lane_load(r, ref, ri) if not masked and not off and r.lane_loads and ref.vector is not None else None
        if v is not None:
            return v
        if not ref.wide:   # wide addresses keep the constant parts of the indices (``_wide``)
            ri = [b.let(x, "ri") if not isinstance(x, Const) else x for x in ri]
        v = b.let(Load(ref.space, ref.name, _bound_address(b, ref.address(ri, off or masked and not inside)), ref.dtype),
                  "ld")
        if not masked:
            return v
        m = _at(mask, idx)
        fill = _at(other, idx) if other is not None else const(0, ref.dtype)
        return b.let(select(m if inside else op("land", m, ref.inside(ri)), v, fill), "mv")
    reads = frozenset([ref.name]) | (mask.reads if masked else frozenset()) | (
        other.reads if other is not None else frozenset())
    vector = None if masked or off else _vector_load(r, ref, indexer, starts, shape)
    return _Lazy(shape, ref.dtype, at, reads, {ref.name: _block_key(indexer, starts)}, vector=vector)


#: the dtypes of the inputs bound a second time as four-element vectors (``_global_ref``): float32 (``dot``
#: operands, ``_vector_load``, and ``_lane_load``) and uint32 (``_lane_load``: packed words)
_LANE_DTYPES = (np.dtype(np.float32), np.dtype(np.uint32))


def _lane_load(r, ref, ri):
    """Element ``ri`` of ``ref`` (a float32 or uint32 input block with a vector binding) as a lane of a four-element
    vector load where its address is a known multiple of 4 plus a constant (``_joint_reduce`` on a CPU WebGPU
    adapter, or with the option ``lane_vec4`` on PoCL: the four loads of a run's neighbouring elements become one,
    shared through the builder's memo; a wide ref's vector index in ``_wide``'s form), else ``None``."""
    a = dataclasses.replace(ref, wide=False).address(ri, False)   # in 32 bits: its lane a constant
    lane = _rem(a, 4)
    name = r.vector_name(ref.vector) if isinstance(lane, Const) else None
    if name is None:
        return None
    b = r.b
    q = _div(a, 4)
    vec = b.let(Load("global", name, b.let(ref.widened(q), "ad") if ref.wide else q, vector_dtype(ref.dtype)), "vl")
    return b.let(Lane(vec, int(lane.value), ref.dtype), "ln")


def _vector_load(r, ref, indexer, starts, shape):
    """``_Lazy.vector`` of an unmasked load of ``ref``: where the ref is a float32 input block with a vector
    binding whose last axis is the array's last (a multiple of 4 long, the block's offset along it a multiple
    of 4: ``_global_ref``) and the load takes a slice of that axis starting at a constant multiple of 4; else
    ``None``."""
    if ref.vector is None or r.wide or ref.dtype != np.float32 or not shape or indexer[-1][0] == "i":
        return None
    start = _scalar(starts[-1])
    if not isinstance(start, Const) or int(start.value) % 4:
        return None
    b = r.b

    def vec(idx):
        ri = _ref_index(ref, indexer, starts, idx)
        return b.let(Load("global", r.vector_name(ref.vector), _div(ref.address(ri, False), 4),
                          vector_dtype(ref.dtype)), "vl")

    def where(idx):
        return r.vector_name(ref.vector), _div(ref.address(_ref_index(ref, indexer, starts, idx), False), 4)
    return len(shape) - 1, vec, ref.vector, where


def _statically_inside(ref, indexer, starts):
    """Whether every element that ``indexer`` selects at ``starts`` is a real element of ``ref`` (constant
    starts within the ref, and a ref that is not a padded block)."""
    if ref.padded:
        return False
    for ent, st, n in zip(indexer, starts, ref.shape, strict=True):
        x = _scalar(st)
        if not isinstance(x, Const):
            return False
        lo = int(x.value)
        size = 1 if ent[0] == "i" else ent[1]
        if lo < 0 or lo + size > n:
            return False
    return True


def _check_constant_index(r, ref, indexer, starts, what, fix):
    """``IndexError`` where an unmasked load or store's index on some axis is a constant (a literal, or arithmetic
    on ``program_id`` of a grid axis of size 1, folded) that puts the block outside ``ref``: the interpreter
    raises the same when it runs; a kernel read undefined memory (OpenCL), refused a constant negative index
    (WGSL), or wrote outside the buffer. Inside a ``pl.when`` or a loop (which may not run, as a
    ``pl.when(program_id(0) > 0)`` reading block ``program_id(0) - 1`` does not in a grid of 1) it returns
    ``True`` instead: the caller clamps the address or drops the store, as the interpreter never reads it."""
    if any(ent[0] == "s" and ent[1] == 0 for ent in indexer):
        return False
    consts = [_scalar(s) for s in starts]
    for d, (ent, x, n) in enumerate(zip(indexer, consts, ref.shape, strict=True)):
        size = 1 if ent[0] == "i" else ent[1]
        if isinstance(x, Const) and not 0 <= int(x.value) <= n - size:
            if r.guarded:
                return True
            desc = ", ".join("?" if not isinstance(c, Const) else str(int(c.value)) if e[0] == "i"
                             else f"{int(c.value)}:{int(c.value) + e[1]}" for e, c in zip(indexer, consts, strict=True))
            lo = int(x.value)
            raise IndexError(f"pallas_call {r.name}: {what} ref[{desc}] (shape {ref.shape}) {fix[0]} elements outside "
                             f"the ref without a mask: its index on axis {d} is {lo if size == 1 else f'{lo}:{lo + size}'}"
                             f" when the kernel is built, for an axis of size {n} (a traced index does not wrap "
                             f"as a negative int does); {fix[1]}")
    return False


def _block_key(indexer, starts):
    return (indexer, tuple(_scalar(s) for s in starts))


def _store(r, e, vals):
    ref, value, rest = vals[0], vals[1], vals[2:]
    p = e.params
    indexer = p["indexer"]
    starts, (mask,) = _split(rest, len(indexer), (p["masked"],))
    shape = tuple(e.inputs[1].aval.shape)
    b = r.b
    off = mask is None and _check_constant_index(r, ref, indexer, starts, "a store to", ("writes", "pass mask= to pl.store"))
    staged = None
    key = _block_key(indexer, starts)
    if any(ref.name in v.reads and v.aligned.get(ref.name) != key for v in (value, mask) if v is not None):
        # The value reads the ref it overwrites: each work item first computes its elements into a private
        # array (the same elements it then stores), so no item writes what another still reads.
        vst = r.staging(value.dtype, shape, "pv")
        mst = r.staging(np.dtype(np.bool_), shape, "pm") if mask is not None else None

        def stage(idx, slot):
            r.put(vst[1], vst[2](idx, slot), _at(value, idx), space=vst[0])
            if mst is not None:
                r.put(mst[1], mst[2](idx, slot), _at(mask, idx), space=mst[0])
        r.par_for(shape, stage, fresh=True)
        r.barrier("global" if ref.space == "global" else "local")   # every read done before any write
        staged = (vst, mst)

    def write(idx, slot):
        ri = _ref_index(ref, indexer, starts, idx)
        r.own_row(ri, f"a store into {ref.name}")
        ri = [b.let(x, "ri") if not isinstance(x, Const) else x for x in ri]
        if staged is not None:
            vst, mst = staged
            v = b.let(Load(vst[0], vst[1], vst[2](idx, slot), value.dtype), "sv")
            m = b.let(Load(mst[0], mst[1], mst[2](idx, slot), np.dtype(np.bool_)), "sm") if mst else None
        else:
            v = _at(value, idx)
            m = _at(mask, idx) if mask is not None else None
        cond = None
        if m is not None or off or ref.padded or ref.space == "global" and _may_leave(ref, indexer):
            cond = ref.inside(ri)
            if m is not None:
                cond = op("land", m, cond)
        addr = ref.address(ri, m is not None or off)
        if cond is None:
            b.store(ref.name, addr, v, space=ref.space)
        else:
            with b.when(b.let(cond, "ok")):
                b.store(ref.name, addr, v, space=ref.space)

    r.par_for(shape, write)
    r.barrier("global" if ref.space == "global" else "local")
    return ref


def _may_leave(ref, indexer):
    """Whether a store through ``indexer`` may leave the array (dynamic starts on a global ref: guard it)."""
    return ref.padded


def _loop(r, e, vals):
    lo, hi, ops = vals[0], vals[1], vals[2:]
    nc = e.params["num_consts"]
    body = e.params["body"]
    consts, carry = list(ops[:nc]), list(ops[nc:])
    b = r.b
    # an inline value with a transcendental would be computed again in every iteration
    consts = [r.compute_once(c, "hc") for c in consts]
    homes = []
    for c in carry:
        if isinstance(c, _Ref):
            homes.append(c)
        else:
            shape = c.shape
            name = r.block_array(c.dtype, shape, "carry")
            r.par_for(shape, lambda idx, s, c=c, name=name, shape=shape:
                      r.put_elem(name, idx, shape, c.at(idx if shape else ())), fresh=True)
            homes.append(r.local_value(name, shape, c.dtype))
    r.barrier()
    with b.loop(_scalar(lo), _scalar(hi), hint="it") as i:
        iv = _Lazy((), np.dtype(np.int32), lambda idx, i=i: i)
        r.guarded += 1
        outs = r.run(body, [iv] + consts + homes)
        r.guarded -= 1
        _update_carries(r, homes, outs)
    return homes


def _update_carries(r, homes, outs):
    """The loop carries' homes in work-group memory set to the body's results ``outs``.

    A result that reads no other carry's home, and its own only at its own element, while no other result reads
    its home, is written in place (each work item reads and writes the same elements: flash attention's running
    maximum, sum and output once its rescaling factor is in work-group memory). The others are first computed
    into each item's staging array (``staging``), then, after a barrier, copied home: no item overwrites a
    home another still reads."""
    b = r.b
    pairs = [(h, o) for h, o in zip(homes, outs, strict=True)
             if not isinstance(h, _Ref) and getattr(o, "local", None) != h.local]
    names = {h.local for h in homes if not isinstance(h, _Ref)}

    def in_place(h, o):
        own = h.local not in o.reads or o.aligned.get(h.local) == _OWN
        return own and not (o.reads & (names - {h.local})) and not any(
            h.local in o2.reads for h2, o2 in pairs if h2 is not h)

    direct = [(h, o) for h, o in pairs if in_place(h, o)]
    staged = []
    for h, o in direct:
        r.par_for(h.shape, lambda idx, s, o=o, h=h: r.put_elem(h.local, idx, h.shape, _at(o, idx)), fresh=True)
        r.barrier()
    for h, o in pairs:
        if (h, o) in direct:
            continue
        st = r.staging(h.dtype, h.shape, "pc")
        r.par_for(h.shape, lambda idx, s, o=o, st=st, h=h:
                  r.put(st[1], st[2](idx, s), _at(o, idx), space=st[0]), fresh=True)
        staged.append((h, st))
    if staged:
        r.barrier()
    for h, st in staged:
        r.par_for(h.shape, lambda idx, s, h=h, st=st:
                  r.put_elem(h.local, idx, h.shape, b.let(Load(st[0], st[1], st[2](idx, s), h.dtype), "pc")),
                  fresh=True)
        # A barrier after each carry's copy (``barriers.prune_barriers`` drops those that order nothing):
        # PoCL 3.0 dropped the copies of a bounds-tested phase followed by a looped one in the same barrier
        # region at the end of the loop body (flash attention at 64 work items: the row maxima and sums
        # never left their start values); on CPU OpenCL devices these phases have no bounds test.
        r.barrier()


def _when(r, e, vals):
    pred, ops = vals[0], vals[1:]
    nc = e.params["num_consts"]
    with r.b.when(r.b.let(_scalar(pred), "pred")):
        r.guarded += 1
        r.run(e.params["body"], list(ops))
        r.guarded -= 1
    r.barrier("global")
    return list(ops[nc:])


def _atomic(r, e, vals):
    """``pl.atomic_add/max/min``: a parallel phase of atomic read-modify-writes (``ir.Atomic``) on the ref's
    global buffer, then a barrier; the old values, where the kernel uses them, in work-group memory (where the
    mask is false, the element's current value, as the interpreter gives)."""
    ref, value, rest = vals[0], vals[1], vals[2:]
    p = e.params
    indexer, kind = p["indexer"], p["op"]
    starts, (mask,) = _split(rest, len(indexer), (p["masked"],))
    if ref.space != "global":
        raise Unrenderable(f"pl.atomic_{kind} on a scratch (work-group) ref has no kernel form; update an "
                           f"output ref")
    if ref.dtype not in ATOMIC_DTYPES:
        raise Unrenderable(f"pl.atomic_{kind} of {ref.dtype.name} has no kernel form (the kernels update "
                           f"{', '.join(d.name for d in ATOMIC_DTYPES)} atomically)")
    if r.rows:
        raise _NotRowwise("atomics are shared between work items")
    shape = tuple(e.outputs[1].aval.shape)
    b = r.b
    off = mask is None and _check_constant_index(r, ref, indexer, starts, f"pl.atomic_{kind}: an update of",
                                                 ("writes", "pass mask= to it"))
    keep = e.outputs[1] in r.used
    olds = r.local_array(ref.dtype, math.prod(shape), "old") if keep else None

    def update(idx, slot):
        ri = [b.let(x, "ri") if not isinstance(x, Const) else x for x in _ref_index(ref, indexer, starts, idx)]
        m = _at(mask, idx) if mask is not None else None
        cond = None
        if m is not None or off or ref.padded:
            cond = ref.inside(ri)
            if m is not None:
                cond = op("land", m, cond)
        addr = b.let(ref.address(ri, cond is not None), "ad")
        v = _at(value, idx)
        if cond is None:
            old = b.atomic(kind, ref.name, addr, v, keep)
        else:
            old = b.var(ref.dtype, Load("global", ref.name, addr, ref.dtype), "old") if keep else None
            with b.when(b.let(cond, "ok")):
                got = b.atomic(kind, ref.name, addr, v, keep)
                if keep:
                    b.assign(old, got)
        if keep:
            b.store(olds, _linear(idx, shape), old, space="local")

    r.par_for(shape, update)
    r.barrier("global")
    if not keep:
        return [ref, _Lazy(shape, ref.dtype, lambda idx: const(0, ref.dtype))]
    return [ref, r.local_value(olds, shape, ref.dtype)]


def _call(r, e, vals):
    """A call inside a kernel (``jax.nn.relu``'s ``custom_jvp``, a nested ``jit``, ``remat``): its program
    inline. The kernel is run, never differentiated through the call, so only the primal program matters."""
    return r.run(e.params[CALL_PROGRAM[e.primitive]], list(vals))


_RULES = {P.broadcast_in_dim: _broadcast, P.reshape: _reshape, P.transpose: _transpose, P.iota: _iota,
          P.slice_p: _slice, P.rev: _rev, P.copy_p: _identity, P.stop_gradient: _identity, P.name_p: _identity,
          P.dot_general: _dot, pallas_load_p: _load, pallas_store_p: _store, pallas_loop_p: _loop,
          pallas_when_p: _when, pallas_atomic_p: _atomic}
for _p in _REDUCE:
    _RULES[_p] = _reduce
for _p in CALL_PROGRAM:
    _RULES[_p] = _call


# ------------------------------------------------------------------------------------------ the group


def _index_map_offsets(r, block, pids):
    """The block's first element per array axis, as expressions of the grid indices."""
    if block.index_map is None:
        return [_i(0)] * len(block.shape)
    outs = r.run(block.index_map, [_Lazy((), np.dtype(np.int32), lambda idx, p=p: p) for p in pids])
    offs = []
    for o, n in zip(outs, block.block_shape, strict=True):
        bi = _scalar(o)
        offs.append(r.b.let(op("mul", bi, _i(1 if n is None else n)), "off"))
    return offs


def _global_ref(r, name, block, dtype, pids, vector=None):
    """The ``_Ref`` of a block of a global buffer at the grid indices ``pids``; ``vector``: the buffer's input
    position, kept as ``_Ref.vector`` where its vector binding (``_Renderer.vector_name``) may serve: a float32
    block whose last axis is the array's last, both extents along it multiples of 4, not padded."""
    offs = _index_map_offsets(r, block, pids)
    axes = tuple(a for a, n in enumerate(block.block_shape) if n is not None)
    vec = vector is not None and np.dtype(dtype) in _LANE_DTYPES and not block.padded and bool(axes) \
        and axes[-1] == len(block.shape) - 1 and block.shape[-1] % 4 == 0 and block.block_shape[-1] % 4 == 0
    return _Ref("global", name, np.dtype(dtype), block.ref_shape, tuple(block.shape), tuple(offs), axes, block.padded,
                r.wide, vector if vec else None)


def _depends(prog, i):
    """Whether any result of the (index map) program ``prog`` depends on its ``i``-th input."""
    dep = {prog.invars[i]}
    for e in prog.eqns:
        if any(isinstance(a, Var) and a in dep for a in e.inputs):
            dep.update(e.outputs)
    return any(isinstance(a, Var) and a in dep for a in prog.outvars)


#: index-map equations whose result is an injective function of their one non-constant operand (with a constant
#: other operand: ``mul`` by a nonzero one); ``_moving_axes``
_INJECTIVE = (P.add, P.sub, P.mul, P.neg, P.copy_p, P.convert_element_type)


def _moving_axes(prog):
    """The inputs (grid axes) ``j`` of the index map ``prog`` that some block index follows one to one: a result
    that is input ``j`` itself, or made from it alone by adding, subtracting or multiplying by a nonzero constant,
    negating, copying or widening (``i``, ``2 * i + 1``; not ``i // 2``, ``min(i, 3)`` or ``i + j``). Instances
    that differ along such an axis get different blocks; along any other axis (one the map ignores, or follows
    in any other way) they may get the same block."""
    src = {v: j for j, v in enumerate(prog.invars)}
    const = set()
    for e in prog.eqns:
        ins = [a for a in e.inputs if isinstance(a, Var) and a not in const]
        if not ins:
            const.update(e.outputs)
            continue
        if e.primitive not in _INJECTIVE or len(ins) != 1 or ins[0] not in src or len(e.outputs) != 1:
            continue
        other = [a for a in e.inputs if a is not ins[0]]
        if e.primitive is P.mul and not (len(other) == 1 and isinstance(other[0], Literal) and other[0].val != 0):
            continue
        out = e.outputs[0]
        if e.primitive is P.convert_element_type and not (
                np.dtype(out.aval.dtype).kind in "iu" and np.dtype(out.aval.dtype).itemsize
                >= np.dtype(ins[0].aval.dtype).itemsize):
            continue
        src[out] = src[ins[0]]
    return {src[v] for v in prog.outvars if isinstance(v, Var) and v in src}


def _ref_uses(prog, refs):
    """What the body ``prog`` does with the refs ``refs`` (its variables; a ref a store, an atomic or a
    ``fori_loop``/``pl.when`` carry returns is followed too): a set of ``"atomic"`` (``pl.atomic_*``) and
    ``"other"`` (loads, stores, anything else)."""
    refs, found = set(refs), set()
    for e in prog.eqns:
        at = [k for k, a in enumerate(e.inputs) if isinstance(a, Var) and a in refs]
        if not at:
            continue
        if e.primitive in (pallas_loop_p, pallas_when_p):
            body = getattr(e.params["body"], "program", e.params["body"])
            skip, first = (2, 1) if e.primitive is pallas_loop_p else (1, 0)   # as ``_passed_unused``
            nc = e.params["num_consts"]
            inner = {body.invars[first + k - skip] for k in at if k >= skip}
            found |= _ref_uses(body, inner) | ({"other"} if any(k < skip for k in at) else set())
            refs.update(e.outputs[k - skip - nc] for k in at if k - skip >= nc)
            continue
        found.add("atomic" if e.primitive is pallas_atomic_p else "other")
        if e.primitive in (pallas_store_p, pallas_atomic_p):
            refs.add(e.outputs[0])
        elif e.primitive is not pallas_load_p:
            refs.update(e.outputs)
    return found


def revisited_axes(p):
    """The grid axes of ``pallas_call`` params ``p`` whose program instances may write the same block of an
    output: along them instances must run one after another, in the grid's order, as in Pallas (a kernel
    accumulating ``o_ref[...] += ...`` along ``k`` sees what the step before wrote). An axis counts for an output
    that the body reads or writes other than by ``pl.atomic_*`` (which may run in any order) where the output's
    index map does not follow it one to one (``_moving_axes``; all axes for a whole-array output), and has more
    than one index. Instances differing along the other axes write different blocks of every such output, so
    they may run at once. ``dimension_semantics`` is not read: an axis marked ``"parallel"`` that the
    output's index map ignores is walked in order too. Sorted; ``()`` where no instances share a block."""
    grid, prog = tuple(p["grid"]), p["body"].program
    ng, nin = len(grid), len(p["in_blocks"])
    if len(prog.invars) < ng + nin + len(p["out_blocks"]):
        return tuple(a for a in range(ng) if grid[a] > 1)
    out = set()
    for k, ob in enumerate(p["out_blocks"]):
        if not _ref_uses(prog, {prog.invars[ng + nin + k]}) - {"atomic"}:
            continue
        moving = set() if ob.index_map is None else _moving_axes(ob.index_map)
        out.update(a for a in range(ng) if grid[a] > 1 and a not in moving)
    return tuple(sorted(out))


def _whole(e, ref):
    """Whether ``e`` is an unmasked ``pallas_load``/``pallas_store`` of all of ``ref`` (``x_ref[...]``)."""
    p = e.params
    if e.inputs[0] is not ref or p["masked"] or p.get("has_other"):
        return False
    starts = e.inputs[2:] if e.primitive is pallas_store_p else e.inputs[1:]
    return (all(ent[0] == "s" for ent in p["indexer"]) and len(starts) == len(p["indexer"])
            and tuple(ent[1] for ent in p["indexer"]) == tuple(ref.aval.shape)
            and all(isinstance(a, Literal) and int(a.val) == 0 for a in starts))


def _zero_fill(prog, ref):
    """Whether ``prog`` (a ``pl.when`` body over ``ref``) only stores zeros into all of ``ref``."""
    eqns = list(prog.eqns)
    stores = [e for e in eqns if e.primitive is pallas_store_p]
    if len(stores) != 1 or not _whole(stores[0], ref) or prog.outvars[0] is not stores[0].outputs[0]:
        return False
    fill = {}
    for e in eqns:
        if e.primitive is pallas_load_p and e.inputs[0] is ref:
            continue
        if e.primitive is P.broadcast_in_dim and isinstance(e.inputs[0], Literal) and float(e.inputs[0].val) == 0:
            fill[e.outputs[0]] = True
            continue
        if e is not stores[0]:
            return False
    return fill.get(stores[0].inputs[1], False)


def _first_touch_writes(prog, ref, grid_vars):
    """Whether every program instance's first use of ``ref`` (top-level, in order) writes all of it: an unmasked
    ``ref[...] = v`` (``_whole``), or ``pl.when(program_id(j) == 0)`` storing zeros into all of it. Returns the
    grid axes the block must not move along for that to cover every block (``(j,)`` for the ``when`` form:
    only the instances with ``program_id(j) == 0`` write), or ``None`` when neither holds."""
    made = {}
    for e in prog.eqns:
        if any(a is ref for a in e.inputs):
            after = _passed_unused(e, ref)
            if after is not None:
                ref = after
                continue
            if e.primitive is pallas_store_p and _whole(e, ref) and all(a is not ref for a in e.inputs[1:]):
                return ()
            if e.primitive is pallas_when_p and len(e.inputs) == 2 and e.inputs[1] is ref and \
                    e.params["num_consts"] == 0 and _zero_fill(e.params["body"], e.params["body"].invars[0]):
                c = made.get(e.inputs[0])
                if c is not None and c.primitive is P.eq and isinstance(c.inputs[1], Literal) and \
                        int(c.inputs[1].val) == 0 and c.inputs[0] in grid_vars:
                    return (grid_vars.index(c.inputs[0]),)
            return None
        for o in e.outputs:
            made[o] = e
    return None


def _passed_unused(e, ref):
    """Where ``ref`` lives after ``e``, a ``fori_loop``/``pl.when`` given it (as every ref in scope is) whose body
    never uses it: ``ref`` itself (a constant of the body) or ``e``'s output (a carry returned as it came);
    ``None`` for any other equation or use."""
    if e.primitive not in (pallas_loop_p, pallas_when_p):
        return None
    body = getattr(e.params["body"], "program", e.params["body"])
    skip, first = (2, 1) if e.primitive is pallas_loop_p else (1, 0)  # operands after (lower, upper) / pred;
    nc = e.params["num_consts"]                                      # a loop body's first invar: its counter
    if len(body.invars) != len(e.inputs) - skip + first:
        return None
    at = [k - skip for k, a in enumerate(e.inputs) if a is ref]
    if len(at) != 1 or at[0] < 0:
        return None
    v = body.invars[first + at[0]]
    if any(x is v for d in body.eqns for x in d.inputs):
        return None
    outs = [k for k, x in enumerate(body.outvars) if x is v]
    if at[0] < nc:
        return ref if not outs else None
    c = at[0] - nc
    return e.outputs[c] if outs == [c] else None


def _covers(block, grid, still=()):
    """Whether the blocks the index map picks over ``grid`` (the instances with ``program_id(j) == 0`` for
    ``j`` in ``still``) include every block of the array: per axis of more than one block a distinct grid index
    with enough instances, a constant 0 block index elsewhere. A sufficient condition (other maps: ``False``)."""
    if block.index_map is None:
        return all((n or 1) >= s for n, s in zip(block.block_shape, block.shape, strict=True))
    prog = block.index_map
    invars = list(prog.invars)
    if any(_depends(prog, j) for j in still):
        return False
    used = set()
    for v, n, s in zip(prog.outvars, block.block_shape, block.shape, strict=True):
        need = -(-s // (n or 1))
        if isinstance(v, Literal):
            if need > 1 or int(v.val) != 0:
                return False
            continue
        j = next((k for k, x in enumerate(invars) if x is v), None)
        if j is None or j in used or grid[j] < need or (need <= 1 and grid[j] != 1):
            return False
        used.add(j)
    return True


def stores_everything(p, k):
    """Whether the kernel of ``pallas_call`` params ``p`` provably writes every element of its ``k``-th result
    before reading it: each program instance's first use of the result's ref writes all of its block
    (``_first_touch_writes``) and the blocks of the grid cover the array (``_covers``). Where it does not, the
    result starts as zeros (``PallasGroup``'s fill launch), as on the numpy interpreter (docs/kernels.md)."""
    grid, prog = tuple(p["grid"]), p["body"].program
    ng, nin = len(grid), len(p["in_blocks"])
    if len(prog.invars) < ng + nin + len(p["out_blocks"]):
        return False
    still = _first_touch_writes(prog, prog.invars[ng + nin + k], list(prog.invars[:ng]))
    return still is not None and _covers(p["out_blocks"][k], grid, still)


def _accumulating_dot(p):
    """The ``k``-accumulating matrix product (``examples/kernels/matmul.py``): a body ``[pl.when(program_id(k)
    == 0): o_ref[...] = 0]; o_ref[...] += x_ref[...] @ y_ref[...]`` whose output block does not move along the
    last grid axis ``k`` (its index map ignores it; whole, unpadded 2-d blocks). Returns ``(zero, x, y)``: whether
    the first step zeroes the block, and the operands' input positions; ``None`` for any other body.

    Such a kernel renders as one work-group per output block walking ``k`` itself, each work item's register
    tile accumulating across all of ``k`` and stored once (``_render_accumulating_dot``): the output block is
    neither re-read nor re-written per step, and instances of one block no longer run as separate work-groups
    (which ordered their updates by nothing)."""
    grid, prog = tuple(p["grid"]), p["body"].program
    if not grid or len(p["out_blocks"]) != 1 or p["scratch"]:
        return None
    ob = p["out_blocks"][0]
    ng, nin = len(grid), len(p["in_blocks"])
    if ob.index_map is None or ob.padded or len(ob.ref_shape) != 2 or _depends(ob.index_map, ng - 1):
        return None
    # the block follows every other axis one to one (else several work-groups would write one block)
    if any(a != ng - 1 for a in revisited_axes(p)):
        return None
    if len(prog.invars) != ng + nin + 1 or any(bk.padded for bk in p["in_blocks"]):
        return None
    pid_k, ins, o = prog.invars[ng - 1], prog.invars[ng:ng + nin], prog.invars[ng + nin]
    eqns, zero = list(prog.eqns), False
    if len(eqns) == 8:
        e0, e1 = eqns[0], eqns[1]
        if not (e0.primitive is P.eq and e0.inputs[0] is pid_k and isinstance(e0.inputs[1], Literal)
                and int(e0.inputs[1].val) == 0 and e1.primitive is pallas_when_p
                and list(e1.inputs) == [e0.outputs[0], o] and e1.params["num_consts"] == 0
                and _zero_fill(e1.params["body"], e1.params["body"].invars[0])):
            return None
        o, eqns, zero = e1.outputs[0], eqns[2:], True
    if len(eqns) != 6:
        return None
    ld = {e.outputs[0]: e for e in eqns if e.primitive is pallas_load_p}
    dot = [e for e in eqns if e.primitive is P.dot_general]
    add = [e for e in eqns if e.primitive is P.add]
    st = eqns[-1]
    if len(ld) != 3 or len(dot) != 1 or len(add) != 1 or st.primitive is not pallas_store_p:
        return None
    dot, add = dot[0], add[0]
    if dot.params["dimension_numbers"] != (((1,), (0,)), ((), ())) or \
            np.dtype(dot.outputs[0].aval.dtype) != np.dtype(ob_dtype := p["out_avals"][0].dtype) or \
            np.dtype(ob_dtype).kind != "f":
        return None
    xl, yl = (ld.get(a) for a in dot.inputs)
    if xl is None or yl is None or xl.inputs[0] not in ins or yl.inputs[0] not in ins:
        return None
    if any(np.dtype(e.outputs[0].aval.dtype) != np.dtype(ob_dtype) for e in (xl, yl)):
        return None
    rest = [e for e in ld.values() if e not in (xl, yl)]
    if len(rest) != 1 or not _whole(rest[0], o) or not all(_whole(e, e.inputs[0]) for e in (xl, yl)):
        return None
    if set(add.inputs) != {rest[0].outputs[0], dot.outputs[0]} or not _whole(st, o) \
            or st.inputs[1] is not add.outputs[0] or prog.outvars[0] is not st.outputs[0]:
        return None
    return zero, ins.index(xl.inputs[0]), ins.index(yl.inputs[0])


def _render_accumulating_dot(r, p, match, ins, outs, pids, kdim):
    """The body ``_accumulating_dot`` matched, for the instance ``pids`` of the other grid axes: each work item
    keeps a register tile of the output block (``_dot_tile``: ``_FUSED_TILE`` outputs, up to 16 columns, on CPU
    OpenCL devices; ``_VECTOR_TILE`` where operands are read as vectors) across the ``kdim`` grid steps and each
    block's contraction, then stores it once. Where ``_vector_operands`` allows it, both operands are read four
    float32 elements per load (``_accumulate_vectors``); where the renderer has subgroups as well
    (``render(subgroup=)``) and ``_subgroup_tile`` fits the work-group, a subgroup shares its rows of ``x``
    (``_subgroup_elements``)."""
    b = r.b
    ob = p["out_blocks"][0]
    d = np.dtype(p["out_avals"][0].dtype)
    oref = _global_ref(r, outs[0], ob, d, pids[:-1] + [_i(0)])
    oshape = tuple(oref.shape)
    vec = r.vectors is not None and not r.wide and _vector_operands(p, match[1], match[2], d) and (
        r.vector_room is None or r.vector_room >= 2)
    shared = _subgroup_tile(oshape, r.wg, r.subgroup) if vec else None
    if shared is not None:
        tr, tc = shared
    elif r.wide:
        tr, tc = _dot_tile(oshape, r.wg, _FUSED_TILE, 16)
    else:
        tr, tc = _dot_tile(oshape, r.wg, _VECTOR_TILE if vec else 16, _VECTOR_COLUMNS if vec else 8)
    vec = vec and tc % 4 == 0
    names = (r.vector_name(match[1]), r.vector_name(match[2])) if vec else None
    where = (ins, oref, pids, kdim, names)
    if shared is not None:
        elems, loads = _subgroup_elements(r, oshape, shared, r.subgroup)
        _accumulate_block(r, p, match, where, (elems, loads, tc), r.subgroup)
        return

    def body(tidx, slot):
        elems = []
        for a in range(tr):
            for c in range(tc):
                col = op("add", op("mul", tidx[1], _i(tc)), _i(c))
                row = op("add", op("mul", tidx[0], _i(tr)), _i(a))
                elems.append((row if tr > 1 else tidx[0], (col if r.wide else b.let(col, "tj")) if tc > 1 else tidx[1]))
        _accumulate_block(r, p, match, where, (elems, elems[::tc], tc))

    r.par_for((oshape[0] // tr, oshape[1] // tc), body)


def _accumulate_block(r, p, match, where, tile, lanes=0):
    """A work item's part of ``_render_accumulating_dot``: accumulators for the output elements ``elems``
    (``tile = (elems, loads, cols)``: row-major, ``cols`` a row; ``loads``, the elements whose rows of ``x`` the
    item reads: each row's first, or with ``lanes`` its own rows of the subgroup's, ``_subgroup_elements``),
    zero or the output's values, summed over every step of the contraction (the grid's ``kdim`` steps of
    ``where = (ins, oref, pids, kdim, names)``; ``names``: the operands' vector bindings or ``None``), then
    stored."""
    zero, xi, yi = match
    ins, oref, pids, kdim, names = where
    elems, loads, tc = tile
    b = r.b
    d = np.dtype(p["out_avals"][0].dtype)
    acc_d = _acc_dtype(d)
    if zero:
        accs = [b.var(acc_d, const(0, acc_d), "acc") for _ in elems]
    else:
        accs = [b.var(acc_d, convert(b, b.let(Load("global", oref.name, oref.address(list(ix), False), d), "ld"),
                                     acc_d), "acc") for ix in elems]
    nk, nkg = p["in_blocks"][xi].ref_shape[1], p["grid"][kdim]
    if names and nkg > 1 and _walks_contraction(p["in_blocks"][xi], 1, kdim, nkg) \
            and _walks_contraction(p["in_blocks"][yi], 0, kdim, nkg):
        # the blocks of k follow each other along the contraction: one loop over all of it, addressed from
        # the first block (lavapipe: the example 0.92x the time of a loop per block)
        kp = pids[:-1] + [_i(0)]
        xr = _global_ref(r, ins[xi], p["in_blocks"][xi], d, kp)
        yr = _global_ref(r, ins[yi], p["in_blocks"][yi], d, kp)
        _accumulate_vectors(b, (xr, yr), names, nk * nkg, accs, loads, elems[:tc], d, lanes)
    else:
        with b.loop(_i(0), _i(nkg), hint="kg") as kg:
            kp = pids[:-1] + [kg]
            xr = _global_ref(r, ins[xi], p["in_blocks"][xi], d, kp)
            yr = _global_ref(r, ins[yi], p["in_blocks"][yi], d, kp)
            if names:
                _accumulate_vectors(b, (xr, yr), names, nk, accs, loads, elems[:tc], d, lanes)
            else:
                _accumulate_scalars(b, (xr, yr), nk, accs, elems, d, acc_d)
    for acc, ix in zip(accs, elems, strict=True):
        b.store(oref.name, oref.address(list(ix), False), _narrow(b, acc, d))


def _subgroup_tile(oshape, wg, lanes):
    """``(rows, cols)`` of a k-accumulating product's subgroup tile (``_subgroup_elements``) for an output block
    ``oshape`` and ``wg`` work items, or ``None`` where none fits: a subgroup of ``lanes`` work items computes
    ``rows`` rows of the block (a multiple of ``lanes``), each item ``cols`` of their columns (4 or 8: whole
    vectors of ``y``), and the work-group's subgroups cover the block once."""
    n = math.prod(oshape)
    if not lanes or len(oshape) != 2 or wg % lanes or n % wg:
        return None
    per = n // wg
    for cols in _SUBGROUP_COLUMNS:
        rows = per // cols
        if per % cols == 0 and rows % lanes == 0 and oshape[0] % rows == 0 and oshape[1] % (lanes * cols) == 0:
            return rows, cols
    return None


def _subgroup_elements(r, oshape, tile, lanes):
    """``(elements, loads)`` of a work item in the subgroup form of a k-accumulating product (as
    ``DotGroup._subgroup``, ``groups/dot.py``): subgroup ``lid / lanes`` of the work-group computes ``rows``
    consecutive rows of the ``oshape`` block (``tile = (rows, cols)``) and ``lanes x cols`` columns, the work item
    at lane ``l`` (``Special("lane")``) columns ``l cols`` to ``l cols + cols - 1`` of them. ``loads``: the rows of
    ``x`` the item reads, ``l``, ``l + lanes``, ...; ``_accumulate_vectors`` broadcasts each to the subgroup, so
    the subgroup reads each row once where every item read all of them. Every item runs every step (no
    per-item branch): the broadcasts are in uniform control flow."""
    b = r.b
    rows, cols = tile
    across = oshape[1] // (lanes * cols)
    sg, lane = b.let(op("div", r.lid, _i(lanes)), "sg"), Special("lane", 0)
    r0 = b.let(op("mul", op("div", sg, _i(across)), _i(rows)), "r0") if across > 1 else \
        b.let(op("mul", sg, _i(rows)), "r0")
    c0 = b.let(op("add", op("mul", op("rem", sg, _i(across)), _i(lanes * cols)), op("mul", lane, _i(cols))), "c0") \
        if across > 1 else b.let(op("mul", lane, _i(cols)), "c0")
    elems = [(b.let(op("add", r0, _i(a)), "ti") if a else r0, b.let(op("add", c0, _i(c)), "tj") if c else c0)
             for a in range(rows) for c in range(cols)]
    loads = [(b.let(op("add", r0, op("add", lane, _i(j * lanes))), "ri"), None) for j in range(rows // lanes)]
    return elems, loads


def _walks_contraction(block, axis, kdim, nkg):
    """Whether the ``nkg`` blocks that grid axis ``kdim`` picks of a k-accumulating product's operand (``axis``:
    its block's contraction axis) lie one after another along the whole array axis: its index map gives that
    axis the grid index itself, unpadded."""
    prog = block.index_map
    axes = [a for a, n in enumerate(block.block_shape) if n is not None]
    if prog is None or len(axes) != 2 or block.padded:
        return False
    a = axes[axis]
    return prog.outvars[a] is prog.invars[kdim] and block.block_shape[a] * nkg == block.shape[a]


def _accumulate_scalars(b, refs, nk, accs, elems, d, acc_d):
    """One grid step's contraction of ``_render_accumulating_dot``, one element per load (each loaded once per
    step of the contraction), ``_UNROLL_K`` steps per iteration."""
    xr, yr = refs
    uk = _UNROLL_K if len(elems) > 1 and nk % _UNROLL_K == 0 else 1
    with b.loop(_i(0), _i(nk), _i(uk), hint="k") as k:
        for u in range(uk):
            ku = op("add", k, _i(u)) if u else k
            cache: dict = {}

            def val(ref, ix, key):
                if key not in cache:
                    ad = _bound_address(b, ref.address(list(ix), False))
                    cache[key] = convert(b, b.let(Load("global", ref.name, ad, d), "ld"), acc_d)
                return cache[key]
            for acc, (i, j) in zip(accs, elems, strict=True):
                xa = val(xr, (i, ku), ("x", i))
                yb = val(yr, (ku, j), ("y", j))
                b.assign(acc, op("add", acc, op("mul", xa, yb)))


def _vector_operands(p, xi, yi, d):
    """Whether the k-accumulating product's operands can be read four elements per load (``r.vectors``, the
    scheduler option ``dot_vec4``: webgpu on a CPU adapter): float32 blocks whose last axis is the array's
    last, with that axis's length, the block's extent along it and the contraction block all multiples of 4
    (every vector then whole and aligned in its buffer)."""
    if d != np.dtype(np.float32) or p["aliases"]:
        return False
    for k in (xi, yi):
        bk = p["in_blocks"][k]
        if (bk.block_shape[-1] is None or len(bk.ref_shape) != 2 or bk.shape[-1] % 4 or bk.block_shape[-1] % 4):
            return False
    return True


def _accumulate_vectors(b, refs, names, nk, accs, rows, cols, d, lanes=0):
    """One grid step's contraction of ``_render_accumulating_dot`` with vector reads: per four steps of the
    contraction one vector of ``x`` per tile row (its four contraction elements) and per step one vector of
    ``y`` per four tile columns; each accumulator adds its products in the contraction's order, as the scalar
    form (the same results, bit for bit). With ``lanes``, ``rows`` are the work item's own rows of its
    subgroup's (``_subgroup_elements``): each vector of ``x`` is broadcast from every work item of the subgroup,
    the tile's rows in the order lane by lane, row by row."""
    xr, yr = refs
    v4 = vector_dtype(d)
    tc = len(cols)
    with b.loop(_i(0), _i(nk), _i(4), hint="k") as k:
        xs = [b.let(Load("global", names[0], _div(xr.address([i, k], False), 4), v4), "xv") for i, _ in rows]
        if lanes:
            xs = [b.let(Broadcast(v, lane, v4), "xb") for v in xs for lane in range(lanes)]
        for u in range(4):
            ku = op("add", k, _i(u)) if u else k
            ys = []
            for q in range(0, tc, 4):
                yv = b.let(Load("global", names[1], _div(yr.address([ku, cols[q][1]], False), 4), v4), "yv")
                ys.extend(b.let(Lane(yv, lane, d)) for lane in range(4))
            for a, xv in enumerate(xs):
                xa = b.let(Lane(xv, u, d))
                for c in range(tc):
                    acc = accs[a * tc + c]
                    b.assign(acc, op("add", acc, op("mul", xa, ys[c])))


#: Outputs per work item of ``_render_accumulating_dot``'s register tile on CPU OpenCL devices (4 x 16): the
#: 256^3 example with 32 x 32 blocks on PoCL 3.0 took 0.6x the time of 4 x 8, on PoCL 3.1 0.75x (tenth
#: session; 4 x 8 had been 0.53x the time of 2 x 8); 8 x 8 was close, 8 x 16 slower on PoCL 3.0.
_FUSED_TILE = 64
#: The same where the operands are read as vectors (``_accumulate_vectors``, lavapipe), and its most columns:
#: 8 x 16, as fnarray's own product there (eleventh session: the 256^3 example 1.05x the time of fnarray's own
#: product with the contraction walked in one loop, ``_walks_contraction``; 8 x 8 1.21x, 16 x 8 1.35x, 4 x 16
#: 1.47x, 16 x 16 1.66x; tenth session, before the one loop: 8 x 8 0.85x, 4 x 8 1.0x, 16 x 4 and 4 x 16
#: 0.96-1.01x, against fnarray's own product before it was made 1.6x faster)
_VECTOR_TILE = 128
_VECTOR_COLUMNS = 16
#: Columns per work item of the subgroup form (``_subgroup_tile``), in order of preference: 4, as fnarray's own
#: product's subgroup form on lavapipe (``groups/dot.py`` ``SUBGROUP_TILE``), then 8
_SUBGROUP_COLUMNS = (4, 8)


def default_workgroup(eqn, caps, vectors=False):
    """``workgroup_size`` of one ``pallas_call`` equation: for a k-accumulating product (``_accumulating_dot``)
    on a CPU OpenCL device, one work item per ``_FUSED_TILE`` outputs of the block; with ``vectors`` (operands
    read as vectors: ``render(vectors=)``) where ``_vector_operands`` allows it, one per ``_VECTOR_TILE``."""
    p = eqn.params
    register = getattr(caps, "matmul_tiling", "local") == "register"
    match = _accumulating_dot(p) if (register or vectors) and "workgroup" not in dict(p["compiler_params"]) \
        else None
    if match is not None and (register or _vector_operands(p, match[1], match[2],
                                                            np.dtype(p["out_avals"][0].dtype))):
        tile = _FUSED_TILE if register else _VECTOR_TILE
        n = math.prod(p["out_blocks"][0].ref_shape)
        cap = min(_MAX_WG, caps.max_workgroup_size or _MAX_WG)
        if n % tile == 0 and 1 <= n // tile <= cap:
            return n // tile
    blocks = list(p["in_blocks"]) + list(p["out_blocks"])
    largest = max([math.prod(bk.ref_shape) for bk in blocks] + [math.prod(s.shape) for s in p["scratch"]] + [1])
    return workgroup_size(caps, p, largest, _has_dot(p["body"].program))


def row_count(eqn, caps):
    """The rows of the first output block where row mode (``render(rows=True)``: one work item per row, no
    barriers) may apply to this ``pallas_call``, else ``None``: a first output block of 2 to 256 rows (within
    the device's work-group limit), not a k-accumulating product on a CPU device (which has its own form), and
    either ``compiler_params={"rows": True}`` or, without ``compiler_params`` ``rows`` or ``workgroup``, on CPU
    devices (no staged ``dot`` operands) a body with a ``dot`` or a reduction."""
    p = eqn.params
    cp = dict(p["compiler_params"])
    cpu = not (getattr(caps, "matmul_tiling", "local") == "local" and caps.tiling_pays)
    if not p["out_blocks"] or cp.get("rows") is False or cpu and _accumulating_dot(p) is not None:
        return None
    if cp.get("rows") is not True and ("workgroup" in cp or not cpu or not _has_dot(p["body"].program)):
        return None
    shape = tuple(p["out_blocks"][0].ref_shape)
    cap = min(_MAX_WG, caps.max_workgroup_size or _MAX_WG)
    return shape[0] if len(shape) >= 1 and 2 <= shape[0] <= cap else None


def _rows_by_default(caps, program):
    """Whether row mode is the default where ``row_count`` allows it: on a CPU WebGPU adapter (lavapipe: flash
    attention 0.6x the time, its SIMD lanes reading each item's private row with one vector access); on CPU
    OpenCL devices for a body without a ``dot`` (reductions only: the softmax and layer-norm examples 0.25-0.5x
    the time on PoCL 3.0 and 3.1, tenth session), not with one (flash attention: PoCL 3.0 1.1x the time, PoCL
    3.1 1.2x of its staged form: docs/performance.md), where ``PALLAS_TUNABLE`` may still choose it."""
    if getattr(caps, "matmul_tiling", "local") == "register":
        return not any(e.primitive is P.dot_general for e in walk_body(program))
    return not caps.tiling_pays


#: rows per work item in row mode by default (``_row_tile_default``); tests set it to check the other form
ROW_TILE = None


def _row_tile_default(eqn, opts):
    """Rows per work item in row mode by default (``render(row_tile=)``): ``ROW_TILE`` where set; else for a
    body with a ``dot`` the scheduler option ``pallas_row_tile`` (the webgpu backend's on a CPU adapter: 2,
    lavapipe's flash attention then reading each ``k``/``v`` vector once for two query rows, 0.63-0.68x the time
    of one row per item; four rows 0.79-1.08x: docs/performance.md; not in browser bundles); else 1 (PoCL,
    whose default for a body with a ``dot`` is not row mode; bodies without one: not measured)."""
    if ROW_TILE is not None:
        return ROW_TILE
    if any(e.primitive is P.dot_general for e in walk_body(eqn.params["body"].program)):
        return int(opts.get("pallas_row_tile", 1))
    return 1


def render(eqn, caps, buffer_names, wg=None, rows=False, stage=False, vectors=None, tile=_DOT_TILE, row_tile=1,
           subgroup=0, lane_maps=False):
    """The kernel of one ``pallas_call`` equation: ``(builder, global size, local size)``; ``buffer_names(b)``
    gives ``(input names, output names)``; ``wg``: the work-group size (default ``default_workgroup``).
    ``rows``: one work item per row of the blocks (``row_count`` of them, ``wg`` ignored) and no barriers, where
    every work item reads and writes only its own row of work-group memory and of the output and scratch refs;
    where it would not, the usual form. ``stage``: a transposed ``dot`` operand is staged in work-group memory
    in its own layout (``_Renderer.stage_swapped``; not in row mode). ``vectors(b, k)``: the name of a binding
    of input ``k`` as four-float32 vectors (``ir.vector_dtype``; only for targets that print them: WGSL, and
    OpenCL C, where with 64-bit addresses only ``_lane_load`` reads them),
    through which a k-accumulating product reads its operands (``_accumulate_vectors``). A kernel whose usual
    form does not render (its blocks past the work-group memory) is tried in row mode too, where its block
    values are private arrays. ``tile``: the most outputs of a ``dot``'s register tile per work item outside
    row mode (up to 16 columns above 16, else 8). ``row_tile``: in row mode, the rows of the blocks per work
    item (``row_count / row_tile`` items; a ``dot`` with a two-axis result computes one register tile over all
    of them, each right-operand element read once for them all); where it does not divide the rows, one.
    ``subgroup``: the subgroup size of a target that prints subgroup broadcasts (WGSL on a CPU adapter with the
    ``subgroup`` feature; 0: none), with which a k-accumulating product read as vectors shares its rows of ``x``
    across each subgroup (``_subgroup_elements``). ``lane_maps``: with ``vectors``, a ``dot`` operand that is
    an elementwise function of a load and rank-0 values (flash attention's ``q * scale``) is read as vectors as
    the load would be (``_lane_map``). Raises ``Unrenderable``."""
    n_rows = row_count(eqn, caps)
    if rows and n_rows is not None:
        per = row_tile if row_tile >= 1 and n_rows % row_tile == 0 else 1
        try:
            return _render(eqn, caps, buffer_names, n_rows // per, True, vectors=vectors, row_tile=per,
                           subgroup=subgroup, lane_maps=lane_maps)
        except _NotRowwise:
            wg = None
    if wg is None:
        wg = default_workgroup(eqn, caps, vectors is not None)
    try:
        return _render(eqn, caps, buffer_names, wg, False, stage, vectors, tile, subgroup=subgroup, lane_maps=lane_maps)
    except Unrenderable:
        if rows or n_rows is None:
            raise
        try:
            return _render(eqn, caps, buffer_names, n_rows, True, vectors=vectors, subgroup=subgroup,
                           lane_maps=lane_maps)
        except _NotRowwise:
            pass
        raise


def _render(eqn, caps, buffer_names, wg, rows, stage=False, vectors=None, tile=_DOT_TILE, row_tile=1, subgroup=0,
            lane_maps=False):
    p = eqn.params
    grid = tuple(p["grid"])
    b = KernelBuilder("pallas_" + "".join(c if c.isalnum() else "_" for c in p["name"])[:40])
    ins, outs = buffer_names(b)
    lid = b.let(Special("local_id", 0), "lid")
    r = _Renderer(b, wg, lid, caps)
    r.name = p["name"]
    # CPU devices (no staged dot operands) walk a k-accumulating product's last grid axis in one work-group
    fused = None if r.stage_dots else _accumulating_dot(p)
    r.rows = rows and fused is None
    if r.rows:
        r.row_ids = (lid,) + tuple(b.let(op("add", lid, _i(j * wg)), "row") for j in range(1, row_tile))
        r.joint_rows = row_tile > 1 and not any(e.primitive is P.dot_general for e in walk_body(p["body"].program))
    r.stage_swapped = stage
    r.vectors, r.dot_tile, r.subgroup, r.lane_maps = vectors, tile, subgroup, lane_maps
    if caps.max_buffers_per_kernel is not None:
        r.vector_room = caps.max_buffers_per_kernel - len(eqn.inputs) - len(p["out_avals"])
    scratch_names = [r.local_array(s.dtype, math.prod(s.shape), "scr") for s in p["scratch"]]
    r.shared = frozenset(scratch_names) | frozenset(outs)
    # instances that may write one output block (``revisited_axes``) are walked in order by one work-group
    seq = (len(grid) - 1,) if fused is not None else revisited_axes(p)
    spread = [a for a in range(len(grid)) if a not in seq]
    total = math.prod(grid[a] for a in spread)
    lim = caps.max_dispatch
    groups = total if lim is None else min(total, lim)
    gsize, lsize = (max(groups, 1) * wg,), (wg,)
    walk = lim is not None and total > lim
    if walk:
        loop = b.loop(Special("group_id", 0), _i(total), _i(groups), hint="inst")
    else:
        loop = _null()
    with loop as inst:
        inst = Special("group_id", 0) if inst is None else inst
        inst = b.let(inst, "inst")
        pids = dict(zip(spread, _pids(b, inst, [grid[a] for a in spread]), strict=True))
        if fused is not None:
            _render_accumulating_dot(r, p, fused, ins, outs, [pids[a] for a in spread] + [None], len(grid) - 1)
        else:
            _render_steps(r, eqn, (ins, outs, scratch_names), pids, [(a, grid[a]) for a in seq])
        if walk:
            r.barrier("global")
    return b, gsize, lsize


def _pids(b, flat, shape):
    """The grid indices of the instance ``flat`` of a grid ``shape`` (row-major), each a ``Let``."""
    return [b.let(x, "pid") if not isinstance(x, Const) else x for x in _unravel(flat, shape)] if shape else []


def _render_steps(r, eqn, names, pids, seq):
    """The body of ``eqn`` for one work-group: at the grid indices ``pids`` (axis: index) of the axes spread
    across work-groups, and where ``seq`` (``(axis, size)`` pairs: ``revisited_axes``) is not empty, for every
    index along those axes in the grid's (row-major) order, in a loop, a barrier after each step (so the next
    sees what it stored)."""
    b, p = r.b, eqn.params
    ins, outs, scratch_names = names

    def body(pids):
        pids = [pids[a] for a in range(len(pids))]
        refs = [_global_ref(r, nm, bk, a.aval.dtype, pids, k if r.vectors is not None else None)
                for k, (nm, bk, a) in enumerate(zip(ins, p["in_blocks"], eqn.inputs, strict=True))]
        refs += [_global_ref(r, nm, bk, a.dtype, pids)
                 for nm, bk, a in zip(outs, p["out_blocks"], p["out_avals"], strict=True)]
        refs += [_Ref("local", nm, s.dtype, tuple(s.shape)) for nm, s in zip(scratch_names, p["scratch"], strict=True)]
        pid_vals = [_Lazy((), np.dtype(np.int32), lambda idx, x=x: x) for x in pids]
        r.run(p["body"].program, pid_vals + refs)
    if not seq:
        body(pids)
        return
    with b.loop(_i(0), _i(math.prod(n for _, n in seq)), hint="step") as step:
        steps = _pids(b, step, [n for _, n in seq])
        body({**pids, **dict(zip((a for a, _ in seq), steps, strict=True))})
        r.barrier("global")


def _hoist_local_arrays(kernel):
    """The kernel with its arrays declared first: OpenCL C wants work-group arrays at the kernel's scope, and
    PoCL miscompiled private arrays declared inside a loop with barriers (a flash-attention kernel's carries
    came out inf)."""
    decls = []

    def hoisted(s):
        if isinstance(s, ArrayDecl):
            decls.append(s)
            return True
        return False
    body = without(kernel.body, hoisted)
    return dataclasses.replace(kernel, body=tuple(decls) + body)


def hoisted_kernel(b, local_size, pocl_regions=False):
    """The kernel that ``render`` built into ``b``, its arrays declared first (``_hoist_local_arrays``) and
    the barriers that order nothing removed (``barriers.prune_barriers``: between regions that touch no array
    in conflicting ways; ``_trim_barriers``: repeated ones and the last); ``pocl_regions``: a CPU OpenCL device
    (``Capabilities.uniform_guard``), where ``_branch_then_loop`` keeps some."""
    kernel = _hoist_local_arrays(b.build(local_size))
    keep = _branch_then_loop if pocl_regions else None
    return dataclasses.replace(kernel, body=_trim_barriers(prune_barriers(kernel.body, keep=keep), True))


def _branch_then_loop(before, after):
    """Whether a barrier between the statements ``before`` and ``after`` stays on a CPU OpenCL device although it
    orders nothing: PoCL 3.0 and 3.1 miscompiled a region holding a work-item branch and a loop after it
    (``_Renderer.par_for``)."""
    def has(stmts, kind):
        return any(isinstance(s, kind) for s in stmts)
    return has(before, If) and has(after, For) or has(before, For) and has(after, If) or \
        has(before, If) and has(after, If) and has(before + after, For)


def _stronger(a, b):
    return Barrier("global" if "global" in (a.space, b.space) else "local")


def _trim_barriers(stmts, tail):
    """The statements with the barriers that order nothing removed: one right after another (the stronger
    kept), one at the end of an ``If`` branch that a barrier right after the ``If`` repeats, and (``tail``: at
    the end of the kernel) the last ones, after which no work item reads anything."""
    out = []
    for s in stmts:
        if isinstance(s, For):
            s = dataclasses.replace(s, body=_trim_barriers(s.body, False))
        elif isinstance(s, If):
            s = dataclasses.replace(s, then=_trim_barriers(s.then, False), orelse=_trim_barriers(s.orelse, False))
        if isinstance(s, Barrier) and out and isinstance(out[-1], Barrier):
            out[-1] = _stronger(out[-1], s)
            continue
        if isinstance(s, Barrier) and out and isinstance(out[-1], If):
            prev = out[-1]
            out[-1] = dataclasses.replace(prev, then=_drop_last_barrier(prev.then, s),
                                          orelse=_drop_last_barrier(prev.orelse, s))
        out.append(s)
    if tail:
        while out and isinstance(out[-1], Barrier):
            out.pop()
        if out and isinstance(out[-1], If):
            out[-1] = dataclasses.replace(out[-1], then=_trim_barriers(out[-1].then, True),
                                          orelse=_trim_barriers(out[-1].orelse, True))
    return tuple(out)


def _drop_last_barrier(stmts, after):
    """``stmts`` (an ``If`` branch followed by the barrier ``after``) without a last barrier ``after`` covers."""
    if stmts and isinstance(stmts[-1], Barrier) and _stronger(stmts[-1], after) == after:
        return stmts[:-1]
    return stmts


class PallasGroup(EquationGroup):
    """One ``pallas_call`` equation: a copy launch per aliased output, a zero fill per other output the kernel
    may not write all of (``stores_everything``), then the kernel."""

    kind = "pallas"

    def codegen(self):
        default = {"workgroup": default_workgroup(self.eqn, self.ctx.caps, self._vectors_allowed()), "rows": False,
                   "stage": False, "tile": _DOT_TILE, "row_tile": 1}
        n_rows = row_count(self.eqn, self.ctx.caps)
        cp = dict(self.eqn.params["compiler_params"])
        if n_rows is not None and (cp.get("rows") is True
                                   or _rows_by_default(self.ctx.caps, self.eqn.params["body"].program)):
            per = int(cp["row_tile"]) if "row_tile" in cp else _row_tile_default(self.eqn, self.ctx.opts)
            per = per if per >= 1 and n_rows % per == 0 else 1
            default = {"workgroup": n_rows // per, "rows": True, "stage": False, "tile": _DOT_TILE, "row_tile": per}
        if "stage" in cp:
            default["stage"] = bool(cp["stage"])
        if "tile" in cp:
            default["tile"] = int(cp["tile"])
        if any(k in cp for k in ("workgroup", "rows", "stage", "tile", "row_tile")):
            return self._variant(default)
        has_dot = any(q.primitive is P.dot_general for q in walk_body(self.eqn.params["body"].program))
        return self.ctx.tuned(PALLAS_TUNABLE, default, self._variant, {"rows": n_rows or 0, "dot": int(has_dot)})

    def _variant(self, choice):
        ctx, e = self.ctx, self.eqn
        launches = []
        aliased = {}
        for i, o in e.params["aliases"]:
            aliased[o] = i
            launches.append(self._copy(e.inputs[i], e.outputs[o]))
        for k, v in enumerate(e.outputs):  # results the kernel may not write all of start as zeros
            if k not in aliased and v.aval.size and not stores_everything(e.params, k):
                launches.append(self._zeros(v))
        tracker = Tracker(ctx)
        tracker.add(e)
        args: dict = {}

        def names(b):
            ins = []
            for a in e.inputs:
                spec = ctx.spec(a)
                nm = b.buffer(spec, a.aval.dtype, False, "in")
                args[nm] = spec
                ins.append(nm)
            return ins, [ctx.output(b, args, v) for v in e.outputs]

        def vectors(b, k):
            return vec4_binding(b, args, ctx.spec(e.inputs[k]), e.inputs[k].aval.dtype)

        vec = self._vectors_allowed()
        b, gsize, lsize = render(e, ctx.caps, names, choice["workgroup"], choice.get("rows", False),
                                 choice.get("stage", False), vectors if vec else None, choice.get("tile", _DOT_TILE),
                                 choice.get("row_tile", 1), int(ctx.opts.get("dot_subgroup", 0) or 0) if vec else 0,
                                 vec and bool(ctx.opts.get("pallas_lane_maps", False)))
        kernel = hoisted_kernel(b, lsize, bool(getattr(ctx.caps, "uniform_guard", False)))
        vals = [args[pp.name] for pp in kernel.params]
        if not _vectors_unwritten(kernel, vals):   # WebGPU refuses a buffer bound read-only and writable at once
            args.clear()
            b, gsize, lsize = render(e, ctx.caps, names, choice["workgroup"], choice.get("rows", False),
                                     choice.get("stage", False), tile=choice.get("tile", _DOT_TILE),
                                     row_tile=choice.get("row_tile", 1))
            kernel = hoisted_kernel(b, lsize, bool(getattr(ctx.caps, "uniform_guard", False)))
            vals = [args[pp.name] for pp in kernel.params]
        launches.append(Launch(kernel, vals, gsize, lsize, tracker.eqns, "pallas"))
        return launches

    def _vectors_allowed(self):
        """Whether the kernel may bind its inputs a second time as vectors (``render(vectors=)``): the scheduler
        option ``dot_vec4`` (webgpu on a CPU adapter, as ``groups/dot.py``), with room for two more bindings
        within the target's buffers per kernel (``_Renderer.vector_room`` counts them as they are made)."""
        limit = self.ctx.caps.max_buffers_per_kernel
        n = len(self.eqn.inputs) + len(self.eqn.outputs) + 2
        opts = self.ctx.opts
        return bool(opts.get("dot_vec4", False) or opts.get("lane_vec4", False)) and (limit is None or n <= limit)

    def _zeros(self, dst):
        """A launch storing zeros into all of ``dst`` (a result ``stores_everything`` cannot vouch for)."""
        ctx = self.ctx
        b = KernelBuilder("pallas_zero_fill")
        args: dict = {}
        out = ctx.output(b, args, dst)
        n = dst.aval.size
        gid, gsize, lsize = ctx.gid(b, n, ctx.wg)
        with b.when(op("lt", gid, _i(n))):
            b.store(out, gid, const(0, dst.aval.dtype))
        kernel = b.build()
        return Launch(kernel, [args[pp.name] for pp in kernel.params], gsize, lsize, [self.eqn], "fill")

    def _copy(self, src, dst):
        ctx = self.ctx
        b = KernelBuilder("pallas_alias_copy")
        args: dict = {}
        spec = ctx.spec(src)
        nm = b.buffer(spec, src.aval.dtype, False, "in")
        args[nm] = spec
        out = ctx.output(b, args, dst)
        n = src.aval.size
        gid, gsize, lsize = ctx.gid(b, n, ctx.wg)
        with b.when(op("lt", gid, _i(n))):
            b.store(out, gid, b.load(nm, gid, src.aval.dtype))
        kernel = b.build()
        return Launch(kernel, [args[pp.name] for pp in kernel.params], gsize, lsize, [self.eqn], "copy")


def _vectors_unwritten(kernel, vals):
    """Whether no buffer that ``kernel`` binds as vectors is one it also writes (the values ``vals`` of its
    parameters compared by identity, as ``groups/base.py``'s ``vectors_fit``)."""
    bufs = [(pp, a) for pp, a in zip(kernel.params, vals, strict=True) if isinstance(pp, BufferParam)]
    written = {id(a) for pp, a in bufs if pp.writes}
    return not any(id(a) in written for pp, a in bufs if np.dtype(pp.dtype).subdtype is not None)


#: (kernel body, blocks, compiler parameters, capabilities) -> why it cannot run there, or "" (it renders): each
#: key holds its body's program alive, so at most ``config.kernel_cache_size`` (as the built kernels per device).
_REASONS = LRUCache(lambda: config.kernel_cache_size)


def unsupported_reason(eqn, caps):
    """Why this ``pallas_call`` equation cannot run as a kernel on a device with ``caps`` (``interpret=True``, an
    operation the kernel IR cannot express, blocks past the work-group memory budget, a literal operand), or
    ``None``. Renders the kernel once per (body, device capabilities) to find out."""
    if eqn.params["interpret"]:
        return "interpret=True: the kernel runs in fnarray's interpreter (the numpy reference)"
    if any(isinstance(a, Literal) for a in eqn.inputs):
        return "pallas_call of a literal operand (an array of it is needed)"
    key = (eqn.params["body"], eqn.params["in_blocks"], eqn.params["out_blocks"], eqn.params["compiler_params"],
           caps.max_workgroup_size, caps.max_dispatch, getattr(caps, "local_memory_bytes", None), caps.tiling_pays,
           getattr(caps, "matmul_tiling", None),
           tuple(sorted(d.name for d in caps.dtypes)))
    reason = _REASONS.get(key)
    if reason is None:
        try:
            def names(b):
                return ([b.buffer(("in", k), a.aval.dtype, False, "in") for k, a in enumerate(eqn.inputs)],
                        [b.buffer(("out", k), a.dtype, True, "out") for k, a in enumerate(eqn.params["out_avals"])])
            render(eqn, caps, names)
            reason = ""
        except Unrenderable as ex:
            reason = str(ex) or type(ex).__name__
        reason = _REASONS.put(key, reason)
    return reason or None


def _operand_buffer(ctx, a):
    from fnarray.lowering.kernels.groups.base import contiguous_strides
    return (a, 0, contiguous_strides(a.aval.shape)) if isinstance(a, Var) else None


#: What ``schedule`` adds to its tables ``_GROUPS`` and ``OPERAND_VIEWS``.
GROUPS = {pallas_call_p: PallasGroup}
OPERAND_VIEWS = {pallas_call_p: _operand_buffer}
