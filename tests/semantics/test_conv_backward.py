"""The gradient of a stride-1 window view as a sum of shifted copies (issue 50: uopc.mixin.windows._fold): each
window position's gradient padded back onto the input, instead of the transpose of _pool's repeat (a division and a
modulo per element). Checked by central differences in float64 through conv (1, 2 and 3 spatial axes, symmetric
and uneven padding) and stride-1 pooling, and against the view's own gradient on a LeNet-sized layer in float32.
A stride-1 convolution's gradients are convolutions of their own (_conv_grads): against autograd's in float64, and
within the float32 bound of the float64 answer with either optimizer."""
import numpy as np
import pytest
import uopc.mixin.windows
from numerics import finite_differences   # tests/numerics.py
from uopc.tensor import Tensor

rng = np.random.default_rng(50)


def arr(*shape, dtype=np.float64): return rng.standard_normal(shape).astype(dtype)


def fd_check(f, *arrays, eps=1e-6, rtol=1e-5, atol=1e-7):
  """backward() of sum(f(*xs) * g) against central differences (tests/numerics.py), every input in float64."""
  ts = [Tensor(a, requires_grad=True) for a in arrays]
  out = f(*ts)
  g = arr(*out.shape)
  (out * Tensor(g)).sum().backward()
  numeric = finite_differences(lambda *b: float((f(*map(Tensor, b)).numpy() * g).sum()), list(arrays), eps)
  for t, num in zip(ts, numeric):
    np.testing.assert_allclose(t.grad.numpy(), num, rtol=rtol, atol=atol)


@pytest.mark.parametrize("x, w, padding", [((1, 2, 5), (3, 2, 3), 1), ((1, 2, 4, 5), (2, 2, 3, 2), [(1, 0), (0, 2)]),
                                           ((1, 1, 3, 3, 3), (2, 1, 2, 2, 2), 0)], ids=["1d", "2d-uneven-pad", "3d"])
@pytest.mark.parametrize("opt", ["DefaultOpt", "VectorOpt"])   # autograd's gradients; convolutions (_conv_grads)
def test_stride_one_conv_gradients_by_central_differences(x, w, padding, opt):
  import uopc.opt
  Tensor.opt = getattr(uopc.opt, opt)
  fd_check(lambda x, w, b: x.conv2d(w, b, padding=padding), arr(*x), arr(*w), arr(w[0]))


def test_stride_one_pooling_gradients_by_central_differences():
  fd_check(lambda x: x.avg_pool2d(3, stride=1), arr(1, 2, 5, 4))
  fd_check(lambda x: x.max_pool2d(2, stride=1, padding=1), arr(1, 1, 4, 5))


def test_the_fold_gives_the_window_views_gradients(monkeypatch):
  monkeypatch.setattr(uopc.mixin.windows, "CONV_GRADS_AS_CONVS", False)   # autograd's gradients, through the view
  x, w = arr(8, 6, 14, 14, dtype=np.float32), arr(16, 6, 5, 5, dtype=np.float32)
  g = arr(8, 16, 12, 12, dtype=np.float32)
  def grads():
    tx, tw = Tensor(x, requires_grad=True), Tensor(w, requires_grad=True)
    (tx.conv2d(tw, padding=1) * Tensor(g)).sum().backward()
    return tx.grad.numpy(), tw.grad.numpy()
  folded = grads()
  monkeypatch.setattr(uopc.mixin.windows, "MAX_FOLD_TERMS", 0)   # every window keeps the view's own gradient
  viewed = grads()
  for a, b in zip(folded, viewed): np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def np_corr(x: np.ndarray, w: np.ndarray) -> np.ndarray:
  """out[n, o, y, x] = sum_c,i,j x[n, c, y + i, x + j] w[o, c, i, j] in float64 (no padding)."""
  win = np.lib.stride_tricks.sliding_window_view(x, w.shape[2:], axis=(2, 3))          # (N, C, oy, ox, ky, kx)
  return np.einsum("ncyxij,ocij->noyx", win, w)


def grads_and_bounds(x, w, g, pad):
  """The float64 gradients of sum(conv2d(x, w, padding=pad) * g), and how far a float32 computation of each may be
  from them whatever order it sums in: n u sum |terms| (n the terms of one output, u = 2^-24; Higham, first order)."""
  x64, w64, g64 = (a.astype(np.float64) for a in (x, w, g))
  k = w.shape[2]
  xp = np.pad(x64, [(0, 0), (0, 0), (pad, pad), (pad, pad)])
  gp = lambda a: np.pad(a, [(0, 0), (0, 0), (k - 1 - pad,) * 2, (k - 1 - pad,) * 2])
  wt = lambda a: a.transpose(1, 0, 2, 3)[:, :, ::-1, ::-1]
  dx, dx_abs = np_corr(gp(g64), wt(w64)), np_corr(gp(np.abs(g64)), wt(np.abs(w64)))
  # dw[o, c] = sum_n,y,x g[n, o, y, x] xp[n, c, y + i, x + j]: the correlation of xp with g, batch as the channel
  corr = lambda a, b: np_corr(a.transpose(1, 0, 2, 3), b.transpose(1, 0, 2, 3)).transpose(1, 0, 2, 3)
  dw, dw_abs = corr(xp, g64), corr(np.abs(xp), np.abs(g64))
  u = 2.0 ** -24
  return (dx, w.shape[0] * k * k * u * dx_abs), (dw, g.shape[0] * g.shape[2] * g.shape[3] * u * dw_abs)


@pytest.mark.parametrize("opt, as_convs", [("VectorOpt", True), ("VectorOpt", False), ("DefaultOpt", True)],
                         ids=["VectorOpt-as-convolutions", "VectorOpt-autograd", "DefaultOpt-autograd"])
def test_lenet_layer_gradients_within_the_float32_bound(monkeypatch, fresh_plan_cache, opt, as_convs):
  """LeNet's second layer and a padded first one, in float32: dx and dw within the bound of the float64 answer, by
  either gradient: convolutions (VectorOpt: dx summed over C_out x 25, dw over batch x 100 output pixels as vector
  partial sums) or autograd's (CONV_GRADS_AS_CONVS off, or the default optimizer)."""
  import uopc.opt
  monkeypatch.setattr(uopc.mixin.windows, "CONV_GRADS_AS_CONVS", as_convs)
  Tensor.opt = getattr(uopc.opt, opt)
  for (n, cin, hw, cout, pad) in [(16, 6, 14, 16, 0), (8, 1, 28, 6, 2)]:
    x, w = arr(n, cin, hw, hw, dtype=np.float32), arr(cout, cin, 5, 5, dtype=np.float32)
    g = arr(n, cout, hw + 2 * pad - 4, hw + 2 * pad - 4, dtype=np.float32)
    tx, tw = Tensor(x, requires_grad=True), Tensor(w, requires_grad=True)
    (tx.conv2d(tw, padding=pad) * Tensor(g)).sum().backward()
    (dx, dx_bound), (dw, dw_bound) = grads_and_bounds(x, w, g, pad)
    assert np.all(np.abs(tx.grad.numpy() - dx) <= dx_bound)
    assert np.all(np.abs(tw.grad.numpy() - dw) <= dw_bound)


def test_the_gradients_as_convolutions_are_autograds_in_float64(monkeypatch):
  """The same gradients as autograd's through the view (_conv_grads against CONV_GRADS_AS_CONVS off), in float64,
  at strides of one with symmetric and uneven padding, 1 to 3 spatial axes: only the order of dx's sum differs."""
  from uopc.opt import VectorOpt
  Tensor.opt = VectorOpt   # the optimizer that asks for them (float64 kernels take its default lowering)
  cases = [((2, 3, 9, 8), (4, 3, 3, 2), 1), ((1, 2, 7), (3, 2, 4), [(2, 0)]), ((1, 2, 4, 5, 4), (2, 2, 2, 3, 2), 0)]
  for xs, ws, pad in cases:
    x, w, g = arr(*xs), arr(*ws), None
    results = []
    for on in (True, False):
      monkeypatch.setattr(uopc.mixin.windows, "CONV_GRADS_AS_CONVS", on)
      tx, tw = Tensor(x, requires_grad=True), Tensor(w, requires_grad=True)
      y = tx.conv2d(tw, padding=pad)
      g = arr(*y.shape) if g is None else g
      (y * Tensor(g)).sum().backward()
      results.append((tx.grad.numpy(), tw.grad.numpy()))
    for a, b in zip(*results): np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
