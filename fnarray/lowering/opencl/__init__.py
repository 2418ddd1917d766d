"""The opencl backend: kernels of ``fnarray.lowering.kernels`` rendered as OpenCL C, run through PyOpenCL."""
