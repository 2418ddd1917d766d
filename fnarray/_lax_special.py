"""More of ``jax.lax``'s public names: shape helpers and the special functions under their XLA names.

``broadcast_shapes``, ``broadcast_to_rank``, ``tile``, ``split``, ``unstack`` and ``empty`` are composites of
the namespace; ``igamma``, ``igammac``, ``betainc``, ``bessel_i0e``, ``bessel_i1e``, ``polygamma`` and ``zeta``
are ``fnarray.scipy.special``'s functions under ``jax.lax``'s names and argument order (jax.readthedocs.io,
``jax.lax``). Wiring only: the formulas and their derivatives live in ``fnarray/scipy/special.py``.
"""

from __future__ import annotations

__all__ = ["bessel_i0e", "bessel_i1e", "betainc", "broadcast_shapes", "broadcast_to_rank", "empty", "igamma",
           "igammac", "polygamma", "split", "tile", "unstack", "zeta"]


def _fnp():
    import fnarray.numpy as fnp
    return fnp


def _special():
    from fnarray.scipy import special
    return special


def broadcast_shapes(*shapes):
    """The shape that ``shapes`` broadcast to (``jax.lax.broadcast_shapes``), a tuple of ints.

    Raises: ``ValueError`` (``ShapeError``) when they do not broadcast.
    """
    return tuple(_fnp().broadcast_shapes(*shapes))


def broadcast_to_rank(x, rank):
    """``x`` with leading axes of size 1 added up to ``rank`` (``jax.lax.broadcast_to_rank``); unchanged when
    its rank is already at least ``rank``."""
    fnp = _fnp()
    x = fnp.asarray(x)
    return fnp.reshape(x, (1,) * max(rank - x.ndim, 0) + x.shape)


def tile(operand, reps):
    """``operand`` repeated ``reps[i]`` times along axis ``i`` (``jax.lax.tile``; ``numpy.tile``)."""
    return _fnp().tile(operand, tuple(reps))


def split(operand, sizes, axis=0):
    """``operand`` cut along ``axis`` into consecutive pieces of the given ``sizes`` (``jax.lax.split``).

    Args: operand: an array. sizes: ints summing to ``operand.shape[axis]``. axis: the axis to cut.
    Returns: a list of arrays. Raises: ``ValueError`` when the sizes do not sum to the axis' length.
    """
    fnp = _fnp()
    x = fnp.asarray(operand)
    sizes = [int(s) for s in sizes]
    if sum(sizes) != x.shape[axis]:
        raise ValueError(f"split: sizes {sizes} sum to {sum(sizes)}, but axis {axis} of shape {x.shape} has "
                         f"length {x.shape[axis]}; give sizes that add up to it")
    bounds = [sum(sizes[:i]) for i in range(1, len(sizes))]
    return list(fnp.split(x, bounds, axis=axis))


def unstack(x, axis=0):
    """The slices of ``x`` along ``axis``, as a tuple (``jax.lax.unstack``)."""
    return tuple(_fnp().unstack(x, axis=axis))


def empty(shape, dtype, *, out_sharding=None):
    """An array of ``shape`` and ``dtype`` whose contents do not matter (``jax.lax.empty``): zeros here."""
    return _fnp().zeros(shape, dtype)


def igamma(a, x):
    """The regularized lower incomplete gamma function ``P(a, x)`` (``jax.lax.igamma``): ``special.gammainc``."""
    return _special().gammainc(a, x)


def igammac(a, x):
    """The regularized upper incomplete gamma function ``Q(a, x)`` (``jax.lax.igammac``): ``special.gammaincc``."""
    return _special().gammaincc(a, x)


def betainc(a, b, x):
    """The regularized incomplete beta function (``jax.lax.betainc``): ``special.betainc``."""
    return _special().betainc(a, b, x)


def bessel_i0e(x):
    """The exponentially scaled modified Bessel function of order 0 (``jax.lax.bessel_i0e``): ``special.i0e``."""
    return _special().i0e(x)


def bessel_i1e(x):
    """The exponentially scaled modified Bessel function of order 1 (``jax.lax.bessel_i1e``): ``special.i1e``."""
    return _special().i1e(x)


def polygamma(m, x):
    """The ``m``-th derivative of the digamma function (``jax.lax.polygamma``): ``special.polygamma``.

    ``m`` may be floating, as ``jax.lax`` takes it in ``x``'s dtype (its values are whole numbers); it is
    converted to ``int32`` for ``special.polygamma``.
    """
    fnp = _fnp()
    m = fnp.asarray(m)
    return _special().polygamma(fnp.astype(m, fnp.int32) if fnp.issubdtype(m.dtype, fnp.floating) else m, x)


def zeta(x, q):
    """The Hurwitz zeta function ``sum_k (k + q)**-x`` (``jax.lax.zeta``): ``special.zeta``."""
    return _special().zeta(x, q)
