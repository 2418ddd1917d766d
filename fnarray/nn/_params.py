"""The default parameters of ``Linear`` and ``Embedding``, shared by them (``_layers.py``) and by the quantized
layers drawn the same way and quantized (``_quantized_layers.py``), which ``_layers.py`` imports for
``to_quantized``: this module sits below both, so neither imports the other's module in a cycle."""

from __future__ import annotations

from fnarray import random
from fnarray.nn import initializers

__all__ = ["positive", "linear_params", "embedding_params"]


def positive(n, name, what):
    """``n`` if it is a positive int; raises ``ValueError`` naming ``what``'s argument ``name`` otherwise."""
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"{what}: {name} must be a positive int, got {n!r}")
    return n


def linear_params(in_features, out_features, use_bias, key, dtype, weight_init=None, bias_init=None, what="Linear"):
    """``(weight (out_features, in_features), bias (out_features,) or None)`` of a linear layer: by default uniform
    in ``±1/sqrt(in_features)`` (``variance_scaling(1/3, "fan_in", "uniform")``, as PyTorch) and zeros, from the
    two halves of ``random.split(key)``. Raises ``ValueError`` for sizes that are not positive ints."""
    positive(in_features, "in_features", what)
    positive(out_features, "out_features", what)
    winit = weight_init or initializers.variance_scaling(1 / 3, "fan_in", "uniform", in_axis=-1, out_axis=-2)
    wkey, bkey = random.split(key)
    weight = winit(wkey, (out_features, in_features), dtype)
    return weight, (bias_init or initializers.zeros)(bkey, (out_features,), dtype) if use_bias else None


def embedding_params(num_embeddings, embedding_dim, key, dtype, weight_init=None, what="Embedding"):
    """The ``(num_embeddings, embedding_dim)`` table of an embedding: by default N(0, 1), as PyTorch. Raises
    ``ValueError`` for sizes that are not positive ints."""
    positive(num_embeddings, "num_embeddings", what)
    positive(embedding_dim, "embedding_dim", what)
    return (weight_init or initializers.normal(1.0))(key, (num_embeddings, embedding_dim), dtype)

