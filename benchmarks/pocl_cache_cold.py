"""The digits step's first call with the persistent cache on opencl:0, two source trees interleaved.

Usage: python benchmarks/pocl_cache_cold.py 30|31 off|on [ROUNDS]

``30`` is the PoCL 3.0 inside PyOpenCL's wheel, ``31`` Debian's PoCL 3.1 unpacked by ``benchmarks/pocl31.sh``
under ``/work/pocl31``; ``off``/``on`` turns PoCL's own kernel cache off (``POCL_KERNEL_CACHE=0``) or on, in a
fresh folder per measurement. Each round runs, for each tree (``BASE_TREE``, default ``/work/main``, and
``BRANCH_TREE``, default this checkout), three processes of ``benchmarks/first_call.py --child opencl:0``:
``off`` (no ``FNARRAY_CACHE_DIR``), ``cold`` (an empty one) and ``warm`` (the folder ``cold`` filled), and
prints each one's first call and the process's wall time (ms) with the load average, and the number of OpenCL
binaries kept. docs/performance.md "The persistent cache, cold, on PoCL" has the results. Asserts nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TREES = {"main": os.environ.get("BASE_TREE", "/work/main"),
         "branch": os.environ.get("BRANCH_TREE", os.path.dirname(HERE))}
P31 = {"OCL_ICD_VENDORS": "/work/pocl31/vendors",
       "LD_LIBRARY_PATH": "/work/pocl31/root/usr/lib/x86_64-linux-gnu",
       "OPENCL_PATH": "/work/main/.venv/lib/python3.11/site-packages/pyopencl/.libs/libOpenCL-5519dec5.so.1.0.0"}


def run(tree, pocl, cache, pocl_cache):
    """One process: (load average, first call ms, process wall ms)."""
    env = dict(os.environ, PYTHONPATH=TREES[tree], OPENBLAS_NUM_THREADS="1", FNARRAY_AUTOTUNE="off")
    env.pop("FNARRAY_CACHE_DIR", None)
    if pocl == "31":
        env.update(P31)
    if cache:
        env["FNARRAY_CACHE_DIR"] = cache
    if pocl_cache:
        env.update(POCL_KERNEL_CACHE="1", POCL_CACHE_DIR=pocl_cache)
    else:
        env["POCL_KERNEL_CACHE"] = "0"
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, os.path.join(TREES[tree], "benchmarks", "first_call.py"), "--child",
                        "opencl:0"], env=env, capture_output=True, text=True)
    wall = (time.perf_counter() - t0) * 1e3
    assert r.returncode == 0, r.stderr[-2000:]
    return load, json.loads(r.stdout.strip().splitlines()[-1])["first_ms"], wall


def main():
    pocl, kcache = sys.argv[1], sys.argv[2]
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    for rnd in range(rounds):
        for tree in (["main", "branch"] if rnd % 2 == 0 else ["branch", "main"]):
            tmp = tempfile.mkdtemp(prefix="fnarray-pocl-cache-")
            pc = os.path.join(tmp, "pocl") if kcache == "on" else None
            res = {"off": run(tree, pocl, None, os.path.join(tmp, "pocl-off") if pc else None),
                   "cold": run(tree, pocl, os.path.join(tmp, "fa"), pc),
                   "warm": run(tree, pocl, os.path.join(tmp, "fa"), pc)}
            n = sum(len(f) for _, _, f in os.walk(os.path.join(tmp, "fa", "opencl")))
            print(f"PoCL {pocl} kcache={kcache} {tree:6s} " + "  ".join(
                f"{m}: load {la:.1f} first {fm:,.0f} ms process {w:,.0f} ms" for m, (la, fm, w) in res.items())
                + f"  opencl entries {n}", flush=True)


if __name__ == "__main__":
    main()
