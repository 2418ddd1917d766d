"""Debugging inside transformed code: ``fnarray.debug.print`` and ``fnarray.debug.callback``.

As ``jax.debug.print`` / ``jax.debug.callback``: the call becomes one ``debug_callback`` equation, an
*effect* with no outputs that dead-code elimination keeps and every backend runs in program order:
the numpy backend calls the function in its generated code, the jax backend through
``jax.debug.callback(ordered=True)``, and mlx, opencl and webgpu cut the program at the callback and
run it on the host (no ``FallbackWarning``: that is where a callback belongs; host-driven loops call it
every iteration). Under ``vmap`` the function is called once per example, in index order; under
``grad`` it sees the primal values of the forward pass. The function receives NumPy arrays.
A browser bundle (``fnarray.export.webgpu``) has no Python to call: exporting a function that uses
these raises ``UnsupportedOnDevice`` naming ``debug_callback``.
"""

from __future__ import annotations

import builtins

import numpy as np

from fnarray import tree_util
from fnarray.core import primitives as P
from fnarray.core import tracing
from fnarray.core.array import Array
from fnarray.core.errors import check_callable

__all__ = ["print", "callback", "visualize_array_sharding"]


class _HostCallback:
    """The hashable ``callback`` param of a ``debug_callback`` equation.

    Equal when the function and the non-array leaves are equal, so that re-tracing the same code gives
    equal programs (and eager caches stay bounded).
    """

    __slots__ = ("fn", "static", "_key")

    def __init__(self, fn, static):
        self.fn, self.static = fn, static  # static: ((leaf position, value), ...) of the non-array leaves
        try:
            hash(static)
            self._key = (fn, static)
        except TypeError:
            self._key = (fn, id(self))

    def __hash__(self):
        return hash(self._key)

    def __eq__(self, other):
        return type(other) is _HostCallback and self._key == other._key

    def __repr__(self):
        return getattr(self.fn, "__name__", type(self.fn).__name__)

    def _call(self, in_tree, arrays):
        leaves, it, n = [], iter(arrays), len(arrays) + len(self.static)
        static = dict(self.static)
        for i in range(n):
            leaves.append(static[i] if i in static else next(it))
        args, kwargs = tree_util.tree_unflatten(in_tree, leaves)
        return self.fn(*args, **kwargs)

    def run(self, in_tree, arrays, nbatch=0):
        """Call the function on NumPy ``arrays``; ``nbatch`` leading axes are iterated (vmap), C order."""
        if nbatch == 0:
            self._call(in_tree, arrays)
            return
        batch = arrays[0].shape[:nbatch] if arrays else ()
        for idx in np.ndindex(*batch):
            self._call(in_tree, [a[idx] for a in arrays])


class _Format:
    """``print(fmt.format(*args, **kwargs))``; hashable by the format string."""

    __slots__ = ("fmt", "__name__")

    def __init__(self, fmt):
        self.fmt = fmt
        self.__name__ = f"print {fmt!r}"

    def __call__(self, *args, **kwargs):
        builtins.print(self.fmt.format(*args, **kwargs), flush=True)

    def __hash__(self):
        return hash((_Format, self.fmt))

    def __eq__(self, other):
        return type(other) is _Format and other.fmt == self.fmt


def _is_value(x) -> bool:
    return isinstance(x, Array) or tracing.is_scalar(x) or isinstance(x, np.ndarray)


def _split_args(args, kwargs):
    """``(in_tree, static, dyn)`` of a host callback's arguments: the structure of ``(args, kwargs)``, its
    non-array leaves as ``(position, value)`` pairs (the callback param's key), and its arrays and scalars
    (the equation's operands), in order (``callback`` here, ``fnarray.pure_callback``)."""
    leaves, in_tree = tree_util.tree_flatten((args, kwargs))
    static, dyn = [], []
    for i, x in enumerate(leaves):
        if _is_value(x):
            dyn.append(x)
        else:
            static.append((i, x))
    return in_tree, tuple(static), dyn


def callback(fn, *args, **kwargs) -> None:
    """Call ``fn(*args, **kwargs)`` on the host with concrete values, from inside ``jit``, ``vmap``,
    ``grad`` and control-flow bodies, in program order (``jax.debug.callback``).

    Args:
      fn: a Python callable; its return value is ignored. It receives NumPy arrays where ``args`` and
        ``kwargs`` (pytrees) hold arrays, and the other leaves unchanged.
      *args, **kwargs: pytrees of arrays, scalars and other (hashable) Python values.
    Returns: ``None``.
    Raises: ``TypeError`` if ``fn`` is not callable. Under ``vmap`` ``fn`` runs once per example (index
      order); under ``grad`` it sees the forward pass's primal values and does not change derivatives.
    """
    check_callable(fn, "fnarray.debug.callback", "fn (its first argument)")
    in_tree, static, dyn = _split_args(args, kwargs)
    dyn = [np.asarray(x) if isinstance(x, np.ndarray) else x for x in dyn]
    cb = _HostCallback(fn, static)
    if tracing.current_dynamic().level == 0 and not any(isinstance(x, tracing.Tracer) for x in dyn):
        cb.run(in_tree, [np.asarray(x) for x in dyn])  # eager: call now, nothing to stage
        return None
    dyn = [_to_array(x) if isinstance(x, np.ndarray) else x for x in dyn]
    P.debug_callback.bind(*dyn, callback=cb, in_tree=in_tree)
    return None


def _to_array(x):
    import fnarray.numpy as fnp
    return fnp.asarray(x)


def print(fmt: str, *args, **kwargs) -> None:  # noqa: A001 (JAX's name)
    """Print ``fmt.format(*args, **kwargs)`` with concrete values from inside transformed code
    (``jax.debug.print``).

    Args:
      fmt: a ``str.format`` string, e.g. ``"x = {x}, sum = {}"``.
      *args, **kwargs: the values (pytrees of arrays); arrays arrive as NumPy arrays.
    Returns: ``None``.
    Raises: ``TypeError`` if ``fmt`` is not a string; ``ValueError`` if it names values not given. Under ``vmap``
    one line per example, in index order.
    """
    if not isinstance(fmt, str):
        raise TypeError(f"fnarray.debug.print needs a format string first, got {type(fmt).__name__}")
    _check_fields(fmt, args, kwargs)
    callback(_Format(fmt), *args, **kwargs)


def visualize_array_sharding(arr, *, use_color: bool = False, scale: float = 1.0, min_width: int = 9,
                             max_width: int = 80, color_map=None) -> None:
    """Print which devices hold which block of a 1-d or 2-d array (``jax.debug.visualize_array_sharding``).

    A grid of the array's blocks, rows and columns as its sharding splits them, each cell naming the devices
    that hold that block (several for a replicated one). Plain text: JAX draws the same grid with ``rich``.

    Args:
      arr: an array of rank 1 or 2 (a global array or one on a single device).
      use_color, scale, min_width, max_width, color_map: JAX's; only ``min_width``/``max_width`` (a cell's width
        bounds in characters) are used.
    Returns: ``None``.
    Raises: ``ValueError`` for another rank.
    """
    shape = tuple(arr.shape)
    if len(shape) not in (1, 2):
        raise ValueError(f"visualize_array_sharding: an array of rank 1 or 2 is needed, got shape {shape}")
    shape2 = shape if len(shape) == 2 else (1,) + shape
    sharding = arr.sharding
    index_map = sharding.devices_indices_map(shape) if hasattr(sharding, "devices_indices_map") else \
        {next(iter(sharding.device_set)): tuple(slice(None) for _ in shape)}
    cells: dict = {}
    for dev, index in index_map.items():
        index = ((slice(None),) if len(shape) == 1 else ()) + tuple(index)
        key = tuple(s.indices(n)[:2] for s, n in zip(index, shape2, strict=True))
        cells.setdefault(key, []).append(str(dev))
    rows = sorted({k[0] for k in cells})
    cols = sorted({k[1] for k in cells})
    text = {k: ",".join(sorted(v, key=lambda d: (d.split(":")[0], int(d.split(":")[1])))) for k, v in cells.items()}
    width = max(min_width, min(max_width, max(len(t) for t in text.values()) + 2))
    line = "+" + "+".join("-" * width for _ in cols) + "+"
    out = [line]
    for r in rows:
        out.append("|" + "|".join(text.get((r, c), "").center(width)[:width] for c in cols) + "|")
        out.append(line)
    builtins.print("\n".join(out), flush=True)


def _check_fields(fmt, args, kwargs):
    """Raise now (not when the program runs) where ``fmt`` names values that were not given."""
    import string
    auto = 0
    try:
        fields = [f for _, f, _, _ in string.Formatter().parse(fmt) if f is not None]
    except ValueError as e:
        raise ValueError(f"fnarray.debug.print: {fmt!r} is not a valid format string ({e})") from None
    for f in fields:
        head = f.split(".", 1)[0].split("[", 1)[0]
        if head == "":
            head, auto = str(auto), auto + 1
        if head.isdigit() and int(head) >= len(args):
            raise ValueError(f"fnarray.debug.print: the format {fmt!r} needs positional value {head}, but "
                             f"{len(args)} were given")
        if not head.isdigit() and head not in kwargs:
            raise ValueError(f"fnarray.debug.print: the format {fmt!r} names {head!r}, which was not given as a "
                             f"keyword (given: {sorted(kwargs)})")
