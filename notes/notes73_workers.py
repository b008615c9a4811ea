"""NOTES 73: the test suite under N xdist workers on this machine's cores: wall time, the cores' idle share (from
/proc/stat, every process on the machine counted: run it on a quiet one), and where the workers' seconds go by wing
(pytest's --durations=0). Each run has a cold kernel cache of its own, as CI's has. About 16 minutes a run on 2 cores.

  python notes/notes73_workers.py [N ...]          (default: 2 3)
"""
import collections
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DURATION = re.compile(r"^([\d.]+)s (?:setup|call|teardown)\s+tests/([^/:]+)")


def cpu_ticks() -> tuple[int, int]:
  """(busy, idle) ticks of all cores since boot."""
  f = [int(x) for x in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
  return f[0] + f[1] + f[2] + f[5] + f[6] + f[7], f[3] + f[4]


def run(workers: int) -> None:
  with tempfile.TemporaryDirectory() as cache:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "UOPC_CACHE_DIR": cache, "UOPC_GRADER_KERNELS": f"{cache}/grader"}
    (busy0, idle0), t0 = cpu_ticks(), time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", str(workers), "--dist", "loadfile",
                        "--no-loadscope-reorder", "-p", "no:cacheprovider", "--durations=0", "tests/"],
                       cwd=ROOT, env=env, capture_output=True, text=True)
    wall, (busy1, idle1) = time.perf_counter() - t0, cpu_ticks()
  wings = collections.Counter()
  for line in r.stdout.splitlines():
    if m := DURATION.match(line): wings[m.group(2).removesuffix(".py")] += float(m.group(1))
  idle = (idle1 - idle0) / max(1, busy1 - busy0 + idle1 - idle0)
  print(f"-n {workers}: {wall:.0f} s wall, the cores {idle:.0%} idle; {sum(wings.values()):.0f} worker-s: " +
        ", ".join(f"{w} {s:.0f}" for w, s in wings.most_common()))
  print("   ", r.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
  for n in map(int, sys.argv[1:] or ["2", "3"]): run(n)
