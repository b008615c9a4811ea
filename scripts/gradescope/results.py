"""A `make grade` report as Gradescope's results.json: a test per task and per point kind, and what students see when.

Gradescope's specification (autograder docs, "Autograder Specifications"): a top-level score (optional when tests
carry scores), output, visibility, stdout_visibility, execution_time, tests (each with name, score, max_score,
output, visibility, execution_time, and optionally number and tags), and leaderboard (a list of {name, value,
order}). Visibility is one of "visible", "hidden", "after_due_date", "after_published".

What a student sees at once: every test's score and a message that says which check failed, never the values of a
hidden input (the part of a judge's message before its first ": " names the case; what follows can quote expected
and found numbers, indices and shapes). Those details, and the whole table `make grade` prints, are in tests of no
points made visible "after_published", once the instructor publishes the grades: then a resubmission can no longer
be tuned to the hidden inputs.
"""
from __future__ import annotations
import re

KINDS = ("values", "structure", "speed", "memory")
# a message with any of these quotes what a hidden input made the student's code do
REVEALS = re.compile(r"expected|found|index|rows?\b|shape|error \d|\d+\.\d|\bat \(|nan|inf\b", re.I)


def public(message: str) -> tuple[str, bool]:
  """(what a student may see at once, whether the full message holds more)."""
  message = message.strip()
  if not message or not REVEALS.search(message): return message, False
  head = message.split(": ", 1)[0]
  head = head if not REVEALS.search(head) else "a hidden check failed"
  return f"{head}: details once grades are published", True


def tests_of(report: dict) -> list[dict]:
  """One Gradescope test per (task, point kind) of the report, in the report's order, and its hidden details."""
  out = []
  for task, t in report.get("tasks", {}).items():
    by_kind: dict[str, list[dict]] = {}
    for x in t.get("tests", []): by_kind.setdefault(x.get("kind", "values"), []).append(x)
    for kind in sorted(by_kind, key=lambda k: KINDS.index(k) if k in KINDS else len(KINDS)):
      xs = by_kind[kind]
      score, most = sum(float(x.get("points", 0)) for x in xs), sum(float(x.get("max", 0)) for x in xs)
      errors = [str(x.get("error") or "") for x in xs if x.get("status") != "ok"]
      shown, hidden = [], []
      for e in errors:
        line, more = public(e)
        shown.append(line)
        if more: hidden.append(e)
      name = f"{task} ({kind})"
      out.append({"name": name, "score": score, "max_score": most, "visibility": "visible", "tags": [kind],
                  "output": "ok" if not errors else "\n".join(dict.fromkeys(shown)),
                  "execution_time": round(sum(float(x.get("seconds", 0)) for x in xs), 3)})
      if hidden:
        out.append({"name": f"{name}: details", "score": 0.0, "max_score": 0.0, "visibility": "after_published",
                    "output": "\n".join(hidden), "execution_time": 0.0})
  return out


def results(report: dict, table: str, seconds: float, backend: str, machine: str,
            leaderboard: list[dict] | None = None) -> dict:
  """results.json for one graded notebook (report: grade.Report as a dict; table: what `make grade` prints)."""
  tests = tests_of(report)
  cells = report.get("student_cells", {})
  summary = [f"{t['name']}: {t['score']:g} / {t['max_score']:g}" for t in tests if t["visibility"] == "visible"]
  own = [f"cell {e['cell']}: {e['status']}: {e['error']}" for e in cells.get("errors", [])
         if not str(e.get("error", "")).startswith("NotImplementedError")]   # the student's own code's errors
  note = [report["note"]] if report.get("note") else []
  out = {"score": float(report.get("total", 0.0)), "execution_time": round(seconds, 1),
         "output": "\n".join([f"{float(report.get('total', 0)):g} / {float(report.get('max', 0)):g} points",
                              *summary, *note, *own, f"graded in the {backend} sandbox on {machine}"]),
         "visibility": "visible", "stdout_visibility": "hidden",
         "tests": tests + [{"name": "the grader's full report", "score": 0.0, "max_score": 0.0,
                            "visibility": "after_published", "output": table, "execution_time": 0.0}]}
  if leaderboard: out["leaderboard"] = leaderboard
  return out


def failure(why: str, seconds: float = 0.0) -> dict:
  """results.json when nothing could be graded (no notebook, the sandbox could not be made): 0, and why."""
  return {"score": 0.0, "execution_time": round(seconds, 1), "output": why, "visibility": "visible",
          "stdout_visibility": "hidden", "tests": []}
