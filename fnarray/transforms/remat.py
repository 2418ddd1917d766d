"""AD rules of ``call`` and ``remat``, and ``checkpoint`` (``jax.checkpoint``).

A ``call`` is differentiated through its sub-program; a ``remat`` keeps its
sub-program whole so that its residuals are recomputed in the backward pass
instead of stored (JAX's ``ad_checkpoint.py``).
"""

from __future__ import annotations

import functools

import numpy as np

from fnarray import tree_util
from fnarray.core import primitives as P
from fnarray.core import avals
from fnarray.core.avals import get_aval
from fnarray.core.builder import trace_to_program
from fnarray.core.errors import check_callable, int_tuple
from fnarray.core.interpreter import eval_program
from fnarray.core.passes import consts_as_inputs
from fnarray.core.tracing import Tracer
from fnarray.transforms.ad_tables import (
    UndefinedPrimal,
    Zero,
    instantiate_zeros,
    partial_eval_rules,
    primitive_jvps,
    primitive_transposes,
    tangent_aval,
    zeros_like_aval,
)
from fnarray.transforms.custom_derivatives import _trace_flat
from fnarray.transforms.derived import derived
from fnarray.transforms.jvp import jvp_program
from fnarray.transforms.partial_eval import _params, partial_eval_program
from fnarray.transforms.transpose import transpose_program


def _call_jvp(primals, tangents, *, program, name="call"):
    nz = tuple(not isinstance(t, Zero) for t in tangents)
    jprog, out_nz = derived(program, "jvp", nz, lambda: jvp_program(program, nz))
    outs = P.call.bind(*primals, *[t for t in tangents if not isinstance(t, Zero)], program=jprog,
                       name=f"jvp({name})")
    n = len(program.outvars)
    t_iter = iter(outs[n:])
    t_out = [next(t_iter) if z else Zero(tangent_aval(v.aval)) for z, v in zip(out_nz, program.outvars,
                                                                                strict=True)]
    return outs[:n], t_out


def _call_partial_eval(trace, tracers, *, program, name="call"):
    unknowns = tuple(not trace.is_known(t) for t in tracers)
    split = derived(program, "partial_eval", unknowns, lambda: _closed_split(program, unknowns))
    kprog, uprog, out_unknowns, num_res, kconsts = split or partial_eval_program(program, unknowns)
    known_in = [trace.known_value(t) for t in tracers if trace.is_known(t)]
    kouts = P.call.bind(*kconsts, *known_in, program=kprog, name=name)
    n_known = len(kouts) - num_res
    known_outs, res = kouts[:n_known], kouts[n_known:]
    res_tracers = [trace.known(r) for r in res]
    unknown_in = [t for t in tracers if not trace.is_known(t)]
    u_outs = trace.stage(P.call, res_tracers + unknown_in, _params(program=uprog, name=name))
    ki, ui = iter(known_outs), iter(u_outs)
    return [next(ui) if u else trace.known(next(ki)) for u in out_unknowns]


def _closed_split(program, unknowns):
    """``partial_eval_program(program, unknowns)`` where its known side's constants (``kconsts``) are all arrays,
    so that ``derived`` may keep it for later calls; ``None`` (made at each call) where one is a tracer."""
    split = partial_eval_program(program, unknowns)
    return None if any(isinstance(c, Tracer) for c in split[4]) else split


def _call_transpose(cts, *args, program, name="call"):
    linear = tuple(isinstance(a, UndefinedPrimal) for a in args)
    tprog = derived(program, "transpose", linear, lambda: transpose_program(program, linear))
    nonlin = [a for a in args if not isinstance(a, UndefinedPrimal)]
    cts = [instantiate_zeros(c) for c in cts]
    outs = iter(P.call.bind(*nonlin, *cts, program=tprog, name=f"transpose({name})"))
    return [next(outs) if l else None for l in linear]


primitive_jvps[P.call] = _call_jvp
partial_eval_rules[P.call] = _call_partial_eval
primitive_transposes[P.call] = _call_transpose


def checkpoint(fun, *, prevent_cse=True, policy=None, static_argnums=()):
    """Rematerialization (mirrors ``jax.checkpoint``): in reverse mode, ``fun``'s
    intermediate values are recomputed in the backward pass instead of stored;
    only its inputs, and the values ``policy`` saves, are kept as residuals
    (Griewank 1992's checkpointing; JAX's ``remat``).

    Args:
      fun: a function of arrays (pytrees); keyword arguments are traced as the positional ones are (as JAX's).
      prevent_cse: kept as a parameter of the ``remat`` primitive (as in JAX, it
        asks compilers not to merge the recomputation with the forward pass).
      static_argnums: an int or tuple of ints (negative ones count from the end of the positional
        arguments): positional arguments passed through as Python values (not traced), so ``fun`` may
        branch or loop on them, as ``jax.checkpoint``'s.
      policy: ``None`` (save only the inputs) or a policy of
        ``fnarray.checkpoint_policies`` (``dots_saveable``, ``save_only_these_names(...)``...), or
        any ``policy(primitive, *in_avals, **params) -> bool`` saying which equations' outputs of the
        forward computation may be saved; the others are recomputed in the backward pass.

    Returns:
      A function with ``fun``'s signature and outputs (same structure, shapes and
      dtypes).

    Raises:
      TypeError: a ``policy`` that is not callable, ``static_argnums`` that are not ints.
      ValueError: (when called) a ``static_argnums`` entry outside ``[-len(args), len(args))``, as JAX's.
      Otherwise what ``fun`` raises while it is traced (e.g. ``ConcretizationError`` for Python control
      flow on a traced value).
    """
    if policy is not None:
        check_callable(policy, "checkpoint", "policy (None or a fnarray.checkpoint_policies policy)")
    check_callable(fun, "checkpoint")
    static_argnums = int_tuple(static_argnums, "checkpoint", "static_argnums")

    @functools.wraps(fun)
    def wrapped(*args, **kwargs):
        n = len(args)
        if any(not -n <= i < n for i in static_argnums):
            raise ValueError(f"checkpoint: static_argnums {static_argnums} must be in [-len(args), len(args)) "
                             f"= [{-n}, {n}) (positional arguments only; {n} given)")
        nd = {i % n for i in static_argnums}
        dyn = [a for i, a in enumerate(args) if i not in nd]

        def f(d, kw):
            it = iter(d)
            return fun(*[args[i] if i in nd else next(it) for i in range(n)], **kw)

        prog, consts, in_tree, out_tree, flat = _trace_flat(f, (dyn, kwargs))
        flat = [_as_operand(a) for a in flat]
        outs = P.remat.bind(*consts, *flat, program=consts_as_inputs(prog), prevent_cse=prevent_cse,
                            policy=policy)
        return tree_util.tree_unflatten(out_tree, outs)

    return wrapped


remat = checkpoint


def _as_operand(x):
    """A NumPy array argument as an fnarray array (as ``jit`` takes them); other leaves as they are."""
    if isinstance(x, np.ndarray):
        return avals.asarray(x)
    return x


def _remat_jvp(primals, tangents, *, program, prevent_cse=True, policy=None):
    nz = tuple(not isinstance(t, Zero) for t in tangents)
    jprog, out_nz = derived(program, "jvp", nz, lambda: jvp_program(program, nz))
    outs = P.remat.bind(*primals, *[t for t in tangents if not isinstance(t, Zero)], program=jprog,
                        prevent_cse=prevent_cse, policy=policy)
    n = len(program.outvars)
    t_iter = iter(outs[n:])
    return outs[:n], [next(t_iter) if z else Zero(tangent_aval(v.aval))
                      for z, v in zip(out_nz, program.outvars, strict=True)]


def _saveable(policy):
    """The policy as partial evaluation's ``saveable(primitive, in_avals, params)`` (``None``: nothing saved)."""
    if policy is None:
        return lambda prim, avals, params: False

    def saveable(prim, avals, params):
        return bool(policy(prim, *avals, **params))
    return saveable


def _remat_partial_eval(trace, tracers, *, program, prevent_cse=True, policy=None):
    # The known part runs now; of the values the unknown part reads, only those the policy saves (and the
    # inputs) become residuals: the unknown part computes the others again (rematerialization).
    unknowns = [not trace.is_known(t) for t in tracers]
    kprog, uprog, out_unknowns, num_res, kconsts = partial_eval_program(program, unknowns,
                                                                        saveable=_saveable(policy))
    known_in = [trace.known_value(t) for t in tracers if trace.is_known(t)]
    kouts = P.remat.bind(*kconsts, *known_in, program=kprog, prevent_cse=prevent_cse, policy=policy)
    n_known = len(kouts) - num_res
    known_outs, res = kouts[:n_known], list(kouts[n_known:])
    # A residual that is an input of the known part is that input itself (so it is saved "from the
    # argument", and no copy of it leaves the known program).
    k_inputs = dict(zip(kprog.invars, list(kconsts) + known_in, strict=True))
    for i, v in enumerate(kprog.outvars[n_known:]):
        if v in k_inputs:
            res[i] = k_inputs[v]
    res_tracers = [trace.known(r) for r in res]
    unknown_in = [t for t in tracers if not trace.is_known(t)]
    u_outs = trace.stage(P.remat, res_tracers + unknown_in,
                         _params(program=uprog, prevent_cse=prevent_cse, policy=policy))
    ki, ui = iter(known_outs), iter(u_outs)
    return [next(ui) if u else trace.known(next(ki)) for u in out_unknowns]


def _remat_transpose(cts, *args, program, prevent_cse=True, policy=None):
    # The staged program is the whole JVP (primal and tangent equations together, loops with primal
    # and tangent carries in one scan), so it is not linear as a whole: split it by the linear inputs
    # first, then the backward pass reruns the known (primal) part from the saved inputs and transposes
    # only the linear part. Transposing the mixed program directly failed on every loop
    # ("mul is linear in one operand at a time", "select_n is not linear in its selector").
    linear = [isinstance(a, UndefinedPrimal) for a in args]
    kprog, uprog, out_unknowns, num_res, kconsts = partial_eval_program(program, linear)
    n_known = sum(1 for u in out_unknowns if not u)
    n_lin = sum(linear)
    tuprog = transpose_program(uprog, [False] * num_res + [True] * n_lin)
    nonlin = [a for a in args if not isinstance(a, UndefinedPrimal)]
    u_cts = [instantiate_zeros(c) if c is not None else zeros_like_aval(v.aval.strip_weak())
             for c, v, u in zip(cts, program.outvars, out_unknowns, strict=True) if u]
    nonlin_avals = [get_aval(a) for a in nonlin]
    ct_avals = [get_aval(c) for c in u_cts]

    def backward(*xs):
        known_in, cts_in = list(xs[:len(nonlin)]), list(xs[len(nonlin):])
        res = eval_program(kprog, [], list(kconsts) + known_in)[n_known:]
        return eval_program(tuprog, [], list(res) + cts_in)

    bprog, bconsts = trace_to_program(backward, nonlin_avals + ct_avals)
    outs = iter(P.remat.bind(*bconsts, *nonlin, *u_cts, program=consts_as_inputs(bprog),
                             prevent_cse=prevent_cse, policy=policy))
    return [next(outs) if l else None for l in linear]


primitive_jvps[P.remat] = _remat_jvp
partial_eval_rules[P.remat] = _remat_partial_eval
primitive_transposes[P.remat] = _remat_transpose
