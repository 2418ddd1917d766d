"""JVP, transpose and batching rules of ``quantized_matmul`` (``fnarray.core.quantized``).

The product is linear in ``x`` (both modes: ``"affine"`` has operands ``x w scales biases``, ``"mxfp4"``
``x w scales``), and the quantized weights are constants: integers have no tangent, and a
tangent of the scales or biases raises (the gradient of a quantized model's weights is taken through the
float weights, ``fnarray.dequantize``). With ``W`` the dequantized matrix, ``transpose=True`` computes
``x @ W.T``, whose transpose with respect to ``x`` is ``ct @ W``: the same primitive with ``transpose``
flipped, so the backward pass reads the packed weights too. Batching maps ``x`` only: the primitive treats
every axis of ``x`` but the last as a batch, so the mapped axis moves first (a mapped last axis too).
"""

from __future__ import annotations

from fnarray.core import lax
from fnarray.core.avals import get_aval
from fnarray.core.quantized import quantized_matmul_p
from fnarray.transforms.ad_tables import Zero, is_undefined, primitive_jvps, primitive_transposes, tangent_aval
from fnarray.transforms.batching_tables import primitive_batchers

__all__ = ["quantized_matmul_jvp", "quantized_matmul_transpose", "quantized_matmul_batch"]

_CONSTANT_WEIGHTS = ("quantized_matmul treats its quantized weights (w, scales, biases) as constants and has no "
                     "derivative with respect to them; to differentiate the weights, keep them as floats and "
                     "use fnarray.dequantize(w, scales, biases) @ ... (or differentiate a float model and "
                     "quantize it afterwards)")


def quantized_matmul_jvp(primals, tangents, **params):
    """``d(x @ W.T) = dx @ W.T``; a tangent of the scales or biases raises (see the module)."""
    if not all(isinstance(t, Zero) for t in tangents[2:]):
        raise TypeError(_CONSTANT_WEIGHTS)
    out = quantized_matmul_p.bind(*primals, **params)
    tx = tangents[0]
    if isinstance(tx, Zero):
        return out, Zero(tangent_aval(get_aval(out)))
    return out, quantized_matmul_p.bind(tx, *primals[1:], **params)


def quantized_matmul_transpose(ct, x, w, *weights, transpose, **params):
    """``ct @ W`` for ``transpose=True`` (``ct @ W.T`` otherwise): the primitive with ``transpose`` flipped.
    ``weights``: the scales and (mode ``"affine"``) the biases."""
    if any(is_undefined(a) for a in (w, *weights)):
        raise TypeError(_CONSTANT_WEIGHTS)
    rest = [None] * (1 + len(weights))
    if isinstance(ct, Zero):
        return [Zero(x.aval), *rest]
    return [quantized_matmul_p.bind(ct, w, *weights, transpose=not transpose, **params), *rest]


def quantized_matmul_batch(vals, dims, **params):
    """``vmap`` over ``x``: its mapped axis goes first (the primitive maps every leading axis of ``x``)."""
    x, *weights = vals
    dx, *weight_dims = dims
    if any(d is not None for d in weight_dims):
        raise NotImplementedError("vmap of quantized_matmul over its weights (w, scales, biases) is not supported: "
                                  "map x only, or dequantize the weights (fnarray.dequantize) and use a matmul")
    if dx != 0:
        nd = get_aval(x).ndim
        x = lax.transpose(x, [dx] + [i for i in range(nd) if i != dx])
    return quantized_matmul_p.bind(x, *weights, **params), 0


primitive_jvps[quantized_matmul_p] = quantized_matmul_jvp
primitive_transposes[quantized_matmul_p] = quantized_matmul_transpose
primitive_batchers[quantized_matmul_p] = quantized_matmul_batch
