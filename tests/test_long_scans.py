"""Cumulative ops over lines longer than a device's loop limit (Mesa's lavapipe: 65,535 iterations
per invocation, silently) run as blocked scans (``lowering/kernels/long_scans.py``)."""

from __future__ import annotations

import numpy as np
import pytest

import fnarray as fa
import fnarray.numpy as fnp
from fnarray.core import lax
from fnarray.core.interpreter import eval_program
from fnarray.core import primitives as P
from fnarray.lowering.kernels.long_scans import split_long_scans

OPS = {
    "cumsum": (lax.cumsum, lambda a, axis: np.cumsum(a, axis=axis)),
    "cumprod": (lax.cumprod, lambda a, axis: np.cumprod(a, axis=axis)),
    "cummax": (lax.cummax, lambda a, axis: np.maximum.accumulate(a, axis=axis)),
    "cummin": (lax.cummin, lambda a, axis: np.minimum.accumulate(a, axis=axis)),
    "cumlogsumexp": (lax.cumlogsumexp, lambda a, axis: np.logaddexp.accumulate(a.astype(np.float64), axis=axis)),
}


def _data(name, shape, dtype, rng):
    if name == "cumprod":
        return (1.0 + 1e-4 * rng.standard_normal(shape)).astype(dtype)
    if np.dtype(dtype).kind == "i":
        return rng.integers(-5, 6, shape).astype(dtype)
    a = rng.standard_normal(shape).astype(dtype)
    a.flat[7] = np.nan if name in ("cummax", "cummin") else a.flat[7]
    return a


def _reference(name, a, axis, reverse):
    f = OPS[name][1]
    if reverse:
        return np.flip(f(np.flip(a, axis), axis), axis)
    return f(a, axis)


@pytest.mark.parametrize("name", sorted(OPS))
@pytest.mark.parametrize("axis,reverse", [(0, False), (1, True), (1, False)])
def test_the_rewrite_equals_the_one_loop_scan(name, axis, reverse):
    # A limit of 100 forces blocks of 100 and, for 25,003 elements, a recursive scan of the 251 block totals.
    rng = np.random.default_rng(3)
    shape = (25003, 2) if axis == 0 else (2, 25003)
    a = _data(name, shape, np.float32, rng)
    prog = fa.make_ir(lambda x: OPS[name][0](x, axis=axis, reverse=reverse))(fnp.asarray(a))
    split = split_long_scans(prog, 100)
    assert any(e.primitive is P.call for e in split.eqns)
    out = np.asarray(eval_program(split, [], [fnp.asarray(a)])[0])
    np.testing.assert_allclose(out, _reference(name, a.astype(np.float64), axis, reverse), rtol=2e-4, atol=2e-3)
    assert split_long_scans(prog, 1 << 20) is prog  # short lines are left alone


@pytest.mark.parametrize("name", sorted(OPS))
def test_long_lines_on_the_kernel_devices(name):
    rng = np.random.default_rng(5)
    a = _data(name, (2, 70001), np.float32, rng)
    want = _reference(name, a.astype(np.float64), 1, False)
    for dev in fa.devices(all_backends=True):
        if dev.backend not in ("opencl", "webgpu"):
            continue
        out = np.asarray(fa.jit(lambda x: OPS[name][0](x, axis=1), device=dev)(fnp.asarray(a)))
        np.testing.assert_allclose(out, want, rtol=2e-4, atol=2e-3, err_msg=str(dev))


def test_integer_cumsum_of_a_long_line_is_exact():
    a = np.random.default_rng(1).integers(-5, 6, (70001,)).astype(np.int32)
    for dev in fa.devices(all_backends=True):
        out = np.asarray(fnp.cumsum(fa.device_put(fnp.asarray(a), dev)))
        np.testing.assert_array_equal(out, np.cumsum(a), err_msg=str(dev))
