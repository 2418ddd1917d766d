"""Where the test suite's time goes: per-file sums of the phases a run recorded with ``FNARRAY_TEST_DURATIONS``.

Run the suite as CI does with the variable set (``tests/conftest.py`` appends one JSON line per test phase from
the xdist controller), then sum it here::

    FNARRAY_TEST_DURATIONS=/tmp/durations.jsonl .venv/bin/python -m pytest -q -n 2
    python benchmarks/ci_time.py /tmp/durations.jsonl [--files 30] [--tests 15]

Prints the worker-seconds of every phase together, then the heaviest files (tests, seconds, cumulative share) and
the slowest single tests. Worker-seconds over the number of xdist workers approximates the run's wall time.
Asserts nothing.
"""

from __future__ import annotations

import argparse
import collections
import json


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("path")
    ap.add_argument("--files", type=int, default=30)
    ap.add_argument("--tests", type=int, default=15)
    a = ap.parse_args(argv)
    seen, by_file, count, single = set(), collections.Counter(), collections.Counter(), collections.Counter()
    with open(a.path) as f:
        for line in f:
            r = json.loads(line)
            if (r["id"], r["when"]) in seen:   # a rerun's phases once
                continue
            seen.add((r["id"], r["when"]))
            name = r["id"].split("::")[0]
            by_file[name] += r["seconds"]
            single[r["id"]] += r["seconds"]
            count[name] += r["when"] == "call"
    total = sum(by_file.values())
    print(f"{total:.0f} worker-seconds over {sum(count.values())} tests")
    print("| file | tests | seconds | cumulative |\n|---|---:|---:|---:|")
    running = 0.0
    for name, secs in by_file.most_common(a.files):
        running += secs
        print(f"| `{name}` | {count[name]} | {secs:.0f} | {100 * running / total:.0f}% |")
    for test, secs in single.most_common(a.tests):
        print(f"{secs:7.1f} s  {test}")


if __name__ == "__main__":
    main()
