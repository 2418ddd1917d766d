"""``fa.quantize``, ``fa.dequantize`` and ``fa.quantized_matmul``: MLX's affine quantization (``mx.quantize``).

The format is described in ``fnarray.core.quantized``. ``quantize`` and ``dequantize`` are composites of
``fnarray.numpy`` functions (so they run on every backend, under ``jit`` and ``vmap``); ``quantized_matmul``
binds the ``quantized_matmul`` primitive, which every backend runs on the packed weights.

Rounding, as MLX's CPU kernel (``mlx/backend/cpu/quantized.cpp``, checked bit for bit against
``mx.quantize`` in ``tests/test_quantize.py``), per group of ``group_size`` values, in float32 (float64 for
float64 weights), ``n = 2**bits - 1``:

- ``scale = max((max - min) / n, 1e-7)``, negated unless ``|min| > |max|``; ``edge`` is ``min`` in the first
  case, ``max`` in the second;
- ``q0 = rint(edge / scale)``; where ``q0 != 0``: ``scale = edge / q0`` and ``bias = edge`` (so the group's
  largest magnitude is represented exactly), else ``bias = 0``;
- ``q = clip(rint((w - bias) / scale), 0, n)``; the dequantized value is ``scale * q + bias``.
- 1 bit (MLX's own rule): ``scale = max(max - min, 1e-7)``, ``bias = min``.

Kernel backends divide with their own accuracy (OpenCL and WGSL allow 2.5 ulp): on a GPU, a value at a
rounding tie may quantize one step apart from MLX's.
"""

from __future__ import annotations

import functools

import numpy as np

from fnarray import numpy as fnp
from fnarray.core import dtypes
from fnarray.core.errors import DTypeError, ShapeError
from fnarray.core.quantized import check_format, quantized_matmul_p, weight_shape
from fnarray.lowering.packed import unpack
from fnarray.transforms.jit import jit

__all__ = ["quantize", "dequantize", "quantized_matmul"]


def _math_dtype(d):
    return dtypes.float64 if d == dtypes.float64 else dtypes.float32


def _check_matrix(w, group_size, where):
    if w.ndim < 2:
        raise ShapeError(f"[{where}] the matrix to quantize needs at least 2 dimensions, got shape {w.shape}")
    if w.shape[-1] % group_size:
        raise ShapeError(f"[{where}] the last axis of the matrix (shape {w.shape}) must be divisible by "
                         f"group_size={group_size}; pad it or choose another group size")


def quantize(w, group_size: int = 64, bits: int = 4, mode: str = "affine"):
    """Quantize a float matrix in groups along its last axis (as ``mx.quantize``).

    Args:
      w: float array of shape ``(..., n, k)`` (float32, float16, bfloat16 or float64), ``k`` divisible by
        ``group_size``.
      group_size: 32, 64 or 128 consecutive elements share one scale and bias.
      bits: 1, 2, 3, 4, 5, 6 or 8 bits per element.
      mode: ``"affine"`` (MLX's default; the only mode here).

    Returns:
      ``(w_q, scales, biases)``: ``w_q`` uint32 of shape ``(..., n, k * bits // 32)`` (the packed bit streams),
      ``scales`` and ``biases`` of ``w``'s dtype and shape ``(..., n, k // group_size)``; bit-identical to
      ``mx.quantize`` (see the module for the rounding).

    Raises:
      ValueError: an unsupported ``group_size`` or ``bits``; ``ShapeError`` (a ``ValueError``) for a rank
        below 2 or a last axis not divisible by ``group_size``.
      DTypeError: a non-float ``w``.
      NotImplementedError: a mode other than ``"affine"``.

    Example:
      >>> w_q, scales, biases = fa.quantize(fnp.ones((8, 64)), group_size=64, bits=4)
      >>> w_q.shape, w_q.dtype, scales.shape
      ((8, 8), dtype('uint32'), (8, 1))
    """
    check_format(group_size, bits, mode, "quantize")
    w = fnp.asarray(w)
    if not dtypes.is_float(w.dtype):
        raise DTypeError(f"[quantize] only float arrays can be quantized, got {w.dtype.name}")
    _check_matrix(w, group_size, "quantize")
    return _quantize(w, int(group_size), int(bits))


# quantize and dequantize run as one jitted program each (per shape and format): called eagerly on a kernel
# backend, op by op they compiled ~15 kernels (8.9 s on PoCL), on jax:0 one XLA program per op.
@functools.partial(jit, static_argnums=(1, 2))
def _quantize(w, group_size, bits):
    lead, k = tuple(w.shape[:-1]), w.shape[-1]
    md = _math_dtype(w.dtype)
    g = fnp.reshape(w.astype(md), lead + (k // group_size, group_size))
    n_bins = float((1 << bits) - 1)
    w_max, w_min = fnp.max(g, axis=-1), fnp.min(g, axis=-1)
    if bits == 1:   # MLX: bit 0 stands for the group's minimum, bit 1 for its maximum
        scale = fnp.maximum(w_max - w_min, np.asarray(1e-7, w_max.dtype))
        return _round_and_pack(g, scale, w_min, n_bins, bits, lead, k, w.dtype)
    low_side = fnp.abs(w_min) > fnp.abs(w_max)
    scale = fnp.maximum((w_max - w_min) / n_bins, np.asarray(1e-7, md))
    scale = fnp.where(low_side, scale, -scale)
    edge = fnp.where(low_side, w_min, w_max)
    q0 = fnp.rint(edge / scale)
    exact = q0 != 0
    scale = fnp.where(exact, edge / fnp.where(exact, q0, 1.0), scale)
    bias = fnp.where(exact, edge, 0.0)
    return _round_and_pack(g, scale, bias, n_bins, bits, lead, k, w.dtype)


def _round_and_pack(g, scale, bias, n_bins, bits, lead, k, dtype):
    """``(w_q, scales, biases)`` of groups ``g`` with their scales and biases (computed in float32/64)."""
    q = fnp.clip(fnp.rint((g - bias[..., None]) / scale[..., None]), 0.0, n_bins).astype(dtypes.uint32)
    return _pack(fnp.reshape(q, lead + (k,)), bits), scale.astype(dtype), bias.astype(dtype)


def _pack(q, bits):
    """uint32 integers below ``2**bits`` (last axis a multiple of 32) as MLX's little-endian bit streams."""
    lead, k = tuple(q.shape[:-1]), q.shape[-1]
    # Element j of a 32-element chunk starts at bit j * bits; word t of the chunk starts at bit 32 * t.
    # Its bits enter word t shifted left by j * bits - 32 * t, or right by the negation; a shift of 32
    # is the "does not touch this word" case (shifts by the bit width give 0: docs/design.md's semantics).
    offset = np.arange(32)[:, None] * bits - 32 * np.arange(bits)[None, :]
    left = np.where((offset >= 0) & (offset < 32), offset, 32).astype(np.uint32)
    right = np.where((offset < 0) & (offset > -bits), -offset, 32).astype(np.uint32)
    q = fnp.reshape(q, lead + (k // 32, 32, 1))
    parts = fnp.bitwise_or(fnp.left_shift(q, left), fnp.right_shift(q, right))
    # The parts of one word have disjoint bits, so their sum is their bitwise or.
    words = fnp.sum(parts, axis=-2, dtype=dtypes.uint32)
    return fnp.reshape(words, lead + (k // 32 * bits,))


def dequantize(w, scales, biases, group_size: int = 64, bits: int = 4, mode: str = "affine"):
    """The float matrix that quantized weights stand for (as ``mx.dequantize``): ``scale * q + bias``.

    Args:
      w: packed uint32 weights ``(..., n, k * bits // 32)`` from ``quantize``.
      scales, biases: float ``(..., n, k // group_size)``.
      group_size, bits, mode: as given to ``quantize``.

    Returns:
      ``(..., n, k)`` of the scales' dtype; bit-identical to ``mx.dequantize`` on float32 where the backend
      does not contract ``scale * q + bias`` into a fused multiply-add (OpenCL may).

    Raises:
      ValueError, DTypeError, ShapeError: unsupported format, non-uint32 ``w``, or shapes that do not match.
    """
    check_format(group_size, bits, mode, "dequantize")
    w, scales, biases = fnp.asarray(w), fnp.asarray(scales), fnp.asarray(biases)
    if w.dtype != dtypes.uint32:
        raise DTypeError(f"[dequantize] needs packed uint32 weights, got {w.dtype.name}")
    if not dtypes.is_float(scales.dtype) or biases.dtype != scales.dtype:
        raise DTypeError(f"[dequantize] needs float scales and biases of one dtype, got {scales.dtype.name} and "
                         f"{biases.dtype.name}")
    full = weight_shape(w.shape, bits)
    groups = full[:-1] + (full[-1] // group_size,)
    if w.ndim < 2 or (w.shape[-1] * 32) % bits or full[-1] % group_size or scales.shape != groups \
            or biases.shape != groups:
        raise ShapeError(f"[dequantize] packed weights {w.shape} at bits={bits} stand for shape {full}, whose "
                         f"scales and biases have shape {groups} at group_size={group_size}; got {scales.shape} "
                         f"and {biases.shape}")
    return _dequantize(w, scales, biases, int(group_size), int(bits))


@functools.partial(jit, static_argnums=(3, 4))
def _dequantize(w, scales, biases, group_size, bits):
    groups = tuple(scales.shape)
    # packed.unpack: for 2, 4 and 8 bits each word shifted by every element's offset (a broadcast, no gather).
    # A gather of the words here made XLA CPU recompute a quantized embedding row inside every product reading
    # it (examples/llm.py's 4-bit decode at width 256: the first block's q/k/v products 3-5x slower).
    q = fnp.reshape(unpack(fnp, w, bits, fnp.asarray).astype(scales.dtype), groups + (group_size,))
    return fnp.reshape(q * scales[..., None] + biases[..., None], groups[:-1] + (groups[-1] * group_size,))


def quantized_matmul(x, w, scales, biases, transpose: bool = True, group_size: int = 64, bits: int = 4,
                     mode: str = "affine"):
    """``x @ dequantize(w).T`` (``transpose=True``) or ``x @ dequantize(w)``, without the float weights (as
    ``mx.quantized_matmul``).

    Args:
      x: ``(..., k)``; promoted with the scales' dtype (an integer ``x`` with float32 scales gives float32).
      w: packed uint32 ``(n, k * bits // 32)`` for ``transpose=True``, ``(k, n * bits // 32)`` otherwise.
      scales, biases: ``(n, k // group_size)`` (``(k, n // group_size)`` for ``transpose=False``).
      transpose, group_size, bits, mode: as ``mx.quantized_matmul``.

    Returns:
      ``(..., n)`` in the promoted float dtype, accumulated in float32 (float64 for float64).

    Raises:
      ShapeError: the last axis of ``x`` does not match the weights, or weights of rank other than 2.
      DTypeError: non-uint32 ``w``, or a result dtype that is not a float.
      ValueError, NotImplementedError: an unsupported format.
      TypeError: differentiating with respect to ``scales`` or ``biases`` (the weights are constants).
    """
    check_format(group_size, bits, mode, "quantized_matmul")
    x, scales, biases = fnp.asarray(x), fnp.asarray(scales), fnp.asarray(biases)
    dt = fnp.result_type(x.dtype, scales.dtype, biases.dtype)
    if not dtypes.is_float(dt):
        raise DTypeError(f"[quantized_matmul] x ({x.dtype.name}), scales ({scales.dtype.name}) and biases "
                         f"({biases.dtype.name}) promote to {dt.name}, not a float dtype")
    return quantized_matmul_p.bind(x.astype(dt), fnp.asarray(w), scales.astype(dt), biases.astype(dt),
                                   transpose=bool(transpose), group_size=int(group_size), bits=int(bits))
