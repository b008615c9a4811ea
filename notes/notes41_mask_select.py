"""NOTES 41: a select between masks, which only a lane count that divides a small dimension ever vectorized.

  PYTHONPATH=. python notes/notes41_mask_select.py [--lanes 8]

Renders `((x < 0) ^ True).where(y < 0, False)` (x >= 0 and y < 0: the shape of the select in the GPT's training plan)
on vectors of `lanes` floats, prints the C line that computes it, runs it and checks it against NumPy. Before the fix
the renderer raised NotImplementedError ("vector selects are written for 32-bit lanes only") for a WHERE whose lanes
are bools; with 8 or 4 lanes the GPT of tests/nn/test_ch14_gpt.py (block 8) reached it, with 16 it did not.
"""
from __future__ import annotations
import argparse
import numpy as np
from uopc.dtype import dtypes
from uopc.render_c import render_c
from uopc.runtime import Program
from uopc.uop import ParamArg, UOp, Ops, range_, sink


def main(lanes: int, n: int = 64) -> None:
  buf = lambda slot: UOp(Ops.BUFFER, (), ParamArg(slot, dtypes.f32, (n,)))
  i = range_(n // lanes, 0)
  x, y = (buf(k).index(i * lanes).load(lanes) for k in (0, 1))
  mask = ((x < 0.0) ^ True).where(y < 0.0, UOp.const(False, dtypes.bool.vec(lanes)))
  src = render_c(sink(buf(2).index(i * lanes).store(mask.cast(dtypes.f32.vec(lanes))).end(i)), "mask_select")
  body = str(src)[str(src).index("void mask_select"):]   # (past the helpers)
  print(next(line.strip() for line in body.splitlines() if "&" in line and "~" in line))
  rng = np.random.default_rng(0)
  a, b = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
  out = np.zeros(n, np.float32)
  Program(src, "mask_select")(a, b, out)
  want = ((a >= 0) & (b < 0)).astype(np.float32)
  print(f"{lanes} lanes: equal to NumPy's (a >= 0) & (b < 0): {np.array_equal(out, want)}")


if __name__ == "__main__":
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--lanes", type=int, default=8)
  main(ap.parse_args().lanes)
