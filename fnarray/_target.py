"""``module:function`` resolved for the command line (``python -m fnarray check``, ``tune``)."""

from __future__ import annotations

import sys

__all__ = ["resolve_target"]


def resolve_target(target: str, usage_error):
    """The callable that ``module:function`` names (the current folder first on ``sys.path``), or the exit status
    of ``usage_error(message)`` (an int) when it cannot be found."""
    import importlib
    import os
    modname, _, attr = target.partition(":")
    if not modname or not attr:
        return usage_error(f"expected module:function, got {target!r}")
    sys.path.insert(0, os.getcwd())
    try:
        fn = importlib.import_module(modname)
    except ModuleNotFoundError as e:
        if e.name is None or not (modname == e.name or modname.startswith(e.name + ".")):
            raise  # the module exists but one of its own imports is missing: its traceback says which
        return usage_error(f"no module named {modname!r} (looked in the current folder {os.getcwd()} "
                           "and on sys.path; give a module path such as mypkg.mymod:function)")
    for part in attr.split("."):
        if not hasattr(fn, part):
            names = sorted(n for n in dir(fn) if not n.startswith("_") and callable(getattr(fn, n, None)))
            return usage_error(f"{target}: {getattr(fn, '__name__', modname)!s} has no attribute {part!r} "
                               f"(callables there: {', '.join(names[:20]) or 'none'})")
        fn = getattr(fn, part)
    if not callable(fn):
        # an int here would be taken for an exit status by the caller, silently
        return usage_error(f"{target} is not a function (a value of type {type(fn).__name__}); name a "
                           f"function defined in {modname}")
    return fn
