# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # Chapter 1. Why compile?
#
# Over this course you will build **uopc**, a small tensor compiler: a program written with a NumPy-like
# `Tensor` becomes a graph of operations, the graph is cut into kernels, each kernel is lowered to loops,
# the loops are printed as C, and the C is compiled and run on NumPy arrays. By chapter 11 it decides on
# its own whether attention should keep an N x N matrix in memory or never build one.
#
# Why would anyone want that, when NumPy already runs every operation in optimized C? This chapter
# answers with a measurement. You will write attention in NumPy, count what it costs (memory and
# arithmetic), write the timer the rest of the book uses, and time attention against the sequence
# length N. The finished piece of `uopc` this chapter converges to is tiny: `uopc.helpers.best_of`.
#
# The numbers below were measured on this machine:

# %% tags=["nbval-ignore-output"]
import datetime
import os
import platform
import re
import subprocess


def cpu_model() -> str:
  try: return re.search(r"^model name\s*:\s*(.*)$", open("/proc/cpuinfo").read(), re.M).group(1)
  except (OSError, AttributeError): return platform.processor() or platform.machine()


cc = os.environ.get("CC", "cc")
print(f"CPU:      {cpu_model()}")
print(f"cores:    {os.cpu_count()} (this process may use {len(os.sched_getaffinity(0))})")
print(f"compiler: {subprocess.run([cc, '--version'], capture_output=True, text=True).stdout.splitlines()[0]}")
print(f"Python:   {platform.python_version()}")
print(f"date:     {datetime.date.today()}")

# %% [markdown]
# ## 1.1 Attention in NumPy
#
# Attention takes three matrices, queries Q, keys K and values V, each N x D (N positions in a sequence,
# D features per position; D = 64 is typical), and computes
#
# $$\mathrm{out} = \mathrm{softmax}\!\left(\frac{Q K^T}{\sqrt{D}}\right) V,$$
#
# where the softmax normalizes each row: $\mathrm{softmax}(s)_j = e^{s_j} / \sum_l e^{s_l}$. Two N x N
# matrices appear on the way: the scores S = QK^T / sqrt(D) and the probabilities P = softmax(S).
# Subtracting each row's maximum before the exponential changes nothing mathematically
# ($e^{s_j - m} / \sum_l e^{s_l - m}$) but keeps `exp` from overflowing.

# %%
import math
import numpy as np


def attention(q, k, v):
  """softmax(q k^T / sqrt(D)) v for (N, D) arrays."""
  s = q @ k.T * (1 / math.sqrt(q.shape[-1]))          # (N, N) scores S
  p = np.exp(s - s.max(axis=-1, keepdims=True))       # (N, N) unnormalized probabilities
  return (p / p.sum(axis=-1, keepdims=True)) @ v      # (N, D)


rng = np.random.default_rng(0)
N, D = 1024, 64
q, k, v = (rng.standard_normal((N, D), dtype=np.float32) for _ in range(3))
out = attention(q, k, v)
print(out.shape, out.dtype)

# %% [markdown]
# Is it right? A test needs a reference, and the best reference for float32 code is the same formula in
# float64, where rounding errors are about $10^{-16}$ instead of $10^{-7}$. (Every optimized kernel in this
# book is tested this way: against a slow, obviously correct version.)

# %%
ref = attention(q.astype(np.float64), k.astype(np.float64), v.astype(np.float64))
err = np.abs(out - ref).max()
assert err < 1e-5, err
print("float32 attention agrees with the float64 reference to 1e-5")

# %% [markdown]
# The exact error depends on the order in which the matrix multiply adds its products, which depends on
# the BLAS library and the CPU, so it is printed in a cell whose output the tests ignore:

# %% tags=["nbval-ignore-output"]
print(f"max |out - ref| = {err:.1e}")

# %% [markdown]
# ## 1.2 What attention costs, before timing anything
#
# Count, for D = 64 and growing N:
# - **memory**: S and P are N x N float32 arrays, 4N² bytes each;
# - **arithmetic**: QK^T and PV are each N² dot products of length D, 2D FLOPs (a multiply and an add)
#   each, so 4N²D FLOPs in all (the softmax adds a handful of operations per element of S, which is small
#   next to 2D = 128);
# - **arithmetic intensity**: FLOPs per byte moved to and from memory. If S and P are written to memory
#   once and read back once, that is 16N² bytes, plus 16ND bytes to read Q, K, V and write the output.
#   If S and P never reach memory (they live in registers or cache, a row at a time), only the 16ND bytes
#   remain.
#
# These numbers are computed, not measured, so they are the same on every machine.

# %%
def cost(N: int, D: int = 64) -> dict:
  sp_bytes = 2 * 4 * N * N                  # S and P, float32
  io_bytes = 4 * 4 * N * D                  # read Q, K, V; write out
  flops = 4 * N * N * D                     # QK^T and PV, 2D FLOPs per dot product
  return dict(N=N, sp_bytes=sp_bytes, flops=flops,
              ai_unfused=flops / (2 * sp_bytes + io_bytes),   # S and P each written once and read once
              ai_fused=flops / io_bytes)                     # S and P never leave the chip


print(f"{'N':>6} {'S (MiB)':>9} {'S+P (MiB)':>10} {'GFLOP':>7}", end="")
print(f" {'FLOP/byte, S,P in memory':>25} {'FLOP/byte, fused':>17}")
for n in (1024, 2048, 4096, 8192, 16384):
  c = cost(n)
  print(f"{n:>6} {c['sp_bytes'] / 2 / 2**20:>9.0f} {c['sp_bytes'] / 2**20:>10.0f} {c['flops'] / 1e9:>7.1f}"
        f" {c['ai_unfused']:>25.1f} {c['ai_fused']:>17.0f}")

# %% [markdown]
# Three things to read in this table:
# - The N x N matrices grow as N². At N = 4096 S alone is 64 MiB, more than the last-level cache of most
#   CPUs, so every pass over it goes to DRAM; at N = 16384 S and P need 2 GiB.
# - With S and P in memory, the intensity is stuck near D/4 = 16 FLOP/byte however large N gets: work and
#   traffic both grow as N². How much arithmetic a CPU can do per byte that DRAM delivers is its balance point
#   (Chapter 10 draws it as a roofline and measures this machine's "ridge"); 16 FLOP/byte is of that order on
#   many CPUs, so even this best case for unfused attention leaves little room, and a kernel below the balance
#   point gains nothing from more cores or wider vectors: its arithmetic waits for memory.
# - If S and P never reach memory, the intensity grows as N/4. The arithmetic is the same; only where the
#   intermediates live changes. Getting there means fusing the matmul, the softmax and the second matmul
#   into one loop nest, which no library call does for you. Chapter 11 does it with the compiler you build.
#
# And the table is optimistic about NumPy: `attention` above makes 12 passes over N x N arrays, not 4
# (the first matmul writes S; scaling reads and writes it; the max reads it; the subtraction reads and
# writes; `exp` reads and writes; the sum reads; the division reads and writes; the second matmul reads):
# every NumPy operation is a separate loop with its own temporary. Its real intensity is about 4N²D / 48N²
# = D/12, about 5 FLOP/byte: on the memory side of the balance of most CPUs (Chapter 10's ridge for this
# machine is the measurement to compare it with).

# %% [markdown]
# ## 1.3 A timer
#
# Timing a piece of code once tells you little: the first call pays for page faults on freshly allocated
# memory, for starting BLAS threads, for cold caches; any call can be slowed by another process. Noise
# only ever *adds* time, so the minimum of several runs, after a warm-up call, is the most repeatable
# estimate of what the code itself costs. `time.perf_counter` is the clock to use: monotonic, and the
# finest resolution the system has.

# %%
import time


def best_of(fn, k: int = 5, warmup: int = 1) -> float:
  """Seconds of the fastest of k calls to fn(), after `warmup` untimed calls."""
  for _ in range(warmup): fn()
  best = math.inf
  for _ in range(k):
    t0 = time.perf_counter()
    fn()
    best = min(best, time.perf_counter() - t0)
  return best


# %% [markdown]
# The same function, written once for the whole book, is `uopc.helpers.best_of`:

# %%
from uopc.helpers import best_of as uopc_best_of
print(uopc_best_of.__doc__)

# %% tags=["nbval-ignore-output"]
first = time.perf_counter(); attention(q, k, v); first = time.perf_counter() - first
print(f"one call:            {first * 1e3:.2f} ms")
print(f"best of 5 (ours):    {best_of(lambda: attention(q, k, v)) * 1e3:.2f} ms")
print(f"best of 5 (uopc):    {uopc_best_of(lambda: attention(q, k, v)) * 1e3:.2f} ms")

# %% [markdown]
# ## 1.4 Time against N
#
# Now time attention at N = 256 ... 2048 (D = 64), split into its three steps so we see where the time
# goes: the scores S = QK^T / sqrt(D) (a matrix multiply), the softmax (elementwise passes over N x N
# arrays, no multiply-adds to speak of), and PV (a matrix multiply with the same FLOP count as QK^T).

# %% tags=["nbval-ignore-output"]
def scores(q, k): return q @ k.T * (1 / math.sqrt(q.shape[-1]))
def softmax(s):
  p = np.exp(s - s.max(axis=-1, keepdims=True))
  return p / p.sum(axis=-1, keepdims=True)


Ns = [256, 512, 1024, 2048]
times = {"QK^T": [], "softmax": [], "PV": [], "total": []}
for n in Ns:
  qn, kn, vn = (rng.standard_normal((n, 64), dtype=np.float32) for _ in range(3))
  s = scores(qn, kn); p = softmax(s)
  times["QK^T"].append(best_of(lambda: scores(qn, kn)))
  times["softmax"].append(best_of(lambda: softmax(s)))
  times["PV"].append(best_of(lambda: p @ vn))
  times["total"].append(best_of(lambda: attention(qn, kn, vn)))

print(f"{'N':>5} " + " ".join(f"{name:>10}" for name in times) + "   (ms)   GFLOP/s of QK^T")
for i, n in enumerate(Ns):
  print(f"{n:>5} " + " ".join(f"{t[i] * 1e3:>10.2f}" for t in times.values())
        + f"   {2 * n * n * 64 / times['QK^T'][i] / 1e9:>18.1f}")
# for comparison: a square float32 matrix multiply, 2 * 1024^3 FLOPs
a, b = (rng.standard_normal((1024, 1024), dtype=np.float32) for _ in range(2))
print(f"1024 x 1024 x 1024 matmul: {2 * 1024**3 / best_of(lambda: a @ b) / 1e9:.1f} GFLOP/s")

# %%
import matplotlib.pyplot as plt

fig, (ax_t, ax_b) = plt.subplots(1, 2, figsize=(11, 4))
for name, ts in times.items():
  ax_t.loglog(Ns, [t * 1e3 for t in ts], "o-", label=name, lw=2.5 if name == "total" else 1.5)
ax_t.loglog(Ns, [times["total"][-1] * 1e3 * (n / Ns[-1]) ** 2 for n in Ns], "k--", lw=1, label="∝ N²")
ax_t.set(xlabel="N (sequence length), D = 64", ylabel="time (ms), best of 5", title="NumPy attention (measured)")
ax_t.set_xticks(Ns, [str(n) for n in Ns], minor=False)
ax_t.legend()
big = [1024, 2048, 4096, 8192, 16384]
ax_b.loglog(big, [12 * 4 * n * n / 2**20 for n in big], "o-", label="NumPy: 12 passes over N x N")
ax_b.loglog(big, [cost(n)["sp_bytes"] * 2 / 2**20 for n in big], "o-", label="S, P written and read once")
ax_b.loglog(big, [16 * n * 64 / 2**20 for n in big], "o-", label="fused: Q, K, V, out only")
ax_b.set(xlabel="N (sequence length), D = 64", ylabel="bytes moved (MiB)", title="memory traffic (counted)")
ax_b.set_xticks(big, [str(n) for n in big], minor=False)
ax_b.legend()
for ax in (ax_t, ax_b): ax.xaxis.set_minor_formatter(plt.NullFormatter())
fig.tight_layout()
plt.show()

# %% [markdown]
# Reading the plot (the measured curves on the left come from the machine printed at the top; the counts
# on the right are the same everywhere):
# - Past the smallest sizes the total grows at least as fast as the N² guide (faster where the N x N arrays
#   outgrow the caches): attention is quadratic in N, in time as well as in memory.
# - The softmax does a few operations per element of S while each matmul does 2D = 128 per element, yet
#   the softmax is not cheaper in proportion to its arithmetic: compare its curve with QK^T's. Its time goes
#   into moving N x N arrays through memory, pass after pass, not into arithmetic. Compare the GFLOP/s of QK^T with the
#   square matrix multiply's too: with an inner dimension of only 64, each element of S gets 128 FLOPs
#   of work and then has to be written out (and our `scores` reads and writes it once more to scale it).
# - On the right: the traffic of the unfused program grows as N², the fused one only as N. That gap, not
#   a faster `exp`, is what a compiler can buy back, and it is why the course builds one.

# %% [markdown]
# ## Pitfalls
# - **Timing the first call.** It includes page faults on new memory and thread start-up; use a warm-up
#   and the best of several runs.
# - **Comparing float32 results with `==`.** Different summation orders give different roundings. Compare
#   with a float64 reference and a tolerance that fits float32 (here 1e-5 on values of order 1).
# - **Promoting to float64 by accident.** `q @ k.T / np.sqrt(D)` divides by a NumPy float64 scalar, and
#   NumPy 2 then makes the whole N x N result float64: twice the bytes, and no longer float32 attention.
#   A Python float (`math.sqrt`) keeps the array's dtype:

# %%
print((q @ k.T / np.sqrt(D)).dtype, (q @ k.T / math.sqrt(D)).dtype)

# %% [markdown]
# - **Forgetting the max subtraction.** `np.exp` of a score above about 88 overflows float32 to `inf`,
#   and `inf / inf` is `nan`. With the row max subtracted every exponent is at most 0.
# - **Measuring on a busy machine.** Other processes, and BLAS threads competing with them, add time that
#   is not yours; the best-of-k minimum is robust to some of this, not all of it.
#
# ## Exercises
# 1. Recompute the cost table for D = 128. Two columns change: the GFLOP doubles, and the intensity with S and P
#    in memory nearly doubles (towards D/4 = 32); the sizes of S and P and the fused intensity (N/4) stay as
#    they are. Explain each from the formulas in `cost`.
# 2. Rewrite `attention` with in-place operations (`np.exp(s, out=s)`, `s -= ...`, `s /= ...`) so that
#    fewer N x N temporaries are allocated. Count the passes again and time it against N. How much of the
#    softmax time goes away?
# 3. Compute attention a block of 128 query rows at a time, so that no N x N array exists. Check it
#    against the reference, then time it at N = 2048 and N = 8192. What is its peak memory?
# 4. Estimate your machine's memory bandwidth with `best_of` on `np.copyto(b, a)` for two 256 MiB arrays,
#    then predict the softmax time at N = 2048 from its passes over S. How close is the prediction?
# 5. Start a new kernel with `OPENBLAS_NUM_THREADS=1` (or `OMP_NUM_THREADS=1`) set before NumPy is
#    imported, and time the three steps again. Which step speeds up with more threads, and why?
