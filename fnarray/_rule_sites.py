"""Where each rule was registered: the file and line that gave a primitive its entry in a rule table.

A rule made by a helper (``_binary(add_of)``, ``defjvp(P.sin, ...)``, ``_mx_op("exp")``, a ``@rule(P.x)``
decorator) is a closure whose own source is the helper's; the line that defines it *for that primitive* is the
registration. ``python -m fnarray primitives NAME`` reports that line. It is found by watching the tables fill
while fnarray is imported, so it holds wherever a rule lives: no table, helper or rule module is changed for it.

``sites()`` runs, once per process, a fresh interpreter that imports fnarray under ``sys.settrace``: when a
module-level statement of an ``fnarray`` module has just created a watched table (``TABLES``: a plain ``dict``
under a watched name), the tracer replaces it in that module's namespace with a ``_Recording`` dict, before the
next statement runs (so before any other module can hold the plain one). A ``_Recording`` notes, for each key
set, the stack of ``fnarray`` frames that set it (innermost first). The registration line is the innermost of
those lines that set only this key of the table (a helper's ``RULES[prim] = fn`` sets many, its caller's
``_binary(add_of)`` or ``@rule(P.x)`` one); where every line set several (a loop over a tuple of primitives),
the outermost, narrowed to the tuple element that names the primitive when the loop runs over a literal.
"""

from __future__ import annotations

import ast
import functools
import inspect
import json
import os
import subprocess
import sys

__all__ = ["TABLES", "table", "sites", "is_generic"]

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: The rule tables, in the order ``python -m fnarray primitives NAME`` lists them: ``(what, module, attribute,
#: filled by)``: the table is ``module.attribute``, complete once the module ``filled by`` is imported (a backend
#: whose families register themselves; ``None``: the table's own module). A backend's or the export's table is
#: shown with its module and attribute after ``what``. In the recording interpreter a table is recognised
#: where it is created, by its attribute name, in whichever ``fnarray`` module creates it.
TABLES = (
    ("abstract eval (core/primitives.py)", "fnarray.core.primitives", "PRIMITIVES", None),  # keyed by name:
    # its registration is the primitive's definition (``add = binary("add")``), its rule the shape/dtype rule
    ("JVP", "fnarray.transforms.ad_tables", "primitive_jvps", None),
    ("transpose", "fnarray.transforms.ad_tables", "primitive_transposes", None),
    ("partial evaluation", "fnarray.transforms.ad_tables", "partial_eval_rules", None),
    ("batching", "fnarray.transforms.batching_tables", "primitive_batchers", None),
    ("decomposition (core/decompositions.py)", "fnarray.core.decompositions", "DECOMPOSITIONS", None),
    ("numpy reference", "fnarray.lowering.numpy.common", "IMPLS", "fnarray.lowering.numpy.backend"),
    ("jax lowering", "fnarray.lowering.jax.common", "RULES", "fnarray.lowering.jax.backend"),
    ("mlx lowering", "fnarray.lowering.mlx.common", "RULES", "fnarray.lowering.mlx.backend"),
    ("kernel element rule, opencl and webgpu", "fnarray.lowering.kernels.rules", "ELEMENTWISE", None),
    ("kernel index rule, opencl and webgpu", "fnarray.lowering.kernels.emitter", "STRUCTURAL", None),
    ("kernel group, opencl and webgpu", "fnarray.lowering.kernels.schedule", "GROUPS", None),
    ("ONNX export", "fnarray.export._onnx", "RULES", "fnarray.export"),
)


#: Tables watched besides ``TABLES``, with the write that counts: the kernel facts (the element rule of a
#: primitive that is one math function is made by a loop over ``facts.funcs()``; the fact's line names it).
WATCHED = (("fnarray.lowering.kernels.facts", "FACTS", "_made_a_function"),)

_FAMILIES = os.path.join(_ROOT, "fnarray", "core", "families.py")


def table(mod, attr, filled_by=None):
    """The finished table ``mod.attr`` (importing ``filled_by`` first); ``ImportError`` where an optional
    backend's library is missing."""
    import importlib
    if filled_by is not None:
        importlib.import_module(filled_by)
    return getattr(importlib.import_module(mod), attr)


def is_generic(fn, table) -> bool:
    """Whether ``fn``'s own source is a helper's rather than this primitive's: a closure made by a factory
    (``<locals>`` in its name), or a function that the table holds for several primitives."""
    f = _unwrapped(fn)
    if not inspect.isfunction(f):
        return False
    if f.__closure__ and "<locals>" in f.__qualname__:
        return True
    code = f.__code__
    return sum(getattr(_unwrapped(v), "__code__", None) is code for v in table.values()) > 1


def _unwrapped(fn):
    while isinstance(fn, functools.partial):
        fn = fn.func
    try:
        return inspect.unwrap(fn)
    except ValueError:  # a __wrapped__ cycle
        return fn


@functools.lru_cache(maxsize=1)
def sites() -> dict:
    """``{"module.attribute": {primitive name: "path:line"}}`` for ``TABLES``, recorded in a fresh interpreter
    (a few seconds: it imports fnarray, jax and mlx where installed); ``{}`` if that interpreter fails."""
    code = (f"import runpy, sys; sys.path.insert(0, {_ROOT!r}); "
            f"runpy.run_path({os.path.abspath(__file__)!r}, run_name='__record__')")
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600,
                              cwd=_ROOT)
        return json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else {}
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return {}


# ------------------------------------------------------------------------------ inside the recording interpreter

class _Recording(dict):
    """A rule table that notes, for each key set, the ``fnarray`` frames that set it (innermost first) and the value
    set, every time (``history``)."""

    def __init__(self, *args, first=None):
        super().__init__(*args)
        self.history = {k: [([first] if first else [], v)] for k, v in self.items()}

    def __setitem__(self, key, value):
        self.history.setdefault(key, []).append((_stack(), value))
        super().__setitem__(key, value)

    def update(self, *args, **kwargs):
        stack = _stack()
        for key, value in dict(*args, **kwargs).items():
            self.history.setdefault(key, []).append((stack, value))
        super().update(*args, **kwargs)

    def setdefault(self, key, default=None):
        if key not in self:
            self.history.setdefault(key, []).append((_stack(), default))
        return super().setdefault(key, default)


def _stack():
    """``[(path, line)]`` of the ``fnarray`` frames calling the table, innermost first."""
    out = []
    f = sys._getframe(2)
    while f is not None and f.f_code.co_filename.startswith(os.path.join(_ROOT, "fnarray")):
        out.append((f.f_code.co_filename, f.f_lineno))
        f = f.f_back
    return out


def _watch(names):
    """A ``sys.settrace`` function that swaps each new table under one of ``names`` for a ``_Recording``."""
    def module_lines(frame):
        prev = [frame.f_lineno]

        def local(frame, event, arg):
            if event == "line":
                g = frame.f_globals
                for name in names:
                    if type(g.get(name)) is dict:
                        g[name] = _Recording(g[name], first=(frame.f_code.co_filename, prev[0]))
                prev[0] = frame.f_lineno
            return local
        return local

    def on_call(frame, event, arg):
        if frame.f_code.co_name == "<module>" and frame.f_globals.get("__name__", "").startswith("fnarray"):
            return module_lines(frame)
        return None
    return on_call


def _record_main():
    sys.settrace(_watch({attr for _, _, attr, _ in TABLES} | {attr for _, attr, _ in WATCHED}))
    try:
        import fnarray  # noqa: F401
        import fnarray.export  # noqa: F401  (the ONNX rules)
        tables = {}
        for _, mod, attr, filled_by in TABLES:
            try:
                tables[f"{mod}.{attr}"] = table(mod, attr, filled_by)
            except Exception:  # noqa: BLE001 (an optional backend's library is missing)
                continue
        for mod, attr, _ in WATCHED:
            tables[f"{mod}.{attr}"] = table(mod, attr)
    finally:
        sys.settrace(None)
    picks = {f"{mod}.{attr}": globals()[pick] for mod, attr, pick in WATCHED}
    out = {}
    for label, t in tables.items():
        if isinstance(t, _Recording):
            out[label] = _choose(t, picks.get(label))
    print(json.dumps(out))


def _choose(table, pick=None) -> dict:
    """``{primitive name: "path:line"}``: the registration line of each key (module docstring); ``"hook path:line"``
    where a family hook (``families.on_family``) registered it for every member at once (the caller reports the
    primitive's definition, which put it in the family). ``pick(history)`` chooses the write of a key that
    counts (default: ``_last_definition``)."""
    stacks = {k: (pick or _last_definition)(h) for k, h in table.history.items() if h}
    sets: dict = {}
    for key, stack in stacks.items():
        for site in set(stack):
            sets.setdefault(site, set()).add(key)
    out = {}
    for key, stack in stacks.items():
        name = key if isinstance(key, str) else getattr(key, "name", None)
        if not isinstance(name, str) or not stack:
            continue
        site = next((s for s in stack if len(sets[s]) == 1), None)
        hook = site is None and any(s[0] == _FAMILIES for s in stack)
        if site is None:
            site = stack[-1]
            site = _loop_element(site[0], site[1], key) or site
        out[name] = ("hook " if hook else "") + f"{os.path.relpath(site[0], _ROOT)}:{site[1]}"
    return out


def _last_definition(history):
    """The stack of the last write that defined a key's rule: a write of a wrapper of the value before it
    (``functools.wraps``, e.g. the jax backend's float8 upcast around its float rules) keeps the earlier line."""
    chosen, before = history[-1][0], None
    for stack, value in history:
        if before is None or getattr(value, "__wrapped__", None) is not before:
            chosen = stack
        before = value
    return chosen


def _made_a_function(history):
    """The stack of the write that made a kernel fact a math function (``emit="func"``), else of the last write."""
    before = None
    chosen = history[-1][0]
    for stack, value in history:
        func = getattr(value, "func", None)
        if func is not None and func != before:
            chosen = stack
        before = func
    return chosen


@functools.lru_cache(maxsize=None)
def _parsed(path):
    with open(path) as f:
        return ast.parse(f.read())


def _loop_element(path, line, key):
    """``(path, line)`` of the element naming ``key`` in the literal that the ``for`` loop around ``line`` runs
    over (``for p, name in ((P.exp, "exp"), ...)``; a dict literal's keys, ``.items()``/``.keys()`` of one; a
    module-level name bound to such a literal, here or in the module it is imported from), or ``None``."""
    module = _module_of(path)
    if module is None:
        return None
    loops = [n for n in ast.walk(_parsed(path)) if isinstance(n, ast.For) and n.lineno < line <= n.end_lineno]
    for loop in sorted(loops, key=lambda n: -n.lineno):  # the innermost first
        for elt_path, elt, elt_module in _literal_elements(path, module, loop.iter):
            try:
                value = eval(compile(ast.Expression(elt), elt_path, "eval"), vars(elt_module))  # noqa: S307 (our source)
            except Exception:  # noqa: BLE001 (an element that needs the loop's variables)
                continue
            if value is key or (isinstance(value, tuple) and any(v is key for v in value)):
                return elt_path, elt.lineno
    return None


def _module_of(path):
    return next((m for m in list(sys.modules.values()) if getattr(m, "__file__", None) == path), None)


def _literal_elements(path, module, node, depth=0):
    """``[(path, element node, module)]`` of the literal that ``node`` (a loop's iterable) evaluates from."""
    if depth > 4:
        return []
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [(path, e, module) for e in node.elts]
    if isinstance(node, ast.Dict):
        return [(path, k, module) for k in node.keys if k is not None]
    if isinstance(node, ast.Call) and not node.keywords:
        f = node.func
        if isinstance(f, ast.Attribute) and f.attr in ("items", "keys") and not node.args:
            return _literal_elements(path, module, f.value, depth + 1)
        if isinstance(f, ast.Name) and f.id in ("tuple", "list", "set", "frozenset", "sorted") and len(node.args) == 1:
            return _literal_elements(path, module, node.args[0], depth + 1)
    if isinstance(node, ast.Name):
        for stmt in _parsed(path).body:
            if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == node.id for t in stmt.targets):
                return _literal_elements(path, module, stmt.value, depth + 1)
            if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.target.id == node.id:
                return _literal_elements(path, module, stmt.value, depth + 1) if stmt.value else []
            if isinstance(stmt, ast.ImportFrom) and stmt.module and not stmt.level:
                for a in stmt.names:
                    if (a.asname or a.name) == node.id and stmt.module in sys.modules:
                        other = sys.modules[stmt.module]
                        opath = getattr(other, "__file__", None)
                        if opath and opath.startswith(os.path.join(_ROOT, "fnarray")):
                            return _literal_elements(opath, other, ast.Name(a.name), depth + 1)
    return []


if __name__ == "__record__":
    _record_main()
