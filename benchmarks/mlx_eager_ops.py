"""The eager decode step's nine operations on mlx:0, each alone: fnarray, a bare wrapper and raw MLX (issue 28).

The step is ``benchmarks/programs.py``'s ``decode`` (``concatenate``, ``.T``, ``@``, ``.max``, ``-``, ``exp``,
``.sum``, ``/``, ``@``). Each operation's graph building is timed alone (no evaluation): ``--calls`` calls
alternating between two cache lengths, so that a rule's last hit never serves the next call but what it served
for a length is found again (a growing loop's later passes), in the thread's CPU time with the garbage collector
off, best of ``--rounds``. "floor" is the same MLX call wrapped in one Python function and one slotted object with
no test (the least any per-call wrapper costs here); "over floor" is what fnarray's checks and frames add.

    PYTHONPATH=. python benchmarks/mlx_eager_ops.py [--calls 2000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _checkout  # noqa: E402,F401  (this checkout's fnarray)
from _timing import load_line  # noqa: E402

import numpy as np  # noqa: E402

WIDTH = 64
OPERATIONS = {"concatenate": "np_.concatenate([cache, row], axis=0)", ".T": "cache.T", "q @ cache.T": "q @ ct",
              "e @ cache": "e @ cache", ".max(keepdims)": "sc.max(axis=-1, keepdims=True)", "sc - m": "sc - m",
              "exp": "np_.exp(sc)", ".sum(keepdims)": "e.sum(axis=-1, keepdims=True)", "e / s": "e / s"}


class _Bare:
    """The floor: an MLX array in one slotted object, each operation one Python call around MLX's."""
    __slots__ = ("b",)

    def __init__(self, b):
        self.b = b

    T = property(lambda self: _Bare(self.b.T))

    def __matmul__(self, o):
        return _Bare(self.b @ o.b)

    def __sub__(self, o):
        return _Bare(self.b - o.b)

    def __truediv__(self, o):
        return _Bare(self.b / o.b)

    def max(self, axis, keepdims):
        return _Bare(self.b.max(axis=axis, keepdims=keepdims))

    def sum(self, axis, keepdims):
        return _Bare(self.b.sum(axis=axis, keepdims=keepdims))


def _namespaces():
    """``{side: (namespace, put)}`` for fnarray on mlx:0, the floor and raw MLX."""
    import fnarray as fa
    import fnarray.numpy as fnp
    import mlx.core as mx
    dev = fa.get_device("mlx:0")
    bare = type("bare", (), {"concatenate": staticmethod(lambda xs, axis=0: _Bare(mx.concatenate([x.b for x in xs],
                                                                                               axis))),
                             "exp": staticmethod(lambda x: _Bare(mx.exp(x.b)))})
    return {"fnarray": (fnp, lambda a: fa.device_put(a, dev)), "floor": (bare, lambda a: _Bare(mx.array(a))),
            "raw MLX": (mx, mx.array)}


def _env(np_, put, length):
    """The step's operands at a cache of ``length`` rows, made by the side's own operations."""
    q, row = put(np.full((1, WIDTH), 0.01, np.float32)), put(np.full((1, WIDTH), 0.02, np.float32))
    cache = put(np.zeros((length, WIDTH), np.float32))
    sc = q @ cache.T
    m = sc.max(axis=-1, keepdims=True)
    e = np_.exp(sc - m)
    return dict(np_=np_, q=q, row=row, cache=cache, ct=cache.T, sc=sc, m=m, e=e, s=e.sum(axis=-1, keepdims=True))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args(argv)
    print(load_line())
    envs = {side: (_env(np_, put, 20), _env(np_, put, 21)) for side, (np_, put) in _namespaces().items()}
    codes = {name: compile(src, name, "eval") for name, src in OPERATIONS.items()}
    best: dict = {}
    for _ in range(args.rounds):
        for side, (e0, e1) in envs.items():
            for name, code in codes.items():
                gc.disable()
                t = time.thread_time()
                for _ in range(args.calls // 2):
                    eval(code, e0)  # noqa: S307 (our own expressions)
                    eval(code, e1)  # noqa: S307
                us = (time.thread_time() - t) / (args.calls // 2 * 2) * 1e6
                gc.enable()
                best[side, name] = min(best.get((side, name), us), us)
    print(f"{'operation (us a call)':22} {'fnarray':>8} {'floor':>7} {'raw MLX':>8} {'over floor':>10}")
    for name in [*OPERATIONS, "the step"]:
        us = [sum(best[s, n] for n in OPERATIONS) if name == "the step" else best[s, name] for s in envs]
        print(f"{name:22} {us[0]:8.2f} {us[1]:7.2f} {us[2]:8.2f} {us[0] - us[1]:10.2f}")


if __name__ == "__main__":
    main()
