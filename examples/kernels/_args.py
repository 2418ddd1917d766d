"""What the kernel examples' command lines share: ``--device`` and a seeded float32 generator."""

import argparse

import numpy as np

import fnarray as fa


def device_and_data(argv, doc):
    """``(device, f32)``: the ``--device`` argument (default: the default device) and ``f32(*shape)``, seeded
    standard-normal float32 arrays placed on it."""
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument("--device", default=None, help="a device name, e.g. opencl:0 (default: the default device)")
    args = p.parse_args(argv)
    dev = fa.get_device(args.device) if args.device else fa.default_device()
    rng = np.random.default_rng(0)

    def f32(*shape):
        return fa.device_put(rng.standard_normal(shape).astype(np.float32), dev)
    return dev, f32
