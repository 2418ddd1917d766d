"""``fnarray.lax.custom_root`` and ``custom_linear_solve``: solvers differentiated implicitly (``jax.lax``'s).

Neither differentiates through the solver's iterations. ``custom_root`` differentiates ``f(x, θ) = 0`` at its
root: ``dx = -(∂f/∂x)^-1 (∂f/∂θ) dθ``, the system solved by the user's ``tangent_solve`` (a ``custom_jvp``; reverse
mode transposes ``tangent_solve``, as in JAX). ``custom_linear_solve`` differentiates ``x = A(θ)^-1 b``: with a
``transpose_solve`` it is a ``custom_vjp`` whose backward pass solves the transposed system (reverse mode never
transposes the solver: an iterative one made of ``while_loop`` could not be; no forward mode, fnarray having no
custom transpose rule), without one a ``custom_jvp`` with ``dx = A^-1 (db - dA x)`` solved by ``solve``. ``θ`` are
the values ``f``/``matvec`` close over: both are traced once (closure conversion) so that those values become
arguments with derivatives; the values the solvers close over get none (``stop_gradient``), as in JAX, except
``tangent_solve``'s, which a second derivative differentiates (JAX's too). Every closed-over value reaches the
``custom_jvp``/``custom_vjp`` as an argument: closed over, an outer ``jvp``'s tracer leaked into the rule's tangent.
"""

from __future__ import annotations

import numpy as np

from fnarray import tree_util
from fnarray.core.builder import trace_to_program
from fnarray.core.interpreter import eval_program
from fnarray.transforms.ad import jvp, stop_gradient, vjp
from fnarray.transforms.custom_derivatives import custom_jvp, custom_vjp
from fnarray.transforms.linear_transpose import linear_transpose

__all__ = ["custom_linear_solve", "custom_root"]


def traced_once(fn, example, what):
    """``fn(*example)`` traced once: ``(program, consts, output structure)``, ``consts`` the values ``fn`` closes
    over (arrays, outer tracers) in the order of the program's constvars."""
    from fnarray.transforms.jit import leaf_aval
    flat, in_tree = tree_util.tree_flatten(example)
    out_trees = []

    def flat_fun(*xs):
        leaves, tree = tree_util.tree_flatten(fn(*tree_util.tree_unflatten(in_tree, list(xs))))
        out_trees.append(tree)
        return leaves

    prog, consts = trace_to_program(flat_fun, [leaf_aval(x) for x in flat], debug_name=what)
    return prog, _arrays(consts), out_trees[0]


def _arrays(leaves):
    """``leaves`` with NumPy arrays made fnarray arrays (the primitives take no NumPy arrays)."""
    import fnarray.numpy as fnp
    return [fnp.asarray(c) if isinstance(c, np.ndarray) else c for c in leaves]


def _closure_convert(fn, example, what):
    """``(converted, consts)``: ``converted(consts, x) == fn(x)`` with the values ``fn`` closes over as ``consts``
    (differentiated through them); ``fn`` maps a pytree like ``example`` to one of the same structure (TypeError
    otherwise)."""
    prog, consts, out_tree = traced_once(fn, (example,), what)
    in_tree = tree_util.tree_structure(example)
    if out_tree != in_tree:
        raise TypeError(f"{what} must return the structure of its input {in_tree}, got {out_tree}")

    def converted(cs, x):
        return tree_util.tree_unflatten(out_tree, eval_program(prog, list(cs), _arrays(tree_util.tree_leaves(x))))

    return converted, consts


def _cut_closure(fn, example, what):
    """``(call, consts)``: ``call(consts, *args) == fn(*args)`` (arguments like ``example``) with the values ``fn``
    closes over as ``consts``, cut from differentiation (``stop_gradient``) as JAX's solvers' are: a ``solve`` that
    closes over the matrix gives it no derivative (``matvec`` does). A ``custom_vjp`` takes them as arguments: a
    traced value closed over would reach its residuals."""
    prog, consts, out_tree = traced_once(fn, example, what)

    def call(cs, *args):
        return tree_util.tree_unflatten(out_tree, eval_program(prog, list(cs), _arrays(tree_util.tree_leaves(args))))

    return call, [stop_gradient(c) for c in consts]


def _neg(tree):
    return tree_util.tree_map(lambda t: -t, tree)


def _sub(a, b):
    return tree_util.tree_map(lambda x, y: x - y, a, b)


def _zeros(tree):
    import fnarray.numpy as fnp
    return tree_util.tree_map(fnp.zeros_like, tree)


def _split_aux(out, has_aux, who):
    if not has_aux:
        return out, None
    if not (isinstance(out, (tuple, list)) and len(out) == 2):
        raise TypeError(f"{who} with has_aux=True must return a pair (solution, aux), got {type(out).__name__}")
    return out[0], out[1]


def _implicitly_differentiated(solve_c, fn_c, tangent_solve_c, start_tangent, has_aux, who):
    """``run(cs, scs, tcs, start) = solve_c(scs, cs, start)`` as a ``custom_jvp``: at its result ``x``
    (``fn_c(cs, x)`` fixed: 0 for a root, ``b`` for a linear solve), ``dx = tangent_solve_c(scs, tcs, cs, x,
    rhs)`` with ``rhs = d(start) - (∂fn/∂cs) dcs`` where ``start_tangent`` (the right-hand side ``b`` of a linear
    system), else ``-(∂fn/∂cs) dcs`` (a root: the initial guess gets no derivative); ``aux`` a zero tangent.
    ``scs``/``tcs`` are the values the solvers close over (``_cut_closure``), arguments so that the rule sees
    their primal values: closed over, an outer ``jvp``'s tracer reached the rule's tangent (a tracer leak)."""
    @custom_jvp
    def run(cs, scs, tcs, start):
        return solve_c(scs, cs, start)

    @run.defjvp
    def run_jvp(primals, tangents):
        cs, scs, tcs, start = primals
        out = run(cs, scs, tcs, start)
        x, aux = _split_aux(out, has_aux, who)
        _, dfn = jvp(lambda c: fn_c(c, x), (cs,), (tangents[0],))
        dx = tangent_solve_c(scs, tcs, cs, x, _sub(tangents[3], dfn) if start_tangent else _neg(dfn))
        return out, ((dx, _zeros(aux)) if has_aux else dx)

    return run


def custom_root(f, initial_guess, solve, tangent_solve, has_aux=False):
    """A root of ``f`` found by ``solve``, differentiated implicitly (``jax.lax.custom_root``).

    Args:
      f: a function of a pytree ``x`` (``initial_guess``'s structure) returning one of the same structure; it may
        close over arrays, which are differentiated.
      initial_guess: the starting point (a pytree of arrays); not differentiated.
      solve: ``solve(f, initial_guess) -> x`` with ``f(x) ≈ 0`` (with ``has_aux``: ``(x, aux)``); any
        fnarray code (a ``while_loop`` Newton iteration...), never differentiated itself.
      tangent_solve: ``tangent_solve(g, y) -> z`` with ``g(z) = y`` for the linear function ``g`` (``f``
        linearized at the root), e.g. ``lambda g, y: y / g(1.0)`` for a scalar, or
        ``lambda g, y: fnp.linalg.solve(fa.jacobian(g)(y), y)``. Reverse mode transposes it (as JAX).
      has_aux: ``solve`` returns ``(x, aux)``; ``aux`` gets no derivative.

    Returns: ``x`` (``initial_guess``'s structure), or ``(x, aux)``.

    Raises: ``TypeError`` when ``f`` changes the structure of its input or ``solve`` with ``has_aux`` returns no
      pair.

    Source: JAX's ``custom_root`` (jax/_src/lax/control_flow/solves.py) and the implicit function theorem.
    """
    f_c, consts = _closure_convert(f, initial_guess, "custom_root's f")
    solve_c, solve_consts = _cut_closure(lambda cs, x0: solve(lambda x: f_c(cs, x), x0), (consts, initial_guess),
                                         "custom_root's solve")

    def solve_tangent(cs, sol, y):
        return tangent_solve(lambda v: jvp(lambda x: f_c(cs, x), (sol,), (v,))[1], y)

    # traced at the guess's types (as JAX's: the root and the right-hand side have them); the values it closes over
    # keep their derivatives (a hessian differentiates the tangent through them, as JAX's)
    tangent_prog, tangent_consts, tangent_tree = traced_once(solve_tangent, (consts, initial_guess, initial_guess),
                                                             "custom_root's tangent_solve")

    def tangent(scs, tcs, cs, x, rhs):
        args = _arrays(tree_util.tree_leaves((cs, x, rhs)))
        return tree_util.tree_unflatten(tangent_tree, eval_program(tangent_prog, list(tcs), args))

    root = _implicitly_differentiated(solve_c, f_c, tangent, False, has_aux, "custom_root's solve")
    return root(consts, solve_consts, tangent_consts, initial_guess)


def _transposed_solve(mv_c, consts, example, solve, transpose_solve, has_aux):
    """``lin(cs, rhs) = A(cs)^-1 rhs`` (with ``aux``) as a ``custom_vjp``: its backward pass solves ``A^T λ = x̄``
    with ``transpose_solve`` (``A^T`` by ``linear_transpose`` of ``matvec``) and gives ``rhs`` the cotangent
    ``λ``, the closed-over values ``-(∂(A x)/∂cs)^T λ``; ``aux`` gets none. ``solve`` is ``_cut_closure``'s
    pair; the solvers' own closed-over values are arguments of the ``custom_vjp`` (no cotangent)."""
    def solve_transposed(cs, rhs):
        vecmat = linear_transpose(lambda v: mv_c(cs, v), example)
        return transpose_solve(lambda v: vecmat(v)[0], rhs)

    solve_c, solve_consts = solve
    transpose_c, transpose_consts = _cut_closure(solve_transposed, (consts, example),
                                                 "custom_linear_solve's transpose_solve")

    def lin(cs, scs, tcs, rhs):
        return solve_c(scs, cs, rhs)

    def fwd(cs, scs, tcs, rhs):
        out = solve_c(scs, cs, rhs)
        return out, (cs, scs, tcs, _split_aux(out, has_aux, "custom_linear_solve's solve")[0])

    def bwd(res, ct):
        cs, scs, tcs, x = res
        ct = ct[0] if has_aux else ct
        lam = _split_aux(transpose_c(tcs, cs, ct), has_aux, "custom_linear_solve's transpose_solve")[0]
        _, pull = vjp(lambda c: mv_c(c, x), cs)
        return pull(_neg(lam))[0], _zeros(scs), _zeros(tcs), lam

    lin = custom_vjp(lin)
    lin.defvjp(fwd, bwd)
    return lambda cs, rhs: lin(cs, solve_consts, transpose_consts, rhs)


def custom_linear_solve(matvec, b, solve, transpose_solve=None, symmetric=False, has_aux=False):
    """The solution ``x`` of ``matvec(x) = b`` found by ``solve``, differentiated implicitly
    (``jax.lax.custom_linear_solve``).

    Args:
      matvec: a linear function ``x -> A x`` of pytrees of ``b``'s structure; it may close over arrays (the
        matrix), which are differentiated.
      b: the right-hand side (a pytree of arrays).
      solve: ``solve(matvec, b) -> x`` (with ``has_aux``: ``(x, aux)``).
      transpose_solve: ``transpose_solve(vecmat, b) -> x`` solving ``A^T x = b``.
      symmetric: ``A`` is symmetric: ``transpose_solve`` is ``solve``.
      has_aux: ``solve`` returns ``(x, aux)``; ``aux`` gets no derivative.

    Derivatives (the difference from JAX, which has a primitive with a transpose rule for this): given
    ``transpose_solve`` (or ``symmetric``), reverse mode (``grad``, ``vjp``) never differentiates ``solve``:
    ``b̄ = A^-T x̄`` by ``transpose_solve``, the closed-over values ``-(∂(A x)/∂θ)^T b̄`` (a ``custom_vjp``: a
    ``while_loop`` conjugate gradient is fine), and forward mode (``jvp``, ``jacfwd``) raises. Without it
    (JAX raises in reverse mode then) forward mode gives ``dx = solve(matvec, db - dA x)`` and reverse mode
    transposes that, which works where ``solve`` is made of transposable operations (``fnp.linalg.solve``).

    Returns: ``x`` (``b``'s structure), or ``(x, aux)``.

    Raises: ``TypeError`` when ``matvec`` changes the structure of ``b`` or ``solve`` with ``has_aux`` returns no
      pair.

    Source: JAX's ``custom_linear_solve`` (jax/_src/lax/control_flow/solves.py): ``dx = A^-1 (db - dA x)`` and
    ``b̄ = A^-T x̄``.
    """
    mv_c, consts = _closure_convert(matvec, b, "custom_linear_solve's matvec")
    transpose_solve = solve if symmetric else transpose_solve
    solve_cut = _cut_closure(lambda cs, rhs: solve(lambda x: mv_c(cs, x), rhs), (consts, b),
                             "custom_linear_solve's solve")
    if transpose_solve is not None:
        return _transposed_solve(mv_c, consts, b, solve_cut, transpose_solve, has_aux)(consts, b)
    solve_c, solve_consts = solve_cut
    linear_solve = _implicitly_differentiated(
        solve_c, mv_c,
        lambda scs, tcs, cs, x, rhs: _split_aux(solve_c(scs, cs, rhs), has_aux, "custom_linear_solve's solve")[0],
        True, has_aux, "custom_linear_solve's solve")
    return linear_solve(consts, solve_consts, [], b)
