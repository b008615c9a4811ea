"""NOTES 49: gcc 12.2 fuses the wrong multiply into a masked add on AVX-512; a canary finds it, a flag avoids it.

  PYTHONPATH=. python notes/notes49_cond_fma.py

Builds uopc.runtime.compiler_bugs' canary (a sum over six elements whose body is `(a ? x + s : 0) + (b ? (y+s)*3 : 0)`)
with uopc's flags at each x86 level this CPU runs, with and without the workaround, and prints each answer (right:
-0.5); then the softmax kernel of NOTES 32 through `Program` (which adds the workaround where the canary is wrong)
against NumPy in float64.
"""
from __future__ import annotations
import subprocess
import tempfile
from pathlib import Path
import numpy as np
from uopc.runtime import Program
from uopc.runtime.build import run_compiler
from uopc.runtime.compiler_bugs import COND_FMA, MAIN, workarounds
from uopc.runtime.flags import FLAGS
from uopc.runtime.machine import MarchError, compiler, resolve, target

LEVELS = ("native", "x86-64-v4", "x86-64-v3", "x86-64-v2")


def answer(flags: tuple[str, ...]) -> str:
  with tempfile.TemporaryDirectory() as tmp:
    c, exe = Path(tmp) / "canary.c", Path(tmp) / "canary"
    c.write_text(COND_FMA.canary + MAIN)
    program_flags = [f for f in flags if f not in ("-shared", "-fPIC", "-fopenmp")]
    subprocess.run([compiler(), *program_flags, "-o", str(exe), str(c)], check=True)
    return subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.strip()


def main() -> None:
  cc = compiler()
  print(subprocess.run([cc, "--version"], capture_output=True, text=True).stdout.splitlines()[0])
  for level in LEVELS:
    try: flags = resolve(FLAGS, target("" if level == "native" else level, cc=cc))
    except MarchError as e: print(f"{level:10s} skipped: {e}"); continue
    plain, fixed = answer(flags), answer(flags + COND_FMA.workaround)
    print(f"{level:10s} uopc's flags: {float.fromhex(plain):6.3f}   with {' '.join(COND_FMA.workaround)}: "
          f"{float.fromhex(fixed):6.3f}   uopc adds: {' '.join(workarounds(cc, flags, run_compiler)) or '(nothing)'}")
  src = (Path(__file__).parent / "notes32_fma_crash.c").read_text()
  prg = Program(src, "r_6")
  x, s, out = np.linspace(-1, 1, 6, dtype=np.float32), np.array([0.5], np.float32), np.zeros(6, np.float32)
  prg(x, s, out)
  t = np.concatenate([x[:4] + s[0], (x[:2] + s[0]) * 3]).astype(np.float64)
  want = np.exp(t - t.max()) / np.exp(t - t.max()).sum()
  print(f"NOTES 32's softmax through Program ({' '.join(prg.flags)}): largest error {np.abs(out - want).max():.2e}")


if __name__ == "__main__":
  main()
