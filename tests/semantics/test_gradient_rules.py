"""Gradients at the edges, against float64 NumPy references written from PyTorch's backward formulas (issue 47):
log_softmax over a row holding -inf, max_pool's tie rule (the whole gradient to the index it returns), the max
reduction's (shared between ties, as PyTorch's amax), sigmoid at extreme inputs, cos/tan/sin at |x| >= 1e5, erf in
float64 at the infinities."""
import numpy as np
import pytest
from uopc.tensor import Tensor


def _grad(f, x, w=None):
  t = Tensor(x, requires_grad=True)
  y = f(t)
  (y * Tensor(w) if w is not None else y).sum().backward()
  return y.numpy(), t.grad.numpy()


def test_log_softmax_with_minus_inf_is_as_if_those_entries_were_absent():
  x = np.array([[-np.inf, 0, 1, -np.inf], [0.5, -np.inf, -2, 3]], np.float32)
  w = np.array([[0.3, -1.2, 0.7, 2.0], [1.5, -0.4, 0.2, -0.9]], np.float32)
  _, g = _grad(lambda t: t.log_softmax(1), x, w)
  x64 = x.astype(np.float64)
  soft = np.exp(x64 - x64.max(1, keepdims=True))
  soft /= soft.sum(1, keepdims=True)                        # 0 at the -inf entries
  want = w - soft * w.sum(1, keepdims=True)                  # PyTorch's log_softmax_backward: g - softmax * sum(g)
  np.testing.assert_allclose(g, want, rtol=1e-6, atol=1e-6)
  # the finite entries get what the row without its -inf entries gets
  _, g_short = _grad(lambda t: t.log_softmax(0), np.array([0, 1], np.float32), w[0, 1:3])
  np.testing.assert_allclose(g[0, 1:3], g_short - soft[0, 1:3] * (w[0, 0] + w[0, 3]), rtol=1e-6)


def _max_pool_numpy(x, k, s, gout=None):
  """(pooled, gradient): PyTorch's rule, each window's gradient (gout, or 1) to its first maximum in row-major order."""
  oh, ow = (x.shape[2] - k) // s + 1, (x.shape[3] - k) // s + 1
  out, g = np.zeros(x.shape[:2] + (oh, ow)), np.zeros(x.shape)
  for n, c, i, j in np.ndindex(*out.shape):
    win = x[n, c, i * s:i * s + k, j * s:j * s + k]
    a, b = np.unravel_index(np.argmax(win), win.shape)
    out[n, c, i, j] = win[a, b]
    g[n, c, i * s + a, j * s + b] += 1 if gout is None else gout[n, c, i, j]
  return out, g


@pytest.mark.parametrize("k,s", [(2, 2), (3, 2), (3, 1)])
def test_max_pool_sends_a_windows_gradient_to_its_first_maximum(k, s):
  x = np.random.default_rng(k * 10 + s).integers(0, 3, (2, 3, 7, 7)).astype(np.float32)   # many ties
  _, g = _grad(lambda t: t.max_pool2d(k, s), x)
  np.testing.assert_array_equal(g, _max_pool_numpy(x, k, s)[1])


def test_relu_of_max_pool_of_conv_gives_pytorchs_weight_gradient():
  """PyTorch's MNIST order, on 0/1 images and a flat filter: every window is full of ties, and each window's
  gradient reaches the weight once (through its first maximum), not split among the tied pixels."""
  x = np.random.default_rng(3).integers(0, 2, (2, 1, 6, 6)).astype(np.float32)
  tw = Tensor(np.ones((1, 1, 2, 2), np.float32), requires_grad=True)
  Tensor(x).conv2d(tw).max_pool2d(2).relu().sum().backward()
  conv = np.zeros((2, 1, 5, 5))
  for n, i, j in np.ndindex(2, 5, 5): conv[n, 0, i, j] = x[n, 0, i:i + 2, j:j + 2].sum()
  pooled, _ = _max_pool_numpy(conv, 2, 2)
  _, gconv = _max_pool_numpy(conv, 2, 2, gout=(pooled > 0).astype(np.float64))   # relu's gradient
  want = np.zeros((1, 1, 2, 2))
  for a, b in np.ndindex(2, 2): want[0, 0, a, b] = (gconv[:, 0] * x[:, 0, a:a + 5, b:b + 5]).sum()
  np.testing.assert_allclose(tw.grad.numpy(), want, rtol=1e-6)


def test_max_reduction_shares_the_gradient_between_ties():
  """uopc's max(dim) returns the values only (PyTorch's amax, tinygrad's max), and follows amax's rule: tied maxima
  share the gradient equally. (PyTorch's max(dim), which also returns indices, sends it to the returned index.)"""
  x = np.array([[1, 3, 3, 0], [2, 2, 2, 2]], np.float32)
  _, g = _grad(lambda t: t.max(1), x)
  np.testing.assert_array_equal(g, [[0, 0.5, 0.5, 0], [0.25, 0.25, 0.25, 0.25]])


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_sigmoid_gradient_at_extreme_inputs_is_zero(dtype):
  x = np.array([-np.inf, -1e4, -100, 0, 100, 1e4, np.inf], np.float64).astype(dtype)
  y, g = _grad(lambda t: t.sigmoid(), x)
  with np.errstate(over="ignore"): want = 1 / (1 + np.exp(-x.astype(np.float64)))
  np.testing.assert_allclose(y, want, rtol=1e-3, atol=np.finfo(dtype).tiny)   # subnormals may flush to 0
  assert np.isfinite(g).all()
  np.testing.assert_array_equal(g[[0, 1, 5, 6]], 0)
  assert g[3] == 0.25


BIG = np.array([1e5, 3e5, -1e6, 123456.7, 8e6, 1.5, -0.3], np.float32)


@pytest.mark.parametrize("name,value,deriv", [
  ("sin", np.sin, np.cos), ("cos", np.cos, lambda x: -np.sin(x)), ("tan", np.tan, lambda x: 1 / np.cos(x) ** 2)])
def test_trig_at_large_arguments_float32(name, value, deriv):
  """The float32 input's exact value, in float64: x + pi/2 would round it by up to 0.004 at 1e5 (1% off)."""
  y, g = _grad(lambda t: getattr(t, name)(), BIG)
  x64 = BIG.astype(np.float64)
  np.testing.assert_allclose(y, value(x64), rtol=2e-6, atol=1e-6)
  np.testing.assert_allclose(g, deriv(x64), rtol=2e-5, atol=1e-6)


def test_erf_float64_at_the_infinities():
  x = np.array([-np.inf, -40.0, 6.0, 30.0, 1e300, np.inf])
  y, g = _grad(lambda t: t.erf(), x)
  np.testing.assert_array_equal(y, [-1, -1, 1, 1, 1, 1])
  np.testing.assert_array_equal(g[[0, 1, 3, 4, 5]], 0)
  np.testing.assert_array_equal(Tensor(x).erfc_abs().numpy()[[0, 1, 3, 4, 5]], 0)
