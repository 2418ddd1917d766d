"""Weight initializers (mirrors ``jax.nn.initializers``).

An initializer is a function ``init(key, shape, dtype=float32) -> Array``. ``zeros`` and
``ones`` are initializers themselves; the others are factories that return one
(``glorot_uniform()(key, (784, 256))``). Fans follow JAX: ``fan_in = shape[in_axis] *
receptive``, ``fan_out = shape[out_axis] * receptive``, where ``receptive`` is the product of
the remaining (non-batch) dimensions; by default the last two dimensions are input and output.
Only real floating dtypes are supported (JAX also initializes complex weights).
"""

from __future__ import annotations

import math

import numpy as np

from fnarray import random
from fnarray.core import dtypes, lax
from fnarray.core.errors import DTypeError, ShapeError

__all__ = [
    "constant",
    "glorot_normal",
    "glorot_uniform",
    "he_normal",
    "he_uniform",
    "kaiming_normal",
    "kaiming_uniform",
    "lecun_normal",
    "lecun_uniform",
    "normal",
    "ones",
    "orthogonal",
    "delta_orthogonal",
    "truncated_normal",
    "uniform",
    "variance_scaling",
    "xavier_normal",
    "xavier_uniform",
    "zeros",
]

# The standard deviation of a standard normal truncated to [-2, 2]; dividing by it makes the
# truncated samples have the requested variance.
_TRUNC_STD = 0.87962566103423978


def _shape(shape, name):
    if isinstance(shape, (int, np.integer)) and not isinstance(shape, bool):
        shape = (shape,)
    try:
        out = tuple(int(d) for d in shape)
    except TypeError:
        raise TypeError(f"{name}: shape must be an int or a tuple of ints, got {shape!r}") from None
    if any(d < 0 for d in out):
        raise ShapeError(f"{name}: shape {out} has a negative dimension")
    return out


def _float(dtype, name):
    d = dtypes.canonicalize(dtype)
    if not dtypes.is_float(d):
        raise DTypeError(f"{name} initializes floating weights, got dtype {d.name}")
    return d


def zeros(key, shape, dtype=dtypes.float32):
    """All zeros (mirrors ``jax.nn.initializers.zeros``); ``key`` is ignored.

    Args:
      key: ignored (accepted so that every initializer has the same signature).
      shape: an int or a tuple of non-negative ints.
      dtype: the result dtype (any fnarray dtype).

    Returns:
      An array of ``shape`` and ``dtype``.

    Raises:
      TypeError: ``shape`` is not an int or a tuple of ints.
      ShapeError: ``shape`` has a negative dimension.
      DTypeError: ``dtype`` is not an fnarray dtype.
    """
    return lax.full(_shape(shape, "zeros"), 0, dtypes.canonicalize(dtype))


def ones(key, shape, dtype=dtypes.float32):
    """All ones (mirrors ``jax.nn.initializers.ones``); ``key`` is ignored.

    Args:
      key: ignored (accepted so that every initializer has the same signature).
      shape: an int or a tuple of non-negative ints.
      dtype: the result dtype (any fnarray dtype).

    Returns:
      An array of ``shape`` and ``dtype``.

    Raises:
      TypeError: ``shape`` is not an int or a tuple of ints.
      ShapeError: ``shape`` has a negative dimension.
      DTypeError: ``dtype`` is not an fnarray dtype.
    """
    return lax.full(_shape(shape, "ones"), 1, dtypes.canonicalize(dtype))


def constant(value, dtype=dtypes.float32):
    """An initializer filling with the scalar ``value`` (mirrors ``jax.nn.initializers.constant``).

    Args:
      value: a Python or NumPy scalar.
      dtype: the default dtype of the returned initializer (any fnarray dtype; not
        restricted to floats).

    Returns:
      ``init(key, shape, dtype=dtype)``: an array of ``shape`` and ``dtype`` filled with
      ``value``; ``key`` is ignored.

    Raises:
      Nothing when the initializer is made. ``init`` raises ``TypeError`` for a shape that
      is not ints, ``ShapeError`` for a negative dimension, ``DTypeError`` for a dtype
      fnarray does not have.
    """
    default = dtype

    def init(key, shape, dtype=default):
        return lax.full(_shape(shape, "constant"), value, dtypes.canonicalize(dtype))
    return init


def normal(stddev=1e-2, dtype=dtypes.float32):
    """An initializer drawing ``N(0, stddev**2)`` (mirrors ``jax.nn.initializers.normal``).

    Args:
      stddev: the standard deviation (a scalar).
      dtype: the default dtype of the returned initializer (a real floating dtype).

    Returns:
      ``init(key, shape, dtype=dtype)``: an array of ``shape`` and ``dtype`` drawn from ``N(0, stddev**2)``
      with ``key`` (a ``uint32[2]`` PRNG key; see ``fnarray.random``).

    Raises:
      TypeError: (from ``init``) ``shape`` is not an int or a tuple of ints, or ``key`` is
        not an array.
      ShapeError: (from ``init``) ``shape`` has a negative dimension, or ``key`` is not of
        shape ``(2,)``.
      DTypeError: (from ``init``) ``dtype`` is not a real floating dtype, or ``key`` is not
        ``uint32``.
    """
    default = dtype

    def init(key, shape, dtype=default):
        d = _float(dtype, "normal")
        return random.normal(key, _shape(shape, "normal"), d) * np.asarray(stddev, d)[()]
    return init


def uniform(scale=1e-2, dtype=dtypes.float32):
    """An initializer drawing uniformly from ``[0, scale)`` (mirrors ``jax.nn.initializers.uniform``).

    Args:
      scale: the upper bound (a scalar).
      dtype: the default dtype of the returned initializer (a real floating dtype).

    Returns:
      ``init(key, shape, dtype=dtype)``: an array of ``shape`` and ``dtype`` drawn uniformly on ``[0, scale)``
      with ``key`` (a ``uint32[2]`` PRNG key; see ``fnarray.random``).

    Raises:
      TypeError: (from ``init``) ``shape`` is not an int or a tuple of ints, or ``key`` is
        not an array.
      ShapeError: (from ``init``) ``shape`` has a negative dimension, or ``key`` is not of
        shape ``(2,)``.
      DTypeError: (from ``init``) ``dtype`` is not a real floating dtype, or ``key`` is not
        ``uint32``.
    """
    default = dtype

    def init(key, shape, dtype=default):
        d = _float(dtype, "uniform")
        return random.uniform(key, _shape(shape, "uniform"), d) * np.asarray(scale, d)[()]
    return init


def truncated_normal(stddev=1e-2, dtype=dtypes.float32, lower=-2.0, upper=2.0):
    """An initializer drawing ``stddev * N(0, 1)`` truncated to ``[lower, upper]``
    (mirrors ``jax.nn.initializers.truncated_normal``).

    Args:
      stddev: the scale applied to the truncated standard normal (a scalar).
      lower, upper: the truncation bounds, in units of the standard normal.
      dtype: the default dtype of the returned initializer (a real floating dtype).

    Returns:
      ``init(key, shape, dtype=dtype)``: an array of ``shape`` and ``dtype`` drawn
      as ``stddev * truncated_normal(lower, upper)`` with ``key`` (a ``uint32[2]`` PRNG key; see ``fnarray.random``).

    Raises:
      TypeError: (from ``init``) ``shape`` is not an int or a tuple of ints, or ``key`` is
        not an array.
      ShapeError: (from ``init``) ``shape`` has a negative dimension, or ``key`` is not of
        shape ``(2,)``.
      DTypeError: (from ``init``) ``dtype`` is not a real floating dtype, or ``key`` is not
        ``uint32``.
    """
    default = dtype

    def init(key, shape, dtype=default):
        d = _float(dtype, "truncated_normal")
        x = random.truncated_normal(key, lower, upper, _shape(shape, "truncated_normal"), d)
        return x * np.asarray(stddev, d)[()]
    return init


def _fans(shape, in_axis, out_axis, batch_axis):
    if len(shape) < 2:
        raise ShapeError(f"cannot compute fan-in and fan-out of a weight of shape {shape}: it needs at least "
                         "2 dimensions (input and output); use normal/uniform/zeros for biases")
    nd = len(shape)
    in_axis, out_axis = in_axis % nd, out_axis % nd
    batch = {b % nd for b in ((batch_axis,) if isinstance(batch_axis, int) else batch_axis)}
    receptive = math.prod(n for i, n in enumerate(shape) if i not in batch and i not in (in_axis, out_axis))
    return shape[in_axis] * receptive, shape[out_axis] * receptive


def variance_scaling(scale, mode: str, distribution: str, in_axis=-2, out_axis=-1, batch_axis=(),
                     dtype=dtypes.float32):
    """An initializer with variance ``scale / fan`` (mirrors ``jax.nn.initializers.variance_scaling``).

    Args:
      scale: the variance numerator.
      mode: ``"fan_in"``, ``"fan_out"`` or ``"fan_avg"`` (the mean of both).
      distribution: ``"truncated_normal"`` (normal truncated to ±2 standard deviations, rescaled to
        the variance), ``"normal"`` or ``"uniform"`` (on ``[-limit, limit)``, ``limit = sqrt(3 var)``).
      in_axis, out_axis, batch_axis: which dimensions of the weight are input, output and batch.
      dtype: the default dtype of the returned initializer.

    Returns:
      ``init(key, shape, dtype=dtype)``: an array of ``shape`` and ``dtype`` drawn from
      ``key`` (a ``uint32[2]`` PRNG key).

    Raises:
      ValueError: an unknown ``mode`` or ``distribution`` (when the initializer is made).
      ShapeError: (from ``init``) a ``shape`` of rank < 2 or with a negative dimension.
      TypeError: (from ``init``) a ``shape`` that is not ints, or a ``key`` that is not an array.
      DTypeError: (from ``init``) a non-floating ``dtype`` or a key that is not ``uint32``.
    """
    if mode not in ("fan_in", "fan_out", "fan_avg"):
        raise ValueError(f"variance_scaling: mode must be 'fan_in', 'fan_out' or 'fan_avg', got {mode!r}")
    if distribution not in ("truncated_normal", "normal", "uniform"):
        raise ValueError("variance_scaling: distribution must be 'truncated_normal', 'normal' or 'uniform', "
                         f"got {distribution!r}")
    default = dtype

    def init(key, shape, dtype=default):
        shape = _shape(shape, "variance_scaling")
        d = _float(dtype, "variance_scaling")
        fan_in, fan_out = _fans(shape, in_axis, out_axis, batch_axis)
        fan = {"fan_in": fan_in, "fan_out": fan_out, "fan_avg": (fan_in + fan_out) / 2}[mode]
        variance = scale / max(fan, 1)
        if distribution == "truncated_normal":
            x = random.truncated_normal(key, -2.0, 2.0, shape, d)
            return x * np.asarray(math.sqrt(variance) / _TRUNC_STD, d)[()]
        if distribution == "normal":
            return random.normal(key, shape, d) * np.asarray(math.sqrt(variance), d)[()]
        limit = math.sqrt(3.0 * variance)
        return random.uniform(key, shape, d, -limit, limit)
    return init


def glorot_uniform(in_axis=-2, out_axis=-1, batch_axis=(), dtype=dtypes.float32):
    """Glorot/Xavier uniform: variance ``1 / fan_avg`` (mirrors ``jax.nn.initializers.glorot_uniform``).

    Glorot & Bengio 2010, "Understanding the difficulty of training deep feedforward neural networks".

    Args:
      in_axis, out_axis: the input and output dimensions of the weight (default: the last two).
      batch_axis: an int or tuple of dimensions excluded from the fans.
      dtype: the default dtype of the returned initializer (a real floating dtype).

    Returns:
      ``init(key, shape, dtype=dtype)`` (see ``variance_scaling``).

    Raises:
      Nothing when the initializer is made. ``init`` raises ``ShapeError`` for a
      ``shape`` of rank < 2 or with a negative dimension, ``TypeError`` for a shape
      that is not ints, ``DTypeError`` for a non-floating ``dtype``, and the key errors
      of ``fnarray.random``.
    """
    return variance_scaling(1.0, "fan_avg", "uniform", in_axis, out_axis, batch_axis, dtype)


def glorot_normal(in_axis=-2, out_axis=-1, batch_axis=(), dtype=dtypes.float32):
    """Glorot/Xavier truncated normal: variance ``1 / fan_avg`` (mirrors ``jax.nn.initializers.glorot_normal``).

    Glorot & Bengio 2010, "Understanding the difficulty of training deep feedforward neural networks".

    Args:
      in_axis, out_axis: the input and output dimensions of the weight (default: the last two).
      batch_axis: an int or tuple of dimensions excluded from the fans.
      dtype: the default dtype of the returned initializer (a real floating dtype).

    Returns:
      ``init(key, shape, dtype=dtype)`` (see ``variance_scaling``).

    Raises:
      Nothing when the initializer is made. ``init`` raises ``ShapeError`` for a
      ``shape`` of rank < 2 or with a negative dimension, ``TypeError`` for a shape
      that is not ints, ``DTypeError`` for a non-floating ``dtype``, and the key errors
      of ``fnarray.random``.
    """
    return variance_scaling(1.0, "fan_avg", "truncated_normal", in_axis, out_axis, batch_axis, dtype)


def he_uniform(in_axis=-2, out_axis=-1, batch_axis=(), dtype=dtypes.float32):
    """He/Kaiming uniform: variance ``2 / fan_in`` (mirrors ``jax.nn.initializers.he_uniform``).

    He, Zhang, Ren & Sun 2015, "Delving deep into rectifiers".

    Args:
      in_axis, out_axis: the input and output dimensions of the weight (default: the last two).
      batch_axis: an int or tuple of dimensions excluded from the fans.
      dtype: the default dtype of the returned initializer (a real floating dtype).

    Returns:
      ``init(key, shape, dtype=dtype)`` (see ``variance_scaling``).

    Raises:
      Nothing when the initializer is made. ``init`` raises ``ShapeError`` for a
      ``shape`` of rank < 2 or with a negative dimension, ``TypeError`` for a shape
      that is not ints, ``DTypeError`` for a non-floating ``dtype``, and the key errors
      of ``fnarray.random``.
    """
    return variance_scaling(2.0, "fan_in", "uniform", in_axis, out_axis, batch_axis, dtype)


def he_normal(in_axis=-2, out_axis=-1, batch_axis=(), dtype=dtypes.float32):
    """He/Kaiming truncated normal: variance ``2 / fan_in`` (mirrors ``jax.nn.initializers.he_normal``).

    He, Zhang, Ren & Sun 2015, "Delving deep into rectifiers".

    Args:
      in_axis, out_axis: the input and output dimensions of the weight (default: the last two).
      batch_axis: an int or tuple of dimensions excluded from the fans.
      dtype: the default dtype of the returned initializer (a real floating dtype).

    Returns:
      ``init(key, shape, dtype=dtype)`` (see ``variance_scaling``).

    Raises:
      Nothing when the initializer is made. ``init`` raises ``ShapeError`` for a
      ``shape`` of rank < 2 or with a negative dimension, ``TypeError`` for a shape
      that is not ints, ``DTypeError`` for a non-floating ``dtype``, and the key errors
      of ``fnarray.random``.
    """
    return variance_scaling(2.0, "fan_in", "truncated_normal", in_axis, out_axis, batch_axis, dtype)


def lecun_uniform(in_axis=-2, out_axis=-1, batch_axis=(), dtype=dtypes.float32):
    """LeCun uniform: variance ``1 / fan_in`` (mirrors ``jax.nn.initializers.lecun_uniform``).

    LeCun, Bottou, Orr & Mueller 1998, "Efficient BackProp".

    Args:
      in_axis, out_axis: the input and output dimensions of the weight (default: the last two).
      batch_axis: an int or tuple of dimensions excluded from the fans.
      dtype: the default dtype of the returned initializer (a real floating dtype).

    Returns:
      ``init(key, shape, dtype=dtype)`` (see ``variance_scaling``).

    Raises:
      Nothing when the initializer is made. ``init`` raises ``ShapeError`` for a
      ``shape`` of rank < 2 or with a negative dimension, ``TypeError`` for a shape
      that is not ints, ``DTypeError`` for a non-floating ``dtype``, and the key errors
      of ``fnarray.random``.
    """
    return variance_scaling(1.0, "fan_in", "uniform", in_axis, out_axis, batch_axis, dtype)


def lecun_normal(in_axis=-2, out_axis=-1, batch_axis=(), dtype=dtypes.float32):
    """LeCun truncated normal: variance ``1 / fan_in`` (mirrors ``jax.nn.initializers.lecun_normal``).

    LeCun, Bottou, Orr & Mueller 1998, "Efficient BackProp".

    Args:
      in_axis, out_axis: the input and output dimensions of the weight (default: the last two).
      batch_axis: an int or tuple of dimensions excluded from the fans.
      dtype: the default dtype of the returned initializer (a real floating dtype).

    Returns:
      ``init(key, shape, dtype=dtype)`` (see ``variance_scaling``).

    Raises:
      Nothing when the initializer is made. ``init`` raises ``ShapeError`` for a
      ``shape`` of rank < 2 or with a negative dimension, ``TypeError`` for a shape
      that is not ints, ``DTypeError`` for a non-floating ``dtype``, and the key errors
      of ``fnarray.random``.
    """
    return variance_scaling(1.0, "fan_in", "truncated_normal", in_axis, out_axis, batch_axis, dtype)


def _orthonormal(key, rows, cols, d):
    """A ``(rows, cols)`` matrix with orthonormal columns (``rows >= cols``) or rows, drawn uniformly (Haar):
    the QR factor of a standard normal matrix with each column's sign fixed by ``R``'s diagonal (Mezzadri 2007,
    "How to generate random matrices from the classical compact groups"), as JAX's ``orthogonal``."""
    from fnarray import numpy as fnp
    tall = rows >= cols
    a = random.normal(key, (rows, cols) if tall else (cols, rows), d)
    q, r = fnp.linalg.qr(a)
    q = q * fnp.sign(fnp.diagonal(r))[None, :]
    return q if tall else q.T


def orthogonal(scale=1.0, column_axis=-1, dtype=dtypes.float32):
    """An initializer of (semi-)orthogonal weights (mirrors ``jax.nn.initializers.orthogonal``).

    The weight is viewed as a matrix with ``shape[column_axis]`` columns and the product of the other dimensions
    as rows; that matrix has orthonormal columns (or rows, when it is wide) times ``scale``. Saxe, McClelland &
    Ganguli 2014, "Exact solutions to the nonlinear dynamics of learning in deep linear neural networks"; the
    matrix is the sign-fixed QR factor of a standard normal draw, so with the same key it is JAX's (float
    rounding apart).

    Args:
      scale: the factor on the orthonormal matrix.
      column_axis: the dimension that indexes the columns (default the last).
      dtype: the default dtype of the returned initializer (a real floating dtype).

    Returns:
      ``init(key, shape, dtype=dtype)``.

    Raises:
      ``init`` raises ``ShapeError`` for a ``shape`` of rank < 2 (as JAX's ``ValueError`` text says: orthogonal
      needs at least a 2-D shape), a ``column_axis`` outside it or a negative dimension, ``TypeError`` for a
      shape that is not ints, ``DTypeError`` for a non-floating ``dtype``, and the key errors of
      ``fnarray.random``.
    """
    default = dtype

    def init(key, shape, dtype=default):
        from fnarray import numpy as fnp
        shape = _shape(shape, "orthogonal")
        d = _float(dtype, "orthogonal")
        if len(shape) < 2:
            raise ShapeError(f"orthogonal initializer requires at least a 2D shape, got {shape}; use normal or "
                             "uniform for a vector")
        if not -len(shape) <= column_axis < len(shape):
            raise ShapeError(f"orthogonal: column_axis {column_axis} is out of range for shape {shape}")
        axis = column_axis % len(shape)
        cols = shape[axis]
        rest = shape[:axis] + shape[axis + 1:]
        if 0 in shape:
            return fnp.zeros(shape, d)
        q = _orthonormal(key, math.prod(rest), cols, d)
        return fnp.moveaxis(q.reshape(rest + (cols,)), -1, axis) * np.asarray(scale, d)[()]
    return init


def delta_orthogonal(scale=1.0, column_axis=-1, dtype=dtypes.float32):
    """An initializer of convolution kernels that are orthogonal at the centre tap and zero elsewhere (mirrors
    ``jax.nn.initializers.delta_orthogonal``; Xiao et al. 2018, "Dynamical isometry and a mean field theory of
    CNNs").

    Args:
      scale, column_axis, dtype: as ``orthogonal``, applied to the ``(in, out)`` matrix (``column_axis`` is -1,
        -2, 0 or 1).

    Returns:
      ``init(key, shape, dtype=dtype)`` for a shape ``(*spatial, in, out)`` with 1 to 3 spatial dimensions and
      ``in <= out``: the centre tap ``(shape[i] - 1) // 2`` of each spatial dimension (JAX's) holds
      ``orthogonal(scale, column_axis)`` of shape ``(in, out)``.

    Raises:
      ``init`` raises ``ShapeError`` for a rank other than 3, 4 or 5 or more input than output channels, and the
      errors of ``orthogonal``.
    """
    default = dtype

    def init(key, shape, dtype=default):
        from fnarray import numpy as fnp
        shape = _shape(shape, "delta_orthogonal")
        d = _float(dtype, "delta_orthogonal")
        if len(shape) not in (3, 4, 5):
            raise ShapeError(f"delta_orthogonal initializer requires a 3D, 4D or 5D shape, got {shape}")
        if shape[-2] > shape[-1]:
            raise ShapeError(f"delta_orthogonal needs in_channels <= out_channels, got shape {shape} "
                             f"({shape[-2]} > {shape[-1]})")
        centre = orthogonal(scale, column_axis, d)(key, shape[-2:], d)
        taps = tuple((n - 1) // 2 for n in shape[:-2])
        return fnp.zeros(shape, d).at[taps].set(centre)
    return init


xavier_uniform, xavier_normal = glorot_uniform, glorot_normal
kaiming_uniform, kaiming_normal = he_uniform, he_normal
