"""The mlx backend: its devices, lazy evaluation, executables and ``mx.compile`` policy.

The rules that lower each primitive are in ``mlx.py`` and ``mlx_structural.py``.

Evaluation is lazy, as MLX's: an executable builds the graph and returns
unevaluated ``mx.array`` s. Values are forced only where fnarray needs them:
``to_host`` (``np.asarray``, ``.item()``, ``bool()``), ``block_until_ready``,
a host-driven loop's predicate (``fnarray.devices.host_control``) and fallback
transfers. Host transfers avoid copies where MLX allows: ``to_host`` returns a
view of the MLX buffer (unified memory; fnarray marks it read-only), while
``to_device`` copies, because MLX cannot adopt a NumPy buffer and fnarray arrays
must not see later writes to the caller's array.

Control flow. MLX has no loop primitive: ``Capabilities(control_flow="host")``
makes the partitioner run ``while``, ``scan`` and ``cond`` from the host
(``fnarray.devices.host_control``), with the straight-line code around them
lowered here. ``call``, ``remat`` and custom-derivative calls are inlined.

``mx.compile``, measured on this machine (Linux, ``mlx[cpu]`` 0.32.4, 2 cores shared
with other jobs; best of 4 interleaved rounds, two runs; with ``mx.eval`` of the result):

==============================================  ===============  ===============
                                                eager            mx.compile
==============================================  ===============  ===============
``tanh(a*x+b)*x+1``, f32, 4M elements            86-92 ms         88-96 ms
same, 16K elements                               322-342 us       351-384 us
same, 1K elements                                26 us            20-21 us
same, 4 elements (one call's dispatch)           26-27 us         14 us
digits MLP train step (64-128-128-10, batch 64)  2.4-2.9 ms       2.1-2.4 ms
first call of that step, kernels not on disk     5-16 ms          ~1 s per fused kernel (8 s)
==============================================  ===============  ===============

(Single unrepeated runs on the loaded machine scattered by 2x either way, e.g. 148 vs 310 ms for
the 4M chain; the table keeps the interleaved minima.) On the Linux CPU a compiled program saves
the per-operation dispatch (~6-10 us each), and where the program is bound by memory traffic rather
than arithmetic its fused kernels also save the intermediate arrays' reads and writes: measured again
with ``benchmarks/mlx_compile.py`` (6 interleaved rounds, load average 5-8):

==============================================  ===========  ============  ==================
                                                raw eager    mx.compile    fnarray, compiled
==============================================  ===========  ============  ==================
``((a*x+b)*x+1)*0.5-a``, f32, 1M elements        2.7 ms       0.44 ms       0.62 ms
same, 16M elements                               272 ms       188 ms        182 ms
``tanh(a*x+b)*x+1``, f32, 1M elements            76 ms        71 ms         66 ms
==============================================  ===========  ============  ==================

The earlier policy left programs over 16K elements eager (from the ``tanh`` chain, bound by
arithmetic, where compiling neither gains nor loses), which made the memory-bound arithmetic chain
6.9x ``mx.compile`` at 1M and 1.7x at 16M. A cold compile still generates and builds C++ (~1 s per
fused kernel, cached on disk under ``/tmp/mlx``). So the policy (``COMPILE_MODE = "auto"``) is per
platform:

- ``gpu``: every program is wrapped in ``mx.compile`` from its first call
  (fusion saves memory traffic and kernel launches; Metal kernels build in ms);
- ``cpu``: every program is compiled from its ``CPU_COMPILE_AFTER_CALLS``-th call, so that one-shot
  programs never pay the cold compile (``CPU_COMPILE_MAX_ELEMENTS``, ``None`` by default, bounds the
  largest array of a program that is compiled, for those who want the old size limit back).

Programs with fewer than 2 equations or with empty arrays stay eager, and a program MLX fails to
compile keeps running eagerly (``_WarmCompile``).

``COMPILE_MODE = "always"`` or ``"never"`` overrides the policy (tests use it).
"""

from __future__ import annotations

import numpy as np

from fnarray.core import dtypes
from fnarray.core import profile as _profile
from fnarray.core.errors import BackendUnavailable
from fnarray.core.ir import Program
from fnarray.core.passes import program_from_eqn
from fnarray.core.subprograms import CALL_PROGRAM, subprograms
from fnarray.devices.backend import Backend, Capabilities, Device, Lowered
from fnarray.lowering.mlx.rules import _EQN_CHECKS, _HOST, _UNSUPPORTED, _dtype_reason, _eqn_dtypes, _Generated
from fnarray.lowering.mlx.common import _IMPORT_ERROR, RULES, from_numpy, mx, to_numpy

if mx is not None:
    from fnarray.lowering.mlx import spmd as _spmd  # registers the collectives' and shard_map's rules

__all__ = ["make_backend", "MlxBackend", "MlxLowered", "COMPILE_MODE", "CPU_COMPILE_MAX_ELEMENTS",
           "CPU_COMPILE_AFTER_CALLS"]

#: ``"auto"`` (the per-platform policy of the module docstring), ``"always"`` or ``"never"``.
COMPILE_MODE = "auto"
#: On the CPU, only programs whose largest array is at most this big are compiled; ``None``: any size (measured:
#: memory-bound chains gain 1.5-7x from fusion at 1M-16M elements, arithmetic-bound ones neither gain nor lose).
CPU_COMPILE_MAX_ELEMENTS = None
#: On the CPU, a program is compiled from this call on (a cold compile costs ~1 s per fused kernel).
CPU_COMPILE_AFTER_CALLS = 16

# ------------------------------------------------------------------------------ executables

def _on_stream(handle, fn):
    """Run ``fn`` on ``handle``'s stream when that is not MLX's default device."""
    def run(bufs):
        if mx.default_device() == handle:
            return fn(*bufs)
        with mx.stream(handle):
            return fn(*bufs)
    return run


class _WarmCompile:
    """Runs a program eagerly, and through ``mx.compile`` from its ``after``-th call on.

    Should MLX fail to compile the program, it keeps running eagerly (same operations, same results).
    """

    __slots__ = ("fn", "raw", "left", "handle")

    def __init__(self, fn, after, handle):
        self.raw, self.fn, self.left, self.handle = fn, fn, after, handle

    def __call__(self, bufs):
        if self.left > 0:  # > 0, not truthy: two threads may both decrement past zero
            self.left -= 1
            if self.left == 0:
                return self._switch(bufs)
        if mx.default_device() == self.handle:
            return self.fn(*bufs)
        with mx.stream(self.handle):
            return self.fn(*bufs)

    def _switch(self, bufs):
        compiled = mx.compile(self.raw)
        with mx.stream(self.handle), _profile.span("compile", "mx.compile (and its first run)"):
            try:
                out = compiled(*bufs)
            except Exception:  # an MLX compile limitation: stay eager
                return self.raw(*bufs)
        self.fn = compiled
        return out


def _compile_policy(gen: _Generated, device: Device) -> int | None:
    """Call number from which ``mx.compile`` is used (1: from the first call), or ``None``: never."""
    if COMPILE_MODE == "never" or gen.n_eqns < 2 or gen.has_empty:
        return None
    if COMPILE_MODE == "always" or device.platform != "cpu":
        return 1
    if CPU_COMPILE_MAX_ELEMENTS is None or gen.max_elements <= CPU_COMPILE_MAX_ELEMENTS:
        return CPU_COMPILE_AFTER_CALLS
    return None


class MlxLowered(Lowered):
    """A program lowered to MLX operations; ``as_text()`` is the generated Python source."""

    def __init__(self, program, device, donate=()):
        super().__init__(program, device)
        self._host = any(_needs_host(e) for e in program.eqns)

    def as_text(self) -> str:
        return _Generated(self.program, execute=False).source

    def compile(self):
        if _spmd.active():  # one process of several: global buffers and shard_map over processes
            return _spmd.distributed_executable(self.program, self._compile)
        return self._compile()

    def _compile(self):
        if self._host:
            from fnarray.devices.host_control import HostDriven
            return HostDriven(self.program, self.device, [True] * len(self.program.eqns))
        gen = _Generated(self.program)
        after = _compile_policy(gen, self.device)
        handle = self.device.handle
        if after is None:
            return _on_stream(handle, gen.fn)
        return _WarmCompile(gen.fn, after, handle)


def _needs_host(eqn) -> bool:
    if eqn.primitive in _HOST:
        return True
    return any(_needs_host(e) for sub in subprograms(eqn) for e in sub.eqns)


class MlxBackend(Backend):
    name = "mlx"
    #: What the parity cases run on numpy:0 here, and why (``Backend.expected_fallbacks``).
    expected_decompositions = frozenset({"digamma", "erfc", "lgamma", "sharding_constraint", "threefry2x32"})
    expected_fallbacks = {
        ("cholesky", "complex64"): "MLX has no complex64 cholesky (mx.linalg.cholesky is real only)",
        ("conv_general_dilated", "int32"): "MLX's conv_general takes floating-point operands only",
        ("pallas_call", "*"): "user kernels run in fnarray's interpreter on mlx (no Metal rendering yet)",
    }

    def __init__(self):
        self._devices = []
        version = getattr(mx, "__version__", "?")
        if mx.is_available(mx.gpu):
            kind = "Metal" if mx.metal.is_available() else "GPU"
            try:
                info = mx.device_info()
                label = info.get("device_name") or info.get("architecture") or kind
            except Exception:  # device_info differs between MLX builds; the description is cosmetic
                label = kind
            self._devices.append(Device("mlx", 0, "gpu", f"MLX {version} {kind} GPU ({label})", handle=mx.gpu))
        self._devices.append(Device("mlx", len(self._devices), "cpu", f"MLX {version} CPU", handle=mx.cpu))
        group = _spmd.process_group()
        if group is not None:  # a run of several processes: one device per process (fnarray.lowering.mlx.spmd)
            mine = self._devices[0]
            self._devices = _spmd.process_devices(group, mine.handle, mine.platform, mine.description)
        all_but = frozenset(dtypes.ALL_DTYPES) - {dtypes.complex128}
        self._caps = {
            "cpu": Capabilities(dtypes=all_but, control_flow="host", eager_programs="second_call"),
            "gpu": Capabilities(dtypes=all_but - {dtypes.float64}, control_flow="host", eager_programs="second_call"),
        }

    def devices(self):
        return self._devices

    def capabilities(self, device):
        return self._caps["cpu" if device.platform == "cpu" else "gpu"]

    def lowers_natively(self, eqn, device):
        return eqn.primitive in RULES or eqn.primitive in _HOST

    def supports(self, eqn, device):
        prim = eqn.primitive
        r = _UNSUPPORTED.get(prim)
        if r is not None:
            return r
        if prim not in RULES and prim not in _HOST:
            return f"the mlx backend has no rule for {prim.name}"
        check = _EQN_CHECKS.get(prim)
        if check is not None:
            r = check([a.aval for a in eqn.inputs], eqn.params)
            if r is not None:
                return r
        return _dtype_reason(prim, _eqn_dtypes(eqn), device.platform)

    def lower(self, program, device, donate=()):
        # MLX reuses a buffer in place when nothing else holds it, so donation needs nothing here:
        # jit drops the donated arrays' references after the call.
        return MlxLowered(program, device, donate)

    def eager_fast(self, primitive, params, in_avals, device):
        """One primitive applied directly with MLX, or ``None`` where the general path is needed."""
        if primitive in _HOST or primitive not in RULES or _spmd.active():
            return None
        check = _EQN_CHECKS.get(primitive)
        if check is not None and check(list(in_avals), params) is not None:
            return None
        out = primitive.abstract_eval(*in_avals, **params)
        outs = list(out) if primitive.multiple_results else [out]
        if any(a.size == 0 for a in list(in_avals) + outs):
            return None   # the general path runs the zero-size pass: no MLX call on an empty array
        if primitive in CALL_PROGRAM or any(
                isinstance(p, Program) for p in params.values()):
            from fnarray.devices.partition import unsupported_reason
            eqn = program_from_eqn(primitive, params, in_avals, outs).eqns[0]
            if _needs_host(eqn) or unsupported_reason(eqn, device) is not None:
                return None
        else:
            r = _dtype_reason(primitive, {a.dtype for a in in_avals} | {o.dtype for o in outs} |
                              {p for p in params.values() if isinstance(p, np.dtype)}, device.platform)
            if r is not None:
                return None
        fn = RULES[primitive](params, list(in_avals), outs)
        handle = device.handle
        if primitive.multiple_results:
            def apply(*bufs):
                return list(fn(*bufs))
        else:
            def apply(*bufs):
                return [fn(*bufs)]
        return _on_stream(handle, apply)

    def to_device(self, array, device):
        if device is not None and device.handle is None:
            raise ValueError(f"{device} is the device of process {device.id} of this mlx run, not of this process "
                             f"({_spmd.process_group().rank()}): place arrays on this process's device, or split "
                             "them over the processes with fa.device_put(x, NamedSharding(mesh, spec))")
        return from_numpy(array)

    def to_host(self, buf):
        if isinstance(buf, _spmd.GlobalBuffer):
            return _spmd.host_value(buf)
        return to_numpy(buf)

    def block_until_ready(self, buf):
        b = buf.local if isinstance(buf, _spmd.GlobalBuffer) else buf
        if isinstance(b, mx.array):
            mx.eval(b)
        return buf

    def schedule(self, bufs):
        """Start evaluating ``bufs`` without waiting (host-driven loops keep MLX's graphs short)."""
        arrays = [b.local if isinstance(b, _spmd.GlobalBuffer) else b for b in bufs]
        arrays = [b for b in arrays if isinstance(b, mx.array)]
        if arrays:
            mx.async_eval(*arrays)


def make_backend():
    """The mlx backend; raises ``BackendUnavailable`` (with the fix) when ``mlx.core`` cannot be imported."""
    if mx is None:
        raise BackendUnavailable(_IMPORT_ERROR)
    return MlxBackend()
