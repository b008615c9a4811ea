"""Gradescope's run_autograder: grade the notebook in /autograder/submission/ as `make grade` does, write results.json.

  python scripts/gradescope/run.py                      # in the container: /autograder/submission -> results
  python scripts/gradescope/run.py --submission d --results r/results.json    # anywhere (the container check)
  python scripts/gradescope/run.py --warm               # setup.sh: the seed cache and a first sandbox, kept

The week is the one the zip was built for (scripts/gradescope/week, written by build.py), its solution the only one in
the zip, so the notebook's own name, title or metadata choose nothing. Whatever the notebook is named, it is graded;
of several, the newest (and the output says so). Which sandbox graded it (bubblewrap, or the unprivileged-user one
where namespaces cannot be made) is named in the output.
"""
from __future__ import annotations
import argparse
import json
import os
import platform
import re
import sys
import time
from dataclasses import asdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent), str(HERE.parent / "grader")]
import build  # noqa: E402
import grade  # noqa: E402
import results  # noqa: E402
import sandbox  # noqa: E402

SUBMISSION, RESULTS = Path("/autograder/submission"), Path("/autograder/results/results.json")
TIMEOUT, TEST_TIMEOUT, BUDGET = 120.0, 60.0, 900.0   # make grade's defaults


def week() -> int:
  return int((HERE / "week").read_text().strip())


def solution() -> Path:
  found = sorted((grade.ROOT / "solutions").glob(f"week{week()}_*.ipynb"))
  if len(found) != 1: raise RuntimeError(f"the zip holds {len(found)} solutions for week {week()}, expected 1")
  return found[0]


def machine() -> str:
  cpu = platform.processor() or platform.machine()
  try:
    with open("/proc/cpuinfo") as f:
      cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
  except OSError: pass
  return f"{cpu}, {len(os.sched_getaffinity(0))} cores"


def pick(folder: Path) -> tuple[Path | None, str]:
  """The notebook to grade (regular files only, never a link) and a note when there were several."""
  found = [p for p in folder.rglob("*.ipynb") if p.is_file() and not p.is_symlink()
           and ".ipynb_checkpoints" not in p.parts]
  if not found: return None, ""
  found.sort(key=lambda p: (p.stat().st_mtime, str(p)), reverse=True)
  note = "" if len(found) == 1 else \
    f"{len(found)} notebooks were submitted; graded the newest, {found[0].name} (submit one notebook)"
  return found[0], note


def run(submission: Path, seed: int | None = None) -> dict:
  t0 = time.perf_counter()
  nb, note = pick(submission)
  if nb is None:
    return results.failure("no notebook (.ipynb) was submitted: upload your week's notebook", time.perf_counter() - t0)
  backend = sandbox.backend() if hasattr(sandbox, "backend") else "bubblewrap"
  try: report = grade.grade(nb, solution(), TIMEOUT, TEST_TIMEOUT, BUDGET, seed=seed)
  except grade.SubmissionError as e:
    return results.failure(f"{nb.name} was not graded: {e}", time.perf_counter() - t0)
  except Exception as e:   # the grader's failure, not the student's: say so, score 0 (an instructor regrades)
    return results.failure(f"the autograder could not grade {nb.name} ({type(e).__name__}: {str(e)[:300]}); this is "
                           f"not your notebook's fault: tell the course staff", time.perf_counter() - t0)
  board = leaderboard(report)
  r = asdict(report)
  if note: r["note"] = "; ".join(x for x in (note, r.get("note")) if x)
  return results.results(r, grade.table(report), time.perf_counter() - t0, backend, machine(), board)


RATIO = re.compile(r"LEADERBOARD (\d+(?:\.\d+)?)")


def leaderboard(report) -> list[dict] | None:
  """Week 6's leaderboard entries, taken out of the report (its hidden test has no points and is not shown as a
  test): the student's blocked kernel's speed relative to the solution's (higher is faster), and the machine; None
  when the week has no leaderboard, or the kernel could not be timed (its values wrong, or it does not compile)."""
  task = report.tasks.pop(build.LEADERBOARD_TASK, None)
  if task is None: return None
  for t in task["tests"]:
    if m := RATIO.search(str(t.get("error", ""))):
      return [{"name": "blocked kernel, speed relative to the reference (x)", "value": float(m.group(1)),
               "order": "desc"}, {"name": "machine", "value": machine()}]
  return None


def warm() -> int:
  """setup.sh's last step: grade the week's stub once (the seed cache, the course tree, a sandbox proven to start)."""
  stub = grade.ROOT / "assignments" / solution().name
  report = grade.grade(stub, solution(), TIMEOUT, TEST_TIMEOUT, BUDGET, seed=0)
  print(f"warmed: the week {week()} stub scores {report.total:g} / {report.max:g}")
  return 0


def main(argv: list[str] | None = None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--submission", type=Path, default=SUBMISSION, help="the folder holding the notebook")
  ap.add_argument("--results", type=Path, default=RESULTS, help="where results.json goes")
  ap.add_argument("--seed", type=int, help="the hidden inputs' seed (default: a fresh one per submission)")
  ap.add_argument("--warm", action="store_true", help="setup.sh: warm the caches, write no results")
  args = ap.parse_args(argv)
  if args.warm: return warm()
  args.results.parent.mkdir(parents=True, exist_ok=True)
  os.chmod(args.results.parent, 0o700)   # the student's code runs as another user: it cannot write a result there
  out = run(args.submission, args.seed)
  tmp = args.results.with_name(f".{args.results.name}.tmp")
  tmp.write_text(json.dumps(out, indent=1) + "\n")
  tmp.replace(args.results)
  print(out["output"])
  return 0


if __name__ == "__main__":
  sys.exit(main())
