"""scripts/grade.py on small synthetic notebooks: structure and speed points only once a task's values are right,
the per-task summary says what to do, and the solution is found from the notebook's metadata or title."""
import importlib.util
import json
import subprocess
import sys
from pathlib import Path
import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

ROOT = Path(__file__).resolve().parent.parent
GRADER = ROOT / "scripts" / "grade.py"
spec = importlib.util.spec_from_file_location("grade_tool_unit", GRADER)
tool = sys.modules["grade_tool_unit"] = importlib.util.module_from_spec(spec)   # dataclasses look their module up
spec.loader.exec_module(tool)

hidden = lambda src: new_code_cell(src, metadata={"tags": ["hidden-test"]})
SOLUTION = new_notebook(cells=[
  new_markdown_cell("# Week 9 assignment: testing the grader"),
  new_code_cell("def check(x, want):\n  assert x == want, f'expected {want}, found {x}'",
                metadata={"tags": ["hidden-setup"]}),
  new_code_cell("# TASK: double\ndef double(x):\n  ### BEGIN SOLUTION\n  return 2 * x\n  ### END SOLUTION"),
  hidden("# POINTS: double 2\ncheck(double(3), 6)"),
  hidden("# POINTS: double 1 structure\nassert double.__doc__ is None, 'no docstring, please'"),
  new_code_cell("# TASK: halve\ndef halve(x):\n  ### BEGIN SOLUTION\n  return x / 2\n  ### END SOLUTION"),
  hidden("# POINTS: halve 1\ncheck(halve(3), 1.5)"),
  hidden("# POINTS: halve 1 speed\nassert True"),
])


def run(student: Path, *args: str) -> tuple[dict, str]:
  r = subprocess.run([sys.executable, str(GRADER), str(student), *args], capture_output=True, text=True, timeout=300)
  assert r.returncode == 0, r.stdout + r.stderr
  lines = r.stdout.strip().splitlines()
  return json.loads(lines[-1]), "\n".join(lines[:-1])


def test_structure_points_only_with_right_values(tmp_path):
  solution = tmp_path / "week9_grader.ipynb"
  nbformat.write(SOLUTION, solution)
  student = new_notebook(cells=[new_code_cell("def double(x): return x + x"),      # right
                                new_code_cell("def halve(x): return x // 2")])     # wrong values, fast anyway
  nbformat.write(student, tmp_path / "mine.ipynb")
  score, table = run(tmp_path / "mine.ipynb", "--solution", str(solution))
  assert {t: v["points"] for t, v in score["tasks"].items()} == {"double": 3, "halve": 0}
  speed = score["tasks"]["halve"]["tests"][1]
  assert speed["kind"] == "speed" and speed["status"] == "skipped" and "values of this task are right" in speed["error"]
  assert "values (1 pt): expected 1.5, found 1" in table and "speed (1 pt): not run" in table


def test_the_solution_is_found_from_metadata_or_title(tmp_path):
  solutions = tmp_path / "solutions"
  solutions.mkdir()
  nbformat.write(SOLUTION, solutions / "week9_grader.ipynb")
  titled = new_notebook(cells=[new_markdown_cell("# Week 9 assignment: mine")])
  nbformat.write(titled, tmp_path / "renamed.ipynb")
  assert tool.find_solution(tmp_path / "renamed.ipynb", solutions) == solutions / "week9_grader.ipynb"
  named = new_notebook(metadata={"uopc": {"assignment": "week9_grader"}})
  nbformat.write(named, tmp_path / "other.ipynb")
  assert tool.find_solution(tmp_path / "other.ipynb", solutions) == solutions / "week9_grader.ipynb"
  assert tool.find_solution(tmp_path / "nothing.ipynb", solutions) == solutions / "nothing.ipynb"


def test_a_stub_is_reported_as_not_attempted():
  report = tool.Report("mine", "sol", tasks={"double": {"points": 0.0, "max": 3.0, "tests": [
    {"cell": 3, "kind": "values", "points": 0.0, "max": 2.0, "status": "error", "error": "NotImplementedError: double",
     "seconds": 0.0}]}})
  report.student_cells["errors"] = [{"cell": 2, "status": "error", "error": "NotImplementedError: double"}]
  assert 'not attempted: its stub still raises NotImplementedError("double")' in tool.table(report)


def test_a_kernel_that_dies_before_it_answers_is_started_again(tmp_path, monkeypatch):
  """Seen once in CI: 'Kernel died before replying to kernel_info'. The grader starts a kernel up to START_TRIES
  times before it gives up; a student's notebook is not marked down for it."""
  tries = []
  class Flaky:
    def __init__(self, cwd):
      tries.append(cwd)
      if len(tries) < 2: raise RuntimeError("Kernel died before replying to kernel_info")
    def close(self): pass
  monkeypatch.setattr(tool, "Session", Flaky)
  monkeypatch.setattr(tool.time, "sleep", lambda s: None)
  g = tool.Grader(tmp_path / "mine.ipynb", [], 10, 10, 100)
  g.start()
  assert len(tries) == 2 and isinstance(g.session, Flaky) and g.report.kernel_restarts == 0
  class Dead(Flaky):
    def __init__(self, cwd):
      tries.append(cwd)
      raise RuntimeError("Kernel died before replying to kernel_info")
  monkeypatch.setattr(tool, "Session", Dead)
  tries.clear()
  with pytest.raises(RuntimeError, match="Kernel died"): g.start()
  assert len(tries) == tool.START_TRIES and g.session is None
