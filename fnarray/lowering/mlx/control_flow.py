"""The mlx backend's rules for calls (``call``, ``remat``, custom derivatives' calls: inlined as generated
programs). ``while``, ``scan`` and ``cond`` run from the host (``fnarray.devices.host_control``)."""

from __future__ import annotations

from fnarray.core.subprograms import CALL_PROGRAM
from fnarray.lowering.mlx.common import RULES
from fnarray.lowering.mlx.program import generated


def _call(key):
    def factory(params, in_avals, out_avals):
        fn = generated(params[key]).fn
        return lambda *args: fn(*args)
    return factory


for _p, _k in CALL_PROGRAM.items():
    RULES[_p] = _call(_k)
