"""``fnarray.lax``: the thin typed wrappers over the primitives (as ``jax.lax``); only public names.

The functions are defined in ``fnarray.core.lax`` (the layer ``fnarray.numpy`` builds on); this module is
their public face: ``__all__`` lists them and ``dir(fnarray.lax)`` shows nothing else.
"""

from fnarray.core import lax as _impl

__all__ = sorted(_impl.__all__)
globals().update({_n: getattr(_impl, _n) for _n in __all__})


def __dir__():
    return list(__all__)
