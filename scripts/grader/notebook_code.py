"""What the grader reads of a submission's notebook on its own machine, read in a child process under caps.

Parsing a notebook is work a student controls: nbformat's JSON and schema pass, then, for the definitions the peak
memory test runs (`definitions`), Python's parser and IPython's input transformer over every code cell. One 3 MB
cell made that pass take 1.5 GB and minutes in the grader's own process. So `digest` runs it all in a child
(`python -s notebook_code.py`) with an address-space and a CPU-time limit and a wall-clock timeout, on a submission of
at most MAX_CODE characters of code, and takes back only a small digest: which week it says it answers, the student's
code cells and their definitions, as plain JSON of bounded size. A notebook past a cap is an error (ValueError) that
says which cap; the grader scores it 0 with that message, never quoting the file.

`definitions` also reads through cell magics that run their body as Python in the notebook's namespace (`%%time`,
`%%capture`, ...): a function defined under one is a definition like any other (issue 48, item 7).
"""
from __future__ import annotations
import ast
import hashlib
import json
import resource
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

HIDDEN, SETUP = "hidden-test", "hidden-setup"
MAX_CODE = 1 << 20          # characters of code in all the student's cells together
MAX_MEMORY = 2 << 30        # bytes of address space the parsing child may map
MAX_CPU = 60                # seconds of CPU time it may use
MAX_WALL = 120              # seconds it may take in all
MAX_TITLES, MAX_TITLE = 1000, 2000   # markdown cells, and characters of each, sent back (the week is read there)
MAX_DIGEST = 4 * (2 * MAX_CODE + MAX_TITLES * MAX_TITLE) + (1 << 20)   # bytes of UTF-8 JSON it may send back
# cell magics whose body IPython runs as Python code of the notebook (its definitions stay): read as that body
BODY_MAGICS = frozenset({"time", "capture", "timeit", "prun"})
KEEP = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
# a top-level constant a definition may read (C_TYPES = {"float": np.float32}, a kernel's source text): kept when
# its value is built of these only (no call, no arithmetic: nothing that computes or allocates runs)
CONSTANT = (ast.Constant, ast.Name, ast.Attribute, ast.Load, ast.Dict, ast.List, ast.Tuple, ast.Set, ast.UnaryOp,
            ast.USub, ast.UAdd)


def constant(node: ast.stmt) -> bool:
  """Whether node is `NAME = <a constant value>` (CONSTANT), or names = such values."""
  names = lambda t: isinstance(t, ast.Name) or (isinstance(t, (ast.Tuple, ast.List)) and all(map(names, t.elts)))
  return (isinstance(node, ast.Assign) and all(map(names, node.targets))
          and all(isinstance(n, CONSTANT) for n in ast.walk(node.value)))


def _guarded(node: ast.stmt) -> ast.stmt:
  """node in a try: a constant that names something the definitions lack is left out, not an error."""
  return ast.Try(body=[node], handlers=[ast.ExceptHandler(type=ast.Name("Exception", ast.Load()), name=None,
                                                          body=[ast.Pass()])], orelse=[], finalbody=[])


@dataclass
class Digest:
  assignment: str | None = None                      # metadata.uopc.assignment, when it is a string
  titles: list[str] = field(default_factory=list)    # markdown cells' text (the week is looked up in them)
  cells: list[tuple[int, str]] = field(default_factory=list)   # (index in the notebook, code) of the student's cells
  defs: str = ""                                     # definitions(cells)


def unwrap(src: str) -> str:
  """The Python of a cell: a body-running cell magic's body (recursively), else the cell as it is."""
  first, _, body = src.lstrip("\n").partition("\n")
  magic = first[2:].split()[:1] if first.startswith("%%") else []
  return unwrap(body) if magic and magic[0] in BODY_MAGICS else src


def definitions(cells: list[str]) -> str:
  """The imports, functions, classes and constants (`constant`) of the notebook's code cells, in order, as one
  module (no other statement of a cell: nothing that computes at the top level runs). A cell that is not Python (a
  magic) is read as IPython turns it into Python, a body-running cell magic (`%%time`) as its body; a cell that
  still is not Python is skipped."""
  try: from IPython.core.inputtransformer2 import TransformerManager
  except ImportError: TransformerManager = None
  future, body = [], []
  for src in cells:
    src = unwrap(src)
    try: tree = ast.parse(TransformerManager().transform_cell(src) if TransformerManager else src)
    except (SyntaxError, ValueError, RecursionError): continue
    for node in tree.body:
      if isinstance(node, ast.ImportFrom) and node.module == "__future__": future.append(node)
      elif isinstance(node, KEEP): body.append(node)
      elif constant(node): body.append(_guarded(node))
  return ast.unparse(ast.fix_missing_locations(ast.Module(body=future[:1] + body, type_ignores=[]))) + "\n"


def student_cells(nb) -> list[tuple[int, str]]:
  """(index in the notebook, code) of every code cell the student wrote (markdown and raw cells are not run, nor
  cells tagged as the grader's: a solution notebook graded as a submission carries its hidden cells)."""
  mine = lambda c: not {HIDDEN, SETUP} & set(c.get("metadata", {}).get("tags", []) or [])
  return [(k, c.source) for k, c in enumerate(nb.cells) if c.get("cell_type") == "code"
          and isinstance(c.get("source"), str) and c.source.strip() and mine(c)]


# ---- the child ---------------------------------------------------------------------------------------------------
def _read(data: bytes) -> dict:
  """The digest of a notebook's bytes, as JSON-ready data, or {"error": why} (never quoting the file)."""
  sys.modules.setdefault("rfc3987_syntax", None)   # as grade.py: an import that costs seconds and checks nothing here
  import nbformat
  try: text = data.decode("utf-8")
  except UnicodeDecodeError: return {"error": "not UTF-8 text"}
  try: nb = nbformat.reads(text, as_version=4)
  except Exception as e:   # nbformat's messages quote the file
    return {"error": f"not a Jupyter notebook nbformat can read ({type(e).__name__})"}
  cells = student_cells(nb)
  size = sum(len(src) for _, src in cells)
  if size > MAX_CODE:
    return {"error": f"its code cells hold {size:,} characters, more than the {MAX_CODE:,} a submission may have"}
  name = nb.metadata.get("uopc", {}).get("assignment") if isinstance(nb.metadata.get("uopc"), dict) else None
  titles = [c.source for c in nb.cells if c.get("cell_type") == "markdown" and isinstance(c.get("source"), str)]
  return {"assignment": name if isinstance(name, str) else None, "titles": [t[:MAX_TITLE] for t in titles][:MAX_TITLES],
          "cells": cells, "defs": definitions([src for _, src in cells])}


def _limits() -> None:
  resource.setrlimit(resource.RLIMIT_AS, (MAX_MEMORY, MAX_MEMORY))
  resource.setrlimit(resource.RLIMIT_CPU, (MAX_CPU, MAX_CPU))
  resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
  resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


_memo: tuple[str, Digest] | None = None   # the last notebook read: grade_all asks for one notebook three times


def digest(data: bytes) -> Digest:
  """The digest of a submission's bytes, read in a capped child; a ValueError saying why when it cannot be read."""
  global _memo
  key = hashlib.sha256(data).hexdigest()
  if _memo is not None and _memo[0] == key: return _memo[1]
  try:
    r = subprocess.run([sys.executable, "-s", str(Path(__file__).resolve())], input=data, capture_output=True,
                       timeout=MAX_WALL, preexec_fn=_limits, env={"PATH": "/usr/bin:/bin", "PYTHONHASHSEED": "0"})
  except subprocess.TimeoutExpired:
    raise ValueError(f"reading its code took more than {MAX_WALL} s") from None
  if r.returncode != 0:
    raise ValueError(f"reading its code took more than {MAX_MEMORY >> 20:,} MiB of memory or {MAX_CPU} s of CPU "
                     f"(status {r.returncode})")
  if len(r.stdout) > MAX_DIGEST: raise ValueError("what it holds is too much to read back")
  try: got = json.loads(r.stdout.decode("utf-8"))
  except ValueError: raise ValueError("reading it gave no answer") from None
  if "error" in got: raise ValueError(str(got["error"]))
  d = Digest(got["assignment"], [str(t) for t in got["titles"]], [(int(k), str(s)) for k, s in got["cells"]],
             str(got["defs"]))
  _memo = (key, d)
  return d


if __name__ == "__main__":
  try: out = _read(sys.stdin.buffer.read())
  except MemoryError: sys.exit(3)   # past the cap: the grader says which
  except RecursionError: out = {"error": "its code is nested too deeply to be read"}
  sys.stdout.buffer.write(json.dumps(out, ensure_ascii=False).encode("utf-8", "surrogatepass"))
