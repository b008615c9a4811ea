# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # Chapter 12. GPUs
#
# Chapter 11 ended on a GPU: FlashAttention gives each thread block a block of queries, keeps its tiles in shared
# memory and never writes the N x N scores to global memory. This chapter builds the machine model that sentence
# assumes, and a uopc backend that targets it. You will
# - learn the **execution model**: a kernel is launched over a **grid** of **work-groups** (CUDA: thread
#   blocks), each a set of **work-items** (threads) that run in lock-step groups of 32 (**warps**), share a small
#   fast **local memory** (CUDA: shared memory) and meet at **barriers**;
# - write a small GPU renderer in this notebook, for an elementwise kernel and a work-group reduction, and run
#   both on a real OpenCL device, checked against NumPy;
# - see how uopc's loop IR grows **launch axes** (GLOBAL and LOCAL), the **SPECIAL** index values they become,
#   **local memory** and **BARRIER**, and how OpenCL C and CUDA C are two small tables over the one C-style renderer;
# - run Chapter 11's attention, unfused and fused, on the CL device, print the OpenCL, and count each kernel's
#   global and local memory traffic;
# - compile every kernel for two NVIDIA GPU generations with NVRTC, and run them where a GPU exists.
#
# There is no GPU on the machines this course runs on. The OpenCL device is **PoCL**, an OpenCL implementation for
# CPUs (installed with `pip install "pyopencl[pocl]"`): it runs real GPU programs, with real work-groups, local
# memory and barriers, on the CPU's cores. That is enough to check every kernel, and not enough to time one
# (section 12.6). The finished pieces are `uopc.codegen.gpudims` (the launch opt and traffic counts), `uopc.render_gpu`
# (the dialects), `uopc.runtime.cl` and `uopc.runtime.cuda`.

# %% tags=["nbval-ignore-output"]
from uopc.bench import header
print(header())

# %% tags=["nbval-ignore-output"]
# %%needs CL
from uopc.runtime.cl import device_name
print("OpenCL:", device_name())

# %% [markdown]
# ## 12.1 The execution model
#
# A CPU kernel in this book is a loop nest with one `#pragma omp parallel for`: a few threads, each running many
# iterations. A GPU kernel is the *body* of a loop nest, launched once for every point of an index space:
#
# | OpenCL | CUDA | what it is |
# |---|---|---|
# | NDRange | grid | all the work-items of one launch, up to 3 dimensions |
# | work-group | thread block | work-items on one compute unit (SM) at once: they share local memory and barriers |
# | work-item | thread | one execution of the kernel body |
# | sub-group | warp | 32 work-items that issue the same instruction together (NVIDIA) |
# | `get_group_id(d)` | `blockIdx.x/y/z` | which work-group |
# | `get_local_id(d)` | `threadIdx.x/y/z` | which work-item inside it |
# | `__global` | (default) | device memory (HBM): large, slow, seen by every work-item |
# | `__local` | `__shared__` | on-chip memory of one work-group: small (tens of KB), fast |
# | (private) | registers (CUDA's "local memory" when they spill) | a work-item's own variables |
# | `barrier(CLK_LOCAL_MEM_FENCE)` | `__syncthreads()` | the group waits; local stores before it are seen after it |
#
# One word means opposite things. CUDA's **local memory** is not OpenCL's `__local`: in CUDA it is a thread's
# private memory that lives off-chip, in device memory (cached, but as slow as global memory on a miss), where the
# compiler puts arrays indexed at run time and the registers it has to **spill**. OpenCL calls that private memory;
# OpenCL's `__local` is CUDA's `__shared__`, on-chip and shared by the work-group. This book says "local memory" in
# OpenCL's sense throughout; in CUDA's documentation, compiler reports and profilers, local-memory traffic means
# spills, a sign of too many registers per thread.
#
# Three consequences drive every GPU optimization in this chapter and the next:
# - **Coalescing.** The 32 work-items of a warp load together. If they touch 32 neighbouring floats, that is one
#   128-byte memory transaction; if each touches a different row, it is 32. So dimension 0 of the launch (the work
#   items that are neighbours) should walk the output with stride 1.
# - **Occupancy.** A compute unit holds many work-groups at once and switches between their warps to hide memory
#   latency. How many fit is set by its limits on threads, registers and local memory: a kernel that uses many
#   registers per work-item, or much local memory per group, leaves fewer warps to switch between.
# - **Local memory and barriers.** A value loaded from global memory once into local memory can be read by every
#   work-item of the group. That is the GPU's version of Chapter 10's register tile, and it needs a barrier between
#   the stores and the loads.
#
# A launch is a loop nest in disguise: a 1-D launch of G groups of B items runs the body at `i = g*B + l` for
# every g < G and l < B, exactly what two nested loops would do, in an order nobody promises.

# %%
G, B = 3, 4
print("work-item (group, local) -> global index")
for g in range(G):
  print("  ".join(f"({g},{lid})->{g * B + lid:2d}" for lid in range(B)))

# %% [markdown]
# Coalescing is a count we can make: take the addresses the 32 work-items of a warp load in one instruction and
# count the distinct 128-byte segments they fall into. A row-major (N, N) float array read along a row by
# neighbouring work-items (`x[row*N + lid]`) and read down a column (`x[lid*N + col]`):

# %%
import numpy as np


def segments(addresses, itemsize: int = 4, segment: int = 128) -> int:
  """Memory transactions one warp's load needs: distinct `segment`-byte blocks its addresses fall in."""
  return len({a * itemsize // segment for a in addresses})


rng = np.random.default_rng(0)
N = 1024
lanes = range(32)
print("along a row  (x[7*N + lid]):", segments([7 * N + lane for lane in lanes]), "transaction(s) per warp")
print("down a column (x[lid*N + 7]):", segments([lane * N + 7 for lane in lanes]), "transaction(s) per warp")

# %% [markdown]
# Occupancy is arithmetic on the limits of one compute unit. NVIDIA publishes them per architecture; for an A100
# (compute capability 8.0) one SM holds at most 2048 threads, 32 blocks, 65536 32-bit registers and 164 KB of
# shared memory. The number of blocks that fit is the smallest of the four quotients:

# %%
SM = dict(threads=2048, blocks=32, registers=65536, shared=164 * 1024)   # A100, NVIDIA's published limits


def occupancy(block: int, regs_per_thread: int, shared_per_block: int) -> float:
  """Fraction of the SM's 2048 thread slots that resident blocks fill."""
  fits = min(SM["threads"] // block, SM["blocks"], SM["registers"] // (regs_per_thread * block),
             SM["shared"] // shared_per_block if shared_per_block else SM["blocks"])
  return fits * block / SM["threads"]


print(f"{'threads/block':>13} {'regs/thread':>11} {'shared/block':>12} {'occupancy':>9}")
for block, regs, shared in [(256, 32, 0), (256, 64, 0), (256, 128, 0), (128, 32, 48 * 1024), (1024, 32, 0)]:
  print(f"{block:>13} {regs:>11} {shared:>12} {occupancy(block, regs, shared):>9.0%}")

# %% [markdown]
# ## 12.2 A small GPU renderer
#
# Our first GPU backend fits in a cell. An elementwise kernel is one line of OpenCL C: each work-item computes one
# element, at its global index. A renderer for it fills in a template; a runtime is pyopencl: build the program,
# fetch the kernel once (`cl.Kernel`), wrap the NumPy arrays in buffers, launch over a global size and a
# work-group size, read the result back. We use uopc's command queue (`cl_queue`), which found the PoCL platform by
# name, and keep PoCL's kernel cache under uopc's (`POCL_CACHE_DIR`).

# %%
# %%needs CL
import warnings
import pyopencl as cl
from uopc.runtime.cl import cl_queue

ctx, queue = cl_queue()


def render_elementwise(name: str, expr: str, n_in: int) -> str:
  """An OpenCL kernel computing out[i] = expr(a0[i], a1[i], ...), one work-item per element."""
  params = ", ".join([f"__global const float* a{k}" for k in range(n_in)] + ["__global float* out"])
  body = expr.format(*(f"a{k}[i]" for k in range(n_in)))
  return f"__kernel void {name}({params}) {{\n  int i = get_global_id(0);\n  out[i] = {body};\n}}"


def build(src: str, name: str):
  with warnings.catch_warnings():   # PoCL's build log arrives as a warning: keep stderr clean
    warnings.simplefilter("ignore")
    return cl.Kernel(cl.Program(ctx, src).build(), name)


def run(kernel, arrays, out, global_size: int, local_size: int) -> np.ndarray:
  mf = cl.mem_flags
  bufs = [cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=a) for a in arrays]
  out_buf = cl.Buffer(ctx, mf.WRITE_ONLY, out.nbytes)
  kernel(queue, (global_size,), (local_size,), *bufs, out_buf)
  cl.enqueue_copy(queue, out, out_buf)
  return out


src = render_elementwise("axpy_relu", "fmax({0} * 2.0f + {1}, 0.0f)", 2)
print(src)
a, b = rng.standard_normal(4096).astype(np.float32), rng.standard_normal(4096).astype(np.float32)
out = run(build(src, "axpy_relu"), [a, b], np.empty_like(a), 4096, 64)
print("matches NumPy:", np.allclose(out, np.maximum(a * 2 + b, 0)))

# %% [markdown]
# A reduction is where the work-group earns its keep. One work-group sums B elements: each work-item loads one
# into local memory, then half of them add the other half's values to their own, then a quarter, and so on: log2(B)
# steps, with a barrier after every step so that no work-item reads a slot before its neighbour has written it.
# Work-item 0 writes the group's sum; a second, tiny launch (or the host) adds the group sums.

# %%
def render_group_sum(name: str, block: int) -> str:
  """Each work-group of `block` work-items sums its `block` elements into partial[group]: a tree in local memory."""
  return f"""__kernel void {name}(__global const float* x, __global float* partial) {{
  __local float tile[{block}];
  int lid = get_local_id(0), gid = get_group_id(0);
  tile[lid] = x[gid * {block} + lid];
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int s = {block // 2}; s > 0; s >>= 1) {{
    if (lid < s) tile[lid] += tile[lid + s];
    barrier(CLK_LOCAL_MEM_FENCE);
  }}
  if (lid == 0) partial[gid] = tile[0];
}}"""


BLOCK = 128
print(render_group_sum("group_sum", BLOCK))
x = rng.standard_normal(64 * BLOCK).astype(np.float32)

# %%
# %%needs CL
partial = run(build(render_group_sum("group_sum", BLOCK), "group_sum"), [x], np.empty(64, np.float32), x.size, BLOCK)
print("group sums match NumPy:", np.allclose(partial, x.reshape(64, BLOCK).sum(1), atol=1e-4))
print("total matches NumPy:   ", np.isclose(partial.sum(), x.sum(), atol=1e-3))

# %% [markdown]
# The barrier after every step is not a formality. Here is the same kernel without it, and without the first
# barrier instead (the one between the loads into local memory and the tree), each run five times on this
# device, checked against NumPy:

# %%
# %%needs CL
def render_group_sum_without(name: str, block: int, which: str) -> str:
  """render_group_sum with one of its barriers removed: "tree" (the one in the loop) or "first"."""
  src = render_group_sum(name, block).splitlines()
  at = [k for k, line in enumerate(src) if "barrier" in line][1 if which == "tree" else 0]
  return "\n".join(src[:at] + src[at + 1:])


for which in ("tree", "first"):
  kernel = build(render_group_sum_without(f"group_sum_no_{which}", BLOCK, which), f"group_sum_no_{which}")
  ok = [np.allclose(run(kernel, [x], np.empty(64, np.float32), x.size, BLOCK), x.reshape(64, BLOCK).sum(1),
                    atol=1e-4) for _ in range(5)]
  print(f"without the {which} barrier: matches NumPy on {sum(ok)} of 5 runs")

# %% [markdown]
# PoCL runs a work-group's work-items one after another between barriers, in the same order every time, so a race
# gives the same result on every run: all five runs agree for each kernel above, wrong every time or right every
# time, by luck of that order. A GPU interleaves work-items differently from run to run, so the same kernels there
# could fail now and then. Neither device proves a kernel free of races.
#
# The program can. `uopc.races.opencl_local_races` reads the kernel's text: every read of another work-item's slot
# of a `__local` array must come after a `barrier(...)` on every way to it from the stores it can see, the loop's first
# trip and the trips after. It runs nothing, so its verdict is the same on PoCL, on a GPU, and on a laptop with no
# OpenCL at all; `check_local_barriers` is the visible check built on it (week 6 uses it). Here it reads the kernel with
# both barriers, then with each one removed (Chapter 13 reads uopc's own tiled kernels the same way, and uses
# Oclgrind, which checks every access to local memory as the kernel runs):

# %%
from uopc.races import check_local_barriers, opencl_local_races

lines = render_group_sum("group_sum", BLOCK).splitlines()
first, tree = [k for k, line in enumerate(lines) if "barrier" in line]
check_local_barriers("group_sum: every read of another work-item's slot after a barrier", "\n".join(lines))
for which, at in (("first", first), ("tree", tree)):
  print(f"without the {which} barrier:", *opencl_local_races("\n".join(lines[:at] + lines[at + 1:])))

# %% [markdown]
# The first barrier orders the loads into `tile` before the tree's first read of a neighbour's slot; the one in the
# loop orders each step's sums before the next step reads them, so removing either leaves a read that another
# work-item's store may not have reached.
#
# Count the traffic of that kernel. Global memory: each of the 8192 elements is loaded once, and 64 sums are
# stored. Local memory: 8192 stores, then in each step every active work-item loads two slots and stores one. The
# tree reads local memory about twice as often as global memory, and local memory is the cheap one: on a GPU it is
# on-chip, with roughly an order of magnitude more bandwidth than HBM.

# %%
steps = [BLOCK >> k for k in range(1, BLOCK.bit_length())]   # active work-items per step: 64, 32, ..., 1
groups = x.size // BLOCK
print("global loads ", x.size * 4, "bytes; global stores", groups * 4, "bytes")
print("local stores ", (x.size + groups * sum(steps)) * 4, "bytes; local loads ", groups * 2 * sum(steps) * 4, "bytes")

# %% [markdown]
# ## 12.3 GPU loops in uopc
#
# uopc's loop IR says the same things with four additions (`uopc.uop`):
# - `AxisType.GLOBAL` and `AxisType.LOCAL`: a loop over work-groups and a loop over the work-items of one group.
#   A loop program with them is still a loop program; the C renderer prints them as plain `for` loops.
# - `Ops.SPECIAL`: what a GPU renderer turns those loops into, the index values `gidx0 = get_group_id(0)` and
#   `lidx0 = get_local_id(0)`. The loop disappears: every work-item runs the body once.
# - an `ALLOC` whose arg is a `LocalArg`: one array per work-group, in local memory.
# - `Ops.BARRIER`: a statement over the stores it orders; loads placed `.after(barrier)` come after it.
#
# The **launch opt**, `uopc.codegen.gpudims.launch_axes`, takes the loops that enclose every statement of a kernel (its
# output loops, whose iterations share nothing), splits each into GLOBAL x LOCAL (r = g*b + l) and gives dimension 0 to
# the innermost one, so neighbouring work-items write neighbouring addresses. The default chooser,
# `default_block(sizes, limit)`, gives each axis (dimension 0 first) the largest work-group that divides it and keeps
# the group within `limit` work-items. `launch_axes` passes it a limit of 256 work-items, or a quarter of the
# launch's work-items where that is smaller, so that a kernel with enough work has at least four work-groups to
# spread over the compute units (computing that limit is exercise 12.1; the last lines below show the chooser with
# its default limit and with a fixed limit of 64 work-items, a device whose work-groups hold no more). A divisor, so
# no work-item needs a bounds check. Here is the loop program of a row sum, before and after, both printed by the C
# renderer:

# %%
from uopc.dtype import dtypes
from uopc.codegen.gpudims import default_block, launch_axes
from uopc.rangeify import lower, Ctx
from uopc.render_c import render_c
from uopc.runtime import Program
from uopc.uop import UOp, Ops, ParamArg, LocalArg, AxisType, range_, sink

f32 = dtypes.f32
X, OUT = UOp(Ops.BUFFER, (), ParamArg(0, f32, (24 * 40,))), UOp(Ops.BUFFER, (), ParamArg(1, f32, (24,)))
row_sum = lower(UOp(Ops.REDUCE, (UOp(Ops.RESHAPE, (X,), (24, 40)),), (Ops.ADD, 1)), OUT, Ctx())   # x.sum(1)
print(render_c(row_sum, "row_sum"))
split = launch_axes(row_sum, block=(8,))
print(render_c(split, "row_sum_split"))
xs = rng.standard_normal((24, 40)).astype(np.float32)
res = np.zeros(24, np.float32)
Program(render_c(split, "row_sum_split"), "row_sum_split")(xs.reshape(-1), res)
print("the split loops compute the same sums:", np.allclose(res, xs.sum(1), atol=1e-5))
for sizes in ([512, 512], [24, 40], [45, 3]):
  print(f"default_block({sizes}) = {default_block(sizes)}; with a limit of 64 work-items: "
        f"{default_block(sizes, 64)}")

# %% [markdown]
# A dialect is a table. `uopc.render_gpu` sets, for OpenCL C and CUDA C, the words the one C-style renderer
# (`uopc.renderer.CStyleRenderer`) prints; the walk over the program is shared with C. (`{block}` and `{threads}`
# become the work-group size: OpenCL's `reqd_work_group_size` and CUDA's `__launch_bounds__` promise it to the
# compiler, which may then specialize the kernel for it, or give each thread more registers.)

# %%
from uopc.render_c import C
from uopc.render_gpu import CL, CUDA

table = {attr: [repr(getattr(r, attr)) for r in (C, CL, CUDA)]
         for attr in ("kernel_prefix", "buffer_decl", "thread_pragma", "barrier", "smem_prefix")}
table["group id"] = [repr(r.code_for_workitem.get("gidx")) for r in (C, CL, CUDA)]
table["local id"] = [repr(r.code_for_workitem.get("lidx")) for r in (C, CL, CUDA)]
table["bool type"] = [repr(r.types[dtypes.bool]) for r in (C, CL, CUDA)]
for attr, words in table.items():
  print(attr)
  for dialect, w in zip(("C", "OpenCL", "CUDA"), words): print(f"  {dialect:<7} {w}")

# %% [markdown]
# The same row sum through the OpenCL dialect. The renderer runs the launch opt (the default chooser gives four
# work-groups of 6), turns the launch loops into SPECIALs, and the signature it returns carries the launch sizes, so
# the runtime never reads the source:

# %%
r = CL.render(row_sum, "row_sum")
print(r.src)
print(r.signature.launch)

# %% [markdown]
# A kernel with local memory, written in the IR: each work-group normalizes one row, `out = 2^x / sum(2^x)`. Each
# work-item stages its `2^x` in local memory once, the barrier orders those stores before every load, and then
# each work-item reads the whole row from local memory for the sum. Global memory sees each element loaded once.

# %%
def local_normalize_ir(rows: int, width: int) -> UOp:
  X, OUT = (UOp(Ops.BUFFER, (), ParamArg(s, f32, (rows * width,))) for s in range(2))
  LM, S = UOp(Ops.ALLOC, (), LocalArg(0, f32, (width,))), UOp(Ops.ALLOC, (), ParamArg(1, f32, (1,)))
  g, lo = range_(rows, 0, AxisType.GLOBAL), range_(width, 1, AxisType.LOCAL)
  staged = LM.index(lo).store(X.index(g * width + lo).load().exp2())
  bar = UOp(Ops.BARRIER, (staged,))                       # every store to LM above, before any load below
  Si = S.after(g, lo)
  init = Si.index(0).store(UOp.const(0.0))
  k = range_(width, 2, AxisType.REDUCE)
  Sk = Si.after(init, k)
  total = Sk.index(0).store(Sk.index(0).load() + LM.after(bar, k).index(k).load()).end(k)
  out = OUT.index(g * width + lo).store(LM.after(bar).index(lo).load() * Si.after(total).index(0).load().recip())
  return sink(out.end(g, lo))


from uopc.device import get_device

norm = CL.render(local_normalize_ir(8, 64), "local_normalize")
print(norm.src)

# %%
# %%needs CL
xs = rng.standard_normal((8, 64)).astype(np.float32)
res = np.zeros(8 * 64, np.float32)
get_device("CL").compile(norm.src)(xs.reshape(-1), res)
e = np.exp2(xs)
print("matches NumPy:", np.allclose(res.reshape(8, 64), e / e.sum(1, keepdims=True), rtol=1e-5))

# %% [markdown]
# ## 12.4 Chapter 11's attention on the CL device
#
# Nothing above the renderer changes. `Tensor(x, device="CL")` places data on the CL device (or `DEVICE=CL` in the
# environment, read like `DEBUG`; `.to("CPU")` moves a result back); the same kernelizer cuts the same plans,
# cached per device, and only the dialect and the runtime differ. The book's listing, `examples/flash_attention.py`,
# runs unchanged with `DEVICE=CL python examples/flash_attention.py 256 64`. Here, both plans of Chapter 11 at
# N = 128, D = 32, checked against NumPy:

# %%
import math
from uopc.book import load_example
from uopc.kernelize import make_plan
from uopc.tensor import Tensor

book = load_example("flash_attention")
Nq, Dq = 128, 32
q, k, v = (rng.standard_normal((Nq, Dq)).astype(np.float32) for _ in range(3))
s = q.astype(np.float64) @ k.T / math.sqrt(Dq)
p = np.exp(s - s.max(-1, keepdims=True))
ref = (p / p.sum(-1, keepdims=True)) @ v

# %%
# %%needs CL
unfused = book.attention(*(Tensor(a, device="CL") for a in (q, k, v)))
print("device:", unfused.device)
print("unfused on CL, max error below 1e-5:", np.abs(unfused.numpy() - ref).max() < 1e-5)
Tensor.fuse_reduce, Tensor.opt, old_opt = True, book.FlashOpt, Tensor.opt
fused = book.attention(*(Tensor(a, device="CL") for a in (q, k, v))).numpy()
Tensor.fuse_reduce, Tensor.opt = False, old_opt
print("fused on CL, max error below 1e-5:  ", np.abs(fused - ref).max() < 1e-5)

# %% [markdown]
# The plans, rendered for OpenCL. Each kernel's launch: the unfused Q K^T kernel (`r_128_128`) has a 4 x 4 register tile
# per work-item (Chapter 10's upcast), so its 128 x 128 outputs take 1,024 work-items, one per tile of a 32 x 32 grid of
# tiles. The launch does not keep that square: its work-groups are 32 x 8 (the local id along axis 0 picks one of the 32
# tile columns, along axis 1 one of 8 tile rows), and its grid of 4 work-groups takes the 32 tile rows 8 at a time. The
# fused kernel gives one work-item to each query row, which walks its output columns 16 at a time. Every launch has at
# least four work-groups (the quarter rule of 12.3), and all but one have exactly four: these kernels are small, so a
# quarter of the launch is below the 256-item cap. The softmax's exponential kernel (`e_128_128`, 16,384 work-items)
# reaches the cap instead: 64 work-groups of 256.

# %%
Q, K, V = (Tensor(a) for a in (q, k, v))
root = book.attention(Q, K, V).uop
plans = {"unfused": make_plan([root], opt=Tensor.opt), "fused": make_plan([root], fuse_reduce=True, opt=book.FlashOpt)}
for name, plan in plans.items():
  print(name)
  for kern in plan.kernels:
    launch = CL.render(kern.ast, kern.name).signature.launch
    print(f"  {kern.name:<12} grid {str(launch.grid):<9} x block {str(launch.block):<9} = {launch.items:>5} work-items")

# %% [markdown]
# The softmax's exponential kernel of the unfused plan, as OpenCL (`DEBUG=4` prints every kernel of a realize):

# %%
exp_kernel = next(kern for kern in plans["unfused"].kernels if kern.name.startswith("e_"))
print(CL.render(exp_kernel.ast, exp_kernel.name).src)

# %% [markdown]
# and the first lines of the fused kernel: one work-item walks the keys three times (max, sum, output), as in
# Chapter 11, and nothing N x N reaches global memory.

# %%
fused_src = CL.render(plans["fused"].kernels[-1].ast, plans["fused"].kernels[-1].name).src
print("\n".join(fused_src.splitlines()[:14]))
print(f"... ({len(fused_src.splitlines())} lines)")

# %% [markdown]
# ## 12.5 Global and local memory traffic
#
# `uopc.codegen.gpudims.traffic` counts, for one launch, the bytes every load and store executes, by memory: global (the
# kernel's buffers) and local (LocalArg arrays). It counts accesses, not distinct bytes: a value loaded twice
# counts twice (on a GPU the second load may hit a cache; the count is what a kernel *asks* for).

# %%
from uopc.codegen.gpudims import traffic

counts = {}
for name, plan in plans.items():
  for i, kern in enumerate(plan.kernels): counts[f"{name} {i} {kern.name}"] = traffic(kern.ast)
counts["local_normalize (8 x 64)"] = traffic(local_normalize_ir(8, 64))
print(f"{'kernel':<26} {'global load':>12} {'global store':>12} {'local load':>11} {'local store':>11}")
for name, t in counts.items():
  print(f"{name:<26} {t['global_load']:>12,} {t['global_store']:>12,} {t['local_load']:>11,} {t['local_store']:>11,}")
total = {name: sum(t["global_load"] + t["global_store"] for n, t in counts.items() if n.startswith(name))
         for name in plans}
print("global bytes per plan:", {name: f"{b / 1e6:.2f} MB" for name, b in total.items()},
      f"(fused / unfused: {total['fused'] / total['unfused']:.1f}x)")
ln = counts["local_normalize (8 x 64)"]
print(f"local_normalize: each element loaded {ln['global_load'] // ln['global_store']} time(s) from global memory, "
      f"{ln['local_load'] // ln['local_store']} times from local memory")

# %%
import matplotlib.pyplot as plt

names = list(counts)
fig, ax = plt.subplots(figsize=(9, 4))
ypos = np.arange(len(names))
ax.barh(ypos - 0.2, [counts[n]["global_load"] + counts[n]["global_store"] for n in names], 0.4, label="global")
ax.barh(ypos + 0.2, [counts[n]["local_load"] + counts[n]["local_store"] for n in names], 0.4, label="local")
ax.set_yticks(ypos, names)
ax.set_xscale("symlog", linthresh=1e4)
ax.set_xlabel("bytes accessed per launch (loads + stores)")
ax.set_title(f"Memory traffic per kernel: chapter 11's attention plans (N = {Nq}, D = {Dq}) and 12.3's "
             "local_normalize", fontsize=10)
ax.legend()
ax.invert_yaxis()
fig.tight_layout()
plt.show()

# %% [markdown]
# Read the plot from the top. The unfused plan's big rows are the Q K^T GEMM (kernel 0) and P V (kernel 5), whose
# loads repeat across the register tiles of the work-items, and the softmax kernels, each reading or writing N x N
# floats. The fused kernel asks global memory for several times more bytes than the whole unfused plan (the ratio
# is printed above): each work-item owns one query row and walks all of K for the max, again for the sum, and again
# with V for every group of 16 output columns. That is Chapter 11's recompute, now counted in bytes. On a GPU most
# of those re-reads would hit in cache or, in a real FlashAttention kernel, come from a tile of K and V staged in
# local memory once per work-group, as the local-normalize kernel does for its row: it reads global memory once per
# element and local memory 65 times. Staging K and V tiles this way is Chapter 13.

# %% [markdown]
# ## 12.6 What PoCL's timings mean
#
# PoCL compiles each kernel for the CPU and runs a work-group's work-items one after another on one core (with
# vector instructions across neighbouring work-items where it can), between barriers. So a GPU program on PoCL is a
# CPU program with an unusual loop order. Its time says nothing about a GPU: no warps, no HBM, no latency hiding.
# It is useful for checking correctness, and for seeing that a kernel written for 16,384 threads is not a good CPU
# kernel.

# %% tags=["nbval-ignore-output"]
# %%needs CL
from uopc.helpers import best_of

run_cl = lambda: book.attention(*(Tensor(a, device="CL") for a in (q, k, v))).numpy()
run_cpu = lambda: book.attention(*(Tensor(a) for a in (q, k, v))).numpy()
t_cl, t_cpu = best_of(run_cl, k=5), best_of(run_cpu, k=5)
print(f"unfused attention N={Nq}: CL on PoCL {t_cl * 1e3:.2f} ms, uopc's C {t_cpu * 1e3:.2f} ms ({t_cl / t_cpu:.1f}x)")

# %% [markdown]
# ## 12.7 CUDA
#
# The CUDA dialect compiles everywhere: NVRTC, NVIDIA's runtime compiler, is a library (`pip install cuda-bindings
# nvidia-cuda-nvrtc`), so every kernel of both plans compiles here to machine code (cubin) for an A100 (`sm_80`)
# and an H100 (`sm_90`), with no GPU in sight:

# %%
# %%needs CUDA
from uopc.runtime.cuda import CUDAProgram

compiled = {arch: 0 for arch in ("sm_80", "sm_90")}
for plan in plans.values():
  for kern in plan.kernels:
    src = CUDA.render(kern.ast, kern.name).src
    for arch in compiled: compiled[arch] += CUDAProgram(src, arch).cubin[:4] == b"\x7fELF"
print("kernels compiled to cubin:", compiled, "of", sum(len(p.kernels) for p in plans.values()))
print("\n".join(CUDA.render(exp_kernel.ast, exp_kernel.name).src.splitlines()[:4]))

# %% [markdown]
# Launching needs a GPU. Where the CUDA driver finds one, the next cell runs both plans on it and checks them;
# elsewhere it prints why it skipped (its output is not compared by nbval: it depends on the machine).

# %% tags=["nbval-ignore-output"]
from uopc.runtime.cuda import gpu_present, no_gpu_reason

if gpu_present():
  out = book.attention(*(Tensor(a, device="CUDA") for a in (q, k, v))).numpy()
  print("unfused on CUDA, max error below 1e-5:", np.abs(out - ref).max() < 1e-5)
  Tensor.fuse_reduce, Tensor.opt, old_opt = True, book.FlashOpt, Tensor.opt
  out = book.attention(*(Tensor(a, device="CUDA") for a in (q, k, v))).numpy()
  Tensor.fuse_reduce, Tensor.opt = False, old_opt
  print("fused on CUDA, max error below 1e-5:  ", np.abs(out - ref).max() < 1e-5)
else:
  print("skipped:", no_gpu_reason())

# %% [markdown]
# ## 12.8 Pitfalls
#
# - **PoCL shows a race the same way every time, or not at all.** It runs a work-group's work-items in a fixed order,
#   so a missing barrier gives wrong numbers on every run or right numbers on every run (12.2 removes each of the
#   group sum's barriers); a GPU interleaves them differently on every run. Chapter 13 uses Oclgrind, which reports
#   the race either way.
# - **CUDA's "local memory" is not `__local`.** It is per-thread memory off-chip (register spills, arrays indexed at
#   run time); OpenCL's `__local` is CUDA's `__shared__`. Read a CUDA profiler's "local memory" numbers as spills.
# - **Choose the OpenCL platform by name.** Platform indices change when another OpenCL driver is installed;
#   `uopc.runtime.cl` takes PoCL where it is installed, Apple's OpenCL on a Mac, else the first platform with a GPU;
#   `CL_PLATFORM=<name>` chooses one.
# - **Fetch each kernel once** (`cl.Kernel(program, name)`): pyopencl warns when `program.name` is looked up twice,
#   and a warning on stderr fails a notebook cell.
# - **Every work-group size is a new compile.** PoCL specializes a kernel for its work-group size at the first
#   launch: keep the number of distinct shapes small, and its cache (`POCL_CACHE_DIR`) under uopc's.
# - **Not every C type is an OpenCL type.** There are no `bool` kernel arguments (uopc stores bools as `uchar`), no
#   `long long` (`long` is 64-bit), and no half-precision arithmetic on PoCL: uopc raises a TypeError naming the dtype.
# - **A launch axis must enclose the whole body.** `to_special` refuses a program with a statement outside a
#   GLOBAL or LOCAL loop: on a GPU every work-item runs every statement.
#
# ## 12.9 Exercises
#
# The graded versions are in the week-6 assignment (`assignments/week6_flash_attention.ipynb`, exercises 10 to 12).
#
# **12.1 (★) Work-group sizes.** Write `block_sizes(sizes, limit)`, the default chooser: for each launch axis
# (dimension 0 first) the largest work-group that divides it, with the product of all of them at most `limit`. Then
# add 12.3's quarter rule as `launch_axes` does, by the limit it passes: at most a quarter of the launch's work-items
# (and at most 256), and check that (37, 5) gets at least four work-groups.
#
# **12.2 (★) Transactions per warp.** Write `warp_transactions(index, n_warps)`: given a function from a work-item's
# global id to the element it loads, the number of 128-byte segments the first `n_warps` warps touch. Compare
# `i`, `2*i`, `i*1024` and the transposed read of a 32 x 32 tile.
#
# **12.3 (★★) A work-group reduction in OpenCL C.** Write `row_sum_kernel(width)`: the source of an OpenCL kernel
# `row_sum(x, out)` that sums each row of a (rows, width) matrix with one work-group of `width` work-items per
# row, a tree in local memory and a barrier after every step. Run it with pyopencl and check it against NumPy.
#
# **12.4 (★★, not graded) Count it.** Use `uopc.codegen.gpudims.traffic` on the kernels of the online-softmax plan
# (`Tensor.online_softmax = True`) and place them on the plot of 12.5.
