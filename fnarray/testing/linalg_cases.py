"""Parity cases of the linear-algebra primitives (``fnarray/core/linalg.py``), added to ``cases.CASES``.

Inputs are well conditioned (eigenvalues and singular values well apart), so every backend's LAPACK (or
kernel) agrees within float32 tolerance. Eigenvectors and singular vectors are unique only up to a sign (a
phase for complex): ``canonical`` fixes it before results are compared (``tests/test_parity.py``).
"""

from __future__ import annotations

import numpy as np

from fnarray.core import linalg as L

__all__ = ["add_cases", "canonical", "spd", "well_separated"]


def spd(rng, *shape, dtype=np.float32):
    """Symmetric (Hermitian) positive definite matrices ``shape[-1] x shape[-1]`` with eigenvalues in [1, 4]."""
    n = shape[-1]
    q, _ = np.linalg.qr(rng.standard_normal(shape[:-2] + (n, n)) + (
        1j * rng.standard_normal(shape[:-2] + (n, n)) if np.dtype(dtype).kind == "c" else 0))
    w = np.linspace(1.0, 4.0, n)
    return (q * w[..., None, :]) @ np.conj(np.swapaxes(q, -1, -2))


def well_separated(rng, *shape, dtype=np.float32):
    """Matrices ``[..., m, n]`` whose singular values are 1..3, evenly apart."""
    m, n = shape[-2:]
    k = min(m, n)
    cplx = np.dtype(dtype).kind == "c"

    def orth(p):
        z = rng.standard_normal(shape[:-2] + (p, p))
        if cplx:
            z = z + 1j * rng.standard_normal(z.shape)
        return np.linalg.qr(z)[0]
    u, v = orth(m)[..., :k], orth(n)[..., :k]
    s = np.linspace(3.0, 1.0, k) if k else np.zeros(0)
    return ((u * s[..., None, :]) @ np.conj(np.swapaxes(v, -1, -2))).astype(dtype)


def _phase_fix(v, axis):
    """Scale each vector of ``v`` along ``axis`` so that its largest entry is real and positive."""
    if v.size == 0:
        return v, np.ones(v.shape[:-2] + (v.shape[-1 if axis == -2 else -2],), v.dtype)
    idx = np.argmax(np.abs(v), axis=axis)
    big = np.take_along_axis(v, np.expand_dims(idx, axis), axis)
    ph = big / np.abs(big)
    ph = np.where(np.abs(big) == 0, 1, ph)
    return v / ph, np.squeeze(ph, axis)


def canonical(prim, outs):
    """``outs`` of ``prim`` with the sign/phase of each eigen/singular vector fixed (other primitives: as is)."""
    if prim is L.eigh_p:
        v, w = outs
        return [_phase_fix(v, -2)[0], w]
    if prim is L.svd_p and len(outs) == 3:
        s, u, vh = outs
        k = s.shape[-1]
        u2, ph = _phase_fix(u[..., :, :k], -2)
        vh2 = vh[..., :k, :] * np.conj(ph)[..., :, None]
        return [s, u2, vh2]  # full_matrices' extra columns/rows are any basis: not compared
    return outs


def add_cases(case):
    """Register the linear-algebra cases through ``cases.case``."""
    rng = np.random.default_rng(15)
    f32 = np.float32
    case("cholesky", L.cholesky_p, [spd(rng, 2, 4, 4).astype(f32)])
    case("cholesky_c64", L.cholesky_p, [spd(rng, 3, 3, dtype=np.complex64).astype(np.complex64)])
    case("cholesky_not_pd", L.cholesky_p, [np.array([[[1, 2], [2, 1]], [[2, 0], [0, 3]]], f32)])
    case("cholesky_empty", L.cholesky_p, [np.zeros((2, 0, 0), f32)])
    a = (np.tril(rng.uniform(-1, 1, (2, 4, 4))) + 3 * np.eye(4)).astype(f32)
    a = a + np.triu(rng.uniform(-9, 9, (4, 4)), 1).astype(f32)  # the other triangle is never read
    b = rng.uniform(-1, 1, (2, 4, 3)).astype(f32)
    flags = dict(transpose_a=False, conjugate_a=False, unit_diagonal=False)
    case("triangular_solve", L.triangular_solve_p, [a, b], left_side=True, lower=True, **flags)
    case("triangular_solve_right_upper_t", L.triangular_solve_p, [np.swapaxes(a, -1, -2).copy(),
                                                                   np.swapaxes(b, -1, -2).copy()],
         left_side=False, lower=False, transpose_a=True, conjugate_a=False, unit_diagonal=True)
    case("triangular_solve_empty", L.triangular_solve_p, [a, np.zeros((2, 4, 0), f32)], left_side=True,
         lower=True, **flags)
    case("lu", L.lu_p, [rng.uniform(-1, 1, (2, 4, 4)).astype(f32)])
    case("lu_wide", L.lu_p, [rng.uniform(-1, 1, (3, 5)).astype(f32)])
    case("lu_empty", L.lu_p, [np.zeros((3, 0), f32)])
    case("qr", L.qr_p, [well_separated(rng, 2, 4, 3)], full_matrices=False)
    case("qr_full", L.qr_p, [well_separated(rng, 3, 4)], full_matrices=True)
    case("qr_empty", L.qr_p, [np.zeros((3, 0), f32)], full_matrices=True)
    case("eigh", L.eigh_p, [spd(rng, 2, 4, 4).astype(f32)], lower=True)
    case("eigh_upper", L.eigh_p, [spd(rng, 3, 3).astype(f32)], lower=False)
    case("eigh_empty", L.eigh_p, [np.zeros((0, 3, 3), f32)], lower=True)
    case("svd", L.svd_p, [well_separated(rng, 2, 4, 3)], full_matrices=False, compute_uv=True)
    case("svd_values", L.svd_p, [well_separated(rng, 3, 5)], full_matrices=False, compute_uv=False)
    case("svd_square_full", L.svd_p, [well_separated(rng, 3, 3)], full_matrices=True, compute_uv=True)
    case("svd_empty", L.svd_p, [np.zeros((2, 0), f32)], full_matrices=True, compute_uv=True)
