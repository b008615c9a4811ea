"""Grade a student's notebook with the hidden tests of its solution notebook, in a sandbox.

  python scripts/grade.py mine.ipynb                # points per task, what went wrong, then one line of JSON
  python scripts/grade.py mine.ipynb --solution solutions/week6_flash_attention.ipynb --json score.json
  python scripts/grade.py mine.ipynb --only "merge two states" --timeout 30

Which solution: --solution if given (the teacher's command line); else the week's entry of a fixed table, built
from the grader's own solutions/ (week<N>_*.ipynb): the notebook's metadata (`uopc.assignment`, which the generated
assignment carries) or its title (`# Week 3 ...`) is only a hint, looked up in that table, so a notebook can never
make the grader load a file of its choosing.

How it grades (scripts/grader/): the student's notebook runs in a bubblewrap sandbox (sandbox.py) that sees a
released copy of the student tree, an empty home and nothing of the grader's; there, after the student's cells, the
probe of every hidden test (the part of the cell before `# JUDGE`) calls the student's functions on inputs drawn
from a seed chosen now, and records what they return as plain data. Once the sandbox has ended, the judges (the
part after `# JUDGE`) run here, in the grader's process, comparing those values with references computed here
(judge.py), and report every check that fails. What a judge needs run of the student's code (C compiled and run by
the grader, OpenCL, a speed test, a peak memory) runs in a second, fresh sandbox, one for all of the notebook's jobs,
measured by a process there that never loads the student's code (outside.py, harness.py). A task whose hidden test
lists `# SHORTCUTS:` finds those finished parts of uopc rewritten to raise in the sandbox's copy of the tree
(guards.py); `# SHORTCUTS alone:` tests get a sandbox of their own. Both sandboxes load by name the kernels the grader
compiled itself from the sources earlier sandboxes asked for (trusted.py); `phases` in the result says where the time
went. A test marked `structure` or `speed` counts only when every plain (values) test of its task scored. What the
notebook prints is only a log. The submission must be a regular file: it is read without following a link.

The last line printed is always the result as one line of JSON. Exit status: 0 when the notebook was graded (even
with 0 points), 1 when the sandbox could not be made, 2 for a usage error (no solution, no hidden tests, unknown task).
"""
from __future__ import annotations
import argparse
import atexit
import hashlib
import json
import os
import re
import secrets
import shutil
import stat
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
# nbformat imports jsonschema, which builds rfc3987_syntax's IRI grammar on import (2 s of CPU, more than the rest of
# the grader's imports together); no notebook schema checks an IRI, and jsonschema leaves that format out when the
# module cannot be imported
sys.modules.setdefault("rfc3987_syntax", None)
import nbformat  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE / "grader")]
import guards  # noqa: E402
import judge  # noqa: E402
import notebook_code  # noqa: E402
import outside  # noqa: E402
import redact  # noqa: E402
from phases import Clock  # noqa: E402
import release  # noqa: E402
import sandbox  # noqa: E402
import trusted  # noqa: E402
from kernel import short  # noqa: E402
from runner import setup_source  # noqa: E402

ROOT = HERE.parent
HIDDEN, SETUP = "hidden-test", "hidden-setup"
WEEK = re.compile(r"^\s{0,3}#\s+Week\s+(\d+)\b", re.I | re.M)
TABLE = re.compile(r"^week(\d+)_\w+\.ipynb$")
COURSE = ("uopc/", "examples/", "data/", "assignments/")   # what of the student tree a notebook can import or read
MAX_RESULT = 4 << 20
MAX_NOTEBOOK = 64 << 20   # bytes of a submission read at most


class SubmissionError(ValueError):
  """The submission is not a regular file (a link, a folder, a device) or is too big: never followed, never read."""


def read_submission(path: Path) -> bytes:
  """The bytes of a submission that is a regular file, opened without following a link (O_NOFOLLOW) and checked on
  the open file itself (fstat), so that no name swapped in between is read."""
  try: fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
  except OSError as e:
    if os.path.islink(path): raise SubmissionError("a symbolic link: not followed (grade the file it names)") from None
    raise SubmissionError(f"cannot be opened ({e.strerror})") from None
  with os.fdopen(fd, "rb") as f:
    st = os.fstat(f.fileno())
    if not stat.S_ISREG(st.st_mode): raise SubmissionError("not a regular file")
    if st.st_size > MAX_NOTEBOOK: raise SubmissionError(f"{st.st_size} bytes, more than a notebook may have")
    return f.read(MAX_NOTEBOOK + 1)[:MAX_NOTEBOOK]


def parse_notebook(data: bytes) -> notebook_code.Digest:
  """What the grader reads of the notebook in data (its week, its code cells, their definitions), read in a child
  under a memory and time cap (notebook_code.py), or a ValueError saying what it is not or which cap it passed,
  never quoting it (a submission's bytes are not written into feedback or a gradebook)."""
  return notebook_code.digest(data)


class UsageError(ValueError):
  """The grader was called wrongly (missing solution, no hidden tests, an unknown task): exit status 2."""


def hidden_tests(solution: nbformat.NotebookNode, where: str) -> list[judge.HiddenTest]:
  """Every hidden-test cell of the solution, with the task and points its first line declares."""
  tests = []
  for k, cell in enumerate(solution.cells):
    if cell.cell_type != "code" or HIDDEN not in cell.get("metadata", {}).get("tags", []): continue
    t = judge.parse(cell.source, k, where)
    if t is None: raise UsageError(f"{where}, cell {k}: a hidden test must start with `# POINTS: <task> <points>`")
    tests.append(t)
  if not tests: raise UsageError(f"{where} has no cells tagged {HIDDEN}: nothing to grade with")
  return tests


def setup_cells(solution: nbformat.NotebookNode) -> list[str]:
  """The code of the solution's hidden-setup cells: the judges' helpers (run in the grader's process only)."""
  return [c.source for c in solution.cells if c.cell_type == "code" and SETUP in c.get("metadata", {}).get("tags", [])]


def solution_table(solutions: Path = ROOT / "solutions") -> dict[int, Path]:
  """week -> the solution notebook: the grader's own solutions/week<N>_*.ipynb, nothing else."""
  table: dict[int, Path] = {}
  for p in sorted(solutions.glob("week*.ipynb")):
    if m := TABLE.match(p.name): table[int(m.group(1))] = p
  return table


def find_solution(student: Path, solutions: Path = ROOT / "solutions", data: bytes | None = None) -> Path | None:
  """The solution a student's notebook answers: its metadata's or its title's week, looked up in the table."""
  table = solution_table(solutions)
  try: nb = parse_notebook(read_submission(student) if data is None else data)
  except ValueError: nb = None   # unreadable: grade() scores it 0 if the name still says which week
  if nb is not None:
    by_name = {p.stem: p for p in table.values()}
    if nb.assignment in by_name: return by_name[nb.assignment]
    title = next((text for text in nb.titles if WEEK.search(text)), "")
    if m := WEEK.search(title):
      if int(m.group(1)) in table: return table[int(m.group(1))]
  return {p.name: p for p in table.values()}.get(student.name)


@dataclass
class Report:
  notebook: str
  solution: str
  tasks: dict[str, dict] = field(default_factory=dict)   # task -> {"points", "max", "tests": [...]}
  total: float = 0.0
  max: float = 0.0
  student_cells: dict = field(default_factory=lambda: {"run": 0, "errors": [], "timeouts": 0, "skipped": 0})
  kernel_restarts: int = 0
  stops: list = field(default_factory=list)   # cells a guarded uopc function stopped (guards.py): no points lost
  note: str = ""
  seed: int = 0
  phases: dict = field(default_factory=dict)   # seconds per phase (where the time goes): grader/phases.py


_course: Path | None = None


def course_tree() -> Path:
  """The student tree the sandbox sees at /course: made once per process with the release's rules (scripts/release.py:
  git-tracked files, no solutions, no grader), only the folders a notebook imports or reads."""
  global _course
  if _course is None:
    dest = Path(tempfile.mkdtemp(prefix="uopc-course-"))
    atexit.register(shutil.rmtree, dest, True)
    for f in release.tracked(ROOT):
      if f.startswith(COURSE) and release.wanted(f) and (ROOT / f).is_file():
        (dest / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ROOT / f, dest / f)
    for d, dirs, files in os.walk(dest):   # readable by the sandbox's UID, writable by nobody there
      os.chmod(d, 0o755)
      for name in files: os.chmod(os.path.join(d, name), 0o644)
    if problems := release.leaks(dest): raise RuntimeError("the student tree leaks solutions: " + "; ".join(problems))
    _course = dest
  return _course


def seeds_folder() -> Path:
  return Path(os.environ.get("UOPC_GRADER_SEEDS") or Path.home() / ".cache" / "uopc-grader" / "seeds")


def seed_cache(solution: Path) -> Path | None:
  """What a run of the week's assignment (the stubs: the teacher's code only, no student's) leaves in ~/.cache: the
  compiled kernels of the notebook's given code, PoCL's builds. Every sandbox of that week starts with a private
  copy of it, so a grading does not compile them again; nothing a student's notebook writes ever gets into it. Made
  once per assignment, student tree and Python, in seeds_folder(); None when there is no assignment to run."""
  assignment = ROOT / "assignments" / solution.name
  if not assignment.is_file(): return None
  key = hashlib.sha256(assignment.read_bytes() + _course_hash().encode() + sys.version.encode()).hexdigest()[:24]
  dest = seeds_folder() / f"{solution.stem}-{key}"
  if dest.is_dir(): return dest
  job = Path(tempfile.mkdtemp(prefix="uopc-seed-"))
  try:
    nb = nbformat.read(assignment, as_version=4)
    plan = {"cwd": sandbox.HOME, "cells": notebook_code.student_cells(nb), "probes": [], "seed": 0, "timeout": 120,
            "test_timeout": 60, "budget": 900, "export_cache": True}
    _run_sandbox(plan, job / "out", wall=1200)
    trusted.adopt(job / "out" / "sources")   # the given code's kernels, compiled by the grader, for every sandbox
    made = job / "out" / "cache"
    made.mkdir(exist_ok=True)   # an empty seed, if the run left nothing: it is not made again every time
    for d, dirs, files in os.walk(made):   # the grader's now: every sandbox's UID reads it, none writes it
      for name in [d, *(os.path.join(d, f) for f in files)]:
        if os.path.islink(name): os.unlink(name); continue
        if os.geteuid() == 0: os.chown(name, 0, 0)
        os.chmod(name, 0o755 if os.path.isdir(name) else 0o644)
    dest.parent.mkdir(parents=True, exist_ok=True)
    try: made.rename(dest)
    except OSError: pass   # another grader made it first
  finally:
    shutil.rmtree(job, ignore_errors=True)
  return dest if dest.is_dir() else None


_hash: str | None = None


def _course_hash() -> str:
  global _hash
  if _hash is None:
    h = hashlib.sha256()
    for p in sorted(course_tree().rglob("*")):
      if p.is_file(): h.update(str(p.relative_to(course_tree())).encode() + p.read_bytes())
    _hash = h.hexdigest()
  return _hash


def _run_sandbox(plan: dict, out: Path, wall: float, warm: Path | None = None, course: Path | None = None
                 ) -> sandbox.Result:
  """runner.py in a sandbox on plan; out receives its /job/out; warm, a seed_cache() it starts its ~/.cache from;
  course, the student tree it sees (a guarded copy, guards.py; the plain one by default)."""
  python = "/venv/bin/python" if sys.prefix != sys.base_prefix else sys.executable
  ro = [(str(course or course_tree()), "/course"), (str(HERE / "grader"), "/grader")] + \
    ([(str(warm), "/seed")] if warm else [])
  return sandbox.run([python, "/grader/runner.py"], ro + trusted.binds(), out, json.dumps(plan).encode(),
                     sandbox.Limits(wall_s=wall), env=trusted.ENV)


_guarded: dict[tuple, Path] = {}


def guarded_course(names: dict[str, list[str]]) -> Path:
  """The student tree with `names` (name -> the tasks it answers) rewritten to raise (guards.py), made once per
  process and set of names."""
  key = tuple(sorted((n, tuple(t)) for n, t in names.items()))
  if not names: return course_tree()
  if key not in _guarded:
    dest = Path(tempfile.mkdtemp(prefix="uopc-guarded-"))
    atexit.register(shutil.rmtree, dest, True)
    try: _guarded[key] = guards.guarded_tree(course_tree(), names, dest)
    except ValueError as e: raise UsageError(str(e)) from None
  return _guarded[key]


def sandbox_runs(tests: list[judge.HiddenTest]) -> list[tuple[dict[str, list[str]], list[int]]]:
  """(the names to guard, the tests) of every sandbox a grading needs: one for the tests whose guards (if any) the
  notebook can run with, guarding all of those at once; one more per set of `# SHORTCUTS alone:` names."""
  shared: dict[str, list[str]] = {}
  alone: dict[frozenset, list[int]] = {}
  for k, t in enumerate(tests):
    for g in t.shortcuts:
      if not g.alone and t.task not in shared.setdefault(g.name, []): shared[g.name].append(t.task)
    if names := frozenset(g.name for g in t.shortcuts if g.alone): alone.setdefault(names, []).append(k)
  main = [k for k, t in enumerate(tests) if not any(g.alone for g in t.shortcuts)]
  out = [(shared, main)] if main or not alone else []
  for names, idx in alone.items():
    own = {n: list(v) for n, v in shared.items()}
    for n in names: own.setdefault(n, []).extend(t for t in dict.fromkeys(tests[k].task for k in idx)
                                                 if t not in own[n])
    out.append((own, idx))
  return out


def read_result(out: Path) -> dict:
  """The runner's result.json, as untrusted data: {} if missing, too big or malformed."""
  p = out / "result.json"
  try:
    if p.is_symlink() or not p.is_file() or p.stat().st_size > MAX_RESULT: return {}
    r = json.loads(p.read_text())
  except (OSError, ValueError, RecursionError): return {}
  return r if isinstance(r, dict) else {}


def _cells_report(r: dict) -> tuple[dict, list[dict]]:
  """The student cells' report, and the cells a guard stopped (guards.py): those are no error of the student's."""
  c = r.get("cells") if isinstance(r.get("cells"), dict) else {}
  num = lambda x: x if type(x) is int and x >= 0 else 0
  errors = [{"cell": num(e.get("cell")), "status": short(e.get("status", "error"))[:10],
             "error": short(e.get("error", ""))} for e in c.get("errors", []) if isinstance(e, dict)][:500] \
    if isinstance(c.get("errors"), list) else []
  stops = [e for e in errors if guards.STOP.match(e["error"])]
  errors = [e for e in errors if not guards.STOP.match(e["error"])]
  return {"run": num(c.get("run")), "errors": errors, "timeouts": num(c.get("timeouts")),
          "skipped": num(c.get("skipped"))}, stops


def _probe_outcome(r: dict, k: int) -> tuple[str, str, float]:
  probes = r.get("probes") if isinstance(r.get("probes"), list) else []
  p = next((p for p in probes if isinstance(p, dict) and p.get("test") == k), {"status": "skipped", "error": "not run"})
  status = p.get("status") if p.get("status") in ("ok", "error", "timeout", "dead", "skipped") else "error"
  secs = p.get("seconds") if type(p.get("seconds")) in (int, float) else 0.0
  return status, short(p.get("error", "")), float(secs)


class Judging:
  """The judges of one grading: each test's recorded values (read once), its fixture, the namespace."""

  def __init__(self, tests: list[judge.HiddenTest], ns: dict, fixtures: dict[int, object], batch: outside.Batch):
    self.tests, self.ns, self.fixtures, self.batch, self.values, self.where = tests, ns, fixtures, batch, {}, {}

  def judged(self, k: int, secs: float) -> tuple[str, str, float]:
    """(status, error, seconds) of test k's judge; raises outside.Later when it asked for a job not run yet (its
    verdict, on placeholders, does not count)."""
    t0 = time.perf_counter()
    if k not in self.values: self.values[k] = judge.values_of(self.where[k], k)
    self.batch.missing = False
    status, error = judge.run(self.tests[k], self.values[k], self.ns, self.fixtures.get(k))
    if self.batch.missing: raise outside.Later()
    return status, short(error), secs + time.perf_counter() - t0


def _settle(later: list[int], rows: dict, J: Judging, batch, clock) -> None:
  """Run the jobs the judges of tests `later` asked for (one harness sandbox a round) and judge them again."""
  for _ in range(3):   # a judge that asks twice, the second after seeing the first answer, needs a round more
    if not later or not batch.asked: break
    clock.timed("speed", batch.run)()
    waiting, later = later, []
    for k in waiting:
      try: rows[k].update(zip(("status", "error", "seconds"), J.judged(k, rows[k]["seconds"])))
      except outside.Later: later.append(k)
  for k in later: rows[k].update(status="error", error="the judge asked for a run no sandbox made")


def _strings(value, out: list[str]) -> list[str]:
  """The exception messages inside a recorded value (the `raised` records a judge quotes; a recorded C source is
  not quoted whole, and may name what its probe named)."""
  if isinstance(value, dict):
    if "raised" in value and isinstance(value.get("message"), str): out.append(value["message"])
    for v in value.values(): _strings(v, out)
  elif isinstance(value, (list, tuple)): [_strings(v, out) for v in value]
  return out


def _redact(report: Report, tests: list[judge.HiddenTest], fixtures: dict, seed: int, cells: list,
            values: dict) -> None:
  """Every text of the report that the sandbox wrote or a judge built from recorded values, with any that quotes a
  hidden test, the seed or a printed input withheld (redact.py): feedback carries the student's text and the
  tasks' public messages only."""
  hidden = [t.probe for t in tests] + [setup_source(seed)] + [json.dumps(f)[:65536] for f in fixtures.values()]
  r = redact.Redactor(hidden, seed, [src for _, src in cells], [t.judge or "" for t in tests])
  report.note = r.clean(report.note)
  for e in [*report.student_cells["errors"], *report.stops]: e["error"] = r.clean(e["error"])
  for task in report.tasks.values():
    for row in task["tests"]:
      sandbox, k = row.pop("_sandbox", True), row.pop("_test", None)
      if sandbox: row["error"] = r.clean(row["error"])
      # a judge's message names hidden inputs by design; what it can quote of the student's is what they recorded
      elif any(r.quotes(s, numbers=False) for s in _strings(values.get(k), [])):
        name = redact.NAME.match(row["error"])
        row["error"] = (f"{name.group(1)}: " if name else "") + redact.WITHHELD.format(
          what="what a probe recorded, which quotes the grader's hidden test")


def grade(student: Path, solution: Path | None = None, timeout: float = 120, test_timeout: float = 60,
          budget: float = 900, only: list[str] | None = None, seed: int | None = None,
          data: bytes | None = None) -> Report:
  """Grade the notebook at `student` (data: its bytes, when the caller read them already, grade_all)."""
  if data is None:
    try: data = read_submission(student)
    except SubmissionError as e: raise UsageError(f"{student}: {e}") from None
  solution = solution or find_solution(student, data=data)
  if solution is None or not solution.is_file():
    raise UsageError(f"no solution notebook for {student} (looked up: {solution}): pass --solution "
                     f"(make grade NB=... SOL=...)")
  solution_nb = nbformat.read(solution, as_version=4)
  tests = hidden_tests(solution_nb, str(solution))
  if only:
    known = {t.task.lower(): t.task for t in tests}
    unknown = [o for o in only if o.lower() not in known]
    if unknown: raise UsageError(f"unknown task(s) {unknown}; the tasks are {sorted(set(known.values()))}")
    tests = [t for t in tests if t.task.lower() in {o.lower() for o in only}]
  runs = sandbox_runs(tests)
  courses = [guarded_course(names) for names, _ in runs]   # a declaration the tree lacks: a usage error, now
  seed = secrets.randbelow(2**31) if seed is None else seed
  report = Report(str(student), str(solution), seed=seed)
  for t in tests:
    task = report.tasks.setdefault(t.task, {"points": 0.0, "max": 0.0, "tests": []})
    task["max"] += t.points
    report.max += t.points
  try: nb = parse_notebook(data)
  except ValueError as e:   # not UTF-8, not JSON, not a notebook: scored, with every task at 0
    report.note = f"the notebook could not be read: {e}"
    for t in tests: report.tasks[t.task]["tests"].append({"cell": t.cell, "kind": t.kind, "points": 0.0,
                                                          "max": t.points, "status": "skipped", "error": "",
                                                          "seconds": 0.0})
    return report
  cells = nb.cells
  job = Path(tempfile.mkdtemp(prefix="uopc-grade-"))
  clock = Clock(report.phases)
  try:
    batch = outside.Batch(course_tree(), nb.defs)
    ns = judge.namespace(setup_cells(solution_nb), seed, **batch.functions())
    fixtures = {k: judge.make_fixture(t, ns) for k, t in enumerate(tests) if t.fixture is not None}
    J = Judging(tests, ns, fixtures, batch)
    wall = budget + (len(tests) + 3) * (test_timeout + 10) + 60
    clock.lap("course")
    warm = seed_cache(solution)
    clock.lap("seed_cache")
    results = []
    for r, ((names, idx), course) in enumerate(zip(runs, courses)):
      plan = {"cwd": sandbox.HOME, "cells": cells, "seed": seed, "timeout": timeout, "test_timeout": test_timeout,
              "budget": budget, "probes": [{"test": k, "source": tests[k].probe, "fixture": fixtures.get(k)}
                                           for k in idx]}
      out = job / f"out{r}"
      ran = _run_sandbox(plan, out, wall, warm, course)
      clock.lap("sandbox")
      result = read_result(out)
      results.append(result)
      for k in idx: J.where[k] = out
      if r == 0:
        clock.inside(result)
        report.student_cells, stops = _cells_report(result)
        restarts = result.get("restarts")
        report.kernel_restarts = restarts if type(restarts) is int and restarts >= 0 else 0
        if isinstance(result.get("note"), str): report.note = short(result["note"])
        if ran.timed_out: report.note = short(f"the sandbox ran past {wall:.0f} s and was stopped. {report.note}")
        elif not result: report.note = short(f"the sandbox ended (status {ran.returncode}) without a result: "
                                             f"{ran.log[-300:]}")
      else:   # a sandbox of its own for some tasks: its stops are expected wherever the notebook uses what it guards
        tasks = ", ".join(dict.fromkeys(tests[k].task for k in idx))
        stops += [dict(e, alone=tasks) for e in _cells_report(result)[1] if e["cell"] not in {x["cell"] for x in stops}]
      report.phases["kernels_adopted"] = report.phases.get("kernels_adopted", 0) + trusted.adopt(out / "sources")
      clock.lap("adopt")
    report.stops = list({e["cell"]: e for e in reversed(stops)}.values())[::-1]
    by_test = {k: results[r] for r, (_, idx) in enumerate(runs) for k in idx}
    clock.lap("judge_setup")
    rows, later = {}, []
    for k, t in enumerate(tests):
      status, error, secs = _probe_outcome(by_test[k], k)
      rows[k] = {"cell": t.cell, "kind": t.kind, "points": 0.0, "max": t.points, "status": status, "error": error,
                 "seconds": secs, "_sandbox": status != "ok", "_test": k}   # whose text: the sandbox's, or a judge's
      values = [rows[u] for u in range(k) if tests[u].task == t.task and tests[u].kind == "values"]
      if t.kind != "values" and any(v["status"] != "ok" for v in values):
        rows[k].update(status="skipped", error=f"not run: {t.kind} points count only once the values of this task "
                                               f"are right")
      elif status == "ok" and t.judge is not None:
        try: rows[k].update(zip(("status", "error", "seconds"), J.judged(k, secs)))
        except outside.Later: later.append(k)
    clock.lap("judges")
    _settle(later, rows, J, batch, clock)
    # a speed test that missed its bar is timed again, twice at most, and keeps its best round: other work on the
    # grading machine (make grade-all JOBS=4) only ever makes a kernel look slower, never faster. Not one whose task's
    # values failed in the same round (it is skipped below): timing it again would change nothing
    values_ok = lambda task: all(rows[u]["status"] == "ok" for u, x in enumerate(tests)
                                 if x.task == task and x.kind == "values")
    timed = [k for k in later if tests[k].kind == "speed" and values_ok(tests[k].task)]
    for _ in range(2):
      missed = [k for k in timed if rows[k]["status"] == "error"]
      if not missed: break
      batch.forget()
      again = {k: dict(rows[k], seconds=0.0) for k in missed}
      for k in missed:
        try: again[k].update(zip(("status", "error", "seconds"), J.judged(k, 0.0)))
        except outside.Later: pass
      _settle([k for k in missed if batch.asked], again, J, batch, clock)
      for k in missed:
        if again[k]["status"] == "ok": rows[k].update(status="ok", error="")
    clock.lap("judges")
    # an answer out of turn in the harness's pipe (harness.ProtocolError, seen by a judge's run or timing): nothing
    # that task's code answered can be believed, so every test of the task scores 0
    broken = {t.task for k, t in enumerate(tests) if "ProtocolError" in rows[k]["error"] and not rows[k]["_sandbox"]}
    for k, t in enumerate(tests):
      if t.task in broken and "ProtocolError" not in rows[k]["error"]:
        rows[k].update(status="error", error="not counted: an answer out of turn (a protocol error) in another run "
                                             "of this task")
    for k, t in enumerate(tests):   # structure and speed count only once the task's values are right
      if t.kind != "values" and not values_ok(t.task) and rows[k]["status"] in ("ok", "error"):
        rows[k].update(status="skipped", error=f"not run: {t.kind} points count only once the values of this task "
                                               f"are right")
      row = rows[k]
      row["points"] = t.points if row["status"] == "ok" else 0.0
      report.tasks[t.task]["points"] += row["points"]
      report.total += row["points"]
      report.tasks[t.task]["tests"].append(row)
    _redact(report, tests, fixtures, seed, cells, J.values)
  finally:
    shutil.rmtree(job, ignore_errors=True)
  return report


def advice(task: str, t: dict, stubbed: set[str]) -> list[str]:
  """What a student should do about one task: one line per hidden test that did not score."""
  if t["points"] == t["max"]: return []
  if task in stubbed or all("NotImplementedError" in x["error"] for x in t["tests"] if x["status"] == "error"):
    if any(x["status"] == "error" for x in t["tests"]):
      return [f"not attempted: its stub still raises NotImplementedError(\"{task}\")"]
  out = []
  for x in t["tests"]:
    if x["status"] == "ok": continue
    what = {"values": "values", "structure": "structure", "speed": "speed"}.get(x.get("kind", "values"), "values")
    if x["status"] == "skipped": out.append(f"{what} ({x['max']:g} pt): {x['error'] or 'not run'}")
    elif x["status"] == "timeout": out.append(f"{what} ({x['max']:g} pt): ran past the time limit (an endless loop, "
                                              f"or far too slow)")
    elif x["status"] == "dead": out.append(f"{what} ({x['max']:g} pt): the kernel died (a crash in C: an index out "
                                           f"of bounds?)")
    else:   # every expectation that failed, one a line (judge.run joins them with " | ")
      ename, _, msg = x["error"].partition(": ")
      if ename == "AssertionError" and not msg: msg = "a check failed (no message)"
      elif ename != "AssertionError": msg = f"{ename}: {msg}"
      parts = msg.split(" | ") if ename == "AssertionError" else [msg]
      out.append(f"{what} ({x['max']:g} pt): {parts[0]}")
      out += [f"{' ' * len(what)}   also: {p}" for p in parts[1:]]
  return out


def table(r: Report) -> str:
  """The per-task summary: points, then for every task short of full marks what went wrong."""
  width = max([len(t) for t in r.tasks] + [5])
  stubbed = {e["error"].partition(": ")[2] for e in r.student_cells["errors"]
             if e["error"].startswith("NotImplementedError: ")}
  lines = [f"{'task':<{width}}  {'points':>11}"]
  for name, t in r.tasks.items():
    lines.append(f"{name:<{width}}  {t['points']:5g} / {t['max']:<3g}" + ("  ok" if t["points"] == t["max"] else ""))
    lines += [f"{'':<{width}}    - {line}" for line in advice(name, t, stubbed)]
  lines.append(f"{'total':<{width}}  {r.total:5g} / {r.max:<3g}")
  c = r.student_cells
  lines.append(f"student cells: {c['run']} run, {len(c['errors'])} failed ({c['timeouts']} timed out), "
               f"{c['skipped']} skipped; kernel restarts: {r.kernel_restarts}" + (f"; {r.note}" if r.note else ""))
  for e in c["errors"]:
    if not e["error"].startswith("NotImplementedError"):
      lines.append(f"  cell {e['cell']}: {e['status']}: {e['error']}")
  for e in [e for e in r.stops if "alone" not in e]:   # a self-check against uopc's own answer: the rest was graded
    lines.append(f"  cell {e['cell']} stopped (no points lost: the functions it and the cells before it define were "
                 f"graded): {e['error']}")
  for tasks in dict.fromkeys(e["alone"] for e in r.stops if "alone" in e):
    cells = ", ".join(str(e["cell"]) for e in r.stops if e.get("alone") == tasks)
    lines.append(f"  in the sandbox of its own that {tasks} is graded in, uopc's answer to it raises: cells {cells} "
                 f"stopped there (expected, no points lost)")
  return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("notebook", type=Path, help="the student's notebook")
  ap.add_argument("--solution", type=Path, help="the solution notebook (default: the week its metadata or title "
                  "names, looked up in solutions/)")
  ap.add_argument("--json", type=Path, help="also write the result to this file")
  ap.add_argument("--timeout", type=float, default=120, help="seconds each student cell may run (default 120)")
  ap.add_argument("--test-timeout", type=float, default=60, help="seconds each hidden test may run (default 60)")
  ap.add_argument("--budget", type=float, default=900, help="seconds for all the student's cells (default 900)")
  ap.add_argument("--only", action="append", metavar="TASK", help="grade only this task (repeatable)")
  ap.add_argument("--seed", type=int, help="the seed of the hidden tests' inputs (default: a fresh random one)")
  args = ap.parse_args(argv)
  solution = args.solution or find_solution(args.notebook)
  status = 0
  try: report = grade(args.notebook, solution, args.timeout, args.test_timeout, args.budget, args.only, args.seed)
  except UsageError as e:
    print(f"error: {e}", file=sys.stderr)
    report, status = Report(str(args.notebook), str(solution), note=f"usage error: {e}"), 2
  except Exception as e:   # the sandbox could not be made: nothing was graded
    print(f"error: grading failed: {type(e).__name__}: {e}", file=sys.stderr)
    report, status = Report(str(args.notebook), str(solution), note=short(f"grading failed: {e}")), 1
  if status == 0: print(table(report))
  result = asdict(report)
  if args.json: args.json.write_text(json.dumps(result, indent=1) + "\n")
  print(json.dumps(result), flush=True)
  return status


if __name__ == "__main__":
  sys.exit(main())
