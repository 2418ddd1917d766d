"""``fnarray.config.debug_nans`` / ``debug_infs``: find the primitive that made the first NaN (inf).

As JAX's ``jax_debug_nans``: every eager primitive's floating outputs are checked; a jitted call
checks its outputs and, when one holds a NaN, re-runs the Python function op by op (eagerly, on the
same device, with the eager check on), so that the error names the primitive and the user's line
that produced it. Only a *new* NaN is blamed: a primitive whose inputs already held one is not (a NaN
that came in through an argument is not any primitive's fault). When both flags are off nothing here
runs: ``placement.debug_check`` is ``None`` and jit's executables are not wrapped (the flags are part
of jit's cache key through ``config.lowering_key``).
"""

from __future__ import annotations

import numpy as np

from fnarray.core import dtypes
from fnarray.core import primitives as P
from fnarray.core.config import config
from fnarray.core.tracing import user_frame

__all__ = ["check_outputs", "wrap_executable", "install"]

def _kinds():
    return (("nan", np.isnan) if config.debug_nans else None,
            ("inf", np.isinf) if config.debug_infs else None)


def _host(x):
    return np.asarray(x)  # an Array (copied to the host), a device buffer already on the host, or a scalar


def _bad(value, test) -> bool:
    a = _host(value)
    if not (dtypes.is_float(a.dtype) or dtypes.is_complex(a.dtype)):
        return False
    return bool(test(a).any())


def check_outputs(primitive, args, outs) -> None:
    """Raise ``FloatingPointError`` if an output of ``primitive`` holds a NaN (inf) none of its inputs held."""
    if primitive in P.EFFECTS:
        return
    for kind in _kinds():
        if kind is None:
            continue
        name, test = kind
        if not any(_is_inexact(o) and _bad(o, test) for o in outs):
            continue
        if any(_is_inexact(a) and _bad(a, test) for a in args):
            continue  # not new: it came in through an input
        inside = ""
        if primitive.kind == "control":
            inside = (f"; it happened inside the {primitive.name}'s body, which runs as one operation: put "
                      "fnarray.debug.print calls in the body to see its values")
        raise FloatingPointError(
            f"invalid value ({name}) encountered in {primitive.name} at {user_frame()}: the first primitive "
            f"whose output has a {name} that its inputs did not have (fnarray.config.debug_{name}s is on; "
            f"set it to False to let {name}s through){inside}")


def _is_inexact(x) -> bool:
    aval = getattr(x, "aval", None)
    if aval is not None:
        return dtypes.is_inexact(aval.dtype)
    return isinstance(x, (float, complex, np.floating, np.complexfloating))


def wrap_executable(exe, jitted, key, program, device):
    """``exe`` (``bufs -> bufs`` of a jitted program) with its outputs checked; on a new NaN (inf) the
    call is re-run op by op to name the primitive and line (``FloatingPointError``)."""
    from fnarray.devices.array_impl import ArrayImpl
    in_avals = program.in_avals
    n_consts = len(program.constvars)
    name = getattr(jitted.fun, "__name__", "fun")

    def checked(bufs):
        outs = exe(bufs)
        for kind in _kinds():
            if kind is None:
                continue
            label, test = kind
            if not any(_bad(device.impl.to_host(b), test) for b in outs):
                continue
            inputs = [ArrayImpl.make(av, device, b, False) for av, b in zip(in_avals, bufs[n_consts:], strict=True)]
            in_bad = any(_is_inexact(x) and _bad(x, test) for x in inputs)
            try:
                _rerun(jitted, key, inputs)
            except FloatingPointError as e:
                raise FloatingPointError(f"{e} [found by re-running the jitted function {name} op by op on "
                                         f"{device}]") from None
            if not in_bad:
                raise FloatingPointError(
                    f"invalid value ({label}) in an output of the jitted function {name} on {device}, which "
                    f"running it op by op did not reproduce (the compiled program computes differently, e.g. "
                    f"fused or reordered); run it without jit to see the op")
        return outs
    return checked


def _rerun(jitted, key, inputs):
    in_tree, _avals, statics = key
    flat, _ = jitted._flat_fun(statics, in_tree, len(inputs))
    flat(*inputs)  # eagerly: every primitive is checked; nested jitted calls check (and re-run) themselves


def install() -> None:
    """Turn the eager check on or off to match the configuration (``config.debug_hook``)."""
    from fnarray.devices import placement
    placement.debug_check = check_outputs if (config.debug_nans or config.debug_infs) else None


config.debug_hook = install
install()
