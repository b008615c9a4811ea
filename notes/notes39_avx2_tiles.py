"""NOTES 39: the AVX2 GEMM tile with and without a tail block, and the keys-layout flash kernel before and after.

  UOPC_MARCH=x86-64-v3 OPENBLAS_CORETYPE=Haswell ATEN_CPU_CAPABILITY=avx2 OMP_NUM_THREADS=1 \\
    PYTHONPATH=. python notes/notes39_avx2_tiles.py [--n 1024] [--d 64] [--reps 10]

(unset OPENBLAS_L2_SIZE; any UOPC_MARCH this CPU runs: the tiles are sized for its registers.) In one run, in turns:
  gemm       the n x n x n matmul kernel of uopc.codegen.gemm_vec with B packed inline (gemm_vec.program, one thread),
             its tile without a tail (the largest of the heuristic's that divides n: 4 x 2 on AVX2) and with one (the
             heuristic's first choice: 6 x 2 on AVX2, a last block of n % 6 rows), against NumPy's a @ b
  flash      softmax(q k^T / sqrt(d)) v for one head of n queries, by uopc.nn.flash.run: the queries layout's
             heuristic, the keys layout with one score tile a softmax step and with the heuristic's several, against
             PyTorch's scaled_dot_product_attention where torch is installed
Every kernel is checked against NumPy in float64 first. Compare the rows of one run, never two runs' times.
"""
from __future__ import annotations
import argparse
import dataclasses
import math
import numpy as np
from uopc.bench import header, interleaved
from uopc.codegen import gemm_vec
from uopc.kernels import flash_vec, flash_vec_q
from uopc.nn import flash as nn_flash
from uopc.render_c import render_c
from uopc.runtime import Program
from uopc.runtime.machine import target


def gemm_fns(n: int, rng) -> tuple[dict, float]:
  isa = target().isa
  a, b = rng.standard_normal((n, n), np.float32), rng.standard_normal((n, n), np.float32)
  want, c = a.astype(np.float64) @ b, np.empty((n, n), np.float32)
  tail = gemm_vec.heuristic_opts(isa, n, n, n, tail=lambda o: True)
  whole = gemm_vec.heuristic_opts(isa, n, n, n)
  fns = {"gemm numpy a @ b": lambda: a @ b}
  for opts in dict.fromkeys((whole, tail)):
    prg = Program(render_c(gemm_vec.program(n, n, n, opts, threads=1), "mm"), "mm")
    prg(a, b, c)
    assert np.abs(c - want).max() < 1e-3 * math.sqrt(n), opts
    label = f"gemm {opts.rows} x {opts.nvec}" + (f" (+ a block of {n % opts.rows})" if n % opts.rows else "")
    fns[label] = lambda prg=prg: prg(a, b, c)
  return fns, 2 * n ** 3


def flash_fns(n: int, d: int, rng) -> tuple[dict, float]:
  isa = target().isa
  q, k, v = (rng.standard_normal((1, n, d)).astype(np.float32) for _ in range(3))
  s = q[0].astype(np.float64) @ k[0].T / math.sqrt(d)
  p = np.exp(s - s.max(-1, keepdims=True))
  want = (p / p.sum(-1, keepdims=True)) @ v[0]
  grouped = flash_vec.default_opts(isa, n)
  variants = {f"flash queries layout {flash_vec_q.default_opts(isa).keys} keys": flash_vec_q.default_opts(isa),
              "flash keys layout, 1 tile a step": dataclasses.replace(grouped, groups=1),
              f"flash keys layout, {grouped.groups} tiles a step": grouped}
  fns = {}
  try:   # the peer first: the ratios are against it
    import torch
    tq, tk, tv = (torch.from_numpy(x)[None] for x in (q, k, v))
    fns["flash torch sdpa"] = lambda: torch.nn.functional.scaled_dot_product_attention(tq, tk, tv)
  except ImportError: pass
  for label, opts in variants.items():
    run = lambda opts=opts: nn_flash.run(q, k, v, False, 1 / math.sqrt(d), opts)
    assert np.abs(run()[0] - want).max() < 1e-4, label
    fns[label] = run
  return fns, 4 * n * n * d


def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--n", type=int, default=1024)
  ap.add_argument("--d", type=int, default=64)
  ap.add_argument("--reps", type=int, default=10)
  args = ap.parse_args()
  rng = np.random.default_rng(0)
  print(header("interleaved", args.reps))
  print(f"# target            {target().isa.name}, {target().isa.lanes} lanes, {target().isa.registers} registers")
  for fns, flops in (gemm_fns(args.n, rng), flash_fns(args.n, args.d, rng)):
    best = interleaved(fns, reps=args.reps)
    first = next(iter(best))
    for label, t in best.items():
      print(f"{label:44s} {t * 1e3:9.3f} ms {flops / t / 1e9:7.1f} GFLOP/s  {best[first] / t:5.2f}x {first}")


if __name__ == "__main__":
  main()
