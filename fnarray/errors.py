"""JAX's error classes under their ``jax.errors`` names, so that ``except jax.errors.ConcretizationTypeError:``
keeps working after ``import fnarray as jax``.

Each name is fnarray's own class (``fnarray.core.errors``), raised where JAX raises its namesake:
``ConcretizationTypeError`` is ``ConcretizationError`` (a traced value where Python needs a concrete one), with
the subclasses ``TracerBoolConversionError`` (``bool()``: ``if x < 3:`` under ``jit``),
``TracerIntegerConversionError`` (``int()``, ``__index__``), ``TracerArrayConversionError`` (``numpy.asarray``) and
``NonConcreteBooleanIndexError`` (a traced boolean mask as an index; also an ``IndexError``);
``UnexpectedTracerError`` is ``TracerLeakError`` (a tracer used after its transformation ended). Every one is
also a ``TypeError`` (``NonConcreteBooleanIndexError`` also an ``IndexError``), as JAX's, and the leak also a
``RuntimeError`` (its base before it matched JAX's).
"""

from fnarray.core.errors import ConcretizationError as ConcretizationTypeError
from fnarray.core.errors import (NonConcreteBooleanIndexError, TracerArrayConversionError, TracerBoolConversionError,
                                 TracerIntegerConversionError)
from fnarray.core.errors import TracerLeakError as UnexpectedTracerError

__all__ = ["ConcretizationTypeError", "TracerBoolConversionError", "TracerIntegerConversionError",
           "TracerArrayConversionError", "NonConcreteBooleanIndexError", "UnexpectedTracerError"]
