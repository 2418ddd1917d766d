"""Why a primitive has no kernel on the kernel backends (opencl, webgpu): the reason their ``supports`` gives,
which the FallbackWarning and the support matrix (``python -m fnarray primitives``) show."""

from __future__ import annotations

from fnarray.core import linalg as L

__all__ = ["NO_KERNEL", "no_kernel_reason", "EXPECTED_FALLBACKS", "EXPECTED_DECOMPOSITIONS"]

#: Primitives that have no kernel, with the reason (a primitive that gets a kernel is scheduled, and its
#: backend's ``supports`` no longer reaches this table).
NO_KERNEL = {
    L.qr_p: ("qr runs on numpy (LAPACK) by design: Householder QR is a chain of dependent column steps, "
             "too sequential for a kernel to pay"),
    L.eigh_p: "eigh runs on numpy (LAPACK) by design: an iterative eigensolver, too sequential for a kernel to pay",
    L.svd_p: "svd runs on numpy (LAPACK) by design: an iterative SVD, too sequential for a kernel to pay",
}
# cholesky, triangular_solve and lu have kernels (kernels/groups/linalg.py).

#: What the parity cases (``fnarray.testing.cases``) run on numpy:0 on the opencl and webgpu backends, and why
#: (``Backend.expected_fallbacks``; written out by name, not derived from the tables ``supports`` reads, so that
#: a kernel lost from those fails ``tests/test_parity.py`` instead of joining this list).
#: ``Backend.expected_decompositions`` of the kernel backends (webgpu adds erfc: ``webgpu.py``).
EXPECTED_DECOMPOSITIONS = frozenset({"digamma", "erf_inv", "sharding_constraint", "threefry2x32"})

EXPECTED_FALLBACKS = {
    ("qr", "*"): "by design: Householder QR is a chain of dependent column steps (NO_KERNEL)",
    ("eigh", "*"): "by design: an iterative eigensolver, too sequential for a kernel (NO_KERNEL)",
    ("svd", "*"): "by design: an iterative SVD, too sequential for a kernel (NO_KERNEL)",
    ("cholesky", "complex64"): "the cholesky kernel has no complex form (kernels/facts.py)",
    # the low-bit dtypes compute in float32/int32 between conversions (core/low_bit_upcast.py), but for this
    ("nextafter", "float8_e4m3fn"): "float8 nextafter steps the byte's code, not the float32 value: not upcast",
    ("nextafter", "float8_e5m2"): "float8 nextafter steps the byte's code, not the float32 value: not upcast",
}


def no_kernel_reason(prim, backend: str) -> str:
    """The reason ``backend`` gives for running ``prim`` (which it has no kernel for) on numpy."""
    r = NO_KERNEL.get(prim)
    return r if r is not None else f"the {backend} backend has no kernel for {prim.name}"
