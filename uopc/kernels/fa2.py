"""FlashAttention-2 as a GPU loop program (chapter 13): K and V tiles shared by a work-group through local memory.

  fa2_ir(heads, nq, nk, d, ...) -> a loop program with launch axes. One work-group per (batch x head, block of bq
  queries), one work-item per query row. Per tile of bk keys the work-group
    1. loads the K and V tiles into local memory together (neighbouring work-items, neighbouring floats), barrier;
    2. each work-item scores its row against the tile (its q row in registers, K from local memory), takes the
       tile's max, rescales its output row and sum once, adds P V (V from local memory), barrier.
  Causal attention stops the key loop at the block's diagonal (a loop bound the whole work-group shares, so the
  barriers stay uniform) and masks inside the last tile; a row whose keys are all masked gets zeros.
Buffers: data0 q (heads, nq, d), data1 k (heads, nk, d), data2 v (heads, nk, dv), data3 out (heads, nq, dv); nq must
divide by bq, nk by bk; keys at or past total_keys are padding (masked).
"""
from __future__ import annotations
import math
from uopc import symbolic
from uopc.dtype import dtypes
from uopc.uop import UOp, Ops, ParamArg, LocalArg, AxisType, sink

LOG2E = 1 / math.log(2)


def fa2_ir(heads: int, nq: int, nk: int, d: int, dv: int | None = None, bq: int = 32, bk: int = 16,
           causal: bool = False, scale: float | None = None, total_keys: int | None = None) -> UOp:
  dv = d if dv is None else dv
  total_keys = nk if total_keys is None else total_keys
  if nq % bq or nk % bk or (bk * d) % bq or (bk * dv) % bq:
    raise ValueError(f"fa2: nq={nq} must divide by bq={bq}, nk={nk} by bk={bk}, and bk*d, bk*dv by bq")
  f32 = dtypes.f32
  buf = lambda slot, n: UOp(Ops.BUFFER, (), ParamArg(slot, f32, (n,)))
  Q, K, V, OUT = buf(0, heads * nq * d), buf(1, heads * nk * d), buf(2, heads * nk * dv), buf(3, heads * nq * dv)
  reg = lambda slot, n: UOp(Ops.ALLOC, (), ParamArg(slot, f32, (n,)))
  QR, O, S, M, L, SA, PV, MT, LT = reg(0, d), reg(1, dv), reg(2, bk), reg(3, 1), reg(4, 1), reg(5, 1), reg(6, 1), \
    reg(7, 1), reg(8, 1)
  LK, LV = UOp(Ops.ALLOC, (), LocalArg(9, f32, (bk * d,))), UOp(Ops.ALLOC, (), LocalArg(10, f32, (bk * dv,)))
  ids = iter(range(100))
  rng = lambda n, kind=AxisType.REDUCE: UOp(Ops.RANGE, (n if isinstance(n, UOp) else UOp.const(n),), (next(ids), kind))
  gh, gq, li = (rng(heads, AxisType.GLOBAL) if heads > 1 else UOp.const(0)), rng(nq // bq, AxisType.GLOBAL), \
    rng(bq, AxisType.LOCAL)
  launch = [r for r in (gh, gq, li) if r.op is Ops.RANGE]
  row = gq * bq + li
  c = (LOG2E / math.sqrt(d) if scale is None else scale * LOG2E)   # scores in base 2: exp(x) = 2^(x log2 e)
  # the q row, scaled, in registers; o = 0, m = -inf, l = 0
  cq = rng(d)
  qr = QR.after(*launch)
  q_in = qr.index(cq).store(Q.index((gh * nq + row) * d + cq).load() * c).end(cq)
  o0 = O.after(*launch)
  co = rng(dv)
  o_in = o0.index(co).store(UOp.const(0.0)).end(co)
  m0, l0 = M.after(*launch), L.after(*launch)
  m_in, l_in = m0.index(0).store(UOp.const(-math.inf)), l0.index(0).store(UOp.const(0.0))
  # the key tiles: all of them, or up to the block's diagonal
  tiles = UOp.const(nk // bk)
  if causal:
    diag = (gq * bq + (bq - 1)) // bk + 1
    tiles = (diag < nk // bk).where(diag, tiles)
  kt = rng(tiles)
  # 1. cooperative loads of the tiles
  loads = []
  for j in range(bk * d // bq):
    e = li + bq * j
    loads.append(LK.after(*launch).index(e).store(K.index((gh * nk + kt * bk) * d + e).load()))
  for j in range(bk * dv // bq):
    e = li + bq * j
    loads.append(LV.after(*launch).index(e).store(V.index((gh * nk + kt * bk) * dv + e).load()))
  ready = UOp(Ops.BARRIER, tuple(loads))
  lk, lv = LK.after(ready), LV.after(ready)
  # 2a. the row's scores against the tile (-inf where masked)
  qv = qr.after(q_in)
  js, cs = rng(bk), rng(d)
  sa = SA.after(*launch, kt, js)
  sal = sa.after(sa.index(0).store(UOp.const(0.0)), cs)
  s_acc = sal.index(0).store(sal.index(0).load() + qv.index(cs).load() * lk.index(js * d + cs).load()).end(cs)
  key = kt * bk + js
  ok = key < total_keys
  if causal: ok = ok & (key < row + 1)
  s_tile = S.after(*launch)
  scores = s_tile.index(js).store(ok.where(sa.after(s_acc).index(0).load(), -math.inf)).end(js)
  sv = s_tile.after(scores)
  # 2b. the tile's max, the new running max (read as 0 while it is -inf: a fully masked row stays zeros)
  mcur = m0.after(m_in, l_in, o_in, kt).index(0).load()
  jm = rng(bk)
  mt = MT.after(*launch, kt)
  mtl = mt.after(mt.index(0).store(mcur), jm)
  m_upd = mtl.index(0).store(mtl.index(0).load().maximum(sv.index(jm).load())).end(jm)
  mnew = mt.after(m_upd).index(0).load()
  msafe = (mnew < -3.0e38).where(0.0, mnew)
  corr = (mcur - msafe).exp2()
  # 2c. p = 2^(s - m), its sum, and the output row rescaled once and added P V
  jl = rng(bk)
  lt = LT.after(*launch, kt)
  ltl = lt.after(lt.index(0).store(UOp.const(0.0)), jl)
  l_upd = ltl.index(0).store(ltl.index(0).load() + (sv.index(jl).load() - msafe).exp2()).end(jl)
  lcur = l0.after(m_in, l_in, o_in, kt)
  l_new = lcur.index(0).store(lcur.index(0).load() * corr + lt.after(l_upd).index(0).load())
  cv, jv = rng(dv), rng(bk)
  pv = PV.after(*launch, kt, cv)
  pvl = pv.after(pv.index(0).store(UOp.const(0.0)), jv)
  p_v = (sv.index(jv).load() - msafe).exp2() * lv.index(jv * dv + cv).load()
  pv_upd = pvl.index(0).store(pvl.index(0).load() + p_v)
  ocur = o0.after(o_in, m_in, l_in, kt, cv)
  o_new = ocur.index(cv).store(ocur.index(cv).load() * corr + pv.after(pv_upd.end(jv)).index(0).load()).end(cv)
  m_new = m0.after(m_in, l_in, o_in, kt).index(0).store(mnew)
  # 3. everyone is done with the tiles before the next ones overwrite them
  done = UOp(Ops.BARRIER, (UOp(Ops.SINK, (o_new, l_new, m_new)),)).end(kt)
  # out = o / l (0 for a row with no key)
  lf = l0.after(done).index(0).load()
  cf = rng(dv)
  val = (lf > 0.0).where(o0.after(done).index(cf).load() * lf.maximum(1e-30).recip(), 0.0)
  out = OUT.index((gh * nq + row) * dv + cf).store(val).end(cf)
  return symbolic.simplify(sink(out.end(*launch)))
