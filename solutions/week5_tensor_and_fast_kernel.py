# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # Week 5 assignment: the Tensor, and one fast kernel
#
# The exercises of Chapter 9 (the Tensor: lazy graphs, broadcasting, autograd) and Chapter 10 (one fast kernel:
# the roofline and register tiles). Each exercise has
# - a **task cell** (it starts with `# TASK: <name>`): in the student version the solution is replaced by
#   `raise NotImplementedError("<name>")`. Replace that line with your code; keep the function names and
#   signatures, the grader calls them;
# - a **worked example** before it, solved, on a neighbouring problem;
# - **visible checks** right after it (`check(...)` from `uopc.checks`): each prints `ok: <what>`, or stops
#   with an AssertionError naming what is wrong, expected against got. `make check WEEK=5` runs them task by task, as
#   the grader runs the notebook, and `make check WEEK=5 NB=<your copy>` does the same for your copy;
# - **hidden tests** the grader runs after your whole notebook, which score the points below (they are not in your
#   tree).
#
# | exercise | task name | points |
# |---|---|---|
# | 9.4 | variance and LayerNorm | 3 |
# | 9.6 | vector-Jacobian product | 2 |
# | 9.7 | convolution as a view | 3 |
# | 10.1 | GEMM intensity | 2 |
# | 10.2 | the best tile | 2 |
#
# The whole notebook runs in well under a minute on two cores.

# %% tags=["hidden-setup"]
# the grader's side of the hidden tests (scripts/grader/solution_setup.py): record, raised and seeded for the probes;
# recorded, gradelib's checks and time_kernels for the judges. Grading splits each hidden test at `# JUDGE`: the probe
# runs in the sandbox after the student's cells, the judge in the grader's own process on the values it recorded.
# Placed before the setup cell: in a solution run under nbval, whose kernel keeps no input history, `raises` finds
# the notebook's definitions (finite_differences, mean, var, ...) among the cells run after this one.
import sys as _sys
from pathlib import Path as _Path
import uopc as _uopc
_sys.path.insert(0, str(_Path(_uopc.__file__).resolve().parents[1] / "scripts" / "grader"))
from solution_setup import gradelib, raised, record, recorded, seeded, time_kernels  # noqa: F401
from solution_setup import raises  # noqa: F401


def _finite_differences(fn, xs, eps=1e-6):
  """The judges' own central differences (the notebook's may have been changed)."""
  grads = []
  for k, x in enumerate(xs):
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
      plus, minus = [y.copy() for y in xs], [y.copy() for y in xs]
      plus[k][i] += eps; minus[k][i] -= eps
      g[i] = (fn(*plus) - fn(*minus)) / (2 * eps)
    grads.append(g)
  return grads


def _np_layernorm(a, eps=1e-5): return (a - a.mean(-1, keepdims=True)) / np.sqrt(a.var(-1, keepdims=True) + eps)


# %% [markdown]
# ## Setup
#
# uopc's Tensor and its `gradient` (Chapter 9), and Chapter 9's finite differences, in float64 (a Tensor made from
# a float64 array computes in double precision).

# %%
import numpy as np
from uopc.autograd import gradient
from uopc.tensor import Tensor
from uopc.checks import check


def finite_differences(fn, xs, eps=1e-6):
  """d fn / d x for each x of xs (fn returns a scalar), by central differences."""
  grads = []
  for k, x in enumerate(xs):
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
      plus, minus = [y.copy() for y in xs], [y.copy() for y in xs]
      plus[k][i] += eps; minus[k][i] -= eps
      g[i] = (fn(*plus) - fn(*minus)) / (2 * eps)
    grads.append(g)
  return grads


rng = np.random.default_rng(0)

# %% [markdown]
# ## Exercise 9.4: variance and LayerNorm
#
# **Worked example.** A mean from `sum` (its gradient needs no rule of its own: it is a sum times a constant), and
# its gradient checked against finite differences.

# %%
def mean(x: Tensor, axis: int = -1) -> Tensor:
  return x.sum(axis, keepdim=True) * (1 / x.shape[axis])


x_np = rng.standard_normal((3, 5))
x = Tensor(x_np)
print("mean matches NumPy:", np.allclose(mean(x).numpy(), x_np.mean(-1, keepdims=True)))
(g,) = gradient((mean(x) * mean(x)).sum(), [x])
(fd,) = finite_differences(lambda a: (a.mean(-1) ** 2).sum(), [x_np])
print("its gradient matches finite differences:", np.allclose(g.numpy(), fd, atol=1e-6))

# %% [markdown]
# **Your task.** With Tensor operations only: `var(x, axis)`, the (biased, as in LayerNorm) variance over one axis,
# with `keepdim=True`; and `layernorm(x, eps)`: `(x - mean) / sqrt(var + eps)` over the last axis. The gradient of
# `layernorm(x) @ w` then comes from `gradient` with no new rule: check it against finite differences.
# uopc's Tensor already has these as methods, `Tensor.var`, `Tensor.std` and `Tensor.layernorm` (and `uopc.nn.LayerNorm`
# uses them): while this week is graded they raise `ShortcutUnavailable`, so a `var` or `layernorm` that calls one
# scores 0 for this task (a self-check against them in another cell stops that cell and costs nothing).

# %%
# TASK: variance and LayerNorm
def var(x: Tensor, axis: int = -1) -> Tensor:
  """The mean of (x - mean(x))^2 over axis, kept as an axis of size 1."""
  ### BEGIN SOLUTION
  d = x - mean(x, axis)
  return mean(d * d, axis)
  ### END SOLUTION


def layernorm(x: Tensor, eps: float = 1e-5) -> Tensor:
  """(x - mean) / sqrt(var + eps) over the last axis."""
  ### BEGIN SOLUTION
  return (x - mean(x)) * (var(x) + eps).sqrt().recip()
  ### END SOLUTION


# %%
def np_layernorm(a: np.ndarray, eps: float = 1e-5) -> np.ndarray:
  return (a - a.mean(-1, keepdims=True)) / np.sqrt(a.var(-1, keepdims=True) + eps)


x_np, w_np = rng.standard_normal((4, 6)), rng.standard_normal((6, 3))
x, w = Tensor(x_np), Tensor(w_np)
check("var(x), x of shape (4, 6)", var(x).numpy(), x_np.var(-1, keepdims=True), rtol=1e-12, atol=1e-12)
check("var(x, 0)", var(x, 0).numpy(), x_np.var(0, keepdims=True), rtol=1e-12, atol=1e-12)
check("layernorm(x) (float64)", layernorm(x).numpy(), np_layernorm(x_np), rtol=1e-10, atol=1e-10)
small = x_np * 1e-2   # a variance of the order of eps: where eps is added matters
check("layernorm(x / 100) (float64)", layernorm(Tensor(small)).numpy(), np_layernorm(small), rtol=1e-10, atol=1e-10)
gx, gw = gradient((layernorm(x) @ w).sum(), [x, w])
fx, fw = finite_differences(lambda a, b: (np_layernorm(a) @ b).sum(), [x_np, w_np])
check("d/dx of (layernorm(x) @ w).sum() against finite differences", gx.numpy(), fx, atol=1e-5)
check("d/dw of (layernorm(x) @ w).sum() against finite differences", gw.numpy(), fw, atol=1e-5)

# %% [markdown]
# Expected: six `ok` lines.

# %% tags=["hidden-test"]
# POINTS: variance and LayerNorm 1
# SHORTCUTS: uopc.mixin.reduce.ReduceMixin.var, uopc.mixin.reduce.ReduceMixin.std
# SHORTCUTS: uopc.mixin.functional.NNMixin.layernorm, uopc.nn.layers.LayerNorm
### BEGIN HIDDEN TESTS
_x_np = seeded(3).standard_normal((6, 10)) * 3 + 1
for _axis in (-1, 0, 1): record(f"axis={_axis}", var(Tensor(_x_np), _axis).numpy())
# JUDGE
_x_np = seeded(3).standard_normal((6, 10)) * 3 + 1
for _axis in (-1, 0, 1):
  gradelib.expect_close(recorded[f"axis={_axis}"], _x_np.var(_axis, keepdims=True),
                        f"var(x of shape (6, 10), axis={_axis})", tol=1e-8)
### END HIDDEN TESTS

# %% tags=["hidden-test"]
# POINTS: variance and LayerNorm 1
# SHORTCUTS: uopc.mixin.reduce.ReduceMixin.var, uopc.mixin.reduce.ReduceMixin.std
# SHORTCUTS: uopc.mixin.functional.NNMixin.layernorm, uopc.nn.layers.LayerNorm
### BEGIN HIDDEN TESTS
_x_np = seeded(4).standard_normal((5, 8)) * 2
for _eps in (1e-5, 0.5): record(f"eps={_eps}", layernorm(Tensor(_x_np), _eps).numpy())
record("constant rows", layernorm(Tensor(np.ones((2, 4)))).numpy())
# JUDGE
_x_np = seeded(4).standard_normal((5, 8)) * 2
for _eps in (1e-5, 0.5):
  gradelib.expect_close(recorded[f"eps={_eps}"], _np_layernorm(_x_np, _eps),
                        f"layernorm(x of shape (5, 8), eps={_eps})", tol=1e-8)
gradelib.expect_close(recorded["constant rows"], np.zeros((2, 4)), "layernorm of constant rows (all zero)")
### END HIDDEN TESTS

# %% tags=["hidden-test"]
# POINTS: variance and LayerNorm 1
# SHORTCUTS: uopc.mixin.reduce.ReduceMixin.var, uopc.mixin.reduce.ReduceMixin.std
# SHORTCUTS: uopc.mixin.functional.NNMixin.layernorm, uopc.nn.layers.LayerNorm
### BEGIN HIDDEN TESTS
_x_np, _w_np = seeded(5).standard_normal((3, 5)), seeded(6).standard_normal((5, 2))
_x, _w = Tensor(_x_np), Tensor(_w_np)
_gx, _gw = gradient(((layernorm(_x) @ _w) * (layernorm(_x) @ _w)).sum(), [_x, _w])
record("dx", _gx.numpy())
record("dw", _gw.numpy())
# JUDGE
_x_np, _w_np = seeded(5).standard_normal((3, 5)), seeded(6).standard_normal((5, 2))
_fx, _fw = _finite_differences(lambda a, b: ((_np_layernorm(a) @ b) ** 2).sum(), [_x_np, _w_np])
gradelib.expect_close(recorded["dx"], _fx, "d sum((layernorm(x) @ w)^2) / dx against finite differences", tol=1e-5)
gradelib.expect_close(recorded["dw"], _fw, "d sum((layernorm(x) @ w)^2) / dw against finite differences", tol=1e-5)
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 9.6: vector-Jacobian product
#
# **Worked example.** `gradient(f, wrt)` differentiates a scalar; for a non-scalar f it needs `seed=`: the gradient
# flowing into f, of f's shape. With a seed of ones it is the gradient of `f.sum()`:

# %%
x_np = rng.standard_normal((2, 3))
x = Tensor(x_np)
f = x.exp()
(g1,) = gradient(f, [x], seed=Tensor(np.ones((2, 3))))
(g2,) = gradient(f.sum(), [x])
print("seed of ones = gradient of the sum:", np.allclose(g1.numpy(), g2.numpy()))

# %% [markdown]
# **Your task.** `vjp(fn, x, v)`: the vector-Jacobian product `v^T J` of `fn` (a function from Tensor to Tensor) at
# the float64 array `x`, for `v` of fn's output shape, as a NumPy array of x's shape.

# %%
# TASK: vector-Jacobian product
def vjp(fn, x: np.ndarray, v: np.ndarray) -> np.ndarray:
  """sum_i v_i d fn(x)_i / d x, as an array of x's shape."""
  ### BEGIN SOLUTION
  xt = Tensor(x)
  (g,) = gradient(fn(xt), [xt], seed=Tensor(np.asarray(v, np.float64)))
  return g.numpy()
  ### END SOLUTION


# %%
w_np = rng.standard_normal((3, 4))
v_np = rng.standard_normal((2, 4))
got = vjp(lambda t: t @ Tensor(w_np), x_np, v_np)
check("vjp(x @ w, x, v) against v @ w^T", got, v_np @ w_np.T, rtol=1e-12, atol=1e-12)
(fd,) = finite_differences(lambda a: (np.tanh(a @ w_np) * v_np).sum(), [x_np])
got = vjp(lambda t: (t @ Tensor(w_np)).tanh(), x_np, v_np)
check("vjp(tanh(x @ w), x, v) against finite differences", got, fd, atol=1e-6)

# %% [markdown]
# Expected: two `ok` lines.

# %% tags=["hidden-test"]
# POINTS: vector-Jacobian product 2
### BEGIN HIDDEN TESTS
_x_np, _v_np = seeded(7).standard_normal((3, 4)), seeded(8).standard_normal((3, 4))
record("x * x", vjp(lambda t: t * t, _x_np, _v_np))
_w_np, _v2 = seeded(9).standard_normal((4, 2)), seeded(10).standard_normal((3, 2))
record("exp(x @ w)", vjp(lambda t: (t @ Tensor(_w_np)).exp(), _x_np, _v2))
# JUDGE
_x_np, _v_np = seeded(7).standard_normal((3, 4)), seeded(8).standard_normal((3, 4))
gradelib.expect_close(recorded["x * x"], 2 * _x_np * _v_np, "vjp(x * x, x, v) (expected 2 x v)")
_w_np, _v2 = seeded(9).standard_normal((4, 2)), seeded(10).standard_normal((3, 2))
(_fd,) = _finite_differences(lambda a: (np.exp(a @ _w_np) * _v2).sum(), [_x_np])
gradelib.expect_close(recorded["exp(x @ w)"], _fd, "vjp(exp(x @ w), x, v) against finite differences", tol=1e-5)
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 9.7: convolution as a view
#
# **Worked example.** Chapter 9.9's window view of one axis, and with it a 1-D convolution: x (N, C, L), w (F, C, k)
# -> (N, F, o), `out[n, f, i] = sum_c sum_a x[n, c, i*s + a] * w[f, c, a]` (PyTorch's convolution is this
# cross-correlation: the kernel is not flipped).

# %%
def windows_1d(x: Tensor, k: int, s: int = 1) -> Tensor:
  """x (..., n) -> (..., o, k) with [..., o, a] = x[..., o*s + a], from movement ops only."""
  n = x.shape[-1]
  o, lead = (n - k) // s + 1, x.shape[:-1]
  rep = x.unsqueeze(-2).expand(*lead, k + 1, n).reshape(*lead, (k + 1) * n)
  rows = rep.shrink([None] * len(lead) + [(0, k * (n + 1))]).reshape(*lead, k, n + 1)
  if o * s > n + 1:   # a stride past the window by more than one: the groups of s run off the row; pad, never read
    rows = rows.pad([None] * len(lead) + [None, (0, o * s - n - 1)])
  cols = rows.shrink([None] * len(lead) + [None, (0, o * s)]).reshape(*lead, k, o, s)
  return cols.shrink([None] * len(lead) + [None, None, (0, 1)]).reshape(*lead, k, o).transpose(-1, -2)


def conv1d(x: Tensor, w: Tensor, stride: int = 1, padding: int = 0) -> Tensor:
  F, C, k = w.shape
  win = windows_1d(x.pad([None, None, (padding, padding)]), k, stride)      # (N, C, o, k)
  return (win.unsqueeze(1) * w.reshape(1, F, C, 1, k)).sum((2, 4))         # (N, F, o)


x1 = rng.standard_normal((2, 3, 10))
w1 = rng.standard_normal((4, 3, 3))
ref1 = np.stack([np.einsum("nck,fck->nf", np.pad(x1, [(0, 0), (0, 0), (1, 1)])[:, :, i * 2:i * 2 + 3], w1)
                 for i in range(5)], -1)
print("conv1d, stride 2, padding 1, matches NumPy:", np.allclose(conv1d(Tensor(x1), Tensor(w1), 2, 1).numpy(), ref1))
w_point = np.random.default_rng(9).standard_normal((4, 3, 1))   # 1 wide, stride 3: the stride passes it by two
ref_point = np.einsum("nct,fc->nft", x1[:, :, ::3], w_point[..., 0])
print("conv1d, 1-wide kernel, stride 3, matches NumPy:",
      np.allclose(conv1d(Tensor(x1), Tensor(w_point), 3).numpy(), ref_point))

# %% [markdown]
# **Your task.** `conv2d(x, w, stride, padding)`: x (N, C, H, W), w (F, C, kh, kw) -> (N, F, oh, ow) with
# `oh = (H + 2 padding - kh) // stride + 1` (and ow alike), the same stride and padding on both axes, built from
# Tensor operations as the worked example builds `conv1d` from one axis: pad, a window view of each spatial axis
# (`windows_1d` above, once per axis), multiply, sum (not `Tensor.conv2d`). This is Chapter 9's exercise 7. The
# checks below compare with NumPy and with the definition; they catch the usual slips: an output size that forgets
# the padding or the stride, a flipped kernel (that is a convolution in the textbook's sense, not PyTorch's), the
# channels in the wrong place.

# %%
# TASK: convolution as a view
def conv2d(x: Tensor, w: Tensor, stride: int = 1, padding: int = 0) -> Tensor:
  """PyTorch's conv2d without bias: out[n, f, i, j] = sum_{c,a,b} x_padded[n, c, i*s + a, j*s + b] w[f, c, a, b]."""
  ### BEGIN SOLUTION
  F, C, kh, kw = w.shape
  x = x.pad([None, None, (padding, padding), (padding, padding)])
  win = windows_1d(x.transpose(2, 3), kh, stride)              # (N, C, W, oh, kh)
  win = windows_1d(win.permute(0, 1, 3, 4, 2), kw, stride)      # (N, C, oh, kh, ow, kw)
  win = win.permute(0, 1, 2, 4, 3, 5)                           # (N, C, oh, ow, kh, kw)
  return (win.unsqueeze(1) * w.reshape(1, F, C, 1, 1, kh, kw)).sum((2, 5, 6))
  ### END SOLUTION


# %%
def np_conv2d(a: np.ndarray, k: np.ndarray, stride: int = 1, padding: int = 0) -> np.ndarray:
  """The definition, in float64 loops over the kernel offsets."""
  ap = np.pad(a, [(0, 0), (0, 0), (padding, padding), (padding, padding)])
  kh, kw = k.shape[2:]
  oh, ow = (ap.shape[2] - kh) // stride + 1, (ap.shape[3] - kw) // stride + 1
  out = np.zeros((a.shape[0], k.shape[0], oh, ow))
  for i in range(kh):
    for j in range(kw):
      out += np.einsum("nchw,fc->nfhw", ap[:, :, i:i + stride * oh:stride, j:j + stride * ow:stride], k[:, :, i, j])
  return out


img, filt = rng.standard_normal((2, 3, 9, 8)), rng.standard_normal((4, 3, 3, 2))   # C = 3, F = 4: not square
check("output shape, x (2, 3, 9, 8), w (4, 3, 3, 2), stride 2, padding 1",
      conv2d(Tensor(img), Tensor(filt), 2, 1).shape, (2, 4, 5, 5))
corner = np.zeros((1, 3, 3, 2))
corner[0, 1, 0, 0] = 1.0                                        # picks channel 1 at the window's top-left
check("a kernel with one 1 at its top-left picks x[:, 1, :7, :7] (the kernel is not flipped)",
      conv2d(Tensor(img), Tensor(corner)).numpy(), img[:, 1:2, :7, :7], atol=1e-12)
check("conv2d(x, w), channels C = 3 in, F = 4 out", conv2d(Tensor(img), Tensor(filt)).numpy(), np_conv2d(img, filt),
      rtol=1e-10, atol=1e-10)
check("conv2d(x, w, stride=2, padding=1)", conv2d(Tensor(img), Tensor(filt), 2, 1).numpy(),
      np_conv2d(img, filt, 2, 1), rtol=1e-10, atol=1e-10)
check("conv2d(x, w, stride=3, padding=2)", conv2d(Tensor(img), Tensor(filt), 3, 2).numpy(),
      np_conv2d(img, filt, 3, 2), rtol=1e-10, atol=1e-10)

# %% [markdown]
# Expected: five `ok` lines. (No check against uopc's own `Tensor.conv2d`: while this task is graded, it and the
# window view under it, `_pool`, raise instead of answering.)

# %% tags=["hidden-test"]
# POINTS: convolution as a view 3
# SHORTCUTS: uopc.mixin.windows.WindowMixin.conv2d, uopc.mixin.windows.WindowMixin.conv_transpose2d
# SHORTCUTS: uopc.mixin.windows.WindowMixin._pool, uopc.mixin.torchlike.TorchMixin.unfold
### BEGIN HIDDEN TESTS
_cases = [((2, 2, 7, 7), (3, 2, 3, 3), 1, 0), ((1, 3, 8, 6), (2, 3, 2, 3), 2, 1), ((2, 1, 9, 10), (5, 1, 4, 2), 3, 2),
          ((1, 4, 5, 5), (1, 4, 5, 5), 1, 2)]
for _k, (_xs, _ws, _s, _p) in enumerate(_cases):
  _x, _w = Tensor(seeded(20 + _k).standard_normal(_xs)), Tensor(seeded(30 + _k).standard_normal(_ws))
  record(f"case {_k}", conv2d(_x, _w, _s, _p).numpy())
# JUDGE
_cases = [((2, 2, 7, 7), (3, 2, 3, 3), 1, 0), ((1, 3, 8, 6), (2, 3, 2, 3), 2, 1), ((2, 1, 9, 10), (5, 1, 4, 2), 3, 2),
          ((1, 4, 5, 5), (1, 4, 5, 5), 1, 2)]
for _k, (_xs, _ws, _s, _p) in enumerate(_cases):
  _a, _w = seeded(20 + _k).standard_normal(_xs), seeded(30 + _k).standard_normal(_ws)
  _ap = np.pad(_a, [(0, 0), (0, 0), (_p, _p), (_p, _p)])
  _oh, _ow = (_ap.shape[2] - _ws[2]) // _s + 1, (_ap.shape[3] - _ws[3]) // _s + 1
  _ref = np.zeros((_xs[0], _ws[0], _oh, _ow))
  for _i in range(_ws[2]):
    for _j in range(_ws[3]):
      _ref += np.einsum("nchw,fc->nfhw", _ap[:, :, _i:_i + _s * _oh:_s, _j:_j + _s * _ow:_s], _w[:, :, _i, _j])
  gradelib.expect_close(recorded[f"case {_k}"], _ref, f"conv2d(x {_xs}, w {_ws}, stride={_s}, padding={_p})",
                        tol=1e-8)
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 10.1: GEMM intensity
#
# **Worked example.** Chapter 10's square GEMM: 2N^3 FLOPs against, at the least, two matrices read and one written,
# 3 * 4N^2 bytes in float32: an intensity of N/6.

# %%
for n in (64, 1024):
  print(f"N = {n}: {2 * n**3 / (3 * 4 * n * n):.1f} FLOP/byte")

# %% [markdown]
# **Your task.** `gemm_intensity(n, k, m, itemsize)`: the arithmetic intensity (FLOPs per byte of minimum traffic:
# each operand read once, the result written once) of an (n, k) @ (k, m) GEMM. Then evaluate it for S = Q K^T and
# O = P V of attention at N = 4096, D = 64.

# %%
# TASK: GEMM intensity
def gemm_intensity(n: int, k: int, m: int, itemsize: int = 4) -> float:
  """FLOPs per byte of an (n, k) @ (k, m) matrix multiply with minimum traffic."""
  ### BEGIN SOLUTION
  return 2 * n * k * m / (itemsize * (n * k + k * m + n * m))
  ### END SOLUTION


# %%
N, D = 4096, 64
print(f"S = Q K^T: {gemm_intensity(N, D, N):.1f} FLOP/byte   O = P V: {gemm_intensity(N, N, D):.1f} FLOP/byte   "
      f"square N = 1024: {gemm_intensity(1024, 1024, 1024):.1f}")
check("gemm_intensity(4096, 64, 4096) (FLOP/byte, to 0.1)", round(gemm_intensity(N, D, N), 1), 31.0)
check("gemm_intensity(4096, 4096, 64) (FLOP/byte, to 0.1)", round(gemm_intensity(N, N, D), 1), 31.0)
check("gemm_intensity(1024, 1024, 1024) (FLOP/byte, to 0.1)", round(gemm_intensity(1024, 1024, 1024), 1), 170.7)
check("gemm_intensity(1024, 1024, 1024, itemsize=2) (FLOP/byte, to 0.1)",
      round(gemm_intensity(1024, 1024, 1024, 2), 1), 341.3)

# %% [markdown]
# Expected: 31.0 FLOP/byte for both S and O (the same FLOPs and the same three matrices, read and written in another
# order: S writes the N x N matrix, O reads it), and N/6 = 170.7 for the square GEMM. Both attention GEMMs sit
# above a CPU's ridge, but far below the square GEMM: D = 64 is a short reduction, and the N x N matrix dominates
# the traffic.

# %% tags=["hidden-test"]
# POINTS: GEMM intensity 2
### BEGIN HIDDEN TESTS
_cases = [(1024, 1024, 1024, 4), (4096, 64, 4096, 4), (4096, 4096, 64, 4), (100, 7, 33, 2), (1, 1, 1, 4),
          tuple(seeded(11).integers(1, 5000, 3).tolist()) + (2,)]
for _args in _cases: record(f"{_args}", gemm_intensity(*_args))
# JUDGE
_cases = [(1024, 1024, 1024, 4), (4096, 64, 4096, 4), (4096, 4096, 64, 4), (100, 7, 33, 2), (1, 1, 1, 4),
          tuple(seeded(11).integers(1, 5000, 3).tolist()) + (2,)]
for _n, _k, _m, _size in _cases:
  gradelib.expect_close(recorded[f"{(_n, _k, _m, _size)}"], 2 * _n * _k * _m / (_size * (_n * _k + _k * _m + _n * _m)),
                        f"gemm_intensity{(_n, _k, _m, _size)}", tol=1e-9)
### END HIDDEN TESTS

# %% [markdown]
# ## Exercise 10.2: the best tile
#
# **Worked example.** 10.2's count, for any TM x TN tile: per step of the reduce loop it loads TM values of A and TN
# of B, which feed TM x TN multiply-adds; it holds TM x TN accumulators and the TM + TN loaded values.

# %%
from uopc.checks import check_raises


def tile_cost(tm: int, tn: int) -> tuple[float, int]:
  """(loads per FMA, registers) of a TM x TN register tile: accumulators plus the values loaded in one step."""
  return (tm + tn) / (tm * tn), tm * tn + tm + tn


for tm, tn in ((1, 1), (4, 4), (2, 8)):
  lpf, regs = tile_cost(tm, tn)
  print(f"{tm}x{tn}: {lpf:.3f} loads per FMA, {regs} registers")

# %% [markdown]
# **Your task.** Chapter 10's exercise 2 asks which tiles fit in 16 vector registers; a code generator needs the
# best of them. `best_tile(registers)`: the tile `(tm, tn)` (both at least 1) whose accumulators and loaded values
# fit in `registers` registers with the fewest loads per FMA (`tile_cost`'s first number); among tiles with equally
# few, the one that uses fewer registers; among those, the one with more rows (`tm >= tn`). When no tile fits, raise
# a ValueError that says how many registers the smallest tile needs. Decide how far the search must go, and why it
# can stop there.

# %%
# TASK: the best tile
def best_tile(registers: int) -> tuple[int, int]:
  """The (tm, tn) that fits in `registers` registers with the fewest loads per FMA (ties: fewer registers, then
  more rows)."""
  ### BEGIN SOLUTION
  # a tile of tm rows needs at least 2 tm + 1 registers (tn = 1), so no tm or tn above (registers - 1) // 2 fits
  largest = (registers - 1) // 2
  fitting = [(tm, tn) for tm in range(1, largest + 1) for tn in range(1, largest + 1)
             if tile_cost(tm, tn)[1] <= registers]
  if not fitting: raise ValueError(f"no tile fits in {registers} registers: a 1x1 tile needs 3")
  return min(fitting, key=lambda t: (tile_cost(*t)[0], tile_cost(*t)[1], -t[0]))
  ### END SOLUTION


# %%
for registers in (8, 16, 32):
  tm, tn = best_tile(registers)
  lpf, regs = tile_cost(tm, tn)
  print(f"{registers} registers: {tm}x{tn}, {lpf:.3f} loads per FMA, {regs} registers used")
for registers, want in ((3, (1, 1)), (8, (2, 2)), (16, (3, 3)), (27, (4, 4)), (32, (5, 4))):
  check(f"best_tile({registers})", tuple(best_tile(registers)), want)
check_raises("best_tile(2): no tile fits", lambda: best_tile(2), ValueError, says=("3",))

# %% [markdown]
# Expected: 2x2, 3x3 and 5x4 (1, 0.667 and 0.45 loads per FMA, in 8, 15 and 29 registers); six `ok` lines. In 16
# registers the 4x4 tile (24 registers as counted here) does not fit, nor does 2x8 (26); 3x3 beats 2x4 (0.667 against
# 0.75 loads per FMA). In 27, 4x4 and 3x6 tie at 0.5 and 4x4 takes fewer registers. (A compiler keeps one of the
# loaded rows in memory operands of the FMAs, which is how 4x4 tiles run in 16 AVX2 registers: with that count the
# answers change.)

# %% tags=["hidden-test"]
# POINTS: the best tile 2
### BEGIN HIDDEN TESTS
_counts = [3, 5, 8, 15, 16, 24, 27, 32, 64, 100, int(seeded(12).integers(40, 200))]
for _r in _counts: record(f"best_tile({_r})", [int(_x) for _x in best_tile(_r)])
# JUDGE
from fractions import Fraction
_counts = [3, 5, 8, 15, 16, 24, 27, 32, 64, 100, int(seeded(12).integers(40, 200))]
for _r in _counts:
  _fit = [(_tm, _tn) for _tm in range(1, _r) for _tn in range(1, _r) if _tm * _tn + _tm + _tn <= _r]
  _want = min(_fit, key=lambda _t: (Fraction(_t[0] + _t[1], _t[0] * _t[1]), _t[0] * _t[1] + _t[0] + _t[1], -_t[0]))
  gradelib.expect_equal(tuple(recorded[f"best_tile({_r})"]), _want, f"best_tile({_r})")
# called in a fresh process on the notebook's definitions: what it raises is seen there, not recorded by the notebook
gradelib.expect_raised(raises("best_tile(2)"), "ValueError", "best_tile(2) (no tile fits)", ("3",))
### END HIDDEN TESTS
