"""FlashAttention on vectors with the queries in the lanes: no packed K, no lane reductions in the softmax.

uopc.kernels.flash_vec puts keys in a vector's lanes, so it reads K transposed (a copy made before every call: NOTES 29
measures what that copy and its trip between the cores cost) and finds each row's max and sum across lanes. Here a
vector holds `lanes` consecutive queries instead. For a block of R = qvec * lanes queries and a tile of `keys` keys:

  Q^T       the block's queries, transposed into a local array once per block (times the scale, in base 2)
  S^T[j][v] keys x qvec vector accumulators: key j's row of K, one scalar per head-dim step, broadcast against the
            vectors of Q^T: K is read as it is
  softmax   lane by lane: a query's max over the tile's keys is a max of whole vectors, its correction one exp2 per
            vector, the causal mask a comparison of the lanes' query numbers with the key's
  O^T       dv x R in a local array, `dcols` of its rows updated at a time: dcols x qvec vector accumulators,
            multiplied by the correction vector, then V[j][c] broadcast against P^T's vectors
  out       O^T transposed back and divided by l, once per block

A last block or tile that the tiles do not fill reads the last real query or key again (clamped indices) and masks or
drops what it computed, so nothing is padded or copied before the call: the kernel takes q, k, v as they are.
"""
from __future__ import annotations
import math
from dataclasses import dataclass
from uopc.uop import UOp, Ops, ParamArg, AxisType, sink, range_
from uopc.dtype import dtypes
from uopc.codegen.vector import tree
from uopc.runtime.flags import CompileOpts
from uopc.runtime.machine import ISA, isa_of
from uopc.kernels.flash_vec import LOG2E


@dataclass(frozen=True)
class FlashQOpts:
  """How the queries-in-lanes flash kernel is tiled and compiled."""
  qvec: int = 1          # vectors of queries per block (a block is qvec * lanes queries)
  keys: int = 16         # keys per tile: the rows of the score tile
  dcols: int = 16        # output columns (rows of O^T) updated together
  lanes: int = 16        # floats per vector
  schedule: str = "dynamic"
  compile: CompileOpts = CompileOpts()

  @property
  def rows(self) -> int: return self.qvec * self.lanes

  def fits(self, dv: int) -> bool: return dv % self.dcols == 0


def default_opts(isa: ISA | int) -> FlashQOpts:
  """The heuristic tile for a vector ISA (uopc.runtime.machine's table; a lane count means the ISA it names here):
  keys score accumulators and dcols output ones, each at most 16 and leaving four registers (a vector of Q^T or P^T,
  a broadcast, the running max and its correction). 32 registers: 16 and 16 (NOTES 29 measured the tile on a Zen 4);
  16 registers: 12 and 8."""
  isa = isa_of(isa)
  room = min(16, isa.registers - 4)
  return FlashQOpts(qvec=1, keys=max(k for k in KEYS if k <= room), dcols=max(c for c in DCOLS if c <= room),
                    lanes=isa.lanes)


KEYS, DCOLS = (8, 12, 16, 24), (8, 16, 32)


def candidate_opts(isa: ISA | int, dv: int) -> list[FlashQOpts]:
  """Every tile whose accumulators leave two registers free and whose output chunk divides dv."""
  isa = isa_of(isa)
  return [FlashQOpts(qvec=v, keys=k, dcols=c, lanes=isa.lanes) for v in (1, 2) for k in KEYS for c in DCOLS
          if v * max(k, c) <= isa.registers - 2 and dv % c == 0]


def flash_queries_ir(heads: int, nq: int, nk: int, d: int, opts: FlashQOpts = FlashQOpts(), causal: bool = False,
                     scale: float | None = None, dv: int | None = None) -> UOp:
  """Loop program for out = softmax(q k^T * scale) v over `heads` (batch, head) pairs, the buffers as the caller has
  them: data0 q (heads, nq, d), data1 k (heads, nk, d), data2 v (heads, nk, dv), data3 out (heads, nq, dv)."""
  dv = d if dv is None else dv
  W, QV, J, C = opts.lanes, opts.qvec, opts.keys, opts.dcols
  R = opts.rows
  if not opts.fits(dv): raise ValueError(f"flash_queries: dv={dv} must divide by dcols={C}")
  if min(heads, nq, nk, d) < 1: raise ValueError(f"flash_queries: empty problem {(heads, nq, nk, d, dv)}")
  f32, vec = dtypes.f32, dtypes.f32.vec(W)
  buf = lambda slot, n: UOp(Ops.BUFFER, (), ParamArg(slot, f32, (n,)))
  Q, K, V, OUT = buf(0, heads * nq * d), buf(1, heads * nk * d), buf(2, heads * nk * dv), buf(3, heads * nq * dv)
  slots = iter(range(1 << 16))
  alloc = lambda dtype, n=1: UOp(Ops.ALLOC, (), ParamArg(next(slots), dtype, (n,)))
  sc = (scale if scale is not None else 1 / math.sqrt(d)) * LOG2E   # base 2 throughout
  clamp = lambda i, n, exact: i if exact else (i < n).where(i, n - 1)   # a row past the end reads the last one

  blocks, tiles = -(-nq // R), -(-nk // J)
  b = range_(heads * blocks, 0, AxisType.THREAD)
  h, qb = b // blocks, b % blocks
  if causal: qb = (qb % 2).ne(1).where(qb // 2, (blocks - 1) - qb // 2)   # short and long blocks mixed (kernels.flash)
  row0 = qb * R

  # Q^T, scaled: QT[e * R + x] = q[row0 + x][e] * sc
  QT = alloc(f32, d * R).after(b)
  x, e = range_(R, 1), range_(d, 2)
  qrow = clamp(row0 + x, nq, nq % R == 0)
  pack = QT.index(e * R + x).store(Q.index(h * (nq * d) + qrow * d + e).load() * sc).end(x, e)

  M = [alloc(vec).after(b) for _ in range(QV)]   # each query's running max, a lane each
  L = [alloc(vec).after(b) for _ in range(QV)]   # and its running sum
  OT = alloc(f32, dv * R).after(b)
  init_ml = UOp(Ops.SINK, tuple(s for v in range(QV) for s in (M[v].index(0).store(UOp.const(-math.inf, vec)),
                                                                L[v].index(0).store(UOp.const(0.0, vec)))))
  x0 = range_(dv * R // W, 3)
  init_o = OT.index(x0 * W).store(UOp.const(0.0, vec)).end(x0)

  bound = UOp.const(tiles)
  if causal:   # the last tile with a key <= the block's last query
    last = (row0 + (R - 1)) // J + 1
    bound = (last < tiles).where(last, tiles)
  t = range_(bound, 4)
  k0 = t * J
  key = [k0 + j for j in range(J)]
  krow = [clamp(key[j], nk, nk % J == 0) for j in range(J)]

  # S^T = K_tile Q_blk^T: keys x qvec vector registers, the head dim as the loop
  S = [[alloc(vec).after(b, t) for _ in range(QV)] for _ in range(J)]
  init_s = UOp(Ops.SINK, tuple(S[j][v].index(0).store(UOp.const(0.0, vec)) for j in range(J) for v in range(QV)))
  e2 = range_(d, 5)
  qv = [QT.after(pack, e2).index(e2 * R + v * W).load(W) for v in range(QV)]
  kj = [K.index(h * (nk * d) + krow[j] * d + e2).load() for j in range(J)]
  acc = lambda j, v: S[j][v].after(init_s, e2).index(0)
  dot = UOp(Ops.SINK, tuple(acc(j, v).store(acc(j, v).load() + kj[j] * qv[v]) for j in range(J) for v in range(QV)))
  dot = dot.end(e2)

  lane = UOp.vectorize(*[UOp.const(i) for i in range(W)])
  def score(j: int, v: int) -> UOp:
    s = S[j][v].after(dot).index(0).load()
    if causal: s = ((lane + (row0 + v * W)) < key[j]).where(-math.inf, s)   # key j after the lane's query
    if nk % J: s = (key[j] < nk).where(s, -math.inf)                         # a key past the end
    return s
  scores = [[score(j, v) for v in range(QV)] for j in range(J)]
  Mt, Lt = [m.after(init_ml, t) for m in M], [s.after(init_ml, t) for s in L]
  m_old = [Mt[v].index(0).load() for v in range(QV)]
  m_new = [m_old[v].maximum(tree([scores[j][v] for j in range(J)], UOp.maximum)) for v in range(QV)]
  # a query with every key masked so far has m = -inf: read it as 0, so corr and p are 0, not NaN (-inf - -inf)
  m_use = [m.ne(-math.inf).where(m, 0.0) for m in m_new]
  corr = [(m_old[v] - m_use[v]).exp2() for v in range(QV)]
  probs = [[(scores[j][v] - m_use[v]).exp2() for v in range(QV)] for j in range(J)]
  PT = alloc(f32, J * R).after(b, t)
  write_p = UOp(Ops.SINK, tuple(PT.index(j * R + v * W).store(probs[j][v]) for j in range(J) for v in range(QV)))
  updates = [s for v in range(QV) for s in (
    Lt[v].index(0).store(Lt[v].index(0).load() * corr[v] + tree([probs[j][v] for j in range(J)], UOp.__add__)),
    Mt[v].index(0).store(m_new[v]))]

  # O^T = O^T * corr + V_tile^T P^T, dcols rows of O^T at a time
  dc = range_(dv // C, 6)
  Ot = OT.after(init_o, t, dc)
  OA = [[alloc(vec).after(b, t, dc) for _ in range(QV)] for _ in range(C)]
  load_o = UOp(Ops.SINK, tuple(OA[c][v].index(0).store(Ot.index((dc * C + c) * R + v * W).load(W) * corr[v])
                               for c in range(C) for v in range(QV)))
  j2 = range_(J, 7)
  vrow = clamp(k0 + j2, nk, nk % J == 0)   # a masked key's p is 0; its V row only has to exist
  pv_ = [PT.after(write_p, j2).index(j2 * R + v * W).load(W) for v in range(QV)]
  vs = [V.index(h * (nk * dv) + vrow * dv + dc * C + c).load() for c in range(C)]
  oacc = lambda c, v: OA[c][v].after(load_o, j2).index(0)
  pv = UOp(Ops.SINK, tuple(oacc(c, v).store(oacc(c, v).load() + vs[c] * pv_[v]) for c in range(C) for v in range(QV)))
  pv = pv.end(j2)
  store_o = UOp(Ops.SINK, tuple(Ot.index((dc * C + c) * R + v * W).store(OA[c][v].after(pv).index(0).load())
                                for c in range(C) for v in range(QV))).end(dc)
  loop_t = UOp(Ops.SINK, (store_o, *updates)).end(t)

  # 1 / l per query (0 for a query whose keys are all masked), then O^T back to rows; rows past nq store nothing
  INV = alloc(f32, R).after(b)
  inv = []
  for v in range(QV):
    s = L[v].after(loop_t).index(0).load()
    inv.append(INV.index(v * W).store(s.ne(0.0).where(s.recip(), 0.0)))
  x2, c2 = range_(R, 8), range_(dv, 9)
  value = OT.after(loop_t, x2, c2).index(c2 * R + x2).load() * INV.after(*inv, x2).index(x2).load()
  target = OUT.index(h * (nq * dv) + (row0 + x2) * dv + c2)
  out = target.store(value) if nq % R == 0 else UOp(Ops.STORE, (target, value, row0 + x2 < nq))
  return sink(out.end(x2, c2, b))
