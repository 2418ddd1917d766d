"""``pallas_call`` as a kernel: a user's Pallas kernel body rendered into fnarray's kernel IR.

One work-group runs one program instance of the grid (instance ``group_id``; past the device's dispatch limit
each work-group walks several instances). The traced body (``fnarray.core.pallas``) is rendered statement by
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
last block writes only its real elements), followed by a barrier; a stored value that reads the ref it is
written to is first computed into each work item's private array (the same elements, the same items), so that
no item overwrites what another still reads. ``fori_loop`` is a counted ``For`` loop around its body (carries in
work-group memory, updated through private arrays); ``pl.when`` an ``If``. Conditions and loop bounds must be
the same across the work-group (grid indices, loop counters, constants), as on every Pallas target.

What does not render (atomics, sorts, gathers, control flow other than ``fori_loop``/``when``, blocks past the
work-group memory budget) makes ``unsupported_reason`` say so: the backend runs the equation in the
interpreter instead, with a ``FallbackWarning`` naming the reason.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from fnarray.core import primitives as P
from fnarray.core.ir import Literal, Var
from fnarray.core.pallas import pallas_atomic_p, pallas_call_p, pallas_load_p, pallas_loop_p, pallas_store_p, \
    pallas_when_p
from fnarray.lowering.kernels.builder import KernelBuilder
from fnarray.lowering.kernels.groups.base import Launch, Group, Tracker
from fnarray.lowering.kernels.ir import INT32, ArrayDecl, Barrier, Const, For, If, Load, Special, const
from fnarray.lowering.kernels.rules import ELEMENTWISE, add_of, convert, highest, lowest, max_of, min_of, mul_of, op, \
    select

__all__ = ["PallasGroup", "GROUPS", "OPERAND_VIEWS", "unsupported_reason", "LOCAL_BYTES", "workgroup_size",
           "Unrenderable", "render", "hoisted_kernel"]

#: Work-group memory one kernel may use (WebGPU's guaranteed ``maxComputeWorkgroupStorageSize``, which the
#: browsers give; OpenCL devices have at least 32 KiB but the same budget keeps one kernel valid everywhere).
LOCAL_BYTES = 16384
_MAX_WG = 256


class Unrenderable(Exception):
    """A kernel body the kernel IR cannot express (the reason is the message)."""


def workgroup_size(caps, params, largest):
    """Work items per program instance: ``compiler_params["workgroup"]`` or the power of two covering the largest
    block (32 to 256), within the device's limit."""
    cp = dict(params.get("compiler_params", ()))
    cap = min(_MAX_WG, caps.max_workgroup_size or _MAX_WG)
    if "workgroup" in cp:
        wg = int(cp["workgroup"])
        if wg < 1 or wg > cap:
            raise Unrenderable(f"compiler_params workgroup={wg} is outside 1..{cap} on this device")
        return wg
    wg = 32
    while wg < largest and wg < cap:
        wg *= 2
    return min(wg, cap)


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
    e = _i(0)
    for x, s in zip(idx, _strides(shape), strict=True):
        e = op("add", e, op("mul", x, _i(s)))
    return e


def _unravel(flat, shape):
    out = []
    for d, (n, s) in enumerate(zip(shape, _strides(shape), strict=True)):
        if n == 1:
            out.append(_i(0))
            continue
        e = flat if s == 1 else op("div", flat, _i(s))
        if d > 0:
            e = op("rem", e, _i(n))
        out.append(e)
    return tuple(out)


@dataclasses.dataclass
class _Lazy:
    """A value computed inline at each element: ``at(idx) -> Expr``; ``reads``: the refs it reads."""

    shape: tuple
    dtype: np.dtype
    at: object
    reads: frozenset = frozenset()
    aligned: dict = dataclasses.field(default_factory=dict)   # ref -> the block it reads only at the own element


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
        return _linear(g, self.array_shape)

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
        self.local_bytes = 0
        self.barriers = 0

    # -------------------------------------------------------------- memory
    def local_array(self, dtype, size, hint):
        self.local_bytes += np.dtype(dtype).itemsize * max(size, 1)
        if self.local_bytes > LOCAL_BYTES:
            raise Unrenderable(f"the kernel's blocks in work-group memory (dot operands and results, reductions, "
                               f"loop carries, scratch) need more than {LOCAL_BYTES} bytes; use smaller blocks")
        name = self.b.fresh(hint)
        self.b.emit(ArrayDecl("local", name, np.dtype(dtype), max(size, 1)))
        return name

    def par_for(self, shape, fn):
        """``fn(idx, slot)`` for every element of ``shape``, the work items taking them ``wg`` apart."""
        n = math.prod(shape)
        if n == 0:
            return
        slots = -(-n // self.wg)
        with self.b.loop(_i(0), _i(slots), hint="s") as s:
            e = self.b.let(op("add", op("mul", s, _i(self.wg)), self.lid), "e")
            # Guarded even where the work items divide the block evenly: PoCL 3.0 miscompiled a flash-attention
            # kernel (a row sum came out 8.1 off) whose 256-element phase had no guard; with it, exact.
            with self.b.when(op("lt", e, _i(n))):
                idx = tuple(self.b.let(x, "ix") if not isinstance(x, Const) else x for x in _unravel(e, shape))
                fn(idx, s)

    def barrier(self, space="local"):
        self.b.emit(Barrier(space))
        self.barriers += 1

    def materialize(self, v, hint="blk"):
        """``v`` in work-group memory (a parallel phase and a barrier)."""
        if isinstance(v, _Lazy) and getattr(v, "local", None) is not None:
            return v
        n = math.prod(v.shape)
        name = self.local_array(v.dtype, n, hint)
        shape = v.shape
        self.par_for(shape, lambda idx, s: self.b.store(name, _linear(idx, shape), v.at(idx), space="local"))
        self.barrier()
        return self.local_value(name, shape, v.dtype)

    def local_value(self, name, shape, dtype):
        b = self.b

        def at(idx):
            return b.let(Load("local", name, _linear(idx, shape), dtype), "lv")
        lz = _Lazy(tuple(shape), np.dtype(dtype), at)
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
                                       f"reductions, dot, loads, stores, fori_loop and pl.when)")
            else:
                outs = rule(self, e, vals)
                if not e.primitive.multiple_results:
                    outs = [outs]
            for v, o in zip(e.outputs, outs, strict=True):
                env[v] = o
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

        def at(idx):
            xs = [v.at(idx if v.shape else ()) for v in vals]
            return b.let(rule(b, xs, params, in_avals, out_aval), "x")
        return _Lazy(tuple(shape), np.dtype(dtype), at, frozenset().union(*(v.reads for v in vals)),
                     _aligned(vals, tuple(shape)))


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
    xs = x.shape

    def at(idx):
        return x.at(tuple(idx[d] if xs[k] != 1 else _i(0) for k, d in enumerate(bd)))
    return _Lazy(tuple(shape), x.dtype, at, x.reads)


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
    groups = _axis_groups(tuple(x.shape), shape) if x.shape and shape and 0 not in shape else None

    def at(idx):
        if not x.shape:
            return x.at(())
        if groups is None:
            return x.at(_unravel(_linear(idx, shape), x.shape))
        src = [None] * len(x.shape)
        for oi, nj in groups:
            flat = _linear([idx[j] for j in nj], [shape[j] for j in nj])
            for a, v in zip(oi, _unravel(flat, [x.shape[a] for a in oi]), strict=True):
                src[a] = v
        return x.at(tuple(src))
    return _Lazy(shape, x.dtype, at, x.reads)


def _transpose(r, e, vals):
    x = vals[0]
    perm = e.params["permutation"]
    shape = tuple(x.shape[p] for p in perm)

    def at(idx):
        src = [None] * len(perm)
        for k, p in enumerate(perm):
            src[p] = idx[k]
        return x.at(tuple(src))
    return _Lazy(shape, x.dtype, at, x.reads)


def _iota(r, e, vals):
    d, dim = e.params["dtype"], e.params["dimension"]
    shape = tuple(e.params["shape"])
    return _Lazy(shape, np.dtype(d), lambda idx: convert(r.b, idx[dim], np.dtype(d)))


def _slice(r, e, vals):
    x = vals[0]
    lo, strides = e.params["start_indices"], e.params["strides"] or (1,) * len(x.shape)
    shape = e.outputs[0].aval.shape

    def at(idx):
        return x.at(tuple(op("add", op("mul", i, _i(s)), _i(a)) for i, a, s in zip(idx, lo, strides, strict=True)))
    return _Lazy(tuple(shape), x.dtype, at, x.reads)


def _rev(r, e, vals):
    x = vals[0]
    dims = set(e.params["dimensions"])

    def at(idx):
        return x.at(tuple(op("sub", _i(n - 1), i) if d in dims else i
                          for d, (i, n) in enumerate(zip(idx, x.shape, strict=True))))
    return _Lazy(x.shape, x.dtype, at, x.reads)


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
    name = r.local_array(d, n_out, "red")
    lanes = 1
    while n_out * lanes * 2 <= r.wg and lanes * 2 <= n_red // 8:
        lanes *= 2

    def partial(idx, start, step):
        acc = b.var(acc_d, _identity_of(kind, acc_d), "acc")
        with b.loop(start, _i(n_red), step, hint="k") as k:
            ridx = _unravel(k, red_shape)
            full = [None] * len(x.shape)
            for dd, i in zip(keep, idx, strict=True):
                full[dd] = i
            for dd, i in zip(axes, ridx, strict=True):
                full[dd] = i
            v = x.at(tuple(full))
            b.assign(acc, _combine(b, kind, acc, convert(b, v, acc_d) if acc_d != d else v))
        return acc

    if lanes == 1:
        r.par_for(out_shape, lambda idx, slot: b.store(
            name, _linear(idx, out_shape), _narrow(b, partial(idx, _i(0), _i(1)), d), space="local"))
    else:
        parts = r.local_array(acc_d, n_out * lanes, "part")

        def lane_sum(idx, slot):
            flat = _linear(idx, (n_out, lanes))
            o = b.let(idx[0], "ro")
            b.store(parts, flat, partial(_unravel(o, out_shape), idx[1], _i(lanes)), space="local")
        r.par_for((n_out, lanes), lane_sum)
        r.barrier()

        def combine(idx, slot):
            base = b.let(op("mul", _linear(idx, out_shape), _i(lanes)), "pb")
            acc = b.var(acc_d, _identity_of(kind, acc_d), "acc")
            with b.loop(_i(0), _i(lanes), hint="l") as ln:
                b.assign(acc, _combine(b, kind, acc, b.let(Load("local", parts, op("add", base, ln), acc_d), "pv")))
            b.store(name, _linear(idx, out_shape), _narrow(b, acc, d), space="local")
        r.par_for(out_shape, combine)
    r.barrier()
    return r.local_value(name, out_shape, d)


def _narrow(b, acc, d):
    return convert(b, acc, d) if acc.dtype != d else acc


def _dot(r, e, vals):
    x, y = vals
    (lc, rc), (lb, rb) = e.params["dimension_numbers"]
    out = e.outputs[0].aval
    d = np.dtype(out.dtype)
    acc_d = _acc_dtype(d)
    b = r.b
    # The operands are staged in work-group memory once (each element is read by many work items).
    xs = x if getattr(x, "local", None) is not None or not r.stage_dots else r.materialize(x, "ta")
    ys = y if getattr(y, "local", None) is not None or not r.stage_dots else r.materialize(y, "tb")
    lfree = [k for k in range(len(x.shape)) if k not in lc and k not in lb]
    rfree = [k for k in range(len(y.shape)) if k not in rc and k not in rb]
    kshape = tuple(x.shape[k] for k in lc)
    name = r.local_array(d, math.prod(out.shape), "dot")
    nb = len(lb)

    def body(idx, slot):
        bidx, li, ri = idx[:nb], idx[nb:nb + len(lfree)], idx[nb + len(lfree):]
        acc = b.var(acc_d, const(0, acc_d), "acc")
        with b.loop(_i(0), _i(math.prod(kshape)), hint="k") as k:
            kidx = _unravel(k, kshape)
            xi, yi = [None] * len(x.shape), [None] * len(y.shape)
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
            a = convert(b, xs.at(tuple(xi)), acc_d)
            c = convert(b, ys.at(tuple(yi)), acc_d)
            b.assign(acc, op("add", acc, op("mul", a, c)))
        b.store(name, _linear(idx, out.shape), convert(b, acc, d) if acc_d != d else acc, space="local")

    r.par_for(tuple(out.shape), body)
    r.barrier()
    return r.local_value(name, tuple(out.shape), d)


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

    def at(idx):
        ri = [b.let(x, "ri") if not isinstance(x, Const) else x for x in _ref_index(ref, indexer, starts, idx)]
        v = b.let(Load(ref.space, ref.name, b.let(ref.address(ri, masked), "ad"), ref.dtype), "ld")
        if not masked:
            return v
        m = _at(mask, idx)
        fill = _at(other, idx) if other is not None else const(0, ref.dtype)
        return b.let(select(op("land", m, ref.inside(ri)), v, fill), "mv")
    reads = frozenset([ref.name]) | (mask.reads if masked else frozenset()) | (
        other.reads if other is not None else frozenset())
    return _Lazy(shape, ref.dtype, at, reads, {ref.name: _block_key(indexer, starts)})


def _block_key(indexer, starts):
    return (indexer, tuple(_scalar(s) for s in starts))


def _store(r, e, vals):
    ref, value, rest = vals[0], vals[1], vals[2:]
    p = e.params
    indexer = p["indexer"]
    starts, (mask,) = _split(rest, len(indexer), (p["masked"],))
    shape = tuple(e.inputs[1].aval.shape)
    b = r.b
    n = math.prod(shape)
    staged = None
    key = _block_key(indexer, starts)
    if any(ref.name in v.reads and v.aligned.get(ref.name) != key for v in (value, mask) if v is not None):
        # The value reads the ref it overwrites: each work item first computes its elements into a private
        # array (the same elements it then stores), so no item writes what another still reads.
        slots = -(-n // r.wg)
        vname = b.array("private", value.dtype, max(slots, 1), "pv")
        mname = b.array("private", np.dtype(np.bool_), max(slots, 1), "pm") if mask is not None else None

        def stage(idx, slot):
            b.store(vname, slot, _at(value, idx), space="private")
            if mname is not None:
                b.store(mname, slot, _at(mask, idx), space="private")
        r.par_for(shape, stage)
        r.barrier("global" if ref.space == "global" else "local")   # every read done before any write
        staged = (vname, mname)

    def write(idx, slot):
        ri = [b.let(x, "ri") if not isinstance(x, Const) else x for x in _ref_index(ref, indexer, starts, idx)]
        if staged is not None:
            v = b.let(Load("private", staged[0], slot, value.dtype), "sv")
            m = b.let(Load("private", staged[1], slot, np.dtype(np.bool_)), "sm") if staged[1] else None
        else:
            v = _at(value, idx)
            m = _at(mask, idx) if mask is not None else None
        cond = None
        if m is not None or ref.padded or ref.space == "global" and _may_leave(ref, indexer):
            cond = ref.inside(ri)
            if m is not None:
                cond = op("land", m, cond)
        addr = ref.address(ri, m is not None)
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
    homes = []
    for c in carry:
        if isinstance(c, _Ref):
            homes.append(c)
        else:
            name = r.local_array(c.dtype, math.prod(c.shape), "carry")
            shape = c.shape
            r.par_for(shape, lambda idx, s, c=c, name=name, shape=shape:
                      b.store(name, _linear(idx, shape), c.at(idx if shape else ()), space="local"))
            homes.append(r.local_value(name, shape, c.dtype))
    r.barrier()
    with b.loop(_scalar(lo), _scalar(hi), hint="it") as i:
        iv = _Lazy((), np.dtype(np.int32), lambda idx, i=i: i)
        outs = r.run(body, [iv] + consts + homes)
        staged = []
        for h, o in zip(homes, outs, strict=True):
            if isinstance(h, _Ref):
                continue
            if getattr(o, "local", None) == h.local:
                continue
            n = math.prod(h.shape)
            pv = b.array("private", h.dtype, max(-(-n // r.wg), 1), "pc")
            r.par_for(h.shape, lambda idx, s, o=o, pv=pv, h=h:
                      b.store(pv, s, o.at(idx if h.shape else ()), space="private"))
            staged.append((h, pv))
        if staged:
            r.barrier()
            for h, pv in staged:
                r.par_for(h.shape, lambda idx, s, h=h, pv=pv:
                          b.store(h.local, _linear(idx, h.shape), b.let(Load("private", pv, s, h.dtype), "pc"),
                                  space="local"))
            r.barrier()
    return homes


def _when(r, e, vals):
    pred, ops = vals[0], vals[1:]
    nc = e.params["num_consts"]
    with r.b.when(r.b.let(_scalar(pred), "pred")):
        r.run(e.params["body"], list(ops))
    r.barrier("global")
    return list(ops[nc:])


def _atomic(r, e, vals):
    raise Unrenderable("atomic_add/max/min are not rendered by the opencl/webgpu kernels yet (the kernel IR has no "
                       "atomics); the equation runs in the interpreter")


_RULES = {P.broadcast_in_dim: _broadcast, P.reshape: _reshape, P.transpose: _transpose, P.iota: _iota,
          P.slice_p: _slice, P.rev: _rev, P.copy_p: _identity, P.stop_gradient: _identity, P.name_p: _identity,
          P.dot_general: _dot, pallas_load_p: _load, pallas_store_p: _store, pallas_loop_p: _loop,
          pallas_when_p: _when, pallas_atomic_p: _atomic}
for _p in _REDUCE:
    _RULES[_p] = _reduce


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


def _global_ref(r, name, block, dtype, pids):
    offs = _index_map_offsets(r, block, pids)
    axes = tuple(a for a, n in enumerate(block.block_shape) if n is not None)
    return _Ref("global", name, np.dtype(dtype), block.ref_shape, tuple(block.shape), tuple(offs), axes, block.padded)


def render(eqn, caps, buffer_names):
    """The kernel of one ``pallas_call`` equation: ``(builder, global size, local size)``; ``buffer_names(b)``
    gives ``(input names, output names)``. Raises ``Unrenderable``."""
    p = eqn.params
    grid = tuple(p["grid"])
    total = math.prod(grid)
    blocks = list(p["in_blocks"]) + list(p["out_blocks"])
    largest = max([math.prod(bk.ref_shape) for bk in blocks] + [math.prod(s.shape) for s in p["scratch"]] + [1])
    wg = workgroup_size(caps, p, largest)
    b = KernelBuilder("pallas_" + "".join(c if c.isalnum() else "_" for c in p["name"])[:40])
    ins, outs = buffer_names(b)
    lid = b.let(Special("local_id", 0), "lid")
    r = _Renderer(b, wg, lid, caps)
    scratch_names = [r.local_array(s.dtype, math.prod(s.shape), "scr") for s in p["scratch"]]
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
        pids = [b.let(x, "pid") if not isinstance(x, Const) else x for x in _unravel(inst, grid)] if grid else []
        refs = [_global_ref(r, nm, bk, a.aval.dtype, pids)
                for nm, bk, a in zip(ins, p["in_blocks"], eqn.inputs, strict=True)]
        refs += [_global_ref(r, nm, bk, a.dtype, pids)
                 for nm, bk, a in zip(outs, p["out_blocks"], p["out_avals"], strict=True)]
        refs += [_Ref("local", nm, s.dtype, tuple(s.shape)) for nm, s in zip(scratch_names, p["scratch"], strict=True)]
        pid_vals = [_Lazy((), np.dtype(np.int32), lambda idx, x=x: x) for x in pids]
        r.run(p["body"].program, pid_vals + refs)
        if walk:
            r.barrier("global")
    return b, gsize, lsize


def _hoist_local_arrays(kernel):
    """The kernel with its arrays declared first: OpenCL C wants work-group arrays at the kernel's scope, and
    PoCL miscompiled private arrays declared inside a loop with barriers (a flash-attention kernel's carries
    came out inf)."""
    decls = []

    def strip(stmts):
        out = []
        for s in stmts:
            if isinstance(s, ArrayDecl):
                decls.append(s)
                continue
            if isinstance(s, For):
                s = dataclasses.replace(s, body=strip(s.body))
            elif isinstance(s, If):
                s = dataclasses.replace(s, then=strip(s.then), orelse=strip(s.orelse))
            out.append(s)
        return tuple(out)

    body = strip(kernel.body)
    return dataclasses.replace(kernel, body=tuple(decls) + body)


def hoisted_kernel(b, local_size):
    """The kernel that ``render`` built into ``b``, its arrays declared first (``_hoist_local_arrays``)."""
    return _hoist_local_arrays(b.build(local_size))


class PallasGroup(Group):
    """One ``pallas_call`` equation: a copy launch per aliased output, then the kernel."""

    kind = "pallas"

    def __init__(self, ctx, eqn):
        super().__init__(ctx, eqn.outputs[0].aval.shape if eqn.outputs else ())
        self.eqn = eqn
        self.products.extend(eqn.outputs)

    def analyse(self):
        self.reads |= {a for a in self.eqn.inputs if isinstance(a, Var)}

    def codegen(self):
        ctx, e = self.ctx, self.eqn
        launches = []
        for i, o in e.params["aliases"]:
            launches.append(self._copy(e.inputs[i], e.outputs[o]))
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

        b, gsize, lsize = render(e, ctx.caps, names)
        kernel = hoisted_kernel(b, lsize)
        vals = [args[pp.name] for pp in kernel.params]
        launches.append(Launch(kernel, vals, gsize, lsize, tracker.eqns, "pallas"))
        return launches

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


_REASONS: dict = {}


def unsupported_reason(eqn, caps):
    """Why this ``pallas_call`` equation cannot run as a kernel on a device with ``caps`` (``interpret=True``, an
    operation the kernel IR cannot express, blocks past the work-group memory budget, a literal operand), or
    ``None``. Renders the kernel once per (body, device capabilities) to find out."""
    if eqn.params["interpret"]:
        return "interpret=True: the kernel runs in fnarray's interpreter (the numpy reference)"
    if any(isinstance(a, Literal) for a in eqn.inputs):
        return "pallas_call of a literal operand (an array of it is needed)"
    key = (eqn.params["body"], eqn.params["in_blocks"], eqn.params["out_blocks"], eqn.params["compiler_params"],
           caps.max_workgroup_size, caps.max_dispatch, tuple(sorted(d.name for d in caps.dtypes)))
    if key not in _REASONS:
        try:
            def names(b):
                return ([b.buffer(("in", k), a.aval.dtype, False, "in") for k, a in enumerate(eqn.inputs)],
                        [b.buffer(("out", k), a.dtype, True, "out") for k, a in enumerate(eqn.params["out_avals"])])
            render(eqn, caps, names)
            _REASONS[key] = None
        except Unrenderable as ex:
            _REASONS[key] = str(ex)
    return _REASONS[key]


def _operand_buffer(ctx, a):
    from fnarray.lowering.kernels.groups.base import contiguous_strides
    return (a, 0, contiguous_strides(a.aval.shape)) if isinstance(a, Var) else None


#: What ``schedule`` adds to its tables ``_GROUPS`` and ``OPERAND_VIEWS``.
GROUPS = {pallas_call_p: PallasGroup}
OPERAND_VIEWS = {pallas_call_p: _operand_buffer}
