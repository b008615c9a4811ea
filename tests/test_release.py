"""scripts/release.py: the student's tree has chapters, assignments, uopc and the student's checks, and no solution,
hidden test or grader; its own Makefile has test and check targets."""
import importlib.util
import subprocess
from pathlib import Path
import nbformat
from nbformat.v4 import new_code_cell, new_notebook
import pytest

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("release_tool", ROOT / "scripts" / "release.py")
tool = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tool)


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
  dest = tmp_path_factory.mktemp("release") / "course"
  tool.release(dest)
  return dest


def test_the_student_tree_has_the_course_and_no_solutions(tree):
  for path in ("chapters/ch05_linearizer_and_c.ipynb", "assignments/week3_gemm_by_hand.ipynb", "uopc/tensor.py",
               "examples/flash_attention.py", "tests/test_student_checks.py", "tests/test_ch05_render.py",
               "scripts/notebooks.py", "pyproject.toml", "README.md", "Makefile"):
    assert (tree / path).is_file(), path
  assert not (tree / "solutions").exists()
  for path in ("scripts/grade.py", "scripts/grade_all.py", "scripts/gradelib.py", "scripts/grader",
               "tests/assignment_grading.py"):
    assert not (tree / path).exists(), path
  assert not list((tree / "tests").glob("test_week*")), "the grading tests read solutions/"
  for test in (tree / "tests").glob("*.py"):   # what is left checks uopc and the student's own work
    text = test.read_text()
    assert "grade.py" not in text and '"solutions"' not in text and "solutions/" not in text, test.name
  assert tool.leaks(tree) == []
  assert sorted(p.name for p in (tree / "assignments").glob("*.ipynb")) == \
    sorted(p.name for p in (ROOT / "solutions").glob("*.ipynb"))


def test_the_student_makefile_tests_and_checks_a_week(tree):
  r = subprocess.run(["make", "-n", "check", "WEEK=3"], cwd=tree, capture_output=True, text=True)
  assert r.returncode == 0 and 'tests/test_student_checks.py -k "week3_"' in r.stdout, r.stdout + r.stderr
  r = subprocess.run(["make", "-n", "test"], cwd=tree, capture_output=True, text=True)
  assert r.returncode == 0 and "assignments.py --check" not in r.stdout and "pytest" in r.stdout, r.stdout + r.stderr


def test_a_leak_is_found(tmp_path):
  nb = new_notebook(cells=[new_code_cell("x = 1", metadata={"tags": ["hidden-test"]}),
                           new_code_cell("def f():\n  ### BEGIN SOLUTION\n  return 1\n  ### END SOLUTION")])
  nbformat.write(nb, tmp_path / "leak.ipynb")
  (tmp_path / "leak.py").write_text("  ### BEGIN SOLUTION\n")
  assert tool.leaks(tmp_path) == ["leak.ipynb: cell 0 is a hidden cell", "leak.ipynb: cell 1 has a marker",
                                  "leak.py: a marker line"]


def test_release_refuses_a_folder_in_use(tmp_path):
  (tmp_path / "mine.txt").write_text("a student's work")
  with pytest.raises(SystemExit, match="not empty"): tool.release(tmp_path)
  assert (tmp_path / "mine.txt").exists()


def test_make_release_without_dir_says_how(tmp_path):
  r = subprocess.run(["make", "-s", "release"], cwd=ROOT, capture_output=True, text=True)
  assert r.returncode != 0 and "usage: make release DIR=" in r.stdout
