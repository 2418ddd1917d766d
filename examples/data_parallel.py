"""Train the digits classifier data-parallel (and tensor-parallel) with ``fa.shard_map``.

Data parallelism (``--mode dp``, the default): a 1-D mesh ``("data",)`` over the devices; every global batch
is split over it (``P("data")``), the parameters are replicated (``P()``); each device computes the loss
and gradients of its shard and the gradients are averaged with ``fa.lax.pmean(grads, "data")``, so every
device applies the same SGD update.

Tensor parallelism (``--mode tp``): a 2-D mesh ``("data", "model")``; the hidden layer's weights are split
over ``model`` (the first layer by columns, the second by rows), so each device holds a slice of the hidden
units. The second layer's partial products are reduce-scattered over ``model`` (``psum_scatter``: each
device keeps the sums of a block of rows) and gathered back (``all_gather``), the two halves of an
all-reduce; ``fa.grad`` of the ``shard_map`` gives the gradients of the sharded weights in place.

Either way the final loss equals single-device training with the same seed and global batch (checked to
float32 tolerance, printed). Usage::

    python examples/data_parallel.py --devices 8                 # 8 forced XLA host devices (jax)
    python examples/data_parallel.py --devices 8 --mode tp       # a (4, 2) mesh
    python -m fnarray.distributed.launch -n 2 examples/data_parallel.py   # 2 processes, one device each
    python -m fnarray.distributed.launch -n 2 --backend mlx examples/data_parallel.py   # mx.distributed ring
    python examples/data_parallel.py --devices 1 --device numpy:0          # a mesh of one device, any backend
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

HIDDEN = 64
GLOBAL_BATCH = 64


def load_data():
    from sklearn.datasets import load_digits
    d = load_digits()
    return (d.data / 16.0).astype(np.float32), d.target.astype(np.int32)


def init_params(seed):
    r = np.random.RandomState(seed)
    return {"w1": (r.randn(64, HIDDEN) * np.sqrt(2 / 64)).astype(np.float32), "b1": np.zeros(HIDDEN, np.float32),
            "w2": (r.randn(HIDDEN, 10) * np.sqrt(2 / HIDDEN)).astype(np.float32), "b2": np.zeros(10, np.float32)}


def batches(n_examples, steps, seed):
    """The index of every global batch: one fixed permutation per epoch (the same in every process)."""
    r = np.random.RandomState(seed + 1)
    order = np.concatenate([r.permutation(n_examples) for _ in range(steps * GLOBAL_BATCH // n_examples + 1)])
    return [order[i * GLOBAL_BATCH:(i + 1) * GLOBAL_BATCH] for i in range(steps)]


def cross_entropy(logits, y):
    import fnarray.numpy as fnp
    m = fnp.max(logits, axis=-1, keepdims=True)
    logp = logits - m - fnp.log(fnp.sum(fnp.exp(logits - m), axis=-1, keepdims=True))
    return -fnp.mean(fnp.take_along_axis(logp, y[:, None], axis=1))


def loss_fn(p, x, y):
    import fnarray.numpy as fnp
    h = fnp.maximum(x @ p["w1"] + p["b1"], 0.0)
    return cross_entropy(h @ p["w2"] + p["b2"], y)


def sgd(p, g, lr):
    return {k: p[k] - lr * g[k] for k in p}


def single_device_step(lr):
    import fnarray as fa

    @fa.jit
    def step(p, x, y):
        loss, g = fa.value_and_grad(loss_fn)(p, x, y)
        return sgd(p, g, lr), loss
    return step


def data_parallel_step(mesh, lr):
    import fnarray as fa
    from fnarray.sharding import P

    def local(p, x, y):
        loss, g = fa.value_and_grad(loss_fn)(p, x, y)        # this device's shard of the batch
        g = fa.lax.pmean(g, "data")                           # the gradient of the global batch
        return sgd(p, g, lr), fa.lax.pmean(loss, "data")
    return fa.jit(fa.shard_map(local, mesh=mesh, in_specs=(P(), P("data"), P("data")), out_specs=(P(), P())))


def tensor_parallel_step(mesh, lr):
    import fnarray as fa
    import fnarray.numpy as fnp
    from fnarray.sharding import P
    specs = {"w1": P(None, "model"), "b1": P("model"), "w2": P("model", None), "b2": P()}

    def local_loss(p, x, y):
        h = fnp.maximum(x @ p["w1"] + p["b1"], 0.0)            # this device's hidden units
        part = h @ p["w2"]                                     # their share of every logit
        rows = fa.lax.psum_scatter(part, "model", scatter_dimension=0, tiled=True)  # sums, a block of rows each
        logits = fa.lax.all_gather(rows, "model", axis=0, tiled=True) + p["b2"]     # every row again
        return fa.lax.pmean(cross_entropy(logits, y), "data")

    loss = fa.shard_map(local_loss, mesh=mesh, in_specs=(specs, P("data"), P("data")), out_specs=P())

    @fa.jit
    def step(p, x, y):
        value, g = fa.value_and_grad(loss)(p, x, y)            # the transposes run the collectives backwards
        return sgd(p, g, lr), value
    return step, specs


def _first(a):
    """A replicated value as NumPy, also where other processes hold the other devices."""
    return np.asarray(a if a.is_fully_addressable else a.addressable_shards[0].data)


def train(step, params, x, y, steps, seed, place=lambda v: v):
    losses = []
    for idx in batches(len(x), steps, seed):
        params, loss = step(params, place(x[idx]), place(y[idx]))
        losses.append(loss)
    return params, [float(_first(v)) for v in losses]


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--devices", type=int, default=None, help="devices in the mesh (default: all of the backend)")
    ap.add_argument("--mode", choices=("dp", "tp"), default="dp")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--lr", type=float, default=0.3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default=None, help="backend of the mesh (default: the launcher's, else jax)")
    a = ap.parse_args(argv)
    launched = "FNARRAY_DISTRIBUTED_BACKEND" in os.environ
    backend = (a.device or os.environ.get("FNARRAY_DISTRIBUTED_BACKEND") or "jax").split(":")[0]
    if backend == "jax" and not launched and (a.devices or 1) > 1 and "XLA_FLAGS" not in os.environ:
        # Forced host devices: read by XLA when the jax backend starts, so set before anything uses it.
        os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={a.devices}"
    import fnarray as fa
    from fnarray.sharding import NamedSharding, P
    if launched and not fa.distributed.is_initialized():
        fa.distributed.initialize()
    devs = fa.devices(backend) if a.device is None or ":" not in a.device else [fa.get_device(a.device)]
    n = a.devices or len(devs)
    if n > len(devs):
        sys.exit(f"--devices {n}: the {backend} backend has {len(devs)} devices here")
    x, y = load_data()
    if a.mode == "dp":
        mesh = fa.make_mesh((n,), ("data",), devices=devs[:n])
        step = data_parallel_step(mesh, a.lr)
        p0 = init_params(a.seed)
        p_specs = {k: P() for k in p0}
    else:
        if n % 2:
            sys.exit("--mode tp needs an even number of devices (a (n/2, 2) mesh)")
        mesh = fa.make_mesh((n // 2, 2), ("data", "model"), devices=devs[:n])
        step, p_specs = tensor_parallel_step(mesh, a.lr)
        p0 = init_params(a.seed)
    params = {k: fa.device_put(v, NamedSharding(mesh, p_specs[k])) for k, v in p0.items()}
    data_sharding = NamedSharding(mesh, P("data"))
    _, losses = train(step, params, x, y, a.steps, a.seed, place=lambda v: fa.device_put(v, data_sharding))
    # The same training on one device, same seed and global batches: the reference.
    ref_params = {k: fa.device_put(v, "numpy:0") for k, v in p0.items()}
    _, ref = train(single_device_step(a.lr), ref_params, x, y, a.steps, a.seed,
                   place=lambda v: fa.device_put(v, "numpy:0"))
    diff = abs(losses[-1] - ref[-1]) / max(abs(ref[-1]), 1e-6)
    if fa.process_index() == 0:
        print(f"{a.mode} on {mesh}: {fa.process_count()} process(es), loss {losses[0]:.4f} -> {losses[-1]:.6f}; "
              f"one device: {ref[-1]:.6f} (relative difference {diff:.1e})")
    if diff > 1e-4:
        sys.exit(f"the sharded training diverged from one device: {losses[-1]} vs {ref[-1]}")
    return {"losses": losses, "reference": ref, "relative_difference": diff}


if __name__ == "__main__":
    main()
