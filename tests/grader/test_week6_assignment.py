"""The week-6 assignment and its grader: the solution scores full marks, the generated student notebook zero (and
fails only with its stubs), one solved exercise exactly its points; hangs, syntax errors, dead kernels and
unreadable files are scored, never crash the grader.

Each test runs scripts/grade.py as `make grade` does (a separate process: its exit status and last line are what a
grader sees). The solution is graded once per session; the others use --only or short time limits to stay fast.
"""
import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path
import nbformat
from nbformat.v4 import new_code_cell, new_notebook
import pytest
from assignment_grading import Wrong, make_tests
from uopc.runtime.cl import cl_unavailable

ROOT = Path(__file__).resolve().parents[2]
NAME = "week6_flash_attention.ipynb"
SOLUTION, ASSIGNMENT = ROOT / "solutions" / NAME, ROOT / "assignments" / NAME
GRADER = ROOT / "scripts" / "grade.py"
TASK = re.compile(r"^\s*#\s*TASK:\s*(.+?)\s*$", re.M)
HANG = "import time\nwhile True:\n  time.sleep(0.1)"
# its row max kernel runs on device CL: where that cannot run (uopc.runtime.cl.cl_unavailable), nothing here can score
pytestmark = [pytest.mark.week6, pytest.mark.skipif(bool(cl_unavailable()), reason=str(cl_unavailable()))]


def grade(nb: Path, tmp: Path, *args: str, solution: Path = SOLUTION, status: int = 0) -> dict:
  """Run the grader on nb; check its exit status and that its last line is the JSON it wrote (into tmp)."""
  out = tmp / "score.json"
  r = subprocess.run([sys.executable, str(GRADER), str(nb), "--solution", str(solution), "--json", str(out), *args],
                     capture_output=True, text=True, timeout=900)
  assert r.returncode == status, r.stdout[-3000:] + r.stderr[-3000:]
  last = json.loads(r.stdout.strip().splitlines()[-1])
  if out.exists(): assert json.loads(out.read_text()) == last
  return last


def points(score: dict) -> dict[str, float]: return {task: t["points"] for task, t in score["tasks"].items()}


def with_solved(tasks: set[str]) -> nbformat.NotebookNode:
  """The student notebook with the solution's cells put back for `tasks` (cells line up: the assignment is the
  solution without its hidden tests)."""
  sol, asg = nbformat.read(SOLUTION, as_version=4), nbformat.read(ASSIGNMENT, as_version=4)
  visible = [c for c in sol.cells if not {"hidden-test", "hidden-setup", "answer"} & set(c.metadata.get("tags", []))]
  assert len(visible) == len(asg.cells)
  for s, a in zip(visible, asg.cells):
    m = TASK.search(s.source) if s.cell_type == "code" else None
    if m and m.group(1) in tasks: a.source = s.source
  return asg


def write(nb: nbformat.NotebookNode, tmp_path: Path) -> Path:
  path = tmp_path / NAME
  nbformat.write(nb, path)
  return path


@pytest.fixture(scope="module")
def solution_score(graded_class) -> dict:
  return graded_class.report(SOLUTION.stem, "solved")   # the slowest grading: once per run, in the class


@pytest.fixture(scope="module")
def task_points() -> dict[str, float]:
  """task -> the points its hidden tests are worth, read from the solution."""
  out: dict[str, float] = {}
  for c in nbformat.read(SOLUTION, as_version=4).cells:
    if "hidden-test" in c.metadata.get("tags", []):
      task, pts = re.match(r"#\s*POINTS:\s*(.+?)\s+(\d+)", c.source).groups()
      out[task] = out.get(task, 0) + float(pts)
  return out


def test_every_exercise_has_a_task_and_a_hidden_test(task_points):
  sol = nbformat.read(SOLUTION, as_version=4)
  tasks = {m.group(1) for c in sol.cells if c.cell_type == "code" for m in TASK.finditer(c.source)}
  assert tasks == set(task_points) and len(tasks) == 10   # chapter 11: 7 (6 and 9 are optional), chapter 12: 3


def test_solution_scores_full_marks(solution_score, task_points):
  assert points(solution_score) == task_points
  assert solution_score["total"] == solution_score["max"] == sum(task_points.values())
  assert solution_score["student_cells"]["errors"] == [] and solution_score["kernel_restarts"] == 0


def test_assignment_scores_zero_and_fails_only_with_its_stubs(graded_class, task_points):
  score = graded_class.report(SOLUTION.stem, "stub")
  assert score["total"] == 0 and score["max"] == sum(task_points.values())
  errors = score["student_cells"]["errors"]
  assert errors and score["student_cells"]["timeouts"] == 0
  for e in errors:   # every failing cell of the student notebook fails on a stub naming its task
    ename, _, task = e["error"].partition(": ")
    assert (e["status"], ename) == ("error", "NotImplementedError") and task in task_points, e


def test_one_solved_exercise_scores_exactly_its_points(tmp_path, task_points):
  score = grade(write(with_solved({"merge two states"}), tmp_path), tmp_path)
  assert points(score) == {t: (p if t == "merge two states" else 0) for t, p in task_points.items()}


def test_hanging_cell_is_stopped_and_grading_goes_on(tmp_path):
  nb = with_solved({"size the matrices"})
  first_code = next(k for k, c in enumerate(nb.cells) if c.cell_type == "code")
  nb.cells.insert(first_code + 1, new_code_cell(HANG))
  score = grade(write(nb, tmp_path), tmp_path, "--only", "size the matrices", "--timeout", "10")
  assert points(score) == {"size the matrices": 1}
  assert score["kernel_restarts"] == 0   # the interrupt stopped the loop: same kernel
  hang = {"cell": first_code + 1, "status": "timeout", "error": "Timeout: ran past 10 s"}
  assert hang in score["student_cells"]["errors"]


def test_syntax_error_is_scored(tmp_path):
  nb = with_solved({"merge two states"})
  nb.cells.append(new_code_cell("def broken(:\n  pass"))
  score = grade(write(nb, tmp_path), tmp_path, "--only", "merge two states")
  assert points(score) == {"merge two states": 2}
  assert any(e["error"].startswith("SyntaxError") for e in score["student_cells"]["errors"])


def test_dead_and_stuck_kernels_are_replaced(tmp_path):
  """A cell that ignores interrupts, a hidden test that kills the kernel: the grader replaces the kernel, re-runs
  the cells that worked, and scores the rest."""
  tagged = lambda src: new_code_cell(src, metadata={"tags": ["hidden-test"]})
  solution = tmp_path / "solution.ipynb"
  nbformat.write(new_notebook(cells=[
    tagged("# POINTS: add 2\nassert add(1, 2) == 3"), tagged("# POINTS: exit 1\nquit_kernel()"),
    tagged(f"# POINTS: hang 1\n{HANG}"), tagged("# POINTS: add 1\nassert add(2, 2) == 4")]), solution)
  student = tmp_path / "student.ipynb"
  nbformat.write(new_notebook(cells=[
    new_code_cell("def add(a, b): return a + b"),
    new_code_cell("import time\nwhile True:\n  try: time.sleep(0.1)\n  except KeyboardInterrupt: pass"),
    new_code_cell("import os\ndef quit_kernel(): os._exit(3)"),
    new_code_cell("for _ in range(5_000): print('garbage ' * 20)")]), student)
  score = grade(student, tmp_path, "--timeout", "3", "--test-timeout", "3", solution=solution)
  assert points(score) == {"add": 3, "exit": 0, "hang": 0}
  statuses = [t["status"] for task in score["tasks"].values() for t in task["tests"]]
  assert sorted(statuses) == ["dead", "ok", "ok", "timeout"] and score["kernel_restarts"] >= 2   # stuck, then dead


def test_unreadable_notebook_and_usage_errors(tmp_path, capsys):
  """No kernel is needed for these: the grader's main() in this process (faster than a subprocess)."""
  spec = importlib.util.spec_from_file_location("grade_tool", GRADER)
  tool = sys.modules["grade_tool"] = importlib.util.module_from_spec(spec)   # dataclasses look their module up
  spec.loader.exec_module(tool)
  def main(*args: str) -> tuple[int, dict]:
    rc = tool.main([*args])
    return rc, json.loads(capsys.readouterr().out.strip().splitlines()[-1])
  garbage = tmp_path / NAME
  garbage.write_bytes(b"\x00not a notebook{")
  rc, score = main(str(garbage), "--solution", str(SOLUTION))
  assert rc == 0 and score["total"] == 0 and score["max"] > 0 and "could not be read" in score["note"]
  rc, score = main(str(garbage), "--solution", str(SOLUTION), "--only", "no such task")
  assert rc == 2 and score["note"].startswith("usage error")
  rc, score = main(str(garbage), "--solution", str(tmp_path / "missing.ipynb"))
  assert rc == 2 and score["total"] == 0


WRONG = [
  Wrong("size the matrices", "return N * N * itemsize * heads * batch", "return N * N * itemsize * heads",
        "score_bytes(8192, heads=12, batch=8): expected 25769803776, found 3221225472"),
  # the two softmax passes forgotten; count_key_passes is right, so the task keeps its 2 points for it
  Wrong("count the passes", "return 2 + D // min(upcast, D)", "return D // min(upcast, D)",
        "predicted_passes(upcast) for upcast 8, 16, 32, 64 at D = 64: expected [10, 6, 4, 3], found [8, 4, 2, 1]"),
  Wrong("merge two states", "l1 * c1 + l2 * c2", "l1 * c1 + l2",
        "merge of keys 0..12 and 13..39 (o a vector of 8): l: max abs error"),
  # -inf as the masked score: the rows whose first keys are masked become NaN
  Wrong("causal mask", "masked = -1e30 if masked is None else masked",
        "masked = -math.inf if masked is None else masked",
        "with keep j >= i (each row's first keys masked): NaN in rows"),
  # the case: forgetting to rescale o, named by the grader
  Wrong("query blocking", "Od.index(b * D + d).load() * corr[b] + p[b] * vjd",
        "Od.index(b * D + d).load() + p[b] * vjd",
        "It is what a kernel computes when o is never rescaled"),
  # right values, P not staged: the structure point says so
  Wrong("upcast the head", "roots = stage_broadcast_compute([attention(Tensor(q), Tensor(k), Tensor(v)).uop])",
        "roots = [attention(Tensor(q), Tensor(k), Tensor(v)).uop]", "none is P (N x N = 16384), so P was not staged"),
  # a test on the very inputs that hide the bug
  Wrong("find the bug", "k *= np.linspace(0.1, 3, 64, dtype=np.float32)[:, None]",
        "q, k, v = bug_hiding_inputs(64, 16)",
        "does not catch the missing rescale of o: raised nothing"),
  # chapter 12: a block that ignores what the earlier axes left of the limit
  Wrong("block sizes", "    left //= b\n", "",
        "block_sizes([1024, 1024], 256, min_groups=4): expected [256, 1], found [256, 256]"),
  Wrong("warp transactions", "index(w * warp + lane) * itemsize // segment", "index(w * warp + lane) // segment",
        "warp_transactions for x[2*i], 4 warps of 4-byte elements: expected 8, found 4"),
  # the maximum started at 0, not -INFINITY: a row whose elements are all negative gets 0
  Wrong("row max kernel", "float m = -INFINITY;", "float m = 0.0f;",
        "row_max on a (7, 1024) matrix, work-groups of 128"),
]

test_wrong_answers_score_partially_and_say_why = make_tests(NAME.removesuffix(".ipynb"), WRONG, n_tasks=10)[2]
