"""NOTES 69: the baby GPT's replayed step linked from its kernels' own objects (STEP_OBJECTS=1, the default where gcc
can) and with their text compiled in the step's own (STEP_OBJECTS=0): both captured in this process, the time each
step program took to build on a cold cache (the kernels' own builds already made), and the replays in turns, best of
`reps` (default 30). Set the threads as the run should have them:

  OMP_NUM_THREADS=1 python notes/notes69_linked_step.py [reps]
"""
import os, sys, tempfile, time
from notes63_step_inplace import baby_batches, baby_step, machine_line
from uopc.helpers import Context


def main(reps: int) -> None:
  os.environ["UOPC_CACHE_DIR"] = tempfile.mkdtemp(prefix="notes69-")   # cold: every build below is timed
  data = baby_batches()
  print(machine_line())
  steps, losses = {}, {}
  for linked in (1, 0):
    with Context(STEP_OBJECTS=linked):
      step = baby_step()
      losses[linked] = [step(x, y).item() for x, y in data]   # run, capture, replay
    steps[linked] = step
    print(f"STEP_OBJECTS={linked}: {step.graph.program}, built in {step.graph.program.compile_s:.2f} s")
  print("the same losses, bit for bit:", [v.hex() for v in losses[1]] == [v.hex() for v in losses[0]])
  best = {1: float("inf"), 0: float("inf")}
  x, y = data[0]
  for _ in range(reps):
    for linked in (1, 0):
      t = time.perf_counter(); steps[linked].graph.run([x._data(), y._data()])
      best[linked] = min(best[linked], time.perf_counter() - t)
  print(f"best of {reps}: linked {best[1] * 1e3:.2f} ms, text {best[0] * 1e3:.2f} ms, ratio {best[1] / best[0]:.3f}")


if __name__ == "__main__":
  main(int(sys.argv[1]) if len(sys.argv) > 1 else 30)
