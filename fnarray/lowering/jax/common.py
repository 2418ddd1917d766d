"""What the jax backend's rule modules share: the JAX import, the rule table and the sub-program interpreter.

``RULES`` maps a primitive to ``fn(*jax_arrays, **params)``; each family module (``elementwise``, ``structural``,
``reductions``, ``dot``, ``control_flow``, ``prng``, ``conv``, ``windows``, ``linalg``, ``fft``, ``quantized``,
``spmd``) registers its primitives' rules here when ``backend`` imports it.
"""

from __future__ import annotations

import threading

import numpy as np

from fnarray.core.errors import BackendUnavailable
from fnarray.core.ir import Literal, Program


try:
    import jax
    import jax.numpy as jnp
    from jax import lax
except ImportError as e:  # pragma: no cover - exercised where jax is missing
    raise BackendUnavailable("the jax backend needs JAX: not installed (to fix: pip install 'fnarray[jax]')") from e

__all__ = ["RULES", "rule", "direct", "interpret", "manual", "jax", "jnp", "lax"]

RULES: dict = {}

#: per thread, how many ``shard_map`` bodies are being lowered around the current rule (lowering/jax/spmd.py)
manual = threading.local()


def rule(prim):
    """Decorator: register the function as ``prim``'s rule."""
    def deco(fn):
        RULES[prim] = fn
        return fn
    return deco


def direct(prim, fn):
    """Register ``fn(*arrays)`` as ``prim``'s rule, dropping the equation's params."""
    RULES[prim] = lambda *args, **params: fn(*args)


def interpret(prog: Program, args):
    """Run sub-program ``prog`` on traced JAX values ``args`` with this table; returns its outputs."""
    env = {}
    for v, x in zip(list(prog.constvars) + list(prog.invars), args, strict=True):
        env[v] = x

    def read(a):
        return np.asarray(a.val) if isinstance(a, Literal) else env[a]

    for e in prog.eqns:
        outs = RULES[e.primitive](*[read(a) for a in e.inputs], **e.params)
        if not e.primitive.multiple_results:
            outs = [outs]
        for v, o in zip(e.outputs, outs, strict=True):
            env[v] = o
    return [read(a) for a in prog.outvars]
