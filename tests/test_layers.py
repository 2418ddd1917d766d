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
