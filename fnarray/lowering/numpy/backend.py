"""The numpy backend: the reference and the embedded default (device ``numpy:0``).

The references are in one module per primitive family (``FAMILIES``), each registering into
``common.IMPLS``; ``program.py`` compiles a program to generated Python source over them
(``Lowered.as_text()`` returns that source).
"""

from __future__ import annotations

import importlib
import warnings

import numpy as np

from fnarray.core import dtypes
from fnarray.core.builder import set_literal_folder
from fnarray.core.ir import Literal
from fnarray.devices.backend import Backend, Capabilities, Device, Lowered
from fnarray.lowering.numpy.common import IMPLS
from fnarray.lowering.numpy.program import Generated, compile_numpy

#: The reference modules, one per primitive family; importing one registers its implementations into
#: ``common.IMPLS``.
FAMILIES = ("elementwise", "structural", "reductions", "dot", "attention", "conv", "windows", "linalg", "fft",
            "quantized", "prng", "control_flow", "spmd", "pallas")
for _family in FAMILIES:
    importlib.import_module(f"{__package__}.{_family}")

__all__ = ["make_backend", "compile_numpy", "NumpyBackend"]

# fnarray pins the results of 1/0, log(0), overflow... (docs/design.md "Semantics"); NumPy's RuntimeWarnings
# about them are noise for users. Silenced for this backend's own modules only (np.errstate per call
# costs ~3 us, a third of the call-path budget).
warnings.filterwarnings("ignore", category=RuntimeWarning, module=r"fnarray\.lowering\.numpy")

_CAPS = Capabilities(dtypes=frozenset(dtypes.KNOWN_DTYPES), control_flow="native", eager_programs="second_call",
                     reference=True)


class NumpyLowered(Lowered):
    def as_text(self) -> str:
        return Generated(self.program).source

    def compile(self):
        return compile_numpy(self.program)


class NumpyBackend(Backend):
    name = "numpy"
    host_callbacks = True

    def __init__(self):
        self._devices = [Device("numpy", 0, "cpu", f"NumPy {np.__version__} on the host CPU")]

    def devices(self):
        return self._devices

    def capabilities(self, device):
        return _CAPS

    def supports(self, eqn, device):
        return None

    def lower(self, program, device, donate=()):
        return NumpyLowered(program, device)

    def eager_fast(self, primitive, params, in_avals, device):
        out = primitive.abstract_eval(*in_avals, **params)
        return self._eager_exe(primitive, params, in_avals, list(out) if primitive.multiple_results else [out])

    def eager_fast_known(self, primitive, params, in_avals, out_avals, device):
        """``eager_fast`` given the output avals its caller computed already (``partition.compile_eqn``: each
        new shape's first eager call of a primitive on numpy:0 evaluates the rule once, not twice); a subclass
        with an ``eager_fast`` of its own is asked through it."""
        if type(self).eager_fast is not NumpyBackend.eager_fast:
            return self.eager_fast(primitive, params, in_avals, device)
        return self._eager_exe(primitive, params, in_avals, list(out_avals))

    def _eager_exe(self, primitive, params, in_avals, outs):
        fn = IMPLS[primitive](params, list(in_avals), outs)
        if primitive.multiple_results:
            def exe(bufs):
                return list(fn(*bufs))
        else:
            def exe(bufs):
                return [fn(*bufs)]
        return exe

    def eager_call(self, primitive, params, in_avals, out_avals):
        """The implementation ``fn(*bufs) -> buf`` of a one-output primitive itself: what ``eager_fast``'s
        executable calls, without the list around it (``fnarray.devices.eager_ops``). ``None`` for a subclass
        with executables or buffers of its own."""
        cls = type(self)
        if (primitive.multiple_results or cls.eager_fast is not NumpyBackend.eager_fast
                or cls.to_device is not NumpyBackend.to_device):
            return None
        return IMPLS[primitive](params, list(in_avals), list(out_avals))

    def to_device(self, array, device):
        a = np.array(array, copy=True)
        if not a.dtype.isnative:  # '>f4' from a big-endian file: the buffer holds its aval's native dtype
            a = a.astype(a.dtype.newbyteorder("="))
        a.flags.writeable = False
        return a

    def to_host(self, buf):
        return np.asarray(buf)

    def scalar_to_device(self, value, dtype, device):
        if type(self).to_device is not NumpyBackend.to_device:  # a subclass with its own buffers
            return self.to_device(np.asarray(value, dtype), device)
        return dtype.type(value)  # NumPy scalars are immutable: no copy, no flags

    def scalar_converter(self, dtype, device):
        """A rank-0 array of ``dtype`` (read-only): NumPy's ufuncs take one ~1 us faster than a NumPy scalar
        (measured: ``np.multiply(x, np.float32(2))`` 1.48 us, with ``np.array(2, np.float32)`` 0.47 us, f32[4])
        and compute the same loop on the same values."""
        if type(self).scalar_to_device is not NumpyBackend.scalar_to_device or \
                type(self).to_device is not NumpyBackend.to_device:
            return super().scalar_converter(dtype, device)

        def conv(value):
            a = np.array(value, dtype)
            a.flags.writeable = False
            return a
        return conv

    def dlpack_import(self, x, device, copy):
        if type(self).to_device is not NumpyBackend.to_device:  # a subclass that moves buffers its own way
            return None
        v = np.from_dlpack(x, copy=copy)
        if v.flags.writeable:
            v = v.view()
            v.flags.writeable = False
        return v, v.dtype


def make_backend():
    return NumpyBackend()


def _fold(primitive, vals, params):
    """Evaluate a primitive on literal scalars (constant folding at trace time)."""
    avals = [Literal(v, _aval(v)).aval for v in vals]
    out = primitive.abstract_eval(*avals, **params)
    fn = IMPLS[primitive](params, avals, [out])
    with np.errstate(all="ignore"):
        r = np.asarray(fn(*[np.asarray(v) for v in vals]))
    return r.astype(out.dtype)[()]


def _aval(v):
    from fnarray.core.shaped import ShapedArray
    return ShapedArray((), np.asarray(v).dtype)


set_literal_folder(_fold)
