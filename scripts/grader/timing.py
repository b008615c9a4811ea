"""Speed tests: a student's kernel (the C source its probe recorded) timed against a reference of the grader's, in a
fresh sandbox of its own, where no Python code of the student's is alive.

The grader side (`time_kernels`, called by a speed test's judge) sends the two kernels, the arguments' shapes and a
secret on stdin; the sandbox side (`main`, this file run as a script) builds both with uopc's Program, checks that
the student's kernel computes what the reference computes on the same inputs (a fast kernel that computes nothing
earns nothing), times them taking turns (best of reps), and prints one line signed with the secret. The student's C
runs in that process and so could, in principle, read the secret from its memory: a kernel source with `#include`,
`asm`, a constructor or a system call is refused before it is built.
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


def refused(src: str) -> str | None:
  m = FORBIDDEN.search(src)
  return None if m is None else f"the kernel's C contains {m.group(0)!r}, which a compute kernel has no use for"


def time_kernels(student: str, name: str, args: list, outputs: list[int], reference: str | None = None,
                 numpy: str | None = None, reps: int = 7, tol: float = 1e-3, *, course: Path | None) -> dict:
  """{"student": s, "reference": s} (best-of-reps seconds) or {"error": why}. args: per parameter ["f32", shape]
  (random float32), ["sym", shape] (a random symmetric matrix), ["zeros", shape] (float32 zeros) or ["int", value];
  outputs: the indices of the arguments compared. course None:
  no sandbox (a solution notebook timing its own kernel, trusted code)."""
  import sandbox   # the grader's side only: the sandbox side never makes sandboxes
  if not isinstance(student, str): return {"error": f"the recorded kernel is not C source ({student!r:.60})"}
  if why := refused(student): return {"error": why}
  key = secrets.token_hex(16)
  spec = {"student": student, "name": name, "args": args, "outputs": outputs, "reference": reference,
          "numpy": numpy, "reps": reps, "tol": tol, "key": key}
  here = Path(__file__).resolve().parent
  if course is None:
    r = subprocess.run([sys.executable, str(here / "timing.py")], input=json.dumps(spec), capture_output=True,
                       text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(here.parent.parent)})
    log = r.stdout + r.stderr
  else:
    import trusted
    with tempfile.TemporaryDirectory(prefix="uopc-timing-") as job:
      ro = [(str(course), "/course"), (str(here), "/grader"), *trusted.binds()]
      ran = sandbox.run([sandbox.python()[0], "/grader/timing.py"], ro, Path(job) / "out", json.dumps(spec).encode(),
                        sandbox.Limits(wall_s=300), env=trusted.ENV)
      trusted.adopt(Path(job) / "out" / "sources")   # the reference kernel, and the student's if it was not yet
    if ran.timed_out: return {"error": "timing ran past 300 s"}
    log = ran.log
  for line in reversed(log.splitlines()):
    sig, _, body = line.partition(" ")
    if len(sig) == 64 and hmac.compare_digest(sig, hmac.new(key.encode(), body.encode(), hashlib.sha256).hexdigest()):
      out = json.loads(body)
      return out if isinstance(out, dict) else {"error": "a malformed timing"}
  return {"error": f"no timing came back: {log[-300:]}"}


def main() -> int:   # in the sandbox
  import numpy as np
  from uopc.runtime import Program
  spec = json.loads(sys.stdin.read())
  key = spec.pop("key")
  say = lambda d: print(hmac.new(key.encode(), json.dumps(d).encode(), hashlib.sha256).hexdigest(), json.dumps(d),
                        flush=True)
  rng = np.random.default_rng(secrets.randbits(32))
  sym = lambda x: (x + x.T).astype(np.float32)   # B = B^T: a kernel reading B^T computes what one reading B does
  make = {"f32": lambda s: rng.standard_normal(s).astype(np.float32), "zeros": lambda s: np.zeros(s, np.float32),
          "sym": lambda s: sym(rng.standard_normal(s))}
  args = [a[1] if a[0] == "int" else make[a[0]](tuple(a[1])) for a in spec["args"]]
  fresh = lambda: [a.copy() if isinstance(a, np.ndarray) else a for a in args]
  try:
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
    say({"error": f"{type(e).__name__}: {e}"[:400]})
    return 0
  for k in spec["outputs"]:
    want, got = ref_args[k], mine_args[k]
    if not np.allclose(got, want, rtol=spec["tol"], atol=spec["tol"]):
      say({"error": f"the timed kernel's output (argument {k}) differs from the reference's"})
      return 0
  tm = tr = math.inf
  for _ in range(spec["reps"]):
    t0 = time.perf_counter(); run_mine(); tm = min(tm, time.perf_counter() - t0)
    t0 = time.perf_counter(); run_ref(); tr = min(tr, time.perf_counter() - t0)
  say({"student": tm, "reference": tr})
  return 0


if __name__ == "__main__":
  sys.exit(main())
