"""Forward mode: the JVP trace and ``jvp``, and the JVP of a closed program.

Each tracer of a ``JVPTrace`` carries a primal and a tangent; a primitive's
rule comes from ``ad_tables.primitive_jvps`` (JAX's ``ad.JVPTrace``; Autodidax
part 1, "Forward-mode autodiff with jvp").
"""

from __future__ import annotations

import numpy as np

from fnarray import tree_util
from fnarray.core import dtypes
from fnarray.core.array import Array
from fnarray.core.avals import get_aval
from fnarray.core.builder import trace_to_program
from fnarray.core.errors import DTypeError, ShapeError, check_callable, type_name
from fnarray.core.interpreter import eval_program
from fnarray.core.ir import Program
from fnarray.core.passes import consts_as_inputs
from fnarray.core.shaped import ShapedArray
from fnarray.core.tracing import Trace, Tracer, is_scalar, new_main
from fnarray.transforms.partial_eval import PETracer
from fnarray.transforms import ad_rules  # noqa: F401  (fills the rule tables)
from fnarray.transforms.ad_tables import (
    Zero,
    instantiate_zeros,
    primitive_jvps,
    tangent_aval,
    zeros_like_aval,
)


def _arrays(leaves):
    """NumPy arrays among the leaves become fnarray arrays (as JAX accepts NumPy inputs)."""
    from fnarray.devices.placement import array_from_numpy
    return [array_from_numpy(x) if isinstance(x, np.ndarray) else x for x in leaves]




# ================================================================================ forward mode


class JVPTracer(Tracer):
    __slots__ = ("primal", "tangent", "_av")

    def __init__(self, trace, primal, tangent):
        self._trace = trace
        self.primal = primal
        self.tangent = tangent
        self._av = None  # the primal's aval, made at its first read (``primal`` never changes)

    @property
    def aval(self):
        av = self._av
        if av is None:
            av = self._av = get_aval(self.primal)
        return av

    def _concrete(self, what):
        p = self.primal
        if isinstance(p, Array):
            return p._concrete(what)
        return np.asarray(p)

    def __repr__(self):
        """JAX's text: ``grad``'s tracer (its tangent staged by partial evaluation) shows the tangent's type,
        ``jvp``'s both values."""
        t = self.tangent
        if isinstance(t, PETracer) and not t.is_known:
            return f"GradTracer(primal={self.primal!r}, typeof(tangent)={t.aval.str_short()})"
        return f"JVPTracer(primal={self.primal!r}, tangent={t!r})"


class JVPTrace(Trace):
    __slots__ = ()

    def pure(self, val):
        return JVPTracer(self, val, Zero(tangent_aval(get_aval(val))))

    lift = pure

    def process_primitive(self, primitive, tracers, params):
        primals = [t.primal for t in tracers]
        tangents = [t.tangent for t in tracers]
        rule = primitive_jvps.get(primitive)
        if rule is None:
            raise NotImplementedError(f"differentiation rule for '{primitive.name}' is not implemented")
        out_p, out_t = rule(primals, tangents, **params)
        if primitive.multiple_results:
            return [JVPTracer(self, p, t) for p, t in zip(out_p, out_t, strict=True)]
        return JVPTracer(self, out_p, out_t)


def _jvp_flat(fun_flat, primals, tangents):
    """Run ``fun_flat`` with JVP tracers; returns (primal outs, tangent outs — possibly Zero)."""
    with new_main(JVPTrace) as main:
        trace = JVPTrace(main)
        ins = [JVPTracer(trace, p, t) for p, t in zip(primals, tangents, strict=True)]
        outs = fun_flat(*ins)
        try:
            outs = [trace.full_raise(o) for o in outs]
        except TypeError:
            _check_outputs(outs)
            raise
        return [o.primal for o in outs], [o.tangent for o in outs]


def _check_outputs(outs):
    """Raise naming the differentiated function's output that is not an array or a scalar (as JAX rejects it)."""
    for i, o in enumerate(outs):
        if not (isinstance(o, (Tracer, Array, np.ndarray)) or is_scalar(o)):
            raise TypeError(f"the function being differentiated returned {type_name(o)} {o!r:.60} as its output "
                            f"(leaf {i} of its result); its outputs must be arrays or scalars (or pytrees of them)")


def _check_tangent(p, t, i):
    pa = get_aval(p)
    if isinstance(t, Zero):
        return t
    ta = get_aval(t) if not (isinstance(t, np.ndarray) and t.dtype == dtypes.float0) else ShapedArray(
        t.shape, dtypes.float0)
    want = tangent_aval(pa)
    if want.dtype == dtypes.float0:
        if ta.shape != pa.shape and ta.shape != ():
            raise ShapeError(f"jvp: tangent {i} has shape {ta.shape}, primal has shape {pa.shape}")
        return Zero(want)
    if ta.shape != pa.shape:
        raise ShapeError(f"jvp: primal {i} has shape {pa.shape} but its tangent has shape {ta.shape}; "
                         "tangents must match their primals' shapes")
    if ta.dtype != pa.dtype:
        raise DTypeError(f"jvp: primal {i} has dtype {pa.dtype.name} but its tangent has dtype {ta.dtype.name}; "
                         "tangents must have their primals' dtypes")
    return t


def _float0_zeros(aval):
    return np.zeros(aval.shape, dtype=dtypes.float0)


def _out_tangent(t, p):
    if isinstance(t, Zero):
        a = tangent_aval(get_aval(p))
        return _float0_zeros(a) if a.dtype == dtypes.float0 else zeros_like_aval(a)
    return t


def jvp(fun, primals, tangents, has_aux=False):
    """Forward-mode derivative (mirrors ``jax.jvp``).

    Args:
      fun: a function of arrays (pytrees) returning arrays (pytrees).
      primals: a tuple or list of the arguments.
      tangents: the same structure; each tangent has its primal's shape and dtype
        (integer and bool primals take ``float0`` tangents or zeros).
      has_aux: if true, ``fun`` returns ``(output, aux)``; ``aux`` is returned
        undifferentiated.

    Returns:
      ``(primals_out, tangents_out)``: ``fun(*primals)`` and the Jacobian applied to
      ``tangents``, with the output's structure, shapes and dtypes (integer and bool
      outputs get ``float0`` tangents); ``(primals_out, tangents_out, aux)`` with
      ``has_aux``.

    Raises:
      TypeError: ``primals``/``tangents`` are not tuples or lists, their structures
        differ, or with ``has_aux`` ``fun`` does not return a pair.
      ShapeError: a tangent's shape differs from its primal's.
      DTypeError: a tangent's dtype differs from its primal's.
    """
    check_callable(fun, "jvp")
    if not isinstance(primals, (tuple, list)) or not isinstance(tangents, (tuple, list)):
        raise TypeError("jvp takes primals and tangents as tuples or lists of arguments, "
                        f"got {type(primals).__name__} and {type(tangents).__name__}")
    p_flat, p_tree = tree_util.tree_flatten(tuple(primals))
    t_flat, t_tree = tree_util.tree_flatten(tuple(tangents))
    p_flat, t_flat = _arrays(p_flat), [t if (isinstance(t, np.ndarray) and t.dtype == dtypes.float0) else x
                                       for t, x in zip(t_flat, _arrays(t_flat), strict=True)]
    if p_tree != t_tree:
        raise TypeError(f"jvp: primals and tangents must have the same structure, got {p_tree} and {t_tree}")
    t_flat = [_check_tangent(p, t, i) for i, (p, t) in enumerate(zip(p_flat, t_flat, strict=True))]
    aux_store = []

    def flat(*xs):
        out = fun(*tree_util.tree_unflatten(p_tree, list(xs)))
        if has_aux:
            out, aux = _split_aux(out)
            aux_store.append(aux)
        leaves, tree = tree_util.tree_flatten(out)
        aux_store.insert(0, tree)
        return leaves

    out_p, out_t = _jvp_flat(flat, p_flat, t_flat)
    out_tree = aux_store[0]
    out_t = [_out_tangent(t, p) for t, p in zip(out_t, out_p, strict=True)]
    res = (tree_util.tree_unflatten(out_tree, out_p), tree_util.tree_unflatten(out_tree, out_t))
    if has_aux:
        return res + (_lower_aux(aux_store[1]),)
    return res


def _split_aux(out):
    if not (isinstance(out, (tuple, list)) and len(out) == 2):
        kind = "an array" if isinstance(out, Array) else type(out).__name__
        raise TypeError(f"has_aux=True needs the function to return a pair (output, aux), got {kind}")
    return out[0], out[1]


def _lower_aux(aux):
    from fnarray.core.tracing import full_lower
    return tree_util.tree_map(full_lower, aux)


def jvp_program(program: Program, nonzeros, instantiate=False):
    """The JVP of a closed program as a program.

    Args:
      nonzeros: one bool per input: whether its tangent is (possibly) nonzero.
      instantiate: bool or one bool per output: tangents to produce even if zero.
    Returns: ``(program, out_nonzeros)``: the program takes ``[*primals, *tangents of the
    nonzero inputs]`` and returns ``[*primal outs, *tangents of the nonzero outputs]``.
    """
    program = consts_as_inputs(program)
    nonzeros = list(nonzeros)
    n_out = len(program.outvars)
    inst = [instantiate] * n_out if isinstance(instantiate, bool) else list(instantiate)
    in_avals = [v.aval for v in program.invars]
    t_avals = [tangent_aval(a) for a, nz in zip(in_avals, nonzeros, strict=True) if nz]
    store = {}

    def fun(*xs):
        primals = list(xs[:len(in_avals)])
        ts = iter(xs[len(in_avals):])
        tangents = [next(ts) if nz else Zero(tangent_aval(a)) for a, nz in zip(in_avals, nonzeros, strict=True)]
        outs_p, outs_t = _jvp_flat(lambda *a: eval_program(program, [], list(a)), primals, tangents)
        out_nz = [not isinstance(t, Zero) or i for t, i in zip(outs_t, inst, strict=True)]
        store["nz"] = out_nz
        return list(outs_p) + [instantiate_zeros(t) for t, nz in zip(outs_t, out_nz, strict=True) if nz]

    prog, consts = trace_to_program(fun, in_avals + t_avals)
    if consts:
        prog = consts_as_inputs(prog)
        raise RuntimeError("jvp_program captured constants; the program must be closed")
    return prog, store["nz"]
