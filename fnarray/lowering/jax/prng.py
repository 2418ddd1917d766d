"""The jax backend's rule for ``threefry2x32``: JAX's own primitive."""

from __future__ import annotations

import jax.extend.random as jax_random_ext

from fnarray.core.prng import threefry2x32_p
from fnarray.lowering.jax.common import jnp, rule


@rule(threefry2x32_p)
def _threefry2x32(k0, k1, x0, x1):
    # JAX's own primitive: a rolled loop on CPUs (which XLA's fusion cannot copy into every reader of the
    # random bits), its own kernel on GPUs.
    # Scalar keys stay scalars, as jax.random passes them: broadcast, they are carried through the rolled loop as
    # two more arrays of the counters' shape (the VAE grid's executable was 10% slower, copying them in and out).
    shape = jnp.broadcast_shapes(*(jnp.shape(a) for a in (k0, k1, x0, x1)))
    scalar_keys = jnp.ndim(k0) == jnp.ndim(k1) == 0
    ops = [jnp.asarray(a, jnp.uint32) if scalar_keys and i < 2 else jnp.broadcast_to(jnp.asarray(a, jnp.uint32), shape)
           for i, a in enumerate((k0, k1, x0, x1))]
    return list(jax_random_ext.threefry2x32_p.bind(*ops))
