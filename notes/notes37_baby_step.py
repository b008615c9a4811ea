"""NOTES 37: where the baby GPT's training step goes, in uopc and in PyTorch eager.

  PYTHONPATH=. OMP_NUM_THREADS=1 python notes/notes37_baby_step.py [--reps 20] [--steps 6] [--no-torch] [--build]

Prints (1) the captured step's plan: its kernels grouped by kind, each kernel's best-of-reps wall time of the C
call alone, and the Python of calling them (uopc.runtime.program's conversion of every argument); (2) the replayed
step (uopc.jit) and PyTorch eager's step timed in turns on the same batches, best of --steps; (3) torch.profiler's
operators of the eager step; (4) with --build, cProfile of one step built every time (graph building, normalize and
plan lookup). Times on a loaded machine are noisy: compare shares within one run, not numbers across runs.
"""
from __future__ import annotations
import argparse, cProfile, io, os, pstats, time
from collections import defaultdict
import numpy as np
from uopc.bench.gpt import _loss_step, step_roots, torch_peer
from uopc.codegen import gemm_vec
from uopc.dtype import np_dtype
from uopc.jit import TinyJit
from uopc.kernelize import normalize, plan_for
from uopc.nn import GPT
from uopc.nn.data import CharTokenizer, get_batch, load_text, split
from uopc.nn.train import configure_optimizer, preset
from uopc.opt import VectorOpt
from uopc.tensor import Tensor
from uopc.uop import Ops


def kind(k) -> str:
  """A kernel's kind, read from its tensor-level body and its arguments."""
  body, reduces = k.body, [u for u in k.body.toposort() if u.op is Ops.REDUCE]
  if gemm_vec.as_matmul(body) is not None or (reduces and gemm_vec.as_matmul(reduces[-1]) is not None):
    if len(body.shape) == 4: return "attention matmuls (q k^T, p v, their gradients)"
    return "matmul dW (sum over rows)" if body.op is Ops.REDUCE and body.arg[1] > 1 else "matmul"
  if k.args[-1][0] == "out" and not reduces: return "AdamW update (m, v, p)"
  if len(body.shape) == 4 and body.op is Ops.REDUCE and body.arg == (Ops.ADD, 1) and body.src[0].op is Ops.MUL:
    return "attention matmuls (q k^T, p v, their gradients)"   # before gemm_vec took 4-D matmuls: scalar kernels
  if len(body.shape) == 4 or (len(body.shape) == 3 and not reduces and body.shape[-1] == body.shape[-2]):
    return "attention softmax and mask"
  if body.op is Ops.REDUCE and body.shape in ((), (1,)): return "gradient norm (clip)"
  if reduces: return "row reductions (LayerNorm, cross-entropy, biases, embedding)"
  if body.op is Ops.STAGE and body.arg == "panels": return "copies (packed panels)"
  return "elementwise (LayerNorm, GELU, residual)"


def kernel_table(plan, arrays, reps: int) -> list[str]:
  temps = [np.empty(n, np_dtype(d)) for d, n in plan.temps]
  outs: list = []
  for o in plan.outs:
    outs.append(arrays[o[1]] if o[0] == "in" else outs[o[1]] if o[0] == "out" else np.empty(o[1], np_dtype(o[0])))
  pick = {"in": arrays, "temp": temps, "out": outs}
  raw, call = [np.inf] * len(plan.kernels), [np.inf] * len(plan.kernels)
  for _ in range(reps):
    for j, k in enumerate(plan.kernels):
      bufs = [pick[kd][n] for kd, n in k.args]
      t = time.perf_counter(); conv = [k.prg._convert(i, a, p) for i, (a, p) in enumerate(zip(bufs, k.prg.params))]
      t1 = time.perf_counter(); k.prg.fn(*conv); t2 = time.perf_counter()
      raw[j], call[j] = min(raw[j], t2 - t1), min(call[j], t1 - t)
  groups: dict[str, list] = defaultdict(lambda: [0, 0.0, 0])
  for k, s in zip(plan.kernels, raw):
    g = groups[kind(k)]; g[0] += 1; g[1] += s; g[2] += k.flops
  total = sum(raw)
  rows = [f"{len(plan.kernels)} kernels, C calls {total * 1e3:.1f} ms (best of {reps} each), Python of the calls "
          f"(argument conversion) {sum(call) * 1e3:.1f} ms", f"{'kind':<62s}{'kernels':>8s}{'ms':>8s}{'share':>7s}"
          f"{'GFLOP/s':>9s}"]
  for name, (n, s, f) in sorted(groups.items(), key=lambda kv: -kv[1][1]):
    rows.append(f"{name:<62s}{n:8d}{s * 1e3:8.2f}{s / total:7.1%}{f / s / 1e9 if s else 0:9.1f}")
  return rows


def torch_table(tstep, x, y) -> list[str]:
  from torch.profiler import profile, ProfilerActivity
  with profile(activities=[ProfilerActivity.CPU]) as prof:
    for _ in range(3): tstep(x, y)
  ev = [e for e in prof.key_averages() if e.self_cpu_time_total > 0]
  total = sum(e.self_cpu_time_total for e in ev)
  rows = [f"torch.profiler, 3 eager steps: self CPU {total / 1e3:.1f} ms (profiler overhead included)"]
  for e in sorted(ev, key=lambda e: -e.self_cpu_time_total)[:14]:
    rows.append(f"  {e.key[:56]:<56s}{e.count // 3:6d}/step {e.self_cpu_time_total / total:7.1%}")
  return rows


def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--reps", type=int, default=20)
  ap.add_argument("--steps", type=int, default=6)
  ap.add_argument("--no-torch", action="store_true")
  ap.add_argument("--build", action="store_true", help="also cProfile one step built every time")
  a = ap.parse_args()
  Tensor.opt = VectorOpt
  text = load_text(); tok = CharTokenizer(text); ids, _ = split(tok.encode(text))
  cfg, tc = preset("baby", tok.vocab_size)
  model, jmodel = GPT(cfg, seed=0), GPT(cfg, seed=0)
  opt, jopt = configure_optimizer(model, tc), configure_optimizer(jmodel, tc)
  rng = np.random.default_rng(0)
  batches = [get_batch(ids, tc.batch, cfg.block_size, rng) for _ in range(3 + a.steps)]
  print(f"# baby GPT, batch {tc.batch}, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}, load average "
        f"{os.getloadavg()[0]:.2f}")
  x, y = batches[0]
  norm, arrays = normalize(step_roots(model, opt, x, y, tc.grad_clip))
  plan = plan_for(norm, Tensor.options())
  print("\n".join(kernel_table(plan, arrays, a.reps)))
  jstep = TinyJit(lambda x, y: _loss_step(jmodel, jopt, x, y, tc.grad_clip))
  peers = {"uopc jit": lambda x, y: jstep(Tensor(x), Tensor(y)).item()}
  if not a.no_torch: peers["torch"] = torch_peer(model.state_dict(), cfg, int(os.environ.get("OMP_NUM_THREADS", 1)),
                                                 tc)[0]
  best = {k: np.inf for k in peers}
  for n, (x, y) in enumerate(batches):
    for k, f in peers.items():
      t = time.perf_counter(); f(x, y); dt = time.perf_counter() - t
      if n >= 3: best[k] = min(best[k], dt)
  print("step (wall, best of %d, in turns): " % a.steps + ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in best.items())
        + (f", jit / torch {best['uopc jit'] / best['torch']:.2f}" if "torch" in best else ""))
  if "torch" in peers: print("\n".join(torch_table(peers["torch"], *batches[0])))
  if a.build:
    _loss_step(model, opt, *batches[1], tc.grad_clip).item()
    pr = cProfile.Profile(); pr.enable()
    _loss_step(model, opt, *batches[2], tc.grad_clip).item()
    pr.disable()
    s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(18)
    print("\n".join(s.getvalue().splitlines()[:40]))


if __name__ == "__main__":
  main()
