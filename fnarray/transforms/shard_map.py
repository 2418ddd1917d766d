"""``shard_map``, ``with_sharding_constraint`` and ``jit``'s shardings (``jax.shard_map``, ``jax.jit``).

``shard_map(f, mesh=, in_specs=, out_specs=)`` runs ``f`` on each device's shard of its arguments, with
the mesh axes bound as named axes (so ``psum(x, "data")`` sums over the devices along ``data``).
``f`` is traced once into a per-shard program, which is checked as JAX checks it (``check_vma``: an output
whose ``out_specs`` leave out a mesh axis must not vary over that axis, i.e. a collective made it
the same on every device), then:

- on a mesh of jax devices, the program becomes one ``shard_map`` equation, which the jax backend lowers
  to ``jax.shard_map`` with the collectives as ``jax.lax`` collectives (inside or outside ``jit``);
- on a mesh over the processes of an mlx run, the same equation, which the mlx backend runs on each
  process's shard with the collectives on ``mx.distributed`` (``fnarray.lowering.mlx.spmd``);
- on a mesh of one device (any backend), ``f`` runs under a ``vmap`` of size 1 per mesh axis, with the
  mesh's axis names: the collectives' batching rules give their meaning on every backend.

The equation has every rule: batching (a ``None`` dimension in front of each spec), JVP (the JVP program
with the primals' specs for the tangents), partial evaluation (residuals leave the known half stacked
over every device, ``P(all mesh axes)``) and transposition. The transpose follows JAX's ``shard_map``:
the cotangent of an output replicated over mesh axes is handed out once (divided over those devices,
since ``psum`` transposes to ``psum`` here as under ``vmap``), and the cotangent of an input replicated
over mesh axes is summed over them.
"""

from __future__ import annotations

import contextlib
import functools
import math
import threading

import numpy as np
import optree

from fnarray import tree_util
from fnarray.core import collectives as C
from fnarray.core import lax
from fnarray.core import primitives as P
from fnarray.core.array import Array
from fnarray.core.builder import trace_to_program
from fnarray.core.errors import FnArrayError
from fnarray.core.interpreter import eval_program
from fnarray.core.ir import Params, Program, Var
from fnarray.core.passes import consts_as_inputs
from fnarray.core.spmd import local_aval, shard_map_p, sharding_constraint_p
from fnarray.core.subprograms import CALL_PROGRAM
from fnarray.core.tracing import Tracer
from fnarray.devices.placement import device_put
from fnarray.devices.mesh import AxisType, Mesh, PartitionSpec, ambient_mesh, check_spec
from fnarray.devices.sharding import NamedSharding, Sharding
from fnarray.transforms.jvp import jvp_program
from fnarray.transforms.partial_eval import partial_eval_program
from fnarray.transforms.transpose import transpose_program
from fnarray.transforms.ad_tables import (UndefinedPrimal, Zero, instantiate_zeros, partial_eval_rules,
                                          primitive_jvps, primitive_transposes, tangent_aval)
from fnarray.transforms.batching import batch_program, move_batch_dim, vmap
from fnarray.transforms.batching_tables import primitive_batchers

__all__ = ["shard_map", "with_sharding_constraint", "jit_with_shardings", "reshard"]


@contextlib.contextmanager
def mesh_axes(mesh: Mesh):
    """Bind the mesh's axes (without a vmap level: their collectives are staged) while tracing a body."""
    for name, size in mesh.shape.items():
        C.push_axis(C.AxisFrame(name, size, None))
    try:
        yield
    finally:
        for _ in mesh.axis_names:
            C.pop_axis()


# ----------------------------------------------------------------------------- specs as pytree prefixes


def _is_spec(x) -> bool:
    return x is None or isinstance(x, PartitionSpec)


def _spec_leaves(spec, tree, what) -> list:
    """One ``PartitionSpec`` per leaf of ``tree``, from ``spec``, a pytree prefix of ``tree``."""
    if _is_spec(spec):
        return [PartitionSpec() if spec is None else spec] * len(tree_util.tree_leaves(tree))
    treedef = tree_util.tree_structure(tree)
    if tree_util.treedef_is_leaf(treedef):
        raise ValueError(f"shard_map {what} {spec!r} does not match a single array; give a PartitionSpec")
    s = optree.tree_flatten_one_level(spec, none_is_leaf=True, namespace=tree_util.NAMESPACE)
    t = optree.tree_flatten_one_level(tree, none_is_leaf=False, namespace=tree_util.NAMESPACE)
    if type(spec) is not type(tree) or tuple(s.entries) != tuple(t.entries):
        raise ValueError(f"shard_map {what} {spec!r} does not match the structure {treedef}: give a PartitionSpec, "
                         "or a container of the same type and keys holding PartitionSpecs (a pytree prefix)")
    out = []
    for sc, tc in zip(s.children, t.children, strict=True):
        out.extend(_spec_leaves(sc, tc, what))
    return out


def _axes_of(spec) -> set:
    return set(PartitionSpec(*spec).axis_names())


# ----------------------------------------------------------------------------- the check of JAX's check_vma

_VARIES = {C.psum_p: "minus", C.pmax_p: "minus", C.pmin_p: "minus", C.all_gather_p: "minus",
           C.psum_scatter_p: "plus", C.all_to_all_p: "plus", C.ppermute_p: "plus", C.axis_index_p: "plus"}


def _varying(program, in_vary: list) -> list:
    """Per output of ``program``, the mesh axes its value may differ over (inputs vary as ``in_vary``)."""
    env = {v: set(s) for v, s in zip(program.invars, in_vary, strict=True)}

    def read(a):
        return env.get(a, set()) if not hasattr(a, "val") else set()

    for e in program.eqns:
        inner = _varying_inside(e, [read(a) for a in e.inputs])
        if inner is not None:
            for o, v in zip(e.outputs, inner, strict=True):
                env[o] = v
            continue
        ins = set().union(*[read(a) for a in e.inputs]) if e.inputs else set()
        how = _VARIES.get(e.primitive)
        if how == "minus" and e.params.get("axis_index_groups") is not None:
            how = None  # a reduction within groups: the groups' results differ
        if how is not None:
            names = set(C.names_of(e.params["axis_name"]))
            ins = ins - names if how == "minus" else ins | names
        for o in e.outputs:
            env[o] = ins
    return [read(a) for a in program.outvars]


def _varying_inside(e, in_vary: list):
    """Per output of a call, ``cond``, ``while`` or ``scan`` equation, its varying axes from its sub-programs'
    collectives (a ``psum`` inside a nested ``jit`` makes its result the same on every device); ``None`` for other
    equations, which take the union of their inputs'."""
    if e.primitive in CALL_PROGRAM:
        prog = e.params[CALL_PROGRAM[e.primitive]]
        if len(prog.invars) == len(in_vary) and len(prog.outvars) == len(e.outputs):
            return _varying(prog, in_vary)
    elif e.primitive is P.cond:
        index, ops = in_vary[0], in_vary[1:]
        outs = [set(index) for _ in e.outputs]  # a branch chosen differently per device: every output varies so
        for b in e.params["branches"]:
            for o, v in zip(outs, _varying(b, ops), strict=True):
                o |= v
        return outs
    elif e.primitive is P.while_p:
        cn, bn = e.params["cond_nconsts"], e.params["body_nconsts"]
        cc, bc, carry = in_vary[:cn], in_vary[cn:cn + bn], [set(v) for v in in_vary[cn + bn:]]
        while True:  # a fixed point: the axes a carry varies over only grow, and there are finitely many
            new = _varying(e.params["body_program"], bc + carry)
            grown = [c | n for c, n in zip(carry, new, strict=True)]
            if grown == carry:
                break
            carry = grown
        (pred,) = _varying(e.params["cond_program"], cc + carry)
        return [c | pred for c in carry]  # trip counts that differ per device make every carry differ
    elif e.primitive is P.scan:
        nc, nk = e.params["num_consts"], e.params["num_carry"]
        consts, carry, xs = in_vary[:nc], [set(v) for v in in_vary[nc:nc + nk]], in_vary[nc + nk:]
        while True:  # the carries' fixed point, as for while
            new = _varying(e.params["program"], consts + carry + xs)
            grown = [c | n for c, n in zip(carry, new[:nk], strict=True)]
            if grown == carry:
                return carry + new[nk:]
            carry = grown
    return None


def _check_vma(program, in_specs, out_specs, out_names):
    vary = _varying(program, [_axes_of(s) for s in in_specs])
    for name, v, spec in zip(out_names, vary, out_specs, strict=True):
        missing = sorted(v - _axes_of(spec), key=str)
        if missing:
            ax = missing[0]
            raise ValueError(
                f"shard_map out_specs {spec!r} for {name} leave out the mesh axis {ax!r}, but that output varies "
                f"over {ax!r} (it depends on a value split or indexed over {ax!r}, and no psum, pmean, pmax, pmin "
                f"or all_gather over {ax!r} makes it the same on every device). Reduce it with "
                f"fnarray.lax.psum(..., {ax!r}) (or pmean/all_gather), or name {ax!r} in its out_specs; "
                "check_vma=False skips this check (JAX's).")


# ----------------------------------------------------------------------------- shard_map


class _Infer:
    """The default of ``shard_map``'s ``in_specs`` (``jax.sharding.Infer``): from the arguments' shardings."""

    def __repr__(self):
        return "Infer"


Infer = _Infer()


def _explicit_spec(spec, mesh) -> PartitionSpec:
    """``spec`` with only ``mesh``'s Explicit axes (those an array's type carries), trailing ``None``s dropped."""
    keep = []
    for part in spec:
        names = () if part is None else part if isinstance(part, tuple) else (part,)
        names = tuple(n for n in names if n in mesh.axis_names and mesh.explicit(n))
        keep.append(None if not names else names[0] if len(names) == 1 else names)
    while keep and keep[-1] is None:
        keep.pop()
    return PartitionSpec(*keep)


def _type_spec(x, mesh):
    """The spec over ``mesh``'s Explicit axes that a concrete array's sharding gives (JAX's ``typeof(x).sharding``);
    ``None`` for a value that is not a global array of this mesh."""
    sharding = getattr(x, "sharding", None) if not isinstance(x, Tracer) else None
    if isinstance(sharding, NamedSharding) and sharding.mesh == mesh:
        return _explicit_spec(sharding.spec, mesh)
    return None


# ----------------------------------------------------------------------------- shardings of traced values
#
# JAX 0.10 keeps an array's sharding in its type, so a traced value under jit still has one and shard_map can
# infer in_specs from it. fnarray's abstract values have no sharding; instead jit, while it traces, records for
# each argument tracer the value it stands for (``traced_arguments``), and ``reshard``/``with_sharding_constraint``
# record the sharding they give a traced value. A jitted function whose trace looked a sharding up this way
# keys its traces and executables by its arguments' shardings from then on (``jit``: ``leaf_shardings``).

_TRACED = threading.local()
_UNKNOWN = object()   # a traced value whose sharding was not recorded (computed inside the trace)


def _frames() -> list:
    frames = getattr(_TRACED, "frames", None)
    if frames is None:
        frames = _TRACED.frames = []
    return frames


class TracedArguments:
    """One trace's record: ``id(tracer) -> the value it stands for`` (an argument, or a ``NamedSharding``);
    ``used`` is set when a sharding was looked up in it. The builder keeps its tracers alive while it traces, so
    their ids are unique meanwhile."""

    __slots__ = ("by_id", "used")

    def __init__(self, by_id):
        self.by_id, self.used = by_id, False


class traced_arguments:  # noqa: N801 (used as the function it was: ``with traced_arguments(...) as frame``)
    """While ``jit`` traces: each argument tracer stands for its value (a concrete array, or an outer tracer).

    (A class, not a ``contextlib`` generator: jit opens one for every trace, each new length of a growing
    loop's; issue 28.)"""

    __slots__ = ("frame", "frames")

    def __init__(self, tracers, values):
        self.frame = TracedArguments({id(t): v for t, v in zip(tracers, values, strict=True)})

    def __enter__(self):
        self.frames = _frames()
        self.frames.append(self.frame)
        return self.frame

    def __exit__(self, *exc):
        self.frames.pop()
        return False


def _record_traced_sharding(tracer, sharding) -> None:
    from fnarray.core.builder import BuilderTracer
    frames = _frames()
    if frames and type(tracer) is BuilderTracer:   # (kept alive by its builder while the trace runs)
        frames[-1].by_id[id(tracer)] = sharding


def _traced_sharding(x):
    """The ``NamedSharding`` of traced ``x`` as recorded, or as propagated from its operands through elementwise
    equations (``None``: replicated, or an argument that is no global array); ``_UNKNOWN`` where neither says."""
    for frame in reversed(_frames()):
        v = frame.by_id.get(id(x), _UNKNOWN)
        if v is not _UNKNOWN:
            frame.used = True
            return leaf_sharding(v)
    return _propagated_sharding(x) if _frames() else _UNKNOWN


_ELEMENTWISE_KINDS = ("unary", "binary")


def _propagated_sharding(x):
    """The sharding of a value computed inside the trace, as JAX's sharding-in-types propagates it, for the simple
    cases: an elementwise equation whose array operands of the result's shape all have one known sharding gives
    it (``a * 3``), and an equation without array operands gives a replicated value (``jnp.ones(8)``)."""
    from fnarray.core.builder import BuilderTracer
    from fnarray.core.ir import Var
    if type(x) is not BuilderTracer or x.literal is not None:
        return _UNKNOWN
    builder = x._trace.builder
    for t, value in builder.consts.values():   # a captured value
        if t is x:
            return leaf_sharding(value)
    var = builder.vars.get(id(x))
    eqn = next((e for e in reversed(builder.eqns) if var in e.outputs), None)
    if eqn is None:
        return _UNKNOWN
    operands = [v for v in eqn.inputs if isinstance(v, Var)]
    if not operands:
        return None
    if eqn.primitive.kind not in _ELEMENTWISE_KINDS:
        return _UNKNOWN
    by_var = {builder.vars[id(t)]: t for t in builder.tracers if id(t) in builder.vars}
    found = set()
    for v in operands:
        if v.aval.shape != var.aval.shape:
            continue
        s = _traced_sharding(by_var[v]) if v in by_var else _UNKNOWN
        if s is _UNKNOWN:
            return _UNKNOWN
        found.add(s)
    if len(found - {None}) > 1:
        return _UNKNOWN
    return next(iter(found - {None}), None)


def leaf_sharding(x):
    """A jit argument's ``NamedSharding`` (a global array's, or a traced value's as recorded), else ``None``."""
    if isinstance(x, NamedSharding):
        return x
    if isinstance(x, Tracer):
        s = _traced_sharding(x)
        return None if s is _UNKNOWN else s
    s = getattr(x, "sharding", None) if isinstance(x, Array) else None
    return s if isinstance(s, NamedSharding) else None


def leaf_shardings(leaves) -> tuple:
    """``leaf_sharding`` of each of a jitted call's leaves: the part of its cache key that says how they lie."""
    return tuple(leaf_sharding(x) for x in leaves)


def _inferred_spec(x, mesh):
    """The spec ``shard_map`` infers for ``x`` over ``mesh``'s Explicit axes (JAX's ``typeof(x).sharding``)."""
    if not isinstance(x, Tracer):
        return _type_spec(x, mesh) or PartitionSpec()
    s = _traced_sharding(x)
    if s is _UNKNOWN:
        raise ValueError("shard_map: in_specs cannot be inferred for this value computed inside jit (fnarray knows "
                         "the shardings of jit's arguments, of reshard / with_sharding_constraint results and of "
                         "elementwise operations on them, not of other traced values, nor under grad or vmap); pass "
                         "in_specs=, or reshard the value first")
    if s is None or s.mesh != mesh:
        return PartitionSpec()
    return _explicit_spec(s.spec, mesh)


def _sharded_spec(x, mesh):
    """``_type_spec`` of a concrete value or of a traced one whose sharding was recorded; else ``None``."""
    if not isinstance(x, Tracer):
        return _type_spec(x, mesh)
    s = _traced_sharding(x)
    if s is _UNKNOWN or s is None or s.mesh != mesh:
        return None
    return _explicit_spec(s.spec, mesh)


def _in_specs(in_specs, args, leaves, mesh) -> list:
    """One spec per leaf: given (checked against each input's sharding over Explicit axes, as JAX 0.10 checks
    it), or inferred from the inputs' shardings (``P()`` for values that are not global arrays of the mesh).
    Under ``jit`` an input's sharding is its argument's, or what ``reshard`` gave it (``traced_arguments``)."""
    if in_specs is Infer:
        auto = [n for n, t in zip(mesh.axis_names, mesh.axis_types, strict=True) if t is not AxisType.Explicit]
        if auto:
            raise TypeError(f"shard_map: in_specs must be given (a PartitionSpec per argument) when mesh axes "
                            f"{auto!r} are not AxisType.Explicit; in_specs are inferred from the arguments' "
                            "shardings over Explicit axes only (fa.make_mesh's default)")
        return [_inferred_spec(x, mesh) for x in leaves]
    specs = _spec_leaves(tuple(in_specs) if isinstance(in_specs, list) else in_specs, args, "in_specs")
    if any(t is AxisType.Explicit for t in mesh.axis_types):
        for spec, x in zip(specs, leaves, strict=True):
            have = _sharded_spec(x, mesh)
            if have is not None and have != _explicit_spec(spec, mesh):
                raise ValueError(
                    f"shard_map in_specs {spec!r} do not match the sharding of the input, {have!r} over the "
                    f"Explicit mesh axes (an array of shape {tuple(x.shape)}). Omit in_specs to infer them from the "
                    "arguments, or move the input first: fnarray.device_put(x, NamedSharding(mesh, spec)).")
    return specs


def shard_map(f=None, /, *, out_specs, in_specs=Infer, mesh=None, check_vma=True, axis_names=None,
              check_rep=None):
    """Map ``f`` over the shards of its arguments on every device of ``mesh`` (``jax.shard_map``).

    Usable as ``shard_map(f, mesh=..., in_specs=..., out_specs=...)``, as a decorator
    ``@shard_map(out_specs=...)`` (JAX 0.10) and through ``functools.partial``.

    Args:
      f: a function of arrays (pytrees) returning arrays; inside it the mesh axis names are bound for the
        collectives of ``fnarray.lax`` (``psum``, ``all_gather``, ``ppermute``, ``axis_index``...). Omitted: a
        decorator is returned.
      out_specs: a ``PartitionSpec`` per output (a pytree prefix): how the shards are assembled.
      in_specs: a ``PartitionSpec`` per argument (a pytree prefix of the arguments tuple): how each global
        argument is split into the shard that ``f`` sees. Omitted (JAX's ``Infer``): each argument's own spec
        over the mesh's ``AxisType.Explicit`` axes (``P()`` for a value that is not a global array of the mesh);
        under ``jit`` the sharding of the jitted function's argument, or of a ``reshard`` result, it came from.
      mesh: a ``fnarray.sharding.Mesh``; ``None``: the ambient mesh at call time (``fnarray.sharding.set_mesh``).
      check_vma: check that outputs replicated over a mesh axis do not vary over it (as JAX).
      axis_names, check_rep: JAX's; ``axis_names`` must name every mesh axis (all mesh axes are manual).
    Returns:
      A function of global arrays returning global arrays (on jax: sharded over the mesh).
    Raises:
      ``ValueError`` for a spec naming an axis the mesh lacks, ``in_specs`` that contradict an argument's
      sharding over Explicit axes, ``out_specs`` that leave out an axis an output varies over, no mesh,
      ``in_specs`` omitted for a value computed inside ``jit`` (its sharding is not known);
      ``TypeError`` for ``in_specs`` omitted over a mesh with Auto axes; ``ShapeError`` for a dimension its mesh
      axes do not divide.
    """
    if f is None:
        return functools.partial(shard_map, out_specs=out_specs, in_specs=in_specs, mesh=mesh, check_vma=check_vma,
                                 axis_names=axis_names, check_rep=check_rep)
    if mesh is not None and not isinstance(mesh, Mesh):
        raise TypeError(f"shard_map: mesh must be a fnarray.sharding.Mesh (fnarray.make_mesh), got "
                        f"{type(mesh).__name__}")
    if check_rep is not None:
        check_vma = bool(check_rep)
    fixed_mesh = mesh

    @functools.wraps(f)
    def mapped(*args):
        from fnarray.core.avals import asarray, get_aval
        mesh = fixed_mesh if fixed_mesh is not None else ambient_mesh("shard_map without mesh=")
        if axis_names and set(axis_names) != set(mesh.axis_names):
            raise NotImplementedError("shard_map: axis_names (partially manual meshes) is not supported; every "
                                      "mesh axis is manual")
        leaves, in_tree = tree_util.tree_flatten(args)
        leaves = [x if isinstance(x, Array) else asarray(x) for x in leaves]
        specs = _in_specs(in_specs, args, leaves, mesh)
        specs = [check_spec(s, mesh, get_aval(x).shape, "shard_map in_specs") for s, x in zip(specs, leaves,
                                                                                             strict=True)]
        local = [local_aval(get_aval(x), s, mesh) for x, s in zip(leaves, specs, strict=True)]
        flat_body, program, consts, o_tree, o_specs = _trace_body(f, in_tree, local, mesh, out_specs)
        c_specs = [PartitionSpec()] * len(consts)
        if check_vma:
            names = [f"output {i}" for i in range(len(o_specs))]
            _check_vma(program, c_specs + specs, o_specs, names)
        outs = _run_on_mesh(flat_body, program, consts, leaves, c_specs, specs, o_specs, mesh)
        return tree_util.tree_unflatten(o_tree, list(outs))

    return mapped


def _trace_body(f, in_tree, local, mesh, out_specs):
    """``f`` traced on shards of avals ``local`` with the mesh axes bound: ``(flat_body, program, consts,
    output tree, output specs)``."""
    from fnarray.core.avals import asarray
    store = {}

    def flat_body(*xs):
        out = f(*tree_util.tree_unflatten(in_tree, list(xs)))
        o_leaves, o_tree = tree_util.tree_flatten(out)
        store["tree"], store["out"] = o_tree, out
        return [x if isinstance(x, Array) else asarray(x) for x in o_leaves]

    with mesh_axes(mesh):
        program, consts = trace_to_program(flat_body, local, debug_name=getattr(f, "__name__", "shard_map"))
    program = consts_as_inputs(program)
    o_tree = store["tree"]
    out_struct = tree_util.tree_unflatten(o_tree, [0] * o_tree.num_leaves)
    o_specs = _spec_leaves(tuple(out_specs) if isinstance(out_specs, list) else out_specs, out_struct, "out_specs")
    o_specs = [check_spec(s, mesh, None, "shard_map out_specs") for s in o_specs]
    return flat_body, program, consts, o_tree, o_specs


def _run_on_mesh(flat_body, program, consts, leaves, c_specs, specs, o_specs, mesh):
    """The traced body run over ``mesh``: one ``shard_map_p`` equation on jax (and mlx over processes), a named
    vmap over a one-device mesh."""
    if mesh.impl.binds_shard_map(mesh):
        # Concrete inputs elsewhere (a NumPy value, an array on numpy:0) are placed on the mesh first, as
        # jax.shard_map places its inputs; traced ones are where their jit runs. (On mlx over processes,
        # an mlx array that is not global is a full value, split by the shard_map rule: mlx_spmd.)
        leaves = [x if isinstance(x, Tracer) or getattr(x, "device", None) is not None and
                  x.device.backend == mesh.backend else device_put(x, NamedSharding(mesh, s))
                  for x, s in zip(leaves, specs, strict=True)]
        return shard_map_p.bind(*on_mesh(consts, c_specs, mesh), *leaves, program=program, mesh=mesh,
                                in_specs=tuple(c_specs + specs), out_specs=tuple(o_specs))
    if mesh.size == 1:
        return _as_named_vmap(flat_body, mesh, leaves)
    # Not reached: Mesh refuses larger meshes on the other backends.  # pragma: no cover
    raise FnArrayError(f"shard_map over {mesh!r}: the {mesh.backend} backend cannot run it")


def on_mesh(values, specs, mesh) -> list:
    """The concrete ``values`` laid out over ``mesh`` as their ``specs`` say (traced ones unchanged).

    A program's captured constants (a NumPy ``arange`` a body made, say) are single-device arrays; handed
    so to a ``shard_map`` over several jax devices, JAX copies each one to every device on every call of
    the compiled program (``pxla.shard_args``: measured 0.5 ms a step of ``benchmarks/data_parallel.py``
    on 2 devices, 30% of it). Placed once here, a jitted caller keeps them as its constants' buffers.
    """
    if mesh.size == 1:
        return list(values)
    impl = mesh.impl
    return [x if isinstance(x, Tracer) else impl.shard_map_operand(x, NamedSharding(mesh, s))
            for x, s in zip(values, specs, strict=True)]


def _as_named_vmap(flat_body, mesh, leaves):
    """A mesh of one device: ``f`` under one ``vmap`` of size 1 per mesh axis, named as the axis."""
    k = len(mesh.axis_names)
    fn = flat_body
    for name in reversed(mesh.axis_names):
        fn = vmap(fn, axis_name=name)
    xs = [lax.reshape(x, (1,) * k + tuple(x.shape)) for x in leaves]
    outs = fn(*xs)
    return [lax.reshape(o, tuple(o.shape)[k:]) for o in outs]


# ----------------------------------------------------------------------------- rules of the equation


def _bind(args, program, mesh, in_specs, out_specs):
    if not program.outvars:
        return []
    if not any(isinstance(a, Tracer) or getattr(getattr(a, "device", None), "backend", None) == mesh.backend
               for a in args):
        # Nothing says where an eager equation runs (no operand on the mesh, e.g. the known half of a
        # partial evaluation without inputs): an unused scalar on the mesh's first device does.
        anchor = device_put(np.zeros((), np.float32), _local_device(mesh))
        program = Program([], [Var(anchor.aval)] + list(program.invars), program.eqns, program.outvars)
        args, in_specs = [anchor, *args], [PartitionSpec(), *in_specs]
    return shard_map_p.bind(*on_mesh(args, in_specs, mesh), program=program, mesh=mesh, in_specs=tuple(in_specs),
                            out_specs=tuple(out_specs))


def _local_device(mesh):
    """The mesh's first device that this process holds (a mesh over mlx processes names the others')."""
    return next((d for d in mesh.devices.flat if not getattr(d, "remote", False)), mesh.devices.flat[0])


def shard_map_batch(vals, dims, *, program, mesh, in_specs, out_specs):
    size = next(v.shape[d] for v, d in zip(vals, dims, strict=True) if d is not None)
    args = [v if d is None else move_batch_dim(v, d, 0, size) for v, d in zip(vals, dims, strict=True)]
    with mesh_axes(mesh):
        prog, _ = batch_program(program, size, [d is not None for d in dims], True)
    i_specs = [PartitionSpec(None, *s) if d is not None else s for s, d in zip(in_specs, dims, strict=True)]
    o_specs = [PartitionSpec(None, *s) for s in out_specs]
    outs = _bind(args, prog, mesh, i_specs, o_specs)
    return outs, [0] * len(outs)


def shard_map_jvp(primals, tangents, *, program, mesh, in_specs, out_specs):
    nz = [not isinstance(t, Zero) for t in tangents]
    with mesh_axes(mesh):
        jprog, out_nz = jvp_program(program, nz)
    t_in = [instantiate_zeros(t) for t in tangents if not isinstance(t, Zero)]
    t_specs = [s for s, z in zip(in_specs, nz, strict=True) if z]
    to_specs = [s for s, z in zip(out_specs, out_nz, strict=True) if z]
    outs = _bind(list(primals) + t_in, jprog, mesh, list(in_specs) + t_specs, list(out_specs) + to_specs)
    n = len(program.outvars)
    it = iter(outs[n:])
    t_out = [next(it) if z else Zero(tangent_aval(v.aval)) for z, v in zip(out_nz, program.outvars, strict=True)]
    return outs[:n], t_out


def _retrace(fn, in_avals, mesh):
    with mesh_axes(mesh):
        prog, consts = trace_to_program(fn, in_avals, debug_name="shard_map")
    if consts:
        raise FnArrayError("shard_map: a rule's program captured values; it must be closed")
    return prog


def _all_axes(mesh):
    return PartitionSpec(tuple(mesh.axis_names))


def shard_map_partial_eval(trace, tracers, *, program, mesh, in_specs, out_specs):
    unknowns = [not trace.is_known(t) for t in tracers]
    with mesh_axes(mesh):
        kprog, uprog, out_unknowns, num_res, kconsts = partial_eval_program(program, unknowns)
    n_k_out = len(kprog.outvars) - num_res
    # Residuals differ per device: each leaves as one block of a global array stacked over every device.
    res_avals = [v.aval for v in kprog.outvars[n_k_out:]]

    def known_fn(*xs):
        outs = eval_program(kprog, [], list(xs))
        return outs[:n_k_out] + [lax.reshape(r, (1,) + tuple(a.shape)) for r, a in zip(outs[n_k_out:], res_avals,
                                                                                         strict=True)]
    kprog2 = _retrace(known_fn, [v.aval for v in kprog.invars], mesh)

    def unknown_fn(*xs):
        res = [lax.reshape(r, tuple(a.shape)) for r, a in zip(xs[:num_res], res_avals, strict=True)]
        return eval_program(uprog, [], res + list(xs[num_res:]))
    stacked = [a.update(shape=(1,) + tuple(a.shape)) for a in res_avals]
    uprog2 = _retrace(unknown_fn, stacked + [v.aval for v in uprog.invars[num_res:]], mesh)

    known_in = [trace.known_value(t) for t in tracers if trace.is_known(t)]
    k_specs = [PartitionSpec()] * len(kconsts) + [s for s, u in zip(in_specs, unknowns, strict=True) if not u]
    ko_specs = [s for s, u in zip(out_specs, out_unknowns, strict=True) if not u] + [_all_axes(mesh)] * num_res
    kouts = _bind(list(kconsts) + known_in, kprog2, mesh, k_specs, ko_specs)
    known_outs, res = kouts[:n_k_out], kouts[n_k_out:]
    unknown_in = [t for t in tracers if not trace.is_known(t)]
    u_specs = [_all_axes(mesh)] * num_res + [s for s, u in zip(in_specs, unknowns, strict=True) if u]
    uo_specs = [s for s, u in zip(out_specs, out_unknowns, strict=True) if u]
    u_outs = trace.stage(shard_map_p, [trace.known(r) for r in res] + unknown_in,
                         Params(program=uprog2, mesh=mesh, in_specs=tuple(u_specs), out_specs=tuple(uo_specs)))
    ki, ui = iter(known_outs), iter(u_outs)
    return [next(ui) if u else trace.known(next(ki)) for u in out_unknowns]


def _replicated_size(spec, mesh) -> int:
    used = _axes_of(spec)
    return math.prod(s for n, s in mesh.shape.items() if n not in used)


def shard_map_transpose(cts, *args, program, mesh, in_specs, out_specs):
    linear = [isinstance(a, UndefinedPrimal) for a in args]
    with mesh_axes(mesh):
        tprog = transpose_program(program, linear)
    nonlin = [a for a in args if not isinstance(a, UndefinedPrimal)]
    n_nl = len(nonlin)
    lin_specs = [s for s, lin in zip(in_specs, linear, strict=True) if lin]
    scales = [_replicated_size(s, mesh) for s in out_specs]

    def body(*xs):
        cts_in = [c if k == 1 else lax.div(c, lax.full((), k, c.aval.dtype))
                  for c, k in zip(xs[n_nl:], scales, strict=True)]
        outs = eval_program(tprog, [], list(xs[:n_nl]) + cts_in)
        res = []
        for o, s in zip(outs, lin_specs, strict=True):
            rest = tuple(n for n in mesh.axis_names if n not in _axes_of(s))
            res.append(C.psum_p.bind(o, axis_name=rest if len(rest) > 1 else rest[0]) if rest else o)
        return res

    local_nl = [local_aval(a.aval if isinstance(a, Tracer) else _aval(a), s, mesh)
                for a, s in zip(nonlin, [s for s, lin in zip(in_specs, linear, strict=True) if not lin], strict=True)]
    local_ct = [v.aval.strip_weak() for v in program.outvars]
    prog = _retrace(body, local_nl + local_ct, mesh)
    cts = [instantiate_zeros(c) if not isinstance(c, Zero) else lax.full(c.aval.shape, 0, c.aval.dtype) for c in cts]
    nl_specs = [s for s, lin in zip(in_specs, linear, strict=True) if not lin]
    outs = iter(_bind(nonlin + cts, prog, mesh, nl_specs + list(out_specs), lin_specs))
    return [next(outs) if lin else None for lin in linear]


def _aval(x):
    from fnarray.core.avals import get_aval
    return get_aval(x)


primitive_batchers[shard_map_p] = shard_map_batch
primitive_jvps[shard_map_p] = shard_map_jvp
partial_eval_rules[shard_map_p] = shard_map_partial_eval
primitive_transposes[shard_map_p] = shard_map_transpose


# ----------------------------------------------------------------------------- sharding constraints


def with_sharding_constraint(x, shardings):
    """Ask for ``x`` laid out as ``shardings`` says (``jax.lax.with_sharding_constraint``); the identity on
    values. On jax, XLA (GSPMD) places the value so; on a mesh of one device it is a copy.

    Args:
      x: an array or pytree; shardings: a ``NamedSharding`` (or a pytree prefix of them).
    Returns:
      ``x``'s values.
    Raises:
      ``ValueError``/``ShapeError`` for a spec that does not fit the mesh or the shape.
    """
    from fnarray.core.avals import asarray, get_aval
    leaves, tree = tree_util.tree_flatten(x)
    if isinstance(shardings, NamedSharding):
        shs = [shardings] * len(leaves)
    else:
        shs = tree_util.tree_leaves(shardings, is_leaf=lambda s: isinstance(s, NamedSharding))
        if len(shs) != len(leaves):
            raise ValueError(f"with_sharding_constraint: {len(shs)} shardings for {len(leaves)} arrays")
    out = []
    for v, s in zip(leaves, shs, strict=True):
        v = v if isinstance(v, Array) else asarray(v)
        if not isinstance(s, NamedSharding):
            raise TypeError(f"with_sharding_constraint: expected a NamedSharding, got {s!r}")
        check_spec(s.spec, s.mesh, get_aval(v).shape, "with_sharding_constraint")
        out.append(sharding_constraint_p.bind(v, sharding=s))
        _record_traced_sharding(out[-1], s)
    return tree_util.tree_unflatten(tree, out)


def reshard(xs, out_shardings):
    """``xs`` laid out as ``out_shardings`` say (``jax.sharding.reshard``): concrete arrays are moved
    (``device_put``), traced ones constrained (``with_sharding_constraint``).

    Args:
      xs: an array or pytree; out_shardings: a ``NamedSharding``, a ``PartitionSpec`` over the ambient mesh
        (``fnarray.sharding.set_mesh``), or a pytree prefix of them.
    Returns:
      ``xs``'s values with the new layout.
    Raises:
      ``ValueError`` for a ``PartitionSpec`` without an ambient mesh, a spec that does not fit the mesh or shape.
    """
    def named(s):
        return s if isinstance(s, NamedSharding) else NamedSharding(ambient_mesh("reshard(x, PartitionSpec)"), s)

    def is_spec(s):
        return isinstance(s, (NamedSharding, PartitionSpec))

    leaves, tree = tree_util.tree_flatten(xs)
    if is_spec(out_shardings):
        shs = [named(out_shardings)] * len(leaves)
    else:
        shs = [named(s) for s in tree_util.tree_leaves(out_shardings, is_leaf=is_spec)]
        if len(shs) != len(leaves):
            raise ValueError(f"reshard: {len(shs)} shardings for {len(leaves)} arrays")
    out = [with_sharding_constraint(x, s) if isinstance(x, Tracer) else device_put(x, s)
           for x, s in zip(leaves, shs, strict=True)]
    return tree_util.tree_unflatten(tree, out)


def _constraint_jvp(primals, tangents, *, sharding):
    out = sharding_constraint_p.bind(primals[0], sharding=sharding)
    t = tangents[0]
    return out, t if isinstance(t, Zero) else sharding_constraint_p.bind(instantiate_zeros(t), sharding=sharding)


def _constraint_transpose(ct, x, *, sharding):
    return [Zero(x.aval) if isinstance(ct, Zero) else sharding_constraint_p.bind(ct, sharding=sharding)]


def _constraint_batch(vals, dims, *, sharding):
    (x,), (d,) = vals, dims
    spec = sharding.spec.padded(x.ndim - 1)
    new = NamedSharding(sharding.mesh, PartitionSpec(*spec[:d], None, *spec[d:]))
    return sharding_constraint_p.bind(x, sharding=new), d


primitive_jvps[sharding_constraint_p] = _constraint_jvp
primitive_transposes[sharding_constraint_p] = _constraint_transpose
primitive_batchers[sharding_constraint_p] = _constraint_batch


# ----------------------------------------------------------------------------- jit(in_shardings, out_shardings)


def _sharding_leaves(shardings, tree, what):
    if shardings is None or isinstance(shardings, Sharding):
        return [shardings] * len(tree_util.tree_leaves(tree))
    treedef = tree_util.tree_structure(tree)
    s = optree.tree_flatten_one_level(shardings, none_is_leaf=True, namespace=tree_util.NAMESPACE)
    t = optree.tree_flatten_one_level(tree, none_is_leaf=False, namespace=tree_util.NAMESPACE)
    if tree_util.treedef_is_leaf(treedef) or type(shardings) is not type(tree) or tuple(s.entries) != tuple(t.entries):
        raise ValueError(f"jit {what} {shardings!r} does not match the structure {treedef} (a pytree prefix of "
                         "shardings is expected)")
    out = []
    for sc, tc in zip(s.children, t.children, strict=True):
        out.extend(_sharding_leaves(sc, tc, what))
    return out


class ShardedJitted:
    """``jit(f, in_shardings=, out_shardings=)``: the inputs placed as ``in_shardings`` say, the outputs
    constrained to ``out_shardings`` inside the compiled program (XLA propagates the rest)."""

    def __init__(self, jitted, in_shardings, out_shardings):
        self._jitted, self._in, self._out = jitted, in_shardings, out_shardings
        functools.update_wrapper(self, jitted.fun, updated=())

    def _place(self, args):
        if self._in is None:
            return args
        ins = tuple(self._in) if isinstance(self._in, (tuple, list)) else (self._in,) * len(args)
        if len(ins) != len(args):
            raise ValueError(f"jit in_shardings has {len(ins)} entries for {len(args)} positional arguments")
        out = []
        for a, s in zip(args, ins, strict=True):
            leaves, tree = tree_util.tree_flatten(a)
            shs = _sharding_leaves(s, a, "in_shardings")
            out.append(tree_util.tree_unflatten(tree, [x if sh is None or isinstance(x, Tracer) or
                                                       _same_sharding(x, sh) else device_put(x, sh)
                                                       for x, sh in zip(leaves, shs, strict=True)]))
        return tuple(out)

    def __call__(self, *args, **kwargs):
        return self._jitted(*self._place(args), **kwargs)

    def lower(self, *args, **kwargs):
        return self._jitted.lower(*self._place(args), **kwargs)

    def trace(self, *args, **kwargs):
        return self._jitted.trace(*self._place(args), **kwargs)

    def __getattr__(self, name):
        return getattr(self._jitted, name)


def _same_sharding(x, sh) -> bool:
    s = getattr(x, "sharding", None)
    return s is not None and s.is_equivalent_to(sh, x.ndim)


def jit_with_shardings(make_jitted, fun, in_shardings, out_shardings):
    """The callable ``jit`` returns when given shardings (``make_jitted(f)`` builds the ``Jitted``)."""
    if out_shardings is not None:
        inner = fun

        @functools.wraps(inner)
        def constrained(*args, **kwargs):
            out = inner(*args, **kwargs)
            leaves, tree = tree_util.tree_flatten(out)
            shs = _sharding_leaves(out_shardings, out, "out_shardings")
            return tree_util.tree_unflatten(tree, [v if s is None or not isinstance(s, NamedSharding) else
                                                   sharding_constraint_p.bind(v, sharding=s)
                                                   for v, s in zip(leaves, shs, strict=True)])
        fun = constrained
    return ShardedJitted(make_jitted(fun), in_shardings, out_shardings)
