"""uopc: a small tensor compiler. Tensor -> UOps -> kernels -> loops -> C -> cffi -> NumPy.

  from uopc import Tensor, TinyJit, nn, optim, dtypes, no_grad      # tinygrad's and PyTorch's first line

The names are imported on first use (a module __getattr__), so `import uopc` alone loads no part of the compiler.
"""
import importlib as _importlib
import sys as _sys
from uopc.helpers import getenv as _getenv
__version__ = "0.1.0"

# name -> (module, attribute); attribute None: the module itself
_FACE = {"Tensor": ("uopc.tensor", "Tensor"), "TinyJit": ("uopc.jit", "TinyJit"), "dtypes": ("uopc.dtype", "dtypes"),
         "no_grad": ("uopc.grad_mode", "no_grad"), "enable_grad": ("uopc.grad_mode", "enable_grad"),
         "is_grad_enabled": ("uopc.grad_mode", "is_grad_enabled"), "nn": ("uopc.nn", None),
         "optim": ("uopc.optim", None)}
__all__ = sorted(_FACE)


def __getattr__(name: str):
  if name not in _FACE: raise AttributeError(f"module 'uopc' has no attribute {name!r}")
  module, attr = _FACE[name]
  value = _importlib.import_module(module)
  value = value if attr is None else getattr(value, attr)
  globals()[name] = value   # found directly from now on
  return value


def __dir__() -> list[str]: return sorted(set(globals()) | set(_FACE))

if _getenv("VIZ", 0):   # VIZ=1 python prog.py: uopc.viz records every realize
  import uopc.viz  # noqa: F401
if "IPython" in _sys.modules:   # in a notebook: the %%needs cell magic, for cells that use a device (uopc.notebook)
  from uopc.notebook import register as _register
  _register()
