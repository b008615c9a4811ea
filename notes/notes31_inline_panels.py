"""NOTES 31: B's panels packed by the matmul kernel itself (each thread packs the panels it reads) against a copy
kernel that packs them all first; and what the Python around a 512 x 512 matmul costs now.

  python notes/notes31_inline_panels.py [--n 512] [--reps 40]

One process, VectorOpt, every variant timed in turns, best of --reps after a warm-up (NumPy is left out, as in
NOTES 28: OpenBLAS's threads spin after its calls; `python -m uopc.bench gemm` times it in a process of its own):
  copy kernel, kernels   the two kernels of the plan that packs B with a copy kernel, on arrays prepared beforehand
  inline, kernel         the one kernel of the plan that packs each panel inline, likewise
  copy kernel, call      (Tensor.from_numpy(a) @ Tensor.from_numpy(b)).numpy() with the first plan
  inline, call           the same with the second
The copy kernel's plan comes from CopyKernelOpt, VectorOpt with uopc.codegen.gemm_vec deciding as if 1000 threads shared
the panels (never enough of them, so a copy kernel packs them): another optimizer, so the two plans sit side by side
in the plan cache. Then the Python alone: the inline call with its kernel replaced by a no-op.
"""
import argparse
import contextlib
import numpy as np
from uopc.runtime import calls as runtime_calls
from uopc.codegen import gemm_vec
from uopc.bench import header
from uopc.helpers import omp_threads
from uopc.opt import VectorOpt
from uopc.tensor import Tensor
from notes28_call_overhead import best_of, planned_kernels


@contextlib.contextmanager
def gemm_vec_sees(threads: int):
  """uopc.codegen.gemm_vec decides how to pack B as if `threads` OpenMP threads shared the panels."""
  saved, gemm_vec.omp_threads = gemm_vec.omp_threads, (lambda: threads)
  try: yield
  finally: gemm_vec.omp_threads = saved


class CopyKernelOpt(VectorOpt):
  """VectorOpt with every matmul's B packed by a copy kernel first."""
  @classmethod
  def layout(cls, roots, options=None):
    with gemm_vec_sees(1000): return super().layout(roots, options)

  @classmethod
  def lower(cls, body, out, options=None):
    with gemm_vec_sees(1000): return super().lower(body, out, options)


def main() -> None:
  ap = argparse.ArgumentParser()
  ap.add_argument("--n", type=int, default=512)
  ap.add_argument("--reps", type=int, default=40)
  args = ap.parse_args()
  print(header())
  n = args.n
  rng = np.random.default_rng(0)
  a, b = (rng.standard_normal((n, n)).astype(np.float32) for _ in range(2))
  call = lambda: (Tensor.from_numpy(a) @ Tensor.from_numpy(b)).numpy()
  ways = {}
  for name, opt in (("copy kernel", CopyKernelOpt), ("inline", VectorOpt)):
    Tensor.opt = opt
    plan, calls = planned_kernels(a, b)
    assert np.allclose(call(), a.astype(np.float64) @ b, atol=1e-3 * n ** 0.5)
    ways[name] = (calls, opt)
    print(f"# {name}: {len(plan.kernels)} kernel(s), {', '.join(k.name for k in plan.kernels)}")

  def kernels_of(name):
    calls = ways[name][0]
    return lambda: [prg(*bufs) for prg, bufs in calls]

  def call_with(name):
    opt = ways[name][1]
    def run():
      Tensor.opt = opt
      return call()
    return run

  fns = {"copy kernel, kernels": kernels_of("copy kernel"), "inline, kernel": kernels_of("inline"),
         "copy kernel, call": call_with("copy kernel"), "inline, call": call_with("inline")}
  best = best_of(fns, args.reps)
  print(f"# {n} x {n} x {n}, {omp_threads()} threads, best of {args.reps}, in turns")
  for k, s in best.items(): print(f"{k:<22s} {s * 1e3:8.3f} ms")
  print(f"inline saves {(best['copy kernel, kernels'] - best['inline, kernel']) * 1e3:.3f} ms of kernel time and "
        f"{(best['copy kernel, call'] - best['inline, call']) * 1e3:.3f} ms a call; the inline call is "
        f"{(best['inline, call'] - best['inline, kernel']) * 1e3:+.3f} ms beside its kernel")
  invoke = runtime_calls._invoke
  runtime_calls._invoke = lambda prg, args: None   # the Python around the kernel, alone
  try:
    build = lambda: Tensor.from_numpy(a) @ Tensor.from_numpy(b)
    py = best_of({"build": build, "build + realize": call_with("inline")}, args.reps * 5)
  finally: runtime_calls._invoke = invoke
  print(f"Python per call, kernel skipped: building the graph {py['build'] * 1e6:.0f} us, building and realizing "
        f"{py['build + realize'] * 1e6:.0f} us")


if __name__ == "__main__":
  main()
