"""fnarray's kernel compiler: one scheduler, a loop-level kernel IR, C-style renderers.

- ``schedule.py``: groups an IR program into fused kernels for a target's
  ``Capabilities`` (``schedule``), producing a ``Schedule`` of launches.
- ``emitter.py`` / ``rules.py`` / ``index.py``: how a variable's value at an
  index becomes kernel code (elementwise semantics, index arithmetic).
- ``ir.py`` / ``builder.py``: the kernel IR and the builder that writes it.
- ``cstyle.py``: the C-style base renderer; ``opencl_c.py``: ``render_opencl``;
  ``wgsl.py``: ``render_wgsl``, another thin subclass of the same base.

``schedule_program`` is the entry point of a backend: it also lists the kernels
of programs whose control flow the host drives (``KernelList``).
"""

from __future__ import annotations

from fnarray.core import primitives as P
from fnarray.core.ir import Program, Var
from fnarray.core.passes import subprograms
from fnarray.lowering.kernels.ir import Kernel
from fnarray.lowering.kernels.opencl_c import OpenCLRenderer, render_opencl
from fnarray.lowering.kernels.schedule import Launch, Schedule, schedule
from fnarray.lowering.kernels.wgsl import WGSLRenderer, render_wgsl

__all__ = ["schedule", "schedule_program", "render_opencl", "OpenCLRenderer", "render_wgsl", "WGSLRenderer",
           "Kernel", "Schedule", "Launch", "KernelList", "KernelInfo", "Plan"]

_CONTROL = frozenset({P.cond, P.while_p, P.scan})


def _needs_host(e) -> bool:
    if e.primitive in _CONTROL:
        return True
    return any(_needs_host(x) for sub in subprograms(e) for x in sub.eqns)


class KernelInfo:
    """One generated kernel: ``name``, ``source``, ``kind``, work sizes and the IR equations it fused."""

    __slots__ = ("name", "source", "kind", "global_size", "local_size", "eqns", "names", "where")

    def __init__(self, name, source, launch: Launch, names, where=""):
        self.name, self.source, self.kind = name, source, launch.kind
        self.global_size, self.local_size = launch.global_size, launch.local_size
        self.eqns, self.names, self.where = launch.eqns, names, where

    def fused(self) -> list:
        """The fused IR equations, one printed line each."""
        return [_pp_eqn(e, self.names) for e in self.eqns]

    def __str__(self):
        head = f"// {self.name}: {self.kind} kernel, global {list(self.global_size)}" + (
            f", local {list(self.local_size)}" if self.local_size else "") + (f" [{self.where}]" if self.where else "")
        lines = [head] + [f"//   fuses {line}" for line in self.fused()]
        return "\n".join(lines) + "\n" + self.source

    def __repr__(self):
        return f"KernelInfo({self.name}, {self.kind}, fuses {len(self.eqns)} equations)"


class KernelList(list):
    """The kernels of a lowered program in launch order; ``print`` shows each with what it fused.

    A kernel launched several times (a sort's compare-exchange stages) is listed once per launch.
    """

    def __str__(self):
        return "\n".join(str(k) for k in self)


class Plan:
    """What a backend needs from the scheduler: a ``Schedule`` for straight-line programs, or
    ``host_driven`` for programs with control flow (then ``HostDriven`` cuts them up)."""

    def __init__(self, program: Program, caps, opts):
        self.program, self.caps, self.opts = program, caps, opts
        self.host_driven = any(_needs_host(e) for e in program.eqns)
        if self.host_driven:   # donation is by position in the whole program; its segments are programs of their own
            opts = self.opts = {k: v for k, v in opts.items() if k != "donate"}
        self.schedule = None if self.host_driven else schedule(program, caps, **opts)

    def __getstate__(self):  # the tuner option (a live device) is not kept in the persistent cache
        state = dict(self.__dict__)
        state["opts"] = {k: v for k, v in self.opts.items() if k != "tuner"}
        return state

    def listing(self, named_source) -> KernelList:
        """``KernelList`` of every kernel (``named_source(kernel) -> (name, source)``)."""
        out = KernelList()
        names: dict = {}
        if self.schedule is not None:
            _list(self.schedule, named_source, names, out, "")
            return out
        self._list_program(self.program, named_source, names, out, "")
        return out

    def _list_program(self, prog, named_source, names, out, where):
        # As HostDriven cuts it: straight-line segments between the control-flow equations, each
        # returning what later equations (or the program) read.
        later: list = []
        live = {a for a in prog.outvars if isinstance(a, Var)}
        for e in reversed(prog.eqns):
            later.append(set(live))
            live.update(a for a in e.inputs if isinstance(a, Var))
        later.reverse()
        segment: list = []
        live_after: set = set()   # what is read after the segment's last equation

        def flush():
            if segment:
                ins = _free_vars(segment)
                outs = [o for e in segment for o in e.outputs if o in live_after]
                sched = schedule(Program([], ins, list(segment), outs), self.caps, **self.opts)
                _list(sched, named_source, names, out, where)
                segment.clear()

        for e, after in zip(prog.eqns, later, strict=True):
            if _needs_host(e):
                flush()
                for k, sub in enumerate(subprograms(e)):
                    label = f"{where}/" if where else ""
                    self._list_program(sub, named_source, names, out, f"{label}{e.primitive.name}#{k}")
            else:
                segment.append(e)
                live_after = after
        flush()


def _free_vars(eqns):
    defined, seen, ins = set(), set(), []
    for e in eqns:
        for a in e.inputs:
            if isinstance(a, Var) and a not in defined and a not in seen:
                seen.add(a)
                ins.append(a)
        defined.update(e.outputs)
    return ins


def _list(sched, named_source, names, out, where):
    for v in list(sched.program.constvars) + list(sched.program.invars):
        _name(v, names)
    for e in sched.program.eqns:
        for o in e.outputs:
            _name(o, names)
    for launch in sched.launches:
        name, src = named_source(launch.kernel)
        out.append(KernelInfo(name, src, launch, names, where))


def _name(v, names):
    n = names.get(v)
    if n is None:
        i = len(names)
        s = ""
        while True:
            s = chr(ord("a") + i % 26) + s
            i = i // 26 - 1
            if i < 0:
                break
        names[v] = n = s
    return n


def _pp_eqn(e, names) -> str:
    def atom(a):
        if isinstance(a, Var):
            return _name(a, names)
        return f"{a.val.item()!r}:{a.aval.str_short()}"
    outs = " ".join(f"{_name(o, names)}:{o.aval.str_short()}" for o in e.outputs)
    params = " ".join(f"{k}={v}" for k, v in e.params.items() if not isinstance(v, (Program, tuple)) or not (
        isinstance(v, tuple) and v and isinstance(v[0], Program)))
    ps = f"[{params}]" if params else ""
    return f"{outs} = {e.primitive.name}{ps} {' '.join(atom(a) for a in e.inputs)}"


def schedule_program(program: Program, caps, **opts) -> Plan:
    """The kernel plan of ``program`` for a target with capabilities ``caps``.

    ``opts``: ``workgroup`` (work items per group of elementwise kernels), ``row_lanes`` (independent
    accumulators in a work-item's loop over a row: ``groups/reduce.py``), ``tuner`` (a
    ``tuning.LaunchTimer`` of the device: the groups' tunable choices are made by ``tuning.choose``), ``donate``
    (``{input position: output position or None}``: inputs whose buffers a ``dynamic_update_slice`` or a scatter
    may update in place, ``groups/in_place.py``; ignored where the host drives control flow); for
    targets whose compiler gathers every load (webgpu on a CPU adapter): ``dot_block`` (outputs ``(rows,
    cols)`` per work item of the untiled matrix product, the default of ``dot.BLOCK_TUNABLE``: ``groups/dot.py``),
    ``dot_vec4`` (that product's float32 operands read four elements per load where aligned), ``dot_store4`` (its
    float32 outputs stored four adjacent columns per store where aligned), ``bake_dot`` (the
    product's sizes and strides as constants in its source, not scalar arguments), ``conv_positions`` (output
    positions per work item of the direct convolution: ``groups/conv.py``), ``pallas_row_tile`` (rows per work
    item of a ``pallas_call`` kernel with a ``dot`` in row mode: ``groups/pallas.py``), ``row_vec4`` (a work item's
    loops over float32 rows of a multiple of 4 read them four elements per load: ``groups/reduce.py``), ``row_cache``
    (the longest row whose computed operand a work item's row kernel keeps in a private array between its loops),
    ``row_hoist`` (a work item's row loops load the buffer elements they read at one place for the whole row once,
    before the loop),
    ``reduce_per_item`` (``(outputs, rows)``: a reduction into at least that many outputs of rows of at most that many
    elements keeps a work item per output, not a cooperating work-group: both ``groups/reduce.py``),
    ``dot_upcast_reuse`` (a product's low-bit operand whose elements it uses more than that many times is
    converted by a kernel of its own, not read as bytes: ``dot.converted_first``),
    ``attention_subgroup`` (the subgroup size of a native CPU WebGPU adapter with subgroups: the attention kernel's
    query rows split across a subgroup's lanes, ``groups/attention.py``); for CPU
    targets (those and CPU OpenCL): ``scatter_columns`` (a work item per column of a scatter where that is less work:
    ``groups/scatter.py``), ``share_values`` (a costly inlined elementwise value read by several equations gets a
    buffer: ``schedule._Inlining._shared``), ``concat_branches`` (a concatenation of more than two pieces as
    ``if`` branches: ``emitter._concatenate_branches``); ``uniform_pieces`` (default on; off: pieces that are one
    chain at shifted slices are still chosen per element, not read through one chain: ``kernels/uniform_pieces.py``);
    ``recompute_below`` (CPU OpenCL: an expensive value broadcast to fewer elements than that is recomputed inline,
    not given a kernel of its own: ``schedule._Inlining.elementwise``).
    """
    return Plan(program, caps, opts)

