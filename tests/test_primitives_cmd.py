"""``python -m fnarray primitives``: the support matrix is computed from the code and the docs copy is current."""

from __future__ import annotations

import os
import re

import pytest

from fnarray import _primitives_cmd as cmd
from fnarray.core.primitives import PRIMITIVES

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_STATUS = re.compile(r"^(native|decomposed|falls back \(.+\)|unsupported \(.+\)|backend unavailable \(.+\))")


@pytest.fixture(scope="module")
def rows():
    return cmd.matrix_rows()


def test_every_primitive_has_a_row_without_an_empty_cell(rows):
    assert [r[0] for r in rows] == list(PRIMITIVES)
    for r in rows:
        assert len(r) == len(cmd.COLUMNS)
        assert all(c.strip() for c in r), f"{r[0]} has an empty cell: {r}"
        assert "missing" not in r[2:6], f"{r[0]} lacks a rule: {dict(zip(cmd.COLUMNS, r, strict=True))}"
        for col, c in zip(cmd.COLUMNS[6:], r[6:], strict=True):
            assert _STATUS.match(c), f"{r[0]} on {col}: {c!r}"


def test_status_follows_the_backend_tables(rows):
    by_name = {r[0]: dict(zip(cmd.COLUMNS, r, strict=True)) for r in rows}
    assert by_name["erfc"]["numpy"] == "native"
    for b in ("mlx", "webgpu"):
        if not by_name["erfc"][b].startswith("backend unavailable"):
            assert by_name["erfc"][b] == "decomposed"
    if not by_name["digamma"]["opencl"].startswith("backend unavailable"):
        assert by_name["digamma"]["opencl"] == "decomposed"
    assert by_name["custom_lin"]["numpy"].startswith("unsupported")
    if not by_name["while"]["browser"].startswith("backend unavailable"):
        assert by_name["while"]["browser"].startswith("unsupported")


def test_docs_copy_is_current(rows):
    if any(c.startswith("backend unavailable") for r in rows for c in r):
        if os.environ.get("FNARRAY_REQUIRE_ALL_BACKENDS"):
            pytest.fail("a backend is unavailable, so docs/primitives.md cannot be checked")
        pytest.skip("a backend is unavailable here: the matrix differs from the committed one")
    with open(os.path.join(_ROOT, "docs", "primitives.md")) as f:
        committed = f.read()
    if os.environ.get("FNARRAY_REGEN_DOCS"):
        cmd.main(["--write"])
        return
    # Line numbers move with every edit of a rule's module: compared without them (the rest exactly).
    def lines_free(text):
        return re.sub(r"(\.py):\d+", r"\1:N", text)
    assert lines_free(committed) == lines_free(cmd.primitives_md(rows)), (
        "docs/primitives.md is out of date: run `python -m fnarray primitives --write` (or FNARRAY_REGEN_DOCS=1)")


def test_one_primitive_lists_its_rules_with_file_and_line():
    text = cmd.describe("dot_general")
    assert "semantics: " in text
    places = re.findall(r"(fnarray/[\w/]+\.py):(\d+)", text)
    kinds = ("abstract eval", "JVP", "transpose", "batching", "numpy reference")
    for k in kinds:
        assert k in text
    assert len(places) >= 6
    for entry in text.splitlines():
        for path, line in re.findall(r"(fnarray/[\w/]+\.py):(\d+)", entry):
            with open(os.path.join(_ROOT, path)) as f:
                src = f.readlines()
            at = src[int(line) - 1]
            if ", registered" in entry:  # a helper's rule: the line that registered it (names it, or loops)
                assert "dot_general" in at or any("for " in s for s in src[int(line) - 3:int(line)]), (path, line, at)
            else:
                assert re.match(r"\s*(@|def|class|.*lambda)", at), (path, line, at)
    assert "ONNX export" in text


def _site(text, what):
    """The ``path:line`` of the rule line of ``describe``'s text that starts with ``what``, and that line."""
    entry = next(e for e in text.splitlines() if e.strip().startswith(what))
    path, line = re.search(r"(fnarray/[\w/]+\.py):(\d+)", entry).groups()
    with open(os.path.join(_ROOT, path)) as f:
        return entry, f.readlines()[int(line) - 1]


@pytest.mark.parametrize("name,what", [
    ("add", "kernel element rule"),     # ELEMENTWISE[P.add] = _binary(add_of)
    ("log2", "numpy reference"),        # direct(P.log2, upcast(np.log2)): IMPLS[prim] = a closure (exp, a
                                        # library primitive, is registered by the family hook, which names none)
    ("sin", "JVP"),                     # defjvp(P.sin, ...)
    ("max", "ONNX export"),             # RULES[P.max_p] = _minmax("Max", "Or")
    ("add", "abstract eval"),           # add = binary("add")
])
def test_a_rule_registered_through_a_helper_reports_its_registration_line(name, what):
    """A rule made by a helper (a closure, or one function for several primitives) is reported at the line that
    registered it for this primitive (``fnarray._rule_sites``), wherever that line is, not at the helper."""
    entry, at = _site(cmd.describe(name), what)
    assert ", registered" in entry, entry
    assert re.search(rf"(P\.|\b){name}(_p)?\b|\"{name}\"", at), (entry, at)
    assert not re.match(r"\s*def ", at), (entry, at)


def test_a_rule_defined_for_its_primitive_reports_its_definition():
    entry, at = _site(cmd.describe("dot_general"), "numpy reference")
    assert ", registered" not in entry and re.match(r"\s*(@|def)", at), (entry, at)


def test_onnx_export_is_listed_beside_the_backends():
    assert re.search(r"ONNX export .* unsupported \(ONNX has no complementary error", cmd.describe("erfc"))
    assert re.search(r"ONNX export .* fnarray/export/_onnx\.py:\d+", cmd.describe("add"))


def test_command_line(capsys):
    from fnarray.__main__ import main
    assert main(["primitives", "erfc"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("erfc  (family: unary)") and "erfc_float32" in out and "backends:" in out
    with pytest.raises(SystemExit):
        cmd.describe("no_such_primitive")


def test_report_fits_120_columns_and_names_an_unavailable_backend_once(rows):
    # The same rows as on a machine without mlx: its column reads '-' and its reason appears once.
    why = ("the mlx library is not installed (No module named 'mlx'); to fix: pip install 'fnarray[mlx]', "
           "then run `python -m fnarray doctor` to see what else this machine can use, and more words")
    i = cmd.COLUMNS.index("mlx")
    gone = [r[:i] + [f"backend unavailable ({why})"] + r[i + 1:] for r in rows]
    text = cmd.report(gone)
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= cmd.WIDTH, max(lines, key=len)
    assert text.count("mlx library is not installed") == 1
    assert cmd.unavailable_backends(gone) == {"mlx": why}
    header = next(line for line in lines if line.startswith("primitive"))
    mlx_at = header.index("mlx")
    body = [line for line in lines if line.split() and line.split()[0] in PRIMITIVES]
    assert len(body) == len(PRIMITIVES)
    assert all(line[mlx_at] == "-" for line in body)
    # --wide keeps every reason, in every row.
    wide = cmd.report(gone, wide=True)
    assert wide.count("mlx library is not installed") == len(PRIMITIVES) + 1
    # The status words follow the full cells.
    by_name = {r[0]: r for r in rows}
    plain = {line.split()[0]: line.split() for line in body}
    for name in ("neg", "erfc", "while"):
        assert plain[name][6] == cmd._short(by_name[name][6])


def test_report_sections_are_a_list_of_functions(rows):
    extra = lambda rows, wide: ["an added section"]   # how another section joins the report
    cmd.SECTIONS.append(extra)
    try:
        assert cmd.report(rows).rstrip().endswith("an added section")
    finally:
        cmd.SECTIONS.remove(extra)


def test_short_cells():
    assert cmd._short("native (driven from the host)") == "native"
    assert cmd._short("falls back (no kernel rule)") == "fallback"
    assert cmd._short("unsupported (a web page has no numpy fallback)") == "no"
    assert cmd._short("backend unavailable (x)") == "-"
    assert cmd._short("n/a (zero tangent)") == "n/a"


def test_expected_fallbacks_are_printed(capsys):
    """``python -m fnarray primitives --fallbacks`` prints every backend's table (``Backend.expected_fallbacks``),
    one entry per line within 120 columns, each with its reason."""
    import fnarray as fa
    from fnarray._primitives_cmd import main
    from fnarray.devices.backend import get_backend
    assert main(["--fallbacks"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert all(len(line) <= 120 for line in lines), max(lines, key=len)
    for dev in fa.devices(all_backends=True):
        table = get_backend(dev.backend).expected_fallbacks
        for (prim, dt), reason in table.items():
            assert any(line.split()[:3] == [dev.backend, prim, dt] and reason[:40] in line for line in lines), (
                dev.backend, prim, dt, out)
        if not table:
            assert any(line.startswith(dev.backend) and "none" in line for line in lines), out


#: ``(primitive, rule table)`` whose reported line may name neither the primitive nor the rule, with the reason.
#: Keep it short: a rule that a helper registers for its primitive is reported at a line that names it.
_SITE_EXCEPTIONS: dict = {}

_LOCATION = re.compile(r"(fnarray/[\w/]+\.py):(\d+)")
_GENERIC_NAMES = {"rule", "<lambda>", "factory", "f", "?", "impl", "lower"}


def _module_namespace(path):
    import importlib
    name = path.removesuffix(".py").replace("/", ".").removesuffix(".__init__")
    try:
        return vars(importlib.import_module(name))
    except Exception:  # noqa: BLE001 (an optional backend's module)
        return {}


def _line_names(prim, rule, path, text):
    """Whether ``text`` (line of ``path``) names ``prim`` (its name, ``P.name``, ``name_p``, or an identifier of
    that module bound to the primitive itself) or the rule ``rule``."""
    base = re.escape(prim.name.removesuffix("_p"))
    if re.search(rf"(?<![\w]){base}(_p)?(?![\w])", text):
        return True
    if rule not in _GENERIC_NAMES and re.search(rf"(?<![\w]){re.escape(rule)}(?![\w])", text):
        return True
    ns = _module_namespace(path)
    return any(ns.get(ident) is prim for ident in re.findall(r"[A-Za-z_]\w*", text))


def test_every_rule_location_names_its_primitive_or_its_rule():
    """Every ``path:line`` that ``python -m fnarray primitives NAME`` reports for a rule points at a line that
    names the primitive (or an alias bound to it) or the rule: the rule's definition or the line that
    registered it for this primitive, never a helper's body or a loop over many primitives."""
    bad = []
    for prim in PRIMITIVES.values():
        labels = [r[0] for r in cmd._table_rules(prim)]
        what = None
        for entry in cmd.rule_lines(prim):
            rest = entry.strip()
            label = next((w for w in labels if rest.startswith(w)), None)
            if label is not None:
                what, rest = label, rest[len(label):].strip()
            m = _LOCATION.search(entry)
            if m is None or (prim.name, what) in _SITE_EXCEPTIONS:
                continue
            path, line = m.groups()
            with open(os.path.join(_ROOT, path)) as f:
                text = f.readlines()[int(line) - 1]
            rule = rest.split()[1] if rest.startswith("via ") else re.split(r"[,\s]", rest)[0]
            if not _line_names(prim, rule, path, text):
                bad.append(f"{prim.name} / {what}: {path}:{line} reads {text.strip()!r}")
    assert not bad, "rule locations that name neither the primitive nor its rule:\n  " + "\n  ".join(bad)


def test_the_onnx_export_rule_is_listed_beside_the_backends_for_every_primitive():
    for prim in PRIMITIVES.values():
        lines = cmd.rule_lines(prim)
        onnx = [e for e in lines if e.strip().startswith("ONNX export")]
        assert len(onnx) == 1, (prim.name, lines)
        backend_rows = [i for i, e in enumerate(lines) if re.match(r"\s*(numpy reference|jax|mlx|kernel)", e)]
        assert not backend_rows or lines.index(onnx[0]) > max(backend_rows), (prim.name, lines)
