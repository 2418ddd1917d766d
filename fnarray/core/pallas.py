"""The ``pallas_call`` primitive and the kernel-only primitives of a Pallas kernel body.

A ``pallas_call`` equation runs a user kernel (``fnarray.experimental.pallas``) over a grid of program
instances. Its params hold everything static:

- ``body``: the kernel body (a ``KernelBody`` holding a ``Program``) of signature ``(pid_0, .., pid_{G-1},
  *in_refs, *out_refs, *scratch_refs) -> (*out_refs)``: one int32 scalar per grid axis (the instance's
  ``program_id``), then one value per ref holding the ref's block (``Block.block_shape`` with squeezed axes
  dropped), and as outputs the final contents of the output refs. Refs are ordinary typed values: a store is a
  functional update (``pallas_store`` returns the ref's new contents) and every read takes the ref's latest
  contents, so each ref's values form one chain that a lowering may keep in one place of memory (the kernel group
  does).
- ``grid``: a tuple of ints; ``in_blocks``/``out_blocks``: one ``Block`` per operand/result, with its
  ``index_map`` as a ``Program`` from the grid indices to block indices (``None``: the whole array);
  ``scratch``: ``ShapedArray`` s of the scratch refs; ``out_avals``; ``aliases``: ``((input, output), ...)``,
  whose outputs start as the input's value; ``name``; ``interpret``; ``compiler_params`` (a sorted tuple of
  pairs).

The kernel-only primitives appear only inside ``body`` (kind ``"kernel"``; never executed alone):

- ``pallas_load[indexer, masked, has_other] ref *starts [mask] [other]``: the block of ``ref`` that
  ``indexer`` selects. ``indexer`` has one entry per ref axis: ``("i",)`` (a scalar index: the axis is dropped)
  or ``("s", size)`` (``size`` elements from a dynamic start); each entry takes one int32 scalar operand in
  ``starts``. Where ``mask`` (bool, the result's shape) is false the result is ``other`` (0 by default); an
  unmasked element outside the ref is an error of the interpreter (undefined on devices, as Pallas).
- ``pallas_store[indexer, masked] ref value *starts [mask]``: ``ref`` with the selected elements replaced by
  ``value`` (where ``mask``); elements outside the ref are dropped when masked.
- ``pallas_atomic[op, indexer, masked] ref value *starts [mask]``: ``(new ref, old values)`` of a
  read-modify-write ``add``/``max``/``min``.
- ``pallas_loop[body, num_consts] lower upper *consts *carry``: ``carry = body(i, *consts, *carry)`` for
  ``i`` in ``[lower, upper)`` (``fori_loop`` inside a kernel; the refs a kernel may write are part of the carry,
  the values it reads from outside are the ``consts``).
- ``pallas_when[body, num_consts] pred *consts *carry``: ``body(*consts, *carry)`` where the scalar ``pred``
  holds, else ``carry`` (``pl.when``).

Reference: JAX's Pallas (``jax.experimental.pallas``: ``pallas_call``, ``BlockSpec``, the grid and the
interpret mode), whose blocked indexing this follows: block ``b`` of an axis of block size ``n`` starts at
element ``b * n``; a last block past the array's end is padded (reads there need a mask).
"""

from __future__ import annotations

from typing import NamedTuple

from fnarray.core import dtypes
from fnarray.core.errors import DTypeError, ShapeError
from fnarray.core.primitives import Primitive
from fnarray.core.shaped import ShapedArray

__all__ = ["KernelBody", "Block", "pallas_call_p", "pallas_load_p", "pallas_store_p", "pallas_atomic_p",
           "pallas_loop_p",
           "pallas_when_p", "KERNEL_PRIMITIVES", "ATOMIC_OPS", "indexed_shape", "ref_shape", "walk_body"]

ATOMIC_OPS = ("add", "max", "min")


class KernelBody:
    """A kernel body ``Program`` held so that the passes over sub-programs (partitioning, decompositions, CSE)
    do not walk into it: its kernel-only primitives mean nothing outside a ``pallas_call`` lowering. Hashes by
    the program's identity."""

    __slots__ = ("program",)

    def __init__(self, program):
        self.program = program

    def __eq__(self, other):
        return isinstance(other, KernelBody) and other.program is self.program

    def __hash__(self):
        return hash(id(self.program))

    def __repr__(self):
        return "\n" + "\n".join("    " + line for line in str(self.program).splitlines())


class Block(NamedTuple):
    """How one operand or result maps onto a ref: ``block_shape`` (ints; ``None`` for a squeezed axis of
    size 1), ``index_map`` (a ``Program`` from the grid indices to one block index per axis, or ``None``:
    the whole array, one block) and the array's ``shape``."""

    block_shape: tuple
    index_map: object
    shape: tuple

    @property
    def ref_shape(self):
        return tuple(n for n in self.block_shape if n is not None)

    @property
    def padded(self) -> bool:
        """Whether the blocks do not divide the array (the last block of some axis is padded)."""
        return any(n and s % n for n, s in zip(self.block_shape, self.shape, strict=True))


def ref_shape(block: Block):
    return block.ref_shape


def indexed_shape(indexer):
    return tuple(e[1] for e in indexer if e[0] == "s")


def _check_indexer(where, ref, indexer, starts):
    if len(indexer) != len(ref.shape):
        raise ShapeError(f"{where}: an indexer of {len(indexer)} axes for a ref of shape {ref.shape}")
    if len(starts) != len(indexer):
        raise ShapeError(f"{where}: {len(starts)} start indices for {len(indexer)} axes")
    for s in starts:
        if s.shape != () or not dtypes.is_int(s.dtype):
            raise DTypeError(f"{where}: indices must be integer scalars, got {s.str_short()}")


def _load_rule(ref, *rest, indexer, masked, has_other):
    n = len(indexer)
    starts = rest[:n]
    _check_indexer("pallas_load", ref, indexer, starts)
    shape = indexed_shape(indexer)
    for extra in rest[n:]:
        if extra.shape not in ((), shape):
            raise ShapeError(f"pallas_load: a mask or other= of shape {extra.shape} for a block of {shape}")
    return ShapedArray(shape, ref.dtype)


def _store_rule(ref, value, *rest, indexer, masked):
    n = len(indexer)
    _check_indexer("pallas_store", ref, indexer, rest[:n])
    shape = indexed_shape(indexer)
    if value.shape not in ((), shape):
        raise ShapeError(f"pallas_store: a value of shape {value.shape} for a block of {shape}")
    if value.dtype != ref.dtype:
        raise DTypeError(f"pallas_store: a {value.dtype.name} value into a {ref.dtype.name} ref (cast it: "
                         f"x.astype(ref.dtype))")
    return ShapedArray(ref.shape, ref.dtype)


def _atomic_rule(ref, value, *rest, op, indexer, masked):
    new = _store_rule(ref, value, *rest, indexer=indexer, masked=masked)
    return [new, ShapedArray(indexed_shape(indexer), ref.dtype)]


def _carry_out(where, body, carry):
    got = [(a.aval.shape, a.aval.dtype) for a in body.outvars]
    if got != [(c.shape, c.dtype) for c in carry]:
        raise ShapeError(f"{where}: the body returns {got} for a carry of {[(c.shape, c.dtype) for c in carry]}")
    return [ShapedArray(c.shape, c.dtype, c.weak_type) for c in carry]


def _loop_rule(lower, upper, *operands, body, num_consts):
    for b in (lower, upper):
        if b.shape != () or not dtypes.is_int(b.dtype):
            raise DTypeError(f"fori_loop in a kernel needs integer scalar bounds, got {b.str_short()}")
    return _carry_out("pallas_loop", body, operands[num_consts:])


def _when_rule(pred, *operands, body, num_consts):
    if pred.shape != () or not dtypes.is_bool(pred.dtype):
        raise DTypeError(f"pl.when needs a boolean scalar condition, got {pred.str_short()}")
    return _carry_out("pallas_when", body, operands[num_consts:])


def _call_rule(*args, body, grid, in_blocks, out_blocks, scratch, out_avals, aliases, name, interpret,
               compiler_params):
    if len(args) != len(in_blocks):
        raise ShapeError(f"pallas_call {name}: {len(args)} operands for {len(in_blocks)} in_specs")
    for i, (a, blk) in enumerate(zip(args, in_blocks, strict=True)):
        if tuple(a.shape) != tuple(blk.shape):
            raise ShapeError(f"pallas_call {name}: operand {i} has shape {a.shape}, its BlockSpec was made for "
                             f"{blk.shape}")
    return [ShapedArray(a.shape, a.dtype) for a in out_avals]


pallas_call_p = Primitive(
    "pallas_call", _call_rule, multiple_results=True, kind="other",
    doc="A user kernel (fnarray.experimental.pallas) run over a grid of program instances; each instance sees "
        "the blocks its BlockSpecs' index maps select, as refs; results of out_avals.")
pallas_load_p = Primitive("pallas_load", _load_rule, kind="kernel",
                          doc="Inside a pallas_call body: a block of a ref (masked elements are `other`).")
pallas_store_p = Primitive("pallas_store", _store_rule, kind="kernel",
                           doc="Inside a pallas_call body: the ref with a block replaced (where the mask holds).")
pallas_atomic_p = Primitive("pallas_atomic", _atomic_rule, multiple_results=True, kind="kernel",
                            doc="Inside a pallas_call body: an atomic add/max/min into a ref; (new ref, old values).")
pallas_loop_p = Primitive("pallas_loop", _loop_rule, multiple_results=True, kind="kernel",
                          doc="Inside a pallas_call body: fori_loop over [lower, upper) of a carry (refs included).")
pallas_when_p = Primitive("pallas_when", _when_rule, multiple_results=True, kind="kernel",
                          doc="Inside a pallas_call body: pl.when: the body applied to the carry where pred holds.")

#: The primitives that exist only inside a ``pallas_call`` body (never executed alone).
KERNEL_PRIMITIVES = (pallas_load_p, pallas_store_p, pallas_atomic_p, pallas_loop_p, pallas_when_p)


def walk_body(program):
    """Every equation of a kernel body, those of its loops and ``when`` bodies included (depth first)."""
    for e in program.eqns:
        yield e
        if e.primitive in (pallas_loop_p, pallas_when_p):
            yield from walk_body(e.params["body"])
