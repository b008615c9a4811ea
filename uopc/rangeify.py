"""Rangeify: a tensor-level kernel body -> a loop program.

rangeify(u, idx, ctx) answers one question: what is the scalar value of tensor u at index idx?
Movement ops only change the index, ALU ops apply to values, and a REDUCE becomes a loop that
feeds an accumulator, placed inside exactly the loops its output index uses.
"""
from __future__ import annotations
import itertools
import math
import weakref
from dataclasses import dataclass, field
from uopc.uop import UOp, Ops, ParamArg, AxisType, ALU, MOVEMENT, range_, sink, substitute
from uopc.dtype import DType
from uopc.options import Options
from uopc.helpers import cache
# the RESHAPE rule calls simplify through this module attribute, and only it does (everything else calls
# symbolic.simplify): patching uopc.rangeify.simplify switches off exactly the rule of section 11.5
from uopc.symbolic import simplify, ranges_in
from uopc import symbolic
from uopc import trace


@dataclass(frozen=True)
class Opts:
  """How to shape a kernel's loops.
  upcast: output axis -> factor unrolled into registers (a register tile shares each loaded value)
  unroll: factor by which the last reduce axis is unrolled
  thread: the output axis OpenMP splits across threads (None: no threads)"""
  upcast: dict[int, int] = field(default_factory=dict)
  unroll: int = 1
  thread: int | None = 0

  def __hash__(self): return hash((tuple(sorted(self.upcast.items())), self.unroll, self.thread))


@dataclass
class Ctx:
  """Everything one lowering shares: the opts, the options, the memo of (node, index) -> value, the reduce loops
  made so far, the ids handed out, and the other reduce lowerings to try first (such as uopc.codegen.online's)."""
  opts: Opts = field(default_factory=Opts)
  options: Options = field(default_factory=Options)
  memo: dict = field(default_factory=dict)
  reduce_ranges: dict = field(default_factory=dict)
  next_range: int = 0
  next_slot: int = 0
  lowerings: tuple = ()                               # objects with lower_reduce(u, idx, ctx) -> UOp | None
  scratch: dict = field(default_factory=dict)         # each lowering's own memo, by its name
  stand_ins: int = 0                                  # _pad's stand-in index variables so far (ids -1, -2, ...)

  def range(self, n: int, axis_type: AxisType) -> UOp:
    r = UOp(Ops.RANGE, (UOp.const(n),), (self.next_range, axis_type))
    self.next_range += 1
    return r

  def alloc(self, dtype: DType, n: int = 1) -> UOp:
    a = UOp(Ops.ALLOC, (), ParamArg(self.next_slot, dtype, (n,)))
    self.next_slot += 1
    return a

  def fork(self) -> Ctx:
    """A copy to attempt a lowering on: adopt() it if the attempt works, drop it if not (nothing leaks back)."""
    return Ctx(self.opts, self.options, dict(self.memo), dict(self.reduce_ranges), self.next_range, self.next_slot,
               self.lowerings, {k: dict(v) for k, v in self.scratch.items()}, self.stand_ins)

  def adopt(self, trial: Ctx) -> None:
    self.memo, self.reduce_ranges, self.scratch = trial.memo, trial.reduce_ranges, trial.scratch
    self.next_range, self.next_slot, self.stand_ins = trial.next_range, trial.next_slot, trial.stand_ins


def identity(rop: Ops, dtype: DType):
  """The value a reduction starts from."""
  if rop is Ops.ADD: return 0
  if rop is Ops.MUL: return 1
  if rop is Ops.MAX: return -math.inf if dtype.is_float else symbolic.INT_LIMITS[dtype][0]
  raise NotImplementedError(f"no identity for a {rop} reduction")


def ravel(idx: tuple[UOp, ...], shape: tuple[int, ...]) -> UOp:
  """The flat (row-major) offset of idx in shape, as written: ((0*s0 + i0)*s1 + i1)..."""
  flat = UOp.const(0)
  for i, s in zip(idx, shape): flat = flat * s + i
  return flat


def unravel(flat: UOp, shape: tuple[int, ...]) -> tuple[UOp, ...]:
  """The index in shape of a flat offset: (flat // stride) % size per axis, unsimplified."""
  strides = [math.prod(shape[k + 1:]) for k in range(len(shape))]
  return tuple((flat // st) % s for st, s in zip(strides, shape))


def _axis_parts(ctx: Ctx, size: int, factor: int, axis_type: AxisType) -> tuple[UOp, int]:
  """One axis as (loop variable, unroll factor): index = r*factor + k for k < factor. No loop for one trip; a loop of
  no trips for an empty axis (a reduction over it is its identity)."""
  if factor < 1 or size % factor: factor = 1   # a factor that does not divide the axis is ignored
  n = size // factor if size else 0
  return (ctx.range(n, axis_type) if n != 1 else UOp.const(0), factor)


def _combos(parts: list[tuple[UOp, int]]) -> list[tuple[UOp, ...]]:
  """Every unrolled copy of an index: the product of r*factor + k over the axes."""
  axes = [[r] if f == 1 else [symbolic.simplify(r * f + k) for k in range(f)] for r, f in parts]
  return list(itertools.product(*axes))


def rangeify(u: UOp, idx: tuple[UOp, ...], ctx: Ctx) -> UOp:
  """The scalar value of u at index idx."""
  key = (u, idx)
  if (r := ctx.memo.get(key)) is not None: return r
  assert len(idx) == len(u.shape), f"{u.op}: {len(idx)} indices for shape {u.shape}"
  op = u.op
  if op is Ops.CONST: r = u
  elif op is Ops.BUFFER: r = u.index(idx[0]).load()
  elif op is Ops.STAGE: r = rangeify(u.src[0], idx, ctx)      # no kernelizer: compute it inline
  elif op in ALU: r = u.replace(src=tuple(rangeify(s, idx, ctx) for s in u.src))
  elif op is Ops.INDEX:
    iv = tuple(rangeify(i, (), ctx) for i in u.src[1:])
    r = rangeify(u.src[0], iv + idx, ctx)
  elif op is Ops.STACK:
    i, rest = idx[0], idx[1:]
    r = rangeify(u.src[-1], rest, ctx)
    for k in range(len(u.src) - 2, -1, -1):
      r = (i < k + 1).where(rangeify(u.src[k], rest, ctx), r)
  elif op is Ops.RESHAPE:
    # simplify now: ((i*N + j)//N) % N mentions j but *is* i. Dependence analysis
    # (which loops a reduce must sit in) and the memo both need the truth.
    r = rangeify(u.src[0], tuple(simplify(i) for i in unravel(ravel(idx, u.shape), u.src[0].shape)), ctx)
  elif op is Ops.EXPAND:
    r = rangeify(u.src[0], tuple(UOp.const(0) if s == 1 and n != 1 else i for i, s, n in zip(idx, u.src[0].shape, u.shape)), ctx)
  elif op is Ops.PERMUTE:
    inv = [0] * len(idx)
    for k, p in enumerate(u.arg): inv[p] = idx[k]
    r = rangeify(u.src[0], tuple(inv), ctx)
  elif op is Ops.SHRINK: r = rangeify(u.src[0], tuple(i + b if b else i for i, (b, _) in zip(idx, u.arg)), ctx)
  elif op is Ops.PAD: r = _pad(u, idx, ctx)
  elif op is Ops.REDUCE: r = _lower_reduce(u, idx, ctx)
  else: raise NotImplementedError(f"rangeify: {op}")
  ctx.memo[key] = r
  return r


def _pad(u: UOp, idx: tuple[UOp, ...], ctx: Ctx) -> UOp:
  """Zero outside the source. The index is clamped too, so the (unconditional) load never leaves the buffer.

  Where the source has no reduction, each padded axis is read at a stand-in variable that runs over exactly the
  source's extent, so the index algebra inside simplifies as if there were no pad (it knows 0 <= v < size; the real
  i - lo may be negative, and // and % of a maybe-negative value do not simplify). Then v becomes i - lo again, and
  each load's index is clamped where the pad is: a split's gradient (a sum of pads) reads data[i] instead of a tower
  of // and % (NOTES 27)."""
  valid, inner, stand_in = None, [], {}
  for i, s, (lo, _) in zip(idx, u.src[0].shape, u.arg):
    ok = symbolic.simplify((i > lo - 1) & (i < lo + s))
    real = symbolic.simplify(i - lo) if lo else i
    if ok.op is Ops.CONST and ok.arg: inner.append(real); continue
    valid = ok if valid is None else valid & ok
    ctx.stand_ins += 1   # a negative id: never a loop of the kernel
    v = UOp(Ops.RANGE, (UOp.const(s),), (-ctx.stand_ins, AxisType.LOOP))
    stand_in[v] = real
    inner.append(v)
  if valid is None: return rangeify(u.src[0], tuple(inner), ctx)
  zero = UOp.const(0, u.dtype)
  if any(x.op is Ops.REDUCE for x in u.src[0].toposort()):   # a reduce's loops are placed by the variables they see
    safe = tuple(symbolic.simplify(valid.where(stand_in.get(j, j), 0)) for j in inner)
    return valid.where(rangeify(u.src[0], safe, ctx), zero)
  val = rangeify(u.src[0], tuple(inner), ctx)
  back = dict(stand_in)
  for x in val.toposort():
    if x.op is Ops.INDEX and not set(stand_in).isdisjoint(x.src[1].toposort()):
      back[x] = x.src[0].index(symbolic.simplify(valid.where(substitute(x.src[1], stand_in), 0)))
  return valid.where(substitute(val, back), zero)


def _lower_reduce(u: UOp, idx: tuple[UOp, ...], ctx: Ctx) -> UOp:
  """A REDUCE at idx: the context's other lowerings first (e.g. uopc.codegen.online's one pass for softmax), then _reduce."""
  for special in ctx.lowerings:
    if (r := special.lower_reduce(u, idx, ctx)) is not None: return r
  return _reduce(u, idx, ctx)


def _reduce(u: UOp, idx: tuple[UOp, ...], ctx: Ctx) -> UOp:
  rop, n = u.arg
  x = u.src[0]
  rshape = x.shape[len(x.shape) - n:]
  # unrolled copies of the same reduce (they differ only by constants in idx) share one loop
  rkey = (u, frozenset(ranges_in(*idx)))
  if (parts := ctx.reduce_ranges.get(rkey)) is None:
    parts = [_axis_parts(ctx, s, ctx.opts.unroll if k == n - 1 else 1, AxisType.REDUCE) for k, s in enumerate(rshape)]
    ctx.reduce_ranges[rkey] = parts
  real = [r for r, _ in parts if r.op is Ops.RANGE]
  vals = [rangeify(x, idx + c, ctx) for c in _combos(parts)]
  while len(vals) > 1:                                    # unrolled reduce axis: a balanced tree
    vals = [UOp(rop, (vals[i], vals[i + 1])) if i + 1 < len(vals) else vals[i] for i in range(0, len(vals), 2)]
  if not real: return vals[0]
  acc = ctx.alloc(u.dtype)
  # the accumulator lives inside the loops the output index uses...
  acc0 = acc.after(*ranges_in(*idx))
  init = acc0.index(0).store(UOp.const(identity(rop, u.dtype), u.dtype))
  # ...is re-read every iteration of the reduce loops...
  accl = acc0.after(init, *real)
  upd = accl.index(0).store(UOp(rop, (accl.index(0).load(), vals[0])))
  # ...and is read once more after the loops end
  return acc0.after(upd.end(*real)).index(0).load()


def lower(body: UOp, out: UOp, ctx: Ctx | None = None) -> UOp:
  """Tensor-level kernel body -> loop program (a SINK) that stores body, row-major, into the BUFFER out."""
  ctx = ctx or Ctx()
  if trace.RECORDERS: trace.lowering()   # uopc.viz keeps the rewrites of this lowering apart
  shape = body.shape
  kinds = [AxisType.THREAD if k == ctx.opts.thread else AxisType.LOOP for k in range(len(shape))]
  parts = [_axis_parts(ctx, s, ctx.opts.upcast.get(k, 1), kinds[k]) for k, s in enumerate(shape)]
  stores = [out.index(symbolic.simplify(ravel(idx, shape))).store(rangeify(body, idx, ctx)) for idx in _combos(parts)]
  ranges = [r for r, _ in parts if r.op is Ops.RANGE]
  # merge_ends: all the stores of a register tile close the output loops together
  raw = sink(UOp(Ops.SINK, tuple(stores)).end(*ranges)) if ranges else sink(*stores)
  prog = symbolic.simplify(raw)   # the final cleanup of every index expression in the program
  if trace.RECORDERS: trace.lowered(raw, prog)   # uopc.viz draws both, and simplify's rewrites between
  _accumulators[prog] = tuple((k[0], v) for k, v in ctx.memo.items() if k[0].op is Ops.REDUCE and v.op is Ops.LOAD)
  return prog


# what each lowered program's fused reductions became (REDUCE, the load of its accumulator): for Plan.explain. A memo
# of lower()'s results, kept only as long as the program lives; clear_caches() may empty it
_accumulators: weakref.WeakKeyDictionary = cache("rangeify.accumulators", weakref.WeakKeyDictionary())


def reduce_accumulators(prog: UOp) -> tuple[tuple[UOp, UOp], ...] | None:
  """(REDUCE, load of its accumulator) for every reduction lower() placed in prog; None if lower did not make it."""
  return _accumulators.get(prog)


# other lowerings build on these (the book prints the underscored names in _reduce)
axis_parts, combos = _axis_parts, _combos


def last_axis_stride(view: UOp) -> int | None:
  """The memory stride of view's last axis, if view is movement ops over one BUFFER (None otherwise): the layout
  pass asks it of a reduce's operands (uopc.opt), and a plan's explain() says it."""
  base = view
  while base.op in MOVEMENT: base = base.src[0]
  if base.op is not Ops.BUFFER or not view.shape: return None
  idx = tuple(range_(s, 100 + k) for k, s in enumerate(view.shape))   # scratch loop variables, never rendered
  load = rangeify(view, idx, Ctx())
  # a view that reads only padding is a constant, and one that reads some is a select: no single stride
  if load.op is not Ops.LOAD or load.src[0].op is not Ops.INDEX or len(load.src[0].src) < 2: return None
  addr = load.src[0].src[1]                                             # LOAD(INDEX(buf, addr)) -> addr
  terms, _ = symbolic.linear_form(symbolic.simplify(addr))
  if view.shape[-1] == 1: return 1
  return terms.get(idx[-1], 0) if all(t.op is Ops.RANGE or t is idx[-1] for t in terms) else None
