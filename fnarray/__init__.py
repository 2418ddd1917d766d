"""fnarray: a functional array framework (NumPy-style code, differentiated, vectorized, compiled).

Public surface: ``fnarray.numpy`` (the array namespace), the transforms
(``jit``, ``grad``, ``vmap``...), control flow, devices and the IR printer
``make_ir``. See docs/design.md for the architecture.
"""

from fnarray.core.array import Array
from fnarray.core.config import config
from fnarray.core.log import configure_from_env as _configure_log
from fnarray.core.errors import (BackendUnavailable, ConcretizationError, ContractionShapeError, DTypeError,
                                 FallbackWarning, FnArrayError, LinAlgError, ShapeError, TracerLeakError,
                                 UnsupportedOnDevice)
from fnarray.core.ir import Program, check_program
from fnarray.core.shaped import ShapeDtypeStruct, ShapedArray
from fnarray.devices.backend import Device, register_backend
from fnarray.devices.placement import block_until_ready, default_device, device_get, device_put, devices
from fnarray.devices.placement import parse_device as get_device
from fnarray.devices.lookup import default_backend, device_count, local_device_count, local_devices
from fnarray.lowering.numpy import backend as _numpy_backend  # noqa: F401  (installs the literal folder)
from fnarray import numpy  # noqa: F401  (installs Array's operators)
from fnarray.devices import eager_ops as _eager_ops
from fnarray import tree_util  # noqa: F401
from fnarray import tree  # noqa: F401  (fa.tree.map, as jax.tree)
from fnarray.transforms.jit import eval_shape, jit, make_ir

from fnarray.transforms import eager_jit as _eager_jit  # noqa: E402

for _ns in (numpy, numpy.linalg, numpy.fft):  # eager calls of fnp's functions run as cached jitted programs
    _eager_jit.install(_ns, excluded=numpy._extras.NOT_ARRAY_RESULTS if _ns is numpy else ())
# fnp.multiply(x, y) of concrete arrays takes the operators' fast path (a miss: the general path under eager_jit's)
_eager_ops.install_namespace(numpy, _eager_jit.wrapped)
_eager_jit.install_methods(numpy)  # x @ y, x.T, x.sum(...) ask a backend's rule of any shape first

__version__ = "0.1.0"

from fnarray.transforms.ad import (checkpoint, custom_jvp, custom_vjp, grad, hessian, jacfwd, jacrev, jvp,  # noqa: E402
                                   linearize, remat, stop_gradient, value_and_grad, vjp)
from fnarray.transforms.batching import vmap  # noqa: E402
from fnarray.transforms.linear_transpose import linear_transpose  # noqa: E402
from fnarray.transforms import linalg_rules  # noqa: E402,F401  (the linear-algebra primitives' rules)
from fnarray.transforms.control_flow import cond, fori_loop, scan, switch, while_loop  # noqa: E402
from fnarray import lax  # noqa: E402,F401  (fnarray.lax: core/lax.py's wrappers plus control flow)
# (fa.checkpoint is remat's JAX name: the checkpoint files' module is fnarray.serialization)
from fnarray.serialization import CheckpointError, load, save  # noqa: E402
from fnarray._quantize import dequantize, quantize, quantized_matmul  # noqa: E402  (MLX's affine format)
from fnarray import sharding  # noqa: E402,F401  (Mesh, PartitionSpec/P, NamedSharding: jax.sharding's names)
from fnarray.sharding import NamedSharding, P, make_mesh, set_mesh, typeof  # noqa: E402  (jax.NamedSharding...)
from fnarray.transforms.shard_map import reshard, shard_map  # noqa: E402
from fnarray.transforms.pmap import pmap  # noqa: E402  (jax.pmap: jit of a shard_map over a 1-D mesh)
from fnarray import distributed  # noqa: E402,F401  (initialize, process_index...: jax.distributed's names)
from fnarray.distributed import process_count, process_index  # noqa: E402
from fnarray._named import named_call, named_scope  # noqa: E402  (accepted; no effect)

make_jaxpr = make_ir  # JAX's name for the program printer
jacobian = jacrev     # JAX's name (jax.jacobian is jacrev)

# Libraries imported on first use, so that `import fnarray` stays light.
_LAZY = {"random": None, "dtypes": None, "nn": None, "optim": None, "export": None, "profiler": None, "debug": None,
         "ops": None, "utils": None, "flatten_util": None, "scipy": None, "errors": None,
         "doctor": "fnarray._doctor", "check": "fnarray._check", "ad_checkpoint": None,
         "checkpoint_policies": "fnarray.ad_checkpoint",
         # (jax.experimental is there after ``import jax``; ``jax.enable_x64`` is JAX 0.10's name of its scope)
         "experimental": None, "enable_x64": "fnarray.experimental", "pure_callback": "fnarray._callback",
         "disable_jit": "fnarray.transforms.disable_jit"}


def __getattr__(name):
    if name in _LAZY:
        import importlib
        mod = _LAZY[name]
        value = importlib.import_module(f"fnarray.{name}") if mod is None else getattr(
            importlib.import_module(mod), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'fnarray' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY))

__all__ = [
    "Array", "ShapedArray", "ShapeDtypeStruct", "eval_shape", "Program",
    "Device", "config", "jit", "make_ir", "devices", "default_device", "get_device",
    "device_put", "register_backend", "check_program", "numpy", "tree_util", "lax",
    "FnArrayError", "ShapeError", "DTypeError", "ConcretizationError", "UnsupportedOnDevice",
    "BackendUnavailable", "TracerLeakError", "FallbackWarning", "LinAlgError",
    "grad", "value_and_grad", "jvp", "vjp", "linearize", "jacfwd", "jacrev", "hessian", "custom_jvp",
    "custom_vjp", "checkpoint", "remat", "stop_gradient", "vmap", "cond", "switch", "while_loop",
    "fori_loop", "scan", "ContractionShapeError", "tree", "block_until_ready", "device_get", "make_jaxpr",
    "jacobian", "save", "load", "CheckpointError", "sharding", "make_mesh", "shard_map", "pmap", "distributed",
    "process_index", "process_count", "set_mesh", "typeof", "NamedSharding", "P", "reshard", "device_count",
    "default_backend", "local_devices", "named_call", "named_scope",
    "local_device_count", "linear_transpose", "quantize", "dequantize", "quantized_matmul",
] + list(_LAZY)

try:   # FNARRAY_LOG=info|debug: the fnarray logger's records on standard error (docs/troubleshooting.md)
    _configure_log()
except ValueError as _e:
    import warnings as _warnings
    _warnings.warn(str(_e), stacklevel=2)
