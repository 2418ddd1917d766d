"""SciPy's names over fnarray (mirrors ``jax.scipy``): ``special``, ``stats``, ``linalg``, ``signal`` and ``optimize``.

Every function is a composite of fnarray primitives and the ``fnarray.numpy`` namespace, so it runs,
differentiates (``grad``) and vectorizes (``vmap``) on every backend. SciPy itself is not a dependency
(the tests use it as their oracle).
"""

from fnarray.scipy import linalg, optimize, signal, special, stats

__all__ = ["linalg", "optimize", "signal", "special", "stats"]
