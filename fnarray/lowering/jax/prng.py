"""The jax backend's rule for ``threefry2x32``: JAX's own primitive."""

from __future__ import annotations

import jax.extend.random as jax_random_ext

from fnarray.core.prng import threefry2x32_p
from fnarray.lowering.jax.common import jnp, rule


@rule(threefry2x32_p)
def _threefry2x32(k0, k1, x0, x1):
    # JAX's own primitive: a rolled loop on CPUs (which XLA's fusion cannot copy into every reader of the
    # random bits), its own kernel on GPUs.
    shape = jnp.broadcast_shapes(*(jnp.shape(a) for a in (k0, k1, x0, x1)))
    ops = [jnp.broadcast_to(jnp.asarray(a, jnp.uint32), shape) for a in (k0, k1, x0, x1)]
    return list(jax_random_ext.threefry2x32_p.bind(*ops))
