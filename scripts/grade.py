"""Grade a student's notebook with the hidden tests of its solution notebook.

  python scripts/grade.py mine.ipynb                # points per task, what went wrong, then one line of JSON
  python scripts/grade.py mine.ipynb --solution solutions/week6_flash_attention.ipynb --json score.json
  python scripts/grade.py mine.ipynb --only "merge two states" --timeout 30

Which solution: --solution if given; else the one the notebook's metadata names (`uopc.assignment`, which the
generated assignment carries), else the solution whose title week matches the notebook's (`# Week 3 ...`), else
solutions/<the notebook's file name>. So a student's copy may have any name.

How it grades: one Python kernel runs the student's code cells in order, each under a time limit. An error or a
timeout is recorded, never fatal: a timed-out cell is interrupted, and a kernel that dies or does not come back is
replaced by a fresh one, which first re-runs the cells that had worked. Then the solution's cells tagged
`hidden-setup` run (the grader's checks, scripts/gradelib.py), then every hidden test of the solution (a code cell
tagged `hidden-test` whose first line is `# POINTS: <task> <points> [structure|speed]`), in the same namespace, after
all of the student's cells, each under its own time limit. A test scores its points if it finishes without an
error. A test marked `structure` or `speed` is run only when every plain (values) test of its task scored: a fast
kernel that computes the wrong values earns nothing. If a test kills the kernel (or hangs it), it scores 0, and the
student's cells that ran without error are run again in a fresh kernel before the next test.

The last line printed is always the result as one line of JSON. Exit status: 0 when the notebook was graded (even
with 0 points), 1 when no kernel could be started, 2 for a usage error (no solution, no hidden tests, unknown task).
"""
from __future__ import annotations
import argparse
import contextlib
import json
import math
import os
import re
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
import nbformat
from nbformat.v4 import new_code_cell, new_notebook
from nbclient import NotebookClient
from nbclient.exceptions import CellTimeoutError, DeadKernelError

ROOT = Path(__file__).resolve().parent.parent
HIDDEN, SETUP = "hidden-test", "hidden-setup"
POINTS = re.compile(r"^\s*#\s*POINTS:\s*(.+?)\s+(\d+(?:\.\d+)?)(?:\s+(structure|speed))?\s*$")
WEEK = re.compile(r"^\s{0,3}#\s+Week\s+(\d+)\b", re.I | re.M)
# the same kernel environment as scripts/notebooks.py, so tracebacks read the same
KERNEL_ENV = {"IPYKERNEL_CELL_NAME": "<IPY-INPUT>", "PYDEVD_DISABLE_FILE_VALIDATION": "1"}
TIMEOUT_NAME = "GradingTimeout"
MAX_REPLAYS = 2          # fresh kernels to replay the student's cells in, after hidden tests killed the kernel
MAX_TEXT = 600           # characters of an error message kept in the report


class UsageError(ValueError):
  """The grader was called wrongly (missing solution, no hidden tests, an unknown task): exit status 2."""


@dataclass
class HiddenTest:
  task: str
  points: float
  source: str
  cell: int              # index of the cell in the solution notebook
  kind: str = "values"   # values, structure or speed: the last two count only when the task's values are right


@dataclass
class Outcome:
  status: str            # ok, error, timeout, dead (the kernel died), skipped
  error: str = ""        # "Name: message" for error, timeout and dead
  seconds: float = 0.0


def short(text: str) -> str:
  text = " ".join(str(text).split())
  return text if len(text) <= MAX_TEXT else text[:MAX_TEXT - 3] + "..."


def hidden_tests(solution: nbformat.NotebookNode, where: str) -> list[HiddenTest]:
  """Every hidden-test cell of the solution, with the task and points its first line declares."""
  tests = []
  for k, cell in enumerate(solution.cells):
    if cell.cell_type != "code" or HIDDEN not in cell.get("metadata", {}).get("tags", []): continue
    first = cell.source.lstrip("\n").split("\n", 1)[0]
    m = POINTS.match(first)
    if m is None: raise UsageError(f"{where}, cell {k}: a hidden test must start with `# POINTS: <task> <points>`")
    tests.append(HiddenTest(m.group(1), float(m.group(2)), cell.source, k, m.group(3) or "values"))
  if not tests: raise UsageError(f"{where} has no cells tagged {HIDDEN}: nothing to grade with")
  return tests


def setup_cells(solution: nbformat.NotebookNode) -> list[str]:
  """The code of the solution's hidden-setup cells: what its hidden tests need (the grader's checks)."""
  return [c.source for c in solution.cells if c.cell_type == "code" and SETUP in c.get("metadata", {}).get("tags", [])]


def find_solution(student: Path, solutions: Path = ROOT / "solutions") -> Path:
  """The solution notebook a student's notebook answers (see the module docstring)."""
  try: nb = nbformat.read(student, as_version=4)
  except Exception: nb = None   # unreadable: fall back to its name; grade() scores it 0
  if nb is not None:
    name = nb.metadata.get("uopc", {}).get("assignment")
    if name and (solutions / f"{name}.ipynb").is_file(): return solutions / f"{name}.ipynb"
    title = next((c.source for c in nb.cells if c.cell_type == "markdown" and WEEK.search(c.source)), "")
    if m := WEEK.search(title):
      found = sorted(solutions.glob(f"week{int(m.group(1))}_*.ipynb"))
      if len(found) == 1: return found[0]
  return solutions / student.name


class QuietClient(NotebookClient):
  """nbclient that keeps only error outputs: grading reads nothing else, and a cell printing without end cannot
  fill the grader's memory."""

  def output(self, outs, msg, display_id, cell_index):
    if msg["msg_type"] != "error": return None
    return super().output(outs, msg, display_id, cell_index)


class Session:
  """One kernel, started in `cwd`; run() executes a piece of code in it and says how that went."""

  def __init__(self, cwd: Path):
    os.environ.update(KERNEL_ENV)
    self.nb = new_notebook()
    self.replies: list[dict] = []
    self.client = QuietClient(
      self.nb, kernel_name="python3", allow_errors=True, interrupt_on_timeout=True, shutdown_kernel="immediate",
      timeout_func=lambda cell: cell.metadata.get("grade_timeout"), record_timing=False,
      error_on_timeout={"ename": TIMEOUT_NAME, "evalue": "", "traceback": []},
      on_cell_executed=lambda cell, cell_index, execute_reply: self.replies.append(execute_reply),
      resources={"metadata": {"path": str(cwd)}})
    self.stack = contextlib.ExitStack()
    # the kernel process's own output (C printf, library warnings) is not the student's notebook output
    self.stack.enter_context(self.client.setup_kernel(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))

  def run(self, source: str, timeout: float) -> Outcome:
    limit = max(1, math.ceil(timeout))   # nbclient counts whole seconds
    cell = new_code_cell(source)
    cell.metadata["grade_timeout"] = limit
    self.nb.cells.append(cell)
    self.replies.clear()
    t0 = time.perf_counter()
    try: self.client.execute_cell(cell, len(self.nb.cells) - 1)
    except DeadKernelError: return Outcome("dead", "DeadKernelError: the kernel died", time.perf_counter() - t0)
    except CellTimeoutError as e: return Outcome("timeout", short(f"CellTimeoutError: {e}"), time.perf_counter() - t0)
    except Exception as e:   # anything else from the kernel's side: treat the kernel as lost
      return Outcome("dead", short(f"{type(e).__name__}: {e}"), time.perf_counter() - t0)
    finally: cell.source = ""   # a long notebook's sources need not stay in memory twice
    dt = time.perf_counter() - t0
    content = self.replies[-1].get("content", {}) if self.replies and self.replies[-1] else {}
    if content.get("ename") == TIMEOUT_NAME: return Outcome("timeout", f"Timeout: ran past {limit} s", dt)
    errors = [o for o in cell.outputs if o.get("output_type") == "error"]
    if content.get("status") == "error" or errors:
      ename = content.get("ename") or (errors[0].get("ename") if errors else "Error")
      evalue = content.get("evalue") if content.get("ename") else (errors[0].get("evalue", "") if errors else "")
      return Outcome("error", short(f"{ename}: {evalue}"), dt)
    return Outcome("ok", "", dt)

  def responsive(self) -> bool:
    """After a timeout: did the interrupt bring the kernel back (or is it still busy, or dead)?"""
    return self.run("pass", 5).status == "ok"

  def close(self) -> None:
    with contextlib.suppress(Exception): self.stack.close()


@dataclass
class Report:
  notebook: str
  solution: str
  tasks: dict[str, dict] = field(default_factory=dict)   # task -> {"points", "max", "tests": [...]}
  total: float = 0.0
  max: float = 0.0
  student_cells: dict = field(default_factory=lambda: {"run": 0, "errors": [], "timeouts": 0, "skipped": 0})
  kernel_restarts: int = 0
  note: str = ""


# A kernel can die before it answers at all ("Kernel died before replying to kernel_info", seen once in CI with two
# xdist workers starting kernels; one known cause is two kernels started at once being handed the same port). It is
# not the student's doing, so the grader starts one again, up to START_TRIES times.
START_TRIES = 3


class Grader:
  def __init__(self, student: Path, tests: list[HiddenTest], timeout: float, test_timeout: float, budget: float,
               setup: list[str] | None = None):
    self.student, self.tests, self.setup = student, tests, setup or []
    self.timeout, self.test_timeout, self.budget = timeout, test_timeout, budget
    self.session: Session | None = None
    self.ok_cells: list[str] = []   # the student's cells that ran without error, to replay in a fresh kernel
    self.report = Report(str(student), "")
    for t in tests:
      task = self.report.tasks.setdefault(t.task, {"points": 0.0, "max": 0.0, "tests": []})
      task["max"] += t.points
      self.report.max += t.points

  def start(self) -> None:
    if self.session is not None: self.session.close()
    self.session = None   # if the start below fails, there is no session
    for attempt in range(START_TRIES):
      try:
        self.session = Session(self.student.resolve().parent)
        return
      except RuntimeError:   # "Kernel died before replying to kernel_info": not the student's doing
        if attempt == START_TRIES - 1: raise
        time.sleep(1.0)

  def restart(self) -> None:
    self.report.kernel_restarts += 1
    self.start()

  def run_student(self, cells: list[tuple[int, str]]) -> None:
    """The student's code cells in order. A dead or stuck kernel is replaced by a fresh one, in which the cells
    that had run without error are run again (as "restart and run all above" would), and the next cell goes on."""
    t_end = time.perf_counter() + self.budget
    cells_report = self.report.student_cells
    for n, (k, source) in enumerate(cells):
      if time.perf_counter() > t_end:
        cells_report["skipped"] = len(cells) - n
        break
      out = self.session.run(source, min(self.timeout, max(1, t_end - time.perf_counter())))
      cells_report["run"] += 1
      if out.status == "ok": self.ok_cells.append(source)
      else: cells_report["errors"].append({"cell": k, "status": out.status, "error": out.error})
      if out.status == "timeout": cells_report["timeouts"] += 1
      if out.status == "dead" or (out.status == "timeout" and not self.session.responsive()):
        self.restart()
        self.replay(t_end)

  def replay(self, t_end: float) -> None:
    """Run again, in a fresh kernel, the student's cells that ran without error."""
    for source in self.ok_cells:
      if time.perf_counter() > t_end: break
      out = self.session.run(source, min(self.timeout, max(1, t_end - time.perf_counter())))
      if out.status == "dead" or (out.status == "timeout" and not self.session.responsive()):
        self.restart()   # a cell that worked once and not now: give up on the replay, keep a live kernel
        break
    self.run_setup()

  def run_setup(self) -> None:
    """The solution's hidden-setup cells (the checks its tests call); a failure shows in the tests that need them."""
    for source in self.setup:
      out = self.session.run(source, self.test_timeout)
      if out.status != "ok": self.report.note = short(f"hidden setup failed: {out.error or out.status}")

  def run(self, cells: list[tuple[int, str]]) -> Report:
    self.start()
    self.run_student(cells)
    self.run_setup()
    replays = 0
    for t in self.tests:
      values_ok = all(x["status"] == "ok" for x in self.report.tasks[t.task]["tests"] if x["kind"] == "values")
      if self.session is None: out = Outcome("skipped", "no kernel")
      elif t.kind != "values" and not values_ok:
        out = Outcome("skipped", f"not run: {t.kind} points count only once the values of this task are right")
      else:
        out = self.session.run(t.source, self.test_timeout)
        if out.status == "timeout" and not self.session.responsive(): out.status = "dead"
      task = self.report.tasks[t.task]
      got = t.points if out.status == "ok" else 0.0
      task["points"] += got
      self.report.total += got
      task["tests"].append({"cell": t.cell, "kind": t.kind, "points": got, "max": t.points, **asdict(out)})
      if out.status == "dead" and t is not self.tests[-1]:
        self.session.close()
        self.session = None
        if replays < MAX_REPLAYS:   # a fresh kernel, in the state the student's notebook leaves it
          replays += 1
          self.restart()
          self.replay(time.perf_counter() + self.budget)
    if self.session is not None: self.session.close()
    return self.report


def student_cells(nb: nbformat.NotebookNode) -> list[tuple[int, str]]:
  """(index in the notebook, code) of every code cell the student wrote (markdown and raw cells are not run)."""
  return [(k, c.source) for k, c in enumerate(nb.cells) if c.get("cell_type") == "code"
          and isinstance(c.get("source"), str) and c.source.strip()]


def grade(student: Path, solution: Path | None = None, timeout: float = 120, test_timeout: float = 60,
          budget: float = 900, only: list[str] | None = None) -> Report:
  solution = solution or find_solution(student)
  if not solution.is_file():
    raise UsageError(f"no solution notebook {solution}: pass --solution (make grade NB=... SOL=...)")
  solution_nb = nbformat.read(solution, as_version=4)
  tests = hidden_tests(solution_nb, str(solution))
  if only:
    known = {t.task.lower(): t.task for t in tests}
    unknown = [o for o in only if o.lower() not in known]
    if unknown: raise UsageError(f"unknown task(s) {unknown}; the tasks are {sorted(set(known.values()))}")
    tests = [t for t in tests if t.task.lower() in {o.lower() for o in only}]
  grader = Grader(student, tests, timeout, test_timeout, budget, setup_cells(solution_nb))
  grader.report.solution = str(solution)
  try: nb = nbformat.read(student, as_version=4)
  except Exception as e:   # not JSON, not a notebook, not there: scored, with every task at 0
    grader.report.note = short(f"the notebook could not be read: {type(e).__name__}: {e}")
    for t in tests: grader.report.tasks[t.task]["tests"].append({"cell": t.cell, "kind": t.kind, "points": 0.0,
                                                                   "max": t.points, "status": "skipped", "error": "",
                                                                   "seconds": 0.0})
    return grader.report
  return grader.run(student_cells(nb))


def advice(task: str, t: dict, stubbed: set[str]) -> list[str]:
  """What a student should do about one task: one line per hidden test that did not score."""
  if t["points"] == t["max"]: return []
  if task in stubbed or all("NotImplementedError" in x["error"] for x in t["tests"] if x["status"] == "error"):
    if any(x["status"] == "error" for x in t["tests"]):
      return [f"not attempted: its stub still raises NotImplementedError(\"{task}\")"]
  out = []
  for x in t["tests"]:
    if x["status"] == "ok": continue
    what = {"values": "values", "structure": "structure", "speed": "speed"}.get(x.get("kind", "values"), "values")
    if x["status"] == "skipped": out.append(f"{what} ({x['max']:g} pt): {x['error'] or 'not run'}")
    elif x["status"] == "timeout": out.append(f"{what} ({x['max']:g} pt): ran past the time limit (an endless loop, "
                                              f"or far too slow)")
    elif x["status"] == "dead": out.append(f"{what} ({x['max']:g} pt): the kernel died (a crash in C: an index out "
                                           f"of bounds?)")
    else:
      ename, _, msg = x["error"].partition(": ")
      if ename == "AssertionError" and not msg: msg = "a check failed (no message)"
      elif ename != "AssertionError": msg = f"{ename}: {msg}"
      out.append(f"{what} ({x['max']:g} pt): {msg}")
  return out


def table(r: Report) -> str:
  """The per-task summary: points, then for every task short of full marks what went wrong."""
  width = max([len(t) for t in r.tasks] + [5])
  stubbed = {e["error"].partition(": ")[2] for e in r.student_cells["errors"]
             if e["error"].startswith("NotImplementedError: ")}
  lines = [f"{'task':<{width}}  {'points':>11}"]
  for name, t in r.tasks.items():
    lines.append(f"{name:<{width}}  {t['points']:5g} / {t['max']:<3g}" + ("  ok" if t["points"] == t["max"] else ""))
    lines += [f"{'':<{width}}    - {line}" for line in advice(name, t, stubbed)]
  lines.append(f"{'total':<{width}}  {r.total:5g} / {r.max:<3g}")
  c = r.student_cells
  lines.append(f"student cells: {c['run']} run, {len(c['errors'])} failed ({c['timeouts']} timed out), "
               f"{c['skipped']} skipped; kernel restarts: {r.kernel_restarts}" + (f"; {r.note}" if r.note else ""))
  for e in c["errors"]:
    if not e["error"].startswith("NotImplementedError"):
      lines.append(f"  cell {e['cell']}: {e['status']}: {e['error']}")
  return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("notebook", type=Path, help="the student's notebook")
  ap.add_argument("--solution", type=Path, help="the solution notebook (default: the one the notebook's metadata "
                  "or title names)")
  ap.add_argument("--json", type=Path, help="also write the result to this file")
  ap.add_argument("--timeout", type=float, default=120, help="seconds each student cell may run (default 120)")
  ap.add_argument("--test-timeout", type=float, default=60, help="seconds each hidden test may run (default 60)")
  ap.add_argument("--budget", type=float, default=900, help="seconds for all the student's cells (default 900)")
  ap.add_argument("--only", action="append", metavar="TASK", help="grade only this task (repeatable)")
  args = ap.parse_args(argv)
  solution = args.solution or find_solution(args.notebook)
  status = 0
  try: report = grade(args.notebook, solution, args.timeout, args.test_timeout, args.budget, args.only)
  except UsageError as e:
    print(f"error: {e}", file=sys.stderr)
    report, status = Report(str(args.notebook), str(solution), note=f"usage error: {e}"), 2
  except Exception as e:   # the kernel could not even be started: nothing was graded
    print(f"error: grading failed: {type(e).__name__}: {e}", file=sys.stderr)
    report, status = Report(str(args.notebook), str(solution), note=short(f"grading failed: {e}")), 1
  if status == 0: print(table(report))
  result = asdict(report)
  if args.json: args.json.write_text(json.dumps(result, indent=1) + "\n")
  print(json.dumps(result), flush=True)
  return status


if __name__ == "__main__":
  sys.exit(main())
