"""A seeded generator of random fnarray programs and a differential runner (used by tests/test_fuzz.py).

A program is Python source: ``def f(v0, v1, ...)`` followed by one assignment per step, each a call of
``fnarray.numpy`` / ``fnarray.lax`` / a control-flow or transform function, and a ``return`` of a few
values. The source *is* the reproducer: it runs as printed, with the inputs printed beside it.

The builder draws each step from a table of step makers (``STEPS``), keyed by a kind; a maker looks at
the values built so far (their shape, dtype and three facts, below) and returns a source expression or
``None`` when it does not apply. The builder evaluates every step at once, eagerly on numpy:0 (the
reference), so it always knows each value's shape and dtype; a step that numpy:0 rejects is dropped.

Facts kept per value, so that comparisons are fair without hiding bugs:

- ``exact``: every backend must produce the same bits (up to ``-0 == +0``). Integer and bool values,
  and float values made only by exact operations (negation, abs, max/min, select, structural ops,
  gathers, sort, casts). Float arithmetic is not exact: fused multiply-add contraction, summation order
  and transcendental approximations differ between backends within a tolerance.
- ``finite``: the reference value has no NaN or inf.
- ``mag``: the largest finite magnitude in the value's dependency cone (scales absolute tolerances).

Discontinuous operations (comparisons, floor/ceil/round/sign, float-to-int casts, argmax, predicates
of ``cond``/``while_loop``, index arithmetic) and operations with singularities (log, sqrt, division,
pow...) take only ``exact`` float operands, and an inexact operand meets only finite partners in
binary arithmetic: otherwise a last-ulp difference upstream could flip a bit downstream, which is not
a bug. Everything else is compared: exact values bit for bit, inexact floats within a per-dtype
tolerance, NaN and inf positions always.
"""

from __future__ import annotations

import dataclasses
import math
import textwrap
import warnings

import numpy as np

import fnarray as fa
import fnarray.numpy as fnp
from fnarray import lax

INT32_EDGES = (-2**31, -2**31 + 1, -1, 0, 1, 2, 2**31 - 1, 7, -8, 31, 32)
FLOAT_SPECIALS = (np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 0.5, 3e38, -1e30, 1e-40, -1e-40, 2.0**-126)
SUBNORMALS = (1e-40, -1e-40)
MAX_SIZE = 64
MODES = ("jit",) * 12 + ("vmap",) * 3 + ("grad",) * 2 + ("eager",)
CAST_DTYPES = ("float32", "int32", "bool", "uint32", "int8", "uint8", "int16", "float16")


@dataclasses.dataclass
class Value:
    name: str
    shape: tuple
    dtype: np.dtype
    exact: bool
    finite: bool
    mag: float
    ref: object          # the numpy:0 fnarray Array (or a host ndarray for inputs)

    @property
    def kind(self):
        return self.dtype.kind  # 'f', 'i', 'u', 'b'

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def size(self):
        return int(np.prod(self.shape, dtype=np.int64))


@dataclasses.dataclass
class Program:
    seed: int
    mode: str                 # "jit", "eager", "vmap", "grad"
    inputs: list              # host ndarrays
    lines: list               # source lines of the body (without indentation)
    outputs: list             # names returned
    values: dict              # name -> Value (the reference facts)

    def source(self, outputs=None):
        args = ", ".join(f"v{i}" for i in range(len(self.inputs)))
        outs = outputs if outputs is not None else self.outputs
        body = "\n".join("    " + ln for ln in self.lines)
        return f"def f({args}):\n{body}\n    return ({', '.join(outs)},)\n"

    def function(self, outputs=None):
        scope = {"fa": fa, "fnp": fnp, "lax": lax, "np": np}
        exec(compile(self.source(outputs), f"<fuzz program seed={self.seed}>", "exec"), scope)
        return scope["f"]

    def reproducer(self, outputs=None):
        ins = "\n".join(f"v{i} = np.array({x.tolist()!r}, dtype=np.{x.dtype}).reshape({x.shape})"
                        for i, x in enumerate(self.inputs))
        return (f"# fuzz seed {self.seed}, mode {self.mode}; rerun: FNARRAY_FUZZ_SEED={self.seed} "
                f"pytest tests/test_fuzz.py -k seed\nimport numpy as np\nimport fnarray as fa\n"
                f"import fnarray.numpy as fnp\nfrom fnarray import lax\nnan, inf = np.nan, np.inf\n{ins}\n"
                f"{self.source(outputs)}")


# ------------------------------------------------------------------------------------ inputs


def _shape(rng, rank=None):
    rank = rng.choice([0, 1, 1, 2, 2, 2, 3, 3, 4]) if rank is None else rank
    dims = []
    for _ in range(rank):
        r = rng.rand()
        dims.append(0 if r < 0.06 else 1 if r < 0.3 else int(rng.randint(2, 6)))
    while int(np.prod(dims, dtype=np.int64)) > MAX_SIZE:
        dims[int(np.argmax(dims))] //= 2
    return tuple(dims)


def make_input(rng, shape, dtype, specials=True, subnormals=True):
    """A host array of ``shape``/``dtype`` mixing ordinary values with the edge values of that dtype."""
    dtype = np.dtype(dtype)
    n = int(np.prod(shape, dtype=np.int64))
    if dtype == np.bool_:
        return (rng.rand(n) < 0.5).reshape(shape)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        base = rng.randint(max(info.min, -9), min(info.max, 9) + 1, size=n).astype(np.int64)
        if specials:
            edges = [e for e in INT32_EDGES + (info.min, info.max) if info.min <= e <= info.max]
            mask = rng.rand(n) < 0.3
            base[mask] = rng.choice(edges, size=int(mask.sum()))
        return base.astype(dtype).reshape(shape)
    base = np.round(rng.uniform(-3, 3, size=n), 1 if rng.rand() < 0.5 else 6)
    if specials:
        pool = [s for s in FLOAT_SPECIALS + (np.nan, np.inf) if subnormals or s not in SUBNORMALS]
        mask = rng.rand(n) < 0.25
        base[mask] = rng.choice(pool, size=int(mask.sum()))
    with np.errstate(over="ignore"):
        return base.astype(dtype).reshape(shape)


def _batch_row(rng, x):
    """Another row of a vmapped input: fresh finite values where ``x`` is finite, ``x``'s NaN/inf elsewhere
    (the value facts, drawn from row 0, stay true for every row)."""
    row = make_input(rng, x.shape, x.dtype, specials=x.dtype.kind != "f")
    if x.dtype.kind == "f":
        row = np.where(np.isfinite(x), row, x)
    return row


def _facts(arr, deps, exact):
    a = np.asarray(arr)
    fin = True
    mag = max((d.mag for d in deps), default=1.0)
    if a.dtype.kind in "fc" and a.size:
        finite = np.isfinite(a)
        fin = bool(finite.all())
        if finite.any():
            mag = max(mag, float(np.max(np.abs(a[finite].astype(np.float64)))))
    elif a.dtype.kind in "iu" and a.size:
        mag = max(mag, float(np.max(np.abs(a.astype(np.float64)))))
    return exact, fin, mag


# ------------------------------------------------------------------------------------ step makers
# Each maker(b) returns (expression source, exact, dependencies) or None. ``b`` is the Builder.

UNARY_EXACT_F = ("fnp.negative({})", "fnp.abs({})", "fnp.positive({})", "fnp.copysign({}, -1.0)")
UNARY_TAME_F = ("fnp.sin({})", "fnp.cos({})", "fnp.tanh({})", "fnp.exp({})", "fnp.expm1({})",
                "lax.logistic({})", "fnp.arctan({})", "fnp.square({})", "fnp.sinh({})", "fnp.arcsinh({})",
                "lax.erf({})", "fnp.exp2({})", "fnp.cbrt({})", "({} * 0.5)", "({} + 1.5)", "(2.0 - {})")
UNARY_SINGULAR_F = ("fnp.log({})", "fnp.log1p({})", "fnp.sqrt({})", "lax.rsqrt({})", "fnp.reciprocal({})",
                    "fnp.arcsin({})", "fnp.arccos({})", "fnp.arctanh({})", "fnp.tan({})", "fnp.cosh({})",
                    "fnp.log2({})", "fnp.log10({})", "fnp.arccosh({})", "lax.erf_inv({})", "lax.lgamma({})")
UNARY_DISCRETE_F = ("fnp.floor({})", "fnp.ceil({})", "fnp.round({})", "fnp.trunc({})", "fnp.sign({})",
                    "fnp.isnan({})", "fnp.isinf({})", "fnp.isfinite({})", "({} > 0.5)",
                    "({} == 0)", "({} != {})", "({} <= -1.0)")
UNARY_INT = ("fnp.negative({})", "fnp.abs({})", "fnp.sign({})", "fnp.bitwise_not({})", "({} + 1)", "({} * 3)",
             "({} - 7)", "({} // 2)", "({} % 3)", "({} // -3)", "({} % -4)", "({} >> 1)", "({} << 2)",
             "lax.population_count({})", "({} ** 2)", "({} > 0)", "({} == -1)", "fnp.square({})")
UNARY_BOOL = ("fnp.logical_not({})", "(~{})", "({}.astype(fnp.int32) - 1)")
BINARY_EXACT_F = ("fnp.maximum({}, {})", "fnp.minimum({}, {})", "fnp.copysign({}, {})")
BINARY_TAME_F = ("fnp.add({}, {})", "fnp.subtract({}, {})", "fnp.multiply({}, {})", "fnp.hypot({}, {})",
                 "fnp.logaddexp({}, {})")
BINARY_SINGULAR_F = ("fnp.divide({}, {})", "fnp.power({}, {})", "fnp.arctan2({}, {})", "fnp.floor_divide({}, {})",
                     "fnp.remainder({}, {})", "fnp.fmod({}, {})", "fnp.nextafter({}, {})")
BINARY_DISCRETE_F = ("({} < {})", "({} <= {})", "({} == {})", "({} != {})", "({} > {})", "({} >= {})")
BINARY_INT = ("fnp.add({}, {})", "fnp.subtract({}, {})", "fnp.multiply({}, {})", "fnp.floor_divide({}, {})",
              "fnp.remainder({}, {})", "fnp.maximum({}, {})", "fnp.minimum({}, {})", "fnp.bitwise_and({}, {})",
              "fnp.bitwise_or({}, {})", "fnp.bitwise_xor({}, {})", "fnp.left_shift({}, {})",
              "fnp.right_shift({}, {})", "({} < {})", "({} == {})", "({} >= {})", "fnp.fmod({}, {})")
BINARY_BOOL = ("fnp.logical_and({}, {})", "fnp.logical_or({}, {})", "fnp.logical_xor({}, {})", "({} == {})",
               "({} & {})", "({} | {})")


def _pick(b, pred=None):
    cands = [v for v in b.values.values() if pred is None or pred(v)]
    return cands[b.rng.randint(len(cands))] if cands else None


def _choice(rng, seq):
    return seq[rng.randint(len(seq))]


def step_unary(b):
    v = _pick(b)
    if v.kind == "f":
        pools = [UNARY_EXACT_F, UNARY_TAME_F] + ([UNARY_SINGULAR_F, UNARY_DISCRETE_F] if v.exact else [])
        pool = _choice(b.rng, pools)
        tmpl = _choice(b.rng, pool)
        if v.mag > 1e4 and any(t in tmpl for t in ("sin(", "cos(", "tan(")):
            # periodic functions of huge arguments: GPU range reduction is only accurate near zero (WGSL
            # specifies sin/cos accuracy on [-pi, pi] only)
            tmpl = "fnp.tanh({})"
        if pool is UNARY_DISCRETE_F and v.finite and b.rng.rand() < 0.1:
            tmpl = "fnp.signbit({})"  # the sign of a NaN that an operation made is unspecified (IEEE 754)
        exact = v.exact and pool is UNARY_EXACT_F
        if pool is UNARY_DISCRETE_F:
            exact = True
    elif v.kind == "b":
        tmpl, exact = _choice(b.rng, UNARY_BOOL), True
    else:
        tmpl, exact = _choice(b.rng, UNARY_INT), True
    return tmpl.format(*[v.name] * tmpl.count("{}")), exact, [v]


def _broadcast_partner(b, v, same_dtype=True):
    def ok(w):
        if same_dtype and w.dtype != v.dtype:
            return False
        try:
            s = np.broadcast_shapes(v.shape, w.shape)
        except ValueError:
            return False
        return int(np.prod(s, dtype=np.int64)) <= MAX_SIZE
    return _pick(b, ok)


def step_binary(b):
    v = _pick(b)
    if b.rng.rand() < 0.15:  # a Python scalar operand (weak type)
        if v.kind == "f":
            c = _choice(b.rng, ("2.0", "-0.5", "0.0", "float('inf')", "float('nan')", "3")
                        + (("1e-45",) if b.subnormals else ()))
            tmpl = _choice(b.rng, ("({} + %s)", "({} * %s)", "fnp.maximum({}, %s)", "({} - %s)"))
            if not v.exact and c in ("float('inf')", "float('nan')"):
                c = "2.0"
            return tmpl.replace("%s", c).format(v.name), v.exact and "maximum" in tmpl, [v]
        if v.kind in "iu":
            c = _choice(b.rng, ("1", "-1", "0", "2", "5"))
            tmpl = _choice(b.rng, ("({} + %s)", "({} * %s)", "({} // %s)", "({} % %s)", "({} - %s)"))
            return tmpl.replace("%s", c).format(v.name), True, [v]
    w = _broadcast_partner(b, v)
    if w is None:
        return None
    if v.kind == "f":
        both_exact = v.exact and w.exact
        pools = [BINARY_EXACT_F]
        if both_exact or (v.finite and w.finite) or (v.exact and v.finite) or (w.exact and w.finite):
            pools.append(BINARY_TAME_F)
        if both_exact:
            pools += [BINARY_SINGULAR_F, BINARY_DISCRETE_F]
        pool = _choice(b.rng, pools)
        exact = (both_exact and pool is BINARY_EXACT_F) or pool is BINARY_DISCRETE_F
        tmpl = _choice(b.rng, pool)
        if "copysign" in tmpl and not w.finite:  # a made NaN's sign is unspecified (IEEE 754)
            tmpl = "fnp.maximum({}, {})"
    elif v.kind == "b":
        tmpl, exact = _choice(b.rng, BINARY_BOOL), True
    else:
        tmpl, exact = _choice(b.rng, BINARY_INT), True
    return tmpl.format(v.name, w.name), exact, [v, w]


def step_where(b):
    c = _pick(b, lambda v: v.kind == "b" or (v.exact and v.kind != "f"))
    if c is None:
        return None
    x = _broadcast_partner(b, c, same_dtype=False)
    y = _broadcast_partner(b, x, same_dtype=True) if x is not None else None
    if y is None:
        return None
    try:
        np.broadcast_shapes(c.shape, x.shape, y.shape)
    except ValueError:
        return None
    cond = c.name if c.kind == "b" else f"({c.name} > 0)"
    return f"fnp.where({cond}, {x.name}, {y.name})", x.exact and y.exact, [c, x, y]


def step_cast(b):
    v = _pick(b)
    to = _choice(b.rng, CAST_DTYPES)
    if v.kind == "f" and not v.exact and to != "float16" and to != "float32":
        return None
    if v.dtype == np.float16 and to != "float32":
        return None  # float16 arithmetic rounds differently per backend; cast back only
    if to == "float16" and v.kind != "f":
        return None
    exact = v.exact or to == "float32"
    # bitcasts of floats only where finite: NaN payloads and signs are unspecified
    if b.rng.rand() < 0.1 and v.dtype.itemsize == 4 and v.kind != "b" and (v.finite or v.kind != "f"):
        tgt = _choice(b.rng, [d for d in ("float32", "int32", "uint32") if np.dtype(d) != v.dtype])
        if v.kind == "f" and tgt == "float32":
            return None
        return f"lax.bitcast_convert_type({v.name}, fnp.{tgt})", True, [v]
    return f"{v.name}.astype(fnp.{to})", exact, [v]


def step_structural(b):
    v = _pick(b)
    rng, s, r = b.rng, v.shape, v.ndim
    opts = ["reshape", "expand", "broadcast"]
    if r >= 1:
        opts += ["slice", "flip", "pad", "concat", "index", "squeeze", "lax_slice", "roll", "tile", "stack"]
    if r >= 2:
        opts += ["transpose", "moveaxis"]
    op = _choice(rng, opts)
    n = v.name
    if op == "reshape":
        cands = [(-1,), s + (1,), (1,) + s]
        if r >= 2:
            cands.append((s[0] * s[1],) + s[2:])
            cands.append(s[:-2] + (s[-2] * s[-1],))
        if r >= 1 and s[-1] % 2 == 0 and s[-1] > 0:
            cands.append(s[:-1] + (2, s[-1] // 2))
        return f"fnp.reshape({n}, {_choice(rng, cands)!r})", v.exact, [v]
    if op == "expand":
        return f"fnp.expand_dims({n}, {int(rng.randint(-r - 1, r + 1))})", v.exact, [v]
    if op == "broadcast":
        extra = (int(rng.choice([1, 2, 3])),)
        tgt = extra + tuple(d if d != 1 or rng.rand() < 0.5 else int(rng.randint(2, 4)) for d in s)
        if int(np.prod(tgt, dtype=np.int64)) > MAX_SIZE:
            return None
        return f"fnp.broadcast_to({n}, {tgt!r})", v.exact, [v]
    ax = int(rng.randint(r)) if r else 0
    if op == "slice":
        d = s[ax]
        start = _choice(rng, [None, 0, 1, -1, d, -d - 1 if d else 0])
        stop = _choice(rng, [None, d, -1, 1, 0])
        step = _choice(rng, [None, 1, 2, -1, -2, 3])
        sl = ", ".join([":"] * ax + [f"{_s(start)}:{_s(stop)}:{_s(step)}"])
        return f"{n}[{sl}]", v.exact, [v]
    if op == "lax_slice":
        d = s[ax]
        lo = int(rng.randint(d + 1))
        hi = int(rng.randint(lo, d + 1))
        st = int(rng.choice([1, 2, 3]))
        return f"lax.slice_in_dim({n}, {lo}, {hi}, {st}, axis={ax})", v.exact, [v]
    if op == "flip":
        return f"fnp.flip({n}, axis={ax})", v.exact, [v]
    if op == "pad":
        if rng.rand() < 0.5:
            widths = tuple((int(rng.randint(3)), int(rng.randint(3))) for _ in s)
            new = tuple(d + lo + hi for d, (lo, hi) in zip(s, widths, strict=True))
            if int(np.prod(new, dtype=np.int64)) > MAX_SIZE:
                return None
            mode = _choice(rng, ["'constant'", "'edge'", "'wrap'", "'reflect'"])
            if mode != "'constant'" and 0 in s:
                mode = "'constant'"
            return f"fnp.pad({n}, {widths!r}, mode={mode})", v.exact, [v]
        cfg = tuple((int(rng.randint(-1, 3)), int(rng.randint(-1, 3)), int(rng.randint(0, 2))) for _ in s)
        new = []
        for d, (lo, hi, it) in zip(s, cfg, strict=True):
            core = d + max(d - 1, 0) * it
            new.append(lo + hi + core)
        if min(new) < 0 or int(np.prod(new, dtype=np.int64)) > MAX_SIZE:
            return None
        val = {"f": "-2.5", "b": "True"}.get(v.kind, "3")
        return f"lax.pad({n}, fnp.asarray({val}, {n}.dtype), {cfg!r})", v.exact, [v]
    if op == "concat":
        w = _pick(b, lambda w: w.dtype == v.dtype and w.ndim == r
                  and all(a == c for i, (a, c) in enumerate(zip(w.shape, s, strict=True)) if i != ax))
        if w is None or v.size + w.size > MAX_SIZE:
            return None
        return f"fnp.concatenate([{n}, {w.name}, {n}[:0]], axis={ax})", v.exact and w.exact, [v, w]
    if op == "stack":
        w = _pick(b, lambda w: w.dtype == v.dtype and w.shape == s)
        if 2 * v.size > MAX_SIZE:
            return None
        return f"fnp.stack([{n}, {w.name}], axis={int(rng.randint(-r - 1, r + 1))})", v.exact and w.exact, [v, w]
    if op == "index":
        if s[0] == 0:
            return None
        return f"{n}[{int(rng.randint(-s[0], s[0]))}]", v.exact, [v]
    if op == "squeeze":
        ones = [i for i, d in enumerate(s) if d == 1]
        return (f"fnp.squeeze({n}, axis={ones[0]})" if ones else f"{n}[None]"), v.exact, [v]
    if op == "roll":
        return f"fnp.roll({n}, {int(rng.randint(-3, 4))}, axis={ax})", v.exact, [v]
    if op == "tile":
        if 2 * v.size > MAX_SIZE:
            return None
        return f"fnp.tile({n}, 2)", v.exact, [v]
    if op == "transpose":
        return f"fnp.transpose({n}, {tuple(int(p) for p in rng.permutation(r))!r})", v.exact, [v]
    return f"fnp.moveaxis({n}, 0, -1)", v.exact, [v]


def _s(x):
    return "" if x is None else str(x)


def _int_index_source(b, limit, shape):
    """An int32 index expression of ``shape``: from an int value (any range: indices clamp) or literal."""
    if b.rng.rand() < 0.5:
        src = _pick(b, lambda w: w.kind in "iu" and w.shape == shape)
        if src is not None:
            return f"{src.name}.astype(fnp.int32)", [src]
    idx = b.rng.randint(-limit - 2, limit + 2, size=shape) if limit else np.zeros(shape, np.int64)
    return f"np.array({idx.tolist()!r}, np.int32).reshape({shape!r})", []


def step_gather_scatter(b):
    v = _pick(b, lambda v: v.ndim >= 1)
    if v is None:
        return None
    rng = b.rng
    n, d = v.name, v.shape[0]
    ishape = _choice(rng, [(int(rng.randint(0, 5)),), (2, 2), (1,)])
    idx, deps = _int_index_source(b, d, ishape)
    op = _choice(rng, ["getitem", "take", "take_along", "set", "add", "mul", "min", "max", "dyn_slice",
                       "dyn_update"])
    if op == "getitem":
        if d == 0:
            return None
        out = ishape + v.shape[1:]
        if int(np.prod(out, dtype=np.int64)) > MAX_SIZE:
            return None
        return f"{n}[{idx}]", v.exact, [v, *deps]
    if op == "take":
        if d == 0:
            return None
        out = ishape + v.shape[1:]
        if int(np.prod(out, dtype=np.int64)) > MAX_SIZE:
            return None
        mode = _choice(rng, ["None", "'clip'", "'wrap'"])
        return f"fnp.take({n}, {idx}, axis=0, mode={mode})", v.exact, [v, *deps]
    if op == "take_along":
        if d == 0:
            return None
        ax = v.ndim - 1
        k = int(rng.randint(0, 4))
        shp = v.shape[:-1] + (k,)
        if 0 in v.shape:
            return None
        idx2 = rng.randint(0, v.shape[-1], size=shp)
        return (f"fnp.take_along_axis({n}, np.array({idx2.tolist()!r}, np.int32).reshape({shp!r}), axis={ax})",
                v.exact, [v])
    if op in ("set", "add", "mul", "min", "max"):
        upd_shape = ishape + v.shape[1:]
        if op == "set":  # duplicate indices make the winner unspecified (as in JAX): distinct ones only
            k = min(ishape[0], d) if len(ishape) == 1 else 0
            ishape, upd_shape = (k,), (k,) + v.shape[1:]
            uniq = rng.permutation(d)[:k] - (d if rng.rand() < 0.3 else 0)
            idx, deps = f"np.array({uniq.tolist()!r}, np.int32)", []
        u = _pick(b, lambda w: w.dtype == v.dtype and w.shape == upd_shape)
        if u is None:
            try:
                np.broadcast_shapes(upd_shape, ())
            except ValueError:
                return None
            u_src, udeps = {"f": "1.5", "b": "True"}.get(v.kind, "3"), []
        else:
            u_src, udeps = u.name, [u]
        if op == "mul" and v.kind == "b":
            return None
        exact = v.exact and (u is None or u.exact) and (op in ("set", "min", "max") or v.kind != "f")
        if op in ("add", "mul") and v.kind == "f" and not (v.finite and (u is None or u.finite)):
            return None
        return f"{n}.at[{idx}].{op}({u_src})", exact, [v, *deps, *udeps]
    if op == "dyn_slice":
        size = int(rng.randint(0, d + 1))
        start, sdeps = _scalar_index(b)
        starts = ", ".join([start] + ["0"] * (v.ndim - 1))
        sizes = (size,) + v.shape[1:]
        return f"lax.dynamic_slice({n}, ({starts},), {sizes!r})", v.exact, [v, *deps[:0], *sdeps]
    u = _pick(b, lambda w: w.dtype == v.dtype and w.ndim == v.ndim and
              all(a <= c for a, c in zip(w.shape, v.shape, strict=True)))
    if u is None:
        return None
    start, sdeps = _scalar_index(b)
    starts = ", ".join([start] + ["0"] * (v.ndim - 1))
    return f"lax.dynamic_update_slice({n}, {u.name}, ({starts},))", v.exact and u.exact, [v, u, *sdeps]


def _scalar_index(b):
    src = _pick(b, lambda w: w.kind in "iu" and w.size >= 1)
    if src is None or b.rng.rand() < 0.3:
        return str(int(b.rng.randint(-3, 6))), []
    return f"{src.name}.ravel()[0].astype(fnp.int32)", [src]


def step_reduce(b):
    v = _pick(b)
    rng, r = b.rng, v.ndim
    axis = None if r == 0 or rng.rand() < 0.3 else int(rng.randint(-r, r))
    if rng.rand() < 0.2 and r >= 2:
        axis = (0, r - 1)
    keep = bool(rng.rand() < 0.3)
    if v.kind == "b":
        fn = _choice(rng, ["any", "all", "sum", "count_nonzero"])
        if fn == "count_nonzero":
            return f"fnp.count_nonzero({v.name}, axis={axis!r})", True, [v]
        return f"fnp.{fn}({v.name}, axis={axis!r}, keepdims={keep})", True, [v]
    fns = ["sum", "max", "min", "prod", "argmax", "argmin", "any"]
    if v.kind == "f":
        fns += ["mean", "logsumexp", "var"]
    fn = _choice(rng, fns)
    if fn in ("argmax", "argmin"):
        if v.kind == "f" and not v.exact:
            return None
        ax = None if r == 0 else int(rng.randint(-r, r))
        return f"fnp.{fn}({v.name}, axis={ax!r}, keepdims={keep})", True, [v]
    if fn in ("max", "min", "any"):
        return f"fnp.{fn}({v.name}, axis={axis!r}, keepdims={keep})", v.exact or v.kind != "f", [v]
    if v.kind == "f" and not v.finite and not v.exact:
        return None
    return f"fnp.{fn}({v.name}, axis={axis!r}, keepdims={keep})", v.kind != "f", [v]


def step_cumulative(b):
    v = _pick(b, lambda v: v.ndim >= 1 and v.kind != "b")
    if v is None:
        return None
    ax = int(b.rng.randint(v.ndim))
    fn = _choice(b.rng, ["cumsum", "cumprod", "cummax", "cummin", "cumulative_sum"])
    if fn in ("cumsum", "cumprod", "cumulative_sum") and v.kind == "f" and not v.finite and not v.exact:
        return None
    exact = v.kind != "f" or (fn in ("cummax", "cummin") and v.exact)
    if fn in ("cummax", "cummin"):
        rev = bool(b.rng.rand() < 0.3)
        return f"lax.{fn}({v.name}, axis={ax}, reverse={rev})", exact, [v]
    if fn == "cumulative_sum":
        return f"fnp.cumulative_sum({v.name}, axis={ax}, include_initial=True)", exact, [v]
    return f"fnp.{fn}({v.name}, axis={ax})", exact, [v]


def step_sort(b):
    v = _pick(b, lambda v: v.ndim >= 1)
    if v is None:
        return None
    ax = int(b.rng.randint(-v.ndim, v.ndim))
    desc = bool(b.rng.rand() < 0.3)
    if b.rng.rand() < 0.5:
        return f"fnp.sort({v.name}, axis={ax}, descending={desc})", v.exact, [v]
    if v.kind == "f" and not v.exact:
        return None
    return f"fnp.argsort({v.name}, axis={ax}, stable=True, descending={desc})", True, [v]


def step_dot(b):
    v = _pick(b, lambda v: v.ndim >= 1 and v.kind in "fi" and v.dtype.itemsize == 4)
    if v is None:
        return None
    rng = b.rng
    k = v.shape[-1]
    if v.kind == "f" and not v.finite:
        return None
    w = _pick(b, lambda w: w.dtype == v.dtype and w.ndim >= 1 and (w.shape[0] == k if w.ndim <= 2 else False)
              and (w.finite or w.kind != "f"))
    if w is None or rng.rand() < 0.3:
        m = int(rng.choice([1, 2, 3]))
        const = rng.randint(-2, 3, size=(k, m))
        w_src = f"np.array({const.tolist()!r}, np.{v.dtype}).reshape({(k, m)!r})"
        deps = [v]
    else:
        w_src, deps = w.name, [v, w]
    form = _choice(rng, ["matmul", "tensordot", "dot_general"])
    exact = v.kind != "f"
    if form == "matmul":
        return f"fnp.matmul({v.name}, {w_src})", exact, deps
    if form == "tensordot":
        return f"fnp.tensordot({v.name}, {w_src}, axes=1)", exact, deps
    r = v.ndim
    return (f"lax.dot_general({v.name}, fnp.asarray({w_src}), ((({r - 1},), (0,)), ((), ())))",
            exact, deps)


def step_batched_dot(b):
    v = _pick(b, lambda v: v.ndim == 3 and v.kind == "f" and v.dtype == np.float32 and v.finite)
    if v is None:
        return None
    bsz, m, k = v.shape
    return (f"lax.dot_general({v.name}, fnp.swapaxes({v.name}, 1, 2), (((2,), (1,)), ((0,), (0,))))",
            False, [v])


def _elementwise_body(b, v, var):
    """A dtype- and shape-preserving expression of ``var`` for control-flow bodies."""
    if v.kind == "f":
        periodic = f"fnp.sin({var})" if v.mag <= 1e4 else f"fnp.tanh({var})"
        return _choice(b.rng, [f"{var} * 0.5 + 1.0", periodic, f"-{var}", f"fnp.abs({var}) - 1.0",
                               f"fnp.maximum({var}, 0.25)"])
    if v.kind == "b":
        return _choice(b.rng, [f"~{var}", f"{var} ^ True"])
    return _choice(b.rng, [f"{var} * 3 + 1", f"{var} // 2", f"-{var}", f"{var} ^ 5", f"fnp.maximum({var}, 2)"])


def _exact_after(v, body):
    return v.kind != "f" or (v.exact and ("-" in body[:1] or "maximum" in body) and "0.5" not in body
                             and "sin" not in body and "- 1.0" not in body)


def step_cond(b):
    p = _pick(b, lambda v: v.kind != "f" or v.exact)
    x = _pick(b)
    if p is None or x is None:
        return None
    pred = f"fnp.sum({p.name}.astype(fnp.int32)) > 0" if p.kind != "b" else f"fnp.any({p.name})"
    t, f = _elementwise_body(b, x, "a"), _elementwise_body(b, x, "a")
    exact = _exact_after(x, t) and _exact_after(x, f)
    if b.rng.rand() < 0.3:
        return (f"fa.switch(fnp.sum({p.name}.astype(fnp.int32)) % 3, "
                f"[lambda a: {t}, lambda a: {f}, lambda a: a], {x.name})", exact, [p, x])
    return f"fa.cond({pred}, lambda a: {t}, lambda a: {f}, {x.name})", exact, [p, x]


def step_loop(b):
    x = _pick(b)
    rng = b.rng
    body = _elementwise_body(b, x, "a")
    exact = _exact_after(x, body)
    n = int(rng.randint(0, 4))
    # reverse mode of while_loop is unsupported (as in JAX): not under grad
    kind = _choice(rng, ["fori", "scan", "scan_rev"] + ([] if b.mode == "grad" else ["while"]))
    if kind == "fori":
        return f"fa.fori_loop(0, {n}, lambda i, a: {body}, {x.name})", exact, [x]
    if kind == "while":
        return (f"fa.while_loop(lambda s: s[0] < {n}, lambda s: (s[0] + 1, (lambda a: {body})(s[1])), "
                f"(fnp.asarray(0, fnp.int32), {x.name}))[1]"), exact, [x]
    if x.ndim == 0 or x.kind == "b":
        return None
    rev = kind == "scan_rev"
    if x.kind == "f" and not (x.finite or x.exact):
        return None
    out = _choice(rng, ["0", "1"])
    return (f"fa.scan(lambda c, e: (c + e, c * 2), fnp.zeros({x.shape[1:]!r}, {x.name}.dtype), {x.name}, "
            f"reverse={rev})[{out}]"), x.kind != "f", [x]


def step_inner_transform(b):
    x = _pick(b, lambda v: v.kind == "f" and v.ndim >= 1 and v.finite and v.mag <= 1e4)  # sin/tanh: see unary
    rng = b.rng
    if x is None:
        return None
    kind = _choice(rng, ["vmap", "grad", "jit", "vmap_grad"])
    if kind == "vmap":
        return f"fa.vmap(lambda a: fnp.sum(a * a) + fnp.max(a, initial=-1.0))({x.name})", False, [x]
    if kind == "grad":
        return f"fa.grad(lambda a: fnp.sum(fnp.sin(a) * a))({x.name})", False, [x]
    if kind == "jit":
        return f"fa.jit(lambda a: fnp.cumsum(a * 2.0, axis=0))({x.name})", False, [x]
    return f"fa.vmap(fa.grad(lambda a: fnp.sum(fnp.tanh(a) * a)))({x.name})", False, [x]


STEPS = {
    "unary": (step_unary, 6), "binary": (step_binary, 6), "where": (step_where, 1.5), "cast": (step_cast, 1.5),
    "structural": (step_structural, 5), "gather_scatter": (step_gather_scatter, 3), "reduce": (step_reduce, 3),
    "cumulative": (step_cumulative, 1.5), "sort": (step_sort, 1.5), "dot": (step_dot, 1.5),
    "batched_dot": (step_batched_dot, 0.5), "cond": (step_cond, 1), "loop": (step_loop, 1.5),
    "inner_transform": (step_inner_transform, 1),
}


# ------------------------------------------------------------------------------------ builder


class Builder:
    """Builds one program from ``seed``, evaluating each step eagerly on numpy:0 as it goes."""

    def __init__(self, seed, subnormals=True, kinds=None, mode=None):
        self.rng = np.random.RandomState(seed)
        self.seed = seed
        self.values = {}
        self.lines = []
        self.subnormals = subnormals
        names = sorted(kinds or STEPS)
        w = np.array([STEPS[k][1] for k in names], float)
        self.kinds, self.weights = names, w / w.sum()
        self.mode = mode

    def _add(self, name, arr, exact, deps, shape=None, dtype=None):
        e, fin, mag = _facts(arr, deps, exact)
        self.values[name] = Value(name, tuple(arr.shape), np.dtype(arr.dtype), e, fin, mag, arr)

    def build(self):
        rng = self.rng
        mode = self.mode = self.mode or _choice(rng, MODES)
        dt_pool = ["float32"] * 5 + ["int32"] * 3 + ["bool", "uint32", "int8", "float16"]
        if mode == "grad":
            dt_pool = ["float32"]
        n_in = int(rng.randint(1, 4))
        base = _shape(rng)
        inputs = []
        for i in range(n_in):
            shape = base if rng.rand() < 0.5 else _shape(rng, min(len(base), int(rng.randint(0, 4))))
            if rng.rand() < 0.3 and base:
                shape = tuple(1 if rng.rand() < 0.4 else d for d in base[int(rng.randint(len(base))):])
            dtype = _choice(rng, dt_pool)
            x = make_input(rng, shape, dtype, specials=mode != "grad", subnormals=self.subnormals)
            inputs.append(x)
            arr = fa.device_put(fnp.asarray(x), "numpy:0")
            self._add(f"v{i}", arr, True, [])
        if mode == "vmap":  # every input gets a leading batch axis; the body sees one slice
            bsz = int(rng.choice([1, 2, 3]))
            inputs = [np.stack([x] + [_batch_row(rng, x) for _ in range(bsz - 1)]) for x in inputs]
        n_steps = int(rng.randint(2, 9))
        tries = 0
        while len(self.lines) < n_steps and tries < 4 * n_steps:
            tries += 1
            kind = self.kinds[rng.choice(len(self.kinds), p=self.weights)]
            made = STEPS[kind][0](self)
            if made is None:
                continue
            expr, exact, deps = made
            if mode == "grad" and kind in ("inner_transform",):
                continue
            name = f"v{len(self.values)}"
            scope = {"fa": fa, "fnp": fnp, "lax": lax, "np": np, **{k: v.ref for k, v in self.values.items()}}
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    out = eval(expr, scope)  # noqa: S307 - the program's own generated source
            except Exception:  # numpy:0 rejects this step (shapes, dtypes): drop it, draw another
                continue
            if not isinstance(out, fa.Array) or out.size > MAX_SIZE:
                continue
            self.lines.append(f"{name} = {expr}")
            self._add(name, out, exact, deps)
        made = [k for k in self.values if int(k[1:]) >= n_in] or [f"v{n_in - 1}"]
        if mode == "grad":
            floats = [k for k in made if self.values[k].kind == "f"]
            made = floats[-1:] or [f"v{n_in - 1}"]
            if self.values[made[0]].kind != "f":
                return None
            return Program(self.seed, mode, inputs, self.lines, made, dict(self.values))
        k = min(len(made), int(rng.randint(1, 4)))
        outs = list(dict.fromkeys([made[-1]] + [made[j] for j in rng.choice(len(made), k, replace=False)]))
        return Program(self.seed, mode, inputs, self.lines, outs, dict(self.values))


def build_program(seed, subnormals=True, mode=None):
    """The program of ``seed`` (deterministic); ``None`` when the draw gives nothing testable."""
    return Builder(seed, subnormals=subnormals, mode=mode).build()


# ------------------------------------------------------------------------------------ running


def _tol(dtype, mag):
    if dtype == np.float16:
        return 4e-3, 4e-3 * mag
    return 2e-4, 2e-5 * mag


def compare(got, ref, value, label):
    """``None`` when ``got`` agrees with ``ref`` for ``value``'s facts, else a message."""
    g, r = np.asarray(got), np.asarray(ref)
    if g.shape != r.shape or g.dtype != r.dtype:
        return f"{label}: got {g.dtype}{list(g.shape)}, reference {r.dtype}{list(r.shape)}"
    if r.dtype.kind != "f":
        bad = g != r
    else:
        gn, rn = np.isnan(g), np.isnan(r)
        bad = gn != rn
        both = ~gn & ~rn
        if value.exact:
            bad |= both & (g != r)
        else:
            rtol, atol = _tol(r.dtype, value.mag)
            g64, r64 = g.astype(np.float64), r.astype(np.float64)
            inf = np.isinf(g64) | np.isinf(r64)
            with np.errstate(invalid="ignore"):
                far = np.abs(g64 - r64) > atol + rtol * np.abs(r64)
            bad |= both & ((inf & (g64 != r64)) | (~inf & far))
    if np.any(bad):
        i = tuple(int(k) for k in np.argwhere(bad)[0])
        return (f"{label}: {int(np.sum(bad))} of {r.size} elements differ ({'exact' if value.exact else 'tolerance'}"
                f" compare); first at {i}: got {g[i]!r}, reference {r[i]!r}")
    return None


def reference(prog, outputs):
    """numpy:0 results of ``prog`` (with its mode's transform) for ``outputs``."""
    f = prog.function(outputs)
    ins = [fa.device_put(fnp.asarray(x), "numpy:0") for x in prog.inputs]
    if prog.mode == "vmap":  # against a Python loop over the batch, independent of the batching rules
        rows = [f(*[x[i] for x in ins]) for i in range(prog.inputs[0].shape[0])]
        return [np.stack([np.asarray(r[k]) for r in rows]) for k in range(len(outputs))]
    if prog.mode == "grad":
        return [np.asarray(g) for g in fa.jit(_grad_of(prog, f), device="numpy:0")(*ins)]
    return [np.asarray(o) for o in f(*ins)]


def _grad_of(prog, f):
    floats = tuple(i for i, x in enumerate(prog.inputs) if x.dtype.kind == "f")
    w = np.random.RandomState(prog.seed + 7).uniform(-1, 1, prog.values[prog.outputs[0]].shape).astype(np.float32)
    return fa.grad(lambda *xs: fnp.sum(f(*xs)[0] * w), argnums=floats)


def _transformed(prog, outputs=None):
    """The function the device runs for ``prog``: its body under its mode's transform."""
    f = prog.function(outputs)
    if prog.mode == "vmap":
        return fa.vmap(f)
    if prog.mode == "grad":
        return _grad_of(prog, f)
    return f


def run_on(prog, device, outputs):
    ins = [fa.device_put(fnp.asarray(x), device) for x in prog.inputs]
    f = _transformed(prog, outputs)
    outs = f(*ins) if prog.mode == "eager" else fa.jit(f, device=device)(*ins)
    return [np.asarray(o) for o in outs]


def check(prog, device):
    """``None`` when ``prog`` gives numpy:0's results on ``device``, else a message with a reproducer."""
    msg = _check_outputs(prog, device, prog.outputs)
    if msg is None:
        return None
    # Minimize: the first failing output alone, with only the steps it depends on.
    for out in prog.outputs:
        small = slice_program(prog, out)
        m = _check_outputs(small, device, small.outputs)
        if m is not None:
            return f"{m}\n--- reproducer (numpy:0 is the reference) ---\n{small.reproducer()}"
    return f"{msg}\n--- reproducer (numpy:0 is the reference) ---\n{prog.reproducer()}"


def check_group(progs, device):
    """Failure messages (one per failing program, with its reproducer) of ``progs`` on ``device``.

    The jitted programs of the group run as ONE jitted function on the device (one compile for all of
    them, which is most of the cost per program); a group that disagrees anywhere, or fails to run,
    is rechecked program by program to name the failing ones. Eager programs run one by one.
    """
    failures = []
    staged = [p for p in progs if p.mode != "eager"]
    for p in progs:
        if p.mode == "eager":
            m = check(p, device)
            if m:
                failures.append(m)
    if not staged:
        return failures
    fns = [_transformed(p) for p in staged]

    def group(*xs):
        out, k = [], 0
        for fn, p in zip(fns, staged, strict=True):
            out.append(fn(*xs[k:k + len(p.inputs)]))
            k += len(p.inputs)
        return out

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            refs = [reference(p, p.outputs) for p in staged]
            ins = [fa.device_put(fnp.asarray(x), device) for p in staged for x in p.inputs]
            got = fa.jit(group, device=device)(*ins)
            got = [[np.asarray(o) for o in outs] for outs in got]
        ok = all(_compare_all(p, g, r, device) is None for p, g, r in zip(staged, got, refs, strict=True))
    except Exception:  # find the failing program(s) one by one
        ok = False
    if not ok:
        failures += [m for m in (check(p, device) for p in staged) if m]
    return failures


def _compare_all(prog, got, ref, device, outputs=None):
    outputs = prog.outputs if outputs is None else outputs
    if prog.mode == "grad":  # one gradient per float input
        outputs = [f"v{i}" for i, x in enumerate(prog.inputs) if x.dtype.kind == "f"]
    for name, g, r in zip(outputs, got, ref, strict=True):
        value = prog.values[name]
        if prog.mode == "grad":
            value = dataclasses.replace(value, exact=False, mag=max(value.mag, float(np.max(np.abs(r), initial=1))))
        m = compare(g, r, value, f"{device} {prog.mode} output {name}")
        if m:
            return m
    return None


def _check_outputs(prog, device, outputs):
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ref = reference(prog, outputs)
    except Exception as e:  # the reference itself fails under this mode's transform: a numpy:0 bug
        return f"numpy:0 {prog.mode} failed: {type(e).__name__}: {textwrap.shorten(str(e), 400)}"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = run_on(prog, device, outputs)
    except Exception as e:
        return f"{device} {prog.mode} raised {type(e).__name__}: {textwrap.shorten(str(e), 600)}"
    return _compare_all(prog, got, ref, device, outputs)


def slice_program(prog, out):
    """``prog`` reduced to the steps ``out`` depends on (a smaller reproducer)."""
    needed = {out}
    keep = []
    for line in reversed(prog.lines):
        name, expr = line.split(" = ", 1)
        if name in needed:
            keep.append(line)
            needed |= {t for t in _names(expr)}
    keep.reverse()
    return dataclasses.replace(prog, lines=keep, outputs=[out])


def _names(expr):
    import re
    return set(re.findall(r"\bv\d+\b", expr))


def flushes_subnormals(device):
    """Whether ``device`` flushes float32 subnormals in fused arithmetic (XLA on the CPU does)."""
    x = fa.device_put(fnp.asarray(np.array([-3e-39, 3e-39], np.float32)), device)
    got = np.asarray(fa.jit(lambda a: fnp.sqrt(a * 1.0) + a * 0.0)(x))
    return not math.isnan(float(got[0]))
