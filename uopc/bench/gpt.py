"""`python -m uopc.bench gpt [--preset chapter|baby] [--threads 1 2]`: one training step of a preset's GPT (forward,
backward, gradient clipping, AdamW on two parameter groups: uopc.nn.train's recipe) in uopc (built every step, and
captured and replayed as one program) and, where torch imports, in PyTorch eager and torch.compile on the CPU (a
process of their own: uopc.bench.gpt_torch) with the same weights, batches and thread count: time per step,
tokens/s, GFLOP/s and the fraction of the FMA peak, the ratios the acceptance asks for, the step's kernel count.
Times are wall-clock best-of-k after warm-up steps, peers in turns, with the load average printed beside them;
torch.compile's first step (its compile) is timed apart. --threads runs it once per thread count and prints each
peer's scaling. With --preset, uopc and PyTorch eager also train side by side (uopc.bench.gpt_twin)."""
from __future__ import annotations
import contextlib, os, time
import numpy as np
import uopc.kernelize
from uopc.nn.data import CharTokenizer, get_batch, load_text, split
from uopc.nn import GPT, GPTConfig, LayerNorm
from uopc.nn.train import TrainConfig, configure_optimizer, freeze_collector, preset
from uopc.bench import gpt_torch
from uopc.bench.steps import (SETTLE_S, TORCH_ISA, TORCH_NAMES, add_torch_peers, fma_line, isa_line,  # noqa: F401
                              jit_line, kernel_times, ratio_lines, realized_roots, start_torch, table,
                              time_in_turns, user_environment)
from uopc.helpers import omp_threads
from uopc.runtime.process import user_environ
from uopc.jit import TinyJit
from uopc.optim import AdamW, clip_grad_norm_
from uopc.tensor import Tensor
from uopc.uop import UOp, Ops

MODEL = dict(block_size=32, n_layer=1, n_head=2, n_embd=64)   # the chapter preset's model (notes 26 imports it)
BATCH = 16


def _loss_step(model: GPT, opt: AdamW, x, y, clip: float = 0.0):
  _, loss = model(x, y)
  opt.zero_grad(); loss.backward()
  if clip: clip_grad_norm_(opt.params, clip)
  opt.step(loss)
  return loss


def uopc_step(model: GPT, opt: AdamW, x: np.ndarray, y: np.ndarray, clip: float = 0.0) -> float:
  """The step as written: the graph built, normalized and looked up every time."""
  return _loss_step(model, opt, x, y, clip).item()


def torch_peer(state: dict[str, np.ndarray], cfg: GPTConfig, threads: int, tc: TrainConfig | None = None,
               compile_model: bool = False):
  """uopc.bench.gpt_torch.torch_peer, with the chapter preset's recipe by default: (step, forward)."""
  return gpt_torch.torch_peer(state, cfg, threads, tc or preset("chapter")[1], compile_model)


def gpt(reps: int = 20, warmup: int = 3, layers: int | None = None, opt=None, preset_name: str = "chapter",
        torch_peers: tuple[str, ...] = ("eager", "compile"), fma_peak=None) -> list[str]:
  """Rows: each peer's step time, tokens/s, GFLOP/s and fraction of the FMA peak, for the preset's model and recipe:
  uopc with the graph built every step, uopc captured and replayed (one program, uopc.jit), and where torch imports,
  PyTorch eager and torch.compile (in a process of their own, uopc.bench.gpt_torch). `opt`: uopc's optimizer for the
  run (default: VectorOpt, whose float32 matmuls are vector code; DefaultOpt gives the kernels the book prints).
  fma_peak: a function measuring the FMA peak in GFLOP/s (uopc.bench's; None: no fraction-of-peak column)."""
  from uopc.opt import VectorOpt
  old, Tensor.opt = Tensor.opt, opt or VectorOpt
  try: return _gpt(reps, warmup, layers, preset_name, torch_peers, fma_peak)
  finally: Tensor.opt = old


def _gpt(reps: int, warmup: int, layers: int | None, preset_name: str, torch_peers: tuple[str, ...],
         fma_peak) -> list[str]:
  text = load_text()
  tok = CharTokenizer(text)
  train_ids, _ = split(tok.encode(text))
  cfg, tc = preset(preset_name, tok.vocab_size, **({"n_layer": layers} if layers else {}))
  batch = tc.batch
  threads = omp_threads()
  model, jmodel = GPT(cfg, seed=0), GPT(cfg, seed=0)
  state = model.state_dict()
  opt, jopt = configure_optimizer(model, tc), configure_optimizer(jmodel, tc)
  rng = np.random.default_rng(0)
  batches = [get_batch(train_ids, batch, cfg.block_size, rng) for _ in range(warmup + reps)]
  jstep = TinyJit(lambda x, y: _loss_step(jmodel, jopt, x, y, tc.grad_clip))
  peers = {"uopc": lambda n: uopc_step(model, opt, *batches[n], tc.grad_clip),
           "uopc jit": lambda n: jstep(Tensor(batches[n][0]), Tensor(batches[n][1])).item()}
  worker, ready = start_torch(state, batches, cfg.to_dict(), tc.to_dict(), threads, torch_peers)
  env = user_environment()
  notes, compile_s = [], {}
  try:
    add_torch_peers(peers, {p: worker for p in ready}, ready, notes, compile_s)
    t0 = time.perf_counter()
    uopc_step(model, opt, *batches[0], tc.grad_clip)   # the cold plan: compiles
    cold = time.perf_counter() - t0
    freeze_collector()   # as Trainer does: the model, optimizer and plan leave the collector's generations (NOTES 37)
    best = time_in_turns(peers, len(batches), warmup)
  finally:
    if worker is not None: worker.close()
  fma = fma_peak() if fma_peak is not None else None
  x, y = batches[-1]   # where uopc's step goes: building the graph in Python, normalize + plan lookup, the kernels
  t = time.process_time(); roots = step_roots(model, opt, x, y, tc.grad_clip); build = time.process_time() - t
  kt = kernel_times(roots)
  flops, tokens, g = kt["flops"], batch * cfg.block_size, jstep.graph
  rows = ["# peers            uopc: graph built every step; uopc jit: the step captured and replayed as one program "
          "(uopc.jit); torch: PyTorch eager; torch.compile: its model compiled (inductor), the optimizer eager",
          f"# preset           {preset_name}: {tc}",
          f"# uopc optimizer   {Tensor.opt.__name__}",
          f"# model            {cfg}, batch {batch}, {model.num_parameters()} parameters, {threads} threads",
          isa_line(env),
          f"# load average     {' '.join(f'{a:.2f}' for a in os.getloadavg())} (1, 5, 15 min) after the run",
          f"# uopc cold plan   {cold:.1f} s (compiles, or disk-cache hits); then gc.freeze(), as Trainer does",
          *[f"# {TORCH_NAMES[p]:<16s} first step {s:.1f} s (compiles; not in its step time)"
            for p, s in compile_s.items()],
          *notes,
          fma_line(fma, threads, flops), *table(best, flops, tokens, "tokens", fma), *jit_line(g)]
  rows.append(f"# uopc step, CPU:  graph building {build * 1e3:.1f} ms, schedule {kt['schedule_s'] * 1e3:.1f} ms, "
              f"{len(kt['plan'].kernels)} kernels {kt['total_s'] * 1e3:.1f} ms ({flops / 1e6:.0f} MFLOP)")
  rows += ratio_lines(best, threads)
  return rows


def scaling(threads: list[int], argv: list[str], what: str = "gpt") -> list[str]:
  """`python -m uopc.bench gpt|cnn ... --threads 1 2`: the bench once per thread count, each in a process of its own
  (OpenMP reads OMP_NUM_THREADS when it loads), then each peer's step time from one count to the next."""
  import subprocess, sys
  runs = {}
  for n in threads:
    env = user_environ(OMP_NUM_THREADS=str(n))
    r = subprocess.run([sys.executable, "-m", "uopc.bench", what, *argv], env=env, capture_output=True, text=True)
    print(r.stdout, end="", flush=True)
    if r.returncode != 0: raise RuntimeError(f"the bench at {n} threads failed:\n{r.stderr}")
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("# summary"))
    runs[n] = {k: float(v) for k, v in (w.split("=") for w in line.split()[2:] if not w.startswith("threads="))}
  rows = [f"scaling from {threads[0]} thread(s) (step time at {threads[0]} / step time at n):"]
  for n in threads[1:]:
    rows.append(f"  {n} threads: " + ", ".join(f"{k[:-3].replace('_', ' ')} {runs[threads[0]][k] / v:.2f}x"
                                               for k, v in runs[n].items() if k in runs[threads[0]]))
  return rows


# ---- the step as one plan: its roots, its kernels' times, and the LayerNorm staging experiment (NOTES 15) ----
def step_roots(model: GPT, opt: AdamW, x: np.ndarray, y: np.ndarray, clip: float = 0.0) -> list:
  """The UOps one training step realizes, as Tensor.realize gathers them for opt.step(loss): the loss, every new
  parameter and optimizer state, then what its realize computes beside them (the pending .grads and the clipped
  norm that read a buffer the step overwrites: autograd.preserve), so that their plan is the step's own, found in the
  plan cache. Nothing runs and nothing is committed (the optimizer's step counter does advance)."""
  _, loss = model(x, y)
  opt.zero_grad(); loss.backward()
  if clip: clip_grad_norm_(opt.params, clip)
  return realized_roots(loss, opt)


@contextlib.contextmanager
def recording_layernorms():
  """with recording_layernorms() as outs: every LayerNorm module's output UOp built inside is appended to outs."""
  outs: list = []
  original = LayerNorm.__call__
  def call(self, x):
    y = original(self, x)
    outs.append(y.uop)
    return y
  LayerNorm.__call__ = call
  try: yield outs
  finally: LayerNorm.__call__ = original


def stage_except_layernorm(original, roots: list, layernorm_outputs: list):
  """stage_broadcast_compute as it is, except that its cost estimate (_fused_work) says 0 for the LayerNorm outputs
  of roots, so the rule leaves exactly those fused (recomputed by every consumer that broadcasts them). To be patched
  in as uopc.kernelize.stage_broadcast_compute inside isolated_plan_cache(). The outputs are normalized together with
  the roots, so that they are the very nodes the plan's passes see (buffers numbered the same way)."""
  from uopc.kernelize import normalize
  norm = normalize(list(roots) + list(layernorm_outputs))[0]
  skip = set(norm[len(roots):])
  def rule(roots, factor: int = 4):
    work = uopc.kernelize._fused_work
    def fused_work(u): return 0 if u in skip else work(u)
    uopc.kernelize._fused_work = fused_work
    try:
      before = {u for u in UOp(Ops.SINK, tuple(roots)).toposort() if u.op is Ops.STAGE}
      staged = original(roots, factor)
    finally: uopc.kernelize._fused_work = work
    with_all = original(roots, factor)
    count = lambda rs: sum(1 for u in UOp(Ops.SINK, tuple(rs)).toposort() if u.op is Ops.STAGE and u not in before)
    rule.dropped = count(with_all) - count(staged)
    return staged
  rule.dropped = 0
  return rule
