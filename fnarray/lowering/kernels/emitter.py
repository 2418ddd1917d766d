"""``Emitter``: the value of an IR variable at an index, with its producers inlined.

Inside a kernel, ``emitter.val(var, idx)`` returns a kernel-IR expression for
element ``idx`` of ``var``. A variable held in a buffer (an input, or one the
scheduler materialises) is loaded; any other is computed from its producer's
inputs, recursively: elementwise ops apply their rule (``rules.ELEMENTWISE``)
at the same index, and the structural ops are index arithmetic
(``STRUCTURAL``): broadcasts, reshapes, transposes, reversals, slices, pads,
concatenations, dynamic slices and updates, iota and gathers change the index
at which their operand is read. That is how a chain of them fuses into one
kernel.

An index is either a tuple of ``Ix`` affine forms (one per dimension of the
variable) or a ``Flat`` linear index, which the scheduler tries first: a
kernel whose every access is "the same element" or "the only element" needs no
shape in its text, takes the element count as an argument, and so one
compiled kernel serves every shape. Rules that need the shape raise
``NotFlat`` and the scheduler retries with shaped indices.
"""

from __future__ import annotations

import contextlib
import dataclasses

from fnarray.core import primitives as P
from fnarray.core.ir import Literal
from fnarray.lowering.kernels.index import Ix, ix_const, ix_data, linearize, to_expr, unravel
from fnarray.lowering.kernels.ir import INT32, Cast, Expr, const
from fnarray.lowering.kernels.rules import ELEMENTWISE, convert, op, select
from fnarray.lowering.kernels.uniform_pieces import slice_steps

#: concatenations of pieces that are one chain at shifted slices as that chain, read once (``_concatenate_uniform``;
#: ``benchmarks/concat_pieces.py`` turns it off to time the forms before it)
UNIFORM_PIECES = True

__all__ = ["Emitter", "Flat", "NotFlat", "STRUCTURAL", "INJECTIVE", "zero_index", "shaped_index"]


class NotFlat(Exception):
    """A rule needs the shaped index; the kernel is rebuilt with one."""


@dataclasses.dataclass(frozen=True)
class Flat:
    """Element ``expr`` (an int32 kernel expression) of a variable, counted row-major."""

    expr: Expr


def zero_index(aval):
    return tuple(ix_const(0) for _ in aval.shape)


def shaped_index(shape, prefix="i"):
    """The index variables ``i0, i1, ...`` of an iteration over ``shape``."""
    from fnarray.lowering.kernels.index import ix_var
    return tuple(ix_var(f"{prefix}{d}", n) for d, n in enumerate(shape))


class Emitter:
    """Emits values of IR variables into a ``KernelBuilder``.

    ``buffer_of(var)`` gives the buffer a materialised variable lives in (or ``None``
    when it is computed inline); ``producer`` maps variables to their equations.
    ``on_read(var, key)`` is called for every buffer read (the scheduler's analysis),
    ``on_apply(eqn)`` for every equation inlined (the kernel listing).
    """

    def __init__(self, builder, producer, buffer_of, on_read=None, on_apply=None):
        self.b = builder
        self.producer = producer
        self.buffer_of = buffer_of
        self.on_read = on_read
        self.on_apply = on_apply
        self._memo: dict = {}
        #: a concatenation of more than two pieces as ``if`` branches, not a ``select`` per piece (the
        #: scheduler option ``concat_branches``)
        self.branches = False
        #: pieces that are one chain at shifted slices read through that chain (the scheduler option
        #: ``uniform_pieces``, on unless a backend turns it off)
        self.uniform = True
        #: per ``slice`` equation (by id) being evaluated as another piece of a concatenation, the index shift
        #: of its start (``_concatenate_uniform``), and that state as a key part (``()`` when none)
        self._shift: dict = {}
        self._variant = ()
        self._linears: dict = {}   # id of an index tuple -> (the tuple, a shape, its linear form): ``_linear``

    # ------------------------------------------------------------------ keys
    @staticmethod
    def key(aval, idx):
        """A canonical key of element ``idx`` of a variable (equal keys: the same element)."""
        if aval.size == 1:
            return "zero"
        if isinstance(idx, Flat):
            return ("flat", idx.expr)
        return linearize(idx, aval.shape)

    def seed(self, var, idx, value):
        """Declare that element ``idx`` of ``var`` is ``value`` in the current scope."""
        self._memo[(var, self.key(var.aval, idx))] = (value, self.b.scope_token())

    def seed_key(self, var, key, value):
        """``seed`` by the element's key (``key``), where the kernel knows the key and not an index."""
        self._memo[(var, key)] = (value, self.b.scope_token())

    def adopt(self, other):
        """Know what emitter ``other`` knows in its live scopes (a scratch emitter that analyses what
        ``other``'s builder would read next, ``groups/reduce.py``)."""
        token = self.b.scope_token()
        self._memo.update({k: (v, token) for k, (v, t) in other._memo.items() if other.b.scope_alive(t)})

    def known(self, var, idx):
        """The value seeded or computed for element ``idx`` of ``var`` in a live scope, else ``None``."""
        return self._lookup((var, self.key(var.aval, idx)))

    def _linear(self, idx, shape):
        """``linearize(idx, shape)``, once per index tuple object (a chain of elementwise operations passes its
        index down unchanged: each operand's key would linearize it again)."""
        if type(idx) is not tuple:   # (a list may change)
            return linearize(idx, shape)
        hit = self._linears.get(id(idx))
        if hit is not None and hit[0] is idx and hit[1] == shape:
            return hit[2]
        flat = linearize(idx, shape)
        self._linears[id(idx)] = (idx, shape, flat)   # (the tuple kept alive: its id is not reused meanwhile)
        return flat

    def _lookup(self, k):
        hit = self._memo.get(k)
        if hit is not None and self.b.scope_alive(hit[1]):
            return hit[0]
        return None

    # ------------------------------------------------------------------ values
    def val(self, a, idx):
        if isinstance(a, Literal):
            return const(a.val, a.aval.dtype)
        aval = a.aval
        if aval.size == 1:
            idx = zero_index(aval)
            key = "zero"
        elif isinstance(idx, Flat):
            key = ("flat", idx.expr)
        else:
            key = self._linear(idx, aval.shape)
        k = (a, key) + self._variant
        hit = self._lookup(k)
        if hit is not None:
            return hit
        buf = self.buffer_of(a)
        if buf is not None:
            if self.on_read is not None:
                self.on_read(a, key)
            if isinstance(idx, Flat):
                index = idx.expr
            else:
                index = const(0, INT32) if aval.size == 1 else to_expr(key)
            v = self.b.load(buf, index, aval.dtype)
        else:
            e = self.producer[a]
            if self.on_apply is not None:
                self.on_apply(e)
            v = self.b.let(self._apply(e, idx))
        self._memo[k] = (v, self.b.scope_token())
        return v

    def _apply(self, e, idx):
        prim = e.primitive
        rule = STRUCTURAL.get(prim)
        if rule is not None:
            return rule(self, e, idx)
        out = e.outputs[0].aval
        xs = []
        for a in e.inputs:
            xs.append(self.val(a, () if a.aval.ndim == 0 else idx))
        return ELEMENTWISE[prim](self.b, xs, e.params, [a.aval for a in e.inputs], out)

    # ------------------------------------------------------------------ helpers for rules
    @contextlib.contextmanager
    def shifted(self, shifts):
        """Evaluate with the starts of the ``slice`` equations keyed (by id) in ``shifts`` moved by those ``Ix``
        tuples, added to any shift already in force; values computed meanwhile are remembered apart."""
        saved = self._shift, self._variant
        merged = dict(self._shift)
        for i, sh in shifts.items():
            old = merged.get(i)
            merged[i] = sh if old is None else tuple(x + y for x, y in zip(old, sh, strict=True))
        self._shift = merged
        self._variant = (tuple(sorted(merged.items())),)
        try:
            yield
        finally:
            self._shift, self._variant = saved

    def index_expr(self, ix: Ix):
        return to_expr(ix)

    def clamp_index(self, value, lo: int, hi: int) -> Ix:
        """A data index (any integer dtype) clamped into ``[lo, hi]``, as an ``Ix``."""
        d = value.dtype
        v = value
        if lo == hi:
            return ix_const(lo)
        if not (d.kind == "u" and lo == 0):
            v = self.b.let(select(op("lt", v, const(lo, d)), const(lo, d), v))
        v = self.b.let(select(op("gt", v, const(hi, d)), const(hi, d), v))
        if d != INT32:
            v = self.b.let(Cast(v, INT32))
        return ix_data(v, lo, hi)


# ------------------------------------------------------------------------------------------ structural rules

STRUCTURAL: dict = {}


def _rule(prim):
    def deco(fn):
        STRUCTURAL[prim] = fn
        return fn
    return deco


@_rule(P.broadcast_in_dim)
def _broadcast(em, e, idx):
    x = e.inputs[0]
    out = e.outputs[0].aval
    if isinstance(idx, Flat):
        if x.aval.size == out.size:
            return em.val(x, idx)
        if x.aval.size == 1:
            return em.val(x, zero_index(x.aval))
        raise NotFlat
    bd = e.params["broadcast_dimensions"]
    in_idx = tuple(ix_const(0) if x.aval.shape[i] == 1 else idx[d] for i, d in enumerate(bd))
    return em.val(x, in_idx)


@_rule(P.reshape)
def _reshape(em, e, idx):
    x = e.inputs[0]
    if isinstance(idx, Flat):
        return em.val(x, idx)
    return em.val(x, unravel(linearize(idx, e.outputs[0].aval.shape), x.aval.shape))


@_rule(P.transpose)
def _transpose(em, e, idx):
    if isinstance(idx, Flat):
        raise NotFlat
    perm = e.params["permutation"]
    in_idx = [None] * len(perm)
    for j, p in enumerate(perm):
        in_idx[p] = idx[j]
    return em.val(e.inputs[0], tuple(in_idx))


@_rule(P.rev)
def _rev(em, e, idx):
    if isinstance(idx, Flat):
        raise NotFlat
    x = e.inputs[0]
    dims = set(e.params["dimensions"])
    in_idx = tuple((x.aval.shape[d] - 1) - i if d in dims else i for d, i in enumerate(idx))
    return em.val(x, in_idx)


@_rule(P.slice_p)
def _slice(em, e, idx):
    if isinstance(idx, Flat):
        raise NotFlat
    in_idx = tuple(i * st + s for i, s, st in zip(idx, e.params["start_indices"], e.params["strides"],
                                                    strict=True))
    shift = em._shift.get(id(e))
    if shift is not None:
        in_idx = tuple(i + d for i, d in zip(in_idx, shift, strict=True))
    return em.val(e.inputs[0], in_idx)


@_rule(P.iota)
def _iota(em, e, idx):
    out = e.outputs[0].aval
    dim = e.params["dimension"]
    if isinstance(idx, Flat):
        if out.ndim != 1:
            raise NotFlat
        i = idx.expr
    else:
        i = em.index_expr(idx[dim])
    return convert(em.b, i, out.dtype)


def _starts(em, e, first, sizes, shape):
    """The clamped start indices (``Ix``) of a dynamic slice or update."""
    out = []
    for a, k, n in zip(e.inputs[first:], sizes, shape, strict=True):
        out.append(em.clamp_index(em.val(a, ()), 0, n - k))
    return out


@_rule(P.dynamic_slice)
def _dynamic_slice(em, e, idx):
    if isinstance(idx, Flat):
        raise NotFlat
    x = e.inputs[0]
    starts = _starts(em, e, 1, e.params["slice_sizes"], x.aval.shape)
    return em.val(x, tuple(i + s for i, s in zip(idx, starts, strict=True)))


def _all(em, conds):
    acc = None
    for c in conds:
        acc = c if acc is None else em.b.let(op("land", acc, c))
    return acc


@_rule(P.dynamic_update_slice)
def _dynamic_update_slice(em, e, idx):
    if isinstance(idx, Flat):
        raise NotFlat
    x, u = e.inputs[0], e.inputs[1]
    starts = _starts(em, e, 2, u.aval.shape, x.aval.shape)
    inside, rel = [], []
    for i, s, k in zip(idx, starts, u.aval.shape, strict=True):
        r = em.b.let(em.index_expr(i - s))
        ok = em.b.let(op("land", op("ge", r, const(0, INT32)), op("lt", r, const(k, INT32))))
        inside.append(ok)
        rel.append(ix_data(em.b.let(select(ok, r, const(0, INT32))), 0, k - 1) if k > 1 else ix_const(0))
    if u.aval.size == 0:
        return em.val(x, idx)
    cond = _all(em, inside)
    return select(cond, em.val(u, tuple(rel)), em.val(x, idx))


@_rule(P.pad)
def _pad(em, e, idx):
    if isinstance(idx, Flat):
        raise NotFlat
    x, pv = e.inputs
    conds, in_idx = [], []
    for i, (lo, _hi, interior), n in zip(idx, e.params["padding_config"], x.aval.shape, strict=True):
        lo_b, hi_b = (i - lo).bounds()
        step = interior + 1
        if interior == 0 and lo_b >= 0 and hi_b <= n - 1:
            in_idx.append(i - lo)
            continue
        t = em.b.let(em.index_expr(i - lo))
        q = t if step == 1 else em.b.let(op("div", t, const(step, INT32)))
        ok = op("land", op("ge", t, const(0, INT32)), op("lt", q, const(n, INT32)))
        if step > 1:
            ok = op("land", ok, op("eq", op("rem", t, const(step, INT32)), const(0, INT32)))
        ok = em.b.let(ok)
        conds.append(ok)
        in_idx.append(ix_data(em.b.let(select(ok, q, const(0, INT32))), 0, n - 1) if n > 1 else ix_const(0))
    fill = em.val(pv, ())
    if x.aval.size == 0:
        return fill
    inner = em.val(x, tuple(in_idx))
    return select(_all(em, conds), inner, fill) if conds else inner


@_rule(P.concatenate)
def _concatenate(em, e, idx):
    if isinstance(idx, Flat):
        raise NotFlat
    dim = e.params["dimension"]
    pieces = [a for a in e.inputs if a.aval.shape[dim] > 0]
    offsets, o = [], 0
    for a in pieces:
        offsets.append(o)
        o += a.aval.shape[dim]
    if UNIFORM_PIECES and em.uniform and len(pieces) > 1 and len({a.aval for a in pieces}) == 1:
        steps = slice_steps(em, pieces)
        if steps is not None and idx[dim].bounds()[0] >= 0:
            return _concatenate_uniform(em, pieces[0], steps, idx, dim)
    i = em.b.let(em.index_expr(idx[dim]))

    def piece(a, off):
        n = a.aval.shape[dim]
        local = em.b.let(op("sub", i, const(off, INT32))) if off else i
        local = em.b.let(select(op("lt", local, const(0, INT32)), const(0, INT32), local))
        local = em.b.let(select(op("gt", local, const(n - 1, INT32)), const(n - 1, INT32), local))
        sub = tuple(ix_data(local, 0, n - 1) if d == dim and n > 1 else (ix_const(0) if d == dim else j)
                    for d, j in enumerate(idx))
        return em.val(a, sub)

    if em.branches and len(pieces) > 2:
        return _concatenate_branches(em, e, list(zip(pieces, offsets, strict=True)), i, piece)
    result = None
    for a, off in reversed(list(zip(pieces, offsets, strict=True))):
        v = piece(a, off)
        result = v if result is None else em.b.let(select(op("lt", i, const(off + a.aval.shape[dim], INT32)), v,
                                                          result))
    return result


def _concatenate_uniform(em, first, steps, idx, dim):
    """Pieces that are ``first``'s chain with slices started ``k * step`` further (``uniform_pieces``): element
    ``i`` along ``dim`` is element ``i % m`` of piece ``i // m``, read through ``first``'s chain with each moving
    slice shifted by ``(i // m) * step``: one chain and one load per element, whatever the number of pieces."""
    m = first.aval.shape[dim]
    k = idx[dim] // m
    sub = tuple(idx[dim] % m if d == dim else j for d, j in enumerate(idx))
    with em.shifted({i: tuple(k * s for s in step) for i, (_e, step) in steps.items()}):
        return em.val(first, sub)


def _concatenate_branches(em, e, parts, i, piece):
    """The concatenation as a binary tree of ``if``s on the position ``i`` along its axis (``Emitter.branches``):
    a work item evaluates one piece, where the ``select`` chain above evaluates every piece (an image grid of
    100 slices: 100 loads per element). Neighbouring work items mostly take the same branch."""
    b = em.b
    out = b.var(e.outputs[0].aval.dtype, const(0, e.outputs[0].aval.dtype), "cat")

    def tree(lo, hi):
        if hi - lo == 1:
            b.assign(out, piece(*parts[lo]))
            return
        mid = (lo + hi) // 2
        with b.when(op("lt", i, const(parts[mid][1], INT32))):
            tree(lo, mid)
        with b.otherwise():
            tree(mid, hi)
    tree(0, len(parts))
    return b.let(out)


@_rule(P.gather)
def _gather(em, e, idx):
    if isinstance(idx, Flat):
        raise NotFlat
    x, indices = e.inputs
    axes = e.params["axes"]
    out = e.outputs[0].aval
    if any(x.aval.shape[a] == 0 for a in axes):
        return const(0, out.dtype)
    nb = indices.aval.ndim - 1
    batch, rest = idx[:nb], list(idx[nb:])
    pos = {}
    for k, a in enumerate(axes):
        v = em.val(indices, tuple(batch) + (ix_const(k),))
        pos[a] = em.clamp_index(v, 0, x.aval.shape[a] - 1)
    in_idx = []
    for d in range(x.aval.ndim):
        in_idx.append(pos[d] if d in pos else rest.pop(0))
    return em.val(x, tuple(in_idx))


# The primitives computed per output element (fusable into any kernel as index arithmetic).
INJECTIVE = frozenset(ELEMENTWISE) | frozenset(STRUCTURAL)

