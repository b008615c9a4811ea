"""Grade a whole class: every notebook in a folder, each in its own sandbox, several at once.

  python scripts/grade_all.py submissions/ --jobs 2          # make grade-all DIR=submissions/ JOBS=2
  python scripts/grade_all.py submissions/ --out grades/ --seed 7

Writes, in --out (default: <folder>/grades): gradebook.csv, one row per notebook (student, week, points per task,
total, max, errors), and feedback/<student>.txt, the table `make grade` prints (what was wrong, task by task). The
student is the notebook's path in the folder without `.ipynb` (alice.ipynb -> alice, alice/week3.ipynb ->
alice/week3). A notebook that crashes, hangs or cannot be read is a row with its error; the batch goes on. Every
notebook of one batch gets the same seed (printed), so two students' hidden inputs are the same.
"""
from __future__ import annotations
import argparse
import csv
import secrets
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import grade  # noqa: E402

def grade_one(nb: Path, seed: int, timeout: float, test_timeout: float, budget: float) -> dict:
  """One notebook's row: never raises (an error is the row's `error`)."""
  t0 = time.perf_counter()
  try:
    solution = grade.find_solution(nb)
    r = grade.grade(nb, solution, timeout, test_timeout, budget, seed=seed)
    week = int(grade.TABLE.match(Path(r.solution).name).group(1)) if grade.TABLE.match(Path(r.solution).name) else ""
    problems = [e["error"] for e in r.student_cells["errors"] if not e["error"].startswith("NotImplementedError")]
    return {"week": week, "tasks": {t: v["points"] for t, v in r.tasks.items()}, "total": r.total, "max": r.max,
            "error": "; ".join(([r.note] if r.note else []) + problems)[:500], "feedback": grade.table(r),
            "seconds": time.perf_counter() - t0}
  except Exception as e:   # no solution for it, or the sandbox could not be made: a row all the same
    return {"week": "", "tasks": {}, "total": 0.0, "max": 0.0, "error": f"{type(e).__name__}: {e}"[:500],
            "feedback": f"not graded: {type(e).__name__}: {e}\n", "seconds": time.perf_counter() - t0}


def student_of(nb: Path, folder: Path) -> str: return nb.relative_to(folder).with_suffix("").as_posix()


def progress(done: int, total: int, t0: float) -> None:
  width = 30
  bar = "#" * (width * done // max(total, 1))
  print(f"\r[{bar:<{width}}] {done}/{total} graded, {time.perf_counter() - t0:.0f} s", end="", file=sys.stderr,
        flush=True)


def grade_all(folder: Path, out: Path, jobs: int = 2, seed: int | None = None, timeout: float = 120,
              test_timeout: float = 60, budget: float = 900, quiet: bool = False) -> list[dict]:
  """Grade every notebook under folder (but not under out); write out/gradebook.csv and out/feedback/."""
  notebooks = sorted(p for p in folder.rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts
                     and not p.resolve().is_relative_to(out.resolve()))
  seed = secrets.randbelow(2**31) if seed is None else seed
  rows: dict[Path, dict] = {}
  t0 = time.perf_counter()
  with ProcessPoolExecutor(max_workers=jobs) as pool:   # a worker process per job: its sandboxes get its own UID
    futures = {pool.submit(grade_one, nb, seed, timeout, test_timeout, budget): nb for nb in notebooks}
    for f in as_completed(futures):
      rows[futures[f]] = f.result()
      if not quiet: progress(len(rows), len(notebooks), t0)
  if not quiet: print(file=sys.stderr)
  out.mkdir(parents=True, exist_ok=True)
  # one column per (week, task), in the order the tasks come in each week's solution
  tasks = list(dict.fromkeys((row["week"], task) for row in sorted(rows.values(), key=lambda r: str(r["week"]))
                             for task in row["tasks"]))
  result = []
  with open(out / "gradebook.csv", "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["student", "week", *[f"week{wk}: {task}" for wk, task in tasks], "total", "max", "errors"])
    for nb in notebooks:
      row, student = rows[nb], student_of(nb, folder)
      points = [row["tasks"].get(task, "") if row["week"] == wk else "" for wk, task in tasks]
      w.writerow([student, row["week"], *points, row["total"], row["max"], row["error"]])
      feedback = out / "feedback" / f"{student}.txt"
      feedback.parent.mkdir(parents=True, exist_ok=True)
      feedback.write_text(row["feedback"] + "\n")
      result.append({"student": student, **row})
  return result


def main(argv: list[str] | None = None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("folder", type=Path, help="the folder of submissions (notebooks, at any depth)")
  ap.add_argument("--out", type=Path, help="where to write gradebook.csv and feedback/ (default <folder>/grades)")
  ap.add_argument("--jobs", type=int, default=2, help="notebooks graded at once (default 2)")
  ap.add_argument("--seed", type=int, help="the seed of the hidden tests' inputs (default: a fresh random one)")
  ap.add_argument("--timeout", type=float, default=120, help="seconds each student cell may run (default 120)")
  ap.add_argument("--test-timeout", type=float, default=60, help="seconds each hidden test may run (default 60)")
  ap.add_argument("--budget", type=float, default=900, help="seconds for all of one student's cells (default 900)")
  args = ap.parse_args(argv)
  if not args.folder.is_dir(): ap.error(f"{args.folder} is not a folder")
  out = args.out or args.folder / "grades"
  seed = secrets.randbelow(2**31) if args.seed is None else args.seed
  print(f"grading {args.folder} with seed {seed}, {args.jobs} at once", file=sys.stderr)
  rows = grade_all(args.folder, out, args.jobs, seed, args.timeout, args.test_timeout, args.budget)
  failed = sum(1 for r in rows if r["error"])
  print(f"{len(rows)} notebooks graded ({failed} with errors): {out / 'gradebook.csv'}, feedback in {out / 'feedback'}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
