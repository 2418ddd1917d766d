"""What differs between the signature a ``Compiled`` was made for and the one it is called with.

A signature is jit's cache key ``(input structure, input abstract values, static arguments)``. Printing the
two avals tuples side by side hides a difference of structure (a list for a tuple) or of ``weak_type``;
this names the first thing that differs, in words.
"""

from __future__ import annotations

__all__ = ["describe_mismatch"]


def _aval_str(a) -> str:
    s = a.str_short()
    return s + " (weakly typed: a Python scalar)" if getattr(a, "weak_type", False) else s


def describe_mismatch(expected, got) -> str:
    """A sentence naming what differs between two signatures ``(in_tree, avals, statics)``."""
    (t0, a0, s0), (t1, a1, s1) = expected, got
    if t0 != t1:
        return (f"the arguments' structure differs: made for {t0}, called with {t1} (a list is not a tuple, "
                "and dict keys and None leaves count)")
    parts = []
    for i, (x, y) in enumerate(zip(a0, a1)):
        if x != y:
            parts.append(f"leaf {i}: made for {_aval_str(x)}, called with {_aval_str(y)}")
    if parts:
        more = f" (and {len(parts) - 3} more)" if len(parts) > 3 else ""
        return "the argument types differ: " + "; ".join(parts[:3]) + more
    if s0 != s1:
        return f"the static arguments differ: made for {s0!r}, called with {s1!r}"
    return "the signatures differ"
