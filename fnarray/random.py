"""Counter-based pseudo-random numbers with explicit keys (mirrors ``jax.random``).

A key is typed (``key(seed)``: dtype ``key<fry>``, shape ``()``, as JAX's ``jax.random.key``) or raw
(``PRNGKey(seed)``: a ``uint32`` array of shape ``(2,)``, as JAX's legacy keys; docs/design.md, "Random
keys"); ``key_data``/``wrap_key_data`` convert, every sampler takes both, and ``split``/``fold_in`` return
the form they were given. Every
sampler is a pure function of its key: the same key gives the same numbers,
eagerly, under ``jit`` and under ``vmap``, on every backend. To draw several
independent streams, ``split`` the key (or ``fold_in`` a counter) and never
reuse a key that was split.

All randomness comes from the Threefry-2x32 block cipher with 20 rounds
(Salmon, Moraes, Dror and Shaw, "Parallel random numbers: as easy as 1, 2, 3",
SC'11), written with ``uint32`` additions, xors, shifts and ors only, so that
it runs identically on every backend. Bits are derived from a key as JAX does
by default (its "partitionable" Threefry mode): element ``i`` of a sample of
shape ``s`` (in row-major order) is the cipher of the counter pair
``(i >> 32, i & 0xFFFFFFFF)`` under the key. Consequently ``key``/``PRNGKey``,
``split``, ``fold_in``, ``bits``, ``uniform`` on ``[0, 1)``, ``randint``,
``bernoulli``, ``permutation`` and ``choice`` without ``p`` give bit for bit the
numbers of ``jax.random`` (with ``jax_threefry_partitionable``, the default since
JAX 0.5) for the same seed. ``uniform`` with other bounds may differ from JAX in
the last bit: XLA fuses its ``u * (maxval - minval) + minval`` into one fused
multiply-add, while fnarray rounds the product and the sum separately, as every
backend can.
``normal`` is bitwise JAX's on numpy:0 and jax:0 for float32 (numpy:0 evaluates XLA's own float32
``erf_inv`` code: ``fnarray/lowering/numpy/xla_cpu_float32.py``) and within a few ulp on the other backends.
The other samplers that go through transcendental functions (``gumbel``, ``categorical``,
``truncated_normal``, ``exponential``, ``laplace``) use JAX's formulas but agree with it only to float
rounding, because ``log`` and ``erf`` are rounded differently by each backend (docs/from_jax.md,
"Random numbers").

Example::

    >>> import fnarray.random as fr
    >>> k = fr.key(0)
    >>> k1, k2 = fr.split(k)
    >>> x = fr.normal(k1, (3,))   # float32[3]
"""

from __future__ import annotations

import math
import operator
import sys

import numpy as np

from fnarray.core import dtypes, lax
from fnarray.core.array import Array
from fnarray.core.errors import DTypeError, ShapeError
from fnarray.core.prng import KeyArray, threefry2x32_p

__all__ = [
    "PRNGKey",
    "ball",
    "bernoulli",
    "beta",
    "binomial",
    "bits",
    "categorical",
    "cauchy",
    "chisquare",
    "choice",
    "clone",
    "dirichlet",
    "double_sided_maxwell",
    "exponential",
    "f",
    "fold_in",
    "gamma",
    "generalized_normal",
    "geometric",
    "gumbel",
    "key",
    "key_data",
    "key_dtype",
    "key_impl",
    "laplace",
    "loggamma",
    "logistic",
    "lognormal",
    "maxwell",
    "multinomial",
    "multivariate_normal",
    "normal",
    "orthogonal",
    "pareto",
    "permutation",
    "poisson",
    "rademacher",
    "randint",
    "rayleigh",
    "split",
    "t",
    "threefry_2x32",
    "triangular",
    "truncated_normal",
    "uniform",
    "wald",
    "weibull_min",
    "wrap_key_data",
]

_U32 = dtypes.uint32
_UINT_OF_WIDTH = {8: dtypes.uint8, 16: dtypes.uint16, 32: dtypes.uint32, 64: dtypes.uint64}
# Explicit mantissa bits of each floating dtype (what ``uniform`` randomizes).
_MANTISSA_BITS = {dtypes.float16: 10, dtypes.bfloat16: 7, dtypes.float32: 23, dtypes.float64: 52}


# ----------------------------------------------------------------------------- argument checks


def _as_array(x):
    from fnarray import numpy as fnp
    return x if isinstance(x, Array) else fnp.asarray(x)


def _check_key(k, name: str) -> Array:
    """Validate a PRNG key, typed (``key<fry>``, shape ``()``) or raw (``uint32[2]``); returns its words as an
    ``Array``."""
    if isinstance(k, KeyArray):
        if k.shape != ():
            raise ShapeError(f"{name} needs a single PRNG key, got a key array of shape {k.shape} (dtype "
                             f"{k.dtype}). To use a batch of keys, map over them with fnarray.vmap.")
        k = k._data
    if isinstance(k, np.ndarray):
        k = _as_array(k)
    if not isinstance(k, Array):
        raise TypeError(f"{name} needs a PRNG key (a uint32 array of shape (2,), made by "
                        f"fnarray.random.key(seed)), got {type(k).__name__}")
    if k.dtype != _U32:
        raise DTypeError(f"{name} needs a PRNG key of dtype uint32 and shape (2,), got an array of dtype "
                         f"{k.dtype.name}; make keys with fnarray.random.key(seed)")
    if k.shape != (2,):
        hint = (" To use a batch of keys, map over them with fnarray.vmap." if k.ndim > 1 and k.shape[-1] == 2
                else " Make keys with fnarray.random.key(seed).")
        raise ShapeError(f"{name} needs a single PRNG key of shape (2,), got shape {k.shape}.{hint}")
    return k


def _shape_arg(shape, name: str) -> tuple:
    """A static shape: an int or a sequence of non-negative ints."""
    if isinstance(shape, (int, np.integer)) and not isinstance(shape, bool):
        shape = (shape,)
    try:
        out = tuple(operator.index(d) for d in shape)
    except TypeError:
        raise TypeError(f"{name}: shape must be an int or a tuple of ints, got {shape!r}") from None
    if any(d < 0 for d in out):
        raise ShapeError(f"{name}: shape {out} has a negative dimension")
    return out


def _float_dtype(dtype, name: str) -> np.dtype:
    d = dtypes.default_float() if dtype is None else dtypes.requested(dtype, name)
    if d not in _MANTISSA_BITS:
        raise DTypeError(f"{name} samples floating dtypes (float16, bfloat16, float32, float64), got {d.name}")
    return d


def _broadcastable_to(param_shape, shape, name, what):
    from fnarray.numpy._util import broadcast_shapes
    try:
        ok = broadcast_shapes(tuple(param_shape), tuple(shape), name=name) == tuple(shape)
    except ShapeError:
        ok = False
    if not ok:
        raise ShapeError(f"{name}: {what} of shape {tuple(param_shape)} does not broadcast to the sample "
                         f"shape {tuple(shape)}; pass a shape that the parameters broadcast to")


def _param(v, dtype, shape, name, what):
    """A distribution parameter of ``dtype``: a NumPy scalar (a literal) for a Python or NumPy
    scalar, else an array broadcast to ``shape`` (rank-0 arrays stay rank 0)."""
    if isinstance(v, (bool, int, float, np.generic)) and not isinstance(v, np.ndarray):
        return np.asarray(v, dtype)[()]
    v = _as_array(v)
    _broadcastable_to(v.shape, shape, name, what)
    v = lax.convert_element_type(v, dtype)
    return v if v.ndim == 0 else lax.broadcast_to_rank_shape(v, shape)


def _is_static(v) -> bool:
    return isinstance(v, np.generic)


# ----------------------------------------------------------------------------- Threefry-2x32


def _threefry2x32(k0, k1, x0, x1):
    """Threefry-2x32 with 20 rounds: encrypt the counter pairs ``(x0, x1)`` under the key ``(k0, k1)``.

    All four are ``uint32`` (arrays of one shape, or rank 0); returns the pair of ciphertext words, of the
    operands' common shape. One ``threefry2x32`` equation (``fnarray.core.prng``).
    """
    return threefry2x32_p.bind(k0, k1, x0, x1)


def _key_words(k):
    """The two ``uint32`` words of a key, as rank-0 arrays."""
    return (lax.reshape(lax.slice(k, (0,), (1,)), ()), lax.reshape(lax.slice(k, (1,), (2,)), ()))


def _hashed_counters(k, shape):
    """Threefry of the counters ``(i >> 32, i & 0xFFFFFFFF)``, ``i`` the row-major index in ``shape``."""
    size = math.prod(shape)
    if size >= 2 ** 32:
        raise ValueError(f"random samples of {size} elements (shape {shape}) exceed the 2**32 counters of one "
                         "key; split the key and draw in parts")
    lo = lax.reshape(lax.iota(_U32, size), shape)
    k0, k1 = _key_words(k)
    y0, y1 = _threefry2x32(k0, k1, np.uint32(0), lo)
    if lax.shape(y0) != tuple(shape):   # the counters' high words are the constant 0
        y0 = lax.broadcast_to_rank_shape(y0, shape)
    return y0, y1


def threefry_2x32(key, count):
    """Apply Threefry-2x32 (20 rounds) to ``count`` under ``key`` (mirrors ``jax.prng.threefry_2x32``).

    Args:
      key: ``uint32[2]``, the cipher key.
      count: ``uint32`` array of any shape; its flattened elements are padded with one 0 to an
        even length if needed, and the first half and the second half form the counter pairs.
    Returns:
      ``uint32`` array of ``count``'s shape: the ciphertext words in the same arrangement.
    Raises:
      ``DTypeError``/``ShapeError`` for a bad key; ``DTypeError`` if ``count`` is not ``uint32``.
    """
    k = _check_key(key, "threefry_2x32")
    c = _as_array(count)
    if c.dtype != _U32:
        raise DTypeError(f"threefry_2x32 needs uint32 counters, got {c.dtype.name}")
    shape, n = c.shape, c.size
    flat = lax.reshape(c, (n,))
    if n % 2:
        flat = lax.concatenate([flat, lax.full((1,), 0, _U32)], 0)
    half = (n + 1) // 2
    k0, k1 = _key_words(k)
    y0, y1 = _threefry2x32(k0, k1, lax.slice(flat, (0,), (half,)), lax.slice(flat, (half,), (2 * half,)))
    out = lax.concatenate([y0, y1], 0)
    return lax.reshape(lax.slice(out, (0,), (n,)), shape)


# ----------------------------------------------------------------------------- keys


def _seed_words(seed):
    """``(hi, lo)`` ``uint32`` words of a seed: a Python/NumPy integer or a 0-d integer array.

    As JAX: the seed is first an integer of its dtype (a Python int's the default int, ``int32`` while
    ``enable_x64`` is off, so ``-1`` keeps only its low 32 bits); a 64-bit one splits into two words, a narrower
    one has a zero high word. A Python int outside ``int64`` raises ``OverflowError`` in both modes."""
    if isinstance(seed, (bool, np.bool_)):
        raise TypeError("a PRNG seed must be an integer, got a bool")
    if isinstance(seed, (int, np.integer)):
        s = int(seed)
        if isinstance(seed, int) and not -2 ** 63 <= s < 2 ** 63:
            raise OverflowError(f"PRNG seed {s} does not fit in int64 (as JAX, in both x64 modes); expected an "
                                "integer in [-2**63, 2**63)")
        d = dtypes.default_int() if isinstance(seed, int) else dtypes.canonicalize(seed.dtype)
        s %= 2 ** (64 if d.itemsize == 8 else 32)
        return np.uint32(s >> 32), np.uint32(s & 0xFFFFFFFF)
    if seed is None or isinstance(seed, (float, complex, str, bytes)):
        raise TypeError(f"a PRNG seed must be an integer, got {type(seed).__name__} {seed!r}")
    s = _as_array(seed)
    if s.shape != ():
        raise ShapeError(f"a PRNG seed must be a scalar, got an array of shape {s.shape}; to make a batch "
                         "of keys, map key over the seeds with fnarray.vmap")
    if not dtypes.is_int(s.dtype):
        raise DTypeError(f"a PRNG seed must be an integer, got dtype {s.dtype.name}")
    if s.dtype.itemsize == 8:
        hi = lax.convert_element_type(lax.shift_right_logical(s, np.asarray(32, s.dtype)[()]), _U32)
    else:
        hi = np.uint32(0)
    return hi, lax.convert_element_type(s, _U32)


def _words_to_key(hi, lo):
    if _is_static(hi) and _is_static(lo):
        from fnarray import numpy as fnp
        return fnp.asarray(np.array([hi, lo], _U32))
    parts = [lax.broadcast_in_dim(w, (1,), ()) for w in (hi, lo)]
    return lax.concatenate(parts, 0)


def _typed_as(template, raw):
    """``raw`` (``uint32[..., 2]``) as typed keys if ``template`` is a typed key, else as it is."""
    return KeyArray(raw) if isinstance(template, KeyArray) else raw


def key(seed, *, impl=None) -> KeyArray:
    """A typed PRNG key from an integer seed (mirrors ``jax.random.key``).

    Args:
      seed: a Python int in ``[-2**63, 2**63)``, a NumPy integer, or a 0-d integer array (traced values
        included). As JAX, the seed is an integer of its dtype (a Python int's is the default int: ``int32``
        while ``enable_x64`` is off, so only its low 32 bits count); a 64-bit one is split into its high and
        low 32-bit words, a narrower one has a zero high word (``key(-1)``: ``[0, 2**32 - 1]`` with x64
        off, ``[2**32 - 1, 2**32 - 1]`` with it on).
      impl: ``None`` or ``"threefry2x32"`` (the only generator here).
    Returns:
      a ``KeyArray`` of shape ``()`` and dtype ``key<fry>`` (``fnarray.core.dtypes.key_fry``) over the words
      ``[hi, lo]``, printed as JAX prints it (``Array((), dtype=key<fry>) overlaying: [0 0]``); the same bits
      as ``PRNGKey(seed)``, which returns them raw (``uint32[2]``). ``key_data`` unwraps it.
    Raises:
      ``TypeError`` for a non-integer seed, ``ShapeError`` for an array seed that is not 0-d,
      ``OverflowError`` for a Python int outside ``int64`` (as JAX), ``ValueError`` for another ``impl``.
    """
    _check_impl(impl, "key")
    return KeyArray(_words_to_key(*_seed_words(seed)))


def _check_impl(impl, name):
    if impl not in (None, "threefry2x32", "threefry"):
        raise ValueError(f"{name}: fnarray has one PRNG implementation, 'threefry2x32'; got impl={impl!r}")


def PRNGKey(seed, *, impl=None) -> Array:
    """A raw PRNG key from an integer seed (mirrors ``jax.random.PRNGKey``): ``uint32[2]``, the words of ``key``.

    Args:
      seed: a Python int in ``[-2**63, 2**63)``, a NumPy integer, or a 0-d integer array (read as ``key``
        reads it).
      impl: ``None`` or ``"threefry2x32"``.

    Returns:
      ``uint32[2]``, the key ``[hi, lo]`` of the 64-bit seed.

    Raises:
      TypeError: a non-integer seed (bool, float, complex).
      ShapeError: an array seed that is not 0-d.
      DTypeError: an array seed of a non-integer dtype.
      OverflowError: a Python int outside ``int64`` (as JAX).
      ValueError: another ``impl``.
    """
    _check_impl(impl, "PRNGKey")
    return _words_to_key(*_seed_words(seed))


def _check_keys(keys, name: str) -> Array:
    """A key or an array of keys: ``uint32`` of shape ``(..., 2)``."""
    if isinstance(keys, np.ndarray):
        keys = _as_array(keys)
    if not isinstance(keys, Array):
        raise TypeError(f"{name} needs PRNG keys (uint32 arrays of shape (..., 2)), got {type(keys).__name__}")
    if keys.dtype != _U32 or keys.ndim < 1 or keys.shape[-1] != 2:
        raise ShapeError(f"{name} needs PRNG keys, uint32 of shape (..., 2), got {keys.dtype.name}{list(keys.shape)}; "
                         "make keys with fnarray.random.key(seed) or split")
    return keys


def key_data(keys) -> Array:
    """The raw ``uint32`` words of a key or an array of keys (mirrors ``jax.random.key_data``).

    Typed keys (``key``, dtype ``key<fry>``, any batch shape ``s``) give their words, ``uint32[*s, 2]``:
    ``key_data(split(key(0), 3))`` is ``uint32[3, 2]``, as in JAX. Raw keys (``PRNGKey``, ``uint32[..., 2]``)
    are words already and are returned as they are.

    Args:
      keys: typed keys, or raw keys ``uint32[..., 2]`` (a NumPy array is converted).

    Returns:
      The words as an ``Array`` of ``uint32[..., 2]``.

    Raises:
      TypeError: ``keys`` is not an array.
      ShapeError: raw keys that are not ``uint32`` with a last axis of 2.
    """
    if isinstance(keys, KeyArray):
        return keys._data
    return _check_keys(keys, "key_data")


def wrap_key_data(key_bits_array, *, impl=None) -> KeyArray:
    """Typed keys from their raw words (mirrors ``jax.random.wrap_key_data``): the inverse of ``key_data``.

    Args:
      key_bits_array: ``uint32[*s, 2]`` (as ``key_data`` or ``PRNGKey``/``split`` of a raw key return), a batch
        of keys included.
      impl: ``None`` or ``"threefry2x32"`` (the only generator here).

    Returns:
      the typed keys: a ``KeyArray`` of shape ``s`` and dtype ``key<fry>``.

    Raises:
      ValueError: another ``impl``.
      TypeError: typed keys (wrap their ``key_data``) or a non-array.
      ShapeError: not ``uint32`` with a last axis of 2.
    """
    _check_impl(impl, "wrap_key_data")
    if isinstance(key_bits_array, KeyArray):
        raise TypeError("wrap_key_data takes raw uint32[..., 2] words, got typed keys (dtype key<fry>); they are "
                        "wrapped already (key_data(k) gives their words)")
    return KeyArray(_check_keys(key_bits_array, "wrap_key_data"))


def key_impl(keys) -> str:
    """The name of the generator behind ``keys`` (mirrors ``jax.random.key_impl``): ``"threefry2x32"``.

    Args:
      keys: typed keys (``key<fry>``) or raw keys (``uint32[..., 2]``), any batch shape.

    Returns:
      ``"threefry2x32"`` (as JAX's, which prints the same), the one generator fnarray has.

    Raises:
      TypeError: ``keys`` is not an array. ShapeError: raw keys that are not ``uint32`` with a last axis of 2.
    """
    key_data(keys)
    return "threefry2x32"


def key_dtype(impl=None):
    """The dtype of typed keys (mirrors ``jax.random.key_dtype``): ``key<fry>``, ``key(0).dtype``.

    Args:
      impl: ``None`` or ``"threefry2x32"`` (the only generator here).

    Returns:
      ``fnarray.core.dtypes.key_fry``, a subdtype of ``fnarray.dtypes.prng_key``.

    Raises:
      ValueError: another ``impl``.
    """
    _check_impl(impl, "key_dtype")
    return dtypes.key_fry


def clone(key):
    """The same key, for reuse (mirrors ``jax.random.clone``, an identity outside JAX's key-reuse checker).

    Arrays here are immutable and keys are not checked for reuse, so ``clone`` returns ``key`` itself.

    Args:
      key: typed keys (``key<fry>``) or raw keys (``uint32[..., 2]``), any batch shape.

    Returns:
      ``key``.

    Raises:
      TypeError: ``key`` is not an array. ShapeError: raw keys that are not ``uint32`` with a last axis of 2.
    """
    key_data(key)
    return key


def split(key, num=2) -> Array:
    """Split a key into ``num`` new keys (mirrors ``jax.random.split``).

    Args:
      key: a typed key (``key<fry>``, shape ``()``) or a raw one (``uint32[2]``).
      num: an int, or a shape tuple for an array of keys.
    Returns:
      keys of the form of ``key``: typed of shape ``(num,)`` (or ``num``), or raw ``uint32[num, 2]`` (or
      ``uint32[*num, 2]``); key ``i`` is Threefry of the counter ``(0, i)``.
    Raises:
      ``DTypeError``/``ShapeError`` for a bad key or shape.
    """
    k = _check_key(key, "split")
    shape = _shape_arg(num, "split")
    y0, y1 = _hashed_counters(k, shape)
    col = shape + (1,)
    return _typed_as(key, lax.concatenate([lax.reshape(y0, col), lax.reshape(y1, col)], len(shape)))


def _split2(k):
    """Two keys from ``k``: rows 0 and 1 of ``split(k)``."""
    s = split(k)
    return (lax.reshape(lax.slice(s, (0, 0), (1, 2)), (2,)), lax.reshape(lax.slice(s, (1, 0), (2, 2)), (2,)))


def fold_in(key, data) -> Array:
    """A new key from ``key`` and an integer ``data`` (mirrors ``jax.random.fold_in``).

    Args:
      key: a typed key (``key<fry>``, shape ``()``) or a raw one (``uint32[2]``).
      data: a Python int in ``[-2**31, 2**32)`` or a 0-d integer array (traced values included),
        taken modulo ``2**32``.
    Returns:
      a key of the form of ``key`` (typed, or raw ``uint32[2]``): Threefry of the counter pair ``(0, data)``
      under ``key``.
    Raises:
      ``TypeError``/``ShapeError`` for non-integer or non-scalar data, ``OverflowError`` for an
      int out of range, ``DTypeError``/``ShapeError`` for a bad key.
    """
    k = _check_key(key, "fold_in")
    if isinstance(data, (bool, np.bool_, float, complex)):
        raise TypeError(f"fold_in needs integer data, got {type(data).__name__}")
    if isinstance(data, (int, np.integer)):
        d = int(data)
        if not -2 ** 31 <= d < 2 ** 32:
            raise OverflowError(f"fold_in data {d} does not fit in 32 bits; expected [-2**31, 2**32)")
        word = np.uint32(d % 2 ** 32)
    else:
        a = _as_array(data)
        if a.shape != () or not dtypes.is_int(a.dtype):
            raise TypeError(f"fold_in needs a scalar integer, got {a.dtype.name}{list(a.shape)}")
        word = lax.convert_element_type(a, _U32)
    k0, k1 = _key_words(k)
    y0, y1 = _threefry2x32(k0, k1, np.uint32(0), word)
    return _typed_as(key, _words_to_key(y0, y1))


# ----------------------------------------------------------------------------- samplers


def _random_bits(k, width: int, shape):
    y0, y1 = _hashed_counters(k, shape)
    if width == 64:
        u64 = dtypes.uint64
        hi = lax.convert_element_type(y0, u64)
        return lax.bitwise_or(lax.shift_left(hi, np.uint64(32)), lax.convert_element_type(y1, u64))
    mixed = lax.bitwise_xor(y0, y1)
    return mixed if width == 32 else lax.convert_element_type(mixed, _UINT_OF_WIDTH[width])


def bits(key, shape=(), dtype=None) -> Array:
    """Uniformly random bits (mirrors ``jax.random.bits``).

    Args:
      key: a PRNG key, typed (``key<fry>``) or raw (``uint32[2]``).
      shape: the sample shape.
      dtype: ``uint8``, ``uint16``, ``uint32`` (default; ``uint64`` with ``enable_x64`` on, as JAX) or
        ``uint64``.
    Returns:
      an array of ``shape`` and ``dtype``. 32-bit words are the xor of the two cipher words; 64-bit
      words are their concatenation; narrower words are the low bits of the 32-bit word.
    Raises:
      ``DTypeError`` for another dtype or a bad key; ``ShapeError`` for a bad shape.
    """
    k = _check_key(key, "bits")
    shape = _shape_arg(shape, "bits")
    d = (_U32 if not dtypes.x64_enabled() else dtypes.uint64) if dtype is None else dtypes.requested(dtype, "bits")
    if not dtypes.is_unsigned(d):
        raise DTypeError(f"bits makes unsigned integers (uint8, uint16, uint32, uint64), got {d.name}")
    return _random_bits(k, d.itemsize * 8, shape)


def _uniform(k, shape, d, minval, maxval, name="uniform"):
    return _scaled(_unit(k, shape, d), shape, d, minval, maxval, name)


def _unit(k, shape, d):
    """Uniform floats of ``d`` in ``[0, 1)`` from ``k``'s bits (never ``-0.0``): ``_uniform``'s first part."""
    nbits = d.itemsize * 8
    nmant = _MANTISSA_BITS[d]
    rng_bits = max(nbits, 8) if nmant >= 8 else 8
    udtype = _UINT_OF_WIDTH[nbits]
    raw = _random_bits(k, rng_bits, shape)
    if rng_bits != nbits:
        raw = lax.convert_element_type(raw, udtype)
    # Keep the top mantissa bits under the exponent of 1.0: a float uniform in [1, 2).
    one_bits = np.asarray(1.0, d).view(udtype)[()]
    mant = lax.shift_right_logical(raw, np.asarray(rng_bits - nmant, udtype)[()])
    return lax.sub(lax.bitcast_convert_type(lax.bitwise_or(mant, one_bits), d), np.asarray(1.0, d)[()])


def _scaled(unit, shape, d, minval, maxval, name):
    """``_unit``'s floats moved to ``[minval, maxval)`` (``_uniform``'s second part)."""
    lo = _param(minval, d, shape, name, "minval")
    hi = _param(maxval, d, shape, name, "maxval")
    if not (_is_static(lo) and _is_static(hi)):
        return lax.max(lo, lax.add(lax.mul(unit, lax.sub(hi, lo)), lo))
    with np.errstate(all="ignore"):
        span = (hi - lo).astype(d)
    # [0, 1) itself: `unit * 1.0 + 0.0` is `unit` bit for bit (it is never -0.0), so both are left out: two
    # passes over the samples on numpy:0, and on jax a compare and a select per element (XLA folds `x + 0.0` away,
    # so lowering/jax/elementwise.py spells it out to keep IEEE's sign of zero)
    scaled = unit if span == 1 else lax.mul(unit, span)
    return lax.max(lo, scaled if lo == 0 else lax.add(scaled, lo))


def uniform(key, shape=(), dtype=None, minval=0.0, maxval=1.0) -> Array:
    """Uniform floats in ``[minval, maxval)`` (mirrors ``jax.random.uniform``).

    The top mantissa bits of random words fill a float in ``[1, 2)``, which is shifted to
    ``[0, 1)`` and scaled, as JAX does: bitwise equal to ``jax.random.uniform`` on ``[0, 1)``;
    with other bounds within one rounding of the product (XLA fuses the scaling into a
    multiply-add). A result equal to ``maxval`` can only come from rounding in the scaling,
    as in JAX.

    Args:
      key: a PRNG key, typed (``key<fry>``) or raw (``uint32[2]``).
      shape: the sample shape; ``minval``/``maxval`` must broadcast to it.
      dtype: float16, bfloat16, float32 (default) or float64.
      minval, maxval: scalars or arrays, cast to ``dtype``.
    Returns:
      an array of ``shape`` and ``dtype``.
    Raises:
      ``DTypeError`` for a non-float dtype or a bad key; ``ShapeError`` when the bounds do not
      broadcast to ``shape``.
    """
    k = _check_key(key, "uniform")
    shape = _shape_arg(shape, "uniform")
    d = _float_dtype(dtype, "uniform")
    return _uniform(k, shape, d, minval, maxval)


def _real_normal(k, shape, d):
    lo = np.nextafter(np.asarray(-1.0, d), np.asarray(0.0, d))
    u = _uniform(k, shape, d, lo, 1.0, "normal")
    return lax.mul(np.asarray(math.sqrt(2.0), d)[()], lax.erf_inv(u))


def normal(key, shape=(), dtype=None) -> Array:
    """Standard normal samples (mirrors ``jax.random.normal``).

    ``sqrt(2) * erf_inv(u)`` with ``u`` uniform in ``(-1, 1)``; complex dtypes get independent
    real and imaginary parts of variance 1/2 each (total variance 1), as in JAX.

    Args:
      key: a PRNG key, typed (``key<fry>``) or raw (``uint32[2]``).
      shape: the sample shape.
      dtype: a floating or complex dtype (default float32).
    Returns:
      an array of ``shape`` and ``dtype``.
    Raises:
      ``DTypeError`` for another dtype or a bad key.
    """
    k = _check_key(key, "normal")
    shape = _shape_arg(shape, "normal")
    d = dtypes.default_float() if dtype is None else dtypes.requested(dtype, "normal")
    if dtypes.is_complex(d):
        real_d = dtypes.float32 if d == dtypes.complex64 else dtypes.float64
        k_re, k_im = _split2(k)
        scale = np.asarray(1 / math.sqrt(2.0), real_d)[()]
        re = lax.mul(_real_normal(k_re, shape, real_d), scale)
        im = lax.mul(_real_normal(k_im, shape, real_d), scale)
        return lax.complex(re, im)
    d = _float_dtype(d, "normal")
    return _real_normal(k, shape, d)


def bernoulli(key, p=0.5, shape=None) -> Array:
    """Booleans that are True with probability ``p`` (mirrors ``jax.random.bernoulli``).

    ``uniform(key, shape, p.dtype) < p``.

    Args:
      key: a PRNG key, typed (``key<fry>``) or raw (``uint32[2]``).
      p: a float scalar or array of probabilities (Python floats are float32).
      shape: the sample shape (default: ``p``'s shape); ``p`` must broadcast to it.
    Returns:
      ``bool`` array of ``shape``.
    Raises:
      ``DTypeError`` for a non-float ``p``; ``ShapeError`` when ``p`` does not broadcast to ``shape``.
    """
    k = _check_key(key, "bernoulli")
    if isinstance(p, (float, int)) and not isinstance(p, bool):
        pd, pshape = dtypes.float32, ()
    else:
        p = _as_array(p)
        pd, pshape = p.dtype, p.shape
    if not dtypes.is_float(pd):
        raise DTypeError(f"bernoulli's probability p must be floating, got {pd.name}")
    shape = pshape if shape is None else _shape_arg(shape, "bernoulli")
    u = _uniform(k, shape, pd, 0.0, 1.0, "bernoulli")
    return lax.lt(u, _param(p, pd, shape, "bernoulli", "p"))


def _gumbel(k, shape, d):
    u = _uniform(k, shape, d, dtypes.finfo(d).tiny, 1.0, "gumbel")
    return lax.neg(lax.log(lax.neg(lax.log(u))))


def gumbel(key, shape=(), dtype=None) -> Array:
    """Standard Gumbel samples, ``-log(-log(u))`` (mirrors ``jax.random.gumbel``).

    ``u`` is uniform on ``[tiny, 1)`` (``tiny`` the smallest normal number of ``dtype``).

    Args:
      key: a PRNG key, typed (``key<fry>``) or raw (``uint32[2]``).
      shape: the sample shape (an int or a tuple of non-negative ints).
      dtype: float16, bfloat16, float32 (default) or float64.

    Returns:
      An array of ``shape`` and ``dtype``.

    Raises:
      TypeError: ``key`` is not an array, or ``shape`` is not ints.
      DTypeError: a non-floating ``dtype``, or a key that is not ``uint32``.
      ShapeError: a key not of shape ``(2,)``, or a negative dimension in ``shape``.
      ValueError: a sample of ``2**32`` elements or more (split the key instead).
    """
    k = _check_key(key, "gumbel")
    return _gumbel(k, _shape_arg(shape, "gumbel"), _float_dtype(dtype, "gumbel"))


def exponential(key, shape=(), dtype=None) -> Array:
    """Standard exponential samples, ``-log1p(-u)`` (mirrors ``jax.random.exponential``).

    ``u`` is uniform on ``[0, 1)``; the inverse-CDF method, as in JAX.

    Args:
      key: a PRNG key, typed (``key<fry>``) or raw (``uint32[2]``).
      shape: the sample shape (an int or a tuple of non-negative ints).
      dtype: float16, bfloat16, float32 (default) or float64.

    Returns:
      An array of ``shape`` and ``dtype`` (non-negative, finite).

    Raises:
      TypeError: ``key`` is not an array, or ``shape`` is not ints.
      DTypeError: a non-floating ``dtype``, or a key that is not ``uint32``.
      ShapeError: a key not of shape ``(2,)``, or a negative dimension in ``shape``.
      ValueError: a sample of ``2**32`` elements or more (split the key instead).
    """
    k = _check_key(key, "exponential")
    d = _float_dtype(dtype, "exponential")
    u = _uniform(k, _shape_arg(shape, "exponential"), d, 0.0, 1.0, "exponential")
    return lax.neg(lax.log1p(lax.neg(u)))


def laplace(key, shape=(), dtype=None) -> Array:
    """Standard Laplace samples (density ``exp(-|x|) / 2``; mirrors ``jax.random.laplace``).

    From ``u`` uniform in ``(-1, 1)``: ``sign(u) * log1p(-|u|)`` (JAX's formula).

    Args:
      key: a PRNG key, typed (``key<fry>``) or raw (``uint32[2]``).
      shape: the sample shape (an int or a tuple of non-negative ints).
      dtype: float16, bfloat16, float32 (default) or float64.

    Returns:
      An array of ``shape`` and ``dtype``.

    Raises:
      TypeError: ``key`` is not an array, or ``shape`` is not ints.
      DTypeError: a non-floating ``dtype``, or a key that is not ``uint32``.
      ShapeError: a key not of shape ``(2,)``, or a negative dimension in ``shape``.
      ValueError: a sample of ``2**32`` elements or more (split the key instead).
    """
    k = _check_key(key, "laplace")
    d = _float_dtype(dtype, "laplace")
    lo = np.nextafter(np.asarray(-1.0, d), np.asarray(0.0, d))
    u = _uniform(k, _shape_arg(shape, "laplace"), d, lo, 1.0, "laplace")
    return lax.mul(lax.sign(u), lax.log1p(lax.neg(lax.abs(u))))


def cauchy(key, shape=(), dtype=None) -> Array:
    """Standard Cauchy samples, ``tan(pi (u - 1/2))`` (mirrors ``jax.random.cauchy``).

    ``u`` is uniform on ``[eps, 1)`` (``eps`` the machine epsilon of ``dtype``), JAX's bounds, so the samples
    are finite and equal JAX's for the same key.

    Args:
      key: a PRNG key, typed (``key<fry>``) or raw (``uint32[2]``).
      shape: the sample shape (an int or a tuple of non-negative ints).
      dtype: float16, bfloat16, float32 (default) or float64.

    Returns:
      An array of ``shape`` and ``dtype``.

    Raises:
      TypeError: ``key`` is not an array, or ``shape`` is not ints.
      DTypeError: a non-floating ``dtype``, or a key that is not ``uint32``.
      ShapeError: a key not of shape ``(2,)``, or a negative dimension in ``shape``.
      ValueError: a sample of ``2**32`` elements or more (split the key instead).
    """
    k = _check_key(key, "cauchy")
    d = _float_dtype(dtype, "cauchy")
    u = _uniform(k, _shape_arg(shape, "cauchy"), d, dtypes.finfo(d).eps, 1.0, "cauchy")
    return lax.tan(lax.mul(np.asarray(np.pi, d)[()], lax.sub(u, np.asarray(0.5, d)[()])))


def logistic(key, shape=(), dtype=None) -> Array:
    """Standard logistic samples, ``log(u) - log1p(-u)`` (mirrors ``jax.random.logistic``).

    ``u`` is uniform on ``[tiny, 1)`` (``tiny`` the smallest normal number of ``dtype``), as in JAX.

    Args:
      key: a PRNG key, typed (``key<fry>``) or raw (``uint32[2]``).
      shape: the sample shape (an int or a tuple of non-negative ints).
      dtype: float16, bfloat16, float32 (default) or float64.

    Returns:
      An array of ``shape`` and ``dtype``.

    Raises:
      TypeError: ``key`` is not an array, or ``shape`` is not ints.
      DTypeError: a non-floating ``dtype``, or a key that is not ``uint32``.
      ShapeError: a key not of shape ``(2,)``, or a negative dimension in ``shape``.
      ValueError: a sample of ``2**32`` elements or more (split the key instead).
    """
    k = _check_key(key, "logistic")
    d = _float_dtype(dtype, "logistic")
    u = _uniform(k, _shape_arg(shape, "logistic"), d, dtypes.finfo(d).tiny, 1.0, "logistic")
    return lax.sub(lax.log(u), lax.log1p(lax.neg(u)))


def lognormal(key, sigma=1.0, shape=None, dtype=None) -> Array:
    """Log-normal samples ``exp(sigma * normal)`` (mirrors ``jax.random.lognormal``).

    Args:
      key: a PRNG key, typed (``key<fry>``) or raw (``uint32[2]``).
      sigma: the standard deviation of the underlying normal, a scalar or an array broadcast to ``shape``.
      shape: the sample shape (default: ``sigma``'s shape).
      dtype: float16, bfloat16, float32 (default) or float64.

    Returns:
      An array of ``shape`` and ``dtype`` (positive).

    Raises:
      TypeError: ``key`` is not an array, or ``shape`` is not ints.
      DTypeError: a non-floating ``dtype``, or a key that is not ``uint32``.
      ShapeError: a key not of shape ``(2,)``, or a negative dimension in ``shape``.
      ValueError: a sample of ``2**32`` elements or more (split the key instead).
      ShapeError: also when ``sigma`` does not broadcast to ``shape``.
    """
    k = _check_key(key, "lognormal")
    d = _float_dtype(dtype, "lognormal")
    sshape = () if isinstance(sigma, (bool, int, float, np.generic)) else _as_array(sigma).shape
    shape = tuple(sshape) if shape is None else _shape_arg(shape, "lognormal")
    return lax.exp(lax.mul(_real_normal(k, shape, d), _param(sigma, d, shape, "lognormal", "sigma")))


def rademacher(key, shape=(), dtype=None) -> Array:
    """Samples of -1 and 1 with probability 1/2 each (mirrors ``jax.random.rademacher``): ``2 b - 1`` for
    ``b = bernoulli(key, 0.5, shape)``, so they equal JAX's for the same key.

    Args:
      key: a PRNG key, typed (``key<fry>``) or raw (``uint32[2]``).
      shape: the sample shape (an int or a tuple of non-negative ints).
      dtype: the result dtype (default int32; a float or signed integer dtype).

    Returns:
      An array of ``shape`` and ``dtype``.

    Raises:
      TypeError: ``key`` is not an array, or ``shape`` is not ints.
      DTypeError: an unsigned or bool ``dtype``, or a key that is not ``uint32``.
      ShapeError: a key not of shape ``(2,)``, or a negative dimension in ``shape``.
    """
    k = _check_key(key, "rademacher")
    d = dtypes.default_int() if dtype is None else dtypes.requested(dtype, "rademacher")
    if dtypes.is_bool(d) or (dtypes.is_int(d) and not dtypes.is_signed(d)):
        raise DTypeError(f"rademacher samples -1 and 1: its dtype must be signed or floating, got {d.name}")
    b = lax.lt(_uniform(k, _shape_arg(shape, "rademacher"), dtypes.float32, 0.0, 1.0, "rademacher"),
               np.float32(0.5))
    two_b = lax.convert_element_type(b, d)
    return lax.sub(lax.add(two_b, two_b), np.asarray(1, d)[()])


def truncated_normal(key, lower, upper, shape=None, dtype=None) -> Array:
    """Standard normal samples truncated to ``(lower, upper)`` (mirrors ``jax.random.truncated_normal``).

    Inverse-CDF method. Where the interval reaches into ``[-2, 2]``, JAX's: ``u`` uniform between
    ``erf(lower/√2)`` and ``erf(upper/√2)``, then ``√2 · erf_inv(u)``. Where it lies in one tail beyond 2, in log
    space, so that far tails stay inside their interval (``lower = 8`` in float32, where ``erf`` of both
    bounds rounds to 1, or ``lower = 1e3``): the interval is mirrored to the side of
    the lower tail (``x -> -x`` where ``lower + upper > 0``), ``log p = log Φ(upper) + log(r + u (1 - r))``
    with ``r = Φ(lower) / Φ(upper)``, and ``x`` the inverse of ``log Φ`` at ``log p``: in float32 (half floats too)
    one Halley step from an asymptotic start, ``Φ`` from a rational ``erfcx`` (``_tail_float32``; within 1.03 ulps of
    SciPy), in float64 three Newton steps on ``log_ndtr``'s lower regions; clipped into the open interval so that
    rounding never leaves it. JAX's ``erf``-based form puts every sample of ``(8, 1e6)`` near 1e6 in float32.
    Bounds whose values are known at the call (Python or NumPy scalars and arrays, and concrete arrays of at most
    65,536 elements, which an eager call reads to the host: one wait for them) and reach into ``[-2, 2]`` leave
    the log-space part out of the program (XLA compiles it for about a third of the whole: jax:0's first calls);
    traced bounds (under ``jit``, ``grad``, ``vmap``) keep it.

    Args:
      key: a PRNG key, typed (``key<fry>``) or raw (``uint32[2]``).
      lower, upper: scalars or arrays (infinite bounds allowed).
      shape: the sample shape (default: the broadcast shape of ``lower`` and ``upper``).
      dtype: a float dtype (default float32).
    Returns:
      an array of ``shape`` and ``dtype`` with ``lower < x < upper``.
    Raises:
      ``DTypeError`` for a non-float dtype; ``ShapeError`` when the bounds do not broadcast.
    """
    if _reaches_center(lower, upper):
        return _truncated_normal_center(key, lower, upper, shape, dtype)
    return _truncated_normal_any(key, lower, upper, shape, dtype)


#: concrete array bounds of at most this many elements are read to the host by ``truncated_normal`` (``_known``)
_READ_BOUNDS_UP_TO = 1 << 16


def _reaches_center(lower, upper) -> bool:
    """Whether every interval of the bounds reaches into ``[-2, 2]``, their values known (``_known``): no element
    ``lower > 2`` or ``upper < -2`` (then no sample takes the log-space tail of ``truncated_normal``, in any float
    dtype: rounding keeps ``lower <= 2``; a NaN bound selects no tail in the program either)."""
    lo = _known(lower)
    if lo is None or np.any(lo > 2):
        return False
    hi = _known(upper)
    return hi is not None and not np.any(hi < -2)


def _known(v):
    """The real values of ``v`` as a NumPy array where they are known without tracing: Python and NumPy scalars and
    arrays, and concrete arrays (``ArrayImpl``: an eager call) of at most ``_READ_BOUNDS_UP_TO`` elements, read from
    their device; ``None`` for anything else (tracers, larger arrays, complex values)."""
    from fnarray.devices.array_impl import ArrayImpl
    if isinstance(v, (bool, int, float, np.generic, np.ndarray)) or (
            isinstance(v, ArrayImpl) and v.size <= _READ_BOUNDS_UP_TO):
        a = np.asarray(v)
        return a if a.dtype.kind in "biuf" else None
    return None


def _truncated_normal_center(key, lower, upper, shape, dtype):
    """``truncated_normal`` without its log-space tail, for bounds that ``_reaches_center`` (eager calls run it as a
    program of its own: its bounds are still inputs there; with the tail XLA's compile on jax:0 takes half as long
    again)."""
    return _truncated_normal(key, lower, upper, shape, dtype, tails=False)


def _truncated_normal_any(key, lower, upper, shape, dtype):
    """``truncated_normal`` with its log-space tail, selected where ``lower > 2`` or ``upper < -2``."""
    return _truncated_normal(key, lower, upper, shape, dtype, tails=True)


def _truncated_normal(key, lower, upper, shape, dtype, tails):
    from fnarray.numpy._util import broadcast_shapes
    k = _check_key(key, "truncated_normal")
    d = _float_dtype(dtype, "truncated_normal")
    lower, upper = _as_array(lower), _as_array(upper)
    if shape is None:
        shape = broadcast_shapes(lower.shape, upper.shape, name="truncated_normal")
    shape = _shape_arg(shape, "truncated_normal")
    lo = _param(lower, d, shape, "truncated_normal", "lower")
    hi = _param(upper, d, shape, "truncated_normal", "upper")
    sqrt2 = np.asarray(math.sqrt(2.0), d)[()]
    a = lax.erf(lax.div(lo, sqrt2))
    b = lax.erf(lax.div(hi, sqrt2))
    unit = _unit(k, shape, d)  # one draw of bits for both parts (XLA would merge two, after compiling them)
    u = _scaled(unit, shape, d, a, b, "truncated_normal")
    if tails:
        two = np.asarray(2.0, d)[()]
        tail = lax.bitwise_or(lax.gt(lo, two), lax.lt(hi, lax.neg(two)))
        # a tail element's erf part reads ``unit`` (in [0, 1)), not u: where erf rounds the bounds to +-1, erf_inv
        # has an infinite derivative at u, and the select's zero cotangent times it was a NaN gradient of the
        # bounds (|bound| >= 10 in float32; docs/transforms.md, NaN-safe where)
        u = lax.select(tail, unit, u)
    x = lax.mul(sqrt2, lax.erf_inv(u))
    if tails:
        x = lax.select(tail, _truncated_normal_log_space(unit, d, lo, hi), x)
    inf = np.asarray(np.inf, d)[()]
    above = lax.nextafter(lax.stop_gradient(lo), inf)
    below = lax.nextafter(lax.stop_gradient(hi), lax.neg(inf))
    return lax.min(lax.max(x, above), below)


def _log_ndtr_below(x):
    """``(log Φ(x), Φ(x) / φ(x))`` in float64 for the tail's ``x <= -2`` (the Mills ratio is Newton's step for the
    inverse): ``log(erfc(-x/√2) / 2)`` down to -37, below it the asymptotic series of Abramowitz and Stegun 26.2.12
    with three terms, as ``log_ndtr``'s two lower regions (one ``erfc``, where ``log_ndtr`` also computes its upper
    region's)."""
    import fnarray.numpy as fnp
    bound = -37.0
    # each branch clamped 0.01 past the switch (finite where unselected): clamped at the switch itself,
    # max/min at x == bound split the gradient with the constant and the selected branch had half of it
    # (truncated_normal's bound at -10 or 10, float32, when float32 took this form)
    mid = fnp.log(0.5 * lax.erfc(fnp.maximum(x, bound - 0.01) * -math.sqrt(0.5)))
    x_lo = fnp.minimum(x, bound + 0.01)
    inv2 = 1.0 / (x_lo * x_lo)
    series = inv2 * (-1.0 + inv2 * (3.0 - 15.0 * inv2))  # sum over k = 1..3 of (-1)^k (2k-1)!! / x^(2k)
    lo = -0.5 * x_lo * x_lo - fnp.log(-x_lo) - 0.5 * math.log(2 * math.pi) + fnp.log1p(series)
    lg = fnp.where(x > bound, mid, lo)
    return lg, fnp.exp(lg + 0.5 * x * x + 0.5 * math.log(2 * math.pi))


def _ndtri_of_log_below(log_p):
    """The inverse of ``log_ndtr`` in the lower tail, float64: ``x`` with ``log Φ(x) = log_p``, for ``log_p < log
    Φ(-2)`` (others are clamped there: finite values that ``truncated_normal`` does not select). Start ``-√(t - log t
    - log 2π)`` with ``t = -2 log p`` (``-x²/2 - log(-x √(2π)) = log p``: 4% off at -2, closer further out), then
    three Newton steps on ``log Φ`` (concave: from the first step on, the steps approach the root from below)."""
    import fnarray.numpy as fnp
    log_p = fnp.minimum(log_p, -3.78)  # log Φ(-2) = -3.7832
    t = -2.0 * log_p
    x = -fnp.sqrt(t - fnp.log(t) - math.log(2 * math.pi))
    for _ in range(3):
        lg, mills = _log_ndtr_below(x)
        x = x - (lg - log_p) * mills  # / (d log Φ / dx = φ / Φ)
    return x


# ``z erfcx(z) = 1/√π + w P(w) / Q(w)`` with ``w = 1/z²``, for ``z >= √2`` (``w <= 1/2``, the tail's ``x <= -2``): a
# relative least-squares fit made for fnarray in float64 (Loeb's iteration, then reweighted towards the largest
# error) to SciPy's ``erfcx``; within 1.5e-7 in float64 and 1.4e-7 (2.3 float32 ulps) evaluated in float32 (``erfc``'s
# own two float32 polynomials: 1.6e-7). At ``w = 0`` it is the asymptotic series' ``1/√π (1 - w/2 + ...)``.
_ERFCX_P = (-0.2820947468280792, -1.9062947034835815, -2.3384487628936768, -0.12559442222118378)
_ERFCX_Q = (1.0, 8.257570266723633, 16.930776596069336, 7.860334873199463)
# ``log m`` for ``m`` in ``[1, 2)`` within 3.5e-3, less ``127 log 2``: a minimax quadratic in ``m - 1`` made for
# fnarray, its terms collected in ``m`` (``_rough_log``).
_ROUGH_LOG = (0.0034240002278238535 - 0.9253297448158264 - 0.23903053998947144 - 127 * math.log(2.0),
              0.9253297448158264 + 2 * 0.23903053998947144, -0.23903053998947144)


def _minus_scaled_mills(x):
    """``-ρ(x)``, ``ρ(x) = erfcx(-x/√2) / √2``, for float32 ``x <= -2``, from ``_ERFCX_P / _ERFCX_Q``: ``Φ(x) =
    exp(-x²/2) ρ(x) / √2`` and ``Φ(x) / φ(x) = ρ(x) √π``, with neither an ``exp`` to underflow nor an ``erfc``;
    ``ρ(-inf) = 0``. (Negative: ``f / x``, no negation; the callers' ratios and constants absorb the sign.)"""
    from fnarray.core.decompositions import _horner
    f32 = np.dtype(np.float32)
    w = 2.0 / (x * x)
    f = 1.0 / math.sqrt(math.pi) + w * (_horner(lax, w, _ERFCX_P, f32) / _horner(lax, w, _ERFCX_Q, f32))
    return f / x


def _rough_log(v, negative=False):
    """``log |v|`` within 3.5e-3 for normal float32 ``v``, positive (or all negative: ``negative``): its exponent
    times ``log 2`` plus a quadratic in its mantissa (``_ROUGH_LOG``). Bit operations, no ``log`` (XLA compiles each
    ``log`` for ~10 ms on jax:0) and no gradient."""
    from fnarray.core.decompositions import _horner
    f32 = np.dtype(np.float32)
    bits = lax.bitcast_convert_type(v, _U32)
    exponent = lax.convert_element_type(lax.shift_right_logical(bits, np.uint32(23)), f32)  # + 256 with the sign
    mantissa = lax.bitcast_convert_type(lax.bitwise_or(lax.bitwise_and(bits, np.uint32(0x7FFFFF)),
                                                       np.uint32(0x3F800000)), f32)
    coefs = (_ROUGH_LOG[0] - 256 * math.log(2.0) * negative,) + _ROUGH_LOG[1:]
    return exponent * math.log(2.0) + _horner(lax, mantissa, coefs, f32)


def _tail_float32(a, b, u):
    """Samples of the standard normal truncated to ``(a, b)``, ``b < -2``, for ``u`` in ``(0, 1]``, in float32: ``x``
    with ``log Φ(x) = log p = log Φ(b) + log v``, ``v = r + u (1 - r)``, ``r = Φ(a) / Φ(b) = exp((b² - a²)/2) ρ(a) /
    ρ(b)`` (``_minus_scaled_mills``; ``r = 0`` at ``a = -inf``).

    The start: with ``t = -2 log p`` and ``k = log t + log 2π``, ``x₁ = -√(t - k + (k - 2) / (t - k + 2))``, the
    asymptotic inverse ``x² ≈ t - k + (k - 2)/t`` with its denominator moved for ``t`` near ``-2 log Φ(-2) = 7.57``:
    within 0.39% of the root for ``log p`` in ``[-1e7, log Φ(-2)]``, and within 0.55% with its two logs (``t``'s and
    ``k``'s) from ``_rough_log``; ``x₁ <= -2.005``. Then one Halley step on ``E(x) = log Φ(x) - log p`` (cubic: 7e-9 in
    float64; ``log Φ``'s derivatives are ``m = φ/Φ`` and ``-m (x + m)``), whose residual ``E(x₁) = (b - x₁)(b + x₁)/2 +
    log(ρ(x₁) / (ρ(b) v))`` holds this function's only ``log`` (its only ``exp`` is ``r``'s: XLA compiles each for
    ~10 ms on jax:0; the form with two Newton steps had five logs). Within 1.03 float32 ulps of SciPy's
    ``ndtri_exp(log p)`` (``log p`` from SciPy's ``log_ndtr`` of the float32 bounds, in float64) for ``b`` in
    ``[-1e4, -2]``.

    Gradients: the start carries none (bit operations), and the Halley step's derivative in ``E(x₁)``, ``4μ₁ / (2 +
    E(x₁ μ₁ + 1))²`` with ``μ = Φ/φ``, is ``μ`` at the root to first order in ``E`` (``dμ/dx = 1 + x μ``), so the
    bounds' gradients are the exact inverse's (implicit differentiation) within ``O(E²)``. Unselected elements are
    clamped to ``a <= b <= -2``: finite values and gradients."""
    import fnarray.numpy as fnp
    b = fnp.minimum(b, -2.0)
    a = fnp.minimum(a, b)
    nrho_b = _minus_scaled_mills(b)   # (a and b stacked into one call: XLA fused the whole call into each slice)
    r = fnp.exp((b - a) * (b + a) * 0.5) * _minus_scaled_mills(a) / nrho_b
    nrho_v = nrho_b * (r + u * (1.0 - r))       # -ρ(b) v
    sg = lax.stop_gradient
    t = fnp.maximum(sg(b) * sg(b) - 2.0 * _rough_log(sg(nrho_v), negative=True) + math.log(2.0), 7.566)
    k = _rough_log(t) + math.log(2 * math.pi)
    x1 = -fnp.sqrt(t - k + (k - 2.0) / (t - k + 2.0))
    nrho_1 = _minus_scaled_mills(x1)
    mu_1 = nrho_1 * -math.sqrt(math.pi)
    err = (b - x1) * (b + x1) * 0.5 + fnp.log(nrho_1 / nrho_v)
    return x1 - 2.0 * err * mu_1 / (2.0 + err * (x1 * mu_1 + 1.0))


def _truncated_normal_log_space(unit, d, lo, hi):
    import fnarray.numpy as fnp
    # half floats in float32 (as ``log_ndtr``): -x²/2 overflows float16 beyond 362
    m = dtypes.float64 if d == dtypes.float64 else dtypes.float32
    lo, hi = lax.convert_element_type(lo, m), lax.convert_element_type(hi, m)
    flip = lax.gt(lax.add(lo, hi), np.asarray(0, m)[()])
    a = fnp.where(flip, -hi, lo)
    b = fnp.where(flip, -lo, hi)
    u = 1.0 - lax.convert_element_type(unit, m)  # in (0, 1]
    if m == dtypes.float32:
        x = _tail_float32(a, b, u)
    else:
        # both bounds in one ``_log_ndtr_below`` (stacked): one evaluation fewer for XLA to compile
        both = _log_ndtr_below(lax.concatenate([lax.expand_dims(a, (0,)), lax.expand_dims(b, (0,))], 0))[0]
        la, lb = both[0], both[1]
        r = fnp.exp(la - lb)
        x = _ndtri_of_log_below(lb + fnp.log(r + u * (1.0 - r)))
    return lax.convert_element_type(fnp.where(flip, -x, x), d)


def categorical(key, logits, axis: int = -1, shape=None) -> Array:
    """Sample category indices from unnormalized log-probabilities (mirrors ``jax.random.categorical``).

    Gumbel-max: ``argmax(logits + gumbel)`` along ``axis``.

    Args:
      key: a PRNG key, typed (``key<fry>``) or raw (``uint32[2]``).
      logits: a float array; ``axis`` indexes the categories, the other axes are a batch.
      axis: the category axis.
      shape: the sample shape (default: the batch shape); it must end with the batch shape.
    Returns:
      ``int32`` array of ``shape``.
    Raises:
      ``DTypeError`` for non-float logits; ``ShapeError`` for a bad axis or shape.
    """
    from fnarray.numpy._util import normalize_axis
    k = _check_key(key, "categorical")
    logits = _as_array(logits)
    if not dtypes.is_float(logits.dtype):
        raise DTypeError(f"categorical needs floating logits, got {logits.dtype.name}")
    if logits.ndim == 0:
        raise ShapeError("categorical needs logits with at least one axis (the categories)")
    ax = normalize_axis(axis, logits.ndim)
    batch = logits.shape[:ax] + logits.shape[ax + 1:]
    shape = batch if shape is None else _shape_arg(shape, "categorical")
    if len(shape) < len(batch) or shape[len(shape) - len(batch):] != batch:
        raise ShapeError(f"categorical: the sample shape {shape} must end with the batch shape {batch} of "
                         f"logits {logits.shape} (axis {axis})")
    prefix = shape[:len(shape) - len(batch)]
    full = prefix + logits.shape
    noisy = lax.add(_gumbel(k, full, logits.dtype), lax.broadcast_to_rank_shape(logits, full))
    return lax.argmax(noisy, len(prefix) + ax, dtypes.default_int())


# ----------------------------------------------------------------------------- integers


def _clip_to(v, d, name, what):
    """``v`` clipped into ``d``'s range and cast; returns ``(value, above)`` where ``above`` says
    whether ``v`` exceeded ``d``'s maximum (a Python bool or a bool array)."""
    info = np.iinfo(d)
    if isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)):
        iv = int(v)
        return np.asarray(min(max(iv, int(info.min)), int(info.max)), d)[()], iv > info.max
    a = _as_array(v)
    if not dtypes.is_int(a.dtype):
        raise DTypeError(f"{name}: {what} must be an integer, got {a.dtype.name}")
    src = np.iinfo(a.dtype)
    top, bottom = min(int(info.max), int(src.max)), max(int(info.min), int(src.min))
    above = False
    if src.max > info.max:
        above = lax.gt(a, np.asarray(top, a.dtype)[()])
        a = lax.min(a, np.asarray(top, a.dtype)[()])
    if src.min < info.min:
        a = lax.max(a, np.asarray(bottom, a.dtype)[()])
    return lax.convert_element_type(a, d), above


def _full(v, d, shape):
    """``v`` (a static scalar or an array broadcastable to ``shape``) as an array of ``shape``."""
    if _is_static(v) or isinstance(v, (bool, int, float)):
        return lax.full(shape, v, d)
    return v if lax.shape(v) == tuple(shape) else lax.broadcast_to_rank_shape(v, shape)


def randint(key, shape, minval, maxval, dtype=None) -> Array:
    """Uniform integers in ``[minval, maxval)`` (mirrors ``jax.random.randint``; bitwise equal to it).

    Method (JAX's): two independent words ``hi``, ``lo`` of the dtype's width are combined as
    ``(hi mod span) * (2**nbits mod span) + lo mod span``, taken mod ``span``: the offset of a
    ``2 * nbits``-bit random number modulo ``span``, whose bias is below ``span / 2**(2*nbits)``
    when no product wraps (spans below ``2**(nbits/2)``); for wider spans the products wrap
    modulo ``2**nbits`` and the distribution is only approximately uniform, as in JAX.
    A ``maxval`` above the dtype's maximum counts as one past it (``randint(k, s, 0, 256,
    uint8)`` covers all bytes); where ``maxval <= minval`` the result is ``minval``.

    Args:
      key: a PRNG key, typed (``key<fry>``) or raw (``uint32[2]``).
      shape: the sample shape; ``minval``/``maxval`` must broadcast to it.
      minval, maxval: integer scalars or arrays (clipped into the dtype's range).
      dtype: an integer dtype (default int32).
    Returns:
      an array of ``shape`` and ``dtype``.
    Raises:
      ``DTypeError`` for a non-integer dtype or bound; ``ShapeError`` for bounds that do not
      broadcast to ``shape``.
    """
    k = _check_key(key, "randint")
    shape = _shape_arg(shape, "randint")
    d = dtypes.default_int() if dtype is None else dtypes.requested(dtype, "randint")
    if not dtypes.is_int(d):
        raise DTypeError(f"randint makes integers, got dtype {d.name}; use uniform for floats")
    for v, what in ((minval, "minval"), (maxval, "maxval")):
        if isinstance(v, (Array, np.ndarray)):
            _broadcastable_to(np.shape(v), shape, "randint", what)
    if d.itemsize < 4:
        # Narrow dtypes are sampled as int32 (span <= 2**16 is then nearly unbiased), with the
        # bounds clipped into [min, max + 1] of the requested dtype, and cast at the end.
        info = np.iinfo(d)
        lo_v, _ = _clip_to(minval, dtypes.int32, "randint", "minval")
        hi_v, _ = _clip_to(maxval, dtypes.int32, "randint", "maxval")
        lo_v = _clamp(lo_v, int(info.min), int(info.max))
        hi_v = _clamp(hi_v, int(info.min), int(info.max) + 1)
        out = _randint(k, shape, lo_v, hi_v, False, dtypes.int32)
        return lax.convert_element_type(out, d)
    lo_v, _ = _clip_to(minval, d, "randint", "minval")
    hi_v, above = _clip_to(maxval, d, "randint", "maxval")
    return _randint(k, shape, lo_v, hi_v, above, d)


def _clamp(v, lo: int, hi: int):
    if _is_static(v):
        return np.asarray(min(max(int(v), lo), hi), v.dtype)[()]
    return lax.min(lax.max(v, np.asarray(lo, v.dtype)[()]), np.asarray(hi, v.dtype)[()])


def _randint(k, shape, lo_v, hi_v, above, d):
    """The sampler of ``randint`` for 32- and 64-bit ``d``; bounds already clipped into ``d``, and
    ``above`` true where the caller's maxval exceeded ``d``'s maximum."""
    nbits = d.itemsize * 8
    ud = _UINT_OF_WIDTH[nbits]
    lo_v, hi_v = _full(lo_v, d, shape), _full(hi_v, d, shape)
    above = _full(above, dtypes.bool_, shape)

    k_hi, k_lo = _split2(k)
    hi_bits = _random_bits(k_hi, nbits, shape)
    lo_bits = _random_bits(k_lo, nbits, shape)

    ones = lax.full(shape, 1, ud)
    empty = lax.le(hi_v, lo_v)
    span = lax.select(empty, ones, lax.convert_element_type(lax.sub(hi_v, lo_v), ud))
    # A maxval above the dtype's range means one past its maximum: the span grows by one,
    # wrapping to 0 when it covers all 2**nbits values.
    span = lax.select(lax.bitwise_and(above, lax.bitwise_not(empty)), lax.add(span, np.asarray(1, ud)[()]), span)
    full_range = lax.eq(span, np.asarray(0, ud)[()])
    safe_span = lax.select(full_range, ones, span)
    # (hi * 2**nbits + lo) mod span, without leaving nbits: 2**nbits mod span = (2**(nbits/2) mod span)**2.
    mult = lax.rem(np.asarray(2 ** (nbits // 2), ud)[()], safe_span)
    mult = lax.rem(lax.mul(mult, mult), safe_span)
    offset = lax.add(lax.mul(lax.rem(hi_bits, safe_span), mult), lax.rem(lo_bits, safe_span))
    offset = lax.select(full_range, lo_bits, lax.rem(offset, safe_span))
    return lax.add(lo_v, lax.convert_element_type(offset, d))


def _choice_index(k, p, shape, n):
    """Indices of ``shape`` drawn with probabilities ``p`` (``n`` of them, not normalized): the first index whose
    cumulative sum reaches ``r = total (1 - u)``. A float32 running sum over 10**6 entries rounds each 1e-6 step
    by up to 6% (biasing the draws), so the sum runs in two levels: within blocks of ``b ~ √n`` entries, and
    over the blocks' totals; a binary search finds the block, a second one the entry (memory ``O(size + n)``)."""
    import fnarray.numpy as fnp
    b = max(1, math.isqrt(n - 1) + 1)
    nb = -(-n // b)
    pp = fnp.pad(p, (0, nb * b - n)) if nb * b > n else p
    local = lax.cumsum(lax.reshape(pp, (nb, b)), 1)            # within each block
    block_total = lax.reshape(lax.slice(local, (0, b - 1), (nb, b)), (nb,))
    block_cdf = lax.cumsum(block_total, 0)
    total = lax.reshape(lax.slice(block_cdf, (nb - 1,), (nb,)), ())
    u = _uniform(k, shape, p.dtype, 0.0, 1.0, "choice")
    r = lax.mul(total, lax.sub(np.asarray(1.0, p.dtype)[()], u))   # in (0, total]
    blk = lax.min(fnp.searchsorted(block_cdf, r, side="left"), np.int32(nb - 1))
    before = fnp.where(blk > 0, fnp.take(block_cdf, blk - 1), 0.0)
    # The rest within the block, kept in (0, the block's total] so that the entry found has a positive p.
    tiny = float(dtypes.finfo(p.dtype).tiny)
    flat = lax.reshape(local, (nb * b,))
    start = blk * b
    rest = fnp.clip(r - before, tiny, fnp.take(flat, start + (b - 1)))
    pos = fnp.zeros(shape, dtype=dtypes.int32)
    step = 1 << (b - 1).bit_length()
    while step:
        cand = pos + step
        below = (cand <= b) & (fnp.take(flat, start + fnp.minimum(cand, b) - 1) < rest)
        pos = fnp.where(below, cand, pos)
        step >>= 1
    return lax.min(start + lax.min(pos, np.int32(b - 1)), np.int32(n - 1))


def _shuffle(k, x, axis: int):
    """Sort ``x`` along ``axis`` by fresh random 32-bit words, for enough rounds that ties are
    unlikely (about ``3 log(n) / log(2**32)`` rounds, as JAX)."""
    size = max(1, math.prod(lax.shape(x)))
    rounds = math.ceil(3 * math.log(size) / math.log(2 ** 32 - 1))
    for _ in range(rounds):
        k, sub = _split2(k)
        sort_keys = _random_bits(sub, 32, lax.shape(x))
        _, x = lax.sort((sort_keys, x), dimension=axis, num_keys=1)
    return x


def _take(a, ind, axis: int):
    """``a`` indexed along ``axis`` by the int32 array ``ind``: shape ``a.shape[:axis] + ind.shape +
    a.shape[axis+1:]`` (as ``numpy.take``)."""
    flat = lax.reshape(ind, (ind.size, 1))
    g = lax.gather(a, flat, (axis,))                    # (m,) + other axes
    g = lax.reshape(g, ind.shape + a.shape[:axis] + a.shape[axis + 1:])
    m, before = ind.ndim, axis
    perm = tuple(range(m, m + before)) + tuple(range(m)) + tuple(range(m + before, g.ndim))
    return lax.transpose(g, perm)


def permutation(key, x, axis: int = 0, independent: bool = False) -> Array:
    """A random permutation of ``range(x)`` or of ``x`` along ``axis`` (mirrors ``jax.random.permutation``).

    Sorts by random 32-bit keys (repeated for large inputs, so that ties are negligible).

    Args:
      key: a PRNG key, typed (``key<fry>``) or raw (``uint32[2]``).
      x: an int ``n`` (permute ``arange(n)``, int32) or an array of rank >= 1.
      axis: the axis to permute.
      independent: permute each 1-d slice along ``axis`` independently (default: permute whole
        slices, the same reordering for all).
    Returns:
      ``int32[n]``, or an array of ``x``'s shape and dtype.
    Raises:
      ``ShapeError`` for a 0-d array or a bad axis; ``ValueError`` for a negative ``n``.
    """
    from fnarray.numpy._util import normalize_axis
    k = _check_key(key, "permutation")
    if isinstance(x, (int, np.integer)) and not isinstance(x, bool):
        n = int(x)
        if n < 0:
            raise ValueError(f"permutation of a negative count {n}")
        return _shuffle(k, lax.iota(dtypes.default_int(), n), 0)
    x = _as_array(x)
    if x.ndim == 0:
        raise ShapeError("permutation needs an int or an array of rank >= 1, got a 0-d array")
    ax = normalize_axis(axis, x.ndim)
    if independent or x.ndim == 1:
        return _shuffle(k, x, ax)
    ind = _shuffle(k, lax.iota(dtypes.int32, x.shape[ax]), 0)
    return _take(x, ind, ax)


def choice(key, a, shape=(), replace: bool = True, p=None, axis: int = 0) -> Array:
    """Random elements of ``a`` (mirrors ``jax.random.choice``).

    With ``p=None`` and ``replace``: ``randint`` indices (bitwise as JAX). Without replacement: the
    first entries of a ``permutation``. With ``p`` and replacement: inverse CDF (``u`` against the
    cumulative sum of ``p`` in two levels, blocks of about ``√n`` then within the block, each by a binary
    search: memory ``O(size + n)``, and no float32 running sum over all ``n``, whose rounding biases large
    ``n``). With ``p`` and no replacement:
    Gumbel top-k.

    Args:
      key: a PRNG key, typed (``key<fry>``) or raw (``uint32[2]``).
      a: an int ``n`` (choose from ``arange(n)``) or an array (choose slices along ``axis``).
      shape: the sample shape.
      replace: sample with replacement.
      p: optional probabilities, shape ``(n,)`` (need not sum to 1; they are normalized).
      axis: the axis of ``a`` to choose along.
    Returns:
      for an int, ``int32`` of ``shape``; for an array, ``a.shape[:axis] + shape + a.shape[axis+1:]``.
    Raises:
      ``ValueError`` when drawing more than ``n`` without replacement or from an empty ``a``;
      ``ShapeError`` for ``p`` of the wrong shape.
    """
    from fnarray.numpy._util import normalize_axis
    k = _check_key(key, "choice")
    shape = _shape_arg(shape, "choice")
    if isinstance(a, (int, np.integer)) and not isinstance(a, bool):
        n, arr, ax = int(a), None, 0
        if n < 0:
            raise ValueError(f"choice from a negative count {n}")
    else:
        arr = _as_array(a)
        if arr.ndim == 0:
            raise ShapeError("choice needs an int or an array of rank >= 1, got a 0-d array")
        ax = normalize_axis(axis, arr.ndim)
        n = arr.shape[ax]
    m = math.prod(shape)
    if n == 0 and m > 0:
        raise ValueError("choice cannot draw from an empty population")
    if not replace and m > n:
        raise ValueError(f"choice cannot draw {m} samples from {n} without replacement; "
                         "pass replace=True or a smaller shape")
    if p is None:
        if replace:
            ind = randint(k, shape, 0, n)
        else:
            ind = lax.reshape(lax.slice(permutation(k, n), (0,), (m,)), shape)
    else:
        p = _as_array(p)
        if p.shape != (n,):
            raise ShapeError(f"choice: p must have shape ({n},) to match the population, got {p.shape}")
        if not dtypes.is_float(p.dtype):
            raise DTypeError(f"choice: p must be floating, got {p.dtype.name}")
        if replace:
            ind = _choice_index(k, p, shape, n)
        else:
            scores = lax.add(_gumbel(k, (n,), p.dtype), lax.log(p))
            _, order = lax.sort((lax.neg(scores), lax.iota(dtypes.int32, n)), dimension=0, num_keys=1)
            ind = lax.reshape(lax.slice(order, (0,), (m,)), shape)
    if arr is None:
        return ind
    return _take(arr, ind, ax)


# The samplers with rejection loops or linear algebra live in their own module (it uses the helpers above).
from fnarray import _random_dists  # noqa: E402
from fnarray._random_dists import (beta, binomial, chisquare, dirichlet, f, gamma, loggamma,  # noqa: E402
                                   multivariate_normal, poisson, t)

_random_dists.random = sys.modules[__name__]
from fnarray import _random_more  # noqa: E402
from fnarray._random_more import (ball, double_sided_maxwell, generalized_normal, geometric, maxwell,  # noqa: E402
                                  multinomial, orthogonal, pareto, rayleigh, triangular, wald, weibull_min)

_random_more.random = sys.modules[__name__]


def _install_eager_jit():
    from fnarray.transforms import eager_jit  # eager calls run as cached jitted programs
    eager_jit.install(sys.modules[__name__], excluded=("PRNGKey", "key", "key_data", "wrap_key_data", "key_impl",
                                                       "truncated_normal"),
                      private=("_truncated_normal_center", "_truncated_normal_any"))


_install_eager_jit()
