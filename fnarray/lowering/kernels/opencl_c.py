"""OpenCL C from the kernel IR: a thin subclass of the C-style renderer.

C's spellings come from the base (``cstyle.py``); this subclass declares what OpenCL C spells otherwise: its
type names (``bool`` buffers are ``uchar``, so are float8/int4/uint4 values, which kernels only convert; complex
values are ``float2``/``double2``), ``L``/``UL`` literals, ``__local`` arrays, work-item builtins, barriers, bit
casts (``as_<type>``) and the ``__kernel`` signature, plus PoCL's call-free float32 math (``opencl_math.py``, tuned
by measurement). Kernels with ``float64``/``int64`` need the device's ``cl_khr_fp64``; the ``#pragma`` is printed
when a kernel uses ``double``.
"""

from __future__ import annotations

import numpy as np

from fnarray.lowering.kernels.cstyle import CStyleRenderer
from fnarray.lowering.kernels.ir import (
    INT32,
    ArrayDecl,
    Bitcast,
    BufferParam,
    For,
    If,
    Kernel,
    Op,
    const,
    vector_dtype,
    walk_exprs,
)
from fnarray.lowering.kernels.opencl_math import BUILTINS, F32, HELPERS
from fnarray.lowering.kernels.rules import LOW_BIT
from fnarray.lowering.kernels.transcendental import expand as expand_bodies

__all__ = ["OpenCLRenderer", "render_opencl", "CALL_FREE"]

_TYPES = {
    np.dtype(np.bool_): "bool", np.dtype(np.int8): "char", np.dtype(np.uint8): "uchar",
    np.dtype(np.int16): "short", np.dtype(np.uint16): "ushort", np.dtype(np.int32): "int",
    np.dtype(np.uint32): "uint", np.dtype(np.int64): "long", np.dtype(np.uint64): "ulong",
    np.dtype(np.float16): "half", np.dtype(np.float32): "float", np.dtype(np.float64): "double",
    np.dtype(np.complex64): "float2", np.dtype(np.complex128): "double2",
    # the low-bit dtypes are their bytes; kernels only convert them (kernels/rules.py: LOW_BIT)
    **{d: "uchar" for d in LOW_BIT},
    # a second binding of an input read four elements per load (``ir.vector_dtype``: ``groups/pallas.py``'s
    # ``_lane_load`` on CPU devices, the scheduler option ``lane_vec4``); its lanes print as ``.s0``..``.s3``
    vector_dtype(np.float32): "float4", vector_dtype(np.uint32): "uint4",
}
_ORDERED = frozenset({"lt", "le", "gt", "ge"})

# The float32 ops printed from their kernel-IR bodies by default: log10 as log (the call-free helper) times
# 1/ln 10, where OpenCL C's log10 is a PoCL library call that keeps the vectoriser off the kernel (opencl_math.py).
CALL_FREE = frozenset({"log10"})

_SPECIALS = {"global_id": "get_global_id", "local_id": "get_local_id", "group_id": "get_group_id",
             "global_size": "get_global_size"}


class OpenCLRenderer(CStyleRenderer):
    """OpenCL C: the C-style renderer with OpenCL's type names, ``as_<type>`` bit casts, work-item builtins,
    barriers and ``__kernel`` signature, and PoCL's call-free float32 math (``opencl_math.py``).

    ``expand``: math ops printed from their kernel-IR bodies (``transcendental.BODIES``) instead of OpenCL C's
    library or the helpers; by default ``CALL_FREE``.
    """

    types = _TYPES
    storage_types = {np.dtype(np.bool_): "uchar"}
    int_suffix = {np.dtype(np.int32): "", np.dtype(np.uint32): "u", np.dtype(np.int64): "L",
                  np.dtype(np.uint64): "UL"}
    array_spaces = {"local": "__local "}

    def literal(self, c):
        if c.dtype in LOW_BIT:   # a low-bit constant (a literal broadcast) is its byte, as kernels hold these values
            return f"((uchar){c.bits[0]})"
        return super().literal(c)
    functions = {"min": "min", "max": "max", "fabs": "fabs"}
    #: the transcendentals as the driver's built-ins (a kernel's ``math == "builtin"``), not ``opencl_math.HELPERS``
    builtin_math = False

    def __init__(self, expand=None):
        expand = CALL_FREE if expand is None else expand
        self.expanded = frozenset(expand)

    def rewrite(self, kernel: Kernel) -> Kernel:
        if self.expanded:
            kernel = expand_bodies(kernel, self.expanded)
        return super().rewrite(kernel)

    def expr(self, e) -> str:
        if not self.builtin_math and isinstance(e, Op) and e.op in HELPERS and e.dtype == F32:
            return f"{HELPERS[e.op][0]}({', '.join(self.expr(a) for a in e.args)})"
        if isinstance(e, Op) and (e.op, e.dtype) in BUILTINS:
            return BUILTINS[e.op, e.dtype].format(self.expr(e.args[0]))
        return super().expr(e)

    def rewrite_expr(self, e):
        if isinstance(e, Op) and e.op in ("fabs", "copysign") and e.dtype == F32:
            # The sign bit cleared (and copied): exact, and not a library call (see opencl_math.py).
            mag = Op("and", (Bitcast(e.args[0], INT32), const(0x7fffffff, INT32)), INT32)
            if e.op == "copysign":
                sign = Op("and", (Bitcast(e.args[1], INT32), const(-2 ** 31, INT32)), INT32)
                mag = Op("or", (mag, sign), INT32)
            return Bitcast(mag, F32)
        if isinstance(e, Op) and e.op == "isnan" and e.args[0].dtype.kind == "f":
            # x != x: a comparison PoCL vectorises (its isnan is a call per element).
            return Op("ne", (e.args[0], e.args[0]), e.dtype)
        if isinstance(e, Op) and e.op == "land":
            # OpenCL C's ordered comparisons are IEEE's (false where an operand is NaN), so the explicit
            # "and not NaN" that the NaN-propagating min/max/clip rules add for WGSL's sake
            # (``rules.max_of``) is dropped: a select on one comparison, which PoCL vectorises.
            a, b = e.args
            if _not_nan_of(b, a):
                return a
            if _not_nan_of(a, b):
                return b
        return e

    def special(self, e) -> str:
        return f"((int){_SPECIALS[e.kind]}({e.dim}))"

    def lane(self, vector: str, lane: int) -> str:
        """Element ``lane`` of a vector value: OpenCL C's component ``.s<lane>``."""
        return f"{vector}.s{lane}"

    def atomic(self, s, value: str, index: str) -> list:
        """OpenCL C's ``atomic_add``/``atomic_max``/``atomic_min`` on 32-bit integers; on float32 a
        compare-and-swap loop (``atomic_cmpxchg``) on the bits."""
        d = np.dtype(s.value.dtype)
        keep = f"const {self.type_name(d)} {s.result} = " if s.result else ""
        if d.kind in "iu":
            t = self.type_name(d)
            return [f"{keep}atomic_{s.op}((volatile __global {t}*)&{s.name}[{index}], {value});"]
        new = {"add": "(fa_a + fa_v)", "max": "(((fa_a > fa_v) || (fa_a != fa_a)) ? fa_a : fa_v)",
               "min": "(((fa_a < fa_v) || (fa_a != fa_a)) ? fa_a : fa_v)"}[s.op]
        lines = [f"float {s.result};"] if s.result else []
        lines += ["{", f"    const float fa_v = {value};",
                  f"    volatile __global uint* fa_p = (volatile __global uint*)&{s.name}[{index}];",
                  "    uint fa_old = *fa_p;",
                  "    for (;;) {",
                  "        const float fa_a = as_float(fa_old);",
                  f"        const uint fa_seen = atomic_cmpxchg(fa_p, fa_old, as_uint({new}));",
                  "        if (fa_seen == fa_old) break;",
                  "        fa_old = fa_seen;",
                  "    }"]
        if s.result:
            lines.append(f"    {s.result} = as_float(fa_old);")
        return lines + ["}"]

    def bitcast(self, x: str, dtype) -> str:
        return f"as_{self.type_name(dtype)}({x})"

    def if_header(self, cond: str) -> str:
        """``if (a == b)``, not ``if ((a == b))``: clang warns of an equality in doubled parentheses whose left side
        is assignable (``-Wparentheses-equality``), and PoCL printed its "1 warning generated." to the user at the
        first compile of ``cholesky``'s kernel (``if ((r12 == r10))``, a loop counter on the left)."""
        return f"if ({_outer_parentheses_dropped(cond)})"

    def barrier(self, space: str = "local") -> str:
        if space == "global":
            return "barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);"
        return "barrier(CLK_LOCAL_MEM_FENCE);"

    def signature(self, kernel: Kernel) -> str:
        params = []
        for p in kernel.params:
            if isinstance(p, BufferParam):
                const = "" if p.writes else "const "
                params.append(f"__global {const}{self.storage_name(p.dtype)}* restrict {p.name}")
            else:
                params.append(f"const {self.type_name(p.dtype)} {p.name}")
        attr = ""
        if kernel.local_size is not None:
            dims = tuple(kernel.local_size) + (1,) * (3 - len(kernel.local_size))
            attr = f"__attribute__((reqd_work_group_size({dims[0]}, {dims[1]}, {dims[2]}))) "
        return f"__kernel {attr}void {kernel.name}({', '.join(params)})"

    def prelude(self, kernel: Kernel) -> list:
        used = {p.dtype for p in kernel.params} | {s.dtype for s in _array_decls(kernel.body)}
        helped = set()
        for e in walk_exprs(kernel.body):   # one walk: the dtypes used and the helpers called
            used.add(e.dtype)
            if isinstance(e, Op) and e.op in HELPERS and e.dtype == F32:
                helped.add(e.op)
        lines = []
        if used & {np.dtype(np.float64), np.dtype(np.complex128)}:
            lines.append("#pragma OPENCL EXTENSION cl_khr_fp64 : enable")
        if np.dtype(np.float16) in used:
            lines.append("#pragma OPENCL EXTENSION cl_khr_fp16 : enable")
        if self.builtin_math:
            helped = set()
        lines.extend(HELPERS[name][1] for name in sorted(helped))
        return lines


def _not_nan_of(term, cmp) -> bool:
    """Whether ``term`` is ``!isnan(z)`` (rewritten: ``!(z != z)``) for an operand ``z`` of the ordered
    float comparison ``cmp``."""
    if not (isinstance(term, Op) and term.op == "lnot" and isinstance(cmp, Op) and cmp.op in _ORDERED):
        return False
    inner = term.args[0]
    return (isinstance(inner, Op) and inner.op == "ne" and inner.args[0] == inner.args[1]
            and inner.args[0] in cmp.args and inner.args[0].dtype.kind == "f")


def _array_decls(stmts):
    for s in stmts:
        if isinstance(s, ArrayDecl):
            yield s
        elif isinstance(s, For):
            yield from _array_decls(s.body)
        elif isinstance(s, If):
            yield from _array_decls(s.then)
            yield from _array_decls(s.orelse)


class _BuiltinMathRenderer(OpenCLRenderer):
    builtin_math = True


_RENDERER = OpenCLRenderer()
_BUILTIN_RENDERER = _BuiltinMathRenderer()


def uses_helpers(kernel: Kernel) -> bool:
    """Whether ``kernel`` has a float32 transcendental that ``math="fnarray"`` prints as an fnarray helper (so
    its ``math`` choice changes its source)."""
    return any(isinstance(e, Op) and e.op in HELPERS and e.dtype == F32 for e in walk_exprs(kernel.body))


def render_opencl(kernel: Kernel) -> str:
    """OpenCL C source of ``kernel`` (deterministic: the same kernel gives the same text); its float32
    transcendentals as fnarray's helpers or, for ``kernel.math == "builtin"``, the driver's functions."""
    return (_BUILTIN_RENDERER if kernel.math == "builtin" else _RENDERER).render(kernel)


def _outer_parentheses_dropped(text: str) -> str:
    """``text`` without one pair of parentheses that encloses all of it (``(a == b)`` -> ``a == b``); ``text``
    itself where there is none (``(a) && (b)``, ``f(x)``)."""
    if not (text.startswith("(") and text.endswith(")")):
        return text
    depth = 0
    for i, c in enumerate(text):
        depth += (c == "(") - (c == ")")
        if depth == 0 and i < len(text) - 1:
            return text
    return text[1:-1]
