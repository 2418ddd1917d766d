"""Run-time configuration (``fnarray.config``), read from the environment at import.

- ``fallback``: ``"warn"`` (default; unsupported equations run on the numpy
  backend with a ``FallbackWarning``), ``"error"`` (raise
  ``UnsupportedOnDevice``) or ``"silent"``. Env: ``FNARRAY_FALLBACK``.
- ``default_device``: a device string, or ``None`` to pick one. Env: ``FNARRAY_DEVICE``.
- ``debug_nans`` / ``debug_infs``: when a jitted call or an eager op produces a NaN (an inf) in a
  floating output, raise ``FloatingPointError`` naming the first primitive that made it and the user's
  source line (a jitted call is re-run op by op to find it). Off by default; when off the call path
  is unchanged. Env: ``FNARRAY_DEBUG_NANS=1``, ``FNARRAY_DEBUG_INFS=1``.
- ``compilation_cache_dir``: a folder for the persistent compilation cache (OpenCL program binaries,
  JAX's XLA executables; ``fnarray.devices.compile_cache``), or ``None`` (default): off.
  Env: ``FNARRAY_CACHE_DIR``.
"""

from __future__ import annotations

import os

__all__ = ["config"]

_FALLBACK_MODES = ("warn", "error", "silent")


def _env_flag(name) -> bool:
    return os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no", "off")


class Config:
    def __init__(self):
        self.generation = 0  # bumped by every change, so caches keyed on the configuration can check it
        self._fallback = "warn"
        self._default_device = os.environ.get("FNARRAY_DEVICE") or None
        self.fallback = os.environ.get("FNARRAY_FALLBACK", "warn")
        self._cache_dir = None
        self.compilation_cache_dir = os.environ.get("FNARRAY_CACHE_DIR") or None
        self._debug_nans = _env_flag("FNARRAY_DEBUG_NANS")
        self._debug_infs = _env_flag("FNARRAY_DEBUG_INFS")
        self.debug_hook = None  # set by fnarray.devices.nan_check: called when debug_nans/debug_infs change

    @property
    def debug_nans(self) -> bool:
        return self._debug_nans

    @debug_nans.setter
    def debug_nans(self, on):
        self._debug_nans = bool(on)
        self._debug_changed()

    @property
    def debug_infs(self) -> bool:
        return self._debug_infs

    @debug_infs.setter
    def debug_infs(self, on):
        self._debug_infs = bool(on)
        self._debug_changed()

    def _debug_changed(self):
        self.generation += 1
        if self.debug_hook is not None:
            self.debug_hook()

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
        return (self._fallback, self._debug_nans, self._debug_infs)

    def __repr__(self):
        return f"Config(fallback={self.fallback!r}, default_device={self.default_device!r})"


config = Config()
