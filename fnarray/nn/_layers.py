"""The layers of ``fnarray.nn``: ``Linear``, ``Embedding``, norms, ``Dropout``, attention, ``MLP``, ``Sequential``.

Every layer is a ``Module`` (an immutable pytree, see ``_module.py``) built from an explicit
``fa.random`` key, and acts on the trailing axes of its input, so the same layer takes one
example or a batch (``x: (..., in_features)``), and ``vmap`` over it works as well.
Weights are stored as PyTorch, MLX and Equinox store them (``Linear.weight: (out, in)``).
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, Callable, NamedTuple

from fnarray import random
from fnarray.core import dtypes
from fnarray.core.errors import ShapeError
from fnarray.nn._attention import dot_product_attention
from fnarray.nn._module import Module, field
from fnarray.nn._params import embedding_params, linear_params, positive
from fnarray.nn._quantized_layers import QuantizedEmbedding, QuantizedLinear

__all__ = ["BatchNorm", "BatchNormState", "Dropout", "Embedding", "Identity", "Lambda", "LayerNorm", "Linear", "MLP",
           "MultiHeadAttention", "RMSNorm", "Sequential"]


def _np():
    from fnarray import numpy as fnp
    return fnp


def _check_last(x, size, what, name="in_features"):
    if x.ndim == 0 or x.shape[-1] != size:
        raise ShapeError(f"{what}: the input's last axis must have {name}={size}, got shape {tuple(x.shape)}")


# ----------------------------------------------------------------------------- basic layers


class Identity(Module):
    """``x -> x``; a placeholder layer."""

    def __call__(self, x, *, key=None):
        return x


class Lambda(Module):
    """A function as a layer: ``Lambda(fa.nn.relu)(x) == fa.nn.relu(x)`` (the function is a static field).

    ``Sequential`` wraps the plain functions it is given in ``Lambda``.
    """

    fn: Callable = field(static=True)

    def __call__(self, x, *, key=None):
        return self.fn(x)


class Linear(Module):
    """``y = x @ weight.T + bias`` over the last axis (PyTorch/Equinox ``Linear``).

    Args (constructor):
      in_features, out_features: sizes of the input's and the output's last axis.
      use_bias: add a bias (default True).
      key: an ``fa.random.key`` for the weight.
      dtype: floating dtype of the parameters (default float32).
      weight_init, bias_init: initializers ``(key, shape, dtype) -> Array`` (``fa.nn.initializers``);
        default: uniform in ``±1/sqrt(in_features)`` (``variance_scaling(1/3, "fan_in", "uniform")``,
        as PyTorch) for the weight and zeros for the bias.
    Fields: ``weight: (out_features, in_features)``, ``bias: (out_features,)`` or ``None``.
    Call: ``x: (..., in_features)`` -> ``(..., out_features)``.
    """

    weight: Any
    bias: Any
    in_features: int
    out_features: int
    use_bias: bool

    def __init__(self, in_features: int, out_features: int, use_bias: bool = True, *, key, dtype=dtypes.float32,
                 weight_init=None, bias_init=None, bias: bool | None = None):
        use_bias = use_bias if bias is None else bias  # mlx.nn.Linear(input_dims, output_dims, bias=True)
        self.weight, self.bias = linear_params(in_features, out_features, use_bias, key, dtype, weight_init, bias_init)
        self.in_features, self.out_features, self.use_bias = in_features, out_features, use_bias

    def __call__(self, x, *, key=None):
        fnp = _np()
        x = fnp.asarray(x)
        _check_last(x, self.in_features, "Linear")
        lead = tuple(x.shape[:-1])
        if len(lead) > 1:
            # One 2-d product over all leading axes (not a batched one against a broadcast weight):
            # the weight's gradient is then one product too, not a batch of them summed.
            x = fnp.reshape(x, (-1, self.in_features))
        y = fnp.matmul(x, fnp.matrix_transpose(self.weight))
        if self.bias is not None:
            y = y + self.bias
        return fnp.reshape(y, lead + (self.out_features,)) if len(lead) > 1 else y


    def to_quantized(self, group_size: int | None = None, bits: int | None = None, mode: str = "affine"):
        """This layer quantized, a ``QuantizedLinear`` (``mlx.nn.Linear.to_quantized``; what ``fa.nn.quantize``
        calls). Args: the format (``fa.quantize``; ``None``: the mode's defaults). Raises ``ValueError`` for an
        unsupported format or ``in_features`` not divisible by ``group_size``."""
        return QuantizedLinear.from_linear(self, group_size, bits, mode)

class Embedding(Module):
    """A lookup table: ``Embedding(n, d)(ids) == weight[ids]`` (PyTorch/Equinox ``Embedding``).

    Args (constructor): ``num_embeddings``, ``embedding_dim``, ``key``, ``dtype`` (float32),
      ``weight_init`` (default ``normal(1.0)``: N(0, 1), as PyTorch).
    Fields: ``weight: (num_embeddings, embedding_dim)``.
    Call: integer ``ids`` of any shape -> ``ids.shape + (embedding_dim,)``, as ``weight[ids]``: negative ids
      count from the end, and ids outside ``[-num_embeddings, num_embeddings)`` are clamped onto the table's
      edge, eager or under ``jit``, as JAX's indexing gather (docs/design.md, "Indices"; no host read of the
      ids, so an eager decode step does not wait for the device). Non-integer ids raise ``TypeError``.
    """

    weight: Any
    num_embeddings: int
    embedding_dim: int

    def __init__(self, num_embeddings: int, embedding_dim: int, *, key, dtype=dtypes.float32, weight_init=None):
        self.weight = embedding_params(num_embeddings, embedding_dim, key, dtype, weight_init)
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim

    def __call__(self, ids, *, key=None):
        fnp = _np()
        ids = fnp.asarray(ids)
        if not dtypes.is_int(ids.dtype):
            raise TypeError(f"Embedding takes integer ids, got dtype {ids.dtype.name}")
        return self.weight[ids]

    def attend(self, x):
        """Logits against every embedding, ``x @ weight.T`` (a tied output layer): ``(..., d) -> (..., n)``."""
        fnp = _np()
        x = fnp.asarray(x)
        lead = tuple(x.shape[:-1])
        y = fnp.matmul(fnp.reshape(x, (-1, x.shape[-1])), fnp.matrix_transpose(self.weight))
        return fnp.reshape(y, lead + (self.num_embeddings,))

    def to_quantized(self, group_size: int | None = None, bits: int | None = None, mode: str = "affine"):
        """This table quantized, a ``QuantizedEmbedding`` (``mlx.nn.Embedding.to_quantized``; what
        ``fa.nn.quantize`` calls). Args: the format (``fa.quantize``; ``None``: the mode's defaults). Raises
        ``ValueError`` for an unsupported format or ``embedding_dim`` not divisible by ``group_size``."""
        return QuantizedEmbedding.from_embedding(self, group_size, bits, mode)


def _norm_shape(shape, what):
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    for n in shape:
        positive(n, "shape", what)
    return shape


def _compute_dtype(x):
    return dtypes.float32 if x.dtype in (dtypes.float16, dtypes.bfloat16) else x.dtype



class LayerNorm(Module):
    """Layer normalization over the trailing ``shape`` axes (Ba et al., 2016; PyTorch ``LayerNorm``).

    ``y = (x - mean) / sqrt(var + eps) * weight + bias``, mean and (biased) variance over the last
    ``len(shape)`` axes, computed in float32 for float16/bfloat16 inputs.

    Args (constructor): ``shape`` (int or tuple), ``eps`` (1e-5), ``use_weight``, ``use_bias``
      (both True; weight ones, bias zeros), ``dtype`` (float32).
    Call: ``x: (..., *shape)`` -> the same shape and dtype.
    """

    weight: Any
    bias: Any
    shape: tuple
    eps: float

    def __init__(self, shape, eps: float = 1e-5, use_weight: bool = True, use_bias: bool = True, *,
                 dtype=dtypes.float32):
        fnp = _np()
        self.shape = _norm_shape(shape, "LayerNorm")
        self.eps = float(eps)
        self.weight = fnp.ones(self.shape, dtype=dtype) if use_weight else None
        self.bias = fnp.zeros(self.shape, dtype=dtype) if use_bias else None

    def __call__(self, x, *, key=None):
        fnp = _np()
        x, xc, axes = _normalized_axes("LayerNorm", self.shape, x)
        mean = fnp.mean(xc, axis=axes, keepdims=True)
        var = fnp.mean(fnp.square(xc - mean), axis=axes, keepdims=True)
        y = ((xc - mean) / fnp.sqrt(var + self.eps)).astype(x.dtype)
        if self.weight is not None:
            y = y * self.weight
        if self.bias is not None:
            y = y + self.bias
        return y


def _normalized_axes(name, shape, x):
    """``(x, x in its compute dtype, the trailing axes of shape)``; ``ShapeError`` when x does not end in ``shape``."""
    x = _np().asarray(x)
    n = len(shape)
    if x.ndim < n or tuple(x.shape[x.ndim - n:]) != shape:
        raise ShapeError(f"{name}{shape}: the input's trailing axes must be {shape}, got shape {tuple(x.shape)}")
    return x, x.astype(_compute_dtype(x)), tuple(range(x.ndim - n, x.ndim))


class RMSNorm(Module):
    """Root-mean-square normalization (Zhang & Sennrich, 2019): ``y = x / sqrt(mean(x**2) + eps) * weight``.

    Args (constructor): ``shape`` (int or tuple, the normalized trailing axes), ``eps`` (1e-5),
      ``use_weight`` (True, ones), ``dtype`` (float32).
    Call: ``x: (..., *shape)`` -> the same shape and dtype (float32 inside for 16-bit inputs).
    """

    weight: Any
    shape: tuple
    eps: float

    def __init__(self, shape, eps: float = 1e-5, use_weight: bool = True, *, dtype=dtypes.float32):
        fnp = _np()
        self.shape = _norm_shape(shape, "RMSNorm")
        self.eps = float(eps)
        self.weight = fnp.ones(self.shape, dtype=dtype) if use_weight else None

    def __call__(self, x, *, key=None):
        fnp = _np()
        x, xc, axes = _normalized_axes("RMSNorm", self.shape, x)
        ms = fnp.mean(fnp.square(xc), axis=axes, keepdims=True)
        y = (xc / fnp.sqrt(ms + self.eps)).astype(x.dtype)
        return y * self.weight if self.weight is not None else y


class BatchNormState(NamedTuple):
    """``BatchNorm``'s running statistics (a pytree): ``mean`` and ``var``, each ``(num_features,)``."""

    mean: Any
    var: Any


class BatchNorm(Module):
    """Batch normalization over every axis but the last (Ioffe & Szegedy, 2015), with explicit state.

    The running statistics are not stored in the module: ``state = bn.init_state()`` makes them,
    and every call takes and returns them, so a training step stays a pure function::

        y, state = bn(x, state, training=True)    # batch statistics; state updated
        y, state = bn(x, state, training=False)   # running statistics; state returned unchanged

    Training normalizes with the batch's mean and biased variance over all axes but the last and
    updates ``running = momentum * running + (1 - momentum) * batch`` (Flax/Equinox convention;
    PyTorch's ``momentum=0.1`` is ``momentum=0.9`` here), with no gradient through the update.
    Call it on a whole batch (not under ``vmap``, which would see one example).

    Args (constructor): ``num_features``, ``eps`` (1e-5), ``momentum`` (0.99), ``use_weight``,
      ``use_bias`` (True), ``dtype`` (float32), ``running_var_ddof`` (0: the running variance
      averages the batch's biased variance, as Flax and Equinox; 1: its unbiased variance, as
      PyTorch and ``mlx.nn.BatchNorm``, whose ``momentum=0.1`` is ``momentum=0.9`` here).
    Call: ``x: (..., num_features)``, ``state`` -> ``(y of x's shape, new state)``.
    """

    weight: Any
    bias: Any
    num_features: int
    eps: float
    momentum: float
    running_var_ddof: int

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float = 0.99, use_weight: bool = True,
                 use_bias: bool = True, *, dtype=dtypes.float32, running_var_ddof: int = 0):
        fnp = _np()
        positive(num_features, "num_features", "BatchNorm")
        if not 0.0 <= momentum <= 1.0:
            raise ValueError(f"BatchNorm: momentum must lie in [0, 1], got {momentum}")
        self.num_features, self.eps, self.momentum = num_features, float(eps), float(momentum)
        if running_var_ddof not in (0, 1):
            raise ValueError(f"BatchNorm: running_var_ddof must be 0 or 1, got {running_var_ddof!r}")
        self.running_var_ddof = int(running_var_ddof)
        self.weight = fnp.ones((num_features,), dtype=dtype) if use_weight else None
        self.bias = fnp.zeros((num_features,), dtype=dtype) if use_bias else None

    def init_state(self, dtype=dtypes.float32) -> BatchNormState:
        """Running mean zeros and running variance ones, each ``(num_features,)`` of ``dtype``."""
        fnp = _np()
        return BatchNormState(fnp.zeros((self.num_features,), dtype=dtype),
                              fnp.ones((self.num_features,), dtype=dtype))

    def __call__(self, x, state: BatchNormState, *, training: bool = True, key=None):
        from fnarray.core.lax import stop_gradient
        fnp = _np()
        x = fnp.asarray(x)
        _check_last(x, self.num_features, "BatchNorm", "num_features")
        if not isinstance(state, BatchNormState):
            raise TypeError(f"BatchNorm takes its state (bn.init_state()) as the second argument, got "
                            f"{type(state).__name__}")
        xc = x.astype(_compute_dtype(x))
        if training:
            axes = tuple(range(x.ndim - 1))
            if x.size // self.num_features < 1:
                raise ShapeError(f"BatchNorm(training=True) needs at least one example, got shape {x.shape}")
            mean = fnp.mean(xc, axis=axes)
            var = fnp.mean(fnp.square(xc - mean), axis=axes)
            m = self.momentum
            n = x.size // self.num_features
            run_var = var * (n / (n - 1)) if self.running_var_ddof and n > 1 else var
            new_state = BatchNormState(
                stop_gradient(m * state.mean + (1 - m) * mean.astype(state.mean.dtype)),
                stop_gradient(m * state.var + (1 - m) * run_var.astype(state.var.dtype)))
        else:
            mean, var = state.mean.astype(xc.dtype), state.var.astype(xc.dtype)
            new_state = state
        y = ((xc - mean) / fnp.sqrt(var + self.eps)).astype(x.dtype)
        if self.weight is not None:
            y = y * self.weight
        if self.bias is not None:
            y = y + self.bias
        return y, new_state


class Dropout(Module):
    """Zero each element with probability ``rate`` and scale the rest by ``1 / (1 - rate)`` (inverted dropout).

    Randomness comes only from the explicit ``key``; with ``training=False`` (or ``rate == 0``) the
    layer is the identity.

    Args (constructor): ``p``, the drop probability in ``[0, 1)`` (default 0.5), by position or as
      ``p=`` (the name of ``mlx.nn.Dropout``, Equinox and PyTorch) or ``rate=`` (Flax's); it is
      stored as the field ``rate``.
    Call: ``drop(x, key=key, training=True)`` -> x's shape and dtype.
    Raises: ``TypeError`` (constructor) for both ``p`` and ``rate``; ``ValueError`` when training
      with ``rate > 0`` and no key.
    Source: Srivastava et al., "Dropout" (JMLR 2014).
    """

    rate: float = 0.5

    def __init__(self, p: float | None = None, *, rate: float | None = None):
        if p is not None and rate is not None:
            raise TypeError(f"Dropout: give the drop probability once, as p= or rate=, got p={p!r} and rate={rate!r}")
        self.rate = p if p is not None else (rate if rate is not None else 0.5)

    def __check_init__(self):
        if not 0.0 <= float(self.rate) < 1.0:
            raise ValueError(f"Dropout: rate must lie in [0, 1), got {self.rate}")

    def __call__(self, x, *, key=None, training: bool = True):
        fnp = _np()
        x = fnp.asarray(x)
        if not training or self.rate == 0.0:
            return x
        if key is None:
            raise ValueError("Dropout(training=True) needs key= (an fa.random key); pass training=False to "
                             "evaluate without dropout")
        keep = random.bernoulli(key, 1.0 - self.rate, x.shape)
        return fnp.where(keep, x / (1.0 - self.rate), fnp.zeros((), dtype=x.dtype))


# ----------------------------------------------------------------------------- composite layers


class MultiHeadAttention(Module):
    """Multi-head attention (Vaswani et al., 2017) on ``nn.dot_product_attention`` (Equinox's argument names).

    Args (constructor):
      num_heads: ``N``.
      query_size: the query's last axis; ``key_size``, ``value_size`` default to it, and
        ``output_size`` defaults to ``query_size``.
      qk_size, vo_size: per-head sizes of queries/keys and values/outputs (default
        ``query_size // num_heads``); they must be equal (``dot_product_attention`` has one head size).
      use_query_bias, use_key_bias, use_value_bias, use_output_bias: biases of the four
        projections (default False).
      key: an ``fa.random`` key; dtype: float32.
    Call: ``mha(query, key_=None, value=None, mask=None, *, is_causal=False, bias=None)``:
      ``query: (..., T, query_size)``, ``key_: (..., S, key_size)`` and ``value: (..., S, value_size)``
      (both default to ``query``: self-attention); ``mask``/``bias`` broadcastable to
      ``(B, N, T, S)`` as in ``dot_product_attention`` (``(T, S)`` works). Returns
      ``(..., T, output_size)``.
    """

    query_proj: Linear
    key_proj: Linear
    value_proj: Linear
    output_proj: Linear
    num_heads: int
    qk_size: int
    vo_size: int
    _MLX_NAMES = {"output_proj": "out_proj"}  # mlx.nn.MultiHeadAttention's name: MLX checkpoints load by name

    @staticmethod
    def create_additive_causal_mask(N: int, dtype=dtypes.float32):
        """``(N, N)``: 0 where a query may attend (key position <= query position), the dtype's lowest value
        elsewhere (``mlx.nn.MultiHeadAttention.create_additive_causal_mask``); pass it as ``bias=``."""
        import numpy as np
        d = dtypes.canonicalize(dtype)
        mask = np.arange(N)[:, None] < np.arange(N)[None]
        return _np().asarray(mask.astype(d) * np.finfo(d).min, dtype=d)

    def __init__(self, num_heads: int, query_size: int, key_size: int | None = None, value_size: int | None = None,
                 output_size: int | None = None, qk_size: int | None = None, vo_size: int | None = None,
                 use_query_bias: bool = False, use_key_bias: bool = False, use_value_bias: bool = False,
                 use_output_bias: bool = False, *, key, dtype=dtypes.float32):
        positive(num_heads, "num_heads", "MultiHeadAttention")
        positive(query_size, "query_size", "MultiHeadAttention")
        key_size = key_size or query_size
        value_size = value_size or query_size
        output_size = output_size or query_size
        qk_size = qk_size or query_size // num_heads
        vo_size = vo_size or query_size // num_heads
        if qk_size < 1 or vo_size < 1:
            raise ValueError(f"MultiHeadAttention: query_size {query_size} < num_heads {num_heads}; pass qk_size "
                             "and vo_size")
        if qk_size != vo_size:
            raise ValueError(f"MultiHeadAttention: qk_size {qk_size} != vo_size {vo_size}; dot_product_attention "
                             "takes one head size for queries, keys and values")
        kq, kk, kv, ko = random.split(key, 4)
        self.query_proj = Linear(query_size, num_heads * qk_size, use_query_bias, key=kq, dtype=dtype)
        self.key_proj = Linear(key_size, num_heads * qk_size, use_key_bias, key=kk, dtype=dtype)
        self.value_proj = Linear(value_size, num_heads * vo_size, use_value_bias, key=kv, dtype=dtype)
        self.output_proj = Linear(num_heads * vo_size, output_size, use_output_bias, key=ko, dtype=dtype)
        self.num_heads, self.qk_size, self.vo_size = num_heads, qk_size, vo_size

    def __call__(self, query, key_=None, value=None, mask=None, *, is_causal: bool = False, bias=None, key=None):
        fnp = _np()
        query = fnp.asarray(query)
        key_ = query if key_ is None else fnp.asarray(key_)
        value = key_ if value is None else fnp.asarray(value)
        if query.ndim < 2 or key_.ndim != query.ndim or value.ndim != query.ndim:
            raise ShapeError(f"MultiHeadAttention: query, key_ and value must be (..., T, features) of one rank, "
                             f"got {tuple(query.shape)}, {tuple(key_.shape)}, {tuple(value.shape)}")
        lead = tuple(query.shape[:-2])
        T, S = query.shape[-2], key_.shape[-2]
        n, b = self.num_heads, 1
        for d in lead:
            b *= d

        def heads(x, length, size):
            return fnp.reshape(x, (b, length, n, size))

        q = heads(self.query_proj(query), T, self.qk_size)
        k = heads(self.key_proj(key_), S, self.qk_size)
        v = heads(self.value_proj(value), S, self.vo_size)
        out = dot_product_attention(q, k, v, bias=bias, mask=mask, is_causal=is_causal)
        out = fnp.reshape(out, lead + (T, n * self.vo_size))
        return self.output_proj(out)


@functools.lru_cache(maxsize=256)
def _accepts(cls, name) -> bool:
    try:
        params = inspect.signature(cls.__call__).parameters
    except (TypeError, ValueError):
        return False
    return name in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


class Sequential(Module):
    """Layers applied in order: ``Sequential([l1, f, l2])(x) == l2(f(l1(x)))``.

    Plain functions (``fa.nn.relu``) are wrapped in ``Lambda``. A ``key`` given to the call is
    split among the layers whose ``__call__`` takes ``key`` (``Dropout``), and ``training`` is
    passed to those that take ``training``. ``BatchNorm`` (which takes and returns a state) does
    not fit a sequence; call it directly.

    Args (constructor): ``layers``, a list or tuple of layers (Modules or functions).
    Call: ``seq(x, *, key=None, training=True)``. ``seq[i]`` is a layer, ``seq[i:j]`` a ``Sequential``.
    """

    layers: tuple

    def __init__(self, layers):
        if isinstance(layers, Module) or callable(layers):
            raise TypeError("Sequential takes a list or tuple of layers: Sequential([layer1, layer2])")
        self.layers = tuple(layer if isinstance(layer, Module) else _as_lambda(layer) for layer in layers)

    def __call__(self, x, *, key=None, training: bool = True):
        keys = [None] * len(self.layers) if key is None else list(random.split(key, max(len(self.layers), 1)))
        for layer, k in zip(self.layers, keys, strict=False):
            kw = {}
            if k is not None and _accepts(type(layer), "key"):
                kw["key"] = k
            if _accepts(type(layer), "training"):
                kw["training"] = training
            x = layer(x, **kw)
        return x

    def __getitem__(self, i):
        if isinstance(i, slice):
            return Sequential(self.layers[i])
        return self.layers[i]

    def __len__(self):
        return len(self.layers)

    def __iter__(self):
        return iter(self.layers)


def _as_lambda(fn):
    if not callable(fn):
        raise TypeError(f"Sequential: a layer must be a Module or a function, got {type(fn).__name__}")
    return Lambda(fn)


def _identity(x):
    return x


class MLP(Module):
    """A multilayer perceptron of ``Linear`` layers (Equinox's ``MLP``).

    Args (constructor):
      in_size, out_size: the input's and the output's last axis.
      width_size: every hidden layer's width.
      depth: the number of hidden layers (``depth + 1`` Linear layers; 0 is one Linear).
      activation: after every hidden layer (default ``fa.nn.relu``).
      final_activation: after the last layer (default the identity).
      use_bias, use_final_bias: biases (default True).
      key, dtype.
    Call: ``x: (..., in_size)`` -> ``(..., out_size)``.
    """

    layers: tuple
    activation: Callable
    final_activation: Callable

    def __init__(self, in_size: int, out_size: int, width_size: int, depth: int, activation=None,
                 final_activation=None, use_bias: bool = True, use_final_bias: bool = True, *, key,
                 dtype=dtypes.float32):
        from fnarray.nn._functions import relu
        if not isinstance(depth, int) or depth < 0:
            raise ValueError(f"MLP: depth must be a non-negative int, got {depth!r}")
        sizes = [in_size] + [width_size] * depth + [out_size]
        keys = random.split(key, depth + 1)
        self.layers = tuple(Linear(a, b, use_bias if i < depth else use_final_bias, key=keys[i], dtype=dtype)
                            for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:], strict=True)))
        self.activation = activation or relu
        self.final_activation = final_activation or _identity

    def __call__(self, x, *, key=None):
        for layer in self.layers[:-1]:
            x = self.activation(layer(x))
        return self.final_activation(self.layers[-1](x))
