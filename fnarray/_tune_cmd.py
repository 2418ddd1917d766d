"""``python -m fnarray tune module:function [ARG ...]``: tune a function's generated kernels ahead of time.

The function runs under ``jit`` on each kernel device (opencl, webgpu; or each ``--device``) with
``fa.config.autotune = "full"`` (or ``--mode fast``), with the persistent schedules not read, so that every
kernel is scheduled and each of its declared choices (``docs/internals.md``, "Tunable choices") measured or
read from the tuning cache. The choices are kept in ``<compilation_cache_dir>/tuning`` (``--cache-dir`` or
``FNARRAY_CACHE_DIR``), where every later process on the same device and driver finds them. Prints one row per
choice: device, kernel group, signature, the choice, its time and the default's.
"""

from __future__ import annotations

import math
import os
import re
import sys

__all__ = ["tune_command", "parse_spec", "table"]

_DTYPES = {"f32": "float32", "f64": "float64", "f16": "float16", "i32": "int32", "i64": "int64", "u8": "uint8",
           "i8": "int8", "u32": "uint32", "bool": "bool"}
#: the largest random input ``parse_spec`` makes (a typo such as ``float32[100000,100000]`` would otherwise end in
#: NumPy's MemoryError traceback, or swap the machine)
_MAX_INPUT_BYTES = 4 * 2**30


def _usage_error(message: str) -> int:
    print(f"fnarray tune: {message}", file=sys.stderr)
    return 2


def parse_spec(spec: str, seed: int = 0):
    """A NumPy array of random values for ``spec``: ``dtype[d0,d1,...]`` (``float32[1024,1024]``, ``f32[16]``,
    ``i32[]`` for a scalar). Floats are standard normal, integers in [0, 16), bools random.

    Raises:
      ValueError: the spec does not parse or names no NumPy dtype.
    """
    import numpy as np
    m = re.fullmatch(r"\s*([A-Za-z0-9_]+)\s*\[\s*([0-9,\s]*)\]\s*", spec)
    if m is None:
        raise ValueError(f"an input spec is dtype[dims], e.g. float32[1024,1024] or i32[16]; got {spec!r}")
    name = _DTYPES.get(m.group(1), m.group(1))
    try:
        dt = np.dtype(name)
    except TypeError:
        raise ValueError(f"{spec!r}: {m.group(1)!r} is not a dtype") from None
    shape = tuple(int(d) for d in m.group(2).replace(" ", "").split(",") if d)
    if math.prod(shape) * dt.itemsize > _MAX_INPUT_BYTES:
        raise ValueError(f"{spec!r} is {math.prod(shape) * dt.itemsize / 2**30:.1f} GiB; random inputs are "
                         f"limited to {_MAX_INPUT_BYTES // 2**30} GiB: give smaller shapes")
    rng = np.random.default_rng(seed)
    if dt.kind == "f":
        return rng.standard_normal(shape).astype(dt)
    if dt.kind == "b":
        return rng.random(shape) < 0.5
    return rng.integers(0, 16, shape).astype(dt)


def table(decisions) -> str:
    """``(device, decision)`` pairs (``tuning.decisions()``) as a text table, one row per kernel choice."""
    import json
    rows = [("device", "driver", "kernel", "signature", "choice", "ms", "default ms", "speedup", "from")]
    for dev, d in decisions:
        kind, _, digest = d.signature.partition(":")
        chosen = json.dumps(d.choice, sort_keys=True, separators=(",", ":"))
        default = json.dumps(d.default, sort_keys=True, separators=(",", ":")) if d.default is not None else None
        t = d.times.get(chosen)
        t0 = d.times.get(default) if default is not None else None
        ms = f"{t * 1e3:.3f}" if t is not None else "-"
        ms0 = f"{t0 * 1e3:.3f}" if t0 is not None else "-"
        speed = f"{t0 / t:.2f}x" if t and t0 and t != float("inf") and t0 != float("inf") else "-"
        choice = ", ".join(f"{k}={v}" for k, v in sorted(d.choice.items()))
        rows.append((str(dev), d.driver.split()[-1] if d.driver else "-", kind, digest[:10], choice, ms, ms0, speed,
                     d.source))
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows)


def _unwritable(folder: str) -> str | None:
    """Why the tuning choices cannot be written under ``folder`` (created if missing), or ``None``."""
    try:
        os.makedirs(os.path.join(folder, "tuning"), exist_ok=True)
    except OSError as e:
        return f"cannot create {os.path.join(folder, 'tuning')} ({e.strerror or e})"
    if not os.access(os.path.join(folder, "tuning"), os.W_OK):
        return "the folder is not writable"
    return None


def tune_command(args) -> int:
    """``python -m fnarray tune``: 0 when the function ran on every device, 1 when one raised, 2 on a usage error."""
    from fnarray._target import resolve_target
    fn = resolve_target(args.target, _usage_error)
    if isinstance(fn, int):
        return fn
    try:
        inputs = [parse_spec(s, seed=i) for i, s in enumerate(args.args)]
    except ValueError as e:
        return _usage_error(str(e))
    kwargs = {}
    if not inputs:
        ex = getattr(fn, "example_args", None)
        if ex is None:
            return _usage_error(f"{args.target}: give input specs (e.g. float32[1024,1024]) or declare example "
                                "inputs with @fa.check.example(*args)")
        inputs, kwargs = list(ex), dict(getattr(fn, "example_kwargs", {}))
    import fnarray as fa
    from fnarray.lowering.kernels import lowered, tuning
    if args.device:
        try:
            devices = [fa.get_device(name) for name in args.device]
        except (ValueError, TypeError, fa.BackendUnavailable) as e:
            return _usage_error(f"unknown or unusable device ({e}); usable: "
                                f"{', '.join(str(d) for d in fa.devices(all_backends=True))}")
    else:
        devices = [d for d in fa.devices(all_backends=True) if d.impl.capabilities(d).tunable]
        if not devices:
            return _usage_error("no opencl or webgpu device here: nothing to tune")
    if args.cache_dir:
        problem = _unwritable(args.cache_dir)
        if problem:
            return _usage_error(f"--cache-dir {args.cache_dir}: {problem}; the choices could not be kept there. "
                                f"Give a folder you can write (it is created if missing)")
        fa.config.compilation_cache_dir = args.cache_dir
    if fa.config.compilation_cache_dir is None:
        print("fnarray tune: no compilation cache folder (set FNARRAY_CACHE_DIR or --cache-dir): the choices "
              "hold for this process only", file=sys.stderr)
    fa.config.autotune = args.mode
    lowered.READ_SCHEDULE_CACHE[0] = False
    status = 0
    rows = []
    for dev in devices:
        before = len(tuning.decisions())
        placed = [fa.device_put(a, dev) if hasattr(a, "shape") else a for a in inputs]
        try:
            out = fa.jit(fn)(*placed, **kwargs)
            fa.block_until_ready(out)
        except Exception as e:  # noqa: BLE001 (reported per device, the others still tuned)
            print(f"fnarray tune: {args.target} failed on {dev}: {type(e).__name__}: {e}", file=sys.stderr)
            status = 1
        rows.extend((dev, d) for d in tuning.decisions()[before:])
    print(table(rows) if rows else "no tunable kernel choices in this function")
    if fa.config.compilation_cache_dir is not None:
        print(f"kept in {fa.config.compilation_cache_dir}/tuning")
    return status
