"""``quantized_matmul`` on jax (registered into ``common.RULES``): unpacking and scaling as elementwise ops on the
packed words feeding a dot.

XLA's CPU backend fuses the producers of a dot into it only for a matrix-vector product written as a vector
times a transposed matrix (``x @ wd.T``: a ``transpose`` then a ``dot`` contracting the matrix's first axis, which
it emits as one loop fusion reading the packed words); ``lax.dot_general`` contracting the weights' last axis
directly, or any product of several rows, runs as a library call that fuses nothing, so the float weights were
written to memory on every call and read back (the HLO of ``examples/llm.py``'s 4-bit decode step at width 1024:
one ``f32[2816,1024]`` loop fusion per weight, 7x slower than float32). So, up to ``DECODE_ROWS`` rows of ``x``
(a decode step), one fused matrix-vector product per row, each reading the packed words (2816 x 2816 4-bit, one
row: 0.38x the float32 product's time, against 2.6x before):

- XLA fuses a dot's producers only while its vector is under 16 KiB (``kFusionThresholdBytes`` of XLA's CPU
  instruction fusion: 4064 float32 elements fuse, 4096 do not, measured with jax 0.10.2), so the contraction is
  cut into ``_chunks`` under ``FUSED_VECTOR_BYTES`` and the partial products summed (issue 30: a 4096 x 4096
  4-bit product, one row, wrote a transposed ``f32[4096,4096]`` copy on every call, 36-38x float32's time);
- the fused product is fast only where the contraction runs along memory, which with ``transpose=False``
  (``x @ W``, the packed words along the output axis) it does not: a product fused on the words as they lie
  reads them across rows (tenth session, 2048 x 2048 4-bit, one row: fused column reductions or products 26-38
  ms against float32's 2.2 ms), so until the fifteenth session each row's product read float weights written
  whole by one loop fusion. Now (``_decode_columns``) the words, scales and biases are transposed once by
  ``transposed``, a gather in 16 x 16 tiles that XLA's CPU fusion leaves on its own (a ``transpose``, or a
  transposed copy through a ``while``/``cond``/optimization barrier, is copied into the consumer's fusion or
  given the words' own layout, and read across rows again), and each row's product is the fused form above
  on the transposed words: the only full-size buffer is the uint32 words' (``bits / 32`` of the float
  weights' elements);
- 3, 5 and 6 bits cross words. ``x @ W`` (``unpack_leading``) cuts their unpacking into one piece per word of a
  32-element chunk, each a broadcast shift, and the product into one dot per piece: a gather or a
  concatenation of the elements is written whole (``u32[n, k]``) once several rows' products read it.
  ``x @ W.T`` (``_crossing_rows``, nineteenth session) broadcasts every word to a power-of-two count of lanes
  with shifts from the word's base position plus an iota, ``x`` spread to the lanes by a small gather: XLA's
  fused loop, vectorised 8 lanes at a time, then reads one word and contiguous lanes per vector, where the
  pieces (words ``bits`` apart, elements ``e1 - e0`` apart) were read a lane at a time (2048², one row: 1.2-1.7x
  float32's time, against 5-9x);
- the floating modes decode their elements by bit arithmetic (``e2m1_values``, ``e4m3_values``), not by a table
  gather: XLA copies cheap elementwise producers into each row's fusion but not a gather, which several rows'
  products read and so was written whole (the looked-up weights, before the tenth session); their scales are
  still looked up (a small array).

More rows (prefill; and ``x @ W.T`` of 3, 5 or 6 bits from three rows, ``_dequantize_first``): the dequantized weights feed XLA's library dot (YNNPACK's, ``ynn_fusion`` in the HLO),
whose product amortizes writing them over the rows. Up to ``BLOCKED_WEIGHT_BYTES`` of float weights they are
dequantized whole into one dot; past it (``_prefill``) a ``lax.scan`` dequantizes ``PREFILL_BLOCK_BYTES`` of
weight rows at a time (``prefill_block_rows``), one library dot a block, so the program's temporaries are one
block, not the float weights. Measured (sixteenth session, ``benchmarks/jax_quantized_rows.py``, one thread,
load 12-20): each library dot costs ~0.3-0.4 ms on its own (a 16-row product by 256 columns of 2048: 0.88 ms,
by all 2048: 4.4 ms), so at 2048 x 2048 (16 MiB of floats) four or eight blocks took 1.1-1.7x the whole
dequantization; at 4096 x 4096 (64 MiB) blocks of 512 rows (8 MiB, in cache while their dot reads them) took
0.55-0.8x. Unrolled blocks gain nothing: XLA schedules every block's dequantization before the first product,
an optimization barrier between them included.
"""

from __future__ import annotations

import numpy as np

from fnarray.core.quantized import FLOAT_MODES, quantized_matmul_p
from fnarray.lowering.jax.common import RULES
from fnarray.lowering.packed import FLOAT_FORMATS, acc_dtype, unpack, unpack_plan

__all__ = ["jax_quantized_matmul", "BLOCKED_WEIGHT_BYTES", "DECODE_ROWS", "FUSED_VECTOR_BYTES", "PREFILL_BLOCK_BYTES",
           "TILE", "e2m1_values", "e4m3_values", "prefill_block_rows", "transposed", "unpack_leading",
           "word_lanes"]

#: Rows of ``x`` up to which the product is one fused matrix-vector product per row.
DECODE_ROWS = 4
#: XLA's CPU backend fuses the producers of a matrix-vector dot only for a vector of fewer bytes than this.
FUSED_VECTOR_BYTES = 16 * 1024
#: Float weights of at least this many bytes are dequantized in blocks by a prefill product (``_prefill``).
BLOCKED_WEIGHT_BYTES = 32 * 1024 * 1024
#: Float bytes of one block of weights dequantized at a time by a prefill product.
PREFILL_BLOCK_BYTES = 8 * 1024 * 1024
#: Side of the tiles in which ``transposed`` gathers (``transpose=False``'s words, scales and biases).
TILE = 16


def _chunks(k, step, itemsize):
    """``[(start, stop)]`` cutting ``k`` contraction elements into near-equal chunks, each a multiple of ``step``
    (whole packed words and groups) and of fewer than ``FUSED_VECTOR_BYTES`` bytes at ``itemsize``; one chunk
    where ``k`` already fits."""
    if k * itemsize < FUSED_VECTOR_BYTES:
        return [(0, k)]
    most = max(step, (FUSED_VECTOR_BYTES // itemsize - 1) // step * step)
    count = -(-k // most)
    size = -(-(k // step) // count) * step
    return [(a, min(a + size, k)) for a in range(0, k, size)]


def _float_bits(jnp, lax, bits):
    """float32 values of uint32 IEEE bit patterns."""
    return lax.bitcast_convert_type(bits.astype(jnp.uint32), jnp.float32)


def _through_half(jnp, lax, c, shift, exponent_gap):
    """float32 of a small float's unsigned bits ``c`` placed at bit ``shift`` of a float16 (its exponent field is
    then the float16's, 15 - ``exponent_gap`` too small, which one power-of-two product restores): the float16 to
    float32 conversion reads float16 subnormals right, where XLA's CPU float32 arithmetic flushes float32
    subnormals to zero (measured), and costs less than selecting the subnormal case (mxfp8, 2048 x 2048, one row:
    1.6 against 2.2-2.5 ms for bit selects)."""
    half = lax.bitcast_convert_type((c << shift).astype(jnp.uint16), jnp.float16)
    return half.astype(jnp.float32) * np.float32(2.0 ** exponent_gap)


def _with_sign(jnp, lax, magnitude, sign_bit):
    """``magnitude`` (float32, non-negative) with the sign bit ``sign_bit`` (uint32, 0 or 1)."""
    return _float_bits(jnp, lax, lax.bitcast_convert_type(magnitude, jnp.uint32) | (sign_bit << 31))


def e2m1_values(jnp, lax, c):
    """float32 values of 4-bit E2M1 codes ``c`` (uint32), ``packed.E2M1`` by bit arithmetic: sign ``c >> 3``,
    exponent (bias 1) and mantissa ``c & 7`` read as a float16's top bits (bias 15: times ``2**14``; ``e = 0`` a
    subnormal, ``0.5 * m``). Source: OCP Microscaling Formats v1.0."""
    return _with_sign(jnp, lax, _through_half(jnp, lax, c & 7, 9, 14), (c >> 3) & 1)


def e4m3_values(jnp, lax, c):
    """float32 values of E4M3 bytes ``c`` (uint32 below 256; ``ml_dtypes.float8_e4m3fn``, ``packed.E4M3``) by bit
    arithmetic: sign bit 7, exponent (bias 7) and mantissa ``c & 0x7F`` read as a float16's top bits (bias 15:
    times ``2**8``; ``e = 0`` a subnormal, ``m * 2**-9``); ``0x7F`` and ``0xFF`` are NaN. Source: OCP 8-bit
    floating point v1.0."""
    value = _with_sign(jnp, lax, _through_half(jnp, lax, c & 0x7F, 7, 8), (c >> 7) & 1)
    return jnp.where((c & 0x7F) == 0x7F, np.float32(np.nan), value)


#: Per floating mode: the decoder of its elements (``packed.FLOAT_FORMATS``' element tables).
_ELEMENT_DECODERS = {"mxfp4": e2m1_values, "mxfp8": e4m3_values, "nvfp4": e2m1_values}


def _dequantize(jnp, w, scales, biases, acc, group_size, bits, mode):
    """The float weights (``acc``) of packed words ``w`` with their scales (and biases), elementwise (the floating
    modes' element values by bit arithmetic, no gather)."""
    from jax import lax
    q = _elements(jnp, w, bits)
    rows, cols = q.shape
    if mode in FLOAT_MODES:
        # Elements by bit arithmetic; scales (one a group) from their table: written once where several rows
        # read them, a small array, and faster than decoding them again for every element (nvfp4's E4M3 scales,
        # 2048 x 2048, four rows: 2.8 against 4.3-5.9 ms).
        q = _ELEMENT_DECODERS[mode](jnp, lax, q).astype(acc)
        s = jnp.take(jnp.asarray(FLOAT_FORMATS[mode][1].astype(acc)), scales.astype(jnp.int32), axis=0)
        return (q.reshape(rows, cols // group_size, group_size) * s[:, :, None]).reshape(rows, cols)
    q = q.astype(acc).reshape(rows, cols // group_size, group_size)
    return (q * scales.astype(acc)[:, :, None] + biases.astype(acc)[:, :, None]).reshape(rows, cols)


def _elements(jnp, w, bits):
    """The ``bits``-bit integers ``(n, words * 32 // bits)`` uint32 of packed words ``w (n, words)`` by shifts and
    masks of whole words: ``packed.unpack`` where ``bits`` divides 32 (a broadcast shift), else the
    ``unpack_trailing`` pieces joined per 32-element chunk (static slices and shifts of each chunk's words).
    ``packed.unpack``'s gathers of each element's low and high word, which XLA's CPU fusion writes whole
    (``u32[n, k]`` twice) before the loop making the float weights, made a 3-bit 2048 x 2048 prefill of 16 rows
    2x float32's time (16.2 against 8.2 ms, one thread); the pieces' concatenation fuses into that loop (8.7 ms)."""
    if 32 % bits == 0:
        return unpack(jnp, w, bits, jnp.asarray)
    pieces = unpack_trailing(jnp, w, bits)
    return jnp.concatenate([q for _, _, q in pieces], axis=2).reshape(w.shape[0], -1)


def _summed(lax, parts):
    """The sum of ``parts`` (row products), behind an optimization barrier: an add of two dots becomes XLA's
    output fusion of the second, which then no longer fuses its dequantizing producers (measured: a transposed
    copy again)."""
    return parts[0] if len(parts) == 1 else sum(lax.optimization_barrier(parts))


def _row_products(jnp, xs, wd, acc):
    """``(m, n)``: each row of ``xs (m, k)`` times ``wd (n, k)`` transposed, one matrix-vector product a row (the
    form XLA's CPU backend fuses with the producers of ``wd``)."""
    return jnp.stack([jnp.matmul(xs[i], wd.T, preferred_element_type=acc) for i in range(xs.shape[0])])


def _fused_rows(jnp, lax, xs, weights, step, acc):
    """``(m, n)``: each row of ``xs (m, k)`` times the float weights that ``weights(a, b)`` gives for the
    contraction's elements ``a:b`` (elementwise on packed words: a list of ``(r, c, b - a)`` pieces whose
    ``(r, c)`` products, joined along ``c`` and flattened, are the ``n`` outputs in order), as fused
    matrix-vector products, one per row, piece and contraction chunk (the module docstring), summed."""
    parts = []
    for a, b in _chunks(xs.shape[1], step, acc.itemsize):
        outs = [_row_products(jnp, xs[:, a:b], p.reshape(-1, b - a), acc).reshape((-1,) + p.shape[:2])
                for p in weights(a, b)]
        parts.append((outs[0] if len(outs) == 1 else jnp.concatenate(outs, axis=2)).reshape(xs.shape[0], -1))
    return _summed(lax, parts)


def unpack_trailing(jnp, w, bits):
    """The ``bits``-bit integers of packed words ``w (n, words)`` for ``bits`` not dividing 32 (3, 5, 6), as
    ``[(e0, e1, q)]``: ``q (n, chunks, e1 - e0)`` uint32 holds elements ``e0:e1`` of every 32-element chunk
    (those starting in the chunk's word ``i``, one entry per word), each a broadcast shift of two words: no
    gather, which XLA's CPU fusion writes whole (``u32[n, k]``) where several rows' products read it."""
    n, words = w.shape
    lo, _, shift = unpack_plan(bits)
    w3 = jnp.asarray(w).reshape(n, words // bits, bits)   # a constant of the program arrives as a NumPy array
    mask = np.uint32((1 << bits) - 1)
    out = []
    for i in range(bits):
        e = np.flatnonzero(lo == i)
        s = jnp.asarray(shift[e])[None, None, :]
        v = w3[:, :, i, None] >> s
        if i + 1 < bits:   # elements crossing into the next word: its bits land at 32 - s, shifted in two steps
            v = v | ((w3[:, :, i + 1, None] << np.uint32(1)) << (np.uint32(31) - s))
        out.append((int(e[0]), int(e[-1]) + 1, v & mask))
    return out


def word_lanes(bits):
    """The lane plan of ``_crossing_rows`` for ``bits`` not dividing 32 (3, 5, 6): ``(lanes, base, elements)``.
    Each word of a 32-element chunk (``bits`` words) gives ``lanes`` values (a power of two, 8 or 16), lane ``l``
    of word ``i`` the bits at position ``base[i] + l * bits`` of it: ``base[i] = (-32 * i) % bits - bits``, so lane 0
    holds the low bits of the element begun in word ``i - 1`` (a left shift: a negative position) and the next
    lanes the elements begun in word ``i``; a position at or past 32 (or at ``-bits``) holds nothing (an
    out-of-range shift gives 0). ``elements (bits, lanes)`` int32 is each lane's element of the chunk, 32 where
    the lane holds nothing."""
    base = np.array([(-32 * i) % bits - bits for i in range(bits)], np.int32)
    used = max(-(-(32 - int(b)) // bits) for b in base)
    lanes = max(8, 1 << (used - 1).bit_length())
    pos = base[:, None] + np.arange(lanes, dtype=np.int32)[None, :] * bits
    elements = np.where((pos > -bits) & (pos < 32), (32 * np.arange(bits)[:, None] + pos) // bits, 32)
    return lanes, base, elements.astype(np.int32)


def _crossing_rows(jnp, lax, xs, w, scales, biases, acc, group_size, bits):
    """``(m, n)``: each row of ``xs (m, k)`` times the affine dequantized weights ``w (n, k)`` for ``bits`` not
    dividing 32, as fused matrix-vector products over ``word_lanes``' lanes: each packed word is broadcast to
    ``lanes`` values by shifts whose amounts are the word's base position (one value a word, from a small
    ``(words,)`` array) plus the lane times ``bits`` (an iota), so every 8-lane vector of XLA's fused loop reads one
    word and contiguous lanes (the per-element plans, pieces of words ``bits`` apart or tables indexed by the
    word within its chunk, were scalar loads per lane: 6-8x float32's time at 2048², one row). A crossing
    element's two parts fall in two lanes whose ``x`` values are the same element's (``x`` spread to the lanes by
    a gather of ``x`` itself, ``lanes * bits / 32`` of its size: computed once, not fused into the products);
    the scales multiply inside the product, the biases are one small product of the per-group sums of ``x``."""
    m, k = xs.shape
    n, words = w.shape
    lanes, base, elements = word_lanes(bits)
    chunks = words // bits
    mask = np.uint32((1 << bits) - 1)
    position = jnp.asarray(np.tile(base, chunks))[:, None] + \
        jnp.arange(lanes, dtype=jnp.int32)[None, :] * np.int32(bits)                     # (words, lanes)
    right = jnp.maximum(position, 0).astype(jnp.uint32)
    left = jnp.maximum(-position, 0).astype(jnp.uint32)
    per_group = group_size * bits // 32   # words a group
    scale = jnp.broadcast_to(jnp.asarray(scales).astype(acc)[:, :, None], (n, scales.shape[1], per_group))
    wq = ((((jnp.asarray(w)[:, :, None] >> right) << left) & mask).astype(acc) * scale.reshape(n, words, 1))
    where = np.where(elements < 32, np.arange(chunks)[:, None, None] * 32 + elements[None], k).reshape(-1)
    xl = jnp.concatenate([xs, jnp.zeros((m, 1), acc)], axis=1)[:, where].reshape(m, words, lanes)
    parts = []
    for a, b in _chunks(words * lanes, per_group * lanes, acc.itemsize):
        wa, wb = a // lanes, b // lanes
        parts.append(_row_products(jnp, xl[:, wa:wb].reshape(m, -1), wq[:, wa:wb].reshape(n, -1), acc))
    sums = xs.reshape(m, -1, group_size).sum(axis=2)
    parts.append(jnp.matmul(sums, jnp.asarray(biases).astype(acc).T, preferred_element_type=acc))
    return _summed(lax, parts)


def _decode_rows(jnp, lax, xs, w, scales, biases, acc, group_size, bits, mode):
    """``(m, n)``: each row of ``xs (m, k)`` times the dequantized weights ``w (n, k)`` (``transpose``) as fused
    matrix-vector products reading the packed words (``_fused_rows``); for 3, 5 and 6 bits over the lanes of
    ``_crossing_rows``."""
    step = max(32, group_size)
    if 32 % bits == 0:
        def weights(a, b):
            wa, wb, ga, gb = a * bits // 32, b * bits // 32, a // group_size, b // group_size
            wd = _dequantize(jnp, w[:, wa:wb], scales[:, ga:gb], None if biases is None else biases[:, ga:gb],
                             acc, group_size, bits, mode)
            return [wd[:, None, :]]
        return _fused_rows(jnp, lax, xs, weights, step, acc)
    return _crossing_rows(jnp, lax, xs, w, scales, biases, acc, group_size, bits)


def _tile(n):
    """The largest divisor of ``n`` up to ``TILE``."""
    t = min(TILE, n)
    while n % t:
        t -= 1
    return t


def transposed(jnp, a):
    """``a.T`` of a 2-D array ``(k, c)``, written whole by a gather in tiles of up to ``TILE`` x ``TILE`` (each
    tile read from a few cache lines): the ``(c, k)`` result, read by index arithmetic from the tiles.

    A ``transpose`` is copied into its consumer's fusion, which then reads ``a`` across its rows (the slow
    strided product of the module docstring); XLA's CPU fusion leaves a gather on its own, and the tiled order
    costs less than a plain transposing gather or copy (2048 x 256 words: 0.7 against 1.3-1.9 ms, one thread).
    """
    a = jnp.asarray(a)   # a constant of the program arrives as a NumPy array
    k, c = a.shape
    tk, tc = _tile(k), _tile(c)
    rows = jnp.arange(k // tk, dtype=jnp.int32)[None, :, None, None] * tk + \
        jnp.arange(tk, dtype=jnp.int32)[None, None, None, :]
    cols = jnp.arange(c // tc, dtype=jnp.int32)[:, None, None, None] * tc + \
        jnp.arange(tc, dtype=jnp.int32)[None, None, :, None]
    return a[rows, cols].transpose(0, 2, 1, 3).reshape(c, k)


def unpack_leading(jnp, wt, bits):
    """The ``bits``-bit integers of packed words ``wt (words, k)`` whose bit stream runs down the leading axis
    (``unpack`` of ``wt.T``, transposed), as uint32 pieces ``(r, c, k)``: row ``c * j + e`` of the ``(words * 32 // bits, k)`` integers
    is row ``(j, e)`` of the pieces joined along ``c``. Where ``bits`` divides 32, one piece ``(words, 32 // bits,
    k)``; else ``r`` counts chunks of ``bits`` words (32 elements) and there is one piece per word of a chunk (3 bits: 11, 11, 10
    elements), those starting in it, each a broadcast shift of two word rows: no gather and no concatenation,
    which XLA's CPU fusion would write whole where several rows' products read them (``u32[n, k]``, measured)."""
    words, k = wt.shape
    if 32 % bits == 0:
        mask = np.uint32((1 << bits) - 1)
        shifts = jnp.asarray((np.arange(32 // bits) * bits).astype(np.uint32))[None, :, None]
        return [(wt[:, None, :] >> shifts) & mask]
    return [jnp.moveaxis(q, 0, 2) for _, _, q in unpack_trailing(jnp, wt.T, bits)]


def _decode_columns(jnp, lax, xs, w, scales, biases, acc, group_size, bits, mode):
    """``(m, n)``: each row of ``xs (m, k)`` times the dequantized weights ``w (k, n)`` (``transpose=False``):
    the words, scales and biases transposed once (``transposed``: uint32 words, a ``bits / 32`` share of the
    float weights' count), then fused matrix-vector products reading the transposed words along the contraction
    (``_fused_rows``, one per piece of ``unpack_leading``)."""
    wt = transposed(jnp, w)
    if mode in FLOAT_MODES:
        # The scale values looked up once (a small array), then transposed with the words.
        st = transposed(jnp, jnp.take(jnp.asarray(FLOAT_FORMATS[mode][1].astype(acc)), scales.astype(jnp.int32),
                                      axis=0))
        bt = None
    else:
        st, bt = transposed(jnp, scales.astype(acc)), transposed(jnp, biases.astype(acc))

    # Rows of the pieces (words, or chunks of 32 elements) per group: each row lies in one group.
    per_group = group_size // (32 // bits if 32 % bits == 0 else 32)

    def per_row(v, a, b):
        """Scales or biases ``(groups, k)`` per row of the pieces, contraction elements ``a:b``: ``(r, 1, b - a)``."""
        v = v[:, a:b]
        return jnp.broadcast_to(v[:, None, :], (v.shape[0], per_group, b - a)).reshape(-1, 1, b - a)

    def weights(a, b):
        s = per_row(st, a, b)
        if mode in FLOAT_MODES:
            return [_ELEMENT_DECODERS[mode](jnp, lax, q).astype(acc) * s for q in unpack_leading(jnp, wt[:, a:b], bits)]
        c = per_row(bt, a, b)
        return [q.astype(acc) * s + c for q in unpack_leading(jnp, wt[:, a:b], bits)]
    # No group runs along the contraction here: chunks of whole 32s where they fit, else of any length.
    return _fused_rows(jnp, lax, xs, weights, 32 if xs.shape[1] % 32 == 0 else 1, acc)


def prefill_block_rows(rows, row_bytes):
    """Rows of the weights (their leading axis, ``rows`` of ``row_bytes`` float bytes each) dequantized at a time by
    a prefill product: all of them (one block) while the float weights are under ``BLOCKED_WEIGHT_BYTES``, else
    the most rows whose floats fit ``PREFILL_BLOCK_BYTES`` (at least one), or the largest divisor of ``rows`` down
    to half that many (no shorter last block, whose floats would be a second buffer; the rule measured in the
    module docstring)."""
    if rows * row_bytes < BLOCKED_WEIGHT_BYTES:
        return rows
    most = max(1, min(rows, PREFILL_BLOCK_BYTES // row_bytes))
    return next((r for r in range(most, most // 2, -1) if rows % r == 0), most)


def _prefill(jnp, lax, xs, w, scales, biases, acc, group_size, bits, mode, transpose):
    """``(m, n)``: ``xs (m, k)`` times the dequantized weights (``(n, k)``, ``transpose``; else ``(k, n)``),
    library dots on blocks of ``prefill_block_rows`` weight rows dequantized in turn by a ``lax.scan`` (one
    block's floats live at a time): with ``transpose`` each block gives a block of output columns, else a block
    of the contraction, its product summed into the carry; the rows past the last whole block are one more
    block after the loop."""
    w, scales = jnp.asarray(w), jnp.asarray(scales)
    biases = None if biases is None else jnp.asarray(biases)
    rows, cols = w.shape[0], w.shape[1] * 32 // bits
    size = prefill_block_rows(rows, cols * acc.itemsize)
    whole = rows // size * size
    contract = (((1,), (1,)), ((), ())) if transpose else (((1,), (0,)), ((), ()))

    def product(x, part):
        """``x`` times the float weights of ``part`` (words, scales, biases of some weight rows)."""
        return lax.dot_general(x, _dequantize(jnp, *part, acc, group_size, bits, mode), contract,
                               preferred_element_type=acc)

    def blocks(v, a, b):
        """Rows ``a:b`` of ``v`` (``None`` stays) cut into blocks of ``size`` along a new leading axis."""
        return None if v is None else v[a:b].reshape((-1, size) + v.shape[1:])

    parts = (w, scales, biases)
    if whole == rows and size == rows:
        return product(xs, parts)
    tail = tuple(None if v is None else v[whole:] for v in parts)
    if transpose:
        outs = [] if whole == 0 else [lax.map(lambda part: product(xs, part),
                                              tuple(blocks(v, 0, whole) for v in parts))]
        outs = [jnp.moveaxis(outs[0], 0, 1).reshape(xs.shape[0], whole)] if outs else []
        outs += [product(xs, tail)] if whole < rows else []
        return outs[0] if len(outs) == 1 else jnp.concatenate(outs, axis=1)
    out = jnp.zeros((xs.shape[0], cols), acc)
    if whole:
        x_blocks = jnp.moveaxis(xs[:, :whole].reshape(xs.shape[0], -1, size), 1, 0)
        out = lax.scan(lambda total, xp: (total + product(xp[0], xp[1]), None), out,
                       (x_blocks, tuple(blocks(v, 0, whole) for v in parts)))[0]
    return out + product(xs[:, whole:], tail) if whole < rows else out


def _dequantize_first(m, bits, transpose):
    """Whether a decode product of ``m`` rows (at most ``DECODE_ROWS``) dequantizes the weights for a library dot
    (``_prefill``) rather than fusing the unpacking into each row's product: for ``x @ W.T`` of 3, 5 or 6 bits
    from three rows on. Each row's fused product (``_crossing_rows``) unpacks the words again, so its cost grows
    with the rows, while the gather-free dequantization (``_elements``) is written once (nineteenth session,
    2048², one thread, load 12-16, CPU ms fused against dequantized first: 3 bits at 2 rows 4.2-4.7 against
    6.5-7.5, 3 rows 6.5 against 6.7, 4 rows 13 against 8.1; 6 bits 2 rows 3.8-5.4 against 9.9-13, 3 rows 7.6
    against 8.8, 4 rows 13 against 12; at 1024², 3 rows 2.4-2.7 against 1.7-2.0). ``x @ W`` reads its words
    transposed and is faster fused (3 bits, 4 rows: 7.0 against 12.7 ms, eighteenth session)."""
    return transpose and m > 2 and 32 % bits != 0


def jax_quantized_matmul(x, w, scales, *biases, transpose, group_size, bits, mode):
    """``x @ dequantize(w).T`` (``transpose``) or ``x @ dequantize(w)`` for ``x (..., k)``, accumulated in float32
    (float64 for float64); the floating modes (no biases) decode their element and scale values by bit
    arithmetic; the jitted program's only weight input is the packed uint32 array, and up to ``DECODE_ROWS`` rows
    no value as large as the weights is written, in either orientation (``transpose=False`` reads the words
    transposed once: ``_decode_columns``; see the module docstring), except ``x @ W.T`` of 3, 5 or 6 bits from
    three rows on (``_dequantize_first``); more rows dequantize weights past
    ``BLOCKED_WEIGHT_BYTES`` a block of rows at a time (``_prefill``). Source: MLX's ``quantized_matmul`` (the
    format), XLA CPU's fusion of matrix-vector products."""
    import jax.numpy as jnp
    from jax import lax
    acc = acc_dtype(x.dtype)
    m = int(np.prod(x.shape[:-1], dtype=np.int64))
    k = x.shape[-1]
    bias = biases[0] if biases else None
    if 0 < m <= DECODE_ROWS and not _dequantize_first(m, bits, transpose):
        decode = _decode_rows if transpose else _decode_columns
        out = decode(jnp, lax, x.astype(acc).reshape(m, k), w, scales, bias, acc, group_size, bits, mode)
        return out.reshape(x.shape[:-1] + (out.shape[1],)).astype(x.dtype)
    out = _prefill(jnp, lax, x.astype(acc).reshape(m, k), w, scales, bias, acc, group_size, bits, mode, transpose)
    return out.reshape(x.shape[:-1] + (out.shape[1],)).astype(x.dtype)


assert set(_ELEMENT_DECODERS) == set(FLOAT_FORMATS) == set(FLOAT_MODES)
RULES[quantized_matmul_p] = jax_quantized_matmul
