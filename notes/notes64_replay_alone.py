"""NOTES 64: the baby GPT's captured step alone in this process (no peer): captured, then replayed 20 times, best of
20, timing the whole call with `.item()` and the step program's call alone. SLEEP=0.05 sleeps before each step, as
`uopc.bench`'s turns do. Run it several times, at each thread count:

  OMP_NUM_THREADS=2 python notes/notes64_replay_alone.py
"""
import os, time
import numpy as np
from notes63_step_inplace import baby_step   # notes/ is this script's folder, first on the path
from uopc.nn.train import preset
from uopc.tensor import Tensor

cfg, tc = preset("baby", vocab_size=76)
rng = np.random.default_rng(2)
data = [tuple(rng.integers(0, 76, (tc.batch, cfg.block_size)).astype(np.int32) for _ in range(2)) for _ in range(3)]
step = baby_step()
for x, y in data: step(Tensor(x), Tensor(y)).item()   # run, capture, replay
sleep = float(os.environ.get("SLEEP", "0"))
best_call = best_program = float("inf")
for r in range(20):
  x, y = data[r % 3]
  time.sleep(sleep)
  t = time.perf_counter(); step(Tensor(x), Tensor(y)).item(); best_call = min(best_call, time.perf_counter() - t)
  t = time.perf_counter(); step.graph.run([x, y]); best_program = min(best_program, time.perf_counter() - t)
print(f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')} SLEEP={sleep}: call and .item() "
      f"{best_call * 1e3:.1f} ms, the step program {best_program * 1e3:.1f} ms")
