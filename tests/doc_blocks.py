"""The Python blocks of the README and docs/*.md, and how tests/test_doc_blocks.py runs them.

A page's blocks run in order in one namespace (a block may use what an earlier one defined), in a
subprocess whose current folder is a fresh temporary one holding a link to the repository's ``examples``
folder, on the device that ``FNARRAY_DEVICE`` names. HTML comments on the lines just above a block's
opening fence say how it is meant to run:

- ``<!-- raises: NameOfException -->``: the block must raise that exception (documented failures);
- ``<!-- prints: text -->``: the block's standard output must contain ``text`` (repeatable);
- ``<!-- needs: opencl -->``: the block uses that backend by name (skipped, saying so, without it); ``needs: torch``
  names an optional library the same way;
- ``<!-- run with: VAR=value ... python -m fnarray.distributed.launch -n 2 -->``: the block is a whole
  script of its own, run once with that environment and command line (``python`` is this interpreter).

Run as a script (``python tests/doc_blocks.py PAGE``) it executes one page's in-page blocks and prints one
JSON line per block: ``{"block": i, "ok": bool, "error": str, "out": str}``.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import sys
import textwrap
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_BLOCK = re.compile(r"((?:^<!--[^\n]*-->\n)*)^```python\n(.*?)^```", re.S | re.M)
_MARK = re.compile(r"<!--\s*(raises|prints|needs|run with):\s*(.*?)\s*-->")


def pages() -> list:
    """The pages with Python blocks, relative to the repository root."""
    names = ["README.md"] + sorted(os.path.join("docs", n) for n in os.listdir(os.path.join(ROOT, "docs"))
                                   if n.endswith(".md"))
    return [n for n in names if blocks(n)]


def blocks(page: str) -> list:
    """``[(index, code, marks)]`` of a page, ``marks`` a dict of lists keyed by marker name."""
    with open(os.path.join(ROOT, page)) as f:
        text = f.read()
    out = []
    for i, m in enumerate(_BLOCK.finditer(text)):
        marks: dict = {}
        for key, value in _MARK.findall(m.group(1)):
            marks.setdefault(key, []).append(value)
        out.append((i, textwrap.dedent(m.group(2)), marks))
    return out


def _run_page(page: str) -> None:
    ns: dict = {"__name__": "__main__"}
    for i, code, marks in blocks(page):
        if "run with" in marks:
            continue
        out = io.StringIO()
        error = ""
        try:
            with contextlib.redirect_stdout(out):
                exec(compile(code, f"{page} block {i}", "exec"), ns)  # noqa: S102 (our own documentation)
        except BaseException as e:  # noqa: BLE001 (reported, and compared with the block's raises: marker)
            error = f"{type(e).__name__}: {e}\n" + "".join(traceback.format_exception(e)[-6:])
        want = marks.get("raises")
        if want:
            ok = bool(error) and error.split(":", 1)[0] in want
            if not ok:
                error = f"expected {want[0]}, got " + (error or "no exception")
        else:
            ok = not error
        for text in marks.get("prints", []):
            if text not in out.getvalue():
                ok, error = False, error + f"\nthe output lacks {text!r}"
        print(json.dumps({"block": i, "ok": ok, "error": error, "out": out.getvalue()[-4000:]}), flush=True)


if __name__ == "__main__":
    _run_page(sys.argv[1])
