"""NOTES 32: a kernel on which the system compiler crashes, and the flags that avoid the crash.

  python notes/notes32_compiler_crash.py

Compiles notes/notes32_fma_crash.c (uopc's PRELUDE first, as Program does) with uopc's flags, then with one flag
added or removed at a time, and says for each whether the compiler crashed (an internal compiler error), failed
otherwise, or built it. Then builds it through uopc.runtime.Program in a cache of its own (which retries a crash
with uopc.runtime.CRASH_RETRY_FLAGS) and checks its answer against NumPy in float64.
"""
import os
import subprocess
import tempfile
import warnings
from pathlib import Path
import numpy as np
from uopc.bench import header
from uopc.runtime import CRASH_RETRY_FLAGS, FLAGS, PRELUDE, compiler, compiler_crashed

SRC = Path(__file__).resolve().parent / "notes32_fma_crash.c"


def outcome(cc: str, flags: tuple[str, ...], src: str) -> str:
  with tempfile.TemporaryDirectory() as tmp:
    r = subprocess.run([cc, *flags, "-o", str(Path(tmp) / "k.so"), "-x", "c", "-", "-lm"], input=src, text=True,
                       capture_output=True, timeout=300)
  if r.returncode == 0: return "built"
  return "crashed (internal compiler error)" if compiler_crashed(r.stderr) else "failed: " + r.stderr.strip()[:80]


def main() -> None:
  print(header())
  cc, src = compiler(), PRELUDE + SRC.read_text()
  variants = {"uopc's flags": FLAGS}
  for extra in (*CRASH_RETRY_FLAGS, "-O2", "-fno-tree-vectorize", "-fno-associative-math", "-mno-fma"):
    variants[f"+ {extra}"] = FLAGS + (extra,)
  for name, flags in variants.items(): print(f"{name:<26s} {outcome(cc, flags, src)}")
  with tempfile.TemporaryDirectory() as cache:
    os.environ["UOPC_CACHE_DIR"] = cache
    from uopc.runtime import Program
    with warnings.catch_warnings(record=True) as said:
      warnings.simplefilter("always")
      prg = Program(SRC.read_text(), "r_6")
    x, s, out = np.linspace(-1, 1, 6, dtype=np.float32), np.array([0.5], np.float32), np.zeros(6, np.float32)
    prg(x, s, out)
  t = np.concatenate([x[:4] + s[0], (x[:2] + s[0]) * 3]).astype(np.float64)
  ref = np.exp(t - t.max()) / np.exp(t - t.max()).sum()
  print(f"through Program: {len(said)} warning(s){': ' + str(said[0].message) if said else ''}")
  print(f"largest error against float64: {np.abs(out - ref).max():.2e}")


if __name__ == "__main__":
  main()
