"""NOTES 66: the baby GPT's captured step, kernel by kernel: each kernel's C call timed alone (best of --reps, one
thread as the caller's OMP_NUM_THREADS has it), its kind, its matmul problem (M, N, K and the tile) and, with --torch,
PyTorch's (MKL's) time for the same product at the same thread count.

  OMP_NUM_THREADS=1 PYTHONPATH=. python notes/notes66_step_kernels.py [--reps 10] [--top 40] [--torch]
"""
from __future__ import annotations
import argparse, os, time
from collections import defaultdict
import numpy as np
from notes37_baby_step import kind
from uopc.bench.gpt import step_roots
from uopc.codegen import gemm_vec
from uopc.dtype import np_dtype
from uopc.kernelize import normalize, plan_for
from uopc.nn import GPT
from uopc.nn.data import CharTokenizer, get_batch, load_text, split
from uopc.nn.train import configure_optimizer, preset
from uopc.opt import VectorOpt
from uopc.tensor import Tensor


def times(plan, arrays, reps: int) -> list[float]:
  """Each kernel's C call alone, best of reps (the whole plan run reps times, in order, so inputs are real)."""
  temps = [np.empty(n, np_dtype(d)) for d, n in plan.temps]
  outs: list = []
  for o in plan.outs:
    outs.append(arrays[o[1]] if o[0] == "in" else outs[o[1]] if o[0] == "out" else np.empty(o[1], np_dtype(o[0])))
  pick = {"in": arrays, "temp": temps, "out": outs}
  best = [np.inf] * len(plan.kernels)
  for _ in range(reps):
    for j, k in enumerate(plan.kernels):
      conv = [k.prg._convert(i, pick[kd][n], p) for i, ((kd, n), p) in enumerate(zip(k.args, k.prg.params))]
      t = time.perf_counter(); k.prg.fn(*conv); best[j] = min(best[j], time.perf_counter() - t)
  return best


def problem(k) -> tuple | None:
  """(batch, M, N, K) of a matmul kernel, else None."""
  m = gemm_vec._matmul(k.body)
  if m is None: return None
  *batch, M, N = m[0].shape
  return (int(np.prod(batch)) if batch else 1, M, N, m[0].src[0].shape[-1])


def torch_time(p: tuple, reps: int) -> float:
  import torch
  b, M, N, K = p
  A, B = torch.randn(b, M, K), torch.randn(b, K, N)
  f = (lambda: torch.bmm(A, B)) if b > 1 else (lambda: torch.mm(A[0], B[0]))
  f()
  best = np.inf
  for _ in range(reps * 3):
    t = time.perf_counter(); f(); best = min(best, time.perf_counter() - t)
  return best


def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--reps", type=int, default=10)
  ap.add_argument("--top", type=int, default=40)
  ap.add_argument("--torch", action="store_true")
  a = ap.parse_args()
  if a.torch:
    import torch
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", 1)))
  Tensor.opt = VectorOpt
  text = load_text(); tok = CharTokenizer(text); ids, _ = split(tok.encode(text))
  cfg, tc = preset("baby", tok.vocab_size)
  model = GPT(cfg, seed=0); opt = configure_optimizer(model, tc)
  x, y = get_batch(ids, tc.batch, cfg.block_size, np.random.default_rng(0))
  norm, arrays = normalize(step_roots(model, opt, x, y, tc.grad_clip))
  plan = plan_for(norm, Tensor.options())
  best = times(plan, arrays, a.reps)
  total = sum(best)
  print(f"# baby GPT step, {len(plan.kernels)} kernels, C calls {total * 1e3:.2f} ms (best of {a.reps} each), "
        f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}, load average {os.getloadavg()[0]:.2f}")
  kinds: dict[str, list] = defaultdict(lambda: [0, 0.0])
  for k, s in zip(plan.kernels, best): kinds[kind(k)][0] += 1; kinds[kind(k)][1] += s
  for name, (n, s) in sorted(kinds.items(), key=lambda kv: -kv[1][1]):
    print(f"  {name:<62s}{n:5d}{s * 1e3:8.2f} ms{s / total:7.1%}")
  mm: dict[tuple, list] = defaultdict(lambda: [0, 0.0])
  for k, s in zip(plan.kernels, best):
    if (p := problem(k)) is not None: mm[p][0] += 1; mm[p][1] += s
  print("\nmatmul problems (batch, M, N, K): kernels, uopc ms (sum), GFLOP/s" + (", torch ms (sum), GFLOP/s" if a.torch
                                                                              else ""))
  for p, (n, s) in sorted(mm.items(), key=lambda kv: -kv[1][1]):
    fl = 2 * np.prod(p) * n
    line = f"  {str(p):<24s}{n:3d}{s * 1e3:8.2f}{fl / s / 1e9:7.1f}"
    if a.torch:
      t = torch_time(p, a.reps) * n
      line += f"{t * 1e3:9.2f}{fl / t / 1e9:7.1f}"
    print(line)
  print(f"\ntop {a.top} kernels:")
  order = sorted(range(len(best)), key=lambda j: -best[j])
  for j in order[:a.top]:
    k = plan.kernels[j]
    print(f"  {j:4d} {k.name[:40]:<40s}{best[j] * 1e3:8.3f} ms {k.flops / best[j] / 1e9:7.1f} GFLOP/s  {kind(k)[:30]}"
          f"  {problem(k) or tuple(k.body.shape)}")


if __name__ == "__main__":
  main()
