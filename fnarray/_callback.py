"""``fnarray.pure_callback``: a Python function with array results, called on the host from inside ``jit``,
``vmap`` and control flow (``jax.pure_callback``).

One ``pure_callback`` equation (``core/primitives.py``), held as an effect as ``debug_callback`` is (``debug.py``):
dead-code elimination keeps it, common-subexpression elimination never merges two calls, nothing folds it. The
numpy backend calls the function in its generated code, the jax backend through ``jax.pure_callback``, and mlx,
opencl and webgpu cut the program at the call and run it on numpy:0 (``Backend.host_callbacks``), as for
``debug_callback``. The function receives NumPy arrays and returns array-likes, checked against
``result_shape_dtypes`` leaf by leaf.
"""

from __future__ import annotations

import numpy as np

from fnarray import tree_util
from fnarray.core import dtypes, tracing
from fnarray.core import primitives as P
from fnarray.core.errors import check_callable
from fnarray.core.shaped import ShapedArray
from fnarray.debug import _HostCallback, _split_args

__all__ = ["pure_callback", "io_callback"]

VMAP_METHODS = ("sequential", "sequential_unrolled", "expand_dims", "broadcast_all", "legacy_vectorized", None)


class _PureCallback(_HostCallback):
    """The hashable ``callback`` param of a ``pure_callback`` equation: ``_HostCallback`` whose calls return the
    function's results, checked against the equation's output avals."""

    __slots__ = ()
    name = "pure_callback"
    ordered = False

    def __eq__(self, other):
        return type(other) is type(self) and self._key == other._key

    def __hash__(self):
        return hash(self._key)

    def results(self, in_tree, out_tree, arrays, out_avals, nbatch=0):
        """The function's flat results on NumPy ``arrays``; ``nbatch`` leading axes are iterated (a sequential
        ``vmap``), C order, and the results stacked along them."""
        if nbatch == 0:
            return self._checked(self._call(in_tree, arrays), out_tree, out_avals)
        batch = out_avals[0].shape[:nbatch] if out_avals else arrays[0].shape[:nbatch] if arrays else ()
        inner = [ShapedArray(a.shape[nbatch:], a.dtype) for a in out_avals]
        per = [self._checked(self._call(in_tree, [a[idx] for a in arrays]), out_tree, inner)
               for idx in np.ndindex(*batch)]
        return [np.stack([p[k] for p in per]).reshape(a.shape) if per else np.zeros(a.shape, a.dtype)
                for k, a in enumerate(out_avals)]

    def _checked(self, out, out_tree, out_avals):
        leaves, tree = tree_util.tree_flatten(out)
        if tree != out_tree:
            raise RuntimeError(f"{self.name}: {self!r} returned a result of structure {tree}, but "
                               f"result_shape_dtypes has structure {out_tree}; return the structure declared")
        res = []
        for k, (leaf, aval) in enumerate(zip(leaves, out_avals, strict=True)):
            v = np.asarray(leaf)
            if v.dtype != aval.dtype and dtypes.canonicalize(v.dtype) == aval.dtype:
                v = v.astype(aval.dtype)  # float64 (a Python float) for float32 while x64 is off: JAX's canonical cast
            if v.shape != tuple(aval.shape) or v.dtype != aval.dtype:
                raise RuntimeError(f"{self.name}: {self!r} returned {v.dtype.name}{list(v.shape)} for result {k}, "
                                   f"expected {aval.dtype.name}{list(aval.shape)} (result_shape_dtypes); "
                                   "convert the result (np.asarray(r, dtype)) in the callback")
            res.append(v)
        return res


def _result_aval(leaf):
    if not (hasattr(leaf, "shape") and hasattr(leaf, "dtype")):
        raise TypeError(f"pure_callback: result_shape_dtypes must be a pytree of objects with .shape and .dtype "
                        f"(fnarray.ShapeDtypeStruct, an array), got {type(leaf).__name__}")
    d = dtypes.as_dtype(leaf.dtype)
    if dtypes.canonicalize(d) != d:
        raise ValueError(f"pure_callback: result_shape_dtypes cannot hold {d.name} while enable_x64 is off "
                         f"(as JAX); declare {dtypes.canonicalize(d).name}, or turn fnarray.config.enable_x64 on")
    return ShapedArray(tuple(int(n) for n in leaf.shape), d)


def pure_callback(callback, result_shape_dtypes, *args, sharding=None, vmap_method=None, **kwargs):
    """Call ``callback(*args, **kwargs)`` on the host and return its results, from inside ``jit``, ``vmap``,
    ``scan``/``while_loop`` bodies as well as eagerly (``jax.pure_callback``).

    The function is taken to be pure: called with equal values it returns equal results. fnarray keeps every
    call (an effect, as ``debug.callback``: never merged with an equal one, never removed when its results go
    unused, which JAX allows itself to do), in program order.

    Args:
      callback: a Python callable. It receives NumPy arrays where ``args``/``kwargs`` (pytrees) hold arrays (JAX
        passes CPU ``jax.Array``s), the other leaves unchanged, and returns a pytree of array-likes of the
        structure, shapes and dtypes of ``result_shape_dtypes``.
      result_shape_dtypes: a pytree of objects with ``.shape`` and ``.dtype`` (``fnarray.ShapeDtypeStruct``).
      *args, **kwargs: pytrees of arrays, scalars and other (hashable) values.
      sharding: JAX's; accepted, unused (fnarray calls the function once, on the host).
      vmap_method: how ``vmap`` maps the call (JAX's): ``"sequential"`` (or ``"sequential_unrolled"``) calls the
        function once per example, in index order, and stacks the results; ``"expand_dims"`` calls it once with
        the batch as a new leading axis of the batched arguments and a size-1 axis on the others;
        ``"broadcast_all"`` as ``expand_dims`` with every argument broadcast to the batch; ``"legacy_vectorized"``
        as ``expand_dims`` without the size-1 axes. The results must then carry the batch axis first. ``None``:
        ``vmap`` raises ``NotImplementedError`` (as JAX).

    Returns:
      A pytree of arrays of ``result_shape_dtypes``' structure, shapes and dtypes.

    Raises:
      TypeError: ``callback`` is not callable, or a result leaf has no shape/dtype.
      ValueError: an unknown ``vmap_method``; a 64-bit result dtype while ``enable_x64`` is off (as JAX); under
        ``grad``/``jvp`` (as JAX: wrap the call in ``fnarray.custom_jvp`` or ``custom_vjp`` to give it
        derivatives).
      NotImplementedError: under ``vmap`` without ``vmap_method``.
      RuntimeError: the function returned another structure, shape or dtype than declared (on jax:0 inside
        JAX's ``JaxRuntimeError``). A 64-bit result where ``enable_x64`` is off and the declared dtype is its
        32-bit partner (a Python float, NumPy's float64 of mixed operands) is cast, as JAX does.

    On jax:0 the call is ``jax.pure_callback``, which XLA may drop where its results go unused (JAX's rule for
    pure callbacks); the other backends keep it.
    """
    check_callable(callback, "fnarray.pure_callback", "callback (its first argument)")
    if vmap_method not in VMAP_METHODS:
        raise ValueError(f"pure_callback: vmap_method must be one of {list(VMAP_METHODS)}, got {vmap_method!r}")
    del sharding
    return _host_call(_PureCallback, callback, result_shape_dtypes, args, kwargs, vmap_method)


def _host_call(kind, callback, result_shape_dtypes, args, kwargs, vmap_method):
    """Call now (eagerly) or stage one ``pure_callback`` equation whose ``callback`` param is ``kind``'s."""
    out_leaves, out_tree = tree_util.tree_flatten(result_shape_dtypes)
    result_avals = tuple(_result_aval(leaf) for leaf in out_leaves)
    in_tree, static, dyn = _split_args(args, kwargs)
    cb = kind(callback, static)
    import fnarray.numpy as fnp
    dyn = [x if isinstance(x, tracing.Tracer) else fnp.asarray(x) for x in dyn]  # (Python floats: float32)
    if tracing.current_dynamic().level == 0 and not any(isinstance(x, tracing.Tracer) for x in dyn):
        # eager: call now; the results become arrays of the default device
        outs = cb.results(in_tree, out_tree, [np.asarray(x) for x in dyn], result_avals)
        return tree_util.tree_unflatten(out_tree, [fnp.asarray(o) for o in outs])
    outs = P.pure_callback.bind(*dyn, callback=cb, in_tree=in_tree, out_tree=out_tree, result_avals=result_avals,
                                vmap_method=vmap_method)
    return tree_util.tree_unflatten(out_tree, outs)


class _IoCallback(_PureCallback):
    """The ``callback`` param of an ``io_callback``'s equation: never removed (``pure_callback``'s are when their
    results go unused on jax:0); ``ordered`` ones refuse ``vmap``."""

    __slots__ = ()
    name = "io_callback"


class _OrderedIoCallback(_IoCallback):
    __slots__ = ()
    ordered = True


def io_callback(callback, result_shape_dtypes, *args, sharding=None, ordered=False, **kwargs):
    """Call an impure ``callback(*args, **kwargs)`` on the host and return its results, from inside ``jit``,
    ``vmap``, ``scan``/``while_loop`` bodies as well as eagerly (``jax.experimental.io_callback``).

    Every call is made, in program order (fnarray runs one host call at a time, so ``ordered`` only changes what
    ``vmap`` accepts). Arguments, results and checks are ``fnarray.pure_callback``'s.

    Args:
      callback: a Python callable; it receives NumPy arrays and returns a pytree of array-likes of the structure,
        shapes and dtypes of ``result_shape_dtypes`` (``None`` for none).
      result_shape_dtypes: a pytree of objects with ``.shape`` and ``.dtype``, or ``None``.
      *args, **kwargs: pytrees of arrays, scalars and other (hashable) values.
      sharding: JAX's; accepted, unused.
      ordered: JAX's promise that calls run in program order; ``vmap`` of an ordered call raises.

    Returns:
      A pytree of arrays of ``result_shape_dtypes``' structure.

    Raises:
      ValueError: under ``vmap`` with ``ordered=True``, or under ``grad``/``jvp`` of a differentiated argument (as
        JAX); a 64-bit result dtype while ``enable_x64`` is off.
      TypeError, RuntimeError: as ``fnarray.pure_callback``.

    Under ``vmap`` an unordered call runs once per example, in index order (JAX's ``sequential``).
    """
    check_callable(callback, "fnarray.experimental.io_callback", "callback (its first argument)")
    del sharding
    return _host_call(_OrderedIoCallback if ordered else _IoCallback, callback, result_shape_dtypes, args, kwargs,
                 "sequential")
