"""What the examples' command lines share."""

import fnarray as fa


def device_from_arg(parser, name):
    """The device named ``name`` (any name ``fnarray.devices()`` prints, a backend name, or
    ``backend:platform``), the default device for ``None``; else ``parser.error`` listing the
    available devices (exit status 2)."""
    if name is None:
        return fa.default_device()
    try:
        return fa.get_device(name)
    except (ValueError, TypeError, fa.BackendUnavailable) as e:
        parser.error(f"unknown or unusable device {name!r}: {e}")
