"""WGSL from the kernel IR: a thin subclass of the C-style renderer.

What differs from OpenCL C is declared here; what WGSL cannot express is
rewritten before printing:

- Buffers are module-scope ``var<storage>`` bindings (``@group(0)``, binding
  ``k`` for the ``k``-th buffer parameter); ``bool`` buffers hold ``u32``. A parameter of
  ``ir.vector_dtype(float32)`` is ``array<vec4<f32>>`` (a second binding of a buffer that a kernel reads
  four elements per load; ``ir.Lane`` prints as ``v[i]``). A float8/int4/uint4 or uint8
  buffer holds its bytes four to a ``u32`` (as the host's bytes): a load takes byte ``i`` of word ``i / 4``.
  WGSL has no 8-bit type. A map kernel's work item computes the four elements of a word and stores the word
  whole (``Capabilities.word_stores``, ``groups/base.py``: a ``Store`` of a ``uint32`` value into a byte
  buffer prints as a plain store of word ``index``). Where four work items share a word (other kernels, a map
  kernel with guests), the kernel declares the buffer
  ``array<atomic<u32>>`` and stores byte ``i`` as one ``atomicXor`` of the new byte with the old one (read by
  ``atomicLoad``) at its place in the word: only this work item changes those eight bits, and the others' XORs
  touch other bits, so the updates commute and no word needs clearing first (a conversion into float8 or int4
  takes 3-5x the time of one into int32 on lavapipe at load 20-23; an ``atomicAnd`` then ``atomicOr`` took as
  long or longer). uint8 buffers stay read only (the backend's ``supports``).
  Scalar parameters live in one uniform struct (``fa_args``, the binding after
  the buffers) that the body reads into locals. ``wgsl_layout(kernel)``
  describes this layout for the runtime, ``uniform_bytes`` fills the struct.
- Work-group (``local``) arrays move to module scope (``var<workgroup>``). The
  work-group size is part of the source: a kernel that does not fix one is
  rendered with its launch's (``dataclasses.replace(kernel, local_size=...)``).
- Work-item builtins are ``global_invocation_id`` and friends; a launch of more
  than 65,535 work-groups is folded into a second dimension by the scheduler
  (``Capabilities.max_dispatch``), as for OpenCL.
- WGSL does not promise IEEE infinities and NaN: a constant expression that
  overflows is a compile error and drivers may fold ``x != x`` to false (Mesa
  does). Infinities and NaNs are written as bit patterns passed through a
  function (``fa_f32_bits(0x7f800000u)``: a call is a run-time value, while Tint,
  Chromium's compiler, rejects a constant ``bitcast`` whose value is not finite),
  ``isnan``/``isinf``/``isfinite`` are tests on
  the bits, ``max``/``min`` on floats propagate NaN through an explicit select.
- Functions WGSL lacks, or whose precision or edge cases WGSL leaves open
  (``erf``, ``lgamma``, ``log1p``, ``expm1``, ``cbrt``, ``log10``, ``pow`` at 0 and
  for negative bases, ``fmod``, ``nextafter``, ``hypot``, ``copysign``, ``asin``,
  ``acos``, ``atan``, ``atan2``, ``acosh`` below 1, float division by zero, the
  NaN tests), are expanded into their kernel-IR bodies before printing
  (``transcendental.py``; ``EXPANDED`` is all of ``BODIES``), as are products
  with a constant zero, sums with a constant zero, ``x - x``, ``x + (-x)`` and ``x == x`` (``<=``, ``>=``,
  ``!=``), which Mesa folds.
  ``float16`` math goes through the ``float32`` bodies (as the reference
  computes it); ``float16`` needs the ``shader-f16`` feature.
- ``!=`` on floats is printed as ``!(a == b)`` (drivers compile ``!=`` as an
  ordered comparison, false for NaN). Signed remainder is printed as ``a - (a / b) * b`` (GLSL-based drivers leave
  ``%`` of negative operands undefined); shift amounts are ``u32``; ``xor`` of
  bools is ``!=``; WGSL has no ``?:`` (``select(false_value, true_value, cond)``).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from fnarray.lowering.kernels.cstyle import CStyleRenderer
from fnarray.lowering.kernels.ir import (
    ArrayDecl,
    BufferParam,
    Cast,
    Const,
    For,
    If,
    Kernel,
    Let,
    Op,
    ScalarParam,
    Special,
    Store,
    Sym,
    atomic_buffers,
    vector_dtype,
    walk_exprs,
    walk_stmts,
    without,
)
from fnarray.lowering.kernels.rules import LOW_BIT
from fnarray.lowering.kernels.transcendental import BODIES, expand

__all__ = ["WGSLRenderer", "render_wgsl", "wgsl_layout", "uniform_bytes", "WGSLLayout", "DEFAULT_GROUP_SIZE",
           "DTYPES"]

F16, F32 = np.dtype(np.float16), np.dtype(np.float32)
I32, U32, BOOL = np.dtype(np.int32), np.dtype(np.uint32), np.dtype(np.bool_)
C64 = np.dtype(np.complex64)

#: The dtypes WGSL computes in (``float16`` only where the adapter has ``shader-f16``); complex64 values are
#: ``vec2<f32>`` (re, im), touched only by the kernel IR's ``cmake``/``creal``/``cimag``.
DTYPES = frozenset({F32, I32, U32, BOOL, F16, C64})
#: Work-group size of kernels that do not fix one.
DEFAULT_GROUP_SIZE = 64

#: The dtypes a buffer holds as bytes, four to a u32 word (read only): float8/int4/uint4 and uint8 (mxfp4 scales).
_BYTES = LOW_BIT | {np.dtype(np.uint8)}
_TYPES = {F32: "f32", I32: "i32", U32: "u32", BOOL: "bool", F16: "f16", C64: "vec2<f32>",
          **{d: "u32" for d in _BYTES},   # a byte's value, in a u32
          # A buffer read four elements at a time (``ir.vector_dtype``: the blocked matrix product on a CPU
          # adapter, where one vec4 load costs lavapipe about what a scalar one does).
          vector_dtype(F32): "vec4<f32>", vector_dtype(U32): "vec4<u32>"}
# Uniform (host-shareable) types of scalar parameters: bool as u32, f16 as f32.
_UNIFORM_TYPES = {F32: "f32", I32: "i32", U32: "u32", BOOL: "u32", F16: "f32"}
_SPECIAL_BUILTINS = {"global_id": "fa_gid", "local_id": "fa_lid", "group_id": "fa_wid"}
_XYZ = "xyz"

# Kernel-IR func op -> WGSL builtin. On floats, the ops in EXPANDED never reach the printer as the kernel wrote
# them: what is printed is their body's own call of the builtin (``log`` inside the log body, which states the
# negative-argument NaN, ``max`` inside the NaN-propagating max).
_BUILTINS = {"exp": "exp", "exp2": "exp2", "log": "log", "log2": "log2", "sin": "sin", "cos": "cos", "tan": "tan",
             "tanh": "tanh", "sinh": "sinh", "cosh": "cosh", "asinh": "asinh", "acosh": "acosh", "atanh": "atanh",
             "sqrt": "sqrt", "rsqrt": "inverseSqrt", "floor": "floor", "ceil": "ceil", "rint": "round",
             "trunc": "trunc", "fabs": "abs", "popcount": "countOneBits", "min": "min", "max": "max",
             "vector4": "vec4"}
#: The float ops WGSL lacks or leaves open, each expanded into its kernel-IR body before printing: all of them.
EXPANDED = frozenset(BODIES)



def renders_primitive(prim) -> bool:
    """Whether WGSL prints the kernel op of a one-function unary primitive (else it is decomposed)."""
    from fnarray.lowering.kernels.facts import FACTS
    fact = FACTS.get(prim)
    name = fact.func if fact is not None else None
    return name is None or name in _BUILTINS or name in EXPANDED

# The one function printed before a kernel: an infinity or NaN constant is written as a call of it, which is
# never a WGSL constant expression (Tint, Chromium's compiler, rejects a constant bitcast<f32> whose value is not
# finite). Everything else WGSL lacks is expanded into kernel IR before printing (transcendental.BODIES).
_BITS_FN = """
fn fa_f32_bits(b: u32) -> f32 {
    return bitcast<f32>(b);
}"""


def _float_literal(x, d) -> str:
    """A WGSL literal of the float ``x`` of dtype ``d`` (bit patterns for what WGSL may not parse)."""
    if d == F16:
        h = np.float16(x)
        if np.isfinite(h) and (h == 0 or abs(h) >= np.finfo(F16).tiny) and not (h == 0 and np.signbit(h)):
            text = repr(float(h))
            return text + "h" if h >= 0 else f"({text}h)"
        return f"f16({_float_literal(float(h), F32)})"
    bits = int(np.asarray(x, F32).view(np.uint32))
    if not np.isfinite(x):
        return f"fa_f32_bits({bits:#010x}u)"
    if (x != 0 and abs(x) < np.finfo(F32).tiny) or bits == 0x80000000:
        return f"bitcast<f32>({bits:#010x}u)"
    text = str(np.float32(x))
    if abs(float(text)) > float(np.finfo(F32).max):
        # The shortest round-trip decimal of +-f32 max (3.4028235e+38) lies past it: Tint (Chrome) rejects it.
        text = repr(float(np.float32(x)))
    if "e" not in text and "." not in text:
        text += ".0"
    return text + "f" if x >= 0 else f"({text}f)"


@dataclasses.dataclass(frozen=True)
class WGSLLayout:
    """How the runtime binds a kernel: buffer parameter ``k`` at binding ``k``, then (when the kernel
    has scalar parameters) one uniform struct at binding ``uniform_binding``.

    ``uniform_fields``: ``(name, dtype)`` of the struct in order, each field 4 bytes (``bool`` as
    ``u32``, ``float16`` as ``f32``); ``group_size``: the work-group size (x, y, z).
    """

    buffers: tuple
    uniform_fields: tuple
    uniform_binding: int | None
    group_size: tuple


def wgsl_layout(kernel: Kernel) -> WGSLLayout:
    """The binding layout and work-group size of ``kernel`` (what ``render_wgsl`` prints)."""
    bufs = tuple(p for p in kernel.params if isinstance(p, BufferParam))
    fields = tuple((p.name, np.dtype(p.dtype)) for p in kernel.params if isinstance(p, ScalarParam))
    gs = tuple(kernel.local_size) if kernel.local_size is not None else (DEFAULT_GROUP_SIZE,)
    gs = gs + (1,) * (3 - len(gs))
    return WGSLLayout(bufs, fields, len(bufs) if fields else None, gs)


def uniform_bytes(layout: WGSLLayout, values: dict) -> bytes:
    """The uniform struct of ``layout`` filled with ``values`` (scalar parameter name -> value)."""
    out = bytearray()
    for name, d in layout.uniform_fields:
        v = values[name]
        if d == BOOL:
            out += np.uint32(bool(v)).tobytes()
        elif d == F16:
            out += np.float32(v).tobytes()
        else:
            out += np.asarray(v, d).tobytes()
    out += b"\0" * (-len(out) % 16)
    return bytes(out)


class WGSLRenderer(CStyleRenderer):
    types = _TYPES
    storage_types = {BOOL: "u32", **{d: "u32" for d in _BYTES}}

    def __init__(self):
        self._layout = None
        self._workgroup_arrays = []
        self._atomic = {}   # buffers updated atomically: name -> value dtype (declared array<atomic<...>>)

    # ------------------------------------------------------------------ rewrites before printing
    def rewrite(self, kernel: Kernel) -> Kernel:
        # The spellings first (a float rem becomes fmod), then the bodies of what WGSL lacks, then the spellings
        # of what the bodies wrote.
        kernel = expand(super().rewrite(kernel), EXPANDED, zero_ops=True)
        return super().rewrite(kernel)

    def rewrite_expr(self, e):
        if isinstance(e, Op):
            a = e.args
            if e.op in ("shl", "shr") and a[1].dtype != U32:
                return Op(e.op, (a[0], Cast(a[1], U32)), e.dtype)
            if e.op == "xor" and e.dtype == BOOL:
                return Op("ne", a, BOOL)
            if e.op == "rem" and e.dtype.kind == "i" and not _positive_const(a[1]):
                # a - (a / b) * b: GLSL-based drivers leave % of negative operands undefined (a constant
                # divisor only comes from index arithmetic, whose dividends are never negative).
                return Op("sub", (a[0], Op("mul", (Op("div", a, e.dtype), a[1]), e.dtype)), e.dtype)
            if e.op == "rem" and e.dtype.kind == "f":
                return Op("fmod", a, e.dtype)
            if e.op == "ne" and a[0].dtype.kind == "f":
                # Drivers compile != on floats as an ordered comparison (NaN != 0 false): negate == instead.
                return Op("lnot", (Op("eq", a, BOOL),), BOOL)
            if e.op in ("lt", "le", "gt", "ge") and a[0].dtype == BOOL:
                return Op(e.op, (Cast(a[0], U32), Cast(a[1], U32)), e.dtype)
        return e

    def render(self, kernel: Kernel) -> str:
        layout = wgsl_layout(kernel)
        pre = [Let(name, Sym(f"fa_args.{name}", d)) if d not in (BOOL, F16) else
               Let(name, Cast(Sym(f"fa_args.{name}", U32 if d == BOOL else F32), d))
               for name, d in layout.uniform_fields]
        self._layout = layout
        self._workgroup_arrays = [s for s in _array_decls(kernel.body) if s.space == "local"]
        self._atomic = atomic_buffers(kernel.body)
        bytes_stored = _byte_stores(kernel.body)
        self._atomic.update({p.name: p.dtype for p in layout.buffers if p.name in bytes_stored})
        try:
            return super().render(dataclasses.replace(kernel, body=tuple(pre) + _without_local_arrays(kernel.body)))
        finally:
            self._layout = None
            self._workgroup_arrays = []
            self._atomic = {}

    # ------------------------------------------------------------------ hooks
    def literal(self, c: Const) -> str:
        d, v = c.dtype, c.value
        if d == BOOL:
            return "true" if v else "false"
        if d in LOW_BIT:   # a low-bit constant (a literal broadcast) is its byte, in a u32 as kernels hold it
            return f"{c.bits[0]}u"
        if d == I32:
            v = int(v)
            return f"{v}i" if v >= 0 else ("bitcast<i32>(0x80000000u)" if v == -2**31 else f"({v}i)")
        if d == U32:   # bit masks in hex
            return f"{int(v)}u" if int(v) < 0x10000 else f"{int(v):#010x}u"
        if d in (F32, F16):
            return _float_literal(float(v), d)
        if d == C64:
            z = complex(v)
            return f"vec2<f32>({_float_literal(z.real, F32)}, {_float_literal(z.imag, F32)})"
        raise TypeError(f"WGSL has no {d.name} literal (the webgpu backend computes in "
                        f"{', '.join(sorted(t.name for t in DTYPES))})")

    def special(self, e: Special) -> str:
        if e.kind == "lane":
            return "i32(fa_lane)"
        if e.kind == "global_size":
            return f"i32(fa_nwg.{_XYZ[e.dim]} * {self._layout.group_size[e.dim]}u)"
        return f"i32({_SPECIAL_BUILTINS[e.kind]}.{_XYZ[e.dim]})"

    def cast(self, x: str, dtype) -> str:
        return f"{self.type_name(dtype)}({x})"

    def broadcast(self, value: str, lane: int) -> str:
        return f"subgroupBroadcast({value}, {lane}u)"

    def to_storage(self, value: str, dtype) -> str:
        if np.dtype(dtype) in _BYTES:
            raise TypeError(f"WGSL stores no single bytes: {np.dtype(dtype).name} results are written by the "
                            "atomic byte store (store), never as a word")
        return f"select(0u, 1u, {value})"

    def from_storage(self, text: str, dtype) -> str:
        return f"({text} != 0u)"

    def bitcast(self, x: str, dtype) -> str:
        return f"bitcast<{self.type_name(dtype)}>({x})"

    def select(self, cond: str, a: str, b: str, dtype) -> str:
        return f"select({b}, {a}, {cond})"

    # A buffer updated atomically is an array of atomic<i32>/atomic<u32> (float32 as the bits, atomic<u32>):
    # WGSL then allows only atomic accesses of it, so its loads and stores are atomicLoad/atomicStore.
    def load(self, space, name, index, dtype) -> str:
        if space == "global" and np.dtype(dtype) in _BYTES:   # byte i of a buffer of u32 words
            word = f"atomicLoad(&{name}[({index}) >> 2u])" if name in self._atomic else f"{name}[({index}) >> 2u]"
            return f"(({word} >> ((u32({index}) & 3u) << 3u)) & 255u)"
        if space == "global" and name in self._atomic:
            text = f"atomicLoad(&{name}[{index}])"
            return f"bitcast<f32>({text})" if np.dtype(dtype) == F32 else text
        return super().load(space, name, index, dtype)

    def store(self, space, name, index, value, dtype) -> str:
        if space == "global" and np.dtype(dtype) in LOW_BIT:   # byte i of word i / 4: XOR the old byte to the new
            word, shift = f"&{name}[({index}) >> 2u]", f"((u32({index}) & 3u) << 3u)"
            old = f"((atomicLoad({word}) >> {shift}) & 255u)"
            return f"atomicXor({word}, ((u32({value}) & 255u) ^ {old}) << {shift});"
        if space == "global" and name in self._atomic:
            bits = f"bitcast<u32>({value})" if np.dtype(dtype) == F32 else value
            return f"atomicStore(&{name}[{index}], {bits});"
        return super().store(space, name, index, value, dtype)

    def atomic(self, s, value: str, index: str) -> list:
        """``atomicAdd``/``atomicMax``/``atomicMin`` on i32/u32; on float32 an ``atomicCompareExchangeWeak`` loop
        on the bits (an atomic<u32> buffer)."""
        d = np.dtype(s.value.dtype)
        ref = f"&{s.name}[{index}]"
        if d.kind in "iu":
            call = f"atomic{s.op.capitalize()}({ref}, {value})"
            return [f"let {s.result}: {self.type_name(d)} = {call};" if s.result else f"{call};"]
        new = {"add": "(fa_a + fa_v)", "max": "select(fa_v, fa_a, (fa_a > fa_v) || !(fa_a == fa_a))",
               "min": "select(fa_v, fa_a, (fa_a < fa_v) || !(fa_a == fa_a))"}[s.op]
        lines = [f"var {s.result}: f32;"] if s.result else []
        lines += ["{", f"    let fa_v: f32 = {value};",
                  f"    var fa_old: u32 = atomicLoad({ref});",
                  "    loop {",
                  "        let fa_a = bitcast<f32>(fa_old);",
                  f"        let fa_r = atomicCompareExchangeWeak({ref}, fa_old, bitcast<u32>({new}));",
                  "        if (fa_r.exchanged) { break; }",
                  "        fa_old = fa_r.old_value;",
                  "    }"]
        if s.result:
            lines.append(f"    {s.result} = bitcast<f32>(fa_old);")
        return lines + ["}"]

    def let(self, name, dtype, value) -> str:
        return f"let {name}: {self.type_name(dtype)} = {value};"

    def decl(self, name, dtype, value) -> str:
        return f"var {name}: {self.type_name(dtype)} = {value};"

    def array_decl(self, s: ArrayDecl) -> str:
        return f"var {s.name}: array<{self.type_name(s.dtype)}, {s.size}>;"

    def for_header(self, var, start, stop, step) -> str:
        return f"for (var {var}: i32 = {start}; {var} < {stop}; {var} += {step})"

    def barrier(self, space: str = "local") -> str:
        if space == "global":  # storageBarrier orders the buffers only; the second one the workgroup arrays
            return "storageBarrier(); workgroupBarrier();"
        return "workgroupBarrier();"

    def signature(self, kernel: Kernel) -> str:
        gs = ", ".join(f"{g}" for g in self._layout.group_size)
        # the subgroup builtin only in kernels that read it (a device without the feature compiles the others)
        lane = any(isinstance(e, Special) and e.kind == "lane" for e in walk_exprs(kernel.body))
        return (f"@compute @workgroup_size({gs})\nfn {kernel.name}(@builtin(global_invocation_id) fa_gid: vec3<u32>, "
                "@builtin(local_invocation_id) fa_lid: vec3<u32>, @builtin(workgroup_id) fa_wid: vec3<u32>, "
                "@builtin(num_workgroups) fa_nwg: vec3<u32>"
                + (", @builtin(subgroup_invocation_id) fa_lane: u32)" if lane else ")"))

    def prelude(self, kernel: Kernel) -> list:
        exprs = list(walk_exprs(kernel.body))
        uses_f16 = any(getattr(p, "dtype", None) == F16 for p in kernel.params) or any(
            e.dtype == F16 for e in exprs) or any(s.dtype == F16 for s in self._workgroup_arrays) or any(
            s.dtype == F16 for s in _array_decls(kernel.body))
        lines = ["enable f16;", ""] if uses_f16 else []
        lay = self._layout
        for k, p in enumerate(lay.buffers):
            access = "read_write" if p.writes else "read"
            elem = self.storage_name(p.dtype)
            if p.name in self._atomic:
                elem = f"atomic<{'u32' if np.dtype(p.dtype) == F32 else elem}>"
            if p.uniform:   # BufferParam.uniform: a read-only array of fixed length in a uniform buffer
                lines.append(f"@group(0) @binding({k}) var<uniform> {p.name}: array<{elem}, {p.uniform}>;")
                continue
            lines.append(f"@group(0) @binding({k}) var<storage, {access}> {p.name}: array<{elem}>;")
        if lay.uniform_fields:
            lines.append("struct FaArgs {")
            for name, d in lay.uniform_fields:
                lines.append(f"    {name}: {_UNIFORM_TYPES[d]},")
            lines.append("}")
            lines.append(f"@group(0) @binding({lay.uniform_binding}) var<uniform> fa_args: FaArgs;")
        for s in self._workgroup_arrays:
            lines.append(f"var<workgroup> {s.name}: array<{self.type_name(s.dtype)}, {s.size}>;")
        if any(isinstance(e, Const) and e.dtype.kind == "f" and not np.isfinite(e.value) for e in exprs):
            lines.extend(_BITS_FN.splitlines())
        lines.append("")
        return lines

    # ------------------------------------------------------------------ function ops
    def call(self, e: Op, args: list) -> str:
        op, d = e.op, e.args[0].dtype
        if op in ("min", "max") and d.kind != "f":
            return super().call(e, args)   # integers: WGSL's min/max; bools: & and |
        name = _BUILTINS.get(op)
        if name is None:
            raise TypeError(f"WGSL renderer has no rule for the kernel op {op!r}")
        return f"{name}({', '.join(args)})"


def _without_local_arrays(stmts) -> tuple:
    """The statements without their work-group array declarations (WGSL declares them at module scope)."""
    return without(stmts, lambda s: isinstance(s, ArrayDecl) and s.space == "local")


def _byte_stores(stmts) -> set:
    """The buffers that the statements store single bytes into (a ``Store`` of a ``LOW_BIT`` value, printed as
    an atomic byte update); a ``uint32`` word stored into a byte buffer (``MapGroup.packed_roots``) is not one."""
    return {s.name for s in walk_stmts(stmts) if isinstance(s, Store) and np.dtype(s.value.dtype) in LOW_BIT}


def _positive_const(e) -> bool:
    return isinstance(e, Const) and e.value > 0


def _array_decls(stmts):
    return (s for s in walk_stmts(stmts) if isinstance(s, ArrayDecl))


def render_wgsl(kernel: Kernel) -> str:
    """WGSL source of ``kernel`` (deterministic: the same kernel gives the same text).

    Bindings and the uniform struct follow ``wgsl_layout(kernel)``. Raises ``TypeError``
    for a dtype or op WGSL cannot express (the scheduler never gives it one for a webgpu
    device: it only uses the dtypes of the device's ``Capabilities``).
    """
    return WGSLRenderer().render(kernel)  # a renderer per call: it holds the kernel's layout while it prints
