"""``mlx.nn``'s layers under their names and arguments, so that an MLX model ports by swapping the import.

Activation modules (``ReLU``, ``GELU(approx=)``, ``SiLU``...), positional encodings (``RoPE``,
``SinusoidalPositionalEncoding``, ``ALiBi``), ``GroupNorm`` and ``InstanceNorm`` (channels last, as MLX),
pooling modules (``MaxPool1d``/``2d``/``3d``, ``AvgPool1d``/``2d``/``3d``) and the transformer
(``TransformerEncoderLayer``, ``TransformerEncoder``, ``TransformerDecoderLayer``, ``TransformerDecoder``,
``Transformer``), the recurrent layers (``RNN``, ``GRU``, ``LSTM``, over ``lax.scan``), ``ConvTranspose1d``/``2d``/
``3d`` and ``Upsample``. Each computes what the ``mlx.nn`` layer of the same name computes (tests compare them with
MLX's, weights loaded by name); where fnarray differs by design, a layer with parameters takes an explicit
``key=`` and dropout runs only when the call is given ``key=`` (MLX's ``model.train()`` flag does not exist).
"""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from fnarray import random
from fnarray.core import dtypes
from fnarray.core.errors import DTypeError, ShapeError
from fnarray.nn import _functions as F
from fnarray.nn._layers import Dropout, LayerNorm, Linear, MultiHeadAttention
from fnarray.nn._module import Module, field
from fnarray.nn._pooling import avg_pool, max_pool

__all__ = ["ReLU", "ReLU6", "GELU", "SiLU", "Tanh", "Sigmoid", "LeakyReLU", "ELU", "CELU", "SELU", "Softplus",
           "Softsign", "Softmax", "LogSoftmax", "LogSigmoid", "Hardswish", "HardTanh", "Mish", "Step", "GLU",
           "ReLU2", "Softmin", "HardShrink", "Softshrink", "PReLU",
           "RoPE", "SinusoidalPositionalEncoding", "ALiBi", "GroupNorm", "InstanceNorm",
           "MaxPool1d", "MaxPool2d", "MaxPool3d", "AvgPool1d", "AvgPool2d", "AvgPool3d",
           "TransformerEncoderLayer", "TransformerEncoder", "TransformerDecoderLayer", "TransformerDecoder",
           "Transformer", "RNN", "GRU", "LSTM", "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d",
           "Upsample", "value_and_grad"]


def _np():
    from fnarray import numpy as fnp
    return fnp


# ----------------------------------------------------------------------------- activations as modules


class ReLU(Module):
    """``max(x, 0)`` as a layer (``mlx.nn.ReLU``)."""

    def __call__(self, x):
        return F.relu(x)


class ReLU6(Module):
    """``min(max(x, 0), 6)`` as a layer (``mlx.nn.ReLU6``)."""

    def __call__(self, x):
        return F.relu6(x)


class GELU(Module):
    """GELU as a layer (``mlx.nn.GELU``): ``approx="none"`` the exact erf form (MLX's default), ``"precise"`` or
    ``"tanh"`` the tanh approximation, ``"fast"`` ``x * sigmoid(1.702 x)``.

    Raises: ``ValueError`` for another ``approx``.
    """

    approx: str = "none"

    def __check_init__(self):
        if self.approx not in ("none", "precise", "tanh", "fast"):
            raise ValueError(f"GELU: approx={self.approx!r}; use 'none', 'precise', 'tanh' or 'fast' (MLX's)")

    def __call__(self, x):
        if self.approx == "fast":
            return x * F.sigmoid(1.702 * x)
        return F.gelu(x, approximate=self.approx != "none")


class SiLU(Module):
    """``x * sigmoid(x)`` as a layer (``mlx.nn.SiLU``)."""

    def __call__(self, x):
        return F.silu(x)


class Tanh(Module):
    """``tanh(x)`` as a layer (``mlx.nn.Tanh``)."""

    def __call__(self, x):
        return F.tanh(x)


class Sigmoid(Module):
    """``1 / (1 + exp(-x))`` as a layer (``mlx.nn.Sigmoid``)."""

    def __call__(self, x):
        return F.sigmoid(x)


class LeakyReLU(Module):
    """``max(x, negative_slope * x)`` as a layer (``mlx.nn.LeakyReLU``, default slope 0.01)."""

    negative_slope: float = 0.01

    def __call__(self, x):
        return F.leaky_relu(x, self.negative_slope)


class ELU(Module):
    """``x`` for ``x > 0``, ``alpha * (exp(x) - 1)`` otherwise (``mlx.nn.ELU``)."""

    alpha: float = 1.0

    def __call__(self, x):
        return F.elu(x, self.alpha)


class CELU(Module):
    """``max(0, x) + min(0, alpha * (exp(x / alpha) - 1))`` (``mlx.nn.CELU``)."""

    alpha: float = 1.0

    def __call__(self, x):
        return F.celu(x, self.alpha)


class SELU(Module):
    """Scaled ELU with the constants of Klambauer et al., 2017 (``mlx.nn.SELU``)."""

    def __call__(self, x):
        return F.selu(x)


class Softplus(Module):
    """``log(1 + exp(x))`` as a layer (``mlx.nn.Softplus``)."""

    def __call__(self, x):
        return F.softplus(x)


class Softsign(Module):
    """``x / (1 + |x|)`` as a layer (``mlx.nn.Softsign``)."""

    def __call__(self, x):
        return F.soft_sign(x)


class Softmax(Module):
    """Softmax over the last axis as a layer (``mlx.nn.Softmax``)."""

    def __call__(self, x):
        return F.softmax(x, axis=-1)


class LogSoftmax(Module):
    """Log-softmax over the last axis as a layer (``mlx.nn.LogSoftmax``)."""

    def __call__(self, x):
        return F.log_softmax(x, axis=-1)


class LogSigmoid(Module):
    """``log(sigmoid(x))`` as a layer (``mlx.nn.LogSigmoid``)."""

    def __call__(self, x):
        return F.log_sigmoid(x)


class Hardswish(Module):
    """``x * min(max(x + 3, 0), 6) / 6`` as a layer (``mlx.nn.Hardswish``)."""

    def __call__(self, x):
        return F.hard_swish(x)


class HardTanh(Module):
    """``clip(x, min_val, max_val)`` (``mlx.nn.HardTanh``, -1 and 1 by default)."""

    min_val: float = -1.0
    max_val: float = 1.0

    def __call__(self, x):
        return _np().clip(x, self.min_val, self.max_val)


class Mish(Module):
    """``x * tanh(softplus(x))`` (Misra, 2019; ``mlx.nn.Mish``)."""

    def __call__(self, x):
        return x * F.tanh(F.softplus(x))


class Step(Module):
    """``1`` where ``x > threshold``, else ``0`` (``mlx.nn.Step``), in ``x``'s dtype."""

    threshold: float = 0.0

    def __call__(self, x):
        fnp = _np()
        x = fnp.asarray(x)
        return fnp.where(x > self.threshold, 1, 0).astype(x.dtype)


class GLU(Module):
    """Gated linear unit (``mlx.nn.GLU``): ``a * sigmoid(b)`` of the two halves of ``axis``.

    Raises: ``ShapeError`` for an odd size along ``axis``.
    """

    axis: int = -1

    def __call__(self, x):
        fnp = _np()
        x = fnp.asarray(x)
        if x.shape[self.axis] % 2:
            raise ShapeError(f"GLU: axis {self.axis} of shape {tuple(x.shape)} has an odd size; it is split in two")
        a, b = fnp.split(x, 2, axis=self.axis)
        return a * F.sigmoid(b)


class ReLU2(Module):
    """``relu(x) ** 2`` as a layer (``mlx.nn.ReLU2``)."""

    def __call__(self, x):
        return F.relu(x) ** 2


class Softmin(Module):
    """``softmax(-x)`` over the last axis (``mlx.nn.Softmin``)."""

    def __call__(self, x):
        return F.softmax(-_np().asarray(x), axis=-1)


class HardShrink(Module):
    """``x`` where ``|x| > lambd``, else 0 (``mlx.nn.HardShrink``, ``lambd=0.5``)."""

    lambd: float = 0.5

    def __call__(self, x):
        fnp = _np()
        x = fnp.asarray(x)
        return fnp.where(fnp.abs(x) > self.lambd, x, fnp.zeros_like(x))


class Softshrink(Module):
    """``x - lambd`` above ``lambd``, ``x + lambd`` below ``-lambd``, else 0 (``mlx.nn.Softshrink``)."""

    lambd: float = 0.5

    def __call__(self, x):
        fnp = _np()
        x = fnp.asarray(x)
        return fnp.where(x > self.lambd, x - self.lambd, fnp.where(x < -self.lambd, x + self.lambd, fnp.zeros_like(x)))


class PReLU(Module):
    """``max(0, x) + weight * min(0, x)`` with a learned ``weight`` of ``num_parameters`` slopes (one per
    channel, or one shared), initialised to ``init`` (He et al., 2015; ``mlx.nn.PReLU``)."""

    weight: Any

    def __init__(self, num_parameters: int = 1, init: float = 0.25):
        self.weight = _np().full((num_parameters,), init, dtype="float32")

    def __call__(self, x):
        fnp = _np()
        x = fnp.asarray(x)
        return fnp.maximum(x, 0) + self.weight * fnp.minimum(x, 0)


# ----------------------------------------------------------------------------- positional encodings


class RoPE(Module):
    """Rotary positional encoding (Su et al., 2021; ``mlx.nn.RoPE``).

    The first ``dims`` features of the last axis are rotated by angles ``(offset + position) * scale *
    base ** (-2i / dims)``, the position counted along the second-to-last axis; the other features pass.
    ``traditional=True`` rotates consecutive pairs ``(x[2i], x[2i+1])``, ``False`` (MLX's default) the halves
    ``(x[i], x[i + dims/2])``.

    Args (constructor): ``dims`` (even), ``traditional`` (False), ``base`` (10000), ``scale`` (1.0).
    Call: ``rope(x, offset=0)``: ``x: (..., L, D)`` with ``D >= dims`` -> the same shape and dtype.
    Raises: ``ValueError`` for an odd ``dims`` or a ``base`` that is not positive; ``ShapeError`` for an input
    with fewer than ``dims`` features; ``DTypeError`` for an input that is not floating (MLX raises too).
    """

    dims: int
    traditional: bool = False
    base: float = 10000.0
    scale: float = 1.0

    def __check_init__(self):
        if not isinstance(self.dims, (int, np.integer)) or isinstance(self.dims, (bool, np.bool_)):
            raise ValueError(f"RoPE: dims must be a positive even int, got {self.dims!r}")
        for name in ("base", "scale"):
            v = getattr(self, name)
            if not isinstance(v, (int, float, np.integer, np.floating)) or isinstance(v, (bool, np.bool_)):
                raise ValueError(f"RoPE: {name} must be a real number, got {v!r} ({type(v).__name__})")
        if self.dims <= 0 or self.dims % 2:
            raise ValueError(f"RoPE: dims must be positive and even, got {self.dims}")
        if not self.base > 0:
            raise ValueError(f"RoPE: base must be positive (the frequencies are base ** (-2i / dims)), got {self.base}")

    def __call__(self, x, offset=0):
        fnp = _np()
        x = fnp.asarray(x)
        if not dtypes.is_float(x.dtype):
            raise DTypeError(f"RoPE: the input must be floating (a rotation of integers would be truncated), got "
                             f"{x.dtype.name}; cast it with .astype(fnp.float32)")
        if x.ndim < 2 or x.shape[-1] < self.dims:
            raise ShapeError(f"RoPE({self.dims}): the input must be (..., L, D) with D >= {self.dims}, got "
                             f"{tuple(x.shape)}")
        half = self.dims // 2
        length = x.shape[-2]
        inv = fnp.asarray(self.base ** (-np.arange(0, self.dims, 2, dtype=np.float64) / self.dims), dtype="float32")
        positions = (fnp.arange(length, dtype="float32") + fnp.asarray(offset, dtype="float32")) * self.scale
        theta = positions[:, None] * inv[None, :]
        cos, sin = fnp.cos(theta).astype(x.dtype), fnp.sin(theta).astype(x.dtype)
        rot, rest = x[..., :self.dims], x[..., self.dims:]
        if self.traditional:
            pairs = fnp.reshape(rot, rot.shape[:-1] + (half, 2))
            x1, x2 = pairs[..., 0], pairs[..., 1]
            out = fnp.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], axis=-1)
            out = fnp.reshape(out, rot.shape)
        else:
            x1, x2 = rot[..., :half], rot[..., half:]
            out = fnp.concatenate([x1 * cos - x2 * sin, x1 * sin + x2 * cos], axis=-1)
        return fnp.concatenate([out, rest], axis=-1) if rest.shape[-1] else out


class SinusoidalPositionalEncoding(Module):
    """Sinusoidal positional encoding (Vaswani et al., 2017; ``mlx.nn.SinusoidalPositionalEncoding``).

    ``x[..., None] * sigmas`` through ``sin`` and ``cos`` (``[sin, cos]``, or ``[cos, sin]`` with ``cos_first``),
    times ``scale`` (default ``sqrt(2 / dims)``); the ``dims / 2`` frequencies run geometrically from
    ``max_freq`` down to ``min_freq`` (times ``2 pi`` with ``full_turns``).

    Call: ``x: (...)`` (positions) -> ``(..., dims)`` float32.
    Raises: ``ValueError`` for ``dims`` that is not positive and even.
    """

    dims: int
    min_freq: float = 0.0001
    max_freq: float = 1.0
    scale: Any = None
    cos_first: bool = False
    full_turns: bool = False

    def __check_init__(self):
        if self.dims <= 0 or self.dims % 2:
            raise ValueError(f"SinusoidalPositionalEncoding: dims must be positive and even, got {self.dims}")

    def _sigmas(self):
        n = self.dims // 2
        one_zero = np.ones(1, np.float32) if n == 1 else \
            (1 - np.arange(n, dtype=np.float32) / np.float32(n - 1)).astype(np.float32)
        lo, hi = np.float32(math.log(self.min_freq)), np.float32(math.log(self.max_freq))
        sigmas = np.exp(one_zero * (hi - lo) + lo).astype(np.float32)
        return sigmas * np.float32(2 * math.pi) if self.full_turns else sigmas

    def __call__(self, x):
        fnp = _np()
        y = fnp.asarray(x)[..., None] * fnp.asarray(self._sigmas())
        parts = [fnp.cos(y), fnp.sin(y)] if self.cos_first else [fnp.sin(y), fnp.cos(y)]
        scale = self.scale if self.scale is not None else (2 / self.dims) ** 0.5
        return fnp.concatenate(parts, axis=-1) * scale


class ALiBi(Module):
    """Attention with linear biases (Press et al., 2022; ``mlx.nn.ALiBi``): adds ``-slope_h * |i - j|`` to
    attention scores ``(..., H, L, S)``, the slopes geometric per head as the paper's.

    Call: ``alibi(attention_scores, offset=0, mask=None)``: query positions start at ``offset``; an additive
    ``mask`` is added too. Returns the scores' shape.
    """

    @staticmethod
    def create_alibi_slope(num_heads: int, dtype=dtypes.float32):
        """The slopes ``(num_heads, 1, 1)`` (``mlx.nn.ALiBi.create_alibi_slope``)."""
        def slopes(n):
            if math.log2(n).is_integer():
                start = 2 ** (-(2 ** -(math.log2(n) - 3)))
                return [start * start ** i for i in range(n)]
            p = 2 ** math.floor(math.log2(n))
            return slopes(p) + slopes(2 * p)[0::2][:n - p]
        return _np().asarray(np.array(slopes(num_heads), np.float64).reshape(num_heads, 1, 1), dtype=dtype)

    @staticmethod
    def create_alibi_matrix(q_sequence_length: int, k_sequence_length: int, num_heads: int, offset: int = 0,
                            dtype=dtypes.float32):
        """The biases ``(1, num_heads, q_sequence_length - offset, k_sequence_length)``
        (``mlx.nn.ALiBi.create_alibi_matrix``)."""
        fnp = _np()
        x1 = np.arange(offset, q_sequence_length)
        x2 = np.arange(0, k_sequence_length)
        distance = fnp.asarray(-np.abs(x1[:, None] - x2[None, :])[None, None].astype(np.float32))
        return (distance * ALiBi.create_alibi_slope(num_heads, dtypes.float32)).astype(dtype)

    def __call__(self, attention_scores, offset: int = 0, mask=None):
        s = _np().asarray(attention_scores)
        bias = ALiBi.create_alibi_matrix(s.shape[-2] + offset, s.shape[-1], s.shape[-3], offset, s.dtype)
        if mask is not None:
            bias = bias + mask
        return s + bias


# ----------------------------------------------------------------------------- normalisation (channels last)


class GroupNorm(Module):
    """Group normalization (Wu & He, 2018; ``mlx.nn.GroupNorm``) over channels-last inputs ``(N, ..., dims)``.

    MLX's default groups the channels ``c`` with ``c % num_groups`` alike (mean and variance over the spatial
    axes and those channels); ``pytorch_compatible=True`` groups consecutive channels, as PyTorch. ``affine``
    adds ``weight`` (ones) and ``bias`` (zeros) per channel.

    Raises: ``ValueError`` when ``num_groups`` does not divide ``dims``; ``ShapeError`` for an input whose last
    axis is not ``dims``.
    """

    weight: Any
    bias: Any
    num_groups: int
    dims: int
    eps: float
    pytorch_compatible: bool

    def __init__(self, num_groups: int, dims: int, eps: float = 1e-5, affine: bool = True,
                 pytorch_compatible: bool = False):
        if num_groups <= 0 or dims % num_groups:
            raise ValueError(f"GroupNorm: num_groups {num_groups} must divide dims {dims}")
        fnp = _np()
        self.num_groups, self.dims, self.eps = int(num_groups), int(dims), float(eps)
        self.pytorch_compatible = bool(pytorch_compatible)
        self.weight = fnp.ones((dims,)) if affine else None
        self.bias = fnp.zeros((dims,)) if affine else None

    def __call__(self, x):
        fnp = _np()
        x = fnp.asarray(x)
        if x.ndim < 2 or x.shape[-1] != self.dims:
            raise ShapeError(f"GroupNorm: the input must be (N, ..., {self.dims}), got {tuple(x.shape)}")
        n, g = x.shape[0], self.num_groups
        if self.pytorch_compatible:
            y = fnp.reshape(x, (n, -1, g, self.dims // g))
            axes = (1, 3)
        else:
            y = fnp.reshape(x, (n, -1, g))
            axes = (1,)
        mean = fnp.mean(y, axis=axes, keepdims=True)
        var = fnp.var(y, axis=axes, keepdims=True)
        y = fnp.reshape((y - mean) * (1 / fnp.sqrt(var + self.eps)), x.shape)
        if self.weight is not None:
            y = y * self.weight + self.bias
        return y


class InstanceNorm(Module):
    """Instance normalization (Ulyanov et al., 2016; ``mlx.nn.InstanceNorm``): mean and variance over the
    spatial axes of each example and channel, inputs ``(N, ..., dims)``; ``affine`` adds ``weight`` and ``bias``.

    Raises: ``ShapeError`` for an input of rank below 3 or whose last axis is not ``dims``.
    """

    weight: Any
    bias: Any
    dims: int
    eps: float

    def __init__(self, dims: int, eps: float = 1e-5, affine: bool = False):
        fnp = _np()
        self.dims, self.eps = int(dims), float(eps)
        self.weight = fnp.ones((dims,)) if affine else None
        self.bias = fnp.zeros((dims,)) if affine else None

    def __call__(self, x):
        fnp = _np()
        x = fnp.asarray(x)
        if x.ndim < 3 or x.shape[-1] != self.dims:
            raise ShapeError(f"InstanceNorm: the input must be (N, ..., {self.dims}) of rank 3 or more, got "
                             f"{tuple(x.shape)}")
        axes = tuple(range(1, x.ndim - 1))
        mean = fnp.mean(x, axis=axes, keepdims=True)
        var = fnp.var(x, axis=axes, keepdims=True)
        y = (x - mean) * (1 / fnp.sqrt(var + self.eps))
        if self.weight is not None:
            y = y * self.weight + self.bias
        return y


# ----------------------------------------------------------------------------- pooling modules (channels last)


def _ints(value, n, name):
    t = (value,) * n if isinstance(value, int) else tuple(value)
    if len(t) != n:
        raise ValueError(f"{name}: expected an int or {n} ints, got {value!r}")
    return tuple(int(v) for v in t)


class _Pool(Module):
    kernel_size: Any
    stride: Any = None
    padding: Any = 0
    _rank = 1
    _max = True

    def __call__(self, x):
        k = _ints(self.kernel_size, self._rank, type(self).__name__)
        s = k if self.stride is None else _ints(self.stride, self._rank, type(self).__name__)
        p = _ints(self.padding, self._rank, type(self).__name__)
        pads = tuple((v, v) for v in p)
        fn = max_pool if self._max else avg_pool
        return fn(x, k, s, pads)


def _pool_class(name, rank, is_max):
    pad = "-inf" if is_max else "zeros, counted in the average"
    doc = (f"{'Max' if is_max else 'Average'} pooling over {rank} spatial axes of channels-last inputs "
           f"``(N, *spatial, C)`` (``mlx.nn.{name}``).\n\n    Args (constructor): ``kernel_size``, ``stride`` "
           f"(default the kernel size), ``padding`` (0; {pad} at both ends), each an int or {rank} ints.\n")
    return type(name, (_Pool,), {"__doc__": doc, "_rank": rank, "_max": is_max, "__module__": __name__,
                                 "__annotations__": {}})


MaxPool1d = _pool_class("MaxPool1d", 1, True)
MaxPool2d = _pool_class("MaxPool2d", 2, True)
MaxPool3d = _pool_class("MaxPool3d", 3, True)
AvgPool1d = _pool_class("AvgPool1d", 1, False)
AvgPool2d = _pool_class("AvgPool2d", 2, False)
AvgPool3d = _pool_class("AvgPool3d", 3, False)


# ----------------------------------------------------------------------------- the transformer


def _attention(dims, num_heads, key):
    """``mlx.nn.MultiHeadAttention(dims, num_heads)``: four projections without bias."""
    return MultiHeadAttention(num_heads, dims, key=key)


def _dropout(layer, x, key):
    return x if key is None or layer.rate == 0 else layer(x, key=key)


def _keys(key, n):
    return [None] * n if key is None else list(random.split(key, n))


class TransformerEncoderLayer(Module):
    """One encoder layer (``mlx.nn.TransformerEncoderLayer``): self-attention and an MLP, each with a residual,
    layer norms before (``norm_first=True``, MLX's default) or after.

    Args (constructor): ``dims``, ``num_heads``, ``mlp_dims`` (``4 * dims``), ``dropout`` (0.0), ``activation``
      (``relu``), ``norm_first`` (True); ``key``: an ``fa.random`` key for the weights.
    Call: ``layer(x, mask, *, key=None)``: ``x: (..., L, dims)``, ``mask`` additive, broadcastable to
      ``(..., heads, L, L)`` (``MultiHeadAttention.create_additive_causal_mask(L)``) or ``None``; dropout runs only
      with ``key``.
    """

    attention: MultiHeadAttention
    ln1: LayerNorm
    ln2: LayerNorm
    linear1: Linear
    linear2: Linear
    dropout1: Dropout
    dropout2: Dropout
    activation: Callable = field(static=True)
    norm_first: bool = True

    def __init__(self, dims: int, num_heads: int, mlp_dims: int | None = None, dropout: float = 0.0,
                 activation: Callable = F.relu, norm_first: bool = True, *, key):
        mlp_dims = mlp_dims or dims * 4
        ka, k1, k2 = random.split(key, 3)
        self.attention = _attention(dims, num_heads, ka)
        self.ln1, self.ln2 = LayerNorm(dims), LayerNorm(dims)
        self.linear1, self.linear2 = Linear(dims, mlp_dims, key=k1), Linear(mlp_dims, dims, key=k2)
        self.dropout1, self.dropout2 = Dropout(dropout), Dropout(dropout)
        self.activation, self.norm_first = activation, bool(norm_first)

    def __call__(self, x, mask=None, *, key=None):
        k1, k2 = _keys(key, 2)
        if self.norm_first:
            y = self.ln1(x)
            x = x + _dropout(self.dropout1, self.attention(y, y, y, bias=mask), k1)
            y = self.linear1(self.ln2(x))
            return x + self.linear2(_dropout(self.dropout2, self.activation(y), k2))
        x = self.ln1(x + _dropout(self.dropout1, self.attention(x, x, x, bias=mask), k1))
        y = _dropout(self.dropout2, self.activation(self.linear1(x)), k2)
        return self.ln2(x + self.linear2(y))


class TransformerEncoder(Module):
    """``num_layers`` encoder layers and a final ``LayerNorm`` (``mlx.nn.TransformerEncoder``).

    Args (constructor): ``num_layers`` and ``TransformerEncoderLayer``'s; ``checkpoint`` (False) wraps each layer
      in ``fa.checkpoint``; ``key``.
    Call: ``encoder(x, mask, *, key=None)``.
    """

    layers: list
    ln: LayerNorm
    checkpoint: bool = False

    def __init__(self, num_layers: int, dims: int, num_heads: int, mlp_dims: int | None = None,
                 dropout: float = 0.0, activation=F.relu, norm_first: bool = True, checkpoint: bool = False, *, key):
        self.layers = [TransformerEncoderLayer(dims, num_heads, mlp_dims, dropout, activation, norm_first, key=k)
                       for k in random.split(key, num_layers)]
        self.ln = LayerNorm(dims)
        self.checkpoint = bool(checkpoint)

    def __call__(self, x, mask=None, *, key=None):
        for layer, k in zip(self.layers, _keys(key, len(self.layers)), strict=True):
            x = _maybe_checkpoint(layer, self.checkpoint)(x, mask, key=k)
        return self.ln(x)


def _maybe_checkpoint(layer, on):
    if not on:
        return layer
    from fnarray.transforms.ad import checkpoint
    return lambda *args, key=None: checkpoint(lambda lay, *a: lay(*a, key=key))(layer, *args)


class TransformerDecoderLayer(Module):
    """One decoder layer (``mlx.nn.TransformerDecoderLayer``): self-attention, cross-attention over the
    encoder's output (``memory``) and an MLP, each with a residual, norms first by default.

    Call: ``layer(x, memory, x_mask, memory_mask, *, key=None)`` (masks additive or ``None``).
    """

    self_attention: MultiHeadAttention
    cross_attention: MultiHeadAttention
    ln1: LayerNorm
    ln2: LayerNorm
    ln3: LayerNorm
    linear1: Linear
    linear2: Linear
    dropout1: Dropout
    dropout2: Dropout
    dropout3: Dropout
    activation: Callable = field(static=True)
    norm_first: bool = True

    def __init__(self, dims: int, num_heads: int, mlp_dims: int | None = None, dropout: float = 0.0,
                 activation: Callable = F.relu, norm_first: bool = True, *, key):
        mlp_dims = mlp_dims or dims * 4
        ks, kc, k1, k2 = random.split(key, 4)
        self.self_attention = _attention(dims, num_heads, ks)
        self.cross_attention = _attention(dims, num_heads, kc)
        self.ln1, self.ln2, self.ln3 = LayerNorm(dims), LayerNorm(dims), LayerNorm(dims)
        self.linear1, self.linear2 = Linear(dims, mlp_dims, key=k1), Linear(mlp_dims, dims, key=k2)
        self.dropout1, self.dropout2, self.dropout3 = Dropout(dropout), Dropout(dropout), Dropout(dropout)
        self.activation, self.norm_first = activation, bool(norm_first)

    def __call__(self, x, memory, x_mask=None, memory_mask=None, *, key=None):
        k1, k2, k3 = _keys(key, 3)
        if self.norm_first:
            y = self.ln1(x)
            x = x + _dropout(self.dropout1, self.self_attention(y, y, y, bias=x_mask), k1)
            y = self.ln2(x)
            x = x + _dropout(self.dropout2, self.cross_attention(y, memory, memory, bias=memory_mask), k2)
            y = self.linear1(self.ln3(x))
            return x + self.linear2(_dropout(self.dropout3, self.activation(y), k3))
        x = self.ln1(x + _dropout(self.dropout1, self.self_attention(x, x, x, bias=x_mask), k1))
        x = self.ln2(x + _dropout(self.dropout2, self.cross_attention(x, memory, memory, bias=memory_mask), k2))
        y = _dropout(self.dropout3, self.activation(self.linear1(x)), k3)
        return self.ln3(x + self.linear2(y))


class TransformerDecoder(Module):
    """``num_layers`` decoder layers and a final ``LayerNorm`` (``mlx.nn.TransformerDecoder``).

    Call: ``decoder(x, memory, x_mask, memory_mask, *, key=None)``.
    """

    layers: list
    ln: LayerNorm
    checkpoint: bool = False

    def __init__(self, num_layers: int, dims: int, num_heads: int, mlp_dims: int | None = None,
                 dropout: float = 0.0, activation=F.relu, norm_first: bool = True, checkpoint: bool = False, *, key):
        self.layers = [TransformerDecoderLayer(dims, num_heads, mlp_dims, dropout, activation, norm_first, key=k)
                       for k in random.split(key, num_layers)]
        self.ln = LayerNorm(dims)
        self.checkpoint = bool(checkpoint)

    def __call__(self, x, memory, x_mask=None, memory_mask=None, *, key=None):
        for layer, k in zip(self.layers, _keys(key, len(self.layers)), strict=True):
            x = _maybe_checkpoint(layer, self.checkpoint)(x, memory, x_mask, memory_mask, key=k)
        return self.ln(x)


class Transformer(Module):
    """An encoder-decoder transformer (Vaswani et al., 2017; ``mlx.nn.Transformer``).

    Args (constructor): ``dims`` (512), ``num_heads`` (8), ``num_encoder_layers`` (6), ``num_decoder_layers`` (6),
      ``mlp_dims``, ``dropout``, ``activation``, ``custom_encoder``/``custom_decoder`` (modules used instead),
      ``norm_first``, ``checkpoint``; ``key``.
    Call: ``transformer(src, tgt, src_mask, tgt_mask, memory_mask, *, key=None)`` -> ``(..., T, dims)``.
    """

    encoder: Any
    decoder: Any

    def __init__(self, dims: int = 512, num_heads: int = 8, num_encoder_layers: int = 6,
                 num_decoder_layers: int = 6, mlp_dims: int | None = None, dropout: float = 0.0,
                 activation: Callable = F.relu, custom_encoder=None, custom_decoder=None, norm_first: bool = True,
                 checkpoint: bool = False, *, key):
        ke, kd = random.split(key)
        self.encoder = custom_encoder or TransformerEncoder(num_encoder_layers, dims, num_heads, mlp_dims, dropout,
                                                            activation, norm_first, checkpoint, key=ke)
        self.decoder = custom_decoder or TransformerDecoder(num_decoder_layers, dims, num_heads, mlp_dims, dropout,
                                                            activation, norm_first, checkpoint, key=kd)

    def __call__(self, src, tgt, src_mask=None, tgt_mask=None, memory_mask=None, *, key=None):
        ke, kd = _keys(key, 2)
        memory = self.encoder(src, src_mask, key=ke)
        return self.decoder(tgt, memory, tgt_mask, memory_mask, key=kd)


# ----------------------------------------------------------------------------- recurrent layers


def _uniform(key, shape, hidden_size):
    s = 1.0 / math.sqrt(hidden_size)
    return random.uniform(key, shape, minval=-s, maxval=s)


def _over_time(step, x, carry):
    """``step(carry, x_t) -> (carry, outputs)`` over axis -2 of ``x`` (``(..., L, D)``) with ``lax.scan``; the
    stacked outputs with time back at axis -2."""
    from fnarray.transforms.control_flow import scan
    fnp = _np()
    from fnarray import tree_util
    _, ys = scan(step, carry, fnp.moveaxis(x, -2, 0))
    return tree_util.tree_map(lambda y: fnp.moveaxis(y, 0, -2), ys)


def _check_seq(x, size, name):
    x = _np().asarray(x)
    if x.ndim < 2 or x.shape[-1] != size:
        raise ShapeError(f"{name}: the input must be (..., L, {size}), got {tuple(x.shape)}")
    return x


class RNN(Module):
    """An Elman recurrent layer (``mlx.nn.RNN``): ``h_t = nonlinearity(x_t Wxh^T + bias + h_{t-1} Whh^T)``.

    Args (constructor): ``input_size``, ``hidden_size``, ``bias`` (True), ``nonlinearity`` (``tanh``); ``key``.
      Weights uniform in ``±1/sqrt(hidden_size)`` as MLX's: ``Wxh (hidden, input)``, ``Whh (hidden, hidden)``.
    Call: ``rnn(x, hidden=None)``: ``x: (..., L, input_size)``, ``hidden: (..., hidden_size)`` (zeros) ->
      every step's hidden state ``(..., L, hidden_size)``.
    """

    Wxh: Any
    Whh: Any
    bias: Any
    hidden_size: int
    nonlinearity: Callable = field(static=True)

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, nonlinearity=None, *, key):
        k1, k2, k3 = random.split(key, 3)
        self.hidden_size = int(hidden_size)
        self.Wxh = _uniform(k1, (hidden_size, input_size), hidden_size)
        self.Whh = _uniform(k2, (hidden_size, hidden_size), hidden_size)
        self.bias = _uniform(k3, (hidden_size,), hidden_size) if bias else None
        self.nonlinearity = nonlinearity or F.tanh

    def __call__(self, x, hidden=None):
        fnp = _np()
        x = _check_seq(x, self.Wxh.shape[1], "RNN") @ self.Wxh.T
        if self.bias is not None:
            x = x + self.bias
        h0 = fnp.zeros(x.shape[:-2] + (self.hidden_size,), x.dtype) if hidden is None else fnp.asarray(hidden)

        def step(h, xt):
            h = self.nonlinearity(xt + h @ self.Whh.T)
            return h, h
        return _over_time(step, x, h0)


class GRU(Module):
    """A gated recurrent unit (Cho et al., 2014; ``mlx.nn.GRU``), gates ``r, z, n`` in that order:
    ``r, z = sigmoid(x Wx_rz + b_rz + h Wh_rz)``, ``n = tanh(x Wx_n + b_n + r * (h Wh_n + bhn))``,
    ``h = (1 - z) * n + z * h``.

    Args (constructor): ``input_size``, ``hidden_size``, ``bias`` (True); ``key``. Weights ``Wx (3H, D)``,
      ``Wh (3H, H)``, ``b (3H,)``, ``bhn (H,)``, uniform in ``±1/sqrt(H)``.
    Call: ``gru(x, hidden=None)`` -> ``(..., L, H)``.
    """

    Wx: Any
    Wh: Any
    b: Any
    bhn: Any
    hidden_size: int

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, *, key):
        k1, k2, k3, k4 = random.split(key, 4)
        h = self.hidden_size = int(hidden_size)
        self.Wx = _uniform(k1, (3 * h, input_size), h)
        self.Wh = _uniform(k2, (3 * h, h), h)
        self.b = _uniform(k3, (3 * h,), h) if bias else None
        self.bhn = _uniform(k4, (h,), h) if bias else None

    def __call__(self, x, hidden=None):
        fnp = _np()
        H = self.hidden_size
        x = _check_seq(x, self.Wx.shape[1], "GRU") @ self.Wx.T
        if self.b is not None:
            x = x + self.b
        h0 = fnp.zeros(x.shape[:-2] + (H,), x.dtype) if hidden is None else fnp.asarray(hidden)

        def step(h, xt):
            hp = h @ self.Wh.T
            hp_n = hp[..., 2 * H:] + self.bhn if self.bhn is not None else hp[..., 2 * H:]
            rz = F.sigmoid(xt[..., :2 * H] + hp[..., :2 * H])
            r, z = rz[..., :H], rz[..., H:]
            n = F.tanh(xt[..., 2 * H:] + r * hp_n)
            h = (1 - z) * n + z * h
            return h, h
        return _over_time(step, x, h0)


class LSTM(Module):
    """Long short-term memory (Hochreiter & Schmidhuber, 1997; ``mlx.nn.LSTM``), gates ``i, f, g, o`` in that order:
    ``c = f * c + i * g``, ``h = o * tanh(c)``.

    Args (constructor): ``input_size``, ``hidden_size``, ``bias`` (True); ``key``. Weights ``Wx (4H, D)``,
      ``Wh (4H, H)``, ``bias (4H,)``, uniform in ``±1/sqrt(H)``.
    Call: ``lstm(x, hidden=None, cell=None)`` -> ``(hidden states, cell states)``, each ``(..., L, H)``.
    """

    Wx: Any
    Wh: Any
    bias: Any
    hidden_size: int

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, *, key):
        k1, k2, k3 = random.split(key, 3)
        h = self.hidden_size = int(hidden_size)
        self.Wx = _uniform(k1, (4 * h, input_size), h)
        self.Wh = _uniform(k2, (4 * h, h), h)
        self.bias = _uniform(k3, (4 * h,), h) if bias else None

    def __call__(self, x, hidden=None, cell=None):
        fnp = _np()
        H = self.hidden_size
        x = _check_seq(x, self.Wx.shape[1], "LSTM") @ self.Wx.T
        if self.bias is not None:
            x = x + self.bias
        zeros = fnp.zeros(x.shape[:-2] + (H,), x.dtype)
        h0 = zeros if hidden is None else fnp.asarray(hidden)
        c0 = zeros if cell is None else fnp.asarray(cell)

        def step(carry, xt):
            h, c = carry
            ifgo = xt + h @ self.Wh.T
            i, f, o = (F.sigmoid(ifgo[..., k * H:(k + 1) * H]) for k in (0, 1, 3))
            c = f * c + i * F.tanh(ifgo[..., 2 * H:3 * H])
            h = o * F.tanh(c)
            return (h, c), (h, c)
        return _over_time(step, x, (h0, c0))


# ----------------------------------------------------------------------------- transposed convolutions


class _ConvTranspose(Module):
    """A transposed convolution over channels-last inputs (``mlx.nn.ConvTranspose1d``/``2d``/``3d``), the
    gradient of ``Conv`` with respect to its input: ``stride`` dilates the input, ``padding`` trims each side,
    ``output_padding`` adds to the far side. Weight ``(out_channels, *kernel_size, in_channels)`` (MLX's layout),
    uniform in ``±sqrt(1 / (in_channels * prod(kernel_size)))``; bias zeros.

    Args (constructor): ``in_channels``, ``out_channels``, ``kernel_size``, ``stride`` (1), ``padding`` (0),
      ``dilation`` (1), ``output_padding`` (0), ``bias`` (True); ``key``.
    Call: ``x: (N, *spatial, in_channels)`` -> ``(N, *out_spatial, out_channels)`` with
      ``out = (in - 1) * stride - 2 * padding + dilation * (kernel - 1) + output_padding + 1``.
    Raises: ``ShapeError`` (call) for an input without that rank and ``in_channels`` features.
    """

    weight: Any
    bias: Any
    stride: tuple
    padding: tuple
    dilation: tuple
    output_padding: tuple
    _rank = 1

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0, dilation=1,
                 output_padding=0, bias: bool = True, *, key):
        n, name = self._rank, type(self).__name__
        ks = _ints(kernel_size, n, name)
        s = math.sqrt(1 / (in_channels * math.prod(ks)))
        self.weight = random.uniform(key, (out_channels,) + ks + (in_channels,), minval=-s, maxval=s)
        self.bias = _np().zeros((out_channels,)) if bias else None
        self.stride, self.padding = _ints(stride, n, name), _ints(padding, n, name)
        self.dilation, self.output_padding = _ints(dilation, n, name), _ints(output_padding, n, name)

    def __call__(self, x):
        from fnarray.core.conv import ConvDimensionNumbers
        from fnarray.core.lax_conv import conv_general_dilated
        fnp = _np()
        n = self._rank
        x = fnp.asarray(x)
        if x.ndim != n + 2 or x.shape[-1] != self.weight.shape[-1]:
            raise ShapeError(f"{type(self).__name__}: the input must be (N, {n} spatial, {self.weight.shape[-1]}), "
                             f"got {tuple(x.shape)}")
        ks = self.weight.shape[1:-1]
        pads = [(d * (k - 1) - p, d * (k - 1) - p + o)
                for k, d, p, o in zip(ks, self.dilation, self.padding, self.output_padding, strict=True)]
        spec = (0, n + 1) + tuple(range(1, n + 1))
        w = fnp.flip(self.weight, axis=tuple(range(1, n + 1)))
        y = conv_general_dilated(x, w, (1,) * n, pads, lhs_dilation=self.stride, rhs_dilation=self.dilation,
                                 dimension_numbers=ConvDimensionNumbers(spec, spec, spec))
        return y + self.bias if self.bias is not None else y


def _conv_transpose_class(rank):
    doc = _ConvTranspose.__doc__.replace("A transposed convolution", f"A {rank}-d transposed convolution")
    return type(f"ConvTranspose{rank}d", (_ConvTranspose,), {"_rank": rank, "__module__": __name__,
                                                             "__annotations__": {}, "__doc__": doc,
                                                             "__init__": _ConvTranspose.__init__.__wrapped__})


ConvTranspose1d = _conv_transpose_class(1)
ConvTranspose2d = _conv_transpose_class(2)
ConvTranspose3d = _conv_transpose_class(3)


# ----------------------------------------------------------------------------- upsampling


def _nearest_positions(n, scale):
    m = int(scale * n)
    idx = np.arange(m, dtype=np.float32)
    idx = np.round((idx + 0.5) * np.float32(n / m) - 0.5) if m > n else idx * np.float32(n / m)
    return idx.astype(np.int32)


def _linear_positions(n, scale, align_corners):
    m = int(scale * n)
    if align_corners:
        idx = np.arange(m, dtype=np.float32) * np.float32((n - 1) / max(m - 1, 1))
    else:
        step = 1 / scale
        idx = np.arange(m, dtype=np.float32) * np.float32(step) - np.float32(((m - 1) * step - n + 1) / 2)
    idx = np.clip(idx, 0, n - 1)
    lo, hi = np.floor(idx), np.ceil(idx)
    return lo.astype(np.int32), hi.astype(np.int32), (idx - lo).astype(np.float32)


class Upsample(Module):
    """Upsampling of channels-last inputs ``(N, *spatial, C)`` by ``scale_factor`` per spatial axis
    (``mlx.nn.Upsample``): ``mode="nearest"`` or ``"linear"`` (bi/trilinear, ``align_corners`` as MLX's); each
    output size is ``int(scale * size)``.

    Raises: ``NotImplementedError`` for ``mode="cubic"`` or ``antialias=True`` (not ported yet: nearest and linear
    work); ``ValueError`` for another mode; ``ShapeError`` (call) for a rank that ``scale_factor`` does not fit.
    """

    scale_factor: Any
    mode: str = "nearest"
    align_corners: bool = False
    antialias: bool = False

    def __check_init__(self):
        if self.mode == "cubic" or self.antialias:
            raise NotImplementedError("Upsample: mode='cubic' and antialias=True are not supported; 'nearest' and "
                                      "'linear' are")
        if self.mode not in ("nearest", "linear"):
            raise ValueError(f"Upsample: mode={self.mode!r}; use 'nearest' or 'linear' (MLX's)")

    def __call__(self, x):
        fnp = _np()
        x = fnp.asarray(x)
        dims = x.ndim - 2
        scales = (self.scale_factor,) * dims if isinstance(self.scale_factor, (int, float)) else \
            tuple(self.scale_factor)
        if dims < 1 or len(scales) != dims:
            raise ShapeError(f"Upsample: scale_factor {self.scale_factor!r} for an input of shape {tuple(x.shape)} "
                             "(N, *spatial, C)")
        for axis, s in enumerate(scales, start=1):
            n = x.shape[axis]
            if self.mode == "nearest":
                x = fnp.take(x, fnp.asarray(_nearest_positions(n, s)), axis=axis)
                continue
            lo, hi, w = _linear_positions(n, s, self.align_corners)
            w = fnp.asarray(w.reshape((-1,) + (1,) * (x.ndim - axis - 1)))
            x = fnp.take(x, fnp.asarray(lo), axis=axis) * (1 - w) + fnp.take(x, fnp.asarray(hi), axis=axis) * w
        return x


def value_and_grad(model, fn):
    """``mlx.nn.value_and_grad(model, fn)``: a function of ``(model, *args)`` returning ``(fn(model, *args),
    gradients)``, the gradients a model of the same structure (every array of it; fnarray freezes nothing in
    place), ready for ``optimizer.update(grads, state, model)``. ``model`` is not captured: pass the current one
    at each call (fnarray modules are values). As MLX's, ``fn`` may return a tuple or list whose first element is
    the scalar differentiated (mlx-examples' gcn returns ``(loss, y_hat)``): the value returned is then that whole
    tuple. A scalar result is ``fa.value_and_grad(fn)``'s.

    Args:
      model: the module (MLX's argument; only its presence is checked); fn: ``fn(model, *args) -> scalar`` or
        ``-> (scalar, *rest)``.
    Returns:
      The function above.
    Raises:
      ``TypeError`` when ``model`` is not a ``Module`` or ``fn`` is not callable.
    """
    from fnarray.transforms.ad import value_and_grad as vg
    if not isinstance(model, Module) or not callable(fn):
        raise TypeError("nn.value_and_grad(model, fn): model must be a fnarray.nn.Module and fn callable, got "
                        f"{type(model).__name__} and {type(fn).__name__}")
    def first_and_rest(*args, **kwargs):
        out = fn(*args, **kwargs)
        return (out[0], out) if isinstance(out, (tuple, list)) and out else (out, None)

    inner = vg(first_and_rest, has_aux=True)

    def value_and_grad_fn(*args, **kwargs):
        (value, whole), grads = inner(*args, **kwargs)
        return (value if whole is None else whole), grads

    value_and_grad_fn.__wrapped__ = fn
    return value_and_grad_fn
