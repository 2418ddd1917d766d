"""The jax backend's rules for control flow (``cond``, ``while``, ``scan``, calls, custom derivatives'
calls) and ``debug_callback``; sub-programs are interpreted with the same table."""

from __future__ import annotations

import functools

import numpy as np

from fnarray.core import primitives as P
from fnarray.lowering.jax.common import RULES, interpret, jax, lax, manual, rule


@rule(P.cond)
def _cond(index, *ops, branches):
    fns = [functools.partial(_branch, b) for b in branches]
    return lax.switch(index, fns, *ops)


def _branch(prog, *ops):
    return interpret(prog, list(ops))


@rule(P.while_p)
def _while(*args, cond_program, body_program, cond_nconsts, body_nconsts):
    cc = list(args[:cond_nconsts])
    bc = list(args[cond_nconsts:cond_nconsts + body_nconsts])
    init = tuple(args[cond_nconsts + body_nconsts:])
    out = lax.while_loop(lambda c: interpret(cond_program, cc + list(c))[0],
                         lambda c: tuple(interpret(body_program, bc + list(c))), init)
    return list(out)


@rule(P.scan)
def _scan(*args, program, num_consts, num_carry, length, reverse, unroll=1):
    consts = list(args[:num_consts])
    carry = tuple(args[num_consts:num_consts + num_carry])
    xs = tuple(args[num_consts + num_carry:])

    def body(c, x):
        outs = interpret(program, consts + list(c) + list(x))
        return tuple(outs[:num_carry]), tuple(outs[num_carry:])

    c, ys = lax.scan(body, carry, xs, length=length, reverse=reverse, unroll=unroll)
    return list(c) + list(ys)


RULES[P.call] = lambda *args, program, name="call": interpret(program, list(args))
RULES[P.remat] = lambda *args, program, prevent_cse=True, policy=None: interpret(program, list(args))
RULES[P.custom_jvp_call] = lambda *args, call_program, **kw: interpret(call_program, list(args))
RULES[P.custom_vjp_call] = lambda *args, call_program, **kw: interpret(call_program, list(args))



def _debug_callback(*args, callback, in_tree, nbatch=0):
    def host(*xs):
        callback.run(in_tree, [np.asarray(x) for x in xs], nbatch)
    # NOTE: JAX refuses ordered effects over several devices; inside a shard_map body each device calls the
    # function with its block, unordered across devices (as jax.debug.print there)
    jax.debug.callback(host, *args, ordered=not getattr(manual, "depth", 0))
    return []


RULES[P.debug_callback] = _debug_callback


def _pure_callback(*args, callback, in_tree, out_tree, result_avals, vmap_method=None, nbatch=0):
    def host(*xs):
        return callback.results(in_tree, out_tree, [np.asarray(x) for x in xs], result_avals, nbatch)
    shapes = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in result_avals]
    if callback.name == "io_callback":   # never dropped by XLA
        from jax.experimental import io_callback
        return list(io_callback(host, shapes, *args, ordered=callback.ordered))
    return list(jax.pure_callback(host, shapes, *args))


RULES[P.pure_callback] = _pure_callback
