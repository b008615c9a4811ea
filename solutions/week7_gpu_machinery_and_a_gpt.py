# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # Week 7 assignment: GPU machinery and a GPT
#
# Exercises on Chapter 13 (GPU machinery: bank conflicts, tensor-core fragments) and Chapter 14 (a GPT: its
# optimizer and its parameters). Each exercise has
# - a **task cell** (it starts with `# TASK: <name>`): in the student version the solution is replaced by
#   `raise NotImplementedError("<name>")`. Replace that line with your code; keep the function names and
#   signatures, the grader calls them;
# - a **worked example** before it, solved, on a neighbouring problem;
# - **visible checks** right after it (`check(...)` from `uopc.checks`): each prints `ok: <what>`, or stops
#   with an AssertionError naming what is wrong, expected against got; `make check WEEK=<n>` runs them task by task;
# - **hidden tests** the grader runs after your whole notebook (`make grade NB=<your notebook>`), which score the
#   points below.
#
# | exercise | task name | points |
# |---|---|---|
# | 13.2 | bank conflicts | 2 |
# | 13.3a | fragment layout | 2 |
# | 13.3b | emulate one mma | 3 |
# | 14.2 | AdamW step | 3 |
# | 14.3 | count the parameters | 2 |
# | 14.2b | max's gradient | 2 |
#
# An exercise's number is the section of its chapter that it practises (not a place in the list of exercises at
# the chapter's end): 13.2 the bank conflicts of section 13.2, and the padding that Chapter 13's exercise 2 puts
# into `lower_local_tile`; 13.3a and 13.3b the fragment tables and the lane-by-lane mma of 13.3; 14.2 AdamW's
# update, written from Tensor ops in 14.2; 14.3 the parameters of 14.3's GPT, which Chapter 14's exercise 1 counts
# by hand; 14.2b, last, a piece in 14.2's way, with the gradient rule for tied maxima that PyTorch's max(dim) and
# uopc's max_pool2d follow (Chapter 9.8).
#
# Everything here runs on the CPU, with NumPy and uopc's CPU device: no GPU and no OpenCL device is needed. The
# whole notebook runs in well under a minute on two cores.

# %% [markdown]
# ## Setup
#
# `uopc.codegen.wmma` holds the hardware's fragment tables of `mma.sync.aligned.m16n8k16` (Chapter 13.3); `uopc.nn` and
# `uopc.optim` the GPT and its optimizers (Chapter 14).

# %%
import numpy as np
from uopc.codegen import wmma
from uopc.nn import GPT, GPTConfig
from uopc.optim import SGD, AdamW
from uopc.tensor import Tensor
from uopc.checks import check

hw = wmma.M16N8K16
rng = np.random.default_rng(0)

# %% tags=["hidden-setup"]
# the grader's side of the hidden tests (scripts/grader/solution_setup.py): record, raised and seeded for the probes;
# recorded, gradelib's checks and time_kernels for the judges. Grading splits each hidden test at `# JUDGE`: the probe
# runs in the sandbox after the student's cells, the judge in the grader's own process on the values it recorded.
import sys as _sys
from pathlib import Path as _Path
import uopc as _uopc
_sys.path.insert(0, str(_Path(_uopc.__file__).resolve().parents[1] / "scripts" / "grader"))
from solution_setup import gradelib, raised, record, recorded, seeded, time_kernels  # noqa: F401
from uopc.codegen import wmma as _wmma
from uopc.nn import GPT as _GPT, GPTConfig as _GPTConfig
from uopc.optim import AdamW as _AdamW
from uopc.tensor import Tensor as _Tensor


# %% [markdown]
# ## Exercise 13.2: bank conflicts
#
# Local memory has 32 banks, 4 bytes wide: float `i` lives in bank `i % 32`. A warp's read takes as many cycles as
# the most *distinct* addresses any one bank serves (work-items reading the same address share one read, a
# broadcast). In the 8 x 8 work-group of 13.2 a warp is `tid = ly * 8 + lx` for tid 0 to 31.
#
# **Worked example.** The B read of 13.2: work-item (ly, lx) reads `B[k * row + lx * 4]` (here k = 0).

# %%
def cycles(addresses: np.ndarray) -> int:
  """Cycles a warp's local-memory read takes: the most distinct addresses any one bank serves."""
  return max(len(set(addresses[addresses % 32 == bank].tolist())) for bank in range(32))


ly, lx = np.divmod(np.arange(32), 8)
print("B read:", cycles(lx * 4), "cycle")

# %% [markdown]
# **Your task.** The A read: work-item (ly, lx) reads `A[(ly * rows_per_item) * row + k]` (k = 0), where `row` is
# the number of floats a row of the A tile takes in local memory (`bk`, or more when padded). Write
# `a_read_cycles(row, rows_per_item)`, then `conflict_free_row(bk, rows_per_item)`: the smallest row of at least
# `bk` floats whose A read takes one cycle (the padding Exercise 2 of Chapter 13 puts into `lower_local_tile`).

# %%
# TASK: bank conflicts
def a_read_cycles(row: int, rows_per_item: int = 4) -> int:
  """Cycles the warp's read of A[(ly * rows_per_item) * row] takes, tid = ly * 8 + lx for tid 0 to 31."""
  ### BEGIN SOLUTION
  ly, _ = np.divmod(np.arange(32), 8)
  addresses = ly * rows_per_item * row
  return max(len(set(addresses[addresses % 32 == bank].tolist())) for bank in range(32))
  ### END SOLUTION


def conflict_free_row(bk: int, rows_per_item: int = 4) -> int:
  """The smallest row length (floats) of at least bk whose A read takes one cycle."""
  ### BEGIN SOLUTION
  # an odd row is conflict-free for up to 8 rows an item, so the search ends within 32 rows
  return next(row for row in range(bk, bk + 32) if a_read_cycles(row, rows_per_item) == 1)
  ### END SOLUTION


# %%
for row in (8, 9, 12, 16):
  print(f"A tile rows of {row:2d} floats: the A read takes {a_read_cycles(row)} cycles")
print("conflict-free rows: bk = 8 ->", conflict_free_row(8), "| bk = 16 ->", conflict_free_row(16),
      "| bk = 16, 2 rows an item ->", conflict_free_row(16, 2))
check("a_read_cycles(row) for rows of 8, 9, 12, 16 floats", [a_read_cycles(row) for row in (8, 9, 12, 16)],
      [4, 1, 2, 4])
check("conflict_free_row(bk) for bk = 8, 9, 16", [conflict_free_row(bk) for bk in (8, 9, 16)], [9, 9, 17])
check("conflict_free_row(16, rows_per_item=2)", conflict_free_row(16, 2), 17)

# %% [markdown]
# Expected: 4, 1, 2 and 4 cycles; 9, 17 and 17; three `ok` lines. The four values of ly read rows `4 * row` floats
# apart: with `row = 8` that is 32 floats, all in one bank; with one float of padding (9) the four rows start in
# banks 0, 4, 8 and 12.

# %% tags=["hidden-test"]
# POINTS: bank conflicts 1
### BEGIN HIDDEN TESTS
for _row, _rpi in ((8, 4), (9, 4), (12, 4), (16, 4), (10, 4), (16, 2), (8, 2), (33, 4), (64, 1)):
  record(f"a_read_cycles({_row}, {_rpi})", int(a_read_cycles(_row, _rpi)))
# JUDGE
for _row, _rpi, _want in ((8, 4, 4), (9, 4, 1), (12, 4, 2), (16, 4, 4), (10, 4, 1), (16, 2, 4), (8, 2, 2), (33, 4, 1),
                          (64, 1, 4)):
  gradelib.expect_equal(recorded[f"a_read_cycles({_row}, {_rpi})"], _want, f"a_read_cycles({_row}, {_rpi})")
### END HIDDEN TESTS

# %% tags=["hidden-test"]
# POINTS: bank conflicts 1
### BEGIN HIDDEN TESTS
for _bk, _rpi in ((8, 4), (16, 4), (16, 2), (9, 4), (32, 1), (12, 4)):
  record(f"conflict_free_row({_bk}, {_rpi})", int(conflict_free_row(_bk, _rpi)))
# JUDGE
for _bk, _rpi, _want in ((8, 4, 9), (16, 4, 17), (16, 2, 17), (9, 4, 9), (32, 1, 33), (12, 4, 13)):
  gradelib.expect_equal(recorded[f"conflict_free_row({_bk}, {_rpi})"], _want, f"conflict_free_row({_bk}, {_rpi})")
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 13.3a: fragment layout
#
# The table of 13.3 goes from a register to the tile: `hw.a.where(lane, i)` is the (row, column) that register
# element `i` of lane `lane` holds. A kernel that stores a tile, or a person reading a picture of it, needs the
# inverse: which lane, and which of its registers, holds a given element.
#
# **Worked example.** The accumulator C (16 x 8, 4 elements a lane): element i of lane `4g + t` sits at row
# `g + 8 * (i // 2)`, column `2t + i % 2`. So C[r][c] is held by group g = r % 8, place t = c // 2, in register
# i = 2 * (r // 8) + c % 2.

# %%
def c_owner(r: int, c: int) -> tuple[int, int]:
  """(lane, i): the lane of m16n8k16 holding C[r][c], and which of its 4 accumulators it is."""
  return 4 * (r % 8) + c // 2, 2 * (r // 8) + c % 2


print("C[9][5] is held by (lane, i) =", c_owner(9, 5), "; the table says that register holds",
      hw.c.where(*c_owner(9, 5)))
print("c_owner inverts the table everywhere:",
      all(hw.c.where(*c_owner(r, c)) == (r, c) for r in range(16) for c in range(8)))

# %% [markdown]
# **Your task.** `a_owner(r, c)`: the same for A (16 x 16, 8 elements a lane), whose table is row
# `g + 8 * ((i // 2) % 2)`, column `2t + i % 2 + 8 * (i // 4)`.

# %%
# TASK: fragment layout
def a_owner(r: int, c: int) -> tuple[int, int]:
  """(lane, i): the lane of m16n8k16 holding A[r][c], and which of its 8 registers it is."""
  ### BEGIN SOLUTION
  g, t = r % 8, (c % 8) // 2
  return 4 * g + t, c % 2 + 2 * (r // 8) + 4 * (c // 8)
  ### END SOLUTION


# %%
for r, c in ((0, 0), (0, 9), (8, 1), (15, 15)):
  print(f"A[{r}][{c}] is held by (lane, i) = {a_owner(r, c)}")
check("a_owner(r, c) for (0, 0), (0, 9), (8, 1), (15, 15)",
      [tuple(a_owner(r, c)) for r, c in ((0, 0), (0, 9), (8, 1), (15, 15))], [(0, 0), (0, 5), (0, 3), (31, 7)])
check("hw.a.where(*a_owner(r, c)) at [r, c] (it must give back (r, c) for every element of A)",
      np.array([[hw.a.where(*a_owner(r, c)) for c in range(16)] for r in range(16)]),
      np.stack(np.indices((16, 16)), axis=-1))

# %% [markdown]
# Expected: (0, 0), (0, 5), (0, 3), (31, 7) and two `ok` lines. Lanes 0, 1, 2, 3 (one group) share the rows g and g + 8:
# a group of four lanes holds two whole rows of A between them.

# %% tags=["hidden-test"]
# POINTS: fragment layout 1
### BEGIN HIDDEN TESTS
record("owners", [[[int(_x) for _x in a_owner(_r, _c)] for _c in range(16)] for _r in range(16)])
# JUDGE
_owners = recorded["owners"]
_want = {_wmma.M16N8K16.a.where(_lane, _i): (_lane, _i) for _lane in range(32) for _i in range(8)}
for (_r, _c), (_lane, _) in sorted(_want.items()):
  gradelib.expect_equal(_owners[_r][_c][0], _lane, f"a_owner({_r}, {_c})[0] (the lane holding A[{_r}][{_c}])")
### END HIDDEN TESTS

# %% tags=["hidden-test"]
# POINTS: fragment layout 1
### BEGIN HIDDEN TESTS
record("owners", [[[int(_x) for _x in a_owner(_r, _c)] for _c in range(16)] for _r in range(16)])
# JUDGE
_owners = recorded["owners"]
_want = {_wmma.M16N8K16.a.where(_lane, _i): (_lane, _i) for _lane in range(32) for _i in range(8)}
for (_r, _c), _owner in sorted(_want.items()):
  gradelib.expect_equal(tuple(_owners[_r][_c]), _owner,
                        f"a_owner({_r}, {_c}) (the lane and register holding A[{_r}][{_c}])")
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 13.3b: emulate one mma
#
# On OpenCL, which has no tensor cores, uopc emulates `mma.sync` lane by lane: every lane writes its registers
# where the table puts them, the warp computes the tile product, and every lane reads back the accumulators the
# table gives it.
#
# **Worked example.** A tile to fragments and back, with the table's positions (`op.positions()` is the
# (32, per_lane, 2) array of every register's (row, column)):

# %%
tile = np.arange(16 * 8, dtype=np.float32).reshape(16, 8)   # B of m16n8k16: 16 x 8
pos = hw.b.positions()
frags = tile[pos[..., 0], pos[..., 1]]                      # (32, 4): what each lane loads
print("lane 5 holds B elements", frags[5], "at", [tuple(int(x) for x in p) for p in pos[5]])
back = np.zeros_like(tile)
back[pos[..., 0], pos[..., 1]] = frags
print("back to the tile:", np.array_equal(back, tile), "| the same as wmma.to_fragments:",
      np.array_equal(frags, wmma.to_fragments(tile, hw.b)))

# %% [markdown]
# **Your task.** `mma_emulated(shape, a, b, c)`: what one `mma.sync` of `shape` does to the warp's registers,
# D = A @ B + C in float32, fragments in (`a` (32, shape.a.per_lane), `b`, `c`), fragments out ((32,
# shape.c.per_lane)). Use the positions of the tables, not `wmma.mma`: it is this answer, so while this week is graded
# it raises `ShortcutUnavailable`, and an `mma_emulated` that calls it scores 0 (a self-check against it in a cell of
# its own stops there and costs nothing).

# %%
# TASK: emulate one mma
def mma_emulated(shape: wmma.Shape, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
  """D's fragments: the lanes' A, B and C registers placed into their tiles, D = A @ B + C, D taken back out."""
  ### BEGIN SOLUTION
  tiles = []
  for frags, op in ((a, shape.a), (b, shape.b), (c, shape.c)):
    p = op.positions()
    t = np.zeros((op.rows, op.cols), np.float32)
    t[p[..., 0], p[..., 1]] = frags
    tiles.append(t)
  A, B, C = tiles
  p = shape.c.positions()
  return (A @ B + C)[p[..., 0], p[..., 1]]
  ### END SOLUTION


# %%
A, B = rng.standard_normal((16, 16)).astype(np.float16), rng.standard_normal((16, 8)).astype(np.float16)
C = rng.standard_normal((16, 8)).astype(np.float32)
d = mma_emulated(hw, wmma.to_fragments(A, hw.a), wmma.to_fragments(B, hw.b), wmma.to_fragments(C, hw.c))
D = wmma.from_fragments(d, hw.c)
check("mma_emulated(hw, ...).shape (lanes, registers)", d.shape, (32, 4))
check("D from mma_emulated's fragments, against A @ B + C", D, A.astype(np.float64) @ B.astype(np.float64) + C,
      atol=1e-4)

# %% [markdown]
# Expected: two `ok` lines.

# %% tags=["hidden-test"]
# POINTS: emulate one mma 1
# SHORTCUTS: uopc.codegen.wmma.mma
### BEGIN HIDDEN TESTS
_r = seeded(5)
_A, _B = _r.standard_normal((16, 16)).astype(np.float32), _r.standard_normal((16, 8)).astype(np.float32)
_fa, _fb, _fc = wmma.to_fragments(_A, hw.a), wmma.to_fragments(_B, hw.b), np.zeros((32, 4), np.float32)
record("D", mma_emulated(hw, _fa, _fb, _fc))
# float16 A and B fragments, as m16n8k16 takes them: D is still float32 (a product in the fragments' dtype is not)
_f16 = [wmma.to_fragments(_X.astype(np.float16), _op) for _X, _op in ((_A, hw.a), (_B, hw.b))]
record("D f16", mma_emulated(hw, *_f16, _r.standard_normal((32, 4)).astype(np.float32)))
# JUDGE
_r, _hw = seeded(5), _wmma.M16N8K16
_A, _B = _r.standard_normal((16, 16)).astype(np.float32), _r.standard_normal((16, 8)).astype(np.float32)
_fa, _fb, _fc = _wmma.to_fragments(_A, _hw.a), _wmma.to_fragments(_B, _hw.b), np.zeros((32, 4), np.float32)
gradelib.expect_close(recorded["D"], _wmma.mma(_hw, _fa, _fb, _fc),
                      "mma_emulated(m16n8k16, random A and B, C = 0): the D fragments (32 lanes x 4)")
_f16 = [_wmma.to_fragments(_X.astype(np.float16), _op) for _X, _op in ((_A, _hw.a), (_B, _hw.b))]
gradelib.expect_close(recorded["D f16"], _wmma.mma(_hw, *_f16, _r.standard_normal((32, 4)).astype(np.float32)),
                      "mma_emulated(m16n8k16, float16 A and B fragments, random C): the D fragments, computed in "
                      "float32 (not in the fragments' float16)")
### END HIDDEN TESTS

# %% tags=["hidden-test"]
# POINTS: emulate one mma 2
# SHORTCUTS: uopc.codegen.wmma.mma
### BEGIN HIDDEN TESTS
for _shape in (wmma.M16N8K16, wmma.M16N8K8_TF32):
  _r = seeded(_shape.k)
  _A = _r.standard_normal((_shape.m, _shape.k)).astype(np.float32)
  _B = _r.standard_normal((_shape.k, _shape.n)).astype(np.float32)
  _C = _r.standard_normal((_shape.m, _shape.n)).astype(np.float32)
  _fa, _fb, _fc = wmma.to_fragments(_A, _shape.a), wmma.to_fragments(_B, _shape.b), wmma.to_fragments(_C, _shape.c)
  record(_shape.name, mma_emulated(_shape, _fa, _fb, _fc))
# JUDGE
for _shape in (_wmma.M16N8K16, _wmma.M16N8K8_TF32):
  _r = seeded(_shape.k)
  _A = _r.standard_normal((_shape.m, _shape.k)).astype(np.float32)
  _B = _r.standard_normal((_shape.k, _shape.n)).astype(np.float32)
  _C = _r.standard_normal((_shape.m, _shape.n)).astype(np.float32)
  _fa, _fb = _wmma.to_fragments(_A, _shape.a), _wmma.to_fragments(_B, _shape.b)
  _fc = _wmma.to_fragments(_C, _shape.c)
  _got = recorded[_shape.name]
  try: gradelib.expect_close(_got, _wmma.mma(_shape, _fa, _fb, _fc),
                             f"mma_emulated({_shape.name}, random A, B, C): the D fragments (32 lanes x "
                             f"{_shape.c.per_lane})")
  except AssertionError as _e:
    _no_c = _wmma.mma(_shape, _fa, _fb, np.zeros_like(_fc))
    if np.shape(_got) == _no_c.shape and np.allclose(np.asarray(_got, np.float64), _no_c, atol=1e-4):
      raise AssertionError(f"{_e}. It is A @ B: the accumulator C was not added") from None
    raise
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 14.2: AdamW step
#
# uopc's optimizers build each step as one plan of lazy Tensors; every optimized path keeps a NumPy reference
# beside it, and the tests compare the two.
#
# **Worked example.** SGD with momentum (PyTorch's): b <- mu b + g, then p <- p - lr b. One NumPy step, checked for
# three steps against `uopc.optim.SGD` on a float64 parameter whose loss `sum(p * w)` has the gradient w.

# %%
def sgd_momentum_step(p, g, b, lr, momentum):
  """One SGD step with momentum: (new p, new b)."""
  b = momentum * b + g
  return p - lr * b, b


p0, w = rng.standard_normal(6), rng.standard_normal(6)
p = Tensor(p0.copy())
opt = SGD([p], lr=0.1, momentum=0.9)
mine, b = p0.copy(), np.zeros(6)
for step in range(3):
  loss = (p * Tensor(w)).sum()
  opt.zero_grad(); loss.backward(); opt.step(loss)
  mine, b = sgd_momentum_step(mine, w, b, 0.1, 0.9)
print("three SGD steps match uopc.optim.SGD:", np.allclose(p.numpy(), mine, rtol=1e-12, atol=1e-12))

# %% [markdown]
# **Your task.** `adamw_step(p, g, m, v, t, lr, betas, eps, weight_decay)`: one step of AdamW (decoupled weight
# decay, PyTorch's) at step t (1 for the first), returning (new p, new m, new v):
# m <- b1 m + (1 - b1) g, v <- b2 v + (1 - b2) g^2, then
# p <- p (1 - lr wd) - lr (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps).
# The divisions by 1 - b^t are the bias corrections: m and v start at zero, so both are biased towards zero in the
# first steps. v's bias is the larger (1 - b2 is smaller than 1 - b1), so without the corrections the first step
# would be too large, lr (1 - b1) / sqrt(1 - b2) = 3.16 lr for (0.9, 0.999), not lr (Kingma & Ba, section 3).
# uopc holds this answer twice, `uopc.optim.AdamW` and `uopc.optim.adamw_step_numpy` (its NumPy reference): while this
# week is graded both raise `ShortcutUnavailable`, so an `adamw_step` that calls either scores 0; the check below,
# against `AdamW`, stops there at grading and costs nothing.

# %%
# TASK: AdamW step
def adamw_step(p, g, m, v, t: int, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
               weight_decay: float = 0.01):
  """One AdamW step at step t (1-based): (new p, new m, new v)."""
  ### BEGIN SOLUTION
  b1, b2 = betas
  m = b1 * m + (1 - b1) * g
  v = b2 * v + (1 - b2) * g * g
  mhat, vhat = m / (1 - b1 ** t), v / (1 - b2 ** t)
  return p * (1 - lr * weight_decay) - lr * mhat / (np.sqrt(vhat) + eps), m, v
  ### END SOLUTION


# %%
p = Tensor(p0.copy())
opt = AdamW([p], lr=0.1, betas=(0.9, 0.99), weight_decay=0.1)
mine, m, v = p0.copy(), np.zeros(6), np.zeros(6)
for t in range(1, 4):
  loss = (p * Tensor(w)).sum()
  opt.zero_grad(); loss.backward(); opt.step(loss)
  mine, m, v = adamw_step(mine, w, m, v, t, lr=0.1, betas=(0.9, 0.99), weight_decay=0.1)
check("p after three adamw_step calls, against uopc.optim.AdamW", mine, p.numpy(), rtol=1e-10, atol=1e-12)
first, _, _ = adamw_step(p0, w, np.zeros(6), np.zeros(6), 1, lr=0.1, weight_decay=0.0)
check("the first step p0 - p1 (lr = 0.1, no weight decay): lr against the gradient's sign", p0 - first,
      0.1 * np.sign(w), rtol=1e-6)

# %% [markdown]
# Expected: two `ok` lines. At t = 1 the corrected m / sqrt(v) is g / |g|: Adam's first step has the size lr whatever
# the gradient's scale.

# %% tags=["hidden-test"]
# POINTS: AdamW step 1
# SHORTCUTS: uopc.optim.AdamW, uopc.optim.adamw_step_numpy
### BEGIN HIDDEN TESTS
_r = seeded(21)
_p, _g = _r.standard_normal((3, 4)), _r.standard_normal((3, 4))
_m, _v = 0.1 * _r.standard_normal((3, 4)), _r.uniform(0.01, 0.1, (3, 4))
for _t in (1, 2, 10):
  record(f"t={_t}", tuple(adamw_step(_p, _g, _m, _v, _t, lr=3e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)))
# JUDGE
_r = seeded(21)
_p, _g = _r.standard_normal((3, 4)), _r.standard_normal((3, 4))
_m, _v = 0.1 * _r.standard_normal((3, 4)), _r.uniform(0.01, 0.1, (3, 4))
_args = "a (3, 4) parameter, lr=3e-3, betas=(0.9, 0.95), weight_decay=0.1"
for _t in (1, 2, 10):
  _got = recorded[f"t={_t}"]
  assert isinstance(_got, tuple) and len(_got) == 3, f"adamw_step returned {_got!r:.60}, expected (p, m, v)"
  gradelib.expect_close(_got[1], 0.9 * _m + 0.1 * _g, f"adamw_step({_args}, t={_t}): new m", tol=1e-10)
  gradelib.expect_close(_got[2], 0.95 * _v + 0.05 * _g * _g, f"adamw_step({_args}, t={_t}): new v", tol=1e-10)
### END HIDDEN TESTS

# %% tags=["hidden-test"]
# POINTS: AdamW step 2
# SHORTCUTS: uopc.optim.AdamW, uopc.optim.adamw_step_numpy
### BEGIN HIDDEN TESTS
_r = seeded(21)
_p, _g = _r.standard_normal((3, 4)), _r.standard_normal((3, 4))
_m, _v = 0.1 * _r.standard_normal((3, 4)), _r.uniform(0.01, 0.1, (3, 4))
for _t in (1, 2, 10):
  record(f"t={_t}", adamw_step(_p, _g, _m, _v, _t, lr=3e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)[0])
# a large eps, where putting it inside the square root (sqrt(v_hat + eps)) changes the step by far more than tol
record("eps=0.01", adamw_step(_p, _g, _m, _v, 2, lr=3e-3, betas=(0.9, 0.95), eps=1e-2, weight_decay=0.1)[0])
_mine, _m5, _v5, _w = seeded(22).standard_normal(5), np.zeros(5), np.zeros(5), seeded(23).standard_normal(5)
for _t in range(1, 6):
  _mine, _m5, _v5 = adamw_step(_mine, _w, _m5, _v5, _t, lr=0.05, betas=(0.8, 0.9), weight_decay=0.2)
  record(f"step {_t}", _mine)
# JUDGE
_r = seeded(21)
_p, _g = _r.standard_normal((3, 4)), _r.standard_normal((3, 4))
_m, _v = 0.1 * _r.standard_normal((3, 4)), _r.uniform(0.01, 0.1, (3, 4))
_args = "a (3, 4) parameter, lr=3e-3, betas=(0.9, 0.95), weight_decay=0.1"
for _t in (1, 2, 10):
  _mhat, _vhat = (0.9 * _m + 0.1 * _g) / (1 - 0.9 ** _t), (0.95 * _v + 0.05 * _g * _g) / (1 - 0.95 ** _t)
  _got = recorded[f"t={_t}"]
  _mt, _vt = 0.9 * _m + 0.1 * _g, 0.95 * _v + 0.05 * _g * _g
  _faults = {"the bias corrections are missing (m and v used, not m / (1 - b1^t) and v / (1 - b2^t))":
               _p * (1 - 3e-3 * 0.1) - 3e-3 * _mt / (np.sqrt(_vt) + 1e-8),
             "the weight decay is missing (p (1 - lr wd) is the decoupled decay)":
               _p - 3e-3 * _mhat / (np.sqrt(_vhat) + 1e-8)}
  _faults["eps is inside the square root (sqrt(v_hat + eps), where AdamW has sqrt(v_hat) + eps)"] = \
    _p * (1 - 3e-3 * 0.1) - 3e-3 * _mhat / np.sqrt(_vhat + 1e-8)
  _faults["the decay is applied after the update ((p - lr m_hat / (sqrt(v_hat) + eps)) (1 - lr wd), where AdamW "
          "decays the p it started from)"] = (_p - 3e-3 * _mhat / (np.sqrt(_vhat) + 1e-8)) * (1 - 3e-3 * 0.1)
  try: gradelib.expect_close(_got, _p * (1 - 3e-3 * 0.1) - 3e-3 * _mhat / (np.sqrt(_vhat) + 1e-8),
                             f"adamw_step({_args}, t={_t}): new p", tol=1e-10)
  except AssertionError as _e:
    _fault = next((_f for _f, _x in _faults.items() if np.shape(_got) == np.shape(_x)
                   and np.allclose(np.asarray(_got, np.float64), _x, rtol=1e-9, atol=1e-12)), None)
    if _fault is None: raise
    raise AssertionError(f"{_e}. It is what AdamW gives when {_fault}") from None
# eps = 0.01: where eps goes decides the step
_mhat, _vhat = (0.9 * _m + 0.1 * _g) / (1 - 0.9 ** 2), (0.95 * _v + 0.05 * _g * _g) / (1 - 0.95 ** 2)
_got, _want = recorded["eps=0.01"], _p * (1 - 3e-3 * 0.1) - 3e-3 * _mhat / (np.sqrt(_vhat) + 1e-2)
try: gradelib.expect_close(_got, _want, "adamw_step(a (3, 4) parameter, t=2, eps=0.01): new p", tol=1e-10)
except AssertionError as _e:
  _inside = _p * (1 - 3e-3 * 0.1) - 3e-3 * _mhat / np.sqrt(_vhat + 1e-2)
  if np.shape(_got) == _inside.shape and np.allclose(np.asarray(_got, np.float64), _inside, rtol=1e-9, atol=1e-12):
    raise AssertionError(f"{_e}. It is what AdamW gives when eps is inside the square root (sqrt(v_hat + eps), where "
                         f"AdamW has sqrt(v_hat) + eps)") from None
  raise
# the grader's own uopc.optim.AdamW, step by step
_pt, _w = _Tensor(seeded(22).standard_normal(5)), seeded(23).standard_normal(5)
_opt = _AdamW([_pt], lr=0.05, betas=(0.8, 0.9), weight_decay=0.2)
for _t in range(1, 6):
  _loss = (_pt * _Tensor(_w)).sum()
  _opt.zero_grad(); _loss.backward(); _opt.step(_loss)
  gradelib.expect_close(recorded[f"step {_t}"], _pt.numpy(), f"step {_t} of adamw_step against uopc.optim.AdamW "
                        "(lr=0.05, betas=(0.8, 0.9), weight_decay=0.2): the parameter", tol=1e-9)
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 14.3: count the parameters
#
# **Worked example.** A Linear layer from `n_in` to `n_out` features holds an (n_out, n_in) weight and, with bias,
# n_out more; a LayerNorm of C features a weight of C and, with bias, C more. uopc's modules agree:

# %%
from uopc.nn import LayerNorm, Linear


def linear_parameters(n_in: int, n_out: int, bias: bool = True) -> int: return n_in * n_out + (n_out if bias else 0)


print("Linear(64, 256):", linear_parameters(64, 256), "=", Linear(64, 256).num_parameters(),
      "| LayerNorm(64):", LayerNorm(64).num_parameters())

# %% [markdown]
# **Your task.** `gpt_parameters(cfg)`: the parameter count of `GPT(cfg)` from its configuration (Chapter 14.3):
# token and position embeddings; per block two LayerNorms, the attention's `qkv` (C -> 3C) and `proj` (C -> C)
# and the MLP's `fc` (C -> 4C) and `proj` (4C -> C); the final LayerNorm; and a head (V x C, no bias) only when
# the weights are not tied. `cfg.bias` says whether the Linears and LayerNorms have biases.
# From `cfg` alone: while this week is graded `GPT` and a module's `parameters()` and `num_parameters()` raise
# `ShortcutUnavailable` (they are this answer), so a `gpt_parameters` that builds the model scores 0; the checks
# here, which do, stop at grading and cost nothing.

# %%
# TASK: count the parameters
def gpt_parameters(cfg: GPTConfig) -> int:
  """The number of parameters of GPT(cfg), from cfg alone."""
  ### BEGIN SOLUTION
  C, bias = cfg.n_embd, cfg.bias
  layernorm = C + (C if bias else 0)
  block = (2 * layernorm + linear_parameters(C, 3 * C, bias) + linear_parameters(C, C, bias)
           + linear_parameters(C, 4 * C, bias) + linear_parameters(4 * C, C, bias))
  head = 0 if cfg.tie_weights else cfg.vocab_size * C
  return cfg.vocab_size * C + cfg.block_size * C + cfg.n_layer * block + layernorm + head
  ### END SOLUTION


# %%
cfg = GPTConfig(vocab_size=76, block_size=32, n_layer=1, n_head=2, n_embd=64)   # Chapter 14's model
print(f"{gpt_parameters(cfg)} parameters counted, GPT(cfg) has {GPT(cfg, seed=0).num_parameters()}")
untied = GPTConfig(vocab_size=76, block_size=32, n_layer=1, n_head=2, n_embd=64, tie_weights=False)
print(f"an untied head adds {gpt_parameters(untied) - gpt_parameters(cfg)}")
check("gpt_parameters(Chapter 14's config)", gpt_parameters(cfg), GPT(cfg, seed=0).num_parameters())
check("gpt_parameters(the same, tie_weights=False)", gpt_parameters(untied), GPT(untied, seed=0).num_parameters())

# %% [markdown]
# Expected: 57024 both times, and 4864 = 76 x 64 for the untied head (the head is a V x C matrix, no bias).

# %% tags=["hidden-test"]
# POINTS: count the parameters 1
# SHORTCUTS: uopc.nn.layers.Module.num_parameters, uopc.nn.layers.Module.parameters, uopc.nn.gpt.GPT
### BEGIN HIDDEN TESTS
_configs = [dict(), dict(n_layer=3, n_embd=32), dict(bias=False), dict(bias=False, n_layer=2)]
for _kw in _configs: record(f"{_kw}", int(gpt_parameters(GPTConfig(**_kw))))
# JUDGE
# counted by the grader's own GPT
_configs = [dict(), dict(n_layer=3, n_embd=32), dict(bias=False), dict(bias=False, n_layer=2)]
for _kw in _configs:
  gradelib.expect_equal(recorded[f"{_kw}"], _GPT(_GPTConfig(**_kw), seed=0).num_parameters(),
                        f"gpt_parameters(GPTConfig({', '.join(f'{_k}={_v}' for _k, _v in _kw.items())}))")
### END HIDDEN TESTS

# %% tags=["hidden-test"]
# POINTS: count the parameters 1
# SHORTCUTS: uopc.nn.layers.Module.num_parameters, uopc.nn.layers.Module.parameters, uopc.nn.gpt.GPT
### BEGIN HIDDEN TESTS
_configs = [dict(tie_weights=False), dict(vocab_size=11, block_size=6, n_layer=2, n_embd=8, tie_weights=False),
            dict(bias=False, tie_weights=False), dict(n_layer=int(seeded(21).integers(1, 4)), tie_weights=False)]
for _kw in _configs: record(f"{_kw}", int(gpt_parameters(GPTConfig(**_kw))))
# JUDGE
# counted by the grader's own GPT
_configs = [dict(tie_weights=False), dict(vocab_size=11, block_size=6, n_layer=2, n_embd=8, tie_weights=False),
            dict(bias=False, tie_weights=False), dict(n_layer=int(seeded(21).integers(1, 4)), tie_weights=False)]
for _kw in _configs:
  gradelib.expect_equal(recorded[f"{_kw}"], _GPT(_GPTConfig(**_kw), seed=0).num_parameters(),
                        f"gpt_parameters(GPTConfig({', '.join(f'{_k}={_v}' for _k, _v in _kw.items())}))")
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 14.2b: max's gradient
#
# **Worked example.** Where a row's maximum is tied, its gradient has a rule to choose. `x.max(axis)` follows
# `amax`'s (Chapter 9.8's table): the gradient is shared equally among the tied maxima. Written out from Tensor ops,
# as 14.2 writes its pieces: a mask of every maximum (a comparison: a constant, no gradient flows through it), each
# one's share, and a sum that weighs x by the shares. Its values and gradient are those of `x.max(axis)`:

# %%
from uopc.dtype import dtypes


def max_shared(x: Tensor, axis: int) -> Tensor:
  """x.max(axis), with amax's tie rule written out: each output's gradient shared equally among its tied maxima."""
  top = (x == x.max(axis, keepdim=True)).cast(dtypes.f32)      # 1 at every maximum of the row
  share = top / top.sum(axis, keepdim=True)                     # 1/k at each of k tied maxima
  return (top > 0).where(x * share, 0.0).sum(axis)              # where, not top * x: 0 * -inf would be NaN


def grad_of(fn, x: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """(fn(x) as an array, the gradient of sum(fn(x) * w) with respect to x)."""
  xt = Tensor(x, requires_grad=True)
  out = fn(xt)
  (out * Tensor(w)).sum().backward()
  return out.numpy(), xt.grad.numpy()


ties = np.array([[1, 3, 3, 2], [5, 1, 5, 5], [-np.inf, 0, 1, -np.inf]], np.float32)
w3 = np.array([1.0, 3.0, 2.0], np.float32)
for name, fn in (("max_shared", lambda t: max_shared(t, 1)), ("x.max", lambda t: t.max(1))):
  values, grad = grad_of(fn, ties, w3)
  print(f"{name}: values {values}, gradient\n{grad}")

# %% [markdown]
# **Your task.** `max_first(x, axis)`: the values of `x.max(axis)`, with PyTorch's tie rule for the gradient of
# `torch.max(x, dim)`, which uopc's `max_pool2d` follows too (Chapter 9.8): each output's gradient goes *whole* to
# the first maximum of its row, the index `x.argmax(axis)` returns; the other tied maxima get nothing. From Tensor
# ops, for an axis of any tensor; a row may hold -inf.

# %%
# TASK: max's gradient
def max_first(x: Tensor, axis: int) -> Tensor:
  """x.max(axis); each output's gradient goes whole to its first maximum (the index x.argmax(axis) returns)."""
  ### BEGIN SOLUTION
  shape = [1] * len(x.shape)
  shape[axis] = x.shape[axis]
  first = Tensor.arange(x.shape[axis]).reshape(*shape) == x.argmax(axis, keepdim=True)   # one-hot: a constant
  return first.where(x, 0.0).sum(axis)
  ### END SOLUTION


# %%
# ties in rows 0, 1 (three maxima) and 3; row 2 holds -inf; w weighs each row's output differently
x_ties = np.array([[1, 3, 3, 2], [5, 1, 5, 5], [-np.inf, 0, 1, -np.inf], [-3, -1, -2, -1]], np.float32)
w = np.array([1.0, 3.0, 2.0, 4.0], np.float32)
first_grad = np.zeros_like(x_ties)
first_grad[np.arange(4), x_ties.argmax(1)] = w
values, grad = grad_of(lambda t: max_first(t, 1), x_ties, w)
print(f"values {values}, gradient\n{grad}")
check("max_first(x_ties, 1): values", values, x_ties.max(1))
check("max_first(x_ties, 1): the gradient of sum(out * w), each row's w[i] whole at its first maximum", grad,
      first_grad)
values, grad = grad_of(lambda t: max_first(t, 0), np.ascontiguousarray(x_ties.T), w)
check("max_first(x_ties.T, 0): the gradient along axis 0", grad, first_grad.T)

# %% [markdown]
# Expected: three `ok` lines: values `[3 5 1 -1]`, and in each row of the gradient one nonzero, that row's w at its
# first maximum (where `x.max` shares it: 0.5, 1 and 2 at each tied maximum of rows 0, 1 and 3).

# %% tags=["hidden-test"]
# POINTS: max's gradient 2
# SHORTCUTS: uopc.mixin.windows._max_pool_grad
### BEGIN HIDDEN TESTS
_cases = [("ties of 0, 1, 2", (6, 9), 1), ("ties along axis 0", (7, 5), 0), ("a 3-D tensor, last axis", (2, 3, 4), 2),
          ("rows all equal", (3, 4), 1), ("-inf in every row", (4, 6), 1)]


def _input(_k, _shape, _what):
  _x = seeded(30, _k).integers(0, 3, _shape).astype(np.float32)
  if _what == "rows all equal": _x[:] = 2.0
  if _what == "-inf in every row": _x[:, ::2] = -np.inf
  return _x


for _k, (_what, _shape, _axis) in enumerate(_cases):
  _xt = Tensor(_input(_k, _shape, _what), requires_grad=True)
  _out = max_first(_xt, _axis)
  _wt = seeded(31, _k).uniform(0.5, 2.0, np.delete(np.array(_shape), _axis)).astype(np.float32)
  (_out * Tensor(_wt)).sum().backward()
  record(f"{_what}: values", _out.numpy())
  record(f"{_what}: gradient", _xt.grad.numpy())
# JUDGE
_cases = [("ties of 0, 1, 2", (6, 9), 1), ("ties along axis 0", (7, 5), 0), ("a 3-D tensor, last axis", (2, 3, 4), 2),
          ("rows all equal", (3, 4), 1), ("-inf in every row", (4, 6), 1)]


def _input(_k, _shape, _what):
  _x = seeded(30, _k).integers(0, 3, _shape).astype(np.float32)
  if _what == "rows all equal": _x[:] = 2.0
  if _what == "-inf in every row": _x[:, ::2] = -np.inf
  return _x


for _k, (_what, _shape, _axis) in enumerate(_cases):
  _x = _input(_k, _shape, _what)
  _wt = seeded(31, _k).uniform(0.5, 2.0, np.delete(np.array(_shape), _axis)).astype(np.float32)
  _where = f"max_first(x, {_axis}) on {_what} {_shape}"
  gradelib.expect_close(recorded[f"{_what}: values"], _x.max(_axis), f"{_where}: values", tol=1e-6)
  _w = np.expand_dims(_wt, _axis)
  _first = np.expand_dims(_x.argmax(_axis), _axis) == np.arange(_shape[_axis]).reshape(
    [-1 if _a == _axis else 1 for _a in range(len(_shape))])
  _top = _x == _x.max(_axis, keepdims=True)
  _got = recorded[f"{_what}: gradient"]
  try: gradelib.expect_close(_got, np.where(_first, _w, 0.0), f"{_where}: the gradient of sum(out * w)", tol=1e-6)
  except AssertionError as _e:
    _shared = np.where(_top, _w / _top.sum(_axis, keepdims=True), 0.0)   # amax's rule, x.max's
    if np.shape(_got) == _shared.shape and np.allclose(np.asarray(_got, np.float64), _shared, atol=1e-6):
      raise AssertionError(f"{_e}. It is the gradient shared equally among the tied maxima (amax's rule, which "
                           f"x.max(axis) follows); PyTorch's max(dim) gives it whole to the first maximum") from None
    raise
### END HIDDEN TESTS
