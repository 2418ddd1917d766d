"""The jax backend's distributed engine: ``initialize`` (``jax.distributed.initialize`` with a bounded wait),
``process_index``, ``process_count``, ``shutdown`` and the launcher's environments.

The processes first meet through ``_rendezvous`` (plain TCP on the coordinator's port), so that a coordinator
that cannot be reached or a process that never comes is a Python exception: once JAX's client is connecting,
such a failure ends the process from C++ (exit 134) after the ``TimeoutError``.
"""

from __future__ import annotations

import threading

from fnarray.distributed import _rendezvous


def launch_environments(n: int, tmp: str, free_ports) -> list:
    """The environment of each of ``n`` local processes (``python -m fnarray.distributed.launch``): process 0's
    coordinator on a free port."""
    (port,) = free_ports(1)
    return [{"FNARRAY_COORDINATOR": f"127.0.0.1:{port}", "FNARRAY_NUM_PROCESSES": str(n), "FNARRAY_PROCESS_ID": str(i),
             "FNARRAY_DISTRIBUTED_BACKEND": "jax"} for i in range(n)]


def process_index(group) -> int:
    import jax
    return int(jax.process_index())


def process_count(group) -> int:
    import jax
    return int(jax.process_count())


def shutdown() -> None:
    import jax
    jax.distributed.shutdown()


def initialize(coordinator_address, num_processes, process_id, timeout, local_device_ids):
    """Join the run; returns ``None`` (JAX keeps the run's state itself)."""
    from fnarray.devices import backend as _backend
    if "jax" in _backend._BACKENDS:
        raise ValueError("fnarray.distributed.initialize must run before the jax backend starts (before any "
                         "array is made on jax or fa.devices('jax') is listed): call it first thing")
    if coordinator_address is None and (num_processes or 1) > 1:
        raise ValueError(
            f"fnarray.distributed.initialize(backend='jax'): num_processes={num_processes} but no coordinator "
            "address: pass coordinator_address='host:port' (process 0's) or set FNARRAY_COORDINATOR")
    if None not in (coordinator_address, num_processes, process_id):
        _rendezvous.rendezvous(coordinator_address, num_processes, process_id, timeout)
    import jax
    if coordinator_address is not None and not _is_tpu_or_gpu():
        # CPU processes exchange data through gloo (XLA's CPU collectives); GPUs use NCCL, TPUs ICI.
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    err: list = []

    def start():
        try:
            jax.distributed.initialize(coordinator_address=coordinator_address, num_processes=num_processes,
                                       process_id=process_id, local_device_ids=local_device_ids,
                                       initialization_timeout=max(1, int(timeout)))
        except Exception as e:  # noqa: BLE001 (re-raised below with what to do)
            err.append(e)

    t = threading.Thread(target=start, daemon=True, name="fnarray-jax-distributed-init")
    t.start()
    t.join(timeout + 5)
    if err and isinstance(err[0], (ValueError, TypeError)):
        raise ValueError(
            f"fnarray.distributed.initialize(backend='jax'): {err[0]} (given coordinator_address="
            f"{coordinator_address!r}, num_processes={num_processes}, process_id={process_id}; JAX found no cluster "
            "launcher such as SLURM, Open MPI or a TPU slice to fill them in). Start the processes with "
            "`python -m fnarray.distributed.launch -n N script.py`, or pass all three arguments (or set "
            "FNARRAY_COORDINATOR, FNARRAY_NUM_PROCESSES, FNARRAY_PROCESS_ID).") from err[0]
    if t.is_alive() or err:
        why = f": {err[0]}" if err else ""
        raise TimeoutError(
            f"fnarray.distributed.initialize(backend='jax'): process {process_id} of {num_processes} could not join "
            f"the coordinator at {coordinator_address!r} within {timeout:g} s{why}. Check that process 0 runs and "
            "listens there (same address and port in every process), that every process was started, and that "
            "the port is not blocked.") from (err[0] if err else None)
    local, total, count = len(jax.local_devices()), len(jax.devices()), jax.process_count()
    if total != local * count:
        raise ValueError(f"fnarray.distributed.initialize: this process has {local} devices, but the run has {total} "
                         f"over {count} processes: every process must have the same number of devices (set "
                         "XLA_FLAGS / CUDA_VISIBLE_DEVICES alike in each)")


def _is_tpu_or_gpu() -> bool:
    import os
    p = os.environ.get("JAX_PLATFORMS", "")
    return any(k in p for k in ("cuda", "gpu", "tpu", "rocm"))
