"""NOTES 26: a GPT step's kernels under the default optimizer and under VectorOpt, grouped by kernel name.

  python notes/notes26_gpt_matmuls.py

One training step of chapter 14's model (examples/gpt.py's MODEL, batch 16), run three times to warm up, then once
with DEBUG=2, which prints every kernel's time; the script sums the times per kernel name.
"""
import collections
import contextlib
import io
import re
import numpy as np
from uopc.bench import header
from uopc.bench.gpt import BATCH, MODEL, uopc_step
from uopc.nn.data import CharTokenizer, get_batch, load_text, split
from uopc.helpers import Context
from uopc.nn import GPT, GPTConfig
from uopc.opt import DefaultOpt, VectorOpt
from uopc.optim import AdamW
from uopc.tensor import Tensor


def kernel_times(opt) -> list[tuple[float, str]]:
  Tensor.opt = opt
  text = load_text()
  tok = CharTokenizer(text)
  ids, _ = split(tok.encode(text))
  cfg = GPTConfig(vocab_size=tok.vocab_size, **MODEL)
  model = GPT(cfg, seed=0)
  opt_ = AdamW(model.parameters(), lr=3e-3)
  rng = np.random.default_rng(0)
  for _ in range(3): uopc_step(model, opt_, *get_batch(ids, BATCH, cfg.block_size, rng))
  out = io.StringIO()
  x, y = get_batch(ids, BATCH, cfg.block_size, rng)
  with contextlib.redirect_stdout(out), Context(DEBUG=2): uopc_step(model, opt_, x, y)
  return [(float(m.group(2)), m.group(1)) for line in out.getvalue().splitlines()
          if (m := re.match(r"\s+(\S+)\s+([\d.]+) ms", line))]


print(header())
runs = {opt.__name__: kernel_times(opt) for opt in (DefaultOpt, VectorOpt)}
for name, rows in runs.items():
  print(f"\n{name}: {len(rows)} kernels, {sum(t for t, _ in rows):.2f} ms")
  by_name = collections.Counter()
  for t, k in rows: by_name[k] += t
  for k, t in by_name.most_common(6): print(f"  {k:24s} {t:7.3f} ms")
