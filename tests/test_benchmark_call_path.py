"""``benchmarks/call_path.py`` cannot rot: its rows of cached jitted calls run, a few calls each, and answer.

Times are not asserted (docs/performance.md, "Cached jitted calls of small functions", has them); what is:
every hit row of each installed backend comes back with finite positive times for fnarray and the raw side,
with the clock it was asked for.
"""

from __future__ import annotations

import json
import math
import pathlib
import sys

import pytest

BENCH = pathlib.Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture
def call_path(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))
    sys.modules.pop("call_path", None)
    import call_path
    return call_path


@pytest.mark.parametrize("rows", ["numpy-hits", "jax-hits"])
def test_hit_rows_answer(call_path, capsys, rows):
    if rows == "jax-hits":
        pytest.importorskip("jax")
    call_path.main(["--rows", rows, "--rounds", "1", "--number", "2", "--clock", "thread", "--json"])
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["clock"] == "thread"
    dev = rows.split("-")[0] + ":0"
    names = list(out["rows"])
    assert len(names) == 5 and all(n.startswith(dev) for n in names), names
    assert any("llm.py decode step" in n for n in names)
    for fa_us, raw_us in out["rows"].values():
        assert math.isfinite(fa_us) and fa_us > 0 and math.isfinite(raw_us) and raw_us > 0


def test_first_call_rows_answer(call_path, capsys):
    """The first-call rows (issue 28 item 2) run each key on the general path: no tape nor program is made."""
    from fnarray.transforms import eager_jit
    before = eager_jit.cache_info()
    call_path.main(["--rows", "numpy-first", "--rounds", "1", "--number", "3", "--clock", "thread", "--json"])
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    names = list(out["rows"])
    assert len(names) == 5 and all(n.startswith("numpy:0 first calls") for n in names), names
    for fa_us, raw_us in out["rows"].values():
        assert math.isfinite(fa_us) and fa_us > 0 and math.isfinite(raw_us) and raw_us > 0
    after = eager_jit.cache_info()
    assert (after["tapes"], after["made"]) == (before["tapes"], before["made"])
