"""``pl.autotune``: choose a kernel's block sizes by timing them on the device (Triton's ``triton.autotune``).

The choice goes through the kernel autotuner's interface ``choose(device, signature, candidates, measure,
default) -> candidate`` (``fnarray.lowering.kernels.tuning``, being written for fnarray's own kernels). Until
that module exists, ``_choose`` below stands in for it with the same signature: it times each candidate with
``measure``, keeps the fastest per (device, driver, signature) in memory and, when
``fa.config.compilation_cache_dir`` is set, in ``pallas_autotune.json`` there.
"""

from __future__ import annotations

import functools
import inspect
import json
import os
import threading
import time

import numpy as np

__all__ = ["autotune"]

_lock = threading.Lock()
_memory: dict = {}


def _device_key(device):
    return f"{device} {getattr(device, 'description', '')}"


def _cache_file():
    import fnarray as fa
    root = getattr(fa.config, "compilation_cache_dir", None)
    return None if not root else os.path.join(root, "pallas_autotune.json")


def _load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def _choose(device, signature, candidates, measure, default):
    """The stand-in for ``fnarray.lowering.kernels.tuning.choose``: the fastest of ``candidates`` (dicts) by
    ``measure(candidate) -> seconds`` (``None``: only a remembered choice, else ``default``), remembered per
    device/driver and signature, in memory and in the compilation cache folder."""
    key = f"{_device_key(device)} | {signature}"
    path = _cache_file()
    with _lock:
        hit = _memory.get(key)
        if hit is None and path is not None:
            hit = _load(path).get(key)
    if hit is not None:
        return dict(hit)
    if measure is None:
        return dict(default)
    times = []
    for c in candidates:
        try:
            times.append(measure(c))
        except Exception:  # noqa: BLE001 (a candidate the device cannot run is not chosen)
            times.append(float("inf"))
    best = dict(candidates[int(np.argmin(times))]) if np.isfinite(min(times)) else dict(default)
    with _lock:
        _memory[key] = best
        if path is not None:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            table = _load(path)
            table[key] = best
            tmp = path + f".{os.getpid()}.tmp"
            with open(tmp, "w") as f:
                json.dump(table, f, sort_keys=True, indent=1)
            os.replace(tmp, path)
    return best


def _tuner():
    try:
        from fnarray.lowering.kernels import tuning
    except ImportError:
        return _choose
    import fnarray as fa

    def choose(device, signature, candidates, measure, default):
        # pl.autotune asks for timing: every config is timed unless autotune is "off" (then the first config)
        mode = "off" if fa.config.autotune == "off" else "full"
        return tuning.choose(device, signature, candidates, measure, default, mode=mode)
    return choose


def _describe(v):
    if hasattr(v, "shape") and hasattr(v, "dtype"):
        return f"{np.dtype(v.dtype).name}{list(v.shape)}"
    return repr(v)


def _device_of(args):
    import fnarray as fa
    for a in args:
        dev = getattr(a, "device", None)
        if dev is not None and not callable(dev):
            return dev
    return fa.default_device()


def autotune(configs, key=(), *, repeats=3):
    """A decorator choosing, per device and per ``key``, the fastest of ``configs`` for a function that takes
    them as keyword arguments (Triton's ``autotune``; the choice is cached per device and driver).

    Args:
      configs: a list of dicts of keyword arguments (``[{"bm": 16, "bn": 16}, {"bm": 32, "bn": 32}]``).
      key: names of the function's arguments whose shapes and dtypes (arrays) or values (others) select the
        cache entry: a new key is tuned again.
      repeats: timed runs per candidate (the minimum counts), after one warm-up run that compiles it.

    Returns:
      a decorator; the decorated function runs the chosen configuration. Under ``jit`` (traced arguments) it
      uses the choice made for the same key on concrete arrays, else the first config.

    Raises:
      ``ValueError`` for an empty ``configs`` or a ``key`` naming no argument.

    Example::

        >>> @pl.autotune(configs=[{"bm": 16}, {"bm": 32}], key=["x"])
        ... def matmul(x, y, bm=16): ...
    """
    configs = [dict(c) for c in configs]
    if not configs:
        raise ValueError("pl.autotune needs at least one config")

    def deco(fn):
        sig = inspect.signature(fn)
        for k in key:
            if k not in sig.parameters:
                raise ValueError(f"pl.autotune: key {k!r} is not an argument of {fn.__name__}{sig}")

        @functools.wraps(fn)
        def tuned(*args, **kwargs):
            import fnarray as fa
            from fnarray.core.tracing import Tracer
            bound = sig.bind_partial(*args, **kwargs)
            parts = [f"{fn.__module__}.{fn.__qualname__}"] + [f"{k}={_describe(bound.arguments.get(k))}" for k in key]
            signature = " ".join(parts)
            leaves = fa.tree_util.tree_leaves((args, kwargs))
            traced = any(isinstance(a, Tracer) for a in leaves)

            def measure(cfg):
                np.asarray(fn(*args, **kwargs, **cfg))   # compiles it
                best = float("inf")
                for _ in range(repeats):
                    t0 = time.perf_counter()
                    out = fn(*args, **kwargs, **cfg)
                    for leaf in fa.tree_util.tree_leaves(out):
                        np.asarray(leaf)
                    best = min(best, time.perf_counter() - t0)
                return best

            cfg = _tuner()(_device_of(leaves), signature, configs, None if traced else measure, configs[0])
            return fn(*args, **kwargs, **cfg)

        tuned.configs = configs
        return tuned
    return deco
