"""NOTES 63: the baby GPT's replayed step with its write-backs in place and with them copied (JIT_INPLACE=0), both
captured in this process and replayed in turns, best of `reps` (default 30): the step program of each, how many
kernels have aliased parameters, and the ratio. Set the threads as the run should have them:

  OMP_NUM_THREADS=1 python notes/notes63_step_inplace.py [reps]
"""
import os, sys, time
import numpy as np
from uopc.bench import cpu_model
from uopc.bench.steps import cpu_family_model
from uopc.helpers import Context
from uopc.jit import TinyJit
from uopc.nn import GPT
from uopc.nn.train import configure_optimizer, preset
from uopc.optim import clip_grad_norm_
from uopc.opt import VectorOpt
from uopc.step_calls import Call
from uopc.tensor import Tensor

Tensor.opt = VectorOpt   # as uopc.bench gpt runs it


def baby_step() -> TinyJit:
  cfg, tc = preset("baby", vocab_size=76)
  model = GPT(cfg, seed=0)
  opt = configure_optimizer(model, tc)
  def step(x: Tensor, y: Tensor) -> Tensor:
    _, loss = model(x, y)
    opt.zero_grad(); loss.backward()
    clip_grad_norm_(opt.params, tc.grad_clip)
    opt.step(loss)
    return loss
  return TinyJit(step)


def baby_batches() -> list[tuple[Tensor, Tensor]]:
  """Three fixed (x, y) batches of the baby preset: run, capture, replay."""
  cfg, tc = preset("baby", vocab_size=76)
  rng = np.random.default_rng(2)
  return [tuple(Tensor(rng.integers(0, 76, (tc.batch, cfg.block_size)).astype(np.int32)) for _ in range(2))
          for _ in range(3)]


def machine_line() -> str:
  """The machine beside the figures: CPU, lscpu family and model, cores, the run's OpenMP threads."""
  return (f"# {cpu_model()}, lscpu {cpu_family_model()}, {os.cpu_count()} cores, "
          f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}")


def main(reps: int) -> None:
  data = baby_batches()
  print(machine_line())
  steps = {}
  for in_place in (1, 0):
    with Context(JIT_INPLACE=in_place):
      step = baby_step()
      for x, y in data: step(x, y).item()   # run, capture, replay
    steps[in_place] = step
    g = step.graph
    aliased = sum(len(set(c.bufs)) != len(c.bufs) for c in g.calls if isinstance(c, Call))
    print(f"JIT_INPLACE={in_place}: {g.program}, {aliased} kernels with aliased parameters")
  best = {1: float("inf"), 0: float("inf")}
  x, y = data[0]
  for _ in range(reps):
    for in_place in (1, 0):
      t = time.perf_counter(); steps[in_place].graph.run([x._data(), y._data()])
      best[in_place] = min(best[in_place], time.perf_counter() - t)
  print(f"best of {reps}: in place {best[1] * 1e3:.2f} ms, copied {best[0] * 1e3:.2f} ms, "
        f"ratio {best[1] / best[0]:.3f}")


if __name__ == "__main__":
  main(int(sys.argv[1]) if len(sys.argv) > 1 else 30)
