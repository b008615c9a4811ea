"""A wrong answer to any task of weeks 1-7 fails that task's visible checks, with an AssertionError that names what
is wrong and shows expected against got: what `make check WEEK=n` (tests/test_student_checks.py) reports.

The wrong answers are the ones the grader's tests keep (WRONG of tests/test_week<n>_assignment.py: one per task, the
solution with one region changed). Each is planted into the generated assignment notebook: the task's stub cell is
replaced by the solution's cell with the wrong answer in it. Each week's notebook gets all of its wrong answers at
once and runs once, in a kernel of its own, through test_student_checks' own machinery (each task's cells are judged
separately, so one wrong task does not hide another's failure).
"""
import importlib
import re
from pathlib import Path
import nbformat
import pytest
import test_student_checks as student
from assignment_grading import Wrong
from uopc.runtime.cl import cl_unavailable

ROOT = Path(__file__).resolve().parent.parent
TASK = re.compile(r"^\s*#\s*TASK:\s*(.+?)\s*$", re.M)
MARKERS = ("### BEGIN SOLUTION", "### END SOLUTION")
HIDDEN = {"hidden-test", "hidden-setup", "answer"}   # the cells scripts/assignments.py leaves out
WEEKS = {1: "week1_why_compile", 2: "week2_uops_and_loops", 3: "week3_gemm_by_hand", 4: "week4_kernelize_and_realize",
         5: "week5_tensor_and_fast_kernel", 6: "week6_flash_attention", 7: "week7_gpu_machinery_and_a_gpt"}


def wrongs(week: int) -> list:
  return importlib.import_module(f"test_week{week}_assignment").WRONG


def planted(name: str, wrong: list) -> nbformat.NotebookNode:
  """assignments/<name>.ipynb with the stub of every task that has a wrong answer replaced by that wrong answer."""
  solution = nbformat.read(ROOT / "solutions" / f"{name}.ipynb", as_version=4)
  visible = [c for c in solution.cells if not HIDDEN & set(c.metadata.get("tags", []))]
  nb = nbformat.read(ROOT / "assignments" / f"{name}.ipynb", as_version=4)
  assert len(visible) == len(nb.cells), f"{name}: the assignment's cells do not line up with the solution's"
  used = {id(w): 0 for w in wrong}
  for sol, cell in zip(visible, nb.cells):
    if sol.cell_type != "code": continue
    here = [w for w in wrong if w.task in TASK.findall(sol.source) and w.old in sol.source]
    if not here: continue
    source = sol.source
    for w in here:
      source = source.replace(w.old, w.new)
      used[id(w)] += 1
    cell.source = "\n".join(line for line in source.split("\n") if line.strip() not in MARKERS)
  assert all(n == 1 for n in used.values()), f"{name}: a wrong answer is not in exactly one task cell"
  return nb


@pytest.mark.parametrize("week", sorted(WEEKS))
def test_a_wrong_answer_fails_its_visible_checks_with_a_message(week, tmp_path):
  if week == 6 and (why := cl_unavailable()): pytest.skip(f"week 6's row max kernel runs on device CL: {why}")
  name, wrong = WEEKS[week], wrongs(week)
  path = tmp_path / f"{name}.ipynb"
  nbformat.write(planted(name, wrong), path)
  tasks = student.tasks(path)
  assert set(tasks) == {w.task for w in wrong}, "one wrong answer per task"
  for task in tasks:
    with pytest.raises(pytest.fail.Exception) as failed: student.test_visible_checks(path, task)
    message = str(failed.value)
    assert f"of task {task!r}: AssertionError: " in message, message
    assert "expected" in message and task in message, message


# Week 6 (issue 41): a visible check tests the student's helper on known values before it uses it, so a wrong helper
# is named, not the right answer the helper is then compared with; and exercise 7's checks count the plan's kernels.
HELPERS_WRONG = [
  # a pass counter that counts the row loop too: the old checks said "predicted_passes(8) ...: expected 11, got 10"
  Wrong("count the passes", "if n == n_keys and open_loops:", "if n == n_keys:",
        "count_key_passes(the worked example's toy source, 48): expected 3, got 4"),
  # P stored, but by an unfused plan: its temporaries hold P, its kernels are not the fused plan's and one more
  Wrong("upcast the head", "return out.reshape(q.shape[0], v.shape[1]), make_plan(roots, True, FlashOpt)",
        "return out.reshape(q.shape[0], v.shape[1]), make_plan(roots, False, FlashOpt)",
        "the staged plan's kernels: the fused plan's, and one more that stores P: expected 3, got"),
]


def test_week6_checks_name_the_wrong_helper_and_count_the_kernels(tmp_path):
  if why := cl_unavailable(): pytest.skip(f"week 6's row max kernel runs on device CL: {why}")
  name = WEEKS[6]
  path = tmp_path / f"{name}.ipynb"
  nbformat.write(planted(name, HELPERS_WRONG), path)
  for w in HELPERS_WRONG:
    with pytest.raises(pytest.fail.Exception) as failed: student.test_visible_checks(path, w.task)
    assert f"of task {w.task!r}: AssertionError: {w.says}" in str(failed.value), str(failed.value)


def test_check_messages_name_the_quantity_and_show_expected_against_got(capsys):
  import numpy as np
  from uopc.checks import check, check_below, check_raises
  cases = [
    (lambda: check("cost(1)", {"flops": 4, "io": 2}, {"flops": 4, "io": 3}), "cost(1)['io']: expected 3, got 2"),
    (lambda: check("out", np.array([1.0, np.nan]), np.ones(2), atol=1e-6), "out: NaN in 1 of 2 elements"),
    (lambda: check("out", np.ones((2, 3)), np.ones((3, 2))), "out: expected shape (3, 2), got shape (2, 3)"),
    (lambda: check("C", np.eye(2), np.eye(2) * 2, atol=1e-4), "C: 2 of 4 elements differ; max abs error 1"),
    (lambda: check("decls", ["int acc1;"], []), "decls: expected [], got ['int acc1;']"),
    (lambda: check_below("peak", 5, 4), "peak: expected below 4, got 5"),
    (lambda: check_raises("f()", lambda: None, TypeError), "f(): expected TypeError, got no error"),
    (lambda: check_raises("g()", lambda: int("x"), TypeError, ("arg",)), "g(): expected TypeError whose message"),
  ]
  for fn, says in cases:
    with pytest.raises(AssertionError) as e: fn()
    assert str(e.value).startswith(says), str(e.value)
  check("n", 3, 3.0)
  check("x", np.arange(3) * 0.1, [0, 0.1, 0.2], rtol=1e-12)
  check_raises("h()", lambda: int("x"), ValueError, ("invalid",))
  assert capsys.readouterr().out == "ok: n\nok: x\nok: h()\n"
  def stub(): raise NotImplementedError("task")
  with pytest.raises(NotImplementedError): check_raises("stub()", stub, TypeError)   # not attempted: skipped
