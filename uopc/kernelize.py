"""The kernelizer and realize: a tensor graph -> a Plan of kernels -> results.

make_plan cuts the graph at materialization points (roots, STAGEs, REDUCEs), gives each point a
kernel that computes it into a buffer, and caches the Plan per graph shape. realize runs a plan on
the actual arrays, reusing its temporaries from one run to the next.
"""
from __future__ import annotations
import time
from dataclasses import dataclass, field
import numpy as np
from uopc.uop import UOp, Ops, ParamArg, Pat, graph_rewrite, substitute
from uopc.dtype import DType, np_dtype
from uopc.helpers import DEBUG, prod
from uopc.rangeify import lower, Ctx, ONLINE_SOFTMAX
from uopc.render_c import render
from uopc.runtime import Program


@dataclass(frozen=True, eq=False)
class TensorData:
  """The arg of a BUFFER that holds a Tensor's data: a flat, C-contiguous NumPy array (identity is the key)."""
  array: np.ndarray
  dtype: DType
  shape: tuple[int, ...]

  def __repr__(self): return f"TensorData({self.shape}, {self.dtype})"


@dataclass(frozen=True)
class PlanBuf:
  """The arg of a BUFFER inside a plan: input k, temporary k or output k (the same for every graph of this shape)."""
  kind: str
  n: int
  dtype: DType
  shape: tuple[int, ...]


@dataclass
class Kernel:
  name: str
  prg: Program
  args: list[tuple[str, int]]   # per data slot: ("in", k), ("temp", k) or ("out", k)
  flops: int
  src: str
  ast: UOp                      # the loop program
  body: UOp                     # the tensor-level body it computes
  recompute: dict[UOp, float] = field(default_factory=dict)   # fused REDUCE -> evaluations per element it has


@dataclass
class Plan:
  kernels: list[Kernel]
  temps: list[tuple[DType, int]]
  outs: list[tuple[str, int] | tuple[DType, int]]   # per root: ("in", i) alias, or (dtype, size) fresh
  temp_arrays: list | None = None   # allocated on first run, then reused: no page faults on every step
  notes: list[str] = field(default_factory=list)   # why each cut was made (see explain)

  def explain(self) -> str:
    """Why the graph was cut where it was, and what each fused reduction costs."""
    return "\n".join(self.notes)


strip_detach = [(Pat(Ops.DETACH, (Pat.var("x"),)), lambda x: x)]   # gradients are not a kernel's business


def is_contiguous_buffer(u: UOp) -> bool:
  while u.op is Ops.RESHAPE: u = u.src[0]
  return u.op is Ops.BUFFER


def _fused_work(u: UOp) -> int:
  """ALU ops * elements that recomputing u would cost (stopping at materialized nodes)."""
  from uopc.uop import ALU
  n, seen, stack = 0, set(), [u]
  while stack:
    x = stack.pop()
    if x in seen or x.op in (Ops.BUFFER, Ops.REDUCE, Ops.STAGE): continue
    seen.add(x)
    if x.op in ALU: n += 1
    stack.extend(x.src)
  return n * prod(u.shape)


def stage_broadcast_compute(roots: list[UOp], factor: int = 4) -> list[UOp]:
  """Fusing is only free if nothing gets recomputed. A computed tensor that is EXPANDed by
  `factor` or more (e.g. a LayerNorm output feeding a matmul) would be recomputed for every
  copy, so we materialize it first. This is the fusion/recompute trade-off, as one rule."""
  from uopc.uop import MOVEMENT, ALU
  todo: set[UOp] = set()
  for u in UOp(Ops.SINK, tuple(roots)).toposort():
    if u.op is not Ops.EXPAND or prod(u.shape) < factor * prod(u.src[0].shape): continue
    base = u.src[0]
    while base.op in MOVEMENT: base = base.src[0]
    if base.op in ALU and base.op is not Ops.CAST and base.shape and _fused_work(base) >= 4096: todo.add(base)
  return UOp.wrap(roots, todo, lambda n: UOp(Ops.STAGE, (n,))) if todo else roots


def _materialize_points(roots: list[UOp], fuse_reduce: bool) -> list[UOp]:
  topo = UOp(Ops.SINK, tuple(roots)).toposort()
  m = []
  for u in topo:
    if u.op is Ops.SINK: continue
    if u.op is Ops.STAGE or (u.op is Ops.REDUCE and not fuse_reduce) or (u in roots and not is_contiguous_buffer(u)):
      m.append(u)
  return m


def make_plan(roots: list[UOp], fuse_reduce: bool = False, opt=None, online_softmax: bool = False) -> Plan:
  """Kernels, temporaries and outputs for computing roots. Cached per graph shape."""
  roots, _ = normalize(roots)
  key = (tuple(roots), fuse_reduce, opt, online_softmax)
  if (plan := _plans.get(key)) is not None: return plan
  ONLINE_SOFTMAX[0] = online_softmax   # the layout pass and every lowering below read it
  try: _plans[key] = plan = _make_plan(roots, fuse_reduce, opt, online_softmax)
  finally: ONLINE_SOFTMAX[0] = False
  return plan


def _make_plan(roots: list[UOp], fuse_reduce: bool, opt, online_softmax: bool = False) -> Plan:
  asked = _stages(roots)   # STAGEs the program itself asked for (contiguous()), for explain()
  roots = [graph_rewrite(r, strip_detach) for r in roots]
  # fuse_reduce asks for "never write the big intermediate", so don't stage broadcasts either
  if not fuse_reduce: roots = stage_broadcast_compute(roots)
  if opt is not None: roots = opt.layout(roots)
  points = _materialize_points(roots, fuse_reduce)
  if online_softmax: roots, points = _online_fusion(roots, fuse_reduce)   # one pass for softmax (uopc.online)
  # where each point's value lives: an output if it is a root, else a temporary
  home: dict[UOp, UOp] = {}
  temps: list[tuple[DType, int]] = []
  outs: list = []
  for r in roots:
    if is_contiguous_buffer(r):
      b = r
      while b.op is Ops.RESHAPE: b = b.src[0]
      outs.append(("in", b.arg.n))
    elif r in home: outs.append(("out", roots.index(r)))   # the same root twice: one kernel, one array
    else:
      home[r] = UOp(Ops.BUFFER, (), PlanBuf("out", len(outs), r.dtype, (prod(r.shape),)))
      outs.append((r.dtype, prod(r.shape)))
  for p in points:
    if p not in home:
      home[p] = UOp(Ops.BUFFER, (), PlanBuf("temp", len(temps), p.dtype, (prod(p.shape),)))
      temps.append((p.dtype, prod(p.shape)))
  kernels = []
  for p in points:
    body = p.src[0] if p.op is Ops.STAGE else p
    # every other point is read back from its buffer, viewed in the point's shape
    body = substitute(body, {q: UOp(Ops.RESHAPE, (home[q],), q.shape) for q in points if q is not p})
    kernels.append(_make_kernel(body, home[p], opt))
  return Plan(kernels, temps, outs, notes=_explain(roots, points, kernels, temps, asked, fuse_reduce, online_softmax))



def _make_kernel(body: UOp, out_buf: UOp, opt) -> Kernel:
  """Number the kernel's buffers data0, data1, ... in order of first use, the output last; lower, render, compile."""
  args, mapping = [], {}
  for u in body.toposort():
    if u.op is Ops.BUFFER and u not in mapping:
      mapping[u] = UOp(Ops.BUFFER, (), ParamArg(len(args), u.dtype, u.arg.shape))
      args.append((u.arg.kind, u.arg.n))
  local = substitute(body, mapping)
  out = UOp(Ops.BUFFER, (), ParamArg(len(args), out_buf.dtype, out_buf.arg.shape))
  args.append((out_buf.arg.kind, out_buf.arg.n))
  before = Ctx.latest
  ast = opt.lower(local, out) if opt is not None else lower(local, out)
  # an input the simplified program never reads (a slice of padding) is not a parameter of the C function
  used = {u.arg.slot for u in ast.toposort() if u.op is Ops.BUFFER}
  args = [a for k, a in enumerate(args) if k in used]
  name = kernel_name(body)
  r = render(ast, name)
  kernel = Kernel(name, Program(r.src, name), args, r.flops, r.src, ast, body)
  if Ctx.latest is not before and any(u.op is Ops.REDUCE for u in local.toposort()[:-1]):
    kernel.recompute = _evaluations(Ctx.latest, r.acc_trips, local, body)
  return kernel


# ---- the plan cache and kernel names ----
_plans: dict[tuple, Plan] = {}


def kernel_name(body: UOp) -> str:
  """r_ if the kernel reduces, e_ if it is elementwise, then its output loop sizes: r_1024_64."""
  kind = "r" if any(x.op is Ops.REDUCE for x in body.toposort()) else "e"
  return kind + "_" + "_".join(str(s) for s in (body.shape or (1,)))


def normalize(roots: list[UOp]) -> tuple[list[UOp], list[np.ndarray]]:
  """Replace each Tensor's data by input k (in order of first use), so graphs of the same shape are one object."""
  arrays, mapping = [], {}
  for u in UOp(Ops.SINK, tuple(roots)).toposort():
    if u.op is Ops.BUFFER and isinstance(u.arg, TensorData):
      mapping[u] = UOp(Ops.BUFFER, (), PlanBuf("in", len(arrays), u.arg.dtype, u.arg.shape))
      arrays.append(u.arg.array)
  return ([substitute(r, mapping) for r in roots] if mapping else list(roots)), arrays


def realize(roots: list[UOp], fuse_reduce: bool = False, opt=None, online_softmax: bool = False) -> list[np.ndarray]:
  """Compute roots: plan (cached), then run each kernel on the inputs, the plan's temporaries and fresh outputs."""
  t0 = time.perf_counter()
  norm, arrays = normalize(roots)
  plan = make_plan(norm, fuse_reduce, opt, online_softmax)
  t1 = time.perf_counter()
  if plan.temp_arrays is None: plan.temp_arrays = [np.empty(n, np_dtype(d)) for d, n in plan.temps]
  temps = plan.temp_arrays
  outs: list[np.ndarray] = []
  for o in plan.outs:   # an input passed through, an earlier output again, or a fresh array
    outs.append(arrays[o[1]] if o[0] == "in" else outs[o[1]] if o[0] == "out" else np.empty(o[1], np_dtype(o[0])))
  pick = {"in": arrays, "temp": temps, "out": outs}
  for k in plan.kernels:
    bufs = [pick[kind][n] for kind, n in k.args]
    if DEBUG >= 4: print(k.src)
    ts = time.perf_counter()
    k.prg(*bufs)
    dt = time.perf_counter() - ts
    if DEBUG >= 2:
      line = f"  {k.name:<30s}{dt * 1e3:9.3f} ms{k.flops / dt / 1e9:9.2f} GFLOP/s"
      if DEBUG >= 3:   # the same kernel again, on memory it has already touched
        ts = time.perf_counter(); k.prg(*bufs); again = time.perf_counter() - ts
        line += f"   again {again * 1e3:8.3f} ms"
      print(line)
  t2 = time.perf_counter()
  if DEBUG >= 2:
    print(f"realize: {len(plan.kernels)} kernels, schedule {(t1 - t0) * 1e3:.1f} ms, run {(t2 - t1) * 1e3:.1f} ms")
  return outs


# ---- explain(), and the online-softmax fusion (the appendix to chapter 11) ----
def _online_fusion(roots: list[UOp], fuse_reduce: bool) -> tuple[list[UOp], list[UOp]]:
  """With online softmax, a softmax group (its max, its sum, and the reduces its max reads, such as S = Q K^T) is
  computed once per key inside its consumer's single pass: fusing it recomputes nothing, so it is not cut, and a
  broadcast of its result is not staged either."""
  from uopc.online import find_groups, _reachable
  from uopc.uop import ALU, MOVEMENT
  groups = find_groups(roots)
  one_pass = set(groups) | set(groups.values())
  for mx in groups.values(): one_pass |= {x for x in _reachable(mx.src[0], ALU | MOVEMENT) if x.op is Ops.REDUCE}
  unstage = {s for s in _stages(roots) if s.src[0] not in roots and not one_pass.isdisjoint(s.toposort())}
  if unstage: roots = UOp.wrap(roots, unstage, lambda n: n.src[0])
  one_pass = {x for x in UOp(Ops.SINK, tuple(roots)).toposort() if x.op is Ops.REDUCE and _in_group(x, roots)}
  return roots, [p for p in _materialize_points(roots, fuse_reduce) if p not in one_pass or p in roots]


def _in_group(x: UOp, roots: list[UOp]) -> bool:
  from uopc.online import find_groups, _reachable
  from uopc.uop import ALU, MOVEMENT
  groups = find_groups(roots)
  if x in groups or x in groups.values(): return True
  return any(x in _reachable(mx.src[0], ALU | MOVEMENT) for mx in groups.values())


def _stages(roots: list[UOp]) -> set[UOp]:
  return {u for u in UOp(Ops.SINK, tuple(roots)).toposort() if u.op is Ops.STAGE}


def _explain(roots, points, kernels, temps, asked, fuse_reduce: bool, online_softmax: bool) -> list[str]:
  notes = [f"{k.name:<16s} {_why(p, roots, asked)}{_recompute_note(k)}" for p, k in zip(points, kernels)]
  if online_softmax:
    from uopc.online import find_groups, _reachable
    from uopc.uop import ALU, MOVEMENT
    for sm, mx in find_groups(roots).items():
      # the weighted sums over the same axis that read this softmax (P @ V) ride in the same pass
      users = [u for u in UOp(Ops.SINK, tuple(roots)).toposort() if u.op is Ops.REDUCE and u.arg == (Ops.ADD, 1)
               and u is not sm and mx in _reachable(u.src[0], ALU | MOVEMENT)]
      notes.append(f"online softmax: {2 + len(users)} reductions merged into 1 pass (max{list(mx.shape)}, "
                   f"sum{list(sm.shape)}" + "".join(f", sum{list(u.shape)}" for u in users) + ")")
  notes.append(f"{len(kernels)} kernels, temporaries {[n for _, n in temps]}")
  if fuse_reduce: notes[-1] += " (fuse_reduce: REDUCEs are not cut)"
  return notes


def _why(p: UOp, roots: list[UOp], asked: set[UOp]) -> str:
  """The rule that made p a materialization point."""
  from uopc.uop import MOVEMENT
  if p in roots: return "root: an output of the graph"
  if p.op is Ops.REDUCE: return f"REDUCE: {p.arg[0].name.lower()} over the last {p.arg[1]} axis(es), shape {p.shape}"
  if p in asked: return "STAGE: asked for (contiguous())"
  base = p.src[0]
  while base.op in MOVEMENT: base = base.src[0]
  if base.op is Ops.BUFFER: return f"STAGE by the layout pass: a reduce read it with stride {_layout_stride(p)}, now 1"
  factor = max((prod(u.shape) // prod(u.src[0].shape) for u in _users(roots, p)), default=0)
  return f"STAGE by the broadcast rule: expanded x{factor}, recompute work {_fused_work(p.src[0])} >= 4096"


def _users(roots: list[UOp], p: UOp) -> list[UOp]:
  """The EXPANDs whose source is p, through movement ops."""
  from uopc.uop import MOVEMENT
  out = []
  for u in UOp(Ops.SINK, tuple(roots)).toposort():
    if u.op is not Ops.EXPAND: continue
    b = u.src[0]
    while b.op in MOVEMENT and b is not p: b = b.src[0]
    if b is p: out.append(u)
  return out


def _layout_stride(p: UOp) -> int | None:
  from uopc.opt import last_axis_stride
  return last_axis_stride(p.src[0])


def _recompute_note(k: Kernel) -> str:
  if not k.recompute: return ""
  parts = [f"{u.arg[0].name.lower()}{list(u.shape)} x{n:g}" for u, n in k.recompute.items()]
  return "\n" + " " * 17 + "fused reductions, evaluations per element: " + ", ".join(parts)


def _evaluations(ctx: Ctx, acc_trips: dict[int, int], local: UOp, body: UOp) -> dict[UOp, float]:
  """For every REDUCE fused inside the kernel: how many times each of its values is computed (1 is no recompute)."""
  from uopc.render_c import base_alloc
  total: dict[UOp, int] = {}
  for key, val in ctx.memo.items():
    u = key[0]
    if len(key) != 2 or not isinstance(u, UOp) or u.op is not Ops.REDUCE or u is local: continue
    if val.op is not Ops.LOAD: continue
    a = base_alloc(val.src[0].src[0])
    if a is not None: total[u] = total.get(u, 0) + acc_trips.get(a.arg.slot, 0)
  return {u: n / prod(u.shape) for u, n in total.items()}
