"""The mlx backend's distributed engine: ``initialize`` (``mx.distributed.init`` with a bounded wait),
``process_index``, ``process_count``, ``shutdown`` and the launcher's environments.

Measured with MLX 0.32 (Linux, ring): ``mx.distributed.init`` holds the GIL while it connects, so the
``timeout`` thread below cannot cut it short; the ring backend gives up by itself after ~30 s of
connection retries ("[ring] Couldn't connect"), which is then the bound. ``strict=True`` matters: without it
a process whose ``MLX_RANK``/``MLX_HOSTFILE`` are missing silently gets a group of size 1 and trains alone.
"""

from __future__ import annotations

import json
import os
import threading


def launch_environments(n: int, tmp: str, free_ports) -> list:
    """The environment of each of ``n`` local processes (``python -m fnarray.distributed.launch``): a ring over
    free local ports, in a hostfile written to ``tmp``."""
    hostfile = os.path.join(tmp, "hosts.json")
    with open(hostfile, "w") as f:
        json.dump([[f"127.0.0.1:{p}"] for p in free_ports(n)], f)
    return [{"MLX_HOSTFILE": hostfile, "MLX_RANK": str(i), "FNARRAY_NUM_PROCESSES": str(n),
             "FNARRAY_PROCESS_ID": str(i), "FNARRAY_DISTRIBUTED_BACKEND": "mlx"} for i in range(n)]


def process_index(group) -> int:
    return int(group.rank())


def process_count(group) -> int:
    return int(group.size())


def shutdown() -> None:
    return None  # MLX has no call to leave a group


def initialize(coordinator_address, num_processes, process_id, timeout, local_device_ids):
    """Join the run; returns its ``mx.distributed.Group`` (``coordinator_address`` and ``local_device_ids`` are
    jax's: the ring comes from ``MLX_HOSTFILE``)."""
    from fnarray.devices import backend as _backend
    if "mlx" in _backend._BACKENDS:
        raise ValueError("fnarray.distributed.initialize(backend='mlx') must run before the mlx backend starts "
                         "(before any array is made on mlx or fa.devices('mlx') is listed): call it first thing, "
                         "since afterwards the mlx backend has one device per process")
    import mlx.core as mx
    if process_id is not None and "MLX_RANK" not in os.environ:
        os.environ["MLX_RANK"] = str(process_id)
    backend = os.environ.get("FNARRAY_MLX_BACKEND", "ring" if "MLX_HOSTFILE" in os.environ else "any")
    out: list = []
    err: list = []

    def start():
        try:
            out.append(mx.distributed.init(strict=True, backend=backend))
        except Exception as e:  # noqa: BLE001 (re-raised below with what to do)
            err.append(e)

    t = threading.Thread(target=start, daemon=True, name="fnarray-mlx-distributed-init")
    t.start()
    t.join(timeout)
    if t.is_alive() or err:
        why = f": {err[0]}" if err else f": no answer within {timeout:g} s"
        raise TimeoutError(
            f"fnarray.distributed.initialize(backend='mlx'): mx.distributed.init(backend={backend!r}) failed for rank "
            f"{os.environ.get('MLX_RANK')} with hostfile {os.environ.get('MLX_HOSTFILE')!r}{why}. Start every "
            "process (python -m fnarray.distributed.launch --backend mlx, or mlx.launch), with the same hostfile.")
    group = out[0]
    if num_processes is not None and group.size() != num_processes:
        raise ValueError(f"fnarray.distributed.initialize: num_processes={num_processes}, but the mlx group has "
                         f"{group.size()} processes (MLX_HOSTFILE lists that many); make them agree")
    return group
