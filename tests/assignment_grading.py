"""What every week's assignment test checks, through scripts/grade.py run as `make grade` runs it:
- the solution scores full marks, with no error in its cells;
- the generated assignment (stubs) scores zero, and every cell that fails, fails with NotImplementedError naming a
  task of the notebook;
- a deliberately wrong answer for every task (the solution with one region changed) scores less than the task's
  points, with a message that names the fault, while the notebook as a whole still earns a partial mark.
A test file supplies the notebook's name and its wrong answers (WRONG); `make_tests` returns the three test functions.
The solution, the stubs and the solution with every wrong answer (tests/grader/graded_class.py reads WRONG) are read
from the class that tests/grader/conftest.py grades once for the run (`make grade-all`, each notebook's whole report
kept): the same grading `make grade` does, not done again per test file.
"""
from __future__ import annotations
import json
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
import nbformat

ROOT = Path(__file__).resolve().parent.parent
GRADER = ROOT / "scripts" / "grade.py"
TASK = re.compile(r"^\s*#\s*TASK:\s*(.+?)\s*$", re.M)
POINTS = re.compile(r"^\s*#\s*POINTS:\s*(.+?)\s+(\d+(?:\.\d+)?)(?:\s+(structure|speed))?\s*$")


@dataclass
class Wrong:
  """A wrong answer: in the cell of `task`, replace `old` (which must occur) by `new`; the grader's messages for
  the task must contain `says`."""
  task: str
  old: str
  new: str
  says: str


def grade(nb: Path, tmp: Path, *args: str, solution: Path | None = None, status: int = 0) -> dict:
  """Run the grader on nb; check its exit status and that its last line is the JSON it wrote (into tmp)."""
  out = tmp / "score.json"
  cmd = [sys.executable, str(GRADER), str(nb), "--json", str(out), *args]
  if solution is not None: cmd += ["--solution", str(solution)]
  r = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
  assert r.returncode == status, r.stdout[-3000:] + r.stderr[-3000:]
  last = json.loads(r.stdout.strip().splitlines()[-1])
  if out.exists(): assert json.loads(out.read_text()) == last
  last["table"] = "\n".join(r.stdout.strip().splitlines()[:-1])
  return last


def points(score: dict) -> dict[str, float]: return {task: t["points"] for task, t in score["tasks"].items()}


def task_points(solution: Path) -> dict[str, float]:
  """task -> the points its hidden tests are worth, read from the solution."""
  out: dict[str, float] = {}
  for c in nbformat.read(solution, as_version=4).cells:
    if "hidden-test" in c.metadata.get("tags", []):
      m = POINTS.match(c.source.lstrip("\n").split("\n", 1)[0])
      out[m.group(1)] = out.get(m.group(1), 0) + float(m.group(2))
  return out


def visible(solution: Path) -> nbformat.NotebookNode:
  """The solution without its hidden cells: what a student who solved everything hands in."""
  nb = nbformat.read(solution, as_version=4)
  nb.cells = [c for c in nb.cells if not {"hidden-test", "hidden-setup", "answer"} & set(c.metadata.get("tags", []))]
  nb.metadata["uopc"] = {"assignment": solution.stem}
  return nb


def with_wrong(solution: Path, wrongs: list[Wrong]) -> nbformat.NotebookNode:
  nb = visible(solution)
  for w in wrongs:
    cells = [c for c in nb.cells if c.cell_type == "code" and w.task in TASK.findall(c.source) and w.old in c.source]
    assert len(cells) == 1, f"{w.task}: {len(cells)} task cells contain {w.old!r}"
    cells[0].source = cells[0].source.replace(w.old, w.new)
  return nb


def make_tests(name: str, wrongs: list[Wrong], n_tasks: int):
  solution = ROOT / "solutions" / f"{name}.ipynb"

  def test_solution_scores_full_marks(graded_class):
    want = task_points(solution)
    sol = nbformat.read(solution, as_version=4)
    tasks = {m for c in sol.cells if c.cell_type == "code" for m in TASK.findall(c.source)}
    assert tasks == set(want) and len(tasks) == n_tasks
    score = graded_class.report(name, "solved")   # the week is found from the notebook's title
    assert points(score) == want, score["table"]
    assert score["total"] == score["max"] == sum(want.values())
    assert score["student_cells"]["errors"] == [] and score["kernel_restarts"] == 0

  def test_stub_scores_zero_and_fails_only_with_its_stubs(graded_class):
    want = task_points(solution)
    score = graded_class.report(name, "stub")   # a name that names no week: the grader reads it from the metadata
    assert score["total"] == 0 and score["max"] == sum(want.values())
    errors = score["student_cells"]["errors"]
    assert errors and score["student_cells"]["timeouts"] == 0
    for e in errors:   # every failing cell of the student notebook fails on a stub naming its task
      ename, _, task = e["error"].partition(": ")
      assert (e["status"], ename) == ("error", "NotImplementedError") and task in want, e
    for task in want: assert f'not attempted: its stub still raises NotImplementedError("{task}")' in score["table"]

  def test_wrong_answers_score_partially_and_say_why(graded_class):
    want = task_points(solution)
    assert {w.task for w in wrongs} == set(want), "one wrong answer per task"
    # the solution with every one of `wrongs` (graded_class.py), graded with the class's fixed seed: which input a
    # planted fault trips over first, and so its message, must not vary between runs
    score = graded_class.report(name, "wrong")
    assert 0 < score["total"] < score["max"], score["table"]
    for w in wrongs:
      t = score["tasks"][w.task]
      assert t["points"] < t["max"], f"{w.task}: the wrong answer scored full marks\n{score['table']}"
      messages = " | ".join(x["error"] for x in t["tests"])
      assert w.says in messages, f"{w.task}: no message says {w.says!r}: {messages}"
      assert w.says in score["table"], score["table"]

  return test_solution_scores_full_marks, test_stub_scores_zero_and_fails_only_with_its_stubs, \
    test_wrong_answers_score_partially_and_say_why
