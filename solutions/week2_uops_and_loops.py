# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # Week 2 assignment: the UOp, and loops as graphs
#
# The exercises of Chapter 3 (the UOp: rewrite rules and `simplify`) and Chapter 4 (loops as graphs: the AFTER
# idiom). Each exercise has
# - a **task cell** (it starts with `# TASK: <name>`): in the student version the solution is replaced by
#   `raise NotImplementedError("<name>")`. Replace that line with your code; keep the function names and
#   signatures, the grader calls them;
# - a **worked example** before it, solved, on a neighbouring problem;
# - **visible checks** right after it (`check(...)` from `uopc.checks`): each prints `ok: <what>`, or stops
#   with an AssertionError naming what is wrong, expected against got. `make check WEEK=2` runs them task by task, as
#   the grader runs the notebook (with threads: a kernel whose threads race fails, and the message says so), and
#   `make check WEEK=2 NB=<your copy>` does the same for your copy of this notebook;
# - **hidden tests** the grader runs after your whole notebook, which score the points below (they are not in your
#   tree). A *structure* point counts only once the task's values are right.
#
# | exercise | task name | points |
# |---|---|---|
# | 3.2 | the divmod rule | 2 |
# | 3.3 | mod of a mod | 2 |
# | 4.2 | running argmax | 3 (values 2, structure 1) |
# | 4.3 | prefix sum | 2 |
#
# The whole notebook runs in a few seconds.

# %% [markdown]
# ## Setup
#
# uopc's UOp, patterns and simplifier (Chapter 3) and the loop builders of Chapter 4. `check_rules` is the test of
# 3.6: random integer expressions, evaluated with C semantics before and after a rewrite, at random points.

# %%
import math
import random
import numpy as np
from uopc.dtype import dtypes
from uopc.uop import AxisType, Ops, ParamArg, Pat, UOp, graph_rewrite, range_, sink
from uopc.symbolic import evaluate, ranges_in, simplify, symbolic_rules  # noqa: F401 (simplify: yours to use in your rules)
from uopc.render_c import render_c
from uopc.runtime import Program
from uopc.checks import check, check_threads_agree
from uopc.races import check_no_races

f32, i32 = dtypes.f32, dtypes.i32


def buf(slot: int, n: int, dtype=f32) -> UOp: return UOp(Ops.BUFFER, (), ParamArg(slot, dtype, (n,)))
def alloc(slot: int, n: int = 1, dtype=f32) -> UOp: return UOp(Ops.ALLOC, (), ParamArg(slot, dtype, (n,)))


def simplify_with(e: UOp, rules: list) -> UOp:
  """e rewritten by uopc's symbolic rules followed by `rules`, to a fixed point."""
  return graph_rewrite(e, symbolic_rules + rules)


def disagreement(e: UOp, rewritten: UOp, points: int = 200, seed: int = 0) -> dict | None:
  """A point (loop variable -> value) where e and rewritten differ, or None if they agree at every point tried."""
  rnd = random.Random(seed)
  rs = sorted(set(ranges_in(e)) | set(ranges_in(rewritten)), key=lambda r: r.arg[0])
  for _ in range(points):
    env = {r: rnd.randrange(r.src[0].arg) for r in rs}
    if evaluate(e, env) != evaluate(rewritten, env): return env
  return None


i, j = range_(64, 0), range_(48, 1)

# %% tags=["hidden-setup"]
# the grader's side of the hidden tests (scripts/grader/solution_setup.py): record, raised and seeded for the probes;
# recorded, gradelib's checks and time_kernels for the judges. Grading splits each hidden test at `# JUDGE`: the probe
# runs in the sandbox after the student's cells, the judge in the grader's own process on the values it recorded.
import sys as _sys
from pathlib import Path as _Path
import uopc as _uopc
_sys.path.insert(0, str(_Path(_uopc.__file__).resolve().parents[1] / "scripts" / "grader"))
from solution_setup import gradelib, raised, record, recorded, seeded, time_kernels  # noqa: F401
from solution_setup import run_c, run_c_threads  # noqa: F401
import re
from uopc.symbolic import evaluate as _evaluate, simplify as _simplify
from uopc.uop import range_ as _range


def _points(n: int = 200) -> list[tuple[int, int]]:
  """(i, k) at which a probe evaluates a rewritten expression (i in range 64, k in range 100): seeded, so the
  judge has the same ones."""
  return list(zip(seeded(1).integers(0, 64, n).tolist(), seeded(2).integers(0, 100, n).tolist()))


def _expect_rewrite(got, e, want, what):
  """got (a probe's (render, values at _points()) of simplify_with(e, rules)) is want (None: unchanged by the rules,
  whatever simplify makes of it), and keeps e's value at every point. e and want are built here, with the
  grader's uopc, on ranges i (64, axis 0) and k (100, axis 2)."""
  i, k = _range(64, 0), _range(100, 2)
  if not (isinstance(got, tuple) and len(got) == 2 and type(got[0]) is str and isinstance(got[1], list)):
    raise AssertionError(f"{what}: {e.render()} was not rewritten to an expression ({got!r:.80})")
  text, values = got
  for (vi, vk), value in zip(_points(), values + [None] * (len(_points()) - len(values))):
    before = _evaluate(e, {i: vi, k: vk})
    if value != before:
      raise AssertionError(f"{what}: {e.render()} was rewritten to {text}, which differs at ridx0={vi}, "
                           f"ridx2={vk}: {before} before, {value} after")
  want = _simplify(e) if want is None else want
  if text != want.render(): raise AssertionError(f"{what}: {e.render()} became {text}, expected {want.render()}")


# %% [markdown]
# ## Exercise 3.2: the divmod rule
#
# **Worked example.** A rule is a pattern and a function of the names it binds; returning None means "no change".
# `(x * c) % c -> 0`, for a constant c other than 0 (true in C for every x: `x * c` is a multiple of c):

# %%
xp = Pat.var("x")
mul_mod_rule = (Pat(Ops.MOD, (Pat(Ops.MUL, (xp, Pat.cvar("c"))), Pat.cvar("c"))),
                lambda x, c: UOp.const(0, x.dtype) if c.arg != 0 else None)   # (x*c) % c -> 0
for e in ((i * 3) % 3, (i * 3 + j) % 3, (i * 3) % 4):
  r = simplify_with(e, [mul_mod_rule])
  print(f"{e.render():20} -> {r.render():20} same values: {disagreement(e, r) is None}")

# %% [markdown]
# (The second is simplify's own `%` rule at work, not ours: `i*3 + j` is an ADD, not a MUL, and patterns match the
# shape of the graph, not its value. The third does not match: the two constants differ.)
#
# **Your task.** `simplify` leaves `(x // c) * c + x % c` alone, though it is `x`. Write `divmod_rules()`, a list of
# uopc rules that rewrites it to `x` for any integer expression x and constant c other than 0, whichever order the
# two terms of the sum come in. (In C, where `/` truncates and `%` takes the sign of x, it holds for every x; in
# Python too, where both floor. It would not hold with one of each.)

# %%
# TASK: the divmod rule
def divmod_rules() -> list:
  """Rules that rewrite (x // c) * c + x % c, in either order, to x."""
  ### BEGIN SOLUTION
  div_mul = Pat(Ops.MUL, (Pat(Ops.IDIV, (xp, Pat.cvar("c"))), Pat.cvar("c")))
  mod = Pat(Ops.MOD, (xp, Pat.cvar("c")))
  return [
    (Pat(Ops.ADD, (div_mul, mod)), lambda x, c: x if c.arg != 0 else None),   # (x//c)*c + x%c -> x
    (Pat(Ops.ADD, (mod, div_mul)), lambda x, c: x if c.arg != 0 else None),   # x%c + (x//c)*c -> x
  ]
  ### END SOLUTION

# %%
x = i * 5 + j
for e, want in (((i // 4) * 4 + i % 4, i), (i % 8 + (i // 8) * 8, i), ((x // 16) * 16 + x % 16, x),
                ((i // 4) * 4 + j % 4, None),    # None: two different x, nothing to rewrite
                ((i // 4) * 4 + i % 8, None)):   # two different constants: not x either
  r = simplify_with(e, divmod_rules())
  print(f"{e.render():40} -> {r.render():40}")
  check(f"{e.render()} rewritten by divmod_rules", r.render(), simplify_with(e, []).render() if want is None
        else want.render())
  check(f"a point where {e.render()} and its rewrite differ", disagreement(e, r), None)

# %% [markdown]
# Expected: the first three become `ridx0`, `ridx0` and `((ridx0*5)+ridx1)`; the last two (two different x, two
# different constants) stay as they are; every check `ok`.

# %% tags=["hidden-test"]
# POINTS: the divmod rule 2
### BEGIN HIDDEN TESTS
_k = range_(100, 2)


def _rewritten(name, rules, e):
  """Record e rewritten by rules: its text, and its value at the grader's points (i, k)."""
  _r = simplify_with(e, rules)
  record(name, (_r.render(), [evaluate(_r, {i: _a, _k: _b}) for _a, _b in
                              zip(seeded(1).integers(0, 64, 200).tolist(), seeded(2).integers(0, 100, 200).tolist())]))


_x = i * 3 + _k
_rewritten("a", divmod_rules(), (i // 4) * 4 + i % 4)
_rewritten("b", divmod_rules(), _k % 7 + (_k // 7) * 7)
_rewritten("c", divmod_rules(), (_x // 16) * 16 + _x % 16)
_rewritten("d", divmod_rules(), (i // 4) * 4 + _k % 4)
_rewritten("e", divmod_rules(), (i // 4) * 4 + i % 8)
# JUDGE
_i, _k = _range(64, 0), _range(100, 2)
_x = _i * 3 + _k
_expect_rewrite(recorded["a"], (_i // 4) * 4 + _i % 4, _i, "divmod_rules")
_expect_rewrite(recorded["b"], _k % 7 + (_k // 7) * 7, _k, "divmod_rules, terms the other way round")
_expect_rewrite(recorded["c"], (_x // 16) * 16 + _x % 16, _simplify(_x), "divmod_rules, x a sum")
_expect_rewrite(recorded["d"], (_i // 4) * 4 + _k % 4, None, "divmod_rules, two different x")
_expect_rewrite(recorded["e"], (_i // 4) * 4 + _i % 8, None, "divmod_rules, two different constants")
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 3.3: mod of a mod
#
# **Worked example.** A rule with a condition on its constants: `(x // a) // b -> x // (a * b)` for positive a and
# b (uopc has it, inside its `//` rule).

# %%
div_div_rule = (Pat(Ops.IDIV, (Pat(Ops.IDIV, (xp, Pat.cvar("a"))), Pat.cvar("b"))),
                lambda x, a, b: x // (a.arg * b.arg) if a.arg > 0 and b.arg > 0 else None)
for e in ((i // 4) // 2, (i // 3) // 5):
  r = graph_rewrite(e, [div_div_rule])
  print(f"{e.render():20} -> {r.render():20} same values: {disagreement(e, r) is None}")

# %% [markdown]
# **Your task.** `simplify((i % 8) % 4)` is not `i % 4`. Write `mod_mod_rules()`: `(x % a) % b -> x % b` when b
# divides a (both positive). Why does "b divides a" matter? The visible check below shows a counterexample.

# %%
# TASK: mod of a mod
def mod_mod_rules() -> list:
  """Rules that rewrite (x % a) % b to x % b when b divides a."""
  ### BEGIN SOLUTION
  return [
    (Pat(Ops.MOD, (Pat(Ops.MOD, (xp, Pat.cvar("a"))), Pat.cvar("b"))),   # (x % a) % b -> x % b when b | a
     lambda x, a, b: x % b.arg if a.arg > 0 and b.arg > 0 and a.arg % b.arg == 0 else None),
  ]
  ### END SOLUTION

# %%
def mods(e: UOp) -> int: return sum(u.op is Ops.MOD for u in e.toposort())


for e, want_mods in (((i % 8) % 4, 1), (((i * 3 + j) % 12) % 4, 1), ((i % 6) % 4, 2)):
  r = simplify_with(e, mod_mod_rules())
  print(f"{e.render():28} -> {r.render():24}")
  check(f"a point where {e.render()} and its rewrite differ", disagreement(e, r), None)
  check(f"MODs left in {e.render()} rewritten by mod_mod_rules", mods(r), want_mods)
print("without the condition, (i % 6) % 4 at i = 6:", (6 % 6) % 4, "but i % 4:", 6 % 4)

# %% [markdown]
# Expected: the first two lose their inner `% 8` and `% 12`; `(ridx0%6)%4` stays; every check `ok`.

# %% tags=["hidden-test"]
# POINTS: mod of a mod 2
### BEGIN HIDDEN TESTS
_k = range_(100, 2)


def _rewritten(name, rules, e):
  """Record e rewritten by rules: its text, and its value at the grader's points (i, k)."""
  _r = simplify_with(e, rules)
  record(name, (_r.render(), [evaluate(_r, {i: _a, _k: _b}) for _a, _b in
                              zip(seeded(1).integers(0, 64, 200).tolist(), seeded(2).integers(0, 100, 200).tolist())]))


_rewritten("a", mod_mod_rules(), (i % 8) % 4)
_rewritten("b", mod_mod_rules(), ((i * 3 + _k) % 24) % 6)
_rewritten("c", mod_mod_rules(), (_k % 6) % 4)
_rewritten("d", mod_mod_rules(), (_k % 10) % 3)
# JUDGE
_i, _k = _range(64, 0), _range(100, 2)
_expect_rewrite(recorded["a"], (_i % 8) % 4, _i % 4, "mod_mod_rules")
_expect_rewrite(recorded["b"], ((_i * 3 + _k) % 24) % 6, _simplify((_i * 3 + _k) % 6), "mod_mod_rules, x a sum")
_expect_rewrite(recorded["c"], (_k % 6) % 4, None, "mod_mod_rules, 4 does not divide 6")
_expect_rewrite(recorded["d"], (_k % 10) % 3, None, "mod_mod_rules, 3 does not divide 10")
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 4.2: running argmax
#
# **Worked example.** Chapter 4's running max per row: the accumulator lives inside the THREAD loop
# (`alloc(0).after(i)`: one per row, private to its thread), is initialised, updated in the `j` loop, and read after
# the loop's END.

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


print(render_c(rowmax_program(4, 6), "rowmax"))

# %% [markdown]
# **Your task.** `argmax_program(R, C)`: for each row of A (R, C) float32 (buffer 0), the index of its largest
# value, into an int32 buffer 1 (`buf(1, R, i32)`), the *first* one on ties, as `np.argmax`. Two accumulators, the
# running max and its index (`alloc(1, 1, i32)` for the index), both placed by `.after(i)`; update both in the `j`
# loop under one END (a SINK of the two stores), choosing with `cond.where(a, b)`. What must the update of the index
# be ordered after?

# %%
# TASK: running argmax
def argmax_program(R: int, C: int) -> UOp:
  """out[i] = the first j with a[i, j] == max_j a[i, j], as int32."""
  ### BEGIN SOLUTION
  A, OUT = buf(0, R * C), buf(1, R, i32)
  i = range_(R, 0, AxisType.THREAD)
  m, idx = alloc(0).after(i), alloc(1, 1, i32).after(i)      # both private to the row, and so to the thread
  init_m, init_idx = m.index(0).store(-math.inf), idx.index(0).store(0)
  j = range_(C, 1)
  mj, idxj = m.after(init_m, j), idx.after(init_idx, j)
  x, old = A.index(i * C + j).load(), mj.index(0).load()
  better = old < x                                            # strictly: the first maximum wins a tie
  st_idx = idxj.index(0).store(better.where(j, idxj.index(0).load()))   # reads the max before it is updated
  st_m = mj.index(0).store(better.where(x, old))
  loop = UOp(Ops.SINK, (st_idx, st_m)).end(j)
  return sink(OUT.index(i).store(idx.after(loop).index(0).load()).end(i))
  ### END SOLUTION


# %%
def run_argmax(build, a: np.ndarray, threads: int | None = None) -> np.ndarray:
  """The kernel build(R, C) run on a, with `threads` OpenMP threads (None: OpenMP's own choice)."""
  out = np.full(a.shape[0], -1, np.int32)
  prg = Program(render_c(build(*a.shape), "argmax"), "argmax")
  prg.threads = threads
  prg(np.ascontiguousarray(a, np.float32), out)
  return out


# ties, and two rows all negative: one with its maximum first, one with it away from column 0 (a running max that
# starts at 0 instead of -inf finds no element above it there)
a = np.array([[1, 3, 3, 2], [5, 1, 5, 0], [-1, -2, -3, -4], [-3, -1, -2, -4]], np.float32)
src = render_c(argmax_program(4, 4), "argmax")
print(src)
# the loops of a 5 x 3 program, by extent: the row loop (5) is told apart from the column loop (3)
check("the THREAD loops of argmax_program(5, 3), by extent (the row loop, 5 rows, and no other)",
      tuple(r.src[0].arg for r in ranges_in(argmax_program(5, 3)) if r.arg[1] is AxisType.THREAD), (5,))
lines = src.splitlines()
parallel = next(n for n, line in enumerate(lines) if "#pragma omp parallel for" in line)   # the row loop's, by now
above = [line.strip() for line in lines[:parallel] if line.strip().startswith(("float acc", "int acc"))]
check("acc declarations above the row loop's '#pragma omp parallel for' (outside the loop: one variable that all its "
      "threads share)", above, [])
check("argmax_program(4, 4) on a", run_argmax(argmax_program, a), a.argmax(1).astype(np.int32))
big = np.random.default_rng(0).standard_normal((300, 11)).astype(np.float32)
# read from the program, not a run: the same verdict on any machine, any number of threads, with or without OpenMP
check_no_races("argmax_program(300, 11): no two iterations of its THREAD loop share an element",
               argmax_program(300, 11))
check_threads_agree("argmax_program(300, 11) on 8 threads and on one", lambda t: run_argmax(argmax_program, big, t))
check("argmax_program(300, 11) on random rows", run_argmax(argmax_program, big), big.argmax(1).astype(np.int32))

# %% [markdown]
# Expected: six `ok` lines: the row loop the one THREAD loop, both `acc` declarations inside it, `[1 0 0 1]` for
# `a`, no race in the program (`uopc.races` reads its indices: state placed outside the THREAD loop is one variable
# that all its iterations share), the same values on 8 threads as on one, and the same as NumPy on random rows. The
# index update uses the comparison with the *old* maximum, so it must read the max before the max's own update stores
# the new one: both come from the same load, made before either store.

# %% tags=["hidden-test"]
# POINTS: running argmax 2
### BEGIN HIDDEN TESTS
# the probe hands over the student's loop programs as data; the judge renders them with its own uopc, reads their
# races from the program (uopc.races) and runs the C on 1 and on 8 threads in its own sandbox (run_c_threads: one
# child for both)
_shapes = {"random": (64, 33), "ties (values 0, 1, 2)": (50, 9), "one column": (7, 1), "rows of -inf": (3, 5),
           "the max last": (4, 10)}
for _what, _shape in _shapes.items(): record(_what, argmax_program(*_shape))
# JUDGE
_r = seeded(5)
_cases = (("random", _r.standard_normal((64, 33))), ("ties (values 0, 1, 2)", _r.integers(0, 3, (50, 9))),
          ("one column", _r.standard_normal((7, 1))), ("rows of -inf", np.full((3, 5), -np.inf)),
          ("the max last", np.tile(np.arange(10.0), (4, 1))))
for _what, _a in _cases:
  _name = f"argmax_program{_a.shape} ({_what})"
  _prg = gradelib.graph(recorded[_what], _name)
  _races = gradelib.certain_races(_prg, _name)
  if _races: raise AssertionError(f"{_name}: {_races[0]}")   # from the program: on any machine
  _src = gradelib.render(_prg, "argmax", _name)
  _ran = run_c_threads(_src, "argmax", [np.ascontiguousarray(_a, np.float32), np.full(_a.shape[0], -1, np.int32)],
                       outputs=[1], threads=(1, 8), what=_name)   # one child: both thread counts
  _want, _one, _eight = np.argmax(_a, 1).astype(np.int32), _ran[1][0], _ran[8][0]
  if np.array_equal(_one, _want) and not np.array_equal(_eight, _want):
    raise AssertionError(f"{_name}: right on one thread, wrong on 8: a data race (its values change with the number "
                         f"of threads)")   # uopc.races found none certain above: no guess at the cause
  gradelib.expect_equal(_eight, _want, f"{_name}, 8 threads: the index per row")
### END HIDDEN TESTS

# %% tags=["hidden-test"]
# POINTS: running argmax 1 structure
### BEGIN HIDDEN TESTS
record("program", argmax_program(16, 8))
# JUDGE
_prg = gradelib.graph(recorded["program"], "argmax_program(16, 8)")
_lines = gradelib.render(_prg, "argmax", "argmax_program(16, 8)").splitlines()   # the grader's render_c
# each message names only what was checked and found: which loops are parallel first, the declarations only once the
# row loop is the one parallel loop (a parallel column loop has the right accumulators above its pragma)
_pars = [n for n, line in enumerate(_lines[:-1]) if "#pragma omp parallel for" in line]
_trips = [int(m.group(2)) if (m := gradelib.LOOP.search(_lines[n + 1])) else None for n in _pars]
assert _trips, "argmax_program(16, 8): no parallel loop (make the row loop, 16 rows, AxisType.THREAD)"
assert _trips == [16], (f"argmax_program(16, 8): parallel loops of {_trips} trips; expected the row loop (16 rows) "
                        f"alone (the column loop's iterations update one running max in turn: a plain loop)")
_par = _pars[0]
_outside = [line.strip() for line in _lines[:_par] if re.match(r"\s*(float|int) acc\d+", line)]
assert not _outside, (f"argmax_program: {', '.join(_outside)} declared outside the parallel loop: one variable "
                      f"shared by every thread (place it with .after(i), not .after())")
_races = gradelib.certain_races(_prg, "argmax_program(16, 8)")
if _races: raise AssertionError(f"argmax_program(16, 8): {_races[0]}")
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 4.3: prefix sum
#
# **Worked example.** Chapter 4's sum: function-level state (`alloc(0).after()`), initialised once, updated in the
# loop, read after it.

# %%
def sum_program(n: int) -> UOp:
  A, OUT = buf(0, n), buf(1, 1)
  acc = alloc(0).after()                       # placed in no loop: function-level state
  init = acc.index(0).store(0.0)
  k = range_(n, 0)
  acck = acc.after(init, k)                    # the acc inside loop k, after its initialisation
  upd = acck.index(0).store(acck.index(0).load() + A.index(k).load()).end(k)
  return sink(OUT.index(0).store(acc.after(upd).index(0).load()))   # read after the loop that updates it


print(render_c(sum_program(8), "sum"))

# %% [markdown]
# **Your task.** `prefix_sum_program(n)`: `out[k] = a[0] + ... + a[k]` (buffers 0 and 1, float32). The running value
# is updated and stored in the same iteration: close the loop over both stores with
# `UOp(Ops.SINK, (store_acc, store_out)).end(k)`. (Why must this loop not be a THREAD loop?)

# %%
# TASK: prefix sum
def prefix_sum_program(n: int) -> UOp:
  """out[k] = a[0] + ... + a[k]."""
  ### BEGIN SOLUTION
  A, OUT = buf(0, n), buf(1, n)
  acc = alloc(0).after()
  init = acc.index(0).store(0.0)
  k = range_(n, 0)                             # not THREAD: iteration k needs the value of iteration k - 1
  acck = acc.after(init, k)
  new = acck.index(0).load() + A.index(k).load()
  return sink(UOp(Ops.SINK, (acck.index(0).store(new), OUT.index(k).store(new))).end(k))
  ### END SOLUTION


# %%
def run_prefix_sum(a: np.ndarray, threads: int | None = None) -> np.ndarray:
  """prefix_sum_program's kernel run on a, with `threads` OpenMP threads (None: OpenMP's own choice)."""
  out = np.full(len(a), np.nan, np.float32)
  prg = Program(render_c(prefix_sum_program(len(a)), "cumsum"), "cumsum")
  prg.threads = threads
  prg(a.astype(np.float32), out)
  return out


print(render_c(prefix_sum_program(5), "cumsum"))
print(run_prefix_sum(np.arange(1, 9)))
x8 = np.random.default_rng(1).standard_normal(1000)
check_no_races("prefix_sum_program(1000): no two iterations of a THREAD loop share an element",
               prefix_sum_program(1000))
check_threads_agree("run_prefix_sum of 1000 numbers, on 8 threads and on one", lambda t: run_prefix_sum(x8, t))
check("run_prefix_sum(1..8) against np.cumsum", run_prefix_sum(np.arange(1, 9)), np.cumsum(np.arange(1, 9)), rtol=1e-6)
check("run_prefix_sum of 1000 random numbers against np.cumsum", run_prefix_sum(x8), np.cumsum(x8), atol=1e-3)

# %% [markdown]
# Expected: one loop, no pragma, `[ 1.  3.  6. 10. 15. 21. 28. 36.]` and four `ok` lines. Made a THREAD loop, the
# kernel is still right on one thread; on several, each thread starts its share of the loop from a running value
# the others are changing: the first check says so from the program itself (the running value, `acc0[0]`, is one
# element every iteration stores), on any machine, even one whose kernels run on one thread.

# %% tags=["hidden-test"]
# POINTS: prefix sum 2
### BEGIN HIDDEN TESTS
for _n in (1, 2, 17, 1000): record(f"n = {_n}", prefix_sum_program(_n))
# JUDGE
_races = gradelib.certain_races(recorded["n = 1000"], "prefix_sum_program(1000)")   # from the program: any machine
if _races: raise AssertionError(f"prefix_sum_program(1000): {_races[0]}")
for _n in (1, 2, 17, 1000):
  _a = seeded(_n).standard_normal(_n).astype(np.float32)
  _want = np.cumsum(_a.astype(np.float64))
  _src = gradelib.render(recorded[f"n = {_n}"], "cumsum", f"prefix_sum_program({_n})")
  _ran = run_c_threads(_src, "cumsum", [_a, np.full(_n, np.nan, np.float32)], outputs=[1], threads=(1, 8),
                       what=f"prefix_sum_program({_n})")
  _eight = _ran[8][0]
  if np.allclose(_ran[1][0], _want, atol=1e-4) and not np.allclose(_eight, _want, atol=1e-4):
    raise AssertionError(f"prefix_sum_program({_n}): right on one thread, wrong on 8: a data race (iteration k needs "
                         f"iteration k - 1: this loop must not be a THREAD loop)")
  gradelib.expect_close(_eight, _want, f"prefix_sum_program({_n}), 8 threads: out", tol=1e-4)
### END HIDDEN TESTS
