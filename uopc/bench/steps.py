"""What the training-step benches (`bench gpt`, `bench cnn`) share: the PyTorch peers started in processes of their
own (uopc.bench.gpt_torch's worker), every peer's step timed in turns on the same batches, a step's plan and its
kernels' times, and the table: step time, items/s, GFLOP/s, fraction of the FMA peak, the ratios and a summary line
that `--threads` reads back."""
from __future__ import annotations
import importlib.util, math, os, re, time
import numpy as np
from uopc.bench.gpt_torch import TorchPeers
from uopc.runtime.process import user_environ

SETTLE_S = 0.05   # before each timed step: another peer's OpenMP workers (PyTorch's spin after each region) settle
TORCH_NAMES = {"eager": "torch", "compile": "torch.compile"}

# the ISA PyTorch's kernels use when uopc's are built for a lower x86 level (UOPC_MARCH): ATen's and inductor's
# vector code (ATEN_CPU_CAPABILITY), MKL's GEMM (MKL_ENABLE_INSTRUCTIONS); the user's own settings win
TORCH_ISA = {"x86-64-v3": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"},
             "x86-64-v2": {"ATEN_CPU_CAPABILITY": "default", "MKL_ENABLE_INSTRUCTIONS": "SSE4_2"}}


def cpu_family_model() -> str:
  """lscpu's CPU family and model (x86: /proc/cpuinfo's "cpu family" and "model"): machines that share a model name
  differ here (an AMD EPYC family 25 model 17 is a Zen 4, family 26 a Zen 5), and so do their peaks."""
  try: info = open("/proc/cpuinfo").read()
  except OSError: return "(unknown)"
  fam, mod = (re.search(rf"^{k}\s*:\s*(\S+)", info, re.M) for k in ("cpu family", "model"))
  return f"family {fam.group(1)} model {mod.group(1)}" if fam and mod else "(unknown)"


def user_environment() -> dict[str, str]:
  """The environment as the user gave it, for PyTorch's process: without the OpenMP wait policy uopc sets for its own
  kernels (NOTES 20), and with PyTorch held to the x86 level uopc's kernels are built for (TORCH_ISA)."""
  env = user_environ()
  for k, v in TORCH_ISA.get(os.environ.get("UOPC_MARCH", ""), {}).items(): env.setdefault(k, v)
  return env


def isa_line(env: dict[str, str]) -> str:
  return "# torch's ISA      " + (", ".join(f"{k}={v}" for k, v in env.items() if k in TORCH_ISA["x86-64-v3"])
                                  or "its own choice (the machine's best)")


def start_torch(state, batches, config: dict, train: dict, threads: int, peers: tuple[str, ...], model: str = "gpt"):
  """One PyTorch worker for the peers together: (worker, {peer: None or why not}); (None, why) where torch does not
  import."""
  if not peers: return None, {}
  if importlib.util.find_spec("torch") is None:
    return None, {p: "torch is not importable (optional peer: pip install torch)" for p in peers}
  worker = TorchPeers(user_environment())
  return worker, worker.start(state, batches, config, train, threads, list(peers), model)


def add_torch_peers(peers: dict, workers: dict, ready: dict, notes: list[str], compile_s: dict) -> None:
  """Each ready PyTorch peer as a step function of the batch number in `peers`; torch.compile's first step (its
  compile) run now and timed apart; a peer that cannot run as a note."""
  for p, why in ready.items():
    name = TORCH_NAMES[p]
    if why is not None: notes.append(f"# {name:<16s} skipped: {why}"); continue
    if p == "compile":
      try: compile_s[p] = workers[p].step(p, 0)[0]
      except RuntimeError as e: notes.append(f"# {name:<16s} skipped: {e}"); continue
    peers[name] = (lambda w, p: lambda n: w.step(p, n)[0])(workers[p], p)


def time_in_turns(peers: dict, batches: int, warmup: int) -> dict[str, float]:
  """Best seconds of each peer's step over batches 0..batches-1 after `warmup` of them, the peers in turns on the
  same batch. A uopc peer is timed here (wall clock around the call); a PyTorch peer returns its own step's time."""
  best = {k: math.inf for k in peers}
  for n in range(batches):
    for k, step in peers.items():
      time.sleep(SETTLE_S)
      t = time.perf_counter(); dt = step(n); dt = time.perf_counter() - t if k.startswith("uopc") else dt
      if n >= warmup: best[k] = min(best[k], dt)
  return best


def fma_line(fma: float | None, threads: int, flops: float, counted: str = "uopc's kernels' count") -> str:
  """counted: whose FLOPs the GFLOP/s column divides (one count for every peer: a peer's rate is its time's alone)."""
  return ("# FMA peak         " + (f"{fma:.1f} GFLOP/s ({threads} thread{'s' * (threads > 1)}, measured now)" if fma
                                   else "not measured") + f"; GFLOP/s below: the step's {flops / 1e6:.0f} MFLOP "
          f"({counted}) / step time")


def table(best: dict[str, float], flops: float, items: int, unit: str, fma: float | None) -> list[str]:
  """The peers' rows: step time, `unit`s per second (items a step), GFLOP/s and fraction of the FMA peak."""
  rows = [f"{'impl':<13s} {'step':>10s} {unit + '/s':>10s} {'GFLOP/s':>9s} {'of peak':>8s}"]
  for k, s in best.items():
    frac = f"{flops / s / 1e9 / fma:8.1%}" if fma else f"{'-':>8s}"
    rows.append(f"{k:<13s} {s * 1e3:7.1f} ms {items / s:10.0f} {flops / s / 1e9:9.1f} {frac}")
  return rows


def jit_line(graph) -> list[str]:
  """What the captured step is (uopc.jit's graph), or nothing if none was captured."""
  if graph is None: return []
  st = graph.program.step
  return [f"# uopc jit         one program, one call a step: {graph.kernels} kernels ({st.functions} distinct "
          f"functions; {st.shared} shared out, {st.serial} whole on one thread), {st.copies} write-backs, "
          f"{st.barriers} barriers"]


def ratio_lines(best: dict[str, float], threads: int) -> list[str]:
  ratio = lambda a, b: f"{best[a] / best[b]:.2f}" if a in best and b in best else "-"
  return [f"ratios: uopc jit / torch.compile = {ratio('uopc jit', 'torch.compile')}, uopc / torch = "
          f"{ratio('uopc', 'torch')}, uopc jit / torch = {ratio('uopc jit', 'torch')} (below 1: uopc is faster)",
          f"# summary          threads={threads} " + " ".join(f"{k.replace(' ', '_')}_ms={s * 1e3:.2f}"
                                                           for k, s in best.items())]


def realized_roots(loss, opt) -> list:
  """The UOps opt.step(loss) realizes, gathered as Tensor.realize gathers them: the loss, every new parameter and
  optimizer state, then what that realize computes beside them (autograd.beside: the pending .grads and a clipped
  norm that read a buffer the step overwrites), so that kernel_times finds the step's own plan in the cache instead
  of planning another graph."""
  from uopc import autograd
  updates = opt._updates()
  roots = [loss.uop] + [new.uop for _, new in updates]
  return roots + autograd.beside(roots, {target.uop for target, _ in updates})[1]


def kernel_times(roots: list, reps: int = 5) -> dict:
  """Plan the roots (cached) and run its kernels reps times with one timer per kernel: CPU seconds
  (time.process_time, which other processes do not inflate with one OpenMP thread), best of reps per kernel;
  schedule = normalize + plan lookup, in CPU seconds too."""
  from uopc.dtype import np_dtype
  from uopc.kernelize import normalize, plan_for
  from uopc.tensor import Tensor
  t0 = time.process_time()
  norm, arrays = normalize(roots)
  plan = plan_for(norm, Tensor.options())
  schedule = time.process_time() - t0
  temps = plan.temp_arrays or [np.empty(n, np_dtype(d)) for d, n in plan.temps]
  outs: list[np.ndarray] = []
  for o in plan.outs:
    outs.append(arrays[o[1]] if o[0] == "in" else outs[o[1]] if o[0] == "out" else np.empty(o[1], np_dtype(o[0])))
  pick = {"in": arrays, "temp": temps, "out": outs}
  best = [math.inf] * len(plan.kernels)
  for _ in range(reps):
    for j, k in enumerate(plan.kernels):
      bufs = [pick[kind][n] for kind, n in k.args]
      t = time.process_time(); k.prg(*bufs); best[j] = min(best[j], time.process_time() - t)
  return {"plan": plan, "schedule_s": schedule, "kernel_s": best, "total_s": sum(best),
          "flops": sum(k.flops for k in plan.kernels)}
