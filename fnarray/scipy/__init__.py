"""SciPy's names over fnarray (mirrors ``jax.scipy``): ``special``, ``stats``, ``linalg`` and ``signal``.

Every function is a composite of fnarray primitives and the ``fnarray.numpy`` namespace, so it runs,
differentiates (``grad``) and vectorizes (``vmap``) on every backend. SciPy itself is not a dependency
(the tests use it as their oracle).
"""

from fnarray.scipy import linalg, signal, special, stats

__all__ = ["linalg", "signal", "special", "stats"]
