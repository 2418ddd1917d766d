"""``fnarray.lax``: the primitives' thin wrappers and structured control flow (as ``jax.lax``).

This module is wiring only. The wrappers live in ``fnarray/core/lax.py`` (which the rest of
the library imports as ``fnarray.core.lax``; its ``__all__`` is the list re-exported here),
and control flow lives in ``fnarray/transforms/``. ``core/`` may not import ``transforms/``
(docs/design.md, "Layers"), so the public ``fnarray.lax`` is this package-level module that
imports both.
"""

from __future__ import annotations

from fnarray.core import lax as _core_lax
from fnarray.core import lax_conv as _lax_conv
from fnarray.core import lax_windows as _lax_windows
from fnarray._associative_scan import associative_scan  # noqa: F401
from fnarray.transforms.control_flow import cond, fori_loop, scan, switch, while_loop  # noqa: F401
from fnarray._lax_map import map  # noqa: A004,F401  (jax.lax.map)
from fnarray.core import linalg  # noqa: F401  (fnarray.lax.linalg, as jax.lax.linalg)
from fnarray.core import collectives as _collectives
from fnarray.transforms import collective_rules as _collective_rules  # noqa: F401  (registers their rules)

_CONTROL = ["associative_scan", "cond", "fori_loop", "map", "scan", "switch", "while_loop"]
_CORE = [n for n in _core_lax.__all__ if n not in _CONTROL]
globals().update({n: getattr(_core_lax, n) for n in _CORE})
_CONV = list(_lax_conv.__all__)  # convolutions (fnarray/core/lax_conv.py)
globals().update({n: getattr(_lax_conv, n) for n in _CONV})
_WINDOWS = list(_lax_windows.__all__)  # reduce_window and its shortcuts (core/lax_windows.py)
globals().update({n: getattr(_lax_windows, n) for n in _WINDOWS})
_COLLECTIVES = ["all_gather", "all_to_all", "axis_index", "axis_size", "pcast", "pmax", "pmean", "pmin", "ppermute",
               "psum",
                "psum_scatter"]
globals().update({n: getattr(_collectives, n) for n in _COLLECTIVES})
from fnarray.transforms.shard_map import with_sharding_constraint  # noqa: E402,F401  (jax.lax's)
from fnarray import _lax_more  # noqa: E402  (dynamic_slice_in_dim, top_k, Precision, ...: fnarray/_lax_more.py)

from fnarray._lax_reduce import reduce  # noqa: E402,F401,A004  (jax.lax.reduce: fnarray/_lax_reduce.py)

from fnarray import _lax_special  # noqa: E402  (igamma, zeta, split, tile...: fnarray/_lax_special.py)

from fnarray._implicit import custom_linear_solve, custom_root  # noqa: E402,F401  (fnarray/_implicit.py)

_MORE = list(_lax_more.__all__) + list(_lax_special.__all__) + ["reduce", "custom_linear_solve", "custom_root"]
globals().update({n: getattr(_lax_special, n) for n in _lax_special.__all__})
globals().update({n: getattr(_lax_more, n) for n in _lax_more.__all__})

__all__ = sorted(set(_CORE + _CONTROL + _CONV + _WINDOWS + _COLLECTIVES + _MORE + ["with_sharding_constraint"]))


def __getattr__(name):
    # Names of core/lax.py outside its __all__ (helpers a caller reached through fnarray.lax before).
    if not name.startswith("__"):
        try:
            return getattr(_core_lax, name)
        except AttributeError:
            pass
    raise AttributeError(f"module 'fnarray.lax' has no attribute {name!r}")


def __dir__():
    return list(__all__)  # only the public names (the helpers above stay reachable by attribute)
