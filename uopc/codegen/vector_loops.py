"""Vector code for the float32 kernels that are not matmuls (chapter 10's lanes, on every other kernel).

A training step is mostly matmuls (uopc.codegen.gemm_vec), but the rest is not small: LayerNorm's statistics,
softmax's max and sum, the bias gradients, GELU, a CNN's convolutions. The default lowering writes them one element
at a time, and gcc does not vectorize a reduction kept in an upcast register tile, nor an exp2f, nor the NaN-keeping
max. Here one axis becomes the lanes of a vector, chosen so that every load the kernel makes steps by one along it:

  elementwise   the output's last axis: out[..., j:j+W] = f(vectors of the inputs)
  row           a reduce whose last reduced axis is contiguous (a row's sum, max): a vector accumulator walks the row
                W elements at a time, and its lanes are combined once at the end (uopc.codegen.vector.fold)
  column        a reduce over rows whose output's last axis is contiguous (a bias gradient sums dy over rows): `nvec`
                vector accumulators of neighbouring outputs, each row adding one vector to each

Where W does not divide the axis (a convolution's rows of 28, 10 or 14 pixels) the two reductions take a short axis
(at most MAX_CHUNKS vectors) whole, as vectors W apart with the last one ending at the axis's end, so that it
overlaps the one before (no lane reads past the row):

  column tile   (a convolution: out[n, c, y, x] = sum over the window) each vector of the output row its own
                accumulator, times `t` neighbours along another output axis (the output channels: they share each
                vector the window loads), a register tile of t x chunks vectors. The overlapped lanes are computed
                twice, the same sum in the same order, and stored twice
  row tile      (a convolution's weight gradient: dw[c, k] = sum over batch and pixels) the row's vectors added
                into one vector of partial sums per output, the overlapped lanes of the last one masked to 0 (counted
                once); `t` neighbouring outputs along the last output axis each keep theirs (they share the vector
                of g they read); lanes combined at the end. A sum over several axes takes this form also where W
                divides the row (then a loop of whole vectors): one accumulator would be one chain of dependent adds

A convolution's window reads a padded input: stage_window_pads (VectorOpt's layout step) stages each padded tensor
read through a window once, as a buffer, so the window's loads are plain reads, with no padding check per element.

A bool mask read along the lanes (one byte a lane) is widened to the 32-bit lanes the vector ops compare with
(uopc.codegen.vector's uopc_widen_u8xN). A kernel none of these fits without a gather (a load whose lanes are not
neighbours in memory: a transpose, a pad), that reads another non-32-bit buffer along the lanes, holds a second
reduction, or whose axis does not fit the lanes, gives None: the default lowering takes it.
"""
from __future__ import annotations
import math
from uopc import symbolic
from uopc.dtype import dtypes
from uopc.rangeify import Ctx, identity, ravel, rangeify
from uopc.codegen.gemm_vec import expand_lanes
from uopc.codegen.vector import fold, tree
from uopc.uop import UOp, Ops, AxisType, ALU, MOVEMENT, range_, sink

LANE_ID = 1 << 20    # the stand-in loop variable of a vector's lane (expand_lanes removes it; never rendered)
COLUMN_VECTORS = 4   # column reduce: independent accumulators per iteration, to cover the add's latency
COMBINE = {Ops.ADD: UOp.__add__, Ops.MAX: UOp.maximum}
MAX_CHUNKS = 4       # the most vectors an axis that W does not divide is taken as, whole (the tiles below)
MAX_TILE = 12        # vector accumulators of a column tile: with a load and a broadcast, within AVX2's 16 registers
ROW_TILE = 8         # the most neighbouring outputs a row tile keeps partial sums for


def lower_vector(body: UOp, out: UOp, ctx: Ctx, lanes: int) -> UOp | None:
  """The loop program of a float32 elementwise or reduce kernel with one axis as `lanes` lanes, or None where none
  fits (see the module doc)."""
  if body.dtype is not dtypes.f32 or out.dtype is not dtypes.f32 or lanes < 2 or not body.shape: return None
  reduces = [u for u in body.toposort() if u.op is Ops.REDUCE]
  if body.op is not Ops.REDUCE:
    if reduces: return None
    return _try(lambda c: _elementwise(body, out, c, lanes), ctx)
  if len(reduces) != 1 or body.arg[0] not in COMBINE: return None
  # where no axis divides by the lanes, the longer of the two (a convolution's row of pixels, not its window's width)
  tiles = [_row_tile, _column_tile] if body.src[0].shape[-1] >= body.shape[-1] else [_column_tile, _row_tile]
  # a sum over several axes (a weight gradient's, over batch and pixels) keeps partial sums for a tile of outputs
  # whether W divides its row or not: one accumulator would be one long chain of dependent adds
  forms = [_row_tile, _row, _column, _column_tile] if body.arg[1] > 1 and tiles[0] is _row_tile else \
    [_row, _column, *tiles]
  for form in forms:
    if (prog := _try(lambda c: form(body, out, c, lanes), ctx)) is not None: return prog
  return None


def _try(build, ctx: Ctx) -> UOp | None:
  trial = ctx.fork()
  prog = build(trial)
  if prog is None or not _all_vector(prog): return None
  ctx.adopt(trial)
  return prog


def _all_vector(prog: UOp) -> bool:
  """No load gathered lane by lane, and every vector load of 32-bit elements."""
  for u in prog.toposort():
    if u.op is Ops.LOAD and u.dtype.count > 1 and u.dtype.itemsize != 4 and u.dtype.scalar is not dtypes.u8:
      return False
    if u.op is Ops.VECTORIZE and len(set(u.src)) > 1 and \
       any(s.op is not Ops.GEP and any(x.op is Ops.LOAD for x in s.toposort()) for s in u.src): return False
  return True


def _out_loops(ctx: Ctx, shape: tuple[int, ...]) -> list[UOp]:
  """A loop per output axis (the first with more than one trip split across threads; an axis of 1 is index 0)."""
  thread = next((k for k, s in enumerate(shape) if s > 1), None)
  return [ctx.range(s, AxisType.THREAD if k == thread else AxisType.LOOP) if s > 1 else UOp.const(0)
          for k, s in enumerate(shape)]


def _ranges(*idx: UOp) -> tuple[UOp, ...]:
  return tuple(r for r in idx if r.op is Ops.RANGE)


def _vector(e: UOp, lane: UOp, lanes: int) -> UOp:
  v = expand_lanes(e, lane)
  return v if v.dtype.count == lanes else v.broadcast(lanes)


def _elementwise(body: UOp, out: UOp, ctx: Ctx, W: int) -> UOp | None:
  *outer, last = body.shape
  if last % W: return None
  loops = _out_loops(ctx, (*outer, last // W))
  lane = range_(W, LANE_ID)
  idx = (*loops[:-1], loops[-1] * W + lane)
  val = _vector(rangeify(body, idx, ctx), lane, W)
  at = symbolic.simplify(ravel((*loops[:-1], loops[-1] * W), body.shape))
  return symbolic.simplify_index(sink(out.index(at).store(val).end(*_ranges(*loops))))


def _row(body: UOp, out: UOp, ctx: Ctx, W: int) -> UOp | None:
  (rop, n), src = body.arg, body.src[0]
  *rshape, rlast = src.shape[len(src.shape) - n:]
  if rlast % W: return None
  loops = _out_loops(ctx, body.shape)
  red = [ctx.range(s, AxisType.REDUCE) for s in rshape] + [ctx.range(rlast // W, AxisType.REDUCE)]
  lane = range_(W, LANE_ID)
  val = _vector(rangeify(src, (*loops, *red[:-1], red[-1] * W + lane), ctx), lane, W)
  acc = _accumulate(ctx, rop, val, _ranges(*loops), red)
  at = symbolic.simplify(ravel(tuple(loops), body.shape))
  return symbolic.simplify_index(sink(out.index(at).store(fold(acc, COMBINE[rop])).end(*_ranges(*loops))))


def _column(body: UOp, out: UOp, ctx: Ctx, W: int) -> UOp | None:
  (rop, n), src = body.arg, body.src[0]
  *outer, last = body.shape
  if last % W: return None
  nvec = math.gcd(COLUMN_VECTORS, last // W)
  loops = _out_loops(ctx, (*outer, last // (W * nvec)))
  red = [ctx.range(s, AxisType.REDUCE) for s in src.shape[len(src.shape) - n:]]
  lane = range_(W, LANE_ID)
  stores = []
  for j in range(nvec):
    col = (loops[-1] * nvec + j) * W
    val = _vector(rangeify(src, (*loops[:-1], col + lane, *red), ctx), lane, W)
    acc = _accumulate(ctx, rop, val, _ranges(*loops), red)
    stores.append(out.index(symbolic.simplify(ravel((*loops[:-1], col), body.shape))).store(acc))
  return symbolic.simplify_index(sink(UOp(Ops.SINK, tuple(stores)).end(*_ranges(*loops))))


def _accumulate(ctx: Ctx, rop: Ops, val: UOp, loops: tuple[UOp, ...], red: list[UOp]) -> UOp:
  """A vector accumulator inside `loops`, combined with val on every iteration of the reduce loops `red`: its value
  after them."""
  real = _ranges(*red)   # every reduce axis has its loop (ctx.range), even a loop of one trip
  acc = ctx.alloc(val.dtype).after(*loops)
  init = acc.index(0).store(UOp.const(identity(rop, dtypes.f32), val.dtype))
  accl = acc.after(init, *real)
  upd = accl.index(0).store(UOp(rop, (accl.index(0).load(), val)))
  return acc.after(upd.end(*real)).index(0).load()


# ---- axes that W does not divide: a convolution's rows ----
def _chunks(n: int, lanes: int) -> tuple[int, list[tuple[int, int]]] | None:
  """(W, [(start, lanes the vector before already covers)...]): an axis of n as vectors of W lanes (`lanes`, halved
  down to 4 while wider than the axis) W apart, the last one ending at n; None where that is more than MAX_CHUNKS
  vectors or n is shorter than 4."""
  W = lanes
  while W > 4 and W > n: W //= 2
  if n < W or -(-n // W) > MAX_CHUNKS: return None
  starts = list(range(0, n - W + 1, W)) + ([n - W] if n % W else [])
  return W, [(s, (starts[k - 1] + W - s) if k else 0) for k, s in enumerate(starts)]


def _row_tile(body: UOp, out: UOp, ctx: Ctx, lanes: int) -> UOp | None:
  """A reduce over several axes, the last one read by lanes: whole vectors in a loop where W divides it, else the
  axis taken whole (_chunks) inside the loops of the others (module doc, row tile)."""
  (rop, n), src = body.arg, body.src[0]
  *rshape, rlast = src.shape[len(src.shape) - n:]
  red = [ctx.range(s, AxisType.REDUCE) for s in rshape]
  if rlast % lanes == 0:   # (start, lanes the vector before covered): one vector an iteration of a loop over the row
    W = lanes
    red.append(ctx.range(rlast // W, AxisType.REDUCE))
    chunks = [(red[-1] * W, 0)]
  elif rshape and (cut := _chunks(rlast, lanes)) is not None: W, chunks = cut[0], [(UOp.const(s), c) for s, c in cut[1]]
  else: return None
  *outer, last = body.shape
  t = max(d for d in range(1, ROW_TILE + 1) if last % d == 0)
  loops = _out_loops(ctx, (*outer, last // t))
  lane = range_(W, LANE_ID)
  stores = []
  for j in range(t):   # t outputs along the last axis, each a vector of partial sums
    at = (*loops[:-1], loops[-1] * t + j)
    terms = []
    for start, covered in chunks:
      term = rangeify(src, (*at, *red[:len(rshape)], start + lane), ctx)
      if covered: term = (lane < covered).where(UOp.const(identity(rop, dtypes.f32), dtypes.f32), term)
      terms.append(_vector(term, lane, W))
    acc = _accumulate(ctx, rop, tree(terms, COMBINE[rop]), _ranges(*loops), red)
    stores.append(out.index(symbolic.simplify(ravel(at, body.shape))).store(fold(acc, COMBINE[rop])))
  return symbolic.simplify_index(sink(UOp(Ops.SINK, tuple(stores)).end(*_ranges(*loops))))


def _column_tile(body: UOp, out: UOp, ctx: Ctx, lanes: int) -> UOp | None:
  """A reduce whose output's last axis W does not divide (module doc, column tile)."""
  (rop, n), src = body.arg, body.src[0]
  *outer, last = body.shape
  if (cut := _chunks(last, lanes)) is None: return None
  W, chunks = cut
  axis, t = _tile_axis(outer, MAX_TILE // len(chunks))
  loops = _out_loops(ctx, tuple(s // t if k == axis else s for k, s in enumerate(outer)))
  red = [ctx.range(s, AxisType.REDUCE) for s in src.shape[len(src.shape) - n:]]
  lane = range_(W, LANE_ID)
  stores = []
  for j in range(t):
    at = tuple(r * t + j if k == axis else r for k, r in enumerate(loops))
    for start, _ in chunks:   # an overlapped lane is the same sum in the same order: stored twice, the same value
      val = _vector(rangeify(src, (*at, UOp.const(start) + lane, *red), ctx), lane, W)
      acc = _accumulate(ctx, rop, val, _ranges(*loops), red)
      stores.append(out.index(symbolic.simplify(ravel((*at, UOp.const(start)), body.shape))).store(acc))
  return symbolic.simplify_index(sink(UOp(Ops.SINK, tuple(stores)).end(*_ranges(*loops))))


def _tile_axis(shape: list[int], most: int) -> tuple[int | None, int]:
  """(axis, t): the first axis after the threaded one (_out_loops') that some t in 2..most divides, and the largest
  such t; (None, 1) where none."""
  thread = next((k for k, s in enumerate(shape) if s > 1), None)
  for k, s in enumerate(shape):
    if k != thread and (ts := [d for d in range(2, most + 1) if s % d == 0]): return k, max(ts)
  return None, 1


def stage_window_pads(roots: list[UOp]) -> list[UOp]:
  """Tensor-level roots with every padded tensor that a float32 REDUCE reads through a window (movement ops with an
  EXPAND among them, from the pad to the reduce's elementwise ops) wrapped in a STAGE: computed once into a buffer of
  its own, which the window then reads with plain loads (the lanes above need them), not a padding check and a
  clamped index per element. Reduces that read the same padded tensor share its copy (a convolution's forward and
  its weight gradient)."""
  todo: set[UOp] = set()
  for u in UOp(Ops.SINK, tuple(roots)).toposort():
    if u.op is not Ops.REDUCE or u.dtype is not dtypes.f32: continue
    stack, seen = [(u.src[0], False)], set()
    while stack:
      x, repeated = stack.pop()
      if (x, repeated) in seen or x in todo: continue
      seen.add((x, repeated))
      if x.op in ALU: stack.extend((s, False) for s in x.src)
      elif x.op is Ops.PAD and repeated and any(b.op is Ops.BUFFER for b in x.toposort()): todo.add(x)
      elif x.op in MOVEMENT: stack.append((x.src[0], repeated or x.op is Ops.EXPAND))
  return UOp.wrap(roots, todo, lambda p: UOp(Ops.STAGE, (p,))) if todo else roots
