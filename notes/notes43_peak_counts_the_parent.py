"""NOTES 43: a child's peak resident memory (wait4's ru_maxrss) counts what it held before it exec'd, i.e. its parent's
memory at the fork. A parent holding BIG MiB starts `python -c pass`: the child's ru_maxrss is at least BIG MiB; the
same child started by a small process (as the grader's harness.py now does: a `peak` process of its own) is not.

  python notes/notes43_peak_counts_the_parent.py --mib 300
"""
import argparse
import os
import subprocess
import sys


def child_peak_mib() -> float:
  p = subprocess.Popen([sys.executable, "-c", "pass"])
  _, _, usage = os.wait4(p.pid, 0)
  return usage.ru_maxrss / 1024


def main() -> None:
  ap = argparse.ArgumentParser()
  ap.add_argument("--mib", type=int, default=300)
  args = ap.parse_args()
  if os.environ.get("NOTES43_SMALL"):
    print(f"from a small parent:          child's ru_maxrss {child_peak_mib():7.1f} MiB")
    return
  held = bytearray(args.mib << 20)   # resident: every page written
  for k in range(0, len(held), 4096): held[k] = 1
  print(f"from a parent holding {args.mib} MiB: child's ru_maxrss {child_peak_mib():7.1f} MiB")
  subprocess.run([sys.executable, __file__], env={**os.environ, "NOTES43_SMALL": "1"}, check=True)


if __name__ == "__main__":
  main()
