"""Local-memory tiles (chapter 13): a GPU matmul kernel -> work-groups that stage tiles of A and B in LOCAL memory.

  lower_local_tile(body, out, tile)  matmul kernel body (uopc.codegen.tc.matmul_operands) -> loop program with launch
      axes.
      Each work-group owns a bm x bn block of the output and has (bm/rm) x (bn/rn) work-items, each holding an
      rm x rn register tile of accumulators. Per step of bk along K the work-group
        1. loads a bm x bk tile of A and a bk x bn tile of B into local memory, every work-item a few elements
           (neighbouring work-items load neighbouring addresses),
        2. waits at a barrier (every element of the tiles is written),
        3. multiplies from local memory into its registers: each value read from local memory feeds rn (or rm)
           accumulators,
        4. waits at a second barrier (nobody overwrites a tile another work-item still reads).
      Sizes that are not multiples of the block are padded: loads outside read 0, stores outside are gated off.

uopc.opt.TiledOpt is the optimizer (Tensor.opt = TiledOpt) that chooses it for GPU matmuls big enough to fill a block.

Global loads per output element fall from 2K (a row of A and a column of B) to K/bn + K/bm: each element of A
loaded into local memory serves the bn columns of the block, each of B its bm rows (uopc.codegen.gpudims.traffic counts
it).
"""
from __future__ import annotations
from dataclasses import dataclass
from uopc import symbolic
from uopc.options import Options
from uopc.rangeify import Ctx, rangeify
from uopc.codegen.tc import matmul_operands
from uopc.uop import UOp, Ops, AxisType, LocalArg, sink


@dataclass(frozen=True)
class LocalTile:
  """The shape of the tiling: a bm x bn output block per work-group, bk of K per step, rm x rn per work-item."""
  bm: int = 32
  bn: int = 32
  bk: int = 8
  rm: int = 4
  rn: int = 4

  @property
  def items(self) -> int: return (self.bm // self.rm) * (self.bn // self.rn)


def _cdiv(a: int, b: int) -> int: return -(-a // b)


def lower_local_tile(body: UOp, out: UOp, tile: LocalTile = LocalTile(), options: Options | None = None) -> UOp | None:
  """The local-tile loop program of body (None if body is not a matmul, uopc.codegen.tc.matmul_operands)."""
  if (xy := matmul_operands(body)) is None: return None
  if tile.bm % tile.rm or tile.bn % tile.rn or (tile.bm * tile.bk) % tile.items or (tile.bk * tile.bn) % tile.items:
    raise ValueError(f"{tile}: the register tile must divide the block, and the work-items the local tiles")
  x, y = xy
  *batch, M, N = body.shape
  K, dt = body.src[0].shape[-1], body.dtype
  ctx = Ctx(options=options or Options())
  def axis(n: int, kind: AxisType) -> UOp: return ctx.range(n, kind) if n > 1 else UOp.const(0)
  bidx = [axis(s, AxisType.GLOBAL) for s in batch]
  gm, gn = axis(_cdiv(M, tile.bm), AxisType.GLOBAL), axis(_cdiv(N, tile.bn), AxisType.GLOBAL)
  ly, lx = axis(tile.bm // tile.rm, AxisType.LOCAL), axis(tile.bn // tile.rn, AxisType.LOCAL)
  kt = axis(_cdiv(K, tile.bk), AxisType.REDUCE)
  launch = [r for r in (*bidx, gm, gn, ly, lx) if r.op is Ops.RANGE]
  tid = ly * (tile.bn // tile.rn) + lx
  def inside(i: UOp, n: int, step: int) -> UOp: return UOp.const(True) if n % step == 0 else i < n
  def value(v: UOp, ok: UOp, place: tuple) -> UOp:
    """v at place, 0 where ok is false (read from a clamped address, so the load never leaves the buffer)."""
    ok = symbolic.simplify(ok)
    if ok.op is Ops.CONST: return rangeify(v, (*bidx, *place), ctx).cast(dt) if ok.arg else UOp.const(0.0, dt)
    safe = tuple(symbolic.simplify(ok.where(p, 0)) if p.op is not Ops.CONST else p for p in place)
    return ok.where(rangeify(v, (*bidx, *safe), ctx).cast(dt), UOp.const(0.0, dt))
  # 1. the cooperative loads: element e = tid + items*j of each tile, row-major
  la = UOp(Ops.ALLOC, (), LocalArg(ctx.next_slot, dt, (tile.bm * tile.bk,)))
  lb = UOp(Ops.ALLOC, (), LocalArg(ctx.next_slot + 1, dt, (tile.bk * tile.bn,)))
  ctx.next_slot += 2
  zero, loads = UOp.const(0), []
  for j in range(tile.bm * tile.bk // tile.items):
    e = tid + tile.items * j
    m, k = gm * tile.bm + e // tile.bk, kt * tile.bk + e % tile.bk
    v = value(x, inside(m, M, tile.bm) & inside(k, K, tile.bk), (m, zero, k))
    loads.append(la.after(*launch).index(e).store(v))
  for j in range(tile.bk * tile.bn // tile.items):
    e = tid + tile.items * j
    k, n = kt * tile.bk + e // tile.bn, gn * tile.bn + e % tile.bn
    v = value(y, inside(k, K, tile.bk) & inside(n, N, tile.bn), (zero, n, k))
    loads.append(lb.after(*launch).index(e).store(v))
  # 2. every element of both tiles is written before anyone reads
  ready = UOp(Ops.BARRIER, tuple(loads))
  # 3. the register tile: rm values of A and rn of B from local memory feed rm*rn accumulators
  kin = ctx.range(tile.bk, AxisType.REDUCE)
  acc = ctx.alloc(dt, tile.rm * tile.rn).after(*launch)
  inits = [acc.index(i).store(UOp.const(0.0, dt)) for i in range(tile.rm * tile.rn)]
  accl = acc.after(*inits, *([kt] if kt.op is Ops.RANGE else []), kin)
  a = [la.after(ready).index((ly * tile.rm + i) * tile.bk + kin).load() for i in range(tile.rm)]
  b = [lb.after(ready).index(kin * tile.bn + lx * tile.rn + j).load() for j in range(tile.rn)]
  upds = [accl.index(i * tile.rn + j).store(accl.index(i * tile.rn + j).load() + a[i] * b[j])
          for i in range(tile.rm) for j in range(tile.rn)]
  # 4. everyone is done with the tiles before the next step overwrites them
  step = UOp(Ops.BARRIER, (UOp(Ops.SINK, tuple(upds)).end(kin),))
  done = step.end(kt) if kt.op is Ops.RANGE else step
  stores = []
  for i in range(tile.rm):
    for j in range(tile.rn):
      m, n = gm * tile.bm + ly * tile.rm + i, gn * tile.bn + lx * tile.rn + j
      flat = m * N + n
      for bi in bidx: flat = flat + bi * (M * N)
      val = acc.after(done).index(i * tile.rn + j).load().cast(out.dtype)
      ok = symbolic.simplify(inside(m, M, tile.bm) & inside(n, N, tile.bn))
      if ok.op is Ops.CONST and not ok.arg: continue   # outside the output for every work-item
      stores.append(UOp(Ops.STORE, (out.index(flat), val) + (() if ok.op is Ops.CONST else (ok,))))
  return symbolic.simplify(sink(UOp(Ops.SINK, tuple(stores)).end(*launch)))
