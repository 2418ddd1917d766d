"""A tape's replay as one generated straight-line Python function (``eager_tape.Tape.replay``).

``Tape.run`` interprets a tape: a list of slots, a loop over the steps, a list comprehension of each step's
inputs; ~110 bytecodes for the decode step's two-step keys on mlx:0 (issue 28, fifteenth session), where the
executables themselves are a few C calls. As the mlx backend writes a jitted program's source, this module
writes a tape's: each slot a local variable, each step one call, the output array made inline::

    def run(arrays):
        a0, a1 = arrays
        v0 = a0._buf
        v1 = a1._buf
        if v0 is None or v1 is None:
            return None
        v3 = s0(v0, f0)
        v4 = s1(v3, v1)
        r = AI()
        r.aval = av0; r._device = a0._device; r._buf = v4; r._committed = a0._committed or a1._committed
        r._host = None
        return r

The source depends on the tape's *structure* only (how many arguments, each step's input slots and output
count, which slots are outputs and which arguments each output's committed flag reads); the step callables,
constant buffers, output avals and pytree structure are the arguments of a factory compiled once per structure
(``_factories``, an LRU cache of ``_FACTORIES`` structures: the decode loop's keys, new at every step, share a
handful). A step whose call has a true ``passes_operand`` attribute returns its one operand (the mlx backend's
``keepdims.same``, where MLX's neighbouring call broadcasts or keeps the axes itself): its slot names that
operand, with no call. Compiling a new structure costs ~50-100 us; tapes of more than ``MAX_STEPS`` steps keep ``Tape.run``
(their structures rarely repeat, and the source would grow with them), and so do tapes of more than ``MAX_SLOTS``
arguments and constants (``fnp.stack`` of a list of 5,000 arrays).
"""

from __future__ import annotations

import warnings

from fnarray.core.cache import LRUCache
from fnarray.devices.array_impl import ArrayImpl

__all__ = ["replay", "MAX_STEPS", "MAX_SLOTS", "stats"]

#: Tapes of more steps than this are interpreted (``Tape.run``).
MAX_STEPS = 48
#: Tapes of more arguments and constant buffers than this are interpreted too: the source unpacks each as a
#: local, so it grows with them (``fnp.stack`` of 5,000 arrays: ~0.5 s in ``compile`` at its first call, for a
#: structure that no other count shares; issue 28).
MAX_SLOTS = 64
_FACTORIES = 256
_factories = LRUCache(_FACTORIES)

# A step may call NumPy's function itself (the numpy backend's ``eager_call``): its RuntimeWarnings are silenced
# in the generated functions (their module is this one) as in ``eager_tape``'s ``Tape.run``.
warnings.filterwarnings("ignore", category=RuntimeWarning, module=r"fnarray\.transforms\.tape_source")
_factories_d = _factories._d
stats = {"compiled": 0}  # structures compiled since the process started (a counter for tests)


def _structure(tape, nouts):
    """What the generated source depends on (a hashable key of ``_factories``), and the steps' calls."""
    calls, ins, single = zip(*tape.steps) if tape.steps else ((), (), ())  # (C-level: at each tape's first replay)
    passes = tuple([bool(getattr(c, "passes_operand", False)) and one and len(i) == 1
                    for c, i, one in zip(calls, ins, single)])
    return (tape.n, len(tape.fixed), tuple(zip(ins, single, nouts, passes)), tape.outs, tape.out_deps,
            tape.single), calls


def _committed(args) -> str:
    return " or ".join(f"a{i}._committed" for i in args) if args else "False"


def _name(slot, n, nfixed) -> str:
    if slot < n:
        return f"v{slot}"
    return f"f{slot - n}" if slot < n + nfixed else f"v{slot}"


def _body(n, nfixed, steps, outs, out_deps, single) -> list:
    """The lines of ``run(arrays)`` (indented for the factory)."""
    lines = [f"    {''.join(f'a{i}, ' for i in range(n))}= arrays"]
    lines += [f"    v{i} = a{i}._buf" for i in range(n)]
    lines.append(f"    if {' or '.join(f'v{i} is None' for i in range(n))}:")
    lines.append("        return None")
    slot = n + nfixed
    for k, (ins, one, nout, passes) in enumerate(steps):
        call = f"s{k}({', '.join(_name(s, n, nfixed) for s in ins)})"
        if passes:  # a step that returns its one operand (``passes_operand``): the slot names that value
            call = _name(ins[0], n, nfixed)
        if one:
            lines.append(f"    v{slot} = {call}")
        else:
            lines.append(f"    {''.join(f'v{slot + j}, ' for j in range(nout))}= {call}")
        slot += nout
    if single and out_deps is None:
        i = outs[0]
        if i < n:  # the function returned its argument
            return lines + [f"    return a{i}"]
        return lines + ["    r = AI()",
                        f"    r.aval = av0; r._device = a0._device; r._buf = v{i}; "
                        f"r._committed = {_committed(range(n))}; r._host = None",
                        "    return r"]
    made = []
    for k, i in enumerate(outs):
        deps = range(n) if out_deps is None else out_deps[k]
        made.append(f"a{i}" if i < n else f"MAKE(av{k}, a0._device, v{i}, {_committed(deps)})")
    return lines + [f"    return TREE.unflatten([{', '.join(made)}])"]


def _factory(structure):
    """``factory(steps' calls, fixed buffers, out avals, out tree) -> run`` for a tape structure."""
    n, nfixed, steps, outs, out_deps, single = structure
    heads = [f"    {''.join(f'{p}{i}, ' for i in range(m))}= {name}"
             for p, m, name in (("s", len(steps), "S"), ("f", nfixed, "F"), ("av", len(outs), "AV")) if m]
    src = "\n".join(["def factory(S, F, AV, TREE):"] + heads + ["    def run(arrays):"]
                    + ["    " + line for line in _body(n, nfixed, steps, outs, out_deps, single)]
                    + ["    return run"])
    env = {"AI": ArrayImpl, "MAKE": ArrayImpl.make, "__name__": __name__}
    stats["compiled"] += 1
    exec(compile(src, "<fnarray tape>", "exec"), env)  # noqa: S102 (source made here from integers only)
    return env["factory"]


def replay(tape, nouts):
    """The generated ``run(arrays)`` of ``tape`` (an ``eager_tape.Tape``; ``nouts``: each step's count of
    outputs), equal to ``tape.run``: the outputs (a pytree of ``ArrayImpl``), or ``None`` where an array was
    donated or deleted; errors of the steps propagate. ``None`` for a tape of more than ``MAX_STEPS`` steps or
    ``MAX_SLOTS`` arguments and constants."""
    if len(tape.steps) > MAX_STEPS or tape.n + len(tape.fixed) > MAX_SLOTS:
        return None
    key, calls = _structure(tape, nouts)
    factory = _factories_d.get(key)  # (no reordering: eviction is by age of the structure's first tape)
    if factory is None:
        factory = _factories.put(key, _factory(key))
    return factory(calls, tape.fixed, tape.out_avals, tape.out_tree)
