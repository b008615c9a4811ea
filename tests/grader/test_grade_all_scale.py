"""grade-all at scale: a class of 200 copies interrupted halfway and run again grades only what is left; a real
grading of two notebooks is kept and not done again (--force does it again); the output folder is never reached
through a link; canvas.csv and moodle.csv carry the columns Canvas's and Moodle's grade imports document."""
import csv
import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts" / "grader"))
import sandbox  # noqa: E402

spec = importlib.util.spec_from_file_location("grade_all_scale", ROOT / "scripts" / "grade_all.py")
ga = sys.modules["grade_all_scale"] = importlib.util.module_from_spec(spec)   # its dataclass looks its module up
spec.loader.exec_module(ga)
import gradebook  # noqa: E402  (scripts/ is on the path once grade_all is loaded)

STUB, SOLVED = ROOT / "assignments" / "week1_why_compile.ipynb", ROOT / "solutions" / "week1_why_compile.ipynb"
needs_sandbox = pytest.mark.skipif(sandbox.available() is not None, reason=str(sandbox.available()))


def read_csv(path: Path) -> list[list[str]]:
  with open(path, newline="") as f: return list(csv.reader(f))


def class_of(folder: Path, n: int) -> Path:
  """n notebooks: copies of week 1's and week 2's solutions and stubs, each with a byte of its own (so each hashes
  differently, as a class's notebooks do), under student ids s0000..."""
  sources = [ROOT / "solutions" / "week1_why_compile.ipynb", ROOT / "assignments" / "week1_why_compile.ipynb",
             ROOT / "solutions" / "week2_uops_and_loops.ipynb", ROOT / "assignments" / "week2_uops_and_loops.ipynb"]
  texts = [p.read_text() for p in sources]
  folder.mkdir(exist_ok=True)
  for k in range(n):
    # student k // 2 hands in weeks 1 and 2; even students solved both, odd ones handed in the stubs
    (folder / f"s{k // 2:04d}_week{1 + k % 2}.ipynb").write_text(texts[2 * (k % 2) + k // 2 % 2] + " " * (k + 1))
  return folder


class Interrupted(Exception):
  pass


def fake_grader(calls: list, stop_at: int | None):
  """A stand-in for the per-notebook grading (grade_one, which the tests below run for real on two notebooks): a
  solution scores 10 of 10, a stub 0 of 10, and the run stops (as Ctrl-C would) at call stop_at."""
  def grade_one(path, data, seed, *limits):
    if stop_at is not None and len(calls) == stop_at: raise KeyboardInterrupt
    calls.append(path.name)
    solved = data.startswith(b"{") and path.name[1:5].isdigit() and int(path.name[1:5]) % 2 == 0   # as class_of
    week = 1 if "week1" in path.name else 2
    return {"week": week, "tasks": {"the task": 10.0 if solved else 0.0}, "total": 10.0 if solved else 0.0,
            "max": 10.0, "error": "", "feedback": f"graded with seed {seed}\n", "seconds": 0.01, "cache": True}
  return grade_one


def test_an_interrupted_class_of_200_resumes_with_what_is_left(tmp_path, monkeypatch):
  folder = class_of(tmp_path / "class", 200)
  calls: list[str] = []
  monkeypatch.setattr(ga, "grade_one", fake_grader(calls, stop_at=100))
  with pytest.raises(KeyboardInterrupt):
    ga.grade_all(folder, folder / "grades", jobs=1, quiet=True)
  assert len(calls) == 100 and not (folder / "grades" / "gradebook.csv").exists()
  first = set(calls)
  calls.clear()
  monkeypatch.setattr(ga, "grade_one", fake_grader(calls, stop_at=None))
  stats: dict = {}
  rows = ga.grade_all(folder, folder / "grades", jobs=1, quiet=True, stats=stats)
  assert len(calls) == 100 and not first & set(calls), "the second run graded a notebook the first had graded"
  assert stats["reused"] == 100 and stats["graded"] == 100 and len(rows) == 200
  book = read_csv(folder / "grades" / "gradebook.csv")
  assert len(book) == 201 and all(r[0].startswith("s") for r in book[1:])
  seeds = {(folder / "grades" / "feedback" / r["feedback_file"]).read_text() for r in rows}
  assert len(seeds) == 1, "a resumed batch grades with the seed it began with"
  # a third run grades nothing; --force grades all 200 again; a changed notebook alone is graded again
  calls.clear()
  ga.grade_all(folder, folder / "grades", jobs=1, quiet=True)
  assert calls == []
  (folder / "s0003_week1.ipynb").write_text((folder / "s0003_week1.ipynb").read_text() + " ")
  ga.grade_all(folder, folder / "grades", jobs=1, quiet=True)
  assert calls == ["s0003_week1.ipynb"]
  calls.clear()
  ga.grade_all(folder, folder / "grades", jobs=1, quiet=True, force=True)
  assert len(calls) == 200


def test_notebooks_of_the_same_bytes_are_graded_once(tmp_path, monkeypatch):
  """The untouched stub handed in by several students: one grading, whose row each of them gets."""
  folder = class_of(tmp_path / "class", 4)
  for name in ("copy_week1_a", "copy_week1_b"): shutil.copy(folder / "s0000_week1.ipynb", folder / f"{name}.ipynb")
  calls: list[str] = []
  monkeypatch.setattr(ga, "grade_one", fake_grader(calls, stop_at=None))
  rows = ga.grade_all(folder, folder / "grades", jobs=1, quiet=True)
  same = {"copy_week1_a", "copy_week1_b", "s0000_week1"}
  assert len(calls) == 4 and len({c.removesuffix(".ipynb") for c in calls} & same) == 1, calls
  rows = {r["student"]: r for r in rows}   # (the stand-in scores by the name it is given: the graded one's is theirs)
  assert len(rows) == 6 and len({(rows[s]["total"], rows[s]["week"], rows[s]["feedback"]) for s in same}) == 1, rows


def test_canvas_and_moodle_files_have_their_documented_columns(tmp_path, monkeypatch):
  folder = class_of(tmp_path / "class", 8)   # s0000..s0003, each with a week 1 and a week 2 notebook
  (folder / "no-id_week1.ipynb").write_text(STUB.read_text())   # id "no-id", as the default pattern reads it
  monkeypatch.setattr(ga, "grade_one", fake_grader([], stop_at=None))
  config = tmp_path / "grading.toml"
  config.write_text((ROOT / "scripts" / "grading.toml").read_text().replace('id = "" }', 'id = "4711" }', 1))
  ga.grade_all(folder, folder / "grades", jobs=1, quiet=True, config=config)
  canvas = read_csv(folder / "grades" / "canvas.csv")
  assert canvas[0] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "Week 1: why compile (4711)",
                       "Week 2: UOps and loops"]
  by_id = {r[3]: r for r in canvas[1:]}
  assert set(by_id) == {"s0000", "s0001", "s0002", "s0003", "no-id"}
  assert by_id["s0000"][5:] == by_id["s0002"][5:] == ["10.0", "10.0"]
  assert by_id["s0001"][5:] == by_id["s0003"][5:] == ["0.0", "0.0"] and by_id["no-id"][5:] == ["0.0", ""]
  moodle = read_csv(folder / "grades" / "moodle.csv")
  assert moodle[0] == ["ID number", "Week 1", "Week 1 feedback", "Week 2", "Week 2 feedback"]
  rows = {r[0]: r for r in moodle[1:]}
  assert rows["s0000"][1] == rows["s0000"][3] == "10.0" and rows["s0000"][2].startswith("10/10")
  assert rows["s0001"][1] == "0.0" and rows["no-id"][3:] == ["", ""]


def test_the_student_id_pattern_and_a_bad_config_are_checked(tmp_path):
  config = tmp_path / "grading.toml"
  config.write_text("[student]\nid = '^[^_]+_(?:LATE_)?(?P<id>\\d+)_'\n")
  c = gradebook.load_config(config)
  assert c.student_id("smithjane_12345_67890_week3") == "12345"
  assert c.student_id("smithjane_LATE_12345_67890_week3") == "12345" and c.student_id("nobody") is None
  config.write_text("[student]\nid = '(unclosed'\n")
  with pytest.raises(ValueError, match=r"\[student\] id"): gradebook.load_config(config)
  config.write_text("[canvas]\nid_column = 'Email'\n")
  with pytest.raises(ValueError, match="id_column"): gradebook.load_config(config)


def test_a_link_named_grades_is_refused_and_nothing_is_written_outside(tmp_path, monkeypatch):
  folder, elsewhere = class_of(tmp_path / "class", 2), tmp_path / "elsewhere"
  elsewhere.mkdir()
  (folder / "grades").symlink_to(elsewhere)
  monkeypatch.setattr(ga, "grade_one", fake_grader([], stop_at=None))
  with pytest.raises(gradebook.OutputError, match="symbolic link"):
    ga.grade_all(folder, folder / "grades", jobs=1, quiet=True)
  assert list(elsewhere.iterdir()) == []
  r = subprocess.run([sys.executable, str(ROOT / "scripts" / "grade_all.py"), str(folder)], capture_output=True,
                     text=True, timeout=300)
  assert r.returncode == 2 and "symbolic link" in r.stderr and list(elsewhere.iterdir()) == []
  # a link deeper on --out's path, and links planted inside a real output folder, are not written through either
  (folder / "grades").unlink()
  (folder / "grades_link").symlink_to(elsewhere)
  with pytest.raises(gradebook.OutputError, match="symbolic link"):
    ga.grade_all(folder, folder / "grades_link" / "x", jobs=1, quiet=True)
  (folder / "grades" / "feedback").mkdir(parents=True)
  (folder / "grades" / "gradebook.csv").symlink_to(elsewhere / "gradebook.csv")
  (folder / "grades" / "feedback" / "s0000_week1.txt").symlink_to(elsewhere / "fb.txt")
  ga.grade_all(folder, folder / "grades", jobs=1, quiet=True)
  assert list(elsewhere.iterdir()) == []
  assert (folder / "grades" / "gradebook.csv").is_file() and not (folder / "grades" / "gradebook.csv").is_symlink()
  (folder / "grades" / "feedback").rename(folder / "fb_real")
  (folder / "grades" / "feedback").symlink_to(elsewhere)
  with pytest.raises(gradebook.OutputError, match="symbolic link"):
    ga.grade_all(folder, folder / "grades", jobs=1, quiet=True)
  assert list(elsewhere.iterdir()) == []


@needs_sandbox
def test_real_grading_is_kept_and_not_done_again(tmp_path):
  folder = tmp_path / "class"
  folder.mkdir()
  shutil.copy(STUB, folder / "a_week1.ipynb")
  (folder / "b_week1.ipynb").write_text(STUB.read_text() + " ")
  cmd = [sys.executable, str(ROOT / "scripts" / "grade_all.py"), str(folder), "--jobs", "2", "--seed", "5"]
  first = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
  assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-2000:]
  assert "2 graded now, 0 graded before" in first.stdout and "per notebook" in first.stdout
  book = read_csv(folder / "grades" / "gradebook.csv")
  assert len(book) == 3 and all(float(r[book[0].index("total")]) == 0 for r in book[1:])
  assert float(book[1][book[0].index("max")]) > 0
  again = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
  assert again.returncode == 0 and "0 graded now, 2 graded before" in again.stdout, again.stdout + again.stderr
  assert read_csv(folder / "grades" / "gradebook.csv") == book
  other_seed = subprocess.run(cmd[:-1] + ["6"], capture_output=True, text=True, timeout=900)
  assert "2 graded now, 0 graded before" in other_seed.stdout, other_seed.stdout + other_seed.stderr


def test_jobs_are_bounded_by_cores_and_memory(monkeypatch):
  monkeypatch.setattr(ga.os, "sched_getaffinity", lambda pid: set(range(64)))
  bound, machine = ga.job_bound()
  free_gib = float(machine.split(", ")[1].split()[0])
  assert bound <= 64 and bound <= max(1, int(free_gib * 2**30) // ga.MEMORY_PER_JOB + 1) and "64 cores" in machine
