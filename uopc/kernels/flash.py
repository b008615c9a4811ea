"""A FlashAttention kernel written with the loop-IR builders: the book's online_attention_ir (section 11.7), tiled.

Section 11.8 left the online kernel at one query row per thread iteration, so every key and value row loaded from
cache served one query. Here each iteration of the threaded loop owns a block of `rows` queries and walks the
keys in tiles of `keys`:

  S = Q_blk K_tile^T     a rows x keys register tile, built over the head dim from a packed K^T (keys contiguous)
  m, l                    each row's running max and sum, updated once per tile
  O = O * corr + P V      the rows x D output block, rescaled once per tile, V read one row at a time

Causal attention stops each block's key loop at the diagonal (the loop bound is an expression of the block) and
masks the scores inside the last tile. An additive mask (one float per query and key; -inf masks) may be given
instead. A row whose keys are all masked gets zeros, never NaN: its running max is read as 0 while it is -inf.
"""
from __future__ import annotations
import math
from uopc.uop import UOp, Ops, ParamArg, AxisType, sink, range_
from uopc.dtype import dtypes

LOG2E = 1 / math.log(2)


def flash_attention_ir(heads: int, nq: int, nk: int, d: int, rows: int = 4, keys: int = 16, causal: bool = False,
                       masked: bool = False, scale: float | None = None, dv: int | None = None,
                       total_keys: int | None = None, splits: int = 1, partial: bool = False) -> UOp:
  """Loop program for out = softmax(q k^T * scale [+ mask]) v over `heads` independent (batch, head) pairs.
  Buffers: data0 q (heads, nq, d), data1 kt (heads, d, nk) -- K transposed, data2 v (heads, nk, dv),
  [mask (heads, nq, nk), additive, if masked], then out (heads, nq, dv). nq must divide by rows, nk by keys.
  causal: query i sees keys j <= i (PyTorch's is_causal). splits: consecutive heads hold consecutive chunks of one
  head's keys (flash-decoding); total_keys: the real number of keys, the rest is padding and masked.
  partial: write the unnormalised o and each row's running max m and sum l (flash-decoding's first kernel)."""
  if nq % rows or nk % keys: raise ValueError(f"flash: nq={nq} must divide by rows={rows} and nk={nk} by keys={keys}")
  dv = d if dv is None else dv
  f32 = dtypes.f32
  buf = lambda slot, n: UOp(Ops.BUFFER, (), ParamArg(slot, f32, (n,)))
  Q, KT, V = buf(0, heads * nq * d), buf(1, heads * d * nk), buf(2, heads * nk * dv)
  MASK = buf(3, heads * nq * nk) if masked else None
  OUT = buf(3 + masked, heads * nq * dv)
  MOUT, LOUT = (buf(4 + masked, heads * nq), buf(5 + masked, heads * nq)) if partial else (None, None)
  alloc = lambda slot, n: UOp(Ops.ALLOC, (), ParamArg(slot, f32, (n,)))
  M, L, O, S = alloc(0, rows), alloc(1, rows), alloc(2, rows * dv), alloc(3, rows * keys)
  sc = (scale if scale is not None else 1 / math.sqrt(d)) * LOG2E   # base 2 throughout: exp(x) = exp2(x log2 e)

  blocks = nq // rows
  b = range_(heads * blocks, 0, AxisType.THREAD)        # one (head, query block) per iteration
  h, qb = b // blocks, b % blocks
  if causal:   # block qb has qb+1 tiles of keys; OpenMP hands each thread a contiguous run of iterations, so take the
    # blocks in the order 0, n-1, 1, n-2, ...: every run then mixes short and long blocks (balanced threads)
    qb = (qb % 2).ne(1).where(qb // 2, (blocks - 1) - qb // 2)
  q0 = h * (nq * d) + qb * (rows * d)                    # first element of the block's queries
  o0 = h * (nq * dv) + qb * (rows * dv)
  Mb, Lb, Ob = M.after(b), L.after(b), O.after(b)
  x0 = range_(rows, 1)
  init_ml = UOp(Ops.SINK, (Mb.index(x0).store(UOp.const(-math.inf)), Lb.index(x0).store(UOp.const(0.0)))).end(x0)
  x1 = range_(rows * dv, 2)
  init_o = Ob.index(x1).store(UOp.const(0.0)).end(x1)

  tiles = nk // keys
  if causal:   # keys up to the block's last row only: the loop's end is an expression of the block
    last_row = qb * rows + (rows - 1)
    bound = (last_row // keys + 1)
    bound = (bound < tiles).where(bound, tiles)
  else: bound = UOp.const(tiles)
  t = range_(bound, 3)
  k0 = t * keys                                          # first key of the tile

  # S = Q_blk K_tile^T over the head dim; the keys of the tile are the inner loop (contiguous in K^T: vectorised)
  St = S.after(b, t)
  c0 = range_(keys, 4)
  init_s = UOp(Ops.SINK, tuple(St.index(r * keys + c0).store(UOp.const(0.0)) for r in range(rows))).end(c0)
  e, c1 = range_(d, 5), range_(keys, 6)
  Se = St.after(init_s, e, c1)
  kv = KT.index(h * (d * nk) + e * nk + k0 + c1).load()
  acc_s = lambda r: Se.index(r * keys + c1)
  dot = UOp(Ops.SINK, tuple(acc_s(r).store(acc_s(r).load() + Q.index(q0 + r * d + e).load() * kv) for r in range(rows)))
  dot = dot.end(e, c1)
  Sd = St.after(dot)

  # per row: the tile's scores (scaled, masked), its max, the new running max and the correction
  Mt, Lt, Ot = Mb.after(init_ml, t), Lb.after(init_ml, t), Ob.after(init_o, t)
  score = lambda r, c: _score(Sd.index(r * keys + c).load() * sc, r, c)
  def _score(x, r, c):
    row = qb * rows + r
    if masked: x = x + MASK.index(h * (nq * nk) + row * nk + k0 + c).load() * LOG2E
    if causal: x = (row < (k0 + c)).where(-math.inf, x)   # a key after the query: masked
    if total_keys is not None and total_keys < splits * nk:   # padding keys: masked
      key = (h % splits) * nk + k0 + c if splits > 1 else k0 + c
      x = (key < total_keys).where(x, -math.inf)
    return x
  T = alloc(4, rows)                                     # the tile's row maxima
  Tt = T.after(b, t)
  c2 = range_(keys, 7)
  init_t = UOp(Ops.SINK, tuple(Tt.index(r).store(UOp.const(-math.inf)) for r in range(rows)))
  Tc = Tt.after(init_t, c2)
  tmax = UOp(Ops.SINK, tuple(Tc.index(r).store(Tc.index(r).load().maximum(score(r, c2))) for r in range(rows))).end(c2)
  Tm = Tt.after(tmax)
  m_old = [Mt.index(r).load() for r in range(rows)]
  m_new = [m_old[r].maximum(Tm.index(r).load()) for r in range(rows)]
  # a row with every key masked so far has m = -inf: read it as 0, so corr and p are 0, not NaN (-inf - -inf)
  m_use = [(m.ne(-math.inf)).where(m, 0.0) for m in m_new]
  corr = [UOp(Ops.EXP2, (m_old[r] - m_use[r],)) for r in range(rows)]
  # P = 2^(s - m), written over S, and its row sums
  R = alloc(5, rows)
  Rt = R.after(b, t)
  c3 = range_(keys, 8)
  init_r = UOp(Ops.SINK, tuple(Rt.index(r).store(UOp.const(0.0)) for r in range(rows)))
  Rc, Sp = Rt.after(init_r, c3), Sd.after(c3)
  probs = [UOp(Ops.EXP2, (score(r, c3) - m_use[r],)) for r in range(rows)]
  exps = UOp(Ops.SINK, tuple(x for r in range(rows) for x in (Sp.index(r * keys + c3).store(probs[r]),
                                                             Rc.index(r).store(Rc.index(r).load() + probs[r])))).end(c3)
  Rs, P = Rt.after(exps), Sd.after(exps)
  updates = [st for r in range(rows) for st in (Lt.index(r).store(Lt.index(r).load() * corr[r] + Rs.index(r).load()),
                                                Mt.index(r).store(m_new[r]))]
  # O = O * corr + P V: rescale once per tile, then one value row per key, the head dim as the inner loop
  d1 = range_(dv, 9)
  Oc = Ot.after(d1)
  rescale = UOp(Ops.SINK, tuple(Oc.index(r * dv + d1).store(Oc.index(r * dv + d1).load() * corr[r])
                                for r in range(rows))).end(d1)
  c4, d2 = range_(keys, 10), range_(dv, 11)
  Ov = Ot.after(rescale, c4, d2)
  vv = V.index(h * (nk * dv) + (k0 + c4) * dv + d2).load()
  acc_o = lambda r: Ov.index(r * dv + d2)
  pv = UOp(Ops.SINK, tuple(acc_o(r).store(acc_o(r).load() + P.index(r * keys + c4).load() * vv) for r in range(rows)))
  pv = pv.end(c4, d2)
  loop_t = UOp(Ops.SINK, (pv, *updates)).end(t)

  # normalise; an all-masked row (l = 0) is written as zeros
  x2 = range_(rows * dv, 12)
  Lf, Of, Mf = Lb.after(loop_t), Ob.after(loop_t), Mb.after(loop_t)
  if partial:   # flash-decoding: leave o unnormalised, and hand on each row's (m, l) to the merge kernel
    x3 = range_(rows, 13)
    ml = UOp(Ops.SINK, (MOUT.index(h * nq + qb * rows + x3).store(Mf.index(x3).load()),
                        LOUT.index(h * nq + qb * rows + x3).store(Lf.index(x3).load()))).end(x3)
    out = OUT.index(o0 + x2).store(Of.index(x2).load())
    return sink(UOp(Ops.SINK, (out.end(x2), ml)).end(b))
  l = Lf.index(x2 // dv).load()
  val = (l.ne(0.0)).where(Of.index(x2).load() * l.recip(), 0.0)
  out = OUT.index(o0 + x2).store(val)
  return sink(out.end(x2, b))


def merge_partials_ir(heads: int, splits: int, nq: int, dv: int) -> UOp:
  """Flash-decoding's second kernel: merge `splits` partial states (m, l, o) per query row with section 11.6's rule
  m = max m_s, l = sum l_s 2^(m_s - m), o = sum o_s 2^(m_s - m); out = o / l (zeros where l = 0).
  Buffers: data0 o (heads, splits, nq, dv), data1 m (heads, splits, nq), data2 l (same), data3 out (heads, nq, dv)."""
  f32 = dtypes.f32
  buf = lambda slot, n: UOp(Ops.BUFFER, (), ParamArg(slot, f32, (n,)))
  PO, PM, PL = buf(0, heads * splits * nq * dv), buf(1, heads * splits * nq), buf(2, heads * splits * nq)
  OUT = buf(3, heads * nq * dv)
  alloc = lambda slot, n: UOp(Ops.ALLOC, (), ParamArg(slot, f32, (n,)))
  M, L, O = alloc(0, 1), alloc(1, 1), alloc(2, dv)
  hq = range_(heads * nq, 0, AxisType.THREAD)
  h, q = hq // nq, hq % nq
  Mh, Lh, Oh = M.after(hq), L.after(hq), O.after(hq)
  s0 = range_(splits, 1)
  init_m = Mh.index(0).store(UOp.const(-math.inf))
  Ms = Mh.after(init_m, s0)
  top = Ms.index(0).store(Ms.index(0).load().maximum(PM.index((h * splits + s0) * nq + q).load())).end(s0)
  m = Mh.after(top).index(0).load()
  m_use = (m.ne(-math.inf)).where(m, 0.0)
  init_l = Lh.index(0).store(UOp.const(0.0))
  x0 = range_(dv, 2)
  init_o = Oh.index(x0).store(UOp.const(0.0)).end(x0)
  s1, x1 = range_(splits, 3), range_(dv, 4)
  w = UOp(Ops.EXP2, (PM.index((h * splits + s1) * nq + q).load() - m_use,))   # 2^(m_s - m): this part's weight
  Ls, Os = Lh.after(init_l, s1), Oh.after(init_o, s1, x1)
  part = (h * splits + s1) * nq + q
  # the sum of l lands in the split loop, the sum of o in the split and column loops: each where it depends
  acc = UOp(Ops.SINK, (Ls.index(0).store(Ls.index(0).load() + PL.index(part).load() * w),
                       Os.index(x1).store(Os.index(x1).load() + PO.index(part * dv + x1).load() * w)))
  done = acc.end(s1, x1)
  x2 = range_(dv, 5)
  l = Lh.after(done).index(0).load()
  val = (l.ne(0.0)).where(Oh.after(done).index(x2).load() * l.recip(), 0.0)
  return sink(OUT.index(hq * dv + x2).store(val).end(x2, hq))
