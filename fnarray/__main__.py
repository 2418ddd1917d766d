"""Command line: ``python -m fnarray doctor [--json]`` and ``python -m fnarray primitives [NAME] [--write]``
(also the ``fnarray`` console script)."""

from __future__ import annotations

import argparse
import sys


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="fnarray", description="fnarray command line tools")
    sub = ap.add_subparsers(dest="command", required=True)
    d = sub.add_parser("doctor", help="report the hardware, drivers, libraries and usable backends")
    d.add_argument("--json", action="store_true", help="print the report as JSON")
    sub.add_parser("primitives", add_help=False,
                   help="every primitive's rules and per-backend status (NAME: one primitive, --write: the docs)")
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["primitives"]:
        from fnarray._primitives_cmd import main as primitives_main
        return primitives_main(argv[1:])
    args = ap.parse_args(argv)
    if args.command == "doctor":
        from fnarray._doctor import doctor
        doctor(json_output=args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
