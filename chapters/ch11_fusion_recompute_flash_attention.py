# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # Chapter 11. Fusion, recompute, and flash attention
#
# Every transformer layer computes softmax(Q K^T / sqrt(D)) V. Written the obvious way, it builds an N x N matrix
# of scores, where N is the sequence length: 4 MB at N = 1024, 64 MB at 4096, a gigabyte at 16,384. That matrix is
# pure intermediate: nobody wants it, it is consumed as soon as it is produced, and moving it to memory and back is
# most of the work. Chapter 10 asked how to make one kernel fast. This chapter asks the question one level up: where
# should the kernel boundaries be? Cutting less (fusing more) saves memory traffic, but a fused consumer may have to
# recompute what it no longer reads. We will implement attention three ways in uopc, measure all three, take apart a
# bug that made fused attention cubic, and derive the trick that makes attention fusable in a single pass: the
# online softmax at the heart of FlashAttention.
#
# **What you'll build**
# - `examples/flash_attention.py`: unfused attention (the Tensor code from Chapter 9), fused-with-recompute attention
#   (the same code with `fuse_reduce=True`), and a hand-written FlashAttention-style kernel in the week-3 loop IR.
# - An understanding of `fuse_reduce`, `stage_broadcast_compute` and accumulator placement good enough to predict,
#   from the shape graph, how many times a kernel will recompute Q K^T.
#
# **Where this fits.** This chapter uses the kernelizer from Chapter 7, the reduce lowering from Chapter 6 and the
# opts from Chapter 10. Chapter 13 supplies the GPU machinery (shared memory, tensor cores) that real FlashAttention
# kernels are built from, and Chapter 14 puts attention inside a GPT.
#
# Every printout in this notebook comes from running this repository. Generated C, plans and counts are
# deterministic and checked by nbval; timings are not, and their cells are marked as such. The numbers committed
# with this notebook were measured on this machine (while other work shared its two cores, so read the timings
# as noisy; section 11.8 also measures single-thread CPU time, which other processes do not inflate):

# %% tags=["nbval-ignore-output"]
import os
from pathlib import Path
from uopc import bench


def caches() -> dict[int, int]:
  """Level -> bytes of this CPU's data or unified caches (Linux's sysfs; empty elsewhere)."""
  out = {}
  for d in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
    if (d / "type").read_text().strip() == "Instruction": continue
    size = (d / "size").read_text().strip()
    out[int((d / "level").read_text())] = int(size[:-1]) * {"K": 1 << 10, "M": 1 << 20}[size[-1]]
  return out


CACHES = caches()
print(bench.header())
print(f"# {'load average':<17s} {' '.join(f'{x:.2f}' for x in os.getloadavg())} (1, 5, 15 min)")
print(f"# {'caches':<17s} " + ", ".join(f"L{lv} {n >> 10} KB" for lv, n in sorted(CACHES.items())))

# %% [markdown]
# The imports and a few helpers the whole chapter uses: random inputs, the NumPy reference, and a timer of
# single-thread CPU time (`threadpool_limits(1)` sets both OpenMP's and OpenBLAS's thread count to one for the
# block; `time.process_time` counts only this process's CPU time).

# %%
import contextlib
import inspect
import io
import math
import re
import time
import numpy as np
from threadpoolctl import threadpool_limits
import uopc.kernelize
import uopc.rangeify
from uopc.helpers import Context, best_of
from uopc.book import load_example
from uopc.kernelize import make_plan, realize
from uopc.options import Options
from uopc.render_c import render_c
from uopc.runtime import Program
from uopc.tensor import Tensor
from IPython.display import Markdown, display

# the repository root: the notebook may run from it (make notebooks) or from chapters/ (nbval)
ROOT = next(p for p in (Path.cwd(), *Path.cwd().parents) if (p / "examples" / "flash_attention.py").exists())
fa = load_example("flash_attention")   # examples/flash_attention.py (examples/ is not a package)


def inputs(n: int, d: int = 64) -> tuple[np.ndarray, ...]:
  rng = np.random.default_rng(0)
  return tuple(rng.standard_normal((n, d)).astype(np.float32) for _ in range(3))


def reference(q, k, v) -> np.ndarray:
  s = q @ k.T / math.sqrt(q.shape[1])
  p = np.exp(s - s.max(-1, keepdims=True))
  return (p / p.sum(-1, keepdims=True)) @ v


def cpu_best(fn, k: int = 5) -> float:
  """Best single-thread CPU seconds of k calls, after one warm-up call."""
  with threadpool_limits(1):
    fn()
    best = math.inf
    for _ in range(k):
      t0 = time.process_time(); fn(); best = min(best, time.process_time() - t0)
  return best


def show(fn) -> None:
  """Print the source of a function or class of this repository."""
  print(inspect.getsource(fn))


def say(markdown: str) -> None:
  """Prose computed from this run's numbers: it reads what the cell measured, on whatever machine runs it."""
  display(Markdown(markdown))


def debug_lines(fn) -> tuple[str, list[tuple[str, float, float | None]]]:
  """Run fn under the DEBUG context it sets; return what it printed and, per kernel line, (name, ms, again ms)."""
  buf = io.StringIO()
  with contextlib.redirect_stdout(buf): fn()
  text = buf.getvalue()
  lines = re.findall(r"^  (\S+)\s+([\d.]+) ms\s+[\d.]+ GFLOP/s(?:\s+again\s+([\d.]+) ms)?$", text, re.M)
  return text, [(name, float(ms), float(again) if again else None) for name, ms, again in lines]


# %% [markdown]
# ## 11.1 Fusion is a trade
#
# Chapter 7 cut the graph into kernels at *materialization points*: the roots, every STAGE, and every REDUCE.
# Everything between two points fuses into one loop nest (`uopc/kernelize.py`):

# %%
show(uopc.kernelize._materialize_points)

# %% [markdown]
# Each cut has a price and a benefit. The price of a cut is memory traffic: the producer writes its result to a
# buffer and the consumer reads it back, 2 * size bytes plus a kernel launch. The benefit is that the value is
# computed once. Fusing across the cut removes the traffic, but if the consumer reads each producer value more than
# once (because of a broadcast), the fused consumer recomputes it every time.
#
# So the decision for a candidate fusion is roughly
#
# $$\text{fuse if}\quad \frac{\text{bytes saved}}{\text{bandwidth}} > \frac{\text{FLOPs recomputed}}{\text{FLOP rate}}$$
#
# and both sides can be large. In Chapter 9's softmax, fusing recomputes one `exp2f` per element in two kernels
# instead of storing the exponentials, a clear win. NOTES 15 records the other extreme: in a GPT, a LayerNorm output
# EXPANDed into a matmul was recomputed for every output column, and one training step spent 374 ms in kernels until
# `stage_broadcast_compute` started staging such tensors (125 ms; see Chapter 7, Section 7.10):

# %%
show(uopc.kernelize.stage_broadcast_compute)
show(uopc.kernelize._fused_work)

# %% [markdown]
# The rule is a crude cost model: stage a computed tensor if it is broadcast by a factor of 4 or more and
# recomputing it would cost at least 4096 ALU-op-elements. Remember this function: the first version of fused
# attention ran straight into it (11.4).
#
# REDUCE is the interesting boundary. A REDUCE consumed through an EXPAND (`x - x.max(-1, keepdim=True)`) must be
# materialized, or the reduction would be recomputed for every element it is broadcast to. But with
# `fuse_reduce=True`, `_materialize_points` no longer cuts at REDUCEs: rangeify then lowers a reduce inside the
# consumer's loops, and each output position recomputes the reduction it needs. That is exactly the "fused
# attention" we want, provided the recomputation happens once per row, not once per element. Whether it does is
# decided by accumulator placement, as section 11.5 will show the hard way.
#
# ## 11.2 Attention, and why it is memory-bound
#
# Single-head attention over a sequence of N positions with head dimension D:
#
# - S = Q K^T / sqrt(D): scores, (N, N). S[i, j] is how much query i attends to key j.
# - P = softmax(S) along each row: (N, N), each row a probability distribution.
# - O = P V: (N, D), each output row a weighted average of the value rows.
#
# The FLOPs are two matmuls, 2 N^2 D each, 4 N^2 D in total, plus O(N^2) for the softmax. The memory is dominated
# by S and P, against N D floats for each of Q, K, V and O:

# %%
D = 64
print(f"{'N':>6} {'4 N^2 D FLOPs':>15} {'S (or P)':>10} {'Q, K, V or O':>14}")
for n in (1024, 2048, 4096):
  print(f"{n:>6} {4 * n * n * D:>15,} {n * n * 4 / 1e6:>7.1f} MB {n * D * 4 / 1e3:>11.0f} KB")

# %% [markdown]
# On the roofline of Chapter 10, the matmuls have intensity O(D) and the softmax has intensity O(1); the more
# N^2 intermediates we write and re-read, the further left the whole computation slides.
#
# The Tensor code is one line (`examples/flash_attention.py`):

# %%
show(fa.attention)

# %% [markdown]
# ## 11.3 Implementation 1: unfused
#
# Kernelized normally, the one-liner becomes six kernels. Here are the first and the fifth realize of the same
# attention in one process (DEBUG=2, N = 1024, D = 64), with the minor page faults of each (`ru_minflt`: the pages
# the operating system had to map for the process, a count that other processes cannot disturb). The first one's
# `schedule` includes making the plan and compiling (or loading from the disk cache) its six kernels:

# %% tags=["nbval-ignore-output"]
import resource


def minor_faults() -> int: return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def attention_at(a, b, c, debug: int = 0) -> np.ndarray:
  with Context(DEBUG=debug): return fa.attention(Tensor(a), Tensor(b), Tensor(c)).numpy()


N = 1024
q, k, v = inputs(N)
ref = reference(q, k, v)
realizes = {}   # run -> (its DEBUG lines: (kernel, ms, again), its minor page faults)
for run in range(1, 6):
  f0 = minor_faults()
  text, lines = debug_lines(lambda: attention_at(q, k, v, 2 if run in (1, 5) else 0))
  realizes[run] = (lines, minor_faults() - f0)
  if run in (1, 5): print(("...\n" if run == 5 else "") + text + f"minor page faults: {realizes[run][1]}")
out = attention_at(q, k, v)
print(f"\nmax error against NumPy: {np.abs(out - ref).max():.1e}")

# %% [markdown]
# The plan behind those lines, and why each cut was made (`plan.explain()`):

# %%
plan = make_plan([fa.attention(Tensor(q), Tensor(k), Tensor(v)).uop], False, Tensor.opt)
print("kernels", [kern.name for kern in plan.kernels])
print("temps  ", [n for _, n in plan.temps])
print(plan.explain())

# %% [markdown]
# In order: S = Q K^T (a tiled GEMM, the same 4x4 tile as in Chapter 10; the layout pass found K already contiguous
# along D, so no copy), the row max of S scaled by 0.125, the row sum of exponentials, P itself (staged by the
# broadcast rule of 11.1: it is EXPANDed 64 times into P V), a transposed copy of V (the layout pass at work,
# because P V reduces over j and V is (N, D)), and O = P V. The max and sum kernels each re-read all of S; here is
# the max:

# %%
# the book's kernel text: its max update ((a>b)?a:b), under the option that writes it (a pitfall in 11.4 says why)
book_plan = make_plan([fa.attention(Tensor(q), Tensor(k), Tensor(v)).uop],
                      options=Options(opt=Tensor.opt, book_max=True))
print(book_plan.kernels[1].src)

# %% [markdown]
# and P re-reads S once more, recomputing the scale and the exponential, and writes the second N x N buffer:

# %%
print(plan.kernels[3].src)

# %% [markdown]
# Count the passes over N x N data. We can read them off the plan: every kernel that has an N x N temporary among
# its arguments makes one pass over it (the last argument of a kernel is the buffer it writes).

# %%
def nxn_passes(plan, n: int) -> dict[int, tuple[str, list[str]]]:
  """temp index -> (the kernel that writes it, the kernels that read it), for the temps computed in shape (n, n)."""
  out = {}
  for t in range(len(plan.temps)):
    writer = next(kern for kern in plan.kernels if kern.args[-1] == ("temp", t))
    if writer.body.shape == (n, n):
      out[t] = (writer.name, [kern.name for kern in plan.kernels if ("temp", t) in kern.args[:-1]])
  return out


passes = nxn_passes(plan, N)
for t, (writer, readers) in passes.items():
  print(f"temp {t} ({plan.temps[t][1]} floats): written by {writer}, read by {', '.join(readers)}")
total = sum(1 + len(readers) for _, readers in passes.values())
print(f"{total} passes over N x N data, {total * N * N * 4 / 1e6:.1f} MB of traffic at N = {N}; "
      f"Q, K, V and O together are {4 * N * D * 4 / 1e6:.1f} MB")

# %% [markdown]
# S is written once and read three times, P is written once and read once: six passes, and the printout gives
# their traffic, for a computation whose inputs and output total 1 MB.
#
# Now compare the first lines of the two realizes above, the GEMM writing S:

# %% tags=["nbval-ignore-output"]
def fault_story(kernel: str, fresh_ms: float, touched_ms: float, fresh_faults: int, touched_faults: int,
                fresh: str, touched: str) -> str:
  """This run's comparison of a kernel on fresh memory and on memory it has touched, as a sentence."""
  said = (f"Here `{kernel}` took {fresh_ms:.3f} ms {fresh} and {touched_ms:.3f} ms {touched}, and the process "
          f"took {fresh_faults} minor page faults against {touched_faults}")
  if fresh_faults > touched_faults and fresh_ms > 1.2 * touched_ms:
    return said + ": the faults show in the time."
  if fresh_faults <= touched_faults:
    return said + ": this time the memory was not fresh (the allocator reused pages it had mapped before), so " \
                  "there was nothing to pay."
  return said + (": the count says the first one faulted, but on this run its time hardly shows it. One call's time "
                 "on a shared machine moves by more than the faults cost; the count is the measure to trust.")


(s_name, first_ms, _), (_, fifth_ms, _) = realizes[1][0][0], realizes[5][0][0]
say(fault_story(s_name, first_ms, fifth_ms, realizes[1][1], realizes[5][1], "in the first realize", "in the fifth"))

# %% [markdown]
# A difference between them is not computation, it is the operating system: the first write to each 4 KB page of a
# fresh buffer takes a page fault (S alone is 4 MB, a thousand pages). The book's run showed it plainly: the GEMM
# writing S took 5.4 ms the first time and 2.0 ms the fifth. Large intermediates cost twice: once in bandwidth, once
# in page faults.
#
# DEBUG=3 isolates the effect: it runs every kernel a second time, on memory it has already touched (the `again`
# column). Here is the first realize of a plan we have not run yet (N = 2048, so its temporaries come fresh from
# the operating system), and then a later one, each with its minor page faults. We run them on one thread: with
# two, a kernel's time also includes waiting at its barrier for a thread that another process has taken the core
# from.

# %% tags=["nbval-ignore-output"]
q2, k2, v2 = inputs(2048)
make_plan([fa.attention(Tensor(q2), Tensor(k2), Tensor(v2)).uop], False, Tensor.opt)   # compile first
debug3 = {}
with threadpool_limits(1):
  for run in ("first", "later"):
    f0 = minor_faults()
    text, lines = debug_lines(lambda: attention_at(q2, k2, v2, 3))
    debug3[run] = (lines, minor_faults() - f0)
    print(f"{text}{run} realize: {debug3[run][1]} minor page faults\n")
(s_name, s_ms, s_again) = debug3["first"][0][0]
say(fault_story(s_name, s_ms, s_again, debug3["first"][1], debug3["later"][1],
                "on its first run, on fresh temporaries,", "again on the same memory"))
slower = [name for name, ms, again in debug3["first"][0] if again is not None and again > ms]
if slower:   # a first run faster than its repeat: nothing about memory explains it, so say what does
  say(f"In the first realize {len(slower)} of the {len(debug3['first'][0])} kernels ({', '.join(slower)}) took "
      f"longer `again` than the first time. Memory does not explain that: the repeat finds every page already "
      f"mapped, so it never has more to pay than the first run. A kernel whose first run had few pages to fault "
      f"(it reads what an earlier kernel wrote, and writes a small result) shows instead the noise of a single run "
      f"of a few milliseconds on a machine shared with other work (another process taking the core, the clock "
      f"changing speed), which goes either way. The fault count is the measure of what a first run pays; one run's "
      f"time is not.")
else: say("No kernel took longer `again` than the first time in this run.")

# %% [markdown]
# The first version of the runtime paid the page faults on every call, because realize allocated the plan's
# temporaries with `np.empty` each time; a DEBUG=3 run in the book showed the S kernel at 9.7 ms on its first run and
# 1.1 ms when re-run immediately on the same (now mapped) memory. The fix is one field on the cached Plan: the
# temporary arrays are allocated on the first run and reused by every later one.

# %%
show(uopc.kernelize.Plan)
print("\n".join(line for line in inspect.getsource(realize).splitlines() if "temp_arrays" in line))

# %% [markdown]
# We can put the first version back without editing the runtime: setting `plan.temp_arrays = None` before every
# call makes realize allocate fresh temporaries each time, as it used to. Both variants, one after the other, at
# N = 1024 (S and P are 4 MB each) and N = 4096 (64 MB each): single-thread CPU time, best of 5, and the minor page
# faults of five calls:

# %% tags=["nbval-ignore-output"]
def unfused_at(a, b, c):
  def run() -> np.ndarray: return fa.attention(Tensor(a), Tensor(b), Tensor(c)).numpy()
  return make_plan([fa.attention(Tensor(a), Tensor(b), Tensor(c)).uop], False, Tensor.opt), run


variants_at = {}   # (N, "fresh" or "cached") -> (best CPU seconds, faults of five calls)
for n in (1024, 4096):
  plan_n, cached = unfused_at(*inputs(n))

  def first_version() -> np.ndarray:
    plan_n.temp_arrays = None   # realize allocates fresh temporaries, as the first runtime did on every call
    return cached()
  for name, fn in (("fresh temporaries (first version)", first_version),
                   ("cached temporaries (plan.temp_arrays)", cached)):
    faults = []
    for _ in range(5):
      f0 = minor_faults(); fn(); faults.append(minor_faults() - f0)
    t = cpu_best(fn)
    print(f"N={n}  {name:<38s} {t * 1e3:8.2f} ms   minor page faults per call {faults}")
    variants_at[n, name.split()[0]] = (t, faults)
fresh, cached_ = variants_at[4096, "fresh"], variants_at[4096, "cached"]
say(f"At N = 4096 the first version took {min(fresh[1])} to {max(fresh[1])} minor page faults a call and "
    f"{(fresh[0] - cached_[0]) * 1e3:.1f} ms more CPU time than the cached temporaries, which took "
    f"{min(cached_[1])} to {max(cached_[1])}.")

# %% [markdown]
# What the cached variant still faults on, if anything (its counts are printed above), is what is fresh on every
# call in both variants: the output array and the input copies. Whether fresh temporaries fault depends on the C
# library's allocator. glibc serves a large request with fresh pages from the operating system (mmap) and gives them
# back when the array is freed, so the next array faults again; but after such a free it raises its threshold to
# that size (up to 32 MB) and serves later requests from its own heap, whose pages can stay mapped. At N = 4096
# (64 MB buffers, above the ceiling) the first version faults on every call, the counts printed above (NumPy asks
# for 2 MB huge pages on large arrays, so there are far fewer faults than the 16,384 4 KB pages of each buffer); at
# N = 1024 it depends on what this process freed before, and after the earlier cells of this notebook it may not
# fault at all. Cached temporaries make the question moot. The book measured the captured unfused time at N = 1024
# dropping from 28.4 ms to 9.8 ms with this change (11.8).
#
# ## 11.4 Implementation 2: fused, with recompute
#
# The second implementation changes no math, only the kernelizer's options: `fuse_reduce=True` stops cutting at
# REDUCEs, and a custom optimizer upcasts the last output axis and threads the first:

# %%
show(fa.FlashOpt)

# %% [markdown]
# With `fuse_reduce`, the reductions of softmax are lowered inside the loops of their consumer. The plan shrinks
# from six kernels and two N x N temporaries to two kernels and none:

# %%
out_uop = fa.attention(Tensor(q), Tensor(k), Tensor(v)).uop
for fuse, opt in ((False, Tensor.opt), (True, fa.FlashOpt)):
  p = make_plan([out_uop], fuse, opt)
  print(f"fuse_reduce={fuse}: kernels {[kern.name for kern in p.kernels]}, temps {[n for _, n in p.temps]}")
# the book's kernel text: its max update ((a>b)?a:b), under the option that writes it (the pitfall below says why)
fused_plan = make_plan([out_uop], options=Options(fuse_reduce=True, opt=fa.FlashOpt, book_max=True))
print()
print(fused_plan.explain())

# %% [markdown]
# The only temporary left is the transposed copy of V (65,536 floats). Everything else happens in one kernel,
# `r_1024_64`, which produces O directly. Here is its first part (runs of repetitive lines are elided as `...`):

# %%
REPETITIVE = re.compile(r"^\s*(float acc\d+;|acc\d+ = 0\.0f;|float val\d+ = (acc\d+|data2\[.*\]);"
                        r"|acc\d+ = \(val\d+\+\(alu\d+\*val\d+\)\);)$")


def head(src: str) -> str:
  """The kernel up to the first output-accumulator updates, with runs of more than 4 repetitive lines elided."""
  lines, out, k = src.splitlines(), [], 0
  while k < len(lines):
    run = k
    while run < len(lines) and REPETITIVE.match(lines[run]): run += 1
    if run - k <= 4:
      out.append(lines[k]); k += 1; continue
    block, pad = lines[k:run], lines[k][:len(lines[k]) - len(lines[k].lstrip())]
    updates = block[0].lstrip().startswith("acc")
    out += block[:2] + [pad + "..."] + ([] if updates or "data2" in block[-1] else block[-2:])
    if updates: break   # the first updates of the output accumulators: enough to see the structure
    k = run
  return "\n".join(out)


fused_src = fused_plan.kernels[-1].src
print(head(fused_src))
print(f"\n(the whole kernel is {len(fused_src.splitlines())} lines)")

# %% [markdown]
# **Pitfall: the book's max drops a NaN.** This plan and the max kernel `r_1024` of 11.3 were made with
# `Options(book_max=True)`, so their running max is updated as the book prints it, `acc0 = ((val2>x)?val2:x)`.
# In C every comparison with a NaN is false. If x is NaN, the update returns x and the accumulator becomes NaN; but
# at the next key, `NaN > y` is false again and the update returns y: the NaN is gone. Such a max is NaN only when
# the NaN comes last. NumPy and PyTorch say a max is NaN wherever the NaN is, and so does uopc by default: it writes
# `((a>b||a!=a)?a:b)`, where `a!=a` is true only for a NaN and keeps it. The book's text is one switch away; every
# other max is right:

# %%
rows = ([np.nan, 1.0, 2.0], [1.0, np.nan, 2.0], [1.0, 2.0, np.nan])
for book in (True, False):
  got = [realize([Tensor(np.array(x, np.float32)).max().uop], options=Options(book_max=book))[0].item() for x in rows]
  print(f"book_max={book!s:5}: max of [nan,1,2], [1,nan,2], [1,2,nan] = {got}")
default_src = make_plan([out_uop], options=Options(fuse_reduce=True, opt=fa.FlashOpt)).kernels[-1].src
print("uopc's update: ", next(ln.strip() for ln in default_src.splitlines() if "!=" in ln))

# %% [markdown]
# This is a nested reduction: an inner reduce (the dot product over e < 64) inside an outer reduce (max, sum, or the
# P V sum over keys), inside the row loop. Rangeify produced it with no new code: the reduce lowering simply
# recursed. Per query row `ridx0` there is a max pass over keys (`ridx4`), a sum pass (`ridx6`), and then the output
# loop `ridx1 < 4`, each iteration of which makes another full pass over the keys (`ridx2`), recomputing every dot
# product and every exponential and feeding sixteen output accumulators. FlashOpt upcasts the head dimension by
# min(D, 16) = 16, so the 64 output columns come out in four groups of sixteen, and each group pays for its own pass.
# That is six full computations of q_i . k_j per row instead of one.
#
# The plan predicts this before any C is read: `kernel.recompute` maps each REDUCE fused into the kernel to the
# number of times each of its values is computed, and the Q K^T reduce (the one of shape (N, N)) says 6. The C says
# the same once you read its loops: three loops over the N keys are written out, each holding a D-long dot product,
# and the last sits inside the output loop, which runs once per group of `upcast` columns. Here are the loop headers
# of the book's kernel, and of the same fused attention with a head dimension of 32 instead of 64:

# %%
from uopc.book import flash_opt   # the book's FlashOpt with another upcast of the head dimension

book16 = Options(fuse_reduce=True, opt=flash_opt(16), book_max=True)
assert make_plan([out_uop], options=book16).kernels[-1].src == fused_src   # FlashOpt is flash_opt(16)
for d in (D, 32):
  qd, kd, vd = (Tensor(x) for x in inputs(N, d))
  kern = make_plan([fa.attention(qd, kd, vd).uop], True, fa.FlashOpt).kernels[-1]
  (qk,) = [times for u, times in kern.recompute.items() if u.shape == (N, N)]
  print(f"D = {d}, upcast {min(d, 16)}: recompute of Q K^T {qk:g}")
  print("\n".join(line for line in kern.src.splitlines() if "for (" in line) + "\n")

# %% [markdown]
# At D = 32 the output loop makes half the trips, and each q_i . k_j is computed 4 times instead of 6 (the recompute
# printed above). Exercise 2 asks you to predict the count for other upcasts of the book's D = 64, to check the
# prediction against the C by counting its loops, and to say what fewer passes cost.
#
# **The first version of this experiment did not look like this.** `stage_broadcast_compute` (11.1) saw P EXPANDed
# by a factor of 64 into the P V matmul, measured its recompute cost, and staged it, exactly as designed for
# LayerNorm. The "fused" plan therefore still wrote one N x N buffer (P), while the script printed "(no N*N buffer,
# QK^T recomputed)". The rule can still be applied by hand, before making a fused plan. Here it is on a smaller
# graph than attention, a softmax over a given N x N matrix X, times a weight W (N x D): the fused plan recomputes
# the softmax's probabilities in every output pass, and the rule stores them (the staged plan's first line says
# "asked for" because, to the kernelizer, a STAGE we add is a request):

# %%
from uopc.kernelize import stage_broadcast_compute

rng = np.random.default_rng(1)
X, W = Tensor(rng.standard_normal((N, N)).astype(np.float32)), Tensor(rng.standard_normal((N, D)).astype(np.float32))
softmax_mm = (X.softmax(-1) @ W).uop
for name, roots in (("fused", [softmax_mm]), ("fused, broadcast rule applied by hand",
                                              stage_broadcast_compute([softmax_mm]))):
  p = make_plan(roots, True, fa.FlashOpt)
  print(f"{name}: kernels {[kern.name for kern in p.kernels]}, temps {[n for _, n in p.temps]}")
  print(p.explain() + "\n")

# %% [markdown]
# Exercise 7 applies the rule to attention the same way, and ranks the plan it gets against the two fused ones.
#
# Two cost-model rules disagreed: `fuse_reduce` meant "never write the big intermediate", and the broadcast rule
# meant "never recompute an expensive broadcast". The fix makes the user's explicit request win: with
# `fuse_reduce=True`, `make_plan` skips `stage_broadcast_compute`:

# %%
def show_lines(path: str, first: int, last: int) -> None:
  """Lines first..last of a file of this repository, as the book cites them (uopc/kernelize.py:121-125)."""
  lines = (ROOT / path).read_text().splitlines()
  print(f"{path}:{first}-{last}")
  print("\n".join(lines[first - 1:last]))

show_lines("uopc/kernelize.py", 121, 125)

# %% [markdown]
# and the example's docstring now describes the recomputation accurately. The lesson is about debugging, not
# attention: when a benchmark's description and its plan disagree, believe the plan (`make_plan(...).temps`).
#
# So does fusing win? The two plans, timed here at N = 1024 (wall clock with both threads, best of 3, and
# single-thread CPU time, best of 3):

# %% tags=["nbval-ignore-output"]
def tensor_run(fuse: bool, opt):
  def run():
    old = Tensor.fuse_reduce, Tensor.opt
    Tensor.fuse_reduce, Tensor.opt = fuse, opt
    try: return fa.attention(Tensor(q), Tensor(k), Tensor(v)).numpy()
    finally: Tensor.fuse_reduce, Tensor.opt = old
  return run


variants = {"unfused": tensor_run(False, Tensor.opt), "fused (FlashOpt)": tensor_run(True, fa.FlashOpt)}
for name, fn in variants.items():
  assert np.abs(np.asarray(fn()).reshape(N, D) - ref).max() < 1e-5, name
wall = bench.interleaved(variants, reps=3)
cpu_1024 = {name: cpu_best(fn, 3) for name, fn in variants.items()}
for name in variants:
  print(f"{name:<18s} wall {wall[name] * 1e3:8.2f} ms   single-thread CPU {cpu_1024[name] * 1e3:8.2f} ms")
print(f"fused / unfused: {cpu_1024['fused (FlashOpt)'] / cpu_1024['unfused']:.1f} (single-thread CPU), "
      f"{wall['fused (FlashOpt)'] / wall['unfused']:.1f} (wall clock)")

# %% [markdown]
# No: the last line gives the factor. The book measured 28.5 ms fused against 9.8 ms unfused at N = 1024 (and 103.8
# against 35.3 ms at 2048), a factor of about three; the sweep of section 11.8 measures more sizes here. Fusion
# removed 25 MB of N x N traffic and added five extra computations of Q K^T, each done without the register tiling
# that makes the unfused Q K^T GEMM fast: the recomputation costs more than the traffic did.
#
# > **Key idea:** fusing a reduction into its consumer is only cheap if the reduction is computed once per consumer
# > row, and if the consumer itself makes one pass. Every extra pass recomputes everything the fused reduction
# > depends on. The fix is not a better cost model; it is a better algorithm (11.6).
#
# ## 11.5 The O(N^3) bug: when an index lies about its loops
#
# Before the version above existed, fused attention had a much worse problem. At N = 512 it took 1787 ms; after the
# fix described below, 7 ms (NOTES 12). This section tells the full story, because it is the cleanest example in
# this book of a semantic property (which loops does this value depend on?) being decided by a syntactic one (which
# loop variables does this expression mention?).
#
# Recall how rangeify lowers a REDUCE (Chapter 6):

# %%
show(uopc.rangeify._reduce)

# %% [markdown]
# The accumulator is placed with `acc.after(*ranges_in(*idx))`: it lives inside exactly the loops that the output
# index `idx` mentions. For the softmax max inside attention, the output index is the row i, so the accumulator sits
# inside the i loop and outside the key loops. One max per row: correct.
#
# Now remember how rangeify handles a RESHAPE: the index is raveled into a flat offset and unraveled into the source
# shape. When x of shape (N,) is viewed as (N, 1) and expanded to (N, N), the reshape asks for
# x[unravel(ravel((i, j)))], and the first component is ((i*N + j) // N) % N. Mathematically that is i: 0 <= j < N,
# so j // N = 0. Syntactically it mentions j. Rangeify's raw index expressions for an (N, N) index, and what
# simplify makes of them:

# %%
from uopc.rangeify import ravel, unravel
from uopc.symbolic import ranges_in
from uopc.uop import range_

i, j = range_(512, 0), range_(512, 1)
names = {i: "i", j: "j"}
for raw in unravel(ravel((i, j), (512, 512)), (512, 512)):
  mentions = [names[r] for r in ranges_in(raw)]
  print(f"raw {raw.render(names)} mentions {mentions}   simplified {uopc.rangeify.simplify(raw).render(names)}")

# %% [markdown]
# If the index reaching a REDUCE is the raw form, `ranges_in` reports both i and j, and the accumulator for "max
# over the row" is placed inside the j loop of its consumer. The reduction is then recomputed for every j. Each
# recomputation is itself a pass over N keys with a D-long dot product inside, so the kernel does O(N^2 * N * D) work
# instead of O(N * N * D): cubic in the sequence length.
#
# The fix is in the RESHAPE rule of rangeify: simplify the new indices immediately, so that every later decision
# sees the truth:

# %%
src = inspect.getsource(uopc.rangeify.rangeify).splitlines()
start = next(n for n, line in enumerate(src) if "op is Ops.RESHAPE" in line)
print("\n".join(src[start:start + 4]))

# %% [markdown]
# The comment on the RESHAPE branch says why: dependence analysis and the memo both need the simplified form. (The
# memo matters too: rangeify caches on (node, idx), and two spellings of the same index are two different cache
# keys, so unsimplified indices also defeat memoization.)
#
# We can watch the bug come back. We patch `uopc.rangeify.simplify` so that it does nothing when called from the
# RESHAPE rule (and works normally everywhere else, including the final cleanup in `lower`): the RESHAPE rule is the
# only caller that reaches simplify through that module attribute, so replacing the attribute turns off exactly that
# rule. `uopc.book.reshape_simplify(on)` does the patch for one block, and keeps the plans made while it is on
# apart from the plan cache.

# %%
from uopc.book import reshape_simplify

print(inspect.getsource(reshape_simplify))


STRUCTURE = re.compile(r"for \(|acc\d+ = (0\.0f|-INFINITY);$")


def structure(src: str) -> str:
  """The loops and accumulator initialisations of a kernel; runs of more than 4 initialisations elided."""
  lines = [line for line in src.splitlines() if STRUCTURE.search(line)]
  out, k = [], 0
  while k < len(lines):
    run = k
    while run < len(lines) and "acc" in lines[run] and "for" not in lines[run]: run += 1
    if run - k > 4:
      out += [lines[k], lines[k][:len(lines[k]) - len(lines[k].lstrip())] + "...", lines[run - 1]]; k = run
    else: out.append(lines[k]); k += 1
  return "\n".join(out)


def qk_recompute(kern, n: int) -> float:
  """How many times the kernel computes each q_i . k_j (the plan's count for the (n, n) reduce)."""
  (times,) = [t for u, t in kern.recompute.items() if u.shape == (n, n)]
  return times


q5, k5, v5 = inputs(512)
for on in (True, False):
  with reshape_simplify(on):
    kern = make_plan([fa.attention(Tensor(q5), Tensor(k5), Tensor(v5)).uop], True, fa.FlashOpt).kernels[-1]
    print(structure(kern.src))
    print(f"N=512 reshape-simplify {'on' if on else 'off'}: each q_i . k_j computed {qk_recompute(kern, 512):g} "
          f"times\n")

# %% [markdown]
# With simplification, the row max (`acc2 = -INFINITY`) and row sum (`acc4 = 0.0f`) are initialized once per row
# `ridx0`, before their passes over keys. Without it, they are initialized inside `ridx2`, the key loop of the P V
# product, so both passes over all keys run again for every key of every output pass: the plan's count of
# computations of each q_i . k_j goes from 6 to the thousands printed above, a number that grows with N.
#
# Running the cubic kernel at N = 512 takes seconds per call (the book measured 2211 ms), too long for a notebook
# that must run in three minutes, so we reproduce the timing at N = 256, where the cubic kernel's extra work is half
# as large relative to the fixed one's (it grows as N^3, the fixed one's as N^2). First the outputs, which are the
# same:

# %%
q256, k256, v256 = inputs(256)
ref256 = reference(q256, k256, v256)


def fused256() -> np.ndarray:
  old = Tensor.fuse_reduce, Tensor.opt
  Tensor.fuse_reduce, Tensor.opt = True, fa.FlashOpt
  try: return fa.attention(Tensor(q256), Tensor(k256), Tensor(v256)).numpy()
  finally: Tensor.fuse_reduce, Tensor.opt = old


results, times = {}, {}
for on in (True, False):
  with reshape_simplify(on):
    results[on] = fused256()
    times[on] = best_of(fused256, k=3 if on else 1, warmup=0)   # one slow call is enough for the cubic kernel
print("both match NumPy to 1e-5:", all(np.abs(r - ref256).max() < 1e-5 for r in results.values()))
print("on and off agree to 1e-6:", np.abs(results[True] - results[False]).max() < 1e-6)

# %% [markdown]
# and then the times of those runs (the best of three calls with the fix, one call without it, each after the
# call that compiled it), beside the plan's count of the work:

# %% tags=["nbval-ignore-output"]
counts = {}
for on in (True, False):
  with reshape_simplify(on):
    plan256 = make_plan([fa.attention(Tensor(q256), Tensor(k256), Tensor(v256)).uop], True, fa.FlashOpt)
    counts[on] = qk_recompute(plan256.kernels[-1], 256)
  print(f"N=256 reshape-simplify {'on' if on else 'off'}: {times[on] * 1e3:8.1f} ms, each q_i . k_j computed "
        f"{counts[on]:g} times")
print(f"without the RESHAPE simplify: {times[False] / times[True]:.0f} times slower, "
      f"{counts[False] / counts[True]:.0f} times as many computations of Q K^T")

# %% [markdown]
# Same graph, same answer, and many times slower already at N = 256: the printout gives this run's ratio of times,
# beside the ratio of work, which the time follows only roughly (the extra passes re-read keys that are already in
# cache). The book measured 240 times slower at N = 512, and NOTES 12 recorded 250x.
#
# Two lessons. First, a compiler's analyses are only as good as the canonical form they see: every "which variables
# does this depend on" question must be asked of a simplified expression, or it is answered about the spelling
# instead of the value. Second, this bug produced correct output. No test comparing values against NumPy could catch
# it. Only a performance test (or reading the generated C) could. That is why the course grades performance, and why
# it pays to assert loop structure in tests, as `tests/codegen/test_ch11_flash.py` does: it checks where the row max and
# sum accumulators are initialised, with the patch and without (see Appendix B on testing).
#
# ## 11.6 Online softmax
#
# The fused kernel needed at least three passes over the keys per row (six with FlashOpt) because softmax seems to
# need its row max before it can compute any exponential, and its row sum before it can normalize. Online softmax
# (Milakov and Gimelshein, 2018) removes both dependencies, and FlashAttention (Dao et al., 2022) applies it to
# attention.
#
# Fix one query row. Write $s_j$ for its scores (j = 1..N), $v_j$ for the value rows. The goal is
#
# $$o = \sum_j \mathrm{softmax}(s)_j\, v_j = \frac{\sum_j e^{s_j - m} v_j}{\sum_j e^{s_j - m}},\qquad m = \max_j s_j.$$
#
# (Subtracting m changes nothing mathematically and keeps every exponent at most 0, as in Chapter 9.) Now define
# the same quantities over only the first j keys:
#
# $$m_j = \max(s_1, \dots, s_j),\quad l_j = \sum_{k \le j} e^{s_k - m_j},\quad o_j = \sum_{k \le j} e^{s_k - m_j} v_k$$
#
# so that $o_N / l_N$ is the answer. Can we get from step j - 1 to step j without revisiting old keys? The new
# maximum is easy: $m_j = \max(m_{j-1}, s_j)$. For the sum, every old term was computed relative to the old maximum;
# relative to the new one it is smaller by the factor $e^{m_{j-1} - m_j}$:
#
# $$e^{s_k - m_j} = e^{s_k - m_{j-1}} \cdot e^{m_{j-1} - m_j}.$$
#
# The factor does not depend on k, so it comes out of the sum:
#
# $$l_j = l_{j-1}\, e^{m_{j-1} - m_j} + e^{s_j - m_j}$$
#
# and identically, since each $v_k$ is just carried along,
#
# $$o_j = o_{j-1}\, e^{m_{j-1} - m_j} + e^{s_j - m_j}\, v_j.$$
#
# Start from $m_0 = -\infty$, $l_0 = 0$, $o_0 = 0$ (the first correction factor is $e^{-\infty} = 0$, which
# multiplies zeros anyway). By induction, after N keys $l_N$ and $o_N$ are exactly the two sums above, and one
# division finishes the job. Every key is visited once; the state is two scalars and one D-vector per query row.
# When the maximum does not change, the correction factor is exactly 1; when it grows, everything accumulated so far
# shrinks by the same factor, which is what makes the running sums consistent.
#
# A worked example with one query, three keys and D = 1, as a NumPy script that prints the state after each key and
# compares with the two-pass answer:

# %%
# online softmax, one query, three keys, head dim 1: watch the running state
import numpy as np
s = np.array([1.0, 3.0, 2.0])          # scores q.k_j (already scaled)
v = np.array([10.0, 20.0, 30.0])       # values v_j
m, l, o = -np.inf, 0.0, 0.0
for j in range(3):
  m_new = max(m, s[j])
  corr = np.exp(m - m_new)             # rescale everything accumulated so far
  p = np.exp(s[j] - m_new)
  l = l * corr + p
  o = o * corr + p * v[j]
  m = m_new
  print(f"key {j}: s={s[j]:.0f}  m={m:.0f}  corr={corr:.4f}  p={p:.4f}  l={l:.4f}  o={o:.4f}")
w = np.exp(s - s.max()); w /= w.sum()
print(f"online o/l = {o / l:.6f}   two-pass softmax(s) @ v = {w @ v:.6f}")

# %% [markdown]
# The same algebra merges two partial states, as well as a state and one key. If $(m_1, l_1, o_1)$ summarizes one
# set of keys and $(m_2, l_2, o_2)$ another, then with $m = \max(m_1, m_2)$ the union is
# $(m,\ l_1 e^{m_1 - m} + l_2 e^{m_2 - m},\ o_1 e^{m_1 - m} + o_2 e^{m_2 - m})$. That associativity is what lets GPU
# implementations process keys in blocks, and split long sequences across thread blocks (Exercise 6).
#
# ## 11.7 Implementation 3: online softmax in the loop IR
#
# The Tensor API cannot express a loop-carried running max (there is no "scan" op), so the third implementation is
# written directly in the loop IR of Chapter 5, the way the week-3 assignment wrote GEMMs by hand
# (`examples/flash_attention.py`):

# %%
show(fa.online_attention_ir)

# %% [markdown]
# Walk through it with the online-softmax recurrence in mind.
#
# - **State.** Four ALLOCs: M and L (one float each: the running max and sum), O (D floats: the running output row)
#   and S (one float: the dot-product accumulator). They are call-scope storage, rendered as local variables.
# - **The row loop.** i is a THREAD range: each OpenMP thread owns whole query rows. `Mi = M.after(i)` says "the M
#   that lives inside loop i", which places the declaration inside the parallel loop: each thread gets private
#   state (NOTES 9).
# - **Initialization.** `init_m` stores -inf, `init_l` stores 0, `init_o` zeroes the D floats in a small loop d0.
# - **The key loop j.** First the dot product q_i . k_j, a reduction over e written exactly like the week-3 GEMM:
#   initialize S, accumulate in loop e, END it, read it after the loop. It is scaled by
#   scale = (1/sqrt(D)) * log2(e), because the IR's exponential is EXP2: exp(x) = exp2(x * log2 e), so folding
#   log2 e into the scale makes every later exponential a bare exp2.
# - **The update.** m_new = max(m_old, s), corr = exp2(m_old - m_new), p = exp2(s - m_new), then
#   l = l * corr + p and, in loop d, o[d] = o[d] * corr + p * v[j, d]. Finally m = m_new.
#   `Mj = Mi.after(init_m, j)` is the AFTER-edge idiom from Chapter 4: "read M inside loop j, after its
#   initialization".
# - **Closing the key loop.** `UOp(Ops.SINK, (st_l, st_o, st_m)).end(j)` closes j over all three stores at once; it
#   is the same SINK-under-END shape that merge_ends builds for register tiles.
# - **Normalization.** After the key loop, out[i, d] = o[d] / l in a last loop d2.
#
# All the ordering subtleties ("store the new max only after the old one has been used") are carried by data
# dependencies: `st_m` stores m_new, which is computed from m_old, which was loaded once; corr and p are values, not
# memory reads. The linearizer (Chapter 5) turns this into:

# %%
flash_src = render_c(fa.online_attention_ir(N, D), "flash")
print(flash_src)

# %% [markdown]
# 0.18033688011112042f is log2(e) / 8. `acc2[64]` is the running output row, `acc1` the running sum, `acc0` the
# running max, and `acc3` the dot product; every one of them is declared inside the parallel loop. Each query row
# reads all of K and V (256 KB each), which stay in a core's L2 cache across rows where it holds them (the header at
# the top prints this machine's caches), and nothing N x N exists anywhere. Compiled and run, it matches NumPy:

# %%
q, k, v = inputs(N)   # the worked example above reused the names s, v, p, m, l, o
prg = Program(flash_src, "flash")
o_online = np.zeros(N * D, np.float32)
prg(q, k, v, o_online)
print("online kernel matches NumPy to 1e-5:", np.abs(o_online.reshape(N, D) - ref).max() < 1e-5)

# %% tags=["nbval-ignore-output"]
print(f"max error {np.abs(o_online.reshape(N, D) - ref).max():.1e}; "
      f"wall {bench.interleaved({'online': lambda: prg(q, k, v, o_online)}, reps=5)['online'] * 1e3:.2f} ms, "
      f"single-thread CPU {cpu_best(lambda: prg(q, k, v, o_online)) * 1e3:.2f} ms")

# %% [markdown]
# The two kernels side by side, drawn by `uopc.viz` as their loops (a box per loop, nested as the linearizer nests
# them, a line per store: accumulator updates in red, first values in grey, results in brown), at N = 16 and D = 8 so
# that they fit. On the left the fused kernel of 11.4, made by the book's FlashOpt: the dot product over e is a loop
# inside each of its three key loops (the max pass, the sum pass, the output pass), so Q K^T is computed three times
# per row. On the right the online kernel: one key loop, one dot product per key.

# %%
import uopc.viz as viz
from uopc.viz.loops import loops_svg

small = [Tensor(x) for x in inputs(16, 8)]
small_fused = make_plan([fa.attention(*small).uop], options=Options(fuse_reduce=True, opt=fa.FlashOpt)).kernels[-1]
viz.side_by_side(loops_svg(small_fused.ast), loops_svg(fa.online_attention_ir(16, 8)),
                 captions=[f"fused: {small_fused.name}, recomputes Q K^T x{max(small_fused.recompute.values()):g}",
                           "online: online_attention_ir(16, 8)"])

# %% [markdown]
# ## 11.8 Results
#
# The book's captured runs (D = 64; each time is the best of three after a warm-up, and includes building the graph
# and copying Q, K, V into tensors) were, at N = 1024 and 2048:
#
# ```
# unfused      9.82 ms  err 3.3e-07   (materializes 4.2 MB of scores)
# fused       28.48 ms  err 3.6e-07   (no N*N buffer, QK^T recomputed)
# online      10.00 ms  err 4.0e-07   (one pass, running max/sum)
#
# unfused     35.28 ms  err 3.0e-07   (materializes 16.8 MB of scores)
# fused      103.82 ms  err 3.9e-07   (no N*N buffer, QK^T recomputed)
# online      33.46 ms  err 3.6e-07   (one pass, running max/sum)
# ```
#
# This repository's own captures are `outputs/flash_1024.txt` and `outputs/flash_2048.txt` (`make outputs` rebuilds
# them, with the sweep and plots below, on the instructor's machine). Here we measure the three implementations and
# NumPy (and PyTorch's `scaled_dot_product_attention`, if it is installed) at several N, two ways:
#
# - **wall clock**, with both threads, best of 3 calls or more (as many as fill a quarter of a second), each
#   implementation in a Python process of its own, one after another, so that no other runtime's threads compete
#   with it (`uopc.bench.attention`, whose default method is `uopc.bench.isolated`; it also checks every result
#   against NumPy in float64);
# - **single-thread CPU time**, best of 3 (`cpu_best`): what other processes on the machine do not inflate.
#
# Fused is skipped above N = 2048, where one call takes seconds.

# %% tags=["nbval-ignore-output"]
Ns = [256, 512, 1024, 2048, 4096]
t0 = time.perf_counter()
rows = bench.attention(Ns, [D], reps=3, peers={"fused", "torch"})
wall = {(int(r.case.split()[0][2:]), r.impl): r.seconds for r in rows}

cpu = {}
for n in Ns:
  qn, kn, vn = inputs(n)
  online_prg, o_n = Program(render_c(fa.online_attention_ir(n, D), "flash"), "flash"), np.zeros(n * D, np.float32)

  def tensor_n(fuse: bool, opt):
    def run():
      old = Tensor.fuse_reduce, Tensor.opt
      Tensor.fuse_reduce, Tensor.opt = fuse, opt
      try: return fa.attention(Tensor(qn), Tensor(kn), Tensor(vn)).numpy()
      finally: Tensor.fuse_reduce, Tensor.opt = old
    return run
  impls = {"unfused": tensor_n(False, Tensor.opt), "online": lambda: online_prg(qn, kn, vn, o_n),
           "numpy": lambda: reference(qn, kn, vn)}
  if n <= 2048: impls["fused"] = tensor_n(True, fa.FlashOpt)
  for name, fn in impls.items(): cpu[n, name] = cpu_best(fn, 3)

IMPLS = [x for x in ("unfused", "fused", "online", "numpy", "torch") if any(key[1] == x for key in wall)]
print(f"{'':>6} {'wall clock, 2 threads (ms)':^{13 * len(IMPLS)}} | single-thread CPU (ms)")
print(f"{'N':>6} " + "".join(f"{x:>13}" for x in IMPLS) + " | " + "".join(f"{x:>10}" for x in IMPLS if x != "torch"))
for n in Ns:
  w = "".join(f"{wall[n, x] * 1e3:13.2f}" if (n, x) in wall else f"{'-':>13}" for x in IMPLS)
  c = "".join(f"{cpu[n, x] * 1e3:10.2f}" if (n, x) in cpu else f"{'-':>10}" for x in IMPLS if x != "torch")
  print(f"{n:>6} {w} | {c}")
print(f"\n(sweep took {time.perf_counter() - t0:.0f} s)")

# %% [markdown]
# The same numbers as plots: time against N, log-log, both ways, and the single-thread GFLOP/s of the useful
# 4 N^2 D FLOPs (the fused kernel's recomputation is not counted) under a ceiling measured the same way: one core's
# FP32 FMA peak in single-thread CPU time (`uopc.bench.fma_peak_cpu`: independent chains of FMAs, best of 5). A
# ceiling under a measured kernel would be wrong, and a peak taken while other work shares the cores can come out
# low; so where the peak is below the best point of the curves, the plot draws that point's rate instead and its
# legend says so (`uopc.bench.ceiling`). The first lines printed say which it is here:

# %% tags=["nbval-ignore-output"]
import matplotlib.pyplot as plt

fma = bench.fma_peak_cpu(reps=5)
rates = {f"{x}, N = {n}": 4 * n * n * D / cpu[n, x] / 1e9 for n, x in cpu}
best_point = max(rates, key=rates.get)
roof, roof_is = bench.ceiling(fma, rates)
print(f"one core's FMA peak, single-thread CPU time, best of 5: {fma:.1f} GFLOP/s")
print(f"the best point of the curves: {best_point}, {rates[best_point]:.1f} GFLOP/s")
print(f"ceiling drawn: {roof:.1f} GFLOP/s, {roof_is}")
COLORS = {"unfused": "C0", "fused": "C1", "online": "C2", "numpy": "C3", "torch": "C4"}
fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
for ax, data, title in ((axes[0], wall, "wall clock, 2 threads"), (axes[1], cpu, "single-thread CPU time")):
  for x in IMPLS:
    pts = [(n, data[n, x] * 1e3) for n in Ns if (n, x) in data]
    if pts: ax.loglog(*zip(*pts), "o-", color=COLORS[x], label=x)
  ax.set(xlabel=f"N (sequence length), D = {D}", ylabel="time per call (ms), best of 3",
         title=f"attention: {title} (measured)")
for x in IMPLS:
  pts = [(n, 4 * n * n * D / cpu[n, x] / 1e9) for n in Ns if (n, x) in cpu]
  if pts: axes[2].semilogx(*zip(*pts), "o-", color=COLORS[x], label=x)
axes[2].axhline(roof, color="k", ls="--", label=f"ceiling {roof:.0f} GFLOP/s: {roof_is}")
axes[2].set(xlabel=f"N (sequence length), D = {D}", ylabel="useful GFLOP/s (4 N² D / CPU time)",
            title="attention: GFLOP/s, one thread (measured)", yscale="log", ylim=(1, 2 * roof))
for ax in axes:
  ax.set_xticks(Ns, [str(n) for n in Ns])
  ax.xaxis.set_minor_formatter(plt.NullFormatter())
  ax.grid(True, alpha=0.3)
  ax.legend(fontsize=8, loc="lower right")
fig.suptitle(f"{bench.cpu_model()}, {os.cpu_count()} cores, {bench.machine()['date']}", fontsize=10)
fig.tight_layout()
plt.show()

# %% [markdown]
# The ratios the discussion below refers to, from this run's single-thread CPU times (and wall clock, for the
# record), and each implementation's wall-clock time over its single-thread CPU time:

# %% tags=["nbval-ignore-output"]
def ratio(x: str, n: int) -> str:
  return f"{cpu[n, x] / cpu[n, 'unfused']:5.2f} (wall {wall[n, x] / wall[n, 'unfused']:5.2f})"


for n in (1024, 2048, 4096):
  line = f"N={n:>5}: online / unfused {ratio('online', n)}"
  if (n, "fused") in cpu: line += f"   fused / unfused {ratio('fused', n)}"
  gflops = {x: 4 * n * n * D / cpu[n, x] / 1e9 for x in ("online", "unfused")}
  print(line + f"   single-thread GFLOP/s: online {gflops['online']:5.1f}, unfused {gflops['unfused']:5.1f}")
print("\nwall / single-thread CPU:")
for n in Ns:
  print(f"N={n:>5}: " + "  ".join(f"{x} {wall[n, x] / cpu[n, x]:5.2f}" for x in IMPLS if (n, x) in cpu))

# %% [markdown]
# **Reading the plots, and where this machine differs from the book.** The book says its story has three parts:
# the fully fused kernel is the slowest, by a factor of about three; the unfused version is competitive with the
# online kernel (within noise at 1024, online 5% ahead at 2048); and the online kernel is far from the roofline.
# This run says, from the numbers above:

# %% tags=["nbval-ignore-output"]
def fits(nbytes: int) -> str:
  """Whether S and P (nbytes each) fit together in this machine's L3, in words."""
  size = CACHES.get(3)
  if size is None: return "(this machine's L3 size is unknown)"
  return "they fit in its L3" if 2 * nbytes <= size else "they do not fit in its L3"


def reading() -> str:
  """This run's sweep, in words: what holds of the book's three parts here."""
  fused_at = [n for n in Ns if (n, "fused") in cpu]
  slowest = all(cpu[n, "fused"] >= max(cpu[n, x] for x in IMPLS if (n, x) in cpu) for n in fused_at)
  f = [cpu[n, "fused"] / cpu[n, "unfused"] for n in fused_at]
  big = [n for n in (1024, 2048, 4096) if (n, "online") in cpu]
  o = [cpu[n, "online"] / cpu[n, "unfused"] for n in big]
  if min(o) > 1.1: verdict = "the unfused version beats the online kernel at every N from 1024 on"
  elif max(o) < 0.9: verdict = "the online kernel beats the unfused version at every N from 1024 on"
  else: verdict = "neither wins everywhere from N = 1024 on"
  g = {x: 4 * 1024 * 1024 * D / cpu[1024, x] / 1e9 for x in ("online", "unfused")}
  return "\n".join([
    f"- The fully fused kernel is {'the slowest at every N it ran' if slowest else 'not the slowest everywhere'}: "
    f"{min(f):.1f} to {max(f):.1f} times the unfused version's time.",
    f"- {verdict[0].upper() + verdict[1:]}: the online kernel takes {min(o):.2f} to {max(o):.2f} times the unfused "
    f"version's time.",
    f"- At N = 1024 the online kernel runs at {g['online']:.1f} GFLOP/s on one core, {g['online'] / roof:.0%} of the "
    f"ceiling drawn ({roof:.0f} GFLOP/s) and {g['online'] / g['unfused']:.2f} times the unfused version's rate "
    f"({g['unfused']:.1f} GFLOP/s).",
    f"- This machine's L3 is {CACHES[3] >> 20 if 3 in CACHES else '?'} MB. S and P together are "
    f"{2 * 4 * 2048 ** 2 >> 20} MB at N = 2048: {fits(4 * 2048 ** 2)}; at N = 4096 they are "
    f"{2 * 4 * 4096 ** 2 >> 20} MB: {fits(4 * 4096 ** 2)}."])


say(reading())

# %% [markdown]
# Why the three implementations land where they do:
#
# - **The unfused kernels vectorize; the online kernel cannot.** The book's DEBUG lines (11.3) show its row-sum and
#   P kernels at 1.8-2.3 and 1.9-3.2 ms: they called glibc's scalar `exp2f`. This repository's runtime compiles with
#   reassociation flags and an inline, vectorisable `exp2f` (NOTES 2): compare this run's DEBUG lines in 11.3. Its
#   4x4-tiled Q K^T GEMM is the register tile of Chapter 10. The online kernel's exponentials sit in a loop-carried
#   chain (two `exp2f` per key, each feeding the running max and sum), so vectorising `exp2f` does nothing for it.
# - **The online kernel has no register tile.** Each thread handles one query row, so every k_j and v_j it loads is
#   used for exactly one query, and each score is a 64-long dot product ending in a horizontal sum: its rate, and
#   its fraction of the ceiling, are in the list above.
# - **The N x N traffic is cheap where the cache holds it.** Where S and P fit in the last-level cache (the last line
#   of the list), the six passes of 11.3 mostly hit it, not DRAM.
#
# NumPy's two matmuls are OpenBLAS GEMMs and its softmax is five elementwise passes (12 passes over N x N arrays in
# all, Chapter 1), so it falls behind once its extra passes no longer fit in the cache. Its wall-clock time can be
# far above its CPU time (the wall / CPU ratios above): with two threads, OpenBLAS splits each matmul between them
# and the call waits for both, so when another process holds one of the cores, the call waits for that thread's
# next time slice. The more such waits a call makes, and the shorter the call, the more of its wall-clock time they
# are. NOTES 46 measured the cause: with one OpenBLAS thread (`OPENBLAS_NUM_THREADS=1`) the waiting disappears. The
# single-thread CPU time counts the work alone.
#
# Wall-clock numbers taken while other work shares the two cores also punish the unfused version in a way a quiet
# machine would not: each of its six kernels ends with an OpenMP barrier, and when one of the two threads is
# descheduled, the other waits for it, six times per call. Compare the two panels: the single-thread CPU times are
# the ones to trust for this comparison.
#
# What holds on any machine: the online kernel, which does the least work and moves the least memory, is the only
# one that never materializes or recomputes anything, and its N x N-free memory behaviour matters more as N grows and
# as memory gets scarcer, which is why it wins decisively on GPUs. PyTorch's `scaled_dot_product_attention` (a line of
# the wall-clock panel where PyTorch is installed) is itself an online-softmax kernel on the CPU, but one that
# processes blocks of queries against blocks of keys with matrix-multiply kernels.
#
# Do not overlook how far the online kernel is from the ceiling (its fraction is in the list above). The reason is
# everything Chapter 10 taught: no register tile across queries, and the dot product is a single dependency chain.
# The natural next step is to process a block of queries per thread, so that each loaded key and value row serves
# the whole block: the register tiling of Chapter 10 applied to attention (Exercise 5). That step is precisely what
# FlashAttention does on a GPU.
#
# ## 11.9 How FlashAttention tiles on a GPU
#
# A GPU (Chapter 12) has far more arithmetic per byte of memory bandwidth than this CPU, so an N x N intermediate in
# global memory (HBM) is even more ruinous there. It also has a small, fast, programmer-managed memory per thread
# block, shared memory (SRAM), covered in Chapter 13. FlashAttention (Dao et al., 2022) and FlashAttention-2 (Dao,
# 2023) organize the online softmax around it:
#
# - **Grid.** One thread block per (batch, head, block of B_r query rows). FlashAttention-2 made the query-block
#   dimension the parallel one, so long sequences fill the GPU even at batch size 1.
# - **Load a query block.** The block's B_r x D slice of Q is loaded once and kept on chip.
# - **Loop over key blocks.** For each block of B_c keys: load K_j and V_j (B_c x D each) into shared memory;
#   compute the score tile S = Q_i K_j^T (B_r x B_c) with tensor-core matrix multiplies; update each row's running
#   max m and sum l from the tile; rescale the output accumulator by exp(m_old - m_new) and add exp(S - m_new) V_j.
# - **Finish.** Divide the accumulator by l and write the B_r x D output block. FlashAttention-2 keeps the
#   accumulator unnormalized until this final step (as our kernel does), which saves a division per key block. It
#   also stores each row's log-sum-exp m + log(l).
# - **Backward.** The backward pass needs P, which was never stored. It recomputes S and P block by block from Q, K
#   and the saved log-sum-exp. Recomputing is cheaper than reading an N x N matrix from HBM: the fusion trade of
#   11.1, decided in favour of FLOPs.
#
# The structure is the online softmax of 11.6 with the "block of queries" fix of 11.8 and the shared-memory tiling
# of a GEMM. Everything N x N lives only as a B_r x B_c tile on chip; the remaining cost is two matmuls per tile,
# which tensor cores execute near peak. In uopc terms, the score tile is a WMMA-lowered GEMM (Chapter 13) inside the
# key loop of `online_attention_ir`, with m, l and the O tile held in LOCAL ALLOCs. Writing it is a fine final
# project.
#
# **How much memory traffic is left?** Not O(N D): every block of B_r queries reads all of K and V from global
# memory, N / B_r blocks in all, so K and V alone move 2 N D x N / B_r elements, Θ(N² D / B_r) per head. The
# query block and its accumulators must fit on chip, so B_r is at most about M / D for on-chip memory of M
# elements, which makes the traffic Θ(N² D² / M), the bound of Dao et al. (2022), Theorem 2 (stated there for the
# original FlashAttention's loop order, where each block of keys re-reads Q and O instead). Standard attention moves
# Θ(N D + N²) elements. So FlashAttention's traffic is still quadratic in N, but smaller than the N² scores by a
# factor of about M / D², and no N x N matrix is ever written. Counted for one head with D = 64, in elements: the
# unfused plan of 11.3 (Q, K, V and O once, and its six passes over N x N), and the query-blocked order (Q and O
# once, K and V once per block of B_r = 128 queries):

# %%
B_r = 128
print(f"{'N':>6} {'unfused (6 N^2 + 4 N D)':>24} {'blocked (2 N D + 2 N D N / B_r)':>32} {'ratio':>7}")
for n in (1024, 4096, 16384):
  unfused_el, blocked_el = 6 * n * n + 4 * n * D, 2 * n * D + 2 * n * D * (n // B_r)
  print(f"{n:>6} {unfused_el:>24,} {blocked_el:>32,} {unfused_el / blocked_el:>7.1f}")

# %% [markdown]
# Both columns grow as N²: the ratio between them tends to 3 B_r / D, which is why FlashAttention wants the largest
# query block its on-chip memory allows. The N² D / B_r elements it moves are reads of K and V, streamed in order and
# shared by a whole block of queries; the unfused plan's are writes and re-reads of scores nobody keeps.
#
# ## Pitfalls
#
# - **Unsimplified indices change the loop structure (NOTES 12).** An index that mentions a loop variable it does
#   not depend on (((i*N + j)//N) % N) makes the reduce lowering place an accumulator inside that loop. Fused
#   attention became cubic: 9.2 ms became 2211 ms at N = 512 in the book's reproduction (11.5 reproduces it here at
#   N = 256), with identical output. Simplify indices before any analysis that asks which loops an expression uses,
#   and test performance as well as values.
# - **A fused kernel's passes multiply its recompute.** With D = 64 and FlashOpt's upcast of 16, the fully fused
#   kernel makes four output passes plus two softmax passes, each recomputing Q K^T for the row, and loses to the
#   unfused version (by a factor of three in the book; 11.4 prints this machine's). Before fusing a reduction into a
#   consumer, count how many times the consumer's loops will run the fused reduction (`kernel.recompute` counts it
#   for you).
# - **The label said "no N*N buffer".** In the first version it was wrong: `stage_broadcast_compute` staged P
#   because it is broadcast into P V, so "fused" attention still wrote one N x N buffer. Cost-model rules interact.
#   The fix lets `fuse_reduce=True` skip the broadcast-staging rule (11.4); the general habit is to believe the plan
#   (`make_plan(...).temps`) when it disagrees with a benchmark's description.
# - **Fresh temporaries page-fault.** The first version allocated the plan's temporaries with `np.empty` on every
#   realize, so every call paid a page fault for each page it wrote: in the book's run the S GEMM took 9.7 ms on its
#   first execution and 1.1 ms when re-run on the same memory. Caching the arrays on the Plan (11.3) cut the book's
#   captured unfused time from 28.4 to 9.8 ms. When a kernel that writes a large buffer looks slow, count the page
#   faults of a call (`ru_minflt`, as 11.3 does) and run DEBUG=3 to compare the "again" column, before optimizing its
#   loops; on a busy machine the count is the reliable one.
# - **Online softmax and fully masked rows.** With masking (causal attention sets future scores to -inf), a row whose
#   scores are all -inf gives m_old = m_new = -inf and corr = exp2(-inf - (-inf)) = NaN. Real implementations
#   special-case m_new = -inf (or use a large finite negative instead of -inf). Causal attention never has an empty
#   row, but padding masks can.
# - **Forgetting to rescale o.** Rescaling only l when the maximum grows produces outputs that are subtly wrong (too
#   large weights on early keys) and pass a sloppy test where scores are small and the maximum rarely changes. Test
#   with scores whose maximum appears late in the row, as in the worked example.
# - **Per-thread state must be declared inside the parallel loop (NOTES 9).** The running max, sum and output row of
#   `online_attention_ir` are ALLOCs placed by `.after(i)` inside the THREAD loop. Declared outside, all threads
#   would share one `acc2[64]` and the output would be a race.
#
# ## Exercises
#
# The chapter's exercises are the week-6 assignment, `assignments/week6_flash_attention.ipynb`: each task has
# visible checks (`make check WEEK=6` runs them task by task) and hidden tests, which the grader runs on the
# notebook you hand in. In short:
#
# 1. ★ Size the matrices: S and P at N = 8192 in f32, per head; 12 heads, batch 8.
# 2. ★ Count the passes: predict the fused kernel's passes over the keys for upcasts 8, 16, 32, 64 (11.4 counts
#    them for the book's upcast and for D = 32), then count them in the C.
# 3. ★ Merge two states: prove the merge rule of 11.6 and check it on the worked example split as {0} and {1, 2}.
# 4. ★★ Causal mask, two ways (a masked score, and a key loop whose end depends on i).
# 5. ★★ Query blocking: 4 query rows per iteration of the THREAD loop.
# 6. ★★ (optional, not graded) Flash-decoding: one query, 65,536 keys, split across threads and merged.
# 7. ★★ Upcast the head: FlashOpt with an upcast of 64, and the fused plan with P staged; rank the three.
# 8. ★★ Find the bug: l = l * corr + p but o[d] = o[d] + p * v[j, d].
# 9. ★★★ (optional, not graded) Backward with recompute: dQ, dK, dV from O and the log-sum-exp.
#
# ## Quiz
#
# 1. What are the two costs on either side of a fusion decision?
# 2. Why does unfused attention make six passes over N x N data? Name them.
# 3. With `fuse_reduce=True` and FlashOpt at D = 64, how many times is each q_i . k_j computed, and why?
# 4. Write the recurrences for m_j, l_j and o_j in online softmax.
# 5. Why is the correction factor exp(m_{j-1} - m_j) allowed to multiply the whole running sum?
# 6. In the O(N^3) bug, what did the unsimplified index mention, and why did that move the accumulator?
# 7. Why can a value-comparison test not catch the O(N^3) bug?
# 8. In FlashAttention's backward pass, why is recomputing P cheaper than storing it?
#
# **Answers**
#
# 1. Memory traffic (writing and re-reading the intermediate, plus a launch) against recomputation (FLOPs the fused
#    consumer repeats because it reads each producer value more than once).
# 2. S written by the Q K^T kernel and read by the max, sum and P kernels (four passes); P written by its kernel and
#    read by P V (two passes). The `nxn_passes` cell of 11.3 reads them off the plan.
# 3. Six: once in the max pass, once in the sum pass, and once in each of the four output passes, because the head
#    dimension is upcast 16 at a time and each group of 16 output columns makes its own pass.
# 4. $m_j = \max(m_{j-1}, s_j)$; $l_j = l_{j-1} e^{m_{j-1} - m_j} + e^{s_j - m_j}$;
#    $o_j = o_{j-1} e^{m_{j-1} - m_j} + e^{s_j - m_j} v_j$; answer $o_N / l_N$.
# 5. Every term in the sum was computed relative to $m_{j-1}$; re-expressing each relative to $m_j$ multiplies it by
#    the same factor, independent of k, so the factor comes out of the sum.
# 6. ((i*N + j)//N) % N mentions j; the reduce lowering places accumulators inside every loop the output index
#    mentions, so the row max and sum were recomputed for every j.
# 7. The output is identical (the recomputed reductions give the same values); only the amount of work changes.
#    Only timing or structural assertions on the generated code can detect it.
# 8. Storing P costs O(N^2) writes and reads of slow global memory; recomputing it from Q, K and the saved
#    log-sum-exp costs O(N^2 D) FLOPs on fast tensor cores, block by block, entirely on chip.
#
# ## Full code for this chapter
#
# Every file this chapter builds, exactly as it is in the repository:

# %%
print((ROOT / "examples" / "flash_attention.py").read_text())
