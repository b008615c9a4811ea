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
# chapter builds the machinery fast GPU kernels are made of, as opts and lowerings of the compiler:
# - a **matrix multiply step by step**: the default kernel, a **local-memory tile** (a work-group loads a tile of
#   each input together, waits at a barrier, computes from it, waits again), then a **register tile** on top, then
#   **tensor cores**; global and local bytes counted for each step and plotted;
# - what a **bank conflict** is, computed for the tile layout;
# - the **fragment layout** of an `mma.sync` instruction as a picture, the **WMMA** op in the loop IR that uses it,
#   and why a wrong swizzle gives wrong numbers on the OpenCL device too;
# - the **race** a missing barrier makes, found by Oclgrind;
# - **FlashAttention-2** built from these pieces and checked against NumPy and Chapter 11's kernels.
#
# The modules: `uopc.codegen.localtile` (`lower_local_tile`; its optimizer is `uopc.opt.TiledOpt`), `uopc.codegen.wmma`
# (the layouts), `uopc.codegen.tc` (`TC=1`), `uopc.kernels.fa2` (`fa2_ir`).

# %% tags=["nbval-ignore-output"]
import numpy as np
from uopc.bench import header
from uopc.runtime.cl import device_name
print(header())
print("OpenCL:", device_name())

# %% [markdown]
# ## 13.1 A matrix multiply, step by step
#
# Four lowerings of the same kernel body, `C = A @ B`: chapter 12's default (each work-item computes a 4 x 4
# register tile straight from global memory), a local tile with one output per work-item, a local tile with a
# 4 x 4 register tile per work-item, and tensor cores. Each is a loop program; `uopc.codegen.gpudims.traffic` counts the
# bytes one launch moves (every access executed, no cache), and each runs on CL against NumPy.

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

M = K = N = 128
rng = np.random.default_rng(13)
a, b = (rng.standard_normal(s).astype(np.float16) for s in ((M, K), (K, N)))
ref = a.astype(np.float64) @ b.astype(np.float64)


def params(body: UOp) -> UOp:
  bufs = [u for u in body.toposort() if u.op is Ops.BUFFER]
  return substitute(body, {u: UOp(Ops.BUFFER, (), ParamArg(k, u.dtype, u.arg.shape)) for k, u in enumerate(bufs)})


body = params((Tensor(a).cast(dtypes.f32) @ Tensor(b).cast(dtypes.f32)).uop)
out = UOp(Ops.BUFFER, (), ParamArg(2, dtypes.f32, (M * N,)))
steps = {"default (register tile)": DefaultOpt.lower(body, out, Options(device="CL")),
         "local tile": lower_local_tile(body, out, LocalTile(16, 16, 16, 1, 1)),
         "local + register tile": lower_local_tile(body, out, LocalTile(32, 32, 8, 4, 4)),
         "tensor cores (WMMA)": lower_tc(body, out, Options(tc=1, device="CL"))}
counts = {}
for name, prog in steps.items():
  res = np.zeros(M * N, np.float32)
  get_device("CL").compile(CL.render(prog, "gemm").src)(a.reshape(-1), b.reshape(-1), res)
  t = traffic(prog)
  counts[name] = t
  print(f"{name:<26s} global loads {t['global_load'] / 1e6:6.2f} MB  local loads {t['local_load'] / 1e6:6.2f} MB"
        f"  max error {np.abs(res.reshape(M, N) - ref).max():.1e}")

# %%
import matplotlib.pyplot as plt
fig, ax = plt.subplots(figsize=(8, 3))
names = list(counts)
x = np.arange(len(names))
ax.bar(x - 0.2, [counts[n]["global_load"] / 1e6 for n in names], 0.4, label="global loads")
ax.bar(x + 0.2, [counts[n]["local_load"] / 1e6 for n in names], 0.4, label="local loads")
ax.set_xticks(x, names, fontsize=8)
ax.set_ylabel("MB per launch")
ax.legend()
plt.show()

# %% [markdown]
# The default kernel reads each element of A from global memory once per 4 output columns (its register tile). The
# local tile reads it into local memory once per work-group, whose 16 columns then share it: global loads fall by
# the ratio of those widths, and the reads move to local memory. The register tile then cuts the local reads too:
# each value read from local memory feeds four accumulators. The tensor-core step loads per-lane fragments, each
# element of A once per 8 output columns (the emulation's exchange through local memory happens inside the WMMA op,
# which `traffic` does not see).
#
# The local tile, as the CL source prints it: the cooperative loads, the barrier, the multiply from local memory,
# the second barrier.

# %%
src = CL.render(steps["local + register tile"], "gemm").src
lines = src.splitlines()
first = next(i for i, ln in enumerate(lines) if "for (" in ln)
print("\n".join(lines[first:first + 6]))
print("  ...")
print("\n".join(ln for ln in lines if "barrier" in ln or "__local" in ln))

# %% [markdown]
# ## 13.2 Bank conflicts
#
# Local memory is split into 32 **banks**, 4 bytes wide: float `i` lives in bank `i % 32`. The 32 work-items of a
# warp read in one cycle if they touch different banks, or the same address (a broadcast); two different addresses
# in one bank take two cycles. The work-items of our 8 x 8 work-group are numbered `tid = ly * 8 + lx`, so a warp
# is 4 values of `ly` by 8 of `lx`. Each reads `A[(ly * 4 + i) * 8 + k]` and `B[k * 32 + lx * 4 + j]`:

# %%
def conflict(addresses: np.ndarray) -> int:
  """Cycles a warp's local-memory read takes: the most distinct addresses any one bank serves."""
  return max(len(set(addresses[addresses % 32 == bank])) for bank in range(32))


ly, lx = np.divmod(np.arange(32), 8)
print(f"A read: {conflict((ly * 4) * 8)} cycles, B read: {conflict(lx * 4)} cycles")
print(f"A read with a padded row of 9 floats: {conflict((ly * 4) * 9)} cycles")

# %% [markdown]
# B is conflict-free: the 8 values of `lx` touch 8 banks, and the 4 values of `ly` share those addresses (a
# broadcast). A is not: the 8 work-items with one `ly` share an address, but the 4 values of `ly` read rows that lie
# 4 x 8 = 32 floats apart, all in one bank, so the read takes 4 cycles. Padding the tile's row by one float spreads
# them over 4 banks. (Exercise 2 makes the change in `lower_local_tile`.)
#
# ## 13.3 Tensor cores: fragments
#
# `mma.sync.aligned.m16n8k16` multiplies a 16 x 16 tile of A by a 16 x 8 tile of B with the 32 lanes of a warp each
# holding 8 elements of A, 4 of B and 4 of C in registers. Which lane holds which element is fixed by the
# hardware; `uopc.codegen.wmma` writes it down as tables. The picture: each element coloured by the lane holding it.

# %%
fig, axes = plt.subplots(1, 3, figsize=(10, 3.5))
for ax, (name, op) in zip(axes, (("A (16 x 16)", wmma.M16N8K16.a), ("B (16 x 8)", wmma.M16N8K16.b),
                                 ("C (16 x 8)", wmma.M16N8K16.c))):
  owner = wmma.from_fragments(np.repeat(np.arange(32)[:, None], op.per_lane, 1), op)
  ax.imshow(owner, cmap="tab20")
  for (r, c), lane in np.ndenumerate(owner): ax.text(c, r, lane, ha="center", va="center", fontsize=5)
  ax.set_title(name)
  ax.axis("off")
plt.show()

# %% [markdown]
# With `TC=1` uopc lowers a matmul kernel to one warp per 16 x 8 output tile: each lane loads the elements the
# table gives it, a **WMMA** op updates its 4 accumulators, and each lane stores the 4 outputs it holds. On CUDA the
# op is the instruction itself:

# %%
cuda = CUDA.render(steps["tensor cores (WMMA)"], "gemm").src
shown = [ln.strip() for ln in cuda.splitlines() if "WMMA" in ln or "cvt.rn" in ln][:3]
mma = next(ln.strip() for ln in cuda.splitlines() if "asm volatile" in ln)
print("\n".join(shown + ["..."] + [part + ":" for part in mma.split(":")[:-1]] + ["  " + mma.split(":")[-1]]))

# %% [markdown]
# On OpenCL, which has no tensor cores, the same op is emulated lane by lane: every lane writes its registers where
# the hardware's table puts them in the tile (local memory), the work-group waits, and each lane computes the C
# elements its registers hold. A lowering that loads the wrong element into a register (here the two halves of each
# A register swapped) then gives wrong numbers on CL, as it would on a GPU:

# %%
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
# PoCL runs a work-group's work-items one after another between barriers, so a missing barrier may give right
# numbers there by luck. **Oclgrind** is an OpenCL device that simulates every work-item and checks every access to
# local memory: with `OCLGRIND_DATA_RACES=1` it reports two work-items touching one address without a barrier
# between them, one of them writing. We run the tiled kernel under it twice: as generated, and with the second
# barrier removed (a fast work-item's next loads then overwrite a tile another still reads).

# %%
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
out = np.zeros(M * N, np.float32)
get_device("CL").compile(CL.render(prog, "tiled").src)(a, b, out)
'''
with tempfile.TemporaryDirectory() as tmp:
  path = os.path.join(tmp, "race.py")
  with open(path, "w") as f: f.write(script)
  env = {**os.environ, "UOPC_CL_PLATFORM": "Oclgrind", "OCLGRIND_DATA_RACES": "1", "UOPC_CACHE_DIR": tmp}
  for mode in ("keep", "drop"):
    r = subprocess.run([sys.executable, path, mode], env=env, capture_output=True, text=True, timeout=300)
    report = r.stdout + r.stderr
    races = "Read-write data race at local memory" in report
    print(f"{mode:>4s} the second barrier: Oclgrind reports a read-write race in local memory: {races}")

# %% [markdown]
# ## 13.5 FlashAttention-2
#
# Chapter 11's fused kernel gives each thread a block of queries and walks the keys. On a GPU the keys are shared:
# `uopc.kernels.fa2.fa2_ir` makes one work-group per (batch x head, block of 32 queries), one work-item per query row.
# Per tile of 16 keys the work-group loads the K and V tiles into local memory together and waits; each work-item then
# scores its row against the tile, takes the tile's max, rescales its output row once and adds P V, and the group
# waits again. Causal attention never visits the tiles past the block's diagonal (the key loop's bound is an
# expression of the work-group's block, the same for all its work-items, so the barriers stay uniform).
# `uopc.nn.scaled_dot_product_attention` runs it for Tensors on CL or CUDA.

# %%
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
#    formulas of 13.1, then check them with `traffic`.
# 2. Give the A tile a padded row (`bk + 1` floats) in `lower_local_tile`, check the values on CL, and recompute
#    13.2's conflicts from the addresses the new kernel reads.
# 3. Swap the rows instead of the columns of the A table in 13.3. Does the emulation still catch it? Which entries
#    of C are wrong, and why those?
# 4. Remove the first barrier instead of the second in 13.4. What does Oclgrind report, and what do the numbers on
#    PoCL do?
# 5. In `fa2_ir`, let each work-item own two query rows. What changes in the loads, the barriers and the launch?
