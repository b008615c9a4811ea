"""NOTES 29: a fast attention kernel behind a slow call, and the layout that needs no copy before it.

  python notes/notes29_queries_in_lanes.py [--n 1024] [--d 64] [--reps 40] [--causal]

One process, one head, each way timed in turns, best of --reps after a warm-up (PyTorch is not among them: its
OpenMP threads spin after a call and slow whatever runs next; `python -m uopc.bench attention --peers torch` times it
in a process of its own). Keys in the lanes (uopc.kernels.flash_vec, with the tile the tuner would start from):
  kernel, K^T ready       the kernel alone, on a K^T and a padded q made once beforehand
  + K^T copied in         the same, after np.copyto writes the ready K^T again (the same bytes, written by this
                          thread: what the other core's cache then has to fetch)
  + K^T transposed        the same, after making K^T afresh from k (what nn_flash.run does every call)
  nn_flash.run            the whole call: q padded to whole blocks, K^T packed, the kernel, the output sliced
Queries in the lanes (uopc.kernels.flash_vec_q, its heuristic tile):
  kernel                  the kernel alone, on q, k, v as they are
  nn_flash.run            the whole call (nothing to prepare)
  sdpa                    nn.scaled_dot_product_attention(q, k, v): its checks, the call, the Tensor around the result
"""
import argparse
import math
import numpy as np
from uopc.nn import flash as nn_flash
from uopc.bench import header
from uopc.bench.isolated import warm_allocator
from uopc.kernels.flash_vec import FlashVecOpts, kt_panels
from uopc.kernels.flash_vec_q import FlashQOpts
from uopc.nn import scaled_dot_product_attention
from notes28_call_overhead import best_of   # the same timing in turns (notes/ is this script's path)


def main() -> None:
  ap = argparse.ArgumentParser()
  ap.add_argument("--n", type=int, default=1024)
  ap.add_argument("--d", type=int, default=64)
  ap.add_argument("--reps", type=int, default=40)
  ap.add_argument("--causal", action="store_true")
  args = ap.parse_args()
  print(header())
  warm_allocator()   # as the benchmark's workers do: temporaries come from the heap, not fresh pages
  n, d, causal = args.n, args.d, args.causal
  lanes = nn_flash.lanes_here()
  rng = np.random.default_rng(0)
  q, k, v = (rng.standard_normal((1, n, d)).astype(np.float32) for _ in range(3))
  scale = 1 / math.sqrt(d)
  keys_opts, queries_opts = FlashVecOpts(rows=6, kvec=4, dchunk=2, lanes=lanes), FlashQOpts(lanes=lanes)
  if d % (keys_opts.dchunk * lanes): keys_opts = FlashVecOpts(rows=6, kvec=4, dchunk=1, lanes=lanes)
  rows = keys_opts.rows
  nq_p = -(-n // rows) * rows
  q_pad = np.zeros((1, nq_p, d), np.float32); q_pad[:, :n] = q
  kt = kt_panels(k, keys_opts.keys); kt_again = kt.copy()
  out_pad, out = np.empty((1, nq_p, d), np.float32), np.empty((1, n, d), np.float32)
  keys_kernel = nn_flash.program(1, n, n, d, d, causal, scale, keys_opts)
  queries_kernel = nn_flash.program(1, n, n, d, d, causal, scale, queries_opts)
  def copied():
    np.copyto(kt, kt_again); keys_kernel(q_pad, kt, v, out_pad)
  def transposed():
    keys_kernel(q_pad, kt_panels(k, keys_opts.keys), v, out_pad)
  fns = {"keys: kernel, K^T ready": lambda: keys_kernel(q_pad, kt, v, out_pad),
         "keys: + K^T copied in": copied,
         "keys: + K^T transposed": transposed,
         "keys: nn_flash.run": lambda: nn_flash.run(q, k, v, causal, scale, keys_opts),
         "queries: kernel": lambda: queries_kernel(q, k, v, out),
         "queries: nn_flash.run": lambda: nn_flash.run(q, k, v, causal, scale, queries_opts),
         "queries: sdpa": lambda: scaled_dot_product_attention(q, k, v, is_causal=causal)}
  s = q[0].astype(np.float64) @ k[0].T.astype(np.float64) * scale
  if causal: s = s + np.triu(np.full((n, n), -np.inf), 1)
  p = np.exp(s - s.max(-1, keepdims=True))
  want = (p / p.sum(-1, keepdims=True)) @ v[0]
  for opts in (keys_opts, queries_opts):
    err = np.abs(nn_flash.run(q, k, v, causal, scale, opts)[0] - want).max()
    assert err < 1e-4, f"{opts}: max error {err}"
  best = best_of(fns, args.reps)
  flops = 4 * n * n * d * (0.5 if causal else 1)
  base = best["keys: kernel, K^T ready"]
  print(f"# N = {n}, D = {d}, {'causal' if causal else 'not causal'}; keys tile {keys_opts.rows} x {keys_opts.kvec} "
        f"(q padded to {nq_p} rows), queries tile {queries_opts.rows} queries x {queries_opts.keys} keys; "
        f"best of {args.reps}, in turns")
  for name, t in best.items():
    print(f"{name:26s} {t * 1e3:7.3f} ms  {flops / t / 1e9:6.1f} GFLOP/s  {t / base:5.2f}x the first row")


if __name__ == "__main__":
  main()
