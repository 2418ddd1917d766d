"""Programs derived from a sub-program by a transformation rule (a ``call``'s JVP, partial evaluation,
transpose and batched form), made once per program, arguments and configuration.

An eager ``grad``, ``value_and_grad`` or ``vmap`` of a function that calls a ``jit``-ted one meets the jitted
program as a ``call`` equation at every call, and its rules derive new programs from it. Made anew, each derived
program is a new object, and an eager ``call`` compiles per program object: every call of ``vg(nu, u0)``
compiled its forward and backward programs again (a Burgers solver's ``lax.scan``: two XLA compiles, ~2.4 s, a
call on jax:0, where JAX reuses its own). Kept on the program they come from (``Program.derived``), the same
arguments give the same objects, whose executables the eager cache already holds (JAX memoizes its
``jvp_jaxpr``/``partial_eval_jaxpr_nounits``/transposes by jaxpr the same way).
"""

from __future__ import annotations

from fnarray.core.config import config

__all__ = ["derived"]


def derived(program, kind: str, args: tuple, make):
    """``make()`` for ``program``, ``kind`` and the hashable ``args`` (what else the derivation reads), kept on
    ``program`` and made again when the configuration changed since (``config.generation``: a rule may read a
    setting)."""
    gen = config.generation
    entry = program.derived((kind, args), lambda: [gen, make()])
    if entry[0] != gen:
        entry[:] = [gen, make()]
    return entry[1]
