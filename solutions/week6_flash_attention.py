# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # Week 6 assignment: fusion, recompute and flash attention
#
# The exercises of Chapter 11, solved in uopc. Each exercise has
# - a **task cell** (it starts with `# TASK: <name>`): in the student version the solution is replaced by
#   `raise NotImplementedError("<name>")`. Replace that line with your code; keep the function names and
#   signatures, the grader calls them;
# - where a task is hard to start, a **worked example** before it, solved, on a neighbouring or smaller problem;
# - **visible checks** right after it (`check(...)` from `uopc.checks`): each prints `ok: <what>`, or stops
#   with an AssertionError naming what is wrong, expected against got; `make check WEEK=<n>` runs them task by task.
#   An **Expected:** line after them says what a correct answer prints;
# - **hidden tests** the grader runs after your whole notebook (`make grade NB=<your notebook>`), which score the
#   points below. A *structure* point (the loops a kernel makes, what a plan stores) counts only once the task's
#   values are right. Written answers (strings shown with `show(ANSWER)`) are read by a person, not scored.
#
# | exercise | task name | points |
# |---|---|---|
# | ★ 1 | size the matrices | 1 |
# | ★ 2 | count the passes | 3 |
# | ★ 3 | merge two states | 2 |
# | ★★ 4 | causal mask | 3 |
# | ★★ 5 | query blocking | 3 |
# | ★★ 6 | flash-decoding | optional, not graded |
# | ★★ 7 | upcast the head | 2 |
# | ★★ 8 | find the bug | 2 |
# | ★★★ 9 | backward with recompute | optional, not graded |
#
# Exercises 6 and 9 are for those who want more: 6 applies Exercise 3's merge rule with the loop IR of Exercise 5,
# and 9 goes beyond the chapter's forward pass. Nothing of them is graded and no later task needs them, so the
# week grades ten tasks (seven here, three of Chapter 12).
#
# The grader stops any cell that runs for more than two minutes; the whole notebook runs in well under three
# minutes on two cores. Timings are best-of-k after a warm-up on the machine below, with the variants of one
# comparison taking turns. Other jobs share its cores, so they are noisy: the notebook prints ratios measured in one
# run and never asserts a time.

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
print(f"CPU:      {cpu_model()}, {os.cpu_count()} cores (OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')})")
print(f"compiler: {subprocess.run([cc, '--version'], capture_output=True, text=True).stdout.splitlines()[0]}")
print(f"date:     {datetime.date.today()}")

# %% tags=["hidden-setup"]
# the grader's side of the hidden tests (scripts/grader/solution_setup.py): record, raised and seeded for the probes;
# recorded, gradelib's checks and time_kernels for the judges. Grading splits each hidden test at `# JUDGE`: the probe
# runs in the sandbox after the student's cells, the judge in the grader's own process on the values it recorded.
# Placed before the setup cell: in a solution run under nbval, whose kernel keeps no input history, `raises` finds
# the notebook's definitions (qkv, ref_attention, check_online_kernel, ...) among the cells run after this one.
import sys as _sys
from pathlib import Path as _Path
import uopc as _uopc
_sys.path.insert(0, str(_Path(_uopc.__file__).resolve().parents[1] / "scripts" / "grader"))
from solution_setup import gradelib, raised, record, recorded, seeded, time_kernels  # noqa: F401
from solution_setup import launch_cl, peak_memory, raises, run_c  # noqa: F401


def _qkv(N: int, D: int, *key: int) -> tuple:
  """The judges' inputs: the probe's, made again from the grader's seed."""
  r = seeded(*key)
  return tuple(r.standard_normal((N, D)).astype(np.float32) for _ in range(3))


# %% [markdown]
# ## Setup
#
# The chapter's code lives in `examples/flash_attention.py` (the book's listing, unchanged). `examples/` is not
# a package, so `uopc.book.load_example` loads the file by its path, found from the installed `uopc` (this
# works from any folder the notebook runs in). `ref_attention` is the NumPy reference every kernel is checked
# against, in float64.

# %%
import math
import time
import numpy as np
from IPython.display import Markdown, display
from uopc.uop import UOp, Ops, ParamArg, AxisType, Pat, graph_rewrite, sink, range_, substitute, base_alloc
from uopc.dtype import dtypes
from uopc.render_c import render_c
from uopc.runtime import Program
from uopc.symbolic import simplify
from uopc.tensor import Tensor, gradient
from uopc.kernelize import Plan, make_plan, realize, stage_broadcast_compute
from uopc.book import flash_opt, load_example
from uopc.checks import check, check_raises

fa = load_example("flash_attention")
attention, online_attention_ir, FlashOpt, LOG2E = fa.attention, fa.online_attention_ir, fa.FlashOpt, fa.LOG2E
f32 = dtypes.f32


def qkv(N: int, D: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """Random queries, keys and values, (N, D) float32 each."""
  rng = np.random.default_rng(seed)
  return tuple(rng.standard_normal((N, D)).astype(np.float32) for _ in range(3))


def ref_attention(q, k, v, keep=None) -> np.ndarray:
  """softmax(q k^T / sqrt(D)) v in float64; keep (Nq, Nk) bool: the scores that take part (None: all)."""
  q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
  s = q @ k.T / math.sqrt(q.shape[-1])
  if keep is not None: s = np.where(keep, s, -np.inf)
  p = np.exp(s - s.max(-1, keepdims=True))
  return (p / p.sum(-1, keepdims=True)) @ v


def compile_ir(ir: UOp, name: str) -> Program:
  """A loop program as a compiled C function (compiled once per source, then loaded from the disk cache)."""
  return Program(render_c(ir, name), name)


def run_attention_kernel(build_ir, q, k, v, name: str = "attn") -> np.ndarray:
  """The kernel build_ir(N, D) (parameters q, k, v, out; N x D float32 each) applied to q, k, v."""
  N, D = q.shape
  out = np.zeros(N * D, np.float32)
  compile_ir(build_ir(N, D), name)(q, k, v, out)
  return out.reshape(N, D)


def matches(a, b, tol: float = 1e-4) -> bool:
  """a matches b to tol (absolute and relative), with no NaN anywhere."""
  return bool(np.allclose(a, b, atol=tol, rtol=tol))


def show(markdown: str) -> None: display(Markdown(markdown))


def best_times(fns: dict, reps: int = 5) -> dict:
  """Best-of-reps seconds of each function, after one warm-up call each. The functions take turns, so a change
  in the machine's load (other jobs share its cores) hits every variant alike."""
  for fn in fns.values(): fn()
  best = dict.fromkeys(fns, math.inf)
  for _ in range(reps):
    for name, fn in fns.items():
      t0 = time.perf_counter(); fn(); best[name] = min(best[name], time.perf_counter() - t0)
  return best


q, k, v = qkv(256, 64)
print("online_attention_ir matches NumPy:", matches(run_attention_kernel(online_attention_ir, q, k, v, "flash"),
                                                  ref_attention(q, k, v)))

# %% [markdown]
# ## Exercise 1 (★): size the matrices
#
# How large are S and P for N = 8192 in f32, per head? A GPT-style model with 12 heads, batch 8: how much memory
# would unfused attention need for one layer's S? Write `score_bytes`.

# %%
# TASK: size the matrices
def score_bytes(N: int, heads: int = 1, batch: int = 1, itemsize: int = 4) -> int:
  """Bytes of the score matrix S (N x N per head and sequence) for `heads` heads and `batch` sequences."""
  ### BEGIN SOLUTION
  return N * N * itemsize * heads * batch
  ### END SOLUTION


# %%
check("score_bytes(1024)", score_bytes(1024), 4 * 2**20)
check("score_bytes(1024, heads=2, batch=3, itemsize=2) (12 MiB)", score_bytes(1024, heads=2, batch=3, itemsize=2),
      12 * 2**20)
print(f"S per head at N = 8192:       {score_bytes(8192) / 1e6:7.1f} MB (P as much again)")
print(f"S for 12 heads, batch 8:      {score_bytes(8192, heads=12, batch=8) / 1e9:7.1f} GB")
print(f"Q, K, V and O per head:       {4 * 8192 * 64 * 4 / 1e6:7.1f} MB (D = 64)")

# %% [markdown]
# Expected: two `ok` lines, then the three sizes (S for one head at N = 8192 is hundreds of MB, for the whole layer
# tens of GB; Q, K, V and O of a head are a few MB).

# %% [markdown] tags=["answer"]
# 268.4 MB per head for S alone: 96 head-sequences make 25.8 GB for one layer, against 8.4 MB for Q, K, V and O
# of a head. Nobody materializes S at long context.

# %% tags=["hidden-test"]
# POINTS: size the matrices 1
### BEGIN HIDDEN TESTS
_n = int(seeded(1).integers(100, 20000))
for _args in ((8192, 1, 1, 4), (8192, 12, 8, 4), (1000, 1, 1, 2), (_n, 3, 2, 2)):
  record(f"{_args}", score_bytes(*_args))
# JUDGE
_n = int(seeded(1).integers(100, 20000))
for _args, _what in (((8192, 1, 1, 4), "score_bytes(8192)"), ((8192, 12, 8, 4), "score_bytes(8192, heads=12, batch=8)"),
                     ((1000, 1, 1, 2), "score_bytes(1000, itemsize=2)"),
                     ((_n, 3, 2, 2), f"score_bytes({_n}, heads=3, batch=2, itemsize=2)")):
  _N, _heads, _batch, _size = _args
  gradelib.expect_equal(recorded[f"{_args}"], _N * _N * _size * _heads * _batch, _what)
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 2 (★): count the passes
#
# Predict the number of full passes over the keys (each with a D = 64 dot product) that the fully fused kernel
# of 11.4 makes per query row with FlashOpt's upcast set to 8, 16, 32 and 64. Which one needs the most registers?
#
# Then check the prediction against the generated C. `flash_opt(upcast)` is FlashOpt with another upcast, and
# `fused_plan(N, D, upcast)` the plan of fused attention with it; its last kernel is the fused one. Write
# `count_key_passes(src, n_keys)`, which reads a kernel's C: a pass over the keys is a `for` loop of length
# `n_keys` inside the row loop, and it runs once per iteration of the loops between the row loop and it.
# The row loop is N long too, but it is the outermost loop, not a pass. Pick N different from D and from D / upcast
# (the output loop's trips), so that no other loop has the keys' length.

# %%
def fused_plan(N: int, D: int, upcast: int = 16) -> Plan:
  """The plan of attention with fuse_reduce=True and flash_opt(upcast)."""
  q, k, v = (Tensor(x) for x in qkv(N, D))
  return make_plan([attention(q, k, v).uop], fuse_reduce=True, opt=flash_opt(upcast))


src = fused_plan(256, 64, 16).kernels[-1].src
print("\n".join(line for line in src.splitlines() if "for (" in line))

# %% [markdown]
# **Worked example.** Passes counted by hand in a small C source of the same shape, with 48 keys. The row loop
# (`ridx0`) is the outermost; the key loop `ridx2` sits inside `ridx1`, which makes 2 trips, so it runs twice per
# row; `ridx3` runs once per row; `ridx4` (length 16) is not a key loop. Three passes over the keys per row.
# The header regex below reads each loop's variable and length, which is where `count_key_passes` starts.

# %%
toy = """void toy(float* x) {
  for (int ridx0 = 0; ridx0 < 48; ridx0++) {
    for (int ridx1 = 0; ridx1 < 2; ridx1++) {
      for (int ridx2 = 0; ridx2 < 48; ridx2++) {
        x[ridx0] += 1.0f;
      }
    }
    for (int ridx3 = 0; ridx3 < 48; ridx3++) {
      for (int ridx4 = 0; ridx4 < 16; ridx4++) {
        x[ridx0] += 2.0f;
      }
    }
  }
}"""
header = re.compile(r"for \(int (ridx\d+) = 0; \1 < (\d+); \1\+\+\)")
for line in toy.splitlines():
  if m := header.search(line): print(f"{line.find('for') * ' '}{m.group(1)} of length {m.group(2)}")
passes_by_hand = 2 * 1 + 1   # ridx2: 2 trips of ridx1 per row; ridx3: once per row
print("passes over the 48 keys per row:", passes_by_hand)

# %%
# TASK: count the passes
def predicted_passes(upcast: int, D: int = 64) -> int:
  """Full passes over the keys per query row of the fused kernel with the head dimension upcast by `upcast`."""
  ### BEGIN SOLUTION
  return 2 + D // min(upcast, D)   # the max pass, the sum pass, then one per group of `upcast` output columns
  ### END SOLUTION


def count_key_passes(src: str, n_keys: int) -> int:
  """Passes over the keys per query row, read from a kernel's C source."""
  ### BEGIN SOLUTION
  loop = re.compile(r"for \(int (ridx\d+) = 0; \1 < (\d+); \1\+\+\) \{")
  open_loops, passes = [], 0   # the lengths of the loops around the current line, outermost first
  for line in src.splitlines():
    if m := loop.search(line):
      n = int(m.group(2))
      if n == n_keys and open_loops: passes += math.prod(open_loops[1:])   # every loop but the row loop repeats it
      open_loops.append(n)
    elif line.strip() == "}" and open_loops: open_loops.pop()
  return passes
  ### END SOLUTION


def most_registers() -> int:
  """The upcast (8, 16, 32 or 64) whose fused kernel needs the most registers."""
  ### BEGIN SOLUTION
  return 64   # 64 output accumulators live across the whole key loop
  ### END SOLUTION


# %%
N = 256
# the counter first, on sources whose passes are known: the worked example's toy (3) and the online kernel (1)
check("count_key_passes(the worked example's toy source, 48)", count_key_passes(toy, 48), passes_by_hand)
check("count_key_passes(the online kernel, 256)", count_key_passes(render_c(online_attention_ir(N, 64), "flash"), N), 1)
# then your predictions, against what the checked counter reads in each fused kernel's C
for upcast in (8, 16, 32, 64):
  kernel = fused_plan(N, 64, upcast).kernels[-1]
  print(f"upcast {upcast:2d}: predicted {predicted_passes(upcast)} passes, the C of {kernel.name} makes "
        f"{count_key_passes(kernel.src, N)}, in {len(kernel.src.splitlines())} lines")
  check(f"predicted_passes({upcast}) against the passes count_key_passes reads in its kernel", predicted_passes(upcast),
        count_key_passes(kernel.src, N))
print("needs the most registers: upcast", most_registers())

# %% [markdown]
# Expected: two `ok` lines for the counter on the toy source and the online kernel; then, for each upcast, a line
# where the prediction equals the count read from the C (whose length grows with the upcast) and an `ok`; then the
# upcast you chose.

# %% [markdown] tags=["answer"]
# Two softmax passes plus 64 / upcast output passes: 10, 6, 4 and 3. The upcast of 64 makes the fewest passes but
# keeps 64 output accumulators live across its whole key loop: as scalars, far more than the 16 registers of
# x86-64 (32 with AVX-512), so they would spill to the stack, unless the compiler packs them into vectors. Its C is
# also the longest. Exercise 7 measures what that costs.

# %% tags=["hidden-test"]
# POINTS: count the passes 1
### BEGIN HIDDEN TESTS
record("upcasts", [predicted_passes(u) for u in (8, 16, 32, 64)])
record("16, D=128", predicted_passes(16, D=128))
record("32, D=32", predicted_passes(32, D=32))
record("most", most_registers())
# JUDGE
gradelib.expect_equal(recorded["upcasts"], [10, 6, 4, 3], "predicted_passes(upcast) for upcast 8, 16, 32, 64 at D = 64")
gradelib.expect_equal(recorded["16, D=128"], 10, "predicted_passes(16, D=128)")
gradelib.expect_equal(recorded["32, D=32"], 3, "predicted_passes(32, D=32)")
gradelib.expect_equal(recorded["most"], 64, "most_registers()")
### END HIDDEN TESTS

# %% tags=["hidden-test"]
# POINTS: count the passes 2
### BEGIN HIDDEN TESTS
# FIXTURE
# the kernels' C made by the grader's uopc (not the notebook's fused_plan, render_c or online_attention_ir)
import uopc.book as _book
import uopc.kernelize as _kernelize
import uopc.render_c as _rc
import uopc.tensor as _tensor
_fa = _book.load_example("flash_attention")
def _fused_src(N, D, upcast):
  _q, _k, _v = (_tensor.Tensor(_x) for _x in _qkv(N, D, 0))
  _plan = _kernelize.make_plan([_fa.attention(_q, _k, _v).uop], fuse_reduce=True, opt=_book.flash_opt(upcast))
  return str(_plan.kernels[-1].src)
fixture = {**{f"D=64, upcast {_u}": _fused_src(384, 64, _u) for _u in (8, 16, 32, 64)},
           "D=32, upcast 8": _fused_src(384, 32, 8),
           "online": str(_rc.render_c(_fa.online_attention_ir(384, 64), "flash"))}
# PROBE
for _what, _src in fixture.items(): record(_what, count_key_passes(_src, 384))
# JUDGE
for _u, _want in ((8, 10), (16, 6), (32, 4), (64, 3)):
  gradelib.expect_equal(recorded[f"D=64, upcast {_u}"], _want,
                        f"count_key_passes(the fused kernel at N = 384, D = 64, upcast {_u})")
gradelib.expect_equal(recorded["D=32, upcast 8"], 6, "count_key_passes(the fused kernel at N = 384, D = 32, upcast 8)")
gradelib.expect_equal(recorded["online"], 1, "count_key_passes(online_attention_ir(384, 64))")
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 3 (★): merge two states
#
# Prove the merge rule for two partial states (m1, l1, o1) and (m2, l2, o2) from 11.6, and check it numerically
# by splitting the worked example's keys into {0} and {1, 2}. `state_of(s, v)` is the state of a set of keys
# computed from the definition; write `merge(a, b)`. It must work when o is a vector, and when one of the states
# is empty, (-inf, 0, 0): the state before any key.

# %% [markdown] tags=["answer"]
# **Proof sketch.** A state summarizes a set of keys K relative to its maximum m_K:
# l_K = Σ_{k∈K} e^{s_k - m_K} and o_K = Σ_{k∈K} e^{s_k - m_K} v_k. For the union of two disjoint sets the maximum
# is m = max(m1, m2), and every term can be re-expressed relative to m:
# e^{s_k - m} = e^{s_k - m1} e^{m1 - m}. The factor e^{m1 - m} does not depend on k, so it comes out of the sum:
# Σ_{k∈K1} e^{s_k - m} = l1 e^{m1 - m}, and likewise for K2 and for o. A sum over a disjoint union is the sum of the
# two sums, so l = l1 e^{m1 - m} + l2 e^{m2 - m} and o = o1 e^{m1 - m} + o2 e^{m2 - m}. Since m ≥ m1, m2, both
# factors are at most 1: nothing overflows. An empty state (m = -inf, l = 0, o = 0) gets the factor
# e^{-inf} = 0, so merging with it changes nothing (as long as the other state is not empty too:
# e^{-inf - (-inf)} is NaN).

# %%
def state_of(s, v) -> tuple:
  """(m, l, o) of the keys with scores s and values v, from the definition (natural exp, as in 11.6)."""
  s, v = np.asarray(s, np.float64), np.asarray(v, np.float64)
  m = s.max()
  w = np.exp(s - m)
  return m, w.sum(), w @ v


# %%
# TASK: merge two states
def merge(a: tuple, b: tuple) -> tuple:
  """The state (m, l, o) of the union of two disjoint sets of keys, from their states a and b."""
  ### BEGIN SOLUTION
  (m1, l1, o1), (m2, l2, o2) = a, b
  m = max(m1, m2)
  c1, c2 = np.exp(m1 - m), np.exp(m2 - m)   # re-express each sum relative to the union's maximum
  return m, l1 * c1 + l2 * c2, o1 * c1 + o2 * c2
  ### END SOLUTION


# %%
s, v = np.array([1.0, 3.0, 2.0]), np.array([10.0, 20.0, 30.0])
for name, st in (("{0}", state_of(s[:1], v[:1])), ("{1, 2}", state_of(s[1:], v[1:])),
                 ("merged", merge(state_of(s[:1], v[:1]), state_of(s[1:], v[1:]))), ("all at once", state_of(s, v))):
  m, l, o = st
  print(f"{name:12s} m = {m:.0f}  l = {l:.4f}  o = {o:.4f}  o / l = {o / l:.3f}")
scores, values = np.random.default_rng(3).standard_normal(40) * 3, np.random.default_rng(4).standard_normal((40, 8))
for what, got, want in (("merge of {0} and {1, 2}", merge(state_of(s[:1], v[:1]), state_of(s[1:], v[1:])),
                         state_of(s, v)),
                        ("merge of keys 0..12 and 13..39 (o a vector of 8)",
                         merge(state_of(scores[:13], values[:13]), state_of(scores[13:], values[13:])),
                         state_of(scores, values)),
                        ("merge of the empty state (-inf, 0, 0) and keys 0..39",
                         merge((-np.inf, 0.0, np.zeros(8)), state_of(scores, values)), state_of(scores, values))):
  check(f"{what}: (m, l, o)", tuple(got), want, rtol=1e-12, atol=1e-12)

# %% [markdown]
# Expected: the "merged" line prints what "all at once" prints (m = 3, l = 1.5032, o = 32.3897, o / l = 21.547:
# the definition applied to all three keys), then three `ok` lines.

# %% tags=["hidden-test"]
# POINTS: merge two states 2
### BEGIN HIDDEN TESTS
record("worked example", merge(state_of([1.0], [10.0]), state_of([3.0, 2.0], [20.0, 30.0])))
_r = seeded(3)
_s, _v = 4 * _r.standard_normal(40), _r.standard_normal((40, 8))
_t = _s.copy()
_t[0] = _s.max() + 1   # the first part holds the maximum: the second part's l and o must be rescaled
record("max first", merge(state_of(_t[:13], _v[:13]), state_of(_t[13:], _v[13:])))
for _cut in (1, 13, 39): record(f"cut {_cut}", merge(state_of(_s[:_cut], _v[:_cut]), state_of(_s[_cut:], _v[_cut:])))
record("three", merge(merge(state_of(_s[:5], _v[:5]), state_of(_s[5:20], _v[5:20])), state_of(_s[20:], _v[20:])))
_empty = (-np.inf, 0.0, np.zeros(8))
record("empty, a state", merge(_empty, state_of(_s, _v)))
record("a state, empty", merge(state_of(_s, _v), _empty))
# JUDGE
def _state(s, v):
  s, v = np.asarray(s, np.float64), np.asarray(v, np.float64)
  w = np.exp(s - s.max())
  return s.max(), w.sum(), w @ v


def _expect_state(got, want, what):
  assert isinstance(got, (tuple, list)) and len(got) == 3, f"{what}: returned {got!r:.60}, expected the state (m, l, o)"
  for _name, _x, _y in zip("mlo", got, want): gradelib.expect_close(_x, _y, f"{what}: {_name}", tol=1e-6)


_expect_state(recorded["worked example"], _state([1.0, 3.0, 2.0], [10.0, 20.0, 30.0]),
              "merge of the worked example's keys {0} and {1, 2}")
_r = seeded(3)
_s, _v = 4 * _r.standard_normal(40), _r.standard_normal((40, 8))
_t = _s.copy()
_t[0] = _s.max() + 1
_expect_state(recorded["max first"], _state(_t, _v), "merge of keys 0..12 and 13..39 (o a vector of 8)")
for _cut in (1, 13, 39):
  _expect_state(recorded[f"cut {_cut}"], _state(_s, _v),
                f"merge of keys 0..{_cut - 1} and {_cut}..39 (o a vector of 8)")
_expect_state(recorded["three"], _state(_s, _v), "merge of three states")
_expect_state(recorded["empty, a state"], _state(_s, _v), "merge(empty state, a state)")
_expect_state(recorded["a state, empty"], _state(_s, _v), "merge(a state, empty state)")
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 4 (★★): causal mask
#
# Query i may only attend to keys j ≤ i. Add the mask to `online_attention_ir` two ways:
# 1. `masked_attention_ir(N, D, keep, masked)`: the key loop runs over all N keys and the score goes through a
#    WHERE, `keep(i, j).where(s, masked)`, where `keep(i, j)` is a boolean UOp (default: the causal mask j < i + 1)
#    and `masked` is the value a masked score gets (None: your choice). What value must it be, given the NaN
#    pitfall? The grader also runs your kernel with another mask, where the first keys of a row are masked.
# 2. `causal_range_ir(N, D)`: the key loop's end depends on i. Does the IR, the linearizer and the renderer
#    accept a RANGE whose end is an expression of another RANGE?
#
# Both take buffers q, k, v, out (N x D float32, slots 0 to 3) like `online_attention_ir`. Verify against NumPy
# and compare the speed. You need not copy the listing: `online_attention_ir(N, D)` is a graph, and
# `substitute(prog, {old: new})` (from `uopc.uop`) gives the same graph with one node replaced; the loop
# variables are `range_(N, 0, AxisType.THREAD)` (i) and `range_(N, 2)` (j), the same objects as in the listing.

# %%
def causal(i: UOp, j: UOp) -> UOp: return j < i + 1


# %% [markdown]
# **Worked example.** Editing the listing's graph without copying it: doubled scores, softmax(2 q k^T / √D) v,
# which is attention of (2q, k, v). `toposort()` lists every node of the graph; the scale is one CONST node, so
# `substitute` swaps it for another. The RANGE nodes are listed the same way: hash-consing makes
# `range_(N, 2)` the very node of the key loop.

# %%
N, D = 64, 16
prog = online_attention_ir(N, D)
scale = (1 / math.sqrt(D)) * LOG2E
(scale_node,) = [u for u in prog.toposort() if u.op is Ops.CONST and u.arg == scale]
doubled = substitute(prog, {scale_node: UOp.const(2 * scale)})
print("loops (end, axis, id):", sorted((u.src[0].arg, u.arg[1].name, u.arg[0]) for u in prog.toposort()
                                      if u.op is Ops.RANGE))
print("range_(N, 2) is in the graph:", range_(N, 2) in prog.toposort())
q, k, v = qkv(N, D)
check("the doubled-score kernel against attention of (2q, k, v)",
      run_attention_kernel(lambda N, D: doubled, q, k, v, "doubled"), ref_attention(2 * q, k, v), atol=1e-4, rtol=1e-4)


# %%
# TASK: causal mask
def masked_attention_ir(N: int, D: int, keep=causal, masked: float | None = None) -> UOp:
  """online_attention_ir where score (i, j) takes part only if keep(i, j); a masked score is set to `masked`."""
  ### BEGIN SOLUTION
  masked = -1e30 if masked is None else masked   # finite: masked - masked is 0, never -inf - (-inf) = NaN
  prog = online_attention_ir(N, D)
  i, j = range_(N, 0, AxisType.THREAD), range_(N, 2)
  # the score s = (q_i . k_j) * scale: the product whose first factor is the load of S (the ALLOC in slot 3)
  (s,) = [u for u in prog.toposort() if u.op is Ops.MUL and u.src[0].op is Ops.LOAD
          and (a := base_alloc(u.src[0].src[0].src[0])) is not None and a.arg.slot == 3]
  return substitute(prog, {s: keep(i, j).where(s, UOp.const(float(masked)))})   # the only new node
  ### END SOLUTION


def causal_range_ir(N: int, D: int) -> UOp:
  """Causal online attention whose key loop stops at the diagonal: j < i + 1."""
  ### BEGIN SOLUTION
  prog = online_attention_ir(N, D)
  i = range_(N, 0, AxisType.THREAD)
  return substitute(prog, {range_(N, 2): range_(i + 1, 2)})   # the key loop's end is a UOp of i
  ### END SOLUTION


# %%
N, D = 256, 64
q, k, v = qkv(N, D)
lower_tri = np.tri(N, dtype=bool)                       # keep[i, j] = j <= i
ref = ref_attention(q, k, v, lower_tri)
where_out = run_attention_kernel(masked_attention_ir, q, k, v, "causal_where")
range_out = run_attention_kernel(causal_range_ir, q, k, v, "causal_range")
check("masked_attention_ir (causal) against NumPy", where_out, ref, atol=1e-4, rtol=1e-4)
check("causal_range_ir against NumPy", range_out, ref, atol=1e-4, rtol=1e-4)
print("\n".join(line for line in render_c(causal_range_ir(N, D), "causal_range").splitlines() if "for (" in line))

# %% [markdown]
# Expected: two `ok` lines, then the loop headers of `causal_range_ir(256, 64)`'s C.

# %% [markdown]
# The NaN pitfall, measured. With the mask `j >= i` (each row's *first* keys are masked, as with left padding)
# a masked score of -inf makes the first correction factor exp2(-inf - (-inf)) = NaN, and the NaN then spreads
# through l and o for the rest of the row, even though later keys are valid:

# %%
upper_tri = lower_tri.T                                 # keep[i, j] = j >= i
ref_upper = ref_attention(q, k, v, upper_tri)
for masked in (-math.inf, None):
  build = lambda N, D: masked_attention_ir(N, D, keep=lambda i, j: i < j + 1, masked=masked)
  out = run_attention_kernel(build, q, k, v, "upper_where")
  print(f"masked = {masked if masked is not None else 'default'}: {np.isnan(out).any(axis=1).sum()} rows of {N} "
        f"are NaN, matches NumPy: {matches(out, ref_upper)}")
check("masked_attention_ir with keep j >= i and the default masked value, against NumPy", out, ref_upper,
      atol=1e-4, rtol=1e-4)

# %% [markdown]
# Expected: with -inf, 255 rows of 256 are NaN (every row but row 0, the only one whose first key is kept) and the
# output does not match; with your default no row is NaN, it matches NumPy, and the check prints `ok`.

# %% tags=["nbval-ignore-output"]
N, D = 1024, 64
q, k, v = qkv(N, D)
out = np.zeros(N * D, np.float32)
kernels = {"full (no mask)": compile_ir(online_attention_ir(N, D), "flash"),
           "WHERE-masked": compile_ir(masked_attention_ir(N, D), "causal_where"),
           "row-dependent loop": compile_ir(causal_range_ir(N, D), "causal_range")}
times = best_times({name: lambda prg=prg: prg(q, k, v, out) for name, prg in kernels.items()}, 10)
for name, t in times.items():
  print(f"{name:20s} {t * 1e3:7.2f} ms   {times['full (no mask)'] / t:4.2f}x the full kernel's speed")

# %%
# TASK: causal mask
# Your answer, in Markdown, as ANSWER = """...""" in place of the raise.
# Which value must a masked score get, and why? Does the IR accept a RANGE whose end is an expression of another
# RANGE (the linearizer? the renderer?), and what do the timings say?
### BEGIN SOLUTION
ANSWER = """
**The masked value.** -inf is correct for the causal mask only because key 0 is never masked: the running
maximum is finite after the first key, and every later masked key gives corr = 1, p = exp2(-inf) = 0. As soon as
a row *starts* with masked keys (the `j >= i` mask above, left padding), m_old = m_new = -inf and
corr = exp2(-inf - (-inf)) = NaN, which poisons l and o for the rest of the row. A large finite negative
(-1e30 here) avoids it: masked - masked = 0, so the first masked keys do accumulate weight 1, but the first valid
key has m_new = s, corr = exp2(-1e30 - s) = 0, and wipes them out. A row with *no* valid key would then return
the mean of V instead of NaN; real kernels special-case m = -inf instead.

**A loop whose end depends on the row.** `range_(i + 1, 2)` is accepted everywhere. The IR: a RANGE's source is
any integer UOp. The linearizer: RANGE j uses i, so it is placed inside loop i (its own END closes it) and the
expression `i + 1` is ordered before the loop opens. The renderer prints the expression as the bound:
`for (int ridx2 = 0; ridx2 < (ridx0+1); ridx2++)`. Index simplification bounds j by the largest value of
i + 1, which is still correct (0 <= j <= N - 1). The one part that does not understand it is cost counting: the
renderer's flop count multiplies trip counts only for constant bounds, so it counts the key loop's body once per
row instead of i + 1 times, and a DEBUG=2 GFLOP/s line would be wrong for this kernel.

**Speed.** The WHERE kernel still visits all N keys of every row (it loads k_j, computes corr and rescales o),
yet it is faster than the full kernel, about 1.3x here (with one thread as well). In its assembly, gcc has
unrolled the 64-element dot product into straight-line vector code, and since only the kept side of the WHERE
uses it, it moved that code under a branch (`j > i` jumps over it); the inlined exp2f of a -1e30 score also takes
its early exit (p = 0). The triangular loop skips the masked keys altogether, half the work: with one thread it
is twice as fast as the full kernel. With two, OpenMP's static schedule gives thread 0 rows 0..N/2-1 (a quarter of
the triangle) and thread 1 the other three quarters, so on an otherwise idle machine the triangle buys only about
4/3 (on a shared one, where the threads do not get a core each anyway, the measured ratio varies). Interleaving
rows, or pairing row r with row N-1-r in one iteration, would balance the threads.
"""
### END SOLUTION
show(ANSWER)

# %% tags=["hidden-test"]
# POINTS: causal mask 2
### BEGIN HIDDEN TESTS
# the C of the student's loop programs, rendered by uopc's render_c; the grader compiles and runs it (run_c), never
# through the notebook's run_attention_kernel
from uopc.render_c import render_c as _render_c
record("causal", str(_render_c(masked_attention_ir(96, 16), "h_where")))
record("upper", str(_render_c(masked_attention_ir(96, 16, keep=lambda i, j: i < j + 1), "h_upper")))
record("all", str(_render_c(masked_attention_ir(96, 16, keep=lambda i, j: j < 1_000_000), "h_all")))
record("range", str(_render_c(causal_range_ir(96, 16), "h_range")))
# JUDGE
def _run(what, name, N, D, *key):
  _q, _k, _v = _qkv(N, D, *key)
  (_o,) = run_c(recorded[what], name, [_q, _k, _v, np.full(N * D, np.nan, np.float32)], outputs=[3], what=what)
  return _o.reshape(N, D), (_q, _k, _v)
_tri = np.tri(96, dtype=bool)
_o, _x = _run("causal", "h_where", 96, 16, 5)
gradelib.expect_attention(_o, *_x, "masked_attention_ir(96, 16), causal mask", keep=_tri)
_o, _x = _run("upper", "h_upper", 96, 16, 5)
gradelib.expect_attention(_o, *_x, "masked_attention_ir(96, 16) with keep j >= i (each row's first keys masked)",
                          keep=_tri.T)
_o, _x = _run("all", "h_all", 96, 16, 5)
gradelib.expect_attention(_o, *_x, "masked_attention_ir(96, 16) with a mask that keeps every key")
_o, _x = _run("range", "h_range", 96, 16, 6)
gradelib.expect_attention(_o, *_x, "causal_range_ir(96, 16)", keep=_tri)
### END HIDDEN TESTS

# %% tags=["hidden-test"]
# POINTS: causal mask 1 structure
### BEGIN HIDDEN TESTS
from uopc.render_c import render_c as _render_c
record("src", str(_render_c(causal_range_ir(96, 16), "h_range")))
# JUDGE
_src = gradelib.text(recorded["src"], "causal_range_ir(96, 16)")
_bounds = re.findall(r"for \(int (ridx\d+) = 0; \1 < ([^;]+);", _src)
assert any(not _b.strip().isdigit() for _, _b in _bounds), (
  f"causal_range_ir(96, 16): every loop has a constant end ({', '.join(_b for _, _b in _bounds)}): the key loop "
  f"should end at the diagonal, range_(i + 1, ...)")
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 5 (★★): query blocking
#
# Process a block of B = 4 query rows per iteration of the THREAD loop, so that each loaded k_j and v_j serves four
# queries. Write `blocked_attention_ir(N, D, B=4)` in the loop IR (same buffers as `online_attention_ir`; N is a
# multiple of B). Measure at N = 1024 and 2048, and compute the new GFLOP/s (4 N² D flops).

# %% [markdown]
# **Worked example.** The core of the task on its own: two dot products q_0 . k and q_1 . k in one loop over e,
# with one load of k[e] for both. Each dot product has its own accumulator (an ALLOC of one element); a SINK groups
# the two stores so that one `.end(e)` closes the loop over both; a load `.after(dots)` reads an accumulator once
# the loop is done. In the C, `data1` (k) is loaded once per step of the loop.

# %%
def two_dots_ir(D: int) -> UOp:
  """out[b] = q[b] . k for b = 0, 1 (q is (2, D), k is (D,)): one loop over e, one load of k[e] per step."""
  Q2, K1, OUT2 = (UOp(Ops.BUFFER, (), ParamArg(slot, f32, (n,))) for slot, n in ((0, 2 * D), (1, D), (2, 2)))
  acc = [UOp(Ops.ALLOC, (), ParamArg(b, f32, (1,))) for b in range(2)]
  e = range_(D, 0)
  acc_e = [a.after(a.index(0).store(UOp.const(0.0)), e) for a in acc]   # zeroed before the loop, updated in it
  ke = K1.index(e).load()
  dots = UOp(Ops.SINK, tuple(a.index(0).store(a.index(0).load() + Q2.index(b * D + e).load() * ke)
                             for b, a in enumerate(acc_e))).end(e)
  return sink(UOp(Ops.SINK, tuple(OUT2.index(b).store(acc[b].after(dots).index(0).load()) for b in range(2))))


print(render_c(two_dots_ir(8), "two_dots"))
q2, k1 = np.random.default_rng(5).standard_normal((2, 8)).astype(np.float32), np.ones(8, np.float32)
out2 = np.zeros(2, np.float32)
compile_ir(two_dots_ir(8), "two_dots")(q2, k1, out2)
check("two_dots_ir(8) against NumPy", out2, q2 @ k1, atol=1e-5, rtol=1e-5)

# %%
# TASK: query blocking
def blocked_attention_ir(N: int, D: int, B: int = 4) -> UOp:
  """Online attention with B query rows per iteration of the parallel loop: every k_j[e] and v_j[d] loaded is
  used by B queries."""
  ### BEGIN SOLUTION
  Q, K, V, OUT = (UOp(Ops.BUFFER, (), ParamArg(s, f32, (N * D,))) for s in range(4))
  alloc = lambda slot, n: UOp(Ops.ALLOC, (), ParamArg(slot, f32, (n,)))
  # scalar state per query of the block (registers): running max, running sum, dot product; one output row each
  Ms, Ls, Ss = ([alloc(k * B + b, 1) for b in range(B)] for k in range(3))
  O = alloc(3 * B, B * D)
  scale = (1 / math.sqrt(D)) * LOG2E
  i = range_(N // B, 0, AxisType.THREAD)
  rows = [i * B + b for b in range(B)]
  Mi, Li, Oi = [m.after(i) for m in Ms], [x.after(i) for x in Ls], O.after(i)
  init_m = [m.index(0).store(UOp.const(-math.inf)) for m in Mi]
  init_l = [x.index(0).store(UOp.const(0.0)) for x in Li]
  d0 = range_(B * D, 1)
  init_o = Oi.index(d0).store(UOp.const(0.0)).end(d0)
  j = range_(N, 2)
  # B dot products in one loop over e: one load of k_j[e], B uses
  Sj = [x.after(i, j) for x in Ss]
  e = range_(D, 3)
  Se = [x.after(x.index(0).store(UOp.const(0.0)), e) for x in Sj]
  kje = K.index(j * D + e).load()
  dots = UOp(Ops.SINK, tuple(x.index(0).store(x.index(0).load() + Q.index(r * D + e).load() * kje)
                             for x, r in zip(Se, rows))).end(e)
  # the online softmax update, once per query
  corr, p, states = [], [], []
  for b in range(B):
    s = Sj[b].after(dots).index(0).load() * scale
    Mj, Lj = Mi[b].after(init_m[b], j), Li[b].after(init_l[b], j)
    m_old = Mj.index(0).load()
    m_new = m_old.maximum(s)
    corr.append((m_old - m_new).exp2()); p.append((s - m_new).exp2())
    states += [Lj.index(0).store(Lj.index(0).load() * corr[b] + p[b]), Mj.index(0).store(m_new)]
  # B output rows in one loop over d: one load of v_j[d], B uses
  d = range_(D, 4)
  vjd = V.index(j * D + d).load()
  Od = Oi.after(init_o, j)
  st_o = UOp(Ops.SINK, tuple(Od.index(b * D + d).store(Od.index(b * D + d).load() * corr[b] + p[b] * vjd)
                             for b in range(B))).end(d)
  loop_j = UOp(Ops.SINK, (*states, st_o)).end(j)
  d2 = range_(D, 5)
  outs = [OUT.index(rows[b] * D + d2).store(Oi.after(loop_j).index(b * D + d2).load() *
                                            Li[b].after(loop_j).index(0).load().recip()) for b in range(B)]
  return simplify(sink(UOp(Ops.SINK, tuple(outs)).end(d2, i)))   # simplify: (i*4+0)*64 -> i*256
  ### END SOLUTION


# %%
q, k, v = qkv(256, 64)
check("blocked_attention_ir(256, 64) against NumPy", run_attention_kernel(blocked_attention_ir, q, k, v, "flash_b4"),
      ref_attention(q, k, v), atol=1e-4, rtol=1e-4)
src = render_c(blocked_attention_ir(256, 64), "flash_b4")
print("\n".join(line for line in src.splitlines() if "for (" in line or "data1[" in line or "data2[" in line))

# %% [markdown]
# Expected: one `ok` line; in the lines printed, the parallel loop makes N / B = 64 trips, and `data1[` (k) and
# `data2[` (v) each appear in one load.

# %% tags=["nbval-ignore-output"]
for N in (1024, 2048):
  q, k, v = qkv(N, 64)
  out, out_b = np.zeros(N * 64, np.float32), np.zeros(N * 64, np.float32)
  flops = 4 * N * N * 64
  online, blocked = compile_ir(online_attention_ir(N, 64), "flash"), compile_ir(blocked_attention_ir(N, 64), "flash_b4")
  t = best_times({"online": lambda: online(q, k, v, out), "blocked": lambda: blocked(q, k, v, out_b)}, 10)
  ok = matches(out_b.reshape(N, 64), ref_attention(q, k, v))
  print(f"N = {N}: online {t['online'] * 1e3:7.2f} ms {flops / t['online'] / 1e9:6.1f} GFLOP/s   "
        f"blocked {t['blocked'] * 1e3:7.2f} ms {flops / t['blocked'] / 1e9:6.1f} GFLOP/s   "
        f"speedup {t['online'] / t['blocked']:4.2f}x   correct: {ok}")

# %%
# TASK: query blocking
# Your answer, in Markdown, as ANSWER = """...""" in place of the raise.
# What changed in the generated C, and what do the measurements say?
### BEGIN SOLUTION
ANSWER = """
The dot-product loop now loads k_j[e] once (`data1[...]`) for four independent accumulators, and the output loop
loads v_j[d] once (`data2[...]`) for four output rows: each value brought in from the cache does four times the
arithmetic, and four independent dependency chains overlap (the one-row kernel waits on one chain: dot product,
max, exp2f, rescale). Both inner loops still vectorize. The parallel loop has N/4 iterations (`ridx0 < 64` at
N = 256), still plenty for the threads.

The gain is modest on this CPU: about 1.25x (18 to 22 GFLOP/s with one thread, at both sizes, when the machine is
quiet; the two-thread timings above come from a machine shared with other jobs and are noisier). K and V (256 KB
each at N = 1024) live in L2 anyway, so the one-row kernel was not starved for bandwidth. What remains is the
per-key scalar work (a horizontal sum, the max, two exp2f per query) between short vector loops. To approach the
GEMM's GFLOP/s the kernel also needs a block of *keys* per step, turning the dot products into a small
register-tiled matrix product: the tile of FlashAttention (11.9).
"""
### END SOLUTION
show(ANSWER)

# %% tags=["hidden-test"]
# POINTS: query blocking 2
### BEGIN HIDDEN TESTS
from uopc.render_c import render_c as _render_c
record("B=4", str(_render_c(blocked_attention_ir(128, 16), "h_blocked")))
record("B=2", str(_render_c(blocked_attention_ir(64, 32, B=2), "h_blocked2")))
# JUDGE
for _what, _name, _N, _D, _key in (("B=4", "h_blocked", 128, 16, 7), ("B=2", "h_blocked2", 64, 32, 8)):
  _q, _k, _v = _qkv(_N, _D, _key)
  (_o,) = run_c(recorded[_what], _name, [_q, _k, _v, np.full(_N * _D, np.nan, np.float32)], outputs=[3],
                what=f"blocked_attention_ir({_N}, {_D}, B={_what[2:]})")
  gradelib.expect_attention(_o.reshape(_N, _D), _q, _k, _v, f"blocked_attention_ir({_N}, {_D}, B={_what[2:]})")
### END HIDDEN TESTS

# %% tags=["hidden-test"]
# POINTS: query blocking 1 structure
### BEGIN HIDDEN TESTS
from uopc.render_c import render_c as _render_c
record("src", str(_render_c(blocked_attention_ir(128, 16), "h_blocked")))
# JUDGE
_src = gradelib.text(recorded["src"], "blocked_attention_ir(128, 16)")
_nest = gradelib.loop_nest(_src)
assert gradelib.parallel_loops(_src) >= 1, "blocked_attention_ir(128, 16): no parallel loop"
_trips = _nest[0][1] if _nest else 0
assert _trips == 32, (f"blocked_attention_ir(128, 16): the parallel loop makes {_trips} trips, expected 32 (one per "
                      f"block of 4 query rows)")
_k_loads = len(re.findall(r"= data1\[", _src))
assert _k_loads == 1, (f"blocked_attention_ir(128, 16): {_k_loads} loads of k (data1) in the C, expected 1: each "
                       f"k_j[e] loaded once serves the 4 queries of the block")
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 6 (★★, optional, not graded): flash-decoding
#
# An exercise for those who want more: nothing of it is graded and no later task uses it, and this notebook has no task
# cell for it. Write it in cells of your own and check it against `ref_attention` as the tasks above do. Then
# measure how the time depends on T, and explain why.
#
# For one query and N = 65536 keys, the row loop has one iteration and one thread does everything. Split the keys
# into T chunks processed by different threads, each producing a partial (m, l, o), and merge them with
# Exercise 3's rule in a second kernel. Write
# - `decode_partial_ir(N, D, T)`: buffers q (D), k and v (N x D), then the partial states m (T), l (T), o (T x D);
#   the THREAD loop runs over the T chunks (N is a multiple of T);
# - `decode_merge_ir(D, T)`: buffers m, l, o of the partial states, then out (D);
# - `make_flash_decode(N, D, T)`: compiles both once and returns a function `(q, k, v) -> out` (shape (D,)).
#
# With T = 1 the first kernel *is* the single-thread one-query kernel (and the merge is a copy): that is the
# baseline.

# %% tags=["answer"]
def decode_partial_ir(N: int, D: int, T: int) -> UOp:
  """Kernel 1: thread t runs the online softmax over keys t*N/T .. (t+1)*N/T - 1 and stores its (m, l, o)."""
  C = N // T
  Q = UOp(Ops.BUFFER, (), ParamArg(0, f32, (D,)))
  K, V = (UOp(Ops.BUFFER, (), ParamArg(s, f32, (N * D,))) for s in (1, 2))
  PM, PL, PO = (UOp(Ops.BUFFER, (), ParamArg(s, f32, (n,))) for s, n in ((3, T), (4, T), (5, T * D)))
  alloc = lambda slot, n: UOp(Ops.ALLOC, (), ParamArg(slot, f32, (n,)))
  M, L, O, S = alloc(0, 1), alloc(1, 1), alloc(2, D), alloc(3, 1)
  scale = (1 / math.sqrt(D)) * LOG2E
  t = range_(T, 0, AxisType.THREAD)
  Mt, Lt, Ot = M.after(t), L.after(t), O.after(t)          # per-thread state (NOTES 9)
  init_m = Mt.index(0).store(UOp.const(-math.inf))
  init_l = Lt.index(0).store(UOp.const(0.0))
  d0 = range_(D, 1)
  init_o = Ot.index(d0).store(UOp.const(0.0)).end(d0)
  c = range_(C, 2)
  j = t * C + c                                           # the key this step of chunk t reads
  Sj = S.after(t, c)
  init_s = Sj.index(0).store(UOp.const(0.0))
  e = range_(D, 3)
  Se = Sj.after(init_s, e)
  dot = Se.index(0).store(Se.index(0).load() + Q.index(e).load() * K.index(j * D + e).load()).end(e)
  s = Sj.after(dot).index(0).load() * scale
  Mc, Lc = Mt.after(init_m, c), Lt.after(init_l, c)
  m_old = Mc.index(0).load()
  m_new = m_old.maximum(s)
  corr, p = (m_old - m_new).exp2(), (s - m_new).exp2()
  st_l = Lc.index(0).store(Lc.index(0).load() * corr + p)
  d = range_(D, 4)
  Od = Ot.after(init_o, c)
  st_o = Od.index(d).store(Od.index(d).load() * corr + p * V.index(j * D + d).load()).end(d)
  st_m = Mc.index(0).store(m_new)
  loop_c = UOp(Ops.SINK, (st_l, st_o, st_m)).end(c)
  # no division here: the state stays unnormalized (and in base 2) until the merge
  d2 = range_(D, 5)
  out_o = PO.index(t * D + d2).store(Ot.after(loop_c).index(d2).load()).end(d2)
  out_m = PM.index(t).store(Mt.after(loop_c).index(0).load())
  out_l = PL.index(t).store(Lt.after(loop_c).index(0).load())
  return simplify(sink(UOp(Ops.SINK, (out_o, out_m, out_l)).end(t)))


def decode_merge_ir(D: int, T: int) -> UOp:
  """Kernel 2: merge the T partial states (Exercise 3's rule, base 2) and normalize: out = o / l."""
  PM, PL = (UOp(Ops.BUFFER, (), ParamArg(s, f32, (T,))) for s in (0, 1))
  PO, OUT = UOp(Ops.BUFFER, (), ParamArg(2, f32, (T * D,))), UOp(Ops.BUFFER, (), ParamArg(3, f32, (D,)))
  alloc = lambda slot, n: UOp(Ops.ALLOC, (), ParamArg(slot, f32, (n,)))
  M, L, A = alloc(0, 1), alloc(1, 1), alloc(2, 1)   # M and L at function scope, A per output column d
  # m = the largest partial maximum
  t = range_(T, 0)
  Mt = M.after(M.index(0).store(UOp.const(-math.inf)), t)
  st_m = Mt.index(0).store(Mt.index(0).load().maximum(PM.index(t).load())).end(t)
  m = M.after(st_m).index(0).load()
  # l = sum over t of l_t 2^(m_t - m)
  t1 = range_(T, 1)
  Lt = L.after(L.index(0).store(UOp.const(0.0)), t1)
  st_l = Lt.index(0).store(Lt.index(0).load() + PL.index(t1).load() * (PM.index(t1).load() - m).exp2()).end(t1)
  l = L.after(st_l).index(0).load()
  # out[d] = (sum over t of o_t[d] 2^(m_t - m)) / l
  d = range_(D, 2)
  Ad = A.after(d)
  t2 = range_(T, 3)
  At = Ad.after(Ad.index(0).store(UOp.const(0.0)), t2)
  st_a = At.index(0).store(At.index(0).load() + PO.index(t2 * D + d).load() * (PM.index(t2).load() - m).exp2())
  out = OUT.index(d).store(Ad.after(st_a.end(t2)).index(0).load() * l.recip())
  return sink(out.end(d))


def make_flash_decode(N: int, D: int, T: int):
  """Compile both kernels once; return a function (q (D,), k (N, D), v (N, D)) -> out (D,)."""
  partial = compile_ir(decode_partial_ir(N, D, T), "decode_partial")
  merge_ = compile_ir(decode_merge_ir(D, T), "decode_merge")
  pm, pl, po = np.empty(T, np.float32), np.empty(T, np.float32), np.empty(T * D, np.float32)   # reused every call

  def run(q, k, v):
    out = np.empty(D, np.float32)
    partial(np.ascontiguousarray(q, np.float32).reshape(D), k, v, pm, pl, po)
    merge_(pm, pl, po, out)
    return out
  return run


# %% tags=["answer"]
N, D = 65536, 64
rng = np.random.default_rng(1)
q1 = rng.standard_normal(D).astype(np.float32)                  # one query
k, v = (rng.standard_normal((N, D)).astype(np.float32) for _ in range(2))
ref = ref_attention(q1[None], k, v)[0]
for T in (1, 16):
  check(f"make_flash_decode({N}, {D}, T={T}) against NumPy", make_flash_decode(N, D, T)(q1, k, v), ref,
        atol=1e-4, rtol=1e-4)
print(render_c(decode_merge_ir(D, 16), "decode_merge"))

# %% tags=["answer", "nbval-ignore-output"]
times = best_times({T: lambda fn=make_flash_decode(N, D, T): fn(q1, k, v) for T in (1, 2, 4, 16, 64)}, 20)
for T, t in times.items():
  print(f"T = {T:2d}: {t * 1e3:6.2f} ms {4 * N * D / t / 1e9:5.2f} GFLOP/s {times[1] / t:4.2f}x the one-thread kernel")

# %% [markdown] tags=["answer"]
# **How the time depends on T, and why.** T = 1 is the single-thread kernel: one core walks all 65,536 keys, and every
# key waits for the previous one (dot product, max, two exp2f, rescale). With T ≥ 2 both cores of this machine work, and
# the time drops by up to the number of cores (here at most 2x; on a machine shared with other jobs the timings above
# are noisy). Beyond that, more chunks only help balance (the static schedule hands each thread T / threads chunks) and
# cost almost nothing: the merge kernel reads T x (D + 2) floats, 1,056 of them at T = 16, against 8.4 million for K and
# V. Decoding has almost no reuse (each key and value row is used once, for one query: about 0.5 flop per byte), so with
# all cores busy the ceiling is the bandwidth they can draw from L3 and memory, not their arithmetic. K and V together
# are 32 MB, the size of this CPU's L3 cache, so the times also depend on how much of it other jobs take: from run to
# run they vary several-fold here. On a GPU the same split over thread blocks is what keeps hundreds of cores busy for a
# single query (Flash-Decoding, 2023).

# %% [markdown]
# ## Exercise 7 (★★): upcast the head
#
# Give FlashOpt an upcast of the full head dimension (D = 64), so the fused kernel makes three passes instead of
# six (`fused_plan(N, D, 64)`). Is it faster? Then try the other choice the first version made by accident: run
# with fuse_reduce=True but call `stage_broadcast_compute` anyway, so P is stored. Write
# `staged_fused_attention(q, k, v)`, returning the output (N, D) and the plan it ran. Rank the three variants and
# explain using register pressure and recomputation.

# %%
# TASK: upcast the head
def staged_fused_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, Plan]:
  """Attention with fuse_reduce=True and FlashOpt, but P staged by stage_broadcast_compute: (output, plan)."""
  ### BEGIN SOLUTION
  # make_plan skips the broadcast rule under fuse_reduce, so apply it to the roots ourselves
  roots = stage_broadcast_compute([attention(Tensor(q), Tensor(k), Tensor(v)).uop])
  (out,) = realize(roots, True, FlashOpt)
  return out.reshape(q.shape[0], v.shape[1]), make_plan(roots, True, FlashOpt)
  ### END SOLUTION


# %%
N, D = 1024, 64
q, k, v = qkv(N, D)
ref = ref_attention(q, k, v)


def attention_variants(q, k, v) -> dict:
  """name -> (a function computing attention of q, k, v that way, its plan)."""
  def fused(upcast: int):
    return lambda: realize([attention(Tensor(q), Tensor(k), Tensor(v)).uop], True, flash_opt(upcast))[0]
  N, D = q.shape
  return {"fused, upcast 16": (fused(16), fused_plan(N, D, 16)),
          "fused, upcast 64": (fused(64), fused_plan(N, D, 64)),
          "fused, P staged": (lambda: staged_fused_attention(q, k, v)[0], staged_fused_attention(q, k, v)[1])}


for name, (fn, plan) in attention_variants(q, k, v).items():
  print(f"{name}\n{plan.explain()}\n")
  check(f"{name}: output against NumPy", fn().reshape(N, D), ref, atol=1e-4, rtol=1e-4)
staged_plan = staged_fused_attention(q, k, v)[1]
check("the staged plan's temporaries hold P (N x N = 1048576 elements)", N * N in [n for _, n in staged_plan.temps],
      True)
check("the staged plan's kernels: the fused plan's, and one more that stores P", len(staged_plan.kernels),
      len(fused_plan(N, D, 16).kernels) + 1)

# %% [markdown]
# Expected: the three plans, each followed by an `ok` line for its output, then two `ok` lines for the staged plan:
# its temporaries and its kernels.

# %% tags=["nbval-ignore-output"]
# N = 1000 does the same work as 1024 (2% less), but its rows are not 4096 bytes long: see the answer below
for n in (1024, 1000):
  times = best_times({name: fn for name, (fn, _) in attention_variants(*qkv(n, D)).items()}, 3)
  for rank, (name, t) in enumerate(sorted(times.items(), key=lambda kv: kv[1]), 1):
    print(f"N = {n}: {rank}. {name:17s} {t * 1e3:7.2f} ms   {t / min(times.values()):4.2f}x the fastest")

# %%
# TASK: upcast the head
# Your answer, in Markdown, as ANSWER = """...""" in place of the raise.
# Rank the three variants and explain them with register pressure and recomputation.
### BEGIN SOLUTION
ANSWER = """
At N = 1024 on this machine: **1. P staged, 2. upcast 16, 3. upcast 64**, each roughly two to three times faster
than the next. At N = 1000 (the same work): **1. P staged, 2. upcast 64, 3. upcast 16**.

- **Recomputation.** Upcast 16 computes every q_i . k_j six times (`add[1024, 1024] x6` in its plan), upcast 64
  and the staged plan three times (`x3`). The staged plan pays with one N x N buffer (4 MB written and read back,
  mostly from L3), and its P V kernel is a plain reduction over stored values: one load of P feeds 16
  accumulators, nothing is recomputed in its four output passes. Here that traffic is cheaper than three extra
  D = 64 dot products per score, so staging P wins or ties.
- **Register pressure.** The upcast-64 output pass keeps 64 accumulators live across the key loop. As scalars they
  would not fit (16 registers on x86-64, 32 with AVX-512) and would spill. On this CPU gcc packs them into eight
  8-wide vectors (its assembly accumulates with `vfmadd231ps` into ymm20 to ymm27), so they fit; the price is
  that the 64 values of V^T it needs per key are 64 scalar loads, N floats apart, inserted into vectors one by one.
- **Why upcast 64 is last at N = 1024.** Those 64 loads are 4096 bytes apart, so they all fall into the same set
  of the L1 cache (32 KB, 8 ways of 4 KB) and evict each other: the kernel waits on cache conflicts, not on
  arithmetic or registers. Upcast 16 suffers the same with 16 lines. At N = 1000 the stride is no longer a power of
  two, the conflicts vanish, and upcast 64 beats upcast 16, as counting passes predicts.

So: fewer passes pay when the accumulators fit in registers; storing an intermediate that stays in cache can beat
recomputing it; and a power-of-two stride can hide both. Padding the transposed copy of V (a row stride of
N + 16 floats) would let N = 1024 behave like N = 1000.
"""
### END SOLUTION
show(ANSWER)

# %% tags=["hidden-test"]
# POINTS: upcast the head 1
### BEGIN HIDDEN TESTS
_r = seeded(9)
_q, _k, _v = (_r.standard_normal((128, 32)).astype(np.float32) for _ in range(3))
record("out", staged_fused_attention(_q, _k, _v)[0])
# JUDGE
gradelib.expect_attention(recorded["out"], *_qkv(128, 32, 9), "staged_fused_attention(N=128, D=32): output")
### END HIDDEN TESTS

# %% tags=["hidden-test"]
# POINTS: upcast the head 1 structure
### BEGIN HIDDEN TESTS
_r = seeded(9)
_q, _k, _v = (_r.standard_normal((128, 32)).astype(np.float32) for _ in range(3))
_plan = staged_fused_attention(_q, _k, _v)[1]
record("temps", [int(n) for _, n in _plan.temps])
record("kernels", [str(k.name) for k in _plan.kernels])
# JUDGE
# the fused plan made here, with the grader's uopc: one kernel more is the one that stores P
from uopc.book import flash_opt as _flash_opt, load_example as _load_example
from uopc.kernelize import make_plan as _make_plan
from uopc.tensor import Tensor as _Tensor
_temps, _kernels = recorded["temps"], recorded["kernels"]
assert isinstance(_temps, list) and 128 * 128 in _temps, (
  f"staged_fused_attention(N=128): the plan's temporaries have sizes {_temps}: none is P (N x N = 16384), so P was "
  f"not staged")
_fused = _make_plan([_load_example("flash_attention").attention(*(_Tensor(_x) for _x in _qkv(128, 32, 9))).uop],
                    fuse_reduce=True, opt=_flash_opt(16))
_want = len(_fused.kernels) + 1
assert isinstance(_kernels, list) and len(_kernels) == _want, (
  f"staged_fused_attention(N=128): {len(_kernels)} kernels ({_kernels}), expected {_want}: the fused plan's and one "
  f"that stores P")
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 8 (★★): find the bug
#
# A student's online kernel computes l = l * corr + p and o[d] = o[d] + p * v[j, d]: it forgets to rescale o.
# `buggy_attention_ir` is that kernel (`online_attention_ir` with the rescale of o rewritten away). On which inputs
# does it pass a test against NumPy, and on which does it fail? Write
# - `bug_hiding_inputs(N, D)`: q, k, v ((N, D) float32, values not all alike) on which the buggy kernel matches
#   NumPy to 1e-4;
# - `check_online_kernel(build_ir)`: the failing test. It raises AssertionError if the kernel `build_ir(N, D)` is
#   wrong (use `run_attention_kernel` and `ref_attention`), and returns quietly if it is right.

# %%
def _without_o_rescale(idx, old, corr, pv):
  # only the store into the output row o[d] (indexed by a loop variable), not l = l * corr + p (index 0)
  return idx.store(old + pv) if idx.src[1].op is not Ops.CONST else None


# o * corr + p * v, stored: the pattern of both updates, l and o[d]
_update = Pat(Ops.ADD, (Pat(Ops.MUL, (Pat(Ops.LOAD, name="old"), Pat.var("corr"))), Pat.var("pv")))
forget_o_rescale = [(Pat(Ops.STORE, (Pat.var("idx"), _update)), _without_o_rescale)]


def buggy_attention_ir(N: int, D: int) -> UOp:
  """online_attention_ir with the bug: o[d] = o[d] + p * v[j, d] (o is never rescaled when the maximum grows)."""
  return graph_rewrite(online_attention_ir(N, D), forget_o_rescale)


src = render_c(buggy_attention_ir(64, 16), "buggy")
print("\n".join(line for line in src.splitlines() if "acc" in line and "=" in line))

# %% [markdown]
# **Worked example.** The two recurrences side by side, in plain Python, on the worked example of 11.6 (scores
# 1, 3, 2 with values 10, 20, 30): at each key, the running maximum m, the correction factor, l and o. Where corr
# is 1 the two agree; read off where they part.

# %%
for name, rescale_o in (("correct", True), ("buggy", False)):
  m, l, o = -math.inf, 0.0, 0.0
  for j, (sj, vj) in enumerate(zip([1.0, 3.0, 2.0], [10.0, 20.0, 30.0])):
    m_new = max(m, sj)
    corr, p = math.exp(m - m_new), math.exp(sj - m_new)
    l, o, m = l * corr + p, (o * corr if rescale_o else o) + p * vj, m_new
    print(f"{name:7s} key {j}: m = {m:.0f}  corr = {corr:.4f}  l = {l:.4f}  o = {o:.4f}")
  print(f"{name:7s} o / l = {o / l:.4f}")

# %%
# TASK: find the bug
def bug_hiding_inputs(N: int, D: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """q, k, v ((N, D) float32 each) on which the buggy kernel matches NumPy to 1e-4."""
  ### BEGIN SOLUTION
  # every row's largest score comes first, so corr is 1 after key 0 and the missing rescale never matters
  rng = np.random.default_rng(0)
  q = np.abs(rng.standard_normal((N, D))).astype(np.float32)      # positive queries...
  k = (0.01 * rng.standard_normal((N, D))).astype(np.float32)     # ...small keys...
  k[0] = 1.0                                                      # ...and key 0 scores highest for every query
  v = rng.standard_normal((N, D)).astype(np.float32)
  return q, k, v
  ### END SOLUTION


def check_online_kernel(build_ir) -> None:
  """Raise AssertionError if the attention kernel build_ir(N, D) disagrees with NumPy."""
  ### BEGIN SOLUTION
  q, k, v = qkv(64, 16, seed=1)
  k *= np.linspace(0.1, 3, 64, dtype=np.float32)[:, None]         # later keys score higher: the maximum keeps growing
  assert matches(run_attention_kernel(build_ir, q, k, v, "checked"), ref_attention(q, k, v)), "disagrees with NumPy"
  ### END SOLUTION


# %%
q, k, v = bug_hiding_inputs(64, 16)
check("the buggy kernel on bug_hiding_inputs(64, 16), against NumPy",
      run_attention_kernel(buggy_attention_ir, q, k, v, "buggy"), ref_attention(q, k, v), atol=1e-4, rtol=1e-4)
check_online_kernel(online_attention_ir)
print("ok: check_online_kernel passes online_attention_ir")
check_raises("check_online_kernel(buggy_attention_ir)", lambda: check_online_kernel(buggy_attention_ir),
             AssertionError)

# %% [markdown]
# Expected: three lines that say `ok`: the buggy kernel passes on your inputs, your check passes the correct kernel
# and raises an AssertionError for the buggy one.

# %%
# TASK: find the bug
# Your answer, in Markdown, as ANSWER = """...""" in place of the raise.
# On which inputs does the buggy kernel pass, on which does it fail, and why?
### BEGIN SOLUTION
ANSWER = """
The bug only matters when corr = exp2(m_old - m_new) differs from 1, that is when the running maximum grows after
some weight has been accumulated in o. Then o keeps terms relative to the old maximum (too large by the factor
1 / corr) while l was rescaled correctly, so early keys get too much weight.

- **Passes:** every row's maximum comes first (corr = 1 after key 0: the kernel is exact), or all scores are tiny
  (|s| ≪ 1: corr ≈ 1, errors of the order of the scores, below a loose tolerance), or N = 1.
- **Fails:** scores of order 1 or more whose maximum appears late, e.g. keys scaled up along the sequence (the test
  above), or the worked example (scores 1, 3, 2: the maximum arrives at key 1). Random normal inputs usually fail
  too, but a test that only uses small random scores, or a handful of keys, may not.
"""
### END SOLUTION
show(ANSWER)

# %% tags=["hidden-test"]
# POINTS: find the bug 1
### BEGIN HIDDEN TESTS
_q, _k, _v = bug_hiding_inputs(64, 16)
record("q", _q); record("k", _k); record("v", _v)
# JUDGE
# what the buggy kernel computes (o never rescaled), in the grader's NumPy, on the student's inputs
_xs = [recorded[_name] for _name in "qkv"]
for _name, _x in zip("qkv", _xs):
  assert isinstance(_x, np.ndarray) and _x.shape == (64, 16) and _x.dtype == np.float32, (
    f"bug_hiding_inputs(64, 16): {_name} is {getattr(_x, 'shape', _x)!r:.40} of dtype {getattr(_x, 'dtype', None)}, "
    f"expected (64, 16) float32")
assert np.std(_xs[2]) > 0.1, (f"bug_hiding_inputs: v is nearly constant (std {np.std(_xs[2]):.3g}): any weights give "
                              f"its mean")
_buggy = gradelib.MISTAKES[next(m for m in gradelib.MISTAKES if m.startswith("o is never"))]
gradelib.expect_close(_buggy(*_xs, None), gradelib.attention_ref(*_xs),
                      "the buggy kernel on bug_hiding_inputs(64, 16) (it should pass there)")
### END HIDDEN TESTS

# %% tags=["hidden-test"]
# POINTS: find the bug 1
### BEGIN HIDDEN TESTS
# JUDGE
# each call in a fresh process on the notebook's definitions (fa, which its setup cell loads, given), on kernels the
# judge builds there with the grader's uopc, not the notebook's online_attention_ir or buggy_attention_ir: both under
# one name and one code, told apart only by what they compute; what the check raises is seen there
_kernels = """
from uopc.book import load_example as _load
from uopc.uop import Ops as _Ops, Pat as _Pat, graph_rewrite as _rewrite
fa = _load("flash_attention")
_update = _Pat(_Ops.ADD, (_Pat(_Ops.MUL, (_Pat(_Ops.LOAD, name="old"), _Pat.var("corr"))), _Pat.var("pv")))
_no_rescale = [(_Pat(_Ops.STORE, (_Pat.var("idx"), _update)),
                lambda idx, old, corr, pv: idx.store(old + pv) if idx.src[1].op is not _Ops.CONST else None)]
def _kernel(rules, build=fa.online_attention_ir):
  def online_attention_ir(N, D): return _rewrite(build(N, D), rules)
  return online_attention_ir
_right, _buggy = _kernel([]), _kernel(_no_rescale)
"""
_correct = raises("check_online_kernel(_right)", setup=_kernels)
assert "error" not in _correct, f"check_online_kernel(online_attention_ir) could not be called: {_correct['error']}"
assert _correct.get("raised") is None, (f"check_online_kernel fails the correct kernel: {_correct.get('raised')}: "
                                        f"{_correct.get('message', '')}")
gradelib.expect_raised(raises("check_online_kernel(_buggy)", setup=_kernels), "AssertionError",
                       "check_online_kernel(buggy_attention_ir): does not catch the missing rescale of o")
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 9 (★★★, optional, not graded): backward with recompute
#
# An exercise for those who want more: nothing of it is graded, and this notebook has no task cell for it. Write it in
# cells of your own, and check them with `reference_gradients` below.
#
# Implement the backward pass of attention with recomputation: store only O and the per-row log-sum-exp in the
# forward pass, and recompute P block by block in the backward pass to produce dQ, dK, dV. Check against
# `gradient()` applied to the unfused Tensor graph. NumPy is fine (float64 inside); no N x N array may appear: S
# and P exist only as tiles of `block` keys.
#
# With S = Q K^T / √D, P = softmax(S), O = P V and the incoming gradient dO:
# dV = P^T dO, dP = dO V^T, dS = P ∘ (dP - Δ) with Δ_i = Σ_j P_ij dP_ij = dO_i · O_i, dQ = dS K / √D and
# dK = dS^T Q / √D. Every one of them is a sum over tiles, and the tile of P is exp(S_tile - lse_i).

# %%
def reference_gradients(q, k, v, do) -> list[np.ndarray]:
  """dQ, dK, dV of loss = sum(attention(q, k, v) * dO) (so dloss/dO = dO): uopc's gradient() of the unfused
  Tensor graph, realized in one plan."""
  Q, K, V = Tensor(q), Tensor(k), Tensor(v)
  loss = (attention(Q, K, V) * Tensor(do)).sum()
  return [g.reshape(q.shape) for g in realize([g.uop for g in gradient(loss, [Q, K, V])])]


# %% tags=["answer"]
def flash_forward(q, k, v, block: int = 32) -> tuple[np.ndarray, np.ndarray]:
  """(O, lse): attention and each row's log-sum-exp of the scores, one block of keys at a time."""
  q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
  scale = 1 / math.sqrt(q.shape[1])
  m, l, o = np.full(len(q), -np.inf), np.zeros(len(q)), np.zeros((len(q), v.shape[1]))
  for j0 in range(0, len(k), block):                  # the online softmax, a block of keys per step
    s = q @ k[j0:j0 + block].T * scale                # (N, block)
    m_new = np.maximum(m, s.max(1))
    corr, p = np.exp(m - m_new), np.exp(s - m_new[:, None])
    l, o, m = l * corr + p.sum(1), o * corr[:, None] + p @ v[j0:j0 + block], m_new
  return o / l[:, None], m + np.log(l)


def flash_backward(q, k, v, o, lse, do, block: int = 32) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """(dQ, dK, dV) from the inputs, O, the log-sum-exp and dO, recomputing P one (block x block) tile at a time."""
  q, k, v, o, do = (np.asarray(x, np.float64) for x in (q, k, v, o, do))
  scale = 1 / math.sqrt(q.shape[1])
  delta = (do * o).sum(1)                             # Δ_i = Σ_j P_ij dP_ij = dO_i . O_i: no P needed
  dq, dk, dv = np.zeros_like(q), np.zeros_like(k), np.zeros_like(v)
  for j0 in range(0, len(k), block):
    kj, vj = k[j0:j0 + block], v[j0:j0 + block]
    for i0 in range(0, len(q), block):
      rows = slice(i0, i0 + block)
      p = np.exp(q[rows] @ kj.T * scale - lse[rows, None])   # the tile of P, recomputed from the saved lse
      dv[j0:j0 + block] += p.T @ do[rows]
      ds = p * (do[rows] @ vj.T - delta[rows, None])
      dq[rows] += ds @ kj * scale
      dk[j0:j0 + block] += ds.T @ q[rows] * scale
  return dq, dk, dv


# %% tags=["answer"]
N, D = 128, 32
q, k, v = qkv(N, D, seed=2)
do = np.random.default_rng(7).standard_normal((N, D)).astype(np.float32)   # a fixed random dO
o, lse = flash_forward(q, k, v)
s = q.astype(np.float64) @ k.T.astype(np.float64) / math.sqrt(D)
check("flash_forward: O against NumPy", o, ref_attention(q, k, v), atol=1e-4, rtol=1e-4)
check("flash_forward: lse against NumPy", lse, np.log(np.exp(s).sum(1)), atol=1e-4, rtol=1e-4)
dq, dk, dv = flash_backward(q, k, v, o, lse, do)
for name, mine, theirs in zip(("dQ", "dK", "dV"), (dq, dk, dv), reference_gradients(q, k, v, do)):
  check(f"flash_backward: {name} against uopc's gradient()", mine, theirs, atol=1e-4, rtol=1e-4)

# %% [markdown]
# ## Quiz
#
# Answer in a markdown cell of your own below; a person reads it, the grader does not.
#
# **1. What are the two costs on either side of a fusion decision?**
#
# **2. Why does unfused attention make six passes over N x N data? Name them.**
#
# **3. With fuse_reduce=True and FlashOpt at D = 64, how many times is each q_i . k_j computed, and why?**
#
# **4. Write the recurrences for m_j, l_j and o_j in online softmax.**
#
# **5. Why is the correction factor exp(m_{j-1} - m_j) allowed to multiply the whole running sum?**
#
# **6. In the O(N^3) bug, what did the unsimplified index mention, and why did that move the accumulator?**
#
# **7. Why can a value-comparison test not catch the O(N^3) bug?**
#
# **8. In FlashAttention's backward pass, why is recomputing P cheaper than storing it?**

# %% [markdown] tags=["answer"]
# **Answers.**
#
# **1. What are the two costs on either side of a fusion decision?**
# Memory traffic (writing and re-reading the intermediate, plus a launch) against recomputation (FLOPs the fused
# consumer repeats because it reads each producer value more than once).
#
# **2. Why does unfused attention make six passes over N x N data? Name them.**
# S is written by the Q K^T kernel and read by the max, sum and P kernels (four passes); P is written by its
# kernel and read by P V (two passes).
#
# **3. With fuse_reduce=True and FlashOpt at D = 64, how many times is each q_i . k_j computed, and why?**
# Six: once in the max pass, once in the sum pass, and once in each of the four output passes, because the head
# dimension is upcast 16 at a time and each group of 16 output columns makes its own pass (Exercise 2 counted them
# in the C).
#
# **4. Write the recurrences for m_j, l_j and o_j in online softmax.**
# m_j = max(m_{j-1}, s_j); l_j = l_{j-1} e^{m_{j-1} - m_j} + e^{s_j - m_j};
# o_j = o_{j-1} e^{m_{j-1} - m_j} + e^{s_j - m_j} v_j; the answer is o_N / l_N.
#
# **5. Why is the correction factor exp(m_{j-1} - m_j) allowed to multiply the whole running sum?**
# Every term in the sum was computed relative to m_{j-1}; re-expressing each relative to m_j multiplies it by the
# same factor, independent of k, so the factor comes out of the sum (Exercise 3 is the same argument for two sets).
#
# **6. In the O(N^3) bug, what did the unsimplified index mention, and why did that move the accumulator?**
# ((i*N + j)//N) % N mentions j; the reduce lowering places accumulators inside every loop the output index
# mentions, so the row max and sum were recomputed for every j.
#
# **7. Why can a value-comparison test not catch the O(N^3) bug?**
# The output is identical (the recomputed reductions give the same values); only the amount of work changes. Only
# timing or structural assertions on the generated code (like `count_key_passes`) can detect it.
#
# **8. In FlashAttention's backward pass, why is recomputing P cheaper than storing it?**
# Storing P costs O(N²) writes and reads of slow global memory; recomputing it from Q, K and the saved log-sum-exp
# costs O(N² D) FLOPs on fast tensor cores, block by block, entirely on chip (the optional Exercise 9 does the same
# on a CPU).

# %% [markdown]
# # Chapter 12 exercises: GPUs
#
# The exercises of Chapter 12 (`chapters/ch12_gpus`), run on the CL device: OpenCL on PoCL, a CPU that runs GPU
# programs with real work-groups, local memory and barriers. The same rules as above: a task cell, visible checks,
# hidden tests with the points below.
#
# | exercise | task name | points |
# |---|---|---|
# | ★ 10 | block sizes | 1 |
# | ★ 11 | warp transactions | 2 |
# | ★★ 12 | row max kernel | 3 |

# %%
import warnings
import pyopencl as cl
from uopc.runtime.cl import cl_queue


def run_cl(src: str, name: str, arrays: list, out: np.ndarray, global_size: tuple, local_size: tuple) -> np.ndarray:
  """Build src, launch `name` over global_size in work-groups of local_size on arrays + [out], return out."""
  cl_ctx, cl_q = cl_queue()   # the OpenCL device uopc chose (PoCL here; CLUnavailable says why there is none)
  with warnings.catch_warnings():   # a non-empty build log is a warning
    warnings.simplefilter("ignore")
    kernel = cl.Kernel(cl.Program(cl_ctx, src).build(), name)
  mf = cl.mem_flags
  bufs = [cl.Buffer(cl_ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=a) for a in arrays]
  out_buf = cl.Buffer(cl_ctx, mf.WRITE_ONLY, out.nbytes)
  kernel(cl_q, global_size, local_size, *bufs, out_buf)
  cl.enqueue_copy(cl_q, out, out_buf)
  return out

# %% [markdown]
# ## Exercise 10 (★): block sizes
#
# A launch needs a work-group size for each of its (up to three) axes. Write the default chooser of Section 12.3
# with its quarter rule, as `launch_axes` applies it. The *group limit* is `limit` work-items (256 by default), or
# the launch's work-items (the product of `sizes`) divided by `min_groups` (4 by default: a quarter of the launch),
# rounded down and at least 1, where that is smaller: a launch with enough work-items then has at least `min_groups`
# work-groups to spread over the compute units. For each axis in order (dimension 0 first), choose the largest
# work-group that divides the axis, keeping the product of all the work-groups within the group limit. A divisor,
# so the grid covers each axis exactly and no work-item needs a bounds check.
# uopc's own chooser, `uopc.codegen.gpudims.default_block`, is this answer: while this week is graded it raises
# `ShortcutUnavailable`, so a `block_sizes` that calls it (or `launch_axes`, which does) scores 0.
#
# **Worked example.** One axis of 48 work-items: 48 / 4 = 12 is below 256, so the group limit is 12, and the
# largest divisor of 48 within it is 12: four work-groups of 12. (With `min_groups=1` the limit would be 48: one
# work-group of 48.)

# %%
group_limit = min(256, max(1, 48 // 4))
print("group limit:", group_limit, "; divisors of 48 within it:", [d for d in range(1, group_limit + 1) if 48 % d == 0])

# %%
# TASK: block sizes
def block_sizes(sizes: list[int], limit: int = 256, min_groups: int = 4) -> list[int]:
  """Work-items per work-group for each axis: the largest divisor of the axis within what the group limit (the
  smaller of `limit` and the launch's work-items // min_groups, at least 1) leaves."""
  ### BEGIN SOLUTION
  out, left = [], min(limit, max(1, math.prod(sizes) // min_groups))
  for n in sizes:
    b = max(d for d in range(1, min(n, left) + 1) if n % d == 0)
    out.append(b)
    left //= b
  return out
  ### END SOLUTION


# %%
print(block_sizes([1024, 1024]), block_sizes([64, 64]), block_sizes([37, 5]), block_sizes([257]))
for sizes, limit, min_groups, want in (([1024, 1024], 256, 4, [256, 1]), ([64, 64], 256, 4, [64, 4]),
                                       ([48], 256, 4, [12]), ([37, 5], 256, 4, [37, 1]), ([37, 5], 256, 1, [37, 5]),
                                       ([257], 256, 4, [1]), ([6, 6, 6], 16, 4, [6, 2, 1]), ([3], 256, 4, [1])):
  check(f"block_sizes({sizes}, {limit}, min_groups={min_groups})", block_sizes(sizes, limit, min_groups), want)

# %% [markdown]
# Expected: four lists (the group limit of (37, 5) is 46: its first axis takes 37 of it, leaving 1 for the
# second), then eight `ok` lines.

# %% tags=["hidden-test"]
# POINTS: block sizes 1
# SHORTCUTS: uopc.codegen.gpudims.default_block
### BEGIN HIDDEN TESTS
_cases = [([1024, 1024], 256, 4), ([64, 64], 256, 4), ([37, 5], 256, 4), ([37, 5], 256, 1), ([257], 256, 4),
          ([48], 256, 4), ([16, 4], 256, 4), ([1000, 30, 7], 128, 4), ([7, 11, 13], 64, 4), ([4096], 1024, 4),
          ([6, 6, 6], 16, 4), ([2, 3], 256, 4), ([60, 60], 256, 8), (seeded(15).integers(1, 300, 3).tolist(), 256, 4),
          (seeded(16).integers(1, 40, 2).tolist(), 256, 4)]
for _sizes, _limit, _groups in _cases:
  record(f"block_sizes({_sizes}, {_limit}, min_groups={_groups})", block_sizes(_sizes, _limit, _groups))
# JUDGE
from uopc.codegen.gpudims import default_block as _default_block
_cases = [([1024, 1024], 256, 4), ([64, 64], 256, 4), ([37, 5], 256, 4), ([37, 5], 256, 1), ([257], 256, 4),
          ([48], 256, 4), ([16, 4], 256, 4), ([1000, 30, 7], 128, 4), ([7, 11, 13], 64, 4), ([4096], 1024, 4),
          ([6, 6, 6], 16, 4), ([2, 3], 256, 4), ([60, 60], 256, 8), (seeded(15).integers(1, 300, 3).tolist(), 256, 4),
          (seeded(16).integers(1, 40, 2).tolist(), 256, 4)]
for _sizes, _limit, _groups in _cases:
  _what = f"block_sizes({_sizes}, {_limit}, min_groups={_groups})"
  _got = recorded[_what]
  _want = list(_default_block(_sizes, min(_limit, max(1, math.prod(_sizes) // _groups))))   # the quarter rule
  gradelib.expect_equal(list(_got) if isinstance(_got, tuple) else _got, _want, _what)
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 11 (★): warp transactions
#
# The 32 work-items of a warp load together, and memory serves them in 128-byte segments. Write
# `warp_transactions(index, n_warps)`: `index(i)` is the element (a float, 4 bytes) that work-item i loads; count,
# for each of the first `n_warps` warps (work-items 0-31, 32-63, ...), the distinct 128-byte segments its loads fall
# in, and return the total. Then compare the patterns below, and explain the last line in one sentence.

# %%
# TASK: warp transactions
def warp_transactions(index, n_warps: int, itemsize: int = 4, warp: int = 32, segment: int = 128) -> int:
  """Memory transactions the first n_warps warps need when work-item i loads element index(i)."""
  ### BEGIN SOLUTION
  return sum(len({index(w * warp + lane) * itemsize // segment for lane in range(warp)}) for w in range(n_warps))
  ### END SOLUTION


# %%
for name, fn in [("x[i]", lambda i: i), ("x[2*i]", lambda i: 2 * i), ("x[1024*i]", lambda i: 1024 * i),
                 ("tile read down columns, x[(i%32)*32 + i//32]", lambda i: (i % 32) * 32 + i // 32)]:
  print(f"{name:<46} {warp_transactions(fn, 4):>4} transactions for 4 warps")
for name, fn, itemsize, want in (("x[i]", lambda i: i, 4, 4), ("x[2*i]", lambda i: 2 * i, 4, 8),
                                 ("x[2*i], 8-byte elements", lambda i: 2 * i, 8, 16),
                                 ("x[1024*i]", lambda i: 1024 * i, 4, 128),
                                 # warps that differ: warp w reads with stride w + 1 (1, 2, 3 and 4 segments)
                                 ("x[(i//32 + 1) * i]", lambda i: (i // 32 + 1) * i, 4, 10)):
  check(f"warp_transactions({name}, 4 warps, itemsize={itemsize})", warp_transactions(fn, 4, itemsize), want)

# %% [markdown]
# Expected: four lines of counts (the first three are those the checks expect), then five `ok` lines.

# %% tags=["hidden-test"]
# POINTS: warp transactions 2
### BEGIN HIDDEN TESTS
for _name, _fn, _warps, _size in [
    ("x[i]", lambda i: i, 4, 4), ("x[2*i]", lambda i: 2 * i, 4, 4), ("x[1024*i]", lambda i: 1024 * i, 2, 4),
    ("x[7], a broadcast", lambda i: 7, 3, 4), ("x[i+16], misaligned by half a segment", lambda i: i + 16, 1, 4),
    ("doubles x[i], 256 bytes a warp", lambda i: i, 2, 8),
    ("x[(i%32)*32 + i//32]", lambda i: (i % 32) * 32 + i // 32, 4, 4),
    ("x[(i//32 + 2) * i], a stride per warp", lambda i: (i // 32 + 2) * i, 3, 4)]:
  record(_name, warp_transactions(_fn, _warps, itemsize=_size))
# JUDGE
# warp w reads elements (w + 2) * i: its own stride, so the warps' counts differ (a count of warp 0 times n fails)
_STRIDED = sum(len({(_w * 32 + _l) * (_w + 2) * 4 // 128 for _l in range(32)}) for _w in range(3))
for _name, _warps, _size, _want in [("x[i]", 4, 4, 4), ("x[2*i]", 4, 4, 8), ("x[1024*i]", 2, 4, 64),
                                    ("x[7], a broadcast", 3, 4, 3), ("x[i+16], misaligned by half a segment", 1, 4, 2),
                                    ("doubles x[i], 256 bytes a warp", 2, 8, 4), ("x[(i%32)*32 + i//32]", 4, 4, 128),
                                    ("x[(i//32 + 2) * i], a stride per warp", 3, 4, _STRIDED)]:
  gradelib.expect_equal(recorded[_name], _want,
                        f"warp_transactions for {_name}, {_warps} warps of {_size}-byte elements")
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 12 (★★): a two-stage work-group reduction in OpenCL C
#
# Chapter 12's group sum gives each work-item one element. Rows are usually longer than a work-group, and a
# reduction need not be a sum. Write `row_max_kernel(width, n)`: the OpenCL C source of
# `__kernel void row_max(__global const float* x, __global float* out)` that stores in `out[r]` the largest element
# of row r of a row-major (rows, n) matrix, with one work-group of `width` work-items per row (width a power of two,
# at most 256; n a multiple of width). In two stages:
# 1. work-item l reads elements l, l + width, l + 2 width, ... of its row (so that neighbouring work-items read
#    neighbouring addresses) and keeps their maximum in a register; it must also be right for rows whose elements
#    are all negative;
# 2. the work-items store their maxima in a `__local` array and combine pairs in a tree, halving the active
#    work-items each step, with `barrier(CLK_LOCAL_MEM_FENCE)` wherever one work-item's store must be seen by
#    another's load; work-item 0 stores the row's maximum.
#
# `run_cl(src, "row_max", [x], out, (rows * width,), (width,))` runs it. OpenCL C has `fmax` and `INFINITY`. The
# grader builds and launches your source itself; PoCL runs a group's work-items one after another, so a missing
# barrier may still give right values there: the grader reads the source for them, and a race scores 0.
#
# **Worked example.** Both stages in NumPy, for one row of n = 16 elements and a work-group of width = 4: stage 1
# leaves work-item l the maximum of elements l, l + 4, l + 8 and l + 12 (a column of the row seen as 4 x 4), and
# the tree halves 4 values to 2, then 1.

# %%
row = np.random.default_rng(20).permutation(16).astype(np.float32) - 20   # all negative
stage1 = row.reshape(4, 4).max(0)             # work-item l: elements l, l + 4, l + 8, l + 12
print("row:         ", row)
print("after stage 1:", stage1)
tree = stage1.copy()
for s in (2, 1):                              # the tree: work-items below s combine slot l and slot l + s
  tree[:s] = np.maximum(tree[:s], tree[s:2 * s])
  print(f"tree, s = {s}:   ", tree[:s])
check("the worked example's maximum", tree[0], row.max())

# %%
# TASK: row max kernel
def row_max_kernel(width: int, n: int) -> str:
  """OpenCL C for row_max(x, out): out[r] = the largest element of row r of a (rows, n) matrix, one work-group
  of `width` work-items per row: strided maxima in registers, then a tree in local memory."""
  ### BEGIN SOLUTION
  return f"""__kernel void row_max(__global const float* x, __global float* out) {{
  __local float tile[{width}];
  int lid = get_local_id(0), row = get_group_id(0);
  float m = -INFINITY;
  for (int c = lid; c < {n}; c += {width}) m = fmax(m, x[row * {n} + c]);
  tile[lid] = m;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int s = {width // 2}; s > 0; s >>= 1) {{
    if (lid < s) tile[lid] = fmax(tile[lid], tile[lid + s]);
    barrier(CLK_LOCAL_MEM_FENCE);
  }}
  if (lid == 0) out[row] = tile[0];
}}"""
  ### END SOLUTION


# %%
# read from the source, not from a run: PoCL runs a work-group's items one after another, so a missing barrier
# still gives right values there (uopc.races: every read of another item's slot after a barrier, on every way to it)
from uopc.races import check_local_barriers
check_local_barriers("row_max_kernel(64, 512): each read of another work-item's slot after a barrier",
                     row_max_kernel(64, 512))

# %%
# %%needs CL
_x = np.random.default_rng(12).standard_normal((6, 512)).astype(np.float32)
_x[2] -= 10                                   # a row whose elements are all negative
_x[4, 511] = 50                               # a maximum in the last element a work-item reads
got = run_cl(row_max_kernel(64, 512), "row_max", [_x], np.empty(6, np.float32), (6 * 64,), (64,))
check("row_max_kernel(64, 512) on a (6, 512) matrix against NumPy", got, _x.max(1))
_x = np.random.default_rng(13).standard_normal((5, 128)).astype(np.float32) - 10   # all negative
got = run_cl(row_max_kernel(128, 128), "row_max", [_x], np.empty(5, np.float32), (5 * 128,), (128,))
check("row_max_kernel(128, 128) (one element a work-item), all negative, against NumPy", got, _x.max(1))

# %% [markdown]
# Expected: three `ok` lines: the barriers read from the source (on any machine), then the two runs on device CL.

# %% tags=["hidden-test"]
# POINTS: row max kernel 3
### BEGIN HIDDEN TESTS
for _rows, _width, _n in [(7, 128, 1024), (3, 256, 256), (9, 16, 80), (1, 2, 6), (4, 32, 4096)]:
  record(f"src {_width}, {_n}", str(row_max_kernel(_width, _n)))
# JUDGE
# built and launched by the grader (PoCL, in a sandbox of its own), never through the notebook's run_cl
from uopc.races import opencl_local_races as _opencl_local_races
for _rows, _width, _n in [(7, 128, 1024), (3, 256, 256), (9, 16, 80), (1, 2, 6), (4, 32, 4096)]:
  _what = f"row_max_kernel({_width}, {_n})"
  _src = gradelib.text(recorded[f"src {_width}, {_n}"], _what)
  if _races := _opencl_local_races(_src): raise AssertionError(f"{_what}: {_races[0]}")   # as the visible check reads
  _x = seeded(_rows, _width, _n).standard_normal((_rows, _n)).astype(np.float32)
  _x[0] -= 10                                 # every element of the first row negative
  _out = launch_cl(_src, "row_max", [_x], ((_rows,), "float32"), (_rows * _width,), (_width,), what=_what)
  gradelib.expect_close(_out, _x.max(1), f"row_max on a ({_rows}, {_n}) matrix, work-groups of {_width}")
  gradelib.expect_barriers(_src, _what)
### END HIDDEN TESTS
