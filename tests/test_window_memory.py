"""The memory check counts the scratch buffers of window reductions and convolutions (``devices/scratch.py``).

A ``reduce_window`` with a huge ``base_dilation`` returns a small result from a padded, base-dilated operand of
many GiB that the tap formulation (numpy, mlx) builds first: it must be refused before anything is allocated,
never run into the OS's out-of-memory killer. The sizes here are scaled down to a 1 MiB-per-buffer, 8 MiB
device (as tests/test_memory_fusion.py does), so nothing large is ever allocated. References: a NumPy loop
over output positions (reduce_window) and ``x * w`` (a 1-tap convolution).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import fnarray as fa
from fnarray import lax
from fnarray.core import windows as W
from fnarray.core.errors import ResourceExhaustedError
from fnarray.devices import memory

rng = np.random.default_rng(16)


@pytest.fixture
def small_device_memory(monkeypatch):
    """Every device holds 1 MiB per buffer and 8 MiB in all."""
    monkeypatch.setattr(memory, "limits", lambda dev: (1 << 20, 8 << 20))


def _builds_padded_operand(device):
    return device.impl.capabilities(device).memory_check == "values"


def _loop_reduce_window(x, op, window, strides, padding, base_dilation):
    """float64 reference: each output element folds the operand elements its window meets (holes and padding
    meet nothing)."""
    dilated = [(n - 1) * d + 1 for n, d in zip(x.shape, base_dilation, strict=True)]
    out_shape = [(lo + m + hi - w) // s + 1 for m, (lo, hi), w, s in zip(dilated, padding, window, strides,
                                                                          strict=True)]
    out = np.empty(out_shape)
    for pos in itertools.product(*map(range, out_shape)):
        vals = []
        for tap in itertools.product(*map(range, window)):
            q = [p * s + t - lo for p, s, t, (lo, _) in zip(pos, strides, tap, padding, strict=True)]
            if all(0 <= qi < m and qi % d == 0 for qi, m, d in zip(q, dilated, base_dilation, strict=True)):
                vals.append(x[tuple(qi // d for qi, d in zip(q, base_dilation, strict=True))])
        out[pos] = {"add": sum, "max": max}[op](vals, **({} if op == "add" else {"default": -np.inf}))
    return out


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_huge_base_dilation_is_refused_or_runs_in_place(device, small_device_memory, jit):
    """12 elements spread by ``base_dilation=10**5`` (a 4.2 MiB padded operand, 12 results): refused where the
    backend builds the padded operand, naming it, its size, the parameters and what to do; run (and right)
    where the backend indexes the operand in place (XLA's ReduceWindow, the window kernels)."""
    x = np.arange(12, dtype=np.float32)

    def f(v):
        return lax.reduce_window(v, 0.0, lax.add, (1,), (10 ** 5,), "VALID", (10 ** 5,))
    run = fa.jit(f, device=device) if jit else f
    xd = fa.device_put(x, device)
    if _builds_padded_operand(device):
        with pytest.raises(ResourceExhaustedError) as e:
            run(xd)
        msg = str(e.value)
        for part in ("padded, base-dilated operand", "4.20 MiB", str(device), "float32[12]",
                     "base_dilation=(100000,)", "smaller dilation"):
            assert part in msg, msg
    else:
        np.testing.assert_array_equal(np.asarray(run(xd)), x)


def test_huge_lhs_dilation_of_a_convolution(device, small_device_memory):
    """``conv_general_dilated`` with ``lhs_dilation=10**5`` and a 1-tap kernel: the result is ``x * w``; the
    reference's dilated input (4.2 MiB) is refused where the backend builds it."""
    x = rng.standard_normal((1, 1, 12)).astype(np.float32)
    w = np.full((1, 1, 1), 3.0, np.float32)

    def f(a, b):
        return lax.conv_general_dilated(a, b, (10 ** 5,), ((0, 0),), lhs_dilation=(10 ** 5,))
    xd, wd = fa.device_put(x, device), fa.device_put(w, device)
    if _builds_padded_operand(device):
        with pytest.raises(ResourceExhaustedError, match=r"lhs-dilated input \(4.20 MiB.*lhs_dilation=\(100000,\)"):
            fa.jit(f, device=device)(xd, wd)
    else:
        np.testing.assert_allclose(np.asarray(fa.jit(f, device=device)(xd, wd)), x * 3.0, rtol=1e-6)


def test_max_pool_gradient_with_huge_base_dilation_is_refused(small_device_memory):
    """The gradient of a max reduction (``select_and_scatter_add``) builds the padded operand too."""
    x = np.arange(12, dtype=np.float32)

    def f(v):
        return lax.reduce_window(v, -np.inf, lax.max, (1,), (10 ** 5,), "VALID", (10 ** 5,)).sum()
    with pytest.raises(ResourceExhaustedError, match="padded, base-dilated"):
        fa.grad(f)(fa.device_put(x, fa.devices("numpy")[0]))


@pytest.mark.parametrize("op", ["add", "max"])
def test_base_dilation_of_normal_size_is_right(device, op):
    """Below the limits nothing changes: base dilation, padding and strides against the NumPy loop."""
    x = rng.standard_normal((4, 5)).astype(np.float32)
    window, strides, padding, base = (3, 2), (2, 1), ((1, 2), (0, 1)), (3, 2)
    init, comp = (0.0, lax.add) if op == "add" else (-np.inf, lax.max)
    out = lax.reduce_window(fa.device_put(x, device), init, comp, window, strides, padding, base)
    ref = _loop_reduce_window(x.astype(np.float64), op, window, strides, padding, base)
    np.testing.assert_allclose(np.asarray(out), ref, rtol=1e-5, atol=1e-6)


def test_scratch_is_counted_with_the_results(monkeypatch):
    """A padded operand under the per-buffer limit still counts toward the device's memory with the results."""
    dev = fa.devices("numpy")[0]
    av, out = fa.ShapedArray((1000,), np.dtype("float32")), fa.ShapedArray((99901,), np.dtype("float32"))
    params = {"window_dimensions": (1,), "window_strides": (1,), "padding": ((0, 0),),
              "base_dilation": (100,), "window_dilation": (1,)}
    monkeypatch.setattr(memory, "limits", lambda d: (1 << 20, 1 << 20))  # padded 390 KiB + result 390 KiB fit
    assert memory.check_eqn(W.reduce_window_sum_p, params, [av], [out], dev)
    monkeypatch.setattr(memory, "limits", lambda d: (1 << 20, 600 << 10))  # each fits one buffer; not together
    with pytest.raises(ResourceExhaustedError, match="in all with its results"):
        memory.check_eqn(W.reduce_window_sum_p, params, [av], [out], dev)
