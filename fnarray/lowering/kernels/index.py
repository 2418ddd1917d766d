"""Index arithmetic for fused kernels: affine forms with bounds.

An ``Ix`` is ``const + sum(coef * term)`` over int32, where a term is an index
variable of known range (``IxVar``: ``0 <= v < size``), a floor division or
remainder of a non-negative ``Ix`` by a positive constant (``IxDiv``,
``IxMod``), or a data value of known bounds (``IxData``: a gathered or
dynamic-slice index after clamping). Knowing the bounds lets reshapes cancel:
``(i * 4 + j) // 4 == i`` and ``(i * 4 + j) % 4 == j`` when ``0 <= j < 4``, so
``reshape(reshape(x))`` reads ``x`` at the kernel's own index and the scheduler
can recognise an identity access. Forms are canonical (terms sorted), hashable
and compare structurally.
"""

from __future__ import annotations

from fnarray.lowering.kernels.ir import INT32, Expr, Op, Sym, const

__all__ = ["Ix", "IxVar", "IxDiv", "IxMod", "IxData", "ix_const", "ix_var", "ix_data", "linearize", "unravel",
           "to_expr"]


class _Term:
    """A term of an ``Ix``; ``_order`` (the ``repr`` of its ``_key``, made at its first sort) is where it sorts among
    a form's terms."""

    __slots__ = ()


def _term_order(item) -> str:
    t = item[0]
    order = t._order
    if order is None:
        order = t._order = repr(t._key)
    return order


class IxVar(_Term):
    __slots__ = ("name", "size", "_key", "_order")

    def __init__(self, name: str, size: int):
        self.name, self.size = name, size
        self._key = ("v", name, size)
        self._order = None

    def bounds(self):
        return 0, max(self.size - 1, 0)

    def __eq__(self, o):
        return isinstance(o, _Term) and self._key == o._key

    def __hash__(self):
        return hash(self._key)


class IxDiv(_Term):
    __slots__ = ("x", "k", "_key", "_order")

    def __init__(self, x: "Ix", k: int):
        self.x, self.k = x, k
        self._key = ("d", x._key, k)
        self._order = None

    def bounds(self):
        lo, hi = self.x.bounds()
        return lo // self.k, hi // self.k

    __eq__ = IxVar.__eq__
    __hash__ = IxVar.__hash__


class IxMod(_Term):
    __slots__ = ("x", "k", "_key", "_order")

    def __init__(self, x: "Ix", k: int):
        self.x, self.k = x, k
        self._key = ("m", x._key, k)
        self._order = None

    def bounds(self):
        return 0, self.k - 1

    __eq__ = IxVar.__eq__
    __hash__ = IxVar.__hash__


class IxData(_Term):
    __slots__ = ("expr", "lo", "hi", "_key", "_order")

    def __init__(self, expr: Expr, lo: int, hi: int):
        self.expr, self.lo, self.hi = expr, lo, hi
        self._key = ("x", repr(expr), lo, hi)
        self._order = None

    def bounds(self):
        return self.lo, self.hi

    __eq__ = IxVar.__eq__
    __hash__ = IxVar.__hash__


class Ix:
    """An affine integer form ``const + sum(coef * term)``."""

    __slots__ = ("terms", "const", "_key")

    def __init__(self, terms: dict, c: int):
        items = [(t, k) for t, k in terms.items() if k != 0]
        if len(items) > 1:
            items.sort(key=_term_order)
        items = tuple(items)
        self.terms, self.const = items, c
        self._key = (tuple((t._key, k) for t, k in items), c)

    def __eq__(self, o):
        return isinstance(o, Ix) and self._key == o._key

    def __hash__(self):
        return hash(self._key)

    def __repr__(self):
        return f"Ix({self._key})"

    def is_const(self) -> bool:
        return not self.terms

    def bounds(self):
        lo = hi = self.const
        for t, k in self.terms:
            a, b = t.bounds()
            lo += min(k * a, k * b)
            hi += max(k * a, k * b)
        return lo, hi

    def __add__(self, o):
        if isinstance(o, int):
            return Ix(dict(self.terms), self.const + o)
        d = dict(self.terms)
        for t, k in o.terms:
            d[t] = d.get(t, 0) + k
        return _fold_divmod(d, self.const + o.const)

    __radd__ = __add__

    def __mul__(self, c: int):
        return Ix({t: k * c for t, k in self.terms}, self.const * c)

    __rmul__ = __mul__

    def __neg__(self):
        return self * -1

    def __sub__(self, o):
        return self + (-o if isinstance(o, Ix) else -o)

    def __rsub__(self, o: int):
        return (-self) + o

    def __floordiv__(self, k: int):
        if k == 1:
            return self
        lo, _ = self.bounds()
        if lo < 0:
            raise ValueError("index division of a possibly negative form")
        q = {t: c // k for t, c in self.terms if c % k == 0}
        r = {t: c for t, c in self.terms if c % k != 0}
        qc, rc = divmod(self.const, k)
        rest = Ix(r, rc)
        rlo, rhi = rest.bounds()
        if rest.is_const() or (rlo >= 0 and rhi < k):
            return Ix(q, qc + (rest.const // k if rest.is_const() else 0))
        if rlo < 0:
            return Ix({IxDiv(self, k): 1}, 0)
        if len(rest.terms) == 1 and rest.const == 0 and isinstance(rest.terms[0][0], IxDiv) \
                and rest.terms[0][1] == 1:
            inner = rest.terms[0][0]
            return Ix(q, qc) + Ix({IxDiv(inner.x, inner.k * k): 1}, 0)
        return Ix(q, qc) + Ix({IxDiv(rest, k): 1}, 0)

    def __mod__(self, k: int):
        if k == 1:
            return Ix({}, 0)
        lo, hi = self.bounds()
        if lo >= 0 and hi < k:
            return self
        r = {t: c for t, c in self.terms if c % k != 0}
        rest = Ix(r, self.const % k)
        rlo, rhi = rest.bounds()
        if rlo >= 0 and rhi < k:
            return rest
        base = rest if rlo >= 0 else self
        if len(base.terms) == 1 and base.const == 0 and base.terms[0][1] == 1 \
                and isinstance(base.terms[0][0], IxMod) and base.terms[0][0].k % k == 0:
            return Ix({IxMod(base.terms[0][0].x, k): 1}, 0)
        return Ix({IxMod(base, k): 1}, 0)


def _fold_divmod(d: dict, c: int) -> Ix:
    """``c*k*(x // k) + c*(x % k)`` is ``c*x``: what linearising an unravelled index gives back."""
    changed = True
    while changed:
        changed = False
        for t, coef in list(d.items()):
            if not isinstance(t, IxMod) or coef == 0:
                continue
            partner = IxDiv(t.x, t.k)
            if d.get(partner, 0) == coef * t.k:
                del d[t], d[partner]
                for u, k in t.x.terms:
                    d[u] = d.get(u, 0) + k * coef
                c += t.x.const * coef
                changed = True
                break
    return Ix(d, c)


def ix_const(c: int) -> Ix:
    return Ix({}, int(c))


def ix_var(name: str, size: int) -> Ix:
    return Ix({IxVar(name, size): 1}, 0) if size > 1 else Ix({}, 0)


def ix_data(expr: Expr, lo: int, hi: int) -> Ix:
    """A data value ``expr`` (int32) known to lie in ``[lo, hi]``."""
    if lo == hi:
        return ix_const(lo)
    return Ix({IxData(expr, lo, hi): 1}, 0)


def _strides(shape):
    out, s = [], 1
    for n in reversed(shape):
        out.append(s)
        s *= n
    return out[::-1]


def linearize(idx, shape) -> Ix:
    """The row-major flat index of multi-index ``idx`` into ``shape``."""
    total = ix_const(0)
    for i, s, n in zip(idx, _strides(shape), shape, strict=True):
        if n > 1:
            total = total + i * s
    return total


def unravel(flat: Ix, shape) -> tuple:
    """The multi-index of row-major ``flat`` in ``shape`` (zeros for a zero-size shape, which has no
    element to address: the zero-size pass keeps such shapes out of kernels, this keeps the arithmetic
    total)."""
    if 0 in shape:
        return tuple(ix_const(0) for _ in shape)
    out = []
    for s, n in zip(_strides(shape), shape, strict=True):
        out.append(ix_const(0) if n == 1 else (flat // s) % n)
    return tuple(out)


def to_expr(ix: Ix) -> Expr:
    """The kernel-IR int32 expression of ``ix`` (an index variable is the int32 local of its name)."""
    acc = None
    for t, k in ix.terms:
        e = _term_expr(t)
        if k != 1:
            e = Op("mul", (e, const(k, INT32)), INT32)
        acc = e if acc is None else Op("add", (acc, e), INT32)
    if acc is None:
        return const(ix.const, INT32)
    if ix.const:
        acc = Op("add", (acc, const(ix.const, INT32)), INT32)
    return acc


def _term_expr(t):
    if isinstance(t, IxVar):
        return Sym(t.name, INT32)
    if isinstance(t, IxDiv):
        return Op("div", (to_expr(t.x), const(t.k, INT32)), INT32)
    if isinstance(t, IxMod):
        return Op("rem", (to_expr(t.x), const(t.k, INT32)), INT32)
    return t.expr
