"""A PyTorch user's first CNN (issue 47): a LeNet built from uopc.nn modules on random 28x28 data, trained with SGD
(momentum) and AdamW, eager, under TinyJit kernel by kernel and as TinyJit's step program, evaluated under
no_grad(), its checkpoint (a frozen layer included) saved and loaded. The reference is the same net in NumPy float64,
forward and backward written out."""
import numpy as np
import pytest
from numpy.lib.stride_tricks import sliding_window_view
from uopc import Tensor, TinyJit, nn, no_grad, optim
from uopc.helpers import Context
from uopc.optim import adamw_step_numpy, sgd_step_numpy

pytestmark = pytest.mark.ch14
N, STEPS = 8, 6
CONVS, LINEARS = {"0": 2, "3": 0}, ("7", "9", "11")   # conv layer name -> its padding; the linear layers in order


def lenet(seed: int = 0) -> nn.Sequential:
  return nn.Sequential(nn.Conv2d(1, 6, 5, padding=2, seed=seed), nn.ReLU(), nn.MaxPool2d(2),
                       nn.Conv2d(6, 16, 5, seed=seed + 1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                       nn.Linear(400, 120, seed=seed + 2), nn.ReLU(), nn.Linear(120, 84, seed=seed + 3), nn.ReLU(),
                       nn.Linear(84, 10, seed=seed + 4))


def batches(seed: int = 7):
  """Two batches, in turn: a captured step reads each step's new data, and the net can learn them."""
  rng = np.random.default_rng(seed)
  two = [(rng.standard_normal((N, 1, 28, 28)).astype(np.float32), rng.integers(0, 10, N)) for _ in range(2)]
  return [two[k % 2] for k in range(STEPS)]


# ---- the reference: NumPy float64, PyTorch's rules (max pooling's gradient to the first maximum of its window) ----
def conv_np(x, w, b, pad):
  cols = sliding_window_view(np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad))), w.shape[2:], axis=(2, 3))
  return np.einsum("nchwij,ocij->nohw", cols, w) + b[None, :, None, None], cols


def conv_back_np(cols, w, pad, dout, need_dx: bool):
  dw, db = np.einsum("nchwij,nohw->ocij", cols, dout), dout.sum((0, 2, 3))
  if not need_dx: return dw, db, None
  n, _, ho, wo = dout.shape
  dxp = np.zeros((n, w.shape[1], ho + w.shape[2] - 1, wo + w.shape[3] - 1))
  for i in range(w.shape[2]):
    for j in range(w.shape[3]): dxp[:, :, i:i + ho, j:j + wo] += np.einsum("nohw,oc->nchw", dout, w[:, :, i, j])
  return dw, db, dxp[:, :, pad:dxp.shape[2] - pad, pad:dxp.shape[3] - pad]


def pool_np(x):
  n, c, h, w = x.shape
  win = x.reshape(n, c, h // 2, 2, w // 2, 2).transpose(0, 1, 2, 4, 3, 5).reshape(n, c, h // 2, w // 2, 4)
  first = win.argmax(-1)
  return np.take_along_axis(win, first[..., None], -1)[..., 0], first


def pool_back_np(first, dout, shape):
  n, c, h, w = shape
  dwin = np.zeros((n, c, h // 2, w // 2, 4))
  np.put_along_axis(dwin, first[..., None], dout[..., None], -1)
  return dwin.reshape(n, c, h // 2, w // 2, 2, 2).transpose(0, 1, 2, 4, 3, 5).reshape(shape)


def loss_and_grads_np(p, x, y):
  """Cross entropy (mean) of the LeNet at parameters p, and its gradient for every parameter."""
  saved, h = [], x.astype(np.float64)
  for name, pad in CONVS.items():
    pre, cols = conv_np(h, p[f"{name}.weight"], p[f"{name}.bias"], pad)
    h, first = pool_np(np.maximum(pre, 0))
    saved.append((name, pad, cols, pre, first))
  flat = h.reshape(len(x), -1)
  acts = [flat]
  for k, name in enumerate(LINEARS):
    z = acts[-1] @ p[f"{name}.weight"].T + p[f"{name}.bias"]
    acts.append(np.maximum(z, 0) if k < 2 else z)
  logits = acts[-1]
  shifted = logits - logits.max(1, keepdims=True)
  logp = shifted - np.log(np.exp(shifted).sum(1, keepdims=True))
  loss = -logp[np.arange(len(y)), y].mean()
  g = np.exp(logp)
  g[np.arange(len(y)), y] -= 1
  g /= len(y)
  grads = {}
  for k in reversed(range(3)):
    name = LINEARS[k]
    grads[f"{name}.weight"], grads[f"{name}.bias"] = g.T @ acts[k], g.sum(0)
    g = g @ p[f"{name}.weight"]
    if k > 0: g = g * (acts[k] > 0)
  g = g.reshape(h.shape)
  for name, pad, cols, pre, first in reversed(saved):
    g = pool_back_np(first, g, pre.shape) * (pre > 0)
    grads[f"{name}.weight"], grads[f"{name}.bias"], g = conv_back_np(cols, p[f"{name}.weight"], pad, g, name != "0")
  return loss, logits, grads


def reference_run(init, data, kind: str, frozen=()):
  p = {k: v.astype(np.float64) for k, v in init.items()}
  state = {k: (np.zeros_like(v), np.zeros_like(v)) for k, v in p.items()}
  losses = []
  for t, (x, y) in enumerate(data, 1):
    loss, _, grads = loss_and_grads_np(p, x, y)
    losses.append(loss)
    for k in p:
      if k.split(".")[0] in frozen: continue
      if kind == "sgd": p[k], b = sgd_step_numpy(p[k], grads[k], state[k][0], 0.05, momentum=0.9); state[k] = (b, b)
      else: p[k], *state[k] = adamw_step_numpy(p[k], grads[k], *state[k], t, lr=2e-3)
  return np.array(losses), p


def make_optimizer(model, kind: str):
  if kind == "sgd": return optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
  return optim.AdamW(model.parameters(), lr=2e-3)


def train(model, opt, data, jit: bool):
  def step(x, y):
    opt.zero_grad()
    loss = model(x).cross_entropy(y)
    loss.backward()
    opt.step(loss)
    return loss
  run = TinyJit(step) if jit else step
  return np.array([run(Tensor(x), Tensor(y.astype(np.int32))).item() for x, y in data])


MODES = {"eager": (False, 1), "replay": (True, 0), "program": (True, 1)}   # (TinyJit, JIT_GRAPH)


def run_mode(kind: str, mode: str, data):
  jit, graph = MODES[mode]
  model = lenet()
  with Context(JIT_GRAPH=graph): losses = train(model, make_optimizer(model, kind), data, jit)
  return losses, model


@pytest.mark.parametrize("kind", ["sgd", "adamw"])
def test_lenet_trains_as_the_float64_reference_eager_replayed_and_as_one_program(kind):
  """Eager, TinyJit kernel by kernel (JIT_GRAPH=0) and TinyJit's step program (the default), each against NumPy."""
  data = batches()
  want, want_p = reference_run(lenet().state_dict(), data, kind)
  runs = {}
  for mode in MODES:
    runs[mode], model = run_mode(kind, mode, data)
    np.testing.assert_allclose(runs[mode], want, rtol=0, atol=2e-5, err_msg=mode)   # float32 against float64
    for k, v in model.state_dict().items():
      np.testing.assert_allclose(v, want_p[k], rtol=0, atol=5e-5, err_msg=f"{mode} {k}")
  assert want[4] + want[5] < want[0] + want[1] - 0.1   # it learns the two batches: a step that did nothing would show
  np.testing.assert_array_equal(runs["replay"], runs["eager"])   # the replay runs the eager run's kernels
  # the step program sums some reductions in another order than the kernels alone (NOTES 45, corrected): a bound
  np.testing.assert_allclose(runs["program"], runs["eager"], rtol=0, atol=1e-6)


def test_lenet_evaluates_under_no_grad_and_its_gradients_match_the_reference():
  model, (x, y) = lenet(), batches()[0]
  p = {k: v.astype(np.float64) for k, v in model.state_dict().items()}
  want_loss, want_logits, want_grads = loss_and_grads_np(p, x, y)
  model.eval()
  with no_grad():
    logits = model(Tensor(x))
    loss = logits.cross_entropy(Tensor(y.astype(np.int32)))
  np.testing.assert_allclose(logits.numpy(), want_logits, rtol=0, atol=1e-5)
  assert abs(loss.item() - want_loss) < 1e-5
  assert (logits.argmax(1).numpy() == want_logits.argmax(1)).all()
  model.train()
  loss = model(Tensor(x)).cross_entropy(Tensor(y.astype(np.int32)))
  loss.backward()
  params = model.named_parameters()
  first, *rest = [t.grad for t in params.values()]
  first.realize(*rest)   # one plan for every gradient, as a training step realizes them (one a parameter: ten plans)
  for k, t in params.items():
    np.testing.assert_allclose(t.grad.numpy(), want_grads[k], rtol=0, atol=2e-5, err_msg=k)


def test_a_loss_built_under_no_grad_sends_no_gradient():
  model, (x, y) = lenet(), batches()[0]
  with no_grad(): loss = model(Tensor(x)).cross_entropy(Tensor(y.astype(np.int32)))
  kept = model(Tensor(x)).cross_entropy(Tensor(y.astype(np.int32)))
  (loss + kept).backward()   # only kept's graph reaches the weights
  _, _, want = loss_and_grads_np({k: v.astype(np.float64) for k, v in model.state_dict().items()}, x, y)
  np.testing.assert_allclose(model[0].weight.grad.numpy(), want["0.weight"], rtol=0, atol=2e-5)


def test_a_checkpoint_with_a_frozen_layer_round_trips(tmp_path):
  data = batches()
  model = lenet()
  init = model.state_dict()
  for t in (model[0].weight, model[0].bias): t.requires_grad = False   # the first conv frozen, as in fine-tuning
  opt = optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
  assert len(opt.params) == 8                                            # the optimizer skips the frozen ones
  losses = train(model, opt, data, jit=False)
  want, want_p = reference_run(init, data, "sgd", frozen=("0",))
  np.testing.assert_allclose(losses, want, rtol=0, atol=2e-5)
  np.testing.assert_array_equal(model[0].weight.numpy(), init["0.weight"])
  # state_dict keeps the frozen layer (PyTorch's 10 keys): a checkpoint that drops a layer fails the round trip
  model.save(tmp_path / "lenet.npz")
  assert sorted(np.load(tmp_path / "lenet.npz").files) == sorted(init)
  fresh = lenet(seed=5)
  fresh.load(tmp_path / "lenet.npz")
  for k, v in fresh.state_dict().items(): np.testing.assert_array_equal(v, model.state_dict()[k], err_msg=k)
  x = Tensor(data[0][0])
  with no_grad(): np.testing.assert_array_equal(fresh.eval()(x).numpy(), model.eval()(x).numpy())
