"""NOTES 37 (the step built every time): CPU time of building the baby GPT's training-step graph, and of normalize and
plan lookup, with Python's garbage collector as it is or frozen; then cProfile of a few builds.

  PYTHONPATH=. OMP_NUM_THREADS=1 python notes/notes37_build.py [--builds 12] [--freeze] [--prof 3]

Prints per build (uopc.bench.gpt.step_roots: forward, backward, clipping, the optimizer's updates; nothing runs) the
CPU ms min / median / max over --builds, the same for normalize + plan_for, the full collections that ran during the
builds and what each took; with --freeze, gc.freeze() after the first (compiling) step, as uopc.nn.train.Trainer does;
with --prof N, cProfile of N more builds (collector off), top functions by tottime and by cumtime, and the number of
Python function calls. CPU times on a loaded machine are noisy: compare within one run, or call counts.
"""
from __future__ import annotations
import argparse, cProfile, gc, io, pstats, time
import numpy as np
from uopc.bench.gpt import _loss_step, step_roots
from uopc.kernelize import normalize, plan_for
from uopc.nn import GPT
from uopc.nn.data import CharTokenizer, get_batch, load_text, split
from uopc.nn.train import configure_optimizer, preset
from uopc.opt import VectorOpt
from uopc.tensor import Tensor


def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--builds", type=int, default=12)
  ap.add_argument("--freeze", action="store_true", help="gc.freeze() after the first step")
  ap.add_argument("--prof", type=int, default=0, help="cProfile this many more builds")
  a = ap.parse_args()
  Tensor.opt = VectorOpt
  text = load_text(); tok = CharTokenizer(text); ids, _ = split(tok.encode(text))
  cfg, tc = preset("baby", tok.vocab_size)
  model = GPT(cfg, seed=0); opt = configure_optimizer(model, tc)
  rng = np.random.default_rng(0)
  batches = [get_batch(ids, tc.batch, cfg.block_size, rng) for _ in range(1 + a.builds + a.prof)]
  _loss_step(model, opt, *batches[0], tc.grad_clip).item()   # compiles the plan
  if a.freeze: gc.collect(); gc.freeze()
  events: list = []
  track = lambda phase, info: events.append((phase, info["generation"], time.process_time()))
  gc.callbacks.append(track)
  build, sched = [], []
  for x, y in batches[1:1 + a.builds]:
    t0 = time.process_time(); roots = step_roots(model, opt, x, y, tc.grad_clip)
    t1 = time.process_time(); norm, _ = normalize(roots); plan_for(norm, Tensor.options())
    t2 = time.process_time(); build.append(t1 - t0); sched.append(t2 - t1)
    del roots, norm
  gc.callbacks.remove(track)
  stats = lambda v: f"min {min(v) * 1e3:.1f} median {sorted(v)[len(v) // 2] * 1e3:.1f} max {max(v) * 1e3:.1f} ms"
  full = [(b[2] - e[2]) * 1e3 for e, b in zip(events, events[1:]) if e[0] == "start" and e[1] == 2]
  print(f"CPU per build: {stats(build)}; normalize + plan lookup: {stats(sched)} ({a.builds} builds, "
        f"gc {'frozen' if a.freeze else 'as is'}, objects the collector tracks {len(gc.get_objects())})")
  print(f"full collections during the builds: {len(full)}, CPU ms each {[round(t, 1) for t in full]}")
  if a.prof:
    gc.disable()
    pr = cProfile.Profile(); pr.enable()
    for x, y in batches[1 + a.builds:]:
      norm, _ = normalize(step_roots(model, opt, x, y, tc.grad_clip)); plan_for(norm, Tensor.options())
    pr.disable()
    for key in ("tottime", "cumtime"):
      s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats(key).print_stats(20); print(s.getvalue())


if __name__ == "__main__":
  main()
