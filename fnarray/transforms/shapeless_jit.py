"""``jit(fun, shapeless=True)``: one trace serves the calls that differ from it only in their sizes.

The counterpart of MLX's ``mx.compile(fun, shapeless=True)``, with MLX's contract: the user promises that the
function's computation does not depend on its inputs' sizes. fnarray cannot prove that (docs/performance.md,
"mlx:0 jitted decode: each new length is still traced (why)"), so it is opt-in, and Python that reads a size
(``if x.shape[0] > 8``, a constant equal to a size, ``x.reshape(x.shape[0] * 2, -1)``) gets the program of the
size it was traced at, as in MLX.

A call whose arguments have the *pattern* of a traced call's (``pattern``: the same structure, dtypes, weak
types and static values; each size of 0 or 1 the same, every other size equal to the same other sizes) takes
that trace's program renamed to its sizes (``derive``) once a trace of the pattern at other sizes was that
program renamed (``_confirms``: ``Store.remember``; a constant equal to a size at one trace is not told from the
size, as ``x[-2:]`` at 2 rows, ``x.reshape(2, -1)``, ``fnp.roll(x, 2)``, a literal ``x.shape[0] - 1``): each size of the traced inputs is mapped to the call's,
each equation's shape parameters (those ``core.size_free`` renames: a ``reshape``'s ``new_sizes``, a
``broadcast_in_dim``'s ``shape``) renamed through the map, and its shape rule (the primitive's
``abstract_eval``) run at the renamed inputs, which also maps the sizes it derives (a concatenation's ``L + 1``).
A program that does not rename cleanly is traced afresh at the new sizes, as without ``shapeless``, so the call
never raises a shape error the function would not raise and never runs a program the renaming got wrong where
fnarray can tell:

- a shape rule that fails at the new sizes (a reshape to sizes fixed at the traced call): the program's shapes
  were computed from sizes, so the pattern is traced at every size from then on (``derive``);
- a size that the map would send to two sizes (two sizes equal at the traced call, one of them derived);
- a value tied to a size that changes, which a renaming of shapes cannot follow: an integer in any other
  parameter (a slice's limits: ``x[1:]``), an integer-valued literal (``mean``'s divisor) and the sizes whose
  product it is (``x.mean()``'s divisor at ``(3, 4)`` is 12), a captured constant of that size, the sizes an
  index parameter was computed from though equal to none (``_INDEXED``: a slice's operand on the axes it does not
  take whole, as ``x[:-1]``'s limit is the size less one; a convolution's or a window's (or its gradient's)
  padded, strided or dilated axes, as ``"SAME"`` padding with strides; attention's head size, as its default
  scale; the axes a gather, scatter or dynamic slice indexes at indices computed from literals and constants
  alone, ``_FIXED_INDEXED``, as ``x[[0, -1]]``'s constant) (``_tied``); parameters that name axes, dtypes or exponents
  (``_NOT_SIZES``) are never sizes;
- a program with sub-programs (a ``call``, a loop, ``custom_jvp``: not renamed here, as ``size_free_key``).

On mlx:0 a derived program's executable is the traced one's (``partition.at_sizes``: the generated MLX function
reads no size, compiled with ``mx.compile(shapeless=True)``); from then on a call of positional arrays of the
same pattern calls that function directly (``Direct``: no flatten, no key, no program), its results' avals read
from MLX's arrays. Other backends compile the derived program at each size, as they compile each trace.
"""

from __future__ import annotations

import operator
import weakref

import numpy as np

from fnarray.core import tracing
from fnarray.core.cache import LRUCache
from fnarray.core.config import config
from fnarray.core.ir import Eqn, Literal, Params, Program, Var
from fnarray.core.shaped import ShapedArray
from fnarray.core.size_free import SHAPE_PARAMS, size_free_key
from fnarray.core.subprograms import subprograms
from fnarray.devices.array_impl import ArrayImpl
from fnarray.devices.lookup import DEFAULT_NOW, current_default

__all__ = ["check_flag", "store", "Store", "pattern", "derive", "MISS"]

#: parameters that never hold a size (axes, dtypes, exponents, flags): their integers are not checked (``_tied``)
_NOT_SIZES = frozenset({"axes", "axis", "dimension", "dimensions", "broadcast_dimensions", "permutation",
                        "dimension_numbers", "y", "new_dtype", "weak_type", "preferred_element_type",
                        "precision", "keepdims"})

MISS = object()  # a tier of jit's call path (``Store.call`` one of them) does not apply: the next one decides


def check_flag(shapeless) -> bool:
    """``jit``'s ``shapeless`` argument, checked: a ``bool``."""
    if type(shapeless) is not bool:
        raise TypeError(f"jit: shapeless must be True or False, got {shapeless!r} ({type(shapeless).__name__}); "
                        "shapeless=True lets one trace serve calls that differ only in their arguments' sizes "
                        "(mx.compile(fun, shapeless=True)'s contract: the function reads no size)")
    return shapeless


def _dims(shape, sizes):
    # sizes of 2 or more as -1, -2, ... in order of first appearance, as ``size_free_key`` writes them
    return tuple([d if d < 2 else sizes.setdefault(d, -1 - len(sizes)) for d in shape])


def pattern(key, avals):
    """The key of ``jit``'s trace key ``key`` (structure, avals, statics, configuration...) up to sizes."""
    sizes: dict = {}
    return (key[0], tuple([(a.dtype, a.weak_type, _dims(a.shape, sizes)) for a in avals])) + tuple(key[2:])


def _ints(v, out):
    """The integers of at least 2 in a parameter value (nested tuples), into ``out``."""
    t = type(v)
    if t is int:
        if v >= 2:
            out.add(v)
    elif t is tuple or t is list:
        for x in v:
            _ints(x, out)
    return out


def _sliced(e):
    """A ``slice``'s operand sizes on the axes it does not take whole: its bounds there were computed from them
    (``x[:-1]`` at 4 rows is ``0:3``, ``x[::2]`` is ``0:3:2``), so they may not change."""
    p, shape = e.params, e.inputs[0].aval.shape
    return [n for n, s, l, st in zip(shape, p["start_indices"], p["limit_indices"], p["strides"], strict=True)
            if (s, l, st) != (0, n, 1)]


def _windowed(p, i) -> bool:
    """Whether a convolution's or window reduction's axis ``i`` (of its spatial / windowed axes) was laid out from
    the sizes: padded (``"SAME"``, ``convolve``'s modes) or strided or dilated (``"SAME"``'s padding with strides
    depends on the size's remainder, and is (0, 0) at some sizes)."""
    pad = p["padding"][i]
    dilated = p.get("lhs_dilation") or p.get("base_dilation") or ()
    return tuple(pad) != (0, 0) or p["window_strides"][i] != 1 or bool(dilated) and dilated[i] != 1


def _padded_conv(e):
    """A convolution's spatial sizes (of both operands) on the axes laid out from them (``_windowed``)."""
    p = e.params
    dn = p["dimension_numbers"]
    lhs, rhs = e.inputs[0].aval.shape, e.inputs[1].aval.shape
    if dn is None:
        return [*lhs, *rhs]
    return [n for i in range(len(p["padding"])) if _windowed(p, i)
            for n in (lhs[dn.lhs_spec[2 + i]], rhs[dn.rhs_spec[2 + i]])]


def _padded(e):
    """A window reduction's operand sizes on the axes laid out from them (``_windowed``), or a ``pad``'s on the
    axes it crops (a negative low or high: a slice)."""
    shape = e.inputs[0].aval.shape
    if e.primitive.name == "pad":
        return [n for n, (lo, hi, _) in zip(shape, e.params["padding_config"], strict=True) if lo < 0 or hi < 0]
    return [n for i, n in enumerate(shape) if _windowed(e.params, i)]


def _selected(e):
    """A window gradient's (``select_and_gather_add``, ``select_and_scatter_add``) operand sizes on the axes laid
    out from them, as its window reduction's (``_padded``)."""
    return [n for i, n in enumerate(e.inputs[1].aval.shape) if _windowed(e.params, i)]


def _head(e):
    """An attention's head size: its default ``scale`` (a float parameter) is ``1 / sqrt(head size)``."""
    return [e.inputs[0].aval.shape[-1]]


#: primitive name -> the sizes (of an equation) its index parameters were computed from: tied (``_tied``), as the
#: integers a renaming cannot follow need not equal a size (``x[:-1]``'s limit is the size less one)
_INDEXED = {"slice": _sliced, "conv_general_dilated": _padded_conv, "pad": _padded, "reduce_window": _padded,
            "reduce_window_sum": _padded, "reduce_window_max": _padded, "reduce_window_min": _padded,
            "select_and_gather_add": _selected, "select_and_scatter_add": _selected,
            "dot_product_attention": _head}


def _gathered(e, fixed):
    """A ``gather``'s or scatter's operand sizes on the axes it indexes where its indices are fixed (``fixed``:
    computed from literals and constants alone): they were computed from the sizes (``x[-1]`` at 3 rows indexes
    2, ``x.at[1:]`` scatters at a constant ``[[1], [2]]``, ``pad(mode="edge")`` gathers at a constant), so they
    may not change."""
    x, idx = e.inputs[0].aval.shape, e.inputs[1]
    return [x[a] for a in e.params["axes"]] if type(idx) is Literal or idx in fixed else []


def _dynamic(e, fixed):
    """A ``dynamic_slice``'s (``dynamic_update_slice``'s) operand sizes on the axes it does not take whole where
    its start there is fixed (``_gathered``)."""
    x = e.inputs[0].aval.shape
    if e.primitive.name == "dynamic_slice":
        sizes, starts = e.params["slice_sizes"], e.inputs[1:]
    else:
        sizes, starts = e.inputs[1].aval.shape, e.inputs[2:]
    return [n for n, k, s in zip(x, sizes, starts, strict=True) if k != n and (type(s) is Literal or s in fixed)]


#: primitive name -> the sizes (of an equation) its index *operands* were computed from where they are fixed
#: (computed from literals and constants alone: ``_tied``'s ``fixed``)
_FIXED_INDEXED = {"gather": _gathered, "dynamic_slice": _dynamic, "dynamic_update_slice": _dynamic,
                  **{name: _gathered for name in ("scatter", "scatter_add", "scatter_mul", "scatter_min",
                                                  "scatter_max")}}


def _tied(program: Program) -> frozenset | None:
    """The values of ``program`` a renaming of sizes cannot follow: integers (2 or more) in its parameters other than
    the shape parameters and ``_NOT_SIZES``, its integer-valued literals and the sizes whose product one is
    (``_factors``: ``x.mean()``'s divisor), its constants' sizes, the sizes its index parameters were computed from
    (``_INDEXED``); ``None`` where it has sub-programs. A size among them may not change at a derived call."""
    out: set = set()
    literals: set = set()
    fixed = set(program.constvars)   # the values computed from literals and constants alone
    for v in program.constvars:
        _ints(v.aval.shape, out)
    for e in program.eqns:
        if subprograms(e):
            return None
        name = e.primitive.name
        indexed = _INDEXED.get(name)
        if indexed is not None:
            _ints(indexed(e), out)
        indexed = _FIXED_INDEXED.get(name)
        if indexed is not None:
            _ints(indexed(e, fixed), out)
        if all(type(a) is Literal or a in fixed for a in e.inputs):
            fixed.update(e.outputs)
        shape_param = SHAPE_PARAMS.get(e.primitive)
        for k, v in e.params.items():
            if k != shape_param and k not in _NOT_SIZES:
                _ints(v, out)
        _literal_ints(e.inputs, literals)
    _literal_ints(program.outvars, literals)   # (an output ``len(x)``)
    out |= literals
    if literals:
        sizes: set = set()
        for v in (*program.invars, *[o for e in program.eqns for o in e.outputs]):
            _ints(v.aval.shape, sizes)
        for n in literals:   # (a product equal to a size too: x.mean() at (3, 4) beside a y of 12)
            out.update(_factors(n, sizes))
    return frozenset(out)


def _literal_ints(atoms, out) -> None:
    """The integer values (2 or more) of the literals among ``atoms``, into ``out``."""
    for a in atoms:
        if type(a) is Literal and a.val.dtype.kind in "iuf" and np.isfinite(a.val) and a.val == int(a.val):
            _ints(int(a.val), out)


def _factors(n: int, sizes) -> list:
    """The sizes dividing ``n`` where ``n`` is a product of sizes (repeats allowed), as a ``mean``'s divisor over
    several axes (12 at ``(3, 4)``); empty where it is none."""
    parts = sorted(s for s in sizes if n % s == 0)
    known: dict = {}

    def whole(m, i):   # whether m is a product of parts[i:]
        if m == 1:
            return True
        got = known.get((m, i))
        if got is None:
            got = known[m, i] = any(m % parts[j] == 0 and whole(m // parts[j], j) for j in range(i, len(parts)))
        return got

    return parts if whole(n, 0) else []


def _size_map(old_avals, new_avals, tied):
    """Each size (2 or more) of ``old_avals`` -> ``new_avals``'s (the patterns are equal); ``None`` where a tied size
    changes."""
    m: dict = {}
    for a, b in zip(old_avals, new_avals, strict=True):
        for o, n in zip(a.shape, b.shape, strict=True):
            if o >= 2:
                m[o] = n
                if o != n and o in tied:
                    return None
    return m


def _derived_sizes(program: Program) -> set:
    """The sizes (2 or more) of ``program``'s values that are none of its inputs' sizes (a concatenation's
    ``L + 1``): ``Direct`` checks the inputs' sizes against the tied values, and these not at all."""
    out: set = set()
    for e in program.eqns:
        for v in e.outputs:
            _ints(v.aval.shape, out)
    for v in program.invars:
        out.difference_update(v.aval.shape)
    return out


def derive(program: Program, tied, new_avals, why: list | None = None) -> Program | None | bool:
    """``program`` renamed to the inputs ``new_avals`` (module docstring); where it does not rename cleanly (the
    caller then traces afresh), ``None`` where a tied size changed or one size went to two (a trace at other sizes
    may rename), ``False`` where a shape rule failed: the program's shapes were computed from sizes (a reshape's
    ``-1``), so a renaming that type-checks may still be wrong (``x.reshape(-1, 4)`` traced at 4 rows renames
    its 4), and its pattern is traced at every size from then on. ``why``: a list, given one sentence of why
    where the program does not rename (``config.explain_cache_misses``)."""
    m = _size_map(program.in_avals, new_avals, tied)
    if m is None:
        if why is not None:
            changed = sorted({o for a, b in zip(program.in_avals, new_avals) for o, n in zip(a.shape, b.shape)
                              if o != n and o in tied})
            why.append(f"the size {changed[0]}, which the traced program also holds as a value (a slice's limit, a "
                       "literal such as mean's divisor, a constant's size), changes: a renaming cannot follow it")
        return None
    env = {v: v for v in program.constvars}
    invars = []
    for v, a in zip(program.invars, new_avals, strict=True):
        env[v] = w = Var(a)
        invars.append(w)
    eqns = []
    for e in program.eqns:
        params = e.params
        shape_param = SHAPE_PARAMS.get(e.primitive)
        if shape_param is not None:
            params = params.replace(**{shape_param: tuple([m.get(d, d) for d in params[shape_param]])})
        ins = tuple([a if type(a) is Literal else env[a] for a in e.inputs])
        try:
            outs = e.primitive.abstract_eval(*[a.aval for a in ins], **params)
        except Exception as exc:  # noqa: BLE001 (any shape rule's error: the function decides, traced afresh)
            if why is not None:
                why.append(f"the renamed {e.primitive.name} fails its shape rule at the new sizes ({exc}): the "
                           "program's shapes were computed from sizes, so this pattern is traced at every size")
            return False
        if not e.primitive.multiple_results:
            outs = (outs,)
        new_outs = []
        for v, a in zip(e.outputs, outs, strict=True):
            old = v.aval
            if a.dtype != old.dtype or a.weak_type != old.weak_type or len(a.shape) != len(old.shape):
                return _renamed_wrong(why, e, old, a)
            for o, n in zip(old.shape, a.shape, strict=True):   # a 0 or 1 moved, a tied size changed, or one
                if o != n and (o < 2 or n < 2 or o in tied) or o >= 2 and m.setdefault(o, n) != n:   # size to two
                    return _renamed_wrong(why, e, old, a)
            env[v] = w = Var(a)
            new_outs.append(w)
        eqns.append(Eqn(e.primitive, ins, params, tuple(new_outs)))
    return Program(program.constvars, invars, eqns, [a if type(a) is Literal else env[a] for a in program.outvars])


def _renamed_wrong(why, eqn, old, new) -> None:
    if why is not None:
        why.append(f"renamed, {eqn.primitive.name}'s output is {new.str_short()} where the trace had "
                   f"{old.str_short()} (a size of 0 or 1 moved, a size held as a value changed, or two sizes equal "
                   "at the trace went apart)")


def _confirms(old, entry, avals):
    """Whether ``entry``, traced at ``avals``, is ``old``'s program renamed to them (``derive``): the same
    equations, parameters, literals, sizes, constants and output structure; ``False`` (``derive``'s) where a shape
    rule failed at the renaming."""
    prog = derive(old.entry.program, old.tied, avals)
    if not prog:
        return prog
    a, b = old.entry, entry
    return (a.out_tree == b.out_tree and len(a.consts) == len(b.consts)
            and all(c is d or _same_value(c, d) for c, d in zip(a.consts, b.consts))
            and size_free_key(prog) == size_free_key(b.program) and _shapes(prog) == _shapes(b.program))


def _same_value(c, d) -> bool:
    c, d = np.asarray(c), np.asarray(d)
    return c.dtype == d.dtype and c.shape == d.shape and c.tobytes() == d.tobytes()


def _shapes(program: Program) -> list:
    """The sizes of ``program``'s values in the order it defines them (``size_free_key`` keys them up to a
    renaming)."""
    return [v.aval.shape for v in (*program.constvars, *program.invars, *[o for e in program.eqns for o in e.outputs])]


class _Traced:
    """A traced program of one pattern: its trace entry, its tied values (``_tied``), the programs derived from it
    (trace key -> entry, the ``config.jit_cache_size`` most recent); ``confirmed``: a trace at other sizes was
    this program renamed (``_confirms``), programs are derived from it; ``stopped``: a derivation failed a shape
    rule (``derive``), the pattern's calls are traced from then on."""

    __slots__ = ("entry", "tied", "derived", "confirmed", "stopped")

    def __init__(self, entry, tied, confirmed):
        self.entry, self.tied, self.confirmed, self.stopped = entry, tied, confirmed, False
        self.derived = LRUCache(lambda: config.jit_cache_size)


class Direct:
    """mlx:0's call of a pattern's shared executable (module docstring): its function called on the arguments'
    buffers, its constants first, the outputs' avals made from MLX's results. ``run`` checks the arguments against
    the traced call's avals: the same dtypes, weak types and ranks, then their sizes, all in a row after a 0 and a 1
    (``flat``): where the traced sizes are equal the call's are (``pick``), and they have as many distinct values
    (the same pattern, 0 and 1 kept), and no tied size among them changed (``tied_at``, ``tied``); a row of sizes
    that passed is kept (``fits``, up to ``FITS_KEPT`` rows), so a loop's later passes over its lengths look each
    up once. An output's aval is kept per shape (``shaped``, as many), so those passes make none."""

    __slots__ = ("source", "call", "const_bufs", "device", "committed", "sig", "seen", "flat", "pick", "distinct",
                 "tied_at", "tied", "fits", "outs", "shaped", "out_tree", "flat_out", "single", "generation")

    def __init__(self, source, ex, committed):
        old_avals, tied = source.entry.program.in_avals, source.tied
        self.source = source   # (the ``_Traced`` it serves)
        self.call, self.const_bufs = ex.exe.call_args, tuple(ex.const_bufs)
        self.device, self.committed = ex.device, committed
        self.sig = tuple((a.dtype, a.weak_type, len(a.shape)) for a in old_avals)
        self.seen = list(old_avals)   # each argument's last aval that passed the test of ``sig``
        flat = self.flat = sum((a.shape for a in old_avals), (0, 1))
        first = [flat.index(d) for d in flat]
        self.pick = operator.itemgetter(*first)   # the sizes at each size's first position
        self.distinct = len(set(flat))
        at = [flat.index(t) for t in sorted(tied) if t in flat]
        self.tied_at, self.tied = (operator.itemgetter(*at, 0), tuple(flat[i] for i in at) + (0,)) if at else \
            (None, None)
        self.fits: dict = {}   # the rows of sizes that passed (as a set: ``_keep``)
        self.outs = list(ex.out_avals)   # each output's last aval (one whose shape stays is made once)
        self.shaped = [{a.shape: a} for a in self.outs]   # each output's avals by shape
        t = self.out_tree = ex.out_tree
        self.single = t.num_nodes == 1 and t.num_leaves == 1
        self.flat_out = (not self.single and t.type is tuple and t.num_nodes == t.num_leaves + 1
                         and t.num_children == t.num_leaves)
        self.generation = config.generation

    def run(self, args):
        """``args`` run, or ``MISS`` where they do not fit (or MLX refuses them: the general path decides)."""
        if len(args) != len(self.sig) or self.generation != config.generation:
            return MISS
        dev, committed = self.device, self.committed
        bufs = list(self.const_bufs)
        flat = (0, 1)
        seen = self.seen
        for i, x in enumerate(args):
            if type(x) is not ArrayImpl:
                return MISS
            b, a = x._buf, x.aval
            if b is None or x._device is not dev:
                return MISS
            if a is not seen[i]:   # (a decode step's query and row pass the same aval at every call)
                dtype, weak, rank = self.sig[i]
                if (a.dtype is not dtype and a.dtype != dtype) or a.weak_type != weak or len(a.shape) != rank:
                    return MISS
                seen[i] = a
            flat += a.shape
            bufs.append(b)
            if x._committed:
                committed = True
        if not committed and dev is not DEFAULT_NOW[0] and dev is not current_default():
            return MISS  # uncommitted arrays run on the default device (jit's _target_device)
        if flat != self.flat and flat not in self.fits and not self._fits(flat):
            return MISS
        try:
            outs = self.call(*bufs)
        except Exception:  # noqa: BLE001 (MLX refuses these sizes: the general path derives or traces afresh)
            return MISS
        made = []
        last = self.outs
        for i, b in enumerate(outs):
            av, shape = last[i], b.shape
            if av.shape != shape:
                av = last[i] = self.shaped[i].get(shape) or self._aval(i, shape)
            r = ArrayImpl()   # (ArrayImpl.make inline, as jit's hot path)
            r.aval, r._device, r._buf, r._committed, r._host = av, dev, b, committed, None
            made.append(r)
        if self.single:
            return made[0]
        return tuple(made) if self.flat_out else self.out_tree.unflatten(made)

    def _fits(self, flat) -> bool:
        """Whether the sizes ``flat`` (not the traced ones) have the traced pattern and keep the tied sizes; kept
        in ``fits`` where they do."""
        if self.pick(flat) != flat or len(set(flat)) != self.distinct or \
                self.tied_at is not None and self.tied_at(flat) != self.tied:
            return False
        _keep(self.fits, flat, flat)
        return True

    def _aval(self, i, shape) -> ShapedArray:
        """Output ``i``'s aval at ``shape`` (its dtype and weak type), kept in ``shaped``."""
        av = self.outs[i]
        return _keep(self.shaped[i], shape, ShapedArray(shape, av.dtype, av.weak_type))


#: rows of sizes (``Direct.fits``) and avals by shape (``Direct.shaped``) kept per direct call: a loop over up to
#: this many lengths finds each again on its next pass (a decode step's, full: ~1.5 MB)
FITS_KEPT = 4096


def _keep(kept: dict, key, value):
    """``kept[key] = value``, after emptying ``kept`` where it holds ``FITS_KEPT`` (one step, safe beside
    another thread's); returns ``value``."""
    if len(kept) >= FITS_KEPT:
        kept.clear()
    kept[key] = value
    return value


class Store:
    """One jit's (one function's, one set of options') traces by pattern and its direct calls (``Direct``).

    ``call(args)``: ``args`` (a call's positional arguments, outside any transformation) run by a ``Direct`` call,
    or ``MISS``; the one ``Direct``'s own ``run`` where there is one (jit's call path calls it with no frame
    between), else ``_first_of(direct)``."""

    __slots__ = ("traced", "direct", "sources", "call", "__weakref__")

    def __init__(self):
        self.traced = LRUCache(lambda: config.jit_cache_size)   # pattern -> _Traced
        self.sources = weakref.WeakKeyDictionary()   # derived entry -> the _Traced it was derived from
        self._set_direct([])

    def _set_direct(self, direct):
        """The Direct calls from now on (the last one made first), and ``call`` for them."""
        self.direct = direct
        self.call = direct[0].run if len(direct) == 1 else _first_of(direct)   # (neither refers to this Store)

    def remember(self, key, avals, entry):
        """``entry``, traced at ``key``: its pattern's program from now on (a pattern is traced again only where
        its program did not derive, as where a literal 2.0 tied the size 2 it was traced at: the next sizes derive
        from the new trace); not where it holds tracers. Programs are derived from it only once confirmed: where
        it is the pattern's previous trace renamed (``_confirms``), as a constant equal to a size at one trace
        (``x[-2:]`` at 2 rows takes the whole axis; ``reshape(2, -1)`` at 2 rows) is not told from that size."""
        p = pattern(key, avals)
        t = self.traced.get(p)
        if (t is None or t.entry is not entry and not t.stopped) and \
                not any(isinstance(c, tracing.Tracer) for c in entry.consts):
            tied = _tied(entry.program)
            if tied is not None:
                confirmed = None if t is None else _confirms(t, entry, avals)
                if confirmed:   # (the first trace stays the pattern's program: ties of its own sizes only)
                    t.confirmed = True
                    return
                self.traced.pop(p)   # (``put`` keeps a present value)
                t = self.traced.put(p, _Traced(entry, tied, False))
                t.stopped = confirmed is False

    def derived(self, key, avals, make_entry):
        """The entry for trace key ``key`` derived from its pattern's traced program; ``None`` where there is none
        or it does not derive (the caller traces). ``make_entry(program, consts, out_tree)``: jit's entry."""
        t = self.traced.get(pattern(key, avals))
        if t is None or t.stopped or not t.confirmed:
            return None
        hit = t.derived.get(key)
        if hit is None:
            prog = derive(t.entry.program, t.tied, avals)
            if not prog:
                if prog is False:   # (and its direct calls go: the pattern is traced from now on)
                    t.stopped = True
                    self._set_direct([d for d in self.direct if d.source is not t])
                return None
            hit = t.derived.put(key, make_entry(prog, t.entry.consts, t.entry.out_tree))
            self.sources[hit] = t
        return hit

    def why_not_derived(self, key, avals) -> str:
        """Why the call at trace key ``key`` is traced rather than renamed from its pattern's trace, in words
        (``config.explain_cache_misses``)."""
        t = self.traced.peek(pattern(key, avals))
        if t is None:
            return ("a new pattern of sizes: no kept trace has these dtypes, ranks, static values, sizes of 0 and 1 "
                    "and equal sizes (a trace with sub-programs, a loop or a call, is not kept for renaming)")
        why: list = []
        derive(t.entry.program, t.tied, avals, why)
        if why:
            return why[0]
        if not t.confirmed:
            return ("the pattern's one trace is not renamed before a trace at other sizes confirms it (a constant "
                    "equal to a size at one trace, as x[-2:]'s start at 2 rows, is not told from that size)")
        return "the pattern's trace does not rename to these sizes"

    def executable(self, entry, ex, committed, flat):
        """``ex``, the executable just found for ``entry``: where ``entry`` is a derived one and ``ex`` serves every
        size (mlx:0), a ``Direct`` call for calls of positional arrays (``flat``) of its pattern (the
        ``config.jit_cache_size`` most recent kept)."""
        if not flat or not getattr(ex.exe, "shape_free", False) or getattr(ex.exe, "call_args", None) is None:
            return
        t = self.sources.get(entry)
        if t is not None and t.tied.isdisjoint(_derived_sizes(t.entry.program)):
            self._set_direct([Direct(t, ex, committed), *self.direct][:config.jit_cache_size])


def _first_of(direct: list):
    """``Store.call`` where there are several Direct calls (or none): the first of ``direct`` that runs ``args``."""
    def call(args):
        for d in direct:
            out = d.run(args)
            if out is not MISS:
                return out
        return MISS
    return call


_STORES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def store(tables) -> Store:
    """The ``Store`` of jit's option tables ``tables`` (``jit._Executables``: one per function and options)."""
    s = _STORES.get(tables)
    if s is None:
        s = _STORES.setdefault(tables, Store())
    return s
