"""Wrong code the C compiler is known to emit under uopc's flags, each caught by a canary (NOTES 49).

A compiler is checked, not trusted. Each entry of BUGS is a small C function that a buggy compiler gets wrong under
some flags, its right answer, and the flags that avoid the bug. Before the first kernel is built with a set of flags,
each canary is compiled with those flags and run; where it comes out wrong, the bug's workaround joins the kernel's
flags (and so its cache key). The verdict is kept on disk beside the kernels: a machine asks once per compiler, CPU
and flags; a process reads a small file.

  workarounds(cc, flags, run)   the flags to add for the bugs this compiler shows with these flags (run: how to run
                                the compiler, uopc.runtime.build.run_compiler)
"""
from __future__ import annotations
import functools
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable
from uopc.helpers import cache
from uopc.runtime.toolchain import cache_dir, cache_key


@dataclass(frozen=True)
class Bug:
  name: str
  canary: str                     # C defining `float canary(const float* d, float s)`: main feeds it fixed inputs
  expected: float                 # its right answer, exact in float32
  needs: tuple[str, ...]          # the flags without which the bug cannot happen: no canary runs without them
  workaround: tuple[str, ...]     # the flags that avoid the bug
  why: str


# gcc 12.2 (Debian 12's) with AVX-512 and -fassociative-math: if-conversion turns `(a ? x + s : 0) + (b ? y : 0)`
# into a masked add, `.COND_ADD(a, x, s, else=y)`, and the pass that forms FMAs then fuses the else branch's
# multiply into that add as if the mask were all true: lanes where `a` holds get x + y*3 instead of x + s. Without
# loop if-conversion there is no masked add to break. Found as a softmax off by 2.4x
# (tests/runtime/test_hardening_runtime.py, Intel AVX-512, -march=native); the same pass crashed gcc on a Zen 4
# (NOTES 32).
COND_FMA = Bug("gcc-cond-add-fma", """
__attribute__((noinline)) float canary(const float* restrict d, float s) {
  float acc = 0.0f;
  for (int r = 0; r < 6; r++) {
    _Bool a = r < 4, b = r > 3;
    float x = d[a ? r : 0], y = d[b ? r - 4 : 0];
    acc = acc + ((a ? (x + s) : 0.0f) + (b ? ((y + s) * 3.0f) : 0.0f));
  }
  return acc;
}
""", -0.5, ("-fassociative-math",), ("-fno-tree-loop-if-convert",),
   "a masked add fused with the other branch's multiply")

BUGS = (COND_FMA,)

MAIN = """
#include <stdio.h>
int main(int argc, char** argv) {
  (void)argv;
  float d[6];   /* from argc (1), so the compiler cannot fold the canary: -1, -0.5, 0, 0.5, 1, 1.5 */
  for (int i = 0; i < 6; i++) d[i] = (float)(i - 2 * argc) * 0.5f;
  printf("%a\\n", (double)canary(d, 0.5f * (float)argc));
  return 0;
}
"""
# what a canary is not built with: it is a program, not a kernel, and needs no OpenMP
NOT_FOR_PROGRAMS = ("-shared", "-fPIC", "-fopenmp")
CANARY_TIMEOUT_S = 60   # to build it, and again to run it


Runner = Callable[[list[str], float], subprocess.CompletedProcess]


def workarounds(cc: str, flags: tuple[str, ...], run: Runner) -> tuple[str, ...]:
  """The workaround flags of every bug in BUGS that `cc` shows when building with `flags` (already resolved for the
  target: -march=native means this machine's CPU, which the canary runs on)."""
  suspects = (bug for bug in BUGS if all(f in flags for f in bug.needs))
  return tuple(f for bug in suspects if shows(bug, cc, flags, run) for f in bug.workaround if f not in flags)


@functools.cache
def shows(bug: Bug, cc: str, flags: tuple[str, ...], run: Runner) -> bool:
  """Whether the canary comes out wrong. The verdict is stored under the compiler's, CPU's and flags' key where the
  kernel cache exists (never creating it: a process that only reads a shared cache leaves no folder behind). A canary
  that does not build or run says nothing (False): the kernel's own build then reports what is wrong."""
  verdict = cache_dir() / CHECKS / f"{bug.name}-{cache_key(bug.canary, cc, flags)}"
  try: return verdict.read_text().strip() == "wrong"
  except OSError: pass
  answer = _answer(bug, cc, flags, run)
  if answer is None: return False
  wrong = answer != bug.expected
  if cache_dir().is_dir():
    try:
      verdict.parent.mkdir(exist_ok=True)
      verdict.write_text("wrong" if wrong else "right")
    except OSError: pass   # a read-only cache: asked again next process
  return wrong


cache("runtime.compiler_bugs", shows)
CHECKS = "compiler-checks"   # the verdicts' folder in the kernel cache


def _answer(bug: Bug, cc: str, flags: tuple[str, ...], run: Runner) -> float | None:
  """The canary's answer, built and run in a temporary folder (the system's, else one beside the kernels: a folder
  shared objects are loaded from lets programs run too, where /tmp is mounted noexec)."""
  program_flags = [f for f in flags if f not in NOT_FOR_PROGRAMS]
  for where in (None, cache_dir()):
    if where is not None and not where.is_dir(): continue
    with tempfile.TemporaryDirectory(prefix="uopc-canary-", dir=where) as tmp:
      c_file, exe = Path(tmp) / "canary.c", Path(tmp) / "canary"
      c_file.write_text(bug.canary + MAIN)
      try:
        built = run([cc, *program_flags, "-o", str(exe), str(c_file)], CANARY_TIMEOUT_S)
        if built.returncode != 0: return None
        out = subprocess.run([str(exe)], capture_output=True, text=True, timeout=CANARY_TIMEOUT_S)
      except PermissionError: continue   # a noexec folder: try the next
      except (OSError, subprocess.TimeoutExpired): return None
      try: return float.fromhex(out.stdout.strip()) if out.returncode == 0 else None
      except ValueError: return None
  return None
