"""uopc: a small tensor compiler. Tensor -> UOps -> kernels -> loops -> C -> cffi -> NumPy."""
import sys as _sys
from uopc.helpers import getenv as _getenv
__version__ = "0.1.0"

if _getenv("VIZ", 0):   # VIZ=1 python prog.py: uopc.viz records every realize
  import uopc.viz  # noqa: F401
if "IPython" in _sys.modules:   # in a notebook: the %%needs cell magic, for cells that use a device (uopc.notebook)
  from uopc.notebook import register as _register
  _register()
