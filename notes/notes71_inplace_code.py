"""NOTES 71: tests/nn/test_lenet.py's LeNet trained eagerly with AdamW, three steps, in one process: the parameters'
hash when every step runs kernel by kernel (EAGER_GRAPH=0) and when the plan runs as one step program from its second
step on (PROGRAM_AFTER_RUNS=1; the first run of the process, then again), with write-backs in place (JIT_INPLACE=1)
or copied (0); then, for each kernel a program writes in place, whether its object is its own build's machine code.

  OMP_NUM_THREADS=1 python notes/notes71_inplace_code.py
Before NOTES 71's rule 6, on a Zen 4, the in-place programs' hashes differed from the kernel-by-kernel one.
"""
import hashlib, sys
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "nn"))
import uopc.plan_program as pp   # noqa: E402
from uopc.helpers import Context   # noqa: E402
import test_lenet as L   # noqa: E402


def trained_hash(after: int, graph: int, in_place: int) -> str:
  pp.PROGRAM_AFTER_RUNS = after
  with Context(EAGER_GRAPH=graph, JIT_INPLACE=in_place):
    _, model = L.run_mode("adamw", "eager", L.batches()[:3])
  return hashlib.sha1(b"".join(v.tobytes() for v in model.state_dict().values())).hexdigest()[:12]


if __name__ == "__main__":
  print("kernel by kernel:            ", trained_hash(9, 0, 1))
  for in_place in (1, 0):
    print(f"program, JIT_INPLACE={in_place}, run 1:", trained_hash(1, 1, in_place))
    print(f"program, JIT_INPLACE={in_place}, run 2:", trained_hash(1, 1, in_place))
  from uopc.device import _cpu_same_code
  from uopc.render_c import C
  from uopc.step_calls import Call
  for runs in list(pp._runs.values()):
    for prog in runs.programs.values():
      aliased = [c for c in prog.calls if isinstance(c, Call) and len(set(c.bufs)) < len(c.bufs)]
      print(f"a program: {prog.copies} copies, {len(prog.in_place)} in place;",
            ", ".join(f"{c.name}: {'own code' if _cpu_same_code(c, C) else 'other code'}" for c in aliased))
