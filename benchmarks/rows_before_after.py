"""Row softmax and layernorm (4096x1024 f32) on opencl:0 and webgpu:0 with the row-kernel paths on and off.

"after" is the scheduler as it is; "before" switches off, in the same process, what made these one kernel
and faster (``groups/reduce.py``: ``ROW_VALUES``, the kept operands, the row invariants, and on OpenCL the
``row_lanes`` accumulators), which gives the two-kernel schedule of before. Timed interleaved with NumPy,
best of ``--repeat``; prints the times (ms) with the kernel counts and the load average; asserts nothing.

Usage: python benchmarks/rows_before_after.py [--repeat 7] [--devices opencl:0,webgpu:0]
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

import numpy as np

import _checkout  # noqa: E402,F401  (this checkout's fnarray, not an installed one)
import fnarray as fa

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import webgpu_rows as W  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--devices", default="opencl:0,webgpu:0")
    args = ap.parse_args(argv)
    R = importlib.import_module("fnarray.lowering.kernels.groups.reduce")
    cls = R.ReduceGroup
    on = (R.ROW_VALUES, cls.kept_operands, cls.row_invariants)
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((4096, 1024)) * 3).astype(np.float32)
    g = rng.standard_normal(1024).astype(np.float32)
    b = rng.standard_normal(1024).astype(np.float32)
    fns = {}
    try:
        for name in args.devices.split(","):
            dev = fa.devices(name.split(":")[0])[int(name.split(":")[1])]
            xd, gd, bd = (fa.device_put(v, dev) for v in (x, g, b))
            st = dev.impl.state(dev) if dev.backend == "opencl" else None
            lanes = st.row_lanes if st is not None else None
            for when, after in (("before", False), ("after", True)):
                R.ROW_VALUES = on[0] if after else False
                cls.kept_operands = on[1] if after else (lambda self: {})
                cls.row_invariants = on[2] if after else (lambda self: {})
                if st is not None:
                    st.row_lanes = lanes if after else 1
                fs = fa.jit(lambda v: fa.nn.softmax(v, axis=-1))
                fl = fa.jit(W._fa_layernorm)
                np.testing.assert_allclose(np.asarray(fs(xd)), W._np_softmax(x), rtol=1e-4, atol=1e-7)
                np.testing.assert_allclose(np.asarray(fl(xd, gd, bd)), W._np_layernorm(x, g, b), rtol=1e-3,
                                           atol=1e-4)
                ks, kl = len(fs.lower(xd).kernels()), len(fl.lower(xd, gd, bd).kernels())
                fns[f"{name} {when}: softmax ({ks} kernels)"] = lambda f=fs, a=xd: f(a).block_until_ready()
                fns[f"{name} {when}: layernorm ({kl} kernels)"] = (
                    lambda f=fl, a=(xd, gd, bd): f(*a).block_until_ready())
            if st is not None:
                st.row_lanes = lanes
    finally:
        R.ROW_VALUES, cls.kept_operands, cls.row_invariants = on
    fns["NumPy: softmax"] = lambda: W._np_softmax(x)
    fns["NumPy: layernorm"] = lambda: W._np_layernorm(x, g, b)
    best = W.interleaved(list(fns.values()), args.repeat)
    print(f"4096x1024 float32, best of {args.repeat}, load average "
          f"{' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    for k, t in zip(fns, best, strict=True):
        print(f"{k:45s} {t * 1e3:8.1f} ms")


if __name__ == "__main__":
    main()
