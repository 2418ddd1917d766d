"""``linear_transpose``: the transpose of a linear function (``jax.linear_transpose``).

For a function linear in its arguments the transpose is its vector-Jacobian product, the same at every point;
``vjp`` taken once at zeros of the example arguments' shapes and dtypes gives it, so only their types are read.
That holds only for linear functions (``sin``'s at zero is the identity), so ``fun`` is first traced at those
types and checked linear, primitive by primitive (``fnarray.transforms.linearity``).
"""

from __future__ import annotations

from fnarray import tree_util
from fnarray.core import dtypes, lax
from fnarray.core.builder import trace_to_program
from fnarray.core.errors import check_callable
from fnarray.core.shaped import ShapedArray
from fnarray.transforms.ad import vjp
from fnarray.transforms.linearity import check_linear

__all__ = ["linear_transpose"]


def linear_transpose(fun, *primals, reduce_axes=()):
    """The transpose of ``fun``, linear in its arguments (``jax.linear_transpose``).

    Args:
      fun: a function of pytrees of float or complex arrays, linear in them (checked; for an affine ``fun``,
        ``x + 1``, the result is the transpose of its linear part, as in JAX).
      *primals: example arguments, arrays or ``ShapeDtypeStruct``s; only their shapes and dtypes are read.
      reduce_axes: JAX's removed argument; must be empty.

    Returns:
      ``transposed(out_cotangent)``: for a cotangent with ``fun``'s output structure, shapes and dtypes, a tuple
      with one cotangent per primal, of that primal's structure, shape and dtype.

    Raises:
      TypeError: a primal is not of a float or complex dtype (JAX raises so for a mix of float and integer
        types, and transposes integer -> integer functions, which this does not).
      ValueError: ``reduce_axes`` is given.
      NotImplementedError: ``fun`` applies a non-linear primitive (``sin``, ``max``, a product of two
        input-dependent values) to a value that depends on its arguments; the message names the primitive.
    """
    check_callable(fun, "linear_transpose")
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
    _check_linear(fun, tree, types)
    zeros = tree_util.tree_unflatten(tree, [lax.full(shape, 0, dtype) for shape, dtype in types])
    _, f_vjp = vjp(fun, *zeros)

    def transposed(out_cotangent):
        return f_vjp(out_cotangent)

    return transposed


def _check_linear(fun, tree, types):
    """Trace ``fun`` at the primals' types and raise unless it is linear in them."""
    def flat(*leaves):
        return tree_util.tree_leaves(fun(*tree_util.tree_unflatten(tree, leaves)))

    program, _ = trace_to_program(flat, [ShapedArray(shape, dtype) for shape, dtype in types],
                                  debug_name="linear_transpose")
    check_linear(program, getattr(fun, "__name__", type(fun).__name__))


def _dtype_of(x):
    if hasattr(x, "dtype"):
        return x.dtype
    return dtypes.dtype_of_scalar(x)[0]
