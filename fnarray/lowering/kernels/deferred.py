"""Eager index operations on the kernel backends (webgpu, opencl) without a launch of their own: ``reshape`` a
view, broadcasts and transposes deferred into the elementwise operation that reads them.

Eagerly, each primitive is its own one-kernel program, and on a CPU driver a launch costs tens of microseconds of
CPU however few elements it moves (lavapipe ~30-50 us, PoCL's enqueue and worker wake-up ~15-40 us;
docs/internals.md). The transformations' bookkeeping moves a lot of them: an eager ``jacfwd``/``jacrev``/``hessian``
sweep of small functions ran 3,376 launches, 912 of them ``broadcast_in_dim`` (``vmap`` broadcasting an unbatched
operand to its batched partner's shape), 208 ``reshape`` and 120 ``transpose`` of a few floats. A backend's
``eager_fast`` (this module's ``eager_fast``) makes them cheaper:

- ``reshape`` returns a ``View``: the same device memory under the new shape (buffers are row-major and dense), no
  launch at all;
- ``broadcast_in_dim`` and ``transpose`` return a ``Deferred``: its operand and the equation, nothing run. An
  elementwise operation given deferred operands (``_Elementwise``) runs one program of their equations and its
  own (``_fused``): the scheduler makes that one map kernel, which reads the operands where they lie; a product
  (``dot_general``: a decode step's ``q @ k.T``) likewise reads a deferred transpose where it lies. Any other
  use of a deferred buffer (another primitive, a jitted call, a readback) reads its memory (``buffer`` on webgpu,
  ``mem`` on opencl), which runs the equation then (``Deferred.make``), once: so it never costs more launches
  than running it at once.

Both keep their operand's buffer alive, and mark it ``shared``: a jitted call that would update it in place
(a donated input, ``groups/in_place.py``) updates a copy instead (the dispatchers' ``_bind``/``_env``), so the
view or the deferred value keeps what it was given.

The buffers are the backends' own (``WGBuffer``: ``buffer``, ``gpu``; ``CLBuffer``: ``mem``, ``owner``); ``View``
and ``Deferred`` answer both sets of names from the buffer they read, and take the device's lock from the backend
(``eager_fast``'s ``lock``).
"""

from __future__ import annotations

import math

import numpy as np

from fnarray.core import primitives as P
from fnarray.core.cache import LRUCache
from fnarray.core.config import config
from fnarray.core.ir import Eqn, Program, Var
from fnarray.core.passes import program_from_eqn
from fnarray.devices.partition import compile_program
from fnarray.lowering.kernels import facts

__all__ = ["View", "Deferred", "eager_fast", "settled", "DEFERRED", "FUSED_VARIANTS"]

#: The primitives whose eager result is a ``Deferred``.
DEFERRED = frozenset({P.broadcast_in_dim, P.transpose})
#: The elementwise primitives that read deferred operands in their own kernel (those the scheduler fuses into any
#: map kernel).
_ELEMENTWISE = frozenset(p for p, f in facts.FACTS.items() if f.group == "map" and f.emit in ("rule", "func"))
#: The products that read deferred operands in their own kernel too: ``q @ k.T``'s transpose is the product's
#: dimension numbers (the scheduler reads the operand where it lies), not a copy kernel before it (an eager decode
#: step's 9 launches -> 8).
_PRODUCTS = frozenset({P.dot_general})
#: Fused programs kept per elementwise eager entry (one per pattern of deferred operands); past that, the operands
#: are made and the entry's own program runs.
FUSED_VARIANTS = 8


def _plain_size() -> int:
    return config.eager_cache_size


#: ``(chain, device id) -> executable`` of the deferred chains run alone (``Deferred.make``)
_plain = LRUCache(_plain_size)


class View:
    """``reshape`` of a buffer (``WGBuffer``, ``CLBuffer``): its memory under another ``shape`` (see the module
    docstring)."""

    __slots__ = ("base", "dtype", "shape", "__weakref__")
    shared = True   # its base is read by others: an in-place update copies it (the dispatchers' ``_bind``)

    def __init__(self, base, shape):
        base = settled(base)
        base.shared = True
        self.base, self.dtype, self.shape = base, base.dtype, tuple(shape)

    @property
    def buffer(self):   # webgpu's memory
        return self.base.buffer

    @property
    def mem(self):      # opencl's memory
        return self.base.mem

    @property
    def gpu(self):
        return self.base.gpu

    @property
    def owner(self):
        return self.base.owner

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.base.nbytes

    def __repr__(self):
        return f"View({self.dtype.name}{list(self.shape)} of {self.base!r})"


class Deferred:
    """The result of ``DEFERRED`` primitives (and reshapes of it) not run yet: their ``source`` buffer, ``chain``
    (the equations from it, each ``(primitive, params, input aval, result aval)``), ``device`` and the device's
    ``lock``; ``made`` the buffer once run (see the module docstring)."""

    __slots__ = ("source", "chain", "device", "lock", "made", "dtype", "shape", "itemsize", "__weakref__")

    def __init__(self, source, eqn, device, lock):
        root = source.source if type(source) is Deferred else None
        if root is not None:   # not run yet: a chain, one program when it runs
            chain, source = source.chain + (eqn,), root
        else:
            chain, source = (eqn,), settled(source)
        source.shared = True
        self.source, self.chain, self.device, self.lock, self.made = source, chain, device, lock, None
        self.dtype, self.shape = source.dtype, eqn[3].shape
        n = source.size   # the bytes an element takes in the backend's storage (webgpu's bool: a u32)
        self.itemsize = source.nbytes // n if n else source.dtype.itemsize

    @property
    def shared(self) -> bool:
        made = self.made
        return made is not None and made.shared

    @property
    def buffer(self):   # webgpu's memory
        return (self.made or self.make()).buffer

    @property
    def mem(self):      # opencl's memory
        return (self.made or self.make()).mem

    @property
    def gpu(self):
        return self._holder().gpu

    @property
    def owner(self):
        return self._holder().owner

    def _holder(self):
        """The buffer whose device attributes this one shares: the source until run, then what it made (``make``
        sets ``made`` before it drops ``source``)."""
        source = self.source
        return source if source is not None else self.made

    def make(self):
        """Run the chain (once) and return its buffer."""
        with self.lock:
            made = self.made
            if made is None:
                key = (self.chain, id(self.device))
                exe = _plain.get(key)
                if exe is None:
                    src = Var(self.chain[0][2])
                    out = _chained(src, self.chain, eqns := [])
                    exe = _plain.put(key, compile_program(Program([], [src], eqns, [out]), self.device))
                made = self.made = exe([self.source])[0]
                self.source = None   # (``source is None``: run; read first, so a reader sees one or the other)
            return made

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.itemsize

    def take_over(self):
        return self.make().take_over()

    def __repr__(self):
        return f"Deferred({' '.join(e[0].name for e in self.chain)} -> {self.dtype.name}{list(self.shape)})"


def settled(buf):
    """The backend's buffer a ``View`` or a run ``Deferred`` reads (``buf`` itself for the others)."""
    if type(buf) is View:
        return buf.base
    if type(buf) is Deferred and buf.source is None:
        return buf.made
    return buf


def _chained(var, chain, eqns):
    """The variable of ``chain``'s last result from ``var``, its equations appended to ``eqns``."""
    for prim, params, _, aval in chain:
        out = Var(aval)
        eqns.append(Eqn(prim, (var,), params, (out,)))
        var = out
    return var


def eager_fast(primitive, params, in_avals, device, lock):
    """A kernel backend's ``eager_fast``: the eager executable of ``reshape``, of the ``DEFERRED`` primitives and of
    the elementwise ones (see the module docstring), ``None`` for the others (compiled as any program).

    Args:
        primitive, params, in_avals: the equation run eagerly (its operands' abstract values).
        device: the ``Device`` it runs on.
        lock: the device's lock (``threading.RLock``), held while a deferred value runs.

    Returns:
        ``bufs -> [buffer]`` or ``None``.
    """
    out = primitive.abstract_eval(*in_avals, **params)
    if primitive is P.reshape:
        shape, eqn = tuple(params["new_sizes"]), (primitive, params, in_avals[0], out)
        # a reshape of a deferred value joins its chain; of anything else it is a view
        return _Unary(lambda b: Deferred(b, eqn, device, lock) if type(b) is Deferred and b.source is not None
                      else View(b, shape))
    if primitive in DEFERRED:
        eqn = (primitive, params, in_avals[0], out)
        return _Unary(lambda b: Deferred(b, eqn, device, lock))
    if primitive in _ELEMENTWISE and not primitive.multiple_results:
        return _Elementwise(primitive, params, in_avals, out, device)
    if primitive in _PRODUCTS:
        return _Elementwise(primitive, params, in_avals, out, device, lazy=True)
    return None


class _Unary:
    """The eager executable ``bufs -> [buffer]`` of ``one(buf) -> buffer`` (a view, a deferred value), ``one`` being
    ``placement.eager_direct``'s direct call."""

    __slots__ = ("one",)

    def __init__(self, one):
        self.one = one

    def __call__(self, bufs):
        return [self.one(*bufs)]


class _Elementwise:
    """The eager executable of an elementwise primitive (or of a product, ``_PRODUCTS``): its own program, or one
    fused with the equations of its deferred operands (``_fused``). A product's own program is compiled when a call
    first needs it: ``q @ k.T`` of a decode loop's growing cache always reads a deferred transpose."""

    __slots__ = ("_plain", "eqn", "device", "fused")

    def __init__(self, primitive, params, in_avals, out, device, lazy=False):
        self.eqn, self.device, self.fused = (primitive, params, in_avals, out), device, {}
        self._plain = None if lazy else self._compile()

    def _compile(self):
        primitive, params, in_avals, out = self.eqn
        return compile_program(program_from_eqn(primitive, params, in_avals, (out,)), self.device)

    @property
    def plain(self):
        """The executable of the primitive's own program."""
        p = self._plain
        if p is None:
            p = self._plain = self._compile()
        return p

    def __call__(self, bufs):
        for b in bufs:
            if type(b) is Deferred and b.source is not None:
                return self._deferred(bufs)
        return self.plain(bufs)

    def one(self, *bufs):
        """``self(bufs)[0]`` (``placement.eager_direct``'s direct call): the plain program's own ``one`` where it
        has one (opencl's one-kernel ``Executable``)."""
        for b in bufs:
            if type(b) is Deferred and b.source is not None:
                return self._deferred(bufs, True)
        plain = self.plain
        one = plain.one
        return one(*bufs) if one is not None else plain(bufs)[0]

    def _deferred(self, bufs, one=False):
        """The outputs of the program fused with the deferred operands of ``bufs`` (the output itself where
        ``one``: through the executable's ``one`` where it has one, opencl's one-kernel launch)."""
        key, args = [], []
        for b in bufs:
            src = b.source if type(b) is Deferred else None
            key.append(None if src is None else b.chain)
            args.append(b if src is None else src)
        key = tuple(key)
        exe = self.fused.get(key)
        if exe is None:
            if len(self.fused) >= FUSED_VARIANTS:
                return self.plain(bufs)[0] if one else self.plain(bufs)
            exe = self.fused[key] = self._fused(key)
        if one:
            f = getattr(exe, "one", None)
            return f(*args) if f is not None else exe(args)[0]
        return exe(args)

    def _fused(self, key):
        """The program of the deferred operands' chains (``key``: each operand's, or ``None``) then this one."""
        primitive, params, in_avals, out = self.eqn
        ins, args, eqns = [], [], []
        for aval, k in zip(in_avals, key, strict=True):
            if k is None:
                v = Var(aval)
                ins.append(v)
                args.append(v)
                continue
            src = Var(k[0][2])
            ins.append(src)
            args.append(_chained(src, k, eqns))
        o = Var(out)
        eqns.append(Eqn(primitive, tuple(args), params, (o,)))
        return compile_program(Program([], ins, eqns, [o]), self.device)
