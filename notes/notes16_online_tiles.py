"""NOTES 16: the online rewrite's time for several query-row x key tiles, against the tiled flash kernel.

  OMP_NUM_THREADS=1 python notes/notes16_online_tiles.py 1024
"""
import sys, time, numpy as np
from uopc.book import load_example
from uopc.tensor import Tensor
from uopc.kernelize import clear_plan_cache, make_plan, normalize
from uopc.nn import scaled_dot_product_attention as sdpa
import uopc.opt as opt
book = load_example("flash_attention")
def cpu(fn, k=3):
  fn(); best = 1e9
  for _ in range(k):
    t0 = time.process_time(); fn(); best = min(best, time.process_time() - t0)
  return best
N, D = int(sys.argv[1]), 64
rng = np.random.default_rng(0)
q, k, v = (rng.standard_normal((N, D)).astype(np.float32) for _ in range(3))
real = opt.online_opts
ref = sdpa(q, k, v, splits=1).numpy()
for rows, keys in [(1, 1), (2, 4), (4, 4), (4, 8), (8, 4), (2, 8), (1, 8)]:
  opt.online_opts = lambda body, rows_=1, keys_=1, r=rows, kk=keys: real(body, r, kk); clear_plan_cache()
  out = book.attention(Tensor(q), Tensor(k), Tensor(v))
  plan = make_plan([out.uop], False, Tensor.opt, True)
  _, arrays = normalize([out.uop]); o = np.empty(N * D, np.float32)
  temps = [np.empty(n, np.float32) for _, n in plan.temps]
  pick = {"in": arrays, "temp": temps, "out": [o]}
  calls = [(kk.prg, [pick[a][n] for a, n in kk.args]) for kk in plan.kernels]
  def run_all():
    for prg, b in calls: prg(*b)
  run_all(); kern = plan.kernels[-1]
  ms, err = cpu(run_all) * 1e3, np.abs(o.reshape(N, D) - ref).max()
  print(f"rewrite rows={rows} keys={keys}: {ms:.1f} ms err {err:.1e}, {len(kern.src.splitlines())} lines")
opt.online_opts = real
print(f"flash (nn, incl. packing): {cpu(lambda: sdpa(q, k, v, splits=1))*1e3:.1f} ms")
