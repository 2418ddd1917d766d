"""The NumPy references of control flow (``cond``, ``while``, ``scan``, calls), ``custom_lin`` and
``debug_callback``; sub-programs run as compiled NumPy programs (``program.compile_numpy``)."""

from __future__ import annotations

import numpy as np

from fnarray.core import primitives as P
from fnarray.core.subprograms import CALL_PROGRAM
from fnarray.lowering.numpy.common import IMPLS, factory
from fnarray.lowering.numpy.program import compile_numpy


def run_program(prog, *args):
    """Evaluate a program on NumPy values (compiled once per program and cached)."""
    return compile_numpy(prog)(list(args))


@factory(P.cond)
def _cond(params, in_avals, out_avals):
    branches = [compile_numpy(b) for b in params["branches"]]
    n = len(branches)

    def f(index, *ops):
        return branches[min(max(int(index), 0), n - 1)](list(ops))
    return f


@factory(P.while_p)
def _while(params, in_avals, out_avals):
    cond_f = compile_numpy(params["cond_program"])
    body_f = compile_numpy(params["body_program"])
    cn, bn = params["cond_nconsts"], params["body_nconsts"]

    def f(*args):
        cc, bc, carry = list(args[:cn]), list(args[cn:cn + bn]), list(args[cn + bn:])
        while cond_f(cc + carry)[0]:
            carry = body_f(bc + carry)
        return carry
    return f


@factory(P.scan)
def _scan(params, in_avals, out_avals):
    body = compile_numpy(params["program"])
    nc, nk, length, rev = params["num_consts"], params["num_carry"], params["length"], params["reverse"]
    y_avals = out_avals[nk:]

    def f(*args):
        consts, carry, xs = list(args[:nc]), list(args[nc:nc + nk]), args[nc + nk:]
        ys = [np.empty(a.shape, a.dtype) for a in y_avals]
        for i in (range(length - 1, -1, -1) if rev else range(length)):
            outs = body(consts + carry + [x[i] for x in xs])
            carry = outs[:nk]
            for y, o in zip(ys, outs[nk:], strict=True):
                y[i] = o
        return carry + ys
    return f


def _call_factory(key):
    def factory(params, in_avals, out_avals):
        exe = compile_numpy(params[key])
        return lambda *args: exe(list(args))
    return factory


for _p, _k in CALL_PROGRAM.items():
    IMPLS[_p] = _call_factory(_k)

def _custom_lin(params, in_avals, out_avals):
    def f(*args):
        raise TypeError("a custom_vjp function cannot be forward-mode differentiated (jvp, jacfwd): it only "
                        "defines reverse mode. Use fnarray.custom_jvp for forward mode, or grad/vjp/jacrev.")
    return f


IMPLS[P.custom_lin] = _custom_lin


def _debug_callback(params, in_avals, out_avals):
    callback, in_tree, nbatch = params["callback"], params["in_tree"], params.get("nbatch", 0)

    def f(*args):
        callback.run(in_tree, [np.asarray(a) for a in args], nbatch)
        return []
    return f


IMPLS[P.debug_callback] = _debug_callback


def _pure_callback(params, in_avals, out_avals):
    callback, in_tree, out_tree = params["callback"], params["in_tree"], params["out_tree"]
    nbatch = params.get("nbatch", 0)

    def f(*args):
        return callback.results(in_tree, out_tree, [np.asarray(a) for a in args], out_avals, nbatch)
    return f


IMPLS[P.pure_callback] = _pure_callback
