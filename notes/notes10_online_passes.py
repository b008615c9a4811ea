"""NOTES 10: the online rewrite with the default 4x4 tile makes 16 passes; online_opts makes one.

  OMP_NUM_THREADS=1 python notes/notes10_online_passes.py
"""
import time, numpy as np
from uopc.book import load_example
from uopc.tensor import Tensor
from uopc.kernelize import clear_plan_cache, make_plan, normalize
import uopc.opt as opt
book = load_example("flash_attention")
def cpu(fn, k=3):
  fn(); best = 1e9
  for _ in range(k):
    t0 = time.process_time(); fn(); best = min(best, time.process_time() - t0)
  return best
N, D = 1024, 64
rng = np.random.default_rng(0)
q, k, v = (rng.standard_normal((N, D)).astype(np.float32) for _ in range(3))
real = opt.online_opts
untiled = lambda body, rows=1, keys=1: real(body, 1, 1)   # the head dim unrolled, one row and one key an iteration
for label, patch in (("default 4x4 tile", lambda body, rows=1, keys=1: None), ("head dim unrolled", untiled)):
  opt.online_opts = patch; clear_plan_cache()
  out = book.attention(Tensor(q), Tensor(k), Tensor(v))
  plan = make_plan([out.uop], False, Tensor.opt, True)
  kk = plan.kernels[-1]; _, arrays = normalize([out.uop]); o = np.empty(N * D, np.float32)
  bufs = [arrays[n] if a == "in" else o for a, n in kk.args]
  ms = cpu(lambda: kk.prg(*bufs)) * 1e3
  print(f"{label}: QK^T evaluated x{max(kk.recompute.values()):g} per element, {ms:.1f} ms (1 thread)")
opt.online_opts = real
