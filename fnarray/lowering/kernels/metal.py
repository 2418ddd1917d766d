"""Metal Shading Language from the kernel IR: a thin subclass of the C-style renderer, for MLX's
``mx.fast.metal_kernel``.

MSL is C++14 with address spaces, so most of C's spellings (the base, ``cstyle.py``) hold. What differs is
declared here:

- Type names: ``char``/``uchar``, ``short``/``ushort``, ``uint``, ``long``/``ulong`` (64 bits on Metal),
  ``half``; Metal has no ``double`` (the capabilities of the mlx backend's Metal kernels list no float64). A
  ``bool`` buffer holds MSL's one-byte ``bool``, as MLX stores it. 64-bit literals end in ``L``/``UL``, a
  ``half`` literal is a cast of the ``float`` one; ``NAN``/``INFINITY`` are MSL's own constants.
- Work-group arrays are ``threadgroup`` arrays, declared at the kernel's scope (the Pallas group hoists every
  array declaration there). Barriers are ``metal::threadgroup_barrier`` with ``mem_threadgroup`` (and
  ``mem_device`` for a barrier over the buffers too); bit casts are ``as_type<T>(x)``.
- Work-item builtins are the kernel attributes MLX adds to the signature it writes when the body names them:
  ``thread_position_in_grid``, ``thread_position_in_threadgroup``, ``threadgroup_position_in_grid`` and
  ``threads_per_grid`` (``uint3``), read as ``int``.
- Math is ``metal::<name>`` of the functions in ``FUNCTIONS`` (MSL's standard library). The float ops Metal
  lacks (``erf``, ``lgamma``, ``log1p``, ``expm1``, ``hypot``) and those whose edge cases MSL leaves open or that
  cannot be checked here (the rest of ``transcendental.BODIES``) are expanded into their kernel-IR bodies, as
  for WGSL: the bodies are tested on the OpenCL and WebGPU devices that run here. Float division stays Metal's
  (MLX compiles its kernels with fast math off: IEEE division). ``%`` of floats, which C++ lacks, becomes
  ``fmod``; ``min``/``max`` of bools become ``&``/``|``.

``mx.fast.metal_kernel`` takes the body of the kernel function only and writes the signature itself, from the
input and output names, the arrays' dtypes and the attributes the body names (``metal_source``). ``render``
prints the whole function as MLX writes it (``[[kernel]] void name(const device T* in0 [[buffer(0)]], ...)``),
for golden files and the syntax check (``tests/test_metal_kernels.py``); recent MLX versions pass inputs of fewer
than 8 elements in the ``constant`` address space instead of ``device``, which the body indexes the same way.

References: Apple's Metal Shading Language Specification (address spaces, ``threadgroup_barrier``, kernel
attributes, the math library); MLX's ``mx.fast.metal_kernel`` documentation ("Custom Metal Kernels") and the
signature its ``write_signature`` (``mlx/fast.cpp``) writes.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from fnarray.lowering.kernels.cstyle import CStyleRenderer
from fnarray.lowering.kernels.ir import (
    BufferParam,
    Const,
    Kernel,
    Op,
    ScalarParam,
    Special,
    walk_exprs,
)
from fnarray.lowering.kernels.transcendental import BODIES, expand

__all__ = ["MetalRenderer", "MetalSource", "render_metal", "metal_source", "DTYPES", "FUNCTIONS", "EXPANDED",
           "MLX_TYPE_NAMES"]

F16, F32 = np.dtype(np.float16), np.dtype(np.float32)
BOOL = np.dtype(np.bool_)

_TYPES = {
    BOOL: "bool", np.dtype(np.int8): "char", np.dtype(np.uint8): "uchar", np.dtype(np.int16): "short",
    np.dtype(np.uint16): "ushort", np.dtype(np.int32): "int", np.dtype(np.uint32): "uint",
    np.dtype(np.int64): "long", np.dtype(np.uint64): "ulong", F16: "half", F32: "float",
}
#: The dtypes Metal kernels compute in (no float64: Metal has none; bfloat16 and complex are left out).
DTYPES = frozenset(_TYPES)
#: The names MLX's ``get_type_string`` gives each dtype in the signature it writes (``float16_t`` is MLX's
#: ``typedef half``).
MLX_TYPE_NAMES = {
    BOOL: "bool", np.dtype(np.int8): "int8_t", np.dtype(np.uint8): "uint8_t", np.dtype(np.int16): "int16_t",
    np.dtype(np.uint16): "uint16_t", np.dtype(np.int32): "int32_t", np.dtype(np.uint32): "uint32_t",
    np.dtype(np.int64): "int64_t", np.dtype(np.uint64): "uint64_t", F16: "float16_t", F32: "float",
}

#: Kernel-IR func ops printed as ``metal::<name>`` (MSL's standard library has each, for float and half; the
#: integer ones for the integer types). Any other func op left after the expansion is an error.
FUNCTIONS = frozenset({"acos", "acosh", "asin", "asinh", "atan", "atan2", "atanh", "ceil", "copysign", "cos",
                       "cosh", "exp", "exp2", "fabs", "floor", "fmod", "log", "log10", "log2", "max", "min",
                       "pow", "rint", "rsqrt", "sin", "sinh", "sqrt", "tan", "tanh", "trunc", "popcount",
                       "isnan", "isinf", "isfinite"})
#: The float ops printed from their kernel-IR bodies (``transcendental.BODIES``) rather than Metal's library.
EXPANDED = frozenset(BODIES) - {"div"}

# The kernel attribute of each work-item builtin (MLX declares those the body names, as uint3).
_ATTRIBUTES = {"global_id": "thread_position_in_grid", "local_id": "thread_position_in_threadgroup",
               "group_id": "threadgroup_position_in_grid", "global_size": "threads_per_grid"}
_XYZ = "xyz"


class MetalRenderer(CStyleRenderer):
    """MSL: the C-style renderer with Metal's type names, ``threadgroup`` arrays, barriers, ``as_type`` bit
    casts, MLX's kernel attributes and ``metal::`` math."""

    types = _TYPES
    int_suffix = {np.dtype(np.int32): "", np.dtype(np.uint32): "u", np.dtype(np.int64): "L",
                  np.dtype(np.uint64): "UL"}
    array_spaces = {"local": "threadgroup "}

    # ------------------------------------------------------------------ rewrites before printing
    def rewrite(self, kernel: Kernel) -> Kernel:
        # The spellings first (a float rem becomes fmod), then the bodies, then the spellings the bodies need.
        kernel = expand(super().rewrite(kernel), EXPANDED)
        return super().rewrite(kernel)

    def rewrite_expr(self, e):
        if isinstance(e, Op) and e.op == "rem" and e.dtype.kind == "f":
            return Op("fmod", e.args, e.dtype)
        return e

    # ------------------------------------------------------------------ hooks
    def literal(self, c: Const) -> str:
        if c.dtype == F16:   # half literals as casts of float ones: one spelling of NaN, infinities, subnormals
            return self.cast(super().literal(Const(np.asarray(c.value, F32).tobytes(), F32)), F16)
        return super().literal(c)

    def special(self, e: Special) -> str:
        return f"((int){_ATTRIBUTES[e.kind]}.{_XYZ[e.dim]})"

    def bitcast(self, x: str, dtype) -> str:
        return f"as_type<{self.type_name(dtype)}>({x})"

    def barrier(self, space: str = "local") -> str:
        if space == "global":
            return "metal::threadgroup_barrier(metal::mem_flags::mem_device | metal::mem_flags::mem_threadgroup);"
        return "metal::threadgroup_barrier(metal::mem_flags::mem_threadgroup);"

    def call(self, e: Op, args: list) -> str:
        op, d = e.op, e.args[0].dtype
        if op in ("min", "max") and d == BOOL:
            return super().call(e, args)   # & and |
        if op == "fabs" and d.kind != "f":
            op = "abs"
        elif op not in FUNCTIONS:
            raise TypeError(f"the Metal renderer has no function for the kernel op {op!r} (Metal's library has "
                            f"{', '.join(sorted(FUNCTIONS))})")
        return f"metal::{op}({', '.join(args)})"

    def signature(self, kernel: Kernel) -> str:
        """The signature MLX writes around ``source(kernel)``: inputs, then outputs, then the attributes the body
        names (MLX's order: alphabetical)."""
        for p in kernel.params:
            self.type_name(p.dtype)   # a parameter of a dtype Metal lacks raises here
        ins, outs, attributes = _interface(kernel)
        params = []
        for p in ins:
            t = MLX_TYPE_NAMES[np.dtype(p.dtype)]
            ref = "&" if isinstance(p, ScalarParam) else "*"   # a scalar: a 0-d input, which MLX passes by reference
            params.append(f"const {'constant' if ref == '&' else 'device'} {t}{ref} {p.name}")
        params += [f"device {MLX_TYPE_NAMES[np.dtype(p.dtype)]}* {p.name}" for p in outs]
        params = [f"  {p} [[buffer({k})]]" for k, p in enumerate(params)] + [f"  uint3 {a} [[{a}]]" for a in attributes]
        return f"[[kernel]] void {kernel.name}(\n" + ",\n".join(params) + ")"

    def source(self, kernel: Kernel) -> MetalSource:
        """The parts of ``kernel`` that ``mx.fast.metal_kernel`` takes."""
        k = self.rewrite(kernel)
        lines: list = []
        self._stmts(k.body, 1, lines)
        for p in k.params:
            self.type_name(p.dtype)   # a parameter of a dtype Metal lacks raises here
        ins, outs, attributes = _interface(k)
        return MetalSource(k.name, "\n".join(self.prelude(k)), "\n".join(lines) + "\n",
                           tuple(p.name for p in ins), tuple(p.name for p in outs), attributes)


def _interface(kernel: Kernel):
    """``(inputs, outputs, attributes)``: the parameters the kernel only reads (buffers and scalars) and the
    buffers it writes, in parameter order, and the kernel attributes its body names, alphabetically (MLX's
    order)."""
    ins = tuple(p for p in kernel.params if isinstance(p, ScalarParam) or not p.writes)
    outs = tuple(p for p in kernel.params if isinstance(p, BufferParam) and p.writes)
    kinds = {e.kind for e in walk_exprs(kernel.body) if isinstance(e, Special)}
    return ins, outs, tuple(sorted(_ATTRIBUTES[x] for x in kinds))


@dataclasses.dataclass(frozen=True)
class MetalSource:
    """What ``mx.fast.metal_kernel`` takes for one kernel: ``name``, ``header`` (text before the function),
    ``source`` (the function's body), ``input_names`` (the read-only buffers and the scalars, in parameter
    order) and ``output_names`` (the buffers the kernel writes); ``attributes``: the kernel attributes the body
    names, which MLX adds to the signature it writes."""

    name: str
    header: str
    source: str
    input_names: tuple
    output_names: tuple
    attributes: tuple


_RENDERER = MetalRenderer()


def metal_source(kernel: Kernel) -> MetalSource:
    """The parts of ``kernel`` that ``mx.fast.metal_kernel`` takes (deterministic: the same kernel gives the same
    text). Raises ``TypeError`` for a dtype or an op Metal cannot express."""
    return _RENDERER.source(kernel)


def render_metal(kernel: Kernel) -> str:
    """The MSL kernel function of ``kernel`` as MLX's ``mx.fast.metal_kernel`` writes it around
    ``metal_source(kernel).source`` (inputs as ``device`` buffers). Raises ``TypeError`` for a dtype or an op
    Metal cannot express."""
    return _RENDERER.render(kernel)
