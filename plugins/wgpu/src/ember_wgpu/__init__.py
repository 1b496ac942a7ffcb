"""ember-wgpu: the WebGPU backend for ember (wgpu-py, WGSL compute shaders generated per dtype).

The backend class loads lazily through the ``ember.backends`` entry point (``ember_wgpu.plugin``);
importing this package does not import wgpu.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
