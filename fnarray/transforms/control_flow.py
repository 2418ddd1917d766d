"""Structured control flow (as ``jax.lax``): ``cond``, ``switch``, ``while_loop``, ``fori_loop``, ``scan``.

Each construct traces its Python functions once per call, at the abstract
values of the operands or carries (weak types kept), into closed sub-programs
and binds one of the higher-order primitives ``cond``, ``while`` or ``scan``
(``fnarray.core.primitives``). Values the functions capture become explicit
leading operands of the primitive, so the sub-programs have no constvars.

Below the user API are those primitives' rules, registered in the shared
tables: batching (``vmap``), JVP, partial evaluation (the known/unknown split
that reverse mode needs) and transposition. The rules follow JAX's designs:

- a ``cond`` with a batched predicate computes every branch and selects;
- a ``while`` with a batched predicate runs until every batch element is done,
  freezing the carries of finished elements with a select;
- which carries become batched, get nonzero tangents or become unknown is
  found by a fixed point over the loop body;
- reverse mode through ``scan`` runs the known scan now, stacking its
  per-iteration residuals as extra outputs, and stages the unknown (linear)
  scan over them; its transpose is a scan in the opposite direction;
- reverse mode through ``while`` is refused: its trip count is dynamic, so the
  residuals of every iteration cannot be stored.
"""

from __future__ import annotations

import operator

import numpy as np

from fnarray import tree_util
from fnarray.core.collectives import lift_for_program
from fnarray.core import dtypes, lax
from fnarray.core import primitives as P
from fnarray.core.array import Array
from fnarray.core.builder import trace_to_program
from fnarray.core.errors import ConcretizationError, DTypeError, FnArrayError, ShapeError, check_callable
from fnarray.core.interpreter import eval_program
from fnarray.core.ir import Eqn, Literal, Params, Program, Var
from fnarray.core.passes import consts_as_inputs
from fnarray.core.shaped import ShapedArray
from fnarray.core.tracing import Tracer, is_scalar
from fnarray.core.avals import asarray as asarray_internal
from fnarray.core.avals import get_aval as aval_of
from fnarray.transforms.ad_tables import (Zero, instantiate_zeros, is_undefined, partial_eval_rules,
                                          primitive_jvps, primitive_transposes, staged, tangent_aval,
                                          zeros_like_aval)
from fnarray.transforms.batching_tables import primitive_batchers

__all__ = ["ReverseModeError", "cond", "fori_loop", "scan", "switch", "while_loop"]


class ReverseModeError(FnArrayError, ValueError):
    """Reverse-mode differentiation through a construct that does not support it (``while_loop``)."""


# ============================================================================ tracing helpers


def _operand_leaf(x, what):
    if isinstance(x, Array) or is_scalar(x):
        return x
    if isinstance(x, np.ndarray):
        return asarray_internal(x)
    raise TypeError(f"{what} has a leaf of type {type(x).__name__}; control-flow operands and carries are "
                    "arrays and scalars, or pytrees (tuples, lists, dicts...) of them")


def _flatten_operands(tree, what):
    leaves, treedef = tree_util.tree_flatten(tree)
    return [_operand_leaf(x, what) for x in leaves], treedef


def _output_leaf(x, name):
    if isinstance(x, Array) or is_scalar(x):
        return x
    if isinstance(x, np.ndarray):
        return asarray_internal(x)
    raise TypeError(f"{name} returned a leaf of type {type(x).__name__}; it must return arrays and scalars, "
                    "or pytrees of them")


def _trace_flat(flat_call, in_avals, name):
    """Trace ``flat_call(list of leaves) -> list of leaves`` into a closed program.

    Returns ``(program, consts)``: the captured values are the program's leading inputs.
    """
    def flat(*leaves):
        return [_output_leaf(o, name) for o in flat_call(list(leaves))]
    prog, consts = trace_to_program(flat, list(in_avals), debug_name=name)
    return consts_as_inputs(prog), list(consts)


def _merge_consts(progs_and_consts):
    """Give programs whose leading inputs are captured values one common list of them.

    ``progs_and_consts``: ``(program, consts)`` pairs, ``consts`` feeding the program's first
    inputs. Returns ``(all_consts, programs)``: the captured values of all, deduplicated by
    identity, and each program taking ``[*all_consts, *its other inputs]`` (unused ones ignored).
    """
    all_consts, position = [], {}
    for _, consts in progs_and_consts:
        for c in consts:
            if id(c) not in position:
                position[id(c)] = len(all_consts)
                all_consts.append(c)
    progs = []
    for prog, consts in progs_and_consts:
        mine = {position[id(c)]: v for c, v in zip(consts, prog.invars, strict=False)}
        const_vars = [mine[j] if j in mine else Var(aval_of(all_consts[j])) for j in range(len(all_consts))]
        progs.append(Program([], const_vars + list(prog.invars[len(consts):]), prog.eqns, prog.outvars))
    return all_consts, progs


def _closed(fn, in_avals, name="control_flow"):
    """Trace an internal function of flat values; returns ``(program, consts)`` like ``_trace_flat``."""
    prog, consts = trace_to_program(lambda *xs: list(fn(*xs)), list(in_avals), debug_name=name)
    return consts_as_inputs(prog), list(consts)


def _fmt_aval(a):
    return a.str_short() + (" (weak)" if a.weak_type else "")


def _fmt_types(avals):
    return "(" + ", ".join(_fmt_aval(a) for a in avals) + ")"


def _kind(d):
    if dtypes.is_bool(d):
        return "b"
    if dtypes.is_int(d):
        return "i"
    if dtypes.is_float(d):
        return "f"
    return "c" if dtypes.is_complex(d) else d


def _weak_adopts(carry, out):
    """Whether a weak-typed carry may take the body output's dtype (as JAX, within one kind only:
    a Python float carry may become float64, an int carry never becomes float)."""
    return (carry.weak_type and carry.shape == out.shape and carry.dtype != out.dtype
            and _kind(carry.dtype) == _kind(out.dtype)
            and dtypes.result_type((carry.dtype, True), (out.dtype, out.weak_type))[0] == out.dtype)


def _check_match(where, what_a, tree_a, avals_a, what_b, tree_b, avals_b, hint, carry=False):
    """Raise when two pytrees of abstract values differ in structure, shape or dtype (weak types may differ).

    ``hint`` (what to do) ends the message of a shape or dtype difference. With ``carry``,
    ``avals_a`` are carries and a weak carry that may adopt its output's dtype is no difference.
    """
    if tree_a != tree_b:
        raise TypeError(f"{where}: {what_a} has the pytree structure {tree_a} but {what_b} has {tree_b}; "
                        "they must be the same (the same containers: tuple vs list, the same dict keys, "
                        "the same number of leaves).")
    for i, (a, b) in enumerate(zip(avals_a, avals_b, strict=True)):
        if (a.shape == b.shape and a.dtype == b.dtype) or (carry and _weak_adopts(a, b)):
            continue
        err = ShapeError if a.shape != b.shape else DTypeError
        raise err(f"{where}: {what_a} has types {_fmt_types(avals_a)} but {what_b} has types "
                  f"{_fmt_types(avals_b)}; leaf {i} differs ({_fmt_aval(a)} vs {_fmt_aval(b)}). {hint}")


def _strengthen(carry, carry_avals, out_avals):
    """Weak-typed carries whose body output has a wider dtype of the same kind take the output's type
    (as JAX's ``_promote_weak_typed_input``). A weak carry whose output is strong of the same dtype stays
    weak inside the body, and the loop's result has the output's type (JAX: the body's output types).
    Returns ``(new carry leaves, changed)``."""
    out, changed = [], False
    for x, a, o in zip(carry, carry_avals, out_avals, strict=True):
        if _weak_adopts(a, o):
            out.append(lax.convert_element_type(x, o.dtype, weak_type=o.weak_type))
            changed = True
        else:
            out.append(x)
    return out, changed


_CARRY_HINT = ("Give the initial value the type the body returns (for instance 0.0 rather than 0 for a "
               "float accumulator, or fnarray.numpy.zeros(shape, dtype)), or cast inside the body with .astype.")


# ============================================================================ cond and switch


def _pred_index(pred):
    a = aval_of(pred)
    if a.shape != ():
        raise ShapeError(f"cond's pred must be a scalar, got {a.str_short()}; for an elementwise choice use "
                         "fnarray.numpy.where(pred, x, y), or vmap the cond over the batch")
    if dtypes.is_bool(a.dtype):
        return lax.convert_element_type(pred, dtypes.int32)
    if dtypes.is_complex(a.dtype):
        raise DTypeError(f"cond's pred must be a boolean or real number, got {a.dtype.name}")
    nonzero = lax.ne(pred, np.zeros((), a.dtype)[()])
    return lax.convert_element_type(nonzero, dtypes.int32)


def _switch_index(index, n):
    a = aval_of(index)
    if a.shape != ():
        raise ShapeError(f"switch's index must be a scalar, got {a.str_short()}; vmap the switch to choose "
                         "per batch element")
    if not dtypes.is_int(a.dtype):
        raise DTypeError(f"switch's index must be an integer scalar, got {a.dtype.name}; convert it with "
                         ".astype(fnarray.numpy.int32)")
    idx = lax.convert_element_type(index, dtypes.int32)
    return lax.max(lax.min(idx, np.int32(n - 1)), np.int32(0))


def _weak_output_casts(out_avals):
    """Per branch, the output dtypes that weak-typed outputs must take so that all branches agree
    (as JAX: a branch returning ``1.0`` next to a float64 branch returns float64). ``None`` where
    nothing changes; differences that promotion cannot settle are left for the type check."""
    casts = [[None] * len(av) for av in out_avals]
    if any(len(av) != len(out_avals[0]) for av in out_avals):
        return casts
    for i in range(len(out_avals[0])):
        leaf = [av[i] for av in out_avals]
        if len({a.dtype for a in leaf}) == 1 or len({a.shape for a in leaf}) > 1:
            continue
        target = dtypes.result_type(*[(a.dtype, a.weak_type) for a in leaf])[0]
        if any(a.dtype != target and not _weak_adopts(a, ShapedArray(a.shape, target)) for a in leaf):
            continue
        for b, a in enumerate(leaf):
            if a.dtype != target:
                casts[b][i] = target
    return casts


def _trace_branch(fn, name, in_tree, in_avals, casts=None):
    trees = []

    def call(leaves):
        out = fn(*tree_util.tree_unflatten(in_tree, leaves))
        out_leaves, out_tree = tree_util.tree_flatten(out)
        trees.append(out_tree)
        if casts is not None and len(casts) == len(out_leaves):
            out_leaves = [o if d is None else lax.convert_element_type(o, d)
                          for o, d in zip(out_leaves, casts, strict=True)]
        return out_leaves
    prog, consts = _trace_flat(call, in_avals, name)
    return prog, consts, trees[0]


def _cond_impl(where, index, funs, names, operands):
    ops, in_tree = _flatten_operands(operands, f"{where}'s operands")
    in_avals = [aval_of(x) for x in ops]
    for fn, name in zip(funs, names, strict=True):
        check_callable(fn, where, name)
    traced = [_trace_branch(fn, name, in_tree, in_avals) for fn, name in zip(funs, names, strict=True)]
    casts = _weak_output_casts([prog.out_avals for prog, _, _ in traced])
    traced = [_trace_branch(fn, name, in_tree, in_avals, c) if any(d is not None for d in c) else t
              for fn, name, c, t in zip(funs, names, casts, traced, strict=True)]
    prog0, _, tree0 = traced[0]
    for (prog, _, tree), name in zip(traced[1:], names[1:], strict=True):
        _check_match(where, f"{names[0]}'s output", tree0, prog0.out_avals, f"{name}'s output", tree,
                     prog.out_avals, "Every branch must return the same pytree of the same shapes and dtypes.")
    all_consts, branches = _merge_consts([(prog, consts) for prog, consts, _ in traced])
    outs = P.cond.bind(*_named_axes([index, *all_consts, *ops], branches), branches=tuple(branches))
    return tree_util.tree_unflatten(tree0, outs)


def _named_axes(args, programs):
    """Inside a named vmap, operands lifted into it when a body's collectives name its axis (else as given),
    so that the loop or branch is batched over the axis even if no operand varies."""
    for prog in programs:
        lifted = lift_for_program(list(args), prog)
        if lifted is not None:
            return lifted
    return args


def cond(pred, true_fun, false_fun, *operands):
    """``true_fun(*operands)`` if ``pred`` else ``false_fun(*operands)``, traced once (mirrors ``jax.lax.cond``).

    Both branches are traced into the program; only one runs (except under
    ``vmap`` with a batched ``pred``, where both run and the results are selected).

    Args:
      pred: a scalar boolean (or number: nonzero means true), concrete or traced.
      true_fun, false_fun: functions of ``*operands`` returning the same pytree of
        arrays (same structure, shapes and dtypes).
      operands: pytrees of arrays or scalars passed to the branch taken.

    Returns:
      the chosen branch's output pytree; an output is weak-typed where every branch's is (as
      JAX). A weak-typed output (a Python scalar) takes the dtype of the other branches' output
      when that is a dtype of the same kind (``1.0`` next to float64 becomes float64).

    Raises:
      ``ShapeError`` when ``pred`` is not a scalar or the branches return
      different shapes; ``DTypeError`` when they return different dtypes (or
      ``pred`` is complex); ``TypeError`` when they return different pytree structures.

    Example::

        >>> fnarray.cond(x > 0, lambda v: v * 2, lambda v: -v, x)
    """
    index = _pred_index(pred)
    return _cond_impl("cond", index, [false_fun, true_fun], ["false_fun", "true_fun"], operands)


def switch(index, branches, *operands):
    """``branches[clamp(index, 0, len(branches) - 1)](*operands)`` (mirrors ``jax.lax.switch``).

    Args:
      index: an integer scalar, concrete or traced; out-of-range values are clamped.
      branches: a non-empty sequence of functions of ``*operands`` that all return
        the same pytree of arrays (structure, shapes and dtypes).
      operands: pytrees of arrays or scalars.

    Returns:
      the chosen branch's output pytree.

    Raises:
      ``ValueError`` for an empty ``branches``; ``ShapeError``/``DTypeError``
      for a non-scalar or non-integer index or branches whose outputs differ;
      ``TypeError`` for differing output structures.

    Example::

        >>> fnarray.switch(i, [lambda v: v, lambda v: v + 1, lambda v: v * 2], x)
    """
    branches = list(branches)
    if not branches:
        raise ValueError("switch needs at least one branch, got an empty sequence")
    idx = _switch_index(index, len(branches))
    names = [f"branches[{i}]" for i in range(len(branches))]
    return _cond_impl("switch", idx, branches, names, operands)


# ============================================================================ while_loop and fori_loop


def _while_impl(where, cond_fun, body_fun, init_val, body_name="body_fun", init_name="init_val"):
    check_callable(cond_fun, where, "cond_fun")
    check_callable(body_fun, where, body_name)
    init, tree = _flatten_operands(init_val, f"{where}'s {init_name}")
    while True:  # retrace until no weak carry changes type (each change removes weakness or widens)
        avals = [aval_of(x) for x in init]
        ctrees, btrees = [], []

        def cond_call(leaves, ctrees=ctrees):
            out = cond_fun(tree_util.tree_unflatten(tree, leaves))
            out_leaves, out_tree = tree_util.tree_flatten(out)
            ctrees.append(out_tree)
            return out_leaves

        def body_call(leaves, btrees=btrees):
            out = body_fun(tree_util.tree_unflatten(tree, leaves))
            out_leaves, out_tree = tree_util.tree_flatten(out)
            btrees.append(out_tree)
            return out_leaves
        cprog, cconsts = _trace_flat(cond_call, avals, "cond_fun")
        co = cprog.out_avals
        if len(co) != 1 or co[0].shape != () or co[0].dtype != dtypes.bool_:
            raise DTypeError(f"{where}: cond_fun must return one boolean scalar, it returns {_fmt_types(co)}; "
                             "compare with <, ==... or reduce with fnarray.numpy.any/all")
        bprog, bconsts = _trace_flat(body_call, avals, body_name)
        _check_match(where, f"the carry ({init_name})", tree, avals, f"{body_name}'s output", btrees[0],
                     bprog.out_avals, _CARRY_HINT, carry=True)
        init, changed = _strengthen(init, avals, bprog.out_avals)
        if not changed:
            break
    outs = P.while_p.bind(*_named_axes([*cconsts, *bconsts, *init], (cprog, bprog)), cond_program=cprog,
                          body_program=bprog, cond_nconsts=len(cconsts), body_nconsts=len(bconsts))
    return tree_util.tree_unflatten(tree, outs)


def while_loop(cond_fun, body_fun, init_val):
    """``val = init_val; while cond_fun(val): val = body_fun(val)`` (mirrors ``jax.lax.while_loop``).

    Args:
      cond_fun: carry -> boolean scalar.
      body_fun: carry -> carry, with the same pytree structure, shapes and dtypes.
      init_val: the initial carry, a pytree of arrays or scalars. A weak-typed leaf (a
        Python scalar) takes the dtype of the body's output when that is a wider dtype of the
        same kind (``0.0`` with a float64 body becomes float64), as in JAX; a change of kind (an
        int carry becoming float) is an error. The result has the body's output types: a carry
        the body keeps weak stays weak (``0`` with ``a + 1``), as in JAX.

    Returns:
      the final carry.

    Raises:
      ``DTypeError`` when ``cond_fun`` does not return a boolean scalar or
      ``body_fun`` changes a carry's dtype (an int carry becoming float included);
      ``ShapeError`` when it changes a shape; ``TypeError`` when it changes the
      pytree structure. Reverse-mode differentiation (``grad``) raises
      ``ReverseModeError``: use ``scan`` or ``fori_loop`` with static bounds.

    Example::

        >>> fnarray.while_loop(lambda c: c[0] < 10, lambda c: (c[0] + 1, c[1] * 2.0), (0, x))
    """
    return _while_impl("while_loop", cond_fun, body_fun, init_val)


def _static_bound(x):
    if isinstance(x, Tracer):
        return None
    if isinstance(x, bool):
        raise TypeError("fori_loop bounds must be integers, got a bool")
    try:
        return operator.index(x)
    except TypeError:
        raise TypeError(f"fori_loop bounds must be integers, got {type(x).__name__} "
                        f"{aval_of(x).str_short() if isinstance(x, Array) else x!r}") from None


def _fits(*bounds) -> bool:
    return all(dtypes.fits_weak_int(b) for b in bounds)


def _check_int64_bound(b: int) -> None:
    """``OverflowError`` unless a bound past int32 can be a weak int64: 64-bit enabled (JAX's Python ints are then
    weak int64) and ``b`` in int64's range."""
    if not dtypes.x64_enabled():
        raise OverflowError(f"fori_loop bound {b} does not fit int32 (Python int bounds are weak int32, as in JAX); "
                            "pass bounds in int32's range, or enable 64-bit (fnarray.config.update('enable_x64', "
                            "True)) for a loop that long")
    if not -2 ** 63 <= b < 2 ** 63:
        raise OverflowError(f"fori_loop bound {b} does not fit int64, the widest index; pass a bound in its range")


def _weak_int64(b: int):
    """``b`` as a weak int64 scalar (``_check_int64_bound``)."""
    _check_int64_bound(b)
    return lax.convert_element_type(np.int64(b), dtypes.int64, weak_type=True)


def _bound_aval(b):
    """A bound's type as ``fori_loop`` reads it: a Python int is a weak int32 where int32 holds it (as in JAX), else
    a weak int64 (``_check_int64_bound``: 2**40 with 64-bit off ran a scan of 2**40 steps)."""
    if type(b) is not int or _fits(b):
        return aval_of(b)
    _check_int64_bound(b)
    return ShapedArray((), dtypes.int64, weak_type=True)


#: Set by ``fnarray.experimental.pallas``: ``(lower, upper, body_fun, init_val) -> (result,)`` inside a kernel
#: body being traced, ``None`` elsewhere.
kernel_fori_loop = None


def fori_loop(lower, upper, body_fun, init_val, *, unroll=None):
    """``val = init_val; for i in range(lower, upper): val = body_fun(i, val)`` (mirrors ``jax.lax.fori_loop``).

    With static bounds (Python or NumPy ints, or concrete arrays) the loop is a
    ``scan`` of ``max(upper - lower, 0)`` steps, so reverse-mode differentiation
    works; with a traced bound it is a ``while_loop`` (forward mode only).

    Args:
      lower, upper: integer scalars. With static bounds ``i`` is a weak int32 (it starts as the Python
        int ``lower``, as in JAX), so a Python-scalar carry that adds it stays weak (a weak int64 where a bound
        does not fit int32, with 64-bit enabled); with a traced bound ``i`` has the bounds' promoted dtype.
      body_fun: ``(i, carry) -> carry`` with the same structure, shapes and dtypes.
      init_val: the initial carry (pytree of arrays or scalars).
      unroll: with static bounds, how many iterations one step of the scan runs.

    Returns:
      the final carry.

    Raises:
      ``TypeError`` for non-integer bounds; ``OverflowError`` for a bound past int32 with 64-bit off, past
      int64, or past the dtype of the other, traced bound; the errors of ``while_loop`` when ``body_fun``
      changes the carry's type.

    Example::

        >>> fnarray.fori_loop(0, 5, lambda i, acc: acc + i * x, fnarray.numpy.zeros_like(x))
    """
    check_callable(body_fun, "fori_loop", "body_fun (a function of the index and the carry)")
    if kernel_fori_loop is not None:   # inside a Pallas kernel body: a kernel loop carrying the refs
        loop = kernel_fori_loop(lower, upper, body_fun, init_val)
        if loop is not None:
            return loop[0]
    try:
        la, ua = _bound_aval(lower), _bound_aval(upper)
    except TypeError:
        raise TypeError(f"fori_loop bounds must be integers (Python ints or integer scalars), got "
                        f"{type(lower).__name__} {lower!r:.30} and {type(upper).__name__} {upper!r:.30}") from None
    if la.shape != () or ua.shape != ():
        raise ShapeError(f"fori_loop bounds must be scalars, got {la.str_short()} and {ua.str_short()}")
    if not dtypes.is_int(la.dtype) or not dtypes.is_int(ua.dtype) or isinstance(lower, bool) or \
            isinstance(upper, bool):
        raise TypeError(f"fori_loop bounds must be integers, got {la.dtype.name} and {ua.dtype.name}")
    d, _ = dtypes.result_type((la.dtype, la.weak_type), (ua.dtype, ua.weak_type))
    lo, hi = _static_bound(lower), _static_bound(upper)

    def checked_body(i, x):
        out = body_fun(i, x)
        out_leaves, out_tree = tree_util.tree_flatten(out)
        x_avals = [aval_of(v) for v in tree_util.tree_leaves(x)]
        _check_match("fori_loop", "the carry (init_val)", tree_util.tree_structure(x), x_avals,
                     "body_fun's output", out_tree, [aval_of(_output_leaf(v, "body_fun")) for v in out_leaves],
                     _CARRY_HINT, carry=True)
        return out

    if lo is not None and hi is not None:
        # As JAX: with static bounds the index starts as the Python int ``lo``, a weak int32 (whatever the
        # bounds' dtype), so that a Python-scalar carry it meets stays weak; a weak int64 where a bound needs it
        start, step_by = (lo, 1) if _fits(lo, hi) else (_weak_int64(lo), _weak_int64(1))

        def step(carry, _):
            i, x = carry
            return (lax.add(i, step_by), checked_body(i, x)), None
        (_, out), _ = _scan_impl("fori_loop", step, (start, init_val), None,
                                 max(hi - lo, 0), False, 1 if unroll is None else unroll, "body_fun")
        return out
    for b in (lo, hi):   # a static bound beside a traced one: converted to the traced bound's dtype
        if b is not None and not np.iinfo(d).min <= b <= np.iinfo(d).max:
            raise OverflowError(f"fori_loop bound {b} does not fit {d.name}, the dtype of the loop index beside the "
                                f"other, traced bound ({(ua if b is lo else la).str_short()}); pass that bound as "
                                "an int64 array (with 64-bit enabled)")
    one = np.ones((), d)[()]
    lo_v = lax.convert_element_type(np.asarray(lower, d)[()] if type(lower) is int else lower, d)
    hi_v = lax.convert_element_type(np.asarray(upper, d)[()] if type(upper) is int else upper, d)

    def loop_cond(carry):
        return lax.lt(carry[0], hi_v)

    def loop_body(carry):
        i, x = carry
        return lax.add(i, one), checked_body(i, x)
    _, out = _while_impl("fori_loop", loop_cond, loop_body, (lo_v, init_val))
    return out


# ============================================================================ scan


def _unroll_value(unroll, length):
    if isinstance(unroll, bool):
        return max(length, 1) if unroll else 1
    try:
        u = operator.index(unroll)
    except TypeError:
        raise TypeError(f"scan's unroll must be an int or a bool, got {type(unroll).__name__}") from None
    if u < 1:
        raise ValueError(f"scan's unroll must be >= 1, got {u}")
    return u


def _concrete_length(length) -> int:
    """``int(length)``, as ``jax.lax.scan`` converts its ``length`` (JAX 0.10: ``3.0``, a NumPy float, a concrete
    array, even ``3.5`` (truncated to 3) or ``"3"`` are taken); a traced value or one ``int`` refuses raises."""
    if isinstance(length, Tracer):
        raise ConcretizationError(f"scan's length must be concrete, got a traced value ({length.aval.str_short()}); "
                                  "for a loop whose trip count is known only at run time use while_loop or "
                                  "fori_loop, or pass the length as a static argument of jit")
    try:
        return int(length)
    except (TypeError, ValueError, OverflowError) as e:
        raise type(e)(f"scan's length must be an int (or a value int() takes, as in JAX), got {length!r}: "
                      f"{e}") from None


def _scan_length(xs_avals, length):
    lengths = sorted({a.shape[0] for a in xs_avals})
    if length is not None:
        length = _concrete_length(length)
        if length < 0:
            raise ValueError(f"scan's length must be >= 0, got {length}")
        if lengths and lengths != [length]:
            raise ShapeError(f"scan got length={length} but xs with leading dimensions {lengths}; every leaf "
                             f"of xs needs the leading dimension {length} (or leave length=None)")
        return length
    if not lengths:
        raise ValueError("scan needs length= when xs is None or has no leaves")
    if len(lengths) > 1:
        raise ShapeError(f"scan got xs with different leading dimensions {lengths} (shapes "
                         f"{[a.shape for a in xs_avals]}); every leaf needs the same one")
    return lengths[0]


def _scan_impl(where, f, init, xs, length, reverse, unroll, fname="f"):
    check_callable(f, where, fname)
    carry, carry_tree = _flatten_operands(init, f"{where}'s init")
    xs_leaves, xs_tree = _flatten_operands(xs, f"{where}'s xs")
    xs_full = [aval_of(x) for x in xs_leaves]
    for a in xs_full:
        if a.ndim == 0:
            raise ShapeError(f"{where}: every leaf of xs needs a leading axis to scan over, got a scalar "
                             f"{a.str_short()}")
    n = _scan_length(xs_full, length)
    unroll = _unroll_value(unroll, n)
    x_avals = [ShapedArray(a.shape[1:], a.dtype, a.weak_type) for a in xs_full]
    nk = len(carry)
    while True:  # retrace until no weak carry changes type (each change removes weakness or widens)
        c_avals = [aval_of(x) for x in carry]
        trees = []

        def call(leaves, trees=trees):
            out = f(tree_util.tree_unflatten(carry_tree, leaves[:nk]), tree_util.tree_unflatten(xs_tree, leaves[nk:]))
            if not isinstance(out, (tuple, list)) or len(out) != 2:
                kind = "an array" if isinstance(out, Array) else type(out).__name__
                raise TypeError(f"{where}: {fname} must return a pair (carry, y), got {kind}"
                                + (f" of length {len(out)}" if isinstance(out, (tuple, list)) else ""))
            c_leaves, c_tree = tree_util.tree_flatten(out[0])
            y_leaves, y_tree = tree_util.tree_flatten(out[1])
            trees.append((c_tree, y_tree))
            return list(c_leaves) + list(y_leaves)
        prog, consts = _trace_flat(call, c_avals + x_avals, fname)
        c_tree_out, y_tree = trees[0]
        _check_match(where, "the carry (init)", carry_tree, c_avals, f"the carry {fname} returns", c_tree_out,
                     prog.out_avals[:c_tree_out.num_leaves], _CARRY_HINT, carry=True)
        carry, changed = _strengthen(carry, c_avals, prog.out_avals[:nk])
        if not changed:
            break
    outs = P.scan.bind(*_named_axes([*consts, *carry, *xs_leaves], (prog,)), program=prog, num_consts=len(consts),
                       num_carry=nk, length=n, reverse=bool(reverse), unroll=unroll)
    return tree_util.tree_unflatten(carry_tree, outs[:nk]), tree_util.tree_unflatten(y_tree, outs[nk:])


def scan(f, init, xs=None, length=None, reverse=False, unroll=1):
    """Loop ``f`` over the leading axis of ``xs`` carrying state (mirrors ``jax.lax.scan``).

    Semantics::

        carry = init; ys = []
        for x in xs:            # reversed when reverse=True (ys keep their positions)
            carry, y = f(carry, x)
            ys.append(y)
        return carry, stack(ys)

    Args:
      f: ``(carry, x) -> (carry, y)``; the returned carry has the structure,
        shapes and dtypes of ``init``.
      init: the initial carry (pytree of arrays or scalars); weak-typed leaves follow
        the rule of ``while_loop``.
      xs: a pytree of arrays sharing the leading dimension ``length``, or ``None``
        (then ``x`` is ``None`` and ``length`` is required).
      length: the number of iterations (checked against ``xs``), converted by ``int`` as JAX converts it: a
        float, a NumPy scalar or a concrete array is taken (``3.5`` as 3, as in JAX).
      reverse: iterate from the end.
      unroll: iterations per loop step (an int >= 1, or ``True`` for all).

    Returns:
      ``(final carry, ys)`` with every leaf of ``ys`` stacked along a new leading axis.

    Raises:
      ``ShapeError`` for inconsistent leading dimensions or a carry whose
      shape changes; ``DTypeError`` for a carry whose dtype changes; ``TypeError``
      when ``f`` does not return a pair or changes the carry's structure;
      ``ValueError`` when neither ``xs`` nor ``length`` gives the length, or ``length`` is negative or NaN
      (``OverflowError`` for an infinite one, ``TypeError`` for one ``int`` refuses);
      ``ConcretizationError`` for a traced ``length``.

    Example::

        >>> total, partial_sums = fnarray.scan(lambda c, x: (c + x, c + x), 0.0, xs)
    """
    return _scan_impl("scan", f, init, xs, length, reverse, unroll)


# ============================================================================ rule helpers


def _batching():
    from fnarray.transforms import batching
    return batching


def _ad():
    from fnarray.transforms import ad
    return ad


def _fixpoint(step, flags):
    """The least superset of ``flags`` that ``step`` maps into itself (flags only ever turn on)."""
    flags = list(flags)
    for _ in range(len(flags) + 1):
        new = [a or b for a, b in zip(flags, step(flags), strict=True)]
        if new == flags:
            return flags
        flags = new
    return flags


def _split(seq, *sizes):
    out, i = [], 0
    for n in sizes:
        out.append(list(seq[i:i + n]))
        i += n
    out.append(list(seq[i:]))
    return out


def _pick(seq, flags, want=True):
    return [x for x, f in zip(seq, flags, strict=True) if bool(f) == want]


def _moveaxis(x, src, dst):
    nd = aval_of(x).ndim
    if src == dst:
        return x
    perm = [a for a in range(nd) if a != src]
    perm.insert(dst, src)
    return lax.transpose(x, perm)


def _to_batched(x, d, size, want):
    """``x`` with its batch axis at 0: moved when batched, broadcast when ``want`` and unbatched."""
    if d is not None:
        return _moveaxis(x, d, 0)
    if not want:
        return x
    a = aval_of(x)
    return lax.broadcast_in_dim(x, (size,) + tuple(a.shape), tuple(range(1, a.ndim + 1)))


def _axis_size(args, dims):
    for x, d in zip(args, dims, strict=True):
        if d is not None:
            return aval_of(x).shape[d]
    raise ValueError("a batching rule was called without a batched argument")


def _select_batched(pred, new, old):
    """Per batch element (axis 0): ``new`` where ``pred`` else ``old``."""
    a = aval_of(new)
    p = pred if a.ndim == 1 else lax.broadcast_in_dim(pred, a.shape, (0,))
    return lax.select_n(p, old, new)


def _nonzero(t):
    return t is not None and not isinstance(t, Zero)


def _zero_tangent(primal):
    return Zero(tangent_aval(aval_of(primal)))


def _ct_value(ct, aval):
    """A cotangent as an array: symbolic zeros (or ``None``) become zeros of ``aval``."""
    if ct is None:
        return zeros_like_aval(aval)
    if isinstance(ct, Zero):
        return zeros_like_aval(ct.aval)
    return ct


def _arg_aval(x):
    return x.aval if is_undefined(x) else aval_of(x)


def _zeros_eqn(aval):
    lit = Literal(np.zeros((), aval.dtype)[()], ShapedArray((), aval.dtype))
    out = Var(aval.strip_weak())
    return Eqn(P.broadcast_in_dim, (lit,), Params(shape=tuple(aval.shape), broadcast_dimensions=()), (out,)), out


# ============================================================================ batching rules


def _cond_batch(args, dims, *, branches):
    batch_program = _batching().batch_program
    size = _axis_size(args, dims)
    index, ops = args[0], args[1:]
    idim, odims = dims[0], dims[1:]
    ops_b = [d is not None for d in odims]
    n_out = len(branches[0].outvars)
    moved = [_to_batched(x, d, size, False) for x, d in zip(ops, odims, strict=True)]
    if idim is not None:
        # A batched predicate: run every branch on the whole batch, then select per element.
        idx = _moveaxis(index, idim, 0)
        idx = lax.max(lax.min(idx, np.int32(len(branches) - 1)), np.int32(0))
        # Each branch sees its operands only where it is taken and a stop_gradient copy elsewhere (as
        # JAX's cond batching does): reverse mode then sends no cotangent into an untaken branch, whose
        # own derivative may be inf or NaN there (log at 0), so 0 * inf cannot leak into the result.
        full = [_to_batched(x, d, size, True) for x, d in zip(ops, odims, strict=True)]
        results = []
        for i, br in enumerate(branches):
            bp, _ = batch_program(br, size, [True] * len(ops), [True] * n_out)
            results.append(eval_program(bp, [], [_taken_only(x, idx, i) for x in full]))
        outs = []
        for k in range(n_out):
            cases = [r[k] for r in results]
            shape = aval_of(cases[0]).shape
            sel = idx if len(shape) == 1 else lax.broadcast_in_dim(idx, shape, (0,))
            outs.append(cases[0] if len(cases) == 1 else lax.select_n(sel, *cases))
        return outs, [0] * n_out
    out_b = [False] * n_out
    for br in branches:
        _, ob = batch_program(br, size, ops_b, [False] * n_out)
        out_b = [a or b for a, b in zip(out_b, ob, strict=True)]
    new_branches = tuple(batch_program(br, size, ops_b, out_b)[0] for br in branches)
    outs = P.cond.bind(index, *moved, branches=new_branches)
    return outs, [0 if b else None for b in out_b]


def _taken_only(x, idx, i):
    """``x`` where branch ``i`` is taken (``idx == i``, batch axis 0), ``stop_gradient(x)`` elsewhere."""
    a = aval_of(x)
    if not dtypes.is_inexact(a.dtype):
        return x
    taken = lax.eq(idx, np.int32(i))
    if a.ndim > 1:
        taken = lax.broadcast_in_dim(taken, tuple(a.shape), (0,))
    return lax.select_n(taken, lax.stop_gradient(x), x)


def _while_batch(args, dims, *, cond_program, body_program, cond_nconsts, body_nconsts):
    batch_program = _batching().batch_program
    size = _axis_size(args, dims)
    cn, bn = cond_nconsts, body_nconsts
    flags = [d is not None for d in dims]
    cc_b, bc_b, carry_b = _split(flags, cn, bn)
    cc, bc, init = _split(args, cn, bn)
    cc_d, bc_d, init_d = _split(dims, cn, bn)
    carry_b = _fixpoint(lambda cb: batch_program(body_program, size, bc_b + cb, cb)[1], carry_b)
    _, (pred_b,) = batch_program(cond_program, size, cc_b + carry_b, [False])
    if pred_b:
        carry_b = [True] * len(carry_b)
    body_p, _ = batch_program(body_program, size, bc_b + carry_b, carry_b)
    cond_p, _ = batch_program(cond_program, size, cc_b + carry_b, [False])
    cc = [_to_batched(x, d, size, False) for x, d in zip(cc, cc_d, strict=True)]
    bc = [_to_batched(x, d, size, False) for x, d in zip(bc, bc_d, strict=True)]
    init = [_to_batched(x, d, size, b) for x, d, b in zip(init, init_d, carry_b, strict=True)]
    out_dims = [0 if b else None for b in carry_b]
    if not pred_b:
        outs = P.while_p.bind(*cc, *bc, *init, cond_program=cond_p, body_program=body_p,
                              cond_nconsts=cn, body_nconsts=bn)
        return outs, out_dims
    # A batched predicate: loop while any element runs; finished elements keep their carry.
    cc_av, bc_av, k_av = [aval_of(x) for x in cc], [aval_of(x) for x in bc], [aval_of(x) for x in init]

    def any_running(*vals):
        pred = eval_program(cond_p, [], list(vals))[0]
        return [lax.reduce_or(pred, (0,))]

    def frozen_body(*vals):
        ccv, bcv, carry = _split(vals, cn, bn)
        pred = eval_program(cond_p, [], ccv + carry)[0]
        new = eval_program(body_p, [], bcv + carry)
        return [_select_batched(pred, n, o) for n, o in zip(new, carry, strict=True)]
    new_cond, cond_consts = _closed(any_running, cc_av + k_av, "while_cond_batched")
    new_body, body_consts = _closed(frozen_body, cc_av + bc_av + k_av, "while_body_batched")
    outs = P.while_p.bind(*cond_consts, *cc, *body_consts, *cc, *bc, *init, cond_program=new_cond,
                          body_program=new_body, cond_nconsts=len(cond_consts) + cn,
                          body_nconsts=len(body_consts) + cn + bn)
    return outs, out_dims


def _xs_batch_to_axis1(x, d):
    """An xs operand batched at ``d`` laid out as ``(length, batch, ...)``."""
    nd = aval_of(x).ndim
    rest = [a for a in range(nd) if a != d]
    return lax.transpose(x, [rest[0], d] + rest[1:])


def _scan_batch(args, dims, *, program, num_consts, num_carry, length, reverse, unroll):
    batch_program = _batching().batch_program
    size = _axis_size(args, dims)
    nc, nk = num_consts, num_carry
    ny = len(program.outvars) - nk
    flags = [d is not None for d in dims]
    c_b, k_b, x_b = _split(flags, nc, nk)
    consts, init, xs = _split(args, nc, nk)
    c_d, k_d, x_d = _split(dims, nc, nk)

    def step(kb):
        return batch_program(program, size, c_b + kb + x_b, kb + [False] * ny)[1][:nk]
    k_b = _fixpoint(step, k_b)
    prog_b, out_b = batch_program(program, size, c_b + k_b + x_b, k_b + [False] * ny)
    consts = [_to_batched(x, d, size, False) for x, d in zip(consts, c_d, strict=True)]
    init = [_to_batched(x, d, size, b) for x, d, b in zip(init, k_d, k_b, strict=True)]
    xs = [x if d is None else _xs_batch_to_axis1(x, d) for x, d in zip(xs, x_d, strict=True)]
    outs = P.scan.bind(*consts, *init, *xs, program=prog_b, num_consts=nc, num_carry=nk, length=length,
                       reverse=reverse, unroll=unroll)
    return outs, [0 if b else None for b in k_b] + [1 if b else None for b in out_b[nk:]]


primitive_batchers[P.cond] = _cond_batch
primitive_batchers[P.while_p] = _while_batch
primitive_batchers[P.scan] = _scan_batch


# ============================================================================ JVP rules


def _cond_jvp(primals, tangents, *, branches):
    index, ops = primals[0], list(primals[1:])
    tops = list(tangents[1:])
    nz = [_nonzero(t) for t in tops]
    if not any(nz):
        outs = P.cond.bind(index, *ops, branches=branches)
        return outs, [_zero_tangent(o) for o in outs]
    jvp_program = _ad().jvp_program
    n_out = len(branches[0].outvars)
    out_nz = [False] * n_out
    for br in branches:
        _, o = jvp_program(br, nz, [False] * n_out)
        out_nz = [a or b for a, b in zip(out_nz, o, strict=True)]
    new_branches = tuple(jvp_program(br, nz, out_nz)[0] for br in branches)
    outs = P.cond.bind(index, *ops, *_pick(tops, nz), branches=new_branches)
    primal_out, t_iter = outs[:n_out], iter(outs[n_out:])
    return primal_out, [next(t_iter) if z else _zero_tangent(p) for p, z in zip(primal_out, out_nz, strict=True)]


def _while_jvp(primals, tangents, *, cond_program, body_program, cond_nconsts, body_nconsts):
    cn, bn = cond_nconsts, body_nconsts
    cc, bc, init = _split(primals, cn, bn)
    _, bct, initt = _split(tangents, cn, bn)
    nk = len(init)
    bc_nz = [_nonzero(t) for t in bct]
    k_nz = [_nonzero(t) for t in initt]
    params = {"cond_program": cond_program, "body_program": body_program, "cond_nconsts": cn, "body_nconsts": bn}
    if not any(bc_nz) and not any(k_nz):
        outs = P.while_p.bind(*primals, **params)
        return outs, [_zero_tangent(o) for o in outs]
    jvp_program = _ad().jvp_program
    k_nz = _fixpoint(lambda knz: jvp_program(body_program, bc_nz + knz, knz)[1], k_nz)
    if not any(k_nz):
        outs = P.while_p.bind(*primals, **params)
        return outs, [_zero_tangent(o) for o in outs]
    body_j, _ = jvp_program(body_program, bc_nz + k_nz, k_nz)
    nbt = sum(bc_nz)
    bc_v, k_v, bct_v, kt_v = _split(body_j.invars, bn, nk, nbt)
    body_j = Program([], bc_v + bct_v + k_v + kt_v, body_j.eqns, body_j.outvars)
    cond_j = Program([], list(cond_program.invars) + [Var(v.aval) for v in kt_v], cond_program.eqns,
                     cond_program.outvars)
    init_t = [instantiate_zeros(t) for t in _pick(initt, k_nz)]
    outs = P.while_p.bind(*cc, *bc, *_pick(bct, bc_nz), *init, *init_t, cond_program=cond_j, body_program=body_j,
                          cond_nconsts=cn, body_nconsts=bn + nbt)
    primal_out, t_iter = outs[:nk], iter(outs[nk:])
    return primal_out, [next(t_iter) if z else _zero_tangent(p) for p, z in zip(primal_out, k_nz, strict=True)]


def _scan_jvp(primals, tangents, *, program, num_consts, num_carry, length, reverse, unroll):
    nc, nk = num_consts, num_carry
    nx = len(primals) - nc - nk
    ny = len(program.outvars) - nk
    consts, init, xs = _split(primals, nc, nk)
    ct, kt, xt = _split(tangents, nc, nk)
    c_nz, k_nz, x_nz = [_nonzero(t) for t in ct], [_nonzero(t) for t in kt], [_nonzero(t) for t in xt]
    params = {"program": program, "num_consts": nc, "num_carry": nk, "length": length, "reverse": reverse,
              "unroll": unroll}
    if not any(c_nz + k_nz + x_nz):
        outs = P.scan.bind(*primals, **params)
        return outs, [_zero_tangent(o) for o in outs]
    jvp_program = _ad().jvp_program

    def step(knz):
        return jvp_program(program, c_nz + knz + x_nz, knz + [False] * ny)[1][:nk]
    k_nz = _fixpoint(step, k_nz)
    prog_j, out_nz = jvp_program(program, c_nz + k_nz + x_nz, k_nz + [False] * ny)
    nct, nkt = sum(c_nz), sum(k_nz)
    y_nz = list(out_nz[nk:])
    c_v, k_v, x_v, ct_v, kt_v, xt_v = _split(prog_j.invars, nc, nk, nx, nct, nkt)
    k_o, y_o, kt_o, yt_o = _split(prog_j.outvars, nk, ny, nkt)
    body = Program([], c_v + ct_v + k_v + kt_v + x_v + xt_v, prog_j.eqns, k_o + kt_o + y_o + yt_o)
    init_t = [instantiate_zeros(t) for t in _pick(kt, k_nz)]
    outs = P.scan.bind(*consts, *_pick(ct, c_nz), *init, *init_t, *xs, *_pick(xt, x_nz), program=body,
                       num_consts=nc + nct, num_carry=nk + nkt, length=length, reverse=reverse, unroll=unroll)
    k_out, kt_out, y_out, yt_out = _split(outs, nk, nkt, ny)
    kt_iter, yt_iter = iter(kt_out), iter(yt_out)
    k_tan = [next(kt_iter) if z else _zero_tangent(p) for p, z in zip(k_out, k_nz, strict=True)]
    y_tan = [next(yt_iter) if z else _zero_tangent(p) for p, z in zip(y_out, y_nz, strict=True)]
    return k_out + y_out, k_tan + y_tan


primitive_jvps[P.cond] = _cond_jvp
primitive_jvps[P.while_p] = _while_jvp
primitive_jvps[P.scan] = _scan_jvp


# ============================================================================ partial evaluation


def _all_known(trace, primitive, tracers, params):
    outs = primitive.bind(*[trace.known_value(t) for t in tracers], **params)
    return [trace.known(o) for o in outs]


def _cond_partial_eval(trace, tracers, *, branches):
    params = {"branches": branches}
    index_t, ops_t = tracers[0], list(tracers[1:])
    if not trace.is_known(index_t):
        return trace.stage(P.cond, list(tracers), Params(params))
    uk = [not trace.is_known(t) for t in ops_t]
    if not any(uk):
        return _all_known(trace, P.cond, tracers, params)
    pe = _ad().partial_eval_program
    n_out = len(branches[0].outvars)
    out_uk = [False] * n_out
    for br in branches:
        o = pe(br, uk, [False] * n_out)[2]
        out_uk = [a or b for a, b in zip(out_uk, o, strict=True)]
    splits = [pe(br, uk, out_uk) for br in branches]
    n_known_out = n_out - sum(out_uk)
    # Every branch produces the residuals of all branches: its own, and zeros in the others' slots.
    res_avals, offsets = [], []
    for known_p, _, _, num_res, _ in splits:
        offsets.append(len(res_avals))
        res_avals.extend(known_p.out_avals[len(known_p.outvars) - num_res:])
    known_brs, unknown_brs = [], []
    for (known_p, unknown_p, _, num_res, kconsts), off in zip(splits, offsets, strict=True):
        own = list(known_p.outvars[len(known_p.outvars) - num_res:])
        eqns, res_out = list(known_p.eqns), []
        for j, a in enumerate(res_avals):
            if off <= j < off + num_res:
                res_out.append(own[j - off])
            else:
                e, v = _zeros_eqn(a)
                eqns.append(e)
                res_out.append(v)
        known_brs.append((Program([], known_p.invars, eqns, list(known_p.outvars[:n_known_out]) + res_out),
                          kconsts))
        res_in = [Var(a) for a in res_avals]
        res_in[off:off + num_res] = unknown_p.invars[:num_res]
        unknown_brs.append(Program([], res_in + list(unknown_p.invars[num_res:]), unknown_p.eqns,
                                   unknown_p.outvars))
    index = trace.known_value(index_t)
    kconsts, known_brs = _merge_consts(known_brs)
    kouts = P.cond.bind(index, *kconsts, *[trace.known_value(t) for t in _pick(ops_t, uk, False)],
                        branches=tuple(known_brs))
    known_outs, res = kouts[:n_known_out], kouts[n_known_out:]
    uouts = trace.stage(P.cond, [index_t, *[trace.known(r) for r in res], *_pick(ops_t, uk)],
                        Params(branches=tuple(unknown_brs)))
    k_iter, u_iter = iter(known_outs), iter(uouts)
    return [next(u_iter) if u else trace.known(next(k_iter)) for u in out_uk]


def _while_partial_eval(trace, tracers, *, cond_program, body_program, cond_nconsts, body_nconsts):
    params = {"cond_program": cond_program, "body_program": body_program, "cond_nconsts": cond_nconsts,
              "body_nconsts": body_nconsts}
    uk = [not trace.is_known(t) for t in tracers]
    if not any(uk):
        return _all_known(trace, P.while_p, tracers, params)
    pe = _ad().partial_eval_program
    cc_uk, bc_uk, k_uk = _split(uk, cond_nconsts, body_nconsts)
    k_uk = _fixpoint(lambda kuk: pe(body_program, bc_uk + kuk, kuk)[2], k_uk)
    pred_uk = pe(cond_program, cc_uk + k_uk, [False])[2][0]
    if any(k_uk) or pred_uk:
        raise ReverseModeError(
            "reverse-mode differentiation (grad, vjp, jacrev) of while_loop is not supported: its number of "
            "iterations is only known at run time, so the values every iteration needs for the backward pass "
            "cannot be stored. Use fnarray.scan, or fnarray.fori_loop with static (Python int) bounds, which "
            "is a scan and supports reverse mode; forward mode (jvp, jacfwd) of while_loop works.")
    # Unknown inputs that no output depends on: any value of their type will do.
    vals = [zeros_like_aval(t.aval) if u else trace.known_value(t) for t, u in zip(tracers, uk, strict=True)]
    return [trace.known(o) for o in P.while_p.bind(*vals, **params)]


def _scan_partial_eval(trace, tracers, *, program, num_consts, num_carry, length, reverse, unroll):
    params = {"program": program, "num_consts": num_consts, "num_carry": num_carry, "length": length,
              "reverse": reverse, "unroll": unroll}
    uk = [not trace.is_known(t) for t in tracers]
    if not any(uk):
        return _all_known(trace, P.scan, tracers, params)
    pe = _ad().partial_eval_program
    nc, nk = num_consts, num_carry
    ny = len(program.outvars) - nk
    c_uk, k_uk, x_uk = _split(uk, nc, nk)
    c_t, k_t, x_t = _split(tracers, nc, nk)
    k_uk = _fixpoint(lambda kuk: pe(program, c_uk + kuk + x_uk, kuk + [False] * ny)[2][:nk], k_uk)
    known_p, unknown_p, out_uk, num_res, kconsts = pe(program, c_uk + k_uk + x_uk, k_uk + [False] * ny)
    y_uk = list(out_uk[nk:])
    known_vals = [trace.known_value(t) for t in _pick(c_t, c_uk, False) + _pick(k_t, k_uk, False)
                  + _pick(x_t, x_uk, False)]
    nkc = len(kconsts) + nc - sum(c_uk)
    nkk = nk - sum(k_uk)
    nky = ny - sum(y_uk)
    # Residuals that are known consts forwarded unchanged (a weight matrix) are loop-invariant: the
    # unknown scan takes them as consts. The others are stacked per iteration as extra ys.
    const_pos = {v: j for j, v in enumerate(known_p.invars[:nkc])}
    const_vals = list(kconsts) + known_vals[:nkc - len(kconsts)]
    res_out = list(known_p.outvars[len(known_p.outvars) - num_res:])
    invariant = [isinstance(v, Var) and v in const_pos for v in res_out]
    known_body = Program([], known_p.invars, known_p.eqns,
                         list(known_p.outvars[:nkk + nky]) + _pick(res_out, invariant, False))
    # The known scan runs now.
    kouts = P.scan.bind(*kconsts, *known_vals, program=known_body, num_consts=nkc, num_carry=nkk, length=length,
                        reverse=reverse, unroll=unroll)
    k_carry, k_ys, res_stacked = _split(kouts, nkk, nky)
    res_invariant = [const_vals[const_pos[v]] for v in _pick(res_out, invariant)]
    # The unknown scan: consts [unknown consts, invariant residuals], carries, xs [stacked residuals, xs].
    nuc, nuk = sum(c_uk), sum(k_uk)
    res_v, uc_v, uk_v, ux_v = _split(unknown_p.invars, num_res, nuc, nuk)
    unknown_body = Program([], uc_v + _pick(res_v, invariant) + uk_v + _pick(res_v, invariant, False) + ux_v,
                           unknown_p.eqns, unknown_p.outvars)
    staged_in = (_pick(c_t, c_uk) + [trace.known(r) for r in res_invariant] + _pick(k_t, k_uk)
                 + [trace.known(r) for r in res_stacked] + _pick(x_t, x_uk))
    uouts = trace.stage(P.scan, staged_in, Params(program=unknown_body, num_consts=nuc + len(res_invariant),
                                                  num_carry=nuk, length=length, reverse=reverse, unroll=unroll))
    u_carry, u_ys = uouts[:nuk], uouts[nuk:]
    kc, uc, ky, uy = iter(k_carry), iter(u_carry), iter(k_ys), iter(u_ys)
    carry_out = [next(uc) if u else trace.known(next(kc)) for u in k_uk]
    ys_out = [next(uy) if u else trace.known(next(ky)) for u in y_uk]
    return carry_out + ys_out


partial_eval_rules[P.cond] = _cond_partial_eval
partial_eval_rules[P.while_p] = _while_partial_eval
partial_eval_rules[P.scan] = _scan_partial_eval


# ============================================================================ transposition


def _cond_transpose(cts, index, *ops, branches):
    if is_undefined(index):
        raise TypeError("cond's index cannot be a linear input of a transposed program")
    transpose_program = _ad().transpose_program
    lin = [is_undefined(o) for o in ops]
    out_avals = [a.strip_weak() for a in branches[0].out_avals]
    cts = [_ct_value(ct, a) for ct, a in zip(cts, out_avals, strict=True)]
    new_branches = tuple(transpose_program(br, lin) for br in branches)
    outs = P.cond.bind(index, *_pick(ops, lin, False), *cts, branches=new_branches)
    it = iter(outs)
    return [None] + [next(it) if linear else None for linear in lin]


def _scan_transpose(cts, *args, program, num_consts, num_carry, length, reverse, unroll):
    transpose_program = _ad().transpose_program
    nc, nk = num_consts, num_carry
    consts, init, xs = _split(args, nc, nk)
    c_lin = [is_undefined(c) for c in consts]
    x_lin = [is_undefined(x) for x in xs]
    # Every carry is linear: a known value in a carry slot (an instantiated zero tangent) gets no cotangent.
    tprog = transpose_program(program, c_lin + [True] * nk + x_lin)
    carry_avals = [_arg_aval(k) for k in init]
    y_avals = list(program.out_avals[nk:])
    ct_carry = [_ct_value(ct, a) for ct, a in zip(cts[:nk], carry_avals, strict=True)]
    ct_ys = [_ct_value(ct, ShapedArray((length,) + tuple(a.shape), a.dtype))
             for ct, a in zip(cts[nk:], y_avals, strict=True)]
    nl_consts, nl_xs = _pick(consts, c_lin, False), _pick(xs, x_lin, False)
    lc_avals = [c.aval for c in _pick(consts, c_lin)]
    n1, n2, n3 = len(nl_consts), len(lc_avals), len(nl_xs)

    def body(*vals):
        nlc, acc, ctk, nlx, cty = _split(vals, n1, n2, nk, n3)
        outs = eval_program(tprog, [], nlc + nlx + ctk + cty)
        ct_c, ct_k, ct_x = _split(outs, n2, nk)
        return [lax.add(a, c) for a, c in zip(acc, ct_c, strict=True)] + ct_k + ct_x
    x_slice = [ShapedArray(aval_of(x).shape[1:], aval_of(x).dtype, aval_of(x).weak_type) for x in nl_xs]
    in_avals = ([aval_of(c) for c in nl_consts] + lc_avals + [aval_of(c) for c in ct_carry] + x_slice
                + [a.strip_weak() for a in y_avals])
    tbody, tconsts = _closed(body, in_avals, "scan_transpose")
    acc0 = [zeros_like_aval(a) for a in lc_avals]
    outs = P.scan.bind(*tconsts, *nl_consts, *acc0, *ct_carry, *nl_xs, *ct_ys, program=tbody,
                       num_consts=len(tconsts) + n1, num_carry=n2 + nk, length=length, reverse=not reverse,
                       unroll=unroll)
    ct_c, ct_init, ct_x = _split(outs, n2, nk)
    c_iter, x_iter = iter(ct_c), iter(ct_x)
    return ([next(c_iter) if linear else None for linear in c_lin]
            + [ct if is_undefined(k) else None for ct, k in zip(ct_init, init, strict=True)]
            + [next(x_iter) if linear else None for linear in x_lin])


primitive_transposes[P.cond] = _cond_transpose
primitive_transposes[P.scan] = _scan_transpose
staged["cond"] = cond
