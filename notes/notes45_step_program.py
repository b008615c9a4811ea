"""NOTES 45: where the baby GPT's replayed training step goes, kernel by kernel (before) and as one program (after).

  PYTHONPATH=. python notes/notes45_step_program.py [--steps 12] [--threads 1 2] [--reps 10]

Four settings, each in a process of its own per thread count (OpenMP reads OMP_NUM_THREADS when it loads), run in
turns: "before" (a kernel per output, the replay calling every kernel from Python: JIT_GRAPH=0, Options.siblings
off), "siblings" (the optimizer's outputs in one kernel, still called one by one), "program" (a kernel per output,
the step as one program), "after" (both). For each it prints:
  kernels          how many the step runs, and the sum of their C calls' times, each timed alone (best of --reps;
                   wall, and the CPU time of every thread)
  step             the replayed step: wall time (best and median of --steps), CPU time (every thread's), and the
                   voluntary context switches a step makes (a thread that waits asleep: a futex, each one a wake-up)
  overhead         step wall time minus the kernels' own: the Python of the calls and OpenMP's regions (before), the
                   barriers and whatever load-balancing the levels could not do (after)
Then, per setting, the 1 -> 2 thread scaling of the step (wall, best). Timings on a shared machine are noisy: the
context switches and the CPU time are what the other processes do not change.
"""
from __future__ import annotations
import argparse, json, os, resource, subprocess, sys, time
import numpy as np

SETTINGS = {"before": (0, False), "siblings": (0, True), "program": (1, False), "after": (1, True)}


def measure(setting: str, steps: int, reps: int) -> dict:
  """One setting in this process: the kernels alone, then the replayed step."""
  from uopc.bench.gpt import _loss_step
  from uopc.helpers import Context
  from uopc.jit import TinyJit
  from uopc.nn import GPT
  from uopc.nn.data import CharTokenizer, get_batch, load_text, split
  from uopc.nn.train import configure_optimizer, freeze_collector, preset
  from uopc.opt import VectorOpt
  from uopc.tensor import Tensor
  graph, siblings = SETTINGS[setting]
  Tensor.opt = VectorOpt
  options = Tensor.options
  Tensor.options = staticmethod(lambda: options().replace(siblings=siblings))
  text = load_text()
  tok = CharTokenizer(text)
  ids, _ = split(tok.encode(text))
  cfg, tc = preset("baby", tok.vocab_size)
  model = GPT(cfg, seed=0)
  opt = configure_optimizer(model, tc)
  rng = np.random.default_rng(0)
  with Context(JIT_GRAPH=graph):
    step = TinyJit(lambda x, y: _loss_step(model, opt, x, y, tc.grad_clip))
    for _ in range(3):   # run, capture (and compile the step program), replay
      x, y = get_batch(ids, tc.batch, cfg.block_size, rng)
      step(Tensor(x), Tensor(y)).item()
  freeze_collector()
  plan = step.steps[0].plan
  kernel_s, kernel_cpu = kernel_times(step.steps[0], [Tensor(x)._data(), Tensor(y)._data()], reps)
  walls, cpus, switches = [], [], []
  for _ in range(steps):
    x, y = get_batch(ids, tc.batch, cfg.block_size, rng)
    xt, yt = Tensor(x), Tensor(y)
    r0, c0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.process_time(), time.perf_counter()
    step(xt, yt)
    t1, c1, r1 = time.perf_counter(), time.process_time(), resource.getrusage(resource.RUSAGE_SELF)
    walls.append(t1 - t0); cpus.append(c1 - c0); switches.append(r1.ru_nvcsw - r0.ru_nvcsw)
  prog = step.graph.program.step if step.graph is not None else None
  return {"setting": setting, "threads": int(os.environ.get("OMP_NUM_THREADS", "0")), "kernels": len(plan.kernels),
          "kernel_ms": sum(kernel_s) * 1e3, "kernel_cpu_ms": sum(kernel_cpu) * 1e3,
          "wall_best_ms": min(walls) * 1e3, "wall_median_ms": np.median(walls) * 1e3,
          "cpu_median_ms": np.median(cpus) * 1e3, "switches_median": float(np.median(switches)),
          "barriers": prog.barriers if prog else None, "functions": prog.functions if prog else None,
          "load": os.getloadavg()[0]}


def kernel_times(st, args: list[np.ndarray], reps: int) -> list[float]:
  """Each kernel's C call alone, best of reps, on the arrays a replay passes it (arguments converted beforehand)."""
  from uopc.dtype import np_dtype
  plan = st.plan
  arrays = [args[s[1]] if s[0] == "arg" else s[1] for s in st.inputs]
  outs: list[np.ndarray] = []
  for o in plan.outs:   # as kernelize.run_kernels: an input passed through, an earlier output, or a fresh array
    outs.append(arrays[o[1]] if o[0] == "in" else outs[o[1]] if o[0] == "out" else np.empty(o[1], np_dtype(o[0])))
  pick = {"in": arrays, "temp": plan.temp_arrays, "out": outs}
  best, cpu = [np.inf] * len(plan.kernels), [np.inf] * len(plan.kernels)
  for _ in range(reps):
    for j, k in enumerate(plan.kernels):
      conv = [k.prg._convert(i, pick[kind][n], p) for i, ((kind, n), p) in enumerate(zip(k.args, k.prg.params))]
      t, c = time.perf_counter(), time.process_time()
      k.prg.fn(*conv)
      best[j], cpu[j] = min(best[j], time.perf_counter() - t), min(cpu[j], time.process_time() - c)
  return best, cpu


def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--steps", type=int, default=12)
  ap.add_argument("--reps", type=int, default=10)
  ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
  ap.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
  ap.add_argument("--worker", help=argparse.SUPPRESS)
  a = ap.parse_args()
  if a.worker:
    print(json.dumps(measure(a.worker, a.steps, a.reps)))
    return
  from uopc.bench import header
  print(header())
  rows = []
  for n in a.threads:   # each setting in its own process, in turns
    for s in a.settings:
      env = {**os.environ, "OMP_NUM_THREADS": str(n)}
      r = subprocess.run([sys.executable, __file__, "--worker", s, "--steps", str(a.steps), "--reps", str(a.reps)],
                         env=env, capture_output=True, text=True)
      if r.returncode: raise SystemExit(r.stderr)
      rows.append(json.loads(r.stdout.strip().splitlines()[-1]))
      m = rows[-1]
      print(f"{n} thread(s) {s:<9s} {m['kernels']:4d} kernels {m['kernel_ms']:7.1f} ms alone (CPU "
            f"{m['kernel_cpu_ms']:6.1f}) | step best "
            f"{m['wall_best_ms']:7.1f} median {m['wall_median_ms']:7.1f} ms, CPU {m['cpu_median_ms']:7.1f} ms, "
            f"{m['switches_median']:5.0f} sleeps | overhead {m['wall_best_ms'] - m['kernel_ms']:+7.1f} ms"
            + (f" | {m['functions']} functions, {m['barriers']} barriers" if m["barriers"] is not None else "")
            + f" | load {m['load']:.1f}", flush=True)
  by = {(m["setting"], m["threads"]): m for m in rows}
  for s in a.settings:
    if (s, 1) in by and (s, 2) in by:
      print(f"scaling 1 -> 2 threads, {s:<9s}: {by[(s, 1)]['wall_best_ms'] / by[(s, 2)]['wall_best_ms']:.2f}x (best), "
            f"{by[(s, 1)]['wall_median_ms'] / by[(s, 2)]['wall_median_ms']:.2f}x (median)")


if __name__ == "__main__":
  main()
