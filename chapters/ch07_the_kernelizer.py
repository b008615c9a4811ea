# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # Chapter 7. The kernelizer
#
# Chapter 6 lowered one tensor expression to one loop nest. A real program is a graph of many operations,
# and it is not one loop nest: softmax needs each row's max before it can subtract it, and attention
# needs a whole row of scores before it can normalise. The **kernelizer** cuts the graph into kernels. At
# every cut, the producer writes its value to a buffer and the consumers read it back; between cuts,
# everything fuses into one loop nest and no intermediate touches memory.
#
# uopc cuts at **materialization points**: the roots (the values asked for), every STAGE (a value the
# program or a rule asked to store), and every REDUCE (unless `fuse_reduce` is set). That is
# `_materialize_points` in `uopc/kernelize.py`, ten lines. The interesting part is STAGE: a rule,
# `stage_broadcast_compute` (section 7.10), stages a computed value that a broadcast would otherwise make
# every consumer recompute. Chapter 11 is about the other side of that trade.
#
# What you'll build: materialization points and a mini kernelizer over uopc's tensor graph, with a NumPy
# interpreter to run its plans; then uopc's `make_plan`, `Plan.explain()`, STAGE and
# `stage_broadcast_compute`, measured on the case it exists for: a LayerNorm feeding a matmul. Numbers
# below were measured on:

# %% tags=["nbval-ignore-output"]
import datetime
import os
import platform
import re
import subprocess

cpu = re.search(r"^model name\s*:\s*(.*)$", open("/proc/cpuinfo").read(), re.M)
print(f"CPU:      {cpu.group(1) if cpu else platform.machine()}, {os.cpu_count()} cores")
print(f"compiler: {subprocess.run(['cc', '--version'], capture_output=True, text=True).stdout.splitlines()[0]}")
print(f"date:     {datetime.date.today()}")

# %% [markdown]
# ## 7.1 Fusion is a trade
#
# Each cut has a price and a benefit. The price is memory traffic: the producer writes its result and the
# consumer reads it back, twice its size in bytes, plus a kernel launch. The benefit is that the value is
# computed once. Fusing across a cut removes the traffic, but if the consumer reads each producer value
# more than once (through a broadcast), the fused consumer recomputes it every time:
#
# $$\text{fuse if}\quad \frac{\text{bytes saved}}{\text{bandwidth}} > \frac{\text{FLOPs recomputed}}{\text{FLOP rate}}$$
#
# A REDUCE consumed through a broadcast (`x - x.max(-1, keepdim=True)`) is the common case: cutting there
# costs a small buffer (one value per row); not cutting makes every element of the row recompute the max,
# unless the reduce lowering hoists it (Chapter 6). uopc's default is to cut at every REDUCE.
#
# ## 7.2 Materialization points
#
# We work on uopc's tensor graph: UOps (Chapter 3) built by `Tensor` (Chapter 9 builds it; here it only
# writes graphs for us). Softmax over rows:

# %%
import math
import numpy as np
from uopc.dtype import np_dtype
from uopc.helpers import prod
from uopc.tensor import Tensor
from uopc.uop import Ops, ParamArg, UOp

rng = np.random.default_rng(0)
x_np = rng.standard_normal((4, 6)).astype(np.float32)
x = Tensor(x_np)
sm = x.softmax(-1)


def show(u: UOp, names: dict) -> str:
  """A tensor expression as one line: buffers by name, movement ops as methods."""
  if u in names: return names[u]
  if u.op is Ops.CONST: return repr(u.arg)
  s = [show(src, names) for src in u.src]
  if u.op is Ops.REDUCE: return f"{u.arg[0].name.lower()}({s[0]}, last {u.arg[1]})"
  if u.op in (Ops.RESHAPE, Ops.EXPAND): return f"{s[0]}.{u.op.name.lower()}{u.arg}"
  if u.op is Ops.PERMUTE: return f"{s[0]}.permute{u.arg}"
  if u.op is Ops.STAGE: return f"stage({s[0]})"
  return f"{u.op.name.lower()}({', '.join(s)})"


x_buf = x.uop.src[0]                  # Tensor(x) is a RESHAPE (4, 6) of a flat BUFFER
print(show(sm.uop, {x_buf: "x"}))

# %% [markdown]
# Subtraction is `add(a, mul(b, -1))`, division is a multiplication by `recip`, and `exp(x)` is
# `exp2(x * log2 e)` (one exponential for the renderer to know). The points, in topological order
# (sources before users), so that each kernel runs after the kernels it reads:

# %%
def is_buffer(u: UOp) -> bool:
  while u.op is Ops.RESHAPE: u = u.src[0]
  return u.op is Ops.BUFFER


def points(roots: list[UOp], fuse_reduce: bool) -> list[UOp]:
  """Where the graph is cut: STAGEs, REDUCEs (unless fuse_reduce), and computed roots."""
  out = []
  for u in UOp(Ops.SINK, tuple(roots)).toposort():
    if u.op is Ops.SINK: continue
    if u.op is Ops.STAGE or (u.op is Ops.REDUCE and not fuse_reduce) or (u in roots and not is_buffer(u)):
      out.append(u)
  return out


for fuse in (False, True):
  print(f"fuse_reduce={fuse}:", [f"{p.op.name} {p.shape}" for p in points([sm.uop], fuse)])

# %% [markdown]
# The same graph drawn by `uopc.viz`, sources above their users: a box per node (its op, dtype and shape, and its
# arg), an arrow per source (into its user left to right, in the order of the sources), the colour its kind. The
# three points of the unfused cut are outlined: each is where a kernel stops and writes its value, and everything
# above a point, up to the points before it, is what that kernel computes.

# %%
import uopc.viz as viz

cut = points([sm.uop], False)
viz.show(sm, marks={p: "point" for p in cut}, notes={p: f"point {n}: kernel {n}" for n, p in enumerate(cut)})

# %% [markdown]
# ## 7.3 A mini kernelizer
#
# Each point becomes a kernel. Its body is the point's expression with every *other* point replaced by a
# read of that point's buffer, so the cut stops there: the kernel for the row sum reads the row max, it
# does not recompute it. Points that are not roots get a temporary buffer `t0, t1, ...`; roots get an
# output.

# %%
def substitute(u: UOp, mapping: dict) -> UOp:
  if u in mapping: return mapping[u]
  return u.replace(src=tuple(substitute(s, mapping) for s in u.src)) if u.src else u


def kernelize(roots: list[UOp], fuse_reduce: bool):
  """A plan: (name, body) per kernel, in order, and the buffer standing for each point."""
  pts = points(roots, fuse_reduce)
  names, home = {}, {}
  for p in pts:
    n = len(home)
    # a BUFFER UOp stands for the point's memory, viewed in the point's shape
    b = UOp(Ops.BUFFER, (), ParamArg(100 + n, p.dtype, (prod(p.shape),)))
    home[p] = UOp(Ops.RESHAPE, (b,), p.shape) if len(p.shape) != 1 else b
    names[home[p]] = f"out{roots.index(p)}" if p in roots else f"t{n}"
  kernels = []
  for p in pts:
    body = p.src[0] if p.op is Ops.STAGE else p
    body = substitute(body, {q: home[q] for q in pts if q is not p})
    kernels.append((names[home[p]], body))
  return kernels, home, names


for fuse in (False, True):
  kernels, home, names = kernelize([sm.uop], fuse)
  print(f"fuse_reduce={fuse}:")
  for name, body in kernels: print(f"  {name} = {show(body, {x_buf: 'x', **names})}")

# %% [markdown]
# Unfused: three kernels, two small temporaries (a max and a sum per row), and the exponential computed
# in two kernels (the sum and the output) instead of being stored: nothing N x N is written except the
# output. With `fuse_reduce`, one kernel does it all, and Chapter 6's reduce lowering places the max and
# the sum accumulators once per row.
#
# ## 7.4 Running a plan
#
# To check the plans we need something that runs a kernel body. A NumPy interpreter of the tensor graph is
# twenty lines, one per op (uopc's real kernels come in 7.6):

# %%
NP_ALU = {Ops.ADD: np.add, Ops.MUL: np.multiply, Ops.MAX: np.maximum, Ops.EXP2: np.exp2, Ops.LOG2: np.log2,
          Ops.SQRT: np.sqrt, Ops.RECIP: np.reciprocal, Ops.CMPLT: np.less, Ops.CMPNE: np.not_equal,
          Ops.WHERE: np.where}
NP_REDUCE = {Ops.ADD: np.sum, Ops.MAX: np.max}


def evaluate(u: UOp, memory: dict) -> np.ndarray:
  """The value of a kernel body, with buffers looked up in memory (UOp -> flat array)."""
  if u.op is Ops.BUFFER: return memory[u]
  if u.op is Ops.CONST: return np.array(u.arg, np_dtype(u.dtype))
  s = [evaluate(src, memory) for src in u.src]
  if u.op in NP_ALU: return NP_ALU[u.op](*s).astype(np_dtype(u.dtype))
  if u.op is Ops.RESHAPE: return s[0].reshape(u.arg)
  if u.op is Ops.EXPAND: return np.broadcast_to(s[0], u.arg)
  if u.op is Ops.PERMUTE: return s[0].transpose(u.arg)
  if u.op is Ops.REDUCE: return NP_REDUCE[u.arg[0]](s[0], axis=tuple(range(-u.arg[1], 0)))
  if u.op is Ops.STAGE: return s[0]
  raise NotImplementedError(u.op)


def run_plan(roots: list[UOp], fuse_reduce: bool) -> list[np.ndarray]:
  kernels, home, names = kernelize(roots, fuse_reduce)
  memory = {u: u.arg.array for u in UOp(Ops.SINK, tuple(roots)).toposort() if u.op is Ops.BUFFER}
  by_name = {n: b for b, n in names.items()}
  for name, body in kernels:   # in order: every buffer a kernel reads was written before it
    b = by_name[name]
    memory[b.src[0] if b.op is Ops.RESHAPE else b] = np.ascontiguousarray(evaluate(body, memory)).reshape(-1)
  return [evaluate(home[r], memory) for r in roots]


e = np.exp(x_np - x_np.max(-1, keepdims=True))
for fuse in (False, True):
  (out,) = run_plan([sm.uop], fuse)
  print(f"fuse_reduce={fuse}: matches NumPy softmax:", np.allclose(out, e / e.sum(-1, keepdims=True)))

# %% [markdown]
# ## 7.5 uopc: `_materialize_points` and `make_plan`
#
# uopc's version is the book's listing, the same rule as `points`:
#
# ```python
# def _materialize_points(roots: list[UOp], fuse_reduce: bool) -> list[UOp]:
#   topo = UOp(Ops.SINK, tuple(roots)).toposort()
#   m = []
#   for u in topo:
#     if u.op is Ops.SINK: continue
#     if u.op is Ops.STAGE or (u.op is Ops.REDUCE and not fuse_reduce) or (u in roots and not is_contiguous_buffer(u)):
#       m.append(u)
#   return m
# ```
#
# `make_plan(roots, fuse_reduce, opt)` runs, in order: strip DETACH (gradients are not a kernel's
# business), `stage_broadcast_compute` (unless `fuse_reduce`), the optimizer's layout pass (Chapter 10),
# `_materialize_points`, and one kernel per point: the body with the other points replaced by reads of
# their buffers, lowered by Chapter 6's rangeify, rendered to C by Chapter 5 and compiled by Chapter 2.
# The result is a `Plan`: the kernels, the temporaries (dtype and size), and where each root's value
# lives. Kernel names say whether the kernel reduces (`r_`) or not (`e_`), then its output shape.

# %%
from uopc.kernelize import _materialize_points, make_plan, normalize
from uopc.opt import DefaultOpt

roots, _ = normalize([sm.uop])     # the data replaced by numbered inputs: graphs of one shape are one graph
for fuse in (False, True):
  assert [p.op for p in _materialize_points(roots, fuse)] == [p.op for p in points([sm.uop], fuse)]
  plan = make_plan([sm.uop], fuse, DefaultOpt)
  print(f"fuse_reduce={fuse}: kernels {[k.name for k in plan.kernels]}, temps {[n for _, n in plan.temps]}")
  for k in plan.kernels: print(f"  {k.name:8s} reads/writes {k.args}")
  Tensor.fuse_reduce = fuse
  print("  matches NumPy:", np.allclose(Tensor(x_np).softmax(-1).numpy(), e / e.sum(-1, keepdims=True)))
Tensor.fuse_reduce = False

# %% [markdown]
# `args` lists each kernel's parameters in order (`data0, data1, ...` in its C): inputs, temporaries and
# outputs by number. Here is the fused softmax kernel: one row loop, the max and sum accumulators at the
# top of it, and the exponential computed in the sum loop and again in the output loop (the recompute that
# fusion costs here; the unfused plan computes it in two kernels for the same reason).

# %%
print(make_plan([sm.uop], True, DefaultOpt).kernels[0].src)

# %% [markdown]
# What does each choice cost at a size where it matters? Count memory (temporaries, written once and read
# back) and arithmetic (the float operations each kernel's loop program executes, `Kernel.flops`, counted
# by the renderer of Chapter 5):

# %%
big = Tensor(rng.standard_normal((1024, 1024)).astype(np.float32))
for fuse in (False, True):
  plan = make_plan([big.softmax(-1).uop], fuse, DefaultOpt)
  temp_bytes = sum(n * d.itemsize for d, n in plan.temps)
  print(f"fuse_reduce={fuse}: {len(plan.kernels)} kernels, temporaries {temp_bytes} bytes, "
        f"{sum(k.flops for k in plan.kernels) / 1e6:.2f} MFLOP")

# %% [markdown]
# The arithmetic is the same: the max once per element, the exponential twice (in the sum and in the
# output). The unfused count is higher only because its kernels write the row's `max * -1` and
# `1 / sum` inline in the inner loop (the C compiler hoists them; the counter counts an op where it is
# written), while the fused kernel names `max * -1` once per row (`alu5` above) because it is used twice.
# The unfused plan writes and reads 8 KB of temporaries and launches two more kernels; both are small next
# to reading the 4 MB input, which the unfused plan does three times (max, sum, output) and the fused one
# once per row from memory and twice more from cache. Timed (best of 20):

# %% tags=["nbval-ignore-output"]
from uopc.helpers import best_of

for fuse in (False, True):
  Tensor.fuse_reduce = fuse
  print(f"fuse_reduce={fuse}: {best_of(lambda: big.softmax(-1).numpy(), 20) * 1e3:6.2f} ms")
Tensor.fuse_reduce = False

# %% [markdown]
# The traffic argument does not settle which one is faster; the two lines above do, on this machine. The fused
# kernel saves reads of a 4 MB input that mostly comes from the cache anyway, and pays for it in its loops: its
# max and sum passes are nested inside the row loop, one row at a time, where each unfused kernel sweeps its pass
# over the whole contiguous array, a loop the C compiler vectorizes and the hardware prefetches well. When the
# fused time is not the smaller one, that is the reason, and it is the theme of chapter 11: fusion removes
# traffic, and is only worth it when what it costs in the loops is less.

# %% [markdown]
# ## 7.6 Where values live
#
# A root that is already data needs no kernel: its output is the input array itself (`("in", 0)` in
# `Plan.outs`). A root listed twice is computed once and both outputs are the same array. A computed root
# gets a fresh array on every run (the caller keeps it); temporaries belong to the plan (Chapter 8).

# %%
v = Tensor(np.arange(8, dtype=np.float32))
print(make_plan([v.reshape(2, 4).uop]).kernels, make_plan([v.reshape(2, 4).uop]).outs)
y = (v * 2).uop
plan = make_plan([y, y])
print([k.name for k in plan.kernels], plan.outs)

# %% [markdown]
# ## 7.7 STAGE, asked for
#
# `Tensor.contiguous()` wraps a value in a STAGE: store this, even though nothing forces it. The plan then
# has a kernel for it and a temporary, and `explain()` says why.

# %%
staged = ((v * 2).contiguous() + 1).uop
plan = make_plan([staged], False, DefaultOpt)
print(plan.explain())

# %% [markdown]
# ## 7.8 explain(): the rule behind every cut
#
# `Plan.explain()` prints one line per kernel with the rule that made its point (root, REDUCE, STAGE by
# the broadcast rule with its factor and recompute work, STAGE by the layout pass with the stride it
# fixed), and for each REDUCE fused into a kernel, how many times the loop program evaluates each of its
# values (1: no recompute). The counts are read off the loop program: the trips of the loops around each
# accumulator's declaration.
#
# ## 7.9 Attention, unfused and fused
#
# The book's attention at N = 1024, D = 64, with the default optimizer, and with `fuse_reduce=True` and
# the book's `FlashOpt` (section 11.4):

# %%
import inspect
from uopc.book import load_example

book = load_example("flash_attention")   # examples/flash_attention.py, the file the book quotes
FlashOpt, attention = book.FlashOpt, book.attention
print(inspect.getsource(FlashOpt))

N, D = 1024, 64
q, k, v = (Tensor(rng.standard_normal((N, D)).astype(np.float32)) for _ in range(3))
unfused = make_plan([attention(q, k, v).uop], False, DefaultOpt)
fused = make_plan([attention(q, k, v).uop], True, FlashOpt)
print(unfused.explain())
print()
print(fused.explain())

# %% [markdown]
# Unfused: the scores S = Q K^T (a REDUCE), the row max and the row sum (REDUCEs), P (staged by the
# broadcast rule: P is expanded 64 times into P V, and recomputing it would cost 7 ALU ops per element),
# the transposed copy of V (the layout pass), and the output. Fused: only the copy of V and the output;
# inside the output kernel the dot products `add[1024, 1024]` are evaluated 6 times each (section 11.4
# explains why), and the row max and row sum once. Every temporary:

# %%
for name, plan in (("unfused", unfused), ("fused", fused)):
  print(f"{name:8s} temps {[n for _, n in plan.temps]}  ({sum(n * d.itemsize for d, n in plan.temps) / 1e6:.1f} MB)")

# %% [markdown]
# Both plans drawn (`uopc.viz.plan.plan_svg`; in Jupyter a `Plan` also draws itself): each kernel a box with its
# float operations, each buffer between kernels a box of its own, temporaries dashed, an arrow from every buffer a
# kernel reads (in the order of its parameters) and to the buffer it writes. The unfused cut is a chain of six
# kernels through five temporaries, two of them N x N; the fused one keeps only V's copy and pays in arithmetic.

# %%
from uopc.viz.plan import plan_svg

viz.side_by_side(plan_svg(unfused), plan_svg(fused), captions=["unfused", "fused (fuse_reduce, FlashOpt)"])

# %% [markdown]
# ## 7.10 stage_broadcast_compute
#
# A computed tensor that is EXPANDed (broadcast) into a bigger consumer is recomputed for every copy if
# it is fused. The canonical case is a LayerNorm feeding a matmul: `layernorm(x) @ W` broadcasts the
# normalized `(T, C)` tensor to `(T, 4C, C)`, one copy per output column, so a fused matmul would
# normalize every element 4C times. The rule, in the book's words and code:
#
# ```python
# def stage_broadcast_compute(roots: list[UOp], factor: int = 4) -> list[UOp]:
#   """Fusing is only free if nothing gets recomputed. A computed tensor that is EXPANDed by
#   `factor` or more (e.g. a LayerNorm output feeding a matmul) would be recomputed for every
#   copy, so we materialize it first. This is the fusion/recompute trade-off, as one rule."""
#   from uopc.uop import MOVEMENT, ALU
#   todo: set[UOp] = set()
#   for u in UOp(Ops.SINK, tuple(roots)).toposort():
#     if u.op is not Ops.EXPAND or prod(u.shape) < factor * prod(u.src[0].shape): continue
#     base = u.src[0]
#     while base.op in MOVEMENT: base = base.src[0]
#     if base.op in ALU and base.op is not Ops.CAST and base.shape and _fused_work(base) >= 4096: todo.add(base)
#   return UOp.wrap(roots, todo, lambda n: UOp(Ops.STAGE, (n,))) if todo else roots
# ```
#
# `_fused_work(u)` is the cost of recomputing `u` once: the ALU ops between `u` and the nearest
# materialized nodes (buffers, REDUCEs, STAGEs), times the number of elements. A value is staged if it is
# broadcast by a factor of 4 or more and recomputing it would cost at least 4096 op-elements. Small or
# cheap values stay fused: reading them back would cost more than computing them.

# %%
from uopc.kernelize import _fused_work, stage_broadcast_compute


def layernorm(x: Tensor, eps: float = 1e-5) -> Tensor:
  xc = x - x.mean(-1, keepdim=True)
  return xc * (xc.square().mean(-1, keepdim=True) + eps).sqrt().recip()


T, C = 256, 256
x_ln = rng.standard_normal((T, C)).astype(np.float32)
w_ln = (rng.standard_normal((C, 4 * C)) / math.sqrt(C)).astype(np.float32)
ln = layernorm(Tensor(x_ln))
print("layernorm(x):", show(ln.uop, {ln.uop.toposort()[0]: "x"}))
print("_fused_work(layernorm(x)) =", _fused_work(normalize([ln.uop])[0][0]), f"= 8 ops x {T * C} elements")
(root,) = stage_broadcast_compute(normalize([(ln @ Tensor(w_ln)).uop])[0])
print("staged:", [(u.shape, u.src[0].op.name) for u in root.toposort() if u.op is Ops.STAGE])

# %% [markdown]
# The eight ops are the subtraction (`add` and `mul` by -1), the scaling of the two sums into means (two
# `mul`s), `+ eps`, `sqrt`, `recip` and the final `mul`; the two means are REDUCEs, where the count stops.
# Small broadcasts are left alone:

# %%
small = Tensor(rng.standard_normal((4, 4)).astype(np.float32))
r = normalize([((small * 2) @ Tensor(rng.standard_normal((4, 16)).astype(np.float32))).uop])[0]
doubled = next(u for u in r[0].toposort() if u.op is Ops.MUL and u.shape == (4, 4))
print(f"(4, 4) * 2 broadcast x16 into a matmul: work {_fused_work(doubled)}, staged: {stage_broadcast_compute(r) != r}")

# %% [markdown]
# ## 7.11 LayerNorm into a matmul, with and without staging
#
# `y = layernorm(x) @ W` with x of shape (T, C) = (256, 256) and W of shape (C, 4C) = (256, 1024): the
# first matmul of a transformer's MLP block, at a small size. Three plans: the default (staging on); the
# same with `stage_broadcast_compute` replaced by the identity (everything else unchanged, so the matmul
# kernel normalizes `x` itself); and `fuse_reduce=True`, which also skips staging (section 11.4) and in
# addition fuses the two means into the matmul kernel. Plans are cached per graph shape, so the
# unstaged plan is made with a fresh cache.

# %%
import contextlib
import uopc.kernelize


@contextlib.contextmanager
def no_staging():
  """make_plan without stage_broadcast_compute (and with a plan cache of its own)."""
  saved = uopc.kernelize.stage_broadcast_compute
  uopc.kernelize.stage_broadcast_compute = lambda roots, factor=4: roots
  try:
    with uopc.kernelize.isolated_plan_cache(): yield
  finally: uopc.kernelize.stage_broadcast_compute = saved


def mlp_in() -> Tensor:
  return layernorm(Tensor(x_ln)) @ Tensor(w_ln)


def describe(label: str, plan) -> None:
  print(f"{label}: {len(plan.kernels)} kernels, temps {[n for _, n in plan.temps]}, "
        f"{sum(k.flops for k in plan.kernels) / 1e6:.1f} MFLOP")
  for k in plan.kernels: print(f"  {k.name:14s} {k.flops / 1e6:8.1f} MFLOP")
  print("  " + plan.explain().replace("\n", "\n  "))


plans = {"staged": make_plan([mlp_in().uop], False, DefaultOpt)}
with no_staging(): plans["unstaged"] = make_plan([mlp_in().uop], False, DefaultOpt)
plans["fuse_reduce"] = make_plan([mlp_in().uop], True, DefaultOpt)
for label, plan in plans.items(): describe(label, plan)

# %% [markdown]
# The matmul itself is `2 * T * C * 4C` = 134.2 MFLOP. Staged, the LayerNorm output (`e_256_256`, 65,536
# floats) is computed once, for 0.5 MFLOP, and the matmul kernel only multiplies and adds. Unstaged, the
# matmul kernel recomputes the normalization in its inner loop and its FLOP count doubles, to 268.4
# MFLOP. Not 4C = 1024 recomputations per element: the default optimizer's 4 x 4 register tile shares
# each normalized value among 4 output columns, so each is computed 1024 / 4 = 256 times, at 8 ops as
# written (the per-row mean and scale are loop-invariant and the C compiler hoists them, but the counter
# counts ops where they are written). With `fuse_reduce`, the means are computed once per row inside the
# same kernel (`x1` in explain), and the normalization is again recomputed in the matmul's inner loop, though
# for fewer FLOPs than unstaged (the kernels' counts printed above): the row's mean and variance are now
# accumulators of the same kernel, scaled once per row before the matmul's loops, so fewer of the normalization's
# ops are written inside them. All three compute the same thing:

# %%
xc = x_ln - x_ln.mean(-1, keepdims=True)
ref = xc / np.sqrt((xc ** 2).mean(-1, keepdims=True) + 1e-5) @ w_ln
outs = {"staged": mlp_in().numpy()}
with no_staging(): outs["unstaged"] = mlp_in().numpy()
Tensor.fuse_reduce = True
outs["fuse_reduce"] = mlp_in().numpy()
Tensor.fuse_reduce = False
for label, out in outs.items(): print(f"{label:12s} matches NumPy: {np.allclose(out, ref, rtol=1e-4, atol=1e-4)}")

# %% [markdown]
# and here is what they cost on this machine: best of 50 after a warm-up, graph building included, with
# **one OpenMP thread**. This machine has 2 cores shared with other work; a parallel kernel waits at its
# end for its slowest thread, and a thread that lost its core to another process costs a whole scheduler
# time slice (milliseconds), far more than the kernels themselves. One thread measures the work.

# %%
import ctypes
import ctypes.util

gomp = ctypes.CDLL(ctypes.util.find_library("gomp"))   # the OpenMP runtime the kernels already use


@contextlib.contextmanager
def threads(n: int):
  gomp.omp_set_num_threads(n)
  try: yield
  finally: gomp.omp_set_num_threads(os.cpu_count())


# %% tags=["nbval-ignore-output"]
def time_plan(label: str) -> float:
  if label == "unstaged":
    with no_staging(): return best_of(lambda: mlp_in().numpy(), 50)
  Tensor.fuse_reduce = label == "fuse_reduce"
  try: return best_of(lambda: mlp_in().numpy(), 50)
  finally: Tensor.fuse_reduce = False


with threads(1): times = {label: time_plan(label) for label in plans}
for label, t in times.items():
  print(f"{label:12s} {t * 1e3:7.2f} ms   {times[label] / times['staged']:5.2f}x the staged plan")

# %% [markdown]
# How does the gap depend on the width? The matmul grows like C^2 and so does the recompute, so the
# ratio mostly reflects how expensive the recomputed ops are next to a multiply-add. Sweep C with T = 256:

# %% tags=["nbval-ignore-output"]
import matplotlib.pyplot as plt

widths, sweep = [64, 128, 256, 384, 512], {"staged": [], "unstaged": []}
for c in widths:
  x_ln = rng.standard_normal((T, c)).astype(np.float32)
  w_ln = (rng.standard_normal((c, 4 * c)) / math.sqrt(c)).astype(np.float32)
  with threads(1):
    sweep["staged"].append(best_of(lambda: mlp_in().numpy(), 30))
    with no_staging(): sweep["unstaged"].append(best_of(lambda: mlp_in().numpy(), 30))
  t_s, t_u = sweep["staged"][-1], sweep["unstaged"][-1]
  print(f"C={c:4d}  staged {t_s * 1e3:7.2f} ms  unstaged {t_u * 1e3:7.2f} ms  {t_u / t_s:.2f}x")

fig, ax = plt.subplots(figsize=(5, 3.5))
for label, ts in sweep.items(): ax.plot(widths, [t * 1e3 for t in ts], "o-", label=label)
ax.set_xlabel("width C (x is 256 x C, W is C x 4C)")
ax.set_ylabel("time per call, one thread (ms)")
ax.set_title("layernorm(x) @ W, with and without staging", fontsize=10)
ax.legend()
plt.show()

# %% [markdown]
# The book's NOTES 15 recorded the full-size version of this: in a GPT training step, a LayerNorm output
# feeding a matmul was recomputed for every output column, and the step spent 374 ms in kernels until
# `stage_broadcast_compute` started staging such tensors (125 ms, 3x). The measurement above is a much
# smaller stand-in for that step (one LayerNorm and one matmul, forward only, at T = 256, C = 256). What
# this machine measures for it: the FLOP count doubles without staging (exact, from the loop programs), and
# the time ratio is the one printed two cells above, with the sweep beside it. Those times are noisy on a
# shared 2-core machine; rerun the cells and compare the ratios, not single numbers. Expect a smaller
# factor than NOTES 15's 3x at this size: the register tile already divides the recompute by 4, and the
# recomputed ops vectorize as well as the multiply-adds do, while a training step has many such matmuls,
# forward and backward, at every layer.
#
# ## Pitfalls
#
# - **Cost-model rules interact.** With `fuse_reduce=True` the kernelizer is asked never to write the big
#   intermediate, and the broadcast rule is asked never to recompute an expensive broadcast. In attention
#   they disagree about P; the first version of uopc let the broadcast rule win silently, so "fused"
#   attention still wrote an N x N buffer (section 11.4). Now `fuse_reduce` skips the rule. Believe the plan
#   (`make_plan(...).temps`, `explain()`) over a benchmark's description of itself.
# - **Plans are cached per graph shape.** Changing a rule (as `no_staging` does) without a fresh cache
#   gives you the old plan, silently. The cache key is the normalized graph, `fuse_reduce` and the
#   optimizer object, nothing else.
# - **A broadcast can hide in a matmul.** `a @ b` is an EXPAND of both operands and a REDUCE; whatever
#   computes `a` is broadcast by `b`'s column count. Read `explain()` to see which side was staged.
# - **Counting FLOPs is not counting time.** Recomputed elementwise ops vectorize well and hide behind
#   memory traffic; a doubling of FLOPs can cost far less than double the time, or more if it spills
#   registers. Measure.
#
# ## Exercises
#
# 1. Extend `evaluate` with SHRINK and PAD, and check `run_plan` on `Tensor.cat([x, x * 2], 1).sum(1)`.
# 2. Give the mini kernelizer a `stage_broadcast_compute` of its own (factor 4, work 4096, using a
#    `_fused_work` you write) and show that it stages P in attention.
# 3. Change `factor` (2, 4, 16) and the work threshold (256, 4096, 65536) of `stage_broadcast_compute`
#    for the LayerNorm plan. At which values does the plan change, and what does `explain()` say?
# 4. Predict the FLOP count of the unstaged matmul kernel as a formula in T and C, from the number of ALU
#    ops in the normalization and the 4 x 4 register tile, and check it against `Kernel.flops` at C = 128.
# 5. Time the three LayerNorm plans at T = 1024. Does the ranking change? Why might `fuse_reduce` lose by
#    more at larger T?
# 6. Write the rule the other way round: a *fusion* pass that removes a STAGE when its value is read by
#    exactly one consumer without a broadcast. Which STAGEs in unfused attention would it remove?
