"""make grade-all on a class of 19 notebooks (every week's solution, every week's stubs, wrong answers, attacks; the
class of tests/grader/graded_class.py, graded once for the run): one gradebook row per notebook, the solutions at full
marks and the stubs at zero inside the sandbox, the attacks at zero, and the rows the same as grading each notebook
alone with the same seed (but for a speed point: two timings on shared cores may fall either side of a threshold, the
only thing that is not a function of the notebook and seed)."""
import csv
from concurrent.futures import ThreadPoolExecutor
import json
import subprocess
import sys
from pathlib import Path
import nbformat
import pytest
from nbformat.v4 import new_code_cell
from graded_class import CLASS_ATTACKS, CLASS_SEED, CLASS_TIMEOUT, CLASS_WRONG, WEEKS
from uopc.runtime.cl import cl_unavailable

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts" / "grader"))
import sandbox  # noqa: E402

pytestmark = pytest.mark.skipif(sandbox.available() is not None, reason=str(sandbox.available()))


def grade_alone(nb: Path) -> dict:
  r = subprocess.run([sys.executable, str(ROOT / "scripts" / "grade.py"), str(nb), "--seed", CLASS_SEED, "--timeout",
                      CLASS_TIMEOUT], capture_output=True, text=True, timeout=900)
  assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
  return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def batch(graded_class):
  return graded_class.folder, graded_class.out, graded_class.rows


def test_every_notebook_is_a_row_and_every_week_grades_in_the_sandbox(batch):
  folder, out, rows = batch
  assert len(rows) == 2 * len(WEEKS) + len(CLASS_WRONG) + len(CLASS_ATTACKS)
  assert (out / "feedback" / "attacks__forge.txt").is_file()
  assert (out / "reports" / "attacks__forge.json").is_file() and (out / "reports" / "solved1.json").is_file()
  for k, week in enumerate(WEEKS, 1):
    solved, stub = rows[f"solved{k}"], rows[f"stub{k}"]
    assert solved["week"] == stub["week"] == str(k)
    if not (k == 6 and cl_unavailable()):   # week 6's row max kernel runs on device CL
      assert float(solved["total"]) == float(solved["max"]) > 0 and solved["errors"] == "", solved
    assert float(stub["total"]) == 0 and float(stub["max"]) == float(solved["max"]), stub
  for name in CLASS_ATTACKS:
    assert float(rows[f"attacks/{name.lower()}"]["total"]) == 0, rows[f"attacks/{name.lower()}"]
  assert "ok" in (out / "feedback" / "solved1.txt").read_text()


def test_a_row_is_what_grading_alone_gives(batch):
  folder, out, rows = batch
  students = ["wrong_week1", "wrong_week3", "wrong_week5", "attacks/forge", "attacks/harm"]
  with ThreadPoolExecutor(2) as pool:   # two at a time, as the batch had them (--jobs 2): half the wall time
    alones = list(pool.map(grade_alone, [folder / f"{s}.ipynb" for s in students]))
  for student, alone in zip(students, alones):
    row = rows[student]
    assert float(row["max"]) == alone["max"], (student, row, alone)
    for task, t in alone["tasks"].items():
      speed = sum(x["max"] for x in t["tests"] if x["kind"] == "speed")
      assert abs(float(row[f"week{row['week']}: {task}"]) - t["points"]) in (0, speed), (student, task, row, t)
  assert 0 < float(rows["wrong_week1"]["total"]) < float(rows["wrong_week1"]["max"])


def test_a_hung_or_unreadable_notebook_is_a_row_with_its_error(tmp_path):
  (tmp_path / "garbage.ipynb").write_bytes(b"\x00not a notebook{")
  nb = nbformat.read(ROOT / "assignments" / "week1_why_compile.ipynb", as_version=4)
  nb.cells.insert(1, new_code_cell("import time\nwhile True:\n  try: time.sleep(0.1)\n  except BaseException: pass"))
  nbformat.write(nb, tmp_path / "hangs.ipynb")
  r = subprocess.run([sys.executable, str(ROOT / "scripts" / "grade_all.py"), str(tmp_path), "--jobs", "2",
                      "--timeout", "5", "--budget", "20"], capture_output=True, text=True, timeout=600)
  assert r.returncode == 0, r.stdout + r.stderr
  with open(tmp_path / "grades" / "gradebook.csv") as f: rows = {row["student"]: row for row in csv.DictReader(f)}
  assert set(rows) == {"garbage", "hangs"}
  assert rows["garbage"]["errors"] and float(rows["garbage"]["total"]) == 0
  assert "Timeout" in rows["hangs"]["errors"] and float(rows["hangs"]["total"]) == 0
