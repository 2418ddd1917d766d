"""Run-time configuration (``fnarray.config``), read from the environment at import.

- ``fallback``: ``"warn"`` (default; unsupported equations run on the numpy
  backend with a ``FallbackWarning``), ``"error"`` (raise
  ``UnsupportedOnDevice``) or ``"silent"``. Env: ``FNARRAY_FALLBACK``.
- ``default_device``: a device string, or ``None`` to pick one. Env: ``FNARRAY_DEVICE``.
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
