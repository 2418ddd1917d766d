"""The numpy backend's rules for the collectives and the SPMD primitives (one device: errors naming what works)."""

from __future__ import annotations

import ml_dtypes

from fnarray.core import primitives as P
from fnarray.lowering.numpy.common import IMPLS, direct
from fnarray.core import collectives as C
from fnarray.core import spmd as S


# The collectives and the SPMD primitives (fnarray.core.collectives, fnarray.core.spmd). A collective has no
# meaning on one device outside a named axis: under vmap(axis_name=) its batching rule replaces it before any
# backend sees it, and shard_map over a mesh of one device runs as such a vmap.


def _no_collective(params, in_avals, out_avals):
    def f(*args):
        from fnarray.core.errors import UnsupportedOnDevice
        raise UnsupportedOnDevice(
            f"a collective over axis {params['axis_name']!r} reached the numpy backend outside a named axis: run it "
            "inside fnarray.vmap(f, axis_name=...) (every backend), or in fnarray.shard_map over a mesh of the jax "
            "or mlx backend; numpy, opencl and webgpu have no distributed engine")
    return f


def _no_shard_map(params, in_avals, out_avals):
    def f(*args):
        from fnarray.core.errors import UnsupportedOnDevice
        mesh = params["mesh"]
        raise UnsupportedOnDevice(
            f"shard_map over {mesh!r} reached the numpy backend: it runs on the {mesh.backend} backend, where a "
            f"jitted function holding it runs when its inputs are there (fa.device_put(x, NamedSharding(mesh, "
            f"spec))) or FNARRAY_DEVICE={mesh.backend} is set")
    return f


for _p in C.COLLECTIVES:
    IMPLS[_p] = _no_collective
IMPLS[S.shard_map_p] = _no_shard_map
direct(S.sharding_constraint_p, lambda x: x)

_missing = [p.name for p in P.PRIMITIVES.values() if p not in IMPLS]
if _missing:  # every primitive needs a reference implementation
    raise RuntimeError(f"numpy backend lacks implementations for {_missing}")

del ml_dtypes
