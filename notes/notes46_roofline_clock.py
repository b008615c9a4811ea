"""NOTES 46: a roofline whose ceiling was measured with another clock than its curves, and NumPy's wall clock.

Chapter 11 drew one core's FMA peak, timed by the wall clock (uopc.bench.peak), over curves of single-thread CPU time.
On a machine whose cores other processes share, the wall clock counts the time slices the peak kernel waited for, the
CPU time does not: the ceiling came out under the measured kernels. This script times the one-thread FMA kernel both
ways, in turns, and the unfused attention of chapter 11 at N = 1024 by CPU time, and prints what uopc.bench.ceiling
draws. Then NumPy's attention at N = 256 and 1024 in uopc.bench.isolated's worker (the sweep's wall clock), with
OpenBLAS's default threads and with one.

  python notes/notes46_roofline_clock.py [--busy K]   # K: processes spinning on the cores meanwhile (started and
                                                       # killed by this script), to make a quiet machine a busy one
"""
import argparse, math, os, subprocess, sys, time
import numpy as np
from threadpoolctl import threadpool_limits
from uopc import bench
from uopc.bench.cases import Case
from uopc.bench.isolated import measure
from uopc.book import load_example
from uopc.runtime import Program
from uopc.runtime.machine import target
from uopc.tensor import Tensor

ap = argparse.ArgumentParser()
ap.add_argument("--busy", type=int, default=0)
ap.add_argument("--reps", type=int, default=5)
args = ap.parse_args()
print(bench.header())
spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy)]
try:
  isa, iters = target().isa, 5_000_000
  fma, out = Program(bench.fma_source(isa, threads=1), "fma_peak"), np.zeros(1, np.float32)
  flops = iters * isa.chains * isa.lanes * 2
  fma(out, iters)
  wall, cpu = math.inf, math.inf
  for _ in range(args.reps):
    w0, c0 = time.perf_counter(), time.process_time()
    fma(out, iters)
    wall, cpu = min(wall, time.perf_counter() - w0), min(cpu, time.process_time() - c0)
  print(f"busy processes: {args.busy}")
  print(f"one-thread FMA kernel, best of {args.reps}: {flops / wall / 1e9:7.1f} GFLOP/s by the wall clock, "
        f"{flops / cpu / 1e9:7.1f} by CPU time")
  fa = load_example("flash_attention")
  rng = np.random.default_rng(0)
  q, k, v = (rng.standard_normal((1024, 64)).astype(np.float32) for _ in range(3))
  run = lambda: fa.attention(Tensor(q), Tensor(k), Tensor(v)).numpy()
  with threadpool_limits(1):
    run()
    best = math.inf
    for _ in range(args.reps):
      t0 = time.process_time(); run(); best = min(best, time.process_time() - t0)
  rate = 4 * 1024 * 1024 * 64 / best / 1e9
  print(f"unfused attention N = 1024, one thread, CPU time: {rate:7.1f} GFLOP/s")
  for name, peak in (("wall-clock peak", flops / wall / 1e9), ("CPU-time peak", flops / cpu / 1e9)):
    roof, what = bench.ceiling(peak, {"unfused, N = 1024": rate})
    print(f"ceiling from the {name}: {roof:7.1f} GFLOP/s, {what}")
  for threads in (None, "1"):
    if threads: os.environ["OPENBLAS_NUM_THREADS"] = threads   # the worker inherits it
    for n in (256, 1024):
      ms = measure(Case("attention", n, 64), "numpy", 3).seconds * 1e3
      print(f"NumPy attention N = {n:4d}, isolated worker, OPENBLAS_NUM_THREADS={threads or '(unset)'}: {ms:8.2f} ms")
finally:
  for p in spinners: p.kill()
