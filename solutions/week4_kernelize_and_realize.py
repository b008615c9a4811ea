# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # Week 4 assignment: the kernelizer, and realize
#
# The exercises of Chapter 7 (the kernelizer) and Chapter 8 (realize: plans, temporaries, DEBUG lines, FLOP
# counts). Each exercise has
# - a **task cell** (it starts with `# TASK: <name>`): in the student version the solution is replaced by
#   `raise NotImplementedError("<name>")`. Replace that line with your code; keep the function names and
#   signatures, the grader calls them;
# - a **worked example** before it, solved, on a neighbouring problem;
# - **visible checks** right after it (`check(...)` from `uopc.checks`): each prints `ok: <what>`, or stops
#   with an AssertionError naming what is wrong, expected against got; `make check WEEK=<n>` runs them task by task;
# - **hidden tests** the grader runs after your whole notebook (`make grade NB=<your notebook>`), which score the
#   points below. A *structure* point counts only once the task's values are right.
#
# | exercise | task name | points |
# |---|---|---|
# | 7.1 | shrink and pad | 2 |
# | 7.4 | matmul FLOPs | 2 |
# | 8.1 | reused temporaries | 3 (values 2, structure 1) |
# | 8.2 | DEBUG lines | 2 |
#
# The whole notebook runs in well under a minute on two cores.

# %% [markdown]
# ## Setup
#
# Chapter 7's mini kernelizer: `points` (where the graph is cut), `kernelize` (one body per point, the other
# points replaced by reads of their buffers) and `run_plan` (a NumPy interpreter of each body, in order). `evaluate`
# knows the ops of Chapter 7; Exercise 7.1 adds two movement ops through `movement`.

# %%
import math
import numpy as np
from uopc.dtype import np_dtype
from uopc.helpers import prod
from uopc.kernelize import make_plan, normalize
from uopc.opt import DefaultOpt
from uopc.tensor import Tensor
from uopc.uop import Ops, ParamArg, UOp
from uopc.checks import check


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


def substitute(u: UOp, mapping: dict) -> UOp:
  if u in mapping: return mapping[u]
  return u.replace(src=tuple(substitute(s, mapping) for s in u.src)) if u.src else u


def kernelize(roots: list[UOp], fuse_reduce: bool):
  """A plan: (name, body) per kernel, in order, and the buffer standing for each point."""
  pts = points(roots, fuse_reduce)
  names, home = {}, {}
  for p in pts:
    n = len(home)
    b = UOp(Ops.BUFFER, (), ParamArg(100 + n, p.dtype, (prod(p.shape),)))
    home[p] = UOp(Ops.RESHAPE, (b,), p.shape) if len(p.shape) != 1 else b
    names[home[p]] = f"out{roots.index(p)}" if p in roots else f"t{n}"
  kernels = []
  for p in pts:
    body = p.src[0] if p.op is Ops.STAGE else p
    body = substitute(body, {q: home[q] for q in pts if q is not p})
    kernels.append((names[home[p]], body))
  return kernels, home, names


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
  if u.op in (Ops.SHRINK, Ops.PAD): return movement(u, s[0])   # Exercise 7.1
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


def attention(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
  return (q @ k.T * (1 / math.sqrt(q.shape[-1]))).softmax(-1) @ v


def reference(q, k, v) -> np.ndarray:
  q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
  s = q @ k.T / math.sqrt(q.shape[-1])
  p = np.exp(s - s.max(-1, keepdims=True))
  return p / p.sum(-1, keepdims=True) @ v


rng = np.random.default_rng(0)
x_np = rng.standard_normal((4, 6)).astype(np.float32)
(out,) = run_plan([Tensor(x_np).softmax(-1).uop], False)
print("mini kernelizer, softmax matches NumPy:", np.allclose(out, np.exp(x_np) / np.exp(x_np).sum(-1, keepdims=True)))

# %% tags=["hidden-setup"]
# the grader's side of the hidden tests (scripts/grader/solution_setup.py): record, raised and seeded for the probes;
# recorded, gradelib's checks and time_kernels for the judges. Grading splits each hidden test at `# JUDGE`: the probe
# runs in the sandbox after the student's cells, the judge in the grader's own process on the values it recorded.
import sys as _sys
from pathlib import Path as _Path
import uopc as _uopc
_sys.path.insert(0, str(_Path(_uopc.__file__).resolve().parents[1] / "scripts" / "grader"))
from solution_setup import gradelib, raised, record, recorded, seeded, time_kernels  # noqa: F401


# %% [markdown]
# ## Exercise 7.1: shrink and pad
#
# **Worked example.** The movement ops Chapter 7 knows, on NumPy arrays: RESHAPE's arg is the new shape, EXPAND's
# the broadcast shape, PERMUTE's the axis order.

# %%
x = Tensor(np.arange(6, dtype=np.float32).reshape(2, 3))
for t in (x.reshape(3, 2), x.permute(1, 0), x.reshape(2, 3, 1).expand(2, 3, 2)):
  print(t.uop.op.name, t.uop.arg, "->", evaluate(t.uop, {x.uop.src[0]: x.uop.src[0].arg.array}).tolist())

# %% [markdown]
# **Your task.** `movement(u, x)`: the value of a SHRINK or a PAD node `u`, given the value `x` of its source.
# SHRINK's arg is one `(begin, end)` per axis (keep `begin <= i < end`); PAD's is one `(before, after)` per axis
# (that many zeros added before and after). `Tensor.cat` is built from them: each piece padded to the full
# length, then added.

# %%
# TASK: shrink and pad
def movement(u: UOp, x: np.ndarray) -> np.ndarray:
  """The value of u (a SHRINK or a PAD) from the value x of its source."""
  ### BEGIN SOLUTION
  if u.op is Ops.SHRINK: return x[tuple(slice(b, e) for b, e in u.arg)]
  if u.op is Ops.PAD: return np.pad(x, u.arg)
  raise NotImplementedError(u.op)
  ### END SOLUTION


# %%
x_np = np.arange(12, dtype=np.float32).reshape(3, 4)
x = Tensor(x_np)
(got,) = run_plan([Tensor.cat([x, x * 2], 1).sum(1).uop], False)
print("cat([x, x * 2], 1).sum(1):", got)
check("run_plan(cat([x, x * 2], 1).sum(1))", got, np.concatenate([x_np, x_np * 2], 1).sum(1), rtol=1e-6)
(got,) = run_plan([x[1:, 1:3].pad(((1, 0), (2, 1))).uop], False)
print(got)
check("run_plan(x[1:, 1:3].pad(((1, 0), (2, 1))))", got, np.pad(x_np[1:, 1:3], ((1, 0), (2, 1))))

# %% [markdown]
# Expected: `[18. 66. 114.]` and `ok`, then a 3 x 5 array: a row of zeros, then `[0 0 5 6 0]` and `[0 0 9 10 0]`.

# %% tags=["hidden-test"]
# POINTS: shrink and pad 2
### BEGIN HIDDEN TESTS
_x_np = seeded(4).standard_normal((5, 6)).astype(np.float32)
_x = Tensor(_x_np)
for _what, _t in (("cat([x, x * 2], 1).sum(1)", Tensor.cat([_x, _x * 2], 1).sum(1)), ("x[1:4, 2:]", _x[1:4, 2:] + 0),
                  ("x.pad(((1, 2), (0, 3)))", _x.pad(((1, 2), (0, 3))) + 0),
                  ("cat([x[:, :2], x], 1).max(1)", Tensor.cat([_x[:, :2], _x], 1).max(1))):
  (_got,) = run_plan([_t.uop], False)
  record(_what, _got)
# JUDGE
_x = seeded(4).standard_normal((5, 6)).astype(np.float32)
for _what, _want in (("cat([x, x * 2], 1).sum(1)", np.concatenate([_x, 2 * _x], 1).sum(1)), ("x[1:4, 2:]", _x[1:4, 2:]),
                     ("x.pad(((1, 2), (0, 3)))", np.pad(_x, ((1, 2), (0, 3)))),
                     ("cat([x[:, :2], x], 1).max(1)", np.concatenate([_x[:, :2], _x], 1).max(1))):
  gradelib.expect_close(recorded[_what], _want, f"run_plan({_what})", tol=1e-5)
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 7.4: matmul FLOPs
#
# **Worked example.** A plan's kernels each carry the FLOPs uopc counted in their loop program (`Kernel.flops`:
# every float ALU op once per trip of the loops it is written in). An elementwise `a * b + c` on n elements:

# %%
n = 1000
a, b, c = (Tensor(rng.standard_normal(n).astype(np.float32)) for _ in range(3))
plan = make_plan([(a * b + c).uop], False, DefaultOpt)
print([(k.name, k.flops) for k in plan.kernels], "predicted:", 2 * n)

# %% [markdown]
# **Your task.** Predict, as a formula, the FLOPs of the plan of an (n, k) @ (k, m) matmul (all its kernels
# together: there are two, a copy that transposes B and the product). A formula, not a count: this task is graded in a
# sandbox of its own in which uopc's lowering (`uopc.rangeify.lower` and the optimizers', which every plan needs)
# raises `ShortcutUnavailable`, so a `matmul_flops` that makes a plan (the checks' `plan_flops`, `make_plan`) scores 0.

# %%
# TASK: matmul FLOPs
def matmul_flops(n: int, m: int, k: int) -> int:
  """The FLOPs uopc counts for (n, k) @ (k, m), all kernels of the plan together."""
  ### BEGIN SOLUTION
  return 2 * n * m * k   # a multiply and an add per term of every dot product; the copy does no arithmetic
  ### END SOLUTION


# %%
def plan_flops(n: int, m: int, k: int) -> int:
  a, b = Tensor(np.ones((n, k), np.float32)), Tensor(np.ones((k, m), np.float32))
  return sum(kern.flops for kern in make_plan([(a @ b).uop], False, DefaultOpt).kernels)


for shape in ((64, 32, 16), (100, 7, 33)):
  check(f"matmul_flops{shape} against the FLOPs uopc's plan counts", matmul_flops(*shape), plan_flops(*shape))

# %% [markdown]
# Expected: `ok` for both shapes: your count is the plan's.

# %% tags=["hidden-test"]
# POINTS: matmul FLOPs 2
# SHORTCUTS alone: uopc.rangeify.lower, uopc.rangeify.rangeify, uopc.codegen.gemm_vec.lower_gemm
# SHORTCUTS alone: uopc.codegen.vector_loops.lower_vector, uopc.codegen.localtile.lower_local_tile
# SHORTCUTS alone: uopc.codegen.tc.lower_tc
### BEGIN HIDDEN TESTS
_shapes = [(64, 32, 16), (100, 7, 33), (5, 128, 9), (3, 5, 2), tuple(seeded(7).integers(1, 50, 3).tolist())]
for _shape in _shapes: record(f"{_shape}", matmul_flops(*_shape))
# JUDGE
# the FLOPs the grader's own plan of the matmul counts
from uopc.kernelize import make_plan as _make_plan
from uopc.opt import DefaultOpt as _DefaultOpt
from uopc.tensor import Tensor as _Tensor
_shapes = [(64, 32, 16), (100, 7, 33), (5, 128, 9), (3, 5, 2), tuple(seeded(7).integers(1, 50, 3).tolist())]
for _n, _m, _k in _shapes:
  _a, _b = _Tensor(np.ones((_n, _k), np.float32)), _Tensor(np.ones((_k, _m), np.float32))
  _counted = sum(_kern.flops for _kern in _make_plan([(_a @ _b).uop], False, _DefaultOpt).kernels)
  gradelib.expect_equal(recorded[f"{(_n, _m, _k)}"], _counted,
                        f"matmul_flops{(_n, _m, _k)} (the plan's kernels count {_counted})")
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 8.1: reused temporaries
#
# **Worked example.** Chapter 8's `run_plan` for uopc's plans: the graph is normalized (its data taken out as a list
# of inputs), the plan looked up, and the kernels run in order on inputs, temporaries and fresh outputs. Here the
# temporaries are fresh on every call, and fresh memory page-faults when it is first written.

# %%
def run_uopc_plan(plan, inputs: list[np.ndarray], temps: list[np.ndarray] | None = None) -> list[np.ndarray]:
  """Run plan's kernels in order on the inputs (flat arrays); temporaries are fresh unless given."""
  if temps is None: temps = [np.empty(n, np_dtype(d)) for d, n in plan.temps]
  outs = [inputs[o[1]] if o[0] == "in" else np.empty(o[1], np_dtype(o[0])) for o in plan.outs]
  arrays = {"in": inputs, "temp": temps, "out": outs}
  for kern in plan.kernels: kern.prg(*[arrays[kind][n] for kind, n in kern.args])
  return outs


qkv = [rng.standard_normal((128, 16)).astype(np.float32) for _ in range(3)]
roots, inputs = normalize([attention(*map(Tensor, qkv)).uop])
plan = make_plan(roots, False, DefaultOpt)
(out,) = run_uopc_plan(plan, inputs)
print([kern.name for kern in plan.kernels], "temporaries:", [n for _, n in plan.temps])
print("matches NumPy:", np.allclose(out.reshape(128, 16), reference(*qkv), rtol=1e-4, atol=1e-5))

# %% [markdown]
# **Your task.** `PlanRunner`: its `run(plan, inputs)` does what `run_uopc_plan` does, but allocates a plan's
# temporaries on the plan's first run only, keeps them in `self.temps` (a dict from `id(plan)` to its list of
# arrays: a Plan is not hashable, and make_plan keeps every plan alive) and reuses them on every later run of that
# plan. Outputs stay fresh on every run (a caller may keep them).

# %%
# TASK: reused temporaries
class PlanRunner:
  def __init__(self):
    self.temps: dict = {}   # id(plan) -> its temporaries, allocated on its first run

  def run(self, plan, inputs: list[np.ndarray]) -> list[np.ndarray]:
    ### BEGIN SOLUTION
    if id(plan) not in self.temps: self.temps[id(plan)] = [np.empty(n, np_dtype(d)) for d, n in plan.temps]
    return run_uopc_plan(plan, inputs, self.temps[id(plan)])
    ### END SOLUTION


# %%
runner = PlanRunner()
other = [rng.standard_normal((128, 16)).astype(np.float32) for _ in range(3)]
(out1,) = runner.run(plan, normalize([attention(*map(Tensor, qkv)).uop])[1])
kept = list(runner.temps[id(plan)])
(out2,) = runner.run(plan, normalize([attention(*map(Tensor, other)).uop])[1])
check("the first run's output", out1.reshape(128, 16), reference(*qkv), rtol=1e-4, atol=1e-5)
check("the second run's output (other inputs)", out2.reshape(128, 16), reference(*other), rtol=1e-4, atol=1e-5)
check("the second run kept the first run's temporaries (the same arrays)",
      [a is b for a, b in zip(runner.temps[id(plan)], kept)], [True] * len(kept))
check("the two runs' outputs share memory", np.shares_memory(out1, out2), False)
# a second plan, of another shape, on the same runner: its own temporaries (not the first plan's), of its own sizes
small = [np.random.default_rng(7).standard_normal((64, 8)).astype(np.float32) for _ in range(3)]
small_roots, small_inputs = normalize([attention(*map(Tensor, small)).uop])
small_plan = make_plan(small_roots, False, DefaultOpt)
(out3,) = runner.run(small_plan, small_inputs)
check("a second plan (N = 64, d = 8) on the same runner: its output", out3.reshape(64, 8), reference(*small),
      rtol=1e-4, atol=1e-5)
check("the second plan's temporaries: its own arrays, of its own sizes",
      [t.size for t in runner.temps.get(id(small_plan), [])], [n for _, n in small_plan.temps])

# %% [markdown]
# Expected: six `ok` lines.

# %% tags=["hidden-test"]
# POINTS: reused temporaries 2
### BEGIN HIDDEN TESTS
_runner = PlanRunner()
_outs = []
for _seed in (1, 2, 3):
  _qkv = [seeded(_seed, _j).standard_normal((64, 8)).astype(np.float32) for _j in range(3)]
  _roots, _inputs = normalize([attention(*map(Tensor, _qkv)).uop])
  _plan = make_plan(_roots, False, DefaultOpt)
  (_out,) = _runner.run(_plan, _inputs)
  _outs.append(_out)
  record(f"run {_seed}", _out.copy())
record("shares memory", bool(np.shares_memory(_outs[0], _outs[1])))
# JUDGE
for _seed in (1, 2, 3):
  _qkv = [seeded(_seed, _j).standard_normal((64, 8)).astype(np.float32) for _j in range(3)]
  _got = recorded[f"run {_seed}"]
  _got = _got.reshape(64, 8) if isinstance(_got, np.ndarray) and _got.size == 64 * 8 else _got
  gradelib.expect_close(_got, gradelib.attention_ref(*_qkv), f"PlanRunner.run, attention N=64, run {_seed}", 1e-4)
assert recorded["shares memory"] is False, "PlanRunner.run: two runs returned the same output array"
### END HIDDEN TESTS

# %% tags=["hidden-test"]
# POINTS: reused temporaries 1 structure
### BEGIN HIDDEN TESTS
# what the plan's kernels were handed, seen by the kernels themselves (each wrapped so that it notes where each
# temporary it receives lives, and keeps it alive, so that no later array can take its address): the runner's
# attributes prove nothing
import dataclasses as _dataclasses
_qkv = [seeded(_j).standard_normal((64, 8)).astype(np.float32) for _j in range(3)]
_roots, _inputs = normalize([attention(*map(Tensor, _qkv)).uop])
_plan = make_plan(_roots, False, DefaultOpt)
_seen, _alive = [], []


def _spy(_kern):
  def _call(*_arrays, _prg=_kern.prg, _args=tuple(_kern.args)):
    _alive.extend(_arrays)
    for (_kind, _n), _x in zip(_args, _arrays):
      if _kind == "temp": _seen[-1].setdefault(str(_n), []).append([int(_x.ctypes.data), int(_x.size)])
    return _prg(*_arrays)
  return _dataclasses.replace(_kern, prg=_call)


_plan = _dataclasses.replace(_plan, kernels=[_spy(_kern) for _kern in _plan.kernels])   # a plan of its own
_runner = PlanRunner()
for _run in range(3):
  _seen.append({})
  _runner.run(_plan, _inputs)
record("temporaries seen", _seen)
# JUDGE
from uopc.kernelize import make_plan as _make_plan, normalize as _normalize
from uopc.opt import DefaultOpt as _DefaultOpt
from uopc.tensor import Tensor as _Tensor
_q = _Tensor(np.ones((64, 8), np.float32))
_plan = _make_plan(_normalize([((_q @ _q.T * (1 / math.sqrt(8))).softmax(-1) @ _q).uop])[0], False, _DefaultOpt)
_seen = recorded["temporaries seen"]
assert type(_seen) is list and len(_seen) == 3 and all(type(_r) is dict for _r in _seen), \
  "PlanRunner.run: the plan's kernels were not run three times"
_first = {}
for _n, (_, _size) in enumerate(_plan.temps):
  _calls = [_c for _r in _seen for _c in _r.get(str(_n), [])]
  assert _calls, f"PlanRunner.run: temporary {_n} was never handed to a kernel"
  gradelib.expect_equal(sorted({_c[1] for _c in _calls}), [_size], f"PlanRunner: the size of temporary {_n}")
  _where = [sorted({_c[0] for _c in _r.get(str(_n), [])}) for _r in _seen]
  assert all(_w == _where[0] and len(_w) == 1 for _w in _where), (
    f"PlanRunner.run: temporary {_n} was a different array on a later run of the same plan (the first run's "
    f"temporaries must be reused)")
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 8.2: DEBUG lines
#
# **Worked example.** With `DEBUG=2`, uopc's `realize` prints one line per kernel (Chapter 8): its name, its time
# and its GFLOP/s. Here is one, captured (its numbers replaced), and `debug_line`, which writes that line from a
# kernel's name, its time in seconds and its FLOPs:

# %%
import contextlib
import io
import re
import time
from uopc.checks import check_below
from uopc.helpers import Context

buf = io.StringIO()
with contextlib.redirect_stdout(buf), Context(DEBUG=2): attention(*map(Tensor, other)).numpy()
line = next(ln for ln in buf.getvalue().splitlines() if "GFLOP/s" in ln)
print(re.sub(r"\s+[\d.]+ ms\s+[\d.]+ GFLOP/s", "  <time> ms  <rate> GFLOP/s", line))   # the name, then what varies


def debug_line(name: str, seconds: float, flops: int) -> str:
  """uopc's DEBUG=2 line for one kernel."""
  return f"  {name:<30s}{seconds * 1e3:9.3f} ms{flops / seconds / 1e9:9.2f} GFLOP/s"


print(debug_line("r_128_128_16", 0.000125, 524288))

# %% [markdown]
# **Your task.** Chapter 8's exercise 2. `debug_report(plan, inputs, reps)` runs the plan `reps` times, as
# `run_uopc_plan` does, timing **each kernel on its own**; it returns `(outs, rows)`: the outputs of the last run,
# and one row `(name, seconds, flops)` per kernel of the plan, in the plan's order, where `seconds` is that kernel's
# best time over the `reps` runs and `flops` what uopc counted for it. `debug_line(*row)` is then the line DEBUG=2
# prints. Think about what belongs between the two clock readings, and why the best time (Chapter 8's pitfall: on a
# busy machine a single time is often too long, never too short).

# %%
# TASK: DEBUG lines
def debug_report(plan, inputs: list[np.ndarray], reps: int = 3) -> tuple[list[np.ndarray], list[tuple]]:
  """Run plan reps times: (the last run's outputs, [(name, best seconds, flops) per kernel, in order])."""
  ### BEGIN SOLUTION
  temps = [np.empty(n, np_dtype(d)) for d, n in plan.temps]   # allocated once: the later runs do not page-fault
  times = [[] for _ in plan.kernels]
  for _ in range(reps):
    outs = [inputs[o[1]] if o[0] == "in" else np.empty(o[1], np_dtype(o[0])) for o in plan.outs]
    arrays = {"in": inputs, "temp": temps, "out": outs}
    for k, kern in enumerate(plan.kernels):
      args = [arrays[kind][n] for kind, n in kern.args]   # outside the clock readings: not the kernel's time
      start = time.perf_counter()
      kern.prg(*args)
      times[k].append(time.perf_counter() - start)
  return outs, [(kern.name, min(times[k]), kern.flops) for k, kern in enumerate(plan.kernels)]
  ### END SOLUTION


# %% tags=["nbval-ignore-output"]
a_np, b_np = (rng.standard_normal((512, 512)).astype(np.float32) for _ in range(2))
roots, inputs = normalize([(Tensor(a_np) @ Tensor(b_np)).uop])
mm_plan = make_plan(roots, False, DefaultOpt)
start = time.perf_counter()
(out,), rows = debug_report(mm_plan, inputs, reps=3)
wall = time.perf_counter() - start
for row in rows: print(debug_line(*row))   # its times vary from run to run: nbval does not compare this cell
print(f"the whole call: {wall * 1e3:.3f} ms for 3 runs")
check("debug_report's output, (512, 512) @ (512, 512)", out.reshape(512, 512),
      a_np.astype(np.float64) @ b_np.astype(np.float64), rtol=1e-4, atol=1e-3)
check("the rows' names: the plan's kernels, in order", [row[0] for row in rows], [k.name for k in mm_plan.kernels])
check("the rows' FLOPs: what uopc counted for each kernel", [row[2] for row in rows],
      [k.flops for k in mm_plan.kernels])
check_below("the kernels' best times added up (s), against the whole call's time for one run",
            sum(row[1] for row in rows), wall / 3)
copy, product = sorted(rows, key=lambda row: row[2])   # the copy does no arithmetic
check("the product (the kernel that counts FLOPs) took longer than the copy", product[1] > copy[1], True)

# %%
# a clock that only the kernels move, by times set here: each row's seconds must be that kernel's best of its runs
from types import SimpleNamespace
from unittest import mock
scripted = [[0.004, 0.001, 0.002], [0.003, 0.006, 0.005]]   # per kernel, per run: the best is neither first nor last
clock = {"now": 0.0, "calls": [0] * len(mm_plan.kernels)}


def ticking(k: int, prg):
  def run(*args):
    prg(*args)
    clock["now"] += scripted[k][clock["calls"][k] % 3]
    clock["calls"][k] += 1
  return run


fake_plan = SimpleNamespace(temps=mm_plan.temps, outs=mm_plan.outs, kernels=[
  SimpleNamespace(name=kern.name, flops=kern.flops, args=kern.args, prg=ticking(k, kern.prg))
  for k, kern in enumerate(mm_plan.kernels)])
now = lambda: clock["now"]
with mock.patch("time.perf_counter", now), mock.patch("time.monotonic", now), mock.patch("time.time", now):
  _, fake_rows = debug_report(fake_plan, inputs, reps=3)
check("debug_report's seconds under a clock only the kernels move (each kernel's best of 3 runs)",
      [row[1] for row in fake_rows], [min(times) for times in scripted], rtol=1e-9, atol=0)

# %% [markdown]
# Expected: two lines like the one above (the copy's rate is 0.00 GFLOP/s: it does no arithmetic; the product's
# depends on the machine), five `ok` lines, and one for the scripted clock. A kernel's best time is never longer
# than its share of a run, so the best times of one run's kernels add up to less than the call's time divided by the
# runs; a time that counts more than the kernel (every kernel given the run's time, or the runs' times added) does
# not; and under a clock that only the kernels move, the best of each kernel's scripted times is what comes back,
# not the last one.

# %% tags=["hidden-test"]
# POINTS: DEBUG lines 1
### BEGIN HIDDEN TESTS
_qkv = [seeded(31, _j).standard_normal((64, 8)).astype(np.float32) for _j in range(3)]
_roots, _inputs = normalize([attention(*map(Tensor, _qkv)).uop])
(_out,), _rows = debug_report(make_plan(_roots, False, DefaultOpt), _inputs, reps=2)
record("out", np.asarray(_out).copy())
record("names", [str(_row[0]) for _row in _rows])
record("flops", [int(_row[2]) for _row in _rows])
# JUDGE
from uopc.kernelize import make_plan as _make_plan, normalize as _normalize
from uopc.opt import DefaultOpt as _DefaultOpt
from uopc.tensor import Tensor as _Tensor
_qkv = [seeded(31, _j).standard_normal((64, 8)).astype(np.float32) for _j in range(3)]
_q, _k, _v = map(_Tensor, _qkv)
_plan = _make_plan(_normalize([((_q @ _k.T * (1 / math.sqrt(8))).softmax(-1) @ _v).uop])[0], False, _DefaultOpt)
_got = recorded["out"]
_got = _got.reshape(64, 8) if isinstance(_got, np.ndarray) and _got.size == 64 * 8 else _got
gradelib.expect_close(_got, gradelib.attention_ref(*_qkv), "debug_report's output, attention N=64", 1e-4)
gradelib.expect_equal(recorded["names"], [_kern.name for _kern in _plan.kernels],
                      "debug_report's names (the plan's kernels, in order), attention N=64")
gradelib.expect_equal(recorded["flops"], [_kern.flops for _kern in _plan.kernels],
                      "debug_report's FLOPs per kernel, attention N=64")
### END HIDDEN TESTS

# %% tags=["hidden-test"]
# POINTS: DEBUG lines 1
### BEGIN HIDDEN TESTS
import time as _time
_a, _b = (seeded(32, _j).standard_normal((512, 512)).astype(np.float32) for _j in range(2))
_roots, _inputs = normalize([(Tensor(_a) @ Tensor(_b)).uop])
_plan = make_plan(_roots, False, DefaultOpt)
_start = _time.perf_counter()
_, _rows = debug_report(_plan, _inputs, reps=3)
record("wall", _time.perf_counter() - _start)
record("rows", [(str(_row[0]), float(_row[1]), int(_row[2])) for _row in _rows])
# JUDGE
_rows, _wall = recorded["rows"], recorded["wall"]
_what = "debug_report(plan, inputs, reps=3), (512, 512) @ (512, 512)"
assert len(_rows) == 2, f"{_what}: expected 2 rows (the copy and the product), got {len(_rows)}"
_secs = [_row[1] for _row in _rows]
assert all(math.isfinite(_s) and _s > 0 for _s in _secs), f"{_what}: the kernels' times are {_secs}, not positive"
assert sum(_secs) < _wall / 3, (f"{_what}: the kernels' best times add up to {sum(_secs):.6f} s, more than one run "
                                f"of the plan took ({_wall / 3:.6f} s = the call's {_wall:.6f} s / 3): each time must "
                                f"be one kernel's, in one run")
_copy, _product = sorted(_rows, key=lambda _row: _row[2])
assert _product[1] > _copy[1], (f"{_what}: the product {_product[0]} ({_product[1]:.6f} s) is timed as no slower "
                                f"than the copy {_copy[0]} ({_copy[1]:.6f} s)")
### END HIDDEN TESTS
