"""Exporting jitted functions to run outside Python.

``fnarray.export.webgpu(f, *example_args, path, bake_argnums=(), state_argnums=())`` writes a folder
that runs ``f`` in a web page through WebGPU: the WGSL kernels of the webgpu
backend's schedule, a JSON manifest, the baked weights and the dependency-free
ES module ``fnarray-webgpu.js`` (``loadModel(url)`` -> ``model.run({...})``); a dict
of entry points shares one bundle, and state (a KV cache) stays on the GPU between runs.
``python -m fnarray.export.serve DIR`` serves such a folder on 127.0.0.1.
``fnarray.export.onnx(f, *example_args, path, bake_argnums=(), opset=None)`` writes
an ONNX model for ONNX Runtime (and TensorRT, OpenVINO, ...).
See ``docs/export.md``.
"""

from fnarray.export._onnx import onnx
from fnarray.export import _onnx_windows  # noqa: F401  (the window primitives' ONNX rules)
from fnarray.export._webgpu import MANIFEST_VERSION, runtime_source, webgpu

__all__ = ["webgpu", "onnx", "MANIFEST_VERSION", "runtime_source"]
