"""`python -m uopc.bench gpt [--preset chapter|baby]`: one training step of a preset's GPT (forward, backward,
gradient clipping, AdamW on two parameter groups: uopc.nn.train's recipe) in uopc and, when importable, in PyTorch
eager on the CPU with the same weights, batch and thread count; time per step, tokens/s and the ratio. Times are
wall-clock best-of-k after warm-up steps, with the load average printed beside them. With --preset, the two also
train side by side (uopc.bench.gpt_twin)."""
from __future__ import annotations
import contextlib, math, os, time
import numpy as np
import uopc.kernelize
from uopc.nn.data import CharTokenizer, get_batch, load_text, split
from uopc.nn import GPT, GPTConfig, LayerNorm
from uopc.nn.train import TrainConfig, configure_optimizer, freeze_collector, preset
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


def torch_peer(state: dict[str, np.ndarray], cfg: GPTConfig, threads: int, tc: TrainConfig | None = None):
  """The same GPT written with torch ops on a dict of leaf tensors (nanoGPT's forward), and its training step
  with tc's recipe (uopc.nn.train): AdamW on the 2-D weights with decay and the rest without, gradient clipping.
  step(x, y, lr=None) -> loss; forward(idx, targets) -> loss tensor."""
  import torch
  import torch.nn.functional as F
  tc = tc or preset("chapter")[1]
  torch.set_num_threads(threads)
  P = {k: torch.tensor(v, requires_grad=True) for k, v in state.items()}
  groups = [{"params": [p for p in P.values() if p.dim() >= 2], "weight_decay": tc.weight_decay},
            {"params": [p for p in P.values() if p.dim() < 2], "weight_decay": 0.0}]
  opt = torch.optim.AdamW(groups, lr=tc.lr, betas=tc.betas)
  C, H = cfg.n_embd, cfg.n_head
  def lin(x, p): return F.linear(x, P[p + ".weight"], P.get(p + ".bias"))
  def ln(x, p): return F.layer_norm(x, (C,), P[p + ".weight"], P.get(p + ".bias"))
  def forward(idx, targets):
    B, T = idx.shape
    x = P["wte.weight"][idx] + P["wpe.weight"][:T]
    for i in range(cfg.n_layer):
      p = f"blocks.{i}"
      q, k, v = lin(ln(x, p + ".ln1"), p + ".attn.qkv").split(C, dim=-1)
      q, k, v = (t.view(B, T, H, C // H).transpose(1, 2) for t in (q, k, v))
      y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, C)
      x = x + lin(y, p + ".attn.proj")
      x = x + lin(F.gelu(lin(ln(x, p + ".ln2"), p + ".mlp.fc"), approximate="tanh"), p + ".mlp.proj")
    logits = ln(x, "ln_f") @ P["wte.weight"].T
    return F.cross_entropy(logits.view(B * T, -1), targets.view(B * T))
  def step(x: np.ndarray, y: np.ndarray, lr: float | None = None) -> float:
    if lr is not None:
      for g in opt.param_groups: g["lr"] = lr
    loss = forward(torch.from_numpy(x).long(), torch.from_numpy(y).long())
    opt.zero_grad(); loss.backward()
    if tc.grad_clip: torch.nn.utils.clip_grad_norm_(list(P.values()), tc.grad_clip)
    opt.step()
    return loss.item()
  return step, forward


def gpt(reps: int = 20, warmup: int = 3, layers: int | None = None, opt=None,
        preset_name: str = "chapter") -> list[str]:
  """Rows: uopc and torch (if importable) step time, tokens/s, and torch/uopc, for the preset's model and recipe.
  `opt`: uopc's optimizer for the run (default: VectorOpt, whose float32 matmuls are vector code; DefaultOpt gives
  the kernels the book prints)."""
  from uopc.opt import VectorOpt
  old, Tensor.opt = Tensor.opt, opt or VectorOpt
  try: return _gpt(reps, warmup, layers, preset_name)
  finally: Tensor.opt = old


def _gpt(reps: int, warmup: int, layers: int | None, preset_name: str) -> list[str]:
  text = load_text()
  tok = CharTokenizer(text)
  train_ids, _ = split(tok.encode(text))
  cfg, tc = preset(preset_name, tok.vocab_size, **({"n_layer": layers} if layers else {}))
  batch = tc.batch
  threads = int(os.environ.get("OMP_NUM_THREADS", os.cpu_count() or 1))
  model, jmodel = GPT(cfg, seed=0), GPT(cfg, seed=0)
  state = model.state_dict()
  opt, jopt = configure_optimizer(model, tc), configure_optimizer(jmodel, tc)
  rng = np.random.default_rng(0)
  batches = [get_batch(train_ids, batch, cfg.block_size, rng) for _ in range(warmup + reps)]
  jstep = TinyJit(lambda x, y: _loss_step(jmodel, jopt, x, y, tc.grad_clip))
  peers = {"uopc": lambda x, y: uopc_step(model, opt, x, y, tc.grad_clip),
           "uopc jit": lambda x, y: jstep(Tensor(x), Tensor(y)).item()}
  try:
    peers["torch"] = torch_peer(state, cfg, threads, tc)[0]
  except ImportError: pass
  t0 = time.perf_counter()
  uopc_step(model, opt, *batches[0], tc.grad_clip)   # the cold plan: compiles
  compile_s = time.perf_counter() - t0
  freeze_collector()   # as Trainer does: the model, optimizer and plan leave the collector's generations (NOTES 37)
  best = {k: math.inf for k in peers}
  for n, (x, y) in enumerate(batches):   # peers in turn, on the same batches
    for k, step in peers.items():
      t = time.perf_counter(); step(x, y); dt = time.perf_counter() - t
      if n >= warmup: best[k] = min(best[k], dt)
  tokens = batch * cfg.block_size
  rows = ["# peers            uopc: graph built every step; uopc jit: the step captured and replayed (uopc.jit)",
          f"# preset           {preset_name}: {tc}",
          f"# uopc optimizer   {Tensor.opt.__name__}",
          f"# model            {cfg}, batch {batch}, {model.num_parameters()} parameters, {threads} threads",
          f"# load average     {' '.join(f'{a:.2f}' for a in os.getloadavg())} (1, 5, 15 min) after the run",
          f"# uopc cold plan   {compile_s:.1f} s (compiles, or disk-cache hits); then gc.freeze(), as Trainer does",
          f"{'impl':<8s} {'step':>10s} {'tokens/s':>10s}"]
  for k, s in best.items(): rows.append(f"{k:<9s} {s * 1e3:7.1f} ms {tokens / s:10.0f}")
  # where uopc's step goes: building the graph in Python, normalize + plan lookup, the kernels (CPU seconds)
  x, y = batches[-1]
  t = time.process_time(); roots = step_roots(model, opt, x, y, tc.grad_clip); build = time.process_time() - t
  kt = kernel_times(roots)
  rows.append(f"# uopc step, CPU:  graph building {build * 1e3:.1f} ms, schedule {kt['schedule_s'] * 1e3:.1f} ms, "
              f"{len(kt['plan'].kernels)} kernels {kt['total_s'] * 1e3:.1f} ms ({kt['flops'] / 1e6:.0f} MFLOP)")
  if "torch" in best:
    rows.append(f"uopc step / torch step = {best['uopc'] / best['torch']:.2f}, uopc jit step / torch step = "
                f"{best['uopc jit'] / best['torch']:.2f} (below 1: uopc is faster)")
  else: rows.append("torch: not importable (optional peer: pip install torch)")
  return rows


# ---- the step as one plan: its roots, its kernels' times, and the LayerNorm staging experiment (NOTES 15) ----
def step_roots(model: GPT, opt: AdamW, x: np.ndarray, y: np.ndarray, clip: float = 0.0) -> list:
  """The UOps one training step realizes: the loss, then every new parameter and optimizer state. Nothing runs
  and nothing is committed (the optimizer's step counter does advance)."""
  _, loss = model(x, y)
  opt.zero_grad(); loss.backward()
  if clip: clip_grad_norm_(opt.params, clip)
  return [loss.uop] + [t.uop for t in opt.schedule_step()]


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
