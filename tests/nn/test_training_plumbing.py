"""Training plumbing (chapter 14): one plan for many tensors, assign, plan reuse across steps, parallel compiles,
and a captured step replayed without its graph (uopc.jit.TinyJit). Values are checked against NumPy."""
import numpy as np
import pytest
import uopc.kernelize
import uopc.runtime.build
import uopc.tensor
from uopc.jit import JitError, TinyJit
from uopc.kernelize import plan_cache_size
from uopc.tensor import Tensor

pytestmark = pytest.mark.ch14
rng = np.random.default_rng(0)


def test_realize_many_is_one_plan(fresh_plan_cache, monkeypatch):
  x = rng.standard_normal((8, 5)).astype(np.float32)
  calls = []
  real = uopc.kernelize.realize
  monkeypatch.setattr(uopc.tensor, "realize", lambda roots, **kw: calls.append(len(roots)) or real(roots, **kw))
  t = Tensor(x)
  a, b, c = t.exp().sum(1), (t * 2).max(0), t.relu()
  Tensor.realize(a, b, c)
  assert calls == [3]                                      # one realize, one plan, for all three
  np.testing.assert_allclose(a.numpy(), np.exp(x).sum(1), rtol=1e-5)
  np.testing.assert_allclose(b.numpy(), (x * 2).max(0), rtol=1e-6)
  np.testing.assert_allclose(c.numpy(), np.maximum(x, 0))
  assert calls == [3]                                      # .numpy() afterwards runs nothing


def test_assign_writes_into_the_same_buffer_and_the_graph_stays_the_same(fresh_plan_cache):
  w0 = rng.standard_normal((4, 3)).astype(np.float32)
  w = Tensor(w0)
  array = w._data()
  ref = w0.copy()
  for step in range(4):
    w.assign(w - 0.1 * (w * 2)).realize()                  # gradient descent on sum(w^2)
    ref = ref - 0.1 * (ref * 2)
    assert w._data() is array                               # updated in place: whoever holds w sees the new value
    np.testing.assert_allclose(w.numpy(), ref, rtol=1e-6)
    if step == 0: plans = plan_cache_size()
  assert plan_cache_size() == plans                         # every step after the first reused its plan


def test_assign_checks_shape_and_dtype():
  w = Tensor(np.zeros((2, 3), np.float32))
  with pytest.raises(ValueError, match=r"shape \(3, 2\) does not match"): w.assign(Tensor(np.zeros((3, 2), np.float32)))
  with pytest.raises(TypeError, match="dtype"): w.assign(Tensor(np.zeros((2, 3), np.float64)))


def test_a_learning_rate_held_in_a_buffer_does_not_make_a_new_plan(fresh_plan_cache):
  w, lr = Tensor(np.ones(5, np.float32)), Tensor(np.float32(0.5))
  for step, value in enumerate([0.5, 0.25, 0.125, 0.0625]):
    lr.assign(Tensor(np.float32(value))).realize()
    w.assign(w - lr * w).realize()
    if step == 1: plans = plan_cache_size()
  assert plan_cache_size() == plans
  np.testing.assert_allclose(w.numpy(), np.prod([1 - v for v in [0.5, 0.25, 0.125, 0.0625]]) * np.ones(5), rtol=1e-6)


def test_a_cold_plan_compiles_its_kernels_in_parallel(fresh_plan_cache, monkeypatch, tmp_path):
  import threading
  monkeypatch.setenv("UOPC_CACHE_DIR", str(tmp_path))       # a cold cache: every kernel is compiled
  threads = set()
  real = uopc.runtime.build.build
  def build(*a, **kw):
    threads.add(threading.get_ident())
    return real(*a, **kw)
  monkeypatch.setattr(uopc.runtime.build, "build", build)
  x = Tensor(rng.standard_normal((6, 7)).astype(np.float32))
  out = (x - x.max(1, keepdim=True)).exp().sum(1)           # four kernels
  np.testing.assert_allclose(out.numpy(), np.exp(x.numpy() - x.numpy().max(1, keepdims=True)).sum(1), rtol=1e-5)
  assert len(threads) >= 2


def sgd_step_fn(w: Tensor):
  @TinyJit
  def step(x: Tensor, y: Tensor):
    loss = ((x @ w - y) ** 2).mean()
    g = 2 * (x.T @ (x @ w - y)) / y.numel()                 # d loss / d w, written out
    w.assign(w - 0.05 * g)
    Tensor.realize(loss, w)
    return loss
  return step


def reference_sgd(w, xs, ys):
  losses = []
  for x, y in zip(xs, ys):
    r = x @ w - y
    losses.append((r ** 2).mean())
    w = w - 0.05 * 2 * (x.T @ r) / y.size
  return w, losses


def test_tinyjit_replays_a_training_step(fresh_plan_cache):
  w0 = rng.standard_normal((3, 1)).astype(np.float32)
  xs = [rng.standard_normal((16, 3)).astype(np.float32) for _ in range(6)]
  ys = [rng.standard_normal((16, 1)).astype(np.float32) for _ in range(6)]
  w = Tensor(w0)
  step = sgd_step_fn(w)
  losses = [step(Tensor(x), Tensor(y)).item() for x, y in zip(xs, ys)]
  assert step.steps is not None                             # captured on the second call, replayed after
  w_ref, loss_ref = reference_sgd(w0.astype(np.float64), xs, ys)
  np.testing.assert_allclose(losses, loss_ref, rtol=1e-4)
  np.testing.assert_allclose(w.numpy(), w_ref, rtol=1e-4, atol=1e-6)


def test_tinyjit_replay_builds_no_graph(fresh_plan_cache, monkeypatch):
  w = Tensor(np.zeros((3, 1), np.float32))
  step = sgd_step_fn(w)
  x, y = Tensor(np.ones((4, 3), np.float32)), Tensor(np.ones((4, 1), np.float32))
  step(x, y); step(x, y)
  monkeypatch.setattr(uopc.kernelize, "normalize", lambda *a: pytest.fail("replay normalized a graph"))
  monkeypatch.setattr(uopc.kernelize, "plan_for", lambda *a: pytest.fail("replay looked up a plan"))
  step(x, y)


def test_tinyjit_refuses_a_changed_shape():
  w = Tensor(np.zeros((3, 1), np.float32))
  step = sgd_step_fn(w)
  x, y = Tensor(np.ones((4, 3), np.float32)), Tensor(np.ones((4, 1), np.float32))
  step(x, y); step(x, y)
  with pytest.raises(JitError, match=r"captured for Tensor arguments \[\(\(4, 3\)"):
    step(Tensor(np.ones((5, 3), np.float32)), Tensor(np.ones((5, 1), np.float32)))
