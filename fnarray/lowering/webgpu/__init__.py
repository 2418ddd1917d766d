"""The webgpu backend: kernels of ``fnarray.lowering.kernels`` rendered as WGSL, run through wgpu-py."""
