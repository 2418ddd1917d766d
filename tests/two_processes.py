"""Run by tests/test_distributed.py through ``python -m fnarray.distributed.launch -n 2``: one jax run over two
processes on 127.0.0.1 (the mlx run is ``mlx_two_processes.py``). Prints ``ok ...`` lines; any failure raises
(non-zero exit)."""

from __future__ import annotations

import os

import numpy as np

import fnarray as fa

backend = os.environ["FNARRAY_DISTRIBUTED_BACKEND"]
fa.distributed.initialize(timeout=60)
me, n = fa.process_index(), fa.process_count()
assert n == 2 and me == int(os.environ["FNARRAY_PROCESS_ID"]), (me, n)
print("ok initialized", me, n, flush=True)

if backend == "jax":
    from fnarray import lax
    from fnarray.sharding import NamedSharding, P
    devs = fa.devices("jax")
    assert len(devs) == 2, devs  # every process's devices (one CPU device each)
    mesh = fa.make_mesh((2,), ("x",), devices=devs)
    X = np.arange(8, dtype=np.float32).reshape(4, 2)  # the same global value in every process
    xs = fa.device_put(X, NamedSharding(mesh, P("x")))
    assert not xs.is_fully_addressable and len(xs.addressable_shards) == 1
    (shard,) = xs.addressable_shards
    np.testing.assert_array_equal(np.asarray(shard.data), X[2 * me:2 * me + 2])
    f = fa.jit(fa.shard_map(lambda v: lax.psum(v, "x"), mesh=mesh, in_specs=P("x"), out_specs=P()))
    out = f(xs)
    np.testing.assert_allclose(np.asarray(out.addressable_shards[0].data), X[:2] + X[2:])
    g = fa.jit(fa.shard_map(lambda v: lax.ppermute(v, "x", [(0, 1), (1, 0)]) + lax.axis_index("x"),
                            mesh=mesh, in_specs=P("x"), out_specs=P("x")))
    np.testing.assert_allclose(np.asarray(g(xs).addressable_shards[0].data), X[2 * (1 - me):2 * (1 - me) + 2] + me)
    print("ok jax collectives across processes", flush=True)
    import sys  # examples/data_parallel.py over the two processes equals one-device training
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples"))
    import data_parallel
    res = data_parallel.main(["--steps", "4"])
    assert res["relative_difference"] < 1e-4, res
    print("ok example over two processes", flush=True)
else:  # the mlx run is tests/mlx_two_processes.py (a mesh over the processes, every collective)
    raise SystemExit("tests/two_processes.py is the jax run; the mlx one is tests/mlx_two_processes.py")
print("done", me, flush=True)
