"""Chapter 2's example: compile a C kernel with uopc's runtime and call it on NumPy arrays.

  python examples/ch02_program.py
"""
import time
import numpy as np
from uopc.runtime import Program

ADD = """void add(const float* a, const float* b, float* out, int n) {
  for (int i = 0; i < n; i++) out[i] = a[i] + b[i];
}"""

if __name__ == "__main__":
  t0 = time.perf_counter()
  prg = Program(ADD, "add")                     # compiled once, then loaded from the disk cache (UOPC_CACHE_DIR)
  t_load = time.perf_counter() - t0
  rng = np.random.default_rng(0)
  n = 1_000_000
  a, b = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
  out = np.zeros(n, np.float32)
  prg(a, b, out, n)                             # pointers to the arrays' memory: nothing is copied
  err = np.abs(out - (a + b)).max()
  how = "loaded from the cache" if prg.cached else "compiled"
  print(f"add: {n} float32 elements, out[:3] = {out[:3]}, max |out - (a + b)| = {err} ({how} in {t_load * 1e3:.1f} ms)")
