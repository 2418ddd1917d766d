"""The fnarray error hierarchy (docs/design.md, "Errors").

Every error is also the matching built-in exception, so ``except ValueError``
keeps working for users who do not know fnarray's classes.
"""

__all__ = [
    "FnArrayError", "ShapeError", "AxisError", "ContractionShapeError", "DTypeError", "TypePromotionError",
    "ConcretizationError", "TracerBoolConversionError", "TracerIntegerConversionError", "TracerArrayConversionError",
    "NonConcreteBooleanIndexError",
    "UnsupportedOnDevice", "BackendUnavailable", "TracerLeakError", "ResourceExhaustedError",
    "PyTreeError", "ExportError", "LinAlgError", "FallbackWarning",
]

import numpy as _np


class FnArrayError(Exception):
    """Base class of every error fnarray raises on purpose."""


class ShapeError(FnArrayError, ValueError):
    """Shapes that do not fit together (broadcasting, contraction, reshape)."""


class AxisError(ShapeError, IndexError):
    """An axis outside an array's rank; also an ``IndexError``, as NumPy's ``AxisError``."""


class ContractionShapeError(ShapeError, TypeError):
    """Contracting (or batch) dimensions of a product that differ (``dot``, ``matmul``, ``dot_general``).

    A ``ShapeError`` (so a ``ValueError``, as NumPy raises) and also a ``TypeError``, which is
    what JAX raises there: ``except TypeError`` code written for JAX keeps working.
    """


class DTypeError(FnArrayError, TypeError):
    """A dtype that an operation does not accept."""


class TypePromotionError(DTypeError, ValueError):
    """Two dtypes with no implicit promotion (as ``jax.dtypes.TypePromotionError``, a ``ValueError``; also a
    ``DTypeError``): 8-bit floats and 4-bit integers meet only themselves, bool and (float8) the integers."""


class ConcretizationError(FnArrayError, TypeError):
    """A traced value was used where Python needs a concrete one (``if x > 0:``)."""


class TracerBoolConversionError(ConcretizationError):
    """``bool()`` of a traced value (``if x < 3:`` under ``jit``): JAX's ``jax.errors.TracerBoolConversionError``."""


class TracerIntegerConversionError(ConcretizationError):
    """``int()`` or ``__index__`` of a traced value (``range(x)``, ``lst[x]`` under ``jit``): JAX's
    ``jax.errors.TracerIntegerConversionError``."""


class TracerArrayConversionError(ConcretizationError):
    """``numpy.asarray`` of a traced value (a NumPy function called on it under ``jit``): JAX's
    ``jax.errors.TracerArrayConversionError``."""


class NonConcreteBooleanIndexError(ConcretizationError, IndexError):
    """A boolean mask of traced values used as an index (``x[x > 0]`` under ``jit``: the result's size is not known
    while tracing): JAX's ``jax.errors.NonConcreteBooleanIndexError``, also an ``IndexError`` as JAX's."""


class UnsupportedOnDevice(FnArrayError, NotImplementedError):
    """A primitive or dtype that the target device cannot run, with fallback off."""


class BackendUnavailable(FnArrayError, RuntimeError):
    """A backend whose library or driver is missing; the message has the install hint."""


class TracerLeakError(FnArrayError, RuntimeError, TypeError):
    """A tracer was used after the transformation that made it had finished: JAX's
    ``jax.errors.UnexpectedTracerError``, a ``TypeError`` as JAX's (and a ``RuntimeError``, as it was before)."""


class ResourceExhaustedError(FnArrayError, MemoryError):
    """An array (or a program's results) larger than its device can hold; names shape, dtype, bytes, device."""


class PyTreeError(FnArrayError, ValueError):
    """Pytrees whose structures (or leaf counts) do not match where they must."""


class ExportError(FnArrayError, OSError):
    """An export destination that cannot be written (a file where a folder is needed, no permission)."""


class LinAlgError(FnArrayError, _np.linalg.LinAlgError):
    """A linear-algebra function that cannot give a result (a singular matrix for ``solve``/``inv``), raised
    eagerly as NumPy does; also ``numpy.linalg.LinAlgError`` (a ``ValueError``). Under ``jit`` and the other
    transformations nothing is checked: the result has inf/NaN (``fnarray.numpy.linalg`` says which)."""


class FallbackWarning(UserWarning):
    """Part of a program runs on the numpy backend because its device cannot run it."""


def type_name(x) -> str:
    """``x``'s type for an error: the bare name of a builtin (``str``), else module and name
    (``jaxlib._jax.ArrayImpl``), so another library's array is not taken for fnarray's own class of that name."""
    t = type(x)
    return t.__qualname__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"


def not_initialized(what: str) -> RuntimeError:
    """The error for ``what`` used before ``fnarray/__init__.py`` ran. The usual cause is a folder or file named
    ``fnarray`` in the working directory: Python imports it as ``fnarray`` (an empty namespace package for a
    folder without ``__init__.py``) while the subpackages still come from the installed package."""
    import os
    import sys
    ours = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    top = sys.modules.get("fnarray")
    where = getattr(top, "__file__", None) or next(iter(getattr(top, "__path__", None) or []), "")
    if top is not None and os.path.abspath(os.path.dirname(where) if where.endswith(".py") else where) != ours:
        return RuntimeError(
            f"{what}: the module Python imported as 'fnarray' is {where}, not the fnarray package at {ours}. A "
            "folder or file named 'fnarray' in the working directory (or earlier on sys.path) shadows the "
            "package; rename it, or run Python from another directory")
    return RuntimeError(f"{what}: the fnarray package was not initialized; import fnarray (the package) before "
                        "using its submodules")


def check_callable(fun, who: str, role: str = "its first argument (the function to transform)", hint: str = ""):
    """``fun``, or the ``TypeError`` of ``who`` (``"jit"``, ``"custom_vjp.defvjp"``...) given something that is not a
    function as ``role`` (JAX: "Expected a callable value"; ``role`` may say what the function takes, and ``hint``,
    appended after what was given, what to do); arguments given in the wrong order are the usual cause."""
    if not callable(fun):
        shown = repr(fun)
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        raise TypeError(f"{who} needs a callable as {role}, got {type(fun).__name__} {shown}{hint}")
    return fun


def int_tuple(value, who: str, what: str, str_hint: str = "") -> tuple:
    """``value`` (an int or a sequence of ints: ``argnums``, ``static_argnums``, ``donate_argnums``) as a tuple of
    Python ints, or a ``TypeError`` naming ``who``'s ``what`` and what was given (with ``str_hint`` appended where
    an item is a string: the caller's advice for names given as positions)."""
    items = tuple(value) if isinstance(value, (tuple, list, range)) else (value,)
    if all(hasattr(type(i), "__index__") and not isinstance(i, bool) for i in items):
        return tuple(i.__index__() for i in items)
    hint = str_hint if any(isinstance(i, str) for i in items) else ""
    raise TypeError(f"{who}: {what} must be an int or a sequence of ints (positions of arguments), got "
                    f"{value!r}{hint}")
