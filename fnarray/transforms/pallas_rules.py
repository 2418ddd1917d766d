"""``pallas_call``'s rules: batching (``vmap`` adds a leading grid axis, as JAX's Pallas does) and the JVP rule,
which raises: a kernel's derivative is another kernel, given with ``custom_vjp`` (``docs/kernels.md``).

Under ``vmap`` each mapped operand gets a leading squeezed block axis whose block index is the new grid index,
so every program instance sees one example's blocks; unmapped operands keep their blocks (their index maps
ignore the new grid index), every result is mapped at axis 0. The kernel body is unchanged but for one more
(unused) grid index in front: ``pl.program_id(k)`` in the kernel still names the kernel's own axis ``k``.
"""

from __future__ import annotations

import numpy as np

from fnarray.core.ir import Literal, Program, Var
from fnarray.core.pallas import Block, KernelBody, pallas_call_p
from fnarray.core.shaped import ShapedArray
from fnarray.transforms.ad_tables import primitive_jvps
from fnarray.transforms.batching import _axis_size, move_batch_dim
from fnarray.transforms.batching_tables import primitive_batchers

__all__ = ["pallas_call_batch", "pallas_call_jvp"]

_I32 = ShapedArray((), np.dtype(np.int32))


def _shifted_map(block, grid_rank, mapped):
    """``block``'s index map with a leading grid index ``b``: ``(b, *g) -> (b, *old(g))`` for a mapped array (a
    new leading squeezed axis), ``(b, *g) -> old(g)`` otherwise."""
    b = Var(_I32)
    if block.index_map is None:
        if not mapped:
            return None
        g = [Var(_I32) for _ in range(grid_rank)]
        zeros = [Literal(np.int32(0), _I32) for _ in block.shape]
        return Program([], [b] + g, [], [b] + zeros)
    old = block.index_map
    outs = ([b] if mapped else []) + list(old.outvars)
    return Program([], [b] + list(old.invars), old.eqns, outs)


def _mapped_block(block, grid_rank, size):
    return Block((None,) + tuple(block.block_shape), _shifted_map(block, grid_rank, True),
                 (size,) + tuple(block.shape))


def pallas_call_batch(vals, dims, *, body, grid, in_blocks, out_blocks, scratch, out_avals, aliases, name,
                      interpret, compiler_params):
    """``vmap``: one more grid axis in front over the mapped axis (moved to 0 on every mapped operand)."""
    size = _axis_size(vals, dims)
    aliased = {i for i, _ in aliases}
    xs, blocks = [], []
    for k, (v, d, blk) in enumerate(zip(vals, dims, in_blocks, strict=True)):
        if d is None and k not in aliased:
            xs.append(v)
            blocks.append(Block(blk.block_shape, _shifted_map(blk, len(grid), False), blk.shape))
        else:   # an aliased output is mapped, so its input is too
            xs.append(move_batch_dim(v, d, 0, size))
            blocks.append(_mapped_block(blk, len(grid), size))
    outs_b = tuple(_mapped_block(blk, len(grid), size) for blk in out_blocks)
    prog = body.program
    new_body = KernelBody(Program([], [Var(_I32)] + list(prog.invars), prog.eqns, prog.outvars))
    new_avals = tuple(ShapedArray((size,) + tuple(a.shape), a.dtype) for a in out_avals)
    outs = pallas_call_p.bind(*xs, body=new_body, grid=(size,) + tuple(grid), in_blocks=tuple(blocks),
                              out_blocks=outs_b, scratch=scratch, out_avals=new_avals, aliases=aliases, name=name,
                              interpret=interpret, compiler_params=compiler_params)
    return outs, [0] * len(outs)


def pallas_call_jvp(primals, tangents, *, name, **params):
    """Raises: a ``pallas_call`` has no derivative of its own."""
    raise TypeError(f"pallas_call {name!r} cannot be differentiated on its own (grad, jvp, vjp): a kernel's "
                    f"derivative is another kernel. Wrap the function that calls pl.pallas_call in "
                    f"fnarray.custom_vjp and give its backward pass (a backward kernel, or fnarray operations); "
                    f"see docs/kernels.md and examples/kernels/softmax.py")


primitive_batchers[pallas_call_p] = pallas_call_batch
primitive_jvps[pallas_call_p] = pallas_call_jvp
