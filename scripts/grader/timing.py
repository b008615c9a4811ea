"""Speed tests: a student's kernel (the C source its probe recorded) timed against a reference of the grader's, in a
fresh sandbox of its own, where no Python code of the student's is alive.

The grader side (`time_many`; `Batch`, which a grading's speed judges call as `time_kernels`) sends the kernels, the
arguments' shapes and a secret on stdin, every speed test of a notebook to one sandbox; the sandbox side (`main`,
this file run as a script) builds each pair with uopc's Program, checks that the student's kernel computes what the
reference computes on the same inputs (a fast kernel that computes nothing earns nothing), times them taking turns
(best of reps), and prints one line per test signed with the secret. The student's C runs in that process and so
could, in principle, read the secret from its memory: a kernel source with `#include`, `asm`, a constructor or a
system call is refused before it is built.
"""
from __future__ import annotations
import hashlib
import hmac
import json
import math
import os
import re
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path

FORBIDDEN = re.compile(r"#\s*include|\basm\b|__asm__|constructor|destructor|\bsyscall\b|\bextern\b|\bsystem\s*\(")
# a grader-supplied reference may also be a NumPy expression over the array arguments a, b, c, ... (named here)
NUMPY = {"a * b + c * d - a": lambda a, b, c, d, out, n: a * b + c * d - a}
WALL_S = 300   # one sandbox's timings, all of them


def refused(src: str) -> str | None:
  m = FORBIDDEN.search(src)
  return None if m is None else f"the kernel's C contains {m.group(0)!r}, which a compute kernel has no use for"


def spec_of(student: str, name: str, args: list, outputs: list[int], reference: str | None = None,
            numpy: str | None = None, reps: int = 7, tol: float = 1e-3) -> dict:
  """One speed test. args: per parameter ["f32", shape] (random float32), ["sym", shape] (a random symmetric matrix),
  ["zeros", shape] (float32 zeros) or ["int", value]; outputs: the indices of the arguments compared."""
  return {"student": student, "name": name, "args": args, "outputs": outputs, "reference": reference,
          "numpy": numpy, "reps": reps, "tol": tol}


def time_kernels(*args, course: Path | None, **kw) -> dict:
  """{"student": s, "reference": s} (best-of-reps seconds) or {"error": why}, for one speed test (spec_of's
  arguments). course None: no sandbox (a solution notebook timing its own kernel, trusted code)."""
  return time_many([spec_of(*args, **kw)], course=course)[0]


def time_many(specs: list[dict], course: Path | None) -> list[dict]:
  """The timings of every spec, in order, made in one sandbox (course: the student tree it sees)."""
  import sandbox   # the grader's side only: the sandbox side never makes sandboxes
  out: list[dict | None] = [None] * len(specs)
  for k, spec in enumerate(specs):
    student = spec["student"]
    if not isinstance(student, str): out[k] = {"error": f"the recorded kernel is not C source ({student!r:.60})"}
    elif why := refused(student): out[k] = {"error": why}
  todo = [k for k, r in enumerate(out) if r is None]
  if not todo: return out
  key = secrets.token_hex(16)
  plan = json.dumps({"specs": [specs[k] for k in todo], "key": key})
  here = Path(__file__).resolve().parent
  if course is None:
    r = subprocess.run([sys.executable, str(here / "timing.py")], input=plan, capture_output=True, text=True,
                       timeout=WALL_S, env={**os.environ, "PYTHONPATH": str(here.parent.parent)})
    log, late = r.stdout + r.stderr, False
  else:
    import trusted
    with tempfile.TemporaryDirectory(prefix="uopc-timing-") as job:
      ro = [(str(course), "/course"), (str(here), "/grader"), *trusted.binds()]
      ran = sandbox.run([sandbox.python()[0], "/grader/timing.py"], ro, Path(job) / "out", plan.encode(),
                        sandbox.Limits(wall_s=WALL_S), env=trusted.ENV)
      trusted.adopt(Path(job) / "out" / "sources")   # the reference kernels, and the student's if not yet
    log, late = ran.log, ran.timed_out
  said: dict[int, dict] = {}
  for line in log.splitlines():
    sig, _, body = line.partition(" ")
    if len(sig) == 64 and hmac.compare_digest(sig, hmac.new(key.encode(), body.encode(), hashlib.sha256).hexdigest()):
      got = json.loads(body)
      if isinstance(got, dict) and type(got.get("test")) is int: said[got.pop("test")] = got
  for j, k in enumerate(todo):
    out[k] = said.get(j) or {"error": f"timing ran past {WALL_S} s" if late else f"no timing came back: {log[-300:]}"}
  return out


class Later(BaseException):
  """A speed judge asked for a timing not made yet: its judge runs again once every speed test's is (grade.py).
  A BaseException, so that a judge's own `except Exception` does not swallow it."""


class Batch:
  """time_kernels for a grading's judges: on the first pass each call only notes its speed test and raises Later;
  run() then times every test noted, in one sandbox; afterwards each call answers with its test's timing."""

  def __init__(self, course: Path):
    self.course, self.asked, self.done = course, [], {}

  def __call__(self, *args, **kw) -> dict:
    spec = spec_of(*args, **kw)
    name = json.dumps(spec, sort_keys=True)
    if name in self.done: return self.done[name]
    self.asked.append(spec)
    raise Later()

  def forget(self) -> None:
    """Drop every timing made: the next calls ask again (a speed test timed once more)."""
    self.asked, self.done = [], {}

  def run(self) -> None:
    specs, self.asked = self.asked, []
    for spec, got in zip(specs, time_many(specs, self.course)): self.done[json.dumps(spec, sort_keys=True)] = got


def main() -> int:   # in the sandbox
  plan = json.loads(sys.stdin.read())
  key = plan["key"]
  for k, spec in enumerate(plan["specs"]):
    got = measure(spec)
    body = json.dumps({"test": k, **got})
    print(hmac.new(key.encode(), body.encode(), hashlib.sha256).hexdigest(), body, flush=True)
  return 0


def measure(spec: dict) -> dict:
  """One speed test, in the sandbox: {"student": s, "reference": s} or {"error": why}."""
  import numpy as np
  from uopc.runtime import Program
  rng = np.random.default_rng(secrets.randbits(32))
  sym = lambda x: (x + x.T).astype(np.float32)   # B = B^T: a kernel reading B^T computes what one reading B does
  make = {"f32": lambda s: rng.standard_normal(s).astype(np.float32), "zeros": lambda s: np.zeros(s, np.float32),
          "sym": lambda s: sym(rng.standard_normal(s))}
  try:
    args = [a[1] if a[0] == "int" else make[a[0]](tuple(a[1])) for a in spec["args"]]
    fresh = lambda: [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    ref_args, mine_args = fresh(), fresh()
    if spec["reference"] is not None:
      ref = Program(spec["reference"], spec["name"])
      run_ref = lambda: ref(*ref_args)
    else:
      expr = NUMPY[spec["numpy"]]
      run_ref = lambda: expr(*ref_args)
      ref_args[spec["outputs"][0]][...] = run_ref()
    if spec["reference"] is not None: run_ref()
    mine = Program(spec["student"], spec["name"])
    run_mine = lambda: mine(*mine_args)
    run_mine()
  except Exception as e:
    return {"error": f"{type(e).__name__}: {e}"[:400]}
  for k in spec["outputs"]:
    want, got = ref_args[k], mine_args[k]
    if not np.allclose(got, want, rtol=spec["tol"], atol=spec["tol"]):
      return {"error": f"the timed kernel's output (argument {k}) differs from the reference's"}
  tm = tr = math.inf
  for _ in range(spec["reps"]):
    t0 = time.perf_counter(); run_mine(); tm = min(tm, time.perf_counter() - t0)
    t0 = time.perf_counter(); run_ref(); tr = min(tr, time.perf_counter() - t0)
  return {"student": tm, "reference": tr}


if __name__ == "__main__":
  sys.exit(main())
