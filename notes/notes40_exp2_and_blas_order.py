"""NOTES 40: the AVX2 form of the vector exp2 in the flash kernel, and a float32 matmul whose additions' order is the
BLAS kernel's.

  UOPC_MARCH=x86-64-v3 OPENBLAS_CORETYPE=Haswell ATEN_CPU_CAPABILITY=avx2 OMP_NUM_THREADS=2 \\
    PYTHONPATH=. python notes/notes40_exp2_and_blas_order.py [--n 1024] [--d 128] [--rounds 5]

(unset OPENBLAS_L2_SIZE.) Two parts:
  exp2    softmax(q k^T / sqrt(d)) v for one head of n queries by uopc.nn.flash's kernel for this problem, compiled
          twice from one source: with the exp2 of f32x8 in its AVX2 form, and with its `#if` switched off (the
          portable form), timed in turns against PyTorch's SDPA where torch is installed. Both are checked against
          NumPy in float64 first.
  order   a 16 x 16 by 16 x 8 float32 matmul of float16 values, as chapter 13's mma check makes it: NumPy's a @ b
          (OpenBLAS, whichever kernel OPENBLAS_CORETYPE or this CPU selects) against the products added one by one in
          k's order. Equal only where the BLAS kernel happens to add in that order: run it with and without
          OPENBLAS_CORETYPE=Haswell.
"""
from __future__ import annotations
import argparse
import math
import os
import time
import numpy as np
from uopc.bench import header
from uopc.nn import flash as nn_flash
from uopc.runtime import Program

AVX2_IF = "#if defined(__AVX2__) && defined(__FMA__) && defined(__x86_64__)"


def exp2_part(n: int, d: int, rounds: int) -> None:
  rng = np.random.default_rng(0)
  q, k, v = (rng.standard_normal((1, n, d)).astype(np.float32) for _ in range(3))
  s = q[0].astype(np.float64) @ k[0].T / math.sqrt(d)
  p = np.exp(s - s.max(-1, keepdims=True))
  want = (p / p.sum(-1, keepdims=True)) @ v[0]
  opts = nn_flash.choose_opts(1, n, n, d, d, False, 1 / math.sqrt(d))
  prg = nn_flash.program(1, n, n, d, d, False, 1 / math.sqrt(d), opts)
  if AVX2_IF not in prg.src: raise SystemExit("this kernel has no f32x8 exp2 (run it with UOPC_MARCH=x86-64-v3)")
  portable = Program(prg.src.replace(AVX2_IF, "#if 0 /* the portable form */"), prg.name, opts.compile.flags)
  forms = {"exp2 AVX2 form": prg, "exp2 portable form": portable}
  fns = {}
  try:
    import torch
    tq, tk, tv = (torch.from_numpy(x)[None] for x in (q, k, v))
    fns["torch sdpa"] = lambda: torch.nn.functional.scaled_dot_product_attention(tq, tk, tv)
  except ImportError: pass
  real_program = nn_flash.program
  for name, form in forms.items():
    def run(form=form):
      nn_flash.program = lambda *a: form   # nn.flash.run calls the kernel it is given here
      try: return nn_flash.run(q, k, v, False, 1 / math.sqrt(d), opts)
      finally: nn_flash.program = real_program
    err = np.abs(run()[0] - want).max()
    assert err < 1e-5, (name, err)
    fns[name] = run
  best = {x: math.inf for x in fns}
  for f in fns.values(): f()
  for _ in range(rounds):
    for x, f in fns.items():
      for _ in range(3):
        t0 = time.perf_counter(); f(); best[x] = min(best[x], time.perf_counter() - t0)
  print(f"flash {n} x {d}, {opts}")
  for x, t in best.items():
    ratio = f"  {best['torch sdpa'] / t:.3f}x SDPA" if "torch sdpa" in best else ""
    print(f"  {x:20s} {t * 1e3:8.3f} ms{ratio}")


def order_part() -> None:
  rng = np.random.default_rng(13)
  a = rng.standard_normal((16, 16)).astype(np.float16).astype(np.float32)
  b = rng.standard_normal((16, 8)).astype(np.float16).astype(np.float32)
  one_by_one = np.zeros((16, 8), np.float32)
  for kk in range(16): one_by_one += a[:, kk:kk + 1] * b[kk:kk + 1, :]   # (each product of halves is exact in float32)
  blas = a @ b
  print(f"order: OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(unset)')}: a @ b equal to the products "
        f"added in k's order: {np.array_equal(blas, one_by_one)}; largest difference "
        f"{np.abs(blas - one_by_one).max():.3g} (values up to {np.abs(one_by_one).max():.3g})")


if __name__ == "__main__":
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--n", type=int, default=1024)
  ap.add_argument("--d", type=int, default=128)
  ap.add_argument("--rounds", type=int, default=5)
  args = ap.parse_args()
  print(header())
  order_part()
  exp2_part(args.n, args.d, args.rounds)
