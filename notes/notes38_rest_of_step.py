"""NOTES 38: the baby GPT's step with and without this entry's changes, in one run: the kernels' C time by kind.

  PYTHONPATH=. OMP_NUM_THREADS=1 python notes/notes38_rest_of_step.py [--reps 10] [--variants all|after]

Variants, each a fresh plan of the same step (uopc.helpers.clear_caches between them):
  scalar rest   VectorOpt's vector matmuls only: the other float kernels as the default lowering writes them
                (uopc.codegen.vector_loops switched off) and a batched matmul's B packed once a batch (no merge)
  after         as the code is: vector_loops on, a weight shared by every batch packed once (gemm_vec._merge_batch)
Each kernel's C call is timed alone, best of --reps, as notes/notes37_baby_step.py does; the table sums them by kind.
Times on a loaded machine are noisy: compare the variants within one run.
"""
from __future__ import annotations
import argparse
import os
import numpy as np
from notes37_baby_step import kernel_table
from uopc import opt as opt_module
from uopc.bench.gpt import step_roots
from uopc.codegen import gemm_vec
from uopc.helpers import clear_caches
from uopc.kernelize import normalize, plan_for
from uopc.nn import GPT
from uopc.nn.data import CharTokenizer, get_batch, load_text, split
from uopc.nn.train import configure_optimizer, preset
from uopc.opt import VectorOpt
from uopc.tensor import Tensor


def scalar_rest():
  """Switch off this entry's lowerings; returns a function that switches them back on."""
  lower_vector, merge = opt_module.lower_vector, gemm_vec._merge_batch
  opt_module.lower_vector = lambda *a, **k: None
  gemm_vec._merge_batch = lambda body, x, y: (body, (x, y))
  def restore(): opt_module.lower_vector, gemm_vec._merge_batch = lower_vector, merge
  return restore


def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--reps", type=int, default=10)
  ap.add_argument("--variants", default="all", choices=["all", "after"])
  a = ap.parse_args()
  Tensor.opt = VectorOpt
  text = load_text(); tok = CharTokenizer(text); ids, _ = split(tok.encode(text))
  cfg, tc = preset("baby", tok.vocab_size)
  model = GPT(cfg, seed=0); opt = configure_optimizer(model, tc)
  x, y = get_batch(ids, tc.batch, cfg.block_size, np.random.default_rng(0))
  print(f"# baby GPT, batch {tc.batch}, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}, "
        f"UOPC_MARCH={os.environ.get('UOPC_MARCH', 'native')}, load average {os.getloadavg()[0]:.2f}")
  for name in (["scalar rest", "after"] if a.variants == "all" else ["after"]):
    clear_caches()
    restore = scalar_rest() if name == "scalar rest" else (lambda: None)
    try:
      norm, arrays = normalize(step_roots(model, opt, x, y, tc.grad_clip))
      plan = plan_for(norm, Tensor.options())
      print(f"\n## {name}\n" + "\n".join(kernel_table(plan, arrays, a.reps)))
    finally: restore()


if __name__ == "__main__":
  main()
