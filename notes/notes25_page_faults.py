"""NOTES 25: page faults per matmul when a reference cycle keeps the inputs of the previous call alive.

  python notes/notes25_page_faults.py

A recursive closure (the old uop.substitute and UOp.wrap) is a cycle: function -> its cell -> the function. Each
realize left one holding a dict of BUFFER nodes, so the arrays of the last call's Tensors lived on until the cyclic
garbage collector ran, and each new call's copies and output landed on fresh pages. Here the same cycle is made by
hand around each call, then left out.
"""
import resource
import time
import numpy as np
from uopc.opt import VectorOpt
from uopc.tensor import Tensor

N = 1024
rng = np.random.default_rng(0)
a, b = (rng.standard_normal((N, N)).astype(np.float32) for _ in range(2))
Tensor.opt = VectorOpt
faults = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def call(leak_cycle: bool):
  ta, tb = Tensor(a), Tensor(b)
  out = (ta @ tb).numpy()
  if leak_cycle:   # what the recursive closures did: a cycle that holds the inputs
    def hold(): return hold, ta, tb
  return out


for leak in (True, False, True, False):
  for _ in range(3): call(leak)
  f0, t0 = faults(), time.perf_counter()
  reps = 10
  for _ in range(reps): call(leak)
  dt, df = (time.perf_counter() - t0) / reps, (faults() - f0) / reps
  print(f"{'inputs held by a cycle' if leak else 'no cycle             '}  {dt * 1e3:7.2f} ms per call  "
        f"{df:6.0f} page faults per call")
