"""`python -m uopc.bench conv`: a small CNN's convolution, (64, 1, 28, 28) through 32 3x3 filters (MNIST's first
layer), in uopc (Tensor.conv2d: a window view plus one REDUCE, vectorized by VectorOpt) and in PyTorch on the CPU, at
1 and 2 threads; each thread count in a process of its own (OpenMP's and PyTorch's thread counts are set when they
start). Times are best-of-reps wall clock of a whole call (uopc: graph, plan lookup, kernel; PyTorch: F.conv2d), the
two in turns; the ratio uopc / torch (below 1: uopc is faster)."""
from __future__ import annotations
import json, os, subprocess, sys, time
from uopc.runtime.process import user_environ

SHAPE, FILTERS = (64, 1, 28, 28), (32, 1, 3, 3)


def _worker(reps: int) -> dict:
  """One thread count (this process's OMP_NUM_THREADS): uopc and torch timed in turns, checked against each other."""
  import numpy as np
  from uopc.opt import VectorOpt
  from uopc.tensor import Tensor
  Tensor.opt = VectorOpt
  rng = np.random.default_rng(0)
  x, w = rng.standard_normal(SHAPE).astype(np.float32), rng.standard_normal(FILTERS).astype(np.float32)
  X, W = Tensor(x), Tensor(w)
  peers = {"uopc": lambda: X.conv2d(W).numpy()}
  try:
    import torch
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    tx, tw = torch.from_numpy(x), torch.from_numpy(w)
    peers["torch"] = lambda: torch.nn.functional.conv2d(tx, tw).numpy()
  except ImportError: pass
  outs = {k: f() for k, f in peers.items()}   # warm: the plan compiled, the allocators warm
  if "torch" in outs: np.testing.assert_allclose(outs["uopc"], outs["torch"], rtol=1e-4, atol=1e-4)
  best = {k: float("inf") for k in peers}
  for _ in range(reps):
    for k, f in peers.items():
      t = time.perf_counter(); f(); best[k] = min(best[k], time.perf_counter() - t)
  return best


def conv(reps: int = 20, threads: tuple[int, ...] = (1, 2)) -> list[str]:
  rows = [f"# conv2d {SHAPE} * {FILTERS} (stride 1, no padding): {2 * 64 * 32 * 26 * 26 * 9 / 1e6:.1f} MFLOP; "
          f"best of {reps} calls, uopc (VectorOpt) and torch in turns, each thread count in its own process",
          f"{'threads':>7s} {'uopc':>10s} {'torch':>10s} {'uopc / torch':>13s}"]
  for n in threads:
    env = user_environ(OMP_NUM_THREADS=str(n))   # torch as the user runs it: not uopc's wait policy
    code = f"import json; from uopc.bench.conv import _worker; print(json.dumps(_worker({reps})))"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    best = json.loads(out.stdout.strip().splitlines()[-1])
    ratio = f"{best['uopc'] / best['torch']:13.2f}" if "torch" in best else f"{'(no torch)':>13s}"
    torch_ms = f"{best['torch'] * 1e3:7.3f} ms" if "torch" in best else f"{'-':>10s}"
    rows.append(f"{n:7d} {best['uopc'] * 1e3:7.3f} ms {torch_ms} {ratio}")
  return rows
