"""Matmul on vectors (chapter 10): a float32 matmul kernel -> a register tile of vector accumulators over a packed B.

B is read as panels of `nr` columns, each panel's K rows contiguous (BLIS's packed B), packed one of two ways:
  inline                      where a panel fits PANEL_BYTES and there are enough panels to share out (packs_inline):
                              each iteration of the threaded loop owns one panel, packs it into a local array, then
                              computes every rows x nr block of C under it. The thread that packs a panel is the one
                              that reads it, from its own cache, and there is no second kernel to start (NOTES 31)
  pack_b(body)                otherwise, the layout step: a copy kernel (STAGE) packs every panel, the matmul reads them
  lower_gemm(body, out, ...)  the matmul's loop program: for every k it broadcasts A[m][k] for its rows and loads nvec
                              vectors of B's panel, rows x nvec vector FMAs

Operands may be any elementwise expression over buffers: expand_lanes turns the scalar value at a lane's column into
one vector expression, a vector load where the lanes are consecutive in memory and a gather where they are not (still
right, only slower). A kernel that does not fit (not a matmul, not float32, N not a whole number of panels) is left to
the default lowering.

The tile is chosen by a tuner the optimizer hands in (uopc.opt.VectorOpt gives uopc.runtime.tune's, which times
candidates on this machine): this module builds loop programs and never compiles or runs one.
"""
from __future__ import annotations
import dataclasses
import functools
import math
from dataclasses import dataclass
from typing import Callable
from uopc import symbolic
from uopc.helpers import cache, omp_threads
from uopc.dtype import dtypes
from uopc.rangeify import Ctx, rangeify
from uopc.codegen.tc import matmul_operands, opaque_reduces
from uopc.uop import UOp, Ops, AxisType, ALU, ParamArg, range_, sink, substitute

MIN_FLOPS = 1 << 22   # below this a matmul is too small for packing to pay: the default lowering takes it
PANEL_BYTES = 256 << 10   # the largest panel packed inline: a local array on each OpenMP thread's stack, within L2


@dataclass(frozen=True)
class GemmOpts:
  rows: int = 8     # rows of C per block (A values broadcast per k)
  nvec: int = 2     # vectors of C's columns per block: nr = nvec * lanes, the width of a packed panel of B
  lanes: int = 16
  kc: int = 0       # B packed inline: K in chunks of kc (0: one chunk), for A read across its rows (lower_gemm)

  @property
  def nr(self) -> int: return self.nvec * self.lanes


# The tiles a tuner may try: rows of C x vectors of C's columns
ROWS, NVECS = (4, 6, 8, 12, 16), (1, 2, 3, 4)
MAX_HEURISTIC_ROWS = 8    # 16 rows of A a multiple of 4 KB apart share L1 sets and evict each other (NOTES 24)
MAX_HEURISTIC_ACCS = 16   # enough accumulators that B's loads stay below the FMA rate on every ISA measured
# A read across its rows (dW = x^T dy: A[m, k] = x[k, m]) uses a few floats of each cache line a k, and a whole panel
# of B (K x nr) no longer stays in L1 beside those lines: K in chunks whose part of the panel is 8 KB (kc = 128 on AVX2)
# ran the baby GPT's dW shapes at 78-86 GFLOP/s, not 65-73, on a Zen 3 (NOTES 66); a row-major A gained nothing
CHUNK_BYTES = 8 << 10
CHUNKS = (64, 128, 256)   # the chunks a tuner may try for such an A
SUMS_BYTES = 64 << 10   # the most a chunked panel's sums (M x nr floats) take on a thread's stack, beside its panel


def tile_registers(rows: int, nvec: int) -> int:
  """Vector registers a rows x nvec tile holds in its k loop: the accumulators, B's nvec vectors, A's broadcast."""
  return rows * nvec + nvec + 1


def heuristic_opts(isa, M: int, N: int, K: int, tail: Callable[[GemmOpts], bool] = lambda o: False,
                   a_by_k: bool = False) -> GemmOpts:
  """The tile without tuning, sized as BLIS sizes a micro-kernel from the register file (`isa`: lanes and registers,
  uopc.runtime.machine's table): the most accumulators whose tile, with B's vectors and A's broadcast, fits the
  registers (at most 16 accumulators and 8 rows), among the tiles that fit M and divide N; then 2 vectors, then fewer
  rows. A tile fits M where its rows divide M, or where tail(tile) says a last, shorter block of rows may take the rest
  (B packed inline). AVX-512 (32 registers): 8 rows x 2 vectors, as NOTES 24 measured; AVX2 and SSE (16): 6 x 2 (BLIS
  haswell's 12 accumulators; 4 x 2 where 6 does not divide M and there is no tail: 10% slower on AVX2, NOTES 39).
  With no tile that fits the problem, the first one that fits the registers (the default lowering then takes it).
  Where A is read across its rows (a_by_k), K in chunks of CHUNK_BYTES of a panel."""
  tiles = sorted((GemmOpts(rows=r, nvec=v, lanes=isa.lanes) for r in ROWS for v in NVECS
                  if r <= MAX_HEURISTIC_ROWS and r * v <= MAX_HEURISTIC_ACCS and tile_registers(r, v) <= isa.registers),
                 key=lambda o: (-o.rows * o.nvec, abs(o.nvec - 2), o.rows))
  tile = next((o for o in tiles if (M % o.rows == 0 or tail(o)) and N % o.nr == 0), tiles[0])
  kc = CHUNK_BYTES // (4 * tile.nr)
  return dataclasses.replace(tile, kc=kc) if a_by_k and kc < K and K % kc == 0 else tile


def candidate_opts(isa, M: int, N: int, K: int, tail: Callable[[GemmOpts], bool] = lambda o: False,
                   a_by_k: bool = False) -> list[GemmOpts]:
  """What the tuner tries: every tile whose accumulators leave two registers (a broadcast and one vector of B: the
  others can be FMA memory operands), at most 24 accumulators, that fits M (as in heuristic_opts) and divides N;
  where A is read across its rows (a_by_k), each also with K in each of CHUNKS that divides it."""
  tiles = [GemmOpts(rows=r, nvec=v, lanes=isa.lanes) for r in ROWS for v in NVECS
           if N % (v * isa.lanes) == 0 and r * v <= min(24, isa.registers - 2)]
  tiles = [o for o in tiles if M % o.rows == 0 or tail(o)]
  chunks = [kc for kc in CHUNKS if kc < K and K % kc == 0] if a_by_k else []
  return tiles + [dataclasses.replace(o, kc=kc) for o in tiles for kc in chunks]


# one choice per problem in a process: layout (packing) and lower must agree
_chosen: dict[tuple, GemmOpts] = cache("gemm_vec.chosen", {})

# tuner(kernel, problem, candidates, heuristic, program) -> the opts to use, where program(opts) is the loop program of
# the kernel with those opts (uopc.runtime.tune.choose's arguments, with a loop program where it takes a timer)
Tuner = Callable[[str, tuple, list, GemmOpts, Callable[[GemmOpts], UOp]], GemmOpts]


def _matmul(body: UOp, graph: bool = False) -> tuple[UOp, tuple[UOp, UOp]] | None:
  """(body as REDUCE(ADD, A * B), (A, B)) if it is a matmul (uopc.codegen.tc.matmul_operands), else None. A backward
  pass often reduces a permuted product (dW = x^T dy is sum over rows of PERMUTE(x * dy)): the permute moves into both
  operands, which an elementwise product allows. A sum over several trailing axes (dW sums over batch and time) is
  a sum over one, their product."""
  if body.op is not Ops.REDUCE or body.dtype is not dtypes.f32: return None
  src = body.src[0]
  if src.op is Ops.PERMUTE and src.src[0].op is Ops.MUL:
    mul = src.src[0]
    src = UOp(Ops.MUL, tuple(UOp(Ops.PERMUTE, (s,), src.arg) for s in mul.src))
    body = body.replace(src=(src,))
  if src.op is Ops.RESHAPE and src.src[0].op is Ops.MUL:   # pack_b's merged matmul, back in the body's shape
    src = UOp(Ops.MUL, tuple(UOp(Ops.RESHAPE, (s,), src.shape) for s in src.src[0].src))
    body = body.replace(src=(src,))
  rop, n = body.arg
  if rop is Ops.ADD and n > 1 and src.op is Ops.MUL:
    merged = src.shape[:-n] + (math.prod(src.shape[-n:]),)
    body = UOp(Ops.REDUCE, (UOp(Ops.MUL, tuple(UOp(Ops.RESHAPE, (s,), merged) for s in src.src)),), (Ops.ADD, 1))
  # any number of batch dims: lower_gemm walks them all (attention's scores are (B, H, T, T))
  if (xy := matmul_operands(body, max_batch=8, graph=graph)) is None: return None
  return _merge_batch(body, *xy)


def _merge_batch(body: UOp, x: UOp, y: UOp) -> tuple[UOp, tuple[UOp, UOp]]:
  """A batched matmul whose B is the same for every batch (a Linear layer's weight under (batch, time, features))
  as one matmul of batch x M rows: B's panels are then packed once, not once a batch. A is merged at its first
  column (it does not depend on n), so a merged row's index holds no column (see _rows_per_batch)."""
  *batch, M, N, K = x.shape
  if not batch: return body, (x, y)
  probe = tuple(range_(s, 1000 + k) for k, s in enumerate(x.shape))
  b_at = symbolic.simplify(rangeify(opaque_reduces(y), probe, Ctx()))   # B at every index: which loops it reads
  if not set(probe[:len(batch)]).isdisjoint(symbolic.ranges_in(b_at)):
    return body, (x, y)
  merged = (math.prod(batch) * M, N, K)
  column = UOp(Ops.SHRINK, (x,), tuple((0, s) for s in batch) + ((0, M), (0, 1), (0, K)))
  x, y = UOp(Ops.EXPAND, (UOp(Ops.RESHAPE, (column,), (merged[0], 1, K)),), merged), UOp(Ops.RESHAPE, (y,), merged)
  return UOp(Ops.REDUCE, (x * y,), (Ops.ADD, 1)), (x, y)


def _batch_rows(x: UOp) -> int | None:
  """One batch's rows where x is a merged batch's A (_merge_batch), else None."""
  if x.op is not Ops.EXPAND or x.src[0].op is not Ops.RESHAPE or (column := x.src[0].src[0]).op is not Ops.SHRINK:
    return None
  return column.shape[-3] if len(column.shape) > 3 and column.shape[-2] == 1 else None


def _row_address(x: UOp, row: UOp, n: UOp, k: UOp, bidx=(), ctx: Ctx | None = None) -> UOp:
  """A's value at (row, n, k), simplified: a merged row's // and % put back together where A's rows are linear."""
  return symbolic.simplify_index(rangeify(opaque_reduces(x) if ctx is None else x, (*bidx, row, n, k), ctx or Ctx()))


def _rows_per_batch(x: UOp, M: int) -> int:
  """M, or one batch's m for a merged batch (_merge_batch) whose rows' addresses keep a // or % of the merged row
  once simplified (rows that are not contiguous): a block of rows then stays within a batch (across a boundary, 6-row
  blocks over batches of 64 ran at half speed on AVX2). Contiguous rows take any block (AVX2's 6 of 768)."""
  if (m := _batch_rows(x)) is None: return M
  row, n, k = (range_(s, 1000 + j) for j, s in enumerate(x.shape))
  at = _row_address(x, row, n, k)
  return m if any(u.op in (Ops.IDIV, Ops.MOD) and row in u.toposort() for u in at.toposort()) else M


def _reads_a_by_k(x: UOp) -> bool:
  """Whether A is read across its rows: every load of it that moves with k steps by more than one element (dW's x^T)."""
  *bidx, row, n, k = (range_(s, 1000 + j) for j, s in enumerate(x.shape))
  loads = [u for u in _row_address(x, row, n, k, bidx).toposort() if u.op is Ops.LOAD and k in symbolic.ranges_in(u)]
  return bool(loads) and not any(_steps_by_one(u.src[0].src[1], k) for u in loads)


@functools.cache
def _how_a_is_read(x: UOp, M: int) -> tuple[int, bool]:
  """(_rows_per_batch, _reads_a_by_k), once per A: layout and lowering ask of every matmul, each a rangeify."""
  return _rows_per_batch(x, M), _reads_a_by_k(x)
cache("gemm_vec.how_a_is_read", _how_a_is_read)


def as_matmul(body: UOp) -> UOp | None:
  """body as REDUCE(ADD, A * B) if it is a matmul, else None (see _matmul)."""
  return None if (m := _matmul(body)) is None else m[0]


def _fits(matmul: UOp, x: UOp, opts: GemmOpts) -> bool:
  """Whether a matmul (as _matmul gives it, A = x) is big enough to pack, its N divides by nr and its M by rows, or
  it may end in a shorter block of rows (_tail_ok)."""
  *batch, M, N = matmul.shape
  K = matmul.src[0].shape[-1]
  if N % opts.nr or 2 * math.prod(batch) * M * N * K < MIN_FLOPS: return False
  return M % opts.rows == 0 or _tail_ok(opts, x, matmul)


def _tail_ok(opts: GemmOpts, x: UOp, matmul: UOp) -> bool:
  """Whether the last block of a panel's rows may be shorter than opts.rows: where B is packed inline (the thread's
  loop over blocks of rows then ends with one more), and not where a block stays in one batch (_rows_per_batch)."""
  *batch, M, N = matmul.shape
  return M >= opts.rows and _how_a_is_read(x, M)[0] == M and packs_inline(opts, math.prod(batch), N,
                                                                         matmul.src[0].shape[-1])


def choose_opts(body: UOp, isa, tuner: Tuner, graph: bool = False) -> GemmOpts | None:
  """The opts for this matmul (the tuner's choice among the candidates that fit), or None where the vector matmul does
  not apply. isa: the vector registers and lanes to size the tile for (uopc.runtime.machine.ISA)."""
  if (m := _matmul(body, graph)) is None: return None
  body, (x, _) = m
  *batch, M, N = body.shape
  K = body.src[0].shape[-1]
  unit, by_k = _how_a_is_read(x, M)
  problem = (tuple(batch), M, N, K, isa.lanes) + ((unit,) if unit != M else ()) + (("A by k",) if by_k else ())
  if (problem, isa) not in _chosen:   # once per process and ISA: the packing (layout) and the tile (lower) must agree
    tail = lambda o: _tail_ok(o, x, body)
    heuristic = heuristic_opts(isa, unit, N, K, tail, by_k)
    if not _fits(body, x, heuristic): return None
    cands = [c for c in candidate_opts(isa, unit, N, K, tail, by_k) if _fits(body, x, c)] or [heuristic]
    _chosen[problem, isa] = tuner("gemm_vec", problem, cands, heuristic, lambda o: program(M, N, K, o, a_by_k=by_k))
  return _chosen[problem, isa]


def program(M: int, N: int, K: int, opts: GemmOpts, threads: int | None = None, a_by_k: bool = False) -> UOp:
  """The loop program of the (M, N, K) matmul kernel with opts, on buffers A (M x K; K x M, read across its rows,
  where a_by_k), B and C (M x N): B (K x N) read as it is where the kernel packs it inline (packs_inline, for
  `threads`), else as pack_b leaves it. What a tuner times."""
  f32 = dtypes.f32
  A = UOp(Ops.BUFFER, (), ParamArg(0, f32, (M * K,)))
  B = UOp(Ops.BUFFER, (), ParamArg(1, f32, (N * K,)))
  a = UOp(Ops.PERMUTE, (UOp(Ops.RESHAPE, (A,), (K, M)),), (1, 0)) if a_by_k else UOp(Ops.RESHAPE, (A,), (M, K))
  a = UOp(Ops.EXPAND, (UOp(Ops.RESHAPE, (a,), (M, 1, K)),), (M, N, K))
  if packs_inline(opts, 1, N, K, threads): b = UOp(Ops.PERMUTE, (UOp(Ops.RESHAPE, (B,), (K, N)),), (1, 0))
  else:
    panels = UOp(Ops.RESHAPE, (B,), (N // opts.nr, K, opts.nr))
    b = UOp(Ops.RESHAPE, (UOp(Ops.PERMUTE, (panels,), (0, 2, 1)),), (N, K))
  b = UOp(Ops.EXPAND, (UOp(Ops.RESHAPE, (b,), (1, N, K)),), (M, N, K))
  body = UOp(Ops.REDUCE, (a * b,), (Ops.ADD, 1))
  out = UOp(Ops.BUFFER, (), ParamArg(2, f32, (M * N,)))
  return lower_gemm(body, out, Ctx(), opts, threads)


def packs_inline(opts: GemmOpts, batch: int, N: int, K: int, threads: int | None = None) -> bool:
  """Whether each panel of B is packed by the thread that reads it (see the module doc): the panel fits PANEL_BYTES,
  and there are at least 4 panels a thread, since the threaded loop is then over panels only (a static split of
  fewer would leave cores idle)."""
  threads = omp_threads() if threads is None else threads
  return K * opts.nr * 4 <= PANEL_BYTES and batch * (N // opts.nr) >= 4 * threads


def _inline(matmul: UOp, opts: GemmOpts) -> bool:
  *batch, M, N = matmul.shape
  return packs_inline(opts, math.prod(batch), N, matmul.src[0].shape[-1])


def packs_own_panels(body: UOp, isa, tuner: Tuner) -> bool:
  """Whether body is a matmul whose kernel packs B inline (its operands then need no layout step)."""
  opts = choose_opts(body, isa, tuner, graph=True)
  return opts is not None and _inline(_matmul(body, graph=True)[0], opts)


def gemm_fit(body: UOp, opts: GemmOpts, graph: bool = False) -> tuple[UOp, tuple[UOp, UOp]] | None:
  """(body as a matmul, (A, B)) if body is a float32 matmul that fits opts (_fits), else None."""
  m = _matmul(body, graph)
  return m if m is not None and _fits(m[0], m[1][0], opts) else None


def pack_b(body: UOp, opts: GemmOpts) -> UOp | None:
  """body with its B operand read from a packed copy (None if body does not fit): B (batch?, K, N) as panels
  (batch?, N / nr, K, nr), so that the matmul's loop over k reads each panel front to back."""
  if (fit := gemm_fit(body, opts, graph=True)) is None or _inline(fit[0], opts): return None
  shape = body.shape + (fit[0].src[0].shape[-1],)
  body, (x, y) = fit
  *batch, M, N, K = y.shape
  nb = len(batch)
  swap = tuple(range(nb)) + (nb, nb + 2, nb + 1)
  b0 = UOp(Ops.SHRINK, (y,), tuple((0, s) for s in batch) + ((0, 1), (0, N), (0, K)))   # B does not depend on m
  panels = UOp(Ops.PERMUTE, (UOp(Ops.RESHAPE, (b0,), tuple(batch) + (N // opts.nr, opts.nr, K)),), swap)
  staged = UOp(Ops.STAGE, (panels,), "panels")   # named for explain()
  back = UOp(Ops.RESHAPE, (UOp(Ops.PERMUTE, (staged,), swap),), tuple(batch) + (1, N, K))
  y2 = UOp(Ops.EXPAND, (back,), tuple(batch) + (M, N, K))
  a, b = body.src[0].src
  mul = body.src[0].replace(src=(x, y2) if (a is x) else (y2, x))
  if mul.shape != shape: mul = UOp(Ops.RESHAPE, (mul,), shape)   # a merged batch (_merge_batch) back in its shape
  return UOp(Ops.REDUCE, (mul,), (Ops.ADD, 1))


VECTOR_OPS = {Ops.ADD, Ops.MUL, Ops.MAX, Ops.CMPLT, Ops.CMPNE, Ops.WHERE, Ops.EXP2, Ops.RECIP, Ops.SQRT} & ALU


def expand_lanes(e: UOp, lane: UOp, memo: dict | None = None) -> UOp:
  """A scalar expression of the loop variable `lane` (0 <= lane < lanes) as one vector expression of its lanes: a
  vector load where the address steps by one with the lane, the op on vectors above loads, a scalar where nothing
  depends on the lane (broadcast by the op that meets it), the lanes gathered one by one anywhere else (right, only
  slower). One pass over e, not one copy of it per lane."""
  memo = {} if memo is None else memo
  if e in memo: return memo[e]
  n = lane.src[0].arg
  if lane not in symbolic.ranges_in(e): r = e
  elif e.op is Ops.LOAD and len(e.src) == 1 and _steps_by_one(e.src[0].src[1], lane):
    base = symbolic.simplify(substitute(e.src[0].src[1], {lane: UOp.const(0)}))
    if e.dtype is dtypes.bool:   # one byte a lane: loaded as bytes, widened to the 32-bit mask vector ops compare with
      r = UOp(Ops.LOAD, (e.src[0].src[0].index(base),), None, dtypes.u8.vec(n)).cast(dtypes.i32.vec(n)).ne(0)
    else: r = e.src[0].src[0].index(base).load(n)
  elif e.op is Ops.CMPNE and e.src[0].dtype is dtypes.bool:   # masks are -1 or 0 in every bit: != is their xor
    srcs = [expand_lanes(s, lane, memo) for s in e.src]
    r = UOp(Ops.XOR, tuple(s.broadcast(n) if s.dtype.count == 1 else s for s in srcs), None, dtypes.bool.vec(n))
  elif (e.op in VECTOR_OPS and not (e.op in (Ops.CMPLT, Ops.CMPNE) and e.src[0].dtype.itemsize != 4)) or _lane_cast(e):
    srcs = [expand_lanes(s, lane, memo) for s in e.src]
    srcs = [s.broadcast(n) if s.dtype.count == 1 else s for s in srcs]
    r = UOp(e.op, tuple(srcs), e.arg, e.dtype.vec(n))
  else: r = UOp.vectorize(*[symbolic.simplify(substitute(e, {lane: UOp.const(i)})) for i in range(n)])
  memo[e] = r
  return r


def _lane_cast(e: UOp) -> bool:
  """A cast between 32-bit lanes, or from a mask (a comparison's vector is 32-bit lanes whatever it compared)."""
  return e.op is Ops.CAST and e.dtype.itemsize == 4 and (e.src[0].dtype.itemsize == 4 or e.src[0].dtype is dtypes.bool)


def _steps_by_one(addr: UOp, lane: UOp) -> bool:
  """addr = lane + (terms that do not involve lane)."""
  terms, _ = symbolic.linear_form(addr)
  return terms.get(lane) == 1 and all(t is lane or lane not in symbolic.ranges_in(t) for t in terms)


def lower_gemm(body: UOp, out: UOp, ctx: Ctx, opts: GemmOpts, threads: int | None = None) -> UOp | None:
  """The register-tiled loop program of a matmul body (None if it does not fit). Works on any operands; fast when B
  is packed, inline (packs_inline, for `threads`: OpenMP's count by default) or by pack_b (then each vector of B is
  one load). Inline, M need not divide by rows: each panel's loop over blocks of rows ends with one of M % rows.
  Inline with opts.kc: K in chunks, each block's sums carried from chunk to chunk in a per-thread buffer, then C."""
  if out.dtype is not dtypes.f32 or (fit := gemm_fit(body, opts)) is None: return None
  body, (x, y) = fit
  *batch, M, N = body.shape
  K = body.src[0].shape[-1]
  W, R, NV, NR = opts.lanes, opts.rows, opts.nvec, opts.nr
  nbatch = math.prod(batch)
  tiles_m, tiles_n = M // R, N // NR
  inline = packs_inline(opts, nbatch, N, K, threads)
  if M % R and not inline: return None   # a shorter last block only where a thread owns a panel's every row
  kc = opts.kc if inline and 0 < opts.kc < K and K % opts.kc == 0 and M * NR * 4 <= SUMS_BYTES else K
  if inline:   # an iteration per panel: pack it, then every block of C under it
    t = ctx.range(nbatch * tiles_n, AxisType.THREAD)
    bflat, jn = t // tiles_n, t % tiles_n
    kp = ctx.range(K, AxisType.LOOP)
    kb = ctx.range(K // kc, AxisType.LOOP) if kc < K else None   # the chunk of K
    im = ctx.range(tiles_m, AxisType.LOOP)
  else:        # an iteration per block of C
    t = ctx.range(nbatch * tiles_n * tiles_m, AxisType.THREAD)
    bflat, rest = t // (tiles_n * tiles_m), t % (tiles_n * tiles_m)
    jn, im = rest // tiles_m, rest % tiles_m                 # a thread's blocks share B's panels: jn outermost
    kb = None
  bidx, left = [], bflat
  for s in reversed(batch):
    bidx.insert(0, left % s); left = left // s
  vec = dtypes.f32.vec(W)
  col = lambda j, i: jn * NR + j * W + i
  at = lambda v, m, n, kk: symbolic.simplify_index(rangeify(v, (*bidx, m, n, kk), ctx))
  lane = range_(W, 1 << 20)   # a stand-in for the lane's column within a vector: expand_lanes removes it
  a_row = range_(M, 1 << 21)  # a stand-in for a block's row of A
  lanes_of = lambda e: e if e.dtype.count == W else e.broadcast(W)
  def c_index(m, j: int) -> UOp:   # where C's row m, vector j of this iteration's panel, is stored
    flat = UOp.const(0)
    for bi, s in zip(bidx, batch): flat = flat * s + bi
    return symbolic.simplify((flat * M + m) * N + col(j, 0))
  if inline:   # B does not depend on m: its row 0 is every row's
    panel = ctx.alloc(dtypes.f32, K * NR).after(t)
    pack = UOp(Ops.SINK, tuple(panel.index(kp * NR + j * W).store(lanes_of(expand_lanes(
      at(y, UOp.const(0), col(j, lane), kp), lane))) for j in range(NV))).end(kp)
  if kb is not None:   # the panel's sums so far, a row of nr a row of C (row m's vector j at row(m, j)), zero first
    sums, row = ctx.alloc(dtypes.f32, M * NR).after(t), lambda m, j: m * NR + j * W
    z = ctx.range(M * NV, AxisType.LOOP)
    zero = sums.index(z * W).store(UOp.const(0.0, vec)).end(z)

  def block(m0, rows: int, loops: tuple) -> UOp:
    """The stores of the rows x nr block of C whose first row is m0 (of its sums so far, in a chunk), inside loops."""
    k = ctx.range(kc, AxisType.REDUCE)
    kk = k if kb is None else kb * kc + k
    # A does not depend on n; its value at a stand-in row, simplified once (a merged row's // and % put back
    # together: _rows_per_batch), then at each of the block's rows
    a_at = _row_address(x, a_row, col(0, 0), kk, bidx, ctx)
    a_vals = [substitute(a_at, {a_row: m0 + r}) for r in range(rows)]
    if inline: b_vecs = [panel.after(pack, k).index(kk * NR + j * W).load(W) for j in range(NV)]
    else: b_vecs = [lanes_of(expand_lanes(at(y, m0, col(j, lane), k), lane)) for j in range(NV)]   # nor B on m
    accs = [[ctx.alloc(vec).after(*loops) for _ in range(NV)] for _ in range(rows)]
    start = lambda r, j: UOp.const(0.0, vec) if kb is None else sums.after(zero, *loops).index(row(m0 + r, j)).load(W)
    init = UOp(Ops.SINK, tuple(accs[r][j].index(0).store(start(r, j)) for r in range(rows) for j in range(NV)))
    acc = lambda r, j: accs[r][j].after(init, k).index(0)
    fma = UOp(Ops.SINK, tuple(acc(r, j).store(acc(r, j).load() + a_vals[r] * b_vecs[j])
                              for r in range(rows) for j in range(NV))).end(k)
    done = lambda r, j: accs[r][j].after(fma).index(0).load()
    if kb is None: stores = [out.index(c_index(m0 + r, j)).store(done(r, j)) for r in range(rows) for j in range(NV)]
    else: stores = [sums.index(row(m0 + r, j)).store(done(r, j)) for r in range(rows) for j in range(NV)]
    return UOp(Ops.SINK, tuple(stores))

  if not inline: return symbolic.simplify_index(sink(block(im * R, R, (t,)).end(t)))
  inner = (t, im) if kb is None else (t, kb, im)
  blocks = block(im * R, R, inner).end(im)
  if M % R: blocks = UOp(Ops.SINK, (blocks, block(UOp.const(tiles_m * R), M % R, inner[:-1])))   # the last M % R rows
  if kb is not None:   # every chunk, then the sums into C
    m = ctx.range(M, AxisType.LOOP)
    summed = sums.after(blocks.end(kb), m)
    blocks = UOp(Ops.SINK, tuple(out.index(c_index(m, j)).store(summed.index(row(m, j)).load(W)) for j in range(NV)))
    blocks = blocks.end(m)
  return symbolic.simplify_index(sink(blocks.end(t)))
