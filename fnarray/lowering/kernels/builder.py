"""``KernelBuilder``: collects the statements of one kernel, deduplicating values.

``b.let(expr)`` binds a value to a fresh immutable local (or returns the local
already bound to an equal expression in this or an enclosing scope), so a value
used twice is computed once. ``loop``/``when`` open nested scopes. Names are
numbered in creation order, so the same schedule always prints the same text.
"""

from __future__ import annotations

import contextlib

from fnarray.lowering.kernels.ir import (
    INT32,
    ArrayDecl,
    Assign,
    Atomic,
    Barrier,
    BufferParam,
    Comment,
    Const,
    Decl,
    For,
    If,
    Kernel,
    Let,
    Load,
    ScalarParam,
    Special,
    Store,
    Sym,
    children,
    walk_stmts,
)

__all__ = ["KernelBuilder"]


class KernelBuilder:
    def __init__(self, name: str):
        self.name = name
        self._scopes = [[]]
        self._memo = [{}]
        self._count = 0
        self.params: list = []
        self._param_names: dict = {}
        self._mutable: set = set()
        self._scope_ids = [0]
        self._next_scope = 1

    # ------------------------------------------------------------------ parameters
    def buffer(self, key, dtype, writes: bool, hint: str = "buf", uniform: int = 0, offset: int = -1) -> str:
        """The parameter name of buffer ``key`` (added on first use; ``uniform``, ``offset``: ``BufferParam``'s,
        read-only)."""
        name = self._param_names.get(("buf", key))
        if name is None:
            name = f"{hint}{sum(isinstance(p, BufferParam) for p in self.params)}"
            self._param_names[("buf", key)] = name
            self.params.append(BufferParam(name, dtype, writes, uniform, offset))
        elif writes:
            i = next(i for i, p in enumerate(self.params) if getattr(p, "name", None) == name)
            p = self.params[i]
            if not p.writes:
                self.params[i] = BufferParam(p.name, p.dtype, True)
        return name

    def scalar(self, name: str, dtype=INT32) -> Sym:
        if ("scalar", name) not in self._param_names:
            self._param_names[("scalar", name)] = name
            self.params.append(ScalarParam(name, dtype))
        return Sym(name, dtype)

    # ------------------------------------------------------------------ statements
    def fresh(self, hint: str = "v") -> str:
        n = f"{hint}{self._count}"
        self._count += 1
        return n

    def emit(self, stmt):
        self._scopes[-1].append(stmt)

    def let(self, expr, hint: str = "v"):
        """``expr`` bound to an immutable local (atoms are returned as they are)."""
        if isinstance(expr, (Sym, Const, Special)):
            return expr
        # Values that read mutable locals or local/private arrays change over time: never shared.
        shared = not self._changes(expr)
        if shared:
            for memo in reversed(self._memo):
                hit = memo.get(expr)
                if hit is not None:
                    return hit
        sym = Sym(self.fresh(hint), expr.dtype)
        self.emit(Let(sym.name, expr))
        if shared:
            self._memo[-1][expr] = sym
        return sym

    def forget(self):
        """Forget the values bound so far: an expression met again is bound again (a kernel that keeps no
        per-work-item value across a barrier: PoCL miscompiles some that do)."""
        for memo in self._memo:
            memo.clear()

    def _changes(self, e) -> bool:
        if isinstance(e, Sym):
            return e.name in self._mutable
        if isinstance(e, Load):
            return e.space != "global" or self._changes(e.index)
        if isinstance(e, (Const, Special)):
            return False
        return any(self._changes(c) for c in children(e))

    def var(self, dtype, init, hint: str = "acc") -> Sym:
        """A mutable local."""
        sym = Sym(self.fresh(hint), dtype)
        self.emit(Decl(sym.name, dtype, init))
        self._mutable.add(sym.name)
        return sym

    def assign(self, sym: Sym, value):
        self.emit(Assign(sym.name, value))

    def store(self, name: str, index, value, space: str = "global"):
        self.emit(Store(space, name, index, value))

    def atomic(self, op: str, name: str, index, value, keep: bool = True):
        """An atomic ``name[index] = op(name[index], value)`` on a global buffer (``ir.Atomic``); returns the old
        value (a ``Sym``) where ``keep``, else ``None``."""
        result = self.fresh("old") if keep else None
        self.emit(Atomic(op, name, index, value, result))
        return Sym(result, value.dtype) if keep else None

    def load(self, name: str, index, dtype, space: str = "global"):
        return self.let(Load(space, name, index, dtype))

    def array(self, space: str, dtype, size: int, hint: str = "arr") -> str:
        name = self.fresh(hint)
        self.emit(ArrayDecl(space, name, dtype, size))
        return name

    def barrier(self):
        self.emit(Barrier())

    def comment(self, text: str):
        self.emit(Comment(text))

    def scope_token(self) -> int:
        """An id of the current scope: values bound in it are visible while ``scope_alive`` says so."""
        return self._scope_ids[-1]

    def scope_alive(self, token: int) -> bool:
        return token in self._scope_ids

    @contextlib.contextmanager
    def _scope(self):
        self._scopes.append([])
        self._memo.append({})
        self._scope_ids.append(self._next_scope)
        self._next_scope += 1
        try:
            yield
        finally:
            self._memo.pop()
            self._scope_ids.pop()

    @contextlib.contextmanager
    def loop(self, start, stop, step=None, hint: str = "r", arrange=None):
        """``for var in range(start, stop, step)``; yields the counter. ``arrange(statements) -> statements``
        rewrites the body before the loop is emitted (``groups/pallas.py``'s ``_loads_first``)."""
        var = Sym(self.fresh(hint), INT32)
        with self._scope():
            yield var
        body = tuple(self._scopes.pop())
        if arrange is not None:
            body = tuple(arrange(body))
        self.emit(For(var.name, start, stop, step if step is not None else Const(b"\x01\0\0\0", INT32), body))

    @contextlib.contextmanager
    def when(self, cond):
        """Statements run where ``cond`` holds."""
        with self._scope():
            yield
        body = tuple(self._scopes.pop())
        if body:
            self.emit(If(cond, body))

    @contextlib.contextmanager
    def otherwise(self):
        """Statements run where the condition of the ``when`` just closed does not hold (its ``else``)."""
        scope = self._scopes[-1]
        last = scope[-1] if scope else None
        if not isinstance(last, If) or last.orelse:
            raise RuntimeError("otherwise() must follow a when() block")
        with self._scope():
            yield
        body = tuple(self._scopes.pop())
        scope[-1] = If(last.cond, last.then, body)

    def build(self, local_size=None) -> Kernel:
        if len(self._scopes) != 1:
            raise RuntimeError("kernel built with open scopes")
        body, names = _live(tuple(self._scopes[0]))
        params = tuple(p for p in self.params if p.name in names)
        return Kernel(self.name, params, body, local_size)


def _live(body):
    """``(statements, names)``: ``body`` without the immutable locals that nothing reads (values computed for
    nothing, e.g. a sort's keys when only the permutation is wanted; a local read only by such locals goes too),
    and the names its statements read or store to (locals, scalar and buffer parameters).

    A local is kept while its name is read by a statement that is not a local's binding or by a kept local's
    value (names, not scopes, are what counts). By reference counts over one walk of the expressions, linear in
    the kernel's size (dropping the unread locals and walking the body again until none was left cost a walk
    of the whole kernel per round: a register-tiled product's unrolled tile, ~2.4 walks a kernel)."""
    reads: set = set()    # Sym and Load names read by the statements that always stay
    syms: set = set()     # the Sym names among them
    lets: list = []       # (Let, the Sym names its value reads, the Load names: with repeats)
    named: dict = {}      # a local's name -> the positions of its bindings in ``lets``
    counts: dict = {}     # a name -> its reads by the values of locals not dropped
    for st in walk_stmts(body):
        if type(st) is Let:
            mine, loads = _names(st.value)
            named.setdefault(st.name, []).append(len(lets))
            lets.append((st, mine, loads))
            for n in mine:
                counts[n] = counts.get(n, 0) + 1
            continue
        if isinstance(st, (Store, Atomic)):
            reads.add(st.name)
        for e in _own_exprs(st):
            mine, loads = _names(e)
            syms.update(mine)
            reads.update(loads)
    reads |= syms
    dead: set = set()
    todo = [n for n in named if n not in syms and not counts.get(n)]
    while todo:
        n = todo.pop()
        if n in dead:
            continue
        dead.add(n)
        for i in named[n]:
            for m in lets[i][1]:
                counts[m] -= 1
                if not counts[m] and m in named and m not in syms and m not in dead:
                    todo.append(m)
    for st, mine, loads in lets:
        if st.name not in dead:
            reads.update(mine)
            reads.update(loads)
    return (_prune(body, dead) if dead else body), reads


def _names(e):
    """``(Sym names, Load names)`` of expression ``e``, a name once per place it is read (a walk of the tree, as
    the renderers print it: a local's value is mostly one operation on locals, or a load at an index)."""
    syms, loads = [], []
    stack = [e]
    while stack:
        x = stack.pop()
        t = type(x)
        if t is Sym:
            syms.append(x.name)
        elif t is Load:
            loads.append(x.name)
            stack.append(x.index)
        elif t is not Const and t is not Special:
            stack.extend(children(x))
    return syms, loads


def _own_exprs(st):
    """The expressions of statement ``st`` itself (not those of the statements inside a ``For`` or an ``If``)."""
    if isinstance(st, (Assign, Decl)):
        return (st.value,)
    if isinstance(st, (Store, Atomic)):
        return (st.index, st.value)
    if isinstance(st, For):
        return (st.start, st.stop, st.step)
    if isinstance(st, If):
        return (st.cond,)
    return ()


def _prune(stmts, dead):
    out = []
    for s in stmts:
        if isinstance(s, Let) and s.name in dead:
            continue
        if isinstance(s, For):
            s = For(s.var, s.start, s.stop, s.step, _prune(s.body, dead))
        elif isinstance(s, If):
            s = If(s.cond, _prune(s.then, dead), _prune(s.orelse, dead))
        out.append(s)
    return tuple(out)
