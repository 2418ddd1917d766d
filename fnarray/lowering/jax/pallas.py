"""``pallas_call`` on jax: JAX's own ``jax.experimental.pallas.pallas_call`` (registered into ``jax.common.RULES``).

The traced body is evaluated inside a JAX Pallas kernel: the grid indices are ``jax.experimental.pallas``'s
``program_id``, each ref chain of the body is one JAX ref (a store writes it, the next load reads it), the
kernel loops are ``jax.lax.fori_loop`` and ``pl.when``, masked loads/stores and atomics are Pallas-Triton's
``load``/``store``/``atomic_*``, and every other equation goes through the jax backend's ``RULES``. JAX runs it
in interpret mode on the CPU (``interpret=True``: the only Pallas mode there) and lowers it natively on a GPU or
TPU (where this is not tested here: no such device on these machines).
"""

from __future__ import annotations

import numpy as np

from fnarray.core.ir import Literal
from fnarray.core.pallas import pallas_atomic_p, pallas_load_p, pallas_loop_p, pallas_store_p, pallas_when_p

from fnarray.core.pallas import pallas_call_p
from fnarray.lowering.jax.common import RULES, interpret

__all__ = ["jax_pallas_call"]


class _JRef:
    """A JAX ref inside the kernel (told apart from values)."""

    __slots__ = ("ref",)

    def __init__(self, ref):
        self.ref = ref


def _index(indexer, starts):
    from jax.experimental import pallas as jpl
    return tuple(s if e[0] == "i" else jpl.ds(s, e[1]) for e, s in zip(indexer, starts, strict=True))


def _eval(prog, args):
    env = dict(zip(prog.invars, args, strict=True))

    def read(a):
        return np.asarray(a.val) if isinstance(a, Literal) else env[a]

    for e in prog.eqns:
        vals = [read(a) for a in e.inputs]
        outs = _KERNEL_RULES.get(e.primitive)
        outs = outs(vals, **e.params) if outs is not None else RULES[e.primitive](*vals, **e.params)
        if not e.primitive.multiple_results:
            outs = [outs]
        for v, o in zip(e.outputs, outs, strict=True):
            env[v] = o
    return [read(a) for a in prog.outvars]


def _split(rest, n, flags):
    starts, extra = rest[:n], list(rest[n:])
    return starts, [extra.pop(0) if f else None for f in flags]


def _load(vals, *, indexer, masked, has_other):
    from jax.experimental.pallas import triton as plt
    ref, rest = vals[0], vals[1:]
    starts, (mask, other) = _split(rest, len(indexer), (masked, has_other))
    idx = _index(indexer, starts)
    if mask is None:
        return ref.ref[idx]
    return plt.load(ref.ref.at[idx], mask=mask, other=other)


def _store(vals, *, indexer, masked):
    from jax.experimental.pallas import triton as plt
    ref, value, rest = vals[0], vals[1], vals[2:]
    starts, (mask,) = _split(rest, len(indexer), (masked,))
    idx = _index(indexer, starts)
    if mask is None:
        ref.ref[idx] = value
    else:
        plt.store(ref.ref.at[idx], value, mask=mask)
    return ref


def _atomic(vals, *, op, indexer, masked):
    from jax.experimental.pallas import triton as plt
    ref, value, rest = vals[0], vals[1], vals[2:]
    starts, (mask,) = _split(rest, len(indexer), (masked,))
    fn = {"add": plt.atomic_add, "max": plt.atomic_max, "min": plt.atomic_min}[op]
    old = fn(ref.ref, _index(indexer, starts), value, mask=mask)
    return [ref, old]


def _loop(vals, *, body, num_consts):
    import jax
    lo, hi, ops = vals[0], vals[1], vals[2:]
    consts, carry = list(ops[:num_consts]), list(ops[num_consts:])
    is_ref = [isinstance(c, _JRef) for c in carry]
    plain = [c for c, r in zip(carry, is_ref, strict=True) if not r]

    def step(i, xs):
        it = iter(xs)
        full = [c if r else next(it) for c, r in zip(carry, is_ref, strict=True)]
        outs = _eval(body, [i] + consts + full)
        return [o for o, r in zip(outs, is_ref, strict=True) if not r]

    res = iter(jax.lax.fori_loop(lo, hi, step, plain))
    return [c if r else next(res) for c, r in zip(carry, is_ref, strict=True)]


def _when(vals, *, body, num_consts):
    from jax.experimental import pallas as jpl
    pred, ops = vals[0], vals[1:]

    @jpl.when(pred)
    def _():
        _eval(body, list(ops))
    return list(ops[num_consts:])


_KERNEL_RULES = {pallas_load_p: _load, pallas_store_p: _store, pallas_atomic_p: _atomic, pallas_loop_p: _loop,
                 pallas_when_p: _when}


def _block_spec(block, grid):
    from jax.experimental import pallas as jpl
    if block.index_map is None:
        return jpl.BlockSpec(tuple(block.block_shape), lambda *g: (0,) * len(block.shape))
    shape = tuple(jpl.squeezed if n is None else n for n in block.block_shape)
    prog = block.index_map
    return jpl.BlockSpec(shape, lambda *g: tuple(interpret(prog, list(g))))


def jax_pallas_call(*args, body, grid, in_blocks, out_blocks, scratch, out_avals, aliases, name, interpret,
                    compiler_params):
    """JAX's ``pallas_call`` of the traced body (interpret mode on the CPU)."""
    import jax
    from jax.experimental import pallas as jpl
    n_in, n_out = len(in_blocks), len(out_blocks)
    if any(a.size == 0 for a in list(out_avals) + [getattr(x, "aval", x) for x in args]) or 0 in tuple(grid):
        # Nothing a program instance writes is visible (JAX's own pallas_call refuses blocks over an empty
        # operand): the outputs are the aliased inputs, else zeros, as the numpy interpreter gives them.
        alias = {o: i for i, o in dict(aliases).items()}
        return [args[alias[k]] if k in alias else jax.numpy.zeros(a.shape, a.dtype) for k, a in enumerate(out_avals)]

    def kernel(*refs):
        pids = [jpl.program_id(a) for a in range(len(grid))]
        wrapped = [_JRef(r) for r in refs]
        outs = _eval(body.program, pids + wrapped)
        for o, r in zip(outs, wrapped[n_in:n_in + n_out], strict=True):
            if not isinstance(o, _JRef):   # an output ref the body replaced wholesale with a value
                r.ref[...] = o

    scratch_shapes = ()
    if scratch:
        from jax.experimental.pallas import tpu as pltpu
        scratch_shapes = tuple(pltpu.VMEM(s.shape, s.dtype) for s in scratch)
    on_cpu = jax.default_backend() == "cpu"
    call = jpl.pallas_call(
        kernel, out_shape=[jax.ShapeDtypeStruct(a.shape, a.dtype) for a in out_avals], grid=tuple(grid),
        in_specs=[_block_spec(b, grid) for b in in_blocks], out_specs=[_block_spec(b, grid) for b in out_blocks],
        scratch_shapes=scratch_shapes, input_output_aliases=dict(aliases), interpret=bool(interpret or on_cpu),
        name=name)
    return list(call(*args))


RULES[pallas_call_p] = jax_pallas_call
