"""The ops tinygrad's users reach for (issue 39, item 3), forward against NumPy float64 references and backward against
central differences in float64 (and PyTorch where it is installed): convolution (1-D/2-D/3-D, groups, stride,
dilation, padding), transposed convolution, max/avg pooling, interpolate, einsum, sort/argsort/topk, the cumulative
ops, scatter, roll, diag, linspace, meshgrid. A convolution is a view plus one REDUCE: one kernel, whose index has no
`%` (the repeat the window view is built with folds away)."""
import math
import numpy as np
import pytest
from numpy.lib.stride_tricks import sliding_window_view
from uopc.kernelize import normalize, plan_for
from uopc.tensor import Tensor

try:
  import torch
  import torch.nn.functional as F
except ImportError: torch = None
needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed")
rng = np.random.default_rng(39)


def arr(*shape, dtype=np.float64): return rng.standard_normal(shape).astype(dtype)


def fd_check(f, *arrays, eps=1e-6, rtol=1e-5, atol=1e-7):
  """backward() of sum(f(*xs) * g) against central differences, every input in float64."""
  ts = [Tensor(a, requires_grad=True) for a in arrays]
  out = f(*ts)
  g = arr(*out.shape)
  (out * Tensor(g)).sum().backward()
  for k, (t, a) in enumerate(zip(ts, arrays)):
    num = np.zeros_like(a)
    for i in np.ndindex(a.shape):
      vals = []
      for s in (eps, -eps):
        b = [x.copy() for x in arrays]
        b[k][i] += s
        vals.append(float((f(*map(Tensor, b)).numpy() * g).sum()))
      num[i] = (vals[0] - vals[1]) / (2 * eps)
    np.testing.assert_allclose(t.grad.numpy(), num, rtol=rtol, atol=atol)


# ---- NumPy references ----
def np_conv(x, w, b=None, stride=1, padding=0, dilation=1, groups=1):
  n = w.ndim - 2
  s_, p_, d_ = ((v,) * n if isinstance(v, int) else v for v in (stride, padding, dilation))
  xp = np.pad(x, [(0, 0), (0, 0)] + [(p, p) for p in p_])
  span = [d * (k - 1) + 1 for d, k in zip(d_, w.shape[2:])]
  win = sliding_window_view(xp, span, axis=tuple(range(2, 2 + n)))
  win = win[(Ellipsis,) + tuple(slice(None, None, d) for d in d_)]
  win = win[(slice(None), slice(None)) + tuple(slice(None, None, s) for s in s_)]   # (N, C, *o, *k)
  cin, cout = w.shape[1], w.shape[0]
  outs = []
  for g in range(groups):
    xg, wg = win[:, g * cin:(g + 1) * cin], w[g * cout // groups:(g + 1) * cout // groups]
    letters = "ijklm"[:n]
    outs.append(np.einsum(f"nc{letters.upper()}{letters},oc{letters}->no{letters.upper()}", xg, wg))
  out = np.concatenate(outs, 1)
  return out if b is None else out + b.reshape(1, -1, *[1] * n)


def np_conv_transpose(x, w, stride=1, padding=0, dilation=1, output_padding=0, groups=1):
  n = w.ndim - 2
  s_, p_, d_, op_ = ((v,) * n if isinstance(v, int) else v for v in (stride, padding, dilation, output_padding))
  cin_g, cout_g = w.shape[0] // groups, w.shape[1]
  size = [(i - 1) * s - 2 * p + d * (k - 1) + op + 1 for i, s, p, d, k, op in zip(x.shape[2:], s_, p_, d_, w.shape[2:],
                                                                                   op_)]
  out = np.zeros((x.shape[0], cout_g * groups, *size))
  for ci in range(x.shape[1]):
    g = ci // cin_g
    for pos in np.ndindex(x.shape[2:]):
      for kpos in np.ndindex(w.shape[2:]):
        o = [i * s - p + k * d for i, s, p, k, d in zip(pos, s_, p_, kpos, d_)]
        if all(0 <= a < m for a, m in zip(o, size)):
          out[(slice(None), slice(g * cout_g, (g + 1) * cout_g), *o)] += \
            x[(slice(None), ci, *pos)][:, None] * w[(ci, slice(None), *kpos)][None]
  return out


def np_pool(x, k, stride, padding=0, how="max"):
  n = len(k)
  xp = np.pad(x, [(0, 0)] * (x.ndim - n) + [(padding, padding)] * n, constant_values=-np.inf if how == "max" else 0)
  win = sliding_window_view(xp, k, axis=tuple(range(x.ndim - n, x.ndim)))
  win = win[(Ellipsis,) + tuple(slice(None, None, s) for s in stride) + (slice(None),) * n]
  axes = tuple(range(-n, 0))
  return win.max(axes) if how == "max" else win.mean(axes)


CONVS = [dict(x=(2, 3, 7, 8), w=(4, 3, 3, 3)), dict(x=(2, 3, 9, 8), w=(4, 3, 3, 2), stride=2, padding=1, dilation=2),
         dict(x=(2, 4, 7, 8), w=(6, 2, 3, 3), groups=2, stride=(1, 2), padding=(1, 0)),
         dict(x=(2, 3, 17), w=(5, 3, 4), stride=3, padding=2), dict(x=(1, 2, 5, 4, 6), w=(3, 2, 3, 2, 3), padding=1),
         dict(x=(1, 4, 6, 6), w=(4, 1, 3, 3), groups=4, dilation=(2, 1))]


@pytest.mark.parametrize("c", CONVS, ids=lambda c: f"{len(c['w']) - 2}d-" + "-".join(f"{k}{v}" for k, v in c.items()
                                                                                    if k not in "xw"))
def test_conv_against_numpy(c):
  kw = {k: v for k, v in c.items() if k not in "xw"}
  x, w, b = arr(*c["x"]), arr(*c["w"]), arr(c["w"][0])
  np.testing.assert_allclose(Tensor(x).conv2d(Tensor(w), Tensor(b), **kw).numpy(), np_conv(x, w, b, **kw),
                             rtol=1e-12, atol=1e-12)


def test_conv_gradients_by_central_differences():
  fd_check(lambda x, w, b: x.conv2d(w, b, stride=2, padding=1, dilation=(1, 2)), arr(1, 2, 6, 7), arr(3, 2, 3, 2),
           arr(3))
  fd_check(lambda x, w: x.conv2d(w, groups=2), arr(1, 4, 5, 4), arr(2, 2, 2, 3))


def test_conv_padding_same_and_errors():
  x, w = arr(1, 2, 6, 5), arr(3, 2, 3, 3)
  np.testing.assert_allclose(Tensor(x).conv2d(Tensor(w), padding="same").numpy(), np_conv(x, w, padding=1),
                             rtol=1e-12)
  with pytest.raises(ValueError, match="groups"): Tensor(arr(1, 3, 5, 5)).conv2d(Tensor(arr(4, 2, 3, 3)), groups=2)
  with pytest.raises(ValueError, match="larger than the input"): Tensor(arr(1, 1, 2, 2)).conv2d(Tensor(arr(1, 1, 3, 3)))


def test_conv2d_is_one_vectorizable_kernel_with_no_modulo():
  """A window view and one REDUCE: no new kernel kind, one kernel, and the index reads x[o*s + k*d] (the `% i` of
  the repeat is folded; a `%` would stop the vector lowering and cost a division per element)."""
  x, w = Tensor(arr(4, 1, 12, 12, dtype=np.float32)), Tensor(arr(8, 1, 3, 3, dtype=np.float32))
  out = x.conv2d(w)
  plan = plan_for(normalize([out.uop])[0], Tensor.options())
  assert len(plan.kernels) == 1 and plan.kernels[0].name.startswith("r_")
  assert "%" not in str(plan.kernels[0].src)
  from uopc.opt import VectorOpt
  Tensor.opt = VectorOpt
  np.testing.assert_allclose(out.numpy(), np_conv(x.numpy().astype(np.float64), w.numpy().astype(np.float64)),
                             rtol=1e-5, atol=1e-5)


TRANSPOSED = [dict(x=(2, 3, 5, 4), w=(3, 4, 3, 3), stride=2, padding=1, output_padding=1),
              dict(x=(1, 6, 4, 5), w=(6, 2, 2, 3), groups=3, dilation=2, stride=3), dict(x=(2, 3, 6), w=(3, 2, 3),
                                                                                        stride=2)]


@pytest.mark.parametrize("c", TRANSPOSED, ids=["2d-stride-pad-outpad", "2d-groups-dilation", "1d"])
def test_conv_transpose_against_numpy(c):
  kw = {k: v for k, v in c.items() if k not in "xw"}
  x, w = arr(*c["x"]), arr(*c["w"])
  np.testing.assert_allclose(Tensor(x).conv_transpose2d(Tensor(w), **kw).numpy(), np_conv_transpose(x, w, **kw),
                             rtol=1e-12, atol=1e-12)


def test_conv_transpose_gradients_by_central_differences():
  fd_check(lambda x, w: x.conv_transpose2d(w, stride=2, padding=1), arr(1, 2, 3, 3), arr(2, 2, 3, 2))


@pytest.mark.parametrize("how", ["max", "avg"])
def test_pooling_against_numpy(how):
  x = arr(2, 3, 9, 8)
  for k, s, p in (((2, 2), (2, 2), 0), ((3, 3), (2, 2), 1), ((3, 2), (1, 2), 1)):
    out = Tensor(x).max_pool2d(k, s, padding=p) if how == "max" else Tensor(x).avg_pool2d(k, s, padding=p)
    np.testing.assert_allclose(out.numpy(), np_pool(x, k, s, p, how), rtol=1e-12)
  x1 = arr(2, 3, 11)
  np.testing.assert_allclose(Tensor(x1).max_pool1d(3, 2).numpy(), np_pool(x1, (3,), (2,)), rtol=1e-12)
  x3 = arr(1, 2, 4, 6, 5)
  np.testing.assert_allclose(Tensor(x3).avg_pool3d(2).numpy(), np_pool(x3, (2, 2, 2), (2, 2, 2), how="avg"),
                             rtol=1e-12)


def test_pooling_gradients_by_central_differences():
  x = np.arange(2 * 6 * 5, dtype=np.float64).reshape(1, 2, 6, 5)
  x = x[..., rng.permutation(5)] * 0.1                          # distinct values: max has one winner per window
  fd_check(lambda t: t.max_pool2d(3, 2, padding=1), x)
  fd_check(lambda t: t.avg_pool2d(3, 2, padding=1, count_include_pad=False), arr(1, 2, 6, 5))


def test_max_pool_indices():
  x = arr(2, 3, 7, 8)
  v, i = Tensor(x).max_pool2d(3, stride=2, padding=1, return_indices=True)
  np.testing.assert_array_equal(v.numpy(), np_pool(x, (3, 3), (2, 2), 1))
  np.testing.assert_array_equal(np.take_along_axis(x.reshape(2, 3, -1), i.numpy().reshape(2, 3, -1), -1),
                                v.numpy().reshape(2, 3, -1))


@needs_torch
def test_pooling_ceil_mode_and_count_include_pad_against_pytorch():
  x = arr(2, 3, 8, 9, dtype=np.float32)
  t = torch.tensor(x)
  for kw in (dict(kernel_size=3, stride=2, padding=1, ceil_mode=True),
             dict(kernel_size=(3, 2), stride=2, ceil_mode=True), dict(kernel_size=2, ceil_mode=True)):
    np.testing.assert_allclose(Tensor(x).avg_pool2d(**kw).numpy(), F.avg_pool2d(t, **kw).numpy(), rtol=1e-5,
                               atol=1e-7)
    np.testing.assert_allclose(Tensor(x).max_pool2d(**kw).numpy(), F.max_pool2d(t, **kw).numpy(), rtol=1e-6)
  np.testing.assert_allclose(Tensor(x).max_pool2d(3, 2, dilation=2, ceil_mode=True).numpy(),
                             F.max_pool2d(t, 3, 2, dilation=2, ceil_mode=True).numpy())


def np_linear_axis(x, axis, out, align):
  """PyTorch's linear interpolation along one axis, in float64."""
  i = x.shape[axis]
  dst = np.arange(out, dtype=np.float64)
  src = dst * ((i - 1) / (out - 1) if out > 1 else 0) if align else np.maximum((dst + 0.5) * i / out - 0.5, 0)
  lo = np.minimum(np.floor(src), i - 1).astype(int)
  hi = np.minimum(lo + 1, i - 1)
  w = (src - lo).reshape([-1 if k == axis % x.ndim else 1 for k in range(x.ndim)])
  return np.take(x, lo, axis) * (1 - w) + np.take(x, hi, axis) * w


@pytest.mark.parametrize("align", [False, True])
def test_bilinear_interpolate_against_numpy(align):
  x = arr(2, 3, 5, 4)
  ref = np_linear_axis(np_linear_axis(x, 2, 7, align), 3, 9, align)
  np.testing.assert_allclose(Tensor(x).interpolate(size=(7, 9), mode="bilinear", align_corners=align).numpy(), ref,
                             rtol=1e-6)
  fd_check(lambda t: t.interpolate(size=(3, 5), mode="bilinear", align_corners=align), arr(1, 1, 4, 3))


def test_nearest_interpolate_against_numpy():
  x = arr(2, 3, 5, 4)
  ref = x[:, :, np.floor(np.arange(8) * 5 / 8).astype(int)][..., np.floor(np.arange(3) * 4 / 3).astype(int)]
  np.testing.assert_array_equal(Tensor(x).interpolate(size=(8, 3)).numpy(), ref)


@needs_torch
@pytest.mark.parametrize("mode,align", [("nearest", None), ("nearest-exact", None), ("bilinear", False),
                                        ("bilinear", True)])
def test_interpolate_against_pytorch(mode, align):
  x = arr(2, 3, 7, 6, dtype=np.float32)
  for size in ((5, 11), (14, 3)):
    np.testing.assert_allclose(Tensor(x).interpolate(size=size, mode=mode, align_corners=align).numpy(),
                               F.interpolate(torch.tensor(x), size=size, mode=mode, align_corners=align).numpy(),
                               rtol=1e-5, atol=1e-6)
  x3 = arr(1, 2, 4, 3, 6, dtype=np.float32)
  np.testing.assert_allclose(Tensor(x3).interpolate(size=(3, 5, 4), mode="trilinear", align_corners=True).numpy(),
                             F.interpolate(torch.tensor(x3), size=(3, 5, 4), mode="trilinear",
                                           align_corners=True).numpy(), rtol=1e-5, atol=1e-6)


# ---- einsum, sort, cumulative, scatter, the rest ----
@pytest.mark.parametrize("formula,shapes", [("ij,jk->ik", [(3, 4), (4, 5)]), ("bhqd,bhkd->bhqk", [(2, 3, 4, 5),
                                            (2, 3, 6, 5)]), ("ii", [(4, 4)]), ("ii->i", [(4, 4)]),
                                            ("ij,kj", [(3, 4), (5, 4)]), ("...ij->...ji", [(2, 3, 4)]),
                                            ("i,j,k->ijk", [(2,), (3,), (4,)]),
                                            ("bij,bjk->bik", [(2, 3, 4), (1, 4, 2)])])
def test_einsum_against_numpy(formula, shapes):
  xs = [arr(*s) for s in shapes]
  np.testing.assert_allclose(Tensor.einsum(formula, *map(Tensor, xs)).numpy(), np.einsum(formula, *xs), rtol=1e-12,
                             atol=1e-12)


def test_einsum_gradient():
  fd_check(lambda a, b: Tensor.einsum("bij,jk->bki", a, b), arr(2, 3, 4), arr(4, 2))


def test_sort_argsort_topk_against_numpy():
  x = arr(3, 7)
  x[0, 2] = x[0, 5]                                               # a tie: stable keeps index order
  v, i = Tensor(x).sort(-1)
  np.testing.assert_array_equal(i.numpy(), np.argsort(x, -1, kind="stable"))
  np.testing.assert_array_equal(v.numpy(), np.sort(x, -1))
  v, i = Tensor(x).sort(0, descending=True)
  np.testing.assert_array_equal(i.numpy(), np.argsort(-x, 0, kind="stable"))
  np.testing.assert_array_equal(Tensor(x).argsort(1).numpy(), np.argsort(x, 1, kind="stable"))
  v, i = Tensor(x).topk(3)
  np.testing.assert_array_equal(v.numpy(), -np.sort(-x, -1)[:, :3])
  xn = x.copy()
  xn[1, 3] = np.nan                                               # NaN sorts last, as NumPy and PyTorch
  np.testing.assert_array_equal(Tensor(xn).sort(-1)[1].numpy(), np.argsort(xn, -1, kind="stable"))
  fd_check(lambda t: t.sort(-1)[0], arr(2, 5))
  fd_check(lambda t: t.topk(2, dim=0, largest=False)[0], arr(4, 3))


def test_cumulative_ops_against_numpy():
  x = arr(3, 5)
  np.testing.assert_allclose(Tensor(x).cumprod(1).numpy(), np.cumprod(x, 1), rtol=1e-12)
  np.testing.assert_array_equal(Tensor(x).cummax(1)[0].numpy(), np.maximum.accumulate(x, 1))
  np.testing.assert_array_equal(Tensor(x).cummin(0)[0].numpy(), np.minimum.accumulate(x, 0))
  np.testing.assert_allclose(Tensor(x).logcumsumexp(1).numpy(), np.logaddexp.accumulate(x, 1), rtol=1e-12)
  ints = rng.integers(-5, 5, (4, 6)).astype(np.int32)
  np.testing.assert_array_equal(Tensor(ints).cummax(1)[0].numpy(), np.maximum.accumulate(ints, 1))
  fd_check(lambda t: t.cumprod(1), arr(2, 4))
  fd_check(lambda t: t.cummax(1)[0], arr(2, 4))


def np_scatter(x, dim, idx, src, reduce=None):
  out = x.copy()
  for pos in np.ndindex(idx.shape):
    tgt = list(pos)
    tgt[dim] = idx[pos]
    tgt = tuple(tgt)
    if reduce is None: out[tgt] = src[pos]
    elif reduce == "sum": out[tgt] += src[pos]
    elif reduce == "prod": out[tgt] *= src[pos]
    elif reduce == "amax": out[tgt] = max(out[tgt], src[pos])
  return out


def test_scatter_against_numpy():
  idx = np.array([[0, 1, 2, 4], [1, 3, 0, 2]])
  x, src = arr(2, 5), arr(2, 4)
  np.testing.assert_allclose(Tensor(x).scatter(1, Tensor(idx), Tensor(src)).numpy(), np_scatter(x, 1, idx, src))
  for r in ("sum", "prod", "amax"):
    dup = np.array([[0, 1, 1, 4], [1, 3, 3, 3]])
    np.testing.assert_allclose(Tensor(x).scatter_reduce(1, Tensor(dup), Tensor(src), r).numpy(),
                               np_scatter(x, 1, dup, src, r), rtol=1e-12)
  x3, idx0 = arr(3, 4), np.array([[2, 0, 1, 1]])
  np.testing.assert_allclose(Tensor(x3).scatter(0, Tensor(idx0), 7.0).numpy(),
                             np_scatter(x3, 0, idx0, np.full((1, 4), 7.0)))
  fd_check(lambda t, s: t.scatter_reduce(1, Tensor(idx), s, "sum"), arr(2, 5), arr(2, 4))


def test_roll_diag_linspace_meshgrid_against_numpy():
  x = arr(4, 5)
  np.testing.assert_array_equal(Tensor(x).roll((2, -1), (0, 1)).numpy(), np.roll(x, (2, -1), (0, 1)))
  np.testing.assert_array_equal(Tensor(x).roll(3).numpy(), np.roll(x, 3))
  v = arr(4)
  for k in (0, 1, -2):
    np.testing.assert_array_equal(Tensor(v).diag(k).numpy(), np.diag(v, k))
    np.testing.assert_array_equal(Tensor(x).diag(k).numpy(), np.diag(x, k))
  np.testing.assert_allclose(Tensor.linspace(-1, 2, 7).numpy(), np.linspace(-1, 2, 7), rtol=1e-6)
  a, b = np.arange(3.0), np.arange(4.0)
  for ix in ("ij", "xy"):
    for got, want in zip(Tensor.meshgrid(Tensor(a), Tensor(b), indexing=ix), np.meshgrid(a, b, indexing=ix)):
      np.testing.assert_array_equal(got.numpy(), want)


def test_a_small_cnn_trains():
  """conv, relu, max pool, linear: the loss of a few SGD steps on a fixed batch goes down (every op differentiable,
  the step one plan)."""
  from uopc.optim import SGD
  x = Tensor(arr(8, 1, 10, 10, dtype=np.float32))
  y = rng.integers(0, 3, 8)
  w1 = Tensor(arr(4, 1, 3, 3, dtype=np.float32) * 0.3, requires_grad=True)
  w2 = Tensor(arr(4 * 4 * 4, 3, dtype=np.float32) * 0.1, requires_grad=True)
  opt = SGD([w1, w2], lr=0.1)
  losses = []
  for _ in range(8):
    h = x.conv2d(w1).relu().max_pool2d(2).reshape(8, -1)
    loss = (h @ w2).cross_entropy(y)
    opt.zero_grad(); loss.backward(); opt.step(loss)
    losses.append(loss.item())
  assert losses[-1] < losses[0] * 0.8 and all(math.isfinite(v) for v in losses)
