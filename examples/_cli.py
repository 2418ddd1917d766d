"""What the examples' command lines share."""

import os

import fnarray as fa


def device_from_arg(parser, name):
    """The device named ``name`` (any name ``fnarray.devices(all_backends=True)`` prints, a backend name, or
    ``backend:platform``), the default device for ``None``; else ``parser.error`` listing the
    available devices (exit status 2)."""
    if name is None:
        return fa.default_device()
    try:
        return fa.get_device(name)
    except (ValueError, TypeError, fa.BackendUnavailable) as e:
        parser.error(f"unknown or unusable device {name!r}: {e}")


def check_output_folders(parser, args, options):
    """``parser.error`` (exit status 2) for an output path among ``options`` whose folder does not exist,
    before any training runs (rather than failing to write at the end)."""
    for opt in options:
        path = getattr(args, opt)
        folder = os.path.dirname(os.path.abspath(path)) if path else None
        if folder and not os.path.isdir(folder):
            parser.error(f"--{opt} {path}: the folder {folder} does not exist (training would run, then fail to write)")
