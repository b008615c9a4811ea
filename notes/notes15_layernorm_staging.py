"""NOTES 15: a GPT training step (forward, backward, AdamW) with the LayerNorm outputs staged and unstaged.

  OMP_NUM_THREADS=1 python notes/notes15_layernorm_staging.py            # chapter 14's model and NOTES 15's 2-layer one
  OMP_NUM_THREADS=1 python notes/notes15_layernorm_staging.py --small    # chapter 14's model only

"Unstaged" patches uopc.kernelize.stage_broadcast_compute, inside isolated_plan_cache(), with the same rule whose cost
estimate says 0 for the LayerNorm modules' outputs: exactly those stay fused (recomputed by every matmul column
that reads them, in the forward and in the backward); everything else is staged as usual. Kernel times are CPU
seconds per kernel, best of 5, one thread; both plans run on the same inputs and their losses and updates are
compared.
"""
import os, sys
import numpy as np
import uopc.kernelize
from uopc.bench import header
from uopc.bench.gpt import kernel_times, recording_layernorms, stage_except_layernorm, step_roots
from uopc.nn.data import CharTokenizer, get_batch, load_text, split
from uopc.nn import GPT, GPTConfig
from uopc.optim import AdamW

MODELS = {"chapter 14 (1 layer, T=32, C=64, 2 heads, batch 16)": dict(block_size=32, n_layer=1, n_head=2, n_embd=64),
          "NOTES 15 (2 layers, T=64, C=128, 4 heads, batch 16)": dict(block_size=64, n_layer=2, n_head=4, n_embd=128)}


def measure(cfg: GPTConfig, reps: int = 5) -> dict:
  text = load_text()
  ids = CharTokenizer(text).encode(text)
  x, y = get_batch(split(ids)[0], 16, cfg.block_size, np.random.default_rng(0))
  out = {}
  for label in ("staged", "unstaged"):
    model = GPT(cfg, seed=0)
    with recording_layernorms() as lns: roots = step_roots(model, AdamW(model.parameters(), lr=3e-3), x, y)
    with uopc.kernelize.isolated_plan_cache():
      saved = uopc.kernelize.stage_broadcast_compute
      rule = stage_except_layernorm(saved, roots, lns)
      if label == "unstaged": uopc.kernelize.stage_broadcast_compute = rule
      try: r = kernel_times(roots, reps)
      finally: uopc.kernelize.stage_broadcast_compute = saved
      r["dropped"] = rule.dropped
      # the values: run the plan once through realize (its own isolated cache holds this plan)
      if label == "unstaged": uopc.kernelize.stage_broadcast_compute = rule
      try: r["values"] = uopc.kernelize.realize(roots, opt=uopc.tensor.Tensor.opt)
      finally: uopc.kernelize.stage_broadcast_compute = saved
    out[label] = r
  return out


def report(name: str, r: dict) -> None:
  s, u = r["staged"], r["unstaged"]
  diff = max(float(np.abs(a - b).max()) for a, b in zip(s["values"], u["values"]))
  print(f"{name}:")
  for label, q in r.items():
    print(f"  {label:9s} {len(q['plan'].kernels):4d} kernels, {q['flops'] / 1e6:8.1f} MFLOP, kernels "
          f"{q['total_s'] * 1e3:7.1f} ms, temps {sum(n for _, n in q['plan'].temps) * 4 / 1e6:.1f} MB")
  print(f"  {u['dropped']} LayerNorm outputs left fused; unstaged / staged: {u['total_s'] / s['total_s']:.2f}x time, "
        f"{u['flops'] / s['flops']:.2f}x FLOPs; largest difference in loss and updates {diff:.1e}")


if __name__ == "__main__":
  print(header())
  print(f"# load average     {' '.join(f'{a:.2f}' for a in os.getloadavg())}")
  vocab = CharTokenizer(load_text()).vocab_size
  for name, m in list(MODELS.items())[: 1 if "--small" in sys.argv else 2]:
    report(name, measure(GPTConfig(vocab_size=vocab, **m)))
