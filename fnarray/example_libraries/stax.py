"""Neural network layers as ``(init_fun, apply_fun)`` pairs (mirrors ``jax.example_libraries.stax``).

A layer is a pair of functions:

- ``init_fun(rng, input_shape)`` -> ``(output_shape, params)``: draws the layer's parameters from the
  PRNG key ``rng`` for inputs of ``input_shape`` (a tuple whose leading dimension may be ``-1``, "any");
- ``apply_fun(params, inputs, **kwargs)`` -> outputs; ``rng=key`` in ``kwargs`` feeds ``Dropout``.

Combinators (``serial``, ``parallel``, ``shape_dependent``) build layers from layers. Keys are split and
parameters drawn exactly as JAX's stax does (the same ``split`` order and the same initialisers of
``fnarray.nn.initializers``), so ``init_fun(key, shape)`` gives JAX's parameters for the same key: bit for
bit where the samplers are (uniform-based initialisers everywhere; normal-based ones on numpy:0 and jax:0,
see ``fnarray.random.normal``).
"""

from __future__ import annotations

import functools
import math
import operator

import fnarray.numpy as fnp
from fnarray import lax, random
from fnarray.nn import (elu, gelu, leaky_relu, log_softmax, relu, selu, sigmoid, softmax, softplus,
                        standardize)
from fnarray.nn.initializers import glorot_normal, normal, ones, zeros

__all__ = ["AvgPool", "BatchNorm", "Conv", "Conv1DTranspose", "ConvTranspose", "Dense", "Dropout", "Elu", "Exp",
           "FanInConcat", "FanInSum", "FanOut", "Flatten", "Gelu", "GeneralConv", "GeneralConvTranspose",
           "Identity", "LeakyRelu", "LogSoftmax", "MaxPool", "Relu", "Selu", "Sigmoid", "Softmax", "Softplus",
           "SumPool", "Tanh", "elementwise", "glorot", "logsoftmax", "parallel", "randn", "serial",
           "shape_dependent"]

glorot = glorot_normal
randn = normal
logsoftmax = log_softmax


def Dense(out_dim, W_init=glorot_normal(), b_init=normal()):  # noqa: B008 (JAX's signature; pure initialisers)
    """A fully connected layer ``inputs @ W + b``.

    Args:
      out_dim: the number of output features.
      W_init, b_init: initialisers ``(key, shape) -> array`` of ``W`` (``(in_dim, out_dim)``) and ``b``
        (``(out_dim,)``), drawn from the two halves of ``split(rng)``.
    Returns:
      a layer; inputs ``(..., in_dim)`` give outputs ``(..., out_dim)``.
    """
    def init_fun(rng, input_shape):
        k1, k2 = random.split(rng)
        return tuple(input_shape[:-1]) + (out_dim,), (W_init(k1, (input_shape[-1], out_dim)), b_init(k2, (out_dim,)))

    def apply_fun(params, inputs, **kwargs):
        W, b = params
        return fnp.dot(inputs, W) + b

    return init_fun, apply_fun


def _kernel_shape(specs, out_chan, filter_shape, input_shape):
    lhs_spec, rhs_spec, _ = specs
    spatial = iter(filter_shape)
    return [out_chan if c == "O" else input_shape[lhs_spec.index("C")] if c == "I" else next(spatial)
            for c in rhs_spec]


def _spatial(spec):
    return [i for i, c in enumerate(spec) if c not in "NCIO"]


def _conv_output_shape(specs, input_shape, kernel_shape, strides, padding, transpose):
    """The output shape of a (transposed) convolution of ``input_shape`` by ``kernel_shape`` (arithmetic on
    the shapes only, so a leading ``-1`` stays ``-1``)."""
    lhs_spec, rhs_spec, out_spec = specs
    sizes = [input_shape[i] for i in _spatial(lhs_spec)]
    windows = [kernel_shape[i] for i in _spatial(rhs_spec)]
    if transpose:
        if isinstance(padding, str):
            extra = {"SAME": lambda k, s: 0, "VALID": lambda k, s: max(k - s, 0)}[padding.upper()]
            out = [n * s + extra(k, s) for n, k, s in zip(sizes, windows, strides)]
        else:
            out = [(n - 1) * s - k + 2 + lo + hi for n, k, s, (lo, hi) in zip(sizes, windows, strides, padding)]
    else:
        pads = lax.padtype_to_pads(sizes, windows, strides, padding) if isinstance(padding, str) else padding
        out = [(n + lo + hi - k) // s + 1 for n, k, s, (lo, hi) in zip(sizes, windows, strides, pads)]
    by_letter = {"N": input_shape[lhs_spec.index("N")], "C": kernel_shape[rhs_spec.index("O")]}
    out_iter = iter(out)
    return tuple(by_letter[c] if c in by_letter else next(out_iter) for c in out_spec)


def _general_conv(transpose, dimension_numbers, out_chan, filter_shape, strides, padding, W_init, b_init):
    lhs_spec, rhs_spec, out_spec = dimension_numbers
    one = (1,) * len(filter_shape)
    strides = tuple(strides or one)
    W_init = W_init or glorot_normal(rhs_spec.index("I"), rhs_spec.index("O"))

    def init_fun(rng, input_shape):
        kernel_shape = _kernel_shape(dimension_numbers, out_chan, filter_shape, input_shape)
        output_shape = _conv_output_shape(dimension_numbers, input_shape, kernel_shape, strides, padding, transpose)
        bias_shape = [out_chan if c == "C" else 1 for c in out_spec]
        k1, k2 = random.split(rng)
        return output_shape, (W_init(k1, kernel_shape), b_init(k2, bias_shape))

    def apply_fun(params, inputs, **kwargs):
        W, b = params
        if transpose:
            out = lax.conv_transpose(inputs, W, strides, padding, dimension_numbers=dimension_numbers)
        else:
            out = lax.conv_general_dilated(inputs, W, strides, padding, one, one, dimension_numbers=dimension_numbers)
        return out + b

    return init_fun, apply_fun


def GeneralConv(dimension_numbers, out_chan, filter_shape, strides=None, padding="VALID", W_init=None,
                b_init=normal(1e-6)):  # noqa: B008 (JAX's signature)
    """A convolution layer with bias, of any layout.

    Args:
      dimension_numbers: ``(lhs_spec, rhs_spec, out_spec)`` strings such as ``("NHWC", "HWIO", "NHWC")``.
      out_chan: the number of output channels.
      filter_shape: the spatial window, in the order of ``rhs_spec``'s spatial letters.
      strides: per spatial axis (default ones); padding: ``"VALID"``, ``"SAME"`` or ``(lo, hi)`` pairs.
      W_init: default ``glorot_normal`` over the kernel's ``I`` and ``O`` axes; b_init: default
        ``normal(1e-6)``, of shape 1 on every output axis but ``C``.
    Returns:
      a layer computing ``conv_general_dilated(inputs, W, strides, padding) + b``.
    """
    return _general_conv(False, dimension_numbers, out_chan, filter_shape, strides, padding, W_init, b_init)


def GeneralConvTranspose(dimension_numbers, out_chan, filter_shape, strides=None, padding="VALID", W_init=None,
                         b_init=normal(1e-6)):  # noqa: B008 (JAX's signature)  # noqa: B008 (JAX's signature)
    """A transposed convolution layer with bias (``lax.conv_transpose``); arguments as ``GeneralConv``."""
    return _general_conv(True, dimension_numbers, out_chan, filter_shape, strides, padding, W_init, b_init)


Conv = functools.partial(GeneralConv, ("NHWC", "HWIO", "NHWC"))
Conv1DTranspose = functools.partial(GeneralConvTranspose, ("NHC", "HIO", "NHC"))
ConvTranspose = functools.partial(GeneralConvTranspose, ("NHWC", "HWIO", "NHWC"))


def BatchNorm(axis=(0, 1, 2), epsilon=1e-5, center=True, scale=True, beta_init=zeros, gamma_init=ones):
    """Batch normalisation over ``axis`` with a learnt shift ``beta`` and scale ``gamma``.

    Args:
      axis: the axes normalised over (an int or a tuple); the parameters have the shape of the others.
      epsilon: added to the variance.
      center, scale: whether ``beta`` / ``gamma`` exist (an absent one is ``()``).
      beta_init, gamma_init: their initialisers, drawn from ``split(rng)``.
    Returns:
      a layer computing ``gamma * standardize(x, axis) + beta``; the output shape is the input's.
    """
    axis = (axis,) if fnp.isscalar(axis) else tuple(axis)

    def init_fun(rng, input_shape):
        shape = tuple(d for i, d in enumerate(input_shape) if i not in axis)
        k1, k2 = random.split(rng)
        return input_shape, (beta_init(k1, shape) if center else (), gamma_init(k2, shape) if scale else ())

    def apply_fun(params, x, **kwargs):
        beta, gamma = params
        expand = tuple(None if i in axis else slice(None) for i in range(fnp.ndim(x)))
        z = standardize(x, axis, epsilon=epsilon)
        if center and scale:
            return gamma[expand] * z + beta[expand]
        if center:
            return z + beta[expand]
        if scale:
            return gamma[expand] * z
        return z

    return init_fun, apply_fun


def elementwise(fun, **fun_kwargs):
    """A parameterless layer applying ``fun(inputs, **fun_kwargs)``."""
    return (lambda rng, input_shape: (input_shape, ())), (lambda params, inputs, **kwargs: fun(inputs, **fun_kwargs))


Tanh = elementwise(fnp.tanh)
Relu = elementwise(relu)
Exp = elementwise(fnp.exp)
LogSoftmax = elementwise(log_softmax, axis=-1)
Softmax = elementwise(softmax, axis=-1)
Softplus = elementwise(softplus)
Sigmoid = elementwise(sigmoid)
Elu = elementwise(elu)
LeakyRelu = elementwise(leaky_relu)
Selu = elementwise(selu)
Gelu = elementwise(gelu)


def _insert_unit_axes(window, strides, spec):
    non_spatial = (0, len(window) + 1) if spec is None else (spec.index("N"), spec.index("C"))
    window, strides = tuple(window), tuple(strides)
    for i in sorted(non_spatial):
        window = window[:i] + (1,) + window[i:]
        strides = strides[:i] + (1,) + strides[i:]
    return window, strides


def _window_sizes(inputs, window, strides, padding, spec):
    """How many input elements each output of a pooling window covers (padding excluded)."""
    non_spatial = (0, inputs.ndim - 1) if spec is None else (spec.index("N"), spec.index("C"))
    spatial = tuple(n for i, n in enumerate(inputs.shape) if i not in non_spatial)
    counts = lax.reduce_window(fnp.ones(spatial, dtype=inputs.dtype), 0., lax.add, window, strides, padding)
    for i in sorted(non_spatial):
        counts = fnp.expand_dims(counts, i)
    return counts


def _pooling_layer(reducer, init_val, average=False):
    def PoolingLayer(window_shape, strides=None, padding="VALID", spec=None):
        spatial_window, spatial_strides = tuple(window_shape), tuple(strides or (1,) * len(window_shape))
        window, full_strides = _insert_unit_axes(spatial_window, spatial_strides, spec)

        def init_fun(rng, input_shape):
            pads = (lax.padtype_to_pads(input_shape, window, full_strides, padding) if isinstance(padding, str)
                    else padding)
            out = tuple((n + lo + hi - w) // s + 1
                        for n, w, s, (lo, hi) in zip(input_shape, window, full_strides, pads))
            return out, ()

        def apply_fun(params, inputs, **kwargs):
            out = lax.reduce_window(inputs, init_val, reducer, window, full_strides, padding)
            if average:
                out = out / _window_sizes(inputs, spatial_window, spatial_strides, padding, spec)
            return out

        return init_fun, apply_fun

    PoolingLayer.__doc__ = (
        f"A {'mean' if average else reducer.__name__} pooling layer over spatial windows.\n\n"
        "    Args:\n"
        "      window_shape: the spatial window; strides: per spatial axis (default ones);\n"
        "      padding: ``\"VALID\"``, ``\"SAME\"`` or pairs; spec: the layout such as ``\"NHWC\"`` (default: batch\n"
        "        first, channels last).\n"
        "    Returns:\n"
        "      a parameterless layer (``lax.reduce_window``).\n")
    return PoolingLayer


MaxPool = _pooling_layer(lax.max, -fnp.inf)
SumPool = _pooling_layer(lax.add, 0.)
AvgPool = _pooling_layer(lax.add, 0., average=True)
MaxPool.__name__, SumPool.__name__, AvgPool.__name__ = "MaxPool", "SumPool", "AvgPool"


def _flatten():
    def init_fun(rng, input_shape):
        return (input_shape[0], math.prod(input_shape[1:])), ()

    return init_fun, lambda params, inputs, **kwargs: fnp.reshape(inputs, (inputs.shape[0], -1))


Flatten = _flatten()
"""A layer flattening every axis but the first."""

Identity = ((lambda rng, input_shape: (input_shape, ())), (lambda params, inputs, **kwargs: inputs))
"""A layer returning its inputs."""


def FanOut(num):
    """A layer returning ``num`` copies of its input (a list), for ``parallel``."""
    return (lambda rng, input_shape: ([input_shape] * num, ())), (lambda params, inputs, **kwargs: [inputs] * num)


FanInSum = ((lambda rng, input_shape: (input_shape[0], ())),
            (lambda params, inputs, **kwargs: functools.reduce(operator.add, inputs)))
"""A layer summing a list of inputs (of one shape)."""


def FanInConcat(axis=-1):
    """A layer concatenating a list of inputs along ``axis``."""
    def init_fun(rng, input_shape):
        ax = axis % len(input_shape[0])
        size = sum(shape[ax] for shape in input_shape)
        return tuple(input_shape[0][:ax]) + (size,) + tuple(input_shape[0][ax + 1:]), ()

    return init_fun, lambda params, inputs, **kwargs: fnp.concatenate(inputs, axis)


def Dropout(rate, mode="train"):
    """Dropout as JAX's stax has it: ``rate`` is the probability of KEEPING an element, and kept elements
    are divided by ``rate``.

    Args:
      rate: the keep probability; mode: ``"train"`` (drop) or anything else (identity).
    Returns:
      a layer whose ``apply_fun`` needs ``rng=key`` in training mode.
    Raises (from ``apply_fun``):
      ValueError: no ``rng`` given.
    """
    def apply_fun(params, inputs, **kwargs):
        rng = kwargs.get("rng")
        if rng is None:
            raise ValueError("Dropout's apply_fun needs a PRNG key: call apply_fun(params, inputs, rng=key) with "
                             "a key from fnarray.random.key")
        if mode != "train":
            return inputs
        keep = random.bernoulli(rng, rate, inputs.shape)
        return fnp.where(keep, inputs / rate, 0)

    return (lambda rng, input_shape: (input_shape, ())), apply_fun


def serial(*layers):
    """The composition of ``layers`` in order. ``init_fun`` splits the key once per layer (``rng, layer_rng =
    split(rng)``); ``apply_fun`` splits a given ``rng`` into one key per layer.

    Returns:
      a layer whose params are the list of the layers' params.
    """
    init_funs, apply_funs = zip(*layers) if layers else ((), ())

    def init_fun(rng, input_shape):
        params = []
        for init in init_funs:
            rng, layer_rng = random.split(rng)
            input_shape, p = init(layer_rng, input_shape)
            params.append(p)
        return input_shape, params

    def apply_fun(params, inputs, **kwargs):
        rng = kwargs.pop("rng", None)
        rngs = random.split(rng, len(layers)) if rng is not None else (None,) * len(layers)
        for fun, p, r in zip(apply_funs, params, rngs):
            inputs = fun(p, inputs, rng=r, **kwargs)
        return inputs

    return init_fun, apply_fun


def parallel(*layers):
    """Layers applied side by side to a sequence of inputs (one each), as after ``FanOut``.

    Returns:
      a layer taking and returning sequences of the layers' length; ``init_fun`` returns the output
      shapes and the params as tuples.
    """
    init_funs, apply_funs = zip(*layers) if layers else ((), ())

    def init_fun(rng, input_shape):
        rngs = random.split(rng, len(layers))
        return zip(*[init(r, shape) for init, r, shape in zip(init_funs, rngs, input_shape)])

    def apply_fun(params, inputs, **kwargs):
        rng = kwargs.pop("rng", None)
        rngs = random.split(rng, len(layers)) if rng is not None else (None,) * len(layers)
        return [f(p, x, rng=r, **kwargs) for f, p, x, r in zip(apply_funs, params, inputs, rngs)]

    return init_fun, apply_fun


def shape_dependent(make_layer):
    """A layer built by ``make_layer(input_shape)`` once the input shape is known (at init and at apply)."""
    def init_fun(rng, input_shape):
        return make_layer(input_shape)[0](rng, input_shape)

    def apply_fun(params, inputs, **kwargs):
        return make_layer(inputs.shape)[1](params, inputs, **kwargs)

    return init_fun, apply_fun
