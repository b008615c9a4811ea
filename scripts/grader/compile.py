"""Runs in a compile-only sandbox (trusted.py): the C sources the grader wrote to /job/in, compiled with the compiler
and flags the grader names on stdin, into /job/out/<entry>.so, as many at a time as there are cores. Nothing else
runs here: no notebook, no Python of a student's; a source is only text for the compiler.
"""
from __future__ import annotations
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

IN, OUT = "/job/in", "/job/out"
TIMEOUT = 120   # seconds for one kernel (the sandbox's wall-clock limit bounds them all)
MAX_ERR = 4000  # characters of a compiler's complaint kept


def main() -> int:
  plan = json.loads(sys.stdin.read())

  def build(job: dict) -> None:
    cmd = [plan["cc"], *job["flags"], "-o", f"{OUT}/{job['stem']}.so", f"{IN}/{job['stem']}.c", "-lm"]
    try: r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=TIMEOUT)
    except (OSError, subprocess.TimeoutExpired) as e: err = f"{type(e).__name__}"
    else: err = r.stderr.decode("utf-8", "replace") if r.returncode else ""
    if err:   # why it did not build, for a judge's message (outside.py); trusted.py only looks for the object
      with open(f"{OUT}/{job['stem']}.err", "w") as f: f.write(err[-MAX_ERR:])

  with ThreadPoolExecutor(max(1, os.cpu_count() or 1)) as pool: list(pool.map(build, plan["jobs"]))
  return 0


if __name__ == "__main__":
  sys.exit(main())
