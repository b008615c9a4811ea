"""uopc: a small tensor compiler. Tensor -> UOps -> kernels -> loops -> C -> cffi -> NumPy."""
import sys as _sys
__version__ = "0.1.0"

if "IPython" in _sys.modules:   # in a notebook: the %%needs cell magic, for cells that use a device (uopc.notebook)
  from uopc.notebook import register as _register
  _register()
