"""Command line (also the ``fnarray`` console script).

- ``python -m fnarray doctor [--json]``: the installation, drivers and usable backends.
- ``python -m fnarray check module:function [--device D ...] [--rtol R]``: ``fa.check`` of a function on the
  example inputs it declares (``@fa.check.example(*args)`` or a ``function.example_args`` tuple); exits 0
  when every device agrees with numpy:0, 1 when one disagrees, 2 on a usage error (``CHECK_EXIT_STATUS``).
- ``python -m fnarray primitives [NAME] [--wide] [--write]``: every primitive's rules and per-backend status
  (``docs/primitives.md``).
- ``python -m fnarray tune module:function [ARG ...] [--device D ...] [--mode full|fast] [--cache-dir DIR]``:
  tunes the function's generated kernels on the kernel devices ahead of time (``fa.config.autotune``) and
  prints the table of choices (``fnarray/_tune_cmd.py``); ARG is an input spec such as ``float32[1024,1024]``,
  else the function's declared example inputs.
"""

from __future__ import annotations

import argparse
import sys

CHECK_EXIT_STATUS = ("exit status: 0 when every device agrees with numpy:0; 1 when a device disagrees or raises; "
                     "2 on a usage error (a module that cannot be imported, a missing function, a function "
                     "without example inputs, an unknown or unusable device)")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="fnarray", description="fnarray command line tools")
    sub = ap.add_subparsers(dest="command", required=True)
    d = sub.add_parser("doctor", help="report the hardware, drivers, libraries and usable backends")
    d.add_argument("--json", action="store_true", help="print the report as JSON")
    c = sub.add_parser("check", help="run a function eagerly and under jit on every device against numpy:0",
                       description="Run module:function eagerly and under jit on every device (or each --device) "
                                   "on its declared example inputs and compare each with numpy:0.",
                       epilog=CHECK_EXIT_STATUS)
    c.add_argument("target", help="module:function (the function declares example inputs with "
                                  "@fa.check.example(*args) or an example_args attribute)")
    c.add_argument("--device", action="append", default=None, help="a device to check (repeatable; default: all)")
    c.add_argument("--rtol", type=float, default=None, help="relative tolerance (default: by dtype)")
    t = sub.add_parser("tune", help="tune a function's generated kernels on the kernel devices and print the choices",
                       description="Run module:function under jit on each opencl/webgpu device (or each --device) "
                                   "with fa.config.autotune='full' (or --mode), so that every tunable kernel choice "
                                   "is measured and kept in the compilation cache folder; print the table.")
    t.add_argument("target", help="module:function")
    t.add_argument("args", nargs="*", help="input specs such as float32[1024,1024] or i32[16] (random values); "
                                           "default: the function's example inputs (@fa.check.example)")
    t.add_argument("--device", action="append", default=None, help="a device to tune on (repeatable; default: "
                                                                   "every opencl and webgpu device)")
    t.add_argument("--mode", choices=("full", "fast"), default="full", help="the autotune mode (default full)")
    t.add_argument("--cache-dir", default=None, help="where choices are kept (default: FNARRAY_CACHE_DIR)")
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
    elif args.command == "tune":
        from fnarray._tune_cmd import tune_command
        return tune_command(args)
    return 0


def _usage_error(message: str) -> int:
    print(f"fnarray check: {message}", file=sys.stderr)
    return 2


def _check_command(args) -> int:
    """``python -m fnarray check``: see ``CHECK_EXIT_STATUS`` for what it returns."""
    from fnarray._target import resolve_target
    fn = resolve_target(args.target, _usage_error)
    if isinstance(fn, int):
        return fn
    ex_args = getattr(fn, "example_args", None)
    if ex_args is None:
        return _usage_error(f"{args.target} declares no example inputs; decorate it with "
                            "@fa.check.example(*args, **kwargs) or set its example_args attribute (a tuple)")
    import fnarray as fa
    devices = None
    if args.device is not None:
        devices = []
        for name in args.device:
            try:
                devices.append(fa.get_device(name))
            except (ValueError, TypeError, fa.BackendUnavailable) as e:
                usable = ", ".join(str(d) for d in fa.devices(all_backends=True))
                return _usage_error(f"unknown or unusable device {name!r} ({e}); usable devices: {usable}")
    from fnarray._check import check
    report = check(fn, *ex_args, devices=devices, rtol=args.rtol, **getattr(fn, "example_kwargs", {}))
    print(report)
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
