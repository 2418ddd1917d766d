"""A program as generated Python over NumPy values (``compile_numpy``).

A program compiles to generated Python source: one line per equation calling
that equation's NumPy implementation (``common.IMPLS``), after dead-code
elimination. Where that implementation is a NumPy ufunc and one of its operands
is a temporary of the output's shape and dtype that nothing reads afterwards,
the ufunc writes into it (``out=``), so a chain of elementwise operations reuses
its buffers as NumPy's own single-expression evaluation does. Values that depend
only on captured constants are computed once, on the first call, and reused (docs/design.md, "The IR").
"""

from __future__ import annotations

import weakref

import numpy as np

from fnarray.core import primitives as P
from fnarray.core.ir import Literal, Program
from fnarray.core.passes import dce
from fnarray.lowering.common import code_of
from fnarray.lowering.numpy.common import IMPLS


__all__ = ["compile_numpy", "Generated"]

# Equations whose NumPy implementations broadcast their operands natively.
_ELEMENTWISE = frozenset({"select_n"})

def _ident(i):
    return f"v{i}"


class Generated:
    """Python source for a program, and the function it defines."""

    def __init__(self, prog: Program):
        prog, _ = dce(prog)
        w = _Writer()
        ins = [w.name(v) for v in list(prog.constvars) + list(prog.invars)]
        impls = [IMPLS[e.primitive](e.params, [a.aval for a in e.inputs], [o.aval for o in e.outputs])
                 for e in prog.eqns]
        reusable = _reusable_temporaries(prog, impls)
        for i, e in enumerate(prog.eqns):
            if e.primitive is P.broadcast_in_dim and e.inputs[0].aval.shape != e.outputs[0].aval.shape:
                w.broadcast(i, e)
            else:
                w.equation(i, e, impls[i], reusable.get(i))
        ret = ", ".join(w.arg(a, False) if not isinstance(a, Literal) else w.name(a) for a in prog.outvars)
        w.lines.append(f"    return [{ret}]")
        header = f"def program({', '.join(ins)}):"
        self.source = "\n".join([header] + w.lines) + "\n"
        glb = w.glb
        exec(code_of(self.source, "<fnarray numpy program>"), glb)  # noqa: S102 (our own codegen)
        self.fn = glb["program"]


class _Writer:
    """The lines of a generated program and the globals they name (implementations, literals).

    Lazy broadcasting: ``broadcast_in_dim`` only reshapes (a view) and NumPy's own broadcasting does the rest
    inside elementwise consumers; a value is materialized to its full shape (``np.broadcast_to``, ~10 us) only
    where a non-elementwise equation or the caller reads it. ``lazy`` holds the variables whose runtime shape
    may be smaller.
    """

    def __init__(self):
        self.names: dict = {}
        self.glb: dict = {"np": np, "__name__": "fnarray.lowering.numpy_program", "_materialize": np.broadcast_to}
        self.lines: list = []
        self.literals = 0
        self.lazy: set = set()
        self.full: dict = {}

    def name(self, a):
        if isinstance(a, Literal):
            k = f"k{self.literals}"
            self.literals += 1
            self.glb[k] = np.asarray(a.val)
            return k
        if a not in self.names:
            self.names[a] = _ident(len(self.names))
        return self.names[a]

    def arg(self, a, elementwise):
        """``a``'s name as an operand; its full-shape copy where a non-elementwise reader needs one."""
        n = self.name(a)
        if elementwise or a not in self.lazy:
            return n
        if a not in self.full:
            self.full[a] = f"{n}_full"
            self.lines.append(f"    {self.full[a]} = _materialize({n}, {a.aval.shape!r})")
        return self.full[a]

    def broadcast(self, i, e):
        """A broadcast as a reshape to the output's rank (its result is lazy)."""
        f = f"f{i}_{e.primitive.name}"
        outs = [self.name(o) for o in e.outputs]
        shape, dims = e.params["shape"], e.params["broadcast_dimensions"]
        inter = [1] * len(shape)
        for k, d in enumerate(dims):
            inter[d] = e.inputs[0].aval.shape[k]
        self.glb[f] = np.reshape
        self.lines.append(f"    {outs[0]} = {f}({self.arg(e.inputs[0], False)}, {tuple(inter)!r})")
        self.lazy.add(e.outputs[0])

    def equation(self, i, e, fn, victim):
        """A call of the equation's implementation ``fn``, into ``victim``'s buffer where it may reuse it."""
        f = f"f{i}_{e.primitive.name}"
        outs = [self.name(o) for o in e.outputs]
        lazy = self.lazy
        ew = e.primitive.name in _ELEMENTWISE or e.primitive.kind in ("unary", "binary")
        self.glb[f] = fn
        args = ", ".join(self.arg(a, ew) for a in e.inputs)
        if ew and e.outputs[0].aval.shape != () and not any(
                a not in lazy and a.aval.shape == e.outputs[0].aval.shape for a in e.inputs
                if not isinstance(a, Literal)):
            lazy.add(e.outputs[0])
        if e.primitive.multiple_results and not outs:
            self.lines.append(f"    {f}({args})")
        elif e.primitive.multiple_results:
            lhs = ", ".join(outs) + ("," if len(outs) == 1 else "")
            self.lines.append(f"    {lhs} = {f}({args})")
        elif victim is not None and victim not in lazy and _dtypes_match(e):
            self.lines.append(f"    {outs[0]} = {f}({args}, out={self.name(victim)})")
        else:
            self.lines.append(f"    {outs[0]} = {f}({args})")


def _reusable_temporaries(prog: Program, impls) -> dict:
    """``{equation index: input Var}``: an operand that equation may overwrite with its result.

    The operand must be a temporary made by an earlier ufunc equation (so a fresh array that no view
    shares), read only by ufunc equations (none of which returns a view of it), not a program output,
    of the output's shape (non-scalar) and dtype, and this equation must be its last reader.
    """
    # a plain one-output ufunc: a fresh result, never a view of an operand
    ufunc_eqn = [not e.primitive.multiple_results and isinstance(fn, np.ufunc) and fn.nout == 1
                 for e, fn in zip(prog.eqns, impls, strict=True)]
    made_by_ufunc: set = set()
    only_ufunc_readers: dict = {}
    last_reader: dict = {}
    for i, e in enumerate(prog.eqns):
        for a in e.inputs:
            if isinstance(a, Literal):
                continue
            last_reader[a] = i
            only_ufunc_readers[a] = only_ufunc_readers.get(a, True) and ufunc_eqn[i]
        if ufunc_eqn[i]:
            made_by_ufunc.add(e.outputs[0])
    outs = {v for v in prog.outvars if not isinstance(v, Literal)}
    plan: dict = {}
    for i, e in enumerate(prog.eqns):
        if not ufunc_eqn[i]:
            continue
        o = e.outputs[0].aval
        if o.shape == ():  # a rank-0 ufunc result is a NumPy scalar, which cannot be written into
            continue
        for a in e.inputs:
            if (not isinstance(a, Literal) and a in made_by_ufunc and a not in outs and only_ufunc_readers[a]
                    and last_reader[a] == i and a.aval.shape == o.shape and a.aval.dtype == o.dtype):
                plan[i] = a
                break
    return plan


def _dtypes_match(e) -> bool:
    """Whether every operand of ``e`` has the output's dtype at run time (so ``out=`` changes no loop)."""
    want = e.outputs[0].aval.dtype
    for a in e.inputs:
        d = np.asarray(a.val).dtype if isinstance(a, Literal) else a.aval.dtype
        if d != want:
            return False
    return True


_compiled: "weakref.WeakKeyDictionary[Program, object]" = weakref.WeakKeyDictionary()


def compile_numpy(prog: Program):
    """A callable ``list of NumPy values -> list of NumPy values`` for ``prog`` (cached per program)."""
    exe = _compiled.get(prog)
    if exe is None:
        fn = Generated(prog).fn

        def exe(bufs, fn=fn):
            return fn(*bufs)
        exe.call_args = fn  # the generated function itself (jit's hot path calls it without the list)
        _compiled[prog] = exe
    return exe
