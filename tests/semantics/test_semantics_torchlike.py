"""PyTorch's names that a first project reaches for (issue 47, uopc.mixin.torchlike), against NumPy float64."""
import math
import numpy as np
import pytest
from numpy.lib.stride_tricks import sliding_window_view
from uopc import Tensor, dtypes, nn

rng = np.random.default_rng(471)
A = np.arange(24.0).reshape(2, 3, 4)


def test_size_dim_tolist_len_empty():
  t = Tensor(A)
  assert t.size() == (2, 3, 4) and t.size(-1) == 4 and t.dim() == 3 and len(t) == 2
  assert t.tolist() == A.tolist()
  with pytest.raises(TypeError, match="0-d"): len(Tensor(3.0))
  assert Tensor.empty(2, 3).shape == (2, 3) and Tensor.empty((4,), dtype="int32").tolist() == [0] * 4


@pytest.mark.parametrize("offset, d1, d2", [(0, 0, 1), (1, 1, 2), (-1, 2, 1), (2, 0, 2), (5, 0, 1), (-2, -1, -2)])
def test_diagonal_matches_numpy(offset, d1, d2):
  np.testing.assert_array_equal(Tensor(A).diagonal(offset, d1, d2).numpy(), np.diagonal(A, offset, d1, d2))


def test_masked_select_nonzero_and_the_gradient_of_masked_select():
  m = A % 5 == 0
  t = Tensor(A, requires_grad=True)
  got = t.masked_select(Tensor(m))
  np.testing.assert_array_equal(got.numpy(), A[m])
  (got * 3).sum().backward()
  np.testing.assert_array_equal(t.grad.numpy(), np.where(m, 3.0, 0.0))
  np.testing.assert_array_equal(Tensor(A).masked_select(Tensor(m[0, 0])).numpy(),
                                np.broadcast_to(A, A.shape)[np.broadcast_to(m[0, 0], A.shape)])
  x = np.array([[0, 1, 0], [2, 0, 3]])
  np.testing.assert_array_equal(Tensor(x).nonzero().numpy(), np.argwhere(x))
  assert Tensor(x).nonzero().dtype is dtypes.int64
  rows, cols = Tensor(x).nonzero(as_tuple=True)
  np.testing.assert_array_equal(rows.numpy(), np.nonzero(x)[0])
  np.testing.assert_array_equal(cols.numpy(), np.nonzero(x)[1])


@pytest.mark.parametrize("dim, size, step", [(0, 3, 2), (1, 3, 2), (2, 2, 1), (-1, 4, 3)])
def test_unfold_matches_sliding_windows(dim, size, step):
  x = rng.standard_normal((3, 7, 5))
  want = np.moveaxis(sliding_window_view(x, size, axis=dim % 3), dim % 3, dim % 3)
  want = want[tuple(slice(None, None, step) if k == dim % 3 else slice(None) for k in range(3))]
  np.testing.assert_array_equal(Tensor(x).unfold(dim, size, step).numpy(), want)


def test_elementwise_functions_match_numpy():
  a = np.array([-7.0, 7.0, -7.5, 7.5, 0.0, -0.0, 1e-3])
  b = np.array([3.0, -3.0, 2.0, -2.0, 2.0, -1.0, -0.0])
  d = np.array([3.0, -3.0, 2.0, -2.0, 2.0, -1.0, 3.0])
  np.testing.assert_array_equal(Tensor(a).fmod(Tensor(d)).numpy(), np.fmod(a, d))
  np.testing.assert_array_equal(Tensor(np.array([-7, 7, -8, 8])).fmod(3).numpy(), np.fmod([-7, 7, -8, 8], 3))
  np.testing.assert_array_equal(Tensor(a[:4]).remainder(Tensor(b[:4])).numpy(), np.remainder(a[:4], b[:4]))
  np.testing.assert_array_equal(Tensor(a).copysign(Tensor(b)).numpy(), np.copysign(a, b))
  np.testing.assert_array_equal(Tensor(np.array([1, -2, 0], np.int32)).bitwise_not().numpy(), [-2, 1, -1])
  np.testing.assert_array_equal(Tensor(np.array([True, False])).bitwise_not().numpy(), [False, True])
  x = np.array([1.0, np.inf, -np.inf, np.nan, -2.0])
  np.testing.assert_array_equal(Tensor(x).isfinite().numpy(), np.isfinite(x))
  assert Tensor(np.array([1, 2])).isfinite().numpy().all()
  s, e, w = rng.standard_normal(6), rng.standard_normal(6), np.array([0.0, 0.25, 0.5, 0.75, 1.0, 1.5])
  lerp = np.where(np.abs(w) < 0.5, s + w * (e - s), e - (e - s) * (1 - w))   # PyTorch's formula
  np.testing.assert_allclose(Tensor(s).lerp(Tensor(e), Tensor(w)).numpy(), lerp, rtol=0, atol=1e-15)
  assert Tensor(s).lerp(Tensor(e), 1.0).numpy().tolist() == e.tolist()       # weight 1: end exactly
  y = np.linspace(-5, 5, 11)
  selu = 1.0507009873554805 * np.where(y > 0, y, 1.6732632423543772 * (np.exp(y) - 1))
  np.testing.assert_allclose(Tensor(y).selu().numpy(), selu, rtol=1e-14)
  np.testing.assert_allclose(Tensor(y).softsign().numpy(), y / (1 + np.abs(y)), rtol=1e-15)
  p = np.array([1.0, -np.inf, np.inf, 1000.0, -1000.0])
  q = np.array([2.0, -np.inf, 1.0, 1000.0, -3.0])
  np.testing.assert_allclose(Tensor(p).logaddexp(Tensor(q)).numpy(), np.logaddexp(p, q), rtol=1e-14)


def test_logaddexp_gradient_is_the_softmax_of_the_pair():
  a, b = Tensor(np.array([1.0, -3.0]), requires_grad=True), Tensor(np.array([2.0, 5.0]), requires_grad=True)
  a.logaddexp(b).sum().backward()
  ea, eb = np.exp([1.0, -3.0]), np.exp([2.0, 5.0])
  np.testing.assert_allclose(a.grad.numpy(), ea / (ea + eb), rtol=1e-12)
  np.testing.assert_allclose(b.grad.numpy(), eb / (ea + eb), rtol=1e-12)


def test_std_mean():
  s, m = Tensor(A).std_mean(1, keepdim=True)
  np.testing.assert_allclose(s.numpy(), A.std(1, ddof=1, keepdims=True), rtol=1e-12)
  np.testing.assert_allclose(m.numpy(), A.mean(1, keepdims=True), rtol=1e-12)


def test_max_unpool2d_puts_each_maximum_back():
  x = rng.standard_normal((2, 3, 6, 6))
  out, idx = Tensor(x).max_pool2d(2, return_indices=True)
  got = out.max_unpool2d(idx, 2).numpy()
  win = x.reshape(2, 3, 3, 2, 3, 2)
  keep = win == win.max((3, 5), keepdims=True)
  np.testing.assert_array_equal(got, np.where(keep, win, 0).reshape(x.shape))
  assert out.max_unpool2d(idx, 2, output_size=(7, 7)).shape == (2, 3, 7, 7)


def test_conv1d_takes_an_asymmetric_padding_pair():
  x, w = rng.standard_normal((1, 2, 9)), rng.standard_normal((3, 2, 3))
  xp = np.pad(x, ((0, 0), (0, 0), (1, 2)))
  want = np.einsum("ncli,oci->nol", sliding_window_view(xp, 3, axis=2), w)
  np.testing.assert_allclose(Tensor(x).conv1d(Tensor(w), padding=(1, 2)).numpy(), want, rtol=1e-12)


def test_sdpa_enable_gqa_shares_each_key_head_with_a_group_of_query_heads():
  q, k, v = rng.standard_normal((2, 6, 3, 8)), rng.standard_normal((2, 2, 5, 8)), rng.standard_normal((2, 2, 5, 8))
  kk, vv = np.repeat(k, 3, axis=1), np.repeat(v, 3, axis=1)
  s = q @ kk.transpose(0, 1, 3, 2) / math.sqrt(8)
  p = np.exp(s - s.max(-1, keepdims=True))
  want = p / p.sum(-1, keepdims=True) @ vv
  got = Tensor(q).scaled_dot_product_attention(Tensor(k), Tensor(v), enable_gqa=True).numpy()
  np.testing.assert_allclose(got, want, rtol=1e-12)
  flash = nn.scaled_dot_product_attention(Tensor(q.astype(np.float32)), k.astype(np.float32), v.astype(np.float32),
                                          enable_gqa=True)   # the fused kernels, float32
  np.testing.assert_allclose(flash.numpy(), want, rtol=1e-4, atol=1e-5)
  with pytest.raises(ValueError, match="multiple"):
    Tensor(q[:, :5]).scaled_dot_product_attention(Tensor(k), Tensor(v), enable_gqa=True)


def test_tinygrad_dtype_aliases():
  """tinygrad's `dtypes.half`, `dtypes.float`...; a float32 src scattered into a half tensor is refused, as PyTorch's
  "Expected self.dtype to be equal to src.dtype"."""
  aliases = tuple(getattr(dtypes, n) for n in ("half", "float", "double", "long", "char", "uchar", "uint", "ulong"))
  assert aliases == (dtypes.f16, dtypes.f32, dtypes.f64, dtypes.i64, dtypes.i8, dtypes.u8, dtypes.u32, dtypes.u64)
  half = Tensor.zeros(3, dtype=dtypes.half)
  with pytest.raises(TypeError):
    half.scatter(0, Tensor(np.array([0, 1])), Tensor(np.array([1.0, 2.0], np.float32)))


def test_reductions_take_pytorchs_dim_keyword():
  """PyTorch's MNIST example writes F.log_softmax(x, dim=1) and output.argmax(dim=1, keepdim=True): dim= is axis=."""
  x = rng.standard_normal((3, 5, 4))
  t = Tensor(x)
  for name, ref in (("sum", lambda a, k: a.sum(1, keepdims=k)), ("mean", lambda a, k: a.mean(1, keepdims=k)),
                    ("max", lambda a, k: a.max(1, keepdims=k)), ("min", lambda a, k: a.min(1, keepdims=k)),
                    ("argmax", lambda a, k: a.argmax(1, keepdims=k)), ("prod", lambda a, k: a.prod(1, keepdims=k)),
                    ("var", lambda a, k: a.var(1, ddof=1, keepdims=k)), ("std", lambda a, k: a.std(1, ddof=1,
                                                                                                   keepdims=k))):
    for keep in (False, True):
      np.testing.assert_allclose(getattr(t, name)(dim=1, keepdim=keep).numpy(), ref(x, keep), rtol=1e-10, err_msg=name)
  e = np.exp(x - x.max(1, keepdims=True))
  np.testing.assert_allclose(t.softmax(dim=1).numpy(), e / e.sum(1, keepdims=True), rtol=1e-10)
  np.testing.assert_allclose(t.log_softmax(dim=1).numpy(), np.log(e / e.sum(1, keepdims=True)), rtol=1e-10)
  np.testing.assert_allclose(t.cumsum(dim=1).numpy(), x.cumsum(1), rtol=1e-10)
  values, indices = t.cummax(dim=2)
  np.testing.assert_array_equal(values.numpy(), np.maximum.accumulate(x, 2))
  std, mean = t.std_mean(dim=0)
  np.testing.assert_allclose(mean.numpy(), x.mean(0), rtol=1e-10)
  np.testing.assert_array_equal(Tensor(np.arange(6)).view_as(t[:, :2, 0]).numpy(), np.arange(6).reshape(3, 2))
  with pytest.raises(TypeError, match="dim= and an axis"): t.sum(1, dim=1)


def _cross_entropy_np(logits, y, weight, ignore_index, reduction, e):
  """PyTorch's documented rule in float64 (classes on axis 1): (1 - e) w[y] (-logp[y]) + e / C sum_c w_c (-logp_c),
  ignored targets 0, "mean" divided by the sum of w[y] over the counted targets."""
  x = np.moveaxis(logits.astype(np.float64), 1, -1)
  C = x.shape[-1]
  logp = x - x.max(-1, keepdims=True)
  logp = logp - np.log(np.exp(logp).sum(-1, keepdims=True))
  w = np.ones(C) if weight is None else weight.astype(np.float64)
  counted = y != ignore_index
  safe = np.where(counted, y, 0)
  nll = -np.take_along_axis(logp, safe[..., None], -1)[..., 0] * w[safe] * counted
  smooth = -(logp * w).sum(-1) * counted
  loss = (1 - e) * nll + e / C * smooth
  if reduction == "mean": return loss.sum() / (w[safe] * counted).sum()
  return loss.sum() if reduction == "sum" else loss


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("smoothing", [0.0, 0.2])
def test_cross_entropy_with_class_weights_and_ignore_index(weighted, reduction, smoothing):
  logits = rng.standard_normal((3, 5, 4)).astype(np.float32)    # (N, C, d1): PyTorch's class axis 1
  y = rng.integers(0, 5, (3, 4))
  y[0, 1], y[2, 3] = -100, 2
  w = rng.random(5) + 0.5 if weighted else None
  for ignore in (-100, 2):
    target = y if ignore == -100 else np.where(y == -100, 2, y)
    got = Tensor(logits).cross_entropy(Tensor(target), reduction, smoothing, None if w is None else Tensor(w),
                                       ignore_index=ignore)
    want = _cross_entropy_np(logits, target, w, ignore, reduction, smoothing)
    np.testing.assert_allclose(got.numpy(), want, rtol=2e-6, atol=1e-6)
  loss = nn.CrossEntropyLoss(None if w is None else Tensor(w), ignore_index=2, reduction=reduction,
                             label_smoothing=smoothing)
  np.testing.assert_allclose(loss(Tensor(logits), Tensor(np.where(y == -100, 2, y))).numpy(),
                             _cross_entropy_np(logits, np.where(y == -100, 2, y), w, 2, reduction, smoothing),
                             rtol=2e-6, atol=1e-6)
  with pytest.raises(IndexError, match="-100"):   # without ignore_index, -100 is a target out of range
    Tensor(logits).cross_entropy(Tensor(y))
