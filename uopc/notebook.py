"""Chapters that use a device run to the end on a machine without it: a cell that needs one says so on its first line.

  %%needs CL          the cell runs where device CL can (uopc.runtime.cl); elsewhere it prints why, then the output
                      the cell stored in its notebook (made on a machine that has the device), and the notebook goes on
  %%needs CUDA        NVRTC compiles CUDA C (uopc.runtime.cuda: cuda-bindings and nvidia-cuda-nvrtc)
  %%needs GPU         a CUDA GPU to launch on
  %%needs Oclgrind    the race checker of chapter 13
  %%needs CL CUDA     all of those named

A cell that defines what later cells use (a function, a variable) must not need a device: where the device is missing
the cell does not run, and a later cell would find the name missing. uopc registers the magic when it is imported
inside IPython (uopc/__init__.py); `%load_ext uopc.notebook` does it by hand.
"""
from __future__ import annotations
import ast
import json
import re
import sys
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = ("chapters", "solutions", "assignments")   # where a cell's stored output is looked up, after the cwd


def _cl() -> str | None:
  from uopc.runtime.cl import cl_unavailable
  return cl_unavailable()


def _cuda() -> str | None:
  from uopc.runtime.cuda import nvrtc_unavailable
  return nvrtc_unavailable()


def _gpu() -> str | None:
  from uopc.runtime.cuda import no_gpu_reason
  return no_gpu_reason() or None


def _oclgrind() -> str | None:
  from uopc.runtime.cl import oclgrind_unavailable
  return oclgrind_unavailable()


# what a cell may need -> why this machine lacks it (None: it has it)
NEEDS: dict[str, Callable[[], str | None]] = {"CL": _cl, "CUDA": _cuda, "GPU": _gpu, "Oclgrind": _oclgrind}


def missing(names: list[str]) -> list[tuple[str, str]]:
  """(name, why) for each of names this machine lacks."""
  unknown = [n for n in names if n not in NEEDS]
  if unknown or not names:
    raise ValueError(f"%%needs takes one or more of {', '.join(NEEDS)}; got {' '.join(names) or 'nothing'}")
  return [(n, why) for n in names if (why := NEEDS[n]())]


# ---- the output a cell stored ----
_parsed: dict[Path, tuple[float, dict[str, list]]] = {}   # notebook -> (mtime, {code cell source: its outputs})


def _cells(path: Path) -> dict[str, list]:
  mtime = path.stat().st_mtime
  if path not in _parsed or _parsed[path][0] != mtime:
    nb = json.loads(path.read_text())
    text = lambda s: "".join(s) if isinstance(s, list) else s
    _parsed[path] = (mtime, {text(c["source"]).strip(): c.get("outputs", []) for c in nb.get("cells", [])
                             if c.get("cell_type") == "code"})
  return _parsed[path][1]


def stored_outputs(source: str, folders: list[Path] | None = None) -> tuple[Path, list] | None:
  """(notebook, outputs) of the first code cell with this source that has stored outputs: in the notebooks of the
  working folder, then of the book's chapters/, solutions/ and assignments/."""
  folders = folders if folders is not None else [Path.cwd(), *(ROOT / f for f in FOLDERS)]
  for folder in folders:
    for path in sorted(folder.glob("*.ipynb")):
      try: outputs = _cells(path).get(source.strip())
      except (OSError, ValueError): continue   # unreadable, or not a notebook: look further
      if outputs: return path, outputs
  return None


CHECKED = re.compile(r"^ok: (.*)$", re.M)   # the line uopc.checks prints for a check that held


def unchecked(text: str) -> str:
  """Stored text with each check's `ok: <what>` line replaced: a check that did not run here never shows an ok (the
  stored line may come from another notebook with the same cell, a solution's run under a student's)."""
  return CHECKED.sub(r"[not checked here: \1]", text)


def shown_path(path: Path) -> str:
  """path as the reader can find it: from the working folder, else from the book's root (solutions/week6_...)."""
  for base in (Path.cwd(), ROOT):
    try: return str(path.resolve().relative_to(base.resolve()))
    except ValueError: continue
  return str(path)


def show(outputs: list) -> None:
  """Outputs as a notebook stored them: streams printed (checks' ok lines as not checked here), displays (text,
  images) displayed."""
  from IPython.display import display
  for o in outputs:
    kind = o.get("output_type")
    if kind == "stream":
      text = o.get("text", "")
      print(unchecked("".join(text) if isinstance(text, list) else text), end="",
            file=sys.stderr if o.get("name") == "stderr" else sys.stdout)
    elif kind in ("display_data", "execute_result"):   # a notebook file splits text into lines: join them again
      data = {k: "".join(v) if isinstance(v, list) else v for k, v in o.get("data", {}).items()}
      display(data, raw=True, metadata=o.get("metadata", {}))


# ---- the magic ----
def run_cell_body(cell: str, shell=None):
  """Run the cell's code in the notebook's namespace as IPython would: the value of a last expression is returned
  (and so displayed) unless a semicolon ends it."""
  from IPython import get_ipython
  shell = shell or get_ipython()
  code = shell.transform_cell(cell)
  tree = ast.parse(code)
  last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
  quiet = code.rstrip().endswith(";")
  try: filename = shell.compile.cache(code)   # tracebacks then show the cell's lines
  except Exception: filename = "<cell>"
  exec(compile(tree, filename, "exec"), shell.user_ns)
  if last is not None:
    value = eval(compile(ast.Expression(last.value), filename, "eval"), shell.user_ns)
    return None if quiet else value


def needs(line: str, cell: str):
  """%%needs NAME...: run the cell where this machine has every device named; else say why and show what it stored."""
  names = line.split()
  absent = missing(names)
  if not absent: return run_cell_body(cell)
  for name, why in absent: print(f"[{name} is not available here: {why}]")
  found = stored_outputs(f"%%needs {line}\n{cell}")
  if found is None: print("[so this cell did not run; no output of it is stored to show instead]"); return None
  print(f"[so this cell did not run; the output stored in {shown_path(found[0])} follows]")
  show(found[1])


def load_ipython_extension(shell) -> None:
  shell.register_magic_function(needs, "cell", "needs")


def register() -> None:
  """Make %%needs available in the running IPython (uopc/__init__.py calls this when IPython is loaded)."""
  try:
    from IPython import get_ipython
    shell = get_ipython()
  except ImportError: return
  if shell is not None and "needs" not in shell.magics_manager.magics["cell"]: load_ipython_extension(shell)


# ---- a static check: no cell reads a name that only a cell needing more devices defines ----
def _needs_of(source: str) -> tuple[frozenset[str], str]:
  """(devices the cell needs, its code without a cell magic's line: %%needs, %%time and the like run the body as
  Python; a body that is not Python, as under %%bash, fails to parse and the cell is left out)."""
  first, _, rest = source.partition("\n")
  if first.startswith("%%needs"): return frozenset(first.split()[1:]), rest
  return frozenset(), rest if first.startswith("%%") else source


def _names(code: str) -> tuple[set[str], set[str]]:
  """(names the code binds at the notebook's top level, names it reads from there), found by Python's symbol tables
  after IPython's own rewriting of magics (so a function's parameters and locals are not reads)."""
  import symtable
  from IPython.core.inputtransformer2 import TransformerManager
  table = symtable.symtable(TransformerManager().transform_cell(code), "<cell>", "exec")
  binds = {s.get_name() for s in table.get_symbols() if s.is_assigned() or s.is_imported() or s.is_namespace()}
  reads: set[str] = set()
  stack = [table]
  while stack:
    t = stack.pop()
    top = t.get_type() == "module"
    reads |= {s.get_name() for s in t.get_symbols() if s.is_referenced() and (top or s.is_global())}
    stack += t.get_children()
  return binds, reads


def device_only_reads(cells: list[str]) -> list[tuple[int, str, frozenset[str]]]:
  """(cell index, name, devices) for each read of a name that only earlier cells needing devices the reading cell
  does not need have defined: where those devices are missing the name is missing too (a NameError a machine with
  every device never shows). A name the reading cell binds itself counts as its own; cells that do not parse as Python
  are left out."""
  defined: dict[str, list[frozenset[str]]] = {}   # name -> the needs of each earlier cell that bound it
  found = []
  for k, source in enumerate(cells):
    needs, code = _needs_of(source)
    try: binds, reads = _names(code)
    except SyntaxError: continue
    for name in sorted(reads - binds):
      if name in defined and not any(d <= needs for d in defined[name]):
        found.append((k, name, min(defined[name], key=len)))
    for name in binds: defined.setdefault(name, []).append(needs)
  return found
