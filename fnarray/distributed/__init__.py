"""Several processes, one program: ``initialize``, ``process_index``, ``process_count`` (``jax.distributed``).

fnarray builds no transport: ``initialize`` starts the engine of the chosen backend.

- jax: ``jax.distributed.initialize`` (the coordinator at ``coordinator_address`` is process 0's); on CPUs
  the collectives go through gloo (``jax_cpu_collectives_implementation``), on NVIDIA GPUs through NCCL,
  on TPUs over ICI. Afterwards ``fnarray.devices("jax")`` lists every process's devices and a mesh over
  them spans the processes.
- mlx: ``mx.distributed.init`` (ring over TCP from ``MLX_HOSTFILE``/``MLX_RANK``, MPI or NCCL, as
  ``mlx.launch`` sets up); the group is ``fnarray.distributed.mlx_group()``.

Arguments left ``None`` come from the environment that ``python -m fnarray.distributed.launch`` sets
(``FNARRAY_COORDINATOR``, ``FNARRAY_NUM_PROCESSES``, ``FNARRAY_PROCESS_ID``, ``FNARRAY_DISTRIBUTED_BACKEND``),
or from the engine's own launcher (SLURM, Open MPI, TPU slices for JAX; ``mlx.launch`` for MLX).
"""

from __future__ import annotations

import importlib
import os
import threading

__all__ = ["initialize", "shutdown", "is_initialized", "engine_backend", "process_index", "process_count",
           "mlx_group"]

_state: dict = {"backend": None, "engine": None, "group": None}
_lock = threading.Lock()
#: The backends with a distributed engine, each a module of this package with ``initialize``, ``process_index``,
#: ``process_count``, ``shutdown`` and ``launch_environments``.
ENGINES = {"jax": "fnarray.distributed._jax", "mlx": "fnarray.distributed._mlx"}


def engine(backend: str):
    """The engine module of ``backend`` (a key of ``ENGINES``)."""
    return importlib.import_module(ENGINES[backend])


def _env_int(name):
    v = os.environ.get(name)
    return None if v in (None, "") else int(v)


def initialize(coordinator_address: str | None = None, num_processes: int | None = None,
               process_id: int | None = None, backend: str | None = None, *, timeout: float = 60.0,
               local_device_ids=None):
    """Start the distributed engine of ``backend`` in this process (``jax.distributed.initialize``).

    Call it once, first thing, in every process (before any array is made on that backend).

    Args:
      coordinator_address: ``host:port`` of process 0's coordinator (jax).
      num_processes: how many processes take part.
      process_id: this process's index, ``0 <= process_id < num_processes``.
      backend: ``"jax"`` or ``"mlx"`` (default: ``FNARRAY_DISTRIBUTED_BACKEND``, else ``mlx`` under
        ``mlx.launch`` (``MLX_HOSTFILE``/``MLX_RANK`` set), else ``jax``).
      timeout: seconds to wait for the other processes before raising (never a hang). On mlx the ring
        backend's own connection retries (~30 s, during which ``mx.distributed.init`` holds the GIL) bound
        the wait instead when they are longer.
      local_device_ids: jax's, passed through.
    Returns:
      ``None``.
    Raises:
      ``ValueError`` for a backend without a distributed engine (naming jax and mlx), a bad process id, a
      second initialization, device counts or ``num_processes`` that differ across processes, or missing
      arguments outside a launcher (``python -m fnarray.distributed.launch``, SLURM, Open MPI); ``TimeoutError``
      when the coordinator or the other processes cannot be reached within ``timeout`` (on jax the processes
      first meet over plain TCP on the coordinator's port, so this stays a Python exception: JAX's own client
      would end the process); ``OSError`` when process 0 cannot listen on the coordinator's port.
    """
    backend = backend or os.environ.get("FNARRAY_DISTRIBUTED_BACKEND") or (
        "mlx" if "MLX_HOSTFILE" in os.environ or "MLX_RANK" in os.environ else "jax")  # mlx.launch sets them
    if backend not in ENGINES:
        raise ValueError(f"fnarray.distributed.initialize(backend={backend!r}): the {backend} backend has no "
                         f"distributed engine; use backend='jax' (jax.distributed: gloo, NCCL, ICI) or "
                         "backend='mlx' (mx.distributed: ring, MPI, NCCL)")
    _check_types(coordinator_address, num_processes, process_id, timeout)
    coordinator_address = coordinator_address or os.environ.get("FNARRAY_COORDINATOR") or None
    num_processes = num_processes if num_processes is not None else _env_int("FNARRAY_NUM_PROCESSES")
    process_id = process_id if process_id is not None else _env_int("FNARRAY_PROCESS_ID")
    if num_processes is not None and num_processes < 1:
        raise ValueError(f"initialize: num_processes must be >= 1, got {num_processes}")
    if process_id is not None and num_processes is not None and not 0 <= process_id < num_processes:
        raise ValueError(f"initialize: process_id {process_id} is outside [0, {num_processes})")
    with _lock:
        if _state["backend"] is not None:
            raise ValueError(f"fnarray.distributed.initialize was already called (backend {_state['backend']}); "
                             "call it once per process")
        eng = engine(backend)
        _state["group"] = eng.initialize(coordinator_address, num_processes, process_id, timeout, local_device_ids)
        _state["backend"], _state["engine"] = backend, eng


def _check_types(coordinator_address, num_processes, process_id, timeout):
    if coordinator_address is not None and not isinstance(coordinator_address, str):
        raise TypeError(f"fnarray.distributed.initialize: coordinator_address must be a 'host:port' string, got "
                        f"{type(coordinator_address).__name__} {coordinator_address!r}")
    for name, v in (("num_processes", num_processes), ("process_id", process_id)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int)):
            raise TypeError(f"fnarray.distributed.initialize: {name} must be an int, got {type(v).__name__} {v!r}")
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise ValueError(f"fnarray.distributed.initialize: timeout must be a positive number of seconds, got "
                         f"{timeout!r}")


def is_initialized() -> bool:
    return _state["backend"] is not None


def engine_backend() -> str | None:
    """The backend whose engine ``initialize`` started (``"jax"`` or ``"mlx"``), or ``None`` before it."""
    return _state["backend"]


def shutdown() -> None:
    """Leave the distributed run (``jax.distributed.shutdown``); a no-op when not initialized."""
    with _lock:
        if _state["engine"] is not None:
            _state["engine"].shutdown()
        _state["backend"], _state["engine"], _state["group"] = None, None, None


def process_index() -> int:
    """This process's index in the run (``jax.process_index``).

    Returns:
      an int in ``[0, process_count())``; 0 without ``initialize``.

    Raises:
      Nothing of its own; the engine's errors (``jax.process_index``) pass through.
    """
    eng = _state["engine"]
    return 0 if eng is None else eng.process_index(_state["group"])


def process_count() -> int:
    """How many processes take part (``jax.process_count``).

    Returns:
      an int >= 1; 1 without ``initialize``.

    Raises:
      Nothing of its own; the engine's errors (``jax.process_index``) pass through.
    """
    eng = _state["engine"]
    return 1 if eng is None else eng.process_count(_state["group"])


def mlx_group():
    """The ``mx.distributed.Group`` of an mlx run; ``RuntimeError`` before ``initialize(backend="mlx")``."""
    if _state["group"] is None:  # only mlx's engine has a group of its own
        raise RuntimeError("fnarray.distributed.mlx_group(): call fnarray.distributed.initialize(backend='mlx') "
                           "first")
    return _state["group"]
