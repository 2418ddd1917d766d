"""The mlx backend over several processes: a 1-D mesh of one device per process, on ``mx.distributed``.

After ``fnarray.distributed.initialize(backend="mlx")`` in N > 1 processes, the mlx backend lists one
device per process (``mlx:<rank>``, :class:`ProcessDevice`; this process's runs on MLX's default device,
its GPU where there is one, else its CPU). A mesh over them is 1-D and in process order
(``fa.make_mesh((N,), ("data",))``). A *global array* on it is an ``ArrayImpl`` of the global shape whose
buffer is a :class:`GlobalBuffer`: this process's shard (an ``mx.array``) and its ``NamedSharding``.

``shard_map`` over such a mesh (the ``shard_map`` equation, eager or inside ``jit``) runs its body on the
local shard with the mlx rules, its collectives lowered to ``mx.distributed`` over the run's group:

- ``psum`` -> ``all_sum``; ``pmax``/``pmin`` -> ``all_max``/``all_min`` for integers, and for floating point
  an ``all_gather`` and a local reduction (MLX's ``all_max`` drops NaN; fnarray's ``pmax`` propagates it);
- ``all_gather`` -> ``all_gather`` (which concatenates along axis 0: the axis is moved there and back);
- ``psum_scatter`` -> ``all_sum`` and this process's block (the ring backend has no ``sum_scatter``);
- ``all_to_all`` -> ``all_gather`` and this process's block of every sender (n times the traffic);
- ``ppermute`` -> ``send``/``recv``, one explicit evaluation each, in an order that cannot deadlock: along
  each cycle of the permutation its lowest rank sends first and every other rank receives first (a path
  starts at its head). The ring backend only sends between ring neighbours, so a permutation with another
  pair (4 or more processes) goes through ``all_gather`` instead;
- ``axis_index`` -> the rank; ``axis_size`` is the group size (a Python int, no equation);
- with ``axis_index_groups``, ``psum``/``pmax``/``pmin``/``all_gather`` -> ``all_gather`` and the local
  reduction or stack of this process's group (MLX's groups are made once per run, not per collective).

Order. Every process must run the same collectives in the same order. MLX evaluates lazily, and a graph
holding two collectives would run them in whichever order each process's ``mx.eval`` reaches them; so
each ``shard_map`` evaluates its outputs before it returns (identical graphs are evaluated in the same
order), and programs holding a ``shard_map`` over processes are never given to ``mx.compile``.

Outside ``shard_map``, equations of a jitted program (or eager operations) run on global arrays when every
global operand is fully replicated (the result is replicated) or, for elementwise operations, when all
of them are split alike (the result is split so); anything else raises, saying to move the computation
into the ``shard_map``. ``np.asarray`` of a replicated global array is this process's copy; of a split
one it raises, as JAX's, naming ``addressable_shards``.
"""

from __future__ import annotations

import numpy as np

from fnarray.core import collectives as C
from fnarray.core import dtypes
from fnarray.core import primitives as P
from fnarray.core.errors import FnArrayError
from fnarray.core.ir import Literal
from fnarray.core.passes import dce, walk_eqns
from fnarray.core.spmd import shard_map_p
from fnarray.core.subprograms import CONTROL_FLOW
from fnarray.core.shaped import ShapedArray
from fnarray.devices.array_impl import ArrayImpl
from fnarray.devices.backend import Device
from fnarray.devices.sharding import NamedSharding, Shard
from fnarray.lowering.mlx.common import RULES
from fnarray.lowering.mlx.program import generated
from fnarray.lowering.mlx.common import from_numpy, mx, to_numpy

__all__ = ["ProcessDevice", "GlobalBuffer", "process_group", "active", "process_devices", "check_mesh",
           "mesh_devices", "local_device", "put_global", "global_buffer", "addressable_shards",
           "distributed_executable", "host_value"]


# ----------------------------------------------------------------------------- the run and its devices


_DISTRIBUTED = [None]  # the ``fnarray.distributed`` module, once ``process_group`` imported it


def process_group():
    """The ``mx.distributed.Group`` of an mlx run of more than one process, else ``None``."""
    distributed = _DISTRIBUTED[0]
    if distributed is None:  # (imported at the first call: asked at every eager compile, ~1 us an import)
        from fnarray import distributed
        _DISTRIBUTED[0] = distributed
    if distributed.engine_backend() is None:
        return None  # not a distributed run (asked at every eager compile: no exception raised and caught)
    try:
        g = distributed.mlx_group()
    except RuntimeError:   # not an mlx run
        return None
    return g if g is not None and g.size() > 1 else None


def active() -> bool:
    """Whether this process is one of an mlx run of several processes."""
    return process_group() is not None


def _group():
    g = process_group()
    if g is None:
        raise FnArrayError("a collective over mlx processes, but no mlx run of several processes is initialized: "
                           "call fnarray.distributed.initialize(backend='mlx') in every process first (python -m "
                           "fnarray.distributed.launch -n N --backend mlx script.py, or mlx.launch)")
    return g


class ProcessDevice(Device):
    """The device of one process of an mlx run (``mlx:<rank>``); ``process_index`` is that rank.

    Only this process's device has a ``handle`` (MLX's device); the others are names in a mesh.
    """

    __slots__ = ("process_index",)

    def __init__(self, rank, platform, description, handle):
        super().__init__("mlx", rank, platform, description, handle=handle)
        self.process_index = rank

    @property
    def remote(self) -> bool:
        """Whether the device belongs to another process (arrays cannot be placed on it from here)."""
        return self.handle is None


def process_devices(group, local_handle, platform, label) -> list:
    """One ``ProcessDevice`` per rank of ``group``; this process's has ``local_handle``."""
    me = group.rank()
    return [ProcessDevice(r, platform, f"{label}, process {r} of {group.size()}" + (" (this one)" if r == me else ""),
                          local_handle if r == me else None) for r in range(group.size())]


def check_mesh(devs) -> None:
    """Check a mesh of mlx devices (``Mesh.__init__`` calls it).

    Args:
      devs: the mesh's ``np.ndarray`` of ``Device``.
    Returns:
      ``None``.
    Raises:
      ``ValueError`` for more than one device outside an mlx run of several processes, a mesh over processes
      that is not 1-D, that does not hold every process once in order, or a mesh of another process's device.
    """
    g = process_group()
    flat = list(devs.flat)
    if g is None:
        if len(flat) > 1:
            raise ValueError(f"a mesh of {len(flat)} mlx devices, but this process is not part of an mlx run of "
                             "several processes: call fnarray.distributed.initialize(backend='mlx') first (python -m "
                             "fnarray.distributed.launch -n N --backend mlx, or mlx.launch); a mesh over one "
                             "process's own mlx device has size 1")
        return
    n = g.size()
    if len(flat) == 1:
        if getattr(flat[0], "remote", False):
            raise ValueError(f"a mesh of the device {flat[0]}, which belongs to process {flat[0].id}, not to this "
                             f"process ({g.rank()}): a mesh of one device must hold this process's own "
                             f"(fa.devices('mlx')[{g.rank()}])")
        return
    if devs.ndim != 1:
        raise ValueError(f"a mesh of shape {devs.shape} over mlx processes: the mlx backend maps one axis over the "
                         f"processes (mx.distributed has one group), so the mesh must be 1-D: "
                         f"fa.make_mesh(({n},), ('data',)). Meshes of more dimensions need the jax backend.")
    if len(flat) != n or [d.id for d in flat] != list(range(n)):
        raise ValueError(f"a mesh of the mlx devices {[str(d) for d in flat]}, but the mlx run has {n} processes: "
                         f"a mesh over processes holds every process's device once, in process order "
                         f"(fa.devices('mlx'), or fa.make_mesh(({n},), ('data',))); sub-groups are not supported")


def mesh_devices(devices: list, axis_shapes: tuple) -> list:
    """The devices of ``make_mesh(axis_shapes)`` in an mlx run: a mesh over processes holds every process once
    (``ValueError`` otherwise, naming how to start as many processes)."""
    n = int(np.prod(axis_shapes))
    if n > 1 and len(devices) != n:
        raise ValueError(f"make_mesh: a mesh of shape {tuple(axis_shapes)} over {len(devices)} mlx devices; on the mlx "
                         f"backend a mesh over processes holds every process once: make_mesh(({len(devices)},), "
                         f"(name,)) here, or start {n} processes (python -m fnarray.distributed.launch -n {n} "
                         "--backend mlx, or mlx.launch)")
    return devices


def local_device(mesh):
    """This process's device in ``mesh``."""
    for d in mesh.devices.flat:
        if not getattr(d, "remote", False):
            return d
    raise ValueError(f"{mesh!r} holds no device of this process")  # pragma: no cover - check_mesh refuses it


# ----------------------------------------------------------------------------- global arrays


class GlobalBuffer:
    """The buffer of a global array on a mesh over processes: this process's shard and the sharding."""

    __slots__ = ("local", "sharding")

    def __init__(self, local, sharding):
        self.local, self.sharding = local, sharding

    @property
    def replicated(self) -> bool:
        return self.sharding.is_fully_replicated

    def __repr__(self):
        return f"GlobalBuffer(local shape {tuple(self.local.shape)}, {self.sharding!r})"


def _index(spec, shape, mesh, rank):
    """The slices of the global ``shape`` that ``rank`` holds when split as ``spec`` (a 1-D mesh)."""
    out = []
    for size, part in zip(shape, tuple(spec) + (None,) * (len(shape) - len(spec)), strict=True):
        if part is None:
            out.append(slice(None))
        else:
            k = size // mesh.size
            out.append(slice(rank * k, (rank + 1) * k))
    return tuple(out)


def _split(value, spec, mesh):
    """This process's shard of a full global ``value`` (an ``mx.array``)."""
    if all(p is None for p in spec):
        return value
    return value[_index(spec, tuple(value.shape), mesh, mesh_rank())]


def mesh_rank() -> int:
    return _group().rank()


def _local_of(buf, spec, mesh, what):
    """The shard ``spec`` asks for, from a global buffer or a full value (the same in every process)."""
    if isinstance(buf, GlobalBuffer):
        have = buf.sharding
        if have.mesh == mesh and tuple(have.spec.padded(len(buf.local.shape))) == tuple(
                spec.padded(len(buf.local.shape))):
            return buf.local
        if buf.replicated:
            return _split(buf.local, spec, mesh)
        raise FnArrayError(f"{what}: a global array split as {have.spec!r} over {have.mesh!r} is needed as {spec!r}; "
                           "the mlx backend does not move shards between processes outside a collective: gather it "
                           "inside a shard_map (fnarray.lax.all_gather) or give the shard_map the same in_specs")
    if not isinstance(buf, mx.array):
        buf = from_numpy(to_numpy(buf))
    return _split(buf, spec, mesh)


def put_global(x, sharding):
    """``fa.device_put(x, NamedSharding(mesh over processes, spec))``: this process's shard of ``x``.

    Args:
      x: an ``ArrayImpl`` holding the full value (the same in every process, as JAX assumes for a host
        value), or a global array of this mesh (kept when already so split, re-split when replicated).
      sharding: a ``NamedSharding`` over a mesh of the run's processes.
    Returns:
      A global ``ArrayImpl`` of ``x``'s shape on this process's device, its buffer a ``GlobalBuffer``.
    Raises:
      ``FnArrayError`` for a global array split otherwise (shards do not move between processes here).
    """
    mesh = sharding.mesh
    dev = local_device(mesh)
    b = x.buf()
    if isinstance(b, GlobalBuffer):
        local = _local_of(b, sharding.spec, mesh, "device_put")
    else:
        full = b if isinstance(b, mx.array) and x.device.backend == "mlx" else from_numpy(np.asarray(x))
        local = _split(full, sharding.spec.padded(x.ndim), mesh)
    return ArrayImpl.make(x.aval, dev, GlobalBuffer(local, sharding), committed=True)


def global_buffer(arr):
    """The ``GlobalBuffer`` of ``arr`` (an ``ArrayImpl`` on the mlx backend) when it is a global array over the
    processes, else ``None`` (a deleted array too)."""
    b = arr.call_view()[0]
    return b if isinstance(b, GlobalBuffer) else None


def addressable_shards(arr, g) -> list:
    """This process's one ``Shard`` of the global array ``arr`` whose buffer is ``g``."""
    dev = arr.device
    split = bool(g.sharding.spec.padded(arr.ndim).axis_names())
    aval = ShapedArray(tuple(g.local.shape), arr.dtype, arr.aval.weak_type)
    index = g.sharding.devices_indices_map(arr.shape)[dev]
    return [Shard(dev, index, 0 if split else dev.process_index, ArrayImpl.make(aval, dev, g.local, committed=True))]


def host_value(buf):
    """``np.asarray`` of a global array (as JAX's).

    Args:
      buf: a ``GlobalBuffer``.
    Returns:
      This process's copy (a NumPy array) when the array is fully replicated.
    Raises:
      ``FnArrayError`` for an array split over the processes, naming ``addressable_shards``.
    """
    if buf.replicated:
        return to_numpy(buf.local)
    raise FnArrayError(f"this global array is split over the processes of an mlx run ({buf.sharding!r}) and this "
                       "process holds only its shard: read x.addressable_shards[0].data, or gather it first "
                       "(a shard_map with fnarray.lax.all_gather, or out_specs=P())")


# ----------------------------------------------------------------------------- the collectives


def _members(params):
    """The ranks of this process's group of ``axis_index_groups`` (in the group's order), or ``None``."""
    groups = params.get("axis_index_groups")
    if groups is None:
        return None
    r = mesh_rank()
    return next(list(g) for g in groups if r in g)


def _psum(params, in_avals, out_avals):
    if params.get("axis_index_groups") is not None:
        return lambda x: mx.sum(mx.take(_gathered(x), mx.array(_members(params)), axis=0), axis=0)

    def f(x):
        return mx.distributed.all_sum(x, group=_group(), stream=mx.cpu)
    return f


def _gathered(x):
    """Every process's ``x`` stacked along a new leading axis (``(n, *x.shape)``)."""
    return mx.distributed.all_gather(mx.expand_dims(x, 0), group=_group(), stream=mx.cpu)


def _extremum(prim, native):
    def factory(params, in_avals, out_avals):
        aval = in_avals[0]
        if params.get("axis_index_groups") is not None:
            def grouped(x):  # this group's values, reduced as the reference reduces them (NaN propagates)
                m = _members(params)
                reduce = RULES[prim]({"axes": (0,)}, [aval.update(shape=(len(m),) + tuple(aval.shape))], out_avals)
                return reduce(mx.take(_gathered(x), mx.array(m), axis=0))
            return grouped
        if dtypes.is_int(aval.dtype):
            fn = getattr(mx.distributed, native)
            return lambda x: fn(x, group=_group(), stream=mx.cpu)
        # MLX's all_max/all_min drop NaN (measured); the local reduction propagates it as the reference.
        n = params["axis_size"] if "axis_size" in params else _group().size()
        reduce = RULES[prim]({"axes": (0,)}, [aval.update(shape=(n,) + tuple(aval.shape))], out_avals)
        return lambda x: reduce(_gathered(x))
    return factory


def _all_gather(params, in_avals, out_avals):
    axis, tiled = params["axis"], params["tiled"]
    if params.get("axis_index_groups") is not None:
        def grouped(x):
            y = mx.moveaxis(mx.take(_gathered(x), mx.array(_members(params)), axis=0), 0, axis)  # (..., k, x[axis]...)
            if not tiled:
                return y
            s = y.shape
            return y.reshape(s[:axis] + (s[axis] * s[axis + 1],) + s[axis + 2:])
        return grouped

    def f(x):
        if tiled:
            y = mx.distributed.all_gather(mx.moveaxis(x, axis, 0) if x.ndim else x, group=_group(), stream=mx.cpu)
            return mx.moveaxis(y, 0, axis) if x.ndim else y
        return mx.moveaxis(_gathered(x), 0, axis)
    return f


def _psum_scatter(params, in_avals, out_avals):
    d, tiled = params["scatter_dimension"], params["tiled"]
    n = params["axis_size"]

    def f(x):
        s = mx.distributed.all_sum(x, group=_group(), stream=mx.cpu)
        r = mesh_rank()
        if tiled:
            k = x.shape[d] // n
            return mx.take(s, mx.arange(r * k, (r + 1) * k), axis=d)
        return mx.take(s, r, axis=d)
    return f


def _all_to_all(params, in_avals, out_avals):
    s_ax, c_ax, tiled, n = params["split_axis"], params["concat_axis"], params["tiled"], params["axis_size"]

    def f(x):
        g = _gathered(x)                         # (sender, *x.shape)
        r = mesh_rank()
        if not tiled:
            mine = mx.take(g, r, axis=s_ax + 1)  # (sender, x.shape without split_axis)
            return mx.moveaxis(mine, 0, c_ax)
        k = x.shape[s_ax] // n
        mine = mx.take(g, mx.arange(r * k, (r + 1) * k), axis=s_ax + 1)  # (sender, ..., k at split_axis, ...)
        moved = mx.moveaxis(mine, 0, c_ax)      # the senders just before concat_axis's own extent
        shape = list(moved.shape)
        shape[c_ax:c_ax + 2] = [shape[c_ax] * shape[c_ax + 1]]
        return moved.reshape(shape)
    return f


def ppermute_plan(perm, n, rank):
    """``(source, destination, receive_first)`` of ``rank`` for ``ppermute(perm)`` over ``n`` processes,
    or ``None`` where the permutation needs the ``all_gather`` route (a pair that is not ring neighbours).

    Along each cycle of the permutation the lowest rank sends first and the others receive first, and a
    path starts at its head: every send meets a process that is already receiving, so blocking sends of
    any size complete (two processes that both send first hang in MLX's ring backend, measured).
    """
    succ = {int(s): int(d) for s, d in perm}
    pred = {d: s for s, d in succ.items()}
    if any(s != d and (d - s) % n not in (1, n - 1) for s, d in succ.items()):
        return None
    src, dst = pred.get(rank), succ.get(rank)
    if src is None or dst is None:
        return src, dst, dst is None  # a path: its head sends, the rest receive first
    cycle, r = [rank], dst
    while r is not None and r != rank:
        cycle.append(r)
        r = succ.get(r)
    if r is None:  # rank lies inside a path: receive, then pass on
        return src, dst, True
    return src, dst, rank != min(cycle)


def _ppermute(params, in_avals, out_avals):
    perm, n = params["perm"], params["axis_size"]
    aval = in_avals[0]

    def f(x):
        # Every process evaluates x first: its graph may hold lazy collectives (a psum before the ppermute, as
        # grad's transpose puts one), and a process blocked in send/recv would never run its half of them
        # while the other forces its own (both hung, found by trying ppermute(psum(v))).
        mx.eval(x)
        g = _group()
        r = g.rank()
        plan = ppermute_plan(perm, n, r)
        zeros = mx.zeros(x.shape, dtype=x.dtype)
        if plan is None:
            src = {int(d): int(s) for s, d in perm}.get(r)
            return zeros if src is None else mx.take(_gathered(x), src, axis=0)
        src, dst, recv_first = plan
        if src == r or aval.size == 0:  # a process sending to itself; nothing to move
            return x if src is not None else zeros
        flat = x.reshape(-1)
        got = None

        def receive():
            v = mx.distributed.recv((max(aval.size, 1),), flat.dtype, src, group=g, stream=mx.cpu)
            mx.eval(v)
            return v

        def send():
            mx.eval(mx.distributed.send(flat, dst, group=g, stream=mx.cpu))

        if recv_first:
            if src is not None:
                got = receive()
            if dst is not None:
                send()
        else:
            if dst is not None:
                send()
            if src is not None:
                got = receive()
        return zeros if got is None else got.reshape(x.shape)
    return f


def _axis_index(params, in_avals, out_avals):
    return lambda: mx.array(mesh_rank(), dtype=mx.int32)


RULES[C.psum_p] = _psum
RULES[C.pmax_p] = _extremum(P.reduce_max, "all_max")
RULES[C.pmin_p] = _extremum(P.reduce_min, "all_min")
RULES[C.all_gather_p] = _all_gather
RULES[C.psum_scatter_p] = _psum_scatter
RULES[C.all_to_all_p] = _all_to_all
RULES[C.ppermute_p] = _ppermute
RULES[C.axis_index_p] = _axis_index


# ----------------------------------------------------------------------------- shard_map


def _check_body(program):
    for e in walk_eqns(program):
        if e.primitive in CONTROL_FLOW or e.primitive is shard_map_p:
            raise FnArrayError(f"shard_map over mlx processes: the body holds {e.primitive.name}, which the mlx "
                               "backend runs from the host and cannot run inside a shard_map over processes; keep "
                               "loops and conditionals outside the shard_map (a Python loop around a jitted "
                               "shard_map step), or use the jax backend")


def _shard_map(params, in_avals, out_avals):
    mesh, program = params["mesh"], params["program"]
    in_specs, out_specs = params["in_specs"], params["out_specs"]
    _check_body(program)
    body = generated(program).fn
    outs_sh = [NamedSharding(mesh, s) for s in out_specs]

    def f(*bufs):
        local = [_local_of(b, s, mesh, "shard_map") for b, s in zip(bufs, in_specs, strict=True)]
        outs = body(*local)
        # A point every process passes in the same order: the collectives of this body run now.
        mx.eval(*[o for o in outs if isinstance(o, mx.array)])
        return [GlobalBuffer(o, s) for o, s in zip(outs, outs_sh, strict=True)]
    return f


RULES[shard_map_p] = _shard_map


# ----------------------------------------------------------------------------- programs with global values

_ELEMENTWISE_KINDS = ("unary", "binary")
_ELEMENTWISE_NAMES = {"select_n", "add_any", "copy", "stop_gradient"}


def _is_elementwise(prim) -> bool:
    return getattr(prim, "kind", None) in _ELEMENTWISE_KINDS or prim.name in _ELEMENTWISE_NAMES


class _Interpreted:
    """A program run equation by equation with global buffers (``shard_map`` over processes or global inputs)."""

    def __init__(self, program):
        self.program, _ = dce(program)
        self.steps = []
        for e in self.program.eqns:
            if e.primitive in CONTROL_FLOW:
                raise FnArrayError(f"a jitted function on the mlx backend of a run of several processes holds "
                                   f"{e.primitive.name} beside global arrays or a shard_map over processes: put "
                                   "the loop outside jit (a Python loop around the jitted step)")
            fn = RULES[e.primitive](e.params, [a.aval for a in e.inputs], [o.aval for o in e.outputs])
            self.steps.append((e, fn))

    def __call__(self, bufs):
        prog = self.program
        env = dict(zip(list(prog.constvars) + list(prog.invars), bufs, strict=True))

        def read(a):
            if isinstance(a, Literal):
                return from_numpy(np.asarray(a.val, a.aval.dtype))
            return env[a]

        for e, fn in self.steps:
            ins = [read(a) for a in e.inputs]
            if e.primitive is shard_map_p:
                outs = fn(*ins)
            else:
                outs = _on_globals(e, fn, ins)
            for o, v in zip(e.outputs, outs, strict=True):
                env[o] = v
        return [read(a) for a in prog.outvars]


def _on_globals(e, fn, ins):
    glob = [b for b in ins if isinstance(b, GlobalBuffer)]
    if not glob:
        outs = fn(*ins)
        return list(outs) if e.primitive.multiple_results else [outs]
    if all(b.replicated for b in glob):
        sh = glob[0].sharding
        outs = fn(*[b.local if isinstance(b, GlobalBuffer) else b for b in ins])
        outs = list(outs) if e.primitive.multiple_results else [outs]
        return [GlobalBuffer(o, sh) for o in outs]
    sh = glob[0].sharding
    same = all(b.sharding == sh for b in glob)
    plain_scalars = all(isinstance(b, GlobalBuffer) or a.aval.ndim == 0 for a, b in zip(e.inputs, ins, strict=True))
    if _is_elementwise(e.primitive) and same and plain_scalars and \
            all(o.aval.shape == e.inputs[0].aval.shape for o in e.outputs):
        outs = fn(*[b.local if isinstance(b, GlobalBuffer) else b for b in ins])
        outs = list(outs) if e.primitive.multiple_results else [outs]
        return [GlobalBuffer(o, sh) for o in outs]
    specs = sorted({repr(b.sharding.spec) for b in glob})
    raise FnArrayError(
        f"{e.primitive.name} of global arrays split over the processes of an mlx run ({', '.join(specs)}): the mlx "
        "backend runs such operations only on replicated global arrays, or elementwise on arrays split alike; do "
        "this computation inside the shard_map (with the collectives it needs), or return replicated values from "
        "it (out_specs=P() after a psum/all_gather)")


def _has_process_shard_map(program) -> bool:
    return any(e.primitive is shard_map_p and e.params["mesh"].size > 1 for e in program.eqns)


def distributed_executable(program, normal):
    """The executable of ``program`` in an mlx run of several processes.

    Args:
      program: the program (decomposed, as ``MlxLowered`` receives it).
      normal: a function of no argument building the usual executable (generated source, ``mx.compile``
        policy); it serves calls whose buffers are all plain in programs without a ``shard_map`` over
        processes. The others run through ``_Interpreted``, never compiled (the module docstring: the order
        of collectives).
    Returns:
      A function ``bufs -> bufs``.
    Raises:
      ``FnArrayError`` (when run) for operations on split global arrays that need other processes' shards.
    """
    if _has_process_shard_map(program):
        interp = _Interpreted(program)
        return interp
    state: dict = {}

    def run(bufs):
        for b in bufs:
            if isinstance(b, GlobalBuffer):
                it = state.get("interp")
                if it is None:
                    it = state["interp"] = _Interpreted(program)
                return it(bufs)
        exe = state.get("normal")
        if exe is None:
            exe = state["normal"] = normal()
        return exe(bufs)
    return run
