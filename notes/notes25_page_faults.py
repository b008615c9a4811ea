"""NOTES 25: page faults per matmul, from a reference cycle that kept the previous call's inputs alive, and from
glibc giving freed memory back.

  python notes/notes25_page_faults.py

A recursive closure (the old uop.substitute and UOp.wrap) is a cycle: function -> its cell -> the function. Each
realize left one holding a dict of BUFFER nodes, so the arrays of the last call's Tensors lived until the cyclic
garbage collector ran, and each new call's copies and output landed on fresh pages. Here the same cycle is made by
hand around each call (or not), in a child process with uopc's malloc policy (runtime.MALLOC_POLICY) or with glibc's
defaults (MALLOC_TRIM_THRESHOLD_ set, which uopc leaves alone).
"""
import os
import resource
import subprocess
import sys
import time


def child(leak_cycle: bool) -> None:
  import numpy as np
  from uopc.opt import VectorOpt
  from uopc.tensor import Tensor
  N = 1024
  rng = np.random.default_rng(0)
  a, b = (rng.standard_normal((N, N)).astype(np.float32) for _ in range(2))
  Tensor.opt = VectorOpt
  faults = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_minflt
  def call():
    ta, tb = Tensor(a), Tensor(b)
    out = (ta @ tb).numpy()
    if leak_cycle:   # what the recursive closures did: a cycle that holds the inputs
      def hold(): return hold, ta, tb
    return out
  for _ in range(3): call()
  f0, t0, reps = faults(), time.perf_counter(), 10
  for _ in range(reps): call()
  ms, n = (time.perf_counter() - t0) / reps * 1e3, (faults() - f0) / reps
  print(f"{ms:7.2f} ms per call {n:6.0f} page faults per call")


if __name__ == "__main__" and len(sys.argv) > 1:
  child(sys.argv[1] == "cycle")
elif __name__ == "__main__":
  from uopc.bench import header
  print(header())
  for policy in ("uopc's malloc policy", "glibc's defaults"):
    env = dict(os.environ) | ({"MALLOC_TRIM_THRESHOLD_": "131072"} if policy == "glibc's defaults" else {})
    for cycle in ("cycle", "no-cycle"):
      r = subprocess.run([sys.executable, __file__, cycle], env=env, capture_output=True, text=True, check=True)
      print(f"{policy:22s} {'inputs held by a cycle' if cycle == 'cycle' else 'no cycle':24s} {r.stdout.strip()}")
