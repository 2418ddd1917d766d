"""Row softmax and layernorm on webgpu:0 with and without ``vec4`` reads of the rows (issue 28).

The webgpu backend sets the scheduler option ``row_vec4`` on a CPU adapter (lavapipe): a work item's loops
over a float32 row whose length is a multiple of 4 read it, and any operand read at a multiple of 4 plus the
row position (a layernorm's scale and offset), one ``vec4`` per four elements (``groups/reduce.py``,
``_ReduceKernel.vector_reads``). This script compiles each program twice in one process, once with the option
dropped from the backend's ``schedule_program`` call, checks that both give the same values, and times them
interleaved by the process's CPU time (lavapipe runs the kernels in this process; its own timestamps are
unusable under load): ``--calls`` calls a sample, ``--samples`` samples, the quartiles and the ratio of the
medians (> 1: the vec4 form is faster). Prints one line per program and the load average.

Usage: python benchmarks/row_vec4.py [--rows 1024] [--cols 256] [--calls 20] [--samples 7]
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("FNARRAY_AUTOTUNE", "off")

import numpy as np  # noqa: E402

import _checkout  # noqa: E402,F401  (this checkout's fnarray)
import fnarray as fa  # noqa: E402
import fnarray.numpy as fnp  # noqa: E402
from _timing import load_line  # noqa: E402
from fnarray.lowering.webgpu import backend as webgpu_backend  # noqa: E402

_SCALAR = [False]   # while set, the backend's schedule_program gets no row_vec4


def _schedule_program(schedule):
    def wrapped(program, caps, **opts):
        if _SCALAR[0]:
            opts.pop("row_vec4", None)
        return schedule(program, caps, **opts)
    return wrapped


def softmax(x):
    m = fnp.max(x, axis=-1, keepdims=True)
    e = fnp.exp(x - m)
    return e / fnp.sum(e, axis=-1, keepdims=True)


def layernorm(x, g, b):
    mu = fnp.mean(x, axis=-1, keepdims=True)
    var = fnp.mean((x - mu) ** 2, axis=-1, keepdims=True)
    return (x - mu) / fnp.sqrt(var + 1e-5) * g + b


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=1024)
    ap.add_argument("--cols", type=int, default=256)
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--samples", type=int, default=7)
    a = ap.parse_args()
    webgpu_backend.schedule_program = _schedule_program(webgpu_backend.schedule_program)
    dev = fa.devices("webgpu")[0]
    rng = np.random.default_rng(0)
    x, g, b = (fa.device_put(v.astype(np.float32), dev) for v in (
        rng.standard_normal((a.rows, a.cols)), rng.standard_normal(a.cols), rng.standard_normal(a.cols)))
    print(load_line())
    runs = {}
    for name, f, args in (("softmax", softmax, (x,)), ("layernorm", layernorm, (x, g, b))):
        outs = []
        for form in ("scalar", "vec4"):
            _SCALAR[0] = form == "scalar"
            jf = fa.jit(lambda *v, f=f: f(*v), device=dev)
            outs.append(np.asarray(jf(*args)))   # compiled now, with or without the option
            runs[name, form] = (jf, args)
        _SCALAR[0] = False
        np.testing.assert_array_equal(outs[0], outs[1])
    times = {k: [] for k in runs}
    for _ in range(a.samples):
        for k, (jf, args) in runs.items():
            np.asarray(jf(*args))
            t = time.process_time()
            for _ in range(a.calls):
                y = jf(*args)
            np.asarray(y)
            times[k].append((time.process_time() - t) / a.calls * 1e3)
    for name in ("softmax", "layernorm"):
        s, v = np.percentile(times[name, "scalar"], [25, 75]), np.percentile(times[name, "vec4"], [25, 75])
        ratio = np.median(times[name, "scalar"]) / np.median(times[name, "vec4"])
        print(f"{name} [{a.rows}, {a.cols}]: scalar {s[0]:.2f}-{s[1]:.2f} ms, vec4 {v[0]:.2f}-{v[1]:.2f} ms "
              f"(CPU per call), {ratio:.2f}x")
    print(load_line())


if __name__ == "__main__":
    main()
