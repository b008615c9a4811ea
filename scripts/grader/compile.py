"""Runs in a compile-only sandbox (trusted.py, outside.py): the C sources the grader wrote to /job/in, compiled with
the compiler and flags the grader names on stdin, into /job/out/<entry>.so, as many at a time as there are cores.
Nothing else runs here: no notebook, no Python of a student's; a source is only text for the compiler.

A job marked `check` (a student's kernel, outside.py) is compiled in two steps. First the preprocessor alone, with no
system include folder (-nostdinc) and one folder of stand-ins, one per allowed header, each only a marker line
(`#pragma uopc_include <math.h>`): a header named any other way (`#define H <stdio.h>` then `#include H`, a path)
is not found, or is listed by -H as a file outside that folder; the expanded text goes back as <entry>.i and the
headers it read as <entry>.inc, for the grader to check (outside.preprocessed_refused). Then the compiler, on that
text with each marker turned back into its #include: what is compiled is what was checked, the student's macros
already expanded. Every compiler process runs with its stdin closed and limits on its CPU time, address space and
the size of any file it writes, so that a source naming an endless device (/dev/zero) stops at a limit.
"""
from __future__ import annotations
import json
import os
import re
import resource
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

IN, OUT, STUBS = "/job/in", "/job/out", "/tmp/allowed-headers"
TIMEOUT = 120   # seconds for one kernel (the sandbox's wall-clock limit bounds them all)
MAX_ERR = 4000  # characters of a compiler's complaint kept
CPU_S, MEMORY, FSIZE = 120, 4 << 30, 64 << 20   # each compiler process: CPU seconds, address space, a file's bytes
PRE_TIMEOUT, PRE_MEMORY = 30, 1 << 30           # the preprocessor alone: a kernel's text needs far less
MARKER = re.compile(r"^#pragma uopc_include <([\w./+-]+)>\s*$", re.M)


def _limits(memory: int = MEMORY):
  def apply() -> None:
    for res, value in ((resource.RLIMIT_CPU, CPU_S), (resource.RLIMIT_AS, memory), (resource.RLIMIT_FSIZE, FSIZE),
                       (resource.RLIMIT_CORE, 0)):
      resource.setrlimit(res, (value, value))
  return apply


def _run(cmd: list[str]) -> str:
  """The compiler's complaint ("" when it worked)."""
  try: r = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          timeout=TIMEOUT, preexec_fn=_limits())
  except (OSError, subprocess.TimeoutExpired) as e: return f"{type(e).__name__}"
  return (r.stderr.decode("utf-8", "replace") or f"status {r.returncode}") if r.returncode else ""


def _preprocess(cc: str, flags: list[str], stem: str) -> str:
  """Step one of a checked job: <stem>.i (the expanded text) and <stem>.inc (the headers it read); the complaint."""
  cmd = [cc, *flags, "-E", "-P", "-H", "-nostdinc", "-I", STUBS, "-o", f"{OUT}/{stem}.i", f"{IN}/{stem}.c"]
  try: r = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          timeout=PRE_TIMEOUT, preexec_fn=_limits(PRE_MEMORY))
  except (OSError, subprocess.TimeoutExpired) as e: return f"the preprocessor stopped: {type(e).__name__}"
  said = r.stderr.decode("utf-8", "replace")
  read = [line.lstrip(".").strip() for line in said.splitlines() if re.match(r"^\.+ ", line)]
  with open(f"{OUT}/{stem}.inc", "w") as f: f.write("\n".join(read))
  return (said or f"status {r.returncode}") if r.returncode else ""


def main() -> int:
  plan = json.loads(sys.stdin.read())
  os.makedirs(STUBS, exist_ok=True)
  for name in plan.get("allowed", []):   # a stand-in per allowed header: its marker, nothing else
    path = os.path.join(STUBS, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f: f.write(f"#pragma uopc_include <{name}>\n")

  def build(job: dict) -> None:
    source, flags = f"{IN}/{job['stem']}.c", list(job["flags"])
    err = ""
    if job.get("check"):
      err = _preprocess(plan["cc"], flags, job["stem"])
      if not err:   # the checked text, its markers turned back into the headers they stand for
        with open(f"{OUT}/{job['stem']}.i") as f: text = f.read()
        source = f"/tmp/{job['stem']}.c"
        with open(source, "w") as f: f.write(MARKER.sub(lambda m: f"#include <{m.group(1)}>", text))
    if not err: err = _run([plan["cc"], *flags, "-o", f"{OUT}/{job['stem']}.so", source, "-lm"])
    if err:   # why it did not build, for a judge's message (outside.py); trusted.py only looks for the object
      with open(f"{OUT}/{job['stem']}.err", "w") as f: f.write(err[-MAX_ERR:])

  with ThreadPoolExecutor(max(1, os.cpu_count() or 1)) as pool: list(pool.map(build, plan["jobs"]))
  return 0


if __name__ == "__main__":
  sys.exit(main())
