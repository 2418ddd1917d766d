"""Automatic differentiation: ``linearize``, ``vjp``, ``grad`` and the Jacobians, on the AD layers.

The design follows JAX's ("You only linearize once", Radul et al., 2023, and
the Autodidax tutorial):

- ``jvp`` runs the function under a ``JVPTrace`` whose tracers carry a primal
  and a tangent; each primitive's rule comes from ``ad_tables.primitive_jvps``.
- ``linearize`` runs the JVP under a partial-evaluation trace in which primals
  are *known* (computed now, so Python control flow on them works) and
  tangents are *unknown* (staged into a linear ``Program``); known values that
  the linear program reads become its residuals.
- ``vjp`` transposes that linear program (``backward_pass``) with the rules of
  ``ad_tables.primitive_transposes``; ``grad`` is ``vjp`` with a unit cotangent.

The layers are modules of their own: ``jvp.py`` (forward mode), ``partial_eval.py``,
``transpose.py``, ``custom_derivatives.py`` and ``remat.py``; this module is the public
face and re-exports their public names. Every rule is IR -> IR, so derivatives run on every backend.
"""

from __future__ import annotations

import contextlib
import functools

import numpy as np

from fnarray import tree_util
from fnarray.core import dtypes, lax
from fnarray.core import primitives as P
from fnarray.core.array import Array
from fnarray.core.avals import asarray, get_aval
from fnarray.core.cache import LRUCache
from fnarray.core.config import config
from fnarray.core.errors import DTypeError, ShapeError, check_callable, int_tuple
from fnarray.core.interpreter import eval_program
from fnarray.core.tracing import is_scalar
from fnarray.devices.array_impl import ArrayImpl
from fnarray.devices.lookup import DEFAULT_NOW, current_default, default_device
from fnarray.transforms import ad_rules  # noqa: F401  (fills the rule tables)
from fnarray.transforms import staged_transforms
from fnarray.transforms import fft_rules  # noqa: F401  (the fft primitive's rules)
from fnarray.transforms import quantized_rules  # noqa: F401  (quantized_matmul's rules)
from fnarray.transforms import pallas_rules  # noqa: F401  (pallas_call's rules)
from fnarray.transforms import attention_rules  # noqa: F401  (dot_product_attention's rules)
from fnarray.transforms import ad_windows  # noqa: F401  (the window primitives' rules)
from fnarray.transforms.ad_tables import (
    UndefinedPrimal,
    Zero,
    instantiate_zeros,
    tangent_aval,
    zeros_like_aval,
)
from fnarray.transforms.custom_derivatives import custom_jvp, custom_vjp  # noqa: F401
from fnarray.transforms.jvp import (  # noqa: F401
    JVPTrace,
    _arrays,
    _check_tangent,
    _float0_zeros,
    _jvp_flat,
    _lower_aux,
    _out_tangent,
    _split_aux,
    jvp,
    jvp_program,
)
from fnarray.transforms.partial_eval import PartialEvalTrace, _pe_flat, partial_eval_program  # noqa: F401
from fnarray.transforms.remat import checkpoint, remat  # noqa: F401
from fnarray.transforms.transpose import backward_pass, transpose_program  # noqa: F401

__all__ = ["jvp", "linearize", "vjp", "grad", "value_and_grad", "jacfwd", "jacrev", "hessian",
           "custom_jvp", "custom_vjp", "checkpoint", "remat", "stop_gradient", "jvp_program",
           "partial_eval_program", "transpose_program", "backward_pass", "JVPTrace", "PartialEvalTrace"]


def _linearize_flat(fun_flat, primals):
    """JVP + partial evaluation. Returns (primal outs, linear program, residuals, out tangent is-zero)."""
    t_avals = [tangent_aval(get_aval(p)) for p in primals]
    diff = [a.dtype != dtypes.float0 for a in t_avals]

    def jvp_fun(*xs):
        n = len(primals)
        ps, ts = xs[:n], iter(xs[n:])
        tangents = [next(ts) if d else Zero(a) for a, d in zip(t_avals, diff, strict=True)]
        outs_p, outs_t = _jvp_flat(fun_flat, list(ps), tangents)
        zero_out = [isinstance(t, Zero) for t in outs_t]
        store["zero"] = zero_out
        store["n_out"] = len(outs_p)
        return list(outs_p) + [t for t in outs_t if not isinstance(t, Zero)]

    store: dict = {}
    order = [False] * len(primals) + [True] * sum(diff)
    out_known, known_outs, prog, res = _pe_flat(
        jvp_fun, list(primals), [a for a, d in zip(t_avals, diff, strict=True) if d], order)
    n_out = store["n_out"]
    if not all(out_known[:n_out]):
        raise RuntimeError("linearize: a primal output depends on tangents (internal error)")
    primal_outs = known_outs[:n_out]
    # Tangent outputs that came out known (they do not depend on the inputs' tangents) are zero.
    lin_known = out_known[n_out:]
    return primal_outs, prog, res, store["zero"], lin_known, diff


def linearize(fun, *primals):
    """Evaluate ``fun`` and its linearization at ``primals`` (mirrors ``jax.linearize``).

    The primal computation runs once; ``f_jvp`` replays only the linear part
    (JVP followed by partial evaluation, as in JAX).

    Args:
      fun: a function of arrays (pytrees) returning arrays (pytrees).
      *primals: the point to linearize at.

    Returns:
      ``(fun(*primals), f_jvp)``: ``f_jvp(*tangents)`` takes tangents with the
      primals' structure, shapes and dtypes and returns the output tangents with
      the output's structure, shapes and dtypes (``float0`` for integer outputs).

    Raises:
      TypeError: (from ``f_jvp``) tangents whose structure differs from the primals'.
      ShapeError, DTypeError: (from ``f_jvp``) a tangent whose shape or dtype differs
        from its primal's.
    """
    check_callable(fun, "linearize")
    p_flat, p_tree = tree_util.tree_flatten(primals)
    p_flat = _arrays(p_flat)
    out_tree_store = []

    def flat(*xs):
        out = fun(*tree_util.tree_unflatten(p_tree, list(xs)))
        leaves, tree = tree_util.tree_flatten(out)
        out_tree_store.append(tree)
        return leaves

    outs, prog, res, zero, lin_known, diff = _linearize_flat(flat, p_flat)
    out_tree = out_tree_store[0]

    def pushforward(res, *tangents):
        t_flat, t_tree = tree_util.tree_flatten(tangents)
        if t_tree != p_tree:
            raise TypeError(f"linearize: tangents must have the primals' structure {p_tree}, got {t_tree}")
        t_in = [_check_tangent(p, t, i) for i, (p, t) in enumerate(zip(p_flat, t_flat, strict=True))]
        t_in = [instantiate_zeros(t) for t, d in zip(t_in, diff, strict=True) if d]
        lin_outs = iter(eval_program(prog, [], list(res) + t_in))
        nz = iter(lin_known)
        out_t = []
        for z, p in zip(zero, outs, strict=True):
            if z:
                out_t.append(_out_tangent(Zero(tangent_aval(get_aval(p))), p))
            else:
                k = next(nz)
                out_t.append(_out_tangent(Zero(tangent_aval(get_aval(p))), p) if k else next(lin_outs))
        return tree_util.tree_unflatten(out_tree, out_t)

    # A pytree (as JAX's): its leaves are the residuals, so it can be passed to jit and inspected.
    return tree_util.tree_unflatten(out_tree, outs), tree_util.Partial(pushforward, tuple(res))


def _vjp_flat(fun_flat, primals):
    """``(outs, f_vjp_flat, residuals)``: ``f_vjp_flat(residuals, cts)`` maps output cotangents to input ones."""
    outs, prog, res, zero, lin_known, diff = _linearize_flat(fun_flat, primals)
    ct_avals = [tangent_aval(get_aval(p)) for p in primals]  # avals, not values: f_vjp holds only residuals

    def f_vjp_flat(res, cts):
        lin_cts = []
        nz = iter(lin_known)
        for z, c in zip(zero, cts, strict=True):
            if not z:
                if not next(nz):
                    lin_cts.append(c)
        args = list(res) + [UndefinedPrimal(v.aval) for v in prog.invars[len(res):]]
        cts_in = iter(backward_pass(prog, args, lin_cts))
        out = []
        for a, d in zip(ct_avals, diff, strict=True):
            if d:
                c = next(cts_in)
                out.append(zeros_like_aval(a) if isinstance(c, Zero) else c)
            else:
                out.append(_float0_zeros(a))
        return out

    return outs, f_vjp_flat, tuple(res)


def vjp(fun, *primals, has_aux=False):
    """Reverse-mode derivative (mirrors ``jax.vjp``).

    Args:
      fun: a function of arrays (pytrees) returning arrays (pytrees).
      *primals: the point at which to differentiate.
      has_aux: if true, ``fun`` returns ``(output, aux)``; ``aux`` is returned
        undifferentiated.

    Returns:
      ``(fun(*primals), f_vjp)``, and ``aux`` third with ``has_aux``.
      ``f_vjp(cotangent)`` takes a cotangent with the output's structure and
      shapes and returns a tuple with one cotangent per primal argument, each with
      that argument's structure, shape and dtype (``float0`` zeros for integer and
      bool arguments).

    Raises:
      TypeError: with ``has_aux``, ``fun`` does not return a pair; (from ``f_vjp``)
        the cotangent's structure differs from the output's.
      ShapeError: (from ``f_vjp``) a cotangent's shape differs from its output's.
      DTypeError: (from ``f_vjp``) a floating output's cotangent has another dtype (a Python scalar is taken
        in the output's dtype).
    """
    check_callable(fun, "vjp")
    p_flat, p_tree = tree_util.tree_flatten(primals)
    p_flat = _arrays(p_flat)
    store = []

    def flat(*xs):
        out = fun(*tree_util.tree_unflatten(p_tree, list(xs)))
        aux_leaves = []
        if has_aux:
            out, aux = _split_aux(out)
            # aux leaves are outputs of the linearized function too, so that they leave its traces as values
            # (kept in the store, they were tracers of a finished trace); their cotangents are zero.
            aux_all, aux_tree = tree_util.tree_flatten(aux)
            aux_leaves = [a for a in aux_all if isinstance(a, Array)]
            store.append(("aux", (aux_tree, [None if isinstance(a, Array) else a for a in aux_all])))
        leaves, tree = tree_util.tree_flatten(out)
        store.append(("tree", tree))
        store.append(("n", len(leaves)))
        return leaves + aux_leaves

    all_outs, f_flat, res = _vjp_flat(flat, p_flat)
    info = dict(store)
    out_tree, n = info["tree"], info["n"]
    outs, aux_outs = all_outs[:n], all_outs[n:]
    aux_zeros = [Zero(tangent_aval(get_aval(a))) for a in aux_outs]
    out_avals = [get_aval(o) for o in outs]

    def pullback(res, ct):
        ct_flat, ct_tree = tree_util.tree_flatten(ct)
        if ct_tree != out_tree:
            raise TypeError(f"vjp: the cotangent must have the output's structure {out_tree}, got {ct_tree}")
        return tuple(tree_util.tree_unflatten(p_tree, f_flat(res, _checked_cotangents(ct_flat, out_avals)
                                                             + aux_zeros)))

    # A pytree (as JAX's): its leaves are the residuals, so it can be passed to jit and inspected.
    f_vjp = tree_util.Partial(pullback, res)
    primal_out = tree_util.tree_unflatten(out_tree, outs)
    if has_aux:
        aux_tree, others = info["aux"]
        arrays = iter(aux_outs)
        return primal_out, f_vjp, tree_util.tree_unflatten(aux_tree, [next(arrays) if o is None else o
                                                                      for o in others])
    return primal_out, f_vjp


def _checked_cotangents(cts, out_avals) -> list:
    """``vjp``'s cotangents checked against the outputs' avals: each of the output's shape and, for a floating
    output, of its dtype (as ``jax.vjp``'s pullback; a mismatch otherwise surfaced as a backward rule's
    "mul needs operands of one dtype"). A Python scalar (weak) is taken in the output's dtype; a NumPy array is
    taken as ``asarray`` takes it (float64 is float32 with x64 off), as ``jax.vjp``'s pullback takes it."""
    out = []
    for i, (c, oa) in enumerate(zip(cts, out_avals, strict=True)):
        if type(c) is np.ndarray:
            c = asarray(c)
        ca = get_aval(c)
        if ca.shape != oa.shape:
            raise ShapeError(f"vjp: cotangent {i} has shape {ca.shape}, the output has shape {oa.shape}")
        if ca.dtype != oa.dtype and dtypes.is_inexact(oa.dtype):
            if not (ca.weak_type and dtypes.is_inexact(ca.dtype) or is_scalar(c) and not isinstance(c, bool)):
                raise DTypeError(f"vjp: cotangent {i} has dtype {ca.dtype}, but the output it stands for has dtype "
                                 f"{oa.dtype}; give cotangents their outputs' dtypes (cast with "
                                 f".astype({oa.dtype.name!r}))")
            c = lax.convert_element_type(c, oa.dtype)
        out.append(c)
    return out


def _argnums_tuple(argnums, who):
    if type(argnums) is int:   # (the commonest, ``argnums=0``: no general check)
        return (argnums,)
    return int_tuple(argnums, who, "argnums")


def _several(argnums) -> bool:
    """Whether ``argnums`` names several arguments (a sequence: the derivative is a tuple), as JAX's."""
    return isinstance(argnums, (tuple, list, range))


def _check_diff_args(args, argnums, name, allow_int=False):
    for i in argnums:
        if not -len(args) <= i < len(args):
            raise ValueError(f"{name}: argnums {i} is out of range for {len(args)} positional arguments")
        for leaf in tree_util.tree_leaves(args[i]):
            a = get_aval(leaf)
            if not dtypes.is_inexact(a.dtype) and not allow_int:
                packed = (" (uint32 packed weights of fnarray.quantize are constants of quantized_matmul: to "
                          "differentiate weights, keep them as floats, or differentiate fnarray.dequantize's scales "
                          "and biases)") if a.dtype == dtypes.uint32 else ""
                raise DTypeError(
                    f"{name} requires real- or complex-valued inputs (floating dtypes), but argument {i} has "
                    f"dtype {a.dtype.name}. Integer and boolean inputs have no derivative; convert them with "
                    f".astype(float) or pass allow_int=True to get float0 zeros{packed}.")


def _float0_as_zeros(primals, tangents):
    """``tangents`` with each ``float0`` tangent (a NumPy array: of an integer or boolean output) replaced by zeros
    of its primal's shape and dtype: ``jacfwd``'s block of such an output, as JAX's, and no float0 array for a
    device to hold. ``tangents`` itself where there is none (one walk of its leaves)."""
    leaves, tree = tree_util.tree_flatten(tangents)
    if not any(type(t) is np.ndarray and t.dtype == dtypes.float0 for t in leaves):
        return tangents
    out = [lax.full(t.shape, 0, get_aval(p).dtype) if type(t) is np.ndarray and t.dtype == dtypes.float0 else t
           for p, t in zip(tree_util.tree_leaves(primals), leaves, strict=True)]
    return tree_util.tree_unflatten(tree, out)


def _check_float_outputs(outs, name):
    """The ``DTypeError`` (a ``TypeError``, as JAX's) of reverse mode through an integer or boolean output leaf:
    it has no cotangent, and JAX refuses it rather than give zeros."""
    for k, leaf in enumerate(outs):
        d = get_aval(leaf).dtype
        if not dtypes.is_inexact(d):
            which = f"output leaf {k} has" if len(outs) > 1 else "the output has"
            raise DTypeError(f"{name} requires real-valued outputs (floating dtypes), but {which} dtype {d.name}: an "
                             "integer or boolean function is piecewise constant. Differentiate a float expression "
                             "instead (for example before a comparison or a cast), or use fnarray.vjp directly.")


def _argnums_partial(fun, args, kwargs, nums):
    """``(f, diff_args)``: ``f(*diff_args)`` is ``fun(*args, **kwargs)`` with the arguments at
    ``nums`` replaced by ``f``'s own (the other arguments are held fixed)."""
    nums_n = tuple(i % len(args) for i in nums)

    def f(*dargs):
        full = list(args)
        for i, d in zip(nums_n, dargs, strict=True):
            full[i] = d
        return fun(*full, **kwargs)

    return f, tuple(args[i] for i in nums_n)


def value_and_grad(fun, argnums=0, has_aux=False, holomorphic=False, allow_int=False):
    """``(fun(*args), grad of fun)`` in one pass (mirrors ``jax.value_and_grad``).

    Args:
      fun: a function returning a scalar (shape ``()``) of a floating dtype.
      argnums: an int or a tuple of ints: the positional arguments to differentiate.
      has_aux: if true, ``fun`` returns ``(value, aux)``.
      holomorphic: allow a complex output (``fun`` is assumed holomorphic).
      allow_int: allow integer/bool differentiated arguments (their gradient is
        ``float0`` zeros).

    Returns:
      A function with ``fun``'s signature returning ``(value, grad)``, or
      ``((value, aux), grad)`` with ``has_aux``. ``grad`` has the structure, shapes
      and dtypes of the argument at ``argnums`` (a tuple of them when ``argnums``
      is a tuple).

    Raises:
      TypeError: ``fun`` is not callable; (when called) the output is not a scalar
        (the message names ``jacrev``/``vjp``), or with ``has_aux`` not a pair.
      ValueError: (when called) an ``argnums`` entry is out of range.
      DTypeError: (when called) a differentiated argument is not floating (without
        ``allow_int``), the output is integer or bool, or it is complex without
        ``holomorphic``.
    """
    check_callable(fun, "grad")
    multiple = _several(argnums)
    nums = _argnums_tuple(argnums, "grad")

    @functools.wraps(fun)
    def vg(*args, **kwargs):
        _check_diff_args(args, nums, "grad", allow_int)
        f, diff_args = _argnums_partial(fun, args, kwargs, nums)
        if has_aux:
            out, f_vjp, aux = vjp(f, *diff_args, has_aux=True)
        else:
            out, f_vjp = vjp(f, *diff_args)
        oa = get_aval(out) if isinstance(out, (Array, np.ndarray)) or is_scalar(out) else None
        if oa is None or oa.shape != ():
            shape = oa.shape if oa is not None else type(out).__name__
            aux_hint = (" If the function returns (loss, auxiliary values), pass has_aux=True: grad then "
                        "differentiates the first element and returns (gradient, aux)."
                        if isinstance(out, (tuple, list)) and not has_aux else "")
            raise TypeError(f"grad requires a scalar output (shape ()), got {shape}.{aux_hint} For a non-scalar "
                            "output use fnarray.jacrev or fnarray.vjp, or reduce it (e.g. .sum()) first.")
        _check_float_outputs([out], "grad")
        if dtypes.is_complex(oa.dtype) and not holomorphic:
            raise DTypeError("grad of a complex output needs holomorphic=True (as in JAX)")
        # the seed keeps the output's weak type (as JAX's): a weak output has weak gradients
        g = f_vjp(P.convert_element_type.bind(np.ones((), oa.dtype)[()], new_dtype=oa.dtype, weak_type=oa.weak_type))
        g = g if multiple else g[0]
        return ((out, aux), g) if has_aux else (out, g)

    return vg


def grad(fun, argnums=0, has_aux=False, holomorphic=False, allow_int=False):
    """The gradient of a scalar function, by reverse mode (mirrors ``jax.grad``).

    Args:
      fun: a function returning a scalar (shape ``()``) of a floating dtype.
      argnums: an int or a tuple of ints: the positional arguments to differentiate.
      has_aux: if true, ``fun`` returns ``(value, aux)``.
      holomorphic: allow a complex output (``fun`` is assumed holomorphic).
      allow_int: allow integer/bool differentiated arguments (their gradient is
        ``float0`` zeros).

    Returns:
      A function with ``fun``'s signature giving the gradient with respect to the
      arguments at ``argnums`` (same structure, shapes and dtypes; a tuple when
      ``argnums`` is a tuple); ``(grad, aux)`` with ``has_aux``.

    Raises:
      The errors of ``value_and_grad``: ``TypeError`` for a non-callable ``fun`` or
      a non-scalar output, ``ValueError`` for an out-of-range ``argnums``,
      ``DTypeError`` for non-floating arguments or outputs.
    """
    vg = value_and_grad(fun, argnums, has_aux, holomorphic, allow_int)

    @functools.wraps(fun)
    def g(*args, **kwargs):
        (value, *aux), gr = _unpack(vg(*args, **kwargs), has_aux)
        return (gr, aux[0]) if has_aux else gr

    return g


def _unpack(res, has_aux):
    v, g = res
    if has_aux:
        return (v[0], v[1]), g
    return (v,), g


def _on_args_device(jac, kind, fun):
    """``jac`` run inside ``_args_device_scope`` of its arguments; with ``config.stage_eager_transforms`` on, a
    call on concrete arrays runs a cached ``jit`` of it where ``staged_transforms``' rule allows (``kind``: the
    transform's name and options, ``fun``: the function it transforms, whose fingerprint keys the program)."""
    name, nums, multiple, has_aux = kind[:4]
    argnum = nums[0] if len(nums) == 1 and not multiple and not has_aux else None

    def on_device(*args, **kwargs):
        if config.stage_eager_transforms:   # (the scope is the program's: a backend's replay needs none)
            out = staged_transforms.call(kind, fun, jac, args, kwargs, argnum, _args_device_scope)
            if out is not staged_transforms.NO:
                return out
        elif argnum is not None and not kwargs and -len(args) <= argnum < len(args):
            x = args[argnum]
            # (an uncommitted argument off the current default device runs on the default device, JAX's rule)
            if type(x) is ArrayImpl and (x._committed or x._device is DEFAULT_NOW[0] or x._device is current_default()):
                impl = x._device.impl
                if impl.eager_jacobian is not None:
                    return _by_backend(impl, name, fun, jac, args, argnum, x)
        with _args_device_scope(args):
            return jac(*args, **kwargs)
    on_device.eager = jac   # the transform itself, without the scope or the staging (``hessian`` composes it)
    return on_device


def _by_backend(impl, name, fun, jac, args, argnum, x):
    """``jac(*args)``, by the backend's own transforms where its rule allows (``Backend.eager_jacobian``; issue
    28: mlx:0's eager Jacobians of small functions were ~3.8x raw MLX's ``vmap`` of ``jvp``/``vjp``)."""
    with _args_device_scope(args):   # (arrays the function makes land on the arguments' device either way)
        out = impl.eager_jacobian(name, fun, args, argnum, x)
        if out is None:
            out = jac(*args)
            impl.learn_jacobian(name, fun, args, argnum, x, out)
    return out


_NO_SCOPE = contextlib.nullcontext()   # (reentrant and stateless: one object serves every call)


def _args_device_scope(args):
    """A ``with`` scope for a Jacobian of ``args``: where their committed arrays share one device that is not the
    default, ``default_device`` of it, so the arrays the transforms make without operands (the basis, symbolic
    zeros made concrete, constants) are made there, not made on the default device and copied over at their first
    use (issue 28: ~450 copies numpy:0 -> mlx:0 a jacobian sweep); else no scope. Values are unchanged: an
    uncommitted array follows its committed operands either way (docs/design.md, placement), and where every
    array is uncommitted the Jacobian runs on the default device wherever they lie (JAX's rule: ``jax.grad`` of
    arrays made in a ``jax.default_device(d)`` block runs on the default device after it). Arrays passed as
    they are (no containers: a sweep's ``jacfwd(f)(x)``) are read without flattening ``args`` (issue 28: the
    scope cost ~9 us of a staged Jacobian's ~25 us call on mlx:0)."""
    dev = None
    for x in args:
        if type(x) is not ArrayImpl:
            dev = _leaves_device(args)
            break
        if not x._committed:
            continue
        if dev is None:
            dev = x._device
        elif x._device is not dev:
            return _NO_SCOPE
    if dev is None or dev is default_device():
        return _NO_SCOPE
    scope = _DEVICE_SCOPES.get(dev)
    if scope is None:   # (a scope holds its device only: entered by any number of calls, nested or in threads)
        scope = _DEVICE_SCOPES[dev] = default_device(dev)
    return scope


_DEVICE_SCOPES: dict = {}   # device -> its ``default_device(device)`` scope


def _leaves_device(args):
    """The one device of the committed arrays among ``args``' leaves, or ``None`` (none, or several devices)."""
    dev = None
    for x in tree_util.tree_leaves(args):
        if isinstance(x, ArrayImpl) and x._committed:
            if dev is None:
                dev = x.device
            elif x.device is not dev:
                return None
    return dev


#: The identity bases of small Jacobians (at most ``_BASIS_CACHED_ELEMENTS`` elements in all), by the leaves'
#: shapes and tangent dtypes, the device they are made on and the configuration: a sweep of ``jacfwd``/``jacrev``
#: over many functions of one input made the same identity on the host and copied it to the device at every call
#: (issue 28: ~6% of mlx:0's jacobians workload). Arrays are immutable; a basis that was donated or deleted since
#: is made again. At most ``_BASES`` entries of at most 256 KiB of float32 each.
_BASES = 32
_BASIS_CACHED_ELEMENTS = 1 << 16
_bases = LRUCache(_BASES)


def _std_basis(leaves):
    """An identity basis over the flattened leaves: (total, *leaf shapes) per leaf; small ones cached
    (``_BASES``)."""
    avals = [get_aval(x) for x in leaves]
    dt = [tangent_aval(a).dtype for a in avals]
    total = sum(a.size for a in avals)
    if total * total > _BASIS_CACHED_ELEMENTS:
        return _new_basis(avals, dt, total), total
    dev = default_device()
    key = (tuple(a.shape for a in avals), tuple(dt), id(dev), config.generation)
    hit = _bases.get(key)
    if hit is not None and hit[0] is dev and all(b._buf is not None for b in hit[1]):
        return list(hit[1]), total
    out = _new_basis(avals, dt, total)
    _bases.set(key, (dev, tuple(out)))
    return out, total


def _new_basis(avals, dt, total):
    """``_std_basis``'s arrays, made on the host and placed on the default device."""
    from fnarray.devices.placement import array_from_numpy
    out, off = [], 0
    for a, d in zip(avals, dt, strict=True):
        n = a.size
        eye = np.zeros((total, n), dtype=d if d != dtypes.float0 else np.float32)
        eye[off:off + n] = np.eye(n, dtype=eye.dtype)
        off += n
        out.append(array_from_numpy(eye.reshape((total,) + a.shape)))
    return out


def jacfwd(fun, argnums=0, has_aux=False, holomorphic=False):
    """The Jacobian by forward mode, one JVP per input element, vectorized (mirrors ``jax.jacfwd``).

    Args:
      fun: a function of arrays (pytrees) returning arrays (pytrees).
      argnums: an int or a tuple of ints: the positional arguments to differentiate.
      has_aux: if true, ``fun`` returns ``(output, aux)``.
      holomorphic: accepted for JAX compatibility and ignored.

    Returns:
      A function with ``fun``'s signature returning the Jacobian: for an output leaf
      of shape ``O`` and an input leaf of shape ``I``, a block of shape ``O + I``
      in the output's dtype (zeros for an integer or boolean output, as JAX's), nested as output structure over
      input structure (a tuple of inputs when ``argnums`` is a tuple); ``(jacobian, aux)`` with ``has_aux``.
      Where the arguments' arrays share one device, the arrays the transform makes (the basis, zeros) are made
      on it, not on the default device.

    Raises:
      DTypeError: (when called) a differentiated argument is not floating.
      ValueError: (when called) an ``argnums`` entry is out of range.
      TypeError: (when called) ``fun`` is a ``custom_vjp`` function (forward mode is
        not defined for it), or with ``has_aux`` does not return a pair.
    """
    check_callable(fun, "jacfwd")
    nums = _argnums_tuple(argnums, "jacfwd")
    multiple = _several(argnums)

    def jac(*args, **kwargs):
        from fnarray.transforms.batching import vmap   # (here: a call a backend runs itself imports nothing)
        _check_diff_args(args, nums, "jacfwd")
        nums_n = tuple(i % len(args) for i in nums)
        dargs = tuple(args[i] for i in nums_n)
        d_flat, d_tree = tree_util.tree_flatten(dargs)

        def f_flat(*xs):
            full = list(args)
            for i, d in zip(nums_n, tree_util.tree_unflatten(d_tree, list(xs)), strict=True):
                full[i] = d
            out = fun(*full, **kwargs)
            if has_aux:
                out, aux = _split_aux(out)
                return out, aux
            return out

        basis, total = _std_basis(d_flat)

        def push(*ts):
            r = jvp(f_flat, tuple(d_flat), tuple(ts), has_aux=has_aux)
            out_t = _float0_as_zeros(r[0], r[1])
            return (out_t, r[2]) if has_aux else out_t

        res = vmap(push, in_axes=0, out_axes=-1)(*basis) if not has_aux else vmap(
            push, in_axes=0, out_axes=(-1, None))(*basis)
        out_t, aux = (res if has_aux else (res, None))
        # out_t leaves: O + (total,) -> split the last axis into the input leaves' shapes.
        in_shapes = [get_aval(x).shape for x in d_flat]

        def split(leaf):
            o_shape = leaf.shape[:-1]
            ends = np.cumsum([int(np.prod(s)) for s in in_shapes])
            parts = [lax.slice_in_dim(leaf, int(e - int(np.prod(s))), int(e), axis=leaf.ndim - 1)
                     for e, s in zip(ends, in_shapes, strict=True)] if len(in_shapes) > 1 else [leaf]
            blocks = [lax.reshape(p, o_shape + s) for p, s in zip(parts, in_shapes, strict=True)]
            tree = tree_util.tree_unflatten(d_tree, blocks)
            return tree if multiple else tree[0]

        jac_tree = tree_util.tree_map(split, out_t)
        return (jac_tree, aux) if has_aux else jac_tree

    return _on_args_device(jac, ("jacfwd", nums, multiple, has_aux), fun)


def jacrev(fun, argnums=0, has_aux=False, holomorphic=False, allow_int=False):
    """The Jacobian by reverse mode, one VJP per output element, vectorized (mirrors ``jax.jacrev``).

    Args:
      fun: a function of arrays (pytrees) returning arrays (pytrees).
      argnums: an int or a tuple of ints: the positional arguments to differentiate.
      has_aux: if true, ``fun`` returns ``(output, aux)``.
      holomorphic: accepted for JAX compatibility and ignored.
      allow_int: allow integer/bool differentiated arguments (their blocks are
        ``float0`` zeros).

    Returns:
      A function with ``fun``'s signature returning the Jacobian: for an output leaf
      of shape ``O`` and an input leaf of shape ``I``, a block of shape ``O + I``
      in the input's dtype, nested as output structure over input structure (a
      tuple of inputs when ``argnums`` is a tuple); ``(jacobian, aux)`` with
      ``has_aux``. Where the arguments' arrays share one device, the arrays the
      transform makes (the basis, zeros) are made on it, not on the default device.

    Raises:
      DTypeError: (when called) a differentiated argument is not floating (without
        ``allow_int``), or an output leaf is integer or boolean (as JAX's ``TypeError``).
      ValueError: (when called) an ``argnums`` entry is out of range.
      TypeError: (when called) with ``has_aux`` ``fun`` does not return a pair.
    """
    check_callable(fun, "jacrev")
    nums = _argnums_tuple(argnums, "jacrev")
    multiple = _several(argnums)

    def jac(*args, **kwargs):
        from fnarray.transforms.batching import vmap
        _check_diff_args(args, nums, "jacrev", allow_int)
        f, dargs = _argnums_partial(fun, args, kwargs, nums)
        if has_aux:
            out, f_vjp, aux = vjp(f, *dargs, has_aux=True)
        else:
            out, f_vjp = vjp(f, *dargs)
        o_flat, o_tree = tree_util.tree_flatten(out)
        _check_float_outputs(o_flat, "jacrev")
        basis, total = _std_basis(o_flat)

        def pull(*cts):
            return f_vjp(tree_util.tree_unflatten(o_tree, list(cts)))

        cts = vmap(pull)(*basis)  # tuple over dargs, each leaf (total,) + I
        o_shapes = [get_aval(x).shape for x in o_flat]
        offsets = np.cumsum([0] + [int(np.prod(s)) for s in o_shapes])

        def block(k):
            def f_leaf(leaf):
                part = lax.slice_in_dim(leaf, int(offsets[k]), int(offsets[k + 1]), axis=0)
                return lax.reshape(part, o_shapes[k] + leaf.shape[1:])
            t = tree_util.tree_map(f_leaf, cts)
            return t if multiple else t[0]

        jac_tree = tree_util.tree_unflatten(o_tree, [block(k) for k in range(len(o_flat))])
        return (jac_tree, aux) if has_aux else jac_tree

    return _on_args_device(jac, ("jacrev", nums, multiple, has_aux, allow_int), fun)


def hessian(fun, argnums=0, has_aux=False, holomorphic=False):
    """The Hessian, ``jacfwd(jacrev(fun))`` (mirrors ``jax.hessian``).

    Args:
      fun: a function of arrays (pytrees) returning arrays (pytrees), usually a scalar.
      argnums: an int or a tuple of ints: the positional arguments to differentiate.
      has_aux: if true, ``fun`` returns ``(output, aux)``.
      holomorphic: accepted for JAX compatibility and ignored.

    Returns:
      A function with ``fun``'s signature returning blocks of shape ``O + I + I``
      (output leaf shape ``O``, input leaf shape ``I``); for a scalar ``fun`` of one
      array of shape ``(n,)``, an ``(n, n)`` array.

    Raises:
      The errors of ``jacfwd`` and ``jacrev``: ``DTypeError`` for non-floating
      arguments or an integer output, ``ValueError`` for an out-of-range ``argnums``, ``TypeError`` for a
      ``custom_vjp`` function (forward mode over it is not defined).
    """
    # Staged (``config.stage_eager_transforms``), the call is keyed by ``fun``'s fingerprint and the options, not
    # by the fingerprint of jacrev's closure inside jacfwd's (issue 28: ~35 values walked a call against ~10).
    # The composition is made at its first use: a call a backend runs itself (mlx's eager and staged Jacobians)
    # needs none (issue 28: two transforms made, ~4 us, for each ``hessian(lambda x, f=f: ...)`` of a sweep).
    check_callable(fun, "hessian")
    composed = []

    def eager(*args, **kwargs):
        if not composed:
            composed.append(jacfwd(jacrev(fun, argnums, has_aux=has_aux), argnums, has_aux=has_aux).eager)
        return composed[0](*args, **kwargs)
    return _on_args_device(eager, ("hessian", _argnums_tuple(argnums, "hessian"), _several(argnums), has_aux), fun)


def stop_gradient(x):
    """Identity whose derivative is zero; works on pytrees (mirrors ``jax.lax.stop_gradient``).

    Args:
      x: an array or a pytree of arrays; non-floating leaves pass through.

    Returns:
      ``x`` with the same structure, shapes and dtypes, treated as a constant by
      every differentiation transform.

    Raises:
      Nothing beyond the pytree errors of ``tree_util.tree_map`` (an unregistered
      container is a leaf and passes through).
    """
    return lax.stop_gradient(x)
