"""User-defined derivatives: ``custom_jvp`` and ``custom_vjp``.

They mirror ``jax.custom_jvp`` and ``jax.custom_vjp`` (JAX's
``custom_derivatives.py``): the function is staged as a ``custom_jvp_call`` or
``custom_vjp_call`` equation whose JVP is the user's rule; a ``custom_vjp``
linearizes to a ``custom_lin`` equation that transposes to the user's ``bwd``.
"""

from __future__ import annotations

import functools

import numpy as np

from fnarray import tree_util
from fnarray.core import dtypes, lax
from fnarray.core.array import Array
from fnarray.core import primitives as P
from fnarray.core.avals import get_aval
from fnarray.core.builder import trace_to_program
from fnarray.core.errors import check_callable, int_tuple
from fnarray.core.interpreter import eval_program
from fnarray.core.passes import consts_as_inputs
from fnarray.core.shaped import ShapedArray
from fnarray.core.tracing import Tracer, find_top_trace, is_scalar
from fnarray.transforms.ad_tables import (
    Zero,
    instantiate_zeros,
    primitive_jvps,
    primitive_transposes,
    tangent_aval,
    zeros_like_aval,
)
from fnarray.transforms.jvp import JVPTrace, JVPTracer
from fnarray.transforms.partial_eval import PartialEvalTrace


def _trace_flat(fun, args, kwargs=None):
    """Trace ``fun(*args)`` into a closed program; returns (program, consts, in_tree, out_tree, flat args)."""
    from fnarray.transforms.jit import leaf_aval
    flat, in_tree = tree_util.tree_flatten(tuple(args))
    avals = [leaf_aval(x) for x in flat]
    store = []

    def f(*xs):
        out = fun(*tree_util.tree_unflatten(in_tree, list(xs)))
        leaves, tree = tree_util.tree_flatten(out)
        store.append(tree)
        return leaves

    prog, consts = trace_to_program(f, avals)
    return prog, consts, in_tree, store[0], flat


def _typed_number(base, default_dtype):
    """A subclass of the Python number type ``base`` that carries its weak dtype, as JAX's literals
    (``jax._src.literals.TypedFloat``): ``x.dtype`` works, and arithmetic gives plain Python numbers back."""
    class Typed(base):
        __slots__ = ()
        weak_type, shape, ndim, size = True, (), 0, 1
        dtype = property(lambda self: default_dtype())

    Typed.__name__ = Typed.__qualname__ = "Typed" + base.__name__.capitalize()
    return Typed


_TYPED = {t: _typed_number(t, d) for t, d in ((int, dtypes.default_int), (float, dtypes.default_float),
                                              (complex, dtypes.default_complex))}


_ARRAYS = (Array, Tracer)


def _typed_scalars(tree):
    """``tree`` with its Python ``int``/``float``/``complex`` leaves as numbers that carry a weak dtype, as JAX
    passes a custom_jvp/custom_vjp function and its rules (``bool`` stays, as JAX's); the arguments at
    ``nondiff_argnums`` are not passed through here (JAX leaves them as they are)."""
    for a in tree:
        if not isinstance(a, _ARRAYS):
            break
    else:
        return tree   # the common call, on arrays: nothing to convert (a tree_map costs ~4 us a call)
    return tree_util.tree_map(lambda x: _TYPED[type(x)](x) if type(x) in _TYPED else x, tree)


def _check_rule_avals(rule, what, expected, got):
    """Raise naming ``rule`` when a custom rule's outputs differ in shape or dtype from ``expected``
    (as JAX checks custom_jvp tangents and custom_vjp cotangents). Python scalars stand for any
    inexact dtype (they are weak); ``None`` and symbolic zeros are accepted."""
    name = getattr(rule, "__name__", repr(rule))
    for i, (want, x) in enumerate(zip(expected, got, strict=True)):
        if x is None or isinstance(x, Zero):
            continue
        if isinstance(x, np.ndarray) and x.dtype == dtypes.float0:
            have = ShapedArray(x.shape, dtypes.float0)
        else:
            have = get_aval(x)
        same_dtype = have.dtype == want.dtype or (have.weak_type and is_scalar(x) and dtypes.is_inexact(want.dtype))
        if want.dtype == dtypes.float0:
            same_dtype = have.dtype == dtypes.float0 or not dtypes.is_inexact(have.dtype) or is_scalar(x)
        if have.shape != want.shape or not same_dtype:
            raise TypeError(f"custom rule {name} returned {what} {i} of type {have.dtype.name}{list(have.shape)}, "
                            f"expected {want.dtype.name}{list(want.shape)} (the shape and dtype of the "
                            f"corresponding {'input' if what == 'cotangent' else 'primal output'})"
                            "; fix the rule so that its outputs match")


def _split_nondiff(args, nondiff_argnums, owner):
    """``(static, dyn, rebuild)``: the arguments at ``nondiff_argnums``, the others, and a function
    putting a new list of the others back among the static ones in their original positions; a ``ValueError``
    naming ``owner`` (the ``custom_jvp``/``custom_vjp``) for a position that names none of ``args`` (was: taken
    modulo their count)."""
    for i in nondiff_argnums:
        if not -len(args) <= i < len(args):
            raise ValueError(f"{type(owner).__name__} function {getattr(owner.fun, '__name__', '')}: nondiff_argnums "
                             f"holds {i}, but the call has {len(args)} positional arguments; pass every argument "
                             "that nondiff_argnums names positionally")
    nd = {i % len(args) for i in nondiff_argnums}
    static = [args[i] for i in sorted(nd)]
    dyn = [a for i, a in enumerate(args) if i not in nd]

    def rebuild(dyn_args):
        it = iter(dyn_args)
        return [args[i] if i in nd else next(it) for i in range(len(args))]

    return static, dyn, rebuild


class custom_jvp:
    """A function with a user-defined JVP rule (mirrors ``jax.custom_jvp``).

    Use as a decorator, then ``@f.defjvp`` on ``jvp(primals, tangents) -> (primal_out, tangent_out)``.
    ``nondiff_argnums`` are passed first to the rule and get no tangents. Values the
    function closes over are treated as constants (no tangent flows to them).
    Reverse mode (``grad``, ``vjp``) transposes the linear part of the rule, as in JAX.

    Args:
      fun: the function (of arrays or pytrees, positional arguments only).
      nondiff_argnums: positions of arguments that are not differentiated (static
        Python values or arrays); they are passed first to the rule.

    Calling the wrapped function returns ``fun``'s output (same structure, shapes
    and dtypes).

    Raises:
      TypeError: (when called) no rule was defined with ``defjvp``/``defjvps``, or
        the rule does not return ``(primal_out, tangent_out)`` with the function's
        output structure.
    """

    def __init__(self, fun, nondiff_argnums=()):
        self.fun = check_callable(fun, "custom_jvp")
        self.nondiff_argnums = int_tuple(nondiff_argnums, "custom_jvp", "nondiff_argnums")
        self.jvp = None
        functools.update_wrapper(self, fun)

    def defjvp(self, jvp_fn):
        """Set the JVP rule (mirrors ``jax.custom_jvp.defjvp``); usable as a decorator.

        Args:
          jvp_fn: ``jvp_fn(*nondiff_args, primals, tangents) -> (primal_out, tangent_out)``; ``primals``
            and ``tangents`` are tuples of the differentiable arguments (tangents with their primals'
            shapes and dtypes, zeros instantiated); ``tangent_out`` has ``primal_out``'s structure.

        Returns:
          ``jvp_fn`` itself.

        Raises:
          Nothing here; a rule that returns the wrong structure raises ``TypeError`` when the
          function is differentiated.
        """
        self.jvp = check_callable(jvp_fn, "custom_jvp.defjvp", "the rule")
        return jvp_fn

    def defjvps(self, *tangent_fns):
        """One tangent function per argument (as ``jax.custom_jvp.defjvps``); their results are summed.

        Args:
          *tangent_fns: for argument ``i``, ``fn(t_i, primal_out, *primals)`` returning its tangent
            contribution (of ``primal_out``'s structure and shapes), or ``None`` for an argument
            with no contribution.

        Returns:
          None (as JAX's).

        Raises:
          Nothing here; contributions of mismatched structure raise from ``tree_util.tree_map``
          when the function is differentiated.
        """
        def jvp_fn(primals, tangents):
            out = self.fun(*primals)
            acc = None
            for fn, t in zip(tangent_fns, tangents, strict=False):
                if fn is None:
                    continue
                c = fn(t, out, *primals)
                acc = c if acc is None else tree_util.tree_map(lax.add, acc, c)
            return out, acc
        self.jvp = jvp_fn

    def __call__(self, *args):
        if self.jvp is None:
            raise TypeError(f"custom_jvp function {getattr(self.fun, '__name__', '')} has no JVP rule: define one "
                            "with @f.defjvp before calling it")
        static, dyn, rebuild = _split_nondiff(args, self.nondiff_argnums, self)
        new = _typed_scalars(dyn)
        if new is not dyn:
            dyn, args = new, rebuild(new)
        direct = self._call_directly(args, static, dyn, rebuild)
        if direct is not None:
            return direct[0]

        def f(*d):
            return self.fun(*rebuild(d))

        prog, consts, in_tree, out_tree, flat = _trace_flat(f, dyn)
        user_jvp = self.jvp
        n_consts = len(consts)

        def jvp_flat(primals, tangents):
            ps = _typed_scalars(tree_util.tree_unflatten(in_tree, list(primals[n_consts:])))
            ts = tree_util.tree_unflatten(in_tree, [instantiate_zeros(t) for t in tangents[n_consts:]])
            # Closed-over values that this JVP differentiates (tracers of the calling JVP level) are
            # constants for the rule: it runs with their primals, so no tangent reaches them and none
            # of them leaks out through the rule's Python closure (or re-enters this rule forever).
            own = {c._trace.main for c, p in zip(consts, primals[:n_consts], strict=True)
                   if isinstance(c, JVPTracer) and c.primal is p}
            if own:
                return _rule_with_constant_closure(lambda p, t: user_jvp(*static, p, t), (tuple(ps), tuple(ts)),
                                                   own, out_tree)
            out, t_out = user_jvp(*static, tuple(ps), tuple(ts)) if static else user_jvp(tuple(ps), tuple(ts))
            o_flat, o_tree = tree_util.tree_flatten(out)
            t_flat, t_tree = tree_util.tree_flatten(t_out)
            if o_tree != out_tree or t_tree != out_tree:
                raise TypeError(f"custom_jvp rule must return (primal_out, tangent_out) of the function's output "
                                f"structure {out_tree}; got {o_tree} and {t_tree}")
            _check_jvp_rule_outputs(user_jvp, prog, o_flat, t_flat)
            return o_flat, t_flat

        jvp_flat.__name__ = getattr(user_jvp, "__name__", "jvp")
        outs = P.custom_jvp_call.bind(*consts, *flat, call_program=consts_as_inputs(prog), jvp=jvp_flat,
                                      num_consts=n_consts, symbolic_zeros=False)
        return tree_util.tree_unflatten(out_tree, outs)

    def _call_directly(self, args, static, dyn, rebuild):
        """``(result,)`` computed without tracing ``fun``, as JAX does, or ``None`` for the staged path.

        With concrete arguments and no transformation, ``fun`` itself runs (once, on concrete values, so
        Python control flow on them works). When the innermost transformation is a JVP, only the rule
        runs, on the primals (concrete under ``grad``/``jvp`` outside ``jit``). A result that still holds
        a tracer of that level (``fun`` or the rule closes over a value being transformed) falls back
        to the staged path, which treats closed-over values as constants.
        """
        flat, _ = tree_util.tree_flatten(tuple(dyn))
        top = find_top_trace(flat)
        if top.main.level == 0:
            out = self.fun(*args)
            if not any(isinstance(o, Tracer) for o in tree_util.tree_leaves(out)):
                return (out,)
            return None
        in_tree = tree_util.tree_structure(tuple(dyn))
        if isinstance(top, PartialEvalTrace):
            # Known values of a partial evaluation (the primal side of grad) are computed one level down.
            tracers = [top.full_raise(a) for a in flat]
            if not all(t.is_known for t in tracers):
                return None
            out = self(*rebuild(tree_util.tree_unflatten(in_tree, [t.value for t in tracers])))
            return (tree_util.tree_map(top.known, out),)
        if not isinstance(top, JVPTrace):
            return None
        tracers = [top.full_raise(a) for a in flat]
        ps = _typed_scalars(tree_util.tree_unflatten(in_tree, [t.primal for t in tracers]))
        ts = tree_util.tree_unflatten(in_tree, [instantiate_zeros(t.tangent) for t in tracers])
        out, t_out = self.jvp(*static, tuple(ps), tuple(ts)) if static else self.jvp(tuple(ps), tuple(ts))
        o_flat, o_tree = tree_util.tree_flatten(out)
        t_flat, t_tree = tree_util.tree_flatten(t_out)
        if any(isinstance(x, JVPTracer) and x._trace.main is top.main for x in o_flat + t_flat):
            return None
        if t_tree != o_tree:
            raise TypeError(f"custom_jvp rule {getattr(self.jvp, '__name__', 'jvp')} must return (primal_out, "
                            f"tangent_out) of one structure; got {o_tree} and {t_tree}")
        o_avals = [get_aval(o) for o in o_flat]
        _check_rule_avals(self.jvp, "tangent output", [tangent_aval(a.strip_weak()) for a in o_avals], t_flat)
        outs = [JVPTracer(top, o, _rule_tangent(t, a)) for o, t, a in zip(o_flat, t_flat, o_avals, strict=True)]
        return (tree_util.tree_unflatten(o_tree, outs),)


def _check_jvp_rule_outputs(rule, prog, o_flat, t_flat):
    out_avals = [v.aval for v in prog.outvars]
    _check_rule_avals(rule, "primal output", [ShapedArray(a.shape, a.dtype) for a in out_avals], o_flat)
    _check_rule_avals(rule, "tangent output", [tangent_aval(a) for a in out_avals], t_flat)



def _rule_tangent(t, aval):
    """A custom rule's tangent for a primal of ``aval``: symbolic zero for integer primals, scalars cast."""
    want = tangent_aval(aval)
    if want.dtype == dtypes.float0 or t is None:
        return Zero(want)
    if is_scalar(t) or isinstance(t, np.ndarray):
        return lax.convert_element_type(np.asarray(t, want.dtype) if is_scalar(t) else t, want.dtype)
    return t


def _rule_with_constant_closure(rule, args, mains, out_tree):
    """``rule(*args)`` traced, then run with its captured tracers of ``mains`` replaced by their primals."""
    prog, consts, _, rule_tree, flat = _trace_flat(rule, args)
    consts = [c.primal if isinstance(c, JVPTracer) and c._trace.main in mains else c for c in consts]
    out, t_out = tree_util.tree_unflatten(rule_tree, eval_program(prog, consts, flat))
    o_flat, o_tree = tree_util.tree_flatten(out)
    t_flat, t_tree = tree_util.tree_flatten(t_out)
    if o_tree != out_tree or t_tree != out_tree:
        raise TypeError(f"custom_jvp rule must return (primal_out, tangent_out) of the function's output "
                        f"structure {out_tree}; got {o_tree} and {t_tree}")
    return o_flat, t_flat


def _custom_jvp_call_jvp(primals, tangents, *, call_program, jvp, num_consts, symbolic_zeros):
    outs, t_outs = jvp(list(primals), list(tangents))
    return outs, t_outs


primitive_jvps[P.custom_jvp_call] = _custom_jvp_call_jvp


class custom_vjp:
    """A function with a user-defined reverse-mode rule (mirrors ``jax.custom_vjp``).

    ``f.defvjp(fwd, bwd)``: ``fwd(*args) -> (out, residuals)``,
    ``bwd(residuals, ct_out) -> tuple of cotangents, one per argument``.
    Forward mode (``jvp``, ``jacfwd``) of such a function raises, as in JAX.

    Args:
      fun: the function (of arrays or pytrees, positional arguments only).
      nondiff_argnums: positions of arguments that are not differentiated; they are
        passed first to ``bwd`` and get no cotangent.

    Calling the wrapped function returns ``fun``'s output (same structure, shapes
    and dtypes); ``bwd`` must return cotangents with each argument's shape.

    Raises:
      TypeError: (when called) no rule was defined with ``defvjp``; ``fwd`` does not
        return the function's output structure; ``bwd`` does not return a tuple of
        one cotangent per differentiable argument; the function is differentiated in
        forward mode.
    """

    def __init__(self, fun, nondiff_argnums=()):
        self.fun = check_callable(fun, "custom_vjp")
        self.nondiff_argnums = int_tuple(nondiff_argnums, "custom_vjp", "nondiff_argnums")
        self.fwd = self.bwd = None
        functools.update_wrapper(self, fun)

    def defvjp(self, fwd, bwd):
        """Set the forward and backward rules (mirrors ``jax.custom_vjp.defvjp``).

        Args:
          fwd: ``fwd(*args) -> (out, residuals)``, ``out`` with the function's output structure;
            ``residuals`` any pytree of arrays.
          bwd: ``bwd(*nondiff_args, residuals, ct_out) -> tuple`` with one cotangent per
            differentiable argument (each of that argument's shape; ``None`` for zero).

        Returns:
          None.

        Raises:
          Nothing here; rules of the wrong structure raise ``TypeError`` when the function is
          called or differentiated.
        """
        self.fwd = check_callable(fwd, "custom_vjp.defvjp", "fwd")
        self.bwd = check_callable(bwd, "custom_vjp.defvjp", "bwd")

    def __call__(self, *args):
        if self.fwd is None:
            raise TypeError(f"custom_vjp function {getattr(self.fun, '__name__', '')} has no rule: define one "
                            "with f.defvjp(fwd, bwd) before calling it")
        static, dyn, rebuild = _split_nondiff(args, self.nondiff_argnums, self)
        new = _typed_scalars(dyn)
        if new is not dyn:
            dyn, args = new, rebuild(new)
        flat, in_tree = tree_util.tree_flatten(tuple(dyn))
        top = find_top_trace(flat)
        if top.main.level == 0:
            # No transformation: the function itself on the arguments (as JAX: Python numbers carry a dtype).
            out = self.fun(*args)
            if not any(isinstance(o, Tracer) for o in tree_util.tree_leaves(out)):
                return out
        out_tree = [None]  # the function's output structure: from its trace, or (differentiated) from fwd's
        fwd_flat, bwd_flat = self._flat_rules(static, dyn, rebuild, in_tree, flat, out_tree)
        if isinstance(top, JVPTrace):
            direct = _custom_vjp_directly(top, flat, fwd_flat, bwd_flat, in_tree)
            if direct is not None:
                return tree_util.tree_unflatten(out_tree[0], direct)

        prog, consts, _, out_tree[0], flat = _trace_flat(lambda *d: self.fun(*rebuild(d)), dyn)
        outs = P.custom_vjp_call.bind(*consts, *flat, call_program=consts_as_inputs(prog), fwd=fwd_flat,
                                      bwd=bwd_flat, num_consts=len(consts), in_tree=in_tree)
        return tree_util.tree_unflatten(out_tree[0], outs)

    def _flat_rules(self, static, dyn, rebuild, in_tree, flat, out_tree):
        """``fwd`` and ``bwd`` on flat lists: ``fwd_flat(primals)`` (after ``num_consts`` constants) ->
        ``(outs, residuals, residual tree)``, ``bwd_flat(residuals, residual tree, cts) -> cotangents``.
        ``out_tree[0]``: the function's output structure, which fwd's output must have once it is known
        (fwd sets it when the function was not traced: under ``grad`` only fwd and bwd run, as in JAX)."""
        fwd, bwd = self.fwd, self.bwd
        ct_avals = [tangent_aval(get_aval(x)) for x in flat]
        n_dyn = len(flat)

        def fwd_flat(primals):
            dyn_primals = tree_util.tree_unflatten(in_tree, list(primals[len(primals) - n_dyn:]))
            pair = fwd(*rebuild(_typed_scalars(dyn_primals)))
            if not isinstance(pair, (tuple, list)) or len(pair) != 2:
                # as JAX: an array of two rows would otherwise unpack into a wrong output and residual
                raise TypeError(f"custom_vjp fwd {getattr(fwd, '__name__', '')} must return a pair (output, "
                                f"residuals), got {_kind(pair)}; return the function's output and what bwd needs, e.g. "
                                "(y, (x,))")
            out, res = pair
            o_flat, o_tree = tree_util.tree_flatten(out)
            if out_tree[0] is None:
                out_tree[0] = o_tree
            elif o_tree != out_tree[0]:
                raise TypeError(f"custom_vjp fwd must return (output, residuals) with the function's output "
                                f"structure {out_tree[0]}, got {o_tree}")
            r_flat, r_tree = tree_util.tree_flatten(res)
            return o_flat, r_flat, r_tree

        def bwd_flat(res_flat, r_tree, cts_flat):
            res = tree_util.tree_unflatten(r_tree, list(res_flat))
            ct = tree_util.tree_unflatten(out_tree[0], list(cts_flat))
            cts = bwd(*static, res, ct) if static else bwd(res, ct)
            if not isinstance(cts, (tuple, list)) or len(cts) != len(dyn):
                raise TypeError(f"custom_vjp bwd must return a tuple of {len(dyn)} cotangents (one per "
                                f"differentiable argument), got {type(cts).__name__}"
                                f"{'' if not isinstance(cts, (tuple, list)) else f' of length {len(cts)}'}")
            c_flat = _bwd_cotangents(bwd, dyn, cts)
            _check_rule_avals(bwd, "cotangent", ct_avals, c_flat)
            return c_flat

        fwd_flat.__name__ = getattr(fwd, "__name__", "fwd")
        bwd_flat.__name__ = getattr(bwd, "__name__", "bwd")
        return fwd_flat, bwd_flat


def _kind(v) -> str:
    """What a rule returned, for an error: ``"a tuple of 3"``, ``"an array f32[2]"``."""
    if isinstance(v, (tuple, list)):
        return f"a {type(v).__name__} of {len(v)}"
    aval = getattr(v, "aval", None)
    return f"an array {aval.str_short()}" if hasattr(aval, "str_short") else f"a {type(v).__name__}"


def _custom_vjp_directly(top, flat, fwd_flat, bwd_flat, in_tree):
    """The flat outputs (tracers of ``top``, a JVP) of a custom_vjp function computed by its rules alone: fwd
    on the primals, the tangents through a ``custom_lin`` equation that transposes to bwd; the function
    itself is not traced (JAX's sequence under ``grad``: fwd, bwd). ``None`` when fwd's results hold
    tracers of ``top`` (fwd closes over a value being differentiated): then the staged path."""
    tracers = [top.full_raise(a) for a in flat]
    primals = [t.primal for t in tracers]
    outs, t_outs = _custom_vjp_call_jvp(primals, [t.tangent for t in tracers], call_program=None, fwd=fwd_flat,
                                        bwd=bwd_flat, num_consts=0, in_tree=in_tree)
    if any(isinstance(x, JVPTracer) and x._trace.main is top.main for x in list(outs) + list(t_outs)):
        return None
    return [JVPTracer(top, o, t) for o, t in zip(outs, t_outs, strict=True)]


def _bwd_cotangents(bwd, args, cts):
    """The flat cotangents of ``bwd``'s result, one per leaf of ``args`` (``None`` for a whole argument
    stands for zeros of every leaf, as in JAX); a structure that differs from the argument's raises."""
    out = []
    for i, (a, c) in enumerate(zip(args, cts, strict=True)):
        a_leaves, a_tree = tree_util.tree_flatten(a)
        if c is None:
            out.extend([None] * len(a_leaves))
            continue
        c_leaves, c_tree = tree_util.tree_flatten(c, is_leaf=lambda x: x is None)
        if c_tree != a_tree and len(c_leaves) != len(a_leaves):
            raise TypeError(f"custom_vjp bwd {getattr(bwd, '__name__', 'bwd')} returned a cotangent for argument "
                            f"{i} with structure {c_tree}, expected the argument's structure {a_tree}")
        out.extend(c_leaves)
    return out


def _custom_vjp_call_jvp(primals, tangents, *, call_program, fwd, bwd, num_consts, in_tree):
    outs, res, r_tree = fwd(list(primals))
    out_avals = tuple(tangent_aval(get_aval(o)) for o in outs)
    if all(isinstance(t, Zero) for t in tangents[num_consts:]):
        return outs, [Zero(a) for a in out_avals]
    ts = [instantiate_zeros(t) for t in tangents[num_consts:]]
    in_avals = tuple(get_aval(p) for p in primals[num_consts:])
    t_outs = P.custom_lin.bind(*res, *ts, num_res=len(res), out_avals=out_avals,
                               bwd=_Bwd(bwd, r_tree, in_avals), in_tree=in_tree)
    return outs, t_outs


class _Bwd:
    """The user's bwd with its residual structure; hashable by identity (an equation param)."""

    def __init__(self, bwd, r_tree, in_avals):
        self.bwd, self.r_tree, self.in_avals = bwd, r_tree, in_avals
        self.__name__ = getattr(bwd, "__name__", "bwd")

    def __call__(self, res, cts):
        return self.bwd(res, self.r_tree, cts)


def _custom_lin_transpose(cts, *args, num_res, out_avals, bwd, in_tree=None):
    res = args[:num_res]
    cts = [instantiate_zeros(c) if isinstance(c, Zero) else c for c in cts]
    c_in = bwd(res, cts)
    out = [None] * num_res
    for c, a in zip(c_in, bwd.in_avals, strict=True):
        out.append(zeros_like_aval(tangent_aval(a)) if c is None else c)
    return out


primitive_jvps[P.custom_vjp_call] = _custom_vjp_call_jvp
primitive_transposes[P.custom_lin] = _custom_lin_transpose


def _custom_lin_jvp(primals, tangents, **params):
    raise TypeError("a custom_vjp function was differentiated twice in forward mode; custom_vjp defines reverse "
                    "mode only (as in JAX). Use custom_jvp for higher-order forward mode.")


primitive_jvps[P.custom_lin] = _custom_lin_jvp
