"""Allocation limits: fnarray's own error for arrays larger than their device can hold.

Checked where sizes are known, before anything is allocated: when a program (or one eager
operation) is compiled for a device, every value it makes is measured against the device's
``Capabilities.max_buffer_bytes`` (one buffer) and ``memory_bytes`` (the outputs together); a
device that declares neither is held to the host's physical memory. On a backend whose compiler
decides which values get buffers (``Capabilities.memory_check == "compiled"``: XLA's fusion, the
kernel scheduler's inline values) a program whose values do not fit is not refused on that count:
its outputs are checked, and then what the lowered program allocates after fusion
(``Lowered.memory_use``, ``check_lowered``), so ``jit(lambda: ones((10**5, 10**5)).sum())`` runs
on jax:0 as it does under ``jax.jit``. Besides its results, an equation's scratch buffers
(``devices/scratch.py``: the padded, base-dilated operand a window reduction or convolution builds) are
counted with them (``check_eqn``), so a small result of a huge dilation is refused before it runs; on a
"compiled" backend such scratch sends the program to ``check_lowered``. What a backend reports at run
time (XLA's ``RESOURCE_EXHAUSTED``, NumPy's ``MemoryError``) is translated into the same
``ResourceExhaustedError`` by ``translate``.
"""

from __future__ import annotations

import functools
import math
import os

from fnarray.core.errors import ResourceExhaustedError
from fnarray.devices.scratch import SCRATCH, scratch_bytes

__all__ = ["host_memory_bytes", "limits", "check_avals", "check_program", "check_eqn", "check_lowered", "translate",
           "format_bytes"]


@functools.cache
def host_memory_bytes() -> int:
    """The host's physical memory in bytes (``sysconf``), or 2**63 where it cannot be read."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):
        return 2 ** 63


def format_bytes(n: int) -> str:
    """``n`` bytes in binary units (``4.00 TiB``)."""
    for unit, k in (("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << k:
            return f"{n / (1 << k):.2f} {unit}"
    return f"{n} B"


def limits(device) -> tuple[int, int]:
    """``(max bytes of one buffer, bytes of device memory)`` for ``device``."""
    caps = device.impl.capabilities(device)
    host = host_memory_bytes()
    memory = caps.memory_bytes or host
    return min(caps.max_buffer_bytes or memory, memory), memory


#: Values of at most this many bytes in all are not measured against a device (``check_avals``): every device
#: holds more in one buffer (OpenCL's embedded profile promises 1 MiB, WebGPU 256 MiB).
SMALL_BYTES = 1 << 16


def _nbytes(aval) -> int:
    return math.prod(aval.shape) * aval.dtype.itemsize


def _advice(device) -> str:
    return ("Use smaller arrays (process the data in chunks, e.g. with fnarray.lax.map or a scan over "
            "batches), a smaller dtype, or a device with more memory; fnarray.devices() lists them.")


def check_avals(avals, device, what: str = "this operation") -> None:
    """Raise ``ResourceExhaustedError`` if ``avals`` (values to allocate) cannot fit on ``device``.

    Args:
      avals: ``ShapedArray``-like values (``shape``, ``dtype``) to be allocated together.
      device: the target ``Device``.
      what: who allocates, for the message (``"fnarray.device_put"``, ``"jit(f)"``...).
    Raises:
      ResourceExhaustedError: one value larger than the device's largest buffer, or all together
        larger than its memory; the message names shape, dtype, bytes, device and what to do. Values of at most
        ``SMALL_BYTES`` in all are not measured.
    """
    total = 0
    for av in avals:
        total += _nbytes(av)
    if total <= SMALL_BYTES:  # (each new shape's first eager call of a primitive is checked: issue 28)
        return
    per_buffer, memory = limits(device)
    for av in avals:
        n = _nbytes(av)
        if n > per_buffer:
            raise ResourceExhaustedError(
                f"{what} would allocate {av.dtype}{list(av.shape)} ({format_bytes(n)}) on {device}, which holds "
                f"at most {format_bytes(per_buffer)} in one buffer (device memory {format_bytes(memory)}). "
                + _advice(device))
    if total > memory:
        raise ResourceExhaustedError(
            f"{what} would allocate {format_bytes(total)} on {device} (its results: "
            f"{', '.join(f'{av.dtype}{list(av.shape)}' for av in avals)}), more than its memory "
            f"({format_bytes(memory)}). " + _advice(device))


def check_program(program, device, what: str = "this program") -> bool:
    """``check_avals`` for every value ``program`` makes at its top level and for its outputs together.

    Returns:
      ``True`` where everything fits; ``False`` where an intermediate value does not fit but the device's
      compiler decides what gets a buffer (``Capabilities.memory_check == "compiled"``): the caller then
      checks the lowered program with ``check_lowered``.
    Raises:
      ResourceExhaustedError: the outputs together, or (``memory_check == "values"``) one value, do not fit.
    """
    outs = [getattr(o, "aval", None) for o in program.outvars]
    check_avals([a for a in outs if a is not None and hasattr(a, "shape")], device, what)
    per_buffer, _ = limits(device)
    deferred = device.impl.capabilities(device).memory_check == "compiled"
    for e in program.eqns:
        for v in e.outputs:
            av = v.aval
            if math.prod(av.shape) * av.dtype.itemsize > per_buffer:  # (``_nbytes`` inline: a call an equation)
                if deferred:
                    return False
                check_avals([v.aval], device, f"{what} ({e.primitive.name})")
        if e.primitive not in SCRATCH:  # no scratch buffers (most primitives): no lists made (issue 28)
            continue
        in_avals = [getattr(v, "aval", None) for v in e.inputs]
        if not check_eqn(e.primitive, e.params, in_avals, [v.aval for v in e.outputs], device,
                         f"{what} ({e.primitive.name})"):
            return False
    return True


def check_eqn(primitive, params, in_avals, out_avals, device, what: str = "this operation") -> bool:
    """Check the scratch buffers one equation's implementation allocates (``devices.scratch.SCRATCH``: the
    padded, base-dilated operand of a window reduction or convolution), together with its results.

    Returns:
      ``True`` where they fit (or the primitive has none); ``False`` where they do not but the device's
      compiler decides what gets a buffer (``memory_check == "compiled"``): the caller measures the lowered
      program (``check_lowered``).
    Raises:
      ResourceExhaustedError: (``memory_check == "values"``) one scratch buffer larger than the device's
        largest, or scratch and results together larger than its memory; the message names the buffer, the
        operand's shape and the parameters that size it, and what to do.
    """
    use = scratch_bytes(primitive, params, in_avals, out_avals)
    if not use:
        return True
    per_buffer, memory = limits(device)
    results = sum(_nbytes(a) for a in out_avals)
    big = max(use, key=lambda u: u[1])
    total = results + sum(n for _, n in use)
    if big[1] <= per_buffer and total <= memory:
        return True
    if device.impl.capabilities(device).memory_check == "compiled":
        return False
    sizing = {k: params[k] for k in ("base_dilation", "lhs_dilation", "padding", "window_strides") if k in params}
    operand = next((a for a in in_avals if a is not None and hasattr(a, "shape")), None)
    given = f"an operand {operand.dtype}{list(operand.shape)}" if operand is not None else "its operands"
    limit = (f"at most {format_bytes(per_buffer)} in one buffer" if big[1] > per_buffer
             else f"{format_bytes(memory)} of memory")
    raise ResourceExhaustedError(
        f"{what} would allocate {big[0]} ({format_bytes(big[1])}; {format_bytes(total)} in all with its "
        f"results) on {device}, which holds {limit}: {primitive.name} of {given} with "
        f"{', '.join(f'{k}={v}' for k, v in sizing.items())} builds that buffer before it reads the windows "
        "(it grows with the dilation and the padding, not with the result). Use a smaller dilation or padding, "
        "compute the result in chunks (fnarray.lax.map over slices of the operand), or a device whose "
        "backend indexes the operand in place (jax, opencl, webgpu; fnarray.devices(all_backends=True)).")


def check_lowered(lowered, device, what: str = "this program") -> None:
    """Raise ``ResourceExhaustedError`` if the buffers ``lowered`` allocates after the backend's fusion
    (``Lowered.memory_use``: one largest buffer, all together) do not fit on ``device``."""
    use = lowered.memory_use()
    if use is None:
        return
    per_buffer, memory = limits(device)
    total = sum(n for _, n in use)
    big = max(use, key=lambda u: u[1], default=("nothing", 0))
    if big[1] > per_buffer or total > memory:
        limit = (f"at most {format_bytes(per_buffer)} in one buffer" if big[1] > per_buffer
                 else f"{format_bytes(memory)} of memory")
        raise ResourceExhaustedError(
            f"{what} would allocate {format_bytes(total)} on {device} after the {device.backend} backend fused "
            f"it (largest: {big[0]}, {format_bytes(big[1])}), which holds {limit}. " + _advice(device))


def _is_memory_error(e: BaseException) -> bool:
    if isinstance(e, ResourceExhaustedError):
        return False
    if isinstance(e, MemoryError):
        return True
    text = str(e)
    # XLA (JaxRuntimeError), PyOpenCL (MEM_OBJECT_ALLOCATION_FAILURE / OUT_OF_RESOURCES), MLX, wgpu
    return any(k in text for k in ("RESOURCE_EXHAUSTED", "MEM_OBJECT_ALLOCATION_FAILURE", "OUT_OF_RESOURCES",
                                   "OUT_OF_HOST_MEMORY", "Out of memory", "out of memory"))


def translate(e: BaseException, device, avals=(), what: str = "this operation"):
    """The ``ResourceExhaustedError`` for a backend's out-of-memory error ``e``, else ``None``."""
    if not _is_memory_error(e):
        return None
    shapes = ", ".join(f"{av.dtype}{list(av.shape)}" for av in avals)
    total = sum(_nbytes(av) for av in avals)
    _, memory = limits(device)
    return ResourceExhaustedError(
        f"{what} ran out of memory on {device} (device memory {format_bytes(memory)})"
        + (f" making {shapes} ({format_bytes(total)})" if avals else "")
        + f"; the backend said: {type(e).__name__}: {str(e)[:300]}. " + _advice(device))
