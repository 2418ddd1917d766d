"""A straight-line program as generated Python over MLX arrays: one line per equation calling that
equation's rule from ``common.RULES``, or writing the rule's one expression itself where the rule offers one
(``common.expression``), as ``Generated`` does, or the same rule functions called in a loop (``Generated.interpreted``,
which writes no source: ``backend._until_compiled``); control flow is never part of one (it runs from the host)."""

from __future__ import annotations

import weakref

import numpy as np

from fnarray.core import primitives as P
from fnarray.core.ir import Literal, Program, Var
from fnarray.core.passes import dce
from fnarray.lowering.common import code_of
from fnarray.core.subprograms import CONTROL_FLOW
from fnarray.core import dtypes
from fnarray.lowering.mlx.common import RULES, SHAPE_FREE, from_numpy, mx
from fnarray.lowering.mlx.attention import LENGTH_SLICE, share_length_masks
from fnarray.lowering.mlx.fused import Fused, fuse_patterns
from fnarray.lowering.mlx.keepdims import keep_reduced_axes
from fnarray.lowering.mlx.low_bit import bits_of, typed
from fnarray.lowering.zero_size import drop_zero_size, has_zero_size, is_fill


class Generated:
    """A straight-line program over MLX arrays: its equations' rule functions, run by the Python source written
    from them (``source``, written and compiled at the first read of ``fn``) or by a loop over them
    (``interpreted``)."""

    def __init__(self, prog: Program, execute: bool = True, platform: str = "cpu", host_lengths: bool = False):
        # (``platform``: the device's, which picks the ``mx.fast`` patterns: ``fused.fuse_patterns``;
        # ``host_lengths``: attention's key lengths read on the host, for a program never given to mx.compile:
        # ``attention.share_length_masks``; ``reads_lengths`` says whether the program has such a read)
        prog, self.has_empty = _simplified(prog, platform, host_lengths)
        self.reads_lengths = host_lengths and any(e.primitive is LENGTH_SLICE for e in prog.eqns)
        self._prog, self._execute = prog, execute
        self.has_low_bit = _has_low_bit(prog)
        # the equations' rule functions (None: a zero-size value's, made without one; or not executing)
        self._fns = [None if not execute or is_fill(e) else _rule_function(e) for e in prog.eqns]
        self.shape_free = (execute and not (self.has_empty or self.has_low_bit or self.reads_lengths)
                           and all(_reads_no_size(e.primitive, fn) for e, fn in zip(prog.eqns, self._fns)))
        self.n_eqns = len(prog.eqns)
        self._source = self._fn = self._glb = None

    @property
    def source(self) -> str:
        """The program as Python source (written at the first read): a line per equation calling its rule's
        function ``f{i}_{name}`` or writing its rule's one expression itself (``common.expression``)."""
        if self._source is None:
            self._glb = {"__name__": "fnarray.lowering.mlx_program", "bits_of": bits_of, "typed": typed, "mx": mx}
            self._source = _written(self._prog, self._fns, self._glb, self._execute)
        return self._source

    @property
    def fn(self):
        """The program's function ``fn(*bufs) -> [bufs]``: its source compiled (once, at the first read); ``None``
        for a ``Generated(execute=False)``."""
        if self._fn is None and self._execute:
            source = self.source
            exec(code_of(source, "<fnarray mlx program>"), self._glb)  # noqa: S102 (our own codegen)
            self._fn = self._glb["program"]
        return self._fn

    @property
    def interpreted(self):
        """The same function as ``fn`` without writing or compiling its source: a loop over the equations' rule
        functions, ~0.3-0.4 us an equation a call more than ``fn``'s straight lines, where writing and compiling
        the source cost ~12 us a line (the transformer step of ``benchmarks/programs.py``: 1,060 equations,
        13 ms); ``None`` where the program makes zero-size values or holds low-bit ones (their conversions are
        written into the source only) or for a ``Generated(execute=False)``."""
        if self.has_low_bit or not self._execute or any(fn is None for fn in self._fns):
            return None
        return _interpreter(self._prog, self._fns)

    @property
    def max_elements(self) -> int:
        """The element count of the program's largest input or value (read by ``backend._compile_policy`` only
        where ``CPU_COMPILE_MAX_ELEMENTS`` is set: not counted on every new shape's first call)."""
        prog = self._prog
        return max([v.aval.size for v in prog.constvars + prog.invars] +
                   [o.aval.size for e in prog.eqns for o in e.outputs] + [0])


def _written(prog: Program, fns: list, glb: dict, execute: bool) -> str:
    """``prog``'s Python source over the rule functions ``fns`` (``Generated.source``), binding in ``glb`` what it
    names: the functions, the literals' constants, the zero-size values' empty buffers."""
    names: dict = {}
    consts: list = []   # the source's comment lines on its constants

    def name(a):
        if isinstance(a, Literal):
            k = f"k{len(consts)}"
            consts.append(f"#   {k} = {a.val!r} ({a.aval.dtype.name})")
            if execute:
                glb[k] = _constant(a.val, a.aval.dtype)
            return k
        if a not in names:
            names[a] = f"v{len(names)}"
        return names[a]

    ins = [name(v) for v in list(prog.constvars) + list(prog.invars)]
    lines = _low_bit_entry(prog, name)
    for i, (e, fn) in enumerate(zip(prog.eqns, fns, strict=True)):
        f = f"f{i}_{e.primitive.name}"
        if is_fill(e):  # a zero-size value: an empty NumPy buffer, made once, never given to MLX
            k = f"e{i}"
            o = e.outputs[0].aval
            consts.append(f"#   {k} = empty {o.str_short()}")
            if execute:
                glb[k] = from_numpy(np.zeros(o.shape, o.dtype))
            lines.append(f"    {name(e.outputs[0])} = {k}")
            continue
        if execute:
            inline = getattr(fn, "inline", None)
            if inline is not None and not e.primitive.multiple_results:
                lines.append(f"    {name(e.outputs[0])} = {_inlined(inline, f, [name(a) for a in e.inputs], glb)}")
                continue
            glb[f] = fn
        elif e.primitive in CONTROL_FLOW:
            f = f"host_{e.primitive.name}"
        args = ", ".join(name(a) for a in e.inputs)
        outs = [name(o) for o in e.outputs]
        if e.primitive.multiple_results or e.primitive in CONTROL_FLOW:
            lhs = ", ".join(outs) + ("," if len(outs) == 1 else "")
            lines.append(f"    {lhs} = {f}({args})")
        else:
            lines.append(f"    {outs[0]} = {f}({args})")
    lines.append(_low_bit_return(prog, name, glb))
    header = (["# MLX program; constants:"] + consts) if consts else []
    return "\n".join(header + [f"def program({', '.join(ins)}):"] + lines) + "\n"


def _interpreter(prog: Program, fns: list):
    """``fn(*bufs) -> [bufs]`` calling the rule functions ``fns`` of ``prog``'s equations in order over one list of
    values: the inputs (constvars, invars) first, then the literals' constants and the values the equations make."""
    slot = {v: i for i, v in enumerate(list(prog.constvars) + list(prog.invars))}
    first = [None] * len(slot)

    def at(a):
        i = slot.get(a)   # (equal literals share a slot: a Literal is keyed by its dtype, weak type and bits)
        if i is None:
            i = slot[a] = len(first)
            first.append(_constant(a.val, a.aval.dtype) if isinstance(a, Literal) else None)
        return i
    plan = [(fn, tuple(at(a) for a in e.inputs),
             tuple(at(o) for o in e.outputs) if e.primitive.multiple_results else at(e.outputs[0]),
             e.primitive.multiple_results) for e, fn in zip(prog.eqns, fns, strict=True)]
    rets, n = [at(a) for a in prog.outvars], len(prog.constvars) + len(prog.invars)
    if not any(multiple for *_, multiple in plan):
        plan = [(fn, args, out) for fn, args, out, _ in plan]

        def program(*bufs):
            env = first.copy()
            env[:n] = bufs
            for fn, args, out in plan:
                env[out] = fn(*[env[i] for i in args])
            return [env[i] for i in rets]
        return program

    def program_multiple(*bufs):
        env = first.copy()
        env[:n] = bufs
        for fn, args, out, multiple in plan:
            if multiple:
                for i, v in zip(out, fn(*[env[i] for i in args]), strict=True):
                    env[i] = v
            else:
                env[out] = fn(*[env[i] for i in args])
        return [env[i] for i in rets]
    return program_multiple


def _reads_no_size(prim, fn) -> bool:
    """Whether ``fn``, ``prim``'s rule's function, reads no size (``common.SHAPE_FREE``). ``Generated.shape_free``:
    every line's does, none of the program's values is empty or low-bit, none is read on the host; its function
    then serves the program at every size, as ``mx.compile(shapeless=True)`` traces it once."""
    check = SHAPE_FREE.get(prim, False)
    return check is None or (check is not False and check(fn))


def _rule_function(e):
    """The function of equation ``e``'s rule (``common.RULES``, a ``Fused`` stand-in's own)."""
    if e.primitive in CONTROL_FLOW:
        raise ValueError(f"{e.primitive.name} runs from the host; compile it through "
                         "fnarray.devices.partition.compile_program")
    rule = e.primitive.rule if type(e.primitive) is Fused else RULES[e.primitive]
    return rule(e.params, [a.aval for a in e.inputs], [o.aval for o in e.outputs])


def _inlined(inline, f, args, glb) -> str:
    """The expression of a rule made by ``common.expression`` (``inline``: its template and constants) over the
    argument names ``args``, its constants bound in ``glb`` as ``{f}_{name}`` (names, not literals: a program
    traced again at another shape keeps its text, and ``code_of``'s cached code)."""
    template, consts = inline
    for k, v in consts.items():
        glb[f"{f}_{k}"] = v
    return template.format(*args, **{k: f"{f}_{k}" for k in consts})


def _simplified(prog: Program, platform: str, host_lengths: bool = False):
    """``(program, has_empty)``: ``prog`` with reshape chains folded, its zero-size values dropped where it can and
    then its ``mx.fast`` patterns fused (``fused.fuse_patterns``), its reductions kept at their operand's rank and
    the broadcasts MLX makes by itself dropped (``keepdims.keep_reduced_axes``), its key-length masks shared or, with
    ``host_lengths``, its key lengths read on the host (``attention.share_length_masks``), dead code eliminated."""
    prog, _ = dce(fold_reshapes(prog))
    # mx.compile is never given empty (NumPy) buffers: such programs stay eager. (The common program has
    # no zero-size value: one scan, no second dce; eager programs compile per new shape.)
    has_empty = has_zero_size(prog)
    if has_empty:
        prog, _ = dce(drop_zero_size(prog))
        has_empty = has_zero_size(prog)
    fused = share_length_masks(keep_reduced_axes(fuse_patterns(prog, platform)), host_lengths)
    return (prog if fused is prog else dce(fused)[0]), has_empty


def fold_reshapes(prog: Program) -> Program:
    """``prog`` with each reshape of a reshape's output reading that reshape's input instead (the first is then
    dead where nothing else reads it): one MLX graph node where the IR has a chain, as ``fnp.reshape`` of a
    product's rows into heads makes (MLX evaluates every node, ~2-3 us each on the CPU, even a reshape).
    Returns ``prog`` itself when no reshape reads a reshape."""
    source: dict = {}   # a reshape's output -> the value it reshapes
    eqns, changed = [], False
    for e in prog.eqns:
        if e.primitive is P.reshape and isinstance(e.inputs[0], Var):
            x = source.get(e.inputs[0], e.inputs[0])
            if x is not e.inputs[0]:
                e = e._replace(inputs=(x,))
                changed = True
            source[e.outputs[0]] = x
        eqns.append(e)
    return Program(prog.constvars, prog.invars, eqns, prog.outvars) if changed else prog


def _constant(value, dtype):
    """A literal as the program holds it: an ``mx.array``, a low-bit one's bytes (``low_bit.py``)."""
    c = from_numpy(np.asarray(value, dtype))
    return bits_of(c) if dtypes.is_low_bit(dtype) else c


def _has_low_bit(prog) -> bool:
    """Whether a low-bit value goes in or is made (the program's ends convert them; never ``mx.compile``)."""
    return any(dtypes.is_low_bit(v.aval.dtype) for v in list(prog.constvars) + list(prog.invars)) or \
        any(dtypes.is_low_bit(o.aval.dtype) for e in prog.eqns for o in e.outputs)


def _low_bit_entry(prog, name):
    """Lines converting the low-bit inputs (``low_bit.py``: NumPy arrays outside a program) to their bytes."""
    return [f"    {name(v)} = bits_of({name(v)})" for v in list(prog.constvars) + list(prog.invars)
            if dtypes.is_low_bit(v.aval.dtype)]


def _low_bit_return(prog, name, glb):
    """The return line, the low-bit outputs' bytes converted to NumPy arrays of their dtypes (names in ``glb``)."""
    for d in {a.aval.dtype for a in prog.outvars if dtypes.is_low_bit(a.aval.dtype)}:
        glb[f"dtype_{d.name}"] = d
    return "    return [" + ", ".join(f"typed({name(a)}, dtype_{a.aval.dtype.name})"
                                      if dtypes.is_low_bit(a.aval.dtype) else name(a) for a in prog.outvars) + "]"


_generated_cache: "weakref.WeakKeyDictionary[Program, Generated]" = weakref.WeakKeyDictionary()


def generated(prog: Program) -> Generated:
    """The ``Generated`` program of ``prog``, made once per program (weakly cached)."""
    g = _generated_cache.get(prog)
    if g is None:
        g = Generated(prog)
        _generated_cache[prog] = g
    return g
