"""The IR: typed SSA programs, as JAX's jaxprs (docs/design.md, "The IR").

A ``Program`` has constant variables (arrays captured from outside, bound at
call time), input variables, equations ``outs = primitive[params] ins`` and
output atoms. An atom is a ``Var`` or a ``Literal`` (a Python/NumPy scalar with
its abstract value). Everything here is immutable; ``Params`` is a hashable
mapping so that equations can be cache keys.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np

from fnarray.core.errors import FnArrayError
from fnarray.core.shaped import ShapedArray

__all__ = ["Var", "Literal", "Eqn", "Program", "Params", "check_program",
           "IRError", "pp_program"]


class IRError(FnArrayError, TypeError):
    """A program that fails the verifier: the IR is not well typed."""


class Var:
    """A variable of the IR: one value, defined once, with an abstract value."""

    __slots__ = ("aval", "_id")
    _ids = itertools.count()

    def __init__(self, aval: ShapedArray):
        self.aval = aval
        self._id = next(Var._ids)

    def __repr__(self):
        return f"Var({self._id}:{self.aval.str_short()})"


class Literal:
    """A scalar constant written into the program text.

    ``val`` is a NumPy scalar of ``aval.dtype``. Two literals are the same key
    when dtype, weak type and bit pattern agree, so ``0.0``/``-0.0``,
    ``1``/``True`` and NaN payloads are told apart.
    """

    __slots__ = ("val", "aval", "_key")

    def __init__(self, val, aval: ShapedArray):
        self.val = np.asarray(val, dtype=aval.dtype)[()]
        self.aval = aval
        self._key = (aval.dtype, aval.weak_type, self.val.tobytes())

    def __eq__(self, other):
        return isinstance(other, Literal) and self._key == other._key

    def __hash__(self):
        return hash(self._key)

    def __repr__(self):
        return f"Literal({_pp_literal(self)})"


_aval = operator.attrgetter("aval")


class Params(Mapping):
    """An immutable, hashable mapping of an equation's static parameters."""

    # (``_subs``: the sub-programs the values hold, ``subprograms.subprograms``' memo: every pass asks it of
    # every equation, ~10 walks of the params an equation on a first jitted call; set once, never changed)
    __slots__ = ("_d", "_hash", "_subs")

    def __init__(self, d=(), **kw):
        self._d = dict(d, **kw)
        self._hash = self._subs = None

    @classmethod
    def taking(cls, d: dict) -> "Params":
        """``Params`` over ``d`` itself, not a copy (``bind``'s fresh keyword dict: no one else holds it)."""
        p = cls.__new__(cls)
        p._d, p._hash, p._subs = d, None, None
        return p

    def __getitem__(self, k):
        return self._d[k]

    def __iter__(self):
        return iter(self._d)

    def __len__(self):
        return len(self._d)

    # The dict's own views and lookups (``Mapping``'s generic ones cost a Python call per item: every pass that
    # walks equations reads their params; issue 28, ~5% of a jitted program's first call on mlx:0).
    def __contains__(self, k):
        return k in self._d

    def get(self, k, default=None):
        return self._d.get(k, default)

    def keys(self):
        return self._d.keys()

    def values(self):
        return self._d.values()

    def items(self):
        return self._d.items()

    def __hash__(self):
        if self._hash is None:
            # (order-free: every bind of an eager call makes a Params and its key hashes it; no sort)
            self._hash = hash(frozenset(self._d.items()))
        return self._hash

    def __eq__(self, other):
        return isinstance(other, Params) and self._d == other._d

    def replace(self, **kw) -> "Params":
        return Params(self._d, **kw)

    def __repr__(self):
        return f"Params({self._d!r})"


class Eqn(NamedTuple):
    """``outputs = primitive[params] inputs``."""

    primitive: Any
    inputs: tuple
    params: Params
    outputs: tuple


class Program:
    """A closed-over-nothing typed program (a jaxpr).

    Attributes: ``constvars`` (bound to captured arrays at call time),
    ``invars``, ``eqns``, ``outvars`` (``Var`` or ``Literal``). Hashes by
    identity, as programs are built once and shared. The counterpart of JAX's
    ``ClosedJaxpr``; made by tracing (``make_ir``, ``jit(f).trace``), printed by ``str``.

    Args:
      constvars: ``Var`` s bound to captured arrays at call time.
      invars: ``Var`` s of the inputs.
      eqns: the equations (``Eqn``), in a valid execution order.
      outvars: the outputs, ``Var`` or ``Literal``.
    """

    __slots__ = ("constvars", "invars", "eqns", "outvars", "_derived", "__weakref__")

    def __init__(self, constvars, invars, eqns, outvars):
        self.constvars = tuple(constvars)
        self.invars = tuple(invars)
        self.eqns = tuple(eqns)
        self.outvars = tuple(outvars)
        self._derived = None

    def derived(self, key, make):
        """``make()``, made once for this program and ``key`` and kept on the program (so it lives as long as
        the program does): programs are never changed once built, so a program derived from this one (its
        closed form, its JVP, its transpose...) is the same for the same ``key``, and is the same object at
        every call, which keeps the executables compiled for it (keyed by program identity) in use."""
        d = self._derived
        if d is None:
            d = self._derived = {}
        hit = d.get(key)
        if hit is None:
            hit = d[key] = make()
        return hit

    # (``map`` of a C getter: no generator frame an aval; jit reads a new program's ``out_avals`` ~3 times)
    @property
    def in_avals(self):
        return tuple(map(_aval, self.invars))

    @property
    def const_avals(self):
        return tuple(map(_aval, self.constvars))

    @property
    def out_avals(self):
        return tuple(map(_aval, self.outvars))

    def __str__(self):
        return pp_program(self)

    __repr__ = __str__


# --------------------------------------------------------------------------- printing


def _names():
    for n in itertools.count(1):
        for t in itertools.product("abcdefghijklmnopqrstuvwxyz", repeat=n):
            yield "".join(t)


def _pp_literal(lit: Literal) -> str:
    v = lit.val
    if v.dtype == np.bool_:
        s = "True" if v else "False"
    elif v.dtype.kind in "iu":
        s = str(int(v))
    else:
        s = repr(v.item()) if v.dtype.kind != "c" else str(complex(v))
    return f"{s}:{lit.aval.str_short()}"


def _pp_param(v, indent, names) -> str:
    if isinstance(v, Program):
        return "\n" + _pp(v, indent + 4, names)
    if isinstance(v, np.dtype):
        return v.name
    if isinstance(v, tuple) and v and all(isinstance(p, Program) for p in v):
        return "(" + "".join(_pp_param(p, indent, names) for p in v) + "\n" + " " * (indent + 2) + ")"
    if callable(v) and hasattr(v, "__name__"):
        return v.__name__
    return str(v)


def _pp(prog: Program, indent: int, names) -> str:
    def name(a):
        if isinstance(a, Literal):
            return _pp_literal(a)
        if a not in names:
            names[a] = next(names["__gen__"])
        return names[a]

    def decl(v):
        return f"{name(v)}:{v.aval.str_short()}"

    pad = " " * indent
    head = (f"{pad}{{ lambda {' '.join(map(decl, prog.constvars))}"
            f"{' ' if prog.constvars else ''}; {' '.join(map(decl, prog.invars))}. let")
    lines = [head]
    for e in prog.eqns:
        ps = " ".join(f"{k}={_pp_param(v, indent + 4, names)}" for k, v in e.params.items())
        ps = f"[{ps}]" if ps else ""
        outs = " ".join(map(decl, e.outputs))
        ins = " ".join(map(name, e.inputs))
        lhs = f"{outs} = " if outs else ""  # an effect (debug_callback) has no outputs
        lines.append(f"{pad}    {lhs}{e.primitive.name}{ps} {ins}".rstrip())
    outs = ", ".join(map(name, prog.outvars))
    trail = "," if len(prog.outvars) == 1 else ""
    lines.append(f"{pad}  in ({outs}{trail}) }}")
    return "\n".join(lines)


def pp_program(prog: Program) -> str:
    """Print a program in the jaxpr-like text form of docs/design.md."""
    return _pp(prog, 0, {"__gen__": _names()})


# --------------------------------------------------------------------------- verifier


def check_program(prog: Program) -> None:
    """Re-derive every equation's output types from its inputs (the verifier).

    Raises ``IRError`` naming the equation when a variable is used before it
    is defined, defined twice, or typed differently from what its primitive's
    shape/dtype rule gives. Sub-programs in params are checked by their
    primitive's rule, which calls this function. (The counterpart of JAX's
    ``core.check_jaxpr`` and Autodidax's ``typecheck_jaxpr``.)

    Args:
      prog: the ``Program`` to verify.

    Returns:
      None when the program is well formed.

    Raises:
      IRError: a binder that is not a ``Var``, a variable defined twice or used
        before its definition, an atom that is neither ``Var`` nor ``Literal``, an
        equation whose primitive's shape/dtype rule rejects its inputs (the rule's
        error is chained), or whose output count or types differ from the rule's.
    """
    defined = set()

    def define(v, where):
        if not isinstance(v, Var):
            raise IRError(f"{where}: binder {v!r} is not a Var")
        if v in defined:
            raise IRError(f"{where}: variable {v!r} is defined twice")
        defined.add(v)

    def use(a, where):
        if isinstance(a, Literal):
            return a.aval
        if not isinstance(a, Var):
            raise IRError(f"{where}: {a!r} is neither a Var nor a Literal")
        if a not in defined:
            raise IRError(f"{where}: variable {a!r} is used before it is defined")
        return a.aval

    for v in prog.constvars:
        define(v, "constvars")
    for v in prog.invars:
        define(v, "invars")
    for i, e in enumerate(prog.eqns):
        where = f"equation {i} ({e.primitive.name})"
        in_avals = [use(a, where) for a in e.inputs]
        try:
            out_avals = e.primitive.abstract_eval(*in_avals, **e.params)
        except IRError:
            raise
        except Exception as ex:  # the rule rejected its inputs
            raise IRError(f"{where}: shape/dtype rule failed on inputs "
                          f"{[a.str_short() for a in in_avals]}: {ex}") from ex
        if not e.primitive.multiple_results:
            out_avals = [out_avals]
        if len(out_avals) != len(e.outputs):
            raise IRError(f"{where}: {len(e.outputs)} outputs bound, rule gives {len(out_avals)}")
        for v, want in zip(e.outputs, out_avals, strict=True):
            if (v.aval.shape, v.aval.dtype) != (want.shape, want.dtype):
                raise IRError(f"{where}: output typed {v.aval.str_short()}, "
                              f"rule gives {want.str_short()}")
            define(v, where)
    for a in prog.outvars:
        use(a, "outvars")
