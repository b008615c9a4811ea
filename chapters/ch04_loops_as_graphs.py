# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # Chapter 4. Loops as graphs
#
# Chapter 3's UOps computed values: `(i * 512 + j) // 512` has no loops and touches no memory. A kernel
# does both: it walks index ranges and reads and writes arrays. The usual way to represent that is a
# second language, an abstract syntax tree of statements (`for`, assignment, blocks) with its own passes.
# uopc does not have one. Loops, memory reads and memory writes are UOps too, in the same hash-consed
# graph as the arithmetic, so everything chapter 3 built (rewrite rules, `simplify`, `toposort`, printing
# as Python) works on loop programs unchanged.
#
# The price is that a graph has no order: nothing in `a + b` says whether `a` is computed first, and
# nothing in a graph of stores says which runs first, or inside which loop. Order and placement must come
# from the edges. This chapter introduces the loop-level ops, writes a sum and a running max as graphs,
# runs them with a tiny interpreter written here, then renders them to C with `uopc.render_c` and runs
# them with chapter 2's `Program`. The one idea to take away is the **AFTER edge**, which says both
# *where* a piece of state lives and *when* it may be read.
#
# | op | what it is | in C |
# |---|---|---|
# | `BUFFER` | a kernel parameter, `ParamArg(slot, dtype, shape)` | `float* data{slot}` |
# | `ALLOC` | local storage (an accumulator, a small array) | `float acc{slot};` or `float acc{slot}[n];` |
# | `RANGE` | a loop variable `0 <= r < n`, with an id and an `AxisType` | `for (int ridx{id} = 0; ...)` |
# | `INDEX` | an address: buffer and offset | `data0[ridx0*64 + ridx1]` |
# | `LOAD`, `STORE` | read and write an address | `float val3 = ...;`, `... = ...;` |
# | `END` | closes loops over a statement: "this runs for every value of r" | `}` |
# | `AFTER` | a value, placed inside loops and ordered after stores | (placement and order) |
# | `SINK` | groups statements with no value | |

# %%
import itertools
import math
import numpy as np
from uopc.dtype import dtypes, np_dtype
from uopc.uop import AxisType, Ops, ParamArg, UOp, range_, sink

f32 = dtypes.f32
def buf(slot: int, n: int) -> UOp: return UOp(Ops.BUFFER, (), ParamArg(slot, f32, (n,)))
def alloc(slot: int, n: int = 1) -> UOp: return UOp(Ops.ALLOC, (), ParamArg(slot, f32, (n,)))

# %% [markdown]
# ## 4.1 The simplest loop: a copy
#
# `out[k] = a[k]` for `0 <= k < n`. The store depends on `k` through its index, so it must run once per
# value of `k`; `.end(k)` says so, and closes the loop.

# %%
n = 8
A, OUT = buf(0, n), buf(1, n)
k = range_(n, 0)
copy = sink(OUT.index(k).store(A.index(k).load()).end(k))
print(copy)

# %% [markdown]
# That is the program, printed as the Python that builds it (chapter 3). Read it inside out: a `BUFFER`
# indexed by a `RANGE` is loaded; another `BUFFER` indexed by the same range is stored to; the store is
# closed by an `END` over the range. There is one `RANGE` node, used three times: hash-consing makes
# "the same loop variable" literally the same object.
#
# ## 4.2 A sum, and where state lives
#
# `out[0] = a[0] + ... + a[n-1]` needs state that survives from one iteration to the next: an
# accumulator, `ALLOC`. Three accesses to it must happen in order: initialise it once, update it on every
# iteration, read it once after the loop. None of these orders follow from data flow alone (the update
# reads the accumulator, but which value?), so they are written as AFTER edges:

# %%
def sum_program(n: int) -> UOp:
  A, OUT = buf(0, n), buf(1, 1)
  acc = alloc(0).after()                       # placed in no loop: function-level state
  init = acc.index(0).store(0.0)
  k = range_(n, 0)
  acck = acc.after(init, k)                    # the acc inside loop k, after its initialisation
  upd = acck.index(0).store(acck.index(0).load() + A.index(k).load()).end(k)
  return sink(OUT.index(0).store(acc.after(upd).index(0).load()))   # read after the loop that updates it


print(sum_program(8))

# %% [markdown]
# Long, because the printer writes a node out every time it is used, and the accumulator is used at every
# step. The three AFTERs are the whole story:
# - `acc.after(init, k)` is "acc, inside loop k, once `init` has run". Its load sits inside the loop
#   (it depends on `k`), and sees the initial value on the first iteration.
# - `upd.end(k)` closes loop `k` over the update.
# - `acc.after(upd)` (where `upd` is the END) is "acc, after the whole loop": a load of it can only run
#   once the loop is finished.
#
# ## 4.3 A tiny interpreter
#
# Is that really a program? Run it. The interpreter needs one rule, the same one the C code will follow:
# **a node sits inside the loops its sources use, minus the loops an END has closed (and inside whatever
# loops those loops sit in), and it runs once for every combination of values of those loops.** A memo
# keyed by (node, values of its loops) makes that literal: the load of `acck` is keyed by `k` and runs
# once per iteration; `init` is keyed by nothing and runs once; an `AFTER` runs what it must come after
# before it gives back its value.

# %%
from uopc.symbolic import EVAL                 # ALU ops with C semantics: the reference evaluator of chapter 3


def loops_of(prog: UOp) -> dict:
  """For every node, the loops it runs inside."""
  topo, rng = prog.toposort(), {}
  for u in topo:
    inner = set().union(*(rng[s] for s in u.src))
    if u.op is Ops.RANGE: inner.add(u)
    if u.op is Ops.END: inner -= set(u.src[1:])
    rng[u] = frozenset(inner)
  # a loop closed by an END runs inside the loops that END still sits in (loop j of a row max is inside loop i)
  around: dict = {}
  for u in topo:
    if u.op is Ops.END:
      for r in u.src[1:]: around[r] = around.get(r, frozenset()) | rng[u]
  def with_outer(rs) -> frozenset: return frozenset(rs).union(*(with_outer(around.get(r, ())) for r in rs))
  return {u: with_outer(rs) for u, rs in rng.items()}


def interpret(prog: UOp, *arrays: np.ndarray) -> None:
  """Run a loop program in Python. Slow, but every line says what a loop-program node means."""
  rng, mem, done = loops_of(prog), {}, {}
  def run(u: UOp, env: dict):
    key = (u, tuple(env[r] for r in sorted(rng[u], key=lambda r: r.arg[0])))
    if key in done: return done[key]
    if u.op is Ops.CONST: v = u.arg
    elif u.op is Ops.RANGE: v = env[u]
    elif u.op is Ops.BUFFER: v = arrays[u.arg.slot].reshape(-1)
    elif u.op is Ops.ALLOC: v = mem.setdefault(u, np.zeros(u.arg.size, np_dtype(u.dtype)))
    elif u.op is Ops.AFTER:
      for dep in u.src[1:]: run(dep, env)     # first whatever it must come after
      v = run(u.src[0], env)
    elif u.op is Ops.INDEX: v = (run(u.src[0], env), run(u.src[1], env))
    elif u.op is Ops.LOAD:
      arr, i = run(u.src[0], env)
      v = arr[i]
    elif u.op is Ops.STORE:
      arr, i = run(u.src[0], env)
      arr[i] = run(u.src[1], env); v = None
    elif u.op is Ops.END:                      # the body, once per value of the closed loops (lowest id outermost)
      rs = sorted(u.src[1:], key=lambda r: r.arg[0])
      for vals in itertools.product(*(range(r.src[0].arg) for r in rs)): run(u.src[0], env | dict(zip(rs, vals)))
      v = None
    elif u.op is Ops.SINK: v = [run(s, env) for s in u.src]
    else: v = EVAL[u.op](*(run(s, env) for s in u.src))
    done[key] = v
    return v
  run(prog, {})


rng = np.random.default_rng(0)
a = rng.standard_normal(8).astype(np.float32)
out = np.zeros(1, np.float32)
interpret(sum_program(8), a, out)
print(f"interpreted sum {out[0]:.6f}   NumPy {a.sum():.6f}")
a_copy = np.zeros(n, np.float32)
interpret(copy, a, a_copy)
print("interpreted copy equals a:", np.array_equal(a_copy, a))

# %% [markdown]
# ## 4.4 A running max, one per row: the AFTER-edge idiom
#
# `out[i] = max_j a[i, j]` for an (R, C) array. Now the accumulator must be **per row**: it is
# initialised at the start of every row, updated along the row, and read at its end. And the row loop is
# a `THREAD` loop, the one OpenMP splits across cores, so different rows run at the same time on
# different threads. Read the three AFTERs:

# %%
def rowmax_program(R: int, C: int) -> UOp:
  A, OUT = buf(0, R * C), buf(1, R)
  i = range_(R, 0, AxisType.THREAD)
  acc = alloc(0).after(i)                      # the acc that lives inside loop i: one per row, per thread
  init = acc.index(0).store(-math.inf)
  j = range_(C, 1)
  accj = acc.after(init, j)                    # read it inside loop j, after its initialisation
  upd = accj.index(0).store(accj.index(0).load().maximum(A.index(i * C + j).load())).end(j)
  return sink(OUT.index(i).store(acc.after(upd).index(0).load()).end(i))   # read it after loop j


a = rng.standard_normal((4, 6)).astype(np.float32)
out = np.zeros(4, np.float32)
interpret(rowmax_program(4, 6), a, out)
print("interpreted:", out, "\nNumPy:      ", a.max(1))

# %% [markdown]
# - `alloc(0).after(i)`: "the accumulator that lives inside loop `i`". Placing state inside a loop is
#   what makes it private to one iteration; for a `THREAD` loop, that means private to one thread.
# - `acc.after(init, j)`: "read it inside loop `j`, after the initialisation". This is the idiom: a piece
#   of state named together with *where* it is read (the loop) and *after what* (the store).
# - `acc.after(upd)`, where `upd` is the END of loop `j`: "read it after the loop". Without this edge,
#   nothing orders the final read after the updates (see the pitfalls).
#
# Chapter 6's reduce lowering builds exactly this shape for every reduction, and chapter 11's
# `online_attention_ir` builds it three times (running max, running sum, output row).
#
# ## 4.5 The same programs as C
#
# `uopc.render_c.render_c(prog, name)` turns a loop program into a C function (chapter 5 shows how), and
# `Program` compiles and runs it. Every name in the C comes from the graph: `data{slot}` for BUFFERs,
# `acc{slot}` for ALLOCs, `ridx{id}` for RANGEs, `val` for loads, `alu` for shared arithmetic.

# %%
from uopc.render_c import render_c
from uopc.runtime import Program

print(render_c(sum_program(1000), "sum"))

# %%
a = rng.standard_normal(1_000_000).astype(np.float32)
out = np.zeros(1, np.float32)
Program(render_c(sum_program(a.size), "sum"), "sum")(a, out)
ref = a.sum(dtype=np.float64)
print(f"C sum within 1e-5 (relative) of the float64 sum: {abs(out[0] - ref) / abs(ref) < 1e-5}")

# %% [markdown]
# A float32 sum of a million numbers loses a few digits against a float64 reference: each addition
# rounds, so compare with a tolerance, never with `==`. (The compiler may also split this loop into
# several partial sums that run in vector registers, because `Program` compiles with
# `-fassociative-math`; that changes the rounding a little, and the partial sums happen to help the
# accuracy.)
#
# Now the running max. Look at where `acc0` is declared:

# %%
print(render_c(rowmax_program(1000, 1000), "rowmax"))
a = rng.standard_normal((1000, 1000)).astype(np.float32)
out = np.zeros(1000, np.float32)
Program(render_c(rowmax_program(1000, 1000), "rowmax"), "rowmax")(a, out)
print("C row max equals NumPy:", np.array_equal(out, a.max(1)))

# %% [markdown]
# `float acc0;` is declared *inside* the `#pragma omp parallel for` loop: every iteration of `ridx0`, and
# so every thread, has its own. That placement came from `alloc(0).after(i)` alone. NOTES 9 records why
# it matters: state declared outside the parallel loop is one variable shared by all threads.
#
# Place the accumulator with `.after()` and no `i`, as if it were the sum's function-level state, and the
# C changes in two ways:

# %%
def rowmax_hoisted(R: int, C: int) -> UOp:
  A, OUT = buf(0, R * C), buf(1, R)
  i = range_(R, 0, AxisType.THREAD)
  acc = alloc(0).after()                       # not inside loop i: one accumulator for the whole kernel
  init = acc.index(0).store(-math.inf)
  j = range_(C, 1)
  accj = acc.after(init, j)
  upd = accj.index(0).store(accj.index(0).load().maximum(A.index(i * C + j).load())).end(j)
  return sink(OUT.index(i).store(acc.after(upd).index(0).load()).end(i))


print(render_c(rowmax_hoisted(4, 6), "rowmax_hoisted"))
a = (rng.standard_normal((4, 6)) + [[0], [3], [-1], [5]]).astype(np.float32)   # row maxima that go up and down
out = np.zeros(4, np.float32)
interpret(rowmax_hoisted(4, 6), a, out)
print("interpreted:", out, "\nNumPy:      ", a.max(1), "\nprefix max: ", np.maximum.accumulate(a.max(1)))

# %% [markdown]
# The declaration moved above the parallel loop, and so did the initialisation: `init` no longer depends
# on `i`, so it runs once, and every row continues from the previous rows' maximum. Run one row after the
# other (the interpreter) and the output is the running maximum over rows; run on several threads and all
# of them read and write one `acc0` at once, a data race whose result changes from run to run.
#
# The subtler version of the same mistake keeps the initialisation in the loop but the declaration out of
# it (`alloc(0).after().after(i)`). On one thread it gives the right answer, so a value test run with
# `OMP_NUM_THREADS=1` passes; on several threads it is a race, which a run shows only when the threads happen to
# interleave badly. So uopc does not look for races by running: `uopc.races.thread_races(prog)` reads them from the
# program. For each THREAD loop it compares every store to memory the iterations share (a BUFFER, or an ALLOC placed
# outside the loop) with every other access of that memory in the loop, from their index expressions: two
# iterations race when both indices can name one element. Here the index is `acc0[0]` in every iteration:

# %%
from uopc.races import check_no_races, thread_races


def rowmax_shared(R: int, C: int) -> UOp:
  A, OUT = buf(0, R * C), buf(1, R)
  i = range_(R, 0, AxisType.THREAD)
  acc = alloc(0).after().after(i)              # initialised in loop i, declared outside it
  init = acc.index(0).store(-math.inf)
  j = range_(C, 1)
  accj = acc.after(init, j)
  upd = accj.index(0).store(accj.index(0).load().maximum(A.index(i * C + j).load())).end(j)
  return sink(OUT.index(i).store(acc.after(upd).index(0).load()).end(i))


print("rowmax_shared: ", thread_races(rowmax_shared(1000, 1000))[0])
print("rowmax_program:", thread_races(rowmax_program(1000, 1000)) or "no race")
check_no_races("rowmax_program", rowmax_program(1000, 1000))
try: check_no_races("rowmax_hoisted", rowmax_hoisted(1000, 1000))
except AssertionError as e: print("AssertionError:", e)

# %% [markdown]
# The answer comes from the indices alone, so it is the same on one thread, on many, and on a machine with no
# OpenMP at all. `check_no_races(name, prog)` is the check the assignments use (week 2): it prints `ok: name`, or
# stops with the first race it found. Chapter 5 shows it reading a tile's indices, where the answer takes algebra.
#
# ## 4.6 Two loops, one END
#
# A 2-D copy with a transpose: `out[j, i] = a[i, j]`. One END may close several loops; the loop with the
# lowest id is the outermost.

# %%
def transpose_program(R: int, C: int) -> UOp:
  A, OUT = buf(0, R * C), buf(1, R * C)
  i, j = range_(R, 0, AxisType.THREAD), range_(C, 1)
  return sink(OUT.index(j * R + i).store(A.index(i * C + j).load()).end(j, i))


print(render_c(transpose_program(300, 200), "transpose"))
a = rng.standard_normal((300, 200)).astype(np.float32)
out = np.zeros((200, 300), np.float32)
Program(render_c(transpose_program(300, 200), "transpose"), "transpose")(a, out)
small, small_t = rng.standard_normal((30, 20)).astype(np.float32), np.zeros((20, 30), np.float32)
interpret(transpose_program(30, 20), small, small_t)
print("C equals a.T:", np.array_equal(out, a.T), "| interpreter equals a.T:", np.array_equal(small_t, small.T))

# %% [markdown]
# ## 4.7 Programs that are not loop nests
#
# Not every graph of these ops can be written as nested `for` loops. The linearizer (chapter 5) refuses
# the ones that cannot, with a `LinearizeError` that names the loop:

# %%
from uopc.linearize import LinearizeError

B = buf(0, 100)
i, j, other0 = range_(10, 0), range_(10, 1), range_(5, 0)
bad = {
  "a RANGE never closed by END": sink(B.index(i).store(1.0)),
  "two different loops with id 0": sink(B.index(i).store(1.0).end(i), B.index(other0).store(2.0).end(other0)),
  "loops that cross": sink(B.index(i * 10 + j).store(1.0).end(j).end(i),    # j inside i here...
                           B.index(j * 10 + i).store(2.0).end(i).end(j)),   # ...and i inside j here
}
for what, prog in bad.items():
  try:
    render_c(prog, "bad")
  except LinearizeError as e:
    print(f"{what}:\n  LinearizeError: {e}")

# %% [markdown]
# ## Pitfalls
# - **Reading state without the AFTER edge.** Replace `acc.after(upd)` by `acc` in the running max and
#   nothing orders the final read after the loop. The program is still a graph, the C still compiles, but
#   the read lands before the loop, here before the initialisation too: `float val1 = acc0;` reads a variable
#   nothing has written yet. In C that is undefined behaviour, not merely an unknown value: the compiler may
#   assume it never happens and compile the function to anything. No test of values can be trusted to catch it:

# %%
def rowmax_no_edge(R: int, C: int) -> UOp:
  A, OUT = buf(0, R * C), buf(1, R)
  i, j = range_(R, 0, AxisType.THREAD), range_(C, 1)
  acc = alloc(0).after(i)
  init = acc.index(0).store(-math.inf)
  accj = acc.after(init, j)
  upd = accj.index(0).store(accj.index(0).load().maximum(A.index(i * C + j).load())).end(j)
  return sink(OUT.index(i).store(acc.index(0).load()).end(i), upd.end(i))   # the read names no loop


print(render_c(rowmax_no_edge(4, 6), "no_edge"))

# %% [markdown]
# - **State in the wrong loop.** `.after(i)` places state inside loop `i`; `.after()` places it at the top
#   of the function. In a `THREAD` loop, state that is not inside the loop is shared by every thread
#   (NOTES 9), and a test run with one thread will not notice (4.5).
# - **Loop ids are names.** Two RANGEs with the same id would both print as `ridx0`; the linearizer refuses
#   them. Give every loop of a program its own id.
# - **One program, one ALLOC slot per piece of state.** Two different ALLOCs with the same slot print as
#   the same `acc` variable.
# - **The printer repeats shared nodes.** `print(prog)` writes a node each time it is used; for a program
#   with a few accumulators it is already long (chapter 3, exercise 5 writes a one-line-per-node printer).
#
# ## Exercises
# 1. Write a loop program for `out[i] = sum_j a[i, j] * b[j]` (a matrix-vector product) with the AFTER
#    idiom, run it with `interpret` and with `render_c` + `Program`, and check both against NumPy.
# 2. Write a running **argmax** per row: two accumulators (the max and its index), both placed by
#    `.after(i)`. What must the update of the index be ordered after?
# 3. A prefix sum: `out[k] = a[0] + ... + a[k]`. The running value is updated and stored in the same
#    iteration; close the loop over both stores with `UOp(Ops.SINK, (store_acc, store_out)).end(k)`.
# 4. Make `interpret` count how many times each node runs, and print the counts for `rowmax_program(4, 6)`.
#    Which nodes run 4 times, which 24, which once? Compare with where they sit in the C.
# 5. Build `rowmax_hoisted` with `alloc(0).after().after(i)` (declared outside, initialised inside), render
#    it, and write a function that reads the C and says whether every `acc` declaration is inside the
#    parallel loop.
