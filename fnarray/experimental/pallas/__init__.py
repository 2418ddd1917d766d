"""``fnarray.experimental.pallas``: kernels users write, with JAX's Pallas API (``import ... as pl``).

A kernel is a Python function of refs (``x_ref``, ``o_ref``, ...) that reads blocks with ``x_ref[...]`` or
``pl.load``, computes with ``fnarray.numpy`` and writes with ``o_ref[...] = v`` or ``pl.store``;
``pl.pallas_call(kernel, out_shape, grid=, in_specs=, out_specs=)`` runs it once per program instance of
the grid. One traced body (``fnarray.core.pallas``) serves every backend: numpy interprets it (the reference,
and ``interpret=True`` everywhere), jax runs it through ``jax.experimental.pallas``, opencl and webgpu render
it into fnarray's kernel IR (a work-group per program instance), mlx interprets it. See ``docs/kernels.md``.

Reference: JAX's Pallas (https://docs.jax.dev/en/latest/pallas/): ``pallas_call``, ``BlockSpec``,
``program_id``, ``num_programs``, ``ds``, ``load``/``store`` with ``mask``/``other``, ``when``,
``atomic_add``/``atomic_max``/``atomic_min``, ``multiple_of``.
"""

from fnarray.experimental.pallas._api import (  # noqa: F401
    ANY,
    BlockSpec,
    GridSpec,
    Local,
    SMEM,
    VMEM,
    ShapeDtypeStruct,
    Slice,
    atomic_add,
    atomic_max,
    atomic_min,
    cdiv,
    dot,
    ds,
    dslice,
    load,
    max_contiguous,
    multiple_of,
    num_programs,
    pallas_call,
    program_id,
    store,
    when,
)
from fnarray.experimental.pallas._autotune import autotune  # noqa: F401

__all__ = ["ANY", "BlockSpec", "GridSpec", "Local", "SMEM", "VMEM", "ShapeDtypeStruct", "Slice", "atomic_add",
           "atomic_max", "atomic_min", "autotune", "cdiv", "dot", "ds", "dslice", "load", "max_contiguous",
           "multiple_of", "num_programs", "pallas_call", "program_id", "store", "when"]
