"""``python -m fnarray primitives [NAME] [--write]``: what every primitive has, computed from the code.

The matrix has one row per primitive and one column per rule table (abstract evaluation, JVP, transpose,
batching) and per backend (plus the browser export). A backend's cell comes from its own tables: the
primitive's first parity case (``fnarray.testing.cases``) is made into an equation, and the backend's
``lowers_natively`` and ``supports`` and the decomposition table (``fnarray.core.decompositions``) say whether
it is ``native``, ``decomposed``, ``falls back (reason)`` (to numpy) or ``unsupported (reason)``. Backends are
started lazily; one whose library or driver is missing reads ``backend unavailable (reason)``.

Without arguments it prints a report that fits ``WIDTH`` (120) columns: the unavailable backends once, with
their reasons, then the matrix's status words (``--wide``: every cell with its reason). The report is the list
``SECTIONS`` of functions ``(rows, wide) -> lines``; a new section is one more function there.

``NAME`` prints one primitive: its documented semantics, every rule registered for it (the transformation
tables, each backend's, the ONNX export's: ``fnarray._rule_sites.TABLES``) with the file and line that defines
it for that primitive (a helper's rule at the line that registered it: ``fnarray._rule_sites``), and the same
per-backend status. ``--write`` regenerates ``docs/primitives.md``.
"""

from __future__ import annotations

import functools
import inspect
import os

__all__ = ["matrix_rows", "matrix_markdown", "describe", "fallbacks_text", "report", "main", "BACKENDS", "COLUMNS",
           "SECTIONS"]

BACKENDS = ("numpy", "jax", "mlx", "opencl", "webgpu")
COLUMNS = ("primitive", "kind", "abstract eval", "JVP", "transpose", "batching") + BACKENDS + ("browser",)
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _tables():
    import fnarray  # noqa: F401  (registers every rule)
    from fnarray.transforms import ad_rules
    from fnarray.transforms.ad_tables import partial_eval_rules, primitive_jvps, primitive_transposes
    from fnarray.transforms.batching_tables import primitive_batchers
    return ad_rules, primitive_jvps, primitive_transposes, partial_eval_rules, primitive_batchers


def _case_eqn(prim):
    """An equation of ``prim`` at its first parity case's types, or ``None`` if it has no case."""
    import numpy as np

    from fnarray.core.dtypes import dtype_of_scalar
    from fnarray.core.ir import Eqn, Params, Var
    from fnarray.core.shaped import ShapedArray
    from fnarray.testing.cases import CASES
    cases = [c for c in CASES if c[1] is prim]
    # The first case in the 32-bit dtypes every backend has, else the first case.
    plain = [c for c in cases if all(np.asarray(x).dtype.name in ("float32", "int32", "uint32", "bool")
                                     for x in c[2])]
    for _name, _p, inputs, params in plain[:1] or cases[:1]:
        avals = []
        for x in inputs:
            a = np.asarray(x)
            avals.append(ShapedArray(a.shape, a.dtype) if not np.isscalar(x) or isinstance(x, np.generic)
                         else ShapedArray((), *dtype_of_scalar(x)))
        out = prim.abstract_eval(*avals, **params)
        outs = list(out) if prim.multiple_results else [out]
        return Eqn(prim, tuple(Var(a) for a in avals), Params(params), tuple(Var(a) for a in outs))
    return None


_DEVICES: dict = {}


def _device(name):
    """``(device, None)`` or ``(None, reason)``; the backend is started here, on first use."""
    if name not in _DEVICES:
        from fnarray.core.errors import BackendUnavailable
        from fnarray.devices.backend import get_backend
        try:
            devs = [d for d in get_backend(name).devices() if d.reason is None]
            _DEVICES[name] = (devs[0], None) if devs else (None, f"{name} has no usable device")
        except BackendUnavailable as e:
            _DEVICES[name] = (None, str(e))
    return _DEVICES[name]


def _clean(reason: str, device) -> str:
    """A reason without the machine's device description, so that the matrix reads the same everywhere."""
    reason = reason.replace(f" ({device.description})", "")
    return reason.replace("|", "/").replace("\n", " ")


def _unsupported_kind(prim) -> bool:
    from fnarray.core import primitives as P
    return prim is P.custom_lin


def _probe_eqn(prim):
    """The parity case's equation, or for the custom-derivative calls (which have none) an empty one."""
    from fnarray.core import primitives as P
    from fnarray.core.ir import Eqn, Params
    eqn = _case_eqn(prim)
    if eqn is None and prim in (P.custom_jvp_call, P.custom_vjp_call):
        eqn = Eqn(prim, (), Params(), ())
    return eqn


def _spmd_status(prim, name: str):
    """The collectives and ``shard_map``: what runs them does not depend on a probe equation."""
    from fnarray.core.spmd import shard_map_p
    if prim.kind == "collective":
        if name == "jax":
            return f"native (jax.lax.{prim.name} inside shard_map; under vmap(axis_name=) its batching rule)"
        return "native (under vmap(axis_name=) its batching rule; outside a named axis it raises)"
    if prim is shard_map_p:
        if name == "jax":
            return "native (jax.shard_map)"
        return ("unsupported (no distributed engine: a mesh of one device runs shard_map as a named vmap, "
                "larger meshes need jax or mlx)")
    return None


def backend_status(prim, name: str) -> str:
    """``native``, ``decomposed``, ``falls back (reason)``, ``unsupported (reason)`` or ``backend unavailable``."""
    from fnarray.core.decompositions import decomposition_for
    spmd = _spmd_status(prim, name)
    if spmd is not None:
        return spmd
    if prim.kind == "kernel":
        return "unsupported (never executed alone: it only exists inside a pallas_call kernel body)"
    if _unsupported_kind(prim):
        return "unsupported (never executed: it only exists inside transformations)"
    device, why = _device(name)
    if device is None:
        return f"backend unavailable ({why})"
    from fnarray.core import primitives as P
    from fnarray.devices.host_control import CONTROL_PRIMITIVES
    eqn = _probe_eqn(prim)
    if eqn is None:
        return "unsupported (no parity case to probe it with: add one to fnarray/testing/cases.py)"
    backend = device.impl
    if prim in P.EFFECTS:  # a host callback: called in place, or the partitioner cuts the program there
        if backend.host_callbacks:
            return "native"
        from fnarray.devices.partition import unsupported_reason
        return f"falls back ({_clean(unsupported_reason(eqn, device), device)}; expected: no FallbackWarning)"
    note = ""
    if backend.lowers_natively(eqn, device):
        r = backend.supports(eqn, device)
        status = "native"
        if r is None and prim in CONTROL_PRIMITIVES and backend.capabilities(device).control_flow == "host":
            note = " (driven from the host)"
        elif r is None and prim in (P.custom_jvp_call, P.custom_vjp_call):
            note = " (runs its primal program as a call)"
    else:
        d, no = decomposition_for(eqn)
        if d is not None:
            return "decomposed"
        r = backend.supports(eqn, device) or no
        status = "native"
    if r is None:
        return status + note
    return f"falls back ({_clean(r, device)})"


def browser_status(prim) -> str:
    from fnarray.core import primitives as P
    web = backend_status(prim, "webgpu")
    if web.startswith("backend unavailable") or web.startswith("unsupported"):
        return web
    if prim in P.EFFECTS:
        return "unsupported (a web page has no Python to call: fnarray.export.webgpu raises naming it)"
    if prim is P.while_p:
        return "unsupported (a while loop cannot be unrolled into a web page's fixed launches)"
    if prim in (P.scan, P.call, P.remat):
        return "native (inlined or unrolled by the export)"
    if prim is P.cond:
        return "native (a literal index only: a computed index is unsupported)"
    if web.startswith("falls back"):
        return "unsupported" + web[len("falls back"):] + " (a web page has no numpy fallback)"
    return web


def _rule_cells(prim, tables):
    ad_rules, jvps, transposes, _pe, batchers = tables
    from fnarray.core import primitives as P
    if prim in jvps:
        jvp = "yes"
    elif prim.name in ad_rules.NO_JVP:
        jvp = f"none ({ad_rules.NO_JVP[prim.name]})"
    else:
        jvp = "missing"
    if prim in transposes:
        tr = "yes"
    elif prim in ad_rules.ZERO_TANGENT_PRIMITIVES:
        tr = "n/a (zero tangent)"
    else:
        tr = "n/a (not linear)"
    from fnarray.transforms.batching_tables import collective_batchers
    if prim in batchers or prim in collective_batchers:
        bt = "yes"
    elif prim is P.iota:
        bt = "n/a (no operands)"
    elif prim.kind == "kernel":
        bt = "n/a (inside a kernel body: vmap batches the pallas_call)"
    else:
        bt = "missing"
    return ["yes", jvp, tr, bt]


def matrix_rows():
    """One list of cells per primitive, in ``COLUMNS`` order."""
    from fnarray.core.primitives import PRIMITIVES
    tables = _tables()
    rows = []
    for prim in PRIMITIVES.values():
        cells = [prim.name, prim.kind] + _rule_cells(prim, tables)
        cells += [backend_status(prim, b) for b in BACKENDS]
        cells.append(browser_status(prim))
        rows.append(cells)
    return rows


def matrix_markdown(rows=None) -> str:
    rows = matrix_rows() if rows is None else rows
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def _where(fn) -> str:
    """``path:line`` of the function that implements a rule (through closures' ``__wrapped__``/partials)."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    fn = inspect.unwrap(fn)
    try:
        path = inspect.getsourcefile(fn)
        line = inspect.getsourcelines(fn)[1]
    except (TypeError, OSError):
        return f"{getattr(fn, '__module__', '?')} (no Python source)"
    rel = os.path.relpath(path, _ROOT) if path.startswith(_ROOT) else path
    return f"{rel}:{line}"


def _table_rules(prim):
    """``[(what, rule, table label, table)]`` of the rule tables (``_rule_sites.TABLES``) that have ``prim``; a
    backend whose library is missing gives ``(what, "backend unavailable (...)", None, None)``."""
    from fnarray._rule_sites import TABLES, table as rule_table
    out = []
    for what, mod, attr, filled_by in TABLES:
        if mod.startswith(("fnarray.lowering.", "fnarray.export.")):
            what = f"{what} ({mod.removeprefix('fnarray.lowering.').removeprefix('fnarray.')}.{attr})"
        try:
            table = rule_table(mod, attr, filled_by)
        except ModuleNotFoundError as e:
            if (e.name or "").startswith("fnarray"):
                raise  # a table moved: TABLES names where it is read
            out.append((what, f"backend unavailable ({type(e).__name__}: {e})", None, None))
            continue
        except Exception as e:  # noqa: BLE001 (an optional library is missing or cannot start)
            out.append((what, f"backend unavailable ({type(e).__name__}: {e})", None, None))
            continue
        if attr == "PRIMITIVES":
            table = {p: p.abstract_eval for p in table.values()}
        elif attr == "DECOMPOSITIONS":
            table = {k: d.fn for k, d in table.items()}
        if prim in table:
            out.append((what, table[prim], f"{mod}.{attr}", table))
        elif what.startswith("ONNX"):
            out.append((what, _onnx_missing(prim), None, None))
    return out


def _onnx_missing(prim) -> str:
    from fnarray.core.decompositions import DECOMPOSITIONS
    from fnarray.export._onnx import UNSUPPORTED
    if prim in UNSUPPORTED:
        return f"unsupported ({UNSUPPORTED[prim]})"
    if prim in DECOMPOSITIONS:
        return "decomposed before export (core/decompositions.py)"
    return "none (export raises naming it)"


def _rule_where(fn, label, table, prim) -> list:
    """The lines ``name  path:line`` of a rule: its own definition, or for a rule made by a helper (``is_generic``)
    the line that registered it for ``prim`` (``_rule_sites``), with the helper named. A rule a family hook gave
    every member is shown at the primitive's definition (which put it in the family), the hook on a second line;
    the kernel element rule of a primitive that is one math function at its kernel fact (``kernels/facts.py``)."""
    from fnarray._rule_sites import is_generic, sites
    name = getattr(inspect.unwrap(fn) if not isinstance(fn, functools.partial) else fn.func, "__name__", "?")
    if table is None or not is_generic(fn, table):
        return [f"{name}  {_where(fn)}"]
    site = sites().get(label, {}).get(prim.name)
    if label == "fnarray.lowering.kernels.rules.ELEMENTWISE":
        from fnarray.lowering.kernels import facts
        func = facts.funcs().get(prim)
        if func is not None:
            name = f"math function {func} (kernel fact)"
            site = sites().get("fnarray.lowering.kernels.facts.FACTS", {}).get(prim.name, site)
    if site is None:
        return [f"{name}  {_where(fn)}"]
    if site.startswith("hook "):
        defined = sites().get("fnarray.core.primitives.PRIMITIVES", {}).get(prim.name)
        if defined is not None:
            return [f"{name}, from its family ({prim.kind})  {defined}",
                    f"{'':<62}   via on_family  {site.removeprefix('hook ')}"]
        site = site.removeprefix("hook ")
    return [f"{name}, registered  {site}"]


def _parts(fn, depth=0):
    """The per-operand functions a family helper closes over (``defjvp``'s ``jvp_fns``...), if any; through a
    closure that a helper made (``_unary``'s ``jvp``), the functions it closes over: the ones written for the
    primitive, not the helper's body."""
    try:
        nonlocals = inspect.getclosurevars(fn).nonlocals
    except (TypeError, ValueError):
        return []
    parts = []
    for v in nonlocals.values():
        for f in (v if isinstance(v, tuple) else (v,)):
            if not (inspect.isfunction(f) and f is not fn and f.__module__.startswith("fnarray")):
                continue
            if f.__closure__ and "<locals>" in f.__qualname__ and depth < 3:
                parts.extend(_parts(f, depth + 1))
            else:
                parts.append(f)
    return parts


def rule_lines(prim) -> list:
    """``describe``'s lines for every rule registered for ``prim``: the table, the rule and where it is defined
    for ``prim`` (``path:line``), a helper's parts and a family hook on lines of their own (``via``)."""
    _tables()
    lines = []
    for what, fn, label, table in _table_rules(prim):
        if isinstance(fn, str):
            lines.append(f"  {what:<62} {fn}")
            continue
        first, *more = _rule_where(fn, label, table, prim)
        lines.append(f"  {what:<62} {first}")
        lines.extend(f"  {m}" for m in more)
        for part in _parts(fn) if what == "JVP" else ():
            if not first.endswith(_where(part)):   # a lambda on the registration line: shown already
                lines.append(f"  {'':<62}   via {part.__name__}  {_where(part)}")
    return lines


def describe(name: str) -> str:
    """Everything registered for the primitive called ``name``, as text."""
    from fnarray.core.primitives import PRIMITIVES
    prim = PRIMITIVES.get(name)
    if prim is None:
        raise SystemExit(f"no primitive {name!r}; known: {', '.join(sorted(PRIMITIVES))}")
    _tables()
    lines = [f"{prim.name}  (family: {prim.kind}{', multiple results' if prim.multiple_results else ''})", ""]
    lines.append("semantics: " + (prim.doc or "(no documented semantics beyond the shape/dtype rule)"))
    lines += ["", "rules:"] + rule_lines(prim)
    from fnarray.testing.cases import CASES
    names = [c[0] for c in CASES if c[1] is prim]
    lines.append(f"  {'parity cases (testing/cases.py)':<62} {', '.join(names) if names else '(none)'}")
    lines += ["", "backends:"]
    for b in BACKENDS:
        lines.append(f"  {b:<8} {backend_status(prim, b)}")
    lines.append(f"  {'browser':<8} {browser_status(prim)}")
    return "\n".join(lines) + "\n"


def fallbacks_text(width: int = 120) -> str:
    """Each backend's table of the parity cases it is expected to run on numpy:0, with the reason
    (``Backend.expected_fallbacks``; ``fnarray.testing.fallbacks``), one line per entry within ``width``."""
    from fnarray.testing.fallbacks import fallback_rows
    backends, lines = [], []
    for name in BACKENDS:
        dev, why = _device(name)
        if dev is None:
            lines.append(f"{name:<8} -  backend unavailable ({why})"[:width])
        else:
            backends.append(dev.impl)
    lines = ["expected fallbacks to numpy:0 (beyond dtypes a device lacks; every other parity case runs with "
             "fallback='error'):"[:width]] + lines
    for b, prim, dt, reason in fallback_rows(backends):
        lines.append(f"{b:<8} {prim:<22} {dt:<10} {reason}"[:width])
    lines.append("lowered through their decompositions, not natively (expected_decompositions):")
    for b in backends:
        lines.append(f"{b.name:<8} {', '.join(sorted(b.expected_decompositions)) or 'none'}"[:width])
    return "\n".join(lines) + "\n"


def primitives_md(rows=None) -> str:
    """docs/primitives.md's text: the matrix (``rows`` from ``matrix_rows()``, computed when None) and one
    primitive's description."""
    return ("# Primitives: rules and backend support\n\n"
            "Generated by `python -m fnarray primitives --write` from the code (do not edit by hand; "
            "`tests/test_primitives_cmd.py` fails when it is out of date). A backend's cell is computed for "
            "the primitive's first parity case in `fnarray/testing/cases.py` (mostly float32): `native`, "
            "`decomposed` (expanded into other primitives before lowering, `fnarray/core/decompositions.py`), "
            "`falls back (reason)` to the numpy backend, or `unsupported (reason)`.\n\n"
            + matrix_markdown(rows) +
            "\n## One primitive: `python -m fnarray primitives dot_general`\n\n```\n"
            + describe("dot_general") + "```\n")


# ------------------------------------------------------------------------------ the terminal report

# The compact matrix's cells: the status word before its reason (``python -m fnarray primitives NAME`` and
# ``--wide`` give the reasons).
_SHORT = {"native": "native", "decomposed": "decomp", "falls back": "fallback", "unsupported": "no",
          "backend unavailable": "-", "yes": "yes", "none": "none", "n/a": "n/a", "missing": "MISSING"}
_SHORT_HEADERS = {"abstract eval": "eval", "transpose": "T", "batching": "vmap"}
WIDTH = 120  # the compact report's widest line


def _short(cell: str) -> str:
    for prefix in sorted(_SHORT, key=len, reverse=True):  # "backend unavailable" before "native"...
        if cell == prefix or cell.startswith(prefix + " "):
            return _SHORT[prefix]
    return cell.split(" (")[0]


def unavailable_backends(rows) -> dict:
    """``{backend: reason}`` for the backends whose every cell reads ``backend unavailable (reason)``."""
    out = {}
    for i, col in enumerate(COLUMNS):
        if col in BACKENDS:
            cells = [r[i] for r in rows if r[i].startswith("backend unavailable")]
            if cells:
                out[col] = cells[0][len("backend unavailable ("):-1]
    return out


def _columns_text(header, rows) -> list:
    widths = [max(len(c) for c in col) for col in zip(header, *rows, strict=True)]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in [header] + rows]


def unavailable_section(rows, wide=False) -> list:
    """One line per unavailable backend with its reason (said once, not in every row)."""
    gone = unavailable_backends(rows)
    if not gone:
        return []
    lines = [f"{len(gone)} backend(s) unavailable here (their columns read '-'; `python -m fnarray doctor` says more):"]
    for name, why in gone.items():
        text = f"  {name}: {why}"
        lines.append(text if wide or len(text) <= WIDTH else text[:WIDTH - 3] + "...")
    return lines


def matrix_section(rows, wide=False) -> list:
    """The matrix: every cell in full with ``wide``, else its status word (``WIDTH`` columns at most)."""
    if wide:
        return _columns_text(list(COLUMNS), [list(r) for r in rows])
    header = [_SHORT_HEADERS.get(c, c) for c in COLUMNS]
    lines = _columns_text(header, [[r[0], r[1]] + [_short(c) for c in r[2:]] for r in rows])
    legend = ("cells: native, decomp (expanded into other primitives), fallback (runs on numpy:0), no (unsupported), "
              "- (backend unavailable); T = transpose. Reasons: `python -m fnarray primitives NAME` or --wide.")
    return lines + [""] + _wrap(legend)


def _wrap(text: str) -> list:
    import textwrap
    return textwrap.wrap(text, WIDTH)


# The report's sections, in order: each takes (rows, wide) and returns its lines ([] to say nothing).
def fallbacks_section(rows, wide) -> list:
    """Each backend's expected fallbacks, with reasons (``fallbacks_text``)."""
    return fallbacks_text(WIDTH).splitlines()


SECTIONS = [unavailable_section, matrix_section, fallbacks_section]


def report(rows=None, wide=False) -> str:
    """The terminal report of ``python -m fnarray primitives``: the sections of ``SECTIONS``, a blank line apart."""
    rows = matrix_rows() if rows is None else rows
    parts = [lines for lines in (section(rows, wide) for section in SECTIONS) if lines]
    return "\n\n".join("\n".join(lines) for lines in parts) + "\n"


def main(argv) -> int:
    import argparse
    ap = argparse.ArgumentParser(prog="fnarray primitives",
                                 description="every primitive's rules and per-backend status, from the code")
    ap.add_argument("name", nargs="?", help="one primitive: its rules with file and line, semantics, status")
    ap.add_argument("--write", action="store_true", help="regenerate docs/primitives.md")
    ap.add_argument("--wide", action="store_true",
                    help=f"every cell with its reason (default: status words, at most {WIDTH} columns)")
    ap.add_argument("--fallbacks", action="store_true", help="each backend's expected fallbacks, with reasons")
    args = ap.parse_args(argv)
    if args.fallbacks:
        print(fallbacks_text(), end="")
        return 0
    if args.write or os.environ.get("FNARRAY_REGEN_DOCS"):
        path = os.path.join(_ROOT, "docs", "primitives.md")
        with open(path, "w") as f:
            f.write(primitives_md())
        print(f"wrote {path}")
        return 0
    if args.name:
        print(describe(args.name), end="")
        return 0
    print(report(wide=args.wide), end="")
    return 0
