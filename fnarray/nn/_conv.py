"""Convolution layers: ``Conv`` (any number of spatial dimensions) and ``Conv1d``/``Conv2d``/``Conv3d``.

A layer holds its kernel as PyTorch and Equinox do, ``weight: (out_channels, in_channels // groups, *kernel_size)``,
and takes channels-last inputs by default, as Flax (``x: (..., *spatial, in_channels)``; ``channels_last=False``
takes PyTorch/Equinox's ``(..., in_channels, *spatial)``). Any number of leading axes (none: one example) are the
batch, so one layer takes an example or a batch and ``vmap`` over it works too. It is one
``conv_general_dilated`` with the layout given to it as dimension numbers (no transposes of the input).
"""

from __future__ import annotations

import math
import operator
from typing import Any

from fnarray import random
from fnarray.core import dtypes
from fnarray.core.conv import ConvDimensionNumbers
from fnarray.core.errors import ShapeError
from fnarray.nn import initializers
from fnarray.nn._module import Module

__all__ = ["Conv", "Conv1d", "Conv2d", "Conv3d"]


def _tuple(value, n, name):
    if isinstance(value, int) and not isinstance(value, bool):
        value = (value,) * n
    try:
        out = tuple(operator.index(v) for v in value)
    except TypeError:
        raise TypeError(f"Conv: {name} must be an int or a sequence of {n} ints, got {value!r}") from None
    if len(out) != n or any(v < 1 for v in out):
        raise ValueError(f"Conv: {name} needs {n} positive ints (one per spatial dimension), got {value!r}")
    return out


def _padding(padding, n):
    if isinstance(padding, str):
        if padding.upper() not in ("SAME", "SAME_LOWER", "VALID"):
            raise ValueError(f"Conv: padding must be 'SAME', 'SAME_LOWER', 'VALID', an int or (low, high) pairs, "
                             f"got {padding!r}")
        return padding.upper()
    if isinstance(padding, int) and not isinstance(padding, bool):
        return ((padding, padding),) * n
    pads = tuple(padding)
    if len(pads) != n:
        raise ValueError(f"Conv: padding needs {n} entries (one per spatial dimension), got {padding!r}")
    out = []
    for p in pads:
        if isinstance(p, int):
            out.append((p, p))
        elif len(p) == 2:
            out.append((operator.index(p[0]), operator.index(p[1])))
        else:
            raise ValueError(f"Conv: each padding entry is an int or a (low, high) pair, got {p!r}")
    return tuple(out)


class Conv(Module):
    """An N-d convolution layer (Equinox ``nn.Conv``, Flax ``nn.Conv``): ``y = conv(x, weight) + bias``.

    Args (constructor):
      num_spatial_dims: 1, 2, 3 (or more).
      in_channels, out_channels: feature counts of the input and the output.
      kernel_size: an int or one int per spatial dimension.
      stride: the window strides (int or tuple; default 1).
      padding: ``"VALID"`` (default 0 padding), ``"SAME"``, ``"SAME_LOWER"``, an int, or per dimension an int or
        a ``(low, high)`` pair.
      dilation: the kernel dilation (int or tuple; default 1).
      groups: feature groups; ``in_channels`` and ``out_channels`` must be multiples (``groups == in_channels``
        is a depthwise convolution).
      use_bias: add a bias per output channel (default True).
      channels_last: inputs ``(..., *spatial, C)`` (default, as Flax) or ``(..., C, *spatial)`` (PyTorch).
      key: an ``fa.random.key``; dtype: floating dtype of the parameters (float32).
      weight_init, bias_init: initializers ``(key, shape, dtype)``; default uniform in ``±1/sqrt(fan_in)``
        (PyTorch's), ``fan_in = in_channels / groups * prod(kernel_size)``, and zeros for the bias.
    Fields: ``weight: (out_channels, in_channels // groups, *kernel_size)``, ``bias: (out_channels,)`` or None.
    Call: ``x: (..., *spatial, in_channels)`` (or channels first) -> the same layout with ``out_channels``.

    Raises:
      ValueError: sizes that are not positive, groups that do not divide the channels, a bad padding.
      ShapeError: (call) an input without ``num_spatial_dims`` spatial axes and ``in_channels`` features.
    """

    weight: Any
    bias: Any
    num_spatial_dims: int
    in_channels: int
    out_channels: int
    kernel_size: tuple
    stride: tuple
    padding: Any
    dilation: tuple
    groups: int
    use_bias: bool
    channels_last: bool

    def __init__(self, num_spatial_dims: int, in_channels: int, out_channels: int, kernel_size, stride=1,
                 padding=0, dilation=1, groups: int = 1, use_bias: bool = True, *, key, channels_last: bool = True,
                 dtype=dtypes.float32, weight_init=None, bias_init=None):
        n = operator.index(num_spatial_dims)
        if n < 1:
            raise ValueError(f"Conv: num_spatial_dims must be >= 1, got {num_spatial_dims!r}")
        for name, v in (("in_channels", in_channels), ("out_channels", out_channels), ("groups", groups)):
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"Conv: {name} must be a positive int, got {v!r}")
        if in_channels % groups or out_channels % groups:
            raise ValueError(f"Conv: groups={groups} must divide in_channels={in_channels} and "
                             f"out_channels={out_channels}")
        ks = _tuple(kernel_size, n, "kernel_size")
        shape = (out_channels, in_channels // groups) + ks
        winit = weight_init or initializers.variance_scaling(1 / 3, "fan_in", "uniform", in_axis=1, out_axis=0)
        wkey, bkey = random.split(key)
        self.weight = winit(wkey, shape, dtype)
        self.bias = (bias_init or initializers.zeros)(bkey, (out_channels,), dtype) if use_bias else None
        self.num_spatial_dims, self.in_channels, self.out_channels = n, in_channels, out_channels
        self.kernel_size, self.stride, self.dilation = ks, _tuple(stride, n, "stride"), _tuple(dilation, n, "dilation")
        self.padding, self.groups, self.use_bias = _padding(padding, n), groups, use_bias
        self.channels_last = bool(channels_last)

    def _to_mlx(self, name, value):
        # MLX stores a convolution's weight (out, *kernel, in); fnarray (out, in, *kernel)
        from fnarray import numpy as fnp
        return fnp.moveaxis(value, 1, -1) if name == "weight" else value

    def _from_mlx(self, name, value):
        from fnarray import numpy as fnp
        return fnp.moveaxis(value, -1, 1) if name == "weight" else value

    def __call__(self, x, *, key=None):
        from fnarray import numpy as fnp
        from fnarray.core.lax_conv import conv_general_dilated
        x = fnp.asarray(x)
        n = self.num_spatial_dims
        if x.ndim < n + 1:
            raise ShapeError(f"Conv: the input needs {n} spatial axes and a channel axis (rank >= {n + 1}), got "
                             f"shape {tuple(x.shape)}")
        c_axis = x.ndim - 1 if self.channels_last else x.ndim - n - 1
        if x.shape[c_axis] != self.in_channels:
            raise ShapeError(f"Conv: the input's channel axis ({c_axis}) must have in_channels={self.in_channels}, "
                             f"got shape {tuple(x.shape)}")
        lead = tuple(x.shape[:x.ndim - n - 1])
        x = fnp.reshape(x, (math.prod(lead),) + tuple(x.shape[len(lead):]))
        sp = tuple(range(2, n + 2))
        if self.channels_last:
            dn = ConvDimensionNumbers((0, n + 1) + tuple(range(1, n + 1)), (0, 1) + sp,
                                      (0, n + 1) + tuple(range(1, n + 1)))
        else:
            dn = ConvDimensionNumbers((0, 1) + sp, (0, 1) + sp, (0, 1) + sp)
        y = conv_general_dilated(x, self.weight, self.stride, self.padding, rhs_dilation=self.dilation,
                                 dimension_numbers=dn, feature_group_count=self.groups)
        if self.bias is not None:
            b = self.bias if self.channels_last else fnp.reshape(self.bias, (self.out_channels,) + (1,) * n)
            y = y + b
        return fnp.reshape(y, lead + tuple(y.shape[1:]))


class Conv1d(Conv):
    """``Conv(1, ...)``: inputs ``(..., length, in_channels)`` (or channels first). Args as ``Conv``'s; the
    positional order and ``bias=`` (for ``use_bias``) are ``mlx.nn.Conv1d``'s, as in ``Conv2d`` and ``Conv3d``."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1,
                 use_bias=True, *, key, bias=None, **kwargs):
        super().__init__(1, in_channels, out_channels, kernel_size, stride, padding, dilation, groups,
                         use_bias if bias is None else bias, key=key, **kwargs)


class Conv2d(Conv):
    """``Conv(2, ...)``: inputs ``(..., height, width, in_channels)`` (or channels first). Args as ``Conv``'s."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1,
                 use_bias=True, *, key, bias=None, **kwargs):
        super().__init__(2, in_channels, out_channels, kernel_size, stride, padding, dilation, groups,
                         use_bias if bias is None else bias, key=key, **kwargs)


class Conv3d(Conv):
    """``Conv(3, ...)``: inputs ``(..., depth, height, width, in_channels)`` (or channels first). Args as ``Conv``'s."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1,
                 use_bias=True, *, key, bias=None, **kwargs):
        super().__init__(3, in_channels, out_channels, kernel_size, stride, padding, dilation, groups,
                         use_bias if bias is None else bias, key=key, **kwargs)
