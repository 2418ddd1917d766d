"""Every Python block of README.md and docs/*.md runs as written (``tests/doc_blocks.py`` says how the markers
change that), on numpy:0 and on one other installed backend, and prints what its marker says."""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
import subprocess
import sys
import warnings

import pytest

from doc_blocks import ROOT, blocks, pages
from helpers import BACKEND_UNAVAILABLE


def _other_device():
    """One usable device that is not numpy's: jax:0 if it runs here, else the first other one."""
    import fnarray as fa
    others = [str(d) for d in fa.devices(all_backends=True) if d.backend != "numpy"]
    return "jax:0" if "jax:0" in others else (others[0] if others else None)


def _workdir(tmp_path):
    os.symlink(os.path.join(ROOT, "examples"), tmp_path / "examples")
    return tmp_path


def _env(**extra):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), MPLBACKEND="Agg")
    env.update(extra)
    return env


#: ``needs:`` names that are optional libraries rather than backends: how to install each. Without one the page
#: skips as an optional dependency does (not as a missing backend, which FNARRAY_REQUIRE_ALL_BACKENDS fails).
_OPTIONAL = {"torch": "the optional interop extra: pip install -e '.[interop]'"}


def _needs(marks):
    from fnarray.devices.backend import backend_error
    for name in marks.get("needs", []):
        if name in _OPTIONAL:
            if importlib.util.find_spec(name) is None:
                return f"{name} is not installed ({_OPTIONAL[name]})"
            continue
        why = backend_error(name)
        if why is not None:
            return f"{BACKEND_UNAVAILABLE}: the block uses {name}: {why}"
    return None


def _only_verdict(error: str) -> bool:
    """Whether a failed block's only fault is a profiler verdict (``prints: ... dominates``) other than the page's:
    a verdict weighs measured times, which a loaded or faster machine changes (the harness's CPU is not this
    one)."""
    lines = error.strip().splitlines()
    return bool(lines) and all(ln.startswith("the output lacks") and ln.endswith(" dominates'") for ln in lines)


#: The verdict's words for each group of the profile's layers (tracing, lowering and compiling are one group).
_VERDICT_GROUPS = {"dispatch": ("dispatch",), "compile": ("trace", "lower", "compile"), "transfer": ("transfer",),
                   "kernel time": ("kernel",), "fallback": ("fallback",), "host-driven loop overhead": ("loop",)}


def _verdict_explained(out: str) -> bool:
    """Whether the block's last printed profile names, as its verdict, the group of layers with the largest share
    of its own table (to the table's 0.1% rounding): the verdict then follows from the times this machine measured,
    which no test may judge; the profiler's rules themselves are pinned on crafted profiles in test_profiler.py.
    A verdict that contradicts its table is still a failure."""
    import re
    ms = {k: float(v) for k, v in re.findall(r"^(\w+)\s+([\d.]+)\s+[\d.]+%\s+\d+\s", out, re.M)}
    verdicts = re.findall(r"^verdict: (.+?) dominates \(([^)\n]*)", out, re.M)
    if not verdicts or verdicts[-1][0] not in _VERDICT_GROUPS or not ms:
        return False
    name, detail = verdicts[-1]
    groups = {g: sum(ms.get(k, 0.0) for k in layers) for g, layers in _VERDICT_GROUPS.items()}
    moved = re.search(r"with ([\d.]+) ms of copies", detail)   # copies for a fallback count as the fallback's
    if moved:
        groups["transfer"] -= float(moved.group(1))
        groups["fallback"] += float(moved.group(1))
    return groups[name] >= max(groups.values()) - 0.01 * len(ms)   # the table's ms are rounded to 0.01


def _run_page(page, device, workdir, n_blocks):
    """The page's blocks run in one fresh interpreter on ``device``: the results of those that failed."""
    r = subprocess.run([sys.executable, os.path.join(ROOT, "tests", "doc_blocks.py"), page],
                       cwd=workdir, env=_env(FNARRAY_DEVICE=device), capture_output=True, text=True, timeout=900)
    results = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
    assert r.returncode == 0 and len(results) == n_blocks, r.stdout[-3000:] + r.stderr[-3000:]
    return [res for res in results if not res["ok"]]


@pytest.mark.parametrize("where", ["numpy:0", "other"])
@pytest.mark.parametrize("page", pages())
def test_page_blocks_run(page, where, tmp_path):
    device = "numpy:0" if where == "numpy:0" else _other_device()
    if device is None:
        pytest.skip(f"{BACKEND_UNAVAILABLE}: no backend besides numpy is installed (pip install -e '.[jax]')")
    todo = [(i, marks) for i, _code, marks in blocks(page) if "run with" not in marks]
    if not todo:
        pytest.skip(f"{page} has only blocks that run as scripts of their own (test_script_blocks_run)")
    missing = [(i, _needs(marks)) for i, marks in todo if _needs(marks)]
    if missing:   # a block names a backend this machine lacks: the page's later blocks may depend on it
        pytest.skip(f"{missing[0][1]} ({page} block {missing[0][0]})")
    workdir = _workdir(tmp_path)
    bad = _run_page(page, device, workdir, len(todo))
    timed = [b for b in bad if _only_verdict(b["error"]) and _verdict_explained(b["out"])]
    for b in timed:           # another verdict that this machine's times give (under load, on another CPU)
        warnings.warn(f"{page} block {b['block']} on {device}: {b['error'].strip()}; its profile's own times give "
                      "that verdict (not judged: a verdict weighs measured times)")
    bad = [b for b in bad if b not in timed]
    assert not bad, f"{page} on {device}: " + "\n".join(f"block {b['block']}: {b['error']}\n{b['out']}"
                                                        for b in bad)


def _script_blocks():
    return [(page, i) for page in pages() for i, _code, marks in blocks(page) if "run with" in marks]


@pytest.mark.parametrize("page,index", _script_blocks())
def test_script_blocks_run(page, index, tmp_path):
    _i, code, marks = blocks(page)[index]
    why = _needs(marks)
    if why:
        pytest.skip(why)
    words = shlex.split(marks["run with"][0])
    env = {}
    while words and "=" in words[0]:
        k, v = words.pop(0).split("=", 1)
        env[k] = v
    words = words or ["python"]
    assert words[0] == "python", f"{page} block {index}: a run-with command starts with python, got {words}"
    script = _workdir(tmp_path) / "block.py"
    script.write_text(code)
    r = subprocess.run([sys.executable] + words[1:] + [str(script)], cwd=tmp_path, env=_env(**env),
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"{page} block {index}:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    for text in marks.get("prints", []):
        assert text in r.stdout, (text, r.stdout[-3000:])


def test_markers_are_read():
    """The marker syntax itself: a page's comments reach the block below them and no other."""
    import doc_blocks
    text = ("x\n<!-- raises: ValueError -->\n<!-- prints: hi -->\n```python\nraise ValueError\n```\n\n"
            "```python\nprint(1)\n```\n")
    found = [(m.group(2), doc_blocks._MARK.findall(m.group(1))) for m in doc_blocks._BLOCK.finditer(text)]
    assert found == [("raise ValueError\n", [("raises", "ValueError"), ("prints", "hi")]), ("print(1)\n", [])]


def test_a_verdict_other_than_the_pages_passes_only_where_its_table_gives_it():
    """A block whose profile printed another verdict than its ``prints:`` passes where that verdict names the
    largest group of its own table (compile: trace + lower + compile), and fails where it contradicts it."""
    table = ("layer        total ms   share    count   mean us\n"
             "dispatch        56.28   41.1%        6    9379.9\ntrace           20.00   14.6%        1   20000.0\n"
             "lower            5.00    3.6%        1    5000.0\ncompile         23.41   17.1%        1   23414.1\n"
             "kernel          32.20   23.5%        6    5366.7\nloop             0.00    0.0%        0         -\n")
    assert _only_verdict("the output lacks 'kernel time dominates'")
    assert _verdict_explained(table + "verdict: dispatch dominates (41%), 30% of the time in the host's work")
    for wrong in ("kernel time dominates (24%): the computation", "transfer dominates (0%)", "what dominates (1%)"):
        assert not _verdict_explained(table + "verdict: " + wrong)
    assert _verdict_explained(table.replace("56.28", "45.00") + "verdict: compile dominates (38%: trace 16%")
    fallback = table.replace("loop ", "fallback ") + "transfer        60.00   20.0%        2   30000.0\n"
    assert not _verdict_explained(fallback + "verdict: fallback dominates (0%): sin (float64)")
    assert _verdict_explained(fallback + "verdict: fallback dominates (41%, with 60.00 ms of copies to numpy:0)")


def test_documents_the_docs_cite_are_in_the_repository():
    """Every ``docs/NAME.md`` or ``[text](NAME.md)`` the README, the docs and the code cite exists; the team's
    notes outside the repository (DESIGN.md, TRAPS.md, STYLE.md) are cited as their docs/ pages."""
    import re
    import subprocess
    files = subprocess.run(["git", "ls-files", "*.md", "*.py", ".ci/run"], cwd=ROOT, capture_output=True,
                           text=True, check=True).stdout.split()
    for f in files:
        if f == "tests/test_doc_blocks.py":   # this test names them
            continue
        with open(os.path.join(ROOT, f)) as fh:
            text = fh.read()
        assert not re.search(r"(?<![/\w])(DESIGN|TRAPS|STYLE)\.md", text), f"{f} cites a note not in the repository"
        base = os.path.dirname(os.path.join(ROOT, f))
        for target in re.findall(r"\]\(([\w./-]+\.md)\)", text):
            assert os.path.exists(os.path.join(base, target)), f"{f} links to {target}, which does not exist"
        for target in re.findall(r"(?<![\w/])(docs/[\w-]+\.md)", text):
            assert os.path.exists(os.path.join(ROOT, target)), f"{f} cites {target}, which does not exist"
