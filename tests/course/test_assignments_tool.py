"""scripts/assignments.py: a solution notebook becomes a student notebook (stubs, no hidden tests, no outputs)."""
import importlib.util
import subprocess
import sys
from pathlib import Path
import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output
import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "assignments.py"
spec = importlib.util.spec_from_file_location("assignments_tool", SCRIPT)
tool = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tool)

ADD_SOLVED = """def add(a, b):
  ### BEGIN SOLUTION
  return a + b
  ### END SOLUTION"""

MUL_SOLVED = """# TASK: multiply
def mul(a, b):
  if a == 0:
    ### BEGIN SOLUTION
    return 0
    ### END SOLUTION
  ### BEGIN SOLUTION
  return a * b
  ### END SOLUTION
print(mul(2, 3))"""


def executed(source, text, count):
  cell = new_code_cell(source, execution_count=count)
  cell.outputs = [new_output("stream", name="stdout", text=text)]
  return cell


def solution_notebook() -> nbformat.NotebookNode:
  nb = new_notebook()
  nb.cells = [
    new_markdown_cell("# Week 0\nSome prose.\n```python\n# not a heading\n```"),
    new_markdown_cell("## Task 1: add two numbers"),
    executed(ADD_SOLVED, "", 1),
    executed(MUL_SOLVED, "6\n", 2),
    executed("assert add(1, 2) == 3", "", 3),
    new_code_cell("assert add(2, 2) == 4  # the grader's", execution_count=4, metadata={"tags": ["hidden-test"]}),
  ]
  return nb


@pytest.fixture
def dirs(tmp_path):
  solutions, assignments = tmp_path / "solutions", tmp_path / "assignments"
  solutions.mkdir()
  nbformat.write(solution_notebook(), solutions / "week0.ipynb")
  return solutions, assignments


def run(*args):
  """The command line, as `make assignments` runs it (a separate process: the exit code is what CI sees)."""
  return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True)


def check(capsys, solutions, assignments):
  """--check in this process (faster than a subprocess); returns (exit code, stderr)."""
  rc = tool.main(["--check", "--solutions", str(solutions), "--assignments", str(assignments)])
  return rc, capsys.readouterr().err


def test_stub_names_the_task_and_keeps_indentation():
  nb = tool.make_assignment(solution_notebook(), "week0")
  code = [c.source for c in nb.cells if c.cell_type == "code"]
  assert code[0] == 'def add(a, b):\n  raise NotImplementedError("Task 1: add two numbers")'
  assert code[1] == ('# TASK: multiply\ndef mul(a, b):\n  if a == 0:\n    raise NotImplementedError("multiply")\n'
                     '  raise NotImplementedError("multiply")\nprint(mul(2, 3))')
  ns = {}
  exec(code[0], ns)
  with pytest.raises(NotImplementedError, match="Task 1: add two numbers"): ns["add"](1, 2)


def test_hidden_tests_dropped_outputs_cleared():
  nb = tool.make_assignment(solution_notebook(), "week0")
  assert len(nb.cells) == 5 and not any("hidden-test" in c.metadata.get("tags", []) for c in nb.cells)
  assert "the grader's" not in nbformat.writes(nb)
  for c in nb.cells:
    if c.cell_type == "code": assert c.outputs == [] and c.execution_count is None
  assert nb.cells[4].source == "assert add(1, 2) == 3"   # visible tests stay


def test_heading_falls_back_to_notebook_name():
  nb = new_notebook(cells=[new_code_cell("x = 1\n### BEGIN SOLUTION\nx = 2\n### END SOLUTION")])
  assert tool.make_assignment(nb, "week9").cells[0].source == 'x = 1\nraise NotImplementedError("week9")'


@pytest.mark.parametrize("source", ["### BEGIN SOLUTION\nx = 1", "x = 1\n### END SOLUTION",
                                    "### BEGIN SOLUTION\n### BEGIN SOLUTION\n### END SOLUTION"])
def test_unbalanced_markers_raise(source):
  with pytest.raises(tool.AssignmentError): tool.make_assignment(new_notebook(cells=[new_code_cell(source)]), "w")


def test_generate_is_deterministic_and_check_passes(dirs):
  solutions, assignments = dirs
  r = run("--solutions", solutions, "--assignments", assignments)
  assert r.returncode == 0, r.stderr
  first = (assignments / "week0.ipynb").read_bytes()
  nbformat.validate(nbformat.reads(first.decode(), as_version=4))
  (assignments / "week0.ipynb").unlink()
  tool.generate(solutions, assignments)
  assert (assignments / "week0.ipynb").read_bytes() == first
  r = run("--check", "--solutions", solutions, "--assignments", assignments)
  assert r.returncode == 0, r.stderr


def test_check_detects_stale_missing_and_orphaned(dirs, capsys):
  solutions, assignments = dirs
  rc, err = check(capsys, solutions, assignments)
  assert rc == 1 and "week0.ipynb: missing" in err
  tool.generate(solutions, assignments)
  # the solution changes, the assignment does not
  nb = nbformat.read(solutions / "week0.ipynb", as_version=4)
  nb.cells[4].source = "assert add(1, 2) == 3 and add(0, 0) == 0"
  nbformat.write(nb, solutions / "week0.ipynb")
  rc, err = check(capsys, solutions, assignments)
  assert rc == 1 and "week0.ipynb: stale (differs" in err
  tool.generate(solutions, assignments)
  assert tool.stale(solutions, assignments) == []
  # an assignment whose solution was deleted
  (solutions / "week0.ipynb").rename(solutions / "week1.ipynb")
  rc, err = check(capsys, solutions, assignments)
  assert rc == 1 and "week0.ipynb: stale (no solution" in err and "week1.ipynb: missing" in err
  tool.generate(solutions, assignments)
  assert sorted(p.name for p in assignments.iterdir()) == ["week1.ipynb"]


def test_empty_or_missing_solutions_pass(tmp_path, capsys):
  (tmp_path / "solutions").mkdir()
  for solutions in (tmp_path / "solutions", tmp_path / "nowhere"):
    assert check(capsys, solutions, tmp_path / "assignments") == (0, "")


def test_hidden_setup_dropped_and_origin_recorded():
  nb = solution_notebook()
  nb.cells.insert(2, new_code_cell("import gradelib", metadata={"tags": ["hidden-setup"]}))
  nb.cells.append(new_markdown_cell("**Answer.** 42", metadata={"tags": ["answer"]}))
  out = tool.make_assignment(nb, "week0")
  assert "import gradelib" not in nbformat.writes(out) and out.metadata["uopc"] == {"assignment": "week0"}
  # the answer cell's text is gone from every cell (cell ids are random hex, so search sources, not the file)
  assert not any("42" in cell.source for cell in out.cells)


def test_nbgrader_metadata_marks_solution_and_grade_cells():
  nb = solution_notebook()
  nb.cells[5].source = "# POINTS: add 2 structure\nassert add(2, 2) == 4"
  meta = tool.nbgrader_metadata(nb)
  assert sorted(meta) == [2, 3, 5]   # the two solution cells and the hidden test; prose and visible checks: none
  assert meta[2]["solution"] and meta[2]["grade_id"] == "task-1-add-two-numbers-solution-1"
  assert meta[3]["grade_id"] == "multiply-solution-1"
  assert meta[5] == {"grade": True, "solution": False, "locked": True, "schema_version": 3, "points": 2.0,
                     "grade_id": "add-structure-1"}
  assert tool.annotate(nb).cells[5].metadata["nbgrader"] == meta[5] and "nbgrader" not in nb.cells[4].metadata
