# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # 11b. Appendix: the compiler finds flash attention by itself
#
# Chapter 11 computed attention three ways: unfused (six kernels, two N x N buffers), fused with recompute
# (`fuse_reduce=True`: no N x N buffer, but each dot product of Q K^T computed six times per (query, key) pair)
# and online softmax, written by hand in the loop IR (section 11.7). This appendix teaches the compiler the algebra
# of section 11.6, so that the Tensor one-liner
#
#     (q @ k.T * (1 / math.sqrt(D))).softmax(-1) @ v
#
# becomes one kernel making one pass over the keys, with nothing recomputed. The switch is
# `Tensor.online_softmax = True`. It is off by default, because chapter 11's plans (six kernels unfused, two
# fused) are the subject of that chapter.
#
# **What you'll see:** the three plans side by side; the generated kernel before and after; why the rewrite is
# safe (it checks the exact form, and falls back when it does not match); softmax and log-sum-exp alone; and the
# times of every version, including uopc's tiled FlashAttention kernel (`uopc.nn.scaled_dot_product_attention`).

# %% tags=["nbval-ignore-output"]
from uopc.bench import header
print(header())   # the machine every timing below comes from

# %%
import math, re
import numpy as np
from uopc.book import load_example
book = load_example("flash_attention")   # the book's examples/flash_attention.py (from any folder)
from uopc.tensor import Tensor
from uopc.kernelize import make_plan

def attention(q, k, v): return (q @ k.T * (1 / math.sqrt(q.shape[-1]))).softmax(-1) @ v

N, D = 1024, 64
rng = np.random.default_rng(0)
q, k, v = (rng.standard_normal((N, D)).astype(np.float32) for _ in range(3))
s = q @ k.T / math.sqrt(D)
p = np.exp(s - s.max(-1, keepdims=True))
ref = (p / p.sum(-1, keepdims=True)) @ v
graph = attention(Tensor(q), Tensor(k), Tensor(v)).uop

# %% [markdown]
# ## The core of the rewrite, built here first
#
# Before using uopc's rewrite, we build its core on the smallest graph that has it: softmax's denominator,
# `(x - x.max(-1, keepdim=True)).exp().sum(-1)`, for a small matrix x. The rewrite does two things.
#
# 1. **Match.** Find a sum over the last axis of `2^((x - m) * c)`, where `m` is the max of *the same* `x` over the
#    same axis and `c > 0` (the Tensor's `exp` is `exp2` of its argument times log2 e). Broadcasting puts movement ops
#    (RESHAPE, EXPAND) between these nodes; they change shapes, not values, so the matcher looks through them. And
#    "the same x" is an identity test: UOps are hash-consed, so the max's source and the exponent's x are one node
#    when they are one value.
# 2. **Emit.** Instead of two passes (the max, then the sum), one loop over the row carrying a running max M and a
#    running sum L, rescaled by `2^((M_old - M_new) * c)` whenever the max grows: section 11.6's recurrence, in the
#    loop IR of section 11.7. Rangeify (chapter 6) gives the value of x at (row, key), whatever x is.
#
# Here is the graph, as the kernelizer hands it to a lowering (its tensor buffer replaced by the kernel's parameter
# 0), and the matcher:

# %%
from uopc.dtype import dtypes
from uopc.uop import UOp, Ops, ParamArg, AxisType, MOVEMENT, range_, sink, substitute
from uopc.rangeify import Ctx, rangeify
from uopc.render_c import render_c
from uopc.runtime import Program

f32 = dtypes.f32
ROWS, COLS = 4, 8
xs = rng.standard_normal((ROWS, COLS)).astype(np.float32) * 3
t = Tensor(xs)
denominator = (t - t.max(-1, keepdim=True)).exp().sum(-1)     # softmax's denominator, row by row
(buf,) = [u for u in denominator.uop.toposort() if u.op is Ops.BUFFER]
small = substitute(denominator.uop, {buf: UOp(Ops.BUFFER, (), ParamArg(0, f32, buf.arg.shape))})
print(small)


def strip(u: UOp) -> UOp:
  """u without the movement ops (RESHAPE, EXPAND, ...) on top: broadcasting changes shapes, not values."""
  while u.op in MOVEMENT: u = u.src[0]
  return u


def match_denominator(u: UOp) -> tuple[UOp, float] | None:
  """(x, c) if u is sum_j 2^((x_j - max_j x_j) * c) over its last axis, with c > 0 and the max taken of the very
  same x; else None."""
  if u.op is not Ops.REDUCE or u.arg != (Ops.ADD, 1): return None
  e = strip(u.src[0])
  if e.op is not Ops.EXP2 or e.src[0].op is not Ops.MUL: return None
  diff, c = e.src[0].src[0], strip(e.src[0].src[1])
  if diff.op is not Ops.ADD or c.op is not Ops.CONST or c.arg <= 0: return None
  x, neg = diff.src[0], strip(diff.src[1])             # x + (max * -1)
  if neg.op is not Ops.MUL or strip(neg.src[1]).op is not Ops.CONST or strip(neg.src[1]).arg != -1: return None
  mx = strip(neg.src[0])
  if mx.op is not Ops.REDUCE or mx.arg != (Ops.MAX, 1) or mx.src[0] is not x: return None   # one node: one value
  return x, c.arg


x_node, c = match_denominator(small)
print(f"\nmatched: x of shape {x_node.shape}, c = {c} (log2 e)")
for name, other in (("a max of 2x, an exponent of x", (t - (t * 2).max(-1, keepdim=True)).exp().sum(-1)),
                    ("a max over the other axis", (t - t.max(0, keepdim=True)).exp().sum(-1))):
  print(f"{name}: {match_denominator(other.uop)}")

# %% [markdown]
# The two graphs below it are refused: their max is not of the exponent's x over its axis, and the one-pass
# algebra would compute something else. Now the emitter, one pass per row with the state declared inside the row
# loop (per-thread state, NOTES 9), and the kernel it writes, checked against NumPy:

# %%
def online_denominator_ir(x: UOp, c: float, rows: int, n: int) -> UOp:
  """One pass over each row: a running max M and a running sum L, rescaled when M grows (section 11.6)."""
  OUT = UOp(Ops.BUFFER, (), ParamArg(1, f32, (rows,)))
  M, L = (UOp(Ops.ALLOC, (), ParamArg(slot, f32, (1,))) for slot in (0, 1))
  i = range_(rows, 0, AxisType.THREAD)
  Mi, Li = M.after(i), L.after(i)
  init_m, init_l = Mi.index(0).store(UOp.const(-math.inf)), Li.index(0).store(UOp.const(0.0))
  j = range_(n, 1)
  xj = rangeify(x, (i, j), Ctx())                       # the graph's x at (i, j): here a load of parameter 0
  Mj, Lj = Mi.after(init_m, j), Li.after(init_l, j)
  m_old = Mj.index(0).load()
  m_new = m_old.maximum(xj)
  corr, p = ((m_old - m_new) * c).exp2(), ((xj - m_new) * c).exp2()   # rescale the old sum; this key's term
  step = UOp(Ops.SINK, (Lj.index(0).store(Lj.index(0).load() * corr + p), Mj.index(0).store(m_new))).end(j)
  return sink(OUT.index(i).store(Li.after(step).index(0).load()).end(i))


core_src = render_c(online_denominator_ir(x_node, c, ROWS, COLS), "online_denominator")
print(core_src)
got = np.zeros(ROWS, np.float32)
Program(core_src, "online_denominator")(xs.reshape(-1), got)
want = np.exp(xs.astype(np.float64) - xs.max(-1, keepdims=True)).sum(-1)
print("one pass matches NumPy's two:", np.allclose(got, want, rtol=1e-5))
two = make_plan([denominator.uop], False, Tensor.opt, False).kernels
print("uopc without the rewrite:", [kk.name for kk in two], "loops over a row of 8:",
      sum(len(re.findall(r"< 8;", kk.src)) for kk in two))

# %% [markdown]
# One loop over each row, where uopc without the rewrite makes two (a kernel for the max, then the sum). That is the
# whole idea. uopc's rewrite (`uopc.codegen.online`, below) adds what a real graph needs: the sum it rewrites can be
# weighted, `sum_j p_j v_j` (P V in attention), so it keeps one more accumulator per output column with the same
# correction; the max's x can itself be a reduction (S = Q K^T), computed once per key inside the pass; the keys can
# come a tile at a time; and it must not disturb the rest of the lowering when it refuses.
#
# ## Three plans for one graph
#
# `make_plan` takes the switch as its last argument. Read the three `explain()` outputs: the unfused plan cuts at
# every REDUCE; the fused plan cuts nowhere but recomputes the dot product six times per (query, key) pair; the
# online plan keeps a running max and sum, and computes each dot product once.

# %%
variants = (("unfused", False, Tensor.opt, False), ("fused (FlashOpt)", True, book.FlashOpt, False),
            ("online softmax", False, Tensor.opt, True))
for label, fuse, opt, online in variants:
  plan = make_plan([graph], fuse, opt, online)
  print(f"== {label}: kernels {[kk.name for kk in plan.kernels]}, temps {[n for _, n in plan.temps]}")
  print(plan.explain())

# %% [markdown]
# The online plan has no temporary at all: with one pass over the keys, the kernel reads `V` row by row
# (`v_j` for every output column at once), so the layout pass no longer copies it.
#
# ## The kernel
#
# Here is the whole generated kernel at a size small enough to print (N = 64, D = 4), in its simplest form: one
# query row and one key per iteration (the default optimizer takes a 4 x 8 tile of rows and keys, below). Compare it
# with the book's hand-written `online_attention_ir` (section 11.7): one parallel loop over rows, one loop over keys
# with the dot product inside it, a running max, a running sum, and one accumulator per output column, all
# rescaled by the same correction factor.

# %%
from uopc.codegen.online import OnlineSoftmax
from uopc.opt import layout_pass, online_opts
from uopc.rangeify import lower

class OneRowOneKey:
  """The online pass with no tile: one query row per thread iteration, one key per iteration of the pass."""
  layout = staticmethod(layout_pass)
  @staticmethod
  def lower(body, out, options):
    # the online rewrite is a reduce lowering of its own: rangeify asks it first, before the ordinary _reduce
    ctx = Ctx(options=options, lowerings=(OnlineSoftmax(body),))
    if (o := online_opts(body, rows=1, keys=1)) is not None: ctx.opts = o
    return lower(body, out, ctx)

small = attention(Tensor(q[:64, :4]), Tensor(k[:64, :4]), Tensor(v[:64, :4])).uop
print(make_plan([small], False, OneRowOneKey, True).kernels[-1].src)

# %% [markdown]
# `acc1` is the running max (it starts at `-INFINITY`), `acc2` the running sum, `acc3[4]` the output row and `acc0`
# the dot product q_i . k_j, started afresh for every key. Of the two `exp2f` lines, the first is the correction
# `exp2(m_old - m_new)` that rescales everything accumulated so far, the second the weight of the current key; the
# loop over the output row inside the key loop applies both, and the last lines divide by the running sum. The
# compiler wrote the book's kernel, down to the shape of its output accumulator, one array of D floats (`acc3[4]`
# here, where D = 4): the output columns of P V are all unrolled, so the rewrite keeps them in one array and
# updates it with a loop inside the pass (a loop the C compiler vectorises; one scalar accumulator per column, the
# first version, it did not: NOTES 16).
#
# The default optimizer (`online_opts`) takes 4 query rows per iteration of the parallel loop and 8 keys per
# iteration of the pass: 32 dot products share one loop over the head dimension (each loaded q value serves 8 of
# them and each k value 4, the register tile of chapter 10), and the running state is rescaled once per 8 keys.
# On one thread the tile makes the pass markedly faster (NOTES 16 measures it for several tile shapes).
#
# ## How the rewrite works, and when it refuses
#
# `uopc.codegen.online` is the matcher and the emitter built above, grown for real graphs. It works in two places:
#
# 1. **The kernelizer** (`find_groups`) finds softmax's denominator: a REDUCE(ADD) over one axis of `exp2` of
#    something minus a REDUCE(MAX) over an axis of the same length. With the switch on, those reductions, and the
#    reductions their max reads (`S = Q K^T`), are not cut: they will be computed once per key inside one pass.
# 2. **The reduce lowering** (`OnlineSoftmax.lower_reduce`, which rangeify asks before its ordinary `_reduce`;
#    an optimizer installs it in `Ctx.lowerings` when the options ask for online softmax). When rangeify lowers a
#    sum over `j` (P V's reduction, or the denominator itself), it rangeifies the summand with *placeholders*
#    standing for the row's
#    max `m` and sum `l`, then checks the result factor by factor: exactly one factor must be
#    `exp2((x(j) - m) * c)` with `c > 0`, where `x(j)` is *the same node* as the max's own source at `j` (hash
#    consing makes that an identity test), the factors with `l` must not depend on `j`, and the rest is `g(j)`.
#    Only then does it build the loop of section 11.6. It tries all this on a fork of the lowering context
#    (`Ctx.fork`) and adopts the fork only when the pass is complete; otherwise it drops the fork and lets
#    `_reduce` do the ordinary thing.
#
# Here it refuses: the max is of `2x`, the exponent of `x`. The plan keeps the ordinary two passes (max, then
# sum), and the answer is right.

# %%
x = rng.standard_normal((64, 100)).astype(np.float32)
t = Tensor(x)
wrong = (t - (t * 2).max(-1, keepdim=True)).exp().sum(-1)
plan = make_plan([wrong.uop], False, Tensor.opt, True)
lines = plan.kernels[-1].src.splitlines()
passes = [ln.strip() for k, ln in enumerate(lines) if ln.strip().startswith("for (") and "#pragma" not in lines[k - 1]]
print("passes over each row:", len(passes))   # the max, then the sum (each unrolled by 4: 25 iterations)
Tensor.online_softmax = True
print("matches NumPy:", np.allclose(wrong.numpy(), np.exp(x - (2 * x).max(-1, keepdims=True)).sum(-1), rtol=1e-5))
Tensor.online_softmax = False

# %% [markdown]
# ## Softmax and log-sum-exp alone
#
# The same lowering turns softmax's max and sum into one pass (then one more pass writes the probabilities),
# and log-sum-exp into a single pass.

# %%
cases = (("softmax", lambda t: t.softmax(-1)), ("log_softmax", lambda t: t.log_softmax(-1)),
         ("logsumexp", lambda t: t.max(-1) + (t - t.max(-1, keepdim=True)).exp().sum(-1).log()))
for name, fn in cases:
  t = Tensor(x)
  out = fn(t)
  before, after = (make_plan([out.uop], False, Tensor.opt, on) for on in (False, True))
  loops = lambda plan: sum(len(re.findall(r"< 100;", kk.src)) for kk in plan.kernels)
  print(f"{name:12s} kernels {len(before.kernels)} -> {len(after.kernels)}, "
        f"passes over a row {loops(before)} -> {loops(after)}")

# %% [markdown]
# ## Does it pay?
#
# Each time is the best of five calls after a warm-up (`reps=5`), the six implementations interleaved in one process
# (`uopc.bench.interleaved`): NumPy, the unfused and fused Tensor plans, the book's hand-written online kernel, the
# online rewrite, and uopc's FlashAttention kernel for the CPU (`uopc.nn.scaled_dot_product_attention`, which runs
# `uopc.nn.flash`'s vector kernel: several query rows at a time, with queries or keys in the lanes of the CPU's
# vector registers, the tile chosen by the tuner or its heuristic). The numbers depend on the machine printed at
# the top and on what else ran on it; the chart below draws them.

# %% tags=["nbval-ignore-output"]
from uopc.bench import attention_peers, interleaved
times = {}
for n in (1024, 2048):
  qn, kn, vn = (rng.standard_normal((n, D)).astype(np.float32) for _ in range(3))
  fns = attention_peers(qn, kn, vn, False, {"fused"})
  base = fns["numpy"]()
  assert all(np.abs(f() - base).max() < 1e-4 for f in fns.values())
  t = times[n] = interleaved(fns, reps=5)
  print(f"N={n}: " + ", ".join(f"{name} {sec * 1e3:.1f} ms" for name, sec in t.items()))
  print(f"        rewrite / book online = {t['rewrite'] / t['online']:.2f}, "
        f"rewrite / flash = {t['rewrite'] / t['flash']:.2f}")

# %%
import matplotlib.pyplot as plt
names = list(times[1024])
label = {"online": "book's online kernel", "rewrite": "online rewrite", "flash": "FlashAttention (vector)"}
fig, ax = plt.subplots(figsize=(8, 3.6))
y = np.arange(len(names))
for k, (n, t) in enumerate(times.items()):
  ax.barh(y + 0.4 * k - 0.2, [t[name] * 1e3 for name in names], 0.4, label=f"N = {n}")
ax.set_yticks(y, [label.get(name, name) for name in names])
ax.invert_yaxis()
ax.set_xscale("log")
ax.set_xlabel("ms, best of 5 (log scale)")
ax.set_title(f"Attention, D = {D}, float32: six implementations on this machine (the header above)", fontsize=10)
ax.legend(loc="lower right")
fig.tight_layout()
plt.show()

# %% [markdown]
# What to read in the chart: the rewrite does the same work as the book's online kernel (one dot product per
# (query, key) pair, one pass over the keys), but not in the same way. The book's kernel takes one query row per
# iteration of its parallel loop; the rewrite, with `online_opts`' default tile, takes 4 rows and 8 keys at a time,
# so each loaded key row serves 4 queries (chapter 10's register tile, the step Exercise 11.5 asks for). The ratio
# `rewrite / book online` above says what that tile is worth on this machine. The FlashAttention kernel adds vector
# instructions across its tile, and `rewrite / flash` says how the scalar rewrite compares with it here. The fused
# plan computes every dot product six times, which its bar shows; the unfused plan writes and reads two N x N
# buffers but runs its two matmuls as register-tiled GEMMs, so where it lands depends on the machine.
#
# ## Pitfalls
#
# - **The state must live where the accumulators live.** The running max and sum are placed inside every output
#   loop of the kernel. With the default 4 x 4 register tile the head dimension is a loop of 16 column blocks,
#   and each block would make its own pass over the keys (section 11.4's lesson again). The default optimizer
#   therefore unrolls the whole head dimension for a kernel that holds an online pass (`online_opts`).
# - **Placeholders must not leak.** While the pass is being built, the row's max and sum are placeholders;
#   anything memoized with a placeholder inside is discarded afterwards, or a later use would read a value that
#   only exists inside the loop ("the loop program has a cycle").
# - **All-masked rows.** A causal or padding mask written as `-inf` works (the rewrite sees `x + mask`); a row with
#   every key masked gives NaN here, as it does in NumPy. `uopc.nn.scaled_dot_product_attention` returns zeros.
#
# ## Exercises
#
# 1. Make the rewrite fire for `exp` written as `(x - m).exp()` on a float64 tensor, and check the C.
# 2. Extend `find_groups` to a softmax over a non-last axis (`softmax(0)`). Which check in `online_reduce` fails,
#    and why is it right to fail?
# 3. Time the rewrite with other tiles of `online_opts` (`rows` in 1, 2, 4, 8 and `keys` in 1, 4, 8, 16; a variant
#    of `OneRowOneKey` passes them) and compare the best with the FlashAttention kernel. What does the vector kernel
#    do that a larger scalar tile cannot?
