# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # Chapter 6. Reductions
#
# Chapter 5 turned loop programs into C, but we still wrote the loops by hand. From here on the compiler
# writes them. Its input is a *tensor* graph: buffers, elementwise (ALU) operations, movement operations
# (RESHAPE, EXPAND, PERMUTE, ...) and reductions (REDUCE), none of which mentions a loop. Its output is a
# loop program. The pass that goes from one to the other is **rangeify**, and it answers one question:
#
# > what is the scalar value of tensor `u` at index `idx`?
#
# Movement ops only change the index (a transpose swaps two index expressions, a broadcast replaces one by
# 0). ALU ops apply to values. A REDUCE becomes a loop that feeds an *accumulator*, and the one design
# decision of this chapter is where that accumulator lives. The rule (`_reduce` in `uopc/rangeify.py`):
#
# > the accumulator lives inside exactly the loops that the reduction's output index uses.
#
# A row max indexed by the row `i` sits inside the `i` loop and outside everything else, so it is computed
# once per row. The rule is correct, but it looks at the *spelling* of the index: an index that mentions a
# loop variable it does not depend on drags the accumulator into that loop, and the reduction is then
# recomputed on every iteration. Section 11.5 of the book tells how this made fused attention cubic in the
# sequence length; at the end of this chapter you will reproduce it.
#
# What you'll build: a mini rangeify (about 150 lines) over a tiny tensor graph that writes Python loop
# code, with and without index simplification; then the real `uopc.rangeify` on the same problems, and the
# O(N^3) bug on fused attention. Numbers below were measured on:

# %% tags=["nbval-ignore-output"]
import datetime
import os
import platform
import re
import subprocess

cpu = re.search(r"^model name\s*:\s*(.*)$", open("/proc/cpuinfo").read(), re.M)
print(f"CPU:      {cpu.group(1) if cpu else platform.machine()}, {os.cpu_count()} cores")
print(f"compiler: {subprocess.run(['cc', '--version'], capture_output=True, text=True).stdout.splitlines()[0]}")
print(f"date:     {datetime.date.today()}")

# %% [markdown]
# ## 6.1 A tiny tensor graph
#
# A node says what it computes (`op`, its sources `src`, an argument `arg`) and its shape. Nothing else: no
# strides, no data. `reduce` always reduces the last axis (`uopc` reduces the last *n* axes, and `Tensor`
# permutes the axes to reduce to the end first).

# %%
import math
import numpy as np


class Node:
  """A tensor-level node: what it computes (op, src, arg) and its shape."""
  def __init__(self, op, src=(), arg=None, shape=()):
    self.op, self.src, self.arg, self.shape = op, tuple(src), arg, tuple(shape)


def buf(name, *shape): return Node("BUF", (), name, shape)                  # an input, row-major
def const(v, *shape): return Node("CONST", (), v, shape)
def alu(op, *src): return Node(op, src, None, src[0].shape)                  # sources already have one shape
def reshape(x, *shape): return Node("RESHAPE", (x,), shape, shape)
def expand(x, *shape): return Node("EXPAND", (x,), shape, shape)           # size-1 axes broadcast
def permute(x, *order): return Node("PERMUTE", (x,), order, tuple(x.shape[o] for o in order))
def reduce(x, op): return Node("REDUCE", (x,), op, x.shape[:-1])           # over the last axis


# %% [markdown]
# ## 6.2 Index expressions, raw and simplified
#
# An index is an integer expression in the loop variables. We need three things from it: its text (to
# print the code), the loop variables it *mentions* (to place accumulators) and, when it is affine
# (`sum(coeff * variable) + const`), its terms, so that it can be simplified using the loop bounds.
#
# RESHAPE is where indices get complicated: a RESHAPE maps an index in the new shape to the flat
# (row-major) offset, `ravel`, and the flat offset back to an index in the old shape, `unravel`
# (`(flat // stride) % size` per axis). Two rules, valid when every loop variable is non-negative and
# below its trip count, undo most of that:
#
# - `(x*c + y) // c -> x` when `0 <= y < c`
# - `(x*c + y) % c -> y` when `0 <= y < c`
#
# Every function below takes `simp`: with `simp=False` it only writes the expression down.

# %%
class Ix:
  """An index expression: its text, the loop variables it mentions and, if affine, {variable: coeff} + const."""
  def __init__(self, text, names, terms=None, const=0):
    self.text, self.names, self.terms, self.const = text, frozenset(names), terms, const
  def __repr__(self): return self.text


EXTENT = {}   # loop variable -> trip count: the facts the simplifier works from


def var(name, n):
  EXTENT[name] = n
  return Ix(name, {name}, {name: 1}, 0)


def affine(terms, c):
  terms = {v: k for v, k in terms.items() if k}
  parts = [v if k == 1 else f"{v}*{k}" for v, k in terms.items()] + ([str(c)] if c or not terms else [])
  return Ix(parts[0] if len(parts) == 1 else "(" + "+".join(parts) + ")", terms, terms, c)


def bounds(x):
  lo = x.const + sum(min(0, k * (EXTENT[v] - 1)) for v, k in x.terms.items())
  hi = x.const + sum(max(0, k * (EXTENT[v] - 1)) for v, k in x.terms.items())
  return lo, hi


def add(a, b, simp):
  if simp and a.terms is not None and b.terms is not None:
    return affine({v: a.terms.get(v, 0) + b.terms.get(v, 0) for v in {**a.terms, **b.terms}}, a.const + b.const)
  return Ix(f"({a.text}+{b.text})", a.names | b.names)


def mul(a, c, simp):
  if simp and a.terms is not None: return affine({v: k * c for v, k in a.terms.items()}, a.const * c)
  return Ix(f"({a.text}*{c})", a.names)


def split(a, c):
  """a's terms whose coefficient c divides (divided by c), the constant divided by c, and the rest."""
  div = {v: k // c for v, k in a.terms.items() if k % c == 0}
  return div, a.const // c, affine({v: k for v, k in a.terms.items() if k % c}, a.const % c)


def idiv(a, c, simp):
  if simp and a.terms is not None:
    div, q, rest = split(a, c)
    lo, hi = bounds(rest)
    if lo >= 0 and hi < c: return affine(div, q)          # (x*c + y)//c -> x
  return Ix(f"({a.text}//{c})", a.names)


def mod(a, c, simp):
  if simp and a.terms is not None:
    lo, hi = bounds(a)
    if lo >= 0 and hi < c: return a                        # x % c -> x when 0 <= x < c
    _, _, rest = split(a, c)
    lo, hi = bounds(rest)
    if lo >= 0 and hi < c: return rest                     # (x*c + y) % c -> y
  return Ix(f"({a.text}%{c})", a.names)


def ravel(idx, shape, simp):
  flat = Ix("0", (), {}, 0)
  for i, s in zip(idx, shape): flat = add(mul(flat, s, simp), i, simp)
  return flat


def unravel(flat, shape, simp):
  strides = [math.prod(shape[k + 1:]) for k in range(len(shape))]
  return tuple(mod(idiv(flat, st, simp), s, simp) for st, s in zip(strides, shape))


# %% [markdown]
# Here is the index of an (N, N) tensor viewed through a RESHAPE to the same shape, at N = 512: the
# book's scratch printout of section 11.5.

# %%
i, j = var("i", 512), var("j", 512)
for raw, simple in zip(unravel(ravel((i, j), (512, 512), False), (512, 512), False),
                       unravel(ravel((i, j), (512, 512), True), (512, 512), True)):
  print(f"raw {raw.text} mentions {sorted(raw.names)}   simplified {simple.text}")

# %% [markdown]
# The first component is `i`: `j < 512`, so `j // 512` is 0. But it *mentions* `j`, and anything that
# asks "which loop variables does this index use?" will hear `i` and `j`.
#
# ## 6.3 Rangeify, elementwise
#
# The generated code is Python, built as nested blocks: a `Block` is a loop header and a list of
# statements (text, or nested blocks). `rangeify` returns the *text of a value*; only reductions add
# statements. Here is all of it, the reduce lowering included; 6.4 explains `reduce_loop`.

# %%
class Block:
  """A loop (or the function body): its header and its statements (text or nested Blocks)."""
  def __init__(self, head): self.head, self.body = head, []
  def lines(self, depth=0):
    out = [" " * depth + self.head]
    for s in self.body: out += s.lines(depth + 2) if isinstance(s, Block) else [" " * (depth + 2) + s]
    return out


FMT = {"ADD": "({}+{})", "MUL": "({}*{})", "MAX": "max({}, {})", "EXP": "exp({})", "RECIP": "(1/{})", "NEG": "(-{})"}
IDENTITY = {"ADD": "0.0", "MAX": "-inf"}


class Ctx:
  def __init__(self, simplify):
    self.simplify, self.memo, self.loops, self.accs = simplify, {}, 0, 0
    self.open = []   # the loops around the code being generated, outermost first: (variable, Block)

  def new_var(self, prefix, n):
    self.loops += 1
    return var(f"{prefix}{self.loops - 1}", n)


def rangeify(u, idx, ctx):
  """Python text for the value of u at index idx (a reduction also adds its loop to the code)."""
  simp = ctx.simplify
  if u.op == "BUF": return f"{u.arg}[{ravel(idx, u.shape, simp)}]"
  if u.op == "CONST": return repr(u.arg)
  if u.op in FMT: return FMT[u.op].format(*[rangeify(s, idx, ctx) for s in u.src])
  if u.op == "EXPAND":   # a broadcast axis reads element 0 of the source
    return rangeify(u.src[0], tuple(Ix("0", (), {}, 0) if s == 1 else i for i, s in zip(idx, u.src[0].shape)), ctx)
  if u.op == "PERMUTE":
    inv = [None] * len(idx)
    for k, p in enumerate(u.arg): inv[p] = idx[k]
    return rangeify(u.src[0], tuple(inv), ctx)
  if u.op == "RESHAPE": return rangeify(u.src[0], unravel(ravel(idx, u.shape, simp), u.src[0].shape, simp), ctx)
  if u.op == "REDUCE": return reduce_loop(u, idx, ctx)
  raise NotImplementedError(u.op)


def reduce_loop(u, idx, ctx):
  used = set().union(*(i.names for i in idx))
  # the accumulator lives in the innermost open loop that the output index mentions
  depth = max((k for k, (v, _) in enumerate(ctx.open) if v in used), default=0)
  home = ctx.open[depth][1]
  key = (id(u), tuple(i.text for i in idx), id(home))
  if key in ctx.memo: return ctx.memo[key]
  acc, n = f"acc{ctx.accs}", u.src[0].shape[-1]
  ctx.accs += 1
  r = ctx.new_var("r", n)
  loop = Block(f"for {r} in range({n}):")
  # it goes before the loop we are generating code in (if any), so it has run by the time that loop needs it
  at = home.body.index(ctx.open[depth + 1][1]) if depth + 1 < len(ctx.open) else len(home.body)
  home.body[at:at] = [f"{acc} = {IDENTITY[u.arg]}", loop]
  saved, ctx.open = ctx.open, ctx.open[:depth + 1] + [(r.text, loop)]
  val = rangeify(u.src[0], idx + (r,), ctx)    # the reduced axis is indexed by the new loop
  loop.body.append(f"{acc} = " + FMT[u.arg].format(acc, val))
  ctx.open = saved
  ctx.memo[key] = acc
  return acc


def lower(body, inputs, simplify=True):
  """The Python source of kernel(*inputs, out), which stores body, row-major, into out."""
  ctx = Ctx(simplify)
  fn = Block(f"def kernel({', '.join(inputs)}, out):")
  ctx.open, idx = [("", fn)], []
  for s in body.shape:   # one loop per output axis
    i = ctx.new_var("i", s)
    loop = Block(f"for {i} in range({s}):")
    ctx.open[-1][1].body.append(loop)
    ctx.open.append((i.text, loop))
    idx.append(i)
  val = rangeify(body, tuple(idx), ctx)
  ctx.open[-1][1].body.append(f"out[{ravel(idx, body.shape, simplify)}] = {val}")
  return "\n".join(fn.lines())


calls = {"exp": 0}
def counting_exp(x):
  calls["exp"] += 1
  return math.exp(x)


def run(body, arrays, simplify=True, show=False):
  """Generate the kernel, print it if asked, run it on the arrays (as flat lists), return the output."""
  src = lower(body, list(arrays), simplify)
  if show: print(src)
  env = {"exp": counting_exp, "inf": math.inf}
  exec(src, env)
  out = [0.0] * math.prod(body.shape)
  calls["exp"] = 0
  env["kernel"](*[list(a.reshape(-1)) for a in arrays.values()], out)
  return np.array(out).reshape(body.shape)


# %% [markdown]
# An elementwise graph, `x * y + x` with `y` broadcast along the rows:

# %%
rng = np.random.default_rng(0)
a, b = rng.standard_normal((3, 4)), rng.standard_normal(4)
x, y = buf("x", 3, 4), buf("y", 4)
out = run(alu("ADD", alu("MUL", x, expand(reshape(y, 1, 4), 3, 4)), x), {"x": a, "y": b}, show=True)
print("matches NumPy:", np.allclose(out, a * b + a))

# %% [markdown]
# `y`'s index went through the EXPAND (row index replaced by 0) and the RESHAPE (`(1, 4) -> (4,)`), and came
# out as plain `i1`, because the simplifier removed `0*4` and the `//` and `%`. The index of `x` is computed
# twice in the text; a C compiler shares it (uopc's renderer names shared expressions `alu`).
#
# ## 6.4 The reduce lowering
#
# `reduce_loop` is the whole chapter in twenty lines. For a REDUCE at index `idx` it:
#
# 1. finds the innermost open loop that `idx` mentions: the accumulator's **home**;
# 2. writes, into that loop and before the loop currently being generated, the initialisation
#    `acc = identity` and a new loop over the reduced axis;
# 3. generates the reduced value at `idx + (r,)` *inside the new loop*, so nested reductions nest;
# 4. returns the name `acc`, which is the reduction's value wherever it is used.
#
# A row max: the output index is `(i0,)`, so the accumulator lives in `i0`:

# %%
out = run(reduce(x, "MAX"), {"x": a}, show=True)
print("matches NumPy:", np.allclose(out, a.max(1)))

# %% [markdown]
# A matmul is a broadcast multiply followed by a sum over the last axis, `(n, k) @ (k, m)` ->
# `(n, m, k)` -> sum. The output index is `(i0, i1)`, so the accumulator lives in both output loops:

# %%
def matmul(p, q):
  (n, k), m = p.shape, q.shape[1]
  pe = expand(reshape(p, n, 1, k), n, m, k)
  qe = expand(reshape(permute(q, 1, 0), 1, m, k), n, m, k)
  return reduce(alu("MUL", pe, qe), "ADD")


c = rng.standard_normal((4, 2))
out = run(matmul(x, buf("w", 4, 2)), {"x": a, "w": c}, show=True)
print("matches NumPy:", np.allclose(out, a @ c))

# %% [markdown]
# Softmax nests reductions: the sum of `exp(x - max)` needs the max inside its loop. The max's output index
# is `(i0,)` wherever it is used, so its accumulator goes to `i0`, *before* the sum's loop and before the
# output loop `i1`: computed once per row and used by both.

# %%
def softmax(s):
  n, m = s.shape
  mx = expand(reshape(reduce(s, "MAX"), n, 1), n, m)
  ex = alu("EXP", alu("ADD", s, alu("NEG", mx)))
  return alu("MUL", ex, alu("RECIP", expand(reshape(reduce(ex, "ADD"), n, 1), n, m)))


ref = np.exp(a - a.max(1, keepdims=True))
out = run(softmax(x), {"x": a}, show=True)
print("matches NumPy:", np.allclose(out, ref / ref.sum(1, keepdims=True)))

# %% [markdown]
# Note what the memo did: `acc0` (the max) is used in the sum's loop and in the output loop, but computed
# once. The exponentials are written twice, once in the sum and once in the output: this tiny compiler has
# no kernelizer, so nothing is stored, and whatever is used twice is computed twice. Chapter 7 decides when
# to store instead.
#
# That is also how to count the work without running anything: a line runs once per trip of every loop around
# it. For an (n, m) input the sum's `exp` sits in the row loop and the sum loop (n x m times), and the output's in
# the row loop and the output loop (n x m times again): 2nm exponentials. The interpreter counts its calls to
# `exp`, which agrees:

# %%
run(softmax(x), {"x": a})
n_rows, n_cols = a.shape
print(f"exp calls for a {n_rows} x {n_cols} softmax: {calls['exp']}; 2 x {n_rows} x {n_cols} = {2 * n_rows * n_cols}")

# %% [markdown]
# ## 6.5 When the index lies
#
# Now attention, all of it in one kernel: `softmax(q k^T / sqrt(D)) v`. The P V product reads P through
# RESHAPE `(N, N) -> (N, 1, N)`, and P reads the row sum through a RESHAPE `(N,) -> (N, 1)`. With
# simplification, the row max and the row sum are indexed by the row alone:

# %%
def attention(N, D):
  q, k, v = buf("q", N, D), buf("k", N, D), buf("v", N, D)
  s = alu("MUL", matmul(q, permute(k, 1, 0)), const(1 / math.sqrt(D), N, N))
  return matmul(softmax(s), v)


def skeleton(src):
  """The loops and the accumulator initialisations of a kernel, and nothing else."""
  return "\n".join(ln for ln in src.splitlines() if re.search(r"\bfor\b|acc\d+ = (-inf|0\.0|-INFINITY|0\.0f);?$", ln))


def short(src):
  """skeleton(), with each run of three or more like initialisations (the output tile) on one line."""
  out, run = [], []
  def flush():
    if len(run) > 2: out.append(f"{run[0][0]}{run[0][1]} ... {run[-1][1]} = {run[0][2]};   ({len(run)} accumulators)")
    else: out.extend(f"{ind}{acc} = {val};" for ind, acc, val in run)
    run.clear()
  for ln in skeleton(src).splitlines():
    m = re.fullmatch(r"(\s*)(acc\d+) = (0\.0f|-INFINITY);", ln)
    if run and (not m or (m.group(1), m.group(3)) != (run[0][0], run[0][2])): flush()
    if m: run.append(m.groups())
    else: out.append(ln)
  flush()
  return "\n".join(out)


print(lower(attention(4, 2), ["q", "k", "v"]))

# %% [markdown]
# Per row `i0`: a max pass over the keys (`r4`, with the dot product `r5` inside), a sum pass (`r6`), and
# the output loop `i1`, whose key loop `r2` recomputes each score and exponential once more. Without
# simplification, the same graph gives this (loops and accumulator initialisations only; the full text is
# hard to read, which is part of the problem):

# %%
print(skeleton(lower(attention(4, 2), ["q", "k", "v"], simplify=False)))

# %% [markdown]
# The row max (`acc2 = -inf`) and the row sum (`acc4 = 0.0`) are now initialised *inside* `r2`, the key
# loop of P V. Reading P at key `r2` asks for the row max at index
# `((((((0*4)+((((((((0*4)+i0)*1)+0)*4)+r2)//4)%4))*1)+0)//1)%4)`, which is `i0` but mentions `r2`. So both
# softmax passes over all the keys run again for every key: cubic in N. (There are two max accumulators
# now, too: the sum pass asks for the max at a differently spelled index, so the memo misses.)
# Both versions compute the same numbers; only the amount of work differs. Counting calls to `exp` shows
# how much:

# %%
print(f"{'N':>4} {'equal to NumPy':>15} {'exp calls, simplified':>22} {'raw':>8} {'ratio':>6}")
sizes, counts = [4, 8, 16, 32], {True: [], False: []}
for N in sizes:
  qa, ka, va = (rng.standard_normal((N, 2)) for _ in range(3))
  s = qa @ ka.T / math.sqrt(2)
  p = np.exp(s - s.max(1, keepdims=True))
  ref = p / p.sum(1, keepdims=True) @ va
  ok = []
  for simp in (True, False):
    ok.append(np.allclose(run(attention(N, 2), {"q": qa, "k": ka, "v": va}, simplify=simp), ref))
    counts[simp].append(calls["exp"])
  fast_n, slow_n = counts[True][-1], counts[False][-1]
  print(f"{N:4d} {str(all(ok)):>15} {fast_n:22d} {slow_n:8d} {slow_n / fast_n:6.1f}")

# %%
import matplotlib.pyplot as plt

fig, ax = plt.subplots(figsize=(5, 3.5))
ax.loglog(sizes, counts[True], "o-", label="simplified indices")
ax.loglog(sizes, counts[False], "s-", label="raw indices")
ax.set_xticks(sizes, [str(n) for n in sizes], minor=False)
ax.minorticks_off()
ax.set_xlabel("sequence length N (D = 2)")
ax.set_ylabel("calls to exp")
ax.set_title("Fused attention: the same kernel, two index spellings", fontsize=10)
ax.legend()
plt.show()

# %% [markdown]
# On log-log axes the simplified kernel's count has slope 2 and the raw one's slope 3. No value test can tell
# them apart. (The exact count of each, as a formula in N and D, is exercise 5: count it as the softmax's was
# counted in 6.4, one loop at a time.)
#
# ## 6.6 The same in uopc
#
# `uopc.rangeify` works on the UOp graph of Chapter 3 and writes a loop program of Chapter 4 (RANGE, END,
# ALLOC, AFTER, INDEX, LOAD, STORE), which Chapter 5's linearizer and renderer turn into C. Its `_reduce`
# does what `reduce_loop` did, with the AFTER edge instead of a list of statements:
#
# ```python
# acc = ctx.alloc(u.dtype)
# # the accumulator lives inside the loops the output index uses...
# acc0 = acc.after(*ranges_in(*idx))
# init = acc0.index(0).store(UOp.const(identity(rop, u.dtype), u.dtype))
# # ...is re-read every iteration of the reduce loops...
# accl = acc0.after(init, *real)
# upd = accl.index(0).store(UOp(rop, (accl.index(0).load(), vals[0])))
# # ...and is read once more after the loops end
# return acc0.after(upd.end(*real)).index(0).load()
# ```
#
# `acc.after(*ranges_in(*idx))` is the placement rule: the ALLOC, placed after (inside) the loops that
# `idx` mentions. `ranges_in` asks the question "which loop variables does this expression mention?", and
# like our `Ix.names` it answers about the spelling. Here are uopc's raw and simplified indices for the
# reshape of 6.2:

# %%
from uopc import rangeify as R
from uopc.symbolic import ranges_in, simplify
from uopc.uop import range_

ri, rj = range_(512, 0), range_(512, 1)
for raw in R.unravel(R.ravel((ri, rj), (512, 512)), (512, 512)):
  print(f"raw {raw.render()} mentions {[r.render() for r in ranges_in(raw)]}   simplified {simplify(raw).render()}")

# %% [markdown]
# uopc's RESHAPE rule simplifies the new indices at once, for exactly this reason:
#
# ```python
#   elif op is Ops.RESHAPE:
#     # simplify now: ((i*N + j)//N) % N mentions j but *is* i. Dependence analysis
#     # (which loops a reduce must sit in) and the memo both need the truth.
#     r = rangeify(u.src[0], tuple(simplify(i) for i in unravel(ravel(idx, u.shape), u.src[0].shape)), ctx)
# ```
#
# The row max of a (4, 8) tensor, through the `Tensor` of Chapter 9 and the kernelizer of Chapter 7
# (`make_plan` with no optimizer, so the C is plain): the accumulator is declared and initialised in the
# row loop, before the reduce loop, exactly as in 6.4.

# %%
from uopc.kernelize import make_plan
from uopc.opt import DefaultOpt
from uopc.tensor import Tensor

t = Tensor(rng.standard_normal((4, 8)).astype(np.float32))
print(make_plan([t.max(-1).uop], False, None).kernels[0].src)
print("matches NumPy:", np.array_equal(t.max(-1).numpy(), t.numpy().max(-1)))

# %% [markdown]
# A (4, 8) @ (8, 4) matmul: one accumulator in both output loops.

# %%
w = Tensor(rng.standard_normal((8, 4)).astype(np.float32))
print(make_plan([(t @ w).uop], False, None).kernels[0].src)
print("matches NumPy:", np.allclose((t @ w).numpy(), t.numpy() @ w.numpy(), atol=1e-5))

# %% [markdown]
# With the default optimizer (Chapter 10), the output loops are upcast by 4 in both axes: a 4 x 4 register
# tile. The placement rule is the same, applied to 16 unrolled copies of the index: sixteen accumulators
# inside the (now 4-trip) output loops, fed by *one* reduce loop (the `reduce_ranges` table of `_reduce`
# makes the unrolled copies share it).

# %%
big_a, big_b = (Tensor(rng.standard_normal((16, 16)).astype(np.float32)) for _ in range(2))
plan = make_plan([(big_a @ big_b).uop], False, DefaultOpt)
print([k.name for k in plan.kernels])
print(short(plan.kernels[-1].src))

# %% [markdown]
# (`e_1_16_16` is a copy of the second operand, transposed so that the reduce reads it with stride 1:
# the layout pass of Chapter 10.)
#
# ## 6.7 The O(N^3) bug, reproduced
#
# Fused attention is `Tensor` attention with `Tensor.fuse_reduce = True` (the kernelizer no longer cuts at
# reductions, so the whole softmax lowers inside P V, as in 6.5) and the book's `FlashOpt`, which upcasts
# the head dimension by 16 and threads the rows; both come from `examples/flash_attention.py`, the file the
# book quotes. To bring the bug back we patch `uopc.rangeify.simplify`, the book's method: only the RESHAPE
# rule calls simplify through that name, so patching it to do nothing turns off exactly that rule and
# leaves every other simplification (the final cleanup in `lower` included) in place.
# `uopc.book.reshape_simplify(False)` does the patch for one block and gives the patched run a plan cache of
# its own (plans are cached per graph shape, and the ordinary ones must not be reused or replaced).

# %%
import time
from uopc.book import load_example, reshape_simplify
from uopc.helpers import best_of

book = load_example("flash_attention")
FlashOpt, tensor_attention = book.FlashOpt, book.attention


N, D = 256, 64
q, k, v = (rng.standard_normal((N, D)).astype(np.float32) for _ in range(3))
Tensor.fuse_reduce, Tensor.opt = True, FlashOpt
good = make_plan([tensor_attention(Tensor(q), Tensor(k), Tensor(v)).uop], True, FlashOpt)
with reshape_simplify(False):
  bad = make_plan([tensor_attention(Tensor(q), Tensor(k), Tensor(v)).uop], True, FlashOpt)
print([k.name for k in good.kernels], [k.name for k in bad.kernels])


print("reshape-simplify on:\n" + short(good.kernels[-1].src))
print("reshape-simplify off:\n" + short(bad.kernels[-1].src))

# %% [markdown]
# With simplification, the row max (`acc2 = -INFINITY`) and the row sum (`acc4 = 0.0f`) are initialised
# once per row `ridx0`, before their passes over the keys (`ridx4`, `ridx6`). The output loop `ridx1 < 4`
# (64 columns, 16 at a time) then makes one more pass over the keys (`ridx2`) per group: the six
# computations of each `q_i . k_j` per row of section 11.4. Without it, the max and sum accumulators are
# initialised inside `ridx2`, the key loop of P V (twice for the max, as in 6.5), and both passes over all
# keys run again for every key. `explain()` counts, from the loop program, how many times each fused
# reduction is evaluated per element it produces:

# %%
print(good.explain().splitlines()[-2].strip())
print(bad.explain().splitlines()[-2].strip())

# %% [markdown]
# Both compute attention, to the same digits:

# %%
s = q @ k.T / math.sqrt(D)
p = np.exp(s - s.max(-1, keepdims=True))
ref = p / p.sum(-1, keepdims=True) @ v
fast = tensor_attention(Tensor(q), Tensor(k), Tensor(v)).numpy()
with reshape_simplify(False):
  make_plan([tensor_attention(Tensor(q), Tensor(k), Tensor(v)).uop], True, FlashOpt)   # compile outside the timing
  t0 = time.perf_counter()
  slow = tensor_attention(Tensor(q), Tensor(k), Tensor(v)).numpy()
  t_slow = time.perf_counter() - t0
print("simplified matches NumPy:", np.allclose(fast, ref, rtol=1e-4, atol=1e-5))
print("unsimplified matches the simplified output to 1e-6:", np.allclose(slow, fast, rtol=1e-6, atol=1e-6))

# %% [markdown]
# and one is far slower (one run of the slow version; best of 5 of the fast one):

# %% tags=["nbval-ignore-output"]
t_fast = best_of(lambda: tensor_attention(Tensor(q), Tensor(k), Tensor(v)).numpy(), 5)
print(f"N={N} reshape-simplify on:  {t_fast * 1e3:9.1f} ms")
print(f"N={N} reshape-simplify off: {t_slow * 1e3:9.1f} ms")

# %% tags=["nbval-ignore-output"]
print(f"slowdown: {t_slow / t_fast:.0f}x at N = {N}")

# %% [markdown]
# The slowdown printed above is this machine's, at this N. The book measured 240 times at N = 512 (NOTES 12 recorded
# 250x) on its own machine: two times on two machines, so the two ratios need not agree. The work of the slow kernel
# grows as N^3 against the fast one's N^2, so the ratio of the work grows like N; the ratio of the times need not
# follow it exactly, since part of the fast version's time at small N does not grow with N^2 (exercise 6 fits the
# exponents).

# %%
Tensor.fuse_reduce, Tensor.opt = False, DefaultOpt

# %% [markdown]
# ## Pitfalls
#
# - **Ask dependence questions of simplified expressions.** `ranges_in` (like `Ix.names`) answers about the
#   spelling. uopc simplifies the indices a RESHAPE produces immediately, before anything asks which loops
#   they use; the memo, keyed on `(node, index)`, also needs one spelling per value.
# - **A value test cannot catch misplaced accumulators.** The recomputed reduction gives the same answer.
#   Assert the loop structure (tests/spine/test_ch06_rangeify.py reads the generated C), or count work, as 6.5
#   did with `exp`, or time it.
# - **Initialise where you declare.** An accumulator initialised outside the loop that owns it would keep
#   summing across iterations (wrong answers); one initialised too deep recomputes (slow answers). The
#   AFTER edge of `_reduce` ties the initialisation to the placement, so the two cannot drift apart.
# - **The identity depends on the dtype.** `-inf` is the identity of a float max; an integer max starts
#   from the smallest integer (`uopc.rangeify.identity`).
#
# ## Exercises
#
# 1. Add `"MUL"` (product) reductions to the mini rangeify. What is the identity? Check against `np.prod`.
# 2. Our `reduce_loop` reduces one axis. Extend it to the last `n` axes (nested loops, one accumulator),
#    and use it for `x.sum((1, 2))` on a (2, 3, 4) input.
# 3. Write the graph for `x - x.mean(-1)` (mean as sum times a constant) and predict, before running it,
#    where the accumulator goes and how many times it is computed per row.
# 4. Make the mini memo key `(node, index text)` only, without the home loop. Find a graph where the
#    kernel then reads an accumulator before it was computed for the current iteration.
# 5. In 6.5, predict the exp count of both kernels as a formula in N and D, and check it at D = 4.
# 6. Run the patched uopc kernel at N = 64, 128 and 256 and fit the exponent of the running time. Why is
#    the fast kernel not exactly quadratic on this machine?
