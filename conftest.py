"""Root of pytest's run over the notebooks (make test's strict nbval): a notebook that uses device CL is skipped, with
the reason, where CL cannot run on this machine (uopc.runtime.cl.cl_unavailable: no PoCL, or a PoCL whose LLVM does not
know this CPU). Elsewhere every notebook runs as before, and so does every notebook under a kernel named with
--nbval-kernel-name (scripts/cl_emulated.sh's, whose CPU PoCL knows). The tests' own setup is tests/conftest.py."""
from pathlib import Path
import pytest

USES_CL = ("uopc.runtime.cl", '\\"CL\\"')   # an import of it, or the device named in a cell (a JSON string in a string)


def pytest_collection_modifyitems(config, items):
  uses: dict[Path, bool] = {}
  for item in items:
    if item.path.suffix == ".ipynb" and item.path not in uses:
      uses[item.path] = any(s in item.path.read_text() for s in USES_CL)
  if not any(uses.values()) or config.getoption("nbval_kernel_name", None): return
  from uopc.runtime.cl import cl_unavailable
  if (why := cl_unavailable()) is None: return
  for item in items:
    if uses.get(item.path): item.add_marker(pytest.mark.skip(reason=f"{why} (this notebook uses device CL)"))
