"""The layers as docs/design.md draws them: import rules checked on the source, and fnarray.lax's public surface."""

from __future__ import annotations

import ast
import glob
import os

import fnarray as fa

_PKG = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fnarray")


def _imports(path):
    """Every module ``path`` imports (at module level or inside functions), as dotted names."""
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield a.name
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module
            for a in node.names:
                yield f"{node.module}.{a.name}"


def _violations(folder, forbidden):
    bad = []
    for path in sorted(glob.glob(os.path.join(_PKG, folder, "*.py"))):
        for name in _imports(path):
            if any(name == f or name.startswith(f + ".") for f in forbidden):
                bad.append(f"{os.path.relpath(path, _PKG)} imports {name}")
    return bad


def test_transforms_never_import_the_namespace():
    assert not _violations("transforms", ["fnarray.numpy"])


def test_core_imports_neither_upper_layers_nor_backend_libraries():
    upper = ["fnarray.numpy", "fnarray.transforms", "fnarray.lowering", "fnarray.devices", "jax", "mlx",
             "pyopencl", "wgpu"]
    assert not _violations("core", upper)


def test_import_rule_test_catches_a_violation(tmp_path):
    # The checker itself: a module importing the namespace, even inside a function, is reported.
    d = tmp_path / "transforms"
    d.mkdir()
    (d / "bad.py").write_text("def f():\n    from fnarray.numpy import reshape\n")
    global _PKG
    old, _PKG = _PKG, str(tmp_path)
    try:
        assert _violations("transforms", ["fnarray.numpy"]) == ["transforms/bad.py imports fnarray.numpy",
                                                                 "transforms/bad.py imports fnarray.numpy.reshape"]
    finally:
        _PKG = old


def test_lax_shows_only_public_names():
    names = dir(fa.lax)
    assert names == sorted(fa.lax.__all__)
    for hidden in ("P", "np", "_aval", "annotations", "dtypes", "is_scalar"):
        assert hidden not in names
    assert all(not n.startswith("_") for n in names)
    assert fa.lax.add is not None and fa.lax.erfc is not None and "dot_general" in names


def test_one_get_aval():
    from fnarray.core.avals import get_aval
    from fnarray.numpy import _util
    from fnarray.transforms import (ad, ad_rules, ad_tables, batching, custom_derivatives, jvp, partial_eval,
                                    remat, transpose)
    for mod in (ad_rules, ad_tables, batching):
        assert mod._aval is get_aval
    for mod in (ad, jvp, partial_eval, transpose, custom_derivatives, remat):  # no copy of their own
        assert getattr(mod, "_aval", get_aval) is get_aval
    assert _util.aval_of is get_aval
    assert get_aval(fa.numpy.ones((2, 3))).shape == (2, 3)
    assert get_aval(1.5).weak_type and get_aval(1.5).dtype == fa.numpy.float32


# ------------------------------------------------------------------------------ the layer contract

#: Each layer and the packages it must not import, at module level or inside functions (docs/internals.md,
#: "Layers"): core -> devices -> lowering -> transforms -> the namespaces (numpy, nn, scipy, random, export)
#: and the public facades (sharding, profiler). The mesh and sharding types live in ``devices``.
_UPPER = ["fnarray.numpy", "fnarray.nn", "fnarray.scipy", "fnarray.export", "fnarray.random", "fnarray.sharding",
          "fnarray.profiler", "fnarray.experimental", "fnarray.optim"]
_LAYERS = {
    "core": ["fnarray.devices", "fnarray.lowering", "fnarray.transforms", "jax", "mlx", "pyopencl", "wgpu"] + _UPPER,
    "devices": ["fnarray.lowering", "fnarray.transforms"] + _UPPER,
    "lowering": ["fnarray.transforms"] + _UPPER,
    "transforms": [n for n in _UPPER if n not in ("fnarray.sharding", "fnarray.random")],
}


def _all_modules():
    mods = {}
    for path in glob.glob(os.path.join(_PKG, "**", "*.py"), recursive=True):
        rel = os.path.relpath(path, os.path.dirname(_PKG))[:-3].replace(os.sep, ".")
        mods[rel[:-len(".__init__")] if rel.endswith(".__init__") else rel] = path
    return mods


def _import_graph():
    """``module -> {fnarray modules it imports}`` (module level and inside functions; a module's own
    packages excluded: importing ``a.b.c`` runs ``a.b`` first, which is no cycle)."""
    mods = _all_modules()

    def resolve(name):
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name

    graph = {}
    for mod, path in mods.items():
        with open(path) as f:
            tree = ast.parse(f.read(), path)
        out = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in mods else node.module
                           for a in node.names]
            else:
                continue
            for t in targets:
                r = resolve(t) if t.startswith("fnarray") else None
                if r and r != mod and not mod.startswith(r + "."):
                    out.add(r)
        graph[mod] = out
    return graph


def _cycles(graph):
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index, low, on, stack, found = {}, {}, set(), [], []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def test_each_layer_imports_only_layers_below_it():
    bad = []
    for layer, forbidden in _LAYERS.items():
        for path in sorted(glob.glob(os.path.join(_PKG, layer, "**", "*.py"), recursive=True)):
            for name in _imports(path):
                hit = next((f for f in forbidden if name == f or name.startswith(f + ".")), None)
                rel = os.path.relpath(path, _PKG).replace(os.sep, "/")
                if hit:
                    bad.append(f"{rel} imports {name}")
    assert not bad, "\n".join(bad)


def test_no_import_cycles():
    assert _cycles(_import_graph()) == []


def test_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []



# ------------------------------------------------------------------------------ no branches on backend names

_BACKEND_NAMES = frozenset({"numpy", "jax", "mlx", "opencl", "webgpu"})
#: Where a comparison with a backend's name is not a branch on the backend's identity. Each entry is one file and
#: why; everything else asks its ``Backend`` (hooks, ``Capabilities`` fields) instead (docs/internals.md, "Layers").
_NAME_COMPARISONS_ALLOWED = {
    # the doctor's probes are keyed by library (pyopencl, wgpu, jax, mlx), each printed its own way
    "_doctor.py",
    # the primitives matrix's cell texts for the collectives name what each column's library calls them
    "_primitives_cmd.py",
    # an mx.array handed to from_dlpack: the producer's library, whose DLPack export fails for bfloat16
    "devices/placement.py",
    # each distributed engine's own module (as lowering/<name>/): it checks that its backend has not started
    "distributed/_jax.py", "distributed/_mlx.py",
}


def _name_constants(node) -> set:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value} & _BACKEND_NAMES
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return set().union(*(_name_constants(e) for e in node.elts)) if node.elts else set()
    return set()


def _name_comparisons(root) -> list:
    """``"file:line: code"`` for each comparison (``==``, ``!=``, ``in``...) with a backend name (or a literal
    collection holding one) in ``root``'s modules, outside each backend's own package ``lowering/<name>/`` and
    ``lowering/kernels/``."""
    bad = []
    for path in sorted(glob.glob(os.path.join(root, "**", "*.py"), recursive=True)):
        rel = os.path.relpath(path, root).replace(os.sep, "/")
        parts = rel.split("/")
        if parts[0] == "lowering" and len(parts) > 2 and parts[1] in _BACKEND_NAMES | {"kernels"}:
            continue
        if rel in _NAME_COMPARISONS_ALLOWED:
            continue
        with open(path) as f:
            tree = ast.parse(f.read(), path)
        for node in ast.walk(tree):
            if isinstance(node, ast.Compare) and any(_name_constants(c) for c in [node.left, *node.comparators]):
                bad.append(f"{rel}:{node.lineno}: {ast.unparse(node)}")
    return bad


def test_no_branch_on_a_backend_name_outside_its_package():
    bad = _name_comparisons(_PKG)
    assert not bad, "compare with a backend's name; ask its Backend (a hook or Capabilities field):\n" + "\n".join(bad)


def test_backend_name_scan_finds_comparisons(tmp_path):
    (tmp_path / "devices").mkdir()
    (tmp_path / "lowering" / "jax").mkdir(parents=True)
    (tmp_path / "devices" / "m.py").write_text(
        "def f(d, b):\n    if d.backend == 'jax':\n        return 1\n    return b in ('mlx', 'x') or b == 'cpu'\n")
    (tmp_path / "lowering" / "jax" / "backend.py").write_text("ok = 'jax' == 'jax'\n")
    assert _name_comparisons(str(tmp_path)) == ["devices/m.py:2: d.backend == 'jax'",
                                                "devices/m.py:4: b in ('mlx', 'x')"]
    for rel in _NAME_COMPARISONS_ALLOWED:
        assert os.path.exists(os.path.join(_PKG, rel)), rel  # no stale entry
