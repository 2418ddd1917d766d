"""What the examples' command lines share."""

import contextlib
import os

import fnarray as fa
from fnarray.core.log import configure_from_env

# The examples report compiles and exports that run past 2 s (fnarray's log at INFO on standard error), unless
# FNARRAY_LOG asks for another level.
configure_from_env(os.environ.get("FNARRAY_LOG") or "info")


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


def check_plot_format(parser, path):
    """``parser.error`` for a ``--plot`` path whose extension matplotlib cannot write (``out.txt``), before any
    training runs; a path without an extension is written as PNG (matplotlib's default)."""
    ext = os.path.splitext(path or "")[1][1:].lower()
    if not ext:
        return
    try:
        from matplotlib.backend_bases import FigureCanvasBase
    except ImportError:
        return
    kinds = FigureCanvasBase.get_supported_filetypes()
    if ext not in kinds:
        parser.error(f"--plot {path}: matplotlib cannot write .{ext} files (training would run, then fail to "
                     f"plot); use one of {', '.join('.' + k for k in sorted(kinds))}, e.g. .png")


def add_blas_threads_option(parser):
    """``--blas-threads N`` (default 1), which ``blas_threads`` applies."""
    parser.add_argument("--blas-threads", type=int, default=1,
                        help="BLAS threads while training (default 1: the matrices are small, and more threads only "
                             "add synchronisation, badly so on a busy machine; 0 keeps the library's default)")


@contextlib.contextmanager
def blas_threads(n):
    """Limit the BLAS libraries loaded in this process (NumPy's OpenBLAS...) to ``n`` threads inside the block.

    The examples' products are at most a few hundred wide: on the numpy backend several BLAS threads
    cost more in synchronisation than they save, 10-40x per epoch on a busy 2-core machine, so the
    examples run with one unless told otherwise. ``n <= 0`` keeps the library's own setting. Uses
    ``threadpoolctl`` (a dependency of scikit-learn, listed in the ``examples`` extra); without it the
    block runs unchanged and ``OPENBLAS_NUM_THREADS=1`` in the environment does the same.
    """
    if n <= 0:
        yield
        return
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        yield
        return
    with threadpool_limits(n, user_api="blas"):
        yield
