"""What the benchmark scripts share: the interleaved timer, the load line they print first, the loop over the
devices they were asked for, the webgpu scripts' options and their sweep over a step's products (import it after
``_checkout``: this folder is on the path)."""

from __future__ import annotations

import os
import subprocess
import time


def load_line() -> str:
    """``uptime``'s line (the load average), which each script prints before its table."""
    return "uptime: " + subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def available_devices(fa, names):
    """``(name, device)`` for each of the comma-separated device ``names`` this machine has; a line saying why
    for each it lacks (a missing backend is reported, not fatal)."""
    for name in names.split(","):
        try:
            dev = fa.get_device(name)
        except Exception as e:  # noqa: BLE001
            print(f"{name:10} unavailable: {e}")
            continue
        yield name, dev


def best_of(fns, number, warm=1):
    """Each of ``fns`` (zero-argument callables) called ``warm`` times, then ``number`` rounds calling each once in
    turn: ``(wall, cpu)``, the best wall-clock and process-CPU seconds of each. Interleaving shares a load spike
    between the candidates; CPU time is steadier on a loaded machine (docs/traps.md) and on a CPU device counts
    the driver's threads too."""
    for fn in fns:
        for _ in range(warm):
            fn()
    wall = [float("inf")] * len(fns)
    cpu = [float("inf")] * len(fns)
    for _ in range(number):
        for k, fn in enumerate(fns):
            t, c = time.perf_counter(), time.process_time()
            fn()
            wall[k] = min(wall[k], time.perf_counter() - t)
            cpu[k] = min(cpu[k], time.process_time() - c)
    return wall, cpu


def per_call_ms(runs, rounds, calls, totals, count):
    """CPU milliseconds per call of each of ``runs`` (each a callable making ``calls`` calls; ``best_of`` over
    ``rounds``), and ``totals`` (one number per run) with ``count`` times each added: the products of a program's
    step, ``count`` of them of this shape (``webgpu_products.py``, ``webgpu_stores.py``)."""
    _, cpu = best_of(runs, rounds, warm=1)
    ms = [c / calls * 1e3 for c in cpu]
    return ms, [t + count * v for t, v in zip(totals, ms, strict=True)]


def jit_swapped(fa, module, attr, value, dev, f, args, calls):
    """``f`` jitted on ``dev`` while ``module.attr`` is ``value`` (a scheduler switch, a loss form: the swap holds
    through the trace and the first call, which builds the program, then the old value is back), as
    ``(run, kernel names)``: ``run`` makes ``calls`` calls and waits for the last; the names are one call's
    kernels from ``fa.profiler`` (``webgpu_batch_views.py``, ``webgpu_cross_entropy.py``)."""
    old = getattr(module, attr)
    setattr(module, attr, value)
    try:
        jf = fa.jit(lambda *a: f(*a), device=dev)   # a new function: fa.jit caches by function
        fa.block_until_ready(jf(*args))
    finally:
        setattr(module, attr, old)
    with fa.profiler.trace() as h:
        fa.block_until_ready(jf(*args))
    names = [r.name for r in h.profile.records if r.kind == "kernel"]

    def run():
        for _ in range(calls - 1):
            jf(*args)
        fa.block_until_ready(jf(*args))
    return run, names

def benchmark_module(name):
    """The benchmark ``benchmarks/{name}.py`` as a module named ``{name}_benchmark`` (``llm.py``'s raw steps: ``llm``
    is the example's name on ``sys.path``)."""
    import importlib.util
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"{name}_benchmark", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def webgpu_options(doc, argv, rounds, calls, workloads=None, flags=None):
    """The options a webgpu benchmark shares, parsed from ``argv`` (``--rounds``, ``--calls`` with these defaults;
    ``--workloads`` when ``workloads``, a dict keyed by workload, is given, all of them by default; each of
    ``flags``, ``{"--name": help}``, a switch), then the load line and webgpu:0's description printed:
    ``(options, webgpu:0)``. ``doc``: the script's docstring, whose first line describes it."""
    import argparse

    import fnarray as fa
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    if workloads is not None:
        ap.add_argument("--workloads", default=",".join(workloads))
    ap.add_argument("--rounds", type=int, default=rounds)
    ap.add_argument("--calls", type=int, default=calls)
    for name, what in (flags or {}).items():
        ap.add_argument(name, action="store_true", help=what)
    options = ap.parse_args(argv)
    print(load_line())
    dev = fa.get_device("webgpu:0")
    print(f"webgpu:0: {dev.description}")
    return options, dev


def product_sweep(options, shapes, header, measure):
    """The table of ``webgpu_products.py``, ``webgpu_stores.py`` and ``webgpu_uniform_products.py``: for each of
    ``options.workloads`` the ``header`` line, then a line per shape of ``shapes[workload]`` (its first entry the
    count per step), then the step's total of count x CPU ms per call of each variant, and the load line last.
    ``measure(shape, rng)`` gives ``(runs, row)``: the two variants' callables, each making ``options.calls``
    calls (timed by ``per_call_ms`` over ``options.rounds``), and ``row(ms)``, the shape's line from their
    milliseconds; ``rng`` is one NumPy generator (seed 0) for the whole sweep."""
    import numpy as np
    rng = np.random.default_rng(0)
    for work in options.workloads.split(","):
        print(header)
        total = [0.0, 0.0]
        for shape in shapes[work]:
            runs, row = measure(shape, rng)
            ms, total = per_call_ms(runs, options.rounds, options.calls, total, shape[0])
            print(row(ms), flush=True)
        print(f"{work}: the step's products {total[0]:.1f} -> {total[1]:.1f} CPU ms ({total[1] / total[0]:.2f}x)")
    print(load_line())
