"""A student's own check of their assignments: runs each notebook of assignments/ and reports per task.

One test per task of every assignment notebook: it passes when the task's cells (its task cell and the visible
checks after it, up to the next task) run without error, is skipped while the task is not attempted (its stub still
raises NotImplementedError naming it, or a task it uses does), and fails with the cell's error otherwise. So in a
fresh tree, where every task is a stub, everything is skipped and `make test` passes; `make check WEEK=3` runs the
week-3 checks alone and says, task by task, what still fails. (The hidden tests, which score points, are the
grader's: they are not in the student's tree.)
"""
from __future__ import annotations
import functools
import os
import re
from pathlib import Path
import nbformat
import pytest
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent
ASSIGNMENTS = Path(os.environ.get("UOPC_ASSIGNMENTS", ROOT / "assignments"))   # another folder: to check this test
TASK = re.compile(r"^\s*#\s*TASK:\s*(.+?)\s*$", re.M)
KERNEL_ENV = {"IPYKERNEL_CELL_NAME": "<IPY-INPUT>", "PYDEVD_DISABLE_FILE_VALIDATION": "1"}


def task_of_cells(nb: nbformat.NotebookNode) -> list[str | None]:
  """For each cell, the task it belongs to: from a cell with a `# TASK:` line to the next (None before the first)."""
  out, task = [], None
  for c in nb.cells:
    if c.cell_type == "code" and (m := TASK.findall(c.source)): task = m[0]
    out.append(task)
  return out


def tasks(path: Path) -> list[str]:
  return list(dict.fromkeys(t for t in task_of_cells(nbformat.read(path, as_version=4)) if t))


@functools.cache
def executed(path: Path) -> nbformat.NotebookNode:
  """The notebook run top to bottom in one kernel, errors recorded in the cells' outputs, never fatal."""
  nb = nbformat.read(path, as_version=4)
  os.environ.update(KERNEL_ENV)
  NotebookClient(nb, timeout=300, kernel_name="python3", allow_errors=True,
                 resources={"metadata": {"path": str(path.parent)}}).execute()
  return nb


CASES = [pytest.param(p, t, id=f"{p.stem}::{t}") for p in sorted(ASSIGNMENTS.glob("week*.ipynb")) for t in tasks(p)]


@pytest.mark.parametrize("path, task", CASES)
def test_visible_checks(path: Path, task: str):
  nb = executed(path)
  known = set(tasks(path))
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
    errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
    if not errors: continue
    ename, evalue = errors[0].get("ename", ""), errors[0].get("evalue", "")
    if owner is None: pytest.fail(f"the setup of {path.name} fails (cell {k}): {ename}: {evalue}")
    if owner != task: continue
    if ename == "NotImplementedError" and evalue in known:
      pytest.skip(f"{path.stem}, {task!r}: not attempted yet" +
                  ("" if evalue == task else f" (it uses {evalue!r}, not attempted yet)"))
    if cl_down: pytest.skip(f"{path.stem}, {task!r} needs device CL: {cl_down}")
    pytest.fail(f"{path.name}, cell {k} of task {task!r}: {ename}: {evalue}")
