"""The grader's tests share one picture of a grading machine (the grader's own home and caches) and one class graded
by `make grade-all` (tests/grader/graded_class.py), graded once for the whole run."""
from __future__ import annotations
import csv
import fcntl
import os
import shutil
import subprocess
import sys
from pathlib import Path
import pytest
from graded_class import CLASS_SEED, CLASS_TIMEOUT, ROOT, GradedClass, make_class


def run_folder(tmp_path_factory, worker_id) -> Path:
  """This run's temporary folder, the same for every pytest-xdist worker (the folder above each worker's own)."""
  shared = tmp_path_factory.getbasetemp()
  return shared if worker_id == "master" else shared.parent


@pytest.fixture(scope="module")
def env(tmp_path_factory, worker_id):
  """The grader's own home and kernel cache (with something in each), as a grading machine has them: a home and
  cache of the module's own (the attack tests hash them around each grading), and the seeds and compiled kernels the
  grader keeps (grade.seed_cache, scripts/grader/trusted.py) the run's, as a grading machine keeps them from one
  grading to the next: each week's seed is made once for the run, not once in each module that grades the week (13
  seeds in 4 modules, 7 weeks; a few seconds each, NOTES 51's budget). The grader makes and adopts both for
  concurrent gradings (grade_all's jobs), so xdist's workers share them as its jobs do."""
  base = tmp_path_factory.mktemp("grader")
  run = run_folder(tmp_path_factory, worker_id)
  home, cache = base / "home", base / "cache"
  (home / ".ipython" / "profile_default" / "startup").mkdir(parents=True)
  cache.mkdir()
  (cache / "kept.txt").write_text("the grader's cache\n")
  # the assignments' warm caches (grade.seed_cache, made by the grader from the stubs alone) and the kernels the
  # grader compiled from sandboxes' sources (scripts/grader/trusted.py, tests/grader/test_grader_trusted.py) live apart
  return {**os.environ, "HOME": str(home), "UOPC_CACHE_DIR": str(cache), "PYTHONDONTWRITEBYTECODE": "1",
          "UOPC_GRADER_SEEDS": str(run / "grader_seeds"), "UOPC_GRADER_KERNELS": str(run / "grader_kernels")}, home, \
    cache


@pytest.fixture(scope="session")
def graded_class(tmp_path_factory, worker_id) -> GradedClass:
  """The class, graded once for the run: the batch tests read its gradebook, each week's tests its solution's and
  stubs' reports (a solution is graded once, not once per test file that checks it). pytest-xdist's workers share
  it through the run's temporary folder and a lock on it: the first to ask grades, another waits for it."""
  shared = run_folder(tmp_path_factory, worker_id)
  folder, out = shared / "class", shared / "class" / "grades"
  with open(shared / "class.lock", "w") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    if not (out / "gradebook.csv").is_file():
      shutil.rmtree(folder, ignore_errors=True)   # (what a worker that failed half-way left)
      make_class(folder)
      r = subprocess.run([sys.executable, str(ROOT / "scripts" / "grade_all.py"), str(folder), "--jobs", "2", "--seed",
                          CLASS_SEED, "--timeout", CLASS_TIMEOUT], capture_output=True, text=True, timeout=1800)
      assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
  with open(out / "gradebook.csv") as f: rows = {row["student"]: row for row in csv.DictReader(f)}
  return GradedClass(folder, out, rows)
