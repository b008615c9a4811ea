"""make gradescope: the zip holds setup.sh and run_autograder at its root, the week's one solution and no other, and
nothing of the repository's that is not the course or the grader; run_autograder's results.json validates against
Gradescope's specification (gradescope_results.schema.json, checked with jsonschema from the lock); a hidden test's
message that quotes values is shown only once grades are published."""
import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
import jsonschema
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "scripts" / "gradescope"), str(ROOT / "scripts" / "grader")]
import build  # noqa: E402
import results  # noqa: E402
import sandbox  # noqa: E402

SCHEMA = json.loads((Path(__file__).parent / "gradescope_results.schema.json").read_text())
needs_sandbox = pytest.mark.skipif(sandbox.available() is not None, reason=str(sandbox.available()))


def validate(doc: dict) -> None:
  jsonschema.validate(doc, SCHEMA, cls=jsonschema.Draft202012Validator)


REPORT = {   # grade.Report as a dict, the shape grade.py's last line has
  "notebook": "mine.ipynb", "solution": "solutions/week1_why_compile.ipynb", "total": 3.0, "max": 6.0, "note": "",
  "student_cells": {"run": 9, "errors": [{"cell": 4, "status": "error", "error": "NameError: name 'x' is not defined"}],
                    "timeouts": 0, "skipped": 0},
  "tasks": {
    "cost table": {"points": 2.0, "max": 2.0, "tests": [
      {"cell": 11, "kind": "values", "points": 2.0, "max": 2.0, "status": "ok", "error": "", "seconds": 0.2}]},
    "blocked attention": {"points": 1.0, "max": 4.0, "tests": [
      {"cell": 19, "kind": "values", "points": 0.0, "max": 2.0, "status": "error", "seconds": 0.4,
       "error": "blocked attention on the causal case: max abs error 0.31 at index (3, 5) (expected 0.1234, found "
                "0.4334); tolerance 0.0001"},
      {"cell": 20, "kind": "structure", "points": 1.0, "max": 1.0, "status": "ok", "error": "", "seconds": 0.1},
      {"cell": 21, "kind": "speed", "points": 0.0, "max": 1.0, "status": "skipped", "seconds": 0.0,
       "error": "not run: speed points count only once the values of this task are right"}]}}}


def test_results_follow_the_specification_and_hide_what_reveals_inputs():
  doc = results.results(REPORT, "the table", 12.5, "bubblewrap", "a test machine",
                        leaderboard=[{"name": "flash vs reference", "value": 1.7, "order": "desc"}])
  validate(doc)
  tests = {t["name"]: t for t in doc["tests"]}
  assert [t["name"] for t in doc["tests"] if t["visibility"] == "visible"] == \
    ["cost table (values)", "blocked attention (values)", "blocked attention (structure)", "blocked attention (speed)"]
  assert sum(t["score"] for t in doc["tests"]) == REPORT["total"] == doc["score"]
  assert sum(t["max_score"] for t in doc["tests"]) == REPORT["max"]
  shown = tests["blocked attention (values)"]["output"]
  assert "causal case" in shown and "0.4334" not in shown and "(3, 5)" not in shown
  detail = tests["blocked attention (values): details"]
  assert detail["visibility"] == "after_published" and "0.4334" in detail["output"] and detail["max_score"] == 0
  assert "not run" in tests["blocked attention (speed)"]["output"]   # says nothing of an input: shown at once
  assert "NameError" in doc["output"] and "bubblewrap" in doc["output"]
  validate(results.failure("no notebook"))
  with pytest.raises(jsonschema.ValidationError):   # the schema can fail: a visibility Gradescope does not know
    validate(dict(doc, tests=[dict(doc["tests"][0], visibility="sometimes")]))
  with pytest.raises(jsonschema.ValidationError):
    validate({"output": "neither a score nor tests"})


def test_the_zip_holds_the_week_and_nothing_else(tmp_path):
  out = build.build(6, tmp_path / "ag.zip")
  with zipfile.ZipFile(out) as z:
    names = z.namelist()
    modes = {i.filename: i.external_attr >> 16 for i in z.infolist()}
    assert z.read("scripts/gradescope/week") == b"6\n"
  assert {"setup.sh", "run_autograder", "requirements.lock", "pyproject.toml", "scripts/grade.py",
          "scripts/gradescope/run.py", "solutions/week6_flash_attention.ipynb"} <= set(names)
  assert modes["setup.sh"] & 0o111 and modes["run_autograder"] & 0o111
  assert [n for n in names if n.startswith("solutions/")] == ["solutions/week6_flash_attention.ipynb"]
  assert not [n for n in names if n.startswith(("tests/", "chapters/", "notes/", ".venv", "NOTES.md"))]
  assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
  r = subprocess.run([sys.executable, str(ROOT / "scripts" / "gradescope" / "build.py"), "99", "--out",
                      str(tmp_path / "x.zip")], capture_output=True, text=True)
  assert r.returncode == 2 and "week 99" in r.stderr and not (tmp_path / "x.zip").exists()


def test_week6_carries_a_leaderboard_test_of_no_points(tmp_path):
  import judge
  import run
  with zipfile.ZipFile(build.build(6, tmp_path / "ag.zip")) as z:
    nb = json.loads(z.read("solutions/week6_flash_attention.ipynb"))
  cell = nb["cells"][-1]
  assert cell["metadata"]["tags"] == ["hidden-test"] and cell["source"].startswith("# POINTS: leaderboard 0\n")
  fixture, probe, judged = judge.split(cell["source"])
  assert "blocked_attention_ir(1024, 64)" in probe and "def _reference_blocked_attention_ir(" in judged
  compile(judged, "leaderboard", "exec")   # the solution's kernel, renamed, is valid Python
  report = type("Report", (), {})()
  report.tasks = {"query blocking": {"points": 3.0, "max": 3.0, "tests": []},
                  "leaderboard": {"points": 0.0, "max": 0.0,
                                  "tests": [{"status": "error", "error": "LEADERBOARD 1.25"}]}}
  board = run.leaderboard(report)
  assert board[0]["value"] == 1.25 and board[0]["order"] == "desc" and board[1]["name"] == "machine"
  assert "leaderboard" not in report.tasks   # not a test the student sees
  report.tasks["leaderboard"] = {"tests": [{"status": "error", "error": "leaderboard: it does not compile"}]}
  assert run.leaderboard(report) is None


@needs_sandbox
def test_run_autograder_grades_a_notebook_of_any_name(tmp_path):
  submission, out = tmp_path / "submission", tmp_path / "results" / "results.json"
  submission.mkdir()
  shutil.copy(ROOT / "assignments" / "week1_why_compile.ipynb", submission / "My Homework (final).ipynb")
  tree = tmp_path / "source"   # the zip unpacked, as Gradescope does into /autograder/source
  with zipfile.ZipFile(build.build(1, tmp_path / "ag.zip")) as z: z.extractall(tree)
  r = subprocess.run([sys.executable, "-s", str(tree / "scripts" / "gradescope" / "run.py"), "--submission",
                      str(submission), "--results", str(out), "--seed", "4"], capture_output=True, text=True,
                     timeout=900)
  assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
  doc = json.loads(out.read_text())
  validate(doc)
  assert doc["score"] == 0 and sum(t["max_score"] for t in doc["tests"]) > 0, doc
  assert all(t["score"] == 0 for t in doc["tests"])
  empty = tmp_path / "empty"
  empty.mkdir()
  r = subprocess.run([sys.executable, "-s", str(tree / "scripts" / "gradescope" / "run.py"), "--submission",
                      str(empty), "--results", str(out)], capture_output=True, text=True, timeout=300)
  doc = json.loads(out.read_text())
  validate(doc)
  assert r.returncode == 0 and doc["score"] == 0 and "no notebook" in doc["output"]
