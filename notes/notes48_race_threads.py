"""NOTES 48: a data race that one thread hides and two threads show only sometimes.

  PYTHONPATH=. python notes/notes48_race_threads.py [--n 1000] [--runs 20]

Week 2's prefix sum (`out[k] = a[0] + ... + a[k]`, a running value in function-level state) made a THREAD loop: the
threads of the parallel loop share the running value. For 1, 2, 4 and 8 OpenMP threads (Program.threads, whatever
OMP_NUM_THREADS says), it runs the kernel `runs` times and prints in how many runs any value differs from np.cumsum,
and how many values the worst run got wrong. The visible check (uopc.checks.check_threads_agree) compares 8 threads
with one, three times over.
"""
from __future__ import annotations
import argparse
import os
import numpy as np
from uopc.dtype import dtypes
from uopc.render_c import render_c
from uopc.runtime import Program
from uopc.uop import AxisType, Ops, ParamArg, UOp, range_, sink


def prefix_sum_thread(n: int) -> UOp:
  A, OUT = (UOp(Ops.BUFFER, (), ParamArg(s, dtypes.f32, (n,))) for s in (0, 1))
  acc = UOp(Ops.ALLOC, (), ParamArg(0, dtypes.f32, (1,))).after()   # function-level: shared by every thread
  k = range_(n, 0, AxisType.THREAD)                                  # the fault: iteration k needs k - 1
  acck = acc.after(acc.index(0).store(0.0), k)
  new = acck.index(0).load() + A.index(k).load()
  return sink(UOp(Ops.SINK, (acck.index(0).store(new), OUT.index(k).store(new))).end(k))


def main(n: int, runs: int) -> None:
  prg = Program(render_c(prefix_sum_thread(n), "cumsum"), "cumsum")
  a = np.random.default_rng(1).standard_normal(n).astype(np.float32)
  want = np.cumsum(a.astype(np.float64))
  print(f"n = {n}, {runs} runs per thread count, {os.cpu_count()} cores")
  for threads in (1, 2, 4, 8):
    prg.threads, bad = threads, []
    for _ in range(runs):
      out = np.full(n, np.nan, np.float32)
      prg(a, out)
      bad.append(int((~np.isclose(out, want, atol=1e-3)).sum()))
    print(f"{threads} threads: wrong in {sum(b > 0 for b in bad):2d} of {runs} runs, at most {max(bad)} of {n} values")


if __name__ == "__main__":
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--n", type=int, default=1000)
  ap.add_argument("--runs", type=int, default=20)
  args = ap.parse_args()
  main(args.n, args.runs)
