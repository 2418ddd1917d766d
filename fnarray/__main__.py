"""Command line (also the ``fnarray`` console script).

- ``python -m fnarray doctor [--json]``: the installation, drivers and usable backends.
- ``python -m fnarray check module:function [--device D ...] [--rtol R]``: ``fa.check`` of a function on the
  example inputs it declares (``@fa.check.example(*args)`` or a ``function.example_args`` tuple); exits 1
  when a device disagrees with numpy:0.
- ``python -m fnarray primitives [NAME] [--write]``: every primitive's rules and per-backend status
  (``docs/primitives.md``).
"""

from __future__ import annotations

import argparse
import sys


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="fnarray", description="fnarray command line tools")
    sub = ap.add_subparsers(dest="command", required=True)
    d = sub.add_parser("doctor", help="report the hardware, drivers, libraries and usable backends")
    d.add_argument("--json", action="store_true", help="print the report as JSON")
    c = sub.add_parser("check", help="run a function eagerly and under jit on every device against numpy:0")
    c.add_argument("target", help="module:function (the function declares example inputs with "
                                  "@fa.check.example(*args) or an example_args attribute)")
    c.add_argument("--device", action="append", default=None, help="a device to check (repeatable; default: all)")
    c.add_argument("--rtol", type=float, default=None, help="relative tolerance (default: by dtype)")
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
    elif args.command == "check":
        return _check_command(args)
    return 0


def _check_command(args) -> int:
    import importlib
    import os
    modname, _, attr = args.target.partition(":")
    if not modname or not attr:
        print(f"fnarray check: expected module:function, got {args.target!r}", file=sys.stderr)
        return 2
    sys.path.insert(0, os.getcwd())
    fn = importlib.import_module(modname)
    for part in attr.split("."):
        fn = getattr(fn, part)
    ex_args = getattr(fn, "example_args", None)
    if ex_args is None:
        print(f"fnarray check: {args.target} declares no example inputs; decorate it with "
              "@fa.check.example(*args, **kwargs) or set its example_args attribute (a tuple)", file=sys.stderr)
        return 2
    from fnarray._check import check
    report = check(fn, *ex_args, devices=args.device, rtol=args.rtol, **getattr(fn, "example_kwargs", {}))
    print(report)
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
