"""A student's own check of their assignments: runs each notebook of assignments/ and reports per task.

One test per task of every assignment notebook: it passes when the task's cells (its task cell and the visible
checks after it, up to the next task) run without error, is skipped while the task is not attempted (its stub still
raises NotImplementedError naming it, or a task it uses does), and fails with the cell's message otherwise. So in a
fresh tree, where every task is a stub, everything is skipped and `make test` passes; `make check WEEK=3` runs the
week-3 checks alone and says, task by task, what still fails. (The hidden tests, which score points, are the
grader's: they are not in the student's tree.)

The notebook runs as the grader runs it: top to bottom in one kernel, with the OpenMP threads of the environment
(the checks of a kernel that a THREAD loop must not race run it on several threads themselves), each code cell
limited to CELL_TIMEOUT seconds (the grader's limit). A cell that runs past it is interrupted and the notebook stops
there: one runaway cell costs one limit, and its task, and every task after it, says so. The run is made once per
notebook and its result, stopped or not, serves every task.

  make check WEEK=3                      assignments/week3_*.ipynb
  make check WEEK=3 NB=mine.ipynb        a copy of it, any name, anywhere (run in its own folder, never written)

A failure names its cell as Jupyter shows it: the task, and the cell's position among the notebook's code cells,
which is its `In [n]` after Restart & Run All.
"""
from __future__ import annotations
import functools
import os
import re
from dataclasses import dataclass
from pathlib import Path
import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellTimeoutError, DeadKernelError

ROOT = Path(__file__).resolve().parents[2]
ASSIGNMENTS = Path(os.environ.get("UOPC_ASSIGNMENTS", ROOT / "assignments"))   # another folder: to check this test
NOTEBOOK = os.environ.get("UOPC_CHECK_NB", "")      # make check NB=...: this notebook instead of assignments/
WEEK = os.environ.get("UOPC_CHECK_WEEK", "")        # ... which must be this week's assignment
CELL_TIMEOUT = float(os.environ.get("UOPC_CHECK_TIMEOUT", 120))   # seconds per cell: the grader's default
TASK = re.compile(r"^\s*#\s*TASK:\s*(.+?)\s*$", re.M)
KERNEL_ENV = {"IPYKERNEL_CELL_NAME": "<IPY-INPUT>", "PYDEVD_DISABLE_FILE_VALIDATION": "1"}
TIMEOUT = "CellTimeout"
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def task_of_cells(nb: nbformat.NotebookNode) -> list[str | None]:
  """For each cell, the task it belongs to: from a cell with a `# TASK:` line to the next (None before the first)."""
  out, task = [], None
  for c in nb.cells:
    if c.cell_type == "code" and (m := TASK.findall(c.source)): task = m[0]
    out.append(task)
  return out


def tasks(path: Path) -> list[str]:
  return list(dict.fromkeys(t for t in task_of_cells(nbformat.read(path, as_version=4)) if t))


@dataclass
class Run:
  """A notebook after its run: its cells with their outputs, and where the run stopped early (None: it did not)."""
  nb: nbformat.NotebookNode
  stopped_at: int | None = None   # the index of the cell that timed out or killed the kernel
  why: str = ""


def _error(ename: str, evalue: str) -> nbformat.NotebookNode:
  return nbformat.v4.new_output("error", ename=ename, evalue=evalue, traceback=[])


@functools.cache
def executed(path: Path) -> Run:
  """The notebook run top to bottom in one kernel, errors recorded in the cells' outputs, never fatal; a cell past
  CELL_TIMEOUT is interrupted and ends the run, and so does a kernel that dies. Cached, failure included."""
  nb = nbformat.read(path, as_version=4)
  os.environ.update(KERNEL_ENV)
  replies: dict[int, dict] = {}
  client = NotebookClient(
    nb, timeout=CELL_TIMEOUT, kernel_name="python3", allow_errors=True, interrupt_on_timeout=True,
    error_on_timeout={"ename": TIMEOUT, "evalue": "", "traceback": []},
    on_cell_executed=lambda cell, cell_index, execute_reply: replies.__setitem__(cell_index, execute_reply or {}),
    resources={"metadata": {"path": str(path.parent)}})
  run = Run(nb)
  with client.setup_kernel():
    for k, cell in enumerate(nb.cells):
      if cell.cell_type != "code": continue
      try: client.execute_cell(cell, k)
      except (DeadKernelError, CellTimeoutError) as e:
        why = "the notebook's kernel died (a crash in C: an index past the end of a buffer?)" \
          if isinstance(e, DeadKernelError) else f"it ran past the limit of {CELL_TIMEOUT:g} s per cell"
        run.stopped_at, run.why = k, why
        cell.outputs.append(_error("KernelDied" if isinstance(e, DeadKernelError) else TIMEOUT, why))
        break
      if replies.get(k, {}).get("content", {}).get("ename") == TIMEOUT:
        run.stopped_at = k
        run.why = f"it ran past the limit of {CELL_TIMEOUT:g} s per cell (the grader's) and was interrupted"
        cell.outputs = [o for o in cell.outputs if o.get("output_type") != "error"] + [_error(TIMEOUT, run.why)]
        break
  return run


def where(nb: nbformat.NotebookNode, k: int, task: str | None) -> str:
  """Cell k as Jupyter shows it: its position among the code cells (In [n] after Restart & Run All) and its task."""
  n = sum(c.cell_type == "code" for c in nb.cells[:k + 1])
  owners = task_of_cells(nb)
  if task is None: return f"code cell {n} (In [{n}] after Restart & Run All), before the first task"
  mine = [j for j, c in enumerate(nb.cells) if owners[j] == task and c.cell_type == "code"]
  nth = mine.index(k) + 1
  nth = f"{nth}{'th' if 10 <= nth % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(nth % 10, 'th')}"
  return f"task {task!r}, code cell {n} (In [{n}] after Restart & Run All; the {nth} of the task's {len(mine)} code " \
         f"cells)"


def raised_at(error: dict) -> str:
  """The line of the cell an error that is not a check's came from (an AssertionError names its check itself)."""
  lines = [ANSI.sub("", line) for line in error.get("traceback", [])]
  text = "\n".join(lines).splitlines()
  marks = [j for j, line in enumerate(text) if re.match(r"\s*(File <IPY-INPUT>:\d+|Cell In\[\d+\], line \d+)", line)]
  if not marks: return ""
  code = next((m.group(1).strip() for line in text[marks[-1] + 1:] if (m := re.match(r"-*>\s*\d+\s(.*)", line))), "")
  return f" (raised at `{code}`)" if code else ""


def cases() -> list:
  if NOTEBOOK:
    p = Path(NOTEBOOK).resolve()
    return [pytest.param(p, t, id=f"{p.stem}::{t}") for t in tasks(p)] if p.exists() else \
      [pytest.param(p, None, id=f"{p.name}::missing")]
  return [pytest.param(p, t, id=f"{p.stem}::{t}") for p in sorted(ASSIGNMENTS.glob("week*.ipynb")) for t in tasks(p)]


def week_tasks(week: str) -> list[str] | None:
  found = sorted((ROOT / "assignments").glob(f"week{week}_*.ipynb"))
  return tasks(found[0]) if found else None


def fail(message: str):
  pytest.fail(message, pytrace=False)   # the message alone: this harness's source is not the student's business


@pytest.mark.parametrize("path, task", cases())
def test_visible_checks(path: Path, task: str | None):
  if task is None: fail(f"{path}: no such notebook")
  if NOTEBOOK and WEEK and (want := week_tasks(WEEK)) is not None and set(tasks(path)) != set(want):
    fail(f"{path.name} is not week {WEEK}'s assignment: its tasks are {tasks(path)}, week {WEEK}'s {want}")
  run = executed(path)
  nb, known = run.nb, set(tasks(path))
  owners = task_of_cells(nb)
  # where device CL cannot run (uopc.runtime.cl.cl_unavailable), a cell that uses it says so: a `%%needs CL` cell
  # prints why and does not run (uopc.notebook), another raises CLUnavailable, and a task after it fails
  cl_down = next((o.get("evalue", "") for c in nb.cells for o in c.get("outputs", [])
                  if o.get("output_type") == "error" and o.get("ename") == "CLUnavailable"), None)
  absent = next((m.group(1) for c, owner in zip(nb.cells, owners) if owner == task for o in c.get("outputs", [])
                 if (m := re.search(r"^\[(\w+ is not available here: .*)\]$", o.get("text", ""), re.M))), None)
  if absent: pytest.skip(f"{path.stem}, {task!r}: its checks did not run: {absent}")
  for k, (cell, owner) in enumerate(zip(nb.cells, owners)):
    if cell.cell_type != "code": continue
    if run.stopped_at is not None and k > run.stopped_at and owner == task:
      stop = where(nb, run.stopped_at, owners[run.stopped_at])
      fail(f"{path.name}, task {task!r}: not checked: the run stopped at {stop}: {run.why}")
    errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
    if not errors: continue
    ename, evalue = errors[0].get("ename", ""), errors[0].get("evalue", "")
    if owner is None: fail(f"the setup of {path.name} fails ({where(nb, k, None)}): {ename}: {evalue}")
    if owner != task: continue
    if ename == "NotImplementedError" and evalue in known:
      pytest.skip(f"{path.stem}, {task!r}: not attempted yet" +
                  ("" if evalue == task else f" (it uses {evalue!r}, not attempted yet)"))
    if cl_down: pytest.skip(f"{path.stem}, {task!r} needs device CL: {cl_down}")
    at = "" if ename in ("AssertionError", TIMEOUT) else raised_at(errors[0])
    fail(f"{path.name}, {where(nb, k, task)}: {ename}: {evalue}{at}")
