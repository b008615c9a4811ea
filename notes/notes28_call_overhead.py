"""NOTES 28: where a 512 x 512 matmul's time goes outside its kernel, and what replay removes.

  python notes/notes28_call_overhead.py [--n 512] [--reps 40]

One process, VectorOpt; each way of computing A @ B is timed in turns, best of --reps after a warm-up (NumPy is not
among them: OpenBLAS's threads spin after its calls and slow whatever runs next; `python -m uopc.bench gemm` times
it in a process of its own):
  kernels only    the plan's two kernels (pack B into panels, the vector matmul) on arrays prepared beforehand
  Tensor(a)       (Tensor(a) @ Tensor(b)).numpy(): the graph built, normalized and looked up, each operand copied
  from_numpy      the same with Tensor.from_numpy (no copies)
  jit             the matmul captured by uopc.jit once and replayed: no graph per call
Then the Python alone: the from_numpy call with the kernels replaced by a no-op, split into building the graph and
realizing it.
"""
import argparse
import math
import time
import numpy as np
from uopc.runtime import calls as runtime_calls
from uopc.bench import header
from uopc.jit import TinyJit
from uopc.kernelize import normalize, plan_for
from uopc.opt import VectorOpt
from uopc.tensor import Tensor


def best_of(fns: dict, reps: int) -> dict:
  for f in fns.values(): f()
  best = {k: math.inf for k in fns}
  for _ in range(reps):
    for k, f in fns.items():
      t = time.perf_counter(); f(); best[k] = min(best[k], time.perf_counter() - t)
  return best


def planned_kernels(a: np.ndarray, b: np.ndarray) -> tuple:
  """The plan of Tensor.from_numpy(a) @ Tensor.from_numpy(b) under Tensor.opt, and its kernels as (Program, arrays)
  pairs on inputs, temporaries and an output prepared here, ready to call without the Python around a realize."""
  norm, arrays = normalize([(Tensor.from_numpy(a) @ Tensor.from_numpy(b)).uop])
  plan = plan_for(norm, Tensor.options())
  temps = [np.empty(size, np.float32) for _, size in plan.temps]
  pick = {"in": arrays, "temp": temps, "out": [np.empty(a.shape[0] * b.shape[1], np.float32)]}
  return plan, [(k.prg, [pick[kind][i] for kind, i in k.args]) for k in plan.kernels]


def main() -> None:
  ap = argparse.ArgumentParser()
  ap.add_argument("--n", type=int, default=512)
  ap.add_argument("--reps", type=int, default=40)
  args = ap.parse_args()
  print(header())
  n = args.n
  rng = np.random.default_rng(0)
  a, b = (rng.standard_normal((n, n)).astype(np.float32) for _ in range(2))
  Tensor.opt = VectorOpt
  plan, calls = planned_kernels(a, b)
  jit = TinyJit(lambda x, y: x @ y)
  fns = {"kernels only": lambda: [prg(*bufs) for prg, bufs in calls],
         "Tensor(a)": lambda: (Tensor(a) @ Tensor(b)).numpy(),
         "from_numpy": lambda: (Tensor.from_numpy(a) @ Tensor.from_numpy(b)).numpy(),
         "jit": lambda: jit(Tensor.from_numpy(a), Tensor.from_numpy(b)).numpy()}
  fns["jit"](); fns["jit"]()   # capture: the first call runs, the second records
  best = best_of(fns, args.reps)
  print(f"# {n} x {n} x {n}, VectorOpt, {len(plan.kernels)} kernels: {', '.join(k.name for k in plan.kernels)}; "
        f"best of {args.reps}, in turns")
  for k, s in best.items():
    print(f"{k:<14s} {s * 1e3:8.3f} ms   {(s - best['kernels only']) * 1e3:+7.3f} ms beside the kernels")
  invoke = runtime_calls._invoke
  runtime_calls._invoke = lambda prg, args: None   # the Python around the kernels, alone
  try:
    build = lambda: Tensor.from_numpy(a) @ Tensor.from_numpy(b)
    py = best_of({"build": build, "build + realize": lambda: build().numpy(), "jit": fns["jit"]}, args.reps * 5)
  finally: runtime_calls._invoke = invoke
  print(f"Python per call, kernels skipped: building the graph {py['build'] * 1e6:.0f} us, building and realizing "
        f"{py['build + realize'] * 1e6:.0f} us; a replay {py['jit'] * 1e6:.0f} us")


if __name__ == "__main__":
  main()
