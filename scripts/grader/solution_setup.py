"""What a solution notebook's hidden-setup cell imports, so that its hidden tests run there as the grader splits them:
`record`, `raised` and `seeded` as in the sandbox (probe.py), `recorded` reading the values back as the judge
does, gradelib's checks, and `time_kernels`, `run_c`, `launch_cl`, `peak_memory` for the judges (outside.py; here
run at once and without a sandbox, the solution being trusted code; `peak_memory` takes the definitions of the
notebook's namespace). Each cell records into a fresh folder (an IPython pre_run_cell hook), so a judge never reads a
value an earlier test recorded. The grader runs the same hidden-setup cell in its own process to define the judges'
helpers, and then replaces SEED, seeded, recorded and the outside.py functions with its own."""
from __future__ import annotations
import ast
import inspect
import sys
import tempfile
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))   # scripts/, for gradelib
import gradelib  # noqa: E402
import outside  # noqa: E402
import probe  # noqa: E402

SEED = 0   # the notebook's inputs; the grader draws its own seed for every grading
_probe = probe.Probe(Path(tempfile.gettempdir()) / f"uopc-probe-{uuid.uuid4().hex}", SEED)   # made on first record
record, raised, seeded, recorded = _probe.record, _probe.raised, _probe.seeded, probe.Live(_probe)
_batch = outside.Batch(None)   # the grader's own: jobs in a sandbox, asked for by its judges
time_kernels, run_c, launch_cl = _batch.time_kernels, _batch.run_c, _batch.launch_cl
run_c_threads = _batch.run_c_threads

try: from IPython import get_ipython
except ImportError: get_ipython = lambda: None
_cells: list[str] = []   # the sources of the cells run after this one (nbval's kernel keeps no input history)


def _pre_run_cell(info=None) -> None:
  _probe.begin(_probe.test + 1)
  if isinstance(getattr(info, "raw_cell", None), str): _cells.append(info.raw_cell)


if (_ipython := get_ipython()) is not None:   # in a notebook's kernel; None in the grader's process
  _ipython.events.register("pre_run_cell", _pre_run_cell)


def _definitions(ns: dict) -> str:
  """The notebook's imports, functions and classes as module source: modules and names imported from elsewhere, as
  imports, from its namespace; what the cells before this one define, as far as their source can be found; then the
  definitions of the cells run since (outside.definitions), which a later definition of the same name replaces."""
  imports, defs = [], []
  grader = str(Path(__file__).resolve().parent.parent)   # scripts/: the grader's own modules are not the notebook's
  # a class has no source inspect can find in a kernel: it is looked up in the cells the kernel ran (In), if it kept
  # them (the grader's own cells left out)
  history = [c for c in ns.get("In", []) if isinstance(c, str) and "solution_setup" not in c and "# POINTS:" not in c]
  earlier = {n.name: ast.unparse(n) for n in ast.parse(outside.definitions(history)).body
             if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
  mine = lambda m: str(getattr(m, "__file__", "") or "").startswith(grader)
  for name, obj in ns.items():
    if name.startswith("_") or name in ("In", "Out", "get_ipython", "exit", "quit"): continue
    if inspect.ismodule(obj):
      if not mine(obj): imports.append(f"import {obj.__name__} as {name}")
    elif (inspect.isfunction(obj) or inspect.isclass(obj)) and mine(sys.modules.get(obj.__module__)): continue
    elif inspect.isfunction(obj) or inspect.isclass(obj):
      if obj.__module__ == "__main__":
        try: src = inspect.getsource(obj)
        except (OSError, TypeError):
          if obj.__name__ in earlier: defs.append(earlier[obj.__name__])
          continue
        try: tree = ast.parse(src)   # cells that share a file name can give another cell's lines: kept only if right
        except SyntaxError: tree = ast.parse("")
        if [getattr(n, "name", None) for n in tree.body] == [obj.__name__]: defs.append(src)
        elif obj.__name__ in earlier: defs.append(earlier[obj.__name__])
      elif "." not in obj.__qualname__ and "<" not in obj.__qualname__:
        imports.append(f"from {obj.__module__} import {obj.__qualname__} as {name}")
  return "\n".join(imports) + "\n\n" + "\n".join(defs) + "\n\n" + outside.definitions(_cells)


def peak_memory(fn: str, inputs: list, kwargs: dict | None = None) -> dict:
  """outside.Batch.peak_memory on the definitions of the notebook's namespace."""
  _batch.defs = _definitions(_ipython.user_ns) if _ipython is not None else ""
  return _batch.peak_memory(fn, inputs, kwargs)


def raises(call: str, inputs: list = (), setup: str = "") -> dict:
  """outside.Batch.raises on the definitions of the notebook's namespace."""
  _batch.defs = _definitions(_ipython.user_ns) if _ipython is not None else ""
  return _batch.raises(call, inputs, setup)


__all__ = ["SEED", "gradelib", "peak_memory", "raised", "raises", "record", "recorded", "run_c", "run_c_threads",
           "launch_cl", "seeded", "time_kernels"]
