"""The quantized layers ``QuantizedLinear`` and ``QuantizedEmbedding``, as ``mlx.nn``'s, in MLX's formats: affine,
mxfp4, mxfp8 and nvfp4 (``fnarray.core.quantized``).

The layers hold MLX's fields under MLX's names (``weight``: the packed uint32 words, ``scales``, ``biases``
(``None`` for the floating modes mxfp4, mxfp8 and nvfp4, which have none, so nothing is saved under that name, as
MLX), and ``bias`` for a linear layer), so ``fa.load(path, like=model)`` reads the tensors of an MLX model saved with
``mx.save_safetensors`` or ``model.save_weights``, and ``fa.save``/``fa.load`` keep a quantized model as it
is. The packed weights are constants of the model (integers have no gradient; ``quantized_matmul`` refuses a
gradient of the scales and biases), so train the float model and quantize it afterwards.

Layering: this module imports no float layer (their default parameters come from ``_params.py``), so
``_layers.py`` imports it for ``Linear.to_quantized``/``Embedding.to_quantized`` (MLX's method, which
``mlx.nn.quantize``'s default predicate looks for) and ``_quantized.py``'s ``quantize(model)`` sits above both.
"""

from __future__ import annotations

from typing import Any

from fnarray._quantize import dequantize, quantize as quantize_array, quantized_matmul
from fnarray.core import dtypes
from fnarray.core.quantized import check_format
from fnarray.nn._module import Module
from fnarray.nn._params import embedding_params, linear_params

__all__ = ["QuantizedLinear", "QuantizedEmbedding", "quantized_parts"]


def _np():
    import fnarray.numpy as fnp
    return fnp


def _build(cls, **fields):
    """An instance of ``cls`` with these field values, without running ``__init__`` (array fields are
    children, the others static)."""
    arrays = [(k, v) for k, v in fields.items() if v is not None and k in cls._ARRAYS]
    static = [(k, v) for k, v in fields.items() if v is None or k not in cls._ARRAYS]
    return cls._fa_from_fields(arrays, static)


class QuantizedLinear(Module):
    """``y = x @ W.T + bias`` with ``W`` quantized (``mlx.nn.QuantizedLinear``).

    Args (constructor): ``input_dims``, ``output_dims``, ``bias`` (default True), ``group_size``, ``bits``
      (``None``: the mode's defaults, 64 and 4 for ``"affine"``, 32 and 4 for ``"mxfp4"``, 32 and 8 for
      ``"mxfp8"``, 16 and 4 for ``"nvfp4"``), ``mode``
      (``"affine"``), ``key`` (an ``fa.random.key``: the float weights are drawn as
      ``Linear``'s and quantized), ``dtype`` of the scales, biases and bias (float32).
    Fields: ``weight`` (uint32 ``(output_dims, input_dims * bits // 32)``), ``scales`` and ``biases``
      (``(output_dims, input_dims // group_size)``; floating modes: uint8 scales, biases ``None``), ``bias``
      (``(output_dims,)`` or ``None``); static: ``group_size``, ``bits``, ``mode``.
    Call: ``x: (..., input_dims)`` -> ``(..., output_dims)`` through ``fa.quantized_matmul``.
    Raises: ``ValueError`` for an unsupported format or an ``input_dims`` not divisible by ``group_size``.

    Example:
      >>> layer = fa.nn.QuantizedLinear.from_linear(fa.nn.Linear(64, 8, key=fa.random.key(0)), bits=4)
      >>> layer(fnp.ones((2, 64))).shape
      (2, 8)
    """

    _ARRAYS = ("weight", "scales", "biases", "bias")

    weight: Any
    scales: Any
    biases: Any
    bias: Any
    group_size: int
    bits: int
    mode: str

    def __init__(self, input_dims: int, output_dims: int, bias: bool = True, group_size: int | None = None,
                 bits: int | None = None, mode: str = "affine", *, key, dtype=dtypes.float32):
        group_size, bits = check_format(group_size, bits, mode, "QuantizedLinear")
        weight, self.bias = linear_params(input_dims, output_dims, bias, key, dtype, what="QuantizedLinear")
        self.weight, self.scales, self.biases = quantized_parts(weight, group_size, bits, mode)
        self.group_size, self.bits, self.mode = group_size, bits, mode

    @classmethod
    def from_linear(cls, linear, group_size: int | None = None, bits: int | None = None, mode: str = "affine"):
        """The quantized form of a ``Linear`` (``mlx.nn.QuantizedLinear.from_linear``; ``Linear.to_quantized``);
        ``linear`` is unchanged."""
        group_size, bits = check_format(group_size, bits, mode, "QuantizedLinear.from_linear")
        w_q, scales, biases = quantized_parts(linear.weight, group_size, bits, mode)
        return _build(cls, weight=w_q, scales=scales, biases=biases, bias=linear.bias, group_size=group_size,
                      bits=bits, mode=mode)

    @property
    def input_dims(self) -> int:
        return self.weight.shape[-1] * 32 // self.bits

    @property
    def output_dims(self) -> int:
        return self.weight.shape[0]

    def __call__(self, x, *, key=None):
        y = quantized_matmul(x, self.weight, self.scales, self.biases, transpose=True, group_size=self.group_size,
                             bits=self.bits, mode=self.mode)
        return y + self.bias if self.bias is not None else y


class QuantizedEmbedding(Module):
    """An embedding table quantized row by row (``mlx.nn.QuantizedEmbedding``).

    Args (constructor): ``num_embeddings``, ``dims``, ``group_size``, ``bits`` (``None``: the mode's defaults),
      ``mode``, ``key``, ``dtype`` (of the scales and biases).
    Fields: ``weight`` (uint32 ``(num_embeddings, dims * bits // 32)``), ``scales``, ``biases``
      (``(num_embeddings, dims // group_size)``; floating modes: uint8 scales, biases ``None``); static
      ``group_size``,
      ``bits``, ``mode``.
    Call: integer ``ids`` -> ``ids.shape + (dims,)``, the dequantized rows (as ``Embedding``: negative
      ids count from the end, ids outside ``[-num_embeddings, num_embeddings)`` are clamped; the
      floating modes' rows are bfloat16, MLX's ``dequantize`` default);
      ``as_linear(x)``: ``x @ W.T`` (a tied output layer) through ``fa.quantized_matmul``.
    """

    _ARRAYS = ("weight", "scales", "biases")

    weight: Any
    scales: Any
    biases: Any
    group_size: int
    bits: int
    mode: str

    def __init__(self, num_embeddings: int, dims: int, group_size: int | None = None, bits: int | None = None,
                 mode: str = "affine", *, key, dtype=dtypes.float32):
        group_size, bits = check_format(group_size, bits, mode, "QuantizedEmbedding")
        table = embedding_params(num_embeddings, dims, key, dtype, what="QuantizedEmbedding")
        self.weight, self.scales, self.biases = quantized_parts(table, group_size, bits, mode)
        self.group_size, self.bits, self.mode = group_size, bits, mode

    @classmethod
    def from_embedding(cls, embedding, group_size: int | None = None, bits: int | None = None, mode: str = "affine"):
        """The quantized form of an ``Embedding`` (``mlx.nn.QuantizedEmbedding.from_embedding``;
        ``Embedding.to_quantized``)."""
        group_size, bits = check_format(group_size, bits, mode, "QuantizedEmbedding.from_embedding")
        w_q, scales, biases = quantized_parts(embedding.weight, group_size, bits, mode)
        return _build(cls, weight=w_q, scales=scales, biases=biases, group_size=group_size, bits=bits, mode=mode)

    def __call__(self, ids, *, key=None):
        fnp = _np()
        ids = fnp.asarray(ids)
        if not dtypes.is_int(ids.dtype):
            raise TypeError(f"QuantizedEmbedding takes integer ids, got dtype {ids.dtype.name}")
        flat = fnp.reshape(ids, (-1,))
        rows = [a[flat] if a is not None else None for a in (self.weight, self.scales, self.biases)]
        out = dequantize(*rows, group_size=self.group_size, bits=self.bits, mode=self.mode)
        return fnp.reshape(out, tuple(ids.shape) + (out.shape[-1],))

    def as_linear(self, x):
        """Logits against every embedding, ``x @ W.T``: ``(..., dims) -> (..., num_embeddings)``."""
        return quantized_matmul(x, self.weight, self.scales, self.biases, transpose=True,
                                group_size=self.group_size, bits=self.bits, mode=self.mode)


def quantized_parts(weight, group_size, bits, mode):
    """``(w_q, scales, biases)`` of ``weight``; ``biases`` is ``None`` for the floating modes (they have none)."""
    parts = quantize_array(weight, group_size, bits, mode)
    return parts if len(parts) == 3 else (*parts, None)
