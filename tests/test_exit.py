"""Process exit never crashes in a driver (issue 27, item 9: opencl:0 segfaulted at exit in one run of two).

10 short programs, a few at a time, each building kernels on opencl:0 and webgpu:0, dropping some, leaving
work queued (several launches per kernel, so both drivers' queues are busy when the interpreter starts its
teardown), and exiting: every one must exit with status 0 (a segfault is -11, an abort -6) within a bound.
``fnarray/devices/teardown.py`` finishes the queues at exit and keeps the drivers' objects out of the
interpreter's teardown. (50 programs until the seventeenth session, ~3 s of CPU each, most of it the interpreter
start, imports and device set-up: 20, each with more work queued at exit, take the same exit path at 40% of the
cost; the race is rare, so this is a smoke check, not a frequency bound: docs/internals.md, "Open work".)
"""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

import fnarray as fa

pytestmark = pytest.mark.slow  # 10 interpreter starts

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUNS = 10
AT_ONCE = 3
PER_RUN_S = 300

_CHILD = """
import sys
import fnarray as fa, fnarray.numpy as fnp
for name in sys.argv[1:]:
    dev = fa.get_device(name)
    x = fa.device_put(fnp.arange(4096.0).reshape(64, 64), dev)
    f = fa.jit(lambda a: fnp.tanh(a @ a * 1e-4).sum(axis=0))
    kept = [f(x), fnp.sort(x, axis=1), fnp.cumsum(x, axis=0)]   # kernels built, work queued, never read
    kept += [f(x) for _ in range(4)]                             # the same kernel launched again, queued
    del f
    dropped = fa.jit(lambda a: a * 2.0 + 1.0)(x)                 # one more kernel, its result dropped
    del dropped
print("ok")
"""


def _kernel_devices():
    names = [str(d) for d in fa.devices(all_backends=True) if d.backend in ("opencl", "webgpu")]
    if not names:
        pytest.skip("backend unavailable: neither opencl nor webgpu has a device here")
    return [n for n in names if n.endswith(":0")]


def _run(names):
    env = dict(os.environ, PYTHONPATH=_ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
               OPENBLAS_NUM_THREADS="1")
    try:
        r = subprocess.run([sys.executable, "-c", _CHILD, *names], env=env, cwd=_ROOT, capture_output=True,
                           text=True, timeout=PER_RUN_S)
    except subprocess.TimeoutExpired:
        return None, f"still running after {PER_RUN_S} s"
    return r.returncode, (r.stdout + r.stderr)[-1500:]


def test_programs_exit_cleanly():
    names = _kernel_devices()
    with ThreadPoolExecutor(AT_ONCE) as pool:
        results = list(pool.map(lambda _: _run(names), range(RUNS)))
    bad = [(rc, out) for rc, out in results if rc != 0 or "ok" not in out]
    assert not bad, f"{len(bad)} of {RUNS} runs on {names} failed; first: status {bad[0][0]}\n{bad[0][1]}"
