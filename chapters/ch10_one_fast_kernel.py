# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # Chapter 10. One fast kernel
#
# Chapters 6 to 9 made uopc *correct*: a Tensor program becomes kernels, each kernel becomes loops, the loops
# become C, and the answers match NumPy. This chapter makes one kernel *fast*, and the kernel is the one that
# matters most: the matrix multiply (GEMM), which does nearly all of the arithmetic of attention and of a GPT.
# You will
# - measure the two limits of this machine, its arithmetic peak and its memory bandwidth, and draw them as a
#   **roofline**, the chart on which every kernel in the rest of the book is placed;
# - write a **register-tiled** GEMM by hand, as a C string, and see why it is several times faster than the
#   obvious loop although it does exactly the same arithmetic;
# - take uopc's GEMM from the naive loop nest to a threaded register tile with three **opts** (upcast, unroll,
#   thread), printing the C after each step and placing each step on the roofline;
# - read the **compiler flags** and the inline `exp2f` that let the C compiler vectorise what uopc prints, and the
#   **layout pass**, which copies an operand so that a reduction reads it contiguously;
# - place the six kernels of the unfused attention (Chapter 11) on the same roofline, and compare the GEMM
#   with NumPy's BLAS.
#
# The finished pieces are `uopc.rangeify` (`Opts`, `lower`), `uopc.opt` (`default_opts`, `layout_pass`),
# `uopc.runtime` (`FLAGS`, `PRELUDE`) and `uopc.bench` (`peak`, `gemm`). Every timing in this notebook was
# measured on the machine below, while other work shared its two cores: read the timings as "measured under
# load", and trust ratios measured in one run more than absolute numbers.

# %% tags=["nbval-ignore-output"]
from uopc.bench import header
print(header())

# %% [markdown]
# ## 10.1 The roofline
#
# A kernel does some number of floating-point operations (FLOPs) and moves some number of bytes between memory
# and the processor. Neither can go faster than the hardware allows, so its time is at least
#
# $$t \ge \max\left(\frac{\text{FLOPs}}{\text{peak FLOP/s}},\ \frac{\text{bytes}}{\text{bandwidth}}\right).$$
#
# Divide the FLOPs by that time and write $I$ = FLOPs / bytes, the kernel's **arithmetic intensity**: the
# attainable rate is $\min(\text{peak},\ I \times \text{bandwidth})$. On a log-log plot of rate against
# intensity that is two straight lines, a diagonal (memory-bound: each byte brings only $I$ FLOPs of work) and a
# horizontal roof (compute-bound). They meet at the **ridge point**, peak / bandwidth FLOP/byte. A kernel to
# the left of the ridge can only go faster by moving fewer bytes; a kernel to the right, by doing its
# arithmetic better.
#
# `uopc.bench.peak` measures both lines with two small generated C kernels (read them in `uopc/bench/__init__.py`):
# - `fma_peak`: per thread, independent chains of vector fused multiply-adds (FMA, `x = x * b + c`), as wide as
#   the machine's vectors and as many as hide the FMA's latency on every unit without running out of registers
#   (`uopc.runtime.machine`'s table: ten chains of 16 floats with AVX-512, twelve of 8 with AVX2). 2 FLOPs per lane
#   per FMA.
# - `triad`: the STREAM triad `a[i] = b[i] + 3 * c[i]` over three 128 MB arrays, far larger than any cache, so
#   every byte comes from DRAM. 12 bytes per element.

# %% tags=["nbval-ignore-output"]
from uopc.bench import peak

roof = peak(reps=5)
FMA, BW = roof["fma_gflops"], roof["triad_gbs"]   # GFLOP/s and GB/s
print(f"FP32 FMA peak  {FMA:8.1f} GFLOP/s")
print(f"memory (triad) {BW:8.1f} GB/s")
print(f"ridge point    {FMA / BW:8.1f} FLOP/byte")

# %% [markdown]
# The ridge point says how much arithmetic a kernel must do per byte of DRAM traffic before memory stops being
# its limit. On this machine it is the ridge printed above (per byte; four times that per float loaded): any kernel
# that does a handful of operations per element (an elementwise op, a softmax, a row sum) is memory-bound, and
# its best possible speed is set by the bandwidth line, not by the peak.
#
# A GEMM is the opposite. Multiplying two N x N matrices does $2N^3$ FLOPs (a multiply and an add for each
# of $N^3$ products) and, at the least, reads two matrices and writes one: $3 \cdot 4N^2$ bytes. Its
# intensity, $N/6$, grows with N:

# %%
print(f"{'N':>6} {'GFLOP':>8} {'MB moved (at least)':>20} {'FLOP/byte':>10}")
for n in (64, 256, 1024, 4096):
  flops, nbytes = 2 * n ** 3, 3 * 4 * n * n
  print(f"{n:>6} {flops / 1e9:>8.3f} {nbytes / 1e6:>20.2f} {flops / nbytes:>10.1f}")

# %% [markdown]
# Against this machine's ridge (measured above), each size's intensity is:

# %% tags=["nbval-ignore-output"]
print(", ".join(f"N = {n}: {n / 6 / (FMA / BW):.1f}x the ridge" for n in (64, 256, 1024, 4096)))

# %% [markdown]
# A small GEMM sits near the ridge, but the intensity grows with N and soon leaves the ridge far behind: for the
# sizes this chapter times (N = 512 and 1024), memory bandwidth is not a GEMM's excuse. Whatever gap remains
# between such a GEMM and the roof is the code's fault, and the rest of this chapter closes as much of it as
# uopc can.
#
# ## 10.2 A register tile, from scratch
#
# The minimum traffic above assumes every value is loaded from memory once. The obvious loop nest, one output
# element at a time, does not come close:
#
# ```c
# for (i) for (j) { acc = 0; for (r) acc += A[i][r] * B[r][j]; C[i][j] = acc; }
# ```
#
# Each multiply-add in the inner loop needs two loads, one value of A and one of B. A core issues only a few loads
# per cycle (two or three on current x86 cores), against two vector FMAs of 8 or 16 lanes each, 32 FLOPs or more
# per cycle: an inner loop with two loads per FMA runs at the speed of its loads, however fast the cache is. The
# fix is to compute a small **tile** of outputs at once, TM rows by TN columns, with TM x TN accumulators held in
# registers. Per step of the reduce loop, the tile loads TM values of A and TN values of B, and each loaded value
# is used by TN (or TM) accumulators: TM + TN loads feed TM x TN multiply-adds. A 4x4 tile needs 8 loads for 16
# FMAs, four times fewer per FMA than the plain loop.
#
# Below, `tiled_gemm_c` writes such a kernel as a C string. B is passed **transposed** (`bt`, M x K) so that
# both operands are read along the reduce axis with stride 1, which lets the compiler vectorise the reduce loop
# (10.6 shows why uopc arranges the same). Sizes are compiled in as constants, and the tile must divide them.

# %%
import numpy as np
from uopc.runtime import Program


def tiled_gemm_c(n: int, m: int, k: int, tm: int, tn: int, name: str = "gemm") -> str:
  """C[i, j] = sum_r A[i, r] * BT[j, r], in tm x tn tiles of outputs, each tile's accumulators in registers."""
  assert n % tm == 0 and m % tn == 0, "the tile must divide the output"
  tile = [(x, y) for x in range(tm) for y in range(tn)]
  lines = [f"void {name}(const float* restrict a, const float* restrict bt, float* restrict c) {{",
           f"  for (int i = 0; i < {n}; i += {tm}) {{",
           f"    for (int j = 0; j < {m}; j += {tn}) {{",
           *[f"      float acc{x}{y} = 0.0f;" for x, y in tile],
           f"      for (int r = 0; r < {k}; r++) {{",
           *[f"        float a{x} = a[(i + {x}) * {k} + r];" for x in range(tm)],    # tm loads ...
           *[f"        float b{y} = bt[(j + {y}) * {k} + r];" for y in range(tn)],   # ... and tn loads
           *[f"        acc{x}{y} += a{x} * b{y};" for x, y in tile],                # feed tm * tn FMAs
           "      }",
           *[f"      c[(i + {x}) * {m} + j + {y}] = acc{x}{y};" for x, y in tile],
           "    }", "  }", "}"]
  return "\n".join(lines)


print(tiled_gemm_c(8, 8, 8, 2, 2))

# %% [markdown]
# Test it against NumPy, for the plain loop (a 1x1 tile) and a few tiles, on sizes that are not powers of two.
# As in every chapter, the reference is float64 and the tolerance fits float32 sums of 40 products:

# %%
rng = np.random.default_rng(0)
A, Bm = rng.standard_normal((24, 40), dtype=np.float32), rng.standard_normal((40, 36), dtype=np.float32)
ref = A.astype(np.float64) @ Bm
for tm, tn in [(1, 1), (2, 2), (4, 4), (2, 6), (8, 4)]:
  prg = Program(tiled_gemm_c(24, 36, 40, tm, tn, f"gemm_{tm}x{tn}"), f"gemm_{tm}x{tn}")
  out = np.zeros((24, 36), np.float32)
  prg(A, np.ascontiguousarray(Bm.T), out)
  assert np.allclose(out, ref, rtol=1e-5, atol=1e-5)
  print(f"{tm}x{tn} tile matches NumPy")

# %% [markdown]
# Now time the plain loop and the tiles at N = 512, one thread (there is no `omp` pragma in this kernel). The
# timer is Chapter 1's best-of-k, with k chosen so that each measurement takes about half a second: a short
# kernel gets many tries at a quiet moment of a busy machine.

# %%
from uopc.helpers import best_of


def best_time(fn, budget: float = 0.5) -> float:
  """Best-of-k seconds of fn() after a warm-up call, with k (3 to 100) sized to spend about `budget` seconds."""
  fn()
  t = best_of(fn, k=1, warmup=0)
  return min(t, best_of(fn, k=max(3, min(100, int(budget / max(t, 1e-6)))), warmup=0))


# %% tags=["nbval-ignore-output"]
n = 512
A, Bm = rng.standard_normal((n, n), dtype=np.float32), rng.standard_normal((n, n), dtype=np.float32)
BT, out = np.ascontiguousarray(Bm.T), np.zeros((n, n), np.float32)
scratch = {}
for tm, tn in [(1, 1), (2, 2), (4, 4)]:
  prg = Program(tiled_gemm_c(n, n, n, tm, tn, f"gemm_{tm}x{tn}"), f"gemm_{tm}x{tn}")
  t = best_time(lambda: prg(A, BT, out))
  scratch[f"{tm}x{tn}"] = 2 * n ** 3 / t / 1e9
  print(f"{tm}x{tn} tile: {t * 1e3:7.2f} ms {scratch[f'{tm}x{tn}']:7.1f} GFLOP/s   "
        f"{(tm + tn) / (tm * tn):.2f} loads per FMA")

# %% [markdown]
# Same FLOPs, same bytes in memory, same intensity; the tiled kernels are faster because each value they load
# does more work before it is dropped. Counting loads per FMA is a roofline too, one level up: registers against
# the L1 cache instead of the caches against DRAM.
#
# ## 10.3 The same GEMM in uopc, one opt at a time
#
# uopc gets the same result without anyone writing C. The GEMM is one tensor-level kernel body, built once: a
# REDUCE (add over the last axis) of a MUL of two EXPANDed buffers, A viewed as (N, 1, K) and B^T as (1, M, K),
# both broadcast to (N, M, K). That is what `Tensor(a) @ Tensor(b)` builds too (Chapter 9), once the layout pass
# (10.6) has made B^T contiguous. `lower(body, out, Ctx(opts=...))` turns it into a loop program, and the
# **opts** say how to shape its loops:
#
# | opt | what it does to the loops | in the C |
# |---|---|---|
# | `thread=k` | output axis k is the loop OpenMP splits across threads | `#pragma omp parallel for` on it |
# | `upcast={k: f}` | output axis k is unrolled by f into registers | f accumulators, one reduce loop |
# | `unroll=f` | the last reduce axis is unrolled by f | 1/f as many trips, a tree of f products |

# %%
from uopc.dtype import dtypes
from uopc.rangeify import Ctx, Opts, lower
from uopc.render_c import render_c
from uopc.uop import Ops, ParamArg, UOp


def buffer(slot: int, size: int) -> UOp:
  return UOp(Ops.BUFFER, (), ParamArg(slot, dtypes.f32, (size,)))


def gemm_body(n: int, m: int, k: int) -> UOp:
  """sum_r A[i, r] * BT[j, r], shape (n, m): A is data0 (n*k floats), B^T is data1 (m*k floats)."""
  a = UOp(Ops.EXPAND, (UOp(Ops.RESHAPE, (buffer(0, n * k),), (n, 1, k)),), (n, m, k))   # (n, m, k), a[i, r]
  b = UOp(Ops.EXPAND, (UOp(Ops.RESHAPE, (buffer(1, m * k),), (1, m, k)),), (n, m, k))   # (n, m, k), bt[j, r]
  return UOp(Ops.REDUCE, (a * b,), (Ops.ADD, 1))                                         # (n, m)


def gemm_c(opts: Opts, n: int = 64) -> str:
  body, out = gemm_body(n, n, n), buffer(2, n * n)
  return render_c(lower(body, out, Ctx(opts=opts)), f"r_{n}_{n}")


STEPS = {"naive": Opts(thread=None), "threads": Opts(thread=0),
         "4x4 tile": Opts(upcast={0: 4, 1: 4}, thread=None), "4x4 tile + threads": Opts(upcast={0: 4, 1: 4}, thread=0)}
print(gemm_c(STEPS["naive"]))

# %% [markdown]
# **Step 0, naive.** Three loops, one accumulator (`acc0`, declared inside both output loops: Chapter 6's
# placement rule), two loads per multiply-add. Both loads walk their buffer with stride 1 in `ridx2`, which
# matters in 10.5.
#
# **Step 1, threads** (`thread=0`): the output axis 0 becomes a THREAD range, and the renderer writes one pragma
# above its loop. Everything else is unchanged: each thread computes whole rows of C, and everything a row
# needs (its accumulator) is declared inside the parallel loop, so it is private to the thread (NOTES 9).

# %%
print(gemm_c(STEPS["threads"]))

# %% [markdown]
# **Step 2, the 4x4 register tile** (`upcast={0: 4, 1: 4}`): both output axes are unrolled by 4. The output
# loops run 64/4 = 16 trips each, and inside them there are sixteen accumulators, `acc0` to `acc15`, and one
# reduce loop that updates all sixteen:

# %%
print(gemm_c(STEPS["4x4 tile"]))

# %% [markdown]
# Read the reduce loop: `val5 = data0[alu4]` is a value of A, and the next four updates (`acc0` to `acc3`) all
# use it; `val7 = data1[alu6]` is a value of B^T, and `acc0`, `acc4`, `acc8` and `acc12` use it. Eight loads
# feed sixteen multiply-adds, exactly as in `tiled_gemm_c(..., 4, 4)`. The same count, made by reading the C:

# %%
import re


def reduce_loop(src: str) -> list[str]:
  """The statements of the innermost loop (the reduce loop of a GEMM)."""
  lines = [s.strip() for s in src.splitlines()]
  start = max(k for k, s in enumerate(lines) if s.startswith("for ("))
  return lines[start + 1:lines.index("}", start)]


tile_src = gemm_c(STEPS["4x4 tile"])
body = reduce_loop(tile_src)
loads = [m.groups() for s in body if (m := re.fullmatch(r"float (val\d+) = (data\d)\[.*", s))]
for val, buf in loads:
  users = [m.group(1) for s in body if (m := re.match(r"(acc\d+) = ", s)) and re.search(rf"\b{val}\b", s)]
  print(f"{val} ({'A' if buf == 'data0' else 'B^T'}) feeds {' '.join(users)}")
print(f"{len(loads)} loads, {sum(s.startswith('acc') for s in body)} accumulator updates per trip")

# %% [markdown]
# How did one reduce loop come out, rather than sixteen? `lower` asks rangeify for the value of the body at
# sixteen indices, `(4*ridx0 + x, 4*ridx1 + y)` for x, y < 4. Each request reaches the REDUCE, and `_reduce`
# keys the reduce loop it creates by the REDUCE and the *loop variables* in the index (`rkey` in
# `uopc/rangeify.py`); the sixteen indices differ only by constants, so they share one key and one loop
# `ridx2`. Their loads are shared by hash-consing (Chapter 3): the value of A that row x needs does not depend on
# the column, so the four accumulators of that row ask for the same LOAD, which is one UOp and is loaded once.
# Then `merge_ends` closes the output loops over all sixteen stores at once (the SINK under the END in `lower`).
#
# **Step 3, tile + threads**: the same C plus the pragma. Only the differences from step 2:

# %%
import difflib

diff = difflib.unified_diff(tile_src.splitlines(), gemm_c(STEPS["4x4 tile + threads"]).splitlines(), lineterm="", n=1)
print("\n".join(list(diff)[2:]))

# %% [markdown]
# **Unroll**, the third opt, works on the reduce axis instead: `unroll=4` makes the reduce loop take 4 steps of
# r per trip (16 trips instead of 64) and combines the 4 products as a balanced tree, `(p0 + p1) + (p2 + p3)`,
# before adding them to the accumulator. The tree has depth 2 where a chain of additions would have depth 4, so
# more of the additions can run at the same time:

# %%
print(gemm_c(Opts(unroll=4, thread=None)))

# %% [markdown]
# The default optimizer (10.7) does not unroll: with the flags of 10.5 the C compiler already splits the
# reduction across vector lanes, which does the same job, and the tiles with an unrolled reduce axis measured
# no better than the plain 4x4 tile (NOTES 4). It is there to experiment with (exercise 3).
#
# ## 10.4 How fast is each step?
#
# Time each step at N = 1024 (2N³ FLOPs per multiply), best of at least 3 after a warm-up, with all cores, and check
# each result against NumPy first. A fast wrong kernel is worth nothing.

# %% tags=["nbval-ignore-output"]
N = 1024
A, Bm = rng.standard_normal((N, N), dtype=np.float32), rng.standard_normal((N, N), dtype=np.float32)
BT, C = np.ascontiguousarray(Bm.T), np.zeros((N, N), np.float32)
ref = A @ Bm
gemm_rate = {}
for name, opts in STEPS.items():
  prg = Program(gemm_c(opts, N), f"r_{N}_{N}")
  prg(A, BT, C)
  assert np.allclose(C, ref, rtol=1e-3, atol=1e-3), name
  t = best_time(lambda: prg(A, BT, C))
  gemm_rate[name] = 2 * N ** 3 / t / 1e9
  print(f"{name:20s} {t * 1e3:8.2f} ms {gemm_rate[name]:7.1f} GFLOP/s  {gemm_rate[name] / FMA:6.1%} of peak")

# %% [markdown]
# Place the steps on the roofline. All four have the same intensity (same FLOPs, same minimum traffic: N/6
# FLOP/byte), so they stack up on one vertical line, far right of the ridge: the distance from each point
# to the roof is what the code leaves on the table.

# %%
import matplotlib.pyplot as plt


def roofline(ax, points: dict[str, tuple[float, float]], marker: str = "o", title: str = "") -> None:
  """The two measured lines, and each point (intensity FLOP/byte, rate GFLOP/s) labelled."""
  intensity = np.logspace(-2, 3.3, 200)
  ax.loglog(intensity, np.minimum(FMA, intensity * BW), "k-", lw=2.5, alpha=0.3)
  ax.loglog(intensity, np.full_like(intensity, FMA), "k:", lw=1, label=f"FP32 FMA peak, {FMA:.0f} GFLOP/s")
  ax.loglog(intensity, intensity * BW, "k--", lw=1, label=f"memory (triad), {BW:.0f} GB/s")
  ax.axvline(FMA / BW, color="grey", lw=0.5)
  ax.text(FMA / BW * 1.1, 0.15, f"ridge {FMA / BW:.1f}", color="grey")
  for name, (x, y) in points.items():
    ax.loglog([x], [y], marker, ms=8, label=name)
  ax.set(xlabel="arithmetic intensity (FLOP/byte)", ylabel="GFLOP/s", title=title, ylim=(0.1, FMA * 3))
  ax.legend(fontsize=8, loc="upper left")


gemm_points = {f"GEMM {N}: {name}": (N / 6, r) for name, r in gemm_rate.items()}
fig, ax = plt.subplots(figsize=(8, 5))
roofline(ax, gemm_points, title=f"GEMM {N}x{N}x{N}, step by step (measured, machine under load)")
plt.show()

# %% [markdown]
# What to read in this plot, and in the table above it:
# - **naive** is already far from the naive of most textbooks: the compiler vectorised its reduce loop (10.5),
#   because both operands are read with stride 1. It still spends two loads per FMA.
# - **threads** can do at most 2x with two cores, and under load it often does less or nothing: the other
#   processes want the same cores, and an OpenMP thread that has to wait for a core holds up the whole
#   parallel loop. On an idle machine two threads should come close to doubling each step (10.8 compares one
#   thread with all cores kernel by kernel).
# - **the 4x4 tile** is the big step: compare its row with naive's in the table above (both on one thread); the
#   whole gain comes from loads alone.
# - None of them reaches the roof. What is left: the tile's accumulators are reduced across 8 vector lanes
#   after every reduce loop, the B^T tile streams through L1 without any blocking for the caches (for N = 1024
#   B^T is 4 MB, larger than L2), and the loop over r is the only vectorised loop. A BLAS library does cache
#   blocking and packing on top of the register tile (exercise 6).
#
# ## 10.5 The compiler flags: what lets the C compiler vectorise
#
# uopc prints scalar C; the vector instructions come from the C compiler. Which transformations it may make
# is decided by the flags in `uopc.runtime.FLAGS` (they depend on the CPU, hence the ignored output):

# %% tags=["nbval-ignore-output"]
from uopc.runtime import FLAGS
print(" ".join(FLAGS))

# %% [markdown]
# Two of them carry this chapter (NOTES 2 and 4):
# - **Reassociation.** The naive reduce loop is `acc = acc + a*b`, a chain of additions in a fixed order. To use
#   8-lane vectors, the compiler must keep 8 partial sums and add them at the end: a different order of float
#   additions, with a different rounding. C forbids that at `-O3`. `-fassociative-math` (with
#   `-fno-signed-zeros -fno-trapping-math`, which it requires) allows it. `-ffast-math` would allow it too,
#   but it also assumes that no value is ever infinite or NaN, and the softmax of Chapter 11 starts its
#   running max at `-INFINITY`.
# - **256-bit vectors.** `-mprefer-vector-width=256` (x86-64 only). This CPU has 512-bit vectors, but a 4x4 tile
#   over a reduce axis of 64, as in S = Q K^T, then gets only four vector iterations per tile, followed by
#   sixteen horizontal 16-lane sums; with 8 lanes the sums are shorter and the loop longer.
#
# Measure both. The naive kernel at N = 512 with plain `-O3 -march=native` against uopc's flags; and the 4x4
# tile on the shape of S = Q K^T (1024 x 1024, reduce axis 64) with 256- and 512-bit vectors:

# %% tags=["nbval-ignore-output"]
import platform

n = 512
A5, B5 = rng.standard_normal((n, n), dtype=np.float32), rng.standard_normal((n, n), dtype=np.float32)
B5T, C5 = np.ascontiguousarray(B5.T), np.zeros((n, n), np.float32)
plain = ("-O3", "-march=native", "-fopenmp", "-shared", "-fPIC")
for label, flags in [("plain -O3 -march=native", plain), ("uopc FLAGS", FLAGS)]:
  prg = Program(gemm_c(Opts(thread=None), n), f"r_{n}_{n}", flags)
  t = best_time(lambda: prg(A5, B5T, C5))
  print(f"naive {n}, {label:24s} {t * 1e3:8.2f} ms {2 * n ** 3 / t / 1e9:7.1f} GFLOP/s")

q, kt, s = (rng.standard_normal((1024, 64), dtype=np.float32), rng.standard_normal((1024, 64), dtype=np.float32),
            np.zeros(1024 * 1024, np.float32))
if platform.machine() in ("x86_64", "AMD64"):
  for width in ("256", "512"):
    flags = tuple(f for f in FLAGS if not f.startswith("-mprefer-vector-width")) + (f"-mprefer-vector-width={width}",)
    body = gemm_body(1024, 1024, 64)
    prg = Program(render_c(lower(body, buffer(2, 1024 * 1024), Ctx(opts=STEPS["4x4 tile"])), "s"), "s", flags)
    t = best_time(lambda: prg(q, kt, s))
    print(f"4x4 tile, S = Q K^T, {width}-bit vectors {t * 1e3:8.2f} ms {2 * 1024 * 1024 * 64 / t / 1e9:7.1f} GFLOP/s")

# %% [markdown]
# Without reassociation the naive kernel runs at scalar speed, one addition after another, each waiting for the
# last: several times slower. The vector width matters less, but on this shape 256 bits won (NOTES 4).
#
# **The inline `exp2f`.** The softmax kernels call `exp2f`. glibc's `exp2f` is a function call the compiler
# cannot vectorise, and glibc's vector version is only used under `-ffast-math`. So every kernel uopc compiles
# starts with `uopc.runtime.PRELUDE`, which defines `exp2f` as an inline polynomial the compiler *can*
# vectorise: $2^x = 2^n \cdot 2^f$ with $n$ = round(x), $2^f$ by a degree-7 polynomial, and the multiplication
# by $2^n$ done as an integer add to the exponent bits (which reassociation cannot reorder into an overflow,
# NOTES 6). The rendered C still reads `exp2f(...)`; the prelude's last line redirects it:

# %%
from uopc.runtime import PRELUDE
print(PRELUDE.strip().splitlines()[-1])

EX = """void ex(float* restrict x, float* restrict y, int n) {
  for (int i = 0; i < n; i++) y[i] = exp2f(x[i]);
}"""
ex = Program(EX, "ex")
x = np.linspace(-126, 127.99, 1_000_001, dtype=np.float32)
y = np.zeros_like(x)
ex(x, y, x.size)
rel = np.abs(y - np.exp2(x.astype(np.float64))) / np.exp2(x.astype(np.float64))
assert rel.max() < 1e-6
print("relative error below 1e-6 on [-126, 128):", rel.max() < 1e-6)
special = np.array([-np.inf, np.inf, np.nan, -1000, 0, 1000] * 8, np.float32)   # 48 values: the vectorised loop
y = np.zeros_like(special)
ex(special, y, special.size)
print("exp2f of", special[:6], "=", y[:6])

# %% [markdown]
# The exact maximum error depends on how the compiler schedules the polynomial, so it is printed where the tests
# ignore it; and next to it, the same kernel compiled with `-ffast-math` added, on the special values:

# %% tags=["nbval-ignore-output"]
print(f"max relative error {rel.max():.1e}")
fast = Program(EX, "ex", FLAGS + ("-ffast-math",))
y_fast = np.zeros_like(special)
fast(special, y_fast, special.size)
print("with -ffast-math: exp2f of", special[:6], "=", y_fast[:6])

# %% [markdown]
# With gcc 12 on this machine, `-ffast-math` turns `exp2f(nan)` into 0 in the vectorised loop: the compiler was
# told NaNs do not exist, so it dropped the code that keeps them. A NaN that silently becomes a probability of
# zero is a bug nobody finds. uopc's flags keep infinities and NaNs meaningful; `tests/codegen/test_ch10_opts.py` checks
# `exp2f(-inf) = 0`, `exp2f(inf) = inf`, `exp2f(nan) = nan` on both the scalar and the vector path.
#
# ## 10.6 The layout pass
#
# In 10.3, B was passed transposed. `Tensor(a) @ Tensor(b)` is given B as it is, (K, M) row-major: walking the
# reduce axis r of `b[r, j]` jumps M floats per step. The plain reduce loop would then load one float from
# each of K different cache lines, and nothing vectorises. Before kernelizing, the optimizer's **layout pass**
# (`uopc.opt.layout_pass`) looks at every REDUCE, follows its source to the EXPANDed views of buffers, and
# asks each view for the stride of its last axis (`last_axis_stride`). Any view whose reduce axis is not
# contiguous is wrapped in a STAGE, which the kernelizer turns into a kernel of its own: a copy in the layout
# the reduce wants. `Plan.explain()` says why each kernel exists:

# %%
from uopc.kernelize import make_plan
from uopc.tensor import Tensor

a64, b64 = rng.standard_normal((64, 64), dtype=np.float32), rng.standard_normal((64, 64), dtype=np.float32)
plan = make_plan([(Tensor(a64) @ Tensor(b64)).uop], False, Tensor.opt)
print(plan.explain())
print(plan.kernels[0].src)

# %% [markdown]
# The copy is `e_1_64_64`: elementwise (`e_`), and its output has the shape of the view it copies, (1, 64, 64):
# B transposed, with the broadcast axis of the matmul in front. It moves $2 \cdot 4N^2$ bytes once so that the
# GEMM, which reads B^T over and over (once for every 4 rows of output), reads it with stride 1; the GEMM
# `r_64_64` is then exactly the kernel of 10.3.
#
# The copy itself reads B across rows: its output walks B^T along a row, which is a column of B, so its loads
# jump 4N bytes apart. At N = 1024 that is a new cache line and a new 4 KB page every load; NOTES 5 measured
# 3.8 ms for this copy, a sixth of the whole GEMM. So the default optimizer upcasts a transposing copy's
# second-to-last axis by 8: each trip of the inner loop above reads 8 neighbours from one row of B
# (`data0[alu2]` to `data0[(alu2+7)]`) and writes them to 8 rows of B^T. The same copy at N = 1024 with and
# without that upcast, on one thread as in NOTES 5 (a copy this short is the first victim of a busy machine when
# it has to wait for two cores):

# %% tags=["nbval-ignore-output"]
copy_body = UOp(Ops.PERMUTE, (UOp(Ops.RESHAPE, (buffer(0, N * N),), (N, N)),), (1, 0))   # B^T, read from B
for label, opts in [("no upcast", Opts(thread=None)), ("upcast 8", Opts(upcast={0: 8}, thread=None))]:
  prg = Program(render_c(lower(copy_body, buffer(1, N * N), Ctx(opts=opts)), "copy"), "copy")
  prg(Bm, C)
  assert np.array_equal(C, Bm.T)
  t = best_time(lambda: prg(Bm, C))
  print(f"transposing copy {N}x{N}, {label:10s} {t * 1e3:7.3f} ms  {2 * 4 * N * N / t / 1e9:6.1f} GB/s")

# %% [markdown]
# ## 10.7 The default optimizer, and NumPy
#
# `Tensor.opt` is `uopc.opt.DefaultOpt`: the layout pass, then `default_opts(body)` for every kernel. The
# heuristic is short enough to read whole (`uopc/opt.py`): a reduce kernel gets the 4x4 register tile on its last
# two output axes (where they are multiples of 4 and at least 8); a transposing copy gets the upcast by 8 of
# 10.6; every kernel threads its first axis that has more than one trip. Here is what it picks for the kernels
# of this chapter:

# %%
from uopc.opt import default_opts

row_max = UOp(Ops.REDUCE, (UOp(Ops.RESHAPE, (buffer(0, 1024 * 1024),), (1024, 1024)),), (Ops.MAX, 1))
elementwise = UOp(Ops.RESHAPE, (buffer(0, 1024 * 1024),), (1024, 1024)) * 2.0
for name, body in [("GEMM 1024x1024x1024", gemm_body(1024, 1024, 1024)), ("GEMM 33x65x17", gemm_body(33, 65, 17)),
                   ("row max (1024, 1024) -> (1024,)", row_max), ("elementwise x * 2", elementwise),
                   ("copy of B^T (e_1_64_64)", plan.kernels[0].body), ("GEMM (r_64_64)", plan.kernels[1].body)]:
  print(f"{name:34s} {default_opts(body)}")

# %% [markdown]
# A 33 x 65 output gets no tile: `lower` ignores an upcast that does not divide its axis, and the heuristic does
# not ask for one. (Such sizes are correct but untiled; exercise 5 adds the remainder loops that would tile them.)
#
# How close does the whole thing (`Tensor(a) @ Tensor(b)`, default opts, copy included, plus the cost of a
# cached plan and of copying the inputs into Tensors) come to NumPy's BLAS? `uopc.bench.gemm` times each in a
# process of its own (so that neither runtime's idle threads slow the other), best of at least 5 calls after a
# warm-up (more, where a quarter of a second holds more), and prints the ratio (its third row, `vector`, is section
# 10.9's optimizer):

# %% tags=["nbval-ignore-output"]
from uopc.bench import gemm

rows = gemm([1024], reps=5)
for r in rows: print(r.line())
uopc_vs_numpy = rows[0].seconds / rows[1].seconds
print(f"uopc reaches {uopc_vs_numpy:.0%} of NumPy's throughput")

# %% [markdown]
# ## 10.8 The unfused attention on the roofline
#
# Chapter 11's attention, `softmax(Q K^T / sqrt(D)) V` written as a Tensor one-liner, becomes six kernels with the
# default optimizer. Here is the plan at N = 1024, D = 64, with the rule behind each kernel:

# %%
import math
from uopc.book import load_example

book = load_example("flash_attention")   # the book's examples/flash_attention.py
from uopc.kernelize import normalize, realize

Na, Da = 1024, 64
qa, ka, va = (rng.standard_normal((Na, Da), dtype=np.float32) for _ in range(3))
att = book.attention(Tensor(qa), Tensor(ka), Tensor(va))
roots, inputs = normalize([att.uop])
aplan = make_plan(roots, False, Tensor.opt)
print(aplan.explain())
for kern in aplan.kernels: print(f"{kern.name:14s} {default_opts(kern.body)}")

# %% [markdown]
# Run the plan once through `realize` (which allocates the plan's temporaries), compare the result with NumPy,
# then time each kernel alone on those same buffers. For the roofline each kernel needs its FLOPs (`Kernel.flops`,
# counted by the renderer) and its bytes; as an estimate of the bytes, take the size of every buffer it reads or
# writes, once: the least traffic it could possibly cause.
#
# Each kernel is timed twice: with all cores, as realize runs it, and with OpenMP limited to one thread. A
# parallel loop ends only when its slowest thread does, so on a machine shared with other work a short threaded
# kernel can spend most of its time waiting for a core; the one-thread time is the steadier measurement there.
# `omp_set_num_threads` belongs to the OpenMP runtime (libgomp), which every kernel shares:

# %%
import contextlib
import ctypes
import ctypes.util

libgomp = ctypes.CDLL(ctypes.util.find_library("gomp") or "libgomp.so.1")


@contextlib.contextmanager
def omp_threads(n: int):
  """Run the kernels called inside the block with n OpenMP threads."""
  old = libgomp.omp_get_max_threads()
  libgomp.omp_set_num_threads(n)
  try: yield
  finally: libgomp.omp_set_num_threads(old)


# %% tags=["nbval-ignore-output"]
(result,) = realize([att.uop], False, Tensor.opt)
s_ref = qa.astype(np.float64) @ ka.T / math.sqrt(Da)
p_ref = np.exp(s_ref - s_ref.max(-1, keepdims=True))
assert np.allclose(result.reshape(Na, Da), (p_ref / p_ref.sum(-1, keepdims=True)) @ va, atol=1e-4)
outs = [np.empty(size, np.float32) for _, size in aplan.outs]
pick = {"in": inputs, "temp": aplan.temp_arrays, "out": outs}
ROLES = ["S = Q K^T", "row max of S", "row sum of exp", "P", "copy of V^T", "O = P V"]
assert len(aplan.kernels) == len(ROLES)
att_points, totals, faster = {}, [0.0, 0.0], 0
print(f"{'':30s} {'FLOP/byte':>9s} | {'all cores':^24s} | {'one thread':^24s}")
print(f"{'kernel':30s} {'':9s} | {'ms':>7s} {'GFLOP/s':>8s} {'GB/s':>7s} | {'ms':>7s} {'GFLOP/s':>8s} {'GB/s':>7s}")
for kern, role in zip(aplan.kernels, ROLES):
  bufs = [pick[kind][i] for kind, i in kern.args]
  nbytes = sum(b.size for b in bufs) * 4
  t_all = best_time(lambda: kern.prg(*bufs))
  with omp_threads(1): t_one = best_time(lambda: kern.prg(*bufs))
  totals[0] += t_all; totals[1] += t_one
  faster += t_all < t_one
  rates = [(t * 1e3, kern.flops / t / 1e9, nbytes / t / 1e9) for t in (t_all, t_one)]
  cols = " | ".join(f"{ms:7.3f} {gflops:8.2f} {gbs:7.1f}" for ms, gflops, gbs in rates)
  print(f"{kern.name:14s}  {role:14s} {kern.flops / nbytes:9.2f} | {cols}")
  if kern.flops: att_points[f"{kern.name}: {role}"] = (kern.flops / nbytes, rates[0][1], rates[1][1])
print(f"six kernels: {totals[0] * 1e3:.2f} ms with all cores, {totals[1] * 1e3:.2f} ms on one thread; all cores "
      f"faster than one thread in {faster} of the 6 kernels")

# %% [markdown]
# The copy `e_1_64_1024` does no arithmetic, so it has no place on a log-scale roofline; its GB/s column says
# how close it comes to the bandwidth line instead. The other five go on the plot with the GEMM steps, filled
# squares for all cores and open squares of the same colour for one thread (drawn larger, so that an open square
# on the same spot as its filled twin still shows around it). The softmax kernels' intensities, read from the
# table:

# %%
from matplotlib.lines import Line2D

softmax_roles = ("row max of S", "row sum of exp", "P")
softmax_ai = [x for name, (x, _, _) in att_points.items() if name.split(": ")[1] in softmax_roles]
print(f"softmax kernels ({', '.join(softmax_roles)}): {min(softmax_ai):.2f} to {max(softmax_ai):.2f} FLOP/byte")
fig, ax = plt.subplots(figsize=(9, 5.5))
roofline(ax, gemm_points, title=f"GEMM steps and the unfused attention's kernels, N = {Na}, D = {Da} (measured)")
for name, (x, y_all, y_one) in att_points.items():
  (pt,) = ax.loglog([x], [y_all], "s", ms=8, label=name)
  ax.loglog([x], [y_one], "s", ms=12, mfc="none", mew=1.5, color=pt.get_color())
kinds = [Line2D([], [], ls="none", marker="s", ms=8, color="black", label="filled: all cores"),
         Line2D([], [], ls="none", marker="s", ms=12, mfc="none", mew=1.5, color="black", label="open: one thread")]
handles, labels = ax.get_legend_handles_labels()
ax.legend(handles=handles + kinds, fontsize=7, loc="upper left")
plt.show()

# %% [markdown]
# Reading the plot:
# - The two matmuls, `r_1024_1024` (S = Q K^T) and `r_1024_64` (O = P V), sit right of the ridge, both at about
#   28 FLOP/byte: less than a square GEMM of the same size, because one side of each is only 64 wide, so every
#   output element gets only 128 FLOPs (and S is written, or P read, at 4 bytes per element). They run the same
#   4x4 tile as the GEMM steps; with a reduce axis of 64, S spends a larger share of its time in the horizontal
#   sums after each reduce loop (10.5).
# - The softmax kernels, the row max, the row sum of exponentials and `e_1024_1024` (P), sit far left, around one
#   FLOP per byte (the range printed above the plot): a few operations per element of S, each element 4 bytes
#   read or written. No tile or thread can lift them above the bandwidth line; the only way to make them faster is
#   to move fewer bytes. If one of them shows up *above* the dashed line, its data came from a cache, not DRAM:
#   S is 4 MB, which can stay in this CPU's last-level cache between kernels, so the triad's DRAM bandwidth is a
#   floor under the memory roof rather than a ceiling.
# - Compare the filled and the open squares (the line under the table counts the kernels in which all cores beat
#   one thread in this run). On an idle machine, all cores should be faster than one thread in every kernel, up to
#   the number of cores. A threaded kernel that is slower than one thread, or that takes about the same time
#   whatever its size, spent that time waiting for cores that other processes held: it is not work, and there
#   the one-thread rates are the ones that describe the kernels.
# - Chapter 11 starts here: it fuses the softmax into its neighbours so that the N x N traffic disappears, and
#   finds that fused kernels lose the register tile that made the matmuls fast.
#
# ## 10.9 Vector code, and a tuner
#
# Everything so far left the vectors to gcc: the C is scalar, and `-O3 -march=native` turns the inner loop of a
# register tile into vector instructions where it can see how. For the GEMM of 10.3 it can. For Chapter 11's
# attention kernel (`uopc.kernels.flash`) it mostly cannot: its tiles live in small arrays that gcc keeps in memory, and
# the kernel reaches about a third of the FMA peak. The loop IR can say what each register holds instead: a dtype
# with lanes. `dtypes.f32.vec(16)` is 16 floats in one 512-bit register; `index(i).load(16)` loads 16
# consecutive floats as one vector, every ALU op works on all lanes, and a scalar that meets a vector is
# broadcast. The C renderer writes them with GCC's vector extensions (which clang reads too):

# %%
from uopc.uop import range_, sink

X, Y = buffer(0, 256), buffer(1, 256)
i = range_(16, 0)
x = X.index(i * 16).load(16)                  # data0[16i .. 16i+15]: one vector
y = (x * 2.0 + 1.0).maximum(x).exp2()        # each op on all 16 lanes
vec_src = render_c(sink(Y.index(i * 16).store(y).end(i)), "vec_demo")
print("\n".join(line for line in vec_src.splitlines() if line.startswith("typedef")))
print(vec_src[vec_src.index("void vec_demo"):])
xs = rng.standard_normal(256).astype(np.float32)
ys = np.zeros(256, np.float32)
Program(vec_src, "vec_demo")(xs, ys)
assert np.allclose(ys, np.exp2(np.maximum(xs * 2 + 1, xs)), rtol=1e-6)

# %% [markdown]
# A load or store goes through the `_u` twin of the vector type, whose alignment is one float's and which may
# alias floats: one unaligned vector move. C has no `?:` on vectors, so MAX and WHERE are small always-inline
# functions (a bitwise blend under a comparison's mask), and so is EXP2, a polynomial on all lanes (with
# AVX-512, `vscalefps` does the 2^n). Always inline, because a call clobbers every vector register, and a register
# tile is made of them.
#
# `uopc.kernels.flash_vec` rewrites the attention kernel this way. For a block of `rows` queries and a tile of
# `kvec` vectors of keys, S = Q K^T is `rows x kvec` vector accumulators over the head dimension (a query value
# broadcast against `kvec` vectors of the packed K^T); the softmax runs on those vectors (the tile's row max by a
# butterfly of shuffles, P = 2^(S - m) by the vector exp2); O += P V updates `dchunk` vectors of each output row at a
# time. Whether the tile fits in the registers is a question the compiler answers, in its assembly: `uopc.runtime.asm`
# finds the hot loops (innermost loops with FMAs) and the vector moves to and from the stack inside them. The
# default tile, 6 x 4, has 24 score accumulators; 8 x 4 has 32, all of AVX-512's registers, with none left for
# the K^T vectors:

# %% tags=["nbval-ignore-output"]
import platform
from uopc.runtime.asm import assembly, hot_loops, stack_spills
from uopc.kernels.flash_vec import FlashVecOpts, flash_vector_ir

for opts in (FlashVecOpts(rows=6, kvec=4, dchunk=2), FlashVecOpts(rows=8, kvec=4, dchunk=2)):
  nq = 48 * opts.rows
  src = render_c(flash_vector_ir(1, nq, 256, 64, opts), "flash_vec")
  if platform.machine() != "x86_64": break
  loops = hot_loops(assembly(src, opts.compile.flags))
  print(f"rows={opts.rows} kvec={opts.kvec}: {opts.rows * opts.kvec} accumulators, hot loops of "
        f"{[len(loop) for loop in loops]} instructions, stack spills in them {[len(stack_spills(l)) for l in loops]}")

# %% [markdown]
# Keys in the lanes cost two things outside the register tile. K has to be transposed before every call: a copy, made
# on one core, which the other core's cache then has to fetch. And each row's max and sum are reductions across
# lanes. `uopc.kernels.flash_vec_q` puts *queries* in the lanes instead. A block is `lanes` queries (one vector); key
# j's scores against them are one vector accumulator, built from K's row j one scalar at a time, broadcast against a
# vector of the block's queries, which the kernel transposes itself, once per block (a thousand floats, against
# millions of FMAs). A query's max over a tile is then a max of whole vectors, its correction one exp2 per vector,
# and the causal mask compares the lanes' query numbers with the key's. O is kept transposed too, dv rows of
# `lanes` queries, `dcols` of them in registers at a time. A last block or tile that the tiles do not fill reads the
# last real query or key again and drops or masks what it computed, so the kernel takes q, k and v as they are:
# nothing is padded or copied before the call. `scaled_dot_product_attention` starts from this layout, and the tuner
# tries both (NOTES 29 measures what the copy costs).
#
# The kernel before and after, on this machine: uopc.kernels.flash's scalar kernel (what `scaled_dot_product_attention`
# ran before this section) and the two vector kernels with their heuristic tiles, each timed through
# `nn_flash.run` (the keys layout's copies included), at N = 1024, D = 64, one head:

# %% tags=["nbval-ignore-output"]
from uopc.nn import flash as nn_flash
from uopc.kernels.flash import flash_attention_ir

Nf, Df = 1024, 64
qf, kf, vf = (rng.standard_normal((1, Nf, Df)).astype(np.float32) for _ in range(3))
s_ref = qf[0].astype(np.float64) @ kf[0].T / np.sqrt(Df)
p_ref = np.exp(s_ref - s_ref.max(-1, keepdims=True))
o_ref = (p_ref / p_ref.sum(-1, keepdims=True)) @ vf[0]
scalar = Program(render_c(flash_attention_ir(1, Nf, Nf, Df, rows=8, keys=32), "flash"), "flash")
kt = np.ascontiguousarray(kf.transpose(0, 2, 1))
o_scalar = np.zeros((1, Nf, Df), np.float32)
heuristic = nn_flash.default_opts(nn_flash.lanes_here())
queries = nn_flash.flash_vec_q.default_opts(nn_flash.lanes_here())
flash_flops = 4 * Nf * Nf * Df
flash_points = {}
for name, run in [("scalar (uopc.kernels.flash)", lambda: scalar(qf, kt, vf, o_scalar) or o_scalar),
                  (f"vector {heuristic.rows}x{heuristic.kvec} (uopc.kernels.flash_vec)",
                   lambda: nn_flash.run(qf, kf, vf, False, 1 / np.sqrt(Df), heuristic)),
                  (f"queries in lanes {queries.rows}x{queries.keys} (flash_vec_q)",
                   lambda: nn_flash.run(qf, kf, vf, False, 1 / np.sqrt(Df), queries))]:
  assert np.abs(run()[0] - o_ref).max() < 1e-4
  t = best_time(run)
  flash_points[name] = (flash_flops / (4 * 4 * Nf * Df), flash_flops / t / 1e9)   # bytes: q, k, v, out once
  rate = flash_flops / t / 1e9
  print(f"{name:40s} {t * 1e3:7.3f} ms  {rate:6.1f} GFLOP/s  {rate / FMA:5.1%} of peak")
fig, ax = plt.subplots(figsize=(8, 5))
roofline(ax, flash_points, marker="s", title=f"FlashAttention N = {Nf}, D = {Df}, before and after (measured)")
plt.show()

# %% [markdown]
# Which tile is best depends on the problem and the machine: how many registers, how wide, how big the caches
# (NOTES 24 has the measurements: on this project's Zen 4 a 16-row GEMM tile ties with 8 rows at K = 512 and runs at
# half its speed from K = 1024, where A's 16 rows lie a multiple of 4 KB apart). So the tile is an opt, and
# `uopc.runtime.tune` picks it by timing candidates on this machine, as tinygrad's BEAM does: every candidate is
# compiled and timed, the fastest few are timed again in turns with the heuristic, and the winner is cached on disk per
# kernel, problem, CPU and compiler. `BEAM=n` (or `Context(BEAM=n)`) searches; without it a kernel gets the cached
# winner or its heuristic. A small search, three candidates. Its line on stderr is the result: the winner and its
# time from the second, careful timing, the time `search` returns (on a terminal the line first counts the
# candidates, overwritten in place; a notebook gets the result alone):

# %% tags=["nbval-ignore-output"]
import sys
from uopc.runtime import tune

small = [FlashVecOpts(rows=r, kvec=k, dchunk=1, lanes=heuristic.lanes) for r, k in ((4, 2), (6, 4), (8, 2))]
q5, k5, v5 = (rng.standard_normal((1, 512, 64)).astype(np.float32) for _ in range(3))
best, seconds = tune.search("flash_vec", (1, 512, 512, 64), small,
                            lambda o: (lambda: nn_flash.run(q5, k5, v5, False, 0.125, o)), beam=2)
sys.stderr.flush()
print(f"fastest of {len(small)}, timed again: rows={best.rows} kvec={best.kvec}, {seconds * 1e3:.3f} ms")

# %% [markdown]
# The matmul gets the same treatment from `uopc.opt.VectorOpt`, an optimizer to opt into
# (`Tensor.opt = VectorOpt`; the default stays the one whose kernels this book prints). Its GEMM kernel reads B as
# panels of `nr` columns, each panel's K rows contiguous (BLIS's packed B), and holds a `rows x nvec` tile of vector
# accumulators: per k, one broadcast of A per row and `nvec` vector loads of the panel. Where a panel is small
# enough to keep on a thread's stack and there are enough panels to share out, each iteration of the threaded loop
# packs one panel and then computes every block of C under it, so the core that packs a panel is the one that reads
# it, and the plan is one kernel; otherwise a copy kernel packs every panel first (NOTES 31). The plan of a
# 256 x 256 product, then 1024 x 1024 against NumPy's BLAS, each in its own process (`uopc.bench.gemm`):

# %% tags=["nbval-ignore-output"]
from uopc.bench import gemm as bench_gemm
from uopc.opt import VectorOpt
from uopc.options import Options

vplan = make_plan([(Tensor(a64.repeat(4, 0).repeat(4, 1)) @ Tensor(b64.repeat(4, 0).repeat(4, 1))).uop],
                  options=Options(opt=VectorOpt))
print(vplan.explain())
for r in bench_gemm([1024], reps=3): print(r.line())

# %% [markdown]
# ## Pitfalls
# - **Timing threads on a busy machine.** An OpenMP loop is as slow as its slowest thread, and a thread that
#   waits for a core holds up all the others. Under load, `threads` can be slower than one thread. Use best-of-k,
#   compare variants interleaved in one run (`uopc.bench.interleaved`), and for careful single-kernel work pin
#   `OMP_NUM_THREADS=1` and measure CPU time, as NOTES does. The roof itself is a measurement too: a point
#   above it means the peak was measured at a busier moment than the kernel.
# - **A tile that does not divide the shape is silently dropped.** `Opts(upcast={0: 4})` on 33 rows gives the
#   plain loop, correct and slow. Check the C (or the number of `acc` variables) when a kernel is slower than
#   expected.
# - **Too big a tile spills.** 4x4 needs 16 accumulators and 8 loaded values live at once; 8x8 needs 64
#   accumulators, more than the 16 (AVX2) or 32 (AVX-512) vector registers, and the spilled accumulators go
#   to memory and back every trip.
# - **`-ffast-math` is not a free speed-up.** It assumes no infinities or NaNs; `-INFINITY` is the first value
#   of every running max, and NaNs vanish (10.5). uopc uses the parts of it that are safe: reassociation.
# - **A flag can change vector code you wrote.** An early version of the vector kernel ran at half speed under
#   `-mprefer-vector-width=256` (one run, NOTES 24); the current one, whose loads and stores are single vector moves
#   through the `_u` pointer, runs the same with or without it. Flags are part of a kernel's opts
#   (`uopc.runtime.flags`) and of its cache key, so a kernel that needs others can say so.
# - **A tile that fits the registers can still miss in L1.** 16 rows of A that lie a multiple of 4 KB apart map to
#   the same L1 sets: the 16 x 1 GEMM tile that wins at K = 512 runs at half speed at K = 1024. Tune per problem.
# - **Reading a non-contiguous reduce axis.** Without the layout pass, `a @ b` reads B with stride N in the
#   reduce loop: no vectors, a cache line per load. The copy costs $2 \cdot 4N^2$ bytes; the strided reads cost
#   far more. Make the reduce axis contiguous before tuning anything else.
# - **The byte estimate is a lower bound.** Summing buffer sizes counts each byte once. A kernel that re-reads a
#   buffer that does not fit in cache moves more than that (its true intensity is lower), and a kernel whose
#   buffers stay in cache can beat the DRAM line.
#
# ## Exercises
# 1. ★ Intensity. Write the arithmetic intensity of an (N, K) @ (K, M) GEMM with minimum traffic. Evaluate it for
#    S = Q K^T and O = P V of attention at N = 4096, D = 64. Which side of this machine's ridge are they on?
# 2. ★ Loads per FMA. Generalise the count of 10.2: how many loads per FMA does a TM x TN tile need, and how
#    many registers (accumulators plus loaded values)? Which tiles fit in 16 vector registers?
# 3. ★★ Other tiles. Time `Opts(upcast={0: a, 1: b})` for (a, b) in (2, 8), (8, 2), (1, 16), (8, 8), and 4x4 with
#    `unroll` 4 and 8, at N = 1024, on one thread. Put them on the roofline. Compare with NOTES 4.
# 4. ★★ The copy. Time the transposing copy of 10.6 with upcasts of 2, 4, 8, 16 and 32, at N = 1024 and 2048.
#    Explain the optimum with cache lines (64 bytes) and the number of rows of B^T each trip writes to.
# 5. ★★ Remainders. Make `lower` tile axes that a factor does not divide: the tiled loop over the multiple of the
#    factor, then a remainder loop over the rest. Test against NumPy at 33 x 65 and check the structure with the
#    helpers of `tests/codegen/test_ch10_opts.py`.
# 6. ★★★ Cache blocking. For N = 2048, B^T (16 MB) does not fit in any cache, and every row tile streams all of
#    it. Write, in the loop IR of Chapter 4, a GEMM that splits the reduce axis into blocks of 256 and the
#    column axis into blocks of 64 around the 4x4 tile, and measure it against the default at N = 1024 and 2048.
# 7. ★★ A vector row max. Write, with `load(16)`, `maximum` and `uopc.codegen.vector.butterfly`, the loop program of
#    `r_1024` (the row max of a (1024, 1024) matrix) whose inner loop keeps one vector accumulator per row. Check it
#    against NumPy, with a NaN in a row too: does your kernel keep it where the scalar `r_1024` keeps it? Time both.
# 8. ★★ Registers. For `uopc.kernels.flash_vec`, list the tiles (rows, kvec) whose hot loops have no stack spills on
# this machine (`uopc.runtime.asm`), time each at N = 2048, D = 64, and compare the fastest with what `Context(BEAM=4)`
# picks. Does the fastest tile use every register? Explain with the count of 10.2 (accumulators plus loaded values).
# 9. ★★★ The exp2's degree. The vector exp2 uses a degree-7 polynomial on [-1/2, 1/2]. Fit degree 5 and 6 (least
#    squares on Chebyshev nodes, in float64), measure the largest relative error against `np.exp2` in float64 over
#    [-126, 0], and the flash kernel's speed with each (replace the coefficients in the source as NOTES 24's script
#    edits it). Which degree would you ship, and what test would have to change?
