"""Grade a whole class: every notebook in a folder, each in its own sandbox, several at once, resumable.

  python scripts/grade_all.py submissions/                  # make grade-all DIR=submissions/ [JOBS=N]
  python scripts/grade_all.py submissions/ --out grades/ --seed 7 --force

Writes, in --out (default: <folder>/grades): gradebook.csv, one row per entry named *.ipynb (student, week, points per
task, total, max, errors, feedback), feedback/<file>.txt, the table `make grade` prints (what was wrong, task by task),
reports/<file>.json, the whole report `make grade --json` writes (every hidden test's status, message and time, the
student's cells' errors: for a script that reviews the class, or a regrade request), and canvas.csv and moodle.csv, the
totals as Canvas's and Moodle's grade imports take them, a student's id read from the file name as scripts/grading.toml
says (scripts/gradebook.py). The student is the entry's path in the folder without `.ipynb` (alice.ipynb -> alice,
alice/week3.ipynb -> alice/week3; a name that is not UTF-8 is shown with its odd bytes escaped, \\xff). Every entry gets
its row, whatever it is:
- a regular file is graded (read through a descriptor opened without following links); one that crashes, hangs or is
  no notebook is a row with its error, and the batch goes on;
- anything else named *.ipynb (a symbolic link, a folder, a pipe) is a row with an error and is never followed or read;
  folders that are links are not entered.
The output folder is opened without following a link at any component of its path (a link named `grades` in the
submissions folder is refused, and nothing is written); every file is made inside it through that open folder.

At scale: each graded notebook's row is kept in <out>/.cache/ under a key made of the grader's version (a hash of the
grader's code, the solutions and the student tree), the notebook's SHA-256, the seed and the limits, as soon as it is
graded; run the same command again after an interruption and only what is left is graded (--force grades all again).
Notebooks of the same bytes in one batch (the untouched assignment, handed in by several students) are graded once.
The seed of a batch is kept there too, so a resumed batch grades with its first seed. JOBS is bounded by the cores
and the memory free (MEMORY_PER_JOB each); a progress line shows the rate and the time left, the closing line the
cost per notebook and the whole run's time.

A feedback file's name is made from the student's with every character but letters, digits, `.`, `_` and `-`
replaced, flat in feedback/, made unique (a suffix from a hash of the original name) when two students would share
one; the gradebook names each row's file. Files are written to a temporary name and renamed, so an interrupted
batch leaves the previous ones whole; a row that cannot be written is written as an error row instead; a cell that a
spreadsheet would read as a formula (starting with = + - @, a tab or a carriage return) is prefixed with a quote.
Every notebook of one batch gets the same seed (printed), so two students' hidden inputs are the same.
"""
from __future__ import annotations
import argparse
import hashlib
import json
import os
import re
import secrets
import sys
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import grade  # noqa: E402
import gradebook  # noqa: E402
from gradebook import OutDir, OutputError, cell, csv_text  # noqa: E402, F401 (cell: the gradebook's, tested here)

UNSAFE = re.compile(r"[^A-Za-z0-9._-]")
MAX_ERROR = 500
MEMORY_PER_JOB = 3 << 30   # what one notebook's grading may hold at once: its kernel, a harness, the compiler
CACHE = ".cache"
GRADER_FILES = ("scripts/grade.py", "scripts/gradelib.py", "scripts/grader/*.py", "solutions/*.ipynb", "uopc/**/*.py")


@dataclass(frozen=True)
class Entry:
  rel: bytes        # its path in the folder, as the file system has it
  path: Path        # the same, absolute, for opening (os.fsdecode: odd bytes kept as surrogates)
  kind: str         # "file" (a regular file: graded), "link", "folder" or "other" (an error row)

  @property
  def student(self) -> str:
    rel = self.rel[:-len(b".ipynb")] if self.rel.endswith(b".ipynb") else self.rel
    return rel.decode("utf-8", "backslashreplace")


def entries(folder: Path, out: tuple[int, int] | Path | None = None) -> list[Entry]:
  """Every entry named *.ipynb under folder (not in the output folder, out: its (st_dev, st_ino) or path; not in
  .ipynb_checkpoints), by lstat: links are listed, never followed; folders that are links are not entered."""
  root = os.fsencode(folder)
  if isinstance(out, Path):
    try: st = os.stat(out, follow_symlinks=False); out = (st.st_dev, st.st_ino)
    except OSError: out = None
  found: list[Entry] = []

  def walk(d: bytes) -> None:
    try: items = sorted(os.scandir(d), key=lambda e: e.name)
    except OSError: return
    for e in items:
      full = os.path.join(d, e.name)
      if e.is_dir(follow_symlinks=False):
        st = e.stat(follow_symlinks=False)
        if e.name == b".ipynb_checkpoints" or (st.st_dev, st.st_ino) == out: continue
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


def grade_one(path: Path, data: bytes, seed: int, timeout: float, test_timeout: float, budget: float) -> dict:
  """One notebook's row (data: its bytes, read once by the caller, who keyed the cache by them): never raises (an
  error is the row's `error`). `cache` says whether the row is the notebook's own doing, kept for a rerun (not when
  the sandbox or the grader failed)."""
  t0 = time.perf_counter()
  try:
    solution = grade.find_solution(path, data=data)
    if solution is None:   # which week cannot be told: say why, without quoting the file
      try: grade.parse_notebook(data)
      except ValueError as e:
        return failed(f"not graded: {e}, and its name names no week", time.perf_counter() - t0, cache=True)
      return failed("not graded: neither its metadata, its title nor its name says which week it answers",
                    time.perf_counter() - t0, cache=True)
    r = grade.grade(path, solution, timeout, test_timeout, budget, seed=seed, data=data)
    m = grade.TABLE.match(Path(r.solution).name)
    week = int(m.group(1)) if m else ""
    problems = [e["error"] for e in r.student_cells["errors"] if not e["error"].startswith("NotImplementedError")]
    return {"week": week, "tasks": {t: v["points"] for t, v in r.tasks.items()}, "total": r.total, "max": r.max,
            "error": "; ".join(([r.note] if r.note else []) + problems)[:MAX_ERROR], "feedback": grade.table(r),
            "report": asdict(r), "seconds": time.perf_counter() - t0, "cache": True}
  except Exception as e:   # no solution for it, the sandbox could not be made: a row all the same, graded again later
    mine = isinstance(e, (grade.SubmissionError, grade.UsageError))
    why = str(e) if mine else f"{type(e).__name__}: {e}"
    return failed(f"not graded: {why}", time.perf_counter() - t0, cache=mine)


def failed(why: str, seconds: float = 0.0, cache: bool = False) -> dict:
  return {"week": "", "tasks": {}, "total": 0.0, "max": 0.0, "error": why[:MAX_ERROR], "feedback": why + "\n",
          "report": None, "seconds": seconds, "cache": cache}


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


_version: str | None = None


def grader_version() -> str:
  """A hash of everything that decides a grade: the grader's code, the solutions (the hidden tests), uopc."""
  global _version
  if _version is None:
    h = hashlib.sha256()
    for pattern in GRADER_FILES:
      for p in sorted(grade.ROOT.glob(pattern)):
        if p.is_file(): h.update(str(p.relative_to(grade.ROOT)).encode() + b"\0" + p.read_bytes())
    _version = h.hexdigest()[:16]
  return _version


def cache_key(data: bytes, seed: int, limits: tuple) -> str:
  what = json.dumps([grader_version(), hashlib.sha256(data).hexdigest(), seed, list(limits)])
  return hashlib.sha256(what.encode()).hexdigest()[:32] + ".json"


def cached(cache: OutDir, key: str) -> dict | None:
  raw = cache.read(key)
  try: row = json.loads(raw) if raw else None
  except ValueError: return None
  return row if isinstance(row, dict) and {"week", "tasks", "total", "max", "error", "feedback"} <= set(row) else None


def job_bound() -> tuple[int, str]:
  """The most notebooks graded at once that this machine holds: one per core, MEMORY_PER_JOB of free memory each."""
  cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
  free = None
  try:
    with open("/proc/meminfo") as f:
      free = next(int(line.split()[1]) << 10 for line in f if line.startswith("MemAvailable:"))
  except (OSError, StopIteration, ValueError): pass
  by_memory = cores if free is None else max(1, free // MEMORY_PER_JOB)
  return max(1, min(cores, by_memory)), f"{cores} cores" + ("" if free is None else f", {free / 2**30:.0f} GiB free")


def clock(seconds: float) -> str:
  s = int(seconds + 0.5)
  return f"{s // 3600} h {s % 3600 // 60:02d} min" if s >= 3600 else f"{s // 60} min {s % 60:02d} s" if s >= 60 \
    else f"{seconds:.1f} s"


class Progress:
  """One line on stderr: a bar, how many are done, the rate of this run, the time left (a line per 5% or per
  minute when stderr is not a terminal)."""

  def __init__(self, total: int, done: int, quiet: bool):
    self.total, self.done, self.graded, self.quiet = total, done, 0, quiet
    self.t0 = self.last = time.perf_counter()
    self.tty, self.shown = sys.stderr.isatty(), -1

  def step(self) -> None:
    self.done += 1
    self.graded += 1
    if self.quiet: return
    now = time.perf_counter()
    rate = self.graded / max(now - self.t0, 1e-9)
    left = (self.total - self.done) / rate if rate > 0 else 0
    bar = "#" * (30 * self.done // max(self.total, 1))
    line = (f"[{bar:<30}] {self.done}/{self.total} graded, {rate * 60:.1f}/min, {clock(left)} left, "
            f"{clock(now - self.t0)} so far")
    if self.tty: print(f"\r{line}", end="", file=sys.stderr, flush=True)
    elif 20 * self.done // max(self.total, 1) > self.shown or now - self.last > 60 or self.done == self.total:
      self.shown, self.last = 20 * self.done // max(self.total, 1), now
      print(line, file=sys.stderr, flush=True)

  def end(self) -> None:
    if self.tty and not self.quiet: print(file=sys.stderr)


def resolve_seed(cache: OutDir, seed: int | None) -> int:
  """The seed given, else the one this output folder's batch began with, else a fresh one (then kept)."""
  if seed is None:
    raw = cache.read("seed")
    if raw and raw.strip().isdigit(): return int(raw.strip())
    seed = secrets.randbelow(2**31)
  cache.write("seed", f"{seed}\n")
  return seed


def grade_all(folder: Path, out: Path, jobs: int | None = None, seed: int | None = None, timeout: float = 120,
              test_timeout: float = 60, budget: float = 900, quiet: bool = False, force: bool = False,
              config: Path = gradebook.CONFIG, stats: dict | None = None) -> list[dict]:
  """Grade every notebook under folder (but not under out) that its cache does not hold already; write
  out/gradebook.csv, canvas.csv, moodle.csv and feedback/. stats, if given, receives the run's counts and times."""
  t_start = time.perf_counter()
  lms = gradebook.load_config(config)   # a bad config fails before an hour of grading, not after
  bound, _ = job_bound()
  jobs = bound if jobs is None else max(1, min(jobs, bound))
  od = OutDir(out)
  held = [od]
  try:
    cache, fb, reports = od.sub(CACHE), od.sub("feedback"), od.sub("reports")
    held += [cache, fb, reports]
    seed = resolve_seed(cache, seed)
    found = entries(folder, od.identity())
    limits = (timeout, test_timeout, budget)
    rows: dict[bytes, dict] = {e.rel: failed(NOT_GRADED[e.kind]) for e in found if e.kind != "file"}
    todo: list[tuple[Entry, str]] = []   # (entry, its cache key): its bytes are read again when it is graded
    for e in found:
      if e.kind != "file": continue
      try: data = grade.read_submission(e.path)   # O_NOFOLLOW, a regular file: lstat's answer may be stale
      except grade.SubmissionError as err:
        rows[e.rel] = failed(f"not graded: {err}")
        continue
      key = cache_key(data, seed, limits)
      if not force and (row := cached(cache, key)) is not None: rows[e.rel] = row
      else: todo.append((e, key))
    reused = len(rows) - sum(1 for e in found if e.kind != "file")
    if not quiet:
      print(f"{len(found)} notebooks, {reused} graded before (same grader, file and seed: {out / CACHE}), "
            f"{len(todo)} to grade, {jobs} at once", file=sys.stderr)
    bar = Progress(len(found), len(found) - len(todo), quiet)
    job_seconds = 0.0

    def keep(e: Entry, key: str | None, row: dict) -> None:
      nonlocal job_seconds
      rows[e.rel] = row
      job_seconds += row.get("seconds", 0.0)
      if key and row.get("cache"): cache.write(key, json.dumps(row))
      bar.step()

    def job(e: Entry) -> tuple:   # the bytes graded are the bytes keyed: a file changed since the scan is keyed anew
      try: data = grade.read_submission(e.path)
      except grade.SubmissionError as err: return None, failed(f"not graded: {err}")
      return cache_key(data, seed, limits), (e.path, data, seed, timeout, test_timeout, budget)

    # notebooks of the same bytes (the untouched assignment, handed in by several) are graded once: the others get
    # that row, as a later run would from the cache, with their own name in the report
    graded: dict[str, dict] = {}
    def twin(e: Entry, key: str) -> None:
      row = graded[key]
      keep(e, None, dict(row, seconds=0.0, report=row.get("report") and {**row["report"], "notebook": str(e.path)}))
    def done(e: Entry, key: str | None, row: dict) -> None:
      keep(e, key, row)
      if key and row.get("cache"): graded[key] = row

    try:
      if jobs == 1:   # in this process: no pool to start
        for e, _ in todo:
          key, args = job(e)
          if key in graded: twin(e, key)
          else: done(e, key, grade_one(*args) if key else args)
      elif todo:
        with ProcessPoolExecutor(max_workers=jobs) as pool:   # a worker process per job: its sandboxes its own UID
          waiting, running = iter(todo), {}
          twins: dict[str, list[tuple[Entry, tuple]]] = {}   # key -> the entries waiting for its grading
          try:
            while True:
              while len(running) < 2 * jobs and (nxt := next(waiting, None)) is not None:   # a few queued, not all
                key, args = job(nxt[0])
                if key is None: keep(nxt[0], None, args)
                elif key in graded: twin(nxt[0], key)
                elif key in twins: twins[key].append((nxt[0], args))
                else: running[pool.submit(grade_one, *args)], twins[key] = (nxt[0], key), []
              if not running: break
              finished, _ = wait(running, return_when=FIRST_COMPLETED)
              for f in finished:
                try: row = f.result()
                except Exception as err: row = failed(f"not graded: the worker failed ({type(err).__name__})")
                e, key = running.pop(f)
                done(e, key, row)
                for e, args in twins.pop(key, []):   # graded: its row; not (the grader failed): each graded on its own
                  if key in graded: twin(e, key)
                  else: running[pool.submit(grade_one, *args)] = (e, key)
          except BaseException:
            pool.shutdown(wait=False, cancel_futures=True)
            raise
    finally:
      bar.end()
    result = write_outputs(od, fb, reports, found, rows, lms)
    if stats is not None:
      stats.update(notebooks=len(found), reused=reused, graded=bar.graded, jobs=jobs, seed=seed,
                   job_seconds=job_seconds, seconds=time.perf_counter() - t_start)
    return result
  finally:
    for d in held: d.close()


def write_outputs(od: OutDir, fb: OutDir, reports: OutDir, found: list[Entry], rows: dict[bytes, dict],
                  lms) -> list[dict]:
  """gradebook.csv, feedback/, reports/, canvas.csv and moodle.csv, each written whole and renamed into place."""
  names = feedback_names([(e.rel, e.student) for e in found])
  # one column per (week, task), in the order the tasks come in each week's solution
  tasks = list(dict.fromkeys((row["week"], task) for row in sorted(rows.values(), key=lambda r: str(r["week"]))
                             for task in row["tasks"]))
  lines = [["student", "week", *[f"week{wk}: {task}" for wk, task in tasks], "total", "max", "errors", "feedback"]]
  result = []
  for e in found:
    row, student = rows[e.rel], e.student
    try:
      points = [row["tasks"].get(task, "") if row["week"] == wk else "" for wk, task in tasks]
      line = [student, row["week"], *points, row["total"], row["max"], row["error"], f"feedback/{names[e.rel]}"]
      csv_text([line])   # a row that cannot be written fails here, before it is added
      fb.write(names[e.rel], row["feedback"] + "\n")
      if row.get("report") is not None:   # (none for a row that was never graded)
        reports.write(names[e.rel].removesuffix(".txt") + ".json", json.dumps(row["report"], indent=1) + "\n")
    except Exception as err:   # one bad row never costs another its row
      row = failed(f"the row could not be written ({type(err).__name__})")
      line = [student, "", *[""] * len(tasks), 0.0, 0.0, row["error"], ""]
    lines.append(line)
    result.append({"student": student, "feedback_file": names[e.rel], **row})
  od.write("gradebook.csv", csv_text(lines))
  od.write("canvas.csv", csv_text(gradebook.canvas_rows(result, lms)))
  od.write("moodle.csv", csv_text(gradebook.moodle_rows(result, lms)))
  for problem in gradebook.by_student(result, lms)[1][:20]: print(f"gradebook: {problem}", file=sys.stderr)
  return result


def main(argv: list[str] | None = None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("folder", type=Path, help="the folder of submissions (notebooks, at any depth)")
  ap.add_argument("--out", type=Path, help="where to write gradebook.csv and feedback/ (default <folder>/grades)")
  ap.add_argument("--jobs", type=int, help="notebooks graded at once (default: what the cores and memory allow)")
  ap.add_argument("--seed", type=int, help="the seed of the hidden tests' inputs (default: the one this output "
                  "folder's batch began with, else a fresh random one)")
  ap.add_argument("--force", action="store_true", help="grade every notebook again, even those graded before")
  ap.add_argument("--config", type=Path, default=gradebook.CONFIG, help="ids, LMS columns (scripts/grading.toml)")
  ap.add_argument("--timeout", type=float, default=120, help="seconds each student cell may run (default 120)")
  ap.add_argument("--test-timeout", type=float, default=60, help="seconds each hidden test may run (default 60)")
  ap.add_argument("--budget", type=float, default=900, help="seconds for all of one student's cells (default 900)")
  args = ap.parse_args(argv)
  if not args.folder.is_dir(): ap.error(f"{args.folder} is not a folder")
  if args.jobs is not None and args.jobs < 1: ap.error(f"--jobs must be at least 1, not {args.jobs}")
  folder = Path(os.path.realpath(args.folder))   # the teacher's own path, links and all; below it, nothing is followed
  out = args.out or folder / "grades"
  bound, machine = job_bound()
  if args.jobs and args.jobs > bound: print(f"--jobs {args.jobs} cut to {bound} ({machine})", file=sys.stderr)
  stats: dict = {}
  print(f"grading {args.folder}", file=sys.stderr)
  try:
    rows = grade_all(folder, out, args.jobs, args.seed, args.timeout, args.test_timeout, args.budget,
                     force=args.force, config=args.config, stats=stats)
  except OutputError as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  except KeyboardInterrupt:
    print(f"\ninterrupted: what was graded is kept in {out / CACHE}; the same command goes on", file=sys.stderr)
    return 130
  failed_rows, per = sum(1 for r in rows if r["error"]), stats["seconds"] / max(stats["graded"], 1)
  print(f"{len(rows)} notebooks ({stats['graded']} graded now, {stats['reused']} graded before; {failed_rows} with "
        f"errors) in {clock(stats['seconds'])} with seed {stats['seed']}, {stats['jobs']} at once: "
        f"{clock(per)} per notebook, {clock(stats['job_seconds'] / max(stats['graded'], 1))} of one job each; "
        f"{out / 'gradebook.csv'}, canvas.csv, moodle.csv, feedback in {out / 'feedback'}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
