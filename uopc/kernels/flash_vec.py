"""FlashAttention on vectors: uopc.kernels.flash's tiled kernel with its two products as register tiles (chapter 10).

uopc.kernels.flash leaves the inner loops to gcc's auto-vectorizer, which keeps a tile in memory and reaches about a
third of the FMA peak. Here the loop IR says what each register holds. For a block of `rows` queries and a tile of
keys = kvec * lanes keys:

  S[r][j]   rows x kvec vector accumulators: S = Q_blk K_tile^T over the head dim, q[r][e] broadcast against
            kvec vectors of K^T, read from a panel of the tile's keys (K^T tile by tile, kt_panels: each tile's
            d x keys floats contiguous, as BLIS packs B)
  softmax   once a step of `groups` tiles: scale, the causal mask as a lane comparison, the step's max and sum
            by lane reductions, P = 2^(S - m) by the vector exp2 (uopc.codegen.vector); P goes to a small array
  O         rows x dv in a local array, updated a chunk of `dchunk` vectors at a time: rows x dchunk vector
            accumulators, rescaled once a step, then P[r][c] broadcast against dchunk vectors of V's row c
  qblocks   blocks of `rows` queries that take each step in turn (K's and V's step read once for all of them)

The tile sizes and the flags the kernel is compiled with are its opts (FlashVecOpts): the tuner (uopc.runtime.tune)
times candidates on this machine, and default_opts sizes the tile to the vector ISA's registers.
"""
from __future__ import annotations
import math
from dataclasses import dataclass
import numpy as np
from uopc.uop import UOp, Ops, ParamArg, AxisType, sink, range_
from uopc.dtype import dtypes
from uopc.codegen.vector import butterfly, tree
from uopc.runtime.flags import CompileOpts
from uopc.runtime.machine import ISA, isa_of

LOG2E = 1 / math.log(2)


@dataclass(frozen=True)
class FlashVecOpts:
  """How the vector flash kernel is tiled and compiled."""
  rows: int = 8          # queries per block: the rows of both register tiles
  kvec: int = 2          # vectors of keys per tile (keys = kvec * lanes)
  dchunk: int = 2        # vectors of the output row updated together
  groups: int = 1        # score tiles per softmax step: O is rescaled and P V run once per groups * keys keys
  qblocks: int = 1       # blocks of rows that take each step in turn: K's and V's step is read once for them all
  lanes: int = 16        # floats per vector (16: one 512-bit register)
  schedule: str = "dynamic"   # how OpenMP deals the query blocks to threads (uopc.render_c.SCHEDULES)
  compile: CompileOpts = CompileOpts()

  @property
  def keys(self) -> int: return self.kvec * self.lanes

  @property
  def span(self) -> int: return self.groups * self.keys   # keys per softmax step

  def fits(self, nq: int, nk: int, d: int, dv: int) -> bool:
    """Whether these tiles divide the (padded) problem: nq by rows * qblocks, nk by span, dv by dchunk * lanes."""
    return nq % (self.rows * self.qblocks) == 0 and nk % self.span == 0 and dv % (self.dchunk * self.lanes) == 0


def kt_panels(k: np.ndarray, keys: int) -> np.ndarray:
  """K (heads, nk, d) as the kernel reads it: K^T cut into panels of `keys` keys, (heads, nk / keys, d, keys), each
  tile's d x keys floats contiguous. Plain K^T (heads, d, nk) put the tile's rows nk floats apart: at nk = 2048 every
  row of a tile fell in the same L1 set (8 KB apart) and the tile was read from L2 (NOTES 39)."""
  heads, nk, d = k.shape
  return np.ascontiguousarray(k.reshape(heads, nk // keys, keys, d).transpose(0, 1, 3, 2), np.float32)


SPAN = 128   # keys per softmax step in the heuristic: 8 tiles of 16 keys on AVX2 (NOTES 39)
QBLOCKS_FROM = 2048   # queries from which the heuristic runs two blocks of rows through each step


def default_opts(isa: ISA | int, nk: int = SPAN, nq: int = 0) -> FlashVecOpts:
  """The heuristic tile for a vector ISA (uopc.runtime.machine's table; a lane count means the ISA it names here):
  6 rows x kvec score accumulators, three quarters of the registers (the rest hold a vector of K^T per column and the
  broadcast query value), and 6 x 2 output accumulators. 32 registers (AVX-512, NEON): 6 x 4, measured on a Zen 4 in
  NOTES 24; 16 (AVX2, SSE): 6 x 2, BLIS haswell's 12 accumulators. As many tiles per softmax step as make SPAN keys
  (or nk's, where fewer: the keys are padded to a whole step), and from QBLOCKS_FROM queries two blocks of rows to a
  step (K's and V's step read once for 12 rows: 3% at 2048 x 128 on AVX2; at 1024 queries the two threads' shares of
  86 blocks were uneven enough to lose 4-9%, NOTES 39). OpenMP deals the blocks in guided chunks (large first, then
  smaller: 1-3% faster than chunks of 4 on AVX2, causal or not)."""
  isa = isa_of(isa)
  kvec = max(1, isa.registers * 3 // 4 // 6)
  return FlashVecOpts(rows=6, kvec=kvec, dchunk=2, groups=max(1, min(SPAN, nk) // (kvec * isa.lanes)),
                      qblocks=2 if nq >= QBLOCKS_FROM else 1, lanes=isa.lanes, schedule="guided")


def candidate_opts(isa: ISA | int, dv: int) -> list[FlashVecOpts]:
  """What the tuner tries: every tile whose accumulators fit in the registers and whose output chunk divides dv, each
  with one tile per softmax step and with four."""
  isa = isa_of(isa)
  return [FlashVecOpts(rows=r, kvec=k, dchunk=c, groups=g, lanes=isa.lanes) for r in (2, 4, 5, 6, 7, 8)
          for k in (1, 2, 3, 4) for c in (1, 2, 4) for g in (1, 4)
          if r * max(k, c) <= isa.registers - 2 and dv % (c * isa.lanes) == 0]


def flash_vector_ir(heads: int, nq: int, nk: int, d: int, opts: FlashVecOpts = FlashVecOpts(), causal: bool = False,
                    scale: float | None = None, dv: int | None = None, total_keys: int | None = None,
                    total_queries: int | None = None) -> UOp:
  """Loop program for out = softmax(q k^T * scale) v over `heads` (batch, head) pairs; the buffers are
  uopc.kernels.flash's but for K: data0 q (heads, nq, d), data1 kt (heads, nk / keys, d, keys): K^T in panels
  (kt_panels), data2 v (heads, nk, dv), data3 out (heads, nq, dv). total_keys: the real number of keys (the rest is
  padding, masked). total_queries: the real number of queries, where q and out hold only those (nq is then the
  count in whole blocks: the last block's rows past the end read and write the last real row again)."""
  dv = d if dv is None else dv
  R, KV, DC, W = opts.rows, opts.kvec, opts.dchunk, opts.lanes
  keys = opts.keys
  if not opts.fits(nq, nk, d, dv):
    raise ValueError(f"flash_vector: nq={nq} must divide by rows={R * opts.qblocks}, nk={nk} by keys={opts.span}, "
                     f"dv={dv} by dchunk*lanes={DC * W}")
  f32, vec = dtypes.f32, dtypes.f32.vec(W)
  buf = lambda slot, n: UOp(Ops.BUFFER, (), ParamArg(slot, f32, (n,)))
  nqr = nq if total_queries is None else total_queries   # the rows q and out have
  if not 0 < nqr <= nq: raise ValueError(f"flash_vector: total_queries={total_queries} must be in 1..nq={nq}")
  Q, KT, V, OUT = buf(0, heads * nqr * d), buf(1, heads * d * nk), buf(2, heads * nk * dv), buf(3, heads * nqr * dv)
  slots = iter(range(1 << 16))
  alloc = lambda dtype, n=1: UOp(Ops.ALLOC, (), ParamArg(next(slots), dtype, (n,)))
  sc = (scale if scale is not None else 1 / math.sqrt(d)) * LOG2E   # base 2 throughout

  QB = opts.qblocks
  blocks = nq // (R * QB)   # a thread's iteration: QB blocks of R rows
  b = range_(heads * blocks, 0, AxisType.THREAD)
  h, qb = b // blocks, b % blocks
  if causal: qb = (qb % 2).ne(1).where(qb // 2, (blocks - 1) - qb // 2)   # short and long blocks mixed (kernels.flash)
  def rows_of(u) -> list[UOp]:
    """Block u's query numbers: past the last real query, the last one again (it computes that row once more)."""
    first = (qb * QB + u) * R
    return [first + r if nqr == nq else (first + r < nqr).where(first + r, nqr - 1) for r in range(R)]
  # each row's running max (the same in every lane) and its sum (lane by lane: added across lanes at the end), a
  # vector of each per block
  M = [alloc(vec, QB).after(b) for _ in range(R)]
  L = [alloc(vec, QB).after(b) for _ in range(R)]
  O = alloc(f32, QB * R * dv).after(b)                    # the output blocks, in memory (a row is dv / lanes vectors)
  init_ml = UOp(Ops.SINK, tuple(x for r in range(R) for i in range(QB) for x in (
    M[r].index(i).store(UOp.const(-math.inf, vec)), L[r].index(i).store(UOp.const(0.0, vec)))))
  x0 = range_(QB * R * dv // W, 1)
  init_o = O.index(x0 * W).store(UOp.const(0.0, vec)).end(x0)

  G, span = opts.groups, opts.span
  steps = nk // span
  bound = UOp.const(steps)
  if causal:
    last = ((qb * QB + QB - 1) * R + (R - 1)) // span + 1
    bound = (last < steps).where(last, steps)
  t = range_(bound, 2)
  k0 = t * span
  u = range_(QB, 30) if QB > 1 else 0   # the blocks in turn, each through the whole step
  in_step = (b, t, u) if QB > 1 else (b, t)
  row = rows_of(u)
  o_at = (lambda i: i) if QB == 1 else (lambda i: u * (R * dv) + i)   # block u's rows in O

  # S = Q_blk K_tile^T for each of the step's G tiles: rows x kvec vector registers, the head dim as the loop
  g = range_(G, 7) if G > 1 else None
  kg = k0 if g is None else k0 + g * keys   # the tile's first key: its panel of K^T is kt[h, kg / keys]
  S = [[alloc(vec).after(*in_step, *[g] * (g is not None)) for _ in range(KV)] for _ in range(R)]
  init_s = UOp(Ops.SINK, tuple(S[r][j].index(0).store(UOp.const(0.0, vec)) for r in range(R) for j in range(KV)))
  e = range_(d, 3)
  kv = [KT.index(h * (d * nk) + kg * d + e * keys + j * W).load(W) for j in range(KV)]
  q = [Q.index(h * (nqr * d) + row[r] * d + e).load() for r in range(R)]
  acc = lambda r, j: S[r][j].after(init_s, e).index(0)
  dot = UOp(Ops.SINK, tuple(acc(r, j).store(acc(r, j).load() + q[r] * kv[j]) for r in range(R) for j in range(KV)))
  dot = dot.end(e)

  # the softmax on the vectors: scale, mask, the step's max per row, P = 2^(s - m), its sum
  lane = UOp.vectorize(*[UOp.const(i) for i in range(W)])   # 0, 1, ..., W-1: each lane's key within a vector
  # with a positive scale, the max and the mask work on the raw scores and the scale rides in the exp2's argument,
  # s*sc - m*sc: one multiply-add per vector instead of a multiply and a subtract (max(s*sc) = max(s)*sc)
  fold = sc > 0
  scaled = (lambda x: x * sc) if fold else (lambda x: x)   # in base 2: what the exp2 arguments are made of
  def score(r: int, j: int) -> UOp:
    s = S[r][j].after(dot).index(0).load()
    if not fold: s = s * sc
    key = lane + (kg + j * W)
    if causal: s = (row[r] < key).where(-math.inf, s)
    if total_keys is not None and total_keys < nk: s = (key < total_keys).where(s, -math.inf)
    return s
  scores = [[score(r, j) for j in range(KV)] for r in range(R)]
  Mt, Lt = [m.after(init_ml, *in_step[1:]) for m in M], [x.after(init_ml, *in_step[1:]) for x in L]
  m_old = [Mt[r].index(u).load() for r in range(R)]
  P = alloc(f32, R * span).after(*in_step)   # the step's scores, then its probabilities, row by row
  if G == 1:   # the tile is the step: its max and P straight from the registers
    m_step = [butterfly(tree(scores[r], UOp.maximum), UOp.maximum) for r in range(R)]
    after_scores = None
  else:        # each tile's scores to P and their max, lane by lane, to TM; the lanes' max once a step
    TM = [alloc(vec).after(*in_step) for _ in range(R)]
    init_tm = UOp(Ops.SINK, tuple(TM[r].index(0).store(UOp.const(-math.inf, vec)) for r in range(R)))
    tm = lambda r: TM[r].after(init_tm, g).index(0)
    keep = UOp(Ops.SINK, tuple(x for r in range(R) for x in (
      *(P.index(r * span + g * keys + j * W).store(scores[r][j]) for j in range(KV)),
      tm(r).store(tm(r).load().maximum(tree(scores[r], UOp.maximum)))))).end(g)
    m_step = [butterfly(TM[r].after(keep).index(0).load(), UOp.maximum) for r in range(R)]
    after_scores = keep
  m_new = [m_old[r].maximum(m_step[r]) for r in range(R)]
  # a row with every key masked so far has m = -inf: read it as 0, so corr and p are 0, not NaN (-inf - -inf)
  m_use = [m.ne(-math.inf).where(m, 0.0) for m in m_new]
  # every row's correction 2^(m_old - m_new) is one number (the same in all its lanes): the rows' numbers go into
  # the lanes of one vector, so one exp2 serves them all
  diff = [scaled(m_old[r] - m_use[r]).gep(0) for r in range(R)]
  if R <= W:
    packed = UOp.vectorize(*diff, *[UOp.const(0.0, f32)] * (W - R)).exp2()
    corr = [packed.gep(r).broadcast(W) for r in range(R)]
  else: corr = [d.broadcast(W).exp2() for d in diff]
  shift = [scaled(m) for m in m_use]
  if after_scores is None:
    probs = [[(scaled(scores[r][j]) - shift[r]).exp2() for j in range(KV)] for r in range(R)]
    write_p = UOp(Ops.SINK, tuple(P.index(r * span + j * W).store(probs[r][j]) for r in range(R) for j in range(KV)))
    row_sum = [tree(probs[r], UOp.__add__) for r in range(R)]   # lane by lane: the lanes are added at the end
  else:        # P = 2^(s - m) in place, a loop a row (every row at once spills the exp's temporaries), its sum in LS
    LS = [alloc(vec).after(*in_step) for _ in range(R)]
    init_ls = UOp(Ops.SINK, tuple(LS[r].index(0).store(UOp.const(0.0, vec)) for r in range(R)))
    rows_p = []
    for r in range(R):
      x = range_(G * KV, 8 + r)
      Px = P.after(after_scores, *rows_p, x)   # after the rows before it: one loop, then the next
      ls = LS[r].after(init_ls, x).index(0)
      p = (scaled(Px.index(r * span + x * W).load(W)) - shift[r]).exp2()
      rows_p.append(UOp(Ops.SINK, (Px.index(r * span + x * W).store(p), ls.store(ls.load() + p))).end(x))
    write_p = UOp(Ops.SINK, tuple(rows_p))
    row_sum = [LS[r].after(write_p).index(0).load() for r in range(R)]
  updates = [x for r in range(R) for x in (Lt[r].index(u).store(Lt[r].index(u).load() * corr[r] + row_sum[r]),
                                           Mt[r].index(u).store(m_new[r]))]

  # O = O * corr + P V, dchunk vectors of each row at a time
  dc = range_(dv // (DC * W), 4)
  Ot = O.after(init_o, *in_step[1:], dc)
  col = lambda c: dc * (DC * W) + c * W
  OA = [[alloc(vec).after(*in_step, dc) for _ in range(DC)] for _ in range(R)]
  load_o = UOp(Ops.SINK, tuple(OA[r][c].index(0).store(Ot.index(o_at(r * dv + col(c))).load(W) * corr[r])
                               for r in range(R) for c in range(DC)))
  c4 = range_(span, 5)
  Pk = P.after(write_p, c4)
  vv = [V.index(h * (nk * dv) + (k0 + c4) * dv + col(c)).load(W) for c in range(DC)]
  pk = [Pk.index(r * span + c4).load() for r in range(R)]
  oacc = lambda r, c: OA[r][c].after(load_o, c4).index(0)
  pv = UOp(Ops.SINK, tuple(oacc(r, c).store(oacc(r, c).load() + pk[r] * vv[c]) for r in range(R) for c in range(DC)))
  pv = pv.end(c4)
  store_o = UOp(Ops.SINK, tuple(Ot.index(o_at(r * dv + col(c))).store(OA[r][c].after(pv).index(0).load())
                                for r in range(R) for c in range(DC))).end(dc)
  loop_t = UOp(Ops.SINK, (store_o, *updates)).end(*in_step[1:])

  # normalise, block by block; a row whose keys are all masked (l = 0) is written as zeros
  u2 = range_(QB, 40) if QB > 1 else 0
  x2 = range_(dv // W, 6 if QB == 1 else 41)
  Of = O.after(loop_t, x2)
  row2 = rows_of(u2)
  o2 = (lambda i: i) if QB == 1 else (lambda i: u2 * (R * dv) + i)
  outs = []
  for r in range(R):
    l = butterfly(L[r].after(loop_t, *[u2] * (QB > 1)).index(u2).load(), UOp.__add__)
    inv = l.ne(0.0).where(l.recip(), 0.0)
    out_at = h * (nqr * dv) + row2[r] * dv + x2 * W
    outs.append(OUT.index(out_at).store(Of.index(o2(r * dv + x2 * W)).load(W) * inv))
  return sink(UOp(Ops.SINK, tuple(outs)).end(*[u2] * (QB > 1), x2, b))

