"""``fa.check(f, *args)``: run ``f`` eagerly and under ``jit`` on every device and compare with numpy:0.

The reference is ``f`` run eagerly on numpy:0 (the backend that defines fnarray's semantics).
Every other run is compared leaf by leaf in float64: the largest absolute and relative errors,
whether NaNs and infinities appear in the same places, and whether a fallback to numpy:0 was
used (read from ``fa.profiler`` spans, so it is reported on every call, not only on the first
warning). The report prints as a table and names the first device and output leaf that disagree.

Example inputs for ``python -m fnarray check module:function``: decorate the function with
``@fa.check.example(*args, **kwargs)`` (or give it an ``example_args`` attribute, a tuple of
positional arguments, and optionally ``example_kwargs``, a dict).
"""

from __future__ import annotations

import dataclasses
import time
import warnings

import numpy as np

__all__ = ["check", "CheckReport", "CheckRow", "example"]

# Default relative tolerances by the reference's dtype kind; absolute tolerance is rtol * the leaf's scale.
_RTOL = {"float16": 1e-2, "bfloat16": 5e-2, "float32": 1e-4, "complex64": 1e-4, "float64": 1e-9,
         "complex128": 1e-9}


@dataclasses.dataclass
class CheckRow:
    """One (device, mode) run: errors against numpy:0, fallbacks, times, and the first leaf that disagrees."""

    device: str
    mode: str                      # "eager" or "jit"
    ok: bool = True
    max_abs: float = 0.0
    max_rel: float = 0.0
    nan_ok: bool = True
    inf_ok: bool = True
    fallback: tuple = ()           # primitives (with dtypes) run on numpy:0 instead
    compile_ms: float = float("nan")
    run_ms: float = float("nan")
    bad_leaf: str | None = None    # the first output leaf that disagrees
    error: str | None = None       # the exception the run raised


@dataclasses.dataclass
class CheckReport:
    """The result of ``fa.check``: ``rows`` (one per device and mode), ``ok``, ``first_failure``."""

    function: str
    rows: list
    leaves: list                   # the output leaves' paths

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.rows)

    @property
    def first_failure(self) -> "CheckRow | None":
        return next((r for r in self.rows if not r.ok), None)

    def __str__(self):
        head = (f"{'device':12s} {'mode':5s} {'max abs err':>11s} {'max rel err':>11s} {'NaN':>4s} {'inf':>4s} "
                f"{'compile ms':>10s} {'run ms':>8s}  {'fallback':20s} result")
        lines = [f"fa.check({self.function}): {len(self.leaves)} output leaves, reference numpy:0 eager", head]
        for r in self.rows:
            fb = ", ".join(r.fallback) or "-"
            res = "ok" if r.ok else (f"ERROR {r.error}" if r.error else f"MISMATCH at {r.bad_leaf}")
            lines.append(f"{r.device:12s} {r.mode:5s} {r.max_abs:11.3g} {r.max_rel:11.3g} "
                         f"{'yes' if r.nan_ok else 'NO':>4s} {'yes' if r.inf_ok else 'NO':>4s} "
                         f"{_ms(r.compile_ms):>10s} {_ms(r.run_ms):>8s}  {fb[:20]:20s} {res}")
        bad = self.first_failure
        if bad is None:
            lines.append("every device agrees with numpy:0")
        elif bad.error:
            lines.append(f"first disagreement: {bad.device} ({bad.mode}) raised {bad.error}")
        else:
            lines.append(f"first disagreement: {bad.device} ({bad.mode}), output leaf {bad.bad_leaf} "
                         f"(max abs error {bad.max_abs:.3g}, max rel error {bad.max_rel:.3g})")
        return "\n".join(lines)

    __repr__ = __str__


def _ms(v):
    return "-" if v != v else f"{v:.2f}"


def example(*args, **kwargs):
    """Decorator: the example inputs ``python -m fnarray check module:function`` runs the function on.

    ``@fa.check.example(np.ones(3, np.float32), 2.0)`` sets ``function.example_args`` and
    ``function.example_kwargs``; returns the function unchanged otherwise.
    """
    def deco(fn):
        fn.example_args = args
        fn.example_kwargs = kwargs
        return fn
    return deco


def _to_numpy_leaves(out):
    from fnarray import tree_util
    leaves_with_path = []
    tree_util.tree_map_with_path(lambda p, x: leaves_with_path.append((tree_util.keystr(p) or "output", x)), out)
    return [(p, np.asarray(x)) for p, x in leaves_with_path]


def _place(args, kwargs, device):
    import fnarray as fa
    from fnarray import tree_util

    def put(x):
        if isinstance(x, (bool, int, float, complex)):
            return x
        return fa.device_put(x, device)
    return tree_util.tree_map(put, args), tree_util.tree_map(put, kwargs)


def _compare(row, ref, got, rtol, atol):
    """Fill ``row`` with the errors of ``got`` against ``ref`` (lists of (path, ndarray))."""
    if len(got) != len(ref):
        row.ok, row.error = False, f"{len(got)} output leaves, numpy:0 gives {len(ref)}"
        return
    for (path, r), (_, g) in zip(ref, got, strict=True):
        if r.shape != g.shape or r.dtype != g.dtype:
            row.ok = False
            row.bad_leaf = row.bad_leaf or f"{path} ({g.dtype}{list(g.shape)} vs {r.dtype}{list(r.shape)})"
            continue
        if r.size == 0:
            continue
        if r.dtype == np.bool_ or np.issubdtype(r.dtype, np.integer):
            diff = np.abs(r.astype(np.float64) - g.astype(np.float64))
            m = float(diff.max())
            row.max_abs = max(row.max_abs, m)
            row.max_rel = max(row.max_rel, float((diff / np.maximum(np.abs(r.astype(np.float64)), 1)).max()))
            if m:
                row.ok = False
                row.bad_leaf = row.bad_leaf or path
            continue
        r64 = r.astype(np.complex128 if np.iscomplexobj(r) else np.float64)
        g64 = g.astype(r64.dtype)
        nan_same = np.array_equal(np.isnan(r64), np.isnan(g64))
        rinf, ginf = np.isinf(r64), np.isinf(g64)
        inf_same = np.array_equal(rinf, ginf) and np.array_equal(r64[rinf], g64[ginf])
        finite = np.isfinite(r64) & np.isfinite(g64)
        diff = np.abs(r64 - g64)[finite]
        ref_abs = np.abs(r64)[finite]
        m = float(diff.max()) if diff.size else 0.0
        nz = ref_abs > 0  # the relative error where the reference is not zero
        rel = float((diff[nz] / ref_abs[nz]).max()) if nz.any() else 0.0
        row.max_abs, row.max_rel = max(row.max_abs, m), max(row.max_rel, rel)
        row.nan_ok = row.nan_ok and nan_same
        row.inf_ok = row.inf_ok and inf_same
        tol_r = rtol if rtol is not None else _RTOL.get(r.dtype.name, 1e-4)
        scale = float(ref_abs.max()) if ref_abs.size else 1.0
        tol_a = atol if atol is not None else tol_r * max(scale, 1e-30)
        close = bool(np.all(diff <= tol_a + tol_r * ref_abs))
        if not (close and nan_same and inf_same):
            row.ok = False
            row.bad_leaf = row.bad_leaf or path


def _fallbacks(profile) -> tuple:
    names = []
    for r in profile.records:
        if r.kind == "fallback":
            label = r.name.split(" on numpy:0")[0]
            if label not in names:
                names.append(label)
    return tuple(names)


def _run(fn, args, kwargs, profile=True):
    """``fn(*args, **kwargs)`` with every output leaf read to the host; returns (leaves, seconds, fallbacks).

    With ``profile``, the run is recorded to see its fallbacks (and takes longer: the profiler waits
    for every launch); without, it is timed as it runs."""
    from fnarray import profiler
    from fnarray.core import profile as core
    fallbacks: tuple = ()
    t0 = time.perf_counter()
    if profile and core.recorder is None:
        with profiler.trace() as h:
            out = _to_numpy_leaves(fn(*args, **kwargs))
        fallbacks = _fallbacks(h.profile)
    else:  # inside the user's own trace: no nested recording (fallbacks then unknown)
        out = _to_numpy_leaves(fn(*args, **kwargs))
    return out, time.perf_counter() - t0, fallbacks


def check(f, *args, devices=None, rtol=None, atol=None, static_argnums=(), **kwargs) -> CheckReport:
    """Run ``f`` eagerly and under ``jit`` on every usable device and compare each with numpy:0.

    Args:
      f: a function of arrays (pytrees of them) and scalars.
      *args, **kwargs: its inputs (NumPy arrays, fnarray arrays, scalars, pytrees of them); array
        leaves are placed on each device with ``device_put``.
      devices: the devices to check (``Device`` or strings); default ``fa.devices(all_backends=True)``.
      rtol, atol: tolerances; default by dtype (float32: rtol 1e-4, float16: 1e-2, float64: 1e-9;
        integers and bools exact) with ``atol = rtol * max |reference|`` per leaf.
      static_argnums: passed to ``jit``.

    Returns:
      A ``CheckReport``: prints as a table (device x mode: max abs and relative error, NaN/inf
      agreement, fallback primitives, compile and run time) and names the first device and output
      leaf that disagree; ``.ok``, ``.first_failure`` and ``.rows`` for programs. A device that
      raises is a row with its error, not an exception.

    Raises:
      Exception: whatever ``f`` raises on numpy:0 (the reference must run).
      ValueError: an unknown device name in ``devices``.

    No JAX counterpart (``jax.test_util.check_grads`` checks gradients, not devices).
    """
    import fnarray as fa
    name = getattr(f, "__name__", repr(f))
    ref_dev = fa.get_device("numpy:0")
    rargs, rkw = _place(args, kwargs, ref_dev)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", fa.FallbackWarning)
        ref, _, _ = _run(f, rargs, rkw)
    devs = [fa.get_device(d) for d in devices] if devices is not None else fa.devices(all_backends=True)
    rows = []
    for dev in devs:
        dargs, dkw = _place(args, kwargs, dev)
        for mode in ("eager", "jit"):
            row = CheckRow(str(dev), mode)
            fn = f if mode == "eager" else fa.jit(f, static_argnums=static_argnums)
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", fa.FallbackWarning)
                    got, first, row.fallback = _run(fn, dargs, dkw)
                    _, again, _ = _run(fn, dargs, dkw, profile=False)
                    row.run_ms = again * 1e3
                    if mode == "jit":  # the first call traced, lowered and compiled (under the profiler)
                        row.compile_ms = max(first - again, 0.0) * 1e3
            except Exception as e:  # noqa: BLE001 (a device that fails is a row of the report, not a crash)
                row.ok, row.error = False, f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
                rows.append(row)
                continue
            _compare(row, ref, got, rtol, atol)
            rows.append(row)
    return CheckReport(name, rows, [p for p, _ in ref])


check.example = example
