"""``pallas_call`` on mlx: the kernel rendered as Metal and run by ``mx.fast.metal_kernel`` on Apple silicon;
elsewhere fnarray's interpreter, with the reason in a ``FallbackWarning``.

The body goes through the same two steps as on opencl and webgpu: the Pallas kernel group
(``kernels/groups/pallas.py``) renders it into the kernel IR for ``METAL_CAPS`` (one threadgroup per program
instance, or per output block for the instances that share one, walked in the grid's order: ``revisited_axes``;
``dot`` operands, reductions and loop carries in threadgroup memory), and the Metal renderer
(``kernels/metal.py``) prints it. ``mx.fast.metal_kernel`` then gets (``MetalCall``):

- ``source``: the body of the kernel function (MLX writes the signature), ``header``: what goes before it;
- ``input_names``: the operands the kernel reads, ``output_names``: the results it writes;
- ``grid``: program instances x threadgroup size, in threads (MLX dispatches ``grid`` threads in threadgroups of
  ``threadgroup``), ``threadgroup``: ``(threadgroup size, 1, 1)``;
- ``output_shapes``/``output_dtypes``: the results', and ``init_value=0``: results start as zeros, as in the
  interpreter (an element no instance stores stays 0); no ``template`` (the types are spelled out).

A 0-d operand or result travels as one element (MLX would make a 0-d input a reference, which the body does not
index). What runs in the interpreter instead, with the reason (``unsupported_reason``, which the backend's
``supports`` asks): every ``pallas_call`` where MLX has no Metal (``mx.metal.is_available()`` false: MLX on
Linux, whose ``mlx[cpu]`` has no GPU kernels), on MLX's CPU device, with ``interpret=True``, with
``input_output_aliases`` (``mx.fast.metal_kernel`` makes fresh outputs: a result cannot start as an operand),
and whatever the kernel group or the renderer cannot express (atomics, operations without a kernel form,
blocks past the threadgroup-memory budget, dtypes Metal lacks).

Checked without Apple hardware (``tests/test_metal_kernels.py``): the rendered source of each example kernel
(golden files), its syntax with g++ against a shim of MSL's names, its results when g++ runs it on the CPU (a
thread per Metal thread), and the arguments passed to a stand-in for ``mx.fast.metal_kernel``. It has not run
on a Metal device.
"""

from __future__ import annotations

import dataclasses
import hashlib

import numpy as np

from fnarray.core import dtypes
from fnarray.core.pallas import pallas_call_p
from fnarray.core.passes import program_from_eqn
from fnarray.devices.backend import Capabilities
from fnarray.lowering.kernels.groups.pallas import Unrenderable, hoisted_kernel, render
from fnarray.lowering.kernels.groups.pallas import unsupported_reason as kernel_reason
from fnarray.lowering.kernels.ir import Kernel
from fnarray.lowering.kernels.metal import DTYPES, MetalSource, metal_source
from fnarray.lowering.mlx.common import RULES, mx, mx_dtype

__all__ = ["METAL_CAPS", "NO_METAL", "MetalCall", "metal_available", "metal_call", "unsupported_reason",
           "mlx_pallas_call"]

#: What the Pallas group renders for: Apple GPUs' threadgroups (up to 1,024 threads; the group uses at most
#: 256) with 32 KiB of threadgroup memory (the group keeps to its 16 KiB budget), and a grid MLX counts in
#: ``int`` threads (so at most ``2**31 - 1``: past that each threadgroup walks several instances).
METAL_CAPS = Capabilities(
    dtypes=frozenset(d for d in dtypes.ALL_DTYPES if np.dtype(d) in DTYPES), max_workgroup_size=1024,
    max_dispatch=(2**31 - 1) // 1024, local_memory=True, tiling_pays=True, control_flow="host")

NO_METAL = ("pallas_call runs in fnarray's interpreter on mlx: this MLX has no Metal (mx.metal.is_available() is "
            "False, as for mlx[cpu] on Linux); on Apple silicon the kernel runs as Metal through "
            "mx.fast.metal_kernel")


@dataclasses.dataclass(frozen=True)
class MetalCall:
    """One ``pallas_call`` as an ``mx.fast.metal_kernel`` call: ``kernel`` (the kernel IR), ``source``
    (``kernels.metal.MetalSource``), ``operands``: the operand index of each input name, ``results``: the result
    index of each output name, ``grid`` and ``threadgroup`` (3-tuples, in threads)."""

    kernel: Kernel
    source: MetalSource
    operands: tuple
    results: tuple
    grid: tuple
    threadgroup: tuple


def metal_available() -> bool:
    """Whether this MLX runs Metal kernels (``mx.metal.is_available()``)."""
    return mx is not None and bool(mx.metal.is_available())


def metal_call(eqn) -> MetalCall:
    """The Metal kernel of one ``pallas_call`` equation and how to call it. Raises ``Unrenderable`` (with the
    reason) for a body the kernel IR or Metal cannot express."""
    names: dict = {}

    def buffers(b):
        ins = [b.buffer(("in", k), a.aval.dtype, False, "in") for k, a in enumerate(eqn.inputs)]
        outs = [b.buffer(("out", k), a.dtype, True, "out") for k, a in enumerate(eqn.params["out_avals"])]
        names.update({n: ("in", k) for k, n in enumerate(ins)})
        names.update({n: ("out", k) for k, n in enumerate(outs)})
        return ins, outs

    b, gsize, lsize = render(eqn, METAL_CAPS, buffers)
    kernel = hoisted_kernel(b, lsize)
    try:
        src = metal_source(kernel)
    except TypeError as ex:
        raise Unrenderable(f"the Metal renderer: {ex}") from None
    if any(names.get(n, ("",))[0] != "in" for n in src.input_names):
        raise Unrenderable("the kernel has scalar parameters, which the Metal call does not pass")
    # MLX caches a compiled library by the kernel's name: the name carries a digest of the source.
    digest = hashlib.sha1((src.header + src.source).encode()).hexdigest()[:12]
    src = dataclasses.replace(src, name=f"fnarray_{src.name}_{digest}")
    return MetalCall(kernel, src, tuple(names[n][1] for n in src.input_names),
                     tuple(names[n][1] for n in src.output_names), (int(gsize[0]), 1, 1), (int(lsize[0]), 1, 1))


_CALLS: dict = {}
_MAX_CALLS = 256


def _cached_call(eqn):
    """``metal_call(eqn)``, or the ``Unrenderable`` it raised, once per body, blocks and operand types."""
    p = eqn.params
    key = (p["body"], p["grid"], p["in_blocks"], p["out_blocks"], p["compiler_params"], p["scratch"],
           tuple((a.aval.shape, a.aval.dtype) for a in eqn.inputs), tuple((a.shape, a.dtype) for a in p["out_avals"]))
    try:
        hit = _CALLS.get(key)
    except TypeError:   # parameters that do not hash: render every time
        key, hit = None, None
    if hit is None:
        try:
            hit = metal_call(eqn)
        except Unrenderable as ex:
            hit = ex
        if key is not None:
            if len(_CALLS) >= _MAX_CALLS:   # the oldest first: the cache holds the kernel bodies alive
                del _CALLS[next(iter(_CALLS))]
            _CALLS[key] = hit
    return hit


def unsupported_reason(eqn, device) -> str | None:
    """Why ``device`` (an mlx device) runs this ``pallas_call`` equation in fnarray's interpreter, or ``None``
    (it runs as a Metal kernel)."""
    p = eqn.params
    if p["interpret"]:
        return kernel_reason(eqn, METAL_CAPS)
    if not metal_available():
        return NO_METAL
    if device.platform != "gpu":
        return (f"pallas_call runs in fnarray's interpreter on {device} (MLX's CPU device): mx.fast.metal_kernel "
                "runs Metal kernels on the GPU only")
    if p["aliases"]:
        return ("pallas_call with input_output_aliases runs in fnarray's interpreter on mlx: mx.fast.metal_kernel "
                "makes fresh outputs, so a result cannot start as an operand")
    for a in list(eqn.inputs) + list(eqn.outputs):
        if a.aval.dtype not in METAL_CAPS.dtypes:
            return f"pallas_call of {a.aval.dtype.name} on mlx: Metal kernels have no {a.aval.dtype.name}"
    r = kernel_reason(eqn, METAL_CAPS)
    if r is not None:
        return r
    hit = _cached_call(eqn)
    return str(hit) if isinstance(hit, Exception) else None


def mlx_pallas_call(params, in_avals, out_avals):
    """``pallas_call`` as ``mx.fast.metal_kernel`` (where ``unsupported_reason`` found none)."""
    eqn = program_from_eqn(pallas_call_p, params, in_avals, out_avals).eqns[0]
    call = _cached_call(eqn)
    if isinstance(call, Exception):
        raise call
    src = call.source
    kernel = mx.fast.metal_kernel(name=src.name, input_names=list(src.input_names),
                                  output_names=list(src.output_names), source=src.source, header=src.header,
                                  ensure_row_contiguous=True, atomic_outputs=False)
    shapes = [tuple(out_avals[k].shape) or (1,) for k in call.results]
    types = [mx_dtype(out_avals[k].dtype) for k in call.results]

    def run(*arrays):
        results = [None] * len(out_avals)
        if call.results:
            ins = [arrays[k].reshape(1) if arrays[k].ndim == 0 else arrays[k] for k in call.operands]
            outs = kernel(inputs=ins, grid=call.grid, threadgroup=call.threadgroup, output_shapes=shapes,
                          output_dtypes=types, init_value=0)
            for k, o in zip(call.results, outs, strict=True):
                results[k] = o.reshape(tuple(out_avals[k].shape))
        for k, a in enumerate(out_avals):   # results the kernel never writes: zeros, as the interpreter's
            if results[k] is None:
                results[k] = mx.zeros(tuple(a.shape), dtype=mx_dtype(a.dtype))
        return results
    return run


RULES[pallas_call_p] = mlx_pallas_call
