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
      z.writestr(info, (ROOT / f).read_bytes(), zipfile.ZIP_DEFLATED)
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
