# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # Chapter 5. The linearizer and the C renderer
#
# Chapter 4 wrote loops as graphs and called `render_c` to see them as C. This chapter opens that box. A
# loop program is a graph; C is a list of lines inside braces. Getting from one to the other means
# answering two questions for every node:
# - **Where does it go?** In which loop: the innermost loop it depends on, and no deeper. A value that
#   does not change inside a loop is computed outside it, for free (this is loop-invariant code motion,
#   and here it is not an optimisation pass but a consequence of the rule).
# - **In what order?** Sources before users; a whole inner loop before anything that uses its END; state
#   declared before it is first used, inside the loop the AFTER edges put it in.
#
# The **linearizer** answers both and produces an ordered list of lines with loop scopes; the **renderer**
# prints them as C, naming every value. You will write a small linearizer and renderer for one loop nest,
# check their output by compiling and running it, then use `uopc.linearize` and `uopc.render_c`. Then a
# matrix-vector product written by hand in the loop IR, naive and with a register tile of four rows, printed,
# checked against NumPy and timed: the method of the week-3 assignment, which applies it to the matrix multiply
# (GEMM). The chapter ends with chapter 11's FlashAttention kernel, which this linearizer turns into exactly the
# C that chapter prints.
#
# The numbers below were measured on this machine:

# %% tags=["nbval-ignore-output"]
import datetime
import os
import platform
import re
import subprocess

cpu = re.search(r"^model name\s*:\s*(.*)$", open("/proc/cpuinfo").read(), re.M)
print(f"CPU:      {cpu.group(1) if cpu else platform.machine()}, {os.cpu_count()} cores")
print(f"compiler: {subprocess.run(['cc', '--version'], capture_output=True, text=True).stdout.splitlines()[0]}")
print(f"threads:  OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset (all cores)')}")
print(f"date:     {datetime.date.today()}")

# %% [markdown]
# ## 5.1 Which loop is a node in?
#
# The rule from chapter 4: a node sits inside the loops its sources use, minus the loops an END has
# closed. A RANGE is inside its own loop. Here it is on chapter 4's running max, printing each node's loops:

# %%
import math
import numpy as np
from uopc.dtype import dtypes
from uopc.uop import AxisType, Ops, ParamArg, UOp, range_, sink

f32 = dtypes.f32
def buf(slot: int, n: int) -> UOp: return UOp(Ops.BUFFER, (), ParamArg(slot, f32, (n,)))
def alloc(slot: int, n: int = 1) -> UOp: return UOp(Ops.ALLOC, (), ParamArg(slot, f32, (n,)))


def rowmax_program(R: int, C: int) -> UOp:
  A, OUT = buf(0, R * C), buf(1, R)
  i = range_(R, 0, AxisType.THREAD)
  acc = alloc(0).after(i)
  init = acc.index(0).store(-math.inf)
  j = range_(C, 1)
  accj = acc.after(init, j)
  upd = accj.index(0).store(accj.index(0).load().maximum(A.index(i * C + j).load())).end(j)
  return sink(OUT.index(i).store(acc.after(upd).index(0).load()).end(i))


def open_loops(topo: list) -> dict:
  """For every node, the loops it sits inside."""
  rng: dict = {}
  for u in topo:
    inner = set().union(*(rng[s] for s in u.src))
    if u.op is Ops.RANGE: inner.add(u)
    if u.op is Ops.END: inner -= set(u.src[1:])
    rng[u] = frozenset(inner)
  return rng


prog = rowmax_program(4, 6)
rng = open_loops(prog.toposort())
for u in prog.toposort():
  if u.op in (Ops.CONST, Ops.BUFFER, Ops.ALLOC): continue
  print(f"{u.op.name:6} in loops {sorted(f'ridx{r.arg[0]}' for r in rng[u])}")

# %% [markdown]
# Read it against chapter 4: the accumulator's AFTER on `i` is in `ridx0` only; the initialisation too;
# the loads, the max and the update are in both loops; the END of `ridx1` is back in `ridx0` alone; the
# final read and the output store are in `ridx0`; the END of `ridx0` is in no loop.
#
# ## 5.2 A linearizer and a renderer for one loop nest
#
# With one nest of loops (loop ids 0, 1, 2, ... from the outside in, each closed by one END), the order is
# simple: put every node at the depth of its innermost loop, keep the graph's order (sources before users)
# within a depth, and emit an inner loop's whole body where its END is, because every node of the body
# is a source of the END and everything that uses the loop's results uses the END.

# %%
def mini_linearize(prog: UOp) -> list:
  """A loop program that is one loop nest -> lines (depth, kind, uop), kind "for", "end" or "node"."""
  topo = prog.toposort()
  ends = [u for u in topo if u.op is Ops.END]
  assert sorted(r.arg[0] for e in ends for r in e.src[1:]) == list(range(len(ends))), "not one loop nest"
  rng = open_loops(topo)
  depth = lambda u: max((r.arg[0] + 1 for r in rng[u]), default=0)   # 1 + the id of the innermost loop
  at: dict = {}
  for u in topo:
    if u.op not in (Ops.RANGE, Ops.CONST, Ops.BUFFER, Ops.ALLOC, Ops.SINK): at.setdefault(depth(u), []).append(u)
  lines = []
  def emit(d: int) -> None:
    for u in at.get(d, []):                    # graph order: sources before users
      if u.op is Ops.END:                      # the inner loop's body goes where its END is
        lines.append((d, "for", u.src[1])); emit(d + 1); lines.append((d, "end", u.src[1]))
      else: lines.append((d, "node", u))
  emit(0)
  return lines


for d, kind, u in mini_linearize(prog):
  print("  " * d + (f"{kind} ridx{u.arg[0]}" if kind != "node" else u.op.name))

# %% [markdown]
# The renderer walks those lines and names things: `data{slot}` for buffers, `acc{slot}` for state,
# `ridx{id}` for loop variables, `t{n}` for every value. State is declared where it is first placed (its
# first AFTER), which for `alloc(0).after(i)` is inside loop `i`. This mini renderer knows a handful of ops.

# %%
C_OPS = {Ops.ADD: "+", Ops.MUL: "*", Ops.IDIV: "/", Ops.MOD: "%", Ops.CMPLT: "<"}
C_TYPES = {dtypes.f32: "float", dtypes.i32: "int", dtypes.bool: "bool"}   # how C spells each dtype


def mini_render(prog: UOp, name: str) -> str:
  names, declared, values = {}, set(), [0]
  def base(u: UOp) -> UOp:
    while u.op is Ops.AFTER: u = u.src[0]
    return u
  def nm(u: UOp) -> str:
    if u in names: return names[u]
    if u.op is Ops.CONST:
      if not u.dtype.is_float: return str(u.arg)
      return "-INFINITY" if u.arg == -math.inf else f"{u.arg!r}f"
    if u.op is Ops.RANGE: return f"ridx{u.arg[0]}"
    if u.op is Ops.BUFFER: return f"data{u.arg.slot}"
    return f"acc{base(u).arg.slot}"            # an ALLOC, or an AFTER on one
  slots = sorted({u.arg.slot for u in prog.toposort() if u.op is Ops.BUFFER})
  out = [f"void {name}({', '.join(f'float* data{s}' for s in slots)}) {{"]
  for d, kind, u in mini_linearize(prog):
    pad = "  " * (d + 1)
    if kind == "for":
      if u.arg[1] is AxisType.THREAD: out.append(pad + "#pragma omp parallel for")
      out.append(f"{pad}for (int {nm(u)} = 0; {nm(u)} < {nm(u.src[0])}; {nm(u)}++) {{")
    elif kind == "end": out.append(pad + "}")
    elif u.op is Ops.AFTER:                    # state is declared where it is first placed
      if base(u) not in declared:
        declared.add(base(u))
        out.append(f"{pad}float {nm(u)}[{base(u).arg.size}];")
    elif u.op is Ops.INDEX: names[u] = f"{nm(u.src[0])}[{nm(u.src[1])}]"
    elif u.op is Ops.STORE: out.append(f"{pad}{nm(u.src[0])} = {nm(u.src[1])};")
    else:                                      # a value (LOAD or ALU), each in its own variable
      if u.op is Ops.LOAD: expr = nm(u.src[0])
      elif u.op is Ops.MAX: expr = f"fmaxf({nm(u.src[0])}, {nm(u.src[1])})"
      else: expr = f"{nm(u.src[0])} {C_OPS[u.op]} {nm(u.src[1])}"
      names[u] = f"t{values[0]}"; values[0] += 1
      out.append(f"{pad}{C_TYPES[u.dtype]} {names[u]} = {expr};")
  out.append("}")
  return "\n".join(out)


src = mini_render(rowmax_program(4, 6), "rowmax")
print(src)

# %% [markdown]
# Note `int t0 = ridx0 * 6;`: the row offset does not depend on `ridx1`, so it is computed once per row,
# outside the inner loop, with no optimisation pass asking for it. Does the C work? Compile it with
# chapter 2's `Program` and compare with NumPy:

# %%
from uopc.runtime import Program

rng_np = np.random.default_rng(0)
a = rng_np.standard_normal((300, 500)).astype(np.float32)
out = np.zeros(300, np.float32)
Program(mini_render(rowmax_program(300, 500), "rowmax_mini"), "rowmax_mini")(a, out)
print("mini linearizer + renderer, row max equals NumPy:", np.array_equal(out, a.max(1)))

# %% [markdown]
# ## 5.3 uopc's linearizer and renderer
#
# `uopc.linearize.linearize(sink)` does the same for any program whose loops nest: several loops side by
# side in one scope (attention has three inside its row loop), one END closing several loops, loops whose
# ids say nothing about depth. The nesting comes from the ENDs: the loops still open at an END enclose the
# loops it closes. Inside one scope, nodes come in graph order and each inner loop is placed as late as
# its users allow. Its output is a list of `Line(kind, uop)` (printed here without the constants, buffers
# and ALLOCs, which become no line of C of their own):

# %%
from uopc.linearize import linearize
from uopc.render_c import render_c

depth = 0
for ln in linearize(rowmax_program(4, 6)):
  if ln.kind == "node" and ln.uop.op in (Ops.CONST, Ops.BUFFER, Ops.ALLOC): continue   # leaves: no line of C
  if ln.kind == "close": depth -= 1
  print("  " * depth + (f"{ln.kind} ridx{ln.uop.arg[0]}" if ln.kind != "node" else ln.uop.op.name))
  if ln.kind == "open": depth += 1

# %% [markdown]
# `uopc.render_c.render_c(sink, name)` prints those lines. Compared with the mini renderer it adds what
# makes generated C readable and fast:
# - an ALU result used once is written inline, one used several times gets an `alu` variable;
# - loads are `val`, state is `acc`, and a one-element ALLOC read only at `[0]` is a plain local variable
#   (a register), not an array;
# - the pragma goes on the THREAD loop only;
# - the names are numbered in the order the lines are printed, so the same graph always prints the same
#   text (notebooks and tests compare generated C as text).

# %%
print(render_c(rowmax_program(4, 6), "rowmax"))

# %% [markdown]
# ## 5.4 A loop program by hand: the matrix-vector product
#
# `y = A x` with A of shape (M, K), row-major float32, and x of K floats. The loop program has the shape of the
# running max: one accumulator per output, placed inside the output loop, initialised, updated in the `k` loop, read
# after it. The index expressions go through `simplify` (chapter 3), as every index uopc generates does. The rows are
# a range `rows = (first, stop)` with an offset, so that the same function can compute a part of y (5.5 needs that).

# %%
from uopc.symbolic import simplify


def matvec_rows(A: UOp, X: UOp, Y: UOp, K: int, rows: tuple, first_id: int, slot: int) -> UOp:
  """y[r] = sum_k A[r, k] * x[k] for rows[0] <= r < rows[1]: a THREAD loop over the rows, one accumulator each."""
  i, k = range_(rows[1] - rows[0], first_id, AxisType.THREAD), range_(K, first_id + 1)
  r = i + rows[0]
  acc = alloc(slot).after(i)                   # one accumulator per row, private to its thread
  init = acc.index(0).store(0.0)
  acck = acc.after(init, k)
  upd = acck.index(0).store(acck.index(0).load() + A.index(simplify(r * K + k)).load() * X.index(k).load()).end(k)
  return Y.index(simplify(r)).store(acc.after(upd).index(0).load()).end(i)


def matvec(M: int, K: int) -> UOp:
  A, X, Y = buf(0, M * K), buf(1, K), buf(2, M)
  return sink(matvec_rows(A, X, Y, K, (0, M), 0, 0))


print(render_c(matvec(512, 512), "matvec"))

# %%
def check_matvec(build, M: int, K: int) -> bool:
  rng_m = np.random.default_rng(M + 7 * K)
  a, x = rng_m.standard_normal((M, K)).astype(np.float32), rng_m.standard_normal(K).astype(np.float32)
  y = np.full(M, np.nan, np.float32)           # every element must be written
  Program(render_c(build(M, K), "matvec"), "matvec")(a, x, y)
  return np.allclose(y, a.astype(np.float64) @ x.astype(np.float64), rtol=1e-4, atol=1e-4 * math.sqrt(K))


SHAPES = [(1, 1), (4, 4), (5, 3), (64, 64), (67, 29), (128, 200)]
print("naive matrix-vector product matches NumPy:", {shape: check_matvec(matvec, *shape) for shape in SHAPES})

# %% [markdown]
# ## 5.5 A register tile of four rows
#
# The naive kernel makes two loads per multiply-add (a value of A and a value of x) and updates one accumulator
# per row, each update waiting for the previous one. A **register tile** computes four rows at once: in each step of
# `k` it loads x[k] once and four values of A (one per row), and does four multiply-adds into four accumulators.
# Every load of x now feeds four multiply-adds, and the four accumulators are independent chains the CPU can
# overlap.
#
# In the loop IR that is four ALLOCs placed in the tile loop, four updates closed together by one END of `k` (a SINK
# of the four stores under the END: chapter 11's key loop closes its three stores the same way), and four output
# stores. When M is not a multiple of 4, the rows left over are computed by the naive loop after the tiles
# (`matvec_rows` above, with an offset), so that every element of y is written once.

# %%
def matvec_tiled(M: int, K: int) -> UOp:
  A, X, Y = buf(0, M * K), buf(1, K), buf(2, M)
  M4 = M - M % 4
  parts = []
  if M4:
    i, k = range_(M4 // 4, 0, AxisType.THREAD), range_(K, 1)
    accs = [alloc(r).after(i) for r in range(4)]                           # acc[r] for y[4i + r]
    inits = [acc.index(0).store(0.0) for acc in accs]
    x = X.index(k).load()                                                  # one load of x ...
    updates = []
    for r in range(4):                                                     # ... feeds four rows
      acck = accs[r].after(inits[r], k)
      updates.append(acck.index(0).store(acck.index(0).load() + A.index(simplify((i * 4 + r) * K + k)).load() * x))
    loop_k = UOp(Ops.SINK, tuple(updates)).end(k)                          # one k loop for all four
    outs = [Y.index(simplify(i * 4 + r)).store(accs[r].after(loop_k).index(0).load()) for r in range(4)]
    parts.append(UOp(Ops.SINK, tuple(outs)).end(i))
  if M4 < M: parts.append(matvec_rows(A, X, Y, K, (M4, M), 2, 4))         # the rows left over
  return sink(*parts)


print(render_c(matvec_tiled(512, 512), "matvec4"))

# %% [markdown]
# Look at the `k` loop (`ridx1`): one load of `data1` (x, at `ridx1`), used by all four updates, and four loads of
# `data0` (A, at `alu3`, `alu3+512`, `alu3+1024` and `alu3+1536`: the four rows' elements in column `ridx1`), and
# four `acc = (val+(a*b))` lines. The tile's first output `alu1` is computed outside the `k` loop, where it belongs.
# Check it, including shapes that leave rows over:

# %%
print("tiled matrix-vector product matches NumPy:", {shape: check_matvec(matvec_tiled, *shape) for shape in SHAPES})
print(render_c(matvec_tiled(6, 5), "matvec4").count("#pragma omp parallel for"), "parallel loops for 6 x 5: "
      "the tiles, the rows left over")

# %% [markdown]
# Can the tile loop run in parallel? Tile `i` stores `y[4i]` to `y[4i + 3]`, so two tiles never write one element,
# and no tile reads what another writes. uopc's race check (chapter 4) reads that from the indices: the stores of
# one iteration are `4*ridx0 + r` with `0 <= r < 4`, and two iterations' indices differ by a multiple of 4 plus at
# most 3 in either direction, which is never 0 unless the iterations are the same. Step the tile by 2 rows where it
# computes 4 (a slip in the index of the tile's stores, shown on a tile that only copies) and neighbouring tiles
# store to two rows in common:

# %%
from uopc.races import check_no_races, thread_races


def tile_copy(M: int, step: int) -> UOp:
  """out[step*i + r] = a[step*i + r] for the four rows r of tile i: the tile's stores, with the tile's step."""
  A, OUT = buf(0, M), buf(1, M)
  i = range_(M // 4, 0, AxisType.THREAD)
  stores = [OUT.index(simplify(i * step + r)).store(A.index(simplify(i * step + r)).load()) for r in range(4)]
  return sink(UOp(Ops.SINK, tuple(stores)).end(i))


check_no_races("matvec_tiled(67, 29)", matvec_tiled(67, 29))
check_no_races("tile_copy(64, step=4)", tile_copy(64, 4))
for race in thread_races(tile_copy(64, 2)): print(race)

# %% [markdown]
# Each race names the loop, the buffer and the two index expressions: iteration `ridx0 - 1` stores to
# `2*(ridx0 - 1) + 2` and `2*(ridx0 - 1) + 3`, the two rows iteration `ridx0` stores first. The copy's values do not
# show it: a row that two tiles write gets the same value from each, on any number of threads. The indices do.
#
# The same method in two dimensions, a 4x4 tile of C = A @ B with strips for the rows and the columns left over, is
# the week-3 assignment.
#
# ## 5.6 How fast?
#
# A matrix-vector product does 2MK floating-point operations (a multiply and an add per element of A). Time the
# naive and the tiled kernels against NumPy (which calls an optimised BLAS library) at a few square sizes (best of
# several runs after a warm-up) and report GFLOP/s.
#
# All three run on **one thread** here: one OpenMP thread for our kernels (set through the OpenMP runtime
# the kernels already use) and one BLAS thread for NumPy (with `threadpoolctl`). On a machine shared with
# other work, a parallel run ends when its slowest thread does, and a thread that lost its core waits a
# whole scheduler time slice; single-thread numbers measure the kernels, not the neighbours.

# %%
import contextlib
import ctypes
import ctypes.util
from threadpoolctl import threadpool_limits

gomp = ctypes.CDLL(ctypes.util.find_library("gomp"))


@contextlib.contextmanager
def one_thread():
  gomp.omp_set_num_threads(1)
  try:
    with threadpool_limits(1): yield
  finally: gomp.omp_set_num_threads(os.cpu_count())


# %% tags=["nbval-ignore-output"]
from uopc.helpers import best_of

SIZES = [256, 512, 1024, 2048]


def gflop_s(fn, flops: float) -> float:
  """Best of at least five runs, and of about half a second of runs for fast ones (less noise on a busy machine)."""
  t = best_of(fn, k=5)
  return flops / min(t, best_of(fn, k=max(5, int(0.5 / t)), warmup=0)) / 1e9


gflops: dict = {"naive": [], "4-row tile": [], "NumPy (BLAS)": []}
with one_thread():
  for n in SIZES:
    a, x = rng_np.standard_normal((n, n)).astype(np.float32), rng_np.standard_normal(n).astype(np.float32)
    y = np.zeros(n, np.float32)
    for name, build in (("naive", matvec), ("4-row tile", matvec_tiled)):
      prg = Program(render_c(build(n, n), "matvec"), "matvec")
      gflops[name].append(gflop_s(lambda: prg(a, x, y), 2 * n * n))
    gflops["NumPy (BLAS)"].append(gflop_s(lambda: a @ x, 2 * n * n))
print(f"{'n':>5} {'A (MB)':>7} " + "".join(f"{name:>14}" for name in gflops) + f"{'tile / naive':>14}")
for k_, n in enumerate(SIZES):
  print(f"{n:>5} {4 * n * n / 1e6:>7.1f} " + "".join(f"{g[k_]:>14.1f}" for g in gflops.values()) +
        f"{gflops['4-row tile'][k_] / gflops['naive'][k_]:>13.2f}x")
print("(GFLOP/s, one thread)")

# %%
import matplotlib.pyplot as plt

fig, ax = plt.subplots(figsize=(6.5, 3.8))
for name, g in gflops.items(): ax.semilogy(SIZES, g, "o-", label=name)
ax.set(xlabel="n (y = A x, A n x n float32)", ylabel="GFLOP/s, one thread (log scale)",
       title="hand-written matrix-vector products")
ax.set_xticks(SIZES)
ax.legend()
fig.tight_layout()
plt.show()

# %% [markdown]
# What to read in the table and the plot (the ratios, not the absolute numbers, carry over to other machines):
# - The naive kernel is not slow: the C compiler vectorises its `k` loop (A's row and x are both read with stride
#   1; Chapter 10 shows the flags that allow it), so it already keeps several partial sums.
# - The tile's gain is the last column of the table. Expect it larger where A fits in the caches than where A (the
#   second column) has to come from main memory: a matrix-vector product reads every element of A exactly once,
#   whatever the tile, so once A comes from main memory its speed is set by how fast memory delivers A. Its
#   arithmetic intensity is about 2 FLOPs per 4 bytes of A: Chapter 10's roofline puts it on the memory-bound side.
# - A matrix multiply is the opposite case: each element of A is used by every column of B, and a tile that loads
#   it once for four outputs (and each element of B once for four rows) saves loads that would otherwise all be
#   made. The week-3 assignment builds that tile and times it; Chapter 10 walks a GEMM toward the roof of this
#   machine, one step at a time.
#
# ## 5.7 The showpiece: chapter 11's online attention
#
# Chapter 11 writes FlashAttention's online softmax directly in this loop IR (section 11.7). Here is its
# listing, printed from `examples/flash_attention.py`, the file the book quotes. It has everything this
# chapter handled: a THREAD row loop, state placed in it by AFTER edges (the running max `M`, sum `L` and
# output row `O`), three loops side by side inside it, a dot-product reduction nested in the key loop, and
# one END closing the key loop over three stores.

# %%
import inspect
from uopc.book import load_example

book = load_example("flash_attention")   # examples/flash_attention.py: the only copy of the book's listings
online_attention_ir = book.online_attention_ir
print(inspect.getsource(online_attention_ir))

# %% [markdown]
# The mini linearizer of 5.2 refuses it (three loops side by side inside the row loop are not one nest);
# uopc's renders it:

# %%
try:
  mini_linearize(online_attention_ir(1024, 64))
except AssertionError as err:
  print("mini_linearize:", err)
flash_src = render_c(online_attention_ir(1024, 64), "flash")
print(flash_src)

# %% [markdown]
# That is, character for character, the C printed in section 11.7 (this repository's tests compare the two).
# Follow the scopes: `acc0` (running max), `acc1` (running sum) and `acc2[64]` (output row) are declared
# inside the parallel `ridx0` loop, because `M.after(i)` placed them there: every thread has its own. The
# key loop `ridx2` holds the dot-product loop `ridx3` with its accumulator `acc3`, then the update, then
# the output loop `ridx4`; the normalisation loop `ridx5` comes after the key loop, because it reads
# `Oi.after(loop_j)`. The values `corr` and `p` (`alu12`, `alu13`) are each used more than once, so they
# are named once and computed once per key. Run it against NumPy:

# %%
def attention_ref(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
  s = q.astype(np.float64) @ k.T.astype(np.float64) / math.sqrt(q.shape[1])
  p = np.exp(s - s.max(-1, keepdims=True))
  return (p / p.sum(-1, keepdims=True)) @ v.astype(np.float64)


flash = {}
for N, D in [(1024, 64), (1000, 48), (3, 1), (1, 64)]:
  q, k, v = (rng_np.standard_normal((N, D)).astype(np.float32) for _ in range(3))
  out = np.zeros(N * D, np.float32)
  flash[N, D] = Program(render_c(online_attention_ir(N, D), "flash"), "flash")
  flash[N, D](q, k, v, out)
  print(f"N={N:5} D={D:3}: max error below 1e-5: {np.abs(out.reshape(N, D) - attention_ref(q, k, v)).max() < 1e-5}")

# %% tags=["nbval-ignore-output"]
N, D = 1024, 64
q, k, v = (rng_np.standard_normal((N, D)).astype(np.float32) for _ in range(3))
out = np.zeros(N * D, np.float32)
with one_thread(): t1 = best_of(lambda: flash[N, D](q, k, v, out), k=5)
t = best_of(lambda: flash[N, D](q, k, v, out), k=10)
for what, tt in ((f"{os.cpu_count()} threads", t), ("one thread", t1)):
  print(f"online attention, N={N}, D={D}, {what:>10}: {tt * 1e3:7.2f} ms, {4 * N * N * D / tt / 1e9:5.1f} GFLOP/s "
        "(4 N^2 D FLOPs)")

# %% [markdown]
# Section 11.8 discusses this number: one query row per thread means every key and value row loaded is used
# for exactly one query, the same weakness as the naive matrix-vector product (each x[k] it loads serves one
# row), and the fix is the same, a register tile (there, a block of queries per thread).
#
# ## Pitfalls
# - **A load without an AFTER edge is hoisted.** The linearizer places a load in the innermost loop its
#   *sources* use. A load of state that a loop updates, written without `.after(...)` naming that loop,
#   depends on no loop variable and lands outside the loop: it reads a stale value. The placement rule that
#   hoists `ridx0*6` for free hoists this too.
# - **Unsimplified indices.** Build `A.index((i*4 + r)*K + k)` without `simplify` and the C carries
#   `((alu1+0)*512)` for `r = 0`. The compiler cleans that up, but the text is harder to read, and chapter
#   11's NOTES 12 shows unsimplified indices can change the loop structure itself.
# - **Too many accumulators.** A tile's accumulators and the values it loads in one step of `k` must all stay in
#   registers, or some go to memory and back every trip (a spill). How many vector registers each instruction set
#   has, from the table the tile heuristics read (`uopc.runtime.machine.ISAS`), and which one this machine's kernels
#   are built for:

# %%
from uopc.runtime.machine import ISAS, target

for isa in ISAS.values(): print(f"{isa.name:7s} {isa.registers} vector registers of {isa.lanes} float32 lanes")
print("this machine's kernels:", target().isa.name)

# %% [markdown]
#   The matrix-vector tile of 5.5 holds 4 accumulators and 5 loaded values. A 4x4 tile of a GEMM holds 16
#   accumulators and 8 loaded values, 24 in all: more than the 16 registers of AVX2 or SSE, within the 32 of AVX-512
#   or NEON (on AVX2 a compiler keeps some loaded values as memory operands of the multiply-adds instead: week 5's
#   exercise on the best tile counts registers both ways). An 8x8 tile (64 accumulators) fits in none of them.
#   Bigger tiles are not always faster; measure.
# - **Sizes that are not multiples of the tile.** A tiled kernel that assumes `M % 4 == 0` reads and writes
#   past the end of the arrays for other sizes, silently. Either handle the remainder (as `matvec_tiled` does
#   with the naive loop over the rows left over) or refuse the size with a clear error. Test with sizes like 67.
# - **Timing the first call.** The first `Program` of a new source compiles it (tens of milliseconds) and
#   the first call touches fresh memory. `best_of` warms up first.
# - **Comparing generated C as text** is only possible because the renderer is deterministic: names are
#   numbered in print order, never by object ids or set order. Keep it that way when you change it.
#
# ## Exercises (week 3)
# 1. Write the naive GEMM, `C = A @ B`, as a loop program: the matrix-vector product of 5.4 with a second output
#    loop (over the columns of C), one accumulator per element of C. Check it against NumPy for shapes like those of
#    `SHAPES`, (67, 33, 29) among them.
# 2. Write a 4x4 register tile of the GEMM, with strips for the rows and columns left over: 5.5's method in two
#    dimensions. Then try 2x8 and 8x8 tiles: print the C, count the accumulators, and measure GFLOP/s at n = 512.
#    Which is fastest here, and why (registers, loads per multiply-add)?
# 3. Pass B transposed (B^T, shape (N, K)) so that the `k` loop reads both A and B^T contiguously. How much
#    does the naive kernel gain? The tiled one?
# 4. Extend `mini_linearize` to loops side by side (several ENDs at one depth), so that it accepts the
#    row loop of chapter 11 with its three inner loops. What must decide the order of two sibling loops?
# 5. The tiled kernels handle remainders with naive loops. Write a version of `matvec_tiled` that refuses sizes that
#    are not multiples of 4 with a `ValueError` naming the size, and compare the code size of the two approaches.
# 6. Count the loads and multiply-adds per `k` step of your naive and tiled GEMMs from their C, and predict the
#    speedup from the ratio. How close is the measurement?
