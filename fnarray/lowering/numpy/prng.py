"""The NumPy reference of ``threefry2x32`` (``fnarray.core.prng``'s own)."""

from __future__ import annotations

from fnarray.lowering.numpy.common import direct
from fnarray.core.prng import threefry2x32_p, threefry2x32_reference


direct(threefry2x32_p, threefry2x32_reference)
