"""``fnarray.ad_checkpoint`` (``jax.ad_checkpoint``): ``checkpoint`` with policies, ``checkpoint_name`` and
``print_saved_residuals``.

What a reverse-mode derivative saves are the leaves of the function ``vjp`` returns (its residuals);
``print_saved_residuals`` traces ``vjp`` and says where each one comes from: an argument, the output of a
primitive, or a value named with ``checkpoint_name``.
"""

from __future__ import annotations

import inspect

from fnarray import tree_util
from fnarray.core import primitives as P
from fnarray.core.ir import Var
from fnarray.core.subprograms import CALL_PROGRAM
from fnarray.transforms import checkpoint_policies
from fnarray.transforms.remat import checkpoint, remat

__all__ = ["checkpoint", "remat", "checkpoint_name", "checkpoint_policies", "print_saved_residuals",
           "saved_residuals"]


def checkpoint_name(x, name):
    """``x`` (any pytree of arrays), each leaf named ``name`` for checkpoint policies (mirrors
    ``jax.ad_checkpoint.checkpoint_name``).

    Args:
      x: an array or a pytree of arrays.
      name: a string; ``checkpoint_policies.save_only_these_names(name)`` saves the named values.

    Returns:
      ``x``'s values unchanged (same structure, shapes and dtypes).

    Raises:
      TypeError: ``name`` is not a string.
    """
    if not isinstance(name, str):
        raise TypeError(f"checkpoint_name: name must be a string, got {type(name).__name__}")
    return tree_util.tree_map(lambda leaf: P.name_p.bind(leaf, name=name), x)


def _argument_names(fun, args, kwargs):
    """One name per flattened argument leaf: the parameter's name, with its pytree path (``params['w']``)."""
    try:
        params = list(inspect.signature(fun).parameters)
    except (TypeError, ValueError):
        params = []
    names = []
    for i, a in enumerate(args):
        base = params[i] if i < len(params) and "*" not in params[i] else f"args[{i}]"
        for path, _ in tree_util.tree_flatten_with_path(a)[0]:
            names.append(base + tree_util.keystr(path))
    for k, v in kwargs.items():
        for path, _ in tree_util.tree_flatten_with_path(v)[0]:
            names.append(k + tree_util.keystr(path))
    return names


def _source(program, var):
    """What computes ``var`` in ``program``: ``("named", name)``, ``("output", primitive name)``, or
    ``("input", index)``; through ``call`` and ``remat`` equations to the equation inside."""
    for i, v in enumerate(program.invars):
        if v is var:
            return "input", i
    for e in program.eqns:
        for k, o in enumerate(e.outputs):
            if o is not var:
                continue
            sub = CALL_PROGRAM.get(e.primitive)
            if sub is not None:
                inner = e.params[sub]
                inner_var = inner.outvars[k]
                if isinstance(inner_var, Var):
                    kind, what = _source(inner, inner_var)
                    if kind != "input":
                        return kind, what
                    arg = e.inputs[what]
                    return _source(program, arg) if isinstance(arg, Var) else ("output", e.primitive.name)
            if e.primitive is P.name_p:
                return "named", e.params["name"]
            return "output", e.primitive.name
    return "output", "a constant"


def saved_residuals(fun, *args, **kwargs):
    """The residuals reverse mode saves for ``fun`` at ``args``: a list of ``(ShapedArray, description)``
    (as ``jax.ad_checkpoint.saved_residuals``); see ``print_saved_residuals``."""
    from fnarray.transforms.ad import vjp
    from fnarray.transforms.jit import make_ir
    leaves, tree = tree_util.tree_flatten((args, kwargs))

    def residuals(*flat):
        a, kw = tree_util.tree_unflatten(tree, list(flat))
        _, f_vjp = vjp(lambda *x: fun(*x, **kw), *a)
        return tree_util.tree_leaves(f_vjp)
    program = make_ir(residuals)(*leaves)
    names = _argument_names(fun, args, kwargs)
    out = []
    for v in program.outvars:
        if not isinstance(v, Var):
            out.append((True, 0, len(out), v.aval, "a literal"))
            continue
        kind, what = _source(program, v)
        if kind == "input":
            text = f"from the argument {names[what]}" if what < len(names) else "from an argument"
        elif kind == "named":
            text = f"named {what!r}"
        else:
            text = f"output of {what}"
        out.append((kind != "input", what if kind == "input" else 0, len(out), v.aval, text))
    # as JAX lists them: the arguments first, in their order, then the other residuals
    return [(aval, text) for *_, aval, text in sorted(out, key=lambda r: r[:3])]


def print_saved_residuals(fun, *args, **kwargs):
    """Print, one per line, each residual reverse mode saves for ``fun`` at ``args``: its type and where it
    comes from (``f32[5,4] from the argument W1``, ``f32[5] output of sin``, ``f32[5] named 'a'``), as
    ``jax.ad_checkpoint.print_saved_residuals`` (without JAX's source lines).

    Args:
      fun: a differentiable function of arrays (pytrees).
      *args, **kwargs: the point at which to differentiate.

    Returns:
      None.
    """
    for aval, text in saved_residuals(fun, *args, **kwargs):
        print(f"{aval.str_short()} {text}")
