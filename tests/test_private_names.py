"""No private name crosses a module boundary in ``fnarray/lowering/`` (docs/internals.md, "Kernel groups").

A name with a leading underscore is its module's own; what another module needs is made public (or moved to
where both read it). Counted on the source: ``from m import _x`` and ``m._x`` where ``m`` is an imported
fnarray module, at module level or inside functions.
"""

from __future__ import annotations

import ast
import os

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _is_module(dotted: str) -> bool:
    base = os.path.join(_ROOT, *dotted.split("."))
    return os.path.exists(base + ".py") or os.path.exists(os.path.join(base, "__init__.py"))


def private_imports(path: str) -> list:
    """``"file: module.name"`` for each private name that ``path`` takes from another fnarray module."""
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    rel = os.path.relpath(path, _ROOT)
    found = []
    modules = set()   # local names bound to fnarray modules
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("fnarray") and not node.level:
            for a in node.names:
                if _is_private(a.name):
                    found.append(f"{rel}: {node.module}.{a.name}")
                elif _is_module(f"{node.module}.{a.name}"):   # ``from pkg import mod``
                    modules.add(a.asname or a.name)
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("fnarray"):
                    modules.add(a.asname or a.name.split(".")[0])
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and _is_private(node.attr) and isinstance(node.value, ast.Name)
                and node.value.id in modules):
            found.append(f"{rel}: {node.value.id}.{node.attr}")
    return found


def _lowering_violations(folder="fnarray/lowering"):
    out = []
    for dirpath, _, files in sorted(os.walk(os.path.join(_ROOT, folder))):
        for name in sorted(files):
            if name.endswith(".py"):
                out.extend(private_imports(os.path.join(dirpath, name)))
    return out


def test_no_private_name_crosses_a_module_boundary_in_lowering():
    bad = _lowering_violations()
    assert len(bad) == 0, f"{len(bad)} private names imported across modules:\n" + "\n".join(bad)


def test_the_counter_sees_both_forms(tmp_path):
    # The checker itself: a private name imported by name or read as a module attribute, inside a function too.
    p = tmp_path / "m.py"
    p.write_text("from fnarray.lowering import zero_size\n"
                 "from fnarray.lowering.kernels.groups.base import Group, _hidden\n"
                 "def f():\n    from fnarray.lowering.kernels.ir import _x\n    return zero_size._y, Group._z\n")
    found = [s.split(": ")[1] for s in private_imports(str(p))]
    assert sorted(found) == ["fnarray.lowering.kernels.groups.base._hidden", "fnarray.lowering.kernels.ir._x",
                             "zero_size._y"]
