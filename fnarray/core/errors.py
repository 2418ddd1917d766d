"""The fnarray error hierarchy (docs/design.md, "Errors").

Every error is also the matching built-in exception, so ``except ValueError``
keeps working for users who do not know fnarray's classes.
"""

__all__ = [
    "FnArrayError", "ShapeError", "AxisError", "ContractionShapeError", "DTypeError", "ConcretizationError",
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


class ConcretizationError(FnArrayError, TypeError):
    """A traced value was used where Python needs a concrete one (``if x > 0:``)."""


class UnsupportedOnDevice(FnArrayError, NotImplementedError):
    """A primitive or dtype that the target device cannot run, with fallback off."""


class BackendUnavailable(FnArrayError, RuntimeError):
    """A backend whose library or driver is missing; the message has the install hint."""


class TracerLeakError(FnArrayError, RuntimeError):
    """A tracer was used after the transformation that made it had finished."""


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
