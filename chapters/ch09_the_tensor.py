# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # Chapter 9. The Tensor
#
# Chapters 3 to 8 built a compiler whose input is a graph of tensor-level UOps. Nobody wants to write those
# graphs by hand. The **Tensor** is the front end: an object that looks like a NumPy array (`+`, `@`,
# `.sum(axis)`, `.reshape`, slicing, broadcasting) but computes nothing. Each operation returns a new
# Tensor whose UOp records what to compute; only `.numpy()` (or `.realize()`) hands the graph to the
# kernelizer (Chapter 7) and realize (Chapter 8). Laziness is what makes fusion possible: when the graph
# is complete, the compiler sees all of it.
#
# Every Tensor method is a few lines that reduce a NumPy-style operation to the small set of graph ops:
# elementwise ALU ops, five movement ops (RESHAPE, EXPAND, PERMUTE, SHRINK, PAD), REDUCE over the last
# axes, STACK, STAGE and DETACH. Broadcasting is an EXPAND; a matmul is an EXPAND of both sides, a
# multiply and a REDUCE; softmax is two reductions and some arithmetic. And because the graph is data,
# differentiating it is another graph transformation: reverse-mode **autograd**, a table of derivative
# rules.
#
# What you'll build: a lazy tensor of about 80 lines evaluated with NumPy, with broadcasting and a
# reverse-mode `gradient()`; then `uopc.tensor`: movement ops, matmul, softmax's kernels, and uopc's
# gradient checked against finite differences.

# %% [markdown]
# ## 9.1 A lazy tensor
#
# A node holds an op, its sources, an argument and its shape. Leaves hold data. Nothing runs until
# `numpy()`, which evaluates the graph bottom-up with NumPy, computing each node once (a memo keyed by
# node).

# %%
import numpy as np


class Lazy:
  """A lazy n-dimensional array: an op over source Lazys, evaluated by numpy()."""
  def __init__(self, op, src=(), arg=None, shape=(), data=None):
    self.op, self.src, self.arg, self.shape, self.data = op, tuple(src), arg, tuple(shape), data

  @staticmethod
  def of(a) -> "Lazy":
    a = np.asarray(a, dtype=np.float64)
    return Lazy("data", shape=a.shape, data=a)

  # ---- movement: only the shape changes ----
  def reshape(self, *shape): return Lazy("reshape", (self,), shape, shape)
  def permute(self, *order): return Lazy("permute", (self,), order, tuple(self.shape[o] for o in order))
  def expand(self, *shape): return self if shape == self.shape else Lazy("expand", (self,), shape, shape)
  @property
  def T(self): return self.permute(*reversed(range(len(self.shape))))

  # ---- elementwise, with NumPy broadcasting ----
  def _binary(self, op, other):
    other = other if isinstance(other, Lazy) else Lazy.of(other)
    shape = broadcast_shape(self.shape, other.shape)
    return Lazy(op, (self._to(shape), other._to(shape)), shape=shape)
  def _to(self, shape):
    """Broadcast: size-1 axes on the left first, then EXPAND."""
    x = self.reshape(*(1,) * (len(shape) - len(self.shape)), *self.shape) if len(shape) > len(self.shape) else self
    return x.expand(*shape)
  def __add__(self, x): return self._binary("add", x)
  def __mul__(self, x): return self._binary("mul", x)
  def __sub__(self, x): return self + (x if isinstance(x, Lazy) else Lazy.of(x)) * -1.0
  def __truediv__(self, x): return self * (x if isinstance(x, Lazy) else Lazy.of(x)).recip()
  def eq(self, x): return self._binary("eq", x)
  def exp(self): return Lazy("exp", (self,), shape=self.shape)
  def log(self): return Lazy("log", (self,), shape=self.shape)
  def recip(self): return Lazy("recip", (self,), shape=self.shape)

  # ---- reductions over one axis ----
  def _reduce(self, op, axis, keepdim):
    axis = axis % len(self.shape)
    kept = self.shape[:axis] + self.shape[axis + 1:]
    out = Lazy(op, (self,), axis, kept)
    return out.reshape(*self.shape[:axis], 1, *self.shape[axis + 1:]) if keepdim else out
  def sum(self, axis=-1, keepdim=False): return self._reduce("sum", axis, keepdim)
  def max(self, axis=-1, keepdim=False): return self._reduce("max", axis, keepdim)

  # ---- composites ----
  def __matmul__(self, w):   # (n, k) @ (k, m): broadcast to (n, m, k), multiply, sum the last axis
    (n, k), m = self.shape, w.shape[1]
    return (self.reshape(n, 1, k).expand(n, m, k) * w.T.reshape(1, m, k).expand(n, m, k)).sum(-1)
  def softmax(self, axis=-1):
    e = (self - self.max(axis, keepdim=True)).exp()
    return e / e.sum(axis, keepdim=True)

  def numpy(self) -> np.ndarray: return evaluate(self, {})


def broadcast_shape(a, b):
  """NumPy's rule: align from the right; each pair of sizes must be equal or contain a 1."""
  n = max(len(a), len(b))
  a, b = (1,) * (n - len(a)) + tuple(a), (1,) * (n - len(b)) + tuple(b)
  if any(x != y and 1 not in (x, y) for x, y in zip(a, b)): raise ValueError(f"cannot broadcast {a} and {b}")
  return tuple(max(x, y) for x, y in zip(a, b))


NP = {"add": np.add, "mul": np.multiply, "exp": np.exp, "log": np.log, "recip": np.reciprocal,
      "eq": lambda a, b: (a == b).astype(np.float64),
      "sum": lambda x, ax: x.sum(ax), "max": lambda x, ax: x.max(ax),
      "reshape": np.reshape, "permute": np.transpose, "expand": np.broadcast_to}


def evaluate(u: Lazy, memo: dict) -> np.ndarray:
  if u in memo: return memo[u]
  if u.op == "data": r = u.data
  else:
    srcs = [evaluate(s, memo) for s in u.src]
    r = NP[u.op](*srcs, u.arg) if u.arg is not None else NP[u.op](*srcs)
  memo[u] = r
  return r


rng = np.random.default_rng(0)
a, b, w = rng.standard_normal((3, 4)), rng.standard_normal(4), rng.standard_normal((4, 2))
checks = {
  "a + b (broadcast)": ((Lazy.of(a) + Lazy.of(b)).numpy(), a + b),
  "a.sum(0)": (Lazy.of(a).sum(0).numpy(), a.sum(0)),
  "a.T * 2": ((Lazy.of(a).T * 2.0).numpy(), a.T * 2),
  "a @ w": ((Lazy.of(a) @ Lazy.of(w)).numpy(), a @ w),
  "softmax(a)": (Lazy.of(a).softmax().numpy(), np.exp(a) / np.exp(a).sum(-1, keepdims=True)),
}
for name, (got, want) in checks.items(): print(f"{name:18s} matches NumPy: {np.allclose(got, want)}")

# %% [markdown]
# Building the graph is instant and nothing is computed until asked:

# %%
t = (Lazy.of(a) @ Lazy.of(w)).softmax()


def count(u: Lazy, seen=None) -> dict:
  seen = set() if seen is None else seen
  if id(u) in seen: return {}
  seen.add(id(u))
  out = {u.op: 1}
  for s in u.src:
    for k, n in count(s, seen).items(): out[k] = out.get(k, 0) + n
  return out


print("a graph of", sum(count(t).values()), "nodes:", dict(sorted(count(t).items())))

# %% [markdown]
# ## 9.2 Broadcasting
#
# NumPy's rule aligns shapes from the right; each pair of sizes must be equal or contain a 1, and the 1
# is stretched. In the graph, stretching is two movement ops: a RESHAPE that adds size-1 axes on the left
# (`(4,)` -> `(1, 4)`) and an EXPAND of the size-1 axes (`(1, 4)` -> `(3, 4)`). An EXPAND costs nothing:
# Chapter 6's rangeify turns it into an index that ignores the expanded axis.

# %%
for sa, sb in (((3, 4), (4,)), ((2, 1, 4), (3, 1)), ((5, 1), (1, 6)), ((3, 4), (5, 4))):
  try: print(f"{sa} with {sb} -> {broadcast_shape(sa, sb)}")
  except ValueError as e: print(f"{sa} with {sb} -> ValueError: {e}")

# %% [markdown]
# uopc's `broadcast_shape` and `Tensor` do the same, and say which axis failed:

# %%
from uopc.tensor import Tensor, broadcast_shape as uopc_broadcast_shape

print(uopc_broadcast_shape((2, 1, 4), (3, 1)))
try: Tensor(np.ones((3, 4), np.float32)) + Tensor(np.ones((5, 4), np.float32))
except ValueError as e: print("ValueError:", e)

# %% [markdown]
# ## 9.3 The uopc Tensor: movement ops
#
# `uopc.tensor.Tensor` wraps a UOp (Chapter 3). A Tensor made from a NumPy array copies the data into a
# flat BUFFER and views it through a RESHAPE to the array's shape; every operation returns a new Tensor on
# a new UOp. A printer for the graphs (the same as Chapter 7's), and the methods one at a time:

# %%
from uopc.uop import Ops, UOp


def show(u: UOp) -> str:
  """A tensor expression as one line: data as `x`, movement ops as methods."""
  if u.op is Ops.BUFFER: return "x"
  if u.op is Ops.CONST: return repr(u.arg)
  s = [show(src) for src in u.src]
  if u.op is Ops.REDUCE: return f"{u.arg[0].name.lower()}({s[0]}, last {u.arg[1]})"
  if u.op in (Ops.RESHAPE, Ops.EXPAND, Ops.PERMUTE, Ops.SHRINK, Ops.PAD): return f"{s[0]}.{u.op.name.lower()}{u.arg}"
  return f"{u.op.name.lower()}({', '.join(s)})"


c_np = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
c = Tensor(c_np)
views = {
  "c.reshape(6, -1)": (c.reshape(6, -1), c_np.reshape(6, -1)),
  "c.permute(2, 0, 1)": (c.permute(2, 0, 1), c_np.transpose(2, 0, 1)),
  "c.T": (c.T, c_np.T),
  "c[1, :, -2:]": (c[1, :, -2:], c_np[1, :, -2:]),
  "c[..., 1]": (c[..., 1], c_np[..., 1]),
  "c.pad(((0, 0), (1, 0), (0, 2)))": (c.pad(((0, 0), (1, 0), (0, 2))), np.pad(c_np, ((0, 0), (1, 0), (0, 2)))),
  "Tensor.cat([c, c[:, :1]], 1)": (Tensor.cat([c, c[:, :1]], 1), np.concatenate([c_np, c_np[:, :1]], 1)),
  "Tensor.stack([c, c], -1)": (Tensor.stack([c, c], -1), np.stack([c_np, c_np], -1)),
}
for name, (t, ref) in views.items():
  graph = show(t.uop)     # before realizing: afterwards t.uop is the data
  print(f"{name:32s} {str(t.shape):14s} {np.array_equal(t.numpy(), ref)}   {graph[:68]}")

# %% [markdown]
# Slicing is a SHRINK (a start and an end per axis), plus a RESHAPE that drops the axes indexed by an
# integer; negative indices are counted from the end, as in NumPy, and out-of-range ones raise
# `IndexError`. Steps, `None` and integer-tensor indices are section 9.8's. `cat` pads every
# piece with zeros to the full length and adds the pieces: the additions of zeros are cheap, and it needs
# no op of its own. `stack` is the STACK op, which selects one of its sources by the first index.
#
# ## 9.4 Matmul
#
# `(..., n, k) @ (..., k, m)`: both operands are reshaped and broadcast to `(..., n, m, k)`, multiplied,
# and the last axis summed. A 1-D operand becomes a row or a column and the extra axis is dropped again;
# batch axes broadcast like any other.

# %%
x = Tensor(rng.standard_normal((2, 1, 3, 4)).astype(np.float32))
y = Tensor(rng.standard_normal((5, 4, 6)).astype(np.float32))
z = x @ y
print("shape", z.shape, "matches NumPy:", np.allclose(z.numpy(), x.numpy() @ y.numpy(), atol=1e-5))
print(show((Tensor(np.ones((3, 4), np.float32)) @ Tensor(np.ones((4, 5), np.float32))).uop))
try: Tensor(np.ones((3, 4), np.float32)) @ Tensor(np.ones((5, 6), np.float32))
except ValueError as e: print("ValueError:", e)

# %% [markdown]
# A broadcast multiply followed by a sum looks wasteful (an `(n, m, k)` tensor!), but nothing of that
# shape is ever stored: rangeify (Chapter 6) lowers it to the three nested loops of a GEMM with one
# accumulator, and the default optimizer tiles it (Chapter 10).
#
# ## 9.5 Softmax and its kernels
#
# `softmax(axis)` is `e = (x - x.max(axis, keepdim=True)).exp(); e / e.sum(axis, keepdim=True)`:
# subtracting the row max keeps every exponent at most 0, so nothing overflows. `exp(x)` is written
# `exp2(x * log2 e)`, the one exponential the renderer knows. What does the kernelizer make of it?

# %%
from uopc.kernelize import make_plan
from uopc.opt import DefaultOpt


def np_softmax(x, axis=-1):
  e = np.exp(x - x.max(axis, keepdims=True))
  return e / e.sum(axis, keepdims=True)


s_np = rng.standard_normal((1024, 1024)).astype(np.float32)
s = Tensor(s_np)
for name, t in (("softmax(-1)", s.softmax(-1)), ("softmax(0)", s.softmax(0)), ("log_softmax(-1)", s.log_softmax(-1))):
  for fuse in (False, True):
    plan = make_plan([t.uop], fuse, DefaultOpt)
    names, temps = [k.name for k in plan.kernels], [n for _, n in plan.temps]
    print(f"{name:16s} fuse_reduce={fuse!s:5s}: kernels {names}, temps {temps}")

# %% [markdown]
# Three kernels by default: the row max (`r_1024`), the row sum of exponentials (`r_1024`), and the
# output (`e_1024_1024`), with two temporaries of one float per row. The exponentials are never stored:
# the sum kernel and the output kernel both compute them (Chapter 7's trade, decided for recompute,
# because storing them would be an N x N buffer). With `fuse_reduce`, one kernel. A softmax over axis 0
# is the same plan: `_reduce` in `Tensor` permutes the reduced axis to the end, and rangeify folds the
# permute into the indices. Values, including rows whose entries are large:

# %%
print("softmax(-1)     matches NumPy:", np.allclose(s.softmax(-1).numpy(), np_softmax(s_np, -1), atol=1e-6))
print("softmax(0)      matches NumPy:", np.allclose(s.softmax(0).numpy(), np_softmax(s_np, 0), atol=1e-6))
m = s_np - s_np.max(-1, keepdims=True)
ls = m - np.log(np.exp(m).sum(-1, keepdims=True))
print("log_softmax(-1) matches NumPy:", np.allclose(s.log_softmax(-1).numpy(), ls, atol=1e-5))
big = np.array([[1000.0, 1001.0, 999.0]], np.float32)
print("softmax of [1000, 1001, 999]:", Tensor(big).softmax(-1).numpy().round(4))

# %% [markdown]
# ## 9.6 Reverse-mode autograd, small
#
# To train anything we need gradients. The graph is data, so the gradient of a scalar `f` with respect to
# every node is another graph, built by walking the graph backwards (reverse mode). Each op has a rule: given
# the gradient `g` flowing into its output, the gradient flowing into each source. The rules for our
# `Lazy`:

# %%
def unexpand(g: Lazy, shape) -> Lazy:
  """The gradient of a broadcast: sum over every axis that was stretched."""
  for ax, (a, n) in enumerate(zip(shape, g.shape)):
    if a != n: g = g.sum(ax, keepdim=True)
  return g


RULES = {
  "add": lambda out, s, g: (g, g),                                       # d(a+b) = da + db
  "mul": lambda out, s, g: (g * s[1], g * s[0]),                         # d(ab) = b da + a db
  "exp": lambda out, s, g: (g * out,),                                   # d(e^x) = e^x dx
  "log": lambda out, s, g: (g / s[0],),                                  # d(log x) = dx / x
  "recip": lambda out, s, g: (g * out * out * -1.0,),                    # d(1/x) = -dx / x^2
  "eq": lambda out, s, g: (None, None),                                  # a comparison has no gradient
  "reshape": lambda out, s, g: (g.reshape(*s[0].shape),),
  "permute": lambda out, s, g: (g.permute(*np.argsort(out.arg)),),
  "expand": lambda out, s, g: (unexpand(g, s[0].shape),),
  "sum": lambda out, s, g: (g.reshape(*out_keepdim(s[0], out.arg))._to(s[0].shape),),
  "max": lambda out, s, g: (max_grad(out, s[0], g),),
}


def out_keepdim(x: Lazy, axis: int):
  return x.shape[:axis] + (1,) + x.shape[axis + 1:]


def max_grad(out: Lazy, x: Lazy, g: Lazy) -> Lazy:
  """The gradient goes to the maxima, shared between ties."""
  keep = out_keepdim(x, out.arg)
  hit = x.eq(out.reshape(*keep))
  return g.reshape(*keep) * hit / hit.sum(out.arg, keepdim=True)


def gradient(f: Lazy, wrt: list) -> list:
  order, seen = [], set()
  def visit(u):                                  # a topological order: sources before users
    if id(u) in seen: return
    seen.add(id(u))
    for s in u.src: visit(s)
    order.append(u)
  visit(f)
  grads = {id(f): Lazy.of(np.ones(f.shape))}
  for u in reversed(order):                      # users before sources: a node's gradient is complete
    if id(u) not in grads or u.op == "data": continue
    for s, gs in zip(u.src, RULES[u.op](u, u.src, grads[id(u)])):
      if gs is not None: grads[id(s)] = grads[id(s)] + gs if id(s) in grads else gs
  return [grads.get(id(x), Lazy.of(np.zeros(x.shape))) for x in wrt]


# %% [markdown]
# Two details. Gradients that reach a node along several paths are **added** (`grads[id(s)] + gs`): a node
# used twice contributes twice. And a node's gradient is complete only when every user has contributed,
# which the reverse topological order guarantees. Broadcasting needs no special case: the EXPAND rule sums
# the gradient over the stretched axes.
#
# Check it against finite differences, `(f(x + eps) - f(x - eps)) / 2 eps` per element, in float64:

# %%
def finite_differences(fn, xs, eps=1e-6):
  grads = []
  for k, x in enumerate(xs):
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
      plus, minus = [y.copy() for y in xs], [y.copy() for y in xs]
      plus[k][i] += eps; minus[k][i] -= eps
      g[i] = (fn(*plus) - fn(*minus)) / (2 * eps)
    grads.append(g)
  return grads


c_w, b3 = rng.standard_normal((3, 2)), rng.standard_normal(3)
cases = {
  "sum(softmax(a @ w) * c)": (lambda a, w: ((a @ w).softmax() * Lazy.of(c_w)).sum(0).sum(0),
                              lambda a, w: (np_softmax(a @ w) * c_w).sum(), [(3, 4), (4, 2)]),
  "sum(log(a.max(1) + 5) * b)": (lambda a: ((a.max(1) + 5.0).log() * Lazy.of(b3)).sum(0),
                                 lambda a: (np.log(a.max(1) + 5) * b3).sum(), [(3, 4)]),
}
for name, (lazy_fn, np_fn, shapes) in cases.items():
  xs = [rng.standard_normal(sh) for sh in shapes]
  leaves = [Lazy.of(x) for x in xs]
  ours = [g.numpy() for g in gradient(lazy_fn(*leaves), leaves)]
  ok = all(np.allclose(o, r, atol=1e-6) for o, r in zip(ours, finite_differences(np_fn, xs)))
  print(f"{name:28s} gradient matches finite differences: {ok}")

# %% [markdown]
# ## 9.7 uopc's autograd
#
# `uopc.autograd` is the same algorithm over UOps. Its rules are a table, `DERIVATIVES`, one entry per op
# with the algebra as a comment; each rule gets the node and its sources as Tensors, so a rule is
# written with Tensor operations and the gradient is a lazy Tensor graph like any other: it kernelizes,
# fuses and runs through the same compiler.

# %%
from uopc.autograd import DERIVATIVES, NO_GRADIENT
from uopc.tensor import gradient as uopc_gradient

print("rules for:", sorted(op.name for op in DERIVATIVES))
print("no gradient:", sorted(op.name for op in NO_GRADIENT))

# %% [markdown]
# Checked against finite differences in float64 (a `Tensor` made from a float64 array computes in double
# precision), for graphs that exercise the awkward rules: softmax (reductions through broadcasts), matmul,
# max (ties), pad and shrink (a slice's gradient is a pad, and back), and where (the condition gets none):

# %%
W = rng.standard_normal((4, 3))
GRAPHS = {
  "softmax": (lambda x: (x.softmax(-1) * Tensor(W)).sum(), lambda x: (np_softmax(x) * W).sum(), [(4, 3)]),
  "matmul": (lambda a, b: ((a @ b) * (a @ b)).sum(), lambda a, b: ((a @ b) ** 2).sum(), [(3, 4), (4, 2)]),
  "max": (lambda x: (x.max(1) * Tensor(np.arange(4.0))).sum(), lambda x: (x.max(1) * np.arange(4.0)).sum(), [(4, 5)]),
  "pad and shrink": (lambda x: x.pad(((1, 0), (0, 2)))[1:4, 1:5].exp().sum(),
                     lambda x: np.exp(np.pad(x, ((1, 0), (0, 2)))[1:4, 1:5]).sum(), [(3, 4)]),
  "where": (lambda x, y: (x < y).where(x * y, y.exp()).sum(), lambda x, y: np.where(x < y, x * y, np.exp(y)).sum(),
            [(3, 4), (4,)]),
  "attention": (lambda q, k, v: ((q @ k.T * 0.5).softmax(-1) @ v).square().sum(),
                lambda q, k, v: ((np_softmax(q @ k.T * 0.5) @ v) ** 2).sum(), [(3, 2), (4, 2), (4, 2)]),
}
for name, (tfn, nfn, shapes) in GRAPHS.items():
  xs = [rng.standard_normal(sh) for sh in shapes]
  ts = [Tensor(x) for x in xs]
  grads = uopc_gradient(tfn(*ts), ts)
  err = max(np.abs(g.numpy() - r).max() for g, r in zip(grads, finite_differences(nfn, xs)))
  print(f"{name:15s} max |gradient - finite differences| < 1e-6: {err < 1e-6}")

# %% [markdown]
# A gradient is a graph of the same kind as any other, and realizing it goes through the kernelizer.
# Here is the plan for the gradient of a small loss with respect to a weight matrix:

# %%
a_t, w_t = Tensor(rng.standard_normal((2, 4))), Tensor(rng.standard_normal((4, 3)))
(gw,) = uopc_gradient((a_t @ w_t).softmax(-1).max(-1).sum(), [w_t])
print(make_plan([gw.uop], False, DefaultOpt).explain())

# %% [markdown]
# Eleven small kernels for a 4 x 3 gradient. The gradient graph contains the forward graph (the loss was
# never realized), so its reductions come first: the matmul `r_2_3`, the softmax's max and sum, the loss's
# max. Then the backward pass's: the count of ties at each max, the sums of the softmax rule, and the
# weight gradient itself, a sum over the batch (`r_3_4`), written out transposed (`e_4_3`). At these
# sizes kernel launches dominate; at a real model's sizes the same plan is a handful of large matmuls,
# which is Chapter 14's business. `backward()` does the same for every tensor created with
# `requires_grad=True`:

# %%
x_t = Tensor(rng.standard_normal((3, 4)), requires_grad=True)
w2 = Tensor(rng.standard_normal((4, 2)), requires_grad=True)
loss = (x_t @ w2).relu().sum()
loss.backward()
print("w.grad shape", w2.grad.shape, "matches NumPy:",
      np.allclose(w2.grad.numpy(), x_t.numpy().T @ ((x_t.numpy() @ w2.numpy()) > 0)))

# %% [markdown]
# ## 9.8 The rest of the API, and where each piece lives
#
# Sections 9.3 to 9.7 are the book's core. A student arriving from PyTorch or tinygrad reaches for much more:
# `x[::-1]`, `w[idx]` with an integer tensor, `arange`, `tril`, `masked_fill`, `gelu`, `layernorm`,
# `cross_entropy(targets)`, `int32 + int64`. uopc has them, and none needs a new graph op or a new derivative
# rule: each is a few Tensor operations, so its gradient comes from the table of 9.7. Three ideas carry most of it.
#
# - **Promotion.** Two dtypes meet in the smaller type both convert to: bool < uint8 < int32 < int64 < float16 <
#   float32 < float64 (PyTorch's and tinygrad's order). NumPy 2 differs where an integer meets a float too narrow to
#   hold all its values: int32 or int64 with float16 or float32 is float64 there; and uint8 with int8 is int16,
#   which uopc does not have (9.8 prints every pair from NumPy's own `np.result_type`).
#   A Python scalar only widens the kind: `int32 + 0.5` is float32, a float16 tensor times 2.0 stays float16. Sums
#   of integers and bools accumulate in int64, as NumPy's and PyTorch's do, so a count never wraps.
# - **A step is a reshape.** `x[::k]` pads the axis to a multiple of k, reshapes it to `(n/k, k)` and keeps column
#   0 of the `k` axis: element `i` of the result is element `i*k` of `x` (tinygrad's trick).
# - **An integer index is a one-hot select.** `w[idx]` is `(idx[..., None] == arange(n)).where(w, 0).sum()`: n times
#   the output's work, and its gradient is a scatter-add with no rule of its own (the sum's gradient broadcasts, the
#   where routes it to the chosen rows, the broadcast's gradient adds up repeated rows). No movement op reverses an
#   axis, so `flip` (and a negative step) is the same select with `arange(n-1, -1, -1)`.
# - **`max(dim)` is the values.** uopc follows tinygrad (and PyTorch's `amax`): `x.max(1)` is the row maxima, and
#   `x.argmax(1)` their indices; tied maxima share the gradient equally, as `amax`'s do (`max_pool2d` follows PyTorch's
#   pooling instead: a window's whole gradient goes to the first maximum, the index it returns). PyTorch's `max(dim)`
#   returns `(values, indices)`, so its `_, pred = out.max(1)` would here unpack the rows of the values; the tensor
#   `max(dim)` and `min(dim)` return refuses that (a TypeError naming `argmax`), and so does `out.max(1)[1]`.
#   `sort`, `topk`, `cummax` and `cummin` return `(values, indices)`, as in PyTorch.
#
# The table is read from the code: each entry and the method that implements it (`uopc/tensor.py` and `uopc/mixin/`).

# %%
API = {
  "operators": ["add", "sub", "mul", "div", "pow", "neg", "dot", "__eq__", "__invert__", "__floordiv__", "__mod__"],
  "creation": ["arange", "eye", "tril", "triu", "full_like", "zeros_like", "ones_like", "rand", "randint",
               "manual_seed"],
  "reductions": ["sum", "max", "min", "var", "std", "prod", "logsumexp", "argmax", "argmin", "cumsum", "cummax", "any",
                 "all"],
  "movement": ["reshape", "pad", "flip", "unsqueeze", "squeeze", "flatten", "repeat", "clone", "cat", "stack",
               "split", "chunk"],
  "indexing": ["__getitem__", "gather", "one_hot", "masked_fill", "where"],
  "activations": ["relu", "sigmoid", "tanh", "clip", "leaky_relu", "gelu", "quick_gelu", "silu", "elu", "relu6",
                  "hardswish", "softplus", "hardtanh", "layernorm", "dropout"],
  "losses": ["cross_entropy", "sparse_categorical_crossentropy", "nll_loss", "binary_crossentropy",
             "binary_crossentropy_logits"],
  "sampling": ["multinomial"],
}
for group, names in API.items():
  print(group)
  for name in names:
    fn = getattr(Tensor, name)
    fn = getattr(fn, "__func__", fn)                                      # a classmethod's function
    print(f"  {name:34s} {fn.__module__}.{fn.__qualname__}")

# %% [markdown]
# Promotion, as PyTorch does it:

# %%
from uopc.dtype import dtypes

i32, i64 = Tensor(np.arange(3, dtype=np.int32)), Tensor(np.arange(3, dtype=np.int64))
f32, flags = Tensor(np.ones(3, np.float32)), Tensor(np.array([True, False, True]))
for name, t in {"i32 + i64": i32 + i64, "i32 + 0.5": i32 + 0.5, "f32 * bool": f32 * flags, "bool + 1": flags + 1,
                "i32.exp() > 2": i32.exp() > 2, "i32 / 2": i32 / 2, "i32 // -2": i32 // -2,
                "bool.sum()": flags.sum(), "full of 2**30, sum": Tensor(np.full(4, 2**30, np.int32)).sum()}.items():
  print(f"{name:20s} {str(t.dtype):12s} {t.numpy()}")
print("dtypes.int.max:", dtypes.int.max, "  dtypes.u8.max:", dtypes.u8.max)

# %% [markdown]
# NumPy 2's promotion table is not this chain: NumPy promotes an integer and a float to a float that holds every
# value of the integer exactly, so a float whose significand is too short for the integer becomes float64. Every
# pair of dtypes on which uopc's order and NumPy's `np.result_type` disagree (the source of the NumPy column is
# NumPy itself, whichever version is installed):

# %%
from uopc.dtype import PROMOTION_ORDER, least_upper_dtype, np_dtype

print("NumPy", np.__version__)
for k, d1 in enumerate(PROMOTION_ORDER):
  for d2 in PROMOTION_ORDER[k + 1:]:
    ours, theirs = np_dtype(least_upper_dtype(d1, d2)), np.result_type(np_dtype(d1), np_dtype(d2))
    if ours != theirs: print(f"  {str(np_dtype(d1)):6s} with {str(np_dtype(d2)):8s} uopc {str(ours):8s} NumPy {theirs}")

# %% [markdown]
# A step slice is movement ops only; an integer index is a select and a sum, which the kernelizer gives a kernel:

# %%
c = Tensor(c_np)
print("c[:, :, ::2]      ", show(c[:, :, ::2].uop))
print("matches NumPy:", np.array_equal(c[:, ::-1, ::2].numpy(), c_np[:, ::-1, ::2]),
      np.array_equal(c[None, 1, ..., [3, 0]].numpy(), c_np[None, 1, ..., [3, 0]]))
wte_np = rng.standard_normal((10, 4))
wte, idx = Tensor(wte_np), Tensor(np.array([[1, 7, 7], [0, 9, 1]], np.int32))
emb = wte[idx]                                                            # (2, 3, 4): an embedding lookup
print("wte[idx]", emb.shape, [k.name for k in make_plan([emb.uop], False, DefaultOpt).kernels],
      "matches NumPy:", np.array_equal(emb.numpy(), wte_np[idx.numpy()]))
(g_wte,) = uopc_gradient(wte[idx].sum(), [wte])
print("its gradient counts each row's uses:", g_wte.numpy()[:, 0].astype(int))

# %% [markdown]
# The pieces a GPT needs (Chapter 14) fit together and their gradients agree with finite differences. A causal
# attention head over a LayerNorm, a GELU, and the cross entropy of integer targets:

# %%
import math

T_, D_, V_ = 5, 4, 7
targets = np.array([3, 1, 6, 0, 3])


def tiny_gpt_logits(x, w, head):
  h = x.layernorm()
  s = (h @ w) @ h.T * (1 / math.sqrt(D_))                                 # (T, T)
  s = s.masked_fill(Tensor.ones(T_, T_, dtype=dtypes.bool).tril().logical_not(), -math.inf)
  a = s.softmax(-1) @ h                                                   # causal: row i sees keys j <= i
  return (a + h).gelu() @ head                                            # (T, V) logits


def np_tiny_gpt_loss(x, w, head):
  h = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)
  s = np.where(np.tril(np.ones((T_, T_), bool)), (h @ w) @ h.T / math.sqrt(D_), -np.inf)
  z = np_softmax(s) @ h + h
  logits = 0.5 * z * (1 + np.tanh(math.sqrt(2 / math.pi) * (z + 0.044715 * z ** 3))) @ head
  logp = logits - logits.max(-1, keepdims=True)
  logp = logp - np.log(np.exp(logp).sum(-1, keepdims=True))
  return -logp[np.arange(T_), targets].mean()


xs = [rng.standard_normal((T_, D_)), rng.standard_normal((D_, D_)), rng.standard_normal((D_, V_))]
ts = [Tensor(x) for x in xs]
loss = tiny_gpt_logits(*ts).cross_entropy(Tensor(targets))
print("loss matches NumPy:", np.isclose(loss.item(), np_tiny_gpt_loss(*xs)))
grads = uopc_gradient(loss, ts)
err = max(np.abs(g.numpy() - r).max() for g, r in zip(grads, finite_differences(np_tiny_gpt_loss, xs)))
print("max |gradient - finite differences| < 1e-6:", err < 1e-6)

# %% [markdown]
# Gradients at the edges: `relu` is written as a where, so its gradient at exactly 0 is 0 (PyTorch's and
# tinygrad's answer), while `maximum` keeps the book's tie rule; `sigmoid` and `tanh` are written with
# `e = exp(-|x|) <= 1`, so no branch ever holds an inf whose gradient would be `0 * inf = nan`:

# %%
edge = np.array([-1000.0, -1.0, 0.0, 1.0, 1000.0])
for name, fn in {"relu": lambda t: t.relu(), "maximum(x, 0)": lambda t: t.maximum(0.0),
                 "sigmoid": lambda t: t.sigmoid(), "tanh": lambda t: t.tanh()}.items():
  t = Tensor(edge)
  (g,) = uopc_gradient(fn(t).sum(), [t])
  print(f"d {name:14s} at {edge}: {g.numpy().round(4)}")

# %% [markdown]
# What stays unsupported says so. A Tensor is immutable (no `x[i] = v`: use `where` or `masked_fill`), sampling
# without replacement draws one sample, and a boolean mask must be known when the graph is built (its count of True
# entries is the output's shape), so a computed mask is realized first. A `max` reduction returns nan wherever the
# nan is, as NumPy's does: the C update is `((acc>x||acc!=acc)?acc:x)`, since the book's `(acc > x) ? acc : x` drops
# a nan held in `acc` as soon as a number follows (chapter 11's pitfalls show both).

# %%
for name, bad in {"x[0] = 1": lambda: c.__setitem__(0, 1.0),
                  "multinomial(2)": lambda: Tensor(np.ones(4, np.float32)).multinomial(2),
                  "w[float index]": lambda: wte[Tensor(np.array([0.5]))],
                  "reshape(6.0, 4)": lambda: c.reshape(6.0, 4)}.items():
  try: bad()
  except (TypeError, NotImplementedError, IndexError) as e: print(f"{name:16s} {type(e).__name__}: {e}")
print("max of [nan, 1, 2]:", Tensor(np.array([np.nan, 1, 2], np.float32)).max().item(),
      " of [1, 2, nan]:", Tensor(np.array([1, 2, np.nan], np.float32)).max().item())

# %% [markdown]
# ## 9.9 Convolution as a view
#
# A convolution looks like a new kind of kernel: every output element reads a small window of the input. It is not.
# The windows of a signal are a **view** of it, made of the five movement ops, and a convolution is that view times
# the weights, summed: one REDUCE, like a matmul. Take one axis of length n and windows of k elements, every s-th:
# window o is `x[o*s : o*s + k]`. No movement op slides, but repeating the axis does it. Repeat x (an EXPAND and a
# RESHAPE) and cut the long row into rows of n + 1 elements: row a then starts one element later in x than row a - 1,
# so entry [a, b] is `x[a + b]`. Keep every s-th column (a RESHAPE to (o, s) and a SHRINK to the first), and
# [a, o] is `x[o*s + a]`. Padding is a PAD before all that. Here it is for one axis, with the 1-D convolution of a
# signal of C channels by F filters, `out[n, f, i] = sum_c sum_a x[n, c, i*s + a] * w[f, c, a]` (PyTorch's
# convolution is this cross-correlation: the kernel is not flipped).

# %%
def windows_1d(x, k, s=1):
  """x (..., n) -> (..., o, k) with [..., o, a] = x[..., o*s + a]: movement ops only."""
  n = x.shape[-1]
  o, lead = (n - k) // s + 1, x.shape[:-1]
  rep = x.unsqueeze(-2).expand(*lead, k + 1, n).reshape(*lead, (k + 1) * n)    # x repeated k + 1 times
  rows = rep.shrink([None] * len(lead) + [(0, k * (n + 1))]).reshape(*lead, k, n + 1)   # row a: x[a], x[a+1], ...
  if o * s > n + 1:   # a stride past the window by more than one: the groups of s run off the row; pad, never read
    rows = rows.pad([None] * len(lead) + [None, (0, o * s - n - 1)])
  cols = rows.shrink([None] * len(lead) + [None, (0, o * s)]).reshape(*lead, k, o, s)
  return cols.shrink([None] * len(lead) + [None, None, (0, 1)]).reshape(*lead, k, o).transpose(-1, -2)


def my_conv1d(x, w, stride=1, padding=0):
  """x (N, C, L), w (F, C, k) -> (N, F, o): pad, the window view, multiply, sum over channels and offsets."""
  F, C, k = w.shape
  win = windows_1d(x.pad([None, None, (padding, padding)]), k, stride)   # (N, C, o, k)
  return (win.unsqueeze(1) * w.reshape(1, F, C, 1, k)).sum((2, 4))      # (N, F, C, o, k) -> (N, F, o)


def np_conv1d(x, w, stride=1, padding=0):
  """The definition, in float64 loops over the output positions."""
  xp = np.pad(x.astype(np.float64), [(0, 0), (0, 0), (padding, padding)])
  k = w.shape[2]
  o = (xp.shape[2] - k) // stride + 1
  return np.stack([np.einsum("nca,fca->nf", xp[:, :, i * stride:i * stride + k], w.astype(np.float64))
                   for i in range(o)], -1)


sig, taps = rng.standard_normal((2, 3, 11)).astype(np.float32), rng.standard_normal((4, 3, 3)).astype(np.float32)
for stride, padding in ((1, 0), (2, 1)):
  mine = my_conv1d(Tensor(sig), Tensor(taps), stride, padding)
  print(f"stride {stride}, padding {padding}: shape {mine.shape}, matches NumPy:",
        np.allclose(mine.numpy(), np_conv1d(sig, taps, stride, padding), atol=1e-5))
# 1 wide with stride 3: the stride passes the window by two (windows_1d pads the row so its groups of s fit)
point = np.random.default_rng(9).standard_normal((4, 3, 1)).astype(np.float32)
print("1 wide, stride 3: matches NumPy:", np.allclose(my_conv1d(Tensor(sig), Tensor(point), 3).numpy(),
                                                      np_conv1d(sig, point, 3), atol=1e-5))

# %% [markdown]
# What does the kernelizer make of it? The repeated axis is read at `(a*(n+1) + b) % n`, and the index algebra
# (uopc.symbolic) knows `0 <= a + b < n` inside a window, so the `%` folds to `a + b`: the one kernel reads
# `x[o*s + a]` directly, with no division per element.

# %%
plan = make_plan([my_conv1d(Tensor(sig), Tensor(taps)).uop], False, DefaultOpt)
print("kernels:", [k.name for k in plan.kernels], " a % in the C:", "%" in str(plan.kernels[0].src))
print(plan.kernels[0].src)

# %% [markdown]
# An image has two spatial axes, and its windows are this view taken once per axis (exercise 7 builds `conv2d`
# that way). That is how uopc's own `Tensor.conv2d` is built (tinygrad's `_pool`, in `uopc/mixin/windows.py`, which
# also handles dilation and groups, and 1-D and 3-D inputs): pooling is the same view with a max or a mean in place
# of the weighted sum, and a transposed convolution is a convolution of the input spread out by the stride. Each is
# a graph of the ops above, so its gradient comes from the autograd table with no rule of its own.

# %%
def np_conv2d(x, w, stride=1, padding=0):
  """The definition, in float64 loops over the kernel offsets."""
  xp = np.pad(x.astype(np.float64), [(0, 0), (0, 0), (padding, padding), (padding, padding)])
  kh, kw = w.shape[2:]
  oh, ow = (xp.shape[2] - kh) // stride + 1, (xp.shape[3] - kw) // stride + 1
  out = np.zeros((x.shape[0], w.shape[0], oh, ow))
  for a in range(kh):
    for b in range(kw):
      patch = xp[:, :, a:a + stride * oh:stride, b:b + stride * ow:stride]        # (N, C, oh, ow)
      out += np.einsum("nchw,fc->nfhw", patch, w[:, :, a, b].astype(np.float64))
  return out


img, filt = rng.standard_normal((2, 3, 9, 8)).astype(np.float32), rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
ours = Tensor(img).conv2d(Tensor(filt), stride=2, padding=1)
print("Tensor.conv2d matches NumPy:", np.allclose(ours.numpy(), np_conv2d(img, filt, 2, 1), atol=1e-5))
plan = make_plan([Tensor(img).conv2d(Tensor(filt)).uop], False, DefaultOpt)
print("its kernels:", [k.name for k in plan.kernels])
pooled = Tensor(img).max_pool2d(2)
print("max_pool2d(2) shape", pooled.shape, "matches NumPy:",
      np.array_equal(pooled.numpy(), img[:, :, :8, :8].reshape(2, 3, 4, 2, 4, 2).max((3, 5))))
wt = Tensor(filt, requires_grad=True)
(Tensor(img).conv2d(wt, padding=1) ** 2).sum().backward()
print("gradient of the filters, shape", wt.grad.shape)

# %% [markdown]
# ## Pitfalls
#
# - **Realizing changes a Tensor.** After `.numpy()`, a Tensor's UOp is its data (a BUFFER); the graph
#   that computed it is kept in `.lazy` so that gradients can still be taken. A plan built from
#   `t.uop` after realizing is a plan for a copy, not for the computation.
# - **Dtypes promote, as in PyTorch.** `float32 + int32` is float32 and `int32 + 0.5` is float32 (9.8). NumPy 2
#   makes int32 or int64 with float16 or float32 a float64 (the pairs printed in 9.8): code checked against NumPy
#   on mixed dtypes must expect the difference. Integer sums are int64.
# - **Gradients of max split between ties.** If two entries share the maximum, each gets half. Finite
#   differences at a tie are meaningless: test with random data.
# - **Every op is a few graph nodes.** `a - b` is `a + b * -1`, `a / b` is `a * recip(b)`, `exp` is
#   `exp2(x * log2 e)`. Counting FLOPs or reading C, expect those forms.
# - **Mind the broadcast.** A broadcast is free until something makes the kernelizer recompute through it
#   (Chapter 7's LayerNorm): the cost is decided by the plan, not by the Tensor code.
#
# ## Exercises
#
# 1. Add `sin` to `Lazy` with its derivative rule and check the gradient of `sum(sin(a @ w))`.
# 2. Give `Lazy` a `mean(axis)` built from `sum`, and check that its gradient needs no new rule.
# 3. Why can no composition of the five movement ops reverse an axis? Add a FLIP movement op (rangeify maps
#    index i to n-1-i; its derivative rule is FLIP again), make `Tensor.flip` use it, and compare the kernels of
#    `x[::-1].sum()` with 9.8's one-hot select.
# 4. Write a variance and a LayerNorm from `sum`, `sqrt` and `recip` (Tensor operations only: not uopc's own
#    `Tensor.var`, `Tensor.std` or `Tensor.layernorm`, which the week-5 grader refuses for this task). Check the
#    gradient of `layernorm(x) @ w` against finite differences, and count its kernels with and without
#    `stage_broadcast_compute` (Chapter 7).
# 5. Count the kernels of the gradient of attention at N = 64 with and without `fuse_reduce`. Which
#    reductions of the backward pass could share a kernel?
# 6. `gradient` computes gradients of a scalar. Use its `seed=` argument to compute a vector-Jacobian
#    product for a non-scalar output, and check it against finite differences.
# 7. Build `conv2d(x, w, stride, padding)` for images, x (N, C, H, W) and w (F, C, kh, kw), from 9.9's `windows_1d`:
#    pad both spatial axes, take the window view of each, multiply by the filters and sum (not `Tensor.conv2d`).
#    Check it against `np_conv2d`, with a stride and a padding, and with a kernel that is not square.
