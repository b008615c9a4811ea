"""No chapter works an exercise's answer: a chapter teaches the neighbouring problem, and the assignment asks for the
one it leaves open (issue 49, item 4).

Two ways a chapter can give an answer away, each tested from the sources as they stand:
  - its code holds the solution's lines: no line of a task's solution region (comments and spacing aside, trivial
    lines aside) appears in the chapter that the task is numbered after;
  - it computes the answer: chapter 13.2's bank-conflict counts are evaluated from its own `conflict(...)` calls, and
    none may read week 7's pattern, the A tile's `ly * rows_per_item * row` for any row and rows an item.

In the instructor's wing (tests/grader/), which the student's tree leaves out: it reads solutions/.
"""
from __future__ import annotations
import ast
import contextlib
import io
import re
from pathlib import Path
import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
SOLUTION = re.compile(r"### BEGIN SOLUTION\n(.*?)### END SOLUTION", re.S)
TASK = re.compile(r"^# TASK: (.+)$", re.M)
# (solution, the chapter its exercises come from): every task of the week against that chapter
PAIRS = [("week5_tensor_and_fast_kernel", "ch09_the_tensor"), ("week5_tensor_and_fast_kernel", "ch10_one_fast_kernel")]
SHORTEST = 20   # characters without spaces: `F, C, kh, kw = w.shape` and the like are anyone's first line


def code_lines(text: str) -> set[str]:
  """The statements of a source, comments and all spacing removed: what a paste keeps."""
  out = set()
  for line in text.splitlines():
    code = re.sub(r"\s+", "", line.split("#", 1)[0])
    if len(code) >= SHORTEST: out.add(code)
  return out


def solution_regions(text: str) -> dict[str, str]:
  """{task name: the solution regions of its cell}: a task's cell runs from its `# TASK:` to the next cell."""
  regions = {}
  for cell in text.split("\n# %%"):
    if (task := TASK.search(cell)): regions[task.group(1).strip()] = "".join(SOLUTION.findall(cell))
  return regions


@pytest.mark.parametrize("solution, chapter", PAIRS)
def test_no_solution_line_in_the_chapter(solution, chapter):
  regions = solution_regions((ROOT / "solutions" / f"{solution}.py").read_text())
  assert regions, f"{solution}: no task cell with a solution region found"
  chapter_lines = code_lines((ROOT / "chapters" / f"{chapter}.py").read_text())
  for task, region in regions.items():
    shared = sorted(code_lines(region) & chapter_lines)
    assert not shared, f"{chapter} holds lines of {solution}'s answer to '{task}': {shared}"


def test_the_conv_answer_is_a_line_the_check_would_catch():
  """The check above can fail: week 5's conv2d region has lines long enough to be compared."""
  regions = solution_regions((ROOT / "solutions" / "week5_tensor_and_fast_kernel.py").read_text())
  assert len(code_lines(regions["convolution as a view"])) >= 4


def week7_patterns() -> list[np.ndarray]:
  """Week 7's A read, `ly * rows_per_item * row` for tid = ly * 8 + lx, from 0: every case its task can ask."""
  ly = np.arange(32) // 8
  return [ly * rows_per_item * row for row in range(1, 129) for rows_per_item in (1, 2, 4, 8)]


def chapter13_reads() -> list[tuple[str, np.ndarray]]:
  """Each `conflict(...)` call of chapter 13, its address expression evaluated in 13.2's own cell."""
  source = (ROOT / "chapters" / "ch13_gpu_machinery.py").read_text()
  cell = next(c for c in source.split("\n# %%") if "def conflict(" in c)
  namespace = {"np": np}
  with contextlib.redirect_stdout(io.StringIO()):   # its prints are the notebook's, not the test's
    exec(compile(cell.split("\n", 1)[1], "ch13 13.2", "exec"), namespace)
  calls = [node for node in ast.walk(ast.parse(source))
           if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "conflict"]
  return [(ast.unparse(call.args[0]), np.asarray(eval(ast.unparse(call.args[0]), namespace))) for call in calls]


def test_chapter13_counts_another_read_than_week7():
  reads = chapter13_reads()
  assert len(reads) >= 2, "chapter 13.2 computes no bank conflicts: this test reads its conflict(...) calls"
  for text, addresses in reads:
    shifted = addresses - addresses.min()   # an offset (+ k, + c) moves every address alike: the same banks
    for pattern in week7_patterns():
      assert not np.array_equal(shifted, pattern), f"chapter 13.2 counts week 7's A read: conflict({text})"


def test_the_week7_check_can_fail():
  """The pattern list holds the chapter's old A read, `(ly * 4) * 8`, and its padded `(ly * 4) * 9`."""
  ly = np.arange(32) // 8
  patterns = week7_patterns()
  for old in ((ly * 4) * 8, (ly * 4) * 9):
    assert any(np.array_equal(old, p) for p in patterns)
