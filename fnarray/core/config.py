"""Run-time configuration (``fnarray.config``), read from the environment at import.

- ``fallback``: ``"warn"`` (default; unsupported equations run on the numpy
  backend with a ``FallbackWarning``), ``"error"`` (raise
  ``UnsupportedOnDevice``) or ``"silent"``. Env: ``FNARRAY_FALLBACK``.
- ``default_device``: a device string, or ``None`` to pick one. Env: ``FNARRAY_DEVICE``.
- ``compilation_cache_dir``: a folder for the persistent compilation cache (OpenCL program binaries,
  JAX's XLA executables; ``fnarray.devices.compile_cache``), or ``None`` (default): off.
  Env: ``FNARRAY_CACHE_DIR``.
"""

from __future__ import annotations

import os

__all__ = ["config"]

_FALLBACK_MODES = ("warn", "error", "silent")


class Config:
    def __init__(self):
        self.generation = 0  # bumped by every change, so caches keyed on the configuration can check it
        self._fallback = "warn"
        self._default_device = os.environ.get("FNARRAY_DEVICE") or None
        self.fallback = os.environ.get("FNARRAY_FALLBACK", "warn")
        self._cache_dir = None
        self.compilation_cache_dir = os.environ.get("FNARRAY_CACHE_DIR") or None

    @property
    def compilation_cache_dir(self):
        return self._cache_dir

    @compilation_cache_dir.setter
    def compilation_cache_dir(self, path):
        if path is not None and not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"fnarray.config.compilation_cache_dir is a folder path or None, got {type(path).__name__}")
        self._cache_dir = None if path is None else os.path.abspath(os.path.expanduser(os.fspath(path)))

    @property
    def default_device(self):
        return self._default_device

    @default_device.setter
    def default_device(self, device):
        self._default_device = device
        self.generation += 1

    @property
    def fallback(self) -> str:
        return self._fallback

    @fallback.setter
    def fallback(self, mode: str):
        if mode not in _FALLBACK_MODES:
            raise ValueError(f"fnarray.config.fallback must be one of {_FALLBACK_MODES}, got {mode!r}")
        self._fallback = mode
        self.generation += 1

    def lowering_key(self) -> tuple:
        """The part of the configuration that changes lowering (a jit cache key component)."""
        return (self._fallback,)

    def __repr__(self):
        return f"Config(fallback={self.fallback!r}, default_device={self.default_device!r})"


config = Config()
