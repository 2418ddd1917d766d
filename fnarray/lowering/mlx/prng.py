"""The mlx backend's rule for ``threefry2x32``: the cipher's rounds as MLX operations.

MLX's own random bits (``RandomBits``) hash other counter pairs than fnarray's (JAX's partitionable layout: the
pair ``(0, i)`` for element ``i``, one hash a word where MLX's layout hashes once for two), so the rounds are
written here, as ``fnarray.core.prng``'s decomposition writes them over ``lax``. Lowered from that decomposition,
a draw was ~130 equations to trace, pass over and generate on each first call, and each rotation's two shifts by
a literal amount carried the shift rules' range checks (an ``mx.where`` over the whole array and three rank-0
nodes each). Here every shift amount is in range by construction: one MLX operation per operation of the cipher
(``mx.compile`` fuses them where the program is compiled). A jitted ``random.bernoulli`` of ``[256, 784]`` float32
probabilities, evaluated eagerly on the CPU (process time, min of 5): 14.0-16.2 ms -> 6.8-7.2 ms; raw MLX's
compiled draw 0.8 ms.
"""

from __future__ import annotations

from fnarray.core import dtypes
from fnarray.core.prng import PARITY, ROTATIONS, threefry2x32_p
from fnarray.lowering.mlx.common import constant, rule


@rule(threefry2x32_p, shape_free=True)
def _threefry2x32(params, in_avals, out_avals):
    u32 = dtypes.uint32
    parity = constant(PARITY, u32)
    # each rotation's two shift amounts, and the injection counts, as constants made once per program
    rotations = [[(constant(r, u32), constant(32 - r, u32)) for r in group] for group in ROTATIONS]
    counts = [constant(group + 1, u32) for group in range(5)]

    def f(k0, k1, x0, x1):
        # (every operand meets the others in the first round: both results have their common shape, no size read)
        ks = (k0, k1, k0 ^ k1 ^ parity)
        x0, x1 = x0 + ks[0], x1 + ks[1]
        for group in range(5):
            for left, right in rotations[group % 2]:
                x0 = x0 + x1
                x1 = ((x1 << left) | (x1 >> right)) ^ x0
            x0 = x0 + ks[(group + 1) % 3]
            x1 = x1 + ks[(group + 2) % 3] + counts[group]
        return [x0, x1]
    return f
