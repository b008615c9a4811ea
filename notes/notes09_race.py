"""NOTES 9: the book's online kernel with its per-row state declared outside the parallel loop races.

  python notes/notes09_race.py
"""
import math
import numpy as np
from uopc.book import load_example
from uopc.uop import Ops, UOp
from uopc.render_c import render_c
from uopc.runtime import Program
book = load_example("flash_attention")


def hoisted(N, D):
  """The book's online_attention_ir with its per-row state M, L, O, S declared outside the row loop: every
  x.after(i, ...) of that state becomes x.after().after(i, ...) (declared at the top, still set per row)."""
  prog = book.online_attention_ir(N, D)
  todo = {u for u in prog.toposort() if u.op is Ops.AFTER and u.src[0].op is Ops.ALLOC and len(u.src) > 1}
  (new,) = UOp.wrap([prog], todo, lambda n: n.src[0].after().after(*n.src[1:]))
  return new


N, D = 1024, 64
rng = np.random.default_rng(0)
q, k, v = (rng.standard_normal((N, D)).astype(np.float32) for _ in range(3))
s = q @ k.T / math.sqrt(D); pp = np.exp(s - s.max(-1, keepdims=True)); ref = (pp / pp.sum(-1, keepdims=True)) @ v
variants = (("book (state inside the parallel loop)", book.online_attention_ir(N, D)),
            ("hoisted (state outside)", hoisted(N, D)))
for label, ir in variants:
  src = render_c(ir, "flash")
  prg = Program(src, "flash"); errs = []
  for _ in range(5):
    out = np.zeros(N * D, np.float32); prg(q, k, v, out); errs.append(float(np.abs(out.reshape(N, D) - ref).max()))
  print(f"{label}: max error over 5 runs {max(errs):.2e}, runs: {['%.1e' % x for x in errs]}")
  if "hoisted" in label: print("\n".join(src.splitlines()[:9]))
