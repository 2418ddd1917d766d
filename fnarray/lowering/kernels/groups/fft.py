"""The ``fft`` primitive as kernels (OpenCL C and WGSL from one kernel IR): Stockham and Bluestein.

One ``fft`` equation becomes a chain of launches over scratch buffers that hold complex values as
interleaved (re, im) pairs of the real dtype (so the kernels use real arithmetic only):

1. *load*: the operand (its elementwise producers fused, as every kernel group does) is written into the
   complex work layout of the full transform shape. RFFT loads the real input with a zero imaginary part;
   IRFFT loads the half spectrum and completes it by Hermitian symmetry (``Y[k] = conj(X[-k])`` for the
   missing half of the last axis, the other transformed axes mirrored), so that the real part of the
   complex inverse is NumPy's ``irfftn`` (the imaginary parts of the self-conjugate terms drop out).
2. per transformed axis, a batched 1-D transform of every line along it (lines are the other axes:
   ``base(l) + t * inner``, so no transpose is needed):
   - power-of-two lengths: the Stockham autosort FFT, radix-4 stages and one radix-2 stage for odd powers,
     out of place between two buffers (one kernel per radix, launched once per stage with the stage's span
     ``ns`` as a scalar argument); the twiddle factors come from a table of ``exp(sign 2 pi i t / N)``
     written once per call. Stage ``j`` of ``N/R`` butterflies reads ``x[j + r N/R]``, multiplies by
     ``exp(sign 2 pi i r (j mod ns) / (ns R))``, does an ``R``-point DFT and writes
     ``y[(j div ns) ns R + j mod ns + r ns]`` (the formulation of Govindaraju et al., "High performance
     discrete Fourier transforms on graphics processors", SC 2008);
   - other lengths: Bluestein's algorithm (Bluestein 1970; Rabiner, Schafer and Rader 1969): with the chirp
     ``w_n = exp(sign i pi n^2 / N)``, ``X_k = w_k sum_n (x_n w_n) conj(w_{k-n})``: a circular convolution
     of length ``M = 2^ceil(log2(2N - 1))`` done by three power-of-two Stockham FFTs (the chirp's once per
     call, the lines' forward and inverse) and a pointwise complex product. ``n^2 mod 2N`` is computed in
     uint32, which holds ``n^2`` for ``n < 65536``: longer non-power-of-two axes fall back (the backends'
     ``supports`` says so, ``unsupported_reason``).
3. *store*: the result scaled (IFFT/IRFFT by ``1/prod(fft_lengths)``) into the output: complex values for
   FFT/IFFT, the first ``n//2 + 1`` terms of the last axis for RFFT, the real part for IRFFT.
"""

from __future__ import annotations

import math

from fnarray.core.fft import FftType, fft_p, real_of
from fnarray.lowering.kernels.builder import KernelBuilder
from fnarray.lowering.kernels.groups.base import Group, analyse_val, make_launch
from fnarray.lowering.kernels.index import ix_const, ix_data
from fnarray.lowering.kernels.ir import INT32, UINT32, Cast, Op, const
from fnarray.lowering.kernels.rules import op, select

__all__ = ["FftGroup", "unsupported_reason", "MAX_BLUESTEIN_LENGTH", "GROUPS"]

#: The longest non-power-of-two axis the kernels transform (``n^2`` must fit in uint32 for the chirp).
MAX_BLUESTEIN_LENGTH = 65535


def _pow2(n):
    return n & (n - 1) == 0


def unsupported_reason(eqn):
    """Why the kernels cannot run this ``fft`` equation, or ``None``."""
    for n in eqn.params["fft_lengths"]:
        if not _pow2(n) and n > MAX_BLUESTEIN_LENGTH:
            return (f"fft of a non-power-of-two length {n} > {MAX_BLUESTEIN_LENGTH}: the Bluestein kernels compute "
                    "the chirp index n^2 mod 2N in uint32")
    return None


def _c(v, d):
    return const(v, d)


def _cmul(b, ar, ai, br, bi):
    """(ar + i ai)(br + i bi) as two bound reals."""
    return (b.let(op("sub", op("mul", ar, br), op("mul", ai, bi))),
            b.let(op("add", op("mul", ar, bi), op("mul", ai, br))))


class FftGroup(Group):
    """One ``fft`` equation: load, per-axis Stockham or Bluestein transforms, store (module docstring)."""

    kind = "fft"

    def __init__(self, ctx, eqn):
        super().__init__(ctx, eqn.outputs[0].aval.shape)
        self.eqn = eqn
        self.products.append(eqn.outputs[0])

    def analyse(self):
        analyse_val(self, *self.eqn.inputs)

    # ------------------------------------------------------------------ helpers

    def _spec(self, tag, n):
        return self.ctx.spec(("fft", id(self), tag), (n,), self.rdt)

    def _items(self, b, n):
        gid, gsize, lsize = self.ctx.gid(b, n, self.ctx.wg)
        return gid, gsize, lsize, op("lt", gid, _c(n, INT32))

    def _buf(self, b, args, spec, writes, hint):
        name = b.buffer(spec, self.rdt, writes, hint)
        args[name] = spec
        return name

    def _pair(self, b, name, i):
        """Load complex entry ``i`` of interleaved buffer ``name``."""
        two = b.let(op("mul", i, _c(2, INT32)))
        return b.load(name, two, self.rdt), b.load(name, op("add", two, _c(1, INT32)), self.rdt)

    def _put(self, b, name, i, re, im):
        two = b.let(op("mul", i, _c(2, INT32)))
        b.store(name, two, re)
        b.store(name, op("add", two, _c(1, INT32)), im)

    # ------------------------------------------------------------------ the chain

    def codegen(self):
        e = self.eqn
        self.fft_type = FftType(e.params["fft_type"])
        self.lengths = tuple(e.params["fft_lengths"])
        x, out = e.inputs[0], e.outputs[0]
        self.cdt = out.aval.dtype if self.fft_type != FftType.IRFFT else x.aval.dtype
        self.rdt = real_of(self.cdt)
        k = len(self.lengths)
        lead = (x.aval.shape if self.fft_type != FftType.IRFFT else out.aval.shape)[:-k]
        self.full = tuple(lead) + self.lengths
        self.total = math.prod(self.full)
        self.launches = []
        self._tables: dict = {}
        work = [self._spec("w0", 2 * self.total), self._spec("w1", 2 * self.total)]
        self._load(work[0])
        cur = 0
        sign = 1 if self.fft_type in (FftType.IFFT, FftType.IRFFT) else -1
        nd = len(self.full)
        for d in range(nd - k, nd):
            n = self.full[d]
            if n == 1:
                continue
            outer, inner = math.prod(self.full[:d]), math.prod(self.full[d + 1:])
            if _pow2(n):
                cur = self._stockham(work, cur, n, outer, inner, sign)
            else:
                self._bluestein(work[cur], work[1 - cur], n, outer, inner, sign)
                cur = 1 - cur
        self._store(work[cur])
        return self.launches

    # ------------------------------------------------------------------ 1. load

    def _load(self, dst):
        x = self.eqn.inputs[0]
        b, args, tracker, em = self._kernel_start("fft_load")
        gid, gsize, lsize, ok = self._items(b, self.total)
        full, k = self.full, len(self.lengths)
        with b.when(ok):
            coords, stride = [], self.total
            for n in full:
                stride //= n
                c = gid if stride == 1 else op("div", gid, _c(stride, INT32))
                coords.append(b.let(op("rem", c, _c(n, INT32))) if n > 1 else _c(0, INT32))
            d0 = len(full) - k
            if self.fft_type == FftType.IRFFT:
                n_last = full[-1]
                m = n_last // 2 + 1
                inside = b.let(op("lt", coords[-1], _c(m, INT32)))
                src = list(coords)
                for d in range(d0, len(full)):
                    nd_ = full[d]
                    if nd_ == 1:
                        continue
                    mirror = op("rem", op("sub", _c(nd_, INT32), coords[d]), _c(nd_, INT32))
                    src[d] = b.let(select(inside, coords[d], mirror))
                shape_in = x.aval.shape
                idx = tuple(ix_data(s, 0, n - 1) if n > 1 else ix_const(0) for s, n in zip(src, shape_in, strict=True))
                v = em.val(x, idx)
                re = b.let(Op("creal", (v,), self.rdt))
                im = b.let(Op("cimag", (v,), self.rdt))
                im = b.let(select(inside, im, op("neg", im)))
            else:
                idx = tuple(ix_data(c, 0, n - 1) if n > 1 else ix_const(0) for c, n in zip(coords, full, strict=True))
                v = em.val(x, idx)
                if self.fft_type == FftType.RFFT:
                    re, im = v, _c(0, self.rdt)
                else:
                    re = b.let(Op("creal", (v,), self.rdt))
                    im = b.let(Op("cimag", (v,), self.rdt))
            self._put(b, self._buf(b, args, dst, True, "w"), gid, re, im)
        self.launches.append(make_launch(b, args, {}, gsize, lsize, tracker.eqns, "fft"))

    # ------------------------------------------------------------------ 2a. Stockham

    def _twiddles(self, n, sign):
        """The buffer of ``exp(sign 2 pi i t / n)``, ``t < n``, written once per call (the stages index it,
        so no stage computes a sine or cosine)."""
        key = (n, sign)
        spec = self._tables.get(key)
        if spec is None:
            spec = self._tables[key] = self._spec(f"tw{n}_{sign}", 2 * n)
            b = KernelBuilder(f"fft_twiddles_{'inv' if sign > 0 else 'fwd'}")
            args: dict = {}
            gid, gsize, lsize = self.ctx.gid(b, n, self.ctx.wg)
            nn = b.scalar("n")
            with b.when(op("lt", gid, nn)):
                a = b.let(op("div", op("mul", Cast(gid, self.rdt), _c(sign * 2 * math.pi, self.rdt)),
                             Cast(nn, self.rdt)))
                self._put(b, self._buf(b, args, spec, True, "tw"), gid, op("cos", a), op("sin", a))
            self.launches.append(make_launch(b, args, {"n": n}, gsize, lsize, (self.eqn,), "fft"))
        return spec

    def _stockham(self, bufs, cur, n, outer, inner, sign):
        """Transform every line of length ``n`` (a power of two) from ``bufs[cur]``; returns the index of
        the buffer holding the result. Sizes are scalar arguments: one compiled kernel per radix and
        direction serves every length and batch."""
        log = int(math.log2(n))
        radices = [4] * (log // 2) + ([2] if log % 2 else [])
        table = self._twiddles(n, sign)
        ns = 1
        for r in radices:
            b, args, gsize, lsize = self._stage_kernel(r, n, outer, inner, sign, bufs[cur], bufs[1 - cur], table)
            scalars = {"ns": ns, "n": n, "q": n // r, "inner": inner, "items": outer * inner * (n // r),
                       "tstride": n // (ns * r)}
            self.launches.append(make_launch(b, args, scalars, gsize, lsize, (self.eqn,), "fft"))
            ns *= r
            cur = 1 - cur
        return cur

    def _stage_kernel(self, radix, n, outer, inner, sign, src, dst, table):
        b = KernelBuilder(f"fft_radix{radix}_{'inv' if sign > 0 else 'fwd'}")
        args: dict = {}
        items = outer * inner * (n // radix)
        gid, gsize, lsize = self.ctx.gid(b, items, self.ctx.wg)
        ns, nn, q, inn, cnt, ts = (b.scalar(v) for v in ("ns", "n", "q", "inner", "items", "tstride"))
        with b.when(op("lt", gid, cnt)):
            j = b.let(op("rem", gid, q), "j")
            line = b.let(op("div", gid, q), "l")
            base = b.let(op("add", op("mul", op("div", line, inn), op("mul", nn, inn)), op("rem", line, inn)))
            kk = b.let(op("rem", j, ns), "k")
            sname = self._buf(b, args, src, False, "src")
            dname = self._buf(b, args, dst, True, "dst")
            tname = self._buf(b, args, table, False, "tw")
            step = b.let(op("mul", kk, ts))   # exp(sign 2 pi i r k / (ns R)) is table entry r * k * n / (ns R)
            vs = []
            for r in range(radix):
                pos = op("add", base, op("mul", op("add", j, op("mul", q, _c(r, INT32))), inn))
                re, im = self._pair(b, sname, b.let(pos))
                if r:
                    wr, wi = self._pair(b, tname, b.let(op("mul", step, _c(r, INT32))))
                    re, im = _cmul(b, re, im, wr, wi)
                vs.append((re, im))
            ys = _dft2(b, vs) if radix == 2 else _dft4(b, vs, sign)
            dbase = b.let(op("add", op("mul", op("div", j, ns), op("mul", ns, _c(radix, INT32))), kk))
            for r, (re, im) in enumerate(ys):
                pos = op("add", base, op("mul", op("add", dbase, op("mul", ns, _c(r, INT32))), inn))
                self._put(b, dname, b.let(pos), re, im)
        return b, args, gsize, lsize

    # ------------------------------------------------------------------ 2b. Bluestein

    def _chirp(self, b, nn, sign):
        """``exp(sign i pi nn^2 / n)`` for int32 ``nn`` in [0, n) (``nn^2 mod 2n`` in uint32; ``n`` and ``2n``
        are the scalar arguments ``n`` and ``n2``)."""
        u = b.let(Cast(nn, UINT32))
        sq = b.let(op("rem", op("mul", u, u), b.scalar("n2", UINT32)))
        a = b.let(op("div", op("mul", Cast(sq, self.rdt), _c(sign * math.pi, self.rdt)), Cast(b.scalar("n"), self.rdt)))
        return b.let(op("cos", a)), b.let(op("sin", a))

    def _bluestein(self, src, dst, n, outer, inner, sign):
        m = 1 << (2 * n - 2).bit_length()
        lines = outer * inner
        tag = f"{n}_{outer}_{inner}"
        a = [self._spec(f"a0_{tag}", 2 * lines * m), self._spec(f"a1_{tag}", 2 * lines * m)]
        c = [self._spec(f"c0_{tag}", 2 * m), self._spec(f"c1_{tag}", 2 * m)]
        sizes = {"n": n, "n2": 2 * n, "m": m, "inner": inner}
        direction = "inv" if sign > 0 else "fwd"
        self._chirp_kernel(c[0], direction, sign, sizes)
        cc = self._stockham(c, 0, m, 1, 1, -1)
        self._chirp_in(src, a[0], direction, sign, lines, sizes)
        ca = self._stockham(a, 0, m, lines, 1, -1)
        self._chirp_mul(a[ca], c[cc], lines, sizes)
        ca = self._stockham(a, ca, m, lines, 1, 1)
        self._chirp_out(a[ca], dst, direction, sign, lines, sizes)

    def _flat_kernel(self, name, count):
        """A builder over ``count`` work items: ``(b, args, gid, gsize, lsize, gid < items)``."""
        b = KernelBuilder(name)
        gid, gsize, lsize = self.ctx.gid(b, count, self.ctx.wg)
        return b, {}, gid, gsize, lsize, op("lt", gid, b.scalar("items"))

    def _flat_launch(self, b, args, gsize, lsize, count, sizes):
        """The launch of a Bluestein kernel, with its sizes (``sizes``) and ``items = count`` as scalars."""
        scalars = dict(sizes, items=count)
        self.launches.append(make_launch(b, args, scalars, gsize, lsize, (self.eqn,), "fft"))

    def _chirp_kernel(self, c0, direction, sign, sizes):
        """The chirp's circular kernel ``b_j = conj(w_j)`` for ``j < n`` and for ``M - j``, ``j`` in
        ``[1, n)``; zero between."""
        zero = _c(0.0, self.rdt)
        m = sizes["m"]
        b, args, gid, gsize, lsize, ok = self._flat_kernel(f"fft_chirp_{direction}", m)
        nn, mm = b.scalar("n"), b.scalar("m")
        with b.when(ok):
            low = b.let(op("lt", gid, nn))
            high = b.let(op("gt", gid, op("sub", mm, nn)))
            j = b.let(select(low, gid, select(high, op("sub", mm, gid), _c(0, INT32))))
            cr, ci = self._chirp(b, j, -sign)
            use = b.let(op("lor", low, high))
            self._put(b, self._buf(b, args, c0, True, "c"), gid, select(use, cr, zero), select(use, ci, zero))
        self._flat_launch(b, args, gsize, lsize, m, sizes)

    def _chirp_in(self, src, a0, direction, sign, lines, sizes):
        """``a_j = x_j w_j`` for ``j < n``, zero-padded to ``M``, one contiguous line of ``M`` per line of the
        axis."""
        zero = _c(0.0, self.rdt)
        count = lines * sizes["m"]
        b, args, gid, gsize, lsize, ok = self._flat_kernel(f"fft_chirp_in_{direction}", count)
        nn, mm = b.scalar("n"), b.scalar("m")
        with b.when(ok):
            line = b.let(op("div", gid, mm), "l")
            jj = b.let(op("rem", gid, mm), "j")
            low = b.let(op("lt", jj, nn))
            jc = b.let(select(low, jj, _c(0, INT32)))
            xr, xi = self._pair(b, self._buf(b, args, src, False, "src"), self._line_pos(b, line, jc))
            wr, wi = self._chirp(b, jc, sign)
            yr, yi = _cmul(b, xr, xi, wr, wi)
            self._put(b, self._buf(b, args, a0, True, "a"), gid, select(low, yr, zero), select(low, yi, zero))
        self._flat_launch(b, args, gsize, lsize, count, sizes)

    def _chirp_mul(self, a, c, lines, sizes):
        """The pointwise product of ``a``'s spectrum with the chirp's (in place)."""
        count = lines * sizes["m"]
        b, args, gid, gsize, lsize, ok = self._flat_kernel("fft_chirp_mul", count)
        with b.when(ok):
            name = self._buf(b, args, a, True, "a")
            xr, xi = self._pair(b, name, gid)
            cr, ci = self._pair(b, self._buf(b, args, c, False, "c"), b.let(op("rem", gid, b.scalar("m"))))
            yr, yi = _cmul(b, xr, xi, cr, ci)
            self._put(b, name, gid, yr, yi)
        self._flat_launch(b, args, gsize, lsize, count, sizes)

    def _chirp_out(self, a, dst, direction, sign, lines, sizes):
        """``X_k = w_k conv_k / M`` for ``k < n``, back into the work layout."""
        rdt = self.rdt
        count = lines * sizes["n"]
        b, args, gid, gsize, lsize, ok = self._flat_kernel(f"fft_chirp_out_{direction}", count)
        nn, mm = b.scalar("n"), b.scalar("m")
        with b.when(ok):
            line = b.let(op("div", gid, nn), "l")
            kk = b.let(op("rem", gid, nn), "k")
            xr, xi = self._pair(b, self._buf(b, args, a, False, "a"), b.let(op("add", op("mul", line, mm), kk)))
            wr, wi = self._chirp(b, kk, sign)
            yr, yi = _cmul(b, xr, xi, wr, wi)
            inv_m = b.let(op("div", _c(1.0, rdt), Cast(mm, rdt)))
            self._put(b, self._buf(b, args, dst, True, "dst"), self._line_pos(b, line, kk),
                      b.let(op("mul", yr, inv_m)), b.let(op("mul", yi, inv_m)))
        self._flat_launch(b, args, gsize, lsize, count, sizes)

    def _line_pos(self, b, line, t):
        """Entry ``t`` of line ``line`` of an axis of length ``n`` with ``inner`` elements after it (the
        scalar arguments ``n`` and ``inner``)."""
        nn, inn = b.scalar("n"), b.scalar("inner")
        base = op("add", op("mul", op("div", line, inn), op("mul", nn, inn)), op("rem", line, inn))
        return b.let(op("add", base, op("mul", t, inn)))

    # ------------------------------------------------------------------ 3. store

    def _store(self, src):
        ctx, e = self.ctx, self.eqn
        out = e.outputs[0]
        b = KernelBuilder("fft_store")
        args: dict = {}
        size = out.aval.size
        gid, gsize, lsize, ok = self._items(b, size)
        inverse = self.fft_type in (FftType.IFFT, FftType.IRFFT)
        scale = 1.0 / math.prod(self.lengths) if inverse else 1.0
        with b.when(ok):
            sname = self._buf(b, args, src, False, "w")
            if self.fft_type == FftType.RFFT:
                n_last = self.full[-1]
                m = n_last // 2 + 1
                pos = b.let(op("add", op("mul", op("div", gid, _c(m, INT32)), _c(n_last, INT32)),
                                op("rem", gid, _c(m, INT32))))
            else:
                pos = gid
            re, im = self._pair(b, sname, pos)
            if scale != 1.0:
                re, im = b.let(op("mul", re, _c(scale, self.rdt))), b.let(op("mul", im, _c(scale, self.rdt)))
            value = re if self.fft_type == FftType.IRFFT else b.let(Op("cmake", (re, im), self.cdt))
            b.store(ctx.output(b, args, out), gid, value)
        self.launches.append(make_launch(b, args, {}, gsize, lsize, (e,), "fft"))


def _dft2(b, vs):
    (ar, ai), (br, bi) = vs
    return [(b.let(op("add", ar, br)), b.let(op("add", ai, bi))), (b.let(op("sub", ar, br)), b.let(op("sub", ai, bi)))]


def _dft4(b, vs, sign):
    """The 4-point DFT with ``exp(sign 2 pi i / 4) = sign * i``."""
    (x0r, x0i), (x1r, x1i), (x2r, x2i), (x3r, x3i) = vs
    s0r, s0i = b.let(op("add", x0r, x2r)), b.let(op("add", x0i, x2i))
    d0r, d0i = b.let(op("sub", x0r, x2r)), b.let(op("sub", x0i, x2i))
    s1r, s1i = b.let(op("add", x1r, x3r)), b.let(op("add", x1i, x3i))
    d1r, d1i = b.let(op("sub", x1r, x3r)), b.let(op("sub", x1i, x3i))
    # (sign i) * d1 = (-sign d1i, sign d1r)
    if sign < 0:
        tr, ti = d1i, b.let(op("neg", d1r))
    else:
        tr, ti = b.let(op("neg", d1i)), d1r
    return [(b.let(op("add", s0r, s1r)), b.let(op("add", s0i, s1i))),
            (b.let(op("add", d0r, tr)), b.let(op("add", d0i, ti))),
            (b.let(op("sub", s0r, s1r)), b.let(op("sub", s0i, s1i))),
            (b.let(op("sub", d0r, tr)), b.let(op("sub", d0i, ti)))]


#: What ``schedule`` collects into its tables ``GROUPS`` (and ``OPERAND_VIEWS``).
GROUPS = {fft_p: FftGroup}
