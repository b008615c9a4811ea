"""Vector code for the float32 kernels that are not matmuls (chapter 10's lanes, on every other kernel).

A training step is mostly matmuls (uopc.codegen.gemm_vec), but the rest is not small: LayerNorm's statistics,
softmax's max and sum, the bias gradients, GELU. The default lowering writes them one element at a time, and gcc does
not vectorize a reduction kept in an upcast register tile, nor an exp2f, nor the NaN-keeping max. Here one axis
becomes the lanes of a vector, chosen so that every load the kernel makes steps by one along it:

  elementwise   the output's last axis: out[..., j:j+W] = f(vectors of the inputs)
  row           a reduce whose last reduced axis is contiguous (a row's sum, max): a vector accumulator walks the row
                W elements at a time, and its lanes are combined once at the end (uopc.codegen.vector.fold)
  column        a reduce over rows whose output's last axis is contiguous (a bias gradient sums dy over rows): `nvec`
                vector accumulators of neighbouring outputs, each row adding one vector to each

A bool mask read along the lanes (one byte a lane) is widened to the 32-bit lanes the vector ops compare with
(uopc.codegen.vector's uopc_widen_u8xN). A kernel none of these fits without a gather (a load whose lanes are not
neighbours in memory: a transpose, a pad), that reads another non-32-bit buffer along the lanes, holds a second
reduction, or whose axis does not divide by W, gives None: the default lowering takes it.
"""
from __future__ import annotations
import math
from uopc import symbolic
from uopc.dtype import dtypes
from uopc.rangeify import Ctx, identity, ravel, rangeify
from uopc.codegen.gemm_vec import expand_lanes
from uopc.codegen.vector import fold
from uopc.uop import UOp, Ops, AxisType, range_, sink

LANE_ID = 1 << 20    # the stand-in loop variable of a vector's lane (expand_lanes removes it; never rendered)
COLUMN_VECTORS = 4   # column reduce: independent accumulators per iteration, to cover the add's latency
COMBINE = {Ops.ADD: UOp.__add__, Ops.MAX: UOp.maximum}


def lower_vector(body: UOp, out: UOp, ctx: Ctx, lanes: int) -> UOp | None:
  """The loop program of a float32 elementwise or reduce kernel with one axis as `lanes` lanes, or None where none
  fits (see the module doc)."""
  if body.dtype is not dtypes.f32 or out.dtype is not dtypes.f32 or lanes < 2 or not body.shape: return None
  reduces = [u for u in body.toposort() if u.op is Ops.REDUCE]
  if body.op is not Ops.REDUCE:
    if reduces: return None
    return _try(lambda c: _elementwise(body, out, c, lanes), ctx)
  if len(reduces) != 1 or body.arg[0] not in COMBINE: return None
  return _try(lambda c: _row(body, out, c, lanes), ctx) or _try(lambda c: _column(body, out, c, lanes), ctx)


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
