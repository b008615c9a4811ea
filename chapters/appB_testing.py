# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # Appendix B. Testing a compiler
#
# A compiler is tested four ways, and uopc's own tests (`tests/`, run by `make test`; B.6 counts them) use all four.
# Each catches a kind of bug the others cannot:
#
# | kind | asks | catches | cannot catch |
# |---|---|---|---|
# | **value** | right numbers? | wrong math, wrong indices | slow but right code; a race the device hides¹ |
# | **structural** | the code shaped as meant? | work in the wrong loop, a lost tile | a right-looking wrong value |
# | **property** | a rule true on every input? | the edge case nobody wrote down | what the property omits |
# | **performance** | as fast as its peers (a ratio)? | a slowdown against peers | a wrong value; a shared slowdown² |
#
# ¹ On PoCL, which runs a work-group's work-items in a fixed order, a missing barrier gives the same numbers on every
# run: wrong ones every time or right ones every time (12.2 removes each barrier of a group sum; 13.4's tiled GEMM
# without its second barrier). A value test catches the first and passes the second, and a GPU may fail either now
# and then; chapter 13 finds the race with Oclgrind, a checker that watches every access, not with values.
# ² Asserted as an absolute time instead of a ratio, a performance test measures the machine: it fails on a slower
# or busier one and misses a slowdown on a faster one (B.5).
#
# This appendix shows each on uopc itself, and ends with the book's point from section 11.5: the O(N³) bug gave
# the right answer, so no value test could have caught it.

# %%
import math
import numpy as np
from uopc.book import load_example, reshape_simplify
from uopc.kernelize import make_plan
from uopc.tensor import Tensor

book = load_example("flash_attention")
rng = np.random.default_rng(0)

# %% [markdown]
# ## B.1 Value tests: against NumPy, in float64
#
# A value test runs a uopc program and compares it with an independent computation. Two rules make such a test
# both sensitive and stable. The reference is computed in **float64**, so that its own rounding is far below
# the tolerance; and the tolerance is chosen from what float32 arithmetic can promise, not from what one run
# happened to give. float32 rounds each operation with a relative error of up to eps = 2^-23 (about 1.2e-7), and
# the errors add up along a sum, so the tolerance grows with the length of the longest sums: in attention, the D
# terms of a score and the N terms of the softmax's sum and of P V. `tolerance` below allows 8 eps per term, for
# inputs of order one.

# %%
EPS32 = float(np.finfo(np.float32).eps)   # 2^-23: float32's relative rounding error per operation


def tolerance(n: int, d: int) -> float:
  """The max error allowed for float32 attention over n keys with head dimension d (inputs of order one)."""
  return 8 * EPS32 * (n + d)


def reference_attention(q, k, v):
  """softmax(q k^T / sqrt(D)) v in float64: the truth uopc's float32 kernels are measured against."""
  q, k, v = (x.astype(np.float64) for x in (q, k, v))
  s = q @ k.T / math.sqrt(q.shape[1])
  p = np.exp(s - s.max(-1, keepdims=True))
  return (p / p.sum(-1, keepdims=True)) @ v


for n, d in [(64, 16), (100, 24), (1, 8), (3, 1)]:   # odd sizes, one row, a head dimension of one
  q, k, v = (rng.standard_normal((n, d)).astype(np.float32) for _ in range(3))
  err = np.abs(book.attention(Tensor(q), Tensor(k), Tensor(v)).numpy() - reference_attention(q, k, v)).max()
  tol = tolerance(n, d)
  print(f"N={n:3d} D={d:2d}: max error {'below' if err < tol else 'ABOVE'} its tolerance {tol:.1e}")

# %% [markdown]
# The sizes are chosen to break things: a size that is not a multiple of any tile (100, 24), one row, a head
# dimension of one. The week-6 grader asserts the same way, and its messages say *which* input failed, by how
# much, and whether whole rows are NaN: a test is also a message to whoever breaks it.
#
# ## B.2 Structural tests: the shape of the generated code
#
# Some properties of a kernel are invisible in its values: where a loop is, where an accumulator starts, how
# many times a value is computed. uopc's structural tests read them off the compiled plan rather than matching
# C text, so that a renderer change that keeps the structure keeps the tests green. The kernelizer already
# counts, from the loop program, how many times each fused reduction is evaluated per element it produces
# (`Kernel.recompute`, printed by `Plan.explain()`). For the fused attention of section 11.4:

# %%
N, D = 256, 64
q, k, v = (Tensor(rng.standard_normal((N, D)).astype(np.float32)) for _ in range(3))


def evaluations(plan) -> dict[str, float]:
  """Evaluations per element of every reduction fused into the plan's last kernel, by shape."""
  return {f"{u.arg[0].name.lower()}{list(u.shape)}": n for u, n in plan.kernels[-1].recompute.items()}


fused = make_plan([book.attention(q, k, v).uop], True, book.FlashOpt)
print(evaluations(fused))

# %% [markdown]
# Q K^T (`add[256, 256]`) is computed six times per element: once by the max pass, once by the sum pass, and
# once per 16-wide block of the 64 output columns, as section 11.4 counts. The row max and the row sum once each.
# A structural test asserts exactly that, as `tests/spine/test_ch06_rangeify.py` does:

# %%
ev = evaluations(fused)
assert ev["max[256]"] == 1 and ev["add[256]"] == 1   # row statistics: once per row
assert ev["add[256, 256]"] == 6                        # Q K^T: 11.4's count for FlashOpt's upcast of 16
print("structure as designed")

# %% [markdown]
# ## B.3 The bug a value test cannot see
#
# Section 11.5's bug: without the simplification in rangeify's RESHAPE rule, the row max's index *mentioned* the
# key loop, so the accumulator was placed inside it and every key recomputed the whole row's max. The answer was
# unchanged. Run both versions as a value test would:

# %%
ref = reference_attention(q.numpy(), k.numpy(), v.numpy())


def fused_attention() -> np.ndarray:
  old = Tensor.fuse_reduce, Tensor.opt
  Tensor.fuse_reduce, Tensor.opt = True, book.FlashOpt
  try: return book.attention(q, k, v).numpy()
  finally: Tensor.fuse_reduce, Tensor.opt = old


for on in (True, False):
  with reshape_simplify(on):
    err = np.abs(fused_attention() - ref).max()
    plan = make_plan([book.attention(q, k, v).uop], True, book.FlashOpt)
    print(f"reshape simplify {'on ' if on else 'off'}: value test {'passes' if err < tolerance(N, D) else 'FAILS'}, "
          f"evaluations per element {evaluations(plan)}")

# %% [markdown]
# The value test passes twice. The structural test fails on the broken version: the row max's accumulator now sits
# inside the key loop, so the max is recomputed there, 2048 evaluations per element instead of one (eight for each
# of the 256 keys), and Q K^T thousands of times instead of six. That count is
# exact and machine-independent, so it is a unit test; the time it causes (the book measured hundreds of times
# slower at N = 512) is a benchmark, not a unit test, because a time depends on the machine and its load.
#
# ## B.4 Property tests: a rule on every input
#
# The simplifier's rules (chapter 3) must never change a value. A property test states that once and lets a
# generator search for a counterexample: random index expressions over loop variables with known bounds,
# evaluated before and after `simplify` at random points. uopc's tests do this with hypothesis
# (`tests/spine/test_ch03_uop.py`); here, the same idea with a seeded generator, first on uopc's rules:

# %%
from uopc.symbolic import evaluate, simplify
from uopc.uop import UOp, range_

LOOPS = [range_(n, k) for k, n in enumerate((4, 7, 16))]


def random_index(r: np.random.Generator, depth: int = 3) -> UOp:
  """An integer expression of loop variables and small constants, as rangeify makes them."""
  if depth == 0 or r.random() < 0.25:
    return LOOPS[r.integers(len(LOOPS))] if r.random() < 0.7 else UOp.const(int(r.integers(0, 9)))
  a, b = random_index(r, depth - 1), int(r.integers(1, 9))
  op = r.integers(4)
  return a * b if op == 0 else a + random_index(r, depth - 1) if op == 1 else a // b if op == 2 else a % b


def counterexample(simplifier, trials: int = 400, seed: int = 0):
  """The first (expression, loop values) where the simplifier changes the value, or None."""
  r = np.random.default_rng(seed)
  for _ in range(trials):
    e = random_index(r)
    s = simplifier(e)
    for _ in range(5):
      env = {x: int(r.integers(x.src[0].arg)) for x in LOOPS}
      if evaluate(e, env) != evaluate(s, env): return e, env
  return None


print("uopc's simplify:", "no counterexample in 400 expressions" if counterexample(simplify) is None else "BROKEN")

# %% [markdown]
# Now plant a bug: a rule that looks right, `(x // c) * c -> x`, true only when x is a multiple of c. The property
# test finds an expression where it is wrong, without anyone thinking of that case:

# %%
from uopc.symbolic import symbolic_rules
from uopc.uop import Ops, Pat, graph_rewrite

wrong_rule = (Pat(Ops.MUL, (Pat(Ops.IDIV, (Pat.var("x"), Pat.cvar("c"))), Pat.cvar("c"))), lambda x, c: x)
broken = lambda u: graph_rewrite(u, [wrong_rule] + symbolic_rules)
found = counterexample(broken)
print("planted rule:", "caught" if found is not None else "not caught")

# %% [markdown]
# A property test is only as good as its generator: this one makes the expressions rangeify makes (sums,
# products, `//` and `%` by small constants of bounded loop variables). A generator that never produced a `//`
# would never have found the planted bug.
#
# ## B.5 Performance tests: ratios, in one run, outside the unit tests
#
# A unit test that asserts an absolute time fails on a slower machine, on a loaded one, and on the day a neighbour
# runs a benchmark; a test that passes there would not notice a real slowdown on a fast machine. uopc therefore
# never asserts a time in `tests/`. Its benchmarks (`python -m uopc.bench ...`) print **ratios against peers
# measured in the same run**, best of k, with the machine's CPU, cores and compiler in the header. By default each
# peer is timed in a Python process of its own, one after another (`--method isolated`: two OpenMP runtimes in one
# process disturb each other, `uopc.bench.isolated`); `--method interleaved` runs the peers in turn in one process.
# The cell below does the simplest thing, best of k in this process:

# %% tags=["nbval-ignore-output"]
from uopc.helpers import best_of

unfused_s = best_of(lambda: book.attention(q, k, v).numpy(), k=5)
fused_s = best_of(fused_attention, k=5)
numpy_s = best_of(lambda: reference_attention(q.numpy(), k.numpy(), v.numpy()), k=5)
print(f"N={N}: unfused {unfused_s / numpy_s:.2f}x NumPy's time (float64), fused {fused_s / unfused_s:.2f}x unfused")

# %% [markdown]
# The ratio is the result; the times behind it are only where it came from. What a unit test *can* assert about
# performance is what B.2 and B.3 did: the work, counted from the generated program, which is the same on every
# machine.
#
# ## B.6 Running uopc's own tests
#
# `make test` runs everything: ruff, the unit tests (`tests/`, by chapter: `pytest -m ch06` runs chapter 6's),
# strict nbval on every notebook (each printed output is compared with the committed one: a regression test of
# the generated code), the notebook format check and the prose check (every number the prose of a notebook
# states must be printed by that notebook, or be the book's; so must its counts, its "best of k", and the numbers
# a "far from" or "comparable" reads). How many unit tests there are, as pytest collects them (the count grows
# with the repository, so this cell's output is not compared):

# %% tags=["nbval-ignore-output"]
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(load_example.__code__.co_filename).resolve().parents[1]   # the repository this uopc came from
collect = ["--collect-only", "-q", "--color=no", "-p", "no:cacheprovider", "tests/"]
collected = subprocess.run([sys.executable, "-m", "pytest", *collect], cwd=ROOT, capture_output=True, text=True).stdout
n_tests = re.search(r"^(\d+) tests? collected", collected, re.M)
files = {line.split("::")[0] for line in collected.splitlines() if "::" in line}
print(f"{n_tests.group(1)} tests collected, in {len(files)} files of tests/" if n_tests else
      f"pytest collected nothing:\n{collected[-2000:]}")

# %% [markdown]
# One chapter's tests from inside a notebook:

# %%
r = subprocess.run([sys.executable, "-m", "pytest", "-q", "--color=no", "-p", "no:cacheprovider", "-m", "ch05",
                    "tests/spine/test_ch05_render.py"], cwd=ROOT, capture_output=True, text=True)
print("chapter 5's tests:", "all passed" if r.returncode == 0 else "FAILED\n" + r.stdout[-3000:])

# %% [markdown]
# ## B.7 Exercises
#
# 1. ★ Add the case (N, D) = (2, 2000) to B.1's sizes. Which tolerance still holds, and why does the head
#    dimension, not N, set it?
# 2. ★★ Write a structural test for chapter 10's register tile: from `Plan.kernels[k].src` or the loop program,
#    assert that a GEMM kernel keeps 16 accumulators live in its inner loop.
# 3. ★★ Extend `random_index` with `max` and comparisons (`<`), and check the simplifier's bounds rules. What must
#    the generator know about the loop variables for the property to be true?
# 4. ★★★ Plant a bug in the kernelizer (e.g. drop the `fuse_reduce` check before `stage_broadcast_compute`) and
#    find which of uopc's tests catch it: `make test` tells you; is it a value, a structural or a plan test?
