"""Causal flash attention, forward: attention without the ``(L, L)`` score matrix in memory (Dao et al.,
*FlashAttention*, 2022: the online softmax of Milakov & Gimelshein, 2018).

Program instance ``(h, i)`` computes the output rows of query block ``i`` of head ``h``. It walks the key/value
blocks in a ``fori_loop`` (only those at or before its queries: causal), keeping per query row the running
maximum ``m``, the running sum ``l`` of ``exp(s - m)`` and the running output ``acc``; each new block rescales
them by ``exp(m_old - m_new)``. Scores exist one ``(bq, bk)`` block at a time. On OpenCL/WebGPU the carries live
in work-group memory, the blocks of each ``dot`` are staged there too.

Run: ``python examples/kernels/flash_attention.py --device webgpu:0``.
"""

from __future__ import annotations

import functools
import math

import fnarray as fa
import fnarray.numpy as fnp
import fnarray.experimental.pallas as pl

try:
    from ._args import device_and_data
except ImportError:   # run as a script
    from _args import device_and_data


def flash_kernel(q_ref, k_ref, v_ref, o_ref, *, bk, scale):
    bq, d = q_ref.shape
    i = pl.program_id(1)
    q = q_ref[...].astype(fnp.float32) * scale
    rows = i * bq + fnp.arange(bq)

    def body(j, carry):
        m, l, acc = carry
        k = k_ref[pl.ds(j * bk, bk), :].astype(fnp.float32)
        v = v_ref[pl.ds(j * bk, bk), :].astype(fnp.float32)
        s = q @ k.T
        cols = j * bk + fnp.arange(bk)
        s = fnp.where(rows[:, None] >= cols[None, :], s, -fnp.inf)
        m_new = fnp.maximum(m, fnp.max(s, axis=1))
        p = fnp.exp(s - m_new[:, None])
        alpha = fnp.exp(m - m_new)
        return m_new, l * alpha + fnp.sum(p, axis=1), acc * alpha[:, None] + p @ v

    init = (fnp.full((bq,), -fnp.inf, fnp.float32), fnp.zeros((bq,), fnp.float32), fnp.zeros((bq, d), fnp.float32))
    last = ((i + 1) * bq + bk - 1) // bk     # the key blocks at or before this query block
    m, l, acc = fa.lax.fori_loop(0, last, body, init)
    o_ref[...] = (acc / l[:, None]).astype(o_ref.dtype)


def flash_attention(q, k, v, bq=16, bk=16):
    """Causal softmax attention ``softmax(q k^T / sqrt(d) + causal mask) v`` of ``(heads, length, d)`` arrays."""
    h, n, d = q.shape
    bq, bk = min(bq, n), min(bk, n)
    if n % bq or n % bk:
        raise ValueError(f"flash_attention kernel: blocks ({bq}, {bk}) must divide the length {n}")
    qspec = pl.BlockSpec((None, bq, d), lambda hh, i: (hh, i, 0))
    kvspec = pl.BlockSpec((None, n, d), lambda hh, i: (hh, 0, 0))
    kernel = functools.partial(flash_kernel, bk=bk, scale=1.0 / math.sqrt(d))
    return pl.pallas_call(kernel, out_shape=pl.ShapeDtypeStruct(q.shape, q.dtype), grid=(h, n // bq),
                          in_specs=[qspec, kvspec, kvspec], out_specs=qspec, name="flash_attention")(q, k, v)


def reference(q, k, v):
    """The same with fnarray's operations (the score matrix in memory)."""
    n, d = q.shape[-2:]
    s = fnp.einsum("hqd,hkd->hqk", q, k) / math.sqrt(d)
    s = fnp.where(fnp.tril(fnp.ones((n, n), bool)), s, -fnp.inf)
    return fnp.einsum("hqk,hkd->hqd", fa.nn.softmax(s, axis=-1), v)


def main(argv=None):
    dev, f32 = device_and_data(argv, __doc__)
    q, k, v = f32(2, 64, 16), f32(2, 64, 16), f32(2, 64, 16)
    print(f"{dev}: max error {float(fnp.max(fnp.abs(flash_attention(q, k, v) - reference(q, k, v)))):.2e}")


if __name__ == "__main__":
    main()
