"""Write the tree a student gets: chapters, assignments, uopc, examples, the tests that check the student's own work;
no solutions, no hidden tests, no grader.

  python scripts/release.py /tmp/course          # the folder must not exist, or be empty
  python scripts/release.py /tmp/course --force  # replace what is there

What goes in: the files git tracks (so no build output, caches or local scratch), minus solutions/, the grader
(scripts/grade.py, scripts/grade_all.py, scripts/gradelib.py, scripts/grader/) and the tests of the instructor's
tools (the grading tests of every week, the grader's, the assignment generator's, the nbgrader metadata's, this
script's). The tree gets its own Makefile
(STUDENT_MAKEFILE below: setup, demo, test, check WEEK=n [NB=...], grade NB=... (the visible checks: it says so),
notebooks, outputs, clean), because the instructor's
`make test` also checks assignments/ against solutions/, which a student does not have, and its own README.md (from
scripts/student_readme.md, with the tree's assignments listed), which names only what the tree has: no grader, no
solutions, no instructor's targets. In the student's tree `make test` passes
before any work is done: the checks of a task that is not attempted yet are skipped
(tests/course/test_student_checks.py).
After writing, the tree is checked: no solution region, no hidden-test, hidden-setup or answer cell anywhere.
"""
from __future__ import annotations
import argparse
import shutil
import subprocess
import sys
from pathlib import Path
import nbformat

ROOT = Path(__file__).resolve().parent.parent
# the grading tests read solutions/; the Gradescope builder packs them
EXCLUDE_DIRS = ("solutions/", ".ci/", "scripts/grader/", "scripts/gradescope/", "tests/grader/")
EXCLUDE_FILES = {"Makefile", "README.md", "scripts/student_readme.md",   # the tree gets its own
                 "scripts/grade.py", "scripts/grade_all.py", "scripts/gradelib.py", "scripts/release.py",
                 "scripts/gradebook.py", "scripts/grading.toml", "scripts/gradescope_check.sh",
                 "tests/assignment_grading.py", "tests/course/test_assignments_tool.py", "tests/course/test_release.py",
                 "tests/course/test_prose_check.py",   # the instructor's prose rules, tested on solutions/ too
                 "tests/course/test_visible_checks_catch.py",   # plants the solutions' wrong answers
                 "tests/course/test_needs_stored_output.py",   # the instructor's tree: solutions' stored outputs
                 "tests/test_architecture.py"}   # checks the whole repository's layout (solutions/ included)
MARKERS = ("### BEGIN SOLUTION", "### END SOLUTION", "### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS")
HIDDEN_TAGS = {"hidden-test", "hidden-setup", "answer"}

STUDENT_MAKEFILE = """\
# uopc, the student's tree (written by the instructor's `make release`).
#   make setup [PYTHON=python3.12]   make .venv with a Python >= 3.11 and install the pinned packages
#   make demo          set up, then run the book's main example (examples/flash_attention.py 1024 64)
#   make test          set up, then ruff, pytest (uopc's tests and your assignments' visible checks), strict nbval
#                      on the chapter notebooks, notebook format check
#   make check WEEK=3 [NB=mine.ipynb]   run the visible checks of week 3's assignment (or of your copy of it), task
#                      by task (skipped: not attempted yet), as the grader runs the notebook
#   make grade NB=mine.ipynb   says what grading is, then runs mine.ipynb's visible checks (the hidden tests that
#                      score points are the grader's, not in this tree)
#   make notebooks     re-execute the chapter notebooks in place
#   make outputs       rebuild outputs/ (the captured runs and plots the book quotes) on this machine
#   make clean         remove the virtual environment and caches

SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
NOTEBOOKS = $(wildcard chapters/*.ipynb)
NBVAL := --nbval --nbval-current-env --nbval-sanitize-with nbval_sanitize.cfg -p no:cacheprovider

.PHONY: setup demo test check grade notebooks outputs clean

# PYTHON=/path/to/python3.12 chooses the Python; else scripts/find_python.sh takes the newest 3.11-3.13 on PATH, stops
# below 3.11 with the command that installs one here, and replaces a .venv of a Python below 3.11 (or not PYTHON=)
setup:
\t@sh scripts/find_python.sh $(VENV)
\t@$(MAKE) --no-print-directory -q $(STAMP) || $(MAKE) --no-print-directory $(STAMP)
\t@$(PY) -c "import matplotlib.pyplot"

$(PY):
\t@sh scripts/find_python.sh $(VENV)

LOCK := requirements.lock

# the same pinned versions and hashes as the instructor's tree: what the notebooks print does not drift
$(STAMP): pyproject.toml $(LOCK) | $(PY)
\t$(PY) -m pip install --require-hashes -r $(LOCK)
\t$(PY) -m pip install --no-deps --no-build-isolation -e .
\t$(PY) scripts/check_lock.py
\ttouch $(STAMP)

demo: setup
\t$(PY) examples/flash_attention.py 1024 64

test: setup
\t$(VENV)/bin/ruff check .
\tOMP_NUM_THREADS=1 $(PY) -m pytest -n 2 --dist loadfile -p no:cacheprovider tests/
\tIPYKERNEL_CELL_NAME='<IPY-INPUT>' $(PY) -m pytest -n 2 --dist loadfile $(NBVAL) $(NOTEBOOKS)
\t$(PY) scripts/notebooks.py check
\t$(PY) scripts/prose_check.py

# as the grader runs a notebook: OpenMP threads as the environment sets them, 120 s per cell (a runaway cell stops the
# run there, once); NB= checks a copy of the week's notebook, any name, in its own folder, without writing it
check: setup
\t@if [ -z "$(WEEK)$(NB)" ]; then echo "usage: make check WEEK=<1-7> [NB=<your copy of the week's notebook>]"; \\
\t  exit 2; fi
\t$(if $(NB),UOPC_CHECK_NB="$(NB)" UOPC_CHECK_WEEK="$(WEEK)" )$(PY) -m pytest -p no:cacheprovider -v -rs \\
\t  tests/course/test_student_checks.py$(if $(NB),, -k "week$(WEEK)_")

# the points come from the grader's hidden tests, which are not in this tree: here, the visible checks of NB
grade: setup
\t@if [ -z "$(NB)" ]; then echo "usage: make grade NB=<your notebook>.ipynb [WEEK=<1-7>]"; exit 2; fi
\t@echo "make grade, in the student's tree: the hidden tests that score points are your instructor's, run on the"
\t@echo "notebook you hand in; this runs $(NB)'s visible checks, task by task, as make check does"
\t$(MAKE) --no-print-directory check NB="$(NB)" $(if $(WEEK),WEEK=$(WEEK))

notebooks: setup
\t$(PY) scripts/notebooks.py build chapters/*.py

outputs: setup
\t$(PY) scripts/outputs.py

clean:
\trm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis build dist
\tfind . -path ./.git -prune -o \\( -name __pycache__ -o -name .ipynb_checkpoints -o -name '*.egg-info' \\) \\
\t  -type d -prune -exec rm -rf {} +
"""


def tracked(root: Path) -> list[str]:
  """The files git tracks (as the index has them), or every file when root is not a git checkout."""
  r = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, text=True)
  if r.returncode == 0: return [f for f in r.stdout.split("\0") if f]
  return [str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and ".git" not in p.parts]


def wanted(path: str) -> bool:
  return not (path.startswith(EXCLUDE_DIRS) or path in EXCLUDE_FILES)


def leaks(tree: Path) -> list[str]:
  """Every place in tree that holds a solution region or a hidden cell (a marker line, a tagged cell)."""
  found = []
  for p in sorted(tree.rglob("*")):
    if not p.is_file() or ".venv" in p.parts: continue
    rel = p.relative_to(tree)
    if p.suffix == ".ipynb":
      for k, c in enumerate(nbformat.read(p, as_version=4).cells):
        if HIDDEN_TAGS & set(c.get("metadata", {}).get("tags", [])): found.append(f"{rel}: cell {k} is a hidden cell")
        if any(line.strip() in MARKERS for line in c.source.split("\n")): found.append(f"{rel}: cell {k} has a marker")
    elif p.suffix in (".py", ".md", ".txt", ".cfg", ".toml"):
      text = p.read_text(encoding="utf-8", errors="replace")
      if any(line.strip() in MARKERS for line in text.splitlines()): found.append(f"{rel}: a marker line")
  return found


def student_readme(tree: Path, root: Path = ROOT) -> str:
  """The student tree's README: scripts/student_readme.md with the tree's assignments listed, each with its title."""
  weeks = []
  for p in sorted((tree / "assignments").glob("week*.ipynb")):
    title = next((c.source.split("\n")[0].lstrip("# ").strip() for c in nbformat.read(p, as_version=4).cells
                  if c.cell_type == "markdown"), p.stem)
    weeks.append(f"- `assignments/{p.name}`: {title}")
  return (root / "scripts" / "student_readme.md").read_text().replace("{assignments}", "\n".join(weeks))


def release(dest: Path, force: bool = False, root: Path = ROOT) -> list[str]:
  """Write the student tree into dest; return the files written (relative paths)."""
  if dest.exists() and any(dest.iterdir()):
    if not force: raise SystemExit(f"error: {dest} is not empty (pass --force to replace it)")
    shutil.rmtree(dest)
  dest.mkdir(parents=True, exist_ok=True)
  files = [f for f in tracked(root) if wanted(f) and (root / f).is_file()]
  for f in files:
    (dest / f).parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(root / f, dest / f)
  (dest / "Makefile").write_text(STUDENT_MAKEFILE)
  (dest / "README.md").write_text(student_readme(dest))
  if problems := leaks(dest): raise SystemExit("error: the release leaks solutions:\n" + "\n".join(problems))
  return files + ["Makefile", "README.md"]


def main(argv: list[str] | None = None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("dest", type=Path)
  ap.add_argument("--force", action="store_true", help="replace a non-empty destination")
  args = ap.parse_args(argv)
  files = release(args.dest, args.force)
  weeks = sorted(f for f in files if f.startswith("assignments/"))
  print(f"wrote {len(files)} files to {args.dest}: {len(weeks)} assignments, no solutions, no hidden tests")
  print(f"next: cd {args.dest} && make test   (and make check WEEK=<n> for one week's visible checks)")
  return 0


if __name__ == "__main__":
  sys.exit(main())
