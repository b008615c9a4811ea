# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # Week 3 assignment: a GEMM by hand in the loop IR
#
# The exercises of Chapter 5 (the linearizer and the C renderer), solved in uopc: the matrix multiply that
# chapters 5 and 11 call "the week-3 assignment", written by hand as a loop program, first naive, then with a 4x4
# register tile and remainders, then with B transposed, and read back from its C. Then one of Chapter 6
# (reductions): where the reduce lowering places a fused softmax's work, counted in the C. Each exercise has
# - a **task cell** (it starts with `# TASK: <name>`): in the student version the solution is replaced by
#   `raise NotImplementedError("<name>")`. Replace that line with your code; keep the function names and
#   signatures, the grader calls them;
# - a **worked example** before it, solved, on a neighbouring problem (a matrix-vector product, not a GEMM);
# - **visible checks** right after it (`check(...)` from `uopc.checks`): each prints `ok: <what>`, or stops
#   with an AssertionError naming what is wrong, expected against got. `make check WEEK=3` runs them task by task, as
#   the grader runs the notebook (with threads), and `make check WEEK=3 NB=<your copy>` does the same for your copy;
# - **hidden tests** the grader runs after your whole notebook, which score the points below (they are not in your
#   tree). A *structure* or *speed* point counts only once the task's values are right.
#
# | exercise | task name | points |
# |---|---|---|
# | 5.1 | naive GEMM | 3 (values 2, structure 1) |
# | 5.2 | 4x4 register tile | 5 (values 3, structure 1, speed 1) |
# | 5.3 | B transposed | 3 (values 2, speed 1) |
# | 5.6 | loads and multiply-adds | 2 |
# | 6.5 | count the exps | 2 |
#
# The whole notebook runs in well under a minute on two cores. Timings are best-of-k after a warm-up; the
# notebook prints ratios measured in one run and never asserts a time (the grader's speed tests allow wide margins).

# %% tags=["nbval-ignore-output"]
import datetime
import os
import platform
import re
import subprocess

cpu = re.search(r"^model name\s*:\s*(.*)$", open("/proc/cpuinfo").read(), re.M)
print(f"CPU:      {cpu.group(1) if cpu else platform.machine()}, {os.cpu_count()} cores "
      f"(OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')})")
print(f"compiler: {subprocess.run(['cc', '--version'], capture_output=True, text=True).stdout.splitlines()[0]}")
print(f"date:     {datetime.date.today()}")

# %% [markdown]
# ## Setup
#
# The helpers of chapters 4 and 5: `buf` and `alloc` make buffers and accumulators, `run_gemm` compiles a loop
# program with `render_c` and `Program`, runs it on random inputs and returns the result with its float64
# reference. The output starts as NaN, so an element the kernel never writes shows up; `writes_per_element` counts
# how many times a program stores into each element of a buffer, so an element written twice shows up too.

# %%
import math
import re
import time
import numpy as np
from uopc.dtype import dtypes
from uopc.uop import AxisType, Ops, ParamArg, UOp, range_, sink, substitute
from uopc.symbolic import simplify
from uopc.render_c import render_c
from uopc.runtime import Program
from uopc.checks import check

f32 = dtypes.f32


def buf(slot: int, n: int) -> UOp: return UOp(Ops.BUFFER, (), ParamArg(slot, f32, (n,)))
def alloc(slot: int, n: int = 1) -> UOp: return UOp(Ops.ALLOC, (), ParamArg(slot, f32, (n,)))


def compile_gemm(build, M: int, N: int, K: int) -> Program:
  return Program(render_c(build(M, N, K), "gemm"), "gemm")


def run_gemm(build, M: int, N: int, K: int, b_transposed: bool = False) -> tuple[np.ndarray, np.ndarray]:
  """(C computed by the loop program build(M, N, K), A @ B in float64) for random A (M, K) and B (K, N); the
  program gets B^T (N, K) instead when b_transposed."""
  rng = np.random.default_rng(M + 7 * N + 13 * K)
  a, b = rng.standard_normal((M, K)).astype(np.float32), rng.standard_normal((K, N)).astype(np.float32)
  c = np.full((M, N), np.nan, np.float32)   # every element must be written
  compile_gemm(build, M, N, K)(a, np.ascontiguousarray(b.T) if b_transposed else b, c)
  return c, a.astype(np.float64) @ b.astype(np.float64)


def matches(c: np.ndarray, ref: np.ndarray) -> bool:
  return bool(np.allclose(c, ref, rtol=1e-4, atol=1e-4 * math.sqrt(ref.shape[0] + 1)))


def check_gemm(name: str, build, b_transposed: bool = False) -> None:
  """check() the program build(M, N, K) against NumPy for every shape of SHAPES."""
  for M, N, K in SHAPES:
    c, ref = run_gemm(build, M, N, K, b_transposed)
    check(f"{name}({M}, {N}, {K}): C", c, ref, rtol=1e-4, atol=1e-4 * math.sqrt(M + 1))


def writes_per_element(program: UOp, slot: int, shape: tuple[int, ...]) -> np.ndarray:
  """How many times `program` stores into each element of buffer `slot`: each of its stores into that buffer made
  `+= 1`, run on one thread over zeros (every other buffer holds ones)."""
  def into_slot(u: UOp) -> bool:
    return u.op is Ops.STORE and u.src[0].op is Ops.INDEX and u.src[0].src[0].op is Ops.BUFFER and \
      u.src[0].src[0].arg.slot == slot
  counting = {u: u.src[0].store(u.src[0].load() + 1.0) for u in program.toposort() if into_slot(u)}
  src = render_c(substitute(program, counting), "writes")
  prg = Program(src, "writes")
  prg.threads = 1
  args = [np.zeros(p.size, np.float32) if p.name == f"data{slot}" else np.ones(p.size, np.float32)
          for p in src.signature.params]
  prg(*args)
  return args[[p.name for p in src.signature.params].index(f"data{slot}")].reshape(shape).astype(np.int32)


def parallel_loops(src: str) -> int: return src.count("#pragma omp parallel for")


def trips(src: str) -> list[int]:
  """The trip counts of a C source's loops, in source order."""
  return [int(re.search(r"< (\d+);", line).group(1)) for line in loops(src)]


def loops(src: str) -> list[str]:
  """The `for` lines of a C source, indented as in the source."""
  return [line for line in src.splitlines() if "for (" in line]


SHAPES = [(1, 1, 1), (4, 4, 4), (5, 7, 3), (64, 64, 64), (67, 33, 29), (128, 96, 200)]

# %% tags=["hidden-setup"]
# the grader's side of the hidden tests (scripts/grader/solution_setup.py): record, raised and seeded for the probes;
# recorded, gradelib's checks and time_kernels for the judges. Grading splits each hidden test at `# JUDGE`: the probe
# runs in the sandbox after the student's cells, the judge in the grader's own process on the values it recorded.
import sys as _sys
from pathlib import Path as _Path
import uopc as _uopc
_sys.path.insert(0, str(_Path(_uopc.__file__).resolve().parents[1] / "scripts" / "grader"))
from solution_setup import gradelib, raised, record, recorded, seeded, time_kernels  # noqa: F401
from solution_setup import launch_cl, peak_memory, run_c  # noqa: F401


# %% [markdown]
# ## Exercise 5.1: naive GEMM
#
# **Worked example.** A matrix-vector product `y[i] = sum_k A[i, k] x[k]` has the shape of chapter 4's running
# max: one accumulator per output, placed in the output loop with `.after(i)`, initialised, updated in the `k`
# loop, read after the loop's END.

# %%
def matvec(M: int, K: int) -> UOp:
  A, X, Y = buf(0, M * K), buf(1, K), buf(2, M)
  i, k = range_(M, 0, AxisType.THREAD), range_(K, 1)
  acc = alloc(0).after(i)                                   # one accumulator per row, private to its thread
  init = acc.index(0).store(0.0)
  acck = acc.after(init, k)
  upd = acck.index(0).store(acck.index(0).load() + A.index(simplify(i * K + k)).load() * X.index(k).load()).end(k)
  return sink(Y.index(i).store(acc.after(upd).index(0).load()).end(i))


print(render_c(matvec(3, 5), "matvec"))
a, x, y = np.arange(15, dtype=np.float32).reshape(3, 5), np.ones(5, np.float32), np.zeros(3, np.float32)
Program(render_c(matvec(3, 5), "matvec"), "matvec")(a, x, y)
print("matvec:", y, "NumPy:", a @ x)

# %% [markdown]
# uopc can lower a Tensor matmul to such loops itself (`make_plan`, `uopc.rangeify.lower` and the optimizers'
# lowerings): that is the answer of this exercise and the next two, so while week 3 is graded those lowerings raise
# `ShortcutUnavailable`. A function of yours that calls them scores 0; a cell elsewhere that calls them (a self-check)
# stops there and costs nothing.
#
# **Your task.** `C = A @ B` with A (M, K), B (K, N), C (M, N), row-major float32 in buffers 0, 1 and 2. Write
# `gemm_naive(M, N, K)`: a THREAD loop over the rows (id 0), a loop over the columns (id 1), the reduction loop over
# `k` (id 2) with one accumulator per output element, placed inside both output loops. Pass the index expressions
# through `simplify`.

# %%
# TASK: naive GEMM
def gemm_naive(M: int, N: int, K: int) -> UOp:
  """C = A @ B as a loop program: rows (THREAD), columns, then k; one accumulator per element of C."""
  ### BEGIN SOLUTION
  A, B, C = buf(0, M * K), buf(1, K * N), buf(2, M * N)
  i, j, k = range_(M, 0, AxisType.THREAD), range_(N, 1), range_(K, 2)
  acc = alloc(0).after(i, j)                                # one accumulator per output element
  init = acc.index(0).store(0.0)
  acck = acc.after(init, k)
  a, b = A.index(simplify(i * K + k)).load(), B.index(simplify(k * N + j)).load()
  upd = acck.index(0).store(acck.index(0).load() + a * b).end(k)
  return sink(C.index(simplify(i * N + j)).store(acc.after(upd).index(0).load()).end(j, i))
  ### END SOLUTION


# %%
print("\n".join(loops(render_c(gemm_naive(64, 48, 32), "gemm"))))
check("loop trips of gemm_naive(64, 48, 32), outermost first", trips(render_c(gemm_naive(64, 48, 32), "gemm")),
      [64, 48, 32])
check("'#pragma omp parallel for' lines in gemm_naive's C (the row loop a THREAD loop)",
      parallel_loops(render_c(gemm_naive(64, 48, 32), "gemm")), 1)
check_gemm("gemm_naive", gemm_naive)

# %% [markdown]
# Expected: three nested loops of 64, 48 and 32 trips (the first under `#pragma omp parallel for`), and `ok` for
# every shape.

# %% tags=["hidden-test"]
# POINTS: naive GEMM 2
# SHORTCUTS: uopc.rangeify.lower, uopc.rangeify.rangeify, uopc.codegen.gemm_vec.lower_gemm,
# SHORTCUTS: uopc.codegen.vector_loops.lower_vector, uopc.codegen.localtile.lower_local_tile, uopc.codegen.tc.lower_tc
### BEGIN HIDDEN TESTS
# the student's loop program as data (a UOp graph); the judge renders it with the grader's render_c and compiles and
# runs the C itself (run_c), never through the notebook's render_c, Program or compile_gemm
_shapes = [(1, 1, 1), (5, 7, 3), (67, 33, 29), (128, 96, 200)]
_shapes += [tuple(int(_x) for _x in seeded(0).integers(1, 40, 3))]
for _shape in _shapes: record(f"{_shape}", gemm_naive(*_shape))
# JUDGE
_shapes = [(1, 1, 1), (5, 7, 3), (67, 33, 29), (128, 96, 200)]
_shapes += [tuple(int(_x) for _x in seeded(0).integers(1, 40, 3))]
for _shape in _shapes:
  _M, _N, _K = _shape
  _r = seeded(*_shape)
  _a, _b = _r.standard_normal((_M, _K), dtype=np.float32), _r.standard_normal((_K, _N), dtype=np.float32)
  _src = gradelib.render(recorded[f"{_shape}"], "gemm", f"gemm_naive{_shape}")
  (_c,) = run_c(_src, "gemm", [_a, _b, np.full((_M, _N), np.nan, np.float32)], outputs=[2],
                what=f"gemm_naive{_shape}")   # every element must be written: C starts as NaN
  gradelib.expect_close(_c, _a.astype(np.float64) @ _b.astype(np.float64), f"gemm_naive{_shape}: C", tol=1e-3)
### END HIDDEN TESTS

# %% tags=["hidden-test"]
# POINTS: naive GEMM 1 structure
### BEGIN HIDDEN TESTS
record("program", gemm_naive(67, 33, 29))
# JUDGE
_src = gradelib.render(recorded["program"], "gemm", "gemm_naive(67, 33, 29)")   # the grader's render_c
gradelib.expect_loops(_src, [(0, 67), (1, 33), (2, 29)], "gemm_naive(67, 33, 29): rows, columns, k")
assert gradelib.parallel_loops(_src) == 1, f"gemm_naive: {gradelib.parallel_loops(_src)} parallel loops, expected 1"
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 5.2: 4x4 register tile
#
# **Worked example.** The matrix-vector product of 5.1, four rows at a time: each trip of the row loop computes four
# outputs, so every load of x feeds four multiply-adds. The four accumulators are updated under one END of `k` (a
# SINK of the four stores), and when M is not a multiple of 4 the rows left over are a plain matrix-vector loop
# after the tiles, over rows M4 to M - 1 (its loop variable plus an offset), with loop ids and an accumulator slot
# of its own.

# %%
def matvec_rows4(M: int, K: int) -> UOp:
  """y = A x, four rows per trip of the THREAD loop; the M % 4 rows left over by a plain loop after it."""
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
      a = A.index(simplify((i * 4 + r) * K + k)).load()
      updates.append(acck.index(0).store(acck.index(0).load() + a * x))
    loop_k = UOp(Ops.SINK, tuple(updates)).end(k)                          # one k loop for all four
    outs = [Y.index(simplify(i * 4 + r)).store(accs[r].after(loop_k).index(0).load()) for r in range(4)]
    parts.append(UOp(Ops.SINK, tuple(outs)).end(i))
  if M4 < M:                                                               # rows M4 .. M - 1
    i, k = range_(M - M4, 2, AxisType.THREAD), range_(K, 3)
    acc = alloc(4).after(i)
    init = acc.index(0).store(0.0)
    acck = acc.after(init, k)
    upd = acck.index(0).store(acck.index(0).load() + A.index(simplify((i + M4) * K + k)).load() * X.index(k).load())
    parts.append(Y.index(simplify(i + M4)).store(acc.after(upd.end(k)).index(0).load()).end(i))
  return sink(*parts)


print("\n".join(loops(render_c(matvec_rows4(6, 5), "matvec"))))
for M, K in ((4, 3), (6, 5), (67, 29)):
  a, x = np.random.default_rng(M).standard_normal((M, K)).astype(np.float32), np.ones(K, np.float32)
  y = np.full(M, np.nan, np.float32)
  Program(render_c(matvec_rows4(M, K), "matvec"), "matvec")(a, x, y)
  print(f"matvec_rows4({M}, {K}) matches NumPy: {np.allclose(y, a @ x, atol=1e-5)}, stores per element of y: "
        f"{sorted(set(writes_per_element(matvec_rows4(M, K), 2, (M,)).tolist()))}")

# %% [markdown]
# **Your task.** `gemm_tiled(M, N, K)`: a 4x4 register tile. The tile loops come first: rows of tiles (THREAD, id 0,
# M // 4 trips), columns of tiles (id 1, N // 4 trips), then one `k` loop (id 2) that loads 4 values of A and 4 of B
# and does 16 multiply-adds into 16 accumulators. Then the remainders: when M or N is not a multiple of 4, the rows
# and columns left over are computed by naive strips after the tiles (the naive kernel over a range of rows and
# columns, with offsets), so that every element of C is written once: the checks count the stores into each
# element.

# %%
# TASK: 4x4 register tile
def gemm_tiled(M: int, N: int, K: int) -> UOp:
  """C = A @ B with a 4x4 register tile, naive strips for the rows and columns left over."""
  ### BEGIN SOLUTION
  def gemm_strip(rows: tuple, cols: tuple, first_id: int, slot: int) -> UOp:
    """C[r, c] for rows[0] <= r < rows[1], cols[0] <= c < cols[1]: the naive loops, with offsets."""
    i = range_(rows[1] - rows[0], first_id, AxisType.THREAD)
    j, k = range_(cols[1] - cols[0], first_id + 1), range_(K, first_id + 2)
    r, c = i + rows[0], j + cols[0]
    acc = alloc(slot).after(i, j)
    init = acc.index(0).store(0.0)
    acck = acc.after(init, k)
    a, b = A.index(simplify(r * K + k)).load(), B.index(simplify(k * N + c)).load()
    upd = acck.index(0).store(acck.index(0).load() + a * b).end(k)
    return C.index(simplify(r * N + c)).store(acc.after(upd).index(0).load()).end(j, i)

  A, B, C = buf(0, M * K), buf(1, K * N), buf(2, M * N)
  M4, N4 = M - M % 4, N - N % 4
  parts = []
  if M4 and N4:
    i, j, k = range_(M4 // 4, 0, AxisType.THREAD), range_(N4 // 4, 1), range_(K, 2)
    accs = [alloc(t).after(i, j) for t in range(16)]                       # acc[4*r + c] for C[4i + r, 4j + c]
    inits = [acc.index(0).store(0.0) for acc in accs]
    a = [A.index(simplify((i * 4 + r) * K + k)).load() for r in range(4)]  # 4 loads of A ...
    b = [B.index(simplify(k * N + j * 4 + c)).load() for c in range(4)]    # ... and 4 of B per k
    updates = []
    for t in range(16):
      acck = accs[t].after(inits[t], k)
      updates.append(acck.index(0).store(acck.index(0).load() + a[t // 4] * b[t % 4]))
    loop_k = UOp(Ops.SINK, tuple(updates)).end(k)                          # one k loop for all 16
    outs = [C.index(simplify((i * 4 + t // 4) * N + j * 4 + t % 4)).store(accs[t].after(loop_k).index(0).load())
            for t in range(16)]
    parts.append(UOp(Ops.SINK, tuple(outs)).end(j, i))
  if N4 < N: parts.append(gemm_strip((0, M), (N4, N), 3, 16))          # right strip, all rows
  if M4 < M and N4: parts.append(gemm_strip((M4, M), (0, N4), 6, 17))  # bottom strip, the tiles' columns only
  return sink(*parts)
  ### END SOLUTION


# %%
print("\n".join(loops(render_c(gemm_tiled(6, 7, 5), "gemm"))))
check_gemm("gemm_tiled", gemm_tiled)
for M, N, K in ((6, 7, 5), (8, 8, 3), (5, 4, 2), (3, 9, 2)):
  check(f"stores into each element of C by gemm_tiled({M}, {N}, {K}) (every element written once)",
        writes_per_element(gemm_tiled(M, N, K), 2, (M, N)), np.ones((M, N), np.int32))

# %% [markdown]
# Expected with the remainders as above: the tile loops (1, 1, 5 trips), the right strip (6 rows, 3 columns, 5) and
# the bottom strip (2 rows, 4 columns, 5), and `ok` for every shape. How fast is it, on one thread?

# %% tags=["nbval-ignore-output"]
def best_time(fn, reps: int = 5) -> float:
  fn()
  best = math.inf
  for _ in range(reps):
    t0 = time.perf_counter(); fn(); best = min(best, time.perf_counter() - t0)
  return best


n = 256
a, b = np.ones((n, n), np.float32), np.ones((n, n), np.float32)
c = np.zeros((n, n), np.float32)
naive, tiled = compile_gemm(gemm_naive, n, n, n), compile_gemm(gemm_tiled, n, n, n)
t_naive, t_tiled = best_time(lambda: naive(a, b, c)), best_time(lambda: tiled(a, b, c))
print(f"n = {n}: naive {t_naive * 1e3:.2f} ms, 4x4 tile {t_tiled * 1e3:.2f} ms: {t_naive / t_tiled:.1f}x faster")

# %% tags=["hidden-test"]
# POINTS: 4x4 register tile 3
# SHORTCUTS: uopc.rangeify.lower, uopc.rangeify.rangeify, uopc.codegen.gemm_vec.lower_gemm,
# SHORTCUTS: uopc.codegen.vector_loops.lower_vector, uopc.codegen.localtile.lower_local_tile, uopc.codegen.tc.lower_tc
### BEGIN HIDDEN TESTS
_shapes = [(4, 4, 4), (5, 7, 3), (3, 9, 2), (67, 33, 29), (128, 96, 200)]
_shapes += [tuple(int(_x) for _x in seeded(0).integers(1, 40, 3))]
for _shape in _shapes:
  # one shape's exception is that shape's failure: the judge still reports the others (what it raised only explains a
  # failure: the points need the graph, rendered and run by the judge)
  _got = {}
  record(f"{_shape} raised", raised(lambda: _got.update(program=gemm_tiled(*_shape))))
  record(f"{_shape}", _got.get("program"))
# JUDGE
_shapes = [(4, 4, 4), (5, 7, 3), (3, 9, 2), (67, 33, 29), (128, 96, 200)]
_shapes += [tuple(int(_x) for _x in seeded(0).integers(1, 40, 3))]
for _shape in _shapes:
  _M, _N, _K = _shape
  _r = seeded(*_shape)
  _a, _b = _r.standard_normal((_M, _K), dtype=np.float32), _r.standard_normal((_K, _N), dtype=np.float32)
  _err = recorded[f"{_shape} raised"]
  assert recorded[f"{_shape}"] is not None, f"gemm_tiled{_shape}: {_err['raised']}: {_err['message']}"
  _src = gradelib.render(recorded[f"{_shape}"], "gemm", f"gemm_tiled{_shape}")
  (_c,) = run_c(_src, "gemm", [_a, _b, np.full((_M, _N), np.nan, np.float32)], outputs=[2],
                what=f"gemm_tiled{_shape}")
  gradelib.expect_close(_c, _a.astype(np.float64) @ _b.astype(np.float64), f"gemm_tiled{_shape}: C", tol=1e-3)
### END HIDDEN TESTS

# %% tags=["hidden-test"]
# POINTS: 4x4 register tile 1 structure
### BEGIN HIDDEN TESTS
record("program", gemm_tiled(68, 36, 29))
for _shape in ((7, 6, 3), (9, 11, 2)): record(f"program {_shape}", gemm_tiled(*_shape))
# JUDGE
# everything from the recorded graphs, by the grader's uopc: its rendering, and the stores into C counted by a run
# (every store into C made += 1, on one thread over zeros) in the grader's sandbox
from uopc.render_c import render_c as _render_c
from uopc.uop import Ops as _Ops, substitute as _substitute


def _writes(_program, _shape, _what):
  """Stores into each element of C (buffer 2): every store into it made += 1, run on one thread over zeros."""
  _into = lambda u: u.op is _Ops.STORE and u.src[0].op is _Ops.INDEX and u.src[0].src[0].op is _Ops.BUFFER and \
    u.src[0].src[0].arg.slot == 2
  _src = _render_c(_substitute(_program, {u: u.src[0].store(u.src[0].load() + 1.0) for u in _program.toposort()
                                          if _into(u)}), "writes")
  _names = [p.name for p in _src.signature.params]
  if "data2" not in _names: raise AssertionError(f"{_what}: no store into C (buffer 2)")
  _args = [np.zeros(p.size, np.float32) if p.name == "data2" else np.ones(p.size, np.float32)
           for p in _src.signature.params]
  (_c,) = run_c(str(_src), "writes", _args, outputs=[_names.index("data2")], what=_what, threads=1)
  return _c.reshape(_shape) if _c.size == _shape[0] * _shape[1] else _c


_src = gradelib.render(recorded["program"], "gemm", "gemm_tiled(68, 36, 29)")
gradelib.expect_loops(_src, [(0, 17), (1, 9), (2, 29)], "gemm_tiled(68, 36, 29): tile rows, tile columns, k")
_k_body = _src.split("for (int ridx2 = 0;")[1].split("\n    }\n")[0]
_fmas = len(re.findall(r"acc\d+ = \(", _k_body))
assert _fmas == 16, f"gemm_tiled: {_fmas} accumulator updates per step of k, expected 16 (a 4x4 tile)"
for _shape in ((7, 6, 3), (9, 11, 2)):
  _w = np.nan_to_num(_writes(gradelib.graph(recorded[f"program {_shape}"], f"gemm_tiled{_shape}"), _shape[:2],
                             f"gemm_tiled{_shape}"), nan=-1).astype(np.int64)
  _twice = np.argwhere(_w != 1)
  assert _w.shape == _shape[:2] and not len(_twice), (
    f"gemm_tiled{_shape}: element {tuple(_twice[0].tolist())} of C is stored {_w[tuple(_twice[0])]} times, expected "
    f"once ({len(_twice)} elements not stored exactly once: do two strips overlap?)")
### END HIDDEN TESTS

# %% tags=["hidden-test"]
# POINTS: 4x4 register tile 1 speed
### BEGIN HIDDEN TESTS
record("tiled", gemm_tiled(256, 256, 256))
# JUDGE
# the student's C timed in a sandbox of its own against the grader's naive kernel (never the student's own naive),
# each repetition on fresh inputs and an output full of NaN, checked
_tiled = gradelib.render(recorded["tiled"], "gemm", "gemm_tiled(256, 256, 256)")   # the grader's render_c
_timing = time_kernels(_tiled, "gemm", [["f32", [256, 256]], ["f32", [256, 256]], ["zeros", [256, 256]]],
                       outputs=[2], reference=gradelib.naive_gemm_c(256, 256, 256))
_ratio = gradelib.expect_speedup(_timing, 2.0, "gemm_tiled against a naive GEMM at n = 256")
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 5.3: B transposed
#
# **Worked example.** Chapter 4's transpose writes `out[j, i] = a[i, j]`: one of its two accesses walks memory with
# a stride. NumPy's `b.T` is free (a view), but a contiguous copy of it is one such pass.

# %%
def transpose_program(R: int, C: int) -> UOp:
  A, OUT = buf(0, R * C), buf(1, R * C)
  i, j = range_(R, 0, AxisType.THREAD), range_(C, 1)
  return sink(OUT.index(simplify(j * R + i)).store(A.index(simplify(i * C + j)).load()).end(j, i))


a, out = np.arange(6, dtype=np.float32).reshape(2, 3), np.zeros((3, 2), np.float32)
Program(render_c(transpose_program(2, 3), "transpose"), "transpose")(a, out)
print(out)

# %% [markdown]
# **Your task.** The naive kernel reads B down a column: a stride of N floats at every step of `k`. Write
# `gemm_naive_bt(M, N, K)`, the naive kernel that gets B^T (shape (N, K), buffer 1) instead of B, so that the `k`
# loop reads both A and B^T contiguously. Same loops as `gemm_naive`.

# %%
# TASK: B transposed
def gemm_naive_bt(M: int, N: int, K: int) -> UOp:
  """C = A @ B, given A (M, K) and B^T (N, K): the k loop reads both contiguously."""
  ### BEGIN SOLUTION
  A, BT, C = buf(0, M * K), buf(1, N * K), buf(2, M * N)
  i, j, k = range_(M, 0, AxisType.THREAD), range_(N, 1), range_(K, 2)
  acc = alloc(0).after(i, j)
  init = acc.index(0).store(0.0)
  acck = acc.after(init, k)
  a, b = A.index(simplify(i * K + k)).load(), BT.index(simplify(j * K + k)).load()   # both rows, stride 1 in k
  upd = acck.index(0).store(acck.index(0).load() + a * b).end(k)
  return sink(C.index(simplify(i * N + j)).store(acc.after(upd).index(0).load()).end(j, i))
  ### END SOLUTION


# %%
check_gemm("gemm_naive_bt", gemm_naive_bt, b_transposed=True)

# %% tags=["nbval-ignore-output"]
n = 512
a, b, c = np.ones((n, n), np.float32), np.ones((n, n), np.float32), np.zeros((n, n), np.float32)
naive, bt = compile_gemm(gemm_naive, n, n, n), compile_gemm(gemm_naive_bt, n, n, n)
t_naive, t_bt = best_time(lambda: naive(a, b, c), 3), best_time(lambda: bt(a, b, c), 3)
print(f"n = {n}: naive {t_naive * 1e3:.1f} ms, naive with B^T {t_bt * 1e3:.1f} ms: {t_naive / t_bt:.1f}x faster")

# %% tags=["hidden-test"]
# POINTS: B transposed 2
# SHORTCUTS: uopc.rangeify.lower, uopc.rangeify.rangeify, uopc.codegen.gemm_vec.lower_gemm,
# SHORTCUTS: uopc.codegen.vector_loops.lower_vector, uopc.codegen.localtile.lower_local_tile, uopc.codegen.tc.lower_tc
### BEGIN HIDDEN TESTS
_shapes = [(1, 1, 1), (5, 7, 3), (67, 33, 29), (64, 96, 128)]
_shapes += [tuple(int(_x) for _x in seeded(0).integers(1, 40, 3))]
for _shape in _shapes: record(f"{_shape}", gemm_naive_bt(*_shape))
# JUDGE
_shapes = [(1, 1, 1), (5, 7, 3), (67, 33, 29), (64, 96, 128)]
_shapes += [tuple(int(_x) for _x in seeded(0).integers(1, 40, 3))]
for _shape in _shapes:
  _M, _N, _K = _shape
  _r = seeded(*_shape)
  _a, _b = _r.standard_normal((_M, _K), dtype=np.float32), _r.standard_normal((_K, _N), dtype=np.float32)
  _src = gradelib.render(recorded[f"{_shape}"], "gemm", f"gemm_naive_bt{_shape}")
  (_c,) = run_c(_src, "gemm", [_a, np.ascontiguousarray(_b.T), np.full((_M, _N), np.nan, np.float32)],
                outputs=[2], what=f"gemm_naive_bt{_shape}")
  gradelib.expect_close(_c, _a.astype(np.float64) @ _b.astype(np.float64), f"gemm_naive_bt{_shape}: C", tol=1e-3)
### END HIDDEN TESTS

# %% tags=["hidden-test"]
# POINTS: B transposed 1 speed
### BEGIN HIDDEN TESTS
record("bt", gemm_naive_bt(512, 512, 512))
# JUDGE
# B symmetric, so B^T = B: the student's kernel (reading B^T) and the grader's naive one (reading B) agree
_bt = gradelib.render(recorded["bt"], "gemm", "gemm_naive_bt(512, 512, 512)")
_timing = time_kernels(_bt, "gemm", [["f32", [512, 512]], ["sym", [512, 512]], ["zeros", [512, 512]]],
                       outputs=[2], reference=gradelib.naive_gemm_c(512, 512, 512), reps=3)
_ratio = gradelib.expect_speedup(_timing, 1.5, "gemm_naive_bt against a naive GEMM at n = 512")
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 5.6: loads and multiply-adds
#
# **Worked example.** `loop_body(src, depth)` returns the lines of the first loop at a given depth, up to its
# closing brace; here the `k` loop of the matrix-vector product, with its two loads (`data0` and `data1`).

# %%
def loop_body(src: str, depth: int) -> list[str]:
  """The lines inside the first `for` loop nested `depth` loops deep (0: outermost), without its braces."""
  lines, seen, out, inside = src.splitlines(), -1, [], 0
  for line in lines:
    if inside:
      inside += line.count("{") - line.count("}")
      if inside == 0: return out
      out.append(line)
    elif "for (" in line:
      seen = len(line) - len(line.lstrip())
      if seen // 2 - 1 == depth: inside = 1
  return out


print("\n".join(loop_body(render_c(matvec(3, 5), "matvec"), 1)))

# %% [markdown]
# **Your task.** `k_step_counts(src)`: read the C of a GEMM kernel and return `(loads, multiply_adds)` made by one
# step of its first `k` loop (the first loop at depth 2): loads are reads of a buffer (`data<n>[...]`),
# multiply-adds are accumulator updates (`acc<n> = (...)`). The ratio predicts the tile's gain (Exercise 5.6).

# %%
# TASK: loads and multiply-adds
def k_step_counts(src: str) -> tuple[int, int]:
  """(loads from buffers, multiply-adds into accumulators) in one step of the first k loop (depth 2)."""
  ### BEGIN SOLUTION
  body = "\n".join(loop_body(src, 2))
  return len(re.findall(r"= data\d+\[", body)), len(re.findall(r"acc\d+ = \(", body))
  ### END SOLUTION


# %%
for name, program, want in (("naive", gemm_naive(64, 64, 64), (2, 1)), ("4x4 tile", gemm_tiled(64, 64, 64), (8, 16)),
                            ("B^T", gemm_naive_bt(64, 64, 64), (2, 1))):
  loads, fmas = k_step_counts(render_c(program, "gemm"))
  print(f"{name:8s}: {loads} loads, {fmas} multiply-adds per k step, {loads / fmas:.2f} loads per multiply-add")
  check(f"k_step_counts({name}, 64 x 64 x 64): (loads, multiply-adds)", (loads, fmas), want)
# the first k loop only: a 1x2 tile's, not the k loop of the strip of one column after it
tile_1x2 = """void gemm(float* restrict data0, float* restrict data1, float* restrict data2) {
  for (int ridx0 = 0; ridx0 < 4; ridx0++) {
    for (int ridx1 = 0; ridx1 < 2; ridx1++) {
      float acc0 = 0.0f; float acc1 = 0.0f;
      for (int ridx2 = 0; ridx2 < 8; ridx2++) {
        float val0 = data0[ridx0*8+ridx2];
        float val1 = data1[ridx2*5+ridx1*2];
        float val2 = data1[ridx2*5+ridx1*2+1];
        acc0 = (acc0+(val0*val1));
        acc1 = (acc1+(val0*val2));
      }
      data2[ridx0*5+ridx1*2] = acc0; data2[ridx0*5+ridx1*2+1] = acc1;
    }
  }
  for (int ridx3 = 0; ridx3 < 4; ridx3++) {
    for (int ridx4 = 0; ridx4 < 1; ridx4++) {
      float acc2 = 0.0f;
      for (int ridx5 = 0; ridx5 < 8; ridx5++) {
        float val3 = data0[ridx3*8+ridx5];
        float val4 = data1[ridx5*5+4];
        acc2 = (acc2+(val3*val4));
      }
      data2[ridx3*5+4] = acc2;
    }
  }
}"""
check("k_step_counts(a hand-written 1x2 tile + strip): (loads, multiply-adds)", k_step_counts(tile_1x2), (3, 2))

# %% [markdown]
# Expected: the naive kernels make 2 loads per multiply-add, the tile 8 loads for 16 (0.5): four times fewer loads
# for the same arithmetic, and 16 independent chains instead of one. The last check: 3 loads and 2 multiply-adds in
# the 1x2 tile's k step, none of the strip's.

# %% tags=["hidden-test"]
# POINTS: loads and multiply-adds 2
### BEGIN HIDDEN TESTS
from uopc.dtype import dtypes as _dtypes
from uopc.render_c import render_c as _render_c  # noqa: F811 (each probe imports what it uses: the grader's own)
from uopc.symbolic import simplify as _simplify
from uopc.uop import AxisType as _AxisType, Ops as _Ops, ParamArg as _ParamArg, UOp as _UOp, range_ as _range_, \
  sink as _sink  # noqa: F811


def _buf(slot, n): return _UOp(_Ops.BUFFER, (), _ParamArg(slot, _dtypes.f32, (n,)))
def _alloc(slot): return _UOp(_Ops.ALLOC, (), _ParamArg(slot, _dtypes.f32, (1,)))


def _strip(A, B, C, N, K, rows, cols, first_id, slot):
  """The naive GEMM over rows x cols, with offsets."""
  i = _range_(rows[1] - rows[0], first_id, _AxisType.THREAD)
  j, k = _range_(cols[1] - cols[0], first_id + 1), _range_(K, first_id + 2)
  r, c = i + rows[0], j + cols[0]
  acc = _alloc(slot).after(i, j)
  acck = acc.after(acc.index(0).store(0.0), k)
  a, b = A.index(_simplify(r * K + k)).load(), B.index(_simplify(k * N + c)).load()
  upd = acck.index(0).store(acck.index(0).load() + a * b).end(k)
  return C.index(_simplify(r * N + c)).store(acc.after(upd).index(0).load()).end(j, i)


def _gemm_1x4(M, N, K):
  """A 1x4 tile over the columns, then the columns left over by a naive strip."""
  A, B, C = _buf(0, M * K), _buf(1, K * N), _buf(2, M * N)
  N4, parts = N - N % 4, []
  i, j, k = _range_(M, 0, _AxisType.THREAD), _range_(N4 // 4, 1), _range_(K, 2)
  accs = [_alloc(t).after(i, j) for t in range(4)]
  inits = [acc.index(0).store(0.0) for acc in accs]
  a = A.index(_simplify(i * K + k)).load()
  b = [B.index(_simplify(k * N + j * 4 + c)).load() for c in range(4)]
  ups = [accs[t].after(inits[t], k).index(0).store(accs[t].after(inits[t], k).index(0).load() + a * b[t])
         for t in range(4)]
  loop_k = _UOp(_Ops.SINK, tuple(ups)).end(k)
  outs = [C.index(_simplify(i * N + j * 4 + t)).store(accs[t].after(loop_k).index(0).load()) for t in range(4)]
  parts.append(_UOp(_Ops.SINK, tuple(outs)).end(j, i))
  if N4 < N: parts.append(_strip(A, B, C, N, K, (0, M), (N4, N), 3, 4))
  return _sink(*parts)


def _matvec(M, K):
  A, X, Y = _buf(0, M * K), _buf(1, K), _buf(2, M)
  i, k = _range_(M, 0, _AxisType.THREAD), _range_(K, 1)
  acc = _alloc(0).after(i)
  acck = acc.after(acc.index(0).store(0.0), k)
  upd = acck.index(0).store(acck.index(0).load() + A.index(_simplify(i * K + k)).load() * X.index(k).load()).end(k)
  return _sink(Y.index(i).store(acc.after(upd).index(0).load()).end(i))


_A, _B, _C = _buf(0, 20 * 8), _buf(1, 8 * 12), _buf(2, 20 * 12)
record("naive", k_step_counts(_render_c(_sink(_strip(_A, _B, _C, 12, 8, (0, 20), (0, 12), 0, 0)), "gemm")))
record("1x4", k_step_counts(_render_c(_gemm_1x4(8, 9, 8), "gemm")))
record("matvec", k_step_counts(_render_c(_matvec(16, 8), "mv")))
_tile_2x2 = """void gemm(float* restrict data0, float* restrict data1, float* restrict data2) {
  for (int ridx0 = 0; ridx0 < 2; ridx0++) {
    for (int ridx1 = 0; ridx1 < 2; ridx1++) {
      float acc0 = 0.0f; float acc1 = 0.0f; float acc2 = 0.0f; float acc3 = 0.0f;
      for (int ridx2 = 0; ridx2 < 4; ridx2++) {
        float val0 = data0[ridx0*8+ridx2];
        float val1 = data0[ridx0*8+ridx2+4];
        float val2 = data1[ridx2*4+ridx1*2];
        float val3 = data1[ridx2*4+ridx1*2+1];
        acc0 = (acc0+(val0*val2));
        acc1 = (acc1+(val0*val3));
        acc2 = (acc2+(val1*val2));
        acc3 = (acc3+(val1*val3));
      }
      data2[ridx0*8+ridx1*2] = acc0;
    }
  }
}"""
record("2x2", k_step_counts(_tile_2x2))
# JUDGE
gradelib.expect_equal(recorded["naive"], (2, 1), "k_step_counts(naive GEMM)")
gradelib.expect_equal(recorded["1x4"], (5, 4), "k_step_counts(1x4 tile + strip)")
gradelib.expect_equal(recorded["matvec"], (0, 0), "k_step_counts(matvec: no loop at depth 2)")
gradelib.expect_equal(recorded["2x2"], (4, 4), "k_step_counts(a hand-written 2x2 tile)")
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 6.5: count the exps
#
# **Worked example.** How often a line of C runs is the product of the trips of the loops around it. `runs_per_line`
# writes that product next to every line that is not a loop; here for the matrix-vector product, whose multiply-add
# runs 3 x 5 = 15 times.

# %%
def runs_per_line(src: str) -> list[tuple[int, str]]:
  """(how many times it runs, the line) for every line of a C source that is not a loop header or a brace."""
  out, trips = [], []
  for line in src.splitlines():
    if m := re.search(r"for \(int (\w+) = 0; \1 < (\d+); \1\+\+\)", line): trips.append(int(m.group(2)))
    elif line.strip() == "}": trips = trips[:-1] if trips else trips
    elif line.strip() and not line.startswith(("void", "  #pragma")): out.append((math.prod(trips), line.strip()))
  return out


for n, line in runs_per_line(render_c(matvec(3, 5), "matvec")): print(f"{n:4d}  {line}")

# %% [markdown]
# **Your task.** Chapter 6's fused attention (`fuse_reduce=True`, no optimizer) is one kernel: the row max, the row
# sum of exponentials and the output all inside the row loop, and the output's softmax weight recomputed for every
# output column. Predict, as a formula in N and D, how many exponentials (`exp2f`) it computes (`predicted_exps`),
# and count them in any kernel's C (`count_exps`: every `exp2f(` once per trip of the loops around it).

# %%
from uopc.kernelize import make_plan
from uopc.tensor import Tensor


def fused_attention_src(N: int, D: int) -> str:
  q, k, v = (Tensor(np.ones((N, D), np.float32)) for _ in range(3))
  s = (q @ k.T * (1 / math.sqrt(D))).softmax(-1) @ v
  return make_plan([s.uop], True, None).kernels[-1].src


# %%
# TASK: count the exps
def predicted_exps(N: int, D: int) -> int:
  """exp2f calls of the fused attention kernel (fuse_reduce=True, no optimizer) for (N, D) inputs."""
  ### BEGIN SOLUTION
  return N * N + N * D * N   # the row sums (N per row), then the N weights of every output (i, d)
  ### END SOLUTION


def count_exps(src: str) -> int:
  """exp2f calls a C kernel makes: each occurrence once per trip of the loops around it."""
  ### BEGIN SOLUTION
  return sum(n * line.count("exp2f(") for n, line in runs_per_line(src))
  ### END SOLUTION


# %%
x_soft = Tensor(np.ones((8, 16), np.float32))
softmax_src = make_plan([x_soft.softmax(-1).uop], True, None).kernels[-1].src
print("\n".join(f"{n:4d}  {line}" for n, line in runs_per_line(softmax_src) if "exp2f(" in line))
check("count_exps(the fused softmax's C, (8, 16))", count_exps(softmax_src), 2 * 8 * 16)
check("count_exps(the matrix-vector product's C)", count_exps(render_c(matvec(4, 4), "mv")), 0)
for N, D in ((32, 4), (64, 8)):
  counted = count_exps(fused_attention_src(N, D))
  print(f"N = {N}, D = {D}: predicted {predicted_exps(N, D)}, counted in the C {counted}")
  check(f"predicted_exps({N}, {D}) against count_exps of the fused kernel's C", predicted_exps(N, D), counted)

# %% [markdown]
# Expected: the fused softmax's two lines with `exp2f`, each run 128 times (the row sum's and the output's, one per
# element of an (8, 16) input: 2 x 8 x 16); four `ok` lines; and your prediction equal to your count at both sizes.
# (The checks compare the two, and your count with kernels whose count is known: a formula that happens to fit two
# sizes can still be wrong at others, which the hidden tests try.)

# %% [markdown] tags=["answer"]
# N^2 exponentials for the row sums, and N^2 D more, because the output's weights are recomputed for each of its D
# columns (Chapter 11's recompute, in its simplest form).

# %% tags=["hidden-test"]
# POINTS: count the exps 1
### BEGIN HIDDEN TESTS
_cases = [(32, 4), (48, 8), (16, 16), (int(seeded(5).integers(2, 40)), int(seeded(6).integers(1, 20)))]
for _N, _D in _cases: record(f"{_N}, {_D}", predicted_exps(_N, _D))
# JUDGE
from uopc.kernelize import make_plan as _make_plan
from uopc.tensor import Tensor as _Tensor
_cases = [(32, 4), (48, 8), (16, 16), (int(seeded(5).integers(2, 40)), int(seeded(6).integers(1, 20)))]
for _N, _D in _cases:
  _q, _k, _v = (_Tensor(np.ones((_N, _D), np.float32)) for _ in range(3))
  _src = _make_plan([((_q @ _k.T * (1 / math.sqrt(_D))).softmax(-1) @ _v).uop], True, None).kernels[-1].src
  _counted = gradelib.weighted_count(_src, r"exp2f\(")
  gradelib.expect_equal(recorded[f"{_N}, {_D}"], _counted,
                        f"predicted_exps({_N}, {_D}) (the fused kernel's C computes {_counted})")
### END HIDDEN TESTS

# %% tags=["hidden-test"]
# POINTS: count the exps 1
### BEGIN HIDDEN TESTS
# FIXTURE
# the four kernels made by the grader's uopc, before the sandbox: the probe only counts (in the sandbox, uopc's
# lowering is the answer of the GEMM tasks and is not available: see their SHORTCUTS)
from uopc.kernelize import make_plan as _make_plan
from uopc.tensor import Tensor as _Tensor
_x = _Tensor(np.ones((8, 16), np.float32))
_q = _Tensor(np.ones((32, 4), np.float32))
_attention = ((_q @ _q.T * (1 / math.sqrt(4))).softmax(-1) @ _q).uop
_fused, _unfused = (_make_plan([_x.softmax(-1).uop], _f, None).kernels[-1].src for _f in (True, False))
fixture = {"fused attention (32, 4)": str(_make_plan([_attention], True, None).kernels[-1].src),
           "fused softmax (8, 16)": str(_fused), "the last kernel of unfused softmax (8, 16)": str(_unfused),
           "a kernel with no exp": "void mv(float* restrict data0) {\n  for (int ridx0 = 0; ridx0 < 4; ridx0++) "
                                   "data0[ridx0] = 1.0f;\n}"}
# PROBE
for _what, _src in fixture.items(): record(_what, count_exps(_src))
# JUDGE
for _what, _src in fixture.items():
  gradelib.expect_equal(recorded[_what], gradelib.weighted_count(_src, r"exp2f\("), f"count_exps({_what})")
### END HIDDEN TESTS
