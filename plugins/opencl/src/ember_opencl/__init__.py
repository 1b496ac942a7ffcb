"""ember-opencl: the OpenCL backend for ember (kernels generated as OpenCL C, run by PyOpenCL)."""

__version__ = "0.1.0"
