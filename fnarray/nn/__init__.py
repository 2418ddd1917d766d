"""Neural networks (mirrors ``jax.nn``, with Equinox-style layers): functions, modules, losses, initializers.

* Functions: activations, softmax, ``logsumexp``, ``one_hot``, ``dot_product_attention``, pooling
  (``max_pool``, ``avg_pool``, ``min_pool``, as flax's). Each is a
  composite of fnarray primitives, so it works eagerly and under ``jit``, ``grad`` and ``vmap`` on
  every backend; integer and boolean inputs are promoted to float32 where the function is defined
  on reals.
* Modules (``Module``, ``Linear``, ``Conv`` (``Conv1d``/``2d``/``3d``), ``Embedding``, ``LayerNorm``,
  ``RMSNorm``, ``BatchNorm``, ``Dropout``, ``MultiHeadAttention``, ``MLP``, ``Sequential``): immutable pytrees, so
  ``fa.value_and_grad(loss)(model, x, y)`` differentiates a whole model.
* ``mlx.nn``'s layers under its names and arguments (``RoPE``, ``GELU``, ``GroupNorm``, ``MaxPool2d``,
  ``TransformerEncoder``, ``LSTM``, ``ConvTranspose2d``, ``Upsample``...: ``_mlx_layers.py``), and
  ``Module.parameters()``/``update``/``load_weights`` under MLX's dotted names, so MLX checkpoints load by name.
* ``KVCache``: a fixed-capacity key/value cache (one shape for a whole generation, so a jitted decode step is
  traced once).
* Quantized layers (``QuantizedLinear``, ``QuantizedEmbedding``) and ``quantize(model)``, as ``mlx.nn``'s.
* ``fnarray.nn.losses`` and ``fnarray.nn.initializers``.
"""

from fnarray.nn import initializers, losses
from fnarray.nn._attention import dot_product_attention, scaled_dot_product_attention
from fnarray.nn._cache import KVCache
from fnarray.nn._conv import Conv, Conv1d, Conv2d, Conv3d
from fnarray.nn._functions import (celu, elu, gelu, glu, hard_sigmoid, hard_silu, hard_swish, hard_tanh, identity,
                                   leaky_relu, log1mexp, log_sigmoid, log_softmax, logmeanexp, logsumexp, mish, one_hot,
                                   relu,
                                   relu6, selu, sigmoid, silu, soft_sign, softmax, softplus, sparse_plus,
                                   sparse_sigmoid, squareplus, standardize, swish, tanh)
from fnarray.nn._layers import (MLP, BatchNorm, BatchNormState, Dropout, Embedding, Identity, Lambda, LayerNorm,
                                Linear, MultiHeadAttention, RMSNorm, Sequential)
from fnarray.nn._mlx_layers import (ALiBi, AvgPool1d, AvgPool2d, AvgPool3d, CELU, ConvTranspose1d, ConvTranspose2d,
                                    ConvTranspose3d, ELU, GELU, GLU, GRU, LSTM, RNN, GroupNorm, HardShrink, HardTanh,
                                    PReLU, ReLU2, Softmin, Softshrink, Upsample, value_and_grad,
                                    Hardswish, InstanceNorm, LeakyReLU, LogSigmoid, LogSoftmax, MaxPool1d, MaxPool2d,
                                    MaxPool3d, Mish, ReLU, ReLU6, RoPE, SELU, SiLU, Sigmoid,
                                    SinusoidalPositionalEncoding, Softmax, Softplus, Softsign, Step, Tanh, Transformer,
                                    TransformerDecoder, TransformerDecoderLayer, TransformerEncoder,
                                    TransformerEncoderLayer)
from fnarray.nn._module import Module, field, static_field
from fnarray.nn._pooling import avg_pool, max_pool, min_pool
from fnarray.nn._quantized import QuantizedEmbedding, QuantizedLinear, quantize

__all__ = [
    "celu", "elu", "gelu", "hard_sigmoid", "hard_silu", "hard_swish", "hard_tanh", "initializers", "leaky_relu",
    "log_sigmoid", "log_softmax", "logsumexp", "logmeanexp", "one_hot", "relu", "relu6", "selu", "sigmoid", "silu",
    "soft_sign",
    "softmax", "softplus", "standardize", "swish", "tanh", "glu", "identity", "log1mexp", "mish", "sparse_plus",
    "sparse_sigmoid", "squareplus",
    "dot_product_attention", "scaled_dot_product_attention", "KVCache", "losses", "Module", "field", "static_field",
    "BatchNorm", "BatchNormState", "Dropout", "Embedding", "Identity", "Lambda", "LayerNorm", "Linear", "MLP",
    "MultiHeadAttention", "RMSNorm", "Sequential", "Conv", "Conv1d", "Conv2d", "Conv3d", "avg_pool", "max_pool",
    "min_pool", "QuantizedEmbedding", "QuantizedLinear", "quantize",
    # mlx.nn's layers under its names and arguments (fnarray/nn/_mlx_layers.py)
    "ALiBi", "AvgPool1d", "AvgPool2d", "AvgPool3d", "CELU", "ELU", "GELU", "GLU", "GroupNorm", "HardTanh", "Hardswish",
    "InstanceNorm", "LeakyReLU", "LogSigmoid", "LogSoftmax", "MaxPool1d", "MaxPool2d", "MaxPool3d", "Mish", "ReLU",
    "ReLU6", "RoPE", "SELU", "SiLU", "Sigmoid", "SinusoidalPositionalEncoding", "Softmax", "Softplus", "Softsign",
    "Step", "Tanh", "Transformer", "TransformerDecoder", "TransformerDecoderLayer", "TransformerEncoder",
    "TransformerEncoderLayer", "RNN", "GRU", "LSTM", "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d",
    "Upsample",
    "HardShrink", "PReLU", "ReLU2", "Softmin", "Softshrink", "value_and_grad",
]


def _install_eager_jit():
    import sys

    from fnarray.transforms import eager_jit  # eager calls run as cached jitted programs
    eager_jit.install(sys.modules[__name__], excluded=("field", "static_field", "value_and_grad", "quantize"))


_install_eager_jit()
