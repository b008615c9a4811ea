"""NOTES 9: the book's online kernel with its per-row state declared outside the parallel loop races.

  python notes/notes09_race.py
"""
import math, sys
import numpy as np
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent.parent / "examples"))
import flash_attention as book
from uopc.uop import UOp, Ops, ParamArg, AxisType, sink, range_
from uopc.dtype import dtypes
from uopc.render_c import render_c
from uopc.runtime import Program
LOG2E = book.LOG2E
def hoisted(N, D):
  """online_attention_ir with M, L, O, S placed outside the row loop (no .after(i))."""
  f32 = dtypes.f32
  Q, K, V, OUT = (UOp(Ops.BUFFER, (), ParamArg(s, f32, (N * D,))) for s in range(4))
  alloc = lambda slot, n: UOp(Ops.ALLOC, (), ParamArg(slot, f32, (n,)))
  M, L, O, S = alloc(0, 1), alloc(1, 1), alloc(2, D), alloc(3, 1)
  scale = (1 / math.sqrt(D)) * LOG2E
  i = range_(N, 0, AxisType.THREAD)
  Mi, Li, Oi = M.after(), L.after(), O.after()          # <- the bug: not .after(i)
  init_m = Mi.after(i).index(0).store(UOp.const(-math.inf))
  init_l = Li.after(i).index(0).store(UOp.const(0.0))
  d0 = range_(D, 1)
  init_o = Oi.after(i).index(d0).store(UOp.const(0.0)).end(d0)
  j = range_(N, 2)
  Sj = S.after().after(i, j)
  init_s = Sj.index(0).store(UOp.const(0.0))
  e = range_(D, 3)
  Se = Sj.after(init_s, e)
  dot = Se.index(0).store(Se.index(0).load() + Q.index(i * D + e).load() * K.index(j * D + e).load()).end(e)
  s = Sj.after(dot).index(0).load() * scale
  Mj, Lj = Mi.after(init_m, j), Li.after(init_l, j)
  m_old = Mj.index(0).load(); m_new = m_old.maximum(s)
  corr = UOp(Ops.EXP2, (m_old - m_new,)); p = UOp(Ops.EXP2, (s - m_new,))
  st_l = Lj.index(0).store(Lj.index(0).load() * corr + p)
  d = range_(D, 4)
  Od = Oi.after(init_o, j)
  st_o = Od.index(d).store(Od.index(d).load() * corr + p * V.index(j * D + d).load()).end(d)
  st_m = Mj.index(0).store(m_new)
  loop_j = UOp(Ops.SINK, (st_l, st_o, st_m)).end(j)
  d2 = range_(D, 5)
  out = OUT.index(i * D + d2).store(Oi.after(loop_j).index(d2).load() * Li.after(loop_j).index(0).load().recip())
  return sink(out.end(d2, i))
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
