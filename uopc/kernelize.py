"""The kernelizer and realize: a tensor graph -> a Plan of kernels -> results.

make_plan cuts the graph at materialization points (roots, STAGEs, REDUCEs), gives each point a kernel that computes
it into a buffer, and caches the Plan. realize runs a plan on the arrays, reusing its temporaries run after run.
The pipeline, as make_plan runs it (each step is a function below with a docstring; uopc.viz draws each one):
  normalize                 Tensor data -> numbered inputs (graphs of one shape are one object); empty -> constant
  strip_detach              DETACH removed (gradients are not a kernel's business)
  stage_broadcast_compute   expensive tensors that are broadcast get a STAGE (unless fuse_reduce)
  opt.layout                the optimizer's layout pass (copies for stride-1 reduces)
  _materialize_points       where kernels are cut: roots, STAGEs, REDUCEs (unless fuse_reduce)
  online_fusion             softmax groups are not cut when online softmax is on (uopc.codegen.online)
  _homes                    each point's buffer: an output or a temporary
  _make_kernel              per point (or group of sibling outputs): lower, render and compile on the device
"""
from __future__ import annotations
import os, threading, time
from dataclasses import dataclass, field
import numpy as np
from uopc.uop import UOp, Ops, ParamArg, Pat, graph_rewrite, substitute, MOVEMENT
from uopc.dtype import DType, np_dtype
from uopc.device import Device, get_device
from uopc.helpers import DEBUG, DEVICE, MARCH, TC, cache, prod
from uopc.codegen.online import online_fusion
from uopc.plancache import PlanCache
from uopc.plan_program import program_for
from uopc.options import Options, call_with_options
from uopc.rangeify import lower, Ctx, reduce_accumulators
from uopc import trace   # the ground floor's hooks: uopc.viz, when imported, records realizes (VIZ=1) through them


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
  prg: object                   # the device's program: prg(*buffers) runs it
  args: list[tuple[str, int]]   # per data slot: ("in", k), ("temp", k) or ("out", k)
  flops: int
  src: str
  ast: UOp                      # the loop program
  body: UOp                     # the tensor-level body it computes
  recompute: dict[UOp, float] = field(default_factory=dict)   # fused REDUCE -> evaluations per element it has
  threads: int | None = None    # 1: a small kernel, run on the calling thread (Options.one_thread_below)


# (how often a plan has run, and its step programs, are kept beside it by uopc.plan_program.runs_of: chapter 11 prints
# this class)
@dataclass
class Plan:
  kernels: list[Kernel]
  temps: list[tuple[DType, int]]
  outs: list[tuple[str, int] | tuple[DType, int]]   # per root: ("in", i) alias, or (dtype, size) fresh
  temp_arrays: list | None = None   # allocated on first run, then reused: no page faults on every step
  notes: list[str] = field(default_factory=list)   # why each cut was made (see explain)
  lock: threading.Lock = field(default_factory=threading.Lock, repr=False)   # one run at a time: temps are shared

  def explain(self) -> str:
    """Why the graph was cut where it was, and what each fused reduction costs."""
    return "\n".join(self.notes)


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


def _make_plan(roots: list[UOp], options: Options) -> Plan:
  """Normalized tensor-level roots -> a Plan: the passes of the module docstring, in order, each a named function
  that takes tensor-level roots and gives them back rewritten, then one compiled kernel per materialization point."""
  fuse_reduce = options.fuse_reduce
  opt = BoundOpt(options.opt, options) if options.opt is not None else None
  asked = _stages(roots)   # STAGEs the program itself asked for (contiguous()), for explain()
  roots = [graph_rewrite(r, strip_detach) for r in roots]
  # fuse_reduce asks for "never write the big intermediate", so don't stage broadcasts either
  if not fuse_reduce: roots = stage_broadcast_compute(roots)
  if opt is not None: roots = opt.layout(roots)
  points = _materialize_points(roots, fuse_reduce)
  online = online_fusion(roots, lambda rs: _materialize_points(rs, fuse_reduce)) if options.online_softmax else None
  if online is not None: roots, points = online.roots, online.points   # softmax groups: one pass, not cut
  home, temps, outs = _homes(roots, points)
  device = get_device(options.device)
  points = [p for p in points if prod(p.shape)]   # an empty tensor is written by no kernel (its output has no data)
  groups, kernels = _kernels(roots, points, home, opt, options, device)   # a kernel per point or sibling group
  _compile_all(kernels, device)   # the kernels' compiles run side by side
  notes = _explain(roots, groups, kernels, temps, asked, fuse_reduce, online.notes if online is not None else [])
  return Plan(kernels, temps, outs, notes=notes)


def make_plan(roots: list[UOp], fuse_reduce: bool = False, opt=None, online_softmax: bool = False,
              options: Options | None = None) -> Plan:
  """Kernels, temporaries and outputs for computing roots. Cached per graph shape and options."""
  options = options or Options(fuse_reduce, opt, online_softmax, DEVICE.value, tc=TC.value, march=MARCH.value)
  return plan_for(normalize(roots)[0], options)


def plan_for(roots: list[UOp], options: Options) -> Plan:
  """make_plan for roots already normalized (realize normalizes once and calls this). The key is the graph and the
  options: the same program under other switches, or on another device, is another plan."""
  key = (tuple(roots), options)
  if (plan := _plans.get(key)) is None: _plans.put(key, plan := _make_plan(roots, options))
  return plan


class BoundOpt:
  """An optimizer with the options of this realize attached, called as the book calls one: layout(roots) and
  lower(body, out). Optimizers that declare an `options` parameter receive them (uopc.options)."""
  def __init__(self, opt, options: Options): self.opt, self.options = opt, options

  def layout(self, roots: list[UOp]) -> list[UOp]:
    return call_with_options(self.opt.layout, roots, options=self.options)

  def lower(self, body: UOp, out: UOp) -> UOp:
    return call_with_options(self.opt.lower, body, out, options=self.options)


# ---- the plan cache (uopc.plancache), owned here, and its public handles ----
_plans = cache("kernelize.plans", PlanCache.from_env())   # the cache every realize uses


def clear_plan_cache() -> None:
  """Forget every cached plan and free its temporaries (the compiled objects stay in the disk cache, so planning
  again costs no compile)."""
  _plans.clear()


def isolated_plan_cache(max_bytes: int | None = None, max_plans: int | None = None):
  """Plans made inside the block go to a cache of their own (yielded; same limits unless given), and the plans from
  before are back after it: for experiments that patch a pass and must neither use nor leave behind ordinary plans."""
  return _plans.isolated(max_bytes, max_plans)   # the one cache swaps its contents for the block


def normalize(roots: list[UOp]) -> tuple[list[UOp], list[np.ndarray]]:
  """Replace each Tensor's data by input k (in order of first use), so graphs of the same shape are one object.
  One pass over one SINK of all the roots, sources before users: shared subgraphs are rebuilt once."""
  arrays, memo = [], {}
  for u in UOp(Ops.SINK, tuple(roots)).toposort()[:-1]:
    if 0 in u.shape and not _is_const(u): memo[u] = _empty_const(u)   # nothing to read in it
    elif u.op is Ops.BUFFER and isinstance(u.arg, TensorData):
      memo[u] = UOp(Ops.BUFFER, (), PlanBuf("in", len(arrays), u.arg.dtype, u.arg.shape))
      arrays.append(u.arg.array)
    else: memo[u] = u.with_src(tuple(map(memo.__getitem__, u.src))) if u.src else u
  return [memo[r] for r in roots], arrays


def realize(roots: list[UOp], fuse_reduce: bool = False, opt=None, online_softmax: bool = False,
            options: Options | None = None, observe=None, writes=()) -> list[np.ndarray]:
  """Compute roots: plan (cached), run its kernels on the inputs, its temporaries and fresh outputs (host arrays), and
  write each (output i, array) of writes into its array; where plan_program says so, as one program."""
  options = options or Options(fuse_reduce, opt, online_softmax, DEVICE.value, DEBUG.value, TC.value, march=MARCH.value)
  t0 = time.perf_counter()
  norm, arrays = normalize(roots)
  plan = plan_for(norm, options)
  debug, device = options.debug, get_device(options.device)
  t1 = time.perf_counter()
  if plan.temp_arrays is None: plan.temp_arrays = [np.empty(n, np_dtype(d)) for d, n in plan.temps]
  temps = plan.temp_arrays
  program = program_for(plan, arrays, writes, options, device) if observe is None else None
  if program is not None: outs = program.run(plan, arrays, writes)
  else:
    outs = run_kernels(plan, arrays, temps, device, debug)
    for i, target in writes: np.copyto(target, outs[i])
  t2 = time.perf_counter()
  if debug >= 2:
    print(f"realize{_on(device, ' on ')}: {len(plan.kernels)} kernels, schedule {(t1 - t0) * 1e3:.1f} ms, "
          f"run {(t2 - t1) * 1e3:.1f} ms")
  if observe is not None: observe(plan, arrays, outs)   # a capture (uopc.jit) records what ran
  if trace.RECORDERS: trace.realized(roots, norm, plan, options)   # VIZ=1 or uopc.viz.recording()
  return outs


def is_contiguous_buffer(u: UOp) -> bool:
  while u.op is Ops.RESHAPE: u = u.src[0]
  return u.op is Ops.BUFFER


def _is_const(u: UOp) -> bool:
  while u.op in MOVEMENT: u = u.src[0]
  return u.op is Ops.CONST


def _empty_const(u: UOp) -> UOp:
  """A tensor with no elements, as a constant of its shape: no kernel ever indexes its (absent) data."""
  c = UOp(Ops.RESHAPE, (UOp.const(0, u.dtype),), (1,) * len(u.shape))
  return UOp(Ops.EXPAND, (c,), u.shape)


def run_kernels(plan: Plan, arrays: list, temps: list, device: Device, debug: int = 0) -> list[np.ndarray]:
  """Run the plan's kernels in order on the inputs and temporaries; return the outputs (fresh arrays, or inputs
  passed through). DEBUG=2 prints a line per kernel, 3 runs each twice, 4 prints each source."""
  outs: list[np.ndarray] = []
  for o in plan.outs:   # an input passed through, an earlier output again, or a fresh array
    outs.append(arrays[o[1]] if o[0] == "in" else outs[o[1]] if o[0] == "out" else device.alloc(o[0], o[1]))
  pick = {"in": arrays, "temp": temps, "out": outs}
  with plan.lock: _run(plan, pick, debug, device)
  return outs


def _run(plan: Plan, pick: dict, debug: int, device: Device) -> None:
  for k in plan.kernels:
    bufs = [pick[kind][n] for kind, n in k.args]
    if debug >= 4: print(k.src)
    ts = time.perf_counter()
    k.prg(*bufs)
    dt = time.perf_counter() - ts
    if debug >= 2:
      line = f"  {k.name:<30s}{dt * 1e3:9.3f} ms{k.flops / dt / 1e9:9.2f} GFLOP/s" + _on(device)
      if debug >= 3:   # the same kernel again, on memory it has already touched
        ts = time.perf_counter(); k.prg(*bufs); again = time.perf_counter() - ts
        line += f"   again {again * 1e3:8.3f} ms"
      print(line)


def replay(plan: Plan, arrays: list, options: Options) -> list[np.ndarray]:
  """Run a plan that has run before on new inputs: no graph, no normalize, no cache lookup (uopc.jit)."""
  if plan.temp_arrays is None: raise RuntimeError("replay: this plan has never run, so it has no temporaries yet")
  return run_kernels(plan, arrays, plan.temp_arrays, get_device(options.device), options.debug)


def _on(device: Device, sep: str = "  ") -> str:
  """The device, in a DEBUG line (the CPU's lines stay as the book prints them)."""
  return "" if device.name == "CPU" else f"{sep}{device.name}"


def plan_cache_size() -> int:
  """How many plans are cached (tests and chapters check that a plan was reused, not rebuilt)."""
  return len(_plans)


# ---- one kernel per point ----
def kernel_name(body: UOp) -> str:
  """r_ if the kernel reduces, e_ if it is elementwise, then its output loop sizes: r_1024_64."""
  kind = "r" if any(x.op is Ops.REDUCE for x in body.toposort()) else "e"
  return kind + "_" + "_".join(str(s) for s in (body.shape or (1,)))


def _homes(roots: list[UOp], points: list[UOp]) -> tuple[dict[UOp, UOp], list, list]:
  """Where each point's value lives: an output BUFFER if it is a root, else a temporary; and each root's output."""
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
  return home, temps, outs


def _compile_all(kernels: list[Kernel], device: Device) -> list[Kernel]:
  """Compile every kernel's source for the device, several at once: a cold plan's compiles are separate compiler
  processes, so a plan of many kernels waits for the slowest few instead of their sum."""
  from concurrent.futures import ThreadPoolExecutor
  workers = min(len(kernels), os.cpu_count() or 1)
  if workers <= 1: programs = [device.compile(k.src) for k in kernels]
  else:
    with ThreadPoolExecutor(max_workers=workers) as pool:
      programs = list(pool.map(device.compile, [k.src for k in kernels]))
  for k, prg in zip(kernels, programs):
    k.prg = prg
    if k.threads is not None and hasattr(prg, "threads"): prg.threads = k.threads   # a CPU Program's OpenMP threads
  return kernels


def _kernels(roots, points, home, opt, options: Options, device: Device) -> tuple[list[tuple[UOp, ...]], list[Kernel]]:
  """The points as groups (uopc.codegen.siblings: elementwise outputs that no other kernel reads share one kernel;
  Options.siblings), and each group's kernel."""
  from uopc.codegen.siblings import sibling_groups
  groups = sibling_groups(roots, points) if options.siblings else [(p,) for p in points]
  lowered: dict = {}   # a GPT's layers are alike: each distinct kernel of this plan is lowered and rendered once
  reads = _reads(points, home)   # once per plan, not once per kernel: a step has hundreds of each
  return groups, [_make_kernel([_kernel_body(p, points, home, g, reads) for p in g], [home[p] for p in g], opt,
                               options, device, lowered) for g in groups]


def _reads(points: list[UOp], home: dict[UOp, UOp]) -> dict[UOp, UOp]:
  """Each point as a kernel reads it back: its buffer, viewed in the point's shape."""
  return {q: UOp(Ops.RESHAPE, (home[q],), q.shape) for q in points}


def _kernel_body(p: UOp, points: list[UOp], home: dict[UOp, UOp], group: tuple[UOp, ...] = (),
                 reads: dict[UOp, UOp] | None = None) -> UOp:
  """What point p's kernel computes: every other point is read back from its buffer, viewed in the point's shape
  (but the other points of its group, which its kernel computes at the same element: those are computed inline)."""
  body = p.src[0] if p.op is Ops.STAGE else p
  reads = reads if reads is not None else _reads(points, home)
  return substitute(body, {q: r for q, r in reads.items() if q is not p and q not in group})


def _make_kernel(bodies: list[UOp], out_bufs: list[UOp], opt, options: Options, device: Device,
                 lowered: dict | None = None) -> Kernel:
  """Number the kernel's buffers data0, data1, ... in order of first use, the outputs last; lower, render, compile.
  Several bodies (sibling outputs, uopc.codegen.siblings): each lowered on its own, the loop programs merged. Two
  kernels of one plan whose numbered bodies are the same UOps (hash-consed) are lowered once (`lowered`)."""
  args, mapping = [], {}
  for u in (x for body in bodies for x in body.toposort()):
    if u.op is Ops.BUFFER and u not in mapping:
      mapping[u] = UOp(Ops.BUFFER, (), ParamArg(len(args), u.dtype, u.arg.shape))
      args.append((u.arg.kind, u.arg.n))
  locals_, outs = [substitute(body, mapping) for body in bodies], []
  for ob in out_bufs:
    outs.append(UOp(Ops.BUFFER, (), ParamArg(len(args), ob.dtype, ob.arg.shape)))
    args.append((ob.arg.kind, ob.arg.n))
  key = (tuple(locals_), tuple(outs), kernel_name(bodies[0]))
  if lowered is None or (done := lowered.get(key)) is None:
    done = _lower_and_render(locals_, outs, bodies[0], opt, options, device)
    if lowered is not None: lowered[key] = done
  ast, r, recompute = done
  # an input the simplified program never reads (a slice of padding) is not a parameter of the kernel
  used = {u.arg.slot for u in ast.toposort() if u.op is Ops.BUFFER}
  kernel = Kernel(r.src.name, None, [a for k, a in enumerate(args) if k in used], r.flops, r.src, ast, bodies[0],
                  dict(recompute))   # compiled by _compile_all
  if r.accesses + r.flops < options.one_thread_below: kernel.threads = 1
  return kernel


def _lower_and_render(locals_: list[UOp], outs: list[UOp], first: UOp, opt, options: Options, device: Device):
  """The numbered bodies lowered (merged, for siblings) and rendered: (loop program, rendered kernel, recompute)."""
  from uopc.codegen.siblings import merge
  from uopc.explain import evaluations
  asts = [opt.lower(lc, o) if opt is not None else lower(lc, o, Ctx(options=options)) for lc, o in zip(locals_, outs)]
  ast, local = (asts[0], locals_[0]) if len(asts) == 1 else (merge(asts), None)
  name = kernel_name(first) + (f"_x{len(locals_)}" if len(locals_) > 1 else "")
  r = device.renderer.for_options(options).render(ast, name)
  accs = reduce_accumulators(ast)   # None when the optimizer built the loops itself
  recompute = {}
  if local is not None and accs and any(u.op is Ops.REDUCE for u in local.toposort()[:-1]):
    recompute = evaluations(accs, r.acc_trips, local)
  return ast, r, recompute


# ---- explain() (uopc.explain) ----
def _stages(roots: list[UOp]) -> set[UOp]:
  return {u for u in UOp(Ops.SINK, tuple(roots)).toposort() if u.op is Ops.STAGE}


def _explain(roots, groups, kernels, temps, asked, fuse_reduce: bool, online: list[str]) -> list[str]:
  from uopc.explain import explain_plan
  return explain_plan(roots, groups, kernels, temps, asked, fuse_reduce, online, _fused_work)


strip_detach = [(Pat(Ops.DETACH, (Pat.var("x"),)), lambda x: x)]   # gradients are not a kernel's business
