"""Issue 47's items against PyTorch itself (skipped without it; each has a float64 NumPy twin that always runs:
test_semantics_torchlike.py, test_wrong_values.py, test_gradient_rules.py, test_semantics_bad_input.py): the values,
gradients and dtypes a PyTorch user compares on a first CNN."""
from __future__ import annotations
import numpy as np
import pytest
from uopc import Tensor, nn

torch = pytest.importorskip("torch")
F = torch.nn.functional
rng = np.random.default_rng(470)


def same(got: Tensor, want, atol: float = 1e-5) -> None:
  """got (uopc) equals want (PyTorch) in shape and dtype, and in value within atol (relative to the largest)."""
  want = want.detach().numpy()
  got = got.numpy()
  assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, got.dtype, want.shape, want.dtype)
  np.testing.assert_allclose(got, want, rtol=atol, atol=atol)


def test_max_unpool2d_values_indices_and_gradient():
  x = rng.standard_normal((2, 3, 8, 7)).astype(np.float32)
  tx = torch.tensor(x, requires_grad=True)
  t_out, t_idx = F.max_pool2d(tx, 2, return_indices=True)
  t_un = F.max_unpool2d(t_out, t_idx, 2, output_size=(8, 7))
  ux = Tensor(x, requires_grad=True)
  u_out, u_idx = ux.max_pool2d(2, return_indices=True)
  u_un = u_out.max_unpool2d(u_idx, 2, output_size=(8, 7))
  np.testing.assert_array_equal(u_idx.numpy(), t_idx.numpy())
  same(u_un, t_un)
  g = rng.standard_normal(t_un.shape).astype(np.float32)
  (t_un * torch.tensor(g)).sum().backward()
  (u_un * Tensor(g)).sum().backward()
  same(ux.grad, tx.grad)


@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_enable_gqa(causal):
  q, k, v = (rng.standard_normal(s).astype(np.float32) for s in ((2, 8, 5, 4), (2, 2, 6, 4), (2, 2, 6, 4)))
  want = F.scaled_dot_product_attention(*(torch.tensor(a) for a in (q, k, v)), is_causal=causal, enable_gqa=True)
  same(Tensor(q).scaled_dot_product_attention(Tensor(k), Tensor(v), is_causal=causal, enable_gqa=True), want)
  same(nn.scaled_dot_product_attention(Tensor(q), Tensor(k), Tensor(v), is_causal=causal, enable_gqa=True), want)
  with pytest.raises(ValueError):   # PyTorch raises too: 8 query heads and 2 key heads need enable_gqa
    Tensor(q).scaled_dot_product_attention(Tensor(k), Tensor(v)).numpy()


def test_conv1d_padding_forms():
  x, w = rng.standard_normal((2, 3, 10)).astype(np.float32), rng.standard_normal((4, 3, 3)).astype(np.float32)
  tx, tw = torch.tensor(x), torch.tensor(w)
  same(Tensor(x).conv1d(Tensor(w), padding=(1, 2)), F.conv1d(F.pad(tx, (1, 2)), tw))   # tinygrad's (left, right)
  same(Tensor(x).conv1d(Tensor(w), padding=(2,)), F.conv1d(tx, tw, padding=(2,)))
  same(Tensor(x).conv1d(Tensor(w), padding="same"), F.conv1d(tx, tw, padding="same"))
  m = nn.Conv1d(3, 4, 3, padding=(1,))
  same(m(Tensor(x)), F.conv1d(tx, torch.tensor(m.weight.numpy()), torch.tensor(m.bias.numpy()), padding=1))


def test_wrong_values_of_the_issue():
  a, b = (rng.standard_normal((3, 8, 4)).astype(np.float32) for _ in range(2))
  same(Tensor.einsum("...id,...jd", Tensor(a), Tensor(b)),
       torch.einsum("...id,...jd", torch.tensor(a), torch.tensor(b)))
  r = np.array([[0, 200, 1.0], [-np.inf, 0, 1]], np.float32)
  same(Tensor(r).logcumsumexp(1), torch.tensor(r).logcumsumexp(1))
  i32 = np.array([1, -3, 7, -2**31, 2**30], np.int32)
  for n in (1, 3, 31):
    same(Tensor(i32) << n, torch.tensor(i32) << n)
    same(Tensor(i32) >> n, torch.tensor(i32) >> n)
  c = rng.standard_normal((4, 6)).astype(np.float32)
  c[0, 2] = c[0, 1]
  for name in ("cummax", "cummin"):
    (uv, ui), (tv, ti) = getattr(Tensor(c), name)(1), getattr(torch.tensor(c), name)(1)
    same(uv, tv)
    same(ui, ti)
  img = rng.integers(0, 255, (1, 1, 4, 4)).astype(np.uint8)
  same(Tensor(img).interpolate(size=(8, 8), mode="nearest"), F.interpolate(torch.tensor(img), size=(8, 8)))
  ia, ib = rng.integers(0, 5, (3, 4)).astype(np.int32), rng.integers(0, 5, (4, 2)).astype(np.int32)
  same(Tensor.einsum("ij,jk->ik", Tensor(ia), Tensor(ib)),
       torch.einsum("ij,jk->ik", torch.tensor(ia), torch.tensor(ib)))


def test_gradients_of_the_issue():
  row = np.array([[-np.inf, 0, 1, -np.inf]], np.float32)
  w = np.array([[.3, -1.2, .7, 2]], np.float32)
  x, tx = Tensor(row, requires_grad=True), torch.tensor(row, requires_grad=True)
  (x.log_softmax(-1) * Tensor(w)).exp().sum().backward()
  (tx.log_softmax(-1) * torch.tensor(w)).exp().sum().backward()
  same(x.grad, tx.grad)
  tie = np.zeros((1, 1, 4, 4), np.float32)
  tie[0, 0, 2:, 2:] = 0.5   # every window of the last one tied
  x, tx = Tensor(tie, requires_grad=True), torch.tensor(tie, requires_grad=True)
  wts = np.arange(1.0, 5.0, dtype=np.float32).reshape(1, 1, 2, 2)
  (x.max_pool2d(2) * Tensor(wts)).sum().backward()
  (F.max_pool2d(tx, 2) * torch.tensor(wts)).sum().backward()
  same(x.grad, tx.grad)
  ext = np.array([-1e4, -100, 0, 100, 1e4, -np.inf, np.inf], np.float32)
  x, tx = Tensor(ext, requires_grad=True), torch.tensor(ext, requires_grad=True)
  x.sigmoid().sum().backward()
  tx.sigmoid().sum().backward()
  same(x.grad, tx.grad)



def test_the_mnist_example_s_calls():
  """The lines of PyTorch's MNIST example that reach the tensor: log_softmax(dim=1), nll_loss, argmax(dim=1,
  keepdim=True), eq(view_as(...)).sum().item()."""
  x = rng.standard_normal((6, 10)).astype(np.float32)
  y = rng.integers(0, 10, 6)
  out, tout = Tensor(x).log_softmax(dim=1), F.log_softmax(torch.tensor(x), dim=1)
  same(out, tout)
  same(out.nll_loss(Tensor(y), reduction="sum"), F.nll_loss(tout, torch.tensor(y), reduction="sum"))
  pred, tpred = out.argmax(dim=1, keepdim=True), tout.argmax(dim=1, keepdim=True)
  np.testing.assert_array_equal(pred.numpy(), tpred.numpy())
  assert pred.eq(Tensor(y).view_as(pred)).sum().item() == tpred.eq(torch.tensor(y).view_as(tpred)).sum().item()
  for name in ("sum", "mean", "std", "var", "logsumexp"):
    same(getattr(Tensor(x), name)(dim=1), getattr(torch.tensor(x), name)(dim=1))


def test_cross_entropy_with_class_weights_and_ignore_index():
  logits = rng.standard_normal((3, 5, 4)).astype(np.float32)
  y = rng.integers(0, 5, (3, 4))
  y[0, 1] = -100
  w = (rng.random(5) + 0.5).astype(np.float32)
  for reduction in ("mean", "sum", "none"):
    for smoothing in (0.0, 0.2):
      x, tx = Tensor(logits, requires_grad=True), torch.tensor(logits, requires_grad=True)
      got = x.cross_entropy(Tensor(y), reduction, smoothing, Tensor(w), ignore_index=-100)
      want = F.cross_entropy(tx, torch.tensor(y), torch.tensor(w), reduction=reduction, label_smoothing=smoothing)
      same(got, want)
      got.sum().backward()
      want.sum().backward()
      same(x.grad, tx.grad)
  crit, tcrit = nn.CrossEntropyLoss(Tensor(w), ignore_index=-100), torch.nn.CrossEntropyLoss(torch.tensor(w))
  same(crit(Tensor(logits), Tensor(y)), tcrit(torch.tensor(logits), torch.tensor(y)))
