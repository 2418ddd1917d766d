"""Command line: ``python -m fnarray doctor [--json]`` (also the ``fnarray`` console script)."""

from __future__ import annotations

import argparse
import sys


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="fnarray", description="fnarray command line tools")
    sub = ap.add_subparsers(dest="command", required=True)
    d = sub.add_parser("doctor", help="report the hardware, drivers, libraries and usable backends")
    d.add_argument("--json", action="store_true", help="print the report as JSON")
    args = ap.parse_args(argv)
    if args.command == "doctor":
        from fnarray._doctor import doctor
        doctor(json_output=args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
