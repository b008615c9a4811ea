"""NOTES 27: chapter 14's training step, replayed, with each of four fixes switched off in turn.

  python notes/notes27_small_kernels.py [--rounds 3]

The step is examples/gpt.py's model (batch 16) under VectorOpt, captured and replayed by TinyJit, so what is timed is
the kernels and the Python that launches them. Each setting runs in a child process of its own (a fresh plan cache),
warm-up steps first, then the best and the median of 20 steps; the settings run in turns, `--rounds` times, and each
keeps its best. A fix is switched off by putting back, inside the child, the code it replaced:
  threads   Options.one_thread_below = 0: every kernel's parallel loop wakes OpenMP's workers, however small
  convert   Program._convert_checked for every argument (the dtype's name and issubdtype looked up on each call)
  pad       rangeify._pad as it was: the clamp where(valid, i - lo, 0) inside every step of the index algebra
  matmul    gemm_vec.as_matmul refuses sums over several axes, and the two index rules that merge them are off
PyTorch eager, the same model and threads, in its own child, when it is importable.
"""
import argparse
import json
import os
import subprocess
import sys

FIXES = ("threads", "convert", "pad", "matmul")


def switch_off(fix: str) -> None:
  from uopc import rangeify, runtime, symbolic
  from uopc.codegen import gemm_vec
  from uopc.uop import Ops, UOp
  if fix == "threads":
    from uopc.tensor import Tensor
    options = Tensor.options
    Tensor.options = staticmethod(lambda *a, **k: options(*a, **k).replace(one_thread_below=0))
  elif fix == "convert":
    runtime.Program._convert = runtime.Program._convert_checked
  elif fix == "pad":
    def old_pad(u, idx, ctx):
      valid, inner = None, []
      for i, s, (lo, _) in zip(idx, u.src[0].shape, u.arg):
        ok = symbolic.simplify((i > lo - 1) & (i < lo + s))
        valid = ok if valid is None else valid & ok
        inner.append(i - lo if lo else i)
      if valid is None or (valid.op is Ops.CONST and valid.arg): return rangeify.rangeify(u.src[0], tuple(inner), ctx)
      safe = tuple(symbolic.simplify(valid.where(j, 0)) for j in inner)
      return valid.where(rangeify.rangeify(u.src[0], safe, ctx), UOp.const(0, u.dtype))
    rangeify._pad = old_pad
  elif fix == "matmul":
    as_matmul = gemm_vec.as_matmul
    gemm_vec.as_matmul = lambda body: None if body.op is Ops.REDUCE and body.arg[1] > 1 else as_matmul(body)
    symbolic.recombine_div_mod = lambda terms, const: (terms, const)
    symbolic._factor = lambda x, n: None


def child(setting: str) -> None:
  import time
  import numpy as np
  from uopc.bench.gpt import BATCH, MODEL, _loss_step, torch_peer
  from uopc.nn.data import CharTokenizer, get_batch, load_text, split
  from uopc.jit import TinyJit
  from uopc.nn import GPT, GPTConfig
  from uopc.opt import VectorOpt
  from uopc.optim import AdamW
  from uopc.tensor import Tensor
  for fix in FIXES if setting == "all off" else [setting[:-4]] if setting.endswith(" off") else []: switch_off(fix)
  text = load_text()
  tok = CharTokenizer(text)
  ids, _ = split(tok.encode(text))
  cfg = GPTConfig(vocab_size=tok.vocab_size, **MODEL)
  model = GPT(cfg, seed=0)
  rng = np.random.default_rng(0)
  batches = [get_batch(ids, BATCH, cfg.block_size, rng) for _ in range(25)]
  if setting == "torch":
    step = torch_peer(model.state_dict(), cfg, int(os.environ.get("OMP_NUM_THREADS", os.cpu_count() or 1)))[0]
  else:
    Tensor.opt = VectorOpt
    opt = AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.99), weight_decay=0.01)
    jit = TinyJit(lambda x, y: _loss_step(model, opt, x, y))
    step = lambda x, y: jit(Tensor(x), Tensor(y)).item()
  times = []
  for n, (x, y) in enumerate(batches):
    t = time.perf_counter(); step(x, y); dt = time.perf_counter() - t
    if n >= 5: times.append(dt)
  print(json.dumps({"best": min(times), "median": sorted(times)[len(times) // 2]}))


def main() -> None:
  ap = argparse.ArgumentParser()
  ap.add_argument("--rounds", type=int, default=3)
  ap.add_argument("--only", nargs="+", help="run only these settings (e.g. 'all on' 'matmul off')")
  args = ap.parse_args()
  from uopc.bench import header
  print(header())
  settings = ["all on"] + [f"{f} off" for f in FIXES] + ["all off"]
  try:
    import torch  # noqa: F401
    settings.append("torch")
  except ImportError: print("# torch: not importable, no PyTorch row")
  if args.only: settings = [s for s in settings if s in args.only]
  best: dict[str, dict] = {}
  for _ in range(args.rounds):
    for s in settings:
      out = subprocess.run([sys.executable, __file__, "--child", s], capture_output=True, text=True, check=True)
      r = json.loads(out.stdout.strip().splitlines()[-1])
      if s not in best or r["best"] < best[s]["best"]: best[s] = r
  print(f"# {args.rounds} rounds of {len(settings)} settings in turns, each in its own process; 20 timed steps each")
  print(f"{'setting':<14s} {'best step':>10s} {'median':>10s}  vs {settings[0]}")
  for s in settings:
    print(f"{s:<14s} {best[s]['best'] * 1e3:7.2f} ms {best[s]['median'] * 1e3:7.2f} ms  "
          f"{best[s]['best'] / best[settings[0]]['best']:5.2f}x")


if __name__ == "__main__":
  if len(sys.argv) > 2 and sys.argv[1] == "--child": child(sys.argv[2])
  else: main()
