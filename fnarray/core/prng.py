"""The ``threefry2x32`` primitive: the Threefry-2x32 block cipher (20 rounds) behind ``fnarray.random``.

One primitive rather than ~120 elementwise equations, as in JAX (``jax.extend.random.threefry2x32_p``), for
the compiler's sake: XLA's fusion copies an elementwise chain into every consumer, so 100 slices of one
``random.bernoulli`` draw compiled the cipher 100 times (8.4 s of XLA compile against 3.7 s for raw JAX, whose
CPU lowering is a rolled loop that fusion cannot enter). The jax backend hands the primitive to JAX's own
lowering; the numpy backend computes it directly; the mlx backend writes the rounds as MLX operations
(``lowering/mlx/prng.py``); every other backend (opencl, webgpu, ONNX) expands its decomposition, the rounds
written over ``fnarray.core.lax``, which their kernel compilers fuse.

Salmon, Moraes, Dror and Shaw (2011), "Parallel random numbers: as easy as 1, 2, 3" (Threefry-2x32-20), with
JAX's key schedule: a key injection after every four rounds, the third key word the xor of the other two and
the parity constant, the injection number added to the second word.
"""

from __future__ import annotations

import numpy as np

from fnarray.core import dtypes
from fnarray.core.decompositions import defdecomposition
from fnarray.core.errors import DTypeError, ShapeError
from fnarray.core.primitives import Primitive
from fnarray.core.shaped import ShapedArray

__all__ = ["threefry2x32_p", "ROTATIONS", "PARITY", "threefry2x32_reference", "KeyArray"]

#: The rotation distances of the rounds, alternating by groups of four.
ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
#: Threefish's key-schedule parity constant.
PARITY = np.uint32(0x1BD11BDA)


def _threefry_rule(k0, k1, x0, x1):
    avals = (k0, k1, x0, x1)
    for a in avals:
        if a.dtype != dtypes.uint32:
            raise DTypeError(f"threefry2x32 takes uint32 operands, got {', '.join(b.dtype.name for b in avals)}")
    shapes = {a.shape for a in avals if a.shape != ()}
    if len(shapes) > 1:
        raise ShapeError("threefry2x32 needs operands of one shape (or rank 0), got "
                         f"{', '.join(str(a.shape) for a in avals)}")
    shape = shapes.pop() if shapes else ()
    return [ShapedArray(shape, dtypes.uint32), ShapedArray(shape, dtypes.uint32)]


threefry2x32_p = Primitive(
    "threefry2x32", _threefry_rule, multiple_results=True, kind="other",
    doc="Threefry-2x32 (20 rounds): the counter pairs (x0, x1) encrypted under the key (k0, k1); "
        "uint32 operands of one shape or rank 0; two uint32 results.")


def threefry2x32_reference(k0, k1, x0, x1):
    """The cipher in NumPy ``uint32`` arithmetic (wrapping): the numpy backend's implementation."""
    k0, k1, x0, x1 = (np.asarray(a, np.uint32) for a in (k0, k1, x0, x1))
    shape = np.broadcast_shapes(k0.shape, k1.shape, x0.shape, x1.shape)
    ks = (k0, k1, k0 ^ k1 ^ PARITY)
    with np.errstate(over="ignore"):
        x0 = np.broadcast_to(x0 + ks[0], shape).astype(np.uint32)
        x1 = np.broadcast_to(x1 + ks[1], shape).astype(np.uint32)
        for group in range(5):
            for r in ROTATIONS[group % 2]:
                x0 = x0 + x1
                x1 = ((x1 << np.uint32(r)) | (x1 >> np.uint32(32 - r))) ^ x0
            x0 = x0 + ks[(group + 1) % 3]
            x1 = x1 + ks[(group + 2) % 3] + np.uint32(group + 1)
    return [np.asarray(x0, np.uint32), np.asarray(x1, np.uint32)]


@defdecomposition(threefry2x32_p)
def threefry2x32_composite(k0, k1, x0, x1):
    """The rounds as elementwise equations, for backends whose compilers fuse them into one kernel."""
    from fnarray.core import lax

    def rotate_left(x, r):
        return lax.bitwise_or(lax.shift_left(x, np.uint32(r)), lax.shift_right_logical(x, np.uint32(32 - r)))

    shape = lax.shape(x1) or lax.shape(x0) or lax.shape(k0) or lax.shape(k1)
    ks = (k0, k1, lax.bitwise_xor(lax.bitwise_xor(k0, k1), PARITY))
    x0 = lax.broadcast_to_rank_shape(lax.add(x0, ks[0]), shape)
    x1 = lax.broadcast_to_rank_shape(lax.add(x1, ks[1]), shape)
    for group in range(5):
        for r in ROTATIONS[group % 2]:
            x0 = lax.add(x0, x1)
            x1 = lax.bitwise_xor(rotate_left(x1, r), x0)
        x0 = lax.add(x0, ks[(group + 1) % 3])
        x1 = lax.add(lax.add(x1, ks[(group + 2) % 3]), np.uint32(group + 1))
    return [x0, x1]


class KeyArray:
    """An array of typed PRNG keys (JAX's ``jax.random.key``): dtype ``key<fry>`` over ``uint32[..., 2]`` words.

    ``fa.random.key(seed)`` makes one (shape ``()``), ``split``/``fold_in`` of one return more, and every sampler
    takes one where it takes a raw ``uint32[2]`` key. Its ``shape`` is the batch shape (the words' shape without
    the trailing 2), its ``dtype`` ``dtypes.key_fry``; indexing, ``len``, iteration and ``reshape`` act on the
    batch shape. ``fa.random.key_data`` gives the words, ``fa.random.wrap_key_data`` wraps words again.

    Transforms see a key array as a pytree with one leaf, its words (registered below), so ``jit``, ``vmap``
    (a batch axis counted among the batch dimensions, which come first), ``grad`` (as a non-differentiated
    argument or an auxiliary output) and the loops' carries pass it through and give typed keys back; the
    price is that ``fa.tree.leaves(k)`` lists the words where JAX lists the key itself.
    """

    __slots__ = ("_data",)

    def __init__(self, data):
        # not checked: tree functions unflatten key arrays over any leaves (axis specs, avals)
        self._data = data

    @property
    def shape(self) -> tuple:
        return tuple(self._data.shape[:-1])

    @property
    def dtype(self):
        return dtypes.key_fry

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def itemsize(self) -> int:
        return dtypes.key_fry.itemsize

    @property
    def weak_type(self) -> bool:
        return False

    def __len__(self):
        if not self.shape:
            raise TypeError("len() of a single PRNG key (shape ())")
        return self.shape[0]

    def __iter__(self):
        if not self.shape:
            raise TypeError("iteration over a single PRNG key (shape ())")
        return (self[i] for i in range(self.shape[0]))

    def __getitem__(self, idx):
        idx = idx if isinstance(idx, tuple) else (idx,)
        return KeyArray(self._data[idx + (slice(None),)])

    def reshape(self, *shape):
        """The keys in a new batch shape (``jax.Array.reshape`` of a key array)."""
        if len(shape) == 1 and not isinstance(shape[0], (int, np.integer)):
            shape = tuple(shape[0])
        return KeyArray(self._data.reshape(tuple(shape) + (self.dtype.words,)))

    def __array__(self, dtype=None, copy=None):
        raise TypeError("an array of PRNG keys (dtype key<fry>) has no NumPy form; use "
                        "fnarray.random.key_data(keys) for its uint32 words")

    def __eq__(self, other):
        """Elementwise equality of two key arrays (their words all equal): ``bool`` of the batch shape."""
        if not isinstance(other, KeyArray):
            return NotImplemented
        from fnarray.core import lax
        same = self._data == other._data   # the Array operator: broadcasts a single key against a batch
        return lax.reduce_and(same, (same.ndim - 1,))

    def __ne__(self, other):
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else ~eq

    __hash__ = None

    def block_until_ready(self):
        """Wait for the words to be computed; returns ``self``."""
        wait = getattr(self._data, "block_until_ready", None)
        if wait is not None:
            wait()
        return self

    def __repr__(self):
        from fnarray.core.tracing import Tracer
        data = self._data
        words = repr(data) if isinstance(data, Tracer) or not hasattr(data, "__array__") else str(np.asarray(data))
        return f"Array({self.shape}, dtype={self.dtype.name}) overlaying:\n{words}"

    __str__ = __repr__


def _register_key_array():
    from fnarray.tree_util import register_pytree_node
    register_pytree_node(KeyArray, lambda k: ((k._data,), None), lambda _, children: KeyArray(children[0]))


_register_key_array()
