"""Tensor cores (chapter 13): a matmul-shaped reduce kernel -> warp tiles around one WMMA op.

  tc_fit(body, tc)          kernel body -> (A operand, B operand, WMMAArg) if it is sum_k A[m, k] * B[k, n] whose
                            inputs the instruction takes (f16; with TC=2 also f32 as tf32), else None.
  lower_tc(body, out, ...)  kernel body -> loop program with launch axes: one 32-wide work-group (a warp) per M x N
                            output tile (16 x 8), a loop over K in steps of the instruction's k. Each lane loads the
                            elements of A and B its fragment registers hold (uopc.codegen.wmma's tables), one WMMA
                            updates the lane's accumulators, and each lane stores the outputs it holds. Sizes that are
                            not multiples of the tile are padded: loads outside the matrix read 0 (from a clamped
                            address), stores outside it are gated off.

WMMA(a, b, c, lane) is a statement: c's registers become A @ B + C of the tile the warp's registers hold. The CUDA
renderer prints the real instruction (uopc.codegen.wmma.ptx_mma); every other GPU dialect emulates it lane by lane
through local memory from the hardware's table (uopc.render_gpu), so a load that puts the wrong element in a register
gives wrong numbers there too.
"""
from __future__ import annotations
import math
from dataclasses import dataclass
from uopc import symbolic
from uopc.codegen import wmma
from uopc.dtype import dtypes
from uopc.options import Options
from uopc.rangeify import Ctx, rangeify
from uopc.uop import UOp, Ops, AxisType, ParamArg, range_, sink, substitute

GPU_DEVICES = ("CL", "CUDA")   # where TC= applies: the devices that launch work-groups
TC_SHAPES = {"f16": wmma.M16N8K16, "tf32": wmma.M16N8K8_TF32}   # the input kind -> the instruction that takes it


@dataclass(frozen=True)
class WMMAArg:
  """The arg of a WMMA: which instruction (uopc.codegen.wmma.SHAPES) and which input type, as PTX spells them."""
  shape: str
  dtype: str

  @property
  def layout(self) -> wmma.Shape: return wmma.SHAPES[self.shape]


def _cdiv(a: int, b: int) -> int: return -(-a // b)


def _loaded_dtypes(v: UOp) -> set:
  return {u.dtype for u in v.toposort() if u.op is Ops.LOAD}


def matmul_operands(body: UOp, max_batch: int = 1, graph: bool = False) -> tuple[UOp, UOp] | None:
  """(A, B) if body is REDUCE(ADD, A * B) over one axis with A independent of the output column and B of the output
  row: a matmul, operands of shape (batch..., M, N, K) with at most max_batch batch dims (attention's (B, H, T, D)
  has two), whatever elementwise work and movement sit on each side. A kernel's body (graph=False) holds no other
  reduction in its operands; a node of the whole graph (graph=True, before kernels are cut) may: each reduction below
  it becomes a kernel of its own, which the matmul kernel then reads."""
  if body.op is not Ops.REDUCE or body.arg != (Ops.ADD, 1) or not body.dtype.is_float: return None
  if not 2 <= len(body.shape) <= 2 + max_batch or body.src[0].op is not Ops.MUL: return None
  x, y = body.src[0].src
  if not graph and any(u.op is Ops.REDUCE for u in (*x.toposort(), *y.toposort())): return None
  probe = tuple(range_(s, 1000 + k) for k, s in enumerate(body.src[0].shape))   # scratch loop variables
  *b, m, n, k = probe
  def deps(v: UOp) -> set:
    return set(symbolic.ranges_in(symbolic.simplify(rangeify(opaque_reduces(v), probe, Ctx()))))
  dx, dy = deps(x), deps(y)
  if n in dx and m in dy: x, y, dx, dy = y, x, dy, dx     # B * A
  if n in dx or m in dy: return None
  return x, y


def opaque_reduces(v: UOp) -> UOp:
  """v with each reduction nearest to it read from a stand-in buffer of its shape (never rendered): what a kernel of
  v sees once the reductions are kernels of their own. Walks only the nodes above those reductions."""
  stand_in, stack, seen = {}, [v], set()
  while stack:
    u = stack.pop()
    if u in seen: continue
    seen.add(u)
    if u.op is Ops.REDUCE:
      buf = UOp(Ops.BUFFER, (), ParamArg(-1, u.dtype, (math.prod(u.shape),)))
      stand_in[u] = UOp(Ops.RESHAPE, (buf,), u.shape)
    else: stack.extend(u.src)
  return substitute(v, stand_in) if stand_in else v


def tc_fit(body: UOp, tc: int) -> tuple[UOp, UOp, WMMAArg] | None:
  """(A, B, arg) if body is a matmul (matmul_operands) accumulating f32 from inputs the instruction takes."""
  if not tc or body.dtype is not dtypes.f32 or (xy := matmul_operands(body)) is None: return None
  x, y = xy
  probe = tuple(range_(s, 1000 + k) for k, s in enumerate(body.src[0].shape))
  kinds = _loaded_dtypes(rangeify(x, probe, Ctx())) | _loaded_dtypes(rangeify(y, probe, Ctx()))
  kind = "f16" if kinds == {dtypes.f16} else "tf32" if kinds == {dtypes.f32} and tc >= 2 else None
  if kind is None: return None
  return x, y, WMMAArg(TC_SHAPES[kind].name, kind)


def lower_tc(body: UOp, out: UOp, options: Options | None = None, layout: wmma.Shape | None = None) -> UOp | None:
  """The tensor-core loop program of body (None if tc_fit refuses it). `layout` is the fragment table the loads
  follow (default: the hardware's); a test passes a wrong one to see the numbers break."""
  options = options or Options(tc=1)
  fit = tc_fit(body, max(options.tc, 1))
  if fit is None: return None
  x, y, arg = fit
  lay = layout or arg.layout
  *batch, M, N = body.shape
  K = body.src[0].shape[-1]
  ctx = Ctx(options=options)
  def axis(n: int, kind: AxisType) -> UOp: return ctx.range(n, kind) if n > 1 else UOp.const(0)
  bidx = [axis(s, AxisType.GLOBAL) for s in batch]
  gm, gn = axis(_cdiv(M, lay.m), AxisType.GLOBAL), axis(_cdiv(N, lay.n), AxisType.GLOBAL)
  lane = ctx.range(wmma.WARP, AxisType.LOCAL)
  kk = axis(_cdiv(K, lay.k), AxisType.REDUCE)
  g, t = lane // 4, lane % 4
  def at(op: wmma.Operand, i: int) -> tuple[UOp, UOp]:
    (ra, rb, rc), (ca, cb, cc) = wmma.affine(op, i, 0), wmma.affine(op, i, 1)
    return g * ra + t * rb + rc, g * ca + t * cb + cc
  def inside(i: UOp, n: int, tile: int) -> UOp: return UOp.const(True) if n % tile == 0 else i < n
  def fragment(v: UOp, op: wmma.Operand, rows: tuple, cols: tuple, place) -> list[UOp]:
    """The values of v this lane's registers hold: element i at (row, col) of the tile, 0 outside the matrix."""
    vals = []
    for i in range(op.per_lane):
      r, c = at(op, i)
      (r0, rn, rt), (c0, cn, ct) = rows, cols
      ri, ci = r0 * rt + r, c0 * ct + c
      ok = symbolic.simplify(inside(ri, rn, rt) & inside(ci, cn, ct))
      if ok.op is Ops.CONST and not ok.arg: vals.append(UOp.const(0.0)); continue   # every lane is outside
      safe = lambda j: j if ok.op is Ops.CONST else ok.where(j, 0)   # a clamped address: never outside the buffer
      val = rangeify(v, (*bidx, *place(symbolic.simplify(safe(ri)), symbolic.simplify(safe(ci)))), ctx).cast(dtypes.f32)
      vals.append(val if ok.op is Ops.CONST else ok.where(val, 0.0))
    return vals
  zero = UOp.const(0)
  a_vals = fragment(x, lay.a, (gm, M, lay.m), (kk, K, lay.k), lambda r, c: (r, zero, c))
  b_vals = fragment(y, lay.b, (kk, K, lay.k), (gn, N, lay.n), lambda r, c: (zero, c, r))
  ra, rb, rc = (ctx.alloc(dtypes.f32, op.per_lane) for op in (lay.a, lay.b, lay.c))   # the lane's fragment registers
  launch = [r for r in (*bidx, gm, gn, lane) if r.op is Ops.RANGE]
  loops = [kk] if kk.op is Ops.RANGE else []
  ra, rb = ra.after(*launch), rb.after(*launch)   # every lane's own registers (a GPU runs the body per work-item)
  fa = ra.after(*(ra.index(i).store(v) for i, v in enumerate(a_vals)))
  fb = rb.after(*(rb.index(i).store(v) for i, v in enumerate(b_vals)))
  acc = rc.after(*launch)
  acc_loop = acc.after(*(acc.index(i).store(UOp.const(0.0)) for i in range(lay.c.per_lane)), *loops)
  done = UOp(Ops.WMMA, (fa, fb, acc_loop, lane), arg).end(*loops)
  stores = []
  for i in range(lay.c.per_lane):
    r, c = at(lay.c, i)
    m, n = gm * lay.m + r, gn * lay.n + c
    flat = m * N + n
    for bi in bidx: flat = flat + bi * (M * N)
    val = acc.after(done).index(i).load().cast(out.dtype)
    ok = symbolic.simplify(inside(m, M, lay.m) & inside(n, N, lay.n))
    if ok.op is Ops.CONST and not ok.arg: continue   # no lane holds an output here (M or N smaller than the tile)
    stores.append(UOp(Ops.STORE, (out.index(flat), val) + (() if ok.op is Ops.CONST else (ok,))))
  return symbolic.simplify(sink(UOp(Ops.SINK, tuple(stores)).end(*launch)))
