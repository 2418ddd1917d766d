"""``Array``: the public array type, shared by concrete arrays and tracers.

``Array`` carries the operators and methods; ``ArrayImpl`` (a concrete array
on a device) and ``Tracer`` (a value inside a transformation) derive from it.
The operators come from ``fnarray.numpy``, which fills the ``ops`` hook at
import (docs/design.md: ``core/`` defines hooks that upper layers fill), so that
``core`` imports nothing above it.
"""

from __future__ import annotations

import operator

import numpy as np

from fnarray.core.errors import ConcretizationError, not_initialized

__all__ = ["Array", "set_ops"]


class _Ops:
    """Placeholder until ``fnarray.numpy`` installs the real namespace."""

    def __getattr__(self, name):
        raise not_initialized(f"Array.{name} needs fnarray.numpy, which is not loaded")


ops = _Ops()


def set_ops(namespace) -> None:
    """Install the namespace (``fnarray.numpy``) that implements Array's operators."""
    global ops
    ops = namespace


_OPERAND_TYPES = (bool, int, float, complex, np.generic, np.ndarray, list, tuple)


# The library a foreign array comes from, by its type's top-level module (jaxlib's arrays are JAX's).
_LIBRARY_NAMES = {"jaxlib": "jax", "jax": "jax", "torch": "torch", "mlx": "mlx", "tensorflow": "tensorflow",
                  "cupy": "cupy", "dask": "dask"}


def foreign_operand(other, name):
    """``NotImplemented`` for an operand that is no array of any library (Python then tries the other side and
    ``x == None`` is False, as in JAX); a ``TypeError`` naming both libraries for another library's array
    (``__array__`` or ``__dlpack__``), whose own reflected operator gave up already or would."""
    t = type(other)
    if not (hasattr(t, "__array__") or hasattr(t, "__dlpack__")):
        return NotImplemented
    module = t.__module__.split(".")[0]
    lib = _LIBRARY_NAMES.get(module, module)
    raise TypeError(f"{name}: an fnarray array and a {lib} array ({t.__module__}.{t.__qualname__}) do not mix; "
                    f"convert the {lib} array first with fnarray.numpy.asarray(x) (a copy through NumPy; "
                    "fnarray.device_put(x, device) to place it), or the fnarray array to "
                    f"{lib} with numpy.asarray(a) or DLPack")


def _binop(name, reflected=False):
    # An operand that is no array and no number (None, a string, another library's object) gives
    # NotImplemented, so Python tries the other side and `x == None` is False, as in JAX.
    if reflected:
        def method(self, other):
            if not isinstance(other, _OPERANDS):
                return foreign_operand(other, name)
            return getattr(ops, name)(other, self)
    else:
        def method(self, other):
            if not isinstance(other, _OPERANDS):
                return foreign_operand(other, name)
            return getattr(ops, name)(self, other)
    method.__name__ = f"__{'r' if reflected else ''}{name}__"
    return method


def _forward(name, ns_name=None):
    ns_name = ns_name or name

    def method(self, *args, **kwargs):
        return getattr(ops, ns_name)(self, *args, **kwargs)

    method.__name__ = name
    method.__doc__ = f"Same as ``fnarray.numpy.{ns_name}(self, ...)``."
    return method


class Array:
    """An immutable n-dimensional array (the base of concrete arrays and tracers).

    Subclasses provide ``aval`` (a ``ShapedArray``). Indexing and operators
    follow NumPy with fnarray's semantics (docs/design.md, "Semantics"); updates
    are functional: ``x.at[i].set(v)`` returns a new array.
    """

    __slots__ = ()
    __array_priority__ = 100

    # Properties --------------------------------------------------------------
    # (read through C getters, no Python frame: the namespace functions read them of every operand, of tracers
    # too, ~15 reads a traced decode step; issue 28)
    shape = property(operator.attrgetter("aval.shape"), doc="The shape, a tuple of ints.")
    dtype = property(operator.attrgetter("aval.dtype"), doc="The dtype, a ``numpy.dtype``.")
    weak_type = property(operator.attrgetter("aval.weak_type"),
                         doc="Whether the value is weakly typed (made from a Python scalar).")

    @property
    def ndim(self) -> int:
        return len(self.aval.shape)

    @property
    def size(self) -> int:
        return self.aval.size

    @property
    def T(self):
        return ops.transpose(self)  # (one array: eager_jit's shortest key)

    @property
    def mT(self):
        return ops.matrix_transpose(self)

    @property
    def at(self):
        """Functional updates: ``x.at[idx].set(v)``, ``.add``, ``.multiply``, ``.min``, ``.max``, ``.get``."""
        return ops._IndexUpdateHelper(self)

    @property
    def real(self):
        return ops.real(self)

    @property
    def imag(self):
        return ops.imag(self)

    def __len__(self):
        if not self.shape:
            raise TypeError("len() of a 0-d array")
        return self.shape[0]

    def __iter__(self):
        if not self.shape:
            raise TypeError("iteration over a 0-d array")
        return (self[i] for i in range(self.shape[0]))

    __hash__ = None

    def __setitem__(self, idx, value):
        raise TypeError(
            "fnarray arrays are immutable: item assignment x[idx] = v is not supported. "
            "Use x = x.at[idx].set(v) (or .add, .multiply, .min, .max) to get an updated copy.")

    def __getitem__(self, idx):
        return ops._getitem(self, idx)

    def __array_namespace__(self, *, api_version=None):
        if api_version not in (None, "2021.12", "2022.12", "2023.12", "2024.12"):
            raise ValueError(f"fnarray.numpy implements array API 2024.12, not {api_version!r}")
        return ops

    # Conversions that need a concrete value -----------------------------------
    def _concrete(self, what):
        raise ConcretizationError(f"{what} needs a concrete value")

    def __bool__(self):
        return bool(self._concrete("bool()"))

    def __int__(self):
        return int(self._concrete("int()"))

    def __float__(self):
        return float(self._concrete("float()"))

    def __complex__(self):
        return complex(self._concrete("complex()"))

    def __index__(self):
        from fnarray.core import dtypes
        if not dtypes.is_int(self.dtype):
            raise TypeError(f"only integer arrays can be used as an index, got {self.dtype.name}")
        return int(self._concrete("__index__"))

    def item(self, *args):
        """The value as a Python scalar (``numpy.ndarray.item``)."""
        return self._concrete(".item()").item(*args)

    def tolist(self):
        """The value as nested Python lists (``numpy.ndarray.tolist``)."""
        return self._concrete(".tolist()").tolist()

    # Operators ------------------------------------------------------------------
    __add__, __radd__ = _binop("add"), _binop("add", True)
    __sub__, __rsub__ = _binop("subtract"), _binop("subtract", True)
    __mul__, __rmul__ = _binop("multiply"), _binop("multiply", True)
    __truediv__, __rtruediv__ = _binop("divide"), _binop("divide", True)
    __floordiv__, __rfloordiv__ = _binop("floor_divide"), _binop("floor_divide", True)
    __mod__, __rmod__ = _binop("remainder"), _binop("remainder", True)
    __pow__, __rpow__ = _binop("pow"), _binop("pow", True)
    __matmul__, __rmatmul__ = _binop("matmul"), _binop("matmul", True)
    __and__, __rand__ = _binop("bitwise_and"), _binop("bitwise_and", True)
    __or__, __ror__ = _binop("bitwise_or"), _binop("bitwise_or", True)
    __xor__, __rxor__ = _binop("bitwise_xor"), _binop("bitwise_xor", True)
    __lshift__, __rlshift__ = _binop("bitwise_left_shift"), _binop("bitwise_left_shift", True)
    __rshift__, __rrshift__ = _binop("bitwise_right_shift"), _binop("bitwise_right_shift", True)
    __eq__, __ne__ = _binop("equal"), _binop("not_equal")
    __lt__, __le__ = _binop("less"), _binop("less_equal")
    __gt__, __ge__ = _binop("greater"), _binop("greater_equal")

    def __divmod__(self, other):
        return ops.floor_divide(self, other), ops.remainder(self, other)

    def __rdivmod__(self, other):
        return ops.floor_divide(other, self), ops.remainder(other, self)

    def __neg__(self):
        return ops.negative(self)

    def __pos__(self):
        return ops.positive(self)

    def __abs__(self):
        return ops.abs(self)

    def __invert__(self):
        return ops.bitwise_invert(self)

    # Methods (as jax.Array's) ------------------------------------------------------
    astype = _forward("astype")
    reshape = _forward("_reshape_method")
    transpose = _forward("_transpose_method")
    sum = _forward("sum")
    prod = _forward("prod")
    mean = _forward("mean")
    var = _forward("var")
    std = _forward("std")
    max = _forward("max")
    min = _forward("min")
    argmax = _forward("argmax")
    argmin = _forward("argmin")
    any = _forward("any")
    all = _forward("all")
    cumsum = _forward("cumsum")
    cumprod = _forward("cumprod")
    clip = _forward("clip")
    round = _forward("round")
    conj = _forward("conj")
    dot = _forward("dot")
    flatten = _forward("ravel")
    ravel = _forward("ravel")
    squeeze = _forward("squeeze")
    swapaxes = _forward("swapaxes")
    take = _forward("take")
    sort = _forward("sort")
    argsort = _forward("argsort")
    repeat = _forward("repeat")
    nonzero = _forward("nonzero")
    copy = _forward("_copy")
    view = _forward("_view")
    diagonal = _forward("diagonal")
    trace = _forward("trace")
    conjugate = _forward("conjugate")
    ptp = _forward("ptp")
    searchsorted = _forward("searchsorted")
    argpartition = _forward("argpartition")
    compress = _forward("compress")
    # mlx.core.array's methods (MLX programs call ``x.sqrt()``, ``x.square()``, ``x.logsumexp(axis)``)
    abs = _forward("abs")
    sqrt = _forward("sqrt")
    square = _forward("square")
    reciprocal = _forward("reciprocal")
    exp = _forward("exp")
    log = _forward("log")
    log1p = _forward("log1p")
    log2 = _forward("log2")
    log10 = _forward("log10")
    sin = _forward("sin")
    cos = _forward("cos")
    logsumexp = _forward("logsumexp")
    moveaxis = _forward("moveaxis")
    split = _forward("split")
    diag = _forward("diag")

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    rsqrt = _forward("rsqrt", "_rsqrt_method")
    cummax = _forward("cummax", "_cummax_method")
    cummin = _forward("cummin", "_cummin_method")
    logcumsumexp = _forward("logcumsumexp", "_logcumsumexp_method")

    def __round__(self, ndigits=None):
        if ndigits is None:
            return round(self.item())
        return ops.round(self, ndigits)


# What Array's binary operators accept (others give NotImplemented): one tuple, not one made per call.
_OPERANDS = (Array,) + _OPERAND_TYPES
