"""The gradient of a stride-1 window view as a sum of shifted copies (issue 50: uopc.mixin.windows._fold): each
window position's gradient padded back onto the input, instead of the transpose of _pool's repeat (a division and a
modulo per element). Checked by central differences in float64 through conv (1, 2 and 3 spatial axes, symmetric
and uneven padding) and stride-1 pooling, and against the view's own gradient on a LeNet-sized layer in float32."""
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
def test_stride_one_conv_gradients_by_central_differences(x, w, padding):
  fd_check(lambda x, w, b: x.conv2d(w, b, padding=padding), arr(*x), arr(*w), arr(w[0]))


def test_stride_one_pooling_gradients_by_central_differences():
  fd_check(lambda x: x.avg_pool2d(3, stride=1), arr(1, 2, 5, 4))
  fd_check(lambda x: x.max_pool2d(2, stride=1, padding=1), arr(1, 1, 4, 5))


def test_the_fold_gives_the_window_views_gradients(monkeypatch):
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
