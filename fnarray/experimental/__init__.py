"""``fnarray.experimental``: the names JAX programs import from ``jax.experimental`` (``shard_map``, ``pallas``,
``ode.odeint``)."""
