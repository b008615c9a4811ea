"""scripts/grade.py on small synthetic notebooks: structure and speed points only once a task's values are right,
the per-task summary says what to do, the solution comes from the grader's table (the notebook's metadata and title
are only hints), a probe's values come back as plain data only, and a kernel that dies at start is started again."""
import importlib.util
import json
import subprocess
import sys
from pathlib import Path
import nbformat
import numpy as np
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

ROOT = Path(__file__).resolve().parent.parent
GRADER = ROOT / "scripts" / "grade.py"
spec = importlib.util.spec_from_file_location("grade_tool_unit", GRADER)
tool = sys.modules["grade_tool_unit"] = importlib.util.module_from_spec(spec)   # dataclasses look their module up
spec.loader.exec_module(tool)
import kernel  # noqa: E402 (scripts/grader/, put on the path by grade.py)
import records  # noqa: E402
import sandbox  # noqa: E402

needs_sandbox = pytest.mark.skipif(sandbox.available() is not None, reason=str(sandbox.available()))
hidden = lambda src: new_code_cell(src, metadata={"tags": ["hidden-test"]})
SETUP = ("import sys\nfrom pathlib import Path\nimport uopc\n"
         "sys.path.insert(0, str(Path(uopc.__file__).resolve().parents[1] / 'scripts' / 'grader'))\n"
         "from solution_setup import gradelib, record, recorded, seeded\n"
         "def check(x, want): assert x == want, f'expected {want}, found {x}'")
SOLUTION = new_notebook(cells=[
  new_markdown_cell("# Week 9 assignment: testing the grader"),
  new_code_cell(SETUP, metadata={"tags": ["hidden-setup"]}),
  new_code_cell("# TASK: double\ndef double(x):\n  ### BEGIN SOLUTION\n  return 2 * x\n  ### END SOLUTION"),
  hidden("# POINTS: double 2\nrecord('d', double(int(seeded(1).integers(10, 99))))\n# JUDGE\n"
         "check(recorded['d'], 2 * int(seeded(1).integers(10, 99)))"),
  hidden("# POINTS: double 1 structure\nrecord('doc', double.__doc__)\n# JUDGE\n"
         "assert recorded['doc'] is None, 'no docstring, please'"),
  new_code_cell("# TASK: halve\ndef halve(x):\n  ### BEGIN SOLUTION\n  return x / 2\n  ### END SOLUTION"),
  hidden("# POINTS: halve 1\nrecord('h', halve(3))\n# JUDGE\ncheck(recorded['h'], 1.5)"),
  hidden("# POINTS: halve 1 speed\nrecord('x', 1)\n# JUDGE\nassert True"),
])


def run(student: Path, *args: str) -> tuple[dict, str]:
  r = subprocess.run([sys.executable, str(GRADER), str(student), *args], capture_output=True, text=True, timeout=300)
  assert r.returncode == 0, r.stdout + r.stderr
  lines = r.stdout.strip().splitlines()
  return json.loads(lines[-1]), "\n".join(lines[:-1])


@needs_sandbox
def test_structure_points_only_with_right_values(tmp_path):
  solution = tmp_path / "week9_grader.ipynb"
  nbformat.write(SOLUTION, solution)
  student = new_notebook(cells=[new_code_cell("def double(x): return x + x"),      # right
                                new_code_cell("def halve(x): return x // 2"),      # wrong values, fast anyway
                                new_code_cell("class Any:\n  def __eq__(self, o): return True\n"
                                              "def triple(x): return Any()")])
  nbformat.write(student, tmp_path / "mine.ipynb")
  score, table = run(tmp_path / "mine.ipynb", "--solution", str(solution))
  assert {t: v["points"] for t, v in score["tasks"].items()} == {"double": 3, "halve": 0}
  speed = score["tasks"]["halve"]["tests"][1]
  assert speed["kind"] == "speed" and speed["status"] == "skipped" and "values of this task are right" in speed["error"]
  assert "values (1 pt): expected 1.5, found 1" in table and "speed (1 pt): not run" in table


def test_the_solution_comes_from_the_table(tmp_path):
  solutions = tmp_path / "solutions"
  solutions.mkdir()
  nbformat.write(SOLUTION, solutions / "week9_grader.ipynb")
  nbformat.write(SOLUTION, tmp_path / "week8_elsewhere.ipynb")   # not in the table: never chosen by a notebook
  titled = new_notebook(cells=[new_markdown_cell("# Week 9 assignment: mine")])
  nbformat.write(titled, tmp_path / "renamed.ipynb")
  assert tool.find_solution(tmp_path / "renamed.ipynb", solutions) == solutions / "week9_grader.ipynb"
  named = new_notebook(metadata={"uopc": {"assignment": "week9_grader"}})
  nbformat.write(named, tmp_path / "other.ipynb")
  assert tool.find_solution(tmp_path / "other.ipynb", solutions) == solutions / "week9_grader.ipynb"
  for escape in ("../week8_elsewhere", str(tmp_path / "week8_elsewhere"), "../outputs/x"):
    nbformat.write(new_notebook(metadata={"uopc": {"assignment": escape}}), tmp_path / "evil.ipynb")
    assert tool.find_solution(tmp_path / "evil.ipynb", solutions) is None
  nbformat.write(new_notebook(cells=[new_markdown_cell("# Week 8: mine")]), tmp_path / "week8.ipynb")
  assert tool.find_solution(tmp_path / "week8.ipynb", solutions) is None   # no week 8 in the table
  assert tool.find_solution(tmp_path / "nothing.ipynb", solutions) is None
  assert set(tool.solution_table()) == set(range(1, 8))


def test_a_value_comes_back_as_plain_data_or_not_at_all(tmp_path):
  """What a probe records is read as JSON and .npy without pickle: an object of the student's arrives as NotPlain,
  which equals nothing, and a file the student planted as a pickle, a link or a huge file is not read."""
  class Liar:
    def __eq__(self, other): return True
  class Int(int): pass
  for k, value in enumerate([np.arange(3.0), (1, "x", [np.ones(2), None]), {"k": 2.5}]):
    records.write(tmp_path, k, f"v{k}", value)
  records.write(tmp_path, 3, "liar", Liar())
  records.write(tmp_path, 4, "int", Int(3))
  records.write(tmp_path, 5, "objects", np.array([Liar()], dtype=object))
  np.save(tmp_path / "r6_0.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)   # a pickle: never loaded
  (tmp_path / "r6.json").write_text(json.dumps({"name": "pickled", "value": {"__npy__": 0}}))
  (tmp_path / "r7.json").symlink_to(tmp_path / "r0.json")
  got = records.read(tmp_path)
  assert np.array_equal(got["v0"], np.arange(3.0)) and got["v1"][:2] == (1, "x") and got["v2"] == {"k": 2.5}
  for name in ("liar", "int", "objects", "pickled"):
    assert isinstance(got[name], records.NotPlain) and got[name] != got[name], name
  assert len(got) == 7
  with pytest.raises(AssertionError, match="nope: no value was recorded"): records.Recorded(got)["nope"]


def test_every_hidden_test_of_the_course_is_judged_outside_the_sandbox():
  """A hidden test without `# JUDGE` is judged inside the sandbox (its probe finishing is its pass), which a student's
  code could fake: the course's solutions have none, and no probe holds a check or an expected value."""
  for solution in sorted((ROOT / "solutions").glob("week*.ipynb")):
    for t in tool.hidden_tests(nbformat.read(solution, as_version=4), str(solution)):
      assert t.judge is not None and t.judge.strip(), f"{solution.name}, cell {t.cell}: no judge"
      assert "gradelib" not in t.probe and "assert" not in t.probe, f"{solution.name}, cell {t.cell}: a check"


def test_a_stub_is_reported_as_not_attempted():
  report = tool.Report("mine", "sol", tasks={"double": {"points": 0.0, "max": 3.0, "tests": [
    {"cell": 3, "kind": "values", "points": 0.0, "max": 2.0, "status": "error", "error": "NotImplementedError: double",
     "seconds": 0.0}]}})
  report.student_cells["errors"] = [{"cell": 2, "status": "error", "error": "NotImplementedError: double"}]
  assert 'not attempted: its stub still raises NotImplementedError("double")' in tool.table(report)


def test_a_kernel_that_dies_before_it_answers_is_started_again(tmp_path, monkeypatch):
  """Seen once in CI: 'Kernel died before replying to kernel_info'. The runner starts a kernel up to START_TRIES
  times before it gives up; a student's notebook is not marked down for it."""
  tries = []
  class Flaky:
    def __init__(self, cwd):
      tries.append(cwd)
      if len(tries) < 2: raise RuntimeError("Kernel died before replying to kernel_info")
    def close(self): pass
  monkeypatch.setattr(kernel.time, "sleep", lambda s: None)
  k = kernel.Kernel(tmp_path, 10, 100, [], session=Flaky)
  k.start()
  assert len(tries) == 2 and isinstance(k.session, Flaky) and k.restarts == 0
  class Dead(Flaky):
    def __init__(self, cwd):
      tries.append(cwd)
      raise RuntimeError("Kernel died before replying to kernel_info")
  k.session_cls = Dead
  tries.clear()
  with pytest.raises(RuntimeError, match="Kernel died"): k.start()
  assert len(tries) == kernel.START_TRIES and k.session is None


SCALE = "void scale(const float* x, float* out, int n) {{ for (int i = 0; i < n; i++) out[i] = {body}; }}"
TIMED = ("# POINTS: scale 1 speed\nrecord('src', scale_src())\n# JUDGE\n"
         "_t = time_kernels(recorded['src'], 'scale', [['f32', [{n}]], ['zeros', [{n}]], ['int', {n}]], outputs=[1], "
         "reference={ref!r}, reps=3)\nassert 'student' in _t, _t.get('error')")
SPEED_SOLUTION = new_notebook(cells=[
  new_markdown_cell("# Week 9 assignment: timing in one sandbox"),
  new_code_cell(SETUP + "\nfrom solution_setup import time_kernels", metadata={"tags": ["hidden-setup"]}),
  new_code_cell("# TASK: scale\ndef scale_src():\n  ### BEGIN SOLUTION\n  return " + repr(SCALE.format(body="2 * x[i]"))
                + "\n  ### END SOLUTION"),
  hidden("# POINTS: scale 1\nrecord('src', scale_src())\n# JUDGE\nassert 'void scale(' in recorded['src']"),
  hidden(TIMED.format(n=4096, ref=SCALE.format(body="x[i] + x[i]"))),
  hidden(TIMED.format(n=1 << 16, ref=SCALE.format(body="x[i] * 2.0f"))),
])


@needs_sandbox
def test_every_speed_test_of_a_notebook_is_timed_in_one_sandbox(tmp_path):
  solution = tmp_path / "week9_speed.ipynb"
  nbformat.write(SPEED_SOLUTION, solution)
  for name, body, points in (("fast", "x[i] * 2", 3), ("include", "2 * x[i];\n#include <stdio.h>\n", 1)):
    nbformat.write(new_notebook(cells=[new_code_cell(f"def scale_src(): return {SCALE.format(body=body)!r}")]),
                   tmp_path / f"{name}.ipynb")
    score, table = run(tmp_path / f"{name}.ipynb", "--solution", str(solution))
    tests = score["tasks"]["scale"]["tests"]
    assert score["total"] == points and [t["kind"] for t in tests] == ["values", "speed", "speed"], table
    if name == "fast":   # both timed, in one sandbox
      assert [t["status"] for t in tests] == ["ok"] * 3 and score["phases"]["speed_runs"] == 1, score
    else:   # refused before it is built
      assert all("includes 'stdio.h'" in t["error"] for t in tests[1:]), score


@needs_sandbox
def test_a_speed_test_that_misses_its_bar_is_timed_twice_more_and_still_fails(tmp_path):
  """Other work on the grading machine only slows a kernel down, so a missed bar is timed again (twice at most) and
  the best round counts; a kernel that can never meet it still scores 0, after exactly three timing sandboxes."""
  never = TIMED.format(n=4096, ref=SCALE.format(body="x[i] + x[i]")).replace(
    "assert 'student' in _t, _t.get('error')",
    "assert _t['student'] * 1e6 < _t['reference'], 'not a million times faster'")
  solution = tmp_path / "week9_speed.ipynb"
  nbformat.write(new_notebook(cells=SPEED_SOLUTION.cells[:3] + [hidden(never)]), solution)
  nbformat.write(new_notebook(cells=[new_code_cell(f"def scale_src(): return {SCALE.format(body='x[i] * 2')!r}")]),
                 tmp_path / "mine.ipynb")
  score, table = run(tmp_path / "mine.ipynb", "--solution", str(solution))
  speed = score["tasks"]["scale"]["tests"][-1]
  assert (speed["status"], speed["points"]) == ("error", 0.0) and "not a million times faster" in speed["error"], table
  assert score["phases"]["speed_runs"] == 3, score["phases"]
