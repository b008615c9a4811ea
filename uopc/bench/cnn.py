"""`python -m uopc.bench cnn [--threads 1 2]`: a LeNet-5-sized network (batch 64 of 28x28 images; conv 5x5 -> relu
-> 2x2 max pool, twice; three linear layers; cross entropy; AdamW) trained step by step in uopc (built every step,
and captured and replayed as one program, uopc.jit) and, where torch imports, in PyTorch eager and torch.compile,
each of the two in a process of its own (uopc.bench.gpt_torch's worker; torch.compile's compile timed apart), with
the same weights and batches. The table is `bench gpt`'s (uopc.bench.steps). Where torch imports, the first
LOSS_STEPS losses of uopc's eager step are compared with PyTorch eager's (they agree within LOSS_TOL)."""
from __future__ import annotations
import os, time
import numpy as np
from uopc import nn
from uopc.bench.steps import (TORCH_NAMES, add_torch_peers, cpu_family_model, fma_line, isa_line, jit_line,
                              kernel_times, ratio_lines, realized_roots, start_torch, table, time_in_turns,
                              user_environment)
from uopc.helpers import omp_threads
from uopc.jit import TinyJit
from uopc.optim import AdamW
from uopc.tensor import Tensor

BATCH, LOSS_STEPS, LOSS_TOL = 64, 20, 1e-5
ADAMW = {"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.01}   # PyTorch's AdamW defaults


def lenet(seed: int = 0) -> nn.Sequential:
  """LeNet-5 on 28x28 inputs (padding 2 in the first convolution, as for MNIST): 61,706 parameters."""
  return nn.Sequential(nn.Conv2d(1, 6, 5, padding=2, seed=seed), nn.ReLU(), nn.MaxPool2d(2),    # (N, 6, 14, 14)
                       nn.Conv2d(6, 16, 5, seed=seed + 1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),   # (N, 400)
                       nn.Linear(400, 120, seed=seed + 2), nn.ReLU(), nn.Linear(120, 84, seed=seed + 3), nn.ReLU(),
                       nn.Linear(84, 10, seed=seed + 4))


def model_flops(model: nn.Sequential, batch: int = BATCH, size: tuple[int, int] = (28, 28)) -> int:
  """The training step's FLOPs as the model has them, 2 per multiply-add of its convolutions and linear layers: each
  layer's forward product, its weight gradient and its input gradient (none for the first layer: the images need
  no gradient). Elementwise work, pooling and the optimizer are left out. Not uopc's kernels' count: a vector
  convolution computes the lanes that overlap at a row's end twice and its input gradient a zero border, and
  the table's GFLOP/s must rate every peer by the same work."""
  (h, w), total, first = size, 0, True
  for layer in model:
    if isinstance(layer, nn.Conv2d):
      cout, cin, kh, kw = layer.weight.shape
      (ph, pw), (sh, sw) = layer.padding, layer.stride
      h, w = (h + 2 * ph - kh) // sh + 1, (w + 2 * pw - kw) // sw + 1
      fwd = 2 * batch * cout * cin * kh * kw * h * w
    elif isinstance(layer, nn.MaxPool2d): h, w = h // layer.kernel_size[0], w // layer.kernel_size[1]; continue
    elif isinstance(layer, nn.Linear): fwd = 2 * batch * layer.weight.shape[0] * layer.weight.shape[1]
    else: continue
    total, first = total + fwd * (2 if first else 3), False
  return total


def batches(n: int, seed: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
  """n batches of random images (N(0, 1) pixels) and labels 0..9: a step's cost does not depend on what they show."""
  rng = np.random.default_rng(seed)
  return [(rng.standard_normal((BATCH, 1, 28, 28)).astype(np.float32), rng.integers(0, 10, BATCH).astype(np.int64))
          for _ in range(n)]


def loss_step(model: nn.Sequential, opt: AdamW, x: Tensor, y: Tensor) -> Tensor:
  loss = model(x).cross_entropy(y)
  opt.zero_grad(); loss.backward()
  opt.step(loss)
  return loss


def trainer(seed: int = 0):
  """(model, optimizer, step(x, y) -> loss as a float): the step as written, its graph built every time."""
  model = lenet(seed)
  opt = AdamW(model.parameters(), **ADAMW)
  return model, opt, lambda x, y: loss_step(model, opt, Tensor(x), Tensor(y)).item()


def step_roots(model: nn.Sequential, opt: AdamW, x: np.ndarray, y: np.ndarray) -> list:
  """The UOps one training step realizes (uopc.bench.steps.realized_roots: the step's own plan); nothing runs."""
  loss = model(Tensor(x)).cross_entropy(Tensor(y))
  opt.zero_grad(); loss.backward()
  return realized_roots(loss, opt)


def torch_losses(state: dict, data: list, threads: int) -> list[float] | str:
  """PyTorch eager's losses over data (a worker of its own), or why there are none."""
  train = {**ADAMW, "betas": list(ADAMW["betas"])}
  worker, ready = start_torch(state, data, {}, train, threads, ("eager",), model="cnn")
  if worker is None or ready["eager"] is not None: return ready.get("eager") or "torch is not importable"
  try: return [worker.step("eager", k)[1] for k in range(len(data))]
  finally: worker.close()


def compare_losses(threads: int, steps: int = LOSS_STEPS) -> tuple[list[float], list[float] | str]:
  """uopc's first `steps` eager losses and PyTorch eager's (or why not) from the same weights and batches."""
  model, _, step = trainer()
  state = {k: v.copy() for k, v in model.state_dict().items()}
  data = batches(steps, seed=1)
  return [step(x, y) for x, y in data], torch_losses(state, data, threads)


def cnn(reps: int = 10, warmup: int = 3, torch_peers: tuple[str, ...] = ("eager", "compile"), fma_peak=None,
        check_losses: bool = True) -> list[str]:
  """The table's rows (module docstring). uopc runs VectorOpt, as `bench gpt` does."""
  from uopc.opt import VectorOpt
  old, Tensor.opt = Tensor.opt, VectorOpt
  try: return _cnn(reps, warmup, torch_peers, fma_peak, check_losses)
  finally: Tensor.opt = old


def _cnn(reps: int, warmup: int, torch_peers: tuple[str, ...], fma_peak, check_losses: bool) -> list[str]:
  from uopc.runtime.toolchain import cpu_brand
  threads = omp_threads()
  data = batches(warmup + reps)
  model, opt, step = trainer()
  jmodel, jopt, _ = trainer()
  state = {k: v.copy() for k, v in model.state_dict().items()}
  jstep = TinyJit(lambda x, y: loss_step(jmodel, jopt, x, y))
  peers = {"uopc": lambda n: step(*data[n]), "uopc jit": lambda n: jstep(Tensor(data[n][0]), Tensor(data[n][1])).item()}
  train = {**ADAMW, "betas": list(ADAMW["betas"])}
  workers, ready = {}, {}
  for p in torch_peers:   # eager and torch.compile each in a worker process of its own
    w, r = start_torch(state, data, {}, train, threads, (p,), model="cnn")
    ready.update(r)
    if w is not None: workers[p] = w
  notes, compile_s = [], {}
  try:
    add_torch_peers(peers, workers, ready, notes, compile_s)
    t0 = time.perf_counter(); step(*data[0]); cold = time.perf_counter() - t0   # the cold plan: compiles
    best = time_in_turns(peers, len(data), warmup)
  finally:
    for w in workers.values(): w.close()
  fma = fma_peak() if fma_peak is not None else None
  t = time.process_time(); roots = step_roots(model, opt, *data[-1]); build = time.process_time() - t
  kt = kernel_times(roots)
  flops = model_flops(model)
  rows = [f"# machine          {cpu_brand() or 'CPU'}, lscpu {cpu_family_model()}, {os.cpu_count()} cores",
          "# peers            uopc: graph built every step; uopc jit: the step captured and replayed as one program "
          "(uopc.jit); torch: PyTorch eager; torch.compile: its forward compiled (inductor), the optimizer eager; "
          "the torch peers each in a process of their own",
          f"# model            LeNet-5 (conv 5x5 pad 2, relu, pool 2, conv 5x5, relu, pool 2, linear 400-120-84-10), "
          f"batch {BATCH}, {sum(p.numel() for p in model.parameters())} parameters, AdamW {ADAMW}, {threads} threads",
          f"# uopc optimizer   {Tensor.opt.__name__}",
          isa_line(user_environment()),
          f"# load average     {' '.join(f'{a:.2f}' for a in os.getloadavg())} (1, 5, 15 min) after the run",
          f"# uopc cold plan   {cold:.1f} s (compiles, or disk-cache hits)",
          *[f"# {TORCH_NAMES[p]:<16s} first step {s:.1f} s (compiles; not in its step time)"
            for p, s in compile_s.items()],
          *notes, fma_line(fma, threads, flops, "the model's, model_flops"), *table(best, flops, BATCH, "images", fma),
          *jit_line(jstep.graph),
          f"# uopc step, CPU:  graph building {build * 1e3:.1f} ms, schedule {kt['schedule_s'] * 1e3:.1f} ms, "
          f"{len(kt['plan'].kernels)} kernels {kt['total_s'] * 1e3:.1f} ms ({kt['flops'] / 1e6:.0f} MFLOP executed)"]
  if check_losses: rows.append(loss_line(*compare_losses(threads)))
  return rows + ratio_lines(best, threads)


def loss_line(mine: list[float], theirs: list[float] | str) -> str:
  if isinstance(theirs, str): return f"# losses           not compared with PyTorch: {theirs}"
  worst = max(abs(a - b) for a, b in zip(mine, theirs))
  verdict = "within" if worst <= LOSS_TOL else "NOT within"
  return (f"# losses           {len(mine)} steps, uopc eager vs PyTorch eager: largest difference {worst:.2e} "
          f"({verdict} {LOSS_TOL:g}); first {mine[0]:.6f}, last {mine[-1]:.6f}")
