"""The C-style renderer that the OpenCL C and WGSL renderers share, with C's spellings as defaults.

``CStyleRenderer.render(kernel)`` first runs the subclass's rewrite pass
(``rewrite``/``rewrite_expr``: what the target cannot express is replaced by what
it can, before printing; ``transcendental.expand`` replaces math functions by
kernel-IR bodies), then prints statements and expressions through tables and
hooks. Each hook prints C by default (C99 type names, literals with ``NAN`` and
``INFINITY``, ``(T)(x)`` casts, ``c ? a : b``, ``const T x = v;``, ``for (int
...)``), so a subclass declares only what its target spells differently; what C
has no spelling for (bit casts, work-item builtins, barriers, the entry point)
each target must give. Nothing in this base class asks which target it prints for.

Every operator is parenthesised, so the printed text does not depend on
precedence tables; one statement per line, four spaces of indentation.
"""

from __future__ import annotations

import abc

import numpy as np

from fnarray.lowering.kernels.ir import (
    OPS,
    ArrayDecl,
    Assign,
    Atomic,
    Barrier,
    Bitcast,
    Broadcast,
    Cast,
    Comment,
    Const,
    Decl,
    For,
    If,
    Kernel,
    Lane,
    Let,
    Load,
    Op,
    Select,
    Special,
    Store,
    Sym,
    map_exprs,
)

__all__ = ["CStyleRenderer"]

_C_INFIX = {"add": "+", "sub": "-", "mul": "*", "div": "/", "rem": "%", "and": "&", "or": "|", "xor": "^",
            "shl": "<<", "shr": ">>", "land": "&&", "lor": "||", "eq": "==", "ne": "!=", "lt": "<", "le": "<=",
            "gt": ">", "ge": ">="}
_C_PREFIX = {"neg": "-", "not": "~", "lnot": "!"}
_C_TYPES = {np.dtype(t): name for t, name in (
    (np.bool_, "bool"), (np.int8, "signed char"), (np.uint8, "unsigned char"), (np.int16, "short"),
    (np.uint16, "unsigned short"), (np.int32, "int"), (np.uint32, "unsigned int"), (np.int64, "long long"),
    (np.uint64, "unsigned long long"), (np.float32, "float"), (np.float64, "double"))}
_C_INT_SUFFIX = {np.dtype(np.int32): "", np.dtype(np.uint32): "u", np.dtype(np.int64): "LL",
                 np.dtype(np.uint64): "ULL"}


class CStyleRenderer(abc.ABC):
    """Prints a ``Kernel`` as C-like source; subclasses declare only what differs."""

    infix: dict = _C_INFIX
    prefix: dict = _C_PREFIX
    functions: dict = {}        # kernel-IR func op -> target function name
    types: dict = _C_TYPES      # value dtype -> type name
    storage_types: dict = {}    # dtype -> type name in buffers, where it differs from the value type
    int_suffix: dict = _C_INT_SUFFIX   # integer dtype -> literal suffix (other integer dtypes: a cast)
    array_spaces: dict = {}     # array space ("local", "private") -> qualifier printed before the type
    indent = "    "

    # ------------------------------------------------------------------ hooks for subclasses
    def rewrite_expr(self, e):
        """Replace an expression the target cannot print (called bottom-up); default: keep it."""
        return e

    def type_name(self, dtype) -> str:
        name = self.types.get(np.dtype(dtype))
        if name is None:
            raise TypeError(f"{type(self).__name__} cannot print the dtype {np.dtype(dtype).name}")
        return name

    def storage_name(self, dtype) -> str:
        return self.storage_types.get(np.dtype(dtype)) or self.type_name(dtype)

    def literal(self, c: Const) -> str:
        """A constant, exactly: C's ``true``/``false``, suffixed integers, ``f`` floats, ``NAN``/``INFINITY``."""
        d, v = c.dtype, c.value
        if d == np.bool_:
            return "true" if v else "false"
        if d.kind in "iu":
            return self._int_literal(int(v), d)
        if d.kind == "f":
            return self._float_literal(float(v), d)
        if d.kind == "c":
            part = np.dtype(np.float32) if d == np.complex64 else np.dtype(np.float64)
            z = complex(v)
            re, im = (self.literal(Const(np.asarray(t, part).tobytes(), part)) for t in (z.real, z.imag))
            return self.complex_op("cmake", [re, im], d)
        raise TypeError(f"{type(self).__name__} has no literal for {d.name}")

    def _int_literal(self, v: int, d) -> str:
        suffix = self.int_suffix.get(d)
        if suffix is None:
            return f"(({self.type_name(d)}){v})"
        if d.kind == "i" and v == int(np.iinfo(d).min):   # -2^31 is not a literal: its negation overflows
            return f"({v + 1}{suffix} - 1{suffix})"
        return f"{v}{suffix}" if v >= 0 else f"({v}{suffix})"

    def _float_literal(self, x: float, d) -> str:
        name = self.type_name(d)
        if np.isnan(x):
            return f"(({name})NAN)"
        if np.isinf(x):
            return f"(({name})INFINITY)" if x > 0 else f"(-({name})INFINITY)"
        text = str(np.float32(x)) if d == np.float32 else repr(x)
        if "e" not in text and "." not in text:
            text += ".0"
        text += "f" if d == np.float32 else ""
        return text if x >= 0 and not text.startswith("-") else f"({text})"

    @abc.abstractmethod
    def special(self, e: Special) -> str:
        """A work-item builtin (global, local, group id; global size) as an int32 value."""

    def cast(self, x: str, dtype) -> str:
        """A value conversion to ``dtype``: C's ``((T)(x))``."""
        return f"(({self.type_name(dtype)})({x}))"

    @abc.abstractmethod
    def bitcast(self, x: str, dtype) -> str:
        """The same bits read as ``dtype`` (C has no expression for it)."""

    def select(self, cond: str, a: str, b: str, dtype) -> str:
        """``a`` where ``cond`` else ``b``: C's ``?:``."""
        return f"({cond} ? {a} : {b})"

    def complex_op(self, op: str, args: list, dtype) -> str:
        """``cmake(re, im)``, ``creal(z)``, ``cimag(z)`` on two-component vectors: the vector type's constructor
        (spelled as a cast of the two parts) and the ``.x``/``.y`` components."""
        if op == "cmake":
            return self.cast(f"{args[0]}, {args[1]}", dtype)
        return f"({args[0]}).{'x' if op == 'creal' else 'y'}"

    def let(self, name: str, dtype, value: str) -> str:
        """The declaration of an immutable local."""
        return f"const {self.type_name(dtype)} {name} = {value};"

    def decl(self, name: str, dtype, value: str) -> str:
        """The declaration of a mutable local."""
        return f"{self.type_name(dtype)} {name} = {value};"

    def array_decl(self, s: ArrayDecl) -> str:
        """The declaration of a work-group (``local``) or ``private`` array."""
        return f"{self.array_spaces.get(s.space, '')}{self.type_name(s.dtype)} {s.name}[{s.size}];"

    def for_header(self, var: str, start: str, stop: str, step: str) -> str:
        """The head of a counted int32 loop (the body follows in braces)."""
        inc = f"{var}++" if step == "1" else f"{var} += {step}"
        return f"for (int {var} = {start}; {var} < {stop}; {inc})"

    def if_header(self, cond: str) -> str:
        """The head of an ``if`` on the printed condition ``cond`` (the branch follows in braces)."""
        return f"if ({cond})"

    def call(self, e: Op, args: list) -> str:
        """A function op applied to its printed ``args``: ``functions[op]`` (default: the op's name); ``min`` and
        ``max`` of bools as ``&`` and ``|``."""
        if e.op in ("min", "max") and e.args[0].dtype == np.bool_:
            return f"({args[0]} {'|' if e.op == 'max' else '&'} {args[1]})"
        return f"{self.functions.get(e.op, e.op)}({', '.join(args)})"

    @abc.abstractmethod
    def barrier(self, space: str = "local") -> str:
        """A work-group barrier over local memory (``space="global"``: over buffers too)."""

    @abc.abstractmethod
    def signature(self, kernel: Kernel) -> str:
        """The kernel's entry point up to its opening brace."""

    def prelude(self, kernel: Kernel) -> list:
        """Lines printed before the kernel (extensions, helper functions); default none."""
        return []

    def from_storage(self, text: str, dtype) -> str:
        """A buffer element (of ``storage_types[dtype]``) as a value of ``dtype`` (a stored bool: ``!= 0``)."""
        return f"({text} != 0)"

    def to_storage(self, value: str, dtype) -> str:
        """A value of ``dtype`` as a buffer element of ``storage_types[dtype]``."""
        return f"(({self.storage_name(dtype)})({value}))"

    def load(self, space: str, name: str, index: str, dtype) -> str:
        text = f"{name}[{index}]"
        if space == "global" and np.dtype(dtype) in self.storage_types:
            return self.from_storage(text, dtype)
        return text

    def lane(self, vector: str, lane: int) -> str:
        """Element ``lane`` of a vector value (``ir.Lane``; only a renderer whose ``types`` name a
        ``vector_dtype`` is given one)."""
        return f"{vector}[{lane}]"

    def broadcast(self, value: str, lane: int) -> str:
        """A subgroup's value at ``lane`` in every work item of it (``ir.Broadcast``); only WGSL prints one."""
        raise TypeError(f"{type(self).__name__} does not print subgroup broadcasts")

    def store(self, space: str, name: str, index: str, value: str, dtype) -> str:
        if space == "global" and np.dtype(dtype) in self.storage_types:
            value = self.to_storage(value, dtype)
        return f"{name}[{index}] = {value};"

    def atomic(self, s: Atomic, value: str, index: str) -> list:
        """The lines of an atomic read-modify-write (``ir.Atomic``), declaring ``s.result`` where it is kept;
        ``value``, ``index``: the printed operands. Each target spells its own (C has none)."""
        raise TypeError(f"{type(self).__name__} does not print atomics")

    # ------------------------------------------------------------------ printing
    def rewrite(self, kernel: Kernel) -> Kernel:
        """The kernel as this target prints it: by default ``rewrite_expr`` on every expression."""
        return map_exprs(kernel, self.rewrite_expr)

    def render(self, kernel: Kernel) -> str:
        kernel = self.rewrite(kernel)
        lines = list(self.prelude(kernel))
        lines.append(self.signature(kernel) + " {")
        self._stmts(kernel.body, 1, lines)
        lines.append("}")
        return "\n".join(lines) + "\n"

    def _stmts(self, stmts, depth, lines):
        pad = self.indent * depth
        for s in stmts:
            if isinstance(s, Let):
                lines.append(pad + self.let(s.name, s.value.dtype, self.expr(s.value)))
            elif isinstance(s, Decl):
                lines.append(pad + self.decl(s.name, s.dtype, self.expr(s.value)))
            elif isinstance(s, Assign):
                lines.append(pad + f"{s.name} = {self.expr(s.value)};")
            elif isinstance(s, Store):
                lines.append(pad + self.store(s.space, s.name, self.expr(s.index), self.expr(s.value),
                                              s.value.dtype))
            elif isinstance(s, Atomic):
                lines.extend(pad + line for line in self.atomic(s, self.expr(s.value), self.expr(s.index)))
            elif isinstance(s, For):
                lines.append(pad + self.for_header(s.var, self.expr(s.start), self.expr(s.stop),
                                                   self.expr(s.step)) + " {")
                self._stmts(s.body, depth + 1, lines)
                lines.append(pad + "}")
            elif isinstance(s, If):
                lines.append(pad + self.if_header(self.expr(s.cond)) + " {")
                self._stmts(s.then, depth + 1, lines)
                if s.orelse:
                    lines.append(pad + "} else {")
                    self._stmts(s.orelse, depth + 1, lines)
                lines.append(pad + "}")
            elif isinstance(s, Barrier):
                lines.append(pad + self.barrier(s.space))
            elif isinstance(s, ArrayDecl):
                lines.append(pad + self.array_decl(s))
            elif isinstance(s, Comment):
                lines.append(pad + f"// {s.text}")
            else:
                raise TypeError(f"unknown kernel statement {s!r}")

    def expr(self, e) -> str:
        if isinstance(e, Sym):
            return e.name
        if isinstance(e, Const):
            return self.literal(e)
        if isinstance(e, Special):
            return self.special(e)
        if isinstance(e, Load):
            return self.load(e.space, e.name, self.expr(e.index), e.dtype)
        if isinstance(e, Lane):
            return self.lane(self.expr(e.x), e.lane)
        if isinstance(e, Broadcast):
            return self.broadcast(self.expr(e.x), e.lane)
        if isinstance(e, Cast):
            return self.cast(self.expr(e.x), e.dtype)
        if isinstance(e, Bitcast):
            return self.bitcast(self.expr(e.x), e.dtype)
        if isinstance(e, Select):
            return self.select(self.expr(e.cond), self.expr(e.a), self.expr(e.b), e.dtype)
        if isinstance(e, Op):
            kind = OPS[e.op][1]
            args = [self.expr(a) for a in e.args]
            if kind in ("infix", "compare"):
                return f"({args[0]} {self.infix[e.op]} {args[1]})"
            if kind == "prefix":
                return f"({self.prefix[e.op]}{args[0]})"
            if kind == "complex":
                return self.complex_op(e.op, args, e.dtype)
            return self.call(e, args)
        raise TypeError(f"unknown kernel expression {e!r}")
