"""Row-wise normalisations on the kernel backends: at most two kernels each, values as NumPy's.

A reduction that reads an earlier reduction of the same rows at its own row (softmax's sum of
``exp(x - max)``, layernorm's variance around the mean) runs in the same kernel as it, in a second loop
over the row (``_ReduceGroup.stages``): a work-item per row, or a work-group per row cooperating in
local memory when the rows are few and long. The reference is NumPy in float64.
"""

import numpy as np
import pytest

import fnarray as fa
import fnarray.numpy as fnp

from helpers import fallback_mode


def _layernorm(v):
    mu = fnp.mean(v, axis=-1, keepdims=True)
    var = fnp.mean(fnp.square(v - mu), axis=-1, keepdims=True)
    return (v - mu) * fa.lax.rsqrt(var + 1e-5)


def _ref_layernorm(x):
    mu = x.mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + 1e-5)


def _ref_softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


CASES = {
    "softmax": (lambda v: fa.nn.softmax(v, axis=-1), _ref_softmax),
    "log_softmax": (lambda v: fa.nn.log_softmax(v, axis=-1), lambda x: np.log(_ref_softmax(x))),
    "layernorm": (_layernorm, _ref_layernorm),
    "rmsnorm": (lambda v: v * fa.lax.rsqrt(fnp.mean(v * v, axis=-1, keepdims=True) + 1e-6),
                lambda x: x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6)),
    "argmax after max": (lambda v: fnp.argmax(v - fnp.max(v, axis=-1, keepdims=True), axis=-1),
                         lambda x: np.argmax(x, axis=-1)),
}


@pytest.mark.parametrize("target", ["opencl:0", "webgpu:0"])
@pytest.mark.parametrize("rows", [3, 700])
@pytest.mark.parametrize("name", list(CASES))
def test_row_normalisations(target, rows, name):
    f, ref = CASES[name]
    x = np.random.default_rng(rows).standard_normal((rows, 130)).astype(np.float32) * 3
    x[0, 5] = 40.0  # a large entry: the max must really be subtracted
    z = fa.device_put(fnp.asarray(x), target)
    with fallback_mode("error"):
        jf = fa.jit(f)
        text = jf.lower(z).as_text()
        got = np.asarray(jf(z))
    n_kernels = text.count("__kernel ") + text.count("@compute")
    assert n_kernels <= 2, text
    want = ref(x.astype(np.float64))
    if got.dtype.kind in "iu":
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6)
