"""NOTES 12: fused attention with the RESHAPE rule's simplify disabled is cubic (single-thread CPU time).

  OMP_NUM_THREADS=1 python notes/notes12_cubic.py
"""
import time
import numpy as np
from uopc.book import load_example, reshape_simplify
from uopc.tensor import Tensor
from uopc.kernelize import make_plan, normalize
book = load_example("flash_attention")
def cpu(fn, k=3):
  fn(); best = 1e9
  for _ in range(k):
    t0 = time.process_time(); fn(); best = min(best, time.process_time() - t0)
  return best
for N in (128, 256, 512):
  D = 64
  rng = np.random.default_rng(0)
  q, k, v = (rng.standard_normal((N, D)).astype(np.float32) for _ in range(3))
  res = {}
  for label, on in (("on", True), ("off", False)):
    with reshape_simplify(on):
      out = book.attention(Tensor(q), Tensor(k), Tensor(v))
      plan = make_plan([out.uop], True, book.FlashOpt)
      kk = plan.kernels[-1]
      _, arrays = normalize([out.uop])
      if plan.temp_arrays is None: plan.temp_arrays = [np.empty(n, np.float32) for _, n in plan.temps]
      o = np.empty(N * D, np.float32)
      pick = {"in": arrays, "temp": plan.temp_arrays, "out": [o]}
      for k0 in plan.kernels: k0.prg(*[pick[a][n] for a, n in k0.args])
      bufs = [pick[a][n] for a, n in kk.args]
      t = cpu(lambda: kk.prg(*bufs), k=1 if (label == "off" and N >= 512) else 3)
      res[label] = (t, o.copy(), max(kk.recompute.values()))
  (t_on, o_on, x_on), (t_off, o_off, x_off) = res["on"], res["off"]
  print(f"N={N}: simplify on {t_on*1e3:.2f} ms (QK^T evaluated x{x_on:g}), off {t_off*1e3:.1f} ms (x{x_off:g}), "
        f"ratio {t_off/t_on:.0f}, outputs equal to {np.abs(o_on - o_off).max():.1e}")
