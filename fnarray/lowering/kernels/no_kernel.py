"""Why a primitive has no kernel on the kernel backends (opencl, webgpu): the reason their ``supports`` gives,
which the FallbackWarning and the support matrix (``python -m fnarray primitives``) show."""

from __future__ import annotations

from fnarray.core import linalg as L

__all__ = ["NO_KERNEL", "no_kernel_reason"]

_ITERATIVE = ("{name} has no kernel: it runs on numpy (LAPACK) by design, its algorithm (Householder sweeps, "
              "iterative eigen/singular solvers) being sequential over the columns")

#: Primitives that deliberately have no kernel, with the reason.
NO_KERNEL = {p: _ITERATIVE.format(name=p.name) for p in (L.qr_p, L.eigh_p, L.svd_p)}


def no_kernel_reason(prim, backend: str) -> str:
    """The reason ``backend`` gives for running ``prim`` (which it has no kernel for) on numpy."""
    r = NO_KERNEL.get(prim)
    return r if r is not None else f"the {backend} backend has no kernel for {prim.name}"
