"""Quantized layers and ``quantize(model)``, as ``mlx.nn``'s ``QuantizedLinear``, ``QuantizedEmbedding`` and
``mlx.nn.quantize``, in MLX's formats: affine, mxfp4, mxfp8 and nvfp4 (``fnarray.core.quantized``).

The layers hold MLX's fields under MLX's names (``weight``: the packed uint32 words, ``scales``, ``biases``
(``None`` for the floating modes mxfp4, mxfp8 and nvfp4, which have none, so nothing is saved under that name, as
MLX), and ``bias`` for a linear layer), so ``fa.load(path, like=model)`` reads the tensors of an MLX model saved with
``mx.save_safetensors`` or ``model.save_weights``, and ``fa.save``/``fa.load`` keep a quantized model as it
is. fnarray's modules are immutable: ``quantize(model)`` returns a new model. The packed weights are
constants of the model (integers have no gradient; ``quantized_matmul`` refuses a gradient of the scales and
biases), so train the float model and quantize it afterwards.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from fnarray._quantize import dequantize, quantize as quantize_array, quantized_matmul
from fnarray.core import dtypes
from fnarray.core.quantized import check_format
from fnarray.nn._layers import Embedding, Lambda, Linear
from fnarray.nn._module import Module

__all__ = ["QuantizedLinear", "QuantizedEmbedding", "quantize"]


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
        linear = Linear(input_dims, output_dims, bias, key=key, dtype=dtype)
        self.weight, self.scales, self.biases = _quantized(linear.weight, group_size, bits, mode)
        self.bias = linear.bias
        self.group_size, self.bits, self.mode = group_size, bits, mode

    @classmethod
    def from_linear(cls, linear, group_size: int | None = None, bits: int | None = None, mode: str = "affine"):
        """The quantized form of a ``Linear`` (``mlx.nn.QuantizedLinear.from_linear``); ``linear`` is unchanged."""
        group_size, bits = check_format(group_size, bits, mode, "QuantizedLinear.from_linear")
        w_q, scales, biases = _quantized(linear.weight, group_size, bits, mode)
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
    Call: integer ``ids`` -> ``ids.shape + (dims,)``, the dequantized rows (ids clamped, as every gather; the
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
        table = Embedding(num_embeddings, dims, key=key, dtype=dtype)
        self.weight, self.scales, self.biases = _quantized(table.weight, group_size, bits, mode)
        self.group_size, self.bits, self.mode = group_size, bits, mode

    @classmethod
    def from_embedding(cls, embedding, group_size: int | None = None, bits: int | None = None, mode: str = "affine"):
        """The quantized form of an ``Embedding`` (``mlx.nn.QuantizedEmbedding.from_embedding``)."""
        group_size, bits = check_format(group_size, bits, mode, "QuantizedEmbedding.from_embedding")
        w_q, scales, biases = _quantized(embedding.weight, group_size, bits, mode)
        return _build(cls, weight=w_q, scales=scales, biases=biases, group_size=group_size, bits=bits, mode=mode)

    def __call__(self, ids, *, key=None):
        fnp = _np()
        ids = fnp.asarray(ids)
        if not dtypes.is_int(ids.dtype):
            raise TypeError(f"QuantizedEmbedding takes integer ids, got dtype {ids.dtype.name}")
        flat = fnp.reshape(ids, (-1,))
        rows = [fnp.take(a, flat, axis=0) if a is not None else None for a in (self.weight, self.scales, self.biases)]
        out = dequantize(*rows, group_size=self.group_size, bits=self.bits, mode=self.mode)
        return fnp.reshape(out, tuple(ids.shape) + (out.shape[-1],))

    def as_linear(self, x):
        """Logits against every embedding, ``x @ W.T``: ``(..., dims) -> (..., num_embeddings)``."""
        return quantized_matmul(x, self.weight, self.scales, self.biases, transpose=True,
                                group_size=self.group_size, bits=self.bits, mode=self.mode)


def _quantized(weight, group_size, bits, mode):
    """``(w_q, scales, biases)`` of ``weight``; ``biases`` is ``None`` for the floating modes (they have none)."""
    parts = quantize_array(weight, group_size, bits, mode)
    return parts if len(parts) == 3 else (*parts, None)


def _quantizable(module, group_size) -> bool:
    """MLX's default predicate: a linear layer or embedding whose rows split into whole groups."""
    return isinstance(module, (Linear, Embedding)) and module.weight.shape[-1] % group_size == 0


def _has_quantized_form(module) -> bool:
    return isinstance(module, (Linear, Embedding)) or callable(getattr(module, "to_quantized", None))


def _has_module_children(node) -> bool:
    """Whether a module holds another module in a field (directly or in a list, tuple or dict)."""
    def holds(value):
        if isinstance(value, Module):
            return True
        if isinstance(value, (list, tuple)):
            return any(holds(v) for v in value)
        return isinstance(value, dict) and any(holds(v) for v in value.values())
    return any(holds(getattr(node, f.name)) for f in dataclasses.fields(node))


def _to_quantized(module, group_size, bits, mode):
    if isinstance(module, Linear):
        return QuantizedLinear.from_linear(module, group_size, bits, mode)
    if isinstance(module, Embedding):
        return QuantizedEmbedding.from_embedding(module, group_size, bits, mode)
    to_quantized = getattr(module, "to_quantized", None)
    if to_quantized is None:
        raise TypeError(f"class_predicate selected {type(module).__name__}, which has no quantized form (fnarray "
                        f"quantizes Linear and Embedding, and modules with a to_quantized(group_size, bits, mode) "
                        f"method)")
    return to_quantized(group_size=group_size, bits=bits, mode=mode)


def quantize(model, group_size: int | None = None, bits: int | None = None, *, mode: str = "affine",
             class_predicate=None):
    """A copy of ``model`` with its linear layers and embeddings quantized (``mlx.nn.quantize``).

    Args:
      model: a ``Module`` (or a list, tuple or dict of them), walked through every field.
      group_size, bits, mode: the format (``fa.quantize``; ``None``: the mode's defaults).
      class_predicate: ``(path, module) -> bool | dict``, asked of every module (``path`` dotted, as
        ``"layers.0.attention.q_proj"``; ``""`` for the root): ``True`` quantizes it with the arguments above, a
        dict quantizes it with those entries (``group_size``, ``bits``, ``mode``) replaced. A selected module
        that holds other modules and has no quantized form (no ``to_quantized``) is walked into instead, and a
        ``Lambda`` (a function ``Sequential`` wrapped) is left alone, so a predicate that accepts everything
        quantizes the layers, as MLX's (which asks leaf modules only).
        Default: every ``Linear`` and ``Embedding`` whose last axis divides into groups of ``group_size``.

    Returns:
      the new model; ``model`` itself is unchanged (modules are immutable).

    Raises:
      ValueError: an unsupported format. TypeError: a selected leaf module with no quantized form.
    """
    group_size, bits = check_format(group_size, bits, mode, "quantize")

    def pick(path, module):
        if class_predicate is None:
            return _quantizable(module, group_size)
        return class_predicate(path, module)

    def walk(node, path):
        if isinstance(node, Module):
            choice = pick(path, node)
            if choice and not _has_quantized_form(node) and (_has_module_children(node) or isinstance(node, Lambda)):
                # MLX asks leaf modules only: walk into a container the predicate accepts, and skip a function
                # that Sequential wrapped (in MLX a plain function, not a module)
                choice = False
            if choice:
                opts = {"group_size": group_size, "bits": bits, "mode": mode}
                if isinstance(choice, dict):
                    opts.update(choice)
                    if "mode" in choice and "group_size" not in choice:   # the new mode's defaults
                        opts["group_size"], opts["bits"] = check_format(None, choice.get("bits"), choice["mode"])
                return _to_quantized(node, opts["group_size"], opts["bits"], opts["mode"])
            changes = {}
            for f in dataclasses.fields(node):
                value = getattr(node, f.name)
                new = walk(value, f"{path}.{f.name}" if path else f.name)
                if new is not value:
                    changes[f.name] = new
            return node.replace(**changes) if changes else node
        if isinstance(node, (list, tuple)):
            items = [walk(v, f"{path}.{i}" if path else str(i)) for i, v in enumerate(node)]
            if all(a is b for a, b in zip(items, node, strict=True)):
                return node
            return type(node)(items) if not hasattr(node, "_fields") else type(node)(*items)
        if isinstance(node, dict):
            items = {k: walk(v, f"{path}.{k}" if path else str(k)) for k, v in node.items()}
            return node if all(items[k] is node[k] for k in node) else type(node)(items)
        return node

    return walk(model, "")
