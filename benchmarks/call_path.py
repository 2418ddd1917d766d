"""The call path on each backend against its raw library, in one process, interleaved (issue 17 item 4).

Rows (f32[4] operands, so that fnarray's own time per call dominates):
  jax:0   cached jitted ``a*2+1`` vs ``jax.jit`` (returning, and waited for with ``block_until_ready``);
          eager ``x * 2.0``, ``x @ y``, ``sum(x, axis=0)``, ``x[1]`` (f32[4, 4]) vs ``jax.numpy``'s;
  numpy:0 eager ``x * 2.0``, ``x * y``, ``fnp.multiply(x, y)``, ``fnp.exp(x)``, and on f32[4, 4] ``x @ y``,
          ``sum(x, axis=0)``, ``x[1]``, ``x + row`` vs NumPy's; cached jitted ``a*2+1`` vs NumPy's expression;
  mlx:0   eager ``x * 2.0`` vs MLX's (both evaluated); cached jitted ``a*2+1`` vs ``mx.compile``.
Cached jitted calls of small functions (``--rows jax-hits,numpy-hits``; issue 28: a hit must cost little more
than the backend's own call):
  ``a*b+c`` of three f32[16]; a dict of 20 f32[4] in and out (``v * 2``); a static keyword argument
  (``jit(static_argnames=...)``); a softmax step over a cache of 10 sizes called in turn (benchmarks/programs.py's
  jitted decode loop, per call); examples/llm.py's decode step at a small size (2 layers of width 32, its caches
  and token carried from call to call, ``greedy`` static). On jax:0 against ``jax.jit`` of the same function
  and, for the llm step, against the executable's own entry (``jax.jit`` of fnarray's lowered program on the
  flat buffers: the floor of what any wrapper can reach); on numpy:0 against the same NumPy expression and, for
  the llm step, the generated NumPy function on the flat buffers.
First calls of keys on numpy:0 / mlx:0 (``--rows numpy-first`` / ``mlx-first``; issue 28 item 2: the general eager
  path): a loop over 200 shapes of ``tanh(a*x+b)*x+1``, ``sum(x, axis=0)``, ``x @ y``, ``x[idx]``, ``concatenate``,
  every key and primitive new at each call (the caches cleared as the cycle wraps), against NumPy / MLX (lazy, as
  fnarray's mlx:0 calls) on the same shapes.
The general path with the eager cache warm (``--rows numpy-general`` / ``mlx-general``, alone: they set eager_jit
  to make no tape nor program in this process): ``x.T``, ``x[1]``, a small product, keepdims reductions, a
  broadcast subtraction, ``concatenate`` and the whole decode step of ``benchmarks/programs.py``.
Each round times every variant for ``--number`` calls, alternating; a cell is the minimum over ``--rounds``.
``--clock thread`` times the calling thread's CPU (``time.thread_time``): the Python of a call, without XLA's
worker threads or another process preempting it (what a loaded 2-core machine lets one compare).
The machine is shared: read the ratios, with the load average printed beside them.

Usage: python benchmarks/call_path.py [--rounds 9] [--number 3000]
                                      [--rows jax,numpy,mlx,jax-hits,numpy-hits,numpy-first,...]
                                      [--clock wall|thread] [--json]
Prints a Markdown table (or one JSON object); asserts nothing.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time

import numpy as np

import _checkout  # noqa: E402,F401  (this checkout's fnarray, not an installed one)
import fnarray as fa
import fnarray.numpy as fnp


def _rows(which):
    x4 = np.arange(4, dtype=np.float32)
    m44 = np.arange(16, dtype=np.float32).reshape(4, 4)
    rows = {}
    if "jax" in which:
        import jax
        import jax.numpy as jnp
        xj = jax.device_put(x4)
        xf = fa.device_put(x4, "jax:0")
        f = fa.jit(lambda a: a * 2.0 + 1.0)
        g = jax.jit(lambda a: a * 2.0 + 1.0)
        # Not waited per call, but the last result is waited for inside the timing (``_timed``): XLA's
        # asynchronous backlog must not spill into the next row's time.
        rows["jax:0 jitted a*2+1"] = (lambda: f(xf), lambda: g(xj), "jax.jit")
        rows["jax:0 jitted a*2+1, waited"] = (lambda: f(xf).block_until_ready(),
                                              lambda: g(xj).block_until_ready(), "jax.jit")
        rows["jax:0 eager x*2.0, waited"] = (lambda: (xf * 2.0).block_until_ready(),
                                             lambda: (xj * 2.0).block_until_ready(), "jnp")
        mj, mf = jax.device_put(m44), fa.device_put(m44, "jax:0")
        rows["jax:0 eager x @ y, waited"] = (lambda: (mf @ mf).block_until_ready(),
                                             lambda: (mj @ mj).block_until_ready(), "jnp")
        rows["jax:0 eager sum(x, axis=0), waited"] = (lambda: fnp.sum(mf, axis=0).block_until_ready(),
                                                      lambda: jnp.sum(mj, axis=0).block_until_ready(), "jnp")
        rows["jax:0 eager x[1], waited"] = (lambda: mf[1].block_until_ready(),
                                            lambda: mj[1].block_until_ready(), "jnp")
    if "numpy" in which:
        xn = fa.device_put(x4, "numpy:0")
        yn = fa.device_put(x4[::-1].copy(), "numpy:0")
        y4 = x4[::-1].copy()
        h = fa.jit(lambda a: a * 2.0 + 1.0)
        rows["numpy:0 eager x*2.0"] = (lambda: xn * 2.0, lambda: x4 * 2.0, "NumPy")
        rows["numpy:0 eager x*y"] = (lambda: xn * yn, lambda: x4 * y4, "NumPy")
        rows["numpy:0 jitted a*2+1"] = (lambda: h(xn), lambda: x4 * 2.0 + 1.0, "NumPy")
        rows["numpy:0 eager fnp.multiply(x, y)"] = (lambda: fnp.multiply(xn, yn), lambda: np.multiply(x4, y4),
                                                    "NumPy")
        rows["numpy:0 eager fnp.exp(x)"] = (lambda: fnp.exp(xn), lambda: np.exp(x4), "NumPy")
        mn = fa.device_put(m44, "numpy:0")
        rows["numpy:0 eager x @ y"] = (lambda: mn @ mn, lambda: m44 @ m44, "NumPy")
        rows["numpy:0 eager sum(x, axis=0)"] = (lambda: fnp.sum(mn, axis=0), lambda: np.sum(m44, axis=0), "NumPy")
        rows["numpy:0 eager x[1]"] = (lambda: mn[1], lambda: m44[1], "NumPy")
        rows["numpy:0 eager x + row (broadcast)"] = (lambda: mn + xn, lambda: m44 + x4, "NumPy")
    if "mlx" in which:
        import mlx.core as mx
        xm = mx.array(x4)
        xx = fa.device_put(x4, "mlx:0")
        k = fa.jit(lambda a: a * 2.0 + 1.0)
        km = mx.compile(lambda a: a * 2.0 + 1.0)
        rows["mlx:0 eager x*2.0, evaluated"] = (lambda: (xx * 2.0).block_until_ready(),
                                                lambda: mx.eval(xm * 2.0), "MLX")
        rows["mlx:0 jitted a*2+1, evaluated"] = (lambda: k(xx).block_until_ready(),
                                                 lambda: mx.eval(km(xm)), "mx.compile")
    for dev in ("jax:0", "numpy:0"):
        if dev.split(":")[0] + "-hits" in which:
            rows.update(_hit_rows(dev))
    for dev in ("numpy:0", "mlx:0"):
        if dev.split(":")[0] + "-first" in which:
            rows.update(_first_call_rows(dev))
        if dev.split(":")[0] + "-general" in which:
            rows.update(_general_rows(dev))
    return rows


FIRST_SHAPES = 200


def _raw(dev):
    """``(put, namespace, name)`` of ``dev``'s raw library: NumPy for numpy:0, MLX (lazy, as fnarray's) for mlx:0."""
    if dev.startswith("mlx"):
        import mlx.core as mx
        return mx.array, mx, "MLX"
    return (lambda v: v), np, "NumPy"


def _first_call_rows(dev="numpy:0"):
    """First calls of keys on ``dev`` (issue 28 item 2): each call of a row takes the next of ``FIRST_SHAPES``
    shapes (cycling), with ``fnarray.transforms.eager_jit``'s keys and the eager cache cleared before every call
    once the cycle wraps, so every call takes the general path and compiles each primitive's eager executable
    afresh (no tape, no program); the raw library runs the same expression on the same shapes. Per call, not per
    primitive (``tanh(a*x+b)*x+1`` is 5 primitives, ``x[idx]`` 7)."""
    from fnarray.devices import placement
    from fnarray.transforms import eager_jit
    n = FIRST_SHAPES
    rng = np.random.default_rng(0)
    put = lambda v: fa.device_put(v, dev)  # noqa: E731
    rput, rnp, raw_name = _raw(dev)
    vecs = [rng.standard_normal(i + 1).astype(np.float32) for i in range(n)]
    mats = [rng.standard_normal((i % 20 + 2, i // 20 + 2)).astype(np.float32) for i in range(n)]
    rhs = [rng.standard_normal((i // 20 + 2, 3)).astype(np.float32) for i in range(n)]
    idx = np.array([0, -1], np.int32)
    pairs = [(rng.standard_normal((i + 1, 2)).astype(np.float32), rng.standard_normal((2, 2)).astype(np.float32))
             for i in range(n)]
    cases = {
        "tanh(a*x+b)*x+1": ([(put(v),) for v in vecs], [(rput(v),) for v in vecs],
                            lambda x: fnp.tanh(2.0 * x + 1.0) * x + 1, lambda x: rnp.tanh(2.0 * x + 1.0) * x + 1),
        "sum(x, axis=0)": ([(put(m),) for m in mats], [(rput(m),) for m in mats],
                           lambda x: fnp.sum(x, axis=0), lambda x: rnp.sum(x, axis=0)),
        "x @ y": ([(put(m), put(r)) for m, r in zip(mats, rhs)], [(rput(m), rput(r)) for m, r in zip(mats, rhs)],
                  lambda x, y: x @ y, lambda x, y: x @ y),
        "x[idx]": ([(put(v), put(idx)) for v in vecs], [(rput(v), rput(idx)) for v in vecs],
                   lambda x, i: x[i], lambda x, i: x[i]),
        "concatenate": ([tuple(put(a) for a in p) for p in pairs], [tuple(rput(a) for a in p) for p in pairs],
                        lambda a, b: fnp.concatenate([a, b]), lambda a, b: rnp.concatenate([a, b])),
    }

    def cycling(fn, all_args, clear):
        state = [0]

        def run():
            k = state[0]
            state[0] = (k + 1) % n
            if clear and k == 0:  # a new cycle: every key and primitive is new again
                eager_jit._seen.clear()
                eager_jit._programs.clear()
                placement._eager_cache.clear()
            return fn(*all_args[k])
        return run

    rows = {}
    for name, (fa_args, raw_args, f, g) in cases.items():
        rows[f"{dev} first calls, {n} shapes: {name}"] = (cycling(f, fa_args, True), cycling(g, raw_args, False),
                                                          raw_name)
    return rows


def _decode_step(np_):
    """``benchmarks/programs.py``'s decode step (concatenate, products, softmax) in namespace ``np_``."""
    def step(cache, q, row):
        cache = np_.concatenate([cache, row], axis=0)
        sc = q @ cache.T
        e = np_.exp(sc - sc.max(axis=-1, keepdims=True))
        return cache, (e / e.sum(axis=-1, keepdims=True)) @ cache
    return step


def _general_rows(dev):
    """Eager calls on the general path with the eager cache warm (issue 28: what every key's first call costs on
    numpy:0, and its first two on mlx:0, once its primitives' executables exist): ``fnarray.transforms.eager_jit``
    is set, for this process, to give no key a tape or a program. Run these rows alone (``--rows mlx-general``)."""
    from fnarray.transforms import eager_jit
    for k in eager_jit._TAPE_CALLS:
        eager_jit._TAPE_CALLS[k] = None
    for k in eager_jit._GENERAL_CALLS:
        eager_jit._GENERAL_CALLS[k] = None
    eager_jit.REPEATED_CALL = 1 << 62
    rng = np.random.default_rng(0)
    rput, rnp, raw_name = _raw(dev)
    host = {"c": rng.standard_normal((20, 64)), "q": rng.standard_normal((1, 64)), "s": rng.standard_normal((1, 20)),
            "m": rng.standard_normal((64, 8)), "v": rng.standard_normal(8)}
    fa_ = {k: fa.device_put(v.astype(np.float32), dev) for k, v in host.items()}
    raw = {k: rput(v.astype(np.float32)) for k, v in host.items()}
    cases = {
        "x.T": lambda d, np_: d["c"].T,
        "x[1]": lambda d, np_: d["c"][1],
        "q @ m": lambda d, np_: d["q"] @ d["m"],
        "s.sum(axis=-1, keepdims=True)": lambda d, np_: d["s"].sum(axis=-1, keepdims=True),
        "s - s.max(axis=-1, keepdims=True)": lambda d, np_: d["s"] - d["s"].max(axis=-1, keepdims=True),
        "concatenate([c, q])": lambda d, np_: np_.concatenate([d["c"], d["q"]], axis=0),
        "decode step (c of 20 rows)": lambda d, np_: _decode_step(np_)(d["c"], d["q"], d["q"])[1],
    }
    return {f"{dev} general path: {name}": ((lambda f=f: f(fa_, fnp)), (lambda f=f: f(raw, rnp)), raw_name)
            for name, f in cases.items()}


def _example_llm():
    """examples/llm.py as a module (benchmarks/ has an llm.py of its own)."""
    here = os.path.dirname(os.path.abspath(__file__))
    examples = os.path.join(os.path.dirname(here), "examples")
    if examples not in sys.path:
        sys.path.append(examples)   # its own imports: _cli, transformer_lm
    spec = importlib.util.spec_from_file_location("_example_llm", os.path.join(examples, "llm.py"))
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod   # its dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def _direct_entry(jitted, args, kwargs):
    """``jitted``'s executable for these arguments called on their flat buffers, as the backend's own entry
    (``call_args``) takes them: the floor under any wrapper's hit."""
    jitted(*args, **kwargs)
    ex = next(iter(jitted._tables.fast.values()))
    bufs = list(ex.const_bufs) + [x.call_view()[0] for x in fa.tree_util.tree_leaves((args, kwargs))
                                  if hasattr(x, "call_view")]
    call = getattr(ex.exe, "call_args", None)
    if call is None:
        return lambda: ex.exe(bufs)
    return lambda: call(*bufs)


def _hit_rows(dev):
    """Cached jitted calls of small functions on ``dev`` (jax:0 or numpy:0) against the raw library."""
    on_jax = dev == "jax:0"
    if on_jax:
        import jax
        import jax.numpy as raw_np
        raw_jit, raw_put, raw_name = jax.jit, jax.device_put, "jax.jit"
    else:
        raw_np, raw_jit, raw_put, raw_name = np, (lambda f, **_: f), (lambda x: x), "NumPy"
    put = lambda x: fa.device_put(x, dev)  # noqa: E731
    rows = {}

    three = [np.arange(16, dtype=np.float32) + i for i in range(3)]
    f3 = lambda a, b, c: a * b + c  # noqa: E731
    j3, r3 = fa.jit(f3), raw_jit(f3)
    xs, rs = [put(v) for v in three], [raw_put(v) for v in three]
    rows[f"{dev} jitted a*b+c, 3 args"] = (lambda: j3(*xs), lambda: r3(*rs), raw_name)

    tree = {f"w{i:02d}": np.full(4, i, np.float32) for i in range(20)}
    ft = lambda p: {k: v * 2.0 for k, v in p.items()}  # noqa: E731
    jt, rt = fa.jit(ft), raw_jit(ft)
    tf, tr = put(tree), {k: raw_put(v) for k, v in tree.items()}
    rows[f"{dev} jitted dict of 20 in and out"] = (lambda: jt(tf), lambda: rt(tr), raw_name)

    fk = lambda a, b, mode: a * b if mode == "mul" else a + b  # noqa: E731
    jk, rk = fa.jit(fk, static_argnames="mode"), raw_jit(fk, static_argnames="mode")
    rows[f"{dev} jitted, a static keyword"] = (lambda: jk(xs[0], xs[1], mode="mul"),
                                               lambda: rk(rs[0], rs[1], mode="mul"), raw_name)

    w = 32

    js, rsm = fa.jit(_decode_step(fnp)), raw_jit(_decode_step(raw_np))
    qn, rown = np.full((1, w), 0.01, np.float32), np.full((1, w), 0.02, np.float32)
    caches = [np.zeros((n, w), np.float32) for n in range(1, 11)]
    fargs = [(put(c), put(qn), put(rown)) for c in caches]
    rargs = [(raw_put(c), raw_put(qn), raw_put(rown)) for c in caches]

    def turns(fn, all_args):
        def run():
            for a in all_args:
                out = fn(*a)
            return out[1]
        return run
    rows[f"{dev} jitted softmax step, 10 shapes in turn (x10 calls)"] = (turns(js, fargs), turns(rsm, rargs),
                                                                          raw_name)

    llm = _example_llm()
    device = [d for d in fa.devices(all_backends=True) if str(d) == dev][0]
    model = fa.device_put(llm.Llama(len(llm.VOCAB), dim=32, heads=4, kv_heads=2, layers=2, hidden=64,
                                    key=fa.random.key(0)), device)
    _, decode, _ = llm.make_generators(device, 0.9, 1.0)
    kv, token = model.make_caches(1, 64, device), put(np.zeros(1, np.int32))
    key = fa.device_put(fa.random.key(1), device)
    state = [token, kv]

    def step():
        state[0], state[1] = decode(model, state[1], state[0], key, greedy=True)
        return state[0]
    rows[f"{dev} examples/llm.py decode step, carried"] = (
        step, _direct_entry(decode, (model, kv, token, key), {"greedy": True}), "the executable's own entry")
    return rows


def _timed(fn, number, clock=time.perf_counter):
    """Mean seconds per call of ``number`` calls, the last result waited for (asynchronous backends)."""
    t0 = clock()
    for _ in range(number):
        r = fn()
    if hasattr(r, "block_until_ready"):
        r.block_until_ready()
    return (clock() - t0) / number


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--number", type=int, default=3000)
    ap.add_argument("--rows", default="jax,numpy,mlx,jax-hits,numpy-hits")
    ap.add_argument("--clock", choices=("wall", "thread"), default="wall")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    clock = time.thread_time if args.clock == "thread" else time.perf_counter
    rows = _rows(args.rows.split(","))
    load0 = os.getloadavg()[0]
    for fa_fn, raw_fn, _ in rows.values():  # warm: traces, compiles, the fast paths' entries
        for _ in range(20):
            fa_fn()
            raw_fn()
    best = {name: [float("inf"), float("inf")] for name in rows}
    for _ in range(args.rounds):
        for name, (fa_fn, raw_fn, _) in rows.items():
            for i, fn in enumerate((fa_fn, raw_fn)):
                t = _timed(fn, args.number, clock) * 1e6
                best[name][i] = min(best[name][i], t)
    load = (load0, os.getloadavg()[0])
    if args.json:
        print(json.dumps({"rows": best, "load": load, "clock": args.clock}))
        return
    print(f"load average {load[0]:.2f} -> {load[1]:.2f}; minimum over {args.rounds} rounds of {args.number} calls; "
          f"{args.clock} clock")
    print("| call | fnarray (us) | raw (us) | raw form | fnarray / raw |")
    print("|---|---:|---:|---|---:|")
    for name, (tf, tr) in best.items():
        print(f"| {name} | {tf:.2f} | {tr:.2f} | {rows[name][2]} | {tf / tr:.2f} |")


if __name__ == "__main__":
    main()
