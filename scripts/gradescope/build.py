"""`make gradescope WEEK=N`: the week's autograder as the zip Gradescope's "Configure Autograder" page takes.

  python scripts/gradescope/build.py 6                    # -> autograder-week6.zip
  python scripts/gradescope/build.py 6 --out /tmp/ag.zip

At the zip's root, as Gradescope wants: setup.sh and run_autograder (scripts/gradescope/), then the course's tree
as `make setup` installs it (pyproject.toml, README.md, requirements.lock, uopc/, examples/, data/, assignments/),
the grader (scripts/grade.py, gradelib.py, release.py, check_lock.py, grader/, gradescope/) and the one solution
notebook of the week, which holds its hidden tests. Gradescope unpacks it into /autograder/source; setup.sh makes
solutions/ root's alone. Only files git tracks go in (never a build folder, a cache, a virtual environment).
"""
from __future__ import annotations
import argparse
import ast
import json
import sys
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE.parent))
import release  # noqa: E402

TREE = ("pyproject.toml", "README.md", "requirements.lock", "uopc/", "examples/", "data/", "assignments/",
        "scripts/grade.py", "scripts/gradelib.py", "scripts/release.py", "scripts/check_lock.py", "scripts/grader/",
        "scripts/gradescope/")
AT_ROOT = ("setup.sh", "run_autograder")
LEADERBOARD_WEEK, LEADERBOARD_TASK = 6, "leaderboard"
# week 6's leaderboard: a hidden test of no points that times the student's blocked kernel (blocked_attention_ir,
# N = 1024, D = 64) against the solution's, both compiled and timed by the grader as every speed test is
# (time_kernels); its judge reports the ratio in its message, which run.py takes out of the report
LEADERBOARD = """\
# POINTS: {task} 0
### BEGIN HIDDEN TESTS
from uopc.render_c import render_c as _render_c
record("flash", str(_render_c(blocked_attention_ir(1024, 64), "flash")))
# JUDGE
import math
from uopc.uop import UOp, Ops, ParamArg, AxisType, sink, range_
from uopc.dtype import dtypes
from uopc.symbolic import simplify
from uopc.render_c import render_c as _render_c
f32, LOG2E = dtypes.f32, 1 / math.log(2)
{reference}
_n = 1024 * 64
_timing = time_kernels(recorded["flash"], "flash", [["f32", [_n]]] * 3 + [["zeros", [_n]]], outputs=[3],
                       reference=str(_render_c(_reference_blocked_attention_ir(1024, 64), "flash")), tol=1e-3)
if "error" in _timing: raise AssertionError(f"leaderboard: {{_timing['error']}}")
raise AssertionError(f"LEADERBOARD {{float(_timing['reference']) / float(_timing['student']):.4f}}")
### END HIDDEN TESTS"""


def reference_kernel(week_py: Path) -> str:
  """The solution's blocked_attention_ir, renamed _reference_blocked_attention_ir, as source text."""
  text = week_py.read_text()
  node = next(n for n in ast.parse(text).body if isinstance(n, ast.FunctionDef) and n.name == "blocked_attention_ir")
  src = ast.get_source_segment(text, node)
  keep = [line for line in src.splitlines() if line.strip() not in ("### BEGIN SOLUTION", "### END SOLUTION")]
  return "\n".join(keep).replace("def blocked_attention_ir(", "def _reference_blocked_attention_ir(", 1)


def with_leaderboard(notebook: bytes, week_py: Path) -> bytes:
  """Week 6's solution notebook with the leaderboard's hidden test at its end."""
  nb = json.loads(notebook)
  source = LEADERBOARD.format(task=LEADERBOARD_TASK, reference=reference_kernel(week_py))
  nb["cells"].append({"cell_type": "code", "execution_count": None, "id": "gradescope-leaderboard",
                      "metadata": {"tags": ["hidden-test"]}, "outputs": [], "source": source})
  return (json.dumps(nb, indent=1) + "\n").encode()


def files(week: int) -> list[str]:
  solutions = sorted(p.name for p in (ROOT / "solutions").glob(f"week{week}_*.ipynb"))
  if len(solutions) != 1:
    raise ValueError(f"week {week}: expected one solutions/week{week}_*.ipynb, found {len(solutions)}")
  chosen = [f for f in release.tracked(ROOT) if f.startswith(TREE) and (ROOT / f).is_file()]
  return sorted(chosen) + [f"solutions/{solutions[0]}"]


def build(week: int, out: Path) -> Path:
  """The zip for week, written to out (replaced whole: a new file renamed over it)."""
  if not isinstance(week, int) or week < 1: raise ValueError(f"week must be a positive int, not {week!r}")
  tmp = out.with_name(f".{out.name}.tmp")
  with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
    for name in AT_ROOT:   # executable: Gradescope runs them as they are
      info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
      info.external_attr = 0o100755 << 16
      z.writestr(info, (HERE / name).read_bytes(), zipfile.ZIP_DEFLATED)
    for f in files(week):
      info = zipfile.ZipInfo(f, date_time=(2020, 1, 1, 0, 0, 0))
      info.external_attr = (0o100755 if f.endswith(".sh") or f.endswith("run_autograder") else 0o100644) << 16
      data = (ROOT / f).read_bytes()
      if f.startswith("solutions/") and week == LEADERBOARD_WEEK:
        data = with_leaderboard(data, (ROOT / f).with_suffix(".py"))
      z.writestr(info, data, zipfile.ZIP_DEFLATED)
    info = zipfile.ZipInfo("scripts/gradescope/week", date_time=(2020, 1, 1, 0, 0, 0))
    info.external_attr = 0o100644 << 16
    z.writestr(info, f"{week}\n")
  tmp.replace(out)
  return out


def main(argv: list[str] | None = None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("week", type=int, help="the week (1-7)")
  ap.add_argument("--out", type=Path, help="the zip (default autograder-week<N>.zip here)")
  args = ap.parse_args(argv)
  try: out = build(args.week, args.out or Path(f"autograder-week{args.week}.zip"))
  except ValueError as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  with zipfile.ZipFile(out) as z: n = len(z.namelist())
  print(f"{out}: {n} files, {out.stat().st_size / 1e6:.1f} MB; upload it on Gradescope's Configure Autograder page")
  return 0


if __name__ == "__main__":
  sys.exit(main())
