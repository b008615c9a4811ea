# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # Chapter 13. GPU machinery
#
# Chapter 12 gave uopc launch axes, local memory and barriers, and ran its kernels on an OpenCL device. This
# chapter builds the machinery fast GPU kernels are made of. Each piece is first written here by hand and checked
# against NumPy, then taken from uopc, where it is an opt or a lowering of the compiler:
# - a **matrix multiply step by step**: a **local-memory tile** written in OpenCL C (a work-group loads a tile of
#   each input together, waits at a barrier, computes from it, waits again) and the formulas for its loads; then
#   uopc's lowerings: the default kernel, the local tile, a **register tile** on top, and **tensor cores**; global
#   and local bytes counted for each step against the formulas, and plotted;
# - what a **bank conflict** is, computed for the tile layout;
# - the **fragment layout** of an `mma.sync` instruction, written down as tables, an mma **emulated lane by lane**
#   from them and shown as a picture; then the **WMMA** op in uopc's loop IR that uses them, and why a wrong swizzle
#   gives wrong numbers on the OpenCL device too;
# - the **race** a missing barrier makes, found by Oclgrind;
# - **FlashAttention-2**: what makes it "-2", uopc's (scalar) kernel checked against NumPy and Chapter 11's kernels,
#   and how it differs from a tensor-core one.
#
# The modules: `uopc.codegen.localtile` (`lower_local_tile`; its optimizer is `uopc.opt.TiledOpt`), `uopc.codegen.wmma`
# (the layouts), `uopc.codegen.tc` (`TC=1`), `uopc.kernels.fa2` (`fa2_ir`).

# %% tags=["nbval-ignore-output"]
from uopc.bench import header
print(header())

# %% tags=["nbval-ignore-output"]
# %%needs CL
from uopc.runtime.cl import device_name
print("OpenCL:", device_name())

# %% [markdown]
# ## 13.1 A matrix multiply, step by step
#
# First by hand. A **local-memory tile** in OpenCL C, written here and run on the CL device with pyopencl, as
# chapter 12 ran its reduction. A work-group of T x T work-items owns a T x T block of C. Per step of T along K,
# each work-item loads one element of the A tile and one of the B tile into `__local` arrays, the group waits at a
# barrier (both tiles are complete), each work-item multiplies its row of the A tile by its column of the B tile
# from local memory, and the group waits again (nobody may overwrite a tile that another work-item still reads).

# %%
import warnings
import numpy as np
import pyopencl as cl
from uopc.runtime.cl import cl_queue


def render_tiled_matmul(T: int) -> str:
  """OpenCL C for C = A @ B (float32, row-major, M x K times K x N, every size a multiple of T): T x T tiles."""
  return f"""__kernel __attribute__((reqd_work_group_size({T}, {T}, 1)))
void tiled_matmul(__global const float* A, __global const float* B, __global float* C, int N, int K) {{
  __local float As[{T}][{T}], Bs[{T}][{T}];
  int lx = get_local_id(0), ly = get_local_id(1);
  int col = get_group_id(0) * {T} + lx, row = get_group_id(1) * {T} + ly;
  float acc = 0.0f;
  for (int k0 = 0; k0 < K; k0 += {T}) {{
    As[ly][lx] = A[row * K + k0 + lx];      /* one element of each tile per work-item */
    Bs[ly][lx] = B[(k0 + ly) * N + col];
    barrier(CLK_LOCAL_MEM_FENCE);           /* the tiles are complete */
    for (int kk = 0; kk < {T}; kk++) acc += As[ly][kk] * Bs[kk][lx];
    barrier(CLK_LOCAL_MEM_FENCE);           /* everyone is done reading them */
  }}
  C[row * N + col] = acc;
}}"""


def tiled_matmul(a: np.ndarray, b: np.ndarray, T: int) -> np.ndarray:
  (m, k), n = a.shape, b.shape[1]
  if m % T or n % T or k % T: raise ValueError(f"every size must be a multiple of T={T}, got {a.shape} @ {b.shape}")
  with warnings.catch_warnings():   # PoCL's build log arrives as a warning
    warnings.simplefilter("ignore")
    kernel = cl.Kernel(cl.Program(ctx, render_tiled_matmul(T)).build(), "tiled_matmul")
  mf = cl.mem_flags
  bufs = [cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=np.ascontiguousarray(x, np.float32)) for x in (a, b)]
  out = np.empty((m, n), np.float32)
  out_buf = cl.Buffer(ctx, mf.WRITE_ONLY, out.nbytes)
  kernel(queue, (n, m), (T, T), *bufs, out_buf, np.int32(n), np.int32(k))
  cl.enqueue_copy(queue, out, out_buf)
  return out


print(render_tiled_matmul(16))
M = K = N = 128
rng = np.random.default_rng(13)
a, b = (rng.standard_normal(s).astype(np.float16) for s in ((M, K), (K, N)))
ref = a.astype(np.float64) @ b.astype(np.float64)

# %%
# %%needs CL
ctx, queue = cl_queue()
for T in (8, 16):
  got = tiled_matmul(a.astype(np.float32), b.astype(np.float32), T)
  print(f"T={T:2d}: max error against float64 NumPy {np.abs(got - ref).max():.1e}")

# %% [markdown]
# Count its loads. Each work-item loads two elements from global memory per step, and there are K / T steps: a
# launch loads 2 M N K / T elements from global memory, where a kernel reading its row of A and column of B
# straight from global memory loads 2 M N K. Each element of A that reaches local memory serves the T columns of
# the block. The reads move to local memory: 2 M N K there. A work-item that keeps an rm x rn **register tile** of
# accumulators (chapter 10) reads each value from local memory once for rn (or rm) of them. With a bm x bn output
# block per work-group, these are **the formulas of 13.1**, in elements loaded by one launch:
#
# $$\text{global} = M N K \left(\frac{1}{b_m} + \frac{1}{b_n}\right), \qquad
#   \text{local} = M N K \left(\frac{1}{r_m} + \frac{1}{r_n}\right)$$
#
# Now uopc's version: four lowerings of one kernel body, `C = A @ B` with float16 inputs accumulated in float32:
# chapter 12's default (each work-item computes a 4 x 4 register tile straight from global memory: bm = rm = 4,
# no local memory), `lower_local_tile` with a 16 x 16 block and one output per work-item (the kernel above, as a
# lowering), the same with a 32 x 32 block and a 4 x 4 register tile, and tensor cores (13.3). Each is a loop
# program; `uopc.codegen.gpudims.traffic` counts the bytes one launch loads (every access executed, no cache), next
# to the formulas' prediction (2 bytes an element in global memory, 4 in local memory, where the tiles are float32),
# and each runs on CL against NumPy.

# %%
from uopc.codegen import wmma
from uopc.device import get_device
from uopc.dtype import dtypes
from uopc.codegen.gpudims import traffic
from uopc.codegen.localtile import LocalTile, lower_local_tile
from uopc.opt import DefaultOpt
from uopc.options import Options
from uopc.render_gpu import CL, CUDA
from uopc.codegen.tc import lower_tc
from uopc.tensor import Tensor
from uopc.uop import UOp, Ops, ParamArg, substitute


def params(body: UOp) -> UOp:
  bufs = [u for u in body.toposort() if u.op is Ops.BUFFER]
  return substitute(body, {u: UOp(Ops.BUFFER, (), ParamArg(k, u.dtype, u.arg.shape)) for k, u in enumerate(bufs)})


def loads(bm: int, bn: int, rm: int, rn: int) -> tuple[float, float]:
  """(global, local) bytes one launch loads, by the formulas of 13.1 (rm = 0: no local memory)."""
  return M * N * K * (1 / bm + 1 / bn) * 2, (M * N * K * (1 / rm + 1 / rn) * 4 if rm else 0.0)


body = params((Tensor(a).cast(dtypes.f32) @ Tensor(b).cast(dtypes.f32)).uop)
out = UOp(Ops.BUFFER, (), ParamArg(2, dtypes.f32, (M * N,)))
steps = {"default (register tile)": DefaultOpt.lower(body, out, Options(device="CL")),
         "local tile": lower_local_tile(body, out, LocalTile(16, 16, 16, 1, 1)),
         "local + register tile": lower_local_tile(body, out, LocalTile(32, 32, 8, 4, 4)),
         "tensor cores (WMMA)": lower_tc(body, out, Options(tc=1, device="CL"))}
# a warp's 16 x 8 tile of C reads A once per 8 columns and B once per 16 rows, straight into registers
predicted = {"default (register tile)": loads(4, 4, 0, 0), "local tile": loads(16, 16, 1, 1),
             "local + register tile": loads(32, 32, 4, 4), "tensor cores (WMMA)": loads(16, 8, 0, 0)}
counts = {name: traffic(prog) for name, prog in steps.items()}

# %%
# %%needs CL
print(f"{'step':<24s} {'global loads (MB)':>18s} {'local loads (MB)':>17s}   max error")
print(f"{'':<24s} {'counted predicted':>18s} {'counted predicted':>17s}")
for name, prog in steps.items():
  res = np.zeros(M * N, np.float32)
  get_device("CL").compile(CL.render(prog, "gemm").src)(a.reshape(-1), b.reshape(-1), res)
  t = counts[name]
  pg, pl = predicted[name]
  print(f"{name:<24s} {t['global_load'] / 1e6:7.2f} {pg / 1e6:9.2f} {t['local_load'] / 1e6:7.2f} {pl / 1e6:9.2f}"
        f"   {np.abs(res.reshape(M, N) - ref).max():.1e}")

# %%
import matplotlib.pyplot as plt
names = list(counts)
# the CL emulation of WMMA (13.3) exchanges fragments through local memory inside the op, where `traffic` does not
# look: each lane reads 16 values of A and 16 of B for each of its 4 outputs, 2 M N K floats a launch
emulated = 2 * M * N * K * 4
fig, (gax, lax) = plt.subplots(1, 2, figsize=(11, 3.8), sharey=True)
y = np.arange(len(names))
gax.barh(y, [counts[n]["global_load"] / 1e6 for n in names], color="tab:blue")
gax.set_xlabel("global memory (float16 A and B): MB loaded per launch")
local = [counts[n]["local_load"] / 1e6 for n in names]
lax.barh(y, local, color="tab:orange")
tc = names.index("tensor cores (WMMA)")
lax.barh(tc, emulated / 1e6, color="none", edgecolor="tab:orange", hatch="//")
lax.text(emulated / 1e6 * 0.02, tc, "CL emulation inside the WMMA op (0 on a GPU: registers)", va="center", fontsize=8)
lax.set_xlabel("local memory (float32 tiles): MB loaded per launch")
for ax, key in ((gax, "global_load"), (lax, "local_load")):
  for k, n in enumerate(names):
    if counts[n][key]: ax.text(counts[n][key] / 1e6, k, f" {counts[n][key] / 1e6:.2f}", va="center", fontsize=8)
gax.set_yticks(y, names)
gax.invert_yaxis()
fig.suptitle(f"C = A @ B, M = N = K = {M}, float16 in, float32 accumulators: loads per launch "
             "(uopc.codegen.gpudims.traffic), separate axes")
fig.tight_layout()
plt.show()

# %% [markdown]
# The counts are the formulas'. The default kernel reads each element of A from global memory once per 4 output
# columns (its register tile). The local tile reads it into local memory once per work-group, whose 16 columns then
# share it: global loads fall by the ratio of those widths, and the reads move to local memory (note the two axes:
# local memory is read far more often, and is the cheap one). The register tile then cuts the local reads too:
# each value read from local memory feeds four accumulators. The tensor-core step loads per-lane fragments straight
# from global memory into registers, each element of A once per 8 output columns and each of B once per 16 rows; on
# a GPU it touches no local memory. The hatched bar is the OpenCL emulation's exchange of fragments through local
# memory inside the WMMA op (13.3), computed from the emulation, not counted by `traffic`.
#
# The local tile as the CL source prints it: the two tiles in local memory, the cooperative loads, the barrier, the
# multiply from local memory into the 4 x 4 register tile, the second barrier.

# %%
src = CL.render(steps["local + register tile"], "gemm").src
lines = src.splitlines()
step = next(i for i, ln in enumerate(lines) if "for (" in ln)   # the loop over K, 8 at a time
bars = [i for i, ln in enumerate(lines) if "barrier" in ln]
print("\n".join([ln for ln in lines[:step] if "__local" in ln] + lines[step:step + 5]))
print("    ...   (each work-item loads 4 elements of each tile)")
print("\n".join(lines[bars[0]:bars[0] + 9]))
print("      ...   (16 accumulators: each value read from local memory feeds 4 of them)")
print("\n".join(lines[bars[1] - 1:bars[1] + 2]))

# %% [markdown]
# ## 13.2 Bank conflicts
#
# Local memory is split into 32 **banks**, 4 bytes wide: float `i` lives in bank `i % 32`. The 32 work-items of a
# warp read in one cycle if they touch different banks, or the same address (a broadcast); two different addresses
# in one bank take two cycles. Take the tile a transpose stages in local memory: 32 x 32 floats, `T[r * row + c]`
# with `row = 32`, and a warp of work-items `tid` 0 to 31. Reading a row, work-item `tid` reads `T[r * row + tid]`;
# reading a column, `T[tid * row + c]`; reading every other float (the first halves of float2 pairs), `T[2 * tid]`:

# %%
def conflict(addresses: np.ndarray) -> int:
  """Cycles a warp's local-memory read takes: the most distinct addresses any one bank serves."""
  return max(len(set(addresses[addresses % 32 == bank])) for bank in range(32))


tid = np.arange(32)
print(f"row read: {conflict(5 * 32 + tid)} cycle, column read: {conflict(tid * 32 + 5)} cycles")
print(f"column read with a padded row of 33 floats: {conflict(tid * 33 + 5)} cycle")
print(f"every other float: {conflict(2 * tid)} cycles")

# %% [markdown]
# The row read is conflict-free: 32 consecutive floats lie in 32 banks. The column read is the worst case: its
# addresses lie a whole row, 32 floats, apart, all in one bank, so the warp's read is done one address at a time.
# Padding the tile's row by one float (33) moves each row's start one bank on, and the column spreads over all 32
# banks. Every other float puts two work-items in each of 16 banks. The tiles of 13.1 ask the same question with
# their own indices: the work-items of the 8 x 8 work-group are numbered `tid = ly * 8 + lx`, so a warp is 4 values
# of `ly` by 8 of `lx`, and each reads `A[(ly * 4 + i) * 8 + k]` and `B[k * 32 + lx * 4 + j]`. Exercise 2 counts
# them with `conflict` and pads the A tile in `lower_local_tile`.
#
# ## 13.3 Tensor cores: fragments
#
# `mma.sync.aligned.m16n8k16` multiplies a 16 x 16 tile of A by a 16 x 8 tile of B and adds a 16 x 8 tile of C,
# with the 32 lanes of a warp each holding 8 elements of A, 4 of B and 4 of C in registers: its **fragments**.
# Which lane holds which element is fixed by the hardware and documented in the PTX ISA ("Matrix Fragments for
# mma.m16n8k16"). With g = lane // 4 (the lane's group of four) and t = lane % 4 (its place in the group), element
# i of a lane's fragment sits at these (row, column) places; first written down by hand, and checked to cover each
# tile exactly once:

# %%
def a_at(lane: int, i: int) -> tuple[int, int]:   # A: 16 x 16, 8 registers a lane
  g, t = divmod(lane, 4)
  return g + 8 * ((i // 2) % 2), 2 * t + i % 2 + 8 * (i // 4)


def b_at(lane: int, i: int) -> tuple[int, int]:   # B: 16 x 8, 4 registers a lane
  g, t = divmod(lane, 4)
  return 2 * t + i % 2 + 8 * (i // 2), g


def c_at(lane: int, i: int) -> tuple[int, int]:   # C and D: 16 x 8, 4 registers a lane
  g, t = divmod(lane, 4)
  return g + 8 * (i // 2), 2 * t + i % 2


TABLES = {"A": (a_at, (16, 16), 8), "B": (b_at, (16, 8), 4), "C": (c_at, (16, 8), 4)}


def places(name: str) -> np.ndarray:
  """(32, registers, 2): the (row, column) of every register of every lane."""
  at, _, per_lane = TABLES[name]
  return np.array([[at(lane, i) for i in range(per_lane)] for lane in range(32)])


for name, (at, (rows, cols), per_lane) in TABLES.items():
  covered = {tuple(p) for p in places(name).reshape(-1, 2)}
  print(f"{name}: 32 lanes x {per_lane} registers cover {len(covered)} of its {rows * cols} elements once each:",
        len(covered) == rows * cols == 32 * per_lane)

# %% [markdown]
# A warp's mma, emulated lane by lane. Each lane loads from its tile exactly the elements its registers hold
# (`fragments`). The instruction then needs every lane's registers: on a GPU the tensor core gathers them; an
# emulation puts each register where the table says in a shared tile (on OpenCL, local memory), and each lane
# computes the elements of C its own registers hold, a dot product of a row of A and a column of B. Checked against
# NumPy, and against uopc's `uopc.codegen.wmma`, which holds the same tables:

# %%
def fragments(tile: np.ndarray, name: str) -> np.ndarray:
  """What each lane loads: (32, registers)."""
  p = places(name)
  return tile[p[..., 0], p[..., 1]]


def mma_by_lane(a_regs: np.ndarray, b_regs: np.ndarray, c_regs: np.ndarray) -> np.ndarray:
  """D = A @ B + C for one warp, fragments in (32 x 8, 32 x 4, 32 x 4), fragments out (32 x 4), float32."""
  shared_a, shared_b = np.zeros((16, 16), np.float32), np.zeros((16, 8), np.float32)
  for lane in range(32):   # the exchange: every lane's registers to their places in the tile
    for i in range(8): shared_a[a_at(lane, i)] = a_regs[lane, i]
    for i in range(4): shared_b[b_at(lane, i)] = b_regs[lane, i]
  d = c_regs.astype(np.float32)
  for lane in range(32):   # each lane: the elements of C it holds
    for i in range(4):
      row, col = c_at(lane, i)
      for kk in range(16): d[lane, i] += shared_a[row, kk] * shared_b[kk, col]
  return d


ta, tb = a[:16, :16], b[:16, :8]   # one tile of each, float16
d = mma_by_lane(fragments(ta, "A"), fragments(tb, "B"), np.zeros((32, 4), np.float32))
tile_d = np.zeros((16, 8), np.float32)
tile_d[places("C")[..., 0], places("C")[..., 1]] = d   # back from the lanes' registers to the tile
print("D matches float64 NumPy:", np.allclose(tile_d, ta.astype(np.float64) @ tb.astype(np.float64), atol=1e-5))
hw = wmma.M16N8K16
print("our tables are uopc's:", all((places(n) == op.positions()).all() for n, op in zip("ABC", (hw.a, hw.b, hw.c))))
# (to float32's rounding: NumPy's matmul adds the products in the order its BLAS kernel for this CPU chooses)
print("and so is the result:", np.allclose(d, wmma.mma(hw, fragments(ta, "A"), fragments(tb, "B"),
                                                       np.zeros((32, 4), np.float32)), rtol=0, atol=1e-5))

# %% [markdown]
# The picture: each element of the three tiles labelled `lane:register`, coloured by the lane's group g (the two
# shades of a colour tell even t from odd t), so that every one of the 32 lanes can be read off by its label. The
# four lanes of group g hold rows g and g + 8 of A and of C, each lane a pair of neighbouring columns; of B they
# hold column g, each lane pairs of neighbouring rows.

# %%
from matplotlib.colors import ListedColormap

shades = ListedColormap(plt.get_cmap("tab20").colors[:16])   # 8 groups x (dark, light)
fig, axes = plt.subplots(1, 3, figsize=(15, 7.5), gridspec_kw={"width_ratios": [16, 8, 8]})
for ax, (name, title) in zip(axes, (("A", "A (16 x 16)"), ("B", "B (16 x 8)"), ("C", "C, D (16 x 8)"))):
  rows, cols = TABLES[name][1]
  lane_of, reg_of = np.zeros((rows, cols), int), np.zeros((rows, cols), int)
  for lane, regs in enumerate(places(name)):
    for i, (r, c) in enumerate(regs): lane_of[r, c], reg_of[r, c] = lane, i
  ax.imshow(2 * (lane_of // 4) + lane_of % 2, cmap=shades, vmin=-0.5, vmax=15.5)
  for (r, c), lane in np.ndenumerate(lane_of):
    ax.text(c, r, f"{lane}:{reg_of[r, c]}", ha="center", va="center", fontsize=7.5)
  ax.set_xticks(range(cols), range(cols), fontsize=8)
  ax.set_yticks(range(rows), range(rows), fontsize=8)
  ax.set_xlabel("column")
  ax.set_title(title)
axes[0].set_ylabel("row")
fig.suptitle("mma.sync m16n8k16: which lane holds each element, and in which register (lane:register); "
             "colour = the lane's group g = lane // 4")
fig.tight_layout(rect=(0, 0, 1, 0.96))
plt.show()

# %% [markdown]
# A note on the name. In uopc, **WMMA** is the op in the loop IR that stands for PTX's `mma.sync` with these
# documented fragment layouts; it is not CUDA C++'s `nvcuda::wmma` API (`load_matrix_sync`, `mma_sync`,
# `store_matrix_sync`), whose fragments have a layout NVIDIA leaves unspecified, so a kernel cannot address them
# element by element. The tables above are `uopc.codegen.wmma`'s.
#
# With `TC=1` uopc lowers a matmul kernel to one warp per 16 x 8 output tile: each lane loads the elements the
# table gives it, a **WMMA** op updates its 4 accumulators, and each lane stores the 4 outputs it holds. On CUDA the
# op is the instruction itself:

# %%
cuda = CUDA.render(steps["tensor cores (WMMA)"], "gemm").src
shown = [ln.strip() for ln in cuda.splitlines() if "WMMA" in ln or "cvt.rn" in ln][:3]
mma = next(ln.strip() for ln in cuda.splitlines() if "asm volatile" in ln)
print("\n".join(shown + ["..."] + [part + ":" for part in mma.split(":")[:-1]] + ["  " + mma.split(":")[-1]]))

# %% [markdown]
# On OpenCL, which has no tensor cores, the same op is emulated lane by lane, as `mma_by_lane` did above: every lane
# writes its registers where the hardware's table puts them in the tile (local memory), the work-group waits, and
# each lane computes the C elements its registers hold. A lowering that loads the wrong element into a register
# (here the two halves of each A register swapped) then gives wrong numbers on CL, as it would on a GPU:

# %%
# %%needs CL
hw = wmma.M16N8K16
swapped = wmma.Shape(hw.name, 16, 8, 16, hw.inputs,
                     wmma.Operand(16, 16, 8, lambda lane, i: (hw.a.where(lane, i)[0], hw.a.where(lane, i ^ 1)[1])),
                     hw.b, hw.c)
for name, layout in (("hardware table", None), ("swapped halves", swapped)):
  prog = lower_tc(body, out, Options(tc=1, device="CL"), layout=layout)
  res = np.zeros(M * N, np.float32)
  get_device("CL").compile(CL.render(prog, "gemm").src)(a.reshape(-1), b.reshape(-1), res)
  print(f"{name:<15s} matches NumPy: {np.allclose(res.reshape(M, N), ref, atol=1e-3)}")

# %% [markdown]
# ## 13.4 The missing barrier
#
# PoCL runs a work-group's work-items one after another between barriers, in the same order every time, so a
# missing barrier gives the same numbers on every run there: wrong ones (12.2's group sum without its tree's
# barrier) or right ones, by luck. **Oclgrind** is an OpenCL device that simulates every work-item and checks every
# access to local memory: with `OCLGRIND_DATA_RACES=1` it reports two work-items touching one address without a
# barrier between them, one of them writing. We run the tiled kernel under it twice: as generated, and with the
# second barrier removed (a fast work-item's next loads then overwrite a tile another still reads); and the one
# without the second barrier on PoCL too, five times, against NumPy.

# %%
# %%needs Oclgrind
import os, subprocess, sys, tempfile
script = '''
import sys
import numpy as np
from uopc.device import get_device
from uopc.dtype import dtypes
from uopc.codegen.localtile import LocalTile, lower_local_tile
from uopc.render_gpu import CL
from uopc.tensor import Tensor
from uopc.uop import UOp, Ops, ParamArg, substitute
M, K, N = 40, 20, 36
a, b = (np.arange(n, dtype=np.float32) % 7 - 3 for n in (M * K, K * N))
body = (Tensor(a.reshape(M, K)) @ Tensor(b.reshape(K, N))).uop
bufs = [u for u in body.toposort() if u.op is Ops.BUFFER]
body = substitute(body, {u: UOp(Ops.BUFFER, (), ParamArg(k, u.dtype, u.arg.shape)) for k, u in enumerate(bufs)})
prog = lower_local_tile(body, UOp(Ops.BUFFER, (), ParamArg(2, dtypes.f32, (M * N,))), LocalTile(16, 16, 8, 2, 2))
if sys.argv[1] == "drop":
  last = [u for u in prog.toposort() if u.op is Ops.BARRIER][-1]
  prog = substitute(prog, {last: last.src[0]})
runs = int(sys.argv[2]) if len(sys.argv) > 2 else 1
ok = 0
for _ in range(runs):
  out = np.zeros(M * N, np.float32)
  get_device("CL").compile(CL.render(prog, "tiled").src)(a, b, out)
  ok += bool(np.allclose(out.reshape(M, N), a.reshape(M, K) @ b.reshape(K, N)))
print(f"matches NumPy on {ok} of {runs} runs")
'''
with tempfile.TemporaryDirectory() as tmp:
  path = os.path.join(tmp, "race.py")
  with open(path, "w") as f: f.write(script)
  env = {**os.environ, "CL_PLATFORM": "Oclgrind", "OCLGRIND_DATA_RACES": "1", "UOPC_CACHE_DIR": tmp}
  for mode in ("keep", "drop"):
    r = subprocess.run([sys.executable, path, mode], env=env, capture_output=True, text=True, timeout=300)
    report = r.stdout + r.stderr
    races = "Read-write data race at local memory" in report
    print(f"{mode:>4s} the second barrier: Oclgrind reports a read-write race in local memory: {races}")
  r = subprocess.run([sys.executable, path, "drop", "5"], env={**os.environ, "UOPC_CACHE_DIR": tmp},
                     capture_output=True, text=True, timeout=300)
  print("drop the second barrier, on PoCL:", r.stdout.strip().splitlines()[-1])

# %% [markdown]
# Oclgrind finds the race by running every work-item, and PoCL's numbers may not show it at all. uopc reads it from
# the loop program instead, as it reads a THREAD loop's races (chapters 4 and 5): `uopc.races.local_races(prog)`
# walks the program back from every access of local memory. A load must meet a barrier before it meets a store to
# the same memory (read after write: the load sees the other work-items' stores), and a store must meet a barrier
# before a load of it (write after read: no other work-item still reads the old value). At the top of the `k` loop
# the walk goes on from the loop's end, since one trip's loads meet the next trip's stores. The same tiled kernel,
# with both barriers and with each one removed:

# %%
from uopc.linearize import linearize
from uopc.races import check_no_races, local_races

M, K, N = 40, 20, 36
a, b = (np.arange(n, dtype=np.float32) % 7 - 3 for n in (M * K, K * N))
body = (Tensor(a.reshape(M, K)) @ Tensor(b.reshape(K, N))).uop
bufs = [u for u in body.toposort() if u.op is Ops.BUFFER]
body = substitute(body, {u: UOp(Ops.BUFFER, (), ParamArg(k, u.dtype, u.arg.shape)) for k, u in enumerate(bufs)})
tiled = lower_local_tile(body, UOp(Ops.BUFFER, (), ParamArg(2, dtypes.f32, (M * N,))), LocalTile(16, 16, 8, 2, 2))
check_no_races("the tiled kernel, both barriers", tiled)
barriers = [ln.uop for ln in linearize(tiled) if ln.uop.op is Ops.BARRIER]   # in program order
for which, bar in zip(("first", "second"), barriers):
  print(f"without the {which} barrier:")
  for race in local_races(substitute(tiled, {bar: bar.src[0]})): print("  ", race)

# %% [markdown]
# Without the first barrier a work-item reads the tile before the others have stored their part of it; without the
# second, a fast work-item's next stores overwrite both tiles (`lmem0`, `lmem1`) while a slow one still reads them.
# The verdict is the same on PoCL, Oclgrind, a GPU or no device at all. Week 6's hand-written kernels get the same
# walk over their OpenCL C (`check_local_barriers`).
#
# ## 13.5 FlashAttention-2
#
# Chapter 11's fused kernel gives each thread a block of queries and walks the keys. On a GPU the keys are shared:
# `uopc.kernels.fa2.fa2_ir` makes one work-group per (batch x head, block of 32 queries), one work-item per query row.
# Per tile of 16 keys the work-group loads the K and V tiles into local memory together and waits; each work-item then
# scores its row against the tile, takes the tile's max, rescales its output row once and adds P V, and the group
# waits again. After the last tile each work-item divides its row by its running sum, once. Causal attention never
# visits the tiles past the block's diagonal (the key loop's bound is an expression of the work-group's block, the
# same for all its work-items, so the barriers stay uniform). `uopc.nn.scaled_dot_product_attention` runs it for
# Tensors on CL or CUDA.
#
# **What makes it "-2".** FlashAttention (Dao et al., 2022) and FlashAttention-2 (Dao, 2023) compute the same online
# softmax; the second organises the work differently in three ways, and `fa2_ir` follows all three:
# - **Query blocks outside, and parallel.** FlashAttention's outer loop ran over blocks of keys and values, with the
#   blocks of queries inside it, and its grid was only batch x heads. FlashAttention-2 makes the block of queries
#   the outer loop and a dimension of the grid, so one long sequence fills the GPU even at batch size 1, and each
#   work-group walks the keys once for its own queries. Here: the grid's query-block axis.
# - **Deferred normalisation.** The output accumulator is rescaled by exp(m_old - m_new) at each tile but divided
#   by the running sum only once, after the last tile (FlashAttention rescaled the normalised output at every
#   block). Here: the division is the kernel's last statement.
# - **Queries split across warps, not keys.** Inside a thread block FlashAttention split K and V between the warps
#   ("split-K"), which then had to combine their partial outputs through shared memory; FlashAttention-2 gives each
#   warp its own queries and lets every warp read the whole K and V tiles, so no partial results are exchanged.
#   Here the split is as fine as it goes: each work-item owns one query row and reads all of the tile.
#
# **What this kernel is not.** It is scalar: each work-item computes its row of the score tile with a loop of
# float multiply-adds against K in local memory, and its row of P V the same way, one row per work-item, with no
# tensor cores and no WMMA op. The book's section 11.9 describes the real thing differently: there the score tile
# S = Q K^T is "a WMMA-lowered GEMM (Chapter 13)". In such a kernel a warp computes each 16 x 8 piece of S with
# `mma.sync` from Q fragments kept in registers and K fragments read from local memory; a row's running max and
# sum live in the four lanes of the group that holds that row of the C fragment (13.3's table) and are combined
# across those lanes (warp shuffles); and P, converted to half precision, becomes the A fragment of a second mma
# with V. Exercise 6 asks for it.

# %%
# %%needs CL
import math
from uopc.book import load_example
from uopc.nn import scaled_dot_product_attention as sdpa
book = load_example("flash_attention")
q, k, v = (rng.standard_normal((2, 3, 200, 64)).astype(np.float32) for _ in range(3))


def attention64(q, k, v, causal):
  s = q.astype(np.float64) @ np.swapaxes(k, -1, -2).astype(np.float64) / math.sqrt(q.shape[-1])
  if causal: s = s + np.triu(np.full(s.shape[-2:], -np.inf), 1)
  p = np.exp(s - s.max(-1, keepdims=True))
  return (p / p.sum(-1, keepdims=True)) @ v


for causal in (False, True):
  got = sdpa(*(Tensor(x, device="CL") for x in (q, k, v)), is_causal=causal)
  err = np.abs(got.numpy() - attention64(q, k, v, causal)).max()
  print(f"causal={causal!s:<5s} on {got.device}: within 1e-4 of float64 NumPy: {err < 1e-4}")
ch11 = book.attention(*(Tensor(x[0, 0]) for x in (q, k, v))).numpy()   # chapter 11's kernels, on the CPU
print("within 1e-5 of chapter 11's kernels:", np.abs(sdpa(*(Tensor(x[0, 0], device="CL") for x in (q, k, v))).numpy()
                                                   - ch11).max() < 1e-5)

# %% [markdown]
# ## 13.6 On a GPU
#
# PoCL's timings say what a CPU does with a GPU program. Where a CUDA GPU is present, the same kernels launch
# through `uopc.runtime.cuda`; the cell below times the tensor-core GEMM there and says so when there is none.

# %% tags=["nbval-ignore-output"]
from uopc.runtime.cuda import gpu_present, no_gpu_reason
if gpu_present():
  from uopc.helpers import Context, best_of
  x, y = (Tensor(rng.standard_normal((4096, 4096)).astype(np.float16), device="CUDA").cast(dtypes.f32)
          for _ in range(2))
  with Context(TC=1): dt = best_of(lambda: (x @ y).numpy(), 3)
  print(f"TC GEMM 4096^3: {2 * 4096**3 / dt / 1e12:.1f} TFLOP/s (with copies)")
else: print("no GPU here:", no_gpu_reason())

# %% [markdown]
# ## Exercises
#
# 1. Change `LocalTile` to a 64 x 64 block with an 8 x 8 register tile. Predict the global and local loads from the
#    formulas of 13.1 (`loads`), then check them with `traffic`.
# 2. Count the cycles of 13.1's A and B reads with 13.2's `conflict`. Then give the A tile a padded row (`bk + 1`
#    floats) in `lower_local_tile`, check the values on CL, and count again from the addresses the new kernel reads.
# 3. Swap the rows instead of the columns of the A table in 13.3. Does the emulation still catch it? Which entries
#    of C are wrong, and why those?
# 4. Remove the first barrier instead of the second in 13.4. What does Oclgrind report, and what do the numbers on
#    PoCL do?
# 5. In `fa2_ir`, let each work-item own two query rows. What changes in the loads, the barriers and the launch?
# 6. (A project.) Write the tensor-core FlashAttention-2 that 13.5 sketches: the score tile and P V as WMMA ops
#    (`uopc.codegen.tc` shows how a lowering places them), the running max and sum per group of four lanes. Check it
#    against `fa2_ir` on CL, where the WMMA op is emulated.
