"""``python -m fnarray.distributed.launch -n N [--backend jax|mlx] script.py [args...]``: N local processes.

For trying a multi-process program on one machine: every process runs ``script.py`` with the environment that
``fnarray.distributed.initialize()`` reads, on 127.0.0.1 (jax: a coordinator port for ``jax.distributed``, CPU
collectives through gloo; mlx: a ring hostfile for ``mx.distributed``). Each line of output is prefixed
with the process index. The first process to fail stops the others, and ``--timeout`` bounds the whole run
(exit status 124), so a run never hangs. On a cluster use the engines' own launchers instead
(docs/distributed.md).
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time

from fnarray.distributed import ENGINES, engine

__all__ = ["main", "free_ports"]


def free_ports(n: int) -> list:
    """``n`` TCP ports on 127.0.0.1 that nothing listens on now."""
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


def _pump(stream, prefix, out):
    for line in iter(stream.readline, ""):
        out.write(f"[{prefix}] {line}")
        out.flush()
    stream.close()


def _environments(n, backend, tmp):
    return engine(backend).launch_environments(n, tmp, free_ports)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m fnarray.distributed.launch",
                                description="Run a script in N local processes that join one distributed run.")
    p.add_argument("-n", "--num-processes", type=int, required=True)
    p.add_argument("--backend", choices=tuple(ENGINES), default="jax")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds for the whole run (default 600)")
    p.add_argument("script")
    p.add_argument("args", nargs=argparse.REMAINDER)
    a = p.parse_args(argv)
    if a.num_processes < 1:
        p.error(f"-n must be >= 1, got {a.num_processes}")
    with tempfile.TemporaryDirectory(prefix="fnarray-launch-") as tmp:
        procs, pumps = [], []
        for i, extra in enumerate(_environments(a.num_processes, a.backend, tmp)):
            env = {**os.environ, **extra, "PYTHONUNBUFFERED": "1"}
            pr = subprocess.Popen([sys.executable, a.script, *a.args], env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True)
            procs.append(pr)
            t = threading.Thread(target=_pump, args=(pr.stdout, i, sys.stdout), daemon=True)
            t.start()
            pumps.append(t)
        deadline = time.monotonic() + a.timeout
        rc = 0
        while True:
            codes = [pr.poll() for pr in procs]
            failed = [c for c in codes if c not in (None, 0)]
            if failed or all(c is not None for c in codes):
                rc = failed[0] if failed else 0
                break
            if time.monotonic() > deadline:
                sys.stderr.write(f"fnarray.distributed.launch: the run exceeded --timeout {a.timeout:g} s; stopping "
                                 "every process\n")
                rc = 124
                break
            time.sleep(0.05)
        for pr in procs:  # the first failure (or the timeout) stops the others: no process waits forever
            if pr.poll() is None:
                pr.terminate()
        for pr in procs:
            try:
                pr.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pr.kill()
                pr.wait()
        for t in pumps:
            t.join(timeout=2)
        if rc and rc != 124:
            bad = [i for i, pr in enumerate(procs) if pr.returncode not in (0, None, -15)]
            sys.stderr.write(f"fnarray.distributed.launch: process {bad[0] if bad else '?'} exited with status {rc}\n")
    return rc


if __name__ == "__main__":
    sys.exit(main())
