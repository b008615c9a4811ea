"""scripts/release.py: the student's tree has chapters, assignments, uopc and the student's checks, and no solution,
hidden test or grader; its own Makefile has test and check targets, and its own README names only commands that work
there: the test runs them (the cheap ones for real, the others as a dry run of make)."""
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
import nbformat
from nbformat.v4 import new_code_cell, new_notebook
import pytest

ROOT = Path(__file__).resolve().parents[2]
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
               "examples/flash_attention.py", "tests/course/test_student_checks.py", "tests/spine/test_ch05_render.py",
               "scripts/notebooks.py", "pyproject.toml", "README.md", "Makefile"):
    assert (tree / path).is_file(), path
  assert not (tree / "solutions").exists()
  for path in ("scripts/grade.py", "scripts/grade_all.py", "scripts/gradelib.py", "scripts/grader",
               "tests/assignment_grading.py"):
    assert not (tree / path).exists(), path
  assert not (tree / "tests" / "grader").exists(), "the grading tests read solutions/"
  assert not list((tree / "tests").rglob("test_week*")), "the grading tests read solutions/"
  for test in (tree / "tests").rglob("*.py"):   # what is left checks uopc and the student's own work
    text = test.read_text()
    assert "grade.py" not in text and '"solutions"' not in text and "solutions/" not in text, test.name
  assert tool.leaks(tree) == []
  assert sorted(p.name for p in (tree / "assignments").glob("*.ipynb")) == \
    sorted(p.name for p in (ROOT / "solutions").glob("*.ipynb"))


def test_the_student_makefile_tests_and_checks_a_week(tree):
  r = subprocess.run(["make", "-n", "check", "WEEK=3"], cwd=tree, capture_output=True, text=True)
  assert r.returncode == 0 and 'tests/course/test_student_checks.py -k "week3_"' in r.stdout, r.stdout + r.stderr
  assert "OMP_NUM_THREADS=1" not in r.stdout, "the checks run with threads, as the grader runs the notebook"
  r = subprocess.run(["make", "-n", "check", "WEEK=3", "NB=my copy.ipynb"], cwd=tree, capture_output=True, text=True)
  assert r.returncode == 0 and 'UOPC_CHECK_NB="my copy.ipynb" UOPC_CHECK_WEEK="3"' in r.stdout, r.stdout + r.stderr
  r = subprocess.run(["make", "-n", "grade", "NB=mine.ipynb"], cwd=tree, capture_output=True, text=True)
  assert r.returncode == 0 and "visible checks" in r.stdout and "check NB=" in r.stdout, r.stdout + r.stderr
  r = subprocess.run(["make", "-n", "test"], cwd=tree, capture_output=True, text=True)
  assert r.returncode == 0 and "assignments.py --check" not in r.stdout and "pytest" in r.stdout, r.stdout + r.stderr


def test_no_chapter_or_test_of_the_tree_holds_a_graded_gemm(tree):
  """Week 3's tasks are loop-IR GEMMs (naive, 4x4 tile with strips, B^T): chapter 5 shows its method on a
  matrix-vector product, and the GEMM tests live in tests/grader/test_week3_gemm_loop_ir.py, out of the tree (issue
  43)."""
  files = [*(tree / "chapters").glob("*"), *(tree / "tests").rglob("*.py")]
  texts = {str(p.relative_to(tree)): p.read_text() for p in files if p.suffix in (".py", ".ipynb")}
  for name, text in texts.items():
    for fn in ("gemm_naive", "gemm_tiled", "gemm_block", "gemm_strip", "gemm_naive_bt"):
      assert f"def {fn}(" not in text, f"{name} defines {fn}"


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


# ---- the student tree works as its own README says ----
SETUP_DONE = ("-o", ".venv/.installed-stamp")   # make: take the set-up .venv as it is, install nothing


def readme_commands(tree: Path) -> list[str]:
  """The commands the student README names: the lines of its code blocks (without their comments) and its inline
  code that starts like a command."""
  text = (tree / "README.md").read_text()
  blocks = re.findall(r"```\n(.*?)```", text, re.S)
  lines = [line.split("#")[0].strip() for block in blocks for line in block.splitlines()]
  inline = re.findall(r"`((?:make|\.venv/bin/|DEVICE=)[^`]*)`", text)
  return list(dict.fromkeys(c for c in lines + inline if c))


def test_the_student_readme_is_its_own_and_names_only_what_the_tree_has(tree):
  text = (tree / "README.md").read_text()
  assert text == tool.student_readme(tree) and text != (ROOT / "README.md").read_text()
  for gone in ("solutions", "grade.py", "make release", "make assignments", "make grade-all", "{assignments}"):
    assert gone not in text, gone
  # the assignments mention `make grade NB=...`: the tree has one, which says it runs the visible checks only
  assert "make grade NB=mine.ipynb" in text and "visible checks" in text
  for p in sorted((tree / "assignments").glob("*.ipynb")): assert f"`assignments/{p.name}`" in text
  # the Python both READMEs promise is pyproject's (3.11: cuda-bindings, which chapters 12-13 compile CUDA with)
  assert 'requires-python = ">=3.11"' in (tree / "pyproject.toml").read_text() and sys.version_info >= (3, 11)
  assert "Python 3.11 or later" in text and "Python 3.11 or later" in (ROOT / "README.md").read_text()
  for path in re.findall(r"`([\w./-]+/[\w./-]*)`", text):   # every file or folder it names, but what setup makes
    assert path.startswith((".venv/", "~")) or (tree / path).exists(), path
  makes = [c for c in readme_commands(tree) if c.startswith("make")]
  assert {c.split()[1] for c in makes} >= {"setup", "demo", "test", "check", "notebooks", "clean"}
  for command in makes:   # each is a target of the tree's Makefile (dry run: setup would install)
    r = subprocess.run([*command.split()[:1], "-n", *SETUP_DONE, *command.split()[1:]], cwd=tree, capture_output=True,
                       text=True)
    assert r.returncode == 0, f"{command}: {r.stdout}{r.stderr}"


def test_the_student_readme_commands_run_in_the_tree(tree):
  """The cheap ones for real, with this test's Python as the tree's .venv: make demo, make check WEEK=1 on the stubs
  (every task skipped) and on a wrong answer (failing, with its message), a chapter's tests selected."""
  (tree / ".venv").symlink_to(Path(sys.prefix), target_is_directory=True)
  env = {**os.environ, "PYTHONPATH": str(tree)}
  run = lambda *cmd: subprocess.run(cmd, cwd=tree, capture_output=True, text=True, env=env, timeout=600)
  commands = readme_commands(tree)
  assert "make demo" in commands and "make check WEEK=3" in commands
  r = run("make", *SETUP_DONE, "demo")
  assert r.returncode == 0 and "online" in r.stdout and "err" in r.stdout, r.stdout + r.stderr
  r = run("make", *SETUP_DONE, "check", "WEEK=1")
  assert r.returncode == 0 and "4 skipped" in r.stdout and "not attempted yet" in r.stdout, r.stdout[-3000:]
  assert ".venv/bin/python -m pytest -m ch02" in commands
  r = run(".venv/bin/python", "-m", "pytest", "-p", "no:cacheprovider", "-m", "ch02", "--collect-only", "-q")
  assert r.returncode == 0 and "test_ch02_runtime.py" in r.stdout, r.stdout[-3000:]
  week1 = tree / "assignments" / "week1_why_compile.ipynb"   # a wrong cost table: the output's bytes forgotten
  nb = nbformat.read(week1, as_version=4)
  (cell,) = [c for c in nb.cells if c.cell_type == "code" and "# TASK: cost table" in c.source]
  cell.source = cell.source.replace('raise NotImplementedError("cost table")',
                                    "return dict(sp_bytes=2 * itemsize * N * N, io_bytes=3 * itemsize * N * D, "
                                    "flops=4 * N * N * D, ai_unfused=0, ai_fused=0)")
  nbformat.write(nb, week1)
  r = run("make", *SETUP_DONE, "check", "WEEK=1")
  assert r.returncode != 0 and "FAILED" in r.stdout, r.stdout[-3000:]
  assert "AssertionError: cost(1024) against the worked example's cost_f32(1024)['io_bytes']: expected 1048576, " \
         "got 786432" in r.stdout, r.stdout[-3000:]
