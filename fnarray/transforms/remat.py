"""AD rules of ``call`` and ``remat``, and ``checkpoint`` (``jax.checkpoint``).

A ``call`` is differentiated through its sub-program; a ``remat`` keeps its
sub-program whole so that its residuals are recomputed in the backward pass
instead of stored (JAX's ``ad_checkpoint.py``).
"""

from __future__ import annotations

import functools

from fnarray import tree_util
from fnarray.core import primitives as P
from fnarray.core.avals import get_aval
from fnarray.core.builder import trace_to_program
from fnarray.core.interpreter import eval_program
from fnarray.core.passes import consts_as_inputs, dce
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
from fnarray.transforms.jvp import jvp_program
from fnarray.transforms.partial_eval import _params, partial_eval_program
from fnarray.transforms.transpose import transpose_program


def _call_jvp(primals, tangents, *, program, name="call"):
    nz = [not isinstance(t, Zero) for t in tangents]
    jprog, out_nz = jvp_program(program, nz)
    outs = P.call.bind(*primals, *[t for t in tangents if not isinstance(t, Zero)], program=jprog,
                       name=f"jvp({name})")
    n = len(program.outvars)
    t_iter = iter(outs[n:])
    t_out = [next(t_iter) if z else Zero(tangent_aval(v.aval)) for z, v in zip(out_nz, program.outvars,
                                                                                strict=True)]
    return outs[:n], t_out


def _call_partial_eval(trace, tracers, *, program, name="call"):
    unknowns = [not trace.is_known(t) for t in tracers]
    kprog, uprog, out_unknowns, num_res, kconsts = partial_eval_program(program, unknowns)
    known_in = [trace.known_value(t) for t in tracers if trace.is_known(t)]
    kouts = P.call.bind(*kconsts, *known_in, program=kprog, name=name)
    n_known = len(kouts) - num_res
    known_outs, res = kouts[:n_known], kouts[n_known:]
    res_tracers = [trace.known(r) for r in res]
    unknown_in = [t for t in tracers if not trace.is_known(t)]
    u_outs = trace.stage(P.call, res_tracers + unknown_in, _params(program=uprog, name=name))
    ki, ui = iter(known_outs), iter(u_outs)
    return [next(ui) if u else trace.known(next(ki)) for u in out_unknowns]


def _call_transpose(cts, *args, program, name="call"):
    linear = [isinstance(a, UndefinedPrimal) for a in args]
    tprog = transpose_program(program, linear)
    nonlin = [a for a in args if not isinstance(a, UndefinedPrimal)]
    cts = [instantiate_zeros(c) for c in cts]
    outs = iter(P.call.bind(*nonlin, *cts, program=tprog, name=f"transpose({name})"))
    return [next(outs) if l else None for l in linear]


primitive_jvps[P.call] = _call_jvp
partial_eval_rules[P.call] = _call_partial_eval
primitive_transposes[P.call] = _call_transpose


def checkpoint(fun, *, prevent_cse=True, static_argnums=()):
    """Rematerialization (mirrors ``jax.checkpoint``): in reverse mode, ``fun``'s
    intermediate values are recomputed in the backward pass instead of stored;
    only its inputs are kept as residuals (Griewank 1992's checkpointing; JAX's ``remat``).

    Args:
      fun: a function of arrays (pytrees), positional arguments only.
      prevent_cse: kept as a parameter of the ``remat`` primitive (as in JAX, it
        asks compilers not to merge the recomputation with the forward pass).
      static_argnums: an int or tuple of ints: positional arguments passed through
        as Python values (not traced).

    Returns:
      A function with ``fun``'s signature and outputs (same structure, shapes and
      dtypes).

    Raises:
      Nothing of its own; the wrapped function raises what ``fun`` raises while it
      is traced (e.g. ``ConcretizationError`` for Python control flow on a traced
      value).
    """
    static_argnums = (static_argnums,) if isinstance(static_argnums, int) else tuple(static_argnums)

    @functools.wraps(fun)
    def wrapped(*args):
        nd = {i % len(args) for i in static_argnums} if args else set()
        dyn = [a for i, a in enumerate(args) if i not in nd]

        def f(*d):
            it = iter(d)
            return fun(*[args[i] if i in nd else next(it) for i in range(len(args))])

        prog, consts, in_tree, out_tree, flat = _trace_flat(f, dyn)
        outs = P.remat.bind(*consts, *flat, program=consts_as_inputs(prog), prevent_cse=prevent_cse)
        return tree_util.tree_unflatten(out_tree, outs)

    return wrapped


remat = checkpoint


def _remat_jvp(primals, tangents, *, program, prevent_cse=True):
    nz = [not isinstance(t, Zero) for t in tangents]
    jprog, out_nz = jvp_program(program, nz)
    outs = P.remat.bind(*primals, *[t for t in tangents if not isinstance(t, Zero)], program=jprog,
                        prevent_cse=prevent_cse)
    n = len(program.outvars)
    t_iter = iter(outs[n:])
    return outs[:n], [next(t_iter) if z else Zero(tangent_aval(v.aval))
                      for z, v in zip(out_nz, program.outvars, strict=True)]


def _remat_partial_eval(trace, tracers, *, program, prevent_cse=True):
    unknowns = [not trace.is_known(t) for t in tracers]
    kprog, uprog, out_unknowns, num_res, kconsts = partial_eval_program(program, unknowns)
    known_in = [trace.known_value(t) for t in tracers if trace.is_known(t)]
    # The known outputs are computed now; the residuals of the known part are NOT kept:
    # the unknown part reruns the whole program from the inputs (rematerialization).
    n_known = sum(1 for u in out_unknowns if not u)
    kouts = P.remat.bind(*kconsts, *known_in, program=dce(kprog, [True] * n_known + [False] * num_res)[0],
                         prevent_cse=prevent_cse)
    full, _ = dce(program, out_unknowns)
    u_outs = trace.stage(P.remat, [trace.instantiate(t) if not u else t for t, u in zip(tracers, unknowns,
                                                                                          strict=True)],
                         _params(program=full, prevent_cse=prevent_cse))
    ki, ui = iter(kouts), iter(u_outs)
    return [next(ui) if u else trace.known(next(ki)) for u in out_unknowns]


def _remat_transpose(cts, *args, program, prevent_cse=True):
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
                             prevent_cse=prevent_cse))
    return [next(outs) if l else None for l in linear]


primitive_jvps[P.remat] = _remat_jvp
partial_eval_rules[P.remat] = _remat_partial_eval
primitive_transposes[P.remat] = _remat_transpose
