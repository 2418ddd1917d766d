"""Neural-network functions (mirrors ``jax.nn``): activations, softmax, ``logsumexp``, ``one_hot``.

Every function is a composite of fnarray primitives, so it works eagerly and under
``jit``, ``grad`` and ``vmap`` on every backend. Integer and boolean inputs are
promoted to the default float (``float32``) where the function is defined on reals.
``fnarray.nn.initializers`` holds the weight initializers.
"""

from fnarray.nn import initializers
from fnarray.nn._functions import (celu, elu, gelu, hard_sigmoid, hard_silu, hard_swish, hard_tanh, leaky_relu,
                                   log_sigmoid, log_softmax, logsumexp, one_hot, relu, relu6, selu, sigmoid, silu,
                                   soft_sign, softmax, softplus, standardize, swish, tanh)

__all__ = [
    "celu", "elu", "gelu", "hard_sigmoid", "hard_silu", "hard_swish", "hard_tanh", "initializers", "leaky_relu",
    "log_sigmoid", "log_softmax", "logsumexp", "one_hot", "relu", "relu6", "selu", "sigmoid", "silu", "soft_sign",
    "softmax", "softplus", "standardize", "swish", "tanh",
]
