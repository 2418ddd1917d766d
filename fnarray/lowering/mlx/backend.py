"""The mlx backend: the IR lowered to ``mlx.core`` for Apple silicon (``mlx[cpu]`` elsewhere).

Devices. ``fa.devices("mlx")`` lists the Metal (or CUDA) GPU first when MLX sees
one (``mlx:0``, platform ``gpu``), then the CPU (``mlx:1``, or ``mlx:0`` on a
machine without a GPU, platform ``cpu``). MLX arrays live in unified memory, so
a device only chooses the stream an operation runs on.

Semantics. Every primitive has a rule in ``RULES`` (``rule(params, in_avals,
out_avals) -> fn(*arrays)``) that reproduces the numpy reference (``lowering/numpy/``) with MLX
operations: integer division and remainder by zero give 0 (and ``INT_MIN // -1``
never reaches MLX, where it would trap), shifts past the bit width give 0 or -1,
float -> int casts saturate with NaN -> 0, gathers clamp and scatters drop
out-of-bounds indices, NaN sorts last, ``max``/``min`` propagate NaN, ``sign(NaN)``
is NaN. ``lgamma``, ``digamma`` and ``erfc``, which MLX lacks, come from their
decompositions (``fnarray.core.decompositions``); other things MLX lacks are composed
here: ``population_count`` (bit slicing), ``nextafter`` (bit
arithmetic), padding with interior/negative widths, bitwise reductions (a tree of
halvings), integer ``dot_general`` (products summed in blocks; MLX's matmul is
floating-point only), multi-key ``sort`` (successive stable argsorts).

Unsupported (these fall back to numpy with a ``FallbackWarning``, see
``supports``): ``complex128``; the low-bit dtypes (``float8_e4m3fn``, ``float8_e5m2``, ``int4``, ``uint4``)
except in conversions, data movement (``low_bit.py``: MLX 0.32 has no such dtypes, so mlx holds their bytes) and
what ``low_bit_upcast.py`` computes in a wider dtype (arithmetic, compares, reductions, products);
``float64``
on the GPU (Metal has none); on the CPU, ``float64`` only where MLX computes it
exactly — its CPU transcendental functions round through float32 (``exp`` of a
float64 is float32-accurate), so float64 transcendental and special functions
fall back (``_F64_APPROXIMATE``); ``complex64`` outside the operations that MLX
implements for it (``_COMPLEX_OK``); ``custom_lin`` (never executed).

The rules are in one module per primitive family (``FAMILIES``), each registering into
``common.RULES``; ``program.py`` generates a straight-line program's Python over MLX arrays (after folding reshape
chains and ``fused.py``'s patterns: ``fa.nn.RMSNorm`` as ``mx.fast.rms_norm``, ``fa.nn.RoPE`` as ``mx.fast.rope`` on
GPUs). This module
holds what falls back, the devices, the executables and the ``mx.compile`` policy.

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
compile keeps running eagerly (``_WarmCompile``). So do the programs of eager namespace calls
(``transforms/eager_jit.py``, which sets ``devices.backend.compiling.eager`` while it compiles one): raw MLX's
eager calls never compile, and a loop whose shapes grow (a decode loop's cache) made each shape's program
cross ``CPU_COMPILE_AFTER_CALLS`` and compile (the decode loop of ``benchmarks/programs.py``: 1.6 s at its 17th
run with MLX's kernel cache warm, for no gain after: a compiled 3-operation program on 64-element arrays
measured 1.6 us a call against 1.7 us for its operations, 20 against 23 us evaluated). Eager calls of a key
run its tape from its third call (``transforms/eager_tape.py``: the eager rules below, replayed) and reach an
mlx program only after ``eager_jit.TAPED_PROGRAM_CALL`` calls, or a key without a tape at its
``eager_jit.REPEATED_CALL``-th (``Capabilities.eager_programs = "repeated_call"``): before that they take the
general path, whose operations compile nothing here.

``COMPILE_MODE = "always"`` or ``"never"`` overrides the policy (tests use it).
"""

from __future__ import annotations

import importlib
import threading

import numpy as np

from fnarray.core import dtypes
from fnarray.core import primitives as P
from fnarray.core import profile as _profile
from fnarray.core.attention import dot_product_attention_p
from fnarray.core.conv import conv_general_dilated_p
from fnarray.core.errors import BackendUnavailable
from fnarray.core.fft import fft_p
from fnarray.core.ir import Program
from fnarray.core.pallas import pallas_call_p
from fnarray.core.passes import has_effect, program_from_eqn
from fnarray.core.subprograms import CALL_PROGRAM, subprograms
from fnarray.core.subprograms import CONTROL_FLOW
from fnarray.devices import shapeless
from fnarray.devices.backend import Backend, Capabilities, Device, Lowered, compiling
from fnarray.lowering.mlx import conv, jacobians, keepdims, linalg, pallas
from fnarray.lowering.mlx import shapeless as mlx_shapeless
from fnarray.lowering.mlx.common import F32_EXACT, IMPORT_ERROR, RULES, from_numpy, mx, to_numpy
from fnarray.lowering.mlx.low_bit import low_bit_reason
from fnarray.lowering.mlx.program import Generated as _Generated

#: The rule modules, one per primitive family; importing one registers its rules into ``common.RULES``.
FAMILIES = ("elementwise", "structural", "reductions", "dot", "attention", "conv", "windows", "linalg", "fft",
            "quantized", "control_flow", "pallas", "low_bit", "low_bit_upcast", "prng")
for _family in FAMILIES:
    importlib.import_module(f"{__package__}.{_family}")

# ------------------------------------------------------------------------------ what falls back

# while, scan and cond run from the host (fnarray.devices.host_control); custom_lin never runs.
_HOST = CONTROL_FLOW
_UNSUPPORTED = {P.custom_lin: "custom_lin only appears in linear programs that are transposed, never run"}
#: ``prim -> check(in_avals, params) -> reason | None``: equations of a primitive that has a rule but not for
#: these operands (they fall back to numpy with that reason; the backend asks before it runs one).
_EQN_CHECKS = {conv_general_dilated_p: conv.unsupported_reason}
#: ``prim -> check(eqn, device) -> reason | None``: the same, for a primitive whose answer depends on the device
#: (a ``pallas_call`` runs as Metal on a GPU with Metal only; ``pallas.unsupported_reason``).
_DEVICE_CHECKS = {pallas_call_p: pallas.unsupported_reason}


# MLX's CPU kernels compute these in float32 precision even for float64 inputs (measured against NumPy
# in float64: relative errors of 1e-8..2e-6 where the other float64 functions are within 4e-16), so
# float64 runs them on numpy. lgamma is composed with sin, cumlogsumexp is MLX's logcumsumexp.
_F64_APPROXIMATE = frozenset({P.exp, P.logistic, P.sin, P.cos, P.erf, P.erf_inv, P.lgamma, P.cumlogsumexp,
                              dot_product_attention_p})   # attention: its softmax's exp
# What MLX implements for complex64 (everything else with a complex64 operand falls back).
_COMPLEX_OK = frozenset({
    P.neg, P.add, P.sub, P.mul, P.div, P.pow_p, P.integer_pow, P.exp, P.exp2, P.log, P.log1p, P.sqrt, P.rsqrt,
    P.sin, P.cos, P.tan, P.asin, P.acos, P.atan, P.sinh, P.cosh, P.tanh, P.asinh, P.acosh, P.atanh, P.logistic,
    P.abs_p, P.sign, P.real, P.imag, P.conj, P.eq, P.ne, P.complex_p, P.select_n, P.convert_element_type,
    P.iota, P.broadcast_in_dim, P.reshape, P.transpose, P.rev, P.slice_p, P.dynamic_slice, P.dynamic_update_slice,
    P.pad, P.concatenate, P.gather, P.scatter, P.scatter_add, P.scatter_mul, P.reduce_sum, P.reduce_prod,
    P.cumsum, P.cumprod, P.dot_general, P.stop_gradient, P.copy_p, P.name_p, P.call, P.remat, P.custom_jvp_call,
    P.custom_vjp_call, P.while_p, P.scan, P.cond,
})
_COMPLEX_OK = _COMPLEX_OK | {fft_p} | linalg.COMPLEX_OK


def _dtype_reason(prim, eqn_dtypes, platform, params):
    if any(dtypes.is_low_bit(d) for d in eqn_dtypes):
        r = low_bit_reason(prim, eqn_dtypes, params)
        if r is not None:
            return r
    if dtypes.complex128 in eqn_dtypes:
        return "MLX has no complex128"
    if dtypes.float64 in eqn_dtypes:
        if platform != "cpu":
            return "MLX has no float64 on the GPU"
        if prim in _F64_APPROXIMATE:
            return f"MLX computes {prim.name} of float64 in float32 precision on the CPU"
    if dtypes.complex64 in eqn_dtypes and prim not in _COMPLEX_OK:
        return f"MLX has no complex64 {prim.name}"
    return None


#: The dtypes for which ``_dtype_reason`` gives no reason, whatever the primitive (not low-bit, not float64, no
#: complex): ``eager_fast_known`` skips its checks for them.
_PLAIN_DTYPES = frozenset(d for d in dtypes.ALL_DTYPES if not dtypes.is_low_bit(d) and not dtypes.is_complex(d)
                          and d != dtypes.float64)


def _eqn_dtypes(eqn):
    ds = {a.aval.dtype for a in eqn.inputs}
    ds.update(o.aval.dtype for o in eqn.outputs)
    for p in eqn.params.values():
        if isinstance(p, np.dtype):
            ds.add(p)
    return ds


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
#: A program given to ``mx.compile`` of at least this many equations runs through its interpreter until then
#: (``_until_compiled``): writing and compiling its Python source cost ~13 ms of the transformer step's first call
#: (1,060 equations; ~12 us a line), the interpreter ~0.3-0.4 us an equation a call more than the source's lines.
INTERPRET_FROM = 100

# ------------------------------------------------------------------------------ executables

def _on_stream(handle, fn):
    """Run ``fn`` on ``handle``'s stream when that is not MLX's default device. ``run.call_args(*bufs)`` is the
    same without the list (jit's hot path calls it directly): ``fn`` itself where MLX has no other device than
    ``handle`` (then it is always the default; mlx[cpu])."""
    def run(bufs):
        if mx.default_device() == handle:
            return fn(*bufs)
        with mx.stream(handle):
            return fn(*bufs)

    def call_args(*bufs):
        if mx.default_device() == handle:
            return fn(*bufs)
        with mx.stream(handle):
            return fn(*bufs)
    run.call_args = fn if _only_device(handle) else call_args
    return run


def _only_device(handle) -> bool:
    """Whether ``handle`` is the only device MLX has (the CPU, with no GPU), so always the default one."""
    return handle == mx.cpu and not mx.is_available(mx.gpu)


#: The thread that may call ``mx.compile``d functions. MLX 0.32 caches a compiled function's traces per thread;
#: a thread's cache is destroyed when the thread ends, and when that happens while the interpreter shuts down its
#: destructor cannot take the GIL and the process aborts ("terminate called without an active exception"; raw MLX:
#: a function compiled in the main thread and called from four threads aborted 5 runs of 6). Other threads run
#: the same operations eagerly (same results, without the fusion).
_COMPILE_THREAD = threading.main_thread().ident


class _WarmCompile:
    """Runs a program eagerly, and through ``mx.compile`` from its ``after``-th call on (in the main thread:
    ``_COMPILE_THREAD``; other threads keep running it eagerly).

    Should MLX fail to compile the program, it keeps running eagerly (same operations, same results).
    ``shape_free``: the program reads no size (``program.Generated.shape_free``), so it serves every program
    equal to its own up to sizes (``jit`` hands it theirs, through ``partition.at_sizes``, so its calls count
    theirs too). Once another size takes it (``shared_by_sizes``) it compiles with ``shapeless=True``, one
    compile for every size (a program of one size keeps MLX's compile for its shapes); a shapeless compiled
    call MLX refuses at new sizes runs eagerly.
    """

    __slots__ = ("fn", "raw", "left", "handle", "traceable", "only", "shape_free", "shapeless")

    def __init__(self, fn, after, handle, traceable=None, shape_free=False):
        # ``traceable``: a zero-argument callable making the function given to mx.compile where ``fn`` cannot be
        # (it reads values on the host: ``program.Generated(host_lengths=True)``); default ``fn`` itself
        self.raw, self.fn, self.left, self.handle, self.traceable = fn, fn, after, handle, traceable
        self.only = _only_device(handle)  # the default device always (mlx[cpu]): no stream to pick
        self.shape_free, self.shapeless = shape_free, False

    def __call__(self, bufs):
        return self.call_args(*bufs)

    def call_args(self, *bufs):
        """``self(bufs)`` without the list: jit's hot record calls this directly (``_Hot.star``), with no
        ``partition._Translating`` frame between it and the program; errors come out untranslated (the hot path
        translates them with ``reraise``)."""
        fn = self.fn
        if threading.get_ident() != _COMPILE_THREAD:
            fn = self.raw
        elif self.left > 0:  # > 0, not truthy: two threads may both decrement past zero
            self.left -= 1
            if self.left == 0:
                return self._switch(bufs)
        try:
            if self.only or mx.default_device() == self.handle:
                return fn(*bufs)
            with mx.stream(self.handle):
                return fn(*bufs)
        except Exception:  # noqa: BLE001 (MLX's errors of a shapeless trace have no type of their own)
            if fn is self.raw or not self.shapeless:
                raise
        # a shapeless compiled program MLX refuses at these sizes: the same operations eagerly
        with mx.stream(self.handle):
            return self.raw(*bufs)

    def shared_by_sizes(self):
        """Another size's program takes this one (``partition.at_sizes``): compile it shapeless, unless it is
        compiled already (MLX's compile then traces each new shape: right, as raw MLX's)."""
        if self.fn is self.raw:
            self.shapeless = True

    def _switch(self, bufs):
        compiled = mx.compile(self.raw if self.traceable is None else self.traceable(), shapeless=self.shapeless)
        with mx.stream(self.handle), _profile.span("compile", "mx.compile (and its first run)"):
            try:
                out = compiled(*bufs)
            except Exception:  # an MLX compile limitation: stay eager
                return self.raw(*bufs)
        self.fn = compiled
        return out


def _compile_policy(gen: _Generated, device: Device, eager: bool = False) -> int | None:
    """Call number from which ``mx.compile`` is used (1: from the first call), or ``None``: never (``eager``:
    the program of an eager call, ``fnarray.devices.backend.compiling``)."""
    if COMPILE_MODE == "never" or gen.n_eqns < 2 or gen.has_empty or gen.has_low_bit:
        return None
    if eager and COMPILE_MODE != "always":
        return None
    if COMPILE_MODE == "always" or device.platform != "cpu":
        return 1
    if CPU_COMPILE_MAX_ELEMENTS is None or gen.max_elements <= CPU_COMPILE_MAX_ELEMENTS:
        return CPU_COMPILE_AFTER_CALLS
    return None


def _until_compiled(gen: _Generated):
    """The function a program given to ``mx.compile`` runs until then (and is traced by it; a program MLX fails
    to compile keeps it): its source compiled (``gen.fn``), or from ``INTERPRET_FROM`` equations on its
    interpreter (``gen.interpreted``), which never writes the source: the ``CPU_COMPILE_AFTER_CALLS`` - 1 calls
    through the interpreter cost less than writing and compiling a long source (~12 us a line), and a small
    program's calls (a decode step's) keep the straight lines' speed."""
    if gen.n_eqns >= INTERPRET_FROM:
        fn = gen.interpreted
        if fn is not None:
            return fn
    return gen.fn


class MlxLowered(Lowered):
    """A program lowered to MLX operations; ``as_text()`` is the generated Python source."""

    def __init__(self, program, device, donate=()):
        super().__init__(program, device)
        self._host = any(_needs_host(e) for e in program.eqns)
        # The program of an eager call (transforms/eager_jit.py) runs as MLX's eager operations do, never through
        # mx.compile: a loop whose shapes grow would compile each shape's program at its CPU_COMPILE_AFTER_CALLS-th
        # call (~5 ms each with MLX's kernel cache warm, ~1 s per fused kernel cold), which raw MLX never pays.
        self._eager = compiling.eager

    def as_text(self) -> str:
        return _Generated(self.program, execute=False, platform=self.device.platform).source

    def compile(self):
        if _spmd.active():  # one process of several: global buffers and shard_map over processes
            return _spmd.distributed_executable(self.program, self._compile)
        return self._compile()

    def _compile(self):
        if self._host:
            from fnarray.devices.host_control import HostDriven
            return HostDriven(self.program, self.device, [True] * len(self.program.eqns))
        # The calls that run eagerly read attention's key lengths on the host (program.Generated's host_lengths);
        # mx.compile gets the form that does not (made when it first compiles, if the program has such a read).
        platform = self.device.platform
        gen = _Generated(self.program, platform=platform, host_lengths=True)
        after = _compile_policy(gen, self.device, self._eager)
        handle = self.device.handle
        if gen.reads_lengths and after == 1:
            gen = _Generated(self.program, platform=platform)
        if after is None:
            run = _on_stream(handle, gen.fn)
            run.shape_free = gen.shape_free
            return run
        if not gen.reads_lengths:
            return _WarmCompile(_until_compiled(gen), after, handle, shape_free=gen.shape_free)
        return _WarmCompile(_until_compiled(gen), after, handle,
                            lambda: _until_compiled(_Generated(self.program, platform=platform)))


def _eager_apply(fn, multiple, handle):
    """``apply(bufs) -> [bufs]`` of one primitive's rule ``fn`` on ``handle``'s stream, one Python frame deep
    where MLX has no other device (``apply.call_args(*bufs)``: the same without the list; ``apply.one(*bufs) ->
    buf``: the rule itself, for one output, which ``transforms/eager_tape.py`` calls)."""
    if not _only_device(handle):
        if multiple:
            return _on_stream(handle, lambda *bufs: list(fn(*bufs)))
        return _on_stream(handle, lambda *bufs: [fn(*bufs)])
    if multiple:
        def apply(bufs):
            return list(fn(*bufs))

        def call_args(*bufs):
            return list(fn(*bufs))
    else:
        def apply(bufs):
            return [fn(*bufs)]

        def call_args(*bufs):
            return [fn(*bufs)]
        apply.one = fn
    apply.call_args = call_args
    return apply


def _needs_host(eqn) -> bool:
    if eqn.primitive in _HOST:
        return True
    return any(_needs_host(e) for sub in subprograms(eqn) for e in sub.eqns)


_F32 = np.dtype(np.float32)


class MlxBackend(Backend):
    name = "mlx"
    spmd = True  # a 1-D mesh of one device per process, on mx.distributed (``spmd.py``)
    #: What the parity cases run on numpy:0 here, and why (``Backend.expected_fallbacks``).
    expected_decompositions = frozenset({"digamma", "erfc", "lgamma", "sharding_constraint"})
    expected_fallbacks = {
        ("cholesky", "complex64"): "MLX has no complex64 cholesky (mx.linalg.cholesky is real only)",
        ("conv_general_dilated", "int32"): "MLX's conv_general takes floating-point operands only",
        ("pallas_call", "*"): "user kernels run in fnarray's interpreter on mlx where MLX has no Metal (Linux)",
        # the low-bit dtypes (``testing/low_bit_cases.py``): everything else computes by upcasting
        ("conv_general_dilated", "int4"): "MLX's conv_general takes floating-point operands only (int32 too)",
        ("conv_general_dilated", "uint4"): "MLX's conv_general takes floating-point operands only (int32 too)",
        ("quantized_matmul", "float8_e4m3fn"): "mx.quantized_matmul takes float32/float16/bfloat16 activations",
        ("quantized_matmul", "float8_e5m2"): "mx.quantized_matmul takes float32/float16/bfloat16 activations",
    }

    def device_fallbacks(self, device):
        """``expected_fallbacks`` for ``device``: without the ``pallas_call`` entry where the device runs Pallas
        kernels as Metal (a GPU with Metal)."""
        if device.platform == "gpu" and pallas.metal_available():
            return {k: v for k, v in self.expected_fallbacks.items() if k[0] != "pallas_call"}
        return self.expected_fallbacks

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
        else:  # eager namespace calls of float32 arrays straight to MLX on its one device (``shapeless.py``)
            served = [d for d in self._devices if _only_device(d.handle)]
            if served:  # (none where MLX has a GPU: each operation then picks its device's stream)
                shapeless.register(mlx_shapeless.rules(served), served, mlx_shapeless.DTYPES)
        # (the low-bit dtypes as their bytes, in conversions and data movement only: low_bit.py)
        all_but = (frozenset(dtypes.ALL_DTYPES) - {dtypes.complex128}) | frozenset(dtypes.LOW_BIT_DTYPES)
        self._caps = {
            "cpu": Capabilities(dtypes=all_but, control_flow="host", eager_programs="repeated_call"),
            "gpu": Capabilities(dtypes=all_but - {dtypes.float64}, control_flow="host",
                                eager_programs="repeated_call"),
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
        check = _DEVICE_CHECKS.get(prim)
        if check is not None:
            r = check(eqn, device)
            if r is not None:
                return r
        ds = _eqn_dtypes(eqn)
        if ds <= _PLAIN_DTYPES:  # (no reason for any primitive: one subset test, the common equation)
            return None
        return _dtype_reason(prim, ds, device.platform, eqn.params)

    def tape_steps(self, steps, eqns, starts, outs):
        """Eager tapes replay MLX's keepdims reductions and its own broadcasts, as programs do (``keepdims.py``)."""
        return keepdims.tape_steps(steps, eqns, starts, outs)

    def lower(self, program, device, donate=()):
        # MLX reuses a buffer in place when nothing else holds it, so donation needs nothing here:
        # jit drops the donated arrays' references after the call.
        return MlxLowered(program, device, donate)

    #: ``partition.compile_eqn`` skips its own checks (a one-equation program, ``unsupported_reason``, effects)
    #: before ``eager_fast_known``: it makes every one of them itself and returns ``None`` where the general path
    #: (partitioning, fallback) is needed (issue 28: each new shape's first eager call of a primitive on mlx:0
    #: checked and evaluated the rule twice; ~20% of a first call).
    eager_fast_checks = True

    def eager_fast(self, primitive, params, in_avals, device):
        """One primitive applied directly with MLX, or ``None`` where the general path is needed."""
        out = primitive.abstract_eval(*in_avals, **getattr(params, "_d", params))
        return self.eager_fast_known(primitive, params, in_avals, list(out) if primitive.multiple_results
                                     else [out], device)

    def eager_fast_known(self, primitive, params, in_avals, out_avals, device):
        """``eager_fast`` given the output avals its caller computed already, making ``supports``' checks,
        ``lowers_natively``'s and the effect check of ``partition.compile_eqn`` (``eager_fast_checks``)."""
        fn = self.eager_rule(primitive, params, in_avals, out_avals, device)
        return None if fn is None else _eager_apply(fn, primitive.multiple_results, device.handle)

    def eager_rule(self, primitive, params, in_avals, out_avals, device):
        """``eager_fast_known``'s checks, then the rule's ``fn(*arrays)`` itself (on no stream), or ``None``."""
        if (primitive in _HOST or primitive not in RULES or primitive in _DEVICE_CHECKS or primitive in _UNSUPPORTED
                or primitive in P.EFFECTS or _spmd.active()):
            return None
        check = _EQN_CHECKS.get(primitive)
        if check is not None and check(list(in_avals), params) is not None:
            return None
        outs = list(out_avals)
        for a in in_avals:
            if 0 in a.shape:
                return None   # the general path runs the zero-size pass: no MLX call on an empty array
        ds = set()
        for a in outs:
            if 0 in a.shape:
                return None
            ds.add(a.dtype)
        programs = primitive in CALL_PROGRAM
        for p in params.values():
            if isinstance(p, Program):
                programs = True
            elif isinstance(p, np.dtype):
                ds.add(p)
        if programs:
            from fnarray.devices.partition import unsupported_reason
            eqn = program_from_eqn(primitive, params, in_avals, outs).eqns[0]
            if _needs_host(eqn) or has_effect(eqn) or unsupported_reason(eqn, device) is not None:
                return None
        else:
            for a in in_avals:  # (a loop: each new shape's first eager call of a primitive passes here)
                ds.add(a.dtype)
            # (dtypes of ``_PLAIN_DTYPES`` alone have no reason: the checks below are for the others)
            if not ds <= _PLAIN_DTYPES and (any(dtypes.is_low_bit(d) for d in ds)
                                            or _dtype_reason(primitive, ds, device.platform, params)):
                return None   # (low-bit arrays are NumPy arrays outside programs: programs convert them)
        return RULES[primitive](params, list(in_avals), outs)

    def eager_jacobian(self, kind, fun, args, argnum, x):
        """``Backend.eager_jacobian``: through MLX's own transforms (``jacobians.py``)."""
        return jacobians.jacobian(kind, fun, args, argnum, x)

    def staged_jacobian(self, kind, fun, args, argnum, x, tapes):
        """``Backend.staged_jacobian``: a record replayed under MLX's own transforms (``jacobians.staged``)."""
        return jacobians.staged(kind, fun, args, argnum, x, tapes)

    def learn_jacobian(self, kind, fun, args, argnum, x, result):
        """``Backend.learn_jacobian``: ``jacobians.learn``."""
        jacobians.learn(kind, fun, args, argnum, x, result)

    def scalar_to_device(self, value, dtype, device):
        """A Python or NumPy scalar as a rank-0 buffer of ``dtype``: a Python ``float``, or an ``int`` of at most
        2**24 in magnitude, becomes a ``float32`` ``mx.array`` directly (one rounding of the double, as NumPy's:
        ``tests/test_mlx_backend.py::test_float32_scalars_round_as_numpy``), ~0.35 us against ~3.5 us through
        a NumPy array (issue 28: transforms bind their Python constants on every call); anything else goes
        through NumPy, its dtypes and range checks."""
        t = type(value)
        if (dtype == _F32 and (t is float or t is int and -F32_EXACT <= value <= F32_EXACT)
                and mx is not None and (device is None or device.handle is not None)):
            return mx.array(value, dtype=mx.float32)
        return self.to_device(np.asarray(value, dtype), device)

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

    def block_until_ready_all(self, bufs):
        """One ``mx.eval`` of every MLX buffer, as raw MLX's ``mx.eval(tree)`` (issue 28: a sweep's 120 results
        waited for one by one cost ~13 us an ``mx.eval`` more than one evaluation of them all)."""
        local = _mx_arrays(bufs)
        if local:
            mx.eval(*local)

    # Meshes and global arrays over the processes of an mlx run (``Backend``'s hooks; the work is in ``spmd.py``).

    def check_mesh(self, devices):
        _spmd.check_mesh(devices)

    def mesh_devices(self, devices, axis_shapes):
        return _spmd.mesh_devices(devices, axis_shapes)

    def put_global(self, array, sharding):
        return _spmd.put_global(array, sharding)

    def array_sharding(self, array):
        g = _spmd.global_buffer(array)
        return None if g is None else g.sharding

    def addressable_shards(self, array):
        g = _spmd.global_buffer(array)
        return None if g is None else _spmd.addressable_shards(array, g)

    def is_fully_addressable(self, array):
        return _spmd.global_buffer(array) is None

    def binds_shard_map(self, mesh):
        return mesh.size > 1  # over processes; a mesh of one device runs shard_map as a named vmap

    def schedule(self, bufs):
        """Start evaluating ``bufs`` without waiting (host-driven loops keep MLX's graphs short)."""
        arrays = _mx_arrays(bufs)
        if arrays:
            mx.async_eval(*arrays)


def _mx_arrays(bufs) -> list:
    """The MLX arrays of ``bufs`` (a global buffer's local one; other buffers, NumPy's, passed over)."""
    local = [b.local if isinstance(b, _spmd.GlobalBuffer) else b for b in bufs]
    return [b for b in local if isinstance(b, mx.array)]


def make_backend():
    """The mlx backend; raises ``BackendUnavailable`` (with the fix) when ``mlx.core`` cannot be imported."""
    if mx is None:
        raise BackendUnavailable(IMPORT_ERROR)
    return MlxBackend()
