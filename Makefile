# uopc: every target works from a fresh clone; `make setup` runs first where it is needed.
#   make setup [PYTHON=python3.12]   create .venv with a Python >= 3.11 (scripts/find_python.sh) and install exactly
#                     requirements.lock (versions and hashes), then uopc itself
#   make lock         re-resolve requirements.lock from pyproject.toml (after adding a dependency there)
#   make demo         set up, then run the book's main example
#   make test         set up, then ruff, pytest, strict nbval, notebook format and prose checks, assignments check
#   make notebooks    re-execute chapters/ and solutions/ in place (from their .py sources) and normalise them
#   make outputs      rebuild outputs/ (scripts/outputs.py)
#   make assignments  regenerate assignments/ from solutions/
#   make grade NB=mine.ipynb [SOL=solutions/X.ipynb]   grade a student's notebook, any file name (scripts/grade.py)
#   make gradescope WEEK=N   the week's autograder for Gradescope: autograder-weekN.zip (scripts/gradescope/)
#   make grade-all DIR=submissions [JOBS=N] [FORCE=1]   grade every notebook in DIR: DIR/grades/gradebook.csv,
#                     canvas.csv, moodle.csv and feedback/; resumes where an interrupted run stopped (FORCE=1: all again)
#                     (both grade in a bubblewrap sandbox: `sudo apt-get install bubblewrap` on the grading machine)
#   make check WEEK=3 [NB=mine.ipynb]   run the visible checks of week 3's assignment (or of a copy of it), task by task,
#                     as the grader runs the notebook (tests/course/test_student_checks.py)
#   make release DIR=/tmp/course   write the student's tree: no solutions, no hidden tests (scripts/release.py)
#   make clean        remove the virtual environment, caches and build folders (never a committed file)

SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
TEST_WORKERS ?= 3
# touched after a successful install: pip runs again only when pyproject.toml or the lock file is newer
STAMP := $(VENV)/.installed-stamp
# every package `make setup` installs, pinned with its hashes, for every platform and Python >= 3.11 (uv's universal
# resolution); a dependency is added by one line in pyproject.toml and `make lock`
LOCK := requirements.lock
LOCK_CMD := uv pip compile pyproject.toml --extra dev --universal --python-version 3.11 --generate-hashes --quiet -o $(LOCK)
# nbval runs on the notebooks that exist; the sanitize file masks timings, addresses and per-process paths
NOTEBOOKS = $(wildcard chapters/*.ipynb solutions/*.ipynb)
NBVAL := --nbval --nbval-current-env --nbval-sanitize-with nbval_sanitize.cfg -p no:cacheprovider

.PHONY: setup lock demo test notebooks outputs assignments grade grade-all gradescope bwrap check release clean

# PYTHON=/path/to/python3.12 chooses the Python; else scripts/find_python.sh takes the newest 3.11-3.13 on PATH, stops
# below 3.11 with the command that installs one here, and replaces a .venv of a Python below 3.11 (or not PYTHON=)
setup:
	@sh scripts/find_python.sh $(VENV)
	@$(MAKE) --no-print-directory -q $(STAMP) || $(MAKE) --no-print-directory $(STAMP)
	@# an empty font cache makes matplotlib print a warning on stderr, which fails the first plotting cell
	@$(PY) -c "import matplotlib.pyplot"

$(PY):
	@sh scripts/find_python.sh $(VENV)

$(STAMP): pyproject.toml $(LOCK) | $(PY)
	$(PY) -m pip install --require-hashes -r $(LOCK)
	@# uopc itself, built by the locked setuptools: nothing unpinned is fetched
	$(PY) -m pip install --no-deps --no-build-isolation -e .
	$(PY) scripts/check_lock.py
	touch $(STAMP)

# uv is itself pinned in the lock: the first time, install the current lock to get it
lock: | $(PY)
	@test -x $(VENV)/bin/uv || $(PY) -m pip install --require-hashes -r $(LOCK)
	$(VENV)/bin/$(LOCK_CMD)

demo: setup
	@if [ -f examples/flash_attention.py ]; then $(PY) examples/flash_attention.py 1024 64; \
	else $(PY) examples/ch02_program.py; fi

test: setup
	$(VENV)/bin/ruff check .
	@# libgomp is not fork-safe: one OpenMP thread per test process. TEST_WORKERS xdist workers (default 3 on CI's 2
	@# cores: a worker waiting on a sandbox's time limit, a kernel's restart or a child process leaves its core to the
	@# third, NOTES 73). --durations: the slowest tests, printed every run (CI time is a budget: NOTES 51); the files
	@# handed out slowest wing first (tests/conftest.py, SLOW_WINGS)
	OMP_NUM_THREADS=1 $(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder -p no:cacheprovider \
	  --durations=20 tests/
	@if [ -n "$(NOTEBOOKS)" ]; then \
	  echo "IPYKERNEL_CELL_NAME='<IPY-INPUT>' $(PY) -m pytest -n 2 --dist loadfile $(NBVAL) $(NOTEBOOKS)"; \
	  IPYKERNEL_CELL_NAME='<IPY-INPUT>' $(PY) -m pytest -n 2 --dist loadfile $(NBVAL) $(NOTEBOOKS); \
	else echo "no notebooks in chapters/ or solutions/: nbval skipped"; fi
	$(PY) scripts/notebooks.py check
	$(PY) scripts/prose_check.py
	$(PY) scripts/assignments.py --check

notebooks: setup
	$(PY) scripts/notebooks.py build

outputs: setup
	@if [ -f scripts/outputs.py ]; then $(PY) scripts/outputs.py; \
	else echo "nothing to rebuild yet: scripts/outputs.py does not exist"; fi

assignments: setup
	$(PY) scripts/assignments.py

# the grader runs each submission in a bubblewrap sandbox (scripts/grader/sandbox.py): Debian's package `bubblewrap`
bwrap:
	@command -v bwrap >/dev/null || { echo "the grader needs bubblewrap: sudo apt-get install bubblewrap"; exit 2; }

grade: setup bwrap
	@if [ -z "$(NB)" ]; then echo "usage: make grade NB=<notebook>.ipynb [SOL=solutions/<week>.ipynb]"; exit 2; fi
	$(PY) scripts/grade.py "$(NB)" $(if $(SOL),--solution "$(SOL)")

grade-all: setup bwrap
	@if [ -z "$(DIR)" ]; then echo "usage: make grade-all DIR=<folder of notebooks> [JOBS=N] [FORCE=1]"; exit 2; fi
	$(PY) scripts/grade_all.py "$(DIR)" $(if $(JOBS),--jobs $(JOBS)) $(if $(FORCE),--force)

# the week's autograder for Gradescope (README, "Grading on Gradescope"): setup.sh, run_autograder, the hidden tests
gradescope: setup
	@if [ -z "$(WEEK)" ]; then echo "usage: make gradescope WEEK=<1-7>"; exit 2; fi
	$(PY) scripts/gradescope/build.py "$(WEEK)"

# as the grader runs a notebook: OpenMP threads as the environment sets them, 120 s per cell (a runaway cell stops the
# run there, once); NB= checks a copy of the week's notebook, any name, in its own folder, without writing it
check: setup
	@if [ -z "$(WEEK)$(NB)" ]; then echo "usage: make check WEEK=<1-7> [NB=<your copy of that week's notebook>]"; exit 2; fi
	$(if $(NB),UOPC_CHECK_NB="$(NB)" UOPC_CHECK_WEEK="$(WEEK)" )$(PY) -m pytest -p no:cacheprovider -v -rs \
	  tests/course/test_student_checks.py$(if $(NB),, -k "week$(WEEK)_")

release: setup
	@if [ -z "$(DIR)" ]; then echo "usage: make release DIR=<folder for the student tree>"; exit 2; fi
	$(PY) scripts/release.py "$(DIR)" $(if $(FORCE),--force)

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis build dist
	find . -path ./.git -prune -o \( -name __pycache__ -o -name .ipynb_checkpoints -o -name '*.egg-info' \) \
	  -type d -prune -exec rm -rf {} +
