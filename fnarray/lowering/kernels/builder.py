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
    walk_exprs,
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
        body = _drop_unused(tuple(self._scopes[0]))
        names = {e.name for e in walk_exprs(body) if isinstance(e, (Sym, Load))} | _stored(body)
        params = tuple(p for p in self.params if p.name in names)
        return Kernel(self.name, params, body, local_size)


def _stored(stmts) -> set:
    return {s.name for s in walk_stmts(stmts) if isinstance(s, (Store, Atomic))}


def _drop_unused(body):
    """The statements without the immutable locals that nothing reads (values computed for nothing,
    e.g. a sort's keys when only the permutation is wanted)."""
    while True:
        used = {e.name for e in walk_exprs(body) if isinstance(e, Sym)}
        pruned = _prune(body, used)
        if pruned == body:
            return body
        body = pruned


def _prune(stmts, used):
    out = []
    for s in stmts:
        if isinstance(s, Let) and s.name not in used:
            continue
        if isinstance(s, For):
            s = For(s.var, s.start, s.stop, s.step, _prune(s.body, used))
        elif isinstance(s, If):
            s = If(s.cond, _prune(s.then, used), _prune(s.orelse, used))
        out.append(s)
    return tuple(out)
