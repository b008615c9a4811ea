"""Time the sandboxed grader against the grader before it (issue 27: a week's grade takes at most 1.5x its time then).

  python scripts/grade_timing.py                      # weeks 1, 3 and 6, 3 paired runs each, against c70b5da
  python scripts/grade_timing.py --weeks 1 3 6 --runs 5 --old c70b5da

Each tree grades its own solutions/<week>.ipynb with its own scripts/grade.py (`make grade NB=solutions/<week>.ipynb`
as it was then and as it is now), the old one from a `git worktree add` checkout (--old-tree, made if missing) with
its own PYTHONPATH. Untimed runs first warm their caches (one of the old grader: its kernel cache; two of the new one:
its seed cache, and its compiled-kernel cache, which takes a kernel the second time one is asked for), then the runs
are paired and interleaved (old, new, old, new, ...), so that load that comes
and goes hits both alike. Printed: the machine (CPU family/model, cores, date, load before and after), per week the
median seconds of each and their ratio, and the medians of the new grader's phases (its report's `phases`).
Timings taken while other work runs on the machine say where time goes, not what the ratio is.
"""
from __future__ import annotations
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def machine() -> str:
  info = {}
  try:
    for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
      k, _, v = line.partition(":")
      info[k.strip()] = v.strip()
  except OSError: pass
  return (f"{info.get('Model name', platform.processor())} (family {info.get('CPU family', '?')}, model "
          f"{info.get('Model', '?')}), {os.cpu_count()} cores, {platform.python_version()}, "
          f"{datetime.now().isoformat(timespec='seconds')}")


def load() -> str:
  return " ".join(f"{x:.2f}" for x in os.getloadavg())


def solution(tree: Path, week: int) -> Path:
  found = sorted((tree / "solutions").glob(f"week{week}_*.ipynb"))
  if not found: raise SystemExit(f"{tree}: no solutions/week{week}_*.ipynb")
  return found[0]


def old_tree(path: Path, commit: str) -> Path:
  if not (path / "scripts" / "grade.py").is_file():
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(path), commit], check=True)
  return path


def grade_once(tree: Path, week: int, python: str) -> tuple[float, dict]:
  """(wall seconds, the report) of `python scripts/grade.py solutions/<week>.ipynb` run in tree."""
  with tempfile.TemporaryDirectory(prefix="uopc-timing-") as tmp:
    out = Path(tmp) / "report.json"
    env = {**os.environ, "PYTHONPATH": str(tree)}
    t0 = time.perf_counter()
    r = subprocess.run([python, "scripts/grade.py", str(solution(tree, week).relative_to(tree)), "--json", str(out)],
                       cwd=tree, env=env, capture_output=True, text=True)
    dt = time.perf_counter() - t0
    report = json.loads(out.read_text()) if out.is_file() else {}
  if r.returncode != 0 or report.get("total") != report.get("max"):
    print(f"  warning: {tree.name} week {week}: exit {r.returncode}, {report.get('total')} / {report.get('max')} "
          f"points: {r.stderr[-300:]}", file=sys.stderr)
  return dt, report


def main() -> int:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--weeks", type=int, nargs="+", default=[1, 3, 6])
  ap.add_argument("--runs", type=int, default=3, help="paired runs per week (default 3)")
  ap.add_argument("--old", default="c70b5da", help="the commit of the grader before the sandbox (default c70b5da)")
  ap.add_argument("--old-tree", type=Path, default=Path("/tmp/grader-old"), help="its worktree (made if missing)")
  ap.add_argument("--python", default=sys.executable, help="the Python both run with (the venv's)")
  ap.add_argument("--no-warmup", action="store_true", help="time the first runs too (cold caches)")
  ap.add_argument("--keep-kernels", action="store_true", help="leave the new grader's kernel cache as it is (default: "
                  "an empty one of this script's, so that the warm-up runs are what fills it)")
  args = ap.parse_args()
  old, new = old_tree(args.old_tree, args.old), ROOT
  if not args.keep_kernels:   # the new grader's compiled kernels: this script's own, so a run starts the same anywhere
    kernels = tempfile.TemporaryDirectory(prefix="uopc-timing-kernels-")
    os.environ["UOPC_GRADER_KERNELS"] = kernels.name
  print(f"machine: {machine()}")
  print(f"old: {old} at {args.old}; new: {new}; load before: {load()}")
  rows = []
  for week in args.weeks:
    if not args.no_warmup:
      grade_once(old, week, args.python)
      for _ in range(2): grade_once(new, week, args.python)
    t_old, t_new, phases = [], [], []
    for _ in range(args.runs):
      t_old.append(grade_once(old, week, args.python)[0])
      dt, report = grade_once(new, week, args.python)
      t_new.append(dt)
      p = report.get("phases", {})
      phases.append({**p, "process": dt - p.get("total", 0.0)})   # Python's start, imports, exit: outside grade()
    mo, mn = statistics.median(t_old), statistics.median(t_new)
    rows.append((week, mo, mn))
    each = lambda ts: " ".join(f"{t:.2f}" for t in ts)
    print(f"week {week}: old {mo:6.2f} s  new {mn:6.2f} s  ratio {mn / mo:.2f}  (old {each(t_old)}; new {each(t_new)})",
          flush=True)
    names = [k for k in phases[0] if all(k in p for p in phases)] if phases else []
    print("  new phases (median s): " + ", ".join(f"{k} {statistics.median(p[k] for p in phases):.2f}" for k in names))
  print(f"load after: {load()}")
  worst = max(mn / mo for _, mo, mn in rows)
  print(f"largest ratio {worst:.2f} (acceptance: at most 1.5, on a quiet machine)")
  return 0


if __name__ == "__main__":
  sys.exit(main())
