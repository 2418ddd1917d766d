"""``stack`` and ``concatenate`` of thousands of arrays stay linear (issue 27, item 9; tinygrad#8617's case).

Measured as counts, not times (the machine is shared): under the profiler, stacking N arrays makes a bounded
number of compiles and at most N/4 kernel launches (one program: the reshapes fuse into the concatenate's
kernels, which the kernel scheduler splits where a backend binds few buffers: WebGPU's 8), never one eager
operation per array.
"""

from __future__ import annotations

import collections

import numpy as np
import pytest

import fnarray as fa
import fnarray.numpy as fnp

pytestmark = pytest.mark.slow  # 2,000 transfers per case and device

N = 2000   # thousands (the case); 5,000 until the seventeenth session: the counts below scale with N


def _counts(fn):
    with fa.profiler.trace() as h:
        out = np.asarray(fn())
    kinds = collections.Counter(r.kind for r in h.profile.records)
    return out, kinds


@pytest.mark.parametrize("axis, shape", [(0, ()), (-1, (2,)), (0, (2,))])
def test_stack_of_thousands_is_one_program(device, axis, shape):
    """``stack`` of 2,000 0-d and 1-d arrays: right values, a few compiles, at most N/4 launches, no fallback
    (along an axis of the arrays: one ``concatenate`` and one ``reshape``, no program)."""
    host = [np.full(shape, i, np.float32) for i in range(N)]
    xs = [fa.device_put(h, device) for h in host]
    out, kinds = _counts(lambda: fnp.stack(xs, axis=axis))
    np.testing.assert_array_equal(out, np.stack(host, axis=axis))
    assert kinds["compile"] <= 12, kinds
    assert kinds["kernel"] <= N // 4, kinds
    assert kinds["fallback"] == 0, kinds
    # the second call of the same signature compiles nothing
    _, again = _counts(lambda: fnp.stack(xs, axis=axis))
    assert again["compile"] == 0 and again["trace"] == 0, again


def test_concatenate_of_thousands_is_linear(device):
    """``concatenate`` of 2,000 1-d arrays is one equation: a few compiles, at most N/4 launches."""
    host = [np.array([i, -i], np.int32) for i in range(N)]
    xs = [fa.device_put(h, device) for h in host]
    out, kinds = _counts(lambda: fnp.concatenate(xs))
    np.testing.assert_array_equal(out, np.concatenate(host))
    assert kinds["compile"] <= 12, kinds
    assert kinds["kernel"] <= N // 4, kinds


def test_stack_under_jit_and_grad_is_unchanged():
    """Traced ``stack`` keeps its plain form (reshapes + one concatenate), so transforms see no ``call``."""
    prog = fa.make_ir(lambda *a: fnp.stack(a))(*[fnp.float32(i) for i in range(40)])
    names = [e.primitive.name for e in prog.eqns]
    assert names.count("concatenate") == 1 and "call" not in names, names
    g = fa.grad(lambda x: (fnp.stack([x * i for i in range(40)]) ** 2).sum())(fnp.float32(1.0))
    assert float(g) == pytest.approx(2 * sum(i * i for i in range(40)))
