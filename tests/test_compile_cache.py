"""The persistent compilation cache: atomic entries, checksums, two writers at once, a truncated entry,
and the kernel schedules a later process reads back."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import fnarray as fa
from fnarray.devices import compile_cache
from helpers import require_backend


@pytest.fixture
def cache_dir(tmp_path):
    old = fa.config.compilation_cache_dir
    fa.config.compilation_cache_dir = str(tmp_path / "cache")
    try:
        yield tmp_path / "cache"
    finally:
        fa.config.compilation_cache_dir = old


def _entries(root, namespace):
    out = []
    for dirpath, _, files in os.walk(os.path.join(root, namespace)):
        out.extend(os.path.join(dirpath, f) for f in files)
    return out


def test_off_by_default_and_from_the_environment(tmp_path):
    code = "import fnarray as fa; print(fa.config.compilation_cache_dir)"
    env = dict(os.environ, PYTHONPATH=os.getcwd())
    env.pop("FNARRAY_CACHE_DIR", None)
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert r.stdout.strip() == "None"
    env["FNARRAY_CACHE_DIR"] = str(tmp_path)
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert r.stdout.strip() == str(tmp_path)


def test_entries_round_trip_and_a_corrupted_one_is_ignored(cache_dir):
    k = compile_cache.key("program text", "versions", "device")
    assert compile_cache.get("t", k) is None
    compile_cache.put("t", k, b"payload" * 100)
    assert compile_cache.get("t", k) == b"payload" * 100
    (path,) = _entries(cache_dir, "t")
    data = open(path, "rb").read()
    flipped = data[:-1] + bytes([data[-1] ^ 1])
    open(path, "wb").write(flipped)
    with pytest.warns(compile_cache.CacheWarning, match="truncated or corrupted"):
        assert compile_cache.get("t", k) is None
    assert not os.path.exists(path)  # removed, to be rebuilt
    assert compile_cache.key("a", "bc") != compile_cache.key("ab", "c")


def test_truncated_opencl_entry_warns_is_rebuilt_and_correct(cache_dir):
    require_backend("opencl")
    dev = fa.devices("opencl")[0]
    state = dev.impl.state(dev)
    src = ("__kernel void fnarray_cache_probe(__global float *x) "
           "{ x[get_global_id(0)] = 2.0f * x[get_global_id(0)] + 1.0f; }")
    state._build(src)
    state.store_binaries()  # PoCL: read at exit (other drivers: at the build, and this does nothing)
    (path,) = _entries(cache_dir, "opencl")
    full = open(path, "rb").read()
    open(path, "wb").write(full[: len(full) // 2])   # a writer killed half way (no rename would allow this)
    with pytest.warns(compile_cache.CacheWarning, match="truncated or corrupted"):
        prog = state._build(src)
    state.store_binaries()
    assert open(path, "rb").read() == full or compile_cache._unpack(open(path, "rb").read()) is not None
    import pyopencl as cl
    x = np.arange(8, dtype=np.float32)
    buf = cl.Buffer(state.context, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=x)
    prog.fnarray_cache_probe(state.queue, (8,), None, buf)
    out = np.empty_like(x)
    cl.enqueue_copy(state.queue, out, buf, is_blocking=True)
    np.testing.assert_array_equal(out, 2 * x + 1)
    # The rebuilt entry is read back from the binary by the next build.
    assert compile_cache.get("opencl", os.path.basename(path)[:-4]) is not None


def _pocl_state():
    require_backend("opencl")
    dev = fa.devices("opencl")[0]
    state = dev.impl.state(dev)
    if not state.is_pocl:
        pytest.skip("PoCL-only: other drivers compile at clBuildProgram, and their binaries are stored then")
    return dev, state


def _count_binary_reads(monkeypatch):
    """Count reads of ``cl.Program.binaries`` (the read that makes PoCL compile every kernel)."""
    import pyopencl as cl
    reads = []

    def binaries(prog):
        reads.append(prog)
        return prog.get_info(cl.program_info.BINARIES)

    monkeypatch.setattr(cl.Program, "binaries", property(binaries), raising=False)
    return reads


def test_pocl_binaries_are_read_after_the_first_call_not_before(cache_dir, monkeypatch):
    # Reading ``prog.binaries`` right after the build made PoCL compile every kernel a second time (a cold first
    # call with the cache twice as slow as without it): fnarray reads them at exit (``_DeviceState.at_exit``),
    # here called by hand.
    dev, state = _pocl_state()
    reads = _count_binary_reads(monkeypatch)
    import fnarray.numpy as fnp
    c = float(np.random.default_rng().integers(1 << 20)) + 0.5   # a program this process has not built yet
    f = fa.jit(lambda a: fnp.exp(a * 0.25) + c)
    x = np.linspace(-1, 1, 17, dtype=np.float32)
    out = np.asarray(f(fa.device_put(x, dev)))
    np.testing.assert_allclose(out, np.exp(x.astype(np.float64) * 0.25) + c, rtol=1e-6)
    assert reads == [] and _entries(cache_dir, "opencl") == []
    assert state.pending_binaries
    state.at_exit()
    assert reads and not state.pending_binaries
    assert _entries(cache_dir, "opencl")
    state.store_binaries()   # nothing left: no second read
    assert len(reads) == len(_entries(cache_dir, "opencl"))


def test_pocl_binaries_waiting_for_the_exit_are_bounded(cache_dir, monkeypatch):
    # A long process building many programs keeps at most PENDING_BINARIES_MAX waiting; the oldest are stored.
    from fnarray.lowering.opencl import backend as ocl
    dev, state = _pocl_state()
    state.store_binaries()   # what earlier tests left
    reads = _count_binary_reads(monkeypatch)
    monkeypatch.setattr(ocl, "PENDING_BINARIES_MAX", 2)
    base = float(np.random.default_rng().integers(1 << 20))
    x = fa.device_put(np.linspace(-1, 1, 5, dtype=np.float32), dev)
    for i in range(5):   # five programs this process has not built yet
        c = base + i   # whole numbers stay in the kernel source (a fractional one is a kernel argument: one binary)
        np.testing.assert_allclose(np.asarray(fa.jit(lambda a, c=c: a * 3.0 + c)(x)),
                                   np.linspace(-1, 1, 5) * 3.0 + c, rtol=1e-6)
        assert len(state.pending_binaries) <= 2
    assert len(reads) >= 3 and len(_entries(cache_dir, "opencl")) == len(reads)
    state.store_binaries()
    assert not state.pending_binaries and len(_entries(cache_dir, "opencl")) == len(reads)


_HIT_WORKER = textwrap.dedent("""
    import sys
    import numpy as np
    import fnarray as fa
    import fnarray.numpy as fnp
    from fnarray.devices import compile_cache
    hits = []
    get = compile_cache.get
    def counted(ns, k):
        got = get(ns, k)
        if ns == "opencl":
            hits.append(got is not None)
        return got
    compile_cache.get = counted
    f = fa.jit(lambda a: fnp.cos(a * 1.5) * 2.0)
    x = fa.device_put(np.linspace(-1, 1, 9, dtype=np.float32), "opencl:0")
    print(repr(np.asarray(f(x)).tolist()))
    print(repr(hits))
""")


def test_a_second_process_reads_the_opencl_binary_the_first_stored_at_exit(tmp_path):
    require_backend("opencl")
    script = tmp_path / "worker.py"
    script.write_text(_HIT_WORKER)
    root = tmp_path / "cache"
    env = dict(os.environ, PYTHONPATH=os.getcwd(), FNARRAY_CACHE_DIR=str(root), POCL_KERNEL_CACHE="0")
    x = np.linspace(-1, 1, 9, dtype=np.float32)
    outs = []
    for _ in range(2):
        r = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0 and "CacheWarning" not in r.stderr, r.stderr
        values, hits = r.stdout.strip().splitlines()[-2:]
        np.testing.assert_allclose(eval(values), np.cos(x * 1.5) * 2.0, rtol=1e-5, atol=1e-6)
        outs.append(eval(hits))
        assert _entries(root, "opencl")   # the first process stored its binary (at exit, on PoCL)
    # The second process found every program it built in the cache (its schedules are read back too, so it
    # may build fewer programs than the first).
    assert outs[0] and not any(outs[0]) and outs[1] and all(outs[1]), outs


_WORKER = textwrap.dedent("""
    import sys
    import numpy as np
    import fnarray as fa
    import fnarray.numpy as fnp
    dev = sys.argv[1]
    f = fa.jit(lambda a: fnp.tanh(a * 3.0) + fnp.sum(a))
    x = fa.device_put(np.linspace(-1, 1, 33, dtype=np.float32), dev)
    print(repr(np.asarray(f(x)).tolist()))
""")


@pytest.mark.parametrize("backend", ["opencl", "webgpu", "jax"])
def test_two_processes_compile_the_same_program_at_once(tmp_path, backend):
    require_backend(backend)
    dev = str(fa.devices(backend)[0])
    script = tmp_path / "worker.py"
    script.write_text(_WORKER)
    root = tmp_path / "cache"
    env = dict(os.environ, PYTHONPATH=os.getcwd(), FNARRAY_CACHE_DIR=str(root), POCL_KERNEL_CACHE="0")
    procs = [subprocess.Popen([sys.executable, str(script), dev], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    x = np.linspace(-1, 1, 33, dtype=np.float32)
    want = np.tanh(x * 3.0) + x.sum()
    for p, (out, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err
        np.testing.assert_allclose(eval(out.strip().splitlines()[-1]), want, rtol=1e-5, atol=1e-6)
    if backend in ("opencl", "webgpu"):
        spaces = ["opencl", "schedule"] if backend == "opencl" else ["schedule"]
        for ns in spaces:  # program binaries, and the kernel schedules both backends share
            entries = _entries(root, ns)
            assert entries and not [e for e in entries if os.path.basename(e).startswith(".tmp-")]
            for e in entries:
                assert compile_cache._unpack(open(e, "rb").read()) is not None, e
    else:
        assert os.listdir(root / "jax")  # JAX's own persistent cache wrote its executables there
    # A third process finds the entries and computes the same.
    r = subprocess.run([sys.executable, str(script), dev], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and "CacheWarning" not in r.stderr, r.stderr
    np.testing.assert_allclose(eval(r.stdout.strip().splitlines()[-1]), want, rtol=1e-5, atol=1e-6)


def test_concurrent_writers_of_one_key_never_leave_a_bad_entry(tmp_path):
    code = textwrap.dedent("""
        import sys
        import fnarray as fa
        from fnarray.devices import compile_cache
        fa.config.compilation_cache_dir = sys.argv[1]
        k = compile_cache.key("same")
        for i in range(150):
            compile_cache.put("t", k, bytes([int(sys.argv[2])]) * (1 << 16))
            got = compile_cache.get("t", k)
            assert got is None or got in (b"\\x01" * (1 << 16), b"\\x02" * (1 << 16)), len(got)
        print("ok")
    """)
    env = dict(os.environ, PYTHONPATH=os.getcwd())
    procs = [subprocess.Popen([sys.executable, "-W", "error::UserWarning", "-c", code, str(tmp_path), str(i)],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in (1, 2)]
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0 and out.strip() == "ok", err
    (entry,) = _entries(tmp_path, "t")
    assert compile_cache._unpack(open(entry, "rb").read()) in (b"\x01" * (1 << 16), b"\x02" * (1 << 16))


def test_a_cached_schedule_is_read_back_and_runs_the_same(cache_dir):
    require_backend("webgpu")
    from fnarray.core import primitives as P
    import pickle
    assert pickle.loads(pickle.dumps(P.sin)) is P.sin  # primitives pickle by name
    dev = fa.devices("webgpu")[0]
    import fnarray.numpy as fnp

    def f(a):
        return fnp.cumsum(fnp.exp(a) * -0.0, axis=0) + fnp.max(a)
    x = fa.device_put(np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4), dev)
    lowered = fa.jit(f).lower(x)
    first = lowered._backend_lowered._schedules()
    (entry,) = _entries(cache_dir, "schedule")
    fresh = dev.impl.lower(lowered.program, dev)

    def no_scheduling():
        raise AssertionError("scheduled again although the cache holds this program's schedule")
    fresh._schedule_now = no_scheduling
    again = fresh._schedules()   # a fresh lowering: read from the cache
    assert again is not first and str(again.listing(lowered._backend_lowered._named_source)) == str(
        first.listing(lowered._backend_lowered._named_source))
    exe = dev.impl.lower(lowered.program, dev).compile()
    out = exe([dev.impl.to_device(np.asarray(x), dev)])
    np.testing.assert_allclose(dev.impl.to_host(out[0]), np.cumsum(np.exp(np.asarray(x)) * -0.0, axis=0) + 1.0)
    # A schedule from another program never answers: the key holds the program's text and literal bits.
    fa.jit(lambda a: fnp.cumsum(fnp.exp(a) * 0.0, axis=0) + fnp.max(a)).lower(x)._backend_lowered._schedules()
    assert len(_entries(cache_dir, "schedule")) == 2


def test_schedule_digest_covers_nested_modules(tmp_path):
    """A cached kernel schedule is keyed by the scheduler's source to every depth: editing a module of
    ``kernels/groups/`` must change the key (it once hashed only the top folder's files)."""
    from fnarray.lowering.kernels.lowered import _code_digest, source_digest
    (tmp_path / "groups").mkdir()
    (tmp_path / "schedule.py").write_text("A = 1\n")
    (tmp_path / "groups" / "reduce.py").write_text("B = 1\n")
    before = source_digest((str(tmp_path),))
    (tmp_path / "groups" / "reduce.py").write_text("B = 2\n")
    assert source_digest((str(tmp_path),)) != before
    (tmp_path / "groups" / "notes.txt").write_text("not source")
    assert source_digest((str(tmp_path),)) == source_digest((str(tmp_path),))
    assert _code_digest() == _code_digest()   # the package's own folders
