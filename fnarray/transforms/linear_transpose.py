"""``linear_transpose``: the transpose of a linear function (``jax.linear_transpose``).

For a function linear in its arguments the transpose is its vector-Jacobian product, the same at every point;
``vjp`` taken once at zeros of the example arguments' shapes and dtypes gives it, so only their types are read.
"""

from __future__ import annotations

from fnarray import tree_util
from fnarray.core import dtypes, lax
from fnarray.transforms.ad import vjp

__all__ = ["linear_transpose"]


def linear_transpose(fun, *primals, reduce_axes=()):
    """The transpose of ``fun``, linear in its arguments (``jax.linear_transpose``).

    Args:
      fun: a function of pytrees of float or complex arrays, linear in them (not checked: for an affine ``fun``
        the result is the transpose of its linear part).
      *primals: example arguments, arrays or ``ShapeDtypeStruct``s; only their shapes and dtypes are read.
      reduce_axes: JAX's removed argument; must be empty.

    Returns:
      ``transposed(out_cotangent)``: for a cotangent with ``fun``'s output structure, shapes and dtypes, a tuple
      with one cotangent per primal, of that primal's structure, shape and dtype.

    Raises:
      TypeError: a primal is not of a float or complex dtype (JAX raises so for a mix of float and integer
        types, and transposes integer -> integer functions, which this does not).
      ValueError: ``reduce_axes`` is given.
    """
    if reduce_axes:
        raise ValueError(f"linear_transpose: reduce_axes={reduce_axes!r} is not supported (JAX removed it); "
                         "sum the cotangent over those axes yourself")
    leaves, tree = tree_util.tree_flatten(primals)
    types = [(tuple(getattr(x, "shape", ())), dtypes.canonicalize(_dtype_of(x))) for x in leaves]
    for shape, dtype in types:
        if not dtypes.is_inexact(dtype):
            raise TypeError(f"linear_transpose only supports [float or complex] -> [float or complex] functions here, "
                            f"got a primal of dtype {dtype} and shape {shape} (JAX also transposes integer -> "
                            "integer functions); pass float arguments")
    zeros = tree_util.tree_unflatten(tree, [lax.full(shape, 0, dtype) for shape, dtype in types])
    _, f_vjp = vjp(fun, *zeros)

    def transposed(out_cotangent):
        return f_vjp(out_cotangent)

    return transposed


def _dtype_of(x):
    if hasattr(x, "dtype"):
        return x.dtype
    return dtypes.dtype_of_scalar(x)[0]
