"""The jax backend: the IR lowered to ``jax.lax``, one ``jax.jit`` per program (imported lazily)."""
