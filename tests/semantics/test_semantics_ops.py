"""tinygrad's op tests that uopc failed (issue 30, item 7), against NumPy float64 formulas and, where it is installed,
PyTorch: layernorm over several axes and nn.LayerNorm/LayerNorm2d, cross_entropy with PyTorch's class axis and label
smoothing, pad's modes, gelu's two forms, minimum/maximum on bools, and the errors PyTorch and tinygrad raise (flip
of an axis twice, one_hot(-1), cumsum on an axis a tensor lacks, stack with a Tensor as its axis)."""
import math
import numpy as np
import pytest
from uopc.errors import UsageError
from uopc.nn import LayerNorm, LayerNorm2d
from uopc.tensor import Tensor, gradient

try:
  import torch
  import torch.nn.functional as F
except ImportError:
  torch = None
needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed")
RNG = np.random.default_rng(30)


def np_layernorm(x, axes, eps=1e-5):
  x = x.astype(np.float64)
  return (x - x.mean(axes, keepdims=True)) / np.sqrt(x.var(axes, keepdims=True) + eps)


def np_log_softmax(x, axis):
  x = x.astype(np.float64)
  m = x.max(axis, keepdims=True)
  return x - m - np.log(np.exp(x - m).sum(axis, keepdims=True))


# ---- layernorm ----
def test_layernorm_over_several_axes():
  x = RNG.standard_normal((4, 3, 5, 6)).astype(np.float32) * 3 + 2
  for axes in (-1, (-2, -1), (1, 2, 3), 0):
    np.testing.assert_allclose(Tensor(x).layernorm(axes).numpy(), np_layernorm(x, axes), rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("shape", [(10,), (5, 10), (4, 5, 10)])
def test_nn_layernorm_normalizes_the_last_axes_of_normalized_shape(shape):
  """tinygrad's test: LayerNorm([H, W]) over (N, C, H, W); uopc normalized only W, 0.0554 for 0.0464."""
  x = RNG.standard_normal((3, 2) + shape).astype(np.float32)
  w, b = (RNG.standard_normal(shape).astype(np.float32) for _ in range(2))
  layer = LayerNorm(shape if len(shape) > 1 else shape[0])
  layer.weight, layer.bias = Tensor(w, requires_grad=True), Tensor(b, requires_grad=True)
  axes = tuple(range(-len(shape), 0))
  np.testing.assert_allclose(layer(Tensor(x)).numpy(), np_layernorm(x, axes) * w + b, rtol=5e-5, atol=5e-5)
  plain = LayerNorm(shape, elementwise_affine=False)
  assert plain.parameters() == []
  np.testing.assert_allclose(plain(Tensor(x)).numpy(), np_layernorm(x, axes), rtol=5e-5, atol=5e-5)
  assert LayerNorm(shape, bias=False).bias is None
  with pytest.raises(ValueError, match="last axes"): LayerNorm(shape)(Tensor(x).transpose(-1, 0))


@needs_torch
def test_nn_layernorm_against_pytorch_values_and_gradients():
  N, C, H, W = 4, 3, 5, 6
  x = RNG.standard_normal((N, C, H, W)).astype(np.float32)
  tl = torch.nn.LayerNorm([H, W])
  with torch.no_grad():
    tl.weight.copy_(torch.tensor(RNG.standard_normal((H, W)).astype(np.float32)))
    tl.bias.copy_(torch.tensor(RNG.standard_normal((H, W)).astype(np.float32)))
  layer = LayerNorm([H, W])
  layer.weight = Tensor(tl.weight.detach().numpy(), requires_grad=True)
  layer.bias = Tensor(tl.bias.detach().numpy(), requires_grad=True)
  tx = torch.tensor(x, requires_grad=True)
  (tl(tx) ** 2).sum().backward()
  ux = Tensor(x)
  out = layer(ux)
  np.testing.assert_allclose(out.numpy(), tl(tx).detach().numpy(), rtol=5e-6, atol=5e-6)
  fresh = layer(ux)   # a graph not yet realized
  gx, gw, gb = gradient((fresh * fresh).sum(), [ux, layer.weight, layer.bias])
  for g, want in ((gx, tx.grad), (gw, tl.weight.grad), (gb, tl.bias.grad)):
    np.testing.assert_allclose(g.numpy(), want.numpy(), rtol=5e-4, atol=5e-4)


def test_layernorm2d_is_layernorm_over_channels():
  x = RNG.standard_normal((2, 3, 4, 5)).astype(np.float32)
  w, b = (RNG.standard_normal(3).astype(np.float32) for _ in range(2))
  layer = LayerNorm2d(3)
  layer.weight, layer.bias = Tensor(w), Tensor(b)
  want = np_layernorm(x, 1) * w[:, None, None] + b[:, None, None]
  np.testing.assert_allclose(layer(Tensor(x)).numpy(), want, rtol=5e-5, atol=5e-5)
  if torch is not None:
    ref = F.layer_norm(torch.tensor(x).permute(0, 2, 3, 1), (3,), torch.tensor(w), torch.tensor(b)).permute(0, 3, 1, 2)
    np.testing.assert_allclose(layer(Tensor(x)).numpy(), ref.numpy(), rtol=5e-6, atol=5e-6)
  with pytest.raises(ValueError, match="N, C, H, W"): layer(Tensor(x[0]))


# ---- cross_entropy ----
def np_cross_entropy(x, y, ls=0.0, reduction="mean"):
  """PyTorch's formula: class axis 1 (0 for one sample); integer targets become one-hot; (1 - ls) y + ls / C."""
  axis = 0 if x.ndim == 1 else 1
  C = x.shape[axis]
  if not np.issubdtype(y.dtype, np.floating): y = np.moveaxis(np.eye(C)[y], -1, axis)
  y = y.astype(np.float64) * (1 - ls) + ls / C
  loss = -(np_log_softmax(x, axis) * y).sum(axis)
  return {"mean": loss.mean(), "sum": loss.sum(), "none": loss}[reduction]


@pytest.mark.parametrize("shape", [(32,), (32, 10), (8, 4, 3, 5)])
@pytest.mark.parametrize("ls", [0.0, 0.3, 0.7, 1.0])
def test_cross_entropy_with_class_probabilities(shape, ls):
  x, y = (RNG.standard_normal(shape).astype(np.float32) for _ in range(2))   # tinygrad's: y need not sum to 1
  for reduction in ("mean", "sum", "none"):
    got = Tensor(x).cross_entropy(Tensor(y), reduction, label_smoothing=ls).numpy()
    np.testing.assert_allclose(got, np_cross_entropy(x, y, ls, reduction), rtol=1e-5, atol=1e-5)
    if torch is not None:
      want = F.cross_entropy(torch.tensor(x), torch.tensor(y), reduction=reduction, label_smoothing=ls).numpy()
      np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape", [(10,), (32, 10), (8, 4, 3, 5)])
@pytest.mark.parametrize("ls", [0.0, 0.3, 1.0])
def test_cross_entropy_with_class_indices_on_pytorchs_class_axis(shape, ls):
  x = RNG.standard_normal(shape).astype(np.float32)
  C = shape[0] if len(shape) == 1 else shape[1]
  y = RNG.integers(0, C, shape[:1] + shape[2:] if len(shape) > 1 else ())
  got = Tensor(x).cross_entropy(Tensor(y), label_smoothing=ls).item()
  np.testing.assert_allclose(got, np_cross_entropy(x, y, ls), rtol=1e-5)
  if torch is not None:
    np.testing.assert_allclose(got, F.cross_entropy(torch.tensor(x), torch.tensor(y), label_smoothing=ls).item(),
                               rtol=1e-5)
  if len(shape) > 2:
    w = RNG.random(C).astype(np.float32)
    logp = Tensor(x).log_softmax(1)
    got = logp.nll_loss(Tensor(y), weight=Tensor(w)).item()
    picked = np.take_along_axis(np_log_softmax(x, 1), y[:, None], 1)[:, 0]
    np.testing.assert_allclose(got, -(picked * w[y]).sum() / w[y].sum(), rtol=1e-5)
    with pytest.raises(RuntimeError, match=r"class axis, which is axis 1"):   # (N, d1, ..., C) targets: the old axis
      Tensor(x).cross_entropy(Tensor(RNG.integers(0, 5, shape[:-1])))


# ---- pad ----
NP_MODE = {"reflect": "reflect", "replicate": "edge", "circular": "wrap"}


@pytest.mark.parametrize("mode", ["constant", "reflect", "replicate", "circular"])
def test_pad_modes_against_numpy(mode):
  x = RNG.standard_normal((2, 3, 5, 5)).astype(np.float32)
  for flat in [(0, 2, 3, 2), (1, 1), (4, 4, 0, 4), (1, 2, 3, 4, 1, 2)]:
    pairs = [(0, 0)] * (4 - len(flat) // 2) + [tuple(flat[k:k + 2]) for k in range(0, len(flat), 2)][::-1]
    want = np.pad(x, pairs, mode=NP_MODE.get(mode, "constant"))
    np.testing.assert_array_equal(Tensor(x).pad(flat, mode=mode).numpy(), want, err_msg=f"{mode} {flat}")
    np.testing.assert_array_equal(Tensor(x).pad(padding=pairs, mode=mode).numpy(), want)


@needs_torch
@pytest.mark.parametrize("mode", ["constant", "reflect", "replicate", "circular"])
def test_pad_modes_with_negative_sizes_against_pytorch(mode):
  x = RNG.standard_normal((1, 1, 5, 5)).astype(np.float32)
  cases = [(-1, 2, 2, -1), (3, -3, 0, -3), (3, -5, 1, -5), (0, 0, 0, -5), (1, -2, 2, -1), (0, 2, 3, 2)]
  for flat in cases:
    left = [5 + min(lo, 0) + min(hi, 0) for lo, hi in zip(flat[::2], flat[1::2])]
    if mode == "circular" and any(max(lo, hi) > n for lo, hi, n in zip(flat[::2], flat[1::2], left)):
      # (3, -3): the 2 left wrap around more than once; PyTorch raises or (with another cut) writes overlapping memory
      with pytest.raises(RuntimeError, match="more than once"): Tensor(x).pad(flat, mode=mode)
      continue
    want = F.pad(torch.tensor(x), flat, mode=mode).numpy()
    np.testing.assert_array_equal(Tensor(x).pad(flat, mode=mode).numpy(), want, err_msg=f"{mode} {flat}")
  if mode == "replicate":   # no limit on the size
    np.testing.assert_array_equal(Tensor(x).pad((3, 11, 0, 30), mode=mode).numpy(),
                                  F.pad(torch.tensor(x), (3, 11, 0, 30), mode=mode).numpy())


def test_pad_mode_gradient_sums_the_copies():
  x = RNG.standard_normal((3, 5))
  w = RNG.standard_normal((3, 9))
  for mode in ("reflect", "replicate", "circular"):
    t = Tensor(x)
    (g,) = gradient((t.pad((2, 2), mode=mode) * Tensor(w)).sum(), [t])
    want = np.zeros_like(x)
    idx = np.pad(np.arange(5), (2, 2), mode=NP_MODE[mode])
    for j, i in enumerate(idx): want[:, i] += w[:, j]
    np.testing.assert_allclose(g.numpy(), want, rtol=1e-12)


def test_pad_mode_errors():
  x = Tensor(np.zeros((1, 1, 5, 5), np.float32))
  with pytest.raises(RuntimeError, match="reflect padding .* less than its size 5"): x.pad((3, 5, 0, 0), mode="reflect")
  with pytest.raises(ValueError, match="circular padding .* more than once"): x.pad((3, 6, 0, 0), mode="circular")
  with pytest.raises(ValueError, match="mode must be one of"): x.pad((1, 1), mode="wrap")
  with pytest.raises(ValueError, match="takes no value"): x.pad((1, 1), mode="reflect", value=2.0)
  with pytest.raises(ValueError, match="empty"): Tensor(np.zeros((2, 0), np.float32)).pad((1, 1), mode="replicate")


# ---- gelu and erf ----
def test_gelu_both_forms_against_float64():
  x = np.concatenate([np.linspace(-12, 12, 481), [-400, -300, 300, 400, 0]]).astype(np.float32)
  xd = x.astype(np.float64)
  exact = xd * 0.5 * (1 + np.vectorize(math.erf)(xd / math.sqrt(2)))
  tanh = 0.5 * xd * (1 + np.tanh(math.sqrt(2 / math.pi) * (xd + 0.044715 * xd ** 3)))
  np.testing.assert_allclose(Tensor(x).gelu(approximate="none").numpy(), exact, rtol=2e-6, atol=2e-7)
  np.testing.assert_allclose(Tensor(x).gelu(approximate="tanh").numpy(), tanh, rtol=2e-6, atol=2e-7)
  np.testing.assert_array_equal(Tensor(x).gelu().numpy(), Tensor(x).gelu(approximate="tanh").numpy())  # the default
  np.testing.assert_allclose(Tensor(x).erf().numpy(), np.vectorize(math.erf)(xd), atol=2e-7)
  if torch is not None:
    for a in ("none", "tanh"):
      # PyTorch's float32 tanh form loses the tail's digits (1 + tanh cancels): within 1e-6, as tinygrad's tests
      np.testing.assert_allclose(Tensor(x).gelu(approximate=a).numpy(), F.gelu(torch.tensor(x), approximate=a).numpy(),
                                 rtol=2e-6, atol=1e-6)
  with pytest.raises(ValueError, match="approximate"): Tensor(x).gelu(approximate="exact")


def test_exact_gelu_gradient():
  x = np.linspace(-5, 5, 41)
  t = Tensor(x)
  (g,) = gradient(t.gelu(approximate="none").sum(), [t])
  pdf = np.exp(-x * x / 2) / math.sqrt(2 * math.pi)
  np.testing.assert_allclose(g.numpy(), 0.5 * (1 + np.vectorize(math.erf)(x / math.sqrt(2))) + x * pdf, atol=2e-6)


# ---- minimum and maximum on bools ----
@pytest.mark.parametrize("op", ["minimum", "maximum"])
def test_minimum_maximum_on_bools(op):
  a = np.array([True, False, False])
  for b in (True, False, np.array([True, True, False]), 1.2, -3):
    bt = Tensor(b) if isinstance(b, np.ndarray) else b
    got = getattr(Tensor(a), op)(bt).numpy()
    want = getattr(np, op)(a, b)
    np.testing.assert_allclose(got, want, rtol=1e-7, err_msg=f"{op}({a}, {b})")   # 1.2 in float32
    if isinstance(b, (bool, np.ndarray)): assert got.dtype == np.bool_


# ---- the errors ----
def test_flip_of_an_axis_twice_is_an_error():
  x = Tensor(np.arange(12, dtype=np.float32).reshape(3, 4))
  for axes in ((0, 0), (1, 1), (1, -1)):
    with pytest.raises(RuntimeError, match="more than once"): x.flip(axes)
  np.testing.assert_array_equal(x.flip((0, 1)).numpy(), np.arange(12).reshape(3, 4)[::-1, ::-1])


def test_one_hot_needs_num_classes():
  t = Tensor(np.array([1, 2, 4], np.int32))
  with pytest.raises(ValueError, match=r"num_classes .* got -1.*int\(t.max\(\).item\(\)\) \+ 1"): t.one_hot(-1)
  with pytest.raises(TypeError): t.one_hot()
  np.testing.assert_array_equal(t.one_hot(6).numpy(), np.eye(6, dtype=np.int32)[[1, 2, 4]])
  data = np.array([[[1, 2, 3], [0, 3, 5]], [[1, 2, 3], [0, 3, 5]]])
  np.testing.assert_array_equal(Tensor(data).one_hot(8).numpy(), np.eye(8, dtype=np.int32)[data])


def test_cumsum_on_an_axis_the_tensor_lacks():
  s = Tensor(np.float32(2.5))
  assert s.cumsum(0).item() == 2.5 and s.cumsum(-1).item() == 2.5
  with pytest.raises(IndexError): s.cumsum(1)
  v = Tensor(np.arange(20, dtype=np.float32))
  for axis in (1, -2):
    with pytest.raises(IndexError): v.cumsum(axis)


def test_stack_with_a_tensor_as_its_axis():
  a, b, c = (Tensor(np.array([1.0, 2.0])) for _ in range(3))
  with pytest.raises(TypeError, match="axis must be an int, got Tensor.*put it in the list"): Tensor.stack((a, b), c)
  with pytest.raises(ValueError): Tensor.stack((a, b), c)           # tinygrad's test expects a ValueError
  with pytest.raises(UsageError): a.stack(b, dim=c)
  with pytest.raises(IndexError): Tensor.stack(Tensor(np.zeros((4, 5, 3), np.float32)), dim=77)
  for dim in range(-1, 3):
    xs = [RNG.standard_normal((5, 6, 3)).astype(np.float32) for _ in range(3)]
    np.testing.assert_array_equal(Tensor.stack(*map(Tensor, xs), dim=dim).numpy(), np.stack(xs, dim))
