# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # Chapter 8. Realize
#
# Chapter 7 turned a graph into a `Plan`: a list of compiled kernels, the temporaries they share and
# where each output lives. **realize** runs it: it finds the plan (building it only the first time a graph
# of this shape is seen), hands each kernel its arrays (inputs, temporaries, outputs), and runs the
# kernels in order. Three details decide whether that is fast:
#
# - **the plan cache**: building a plan lowers, renders and compiles every kernel (hundreds of
#   milliseconds); a training loop realizes the same graph shape thousands of times with new data;
# - **temporaries allocated once**: a plan's temporaries are allocated on its first run and reused by
#   every later run, because fresh memory costs a page fault per 4 KB page on first touch;
# - **measuring**: `DEBUG=2` prints one line per kernel (time, GFLOP/s) and a summary with the schedule
#   and run times; `DEBUG=3` re-runs each kernel on memory it has already touched; `DEBUG=4` prints the C.
#
# What you'll build: a plan runner in a dozen lines; then uopc's `realize`, its plan cache and `Plan`'s
# temporaries, its DEBUG levels on the book's unfused attention at N = 1024, and FLOP counting. Numbers
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
# ## 8.1 A plan runner
#
# A `Plan` (Chapter 7) has `kernels`, each with a compiled `prg` and `args`, the list of its parameters as
# `("in", k)`, `("temp", k)` or `("out", k)`; `temps`, the (dtype, size) of each temporary; and `outs`, per
# root either `("in", k)` (the root is input k itself) or the (dtype, size) of a fresh output. A runner
# needs nothing else:

# %%
import math
import numpy as np
from uopc.dtype import np_dtype
from uopc.kernelize import make_plan, normalize
from uopc.opt import DefaultOpt
from uopc.tensor import Tensor


def run_plan(plan, inputs: list[np.ndarray], temps: list[np.ndarray] | None = None) -> list[np.ndarray]:
  """Run plan's kernels in order on the inputs (flat arrays); temporaries are fresh unless given."""
  if temps is None: temps = [np.empty(n, np_dtype(d)) for d, n in plan.temps]
  outs = [inputs[o[1]] if o[0] == "in" else np.empty(o[1], np_dtype(o[0])) for o in plan.outs]
  arrays = {"in": inputs, "temp": temps, "out": outs}
  for k in plan.kernels: k.prg(*[arrays[kind][n] for kind, n in k.args])
  return outs


def attention(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
  return (q @ k.T * (1 / math.sqrt(q.shape[-1]))).softmax(-1) @ v


def reference(q, k, v):
  s = q @ k.T / math.sqrt(q.shape[-1])
  p = np.exp(s - s.max(-1, keepdims=True))
  return p / p.sum(-1, keepdims=True) @ v


rng = np.random.default_rng(0)
qkv = [rng.standard_normal((128, 16)).astype(np.float32) for _ in range(3)]
roots, inputs = normalize([attention(*map(Tensor, qkv)).uop])   # the graph, with its data taken out
plan = make_plan(roots, False, DefaultOpt)
(out,) = run_plan(plan, inputs)
print([k.name for k in plan.kernels])
print("matches NumPy:", np.allclose(out.reshape(128, 16), reference(*qkv), rtol=1e-4, atol=1e-5))

# %% [markdown]
# `normalize` walks the graph and replaces each tensor's data by "input k", in order of first use, and
# returns the arrays separately. The normalized graph describes only the *shape* of the computation, so
# two graphs that differ only in their data normalize to the same UOp (hash-consing, Chapter 3), and the
# plan can be looked up by it.
#
# ## 8.2 The plan cache
#
# `make_plan` keeps every plan in a dict keyed by `(normalized roots, fuse_reduce, opt)`. The same graph
# shape with other data is the same plan object; another shape, another `fuse_reduce` or another
# optimizer is another plan:

# %%
other = [rng.standard_normal((128, 16)).astype(np.float32) for _ in range(3)]
again = make_plan([attention(*map(Tensor, other)).uop], False, DefaultOpt)
print("other data, same plan object:", again is plan)
half = [a[:64] for a in qkv]
print("N=64, same plan object:", make_plan([attention(*map(Tensor, half)).uop], False, DefaultOpt) is plan)
print("fuse_reduce, same plan object:", make_plan(roots, True, DefaultOpt) is plan)

# %% [markdown]
# What the cache saves is the *schedule* time: building a plan lowers, renders and compiles (or loads from
# the disk cache of Chapter 2) every kernel. Finding it again costs the `normalize` walk and a dict lookup:

# %% tags=["nbval-ignore-output"]
import time

fresh = [rng.standard_normal((96, 16)).astype(np.float32) for _ in range(3)]   # a shape not seen yet
graph = attention(*map(Tensor, fresh)).uop
t0 = time.perf_counter(); make_plan([graph], False, DefaultOpt); t1 = time.perf_counter()
make_plan([graph], False, DefaultOpt); t2 = time.perf_counter()
print(f"first make_plan: {(t1 - t0) * 1e3:8.2f} ms   again: {(t2 - t1) * 1e3:6.2f} ms")

# %% [markdown]
# ## 8.3 Temporaries allocated once
#
# `run_plan` allocates the temporaries on every call. uopc's `realize` allocates them on a plan's first run
# and keeps them on the plan (`Plan.temp_arrays`), so every later run reuses the same memory. Outputs are
# fresh on every run (the caller keeps them).

# %%
first = attention(*map(Tensor, qkv))
out1 = first.numpy().copy()
temps = plan.temp_arrays
print("sizes:", [t.size for t in temps], "=", [n for _, n in plan.temps])
second = attention(*map(Tensor, other))
print("second realize, same plan:", make_plan([second.uop], False, DefaultOpt) is plan)
out2 = second.numpy()
same = plan.temp_arrays is temps and all(a is b for a, b in zip(plan.temp_arrays, temps))
print("same temporaries (identity):", same)
print("outputs are new arrays:", not np.shares_memory(out1, out2))
print("both correct:", np.allclose(out1, reference(*qkv), rtol=1e-4, atol=1e-5),
      np.allclose(out2, reference(*other), rtol=1e-4, atol=1e-5))

# %% [markdown]
# Why bother? Fresh memory from the operating system is not mapped until it is touched: the first write
# to each 4 KB page traps into the kernel (a *page fault*), which finds a zeroed page and maps it. Writing
# S = Q K^T at N = 1024 (4 MB) touches 1024 pages. The process counts its page faults
# (`ru_minflt`), so we can watch it happen: run the N = 1024 plan with our runner, with fresh temporaries
# each time and then with reused ones.

# %% tags=["nbval-ignore-output"]
import resource


def faults() -> int: return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


N, D = 1024, 64
qkv = [rng.standard_normal((N, D)).astype(np.float32) for _ in range(3)]
roots, inputs = normalize([attention(*map(Tensor, qkv)).uop])
big = make_plan(roots, False, DefaultOpt)
kept = [np.empty(n, np_dtype(d)) for d, n in big.temps]
for label, reuse in (("fresh", None), ("fresh", None), ("fresh", None), ("reused", kept), ("reused", kept)):
  f0, t0 = faults(), time.perf_counter()
  run_plan(big, inputs, reuse)
  print(f"{label:7s} temporaries: {faults() - f0:5d} page faults, {(time.perf_counter() - t0) * 1e3:7.2f} ms")

# %% [markdown]
# A run with fresh temporaries faults on pages it writes for the first time. S and P alone are two 4 MB arrays,
# two thousand 4 KB pages: an upper bound, and the counts above fall short of it where the allocator hands back
# memory an earlier run already mapped. The first "reused" run still faults, because `kept` is
# new memory too; the runs after it do not. Whether later *fresh* runs fault again is up to the allocator:
# glibc's `malloc` returns a freed large block to the system (`munmap`), but it also raises its threshold
# after such a free and may then recycle freed blocks inside the process, whose pages stay mapped. Above
# its upper limit (32 MB on 64-bit Linux) every allocation is a fresh `mmap`. A 4 MB and a 64 MB array,
# each allocated, written and freed three times:

# %% tags=["nbval-ignore-output"]
for size_mb in (4, 64):
  counts = []
  for _ in range(3):
    f0 = faults()
    a = np.empty(size_mb * 2**20 // 4, np.float32)
    a.fill(1.0)
    del a
    counts.append(faults() - f0)
  print(f"{size_mb:3d} MB: page faults per allocation {counts}  ({size_mb * 256} pages of 4 KB)")

# %% [markdown]
# Where the 64 MB block faults fewer times than it has 4 KB pages, the kernel has backed it with 2 MB
# huge pages (transparent huge pages); it still faults on every allocation. At N = 4096, S and P are 64 MB
# each. uopc's plans keep their temporaries, so only the first run of a plan pays.
#
# ## 8.4 DEBUG=2: one line per kernel
#
# `with Context(DEBUG=2):` (or `DEBUG=2` in the environment) makes realize print each kernel's name, time
# and GFLOP/s (its counted FLOPs over its time), then a summary: how many kernels, the *schedule* time
# (normalizing the graph and finding or building the plan) and the *run* time (allocating outputs and
# running the kernels). Here are the first and the fifth realize of the book's unfused attention at
# N = 1024, D = 64 (section 11.3 shows the same two runs). The plan for this shape exists already (8.3
# made it), so the cells below give realize a fresh plan cache, and the first realize builds the plan:

# %% tags=["nbval-ignore-output"]
import contextlib
from uopc.helpers import Context
from uopc.kernelize import isolated_plan_cache as fresh_plan_cache   # a plan cache of its own for the block


q, k, v = map(Tensor, [rng.standard_normal((N, D)).astype(np.float32) for _ in range(3)])
with fresh_plan_cache():
  with Context(DEBUG=2): attention(q, k, v).numpy()        # builds the plan, allocates its temporaries
  for _ in range(3): attention(q, k, v).numpy()
  with Context(DEBUG=2): attention(q, k, v).numpy()

# %% [markdown]
# The first realize's schedule time is building the plan: lowering, rendering, and compiling six kernels
# (here, loading them from the disk cache of Chapter 2, since they were compiled before). The fifth's is a
# fraction of a millisecond. The first run pays for first touches too: the pages of the plan's new temporaries
# (8.3's page faults, in the kernels that write S and P), but also, in every kernel, the first call of code just
# loaded and caches that hold none of its data yet. 8.5 runs each kernel twice to tell the two apart.
#
# On a machine shared with other work, these lines can be dominated by something else: a parallel kernel
# ends when its slowest thread does, and a thread that lost its core to another process waits a whole
# scheduler time slice (milliseconds). If the lines above show most kernels at several milliseconds,
# that is what happened. The next measurements therefore run with **one OpenMP thread**, which measures
# the kernels themselves (set through the OpenMP runtime the kernels already use):

# %%
import ctypes
import ctypes.util

gomp = ctypes.CDLL(ctypes.util.find_library("gomp"))


@contextlib.contextmanager
def threads(n: int):
  gomp.omp_set_num_threads(n)
  try: yield
  finally: gomp.omp_set_num_threads(os.cpu_count())


# %% [markdown]
#
# ## 8.5 DEBUG=3: the same kernel again
#
# `DEBUG=3` adds a column: each kernel is run a second time, right away, on the same arrays. Memory is
# then mapped and warm in the cache, so the difference between the two columns is what the first touch
# cost. Again with a fresh plan cache, so that the first realize has new temporaries, and one thread:

# %% tags=["nbval-ignore-output"]
with threads(1), fresh_plan_cache(), Context(DEBUG=3):
  attention(q, k, v).numpy()
  attention(q, k, v).numpy()

# %% [markdown]
# In the first realize, the S kernel (`r_1024_1024`) and the P kernel (`e_1024_1024`) write fresh 4 MB
# temporaries; their "again" times are the kernels themselves. Page faults are not the whole of a first call,
# though: compare P V (`r_1024_64`), which writes only the 256 KB output, across its two columns; a kernel's
# first call also runs code just loaded (and wakes the OpenMP runtime's threads) with caches that hold none of its
# data. In the second realize, the temporaries are the plan's own, already mapped, and the two columns agree (up
# to cache warmth and noise). The book's section
# 11.3 tells the story of the first version of realize, which allocated temporaries on every call:
# DEBUG=3 showed the S kernel at 9.7 ms against 1.1 ms "again", and keeping the arrays on the plan cut the
# unfused attention from 28.4 to 9.8 ms.
#
# `DEBUG=4` also prints each kernel's C before running it. On a small reduction:

# %% tags=["nbval-ignore-output"]
x = Tensor(np.arange(64, dtype=np.float32).reshape(8, 8))
with Context(DEBUG=4): (x.sum(1) * 2).numpy()

# %% [markdown]
# ## 8.6 Schedule time and run time
#
# Per realize, the schedule time is Python: normalizing the graph (a walk over every node) and a dict
# lookup. It does not depend on N, the run time does, so the schedule matters for small tensors and many
# realizes (an inference step with small batches), and not at all for big ones. Best of 5 realizes each,
# one thread:

# %% tags=["nbval-ignore-output"]
import io
from contextlib import redirect_stdout


def summary(n: int, runs: int = 5) -> tuple[float, float]:
  """Best schedule and run times (ms) of realizes of attention at N = n, read from the DEBUG=2 summaries."""
  args = [Tensor(rng.standard_normal((n, D)).astype(np.float32)) for _ in range(3)]
  attention(*args).numpy()                                      # build the plan, map the temporaries
  buf = io.StringIO()
  with redirect_stdout(buf), Context(DEBUG=2):
    for _ in range(runs): attention(*args).numpy()
  found = re.findall(r"schedule ([\d.]+) ms, run ([\d.]+) ms", buf.getvalue())
  return min(float(a) for a, _ in found), min(float(b) for _, b in found)


for n in (64, 256, 1024):
  with threads(1): sched, run = summary(n)
  print(f"N={n:5d}  schedule {sched:6.2f} ms   run {run:7.2f} ms")

# %% [markdown]
# ## 8.7 Counting FLOPs
#
# The GFLOP/s column divides each kernel's FLOP count by its time. The count comes from the loop program
# (`uopc.render_c.count_flops`, Chapter 5): every float ALU op is counted once per trip of the loops it is
# written in. For S = Q K^T, every one of the N x N outputs is a dot product of length D, one multiply and
# one add per term: 2 N^2 D. P V is the same size. The two softmax reductions count their per-element ops:

# %%
from uopc.render_c import count_flops

qk, rowmax, rowsum, p_kernel, v_copy, pv = big.kernels
print(f"{qk.name}: count_flops {count_flops(qk.ast):>11,}   2*N*N*D {2 * N * N * D:>11,}")
print(f"{pv.name}: count_flops {count_flops(pv.ast):>11,}   2*N*N*D {2 * N * N * D:>11,}")
for kern in big.kernels: print(f"  {kern.name:12s} {kern.flops:>11,} FLOPs  ({kern.flops / (N * N):.2f} per score)")
total = sum(kern.flops for kern in big.kernels)
print(f"total {total:,}; the book's 4 N^2 D = {4 * N * N * D:,}, plus O(N^2) for the softmax")

# %% [markdown]
# The copy of V (`e_1_64_1024`) does no arithmetic: its GFLOP/s column is 0.00, and it is memory-bound by
# definition. The row max counts 2 ops per score (the 1/sqrt(D) scale and the max), the row sum 6 (the
# scale, the row max times -1, the add, times log2 e, exp2, and the sum), P 7 (the same five before the
# exponential's result, then 1/sum and the product). The row max times -1 and 1/sum are the same for a
# whole row, but the renderer writes them inline in the inner loop and the counter counts an op where it
# is written (the C compiler hoists them), so these counts are a little high. They are exact for the
# matmuls, which is where GFLOP/s is worth reading.
#
# ## Pitfalls
#
# - **The first run is not the steady state.** It pays for building the plan (compiling kernels, or
#   loading them) and for page faults on the plan's new temporaries. Time with a warm-up (`best_of`), and
#   when a kernel that writes a big buffer looks slow, compare DEBUG=3's "again" column before optimizing
#   its loops.
# - **Cached plans hold memory.** Every plan keeps its temporaries while it is cached: a plan at N = 4096
#   holds two 64 MB buffers. Many shapes (variable sequence lengths) mean many plans, so the cache keeps the
#   most recently used ones within a budget of temporaries' bytes (`UOPC_PLAN_CACHE_MB`, and a count,
#   `UOPC_PLAN_CACHE_PLANS`) and drops the rest; `uopc.kernelize.clear_plan_cache()` frees them all. Padding
#   to a few sizes keeps the plans, and their compiles, few.
# - **Outputs are fresh; temporaries are not.** A caller may keep an output; nobody may keep a temporary.
#   A kernel that read a temporary before writing it would see the previous run's values.
# - **The cache key is the graph's shape, not its data,** and the options of the realize (`fuse_reduce`, the
#   optimizer object, online softmax, the device: `uopc.options.Options`).
#   A change to a rule of the kernelizer (as Chapter 7 did with `stage_broadcast_compute`) is invisible to
#   the cache: use a fresh cache when experimenting (`with uopc.kernelize.isolated_plan_cache():`).
# - **Threads and timing.** Kernels run with OpenMP. On a machine shared with other work, a kernel waits
#   for its slowest thread, and single runs can be off by milliseconds; read the best of several.
#
# ## Exercises
#
# 1. Give `run_plan` a `temps` cache of its own (a dict from plan to arrays), and show with `faults()`
#    that only the first run of each plan page-faults.
# 2. Extend `run_plan` to print a DEBUG=2-style line per kernel, with GFLOP/s from `k.flops`.
# 3. Time `normalize` alone for attention and for a graph of 1,000 chained elementwise ops. How long
#    would a training step with 100 realizes spend scheduling?
# 4. Derive the FLOP count of the row-sum kernel from its C (print `rowsum.src`), op by op.
# 5. Run attention at N = 4096 with `run_plan` and fresh temporaries three times, and then with uopc's
#    `realize` three times. Count page faults in both.
# 6. What would go wrong if two threads realized the same plan at once? Propose a fix.
