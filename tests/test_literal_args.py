"""OpenCL kernels of programs that differ only in a constant (``kernels/literal_args.py``) and small broadcasts of
expensive values recomputed inline (the scheduler option ``recompute_below``): results against NumPy float64 (the
analytic Jacobian), one kernel source for every constant, one launch a call, and whole numbers kept in the source."""

from __future__ import annotations

import numpy as np

import fnarray as fa
import fnarray.numpy as fnp
from helpers import require_backend

X0 = np.array([0.3, -0.7, 1.1, 0.05], np.float32)


def _executable(fn, x):
    return fn.lower(x)._backend_lowered.compile()


def test_constants_are_arguments_and_small_broadcasts_one_launch():
    """``jacfwd(tanh(c x) x)`` for three fractional ``c``: equal to float64 analytic derivatives, all three one
    launch (the ``tanh`` under the ``[4, 4]`` broadcast computed inline) of one and the same source, ``c`` set
    as the kernel's argument; a whole-number ``c`` stays in the source (another one)."""
    dev = require_backend("opencl")[0]
    x = fa.device_put(X0, dev)
    x64 = X0.astype(np.float64)
    sources = set()
    for c in (0.6, 0.7, 0.85, 2.0):
        fn = fa.jit(fa.jacfwd(lambda x, c=c: fnp.tanh(c * x) * x), device=dev)
        t = np.tanh(np.float32(c) * x64)
        np.testing.assert_allclose(np.asarray(fn(x)), np.diag(c * (1 - t * t) * x64 + t), rtol=3e-6, atol=1e-6)
        exe = _executable(fn, x)
        assert len(exe.steps) == 1, [st.name for st in exe.steps]
        src = exe.steps[0].source
        assert ("lit0" in src) == (c != 2.0), src
        sources.add(src.replace(exe.steps[0].name, "kernel"))
    assert len(sources) == 2, sources
