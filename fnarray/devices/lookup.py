"""Which devices exist and which one is the default: ``devices``, ``default_device``, ``parse_device``.

Read by the placement rules (``devices.placement``, which re-exports these names) and by the mesh types
(``devices.mesh``), so that neither needs the other.
"""

from __future__ import annotations

import contextvars
import difflib
import functools
import importlib.util
import os
import re
import platform as _platform
import sys
import threading

from fnarray.core.config import config
from fnarray.core.errors import BackendUnavailable
from fnarray.devices.backend import Device, backend_names, get_backend

__all__ = ["devices", "device_count", "local_device_count", "default_device", "parse_device", "DefaultDeviceScope",
           "default_backend", "local_devices"]


def devices(backend: str | None = None, *, all_backends: bool = False, all: bool = False) -> list[Device]:  # noqa: A002
    """The devices of one backend (``jax.devices``), or of every backend.

    Args:
      backend: a backend name (``"jax"``, ``"opencl"``...): its devices. ``None``: the devices of the default
        device's backend (``fa.default_device().backend``), as ``jax.devices()`` lists its default backend's, so
        ``Mesh(np.array(fa.devices()[:2]), ("x",))`` holds devices of one backend.
      all_backends: every usable backend's devices instead, in backend order (numpy first).
      all: every backend's devices, and a ``Device`` per unusable backend whose ``reason`` says why it cannot be
        used and how to fix it (implies ``all_backends`` when no ``backend`` is named).

    Returns:
      A list of ``Device``; backends whose library or driver is missing are skipped unless ``all``.

    Raises:
      ValueError: ``backend`` is not a registered backend name (a registered backend that cannot start is
        skipped, not raised).
    """
    if backend is None and not (all_backends or all):
        backend = default_device().backend
    out = []
    for name in ([backend] if backend else backend_names()):
        try:
            out.extend(get_backend(name).devices())
        except BackendUnavailable as e:
            if all:
                out.append(Device(name, 0, "unavailable", reason=str(e)))
    return out


def local_devices(process_index: int | None = None, backend: str | None = None,
                  host_id: int | None = None) -> list[Device]:
    """The devices of this process (``jax.local_devices``): ``devices(backend)``, as fnarray runs one process
    per program.

    Args:
      process_index: None or 0 (this process); host_id: its older name in JAX. backend: a backend name, or
        None for the default device's.
    Returns:
      a list of ``Device``.
    Raises:
      ``ValueError`` for another ``process_index``; as ``devices`` for an unknown backend.
    """
    process_index = host_id if process_index is None else process_index
    if process_index not in (None, 0):
        raise ValueError(f"local_devices: fnarray runs a single process (index 0), got process_index="
                         f"{process_index!r}; pass None or 0")
    return devices(backend)


def default_backend() -> str:
    """The platform of the default device (``jax.default_backend``): ``"cpu"``, ``"gpu"``, ``"tpu"``...

    JAX names its backends by platform, so programs test ``default_backend() == "gpu"``; fnarray's backend
    name (``"numpy"``, ``"jax"``...) is ``default_device().backend``.

    Returns:
      the platform string of ``default_device()``.
    Raises:
      as ``default_device`` (an unusable configured device).
    """
    return default_device().platform


def device_count(backend: str | None = None) -> int:
    """How many devices a backend has (``jax.device_count``).

    Args:
      backend: a backend name; ``None``: the default device's backend, as ``jax.device_count()`` counts its
        default backend's (1 on numpy:0; N on jax:0 with ``XLA_FLAGS=--xla_force_host_platform_device_count=N``).

    Returns:
      ``len(devices(backend))``.

    Raises:
      ValueError: ``backend`` is not a registered backend name.
    """
    return len(devices(backend))


def local_device_count(backend: str | None = None) -> int:
    """How many devices of a backend this process has (``jax.local_device_count``).

    Args:
      backend: as ``device_count``'s.

    Returns:
      ``device_count(backend)``: the devices this process lists (the same in a single-process run; a run of
      several processes is not told apart yet).

    Raises:
      ValueError: ``backend`` is not a registered backend name.
    """
    return device_count(backend)


_default: list[Device] = []


def _accelerator_default() -> Device | None:
    """An accelerator to prefer over numpy, probing only libraries that are installed."""
    if sys.platform == "darwin" and _platform.machine() == "arm64" and importlib.util.find_spec("mlx"):
        try:
            for d in get_backend("mlx").devices():
                if d.platform == "gpu":
                    return d
        except BackendUnavailable:
            pass
    has_jax_accel = any(importlib.util.find_spec(m) for m in (
        "jax_cuda12_plugin", "jax_cuda13_plugin", "jax_rocm_plugin", "libtpu"))
    if _forced_host_devices() > 1 and importlib.util.find_spec("jax"):
        # XLA_FLAGS asks for several XLA host devices: the program means JAX's devices (a JAX program's mesh over
        # jax.devices() ports unchanged), so jax:0 is the default, as jax.devices()[0] is JAX's.
        try:
            return get_backend("jax").devices()[0]
        except BackendUnavailable:
            pass
    if has_jax_accel and importlib.util.find_spec("jax"):
        try:
            for d in get_backend("jax").devices():
                if d.platform in ("gpu", "tpu", "cuda", "rocm"):
                    return d
        except BackendUnavailable:
            pass
    return None


def _forced_host_devices() -> int:
    """N of ``--xla_force_host_platform_device_count=N`` in ``XLA_FLAGS`` (0 when absent)."""
    m = re.search(r"--xla_force_host_platform_device_count=(\d+)", os.environ.get("XLA_FLAGS", ""))
    return int(m.group(1)) if m else 0


#: the devices of the ``with default_device(d):`` blocks active in this thread, innermost last. A context variable
#: is per thread (a new thread starts with none: the global setting applies there, as JAX's thread-local
#: configuration) and per asyncio task, and cheaper to read than a ``threading.local``.
_SCOPES: contextvars.ContextVar = contextvars.ContextVar("fnarray_default_device", default=())
_NOT_GIVEN = object()


class DefaultDeviceScope:
    """What ``default_device(d)`` returns: a context manager (and function decorator) making ``d`` the default
    device of this thread inside it, as the object ``jax.default_device(d)`` returns (JAX's
    ``StateContextManager`` of ``jax_default_device``, jax/_src/config.py). Entering returns the device (``None``
    for ``default_device(None)``); leaving, by an exception too, restores what was the default before."""

    __slots__ = ("device",)

    def __init__(self, device):
        self.device = None if device is None else parse_device(device)

    def __enter__(self):
        with _open_lock:  # while any thread is inside a block, DEFAULT_NOW says nothing (current_default)
            _open[0] += 1
            DEFAULT_NOW[0] = None
        _SCOPES.set(_SCOPES.get() + (self.device,))
        return self.device

    def __exit__(self, *exc):
        _SCOPES.set(_SCOPES.get()[:-1])
        with _open_lock:
            _open[0] -= 1
        return False

    def __call__(self, fun):
        """``@fa.default_device(d)``: ``fun`` runs with ``d`` as the default device."""
        @functools.wraps(fun)
        def inside(*args, **kwargs):
            with self:
                return fun(*args, **kwargs)
        return inside

    def __repr__(self):
        return f"default_device({self.device!r})"


def default_device(device=_NOT_GIVEN):
    """The device for arrays and calls that name none (as ``jax.devices()[0]``); with an argument, a context
    manager making ``device`` that default inside it (``with jax.default_device(d):``).

    Without an argument: the device of the innermost ``with fa.default_device(d):`` active in this thread; else
    ``fnarray.config.default_device`` (env ``FNARRAY_DEVICE``; ``config.update("jax_default_device", d)``) if set;
    else an accelerator (MLX on Metal, JAX on CUDA/ROCm/TPU) if one is found, or ``jax:0`` when ``XLA_FLAGS``
    forces several XLA host devices (``--xla_force_host_platform_device_count=N``, N > 1); else ``numpy:0``.
    ``fnarray.config.platforms`` (JAX's ``jax_platforms``/``jax_platform_name``), when set, keeps that choice
    only if it runs on one of the platforms named; else the first device of the first platform named, in
    order, that an installed backend has (``"cpu"``: numpy:0).

    With an argument (JAX's ``jax.default_device``, the ``jax_default_device`` option's context manager,
    jax/_src/config.py ``State.__call__``): ``with fa.default_device(d):`` makes ``d`` the default device in
    this thread until the block ends (by an exception too), then restores the one before; blocks nest, other
    threads are not affected, and ``@fa.default_device(d)`` decorates a function. ``d`` is a ``Device`` or a
    string ``get_device`` accepts (``"opencl:0"``, ``"numpy"``, ``"jax:gpu"``); ``None`` means fnarray's own
    choice (the global ``config.default_device`` ignored inside, as JAX's ``with jax.default_device(None):``).
    Calling it without ``with`` changes nothing, as in JAX; set the default for the whole process, every thread,
    with ``fa.config.update("jax_default_device", d)``. Arrays already made stay where they are: the scope
    decides where creation functions, ``device_put(x)``, eager operations and ``jit`` calls on uncommitted
    inputs (made before the block too: moved to ``d`` for the operation) and ``jit`` calls without array
    arguments run.

    Args:
      device: optional; a ``Device``, a device string (``"opencl:0"``) or ``None`` (fnarray's own choice) to make
        the default inside a ``with`` block; left out, the current default device is returned.

    Returns:
      A ``Device`` without an argument; a ``DefaultDeviceScope`` with one. The probe of fnarray's own choice is
      cached for the process.

    Raises:
      ValueError, TypeError, BackendUnavailable: for a ``device`` (or a configured ``default_device``) that
        ``get_device`` rejects (see there), when ``default_device(device)`` is called.
      RuntimeError: ``config.platforms`` names only platforms that no installed backend has (JAX raises
        ``RuntimeError`` for a platform it cannot initialise).
    """
    if device is not _NOT_GIVEN:
        return DefaultDeviceScope(device)
    stack = _SCOPES.get()
    if stack:
        d = stack[-1]
        if d is not None:
            return d
    elif config.default_device is not None:
        try:
            return parse_device(config.default_device)
        except ValueError as e:
            raise ValueError(f"fnarray.config.default_device (or the environment variable FNARRAY_DEVICE) is "
                             f"{config.default_device!r}, which names no device: {e}. Set it to one of the "
                             "available devices, or unset it to let fnarray choose") from None
    if not _default:
        d = _accelerator_default() or get_backend("numpy").devices()[0]
        if not _default:  # another thread may have chosen meanwhile (the same device): keep one
            _default.append(d)
    if config.platforms is not None:
        return _on_platforms(_default[0], config.platforms)
    return _default[0]


#: ``[device]``: the default device, kept while no thread is inside a ``with default_device(d):`` block and
#: ``config.default_device``/``config.platforms`` have not changed since it was found (``current_default``); else
#: ``[None]``. The eager and ``jit`` hot paths compare their uncommitted arrays' device with ``DEFAULT_NOW[0]``
#: (~15 ns: JAX runs an operation on uncommitted arrays on the default device, wherever they lie) and call
#: ``current_default`` only where it is not that device.
DEFAULT_NOW: list = [None]
_UNSCOPED: list = [None]   # default_device() outside every block (this thread's or not), as DEFAULT_NOW's source
_open = [0]                # ``with default_device(d):`` blocks open, all threads together
_open_lock = threading.Lock()


def _default_changed():
    with _open_lock:
        DEFAULT_NOW[0] = _UNSCOPED[0] = None


config.device_hook = _default_changed


def current_default() -> Device:
    """``default_device()`` without an argument, the global choice kept (``config.default_device`` parsed once,
    not at every call); it fills ``DEFAULT_NOW`` where no block is open in any thread."""
    stack = _SCOPES.get()
    if stack:
        d = stack[-1]
        return d if d is not None else default_device()
    d = _UNSCOPED[0]
    if d is None:
        gen = config._generation
        d = default_device()
        with _open_lock:
            if config._generation == gen:  # (not when the setting changed meanwhile: found again next time)
                _UNSCOPED[0] = d
    if DEFAULT_NOW[0] is not d:
        with _open_lock:
            if _open[0] == 0 and _UNSCOPED[0] is d:
                DEFAULT_NOW[0] = d
    return d


_ON_PLATFORMS: dict = {}   # (chosen default, platforms) -> the default device on those platforms
#: what a JAX platform name means in terms of our devices' ``platform``
_PLATFORM_ALIASES = {"gpu": ("gpu", "cuda", "rocm", "metal"), "cuda": ("cuda", "gpu"), "rocm": ("rocm", "gpu"),
                     "metal": ("metal", "gpu"), "cpu": ("cpu",), "tpu": ("tpu",)}


def _on_platforms(chosen: Device, platforms: tuple) -> Device:
    key = (chosen, platforms)
    d = _ON_PLATFORMS.get(key)
    if d is None:
        d = _ON_PLATFORMS[key] = _pick_on_platforms(chosen, platforms)
    return d


def _pick_on_platforms(chosen: Device, platforms: tuple) -> Device:
    wanted = [_PLATFORM_ALIASES[p] for p in platforms]
    if any(chosen.platform in w for w in wanted):
        return chosen
    for w in wanted:
        if w == ("cpu",):
            return get_backend("numpy").devices()[0]
        for name in ("jax", "mlx"):
            try:
                for d in get_backend(name).devices():
                    if d.platform in w:
                        return d
            except BackendUnavailable:
                pass
    raise RuntimeError(f"fnarray.config.platforms is {','.join(platforms)!r} (jax_platforms / jax_platform_name), "
                       "but no installed backend has a device on it; set it to 'cpu' or None")


def parse_device(spec) -> Device:
    """A ``Device`` from a ``Device`` or a string ``backend``, ``backend:id`` or ``backend:platform``.

    Exported as ``fnarray.get_device`` (no JAX counterpart; JAX takes ``Device`` objects only).

    Args:
      spec: a ``Device`` (returned as is), ``None`` (the default device), or a
        string such as ``"numpy"``, ``"opencl:0"``, ``"jax:gpu"``.

    Returns:
      The ``Device``; a bare backend name gives its first device.

    Raises:
      TypeError: ``spec`` is neither a ``Device``, ``None`` nor a string.
      ValueError: an unknown backend name, or no device with that id or platform
        (the message lists the available devices).
      BackendUnavailable: a known backend that cannot start (the message has the fix).
    """
    if isinstance(spec, Device):
        return spec
    if spec is None:
        return default_device()
    if not isinstance(spec, str):
        raise TypeError(f"a device is a Device or a string like 'numpy:0', got {type(spec).__name__}")
    name, _, rest = spec.strip().partition(":")
    if name not in backend_names():
        avail = [str(d) for d in devices(all_backends=True)]
        raise ValueError(f"unknown device {spec!r}{_nearest(spec.strip(), avail + list(backend_names()))}; "
                         f"available devices: {', '.join(avail)} (backends: {', '.join(backend_names())})")
    devs = get_backend(name).devices()
    if not rest:  # this process's first device (the others' in a run of several mlx processes are names only)
        return next((d for d in devs if not getattr(d, "remote", False)), devs[0])
    for d in sorted(devs, key=lambda d: getattr(d, "remote", False)):
        if (rest.isdigit() and d.id == int(rest)) or d.platform == rest:
            return d
    avail = [str(d) for d in devices(all_backends=True)]
    raise ValueError(f"no device {spec!r}{_nearest(spec.strip(), avail)}; {name} has "
                     f"{', '.join(f'{d} ({d.platform})' for d in devs)}. All available devices: {', '.join(avail)}")


def _nearest(given, names):
    near = difflib.get_close_matches(given, names, n=1, cutoff=0.5)
    return f" (did you mean {near[0]!r}?)" if near else ""
