"""Scratch buffers: what an implementation allocates besides its results, for the memory check.

``devices.memory`` measures every value of a program; most implementations allocate little besides their
result. The window primitives and the convolution do not: the tap formulation (the numpy reference,
``lowering/numpy/windows.py`` and ``lowering/numpy/conv.py``; mlx's windows and jax's window selections through
``lowering/window_taps.py``) builds the operand base-dilated and padded to its full extent before it reads
the windows. That buffer grows with ``base_dilation``/``lhs_dilation`` and the padding, not with the result:
``reduce_window`` of 12 elements with ``base_dilation=10**9`` and ``window_strides=10**9`` returns 12 values
from a 44 GB padded operand. ``SCRATCH`` gives, per primitive, those buffers as ``(what, bytes)`` pairs,
computed from the equation's parameters and avals; ``memory.check_program`` and ``memory.check_eqn`` count
them with the equation's results. On a backend whose compiler decides the buffers (``memory_check ==
"compiled"``: XLA's ReduceWindow and the window kernels index the operand in place) scratch that does not
fit is measured again on the lowered program (``Lowered.memory_use``) rather than refused.
"""

from __future__ import annotations

import math

import numpy as np

from fnarray.core import conv as C
from fnarray.core import dtypes
from fnarray.core import windows as W

__all__ = ["SCRATCH", "scratch_bytes"]

#: the dtypes the reference accumulates in float32 (``lowering/numpy/windows.py``'s and ``conv.py``'s ``_LOW``)
_LOW = (dtypes.float16, dtypes.bfloat16, dtypes.float8_e4m3fn, dtypes.float8_e5m2)


def _acc_itemsize(d) -> int:
    return 4 if d in _LOW else np.dtype(d).itemsize


def _full_elements(shape, padding, base_dilation) -> int:
    """Elements of ``shape`` base-dilated and padded by the positive part of ``padding`` (the buffer the tap
    formulation fills before it crops the negative part)."""
    return math.prod(C.dilate_dim(n, d) + max(lo, 0) + max(hi, 0)
                     for n, (lo, hi), d in zip(shape, padding, base_dilation, strict=True))


def _reduce_window(params, in_avals, out_avals):
    x, out = in_avals[0], out_avals[0]
    acc = _acc_itemsize(x.dtype)
    use = [("the padded, base-dilated operand", _full_elements(x.shape, params["padding"],
                                                                params["base_dilation"]) * acc)]
    if acc != np.dtype(out.dtype).itemsize:
        use.append(("the float32 accumulator", math.prod(out.shape) * acc))
    return use


def _select_and_gather_add(params, in_avals, out_avals):
    t, x = in_avals
    full = _full_elements(x.shape, params["padding"], params["base_dilation"])
    n_out = math.prod(out_avals[0].shape)
    return [("the padded, base-dilated operand", full * np.dtype(x.dtype).itemsize),
            ("the padded, base-dilated tangents", full * np.dtype(t.dtype).itemsize),
            ("the running best value and tap index", n_out * (np.dtype(x.dtype).itemsize + 8 + 1))]


def _select_and_scatter_add(params, in_avals, out_avals):
    s, x = in_avals
    full = _full_elements(x.shape, params["padding"], params["base_dilation"])
    n_src = math.prod(s.shape)
    return [("the padded, base-dilated operand", full * np.dtype(x.dtype).itemsize),
            ("the padded, base-dilated accumulator", full * _acc_itemsize(s.dtype)),
            ("the running best value and tap index", n_src * (np.dtype(x.dtype).itemsize + 8 + 1))]


def _conv(params, in_avals, out_avals):
    lhs, rhs = in_avals
    dn = params["dimension_numbers"]
    lhs_dil, padding = params["lhs_dilation"], params["padding"]
    spatial = [lhs.shape[dn.lhs_spec[2 + k]] for k in range(len(lhs_dil))]
    kernel = math.prod(rhs.shape[dn.rhs_spec[2 + k]] for k in range(len(lhs_dil)))
    out_positions = math.prod(out_avals[0].shape[dn.out_spec[2 + k]] for k in range(len(lhs_dil)))
    rows = lhs.shape[dn.lhs_spec[0]] * lhs.shape[dn.lhs_spec[1]]
    item = max(_acc_itemsize(lhs.dtype), np.dtype(out_avals[0].dtype).itemsize)
    use = []
    if any(d != 1 for d in lhs_dil):
        use.append(("the lhs-dilated input", rows * math.prod(C.dilate_dim(n, d)
                                                             for n, d in zip(spatial, lhs_dil, strict=True)) * item))
    if any(p != (0, 0) for p in padding):
        use.append(("the padded input", rows * _full_elements(spatial, padding, lhs_dil) * item))
    use.append(("one kernel tap's patches", rows * max(kernel, out_positions) * item))
    return use


#: primitive -> ``f(params, in_avals, out_avals) -> [(what, bytes), ...]``: the buffers its implementation allocates
#: besides its results (absent: none worth counting).
SCRATCH = {
    W.reduce_window_sum_p: _reduce_window,
    W.reduce_window_max_p: _reduce_window,
    W.reduce_window_min_p: _reduce_window,
    W.select_and_gather_add_p: _select_and_gather_add,
    W.select_and_scatter_add_p: _select_and_scatter_add,
    C.conv_general_dilated_p: _conv,
}


def scratch_bytes(primitive, params, in_avals, out_avals) -> list:
    """``[(what, bytes), ...]``: the scratch buffers of one equation (``SCRATCH``), ``[]`` for most primitives."""
    rule = SCRATCH.get(primitive)
    if rule is None or not all(hasattr(a, "shape") for a in (*in_avals, *out_avals)):
        return []
    return rule(params, in_avals, out_avals)
