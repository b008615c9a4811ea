"""NOTES 2: the unfused attention kernels under plain flags, glibc exp2f, and uopc's flags and inline exp2f.

  OMP_NUM_THREADS=1 python notes/notes02_flags.py
"""
import time, numpy as np
from uopc.tensor import Tensor
from uopc.kernelize import make_plan, normalize, realize
from uopc.runtime import Program
import uopc.runtime as rt
def cpu(fn, k=5):
  fn(); best = 1e9
  for _ in range(k):
    t0 = time.process_time(); fn(); best = min(best, time.process_time() - t0)
  return best
N, D = 1024, 64
rng = np.random.default_rng(0)
q, k, v = (rng.standard_normal((N, D)).astype(np.float32) for _ in range(3))
out = (Tensor(q) @ Tensor(k).T * 0.125).softmax(-1) @ Tensor(v)
plan = make_plan([out.uop], False, Tensor.opt); realize([out.uop], False, Tensor.opt)
_, arrays = normalize([out.uop]); outs = [np.empty(n, np.float32) for _, n in plan.outs]
pick = {"in": arrays, "temp": plan.temp_arrays, "out": outs}
plain = ("-O3", "-march=native", "-fopenmp", "-shared", "-fPIC")
glibc_prelude = "#include <math.h>\n#include <stdbool.h>\n"
for kk in plan.kernels:
  bufs = [pick[a][n] for a, n in kk.args]
  res = []
  variants = [("plain flags, glibc exp2f", plain, glibc_prelude), ("plain flags, inline exp2f", plain, rt.PRELUDE),
              ("uopc flags, inline exp2f", rt.FLAGS, rt.PRELUDE)]
  for label, flags, prelude in variants:
    p = Program(prelude + kk.src, kk.name, flags)
    res.append(f"{cpu(lambda: p(*bufs))*1e3:7.3f}")
  print(f"{kk.name:<14s}", "  ".join(res))
kk = plan.kernels[1]; bufs = [pick[a][n] for a, n in kk.args]
base = ("-O3", "-march=native", "-fopenmp", "-shared", "-fPIC")
assoc = ("-fassociative-math", "-fno-signed-zeros", "-fno-trapping-math")
print("the row max (ms) under single flags:")
for extra in [(), ("-fno-math-errno",), assoc, ("-mprefer-vector-width=256",), ("-fno-trapping-math",),
              ("-fno-signed-zeros",), assoc + ("-fno-tree-vectorize",)]:
  p = Program(rt.PRELUDE + kk.src, kk.name, base + extra)
  print(extra, f"{cpu(lambda: p(*bufs))*1e3:7.3f}")
