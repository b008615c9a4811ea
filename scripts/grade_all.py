"""Grade a whole class: every notebook in a folder, each in its own sandbox, several at once.

  python scripts/grade_all.py submissions/ --jobs 2          # make grade-all DIR=submissions/ JOBS=2
  python scripts/grade_all.py submissions/ --out grades/ --seed 7

Writes, in --out (default: <folder>/grades): gradebook.csv, one row per entry named *.ipynb (student, week, points per
task, total, max, errors, feedback), and feedback/<file>.txt, the table `make grade` prints (what was wrong, task by
task). The student is the entry's path in the folder without `.ipynb` (alice.ipynb -> alice, alice/week3.ipynb ->
alice/week3; a name that is not UTF-8 is shown with its odd bytes escaped, \\xff). Every entry gets its row, whatever
it is:
- a regular file is graded (read through a descriptor opened without following links); one that crashes, hangs or is
  no notebook is a row with its error, and the batch goes on;
- anything else named *.ipynb (a symbolic link, a folder, a pipe) is a row with an error and is never followed or read;
  folders that are links are not entered.
A feedback file's name is made from the student's with every character but letters, digits, `.`, `_` and `-`
replaced, flat in feedback/, made unique (a suffix from a hash of the original name) when two students would share
one; the gradebook names each row's file. The gradebook is written to a temporary file and renamed, so an interrupted
batch leaves the previous one whole; a row that cannot be written is written as an error row instead; a cell that a
spreadsheet would read as a formula (starting with = + - @, a tab or a carriage return) is prefixed with a quote.
Every notebook of one batch gets the same seed (printed), so two students' hidden inputs are the same.
"""
from __future__ import annotations
import argparse
import csv
import hashlib
import os
import re
import secrets
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import grade  # noqa: E402

FORMULA = ("=", "+", "-", "@", "\t", "\r")
UNSAFE = re.compile(r"[^A-Za-z0-9._-]")
MAX_ERROR = 500


@dataclass(frozen=True)
class Entry:
  rel: bytes        # its path in the folder, as the file system has it
  path: Path        # the same, absolute, for opening (os.fsdecode: odd bytes kept as surrogates)
  kind: str         # "file" (a regular file: graded), "link", "folder" or "other" (an error row)

  @property
  def student(self) -> str:
    rel = self.rel[:-len(b".ipynb")] if self.rel.endswith(b".ipynb") else self.rel
    return rel.decode("utf-8", "backslashreplace")


def entries(folder: Path, out: Path) -> list[Entry]:
  """Every entry named *.ipynb under folder (not under out, not in .ipynb_checkpoints), by lstat: links are listed,
  never followed; folders that are links are not entered."""
  root = os.fsencode(folder)
  skip = os.path.realpath(os.fsencode(out))
  found: list[Entry] = []

  def walk(d: bytes) -> None:
    try: items = sorted(os.scandir(d), key=lambda e: e.name)
    except OSError: return
    for e in items:
      full = os.path.join(d, e.name)
      if e.is_dir(follow_symlinks=False):
        if e.name == b".ipynb_checkpoints" or os.path.realpath(full) == skip: continue
        if e.name.endswith(b".ipynb"):
          found.append(Entry(os.path.relpath(full, root), Path(os.fsdecode(full)), "folder"))
        walk(full)
      elif e.name.endswith(b".ipynb"):
        kind = "link" if e.is_symlink() else "file" if e.is_file(follow_symlinks=False) else "other"
        found.append(Entry(os.path.relpath(full, root), Path(os.fsdecode(full)), kind))
  walk(root)
  return found


NOT_GRADED = {"link": "a symbolic link: not followed, not graded (hand in the file itself)",
              "folder": "a folder named like a notebook: not graded", "other": "not a regular file: not graded"}


def grade_one(path: Path, seed: int, timeout: float, test_timeout: float, budget: float) -> dict:
  """One notebook's row: never raises (an error is the row's `error`)."""
  t0 = time.perf_counter()
  try:
    data = grade.read_submission(path)   # O_NOFOLLOW, a regular file: what lstat saw could have been swapped since
    solution = grade.find_solution(path, data=data)
    if solution is None:   # which week cannot be told: say why, without quoting the file
      try: grade.parse_notebook(data)
      except ValueError as e: return failed(f"not graded: {e}, and its name names no week", time.perf_counter() - t0)
      return failed("not graded: neither its metadata, its title nor its name says which week it answers",
                    time.perf_counter() - t0)
    r = grade.grade(path, solution, timeout, test_timeout, budget, seed=seed, data=data)
    m = grade.TABLE.match(Path(r.solution).name)
    week = int(m.group(1)) if m else ""
    problems = [e["error"] for e in r.student_cells["errors"] if not e["error"].startswith("NotImplementedError")]
    return {"week": week, "tasks": {t: v["points"] for t, v in r.tasks.items()}, "total": r.total, "max": r.max,
            "error": "; ".join(([r.note] if r.note else []) + problems)[:MAX_ERROR], "feedback": grade.table(r),
            "seconds": time.perf_counter() - t0}
  except Exception as e:   # not a regular file, no solution for it, the sandbox could not be made: a row all the same
    why = str(e) if isinstance(e, (grade.SubmissionError, grade.UsageError)) else f"{type(e).__name__}: {e}"
    return failed(f"not graded: {why}", time.perf_counter() - t0)


def failed(why: str, seconds: float = 0.0) -> dict:
  return {"week": "", "tasks": {}, "total": 0.0, "max": 0.0, "error": why[:MAX_ERROR], "feedback": why + "\n",
          "seconds": seconds}


def cell(x) -> object:
  """A gradebook cell as a spreadsheet may show it: text that would be read as a formula gets a quote before it."""
  if isinstance(x, str):
    x = x.replace("\0", "")
    return "'" + x if x.startswith(FORMULA) else x
  return x


def feedback_names(students: list[tuple[bytes, str]]) -> dict[bytes, str]:
  """rel -> a file name in feedback/: the student's with unsafe characters replaced, made unique."""
  out: dict[bytes, str] = {}
  used: set[str] = set()
  for rel, student in students:
    base = UNSAFE.sub("_", student.replace("/", "__")).lstrip(".") or "notebook"
    name = f"{base[:150]}.txt"
    if name.lower() in used:
      name = f"{base[:150]}-{hashlib.sha256(rel).hexdigest()[:10]}.txt"
    used.add(name.lower())
    out[rel] = name
  return out


def write_text(path: Path, text: str) -> None:
  """A new file (an old one replaced) written through a descriptor that does not follow a link at path."""
  tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}")
  fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
  with os.fdopen(fd, "w", encoding="utf-8", errors="replace") as f: f.write(text)
  os.replace(tmp, path)


def progress(done: int, total: int, t0: float) -> None:
  width = 30
  bar = "#" * (width * done // max(total, 1))
  print(f"\r[{bar:<{width}}] {done}/{total} graded, {time.perf_counter() - t0:.0f} s", end="", file=sys.stderr,
        flush=True)


def grade_all(folder: Path, out: Path, jobs: int = 2, seed: int | None = None, timeout: float = 120,
              test_timeout: float = 60, budget: float = 900, quiet: bool = False) -> list[dict]:
  """Grade every notebook under folder (but not under out); write out/gradebook.csv and out/feedback/."""
  found = entries(folder, out)
  seed = secrets.randbelow(2**31) if seed is None else seed
  rows: dict[bytes, dict] = {e.rel: failed(NOT_GRADED[e.kind]) for e in found if e.kind != "file"}
  todo = [e for e in found if e.kind == "file"]
  t0 = time.perf_counter()
  if todo:
    with ProcessPoolExecutor(max_workers=jobs) as pool:   # a worker process per job: its sandboxes get its own UID
      futures = {pool.submit(grade_one, e.path, seed, timeout, test_timeout, budget): e for e in todo}
      for f in as_completed(futures):
        try: rows[futures[f].rel] = f.result()
        except Exception as e: rows[futures[f].rel] = failed(f"not graded: the worker failed ({type(e).__name__})")
        if not quiet: progress(len(rows), len(found), t0)
  if not quiet: print(file=sys.stderr)
  out.mkdir(parents=True, exist_ok=True)
  (out / "feedback").mkdir(exist_ok=True)
  names = feedback_names([(e.rel, e.student) for e in found])
  # one column per (week, task), in the order the tasks come in each week's solution
  tasks = list(dict.fromkeys((row["week"], task) for row in sorted(rows.values(), key=lambda r: str(r["week"]))
                             for task in row["tasks"]))
  result = []
  fd, tmp = tempfile.mkstemp(dir=out, prefix=".gradebook-", suffix=".csv")
  try:
    with os.fdopen(fd, "w", newline="", encoding="utf-8", errors="replace") as f:
      w = csv.writer(f)
      w.writerow(["student", "week", *[f"week{wk}: {task}" for wk, task in tasks], "total", "max", "errors",
                  "feedback"])
      for e in found:
        row, student = rows[e.rel], e.student
        try:
          points = [row["tasks"].get(task, "") if row["week"] == wk else "" for wk, task in tasks]
          line = [student, row["week"], *points, row["total"], row["max"], row["error"], f"feedback/{names[e.rel]}"]
          w.writerow([cell(x) for x in line])
          write_text(out / "feedback" / names[e.rel], row["feedback"] + "\n")
        except Exception as err:   # one bad row never costs another its row
          row = failed(f"the row could not be written ({type(err).__name__})")
          w.writerow([cell(x) for x in [student, "", *[""] * len(tasks), 0.0, 0.0, row["error"], ""]])
        result.append({"student": student, "feedback_file": names[e.rel], **row})
    os.chmod(tmp, 0o644)
    os.replace(tmp, out / "gradebook.csv")
  finally:
    if os.path.exists(tmp): os.unlink(tmp)
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
  failed_rows = sum(1 for r in rows if r["error"])
  print(f"{len(rows)} notebooks graded ({failed_rows} with errors): {out / 'gradebook.csv'}, feedback in "
        f"{out / 'feedback'}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
