"""uopc.nn's modules in PyTorch's shapes (issue 47): convolutions, batch norm, pools, containers, activations,
nn.init; no_grad; in-place ops and PyTorch's version-counter rule. References in NumPy float64."""
import math
import numpy as np
import pytest
from numpy.lib.stride_tricks import sliding_window_view
from uopc import Tensor, TinyJit, nn, no_grad, optim
from uopc.grad_mode import enable_grad, is_grad_enabled

pytestmark = pytest.mark.ch14
rng = np.random.default_rng(47)


def conv_np(x, w, b, stride=1, pad=0):
  n = w.ndim - 2
  xp = np.pad(x, [(0, 0), (0, 0)] + [(pad, pad)] * n)
  cols = sliding_window_view(xp, w.shape[2:], axis=tuple(range(2, 2 + n)))
  cols = cols[(slice(None), slice(None)) + (slice(None, None, stride),) * n]
  sub = "hw"[:n]
  out = np.einsum(f"nc{sub}{'ij'[:n]},oc{'ij'[:n]}->no{sub}", cols, w)
  return out + b.reshape(1, -1, *[1] * n)


@pytest.mark.parametrize("n, cls", [(1, nn.Conv1d), (2, nn.Conv2d)])
def test_conv_modules_match_numpy(n, cls):
  conv = cls(3, 4, 3, stride=2, padding=1, seed=0)
  assert conv.weight.shape == (4, 3, *[3] * n) and conv.bias.shape == (4,)
  bound = 1 / math.sqrt(3 * 3 ** n)   # PyTorch's default initialisation
  assert 0.8 * bound < np.abs(conv.weight.numpy()).max() <= bound
  x = rng.standard_normal((2, 3, *[9] * n)).astype(np.float32)
  want = conv_np(x.astype(np.float64), conv.weight.numpy().astype(np.float64), conv.bias.numpy(), 2, 1)
  np.testing.assert_allclose(conv(Tensor(x)).numpy(), want, rtol=1e-5, atol=1e-5)


def test_conv_transpose2d_is_the_gradient_of_conv2d():
  # conv_transpose2d(y, w) is d/dx <conv2d(x, w), y>: checked against NumPy's scatter of each input pixel
  ct = nn.ConvTranspose2d(4, 2, 3, stride=2, padding=1, output_padding=1, seed=1)
  assert ct.weight.shape == (4, 2, 3, 3)
  y = rng.standard_normal((1, 4, 5, 5)).astype(np.float32)
  w, b = ct.weight.numpy().astype(np.float64), ct.bias.numpy()
  full = np.zeros((1, 2, 2 * 4 + 3, 2 * 4 + 3))
  for i in range(5):
    for j in range(5): full[0, :, 2 * i:2 * i + 3, 2 * j:2 * j + 3] += np.einsum("c,cokl->okl", y[0, :, i, j], w)
  want = full[:, :, 1:1 + 10, 1:1 + 10] + b.reshape(1, -1, 1, 1)   # padding 1 cut, output_padding adds a row
  np.testing.assert_allclose(ct(Tensor(y)).numpy(), want, rtol=1e-5, atol=1e-5)


def test_batchnorm2d_trains_with_batch_statistics_and_evaluates_with_running_ones():
  bn = nn.BatchNorm2d(3, momentum=0.1)
  assert sorted(bn.named_parameters()) == ["bias", "weight"]
  assert sorted(bn.named_buffers()) == ["num_batches_tracked", "running_mean", "running_var"]
  rm, rv = np.zeros(3), np.ones(3)
  for step in range(2):
    x = (rng.standard_normal((4, 3, 5, 5)) * 2 + 1).astype(np.float32)
    y = bn(Tensor(x)).numpy()
    mean, var = x.astype(np.float64).mean((0, 2, 3)), x.astype(np.float64).var((0, 2, 3))
    want = (x - mean.reshape(1, 3, 1, 1)) / np.sqrt(var.reshape(1, 3, 1, 1) + 1e-5)
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)
    rm, rv = 0.9 * rm + 0.1 * mean, 0.9 * rv + 0.1 * x.astype(np.float64).var((0, 2, 3), ddof=1)
    np.testing.assert_allclose(bn.running_mean.numpy(), rm, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(bn.running_var.numpy(), rv, rtol=1e-5, atol=1e-6)
  assert bn.num_batches_tracked.numpy() == 2
  bn.eval()
  x = rng.standard_normal((2, 3, 4, 4)).astype(np.float32)
  want = (x - rm.reshape(1, 3, 1, 1)) / np.sqrt(rv.reshape(1, 3, 1, 1) + 1e-5)
  np.testing.assert_allclose(bn(Tensor(x)).numpy(), want, rtol=1e-4, atol=1e-5)
  state = bn.state_dict()   # buffers in the checkpoint, as PyTorch's
  assert sorted(state) == ["bias", "num_batches_tracked", "running_mean", "running_var", "weight"]
  fresh = nn.BatchNorm2d(3)
  fresh.load_state_dict(state)
  np.testing.assert_array_equal(fresh.running_var.numpy(), bn.running_var.numpy())


def test_batchnorm1d_and_its_bad_input():
  bn = nn.BatchNorm1d(4)
  x = rng.standard_normal((6, 4)).astype(np.float32)
  want = (x - x.mean(0)) / np.sqrt(x.var(0) + 1e-5)
  np.testing.assert_allclose(bn(Tensor(x)).numpy(), want, rtol=1e-4, atol=1e-4)
  with pytest.raises(ValueError, match="4 channels"): bn(Tensor(np.zeros((6, 3), np.float32)))
  with pytest.raises(ValueError, match="more than 1 value"): bn(Tensor(np.zeros((1, 4), np.float32)))


def test_pools_flatten_and_sequential():
  x = rng.standard_normal((2, 3, 8, 8)).astype(np.float32)
  win = x.reshape(2, 3, 4, 2, 4, 2)
  np.testing.assert_array_equal(nn.MaxPool2d(2)(Tensor(x)).numpy(), win.max((3, 5)))
  np.testing.assert_allclose(nn.AvgPool2d(2)(Tensor(x)).numpy(), win.mean((3, 5)), rtol=1e-6)
  net = nn.Sequential(nn.MaxPool2d(2), nn.Flatten(), nn.Identity())
  assert len(net) == 3 and isinstance(net[1], nn.Flatten) and len(net[1:]) == 2
  np.testing.assert_array_equal(net(Tensor(x)).numpy(), win.max((3, 5)).reshape(2, -1))


@pytest.mark.parametrize("size, out", [((7, 5), (3, 2)), ((6, 6), 3), ((5, 4), (None, 3))])
def test_adaptive_avg_pool2d_matches_pytorchs_windows(size, out):
  x = rng.standard_normal((2, 3, *size))
  outs = (out, out) if isinstance(out, int) else tuple(i if o is None else o for o, i in zip(out, size))
  want = np.zeros((2, 3, *outs))
  for a in range(outs[0]):
    for b in range(outs[1]):
      r = slice(a * size[0] // outs[0], -(-(a + 1) * size[0] // outs[0]))
      c = slice(b * size[1] // outs[1], -(-(b + 1) * size[1] // outs[1]))
      want[:, :, a, b] = x[:, :, r, c].mean((2, 3))
  np.testing.assert_allclose(nn.AdaptiveAvgPool2d(out)(Tensor(x)).numpy(), want, rtol=1e-12)


def test_module_activations_are_the_tensor_methods_with_pytorchs_defaults():
  x = rng.standard_normal(16) * 3
  t = Tensor(x)
  erf = np.vectorize(math.erf)
  table = [(nn.ReLU(), np.maximum(x, 0)), (nn.Tanh(), np.tanh(x)), (nn.Sigmoid(), 1 / (1 + np.exp(-x))),
           (nn.GELU(), 0.5 * x * (1 + erf(x / math.sqrt(2)))), (nn.LeakyReLU(0.2), np.where(x > 0, x, 0.2 * x)),
           (nn.SiLU(), x / (1 + np.exp(-x))), (nn.ReLU(inplace=True), np.maximum(x, 0)),
           (nn.Softmax(dim=0), np.exp(x) / np.exp(x).sum())]
  for module, want in table: np.testing.assert_allclose(module(t).numpy(), want, rtol=1e-10, atol=1e-12)
  with pytest.raises(TypeError, match="unexpected"): nn.ReLU(slope=1)


def test_init_functions_draw_in_pytorchs_bounds():
  w = Tensor(np.zeros((64, 32, 3, 3), np.float32), requires_grad=True)
  nn.init.kaiming_uniform_(w, a=math.sqrt(5))
  bound = math.sqrt(3) * math.sqrt(2 / 6) / math.sqrt(32 * 9)
  assert 0.95 * bound < np.abs(w.numpy()).max() <= bound and w.requires_grad
  nn.init.xavier_uniform_(w)
  bound = math.sqrt(6 / (32 * 9 + 64 * 9))
  assert 0.95 * bound < np.abs(w.numpy()).max() <= bound
  nn.init.normal_(w, 2.0, 0.5)
  assert abs(w.numpy().mean() - 2) < 0.01 and abs(w.numpy().std() - 0.5) < 0.01
  nn.init.zeros_(w)
  assert not w.numpy().any()
  with pytest.raises(ValueError, match="2 or more dimensions"): nn.init.xavier_uniform_(Tensor(np.zeros(3)))
  t = Tensor.glorot_uniform(10, 20)
  assert np.abs(t.numpy()).max() <= math.sqrt(6 / 30) and t.shape == (10, 20)
  assert np.abs(Tensor.kaiming_uniform(8, 50, a=0).numpy()).max() <= math.sqrt(6 / 50)


def test_no_grad_as_context_manager_and_decorator():
  x = Tensor(np.array([1.0, 2.0, 3.0]), requires_grad=True)
  with no_grad():
    assert not is_grad_enabled()
    cut = (x * x).sum()
    with enable_grad(): kept = (x * x).sum()
  assert is_grad_enabled()
  @no_grad
  def bare(a): return (a * 5).sum()
  @no_grad()
  def called(a): return (a * 7).sum()
  (cut + kept + bare(x) + called(x)).backward()
  np.testing.assert_array_equal(x.grad.numpy(), [2.0, 4.0, 6.0])   # only kept's x*x: d/dx = 2x
  assert cut.item() == 14 and bare.__name__ == "bare"
  with pytest.raises(RuntimeError, match="no_grad"): cut.backward()   # PyTorch's "does not require grad"


def test_batchnorm_running_statistics_under_tinyjit_are_the_eager_ones():
  xs = [rng.standard_normal((4, 1, 6, 6)).astype(np.float32) for _ in range(5)]
  got = []
  for jit in (False, True):
    bn, conv = nn.BatchNorm2d(2), nn.Conv2d(1, 2, 3, seed=0)
    opt = optim.SGD(conv.parameters() + bn.parameters(), lr=0.1)
    def step(x):
      opt.zero_grad()
      loss = bn(conv(x)).square().mean()
      loss.backward()
      opt.step(loss)
      return loss
    run = TinyJit(step) if jit else step
    for x in xs: run(Tensor(x))
    got.append(bn.state_dict())
    assert bn.num_batches_tracked.item() == 5
  for k in got[0]: np.testing.assert_allclose(got[1][k], got[0][k], rtol=0, atol=1e-6, err_msg=k)
  assert np.abs(got[0]["running_mean"]).max() > 1e-3   # the statistics moved


def _cumulative_bn_reference(xs):
  """PyTorch's momentum=None rule in float64: the running statistics are the plain averages of every batch's mean and
  unbiased variance so far."""
  means = [x.astype(np.float64).mean((0, 2, 3)) for x in xs]
  varis = [x.astype(np.float64).var((0, 2, 3), ddof=1) for x in xs]
  return np.mean(means, 0), np.mean(varis, 0)


@pytest.mark.parametrize("mode", ["eager", "step program", "kernel by kernel"])
def test_batchnorm_with_cumulative_momentum_under_tinyjit(mode):
  """momentum=None: the factor 1 / (batches + 1) comes from num_batches_tracked in the kernel; read into Python, a
  captured step replayed the second batch's 1/2 at every later step (running mean 3.22 where the average is 2.02)."""
  from uopc.helpers import Context
  xs = [(rng.standard_normal((4, 3, 5, 5)) * (k + 1) + k).astype(np.float32) for k in range(6)]
  bn = nn.BatchNorm2d(3, momentum=None)
  with Context(JIT_GRAPH=int(mode == "step program")):
    step = (lambda x: bn(x).sum().realize()) if mode == "eager" else TinyJit(lambda x: bn(x).sum().realize())
    for x in xs: step(Tensor(x))
  want_mean, want_var = _cumulative_bn_reference(xs)
  assert bn.num_batches_tracked.item() == 6
  np.testing.assert_allclose(bn.running_mean.numpy(), want_mean, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(bn.running_var.numpy(), want_var, rtol=1e-5, atol=1e-6)


def test_batchnorm_with_cumulative_momentum_matches_torch():
  torch = pytest.importorskip("torch")
  xs = [(rng.standard_normal((4, 3, 5, 5)) * (k + 1) + k).astype(np.float32) for k in range(6)]
  bn, ref = nn.BatchNorm2d(3, momentum=None), torch.nn.BatchNorm2d(3, momentum=None)
  step = TinyJit(lambda x: bn(x).realize())
  for x in xs:
    out = step(Tensor(x)).numpy()
    np.testing.assert_allclose(out, ref(torch.tensor(x)).detach().numpy(), rtol=1e-5, atol=1e-5)
  for k, v in ref.state_dict().items():
    np.testing.assert_allclose(bn.state_dict()[k], v.numpy(), rtol=1e-5, atol=1e-6, err_msg=k)


def test_inplace_ops_and_the_version_counter_rule():
  w = Tensor(np.ones(3, np.float32), requires_grad=True)
  with pytest.raises(RuntimeError, match="leaf Tensor that requires grad"): w.add_(1)
  with no_grad():
    w.add_(1).mul_(Tensor([1.0, 2.0, 3.0])).sub_(1, alpha=2).clamp_(0.5, 3.5)
  np.testing.assert_array_equal(w.numpy(), [0.5, 2.0, 3.5])
  a = Tensor(np.arange(4, dtype=np.float32))
  a.fill_(2).copy_(Tensor(np.array([1, 2, 3, 4])))   # copied into a's dtype
  assert a.dtype is Tensor([1.0]).dtype and a.numpy().tolist() == [1, 2, 3, 4]
  a.masked_fill_(Tensor([True, False, True, False]), 9).div_(2)
  np.testing.assert_array_equal(a.numpy(), [4.5, 1, 4.5, 2])
  a.zero_()
  assert not a.numpy().any()
  x = Tensor(np.array([1.0, 2.0, 3.0]), requires_grad=True)
  z = (x * x).sum()          # saves x's data for its gradient
  with no_grad(): x.mul_(2)
  with pytest.raises(RuntimeError, match="modified by an inplace operation"): z.backward()   # PyTorch's rule
  x.grad = None
  (x * x).sum().backward()   # a graph built after the change reads the new value
  np.testing.assert_array_equal(x.grad.numpy(), [4.0, 8.0, 12.0])
  data, w2 = Tensor(np.array([1.0, 2.0])), Tensor(np.array([3.0, 4.0]), requires_grad=True)
  z = (data * w2).sum()      # dz/dw2 is data's old value
  data.add_(10)
  with pytest.raises(RuntimeError, match="add_"): z.backward()
  x = Tensor(np.array([1.0, 2.0, 3.0]), requires_grad=True)
  y = x * 2
  z = (y * y).sum()
  y.add_(1)                  # a lazy y: z's graph keeps the old value, so its gradient is the one of what was used
  z.backward()               # (PyTorch raises here; nothing is overwritten in uopc)
  np.testing.assert_array_equal(x.grad.numpy(), [8.0, 16.0, 24.0])
  x.grad = None
  y.mul_(3).sum().backward()   # d/dx 3 (2x + 1) = 6
  np.testing.assert_array_equal(x.grad.numpy(), [6.0, 6.0, 6.0])
  b = Tensor(np.array([1.0, 2.0]))
  stale = b * 10             # built from b's old value, not yet computed
  b.add_(1)
  with pytest.raises(RuntimeError, match="changed in place"): stale.numpy()
  np.testing.assert_array_equal((b * 10).numpy(), [20.0, 30.0])
  with pytest.raises(ValueError, match="broadcast"): b.add_(Tensor(np.ones(3)))
  c = Tensor(np.zeros(3))
  c.copy_(x * 2)             # a gradient flows through the copied value, as in PyTorch
  x.grad = None
  (c * c).sum().backward()
  np.testing.assert_array_equal(x.grad.numpy(), [8.0, 16.0, 24.0])


def test_an_inplace_parameter_update_is_seen_by_a_captured_step():
  w = Tensor(np.ones(2, np.float32), requires_grad=True)
  step = TinyJit(lambda x: (x * w).sum().realize())
  for _ in range(3): step(Tensor(np.ones(2, np.float32)))
  with no_grad(): w.mul_(3)
  assert step(Tensor(np.ones(2, np.float32))).item() == 6.0


def test_a_pytorch_style_module_with_forward_losses_and_freezing():
  class Net(nn.Module):
    def __init__(self):
      self.fc1, self.fc2 = nn.Linear(4, 8, seed=0), nn.Linear(8, 3, seed=1)
    def forward(self, x): return self.fc2(self.fc1(x).relu())
  net, criterion = Net(), nn.CrossEntropyLoss()
  x, y = rng.standard_normal((5, 4)).astype(np.float32), np.array([0, 2, 1, 1, 0])
  logits = net(Tensor(x))
  h = np.maximum(x @ net.fc1.weight.numpy().T + net.fc1.bias.numpy(), 0) @ net.fc2.weight.numpy().T \
    + net.fc2.bias.numpy()
  h = h.astype(np.float64)
  logp = h - np.log(np.exp(h - h.max(1, keepdims=True)).sum(1, keepdims=True)) - h.max(1, keepdims=True)
  assert abs(criterion(logits, Tensor(y.astype(np.int32))).item() + logp[np.arange(5), y].mean()) < 1e-5
  assert abs(nn.NLLLoss()(Tensor(logp), Tensor(y.astype(np.int32))).item() + logp[np.arange(5), y].mean()) < 1e-12
  assert abs(nn.MSELoss()(Tensor(h), Tensor(np.zeros_like(h))).item() - (h ** 2).mean()) < 1e-12
  assert nn.MSELoss("none")(Tensor(h), Tensor(h)).shape == h.shape
  net.fc1.weight.requires_grad_(False)
  # PyTorch's rule: a frozen parameter is still a parameter (and in state_dict); the optimizers are handed the others
  assert sorted(net.named_parameters()) == ["fc1.bias", "fc1.weight", "fc2.bias", "fc2.weight"]
  assert {id(p) for p in net.parameters()} == {id(net.fc1.bias), id(net.fc2.bias), id(net.fc2.weight)}
  criterion(net(Tensor(x)), Tensor(y.astype(np.int32))).backward()
  assert net.fc1.weight.grad is None and net.fc2.weight.grad is not None
  net.zero_grad()
  assert net.fc2.weight.grad is None
  with pytest.raises(NotImplementedError, match="forward"): nn.Module()(Tensor(x))
